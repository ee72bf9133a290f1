//! The routing producer: records are hashed by key into a batch per open
//! segment, and each batch goes to the shard that owns its segment (on
//! whichever broker of a cluster holds it).
//!
//! Order: all batches of one segment leave in order on that shard's one
//! connection, and the broker handles a connection's requests in order, so
//! records of one key are appended in the order `send` was called.
//!
//! Splits, merges and moves under load: a batch refused because the
//! layout changed (`NotOwner`, `SegmentSealed`, or `SegmentNotFound` /
//! `TopicNotFound` from a broker that has not opened the successor yet)
//! was not appended; it is re-routed on a fresh layout, split by key if
//! needed, and resent, with bounded attempts and time, then a clear error.
//! A `SegmentSealed` refusal names the open segments that took over the
//! range and their owners ([`ClientError::Sealed`]): the producer patches
//! its layout with them and resends at once, asking no control plane; a
//! successor its owner has not opened yet is tried again after a pause of
//! a millisecond or so; any other refusal gets a describe after a short
//! backoff. Per-key order holds through it: refused
//! batches are resent one at a time in the order they were first sent,
//! each only after every earlier batch settled ([`crate::in_flight`]);
//! batches built on a new layout leave only once every batch of the old
//! one settled; and after a layout change a segment's first batch goes
//! alone until the broker took it, since a successor not open yet could
//! refuse one batch and take the next. Each record is acknowledged once:
//! only the pieces the broker took are counted. A batch whose owner cannot
//! be reached at all (it left the cluster, or died) was never sent either,
//! and goes the same way. With ack `none` a refusal arrives as an error at
//! the next flush, not as a resend.
//!
//! Lost connections: by default batches carry producer id 0 (none), so a
//! connection lost with batches in flight is reported, not retried (they
//! may have been appended). An idempotent producer
//! ([`ProducerConfig::idempotent`]) asks for a producer id when it starts
//! and stamps each batch with it and its sequence in the segment
//! (docs/wire-format.md, "Idempotent producers"); a batch whose connection
//! was lost, or that timed out, is resent unchanged to its segment, in send
//! order, and the owner answers a copy it already holds with the offsets it
//! has, so each record is stored once. New batches wait until those
//! resends are settled, and at most [`IDEMPOTENT_IN_FLIGHT_MAX`] batches
//! are in flight (the owner remembers a producer's last five batches per
//! segment). A batch whose segment was sealed before its resend goes,
//! unchanged and naming that segment, to the shard that serves its first
//! key now, which answers from what the sealed segment stored (its offsets
//! there), or refuses it `SegmentSealed` if the segment never took it; it
//! then goes to the successors as a new batch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use wire::batch::{BatchView, RecordHeader};
use wire::message::Successors;
use wire::{AckMode, BatchBuilder, DataRequest, ErrorCode, PayloadRef, Response};

use crate::client::{unexpected, Client};
use crate::connection::{is_stale_layout, PendingResponse};
use crate::error::ClientError;
use crate::frame_io::ResponseFrame;
use crate::in_flight::InFlight;
use crate::layout::{Layout, Route, Target};

/// Default for [`ProducerConfig::batch_bytes_max`]: 1 MiB.
pub const BATCH_BYTES_MAX_DEFAULT: usize = 1 << 20;
/// Default for [`ProducerConfig::linger_ms`].
pub const LINGER_MS_DEFAULT: u64 = 5;
/// Default for [`ProducerConfig::by_ref_over`]: 1 MiB.
pub const BY_REF_OVER_DEFAULT: usize = 1 << 20;
/// Default for [`ProducerConfig::in_flight_batches_max`].
pub const IN_FLIGHT_BATCHES_MAX_DEFAULT: usize = 64;
/// Times a batch refused for a stale layout is resent on a layout asked
/// for afresh (a describe).
pub const RESEND_ATTEMPTS_MAX: u32 = 10;
/// Wait before a resend on a layout asked for afresh, doubled for each
/// later one up to [`RESEND_BACKOFF_MS_MAX`], so the control plane has
/// time to open the successors. A resend goes at once, with no describe,
/// when a newer layout than the one it was tried on is known (a sealed
/// refusal names the successors: `ClientError::Sealed`).
const RESEND_BACKOFF_MS: u64 = 20;
/// First pause before trying a successor again that its owner has not
/// opened yet, doubled each time up to [`NOT_OPEN_PAUSE_US_MAX`], at most
/// [`NOT_OPEN_PAUSES_MAX`] times in a row (about 80 ms in all: a merge
/// across brokers opens its successor only after two seals) before the
/// layout is asked afresh.
const NOT_OPEN_PAUSE_US: u64 = 500;
const NOT_OPEN_PAUSE_US_MAX: u64 = 2_000;
const NOT_OPEN_PAUSES_MAX: u32 = 40;
/// Tries of one resend in all (at once, after a pause, or on a fresh
/// layout): a bound even for a layout that changes at every try.
const RESEND_TRIES_MAX: u32 = 64;
const RESEND_BACKOFF_MS_MAX: u64 = 1_000;
/// How long one batch may keep being refused before the producer fails.
const RESEND_TIME_MS_MAX: u64 = 30_000;
/// The producer id batches carry: 0 means "none" (no de-duplication).
const PRODUCER_ID_NONE: u64 = wire::producer_id::PRODUCER_ID_NONE;
/// Batches in flight at most for an idempotent producer: the owner of a
/// segment recognises a resend of a producer's last five batches there
/// (`kafka::idempotence::RECENT_BATCHES_MAX`, as Kafka's limit).
pub const IDEMPOTENT_IN_FLIGHT_MAX: usize = 5;
/// How many sequence numbers there are: after 2^31 - 1 comes 0.
const SEQUENCE_SPAN: u64 = 1 << 31;

