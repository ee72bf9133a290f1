//! The broker↔control-plane protocol, both ways. A broker registers with
//! the control port, reports its segments' load and leaves
//! ([`MembershipRequest`], `port::ControlPortRequest`); the control plane
//! commands a broker's port to apply a topic's layout or drop a topic
//! ([`LayoutCommand`], `port::BrokerPortRequest`). Clients send neither.

use crate::codec::{Reader, Writer};
use crate::error::DecodeError;
use crate::frame::FrameType;

use super::common::{
    read_shard_addresses, shard_addresses, some_u32, some_u64, ShardAddress, NONE_U32, NONE_U64,
};

/// What a broker tells the control plane about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipRequest {
    /// A broker joins the control plane (`id: None` asks for a new id).
    RegisterBroker {
        id: Option<u32>,
        shards: Vec<ShardAddress>,
        capacity_bytes_per_s: u64,
        capacity_records_per_s: u64,
    },
    /// A broker's traffic per open segment since its previous report.
    LoadReport {
        broker: u32,
        segments: Vec<SegmentLoadReport>,
    },
    /// A broker leaves gracefully: its segments move elsewhere first.
    LeaveBroker { broker: u32 },
}

/// What the control plane tells a broker to do with a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutCommand<'a> {
    /// The control plane tells a broker a topic's layout (the topic's
    /// JSON, `docs/control-plane.md`): the broker seals what the layout
    /// seals and opens what it places on it.
    ApplyLayout {
        topic_json: &'a [u8],
        /// The shards of each broker owning an open segment of the
        /// layout (for a refusal's [`Successors`](super::Successors)).
        owners: Vec<BrokerShards>,
    },
    /// The control plane tells a broker a topic is gone.
    DropTopic { topic: String },
    /// The first half of an `ApplyLayout` that seals segments here while
    /// another broker opens their successors: the broker refuses writes
    /// to the segments the layout seals (naming their successors) and
    /// answers at once, flushing nothing and opening nothing. The
    /// `ApplyLayout` that follows flushes and marks them, while the
    /// successors open elsewhere.
    RefuseWrites {
        topic_json: &'a [u8],
        owners: Vec<BrokerShards>,
    },
}

/// A broker's shards, by its id: what an `ApplyLayout` carries for each
/// broker owning an open segment of the layout, so a broker that seals a
/// segment can name where its successors are
/// ([`Successors`](super::Successors)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerShards {
    pub broker: u32,
    pub shards: Vec<ShardAddress>,
}

/// One open segment's traffic, as a broker reports it to the control plane.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentLoadReport {
    pub topic: String,
    pub segment: u32,
    /// Rates since the broker's previous report.
    pub bytes_per_s: u64,
    pub records_per_s: u64,
    /// One past the last offset appended.
    pub next_offset: u64,
    /// When the first record was appended, ms since the Unix epoch; `None`
    /// before any.
    pub first_append_ms: Option<u64>,
    /// Offsets found damaged and lost (`SegmentInfo::lost_records`).
    pub lost_records: u64,
    /// How far behind each follower the owner's layout names is (at most
    /// [`FOLLOWER_LAGS_MAX`]).
    pub followers: Vec<FollowerLag>,
}

/// Most followers one segment's load report names: a segment is kept on
/// at most 5 brokers, its owner and 4 followers (`control::REPLICAS_MAX`).
pub const FOLLOWER_LAGS_MAX: usize = 4;

/// How far behind its owner one follower of a segment is, as the owner
/// sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FollowerLag {
    pub broker: u32,
    /// How long since it last held every record the owner had (0: it does
    /// now), in ms.
    pub lag_ms: u64,
}

frame_types!(MembershipRequest as "request" {
    RegisterBroker => RegisterBrokerRequest,
    LoadReport => LoadReportRequest,
    LeaveBroker => LeaveBrokerRequest,
});

