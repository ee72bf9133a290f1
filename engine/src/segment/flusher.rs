//! The flusher of an owned segment: stores its sealed buffers in the filer
//! as chunks, oldest first, one at a time, as the segment's log hands them
//! out ([`SegmentLog::poll_flush`](super::segment_log::SegmentLog::poll_flush)).
//!
//! A filer that stops answering holds producers back (the flusher retries
//! with backoff); it loses nothing. A buffer whose hand-over failed is never
//! synced again: after a failed `fdatasync` Linux may have dropped its dirty
//! pages and cleared the error, so a second sync could succeed with the
//! bytes gone. Its bytes are read back once, verified against their
//! checksums, and stored from memory into a new object from then on; bytes
//! that no longer verify were lost, and the segment fails. Nothing is ever
//! acknowledged as durable for bytes whose write failed: the log's flushed
//! offset moves only when a store succeeds.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use filer::{Filer, FilerError, ObjectPath};
use wire::chunk::{ChunkHeader, ChunkView, CHUNK_HEADER_BYTES};

use control::filer_layout;

use super::{blocking, SegmentCell};
use crate::buffer::MappedFile;

/// Sealed buffers behind the one being flushed whose write-back the flusher
/// starts (`sync_file_range`) before it syncs the front one.
const WRITEBACK_AHEAD_BUFFERS: usize = 4;

/// The flusher's wait after a failed store, doubled up to the maximum.
const FLUSH_BACKOFF_MIN: Duration = Duration::from_millis(50);
const FLUSH_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Why a chunk was not stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
enum FlushError {
    /// The filer failed: try again (from memory, if it was the file's
    /// hand-over that failed).
    #[error(transparent)]
    Filer(#[from] FilerError),
    /// The chunk was stored before, but the buffer file could not be
    /// removed: try again.
    #[error("remove {}: {source}", path.display())]
    RemoveBuffer {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Another writer's chunk is at the path: never try again.
    #[error(
        "chunk {path} exists with other bytes: another writer stored this segment's offsets; \
         this broker's are fenced off"
    )]
    Fenced { path: ObjectPath },
}

/// Whether the object at `path` holds exactly `expected`.
fn holds_exactly(
    filer: &dyn Filer,
    path: &ObjectPath,
    expected: &[u8],
) -> Result<bool, FilerError> {
    if filer.size(path)? != expected.len() as u64 {
        return Ok(false);
    }
    let mut stored = vec![0u8; expected.len()];
    let mut at = 0;
    while at < stored.len() {
        let n = filer.read_at(path, at as u64, &mut stored[at..])?;
        if n == 0 {
            return Ok(false);
        }
        at += n;
    }
    Ok(stored == expected)
}

/// A buffer whose chunk was found stored already: its file goes, as the
/// hand-over would have taken it.
fn remove_stored_buffer(local: &Path) -> Result<(), FlushError> {
    match std::fs::remove_file(local) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(FlushError::RemoveBuffer {
            path: local.to_path_buf(),
            source,
        }),
    }
}

/// A copy of a sealed buffer's chunk bytes, if they still verify as the
/// chunk the buffer sealed (header, every batch's checksum, the index).
/// The copy is checked, not the mapping: pages the kernel dropped could
/// read back differently a moment later.
fn verified_chunk_copy(bytes: &[u8]) -> Result<Vec<u8>, wire::DecodeError> {
    let copy = bytes.to_vec();
    ChunkView::open(&copy)?;
    Ok(copy)
}

/// Whether the chunk header at the start of a sealed buffer's mapping is
/// still the one it was sealed with: checked before every hand-over, so a
/// file that changed under the broker is never stored as a chunk.
fn header_holds(chunk: &[u8], sealed: &ChunkHeader) -> bool {
    chunk
        .get(..CHUNK_HEADER_BYTES)
        .is_some_and(|bytes| ChunkHeader::decode(bytes).is_ok_and(|h| h == *sealed))
}

