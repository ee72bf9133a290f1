//! Reads of a segment, owned or a view: from the buffers still in memory,
//! from chunk files the local filer keeps (left in the file, sent with
//! `sendfile`), and from chunks in the filer (read into the answer). A read
//! that asks for verification, or that meets a chunk whose header is
//! damaged, scans the chunk's batches first and answers a damaged stretch
//! `Corrupt` (or skips it, when asked), never with bytes that fail their
//! checksum.
//!
//! Batch headers are bounds-checked before any is trusted: bytes from a
//! chunk are the filer's, not this broker's. Every answer carries the
//! CRC-32C of its bytes as their stored checksums state it, which the
//! reader compares with what it receives (the read side of the pair whose
//! write side is the flusher's check before each hand-over).

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use filer::ObjectPath;
use wire::batch::{BatchHead, BatchView};
use wire::checksum::{crc32c_append, crc32c_combine, COMBINE_MIN_BYTES};
use wire::chunk::{
    decode_index, seek_offset, seek_timestamp, BatchWalk, ChunkHeader, ChunkIndexEntry,
    CHUNK_HEADER_BYTES,
};
use wire::message::FETCHED_FRAME_PREFIX_BYTES;
use wire::{ErrorCode, FetchChecks, FetchFrom};

use control::filer_layout;

use super::segment_log::ChunkMeta;
use super::stored::load_sealed;
use super::{blocking, SealState, SegmentCore, SegmentState};
use crate::buffer::MappedFile;
use crate::file_range::{FileRange, FileRanges};
use crate::salvage::Scan;
use crate::serve_error::ServeError;

/// How long a fetch from a sealed segment's view waits before it looks
/// for the owner's marker and new chunks again.
const SEAL_POLL: Duration = Duration::from_millis(100);
/// Chunks of a remote filer one fetch answer reads at once after the one
/// it started in (`SegmentCore::go_on_in_chunks`).
const CHUNKS_READ_TOGETHER_MAX: usize = 16;

/// How a reader at a segment's end learns of new records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tail {
    /// A segment this shard owns: its appends ring `appended`.
    Appended,
    /// A view of a segment sealed elsewhere: nothing here appends, so the
    /// reader looks for new chunks and the owner's marker every
    /// [`SEAL_POLL`].
    Polled,
}

/// What the last reads of a segment opened, one entry each, kept so that
/// sequential reads do not open the same chunk again.
#[derive(Debug, Default)]
pub(super) struct ReadCache {
    /// The last chunk index read from the filer.
    index: Option<(u64, Rc<Vec<ChunkIndexEntry>>)>,
    /// The last chunk file of the local filer opened, with its index read
    /// from the mapping.
    chunk_file: Option<OpenChunk>,
    /// The last chunk read whole for a verifying read.
    scanned: Option<Rc<ScannedChunk>>,
}

/// A chunk's data read whole and sorted into good runs and damage, for
/// reads that verify (`FetchChecks::Verify`, or a damaged header).
#[derive(Debug)]
struct ScannedChunk {
    base_offset: u64,
    /// The bytes after the chunk header (the scan's positions are in it).
    data: Vec<u8>,
    scan: Scan,
}

/// A chunk file of the local filer, mapped, and the index at its end.
#[derive(Debug, Clone)]
struct OpenChunk {
    base_offset: u64,
    file: Arc<MappedFile>,
    index: Rc<Vec<ChunkIndexEntry>>,
}

/// A buffer still in memory, sealed or active, as readers see it.
struct MemoryBuffer<'a> {
    base_offset: u64,
    next_offset: u64,
    data: &'a [u8],
    index: &'a [ChunkIndexEntry],
    /// The file `data` is in, from `CHUNK_HEADER_BYTES`.
    file: &'a Arc<MappedFile>,
}

/// What a fetch found.
#[derive(Debug)]
pub(crate) struct FetchResult {
    pub(crate) start_offset: u64,
    pub(crate) next_offset: u64,
    pub(crate) high_watermark: u64,
    /// The segment is sealed and every record is in the filer.
    pub(crate) sealed: bool,
    /// One past the last offset the filer stores (`Segment::fetch` fills
    /// it in as it answers).
    pub(crate) stored_end: u64,
    pub(crate) body: FetchBody,
}

impl FetchResult {
    /// An answer from `start` whose batches are one piece of a file.
    fn of_file(start: u64, (range, next_offset): (FileRange, u64), high_watermark: u64) -> Self {
        FetchResult {
            stored_end: 0,
            start_offset: start,
            next_offset,
            high_watermark,
            sealed: false,
            body: FetchBody::Files(FileRanges::new(range)),
        }
    }
}

