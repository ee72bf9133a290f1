//! How fast producers follow a layout change: the milliseconds from the
//! control plane's decision to a new segment's first append, for splits,
//! merges and moves made by hand under a steady keyed load, next to one
//! produce round trip (a record sent and acknowledged at the same ack mode)
//! measured in the same run. On a lone broker with two shards (the
//! embedded control plane places on shards), or with `--brokers N` on a
//! cluster of one `kelp control` and N brokers of two shards each, all on
//! loopback.
//!
//! A segment's `created_ms` is when the control plane committed the change
//! that made it, `first_append_ms` when its owner appended its first record
//! (both wall clocks of this host, in ms). Between the two: the broker
//! refuses writes to the sealed parent naming the successors, opens them,
//! and the producer resends the refused batch there (docs/control-plane.md,
//! "Following a change without asking the control plane"). The load's
//! producer lingers `LINGER_MS` and sends `--rate` records a second in
//! bursts `LOAD_TICK` apart, so the next write after a decision is about
//! that far away at most.
//!
//! `target/release/split_follow [--rounds N] [--ack leader|durable]
//! [--rate RECORDS_PER_S] [--brokers N] [--kelp PATH]`

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::Parser;
use client::{Client, ClientOptions, Producer, ProducerConfig, TopicInfo, Transport};
use kelp_benches::bench_args::AckArg;
use kelp_benches::broker_process::{kelp_executable, BrokerGroup, BrokerSettings, TempDir};

const TOPIC: &str = "bench/split-follow";
/// Keys of the load, sent in turn so every key range sees records.
const KEYS: u64 = 1024;
/// Bytes of each record's value.
const VALUE_BYTES: usize = 100;
/// The load sends its records in bursts this far apart.
const LOAD_TICK: Duration = Duration::from_millis(1);
/// The load's producer sends a batch this long after its first record.
const LINGER_MS: u64 = 1;
/// Produce round trips measured for the baseline, before the load starts,
/// each `ROUND_TRIP_PAUSE` after the last: one record on a quiet segment
/// (a closed loop of durable writes is paced by the broker's durable
/// linger instead, docs/broker.md).
const ROUND_TRIPS: usize = 100;
const ROUND_TRIP_PAUSE: Duration = Duration::from_millis(20);
/// Between describes while waiting for a new segment's first append.
const POLL_INTERVAL: Duration = Duration::from_millis(5);
/// A new segment must take its first record within this.
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(10);
/// The broker's buffer, and its flush age (its default).
const BUFFER_BYTES: u64 = 8 << 20;
const FLUSH_AGE_MS: u64 = 1000;
/// How long the control plane and the brokers may take to start and
/// register.
const START_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Parser, Debug)]
struct Args {
    /// Rounds of split, merge and move.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,
    /// When the broker acknowledges the load's batches: leader or
    /// durable (a round trip needs an ack).
    #[arg(long, value_enum, default_value_t = AckArg::Durable)]
    ack: AckArg,
    /// Records per second of the load.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1000..=1_000_000))]
    rate: u64,
    /// 1: a lone broker; more: a `kelp control` and this many brokers.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    brokers: u32,
    /// The `kelp` executable whose `serve` is measured; by default the one
    /// beside this program.
    #[arg(long)]
    kelp: Option<PathBuf>,
}

/// The change a round makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Split,
    Merge,
    Move,
}

impl Change {
    const ALL: [Change; 3] = [Change::Split, Change::Merge, Change::Move];

    fn name(self) -> &'static str {
        match self {
            Change::Split => "split",
            Change::Merge => "merge",
            Change::Move => "move",
        }
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        args.ack != AckArg::None,
        "--ack none has no round trip to measure; use leader or durable"
    );
    let kelp = kelp_executable(args.kelp.as_deref())?;
    let data = TempDir::create(None, "kelp-split-follow")?;
    let settings = BrokerSettings {
        shards: 2,
        buffer_bytes: BUFFER_BYTES,
        buffer_bytes_max: None,
        flush_age_ms: FLUSH_AGE_MS,
        drop_flushed_pages: false,
        filer: None,
    };
    let cluster = BrokerGroup::start(&kelp, args.brokers as usize, &settings, data.path())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let measured = runtime.block_on(measure(&args, &cluster.bootstrap()));
    cluster.stop()?;
    let (round_trip_ms, follow) = measured?;

    println!(
        "split_follow: {}, ack {}, {} records/s of {VALUE_BYTES} B over {KEYS} keys, {} rounds",
        cluster_name(args.brokers),
        args.ack.name(),
        args.rate,
        args.rounds
    );
    println!(
        "baseline: one produce round trip (send + ack, ack {}, a quiet segment): p50 {round_trip_ms:.2} ms",
        args.ack.name()
    );
    for change in Change::ALL {
        let mut ms: Vec<u64> = follow
            .iter()
            .filter(|(c, _)| *c == change)
            .map(|(_, ms)| *ms)
            .collect();
        ms.sort_unstable();
        let p50 = ms[ms.len() / 2];
        println!(
            "{:<5} decision to first append: p50 {p50} ms, min {} ms, max {} ms over {} segments; p50 / round trip {:.1}",
            change.name(),
            ms[0],
            ms[ms.len() - 1],
            ms.len(),
            p50 as f64 / round_trip_ms.max(f64::EPSILON)
        );
    }
    Ok(())
}

