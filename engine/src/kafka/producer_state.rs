//! Idempotent Kafka producers' state, per partition, kept across restarts.
//!
//! For each (producer id, partition) the gateway keeps the producer's
//! epoch, its next expected sequence and its last five batches' sequence
//! ranges with their base offsets. A resend of one of those batches is
//! answered with its original offset and not appended again; any other
//! sequence than the next is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch
//! is INVALID_PRODUCER_EPOCH.
//!
//! The state survives a restart, killed or graceful, because the log holds
//! it: every batch from an idempotent producer is stored with the
//! producer's id (plus one), epoch and base sequence in the kelp batch
//! header. A partition's state is rebuilt the first time an idempotent
//! producer writes to it after a start: from its snapshot in the filer
//! (`topics/kafka/<name>/kafka-producers/<segment id>`, format in
//! `docs/kafka.md`) and then from the batches stored after the offset the
//! snapshot covers. Snapshots are written every ten seconds while the
//! state changes and when the gateway stops, so the read at start is
//! short. A partition's first snapshot is written before its first
//! idempotent batch is appended, so a partition without one holds no
//! idempotent batches.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use filer::{FilerError, ObjectPath};
use kafka::error_code as k;
use wire::batch::BatchView;
use wire::chunk::BatchWalk;
use wire::message::{FetchFrom, SegmentInfo};

use super::fetch::read_segment;
use super::topics::{kafka_error, kelp_name};
use super::{put_object, read_object, Gateway};
use crate::serve_error::ServeError;

/// Batches per producer and partition whose resend is recognised (Kafka's
/// `max.in.flight.requests.per.connection` limit for idempotence).
const RECENT_BATCHES: usize = 5;
/// Producers kept per partition; past it the lowest id (the oldest) is
/// dropped, and that producer's next batch is taken as its first.
const PRODUCERS_PER_PARTITION_MAX: usize = 10_000;
/// How often changed states are stored.
pub(crate) const SNAPSHOT_INTERVAL: Duration = Duration::from_secs(10);
/// Bytes asked for per read while rebuilding from the log.
const SCAN_READ_BYTES: u32 = 4 << 20;
/// First bytes of a snapshot: format name and version.
const SNAPSHOT_MAGIC: &[u8; 4] = b"KPS1";
/// Magic, covered offset, producer count.
const SNAPSHOT_HEADER_BYTES: usize = 16;
/// Producer id, epoch, next sequence, recent count.
const PRODUCER_BYTES: usize = 15;
/// First and last sequence, base offset.
const RECENT_BYTES: usize = 16;
/// The largest valid snapshot: every producer with five recent batches.
const SNAPSHOT_BYTES_MAX: usize = SNAPSHOT_HEADER_BYTES
    + PRODUCERS_PER_PARTITION_MAX * (PRODUCER_BYTES + RECENT_BATCHES * RECENT_BYTES)
    + 4;
/// Sequences wrap to 0 after this (as Kafka's do).
const SEQUENCE_MAX: i64 = i32::MAX as i64;

/// A Kafka error code and its message.
pub(crate) type Refusal = (i16, String);

/// What a batch's sequence says.
#[derive(Debug, PartialEq)]
pub(crate) enum Sequence {
    /// The next batch (or the producer's first): append it.
    Fresh,
    /// A resend: answer with this base offset.
    Duplicate(i64),
    /// A sequence gap (or a new epoch not starting at 0).
    OutOfOrder,
    /// An epoch older than the producer's current one.
    Fenced,
}

/// An idempotent producer's batch: who sent it and its sequence range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ProducerBatch {
    pub(crate) producer_id: i64,
    pub(crate) epoch: i16,
    pub(crate) first: i32,
    pub(crate) last: i32,
}

