//! Golden bytes for ElectLeaders, AlterPartitionReassignments and
//! ListPartitionReassignments, requests and responses, written field by
//! field from Kafka's message definitions: ElectLeaders on both sides of
//! its flexible boundary (v1, v2) and before its election type (v0), the
//! two reassignment APIs (flexible from v0) with their nullable arrays
//! both null and present.

mod common;

use common::{golden, golden_versions, since, B};
use kelp_kafka::api::alter_partition_reassignments::*;
use kelp_kafka::api::elect_leaders::*;
use kelp_kafka::api::list_partition_reassignments::*;

#[test]
fn elect_leaders_request_v0_v1_v2() {
    golden_versions(
        &[0, 1, 2],
        2,
        |version| ElectLeadersRequest {
            election_type: since(version, 1, 1),
            topic_partitions: Some(vec![ElectLeadersTopicPartitions {
                topic: "t".into(),
                partitions: vec![0, 2],
            }]),
            timeout_ms: 30_000,
        },
        |b, version| {
            b.when(version >= 1, |b| b.i8(1))
                .array(1)
                .string("t")
                .array(2)
                .i32(0)
                .i32(2)
                .tagged()
                .i32(30_000)
                .tagged()
        },
    );
    // Every partition: a null array.
    golden_versions(
        &[1, 2],
        2,
        |_| ElectLeadersRequest {
            election_type: 0,
            topic_partitions: None,
            timeout_ms: 60_000,
        },
        |b, _| b.i8(0).null_array().i32(60_000).tagged(),
    );
}

#[test]
fn elect_leaders_response_v0_v1_v2() {
    golden_versions(
        &[0, 1, 2],
        2,
        |version| ElectLeadersResponse {
            throttle_time_ms: 0,
            error_code: since(version, 1, 42),
            replica_election_results: vec![ReplicaElectionResult {
                topic: "t".into(),
                partition_result: vec![
                    ElectionPartitionResult {
                        partition_id: 0,
                        error_code: 84,
                        error_message: Some("m".into()),
                    },
                    ElectionPartitionResult {
                        partition_id: 1,
                        error_code: 0,
                        error_message: None,
                    },
                ],
            }],
        },
        |b, version| {
            b.i32(0)
                .when(version >= 1, |b| b.i16(42))
                .array(1)
                .string("t")
                .array(2)
                .i32(0)
                .i16(84)
                .string("m")
                .tagged()
                .i32(1)
                .i16(0)
                .null_string()
                .tagged()
                .tagged()
                .tagged()
        },
    );
}

#[test]
fn alter_partition_reassignments_v0() {
    let request = AlterPartitionReassignmentsRequest {
        timeout_ms: 60_000,
        topics: vec![ReassignableTopic {
            name: "t".into(),
            partitions: vec![
                ReassignablePartition {
                    partition_index: 0,
                    replicas: Some(vec![0, 1]),
                },
                ReassignablePartition {
                    partition_index: 1,
                    replicas: None,
                },
            ],
        }],
    };
    let bytes = B::at(true)
        .i32(60_000)
        .carr(1)
        .cstr("t")
        .carr(2)
        .i32(0)
        .carr(2)
        .i32(0)
        .i32(1)
        .tags()
        .i32(1)
        .cnull()
        .tags()
        .tags()
        .tags()
        .done();
    golden(&request, 0, &bytes);

    let response = AlterPartitionReassignmentsResponse {
        throttle_time_ms: 0,
        error_code: 0,
        error_message: None,
        responses: vec![ReassignableTopicResponse {
            name: "t".into(),
            partitions: vec![ReassignablePartitionResponse {
                partition_index: 1,
                error_code: 85,
                error_message: Some("m".into()),
            }],
        }],
    };
    let bytes = B::at(true)
        .i32(0)
        .i16(0)
        .cnull()
        .carr(1)
        .cstr("t")
        .carr(1)
        .i32(1)
        .i16(85)
        .cstr("m")
        .tags()
        .tags()
        .tags()
        .done();
    golden(&response, 0, &bytes);
}

#[test]
fn list_partition_reassignments_v0() {
    let all = ListPartitionReassignmentsRequest {
        timeout_ms: 60_000,
        topics: None,
    };
    golden(&all, 0, &B::at(true).i32(60_000).cnull().tags().done());
    let some = ListPartitionReassignmentsRequest {
        timeout_ms: 5_000,
        topics: Some(vec![ListPartitionReassignmentsTopics {
            name: "t".into(),
            partition_indexes: vec![3],
        }]),
    };
    let bytes = B::at(true)
        .i32(5_000)
        .carr(1)
        .cstr("t")
        .carr(1)
        .i32(3)
        .tags()
        .tags()
        .done();
    golden(&some, 0, &bytes);

    let response = ListPartitionReassignmentsResponse {
        throttle_time_ms: 0,
        error_code: 0,
        error_message: None,
        topics: vec![OngoingTopicReassignment {
            name: "t".into(),
            partitions: vec![OngoingPartitionReassignment {
                partition_index: 3,
                replicas: vec![0, 1, 2],
                adding_replicas: vec![2],
                removing_replicas: vec![0],
            }],
        }],
    };
    let bytes = B::at(true)
        .i32(0)
        .i16(0)
        .cnull()
        .carr(1)
        .cstr("t")
        .carr(1)
        .i32(3)
        .carr(3)
        .i32(0)
        .i32(1)
        .i32(2)
        .carr(1)
        .i32(2)
        .carr(1)
        .i32(0)
        .tags()
        .tags()
        .tags()
        .done();
    golden(&response, 0, &bytes);
}
