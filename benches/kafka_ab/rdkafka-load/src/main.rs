//! A librdkafka load generator for the Kafka A/B benchmark
//! (`benches/kafka_ab`): creates a topic, produces N records of S bytes,
//! or reads them all back from the beginning, and prints one JSON line of
//! figures on stdout (MB/s, records/s, its own CPU seconds from
//! `getrusage`).
//!
//! Only loopback bootstrap addresses are accepted. Every mode has a
//! deadline (`--timeout-s`); past it the program prints a JSON line with
//! an `error` and exits with status 2. A record that is not acknowledged,
//! or one missing, duplicated or altered on the way back, is an error too
//! (exit status 1).
//!
//! Record `seq` (0..N) goes to partition `seq % P` with key
//! `k<seq % 64>`; its value is S bytes: `seq` as 8 little-endian bytes,
//! then bytes derived from `seq`, so the reader can check each one
//! without keeping the values.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::{Parser, Subcommand, ValueEnum};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::ClientContext;
use serde_json::{json, Value};

/// Keys cycle through this many distinct values, as in the interop client.
const KEYS_DISTINCT: u64 = 64;
/// The value carries its sequence number in its first bytes.
const SEQ_BYTES: usize = 8;
const MEGABYTE: f64 = 1e6;
/// Exit status when the deadline passes.
const EXIT_TIMEOUT: u8 = 2;
/// How long one poll of the producer or consumer may block.
const POLL_MS: u64 = 100;

#[derive(Parser, Debug)]
#[command(version, about = "librdkafka load generator for benches/kafka_ab")]
struct Args {
    /// host:port[,host:port...] on loopback only.
    #[arg(long)]
    bootstrap: String,
    #[arg(long, default_value = "kafka-ab")]
    topic: String,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Fail (exit status 2) if the mode has not finished within this time.
    #[arg(long, default_value_t = 300)]
    timeout_s: u64,
    /// Extra librdkafka settings, name=value, repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    settings: Vec<String>,
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Create the topic with `--partitions` partitions (replication 1).
    CreateTopic,
    /// Produce `--records` records of `--value-bytes` bytes.
    Produce {
        #[arg(long)]
        records: u64,
        #[arg(long, default_value_t = 1000)]
        value_bytes: usize,
        /// all: idempotent producer; 1: leader ack, not idempotent.
        #[arg(long, value_enum, default_value_t = Acks::All)]
        acks: Acks,
    },
    /// Read `--records` records back from the beginning of every partition
    /// (assigned, no group) and check each one.
    Consume {
        #[arg(long)]
        records: u64,
        #[arg(long, default_value_t = 1000)]
        value_bytes: usize,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Acks {
    All,
    #[value(name = "1")]
    One,
}

/// Why a run ended early: the deadline (exit 2) or anything else (exit 1).
#[derive(Debug)]
enum Failure {
    Timeout(anyhow::Error),
    Other(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(err: anyhow::Error) -> Self {
        Failure::Other(err)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mode = match &args.mode {
        Mode::CreateTopic => "create-topic",
        Mode::Produce { .. } => "produce",
        Mode::Consume { .. } => "consume",
    };
    let outcome = check_loopback(&args.bootstrap)
        .map_err(Failure::Other)
        .and_then(|()| run(&args));
    match outcome {
        Ok(mut summary) => {
            summary["librdkafka"] = json!(rdkafka::util::get_rdkafka_version().1);
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(failure) => {
            let (err, status) = match failure {
                Failure::Timeout(err) => (err, EXIT_TIMEOUT),
                Failure::Other(err) => (err, 1),
            };
            println!("{}", json!({"mode": mode, "error": format!("{err:#}")}));
            eprintln!("rdkafka-load {mode}: FAILED: {err:#}");
            ExitCode::from(status)
        }
    }
}

fn run(args: &Args) -> Result<Value, Failure> {
    let deadline = Instant::now() + Duration::from_secs(args.timeout_s);
    match args.mode {
        Mode::CreateTopic => create_topic(args, deadline),
        Mode::Produce {
            records,
            value_bytes,
            acks,
        } => produce(args, deadline, records, value_bytes, acks),
        Mode::Consume {
            records,
            value_bytes,
        } => consume(args, deadline, records, value_bytes),
    }
}

fn check_loopback(bootstrap: &str) -> Result<()> {
    for server in bootstrap.split(',') {
        let host = server
            .rsplit_once(':')
            .map(|(host, _port)| host)
            .ok_or_else(|| anyhow!("bootstrap server {server:?} has no port"))?;
        let loopback = host == "localhost"
            || host == "[::1]"
            || host
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            bail!("bootstrap server {server:?} is not a loopback address");
        }
    }
    Ok(())
}

/// The client's settings: the bootstrap servers, then `defaults`, then
/// the command line's `--set`s, so that those win.
fn config(args: &Args, defaults: &[(&str, &str)]) -> Result<ClientConfig> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &args.bootstrap);
    for (name, value) in defaults {
        config.set(*name, *value);
    }
    for setting in &args.settings {
        let (name, value) = setting
            .split_once('=')
            .ok_or_else(|| anyhow!("--set {setting:?} is not NAME=VALUE"))?;
        config.set(name, value);
    }
    Ok(config)
}

fn remaining(deadline: Instant) -> Result<Duration, Failure> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|left| !left.is_zero())
        .ok_or_else(|| Failure::Timeout(anyhow!("deadline passed")))
}