/// Settings of a [`Producer`].
#[derive(Debug, Clone, Copy)]
pub struct ProducerConfig {
    /// When the broker acknowledges a batch.
    pub ack: AckMode,
    /// A segment's batch is sent once it reaches this many bytes (capped by
    /// `wire::limits::BATCH_BYTES_MAX`; one larger record goes alone).
    pub batch_bytes_max: usize,
    /// A batch that has not filled is sent this long after its first
    /// record; 0 sends every record at once.
    pub linger_ms: u64,
    /// Batches sent but not yet acknowledged; `send` waits beyond this.
    pub in_flight_batches_max: usize,
    /// Values longer than this are uploaded to the filer first and sent as
    /// a reference ([`crate::Client::upload_payload`]); `None` sends every
    /// value inline (and refuses one over the record limit).
    pub by_ref_over: Option<usize>,
    /// Stamp batches with a producer id and sequences, and resend batches
    /// whose connection was lost: each record stored once (module docs).
    /// Caps `in_flight_batches_max` at [`IDEMPOTENT_IN_FLIGHT_MAX`].
    pub idempotent: bool,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            ack: AckMode::Leader,
            batch_bytes_max: BATCH_BYTES_MAX_DEFAULT,
            linger_ms: LINGER_MS_DEFAULT,
            in_flight_batches_max: IN_FLIGHT_BATCHES_MAX_DEFAULT,
            by_ref_over: Some(BY_REF_OVER_DEFAULT),
            idempotent: false,
        }
    }
}

/// Publishes records to one topic, routing each by its key.
///
/// Splits, merges and moves under load are followed: a batch the broker
/// refuses because the layout changed was not stored; it is re-routed on
/// a fresh layout and resent (bounded attempts and time, then an error),
/// each key's records still appended in `send` order and each
/// acknowledged once.
///
/// After the first failure (a broker error other than a stale layout, a
/// lost connection, a timeout) every later `send` and `flush` returns that
/// error: records sent after it may or may not have been stored. Call
/// [`Producer::flush`] before dropping a producer; dropping it abandons
/// records not yet sent.
pub struct Producer {
    shared: Arc<Shared>,
    linger: JoinHandle<()>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("topic", &self.shared.topic)
            .field("config", &self.shared.config)
            .finish()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.linger.abort();
    }
}

struct Shared {
    client: Client,
    topic: String,
    config: ProducerConfig,
    batches: tokio::sync::Mutex<Accumulator>,
    /// One permit per batch awaiting its acknowledgement.
    in_flight: Arc<Semaphore>,
    in_flight_batches_max: u32,
    acked_records: AtomicU64,
    /// Batches resent unchanged and taken (idempotent producers).
    resent_unchanged: AtomicU64,
    failed: AtomicBool,
    failure: Mutex<Option<ClientError>>,
    /// The newest layout, replaced after a stale-layout refusal.
    layout: Mutex<(u64, Arc<Layout>)>,
    layout_version: AtomicU64,
    /// Batches awaiting an answer, in send order, and the refused ones
    /// waiting to be resent.
    in_flight_order: Mutex<InFlight<Refused>>,
    /// Wakes the linger task when a batch gets its first record.
    linger_wake: Notify,
    /// An idempotent producer's id and sequences.
    stamps: Option<Stamps>,
}

/// An idempotent producer's id, and the next sequence number of each
/// segment it wrote to.
struct Stamps {
    producer_id: u64,
    next: Mutex<std::collections::HashMap<u32, u32>>,
}

