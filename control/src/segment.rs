//! [`Segment`]: one append-only log of a topic over a key range.

use wire::message::{FollowerInfo, SegmentInfo};

use crate::{BrokerId, KeyRange};

/// A segment's id, unique within its topic and never reused.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct SegmentId(pub u32);

impl std::fmt::Display for SegmentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Whether a segment still takes writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentState {
    /// Takes writes; its range is part of the topic's live tiling of the ring.
    Open,
    /// Takes no more writes; readers continue with its successors.
    Sealed,
}

/// One append-only log of a topic, covering `range` of the key-hash ring.
///
/// Plain data: the invariants that relate segments to each other (open
/// ranges tile the ring, successors exist) are checked at the [`Topic`]
/// level.
///
/// [`Topic`]: crate::Topic
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Segment {
    /// Unique within the topic.
    pub id: SegmentId,
    /// Bumped whenever ownership of the segment moves, so a broker can
    /// reject commands and writes addressed to an older owner.
    pub epoch: u32,
    /// The key hashes this segment takes.
    pub range: KeyRange,
    /// Open or sealed.
    pub state: SegmentState,
    /// Index of the shard (core) that owns the segment on its broker.
    pub shard: u16,
    /// For a sealed segment, the segments that took over its range; readers
    /// finish this segment before reading them. Empty while open.
    pub successors: Vec<SegmentId>,
    /// When the segment was created, in milliseconds since the Unix epoch
    /// (as given by the caller's clock).
    pub created_ms: u64,
    /// The broker that owns the segment (on shard `shard`). `None` in a
    /// single-broker layout, where `shard` alone names the owner; left out of
    /// the JSON then, so older readers and files agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker: Option<BrokerId>,
    /// When the segment was sealed; `None` while open (and for segments
    /// sealed before this field existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_ms: Option<u64>,
    /// The brokers that keep a copy of the segment besides its owner, each
    /// on another broker than the owner and than each other. Empty for a
    /// segment of one replica (left out of the JSON then).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub followers: Vec<Follower>,
    /// For a segment sealed while its owner was gone: the follower broker
    /// whose copy seals it. It stores what its copy holds past the filer's
    /// end, fences the end and writes the seal marker (docs/broker.md
    /// "Failover"). `None` otherwise (left out of the JSON then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealer: Option<BrokerId>,
}

/// One follower of a segment: shard `shard` of broker `broker` copies the
/// owner's records into its own buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Follower {
    pub broker: BrokerId,
    pub shard: u16,
    /// Whether the owner waits for it before answering an `all` produce.
    /// A follower placed for an open segment that already took records
    /// starts out of sync; the control plane changes it (never the owner).
    pub in_sync: bool,
}

impl Follower {
    /// The follower as a description names it, with no address.
    pub fn info(&self) -> FollowerInfo {
        FollowerInfo {
            broker: self.broker.0,
            shard: self.shard,
            in_sync: self.in_sync,
            address: None,
        }
    }
}

impl Segment {
    /// True if the segment still takes writes.
    pub fn is_open(&self) -> bool {
        self.state == SegmentState::Open
    }

    /// The segment as a description names it: its layout fields, with no
    /// address and every live figure 0 (the caller fills in those it
    /// knows).
    pub fn info(&self) -> SegmentInfo {
        SegmentInfo {
            id: self.id.0,
            epoch: self.epoch,
            start: self.range.start(),
            end: self.range.end(),
            sealed: !self.is_open(),
            shard: self.shard,
            successors: self.successors.iter().map(|id| id.0).collect(),
            broker: self.broker.map(|b| b.0),
            created_ms: self.created_ms,
            sealed_ms: self.sealed_ms,
            followers: self.followers.iter().map(Follower::info).collect(),
            ..SegmentInfo::default()
        }
    }
}