/// A fetch answer's batches.
#[derive(Debug)]
pub(crate) enum FetchBody {
    /// The response frame to be: [`FETCHED_FRAME_PREFIX_BYTES`] of room,
    /// then the batches, copied here once from a chunk a remote filer
    /// holds (`Fetched::finish_frame` fills the room).
    Copied(Vec<u8>),
    /// The batches where they are: buffers, or chunk files of the local
    /// filer (sent with `sendfile` on TCP).
    Files(FileRanges),
}

impl FetchBody {
    /// The bytes of the batches it holds.
    pub(crate) fn batch_bytes(&self) -> usize {
        match self {
            FetchBody::Copied(frame) => frame.len().saturating_sub(FETCHED_FRAME_PREFIX_BYTES),
            FetchBody::Files(ranges) => ranges.len(),
        }
    }

    /// Its batches, end to end: borrowed where they are in one piece (a
    /// mapping, or the copy a remote filer's read made), else copied once
    /// into `scratch`.
    pub(crate) fn batches<'a>(&'a self, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        match self {
            FetchBody::Copied(frame) => frame.get(FETCHED_FRAME_PREFIX_BYTES..).unwrap_or_default(),
            FetchBody::Files(ranges) => {
                let mut pieces = ranges.iter();
                match (pieces.next(), pieces.next()) {
                    (None, _) => &[],
                    (Some(only), None) => only.bytes(),
                    _ => {
                        scratch.clear();
                        ranges.copy_to(scratch);
                        scratch
                    }
                }
            }
        }
    }
}

/// Whole batches chosen for a fetch from batches laid end to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchSelection {
    /// Byte range within the data.
    from: usize,
    to: usize,
    /// The offset after the last batch.
    next_offset: u64,
    /// CRC-32C of `[from, to)` as the batches' stored checksums state it
    /// (a batch under `COMBINE_MIN_BYTES`: as its bytes are).
    crc: u32,
}

impl BatchSelection {
    /// The selected batches where they are in a buffer or chunk file
    /// (whose batches start after the chunk header), and the offset after
    /// them.
    fn in_file(self, file: Arc<MappedFile>) -> (FileRange, u64) {
        let range = FileRange::new(
            file,
            CHUNK_HEADER_BYTES + self.from,
            CHUNK_HEADER_BYTES + self.to,
            self.crc,
        );
        (range, self.next_offset)
    }
}

/// Within `data` (batches end to end), from the batch at `position`: the
/// whole batches that hold offsets from `start` on, at most `max_bytes`
/// unless the first is larger. Only batch headers are read, and each is
/// bounds-checked: `Err` if one is cut short, has an impossible length or
/// offset, or runs past the data (a corrupt chunk). `Ok(None)` if no batch
/// past `start` is there.
fn select_batches(
    data: &[u8],
    position: usize,
    start: u64,
    max_bytes: usize,
) -> Result<Option<BatchSelection>, ()> {
    let mut at = position;
    let mut selection: Option<BatchSelection> = None;
    while at < data.len() {
        let head = BatchHead::peek(&data[at..]).ok_or(())?;
        let len = head.batch_bytes as usize;
        let next_offset = head.next_offset().ok_or(())?;
        if at + len > data.len() {
            return Err(());
        }
        if next_offset > start {
            // A small batch is cheaper to checksum than to fold: its bytes
            // are read (the reader then compares them with the batch's
            // stored checksum); a large one is stated from its stored
            // checksum without reading it.
            let crc_after = |crc: u32| {
                if len < COMBINE_MIN_BYTES {
                    crc32c_append(crc, &data[at..at + len])
                } else {
                    crc32c_combine(crc, head.whole_checksum(), len)
                }
            };
            match &mut selection {
                None => {
                    selection = Some(BatchSelection {
                        from: at,
                        to: at + len,
                        next_offset,
                        crc: crc_after(0),
                    })
                }
                Some(s) if at + len - s.from > max_bytes => break,
                Some(s) => {
                    s.to = at + len;
                    s.next_offset = next_offset;
                    s.crc = crc_after(s.crc);
                }
            }
        }
        at += len;
    }
    Ok(selection)
}

impl SegmentState {
    /// The buffers not yet in the filer, oldest first: the sealed ones,
    /// then the active one.
    fn memory_buffers(&self) -> impl Iterator<Item = MemoryBuffer<'_>> {
        let sealed = self.log.sealed().map(|s| MemoryBuffer {
            base_offset: s.header().base_offset,
            next_offset: s.header().next_offset,
            data: s.data(),
            index: s.index(),
            file: s.mapped(),
        });
        let active = self.active.iter().map(|a| MemoryBuffer {
            base_offset: a.base_offset(),
            next_offset: a.next_offset(),
            data: a.data(),
            index: a.index(),
            file: a.mapped(),
        });
        sealed.chain(active)
    }
}

