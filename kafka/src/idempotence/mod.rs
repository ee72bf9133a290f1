//! Idempotent Kafka producers in one partition: the sequence checks that
//! let a producer resend a batch without it being stored twice.
//!
//! Sans-IO, like the rest of this crate: no files, no clock, no runtime.
//! The gateway does the I/O: it stores the snapshots this module encodes,
//! reads them back, reads the partition's log and feeds the batches it
//! finds into a [`Rebuild`].
//!
//! For each producer id a partition keeps the producer's epoch, its next
//! expected sequence and its last [`RECENT_BATCHES_MAX`] batches' sequence
//! ranges with their base offsets. [`PartitionProducers::check`] says what a
//! batch is ([`Sequence`]); a fresh one is appended between
//! [`PartitionProducers::begin`] and [`PartitionProducers::end`], and only
//! an append that ended [`AppendOutcome::Stored`] changes the producer's
//! state.
//!
//! The *covered offset* is how far the state is known to be complete:
//! every idempotent batch stored below it is in the state. It moves to the
//! end of the appends whenever none is in flight, and stops moving after an
//! append whose outcome is unknown, so the next start reads the log from
//! there. Snapshots ([`PartitionProducers::snapshot_due`], byte format in
//! `docs/kafka.md`, "Producer state snapshot") carry the covered offset;
//! a start rebuilds the state from the snapshot and the batches stored at
//! or after it ([`Rebuild`]).
//!
//! This module must never do I/O, read a clock, or know how the kelp batch
//! header stores a producer's id: the gateway maps stored batches to
//! [`StoredBatch`] facts.

mod snapshot;

#[cfg(test)]
mod snapshot_tests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};

pub use snapshot::{SnapshotError, SNAPSHOT_BYTES_MAX, SNAPSHOT_MAGIC};

/// Batches per producer whose resend is recognised (Kafka's
/// `max.in.flight.requests.per.connection` limit for idempotence).
pub const RECENT_BATCHES_MAX: usize = 5;
/// Producers kept per partition; past it the lowest id (the oldest) is
/// dropped, and that producer's next batch is taken as its first.
pub const PRODUCERS_PER_PARTITION_MAX: usize = 10_000;
/// The largest sequence; the one after it is 0 (as Kafka's).
pub const SEQUENCE_MAX: i32 = i32::MAX;
/// How many sequences there are, in the wrapping order.
const SEQUENCE_SPAN: i64 = SEQUENCE_MAX as i64 + 1;

/// The sequence `delta` places after `sequence`, wrapping past
/// [`SEQUENCE_MAX`] to 0.
pub fn sequence_add(sequence: i32, delta: u32) -> i32 {
    // In 0..=SEQUENCE_MAX, so the cast keeps the value.
    (i64::from(sequence) + i64::from(delta)).rem_euclid(SEQUENCE_SPAN) as i32
}

/// Whether sequence `a` comes before `b`, in the wrapping order (within
/// half the sequence space).
fn sequence_before(a: i32, b: i32) -> bool {
    let distance = (i64::from(b) - i64::from(a)).rem_euclid(SEQUENCE_SPAN);
    distance != 0 && distance < SEQUENCE_SPAN / 2
}

/// What a batch's sequence says, given what the partition has seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sequence {
    /// The producer's next batch (or its first): append it.
    Fresh,
    /// A resend of a recent batch: answer with this base offset and do not
    /// append it again.
    Duplicate(i64),
    /// A sequence gap, or a new epoch not starting at 0
    /// (OUT_OF_ORDER_SEQUENCE_NUMBER).
    OutOfOrder,
    /// An epoch older than the producer's current one
    /// (INVALID_PRODUCER_EPOCH).
    Fenced,
}

/// An idempotent producer's batch: who sent it and its sequence range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatch {
    /// The producer id (non-negative for an idempotent producer).
    pub producer_id: i64,
    /// The producer's epoch.
    pub epoch: i16,
    /// The first record's sequence (the batch's base sequence).
    pub first: i32,
    /// The last record's sequence; below `first` when the batch wraps past
    /// [`SEQUENCE_MAX`].
    pub last: i32,
}

