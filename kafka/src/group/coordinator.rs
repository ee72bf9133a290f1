//! [`Coordinator`]: every consumer group this gateway coordinates, the
//! checks that do not depend on a group, and the list of answers to parked
//! requests.

use std::collections::BTreeMap;

use crate::group::consumer_group::{ConsumerGroup, CONSUMER_PROTOCOL_TYPE};
use crate::group::offsets::{GroupOffsets, OffsetsError, GROUP_ID_BYTES_MAX};
use crate::group::{
    ErrorCode, GroupDescription, GroupListing, GroupState, HeartbeatRequest, JoinRequest,
    JoinResponse, LeaveRequest, LeaveResponse, LeftMember, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, PartitionOffset, Released,
    SyncRequest, SyncResponse, Token, TopicCommitResult, TopicOffsets,
};
use crate::group::{OffsetDeleteResponse, TopicPartitions};

/// The coordinator's limits and timings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorConfig {
    /// Smallest session timeout a member may ask for (Kafka's
    /// `group.min.session.timeout.ms`).
    pub session_timeout_ms_min: u32,
    /// Largest session timeout a member may ask for (Kafka's
    /// `group.max.session.timeout.ms`).
    pub session_timeout_ms_max: u32,
    /// How long a rebalance that starts from Empty waits for more members
    /// before completing (Kafka's `group.initial.rebalance.delay.ms`); capped
    /// by the rebalance timeout.
    pub initial_rebalance_delay_ms: u32,
    /// Most members (joined or holding a fresh member id) per group.
    pub group_members_max: usize,
    /// Most groups this coordinator holds.
    pub groups_max: usize,
}

impl Default for CoordinatorConfig {
    /// Kafka's defaults, with a finite member limit.
    fn default() -> Self {
        CoordinatorConfig {
            session_timeout_ms_min: 6_000,
            session_timeout_ms_max: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            group_members_max: 1_000,
            groups_max: 10_000,
        }
    }
}

/// The consumer-group coordinator: a pure state machine.
///
/// Calls take `now_ms` (milliseconds on any monotonic clock the caller
/// keeps) and return their answer, or `None` when a JoinGroup or SyncGroup
/// is parked until the rebalance moves on. Answers to parked requests are
/// collected by every call and handed out by [`Coordinator::take_released`]
/// and [`Coordinator::tick`]; the caller drains them after each call. That
/// list is bounded: each entry answers a parked request, and each member has
/// at most one parked JoinGroup and one parked SyncGroup.
#[derive(Debug)]
pub struct Coordinator {
    config: CoordinatorConfig,
    pub(crate) groups: BTreeMap<String, ConsumerGroup>,
    released: Vec<Released>,
    /// Makes member ids unguessable and unlike ids handed out before a
    /// restart; seeded by the caller, so runs are reproducible.
    rng: fastrand::Rng,
}