impl SegmentCore {
    /// For a view of a segment sealed elsewhere: look for the marker and
    /// for chunks flushed since the last look.
    pub(super) async fn refresh_listing(&self) -> Result<(), ServeError> {
        let (stored, marked) = {
            let prefix = self.chunk_prefix.clone();
            let marker = filer_layout::seal_marker(&self.topic, self.id);
            // Headers already read are not read again (every poll).
            let known: Vec<ChunkHeader> = (self.state.borrow().log.chunks().iter())
                .filter(|c| c.damaged.is_none())
                .map(|c| c.header)
                .collect();
            self.store
                .read(move |filer| load_sealed(filer, &prefix, &marker, &known))
                .await
                .map_err(|e| ServeError::storage(&e))?
        };
        let end = stored.end();
        let mut state = self.state.borrow_mut();
        state.log.handle_listed(stored.chunks, stored.lost, end);
        self.stats
            .next_offset
            .store(state.log.next_offset(), Ordering::Relaxed);
        self.stats
            .lost_records
            .store(state.log.lost_records(), Ordering::Relaxed);
        if marked && state.log.seal_state() != SealState::Sealed {
            state.log.handle_sealed_for_good();
        }
        Ok(())
    }

    /// Read batches from `from`, waiting up to `max_wait` for new data as
    /// `tail` says.
    pub(super) async fn fetch(
        &self,
        from: FetchFrom,
        max_bytes: usize,
        max_wait: Duration,
        checks: FetchChecks,
        tail: Tail,
    ) -> Result<FetchResult, ServeError> {
        if self.seal_state() == SealState::Sealing && tail == Tail::Polled {
            self.refresh_listing().await?;
        }
        let start = self.resolve(from).await?;
        let deadline = Instant::now() + max_wait;
        loop {
            let listener = self.appended.listen();
            let next = self.state.borrow().log.next_offset();
            if start < next || self.is_closed() {
                break;
            }
            let now = Instant::now();
            let seal = self.seal_state();
            if now >= deadline || seal == SealState::Sealed {
                return Ok(FetchResult {
                    stored_end: 0,
                    start_offset: start,
                    next_offset: start,
                    high_watermark: next,
                    sealed: seal == SealState::Sealed,
                    body: FetchBody::Copied(vec![0; FETCHED_FRAME_PREFIX_BYTES]),
                });
            }
            if tail == Tail::Polled {
                glommio::timer::sleep(SEAL_POLL.min(deadline - now)).await;
                self.refresh_listing().await?;
                continue;
            }
            let _ = glommio::timer::timeout(deadline - now, async {
                listener.await;
                Ok(())
            })
            .await;
        }
        if let Some(e) = self.closed_error() {
            return Err(e);
        }
        let sealed = self.seal_state() == SealState::Sealed;
        let mut result = match self.read_memory(start, max_bytes)? {
            Some(result) => result,
            None => self.read_chunks(start, max_bytes, checks).await?,
        };
        result.sealed = sealed;
        if let FetchBody::Files(files) = &mut result.body {
            // An answer that ended with its buffer or chunk goes on into
            // the next, so a reader gets about `max_bytes` per round trip
            // whatever the chunk size.
            while !files.is_full() && files.len() < max_bytes && checks == FetchChecks::Trust {
                let Some((range, next)) = self
                    .file_piece(result.next_offset, max_bytes - files.len())
                    .await?
                else {
                    break;
                };
                files.push(range);
                result.next_offset = next;
            }
            // The shard's thread must not wait for the disk when the
            // batches are sent: pages evicted since they were written (or
            // a chunk read cold) are read in on the blocking pool first.
            if !files.is_resident() {
                let files = files.clone();
                blocking(move || files.load()).await;
            }
        }
        if let FetchBody::Copied(frame) = &mut result.body {
            if checks == FetchChecks::Trust {
                result.next_offset = self
                    .go_on_in_chunks(frame, result.next_offset, max_bytes)
                    .await;
            }
        }
        Ok(result)
    }

