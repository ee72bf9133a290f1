//! The subscriber: one fetch loop per segment, feeding one bounded queue.
//!
//! Each loop long-polls its segment's owning shard and forwards the records
//! of each fetch, in offset order, as one queue item; so records of one
//! segment (and so of one key) arrive in the order they were published.
//! Records of different segments interleave in no particular order.
//!
//! Records point into the fetched frame (`Bytes`), so no record is copied;
//! a record kept alive keeps its whole fetch response alive.
//!
//! Following splits, merges and moves: from the start of a topic
//! (`Earliest`, `Offset`, `Timestamp`) loops start at the root segments
//! (those no segment lists as a successor), from `Latest` at the open
//! ones. A sealed segment is read to its end (`sealed` and nothing past
//! the high watermark) and its loop stops; the subscriber then describes
//! the topic afresh and starts each successor whose predecessors have all
//! been read to their end ([`crate::lineage`]), from its start (from the
//! same timestamp for `Timestamp`). A segment is read once. A segment's
//! records are queued before its successors' loops start, so a key's
//! records arrive in publish order end to end. A sealed segment is read
//! wherever its `address` says (any live broker serves it in a cluster).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use wire::frame::FrameType;
use wire::message::{Fetched, SegmentInfo, TopicInfo};
use wire::BatchView;
use wire::{BrokerPortRequest, DataRequest, FetchChecks, FetchFrom, PayloadRef, Response};

use crate::client::{unexpected, Client};
use crate::connection::is_stale_layout;
use crate::error::ClientError;
use crate::frame_io::ResponseFrame;
use crate::layout::Target;
use crate::lineage::Lineage;

/// Default for [`SubscribeOptions::max_bytes`]: 1 MiB.
pub const FETCH_MAX_BYTES_DEFAULT: u32 = 1 << 20;
/// Default for [`SubscribeOptions::max_wait_ms`].
pub const FETCH_MAX_WAIT_MS_DEFAULT: u32 = 500;
/// Default for [`SubscribeOptions::fetches_buffered_max`].
pub const FETCHES_BUFFERED_MAX_DEFAULT: usize = 16;
/// Times a fetch loop re-reads the layout after "not the owner" (or "no
/// such segment" from a broker that has not opened it yet, or a lost
/// connection) before it gives up; also times a finished loop re-reads it
/// until it shows the segment sealed. With the backoff below, about 30 s:
/// longer than a control plane's default 10 s to declare a silent broker
/// dead and move its segments.
const STALE_RETRIES_MAX: u32 = 32;
/// Wait before re-reading the layout, doubled for each retry up to
/// [`STALE_BACKOFF_MS_MAX`].
const STALE_BACKOFF_MS: u64 = 50;
const STALE_BACKOFF_MS_MAX: u64 = 1_000;

/// Settings of a [`Subscriber`].
#[derive(Debug, Clone, Copy)]
pub struct SubscribeOptions {
    /// Bytes one fetch asks for (at least one whole batch comes back).
    pub max_bytes: u32,
    /// How long the broker holds a fetch open when there is no new data.
    pub max_wait_ms: u32,
    /// Fetch responses queued for the reader, over all segments; loops wait
    /// beyond this. Memory is bounded by about this times `max_bytes`.
    pub fetches_buffered_max: usize,
    /// Replace each reference record's value by its payload, read from the
    /// filer when the record is taken ([`Subscriber::next`]). Off: records
    /// come with the reference ([`ValueSource::Reference`]).
    pub resolve_references: bool,
    /// Payloads longer than this are not resolved even when
    /// `resolve_references` is on: the record comes as a reference, to be
    /// streamed with [`crate::Client::open_payload`]. Bounds memory.
    pub resolve_bytes_max: u64,
    /// Start this many records before the end of each segment the
    /// subscription starts with (its `next_offset` when the subscription
    /// starts), instead of at `from`; `from` still chooses which segments
    /// those are (`Latest`: the open ones; otherwise the first ones of the
    /// topic's history). A segment with fewer records starts at its start;
    /// successors start at their start. `kelp sub --from -N`.
    pub from_end: Option<u64>,
    /// Keep retrying a broker that cannot be reached, or that refuses
    /// because the layout moved on (`NotOwner`, `SegmentSealed`,
    /// `ShuttingDown`, an offset past a sealed segment's end), forever
    /// (once a second at most), instead of giving up after about 30 s: for
    /// a reader that tails a topic through broker restarts and deaths.
    /// Records already delivered are not delivered again.
    pub reconnect: bool,
    /// Read on past records damaged on the broker's disk: each stretch
    /// skipped comes out of [`Subscriber::next`] as
    /// [`ClientError::Skipped`] (the subscription goes on). Off: such
    /// records end their segment's loop with the broker's `Corrupt` error,
    /// which names the chunk and the offsets. `kelp sub --skip-corrupt`.
    pub skip_corrupt: bool,
}

