//! [`Topic`]: a named set of segments, and its persisted JSON form.
//!
//! # Persisted form
//!
//! The service stores each topic as one JSON object at
//! `topics/<namespace>/<name>/topic.json` (pretty-printed UTF-8, so an
//! operator can read it):
//!
//! ```json
//! {
//!   "version": 1,
//!   "name": "payments/orders",
//!   "created_ms": 1700000000000,
//!   "segments": [
//!     {
//!       "id": 0,
//!       "epoch": 0,
//!       "range": { "start": 0, "end": 2147483648 },
//!       "state": "open",
//!       "shard": 0,
//!       "successors": [],
//!       "created_ms": 1700000000000
//!     },
//!     {
//!       "id": 1,
//!       "epoch": 0,
//!       "range": { "start": 2147483648, "end": 4294967296 },
//!       "state": "open",
//!       "shard": 1,
//!       "successors": [],
//!       "created_ms": 1700000000000
//!     }
//!   ]
//! }
//! ```
//!
//! | field | meaning |
//! | --- | --- |
//! | `version` | format version, [`TOPIC_JSON_VERSION`]; read first, other versions are rejected |
//! | `name` | `namespace/name`, validated as a [`TopicName`] |
//! | `created_ms` | creation time, ms since the Unix epoch |
//! | `segments` | every segment ever created, open and sealed, in strictly increasing `id` order |
//! | `segments[].range` | `[start, end)` with `start < end <= 2^32` |
//! | `segments[].state` | `"open"` or `"sealed"` |
//! | `segments[].shard` | owning shard index when written; re-mapped modulo the shard count on load |
//! | `segments[].successors` | ids of the segments that replaced a sealed one; empty while open. Several: a split, and they cover its range exactly; one: a merge (covering more) or a move (the same range) |
//! | `segments[].broker` | optional: the owning broker's id when the control plane runs apart from the brokers; absent for the single-broker layout |
//! | `segments[].sealed_ms` | optional: when the segment was sealed |
//! | `segments[].followers` | optional: the brokers that copy the segment besides its owner, each `{ "broker": id, "shard": index, "in_sync": bool }`, on brokers other than the owner and each other; at most `replicas - 1` |
//! | `replicas` | optional (absent: 1): how many brokers keep each segment, owner included, 1 to [`REPLICAS_MAX`] |
//! | `follower_changes` | optional (absent: 0): how many times open segments' followers changed; part of the layout's age (`Topic::layout_age`) |
//! | `policy` | optional: the topic's [`ScalingPolicy`], every field optional (defaults as in [`ScalingPolicy::default`]); absent means manual scaling only |
//!
//! Decoding rejects, with a reason: input over [`TOPIC_JSON_BYTES_MAX`],
//! malformed JSON, unknown versions, invalid names or ranges, duplicate or
//! unordered ids, successors that do not exist, and open ranges that do not
//! tile the ring exactly. Unknown fields are ignored so a newer writer can
//! add optional fields without a version bump.

use crate::{
    BrokerId, ControlError, Follower, InvalidChange, KeyRange, PolicyError, ScalingPolicy, Segment,
    SegmentId, SegmentState, TopicName, RING_END,
};

/// Most segments a topic can be created with.
pub const SEGMENTS_PER_TOPIC_MAX: u32 = 1024;

/// Most topics the control plane holds.
pub const TOPICS_MAX: usize = 100_000;

/// Most brokers a segment can be kept on, its owner included.
pub const REPLICAS_MAX: u8 = 5;

/// Brokers a topic's segments are kept on when its creator does not say,
/// in a cluster with at least that many live brokers (see
/// [`Cluster::default_replicas`](crate::Cluster::default_replicas)).
pub const DEFAULT_REPLICAS: u8 = 2;

/// Every segment a topic is created with must get a non-empty range.
const _: () = assert!(SEGMENTS_PER_TOPIC_MAX as u64 <= RING_END);

/// The version written into, and required of, a topic's JSON form.
pub const TOPIC_JSON_VERSION: u32 = 1;

/// Largest topic JSON accepted, in bytes. A segment takes about 200 bytes
/// pretty-printed, so this holds tens of thousands of segments of split and
/// merge history while keeping a corrupt file from exhausting memory.
pub const TOPIC_JSON_BYTES_MAX: u64 = 16 << 20;

/// Where [`Topic::from_json_bytes`] says corrupt input came from when it was
/// not read from a named object.
const UNNAMED_SOURCE: &str = "<bytes>";

/// A topic: its name and every segment it has had.
///
/// Always valid: built by [`Cluster`](crate::Cluster) or decoded (and checked)
/// by [`Topic::from_json_bytes`]. Segments are kept in increasing id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    pub(crate) name: TopicName,
    pub(crate) segments: Vec<Segment>,
    pub(crate) created_ms: u64,
    pub(crate) policy: Option<ScalingPolicy>,
    /// How many brokers keep each segment, owner included.
    pub(crate) replicas: u8,
    /// How many times open segments' followers changed
    /// (`Action::Followers`): with the segment counts, how a broker tells
    /// the newer of two layouts.
    pub(crate) follower_changes: u64,
}

