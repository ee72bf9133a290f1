//! Errors at the broker's boundaries.

use std::path::PathBuf;

pub use crate::cluster_agent::{ControlLinkError, ProbeError, RegisterError};
pub use crate::config::ConfigError;
pub use crate::control_plane::{
    ShardShutdownFailure, ShutdownError, UnflushedSegment, UnflushedSegments,
};

/// Why the broker could not start or had to stop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("filer: {0}")]
    Filer(#[from] filer::FilerError),
    #[error("control plane: {0}")]
    Control(#[from] control::ControlError),
    #[error("shard {shard}: {reason}")]
    Shard { shard: usize, reason: String },
    /// A segment that cannot go on: closed under a waiter, or failed after
    /// its bytes could not be stored.
    #[error("segment {segment}: {reason}")]
    Segment { segment: String, reason: String },
    /// A segment sealed while this broker was away (by the control plane,
    /// or a follower from its copy): what it held past the seal point was
    /// never stored (clients look again).
    #[error(
        "segment {segment} was sealed while this broker was away (declared dead); ask for the \
         topic's layout again"
    )]
    Fenced { segment: String },
    /// Stored bytes that do not decode as what they should be: a buffer
    /// file, a chunk, a state object (`what` names it, path and all).
    #[error("{what} is corrupt: {reason}")]
    Corrupt { what: String, reason: String },
    /// The broker could not start: a shard or the control plane did not
    /// come up.
    #[error("starting: {0}")]
    Start(String),
    /// The broker stopped, but not cleanly: what could not be flushed.
    #[error("stopping: {0}")]
    Stop(#[from] ShutdownError),
    #[error("tls: {0}")]
    Tls(String),
}

impl EngineError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EngineError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
