//! Golden bytes for the responses of the data-path APIs (Produce, Fetch,
//! ListOffsets, Metadata), written field by field from Kafka's message
//! definitions, on both sides of each API's flexible-version boundary.
//! Requests are pinned by what real clients sent (`captured.rs`): each of
//! these APIs has a captured request in both its classic and its flexible
//! versions. The request cases left here are what no capture sends: tagged
//! fields to skip and "all topics".

mod common;

use common::{golden, golden_versions, since, B};
use kelp_kafka::api::fetch::*;
use kelp_kafka::api::list_offsets::*;
use kelp_kafka::api::metadata::*;
use kelp_kafka::api::produce::*;
use kelp_kafka::Uuid;

const RECORDS: &[u8] = &[0xde, 0xad, 0xbe, 0xef];

/// From v8 the partition's error comes with the failed batch's index and
/// a message.
#[test]
fn produce_response_v3_v5_v8_v9() {
    golden_versions(
        &[3, 5, 8, 9],
        9,
        |version| ProduceResponse {
            topics: vec![ProduceTopicResult {
                name: "t".into(),
                partitions: vec![ProducePartitionResult {
                    index: 2,
                    error_code: since(version, 8, 87),
                    base_offset: 100,
                    log_append_time_ms: -1,
                    log_start_offset: if version >= 5 { 7 } else { -1 },
                    record_errors: since(
                        version,
                        8,
                        vec![BatchIndexError {
                            batch_index: 0,
                            batch_index_error_message: Some("bad".into()),
                        }],
                    ),
                    error_message: since(version, 8, Some("invalid".into())),
                }],
            }],
            throttle_time_ms: 0,
        },
        |b, version| {
            b.array(1)
                .string("t")
                .array(1)
                .i32(2)
                .i16(since(version, 8, 87))
                .i64(100)
                .i64(-1)
                .when(version >= 5, |b| b.i64(7))
                .when(version >= 8, |b| {
                    b.array(1).i32(0).string("bad").tagged().string("invalid")
                })
                .tagged()
                .tagged()
                .i32(0)
                .tagged()
        },
    );
}

#[test]
fn fetch_request_v12_skips_unknown_and_cluster_id_tags() {
    // A v12 request whose top-level tag buffer carries the cluster id (tag
    // 0) and an unknown tag 9: both skipped.
    let bytes = B::new()
        .i32(-1)
        .i32(500)
        .i32(1)
        .i32(100)
        .i8(0)
        .i32(0)
        .i32(-1)
        .carr(0)
        .carr(0)
        .cstr("")
        .uvar(2)
        .uvar(0)
        .uvar(3)
        .cstr("ab")
        .uvar(9)
        .uvar(1)
        .raw(&[0x7f])
        .done();
    let msg = <FetchRequest as kelp_kafka::Message>::decode_exact(&bytes, 12).expect("decode");
    assert_eq!(msg.max_bytes, 100);
    assert!(msg.topics.is_empty());
}

#[test]
fn fetch_response_v4_v11_v12() {
    let mut msg = FetchResponse {
        throttle_time_ms: 0,
        error_code: 0,
        session_id: 0,
        topics: vec![FetchTopicData {
            topic: "t".into(),
            partitions: vec![FetchPartitionData {
                partition_index: 0,
                error_code: 0,
                high_watermark: 50,
                last_stable_offset: 50,
                log_start_offset: -1,
                aborted_transactions: None,
                preferred_read_replica: -1,
                records: Some(RECORDS),
            }],
        }],
    };
    golden(
        &msg,
        4,
        &B::new()
            .i32(0)
            .arr(1)
            .str("t")
            .arr(1)
            .i32(0)
            .i16(0)
            .i64(50)
            .i64(50)
            .arr(-1)
            .bytes(RECORDS)
            .done(),
    );
    msg.session_id = 9;
    msg.topics[0].partitions[0].log_start_offset = 0;
    msg.topics[0].partitions[0].aborted_transactions = Some(vec![AbortedTransaction {
        producer_id: 5,
        first_offset: 10,
    }]);
    for version in [11, 12] {
        let expected = B::at(version >= 12)
            .i32(0)
            .i16(0)
            .i32(9)
            .array(1)
            .string("t")
            .array(1)
            .i32(0)
            .i16(0)
            .i64(50)
            .i64(50)
            .i64(0)
            .array(1)
            .i64(5)
            .i64(10)
            .tagged()
            .i32(-1)
            .blob(RECORDS)
            .tagged()
            .tagged()
            .tagged()
            .done();
        // Not golden_versions: the response borrows its records.
        golden(&msg, version, &expected);
    }
}

