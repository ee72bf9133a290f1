//! Produce: each partition's Kafka batches (any codec) become one kelp
//! batch, appended to the partition's segment with the ack the request's
//! `acks` asks for (0 none, 1 leader, -1 durable). Keys, values, headers
//! and timestamps are kept, null keys and values (tombstones) as null; a
//! null header value becomes an empty one.
//!
//! Idempotent producers: sequences are checked and resends answered with
//! their first offset (`kafka::idempotence`, driven by `producer_state`),
//! and the producer's id, epoch and base sequence are stored in the kelp
//! batch header, so the check holds across restarts. As from Kafka 3, an
//! idempotent partition's records are one batch.

use kafka::api::produce::{
    ProducePartition, ProducePartitionResult, ProduceRequest, ProduceResponse, ProduceTopicResult,
};
use kafka::error_code as k;
use kafka::idempotence::{AppendOutcome, ProducerBatch, Sequence};
use kafka::record_batch::DECOMPRESSED_BYTES_MAX;
use kafka::RecordBatches;
use wire::batch::{BatchBuilder, RecordHeader};
use wire::AckMode;

use crate::inbox::Produced;

use super::producer_state::stamp;
use super::topics::{is_stale, kafka_error, kelp_name};
use super::Gateway;

fn ack_mode(acks: i16) -> AckMode {
    match acks {
        0 => AckMode::None,
        1 => AckMode::Leader,
        _ => AckMode::Durable,
    }
}

pub(crate) async fn produce(gateway: &Gateway, request: ProduceRequest<'_>) -> ProduceResponse {
    let ack = ack_mode(request.acks);
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for partition in topic.partitions {
            let index = partition.index;
            let result = match produce_partition(gateway, &topic.name, partition, ack).await {
                Ok(base_offset) => ProducePartitionResult {
                    index,
                    error_code: k::NONE,
                    base_offset,
                    log_append_time_ms: -1,
                    log_start_offset: 0,
                    ..Default::default()
                },
                Err((error_code, message)) => ProducePartitionResult {
                    index,
                    error_code,
                    base_offset: -1,
                    log_append_time_ms: -1,
                    log_start_offset: -1,
                    error_message: Some(message),
                    ..Default::default()
                },
            };
            partitions.push(result);
        }
        topics.push(ProduceTopicResult {
            name: topic.name,
            partitions,
        });
    }
    ProduceResponse {
        topics,
        throttle_time_ms: 0,
    }
}

