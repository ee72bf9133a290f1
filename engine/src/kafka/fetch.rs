//! Fetch: each partition is read from its segment and kelp's batches are
//! re-encoded as uncompressed Kafka v2 batches with the same base offsets
//! (a batch may start before the fetch offset; Kafka clients skip those
//! records, as they do for compressed batches).
//!
//! Long polling: every partition is read without waiting first. When that
//! gives fewer than `min_bytes` and the request may wait, one waiting read
//! per partition is started and the first to bring data (or `max_wait_ms`)
//! ends the wait; then every partition is read again without waiting. A
//! waiting read that lost the race ends on its shard when data comes or
//! its wait runs out.

use std::rc::Rc;

use kafka::api::fetch::{FetchPartitionData, FetchRequest, FetchResponse, FetchTopicData};
use kafka::error_code as k;
use kafka::{encode_record_batch, Compression, Record, RecordBatchHeader, RecordHeaders};
use wire::batch::BatchView;
use wire::message::{FetchFrom, SegmentInfo};
use wire::Response;

use super::topics::{is_stale, kafka_error, kelp_name};
use super::Gateway;
use crate::serve_error::ServeError;

/// One partition's answer, its records already Kafka batches.
struct PartitionOut {
    index: i32,
    error_code: i16,
    high_watermark: i64,
    records: Vec<u8>,
}

/// A whole fetch answer, owning the records the response borrows.
pub(crate) struct Fetched {
    topics: Vec<(String, Vec<PartitionOut>)>,
}

impl Fetched {
    pub(crate) fn response(&self) -> FetchResponse<'_> {
        FetchResponse {
            throttle_time_ms: 0,
            error_code: k::NONE,
            session_id: 0,
            topics: self
                .topics
                .iter()
                .map(|(name, partitions)| FetchTopicData {
                    topic: name.clone(),
                    partitions: partitions
                        .iter()
                        .map(|p| FetchPartitionData {
                            partition_index: p.index,
                            error_code: p.error_code,
                            high_watermark: p.high_watermark,
                            last_stable_offset: p.high_watermark,
                            log_start_offset: if p.error_code == k::NONE { 0 } else { -1 },
                            aborted_transactions: None,
                            preferred_read_replica: -1,
                            records: Some(&p.records),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    fn bytes(&self) -> usize {
        self.topics
            .iter()
            .flat_map(|(_, p)| p.iter())
            .map(|p| p.records.len())
            .sum()
    }
}

pub(crate) async fn fetch(gateway: &Rc<Gateway>, request: &FetchRequest) -> Fetched {
    let first = read_all(gateway, request).await;
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0).max(1);
    let max_wait = u32::try_from(request.max_wait_ms)
        .unwrap_or(0)
        .min(gateway.fetch_wait_ms_max);
    if first.bytes() >= min_bytes || max_wait == 0 {
        return first;
    }
    // Wait for the first partition to bring data, then read them all.
    let targets: Vec<(String, i32, i64)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.topic.clone(), p.partition, p.fetch_offset))
        })
        .collect();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<bool>(targets.len().max(1));
    for (topic, partition, offset) in targets {
        let gateway = gateway.clone();
        let tx = tx.clone();
        tokio::task::spawn_local(async move {
            let data = read_partition(&gateway, &topic, partition, offset, 1, max_wait)
                .await
                .is_ok_and(|p| !p.records.is_empty());
            let _ = tx.send(data).await;
        });
    }
    drop(tx);
    let wait = async {
        while let Some(data) = rx.recv().await {
            if data {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_millis(u64::from(max_wait)), wait).await;
    read_all(gateway, request).await
}

/// Read every requested partition without waiting, within the request's
/// byte limits (the first partition with data is always whole).
async fn read_all(gateway: &Gateway, request: &FetchRequest) -> Fetched {
    let mut budget = usize::try_from(request.max_bytes).unwrap_or(0).max(1);
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let index = p.partition;
            if budget == 0 {
                // Over the response's byte limit: no records, but the
                // partition's high watermark all the same.
                let latest =
                    super::offsets::lookup(gateway, &topic.topic, index, super::offsets::LATEST)
                        .await;
                partitions.push(match latest {
                    Ok((_, high_watermark)) => PartitionOut {
                        index,
                        error_code: k::NONE,
                        high_watermark,
                        records: Vec::new(),
                    },
                    Err(error_code) => PartitionOut {
                        index,
                        error_code,
                        high_watermark: -1,
                        records: Vec::new(),
                    },
                });
                continue;
            }
            let max_bytes = usize::try_from(p.partition_max_bytes)
                .unwrap_or(0)
                .clamp(1, budget);
            let out = read_partition(gateway, &topic.topic, index, p.fetch_offset, max_bytes, 0)
                .await
                .unwrap_or_else(|error_code| PartitionOut {
                    index,
                    error_code,
                    high_watermark: -1,
                    records: Vec::new(),
                });
            budget = budget.saturating_sub(out.records.len());
            partitions.push(out);
        }
        topics.push((topic.topic.clone(), partitions));
    }
    Fetched { topics }
}