#[test]
fn list_offsets_response_v1_v5_v6() {
    golden_versions(
        &[1, 5, 6],
        6,
        |version| ListOffsetsResponse {
            throttle_time_ms: since(version, 2, 2),
            topics: vec![ListOffsetsTopicResult {
                name: "t".into(),
                partitions: vec![ListOffsetsPartitionResult {
                    partition_index: 0,
                    error_code: 0,
                    timestamp: -1,
                    offset: 17,
                    leader_epoch: if version >= 4 { 0 } else { -1 },
                }],
            }],
        },
        |b, version| {
            b.when(version >= 2, |b| b.i32(2))
                .array(1)
                .string("t")
                .array(1)
                .i32(0)
                .i16(0)
                .i64(-1)
                .i64(17)
                .when(version >= 4, |b| b.i32(0))
                .tagged()
                .tagged()
                .tagged()
        },
    );
}

/// "All topics", which no captured request asks for (the capture sessions
/// name their topic): a null array from v1, flexible or not, and an empty
/// one in v0.
#[test]
fn metadata_request_for_all_topics() {
    let msg = MetadataRequest {
        topics: None,
        allow_auto_topic_creation: false,
        include_cluster_authorized_operations: false,
        include_topic_authorized_operations: false,
    };
    golden(&msg, 4, &B::new().arr(-1).bool(false).done());
    golden(
        &msg,
        9,
        &B::new()
            .cnull()
            .bool(false)
            .bool(false)
            .bool(false)
            .tags()
            .done(),
    );
    assert!(msg.wants_all_topics(9));
    let all_v0 = MetadataRequest {
        topics: Some(vec![]),
        ..MetadataRequest::default()
    };
    assert!(all_v0.wants_all_topics(0));
    assert!(!all_v0.wants_all_topics(1));
}

fn metadata_response() -> MetadataResponse {
    MetadataResponse {
        throttle_time_ms: 0,
        brokers: vec![MetadataBroker {
            node_id: 1,
            host: "localhost".into(),
            port: 9092,
            rack: None,
        }],
        cluster_id: Some("kelp".into()),
        controller_id: 1,
        topics: vec![MetadataTopic {
            error_code: 0,
            name: Some("t".into()),
            topic_id: Uuid::ZERO,
            is_internal: false,
            partitions: vec![MetadataPartition {
                error_code: 0,
                partition_index: 0,
                leader_id: 1,
                leader_epoch: 0,
                replica_nodes: vec![1],
                isr_nodes: vec![1],
                offline_replicas: vec![],
            }],
            topic_authorized_operations: i32::MIN,
        }],
        cluster_authorized_operations: i32::MIN,
    }
}

#[test]
fn metadata_response_v0_v8_v9_v12() {
    let mut msg = metadata_response();
    msg.cluster_id = None;
    msg.controller_id = -1;
    msg.topics[0].partitions[0].leader_epoch = -1;
    golden(
        &msg,
        0,
        &B::new()
            .arr(1)
            .i32(1)
            .str("localhost")
            .i32(9092)
            .arr(1)
            .i16(0)
            .str("t")
            .arr(1)
            .i16(0)
            .i32(0)
            .i32(1)
            .arr(1)
            .i32(1)
            .arr(1)
            .i32(1)
            .done(),
    );
    let mut id = [0u8; 16];
    id[15] = 7;
    golden_versions(
        &[8, 9, 12],
        9,
        |version| {
            let mut msg = metadata_response();
            if version >= 12 {
                msg.topics[0].topic_id = Uuid(id);
            }
            msg
        },
        |b, version| {
            b.i32(0)
                .array(1)
                .i32(1)
                .string("localhost")
                .i32(9092)
                .null_string()
                .tagged()
                .string("kelp")
                .i32(1)
                .array(1)
                .i16(0)
                .string("t")
                .when(version >= 10, |b| b.uuid(id))
                .bool(false)
                .array(1)
                .i16(0)
                .i32(0)
                .i32(1)
                .i32(0)
                .array(1)
                .i32(1)
                .array(1)
                .i32(1)
                .array(0)
                .tagged()
                .i32(i32::MIN)
                .tagged()
                // cluster_authorized_operations: v8 to v10.
                .when(version <= 10, |b| b.i32(i32::MIN))
                .tagged()
        },
    );
}
