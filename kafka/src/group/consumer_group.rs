//! [`ConsumerGroup`]: one group's membership, generations and offsets, and
//! the transitions between its [`GroupState`]s.
//!
//! Sans-IO like the rest of the coordinator: every method takes `now_ms` and
//! pushes answers to parked requests onto the `out` list it is given; it
//! never reads a clock or blocks. The [`Coordinator`](crate::group::Coordinator)
//! routes requests here after checking what does not depend on the group.

use std::collections::BTreeMap;

use crate::group::member::Member;
use crate::group::offsets::{
    CommittedOffset, GroupOffsets, OFFSETS_PER_GROUP_MAX, OFFSET_METADATA_BYTES_MAX,
    TOPIC_NAME_BYTES_MAX,
};
use crate::group::{
    CoordinatorConfig, ErrorCode, GroupDescription, GroupState, HeartbeatRequest, JoinRequest,
    JoinResponse, JoinedMember, LeaveRequest, LeaveResponse, LeftMember, MemberDescription,
    OffsetCommitRequest, OffsetCommitResponse, Protocol, Released, SyncRequest, SyncResponse,
    Token, TopicCommitResult,
};

/// A JoinGroup as the group received it: when, and the token its answer
/// goes under if it is parked. Once the group gives the member a fresh id,
/// the request names that id: it is the member the call joins as.
#[derive(Debug)]
struct JoinCall {
    now_ms: u64,
    token: Token,
    req: JoinRequest,
}

/// One consumer group. Compared whole by the tests that check a refused
/// request left the group exactly as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConsumerGroup {
    pub(crate) group_id: String,
    pub(crate) state: GroupState,
    /// The last generation completed; 0 before the first.
    pub(crate) generation_id: i32,
    /// Shared by every member; kept while Empty so listings still show it.
    pub(crate) protocol_type: Option<String>,
    /// The protocol selected for the current generation.
    pub(crate) protocol_name: Option<String>,
    pub(crate) leader_id: Option<String>,
    pub(crate) members: BTreeMap<String, Member>,
    /// `group.instance.id` -> member id of static members.
    pub(crate) static_members: BTreeMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, not joined yet, with
    /// the time they expire.
    pub(crate) pending_members: BTreeMap<String, u64>,
    next_join_seq: u64,
    /// PreparingRebalance: when the join phase completes without the members
    /// that have not rejoined.
    rebalance_deadline_ms: u64,
    /// PreparingRebalance from Empty: the join phase waits until then for
    /// more members (`initial_rebalance_delay_ms`).
    join_not_before_ms: u64,
    /// CompletingRebalance and Stable: when members that joined the
    /// generation but never sent SyncGroup are removed.
    sync_deadline_ms: Option<u64>,
    pub(crate) offsets: GroupOffsets,
    /// The most members and pending members at once
    /// (`group_members_max`).
    members_max: usize,
    /// How long a join phase from Empty waits for more members
    /// (`initial_rebalance_delay_ms`).
    initial_rebalance_delay_ms: u32,
}

impl ConsumerGroup {
    /// An Empty group under the limits of `config`.
    pub(crate) fn new(group_id: String, config: &CoordinatorConfig) -> ConsumerGroup {
        ConsumerGroup {
            group_id,
            state: GroupState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            next_join_seq: 0,
            rebalance_deadline_ms: 0,
            join_not_before_ms: 0,
            sync_deadline_ms: None,
            offsets: GroupOffsets::default(),
            members_max: config.group_members_max,
            initial_rebalance_delay_ms: config.initial_rebalance_delay_ms,
        }
    }

    /// Whether the group holds nothing worth keeping: no members, no member
    /// ids handed out, no offsets.
    /// Every topic a member is subscribed to, read from its metadata for
    /// the group's protocol (the consumer protocol's subscription: version
    /// INT16, then its topics as an array of STRING, in every version);
    /// `None` if a member's cannot be read.
    pub(crate) fn subscribed_topics(&self) -> Option<Vec<String>> {
        let mut topics = Vec::new();
        for member in self.members.values() {
            let chosen = member
                .protocols
                .iter()
                .find(|p| Some(&p.name) == self.protocol_name.as_ref())
                .or(member.protocols.first())?;
            topics.extend(subscription_topics(&chosen.metadata)?);
        }
        topics.sort();
        topics.dedup();
        Some(topics)
    }

    pub(crate) fn is_disposable(&self) -> bool {
        self.state == GroupState::Empty
            && self.pending_members.is_empty()
            && self.offsets.is_empty()
    }