/// Default for [`SubscribeOptions::resolve_bytes_max`]: 256 MiB.
pub const RESOLVE_BYTES_MAX_DEFAULT: u64 = 256 << 20;

/// Where a record's `value` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueSource {
    /// The record carried the value itself.
    Inline,
    /// The record carried this reference; `value` is the payload, read and
    /// verified.
    Resolved(PayloadRef),
    /// The record carries this reference and `value` is its 40 encoded
    /// bytes: resolving was off or the payload is over
    /// `resolve_bytes_max`.
    Reference(PayloadRef),
}

impl Default for SubscribeOptions {
    fn default() -> Self {
        SubscribeOptions {
            max_bytes: FETCH_MAX_BYTES_DEFAULT,
            max_wait_ms: FETCH_MAX_WAIT_MS_DEFAULT,
            fetches_buffered_max: FETCHES_BUFFERED_MAX_DEFAULT,
            resolve_references: true,
            resolve_bytes_max: RESOLVE_BYTES_MAX_DEFAULT,
            from_end: None,
            reconnect: false,
            skip_corrupt: false,
        }
    }
}

/// One record as read from a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRecord {
    /// The segment it was appended to.
    pub segment: u32,
    /// Its offset in that segment.
    pub offset: u64,
    /// The producer's timestamp, ms since the Unix epoch.
    pub timestamp_ms: i64,
    pub key: Bytes,
    pub value: Bytes,
    /// `(name, value)` pairs in the producer's order.
    pub headers: Vec<(Bytes, Bytes)>,
    /// Whether `value` was inline or came by reference.
    pub source: ValueSource,
}

type Delivery = Result<Vec<OwnedRecord>, ClientError>;

/// Reads a topic. Dropping it stops its fetch loops.
///
/// It follows the topic's history: a sealed segment is read to its end,
/// then its successors (a merge's successor once both predecessors are
/// read), so each key's records come in publish order through splits,
/// merges and moves.
pub struct Subscriber {
    queue: mpsc::Receiver<Delivery>,
    ready: VecDeque<OwnedRecord>,
    follow: Arc<Follow>,
    client: Client,
    topic: String,
    options: SubscribeOptions,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("segments", &self.follow.lock().lineage.started())
            .field("ready", &self.ready.len())
            .finish()
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let mut state = self.follow.lock();
        state.closed = true;
        for l in state.loops.drain(..) {
            l.abort();
        }
    }
}

/// What the fetch loops of one subscriber share: the walk through the
/// topic's segments, and the loops to stop when the subscriber goes.
struct Follow {
    state: Mutex<FollowState>,
    /// Where successors start reading.
    successor_from: FetchFrom,
    /// Whether a segment read to its end starts its successors' loops
    /// (not when reading chosen segments only).
    follow_successors: bool,
}

struct FollowState {
    lineage: Lineage,
    /// Running loops (ended ones are pruned as new ones start).
    loops: Vec<JoinHandle<()>>,
    /// Set when the subscriber is dropped: no loop starts after.
    closed: bool,
}