async fn read_partition(
    gateway: &Gateway,
    topic: &str,
    index: i32,
    offset: i64,
    max_bytes: usize,
    max_wait_ms: u32,
) -> Result<PartitionOut, i16> {
    let layout = gateway
        .topics
        .layout(topic)
        .await
        .map_err(|e| kafka_error(&e))?;
    let segment = layout
        .partition(index)
        .ok_or(k::UNKNOWN_TOPIC_OR_PARTITION)?;
    let from = u64::try_from(offset).map_err(|_| k::OFFSET_OUT_OF_RANGE)?;
    let max_bytes = u32::try_from(max_bytes).unwrap_or(u32::MAX);
    let read = read_segment(
        gateway,
        topic,
        segment,
        FetchFrom::Offset(from),
        max_bytes,
        max_wait_ms,
        |fetched| {
            if from > fetched.high_watermark {
                return Err(k::OFFSET_OUT_OF_RANGE);
            }
            let mut records = Vec::with_capacity(fetched.batches.len() + fetched.batches.len() / 4);
            to_kafka_batches(fetched.batches, &mut records).map_err(|e| {
                log::error!("Kafka fetch {topic}/{index}: {e}");
                k::CORRUPT_MESSAGE
            })?;
            Ok(PartitionOut {
                index,
                error_code: k::NONE,
                high_watermark: fetched.high_watermark as i64,
                records,
            })
        },
    )
    .await;
    match read {
        Ok(out) => out,
        // The segment refuses an offset past its end.
        Err(e) if e.code == wire::ErrorCode::InvalidArgument => Err(k::OFFSET_OUT_OF_RANGE),
        Err(e) => Err(kafka_error(&e)),
    }
}

/// One read of `segment` (Kafka topic `topic`'s partition) on its shard,
/// waiting at most `max_wait_ms` for data, handed to `read`. A layout the
/// shard calls stale is forgotten.
pub(crate) async fn read_segment<R>(
    gateway: &Gateway,
    topic: &str,
    segment: &SegmentInfo,
    from: FetchFrom,
    max_bytes: u32,
    max_wait_ms: u32,
    read: impl FnOnce(wire::message::Fetched<'_>) -> R,
) -> Result<R, ServeError> {
    let request = wire::Request::Fetch {
        topic: kelp_name(topic),
        segment: segment.id,
        from,
        max_bytes,
        max_wait_ms,
    };
    let answer = gateway.shards.call(segment.shard, &request).await;
    let response = answer
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|a| a.response());
    match response {
        Ok(Some(Response::Fetched(fetched))) => Ok(read(fetched)),
        Ok(_) => Err(ServeError::new(
            wire::ErrorCode::Internal,
            "unexpected shard answer",
        )),
        Err(e) => {
            if is_stale(&e) {
                gateway.topics.forget(topic);
            }
            Err(e)
        }
    }
}

/// Re-encode kelp batches (stored, so validated on append) as Kafka v2
/// batches with the same base offsets, uncompressed.
pub(crate) fn to_kafka_batches(mut batches: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    let mut scratch = Vec::new();
    while !batches.is_empty() {
        let len = BatchView::peek_len(batches)
            .map(|n| n as usize)
            .filter(|n| *n <= batches.len())
            .ok_or("a stored batch is cut short")?;
        let view = BatchView::validate(&batches[..len]).map_err(|e| e.to_string())?;
        batches = &batches[len..];
        // One allocation of each per batch, none per record.
        let mut headers: Vec<kafka::RecordHeader<'_>> = Vec::new();
        for r in view.records() {
            for h in r.headers() {
                headers.push(kafka::RecordHeader {
                    key: std::str::from_utf8(h.name).unwrap_or_default(),
                    value: Some(h.value),
                });
            }
        }
        let base_timestamp = view.first_timestamp_ms();
        let mut records: Vec<Record<'_>> = Vec::with_capacity(view.record_count() as usize);
        let mut at = 0;
        for r in view.records() {
            let n = r.header_count();
            records.push(Record {
                attributes: 0,
                timestamp_delta: r.timestamp_ms - base_timestamp,
                offset_delta: r.offset_delta as i32,
                key: (!r.key.is_empty()).then_some(r.key),
                value: Some(r.value),
                headers: RecordHeaders::List(&headers[at..at + n]),
            });
            at += n;
        }
        let header = RecordBatchHeader {
            base_offset: view.base_offset() as i64,
            partition_leader_epoch: 0,
            attributes: 0,
            last_offset_delta: 0,
            base_timestamp,
            max_timestamp: view.max_timestamp_ms(),
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            record_count: view.record_count() as i32,
        };
        encode_record_batch(out, &header, &records, Compression::None, &mut scratch)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
