//! kelp's idempotent producers in one open segment: the owner checks each
//! batch a kelp producer stamped (id, epoch, base sequence in the batch
//! header; `wire::producer_id`) against what the segment already stores,
//! so a batch resent after a lost connection or a broker restart is
//! answered with the offsets it already has and not stored again.
//!
//! The state itself is `kafka::idempotence::PartitionProducers` (the same
//! sequence rules as Kafka's, per segment). It is kept only in memory and
//! rebuilt from the segment's own log (chunks and buffers) the first time
//! an idempotent batch arrives after the segment was opened on this shard,
//! so it always agrees with what is stored: a batch the owner lost in a
//! crash is not in the state either, and its resend is stored. While the
//! log is read, idempotent batches wait; others are appended as usual.
//!
//! The check and the append happen without a yield between them (in
//! `SegmentCell::append`), so two copies of one batch on two connections
//! cannot both be stored.
//!
//! Batches the Kafka gateway appends carry ids below
//! `KELP_PRODUCER_ID_BIT` and are checked by the gateway, not here.

use std::cell::RefCell;
use std::time::Duration;

use event_listener::Event;
use kafka::idempotence::{
    AppendOutcome, PartitionProducers, ProducerBatch, Rebuild, Sequence, StoredBatch,
};
use wire::batch::BatchView;
use wire::chunk::BatchWalk;
use wire::producer_id::is_kelp_producer_id;
use wire::{ErrorCode, FetchChecks, FetchFrom};

use super::reader::Tail;
use super::SegmentCore;
use crate::serve_error::ServeError;

/// Bytes asked for per read while the log is read for the state.
const SCAN_READ_BYTES: usize = 4 << 20;

/// Where an append put a batch: its offsets, and whether it was there
/// already (an idempotent producer's resend, not stored again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placed {
    pub(crate) base: u64,
    pub(crate) next: u64,
    pub(crate) duplicate: bool,
}

/// Where a segment's producer state stands.
#[derive(Debug)]
enum ProducersSlot {
    /// Not read from the log yet (no idempotent batch since the open).
    Unread,
    /// Being read from the log; idempotent batches wait.
    Reading,
    Ready(PartitionProducers),
}

/// The producer batch `view` is, if a kelp idempotent producer sent it;
/// a stamp no kelp producer makes is refused.
pub(crate) fn kelp_batch(view: &BatchView<'_>) -> Result<Option<ProducerBatch>, ServeError> {
    let id = view.producer_id();
    if !is_kelp_producer_id(id) {
        return Ok(None);
    }
    let invalid = |what: &str| {
        ServeError::new(
            ErrorCode::InvalidArgument,
            format!("batch of producer {id:#x}: {what}"),
        )
    };
    let epoch = i16::try_from(view.producer_epoch()).map_err(|_| invalid("epoch over 32767"))?;
    let first =
        i32::try_from(view.base_sequence()).map_err(|_| invalid("base sequence over 2^31 - 1"))?;
    let last_delta = view
        .record_count()
        .checked_sub(1)
        .ok_or_else(|| invalid("no records"))?;
    // Below 2^63 (`is_kelp_producer_id`), so the id fits.
    Ok(Some(ProducerBatch::new(
        id as i64, epoch, first, last_delta,
    )))
}

/// The facts a stored batch gives the state, if a kelp producer wrote it.
fn stored_batch(view: &BatchView<'_>) -> Option<StoredBatch> {
    let id = view.producer_id();
    if !is_kelp_producer_id(id) {
        return None;
    }
    Some(StoredBatch {
        producer_id: id as i64,
        epoch: i16::try_from(view.producer_epoch()).ok()?,
        base_sequence: i32::try_from(view.base_sequence()).ok()?,
        record_count: view.record_count(),
        base_offset: i64::try_from(view.base_offset()).ok()?,
    })
}

/// One segment's idempotent producers: the state, read from the log once.
#[derive(Debug)]
pub(crate) struct SegmentProducers {
    slot: RefCell<ProducersSlot>,
    /// Rung when the state is read, or its read failed.
    read: Event,
}

impl Default for SegmentProducers {
    fn default() -> Self {
        SegmentProducers {
            slot: RefCell::new(ProducersSlot::Unread),
            read: Event::new(),
        }
    }
}