/// Store `cell`'s sealed buffers until none waits, the segment closes or
/// it fails; the caller claimed the flusher in the log.
pub(super) async fn run(cell: Rc<SegmentCell>) {
    let core = &cell.core;
    let mut backoff = FLUSH_BACKOFF_MIN;
    // The front buffer's chunk bytes once its file is no longer trusted
    // (the front changes only when it is stored, which clears this).
    let mut held: Option<Arc<Vec<u8>>> = None;
    // Failed attempts to store the front buffer.
    let mut failures = 0u64;
    loop {
        if core.is_closed() {
            break;
        }
        let Some(buffer) = core.state.borrow().log.poll_flush() else {
            break;
        };
        let header = *buffer.header();
        let base_offset = header.base_offset;
        let path = filer_layout::chunk(&core.topic, core.id, base_offset);
        if held.is_none() && !header_holds(buffer.chunk_bytes(), &header) {
            cell.fail(format!(
                "chunk {path}: the header of buffer {} no longer matches what was sealed; \
                 offsets {base_offset}..{} are not stored",
                buffer.path().display(),
                header.next_offset
            ));
            break;
        }
        let rewrite = held.clone();
        let rewriting = rewrite.is_some();
        let job_buffer = buffer.clone();
        let job_path = path.clone();
        let behind: Vec<Arc<MappedFile>> = core
            .state
            .borrow()
            .log
            .sealed()
            .skip(1)
            .take(WRITEBACK_AHEAD_BUFFERS)
            .map(|b| Arc::clone(b.mapped()))
            .collect();
        let started = Instant::now();
        let result = core
            .store
            .upload(move |filer| {
                // Start the disk on the buffers behind this one, so their
                // own syncs find most pages written and the disk never
                // idles between two flushes.
                for mapped in &behind {
                    mapped.start_writeback(0, 0);
                }
                let stored = match &rewrite {
                    Some(bytes) => filer.create(&job_path, bytes),
                    // The sealed mapping is the chunk: the filer takes the
                    // file itself (the local filer links it into place, S3
                    // uploads from the mapping; no copy).
                    None => filer.put_file(
                        &job_path,
                        job_buffer.path(),
                        job_buffer.header().file_bytes(),
                    ),
                };
                match stored {
                    // Chunks are created, never overwritten. One already
                    // there is this buffer's own when a put was retried
                    // after its answer was lost, or a crash came between
                    // storing the chunk and removing the buffer: then it
                    // holds the same bytes.
                    Err(e) if e.is_already_exists() => {
                        let ours = rewrite.as_deref().map_or(job_buffer.chunk_bytes(), |b| b);
                        if holds_exactly(filer, &job_path, ours)? {
                            remove_stored_buffer(job_buffer.path())
                        } else {
                            Err(FlushError::Fenced { path: job_path })
                        }
                    }
                    other => Ok(other?),
                }
            })
            .await;
        let metrics = &core.store.metrics;
        match &result {
            Ok(()) => {
                metrics.flush.observe(started.elapsed());
                metrics.flushes.add(1);
                metrics.flushed_bytes.add(header.file_bytes());
            }
            Err(_) => metrics.flush_errors.add(1),
        }
        match result {
            Ok(()) => {
                backoff = FLUSH_BACKOFF_MIN;
                if failures > 0 {
                    if let Some(held_back) = core.store.admit_flush_resume(Instant::now()) {
                        log::info!(
                            "segment {}: chunk {path} stored after {failures} failed \
                             attempts; flushing resumed{}",
                            core.chunk_prefix,
                            held_back_note(held_back, "segments resumed flushing")
                        );
                    }
                    failures = 0;
                }
                if rewriting {
                    held = None;
                    // The untrusted file, if the failed hand-over left
                    // it in the buffers dir: recovery must not find it.
                    let local = buffer.path().to_path_buf();
                    blocking(move || match std::fs::remove_file(&local) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => log::warn!("remove {}: {e}", local.display()),
                    })
                    .await;
                }
                let mut state = core.state.borrow_mut();
                let active_empty = state.active.as_ref().is_none_or(|a| a.is_empty());
                state.log.handle_flushed(path, active_empty);
                drop(state);
                cell.flushed.notify(usize::MAX);
                cell.space.notify(usize::MAX);
                continue;
            }
            Err(FlushError::Fenced { path }) => {
                log::warn!(
                    "segment {}: chunk {path} exists with other bytes",
                    core.chunk_prefix
                );
                cell.fence(base_offset);
                break;
            }
            Err(e) if !rewriting => {
                failures += 1;
                if let Some(held_back) = core.store.admit_flush_error(Instant::now()) {
                    log::error!(
                        "segment {}: storing chunk {path} from {} failed: {e}; the file is \
                         not trusted again, its bytes are verified and stored from memory{}",
                        core.chunk_prefix,
                        buffer.path().display(),
                        held_back_note(held_back, "failed flush attempts")
                    );
                }
                let check = buffer.clone();
                match blocking(move || verified_chunk_copy(check.chunk_bytes())).await {
                    Ok(bytes) => held = Some(Arc::new(bytes)),
                    Err(reason) => {
                        cell.fail(format!(
                            "chunk {path}: its bytes were lost after a failed write \
                             ({reason}); offsets {base_offset}..{} are not stored",
                            header.next_offset
                        ));
                        break;
                    }
                }
            }
            Err(e) => {
                failures += 1;
                if let Some(held_back) = core.store.admit_flush_error(Instant::now()) {
                    log::error!(
                        "segment {}: storing chunk {path} from memory failed ({failures} \
                         attempts so far), retrying in {backoff:?}: {e}{}",
                        core.chunk_prefix,
                        held_back_note(held_back, "failed flush attempts")
                    );
                }
            }
        }
        glommio::timer::sleep(backoff).await;
        backoff = (backoff * 2).min(FLUSH_BACKOFF_MAX);
    }
    core.state.borrow_mut().log.handle_flusher_stopped();
}

