//! kelp-filer owns the file store interface, [`Filer`], and its local-directory
//! backend, [`LocalFiler`]. Everything kelp persists (topic layouts, log chunks,
//! by-reference payloads) goes through these five methods and nothing else.
//!
//! The trait is shaped like redb's `StorageBackend`: small, synchronous, and
//! with object-store semantics (whole-object atomic `put`, create-only
//! `create`, ranged reads, prefix `list`, recursive `delete`), so the
//! S3-compatible backend (crate `kelp-filer-s3`) serves every caller
//! unchanged. It never interprets the bytes it stores. [`FilerUrl`] names a
//! filer (`file:///dir`, `s3://bucket/prefix`).
//!
//! Paths are [`ObjectPath`]s: validated, relative, `/`-separated keys. A
//! backend maps them to whatever its medium uses; [`LocalFiler`] maps them to
//! plain files under a root directory so any tool can read them.

use std::path::{Path, PathBuf};

mod error;
mod filer_url;
mod local_filer;
mod object_path;
mod retried_reads;

pub use error::FilerError;
pub use filer_url::{FilerUrl, S3_PREFIX_BYTES_MAX};
pub use local_filer::LocalFiler;
pub use object_path::{ObjectPath, OBJECT_PATH_BYTES_MAX};
pub use retried_reads::{RetriedReads, READ_ATTEMPTS_MAX};

/// A file store with object-store semantics.
///
/// Implementations are shared between threads (`Send + Sync`) and are
/// synchronous: callers that must not block run them on a thread of their own.
/// An object is a byte string stored whole under an [`ObjectPath`]; there are
/// no directories, only common prefixes.
pub trait Filer: Send + Sync + std::fmt::Debug + 'static {
    /// Store `bytes` as the whole object at `path`, atomically (readers see
    /// the old object or the new one, never a torn one) and durably (on stable
    /// storage before returning). Overwrites any existing object.
    fn put(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError>;

    /// Store `bytes` as a new object at `path` with `put`'s guarantees, only
    /// if no object is there: [`FilerError::AlreadyExists`] otherwise, and
    /// the stored object is left as it was. Chunks, seal markers and
    /// payloads are written this way, so nothing ever overwrites one (two
    /// writers racing for a path: exactly one wins).
    fn create(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError>;

    /// Read up to `buf.len()` bytes of the object at `path`, starting at
    /// `offset`; returns the number of bytes read, which is short only at the
    /// end of the object (and 0 at or past it).
    /// [`FilerError::NotFound`] if the object is absent.
    fn read_at(&self, path: &ObjectPath, offset: u64, buf: &mut [u8]) -> Result<usize, FilerError>;

    /// The object's length in bytes; [`FilerError::NotFound`] if absent.
    fn size(&self, path: &ObjectPath) -> Result<u64, FilerError>;

    /// Every object whose path starts with `prefix` followed by `/`,
    /// recursively, sorted by [`ObjectPath`] order. An empty vec if none.
    /// The object at `prefix` itself, if any, is not included.
    fn list(&self, prefix: &ObjectPath) -> Result<Vec<ObjectPath>, FilerError>;

    /// The distinct names one level below `prefix/`: each object directly
    /// there, and the first component of every deeper path (a "directory"
    /// in a delimiter listing), sorted, each once. Lets a caller walk a tree
    /// level by level instead of listing everything under it. This default
    /// derives it from [`Filer::list`]; backends with a cheaper way
    /// override it.
    fn list_children(&self, prefix: &ObjectPath) -> Result<Vec<String>, FilerError> {
        let mut names: Vec<String> = self
            .list(prefix)?
            .iter()
            .filter_map(|path| {
                let rest = path.as_str().strip_prefix(prefix.as_str())?;
                let first = rest.strip_prefix('/')?.split('/').next()?;
                Some(first.to_owned())
            })
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Delete the object at `path` and every object under `path/`, durably.
    /// Deleting nothing is `Ok`.
    fn delete(&self, path: &ObjectPath) -> Result<(), FilerError>;

    /// Where the object's bytes are as a file on this machine, if this
    /// backend keeps them so (the local filer does): a reader may open and
    /// map that file instead of copying the bytes through `read_at`.
    /// Objects are never overwritten, so the file does not change while it
    /// exists. The default, for backends that keep nothing local: `None`.
    fn local_file(&self, path: &ObjectPath) -> Option<PathBuf> {
        let _ = path;
        None
    }

    /// Whether this backend keeps every object as a local file
    /// ([`Filer::local_file`] answers `Some`), so the machine's page
    /// cache already holds what was read lately. The default: `false`.
    fn keeps_local_files(&self) -> bool {
        false
    }

    /// Store the first `len` bytes of the local file `local` as a new
    /// object at `path`, with `create`'s guarantees (an object already at
    /// `path` is [`FilerError::AlreadyExists`], and the file stays where it
    /// is), and hand the file over:
    /// once this returns `Ok` the file no longer exists at `local` (a
    /// mapping of it the caller holds stays readable). A backend on the same
    /// filesystem moves the file into place instead of copying its bytes;
    /// this default reads it and calls `create`.
    fn put_file(&self, path: &ObjectPath, local: &Path, len: u64) -> Result<(), FilerError> {
        let mut bytes = std::fs::read(local).map_err(FilerError::local_io("read", local))?;
        if (bytes.len() as u64) < len {
            return Err(FilerError::local_file_short("read", local));
        }
        bytes.truncate(len as usize);
        self.create(path, &bytes)?;
        std::fs::remove_file(local).map_err(FilerError::local_io("remove", local))
    }
}