impl ProducerBatch {
    /// The batch whose first record has sequence `first` and whose last
    /// record is `last_offset_delta` records after it.
    pub fn new(producer_id: i64, epoch: i16, first: i32, last_offset_delta: u32) -> ProducerBatch {
        ProducerBatch {
            producer_id,
            epoch,
            first,
            last: sequence_add(first, last_offset_delta),
        }
    }
}

/// A batch found in the partition's log, as the caller read it from its
/// stored header: the facts a [`Rebuild`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredBatch {
    /// The producer id.
    pub producer_id: i64,
    /// The producer's epoch.
    pub epoch: i16,
    /// The first record's sequence.
    pub base_sequence: i32,
    /// How many records the batch holds.
    pub record_count: u32,
    /// The offset of its first record.
    pub base_offset: i64,
}

impl StoredBatch {
    /// The producer batch it stores; `None` for a batch no idempotent
    /// producer could have sent (a negative sequence or no records).
    pub fn producer_batch(&self) -> Option<ProducerBatch> {
        if self.base_sequence < 0 {
            return None;
        }
        let last_offset_delta = self.record_count.checked_sub(1)?;
        Some(ProducerBatch::new(
            self.producer_id,
            self.epoch,
            self.base_sequence,
            last_offset_delta,
        ))
    }
}

/// A fresh batch's append, from [`PartitionProducers::begin`] until it is
/// handed back to [`PartitionProducers::end`].
#[must_use = "an append begun must be ended, or the covered offset stops moving"]
#[derive(Debug)]
pub struct Append {
    batch: ProducerBatch,
}

impl Append {
    /// The batch being appended.
    pub fn batch(&self) -> &ProducerBatch {
        &self.batch
    }
}

/// How an append ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOutcome {
    /// Stored: its first record at `base_offset`, the partition's next
    /// offset after it at `end_offset`.
    Stored {
        /// The batch's first offset.
        base_offset: i64,
        /// The offset after the batch's last record.
        end_offset: u64,
    },
    /// Failed or not answered (acks 0): whether it was stored is unknown.
    Unknown,
}

/// Names the changes a snapshot holds; hand it back to
/// [`PartitionProducers::snapshot_stored`] once the snapshot is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotMark(u64);

/// A snapshot to store: the state changed since the last one stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueSnapshot {
    /// The snapshot's bytes.
    pub bytes: Vec<u8>,
    /// What to hand back once they are stored.
    pub mark: SnapshotMark,
}

/// A batch recently appended by one producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Recent {
    first: i32,
    last: i32,
    base_offset: i64,
}

/// One producer's state in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProducerState {
    epoch: i16,
    next_sequence: i32,
    /// Oldest first, at most [`RECENT_BATCHES_MAX`].
    recent: VecDeque<Recent>,
}

/// One partition's idempotent producers, and how far the state is
/// complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionProducers {
    /// By id: the lowest is the oldest (ids are handed out in order), and a
    /// snapshot lists them by increasing id.
    producers: BTreeMap<i64, ProducerState>,
    /// Every idempotent batch stored below this offset is in `producers`.
    covered: u64,
    /// The largest end offset of an append that ended stored.
    high: u64,
    /// Appends begun and not ended.
    in_flight: u32,
    /// An append ended with an unknown outcome: `covered` stays where it
    /// is (the next start reads the log from there).
    frozen: bool,
    /// Changes so far, and the count the stored snapshot holds.
    changes: u64,
    stored_changes: u64,
}

impl PartitionProducers {
    /// A partition that holds no idempotent batch below `covered` (one
    /// without a snapshot: the end of its log).
    pub fn new(covered: u64) -> PartitionProducers {
        PartitionProducers {
            producers: BTreeMap::new(),
            covered,
            high: covered,
            in_flight: 0,
            frozen: false,
            changes: 0,
            stored_changes: 0,
        }
    }

    /// Every idempotent batch stored below this offset is in the state.
    pub fn covered(&self) -> u64 {
        self.covered
    }