/// The persisted shape, borrowed for writing.
#[derive(serde::Serialize)]
struct TopicJsonOut<'a> {
    version: u32,
    name: &'a TopicName,
    created_ms: u64,
    segments: &'a [Segment],
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<&'a ScalingPolicy>,
    #[serde(skip_serializing_if = "is_one")]
    replicas: u8,
    #[serde(skip_serializing_if = "is_zero")]
    follower_changes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_one(replicas: &u8) -> bool {
    *replicas == 1
}

fn one() -> u8 {
    1
}

/// The persisted shape, owned for reading.
#[derive(serde::Deserialize)]
struct TopicJsonIn {
    name: TopicName,
    created_ms: u64,
    segments: Vec<Segment>,
    #[serde(default)]
    policy: Option<ScalingPolicy>,
    #[serde(default = "one")]
    replicas: u8,
    #[serde(default)]
    follower_changes: u64,
}

/// Read first, so a future version gets a clear "unsupported version" error
/// rather than whatever its new shape fails on.
#[derive(serde::Deserialize)]
struct TopicJsonVersion {
    version: u32,
}

impl Topic {
    /// Give `broker` every open segment that names no broker (as a kelp
    /// whose lone broker ran a control plane of another kind stored them);
    /// true if any changed.
    pub fn adopt_unowned(&mut self, broker: BrokerId) -> bool {
        let mut changed = false;
        for segment in &mut self.segments {
            if segment.is_open() && segment.broker.is_none() {
                segment.broker = Some(broker);
                changed = true;
            }
        }
        changed
    }

    /// The topic's name.
    pub fn name(&self) -> &TopicName {
        &self.name
    }

    /// Every segment, open and sealed, in increasing id order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// When the topic was created, ms since the Unix epoch.
    pub fn created_ms(&self) -> u64 {
        self.created_ms
    }

    /// The segment with this id, if any.
    pub fn segment(&self, id: SegmentId) -> Option<&Segment> {
        self.segments
            .binary_search_by_key(&id, |s| s.id)
            .ok()
            .map(|i| &self.segments[i])
    }

