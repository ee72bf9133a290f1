//! Golden bytes for the responses of the consumer-group APIs, written
//! field by field from Kafka's message definitions, on both sides of each
//! API's flexible-version boundary. Requests are pinned by what real
//! clients sent (`captured.rs`): each of these APIs has a captured request
//! in both its classic and its flexible versions. The request case left
//! here is what no capture sends: OffsetFetch of all partitions.

mod common;

use common::{golden, B};
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
    for version in [0, 3, 4] {
        let msg = HeartbeatResponse {
            throttle_time_ms: if version >= 1 { 5 } else { 0 },
            error_code: 27,
        };
        let expected = B::at(version >= 4)
            .when(version >= 1, |b| b.i32(5))
            .i16(27)
            .tagged()
            .done();
        golden(&msg, version, &expected);
    }
}

fn join_response() -> JoinGroupResponse {
    JoinGroupResponse {
        throttle_time_ms: 1,
        error_code: 0,
        generation_id: 3,
        protocol_type: None,
        protocol_name: Some("range".into()),
        leader: "m-1".into(),
        skip_assignment: false,
        member_id: "m-2".into(),
        members: vec![JoinGroupMember {
            member_id: "m-1".into(),
            group_instance_id: None,
            metadata: vec![9],
        }],
    }
}

#[test]
fn join_group_response_v5_v6_v7() {
    for version in [5, 6, 7] {
        let mut msg = join_response();
        if version >= 7 {
            msg.protocol_type = Some("consumer".into());
        }
        let expected = B::at(version >= 6)
            .i32(1)
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
            .done();
        golden(&msg, version, &expected);
    }
}

#[test]
fn sync_group_response_v0_v3_v4_v5() {
    for version in [0, 3, 4, 5] {
        let with_protocol = |name: &str| (version >= 5).then(|| name.to_owned());
        let msg = SyncGroupResponse {
            throttle_time_ms: if version >= 1 { 2 } else { 0 },
            error_code: 27,
            protocol_type: with_protocol("consumer"),
            protocol_name: with_protocol("range"),
            assignment: vec![],
        };
        let expected = B::at(version >= 4)
            .when(version >= 1, |b| b.i32(2))
            .i16(27)
            .when(version >= 5, |b| b.string("consumer").string("range"))
            .blob(&[])
            .tagged()
            .done();
        golden(&msg, version, &expected);
    }
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
    for version in [3, 4] {
        let expected = B::at(version >= 4)
            .i32(4)
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
            .done();
        golden(&msg, version, &expected);
    }
}

#[test]
fn offset_commit_response_v2_v7_v8() {
    for version in [2, 7, 8] {
        let msg = OffsetCommitResponse {
            throttle_time_ms: if version >= 3 { 3 } else { 0 },
            topics: vec![OffsetCommitTopicResult {
                name: "t".into(),
                partitions: vec![OffsetCommitPartitionResult {
                    partition_index: 1,
                    error_code: 22,
                }],
            }],
        };
        let expected = B::at(version >= 8)
            .when(version >= 3, |b| b.i32(3))
            .array(1)
            .string("t")
            .array(1)
            .i32(1)
            .i16(22)
            .tagged()
            .tagged()
            .tagged()
            .done();
        golden(&msg, version, &expected);
    }
}

/// "All partitions", which no captured request asks for (the capture
/// sessions name their topic): a null array, classic and flexible.
#[test]
fn offset_fetch_request_for_all_partitions_v5_v7() {
    for version in [5, 7] {
        let msg = OffsetFetchRequest {
            group_id: "g".into(),
            topics: None,
            require_stable: version >= 7, // v5 has no require_stable
        };
        let expected = B::at(version >= 6)
            .string("g")
            .null_array()
            .when(version >= 7, |b| b.bool(true))
            .tagged()
            .done();
        golden(&msg, version, &expected);
    }
}

#[test]
fn offset_fetch_response_v1_v5_v6() {
    for version in [1, 5, 6] {
        let msg = OffsetFetchResponse {
            throttle_time_ms: if version >= 3 { 1 } else { 0 },
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
        };
        let expected = B::at(version >= 6)
            .when(version >= 3, |b| b.i32(1))
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
            .done();
        golden(&msg, version, &expected);
    }
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
    for version in [4, 5] {
        let expected = B::at(version >= 5)
            .i32(0)
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
            .done();
        golden(&resp, version, &expected);
    }
}

#[test]
fn list_groups_response_v0_v2_v3_v4() {
    for version in [0, 2, 3, 4] {
        let state = if version >= 4 { "Empty" } else { "" };
        let resp = ListGroupsResponse {
            throttle_time_ms: 0,
            error_code: 0,
            groups: vec![ListedGroup {
                group_id: "g".into(),
                protocol_type: "consumer".into(),
                group_state: state.into(),
            }],
        };
        let expected = B::at(version >= 3)
            .when(version >= 1, |b| b.i32(0))
            .i16(0)
            .array(1)
            .string("g")
            .string("consumer")
            .when(version >= 4, |b| b.string(state))
            .tagged()
            .tagged()
            .done();
        golden(&resp, version, &expected);
    }
}