    /// Whether `member_id` is taken by a member or a pending member.
    pub(crate) fn has_id(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id) || self.pending_members.contains_key(member_id)
    }

    /// The earliest time [`ConsumerGroup::tick`] has something to do.
    pub(crate) fn next_deadline_ms(&self) -> Option<u64> {
        let sessions = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.awaiting_sync.is_none())
            .map(|m| m.session_deadline_ms);
        let pending = self.pending_members.values().copied();
        let preparing = self.state == GroupState::PreparingRebalance;
        let rebalance = preparing.then_some(self.rebalance_deadline_ms);
        // The initial delay matters only once nobody else is awaited.
        let all_joined = self.members.values().all(|m| m.awaiting_join.is_some());
        let delay = (preparing && all_joined && self.pending_members.is_empty())
            .then_some(self.join_not_before_ms);
        sessions
            .chain(pending)
            .chain(rebalance)
            .chain(delay)
            .chain(self.sync_deadline_ms)
            .min()
    }

    // ---- JoinGroup ----

    /// JoinGroup. `fresh_member_id` is an id no member or pending member of
    /// this group has, used if the request needs a new one. `None` means the
    /// request is parked: its answer comes out later as [`Released::Join`].
    pub(crate) fn join(
        &mut self,
        now_ms: u64,
        token: Token,
        req: JoinRequest,
        fresh_member_id: String,
        out: &mut Vec<Released>,
    ) -> Option<JoinResponse> {
        let mut call = JoinCall { now_ms, token, req };
        let req = &call.req;
        let static_owner = req
            .group_instance_id
            .as_ref()
            .and_then(|i| self.static_members.get(i))
            .cloned();
        // A rejoining member is checked against the others, not its old self.
        let replacing = if req.member_id.is_empty() {
            static_owner.clone()
        } else {
            Some(req.member_id.clone())
        };
        // Checked before anything changes: a refused member leaves no trace.
        if !self.supports_protocols(replacing.as_deref(), &req.protocol_type, &req.protocols) {
            return Some(JoinResponse::error(
                ErrorCode::INCONSISTENT_GROUP_PROTOCOL,
                &req.member_id,
            ));
        }
        if !req.member_id.is_empty() {
            return self.join_known(call, out);
        }
        if let Some(old_id) = static_owner {
            // A static member restarting: the new id takes the old one's
            // place (and assignment); the old id is fenced.
            self.replace_static_member(&old_id, &fresh_member_id, out);
            call.req.member_id = fresh_member_id;
            return self.join_existing(call, true, out);
        }
        if self.members.len() + self.pending_members.len() >= self.members_max {
            return Some(JoinResponse::error(ErrorCode::GROUP_MAX_SIZE_REACHED, ""));
        }
        if req.group_instance_id.is_none() && req.require_known_member_id {
            let deadline = now_ms.saturating_add(u64::from(req.session_timeout_ms));
            self.pending_members
                .insert(fresh_member_id.clone(), deadline);
            return Some(JoinResponse::error(
                ErrorCode::MEMBER_ID_REQUIRED,
                &fresh_member_id,
            ));
        }
        call.req.member_id = fresh_member_id;
        self.add_member_and_rebalance(call, out);
        None
    }

    fn join_known(&mut self, call: JoinCall, out: &mut Vec<Released>) -> Option<JoinResponse> {
        let member_id = &call.req.member_id;
        if self.pending_members.remove(member_id).is_some() {
            self.add_member_and_rebalance(call, out);
            return None;
        }
        let instance_id = call.req.group_instance_id.as_deref();
        if let Some(error) = self.check_member(member_id, instance_id) {
            return Some(JoinResponse::error(error, member_id));
        }
        self.join_existing(call, false, out)
    }

    /// A join by the current member `call` names: updated in place, its
    /// assignment kept. `replaced`: that member is a static member's fresh
    /// id, which just took over an old member id.
    fn join_existing(
        &mut self,
        call: JoinCall,
        replaced: bool,
        out: &mut Vec<Released>,
    ) -> Option<JoinResponse> {
        let now_ms = call.now_ms;
        let member_id = call.req.member_id.clone();
        let is_leader = self.leader_id.as_deref() == Some(member_id.as_str());
        let Some(member) = self.members.get_mut(&member_id) else {
            return Some(JoinResponse::error(
                ErrorCode::UNKNOWN_MEMBER_ID,
                &member_id,
            ));
        };
        let unchanged = member.protocol_type == call.req.protocol_type
            && member.protocols == call.req.protocols;
        match self.state {
            GroupState::PreparingRebalance => {
                self.update_member(call, &member_id, out);
                self.try_complete_join(now_ms, out);
                None
            }
            // It lost the answer to its join: the current generation still
            // fits it. Not after a static replacement: the leader is
            // assigning to the old member id, so the group must rebalance.
            GroupState::CompletingRebalance if unchanged && !replaced => {
                member.update_client(&call.req, now_ms);
                Some(self.join_response_for(&member_id))
            }
            GroupState::Stable if unchanged && !is_leader => {
                member.update_client(&call.req, now_ms);
                Some(self.join_response_for(&member_id))
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.update_member(call, &member_id, out);
                self.prepare_rebalance(now_ms, out);
                self.try_complete_join(now_ms, out);
                None
            }
            GroupState::Empty | GroupState::Dead => Some(JoinResponse::error(
                ErrorCode::UNKNOWN_MEMBER_ID,
                &member_id,
            )),
        }
    }

    /// Whether a member with this protocol type and these protocols can be
    /// in the group beside every member other than `replacing`.
    fn supports_protocols(
        &self,
        replacing: Option<&str>,
        protocol_type: &str,
        protocols: &[Protocol],
    ) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        let others: Vec<&Member> = self
            .members
            .values()
            .filter(|m| Some(m.member_id.as_str()) != replacing)
            .collect();
        if others.is_empty() {
            return true;
        }
        others.iter().all(|m| m.protocol_type == protocol_type)
            && protocols
                .iter()
                .any(|p| others.iter().all(|m| m.supports(&p.name)))
    }

    /// Fencing and membership checks shared by every request naming a member.
    fn check_member(&self, member_id: &str, group_instance_id: Option<&str>) -> Option<ErrorCode> {
        if let Some(instance) = group_instance_id {
            if self
                .static_members
                .get(instance)
                .is_some_and(|owner| owner != member_id)
            {
                return Some(ErrorCode::FENCED_INSTANCE_ID);
            }
        }
        match self.members.get(member_id) {
            None => Some(ErrorCode::UNKNOWN_MEMBER_ID),
            Some(m)
                if group_instance_id.is_some()
                    && m.group_instance_id.as_deref() != group_instance_id =>
            {
                Some(ErrorCode::FENCED_INSTANCE_ID)
            }
            Some(_) => None,
        }
    }

    /// The generation check of SyncGroup, Heartbeat and OffsetCommit. An
    /// older generation while a rebalance is under way means "rejoin", not
    /// "you are fenced": REBALANCE_IN_PROGRESS.
    fn check_generation(&self, generation_id: i32) -> Option<ErrorCode> {
        if generation_id == self.generation_id {
            None
        } else if self.state.is_rebalancing() && generation_id < self.generation_id {
            Some(ErrorCode::REBALANCE_IN_PROGRESS)
        } else {
            Some(ErrorCode::ILLEGAL_GENERATION)
        }
    }

    fn update_member(&mut self, call: JoinCall, member_id: &str, out: &mut Vec<Released>) {
        let JoinCall { now_ms, token, req } = call;
        let Some(m) = self.members.get_mut(member_id) else {
            return;
        };
        m.update_client(&req, now_ms);
        m.protocols = req.protocols;
        m.protocol_type = req.protocol_type.clone();
        if let Some(old) = m.awaiting_join.replace(token) {
            // A retried join from a new connection supersedes the old one.
            let response = JoinResponse::error(ErrorCode::REBALANCE_IN_PROGRESS, member_id);
            out.push(Released::Join {
                token: old,
                response,
            });
        }
        self.protocol_type = Some(req.protocol_type);
    }

    /// Adds the member `call` names and rebalances.
    fn add_member_and_rebalance(&mut self, call: JoinCall, out: &mut Vec<Released>) {
        let JoinCall { now_ms, token, req } = call;
        let member_id = req.member_id;
        let mut member = Member {
            member_id: member_id.clone(),
            group_instance_id: req.group_instance_id,
            client_id: req.client_id,
            client_host: req.client_host,
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            protocol_type: req.protocol_type.clone(),
            protocols: req.protocols,
            assignment: Vec::new(),
            assignment_generation: -1,
            join_seq: self.next_join_seq,
            session_deadline_ms: 0,
            awaiting_join: Some(token),
            awaiting_sync: None,
            sync_pending: false,
        };
        member.heard_from(now_ms);
        self.next_join_seq += 1;
        if let Some(instance) = &member.group_instance_id {
            self.static_members
                .insert(instance.clone(), member_id.clone());
        }
        if self.leader_id.is_none() {
            self.leader_id = Some(member_id.clone());
        }
        self.protocol_type = Some(req.protocol_type);
        self.members.insert(member_id, member);
        if self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(now_ms, out);
        }
        self.try_complete_join(now_ms, out);
    }

    fn replace_static_member(&mut self, old_id: &str, new_id: &str, out: &mut Vec<Released>) {
        let Some(mut member) = self.members.remove(old_id) else {
            return;
        };
        if let Some(token) = member.awaiting_join.take() {
            let response = JoinResponse::error(ErrorCode::FENCED_INSTANCE_ID, old_id);
            out.push(Released::Join { token, response });
        }
        if let Some(token) = member.awaiting_sync.take() {
            out.push(Released::Sync {
                token,
                response: SyncResponse::error(ErrorCode::FENCED_INSTANCE_ID),
            });
        }
        member.member_id = new_id.to_owned();
        if let Some(instance) = &member.group_instance_id {
            self.static_members
                .insert(instance.clone(), new_id.to_owned());
        }
        if self.leader_id.as_deref() == Some(old_id) {
            self.leader_id = Some(new_id.to_owned());
        }
        self.members.insert(new_id.to_owned(), member);
    }

    // ---- Rebalance ----

    /// Starts a rebalance: every member must rejoin within the largest
    /// rebalance timeout.
    fn prepare_rebalance(&mut self, now_ms: u64, out: &mut Vec<Released>) {
        if self.state == GroupState::CompletingRebalance {
            // The generation being assigned is abandoned: parked followers
            // must rejoin, they get no (empty) assignment.
            for m in self.members.values_mut() {
                if let Some(token) = m.awaiting_sync.take() {
                    out.push(Released::Sync {
                        token,
                        response: SyncResponse::error(ErrorCode::REBALANCE_IN_PROGRESS),
                    });
                }
            }
        }
        let rebalance_timeout_ms = self.rebalance_timeout_ms();
        let delay_ms = if self.state == GroupState::Empty {
            self.initial_rebalance_delay_ms.min(rebalance_timeout_ms)
        } else {
            0
        };
        self.state = GroupState::PreparingRebalance;
        self.rebalance_deadline_ms = now_ms.saturating_add(u64::from(rebalance_timeout_ms));
        self.join_not_before_ms = now_ms.saturating_add(u64::from(delay_ms));
        self.sync_deadline_ms = None;
        for m in self.members.values_mut() {
            m.sync_pending = false;
        }
    }

    fn rebalance_timeout_ms(&self) -> u32 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

    /// Completes the join phase if every member has rejoined.
    fn try_complete_join(&mut self, now_ms: u64, out: &mut Vec<Released>) {
        if self.state == GroupState::PreparingRebalance
            && now_ms >= self.join_not_before_ms
            && self.pending_members.is_empty()
            && self.members.values().all(|m| m.awaiting_join.is_some())
        {
            self.complete_join(now_ms, out);
        }
    }

    /// Ends the join phase: members that did not rejoin are removed, the
    /// generation advances, and every parked JoinGroup is answered.
    fn complete_join(&mut self, now_ms: u64, out: &mut Vec<Released>) {
        let absent: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for id in absent {
            self.remove_member(&id, out);
        }
        self.generation_id = if self.generation_id == i32::MAX {
            1
        } else {
            self.generation_id + 1
        };
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol_name = None;
            self.leader_id = None;
            self.sync_deadline_ms = None;
            return;
        }
        self.protocol_name = Some(self.select_protocol());
        self.state = GroupState::CompletingRebalance;
        self.sync_deadline_ms = Some(now_ms.saturating_add(u64::from(self.rebalance_timeout_ms())));
        let mut parked = Vec::with_capacity(self.members.len());
        for m in self.members.values_mut() {
            m.heard_from(now_ms);
            m.sync_pending = true;
            if let Some(token) = m.awaiting_join.take() {
                parked.push((token, m.member_id.clone()));
            }
        }
        for (token, member_id) in parked {
            out.push(Released::Join {
                token,
                response: self.join_response_for(&member_id),
            });
        }
    }

    /// The protocol for the new generation: among those every member
    /// supports, the one most members prefer; ties go to the leader's order.
    fn select_protocol(&self) -> String {
        let leader = self
            .leader_id
            .as_ref()
            .and_then(|id| self.members.get(id))
            .or_else(|| self.members.values().min_by_key(|m| m.join_seq));
        let Some(leader) = leader else {
            return String::new();
        };
        let candidates: Vec<&str> = leader
            .protocols
            .iter()
            .map(|p| p.name.as_str())
            .filter(|name| self.members.values().all(|m| m.supports(name)))
            .collect();
        let mut votes = vec![0usize; candidates.len()];
        for m in self.members.values() {
            if let Some(choice) = m.vote(&candidates) {
                if let Some(i) = candidates.iter().position(|c| *c == choice) {
                    votes[i] += 1;
                }
            }
        }
        let mut best: Option<usize> = None;
        for (i, &v) in votes.iter().enumerate() {
            if best.is_none_or(|b| v > votes[b]) {
                best = Some(i);
            }
        }
        match best {
            Some(i) => candidates[i].to_owned(),
            // Unreachable while every join is checked; the leader's first
            // choice is the least surprising answer.
            None => leader
                .protocols
                .first()
                .map(|p| p.name.clone())
                .unwrap_or_default(),
        }
    }

    fn members_in_join_order(&self) -> Vec<&Member> {
        let mut members: Vec<&Member> = self.members.values().collect();
        members.sort_by_key(|m| m.join_seq);
        members
    }

    fn join_response_for(&self, member_id: &str) -> JoinResponse {
        let protocol = self.protocol_name.as_deref().unwrap_or("");
        let is_leader = self.leader_id.as_deref() == Some(member_id);
        let members = if is_leader {
            self.members_in_join_order()
                .into_iter()
                .map(|m| JoinedMember {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    metadata: m.metadata_for(protocol).to_vec(),
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinResponse {
            error: ErrorCode::NONE,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader_id: self.leader_id.clone().unwrap_or_default(),
            member_id: member_id.to_owned(),
            members,
        }
    }

    /// Removes a member without changing the group's state; its parked
    /// requests are answered UNKNOWN_MEMBER_ID. Re-elects the leader.
    fn remove_member(&mut self, member_id: &str, out: &mut Vec<Released>) -> bool {
        let Some(m) = self.members.remove(member_id) else {
            return false;
        };
        if let Some(token) = m.awaiting_join {
            out.push(Released::Join {
                token,
                response: JoinResponse::error(ErrorCode::UNKNOWN_MEMBER_ID, member_id),
            });
        }
        if let Some(token) = m.awaiting_sync {
            out.push(Released::Sync {
                token,
                response: SyncResponse::error(ErrorCode::UNKNOWN_MEMBER_ID),
            });
        }
        if let Some(instance) = &m.group_instance_id {
            if self
                .static_members
                .get(instance)
                .is_some_and(|owner| owner == member_id)
            {
                self.static_members.remove(instance);
            }
        }
        if self.leader_id.as_deref() == Some(member_id) {
            self.leader_id = self
                .members
                .values()
                .min_by_key(|m| m.join_seq)
                .map(|m| m.member_id.clone());
        }
        true
    }

    /// After members left or died: the rest must rebalance.
    fn after_removal(&mut self, now_ms: u64, out: &mut Vec<Released>) {
        if matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance
        ) {
            self.prepare_rebalance(now_ms, out);
        }
        self.try_complete_join(now_ms, out);
    }

    // ---- SyncGroup, Heartbeat, LeaveGroup ----

    /// SyncGroup. `None` means parked: a follower waiting for the leader.
    pub(crate) fn sync(
        &mut self,
        now_ms: u64,
        token: Token,
        req: SyncRequest,
        out: &mut Vec<Released>,
    ) -> Option<SyncResponse> {
        if let Some(error) = self.check_member(&req.member_id, req.group_instance_id.as_deref()) {
            return Some(SyncResponse::error(error));
        }
        if let Some(error) = self.check_generation(req.generation_id) {
            return Some(SyncResponse::error(error));
        }
        let type_differs = req.protocol_type.is_some() && req.protocol_type != self.protocol_type;
        let name_differs = req.protocol_name.is_some() && req.protocol_name != self.protocol_name;
        if type_differs || name_differs {
            return Some(SyncResponse::error(ErrorCode::INCONSISTENT_GROUP_PROTOCOL));
        }
        let is_leader = self.leader_id.as_deref() == Some(req.member_id.as_str());
        let Some(member) = self.members.get_mut(&req.member_id) else {
            return Some(SyncResponse::error(ErrorCode::UNKNOWN_MEMBER_ID));
        };
        match self.state {
            GroupState::Empty | GroupState::Dead => {
                Some(SyncResponse::error(ErrorCode::UNKNOWN_MEMBER_ID))
            }
            GroupState::PreparingRebalance => {
                Some(SyncResponse::error(ErrorCode::REBALANCE_IN_PROGRESS))
            }
            GroupState::CompletingRebalance => {
                member.heard_from(now_ms);
                member.sync_pending = false;
                if let Some(old) = member.awaiting_sync.take() {
                    out.push(Released::Sync {
                        token: old,
                        response: SyncResponse::error(ErrorCode::REBALANCE_IN_PROGRESS),
                    });
                }
                if !is_leader {
                    member.awaiting_sync = Some(token);
                    return None;
                }
                self.complete_sync(req.assignments, out);
                Some(self.sync_response_for(&req.member_id))
            }
            GroupState::Stable => {
                member.heard_from(now_ms);
                member.sync_pending = false;
                if self.members.values().all(|m| !m.sync_pending) {
                    self.sync_deadline_ms = None;
                }
                Some(self.sync_response_for(&req.member_id))
            }
        }
    }

    /// The leader's assignments make the generation Stable and answer every
    /// parked follower with its own assignment.
    fn complete_sync(
        &mut self,
        assignments: Vec<crate::group::MemberAssignment>,
        out: &mut Vec<Released>,
    ) {
        let mut by_member: BTreeMap<String, Vec<u8>> = assignments
            .into_iter()
            .map(|a| (a.member_id, a.assignment))
            .collect();
        let generation_id = self.generation_id;
        let mut parked = Vec::new();
        for m in self.members.values_mut() {
            // A member the leader left out gets an empty assignment, as in
            // Kafka; assignments for unknown members are dropped.
            m.assignment = by_member.remove(&m.member_id).unwrap_or_default();
            m.assignment_generation = generation_id;
            if let Some(token) = m.awaiting_sync.take() {
                parked.push((token, m.member_id.clone()));
            }
        }
        self.state = GroupState::Stable;
        if self.members.values().all(|m| !m.sync_pending) {
            self.sync_deadline_ms = None;
        }
        for (token, member_id) in parked {
            out.push(Released::Sync {
                token,
                response: self.sync_response_for(&member_id),
            });
        }
    }

    fn sync_response_for(&self, member_id: &str) -> SyncResponse {
        let Some(m) = self.members.get(member_id) else {
            return SyncResponse::error(ErrorCode::UNKNOWN_MEMBER_ID);
        };
        debug_assert_eq!(m.assignment_generation, self.generation_id);
        SyncResponse {
            error: ErrorCode::NONE,
            generation_id: m.assignment_generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment: m.assignment.clone(),
        }
    }

    /// Heartbeat: keeps the session alive and tells the member whether to rejoin.
    pub(crate) fn heartbeat(&mut self, now_ms: u64, req: &HeartbeatRequest) -> ErrorCode {
        if let Some(error) = self.check_member(&req.member_id, req.group_instance_id.as_deref()) {
            return error;
        }
        let generation_error = self.check_generation(req.generation_id);
        if generation_error == Some(ErrorCode::ILLEGAL_GENERATION) {
            return ErrorCode::ILLEGAL_GENERATION;
        }
        if let Some(m) = self.members.get_mut(&req.member_id) {
            m.heard_from(now_ms);
        }
        match (self.state, generation_error) {
            (_, Some(error)) => error,
            (GroupState::PreparingRebalance, None) => ErrorCode::REBALANCE_IN_PROGRESS,
            (GroupState::CompletingRebalance | GroupState::Stable, None) => ErrorCode::NONE,
            (GroupState::Empty | GroupState::Dead, None) => ErrorCode::UNKNOWN_MEMBER_ID,
        }
    }

    /// LeaveGroup: every listed member leaves, each with its own outcome.
    pub(crate) fn leave(
        &mut self,
        now_ms: u64,
        req: LeaveRequest,
        out: &mut Vec<Released>,
    ) -> LeaveResponse {
        let mut removed = false;
        let mut pending_removed = false;
        let mut members = Vec::with_capacity(req.members.len());
        for leaving in req.members {
            let error = match self
                .leaving_member_id(&leaving.member_id, leaving.group_instance_id.as_deref())
            {
                Err(error) => error,
                Ok(id) if self.pending_members.remove(&id).is_some() => {
                    pending_removed = true;
                    ErrorCode::NONE
                }
                Ok(id) if self.remove_member(&id, out) => {
                    removed = true;
                    ErrorCode::NONE
                }
                Ok(_) => ErrorCode::UNKNOWN_MEMBER_ID,
            };
            members.push(LeftMember {
                member_id: leaving.member_id,
                group_instance_id: leaving.group_instance_id,
                error,
            });
        }
        if removed {
            self.after_removal(now_ms, out);
        } else if pending_removed {
            self.try_complete_join(now_ms, out);
        }
        LeaveResponse {
            error: ErrorCode::NONE,
            members,
        }
    }

    /// Which member a LeaveGroup entry names: by member id, or (v3+) by
    /// `group.instance.id` alone.
    fn leaving_member_id(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<String, ErrorCode> {
        match (member_id.is_empty(), group_instance_id) {
            (true, None) => Err(ErrorCode::UNKNOWN_MEMBER_ID),
            (true, Some(instance)) => self
                .static_members
                .get(instance)
                .cloned()
                .ok_or(ErrorCode::UNKNOWN_MEMBER_ID),
            (false, Some(instance))
                if self
                    .static_members
                    .get(instance)
                    .is_some_and(|o| o != member_id) =>
            {
                Err(ErrorCode::FENCED_INSTANCE_ID)
            }
            (false, _) => Ok(member_id.to_owned()),
        }
    }

    // ---- Offsets ----

    /// OffsetCommit. `partition_exists` says whether a topic partition is
    /// known to the gateway.
    pub(crate) fn commit_offsets(
        &mut self,
        now_ms: u64,
        req: OffsetCommitRequest,
        partition_exists: &dyn Fn(&str, i32) -> bool,
    ) -> OffsetCommitResponse {
        let group_error = self.commit_error(now_ms, &req);
        let mut topics = Vec::with_capacity(req.topics.len());
        for topic in req.topics {
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            for p in topic.partitions {
                let metadata = p.metadata.unwrap_or_default();
                let error = if let Some(error) = group_error {
                    error
                } else if topic.topic.is_empty()
                    || topic.topic.len() > TOPIC_NAME_BYTES_MAX
                    || p.partition < 0
                    || !partition_exists(&topic.topic, p.partition)
                {
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                } else if metadata.len() > OFFSET_METADATA_BYTES_MAX {
                    ErrorCode::OFFSET_METADATA_TOO_LARGE
                } else if self.offsets.len() >= OFFSETS_PER_GROUP_MAX
                    && !self.offsets.contains(&topic.topic, p.partition)
                {
                    ErrorCode::INVALID_COMMIT_OFFSET_SIZE
                } else {
                    let committed = CommittedOffset {
                        offset: p.offset,
                        leader_epoch: p.leader_epoch,
                        commit_time_ms: now_ms,
                        metadata,
                    };
                    self.offsets.insert(&topic.topic, p.partition, committed);
                    ErrorCode::NONE
                };
                partitions.push((p.partition, error));
            }
            topics.push(TopicCommitResult {
                topic: topic.topic,
                partitions,
            });
        }
        OffsetCommitResponse { topics }
    }

    /// Whether the committer may commit now; `None` if it may.
    fn commit_error(&mut self, now_ms: u64, req: &OffsetCommitRequest) -> Option<ErrorCode> {
        if req.generation_id < 0 && req.member_id.is_empty() {
            // A commit from outside the group protocol (assign(), v0): only
            // while no member owns the partitions.
            return (self.state != GroupState::Empty).then_some(ErrorCode::UNKNOWN_MEMBER_ID);
        }
        if let Some(error) = self.check_member(&req.member_id, req.group_instance_id.as_deref()) {
            return Some(error);
        }
        if let Some(error) = self.check_generation(req.generation_id) {
            return Some(error);
        }
        if self.state == GroupState::CompletingRebalance {
            return Some(ErrorCode::REBALANCE_IN_PROGRESS);
        }
        // Stable, or PreparingRebalance: a consumer commits what it consumed
        // before rejoining (eager protocol), so that is allowed.
        if let Some(m) = self.members.get_mut(&req.member_id) {
            m.heard_from(now_ms);
        }
        None
    }

    // ---- Describe, timers ----

    pub(crate) fn describe(&self) -> GroupDescription {
        let stable = self.state == GroupState::Stable;
        let protocol = if stable {
            self.protocol_name.clone().unwrap_or_default()
        } else {
            String::new()
        };
        let members = self
            .members_in_join_order()
            .into_iter()
            .map(|m| MemberDescription {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: if stable {
                    m.metadata_for(&protocol).to_vec()
                } else {
                    Vec::new()
                },
                assignment: if stable {
                    m.assignment.clone()
                } else {
                    Vec::new()
                },
            })
            .collect();
        GroupDescription {
            error: ErrorCode::NONE,
            group_id: self.group_id.clone(),
            state: self.state,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol_name: protocol,
            members,
        }
    }

    /// Expires sessions, member ids never used, and rebalance and sync
    /// timeouts.
    pub(crate) fn tick(&mut self, now_ms: u64, out: &mut Vec<Released>) {
        let pending_before = self.pending_members.len();
        self.pending_members
            .retain(|_, deadline| *deadline > now_ms);
        let pending_expired = self.pending_members.len() != pending_before;

        // A member with a parked request is waiting on us, not silent: the
        // rebalance and sync deadlines bound those.
        let mut dead: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                m.awaiting_join.is_none()
                    && m.awaiting_sync.is_none()
                    && m.session_deadline_ms <= now_ms
            })
            .map(|m| m.member_id.clone())
            .collect();
        if let Some(deadline) = self.sync_deadline_ms {
            if now_ms >= deadline
                && matches!(
                    self.state,
                    GroupState::CompletingRebalance | GroupState::Stable
                )
            {
                dead.extend(
                    self.members
                        .values()
                        .filter(|m| m.sync_pending)
                        .map(|m| m.member_id.clone()),
                );
                self.sync_deadline_ms = None;
            }
        }
        let mut removed = false;
        for id in dead {
            removed |= self.remove_member(&id, out);
        }
        if removed {
            self.after_removal(now_ms, out);
        } else if pending_expired {
            self.try_complete_join(now_ms, out);
        }
        if self.state == GroupState::PreparingRebalance {
            if now_ms >= self.rebalance_deadline_ms {
                self.complete_join(now_ms, out);
            } else {
                self.try_complete_join(now_ms, out);
            }
        }
    }

    /// Checks the invariants every operation must keep; panics naming the
    /// broken one. Tests call it after every step.
    #[cfg(test)]
    pub(crate) fn assert_invariants(&self) {
        let gid = &self.group_id;
        match &self.leader_id {
            Some(leader) => assert!(
                self.members.contains_key(leader),
                "{gid}: leader {leader} is not a member"
            ),
            None => assert!(
                self.members.is_empty() || self.state == GroupState::PreparingRebalance,
                "{gid}: members but no leader in {:?}",
                self.state
            ),
        }
        if self.state == GroupState::Empty {
            assert!(self.members.is_empty(), "{gid}: Empty with members");
        }
        if matches!(
            self.state,
            GroupState::CompletingRebalance | GroupState::Stable
        ) {
            assert!(
                !self.members.is_empty(),
                "{gid}: {:?} without members",
                self.state
            );
            assert!(
                self.protocol_name.is_some(),
                "{gid}: {:?} without protocol",
                self.state
            );
            for m in self.members.values() {
                assert!(
                    m.awaiting_join.is_none(),
                    "{gid}: {} parked join in {:?}",
                    m.member_id,
                    self.state
                );
                let name = self.protocol_name.as_deref().unwrap_or("");
                assert!(
                    m.supports(name),
                    "{gid}: {} lacks protocol {name}",
                    m.member_id
                );
            }
        }
        if self.state == GroupState::Stable {
            for m in self.members.values() {
                assert_eq!(
                    m.assignment_generation, self.generation_id,
                    "{gid}: Stable member {} holds an assignment of another generation",
                    m.member_id
                );
                assert!(m.awaiting_sync.is_none(), "{gid}: parked sync while Stable");
            }
        }
        if self.state != GroupState::CompletingRebalance {
            assert!(
                self.members.values().all(|m| m.awaiting_sync.is_none()),
                "{gid}: parked sync in {:?}",
                self.state
            );
        }
        if self.state != GroupState::PreparingRebalance {
            assert!(
                self.members.values().all(|m| m.awaiting_join.is_none()),
                "{gid}: parked join in {:?}",
                self.state
            );
        }
        for (instance, owner) in &self.static_members {
            let m = self.members.get(owner);
            assert!(
                m.is_some_and(|m| m.group_instance_id.as_deref() == Some(instance.as_str())),
                "{gid}: static {instance} -> {owner} dangling"
            );
        }
        for id in self.pending_members.keys() {
            assert!(
                !self.members.contains_key(id),
                "{gid}: {id} both pending and member"
            );
        }
    }
}

