//! Measures the codec on this machine: record batch encode and decode
//! (every codec) and request decode, each next to a memcpy of the same
//! bytes measured in the same run. Bounded: a fixed number of rounds per
//! case.
//!
//! Run: `cargo run --release -p kelp-kafka --example codec_throughput`

use std::hint::black_box;
use std::time::{Duration, Instant};

use kelp_kafka::api::produce::{ProducePartition, ProduceRequest, ProduceTopic};
use kelp_kafka::{
    encode_record_batch, Compression, Record, RecordBatch, RecordBatchHeader, RecordHeader,
    RecordHeaders, Request, RequestBody, RequestHeader,
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
    let request = Request {
        header: RequestHeader {
            api_key: 0,
            api_version: 9,
            correlation_id: 1,
            client_id: Some("bench".into()),
        },
        body: RequestBody::Produce(ProduceRequest {
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
        }),
    };
    let mut frame = Vec::new();
    request.encode_frame(&mut frame)?;
    let decode = time(ROUNDS * 10, || {
        black_box(Request::decode(black_box(&frame[4..])).expect("decode"));
    });
    println!(
        "Produce v9 request frame of {} B: decode {:.2} us ({:.0} requests/s), {:.3} x memcpy of the batch",
        frame.len(),
        decode.as_secs_f64() * 1e6,
        1.0 / decode.as_secs_f64(),
        decode.as_secs_f64() / memcpy.as_secs_f64()
    );
    Ok(())
}
