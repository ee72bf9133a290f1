//! Golden bytes for the responses of the consumer-group APIs, written
//! field by field from Kafka's message definitions, on both sides of each
//! API's flexible-version boundary. Requests are pinned by what real
//! clients sent (`captured.rs`): each of these APIs has a captured request
//! in both its classic and its flexible versions. The request case left
//! here is what no capture sends: OffsetFetch of all partitions.

mod common;

use common::{golden, golden_versions, since, B};
use kelp_kafka::api::describe_groups::*;
use kelp_kafka::api::heartbeat::*;
use kelp_kafka::api::join_group::*;
use kelp_kafka::api::leave_group::*;
use kelp_kafka::api::list_groups::*;
use kelp_kafka::api::offset_commit::*;
use kelp_kafka::api::offset_fetch::*;
use kelp_kafka::api::sync_group::*;

#[test]
fn heartbeat_response_v0_v3_v4() {
    golden_versions(
        &[0, 3, 4],
        4,
        |version| HeartbeatResponse {
            throttle_time_ms: since(version, 1, 5),
            error_code: 27,
        },
        |b, version| b.when(version >= 1, |b| b.i32(5)).i16(27).tagged(),
    );
}

#[test]
fn join_group_response_v5_v6_v7() {
    golden_versions(
        &[5, 6, 7],
        6,
        |version| JoinGroupResponse {
            throttle_time_ms: 1,
            error_code: 0,
            generation_id: 3,
            protocol_type: since(version, 7, Some("consumer".into())),
            protocol_name: Some("range".into()),
            leader: "m-1".into(),
            skip_assignment: false,
            member_id: "m-2".into(),
            members: vec![JoinGroupMember {
                member_id: "m-1".into(),
                group_instance_id: None,
                metadata: vec![9],
            }],
        },
        |b, version| {
            b.i32(1)
                .i16(0)
                .i32(3)
                .when(version >= 7, |b| b.string("consumer"))
                .string("range")
                .string("m-1")
                .string("m-2")
                .array(1)
                .string("m-1")
                .null_string()
                .blob(&[9])
                .tagged()
                .tagged()
        },
    );
}

#[test]
fn sync_group_response_v0_v3_v4_v5() {
    golden_versions(
        &[0, 3, 4, 5],
        4,
        |version| SyncGroupResponse {
            throttle_time_ms: since(version, 1, 2),
            error_code: 27,
            protocol_type: since(version, 5, Some("consumer".into())),
            protocol_name: since(version, 5, Some("range".into())),
            assignment: vec![],
        },
        |b, version| {
            b.when(version >= 1, |b| b.i32(2))
                .i16(27)
                .when(version >= 5, |b| b.string("consumer").string("range"))
                .blob(&[])
                .tagged()
        },
    );
}

#[test]
fn leave_group_response_v0_v3_v4() {
    let mut msg = LeaveGroupResponse {
        throttle_time_ms: 0,
        error_code: 0,
        members: vec![],
    };
    golden(&msg, 0, &B::new().i16(0).done());
    msg.throttle_time_ms = 4;
    msg.members = vec![
        LeftMember {
            member_id: "m-1".into(),
            group_instance_id: None,
            error_code: 0,
        },
        LeftMember {
            member_id: "m-9".into(),
            group_instance_id: None,
            error_code: 25,
        },
    ];
    golden_versions(
        &[3, 4],
        4,
        |_| msg.clone(),
        |b, _| {
            b.i32(4)
                .i16(0)
                .array(2)
                .string("m-1")
                .null_string()
                .i16(0)
                .tagged()
                .string("m-9")
                .null_string()
                .i16(25)
                .tagged()
                .tagged()
        },
    );
}

#[test]
fn offset_commit_response_v2_v7_v8() {
    golden_versions(
        &[2, 7, 8],
        8,
        |version| OffsetCommitResponse {
            throttle_time_ms: since(version, 3, 3),
            topics: vec![OffsetCommitTopicResult {
                name: "t".into(),
                partitions: vec![OffsetCommitPartitionResult {
                    partition_index: 1,
                    error_code: 22,
                }],
            }],
        },
        |b, version| {
            b.when(version >= 3, |b| b.i32(3))
                .array(1)
                .string("t")
                .array(1)
                .i32(1)
                .i16(22)
                .tagged()
                .tagged()
                .tagged()
        },
    );
}

/// "All partitions", which no captured request asks for (the capture
/// sessions name their topic): a null array, classic and flexible.
#[test]
fn offset_fetch_request_for_all_partitions_v5_v7() {
    golden_versions(
        &[5, 7],
        6,
        |version| OffsetFetchRequest {
            group_id: "g".into(),
            topics: None,
            require_stable: since(version, 7, true),
        },
        |b, version| {
            b.string("g")
                .null_array()
                .when(version >= 7, |b| b.bool(true))
                .tagged()
        },
    );
}

#[test]
fn offset_fetch_response_v1_v5_v6() {
    golden_versions(
        &[1, 5, 6],
        6,
        |version| OffsetFetchResponse {
            throttle_time_ms: since(version, 3, 1),
            topics: vec![OffsetFetchTopicResult {
                name: "t".into(),
                partitions: vec![OffsetFetchPartition {
                    partition_index: 0,
                    committed_offset: 42,
                    committed_leader_epoch: if version >= 5 { 2 } else { -1 },
                    metadata: Some(String::new()),
                    error_code: 0,
                }],
            }],
            error_code: 0,
        },
        |b, version| {
            b.when(version >= 3, |b| b.i32(1))
                .array(1)
                .string("t")
                .array(1)
                .i32(0)
                .i64(42)
                .when(version >= 5, |b| b.i32(2))
                .string("")
                .i16(0)
                .tagged()
                .tagged()
                .when(version >= 2, |b| b.i16(0))
                .tagged()
        },
    );
}

#[test]
fn describe_groups_response_v4_v5() {
    let resp = DescribeGroupsResponse {
        throttle_time_ms: 0,
        groups: vec![DescribedGroup {
            error_code: 0,
            group_id: "g".into(),
            group_state: "Stable".into(),
            protocol_type: "consumer".into(),
            protocol_data: "range".into(),
            members: vec![DescribedMember {
                member_id: "m-1".into(),
                group_instance_id: None,
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                member_metadata: vec![1],
                member_assignment: vec![2],
            }],
            authorized_operations: i32::MIN,
        }],
    };
    golden_versions(
        &[4, 5],
        5,
        |_| resp.clone(),
        |b, _| {
            b.i32(0)
                .array(1)
                .i16(0)
                .string("g")
                .string("Stable")
                .string("consumer")
                .string("range")
                .array(1)
                .string("m-1")
                .null_string()
                .string("c")
                .string("/127.0.0.1")
                .blob(&[1])
                .blob(&[2])
                .tagged()
                .i32(i32::MIN)
                .tagged()
                .tagged()
        },
    );
}

#[test]
fn list_groups_response_v0_v2_v3_v4() {
    golden_versions(
        &[0, 2, 3, 4],
        3,
        |version| ListGroupsResponse {
            throttle_time_ms: 0,
            error_code: 0,
            groups: vec![ListedGroup {
                group_id: "g".into(),
                protocol_type: "consumer".into(),
                group_state: since(version, 4, "Empty".into()),
            }],
        },
        |b, version| {
            b.when(version >= 1, |b| b.i32(0))
                .i16(0)
                .array(1)
                .string("g")
                .string("consumer")
                .when(version >= 4, |b| b.string("Empty"))
                .tagged()
                .tagged()
        },
    );
}
