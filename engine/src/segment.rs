//! One segment as its owning shard holds it: the active buffer, sealed
//! buffers on their way to the filer, the chunks already there, and the
//! waiters (long-polling readers, `durable` producers, producers held back
//! by a full flush queue).
//!
//! A segment is touched only by its shard's thread. Filer calls run on the
//! shard's blocking pool (`spawn_blocking`) so a slow filer never stalls the
//! shard; it only stops that segment's producers once `unflushed_bytes_max`
//! of sealed buffers wait (backpressure, never loss). A `leader` ack never
//! waits for the filer: the sealed buffers are files whose pages the kernel
//! writes back while the flusher works through them in order.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_listener::Event;
use filer::{Filer, ObjectPath};
use wire::batch::{BatchHead, BatchView};
use wire::checksum::{crc32c_append, crc32c_combine, COMBINE_MIN_BYTES};
use wire::chunk::{
    decode_index, seek_offset, seek_timestamp, BatchWalk, ChunkHeader, ChunkIndexEntry,
    CHUNK_HEADER_BYTES,
};
use wire::message::{Successors, FETCHED_FRAME_PREFIX_BYTES};
use wire::{ErrorCode, FetchChecks, FetchFrom};

use crate::buffer::{ActiveBuffer, MappedFile, SealedBuffer, SpareBuffer};
use crate::config::BrokerConfig;
use crate::error::EngineError;
use crate::file_range::{FileRange, FileRanges};
use crate::recovery::{record_lost, recover_buffers, LostRange, SegmentDirs};
use crate::salvage::Scan;
use crate::serve_error::ServeError;
use crate::shard_filer::ShardFiler;

/// Figures other threads may read (describe): written only by the owner.
#[derive(Debug, Default)]
pub(crate) struct SegmentStats {
    pub(crate) next_offset: AtomicU64,
    pub(crate) appended_bytes: AtomicU64,
    /// Records appended since the broker opened the segment.
    pub(crate) appended_records: AtomicU64,
    /// When this broker appended its first record, ms since the Unix
    /// epoch; 0 before.
    pub(crate) first_append_ms: AtomicU64,
    /// Offsets of the segment whose records recovery could not read back
    /// (its lost ranges).
    pub(crate) lost_records: AtomicU64,
}

/// Whether a segment still serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    Serving,
    /// Its broker (or shard) is stopping: buffers flushed, no more writes.
    Stopped,
    /// Its topic was deleted: buffers removed.
    Deleted,
}

/// Whether a segment takes writes, and whether its end is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SealState {
    /// Takes writes.
    Open,
    /// Takes no writes; records may still be on their way to the filer
    /// (the owner is flushing, or another broker's view waits for the
    /// owner's seal marker).
    Sealing,
    /// Takes no writes and every record is in the filer: a reader at the
    /// end is done with the segment.
    Sealed,
}

use control::{filer_layout, TopicName};

/// Under the data dir: damaged buffer files kept for the operator, by
/// topic and segment (`recovery`).
const QUARANTINE_DIR: &str = "quarantine";

/// How long a fetch from a sealed segment's view waits before it looks
/// for the owner's marker and new chunks again.
const SEAL_POLL: Duration = Duration::from_millis(100);

