//! A follower's copy of a segment another broker owns: the records the
//! owner holds in its buffers and has not stored in the filer yet, at the
//! same offsets, in mapped buffer files of this shard's own.
//!
//! The follower pulls. A task per followed segment fetches from the
//! owner's shard (`Fetch` with the follower's id, docs/wire-format.md) in a
//! long poll, from the offset it holds up to: the owner counts that offset
//! as the follower's progress, and starts each answer no earlier than its
//! stored end (what the filer holds no follower needs). The follower
//! appends each batch, checked by its checksum, at the offset the owner
//! gave it, and drops every buffer whose records the owner has stored.
//!
//! Files live under `<data-dir>/replicas/<topic>/<segment>/`, laid out as
//! the owner's buffers are (`docs/chunk-format.md`). A follower holds at
//! most [`REPLICA_BUFFERS_MAX`] of them; with that many full it stops
//! fetching until the owner's stored end frees one (so a follower never
//! holds more than the owner may leave unflushed). They are dropped when
//! the segment is sealed, or no longer followed here, and on a restart (a
//! follower that comes back copies again from the owner's stored end).
//! Each file is made (created, its blocks reserved, mapped) and removed on
//! the blocking pool, as an owner's spares are, not on the shard's thread.
//!
//! When the owner dies, the control plane may name this follower the
//! segment's *sealer* (`Segment::sealer`): the task stops fetching, stores
//! what its copy holds past the filer's end as chunks (each created only
//! if its path is free), fences the end and writes the seal marker
//! (`control::segment_fence::seal_from_copy`, docs/broker.md "Failover").
//! What the owner answered `all` for is in every in-sync copy, so it is in
//! the filer once the segment is sealed.

use std::cell::Cell;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use control::segment_fence::{seal_from_copy, Fenced, HeldChunk, HeldRecords, NothingHeld};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use wire::chunk::{build_chunk, BatchWalk};
use wire::frame::{FrameHeader, FRAME_HEADER_BYTES};
use wire::message::{FetchChecks, FetchFrom, FetchRequest, Fetched, FollowerId};
use wire::{BatchView, BrokerPortRequest, DataRequest, Response};

use crate::buffer::ActiveBuffer;
use crate::error::EngineError;
use crate::log_limit::LogLimit;
use crate::segment::blocking;
use crate::shard_filer::ShardFiler;
use crate::shard_metrics::ShardMetrics;

/// The directory under the data directory that holds followers' copies.
pub(crate) const REPLICAS_DIR: &str = "replicas";
/// Most buffer files one followed segment holds.
pub(crate) const REPLICA_BUFFERS_MAX: usize = 8;
/// How much one fetch asks for.
const FETCH_BYTES: u32 = 1 << 20;
/// How long a fetch waits at the owner for new records.
const FETCH_WAIT_MS: u32 = 500;
/// How long a fetch may take to be answered before the connection is
/// dropped and opened again.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause before trying again after a refusal or a broken connection.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// A follower that keeps failing to copy says so once per this interval
/// (with the failures in between), not once per retry, nor only once.
const FOLLOW_FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);
/// Pause while every buffer is full, waiting for the owner to store.
const FULL_PAUSE: Duration = Duration::from_millis(20);
/// The pause after a failed try at sealing from the copy, doubled up to
/// the maximum. Tries go on until the segment is sealed, by this follower
/// or by the control plane (which waits for it only while the filer
/// answers, `SEALER_WAIT_MS`), or the task is stopped.
const SEAL_RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);
const SEAL_RETRY_PAUSE_MAX: Duration = Duration::from_secs(5);

/// A followed segment's copy: its buffer files, oldest first, the last one
/// taking appends.
pub(crate) struct ReplicaLog {
    dir: PathBuf,
    segment: u32,
    /// Bytes of batches a buffer file holds.
    buffer_bytes: usize,
    buffers: VecDeque<ActiveBuffer>,
    /// How many files were made, for their names.
    made: u64,
    /// Files dropped from the copy and not removed yet: the copy task
    /// removes them on the blocking pool ([`ReplicaLog::take_discarded`]).
    discarded: Vec<ActiveBuffer>,
}

