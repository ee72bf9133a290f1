//! criterion micro-benchmarks of the ingest and read hot path:
//!
//! - `batch_encode`: `BatchBuilder::push` of every record + `finish` (CRC);
//! - `batch_validate`: `BatchView::validate` (structure + CRC);
//! - `buffer_append`: `ActiveBuffer::append` of a validated batch into a
//!   segment's mapped buffer file (one `pwritev` into the page cache);
//! - `chunk_write`: building a chunk from batches in memory
//!   (`build_chunk`), and handing a written chunk file to the local filer
//!   (`put_file`: fdatasync, rename, directory sync), as a flush does;
//! - `chunk_index`: `ChunkView::open` (header + index checksums) and
//!   `seek_offset` / `seek_timestamp` lookups in a full chunk's index;
//! - `topic_layout`: decoding and validating a topic's JSON layout
//!   (`Topic::from_json_bytes`), what a broker does with every
//!   `ApplyLayout` and the control plane with every topic it loads; the
//!   figure that keeps layouts in JSON rather than rkyv (`docs/design.md`,
//!   "The crates the design names").
//!
//! Each reports throughput, so figures compare with memcpy and the disk
//! limits in `BENCHMARKS.md`. `cargo bench -p kelp-benches -- --test` runs
//! each once (the CI smoke run).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    hint::black_box,
    path::PathBuf,
    time::{Duration, Instant},
};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use engine::bench_internals::ActiveBuffer;
use filer::{Filer, LocalFiler, ObjectPath};
use kelp_benches::broker_process::TempDir;
use wire::{
    batch::set_base_offset,
    chunk::{build_chunk, seek_offset, seek_timestamp},
    BatchBuilder, BatchView, ChunkView,
};

/// The sizes `BENCHMARKS.md` uses: 1,000 records of 1,000-byte values
/// (1 MB batches), and the small-record case of `batch_cost`.
const CASES: &[(usize, u32)] = &[(1000, 1000), (100, 1000)];
const KEY: &[u8] = b"user-0000000001";
/// The broker's default buffer (chunk) size.
const BUFFER_BYTES: usize = 8 << 20;

fn values(record_bytes: usize) -> Vec<u8> {
    vec![0x6B; record_bytes]
}

fn encoded_batch(record_bytes: usize, records: u32) -> Vec<u8> {
    let value = values(record_bytes);
    let mut builder = BatchBuilder::new();
    for i in 0..records {
        builder
            .push(1_700_000_000_000 + i64::from(i), KEY, &value, &[])
            .unwrap();
    }
    builder.finish(0, 0).to_vec()
}

fn batch_encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_encode");
    for &(record_bytes, records) in CASES {
        let value = values(record_bytes);
        let bytes = encoded_batch(record_bytes, records).len();
        let mut builder = BatchBuilder::with_capacity(bytes);
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(format!("{records}x{record_bytes}B"), |b| {
            b.iter(|| {
                builder.clear();
                for i in 0..records {
                    builder
                        .push(1_700_000_000_000 + i64::from(i), KEY, &value, &[])
                        .unwrap();
                }
                black_box(builder.finish(0, 0).len())
            })
        });
    }
    group.finish();
}

fn batch_validate(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_validate");
    for &(record_bytes, records) in CASES {
        let batch = encoded_batch(record_bytes, records);
        group.throughput(Throughput::Bytes(batch.len() as u64));
        group.bench_function(format!("{records}x{record_bytes}B"), |b| {
            b.iter(|| {
                black_box(
                    BatchView::validate(black_box(&batch))
                        .unwrap()
                        .record_count(),
                )
            })
        });
    }
    group.finish();
}

/// Appends into fresh buffers; making a buffer (create, fallocate, map) is
/// outside the clock, as it is on the broker (a spare made ahead of time).
fn buffer_append(c: &mut Criterion) {
    let dir = TempDir::create(None, "kelp-criterion-buffer").unwrap();
    let mut group = c.benchmark_group("buffer_append");
    for &(record_bytes, records) in CASES {
        let batch = encoded_batch(record_bytes, records);
        let view = BatchView::validate(&batch).unwrap();
        group.throughput(Throughput::Bytes(batch.len() as u64));
        let mut made = 0u64;
        let mut new_buffer = || {
            made += 1;
            let path: PathBuf = dir.path().join(format!("{made:020}.buf"));
            ActiveBuffer::create(path, 0, 0, BUFFER_BYTES).unwrap()
        };
        let mut buffer = new_buffer();
        group.bench_function(format!("{records}x{record_bytes}B"), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    if !buffer.fits(batch.len()) {
                        let full = std::mem::replace(&mut buffer, new_buffer());
                        drop(full);
                    }
                    let start = Instant::now();
                    black_box(buffer.append(&view).unwrap());
                    spent += start.elapsed();
                }
                spent
            })
        });
        // The full buffers' files stay until the directory goes.
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
    }
    group.finish();
}

