//! Topic admin and producer ids: CreateTopics (partitions become segments;
//! the replication factor and topic configs are ignored), DeleteTopics (by
//! name; topic ids are not kept), DescribeConfigs (the broker configs the
//! gateway honours and the topic configs it applies, with their Kafka
//! types and sources) and InitProducerId (idempotent producers only;
//! transactional ids are refused).

use kafka::api::create_topics::{CreatableTopicResult, CreateTopicsRequest, CreateTopicsResponse};
use kafka::api::delete_topics::{DeletableTopicResult, DeleteTopicsRequest, DeleteTopicsResponse};
use kafka::api::describe_configs::{
    DescribeConfigsEntry, DescribeConfigsRequest, DescribeConfigsResponse, DescribeConfigsResult,
};
use kafka::api::init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};
use kafka::error_code as k;
use kafka::Uuid;
use wire::ErrorCode;

use super::topics::{kafka_error, kelp_name};
use super::Gateway;

/// Most partitions one topic may have through the gateway.
const PARTITIONS_MAX: i32 = crate::config::KAFKA_PARTITIONS_MAX as i32;

pub(crate) async fn create_topics(
    gateway: &Gateway,
    request: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for t in request.topics {
        let partitions = if t.num_partitions == -1 {
            gateway.settings.num_partitions as i32
        } else {
            t.num_partitions
        };
        // -1: the control plane's default (1 today).
        let replicas = match t.replication_factor {
            -1 => Some(0),
            rf => u8::try_from(rf)
                .ok()
                .filter(|rf| (1..=control::REPLICAS_MAX).contains(rf)),
        };
        let result = if !(1..=PARTITIONS_MAX).contains(&partitions) {
            Err((
                k::INVALID_PARTITIONS,
                format!("partitions must be 1..={PARTITIONS_MAX}, got {partitions}"),
            ))
        } else if let (None, rf) = (replicas, t.replication_factor) {
            Err((
                k::INVALID_REPLICATION_FACTOR,
                format!(
                    "replication factor must be -1 or 1..={}, got {rf}",
                    control::REPLICAS_MAX
                ),
            ))
        } else if request.validate_only {
            control::TopicName::parse(&kelp_name(&t.name))
                .map(|_| usize::from(replicas.unwrap_or(1).max(1)))
                .map_err(|e| (k::INVALID_TOPIC_EXCEPTION, e.to_string()))
        } else {
            gateway
                .topics
                .create(&t.name, partitions as u32, replicas.unwrap_or(0))
                .await
                .map_err(|e| match e.code {
                    // The partition count was checked above: what is left
                    // is a replica count the live brokers cannot hold.
                    ErrorCode::InvalidArgument => (k::INVALID_REPLICATION_FACTOR, e.message),
                    _ => (kafka_error(&e), e.message),
                })
        };
        let (error_code, error_message, kept_on) = match result {
            Ok(kept_on) => (k::NONE, None, kept_on),
            Err((code, message)) => (code, Some(message), 0),
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
            replication_factor: if error_code == k::NONE {
                i16::try_from(kept_on).unwrap_or(i16::MAX)
            } else {
                -1
            },
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
/// Config sources (DescribeConfigs v1+): set in the broker's own
/// configuration (a `kelp serve` flag or the config file), or the default.
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// A config's Kafka type (DescribeConfigs v3+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    List = 7,
}

/// One config as DescribeConfigs shows it.
struct Config {
    name: &'static str,
    value: String,
    kind: ConfigType,
    /// Whether it is the default (else a broker flag set it).
    default: bool,
}

impl Config {
    fn fixed(name: &'static str, value: &str, kind: ConfigType) -> Config {
        Config {
            name,
            value: value.to_owned(),
            kind,
            default: true,
        }
    }

    /// A setting of [`KafkaSettings`](crate::config::KafkaSettings), a
    /// default when it equals `default`.
    fn setting(name: &'static str, value: u32, default: u32) -> Config {
        Config {
            name,
            value: value.to_string(),
            kind: ConfigType::Int,
            default: value == default,
        }
    }
}

/// The topic configs every Kafka-facing topic reports: what kelp applies
/// (no retention yet, the largest batch kelp takes).
fn topic_configs() -> Vec<Config> {
    let max_message = wire::limits::BATCH_BYTES_MAX.to_string();
    vec![
        Config::fixed("cleanup.policy", "delete", ConfigType::List),
        Config::fixed("compression.type", "producer", ConfigType::String),
        Config::fixed("max.message.bytes", &max_message, ConfigType::Int),
        Config::fixed("message.timestamp.type", "CreateTime", ConfigType::String),
        Config::fixed("min.insync.replicas", "1", ConfigType::Int),
        Config::fixed("retention.bytes", "-1", ConfigType::Long),
        Config::fixed("retention.ms", "-1", ConfigType::Long),
    ]
}

/// The broker configs the gateway reports: those it honours, from its
/// settings, and the fixed ones clients look at.
fn broker_configs(gateway: &Gateway) -> Vec<Config> {
    let settings = &gateway.settings;
    let defaults = crate::config::KafkaSettings::default();
    let protocol = match (gateway.auth.is_some(), gateway.tls.is_some()) {
        (false, false) => "PLAINTEXT",
        (false, true) => "SSL",
        (true, false) => "SASL_PLAINTEXT",
        (true, true) => "SASL_SSL",
    };
    let listener = format!("{protocol}://{}", gateway.advertised);
    let max_message = wire::limits::BATCH_BYTES_MAX.to_string();
    vec![
        Config {
            name: "advertised.listeners",
            value: listener.clone(),
            kind: ConfigType::String,
            default: false,
        },
        Config::fixed("auto.create.topics.enable", "true", ConfigType::Boolean),
        Config::fixed("default.replication.factor", "1", ConfigType::Int),
        Config::setting(
            "group.initial.rebalance.delay.ms",
            settings.group_initial_rebalance_delay_ms,
            defaults.group_initial_rebalance_delay_ms,
        ),
        Config::setting(
            "group.max.session.timeout.ms",
            settings.group_max_session_timeout_ms,
            defaults.group_max_session_timeout_ms,
        ),
        Config::setting(
            "group.min.session.timeout.ms",
            settings.group_min_session_timeout_ms,
            defaults.group_min_session_timeout_ms,
        ),
        Config {
            name: "listeners",
            value: listener,
            kind: ConfigType::String,
            default: false,
        },
        Config::fixed("message.max.bytes", &max_message, ConfigType::Int),
        Config::setting(
            "num.partitions",
            settings.num_partitions,
            defaults.num_partitions,
        ),
        Config::fixed("offsets.topic.replication.factor", "1", ConfigType::Short),
    ]
}

pub(crate) async fn describe_configs(
    gateway: &Gateway,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let mut results = Vec::with_capacity(request.resources.len());
    for r in request.resources {
        let (error_code, error_message, table) = match r.resource_type {
            RESOURCE_TOPIC => match gateway.topics.layout(&r.resource_name).await {
                Ok(_) => (k::NONE, None, topic_configs()),
                Err(e) => (kafka_error(&e), Some(e.message), Vec::new()),
            },
            RESOURCE_BROKER => (k::NONE, None, broker_configs(gateway)),
            other => (
                k::INVALID_REQUEST,
                Some(format!("resource type {other} is not described")),
                Vec::new(),
            ),
        };
        let configs = table
            .into_iter()
            .filter(|c| {
                r.configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.iter().any(|k| k == c.name))
            })
            .map(|c| DescribeConfigsEntry {
                name: c.name.to_string(),
                value: Some(c.value),
                // Nothing is changed at run time (no AlterConfigs yet).
                read_only: true,
                is_default: c.default,
                config_source: if c.default {
                    SOURCE_DEFAULT
                } else {
                    SOURCE_STATIC_BROKER
                },
                is_sensitive: false,
                synonyms: Vec::new(),
                config_type: c.kind as i8,
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
