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

use std::time::Duration;

use kafka::idempotence::{PartitionProducers, ProducerBatch, Rebuild, StoredBatch};
use wire::batch::BatchView;
use wire::chunk::BatchWalk;
use wire::producer_id::is_kelp_producer_id;
use wire::{ErrorCode, FetchChecks, FetchFrom};

use super::reader::Tail;
use super::SegmentCore;
use crate::serve_error::ServeError;

/// Bytes asked for per read while the log is read for the state.
const SCAN_READ_BYTES: usize = 4 << 20;

/// Where a segment's producer state stands.
#[derive(Debug)]
pub(crate) enum ProducersSlot {
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

/// Read the segment's whole log, chunks and buffers, into a producer
/// state that covers it up to its end at the moment the read caught up.
pub(super) async fn read_state(core: &SegmentCore) -> Result<PartitionProducers, ServeError> {
    let mut rebuild = Rebuild::from_log_start();
    let mut from = FetchFrom::Earliest;
    let mut scratch = Vec::new();
    let mut read_to: Option<u64> = None;
    loop {
        let fetched = core
            .fetch(
                from,
                SCAN_READ_BYTES,
                Duration::ZERO,
                // Damaged stretches are read past: what they held is
                // unreadable to any reader, and a resend of it is stored.
                FetchChecks::SkipDamaged,
                Tail::Appended,
            )
            .await?;
        for item in BatchWalk::new(fetched.body.batches(&mut scratch)) {
            let (_, view) = item.map_err(|e| {
                ServeError::new(
                    ErrorCode::Storage,
                    format!(
                        "segment {}: reading its producers from the log: {e}",
                        core.id
                    ),
                )
            })?;
            if let Some(batch) = stored_batch(&view) {
                rebuild.replay(&batch);
            }
        }
        // No yield from this check to the state being taken: the appends
        // after it see the state, the ones before it are in the log read.
        let end = core.state.borrow().log.next_offset();
        if fetched.next_offset >= end {
            return Ok(rebuild.finish(end));
        }
        if read_to.is_some_and(|at| fetched.next_offset <= at) {
            return Err(ServeError::new(
                ErrorCode::Storage,
                format!(
                    "segment {}: reading its producers from the log stopped at offset {} of {end}",
                    core.id, fetched.next_offset
                ),
            ));
        }
        read_to = Some(fetched.next_offset);
        from = FetchFrom::Offset(fetched.next_offset);
    }
}
