//! The admin protocol: topics created, deleted, listed and described, their
//! segments split, merged and moved, their scaling policy set, and the
//! cluster's brokers listed. A client sends these to any broker, which
//! answers the topic requests itself (with the control plane's help) and
//! forwards the rest; the control port takes them too
//! (`port::BrokerPortRequest`, `port::ControlPortRequest`).

use crate::codec::{Reader, Writer};
use crate::error::DecodeError;
use crate::frame::FrameType;

use super::common::{some_u32, ShardAddress, NONE_U32};

/// What an operator (or a client) asks about topics and the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminRequest {
    /// Create a topic of `segments` segments, each kept on `replicas`
    /// brokers (0: the control plane's default, 1 today).
    CreateTopic {
        topic: String,
        segments: u32,
        replicas: u8,
    },
    DeleteTopic {
        topic: String,
    },
    ListTopics,
    DescribeTopic {
        topic: String,
    },
    /// Seal an open segment and open `pieces` successors over equal parts
    /// of its range (answered by the control plane, through any broker).
    SplitSegment {
        topic: String,
        segment: u32,
        pieces: u32,
    },
    /// Seal two adjacent open segments and open one successor over both.
    MergeSegments {
        topic: String,
        a: u32,
        b: u32,
    },
    /// Seal an open segment and reopen its range on broker `to` (`None`:
    /// the least-loaded other broker).
    MoveSegment {
        topic: String,
        segment: u32,
        to: Option<u32>,
    },
    /// Replace a topic's scaling policy: `policy` is its JSON (see
    /// `docs/control-plane.md`), empty to remove it.
    SetPolicy {
        topic: String,
        policy: String,
    },
    /// The brokers of the cluster and their load.
    ListBrokers,
}

/// One broker of a cluster as the control plane lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerStatus {
    pub id: u32,
    /// One address per shard, index = shard.
    pub shards: Vec<ShardAddress>,
    pub capacity_bytes_per_s: u64,
    pub capacity_records_per_s: u64,
    /// The broker's load: the sum of its open segments' recent rates.
    pub bytes_per_s: u64,
    pub records_per_s: u64,
    /// Load over capacity (the larger ratio), in thousandths.
    pub utilization_permille: u32,
    pub open_segments: u32,
    /// How long ago the broker was last heard from.
    pub silent_ms: u64,
}

frame_types!(AdminRequest as "request" {
    CreateTopic => CreateTopicRequest,
    DeleteTopic => DeleteTopicRequest,
    ListTopics => ListTopicsRequest,
    DescribeTopic => DescribeTopicRequest,
    SplitSegment => SplitSegmentRequest,
    MergeSegments => MergeSegmentsRequest,
    MoveSegment => MoveSegmentRequest,
    SetPolicy => SetPolicyRequest,
    ListBrokers => ListBrokersRequest,
});

impl AdminRequest {
    /// The topic the request names, if it names one.
    pub fn topic(&self) -> Option<&str> {
        match self {
            AdminRequest::ListTopics | AdminRequest::ListBrokers => None,
            AdminRequest::CreateTopic { topic, .. }
            | AdminRequest::DeleteTopic { topic }
            | AdminRequest::DescribeTopic { topic }
            | AdminRequest::SplitSegment { topic, .. }
            | AdminRequest::MergeSegments { topic, .. }
            | AdminRequest::MoveSegment { topic, .. }
            | AdminRequest::SetPolicy { topic, .. } => Some(topic),
        }
    }

    fn write(&self, w: &mut Writer<'_>) {
        // Every request but the two lists opens with its topic.
        if let Some(topic) = self.topic() {
            w.string(topic);
        }
        match self {
            AdminRequest::ListTopics
            | AdminRequest::ListBrokers
            | AdminRequest::DeleteTopic { .. }
            | AdminRequest::DescribeTopic { .. } => {}
            AdminRequest::CreateTopic {
                segments, replicas, ..
            } => {
                w.u32(*segments);
                w.u8(*replicas);
            }
            AdminRequest::SplitSegment {
                segment, pieces, ..
            } => {
                w.u32(*segment);
                w.u32(*pieces);
            }
            AdminRequest::MergeSegments { a, b, .. } => {
                w.u32(*a);
                w.u32(*b);
            }
            AdminRequest::MoveSegment { segment, to, .. } => {
                w.u32(*segment);
                w.u32(to.unwrap_or(NONE_U32));
            }
            AdminRequest::SetPolicy { policy, .. } => w.string(policy),
        }
    }

    fn read(frame_type: FrameType, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(match frame_type {
            FrameType::ListTopicsRequest => AdminRequest::ListTopics,
            FrameType::ListBrokersRequest => AdminRequest::ListBrokers,
            FrameType::CreateTopicRequest => AdminRequest::CreateTopic {
                topic: r.string()?,
                segments: r.u32()?,
                replicas: r.u8()?,
            },
            FrameType::DeleteTopicRequest => AdminRequest::DeleteTopic { topic: r.string()? },
            FrameType::DescribeTopicRequest => AdminRequest::DescribeTopic { topic: r.string()? },
            FrameType::SplitSegmentRequest => AdminRequest::SplitSegment {
                topic: r.string()?,
                segment: r.u32()?,
                pieces: r.u32()?,
            },
            FrameType::MergeSegmentsRequest => AdminRequest::MergeSegments {
                topic: r.string()?,
                a: r.u32()?,
                b: r.u32()?,
            },
            FrameType::MoveSegmentRequest => AdminRequest::MoveSegment {
                topic: r.string()?,
                segment: r.u32()?,
                to: some_u32(r.u32()?),
            },
            FrameType::SetPolicyRequest => AdminRequest::SetPolicy {
                topic: r.string()?,
                policy: r.string()?,
            },
            frame_type => return Err(DecodeError::Foreign { frame_type }),
        })
    }
}
