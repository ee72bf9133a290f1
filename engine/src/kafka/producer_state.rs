//! Idempotent Kafka producers' state, per partition, kept across restarts:
//! the I/O around `kafka::idempotence`, which owns the state itself (the
//! sequence checks, the append protocol, the snapshot format and the
//! rebuild). This module owns where snapshots live in the filer, reading
//! and storing them, reading the log at start, and the periodic store.
//!
//! The state survives a restart, killed or graceful, because the log holds
//! it: every batch from an idempotent producer is stored with the
//! producer's id (plus one), epoch and base sequence in the kelp batch
//! header ([`stamp`]). A partition's state is rebuilt the first time an
//! idempotent producer writes to it after a start: from its snapshot in
//! the filer (`topics/kafka/<name>/kafka-producers/<segment id>`, format in
//! `docs/kafka.md`) and then from the batches stored after the offset the
//! snapshot covers. Snapshots are written every ten seconds while the
//! state changes and when the gateway stops, so the read at start is
//! short. A partition's first snapshot is written before its first
//! idempotent batch is appended, so a partition without one holds no
//! idempotent batches.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use filer::{FilerError, ObjectPath};
use kafka::error_code as k;
use kafka::idempotence::{
    PartitionProducers, ProducerBatch, Rebuild, StoredBatch, SNAPSHOT_BYTES_MAX,
};
use wire::batch::BatchView;
use wire::chunk::BatchWalk;
use wire::message::{FetchFrom, SegmentInfo};

use super::fetch::read_segment;
use super::gateway_error::StoreError;
use super::topics::{kafka_error, kelp_name};
use super::{put_object, read_object, Gateway};
use crate::serve_error::ServeError;

/// How often changed states are stored.
pub(crate) const SNAPSHOT_INTERVAL: Duration = Duration::from_secs(10);
/// Bytes asked for per read while rebuilding from the log.
const SCAN_READ_BYTES: u32 = 4 << 20;

/// A Kafka error code and its message.
pub(crate) type Refusal = (i16, String);

/// The (producer id, epoch, base sequence) to store in the kelp batch
/// header for an idempotent producer's batch: the id plus one (0 means no
/// producer), the epoch and the base sequence as unsigned bit patterns.
pub(crate) fn stamp(batch: &ProducerBatch) -> (u64, u16, u32) {
    (
        batch.producer_id as u64 + 1,
        batch.epoch as u16,
        batch.first as u32,
    )
}

/// The producer batch a stored kelp batch header names, if an idempotent
/// Kafka producer wrote it (the reverse of [`stamp`]).
fn stored_batch(view: &BatchView<'_>) -> Option<StoredBatch> {
    // kelp's own idempotent producers are the segment owner's to check.
    if wire::producer_id::is_kelp_producer_id(view.producer_id()) {
        return None;
    }
    let id = view.producer_id().checked_sub(1)?;
    Some(StoredBatch {
        producer_id: i64::try_from(id).ok()?,
        epoch: i16::try_from(view.producer_epoch()).ok()?,
        base_sequence: i32::try_from(view.base_sequence()).ok()?,
        record_count: view.record_count(),
        base_offset: view.base_offset() as i64,
    })
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
            let Some(due) = state.borrow().snapshot_due() else {
                continue;
            };
            match store(gateway, &slot.topic, slot.segment.id, due.bytes).await {
                Ok(()) => state.borrow_mut().snapshot_stored(due.mark),
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

async fn store(
    gateway: &Gateway,
    topic: &str,
    segment: u32,
    bytes: Vec<u8>,
) -> Result<(), StoreError> {
    let path = snapshot_path(topic, segment)?;
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
        store(gateway, topic, segment.id, state.encode_snapshot())
            .await
            .map_err(|e| storage_error("storing producer state", e))?;
        return Ok(state);
    };
    let mut rebuild = Rebuild::from_snapshot(&bytes).unwrap_or_else(|e| {
        log::warn!(
            "Kafka gateway: producer state of {topic}/{}: {e}; reading the whole segment instead",
            segment.id
        );
        Rebuild::from_log_start()
    });
    let from = rebuild.scan_from();
    let (read, log_end) = scan(gateway, topic, segment, &mut rebuild).await?;
    log::info!(
        "Kafka gateway: producer state of {topic}/{}: {} producers, {read} bytes of log read from offset {from}",
        segment.id,
        rebuild.producer_count(),
    );
    Ok(rebuild.finish(log_end))
}

/// The offset after the segment's last record.
async fn read_end(gateway: &Gateway, topic: &str, segment: &SegmentInfo) -> Result<u64, Refusal> {
    read_segment(gateway, topic, segment, FetchFrom::Latest, 1, 0, |f| {
        f.start_offset
    })
    .await
    .map_err(refusal)
}

/// Feed every idempotent batch stored from `rebuild.scan_from()` on into
/// the rebuild. Returns the bytes read and the offset where the log ends.
async fn scan(
    gateway: &Gateway,
    topic: &str,
    segment: &SegmentInfo,
    rebuild: &mut Rebuild,
) -> Result<(u64, u64), Refusal> {
    let mut at = rebuild.scan_from();
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
                    if let Some(batch) = stored_batch(&view) {
                        rebuild.replay(&batch);
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
            Err(e) if e.code == wire::ErrorCode::OffsetOutOfRange => {
                return Ok((read_bytes, at));
            }
            Err(e) => return Err(refusal(e)),
        };
        read_bytes += bytes as u64;
        if bytes == 0 || at >= end {
            return Ok((read_bytes, at.max(end)));
        }
    }
}

/// A shard's refusal as a Kafka error code and message (an offset past the
/// segment's end is OFFSET_OUT_OF_RANGE).
fn refusal(e: ServeError) -> Refusal {
    let code = if e.code == wire::ErrorCode::OffsetOutOfRange {
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

    #[test]
    fn stored_batch_header_names_its_producer() {
        let mut b = wire::batch::BatchBuilder::new();
        b.push(1, b"k", b"v", &[]).unwrap();
        b.push(2, b"k", b"v", &[]).unwrap();
        let (id, epoch, first) = stamp(&batch(41, 3, i32::MAX, 0));
        let bytes = b.finish_with_epoch(id, epoch, first).to_vec();
        let view = BatchView::validate(&bytes).unwrap();
        let stored = stored_batch(&view).unwrap();
        assert_eq!(
            stored,
            StoredBatch {
                producer_id: 41,
                epoch: 3,
                base_sequence: i32::MAX,
                record_count: 2,
                base_offset: view.base_offset() as i64,
            }
        );
        assert_eq!(stored.producer_batch(), Some(batch(41, 3, i32::MAX, 0)));
        let mut plain = wire::batch::BatchBuilder::new();
        plain.push(1, b"k", b"v", &[]).unwrap();
        let bytes = plain.finish(0, 0).to_vec();
        assert_eq!(stored_batch(&BatchView::validate(&bytes).unwrap()), None);
    }
}
