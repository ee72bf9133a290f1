//! One broker per data directory: an exclusive `flock` on `<data-dir>/lock`,
//! held for the broker's life. Two brokers on one directory would each
//! recover and flush the other's buffers, and acknowledged records would
//! be lost; the second one is refused at start instead, naming the first.
//!
//! The kernel drops the lock when the process ends, however it ends, so a
//! broker killed with SIGKILL leaves nothing to clean up.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::error::EngineError;

/// The lock file's name inside the data directory. It holds the owner's
/// pid in decimal and a newline, for the message a second broker prints.
pub(crate) const LOCK_FILE_NAME: &str = "lock";

/// The held lock; released when dropped.
#[derive(Debug)]
pub(crate) struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    /// Take the lock of `data_dir`, or say who holds it.
    pub(crate) fn take(data_dir: &Path) -> Result<DataDirLock, EngineError> {
        let path = data_dir.join(LOCK_FILE_NAME);
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| EngineError::io("open", &path, e))?;
        // SAFETY: flock on a descriptor `file` holds open.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !locked {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(EngineError::io("lock", &path, error));
            }
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() {
                "another process".to_owned()
            } else {
                format!("pid {holder}")
            };
            return Err(EngineError::Start(format!(
                "data dir {} is in use by another kelp broker ({who}); one broker per data dir",
                data_dir.display()
            )));
        }
        let pid = format!("{}\n", std::process::id());
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(pid.as_bytes()))
            .map_err(|e| EngineError::io("write", &path, e))?;
        Ok(DataDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_second_lock_on_one_dir_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::take(dir.path()).unwrap();
        let refused = DataDirLock::take(dir.path()).unwrap_err().to_string();
        assert!(
            refused.contains(&format!("pid {}", std::process::id())),
            "{refused}"
        );
        drop(first);
        DataDirLock::take(dir.path()).unwrap();
    }
}