impl ReplicaLog {
    /// An empty copy in `dir` (anything there from before is removed).
    pub(crate) fn create(
        dir: PathBuf,
        segment: u32,
        buffer_bytes: usize,
    ) -> Result<ReplicaLog, EngineError> {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| EngineError::io("remove old replica files", &dir, e))?;
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| EngineError::io("create replica directory", &dir, e))?;
        Ok(ReplicaLog {
            dir,
            segment,
            buffer_bytes,
            buffers: VecDeque::new(),
            made: 0,
            discarded: Vec::new(),
        })
    }

    /// One past the last offset held; `None` while empty.
    pub(crate) fn next_offset(&self) -> Option<u64> {
        self.buffers.back().map(ActiveBuffer::next_offset)
    }

    /// Whether every buffer file is made, so the copy may soon take no
    /// more until [`ReplicaLog::trim`] frees one.
    pub(crate) fn is_full(&self) -> bool {
        self.buffers.len() >= REPLICA_BUFFERS_MAX
    }

    /// Whether a batch of `len` bytes can be taken now.
    pub(crate) fn has_room(&self, len: usize) -> bool {
        self.buffers.back().is_some_and(|b| b.fits(len)) || !self.is_full()
    }

    /// Append a batch the owner placed at `view.base_offset()`, making a
    /// buffer file for it here if it needs one (the copy task makes it off
    /// the shard's thread instead: [`ReplicaLog::prepare`]).
    #[cfg(test)]
    pub(crate) fn append(&mut self, view: &BatchView<'_>) -> Result<(), EngineError> {
        if let Some(wanted) = self.prepare(view)? {
            self.add(wanted.create()?);
        }
        self.append_prepared(view)
    }

    /// Get ready to take a batch the owner placed at `view.base_offset()`:
    /// the buffer file to make for it first, if the last one has no room.
    /// A batch past the end held (the owner's stored end moved past it:
    /// nothing between is needed) starts the copy over there; a batch
    /// before it is refused (the owner and follower disagree: the caller
    /// starts over), as is one for which every file is made.
    pub(crate) fn prepare(
        &mut self,
        view: &BatchView<'_>,
    ) -> Result<Option<WantedBuffer>, EngineError> {
        let base = view.base_offset();
        match self.next_offset() {
            Some(next) if base < next => {
                return Err(EngineError::Segment {
                    segment: self.dir.display().to_string(),
                    reason: format!(
                        "the owner sent offset {base}, and the copy holds up to {next}"
                    ),
                })
            }
            Some(next) if base > next => self.clear(),
            _ => {}
        }
        let len = view.bytes().len();
        if self.buffers.back().is_some_and(|b| b.fits(len)) {
            return Ok(None);
        }
        if self.is_full() {
            return Err(EngineError::Segment {
                segment: self.dir.display().to_string(),
                reason: "every replica buffer is full".into(),
            });
        }
        self.made += 1;
        Ok(Some(WantedBuffer {
            path: self.dir.join(format!("{:020}-{}.buf", base, self.made)),
            segment: self.segment,
            base,
            capacity: self.buffer_bytes.max(len),
        }))
    }

    /// Take the buffer file [`ReplicaLog::prepare`] asked for.
    pub(crate) fn add(&mut self, buffer: ActiveBuffer) {
        self.buffers.push_back(buffer);
    }

    /// Append a batch [`ReplicaLog::prepare`] got ready for (its buffer
    /// file added if it wanted one).
    pub(crate) fn append_prepared(&mut self, view: &BatchView<'_>) -> Result<(), EngineError> {
        let Some(active) = self.buffers.back_mut() else {
            return Err(EngineError::Segment {
                segment: self.dir.display().to_string(),
                reason: "a batch appended before its buffer file was made".into(),
            });
        };
        let (placed, _) = active.append(view)?;
        debug_assert_eq!(placed, view.base_offset());
        Ok(())
    }

    /// Drop every buffer whose records all sit below `stored_end` (the
    /// owner stored them in the filer).
    pub(crate) fn trim(&mut self, stored_end: u64) {
        while self.buffers.len() > 1
            && self
                .buffers
                .front()
                .is_some_and(|b| b.next_offset() <= stored_end)
        {
            if let Some(b) = self.buffers.pop_front() {
                self.discarded.push(b);
            }
        }
        // The last one too, once everything in it is stored: the next
        // batch starts a new file.
        if self
            .buffers
            .back()
            .is_some_and(|b| b.next_offset() <= stored_end && self.buffers.len() == 1)
        {
            self.clear();
        }
    }

    /// Drop everything held: the next batch starts the copy over.
    pub(crate) fn clear(&mut self) {
        self.discarded.extend(self.buffers.drain(..));
    }

    /// The files dropped from the copy since the last call, to be removed
    /// ([`discard`]) off the shard's thread.
    pub(crate) fn take_discarded(&mut self) -> Vec<ActiveBuffer> {
        std::mem::take(&mut self.discarded)
    }

    /// Drop everything held and the directory (blocking).
    pub(crate) fn remove(mut self) {
        self.clear();
        discard(self.take_discarded());
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("replica {}: removing it: {e}", self.dir.display());
            }
        }
    }
}