impl Follow {
    fn lock(&self) -> std::sync::MutexGuard<'_, FollowState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Subscriber {
    /// Start reading `topic`: the segments `from` chooses and their
    /// successors, or (`only`) just the segments listed.
    pub(crate) async fn start(
        client: Client,
        topic: &str,
        from: FetchFrom,
        options: SubscribeOptions,
        only: Option<&[u32]>,
    ) -> Result<Subscriber, ClientError> {
        let info = client.describe_topic(topic).await?;
        if info.segments.is_empty() {
            return Err(ClientError::Layout(format!(
                "topic {topic} has no segments"
            )));
        }
        let (tx, queue) = mpsc::channel(options.fetches_buffered_max.max(1));
        let successor_from = match from {
            FetchFrom::Timestamp(t) => FetchFrom::Timestamp(t),
            _ => FetchFrom::Earliest,
        };
        let follow = Arc::new(Follow {
            state: Mutex::new(FollowState {
                lineage: Lineage::default(),
                loops: Vec::new(),
                closed: false,
            }),
            successor_from,
            follow_successors: only.is_none(),
        });
        let first = match only {
            Some(ids) => chosen_segments(&info, ids)?,
            None => follow
                .lock()
                .lineage
                .begin(&info, !matches!(from, FetchFrom::Latest)),
        };
        // Every loop is made before any starts, so a failure leaves none
        // running.
        let mut fetches = Vec::with_capacity(first.len());
        for segment in first {
            fetches.push(SegmentFetch::new(&client, topic, segment, options, &tx, &follow).await?);
        }
        {
            let mut state = follow.lock();
            for fetch in fetches {
                let from = match options.from_end {
                    Some(n) => FetchFrom::Offset(fetch.segment.next_offset.saturating_sub(n)),
                    None => from,
                };
                state.loops.push(tokio::spawn(fetch.run(from)));
            }
        }
        Ok(Subscriber {
            queue,
            ready: VecDeque::new(),
            follow,
            client,
            topic: topic.to_owned(),
            options,
        })
    }

