//! Writes the seed corpora of the `kafka_*` targets in `fuzz/seeds/`: small
//! valid inputs made by kelp-kafka's own encoders, so a short run gets past
//! the headers. Requests and responses are the populated samples of
//! `kafka/tests/common/samples.rs` (every API), each at its lowest version,
//! the versions either side of its switch to the flexible encoding, and its
//! highest; record batches are one per codec plus a few uncompressed shapes;
//! offsets files are made by a coordinator. Run from `fuzz/` after a format
//! change: `cargo run --example kafka_seeds`.

use std::fs;
use std::path::Path;

use kelp_kafka::group::{
    Coordinator, CoordinatorConfig, OffsetCommitRequest, PartitionCommit, TopicCommit,
};
use kelp_kafka::record_batch::ATTR_TRANSACTIONAL;
use kelp_kafka::{
    encode_record_batch, encode_response_frame, ApiKey, Compression, Record, RecordBatchHeader,
    RecordHeader, RecordHeaders, Request,
};

#[path = "../../kafka/tests/common/samples.rs"]
mod samples;

type AnyResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

fn write(target: &str, name: &str, bytes: &[u8]) -> AnyResult {
    let dir = Path::new("seeds").join(target);
    fs::create_dir_all(&dir)?;
    fs::write(dir.join(name), bytes)?;
    Ok(())
}

/// The versions of `api_key` a seed is written at.
fn seed_versions(api_key: ApiKey) -> Vec<i16> {
    let r = api_key.versions();
    let mut versions: Vec<i16> = [r.min, r.flexible_min - 1, r.flexible_min, r.max]
        .into_iter()
        .filter(|v| api_key.supports(*v))
        .collect();
    versions.dedup();
    versions
}

fn name(api_key: ApiKey) -> String {
    format!("{api_key:?}").to_lowercase()
}

/// A batch of `values.len()` records, the odd ones with a header.
fn batch(
    compression: Compression,
    attributes: i16,
    base_offset: i64,
    values: &[&[u8]],
) -> AnyResult<Vec<u8>> {
    let headers = [RecordHeader {
        key: "trace",
        value: Some(b"t1"),
    }];
    let keys: Vec<String> = (0..values.len()).map(|i| format!("k{i}")).collect();
    let records: Vec<Record<'_>> = values
        .iter()
        .enumerate()
        .map(|(i, value)| Record {
            attributes: 0,
            timestamp_delta: i as i64 * 10,
            offset_delta: i as i32,
            key: (i != 2).then(|| keys[i].as_bytes()),
            value: (!value.is_empty()).then_some(*value),
            headers: if i % 2 == 1 {
                RecordHeaders::List(&headers)
            } else {
                RecordHeaders::NONE
            },
        })
        .collect();
    let header = RecordBatchHeader {
        base_offset,
        attributes,
        base_timestamp: 1_700_000_000_000,
        max_timestamp: 1_700_000_000_000 + (values.len() as i64 - 1).max(0) * 10,
        producer_id: 42,
        producer_epoch: 1,
        base_sequence: 7,
        record_count: values.len() as i32,
        ..RecordBatchHeader::default()
    };
    let mut out = Vec::new();
    encode_record_batch(&mut out, &header, &records, compression, &mut Vec::new())?;
    Ok(out)
}

fn requests(records: &[u8]) -> AnyResult {
    for body in samples::requests(records) {
        let api_key = body.api_key();
        for version in seed_versions(api_key) {
            let request = Request::new(body.clone(), version, 7, Some("c".into()));
            let mut frame = Vec::new();
            request.encode_frame(&mut frame)?;
            // The target reads a frame after its size prefix.
            write(
                "kafka_request",
                &format!("{}-v{version}", name(api_key)),
                &frame[4..],
            )?;
        }
    }
    Ok(())
}

fn responses(records: &[u8]) -> AnyResult {
    for body in samples::responses(records) {
        let api_key = body.api_key();
        for version in seed_versions(api_key) {
            let mut frame = Vec::new();
            encode_response_frame(&mut frame, 7, version, &body)?;
            // The target takes the api key and version from the first two
            // bytes, then a frame after its size prefix.
            let mut input = vec![u8::try_from(api_key.code())?, u8::try_from(version)?];
            input.extend_from_slice(&frame[4..]);
            write(
                "kafka_response",
                &format!("{}-v{version}", name(api_key)),
                &input,
            )?;
        }
    }
    Ok(())
}

fn record_batches() -> AnyResult {
    let values: [&[u8]; 3] = [b"v0", b"value one", b""];
    for codec in Compression::ALL {
        write(
            "kafka_record_batch",
            codec.name(),
            &batch(codec, 0, 0, &values)?,
        )?;
    }
    write(
        "kafka_record_batch",
        "empty",
        &batch(Compression::None, 0, 0, &[])?,
    )?;
    // Two batches in one records field, the second transactional.
    let mut two = batch(Compression::None, 0, 0, &values[..1])?;
    two.extend_from_slice(&batch(
        Compression::None,
        ATTR_TRANSACTIONAL,
        1,
        &values[..2],
    )?);
    write("kafka_record_batch", "two-batches", &two)?;
    Ok(())
}

fn offsets_files() -> AnyResult {
    let mut coordinator = Coordinator::new(CoordinatorConfig::default(), 0);
    let commit = |topic: &str, partition: i32, offset: i64, metadata: Option<&str>| TopicCommit {
        topic: topic.into(),
        partitions: vec![PartitionCommit {
            partition,
            offset,
            leader_epoch: 3,
            metadata: metadata.map(str::to_owned),
        }],
    };
    coordinator.commit_offsets(
        1_000,
        OffsetCommitRequest {
            group_id: "g".into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
            topics: vec![
                commit("orders", 0, 42, Some("m")),
                commit("orders", 1, 7, None),
                commit("pay", 0, 1, None),
            ],
        },
        |_, _| true,
    );
    let offsets = coordinator
        .group_offsets("g")
        .ok_or("the commit was refused")?;
    write("kafka_group_offsets", "three", &offsets.encode("g"))?;
    let empty = kelp_kafka::group::GroupOffsets::default();
    write("kafka_group_offsets", "empty", &empty.encode("g"))?;
    Ok(())
}

fn main() -> AnyResult {
    let records = batch(Compression::None, 0, 0, &[b"v0", b"v1"])?;
    requests(&records)?;
    responses(&records)?;
    record_batches()?;
    offsets_files()?;
    Ok(())
}