impl HeldRecords for ReplicaLog {
    /// The batches of the buffer file holding `offset`, from the one that
    /// starts there (each verified by its checksum; the walk stops at the
    /// first that fails, and what follows it is not offered).
    fn chunk_from(&mut self, offset: u64) -> Option<HeldChunk> {
        let buffer = self
            .buffers
            .iter()
            .find(|b| b.base_offset() <= offset && offset < b.next_offset())?;
        let mut batches: Vec<&[u8]> = Vec::new();
        let mut next_offset = offset;
        for walked in BatchWalk::new(buffer.data()) {
            let Ok((_, view)) = walked else {
                log::warn!(
                    "replica {}: a damaged batch after offset {next_offset}; the copy ends there",
                    self.dir.display()
                );
                break;
            };
            if view.base_offset() == next_offset {
                batches.push(view.bytes());
                next_offset = view.next_offset();
            }
        }
        if batches.is_empty() {
            return None;
        }
        let bytes = build_chunk(self.segment, offset, &batches).ok()?;
        Some(HeldChunk { bytes, next_offset })
    }
}

/// A buffer file a copy needs made before it takes its next batch.
pub(crate) struct WantedBuffer {
    path: PathBuf,
    segment: u32,
    base: u64,
    capacity: usize,
}

impl WantedBuffer {
    /// Make it: create the file, reserve its blocks and map it (blocking:
    /// the copy task runs this off the shard's thread).
    fn create(self) -> Result<ActiveBuffer, EngineError> {
        ActiveBuffer::create(self.path, self.segment, self.base, self.capacity)
    }
}

/// Unmap and remove buffer files dropped from a copy (blocking).
pub(crate) fn discard(buffers: Vec<ActiveBuffer>) {
    for b in buffers {
        remove_file(b.path());
    }
}

fn remove_file(path: &std::path::Path) {
    if let Err(e) = std::fs::remove_file(path) {
        log::warn!("replica file {}: removing it: {e}", path.display());
    }
}

/// What a follower task follows, and from where.
pub(crate) struct Following {
    pub(crate) topic: String,
    pub(crate) segment: u32,
    /// The owner's shard, `host:port` (TCP).
    pub(crate) owner: String,
    pub(crate) me: FollowerId,
    pub(crate) dir: PathBuf,
    pub(crate) buffer_bytes: usize,
    /// Where a seal from the copy stores its chunks and marker.
    pub(crate) store: Rc<ShardFiler>,
    /// The cluster's credentials, on brokers with an auth file: each
    /// connection to the owner authenticates with them first.
    pub(crate) credentials: Option<Arc<auth::Credentials>>,
}

/// A running follower task: [`Follower::stop`] ends it (it removes its
/// files), [`Follower::seal`] has it seal the segment from its copy first.
#[derive(Debug)]
pub(crate) struct Follower {
    orders: Rc<Orders>,
}

/// What a follower task is told, and when it is done.
#[derive(Debug, Default)]
struct Orders {
    /// The owner's shard, `host:port` (TCP), as the layout names it last.
    owner: std::cell::RefCell<String>,
    stop: Cell<bool>,
    /// The seal epoch, once told to seal from its copy.
    seal: Cell<Option<u32>>,
    /// Wakes the task from a fetch when told either.
    told: event_listener::Event,
    /// Set when the task has ended (its files removed).
    done: Cell<bool>,
}

