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

use super::gateway_error::ConvertError;
use std::rc::Rc;

use kafka::api::fetch::{FetchPartitionData, FetchRequest, FetchResponse, FetchTopicData};
use kafka::error_code as k;
use kafka::{encode_record_batch, Compression, Record, RecordBatchHeader, RecordHeaders};
use wire::batch::BatchView;
use wire::message::{FetchChecks, FetchFrom, SegmentInfo};

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

    pub(crate) fn bytes(&self) -> usize {
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
///
/// The partitions are read at once, each up to its own limit and the
/// response's: one shard round trip each, overlapped rather than one after
/// another. The response's limit is then applied in request order, as if
/// they had been read in turn: each partition keeps the whole batches that
/// fit in what is left (at least one, as a shard's read gives), and once
/// nothing is left a partition has no records, only its high watermark.
async fn read_all(gateway: &Rc<Gateway>, request: &FetchRequest) -> Fetched {
    let response_max = usize::try_from(request.max_bytes).unwrap_or(0).max(1);
    let mut reads = Vec::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            let max_bytes = usize::try_from(p.partition_max_bytes)
                .unwrap_or(0)
                .clamp(1, response_max);
            let gateway = gateway.clone();
            let name = topic.topic.clone();
            let (index, offset) = (p.partition, p.fetch_offset);
            reads.push(tokio::task::spawn_local(async move {
                read_partition(&gateway, &name, index, offset, max_bytes, 0)
                    .await
                    .unwrap_or_else(|error_code| PartitionOut {
                        index,
                        error_code,
                        high_watermark: -1,
                        records: Vec::new(),
                    })
            }));
        }
    }
    let mut reads = reads.into_iter();
    let mut budget = response_max;
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let read = match reads.next() {
                Some(read) => read.await.ok(),
                None => None,
            };
            let mut out = read.unwrap_or(PartitionOut {
                index: p.partition,
                error_code: k::UNKNOWN_SERVER_ERROR,
                high_watermark: -1,
                records: Vec::new(),
            });
            let kept = whole_batches_within(&out.records, budget);
            out.records.truncate(kept);
            budget = budget.saturating_sub(kept);
            partitions.push(out);
        }
        topics.push((topic.topic.clone(), partitions));
    }
    Fetched { topics }
}

/// How many leading bytes of `records` (Kafka batches back to back) are
/// whole batches within `budget`: at least the first batch unless `budget`
/// is 0, as a shard's read gives at least one batch.
fn whole_batches_within(records: &[u8], budget: usize) -> usize {
    if budget == 0 {
        return 0;
    }
    let mut at = 0;
    while at < records.len() {
        let length = records
            .get(at + kafka::record_batch::BATCH_LENGTH_OFFSET..)
            .and_then(|rest| rest.first_chunk::<4>())
            .map(|b| i32::from_be_bytes(*b));
        let Some(end) = length
            .and_then(|n| usize::try_from(n).ok())
            .map(|n| at + kafka::record_batch::BATCH_LENGTH_BASE_BYTES + n)
            .filter(|end| *end <= records.len())
        else {
            // Not batches this gateway wrote: keep them whole.
            return records.len();
        };
        if at > 0 && end > budget {
            break;
        }
        at = end;
    }
    at
}

async fn read_partition(
    gateway: &Gateway,
    topic: &str,
    index: i32,
    offset: i64,
    max_bytes: usize,
    max_wait_ms: u32,
) -> Result<PartitionOut, i16> {
    let segment = gateway.topics.partition(topic, index).await?;
    let from = u64::try_from(offset).map_err(|_| k::OFFSET_OUT_OF_RANGE)?;
    let max_bytes = u32::try_from(max_bytes).unwrap_or(u32::MAX);
    let read = read_segment(
        gateway,
        topic,
        &segment,
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
        Err(e) if e.code == wire::ErrorCode::OffsetOutOfRange => Err(k::OFFSET_OUT_OF_RANGE),
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
    // Kafka's own fetch request is `FetchRequest` here.
    let request = wire::FetchRequest {
        topic: kelp_name(topic),
        segment: segment.id,
        from,
        max_bytes,
        max_wait_ms,
        // The gateway reads what it is sent; batches were validated when
        // they were appended.
        checks: FetchChecks::Trust,
        follower: None,
    };
    let answer = gateway.shards.fetch(segment.shard, request).await;
    match answer {
        Ok(f) => {
            let mut scratch = Vec::new();
            Ok(read(wire::message::Fetched {
                segment: segment.id,
                start_offset: f.start_offset,
                next_offset: f.next_offset,
                high_watermark: f.high_watermark,
                sealed: f.sealed,
                stored_end: f.stored_end,
                batches: f.body.batches(&mut scratch),
            }))
        }
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
pub(crate) fn to_kafka_batches(mut batches: &[u8], out: &mut Vec<u8>) -> Result<(), ConvertError> {
    let mut scratch = Vec::new();
    while !batches.is_empty() {
        let len = BatchView::peek_len(batches)
            .map(|n| n as usize)
            .filter(|n| *n <= batches.len())
            .ok_or(ConvertError::CutShort)?;
        let view = BatchView::validate(&batches[..len])?;
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
                // kelp's own producers send no null keys: an empty key is
                // "no key" to a Kafka reader too.
                key: (!r.key_is_null() && !r.key.is_empty()).then_some(r.key),
                value: (!r.value_is_null()).then_some(r.value),
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
        encode_record_batch(out, &header, &records, Compression::None, &mut scratch)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka batches of `sizes` bytes each, back to back (only the length
    /// field matters here).
    fn batches(sizes: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        for &size in sizes {
            let mut batch = vec![0u8; size];
            let length = (size - kafka::record_batch::BATCH_LENGTH_BASE_BYTES) as i32;
            let at = kafka::record_batch::BATCH_LENGTH_OFFSET;
            batch[at..at + 4].copy_from_slice(&length.to_be_bytes());
            out.extend_from_slice(&batch);
        }
        out
    }

    #[test]
    fn the_budget_keeps_whole_batches_and_at_least_one() {
        let records = batches(&[100, 200, 300]);
        assert_eq!(whole_batches_within(&records, 0), 0);
        assert_eq!(whole_batches_within(&records, 1), 100, "one batch at least");
        assert_eq!(whole_batches_within(&records, 299), 100);
        assert_eq!(whole_batches_within(&records, 300), 300);
        assert_eq!(whole_batches_within(&records, 599), 300);
        assert_eq!(whole_batches_within(&records, 10_000), 600);
        assert_eq!(whole_batches_within(&[], 10), 0);
        // Bytes that are not whole batches are kept as they are.
        assert_eq!(whole_batches_within(&records[..350], 10_000), 350);
        assert_eq!(whole_batches_within(&records[..50], 10), 50);
    }
}
