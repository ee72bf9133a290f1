//! The one error type of the filer boundary.

/// Why a [`Filer`](crate::Filer) operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilerError {
    /// No object is stored at `path`.
    #[error("object not found: {path}")]
    NotFound {
        /// The object path that was asked for.
        path: String,
    },
    /// `path` is not a valid [`ObjectPath`](crate::ObjectPath).
    #[error("invalid object path {path:?}: {reason}")]
    InvalidPath {
        /// The rejected path, as given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The backend's storage failed. The message names the operation and the
    /// file (for [`LocalFiler`](crate::LocalFiler), the filesystem path).
    #[error("filer {op} failed on {path}: {source}")]
    Io {
        /// The system operation that failed, e.g. `"rename"` or `"fsync dir"`.
        op: &'static str,
        /// The file or directory it was applied to.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl FilerError {
    /// True if this is [`FilerError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, FilerError::NotFound { .. })
    }
}