impl Orders {
    fn halted(&self) -> bool {
        self.stop.get() || self.seal.get().is_some()
    }
}

impl Follower {
    /// End the task: it stops copying and removes its files.
    pub(crate) fn stop(&self) {
        self.orders.stop.set(true);
        self.orders.told.notify(usize::MAX);
    }

    /// Have the task stop copying and seal the segment (at seal epoch
    /// `epoch`) from what its copy holds; told once, later calls change
    /// nothing.
    pub(crate) fn seal(&self, epoch: u32) {
        if self.orders.seal.get().is_none() {
            self.orders.seal.set(Some(epoch));
            self.orders.told.notify(usize::MAX);
        }
    }

    /// Fetch from the owner at `owner` from now on (it restarted on
    /// another address), keeping the copy: the segment, and so its
    /// offsets, are the same. True if that is a change.
    pub(crate) fn redirect(&self, owner: &str) -> bool {
        if *self.orders.owner.borrow() == owner {
            return false;
        }
        *self.orders.owner.borrow_mut() = owner.to_owned();
        self.orders.told.notify(usize::MAX);
        true
    }

    /// Whether it was told to seal.
    pub(crate) fn sealing(&self) -> bool {
        self.orders.seal.get().is_some()
    }

    /// Whether the task has ended.
    pub(crate) fn is_done(&self) -> bool {
        self.orders.done.get()
    }
}

/// Start following; the task runs until stopped, told to seal, or the
/// segment is sealed by its owner.
pub(crate) fn start(following: Following, metrics: Arc<ShardMetrics>) -> Follower {
    let orders = Rc::new(Orders {
        owner: std::cell::RefCell::new(following.owner.clone()),
        ..Orders::default()
    });
    log::debug!(
        "replica of {}/{}: following its owner at {}",
        following.topic,
        following.segment,
        following.owner
    );
    let told = orders.clone();
    glommio::spawn_local(async move {
        run(following, &told, metrics).await;
        told.done.set(true);
    })
    .detach();
    Follower { orders }
}

async fn run(following: Following, orders: &Orders, metrics: Arc<ShardMetrics>) {
    let name = format!("{}/{}", following.topic, following.segment);
    let (dir, segment, buffer_bytes) = (
        following.dir.clone(),
        following.segment,
        following.buffer_bytes,
    );
    let made = blocking(move || ReplicaLog::create(dir, segment, buffer_bytes)).await;
    let mut log = match made {
        Ok(log) => log,
        Err(e) => {
            log::error!("replica of {name}: cannot keep a copy: {e}");
            return;
        }
    };
    let mut failures = LogLimit::new(FOLLOW_FAILURE_LOG_INTERVAL);
    loop {
        let told = orders.told.listen();
        if orders.halted() {
            break;
        }
        let owner = orders.owner.borrow().clone();
        let attempt = async {
            let mut stream = TcpStream::connect(owner.as_str())
                .await
                .map_err(|e| format!("cannot reach its owner at {owner}: {e}"))?;
            let _ = stream.set_nodelay(true);
            if let Some(credentials) = &following.credentials {
                authenticate(&mut stream, credentials).await?;
            }
            copy(&mut stream, &following, &mut log, orders, &metrics).await
        };
        // Told to stop or seal, or that the owner moved: the fetch in
        // flight is dropped at once (an owner that is gone may never
        // answer it).
        let ended = futures_lite::future::or(async { Some(attempt.await) }, async {
            told.await;
            None
        })
        .await;
        match ended {
            None | Some(Ok(Ended::Stopped)) => {}
            Some(Ok(Ended::Sealed)) => break,
            Some(Err(e)) => {
                if let Some(held_back) = failures.admit(Instant::now()) {
                    log::warn!(
                        "replica of {name}: {e}; retrying every {RETRY_PAUSE:?} ({held_back} \
                         failures since the last report)"
                    );
                }
                glommio::timer::sleep(RETRY_PAUSE).await;
            }
        }
    }
    if let (false, Some(epoch)) = (orders.stop.get(), orders.seal.get()) {
        let sealer = Sealer {
            topic: following.topic.clone(),
            segment: following.segment,
            epoch,
            me: following.me.broker,
            store: following.store.clone(),
        };
        log = sealer.seal(log, true, || orders.stop.get()).await;
    }
    let _ = blocking(move || log.remove()).await;
}

