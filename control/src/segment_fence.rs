//! The fence a segment gets when its owner is gone: the control plane
//! seals it in the filer at the end of what the filer holds, so that the
//! owner, if it was only frozen and comes back (a *zombie*), can neither
//! store nor make visible a record past that end.
//!
//! Chunks of a segment are created, never overwritten, and follow each
//! other in offset order: an owner stores the chunk at base offset `b`
//! before the one after it, and each starts where the one before ended.
//! The next chunk's path is therefore known to everyone. The fence takes
//! it: an *empty chunk* (a valid chunk header, no batches, next offset
//! equal to its base) is created at the stored end `E`. A zombie owner
//! that later tries to store its chunk at `E` finds the fence there with
//! other bytes, and its flusher stops for good (nothing from `E` on is
//! acknowledged as durable or made visible). If the owner stored its
//! chunk at `E` first, the create fails instead and the fence moves past
//! that chunk, as often as the owner managed to store one, up to a bound.
//! Exactly one of the two wins each path, on the local filer (`link(2)`)
//! as on S3 (`If-None-Match: *`).
//!
//! Then the seal marker is created with the seal point in it. Readers of
//! the segment anywhere see the fence as a chunk of no records and stop at
//! its end.

use filer::{Filer, FilerError};
use wire::chunk::{build_chunk, ChunkHeader, CHUNK_HEADER_BYTES};

use crate::error::ControlError;
use crate::{filer_layout, TopicName};

/// How many chunks others (a zombie owner, another sealer) may store under
/// the fence's feet before the fence gives up for this round (it is tried
/// again on the next tick). An owner stores one chunk per flush, at most a
/// few per second.
pub const FENCE_ATTEMPTS_MAX: u32 = 64;

/// What [`fence_segment`] found or did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// The fence and the marker were written: the segment ends at this
    /// offset.
    At(u64),
    /// A seal marker was there already: the owner (or an earlier attempt)
    /// sealed it first.
    AlreadySealed,
}

/// Records a survivor holds of a segment whose owner is gone, stored
/// before the fence is placed: a follower's copy (the engine's
/// `replica`). Every holder of a segment's records holds the same record
/// at the same offset (they all copy one owner), so chunks from any of
/// them follow each other in the filer whoever stored which.
pub trait HeldRecords {
    /// A chunk (docs/chunk-format.md) of held records whose first batch
    /// starts exactly at `offset`, or `None` if no held batch starts there.
    fn chunk_from(&mut self, offset: u64) -> Option<HeldChunk>;
}

/// One chunk of [`HeldRecords`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldChunk {
    /// The whole chunk file.
    pub bytes: Vec<u8>,
    /// One past its last record (more than the offset it was asked from).
    pub next_offset: u64,
}

/// Holds nothing: the control plane's own fence, or a follower's that
/// lost its copy.
#[derive(Debug, Clone, Copy, Default)]
pub struct NothingHeld;

impl HeldRecords for NothingHeld {
    fn chunk_from(&mut self, _offset: u64) -> Option<HeldChunk> {
        None
    }
}

/// Seal `segment` of `topic` in the filer at the end of its stored chunks
/// and lost ranges: create the fence chunk there, then the seal marker
/// (written by `written_by`, at seal epoch `epoch`). See the module doc.
pub fn fence_segment(
    filer: &dyn Filer,
    topic: &TopicName,
    segment: u32,
    epoch: u32,
    written_by: &str,
) -> Result<Fenced, ControlError> {
    seal_from_copy(filer, topic, segment, epoch, written_by, &mut NothingHeld).map(|(f, _)| f)
}

