//! The coordinator's outputs: plain structs the gateway maps onto the wire.

use crate::group::{ErrorCode, GroupState, Token};

/// A member as the leader sees it in its JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    /// The member's id.
    pub member_id: String,
    /// Its `group.instance.id`, if static.
    pub group_instance_id: Option<String>,
    /// Its metadata for the protocol the group selected.
    pub metadata: Vec<u8>,
}

/// A JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResponse {
    /// The outcome.
    pub error: ErrorCode,
    /// The generation joined; -1 on error.
    pub generation_id: i32,
    /// The group's protocol type (v7+ on the wire); `None` on error.
    pub protocol_type: Option<String>,
    /// The protocol the group selected; `None` on error.
    pub protocol_name: Option<String>,
    /// The leader's member id; empty on error.
    pub leader_id: String,
    /// The member's id: the one assigned on a first join, also with
    /// `MEMBER_ID_REQUIRED`; the request's otherwise.
    pub member_id: String,
    /// Every member with its metadata, for the leader only; empty for others.
    pub members: Vec<JoinedMember>,
}

impl JoinResponse {
    /// An error answer for `member_id`.
    pub(crate) fn error(error: ErrorCode, member_id: &str) -> JoinResponse {
        JoinResponse {
            error,
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader_id: String::new(),
            member_id: member_id.to_owned(),
            members: Vec::new(),
        }
    }
}

/// A SyncGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncResponse {
    /// The outcome.
    pub error: ErrorCode,
    /// The generation the assignment belongs to; -1 on error. Not on the
    /// wire: it lets the caller (and the tests) check that an answer never
    /// mixes generations.
    pub generation_id: i32,
    /// The group's protocol type (v5+); `None` on error.
    pub protocol_type: Option<String>,
    /// The group's protocol (v5+); `None` on error.
    pub protocol_name: Option<String>,
    /// The member's assignment from the leader; empty on error.
    pub assignment: Vec<u8>,
}

impl SyncResponse {
    /// An error answer.
    pub(crate) fn error(error: ErrorCode) -> SyncResponse {
        SyncResponse {
            error,
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            assignment: Vec::new(),
        }
    }
}

/// A parked request's answer, released by a later call or by
/// [`Coordinator::tick`](crate::group::Coordinator::tick).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// The answer to a parked JoinGroup.
    Join {
        /// The token the request was parked with.
        token: Token,
        /// Its response.
        response: JoinResponse,
    },
    /// The answer to a parked SyncGroup.
    Sync {
        /// The token the request was parked with.
        token: Token,
        /// Its response.
        response: SyncResponse,
    },
}

impl Released {
    /// The token of the request this answers.
    pub fn token(&self) -> Token {
        match self {
            Released::Join { token, .. } | Released::Sync { token, .. } => *token,
        }
    }

    /// The JoinGroup response this is, if it is one.
    pub fn into_join(self) -> Option<JoinResponse> {
        match self {
            Released::Join { response, .. } => Some(response),
            Released::Sync { .. } => None,
        }
    }

    /// The SyncGroup response this is, if it is one.
    pub fn into_sync(self) -> Option<SyncResponse> {
        match self {
            Released::Sync { response, .. } => Some(response),
            Released::Join { .. } => None,
        }
    }
}

/// One member's outcome in a [`LeaveResponse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftMember {
    /// The member id from the request.
    pub member_id: String,
    /// The `group.instance.id` from the request.
    pub group_instance_id: Option<String>,
    /// Its own outcome.
    pub error: ErrorCode,
}

/// A LeaveGroup response. For v0-v2 (one member) the gateway reports the
/// single member's error as the top-level error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveResponse {
    /// Top-level outcome (errors that concern the whole request).
    pub error: ErrorCode,
    /// One entry per requested member, in request order.
    pub members: Vec<LeftMember>,
}

/// One topic's outcomes in an [`OffsetCommitResponse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicCommitResult {
    /// The topic.
    pub topic: String,
    /// `(partition, error)` in request order.
    pub partitions: Vec<(i32, ErrorCode)>,
}

/// An OffsetCommit response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitResponse {
    /// One entry per requested topic, in request order.
    pub topics: Vec<TopicCommitResult>,
}

/// An OffsetDelete response: a group-level error, or one per partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetDeleteResponse {
    /// The group's error (then no partition is touched).
    pub error: ErrorCode,
    /// One entry per requested topic, in request order.
    pub topics: Vec<TopicCommitResult>,
}

/// One partition's committed offset in an [`OffsetFetchResponse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOffset {
    /// The partition.
    pub partition: i32,
    /// The committed offset, -1 if none.
    pub offset: i64,
    /// The committed leader epoch, -1 if none.
    pub leader_epoch: i32,
    /// The committed metadata, empty if none.
    pub metadata: String,
    /// The outcome for this partition.
    pub error: ErrorCode,
}

/// One topic's offsets in an [`OffsetFetchResponse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicOffsets {
    /// The topic.
    pub topic: String,
    /// Its partitions.
    pub partitions: Vec<PartitionOffset>,
}

/// An OffsetFetch response for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchResponse {
    /// Top-level outcome (v2+).
    pub error: ErrorCode,
    /// The offsets, in request order, or in (topic, partition) order for "all".
    pub topics: Vec<TopicOffsets>,
}

/// A member in a [`GroupDescription`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// The member id.
    pub member_id: String,
    /// Its `group.instance.id`, if static.
    pub group_instance_id: Option<String>,
    /// Its `client.id`.
    pub client_id: String,
    /// Its address.
    pub client_host: String,
    /// Its metadata for the selected protocol; empty unless the group is Stable.
    pub metadata: Vec<u8>,
    /// Its current assignment; empty unless the group is Stable.
    pub assignment: Vec<u8>,
}

/// A DescribeGroups answer for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// The outcome (an unknown group is not an error: it is described `Dead`).
    pub error: ErrorCode,
    /// The group id.
    pub group_id: String,
    /// Its state.
    pub state: GroupState,
    /// Its protocol type, empty if none.
    pub protocol_type: String,
    /// The selected protocol when Stable; empty otherwise.
    pub protocol_name: String,
    /// Its members in join order.
    pub members: Vec<MemberDescription>,
}

/// A ListGroups entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// The group id.
    pub group_id: String,
    /// Its protocol type, empty if none.
    pub protocol_type: String,
    /// Its state (v4+ on the wire).
    pub state: GroupState,
}
