//! The one error type of the filer boundary.

use std::path::Path;

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
    /// A create-only write found an object already stored at `path`.
    #[error("object already exists: {path}")]
    AlreadyExists {
        /// The object path that was to be created.
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
    /// The filer location (a `file://` or `s3://` URL) or the object
    /// store's settings are not usable.
    #[error("filer {location}: {reason}")]
    Config {
        /// The location as given.
        location: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A remote object store refused or failed a request (after its own
    /// retries).
    #[error("object store {op} failed on {path}: {message}")]
    Remote {
        /// The operation, e.g. `"put"` or `"get range"`.
        op: &'static str,
        /// The object path.
        path: String,
        /// The store's error, as it reported it.
        message: String,
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
    /// What turns an I/O error of `op` on the local file or directory
    /// `path` into [`FilerError::Io`], for `map_err`.
    pub fn local_io<'a>(
        op: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(std::io::Error) -> FilerError + 'a {
        move |source| FilerError::Io {
            op,
            path: path.display().to_string(),
            source,
        }
    }

    /// The [`FilerError::Io`] of `op` for a local file handed to
    /// [`Filer::put_file`](crate::Filer::put_file) that is shorter than the
    /// length to store.
    pub fn local_file_short(op: &'static str, path: &Path) -> FilerError {
        FilerError::local_io(op, path)(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "file is shorter than the length to store",
        ))
    }

    /// True if this is [`FilerError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, FilerError::NotFound { .. })
    }

    /// True if this is [`FilerError::AlreadyExists`].
    pub fn is_already_exists(&self) -> bool {
        matches!(self, FilerError::AlreadyExists { .. })
    }
}