    /// The next record, waiting for one if none is buffered. `None` once
    /// every segment's loop has ended (all segments sealed and read, or
    /// failed). An error ends only the loop of the segment it came from;
    /// [`ClientError::Skipped`] and [`ClientError::Payload`] end nothing.
    ///
    /// A reference record is resolved here (see
    /// [`SubscribeOptions::resolve_references`]); a payload that cannot be
    /// read gives [`ClientError::Payload`] for that record, and the next
    /// call goes on with the record after it.
    pub async fn next(&mut self) -> Option<Result<OwnedRecord, ClientError>> {
        loop {
            if let Some(r) = self.ready.pop_front() {
                return Some(self.resolve(r).await);
            }
            match self.queue.recv().await? {
                Ok(records) => self.ready.extend(records),
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// The next record if one is already here, without waiting: lets a
    /// reader flush its output before it blocks on [`Subscriber::next`].
    /// A record whose payload still has to be read is not ready.
    pub fn next_if_ready(&mut self) -> Option<Result<OwnedRecord, ClientError>> {
        loop {
            if let Some(r) = self.ready.front() {
                if self.must_resolve(r).is_some() {
                    return None;
                }
                return self.ready.pop_front().map(Ok);
            }
            match self.queue.try_recv().ok()? {
                Ok(records) => self.ready.extend(records),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

impl Subscriber {
    /// The reference of a record that `next` must resolve, if any.
    fn must_resolve(&self, record: &OwnedRecord) -> Option<PayloadRef> {
        match record.source {
            ValueSource::Reference(r)
                if self.options.resolve_references
                    && r.length <= self.options.resolve_bytes_max =>
            {
                Some(r)
            }
            _ => None,
        }
    }

    async fn resolve(&self, mut record: OwnedRecord) -> Result<OwnedRecord, ClientError> {
        let Some(reference) = self.must_resolve(&record) else {
            return Ok(record);
        };
        match self.client.read_payload(&self.topic, &reference).await {
            Ok(bytes) => {
                record.value = bytes;
                record.source = ValueSource::Resolved(reference);
                Ok(record)
            }
            Err(error) => Err(ClientError::Payload {
                segment: record.segment,
                offset: record.offset,
                error: Box::new(error),
            }),
        }
    }
}

/// Whether a request failed because its connection did (closed, broken,
/// silent past the timeout, or refused when dialed again), not because the
/// broker refused the request.
fn is_connection_lost(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Io { .. }
            | ClientError::Closed
            | ClientError::Timeout { .. }
            | ClientError::Connect { .. }
    )
}

/// Whether a fetch or a layout read that failed this way may succeed if
/// tried again: the layout moved on (or its broker is stopping), or the
/// connection went. Reading again is harmless.
fn is_worth_retrying(error: &ClientError) -> bool {
    is_stale_layout(error) || is_connection_lost(error)
}

/// The segments `ids` names, in that order; an id the topic never had is
/// an error.
fn chosen_segments(info: &TopicInfo, ids: &[u32]) -> Result<Vec<SegmentInfo>, ClientError> {
    ids.iter()
        .map(|id| {
            info.segments
                .iter()
                .find(|s| s.id == *id)
                .cloned()
                .ok_or_else(|| {
                    ClientError::Layout(format!("topic {} has no segment {id}", info.name))
                })
        })
        .collect()
}

/// The fetch loop of one segment.
struct SegmentFetch {
    client: Client,
    topic: String,
    segment: SegmentInfo,
    /// Where the segment's fetches go.
    target: Target,
    options: SubscribeOptions,
    tx: mpsc::Sender<Delivery>,
    follow: Arc<Follow>,
}

/// Why a fetch loop stopped without an error.
enum LoopEnd {
    /// The segment is sealed and was read to its end.
    Sealed,
    /// The subscriber is gone.
    ReaderGone,
}

impl SegmentFetch {
    async fn new(
        client: &Client,
        topic: &str,
        segment: SegmentInfo,
        options: SubscribeOptions,
        tx: &mpsc::Sender<Delivery>,
        follow: &Arc<Follow>,
    ) -> Result<SegmentFetch, ClientError> {
        Ok(SegmentFetch {
            target: client.target(&segment).await?,
            client: client.clone(),
            topic: topic.to_owned(),
            segment,
            options,
            tx: tx.clone(),
            follow: Arc::clone(follow),
        })
    }

    /// The loop, boxed: a loop starts its successors' loops, and the
    /// named type breaks that cycle for the compiler's `Send` check.
    fn run(mut self, from: FetchFrom) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let result = match self.fetch_until_end(from).await {
                Ok(LoopEnd::Sealed) => self.start_successors().await,
                Ok(LoopEnd::ReaderGone) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                let _ = self.tx.send(Err(e)).await;
            }
        })
    }

    async fn fetch_until_end(&mut self, mut from: FetchFrom) -> Result<LoopEnd, ClientError> {
        let timeout = self.client.request_timeout()
            + Duration::from_millis(u64::from(self.options.max_wait_ms));
        // The next offset to deliver: skips anything a fetch returns twice.
        let mut delivered_to = 0u64;
        let mut stale_retries = 0;
        // Trust until a batch fails its checksum; then the broker is asked
        // to verify (and, with `skip_corrupt`, to skip) for one fetch.
        let mut checks = FetchChecks::Trust;
        // Set after a fetch past the end of a segment the layout says is
        // sealed: where this reader had read to. The next fetch asks for
        // the segment's end, to tell a segment sealed below what was read
        // (its owner died first) from one whose end is yet to be seen.
        let mut probing_end: Option<u64> = None;
        loop {
            let request = BrokerPortRequest::Data(DataRequest::Fetch(wire::FetchRequest {
                topic: self.topic.clone(),
                segment: self.segment.id,
                from,
                max_bytes: self.options.max_bytes,
                max_wait_ms: self.options.max_wait_ms,
                checks,
                follower: None,
            }));
            let answer = match self.client.connection_to(self.target).await {
                Ok(conn) => conn.call(&request, "fetching records", timeout).await,
                Err(e) => Err(e),
            };
            // A refusal (a parked fetch answered `ShuttingDown` by a
            // stopping broker, `NotOwner` after a move) is retried like a
            // request that could not be sent.
            let answer = answer.and_then(|frame| {
                if frame.header.frame_type != FrameType::ErrorResponse {
                    return Ok(frame);
                }
                match frame.response() {
                    Err(e) => Err(e),
                    Ok(_) => Err(unexpected(&frame, "fetched")),
                }
            });
            let frame = match answer {
                Ok(f) => f,
                Err(e)
                    if e.broker_code() == Some(wire::ErrorCode::Corrupt)
                        && self.options.skip_corrupt
                        && checks != FetchChecks::SkipDamaged =>
                {
                    checks = FetchChecks::SkipDamaged;
                    continue;
                }
                Err(e)
                    if e.broker_code() == Some(wire::ErrorCode::OffsetOutOfRange)
                        && probing_end.is_none()
                        && self.may_retry(stale_retries, &e) =>
                {
                    let read_to = match from {
                        FetchFrom::Offset(o) => o,
                        _ => delivered_to,
                    };
                    tokio::time::sleep(stale_backoff(stale_retries)).await;
                    stale_retries = stale_retries.saturating_add(1);
                    match self.refresh().await {
                        Ok(()) if self.segment.sealed => {
                            probing_end = Some(read_to);
                            from = FetchFrom::Latest;
                        }
                        Ok(()) => {}
                        Err(e) if is_worth_retrying(&e) && self.may_retry(stale_retries, &e) => {}
                        Err(e) => return Err(e),
                    }
                    continue;
                }
                // Reading again is harmless (records below `delivered_to`
                // are skipped), so a lost connection is retried like a
                // stale layout: the owner may have left or died.
                Err(e) if is_worth_retrying(&e) && self.may_retry(stale_retries, &e) => {
                    tokio::time::sleep(stale_backoff(stale_retries)).await;
                    stale_retries = stale_retries.saturating_add(1);
                    // A broker that is still away or stopping fails the
                    // refresh the same way: one more retry, not the end.
                    match self.refresh().await {
                        Ok(()) => {}
                        Err(e) if is_worth_retrying(&e) && self.may_retry(stale_retries, &e) => {}
                        Err(e) => return Err(e),
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            stale_retries = 0;
            let (records, fetched_next, done) = {
                let verified = match frame.verified() {
                    Ok(v) => v,
                    // A batch that fails its checksum: damaged on the
                    // broker's disk, most likely. Ask again, the broker
                    // verifying what it sends.
                    Err(ClientError::Decode(_)) if checks == FetchChecks::Trust => {
                        checks = if self.options.skip_corrupt {
                            FetchChecks::SkipDamaged
                        } else {
                            FetchChecks::Verify
                        };
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let fetched = match verified.response {
                    Response::Fetched(f) => f,
                    _ => return Err(unexpected(&frame, "fetched")),
                };
                if fetched.segment != self.segment.id {
                    return Err(ClientError::UnexpectedResponse {
                        expected: "fetched records of the segment asked for",
                        got: frame.header.frame_type,
                    });
                }
                if checks == FetchChecks::SkipDamaged
                    && verified.batches.is_empty()
                    && fetched.next_offset > fetched.start_offset
                {
                    let skipped = ClientError::Skipped {
                        segment: self.segment.id,
                        from: fetched.start_offset,
                        to: fetched.next_offset,
                    };
                    if self.tx.send(Err(skipped)).await.is_err() {
                        return Ok(LoopEnd::ReaderGone);
                    }
                }
                let records = records_of(&frame, &fetched, &verified.batches, delivered_to)?;
                let done = fetched.sealed && fetched.next_offset >= fetched.high_watermark;
                (records, fetched.next_offset, done)
            };
            checks = FetchChecks::Trust;
            if let Some(read_to) = probing_end.take() {
                // `from` was `Latest`: the answer is the segment's end.
                if done && fetched_next < read_to {
                    let truncated = ClientError::Truncated {
                        segment: self.segment.id,
                        end: fetched_next,
                        read_to,
                    };
                    log::warn!("{}: {truncated}", self.topic);
                    if self.tx.send(Err(truncated)).await.is_err() {
                        return Ok(LoopEnd::ReaderGone);
                    }
                    return Ok(LoopEnd::Sealed);
                }
                from = FetchFrom::Offset(read_to);
                continue;
            }
            if let Some(last) = records.last() {
                delivered_to = last.offset + 1;
            }
            from = FetchFrom::Offset(fetched_next.max(delivered_to));
            if !records.is_empty() && self.tx.send(Ok(records)).await.is_err() {
                return Ok(LoopEnd::ReaderGone);
            }
            if done {
                return Ok(LoopEnd::Sealed);
            }
        }
    }

    /// This segment was read to its end (its records are queued): start
    /// the successors whose predecessors are all read, on the layout the
    /// broker that sealed it holds (newer than the one this loop started
    /// with), or failing that a description from the control plane.
    async fn start_successors(&self) -> Result<(), ClientError> {
        if !self.follow.follow_successors {
            return Ok(());
        }
        self.follow.lock().lineage.finished(self.segment.id);
        // The broker that said "sealed" holds a layout that seals it, with
        // the successors: ask it first, and the control plane only if
        // that fails.
        let sealed_in = |info: &TopicInfo| {
            info.segments
                .iter()
                .any(|s| s.id == self.segment.id && s.sealed)
        };
        let info = match self.client.held_layout(self.target, &self.topic).await {
            Ok(info) if sealed_in(&info) => info,
            Ok(_) => self.described_sealed().await?,
            Err(e) => {
                log::debug!("{}: held layout: {e}; describing instead", self.topic);
                self.described_sealed().await?
            }
        };
        let ready = self
            .follow
            .lock()
            .lineage
            .successors_ready(&info, self.segment.id);
        for segment in ready {
            let id = segment.id;
            let fetch = SegmentFetch::new(
                &self.client,
                &self.topic,
                segment,
                self.options,
                &self.tx,
                &self.follow,
            )
            .await?;
            log::debug!(
                "{}: segment {} read to its end, reading its successor {id}",
                self.topic,
                self.segment.id
            );
            let mut state = self.follow.lock();
            if state.closed {
                return Ok(());
            }
            state.loops.retain(|l| !l.is_finished());
            let handle = tokio::spawn(fetch.run(self.follow.successor_from));
            state.loops.push(handle);
        }
        Ok(())
    }

    /// The topic as the control plane describes it, asked again (a
    /// bounded number of times) until it shows this segment sealed.
    async fn described_sealed(&self) -> Result<TopicInfo, ClientError> {
        let mut retries = 0;
        loop {
            let info = match self.client.describe_topic(&self.topic).await {
                Ok(info) => info,
                Err(e) if is_worth_retrying(&e) && self.may_retry(retries, &e) => {
                    tokio::time::sleep(stale_backoff(retries)).await;
                    retries = retries.saturating_add(1);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let sealed = info
                .segments
                .iter()
                .any(|s| s.id == self.segment.id && s.sealed);
            if sealed || retries >= STALE_RETRIES_MAX {
                return Ok(info);
            }
            tokio::time::sleep(stale_backoff(retries)).await;
            retries += 1;
        }
    }

    /// Whether a fetch that failed `retries` times in a row, the last time
    /// with `error`, may be tried again: a bounded number of times, and
    /// with [`SubscribeOptions::reconnect`] forever while the broker is
    /// away, stopping or behind the layout (not when the topic or segment
    /// is gone).
    fn may_retry(&self, retries: u32, error: &ClientError) -> bool {
        // A broker that died, stopped or lost its segments to a move: the
        // layout catches up once the control plane acts (after its silence
        // limit for a death), however long that takes.
        let broker_away = is_connection_lost(error)
            || error
                .broker_code()
                .is_some_and(|c| c.is_stale_layout() || c == wire::ErrorCode::OffsetOutOfRange);
        (self.options.reconnect && broker_away) || retries < STALE_RETRIES_MAX
    }

    /// Re-read the segment's owner after "not the owner".
    async fn refresh(&mut self) -> Result<(), ClientError> {
        let info = self.client.describe_topic(&self.topic).await?;
        match info.segments.into_iter().find(|s| s.id == self.segment.id) {
            Some(s) => {
                self.target = self.client.target(&s).await?;
                self.segment = s;
                Ok(())
            }
            None => Err(ClientError::Layout(format!(
                "segment {} of {} is gone",
                self.segment.id, self.topic
            ))),
        }
    }
}

/// The wait before stale-layout retry `retry` (from 0).
fn stale_backoff(retry: u32) -> Duration {
    Duration::from_millis((STALE_BACKOFF_MS << retry.min(16)).min(STALE_BACKOFF_MS_MAX))
}

/// The records of a fetch response from `start_offset` (and from
/// `delivered_to`) on, from its validated batches, pointing into the frame.
fn records_of(
    frame: &ResponseFrame,
    fetched: &Fetched<'_>,
    batches: &[BatchView<'_>],
    delivered_to: u64,
) -> Result<Vec<OwnedRecord>, ClientError> {
    let first = fetched.start_offset.max(delivered_to);
    let mut out = Vec::new();
    let mut expected_base: Option<u64> = None;
    for batch in batches {
        // Batches of one fetch are contiguous; anything else is a broker
        // bug that would break offset order.
        if expected_base.is_some_and(|e| e != batch.base_offset()) {
            return Err(ClientError::Decode(wire::DecodeError::Invalid {
                what: "fetch response",
                reason: "batch offsets are not contiguous",
            }));
        }
        expected_base = Some(batch.next_offset());
        if batch.next_offset() <= first {
            continue;
        }
        for record in batch.records() {
            let offset = batch.base_offset() + u64::from(record.offset_delta);
            if offset < first {
                continue;
            }
            out.push(OwnedRecord {
                segment: fetched.segment,
                offset,
                timestamp_ms: record.timestamp_ms,
                key: frame.payload.slice_ref(record.key),
                value: frame.payload.slice_ref(record.value),
                source: match record.reference() {
                    Some(r) => ValueSource::Reference(r),
                    None => ValueSource::Inline,
                },
                headers: record
                    .headers()
                    .map(|h| {
                        (
                            frame.payload.slice_ref(h.name),
                            frame.payload.slice_ref(h.value),
                        )
                    })
                    .collect(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wire::batch::{set_base_offset, RecordHeader};
    use wire::frame::FrameHeader;
    use wire::BatchBuilder;

    fn batch(base: u64, n: u32) -> Vec<u8> {
        let mut b = BatchBuilder::new();
        for i in 0..n {
            let off = base + u64::from(i);
            b.push(
                off as i64,
                format!("k{off}").as_bytes(),
                format!("v{off}").as_bytes(),
                &[RecordHeader {
                    name: b"n",
                    value: b"h",
                }],
            )
            .unwrap();
        }
        let mut bytes = b.finish(0, 0).to_vec();
        set_base_offset(&mut bytes, base);
        bytes
    }

    fn frame(start_offset: u64, batches: &[Vec<u8>]) -> ResponseFrame {
        let joined: Vec<u8> = batches.concat();
        let mut out = Vec::new();
        Response::Fetched(Fetched {
            segment: 4,
            start_offset,
            next_offset: 0,
            high_watermark: 0,
            sealed: false,
            stored_end: 0,
            batches: &joined,
        })
        .encode(1, &mut out);
        let header = FrameHeader::decode(out[..16].try_into().unwrap()).unwrap();
        ResponseFrame {
            header,
            payload: Bytes::from(out[16..].to_vec()),
        }
    }

    fn offsets(f: &ResponseFrame, delivered_to: u64) -> Result<Vec<u64>, ClientError> {
        let v = f.verified()?;
        let Response::Fetched(fetched) = v.response else {
            panic!()
        };
        Ok(records_of(f, &fetched, &v.batches, delivered_to)?
            .iter()
            .map(|r| r.offset)
            .collect())
    }

    #[test]
    fn records_from_start_offset_in_order() {
        let f = frame(12, &[batch(10, 5), batch(15, 5)]);
        assert_eq!(offsets(&f, 0).unwrap(), (12..20).collect::<Vec<_>>());
        assert_eq!(offsets(&f, 17).unwrap(), (17..20).collect::<Vec<_>>());
        let v = f.verified().unwrap();
        let Response::Fetched(fetched) = v.response else {
            panic!()
        };
        let r = &records_of(&f, &fetched, &v.batches, 0).unwrap()[0];
        assert_eq!(r.segment, 4);
        assert_eq!(&r.key[..], b"k12");
        assert_eq!(&r.value[..], b"v12");
        assert_eq!(r.timestamp_ms, 12);
        assert_eq!(r.headers, vec![(Bytes::from("n"), Bytes::from("h"))]);
    }

    #[test]
    fn corrupt_or_gapped_batches_are_errors() {
        let mut bad = batch(10, 5);
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(
            offsets(&frame(10, &[bad]), 0),
            Err(ClientError::Decode(_))
        ));
        let truncated = batch(10, 5);
        let f = frame(10, &[truncated[..truncated.len() - 3].to_vec()]);
        assert!(matches!(offsets(&f, 0), Err(ClientError::Decode(_))));
        let f = frame(10, &[batch(10, 5), batch(16, 5)]);
        assert!(matches!(offsets(&f, 0), Err(ClientError::Decode(_))));
    }
}
