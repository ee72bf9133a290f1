//! What shards ask of the broker's control-plane threads (the cluster agent
//! and its admin callers, which speak to the control plane: the cluster's,
//! or the one a lone broker runs in-process) and what the agent and the
//! layouts the control plane sends tell shards. Requests and commands
//! travel over bounded channels; no lock is shared with the shards.

use std::sync::Arc;
use std::time::Duration;

use control::Topic;
use wire::message::{BrokerShards, TopicInfo};

use crate::serve_error::ServeError;

/// Requests waiting for the cluster agent (which hands admin requests on
/// to its admin callers).
pub(crate) const CONTROL_REQUESTS_QUEUED_MAX: usize = 1024;
/// Commands waiting for one shard.
pub(crate) const SHARD_COMMANDS_QUEUED_MAX: usize = 64;
/// How long the control plane waits for a shard to apply a command
/// (opening a segment may flush recovered buffers).
const SHARD_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

pub(crate) type Reply<T> = flume::Sender<Result<T, ServeError>>;

/// What shards ask the control plane.
#[derive(Debug)]
pub(crate) enum ControlRequest {
    CreateTopic {
        topic: String,
        segments: u32,
        reply: Reply<TopicInfo>,
    },
    DeleteTopic {
        topic: String,
        reply: Reply<()>,
    },
    ListTopics {
        reply: Reply<Vec<String>>,
    },
    DescribeTopic {
        topic: String,
        reply: Reply<TopicInfo>,
    },
    /// A client's admin request for the control plane, passed on as it
    /// came (frame type and payload); the answer comes back the same way.
    Forward {
        frame_type: wire::FrameType,
        payload: Vec<u8>,
        reply: Reply<crate::cluster_agent::Answer>,
    },
    Shutdown {
        reply: flume::Sender<Result<(), String>>,
    },
}

/// What the control plane tells a shard.
#[derive(Debug)]
pub(crate) enum ShardCommand {
    /// Here is a topic's layout: open the segments placed on you.
    TopicLayout {
        topic: Topic,
        /// The shards of the brokers owning its open segments (the
        /// `ApplyLayout`'s), to name a sealed segment's successors.
        owners: Arc<[BrokerShards]>,
        reply: flume::Sender<Result<(), String>>,
    },
    /// The first half of a layout, sent to every shard before the layout
    /// itself: refuse writes to the segments it seals (naming their
    /// successors), so no shard opens a successor while another still
    /// takes writes to its predecessor.
    RefuseWrites {
        topic: Topic,
        owners: Arc<[BrokerShards]>,
        reply: flume::Sender<()>,
    },
    /// The topic is being deleted: drop its segments and local buffers.
    DropTopic {
        name: String,
        reply: flume::Sender<()>,
    },
    /// The counters of every open segment here (the cluster agent's load
    /// report), and with `sealed` of the sealed ones it still holds too
    /// (their figures are final: what a describe answers).
    ReportLoad {
        sealed: bool,
        reply: flume::Sender<Vec<crate::shard::SegmentLoadFigures>>,
    },
    /// Seal and flush everything, then report.
    Shutdown {
        reply: flume::Sender<Result<(), String>>,
    },
}

/// Have every shard seal and flush everything, and wait for them.
pub(crate) fn shut_down_shards(shards: &[flume::Sender<ShardCommand>]) -> Result<(), String> {
    let mut waiting = Vec::new();
    for (i, shard) in shards.iter().enumerate() {
        let (tx, rx) = flume::bounded(1);
        if shard.send(ShardCommand::Shutdown { reply: tx }).is_ok() {
            waiting.push((i, rx));
        }
    }
    let mut failures = Vec::new();
    for (i, rx) in waiting {
        match rx.recv_timeout(SHARD_COMMAND_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("shard {i}: {e}")),
            Err(_) => failures.push(format!("shard {i} did not finish flushing")),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}
