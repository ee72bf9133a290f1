//! What waiting for a follower costs: ack `all` against ack `leader` on a
//! topic whose segments each have an owner and one follower on the other
//! broker (replicas 2), throughput and latency, measured in turns in the
//! same run on a cluster of one `kelp control` and two brokers of one
//! shard each, all on loopback (issue 19, item 7: `all` at 0.7x `leader`'s
//! throughput or better, and its p99 under 2 ms at 10,000 records/s).
//!
//! Each round measures, for `leader` then `all`:
//! - throughput: a closed loop of the client's producer (batches up to
//!   `BATCH_BYTES_MAX`, lingering `LINGER_MS`, `IN_FLIGHT_BATCHES_MAX`
//!   batches unanswered) sending records of `--value-bytes` over `KEYS`
//!   keys for `--seconds`: the records acknowledged by then over the time,
//!   and the CPU the brokers and this program used meanwhile;
//! - latency: `--rate` records a second paced in batches of
//!   `--batch-records`, one connection per broker writing the segments it
//!   owns (the load generator of `kelp bench`, `kelp_benches::load`), for
//!   `--seconds`: each batch timed from its write to its answer. The
//!   client's producer tells no batch's answer time, hence the raw
//!   connections here.
//!
//! The baseline the repository's benchmarks are compared with, measured
//! in the same run, is `leader` itself: every `all` figure is printed next
//! to the `leader` figure of its round as a ratio, and nothing else is
//! needed, since both go through the same brokers, topic and load and
//! differ only in the owner waiting for its follower.
//!
//! Under `all` the owner answers a batch once every in-sync follower's
//! copy reaches it: the follower long-polls the owner with a `Fetch` from
//! the offset it holds (engine/src/replica.rs), the owner answers the
//! fetch with the new batch, the follower appends it and its next fetch
//! tells the owner its new offset, which lets the produce answer go
//! (engine/src/segment/mod.rs `wait_replicated`).
//!
//! `target/release/replicated_ack [--rounds N] [--seconds S]
//! [--rate RECORDS_PER_S] [--value-bytes B] [--batch-records N]
//! [--segments N] [--kelp PATH]`

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::Parser;
use client::{Client, ClientOptions, ProducerConfig, SegmentInfo, TopicInfo, Transport};
use hdrhistogram::Histogram;
use kelp_benches::broker_process::{
    kelp_executable, BrokerGroup, BrokerSettings, ProcessStats, TempDir,
};
use kelp_benches::frames::Dialer;
use kelp_benches::load::{new_histogram, run_producer, ProducerPlan, Progress, SendBudget};
use kelp_benches::workload::Workload;
use tokio::task::JoinSet;
use wire::AckMode;

const TOPIC: &str = "bench/replicated-ack";
/// Brokers of the cluster, and copies of each segment (owner + follower).
const BROKERS: usize = 2;
const REPLICAS: u8 = 2;
/// Keys of the throughput load, sent in turn so every segment sees records.
const KEYS: u64 = 1024;
/// The throughput producer: a segment's batch goes once it holds this
/// many bytes, or `LINGER_MS` after its first record; `send` waits while
/// `IN_FLIGHT_BATCHES_MAX` batches are unanswered.
const BATCH_BYTES_MAX: usize = 128 << 10;
const LINGER_MS: u64 = 1;
const IN_FLIGHT_BATCHES_MAX: usize = 64;
/// A throughput phase sends at most this many records a second of its
/// time (far above what two cores reach), so a phase is bounded in count
/// as well as in time.
const THROUGHPUT_RECORDS_PER_S_MAX: u64 = 5_000_000;
/// Between looks at the clock in the throughput loop, records.
const CLOCK_CHECK_RECORDS: u64 = 256;
/// Batches unanswered per connection in a latency phase: far more than a
/// paced rate keeps in flight, so pacing and not this bounds the sends.
const LATENCY_IN_FLIGHT: usize = 32;
/// Untimed throughput load with ack `all` before the first round, so
/// connections, buffers and the followers' fetch loops are warm.
const WARM_UP: Duration = Duration::from_secs(1);
/// A phase must finish (its last answers in) this long after its time.
const PHASE_GRACE: Duration = Duration::from_secs(60);
/// The broker's buffer, and its flush age (its default).
const BUFFER_BYTES: u64 = 8 << 20;
const FLUSH_AGE_MS: u64 = 1000;
/// How long the control plane and the brokers may take to start and
/// register, and the followers to be placed and in sync.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Between polls while waiting for the cluster.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// The targets: `all` throughput at least this fraction of
/// `leader`'s, and `all` p99 under this many microseconds.
const THROUGHPUT_RATIO_TARGET: f64 = 0.7;
const P99_US_TARGET: u64 = 2_000;

