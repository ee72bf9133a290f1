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
    let mut msg = HeartbeatResponse {
        throttle_time_ms: 0,
        error_code: 27,
    };
    golden(&msg, 0, &B::new().i16(27).done());
    msg.throttle_time_ms = 5;
    golden(&msg, 3, &B::new().i32(5).i16(27).done());
    golden(&msg, 4, &B::new().i32(5).i16(27).tags().done());
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
    let msg = join_response();
    golden(
        &msg,
        5,
        &B::new()
            .i32(1)
            .i16(0)
            .i32(3)
            .str("range")
            .str("m-1")
            .str("m-2")
            .arr(1)
            .str("m-1")
            .null_str()
            .bytes(&[9])
            .done(),
    );
    golden(
        &msg,
        6,
        &B::new()
            .i32(1)
            .i16(0)
            .i32(3)
            .cstr("range")
            .cstr("m-1")
            .cstr("m-2")
            .carr(1)
            .cstr("m-1")
            .cnull()
            .cbytes(&[9])
            .tags()
            .tags()
            .done(),
    );
    let mut msg = join_response();
    msg.protocol_type = Some("consumer".into());
    golden(
        &msg,
        7,
        &B::new()
            .i32(1)
            .i16(0)
            .i32(3)
            .cstr("consumer")
            .cstr("range")
            .cstr("m-1")
            .cstr("m-2")
            .carr(1)
            .cstr("m-1")
            .cnull()
            .cbytes(&[9])
            .tags()
            .tags()
            .done(),
    );
}

