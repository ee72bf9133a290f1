//! What the filer holds of a segment: its chunks by base offset (headers
//! verified, a damaged one kept aside with what can be said of it), its
//! lost ranges, and for a segment sealed elsewhere whether its seal marker
//! is there. Read on the shard's read lane; nothing here keeps state (a
//! caller hands in the chunks it knows, whose headers are not read again).

use filer::{Filer, ObjectPath};
use wire::chunk::{ChunkHeader, CHUNK_HEADER_BYTES};

use control::{filer_layout, TopicName};

use super::segment_log::{skip_lost, ChunkMeta};
use crate::error::EngineError;
use crate::recovery::{record_lost, LostRange};
use crate::shard_filer::ShardFiler;

/// verified) and its lost ranges by first offset.
#[derive(Debug, Default)]
pub(super) struct Stored {
    pub(super) chunks: Vec<ChunkMeta>,
    pub(super) lost: Vec<LostRange>,
    /// When the last chunk's header is damaged: the offsets after its last
    /// readable batch that it may have held (its end is not known). The
    /// owner records them as lost so none is handed out again.
    pub(super) unknown_tail: Option<LostRange>,
}

impl Stored {
    /// Record `lost` of segment `id` in the filer (no bytes of it are
    /// readable) and take it among the lost ranges, kept sorted.
    pub(super) async fn fence(
        &mut self,
        store: &ShardFiler,
        topic: &TopicName,
        id: u32,
        lost: LostRange,
        reason: &'static str,
    ) -> Result<(), EngineError> {
        let topic = topic.clone();
        store
            .upload(move |filer| record_lost(filer, &topic, id, lost, 0, reason))
            .await?;
        self.lost.push(lost);
        self.lost.sort_by_key(|l| l.from);
        Ok(())
    }

    /// One past the last offset the filer accounts for.
    pub(super) fn end(&self) -> u64 {
        let chunks = self.chunks.last().map_or(0, |c| c.header.next_offset);
        let lost = self.lost.iter().map(|l| l.to).max().unwrap_or(0);
        chunks.max(lost)
    }
}

/// Headers read at once, each on a thread of its own, when a segment's
/// listing names chunks whose headers are not known yet and the filer
/// keeps nothing local (a remote store answers each in a round trip).
const HEADER_READS_AT_ONCE: usize = 8;

/// Every chunk and lost range of a segment. The headers in `known`
/// (undamaged chunks' of this segment, sorted by base offset) are taken
/// for the chunks they name, not read again: a chunk's name is its base
/// offset, and chunks are never overwritten, so a header read once stays
/// true.
pub(super) fn load_stored(
    filer: &dyn Filer,
    prefix: &ObjectPath,
    known: &[ChunkHeader],
) -> Result<Stored, EngineError> {
    let mut stored = Stored::default();
    let mut unread = Vec::new();
    for path in filer.list(prefix)? {
        if let Some((from, to)) = filer_layout::parse_lost_name(path.as_str()) {
            stored.lost.push(LostRange { from, to });
            continue;
        }
        let Some(base) = filer_layout::parse_chunk_name(path.as_str()) else {
            continue;
        };
        match known.binary_search_by_key(&base, |h| h.base_offset) {
            Ok(i) => stored.chunks.push(ChunkMeta {
                path,
                header: known[i],
                damaged: None,
            }),
            Err(_) => unread.push((base, path)),
        }
    }
    let mut damaged = Vec::new();
    for ((base, path), header) in read_headers(filer, prefix, &unread)? {
        let header = header.and_then(|h| match h.base_offset == base {
            true => Ok(h),
            false => Err(format!("its header says base offset {}", h.base_offset)),
        });
        match header {
            Ok(header) => stored.chunks.push(ChunkMeta {
                path,
                header,
                damaged: None,
            }),
            // The segment still opens: only reads of this chunk's offsets
            // are affected.
            Err(reason) => damaged.push((base, path, reason)),
        }
    }
    let bases: Vec<u64> = stored
        .chunks
        .iter()
        .map(|c| c.header.base_offset)
        .chain(damaged.iter().map(|d| d.0))
        .collect();
    for (base, path, reason) in damaged {
        // It ends where the next chunk starts; the last one, where its
        // batches say (a scan of all of it).
        let next = bases.iter().copied().filter(|&b| b > base).min();
        let end = match next {
            Some(next) => next,
            None => {
                let len = filer.size(&path)?;
                let mut bytes = vec![0u8; len as usize];
                let mut done = 0;
                while done < bytes.len() {
                    match filer.read_at(&path, done as u64, &mut bytes[done..])? {
                        0 => break,
                        n => done += n,
                    }
                }
                let data = bytes.get(CHUNK_HEADER_BYTES..done).unwrap_or(&[]);
                let scan = crate::salvage::scan(data, base, None);
                let runs = scan.runs.last().map_or(base, |r| r.next_offset);
                let damage = scan.damage.last().map_or(base, |d| d.to_offset);
                let after_runs = scan.runs.last().map_or(0, |r| r.to);
                // The bytes after the last good batch are its index (its
                // own checksum says so) or damage.
                if damage > runs && !is_chunk_index(&data[after_runs..]) {
                    stored.unknown_tail = Some(LostRange {
                        from: runs,
                        to: damage,
                    });
                }
                runs
            }
        };
        log::error!(
            "chunk {path} is damaged ({reason}): reads of its offsets {base}..{end} verify \
             every batch, and a damaged one is answered Corrupt; every other chunk and \
             segment serves as before"
        );
        stored.chunks.push(ChunkMeta {
            path,
            header: ChunkHeader {
                segment_id: 0,
                base_offset: base,
                next_offset: end,
                data_bytes: 0,
                min_timestamp_ms: i64::MIN,
                max_timestamp_ms: i64::MIN,
                index_entries: 0,
                has_references: false,
            },
            damaged: Some(reason),
        });
    }
    stored.chunks.sort_by_key(|c| c.header.base_offset);
    stored.lost.sort_by_key(|l| l.from);
    // Chunks follow each other, or a lost range lies between them.
    for pair in stored.chunks.windows(2) {
        let (end, next) = (pair[0].header.next_offset, pair[1].header.base_offset);
        if skip_lost(&stored.lost, end) != next {
            log::warn!(
                "chunks {} and {} are not contiguous ({end} != {next}) and no lost range \
                 accounts for it",
                pair[0].path,
                pair[1].path,
            );
        }
    }
    Ok(stored)
}