/// A follower named a dead owner's segment's sealer (see the module docs).
pub(crate) struct Sealer {
    pub(crate) topic: String,
    pub(crate) segment: u32,
    /// The segment's seal epoch.
    pub(crate) epoch: u32,
    /// This broker's id.
    pub(crate) me: u32,
    pub(crate) store: Rc<ShardFiler>,
}

impl Sealer {
    /// Seal the segment at the filer's end: this follower has no copy
    /// (its broker restarted since it had one, or never heard of the
    /// segment before it was sealed), in a task of its own.
    pub(crate) fn seal_without_copy(self) {
        glommio::spawn_local(async move {
            self.seal(NothingHeld, false, || false).await;
        })
        .detach();
    }

    /// What sealing from `held` logs: `copy` says whether it was a copy.
    fn report(&self, sealed: Fenced, stored: u64, copy: bool) {
        let name = format!("{}/{}", self.topic, self.segment);
        match (sealed, copy) {
            (Fenced::At(end), true) => log::info!(
                "segment {name}: its owner is gone; sealed from this broker's copy at offset \
                 {end} ({stored} records the filer lacked stored from the copy)"
            ),
            (Fenced::At(end), false) => log::warn!(
                "segment {name}: its owner is gone, and this broker, named to seal it, has no \
                 copy (it restarted since, or never had the layout that made it a follower): \
                 sealed at the filer's end, offset {end}"
            ),
            (Fenced::AlreadySealed, true) => log::info!(
                "segment {name}: its owner is gone; sealed already by another ({stored} records \
                 stored from this broker's copy first)"
            ),
            (Fenced::AlreadySealed, false) => {
                log::debug!("segment {name}: sealed already");
            }
        }
    }

    /// Seal the segment from `held` (a copy if `copy`, else nothing),
    /// trying again while the filer fails until it is sealed (by this
    /// follower or another) or `stopped`.
    async fn seal<H: HeldRecords + Send + 'static>(
        &self,
        mut held: H,
        copy: bool,
        stopped: impl Fn() -> bool,
    ) -> H {
        let name = format!("{}/{}", self.topic, self.segment);
        let topic = match control::TopicName::parse(&self.topic) {
            Ok(t) => t,
            Err(e) => {
                log::error!("segment {name}: cannot seal it: {e}");
                return held;
            }
        };
        let by = format!("broker {} (follower)", self.me);
        let (segment, epoch) = (self.segment, self.epoch);
        let mut pause = SEAL_RETRY_PAUSE_MIN;
        loop {
            let (t, b) = (topic.clone(), by.clone());
            let (back, sealed) = self
                .store
                .upload(move |filer| {
                    let mut held = held;
                    let sealed = seal_from_copy(filer, &t, segment, epoch, &b, &mut held);
                    (held, sealed)
                })
                .await;
            held = back;
            match sealed {
                Ok((fenced, stored)) => {
                    self.report(fenced, stored, copy);
                    return held;
                }
                Err(e) if !stopped() => {
                    log::warn!(
                        "segment {name}: sealing it from this broker's copy: {e}; retrying in \
                         {pause:?}"
                    );
                    glommio::timer::sleep(pause).await;
                    pause = (pause * 2).min(SEAL_RETRY_PAUSE_MAX);
                }
                Err(e) => {
                    log::warn!("segment {name}: sealing it from this broker's copy: {e}; stopped");
                    return held;
                }
            }
        }
    }
}

enum Ended {
    Sealed,
    Stopped,
}

