//! The broker's upload path for payloads passed by reference, for clients
//! that cannot write to the filer themselves.
//!
//! Pieces of an upload are written, in order, to a staging file under
//! `<data dir>/payload-staging/<namespace>/<name>/`; the commit checks the
//! whole file against the reference's length and checksum, makes it
//! durable and hands it to the filer (a rename for the local filer). None of
//! it touches a segment buffer, and every call here is blocking file I/O
//! that the shards run on their blocking thread pool, never on the
//! executor thread.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use control::TopicName;
use filer::{Filer, FilerError};
use wire::{ErrorCode, PayloadId, PayloadRef};

use crate::serve_error::ServeError;

/// Bytes read at a time when checksumming a staged upload.
const CHECKSUM_READ_BYTES: usize = 1 << 20;
/// The staging directory's name under the data directory.
pub(crate) const STAGING_DIR: &str = "payload-staging";
/// Suffix of a staged upload's file.
const PART_SUFFIX: &str = ".part";

/// Writes uploads to staging files and the filer, reads stored payloads.
#[derive(Debug)]
pub(crate) struct PayloadStore {
    filer: Arc<dyn Filer>,
    staging: PathBuf,
}

impl PayloadStore {
    pub(crate) fn new(filer: Arc<dyn Filer>, data_dir: &Path) -> PayloadStore {
        PayloadStore {
            filer,
            staging: data_dir.join(STAGING_DIR),
        }
    }

    fn part_path(&self, topic: &TopicName, id: &PayloadId) -> PathBuf {
        self.staging
            .join(topic.namespace())
            .join(topic.name())
            .join(format!("{}{PART_SUFFIX}", id.object_name()))
    }

    /// Write one piece of an upload at `offset`. The first piece (offset 0)
    /// starts the upload over; every later one must start where the file
    /// ends, so a lost or repeated piece is refused, never silently merged.
    pub(crate) fn write(
        &self,
        topic: &TopicName,
        id: &PayloadId,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), ServeError> {
        let path = self.part_path(topic, id);
        let file = if offset == 0 {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| io_error("create", dir, &e))?;
            }
            File::create(&path).map_err(|e| io_error("create", &path, &e))?
        } else {
            let file = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| missing_upload(&path, id, &e))?;
            let len = file
                .metadata()
                .map_err(|e| io_error("stat", &path, &e))?
                .len();
            if len != offset {
                return Err(ServeError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "payload {}: piece at offset {offset}, but {len} bytes are uploaded",
                        id.object_name()
                    ),
                ));
            }
            file
        };
        file.write_all_at(bytes, offset)
            .map_err(|e| io_error("write", &path, &e))
    }

    /// Finish an upload: the staged bytes must match `reference`'s length
    /// and checksum; then they are made durable and stored in the filer at
    /// the payload's path. A mismatch deletes the staged file.
    pub(crate) fn commit(
        &self,
        topic: &TopicName,
        reference: &PayloadRef,
    ) -> Result<(), ServeError> {
        let id = &reference.id;
        let path = self.part_path(topic, id);
        let file = match File::open(&path) {
            Ok(f) => f,
            // An empty payload needs no piece.
            Err(e) if e.kind() == ErrorKind::NotFound && reference.length == 0 => {
                self.write(topic, id, 0, &[])?;
                File::open(&path).map_err(|e| io_error("open", &path, &e))?
            }
            Err(e) => return Err(missing_upload(&path, id, &e)),
        };
        let (len, checksum) = checksum_file(&file).map_err(|e| io_error("read", &path, &e))?;
        if len != reference.length || checksum != reference.checksum {
            let _ = std::fs::remove_file(&path);
            return Err(ServeError::new(
                ErrorCode::PayloadMismatch,
                format!(
                    "payload {}: uploaded {len} bytes with CRC-32C {checksum:08x}, \
                     the reference says {} bytes with {:08x}",
                    id.object_name(),
                    reference.length,
                    reference.checksum
                ),
            ));
        }
        // A staged file whose sync or hand-over failed is never synced
        // again (its pages may be gone while a second sync succeeds): it
        // is dropped, and the client uploads the payload anew.
        let drop_staged = |reason: String| {
            let _ = std::fs::remove_file(&path);
            ServeError::new(
                ErrorCode::Storage,
                format!("{reason}; the upload was dropped, upload the payload again"),
            )
        };
        file.sync_data()
            .map_err(|e| drop_staged(io_error("fdatasync", &path, &e).message))?;
        let object = control::filer_layout::payload(topic, id);
        self.filer
            .put_file(&object, &path, len)
            .map_err(|e| drop_staged(e.to_string()))
    }

    /// Up to `max_bytes` of a stored payload from `offset`, and its length.
    pub(crate) fn read(
        &self,
        topic: &TopicName,
        id: &PayloadId,
        offset: u64,
        max_bytes: usize,
    ) -> Result<(u64, Vec<u8>), ServeError> {
        let object = control::filer_layout::payload(topic, id);
        let length = self.filer.size(&object).map_err(|e| filer_error(&e, id))?;
        let want = length.saturating_sub(offset).min(max_bytes as u64) as usize;
        let mut buf = vec![0u8; want];
        // `read_at` is short only at the object's end (it shrank since
        // `size`): return what is there.
        let n = self
            .filer
            .read_at(&object, offset, &mut buf)
            .map_err(|e| filer_error(&e, id))?;
        buf.truncate(n);
        Ok((length, buf))
    }

    /// Delete staged uploads not written to for `grace`: their client gave
    /// up (or the broker restarted under it). Returns how many went.
    pub(crate) fn clean_staging(&self, grace: Duration) -> usize {
        let Some(cutoff) = SystemTime::now().checked_sub(grace) else {
            return 0;
        };
        let mut removed = 0;
        for namespace in read_dir(&self.staging) {
            for topic in read_dir(&namespace) {
                for part in read_dir(&topic) {
                    let stale = std::fs::metadata(&part)
                        .and_then(|m| m.modified())
                        .is_ok_and(|t| t < cutoff);
                    if stale && std::fs::remove_file(&part).is_ok() {
                        removed += 1;
                    }
                }
            }
        }
        removed
    }

    /// Delete every staged upload of a topic (it is being deleted).
    pub(crate) fn drop_topic(&self, topic: &TopicName) {
        let dir = self.staging.join(topic.namespace()).join(topic.name());
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != ErrorKind::NotFound {
                log::warn!("removing staged uploads in {}: {e}", dir.display());
            }
        }
    }
}

