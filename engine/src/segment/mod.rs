//! The segments a shard serves, split by job:
//!
//! - [`segment_log`]: the pure log of one segment (offsets, the queue of sealed
//!   buffers, chunks, lost ranges, the flusher's claim, failure), sans-IO
//!   and asserted at every step.
//! - [`SegmentCell`] (here): a segment this shard owns, the writer: the
//!   active buffer, appends, sealing by size, age or a waiting `durable`
//!   producer, spare buffers, the seal protocol, shutdown and delete.
//! - [`flusher`]: stores sealed buffers in the filer, in order, and never
//!   trusts a file whose hand-over failed again.
//! - [`reader`]: fetches from memory buffers, local chunk files and chunks
//!   in the filer, verified where asked or where a chunk is damaged.
//! - [`SealedView`]: a segment sealed on another broker (or before this
//!   one started), for reads only: its own type, with no buffers, no
//!   writes and no flusher.
//! - [`stored`]: what the filer holds of a segment, listed.
//!
//! A segment is touched only by its shard's thread. Filer calls run on the
//! shard's filer lanes so a slow filer never stalls the shard; it only stops
//! that segment's producers once `unflushed_bytes_max` of sealed buffers wait
//! (backpressure, never loss). A `leader` ack never waits for the filer: the
//! sealed buffers are files whose pages the kernel writes back while the
//! flusher works through them in order.

mod buffer_size;
mod flusher;
mod followers;
mod producers;
mod reader;
mod segment_log;
mod stored;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_listener::Event;
use filer::ObjectPath;
use kafka::idempotence::ProducerBatch;
use tracing::Instrument;
use wire::batch::BatchView;
use wire::message::Successors;
use wire::ErrorCode;

use control::{filer_layout, TopicName};

use crate::buffer::{ActiveBuffer, SealedBuffer, SpareBuffer};
use crate::config::BrokerConfig;
use crate::error::EngineError;
use crate::recovery::{recover_buffers, LostRange, SegmentDirs};
use crate::serve_error::ServeError;
use crate::shard_filer::ShardFiler;

use self::buffer_size::BufferSize;
use self::followers::SegmentFollowers;
use self::producers::SegmentProducers;
pub(crate) use self::producers::{kelp_batch, Placed};
pub(crate) use self::reader::{FetchBody, FetchResult};
use self::reader::{ReadCache, Tail};
pub(crate) use self::segment_log::SealState;
use self::segment_log::{skip_lost, QueuedBuffer, SegmentLog};
use self::stored::{load_sealed, load_stored};

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
    /// The control plane sealed it in the filer while this broker was
    /// away (declared dead): its flusher found the fence (`segment_fence`)
    /// where its next chunk should go. Buffers removed; reads and writes
    /// are answered `NotOwner`, so clients look again.
    Fenced,
}

/// Under the data dir: damaged buffer files kept for the operator, by
/// topic and segment (`recovery`).
const QUARANTINE_DIR: &str = "quarantine";

/// Spare buffers a segment keeps ready. Making one (create, fallocate,
/// map, and bring its pages into the page cache) on the blocking pool can
/// take as long as filling one at full speed on a fresh VM: with one
/// spare, a profile showed the shard making its next buffer itself, so two
/// are made at once (BENCHMARKS.md, 2d0851b). Each costs `buffer_bytes` of
/// reserved disk and page cache, and only segments that roll buffers ever
/// get one.
const SPARES_MAX: usize = 2;

/// A spare's pages are brought in ahead only for a segment whose last
/// sealed buffer held at least `buffer_bytes` over this. One that seals
/// nearly empty buffers (a quiet segment with durable producers: a chunk a
/// record) would otherwise pay for 8 MiB of page cache per chunk, and its
/// durable writes wait on the truncate to the chunk's length that drops
/// them again (1-2 ms against 0.2 ms, BENCHMARKS.md).
const POPULATE_FILL_DIVISOR: u64 = 8;

/// How often a producer waiting for disk room (`disk_full_wait_ms`) tries
/// to make the segment's next buffer again.
pub(crate) const DISK_FULL_RETRY: Duration = Duration::from_millis(200);

/// An active buffer's appended bytes are handed to the kernel's write-back
/// (on the blocking pool) each time this many more have come in. Without
/// it a 64 MiB buffer's pages were written back in one burst after its
/// seal, stealing the shard's core for longer than a small buffer's did.
const WRITEBACK_STEP_BYTES: u64 = 8 << 20;

impl QueuedBuffer for Arc<SealedBuffer> {
    fn header(&self) -> &wire::chunk::ChunkHeader {
        SealedBuffer::header(self)
    }
}