/// Fetch and append on one connection until it breaks, the segment is
/// sealed, or the task is stopped or told to seal.
async fn copy(
    stream: &mut TcpStream,
    following: &Following,
    log: &mut ReplicaLog,
    orders: &Orders,
    metrics: &ShardMetrics,
) -> Result<Ended, String> {
    let mut frame = Vec::with_capacity(256);
    let mut payload = Vec::new();
    let mut request_id: u32 = 0;
    loop {
        if orders.halted() {
            return Ok(Ended::Stopped);
        }
        if log.is_full() {
            glommio::timer::sleep(FULL_PAUSE).await;
        }
        request_id = request_id.wrapping_add(1);
        let from = log.next_offset().unwrap_or(0);
        frame.clear();
        BrokerPortRequest::Data(DataRequest::Fetch(FetchRequest {
            topic: following.topic.clone(),
            segment: following.segment,
            from: FetchFrom::Offset(from),
            max_bytes: if log.is_full() { 1 } else { FETCH_BYTES },
            max_wait_ms: FETCH_WAIT_MS,
            checks: FetchChecks::Trust,
            follower: Some(following.me),
        }))
        .encode(request_id, &mut frame);
        stream
            .write_all(&frame)
            .await
            .map_err(|e| format!("sending a fetch: {e}"))?;
        let header = read_answer(stream, &mut payload).await?;
        let answer = Response::decode_verified(&header, &payload)
            .map_err(|e| format!("its owner's answer: {e}"))?;
        match answer.response {
            Response::Fetched(Fetched {
                stored_end, sealed, ..
            }) => {
                let mut copied = 0u64;
                for view in &answer.batches {
                    if !log.has_room(view.bytes().len()) {
                        break;
                    }
                    let appended = match log.prepare(view) {
                        Ok(None) => log.append_prepared(view),
                        Ok(Some(wanted)) => match blocking(move || wanted.create()).await {
                            Ok(buffer) => {
                                log.add(buffer);
                                log.append_prepared(view)
                            }
                            Err(e) => Err(e),
                        },
                        Err(e) => Err(e),
                    };
                    if let Err(e) = appended {
                        log::warn!(
                            "replica of {}/{}: {e}; starting the copy over",
                            following.topic,
                            following.segment
                        );
                        log.clear();
                        break;
                    }
                    copied += u64::from(view.record_count());
                }
                metrics.replica_records.add(copied);
                log.trim(stored_end);
                let discarded = log.take_discarded();
                if !discarded.is_empty() {
                    blocking(move || discard(discarded)).await;
                }
                // A sealed segment's owner flushed it all: no copy is
                // needed any more.
                if sealed {
                    return Ok(Ended::Sealed);
                }
            }
            // SegmentSealed, NotOwner, Busy, ShuttingDown: the layout will
            // move on or stop this task (an owner that just restarted may
            // answer so before it has the layout again: the copy is kept);
            // ask again.
            Response::Error { .. } => glommio::timer::sleep(RETRY_PAUSE).await,
            other => return Err(format!("its owner answered a fetch with {other:?}")),
        }
    }
}

/// Authenticate a connection to the owner as the cluster.
async fn authenticate(
    stream: &mut TcpStream,
    credentials: &auth::Credentials,
) -> Result<(), String> {
    let (mut handshake, mut request) = auth::Handshake::start_fresh(credentials);
    let mut frame = Vec::new();
    let mut payload = Vec::new();
    loop {
        frame.clear();
        request.encode(0, &mut frame);
        stream
            .write_all(&frame)
            .await
            .map_err(|e| format!("authenticating: {e}"))?;
        let header = read_answer(stream, &mut payload).await?;
        let response = Response::decode(header.frame_type, &payload)
            .map_err(|e| format!("authenticating: its owner's answer: {e}"))?;
        match handshake.answer(&response) {
            Ok(Some(next)) => request = next,
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("authenticating to its owner: {e}")),
        }
    }
}

