//! Metadata: this gateway is the only broker (node 0, the controller and
//! every partition's leader). A requested topic that does not exist is
//! created with one partition when the request allows auto-creation (as
//! Kafka's `auto.create.topics.enable` default does), otherwise answered
//! with UNKNOWN_TOPIC_OR_PARTITION.

use kafka::api::metadata::{
    MetadataBroker, MetadataPartition, MetadataRequest, MetadataResponse, MetadataTopic,
};
use kafka::error_code as k;
use kafka::Uuid;
use wire::ErrorCode;

use super::topics::kafka_error;
use super::{Gateway, NODE_ID};

/// The cluster id every answer carries.
pub(crate) const CLUSTER_ID: &str = "kelp";

pub(crate) async fn metadata(
    gateway: &Gateway,
    request: MetadataRequest,
    version: i16,
) -> MetadataResponse {
    let all = request.wants_all_topics(version);
    let names: Vec<String> = match request.topics {
        _ if all => match gateway.topics.list().await {
            Ok(n) => n,
            Err(e) => {
                log::warn!("Kafka metadata: list topics: {}", e.message);
                Vec::new()
            }
        },
        Some(topics) => topics.into_iter().filter_map(|t| t.name).collect(),
        None => Vec::new(),
    };
    let mut topics = Vec::with_capacity(names.len());
    for name in names {
        let mut layout = gateway.topics.refresh(&name).await;
        if let Err(e) = &layout {
            if e.code == ErrorCode::TopicNotFound && request.allow_auto_topic_creation {
                let partitions = gateway.settings.num_partitions;
                layout = match gateway.topics.create(&name, partitions, 0).await {
                    Ok(_) => gateway.topics.refresh(&name).await,
                    // Another client created it meanwhile.
                    Err(e) if e.code == ErrorCode::TopicExists => {
                        gateway.topics.refresh(&name).await
                    }
                    Err(e) => Err(e),
                };
            }
        }
        topics.push(match layout {
            Ok(layout) => MetadataTopic {
                error_code: k::NONE,
                name: Some(name),
                topic_id: Uuid::ZERO,
                is_internal: false,
                partitions: (0..layout.partitions.len())
                    .map(|i| MetadataPartition {
                        error_code: k::NONE,
                        partition_index: i as i32,
                        leader_id: NODE_ID,
                        leader_epoch: 0,
                        replica_nodes: vec![NODE_ID],
                        isr_nodes: vec![NODE_ID],
                        offline_replicas: Vec::new(),
                    })
                    .collect(),
                topic_authorized_operations: i32::MIN,
            },
            Err(e) => MetadataTopic {
                error_code: kafka_error(&e),
                name: Some(name),
                topic_id: Uuid::ZERO,
                is_internal: false,
                partitions: Vec::new(),
                topic_authorized_operations: i32::MIN,
            },
        });
    }
    MetadataResponse {
        throttle_time_ms: 0,
        brokers: vec![MetadataBroker {
            node_id: NODE_ID,
            host: gateway.advertised.host.clone(),
            port: i32::from(gateway.advertised.port),
            rack: None,
        }],
        cluster_id: Some(CLUSTER_ID.to_string()),
        controller_id: NODE_ID,
        topics,
        cluster_authorized_operations: i32::MIN,
    }
}

/// DescribeCluster: the one broker (this gateway, node 0) at its advertised
/// address, which is also the controller. Controllers (endpoint type 2) are
/// not described: kelp's control plane does not speak Kafka.
pub(crate) fn describe_cluster(
    gateway: &Gateway,
    request: kafka::api::describe_cluster::DescribeClusterRequest,
) -> kafka::api::describe_cluster::DescribeClusterResponse {
    use kafka::api::describe_cluster::{DescribeClusterBroker, DescribeClusterResponse};
    /// Kafka's endpoint type for brokers.
    const BROKERS: i8 = 1;
    let (error_code, error_message, brokers) = if request.endpoint_type == BROKERS {
        let broker = DescribeClusterBroker {
            broker_id: NODE_ID,
            host: gateway.advertised.host.clone(),
            port: i32::from(gateway.advertised.port),
            rack: None,
        };
        (k::NONE, None, vec![broker])
    } else {
        let message = format!(
            "endpoint type {} is not described: only brokers (1)",
            request.endpoint_type
        );
        (k::INVALID_REQUEST, Some(message), Vec::new())
    };
    DescribeClusterResponse {
        throttle_time_ms: 0,
        error_code,
        error_message,
        endpoint_type: request.endpoint_type,
        cluster_id: CLUSTER_ID.to_string(),
        controller_id: NODE_ID,
        brokers,
        cluster_authorized_operations: i32::MIN,
    }
}
