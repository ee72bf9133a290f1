//! Errors at the broker's boundaries.

use std::path::PathBuf;

/// Why the broker could not start or had to stop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error("invalid configuration: {0}")]
    Config(String),
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
