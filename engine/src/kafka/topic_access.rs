//! What an authenticated Kafka client may do: each request's topics are
//! checked against its principal's grants (`auth::Principal::may`) on the
//! kelp topic the Kafka topic is (`kafka/NAME`), as on kelp's own ports.
//!
//! A request's denied topics are taken out before it is handled and
//! answered with TOPIC_AUTHORIZATION_FAILED beside the others' answers, as
//! Kafka answers them. What each API needs:
//!
//! | API | operation |
//! | --- | --- |
//! | Produce | produce |
//! | Fetch, OffsetCommit, OffsetFetch, OffsetDelete | consume |
//! | Metadata, ListOffsets, DescribeConfigs (topics) | describe |
//! | CreateTopics (and Metadata's auto-creation) | create |
//! | DeleteTopics | delete |
//! | ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments | move, on every topic named (all topics when none is): else CLUSTER_AUTHORIZATION_FAILED |
//!
//! Group membership (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, DescribeGroups, ListGroups, DeleteGroups), InitProducerId
//! and DescribeCluster need an authenticated principal only: kelp's grants
//! name topics, not groups (docs/operations.md). Metadata leaves out the
//! topics a principal may not describe when it asks for all of them.

use std::sync::Arc;

use auth::{Operation, Principal, Session};
use kafka::api::create_topics::{CreatableTopicResult, CreateTopicsRequest};
use kafka::api::delete_topics::{DeletableTopicResult, DeleteTopicsRequest};
use kafka::api::describe_configs::{DescribeConfigsRequest, DescribeConfigsResult};
use kafka::api::fetch::{FetchPartitionData, FetchRequest, FetchTopicData};
use kafka::api::list_offsets::{
    ListOffsetsPartitionResult, ListOffsetsRequest, ListOffsetsTopicResult,
};
use kafka::api::metadata::{MetadataRequest, MetadataResponse, MetadataTopic};
use kafka::api::offset_commit::{
    OffsetCommitPartitionResult, OffsetCommitRequest, OffsetCommitTopicResult,
};
use kafka::api::offset_delete::{
    OffsetDeleteRequest, OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka::api::offset_fetch::{OffsetFetchPartition, OffsetFetchRequest, OffsetFetchResponse};
use kafka::api::produce::{ProducePartitionResult, ProduceRequest, ProduceTopicResult};
use kafka::error_code::{CLUSTER_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED};

use super::topics::kelp_name;
use super::Gateway;

/// DescribeConfigs' resource type of a topic.
const RESOURCE_TOPIC: i8 = 2;

/// Whom a request is handled for.
#[derive(Debug, Clone)]
pub(crate) enum Access {
    /// A gateway without an auth file: anyone may do anything.
    Everything,
    /// An authenticated principal: what its grants allow.
    Principal(Arc<Principal>),
    /// Not authenticated (only ApiVersions and SASL get this far).
    Nothing,
}

impl Access {
    pub(crate) fn of(session: &Session) -> Access {
        match session {
            Session::Open => Access::Everything,
            Session::Authenticated(p) => Access::Principal(Arc::clone(p)),
            _ => Access::Nothing,
        }
    }

    /// Whether the principal may do `op` to Kafka topic `topic`.
    pub(crate) fn may(&self, op: Operation, topic: &str) -> bool {
        match self {
            Access::Everything => true,
            Access::Principal(p) => p.may(op, &kelp_name(topic)),
            Access::Nothing => false,
        }
    }

    /// Whether the principal is an admin (or the cluster itself).
    pub(crate) fn is_admin(&self) -> bool {
        match self {
            Access::Everything => true,
            Access::Principal(p) => matches!(p.role, auth::Role::Admin | auth::Role::Cluster),
            Access::Nothing => false,
        }
    }

    /// Whether the principal may do `op` to every topic there is.
    fn may_everywhere(&self, op: Operation) -> bool {
        match self {
            Access::Everything => true,
            Access::Principal(p) => p.may(op, "*") || p.may(op, &kelp_name("*")),
            Access::Nothing => false,
        }
    }

    /// Take out of `items` those whose topic (`topic_of`) the principal may
    /// not `op`; they are returned, in order, and counted.
    fn deny<T>(
        &self,
        gateway: &Gateway,
        op: Operation,
        items: &mut Vec<T>,
        topic_of: impl Fn(&T) -> &str,
    ) -> Vec<T> {
        if matches!(self, Access::Everything) {
            return Vec::new();
        }
        let (kept, denied): (Vec<T>, Vec<T>) = std::mem::take(items)
            .into_iter()
            .partition(|t| self.may(op, topic_of(t)));
        *items = kept;
        if !denied.is_empty() {
            gateway
                .connections
                .denied(auth::DenialReason::Forbidden)
                .add(denied.len() as u64);
        }
        denied
    }

    /// Produce: the denied topics' answers.
    pub(crate) fn produce(
        &self,
        gateway: &Gateway,
        request: &mut ProduceRequest<'_>,
    ) -> Vec<ProduceTopicResult> {
        self.deny(gateway, Operation::Produce, &mut request.topics, |t| {
            &t.name
        })
        .into_iter()
        .map(|t| ProduceTopicResult {
            name: t.name,
            partitions: t
                .partitions
                .iter()
                .map(|p| ProducePartitionResult {
                    index: p.index,
                    error_code: TOPIC_AUTHORIZATION_FAILED,
                    ..ProducePartitionResult::default()
                })
                .collect(),
        })
        .collect()
    }

    /// Fetch: the denied topics' answers.
    pub(crate) fn fetch(
        &self,
        gateway: &Gateway,
        request: &mut FetchRequest,
    ) -> Vec<FetchTopicData<'static>> {
        self.deny(gateway, Operation::Consume, &mut request.topics, |t| {
            &t.topic
        })
        .into_iter()
        .map(|t| FetchTopicData {
            topic: t.topic,
            partitions: t
                .partitions
                .iter()
                .map(|p| FetchPartitionData {
                    partition_index: p.partition,
                    error_code: TOPIC_AUTHORIZATION_FAILED,
                    ..FetchPartitionData::default()
                })
                .collect(),
        })
        .collect()
    }

    /// ListOffsets: the denied topics' answers.
    pub(crate) fn list_offsets(
        &self,
        gateway: &Gateway,
        request: &mut ListOffsetsRequest,
    ) -> Vec<ListOffsetsTopicResult> {
        self.deny(gateway, Operation::Describe, &mut request.topics, |t| {
            &t.name
        })
        .into_iter()
        .map(|t| ListOffsetsTopicResult {
            name: t.name,
            partitions: t
                .partitions
                .iter()
                .map(|p| ListOffsetsPartitionResult {
                    partition_index: p.partition_index,
                    error_code: TOPIC_AUTHORIZATION_FAILED,
                    ..ListOffsetsPartitionResult::default()
                })
                .collect(),
        })
        .collect()
    }

    /// OffsetCommit: the denied topics' answers.
    pub(crate) fn offset_commit(
        &self,
        gateway: &Gateway,
        request: &mut OffsetCommitRequest,
    ) -> Vec<OffsetCommitTopicResult> {
        self.deny(gateway, Operation::Consume, &mut request.topics, |t| {
            &t.name
        })
        .into_iter()
        .map(|t| OffsetCommitTopicResult {
            name: t.name,
            partitions: t
                .partitions
                .iter()
                .map(|p| OffsetCommitPartitionResult {
                    partition_index: p.partition_index,
                    error_code: TOPIC_AUTHORIZATION_FAILED,
                })
                .collect(),
        })
        .collect()
    }

    /// OffsetDelete: the denied topics' answers.
    pub(crate) fn offset_delete(
        &self,
        gateway: &Gateway,
        request: &mut OffsetDeleteRequest,
    ) -> Vec<OffsetDeleteResponseTopic> {
        self.deny(gateway, Operation::Consume, &mut request.topics, |t| {
            &t.name
        })
        .into_iter()
        .map(|t| OffsetDeleteResponseTopic {
            name: t.name,
            partitions: t
                .partitions
                .iter()
                .map(|p| OffsetDeleteResponsePartition {
                    partition_index: p.partition_index,
                    error_code: TOPIC_AUTHORIZATION_FAILED,
                })
                .collect(),
        })
        .collect()
    }

    /// OffsetFetch, after it is answered: the positions of topics the
    /// principal may not consume are replaced by the error (a request for
    /// all of a group's topics leaves them out).
    pub(crate) fn offset_fetch(
        &self,
        gateway: &Gateway,
        request: &OffsetFetchRequest,
        response: &mut OffsetFetchResponse,
    ) {
        let asked_all = request.topics.is_none();
        let denied = self.deny(gateway, Operation::Consume, &mut response.topics, |t| {
            &t.name
        });
        if asked_all {
            return;
        }
        response.topics.extend(denied.into_iter().map(|mut t| {
            for p in &mut t.partitions {
                *p = OffsetFetchPartition {
                    partition_index: p.partition_index,
                    error_code: TOPIC_AUTHORIZATION_FAILED,
                    ..OffsetFetchPartition::default()
                };
            }
            t
        }));
    }

    /// Metadata, before it is answered: the denied topics' answers; no
    /// topic is created for a principal that may not create it.
    pub(crate) fn metadata(
        &self,
        gateway: &Gateway,
        request: &mut MetadataRequest,
    ) -> Vec<MetadataTopic> {
        let Some(topics) = request.topics.as_mut() else {
            return Vec::new();
        };
        let denied = self.deny(gateway, Operation::Describe, topics, |t| {
            t.name.as_deref().unwrap_or_default()
        });
        if topics
            .iter()
            .any(|t| !self.may(Operation::Create, t.name.as_deref().unwrap_or_default()))
        {
            request.allow_auto_topic_creation = false;
        }
        denied
            .into_iter()
            .map(|t| MetadataTopic {
                error_code: TOPIC_AUTHORIZATION_FAILED,
                name: t.name,
                ..MetadataTopic::default()
            })
            .collect()
    }

    /// Metadata, after it is answered: an answer for all topics keeps only
    /// those the principal may describe.
    pub(crate) fn metadata_answer(&self, response: &mut MetadataResponse) {
        response.topics.retain(|t| {
            t.error_code == TOPIC_AUTHORIZATION_FAILED
                || self.may(Operation::Describe, t.name.as_deref().unwrap_or_default())
        });
    }

    /// CreateTopics: the denied topics' answers.
    pub(crate) fn create_topics(
        &self,
        gateway: &Gateway,
        request: &mut CreateTopicsRequest,
    ) -> Vec<CreatableTopicResult> {
        self.deny(gateway, Operation::Create, &mut request.topics, |t| &t.name)
            .into_iter()
            .map(|t| CreatableTopicResult {
                error_code: TOPIC_AUTHORIZATION_FAILED,
                error_message: Some(format!("not allowed to create topic {:?}", t.name)),
                name: t.name,
                ..CreatableTopicResult::default()
            })
            .collect()
    }

    /// DeleteTopics: the denied topics' answers.
    pub(crate) fn delete_topics(
        &self,
        gateway: &Gateway,
        request: &mut DeleteTopicsRequest,
    ) -> Vec<DeletableTopicResult> {
        self.deny(gateway, Operation::Delete, &mut request.topics, |t| {
            t.name.as_deref().unwrap_or_default()
        })
        .into_iter()
        .map(|t| DeletableTopicResult {
            error_code: TOPIC_AUTHORIZATION_FAILED,
            error_message: Some(format!("not allowed to delete topic {:?}", t.name)),
            name: t.name,
            topic_id: t.topic_id,
        })
        .collect()
    }

    /// DescribeConfigs: the denied topics' answers (broker resources need
    /// only an authenticated principal).
    pub(crate) fn describe_configs(
        &self,
        gateway: &Gateway,
        request: &mut DescribeConfigsRequest,
    ) -> Vec<DescribeConfigsResult> {
        let mut topics: Vec<_> = Vec::new();
        let mut others = Vec::new();
        for r in std::mem::take(&mut request.resources) {
            if r.resource_type == RESOURCE_TOPIC {
                topics.push(r);
            } else {
                others.push(r);
            }
        }
        let denied = self.deny(gateway, Operation::Describe, &mut topics, |r| {
            &r.resource_name
        });
        request.resources = others;
        request.resources.extend(topics);
        denied
            .into_iter()
            .map(|r| DescribeConfigsResult {
                error_code: TOPIC_AUTHORIZATION_FAILED,
                error_message: Some(format!(
                    "not allowed to describe topic {:?}",
                    r.resource_name
                )),
                resource_type: r.resource_type,
                resource_name: r.resource_name,
                configs: Vec::new(),
            })
            .collect()
    }

    /// ElectLeaders, AlterPartitionReassignments and
    /// ListPartitionReassignments: `Ok` when the principal may move every
    /// topic named (`None`: every topic), else the error code to answer
    /// the whole request with.
    pub(crate) fn placement<'a>(
        &self,
        gateway: &Gateway,
        topics: Option<impl Iterator<Item = &'a str>>,
    ) -> Result<(), i16> {
        let allowed = match topics {
            None => self.may_everywhere(Operation::Move),
            Some(mut names) => names.all(|t| self.may(Operation::Move, t)),
        };
        if allowed {
            return Ok(());
        }
        gateway
            .connections
            .denied(auth::DenialReason::Forbidden)
            .add(1);
        Err(CLUSTER_AUTHORIZATION_FAILED)
    }
}