impl ProducerBatch {
    /// The batch a stored kelp batch header names, if an idempotent Kafka
    /// producer wrote it.
    fn of_stored(view: &BatchView<'_>) -> Option<ProducerBatch> {
        let id = view.producer_id().checked_sub(1)?;
        let first = i32::try_from(view.base_sequence()).ok()?;
        let count = i64::from(view.record_count());
        Some(ProducerBatch {
            producer_id: i64::try_from(id).ok()?,
            epoch: i16::try_from(view.producer_epoch()).ok()?,
            first,
            last: ((i64::from(first) + count - 1) % (SEQUENCE_MAX + 1)) as i32,
        })
    }

    /// The (producer id, epoch, base sequence) to store in the kelp batch
    /// header.
    pub(crate) fn stamp(&self) -> (u64, u16, u32) {
        (
            self.producer_id as u64 + 1,
            self.epoch as u16,
            self.first as u32,
        )
    }
}

/// A batch recently appended by one producer.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Recent {
    first: i32,
    last: i32,
    base_offset: i64,
}

/// One producer's state in one partition.
#[derive(Debug, Clone, PartialEq)]
struct ProducerState {
    epoch: i16,
    next_sequence: i32,
    recent: VecDeque<Recent>,
}

/// Whether sequence `a` comes before `b`, in the wrapping order.
fn sequence_before(a: i32, b: i32) -> bool {
    let distance = (i64::from(b) - i64::from(a)).rem_euclid(SEQUENCE_MAX + 1);
    distance != 0 && distance < (SEQUENCE_MAX + 1) / 2
}

/// One partition's idempotent producers, and how far its stored snapshot
/// reaches.
#[derive(Debug, PartialEq)]
pub(crate) struct PartitionProducers {
    producers: HashMap<i64, ProducerState>,
    /// Every idempotent batch below this offset is in `producers`.
    settled: u64,
    /// The largest end offset of an answered append.
    high: u64,
    /// Appends sent and not answered.
    in_flight: u32,
    /// An append failed, so whether it was stored is unknown: `settled`
    /// stays where it is (a restart reads the log from there).
    frozen: bool,
    /// Changes so far, and the count the stored snapshot holds.
    changes: u64,
    stored_changes: u64,
}

impl PartitionProducers {
    fn new(settled: u64) -> PartitionProducers {
        PartitionProducers {
            producers: HashMap::new(),
            settled,
            high: settled,
            in_flight: 0,
            frozen: false,
            changes: 0,
            stored_changes: 0,
        }
    }

    /// What `batch` is, given what this partition has seen.
    pub(crate) fn check(&self, batch: &ProducerBatch) -> Sequence {
        let Some(state) = self.producers.get(&batch.producer_id) else {
            return Sequence::Fresh;
        };
        if batch.epoch < state.epoch {
            return Sequence::Fenced;
        }
        if batch.epoch > state.epoch {
            return if batch.first == 0 {
                Sequence::Fresh
            } else {
                Sequence::OutOfOrder
            };
        }
        if batch.first == state.next_sequence {
            return Sequence::Fresh;
        }
        // A resend is the same batch; one inside a recent range (a batch
        // stored with others) is answered at its place in it.
        let inside = state
            .recent
            .iter()
            .find(|r| r.first == batch.first || (r.first < batch.first && batch.first <= r.last));
        match inside {
            Some(r) => Sequence::Duplicate(r.base_offset + i64::from(batch.first - r.first)),
            None => Sequence::OutOfOrder,
        }
    }

    /// An append is sent.
    pub(crate) fn begin(&mut self) {
        self.in_flight += 1;
    }

    /// An append of `batch` begun earlier ended: stored at `base_offset`,
    /// ending before `end_offset`; or failed (`None`).
    pub(crate) fn end(&mut self, batch: &ProducerBatch, stored: Option<(i64, u64)>) {
        self.in_flight = self.in_flight.saturating_sub(1);
        match stored {
            Some((base_offset, end_offset)) => {
                self.apply(batch, base_offset);
                self.high = self.high.max(end_offset);
            }
            None => self.frozen = true,
        }
        if self.in_flight == 0 && !self.frozen && self.high > self.settled {
            self.settled = self.high;
            self.changes += 1;
        }
    }