/// The mutable state of a segment.
#[derive(Debug)]
struct SegmentState {
    log: SegmentLog<Arc<SealedBuffer>>,
    /// The buffer appends go to (only ever on a segment this shard owns).
    active: Option<ActiveBuffer>,
    /// How big the next buffer (or spare) is made.
    buffer_size: BufferSize,
    /// What the last reads opened, kept for the next.
    cache: ReadCache,
}

impl SegmentState {
    fn new(log: SegmentLog<Arc<SealedBuffer>>, buffer_size: BufferSize) -> SegmentState {
        SegmentState {
            log,
            active: None,
            buffer_size,
            cache: ReadCache::default(),
        }
    }
}

/// Spare buffers of a segment that rolls buffers: made off the shard's
/// thread while the active one fills.
#[derive(Debug, Default)]
struct Spares {
    ready: Vec<SpareBuffer>,
    /// Being made on the blocking pool.
    pending: usize,
    /// Names the next spare file.
    counter: u64,
}

/// What every segment a shard serves has, whether it owns it
/// ([`SegmentCell`]) or reads it sealed ([`SealedView`]): its identity,
/// where its chunks are, its state, and the readers' wake-ups.
#[derive(Debug)]
pub(crate) struct SegmentCore {
    pub(crate) id: u32,
    pub(crate) range_start: u32,
    pub(crate) range_end: u64,
    topic: TopicName,
    /// `filer_layout::segment_prefix`: where the chunks and marker are.
    chunk_prefix: ObjectPath,
    /// The filer, through the shard's lanes and chunk cache.
    store: Rc<ShardFiler>,
    config: Rc<BrokerConfig>,
    pub(crate) stats: Arc<SegmentStats>,
    state: RefCell<SegmentState>,
    /// Serving, stopped with its broker, or deleted with its topic.
    closed: Cell<Closed>,
    /// Once sealing, where its range went (named in refused writes), as
    /// the latest layout says.
    successors: RefCell<Option<Arc<Successors>>>,
    /// Rung when records are appended, the segment seals or it closes;
    /// long-polling readers of an owned segment wait on it (a view has
    /// nothing to ring it and looks again instead: [`Tail::Polled`]).
    appended: Event,
}

impl SegmentCore {
    /// The span its background work (flushes) logs in.
    fn span(&self) -> tracing::Span {
        tracing::error_span!("segment", topic = %self.topic, segment = self.id)
    }

    fn new(
        config: Rc<BrokerConfig>,
        store: Rc<ShardFiler>,
        topic: &TopicName,
        id: u32,
        (range_start, range_end): (u32, u64),
        log: SegmentLog<Arc<SealedBuffer>>,
    ) -> SegmentCore {
        let stats = Arc::new(SegmentStats::default());
        stats
            .next_offset
            .store(log.next_offset(), Ordering::Relaxed);
        stats
            .lost_records
            .store(log.lost_records(), Ordering::Relaxed);
        let buffer_size = BufferSize::new(config.buffer_bytes, config.buffer_bytes_max);
        SegmentCore {
            id,
            range_start,
            range_end,
            topic: topic.clone(),
            chunk_prefix: filer_layout::segment_prefix(topic, id),
            store,
            config,
            stats,
            state: RefCell::new(SegmentState::new(log, buffer_size)),
            closed: Cell::new(Closed::Serving),
            successors: RefCell::new(None),
            appended: Event::new(),
        }
    }

    /// Whether the segment takes writes.
    pub(crate) fn seal_state(&self) -> SealState {
        self.state.borrow().log.seal_state()
    }

    /// Where the range went, named from now on in refused writes.
    pub(crate) fn set_successors(&self, successors: Option<Arc<Successors>>) {
        *self.successors.borrow_mut() = successors;
    }

    /// Whether a key hash belongs to this segment.
    pub(crate) fn covers(&self, hash: u32) -> bool {
        hash >= self.range_start && u64::from(hash) < self.range_end
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
            Closed::Fenced => Some(ServeError::new(
                ErrorCode::NotOwner,
                format!(
                    "segment {} was sealed while this broker was away (declared dead); \
                     ask for the topic's layout again",
                    self.id
                ),
            )),
        }
    }

    /// Whether the control plane's fence stopped this owner
    /// ([`SegmentCell::fence`]).
    pub(crate) fn is_fenced(&self) -> bool {
        self.closed.get() == Closed::Fenced
    }

    /// Stop serving reads: the broker stops. Parked fetches answer now
    /// (`ShuttingDown`), not at their deadline.
    fn stop_serving(&self) {
        self.closed.set(Closed::Stopped);
        self.appended.notify(usize::MAX);
    }

    /// Stop serving for good: the topic is being deleted, and its name (so
    /// its chunk paths) may be taken again.
    fn delete(&self) {
        self.close_as(Closed::Deleted);
    }

    /// Stop serving for good (`Deleted` or `Fenced`): the shard's cache
    /// forgets the chunks, and parked fetches answer now.
    fn close_as(&self, closed: Closed) {
        self.closed.set(closed);
        self.store.forget(&self.chunk_prefix);
        self.appended.notify(usize::MAX);
    }
}

