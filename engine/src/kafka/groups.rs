//! Consumer groups through the `kelp-kafka` coordinator, which only the
//! gateway thread touches. JoinGroup and SyncGroup answers the coordinator
//! parks are delivered to their connections through one-shot channels; a
//! timer drives `tick` (session and rebalance timeouts). Committed offsets
//! are written through the filer, one object per group
//! (`kafka/groups/<escaped group id>.offsets`, the byte format of
//! docs/kafka-groups.md), before the commit is answered, and restored when
//! the broker starts.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use filer::{Filer, ObjectPath};
use kafka::api::describe_groups::{
    DescribeGroupsRequest, DescribeGroupsResponse, DescribedGroup, DescribedMember,
};
use kafka::api::find_coordinator::{
    Coordinator as CoordinatorEntry, FindCoordinatorRequest, FindCoordinatorResponse,
};
use kafka::api::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use kafka::api::join_group::{JoinGroupMember, JoinGroupRequest, JoinGroupResponse};
use kafka::api::leave_group::{LeaveGroupRequest, LeaveGroupResponse, LeftMember};
use kafka::api::list_groups::{ListGroupsRequest, ListGroupsResponse, ListedGroup};
use kafka::api::offset_commit::{
    OffsetCommitPartitionResult, OffsetCommitRequest, OffsetCommitResponse, OffsetCommitTopicResult,
};
use kafka::api::offset_fetch::{
    OffsetFetchPartition, OffsetFetchRequest, OffsetFetchResponse, OffsetFetchTopicResult,
};
use kafka::api::sync_group::{SyncGroupRequest, SyncGroupResponse};
use kafka::group::{self, Coordinator, CoordinatorConfig, GroupState, Released, Token};
use kafka::RequestHeader;

use super::gateway_error::StoreError;
use super::{put_object, read_object, Gateway, NODE_ID};
use crate::error::EngineError;

/// How often the coordinator's timeouts are checked.
const TICK: Duration = Duration::from_millis(100);

pub(crate) struct Groups {
    coordinator: RefCell<Coordinator>,
    parked: RefCell<HashMap<u64, tokio::sync::oneshot::Sender<Released>>>,
    next_token: Cell<u64>,
    filer: Arc<dyn Filer>,
    started: Instant,
}

/// The filer object of group `group_id`'s offsets
/// (`filer_layout::kafka_group_offsets`).
pub(crate) fn offsets_path(group_id: &str) -> Result<ObjectPath, StoreError> {
    control::filer_layout::kafka_group_offsets(group_id).ok_or_else(|| StoreError::GroupIdTooLong {
        group_id: group_id.to_owned(),
    })
}

