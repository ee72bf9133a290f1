//! Golden bytes for the responses of ApiVersions, FindCoordinator, the
//! topic admin APIs, InitProducerId and DescribeConfigs, written field by
//! field from Kafka's message definitions, on both sides of each
//! flexible-version boundary, with fields the gateway's own answers leave
//! at their defaults set. Requests are pinned by what real clients sent
//! (`captured.rs`): each of these APIs has a captured request in both its
//! classic and its flexible versions.

mod common;

use common::{golden, golden_versions, since, B};
use kelp_kafka::api::api_versions::*;
use kelp_kafka::api::create_topics::*;
use kelp_kafka::api::delete_topics::*;
use kelp_kafka::api::describe_configs::*;
use kelp_kafka::api::find_coordinator::*;
use kelp_kafka::api::init_producer_id::*;
use kelp_kafka::{Message, Uuid};

#[test]
fn api_versions_response_v0_v2_v3() {
    golden_versions(
        &[0, 2, 3],
        3,
        |version| ApiVersionsResponse {
            error_code: 0,
            api_keys: vec![
                ApiVersion {
                    api_key: 0,
                    min_version: 3,
                    max_version: 9,
                },
                ApiVersion {
                    api_key: 18,
                    min_version: 0,
                    max_version: 4,
                },
            ],
            throttle_time_ms: since(version, 1, 1),
        },
        |b, version| {
            b.i16(0)
                .array(2)
                .i16(0)
                .i16(3)
                .i16(9)
                .tagged()
                .i16(18)
                .i16(0)
                .i16(4)
                .tagged()
                .when(version >= 1, |b| b.i32(1))
                .tagged()
        },
    );
}

#[test]
fn api_versions_response_v3_skips_feature_tags() {
    // SupportedFeatures (tag 0) with one entry, FinalizedFeaturesEpoch
    // (tag 1): the decoder skips both.
    let features = B::new().carr(1).cstr("f").i16(0).i16(1).tags().done();
    let bytes = B::new()
        .i16(0)
        .carr(0)
        .i32(0)
        .uvar(2)
        .uvar(0)
        .uvar(features.len() as u32)
        .raw(&features)
        .uvar(1)
        .uvar(8)
        .i64(5)
        .done();
    let msg = ApiVersionsResponse::decode_exact(&bytes, 3).expect("decode");
    assert_eq!(msg, ApiVersionsResponse::default());
}

#[test]
fn api_versions_supported_lists_the_table() {
    let msg = ApiVersionsResponse::supported(0);
    assert_eq!(msg.api_keys.len(), kelp_kafka::SUPPORTED_APIS.len());
    for (row, key) in kelp_kafka::SUPPORTED_APIS.iter().zip(&msg.api_keys) {
        assert_eq!(key.api_key, row.api_key.code());
        assert_eq!((key.min_version, key.max_version), (row.min, row.max));
    }
}

#[test]
fn find_coordinator_response_v0_v2_v3_v4() {
    let mut resp = FindCoordinatorResponse {
        throttle_time_ms: 0,
        coordinators: vec![Coordinator {
            key: String::new(),
            node_id: 1,
            host: "localhost".into(),
            port: 9092,
            error_code: 0,
            error_message: None,
        }],
    };
    golden_versions(
        &[0, 2, 3],
        3,
        |_| resp.clone(),
        |b, version| {
            b.when(version >= 1, |b| b.i32(0))
                .i16(0)
                .when(version >= 1, |b| b.null_string())
                .i32(1)
                .string("localhost")
                .i32(9092)
                .tagged()
        },
    );
    resp.coordinators[0].key = "g".into();
    golden(
        &resp,
        4,
        &B::new()
            .i32(0)
            .carr(1)
            .cstr("g")
            .i32(1)
            .cstr("localhost")
            .i32(9092)
            .i16(0)
            .cnull()
            .tags()
            .tags()
            .done(),
    );
}