/// A chunk (base offset, path) and its header, or why it does not decode.
type HeaderRead = ((u64, ObjectPath), Result<ChunkHeader, String>);

/// The header of each chunk of `chunks` (base offset, path), or why it
/// does not decode, in the same order; an I/O error fails the whole read.
/// A remote filer's headers are read by up to [`HEADER_READS_AT_ONCE`]
/// threads, each a contiguous share of the chunks.
fn read_headers(
    filer: &dyn Filer,
    prefix: &ObjectPath,
    chunks: &[(u64, ObjectPath)],
) -> Result<Vec<HeaderRead>, EngineError> {
    let read_all = |part: &[(u64, ObjectPath)]| -> Result<Vec<_>, EngineError> {
        part.iter()
            .map(|(_, path)| {
                let mut head = [0u8; CHUNK_HEADER_BYTES];
                let n = filer.read_at(path, 0, &mut head)?;
                Ok(ChunkHeader::decode(&head[..n]).map_err(|e| e.to_string()))
            })
            .collect()
    };
    let readers = match filer.keeps_local_files() {
        true => 1,
        false => HEADER_READS_AT_ONCE.min(chunks.len()),
    };
    let headers = if readers <= 1 {
        read_all(chunks)?
    } else {
        let read_all = &read_all;
        std::thread::scope(|scope| {
            let handles: Vec<_> = chunks
                .chunks(chunks.len().div_ceil(readers))
                .map(|part| scope.spawn(move || read_all(part)))
                .collect();
            let mut headers = Vec::with_capacity(chunks.len());
            for handle in handles {
                headers.extend(handle.join().unwrap_or_else(|_| {
                    Err(EngineError::Segment {
                        segment: prefix.to_string(),
                        reason: "a chunk header reader panicked".into(),
                    })
                })?);
            }
            Ok::<_, EngineError>(headers)
        })?
    };
    Ok(chunks.iter().cloned().zip(headers).collect())
}

/// Whether `bytes` are a whole chunk index: entries, then the CRC-32C of
/// their bytes (docs/chunk-format.md, "Sparse index").
fn is_chunk_index(bytes: &[u8]) -> bool {
    use wire::chunk::CHUNK_INDEX_ENTRY_BYTES;
    let Some(body) = bytes.len().checked_sub(4) else {
        return false;
    };
    body % CHUNK_INDEX_ENTRY_BYTES == 0
        && wire::checksum::crc32c(&bytes[..body]).to_le_bytes() == bytes[body..]
}