/// User + system CPU seconds of this process (every thread) so far.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

fn figures(records: u64, value_bytes: usize, seconds: f64, cpu_s: f64) -> Value {
    let bytes = records as f64 * value_bytes as f64;
    json!({
        "records": records,
        "value_bytes": value_bytes,
        "seconds": seconds,
        "throughput_mb_s": bytes / MEGABYTE / seconds,
        "records_per_s": records as f64 / seconds,
        "cpu_s": cpu_s,
        "cpu_s_per_gb": cpu_s / (bytes / 1e9),
    })
}

fn key_of(seq: u64) -> String {
    format!("k{}", seq % KEYS_DISTINCT)
}

/// Fills `value` (at least SEQ_BYTES long) for record `seq`.
fn fill_value(value: &mut [u8], seq: u64) {
    value[..SEQ_BYTES].copy_from_slice(&seq.to_le_bytes());
    let filler = (seq as u8).wrapping_mul(31);
    for (i, byte) in value[SEQ_BYTES..].iter_mut().enumerate() {
        *byte = filler.wrapping_add(i as u8);
    }
}

/// The sequence number of a record value, if the whole value is the one
/// `fill_value` writes for it.
fn check_value(value: &[u8], value_bytes: usize) -> Option<u64> {
    if value.len() != value_bytes {
        return None;
    }
    let seq = u64::from_le_bytes(value[..SEQ_BYTES].try_into().ok()?);
    let filler = (seq as u8).wrapping_mul(31);
    let intact = value[SEQ_BYTES..]
        .iter()
        .enumerate()
        .all(|(i, &byte)| byte == filler.wrapping_add(i as u8));
    intact.then_some(seq)
}

fn create_topic(args: &Args, deadline: Instant) -> Result<Value, Failure> {
    let admin: AdminClient<DefaultClientContext> = config(args, &[])?
        .create()
        .context("creating the admin client")?;
    let topic = NewTopic::new(&args.topic, args.partitions, TopicReplication::Fixed(1));
    let opts = AdminOptions::new().operation_timeout(Some(remaining(deadline)?));
    let results =
        futures_executor::block_on(admin.create_topics([&topic], &opts)).context("CreateTopics")?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                return Err(anyhow!("creating topic {name}: {code}").into());
            }
        }
    }
    // Wait until the metadata shows every partition.
    loop {
        let metadata = admin
            .inner()
            .fetch_metadata(Some(&args.topic), remaining(deadline)?)
            .context("Metadata")?;
        let ready = metadata
            .topics()
            .iter()
            .find(|t| t.name() == args.topic)
            .is_some_and(|t| {
                t.error().is_none() && t.partitions().len() == args.partitions as usize
            });
        if ready {
            break;
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
    Ok(json!({"mode": "create-topic", "topic": args.topic, "partitions": args.partitions}))
}

/// Counts the producer's delivery reports (they arrive on the thread that
/// polls, this program's only one, but the context must be `Sync`).
#[derive(Default)]
struct Deliveries {
    acked: AtomicU64,
    failed: AtomicU64,
    last_ack: Mutex<Option<Instant>>,
    first_error: Mutex<Option<String>>,
}

impl Deliveries {
    fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.acked.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut last) = self.last_ack.lock() {
                    *last = Some(Instant::now());
                }
            }
            Err((err, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = self.first_error.lock() {
                    first.get_or_insert_with(|| err.to_string());
                }
            }
        }
    }
}

