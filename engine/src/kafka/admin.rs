//! Topic admin and producer ids: CreateTopics (partitions become segments;
//! the replication factor and topic configs are ignored), DeleteTopics (by
//! name; topic ids are not kept), DescribeConfigs (a small fixed set of
//! values clients ask for) and InitProducerId (idempotent producers only;
//! transactional ids are refused).

use kafka::api::create_topics::{CreatableTopicResult, CreateTopicsRequest, CreateTopicsResponse};
use kafka::api::delete_topics::{DeletableTopicResult, DeleteTopicsRequest, DeleteTopicsResponse};
use kafka::api::describe_configs::{
    DescribeConfigsEntry, DescribeConfigsRequest, DescribeConfigsResponse, DescribeConfigsResult,
};
use kafka::api::init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};
use kafka::error_code as k;
use kafka::Uuid;

use super::topics::{kafka_error, kelp_name};
use super::Gateway;

/// Partitions of a topic created without a count (-1).
const DEFAULT_PARTITIONS: i32 = 1;
/// Most partitions one topic may have through the gateway.
const PARTITIONS_MAX: i32 = 1024;

pub(crate) async fn create_topics(
    gateway: &Gateway,
    request: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for t in request.topics {
        let partitions = if t.num_partitions == -1 {
            DEFAULT_PARTITIONS
        } else {
            t.num_partitions
        };
        let result = if !(1..=PARTITIONS_MAX).contains(&partitions) {
            Err((
                k::INVALID_PARTITIONS,
                format!("partitions must be 1..={PARTITIONS_MAX}, got {partitions}"),
            ))
        } else if request.validate_only {
            control::TopicName::parse(&kelp_name(&t.name))
                .map(|_| ())
                .map_err(|e| (k::INVALID_TOPIC_EXCEPTION, e.to_string()))
        } else {
            gateway
                .topics
                .create(&t.name, partitions as u32)
                .await
                .map_err(|e| (kafka_error(&e), e.message))
        };
        let (error_code, error_message) = match result {
            Ok(()) => (k::NONE, None),
            Err((code, message)) => (code, Some(message)),
        };
        topics.push(CreatableTopicResult {
            name: t.name,
            topic_id: Uuid::ZERO,
            error_code,
            error_message,
            topic_config_error_code: k::NONE,
            num_partitions: if error_code == k::NONE {
                partitions
            } else {
                -1
            },
            replication_factor: if error_code == k::NONE { 1 } else { -1 },
            configs: None,
        });
    }
    CreateTopicsResponse {
        throttle_time_ms: 0,
        topics,
    }
}

pub(crate) async fn delete_topics(
    gateway: &Gateway,
    request: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    let mut responses = Vec::with_capacity(request.topics.len());
    for t in request.topics {
        let (error_code, error_message) = match &t.name {
            None => (
                k::UNKNOWN_TOPIC_OR_PARTITION,
                Some("topics are deleted by name; topic ids are not kept".to_string()),
            ),
            Some(name) => match gateway.topics.delete(name).await {
                Ok(()) => {
                    gateway.producers.forget_topic(name);
                    (k::NONE, None)
                }
                Err(e) => (kafka_error(&e), Some(e.message)),
            },
        };
        responses.push(DeletableTopicResult {
            name: t.name,
            topic_id: t.topic_id,
            error_code,
            error_message,
        });
    }
    DeleteTopicsResponse {
        throttle_time_ms: 0,
        responses,
    }
}

/// Resource types of DescribeConfigs.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// Config sources: the default.
const SOURCE_DEFAULT: i8 = 5;
/// Config types: STRING.
const TYPE_STRING: i8 = 2;

/// The topic configs every Kafka-facing topic reports.
const TOPIC_CONFIGS: &[(&str, &str)] = &[
    ("cleanup.policy", "delete"),
    ("compression.type", "producer"),
    ("max.message.bytes", "7340032"),
    ("message.timestamp.type", "CreateTime"),
    ("min.insync.replicas", "1"),
    ("retention.bytes", "-1"),
    ("retention.ms", "-1"),
];

/// The broker configs the gateway reports.
const BROKER_CONFIGS: &[(&str, &str)] = &[
    ("auto.create.topics.enable", "true"),
    ("default.replication.factor", "1"),
    ("message.max.bytes", "7340032"),
    ("num.partitions", "1"),
    ("offsets.topic.replication.factor", "1"),
];

pub(crate) async fn describe_configs(
    gateway: &Gateway,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let mut results = Vec::with_capacity(request.resources.len());
    for r in request.resources {
        let (error_code, error_message, table) = match r.resource_type {
            RESOURCE_TOPIC => match gateway.topics.layout(&r.resource_name).await {
                Ok(_) => (k::NONE, None, TOPIC_CONFIGS),
                Err(e) => (kafka_error(&e), Some(e.message), &[][..]),
            },
            RESOURCE_BROKER => (k::NONE, None, BROKER_CONFIGS),
            other => (
                k::INVALID_REQUEST,
                Some(format!("resource type {other} is not described")),
                &[][..],
            ),
        };
        let configs = table
            .iter()
            .filter(|(name, _)| {
                r.configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.iter().any(|k| k == name))
            })
            .map(|(name, value)| DescribeConfigsEntry {
                name: (*name).to_string(),
                value: Some((*value).to_string()),
                read_only: true,
                is_default: true,
                config_source: SOURCE_DEFAULT,
                is_sensitive: false,
                synonyms: Vec::new(),
                config_type: TYPE_STRING,
                documentation: None,
            })
            .collect();
        results.push(DescribeConfigsResult {
            error_code,
            error_message,
            resource_type: r.resource_type,
            resource_name: r.resource_name,
            configs,
        });
    }
    DescribeConfigsResponse {
        throttle_time_ms: 0,
        results,
    }
}

pub(crate) async fn init_producer_id(
    gateway: &Gateway,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let refuse = |error_code| InitProducerIdResponse {
        throttle_time_ms: 0,
        error_code,
        producer_id: -1,
        producer_epoch: -1,
    };
    if request.transactional_id.is_some() {
        return refuse(k::INVALID_REQUEST);
    }
    // KIP-360: a producer that has an id asks for its epoch to be bumped.
    // An exhausted epoch gets a new id, epoch 0.
    if request.producer_id >= 0 && (0..i16::MAX).contains(&request.producer_epoch) {
        return InitProducerIdResponse {
            throttle_time_ms: 0,
            error_code: k::NONE,
            producer_id: request.producer_id,
            producer_epoch: request.producer_epoch + 1,
        };
    }
    match gateway.producer_ids.next().await {
        Ok(producer_id) => InitProducerIdResponse {
            throttle_time_ms: 0,
            error_code: k::NONE,
            producer_id,
            producer_epoch: 0,
        },
        Err(e) => {
            log::error!("Kafka gateway: reserving producer ids: {e}");
            refuse(k::COORDINATOR_NOT_AVAILABLE)
        }
    }
}