/// A chunk in the filer.
#[derive(Debug, Clone)]
struct ChunkMeta {
    path: ObjectPath,
    header: ChunkHeader,
    /// Why its header could not be read, if it could not: `header` is then
    /// made up (base offset from the name, the end from what follows),
    /// and every read of the chunk verifies its batches.
    damaged: Option<String>,
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

/// The mutable state; see [`SegmentCell`].
#[derive(Debug)]
struct SegmentState {
    next_offset: u64,
    /// Every offset below this is in a chunk in the filer.
    flushed_offset: u64,
    active: Option<ActiveBuffer>,
    /// Oldest first; the front is the one being flushed.
    sealed: VecDeque<Arc<SealedBuffer>>,
    /// The file bytes of `sealed`, held against `unflushed_bytes_max`.
    sealed_bytes: u64,
    chunks: Vec<ChunkMeta>,
    /// Offsets recovery could not read back, by first offset: never given
    /// out again, skipped by readers, counted as flushed.
    lost: Vec<LostRange>,
    flushing: bool,
    /// When the oldest unanswered `durable` producer started waiting.
    durable_waiting_since: Option<Instant>,
    /// The last chunk index read from the filer, to serve sequential reads.
    index_cache: Option<(u64, Rc<Vec<ChunkIndexEntry>>)>,
    /// The last chunk file of the local filer opened for reads, with its
    /// index read from the mapping, for the same reason.
    chunk_file_cache: Option<OpenChunk>,
    /// The last chunk read whole for a verifying read.
    scanned_cache: Option<Rc<ScannedChunk>>,
    /// The next active buffer, prepared off the shard's thread.
    spares: Vec<SpareBuffer>,
    /// Spares being made on the blocking pool.
    spares_pending: usize,
    /// Names the next spare file.
    spare_counter: u64,
    /// Set when the flusher gave up: bytes of the segment could not be
    /// stored and cannot be trusted. The segment takes no more writes and
    /// acknowledges nothing more as durable.
    failed: Option<String>,
}

/// Spare buffers a segment keeps ready. Making one (create, fallocate,
/// map, and bring its pages into the page cache) on the blocking pool can
/// take as long as filling one at full speed on a fresh VM: with one
/// spare, a profile showed the shard making its next buffer itself, so two
/// are made at once (BENCHMARKS.md, 2d0851b). Each costs `buffer_bytes` of
/// reserved disk and page cache, and only segments that roll buffers ever
/// get one.
const SPARES_MAX: usize = 2;

/// Sealed buffers behind the one being flushed whose write-back the flusher
/// starts (`sync_file_range`) before it syncs the front one.
const WRITEBACK_AHEAD_BUFFERS: usize = 4;

/// Ask the kernel to start writing a buffer file's dirty pages to disk,
/// without waiting (`SYNC_FILE_RANGE_WRITE`). Only a hint that spreads the
/// disk's work: durability still comes from the filer's own sync, so a
/// failure here is ignored.
fn start_writeback(path: &std::path::Path) {
    use std::os::unix::io::AsRawFd;
    let Ok(file) = std::fs::File::open(path) else {
        return;
    };
    // SAFETY: a plain syscall on a descriptor that stays open across it.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// The flusher's wait after a failed store, doubled up to the maximum.
const FLUSH_BACKOFF_MIN: Duration = Duration::from_millis(50);
const FLUSH_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Why a chunk was not stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
enum FlushError {
    /// The filer failed: try again.
    #[error(transparent)]
    Filer(#[from] filer::FilerError),
    /// The chunk was found stored already but its buffer file could not be
    /// removed: try again.
    #[error("remove {}: {source}", path.display())]
    RemoveBuffer {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Another writer's chunk is at the path: never try again.
    #[error(
        "chunk {chunk} exists with other bytes: another writer stored this segment's offsets; \
         this broker's are fenced off"
    )]
    Fenced { chunk: ObjectPath },
}

/// Whether the object at `path` holds exactly `expected`.
fn holds_exactly(
    filer: &dyn Filer,
    path: &ObjectPath,
    expected: &[u8],
) -> Result<bool, filer::FilerError> {
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
fn remove_stored_buffer(local: &std::path::Path) -> Result<(), FlushError> {
    match std::fs::remove_file(local) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(FlushError::RemoveBuffer {
            path: local.to_owned(),
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
    wire::chunk::ChunkView::open(&copy)?;
    Ok(copy)
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

impl SegmentState {
    /// The state of a segment whose filer holds `chunks` up to
    /// `flushed_offset`, with `sealed` buffers to flush after them up to
    /// `next_offset`.
    fn new(
        chunks: Vec<ChunkMeta>,
        flushed_offset: u64,
        sealed: VecDeque<Arc<SealedBuffer>>,
        next_offset: u64,
    ) -> SegmentState {
        SegmentState {
            next_offset,
            flushed_offset,
            active: None,
            sealed_bytes: sealed.iter().map(|s| s.header().file_bytes()).sum(),
            sealed,
            chunks,
            lost: Vec::new(),
            flushing: false,
            durable_waiting_since: None,
            index_cache: None,
            chunk_file_cache: None,
            scanned_cache: None,
            spares: Vec::new(),
            spares_pending: 0,
            spare_counter: 0,
            failed: None,
        }
    }

    /// Take the segment's lost ranges (sorted by first offset): counted in
    /// `stats`, and flushed past.
    fn set_lost(&mut self, lost: Vec<LostRange>, stats: &SegmentStats) {
        let records = lost.iter().map(|l| l.to - l.from).sum();
        stats.lost_records.store(records, Ordering::Relaxed);
        self.lost = lost;
        self.flushed_offset = skip_lost(&self.lost, self.flushed_offset);
    }

    /// Whether another buffer of `bytes` may be sealed: always while none
    /// waits (so a buffer larger than the limit still moves), else while
    /// the waiting ones stay within `max`.
    /// The first chunk that ends after `start`: the one holding it, if
    /// any does.
    fn chunk_holding(&self, start: u64) -> Option<&ChunkMeta> {
        let i = self
            .chunks
            .partition_point(|c| c.header.next_offset <= start);
        self.chunks.get(i)
    }

    fn may_seal(&self, bytes: u64, max: u64) -> bool {
        self.sealed.is_empty() || self.sealed_bytes + bytes <= max
    }

    /// The buffers not yet in the filer, oldest first: the sealed ones,
    /// then the active one.
    fn memory_buffers(&self) -> impl Iterator<Item = MemoryBuffer<'_>> {
        let sealed = self.sealed.iter().map(|s| MemoryBuffer {
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

/// A segment owned by this shard.
#[derive(Debug)]
pub(crate) struct SegmentCell {
    pub(crate) id: u32,
    pub(crate) range_start: u32,
    pub(crate) range_end: u64,
    buffers_dir: PathBuf,
    topic: TopicName,
    /// `filer_layout::segment_prefix`: where the chunks and marker are.
    chunk_prefix: ObjectPath,
    /// The filer, through the shard's lanes and chunk cache.
    store: Rc<ShardFiler>,
    config: Rc<BrokerConfig>,
    pub(crate) stats: Arc<SegmentStats>,
    state: RefCell<SegmentState>,
    seal: Cell<SealState>,
    /// Serving, stopped with its broker, or deleted with its topic.
    closed: Cell<Closed>,
    /// Once sealing, where its range went (named in refused writes), as
    /// the latest layout says.
    successors: RefCell<Option<Arc<Successors>>>,
    appended: Event,
    flushed: Event,
    space: Event,
}

/// What a fetch found.
#[derive(Debug)]
pub(crate) struct FetchResult {
    pub(crate) start_offset: u64,
    pub(crate) next_offset: u64,
    pub(crate) high_watermark: u64,
    /// The segment is sealed and every record is in the filer.
    pub(crate) sealed: bool,
    pub(crate) body: FetchBody,
}

impl FetchResult {
    /// An answer from `start` whose batches are one piece of a file.
    fn of_file(start: u64, (range, next_offset): (FileRange, u64), high_watermark: u64) -> Self {
        FetchResult {
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

pub(crate) async fn blocking<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    glommio::executor()
        .spawn_blocking(move || {
            crate::background_priority::lower_this_thread();
            f()
        })
        .await
}

impl SegmentCell {
    /// Open a segment: find its chunks in the filer, recover buffers left
    /// on local disk by an earlier run, and flush them before returning, so
    /// offsets continue where they stopped and nothing acknowledged is lost.
    pub(crate) async fn open(
        config: Rc<BrokerConfig>,
        store: Rc<ShardFiler>,
        topic: &TopicName,
        buffers_dir: PathBuf,
        id: u32,
        range_start: u32,
        range_end: u64,
    ) -> Result<Rc<SegmentCell>, EngineError> {
        let chunk_prefix = filer_layout::segment_prefix(topic, id);
        // Buffers first: salvaging a damaged one records lost ranges in
        // the filer, which the listing below then finds.
        let dirs = SegmentDirs {
            buffers: buffers_dir.clone(),
            quarantine: config
                .data_dir
                .join(QUARANTINE_DIR)
                .join(topic.to_string())
                .join(id.to_string()),
        };
        let filer = store.filer.clone();
        let recovered = {
            let filer = filer.clone();
            let topic = topic.clone();
            blocking(move || recover_buffers(&dirs, id, filer.as_ref(), &topic)).await?
        };
        let mut stored = {
            let prefix = chunk_prefix.clone();
            store.read(move |filer| load_stored(filer, &prefix)).await?
        };
        let chunk_end = stored.chunks.last().map_or(0, |c| c.header.next_offset);
        if let Some(tail) = stored.unknown_tail.take() {
            // A buffer after the chunk says where it ended; else the
            // offsets it may have held are fenced off.
            if recovered.is_empty() && skip_lost(&stored.lost, tail.from) < tail.to {
                let reason = "the last chunk's header is damaged: offsets after its last \
                              readable batch may have held records";
                stored.fence(&store, topic, id, tail, reason).await?;
            }
        }
        let mut next_offset = skip_lost(&stored.lost, chunk_end);
        let mut sealed = VecDeque::new();
        for buffer in recovered {
            if buffer.next_offset() <= chunk_end {
                // Flushed before the crash, not yet deleted.
                let path = buffer.path().to_path_buf();
                drop(buffer);
                std::fs::remove_file(&path).map_err(|e| EngineError::io("remove", &path, e))?;
                continue;
            }
            if buffer.base_offset() < next_offset {
                return Err(EngineError::Corrupt {
                    what: format!("buffer {}", buffer.path().display()),
                    reason: format!(
                        "it starts at offset {} but segment {id} already holds offsets up to \
                         {next_offset}",
                        buffer.base_offset()
                    ),
                });
            }
            if buffer.base_offset() > next_offset {
                // Nothing holds the offsets between: a buffer file gone
                // from the disk. They are lost, and said so.
                let lost = LostRange {
                    from: next_offset,
                    to: buffer.base_offset(),
                };
                log::error!(
                    "segment {chunk_prefix}: offsets {}..{} are in no chunk and no buffer \
                     (a buffer file is missing); recording them as lost",
                    lost.from,
                    lost.to
                );
                let reason = "no chunk and no buffer holds these offsets";
                stored.fence(&store, topic, id, lost, reason).await?;
            }
            next_offset = buffer.next_offset();
            if buffer.is_empty() {
                let path = buffer.path().to_path_buf();
                drop(buffer);
                std::fs::remove_file(&path).map_err(|e| EngineError::io("remove", &path, e))?;
            } else {
                sealed.push_back(Arc::new(buffer.seal()?));
            }
            next_offset = skip_lost(&stored.lost, next_offset);
        }
        // Offsets lost at the end were maybe acknowledged: new records
        // start after them.
        let next_offset = next_offset.max(stored.end());
        let stats = Arc::new(SegmentStats::default());
        stats.next_offset.store(next_offset, Ordering::Relaxed);
        let mut state = SegmentState::new(stored.chunks, chunk_end, sealed, next_offset);
        state.set_lost(stored.lost, &stats);
        let cell = Rc::new(SegmentCell {
            id,
            range_start,
            range_end,
            buffers_dir,
            topic: topic.clone(),
            chunk_prefix,
            store,
            config,
            stats,
            seal: Cell::new(SealState::Open),
            state: RefCell::new(state),
            closed: Cell::new(Closed::Serving),
            successors: RefCell::new(None),
            appended: Event::new(),
            flushed: Event::new(),
            space: Event::new(),
        });
        if !cell.state.borrow().sealed.is_empty() {
            log::info!(
                "segment {}/{id}: recovered buffers up to offset {next_offset}; flushing",
                cell.chunk_prefix
            );
            cell.start_flush();
            let target = cell
                .state
                .borrow()
                .sealed
                .back()
                .map_or(0, |b| b.header().next_offset);
            cell.wait_flushed(target).await?;
        }
        Ok(cell)
    }

    /// A view of a segment sealed on another broker (or before this one
    /// started), for reads only: its chunks in the filer, and whether the
    /// sealing broker's marker says they are final. No local buffers.
    pub(crate) async fn open_sealed(
        config: Rc<BrokerConfig>,
        store: Rc<ShardFiler>,
        topic: &TopicName,
        id: u32,
        range_start: u32,
        range_end: u64,
    ) -> Result<Rc<SegmentCell>, EngineError> {
        let chunk_prefix = filer_layout::segment_prefix(topic, id);
        let (stored, marked) = {
            let prefix = chunk_prefix.clone();
            let marker = filer_layout::seal_marker(topic, id);
            store
                .read(move |filer| load_sealed(filer, &prefix, &marker))
                .await?
        };
        let end = stored.end();
        let stats = Arc::new(SegmentStats::default());
        stats.next_offset.store(end, Ordering::Relaxed);
        let mut state = SegmentState::new(stored.chunks, end, VecDeque::new(), end);
        state.set_lost(stored.lost, &stats);
        Ok(Rc::new(SegmentCell {
            id,
            range_start,
            range_end,
            buffers_dir: PathBuf::new(),
            topic: topic.clone(),
            chunk_prefix,
            store,
            config,
            stats,
            seal: Cell::new(if marked {
                SealState::Sealed
            } else {
                SealState::Sealing
            }),
            state: RefCell::new(state),
            closed: Cell::new(Closed::Serving),
            successors: RefCell::new(None),
            appended: Event::new(),
            flushed: Event::new(),
            space: Event::new(),
        }))
    }

    /// Whether this is a read-only view of a segment sealed elsewhere
    /// ([`SegmentCell::open_sealed`]: the only cells without a buffers
    /// directory).
    pub(crate) fn is_view(&self) -> bool {
        self.buffers_dir.as_os_str().is_empty()
    }

    /// Whether the segment takes writes.
    pub(crate) fn seal_state(&self) -> SealState {
        self.seal.get()
    }

    /// Seal the segment for good (the control plane moved its range to
    /// successors): refuse writes from now on, flush everything buffered,
    /// drop the local buffers, then store the seal marker so readers on
    /// any broker know the chunks are final. Idempotent.
    pub(crate) async fn seal(self: &Rc<Self>, epoch: u32) -> Result<(), ServeError> {
        if self.seal.get() == SealState::Sealed {
            return Ok(());
        }
        self.refuse_writes(None);
        let target = {
            let mut state = self.state.borrow_mut();
            self.seal_active(&mut state)?;
            state.next_offset
        };
        self.start_flush();
        self.wait_flushed(target)
            .await
            .map_err(|e| ServeError::storage(&e))?;
        while self.state.borrow().spares_pending > 0 {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        {
            let mut state = self.state.borrow_mut();
            state.active = None;
            state.spares.clear();
        }
        if let Err(e) = std::fs::remove_dir_all(&self.buffers_dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("remove {}: {e}", self.buffers_dir.display());
            }
        }
        let by = self
            .config
            .broker_id
            .map_or_else(|| "broker".to_owned(), |b| format!("broker {b}"));
        let (topic, id) = (self.topic.clone(), self.id);
        let created = self
            .store
            .upload(move |filer| filer_layout::create_seal_marker(filer, &topic, id, epoch, &by))
            .await
            .map_err(|e| ServeError::new(ErrorCode::Storage, e.to_string()))?;
        if !created {
            log::info!(
                "segment {}: sealed already (the control plane wrote its marker)",
                self.chunk_prefix
            );
        }
        self.seal.set(SealState::Sealed);
        // Long-polling readers at the end learn that it is the end.
        self.appended.notify(usize::MAX);
        Ok(())
    }

    /// The first step of [`SegmentCell::seal`], taken at once: refuse
    /// writes from now on, naming `successors` (if given) in each refusal.
    pub(crate) fn refuse_writes(&self, successors: Option<Arc<Successors>>) {
        if successors.is_some() {
            self.set_successors(successors);
        }
        if self.seal.get() == SealState::Open {
            self.seal.set(SealState::Sealing);
            // Producers held back by a full flush queue see the seal.
            self.space.notify(usize::MAX);
        }
    }

    /// Where the range went, named from now on in refused writes.
    pub(crate) fn set_successors(&self, successors: Option<Arc<Successors>>) {
        *self.successors.borrow_mut() = successors;
    }

    /// For a view of a segment sealed elsewhere: look for the marker and
    /// for chunks flushed since the last look.
    async fn refresh_sealed(&self) -> Result<(), ServeError> {
        let (stored, marked) = {
            let prefix = self.chunk_prefix.clone();
            let marker = filer_layout::seal_marker(&self.topic, self.id);
            self.store
                .read(move |filer| load_sealed(filer, &prefix, &marker))
                .await
                .map_err(|e| ServeError::storage(&e))?
        };
        let end = stored.end();
        let mut state = self.state.borrow_mut();
        if end > state.next_offset {
            state.next_offset = end;
            state.flushed_offset = end;
            state.chunks = stored.chunks;
            state.set_lost(stored.lost, &self.stats);
            self.stats.next_offset.store(end, Ordering::Relaxed);
        }
        if marked {
            self.seal.set(SealState::Sealed);
        }
        Ok(())
    }

    fn is_closed(&self) -> bool {
        self.closed.get() != Closed::Serving
    }

    /// The answer to an append or a fetch once the segment no longer
    /// serves: a stopped broker's is `ShuttingDown`, which clients treat as
    /// a stale layout (they look again and retry, here once the broker is
    /// back or wherever the segment moved); a deleted topic's is final.
    fn closed_error(&self) -> Option<ServeError> {
        match self.closed.get() {
            Closed::Serving => None,
            Closed::Stopped => Some(ServeError::new(
                ErrorCode::ShuttingDown,
                "the broker is stopping",
            )),
            Closed::Deleted => Some(ServeError::new(
                ErrorCode::TopicNotFound,
                "topic was deleted",
            )),
        }
    }

    /// Whether a key hash belongs to this segment.
    pub(crate) fn covers(&self, hash: u32) -> bool {
        hash >= self.range_start && u64::from(hash) < self.range_end
    }

    /// Append a validated batch; waits while the flush queue is full.
    pub(crate) async fn append(
        self: &Rc<Self>,
        batch: &BatchView<'_>,
    ) -> Result<(u64, u64), ServeError> {
        let len = batch.bytes().len();
        loop {
            if let Some(e) = self.closed_error() {
                return Err(e);
            }
            if self.seal.get() != SealState::Open {
                return Err(ServeError::sealed(
                    self.id,
                    self.successors.borrow().clone(),
                ));
            }
            let listener = {
                let mut state = self.state.borrow_mut();
                if let Some(reason) = &state.failed {
                    return Err(ServeError::new(
                        ErrorCode::Storage,
                        format!("segment {} failed: {reason}", self.id),
                    ));
                }
                let needs_roll = state.active.as_ref().is_none_or(|a| !a.fits(len));
                if !needs_roll {
                    let active = state.active.as_mut().ok_or_else(ServeError::internal)?;
                    let (base, next) = active.append(batch).map_err(|e| ServeError::storage(&e))?;
                    state.next_offset = next;
                    drop(state);
                    self.stats.next_offset.store(next, Ordering::Relaxed);
                    self.stats
                        .appended_bytes
                        .fetch_add(len as u64, Ordering::Relaxed);
                    self.stats
                        .appended_records
                        .fetch_add(next - base, Ordering::Relaxed);
                    if self.stats.first_append_ms.load(Ordering::Relaxed) == 0 {
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(1, |d| d.as_millis() as u64);
                        self.stats.first_append_ms.store(now, Ordering::Relaxed);
                    }
                    self.appended.notify(usize::MAX);
                    return Ok((base, next));
                }
                let active_bytes = state.active.as_ref().map_or(0, |a| a.file_bytes());
                if state.may_seal(active_bytes, self.config.unflushed_bytes_max) {
                    let sealed_one = self.seal_active(&mut state)?;
                    let capacity = (self.config.buffer_bytes as usize).max(len);
                    let path = self
                        .buffers_dir
                        .join(format!("{:020}.buf", state.next_offset));
                    let next = match state.spares.pop() {
                        Some(spare) if spare.data_capacity() >= len => {
                            spare.activate(path, self.id, state.next_offset)
                        }
                        _ => ActiveBuffer::create(path, self.id, state.next_offset, capacity),
                    };
                    state.active = Some(next.map_err(|e| ServeError::storage(&e))?);
                    drop(state);
                    if sealed_one {
                        self.start_flush();
                    }
                    self.prepare_spare();
                    continue;
                }
                self.space.listen()
            };
            // Re-check after registering, then wait for the flusher.
            {
                let state = self.state.borrow();
                let active_bytes = state.active.as_ref().map_or(0, |a| a.file_bytes());
                if state.may_seal(active_bytes, self.config.unflushed_bytes_max) {
                    continue;
                }
            }
            listener.await;
        }
    }

    /// Seal the active buffer if it holds anything. Returns whether it did.
    fn seal_active(&self, state: &mut SegmentState) -> Result<bool, ServeError> {
        match state.active.take() {
            Some(active) if !active.is_empty() => {
                let sealed = active.seal().map_err(|e| ServeError::storage(&e))?;
                state.sealed_bytes += sealed.header().file_bytes();
                state.sealed.push_back(Arc::new(sealed));
                Ok(true)
            }
            Some(active) => {
                state.active = Some(active);
                Ok(false)
            }
            None => Ok(false),
        }
    }

    /// Called by the shard's ticker: seal by age, or early for waiting
    /// `durable` producers.
    pub(crate) fn tick(self: &Rc<Self>, now: Instant) {
        let sealed = {
            let mut state = self.state.borrow_mut();
            let Some(active) = state.active.as_ref() else {
                return;
            };
            if active.is_empty()
                || !state.may_seal(active.file_bytes(), self.config.unflushed_bytes_max)
            {
                return;
            }
            let aged = now.duration_since(active.opened_at()) >= self.config.flush_age();
            let durable = state
                .durable_waiting_since
                .is_some_and(|t| now.duration_since(t) >= self.config.durable_linger());
            if !(aged || durable) {
                return;
            }
            match self.seal_active(&mut state) {
                Ok(sealed) => sealed,
                Err(e) => {
                    log::error!("segment {}: seal failed: {}", self.chunk_prefix, e.message);
                    false
                }
            }
        };
        if sealed {
            self.start_flush();
        }
    }

    /// Shutdown: seal whatever is buffered, wait until it is in the filer,
    /// and take no more writes.
    pub(crate) async fn shut_down(self: &Rc<Self>) -> Result<(), ServeError> {
        let target = {
            let mut state = self.state.borrow_mut();
            self.seal_active(&mut state)?;
            state.next_offset
        };
        self.start_flush();
        self.wait_flushed(target)
            .await
            .map_err(|e| ServeError::storage(&e))?;
        // A spare being made on the blocking pool must finish before the
        // executor goes away; none is started once the shard stops.
        self.closed.set(Closed::Stopped);
        // Parked fetches answer now (ShuttingDown), not at their deadline.
        self.appended.notify(usize::MAX);
        while self.state.borrow().spares_pending > 0 {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }

    /// Make the next buffers on the blocking pool while this one fills.
    fn prepare_spare(self: &Rc<Self>) {
        loop {
            let path = {
                let mut state = self.state.borrow_mut();
                if state.spares.len() + state.spares_pending >= SPARES_MAX || self.is_closed() {
                    return;
                }
                state.spares_pending += 1;
                state.spare_counter += 1;
                self.buffers_dir.join(format!(
                    "{}{}.buf",
                    crate::buffer::SPARE_PREFIX,
                    state.spare_counter
                ))
            };
            let cell = self.clone();
            let capacity = self.config.buffer_bytes as usize;
            glommio::spawn_local(async move {
                let made = blocking(move || {
                    let spare = SpareBuffer::create(path, capacity)?;
                    spare.populate();
                    Ok::<_, EngineError>(spare)
                })
                .await;
                let mut state = cell.state.borrow_mut();
                state.spares_pending -= 1;
                match made {
                    Ok(spare) if cell.is_closed() => {
                        let _ = std::fs::remove_file(spare.path());
                    }
                    Ok(spare) => state.spares.push(spare),
                    Err(e) => log::warn!("segment {}: spare buffer: {e}", cell.chunk_prefix),
                }
            })
            .detach();
        }
    }

    fn start_flush(self: &Rc<Self>) {
        {
            let mut state = self.state.borrow_mut();
            // A failed segment's front buffer is not trusted: nothing more
            // is flushed behind it.
            if state.flushing || state.sealed.is_empty() || state.failed.is_some() {
                return;
            }
            state.flushing = true;
        }
        let cell = self.clone();
        glommio::spawn_local(async move { cell.flush_loop().await }).detach();
    }

    /// Write sealed buffers to the filer in order. A filer that stops
    /// answering holds producers back (the flusher retries with backoff);
    /// it loses nothing. A buffer whose hand-over failed is never synced
    /// again: after a failed `fdatasync` Linux may have dropped its dirty
    /// pages and cleared the error, so a second sync could succeed with the
    /// bytes gone. Its bytes are read back once, verified against their
    /// checksums, and stored from memory into a new object from then on;
    /// bytes that no longer verify were lost, and the segment fails.
    async fn flush_loop(self: Rc<Self>) {
        let mut backoff = FLUSH_BACKOFF_MIN;
        // The front buffer's chunk bytes once its file is no longer
        // trusted (the front changes only when it is stored, which clears
        // this).
        let mut held: Option<Arc<Vec<u8>>> = None;
        // Failed attempts to store the front buffer.
        let mut failures = 0u64;
        loop {
            if self.is_closed() {
                break;
            }
            let Some(buffer) = self.state.borrow().sealed.front().cloned() else {
                break;
            };
            let base_offset = buffer.header().base_offset;
            let path = filer_layout::chunk(&self.topic, self.id, base_offset);
            let rewrite = held.clone();
            let rewriting = rewrite.is_some();
            let job_buffer = buffer.clone();
            let job_path = path.clone();
            let behind: Vec<PathBuf> = self
                .state
                .borrow()
                .sealed
                .iter()
                .skip(1)
                .take(WRITEBACK_AHEAD_BUFFERS)
                .map(|b| b.path().to_path_buf())
                .collect();
            let result = self
                .store
                .upload(move |filer| {
                    // Start the disk on the buffers behind this one, so their
                    // own syncs find most pages written and the disk never
                    // idles between two flushes.
                    for path in &behind {
                        start_writeback(path);
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
                            match holds_exactly(filer, &job_path, ours) {
                                Ok(true) => remove_stored_buffer(job_buffer.path()),
                                Ok(false) => Err(FlushError::Fenced { chunk: job_path }),
                                Err(e) => Err(FlushError::Filer(e)),
                            }
                        }
                        other => other.map_err(FlushError::Filer),
                    }
                })
                .await;
            match result {
                Ok(()) => {
                    backoff = FLUSH_BACKOFF_MIN;
                    if failures > 0 {
                        if let Some(held_back) = self.store.admit_flush_resume(Instant::now()) {
                            log::info!(
                                "segment {}: chunk {path} stored after {failures} failed \
                                 attempts; flushing resumed{}",
                                self.chunk_prefix,
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
                    let mut state = self.state.borrow_mut();
                    state.sealed.pop_front();
                    state.sealed_bytes -= buffer.header().file_bytes();
                    state.flushed_offset = skip_lost(&state.lost, buffer.header().next_offset);
                    state.chunks.push(ChunkMeta {
                        path,
                        header: *buffer.header(),
                        damaged: None,
                    });
                    if state.flushed_offset >= state.next_offset
                        || state.active.as_ref().is_none_or(|a| a.is_empty())
                    {
                        state.durable_waiting_since = None;
                    }
                    drop(state);
                    self.flushed.notify(usize::MAX);
                    self.space.notify(usize::MAX);
                    continue;
                }
                Err(fenced @ FlushError::Fenced { .. }) => {
                    self.fail(fenced.to_string());
                    break;
                }
                Err(e) if !rewriting => {
                    failures += 1;
                    if let Some(held_back) = self.store.admit_flush_error(Instant::now()) {
                        log::error!(
                            "segment {}: storing chunk {path} from {} failed: {e}; the file is \
                             not trusted again, its bytes are verified and stored from memory{}",
                            self.chunk_prefix,
                            buffer.path().display(),
                            held_back_note(held_back, "failed flush attempts")
                        );
                    }
                    let check = buffer.clone();
                    match blocking(move || verified_chunk_copy(check.chunk_bytes())).await {
                        Ok(bytes) => held = Some(Arc::new(bytes)),
                        Err(reason) => {
                            self.fail(format!(
                                "chunk {path}: its bytes were lost after a failed write \
                                 ({reason}); offsets {base_offset}..{} are not stored",
                                buffer.header().next_offset
                            ));
                            break;
                        }
                    }
                }
                Err(e) => {
                    failures += 1;
                    if let Some(held_back) = self.store.admit_flush_error(Instant::now()) {
                        log::error!(
                            "segment {}: storing chunk {path} from memory failed ({failures} \
                             attempts so far), retrying in {backoff:?}: {e}{}",
                            self.chunk_prefix,
                            held_back_note(held_back, "failed flush attempts")
                        );
                    }
                }
            }
            glommio::timer::sleep(backoff).await;
            backoff = (backoff * 2).min(FLUSH_BACKOFF_MAX);
        }
        self.state.borrow_mut().flushing = false;
    }

    /// Give up on the segment: log why, refuse writes, and wake everyone
    /// waiting on it (a durable producer gets the error, not an ack).
    fn fail(&self, reason: String) {
        log::error!(
            "segment {}: failed, taking no more writes: {reason}",
            self.chunk_prefix
        );
        let mut state = self.state.borrow_mut();
        if state.failed.is_none() {
            state.failed = Some(reason);
        }
        drop(state);
        self.flushed.notify(usize::MAX);
        self.space.notify(usize::MAX);
        self.appended.notify(usize::MAX);
    }

    /// Wait until every offset below `offset` is in the filer.
    pub(crate) async fn wait_flushed(&self, offset: u64) -> Result<(), EngineError> {
        loop {
            let listener = self.flushed.listen();
            {
                let mut state = self.state.borrow_mut();
                if state.flushed_offset >= offset {
                    return Ok(());
                }
                if let Some(reason) = &state.failed {
                    return Err(EngineError::Segment {
                        segment: self.chunk_prefix.to_string(),
                        reason: format!("failed: {reason}"),
                    });
                }
                if self.is_closed() {
                    return Err(EngineError::Segment {
                        segment: self.chunk_prefix.to_string(),
                        reason: "closed before flush".into(),
                    });
                }
                if state.durable_waiting_since.is_none() {
                    state.durable_waiting_since = Some(Instant::now());
                }
            }
            listener.await;
        }
    }

    /// Stop serving: the topic is being deleted. Removes local buffers.
    pub(crate) fn close(&self) {
        self.closed.set(Closed::Deleted);
        // The topic's name, and so its chunk paths, may be taken again.
        self.store.forget(&self.chunk_prefix);
        let mut state = self.state.borrow_mut();
        state.active = None;
        state.sealed.clear();
        state.sealed_bytes = 0;
        state.spares.clear();
        drop(state);
        if let Err(e) = std::fs::remove_dir_all(&self.buffers_dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("remove {}: {e}", self.buffers_dir.display());
            }
        }
        self.appended.notify(usize::MAX);
        self.flushed.notify(usize::MAX);
        self.space.notify(usize::MAX);
    }

    /// Read batches from `from`, waiting up to `max_wait` for new data.
    pub(crate) async fn fetch(
        self: &Rc<Self>,
        from: FetchFrom,
        max_bytes: usize,
        max_wait: Duration,
        checks: FetchChecks,
    ) -> Result<FetchResult, ServeError> {
        if self.seal.get() == SealState::Sealing && self.is_view() {
            self.refresh_sealed().await?;
        }
        let start = self.resolve(from).await?;
        let deadline = Instant::now() + max_wait;
        loop {
            let listener = self.appended.listen();
            let next = self.state.borrow().next_offset;
            if start < next || self.is_closed() {
                break;
            }
            let now = Instant::now();
            let seal = self.seal.get();
            if now >= deadline || seal == SealState::Sealed {
                return Ok(FetchResult {
                    start_offset: start,
                    next_offset: start,
                    high_watermark: next,
                    sealed: seal == SealState::Sealed,
                    body: FetchBody::Copied(vec![0; FETCHED_FRAME_PREFIX_BYTES]),
                });
            }
            if self.is_view() {
                // A view of a segment sealed elsewhere: nothing here wakes
                // it, so look again in a while.
                glommio::timer::sleep(SEAL_POLL.min(deadline - now)).await;
                self.refresh_sealed().await?;
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
        let sealed = self.seal.get() == SealState::Sealed;
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
        Ok(result)
    }

    /// Turn a start position into an offset.
    async fn resolve(self: &Rc<Self>, from: FetchFrom) -> Result<u64, ServeError> {
        let (earliest, next) = {
            let state = self.state.borrow();
            let earliest = state
                .chunks
                .first()
                .map(|c| c.header.base_offset)
                .or_else(|| state.memory_buffers().next().map(|b| b.base_offset))
                .unwrap_or(state.next_offset);
            (earliest, state.next_offset)
        };
        match from {
            FetchFrom::Earliest => Ok(earliest),
            FetchFrom::Latest => Ok(next),
            FetchFrom::Offset(o) if o > next => Err(ServeError::new(
                ErrorCode::InvalidArgument,
                format!("offset {o} is past the end of segment {} ({next})", self.id),
            )),
            // Lost offsets hold nothing to read: the next record is after.
            FetchFrom::Offset(o) => Ok(skip_lost(&self.state.borrow().lost, o.max(earliest))),
            FetchFrom::Timestamp(t) => self.find_timestamp(t).await,
        }
    }

    /// The first offset whose record timestamp is at least `t`, or the end.
    async fn find_timestamp(self: &Rc<Self>, t: i64) -> Result<u64, ServeError> {
        let candidates: Vec<ChunkMeta> = {
            let state = self.state.borrow();
            state
                .chunks
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
        Ok(state.next_offset)
    }

    /// Serve from a buffer still in memory, if `start` is in one.
    fn read_memory(&self, start: u64, max_bytes: usize) -> Result<Option<FetchResult>, ServeError> {
        let high_watermark = self.state.borrow().next_offset;
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
        self: &Rc<Self>,
        start: u64,
        max_bytes: usize,
    ) -> Result<Option<(FileRange, u64)>, ServeError> {
        let piece = match self.memory_piece(start, max_bytes)? {
            Some(piece) => Some(piece),
            None => {
                let chunk = self.state.borrow().chunk_holding(start).cloned();
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
        if let Some(open) = &self.state.borrow().chunk_file_cache {
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
        self.state.borrow_mut().chunk_file_cache = Some(open.clone());
        Ok(Some(open))
    }

    /// Serve from a chunk in the filer.
    async fn read_chunks(
        self: &Rc<Self>,
        start: u64,
        max_bytes: usize,
        checks: FetchChecks,
    ) -> Result<FetchResult, ServeError> {
        let (chunk, high_watermark) = {
            let state = self.state.borrow();
            let chunk = state.chunk_holding(start).cloned().ok_or_else(|| {
                ServeError::new(
                    ErrorCode::Internal,
                    format!("offset {start} of segment {} is in no chunk", self.id),
                )
            })?;
            (chunk, state.next_offset)
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
        if let Some(s) = &self.state.borrow().scanned_cache {
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
        self.state.borrow_mut().scanned_cache = Some(scanned.clone());
        Ok(scanned)
    }

    /// The index of a chunk, from the one-entry cache or the filer.
    async fn chunk_index(&self, chunk: &ChunkMeta) -> Result<Rc<Vec<ChunkIndexEntry>>, ServeError> {
        if let Some((base, index)) = &self.state.borrow().index_cache {
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
        self.state.borrow_mut().index_cache = Some((chunk.header.base_offset, index.clone()));
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

/// What the filer holds of a segment: its chunks by base offset (headers
/// verified) and its lost ranges by first offset.
#[derive(Debug, Default)]
struct Stored {
    chunks: Vec<ChunkMeta>,
    lost: Vec<LostRange>,
    /// When the last chunk's header is damaged: the offsets after its last
    /// readable batch that it may have held (its end is not known). The
    /// owner records them as lost so none is handed out again.
    unknown_tail: Option<LostRange>,
}

impl Stored {
    /// Record `lost` of segment `id` in the filer (no bytes of it are
    /// readable) and take it among the lost ranges, kept sorted.
    async fn fence(
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
    fn end(&self) -> u64 {
        let chunks = self.chunks.last().map_or(0, |c| c.header.next_offset);
        let lost = self.lost.iter().map(|l| l.to).max().unwrap_or(0);
        chunks.max(lost)
    }
}

/// Every chunk and lost range of a segment.
fn load_stored(filer: &dyn Filer, prefix: &ObjectPath) -> Result<Stored, EngineError> {
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

/// `offset`, or the end of the lost ranges it falls in (`lost` sorted by
/// first offset; ranges may touch).
fn skip_lost(lost: &[LostRange], mut offset: u64) -> u64 {
    for range in lost {
        if range.from <= offset && offset < range.to {
            offset = range.to;
        }
    }
    offset
}

/// A sealed segment's chunks, and whether its seal marker is there.
fn load_sealed(
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wire::BatchBuilder;

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
            chunk: ObjectPath::new("topics/ns/t/0/00000000000000000000.chunk").unwrap(),
        };
        assert_eq!(
            fenced.to_string(),
            "chunk topics/ns/t/0/00000000000000000000.chunk exists with other bytes: another \
             writer stored this segment's offsets; this broker's are fenced off"
        );
        assert_eq!(
            verified_chunk_copy(b"not a chunk").unwrap_err(),
            wire::chunk::ChunkView::open(b"not a chunk").unwrap_err()
        );
    }

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
