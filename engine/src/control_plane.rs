//! What shards ask of the broker's control-plane threads (the cluster agent
//! and its admin callers, which speak to the control plane: the cluster's,
//! or the one a lone broker runs in-process) and what the agent and the
//! layouts the control plane sends tell shards. Requests and commands
//! travel over bounded channels; no lock is shared with the shards.

use std::sync::Arc;
use std::time::Duration;

use control::Topic;
use wire::message::{BrokerShards, TopicInfo};

use crate::error::EngineError;
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
        /// 0: the control plane's default.
        replicas: u8,
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
        reply: flume::Sender<Result<(), ShutdownError>>,
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
        reply: flume::Sender<Result<(), EngineError>>,
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
        reply: flume::Sender<Result<(), UnflushedSegments>>,
    },
}

/// Why the broker's shards were not all sealed and flushed when it
/// stopped ([`EngineError::Stop`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShutdownError {
    /// Shards that failed to flush or did not answer in time, one entry
    /// each (never empty).
    #[error("{}", join(.failures))]
    Shards {
        /// Each shard that failed.
        failures: Vec<ShardShutdownFailure>,
    },
    /// The control-plane thread was gone: nobody had the shards flush.
    #[error("control plane stopped")]
    AgentGone,
    /// The request reached an admin caller, not the agent that stops the
    /// broker.
    #[error("the broker is already stopping")]
    AlreadyStopping,
    /// The request was turned away before the agent saw it (the admin
    /// queue was full or closed): the code and message a client would get.
    #[error("{message}")]
    Refused {
        /// The error code.
        code: wire::ErrorCode,
        /// The message.
        message: String,
    },
}

/// One shard that did not seal and flush everything on shutdown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardShutdownFailure {
    /// Some of its segments failed to flush.
    #[error("shard {shard}: {source}")]
    Unflushed {
        /// The shard.
        shard: usize,
        /// Its segments that failed.
        source: UnflushedSegments,
    },
    /// It did not answer within the shard command timeout.
    #[error("shard {shard} did not finish flushing")]
    NoAnswer {
        /// The shard.
        shard: usize,
    },
}

/// The segments one shard could not seal and flush on shutdown, each with
/// the error its flush got (never empty).
#[derive(Debug, thiserror::Error)]
#[error("{}", join(.segments))]
#[non_exhaustive]
pub struct UnflushedSegments {
    /// Each segment that failed.
    pub segments: Vec<UnflushedSegment>,
}

/// One segment that could not be sealed and flushed.
#[derive(Debug, thiserror::Error)]
#[error("segment {segment}: {message}")]
#[non_exhaustive]
pub struct UnflushedSegment {
    /// The segment's id.
    pub segment: u32,
    /// The error code a client waiting on it gets.
    pub code: wire::ErrorCode,
    /// Why (the segment's failure, or the filer's).
    pub message: String,
}

impl UnflushedSegment {
    pub(crate) fn new(segment: u32, error: ServeError) -> UnflushedSegment {
        UnflushedSegment {
            segment,
            code: error.code,
            message: error.message,
        }
    }
}

/// `items` one after another, split by `; `.
fn join<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Have every shard seal and flush everything, and wait for them.
pub(crate) fn shut_down_shards(
    shards: &[flume::Sender<ShardCommand>],
) -> Result<(), ShutdownError> {
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
            Ok(Err(source)) => {
                failures.push(ShardShutdownFailure::Unflushed { shard: i, source });
            }
            Err(_) => failures.push(ShardShutdownFailure::NoAnswer { shard: i }),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(ShutdownError::Shards { failures })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A shard that answers `answer` (or drops the reply, with `None`) to
    /// its shutdown.
    fn shard(answer: Option<Result<(), UnflushedSegments>>) -> flume::Sender<ShardCommand> {
        let (commands, inbox) = flume::bounded(1);
        std::thread::spawn(move || {
            if let Ok(ShardCommand::Shutdown { reply }) = inbox.recv() {
                if let Some(answer) = answer {
                    let _ = reply.send(answer);
                }
            }
        });
        commands
    }

    #[test]
    fn a_shutdown_names_each_shard_that_failed() {
        shut_down_shards(&[shard(Some(Ok(()))), shard(Some(Ok(())))]).unwrap();
        let unflushed = UnflushedSegments {
            segments: vec![UnflushedSegment::new(
                3,
                ServeError::new(wire::ErrorCode::Storage, "disk full"),
            )],
        };
        let err = shut_down_shards(&[
            shard(Some(Ok(()))),
            shard(Some(Err(unflushed))),
            shard(None),
        ])
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "shard 1: segment 3: disk full; shard 2 did not finish flushing"
        );
        let ShutdownError::Shards { failures } = &err else {
            panic!("expected Shards, got {err:?}")
        };
        assert!(matches!(
            failures.as_slice(),
            [
                ShardShutdownFailure::Unflushed { shard: 1, source },
                ShardShutdownFailure::NoAnswer { shard: 2 },
            ] if source.segments[0].segment == 3
                && source.segments[0].code == wire::ErrorCode::Storage
        ));
        assert_eq!(
            EngineError::from(err).to_string(),
            "stopping: shard 1: segment 3: disk full; shard 2 did not finish flushing"
        );
        assert_eq!(
            EngineError::from(ShutdownError::AgentGone).to_string(),
            "stopping: control plane stopped"
        );
    }
}