    /// An answer copied from a remote filer's chunk (`frame`, its batches
    /// ending at `next`) goes on with the whole chunks after it, while
    /// they follow on without a gap and fit in `max_bytes`, at most
    /// [`CHUNKS_READ_TOGETHER_MAX`] of them, read at once: a reader of
    /// small chunks (durable acks make them) gets about `max_bytes` per
    /// round trip, and waits for one read, not one per chunk. Returns the
    /// offset after the answer's last batch. A chunk whose read fails or
    /// whose bytes do not walk as whole batches to its end ends the answer
    /// before it (the reader's next fetch starts there, and meets the
    /// error itself).
    async fn go_on_in_chunks(&self, frame: &mut Vec<u8>, next: u64, max_bytes: usize) -> u64 {
        let chunks: Vec<ChunkMeta> = {
            let state = self.state.borrow();
            let all = state.log.chunks();
            let mut room = max_bytes.saturating_sub(frame.len() - FETCHED_FRAME_PREFIX_BYTES);
            let mut at = next;
            let mut picked = Vec::new();
            for chunk in &all[all.partition_point(|c| c.header.next_offset <= next)..] {
                let bytes = chunk.header.data_bytes as usize;
                if picked.len() == CHUNKS_READ_TOGETHER_MAX
                    || chunk.header.base_offset != at
                    || chunk.damaged.is_some()
                    || bytes > room
                {
                    break;
                }
                room -= bytes;
                at = chunk.header.next_offset;
                picked.push(chunk.clone());
            }
            picked
        };
        let reads: Vec<_> = chunks
            .iter()
            .map(|chunk| {
                let store = self.store.clone();
                let (path, bytes) = (chunk.path.clone(), chunk.header.data_bytes as usize);
                glommio::spawn_local(async move {
                    store
                        .read_range_after(0, &path, CHUNK_HEADER_BYTES as u64, bytes)
                        .await
                })
            })
            .collect();
        let mut next = next;
        let mut appending = true;
        for (chunk, read) in chunks.iter().zip(reads) {
            // Every read is awaited, so none is left running.
            let data = read.await;
            let Ok(data) = data.as_deref() else {
                appending = false;
                continue;
            };
            appending = appending && walks_to(data, chunk.header.next_offset);
            if appending {
                frame.extend_from_slice(data);
                next = chunk.header.next_offset;
            }
        }
        next
    }

    /// Turn a start position into an offset.
    async fn resolve(&self, from: FetchFrom) -> Result<u64, ServeError> {
        let (earliest, next) = {
            let state = self.state.borrow();
            let next = state.log.next_offset();
            let earliest = state
                .log
                .first_stored_offset()
                .or_else(|| state.active.as_ref().map(|a| a.base_offset()))
                .unwrap_or(next);
            (earliest, next)
        };
        match from {
            FetchFrom::Earliest => Ok(earliest),
            FetchFrom::Latest => Ok(next),
            FetchFrom::Offset(o) if o > next => Err(ServeError::new(
                ErrorCode::OffsetOutOfRange,
                format!("offset {o} is past the end of segment {} ({next})", self.id),
            )),
            // Lost offsets hold nothing to read: the next record is after.
            FetchFrom::Offset(o) => Ok(self.state.borrow().log.past_lost(o.max(earliest))),
            FetchFrom::Timestamp(t) => self.find_timestamp(t).await,
            FetchFrom::MaxTimestamp => match self.max_timestamp() {
                Some(t) => self.find_timestamp(t).await,
                None => Ok(next),
            },
        }
    }

    /// The largest record timestamp the segment holds, if it holds any:
    /// from the headers of its chunks and sealed buffers, and what the
    /// active buffer's index has seen.
    fn max_timestamp(&self) -> Option<i64> {
        let state = self.state.borrow();
        let chunks = state
            .log
            .chunks()
            .iter()
            .filter(|c| c.damaged.is_none() && c.header.next_offset > c.header.base_offset)
            .map(|c| c.header.max_timestamp_ms);
        let sealed = state.log.sealed().map(|b| b.header().max_timestamp_ms);
        let active = state
            .active
            .iter()
            .filter(|a| !a.is_empty())
            .map(|a| a.max_timestamp_ms());
        chunks.chain(sealed).chain(active).max()
    }

    /// The first offset whose record timestamp is at least `t`, or the end.
    async fn find_timestamp(&self, t: i64) -> Result<u64, ServeError> {
        let candidates: Vec<ChunkMeta> = {
            let state = self.state.borrow();
            state
                .log
                .chunks()
                .iter()
                .filter(|c| c.damaged.is_none() && c.header.max_timestamp_ms >= t)
                .cloned()
                .collect()
        };
        for chunk in candidates {
            let index = self.chunk_index(&chunk).await?;
            let position = seek_timestamp(&index, t) as u64;
            let len = chunk.header.data_bytes - position;
            let data = self
                .read_range(
                    &chunk.path,
                    CHUNK_HEADER_BYTES as u64 + position,
                    len as usize,
                )
                .await?;
            if let Some(offset) = first_at_or_after(&data, t)? {
                return Ok(offset);
            }
        }
        let state = self.state.borrow();
        for buffer in state.memory_buffers() {
            let position = seek_timestamp(buffer.index, t) as usize;
            if let Some(offset) = first_at_or_after(&buffer.data[position..], t)? {
                return Ok(offset);
            }
        }
        Ok(state.log.next_offset())
    }