/// The baseline round trip's p50 in ms, then each new segment's change and
/// its decision-to-first-append time.
async fn measure(args: &Args, brokers: &str) -> Result<(f64, Vec<(Change, u64)>)> {
    let client = Client::connect(brokers, Transport::Tcp, ClientOptions::default()).await?;
    let deadline = Instant::now() + START_TIMEOUT;
    while client.list_brokers().await?.len() < args.brokers as usize {
        ensure!(
            Instant::now() < deadline,
            "{} brokers did not register within {START_TIMEOUT:?}",
            args.brokers
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    // Each change's answer is the layout the next one starts from.
    let mut layout = client.create_topic(TOPIC, 1).await?;
    let config = ProducerConfig {
        ack: args.ack.mode(),
        linger_ms: LINGER_MS,
        ..ProducerConfig::default()
    };
    let producer = Arc::new(client.producer(TOPIC, config).await?);
    let round_trip_ms = round_trip_p50_ms(&producer).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(steady_load(producer.clone(), args.rate, stop.clone()));
    let mut follow = Vec::new();
    let changed = async {
        for _ in 0..args.rounds {
            for change in Change::ALL {
                let open = open_ids(&layout);
                layout = match (change, open.as_slice()) {
                    (Change::Split, [one]) => client.split_segment(TOPIC, *one, 2).await?,
                    (Change::Merge, [a, b]) => client.merge_segments(TOPIC, *a, *b).await?,
                    (Change::Move, [one]) => client.move_segment(TOPIC, *one, None).await?,
                    _ => bail!("{} with open segments {open:?}", change.name()),
                };
                let new: Vec<u32> = open_ids(&layout)
                    .into_iter()
                    .filter(|id| !open.contains(id))
                    .collect();
                for ms in first_appends(&client, &new).await? {
                    follow.push((change, ms));
                }
            }
        }
        anyhow::Ok(())
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    let sent = load.await.context("the load task")??;
    changed?;
    producer.flush().await.context("the load's last records")?;
    ensure!(
        producer.acked_records() == sent + ROUND_TRIPS as u64,
        "{} records acknowledged of {}",
        producer.acked_records(),
        sent + ROUND_TRIPS as u64
    );
    client.close().await;
    Ok((round_trip_ms, follow))
}

/// One record sent and flushed at a time, `ROUND_TRIPS` times with a pause
/// between: the p50 in ms.
async fn round_trip_p50_ms(producer: &Producer) -> Result<f64> {
    let value = [b'v'; VALUE_BYTES];
    let mut us = Vec::with_capacity(ROUND_TRIPS);
    for i in 0..ROUND_TRIPS as u64 {
        let started = Instant::now();
        producer.send(&key(i), &value, &[]).await?;
        producer.flush().await?;
        us.push(started.elapsed().as_micros() as u64);
        tokio::time::sleep(ROUND_TRIP_PAUSE).await;
    }
    us.sort_unstable();
    Ok(us[us.len() / 2] as f64 / 1000.0)
}

/// Sends `rate` records a second, a burst each `LOAD_TICK`, keys in turn,
/// until `stop`; returns how many it sent.
async fn steady_load(producer: Arc<Producer>, rate: u64, stop: Arc<AtomicBool>) -> Result<u64> {
    let value = [b'v'; VALUE_BYTES];
    let started = Instant::now();
    let mut sent = 0u64;
    let mut tick = tokio::time::interval(LOAD_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let due = (started.elapsed().as_micros() as u64).saturating_mul(rate) / 1_000_000;
        while sent < due {
            producer.send(&key(sent), &value, &[]).await?;
            sent += 1;
        }
    }
    Ok(sent)
}

/// Waits until each of `segments` has appended its first record; the ms
/// from its creation to that append, one per segment.
async fn first_appends(client: &Client, segments: &[u32]) -> Result<Vec<u64>> {
    let deadline = Instant::now() + FOLLOW_TIMEOUT;
    loop {
        let layout = client.describe_topic(TOPIC).await?;
        let firsts: Option<Vec<u64>> = segments
            .iter()
            .map(|id| {
                let segment = layout.segments.iter().find(|s| s.id == *id)?;
                let first = segment.first_append_ms?;
                Some(first.saturating_sub(segment.created_ms))
            })
            .collect();
        if let Some(firsts) = firsts {
            return Ok(firsts);
        }
        ensure!(
            Instant::now() < deadline,
            "segments {segments:?} took no record within {FOLLOW_TIMEOUT:?}: {layout:?}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

fn open_ids(layout: &TopicInfo) -> Vec<u32> {
    layout
        .segments
        .iter()
        .filter(|s| !s.sealed)
        .map(|s| s.id)
        .collect()
}

/// The key of the `i`th record: `KEYS` keys in turn.
fn key(i: u64) -> [u8; 8] {
    (i % KEYS).to_be_bytes()
}

fn cluster_name(brokers: u32) -> String {
    match brokers {
        1 => "lone broker, 2 shards".into(),
        n => format!("kelp control and {n} brokers of 2 shards, unpinned"),
    }
}