#[derive(Parser, Debug)]
struct Args {
    /// Rounds of leader and all, alternated.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// Seconds of each phase (throughput and latency, per ack mode).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=60))]
    seconds: u64,
    /// Records per second of the latency phases.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
    rate: u64,
    /// Bytes of each record's value (an 8-byte key comes on top).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    value_bytes: u64,
    /// Records per batch of the latency phases.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch_records: u32,
    /// Segments of the topic, shared out between the two brokers.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    segments: u32,
    /// The `kelp` executable whose `control` and `serve` are measured; by
    /// default the one beside this program.
    #[arg(long)]
    kelp: Option<PathBuf>,
}

/// The two ack modes compared, in the order each round runs them.
const MODES: [AckMode; 2] = [AckMode::Leader, AckMode::All];

fn mode_name(ack: AckMode) -> &'static str {
    match ack {
        AckMode::None => "none",
        AckMode::Leader => "leader",
        AckMode::Durable => "durable",
        AckMode::All => "all",
    }
}

/// One throughput phase.
#[derive(Debug, Clone, Copy)]
struct Throughput {
    records_per_s: f64,
    mb_per_s: f64,
    /// CPU used over the phase's time, in cores: both brokers together,
    /// and this program (the load).
    brokers_cores: f64,
    load_cores: f64,
}

/// One latency phase: per-batch write-to-answer times, microseconds.
#[derive(Debug, Clone, Copy)]
struct Latency {
    records_per_s: f64,
    batches: u64,
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
}

/// A round's figures, `leader` first.
#[derive(Debug, Clone, Copy)]
struct Round {
    throughput: [Throughput; 2],
    latency: [Latency; 2],
}

fn main() -> Result<()> {
    let args = Args::parse();
    let kelp = kelp_executable(args.kelp.as_deref())?;
    let data = TempDir::create(None, "kelp-replicated-ack")?;
    let settings = BrokerSettings {
        shards: 1,
        buffer_bytes: BUFFER_BYTES,
        buffer_bytes_max: None,
        flush_age_ms: FLUSH_AGE_MS,
        drop_flushed_pages: false,
        filer: None,
    };
    let cluster = BrokerGroup::start(&kelp, BROKERS, &settings, data.path())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let measured = runtime.block_on(measure(&args, &cluster));
    cluster.stop()?;
    let (layout, rounds) = measured?;
    print_results(&args, &layout, &rounds);
    Ok(())
}