    /// How many producers the state holds.
    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// What `batch` is, given what this partition has seen.
    pub fn check(&self, batch: &ProducerBatch) -> Sequence {
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

    /// The append of `batch` (one [`check`](Self::check) found fresh)
    /// starts; the covered offset waits until it ends.
    pub fn begin(&mut self, batch: ProducerBatch) -> Append {
        self.in_flight += 1;
        Append { batch }
    }

    /// An append begun earlier ended.
    pub fn end(&mut self, append: Append, outcome: AppendOutcome) {
        self.in_flight = self.in_flight.saturating_sub(1);
        match outcome {
            AppendOutcome::Stored {
                base_offset,
                end_offset,
            } => {
                self.apply(&append.batch, base_offset);
                self.high = self.high.max(end_offset);
            }
            AppendOutcome::Unknown => self.frozen = true,
        }
        if self.in_flight == 0 && !self.frozen && self.high > self.covered {
            self.covered = self.high;
            self.changes += 1;
        }
    }

    /// The snapshot to store, if the state changed since the last one
    /// stored.
    pub fn snapshot_due(&self) -> Option<DueSnapshot> {
        (self.changes != self.stored_changes).then(|| DueSnapshot {
            bytes: self.encode_snapshot(),
            mark: SnapshotMark(self.changes),
        })
    }

    /// The snapshot `mark` names is stored (a later one may be due already).
    pub fn snapshot_stored(&mut self, mark: SnapshotMark) {
        self.stored_changes = self.stored_changes.max(mark.0);
    }

    /// Take `batch`, stored at `base_offset`, into the state. A batch older
    /// than what the state holds (met again while reading the log) changes
    /// nothing.
    fn apply(&mut self, batch: &ProducerBatch, base_offset: i64) {
        if !self.producers.contains_key(&batch.producer_id)
            && self.producers.len() >= PRODUCERS_PER_PARTITION_MAX
        {
            self.producers.pop_first();
        }
        let state = self
            .producers
            .entry(batch.producer_id)
            .or_insert(ProducerState {
                epoch: batch.epoch,
                next_sequence: batch.first,
                recent: VecDeque::with_capacity(RECENT_BATCHES_MAX),
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
        state.next_sequence = sequence_add(batch.last, 1);
        if state.recent.len() == RECENT_BATCHES_MAX {
            state.recent.pop_front();
        }
        state.recent.push_back(Recent {
            first: batch.first,
            last: batch.last,
            base_offset,
        });
        self.changes += 1;
    }
}

/// A partition's state being rebuilt at start: from its snapshot (or from
/// nothing), then from every batch the caller reads from the log at and
/// after [`scan_from`](Self::scan_from), in log order.
#[derive(Debug)]
pub struct Rebuild {
    state: PartitionProducers,
}

impl Rebuild {
    /// Start from a stored snapshot's bytes (untrusted: checked whole
    /// before anything is taken from them).
    pub fn from_snapshot(bytes: &[u8]) -> Result<Rebuild, SnapshotError> {
        snapshot::decode(bytes).map(|state| Rebuild { state })
    }

    /// Start from nothing: the whole log is to be read (the snapshot was
    /// unusable).
    pub fn from_log_start() -> Rebuild {
        Rebuild {
            state: PartitionProducers::new(0),
        }
    }

    /// The offset to read the log from: the snapshot's covered offset.
    pub fn scan_from(&self) -> u64 {
        self.state.covered
    }

    /// How many producers the state holds so far.
    pub fn producer_count(&self) -> usize {
        self.state.producers.len()
    }

    /// Take a batch read from the log. Batches the snapshot already holds,
    /// and those of older epochs, change nothing; batches that are no
    /// idempotent producer's are skipped.
    pub fn replay(&mut self, stored: &StoredBatch) {
        if let Some(batch) = stored.producer_batch() {
            self.state.apply(&batch, stored.base_offset);
        }
    }

    /// The log was read up to `log_end`: the state covers it, and a
    /// snapshot is due if that moved the covered offset.
    pub fn finish(self, log_end: u64) -> PartitionProducers {
        let mut state = self.state;
        let log_end = log_end.max(state.covered);
        let moved = log_end != state.covered;
        state.covered = log_end;
        state.high = log_end;
        state.stored_changes = 0;
        state.changes = u64::from(moved);
        state
    }
}
