//! A shard's counters and latency histograms, for the metrics page
//! (`admin_http`, docs/operations.md).
//!
//! Each shard owns one [`ShardMetrics`]; only its thread adds to it, with a
//! plain load and store (no locked instruction, no cache line shared with
//! another core's writes), and the admin thread reads it now and then. A
//! count is never lost to a race because no second thread writes; a reader
//! may see one figure a moment older than another, which a scrape
//! tolerates. Nothing here allocates once made.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use wire::AckMode;

use crate::metrics_page::HistogramSnapshot;

/// A count or a level that one thread changes and any thread may read.
#[derive(Debug, Default)]
pub(crate) struct Tally(AtomicU64);

impl Tally {
    /// Add `n`; only the owning thread calls this.
    pub(crate) fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// Set a level; only the owning thread calls this.
    pub(crate) fn set(&self, n: u64) {
        self.0.store(n, Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Upper bounds of the latency buckets, in microseconds: from 25 µs (a
/// leader ack on loopback) to 10 s (a durable ack behind a slow S3). The
/// last bucket (`+Inf`) takes the rest.
pub(crate) const LATENCY_BUCKETS_US: [u64; 18] = [
    25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// A histogram of durations over [`LATENCY_BUCKETS_US`], one thread
/// observing. Bucket counts are kept apart (not cumulative); the page adds
/// them up.
#[derive(Debug, Default)]
pub(crate) struct Latency {
    /// One count per bucket, then the `+Inf` bucket.
    buckets: [Tally; LATENCY_BUCKETS_US.len() + 1],
    sum_ns: Tally,
}

impl Latency {
    pub(crate) fn observe(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket = LATENCY_BUCKETS_US.partition_point(|&bound| bound < us);
        self.buckets[bucket].add(1);
        self.sum_ns
            .add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
    }

    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        let buckets: Vec<(f64, u64)> = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let bound = LATENCY_BUCKETS_US
                    .get(i)
                    .map_or(f64::INFINITY, |&us| us as f64 / 1e6);
                (bound, b.get())
            })
            .collect();
        HistogramSnapshot {
            sum_seconds: self.sum_ns.get() as f64 / 1e9,
            // The buckets' total: a count kept apart, read a moment later,
            // could disagree with them, and parsers check that it does not.
            count: buckets.iter().map(|(_, n)| n).sum(),
            buckets,
        }
    }
}

/// How records reach or leave a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Tcp,
    Quic,
    /// Through the Kafka gateway's thread.
    Kafka,
}

impl Transport {
    pub(crate) const ALL: [Transport; 3] = [Transport::Tcp, Transport::Quic, Transport::Kafka];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Quic => "quic",
            Transport::Kafka => "kafka",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The ack modes a produce latency is kept for.
pub(crate) const ACK_MODES: [AckMode; 4] = [
    AckMode::None,
    AckMode::Leader,
    AckMode::All,
    AckMode::Durable,
];

pub(crate) fn ack_label(ack: AckMode) -> &'static str {
    match ack {
        AckMode::None => "none",
        AckMode::Leader => "leader",
        AckMode::All => "all",
        AckMode::Durable => "durable",
    }
}

fn ack_index(ack: AckMode) -> usize {
    match ack {
        AckMode::None => 0,
        AckMode::Leader => 1,
        AckMode::All => 2,
        AckMode::Durable => 3,
    }
}

/// Why a connection was turned away at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The shard holds `connections_per_shard_max` connections.
    ConnectionLimit,
    /// Its address holds `connections_per_ip_max` connections.
    AddressLimit,
    /// No room in the shard's receive budget for its window (QUIC).
    ReceiveBudget,
    /// The broker is stopping.
    Stopping,
}

impl Refusal {
    pub(crate) const ALL: [Refusal; 4] = [
        Refusal::ConnectionLimit,
        Refusal::AddressLimit,
        Refusal::ReceiveBudget,
        Refusal::Stopping,
    ];

    /// What a log line says of it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Refusal::ConnectionLimit => "connection limit",
            Refusal::AddressLimit => "connection limit for its address",
            Refusal::ReceiveBudget => "no room in the shard's receive budget",
            Refusal::Stopping => "the broker is stopping",
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Refusal::ConnectionLimit => "connection_limit",
            Refusal::AddressLimit => "address_limit",
            Refusal::ReceiveBudget => "receive_budget",
            Refusal::Stopping => "stopping",
        }
    }
}

/// Traffic of one transport.
#[derive(Debug, Default)]
pub(crate) struct Traffic {
    /// Records appended, and their batches' bytes.
    pub(crate) records_in: Tally,
    pub(crate) bytes_in: Tally,
    /// Offsets a fetch moved its reader past, and the bytes of the batches
    /// sent.
    pub(crate) records_out: Tally,
    pub(crate) bytes_out: Tally,
    /// The shard's own connections of this transport (the Kafka port's are
    /// the gateway thread's, in its own [`Connections`]).
    pub(crate) connections: Connections,
}

