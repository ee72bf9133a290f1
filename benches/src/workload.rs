//! What a benchmark sends: batches built once per segment, each record's
//! key chosen so it hashes into that segment, re-sent as they are (the
//! broker assigns offsets), so the load generator spends its CPU on the
//! connection and not on building records.
//!
//! "Payload" is record values: `record_bytes` per record; each record also
//! carries an 8-byte key. MB and GB are 10^6 and 10^9 payload bytes.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Result};
use wire::{message::SegmentInfo, AckMode, BatchBuilder, DataRequest};

/// Every record's key: a u64 that hashes into its segment.
pub const KEY_BYTES: usize = 8;

/// The sizes every phase of one benchmark run uses.
#[derive(Debug)]
pub struct Workload {
    pub record_bytes: usize,
    pub batch_records: u32,
    pub ack: AckMode,
    /// Produce requests outstanding per connection.
    pub in_flight: usize,
    /// One finished batch per segment, indexed by segment id.
    pub segment_batches: Vec<Vec<u8>>,
    /// The key-hash range of each segment, to build more batches like them.
    pub segment_ranges: Vec<(u32, u64)>,
}

impl Workload {
    pub fn new(
        segments: &[SegmentInfo],
        record_bytes: usize,
        batch_records: u32,
        ack: AckMode,
        in_flight: usize,
    ) -> Result<Workload> {
        let mut segment_batches = Vec::with_capacity(segments.len());
        let mut segment_ranges = Vec::with_capacity(segments.len());
        for (index, segment) in segments.iter().enumerate() {
            if segment.id as usize != index {
                return Err(anyhow!("segment ids are not 0..{}", segments.len()));
            }
            let mut builder =
                batch_builder(segment.start, segment.end, batch_records, record_bytes)?;
            segment_batches.push(builder.finish(0, 0).to_vec());
            segment_ranges.push((segment.start, segment.end));
        }
        Ok(Workload {
            record_bytes,
            batch_records,
            ack,
            in_flight,
            segment_batches,
            segment_ranges,
        })
    }

    pub fn batch_payload_bytes(&self) -> u64 {
        u64::from(self.batch_records) * self.record_bytes as u64
    }

    /// Bytes of one produce frame naming `topic`.
    pub fn frame_bytes(&self, topic: &str) -> usize {
        let mut frame = Vec::new();
        DataRequest::Produce {
            topic,
            segment: 0,
            ack: self.ack,
            batch: &self.segment_batches[0],
        }
        .encode(0, &mut frame);
        frame.len()
    }

    /// A builder holding segment `segment`'s records, for a producer that
    /// stamps each send (`finish(send_time, 0)` rewrites only the header
    /// and checksum).
    pub fn builder_for(&self, segment: u32) -> Result<BatchBuilder> {
        let (start, end) = self.segment_ranges[segment as usize];
        batch_builder(start, end, self.batch_records, self.record_bytes)
    }
}

/// One batch of `records` records whose keys hash into `[start, end)`.
pub fn batch_builder(
    start: u32,
    end: u64,
    records: u32,
    record_bytes: usize,
) -> Result<BatchBuilder> {
    let value = vec![0x6Bu8; record_bytes];
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut builder = BatchBuilder::with_capacity(
        records as usize * BatchBuilder::record_bytes(&[0; KEY_BYTES], &value, &[]),
    );
    let mut candidate = 0u64;
    while builder.len() < records {
        let key = candidate.to_le_bytes();
        candidate += 1;
        let hash = u64::from(wire::key_hash(&key));
        if hash < u64::from(start) || hash >= end {
            continue;
        }
        builder
            .push(now_ms, &key, &value, &[])
            .map_err(|e| anyhow!("batch of {records} records of {record_bytes} bytes: {e}"))?;
    }
    Ok(builder)
}