    /// Serve from a buffer still in memory, if `start` is in one.
    fn read_memory(&self, start: u64, max_bytes: usize) -> Result<Option<FetchResult>, ServeError> {
        let high_watermark = self.state.borrow().log.next_offset();
        Ok(self
            .memory_piece(start, max_bytes)?
            .map(|piece| FetchResult::of_file(start, piece, high_watermark)))
    }

    /// The batches from `start` on in the buffer that holds it, at most
    /// `max_bytes` unless the first is larger, and the offset after them.
    fn memory_piece(
        &self,
        start: u64,
        max_bytes: usize,
    ) -> Result<Option<(FileRange, u64)>, ServeError> {
        let state = self.state.borrow();
        let Some(buffer) = state
            .memory_buffers()
            .find(|b| b.base_offset <= start && start < b.next_offset)
        else {
            return Ok(None);
        };
        let position = seek_offset(buffer.index, start) as usize;
        // This broker validated every batch of its buffers as it appended
        // them, so a failure here is a bug, not bad data.
        let selection = select_batches(buffer.data, position, start, max_bytes)
            .ok()
            .flatten()
            .ok_or_else(|| {
                ServeError::new(
                    ErrorCode::Internal,
                    format!(
                        "segment {}: no batch at offset {start} in its buffer",
                        self.id
                    ),
                )
            })?;
        Ok(Some(selection.in_file(buffer.file.clone())))
    }

    /// The batches from `start` on, at most `max_bytes` (never more: this
    /// continues an answer), from the buffer or local chunk file that holds
    /// `start`. `None` if no file holds it, the chunk must be read through
    /// the filer or verified, or its first batch there does not fit.
    async fn file_piece(
        &self,
        start: u64,
        max_bytes: usize,
    ) -> Result<Option<(FileRange, u64)>, ServeError> {
        let piece = match self.memory_piece(start, max_bytes)? {
            Some(piece) => Some(piece),
            None => {
                let chunk = self.state.borrow().log.chunk_holding(start).cloned();
                match chunk {
                    Some(chunk) if chunk.damaged.is_none() && chunk.header.base_offset <= start => {
                        self.chunk_file_piece(&chunk, start, max_bytes).await?
                    }
                    _ => None,
                }
            }
        };
        Ok(piece.filter(|(range, _)| range.len() <= max_bytes))
    }

    /// The batches from `start` on in a chunk the local filer holds as a
    /// file, at most `max_bytes` unless the first is larger, left in the
    /// file, and the offset after them. `Ok(None)` if the filer keeps no
    /// local file.
    async fn chunk_file_piece(
        &self,
        chunk: &ChunkMeta,
        start: u64,
        max_bytes: usize,
    ) -> Result<Option<(FileRange, u64)>, ServeError> {
        let Some(open) = self.open_chunk(chunk).await? else {
            return Ok(None);
        };
        let corrupt = || {
            ServeError::new(
                ErrorCode::Storage,
                format!("chunk {} is corrupt near offset {start}", chunk.path),
            )
        };
        let data_end = CHUNK_HEADER_BYTES + chunk.header.data_bytes as usize;
        let data = open
            .file
            .bytes()
            .get(CHUNK_HEADER_BYTES..data_end)
            .ok_or_else(corrupt)?;
        let position = seek_offset(&open.index, start) as usize;
        let selection = select_batches(data, position.min(data.len()), start, max_bytes)
            .ok()
            .flatten()
            .ok_or_else(corrupt)?;
        Ok(Some(selection.in_file(open.file)))
    }

