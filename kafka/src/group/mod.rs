//! The Kafka consumer-group coordinator (JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups).
//!
//! Sans-IO: no sockets, no files, no clock, no threads. Time comes in as
//! `now_ms` arguments; member ids come from a PRNG the caller seeds. The
//! inputs and outputs are plain structs ([`JoinRequest`], [`JoinResponse`],
//! ...) that hold no codec types: the gateway maps them from and to the wire
//! at whatever version a client speaks.
//!
//! JoinGroup and SyncGroup answers wait for the rebalance. Such a request is
//! *parked*: the call returns `None`, and the answer comes out later as a
//! [`Released`] carrying the caller's [`Token`], from
//! [`Coordinator::take_released`] after any call or from
//! [`Coordinator::tick`], which also expires sessions and rebalance timeouts.
//!
//! Committed offsets live in memory per group ([`GroupOffsets`]); the gateway
//! persists them through the filer in the byte format of
//! `docs/kafka-groups.md` and restores them with
//! [`Coordinator::restore_offsets`]. States, transitions and timeouts are
//! described in the same document.
//!
//! This module must never do I/O or depend on the codec; the gateway owns
//! both.

mod consumer_group;
mod coordinator;
mod error_code;
mod member;
mod offsets;
mod request;
mod response;
mod state;

#[cfg(test)]
mod semantics_tests;
#[cfg(test)]
mod simulation_tests;

pub use coordinator::{Coordinator, CoordinatorConfig};
pub use error_code::ErrorCode;
pub use offsets::{
    CommittedOffset, GroupOffsets, OffsetsError, GROUP_ID_BYTES_MAX, OFFSETS_FILE_BYTES_MAX,
    OFFSETS_MAGIC, OFFSETS_PER_GROUP_MAX, OFFSETS_VERSION, OFFSET_METADATA_BYTES_MAX,
    TOPIC_NAME_BYTES_MAX,
};
pub use request::{
    HeartbeatRequest, JoinRequest, LeaveRequest, LeavingMember, MemberAssignment,
    OffsetCommitRequest, OffsetFetchRequest, PartitionCommit, Protocol, SyncRequest, Token,
    TopicCommit, TopicPartitions,
};
pub use response::{
    GroupDescription, GroupListing, JoinResponse, JoinedMember, LeaveResponse, LeftMember,
    MemberDescription, OffsetCommitResponse, OffsetDeleteResponse, OffsetFetchResponse,
    PartitionOffset, Released, SyncResponse, TopicCommitResult, TopicOffsets,
};
pub use state::GroupState;