impl SegmentProducers {
    /// Wait until the state is read from `core`'s log (reading it if
    /// nobody is).
    pub(super) async fn ready(&self, core: &SegmentCore, tail: Tail) -> Result<(), ServeError> {
        loop {
            let listener = self.read.listen();
            let read_it = {
                let mut slot = self.slot.borrow_mut();
                match &*slot {
                    ProducersSlot::Ready(_) => return Ok(()),
                    ProducersSlot::Reading => false,
                    ProducersSlot::Unread => {
                        *slot = ProducersSlot::Reading;
                        true
                    }
                }
            };
            if !read_it {
                listener.await;
                continue;
            }
            let result = match read_state(core, tail).await {
                Ok(state) => {
                    log::debug!(
                        "segment {}: producer state read from the log ({} producers)",
                        core.chunk_prefix,
                        state.producer_count()
                    );
                    *self.slot.borrow_mut() = ProducersSlot::Ready(state);
                    Ok(())
                }
                Err(e) => {
                    *self.slot.borrow_mut() = ProducersSlot::Unread;
                    Err(e)
                }
            };
            self.read.notify(usize::MAX);
            return result;
        }
    }

    /// What an idempotent producer's batch of `count` records is: `Some`
    /// where it was stored already (its offsets), `None` to append it; an
    /// error for a gap or a stale epoch. The state must be ready.
    pub(super) fn check(
        &self,
        segment: u32,
        batch: &ProducerBatch,
        count: u32,
    ) -> Result<Option<Placed>, ServeError> {
        let slot = self.slot.borrow();
        let ProducersSlot::Ready(state) = &*slot else {
            return Err(ServeError::internal());
        };
        match state.check(batch) {
            Sequence::Fresh => Ok(None),
            Sequence::Duplicate(base) => {
                let base = u64::try_from(base).map_err(|_| ServeError::internal())?;
                Ok(Some(Placed {
                    base,
                    next: base + u64::from(count),
                    duplicate: true,
                }))
            }
            Sequence::OutOfOrder => Err(ServeError::new(
                ErrorCode::OutOfOrderSequence,
                format!(
                    "segment {segment}: producer {:#x} sent sequence {}, which does not follow the last it stored (records before it were lost, or never sent)",
                    batch.producer_id, batch.first
                ),
            )),
            Sequence::Fenced => Err(ServeError::new(
                ErrorCode::ProducerFenced,
                format!(
                    "segment {segment}: producer {:#x} sent epoch {}, older than one it stored",
                    batch.producer_id, batch.epoch
                ),
            )),
        }
    }

    /// An idempotent producer's batch was appended at `[base, next)`.
    pub(super) fn stored(&self, batch: ProducerBatch, base: u64, next: u64) {
        let mut slot = self.slot.borrow_mut();
        if let ProducersSlot::Ready(state) = &mut *slot {
            let append = state.begin(batch);
            state.end(
                append,
                AppendOutcome::Stored {
                    base_offset: base as i64,
                    end_offset: next,
                },
            );
        }
    }

    /// A resend to a sealed segment: `Some` with its offsets if the
    /// segment stored it below `stored_end` (what is in the filer for
    /// good), `None` if it did not (the batch goes to the successors).
    pub(super) async fn sealed_duplicate(
        &self,
        core: &SegmentCore,
        tail: Tail,
        batch: &ProducerBatch,
        count: u32,
        stored_end: u64,
    ) -> Result<Option<Placed>, ServeError> {
        self.ready(core, tail).await?;
        // A gap or a stale epoch no longer matters: nothing is appended.
        let placed = self.check(core.id, batch, count).unwrap_or(None);
        Ok(placed.filter(|p| p.next <= stored_end))
    }
}