/// Connections of one port: open now, and refused at their start; on the
/// Kafka port also its requests refused by authentication or
/// authorization and its produce requests held to a quota (the native
/// ports count those per shard, in [`ShardMetrics`]).
#[derive(Debug, Default)]
pub(crate) struct Connections {
    /// Open as of the owner's last count (a shard's tick or turn).
    pub(crate) open: Tally,
    refused: [Tally; Refusal::ALL.len()],
    denied: [Tally; auth::DenialReason::ALL.len()],
    pub(crate) throttled: Tally,
    pub(crate) throttled_ms: Tally,
}

impl Connections {
    pub(crate) fn refused(&self, why: Refusal) -> &Tally {
        &self.refused[why as usize]
    }

    pub(crate) fn denied(&self, why: auth::DenialReason) -> &Tally {
        &self.denied[why as usize]
    }
}

/// One shard's figures.
#[derive(Debug, Default)]
pub(crate) struct ShardMetrics {
    traffic: [Traffic; Transport::ALL.len()],
    /// From a produce's arrival to its ack, by ack mode (`none`: to its
    /// append).
    produce: [Latency; ACK_MODES.len()],
    /// Produce requests refused (any error answer).
    pub(crate) produce_errors: Tally,
    /// Idempotent producers' resends answered with the offsets their batch
    /// already had (not stored again).
    pub(crate) resends_found: Tally,
    /// Records this shard copied as a follower of segments other brokers
    /// own.
    pub(crate) replica_records: Tally,
    /// From a fetch's arrival to its answer, for fetches answered without
    /// waiting for new records (a long poll's wait says nothing of the
    /// broker's speed).
    pub(crate) fetch: Latency,
    /// Chunks stored in the filer, their bytes, the time each store took,
    /// and stores that failed (each attempt).
    pub(crate) flushes: Tally,
    pub(crate) flushed_bytes: Tally,
    pub(crate) flush: Latency,
    pub(crate) flush_errors: Tally,
    /// Records a returning owner held past the seal point the control
    /// plane fenced its segment at while it was away, dropped; and those
    /// a restarted broker found in buffers of segments sealed meanwhile.
    pub(crate) fenced_records: Tally,
    /// Time a job waited for and ran on the shard's filer lanes.
    pub(crate) filer_upload: Latency,
    pub(crate) filer_read: Latency,
    /// Bytes of frames held against the shard's receive budget as of its
    /// last tick, and the budget.
    pub(crate) receive_bytes: Tally,
    pub(crate) receive_bytes_max: Tally,
    /// Bytes appended to the shard's segments and not yet in the filer
    /// (active and sealed buffers), as of the shard's last tick.
    pub(crate) unflushed_bytes: Tally,
    /// Requests refused by who sent them (`--auth`), by reason.
    denied: [Tally; auth::DenialReason::ALL.len()],
    /// Produce requests held back by their user's byte-rate quota, and
    /// the milliseconds they were held.
    pub(crate) throttled: Tally,
    pub(crate) throttled_ms: Tally,
}

impl ShardMetrics {
    pub(crate) fn traffic(&self, transport: Transport) -> &Traffic {
        &self.traffic[transport.index()]
    }

    pub(crate) fn produce(&self, ack: AckMode) -> &Latency {
        &self.produce[ack_index(ack)]
    }

    pub(crate) fn denied(&self, why: auth::DenialReason) -> &Tally {
        &self.denied[why as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = Latency::default();
        h.observe(Duration::from_micros(25)); // at a bound: that bucket
        h.observe(Duration::from_micros(26));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60)); // past the last bound: +Inf
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets.len(), LATENCY_BUCKETS_US.len() + 1);
        assert_eq!(s.buckets[0], (25e-6, 1));
        assert_eq!(s.buckets[1], (50e-6, 1));
        // 3 ms is under the 5 ms bound, not the 2.5 ms one.
        assert_eq!(s.buckets[6], (2.5e-3, 0));
        assert_eq!(s.buckets[7], (5e-3, 1));
        assert_eq!(s.buckets[LATENCY_BUCKETS_US.len() - 1], (10.0, 0));
        assert_eq!(s.buckets[LATENCY_BUCKETS_US.len()].1, 1);
        assert!(s.buckets[LATENCY_BUCKETS_US.len()].0.is_infinite());
        let sum = 25e-6 + 26e-6 + 3e-3 + 60.0;
        assert!((s.sum_seconds - sum).abs() < 1e-9, "{}", s.sum_seconds);
    }

    #[test]
    fn a_tally_adds_up_and_a_level_is_set() {
        let t = Tally::default();
        t.add(5);
        t.add(2);
        assert_eq!(t.get(), 7);
        t.set(3);
        assert_eq!(t.get(), 3);
    }
}