    /// Take `batch`, stored at `base_offset`, into the state. A batch older
    /// than what the state holds (met again while reading the log) changes
    /// nothing.
    fn apply(&mut self, batch: &ProducerBatch, base_offset: i64) {
        if !self.producers.contains_key(&batch.producer_id)
            && self.producers.len() >= PRODUCERS_PER_PARTITION_MAX
        {
            if let Some(oldest) = self.producers.keys().min().copied() {
                self.producers.remove(&oldest);
            }
        }
        let state = self
            .producers
            .entry(batch.producer_id)
            .or_insert(ProducerState {
                epoch: batch.epoch,
                next_sequence: batch.first,
                recent: VecDeque::with_capacity(RECENT_BATCHES),
            });
        if batch.epoch < state.epoch {
            return;
        }
        if batch.epoch > state.epoch {
            state.epoch = batch.epoch;
            state.recent.clear();
        } else if state.recent.iter().any(|r| r.first == batch.first)
            || sequence_before(batch.first, state.next_sequence)
        {
            return;
        }
        state.next_sequence = ((i64::from(batch.last) + 1) % (SEQUENCE_MAX + 1)) as i32;
        if state.recent.len() == RECENT_BATCHES {
            state.recent.pop_front();
        }
        state.recent.push_back(Recent {
            first: batch.first,
            last: batch.last,
            base_offset,
        });
        self.changes += 1;
    }

    /// The snapshot's bytes (all integers big-endian):
    ///
    /// ```text
    /// 0  4 magic "KPS1"
    /// 4  8 covered offset: every idempotent batch below it is in the snapshot
    /// 12 4 producer count
    /// then per producer:
    ///    8 producer id, 2 epoch, 4 next sequence, 1 recent count (<= 5),
    ///    then per recent batch: 4 first sequence, 4 last sequence, 8 base offset
    /// last 4 CRC-32C of every byte before it
    /// ```
    fn encode(&self) -> Vec<u8> {
        let recent: usize = self.producers.values().map(|s| s.recent.len()).sum();
        let mut b = Vec::with_capacity(
            SNAPSHOT_HEADER_BYTES
                + self.producers.len() * PRODUCER_BYTES
                + recent * RECENT_BYTES
                + 4,
        );
        b.extend_from_slice(SNAPSHOT_MAGIC);
        b.extend_from_slice(&self.settled.to_be_bytes());
        b.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        for id in ids {
            let s = &self.producers[id];
            b.extend_from_slice(&id.to_be_bytes());
            b.extend_from_slice(&s.epoch.to_be_bytes());
            b.extend_from_slice(&s.next_sequence.to_be_bytes());
            b.push(s.recent.len() as u8);
            for r in &s.recent {
                b.extend_from_slice(&r.first.to_be_bytes());
                b.extend_from_slice(&r.last.to_be_bytes());
                b.extend_from_slice(&r.base_offset.to_be_bytes());
            }
        }
        let crc = wire::checksum::crc32c(&b);
        b.extend_from_slice(&crc.to_be_bytes());
        b
    }