/// [`fence_segment`] by a survivor holding records of the segment: first
/// store, as chunks, what `held` has from the filer's end on (each chunk
/// created only if its path is free, as an owner's are), then fence the
/// end and write the marker. Also returns how many records it stored.
///
/// A chunk someone else stored first at the path wanted (the zombie owner,
/// or the control plane's fence) is taken as it is: the next chunk starts
/// where it ends, and an empty one (a fence) ends the segment there.
pub fn seal_from_copy(
    filer: &dyn Filer,
    topic: &TopicName,
    segment: u32,
    epoch: u32,
    written_by: &str,
    held: &mut dyn HeldRecords,
) -> Result<(Fenced, u64), ControlError> {
    let marker = filer_layout::seal_marker(topic, segment);
    if exists(filer, &marker)? {
        return Ok((Fenced::AlreadySealed, 0));
    }
    let mut end = stored_end(filer, topic, segment)?;
    let mut stored = 0u64;
    let mut conflicts = 0;
    loop {
        let path = filer_layout::chunk(topic, segment, end);
        let held = held.chunk_from(end).filter(|c| c.next_offset > end);
        let bytes = match &held {
            Some(chunk) => chunk.bytes.clone(),
            None => {
                build_chunk(segment, end, &[]).map_err(|e| fence_error(segment, e.to_string()))?
            }
        };
        match filer.create(&path, &bytes) {
            Ok(()) => match held {
                Some(chunk) => {
                    stored += chunk.next_offset - end;
                    end = chunk.next_offset;
                }
                None => break,
            },
            Err(e) if e.is_already_exists() => {
                let header = chunk_header(filer, &path)
                    .map_err(|reason| fence_error(segment, format!("chunk {path}: {reason}")))?;
                if header.next_offset == end {
                    // A fence (an earlier attempt's, whose marker write
                    // failed, or another sealer's): it stands.
                    break;
                }
                end = header.next_offset;
                conflicts += 1;
                if conflicts >= FENCE_ATTEMPTS_MAX {
                    return Err(fence_error(
                        segment,
                        format!(
                            "others stored {conflicts} chunks while the fence was being \
                             placed; trying again later"
                        ),
                    ));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    if !filer_layout::create_seal_marker(filer, topic, segment, epoch, end, written_by)? {
        return Ok((Fenced::AlreadySealed, stored));
    }
    Ok((Fenced::At(end), stored))
}

fn fence_error(segment: u32, reason: String) -> ControlError {
    ControlError::Fence { segment, reason }
}

fn exists(filer: &dyn Filer, path: &filer::ObjectPath) -> Result<bool, FilerError> {
    match filer.size(path) {
        Ok(_) => Ok(true),
        Err(FilerError::NotFound { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// One past the last offset the filer holds of the segment: the larger of
/// its last chunk's next offset and its lost ranges' ends (0 if none).
fn stored_end(filer: &dyn Filer, topic: &TopicName, segment: u32) -> Result<u64, ControlError> {
    let mut last_chunk: Option<(u64, filer::ObjectPath)> = None;
    let mut end = 0u64;
    for path in filer.list(&filer_layout::segment_prefix(topic, segment))? {
        if let Some((_, to)) = filer_layout::parse_lost_name(path.as_str()) {
            end = end.max(to);
        } else if let Some(base) = filer_layout::parse_chunk_name(path.as_str()) {
            if last_chunk.as_ref().is_none_or(|(b, _)| base > *b) {
                last_chunk = Some((base, path));
            }
        }
    }
    if let Some((_, path)) = last_chunk {
        let header = chunk_header(filer, &path)
            .map_err(|reason| fence_error(segment, format!("chunk {path}: {reason}")))?;
        end = end.max(header.next_offset);
    }
    Ok(end)
}

/// The verified header of the chunk at `path`, whose name states its base
/// offset.
fn chunk_header(filer: &dyn Filer, path: &filer::ObjectPath) -> Result<ChunkHeader, String> {
    let mut head = [0u8; CHUNK_HEADER_BYTES];
    let mut read = 0;
    while read < head.len() {
        match filer.read_at(path, read as u64, &mut head[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) => return Err(e.to_string()),
        }
    }
    let header = ChunkHeader::decode(&head[..read])
        .map_err(|e| format!("its header cannot be read ({e}): no seal point can be chosen"))?;
    match filer_layout::parse_chunk_name(path.as_str()) {
        Some(base) if base == header.base_offset => Ok(header),
        _ => Err(format!(
            "its header says base offset {}, not the one its name states",
            header.base_offset
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use filer::LocalFiler;
    use wire::batch::{set_base_offset, BatchBuilder};

    fn topic() -> TopicName {
        TopicName::parse("fence/test").unwrap()
    }

    /// A chunk of `records` one-record batches from `base`.
    fn chunk(base: u64, records: u64) -> Vec<u8> {
        let batches: Vec<Vec<u8>> = (0..records)
            .map(|i| {
                let mut b = BatchBuilder::new();
                b.push(0, b"k", b"v", &[]).unwrap();
                let mut bytes = b.finish(0, 0).to_vec();
                set_base_offset(&mut bytes, base + i);
                bytes
            })
            .collect();
        let refs: Vec<&[u8]> = batches.iter().map(Vec::as_slice).collect();
        build_chunk(7, base, &refs).unwrap()
    }

    /// The filer at `root`, where another writer creates `bytes` at `path`
    /// just before the first create made through it reaches the filer.
    fn stored_first(
        root: &std::path::Path,
        path: filer::ObjectPath,
        bytes: Vec<u8>,
    ) -> crate::test_filer::HookedCreates {
        let first = std::sync::Mutex::new(Some((path, bytes)));
        crate::test_filer::HookedCreates::new(
            root,
            Box::new(move |inner, _| match first.lock().unwrap().take() {
                Some((path, bytes)) => inner.create(&path, &bytes),
                None => Ok(()),
            }),
        )
    }

    fn header_at(filer: &LocalFiler, base: u64) -> ChunkHeader {
        chunk_header(filer, &filer_layout::chunk(&topic(), 7, base)).unwrap()
    }

    #[test]
    fn the_fence_sits_at_the_end_of_the_stored_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let filer = LocalFiler::open(dir.path()).unwrap();
        let t = topic();
        filer
            .create(&filer_layout::chunk(&t, 7, 0), &chunk(0, 3))
            .unwrap();
        filer
            .create(&filer_layout::chunk(&t, 7, 3), &chunk(3, 2))
            .unwrap();
        assert_eq!(
            fence_segment(&filer, &t, 7, 2, "control").unwrap(),
            Fenced::At(5)
        );
        let fence = header_at(&filer, 5);
        assert_eq!(
            (fence.base_offset, fence.next_offset, fence.data_bytes),
            (5, 5, 0)
        );
        let mut marker = vec![0u8; 256];
        let n = filer
            .read_at(&filer_layout::seal_marker(&t, 7), 0, &mut marker)
            .unwrap();
        assert_eq!(
            std::str::from_utf8(&marker[..n]).unwrap(),
            r#"{"segment":7,"epoch":2,"end":5,"written_by":"control"}"#
        );
        // A zombie owner's next chunk cannot be stored.
        let err = filer
            .create(&filer_layout::chunk(&t, 7, 5), &chunk(5, 1))
            .unwrap_err();
        assert!(err.is_already_exists(), "{err}");
        // A second call finds the marker and changes nothing.
        assert_eq!(
            fence_segment(&filer, &t, 7, 2, "control").unwrap(),
            Fenced::AlreadySealed
        );
    }

    #[test]
    fn an_empty_segment_is_fenced_at_zero_and_lost_ranges_count() {
        let dir = tempfile::tempdir().unwrap();
        let filer = LocalFiler::open(dir.path()).unwrap();
        let t = topic();
        assert_eq!(
            fence_segment(&filer, &t, 7, 1, "control").unwrap(),
            Fenced::At(0)
        );

        let t2 = TopicName::parse("fence/lost").unwrap();
        filer
            .create(&filer_layout::chunk(&t2, 7, 0), &chunk(0, 2))
            .unwrap();
        filer
            .put(&filer_layout::lost_range(&t2, 7, 2, 9), b"{}")
            .unwrap();
        assert_eq!(
            fence_segment(&filer, &t2, 7, 1, "control").unwrap(),
            Fenced::At(9)
        );
    }

    #[test]
    fn a_chunk_the_owner_stored_first_moves_the_fence_past_it() {
        // The owner's chunk at 4 lands between the listing and the create:
        // seen here as a chunk already at the path the fence wants.
        let dir = tempfile::tempdir().unwrap();
        let filer = LocalFiler::open(dir.path()).unwrap();
        let t = topic();
        filer
            .create(&filer_layout::chunk(&t, 7, 0), &chunk(0, 4))
            .unwrap();
        // The owner stores its chunk just before the fence's first create
        // reaches the filer.
        let racing = stored_first(dir.path(), filer_layout::chunk(&t, 7, 4), chunk(4, 3));
        assert_eq!(
            fence_segment(&racing, &t, 7, 3, "control").unwrap(),
            Fenced::At(7)
        );
        assert_eq!(header_at(&filer, 4).next_offset, 7);
        assert_eq!(header_at(&filer, 7).next_offset, 7);
    }

    #[test]
    fn a_fence_left_without_its_marker_stands() {
        let dir = tempfile::tempdir().unwrap();
        let filer = LocalFiler::open(dir.path()).unwrap();
        let t = topic();
        filer
            .create(&filer_layout::chunk(&t, 7, 0), &chunk(0, 2))
            .unwrap();
        filer
            .create(
                &filer_layout::chunk(&t, 7, 2),
                &build_chunk(7, 2, &[]).unwrap(),
            )
            .unwrap();
        assert_eq!(
            fence_segment(&filer, &t, 7, 1, "control").unwrap(),
            Fenced::At(2)
        );
    }

    /// One-record batches at `from..to`, handed out three to a chunk.
    struct Held {
        from: u64,
        to: u64,
    }

    impl HeldRecords for Held {
        fn chunk_from(&mut self, offset: u64) -> Option<HeldChunk> {
            if offset < self.from || offset >= self.to {
                return None;
            }
            let next_offset = (offset + 3).min(self.to);
            Some(HeldChunk {
                bytes: chunk(offset, next_offset - offset),
                next_offset,
            })
        }
    }

    #[test]
    fn a_survivor_stores_what_it_holds_past_the_stored_end_then_fences() {
        let dir = tempfile::tempdir().unwrap();
        let filer = LocalFiler::open(dir.path()).unwrap();
        let t = topic();
        filer
            .create(&filer_layout::chunk(&t, 7, 0), &chunk(0, 4))
            .unwrap();
        // It holds 2..9: what the filer has (below 4) is not stored again.
        let mut held = Held { from: 2, to: 9 };
        assert_eq!(
            seal_from_copy(&filer, &t, 7, 3, "broker 2 (follower)", &mut held).unwrap(),
            (Fenced::At(9), 5)
        );
        assert_eq!(header_at(&filer, 4).next_offset, 7);
        assert_eq!(header_at(&filer, 7).next_offset, 9);
        let fence = header_at(&filer, 9);
        assert_eq!((fence.next_offset, fence.data_bytes), (9, 0));
        // A second sealer finds the marker and stores nothing.
        let mut again = Held { from: 0, to: 12 };
        assert_eq!(
            seal_from_copy(&filer, &t, 7, 3, "control", &mut again).unwrap(),
            (Fenced::AlreadySealed, 0)
        );
    }

    #[test]
    fn a_survivor_takes_a_chunk_stored_under_its_feet_and_continues_after_it() {
        // The zombie owner stores its chunk at 4 (to 6) just before the
        // survivor's first create reaches the filer: the survivor goes on
        // from 6 with what it holds.
        let dir = tempfile::tempdir().unwrap();
        let filer = LocalFiler::open(dir.path()).unwrap();
        let t = topic();
        filer
            .create(&filer_layout::chunk(&t, 7, 0), &chunk(0, 4))
            .unwrap();
        let racing = stored_first(dir.path(), filer_layout::chunk(&t, 7, 4), chunk(4, 2));
        let mut held = Held { from: 0, to: 8 };
        assert_eq!(
            seal_from_copy(&racing, &t, 7, 3, "broker 2 (follower)", &mut held).unwrap(),
            (Fenced::At(8), 2)
        );
        assert_eq!(header_at(&filer, 4).next_offset, 6, "the owner's chunk");
        assert_eq!(header_at(&filer, 6).next_offset, 8, "the survivor's");
        assert_eq!(header_at(&filer, 8).next_offset, 8, "the fence");

        // A fence already there (the control plane gave up waiting): the
        // survivor stores nothing past it.
        let t2 = TopicName::parse("fence/fenced").unwrap();
        filer
            .create(&filer_layout::chunk(&t2, 7, 0), &chunk(0, 2))
            .unwrap();
        filer
            .create(
                &filer_layout::chunk(&t2, 7, 2),
                &build_chunk(7, 2, &[]).unwrap(),
            )
            .unwrap();
        let mut held = Held { from: 0, to: 8 };
        assert_eq!(
            seal_from_copy(&filer, &t2, 7, 3, "broker 2 (follower)", &mut held).unwrap(),
            (Fenced::At(2), 0)
        );
    }

    #[test]
    fn a_damaged_last_chunk_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let filer = LocalFiler::open(dir.path()).unwrap();
        let t = topic();
        let mut bad = chunk(0, 2);
        bad[20] ^= 0xff;
        filer.create(&filer_layout::chunk(&t, 7, 0), &bad).unwrap();
        let err = fence_segment(&filer, &t, 7, 1, "control")
            .unwrap_err()
            .to_string();
        assert!(err.contains("00000000000000000000.chunk"), "{err}");
        assert!(err.contains("no seal point"), "{err}");
    }
}