impl MembershipRequest {
    fn write(&self, w: &mut Writer<'_>) {
        match self {
            MembershipRequest::RegisterBroker {
                id,
                shards,
                capacity_bytes_per_s,
                capacity_records_per_s,
            } => {
                w.u32(id.unwrap_or(NONE_U32));
                shard_addresses(w, shards);
                w.u64(*capacity_bytes_per_s);
                w.u64(*capacity_records_per_s);
            }
            MembershipRequest::LoadReport { broker, segments } => {
                w.u32(*broker);
                w.count(segments.len());
                for s in segments {
                    w.string(&s.topic);
                    w.u32(s.segment);
                    w.u64(s.bytes_per_s);
                    w.u64(s.records_per_s);
                    w.u64(s.next_offset);
                    w.u64(s.first_append_ms.unwrap_or(NONE_U64));
                    w.u64(s.lost_records);
                    w.count(s.followers.len());
                    for f in &s.followers {
                        w.u32(f.broker);
                        w.u64(f.lag_ms);
                    }
                }
            }
            MembershipRequest::LeaveBroker { broker } => w.u32(*broker),
        }
    }

    fn read(frame_type: FrameType, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(match frame_type {
            FrameType::RegisterBrokerRequest => MembershipRequest::RegisterBroker {
                id: some_u32(r.u32()?),
                shards: read_shard_addresses(r)?,
                capacity_bytes_per_s: r.u64()?,
                capacity_records_per_s: r.u64()?,
            },
            FrameType::LoadReportRequest => {
                let broker = r.u32()?;
                let n = r.count(2 + 4 + 8 * 5 + 4)?;
                let mut segments = Vec::with_capacity(n);
                for _ in 0..n {
                    let mut segment = SegmentLoadReport {
                        topic: r.string()?,
                        segment: r.u32()?,
                        bytes_per_s: r.u64()?,
                        records_per_s: r.u64()?,
                        next_offset: r.u64()?,
                        first_append_ms: some_u64(r.u64()?),
                        lost_records: r.u64()?,
                        followers: Vec::new(),
                    };
                    let followers = r.count(4 + 8)?;
                    if followers > FOLLOWER_LAGS_MAX {
                        return Err(DecodeError::TooLarge {
                            what: "follower list",
                            len: followers as u64,
                            max: FOLLOWER_LAGS_MAX as u64,
                        });
                    }
                    for _ in 0..followers {
                        segment.followers.push(FollowerLag {
                            broker: r.u32()?,
                            lag_ms: r.u64()?,
                        });
                    }
                    segments.push(segment);
                }
                MembershipRequest::LoadReport { broker, segments }
            }
            FrameType::LeaveBrokerRequest => MembershipRequest::LeaveBroker { broker: r.u32()? },
            frame_type => return Err(DecodeError::Foreign { frame_type }),
        })
    }
}

frame_types!(LayoutCommand<'a> as "request" {
    ApplyLayout => ApplyLayoutRequest,
    DropTopic => DropTopicRequest,
    RefuseWrites => RefuseWritesRequest,
});

impl<'a> LayoutCommand<'a> {
    fn write(&self, w: &mut Writer<'_>) {
        match self {
            LayoutCommand::ApplyLayout { topic_json, owners }
            | LayoutCommand::RefuseWrites { topic_json, owners } => {
                w.u32(u32::try_from(topic_json.len()).unwrap_or(u32::MAX));
                w.bytes(topic_json);
                w.count(owners.len());
                for owner in owners {
                    w.u32(owner.broker);
                    shard_addresses(w, &owner.shards);
                }
            }
            LayoutCommand::DropTopic { topic } => w.string(topic),
        }
    }

    fn read(frame_type: FrameType, r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(match frame_type {
            FrameType::ApplyLayoutRequest => {
                let (topic_json, owners) = read_layout(r)?;
                LayoutCommand::ApplyLayout { topic_json, owners }
            }
            FrameType::RefuseWritesRequest => {
                let (topic_json, owners) = read_layout(r)?;
                LayoutCommand::RefuseWrites { topic_json, owners }
            }
            FrameType::DropTopicRequest => LayoutCommand::DropTopic { topic: r.string()? },
            frame_type => return Err(DecodeError::Foreign { frame_type }),
        })
    }
}

/// The body `ApplyLayout` and `RefuseWrites` share: the topic JSON and the
/// owners' shards.
fn read_layout<'a>(r: &mut Reader<'a>) -> Result<(&'a [u8], Vec<BrokerShards>), DecodeError> {
    // A byte length, bounded by the frame (`take`).
    let n = r.u32()? as usize;
    let topic_json = r.take(n)?;
    let n = r.count(8)?;
    let mut owners = Vec::with_capacity(n);
    for _ in 0..n {
        owners.push(BrokerShards {
            broker: r.u32()?,
            shards: read_shard_addresses(r)?,
        });
    }
    Ok((topic_json, owners))
}