pub(crate) async fn blocking<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    glommio::executor()
        .spawn_blocking(move || {
            crate::background_priority::lower_this_thread();
            f()
        })
        .await
}

/// A segment this shard owns: the writer.
#[derive(Debug)]
pub(crate) struct SegmentCell {
    pub(crate) core: SegmentCore,
    /// Where its buffers are on local disk.
    buffers_dir: PathBuf,
    spares: RefCell<Spares>,
    /// A write-back of the active buffer's pages is being started on the
    /// blocking pool: at most one at a time, so a congested disk holds one
    /// pool thread per segment, and never the spares' making behind a queue.
    writeback_started: Cell<bool>,
    /// Rung when a chunk is stored, or the segment fails or closes.
    flushed: Event,
    /// Rung when the flush queue has room again, or writes are refused.
    space: Event,
    /// Its idempotent kelp producers ([`producers`]).
    producers: SegmentProducers,
    /// Its followers, as the layout names them, and their progress.
    followers: RefCell<SegmentFollowers>,
    /// Rung when a follower fetches further, or the followers change.
    replicated: Event,
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
            store
                .read(move |filer| load_stored(filer, &prefix, &[]))
                .await?
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
        let mut log = SegmentLog::new(
            SealState::Open,
            stored.chunks,
            chunk_end,
            sealed,
            next_offset,
        );
        log.set_lost(stored.lost);
        let cell = Rc::new(SegmentCell {
            core: SegmentCore::new(config, store, topic, id, (range_start, range_end), log),
            buffers_dir,
            spares: RefCell::new(Spares::default()),
            writeback_started: Cell::new(false),
            flushed: Event::new(),
            space: Event::new(),
            producers: SegmentProducers::default(),
            followers: RefCell::new(SegmentFollowers::default()),
            replicated: Event::new(),
        });
        let recovered_end = cell.core.state.borrow().log.sealed_end();
        if let Some(target) = recovered_end {
            log::info!(
                "segment {}/{id}: recovered buffers up to offset {next_offset}; flushing",
                cell.core.chunk_prefix
            );
            cell.start_flush();
            cell.wait_flushed(target).await?;
        }
        Ok(cell)
    }

    /// Seal the active buffer and wait until everything appended so far
    /// is in the filer.
    async fn flush_everything(self: &Rc<Self>) -> Result<(), ServeError> {
        let target = {
            let mut state = self.core.state.borrow_mut();
            seal_active(&mut state, Instant::now())?;
            state.log.next_offset()
        };
        self.start_flush();
        self.wait_flushed(target)
            .await
            .map_err(|e| ServeError::storage(&e))
    }

    /// Seal the segment for good (the control plane moved its range to
    /// successors): refuse writes from now on, flush everything buffered,
    /// drop the local buffers, then store the seal marker so readers on
    /// any broker know the chunks are final. Idempotent.
    pub(crate) async fn seal(self: &Rc<Self>, epoch: u32) -> Result<(), ServeError> {
        let core = &self.core;
        if core.seal_state() == SealState::Sealed || core.is_fenced() {
            return Ok(());
        }
        self.refuse_writes(None);
        if let Err(e) = self.flush_everything().await {
            // The control plane sealed it in the filer first (this broker
            // was declared dead meanwhile): sealed, by its marker.
            if core.is_fenced() {
                return Ok(());
            }
            return Err(e);
        }
        self.spares_settled().await;
        core.state.borrow_mut().active = None;
        self.spares.borrow_mut().ready.clear();
        if let Err(e) = std::fs::remove_dir_all(&self.buffers_dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("remove {}: {e}", self.buffers_dir.display());
            }
        }
        let by = core
            .config
            .broker_id
            .map_or_else(|| "broker".to_owned(), |b| format!("broker {b}"));
        let (topic, id) = (core.topic.clone(), core.id);
        let end = core.state.borrow().log.next_offset();
        let created = core
            .store
            .upload(move |filer| {
                filer_layout::create_seal_marker(filer, &topic, id, epoch, end, &by)
            })
            .await
            .map_err(|e| ServeError::new(ErrorCode::Storage, e.to_string()))?;
        if !created {
            log::info!(
                "segment {}: sealed already (the control plane wrote its marker)",
                core.chunk_prefix
            );
        }
        core.state.borrow_mut().log.handle_sealed_for_good();
        // Long-polling readers at the end learn that it is the end.
        core.appended.notify(usize::MAX);
        Ok(())
    }

    /// The first step of [`SegmentCell::seal`], taken at once: refuse
    /// writes from now on, naming `successors` (if given) in each refusal.
    pub(crate) fn refuse_writes(&self, successors: Option<Arc<Successors>>) {
        if successors.is_some() {
            self.core.set_successors(successors);
        }
        if self.core.state.borrow_mut().log.handle_refuse_writes() {
            // Producers held back by a full flush queue see the seal.
            self.space.notify(usize::MAX);
        }
    }

    /// Append a validated batch; waits while the flush queue is full.
    pub(crate) async fn append(
        self: &Rc<Self>,
        batch: &BatchView<'_>,
        producer: Option<ProducerBatch>,
    ) -> Result<Placed, ServeError> {
        let core = &self.core;
        let len = batch.bytes().len();
        let batch_records = batch.record_count();
        if producer.is_some() {
            self.producers.ready(&self.core, Tail::Appended).await?;
        }
        // Since when this append has found the disk full.
        let mut disk_full_since: Option<Instant> = None;
        loop {
            if let Some(e) = core.closed_error() {
                return Err(e);
            }
            let seal = core.seal_state();
            if seal != SealState::Open {
                if let Some(batch) = &producer {
                    // A resend of a batch stored before the seal is
                    // answered with its offsets, once they are final.
                    let stored_end = core.state.borrow().log.flushed_offset();
                    let placed = self
                        .producers
                        .sealed_duplicate(core, Tail::Appended, batch, batch_records, stored_end)
                        .await?;
                    match (placed, seal) {
                        (Some(placed), SealState::Sealed) => return Ok(placed),
                        (Some(_), _) => return Err(being_sealed(core.id)),
                        (None, _) => {}
                    }
                }
                return Err(ServeError::sealed(
                    core.id,
                    core.successors.borrow().clone(),
                ));
            }
            // Checked at every turn, and the append below follows with no
            // yield between: a copy of this batch appended meanwhile (from
            // another connection) is found here.
            if let Some(batch) = &producer {
                if let Some(placed) = self.producers.check(self.core.id, batch, batch_records)? {
                    return Ok(placed);
                }
            }
            let listener = {
                let mut state = core.state.borrow_mut();
                if let Some(reason) = state.log.failed() {
                    return Err(ServeError::new(
                        ErrorCode::Storage,
                        format!("segment {} failed: {reason}", core.id),
                    ));
                }
                let needs_roll = state.active.as_ref().is_none_or(|a| !a.fits(len));
                if !needs_roll {
                    let active = state.active.as_mut().ok_or_else(ServeError::internal)?;
                    let (base, next) = active.append(batch).map_err(|e| ServeError::storage(&e))?;
                    let writeback = if self.writeback_started.get() {
                        None
                    } else {
                        active
                            .writeback_due(WRITEBACK_STEP_BYTES)
                            .map(|range| (Arc::clone(active.mapped()), range))
                    };
                    state.log.handle_append(base, next);
                    drop(state);
                    if let Some(batch) = producer {
                        self.producers.stored(batch, base, next);
                    }
                    if let Some((mapped, (from, len))) = writeback {
                        self.writeback_started.set(true);
                        let cell = self.clone();
                        glommio::spawn_local(async move {
                            blocking(move || mapped.start_writeback(from, len)).await;
                            cell.writeback_started.set(false);
                        })
                        .detach();
                    }
                    let stats = &core.stats;
                    stats.next_offset.store(next, Ordering::Relaxed);
                    stats
                        .appended_bytes
                        .fetch_add(len as u64, Ordering::Relaxed);
                    stats
                        .appended_records
                        .fetch_add(next - base, Ordering::Relaxed);
                    if stats.first_append_ms.load(Ordering::Relaxed) == 0 {
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(1, |d| d.as_millis() as u64);
                        stats.first_append_ms.store(now, Ordering::Relaxed);
                    }
                    core.appended.notify(usize::MAX);
                    return Ok(Placed {
                        base,
                        next,
                        duplicate: false,
                    });
                }
                let active_bytes = state.active.as_ref().map_or(0, |a| a.file_bytes());
                if state
                    .log
                    .may_seal(active_bytes, core.config.unflushed_bytes_max)
                {
                    let sealed_one = seal_active(&mut state, Instant::now())?;
                    let capacity = (state.buffer_size.next() as usize).max(len);
                    let base = state.log.next_offset();
                    let path = self.buffers_dir.join(format!("{base:020}.buf"));
                    let spare = self.spares.borrow_mut().ready.pop();
                    let next = match spare {
                        Some(spare) if spare.data_capacity() >= len => {
                            spare.activate(path, core.id, base)
                        }
                        _ => ActiveBuffer::create(path, core.id, base, capacity),
                    };
                    let failed = match next {
                        Ok(next) => {
                            state.active = Some(next);
                            None
                        }
                        Err(e) => Some(e),
                    };
                    drop(state);
                    if sealed_one {
                        self.start_flush();
                    }
                    let Some(e) = failed else {
                        self.prepare_spare();
                        continue;
                    };
                    let now = Instant::now();
                    let since = *disk_full_since.get_or_insert(now);
                    let wait = Duration::from_millis(core.config.disk_full_wait_ms);
                    if !is_disk_full(&e) || now.saturating_duration_since(since) >= wait {
                        return Err(ServeError::storage(&e));
                    }
                    if since == now {
                        log::warn!(
                            "segment {}: {e}; its producers wait up to {} ms for room \
                             (--disk-full-wait-ms)",
                            core.chunk_prefix,
                            wait.as_millis()
                        );
                    }
                    None
                } else {
                    Some(self.space.listen())
                }
            };
            let Some(listener) = listener else {
                glommio::timer::sleep(DISK_FULL_RETRY).await;
                continue;
            };
            // Re-check after registering, then wait for the flusher.
            {
                let state = core.state.borrow();
                let active_bytes = state.active.as_ref().map_or(0, |a| a.file_bytes());
                if state
                    .log
                    .may_seal(active_bytes, core.config.unflushed_bytes_max)
                {
                    continue;
                }
            }
            listener.await;
        }
    }

    /// Called by the shard's ticker: seal by age, or early for waiting
    /// `durable` producers.
    pub(crate) fn tick(self: &Rc<Self>, now: Instant) {
        self.seal_if_due(now);
    }

    /// Seal the active buffer and start its flush if it is old enough, or
    /// if a `durable` producer waits and the last seal is a linger ago
    /// ([`SegmentLog::durable_seal_due`]).
    fn seal_if_due(self: &Rc<Self>, now: Instant) {
        let core = &self.core;
        let sealed = {
            let mut state = core.state.borrow_mut();
            let Some(active) = state.active.as_ref() else {
                return;
            };
            if active.is_empty()
                || !state
                    .log
                    .may_seal(active.file_bytes(), core.config.unflushed_bytes_max)
            {
                return;
            }
            let aged = now.duration_since(active.opened_at()) >= core.config.flush_age();
            let durable = state
                .log
                .durable_seal_due(now, core.config.durable_linger());
            if !(aged || durable) {
                return;
            }
            match seal_active(&mut state, now) {
                Ok(sealed) => sealed,
                Err(e) => {
                    log::error!("segment {}: seal failed: {}", core.chunk_prefix, e.message);
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
        self.flush_everything().await?;
        self.core.stop_serving();
        // A spare being made on the blocking pool must finish before the
        // executor goes away; none is started once the shard stops.
        self.spares_settled().await;
        Ok(())
    }

    /// Wait until no spare buffer is being made on the blocking pool.
    async fn spares_settled(&self) {
        while self.spares.borrow().pending > 0 {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Make the next buffers on the blocking pool while this one fills.
    fn prepare_spare(self: &Rc<Self>) {
        loop {
            let path = {
                let mut spares = self.spares.borrow_mut();
                if spares.ready.len() + spares.pending >= SPARES_MAX || self.core.is_closed() {
                    return;
                }
                spares.pending += 1;
                spares.counter += 1;
                self.buffers_dir.join(format!(
                    "{}{}.buf",
                    crate::buffer::SPARE_PREFIX,
                    spares.counter
                ))
            };
            let cell = self.clone();
            let (capacity, populate) = {
                let state = self.core.state.borrow();
                (
                    state.buffer_size.next() as usize,
                    state.log.last_sealed_bytes()
                        >= self.core.config.buffer_bytes / POPULATE_FILL_DIVISOR,
                )
            };
            glommio::spawn_local(async move {
                let made = blocking(move || {
                    let spare = SpareBuffer::create(path, capacity)?;
                    if populate {
                        spare.populate();
                    }
                    Ok::<_, EngineError>(spare)
                })
                .await;
                let mut spares = cell.spares.borrow_mut();
                spares.pending -= 1;
                match made {
                    Ok(spare) if cell.core.is_closed() => {
                        let _ = std::fs::remove_file(spare.path());
                    }
                    Ok(spare) => spares.ready.push(spare),
                    Err(e) => log::warn!("segment {}: spare buffer: {e}", cell.core.chunk_prefix),
                }
            })
            .detach();
        }
    }

    /// Start the flusher if buffers wait and none runs.
    fn start_flush(self: &Rc<Self>) {
        // A failed segment's front buffer is not trusted: nothing more is
        // flushed behind it (the log refuses the claim).
        if !self.core.state.borrow_mut().log.claim_flusher() {
            return;
        }
        let cell = self.clone();
        let span = self.core.span();
        glommio::spawn_local(async move { flusher::run(cell).await }.instrument(span)).detach();
    }

    /// Give up on the segment: log why, refuse writes, and wake everyone
    /// waiting on it (a durable producer gets the error, not an ack).
    fn fail(&self, reason: String) {
        log::error!(
            "segment {}: failed, taking no more writes: {reason}",
            self.core.chunk_prefix
        );
        self.core.state.borrow_mut().log.fail(reason);
        self.flushed.notify(usize::MAX);
        self.space.notify(usize::MAX);
        self.core.appended.notify(usize::MAX);
    }

    /// Wait until every offset below `offset` is in the filer. A wait
    /// that needs the active buffer stored seals it at once if the last
    /// seal is a linger ago (else the tick does, once it is).
    pub(crate) async fn wait_flushed(self: &Rc<Self>, offset: u64) -> Result<(), EngineError> {
        loop {
            let listener = self.flushed.listen();
            let now = Instant::now();
            if self.core.state.borrow().log.flushed_offset() >= offset {
                return Ok(());
            }
            if let Some(e) = self.wait_ended("flush") {
                return Err(e);
            }
            // Whether some of what it waits for is still in the active buffer.
            let in_active;
            {
                let mut state = self.core.state.borrow_mut();
                state.log.note_durable_wait(now);
                in_active = offset > state.log.sealed_end().unwrap_or(state.log.flushed_offset());
            }
            if in_active {
                self.seal_if_due(now);
            }
            listener.await;
        }
    }

    /// Take the followers the layout names for this segment.
    pub(crate) fn set_followers(&self, followers: &[control::Follower]) {
        let end = self.core.state.borrow().log.next_offset();
        self.followers
            .borrow_mut()
            .set(followers, Instant::now(), end);
        self.replicated.notify(usize::MAX);
    }

    /// A follower fetched from `offset`: it holds every record before.
    pub(crate) fn follower_fetched(&self, id: wire::message::FollowerId, offset: u64) {
        let end = self.core.state.borrow().log.next_offset();
        let offset = offset.min(end);
        if self
            .followers
            .borrow_mut()
            .fetched(id, offset, end, Instant::now())
        {
            self.replicated.notify(usize::MAX);
        }
    }

    /// How far behind each follower is now (for the load report).
    pub(crate) fn follower_lags(&self) -> Vec<wire::message::FollowerLag> {
        let end = self.core.state.borrow().log.next_offset();
        self.followers.borrow().lags(end, Instant::now())
    }

    /// One past the last offset stored in the filer.
    pub(crate) fn stored_end(&self) -> u64 {
        self.core.state.borrow().log.flushed_offset()
    }

    /// Wait until every in-sync follower holds the records before
    /// `offset` (an `all` produce; with followers but none in sync, one
    /// of them: `SegmentFollowers::replicated_to`), or the filer does
    /// (stored is more
    /// than copied: a segment sealed meanwhile flushes everything). Fails
    /// as [`SegmentCell::wait_flushed`] does when the segment fails, is
    /// fenced, or closes first.
    pub(crate) async fn wait_replicated(self: &Rc<Self>, offset: u64) -> Result<(), EngineError> {
        loop {
            let copied = self.replicated.listen();
            let stored = self.flushed.listen();
            let replicated = self
                .followers
                .borrow()
                .replicated_to()
                .is_none_or(|to| to >= offset);
            if replicated || self.core.state.borrow().log.flushed_offset() >= offset {
                return Ok(());
            }
            if let Some(e) = self.wait_ended("its followers copied") {
                return Err(e);
            }
            futures_lite::future::or(copied, stored).await;
        }
    }

    /// Why a wait on the segment (for a flush, for its followers) ends
    /// unmet: it was fenced, failed, or closed before `awaited`; `None`
    /// while it may still be met.
    fn wait_ended(&self, awaited: &str) -> Option<EngineError> {
        let segment = || self.core.chunk_prefix.to_string();
        if self.core.is_fenced() {
            return Some(EngineError::Fenced { segment: segment() });
        }
        if let Some(reason) = self.core.state.borrow().log.failed() {
            return Some(EngineError::Segment {
                segment: segment(),
                reason: format!("failed: {reason}"),
            });
        }
        if self.core.is_closed() {
            return Some(EngineError::Segment {
                segment: segment(),
                reason: format!("closed before {awaited}"),
            });
        }
        None
    }

    /// Stop serving: the topic is being deleted. Removes local buffers.
    pub(crate) fn close(&self) {
        self.close_as(Closed::Deleted);
    }

    /// Stop serving for good as `closed` says: the buffers (spares too)
    /// are dropped and their files removed, and every waiter is woken.
    fn close_as(&self, closed: Closed) {
        self.core.close_as(closed);
        let mut state = self.core.state.borrow_mut();
        state.active = None;
        state.log.handle_deleted();
        drop(state);
        self.spares.borrow_mut().ready.clear();
        if let Err(e) = std::fs::remove_dir_all(&self.buffers_dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("remove {}: {e}", self.buffers_dir.display());
            }
        }
        self.flushed.notify(usize::MAX);
        self.space.notify(usize::MAX);
    }

    /// The flusher found another writer's chunk at offset `at`, where
    /// this owner's next chunk should go: the segment was sealed while
    /// this broker was away (declared dead, then back), by the control
    /// plane's fence at `at`, or by a follower storing its copy from there
    /// on. The records this owner holds from `at` are not stored by it
    /// and never will be: they are dropped with their buffers, counted in
    /// the log, and nothing more is acknowledged, written or read here
    /// (`NotOwner`: clients look again and find the segment sealed).
    pub(crate) fn fence(&self, at: u64) {
        let next = self.core.state.borrow().log.next_offset();
        log::error!(
            "segment {}: another writer stored its chunk at offset {at} while this broker was \
             away (declared dead): the control plane's fence, or a follower sealing it from its \
             copy. The {} records this broker held from offset {at} to {next} are dropped here: \
             those a follower copied are in the filer up to the seal point; the rest were never \
             acknowledged as durable or all, and any acknowledged with ack=leader are lost \
             (docs/broker.md, \"What each ack mode survives\")",
            self.core.chunk_prefix,
            next.saturating_sub(at)
        );
        self.core
            .store
            .metrics
            .fenced_records
            .add(next.saturating_sub(at));
        self.core
            .state
            .borrow_mut()
            .log
            .fail(format!("fenced off at offset {at}"));
        self.close_as(Closed::Fenced);
    }
}

/// Whether `e` is the disk having no room (`ENOSPC`, or a quota's
/// `EDQUOT`).
fn is_disk_full(e: &EngineError) -> bool {
    match e {
        EngineError::Io { source, .. } => matches!(
            source.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        ),
        _ => false,
    }
}

/// Seal the active buffer at `now` if it holds anything. Returns whether
/// it did.
fn seal_active(state: &mut SegmentState, now: Instant) -> Result<bool, ServeError> {
    match state.active.take() {
        Some(active) if !active.is_empty() => {
            state
                .buffer_size
                .handle_sealed(active.data_bytes(), active.data_capacity());
            let sealed = active.seal().map_err(|e| ServeError::storage(&e))?;
            state.log.handle_sealed(Arc::new(sealed), now);
            Ok(true)
        }
        Some(active) => {
            state.active = Some(active);
            Ok(false)
        }
        None => Ok(false),
    }
}

/// A read-only view of a segment sealed on another broker (or before this
/// one started): its chunks in the filer, and whether the sealing broker's
/// marker says they are final. No local buffers, no writes, no flusher.
#[derive(Debug)]
pub(crate) struct SealedView {
    pub(crate) core: SegmentCore,
}

/// The answer to a resend a segment cannot check yet: its seal is under
/// way (records on their way to the filer, or the seal marker not there).
fn being_sealed(segment: u32) -> ServeError {
    ServeError::new(
        ErrorCode::Busy,
        format!(
            "segment {segment} is being sealed: whether it stored this resend is not known yet; \
             send it again shortly"
        ),
    )
}

impl SealedView {
    pub(crate) async fn open(
        config: Rc<BrokerConfig>,
        store: Rc<ShardFiler>,
        topic: &TopicName,
        id: u32,
        range_start: u32,
        range_end: u64,
    ) -> Result<Rc<SealedView>, EngineError> {
        let (stored, marked) = {
            let prefix = filer_layout::segment_prefix(topic, id);
            let marker = filer_layout::seal_marker(topic, id);
            store
                .read(move |filer| load_sealed(filer, &prefix, &marker, &[]))
                .await?
        };
        let end = stored.end();
        let seal = if marked {
            SealState::Sealed
        } else {
            SealState::Sealing
        };
        let mut log = SegmentLog::new(seal, stored.chunks, end, VecDeque::new(), end);
        log.set_lost(stored.lost);
        Ok(Rc::new(SealedView {
            core: SegmentCore::new(config, store, topic, id, (range_start, range_end), log),
        }))
    }

    /// An idempotent producer's resend to this sealed segment: `Some` with
    /// its offsets if the segment stored it, `None` if not (it goes to the
    /// successors); `Busy` while the seal marker is not there yet.
    pub(crate) async fn sealed_duplicate(
        &self,
        resend: &BatchView<'_>,
    ) -> Result<Option<Placed>, ServeError> {
        if self.core.seal_state() != SealState::Sealed {
            self.core.refresh_listing().await?;
        }
        if self.core.seal_state() != SealState::Sealed {
            return Err(being_sealed(self.core.id));
        }
        let end = self.core.state.borrow().log.next_offset();
        producers::find_in_sealed(&self.core, Tail::Polled, resend, end).await
    }
}

/// Where a sealed segment ends in the filer (its seal point: one past its
/// last stored offset), once its seal marker is there; `None` before.
pub(crate) async fn seal_point(
    store: &ShardFiler,
    topic: &TopicName,
    id: u32,
) -> Result<Option<u64>, EngineError> {
    let prefix = filer_layout::segment_prefix(topic, id);
    let marker = filer_layout::seal_marker(topic, id);
    let (stored, marked) = store
        .read(move |filer| load_sealed(filer, &prefix, &marker, &[]))
        .await?;
    Ok(marked.then(|| stored.end()))
}

/// A segment a shard serves: one it owns, or a view of one sealed
/// elsewhere.
#[derive(Debug, Clone)]
pub(crate) enum Segment {
    Owned(Rc<SegmentCell>),
    View(Rc<SealedView>),
}

impl Segment {
    pub(crate) fn core(&self) -> &SegmentCore {
        match self {
            Segment::Owned(cell) => &cell.core,
            Segment::View(view) => &view.core,
        }
    }

    /// Read batches from `from`, waiting up to `max_wait` for new data.
    pub(crate) async fn fetch(
        &self,
        from: wire::FetchFrom,
        max_bytes: usize,
        max_wait: Duration,
        checks: wire::FetchChecks,
    ) -> Result<FetchResult, ServeError> {
        let tail = match self {
            Segment::Owned(_) => Tail::Appended,
            Segment::View(_) => Tail::Polled,
        };
        let mut fetched = self
            .core()
            .fetch(from, max_bytes, max_wait, checks, tail)
            .await?;
        fetched.stored_end = self.core().state.borrow().log.flushed_offset();
        Ok(fetched)
    }

    /// Seal by age (an owned segment's active buffer).
    pub(crate) fn tick(&self, now: Instant) {
        if let Segment::Owned(cell) = self {
            cell.tick(now);
        }
    }

    /// Bytes appended here and not yet in the filer: the active buffer's
    /// and the sealed ones'.
    pub(crate) fn unflushed_bytes(&self) -> u64 {
        let state = self.core().state.borrow();
        let active = state.active.as_ref().map_or(0, |a| a.file_bytes());
        state.log.sealed_bytes() + active
    }

    /// Graceful stop: an owned segment flushes its buffers; a view only
    /// stops serving.
    pub(crate) async fn shut_down(&self) -> Result<(), ServeError> {
        match self {
            Segment::Owned(cell) => cell.shut_down().await,
            Segment::View(view) => {
                view.core.stop_serving();
                Ok(())
            }
        }
    }

    /// The topic is being deleted.
    pub(crate) fn close(&self) {
        match self {
            Segment::Owned(cell) => cell.close(),
            Segment::View(view) => view.core.delete(),
        }
    }

    /// An owned segment the control plane fenced off ([`SegmentCell::fence`]).
    pub(crate) fn is_fenced(&self) -> bool {
        matches!(self, Segment::Owned(cell) if cell.core.is_fenced())
    }
}
