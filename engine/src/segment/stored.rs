//! What the filer holds of a segment: its chunks by base offset (headers
//! verified, a damaged one kept aside with what can be said of it), its
//! lost ranges, and for a segment sealed elsewhere whether its seal marker
//! is there. Read on the shard's read lane; nothing here keeps state.

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

/// Every chunk and lost range of a segment.
pub(super) fn load_stored(filer: &dyn Filer, prefix: &ObjectPath) -> Result<Stored, EngineError> {
    let mut stored = Stored::default();
    let mut damaged = Vec::new();
    for path in filer.list(prefix)? {
        if let Some((from, to)) = filer_layout::parse_lost_name(path.as_str()) {
            stored.lost.push(LostRange { from, to });
            continue;
        }
        let Some(base) = filer_layout::parse_chunk_name(path.as_str()) else {
            continue;
        };
        let mut head = [0u8; CHUNK_HEADER_BYTES];
        let n = filer.read_at(&path, 0, &mut head)?;
        let header = ChunkHeader::decode(&head[..n])
            .map_err(|e| e.to_string())
            .and_then(|h| match h.base_offset == base {
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
) -> Result<(Stored, bool), EngineError> {
    // The marker first: chunks listed after it are all there are.
    let marked = match filer.read_at(marker, 0, &mut [0u8; 1]) {
        Ok(_) => true,
        Err(filer::FilerError::NotFound { .. }) => false,
        Err(e) => return Err(e.into()),
    };
    Ok((load_stored(filer, prefix)?, marked))
}