#[test]
fn sync_group_response_v0_v3_v4_v5() {
    let mut msg = SyncGroupResponse {
        throttle_time_ms: 0,
        error_code: 27,
        protocol_type: None,
        protocol_name: None,
        assignment: vec![],
    };
    golden(&msg, 0, &B::new().i16(27).bytes(&[]).done());
    msg.throttle_time_ms = 2;
    golden(&msg, 3, &B::new().i32(2).i16(27).bytes(&[]).done());
    golden(&msg, 4, &B::new().i32(2).i16(27).cbytes(&[]).tags().done());
    msg.protocol_type = Some("consumer".into());
    msg.protocol_name = Some("range".into());
    golden(
        &msg,
        5,
        &B::new()
            .i32(2)
            .i16(27)
            .cstr("consumer")
            .cstr("range")
            .cbytes(&[])
            .tags()
            .done(),
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
    golden(
        &msg,
        3,
        &B::new()
            .i32(4)
            .i16(0)
            .arr(2)
            .str("m-1")
            .null_str()
            .i16(0)
            .str("m-9")
            .null_str()
            .i16(25)
            .done(),
    );
    golden(
        &msg,
        4,
        &B::new()
            .i32(4)
            .i16(0)
            .carr(2)
            .cstr("m-1")
            .cnull()
            .i16(0)
            .tags()
            .cstr("m-9")
            .cnull()
            .i16(25)
            .tags()
            .tags()
            .done(),
    );
}

#[test]
fn offset_commit_response_v2_v7_v8() {
    let mut msg = OffsetCommitResponse {
        throttle_time_ms: 0,
        topics: vec![OffsetCommitTopicResult {
            name: "t".into(),
            partitions: vec![OffsetCommitPartitionResult {
                partition_index: 1,
                error_code: 22,
            }],
        }],
    };
    golden(
        &msg,
        2,
        &B::new().arr(1).str("t").arr(1).i32(1).i16(22).done(),
    );
    msg.throttle_time_ms = 3;
    golden(
        &msg,
        7,
        &B::new().i32(3).arr(1).str("t").arr(1).i32(1).i16(22).done(),
    );
    golden(
        &msg,
        8,
        &B::new()
            .i32(3)
            .carr(1)
            .cstr("t")
            .carr(1)
            .i32(1)
            .i16(22)
            .tags()
            .tags()
            .tags()
            .done(),
    );
}

/// "All partitions", which no captured request asks for (the capture
/// sessions name their topic): a null array, classic and flexible.
#[test]
fn offset_fetch_request_for_all_partitions_v5_v7() {
    let mut msg = OffsetFetchRequest {
        group_id: "g".into(),
        topics: None,
        require_stable: false, // v5 has no require_stable
    };
    golden(&msg, 5, &B::new().str("g").arr(-1).done());
    msg.require_stable = true;
    golden(
        &msg,
        7,
        &B::new().cstr("g").cnull().bool(true).tags().done(),
    );
}

#[test]
fn offset_fetch_response_v1_v5_v6() {
    let mut msg = OffsetFetchResponse {
        throttle_time_ms: 0,
        topics: vec![OffsetFetchTopicResult {
            name: "t".into(),
            partitions: vec![OffsetFetchPartition {
                partition_index: 0,
                committed_offset: 42,
                committed_leader_epoch: -1,
                metadata: Some(String::new()),
                error_code: 0,
            }],
        }],
        error_code: 0,
    };
    golden(
        &msg,
        1,
        &B::new()
            .arr(1)
            .str("t")
            .arr(1)
            .i32(0)
            .i64(42)
            .str("")
            .i16(0)
            .done(),
    );
    msg.throttle_time_ms = 1;
    msg.topics[0].partitions[0].committed_leader_epoch = 2;
    golden(
        &msg,
        5,
        &B::new()
            .i32(1)
            .arr(1)
            .str("t")
            .arr(1)
            .i32(0)
            .i64(42)
            .i32(2)
            .str("")
            .i16(0)
            .i16(0)
            .done(),
    );
    golden(
        &msg,
        6,
        &B::new()
            .i32(1)
            .carr(1)
            .cstr("t")
            .carr(1)
            .i32(0)
            .i64(42)
            .i32(2)
            .cstr("")
            .i16(0)
            .tags()
            .tags()
            .i16(0)
            .tags()
            .done(),
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
    golden(
        &resp,
        4,
        &B::new()
            .i32(0)
            .arr(1)
            .i16(0)
            .str("g")
            .str("Stable")
            .str("consumer")
            .str("range")
            .arr(1)
            .str("m-1")
            .null_str()
            .str("c")
            .str("/127.0.0.1")
            .bytes(&[1])
            .bytes(&[2])
            .i32(i32::MIN)
            .done(),
    );
    golden(
        &resp,
        5,
        &B::new()
            .i32(0)
            .carr(1)
            .i16(0)
            .cstr("g")
            .cstr("Stable")
            .cstr("consumer")
            .cstr("range")
            .carr(1)
            .cstr("m-1")
            .cnull()
            .cstr("c")
            .cstr("/127.0.0.1")
            .cbytes(&[1])
            .cbytes(&[2])
            .tags()
            .i32(i32::MIN)
            .tags()
            .tags()
            .done(),
    );
}

#[test]
fn list_groups_response_v0_v2_v3_v4() {
    let mut resp = ListGroupsResponse {
        throttle_time_ms: 0,
        error_code: 0,
        groups: vec![ListedGroup {
            group_id: "g".into(),
            protocol_type: "consumer".into(),
            group_state: String::new(),
        }],
    };
    golden(
        &resp,
        0,
        &B::new().i16(0).arr(1).str("g").str("consumer").done(),
    );
    golden(
        &resp,
        2,
        &B::new()
            .i32(0)
            .i16(0)
            .arr(1)
            .str("g")
            .str("consumer")
            .done(),
    );
    golden(
        &resp,
        3,
        &B::new()
            .i32(0)
            .i16(0)
            .carr(1)
            .cstr("g")
            .cstr("consumer")
            .tags()
            .tags()
            .done(),
    );
    resp.groups[0].group_state = "Empty".into();
    golden(
        &resp,
        4,
        &B::new()
            .i32(0)
            .i16(0)
            .carr(1)
            .cstr("g")
            .cstr("consumer")
            .cstr("Empty")
            .tags()
            .tags()
            .done(),
    );
}