    /// The open segments, in id order. Their ranges tile the ring.
    pub fn open_segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter().filter(|s| s.is_open())
    }

    /// The open segment whose range contains `hash`. Always `Some` for a
    /// valid topic; an `Option` so callers never need to panic.
    /// Linear in the number of segments: fine for the control plane, while
    /// clients route with their own index.
    pub fn segment_for_hash(&self, hash: u32) -> Option<&Segment> {
        self.open_segments().find(|s| s.range.contains(hash))
    }

    /// How many brokers keep each segment, owner included.
    pub fn replicas(&self) -> u8 {
        self.replicas
    }

    /// How old the layout is: of two layouts of one topic (created at the
    /// same time), the one with the larger age is the newer. Every change
    /// adds segments (a split, merge or move), seals some, or changes
    /// followers, and none takes any back.
    pub fn layout_age(&self) -> (usize, usize, u64) {
        let sealed = self.segments.iter().filter(|s| !s.is_open()).count();
        (self.segments.len(), sealed, self.follower_changes)
    }

    /// The topic's split/merge policy, if one was set.
    pub fn policy(&self) -> Option<&ScalingPolicy> {
        self.policy.as_ref()
    }

    /// How many segments are open.
    pub fn open_segment_count(&self) -> usize {
        self.open_segments().count()
    }

    /// The id the next new segment gets: one past the highest ever used
    /// (segments are never removed, so ids are never reused).
    pub fn next_segment_id(&self) -> Option<SegmentId> {
        match self.segments.last() {
            Some(last) => last.id.0.checked_add(1).map(SegmentId),
            None => Some(SegmentId(0)),
        }
    }

    /// Seal the open segments `sealed` and open `pieces` over exactly the
    /// range they covered; every sealed segment names all the new ones as
    /// its successors. One segment into several (a split), several into
    /// one (a merge) or one into one (a move); never several into several.
    /// Sealing bumps the segment's epoch, so commands and writes that carry
    /// the old one can be refused. Returns the new ids, in range order. On
    /// `Err` (which says why) the topic is unchanged.
    pub(crate) fn replace(
        &mut self,
        now_ms: u64,
        sealed: &[SegmentId],
        pieces: &[NewSegment],
    ) -> Result<Vec<SegmentId>, InvalidChange> {
        let topic = || self.name.clone();
        if sealed.is_empty() || pieces.is_empty() || (sealed.len() > 1 && pieces.len() > 1) {
            return Err(InvalidChange::Shape {
                topic: topic(),
                sealed: sealed.len(),
                pieces: pieces.len(),
            });
        }
        let mut old_ranges = Vec::with_capacity(sealed.len());
        for (i, &segment) in sealed.iter().enumerate() {
            if sealed[..i].contains(&segment) {
                return Err(InvalidChange::NamedTwice {
                    topic: topic(),
                    segment,
                });
            }
            let found = self
                .segment(segment)
                .ok_or_else(|| InvalidChange::NoSegment {
                    topic: topic(),
                    segment,
                })?;
            if !found.is_open() {
                return Err(InvalidChange::Sealed {
                    topic: topic(),
                    segment,
                });
            }
            old_ranges.push(found.range);
        }
        old_ranges.sort();
        let mut new_ranges: Vec<KeyRange> = pieces.iter().map(|p| p.range).collect();
        new_ranges.sort();
        let old = contiguous_union(&old_ranges).ok_or_else(|| InvalidChange::NotContiguous {
            topic: topic(),
            segments: sealed.to_vec(),
        })?;
        let new = contiguous_union(&new_ranges)
            .ok_or_else(|| InvalidChange::GapOrOverlap { topic: topic() })?;
        if old != new {
            return Err(InvalidChange::CoverDiffers {
                topic: topic(),
                new,
                old,
            });
        }
        let exhausted = || InvalidChange::IdsExhausted { topic: topic() };
        let first = self.next_segment_id().ok_or_else(exhausted)?;
        let last = u32::try_from(pieces.len() - 1)
            .ok()
            .and_then(|n| first.0.checked_add(n))
            .ok_or_else(exhausted)?;
        let mut ordered: Vec<&NewSegment> = pieces.iter().collect();
        ordered.sort_by_key(|p| p.range);
        let ids: Vec<SegmentId> = (first.0..=last).map(SegmentId).collect();
        for segment in &mut self.segments {
            if sealed.contains(&segment.id) {
                segment.state = SegmentState::Sealed;
                segment.epoch = segment.epoch.wrapping_add(1);
                segment.successors.clone_from(&ids);
                segment.sealed_ms = Some(now_ms);
            }
        }
        for (id, piece) in ids.iter().zip(ordered) {
            self.segments.push(Segment {
                id: *id,
                epoch: 0,
                range: piece.range,
                state: SegmentState::Open,
                shard: piece.shard,
                successors: Vec::new(),
                created_ms: now_ms,
                broker: piece.broker,
                sealed_ms: None,
                sealer: None,
                followers: piece.followers.clone(),
            });
        }
        debug_assert_eq!(self.validate(), Ok(()));
        Ok(ids)
    }

    /// The persisted JSON form (see the module docs).
    pub fn to_json_bytes(&self) -> Vec<u8> {
        let out = TopicJsonOut {
            version: TOPIC_JSON_VERSION,
            name: &self.name,
            created_ms: self.created_ms,
            segments: &self.segments,
            policy: self.policy.as_ref(),
            replicas: self.replicas,
            follower_changes: self.follower_changes,
        };
        let mut bytes = serde_json::to_vec_pretty(&out)
            .expect("plain structs with string keys always serialize to JSON");
        bytes.push(b'\n');
        bytes
    }

    /// Decode and validate the persisted JSON form. Corrupt input gives
    /// [`ControlError::Corrupt`] with path `<bytes>` and the reason (a
    /// [`TopicJsonError`]); it never panics.
    pub fn from_json_bytes(bytes: &[u8]) -> Result<Topic, ControlError> {
        Topic::from_json_bytes_at(bytes, UNNAMED_SOURCE)
    }

    /// [`Topic::from_json_bytes`], naming `path` in any error.
    pub(crate) fn from_json_bytes_at(bytes: &[u8], path: &str) -> Result<Topic, ControlError> {
        decode(bytes).map_err(|reason| ControlError::corrupt(path, reason))
    }

    /// Check the invariants every topic holds: segments in strictly
    /// increasing id order (so ids are unique), open segments have no
    /// successors, successors exist and differ from the segment, and the
    /// open ranges tile the ring exactly.
    pub(crate) fn validate(&self) -> Result<(), InvalidTopic> {
        let topic = || self.name.clone();
        if self.segments.is_empty() {
            return Err(InvalidTopic::NoSegments { topic: topic() });
        }
        for pair in self.segments.windows(2) {
            let (earlier, later) = (pair[0].id, pair[1].id);
            if earlier == later {
                return Err(InvalidTopic::DuplicateSegment {
                    topic: topic(),
                    segment: earlier,
                });
            }
            if earlier > later {
                return Err(InvalidTopic::SegmentsOutOfOrder {
                    topic: topic(),
                    earlier,
                    later,
                });
            }
        }
        for segment in &self.segments {
            let id = segment.id;
            if segment.state == SegmentState::Open && !segment.successors.is_empty() {
                return Err(InvalidTopic::OpenWithSuccessors {
                    topic: topic(),
                    segment: id,
                });
            }
            for successor in &segment.successors {
                if *successor == id {
                    return Err(InvalidTopic::SucceedsItself {
                        topic: topic(),
                        segment: id,
                    });
                }
                if self.segment(*successor).is_none() {
                    return Err(InvalidTopic::MissingSuccessor {
                        topic: topic(),
                        segment: id,
                        successor: *successor,
                    });
                }
            }
        }
        let mut open: Vec<(KeyRange, SegmentId)> =
            self.open_segments().map(|s| (s.range, s.id)).collect();
        open.sort();
        let mut next_start: u64 = 0;
        for (range, id) in &open {
            let start = u64::from(range.start());
            if start > next_start {
                return Err(InvalidTopic::Uncovered {
                    topic: topic(),
                    start: next_start,
                    end: start,
                });
            }
            if start < next_start {
                return Err(InvalidTopic::Overlap {
                    topic: topic(),
                    segment: *id,
                    range: *range,
                });
            }
            next_start = range.end();
        }
        if next_start != RING_END {
            return Err(InvalidTopic::Uncovered {
                topic: topic(),
                start: next_start,
                end: RING_END,
            });
        }
        for segment in &self.segments {
            if !segment.successors.is_empty() {
                self.check_successors_cover(segment)?;
            }
        }
        if let Some(policy) = &self.policy {
            policy.validate().map_err(|source| InvalidTopic::Policy {
                topic: topic(),
                source,
            })?;
        }
        if self.replicas == 0 || self.replicas > REPLICAS_MAX {
            return Err(InvalidTopic::Replicas {
                topic: topic(),
                replicas: self.replicas,
            });
        }
        for segment in &self.segments {
            let mut brokers: Vec<Option<BrokerId>> = vec![segment.broker];
            for follower in &segment.followers {
                if brokers.contains(&Some(follower.broker)) {
                    return Err(InvalidTopic::Followers {
                        topic: topic(),
                        segment: segment.id,
                        reason: "two copies on one broker",
                    });
                }
                brokers.push(Some(follower.broker));
            }
            if segment.followers.len() >= usize::from(self.replicas) {
                return Err(InvalidTopic::Followers {
                    topic: topic(),
                    segment: segment.id,
                    reason: "more followers than the topic's replicas allow",
                });
            }
        }
        Ok(())
    }
}