    /// The state a snapshot holds; its covered offset becomes `settled`.
    fn decode(bytes: &[u8]) -> Result<PartitionProducers, String> {
        let (body, crc) = bytes
            .split_last_chunk::<4>()
            .ok_or("shorter than its checksum")?;
        if wire::checksum::crc32c(body) != u32::from_be_bytes(*crc) {
            return Err("checksum mismatch".into());
        }
        let mut r = Reader(body);
        if r.take::<4>()? != *SNAPSHOT_MAGIC {
            return Err("not a producer state snapshot (magic)".into());
        }
        let settled = u64::from_be_bytes(r.take()?);
        let count = u32::from_be_bytes(r.take()?) as usize;
        if count > PRODUCERS_PER_PARTITION_MAX {
            return Err(format!("{count} producers, more than a partition keeps"));
        }
        let mut state = PartitionProducers::new(settled);
        for _ in 0..count {
            let id = i64::from_be_bytes(r.take()?);
            let epoch = i16::from_be_bytes(r.take()?);
            let next_sequence = i32::from_be_bytes(r.take()?);
            let [n] = r.take::<1>()?;
            if usize::from(n) > RECENT_BATCHES {
                return Err(format!("producer {id}: {n} recent batches, at most 5"));
            }
            let mut recent = VecDeque::with_capacity(RECENT_BATCHES);
            for _ in 0..n {
                recent.push_back(Recent {
                    first: i32::from_be_bytes(r.take()?),
                    last: i32::from_be_bytes(r.take()?),
                    base_offset: i64::from_be_bytes(r.take()?),
                });
            }
            state.producers.insert(
                id,
                ProducerState {
                    epoch,
                    next_sequence,
                    recent,
                },
            );
        }
        if !r.0.is_empty() {
            return Err(format!("{} bytes after the last producer", r.0.len()));
        }
        Ok(state)
    }
}

/// Reads a snapshot front to back.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or("cut short".to_string())?;
        self.0 = rest;
        Ok(*head)
    }
}

/// One partition's entry: its segment, and its state once rebuilt.
pub(crate) struct PartitionSlot {
    topic: String,
    segment: SegmentInfo,
    state: tokio::sync::OnceCell<RefCell<PartitionProducers>>,
}

impl PartitionSlot {
    /// The partition's state, rebuilt from its snapshot and the log the
    /// first time it is asked for (callers at the same time wait for the
    /// same rebuild).
    pub(crate) async fn ready(
        &self,
        gateway: &Gateway,
    ) -> Result<&RefCell<PartitionProducers>, Refusal> {
        self.state
            .get_or_try_init(|| async {
                recover(gateway, &self.topic, &self.segment)
                    .await
                    .map(RefCell::new)
            })
            .await
    }
}

/// Every partition's idempotent producers, by Kafka topic and partition.
#[derive(Default)]
pub(crate) struct Sequences {
    partitions: RefCell<HashMap<(String, i32), Rc<PartitionSlot>>>,
}

impl Sequences {
    /// The entry of `topic`'s partition `index`, which is `segment` (a
    /// topic deleted and created again has a new entry).
    pub(crate) fn slot(&self, topic: &str, index: i32, segment: &SegmentInfo) -> Rc<PartitionSlot> {
        let mut partitions = self.partitions.borrow_mut();
        let key = (topic.to_string(), index);
        if let Some(slot) = partitions.get(&key) {
            if slot.segment.id == segment.id && slot.segment.epoch == segment.epoch {
                return slot.clone();
            }
        }
        let slot = Rc::new(PartitionSlot {
            topic: topic.to_string(),
            segment: segment.clone(),
            state: tokio::sync::OnceCell::new(),
        });
        partitions.insert(key, slot.clone());
        slot
    }

    /// Forget a deleted topic's partitions (their snapshots went with it).
    pub(crate) fn forget_topic(&self, topic: &str) {
        self.partitions.borrow_mut().retain(|(t, _), _| t != topic);
    }

    /// Store the snapshot of every partition whose state changed since its
    /// last one.
    pub(crate) async fn store_changed(&self, gateway: &Gateway) {
        let slots: Vec<Rc<PartitionSlot>> = self.partitions.borrow().values().cloned().collect();
        for slot in slots {
            let Some(state) = slot.state.get() else {
                continue;
            };
            let (bytes, changes) = {
                let s = state.borrow();
                if s.changes == s.stored_changes {
                    continue;
                }
                (s.encode(), s.changes)
            };
            match store(gateway, &slot.topic, slot.segment.id, bytes).await {
                Ok(()) => {
                    let mut s = state.borrow_mut();
                    s.stored_changes = s.stored_changes.max(changes);
                }
                Err(e) => log::warn!(
                    "Kafka gateway: storing producer state of {}/{}: {e}",
                    slot.topic,
                    slot.segment.id
                ),
            }
        }
    }
}

