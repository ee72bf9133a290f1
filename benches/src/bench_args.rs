//! `kelp bench`'s command line: the scenario and every option, as a clap
//! `Args` struct the `kelp` binary flattens into its `bench` subcommand.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use wire::AckMode;

use crate::by_reference::ByRefPath;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    Produce,
    Consume,
    EndToEnd,
    Backfill,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Produce => "produce",
            Scenario::Consume => "consume",
            Scenario::EndToEnd => "end-to-end",
            Scenario::Backfill => "backfill",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    Tcp,
    Quic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AckArg {
    None,
    Leader,
    Durable,
}

impl AckArg {
    pub fn mode(self) -> AckMode {
        match self {
            AckArg::None => AckMode::None,
            AckArg::Leader => AckMode::Leader,
            AckArg::Durable => AckMode::Durable,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AckArg::None => "none",
            AckArg::Leader => "leader",
            AckArg::Durable => "durable",
        }
    }
}

/// Where `consume` reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConsumeFrom {
    /// The broker's in-memory (mapped) buffers.
    Buffers,
    /// Chunk files in the filer.
    Chunks,
}

/// `kelp bench` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure.
    #[arg(value_enum)]
    pub scenario: Scenario,
    /// Transport to the broker (and of the raw baseline it is compared with).
    #[arg(long, value_enum, default_value_t = TransportArg::Tcp)]
    pub transport: TransportArg,
    /// Value bytes per record (an 8-byte key comes on top); at most what a
    /// record may carry inline (6 MiB less its header and key) unless
    /// `--by-ref` sends values through the filer.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=(1 << 30)))]
    pub record_bytes: u32,
    /// `produce`/`backfill`: upload every value to the filer and publish a
    /// 40-byte reference instead (docs/payloads.md): `direct` writes into the
    /// bench broker's filer directory, `broker` goes through the broker's
    /// upload path. One upload in flight per producer (`--producers`).
    #[arg(long, value_enum, value_name = "PATH")]
    pub by_ref: Option<ByRefPath>,
    /// Records per batch (one batch per produce request).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_records: u32,
    /// Producer connections per shard.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub producers: u32,
    /// Consumers; the segments are shared out among them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub consumers: u32,
    /// Segments of the benchmark's topic.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub segments: u32,
    /// Produce requests outstanding per producer connection.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub in_flight: u32,
    /// When the broker answers a batch [default: leader; backfill: durable].
    #[arg(long, value_enum)]
    pub ack: Option<AckArg>,
    /// Target records per second over all producers (latency at a fixed
    /// load); without it, as fast as the broker takes them.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Records to send, rounded up to whole batches [default: 1000000].
    #[arg(long, conflicts_with = "duration")]
    pub count: Option<u64>,
    /// Send for this many seconds instead of a count.
    #[arg(long)]
    pub duration: Option<f64>,
    /// `consume` only: read from the broker's buffers or from chunks.
    #[arg(long = "from", value_enum, default_value_t = ConsumeFrom::Buffers)]
    pub consume_from: ConsumeFrom,
    /// Use this running broker (any shard's TCP address) instead of
    /// starting one; broker CPU and memory are then not measured.
    #[arg(long, value_name = "ADDR")]
    pub broker: Option<String>,
    /// With --broker and --transport quic: the broker's certificate (DER or
    /// PEM, e.g. `<data-dir>/tls/cert.der`).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Pin the load generator's threads to these CPUs while it measures
    /// (e.g. `1`: off the CPU of the own broker's shard 0, which shard
    /// `i` is pinned to); the baselines run unpinned. By default the OS
    /// places them.
    #[arg(long, value_name = "CPU,CPU", value_delimiter = ',', num_args = 1..)]
    pub load_cpus: Vec<usize>,
    /// Shards of the bench's own broker.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub shards: u32,
    /// Buffer (chunk) size of the bench's own broker, MiB.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub buffer_mib: u64,
    /// Largest buffer a busy segment of the bench's own broker grows to,
    /// MiB (`kelp serve --buffer-bytes-max`); the broker's default (64)
    /// without it. At or below `--buffer-mib`, buffers never grow.
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub buffer_max_mib: Option<u64>,
    /// The bench's own broker drops flushed chunks from the page cache
    /// (`kelp serve --drop-flushed-pages`).
    #[arg(long)]
    pub drop_flushed_pages: bool,
    /// Directory under which the bench's broker keeps its data (and the
    /// file-write baselines write); the system temp dir by default.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The bench's own broker stores in this filer (`s3://BUCKET/PREFIX`,
    /// reached through the standard AWS environment) instead of its data
    /// dir; with `--baseline` the store's own PUT throughput is measured
    /// too, with objects of `--buffer-mib` and one upload per segment at
    /// once, and is the limit a backfill or a durable produce is compared
    /// with.
    #[arg(long, value_name = "URL")]
    pub filer: Option<String>,
    /// Also measure this host's limits with the same sizes: raw TCP, raw
    /// quinn, sequential file writes with and without fdatasync.
    #[arg(long)]
    pub baseline: bool,
    /// Write the figures as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw throughput over time against the baselines, the latency
    /// distribution and the broker's CPU and memory (PNG).
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
    /// Run the whole scenario this many times (a fresh broker and fresh
    /// baselines each time) and summarise every figure by its median,
    /// minimum and maximum.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(REPEAT_MAX)))]
    pub repeat: u32,
    /// Time limit of each phase, seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_s: u64,
    /// Soft limit of one fetch answer, bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub fetch_bytes: u32,
}

/// Records a run sends without `--count` or `--duration`.
pub const COUNT_DEFAULT: u64 = 1_000_000;
/// The most runs `--repeat` takes: enough for a median that one outlier
/// does not move, few enough that a mistyped count does not run for hours.
pub const REPEAT_MAX: u32 = 20;