fn produce(
    args: &Args,
    deadline: Instant,
    records: u64,
    value_bytes: usize,
    acks: Acks,
) -> Result<Value, Failure> {
    if value_bytes < SEQ_BYTES {
        return Err(anyhow!("--value-bytes must be at least {SEQ_BYTES}").into());
    }
    let acks_settings = match acks {
        Acks::All => [("acks", "all"), ("enable.idempotence", "true")],
        Acks::One => [("acks", "1"), ("enable.idempotence", "false")],
    };
    // Throughput settings (the interop client's): big batches, a short
    // linger, a deep local queue; no compression.
    let config = config(
        args,
        &[
            ("linger.ms", "5"),
            ("batch.num.messages", "10000"),
            ("batch.size", "1000000"),
            ("queue.buffering.max.messages", "200000"),
            ("queue.buffering.max.kbytes", "1048576"),
            acks_settings[0],
            acks_settings[1],
        ],
    )?;
    let producer: BaseProducer<Deliveries> = config
        .create_with_context(Deliveries::default())
        .context("creating the producer")?;
    let deliveries = producer.context();
    let mut value = vec![0u8; value_bytes];
    let cpu_start = cpu_seconds();
    let start = Instant::now();
    for seq in 0..records {
        fill_value(&mut value, seq);
        let key = key_of(seq);
        let mut record = BaseRecord::to(&args.topic)
            .partition((seq % args.partitions as u64) as i32)
            .key(key.as_str())
            .payload(value.as_slice());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    remaining(deadline)?;
                    producer.poll(Duration::from_millis(POLL_MS));
                }
                Err((err, _)) => return Err(anyhow!("producing record {seq}: {err}").into()),
            }
        }
        if seq % 1024 == 0 {
            producer.poll(Duration::ZERO);
            remaining(deadline)?;
        }
    }
    while deliveries.acked() + deliveries.failed() < records {
        if deliveries.failed() > 0 {
            break;
        }
        let left = remaining(deadline).map_err(|_| {
            Failure::Timeout(anyhow!(
                "deadline passed with {} of {records} records acknowledged",
                deliveries.acked()
            ))
        })?;
        producer.poll(left.min(Duration::from_millis(POLL_MS)));
    }
    let cpu_s = cpu_seconds() - cpu_start;
    if deliveries.failed() > 0 || deliveries.acked() != records {
        return Err(anyhow!(
            "{} of {records} records acknowledged, {} failed; first error: {}",
            deliveries.acked(),
            deliveries.failed(),
            deliveries
                .first_error
                .lock()
                .ok()
                .and_then(|e| e.clone())
                .unwrap_or_else(|| "none".into())
        )
        .into());
    }
    let last_ack = deliveries.last_ack.lock().ok().and_then(|last| *last);
    let seconds = last_ack
        .unwrap_or_else(Instant::now)
        .duration_since(start)
        .as_secs_f64();
    let mut summary = figures(records, value_bytes, seconds, cpu_s);
    summary["mode"] = json!("produce");
    summary["acked"] = json!(deliveries.acked());
    summary["acks"] = json!(match acks {
        Acks::All => "all",
        Acks::One => "1",
    });
    Ok(summary)
}