/// Store changed snapshots every [`SNAPSHOT_INTERVAL`], for as long as the
/// gateway runs.
pub(crate) async fn store_forever(gateway: Rc<Gateway>) {
    let mut tick = tokio::time::interval(SNAPSHOT_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        gateway.producers.store_changed(&gateway).await;
    }
}

/// Where a partition's producer snapshot is stored
/// (`filer_layout::kafka_producer_snapshot`); an error for a Kafka topic
/// name that is no kelp topic name.
fn snapshot_path(topic: &str, segment: u32) -> Result<ObjectPath, control::ControlError> {
    let name = control::TopicName::parse(&kelp_name(topic))?;
    Ok(control::filer_layout::kafka_producer_snapshot(
        &name, segment,
    ))
}

fn storage_error(what: &str, e: impl std::fmt::Display) -> Refusal {
    (k::KAFKA_STORAGE_ERROR, format!("{what}: {e}"))
}

async fn store(gateway: &Gateway, topic: &str, segment: u32, bytes: Vec<u8>) -> Result<(), String> {
    let path = snapshot_path(topic, segment).map_err(|e| e.to_string())?;
    put_object(gateway.filer.clone(), path, bytes).await
}

/// Rebuild a partition's state: the snapshot, then the batches stored
/// after the offset it covers.
async fn recover(
    gateway: &Gateway,
    topic: &str,
    segment: &SegmentInfo,
) -> Result<PartitionProducers, Refusal> {
    let path = snapshot_path(topic, segment.id).map_err(|e| storage_error("snapshot path", e))?;
    let filer = gateway.filer.clone();
    let stored = tokio::task::spawn_blocking(move || {
        match read_object(filer.as_ref(), &path, SNAPSHOT_BYTES_MAX) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(FilerError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    })
    .await
    .map_err(|e| storage_error("reading producer state", e))?
    .map_err(|e| storage_error("reading producer state", e))?;
    let Some(bytes) = stored else {
        // No snapshot: no idempotent batch was ever stored here. The first
        // snapshot goes in before the first one is.
        let end = read_end(gateway, topic, segment).await?;
        let state = PartitionProducers::new(end);
        store(gateway, topic, segment.id, state.encode())
            .await
            .map_err(|e| storage_error("storing producer state", e))?;
        return Ok(state);
    };
    let mut state = PartitionProducers::decode(&bytes).unwrap_or_else(|e| {
        log::warn!(
            "Kafka gateway: producer state of {topic}/{}: {e}; reading the whole segment instead",
            segment.id
        );
        PartitionProducers::new(0)
    });
    let read = scan(gateway, topic, segment, &mut state).await?;
    log::info!(
        "Kafka gateway: producer state of {topic}/{}: {} producers, {read} bytes of log read from offset {}",
        segment.id,
        state.producers.len(),
        state.settled
    );
    let moved = state.high != state.settled;
    state.settled = state.high;
    state.stored_changes = 0;
    state.changes = u64::from(moved);
    Ok(state)
}

/// The offset after the segment's last record.
async fn read_end(gateway: &Gateway, topic: &str, segment: &SegmentInfo) -> Result<u64, Refusal> {
    read_segment(gateway, topic, segment, FetchFrom::Latest, 1, 0, |f| {
        f.start_offset
    })
    .await
    .map_err(refusal)
}

/// Take every idempotent batch stored from `state.settled` on into the
/// state, leaving `state.high` at the segment's end. Returns the bytes
/// read.
async fn scan(
    gateway: &Gateway,
    topic: &str,
    segment: &SegmentInfo,
    state: &mut PartitionProducers,
) -> Result<u64, Refusal> {
    let mut at = state.settled;
    let mut read_bytes = 0u64;
    loop {
        let from = FetchFrom::Offset(at);
        let read = read_segment(
            gateway,
            topic,
            segment,
            from,
            SCAN_READ_BYTES,
            0,
            |fetched| {
                for item in BatchWalk::new(fetched.batches) {
                    let (_, view) = item.map_err(|e| storage_error("reading producer state", e))?;
                    if let Some(batch) = ProducerBatch::of_stored(&view) {
                        state.apply(&batch, view.base_offset() as i64);
                    }
                    at = at.max(view.next_offset());
                }
                Ok((fetched.high_watermark, fetched.batches.len()))
            },
        )
        .await;
        let (end, bytes) = match read {
            Ok(r) => r?,
            // Past the segment's end: a crash lost what the snapshot
            // had seen, and nothing after it is stored.
            Err(e) if e.code == wire::ErrorCode::InvalidArgument => {
                state.high = at;
                return Ok(read_bytes);
            }
            Err(e) => return Err(refusal(e)),
        };
        read_bytes += bytes as u64;
        if bytes == 0 || at >= end {
            state.high = at.max(end);
            return Ok(read_bytes);
        }
    }
}

/// A shard's refusal as a Kafka error code and message (an offset past the
/// segment's end is OFFSET_OUT_OF_RANGE).
fn refusal(e: ServeError) -> Refusal {
    let code = if e.code == wire::ErrorCode::InvalidArgument {
        k::OFFSET_OUT_OF_RANGE
    } else {
        kafka_error(&e)
    };
    (code, e.message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn batch(producer_id: i64, epoch: i16, first: i32, last: i32) -> ProducerBatch {
        ProducerBatch {
            producer_id,
            epoch,
            first,
            last,
        }
    }

    fn appended(p: &mut PartitionProducers, b: ProducerBatch, base: i64) {
        p.begin();
        let end = base as u64 + (b.last - b.first) as u64 + 1;
        p.end(&b, Some((base, end)));
    }

    #[test]
    fn next_batch_is_fresh_and_a_resend_gets_its_offset() {
        let mut p = PartitionProducers::new(0);
        assert_eq!(p.check(&batch(7, 0, 0, 9)), Sequence::Fresh);
        appended(&mut p, batch(7, 0, 0, 9), 100);
        appended(&mut p, batch(7, 0, 10, 19), 110);
        assert_eq!(p.check(&batch(7, 0, 20, 29)), Sequence::Fresh);
        assert_eq!(p.check(&batch(7, 0, 0, 9)), Sequence::Duplicate(100));
        assert_eq!(p.check(&batch(7, 0, 10, 19)), Sequence::Duplicate(110));
        // Inside a stored range: its place in it.
        assert_eq!(p.check(&batch(7, 0, 15, 19)), Sequence::Duplicate(115));
        assert_eq!(p.check(&batch(7, 0, 25, 29)), Sequence::OutOfOrder);
        assert_eq!(p.check(&batch(7, 1, 0, 9)), Sequence::Fresh);
        assert_eq!(p.check(&batch(7, 1, 3, 9)), Sequence::OutOfOrder);
        appended(&mut p, batch(7, 1, 0, 0), 120);
        assert_eq!(p.check(&batch(7, 0, 20, 29)), Sequence::Fenced);
        // Another producer is new.
        assert_eq!(p.check(&batch(8, 0, 5, 5)), Sequence::Fresh);
    }

    #[test]
    fn only_the_last_five_batches_are_recognised() {
        let mut p = PartitionProducers::new(0);
        for i in 0..7 {
            appended(&mut p, batch(1, 0, i, i), i64::from(i));
        }
        assert_eq!(p.check(&batch(1, 0, 1, 1)), Sequence::OutOfOrder);
        assert_eq!(p.check(&batch(1, 0, 2, 2)), Sequence::Duplicate(2));
        assert_eq!(p.check(&batch(1, 0, 6, 6)), Sequence::Duplicate(6));
    }

    #[test]
    fn sequences_wrap_after_i32_max() {
        let mut p = PartitionProducers::new(0);
        appended(&mut p, batch(1, 0, i32::MAX - 1, i32::MAX), 0);
        assert_eq!(p.check(&batch(1, 0, 0, 4)), Sequence::Fresh);
        assert!(sequence_before(i32::MAX, 0));
        assert!(!sequence_before(0, i32::MAX));
    }

    #[test]
    fn settled_waits_for_every_append_in_flight() {
        let mut p = PartitionProducers::new(10);
        p.begin();
        p.begin();
        p.end(&batch(1, 0, 0, 0), Some((10, 11)));
        assert_eq!(p.settled, 10, "one append still in flight");
        p.end(&batch(2, 0, 0, 8), Some((11, 20)));
        assert_eq!(p.settled, 20);
        // A failed append freezes it: whether it was stored is unknown.
        p.begin();
        p.end(&batch(1, 0, 1, 1), None);
        p.begin();
        p.end(&batch(1, 0, 1, 1), Some((25, 26)));
        assert_eq!(p.settled, 20);
    }

    #[test]
    fn reading_the_log_again_changes_nothing() {
        let mut p = PartitionProducers::new(0);
        appended(&mut p, batch(1, 0, 0, 9), 0);
        appended(&mut p, batch(1, 0, 10, 19), 10);
        let before = p.producers.clone();
        // A scan from an older covered offset meets the same batches.
        p.apply(&batch(1, 0, 0, 9), 0);
        p.apply(&batch(1, 0, 10, 19), 10);
        assert_eq!(p.producers, before);
        // And an older epoch's batch changes nothing either.
        appended(&mut p, batch(1, 1, 0, 0), 20);
        let before = p.producers.clone();
        p.apply(&batch(1, 0, 20, 29), 21);
        assert_eq!(p.producers, before);
    }

    #[test]
    fn snapshot_round_trips_and_refuses_damage() {
        let mut p = PartitionProducers::new(0);
        appended(&mut p, batch(3, 2, 0, 9), 0);
        appended(&mut p, batch(3, 2, 10, 19), 10);
        appended(&mut p, batch(9, 0, 0, 0), 20);
        let bytes = p.encode();
        // 16 header + 2 producers x 15 + 3 recent x 16 + 4 checksum.
        assert_eq!(bytes.len(), 16 + 2 * 15 + 3 * 16 + 4);
        assert_eq!(&bytes[..4], b"KPS1");
        assert_eq!(&bytes[4..12], &21u64.to_be_bytes());
        let back = PartitionProducers::decode(&bytes).unwrap();
        assert_eq!(back.producers, p.producers);
        assert_eq!(back.settled, 21);
        let mut bad = bytes.clone();
        bad[20] ^= 1;
        assert!(PartitionProducers::decode(&bad)
            .unwrap_err()
            .contains("checksum"));
        assert!(PartitionProducers::decode(&bytes[..3]).is_err());
    }

    #[test]
    fn stored_batch_header_names_its_producer() {
        let mut b = wire::batch::BatchBuilder::new();
        b.push(1, b"k", b"v", &[]).unwrap();
        b.push(2, b"k", b"v", &[]).unwrap();
        let (id, epoch, first) = batch(41, 3, i32::MAX, 0).stamp();
        let bytes = b.finish_with_epoch(id, epoch, first).to_vec();
        let view = BatchView::validate(&bytes).unwrap();
        assert_eq!(
            ProducerBatch::of_stored(&view),
            Some(batch(41, 3, i32::MAX, 0))
        );
        let mut plain = wire::batch::BatchBuilder::new();
        plain.push(1, b"k", b"v", &[]).unwrap();
        let bytes = plain.finish(0, 0).to_vec();
        assert_eq!(
            ProducerBatch::of_stored(&BatchView::validate(&bytes).unwrap()),
            None
        );
    }
}