    /// A chunk the local filer holds as a file, mapped, with the index read
    /// from its end, in one trip to the blocking pool (the last one stays
    /// open for the next read). `Ok(None)` if the filer keeps no local
    /// file.
    async fn open_chunk(&self, chunk: &ChunkMeta) -> Result<Option<OpenChunk>, ServeError> {
        let base_offset = chunk.header.base_offset;
        if let Some(open) = &self.state.borrow().cache.chunk_file {
            if open.base_offset == base_offset {
                return Ok(Some(open.clone()));
            }
        }
        let Some(local) = self.store.filer.local_file(&chunk.path) else {
            return Ok(None);
        };
        let header = chunk.header;
        let (file, index) = blocking(move || {
            let file = MappedFile::open(&local).map_err(|e| ServeError::storage(&e))?;
            let at = header.index_position() as usize;
            let bytes = at
                .checked_add(header.index_bytes() as usize)
                .and_then(|end| file.bytes().get(at..end))
                .ok_or_else(|| "its index runs past the file's end".to_string());
            let index = bytes.and_then(|b| decode_index(&header, b).map_err(|e| e.to_string()));
            Ok::<_, ServeError>((file, index))
        })
        .await?;
        let index = index.map_err(|e| {
            ServeError::new(ErrorCode::Storage, format!("chunk {}: {e}", chunk.path))
        })?;
        let open = OpenChunk {
            base_offset,
            file: Arc::new(file),
            index: Rc::new(index),
        };
        self.state.borrow_mut().cache.chunk_file = Some(open.clone());
        Ok(Some(open))
    }

    /// Serve from a chunk in the filer.
    async fn read_chunks(
        &self,
        start: u64,
        max_bytes: usize,
        checks: FetchChecks,
    ) -> Result<FetchResult, ServeError> {
        let (chunk, high_watermark) = {
            let state = self.state.borrow();
            let chunk = state.log.chunk_holding(start).cloned().ok_or_else(|| {
                ServeError::new(
                    ErrorCode::Internal,
                    format!("offset {start} of segment {} is in no chunk", self.id),
                )
            })?;
            (chunk, state.log.next_offset())
        };
        if checks != FetchChecks::Trust || chunk.damaged.is_some() {
            return self
                .read_checked(&chunk, start, max_bytes, checks, high_watermark)
                .await;
        }
        if let Some(piece) = self.chunk_file_piece(&chunk, start, max_bytes).await? {
            return Ok(FetchResult::of_file(start, piece, high_watermark));
        }
        let index = self.chunk_index(&chunk).await?;
        let position = seek_offset(&index, start) as u64;
        let data_end = chunk.header.data_bytes;
        // Read what the reader asked for plus the scan from the index entry;
        // if the first batch is bigger, read again with its size.
        let mut want = (max_bytes as u64 + u64::from(wire::limits::CHUNK_INDEX_INTERVAL_BYTES))
            .min(data_end - position);
        loop {
            // Read behind room for the response's frame header and prefix.
            let mut frame = self
                .read_range_after(
                    FETCHED_FRAME_PREFIX_BYTES,
                    &chunk.path,
                    CHUNK_HEADER_BYTES as u64 + position,
                    want as usize,
                )
                .await?;
            let data = &frame[FETCHED_FRAME_PREFIX_BYTES..];
            let mut first = None;
            let mut end = 0usize;
            let mut next_offset = start;
            for item in BatchWalk::new(data) {
                let Ok((at, batch)) = item else { break };
                if batch.next_offset() <= start {
                    continue;
                }
                if first.is_none() {
                    first = Some(at);
                } else if at - first.unwrap_or(at) + batch.bytes().len() > max_bytes {
                    break;
                }
                end = at + batch.bytes().len();
                next_offset = batch.next_offset();
            }
            if let Some(first) = first {
                // The batches move up to the room's end (not at all when
                // the read began at the first one).
                let room = FETCHED_FRAME_PREFIX_BYTES;
                frame.copy_within(room + first..room + end, room);
                frame.truncate(room + end - first);
                return Ok(FetchResult {
                    stored_end: 0,
                    start_offset: start,
                    next_offset,
                    high_watermark,
                    sealed: false,
                    body: FetchBody::Copied(frame),
                });
            }
            // No whole batch past `start` in what was read: either the batch
            // is larger than `want` or the chunk is corrupt.
            let needed =
                needed_bytes(data, start).filter(|n| *n > want && position + n <= data_end);
            match needed {
                Some(n) => want = n,
                None => {
                    return Err(ServeError::new(
                        ErrorCode::Storage,
                        format!("chunk {} is corrupt near offset {start}", chunk.path),
                    ))
                }
            }
        }
    }

