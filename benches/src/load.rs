//! The load itself: producer connections that pipeline produce requests
//! and time each one to its answer, and consumer connections that fetch a
//! segment from an offset to a target and time each fetch or each batch's
//! trip from publish to delivery.
//!
//! Everything runs as tasks on the caller's (current-thread) tokio runtime.
//! Nothing here allocates per record: batches are built once and re-sent,
//! frames are encoded into reused buffers, and latencies go into HDR
//! histograms. Memory is bounded by `in_flight` answers per connection.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, ensure, Context, Result};
use hdrhistogram::Histogram;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    sync::Semaphore,
};
use wire::{
    message::{produce_frame_head, TopicInfo, FETCHED_PREFIX_BYTES},
    AckMode, BatchHead, DataRequest, FetchFrom, FrameType, Response,
};

use crate::frames::{
    read_exact_waking_late, read_frame, read_frame_header, Dialer, FrameReader, ShardConnection,
};
use crate::workload::Workload;

/// Latencies are recorded in microseconds, from 1 us to one hour, with
/// three significant digits.
const LATENCY_US_MAX: u64 = 3_600_000_000;
const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;
/// How long a consumer's fetch waits at the broker for new data.
const FETCH_WAIT_MS: u32 = 100;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, LATENCY_SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

fn record_latency(histogram: &mut Histogram<u64>, latency: Duration, count: u64) {
    let us = (latency.as_micros() as u64).max(1);
    histogram.saturating_record_n(us, count);
}

/// Counters the progress sampler reads while the load runs.
#[derive(Debug, Default)]
pub struct Progress {
    /// Payload bytes done: answered (produce), delivered (consume).
    pub bytes: AtomicU64,
    pub records: AtomicU64,
}

impl Progress {
    fn add(&self, records: u64, record_bytes: usize) {
        self.records.fetch_add(records, Ordering::Relaxed);
        self.bytes
            .fetch_add(records * record_bytes as u64, Ordering::Relaxed);
    }
}

/// How many batches producers may still send: a count, a deadline, or both.
#[derive(Debug)]
pub struct SendBudget {
    batches_left: Option<AtomicU64>,
    deadline: Option<Instant>,
}

impl SendBudget {
    pub fn new(batches: Option<u64>, deadline: Option<Instant>) -> SendBudget {
        SendBudget {
            batches_left: batches.map(AtomicU64::new),
            deadline,
        }
    }

    /// Takes one batch if any is left.
    fn take(&self) -> bool {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        match &self.batches_left {
            None => true,
            Some(left) => left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok(),
        }
    }
}

/// What one producer connection should do.
pub struct ProducerPlan {
    pub addr: SocketAddr,
    pub topic: Arc<str>,
    /// The segments it writes, in turn.
    pub segments: Vec<u32>,
    /// Records per second for this connection, if paced.
    pub rate: Option<f64>,
    /// Stamp each batch with its send time (`producer_id` = ns since
    /// `epoch`), for end-to-end latency.
    pub stamp_epoch: Option<Instant>,
}

/// What a producer connection did.
pub struct ProducerReport {
    pub batches: u64,
    pub latency: Histogram<u64>,
}