/// What a rate-limited flush message adds: how many like it were held
/// back since the shard's last one.
fn held_back_note(held_back: u64, what: &str) -> String {
    if held_back == 0 {
        String::new()
    } else {
        format!(
            " (and {held_back} more {what} on this shard since the last report; reported once \
             per {:?})",
            crate::shard_filer::FLUSH_ERROR_LOG_INTERVAL
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A stored chunk's buffer file that is already gone is fine; one that
    /// cannot be removed is a failure naming the file, to try again.
    #[test]
    fn a_stored_buffer_that_cannot_be_removed_is_named() {
        let dir = tempfile::tempdir().unwrap();
        remove_stored_buffer(&dir.path().join("gone.buf")).unwrap();
        let err = remove_stored_buffer(dir.path()).unwrap_err();
        assert!(
            matches!(&err, FlushError::RemoveBuffer { path, .. } if path == dir.path()),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("remove {}: ", dir.path().display())),
            "{err}"
        );
        let fenced = FlushError::Fenced {
            path: ObjectPath::new("topics/ns/t/0/00000000000000000000.chunk").unwrap(),
        };
        assert_eq!(
            fenced.to_string(),
            "chunk topics/ns/t/0/00000000000000000000.chunk exists with other bytes: another \
             writer stored this segment's offsets; this broker's are fenced off"
        );
        assert_eq!(
            verified_chunk_copy(b"not a chunk").unwrap_err(),
            ChunkView::open(b"not a chunk").unwrap_err()
        );
    }

    /// The pair check before a hand-over: a sealed buffer's header is
    /// stored only while its bytes still decode to the header it was
    /// sealed with.
    #[test]
    fn a_changed_header_is_never_handed_over() {
        let header = ChunkHeader {
            segment_id: 3,
            base_offset: 10,
            next_offset: 12,
            data_bytes: 0,
            min_timestamp_ms: 0,
            max_timestamp_ms: 0,
            index_entries: 0,
            has_references: false,
        };
        let mut bytes = header.encode().to_vec();
        assert!(header_holds(&bytes, &header));
        let other = ChunkHeader {
            next_offset: 13,
            ..header
        };
        assert!(!header_holds(&bytes, &other), "a different header");
        bytes[9] ^= 1;
        assert!(
            !header_holds(&bytes, &header),
            "a flipped bit fails the checksum"
        );
        assert!(!header_holds(&bytes[..10], &header), "a short file");
    }
}
