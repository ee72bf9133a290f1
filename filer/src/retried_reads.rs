//! [`RetriedReads`]: a filer whose reads that fail with an I/O error are
//! tried again, a few times, before the failure goes up. A broker opening
//! a segment reads every chunk's header, and a control plane starting
//! reads every topic's layout; a filer that fails one read in a hundred
//! would otherwise fail one segment open in three, each waiting a
//! resynchronisation to try the whole segment again. Remote stores' errors
//! are not retried here: their client retried already
//! ([`FilerError::Remote`]). Writes pass through once: a write that failed
//! is never simply made again (its caller decides).
//!
//! Its pauses block the calling thread: callers run filer calls on threads
//! of their own (a shard's read lane, the control plane's driver).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::{Filer, FilerError, ObjectPath};

/// Tries of one read, the first included.
pub const READ_ATTEMPTS_MAX: u32 = 3;
/// The pause before the second try; each later one waits four times longer.
const FIRST_PAUSE: Duration = Duration::from_millis(10);

/// A filer whose reads are retried (see the module docs).
#[derive(Debug)]
pub struct RetriedReads {
    inner: Arc<dyn Filer>,
}

impl RetriedReads {
    /// `inner`, its reads retried.
    pub fn new(inner: Arc<dyn Filer>) -> RetriedReads {
        RetriedReads { inner }
    }
}

/// `read`, tried up to [`READ_ATTEMPTS_MAX`] times while it fails with an
/// I/O error.
fn retried<T>(mut read: impl FnMut() -> Result<T, FilerError>) -> Result<T, FilerError> {
    let mut pause = FIRST_PAUSE;
    let mut attempt = 1;
    loop {
        match read() {
            Err(FilerError::Io { .. }) if attempt < READ_ATTEMPTS_MAX => {
                std::thread::sleep(pause);
                pause *= 4;
                attempt += 1;
            }
            other => return other,
        }
    }
}

impl Filer for RetriedReads {
    fn put(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
        self.inner.put(path, bytes)
    }

    fn create(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
        self.inner.create(path, bytes)
    }

    fn read_at(&self, path: &ObjectPath, offset: u64, buf: &mut [u8]) -> Result<usize, FilerError> {
        retried(|| self.inner.read_at(path, offset, buf))
    }

    fn size(&self, path: &ObjectPath) -> Result<u64, FilerError> {
        retried(|| self.inner.size(path))
    }

    fn list(&self, prefix: &ObjectPath) -> Result<Vec<ObjectPath>, FilerError> {
        retried(|| self.inner.list(prefix))
    }

    fn list_children(&self, prefix: &ObjectPath) -> Result<Vec<String>, FilerError> {
        retried(|| self.inner.list_children(prefix))
    }

    fn delete(&self, path: &ObjectPath) -> Result<(), FilerError> {
        self.inner.delete(path)
    }

    fn local_file(&self, path: &ObjectPath) -> Option<PathBuf> {
        self.inner.local_file(path)
    }

    fn keeps_local_files(&self) -> bool {
        self.inner.keeps_local_files()
    }

    fn put_file(&self, path: &ObjectPath, local: &Path, len: u64) -> Result<(), FilerError> {
        self.inner.put_file(path, local, len)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn io_error() -> FilerError {
        FilerError::Io {
            op: "read",
            path: "p".into(),
            source: std::io::Error::other("flaky"),
        }
    }

    #[test]
    fn an_io_error_is_tried_again_up_to_the_limit_and_others_are_not() {
        let calls = AtomicU32::new(0);
        let once_then_ok = retried(|| {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(io_error())
            } else {
                Ok(7)
            }
        });
        assert_eq!(once_then_ok.unwrap(), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 2);

        calls.store(0, Ordering::SeqCst);
        let always = retried(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(io_error())
        });
        assert!(matches!(always, Err(FilerError::Io { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), READ_ATTEMPTS_MAX);

        calls.store(0, Ordering::SeqCst);
        let absent = retried(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(FilerError::NotFound { path: "p".into() })
        });
        assert!(absent.unwrap_err().is_not_found());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