/// Why a topic breaks an invariant every topic holds
/// ([`Topic`]'s validation, on decoding and in the core's checks).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidTopic {
    /// Not one segment.
    #[error("topic {topic} has no segments")]
    NoSegments {
        /// The topic.
        topic: TopicName,
    },
    /// Two segments with one id.
    #[error("topic {topic}: duplicate segment id {segment}")]
    DuplicateSegment {
        /// The topic.
        topic: TopicName,
        /// The id listed twice.
        segment: SegmentId,
    },
    /// Segments not in increasing id order.
    #[error("topic {topic}: segment id {later} listed after {earlier}")]
    SegmentsOutOfOrder {
        /// The topic.
        topic: TopicName,
        /// The id listed first.
        earlier: SegmentId,
        /// The smaller id listed after it.
        later: SegmentId,
    },
    /// An open segment that names successors.
    #[error("topic {topic}: open segment {segment} has successors")]
    OpenWithSuccessors {
        /// The topic.
        topic: TopicName,
        /// The open segment.
        segment: SegmentId,
    },
    /// A segment that names itself as its successor.
    #[error("topic {topic}: segment {segment} succeeds itself")]
    SucceedsItself {
        /// The topic.
        topic: TopicName,
        /// The segment.
        segment: SegmentId,
    },
    /// A successor the topic does not have.
    #[error("topic {topic}: segment {segment} names missing successor {successor}")]
    MissingSuccessor {
        /// The topic.
        topic: TopicName,
        /// The sealed segment.
        segment: SegmentId,
        /// The successor it names.
        successor: SegmentId,
    },
    /// Hashes `[start, end)` that no open segment covers.
    #[error("topic {topic}: no open segment covers [{start:#x}, {end:#x})")]
    Uncovered {
        /// The topic.
        topic: TopicName,
        /// The first hash not covered.
        start: u64,
        /// One past the last hash not covered.
        end: u64,
    },
    /// Two open segments whose ranges overlap.
    #[error("topic {topic}: open segment {segment} {range} overlaps the one before it")]
    Overlap {
        /// The topic.
        topic: TopicName,
        /// The later of the two (by range).
        segment: SegmentId,
        /// Its range.
        range: KeyRange,
    },
    /// A sealed segment's successors leave a gap or overlap between them.
    #[error("topic {topic}: the successors of segment {segment} leave a gap or overlap")]
    SuccessorsNotContiguous {
        /// The topic.
        topic: TopicName,
        /// The sealed segment.
        segment: SegmentId,
    },
    /// A sealed segment's successors do not cover its range (exactly, for
    /// a split).
    #[error(
        "topic {topic}: the successors of segment {segment} cover {covered}, not its range {range}"
    )]
    SuccessorsMiscover {
        /// The topic.
        topic: TopicName,
        /// The sealed segment.
        segment: SegmentId,
        /// The union of its successors' ranges.
        covered: KeyRange,
        /// Its own range.
        range: KeyRange,
    },
    /// The topic's scaling policy is invalid.
    #[error("topic {topic}: policy: {source}")]
    Policy {
        /// The topic.
        topic: TopicName,
        /// What is wrong with the policy.
        source: PolicyError,
    },
    /// The replica count is 0 or over [`REPLICAS_MAX`].
    #[error("topic {topic}: {replicas} replicas (1 to {REPLICAS_MAX} are allowed)")]
    Replicas {
        /// The topic.
        topic: TopicName,
        /// The count found.
        replicas: u8,
    },
    /// A segment's followers break a rule.
    #[error("topic {topic}: segment {segment}'s followers: {reason}")]
    Followers {
        /// The topic.
        topic: TopicName,
        /// The segment.
        segment: SegmentId,
        /// Which rule.
        reason: &'static str,
    },
}

