//! Where partitions live: ElectLeaders, AlterPartitionReassignments and
//! ListPartitionReassignments, answered as the one broker the gateway is
//! (node 0 leads every partition and is its only replica).
//!
//! - An election is never needed: a partition's leader is already its
//!   preferred (and only) replica, so each named partition is answered
//!   ELECTION_NOT_NEEDED, and an election of every partition (a null
//!   list) names no partition, as Kafka leaves out those it did not need
//!   to elect.
//! - A reassignment onto `[0]` is done at once (nothing moves); any other
//!   replica set names a broker that is not registered, or none, or one
//!   twice, and is refused with INVALID_REPLICA_ASSIGNMENT. No move is
//!   ever under way, so cancelling one is NO_REASSIGNMENT_IN_PROGRESS and
//!   the list of moves is empty.
//!
//! Unknown topics and partitions are UNKNOWN_TOPIC_OR_PARTITION, with a
//! message that names them.

use kafka::api::alter_partition_reassignments::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka::api::elect_leaders::{
    ElectLeadersRequest, ElectLeadersResponse, ElectionPartitionResult, ReplicaElectionResult,
};
use kafka::api::list_partition_reassignments::{
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};
use kafka::error_code as k;

use super::topics::kafka_error;
use super::{Gateway, NODE_ID};

/// ElectLeaders' election types: the preferred replica, or any live one.
const ELECTION_PREFERRED: i8 = 0;
const ELECTION_UNCLEAN: i8 = 1;

/// A partition's answer: its error code and message (null for none).
type Outcome = (i16, Option<String>);

pub(crate) async fn elect_leaders(
    gateway: &Gateway,
    request: ElectLeadersRequest,
) -> ElectLeadersResponse {
    if !matches!(request.election_type, ELECTION_PREFERRED | ELECTION_UNCLEAN) {
        return ElectLeadersResponse {
            throttle_time_ms: 0,
            error_code: k::INVALID_REQUEST,
            replica_election_results: Vec::new(),
        };
    }
    let replica_election_results = match request.topic_partitions {
        // Every partition: none needs an election, so none is named.
        None => match gateway.topics.list().await {
            Ok(names) => names
                .into_iter()
                .map(|topic| ReplicaElectionResult {
                    topic,
                    partition_result: Vec::new(),
                })
                .collect(),
            Err(e) => {
                return ElectLeadersResponse {
                    throttle_time_ms: 0,
                    error_code: kafka_error(&e),
                    replica_election_results: Vec::new(),
                }
            }
        },
        Some(topics) => {
            let mut results = Vec::with_capacity(topics.len());
            for t in topics {
                let mut partition_result = Vec::with_capacity(t.partitions.len());
                for p in t.partitions {
                    let (error_code, error_message) = match find(gateway, &t.topic, p).await {
                        Ok(()) => (
                            k::ELECTION_NOT_NEEDED,
                            Some(format!(
                                "{}-{p} is led by its preferred replica, node {NODE_ID}",
                                t.topic
                            )),
                        ),
                        Err(outcome) => outcome,
                    };
                    partition_result.push(ElectionPartitionResult {
                        partition_id: p,
                        error_code,
                        error_message,
                    });
                }
                results.push(ReplicaElectionResult {
                    topic: t.topic,
                    partition_result,
                });
            }
            results
        }
    };
    ElectLeadersResponse {
        throttle_time_ms: 0,
        error_code: k::NONE,
        replica_election_results,
    }
}

pub(crate) async fn alter_reassignments(
    gateway: &Gateway,
    request: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let mut responses = Vec::with_capacity(request.topics.len());
    for t in request.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let (error_code, error_message) = match find(gateway, &t.name, p.partition_index).await
            {
                Err(outcome) => outcome,
                Ok(()) => match p.replicas {
                    None => (
                        k::NO_REASSIGNMENT_IN_PROGRESS,
                        Some(format!(
                            "{}-{} is not being reassigned",
                            t.name, p.partition_index
                        )),
                    ),
                    Some(replicas) => match refusal(&replicas) {
                        None => (k::NONE, None),
                        Some(why) => (k::INVALID_REPLICA_ASSIGNMENT, Some(why)),
                    },
                },
            };
            partitions.push(ReassignablePartitionResponse {
                partition_index: p.partition_index,
                error_code,
                error_message,
            });
        }
        responses.push(ReassignableTopicResponse {
            name: t.name,
            partitions,
        });
    }
    AlterPartitionReassignmentsResponse {
        throttle_time_ms: 0,
        error_code: k::NONE,
        error_message: None,
        responses,
    }
}

/// No move is ever under way: whatever the request names, the list is
/// empty (Kafka leaves out topics it does not know, too).
pub(crate) fn list_reassignments(
    _request: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    ListPartitionReassignmentsResponse {
        throttle_time_ms: 0,
        error_code: k::NONE,
        error_message: None,
        topics: Vec::new(),
    }
}

/// Why a partition cannot be kept on `replicas`, or `None` when they are
/// the gateway's own node (the partition's replicas already).
fn refusal(replicas: &[i32]) -> Option<String> {
    if replicas.is_empty() {
        return Some("the replica list is empty".into());
    }
    if let Some(other) = replicas.iter().find(|id| **id != NODE_ID) {
        return Some(format!(
            "broker {other} is not registered: this cluster is node {NODE_ID} alone"
        ));
    }
    if replicas.len() > 1 {
        return Some(format!("broker {NODE_ID} is named more than once"));
    }
    None
}

/// `Ok` if Kafka topic `topic` has partition `index`, else the answer
/// saying why not.
async fn find(gateway: &Gateway, topic: &str, index: i32) -> Result<(), Outcome> {
    match gateway.topics.partition(topic, index).await {
        Ok(_) => Ok(()),
        Err(k::UNKNOWN_TOPIC_OR_PARTITION) => Err((
            k::UNKNOWN_TOPIC_OR_PARTITION,
            Some(format!("no partition {topic}-{index}")),
        )),
        Err(code) => Err((code, None)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_the_gateways_own_node_is_a_replica_set() {
        assert_eq!(refusal(&[NODE_ID]), None);
        for bad in [&[][..], &[1], &[NODE_ID, 1], &[NODE_ID, NODE_ID], &[-1]] {
            assert!(refusal(bad).is_some(), "{bad:?} accepted");
        }
        assert!(refusal(&[3]).unwrap().contains("broker 3"));
    }
}