fn consume(
    args: &Args,
    deadline: Instant,
    records: u64,
    value_bytes: usize,
) -> Result<Value, Failure> {
    // Assigned partitions, no group membership and no commits; the group
    // id only satisfies librdkafka's consumer setup.
    let config = config(
        args,
        &[
            ("group.id", "rdkafka-load"),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("enable.partition.eof", "false"),
            // librdkafka pauses a partition's fetches this long once its
            // local queue is over `queued.min.messages` (100,000) or
            // `queued.max.messages.kbytes`; the default, 1,000 ms, puts
            // whole-second gaps into a read of a few seconds.
            ("fetch.queue.backoff.ms", "10"),
        ],
    )?;
    let consumer: BaseConsumer = config.create().context("creating the consumer")?;
    let mut assignment = TopicPartitionList::new();
    for partition in 0..args.partitions {
        assignment
            .add_partition_offset(&args.topic, partition, Offset::Beginning)
            .context("building the assignment")?;
    }
    let mut seen = vec![0u64; records.div_ceil(64) as usize];
    let (mut unique, mut duplicates, mut corrupt, mut misplaced) = (0u64, 0u64, 0u64, 0u64);
    // Per partition: records read, and the offset after the last one.
    let mut read = vec![(0u64, 0i64); args.partitions as usize];
    let cpu_start = cpu_seconds();
    let start = Instant::now();
    consumer.assign(&assignment).context("assign")?;
    let mut first: Option<Instant> = None;
    while unique < records {
        let left = remaining(deadline).map_err(|_| {
            Failure::Timeout(anyhow!(
                "deadline passed with {unique} of {records} records read"
            ))
        })?;
        let Some(message) = consumer.poll(left.min(Duration::from_millis(POLL_MS))) else {
            continue;
        };
        let message = message.context("fetch")?;
        first.get_or_insert_with(Instant::now);
        if let Some(at) = usize::try_from(message.partition())
            .ok()
            .and_then(|p| read.get_mut(p))
        {
            at.0 += 1;
            at.1 = at.1.max(message.offset() + 1);
        }
        let seq = message
            .payload()
            .and_then(|value| check_value(value, value_bytes))
            .filter(|&seq| seq < records);
        let Some(seq) = seq else {
            corrupt += 1;
            continue;
        };
        if message.partition() as u64 != seq % args.partitions as u64
            || message.key() != Some(key_of(seq).as_bytes())
        {
            misplaced += 1;
        }
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        if seen[word] & (1 << bit) != 0 {
            duplicates += 1;
        } else {
            seen[word] |= 1 << bit;
            unique += 1;
        }
    }
    let end = Instant::now();
    let cpu_s = cpu_seconds() - cpu_start;
    // Each partition's offsets must run densely from 0: as many records
    // read as the last offset read + 1. The high watermarks (ListOffsets)
    // are reported, not checked: Tansu 0.6 answers the last batch's base
    // offset there.
    let mut end_offsets = 0i64;
    let mut dense = true;
    let mut high_watermarks = Vec::new();
    let mut partitions = Vec::new();
    for partition in 0..args.partitions {
        let (low, high) = consumer
            .fetch_watermarks(&args.topic, partition, remaining(deadline)?)
            .context("ListOffsets")?;
        high_watermarks.push(high);
        let (count, next) = read[partition as usize];
        end_offsets += next;
        dense &= i64::try_from(count).is_ok_and(|count| count == next);
        partitions.push(format!(
            "{partition}: read {count}, last offset read + 1 {next}, watermarks {low}-{high}"
        ));
    }
    if duplicates + corrupt + misplaced > 0 || !dense || end_offsets != records as i64 {
        return Err(anyhow!(
            "read back {unique} distinct records of {records}, {duplicates} duplicates, \
             {corrupt} corrupt, {misplaced} in the wrong partition or with the wrong key; \
             the offsets after the last read sum to {end_offsets} ({})",
            partitions.join("; ")
        )
        .into());
    }
    let read_seconds = end.duration_since(first.unwrap_or(start)).as_secs_f64();
    let mut summary = figures(records, value_bytes, read_seconds, cpu_s);
    summary["mode"] = json!("consume");
    summary["unique"] = json!(unique);
    summary["high_watermarks"] = json!(high_watermarks);
    summary["total_seconds"] = json!(end.duration_since(start).as_secs_f64());
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_corruption_is_seen() {
        let mut value = vec![0u8; 100];
        fill_value(&mut value, 12_345);
        assert_eq!(check_value(&value, 100), Some(12_345));
        value[50] ^= 1;
        assert_eq!(check_value(&value, 100), None);
        assert_eq!(check_value(&value[..99], 100), None);
    }

    #[test]
    fn only_loopback_is_accepted() {
        assert!(check_loopback("127.0.0.1:9092,localhost:1").is_ok());
        assert!(check_loopback("10.0.0.1:9092").is_err());
        assert!(check_loopback("127.0.0.1").is_err());
    }
}
