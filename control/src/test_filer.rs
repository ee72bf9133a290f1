//! A test double for the control plane's tests: a local filer whose every
//! `create` first runs a hook the test gives, to fail it (an outage) or to
//! let another writer in just before it (a race). Everything else goes
//! straight to the local filer.
#![allow(clippy::unwrap_used)]

use filer::{Filer, FilerError, LocalFiler, ObjectPath};

/// Runs before each create, with the local filer underneath and the path;
/// an error is the create's.
pub(crate) type CreateHook =
    Box<dyn Fn(&LocalFiler, &ObjectPath) -> Result<(), FilerError> + Send + Sync>;

pub(crate) struct HookedCreates {
    inner: LocalFiler,
    hook: CreateHook,
}

impl HookedCreates {
    /// The local filer at `root`, its creates hooked.
    pub(crate) fn new(root: &std::path::Path, hook: CreateHook) -> HookedCreates {
        HookedCreates {
            inner: LocalFiler::open(root).unwrap(),
            hook,
        }
    }
}

impl std::fmt::Debug for HookedCreates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookedCreates")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Filer for HookedCreates {
    fn put(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
        self.inner.put(path, bytes)
    }
    fn create(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
        (self.hook)(&self.inner, path)?;
        self.inner.create(path, bytes)
    }
    fn read_at(&self, path: &ObjectPath, offset: u64, buf: &mut [u8]) -> Result<usize, FilerError> {
        self.inner.read_at(path, offset, buf)
    }
    fn size(&self, path: &ObjectPath) -> Result<u64, FilerError> {
        self.inner.size(path)
    }
    fn list(&self, prefix: &ObjectPath) -> Result<Vec<ObjectPath>, FilerError> {
        self.inner.list(prefix)
    }
    fn delete(&self, path: &ObjectPath) -> Result<(), FilerError> {
        self.inner.delete(path)
    }
}