    /// Serve from a chunk whose batches are verified first: the chunk is
    /// read whole and scanned once (kept for the next such read). A start
    /// in a damaged stretch is answered `Corrupt`, naming the chunk, the
    /// offsets and where reading can go on, or with `SkipDamaged` by no
    /// batches and that offset as the next.
    async fn read_checked(
        &self,
        chunk: &ChunkMeta,
        start: u64,
        max_bytes: usize,
        checks: FetchChecks,
        high_watermark: u64,
    ) -> Result<FetchResult, ServeError> {
        let scanned = self.scanned_chunk(chunk).await?;
        let run = scanned.scan.runs.iter().find(|r| r.next_offset > start);
        let damage = scanned
            .scan
            .damage
            .iter()
            .find(|d| d.from_offset <= start && start < d.to_offset)
            .map(|d| (d.to_offset, d.to - d.from, d.from))
            // Past every good batch, yet inside the chunk's offsets.
            .or_else(|| run.is_none().then_some((chunk.header.next_offset, 0, 0)));
        if let Some((resume, bytes, at)) = damage {
            if checks == FetchChecks::SkipDamaged {
                log::warn!(
                    "segment {}: a reader skips offsets {start}..{resume} of damaged chunk {}",
                    self.chunk_prefix,
                    chunk.path
                );
                return Ok(FetchResult {
                    stored_end: 0,
                    start_offset: start,
                    next_offset: resume,
                    high_watermark,
                    sealed: false,
                    body: FetchBody::Copied(vec![0; FETCHED_FRAME_PREFIX_BYTES]),
                });
            }
            let why = chunk.damaged.as_deref().map_or_else(
                || format!("{bytes} bytes from data byte {at} fail their checksum"),
                |reason| format!("its header is damaged: {reason}"),
            );
            return Err(ServeError::new(
                ErrorCode::Corrupt,
                format!(
                    "segment {}: offset {start} is in a damaged stretch of chunk {} ({why}); \
                     the next readable offset is {resume} (kelp sub --skip-corrupt reads on \
                     past it)",
                    self.id, chunk.path
                ),
            ));
        }
        let run = run.ok_or_else(ServeError::internal)?;
        let data = &scanned.data[..run.to];
        let selection = select_batches(data, run.from, start, max_bytes)
            .ok()
            .flatten()
            .ok_or_else(ServeError::internal)?;
        let mut frame = vec![0u8; FETCHED_FRAME_PREFIX_BYTES];
        frame.extend_from_slice(&data[selection.from..selection.to]);
        Ok(FetchResult {
            stored_end: 0,
            start_offset: start,
            next_offset: selection.next_offset,
            high_watermark,
            sealed: false,
            body: FetchBody::Copied(frame),
        })
    }