/// Why bytes are not a topic's persisted JSON form
/// ([`Topic::from_json_bytes`]); carried by [`ControlError::Corrupt`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopicJsonError {
    /// More bytes than any valid topic takes.
    #[error("{bytes} bytes is over the {max}-byte limit")]
    TooLarge {
        /// The input's length.
        bytes: u64,
        /// [`TOPIC_JSON_BYTES_MAX`].
        max: u64,
    },
    /// Not a JSON object with a numeric `version`.
    #[error("not a topic JSON object: {0}")]
    NotAnObject(#[source] serde_json::Error),
    /// A version this build does not read.
    #[error("unsupported version {version} (this build reads version {supported})")]
    UnsupportedVersion {
        /// The version found.
        version: u32,
        /// [`TOPIC_JSON_VERSION`].
        supported: u32,
    },
    /// A field is missing or does not decode (names and ranges are
    /// checked here).
    #[error("invalid topic JSON: {0}")]
    Fields(#[source] serde_json::Error),
    /// The fields decode but break a topic invariant.
    #[error(transparent)]
    Invalid(#[from] InvalidTopic),
}

/// A segment [`Topic::replace`] is to open: its range, owner and
/// followers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewSegment {
    pub(crate) range: KeyRange,
    pub(crate) broker: Option<BrokerId>,
    pub(crate) shard: u16,
    pub(crate) followers: Vec<Follower>,
}

/// The union of `ranges` (sorted) if they follow each other with no gap or
/// overlap.
fn contiguous_union(ranges: &[KeyRange]) -> Option<KeyRange> {
    let first = ranges.first()?;
    let last = ranges.last()?;
    ranges
        .windows(2)
        .all(|pair| pair[0].end() == u64::from(pair[1].start()))
        .then(|| KeyRange::new(first.start(), last.end()))
        .flatten()
}

impl Topic {
    /// A sealed segment's successors follow each other with no gap or
    /// overlap and cover its range: exactly, when there are several (a
    /// split), or as part of a larger range, when there is one (a merge or
    /// a move).
    fn check_successors_cover(&self, segment: &Segment) -> Result<(), InvalidTopic> {
        let topic = || self.name.clone();
        let id = segment.id;
        let mut ranges = Vec::with_capacity(segment.successors.len());
        for successor in &segment.successors {
            match self.segment(*successor) {
                Some(s) => ranges.push(s.range),
                None => {
                    return Err(InvalidTopic::MissingSuccessor {
                        topic: topic(),
                        segment: id,
                        successor: *successor,
                    })
                }
            }
        }
        ranges.sort();
        let union =
            contiguous_union(&ranges).ok_or_else(|| InvalidTopic::SuccessorsNotContiguous {
                topic: topic(),
                segment: id,
            })?;
        let covers = if ranges.len() > 1 {
            union == segment.range
        } else {
            union.start() <= segment.range.start() && segment.range.end() <= union.end()
        };
        if !covers {
            return Err(InvalidTopic::SuccessorsMiscover {
                topic: topic(),
                segment: id,
                covered: union,
                range: segment.range,
            });
        }
        Ok(())
    }
}

fn decode(bytes: &[u8]) -> Result<Topic, TopicJsonError> {
    if bytes.len() as u64 > TOPIC_JSON_BYTES_MAX {
        return Err(TopicJsonError::TooLarge {
            bytes: bytes.len() as u64,
            max: TOPIC_JSON_BYTES_MAX,
        });
    }
    let version: TopicJsonVersion =
        serde_json::from_slice(bytes).map_err(TopicJsonError::NotAnObject)?;
    if version.version != TOPIC_JSON_VERSION {
        return Err(TopicJsonError::UnsupportedVersion {
            version: version.version,
            supported: TOPIC_JSON_VERSION,
        });
    }
    let json: TopicJsonIn = serde_json::from_slice(bytes).map_err(TopicJsonError::Fields)?;
    let topic = Topic {
        name: json.name,
        segments: json.segments,
        created_ms: json.created_ms,
        policy: json.policy,
        replicas: json.replicas,
        follower_changes: json.follower_changes,
    };
    topic.validate()?;
    Ok(topic)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::CorruptLayout;

    fn segment(id: u32, start: u32, end: u64, state: SegmentState, successors: &[u32]) -> Segment {
        Segment {
            id: SegmentId(id),
            epoch: 0,
            range: KeyRange::new(start, end).unwrap(),
            state,
            shard: 0,
            successors: successors.iter().copied().map(SegmentId).collect(),
            created_ms: 7,
            broker: None,
            sealed_ms: None,
            sealer: None,
            followers: Vec::new(),
        }
    }

    /// Segment 0 over the whole ring, sealed and split into 1 and 2.
    fn split_topic() -> Topic {
        let half = 1 << 31;
        Topic {
            name: TopicName::parse("ns/t").unwrap(),
            segments: vec![
                segment(0, 0, RING_END, SegmentState::Sealed, &[1, 2]),
                segment(1, 0, half, SegmentState::Open, &[]),
                segment(2, half as u32, RING_END, SegmentState::Open, &[]),
            ],
            created_ms: 5,
            policy: None,
            replicas: 1,
            follower_changes: 0,
        }
    }

    /// What decoding `bytes` refused them for.
    fn corrupt(bytes: &[u8]) -> TopicJsonError {
        match Topic::from_json_bytes(bytes) {
            Err(ControlError::Corrupt { path, reason }) => {
                assert_eq!(path, "<bytes>");
                match *reason {
                    CorruptLayout::Topic(reason) => reason,
                    other => panic!("expected a topic's reason, got {other:?}"),
                }
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    fn corrupt_reason(bytes: &[u8]) -> String {
        corrupt(bytes).to_string()
    }

    /// The invariant `bytes` break, for input that decodes as JSON.
    fn invalid(bytes: &[u8]) -> InvalidTopic {
        match corrupt(bytes) {
            TopicJsonError::Invalid(invalid) => invalid,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn lookups() {
        let topic = split_topic();
        topic.validate().unwrap();
        assert_eq!(topic.segment(SegmentId(2)).unwrap().id, SegmentId(2));
        assert!(topic.segment(SegmentId(3)).is_none());
        let open: Vec<u32> = topic.open_segments().map(|s| s.id.0).collect();
        assert_eq!(open, [1, 2]);
        assert_eq!(topic.segment_for_hash(0).unwrap().id, SegmentId(1));
        assert_eq!(
            topic.segment_for_hash((1 << 31) - 1).unwrap().id,
            SegmentId(1)
        );
        assert_eq!(topic.segment_for_hash(1 << 31).unwrap().id, SegmentId(2));
        assert_eq!(topic.segment_for_hash(u32::MAX).unwrap().id, SegmentId(2));
    }

    #[test]
    fn json_round_trip() {
        let topic = split_topic();
        let bytes = topic.to_json_bytes();
        assert_eq!(Topic::from_json_bytes(&bytes).unwrap(), topic);
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.contains("\"version\": 1"), "{text}");
        assert!(text.contains("\"name\": \"ns/t\""), "{text}");
        assert!(text.contains("\"state\": \"sealed\""), "{text}");
    }

    #[test]
    fn golden_json_decodes() {
        // The example from the module docs: pins the field names.
        let golden = br#"{
          "version": 1, "name": "payments/orders", "created_ms": 1700000000000,
          "segments": [
            {"id": 0, "epoch": 0, "range": {"start": 0, "end": 2147483648},
             "state": "open", "shard": 0, "successors": [], "created_ms": 1700000000000},
            {"id": 1, "epoch": 0, "range": {"start": 2147483648, "end": 4294967296},
             "state": "open", "shard": 1, "successors": [], "created_ms": 1700000000000}
          ],
          "added_by_a_newer_writer": true
        }"#;
        let topic = Topic::from_json_bytes(golden).unwrap();
        assert_eq!(topic.name().to_string(), "payments/orders");
        assert_eq!(topic.segments()[1].shard, 1);
    }

    #[test]
    fn rejects_corrupt_input_with_a_reason() {
        assert!(corrupt_reason(b"").contains("not a topic JSON object"));
        assert!(corrupt_reason(b"\xff\xfe").contains("not a topic JSON object"));
        assert!(corrupt_reason(b"[1,2]").contains("not a topic JSON object"));
        assert!(corrupt_reason(br#"{"version": 2}"#).contains("unsupported version 2"));
        assert!(corrupt_reason(br#"{"version": 1}"#).contains("invalid topic JSON"));
        let good = String::from_utf8(split_topic().to_json_bytes()).unwrap();
        let cases = [
            (good.replace("ns/t", "ns/../t"), "namespace/name"),
            (
                good.replace("4294967296", "4294967297"),
                "invalid key range",
            ),
            (good.replace("\"open\"", "\"ajar\""), "unknown variant"),
            // Broken invariants: corrupt_input_is_told_apart_by_variant.
        ];
        for (text, expected) in cases {
            assert_ne!(text, good, "case {expected:?} did not change the input");
            let reason = corrupt_reason(text.as_bytes());
            assert!(reason.contains(expected), "{expected:?} not in {reason:?}");
        }
        let too_big = vec![b' '; TOPIC_JSON_BYTES_MAX as usize + 1];
        assert!(corrupt_reason(&too_big).contains("limit"));
    }

    #[test]
    fn corrupt_input_is_told_apart_by_variant() {
        assert!(matches!(corrupt(b""), TopicJsonError::NotAnObject(_)));
        assert!(matches!(
            corrupt(br#"{"version": 2}"#),
            TopicJsonError::UnsupportedVersion {
                version: 2,
                supported: TOPIC_JSON_VERSION
            }
        ));
        assert!(matches!(
            corrupt(br#"{"version": 1}"#),
            TopicJsonError::Fields(_)
        ));
        let too_big = vec![b' '; TOPIC_JSON_BYTES_MAX as usize + 1];
        assert!(matches!(
            corrupt(&too_big),
            TopicJsonError::TooLarge { bytes, max: TOPIC_JSON_BYTES_MAX }
                if bytes == TOPIC_JSON_BYTES_MAX + 1
        ));
        let good = String::from_utf8(split_topic().to_json_bytes()).unwrap();
        let t = TopicName::parse("ns/t").unwrap();
        // Each case breaks one invariant: refused as `Invalid`, the message
        // naming the topic and what broke.
        let cases = [
            (
                good.replace("\"id\": 2", "\"id\": 1"),
                "duplicate segment id 1",
            ),
            (
                good.replace("\"id\": 0", "\"id\": 9"),
                "segment id 1 listed after 9",
            ),
            (
                good.replace("\"sealed\"", "\"open\""),
                "open segment 0 has successors",
            ),
            (
                good.replace("\n        2\n", "\n        7\n"),
                "segment 0 names missing successor 7",
            ),
            (
                good.replace("\n        1,\n", "\n        0,\n"),
                "segment 0 succeeds itself",
            ),
        ];
        for (text, expected) in cases {
            assert_ne!(text, good, "case {expected:?} did not change the input");
            let error = invalid(text.as_bytes()).to_string();
            assert_eq!(error, format!("topic ns/t: {expected}"));
        }

        let mut gap = split_topic();
        gap.segments[2].range = KeyRange::new((1 << 31) + 1, RING_END).unwrap();
        assert_eq!(
            invalid(&gap.to_json_bytes()),
            InvalidTopic::Uncovered {
                topic: t.clone(),
                start: 1 << 31,
                end: (1 << 31) + 1
            }
        );
        let mut overlap = split_topic();
        let range = KeyRange::new((1 << 31) - 1, RING_END).unwrap();
        overlap.segments[2].range = range;
        assert_eq!(
            invalid(&overlap.to_json_bytes()),
            InvalidTopic::Overlap {
                topic: t.clone(),
                segment: SegmentId(2),
                range
            }
        );
        let mut empty = split_topic();
        empty.segments.clear();
        assert_eq!(
            invalid(&empty.to_json_bytes()),
            InvalidTopic::NoSegments { topic: t.clone() }
        );
        let mut one = split_topic();
        one.segments[0].successors = vec![SegmentId(1)];
        assert_eq!(
            invalid(&one.to_json_bytes()),
            InvalidTopic::SuccessorsMiscover {
                topic: t.clone(),
                segment: SegmentId(0),
                covered: KeyRange::new(0, 1 << 31).unwrap(),
                range: KeyRange::FULL
            }
        );
        let mut bad_policy = split_topic();
        bad_policy.policy = Some(ScalingPolicy {
            split_pieces_max: 1,
            ..ScalingPolicy::default()
        });
        assert_eq!(
            invalid(&bad_policy.to_json_bytes()),
            InvalidTopic::Policy {
                topic: t,
                source: PolicyError::SplitPieces {
                    split_pieces_max: 1
                }
            }
        );
    }

    #[test]
    fn rejects_gaps_and_overlaps() {
        let mut gap = split_topic();
        gap.segments[2].range = KeyRange::new((1 << 31) + 1, RING_END).unwrap();
        let reason = corrupt_reason(&gap.to_json_bytes());
        assert!(
            reason.contains("no open segment covers [0x80000000, 0x80000001)"),
            "{reason}"
        );

        let mut overlap = split_topic();
        overlap.segments[2].range = KeyRange::new((1 << 31) - 1, RING_END).unwrap();
        assert!(corrupt_reason(&overlap.to_json_bytes()).contains("overlaps"));

        let mut short = split_topic();
        short.segments[2].range = KeyRange::new(1 << 31, RING_END - 1).unwrap();
        assert!(corrupt_reason(&short.to_json_bytes()).contains("0xffffffff"));

        let mut none_open = split_topic();
        none_open.segments.truncate(1);
        none_open.segments[0].successors.clear();
        none_open.segments[0].state = SegmentState::Sealed;
        assert!(corrupt_reason(&none_open.to_json_bytes()).contains("no open segment covers [0x0"));

        let mut empty = split_topic();
        empty.segments.clear();
        assert!(corrupt_reason(&empty.to_json_bytes()).contains("no segments"));
    }

    fn piece(start: u32, end: u64, broker: u32) -> NewSegment {
        NewSegment {
            range: KeyRange::new(start, end).unwrap(),
            broker: Some(BrokerId(broker)),
            shard: 3,
            followers: Vec::new(),
        }
    }

    #[test]
    fn replace_splits_merges_and_moves() {
        let mut topic = split_topic();
        let half = 1u64 << 31;
        let quarter = 1u32 << 30;
        // Split segment 1 ([0, 2^31)) in two, given out of order.
        let ids = topic
            .replace(
                50,
                &[SegmentId(1)],
                &[piece(quarter, half, 8), piece(0, u64::from(quarter), 9)],
            )
            .unwrap();
        assert_eq!(ids, [SegmentId(3), SegmentId(4)]);
        let one = topic.segment(SegmentId(1)).unwrap();
        assert_eq!(
            (one.state, one.epoch, one.sealed_ms),
            (SegmentState::Sealed, 1, Some(50))
        );
        assert_eq!(one.successors, ids);
        let three = topic.segment(SegmentId(3)).unwrap();
        assert_eq!(
            (three.range.start(), three.broker, three.shard),
            (0, Some(BrokerId(9)), 3)
        );
        assert_eq!(
            (three.created_ms, three.epoch, three.state),
            (50, 0, SegmentState::Open)
        );

        // Merge 4 and 2 (given in either order) into one.
        let ids = topic
            .replace(
                60,
                &[SegmentId(2), SegmentId(4)],
                &[piece(quarter, RING_END, 1)],
            )
            .unwrap();
        assert_eq!(ids, [SegmentId(5)]);
        assert_eq!(topic.segment(SegmentId(2)).unwrap().successors, ids);
        assert_eq!(topic.segment(SegmentId(4)).unwrap().successors, ids);

        // Move 5.
        let ids = topic
            .replace(70, &[SegmentId(5)], &[piece(quarter, RING_END, 2)])
            .unwrap();
        assert_eq!(ids, [SegmentId(6)]);
        assert_eq!(topic.open_segment_count(), 2);
        assert_eq!(topic.next_segment_id(), Some(SegmentId(7)));
        topic.validate().unwrap();
        let decoded = Topic::from_json_bytes(&topic.to_json_bytes()).unwrap();
        assert_eq!(decoded, topic);
    }

    #[test]
    fn replace_refuses_what_would_break_the_topic() {
        let topic = split_topic();
        let half = 1u64 << 31;
        let cases: [(&[u32], Vec<NewSegment>, &str); 7] = [
            (&[0], vec![piece(0, RING_END, 1)], "sealed"),
            (&[9], vec![piece(0, RING_END, 1)], "no segment 9"),
            (&[1, 1], vec![piece(0, half, 1)], "named twice"),
            (&[1], vec![piece(0, half - 1, 1)], "cover"),
            (
                &[1],
                vec![piece(0, 5, 1), piece(6, half, 1)],
                "gap or overlap",
            ),
            (
                &[1, 2],
                vec![piece(0, 5, 1), piece(5, RING_END, 1)],
                "cannot replace 2 segments with 2",
            ),
            (&[], vec![piece(0, half, 1)], "cannot replace 0"),
        ];
        for (sealed, pieces, expected) in cases {
            let mut changed = topic.clone();
            let ids: Vec<SegmentId> = sealed.iter().copied().map(SegmentId).collect();
            let err = changed.replace(1, &ids, &pieces).unwrap_err();
            assert!(
                err.to_string().contains(expected),
                "{expected:?} not in {err}"
            );
            assert_eq!(changed, topic, "unchanged after {err}");
        }
        let mut full = topic.clone();
        full.segments[2].id = SegmentId(u32::MAX);
        full.segments[0].successors = vec![SegmentId(1), SegmentId(u32::MAX)];
        let err = full
            .replace(1, &[SegmentId(1)], &[piece(0, half, 1)])
            .unwrap_err();
        assert!(matches!(err, InvalidChange::IdsExhausted { .. }), "{err}");
    }

    #[test]
    fn successors_must_cover_what_they_replace() {
        // Segment 0 split into 1 and 2; now claim 0 was replaced by 1 alone.
        let mut topic = split_topic();
        topic.segments[0].successors = vec![SegmentId(1)];
        let reason = corrupt_reason(&topic.to_json_bytes());
        assert!(
            reason.contains("cover [0x00000000, 0x080000000), not its range"),
            "{reason}"
        );
        // A merge successor covering more than the sealed segment is fine.
        let mut merged = split_topic();
        merged
            .replace(5, &[SegmentId(1), SegmentId(2)], &[piece(0, RING_END, 1)])
            .unwrap();
        merged.segments[0].state = SegmentState::Sealed;
        assert!(Topic::from_json_bytes(&merged.to_json_bytes()).is_ok());
        // Successors with a hole between them.
        let half = 1u32 << 31;
        let mut holey = split_topic();
        holey.segments[2].range = KeyRange::new(half, u64::from(half) + 10).unwrap();
        holey.segments.push(Segment {
            id: SegmentId(3),
            range: KeyRange::new(half + 10, RING_END).unwrap(),
            ..holey.segments[2].clone()
        });
        holey.segments[0].successors = vec![SegmentId(1), SegmentId(3)];
        assert_eq!(
            invalid(&holey.to_json_bytes()),
            InvalidTopic::SuccessorsNotContiguous {
                topic: TopicName::parse("ns/t").unwrap(),
                segment: SegmentId(0)
            }
        );
        let reason = corrupt_reason(&holey.to_json_bytes());
        assert!(
            reason.contains("successors of segment 0 leave a gap"),
            "{reason}"
        );
    }

    #[test]
    fn policy_and_brokers_persist_and_stay_optional() {
        let plain = String::from_utf8(split_topic().to_json_bytes()).unwrap();
        assert!(
            !plain.contains("broker") && !plain.contains("policy") && !plain.contains("sealed_ms")
        );
        let mut topic = split_topic();
        topic.policy = Some(ScalingPolicy {
            segments_max: 8,
            ..ScalingPolicy::default()
        });
        topic.segments[1].broker = Some(BrokerId(4));
        topic.segments[0].sealed_ms = Some(9);
        let text = String::from_utf8(topic.to_json_bytes()).unwrap();
        assert!(
            text.contains("\"broker\": 4") && text.contains("\"segments_max\": 8"),
            "{text}"
        );
        assert_eq!(Topic::from_json_bytes(text.as_bytes()).unwrap(), topic);
        let bad = text.replace("\"segments_max\": 8", "\"segments_max\": 0");
        assert!(corrupt_reason(bad.as_bytes()).contains("policy: segment bounds"));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap deterministic fuzz: every prefix and single-byte mutation of
        // a valid document must decode or fail cleanly.
        let good = split_topic().to_json_bytes();
        for len in 0..good.len() {
            let _ = Topic::from_json_bytes(&good[..len]);
        }
        for i in 0..good.len() {
            for byte in [b'0', b'9', b'"', b'{', b'-', 0xff] {
                let mut mutated = good.clone();
                mutated[i] = byte;
                let _ = Topic::from_json_bytes(&mutated);
            }
        }
    }
}
