//! Writes the seed corpora in `fuzz/seeds/<target>/`: small valid inputs made
//! by kelp-wire's own encoders. Run from `fuzz/` after a format change:
//! `cargo run --example seeds`.

use std::fs;
use std::path::Path;

use kelp_wire::batch::{set_base_offset, BatchBuilder, RecordHeader};
use kelp_wire::chunk::build_chunk;
use kelp_wire::frame::{FrameHeader, FRAME_HEADER_BYTES};
use kelp_wire::message::samples;
use kelp_wire::payload_ref::{PayloadId, PayloadRef};

type AnyResult = Result<(), Box<dyn std::error::Error>>;

fn write(target: &str, name: &str, bytes: &[u8]) -> AnyResult {
    let dir = Path::new("seeds").join(target);
    fs::create_dir_all(&dir)?;
    fs::write(dir.join(name), bytes)?;
    Ok(())
}

/// A batch of `records` records stamped with `base_offset`.
fn batch(
    base_offset: u64,
    records: usize,
    value_bytes: usize,
) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut b = BatchBuilder::new();
    for i in 0..records {
        let headers = [RecordHeader {
            name: b"trace",
            value: b"t1",
        }];
        let headers: &[RecordHeader<'_>] = if i % 2 == 1 { &headers } else { &[] };
        b.push(
            1_700_000_000_000 + i as i64 * 10,
            format!("k{i}").as_bytes(),
            &vec![b'v'; value_bytes],
            headers,
        )?;
    }
    let mut bytes = b.finish(42, 7).to_vec();
    set_base_offset(&mut bytes, base_offset);
    Ok(bytes)
}

fn payload_ref() -> PayloadRef {
    PayloadRef {
        id: PayloadId {
            created_ms: 1_700_000_000_000,
            nonce: 0x0123_4567_89ab_cdef,
        },
        length: 9,
        checksum: 0xe306_9283,
    }
}

/// A batch holding one inline record and one payload reference.
fn reference_batch() -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut b = BatchBuilder::new();
    b.push(1_700_000_000_000, b"k0", b"inline", &[])?;
    b.push_reference(1_700_000_000_001, b"k1", &payload_ref(), &[])?;
    let mut bytes = b.finish(0, 0).to_vec();
    set_base_offset(&mut bytes, 7);
    Ok(bytes)
}

/// A whole frame as a seed of the `frame_header` target, and its type byte
/// then its payload as a seed of the `target` decoder's (`request`,
/// `response`), both named `<target>-<i>`.
fn write_frame_seeds(target: &str, i: usize, frame: &[u8]) -> AnyResult {
    let name = format!("{target}-{i}");
    write("frame_header", &name, frame)?;
    let (head, payload) = frame
        .split_first_chunk::<FRAME_HEADER_BYTES>()
        .ok_or("a frame shorter than its header")?;
    let mut typed = vec![FrameHeader::decode(head)?.frame_type as u8];
    typed.extend_from_slice(payload);
    write(target, &name, &typed)
}

fn main() -> AnyResult {
    // The sample messages of every protocol that kelp-wire's own tests
    // round-trip (its `samples` feature).
    for (i, frame) in samples::request_frames().iter().enumerate() {
        write_frame_seeds("request", i, frame)?;
    }
    for (i, frame) in samples::response_frames().iter().enumerate() {
        write_frame_seeds("response", i, frame)?;
    }
    let small = batch(100, 1, 5)?;
    let mixed = batch(101, 4, 20)?;
    write("batch", "one-record", &small)?;
    write("batch", "with-headers", &mixed)?;
    let references = reference_batch()?;
    write("batch", "with-reference", &references)?;
    write(
        "chunk",
        "with-references",
        &build_chunk(5, 7, &[&references])?,
    )?;

    // Three batches of ~2.3 KiB: the third starts past the index interval,
    // so the chunk has two index entries.
    let big: Vec<Vec<u8>> = (0..3)
        .map(|i| batch(200 + i * 3, 3, 750))
        .collect::<Result<_, _>>()?;
    let big_refs: Vec<&[u8]> = big.iter().map(Vec::as_slice).collect();
    write("chunk", "empty", &build_chunk(1, 100, &[])?)?;
    write("chunk", "one-batch", &build_chunk(3, 100, &[&small])?)?;
    write(
        "chunk",
        "two-batches",
        &build_chunk(3, 100, &[&small, &mixed])?,
    )?;
    write("chunk", "indexed-twice", &build_chunk(4, 200, &big_refs)?)?;

    write("batch_walk", "one", &small)?;
    write("batch_walk", "two", &[small.as_slice(), &mixed].concat())?;
    write("batch_walk", "three", &big.concat())?;
    Ok(())
}