/// A sealed segment's chunks, and whether its seal marker is there.
pub(super) fn load_sealed(
    filer: &dyn Filer,
    prefix: &ObjectPath,
    marker: &ObjectPath,
    known: &[ChunkHeader],
) -> Result<(Stored, bool), EngineError> {
    // The marker first: chunks listed after it are all there are.
    let marked = match filer.read_at(marker, 0, &mut [0u8; 1]) {
        Ok(_) => true,
        Err(filer::FilerError::NotFound { .. }) => false,
        Err(e) => return Err(e.into()),
    };
    Ok((load_stored(filer, prefix, known)?, marked))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use wire::chunk::build_chunk;
    use wire::BatchBuilder;

    use super::*;

    /// Instrumentation, not a fault: the real local filer, counting the
    /// chunk header reads, and saying it keeps nothing local when
    /// `remote` (so headers are read as from a remote store, at once).
    #[derive(Debug)]
    struct CountedReads {
        inner: Arc<dyn Filer>,
        remote: bool,
        chunk_reads: AtomicUsize,
    }

    impl Filer for CountedReads {
        fn put(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), filer::FilerError> {
            self.inner.put(path, bytes)
        }
        fn create(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), filer::FilerError> {
            self.inner.create(path, bytes)
        }
        fn read_at(
            &self,
            path: &ObjectPath,
            offset: u64,
            buf: &mut [u8],
        ) -> Result<usize, filer::FilerError> {
            if path.as_str().ends_with(".chunk") {
                self.chunk_reads.fetch_add(1, Ordering::Relaxed);
            }
            self.inner.read_at(path, offset, buf)
        }
        fn size(&self, path: &ObjectPath) -> Result<u64, filer::FilerError> {
            self.inner.size(path)
        }
        fn list(&self, prefix: &ObjectPath) -> Result<Vec<ObjectPath>, filer::FilerError> {
            self.inner.list(prefix)
        }
        fn delete(&self, path: &ObjectPath) -> Result<(), filer::FilerError> {
            self.inner.delete(path)
        }
        fn local_file(&self, path: &ObjectPath) -> Option<std::path::PathBuf> {
            self.inner.local_file(path)
        }
        fn keeps_local_files(&self) -> bool {
            !self.remote
        }
    }

    /// `chunks` chunks of one record each from offset `from`, in segment 0
    /// of topic `t/s`.
    fn write_chunks(filer: &dyn Filer, from: u64, chunks: u64) {
        for c in from..from + chunks {
            let mut b = BatchBuilder::new();
            b.push(1, b"k", format!("v{c}").as_bytes(), &[]).unwrap();
            let mut batch = b.finish(0, 0).to_vec();
            wire::batch::set_base_offset(&mut batch, c);
            let bytes = build_chunk(0, c, &[&batch]).unwrap();
            let topic = TopicName::parse("t/s").unwrap();
            filer
                .create(&filer_layout::chunk(&topic, 0, c), &bytes)
                .unwrap();
        }
    }

    #[test]
    fn headers_read_at_once_come_back_in_order_and_known_ones_are_not_read_again() {
        for remote in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let filer = CountedReads {
                inner: Arc::new(filer::LocalFiler::open(dir.path()).unwrap()),
                remote,
                chunk_reads: AtomicUsize::new(0),
            };
            let prefix = filer_layout::segment_prefix(&TopicName::parse("t/s").unwrap(), 0);
            write_chunks(&filer, 0, 21);
            let first = load_stored(&filer, &prefix, &[]).unwrap();
            let bases: Vec<(u64, u64)> = first
                .chunks
                .iter()
                .map(|c| (c.header.base_offset, c.header.next_offset))
                .collect();
            let expected: Vec<(u64, u64)> = (0..21).map(|c| (c, c + 1)).collect();
            assert_eq!(bases, expected, "remote {remote}");
            assert!(first.chunks.iter().all(|c| c.damaged.is_none()));
            assert_eq!(filer.chunk_reads.swap(0, Ordering::Relaxed), 21);

            // Listed again with what is known: only the new chunks' headers.
            write_chunks(&filer, 21, 2);
            let known: Vec<ChunkHeader> = first.chunks.iter().map(|c| c.header).collect();
            let again = load_stored(&filer, &prefix, &known).unwrap();
            assert_eq!(again.chunks.len(), 23);
            assert_eq!(again.chunks[22].header.next_offset, 23);
            assert_eq!(
                filer.chunk_reads.load(Ordering::Relaxed),
                2,
                "remote {remote}"
            );
        }
    }
}