/// Length and CRC-32C of a whole file, read from its start.
fn checksum_file(file: &File) -> std::io::Result<(u64, u32)> {
    let mut buf = vec![0u8; CHECKSUM_READ_BYTES];
    let mut crc = 0u32;
    let mut at = 0u64;
    loop {
        let n = file.read_at(&mut buf, at)?;
        if n == 0 {
            return Ok((at, crc));
        }
        crc = wire::checksum::crc32c_append(crc, &buf[..n]);
        at += n as u64;
    }
}

fn read_dir(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default()
}

fn missing_upload(path: &Path, id: &PayloadId, e: &std::io::Error) -> ServeError {
    if e.kind() == ErrorKind::NotFound {
        ServeError::new(
            ErrorCode::PayloadNotFound,
            format!(
                "payload {}: no upload in progress (start it at offset 0)",
                id.object_name()
            ),
        )
    } else {
        io_error("open", path, e)
    }
}

fn filer_error(e: &FilerError, id: &PayloadId) -> ServeError {
    match e {
        FilerError::NotFound { .. } => ServeError::new(
            ErrorCode::PayloadNotFound,
            format!("payload {} is not stored", id.object_name()),
        ),
        other => ServeError::new(ErrorCode::Storage, other.to_string()),
    }
}

fn io_error(op: &str, path: &Path, e: &std::io::Error) -> ServeError {
    ServeError::new(
        ErrorCode::Storage,
        format!("payload staging: {op} {}: {e}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use filer::LocalFiler;

    fn store() -> (tempfile::TempDir, PayloadStore, Arc<LocalFiler>) {
        let dir = tempfile::tempdir().unwrap();
        let filer = Arc::new(LocalFiler::open(dir.path().join("filer")).unwrap());
        let store = PayloadStore::new(filer.clone(), dir.path());
        (dir, store, filer)
    }

    fn reference_of(bytes: &[u8], nonce: u128) -> PayloadRef {
        PayloadRef {
            id: PayloadId {
                created_ms: 1_000,
                nonce,
            },
            length: bytes.len() as u64,
            checksum: wire::checksum::crc32c(bytes),
        }
    }

    #[test]
    fn pieces_commit_and_read_back() {
        let (_dir, store, filer) = store();
        let topic = TopicName::parse("ns/t").unwrap();
        let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let r = reference_of(&payload, 1);
        for (i, piece) in payload.chunks(1 << 20).enumerate() {
            store.write(&topic, &r.id, (i << 20) as u64, piece).unwrap();
        }
        store.commit(&topic, &r).unwrap();
        let object = control::filer_layout::payload(&topic, &r.id);
        assert_eq!(filer.size(&object).unwrap(), payload.len() as u64);
        let (len, head) = store.read(&topic, &r.id, 0, 10).unwrap();
        assert_eq!((len, &head[..]), (payload.len() as u64, &payload[..10]));
        let (_, tail) = store.read(&topic, &r.id, 2_999_990, 100).unwrap();
        assert_eq!(&tail[..], &payload[2_999_990..]);
        let (_, past) = store.read(&topic, &r.id, 5_000_000, 100).unwrap();
        assert!(past.is_empty());
    }

    #[test]
    fn out_of_order_pieces_and_bad_commits_are_refused() {
        let (_dir, store, filer) = store();
        let topic = TopicName::parse("ns/t").unwrap();
        let r = reference_of(b"hello world", 2);
        let e = store.write(&topic, &r.id, 5, b"world").unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadNotFound);
        store.write(&topic, &r.id, 0, b"hello").unwrap();
        let e = store.write(&topic, &r.id, 9, b"x").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        store.write(&topic, &r.id, 5, b" world").unwrap();
        let mut wrong = r;
        wrong.checksum ^= 1;
        let e = store.commit(&topic, &wrong).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadMismatch);
        // The bad upload is gone; nothing reached the filer.
        let e = store.commit(&topic, &r).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadNotFound);
        assert!(filer
            .list(&control::filer_layout::topics())
            .unwrap()
            .is_empty());
        let e = store.read(&topic, &r.id, 0, 10).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadNotFound);
    }

    #[test]
    fn empty_payload_commits_without_pieces() {
        let (_dir, store, _filer) = store();
        let topic = TopicName::parse("ns/t").unwrap();
        let r = reference_of(b"", 3);
        store.commit(&topic, &r).unwrap();
        assert_eq!(store.read(&topic, &r.id, 0, 10).unwrap(), (0, vec![]));
    }

    #[test]
    fn stale_staging_files_are_cleaned() {
        let (_dir, store, _filer) = store();
        let topic = TopicName::parse("ns/t").unwrap();
        let r = reference_of(b"abandoned", 4);
        store.write(&topic, &r.id, 0, b"aban").unwrap();
        assert_eq!(store.clean_staging(Duration::from_secs(3600)), 0);
        assert_eq!(store.clean_staging(Duration::ZERO), 1);
        let e = store.commit(&topic, &r).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadNotFound);
    }
}