/// Whether sealed `core` stored `resend` (a batch stamped by a kelp
/// producer) below `stored_end`: its offsets there if so. Reads only the
/// chunks whose largest record timestamp reaches the batch's (any chunk
/// that holds the batch does: its records are the batch's, timestamps and
/// all), and damaged ones, so a resend to a large sealed segment reads its
/// last chunks, not all of it.
pub(super) async fn find_in_sealed(
    core: &SegmentCore,
    tail: Tail,
    resend: &BatchView<'_>,
    stored_end: u64,
) -> Result<Option<Placed>, ServeError> {
    let candidates: Vec<(u64, u64)> = core
        .state
        .borrow()
        .log
        .chunks()
        .iter()
        .filter(|c| c.damaged.is_some() || c.header.max_timestamp_ms >= resend.max_timestamp_ms())
        .map(|c| (c.header.base_offset, c.header.next_offset.min(stored_end)))
        .filter(|(from, to)| from < to)
        .collect();
    let same = |view: &BatchView<'_>| {
        view.producer_id() == resend.producer_id()
            && view.producer_epoch() == resend.producer_epoch()
            && view.base_sequence() == resend.base_sequence()
    };
    let mut scratch = Vec::new();
    for (from, to) in candidates {
        let mut at = from;
        while at < to {
            let mut found = None;
            let reached = read_some(core, FetchFrom::Offset(at), tail, &mut scratch, |view| {
                if same(view) {
                    found = Some((view.base_offset(), view.next_offset()));
                }
                found.is_some()
            })
            .await
            .map_err(|e| storage_error(core, "looking for a resent batch", e))?;
            if let Some((base, next)) = found {
                return Ok((next <= stored_end).then_some(Placed {
                    base,
                    next,
                    duplicate: true,
                }));
            }
            if reached <= at {
                break;
            }
            at = reached;
        }
    }
    Ok(None)
}

/// One read of `core`'s log from `from`, damaged stretches read past (what
/// they held is unreadable to any reader): each batch is handed to `each`
/// until it says stop. Returns the offset the read reached.
async fn read_some(
    core: &SegmentCore,
    from: FetchFrom,
    tail: Tail,
    scratch: &mut Vec<u8>,
    mut each: impl FnMut(&BatchView<'_>) -> bool,
) -> Result<u64, ReadError> {
    let fetched = core
        .fetch(
            from,
            SCAN_READ_BYTES,
            Duration::ZERO,
            FetchChecks::SkipDamaged,
            tail,
        )
        .await
        .map_err(ReadError::Serve)?;
    for item in BatchWalk::new(fetched.body.batches(scratch)) {
        let (_, view) = item.map_err(ReadError::Batch)?;
        if each(&view) {
            break;
        }
    }
    Ok(fetched.next_offset)
}

/// Why a read of the log for producers failed.
enum ReadError {
    Serve(ServeError),
    Batch(wire::DecodeError),
}

/// `e`, met while `doing` in `core`'s log, as an answer.
fn storage_error(core: &SegmentCore, doing: &str, e: ReadError) -> ServeError {
    match e {
        ReadError::Serve(e) => e,
        ReadError::Batch(e) => ServeError::new(
            ErrorCode::Storage,
            format!("segment {}: {doing}: {e}", core.id),
        ),
    }
}

/// Read the segment's whole log, chunks and buffers, into a producer
/// state that covers it up to its end at the moment the read caught up.
async fn read_state(core: &SegmentCore, tail: Tail) -> Result<PartitionProducers, ServeError> {
    let mut rebuild = Rebuild::from_log_start();
    let mut from = FetchFrom::Earliest;
    let mut scratch = Vec::new();
    let mut read_to: Option<u64> = None;
    loop {
        // A batch in a damaged stretch is unreadable to any reader, and a
        // resend of it is stored.
        let reached = read_some(core, from, tail, &mut scratch, |view| {
            if let Some(batch) = stored_batch(view) {
                rebuild.replay(&batch);
            }
            false
        })
        .await
        .map_err(|e| storage_error(core, "reading its producers from the log", e))?;
        // No yield from this check to the state being taken: the appends
        // after it see the state, the ones before it are in the log read.
        let end = core.state.borrow().log.next_offset();
        if reached >= end {
            return Ok(rebuild.finish(end));
        }
        if read_to.is_some_and(|at| reached <= at) {
            return Err(ServeError::new(
                ErrorCode::Storage,
                format!(
                    "segment {}: reading its producers from the log stopped at offset {reached} of {end}",
                    core.id
                ),
            ));
        }
        read_to = Some(reached);
        from = FetchFrom::Offset(reached);
    }
}