/// The protocol type of Kafka's consumer groups, whose member metadata is a
/// consumer subscription.
pub(crate) const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// The topics of a consumer protocol subscription (member metadata), if it
/// reads as one: INT16 version, INT32 count, then each topic as INT16
/// length and UTF-8 bytes.
fn subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut r = crate::Decoder::new(metadata);
    r.i16().ok()?;
    let count = usize::try_from(r.i32().ok()?).ok()?;
    // Each topic takes at least its two length bytes.
    if count > r.remaining() / 2 {
        return None;
    }
    (0..count)
        .map(|_| {
            let len = usize::try_from(r.i16().ok()?).ok()?;
            let bytes = r.take(len).ok()?;
            String::from_utf8(bytes.to_vec()).ok()
        })
        .collect()
}

#[cfg(test)]
mod subscription_tests {
    use super::subscription_topics;

    /// A consumer protocol subscription: version, topics, then (ignored
    /// here) null user data.
    fn subscription(version: i16, topics: &[&str]) -> Vec<u8> {
        let mut b = version.to_be_bytes().to_vec();
        b.extend((topics.len() as i32).to_be_bytes());
        for t in topics {
            b.extend((t.len() as i16).to_be_bytes());
            b.extend(t.as_bytes());
        }
        b.extend((-1i32).to_be_bytes());
        b
    }

    #[test]
    fn a_subscription_names_its_topics_and_anything_else_reads_as_none() {
        assert_eq!(
            subscription_topics(&subscription(3, &["a", "bc"])),
            Some(vec!["a".to_string(), "bc".to_string()])
        );
        assert_eq!(subscription_topics(&subscription(0, &[])), Some(vec![]));
        assert_eq!(subscription_topics(b"meta"), None);
        // A count past the bytes, a negative count, a cut string.
        let mut huge = 0i16.to_be_bytes().to_vec();
        huge.extend(i32::MAX.to_be_bytes());
        assert_eq!(subscription_topics(&huge), None);
        let mut negative = 0i16.to_be_bytes().to_vec();
        negative.extend((-1i32).to_be_bytes());
        assert_eq!(subscription_topics(&negative), None);
        let cut = subscription(0, &["topic"]);
        assert_eq!(subscription_topics(&cut[..9]), None);
    }
}