/// Sends batches until the budget runs out, at most `in_flight` unanswered,
/// while answers are read and timed from write to answer.
pub async fn run_producer(
    dialer: Dialer,
    plan: ProducerPlan,
    workload: Arc<Workload>,
    budget: Arc<SendBudget>,
    progress: Arc<Progress>,
) -> Result<ProducerReport> {
    ensure!(!plan.segments.is_empty(), "a producer with no segments");
    let ShardConnection {
        mut read,
        mut write,
        quic,
        ..
    } = dialer.dial(plan.addr).await?;
    let acked = workload.ack != AckMode::None;
    let slots = Semaphore::new(workload.in_flight);
    let sent_at: Mutex<HashMap<u32, Instant>> =
        Mutex::new(HashMap::with_capacity(workload.in_flight));
    let latency = Mutex::new(new_histogram());
    let mut builders = Vec::new();
    if plan.stamp_epoch.is_some() {
        for &segment in &plan.segments {
            builders.push(workload.builder_for(segment)?);
        }
    }

    let send = async {
        let mut frame = Vec::with_capacity(workload.frame_bytes(&plan.topic));
        let start = Instant::now();
        let mut sent = 0u64;
        loop {
            if let Some(rate) = plan.rate {
                let due = start
                    + Duration::from_secs_f64(
                        sent as f64 * f64::from(workload.batch_records) / rate,
                    );
                if due > Instant::now() {
                    tokio::time::sleep_until(due.into()).await;
                }
            }
            if !budget.take() {
                break;
            }
            if acked {
                slots.acquire().await?.forget();
            }
            let turn = (sent % plan.segments.len() as u64) as usize;
            let segment = plan.segments[turn];
            let batch: &[u8] = match plan.stamp_epoch {
                Some(epoch) => {
                    let ns = epoch.elapsed().as_nanos() as u64;
                    builders[turn].finish(ns, 0)
                }
                None => &workload.segment_batches[segment as usize],
            };
            // Request ids wrap after 2^32 batches; at most `in_flight`
            // are outstanding, so they never collide.
            let id = sent as u32;
            // A large batch goes out behind a head whose checksum is folded
            // from the batch's own (built here), neither copied into a frame
            // nor checksummed again; a small one is cheaper to encode whole.
            let stated = BatchHead::stated_checksum(batch);
            match stated {
                Some(crc) => produce_frame_head(
                    &plan.topic,
                    segment,
                    workload.ack,
                    id,
                    batch.len(),
                    crc,
                    &mut frame,
                ),
                None => {
                    frame.clear();
                    DataRequest::Produce {
                        topic: &plan.topic,
                        segment,
                        ack: workload.ack,
                        batch,
                    }
                    .encode(id, &mut frame);
                }
            }
            if acked {
                lock(&sent_at)?.insert(id, Instant::now());
            }
            write.write_all(&frame).await?;
            if stated.is_some() {
                write.write_all(batch).await?;
            }
            sent += 1;
            if !acked {
                progress.add(u64::from(workload.batch_records), workload.record_bytes);
            }
        }
        write.flush().await?;
        if acked {
            // Every slot back means every answer is in.
            let all = u32::try_from(workload.in_flight)?;
            slots.acquire_many(all).await?.forget();
        }
        anyhow::Ok(sent)
    };

    let receive = read_answers(&mut read, &workload, &sent_at, &latency, &slots, &progress);

    let batches = if acked {
        // The reader only ends with an error; the sender ends once every
        // answer is in, with nothing half-read.
        tokio::select! {
            sent = send => sent?,
            failed = receive => {
                failed?;
                bail!("answers ended early")
            }
        }
    } else {
        send.await?
    };
    write.shutdown().await.ok();
    if let Some(connection) = quic {
        if acked {
            connection.close(0u32.into(), b"done");
        } else {
            // The broker closes once it has read the whole stream; closing
            // first could drop frames nothing acknowledged.
            connection.closed().await;
        }
    }
    let latency = std::mem::replace(&mut *lock(&latency)?, new_histogram());
    Ok(ProducerReport { batches, latency })
}

/// Reads produce answers until an error: each must answer a request in
/// `sent_at` with the whole batch; its latency is recorded and its slot
/// given back.
async fn read_answers(
    read: &mut FrameReader,
    workload: &Workload,
    sent_at: &Mutex<HashMap<u32, Instant>>,
    latency: &Mutex<Histogram<u64>>,
    slots: &Semaphore,
    progress: &Progress,
) -> Result<()> {
    let mut payload = Vec::new();
    loop {
        let header = read_frame(read, &mut payload).await?;
        let id = header.request_id;
        let at = lock(sent_at)?
            .remove(&id)
            .ok_or_else(|| anyhow!("answer to unknown request {id}"))?;
        match Response::decode(header.frame_type, &payload)? {
            Response::Produced { record_count, .. } => {
                ensure!(
                    record_count == workload.batch_records,
                    "request {id}: {record_count} records produced, {} sent",
                    workload.batch_records
                );
            }
            Response::Error { code, message } => {
                bail!("request {id}: broker error {code:?}: {message}")
            }
            other => bail!("request {id}: unexpected {:?}", other.frame_type()),
        }
        record_latency(&mut *lock(latency)?, at.elapsed(), 1);
        progress.add(u64::from(workload.batch_records), workload.record_bytes);
        slots.add_permits(1);
    }
}