impl Groups {
    /// A coordinator with every group's committed offsets restored.
    pub(crate) fn open(
        filer: Arc<dyn Filer>,
        settings: &crate::config::KafkaSettings,
    ) -> Result<Groups, EngineError> {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let config = CoordinatorConfig {
            session_timeout_ms_min: settings.group_min_session_timeout_ms,
            session_timeout_ms_max: settings.group_max_session_timeout_ms,
            initial_rebalance_delay_ms: settings.group_initial_rebalance_delay_ms,
            ..CoordinatorConfig::default()
        };
        let mut coordinator = Coordinator::new(config, seed);
        let prefix = control::filer_layout::kafka_groups();
        for path in filer.list(&prefix)? {
            let bytes = read_object(filer.as_ref(), &path, group::OFFSETS_FILE_BYTES_MAX)?;
            match coordinator.restore_offsets(&bytes) {
                Ok(group) => log::debug!("Kafka gateway: restored offsets of group {group}"),
                // A damaged file loses that group's offsets, not the broker.
                Err(e) => log::error!("Kafka gateway: {}: {e}", path.as_str()),
            }
        }
        Ok(Groups {
            coordinator: RefCell::new(coordinator),
            parked: RefCell::new(HashMap::new()),
            next_token: Cell::new(1),
            filer,
            started: Instant::now(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn park(&self) -> (Token, tokio::sync::oneshot::Receiver<Released>) {
        let token = self.next_token.get();
        self.next_token.set(token + 1);
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.parked.borrow_mut().insert(token, tx);
        (Token(token), rx)
    }

    /// Calls the coordinator with the time now, then hands the answers it
    /// released (to requests it parked earlier) to their connections.
    fn call<T>(&self, call: impl FnOnce(&mut Coordinator, u64) -> T) -> T {
        let now = self.now_ms();
        let answer = call(&mut self.coordinator.borrow_mut(), now);
        self.deliver_pending();
        answer
    }

    /// Runs a JoinGroup or SyncGroup, which the coordinator may park: `call`
    /// gets the time and the request's token and returns its answer if it
    /// has one now. Otherwise the answer is the one released for the token
    /// later, taken out by `released`; `None` if the request is dropped
    /// unanswered.
    async fn answer_or_park<R>(
        &self,
        call: impl FnOnce(&mut Coordinator, u64, Token) -> Option<R>,
        released: impl FnOnce(Released) -> Option<R>,
    ) -> Option<R> {
        let (token, rx) = self.park();
        let answered = self.call(|coordinator, now| {
            let answer = call(coordinator, now, token);
            if answer.is_some() {
                self.parked.borrow_mut().remove(&token.0);
            }
            answer
        });
        match answered {
            Some(answer) => Some(answer),
            None => rx.await.ok().and_then(released),
        }
    }

    /// Hand the coordinator's released answers to their connections.
    fn deliver(&self, released: Vec<Released>) {
        let mut parked = self.parked.borrow_mut();
        for r in released {
            if let Some(tx) = parked.remove(&r.token().0) {
                // The connection may be gone; its member times out.
                let _ = tx.send(r);
            }
        }
    }

    fn deliver_pending(&self) {
        let released = self.coordinator.borrow_mut().take_released();
        self.deliver(released);
    }
}

/// Drive the coordinator's timeouts forever.
pub(crate) async fn tick_forever(gateway: Rc<Gateway>) {
    let groups = &gateway.groups;
    loop {
        tokio::time::sleep(TICK).await;
        let released = groups.coordinator.borrow_mut().tick(groups.now_ms());
        groups.deliver(released);
    }
}

pub(crate) fn find_coordinator(
    gateway: &Gateway,
    request: FindCoordinatorRequest,
    _version: i16,
) -> FindCoordinatorResponse {
    let host = gateway.advertised.host.clone();
    let port = i32::from(gateway.advertised.port);
    FindCoordinatorResponse {
        throttle_time_ms: 0,
        coordinators: request
            .coordinator_keys
            .into_iter()
            .map(|key| {
                // Transactions are not supported: no transaction coordinator.
                let (error_code, error_message) = if request.key_type == 0 {
                    (kafka::error_code::NONE, None)
                } else {
                    (
                        kafka::error_code::COORDINATOR_NOT_AVAILABLE,
                        Some("the kelp gateway has no transaction coordinator".to_string()),
                    )
                };
                CoordinatorEntry {
                    key,
                    node_id: NODE_ID,
                    host: host.clone(),
                    port,
                    error_code,
                    error_message,
                }
            })
            .collect(),
    }
}

fn join_response(r: group::JoinResponse) -> JoinGroupResponse {
    JoinGroupResponse {
        throttle_time_ms: 0,
        error_code: r.error.0,
        generation_id: r.generation_id,
        protocol_type: r.protocol_type,
        protocol_name: r.protocol_name,
        leader: r.leader_id,
        skip_assignment: false,
        member_id: r.member_id,
        members: r
            .members
            .into_iter()
            .map(|m| JoinGroupMember {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                metadata: m.metadata,
            })
            .collect(),
    }
}

fn join_error(error_code: i16) -> JoinGroupResponse {
    JoinGroupResponse {
        throttle_time_ms: 0,
        error_code,
        generation_id: -1,
        protocol_type: None,
        protocol_name: None,
        leader: String::new(),
        skip_assignment: false,
        member_id: String::new(),
        members: Vec::new(),
    }
}

pub(crate) async fn join(
    gateway: &Gateway,
    request: JoinGroupRequest,
    header: &RequestHeader,
    version: i16,
    peer: SocketAddr,
) -> JoinGroupResponse {
    let groups = &gateway.groups;
    let req = group::JoinRequest {
        group_id: request.group_id,
        member_id: request.member_id,
        group_instance_id: request.group_instance_id,
        client_id: header.client_id.clone().unwrap_or_default(),
        client_host: format!("/{}", peer.ip()),
        session_timeout_ms: u32::try_from(request.session_timeout_ms).unwrap_or(0),
        rebalance_timeout_ms: u32::try_from(request.rebalance_timeout_ms)
            .unwrap_or(u32::try_from(request.session_timeout_ms).unwrap_or(0)),
        protocol_type: request.protocol_type,
        protocols: request
            .protocols
            .into_iter()
            .map(|p| group::Protocol {
                name: p.name,
                metadata: p.metadata,
            })
            .collect(),
        // KIP-394: from v4 a first join is answered MEMBER_ID_REQUIRED.
        require_known_member_id: version >= 4,
    };
    let join = |coordinator: &mut Coordinator, now, token| coordinator.join(now, token, req);
    match groups.answer_or_park(join, Released::into_join).await {
        Some(response) => join_response(response),
        None => join_error(kafka::error_code::UNKNOWN_SERVER_ERROR),
    }
}

fn sync_response(r: group::SyncResponse) -> SyncGroupResponse {
    SyncGroupResponse {
        throttle_time_ms: 0,
        error_code: r.error.0,
        protocol_type: r.protocol_type,
        protocol_name: r.protocol_name,
        assignment: r.assignment,
    }
}

pub(crate) async fn sync(gateway: &Gateway, request: SyncGroupRequest) -> SyncGroupResponse {
    let groups = &gateway.groups;
    let req = group::SyncRequest {
        group_id: request.group_id,
        generation_id: request.generation_id,
        member_id: request.member_id,
        group_instance_id: request.group_instance_id,
        protocol_type: request.protocol_type,
        protocol_name: request.protocol_name,
        assignments: request
            .assignments
            .into_iter()
            .map(|a| group::MemberAssignment {
                member_id: a.member_id,
                assignment: a.assignment,
            })
            .collect(),
    };
    let sync = |coordinator: &mut Coordinator, now, token| coordinator.sync(now, token, req);
    match groups.answer_or_park(sync, Released::into_sync).await {
        Some(response) => sync_response(response),
        None => SyncGroupResponse {
            throttle_time_ms: 0,
            error_code: kafka::error_code::UNKNOWN_SERVER_ERROR,
            protocol_type: None,
            protocol_name: None,
            assignment: Vec::new(),
        },
    }
}

pub(crate) fn heartbeat(gateway: &Gateway, request: HeartbeatRequest) -> HeartbeatResponse {
    let groups = &gateway.groups;
    let req = group::HeartbeatRequest {
        group_id: request.group_id,
        generation_id: request.generation_id,
        member_id: request.member_id,
        group_instance_id: request.group_instance_id,
    };
    let error = groups.call(|coordinator, now| coordinator.heartbeat(now, &req));
    HeartbeatResponse {
        throttle_time_ms: 0,
        error_code: error.0,
    }
}

pub(crate) fn leave(
    gateway: &Gateway,
    request: LeaveGroupRequest,
    _version: i16,
) -> LeaveGroupResponse {
    let groups = &gateway.groups;
    let req = group::LeaveRequest {
        group_id: request.group_id,
        members: request
            .members
            .into_iter()
            .map(|m| group::LeavingMember {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
            })
            .collect(),
    };
    let response = groups.call(|coordinator, now| coordinator.leave(now, req));
    // The codec writes v0-v2's single error from `error_code` and v3+'s
    // members list.
    LeaveGroupResponse {
        throttle_time_ms: 0,
        error_code: response.error.0,
        members: response
            .members
            .into_iter()
            .map(|m| LeftMember {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                error_code: m.error.0,
            })
            .collect(),
    }
}

pub(crate) async fn commit_offsets(
    gateway: &Gateway,
    request: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let groups = &gateway.groups;
    let group_id = request.group_id.clone();
    // Partition counts of the topics named, for the coordinator's check.
    let mut partitions: HashMap<String, usize> = HashMap::new();
    for t in &request.topics {
        if let Ok(layout) = gateway.topics.layout(&t.name).await {
            partitions.insert(t.name.clone(), layout.partitions.len());
        }
    }
    let req = group::OffsetCommitRequest {
        group_id: request.group_id,
        generation_id: request.generation_id,
        member_id: request.member_id,
        group_instance_id: request.group_instance_id,
        topics: request
            .topics
            .into_iter()
            .map(|t| group::TopicCommit {
                topic: t.name,
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| group::PartitionCommit {
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata,
                    })
                    .collect(),
            })
            .collect(),
    };
    let exists = |topic: &str, partition: i32| {
        partitions
            .get(topic)
            .is_some_and(|n| usize::try_from(partition).is_ok_and(|p| p < *n))
    };
    let mut response = groups.call(|coordinator, now| coordinator.commit_offsets(now, req, exists));
    store_changed_offsets(groups, &group_id, &mut response.topics).await;
    OffsetCommitResponse {
        throttle_time_ms: 0,
        topics: response
            .topics
            .into_iter()
            .map(|t| OffsetCommitTopicResult {
                name: t.topic,
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|(partition_index, e)| OffsetCommitPartitionResult {
                        partition_index,
                        error_code: e.0,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// OffsetDelete: the coordinator forgets the offsets it may
/// (`Coordinator::delete_offsets`), and the group's offsets object is
/// stored again (or removed, with the group) before the answer.
pub(crate) async fn delete_offsets(
    gateway: &Gateway,
    request: kafka::api::offset_delete::OffsetDeleteRequest,
) -> kafka::api::offset_delete::OffsetDeleteResponse {
    use kafka::api::offset_delete::{
        OffsetDeleteResponse, OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
    };
    let groups = &gateway.groups;
    let group_id = request.group_id;
    let topics: Vec<group::TopicPartitions> = request
        .topics
        .into_iter()
        .map(|t| group::TopicPartitions {
            topic: t.name,
            partitions: t.partitions.iter().map(|p| p.partition_index).collect(),
        })
        .collect();
    let mut answer = groups
        .coordinator
        .borrow_mut()
        .delete_offsets(&group_id, &topics);
    if answer.error == group::ErrorCode::NONE {
        store_changed_offsets(groups, &group_id, &mut answer.topics).await;
    }
    OffsetDeleteResponse {
        error_code: answer.error.0,
        throttle_time_ms: 0,
        topics: answer
            .topics
            .into_iter()
            .map(|t| OffsetDeleteResponseTopic {
                name: t.topic,
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|(partition_index, e)| OffsetDeleteResponsePartition {
                        partition_index,
                        error_code: e.0,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// After a commit or an OffsetDelete whose `results` show any partition
/// changed (no error): store the group's offsets object again, or remove
/// it when the group is gone, before the answer. If that fails, each
/// changed partition is answered COORDINATOR_NOT_AVAILABLE instead.
async fn store_changed_offsets(
    groups: &Groups,
    group_id: &str,
    results: &mut [group::TopicCommitResult],
) {
    let changed = results.iter().any(|t| {
        t.partitions
            .iter()
            .any(|(_, e)| *e == group::ErrorCode::NONE)
    });
    if !changed {
        return;
    }
    let encoded = groups
        .coordinator
        .borrow()
        .group_offsets(group_id)
        .map(|o| o.encode(group_id));
    let stored = match encoded {
        Some(bytes) => persist(groups.filer.clone(), group_id, bytes).await,
        None => remove_offsets(groups.filer.clone(), group_id).await,
    };
    if let Err(e) = stored {
        log::error!("Kafka gateway: storing offsets of group {group_id}: {e}");
        for t in results {
            for (_, error) in &mut t.partitions {
                if *error == group::ErrorCode::NONE {
                    *error = group::ErrorCode(kafka::error_code::COORDINATOR_NOT_AVAILABLE);
                }
            }
        }
    }
}

async fn persist(filer: Arc<dyn Filer>, group_id: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
    let path = offsets_path(group_id)?;
    put_object(filer, path, bytes).await
}

pub(crate) fn fetch_offsets(
    gateway: &Gateway,
    request: OffsetFetchRequest,
    _version: i16,
) -> OffsetFetchResponse {
    let req = group::OffsetFetchRequest {
        group_id: request.group_id,
        topics: request.topics.map(|topics| {
            topics
                .into_iter()
                .map(|t| group::TopicPartitions {
                    topic: t.name,
                    partitions: t.partition_indexes,
                })
                .collect()
        }),
    };
    let response = gateway.groups.coordinator.borrow().fetch_offsets(&req);
    OffsetFetchResponse {
        throttle_time_ms: 0,
        error_code: response.error.0,
        topics: response
            .topics
            .into_iter()
            .map(|t| OffsetFetchTopicResult {
                name: t.topic,
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| OffsetFetchPartition {
                        partition_index: p.partition,
                        committed_offset: p.offset,
                        committed_leader_epoch: p.leader_epoch,
                        metadata: Some(p.metadata),
                        error_code: p.error.0,
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub(crate) fn describe(
    gateway: &Gateway,
    request: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    let groups = gateway
        .groups
        .coordinator
        .borrow()
        .describe(&request.groups);
    DescribeGroupsResponse {
        throttle_time_ms: 0,
        groups: groups
            .into_iter()
            .map(|g| DescribedGroup {
                error_code: g.error.0,
                group_id: g.group_id,
                group_state: g.state.name().to_string(),
                protocol_type: g.protocol_type,
                protocol_data: g.protocol_name,
                members: g
                    .members
                    .into_iter()
                    .map(|m| DescribedMember {
                        member_id: m.member_id,
                        group_instance_id: m.group_instance_id,
                        client_id: m.client_id,
                        client_host: m.client_host,
                        member_metadata: m.metadata,
                        member_assignment: m.assignment,
                    })
                    .collect(),
                authorized_operations: i32::MIN,
            })
            .collect(),
    }
}

/// DeleteGroups: each group without members is forgotten, and its
/// committed offsets with it (their object in the filer is deleted before
/// the answer). A group with members is NON_EMPTY_GROUP, an unknown one
/// GROUP_ID_NOT_FOUND.
pub(crate) async fn delete(
    gateway: &Gateway,
    request: kafka::api::delete_groups::DeleteGroupsRequest,
) -> kafka::api::delete_groups::DeleteGroupsResponse {
    use kafka::api::delete_groups::{DeletableGroupResult, DeleteGroupsResponse};
    let mut results = Vec::with_capacity(request.groups_names.len());
    for group_id in request.groups_names {
        let mut error = gateway
            .groups
            .coordinator
            .borrow_mut()
            .delete_group(&group_id);
        if error == group::ErrorCode::NONE {
            if let Err(e) = remove_offsets(gateway.groups.filer.clone(), &group_id).await {
                log::error!("Kafka gateway: deleting group {group_id}'s offsets: {e}");
                error = group::ErrorCode(kafka::error_code::KAFKA_STORAGE_ERROR);
            }
        }
        results.push(DeletableGroupResult {
            group_id,
            error_code: error.0,
        });
    }
    DeleteGroupsResponse {
        throttle_time_ms: 0,
        results,
    }
}

/// Delete a group's committed offsets object (gone already is fine).
async fn remove_offsets(filer: Arc<dyn Filer>, group_id: &str) -> Result<(), StoreError> {
    let path = offsets_path(group_id)?;
    let deleted = tokio::task::spawn_blocking(move || match filer.delete(&path) {
        Err(filer::FilerError::NotFound { .. }) => Ok(()),
        other => other,
    })
    .await?;
    Ok(deleted?)
}

pub(crate) fn list(gateway: &Gateway, request: ListGroupsRequest) -> ListGroupsResponse {
    let states: Vec<GroupState> = request
        .states_filter
        .iter()
        .filter_map(|s| GroupState::from_name(s))
        .collect();
    let listed = gateway.groups.coordinator.borrow().list(&states);
    ListGroupsResponse {
        throttle_time_ms: 0,
        error_code: kafka::error_code::NONE,
        groups: listed
            .into_iter()
            .map(|g| ListedGroup {
                group_id: g.group_id,
                protocol_type: g.protocol_type,
                group_state: g.state.name().to_string(),
            })
            .collect(),
    }
}
