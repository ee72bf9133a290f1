//! ListOffsets: timestamp -2 is the earliest offset, -1 the latest (the
//! high watermark), any other the first record whose timestamp is at least
//! it (offset -1 when there is none), answered by a non-waiting read of
//! the segment.

use kafka::api::list_offsets::{
    ListOffsetsPartitionResult, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopicResult,
};
use kafka::error_code as k;
use wire::batch::BatchView;
use wire::message::FetchFrom;

use super::fetch::read_segment;
use super::topics::kafka_error;
use super::Gateway;

pub(crate) const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
/// Kafka's ListOffsets timestamp for the record with the largest timestamp
/// (KIP-734, v7 and later).
const MAX_TIMESTAMP: i64 = -3;

pub(crate) async fn list_offsets(
    gateway: &Gateway,
    request: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let result = match lookup(gateway, &topic.name, p.partition_index, p.timestamp).await {
                Ok((timestamp, offset)) => ListOffsetsPartitionResult {
                    partition_index: p.partition_index,
                    error_code: k::NONE,
                    timestamp,
                    offset,
                    leader_epoch: 0,
                },
                Err(error_code) => ListOffsetsPartitionResult {
                    partition_index: p.partition_index,
                    error_code,
                    timestamp: -1,
                    offset: -1,
                    leader_epoch: -1,
                },
            };
            partitions.push(result);
        }
        topics.push(ListOffsetsTopicResult {
            name: topic.name,
            partitions,
        });
    }
    ListOffsetsResponse {
        throttle_time_ms: 0,
        topics,
    }
}

/// The (timestamp, offset) answer for one partition.
pub(crate) async fn lookup(
    gateway: &Gateway,
    topic: &str,
    index: i32,
    timestamp: i64,
) -> Result<(i64, i64), i16> {
    let segment = gateway.topics.partition(topic, index).await?;
    let from = match timestamp {
        LATEST => FetchFrom::Latest,
        EARLIEST => FetchFrom::Earliest,
        MAX_TIMESTAMP => FetchFrom::MaxTimestamp,
        t if t >= 0 => FetchFrom::Timestamp(t),
        // -4 (latest tiered) and others: not supported.
        _ => return Err(k::UNSUPPORTED_VERSION),
    };
    read_segment(gateway, topic, &segment, from, 1, 0, |fetched| {
        let offset = fetched.start_offset as i64;
        if timestamp < 0 && timestamp != MAX_TIMESTAMP {
            return (-1, offset);
        }
        if fetched.start_offset >= fetched.high_watermark {
            return (-1, -1);
        }
        // The found record's own timestamp, from the batch that holds it.
        let found = BatchView::peek_len(fetched.batches)
            .and_then(|n| fetched.batches.get(..n as usize))
            .and_then(|b| BatchView::validate(b).ok())
            .and_then(|view| {
                view.records()
                    .find(|r| {
                        view.base_offset() + u64::from(r.offset_delta) == fetched.start_offset
                    })
                    .map(|r| r.timestamp_ms)
            });
        (found.unwrap_or(timestamp), offset)
    })
    .await
    .map_err(|e| kafka_error(&e))
}
