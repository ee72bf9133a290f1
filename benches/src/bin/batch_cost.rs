//! What kelp's explicit record-batch layout costs per record, next to a
//! memcpy of the same bytes measured in the same run: building a batch,
//! validating it (what the broker does to every batch it takes), and
//! reading its records back. The figures justify the layout choice in
//! `docs/wire-format.md` (rkyv 0.8 costs ~360 ns/record to serialize and
//! ~70 ns/record to validate on this machine, PLATFORM.md).
//!
//! `target/release/batch_cost [--records N] [--value-bytes B] [--rounds R]`

use std::hint::black_box;
use std::time::Instant;

use anyhow::Result;
use clap::Parser;
use wire::{BatchBuilder, BatchView};

#[derive(Parser, Debug)]
struct Args {
    /// Records per batch.
    #[arg(long, default_value_t = 1000)]
    records: usize,
    /// Value bytes per record (keys are 16 bytes).
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Batches per measurement.
    #[arg(long, default_value_t = 2000)]
    rounds: usize,
}

/// Nanoseconds per record of `f`, run `rounds` times over `records`.
fn per_record(rounds: usize, records: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm up
    let start = Instant::now();
    for _ in 0..rounds {
        f();
    }
    start.elapsed().as_nanos() as f64 / (rounds * records) as f64
}

fn main() -> Result<()> {
    let args = Args::parse();
    let keys: Vec<String> = (0..args.records).map(|i| format!("key-{i:012}")).collect();
    let value = vec![b'v'; args.value_bytes];
    let mut builder = BatchBuilder::with_capacity(args.records * (args.value_bytes + 40));
    let mut build = || {
        builder.clear();
        for (i, key) in keys.iter().enumerate() {
            builder
                .push(1_700_000_000_000 + i as i64, key.as_bytes(), &value, &[])
                .expect("records fit a batch");
        }
        black_box(builder.finish(0, 0).len());
    };
    let encode_ns = per_record(args.rounds, args.records, &mut build);
    let batch = {
        let mut b = BatchBuilder::new();
        for key in &keys {
            b.push(1_700_000_000_000, key.as_bytes(), &value, &[])?;
        }
        b.finish(0, 0).to_vec()
    };
    let validate_ns = per_record(args.rounds, args.records, || {
        black_box(
            BatchView::validate(black_box(&batch))
                .expect("valid")
                .record_count(),
        );
    });
    let view = BatchView::validate(&batch)?;
    let read_ns = per_record(args.rounds, args.records, || {
        let mut sum = 0usize;
        for r in black_box(view).records() {
            sum += r.key.len() + r.value.len();
        }
        black_box(sum);
    });
    let mut copy = vec![0u8; batch.len()];
    let memcpy_ns = per_record(args.rounds, args.records, || {
        copy.copy_from_slice(black_box(&batch));
        black_box(&copy);
    });
    let crc_ns = per_record(args.rounds, args.records, || {
        black_box(wire::checksum::crc32c(black_box(&batch)));
    });
    println!(
        "batch: {} records of {} B values, {} bytes",
        args.records,
        args.value_bytes,
        batch.len()
    );
    for (name, ns) in [
        ("encode", encode_ns),
        ("validate", validate_ns),
        ("read", read_ns),
        ("crc32c", crc_ns),
        ("memcpy", memcpy_ns),
    ] {
        println!(
            "{name:<9} ns_per_record={ns:>7.2} ratio_to_memcpy={:>6.2}",
            ns / memcpy_ns
        );
    }
    Ok(())
}
