//! Produce: each partition's Kafka batches (any codec) become one kelp
//! batch, appended to the partition's segment with the ack the request's
//! `acks` asks for (0 none, 1 leader, -1 durable). Keys, values, headers
//! and timestamps are kept; null keys and values become empty ones.
//!
//! Idempotent producers: per (producer id, partition) the gateway keeps
//! the epoch, the next expected sequence and the last five batches'
//! sequences with their offsets. A resend of one of those batches is
//! answered with its original offset and not appended again; any other
//! sequence than the next is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch
//! is INVALID_PRODUCER_EPOCH. The state lives in memory only (a restart
//! forgets it, as if every producer were new).

use std::collections::{HashMap, VecDeque};

use kafka::api::produce::{
    ProducePartition, ProducePartitionResult, ProduceRequest, ProduceResponse, ProduceTopicResult,
};
use kafka::error_code as k;
use kafka::record_batch::DECOMPRESSED_BYTES_MAX;
use kafka::RecordBatches;
use wire::batch::{BatchBuilder, RecordHeader};
use wire::{AckMode, Response};

use super::topics::{is_stale, kafka_error, kelp_name};
use super::Gateway;

/// Batches per producer and partition whose resend is recognised (Kafka's
/// `max.in.flight.requests.per.connection` limit for idempotence).
const RECENT_BATCHES: usize = 5;
/// (Producer, partition) states kept; past it an arbitrary one is dropped
/// (that producer's next resend would be appended again).
const PRODUCER_STATES_MAX: usize = 100_000;

/// One idempotent producer's state for one partition.
#[derive(Debug)]
struct ProducerState {
    epoch: i16,
    next_sequence: i32,
    /// (first sequence, last sequence, base offset) of recent batches.
    recent: VecDeque<(i32, i32, i64)>,
}

/// What a batch's sequence says.
enum Sequence {
    /// Not idempotent, or the next batch: append it.
    Fresh,
    /// A resend: answer with this base offset.
    Duplicate(i64),
    /// A sequence gap (or a new epoch not starting at 0).
    OutOfOrder,
    /// An epoch older than the producer's current one.
    Fenced,
}

/// Every idempotent producer's sequences, by producer id, topic and
/// partition.
#[derive(Debug, Default)]
pub(crate) struct Sequences {
    producers: HashMap<(i64, String, i32), ProducerState>,
}

impl Sequences {
    fn check(&self, key: &(i64, String, i32), epoch: i16, first: i32) -> Sequence {
        let Some(state) = self.producers.get(key) else {
            return Sequence::Fresh;
        };
        if epoch < state.epoch {
            return Sequence::Fenced;
        }
        if epoch > state.epoch {
            return if first == 0 {
                Sequence::Fresh
            } else {
                Sequence::OutOfOrder
            };
        }
        if first == state.next_sequence {
            return Sequence::Fresh;
        }
        match state.recent.iter().find(|(f, _, _)| *f == first) {
            Some((_, _, offset)) => Sequence::Duplicate(*offset),
            None => Sequence::OutOfOrder,
        }
    }

    fn appended(&mut self, key: (i64, String, i32), epoch: i16, first: i32, last: i32, base: i64) {
        if self.producers.len() >= PRODUCER_STATES_MAX && !self.producers.contains_key(&key) {
            let victim = self.producers.keys().next().cloned();
            if let Some(victim) = victim {
                self.producers.remove(&victim);
            }
        }
        let state = self.producers.entry(key).or_insert(ProducerState {
            epoch,
            next_sequence: 0,
            recent: VecDeque::with_capacity(RECENT_BATCHES),
        });
        if state.epoch != epoch {
            state.epoch = epoch;
            state.recent.clear();
        }
        state.next_sequence = if last == i32::MAX { 0 } else { last + 1 };
        if state.recent.len() == RECENT_BATCHES {
            state.recent.pop_front();
        }
        state.recent.push_back((first, last, base));
    }
}

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

/// A Kafka batch that goes into the kelp batch: its producer, sequences
/// and record count.
struct Pending {
    producer_id: i64,
    epoch: i16,
    first: i32,
    last: i32,
    records: u64,
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
    let mut builder = BatchBuilder::with_capacity(records.len() + 64);
    let mut scratch = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();
    let mut duplicate_of: Option<i64> = None;
    for batch in RecordBatches::new(records) {
        let batch = batch.map_err(|e| corrupt(e.to_string()))?;
        let h = &batch.header;
        if h.is_transactional() || h.is_control() {
            return Err((
                k::INVALID_REQUEST,
                "transactions are not supported by the kelp gateway".into(),
            ));
        }
        if h.producer_id >= 0 && h.base_sequence >= 0 {
            let key = (h.producer_id, topic.to_string(), partition.index);
            let check = gateway
                .producers
                .borrow()
                .check(&key, h.producer_epoch, h.base_sequence);
            match check {
                Sequence::Fresh => {}
                Sequence::Duplicate(offset) => {
                    duplicate_of.get_or_insert(offset);
                    continue;
                }
                Sequence::OutOfOrder => {
                    return Err((
                        k::OUT_OF_ORDER_SEQUENCE_NUMBER,
                        format!("sequence {} is not the next", h.base_sequence),
                    ))
                }
                Sequence::Fenced => {
                    return Err((
                        k::INVALID_PRODUCER_EPOCH,
                        format!("epoch {} is older than the producer's", h.producer_epoch),
                    ))
                }
            }
            pending.push(Pending {
                producer_id: h.producer_id,
                epoch: h.producer_epoch,
                first: h.base_sequence,
                last: h.base_sequence.wrapping_add(h.last_offset_delta),
                records: 0,
            });
        } else {
            pending.push(Pending {
                producer_id: -1,
                epoch: -1,
                first: -1,
                last: -1,
                records: 0,
            });
        }
        let mut count = 0u64;
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
                .push(
                    timestamp,
                    record.key.unwrap_or_default(),
                    record.value.unwrap_or_default(),
                    &headers,
                )
                .map_err(|e| (k::INVALID_RECORD, e.to_string()))?;
            count += 1;
        }
        if let Some(p) = pending.last_mut() {
            p.records = count;
        }
    }
    if builder.is_empty() {
        return match duplicate_of {
            Some(offset) => Ok(offset),
            None => Err((
                k::CORRUPT_MESSAGE,
                "no records in the produce request".into(),
            )),
        };
    }
    let kelp_topic = kelp_name(topic);
    let bytes = builder.finish(0, 0);
    let request = wire::Request::Produce {
        topic: &kelp_topic,
        segment: segment.id,
        ack,
        batch: bytes,
    };
    let answer = gateway.shards.call(segment.shard, &request).await;
    let response = answer
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|a| a.response());
    let base = match response {
        Ok(Some(Response::Produced { base_offset, .. })) => base_offset as i64,
        // acks 0: no answer, and no offset to give.
        Ok(None) => return Ok(-1),
        Ok(Some(_)) => return Err((k::UNKNOWN_SERVER_ERROR, "unexpected shard answer".into())),
        Err(e) => {
            if is_stale(&e) {
                gateway.topics.forget(topic);
            }
            return Err((kafka_error(&e), e.message));
        }
    };
    let mut offset = base;
    let mut sequences = gateway.producers.borrow_mut();
    for p in &pending {
        if p.producer_id >= 0 {
            let key = (p.producer_id, topic.to_string(), partition.index);
            sequences.appended(key, p.epoch, p.first, p.last, offset);
        }
        offset += p.records as i64;
    }
    Ok(duplicate_of.map_or(base, |d| d.min(base)))
}
