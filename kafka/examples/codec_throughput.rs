//! Measures the codec on this machine: record batch encode and decode
//! (every codec), and the messages around them: a Produce request and a
//! Fetch response carrying the batch, and a field-heavy Metadata response,
//! each encoded and decoded as a whole frame. Every time is printed next to
//! a memcpy of the batch measured in the same run. Bounded: a fixed number
//! of rounds per case.
//!
//! Run: `cargo run --release -p kelp-kafka --example codec_throughput`

use std::hint::black_box;
use std::time::{Duration, Instant};

use kelp_kafka::api::fetch::{FetchPartitionData, FetchResponse, FetchTopicData};
use kelp_kafka::api::metadata::{
    MetadataBroker, MetadataPartition, MetadataResponse, MetadataTopic,
};
use kelp_kafka::api::produce::{ProducePartition, ProduceRequest, ProduceTopic};
use kelp_kafka::{
    decode_response, encode_record_batch, encode_response_frame, ApiKey, Compression, Record,
    RecordBatch, RecordBatchHeader, RecordHeader, RecordHeaders, Request, RequestBody,
    ResponseBody, Uuid,
};

const RECORDS: usize = 1000;
const VALUE_BYTES: usize = 100;
const ROUNDS: usize = 300;
const DECOMPRESSED_BYTES_MAX: usize = 64 << 20;

