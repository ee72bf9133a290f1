//! The coordinator's inputs: plain structs the gateway fills from the wire.
//!
//! They hold no codec types, so the coordinator does not depend on how a
//! request was encoded or at which version. Fields a version lacks take the
//! value the comment names.

/// Opaque identifier of a request the coordinator may answer later (a parked
/// JoinGroup or SyncGroup). The caller picks it, e.g. connection id and
/// correlation id packed together, and gets it back in [`Released`](crate::group::Released).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub u64);

/// One protocol a member supports (for consumers: an assignor such as
/// `range`), with its opaque metadata (the subscription).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    /// The protocol's name.
    pub name: String,
    /// Opaque bytes the group leader reads.
    pub metadata: Vec<u8>,
}

/// A JoinGroup request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequest {
    /// The group to join.
    pub group_id: String,
    /// Empty on a first join; the id the coordinator gave otherwise.
    pub member_id: String,
    /// `group.instance.id` of a static member (v5+); `None` for dynamic ones.
    pub group_instance_id: Option<String>,
    /// The client's `client.id` (from the request header). Informational only:
    /// members are never told apart by it.
    pub client_id: String,
    /// The client's address as the gateway saw it.
    pub client_host: String,
    /// How long the member may go without a heartbeat.
    pub session_timeout_ms: u32,
    /// How long the member may take to rejoin during a rebalance (v1+; v0
    /// sends the session timeout here).
    pub rebalance_timeout_ms: u32,
    /// `consumer` for consumers; every member of a group shares one.
    pub protocol_type: String,
    /// The protocols the member supports, most preferred first.
    pub protocols: Vec<Protocol>,
    /// True from JoinGroup v4: a first join without a member id is answered
    /// `MEMBER_ID_REQUIRED` with a fresh id instead of joining at once.
    pub require_known_member_id: bool,
}

/// One member's assignment in the leader's SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberAssignment {
    /// The member the bytes are for.
    pub member_id: String,
    /// Opaque assignment bytes.
    pub assignment: Vec<u8>,
}

/// A SyncGroup request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncRequest {
    /// The group.
    pub group_id: String,
    /// The generation the member joined.
    pub generation_id: i32,
    /// The member.
    pub member_id: String,
    /// `group.instance.id` of a static member (v3+).
    pub group_instance_id: Option<String>,
    /// v5+: checked against the group's when present.
    pub protocol_type: Option<String>,
    /// v5+: checked against the group's when present.
    pub protocol_name: Option<String>,
    /// The leader's assignments; empty from followers.
    pub assignments: Vec<MemberAssignment>,
}

/// A Heartbeat request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatRequest {
    /// The group.
    pub group_id: String,
    /// The generation the member is in.
    pub generation_id: i32,
    /// The member.
    pub member_id: String,
    /// `group.instance.id` of a static member (v3+).
    pub group_instance_id: Option<String>,
}

/// One member leaving, in a [`LeaveRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeavingMember {
    /// The member; may be empty in v3+ when `group_instance_id` names it.
    pub member_id: String,
    /// `group.instance.id` of a static member (v3+).
    pub group_instance_id: Option<String>,
}

/// A LeaveGroup request: one member (v0-v2) or a list (v3+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveRequest {
    /// The group.
    pub group_id: String,
    /// The members leaving.
    pub members: Vec<LeavingMember>,
}

/// One partition's offset in an [`OffsetCommitRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionCommit {
    /// The partition index.
    pub partition: i32,
    /// The offset to commit (the next record the group will read).
    pub offset: i64,
    /// The leader epoch of the last consumed record, -1 if unknown (v6+).
    pub leader_epoch: i32,
    /// Client metadata; `None` (null on the wire) is stored as empty.
    pub metadata: Option<String>,
}

/// One topic's partitions in an [`OffsetCommitRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicCommit {
    /// The topic name.
    pub topic: String,
    /// Its partitions.
    pub partitions: Vec<PartitionCommit>,
}

/// An OffsetCommit request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitRequest {
    /// The group.
    pub group_id: String,
    /// The committing member's generation; -1 for a commit from outside any
    /// generation (a consumer using `assign()`, or v0), accepted only while the
    /// group has no members.
    pub generation_id: i32,
    /// The member; empty together with generation -1.
    pub member_id: String,
    /// `group.instance.id` of a static member (v7+).
    pub group_instance_id: Option<String>,
    /// The offsets.
    pub topics: Vec<TopicCommit>,
}

/// The partitions of one topic in an [`OffsetFetchRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPartitions {
    /// The topic name.
    pub topic: String,
    /// Its partition indexes.
    pub partitions: Vec<i32>,
}

/// An OffsetFetch request for one group (v8+ batches groups: one call each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchRequest {
    /// The group.
    pub group_id: String,
    /// The partitions asked for; `None` (null, v2+) asks for every committed one.
    pub topics: Option<Vec<TopicPartitions>>,
}