#[test]
fn create_topics_response_v4_v5_v7_and_its_tagged_field() {
    let mut msg = CreateTopicsResponse {
        throttle_time_ms: 0,
        topics: vec![CreatableTopicResult {
            name: "t".into(),
            error_code: 36,
            error_message: Some("exists".into()),
            ..Default::default()
        }],
    };
    golden(
        &msg,
        4,
        &B::new().i32(0).arr(1).str("t").i16(36).str("exists").done(),
    );
    // topic_config_error_code is 0, its default: the tag buffer is empty.
    let mut id = [0u8; 16];
    id[0] = 1;
    golden_versions(
        &[5, 7],
        5,
        |version| {
            let mut msg = msg.clone();
            msg.topics[0].topic_id = since(version, 7, Uuid(id));
            msg
        },
        |b, version| {
            b.i32(0)
                .carr(1)
                .cstr("t")
                .when(version >= 7, |b| b.uuid(id))
                .i16(36)
                .cstr("exists")
                .i32(-1)
                .i16(-1)
                .cnull()
                .tags()
                .tags()
        },
    );
    // A non-default value is written as tag 0, size 2, INT16.
    msg.topics[0].topic_config_error_code = 29;
    msg.topics[0].configs = Some(vec![CreatableTopicConfigs {
        name: "k".into(),
        value: Some("v".into()),
        read_only: false,
        config_source: 5,
        is_sensitive: false,
    }]);
    golden(
        &msg,
        5,
        &B::new()
            .i32(0)
            .carr(1)
            .cstr("t")
            .i16(36)
            .cstr("exists")
            .i32(-1)
            .i16(-1)
            .carr(1)
            .cstr("k")
            .cstr("v")
            .bool(false)
            .i8(5)
            .bool(false)
            .tags()
            .uvar(1)
            .uvar(0)
            .uvar(2)
            .i16(29)
            .tags()
            .done(),
    );
}

#[test]
fn delete_topics_response_v1_v3_v4_v5() {
    golden_versions(
        &[1, 3, 4, 5],
        4,
        |version| DeleteTopicsResponse {
            throttle_time_ms: 0,
            responses: vec![DeletableTopicResult {
                name: Some("t".into()),
                topic_id: Uuid::ZERO,
                error_code: 3,
                error_message: since(version, 5, Some("unknown".into())),
            }],
        },
        |b, version| {
            b.i32(0)
                .array(1)
                .string("t")
                .i16(3)
                .when(version >= 5, |b| b.string("unknown"))
                .tagged()
                .tagged()
        },
    );
}

#[test]
fn init_producer_id_response_v1_v2() {
    let resp = InitProducerIdResponse {
        throttle_time_ms: 0,
        error_code: 0,
        producer_id: 1000,
        producer_epoch: 0,
    };
    golden_versions(
        &[1, 2],
        2,
        |_| resp,
        |b, _| b.i32(0).i16(0).i64(1000).i16(0).tagged(),
    );
}

#[test]
fn describe_configs_response_v0_v3_v4() {
    let entry = DescribeConfigsEntry {
        name: "cleanup.policy".into(),
        value: Some("delete".into()),
        read_only: true,
        is_default: true,
        ..Default::default()
    };
    let mut resp = DescribeConfigsResponse {
        throttle_time_ms: 0,
        results: vec![DescribeConfigsResult {
            error_code: 0,
            error_message: None,
            resource_type: 2,
            resource_name: "t".into(),
            configs: vec![entry],
        }],
    };
    golden(
        &resp,
        0,
        &B::new()
            .i32(0)
            .arr(1)
            .i16(0)
            .null_str()
            .i8(2)
            .str("t")
            .arr(1)
            .str("cleanup.policy")
            .str("delete")
            .bool(true)
            .bool(true)
            .bool(false)
            .done(),
    );
    let c = &mut resp.results[0].configs[0];
    c.is_default = false;
    c.config_source = 5;
    c.synonyms = vec![DescribeConfigsSynonym {
        name: "log.cleanup.policy".into(),
        value: Some("delete".into()),
        source: 5,
    }];
    c.config_type = 2;
    c.documentation = None;
    golden_versions(
        &[3, 4],
        4,
        |_| resp.clone(),
        |b, _| {
            b.i32(0)
                .array(1)
                .i16(0)
                .null_string()
                .i8(2)
                .string("t")
                .array(1)
                .string("cleanup.policy")
                .string("delete")
                .bool(true)
                .i8(5)
                .bool(false)
                .array(1)
                .string("log.cleanup.policy")
                .string("delete")
                .i8(5)
                .tagged()
                .i8(2)
                .null_string()
                .tagged()
                .tagged()
                .tagged()
        },
    );
}