async fn produce_partition(
    gateway: &Gateway,
    topic: &str,
    partition: ProducePartition<'_>,
    ack: AckMode,
) -> Result<i64, (i16, String)> {
    let layout = gateway
        .topics
        .layout(topic)
        .await
        .map_err(|e| (kafka_error(&e), e.message))?;
    let Some(segment) = layout.partition(partition.index) else {
        return Err((
            k::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic {topic} has no partition {}", partition.index),
        ));
    };
    let corrupt = |e: String| (k::CORRUPT_MESSAGE, e);
    let records = partition.records.unwrap_or_default();
    // Kelp's record header is larger than Kafka's varints: room for that
    // too, so the builder does not grow (a copy) midway.
    let mut builder = gateway
        .builders
        .take(|| BatchBuilder::with_capacity(records.len() + records.len() / 8 + 64));
    let mut scratch = Vec::new();
    let mut idempotent: Option<ProducerBatch> = None;
    let mut batches = 0usize;
    for batch in RecordBatches::new(records) {
        let batch = batch.map_err(|e| corrupt(e.to_string()))?;
        let h = &batch.header;
        if h.is_transactional() || h.is_control() {
            return Err((
                k::INVALID_REQUEST,
                "transactions are not supported by the kelp gateway".into(),
            ));
        }
        batches += 1;
        // As Kafka's broker does: the header's record count and its offset
        // range must agree, or an idempotent producer's sequence range
        // (taken from the offset range) would not be the records stored.
        if i64::from(h.last_offset_delta) + 1 != i64::from(h.record_count) {
            return Err((
                k::INVALID_RECORD,
                format!(
                    "the batch header counts {} records but its last offset delta is {}",
                    h.record_count, h.last_offset_delta
                ),
            ));
        }
        if h.producer_id >= 0 && h.base_sequence >= 0 {
            // The batch decoder refuses a negative delta.
            let last_offset_delta = u32::try_from(h.last_offset_delta)
                .map_err(|_| corrupt("negative last offset delta".into()))?;
            idempotent = Some(ProducerBatch::new(
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                last_offset_delta,
            ));
        }
        let mut headers: Vec<RecordHeader<'_>> = Vec::new();
        for record in batch
            .records(&mut scratch, DECOMPRESSED_BYTES_MAX)
            .map_err(|e| corrupt(e.to_string()))?
        {
            let record = record.map_err(|e| corrupt(e.to_string()))?;
            headers.clear();
            headers.extend(record.headers.iter().map(|h| RecordHeader {
                name: h.key.as_bytes(),
                value: h.value.unwrap_or_default(),
            }));
            let timestamp = h.base_timestamp.saturating_add(record.timestamp_delta);
            builder
                .push_nullable(timestamp, record.key, record.value, &headers)
                .map_err(|e| (k::INVALID_RECORD, e.to_string()))?;
        }
    }
    if idempotent.is_some() && batches > 1 {
        return Err((
            k::INVALID_RECORD,
            "an idempotent producer's records for a partition must be one batch".into(),
        ));
    }
    if builder.is_empty() {
        return Err((
            k::CORRUPT_MESSAGE,
            "no records in the produce request".into(),
        ));
    }
    let slot = idempotent.map(|batch| {
        (
            batch,
            gateway.producers.slot(topic, partition.index, segment),
        )
    });
    let producers = match &slot {
        Some((batch, slot)) => {
            let producers = slot.ready(gateway).await?;
            let check = producers.borrow().check(batch);
            match check {
                Sequence::Fresh => {}
                Sequence::Duplicate(offset) => return Ok(offset),
                Sequence::OutOfOrder => {
                    return Err((
                        k::OUT_OF_ORDER_SEQUENCE_NUMBER,
                        format!("sequence {} is not the next", batch.first),
                    ))
                }
                Sequence::Fenced => {
                    return Err((
                        k::INVALID_PRODUCER_EPOCH,
                        format!("epoch {} is older than the producer's", batch.epoch),
                    ))
                }
            }
            let append = producers.borrow_mut().begin(*batch);
            Some((producers, append))
        }
        None => None,
    };
    let records_count = builder.len() as u64;
    let bytes = match idempotent {
        Some(batch) => {
            let (id, epoch, first) = stamp(&batch);
            builder.finish_with_epoch(id, epoch, first)
        }
        None => builder.finish(0, 0),
    };
    let answer = gateway
        .shards
        .produce(
            segment.shard,
            kelp_name(topic),
            segment.id,
            ack,
            bytes.to_vec(),
        )
        .await;
    // What was stored (for the producer state) and the partition's answer.
    let (outcome, result) = match answer {
        Ok(Some(Produced { base_offset, .. })) => (
            AppendOutcome::Stored {
                base_offset: base_offset as i64,
                end_offset: base_offset + records_count,
            },
            Ok(base_offset as i64),
        ),
        // acks 0: no answer, and no offset to give.
        Ok(None) => (AppendOutcome::Unknown, Ok(-1)),
        Err(e) => {
            if is_stale(&e) {
                gateway.topics.forget(topic);
            }
            (AppendOutcome::Unknown, Err((kafka_error(&e), e.message)))
        }
    };
    if let Some((producers, append)) = producers {
        producers.borrow_mut().end(append, outcome);
    }
    result
}