    /// `chunk`'s data read whole and scanned, from the one-entry cache or
    /// the filer.
    async fn scanned_chunk(&self, chunk: &ChunkMeta) -> Result<Rc<ScannedChunk>, ServeError> {
        let base = chunk.header.base_offset;
        if let Some(s) = &self.state.borrow().cache.scanned {
            if s.base_offset == base {
                return Ok(s.clone());
            }
        }
        let len = match chunk.damaged {
            None => chunk.header.data_bytes,
            // Its header does not say where the data ends: all of it.
            Some(_) => {
                let path = chunk.path.clone();
                self.store
                    .read(move |filer| filer.size(&path))
                    .await
                    .map_err(|e| ServeError::new(ErrorCode::Storage, e.to_string()))?
                    .saturating_sub(CHUNK_HEADER_BYTES as u64)
            }
        };
        let data = self
            .read_range(&chunk.path, CHUNK_HEADER_BYTES as u64, len as usize)
            .await?;
        let end = chunk.header.next_offset;
        let (data, scan) = blocking(move || {
            let scan = crate::salvage::scan(&data, base, Some(end));
            (data, scan)
        })
        .await;
        if !scan.is_clean() {
            log::error!(
                "segment {}: chunk {} holds damaged records: offsets {}",
                self.chunk_prefix,
                chunk.path,
                scan.damage
                    .iter()
                    .map(|d| format!("{}..{}", d.from_offset, d.to_offset))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let scanned = Rc::new(ScannedChunk {
            base_offset: base,
            data,
            scan,
        });
        self.state.borrow_mut().cache.scanned = Some(scanned.clone());
        Ok(scanned)
    }

    /// The index of a chunk, from the one-entry cache or the filer.
    async fn chunk_index(&self, chunk: &ChunkMeta) -> Result<Rc<Vec<ChunkIndexEntry>>, ServeError> {
        if let Some((base, index)) = &self.state.borrow().cache.index {
            if *base == chunk.header.base_offset {
                return Ok(index.clone());
            }
        }
        let bytes = self
            .read_range(
                &chunk.path,
                chunk.header.index_position(),
                chunk.header.index_bytes() as usize,
            )
            .await?;
        let index = Rc::new(decode_index(&chunk.header, &bytes).map_err(|e| {
            ServeError::new(ErrorCode::Storage, format!("chunk {}: {e}", chunk.path))
        })?);
        self.state.borrow_mut().cache.index = Some((chunk.header.base_offset, index.clone()));
        Ok(index)
    }

    async fn read_range(
        &self,
        path: &ObjectPath,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, ServeError> {
        self.read_range_after(0, path, offset, len).await
    }

    /// `len` bytes of `path` from `offset`, after `room` zero bytes.
    async fn read_range_after(
        &self,
        room: usize,
        path: &ObjectPath,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, ServeError> {
        self.store.read_range_after(room, path, offset, len).await
    }
}

/// Whether `data` is whole batches end to end, the last ending at `end`.
fn walks_to(data: &[u8], end: u64) -> bool {
    let mut last = None;
    for item in BatchWalk::new(data) {
        match item {
            Ok((_, batch)) => last = Some(batch.next_offset()),
            Err(_) => return false,
        }
    }
    last == Some(end)
}

/// If a batch holding offsets from `start` begins in `data` but is cut off,
/// the bytes from the start of `data` to its end.
fn needed_bytes(data: &[u8], start: u64) -> Option<u64> {
    let mut at = 0usize;
    while at + wire::batch::BATCH_HEADER_BYTES <= data.len() {
        let len = BatchView::peek_len(&data[at..])? as usize;
        if len < wire::batch::BATCH_HEADER_BYTES {
            return None;
        }
        let base = u64::from_le_bytes(data[at..at + 8].try_into().ok()?);
        if at + len > data.len() {
            return (base <= start || at == 0).then_some((at + len) as u64);
        }
        at += len;
    }
    None
}

/// The first record offset in `data` (batches read from a chunk, validated
/// here) with timestamp at least `t`.
fn first_at_or_after(data: &[u8], t: i64) -> Result<Option<u64>, ServeError> {
    for item in BatchWalk::new(data) {
        let (_, batch) =
            item.map_err(|e| ServeError::new(ErrorCode::Storage, format!("chunk data: {e}")))?;
        if batch.max_timestamp_ms() < t {
            continue;
        }
        for record in batch.records() {
            if record.timestamp_ms >= t {
                return Ok(Some(batch.base_offset() + u64::from(record.offset_delta)));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wire::BatchBuilder;

    /// A batch of `records` records of `value_bytes` each, stamped at `base`.
    fn batch(base: u64, records: usize, value_bytes: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new();
        for i in 0..records {
            b.push(i as i64, b"k", &vec![i as u8; value_bytes], &[])
                .unwrap();
        }
        let mut bytes = b.finish(0, 0).to_vec();
        bytes[..8].copy_from_slice(&base.to_le_bytes());
        bytes
    }

    /// The selection's checksum is the CRC-32C of the bytes it names, for
    /// small batches (checksummed outright) and large ones (folded from
    /// their stored checksums) alike; it starts at the batch holding
    /// `start` and stops before `max_bytes`, but always takes one batch.
    #[test]
    fn selected_batches_carry_the_checksum_of_their_bytes() {
        let small = batch(0, 3, 100);
        let large = batch(3, 2, COMBINE_MIN_BYTES);
        let after = batch(5, 4, 200);
        let data = [small.clone(), large.clone(), after.clone()].concat();
        let all = select_batches(&data, 0, 0, usize::MAX).unwrap().unwrap();
        assert_eq!((all.from, all.to, all.next_offset), (0, data.len(), 9));
        assert_eq!(all.crc, wire::checksum::crc32c(&data));

        let from_large = select_batches(&data, 0, 4, large.len()).unwrap().unwrap();
        assert_eq!(from_large.from, small.len());
        assert_eq!(from_large.to, small.len() + large.len());
        assert_eq!(from_large.next_offset, 5);
        assert_eq!(
            from_large.crc,
            wire::checksum::crc32c(&data[from_large.from..from_large.to])
        );
        let one = select_batches(&data, 0, 0, 1).unwrap().unwrap();
        assert_eq!((one.from, one.to), (0, small.len()));
        assert_eq!(select_batches(&data, 0, 9, usize::MAX).unwrap(), None);
    }

    /// Headers from a damaged chunk are refused, never trusted: a length
    /// shorter than a header, or one running past the data.
    #[test]
    fn a_damaged_batch_header_is_an_error() {
        let mut data = [batch(0, 2, 50), batch(2, 2, 50)].concat();
        let second = data.len() / 2;
        data[second + 8..second + 12].copy_from_slice(&10u32.to_le_bytes());
        assert_eq!(select_batches(&data, 0, 0, usize::MAX), Err(()));
        data[second + 8..second + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(select_batches(&data, 0, 0, usize::MAX), Err(()));
        let cut = batch(0, 2, 50);
        assert_eq!(
            select_batches(&cut[..cut.len() - 1], 0, 0, usize::MAX),
            Err(())
        );
    }
}
