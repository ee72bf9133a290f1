//! The control plane's error type, and what [`ControlError::Corrupt`]
//! says is wrong.

use crate::{
    BrokerId, InvalidRegistration, KeyRange, PolicyError, SegmentId, TopicJsonError, TopicName,
};

/// Why a control-plane operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// A topic name failed validation; the string says what is wrong.
    #[error("invalid topic name: {0}")]
    InvalidTopicName(String),
    /// A topic with this name already exists.
    #[error("topic {0} already exists")]
    TopicExists(String),
    /// No topic with this name exists.
    #[error("topic {0} does not exist")]
    TopicNotFound(String),
    /// A topic was asked for with too few or too many segments.
    #[error("invalid segment count {count}: must be 1..={max}")]
    InvalidSegmentCount {
        /// The count asked for.
        count: u32,
        /// [`SEGMENTS_PER_TOPIC_MAX`](crate::SEGMENTS_PER_TOPIC_MAX).
        max: u32,
    },
    /// A topic was asked for with more replicas than the limit, or than
    /// there are live brokers to keep them.
    #[error("invalid replica count {replicas}: must be 1..={max}, and {live} brokers are live (each replica needs its own)")]
    InvalidReplicaCount {
        /// The count asked for.
        replicas: u8,
        /// [`REPLICAS_MAX`](crate::REPLICAS_MAX).
        max: u8,
        /// Live brokers.
        live: usize,
    },
    /// The layout already holds [`TOPICS_MAX`](crate::TOPICS_MAX) topics.
    #[error("too many topics: the limit is {max}")]
    TooManyTopics {
        /// [`TOPICS_MAX`](crate::TOPICS_MAX).
        max: usize,
    },
    /// A shard count of zero: every segment needs an owning shard.
    #[error("invalid shard count 0: a broker has at least one shard")]
    InvalidShardCount,
    /// Persisted layout data failed validation.
    #[error("corrupt layout data at {path}: {reason}")]
    Corrupt {
        /// Where the data came from (an object path, `etcd <key>`, or
        /// `<bytes>` when decoded from memory).
        path: String,
        /// What is wrong with it (boxed: it can be large, and this error is
        /// returned on every core call).
        #[source]
        reason: Box<CorruptLayout>,
    },
    /// A broker sent a registration that fails validation.
    #[error("invalid broker registration: {0}")]
    InvalidBroker(#[from] InvalidRegistration),
    /// No live broker has this id (never registered, left, or declared
    /// dead: it must register again).
    #[error("broker {0} is not registered")]
    BrokerNotFound(crate::BrokerId),
    /// [`BROKERS_MAX`](crate::BROKERS_MAX) brokers are already registered.
    #[error("too many brokers: the limit is {max}")]
    TooManyBrokers {
        /// [`BROKERS_MAX`](crate::BROKERS_MAX).
        max: usize,
    },
    /// A segment has to be placed but no broker is live.
    #[error("no live broker to place segments on")]
    NoLiveBroker,
    /// The topic has no segment with this id.
    #[error("topic {topic} has no segment {segment}")]
    SegmentNotFound {
        /// The topic.
        topic: String,
        /// The segment asked for.
        segment: crate::SegmentId,
    },
    /// A split, merge, move or broker departure that cannot be done as
    /// asked.
    #[error(transparent)]
    InvalidChange(#[from] InvalidChange),
    /// A scaling policy failed validation, or does not admit the topic's
    /// open segments.
    #[error("invalid scaling policy: {0}")]
    InvalidPolicy(#[from] PolicyError),
    /// The filer failed.
    #[error(transparent)]
    Filer(#[from] filer::FilerError),
    /// A segment whose owner is gone could not be sealed in the filer.
    #[error("segment {segment} cannot be fenced: {reason}")]
    Fence {
        /// The segment's id.
        segment: u32,
        /// What stood in the way.
        reason: String,
    },
    /// This instance no longer leads the control plane: its term is over
    /// and the write was not applied. `leader` is the new leader's address
    /// when one is known.
    #[error("this control-plane instance does not lead (leader: {})", leader.as_deref().unwrap_or("none elected"))]
    NotLeader {
        /// The leader's advertised address, if one holds the leader key.
        leader: Option<String>,
    },
    /// The state store (etcd) failed; the string says how. After a timeout
    /// the write may or may not have been applied.
    #[error("{0}")]
    State(String),
}

impl ControlError {
    /// [`ControlError::Corrupt`]: the data at `path` is corrupt for `reason`.
    pub(crate) fn corrupt(
        path: impl Into<String>,
        reason: impl Into<CorruptLayout>,
    ) -> ControlError {
        ControlError::Corrupt {
            path: path.into(),
            reason: Box::new(reason.into()),
        }
    }
}

/// What is wrong with persisted layout data ([`ControlError::Corrupt`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CorruptLayout {
    /// A topic's JSON is too large, does not decode, or breaks a topic
    /// invariant.
    #[error(transparent)]
    Topic(#[from] TopicJsonError),
    /// A broker record is not a broker's JSON.
    #[error(transparent)]
    BrokerJson(serde_json::Error),
    /// A broker record fails the checks a registration gets.
    #[error(transparent)]
    Broker(#[from] InvalidRegistration),
    /// A `topic.json` holds another topic than its directories name.
    #[error("holds topic {holds} but is stored as {stored_as}")]
    TopicStoredAs {
        /// The topic the object holds.
        holds: TopicName,
        /// The topic its path names.
        stored_as: TopicName,
    },
    /// A topic record's etcd key is not the one of the topic it holds.
    #[error("holds topic {holds}")]
    TopicKey {
        /// The topic the record holds.
        holds: TopicName,
    },
    /// A broker record's etcd key is not the one of the broker it holds.
    #[error("holds broker {}", .holds.0)]
    BrokerKey {
        /// The broker the record holds.
        holds: BrokerId,
    },
    /// The directories above a `topic.json` are not a valid topic name.
    #[error(transparent)]
    TopicDirectory(Box<ControlError>),
}

/// Why a change to a topic's segments, or a broker's departure, cannot be
/// made as asked. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidChange {
    /// A replacement seals several segments into several (only one into
    /// several, several into one, or one into one).
    #[error("topic {topic}: cannot replace {sealed} segments with {pieces}")]
    Shape {
        /// The topic.
        topic: TopicName,
        /// Segments to seal.
        sealed: usize,
        /// Segments to open.
        pieces: usize,
    },
    /// The same segment is named twice.
    #[error("topic {topic}: segment {segment} named twice")]
    NamedTwice {
        /// The topic.
        topic: TopicName,
        /// The segment.
        segment: SegmentId,
    },
    /// The topic has no such segment.
    #[error("topic {topic}: no segment {segment}")]
    NoSegment {
        /// The topic.
        topic: TopicName,
        /// The segment.
        segment: SegmentId,
    },
    /// The segment is already sealed.
    #[error("topic {topic}: segment {segment} is sealed")]
    Sealed {
        /// The topic.
        topic: TopicName,
        /// The segment.
        segment: SegmentId,
    },
    /// The segments to seal do not form one contiguous range.
    #[error("topic {topic}: segments {segments:?} are not adjacent")]
    NotContiguous {
        /// The topic.
        topic: TopicName,
        /// The segments to seal.
        segments: Vec<SegmentId>,
    },
    /// The new ranges leave a gap or overlap.
    #[error("topic {topic}: new ranges leave a gap or overlap")]
    GapOrOverlap {
        /// The topic.
        topic: TopicName,
    },
    /// The new ranges do not cover exactly what the sealed ones did.
    #[error("topic {topic}: new ranges cover {new}, the sealed ones {old}")]
    CoverDiffers {
        /// The topic.
        topic: TopicName,
        /// What the new ranges cover.
        new: KeyRange,
        /// What the sealed ones covered.
        old: KeyRange,
    },
    /// No segment ids are left for the new segments.
    #[error("topic {topic}: segment ids are exhausted")]
    IdsExhausted {
        /// The topic.
        topic: TopicName,
    },
    /// A split would need fewer than two pieces, or leave more open
    /// segments than the policy allows.
    #[error(
        "topic {topic}: splitting into {pieces} pieces needs 2 or more and would leave {open} open segments; the most is {max}"
    )]
    SplitBounds {
        /// The topic.
        topic: TopicName,
        /// Pieces asked for.
        pieces: u32,
        /// Open segments after the split.
        open: u32,
        /// The most the policy allows.
        max: u32,
    },
    /// A merge would leave fewer open segments than the policy allows.
    #[error("topic {topic}: has {open} open segments, the fewest allowed is {min}")]
    MergeBounds {
        /// The topic.
        topic: TopicName,
        /// Open segments now.
        open: u32,
        /// The fewest the policy allows.
        min: u32,
    },
    /// The segment's range is too narrow for this many pieces.
    #[error("topic {topic}: segment {segment} {range} cannot be cut into {pieces} pieces")]
    CannotCut {
        /// The topic.
        topic: TopicName,
        /// The segment.
        segment: SegmentId,
        /// Its range.
        range: KeyRange,
        /// Pieces asked for.
        pieces: u32,
    },
    /// The two segments to merge do not touch.
    #[error("topic {topic}: segments {a} {a_range} and {b} {b_range} are not adjacent")]
    NotAdjacent {
        /// The topic.
        topic: TopicName,
        /// The first segment named.
        a: SegmentId,
        /// Its range.
        a_range: KeyRange,
        /// The second segment named.
        b: SegmentId,
        /// Its range.
        b_range: KeyRange,
    },
    /// The joined range would not be a valid key range.
    #[error("topic {topic}: cannot join {low} and {high}")]
    CannotJoin {
        /// The topic.
        topic: TopicName,
        /// The lower range.
        low: KeyRange,
        /// The higher range.
        high: KeyRange,
    },
    /// A broker that owns open segments cannot leave while no other broker
    /// is live to take them.
    #[error(
        "broker {broker} owns {segments} open segments and no other broker is live to take them"
    )]
    LastBroker {
        /// The broker.
        broker: BrokerId,
        /// Open segments it owns.
        segments: usize,
    },
}