impl Coordinator {
    /// An empty coordinator. `seed` feeds the member ids it hands out: the
    /// gateway seeds it from the OS so ids differ across restarts; tests
    /// use a fixed seed.
    pub fn new(config: CoordinatorConfig, seed: u64) -> Coordinator {
        Coordinator {
            config,
            groups: BTreeMap::new(),
            released: Vec::new(),
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CoordinatorConfig {
        &self.config
    }

    /// JoinGroup. `None`: parked under `token`, answered later through
    /// [`Coordinator::take_released`] or [`Coordinator::tick`].
    pub fn join(&mut self, now_ms: u64, token: Token, req: JoinRequest) -> Option<JoinResponse> {
        if !valid_group_id(&req.group_id) {
            return Some(JoinResponse::error(
                ErrorCode::INVALID_GROUP_ID,
                &req.member_id,
            ));
        }
        if req.session_timeout_ms < self.config.session_timeout_ms_min
            || req.session_timeout_ms > self.config.session_timeout_ms_max
        {
            return Some(JoinResponse::error(
                ErrorCode::INVALID_SESSION_TIMEOUT,
                &req.member_id,
            ));
        }
        if !self.groups.contains_key(&req.group_id) {
            if !req.member_id.is_empty() {
                return Some(JoinResponse::error(
                    ErrorCode::UNKNOWN_MEMBER_ID,
                    &req.member_id,
                ));
            }
            if self.groups.len() >= self.config.groups_max {
                return Some(JoinResponse::error(
                    ErrorCode::COORDINATOR_NOT_AVAILABLE,
                    "",
                ));
            }
            self.groups.insert(
                req.group_id.clone(),
                ConsumerGroup::new(req.group_id.clone(), &self.config),
            );
        }
        let group_id = req.group_id.clone();
        // Only a first join can need a new id.
        let fresh_member_id = if req.member_id.is_empty() {
            self.fresh_member_id(&group_id, &req.client_id)
        } else {
            String::new()
        };
        let group = self.groups.get_mut(&group_id)?;
        let answer = group.join(now_ms, token, req, fresh_member_id, &mut self.released);
        self.drop_if_disposable(&group_id);
        answer
    }

    /// A member id in Kafka's shape, `<client.id>-<random hex>`, that no
    /// member of the group has.
    fn fresh_member_id(&mut self, group_id: &str, client_id: &str) -> String {
        loop {
            let id = format!(
                "{client_id}-{:016x}{:016x}",
                self.rng.u64(..),
                self.rng.u64(..)
            );
            if !self.groups.get(group_id).is_some_and(|g| g.has_id(&id)) {
                return id;
            }
        }
    }

    /// SyncGroup. `None`: a follower parked under `token` until the leader
    /// assigns.
    pub fn sync(&mut self, now_ms: u64, token: Token, req: SyncRequest) -> Option<SyncResponse> {
        if !valid_group_id(&req.group_id) {
            return Some(SyncResponse::error(ErrorCode::INVALID_GROUP_ID));
        }
        let Some(group) = self.groups.get_mut(&req.group_id) else {
            return Some(SyncResponse::error(ErrorCode::UNKNOWN_MEMBER_ID));
        };
        group.sync(now_ms, token, req, &mut self.released)
    }

    /// Heartbeat.
    pub fn heartbeat(&mut self, now_ms: u64, req: &HeartbeatRequest) -> ErrorCode {
        if !valid_group_id(&req.group_id) {
            return ErrorCode::INVALID_GROUP_ID;
        }
        match self.groups.get_mut(&req.group_id) {
            Some(group) => group.heartbeat(now_ms, req),
            None => ErrorCode::UNKNOWN_MEMBER_ID,
        }
    }

    /// LeaveGroup, for one member or many: each gets its own outcome.
    pub fn leave(&mut self, now_ms: u64, req: LeaveRequest) -> LeaveResponse {
        if !valid_group_id(&req.group_id) {
            return LeaveResponse {
                error: ErrorCode::INVALID_GROUP_ID,
                members: Vec::new(),
            };
        }
        let group_id = req.group_id.clone();
        let Some(group) = self.groups.get_mut(&group_id) else {
            let members = req
                .members
                .into_iter()
                .map(|m| LeftMember {
                    member_id: m.member_id,
                    group_instance_id: m.group_instance_id,
                    error: ErrorCode::UNKNOWN_MEMBER_ID,
                })
                .collect();
            return LeaveResponse {
                error: ErrorCode::NONE,
                members,
            };
        };
        let answer = group.leave(now_ms, req, &mut self.released);
        self.drop_if_disposable(&group_id);
        answer
    }

    /// OffsetCommit. `partition_exists(topic, partition)` tells whether the
    /// gateway serves that partition; others get UNKNOWN_TOPIC_OR_PARTITION.
    /// After a commit with any success the caller persists
    /// [`Coordinator::group_offsets`] before answering.
    pub fn commit_offsets(
        &mut self,
        now_ms: u64,
        req: OffsetCommitRequest,
        partition_exists: impl Fn(&str, i32) -> bool,
    ) -> OffsetCommitResponse {
        let refuse_all = |req: OffsetCommitRequest, error: ErrorCode| OffsetCommitResponse {
            topics: req
                .topics
                .into_iter()
                .map(|t| TopicCommitResult {
                    topic: t.topic,
                    partitions: t.partitions.iter().map(|p| (p.partition, error)).collect(),
                })
                .collect(),
        };
        if !valid_group_id(&req.group_id) {
            return refuse_all(req, ErrorCode::INVALID_GROUP_ID);
        }
        if !self.groups.contains_key(&req.group_id) {
            // Only a commit from outside the group protocol may create a group.
            if req.generation_id >= 0 {
                return refuse_all(req, ErrorCode::ILLEGAL_GENERATION);
            }
            if self.groups.len() >= self.config.groups_max {
                return refuse_all(req, ErrorCode::COORDINATOR_NOT_AVAILABLE);
            }
            self.groups.insert(
                req.group_id.clone(),
                ConsumerGroup::new(req.group_id.clone(), &self.config),
            );
        }
        let group_id = req.group_id.clone();
        let Some(group) = self.groups.get_mut(&group_id) else {
            return refuse_all(req, ErrorCode::COORDINATOR_NOT_AVAILABLE);
        };
        let answer = group.commit_offsets(now_ms, req, &partition_exists);
        self.drop_if_disposable(&group_id);
        answer
    }

    /// OffsetFetch for one group. Partitions without a committed offset get
    /// offset -1 and no error, as in Kafka.
    pub fn fetch_offsets(&self, req: &OffsetFetchRequest) -> OffsetFetchResponse {
        if !valid_group_id(&req.group_id) {
            return OffsetFetchResponse {
                error: ErrorCode::INVALID_GROUP_ID,
                topics: Vec::new(),
            };
        }
        let offsets = self.groups.get(&req.group_id).map(|g| &g.offsets);
        let topics = match &req.topics {
            Some(topics) => topics
                .iter()
                .map(|t| TopicOffsets {
                    topic: t.topic.clone(),
                    partitions: t
                        .partitions
                        .iter()
                        .map(|&p| partition_offset(p, offsets.and_then(|o| o.get(&t.topic, p))))
                        .collect(),
                })
                .collect(),
            None => {
                let mut topics: Vec<TopicOffsets> = Vec::new();
                for (topic, partition, committed) in offsets.into_iter().flat_map(|o| o.iter()) {
                    let entry = partition_offset(partition, Some(committed));
                    match topics.last_mut() {
                        Some(t) if t.topic == topic => t.partitions.push(entry),
                        _ => topics.push(TopicOffsets {
                            topic: topic.to_owned(),
                            partitions: vec![entry],
                        }),
                    }
                }
                topics
            }
        };
        OffsetFetchResponse {
            error: ErrorCode::NONE,
            topics,
        }
    }

    /// DescribeGroups. An unknown group is described as `Dead` with no
    /// error, as Kafka does.
    pub fn describe(&self, group_ids: &[String]) -> Vec<GroupDescription> {
        group_ids
            .iter()
            .map(|id| match self.groups.get(id) {
                Some(group) => group.describe(),
                None => GroupDescription {
                    error: if valid_group_id(id) {
                        ErrorCode::NONE
                    } else {
                        ErrorCode::INVALID_GROUP_ID
                    },
                    group_id: id.clone(),
                    state: GroupState::Dead,
                    protocol_type: String::new(),
                    protocol_name: String::new(),
                    members: Vec::new(),
                },
            })
            .collect()
    }

    /// ListGroups: every group, or those in one of `states` when it is not
    /// empty (v4+ filter).
    pub fn list(&self, states: &[GroupState]) -> Vec<GroupListing> {
        self.groups
            .values()
            .filter(|g| states.is_empty() || states.contains(&g.state))
            .map(|g| GroupListing {
                group_id: g.group_id.clone(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                state: g.state,
            })
            .collect()
    }

    /// Deletes a group without members, offsets included (the group becomes
    /// Dead and is forgotten). The caller deletes the persisted offsets.
    pub fn delete_group(&mut self, group_id: &str) -> ErrorCode {
        if !valid_group_id(group_id) {
            return ErrorCode::INVALID_GROUP_ID;
        }
        match self.groups.get_mut(group_id) {
            None => ErrorCode::GROUP_ID_NOT_FOUND,
            Some(g) if !g.members.is_empty() || !g.pending_members.is_empty() => {
                ErrorCode::NON_EMPTY_GROUP
            }
            Some(g) => {
                g.state = GroupState::Dead;
                self.groups.remove(group_id);
                ErrorCode::NONE
            }
        }
    }

    /// OffsetDelete: forgets the committed offsets of `topics` in
    /// `group_id`. A group without members loses every one asked for; a
    /// consumer group with members keeps those of topics a member is
    /// subscribed to (GROUP_SUBSCRIBED_TO_TOPIC; a subscription that cannot
    /// be read counts as every topic) and loses the rest; a group of another
    /// protocol with members is NON_EMPTY_GROUP. A partition without an
    /// offset answers no error, as in Kafka. After a change the caller
    /// persists [`Coordinator::group_offsets`] (or removes the group's
    /// offsets when it returns `None`: the group is gone).
    pub fn delete_offsets(
        &mut self,
        group_id: &str,
        topics: &[TopicPartitions],
    ) -> OffsetDeleteResponse {
        let refuse = |error| OffsetDeleteResponse {
            error,
            topics: Vec::new(),
        };
        if !valid_group_id(group_id) {
            return refuse(ErrorCode::INVALID_GROUP_ID);
        }
        let Some(group) = self.groups.get_mut(group_id) else {
            return refuse(ErrorCode::GROUP_ID_NOT_FOUND);
        };
        let subscribed: Option<Vec<String>> = if group.members.is_empty() {
            Some(Vec::new())
        } else if group.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
            return refuse(ErrorCode::NON_EMPTY_GROUP);
        } else {
            group.subscribed_topics()
        };
        let answer = OffsetDeleteResponse {
            error: ErrorCode::NONE,
            topics: topics
                .iter()
                .map(|t| {
                    let kept = subscribed
                        .as_ref()
                        .is_none_or(|topics| topics.contains(&t.topic));
                    TopicCommitResult {
                        topic: t.topic.clone(),
                        partitions: t
                            .partitions
                            .iter()
                            .map(|&p| {
                                if kept {
                                    (p, ErrorCode::GROUP_SUBSCRIBED_TO_TOPIC)
                                } else {
                                    group.offsets.remove(&t.topic, p);
                                    (p, ErrorCode::NONE)
                                }
                            })
                            .collect(),
                    }
                })
                .collect(),
        };
        self.drop_if_disposable(group_id);
        answer
    }

    /// Advances time: expires sessions, unused member ids, and rebalance and
    /// sync timeouts. Returns every answer to a parked request that is ready,
    /// including any released by earlier calls and not yet taken.
    pub fn tick(&mut self, now_ms: u64) -> Vec<Released> {
        for group in self.groups.values_mut() {
            group.tick(now_ms, &mut self.released);
        }
        self.groups.retain(|_, g| !g.is_disposable());
        self.take_released()
    }

    /// The earliest `now_ms` at which [`Coordinator::tick`] has work; `None`
    /// when no timer runs. The driver sleeps until then (or the next request).
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.groups
            .values()
            .filter_map(|g| g.next_deadline_ms())
            .min()
    }

    /// Answers to parked requests released since the last take, in release
    /// order. An answer whose connection closed meanwhile is dropped by the
    /// caller.
    pub fn take_released(&mut self) -> Vec<Released> {
        std::mem::take(&mut self.released)
    }

    /// A group's committed offsets, to persist with [`GroupOffsets::encode`].
    pub fn group_offsets(&self, group_id: &str) -> Option<&GroupOffsets> {
        self.groups.get(group_id).map(|g| &g.offsets)
    }

    /// Restores one group's offsets from bytes written by
    /// [`GroupOffsets::encode`], replacing any it holds; returns the group
    /// id. Refused bytes change nothing.
    pub fn restore_offsets(&mut self, bytes: &[u8]) -> Result<String, OffsetsError> {
        let (group_id, offsets) = GroupOffsets::decode(bytes)?;
        let group = self
            .groups
            .entry(group_id.clone())
            .or_insert_with(|| ConsumerGroup::new(group_id.clone(), &self.config));
        group.offsets = offsets;
        self.drop_if_disposable(&group_id);
        Ok(group_id)
    }

    fn drop_if_disposable(&mut self, group_id: &str) {
        if self.groups.get(group_id).is_some_and(|g| g.is_disposable()) {
            self.groups.remove(group_id);
        }
    }
}

fn valid_group_id(group_id: &str) -> bool {
    !group_id.is_empty() && group_id.len() <= GROUP_ID_BYTES_MAX
}

fn partition_offset(
    partition: i32,
    committed: Option<&crate::group::CommittedOffset>,
) -> PartitionOffset {
    match committed {
        Some(c) => PartitionOffset {
            partition,
            offset: c.offset,
            leader_epoch: c.leader_epoch,
            metadata: c.metadata.clone(),
            error: ErrorCode::NONE,
        },
        None => PartitionOffset {
            partition,
            offset: -1,
            leader_epoch: -1,
            metadata: String::new(),
            error: ErrorCode::NONE,
        },
    }
}