/// A chunk's worth of 1 MB batches with contiguous offsets.
fn chunk_batches() -> Vec<Vec<u8>> {
    let (record_bytes, records) = CASES[0];
    let template = encoded_batch(record_bytes, records);
    let count = BUFFER_BYTES / template.len();
    (0..count)
        .map(|i| {
            let mut batch = template.clone();
            set_base_offset(&mut batch, i as u64 * u64::from(records));
            batch
        })
        .collect()
}

fn chunk_write(c: &mut Criterion) {
    let batches = chunk_batches();
    let refs: Vec<&[u8]> = batches.iter().map(Vec::as_slice).collect();
    let chunk = build_chunk(0, 0, &refs).unwrap();
    let mut group = c.benchmark_group("chunk_write");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(chunk.len() as u64));
    group.bench_function("build_8MiB", |b| {
        b.iter(|| black_box(build_chunk(0, 0, black_box(&refs)).unwrap().len()))
    });

    let dir = TempDir::create(None, "kelp-criterion-filer").unwrap();
    let filer = LocalFiler::open(dir.path().join("filer")).unwrap();
    let local = dir.path().join("sealed.buf");
    let mut n = 0u64;
    group.bench_function("filer_put_file_8MiB", |b| {
        b.iter_batched(
            || {
                // The sealed buffer file, in the page cache, as a flush finds it.
                std::fs::write(&local, &chunk).unwrap();
                n += 1;
                ObjectPath::new(format!("bench/t/0/{n:020}.chunk")).unwrap()
            },
            |path| filer.put_file(&path, &local, chunk.len() as u64).unwrap(),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn chunk_index(c: &mut Criterion) {
    let batches = chunk_batches();
    let refs: Vec<&[u8]> = batches.iter().map(Vec::as_slice).collect();
    let chunk = build_chunk(0, 0, &refs).unwrap();
    let view = ChunkView::open(&chunk).unwrap();
    let entries = view.index().to_vec();
    let next_offset = view.header().next_offset;
    let mut group = c.benchmark_group("chunk_index");
    group.throughput(Throughput::Elements(1));
    group.bench_function("open_8MiB", |b| {
        b.iter(|| black_box(ChunkView::open(black_box(&chunk)).unwrap().index().len()))
    });
    // Offsets spread over the chunk by a multiplicative step, so lookups
    // do not hit the same entry every time.
    let mut probe = 0u64;
    group.bench_function("seek_offset", |b| {
        b.iter(|| {
            probe = (probe + 0x9E37_79B9) % next_offset;
            black_box(seek_offset(&entries, black_box(probe)))
        })
    });
    let min_ts = view.header().min_timestamp_ms;
    let span = (view.header().max_timestamp_ms - min_ts).max(1) as u64;
    let mut tprobe = 0u64;
    group.bench_function("seek_timestamp", |b| {
        b.iter(|| {
            tprobe = (tprobe + 0x9E37_79B9) % span;
            black_box(seek_timestamp(&entries, min_ts + tprobe as i64))
        })
    });
    group.finish();
}

/// A topic's persisted JSON with `open` open segments splitting the key
/// ring evenly, each on its own shard, in the documented format
/// (`control/src/topic.rs`).
fn topic_json(open: u64) -> Vec<u8> {
    let ring = 1u64 << 32;
    let segments: Vec<String> = (0..open)
        .map(|i| {
            format!(
                r#"{{"id":{i},"epoch":0,"range":{{"start":{},"end":{}}},"state":"open","shard":{},"successors":[],"created_ms":1700000000000}}"#,
                ring * i / open,
                ring * (i + 1) / open,
                i % 1024
            )
        })
        .collect();
    format!(
        r#"{{"version":1,"name":"bench/layout","created_ms":1700000000000,"segments":[{}]}}"#,
        segments.join(",")
    )
    .into_bytes()
}

fn topic_layout(c: &mut Criterion) {
    let mut group = c.benchmark_group("topic_layout");
    for open in [16u64, 1024] {
        let json = topic_json(open);
        assert_eq!(
            control::Topic::from_json_bytes(&json)
                .unwrap()
                .segments()
                .len() as u64,
            open
        );
        group.throughput(Throughput::Bytes(json.len() as u64));
        group.bench_function(format!("from_json_{open}_segments"), |b| {
            b.iter(|| black_box(control::Topic::from_json_bytes(black_box(&json)).unwrap()))
        });
    }
    group.finish();
}

fn config() -> Criterion {
    // Reports without plots: the numbers are what BENCHMARKS.md uses.
    Criterion::default()
        .without_plots()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = hot_path;
    config = config();
    targets = batch_encode, batch_validate, buffer_append, chunk_write, chunk_index, topic_layout
}
criterion_main!(hot_path);