fn lock<T>(m: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>> {
    m.lock().map_err(|_| anyhow!("a load task panicked"))
}

/// What one consumer connection should do.
pub struct ConsumerPlan {
    pub addr: SocketAddr,
    pub topic: String,
    pub segment: u32,
    pub fetch_bytes_max: u32,
    /// Read until the segment's next offset reaches this; `u64::MAX` until
    /// the producers are done (end-to-end).
    pub target: Arc<AtomicU64>,
    /// Record each batch's publish-to-delivery time from its stamp
    /// (end-to-end) instead of each fetch's round trip.
    pub stamp_epoch: Option<Instant>,
}

pub struct ConsumerReport {
    pub records: u64,
    pub latency: Histogram<u64>,
}

/// Fetches the segment from offset 0 until the target, validating every
/// batch (length, checksum) as a real reader must.
pub async fn run_consumer(
    dialer: Dialer,
    plan: ConsumerPlan,
    record_bytes: usize,
    progress: Arc<Progress>,
) -> Result<ConsumerReport> {
    let ShardConnection {
        mut read,
        mut write,
        quic,
        tcp,
    } = dialer.dial(plan.addr).await?;
    let mut latency = new_histogram();
    let mut frame = Vec::new();
    let mut payload = Vec::new();
    let mut next = 0u64;
    let mut id = 0u32;
    let target = || plan.target.load(Ordering::Acquire);
    // One fetch is always ahead: the next is sent as soon as an answer's
    // fixed part names where it ends, before its batches are read, so the
    // broker prepares one answer while this reader checks the last.
    let mut asked = None;
    while next < target() {
        let sent_at = match asked.take() {
            Some(at) => at,
            None => {
                send_fetch(&mut write, &plan, next, id, &mut frame).await?;
                id = id.wrapping_add(1);
                Instant::now()
            }
        };
        let header = read_frame_header(&mut read).await?;
        payload.resize(header.payload_bytes as usize, 0);
        let prefix_bytes = FETCHED_PREFIX_BYTES.min(payload.len());
        read.read_exact(&mut payload[..prefix_bytes])
            .await
            .context("read fetch answer")?;
        if header.frame_type == FrameType::FetchResponse && prefix_bytes == FETCHED_PREFIX_BYTES {
            // Not verified yet: the frame's check below covers these bytes,
            // so a wrong offset fails the run before anything uses it.
            let ahead = u64::from_le_bytes(payload[12..20].try_into()?);
            if ahead > next && ahead < target() {
                send_fetch(&mut write, &plan, ahead, id, &mut frame).await?;
                id = id.wrapping_add(1);
                asked = Some(Instant::now());
            }
        }
        read_exact_waking_late(&mut read, tcp, &mut payload[prefix_bytes..])
            .await
            .context("read fetch answer")?;
        let verified = Response::decode_verified(&header, &payload)?;
        let fetched = match verified.response {
            Response::Fetched(f) => f,
            Response::Error { code, message } => {
                bail!(
                    "fetch of segment {} at {next}: broker error {code:?}: {message}",
                    plan.segment
                )
            }
            other => bail!("fetch: unexpected {:?}", other.frame_type()),
        };
        ensure!(
            fetched.next_offset >= next,
            "segment {}: fetch at {next} answered next offset {}",
            plan.segment,
            fetched.next_offset
        );
        let delivered_at = plan.stamp_epoch.map(|e| e.elapsed().as_nanos() as u64);
        let mut records = 0u64;
        for view in &verified.batches {
            // Records before the asked offset are skipped, as a reader does.
            let fresh = view
                .next_offset()
                .saturating_sub(next.max(view.base_offset()));
            records += fresh;
            if let Some(now_ns) = delivered_at {
                let trip = Duration::from_nanos(now_ns.saturating_sub(view.producer_id()));
                record_latency(&mut latency, trip, fresh);
            }
        }
        ensure!(
            records == fetched.next_offset - next,
            "segment {}: fetch at {next} carried {records} records, its next offset says {}",
            plan.segment,
            fetched.next_offset - next
        );
        if delivered_at.is_none() && records > 0 {
            record_latency(&mut latency, sent_at.elapsed(), 1);
        }
        next = fetched.next_offset;
        progress.add(records, record_bytes);
    }
    // A fetch sent ahead is answered before the connection closes; reading
    // its answer is not needed (the target is reached).
    write.shutdown().await.ok();
    if let Some(connection) = quic {
        connection.close(0u32.into(), b"done");
    }
    Ok(ConsumerReport {
        records: next,
        latency,
    })
}

async fn send_fetch(
    write: &mut crate::frames::FrameWriter,
    plan: &ConsumerPlan,
    from: u64,
    id: u32,
    frame: &mut Vec<u8>,
) -> Result<()> {
    frame.clear();
    DataRequest::Fetch(wire::FetchRequest {
        topic: plan.topic.clone(),
        segment: plan.segment,
        from: FetchFrom::Offset(from),
        max_bytes: plan.fetch_bytes_max,
        max_wait_ms: FETCH_WAIT_MS,
        checks: wire::FetchChecks::Trust,
        follower: None,
    })
    .encode(id, frame);
    write.write_all(frame).await?;
    Ok(())
}

/// Which shard address serves each segment of `layout`.
pub fn segment_addresses(layout: &TopicInfo, shards: &[SocketAddr]) -> Result<Vec<SocketAddr>> {
    layout
        .segments
        .iter()
        .map(|s| {
            shards
                .get(usize::from(s.shard))
                .copied()
                .with_context(|| format!("segment {} on unknown shard {}", s.id, s.shard))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn budget_by_count_hands_out_exactly_that_many() {
        let budget = SendBudget::new(Some(3), None);
        assert_eq!((0..10).filter(|_| budget.take()).count(), 3);
    }

    #[test]
    fn budget_by_deadline_stops_after_it() {
        let budget = SendBudget::new(None, Some(Instant::now()));
        assert!(!budget.take());
        let open = SendBudget::new(None, Some(Instant::now() + Duration::from_secs(3600)));
        assert!((0..100).all(|_| open.take()));
    }

    #[test]
    fn latency_is_recorded_in_microseconds_at_least_one() {
        let mut h = new_histogram();
        record_latency(&mut h, Duration::from_nanos(10), 1);
        record_latency(&mut h, Duration::from_micros(250), 4);
        assert_eq!(h.len(), 5);
        assert_eq!(h.min(), 1);
        assert!(h.equivalent(h.max(), 250));
    }
}