fn time(rounds: usize, mut f: impl FnMut()) -> Duration {
    f(); // warm up buffers
    let start = Instant::now();
    for _ in 0..rounds {
        f();
    }
    start.elapsed() / rounds as u32
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Values: text-like, compressible as real payloads usually are.
    let values: Vec<Vec<u8>> = (0..RECORDS)
        .map(|i| {
            format!("{{\"id\":{i:08},\"user\":\"u{:04}\",\"pad\":\"", i % 997)
                .into_bytes()
                .into_iter()
                .chain(std::iter::repeat_n(b'a' + (i % 26) as u8, VALUE_BYTES))
                .take(VALUE_BYTES)
                .collect()
        })
        .collect();
    let keys: Vec<String> = (0..RECORDS).map(|i| format!("key-{i}")).collect();
    const HEADERS: &[RecordHeader<'static>] = &[RecordHeader {
        key: "trace",
        value: Some(b"0123456789abcdef"),
    }];
    let records: Vec<Record<'_>> = (0..RECORDS)
        .map(|i| Record {
            attributes: 0,
            timestamp_delta: i as i64,
            offset_delta: i as i32,
            key: Some(keys[i].as_bytes()),
            value: Some(&values[i]),
            headers: RecordHeaders::List(HEADERS),
        })
        .collect();
    let header = RecordBatchHeader::default();

    let mut plain = Vec::new();
    encode_record_batch(
        &mut plain,
        &header,
        &records,
        Compression::None,
        &mut Vec::new(),
    )?;
    let mut copy = vec![0u8; plain.len()];
    let memcpy = time(ROUNDS * 10, || {
        copy.copy_from_slice(black_box(&plain));
        black_box(&copy);
    });
    println!(
        "batch of {RECORDS} records x {VALUE_BYTES} B values = {} B uncompressed; memcpy of it: {:.1} us",
        plain.len(),
        memcpy.as_secs_f64() * 1e6
    );
    println!(
        "{:<8} {:>9} {:>12} {:>12} {:>14} {:>14}",
        "codec", "bytes", "encode us", "decode us", "decode rec/s", "decode/memcpy"
    );
    for codec in Compression::ALL {
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        let encode = time(ROUNDS, || {
            out.clear();
            encode_record_batch(&mut out, &header, &records, codec, &mut scratch).expect("encode");
        });
        let mut dec = Vec::new();
        let mut value_bytes = 0usize;
        let decode = time(ROUNDS, || {
            let (batch, _) = RecordBatch::decode(black_box(&out)).expect("decode");
            for r in batch
                .records(&mut dec, DECOMPRESSED_BYTES_MAX)
                .expect("records")
            {
                let r = r.expect("record");
                value_bytes += r.value.map_or(0, <[u8]>::len) + r.headers.len();
            }
        });
        black_box(value_bytes);
        println!(
            "{:<8} {:>9} {:>12.1} {:>12.1} {:>14.0} {:>14.1}",
            codec.name(),
            out.len(),
            encode.as_secs_f64() * 1e6,
            decode.as_secs_f64() * 1e6,
            RECORDS as f64 / decode.as_secs_f64(),
            decode.as_secs_f64() / memcpy.as_secs_f64()
        );
    }

    // A Produce v9 request frame carrying the uncompressed batch: decoding
    // it borrows the records, so it costs the header and field parsing only.
    let produce = RequestBody::Produce(ProduceRequest {
        transactional_id: None,
        acks: -1,
        timeout_ms: 30_000,
        topics: vec![ProduceTopic {
            name: "orders".into(),
            partitions: vec![ProducePartition {
                index: 0,
                records: Some(&plain),
            }],
        }],
    });
    let request = Request::new(produce, 9, 1, Some("bench".into()));
    let mut frame = Vec::new();
    request.encode_frame(&mut frame)?;
    let decode = time(ROUNDS * 10, || {
        black_box(Request::decode(black_box(&frame[4..])).expect("decode"));
    });
    let mut out = Vec::with_capacity(frame.len());
    let encode = time(ROUNDS * 10, || {
        out.clear();
        black_box(&request).encode_frame(&mut out).expect("encode");
    });
    message_line(
        "Produce v9 request frame",
        out.len(),
        encode,
        decode,
        memcpy,
    );

    // A Fetch v12 response carrying the batch: the gateway's hot answer.
    let fetch = ResponseBody::Fetch(FetchResponse {
        topics: vec![FetchTopicData {
            topic: "orders".into(),
            partitions: vec![FetchPartitionData {
                high_watermark: RECORDS as i64,
                last_stable_offset: RECORDS as i64,
                log_start_offset: 0,
                records: Some(&plain),
                ..Default::default()
            }],
        }],
        ..Default::default()
    });
    response_line(
        "Fetch v12 response frame",
        ApiKey::Fetch,
        12,
        &fetch,
        memcpy,
    )?;

    // A Metadata v12 response of 3 brokers and 20 topics of 16 partitions:
    // many small fields, no bulk bytes.
    let metadata = ResponseBody::Metadata(MetadataResponse {
        brokers: (0..3)
            .map(|id| MetadataBroker {
                node_id: id,
                host: format!("broker-{id}.example"),
                port: 9092,
                rack: None,
            })
            .collect(),
        cluster_id: Some("kelp".into()),
        controller_id: 0,
        topics: (0..20)
            .map(|t| MetadataTopic {
                name: Some(format!("topic-{t}")),
                topic_id: Uuid([t as u8; 16]),
                partitions: (0..16)
                    .map(|p| MetadataPartition {
                        partition_index: p,
                        leader_id: p % 3,
                        leader_epoch: 0,
                        replica_nodes: vec![p % 3],
                        isr_nodes: vec![p % 3],
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    });
    response_line(
        "Metadata v12 response frame",
        ApiKey::Metadata,
        12,
        &metadata,
        memcpy,
    )?;
    Ok(())
}

/// Times encoding `body` as a response frame at `version` and decoding it
/// back, and prints the line.
fn response_line(
    name: &str,
    api_key: ApiKey,
    version: i16,
    body: &ResponseBody<'_>,
    memcpy: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut frame = Vec::new();
    encode_response_frame(&mut frame, 1, version, body)?;
    let mut out = Vec::with_capacity(frame.len());
    let encode = time(ROUNDS * 10, || {
        out.clear();
        encode_response_frame(&mut out, 1, version, black_box(body)).expect("encode");
    });
    let decode = time(ROUNDS * 10, || {
        black_box(decode_response(black_box(&frame[4..]), api_key, version).expect("decode"));
    });
    message_line(name, frame.len(), encode, decode, memcpy);
    Ok(())
}

fn message_line(name: &str, bytes: usize, encode: Duration, decode: Duration, memcpy: Duration) {
    println!(
        "{name} of {bytes} B: encode {:.2} us ({:.3} x memcpy), decode {:.2} us ({:.3} x memcpy)",
        encode.as_secs_f64() * 1e6,
        encode.as_secs_f64() / memcpy.as_secs_f64(),
        decode.as_secs_f64() * 1e6,
        decode.as_secs_f64() / memcpy.as_secs_f64()
    );
}