/// Read one answer frame: its header, and its payload into `payload`.
async fn read_answer(stream: &mut TcpStream, payload: &mut Vec<u8>) -> Result<FrameHeader, String> {
    let read = async {
        let mut head = [0u8; FRAME_HEADER_BYTES];
        stream
            .read_exact(&mut head)
            .await
            .map_err(|e| format!("reading an answer: {e}"))?;
        let header = FrameHeader::decode(&head).map_err(|e| format!("an answer's header: {e}"))?;
        payload.resize(header.payload_bytes as usize, 0);
        stream
            .read_exact(payload)
            .await
            .map_err(|e| format!("reading an answer: {e}"))?;
        Ok(header)
    };
    match glommio::timer::timeout(ANSWER_TIMEOUT, async { Ok(read.await) }).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {ANSWER_TIMEOUT:?}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wire::BatchBuilder;

    /// A batch of `records` records as an owner holds it, at `base`.
    fn batch(base: u64, records: u32) -> Vec<u8> {
        let mut builder = BatchBuilder::new();
        for i in 0..records {
            builder
                .push(1_000, format!("k{i}").as_bytes(), b"v", &[])
                .unwrap();
        }
        let mut bytes = builder.finish(0, 0).to_vec();
        bytes[..8].copy_from_slice(&base.to_le_bytes());
        bytes
    }

    fn files(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir).unwrap().count()
    }

    #[test]
    fn a_copy_takes_batches_at_the_owners_offsets_and_drops_what_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("copy");
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("stale.buf"), b"from before").unwrap();
        let one = batch(0, 3).len();
        // Room for two batches per file.
        let mut log = ReplicaLog::create(path.clone(), 4, 2 * one).unwrap();
        assert_eq!(files(&path), 0, "what was there before is gone");
        assert_eq!(log.next_offset(), None);
        for base in [0, 3, 6, 9, 12] {
            log.append(&BatchView::validate(&batch(base, 3)).unwrap())
                .unwrap();
        }
        assert_eq!(log.next_offset(), Some(15));
        assert_eq!(files(&path), 3, "two batches a file");
        // Behind what it holds: refused, nothing changes.
        let err = log
            .append(&BatchView::validate(&batch(12, 3)).unwrap())
            .unwrap_err();
        assert!(err.to_string().contains("holds up to 15"), "{err}");
        // The owner stored up to 6: the first file goes.
        log.trim(6);
        discard(log.take_discarded());
        assert_eq!(files(&path), 2);
        log.trim(7);
        discard(log.take_discarded());
        assert_eq!(files(&path), 2, "a file partly stored stays");
        // Past what it holds (the owner's stored end moved on): it starts
        // over there.
        log.append(&BatchView::validate(&batch(40, 2)).unwrap())
            .unwrap();
        discard(log.take_discarded());
        assert_eq!(log.next_offset(), Some(42));
        assert_eq!(files(&path), 1);
        log.trim(42);
        discard(log.take_discarded());
        assert_eq!(log.next_offset(), None, "everything stored: nothing held");
        assert_eq!(files(&path), 0);
        log.remove();
        assert!(!path.exists());
    }

    #[test]
    fn a_copy_offers_chunks_from_a_batch_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let one = batch(0, 3).len();
        let mut log = ReplicaLog::create(dir.path().join("copy"), 4, 2 * one).unwrap();
        for base in [0, 3, 6, 9, 12] {
            log.append(&BatchView::validate(&batch(base, 3)).unwrap())
                .unwrap();
        }
        let header = |c: &HeldChunk| {
            let h = wire::chunk::ChunkHeader::decode(&c.bytes).unwrap();
            (h.segment_id, h.base_offset, h.next_offset)
        };
        // From 3: the rest of the file holding it (3..6).
        let c = log.chunk_from(3).unwrap();
        assert_eq!((header(&c), c.next_offset), ((4, 3, 6), 6));
        let c = log.chunk_from(6).unwrap();
        assert_eq!((header(&c), c.next_offset), ((4, 6, 12), 12));
        assert!(log.chunk_from(4).is_none(), "not where a batch starts");
        assert!(log.chunk_from(15).is_none(), "past what it holds");
        log.remove();
    }

    #[test]
    fn a_copy_holds_at_most_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("copy");
        let one = batch(0, 1).len();
        let mut log = ReplicaLog::create(path, 1, one).unwrap();
        for base in 0..REPLICA_BUFFERS_MAX as u64 {
            assert!(log.has_room(one));
            log.append(&BatchView::validate(&batch(base, 1)).unwrap())
                .unwrap();
        }
        assert!(log.is_full() && !log.has_room(one));
        let next = REPLICA_BUFFERS_MAX as u64;
        assert!(log
            .append(&BatchView::validate(&batch(next, 1)).unwrap())
            .is_err());
        log.trim(1);
        assert!(log.has_room(one), "a stored file makes room");
    }
}
