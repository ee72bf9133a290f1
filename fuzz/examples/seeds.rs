//! Writes the seed corpora in `fuzz/seeds/<target>/`: small valid inputs made
//! by kelp-wire's own encoders. Run from `fuzz/` after a format change:
//! `cargo run --example seeds`.

use std::fs;
use std::path::Path;

use kelp_wire::batch::{set_base_offset, BatchBuilder, RecordHeader};
use kelp_wire::chunk::build_chunk;
use kelp_wire::frame::FRAME_HEADER_BYTES;
use kelp_wire::message::{
    AckMode, ErrorCode, FetchFrom, Fetched, Request, Response, SegmentInfo, ShardAddress, TopicInfo,
};
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

fn main() -> AnyResult {
    let requests = [
        Request::Shards,
        Request::ListTopics,
        Request::CreateTopic {
            topic: "ns/t".into(),
            segments: 4,
        },
        Request::DeleteTopic {
            topic: "ns/t".into(),
        },
        Request::DescribeTopic {
            topic: "ns/t".into(),
        },
        Request::Produce {
            topic: "ns/t",
            segment: 3,
            ack: AckMode::Leader,
            batch: b"batch",
        },
        Request::Fetch {
            topic: "ns/t".into(),
            segment: 1,
            from: FetchFrom::Offset(42),
            max_bytes: 1 << 20,
            max_wait_ms: 500,
            checks: kelp_wire::FetchChecks::Trust,
        },
        Request::Fetch {
            topic: "ns/t".into(),
            segment: 1,
            from: FetchFrom::Timestamp(-5),
            max_bytes: 1,
            max_wait_ms: 0,
            checks: kelp_wire::FetchChecks::Trust,
        },
        Request::PayloadWrite {
            topic: "ns/t".into(),
            id: payload_ref().id,
            offset: 0,
            bytes: b"piece",
        },
        Request::PayloadCommit {
            topic: "ns/t".into(),
            reference: payload_ref(),
        },
        Request::PayloadRead {
            topic: "ns/t".into(),
            id: payload_ref().id,
            offset: 4,
            max_bytes: 1 << 20,
        },
        Request::SplitSegment {
            topic: "ns/t".into(),
            segment: 0,
            pieces: 2,
        },
        Request::MoveSegment {
            topic: "ns/t".into(),
            segment: 1,
            to: None,
        },
        Request::SetPolicy {
            topic: "ns/t".into(),
            policy: r#"{"target":{"bytes_per_s":1000}}"#.into(),
        },
        Request::RegisterBroker {
            id: Some(3),
            shards: vec![ShardAddress {
                tcp: "127.0.0.1:7420".into(),
                quic: "127.0.0.1:7420".into(),
            }],
            capacity_bytes_per_s: 1 << 29,
            capacity_records_per_s: 1 << 20,
        },
        Request::LoadReport {
            broker: 3,
            segments: vec![kelp_wire::message::SegmentLoadReport {
                topic: "ns/t".into(),
                segment: 2,
                bytes_per_s: 1000,
                records_per_s: 10,
                next_offset: 99,
                first_append_ms: Some(1_700_000_000_000),
                lost_records: 0,
            }],
        },
        Request::ApplyLayout {
            topic_json: br#"{"version":1,"name":"ns/t","created_ms":1,"segments":[]}"#,
            owners: vec![kelp_wire::message::BrokerShards {
                broker: 1,
                shards: vec![ShardAddress {
                    tcp: "127.0.0.1:7420".into(),
                    quic: "127.0.0.1:7421".into(),
                }],
            }],
        },
    ];
    let responses = [
        Response::Shards {
            shards: vec![ShardAddress {
                tcp: "127.0.0.1:7420".into(),
                quic: "127.0.0.1:7421".into(),
            }],
        },
        Response::Topic(TopicInfo {
            name: "ns/t".into(),
            segments: vec![SegmentInfo {
                id: 0,
                epoch: 1,
                start: 0,
                end: 1 << 32,
                sealed: true,
                shard: 1,
                next_offset: 99,
                appended_bytes: 4096,
                successors: vec![4, 5],
                ..SegmentInfo::default()
            }],
        }),
        Response::Done,
        Response::TopicList {
            topics: vec!["a/b".into(), "c/d".into()],
        },
        Response::Produced {
            segment: 2,
            base_offset: 1000,
            record_count: 10,
        },
        Response::Fetched(Fetched {
            segment: 2,
            start_offset: 5,
            next_offset: 10,
            high_watermark: 12,
            sealed: false,
            batches: b"bytes",
        }),
        Response::PayloadBytes {
            length: 9,
            offset: 4,
            bytes: b"bytes",
        },
        Response::Error {
            code: ErrorCode::NotOwner,
            message: "not mine".into(),
        },
        Response::Sealed {
            message: "segment 3 is sealed".into(),
            successors: kelp_wire::message::Successors {
                layout_version: 5,
                segments: vec![SegmentInfo {
                    id: 5,
                    epoch: 1,
                    start: 0,
                    end: 1 << 31,
                    shard: 1,
                    ..SegmentInfo::default()
                }],
            },
        },
        Response::Topic(TopicInfo {
            name: "ns/t".into(),
            segments: vec![SegmentInfo {
                id: 3,
                epoch: 0,
                start: 0,
                end: 1 << 31,
                broker: Some(2),
                address: Some(ShardAddress {
                    tcp: "127.0.0.1:7500".into(),
                    quic: "127.0.0.1:7500".into(),
                }),
                bytes_per_s: 1000,
                records_per_s: 10,
                created_ms: 1_700_000_000_000,
                sealed_ms: Some(1_700_000_001_000),
                first_append_ms: Some(1_700_000_000_040),
                ..SegmentInfo::default()
            }],
        }),
        Response::Brokers {
            brokers: vec![kelp_wire::message::BrokerStatus {
                id: 2,
                shards: vec![ShardAddress {
                    tcp: "127.0.0.1:7500".into(),
                    quic: "127.0.0.1:7500".into(),
                }],
                capacity_bytes_per_s: 1 << 29,
                capacity_records_per_s: 1 << 20,
                bytes_per_s: 1000,
                records_per_s: 10,
                utilization_permille: 1,
                open_segments: 1,
                silent_ms: 300,
            }],
        },
        Response::Registered {
            id: 2,
            filer: "/var/lib/kelp/filer".into(),
        },
    ];
    for (i, r) in requests.iter().enumerate() {
        let mut frame = Vec::new();
        r.encode(i as u32, &mut frame);
        write("frame_header", &format!("request-{i}"), &frame)?;
        let mut typed = vec![r.frame_type() as u8];
        typed.extend_from_slice(&frame[FRAME_HEADER_BYTES..]);
        write("request", &format!("request-{i}"), &typed)?;
    }
    for (i, r) in responses.iter().enumerate() {
        let mut frame = Vec::new();
        r.encode(i as u32, &mut frame);
        write("frame_header", &format!("response-{i}"), &frame)?;
        let mut typed = vec![r.frame_type() as u8];
        typed.extend_from_slice(&frame[FRAME_HEADER_BYTES..]);
        write("response", &format!("response-{i}"), &typed)?;
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