/// Starts the topic, waits for its followers, warms up, then runs the
/// rounds: the layout measured, and each round's figures.
async fn measure(args: &Args, cluster: &BrokerGroup) -> Result<(TopicInfo, Vec<Round>)> {
    let client = Client::connect(
        &cluster.bootstrap(),
        Transport::Tcp,
        ClientOptions::default(),
    )
    .await?;
    let deadline = Instant::now() + START_TIMEOUT;
    while client.list_brokers().await?.len() < BROKERS {
        ensure!(
            Instant::now() < deadline,
            "{BROKERS} brokers did not register within {START_TIMEOUT:?}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    client
        .create_topic_with_replicas(TOPIC, args.segments, REPLICAS)
        .await
        .context("create the topic with two replicas")?;
    let layout = wait_for_followers(&client, deadline).await?;

    throughput_phase(&client, cluster, args, AckMode::All, WARM_UP)
        .await
        .context("warming up with ack all")?;
    let phase = Duration::from_secs(args.seconds);
    let mut rounds = Vec::new();
    for round in 1..=args.rounds {
        let mut throughput = Vec::new();
        for ack in MODES {
            let figure = throughput_phase(&client, cluster, args, ack, phase)
                .await
                .with_context(|| format!("round {round}: throughput, ack {}", mode_name(ack)))?;
            throughput.push(figure);
        }
        let mut latency = Vec::new();
        for ack in MODES {
            let figure = latency_phase(&client, args, &layout, ack)
                .await
                .with_context(|| format!("round {round}: latency, ack {}", mode_name(ack)))?;
            latency.push(figure);
        }
        let (Ok(throughput), Ok(latency)) = (throughput.try_into(), latency.try_into()) else {
            bail!("round {round}: not one figure per ack mode");
        };
        eprintln!("round {round} of {} measured", args.rounds);
        rounds.push(Round {
            throughput,
            latency,
        });
    }
    client.close().await;
    Ok((layout, rounds))
}

/// Waits until every open segment has a follower that is in sync: the
/// layout then.
async fn wait_for_followers(client: &Client, deadline: Instant) -> Result<TopicInfo> {
    loop {
        let layout = client.describe_topic(TOPIC).await?;
        let followed = |s: &SegmentInfo| {
            s.sealed
                || (s.followers.len() + 1 == usize::from(REPLICAS)
                    && s.followers.iter().all(|f| f.in_sync))
        };
        if layout.segments.iter().all(followed) {
            return Ok(layout);
        }
        ensure!(
            Instant::now() < deadline,
            "the followers were not all in sync within {START_TIMEOUT:?}: {layout:?}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// A closed loop of the client's producer for `time`: records
/// acknowledged by then, over that time. Every record sent must be
/// acknowledged once the phase ends.
async fn throughput_phase(
    client: &Client,
    cluster: &BrokerGroup,
    args: &Args,
    ack: AckMode,
    time: Duration,
) -> Result<Throughput> {
    let config = ProducerConfig {
        ack,
        batch_bytes_max: BATCH_BYTES_MAX,
        linger_ms: LINGER_MS,
        in_flight_batches_max: IN_FLIGHT_BATCHES_MAX,
        ..ProducerConfig::default()
    };
    let producer = client.producer(TOPIC, config).await?;
    let value = vec![b'v'; usize::try_from(args.value_bytes)?];
    let records_max = THROUGHPUT_RECORDS_PER_S_MAX.saturating_mul(time.as_secs().max(1));
    let cpu = CpuClocks::start(cluster)?;
    let started = Instant::now();
    let deadline = started + time;
    let mut sent = 0u64;
    let sending = async {
        while sent < records_max {
            if sent % CLOCK_CHECK_RECORDS == 0 && Instant::now() >= deadline {
                break;
            }
            producer.send(&key(sent), &value, &[]).await?;
            sent += 1;
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(time + PHASE_GRACE, sending)
        .await
        .context("sending did not end in time")??;
    let elapsed = started.elapsed();
    let acked = producer.acked_records();
    let (brokers_cores, load_cores) = cpu.cores(elapsed)?;
    tokio::time::timeout(PHASE_GRACE, producer.flush())
        .await
        .context("the last answers did not come in time")??;
    ensure!(
        producer.acked_records() == sent,
        "{} records acknowledged of {sent}",
        producer.acked_records()
    );
    let secs = elapsed.as_secs_f64();
    let records_per_s = acked as f64 / secs;
    Ok(Throughput {
        records_per_s,
        mb_per_s: records_per_s * args.value_bytes as f64 / 1e6,
        brokers_cores,
        load_cores,
    })
}

/// `--rate` records a second in batches of `--batch-records`, one
/// connection per owning broker, for `--seconds`: each batch's time from
/// its write to its answer.
async fn latency_phase(
    client: &Client,
    args: &Args,
    layout: &TopicInfo,
    ack: AckMode,
) -> Result<Latency> {
    let workload = Arc::new(Workload::new(
        &layout.segments,
        usize::try_from(args.value_bytes)?,
        args.batch_records,
        ack,
        LATENCY_IN_FLIGHT,
    )?);
    let mut groups: Vec<(SocketAddr, Vec<u32>)> = Vec::new();
    for segment in layout.segments.iter().filter(|s| !s.sealed) {
        let addr = owner_address(client, segment)?;
        match groups.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, ids)) => ids.push(segment.id),
            None => groups.push((addr, vec![segment.id])),
        }
    }
    let open: usize = groups.iter().map(|(_, ids)| ids.len()).sum();
    let time = Duration::from_secs(args.seconds);
    // Twice the batches the rate asks for: a bound, never the limit.
    let batches_max = 2 * (args.rate * args.seconds).div_ceil(u64::from(args.batch_records));
    let started = Instant::now();
    let budget = Arc::new(SendBudget::new(Some(batches_max), Some(started + time)));
    let mut tasks = JoinSet::new();
    for (addr, segments) in groups {
        let plan = ProducerPlan {
            addr,
            topic: TOPIC.into(),
            rate: Some(args.rate as f64 * segments.len() as f64 / open as f64),
            segments,
            stamp_epoch: None,
        };
        tasks.spawn(run_producer(
            Dialer::Tcp,
            plan,
            workload.clone(),
            budget.clone(),
            Arc::new(Progress::default()),
        ));
    }
    let mut latency: Histogram<u64> = new_histogram();
    let mut batches = 0u64;
    let joined = async {
        while let Some(joined) = tasks.join_next().await {
            let report = joined.context("a latency producer task")??;
            batches += report.batches;
            latency.add(&report.latency)?;
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(time + PHASE_GRACE, joined)
        .await
        .context("the latency producers did not end in time")??;
    let elapsed = started.elapsed();
    ensure!(
        latency.len() == batches,
        "{} answers timed of {batches} batches",
        latency.len()
    );
    Ok(Latency {
        records_per_s: (batches * u64::from(args.batch_records)) as f64 / elapsed.as_secs_f64(),
        batches,
        p50_us: latency.value_at_quantile(0.5),
        p99_us: latency.value_at_quantile(0.99),
        p999_us: latency.value_at_quantile(0.999),
        max_us: latency.max(),
    })
}

/// The TCP address of the shard that owns `segment`: the one the layout
/// names, else (none named) that shard of the broker asked.
fn owner_address(client: &Client, segment: &SegmentInfo) -> Result<SocketAddr> {
    let Some(address) = &segment.address else {
        return client
            .shard_addresses()
            .get(usize::from(segment.shard))
            .copied()
            .with_context(|| format!("segment {} on unknown shard {}", segment.id, segment.shard));
    };
    let mut addr: SocketAddr = address
        .tcp
        .parse()
        .with_context(|| format!("segment {}'s address {}", segment.id, address.tcp))?;
    if addr.ip().is_unspecified() {
        addr.set_ip(Ipv4Addr::LOCALHOST.into());
    }
    Ok(addr)
}

/// The key of the `i`th record: `KEYS` keys in turn.
fn key(i: u64) -> [u8; 8] {
    (i % KEYS).to_be_bytes()
}

/// The CPU clocks of the brokers and of this program at a phase's start.
struct CpuClocks {
    brokers: Vec<(ProcessStats, Duration)>,
    load: (ProcessStats, Duration),
}

impl CpuClocks {
    fn start(cluster: &BrokerGroup) -> Result<CpuClocks> {
        let mut brokers = Vec::new();
        for broker in &cluster.brokers {
            let stats = ProcessStats::new(broker.pid());
            brokers.push((stats, stats.cpu()?));
        }
        let load = ProcessStats::new(std::process::id());
        Ok(CpuClocks {
            brokers,
            load: (load, load.cpu()?),
        })
    }

    /// Cores used since the start, over `elapsed`: the brokers together,
    /// and this program.
    fn cores(&self, elapsed: Duration) -> Result<(f64, f64)> {
        let secs = elapsed.as_secs_f64().max(f64::EPSILON);
        let mut brokers = Duration::ZERO;
        for (stats, at_start) in &self.brokers {
            brokers += stats.cpu()?.saturating_sub(*at_start);
        }
        let load = self.load.0.cpu()?.saturating_sub(self.load.1);
        Ok((brokers.as_secs_f64() / secs, load.as_secs_f64() / secs))
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn ms(us: f64) -> String {
    format!("{:.3}", us / 1000.0)
}

fn met(yes: bool) -> &'static str {
    if yes {
        "met"
    } else {
        "NOT met"
    }
}

fn print_results(args: &Args, layout: &TopicInfo, rounds: &[Round]) {
    println!(
        "replicated_ack: kelp control and {BROKERS} brokers of 1 shard, unpinned; topic of {} segments, \
         {REPLICAS} replicas (owner + 1 follower, in sync); records of {} B; {} rounds, {} s a phase",
        args.segments, args.value_bytes, args.rounds, args.seconds
    );
    let copies: Vec<String> = layout
        .segments
        .iter()
        .map(|s| {
            let owner = s.broker.map_or("?".into(), |b| b.to_string());
            let followers: Vec<String> = s.followers.iter().map(|f| f.broker.to_string()).collect();
            format!("{} on b{owner} -> b{}", s.id, followers.join(",b"))
        })
        .collect();
    println!("segments (owner -> follower): {}", copies.join("; "));
    println!("baseline: ack leader, measured in the same round; ratios are all / leader");
    println!();
    println!(
        "throughput: client producer, closed loop, batches up to {} KiB, linger {LINGER_MS} ms, \
         {IN_FLIGHT_BATCHES_MAX} in flight, {KEYS} keys",
        BATCH_BYTES_MAX >> 10
    );
    println!(
        "| round | leader records/s | leader MB/s | all records/s | all MB/s | all / leader | brokers CPU leader / all (cores) | load CPU leader / all (cores) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let row = |name: &str, l: Throughput, a: Throughput, ratio: f64| {
        println!(
            "| {name} | {:.0} | {:.1} | {:.0} | {:.1} | {ratio:.2} | {:.2} / {:.2} | {:.2} / {:.2} |",
            l.records_per_s,
            l.mb_per_s,
            a.records_per_s,
            a.mb_per_s,
            l.brokers_cores,
            a.brokers_cores,
            l.load_cores,
            a.load_cores
        );
    };
    let ratios: Vec<f64> = rounds
        .iter()
        .map(|r| r.throughput[1].records_per_s / r.throughput[0].records_per_s.max(f64::EPSILON))
        .collect();
    for (i, (round, ratio)) in rounds.iter().zip(&ratios).enumerate() {
        row(
            &(i + 1).to_string(),
            round.throughput[0],
            round.throughput[1],
            *ratio,
        );
    }
    let median_throughput = |m: usize| {
        let of = |f: fn(&Throughput) -> f64| {
            median(rounds.iter().map(|r| f(&r.throughput[m])).collect())
        };
        Throughput {
            records_per_s: of(|t| t.records_per_s),
            mb_per_s: of(|t| t.mb_per_s),
            brokers_cores: of(|t| t.brokers_cores),
            load_cores: of(|t| t.load_cores),
        }
    };
    let throughput_ratio = median(ratios.clone());
    row(
        "median",
        median_throughput(0),
        median_throughput(1),
        throughput_ratio,
    );
    println!();
    println!(
        "latency: {} records/s paced, batches of {} records, {LATENCY_IN_FLIGHT} in flight per connection, \
         one connection per broker; each batch from its write to its answer (ms)",
        args.rate, args.batch_records
    );
    println!(
        "| round | ack | records/s sent | batches | p50 | p99 | p99.9 | max | p99 all / leader |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let p99_ratios: Vec<f64> = rounds
        .iter()
        .map(|r| r.latency[1].p99_us as f64 / (r.latency[0].p99_us as f64).max(1.0))
        .collect();
    for (i, (round, p99_ratio)) in rounds.iter().zip(&p99_ratios).enumerate() {
        for (m, ack) in MODES.iter().enumerate() {
            let l = round.latency[m];
            let ratio = match ack {
                AckMode::All => format!("{p99_ratio:.2}"),
                _ => String::new(),
            };
            println!(
                "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {ratio} |",
                i + 1,
                mode_name(*ack),
                l.records_per_s,
                l.batches,
                ms(l.p50_us as f64),
                ms(l.p99_us as f64),
                ms(l.p999_us as f64),
                ms(l.max_us as f64),
            );
        }
    }
    let all_p99s: Vec<f64> = rounds.iter().map(|r| r.latency[1].p99_us as f64).collect();
    for (m, ack) in MODES.iter().enumerate() {
        let of = |f: fn(&Latency) -> u64| {
            median(rounds.iter().map(|r| f(&r.latency[m]) as f64).collect())
        };
        let ratio = match ack {
            AckMode::All => format!("{:.2}", median(p99_ratios.clone())),
            _ => String::new(),
        };
        println!(
            "| median | {} | {:.0} | {:.0} | {} | {} | {} | {} | {ratio} |",
            mode_name(*ack),
            median(rounds.iter().map(|r| r.latency[m].records_per_s).collect()),
            of(|l| l.batches),
            ms(of(|l| l.p50_us)),
            ms(of(|l| l.p99_us)),
            ms(of(|l| l.p999_us)),
            ms(of(|l| l.max_us)),
        );
    }
    println!();
    let ratio_of_medians =
        median_throughput(1).records_per_s / median_throughput(0).records_per_s.max(f64::EPSILON);
    println!(
        "target: all throughput >= {THROUGHPUT_RATIO_TARGET}x leader: median of the rounds' ratios \
         {throughput_ratio:.2} (lowest {:.2}, ratio of the medians {ratio_of_medians:.2}): {}",
        ratios.iter().copied().fold(f64::INFINITY, f64::min),
        met(throughput_ratio >= THROUGHPUT_RATIO_TARGET)
    );
    let all_p99 = median(all_p99s.clone());
    println!(
        "target: all p99 < {} ms at {} records/s: median {} ms, highest {} ms: {}",
        ms(P99_US_TARGET as f64),
        args.rate,
        ms(all_p99),
        ms(all_p99s.iter().copied().fold(0.0, f64::max)),
        met(all_p99 < P99_US_TARGET as f64)
    );
}