impl Stamps {
    fn next(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u32, u32>> {
        self.next.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take the sequences of `records` records in `segment`; the first.
    fn take(&self, segment: u32, records: u32) -> u32 {
        let mut next = self.next();
        let first = next.get(&segment).copied().unwrap_or(0);
        next.insert(segment, sequence_after(first, records));
        first
    }

    /// Give back the sequences taken for a batch that was never sent, if
    /// none were taken after them (else the gap is the segment's to refuse,
    /// which only a segment that is sealed anyway can meet: batches after a
    /// lost one wait for its resend).
    fn give_back(&self, segment: u32, first: u32, records: u32) {
        let mut next = self.next();
        if next.get(&segment) == Some(&sequence_after(first, records)) {
            next.insert(segment, first);
        }
    }
}

/// The sequence `records` records after `first`, wrapping to 0 past
/// 2^31 - 1.
fn sequence_after(first: u32, records: u32) -> u32 {
    // Below 2^31 after the remainder, so the cast keeps the value.
    ((u64::from(first) + u64::from(records)) % SEQUENCE_SPAN) as u32
}

/// Whether a failed send left the batch unsent for certain (so it may be
/// re-routed without risk of appending it twice).
enum NeverSent {
    Yes,
    No,
}

/// A batch refused for a stale layout, waiting for its turn to be resent.
struct Refused {
    batch: Bytes,
    /// The layout version it was built on.
    layout_version: u64,
    /// Whether its refusal said its segment is not open yet (a successor
    /// its owner has not opened): worth a short pause, not a new layout.
    not_open_yet: bool,
    /// The segment it was sent to stamped (an idempotent producer's), and
    /// whether to resend it to that segment unchanged: set when its
    /// connection was lost, so it may have been appended there.
    stamped_for: Option<u32>,
    resend_unchanged: bool,
    /// Its in-flight slot, held until it is settled.
    _permit: OwnedSemaphorePermit,
}

/// A record's value as given to the producer.
#[derive(Clone, Copy)]
enum Value<'a> {
    Inline(&'a [u8]),
    Reference(&'a PayloadRef),
}

/// The batches being filled, one per open segment of `layout`.
struct Accumulator {
    layout: Arc<Layout>,
    layout_version: u64,
    open: Vec<OpenBatch>,
    /// Shards written with ack `none` since the last flush, which checks
    /// them for errors the broker sent back.
    shards_written: Vec<Target>,
}

struct OpenBatch {
    builder: BatchBuilder,
    /// When the first record went in.
    since: Option<Instant>,
    /// Whether the broker took a batch for this segment since the layout
    /// was adopted. Until then a batch goes alone: a segment not open yet
    /// (`SegmentNotFound`, `NotOwner` for a few ms) could refuse one batch
    /// and take the next pipelined one, which would overtake the refused
    /// one's resend. Once open, a segment refuses only for good (sealed).
    confirmed: bool,
}

impl Accumulator {
    fn new(layout: Arc<Layout>, layout_version: u64) -> Accumulator {
        let open = layout
            .routes()
            .iter()
            .map(|_| OpenBatch {
                builder: BatchBuilder::new(),
                since: None,
                confirmed: false,
            })
            .collect();
        Accumulator {
            layout,
            layout_version,
            open,
            shards_written: Vec::new(),
        }
    }
}

impl Producer {
    pub(crate) async fn start(
        client: Client,
        topic: &str,
        config: ProducerConfig,
    ) -> Result<Producer, ClientError> {
        let info = client.describe_topic(topic).await?;
        let layout = Arc::new(client.layout(&info).await?);
        let stamps = if config.idempotent {
            Some(Stamps {
                producer_id: client.init_producer().await?,
                next: Mutex::new(std::collections::HashMap::new()),
            })
        } else {
            None
        };
        let in_flight_max = if config.idempotent {
            config.in_flight_batches_max.min(IDEMPOTENT_IN_FLIGHT_MAX)
        } else {
            config.in_flight_batches_max
        };
        let in_flight_batches_max = u32::try_from(in_flight_max.max(1)).unwrap_or(u32::MAX);
        let shared = Arc::new(Shared {
            client,
            topic: topic.to_owned(),
            config,
            batches: tokio::sync::Mutex::new(Accumulator::new(Arc::clone(&layout), 0)),
            in_flight: Arc::new(Semaphore::new(in_flight_batches_max as usize)),
            in_flight_batches_max,
            acked_records: AtomicU64::new(0),
            resent_unchanged: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            layout: Mutex::new((0, layout)),
            layout_version: AtomicU64::new(0),
            in_flight_order: Mutex::new(InFlight::new()),
            linger_wake: Notify::new(),
            stamps,
        });
        let linger = tokio::spawn(linger_loop(
            Arc::clone(&shared),
            Duration::from_millis(config.linger_ms),
        ));
        Ok(Producer { shared, linger })
    }

    /// The topic this producer writes.
    pub fn topic(&self) -> &str {
        &self.shared.topic
    }

    /// Add a record to its segment's batch, timestamped now. Returns once
    /// the record is batched (not stored); waits while
    /// `in_flight_batches_max` batches await acknowledgement.
    pub async fn send(
        &self,
        key: &[u8],
        value: &[u8],
        headers: &[(&[u8], &[u8])],
    ) -> Result<(), ClientError> {
        self.send_at(now_ms(), key, value, headers).await
    }

    /// [`Producer::send`] with the record's timestamp (ms since the Unix
    /// epoch) given by the caller. A value over `by_ref_over` is uploaded
    /// first (this waits for the upload) and sent as a reference.
    pub async fn send_at(
        &self,
        timestamp_ms: i64,
        key: &[u8],
        value: &[u8],
        headers: &[(&[u8], &[u8])],
    ) -> Result<(), ClientError> {
        if self
            .shared
            .config
            .by_ref_over
            .is_some_and(|limit| value.len() > limit)
        {
            self.shared.check_failure()?;
            let reference = self
                .shared
                .client
                .upload_payload(&self.shared.topic, value)
                .await?;
            return self
                .push(timestamp_ms, key, Value::Reference(&reference), headers)
                .await;
        }
        self.push(timestamp_ms, key, Value::Inline(value), headers)
            .await
    }

    /// Send a record whose value is a payload already uploaded with
    /// [`crate::Client::upload_payload`], timestamped now.
    pub async fn send_reference(
        &self,
        key: &[u8],
        reference: &PayloadRef,
        headers: &[(&[u8], &[u8])],
    ) -> Result<(), ClientError> {
        self.push(now_ms(), key, Value::Reference(reference), headers)
            .await
    }

    async fn push(
        &self,
        timestamp_ms: i64,
        key: &[u8],
        value: Value<'_>,
        headers: &[(&[u8], &[u8])],
    ) -> Result<(), ClientError> {
        let encoded;
        let value_bytes: &[u8] = match value {
            Value::Inline(v) => v,
            Value::Reference(r) => {
                encoded = r.encode();
                &encoded
            }
        };
        let push = |builder: &mut BatchBuilder, headers: &[RecordHeader<'_>]| match value {
            Value::Inline(v) => builder.push(timestamp_ms, key, v, headers),
            Value::Reference(r) => builder.push_reference(timestamp_ms, key, r, headers),
        };
        let shared = &self.shared;
        shared.check_failure()?;
        let converted: Vec<RecordHeader<'_>>;
        let headers: &[RecordHeader<'_>] = if headers.is_empty() {
            &[]
        } else {
            converted = headers
                .iter()
                .map(|(name, value)| RecordHeader { name, value })
                .collect();
            &converted
        };
        let mut acc = shared.batches.lock().await;
        shared.sync_layout(&mut acc).await?;
        let i = acc.layout.route_key(key).ok_or_else(|| {
            ClientError::Layout(format!(
                "no open segment of {} covers key hash {:#010x}",
                shared.topic,
                wire::key_hash(key)
            ))
        })?;
        let limit = shared.config.batch_bytes_max;
        let record_bytes = BatchBuilder::record_bytes(key, value_bytes, headers);
        if must_send_before(&acc.open[i].builder, record_bytes, limit) {
            shared.dispatch(&mut acc, i).await?;
        }
        if let Err(e) = push(&mut acc.open[i].builder, headers) {
            // A full batch or a timestamp too far from the batch's first:
            // send what is there and start a new batch with this record.
            if acc.open[i].builder.is_empty() {
                return Err(ClientError::InvalidRecord(e));
            }
            shared.dispatch(&mut acc, i).await?;
            push(&mut acc.open[i].builder, headers).map_err(ClientError::InvalidRecord)?;
        }
        let open = &mut acc.open[i];
        if is_full(&open.builder, limit) || shared.config.linger_ms == 0 {
            shared.dispatch(&mut acc, i).await?;
        } else if open.since.is_none() {
            open.since = Some(Instant::now());
            shared.linger_wake.notify_one();
        }
        Ok(())
    }

    /// Send every batch not yet sent and wait until each batch in flight is
    /// acknowledged (with ack `none`: until the broker has handled them,
    /// checked by a round trip on each connection used). Returns the
    /// records acknowledged so far (with ack `none`: sent), or the first
    /// failure.
    pub async fn flush(&self) -> Result<u64, ClientError> {
        let shared = &self.shared;
        let shards_written = {
            let mut acc = shared.batches.lock().await;
            shared.sync_layout(&mut acc).await?;
            for i in 0..acc.open.len() {
                shared.dispatch(&mut acc, i).await?;
            }
            std::mem::take(&mut acc.shards_written)
        };
        shared.wait_settled().await?;
        for target in shards_written {
            let conn = shared.client.connection_to(target).await?;
            // The broker handles a connection's requests in order, so once
            // this answer is back every earlier produce was handled and any
            // error it caused has arrived.
            conn.call(
                &DataRequest::Shards.into(),
                "confirming unacknowledged produces",
                shared.client.request_timeout(),
            )
            .await?;
            if let Some(e) = conn.take_unsolicited_errors().into_iter().next() {
                shared.fail(e);
            }
        }
        shared.check_failure()?;
        Ok(self.acked_records())
    }

    /// Records acknowledged so far (with ack `none`: sent).
    pub fn acked_records(&self) -> u64 {
        self.shared.acked_records.load(Ordering::Relaxed)
    }

    /// Batches an idempotent producer resent unchanged after their
    /// connection was lost (or their answer timed out), and that the owner
    /// then took: stored by the resend, or found stored already.
    pub fn resent_batches(&self) -> u64 {
        self.shared.resent_unchanged.load(Ordering::Relaxed)
    }
}

impl Shared {
    fn check_failure(&self) -> Result<(), ClientError> {
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        match self
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Remember the first failure; later ones are consequences of it.
    fn fail(&self, error: ClientError) {
        log::debug!("producer for {} failed: {error}", self.topic);
        let mut f = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(error);
        }
        self.failed.store(true, Ordering::Release);
    }

    /// Adopt a layout refreshed by a resend: send the batches built for the
    /// old one first (a stale one is resent), wait until every batch in
    /// flight settled (so no batch on the new layout overtakes a resend of
    /// the same keys), then batch for the new one.
    async fn sync_layout(self: &Arc<Self>, acc: &mut Accumulator) -> Result<(), ClientError> {
        if self.layout_version.load(Ordering::Acquire) == acc.layout_version {
            return Ok(());
        }
        if self.stamps.is_some() {
            // Batches being resent unchanged go first: a later batch of
            // the same segment ahead of them would be a sequence gap.
            self.wait_settled().await?;
            self.check_failure()?;
        }
        for i in 0..acc.open.len() {
            self.dispatch(acc, i).await?;
        }
        self.wait_settled().await?;
        self.check_failure()?;
        let (version, layout) = self
            .layout
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let shards_written = std::mem::take(&mut acc.shards_written);
        *acc = Accumulator::new(layout, version);
        acc.shards_written = shards_written;
        Ok(())
    }

    /// Send open batch `i` if it has records. Waits for an in-flight slot.
    async fn dispatch(
        self: &Arc<Self>,
        acc: &mut Accumulator,
        i: usize,
    ) -> Result<(), ClientError> {
        let result = self.try_dispatch(acc, i).await;
        if let Err(e) = &result {
            self.fail(e.clone());
        }
        result
    }

    async fn try_dispatch(
        self: &Arc<Self>,
        acc: &mut Accumulator,
        i: usize,
    ) -> Result<(), ClientError> {
        let Some(route) = acc.layout.routes().get(i).copied() else {
            return Ok(());
        };
        let open = &mut acc.open[i];
        if open.builder.is_empty() {
            return Ok(());
        }
        let records = open.builder.len();
        let batch_bytes = open.builder.bytes();
        let permit = Arc::clone(&self.in_flight)
            .acquire_owned()
            .await
            .map_err(|_| ClientError::Closed)?;
        let ack = self.config.ack;
        let submitted = match self.client.connection_to(route.target).await {
            Ok(conn) => {
                let (batch, taken) = self.finish_for(&mut open.builder, route.segment);
                conn.submit(
                    &DataRequest::Produce {
                        topic: &self.topic,
                        segment: route.segment,
                        ack,
                        batch,
                    }
                    .into(),
                    ack != AckMode::None,
                )
                .await
                // Every error of `submit` means the frame was never queued
                // (the connection had failed, or its broker said goodbye).
                .map_err(|e| {
                    self.give_back(route.segment, taken, records);
                    (e, NeverSent::Yes)
                })
            }
            Err(e) if is_stale_layout(&e) => Err((e, NeverSent::Yes)),
            Err(e) => Err((e, NeverSent::No)),
        };
        let submitted = match submitted {
            Ok(s) => Ok(s),
            Err((e, NeverSent::Yes)) => {
                // The owner cannot be reached (it left the cluster, is
                // stopping, or died and its segments are being moved).
                // The batch goes the way of a refused one: re-routed on a
                // fresh layout, in send order.
                log::debug!("{}: batch not sent ({e}); re-routing it", self.topic);
                let batch = Bytes::copy_from_slice(open.builder.finish(PRODUCER_ID_NONE, 0));
                open.builder.clear();
                open.since = None;
                let refused = Refused {
                    batch,
                    layout_version: acc.layout_version,
                    not_open_yet: false,
                    stamped_for: None,
                    resend_unchanged: false,
                    _permit: permit,
                };
                if self.stamps.is_some() {
                    // Later batches wait until this one is resent: one
                    // stamped after it must not reach its segment first.
                    self.hold_new_batches();
                }
                let resend_now = {
                    let mut order = self.order();
                    let seq = order.sent();
                    order.refused(seq, refused)
                };
                if resend_now {
                    let shared = Arc::clone(self);
                    tokio::spawn(async move { shared.resend_in_order().await });
                }
                return Ok(());
            }
            Err((e, NeverSent::No)) => Err(e),
        };
        // Sent or failed, the records leave the builder: a failure is
        // reported, never silently retried.
        open.builder.clear();
        open.since = None;
        let submitted = submitted?;
        match submitted.response {
            None => {
                self.acked_records
                    .fetch_add(u64::from(records), Ordering::Relaxed);
                if !acc.shards_written.contains(&route.target) {
                    acc.shards_written.push(route.target);
                }
            }
            Some(pending) => {
                let batch = submitted
                    .frame
                    .slice(submitted.frame.len().saturating_sub(batch_bytes)..);
                // Still under the accumulator's lock, so sequence numbers
                // follow the order batches were queued on connections.
                let seq = self.order().sent();
                let refused = Refused {
                    batch,
                    layout_version: acc.layout_version,
                    not_open_yet: false,
                    stamped_for: self.stamps.as_ref().map(|_| route.segment),
                    resend_unchanged: false,
                    _permit: permit,
                };
                tokio::spawn(Arc::clone(self).settle(seq, pending, refused));
                if !acc.open[i].confirmed {
                    // The first batch since the layout changed goes alone
                    // (see `OpenBatch::confirmed`); once it is settled
                    // without failure the broker took it, resent or not.
                    self.wait_settled().await?;
                    self.check_failure()?;
                    acc.open[i].confirmed = true;
                }
            }
        }
        Ok(())
    }

    /// Wait until every batch sent is settled (acknowledged, resent, or
    /// failed): every in-flight slot is free then.
    async fn wait_settled(&self) -> Result<(), ClientError> {
        let all = self
            .in_flight
            .acquire_many(self.in_flight_batches_max)
            .await
            .map_err(|_| ClientError::Closed)?;
        drop(all);
        Ok(())
    }

    fn order(&self) -> std::sync::MutexGuard<'_, InFlight<Refused>> {
        self.in_flight_order
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Wait for one batch's acknowledgement; on a stale layout queue it to
    /// be resent in send order. The in-flight slot (in `sent`) is held
    /// until the batch is settled either way.
    async fn settle(self: Arc<Self>, seq: u64, pending: PendingResponse, sent: Refused) {
        let result = pending
            .wait(
                "waiting for a produce acknowledgement",
                self.client.request_timeout(),
            )
            .await;
        let resend_now = match self.acknowledged(result) {
            Ok(n) => {
                self.acked_records
                    .fetch_add(u64::from(n), Ordering::Relaxed);
                self.order().settled(seq)
            }
            Err(e) if is_stale_layout(&e) => {
                if let ClientError::Sealed { successors, .. } = &e {
                    self.adopt_successors(successors).await;
                }
                let mut sent = sent;
                sent.not_open_yet = is_not_open_yet(&e);
                self.order().refused(seq, sent)
            }
            Err(e) if sent.stamped_for.is_some() && may_resend_unchanged(&e) => {
                // It may have been appended (or an earlier batch it follows
                // is being resent): resent unchanged, in send order; the
                // owner answers a copy it holds with its offsets.
                log::debug!("{}: batch to be resent unchanged ({e})", self.topic);
                self.hold_new_batches();
                let mut sent = sent;
                sent.resend_unchanged = true;
                self.order().refused(seq, sent)
            }
            Err(e) => {
                self.fail(e);
                self.order().settled(seq)
            }
        };
        if resend_now {
            self.resend_in_order().await;
        }
    }

    /// Be the resender: resend refused batches one at a time, oldest
    /// first, while the oldest unsettled batch is a refused one. After a
    /// failure the rest are dropped unsent (their slots freed), since the
    /// producer reports the failure from then on.
    async fn resend_in_order(self: &Arc<Self>) {
        loop {
            let next = self.order().next_resend();
            let Some((seq, refused)) = next else {
                return;
            };
            if !self.failed.load(Ordering::Acquire) {
                let unchanged = refused.stamped_for.filter(|_| refused.resend_unchanged);
                let resent = self
                    .resend(
                        refused.batch,
                        refused.layout_version,
                        refused.not_open_yet,
                        unchanged,
                    )
                    .await;
                if let Err(e) = resent {
                    self.fail(e);
                }
            }
            // The slot is freed only after the batch is marked settled.
            let _permit = refused._permit;
            self.order().settled(seq);
        }
    }

    /// The record count of a produce acknowledgement.
    fn acknowledged(&self, frame: Result<ResponseFrame, ClientError>) -> Result<u32, ClientError> {
        let frame = frame?;
        match frame.response()? {
            Response::Produced { record_count, .. } => Ok(record_count),
            _ => Err(unexpected(&frame, "produced")),
        }
    }

    /// Re-route a refused batch on a fresh layout and send it again, one
    /// piece at a time, until every piece is appended; rare, so simple
    /// beats fast here. A piece the broker refuses for a stale layout again
    /// is retried after a backoff, within [`RESEND_ATTEMPTS_MAX`] attempts
    /// and [`RESEND_TIME_MS_MAX`].
    async fn resend(
        self: &Arc<Self>,
        batch: Bytes,
        sent_on: u64,
        not_open_yet: bool,
        unchanged: Option<u32>,
    ) -> Result<(), ClientError> {
        let started = Instant::now();
        // Each with the segment it is to go to unchanged, if any.
        let mut work: Vec<(Bytes, Option<u32>)> = vec![(batch, unchanged)];
        let mut last_refusal: Option<ClientError> = None;
        let mut tried_on = sent_on;
        let mut not_open_yet = not_open_yet;
        let (mut refreshes, mut pauses) = (0u32, 0u32);
        for _ in 0..RESEND_TRIES_MAX {
            let known = self.current_layout();
            let layout = if known.0 > tried_on {
                // A newer layout is known (a sealed refusal named the
                // successors, or another resend asked): try it at once.
                tried_on = known.0;
                known.1
            } else if not_open_yet && pauses < NOT_OPEN_PAUSES_MAX {
                // The layout is right but a successor is not open on its
                // owner yet (the control plane opens it right after the
                // seal): look again shortly, on the same layout.
                let pause = (NOT_OPEN_PAUSE_US << pauses.min(8)).min(NOT_OPEN_PAUSE_US_MAX);
                pauses += 1;
                tokio::time::sleep(Duration::from_micros(pause)).await;
                known.1
            } else {
                if refreshes >= RESEND_ATTEMPTS_MAX {
                    break;
                }
                let backoff = (RESEND_BACKOFF_MS << refreshes.min(16)).min(RESEND_BACKOFF_MS_MAX);
                refreshes += 1;
                tokio::time::sleep(Duration::from_millis(backoff)).await;
                match self.refresh_layout().await {
                    Ok((version, layout)) => {
                        tried_on = version;
                        layout
                    }
                    // The layout may be caught mid-change (no open segment
                    // for a range for a moment); an unknown topic while
                    // the successor is opened also passes.
                    Err(e) if matches!(e, ClientError::Layout(_)) || is_stale_layout(&e) => {
                        last_refusal = Some(e);
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            };
            let mut refused = Vec::new();
            not_open_yet = false;
            for (batch, unchanged) in work.drain(..) {
                let route_unchanged =
                    unchanged.and_then(|segment| unchanged_route(&layout, segment, &batch));
                let pieces = match route_unchanged {
                    // The same bytes, stamp and all: to the segment's owner
                    // while it is open, else to a shard that checks them
                    // against what the sealed segment stored.
                    Some(route) => vec![Piece {
                        route,
                        bytes: batch.clone(),
                        taken: None,
                        unchanged: true,
                    }],
                    None => match regroup(&layout, &batch, |route, builder| {
                        let records = builder.len();
                        let (bytes, taken) = self.finish_for(builder, route.segment);
                        Piece {
                            route,
                            bytes: Bytes::copy_from_slice(bytes),
                            taken: taken.map(|first| (first, records)),
                            unchanged: false,
                        }
                    }) {
                        Ok(p) => p,
                        Err(e @ ClientError::Layout(_)) => {
                            last_refusal = Some(e);
                            refused.push((batch, unchanged));
                            continue;
                        }
                        Err(e) => return Err(e),
                    },
                };
                // The pieces go to different segments (no key is in two),
                // so they may all be in flight at once.
                let mut sent = Vec::with_capacity(pieces.len());
                for piece in pieces {
                    let pending = self.send_piece(piece.route, &piece.bytes).await;
                    sent.push((piece, pending));
                }
                for (piece, pending) in sent {
                    let taken = match pending {
                        Ok(p) => self.piece_taken(p).await,
                        Err(e) => Err(e),
                    };
                    let segment = piece.route.segment;
                    match taken {
                        Ok(n) => {
                            self.acked_records
                                .fetch_add(u64::from(n), Ordering::Relaxed);
                            if piece.unchanged {
                                self.resent_unchanged.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err((e, NeverSent::Yes)) => {
                            if let Some((first, records)) = piece.taken {
                                self.give_back(segment, Some(first), records);
                            }
                            last_refusal = Some(e);
                            refused.push((piece.bytes, piece.unchanged.then_some(segment)));
                        }
                        Err((e, NeverSent::No)) if is_stale_layout(&e) => {
                            if let ClientError::Sealed { successors, .. } = &e {
                                self.adopt_successors(successors).await;
                            }
                            not_open_yet |= is_not_open_yet(&e);
                            // Only a sealed segment's refusal says a resend
                            // is not stored there: it goes to the successors
                            // as a new batch. Any other is asked again.
                            let sealed = e.broker_code() == Some(ErrorCode::SegmentSealed);
                            let unchanged = piece.unchanged && !sealed;
                            last_refusal = Some(e);
                            refused.push((piece.bytes, unchanged.then_some(segment)));
                        }
                        Err((e, NeverSent::No))
                            if piece.unchanged && e.broker_code() == Some(ErrorCode::Busy) =>
                        {
                            // Its segment is being sealed: asked again.
                            last_refusal = Some(e);
                            refused.push((piece.bytes, Some(segment)));
                        }
                        Err((e, NeverSent::No))
                            if self.stamps.is_some() && is_connection_loss(&e) =>
                        {
                            // It may have been appended: again, unchanged.
                            last_refusal = Some(e);
                            refused.push((piece.bytes, Some(segment)));
                        }
                        Err((e, NeverSent::No)) => return Err(e),
                    }
                }
            }
            work = refused;
            if work.is_empty() {
                return Ok(());
            }
            if started.elapsed() >= Duration::from_millis(RESEND_TIME_MS_MAX) {
                break;
            }
        }
        let why = last_refusal.map_or_else(String::new, |e| format!(" (last: {e})"));
        Err(ClientError::Layout(format!(
            "the layout of {} kept changing: gave up resending a batch after {RESEND_ATTEMPTS_MAX} \
             fresh layouts or {RESEND_TIME_MS_MAX} ms{why}",
            self.topic
        )))
    }

    /// Send one re-routed piece; its answer is waited for with
    /// [`Shared::piece_taken`]. An error says whether the piece was never
    /// sent.
    async fn send_piece(
        &self,
        route: Route,
        piece: &[u8],
    ) -> Result<PendingResponse, (ClientError, NeverSent)> {
        let conn = match self.client.connection_to(route.target).await {
            Ok(conn) => conn,
            Err(e) if is_stale_layout(&e) => return Err((e, NeverSent::Yes)),
            Err(e) => return Err((e, NeverSent::No)),
        };
        let submitted = conn
            .submit(
                &DataRequest::Produce {
                    topic: &self.topic,
                    segment: route.segment,
                    ack: self.config.ack,
                    batch: piece,
                }
                .into(),
                true,
            )
            .await
            .map_err(|e| (e, NeverSent::Yes))?;
        submitted
            .response
            .ok_or((ClientError::Closed, NeverSent::No))
    }

    /// The records the broker took of a piece sent by
    /// [`Shared::send_piece`].
    async fn piece_taken(&self, pending: PendingResponse) -> Result<u32, (ClientError, NeverSent)> {
        let result = pending
            .wait(
                "waiting for a resend acknowledgement",
                self.client.request_timeout(),
            )
            .await;
        self.acknowledged(result).map_err(|e| (e, NeverSent::No))
    }

    /// Finish `builder`'s batch for `segment`: stamped with the producer
    /// id and the next sequences of the segment when idempotent (the first
    /// one taken is returned, to give back if the batch is never sent).
    fn finish_for<'b>(
        &self,
        builder: &'b mut BatchBuilder,
        segment: u32,
    ) -> (&'b [u8], Option<u32>) {
        match &self.stamps {
            None => (builder.finish(PRODUCER_ID_NONE, 0), None),
            Some(stamps) => {
                let first = stamps.take(segment, builder.len());
                (builder.finish(stamps.producer_id, first), Some(first))
            }
        }
    }

    /// Give back the sequences `finish_for` took for a batch never sent.
    fn give_back(&self, segment: u32, taken: Option<u32>, records: u32) {
        if let (Some(stamps), Some(first)) = (&self.stamps, taken) {
            stamps.give_back(segment, first, records);
        }
    }

    /// Make the next send or flush wait until every batch in flight is
    /// settled (resends first), as a new layout does.
    fn hold_new_batches(&self) {
        let mut current = self.layout.lock().unwrap_or_else(|p| p.into_inner());
        current.0 += 1;
        self.layout_version.store(current.0, Ordering::Release);
    }

    /// The newest layout and its version.
    fn current_layout(&self) -> (u64, Arc<Layout>) {
        self.layout
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Ask the broker for the topic's layout and publish it to the
    /// accumulator (adopted on the next send or flush); returns it with
    /// its version.
    async fn refresh_layout(&self) -> Result<(u64, Arc<Layout>), ClientError> {
        let info = self.client.describe_topic(&self.topic).await?;
        let layout = Arc::new(self.client.layout(&info).await?);
        let mut current = self.layout.lock().unwrap_or_else(|p| p.into_inner());
        let version = current.0 + 1;
        *current = (version, Arc::clone(&layout));
        self.layout_version.store(version, Ordering::Release);
        Ok((version, layout))
    }

    /// Publish the layout with the successors a sealed refusal named, if
    /// the notice is newer than the layout held: batches are then routed
    /// to them at once, with no describe and no back-off.
    async fn adopt_successors(&self, successors: &Successors) {
        if successors.layout_version <= self.current_layout().1.version() {
            return;
        }
        let mut targets = Vec::with_capacity(successors.segments.len());
        for segment in &successors.segments {
            match self.client.target(segment).await {
                Ok(t) => targets.push(t),
                Err(e) => {
                    log::debug!("{}: successor {} unreachable: {e}", self.topic, segment.id);
                    return;
                }
            }
        }
        let mut current = self.layout.lock().unwrap_or_else(|p| p.into_inner());
        let Some(layout) = current.1.with_successors(successors, &targets) else {
            return;
        };
        let version = current.0 + 1;
        *current = (version, Arc::new(layout));
        self.layout_version.store(version, Ordering::Release);
    }
}

/// Where to resend `batch` unchanged to `segment` (see
/// [`Layout::route_for_segment`]); `None` if no open segment serves its
/// first key.
fn unchanged_route(layout: &Layout, segment: u32, batch: &[u8]) -> Option<Route> {
    let view = BatchView::validate(batch).ok()?;
    let key = view.records().next()?.key;
    layout.route_for_segment(segment, key)
}

/// A piece of a resend, on its way to one segment.
struct Piece {
    route: Route,
    bytes: Bytes,
    /// The first sequence and the record count taken for it, if it was
    /// stamped for this send.
    taken: Option<(u32, u32)>,
    /// Sent as it was first sent (stamp and all).
    unchanged: bool,
}

/// Whether an answer says the connection went away or the answer did not
/// come: the batch may or may not have been appended.
fn is_connection_loss(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Io { .. } | ClientError::Closed | ClientError::Timeout { .. }
    )
}

/// Whether an idempotent producer's batch that got `error` is to be resent
/// unchanged: it may have been appended, or its segment saw a gap because
/// an earlier batch is being resent (an earlier batch's resend comes
/// first, so a gap that is still there after it is an error).
fn may_resend_unchanged(error: &ClientError) -> bool {
    is_connection_loss(error) || error.broker_code() == Some(ErrorCode::OutOfOrderSequence)
}

/// Whether a refusal says the segment asked for is not open yet where it
/// was sent (a successor whose owner has not been told of it).
fn is_not_open_yet(error: &ClientError) -> bool {
    matches!(
        error.broker_code(),
        Some(ErrorCode::SegmentNotFound | ErrorCode::TopicNotFound)
    )
}

/// Split a batch this producer built into one batch per segment of
/// `layout`, keeping each record's key, value, headers, timestamp and order.
/// Each piece is handed to `finish` with its route.
fn regroup<T>(
    layout: &Layout,
    batch: &[u8],
    mut finish: impl FnMut(Route, &mut BatchBuilder) -> T,
) -> Result<Vec<T>, ClientError> {
    let view = BatchView::validate(batch)?;
    let mut builders: Vec<Option<BatchBuilder>> = layout.routes().iter().map(|_| None).collect();
    let mut headers = Vec::new();
    for record in view.records() {
        let i = layout.route_key(record.key).ok_or_else(|| {
            ClientError::Layout(format!(
                "no open segment covers key hash {:#010x}",
                wire::key_hash(record.key)
            ))
        })?;
        headers.clear();
        headers.extend(record.headers());
        let builder = builders[i].get_or_insert_with(BatchBuilder::new);
        match record.reference() {
            Some(r) => builder.push_reference(record.timestamp_ms, record.key, &r, &headers),
            None => builder.push(record.timestamp_ms, record.key, record.value, &headers),
        }
        .map_err(ClientError::InvalidRecord)?;
    }
    Ok(builders
        .into_iter()
        .zip(layout.routes())
        .filter_map(|(b, route)| b.map(|mut b| finish(*route, &mut b)))
        .collect())
}

/// Whether a batch must be sent before a record of `record_bytes` joins
/// it: it has records and this one would take it past `batch_bytes_max`.
/// (An empty batch takes any record, so one record larger than the limit
/// travels alone.)
fn must_send_before(batch: &BatchBuilder, record_bytes: usize, batch_bytes_max: usize) -> bool {
    !batch.is_empty() && !batch.fits(record_bytes, batch_bytes_max)
}

/// Whether a batch is as large as it may grow and should be sent now.
fn is_full(batch: &BatchBuilder, batch_bytes_max: usize) -> bool {
    batch.bytes() >= batch_bytes_max
}

/// Send batches whose first record has waited `linger`; sleeps until the
/// next such deadline, or until a batch gets its first record.
async fn linger_loop(shared: Arc<Shared>, linger: Duration) {
    loop {
        shared.linger_wake.notified().await;
        let mut deadline = Instant::now() + linger;
        loop {
            tokio::time::sleep_until(deadline.into()).await;
            let mut acc = shared.batches.lock().await;
            let now = Instant::now();
            let mut next: Option<Instant> = None;
            for i in 0..acc.open.len() {
                let Some(since) = acc.open[i].since else {
                    continue;
                };
                if now.duration_since(since) >= linger {
                    // A failure is recorded for send and flush to report.
                    let _ = shared.dispatch(&mut acc, i).await;
                } else {
                    let due = since + linger;
                    next = Some(next.map_or(due, |n| n.min(due)));
                }
            }
            match next {
                Some(due) => deadline = due,
                None => break,
            }
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wire::message::{SegmentInfo, TopicInfo};

    fn finish_plain(route: Route, b: &mut BatchBuilder) -> (Route, Vec<u8>) {
        (route, b.finish(PRODUCER_ID_NONE, 0).to_vec())
    }

    fn layout(bounds: &[u64]) -> Layout {
        let segments = bounds
            .windows(2)
            .enumerate()
            .map(|(i, w)| SegmentInfo {
                id: i as u32 + 10,
                epoch: 1,
                start: w[0] as u32,
                end: w[1],
                sealed: false,
                shard: 0,
                next_offset: 0,
                appended_bytes: 0,
                successors: vec![],
                ..SegmentInfo::default()
            })
            .collect();
        Layout::new(&TopicInfo {
            name: "ns/t".into(),
            segments,
        })
        .unwrap()
    }

    #[test]
    fn sequences_are_per_segment_wrap_and_are_given_back_only_when_last() {
        let stamps = Stamps {
            producer_id: wire::producer_id::KELP_PRODUCER_ID_BIT,
            next: Mutex::new(std::collections::HashMap::new()),
        };
        assert_eq!(stamps.take(1, 3), 0);
        assert_eq!(stamps.take(1, 2), 3);
        assert_eq!(stamps.take(2, 1), 0, "each segment counts on its own");
        // The last batch taken of segment 1 was never sent: its sequences
        // come back; an earlier one's cannot without a gap.
        stamps.give_back(1, 3, 2);
        assert_eq!(stamps.take(1, 1), 3);
        stamps.give_back(1, 0, 3);
        assert_eq!(stamps.take(1, 1), 4);
        // Past 2^31 - 1 comes 0.
        let last = u32::try_from(SEQUENCE_SPAN - 2).unwrap();
        stamps.next().insert(7, last);
        assert_eq!(stamps.take(7, 3), last);
        assert_eq!(stamps.take(7, 1), 1);
        assert_eq!(sequence_after(last, 2), 0);
    }

    #[test]
    fn regroup_splits_by_key_and_keeps_order_and_fields() {
        let mut b = BatchBuilder::new();
        for i in 0..200u32 {
            let key = format!("key-{}", i % 17);
            let value = format!("value-{i}");
            let h: &[RecordHeader<'_>] = if i % 5 == 0 {
                &[RecordHeader {
                    name: b"h",
                    value: b"x",
                }]
            } else {
                &[]
            };
            b.push(1_000 + i64::from(i), key.as_bytes(), value.as_bytes(), h)
                .unwrap();
        }
        let batch = b.finish(0, 0).to_vec();
        let halves = layout(&[0, 1 << 31, 1 << 32]);
        let pieces = regroup(&halves, &batch, finish_plain).unwrap();
        assert_eq!(pieces.len(), 2);
        let mut total = 0;
        for (route, piece) in &pieces {
            let view = BatchView::validate(piece).unwrap();
            let mut last_ts = i64::MIN;
            for r in view.records() {
                let i = halves.route_key(r.key).unwrap();
                assert_eq!(halves.routes()[i].segment, route.segment);
                // Publish order within a piece is kept.
                assert!(r.timestamp_ms > last_ts);
                last_ts = r.timestamp_ms;
                let n: i64 = r.timestamp_ms - 1_000;
                assert_eq!(r.value, format!("value-{n}").as_bytes());
                assert_eq!(r.header_count(), usize::from(n % 5 == 0));
                total += 1;
            }
        }
        assert_eq!(total, 200);
        // One segment over the whole ring: the batch comes back whole.
        let whole = regroup(&layout(&[0, 1 << 32]), &batch, finish_plain).unwrap();
        assert_eq!(whole.len(), 1);
        assert_eq!(whole[0].1, batch);
    }

    #[test]
    fn accumulator_has_a_batch_per_open_segment() {
        let l = Arc::new(layout(&[0, 1 << 30, 1 << 31, 1 << 32]));
        let acc = Accumulator::new(Arc::clone(&l), 3);
        assert_eq!(acc.open.len(), 3);
        assert!(acc.open.iter().all(|o| o.builder.is_empty()));
    }

    #[test]
    fn batches_fill_to_the_configured_size() {
        // The decisions `send` makes for one segment's batch.
        let limit = 4096;
        let mut b = BatchBuilder::new();
        let mut sent = Vec::new();
        let mut send = |b: &mut BatchBuilder| {
            sent.push(b.finish(0, 0).to_vec());
            b.clear();
        };
        for i in 0..1000u32 {
            // Every 100th record is larger than a whole batch.
            let v = vec![b'v'; if i % 100 == 99 { 10_000 } else { 100 }];
            let rb = BatchBuilder::record_bytes(b"k", &v, &[]);
            if must_send_before(&b, rb, limit) {
                send(&mut b);
            }
            b.push(i64::from(i), b"k", &v, &[]).unwrap();
            if is_full(&b, limit) {
                send(&mut b);
            }
        }
        if !b.is_empty() {
            send(&mut b);
        }
        let mut records = 0;
        for s in &sent {
            let view = BatchView::validate(s).unwrap();
            if view.record_count() == 1 && s.len() > limit {
                // The oversized record went alone.
                assert!(view.records().all(|r| r.value.len() == 10_000));
            } else {
                assert!(s.len() <= limit, "{}", s.len());
                assert!(view.records().all(|r| r.value.len() == 100));
            }
            records += view.record_count();
        }
        assert_eq!(records, 1000);
        assert_eq!(sent.iter().filter(|s| s.len() > limit).count(), 10);
    }
}
