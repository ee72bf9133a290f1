//! The command line: every subcommand and its arguments.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context};
use clap::{Args, Parser, Subcommand, ValueEnum};
use client::{AckMode, FetchFrom, Transport};

/// How the escaping of keys and values reads in help texts.
const ESCAPING_HELP: &str = "Keys and values print as-is when they are printable UTF-8; \
tab, newline, carriage return and backslash print as \\t, \\n, \\r and \\\\, and other \
control bytes and bytes that are not valid UTF-8 print as \\xNN.";

/// kelp: a message queue with key-ordered, key-range segmented topics.
#[derive(Debug, Parser)]
#[command(name = "kelp", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a broker until SIGINT or SIGTERM.
    Serve(ServeArgs),
    /// Run the cluster's control plane until SIGINT or SIGTERM: topics,
    /// broker membership, placement, split and merge.
    Control(ControlArgs),
    /// Create, list, describe and delete topics; split, merge and move
    /// their segments, set their scaling policy.
    Topic {
        #[command(subcommand)]
        command: TopicCommand,
    },
    /// Publish stdin lines `KEY<TAB>VALUE` to a topic.
    ///
    /// Each line is split on its first tab; a line without a tab is a value
    /// with no key. Bytes are sent as-is (no unescaping); the line ending is
    /// dropped. At the end prints `acknowledged N records` (with --ack none:
    /// `sent N records`).
    Pub(PubArgs),
    /// Print a topic's records as `KEY<TAB>VALUE` lines.
    #[command(after_help = ESCAPING_HELP)]
    Sub(SubArgs),
    /// Measure a broker: produce, consume, end-to-end or backfill, with
    /// latency percentiles, broker CPU and memory, and (--baseline) the
    /// host's limits measured in the same run.
    Bench(kelp_benches::BenchArgs),
    /// List a cluster's brokers (a lone broker is a cluster of one):
    /// shards, load, open segments, last heard.
    Cluster {
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Inspect chunk files.
    Chunk {
        #[command(subcommand)]
        command: ChunkCommand,
    },
    /// Config files for `kelp serve --config` and `kelp control --config`.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Credentials for the auth file (`--auth`).
    Auth {
        #[command(subcommand)]
        command: AuthCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Read a password from stdin (its first line) and print the
    /// `scram_sha_256` and `scram_sha_512` lines of an auth file's user,
    /// salted afresh, so the file need not hold the password.
    Hash,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print a config file with every setting of `kelp serve` (or `kelp
    /// control`), its help as comments and its default value.
    Default {
        /// Whose settings.
        #[arg(value_enum, default_value_t = Configurable::Serve)]
        of: Configurable,
    },
}

/// The commands that take a config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Configurable {
    Serve,
    Control,
}

impl Configurable {
    pub fn name(self) -> &'static str {
        match self {
            Configurable::Serve => "serve",
            Configurable::Control => "control",
        }
    }
}

#[derive(Debug, Args)]
pub struct ControlArgs {
    /// Read settings from this TOML file: each key a flag's name with `_`
    /// for `-` (`kelp config default control` prints them all). Flags and
    /// KELP_* variables override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address brokers and clients reach the control plane on.
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub listen: SocketAddr,
    /// Directory of the control plane; the filer every broker shares is
    /// its `filer` subdirectory.
    #[arg(long, default_value = "./kelp-control")]
    pub data_dir: PathBuf,
    /// A broker not heard from for longer than this is dead and its
    /// segments move.
    #[arg(long, default_value_t = 10_000)]
    pub broker_silence_ms: u64,
    /// A follower that has not held everything its segment's owner had
    /// for longer than this leaves the in-sync set (`all` produces stop
    /// waiting for it); back within half of it, it rejoins.
    #[arg(long, default_value_t = control::FOLLOWER_LAG_MAX_MS)]
    pub follower_lag_ms: u64,
    /// How long a follower named to seal a dead owner's segment from its
    /// copy has before the control plane seals it at the filer's end
    /// (counted only while the filer answers).
    #[arg(long, default_value_t = control::SEALER_WAIT_MS)]
    pub sealer_wait_ms: u64,
    /// How often the control plane checks for dead brokers, splits, merges
    /// and rebalancing.
    #[arg(long, default_value_t = 1_000)]
    pub tick_ms: u64,
    /// Serve /metrics (Prometheus), /health and /ready over HTTP at this
    /// address (e.g. 127.0.0.1:9465); off by default
    /// (docs/operations.md).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Users, their permissions and the cluster secret (TOML,
    /// docs/operations.md): every connection must then authenticate
    /// (KELP_USER and KELP_PASSWORD on the CLI). Without it, anyone who
    /// reaches the ports may do anything.
    #[arg(long, value_name = "FILE")]
    pub auth: Option<PathBuf>,
    #[command(flatten)]
    pub filer: FilerArgs,
    /// Run as one of several instances for high availability: etcd's
    /// client URLs (e.g. http://10.0.0.1:2379,http://10.0.0.2:2379). One
    /// instance leads, elected through etcd, and keeps topics and broker
    /// records there; the others answer brokers with the leader's address
    /// and take over when it dies. Needs --filer, shared by every instance.
    #[arg(
        long,
        value_name = "URL[,URL...]",
        value_delimiter = ',',
        requires = "filer"
    )]
    pub etcd: Vec<String>,
    /// The cluster's name in etcd: every key lives under /kelp/NAME/.
    #[arg(long, default_value = "kelp", requires = "etcd")]
    pub cluster: String,
    /// The address brokers and the other instances reach this one on
    /// (default: --listen; set it when listening on 0.0.0.0).
    #[arg(long, value_name = "HOST:PORT", requires = "etcd")]
    pub advertise: Option<String>,
    /// The etcd lease of this instance's candidacy, in seconds: a leader
    /// that dies is replaced about this long after its last keepalive.
    #[arg(long, value_name = "S", default_value_t = election::LEASE_TTL_S_DEFAULT,
          value_parser = clap::value_parser!(u32).range(i64::from(election::LEASE_TTL_S_MIN)..=i64::from(election::LEASE_TTL_S_MAX)),
          requires = "etcd")]
    pub lease_ttl_s: u32,
    /// Connections one IP address may hold: one host cannot take every
    /// connection slot (1,024 in all).
    #[arg(long, value_name = "N", default_value_t = control::control_server::CONNECTIONS_PER_IP_MAX as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub connections_per_ip_max: u64,
    /// Request bytes held for all connections together; past it,
    /// connections wait before reading a frame's payload. At least 8 MiB
    /// (one largest frame).
    #[arg(long, value_name = "BYTES", default_value_t = control::control_server::RECEIVE_BYTES_MAX,
          value_parser = clap::value_parser!(u64).range(u64::from(wire::limits::FRAME_PAYLOAD_BYTES_MAX)..))]
    pub receive_bytes_max: u64,
    /// Close a connection that sent no request for this long and is owed no
    /// answer (brokers call every second).
    #[arg(long, value_name = "MS", default_value_t = control::control_server::IDLE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,
    /// Close a connection whose request has not all arrived this long after
    /// its first byte (a peer trickling bytes).
    #[arg(long, value_name = "MS", default_value_t = control::control_server::FRAME_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub frame_timeout_ms: u64,
    #[command(flatten)]
    pub log: LogArgs,
}

/// Where the filer is, and how to reach an S3-compatible one.
#[derive(Debug, Args)]
pub struct FilerArgs {
    /// Where chunks, topic layouts and payloads are stored: file:///dir, or
    /// s3://BUCKET/PREFIX on S3-compatible object storage (credentials from
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY). Default: the local
    /// directory `<data-dir>/filer`; a broker in a cluster uses its control
    /// plane's.
    #[arg(long, value_name = "URL", value_parser = parse_filer_url)]
    pub filer: Option<filer::FilerUrl>,
    /// The S3 endpoint, e.g. http://127.0.0.1:9000 (default: AWS_ENDPOINT_URL,
    /// else AWS itself).
    #[arg(long, value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// The region to sign S3 requests for (default: AWS_REGION).
    #[arg(long, value_name = "REGION")]
    pub s3_region: Option<String>,
    /// Allow a plain-HTTP S3 endpoint (default: AWS_ALLOW_HTTP).
    #[arg(long)]
    pub s3_allow_http: bool,
    /// How long one S3 call retries a failing request (with backoff)
    /// before it fails and the caller hears of it: the flusher then logs
    /// and tries again after its own backoff.
    #[arg(long, value_name = "MS", default_value_t = filer_s3::S3_RETRY_TIMEOUT_DEFAULT.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub s3_retry_timeout_ms: u64,
}

impl FilerArgs {
    /// The S3 settings these flags give; the AWS environment fills the rest.
    pub fn s3_settings(&self) -> filer_s3::S3Settings {
        filer_s3::S3Settings {
            endpoint: self.s3_endpoint.clone(),
            region: self.s3_region.clone(),
            allow_http: self.s3_allow_http.then_some(true),
            retry_timeout: Some(std::time::Duration::from_millis(self.s3_retry_timeout_ms)),
            ..filer_s3::S3Settings::default()
        }
    }
}

fn parse_filer_url(text: &str) -> Result<filer::FilerUrl, String> {
    filer::FilerUrl::parse(text).map_err(|e| e.to_string())
}

/// How a server logs: `kelp serve` and `kelp control` take these.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// What to log: a level (error, warn, info, debug, trace) or
    /// per-module filters as RUST_LOG takes them, e.g.
    /// `info,kelp_engine=debug`. RUST_LOG is still read when this is not
    /// given.
    #[arg(long, value_name = "FILTER", default_value = "info", value_parser = parse_log_filter)]
    pub log_level: String,
    /// How each line reads on stderr: `text` for people, `json` (one
    /// object per line, with its connection's or segment's fields) for log
    /// pipelines.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

fn parse_log_filter(text: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(text)
        .map(|_| text.to_string())
        .map_err(|e| format!("not a level or filter: {e}"))
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Read settings from this TOML file: each key a flag's name with `_`
    /// for `-` (`kelp config default` prints them all). Flags and KELP_*
    /// variables override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Directory for buffers and (with the local filer) chunks.
    #[arg(long, default_value = "./kelp-data")]
    pub data_dir: PathBuf,
    /// Address of shard 0; shard i listens on this port + i (TCP and UDP).
    #[arg(long, default_value = "127.0.0.1:7420")]
    pub listen: SocketAddr,
    /// Number of shards; 0 means one per core.
    #[arg(long, default_value_t = 0)]
    pub shards: usize,
    /// A segment's buffer is sealed and flushed at this size (64 KiB to 1 GiB).
    #[arg(long, default_value_t = 8 << 20, value_parser = clap::value_parser!(u64).range(65_536..=1 << 30))]
    pub buffer_bytes: u64,
    /// A segment that fills its buffers gets bigger ones, each twice the
    /// last, up to this (64 KiB to 1 GiB); one that seals them mostly empty
    /// gets smaller ones again, down to --buffer-bytes. At or below
    /// --buffer-bytes, buffers never grow.
    #[arg(long, value_name = "BYTES", default_value_t = engine::config::BUFFER_BYTES_MAX_DEFAULT, value_parser = clap::value_parser!(u64).range(65_536..=1 << 30))]
    pub buffer_bytes_max: u64,
    /// A segment's buffer is also sealed and flushed at this age.
    #[arg(long, default_value_t = 1000)]
    pub flush_age_ms: u64,
    /// Drop flushed chunks' pages from the page cache once synced: new
    /// buffers then reuse that memory instead of growing the cache (less
    /// CPU per GB ingested where fresh memory is slow, as on some VMs), and
    /// reading an older chunk goes to the disk.
    #[arg(long)]
    pub drop_flushed_pages: bool,
    /// Also speak the Kafka protocol at this address (e.g. 127.0.0.1:9092);
    /// off by default. Kafka topic NAME is kelp topic kafka/NAME
    /// (docs/kafka.md).
    #[arg(long, value_name = "ADDR")]
    pub kafka: Option<SocketAddr>,
    /// The HOST:PORT Kafka clients are told to connect to, as Kafka's
    /// advertised.listeners (needed when --kafka binds 0.0.0.0 or clients
    /// reach the broker through another name); default: the --kafka
    /// address, 127.0.0.1 for 0.0.0.0.
    #[arg(long, value_name = "HOST:PORT", requires = "kafka")]
    pub kafka_advertise: Option<engine::AdvertisedAddress>,
    /// Serve the Kafka port over TLS (Kafka's SSL listener; SASL_SSL with
    /// --auth), with the broker's certificate: --tls-cert and --tls-key,
    /// else its own self-signed one (DATA_DIR/tls/cert.der).
    #[arg(long, requires = "kafka")]
    pub kafka_tls: bool,
    /// Serve the native TCP ports over TLS 1.3 (clients: --transport tls),
    /// with the broker's certificate as QUIC; a lone broker only.
    #[arg(long)]
    pub tcp_tls: bool,
    /// Kafka's num.partitions: partitions of a topic a Kafka client
    /// creates without a count, or that Metadata creates on first use.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub kafka_num_partitions: u32,
    /// Kafka's group.min.session.timeout.ms: the shortest session timeout
    /// a consumer group member may ask for.
    #[arg(long, default_value_t = 6_000, value_name = "MS")]
    pub kafka_group_min_session_timeout_ms: u32,
    /// Kafka's group.max.session.timeout.ms: the longest session timeout
    /// a consumer group member may ask for.
    #[arg(long, default_value_t = 1_800_000, value_name = "MS")]
    pub kafka_group_max_session_timeout_ms: u32,
    /// Kafka's group.initial.rebalance.delay.ms: how long a group's first
    /// rebalance waits for more members to join.
    #[arg(long, default_value_t = 3_000, value_name = "MS")]
    pub kafka_group_initial_rebalance_delay_ms: u32,
    /// Serve /metrics (Prometheus), /health and /ready over HTTP at this
    /// address (e.g. 127.0.0.1:9464); off by default
    /// (docs/operations.md).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Users, their permissions and the cluster secret (TOML,
    /// docs/operations.md): every connection must then authenticate
    /// (KELP_USER and KELP_PASSWORD on the CLI). Without it, anyone who
    /// reaches the ports may do anything.
    #[arg(long, value_name = "FILE")]
    pub auth: Option<PathBuf>,
    /// The broker's QUIC certificate chain (PEM), instead of the
    /// self-signed one it makes in the data dir's tls/; with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// An uploaded payload that no record refers to is deleted once it is
    /// this old (docs/payloads.md).
    #[arg(long, default_value_t = 3_600_000)]
    pub payload_grace_ms: u64,
    /// How often the orphan payload sweep runs.
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub payload_sweep_ms: u64,
    /// Join the cluster whose control plane (`kelp control`) listens here,
    /// instead of running the control plane inside this broker (as a
    /// cluster of one whose shards take the pieces of its splits). The
    /// broker then stores in the cluster's filer and keeps its id in
    /// `<data-dir>/broker-id`. An HA control plane is every instance's
    /// address, A,B,C: the broker follows whichever leads.
    #[arg(long, value_name = "ADDR[,ADDR...]")]
    pub control: Option<String>,
    /// Leave shard threads to the OS scheduler instead of pinning shard i
    /// to CPU i (for several brokers on one host).
    #[arg(long)]
    pub unpinned: bool,
    /// Close a native TCP or Kafka connection that sent no request for this long and
    /// is owed no answer (Kafka's connections.max.idle.ms is 10 minutes).
    #[arg(long, value_name = "MS", default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,
    #[command(flatten)]
    pub filer: FilerArgs,
    /// Close a native TCP or Kafka connection whose request has not all arrived this
    /// long after its first byte (a peer trickling bytes).
    #[arg(long, value_name = "MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub frame_timeout_ms: u64,
    /// Native TCP and QUIC connections one IP address may hold per shard
    /// (and Kafka connections): one host cannot take every connection slot.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    pub connections_per_ip_max: u64,
    /// Request bytes one shard holds for its native TCP and QUIC
    /// connections together: frame payloads being received or handled, and
    /// QUIC connections' receive windows. Past it, connections wait before
    /// reading a frame's payload, QUIC windows stop growing, and new QUIC
    /// connections are refused. At least 8 MiB + 64 KiB (one largest frame
    /// and one QUIC connection's smallest window).
    #[arg(long, value_name = "BYTES", default_value_t = 256 << 20)]
    pub receive_bytes_max: u64,
    /// Bytes of sealed buffers one segment keeps waiting for the filer;
    /// past it the segment's producers wait (a slow or absent filer is
    /// backpressure, never loss). One sealed buffer may always wait.
    #[arg(long, value_name = "BYTES", default_value_t = engine::config::UNFLUSHED_BYTES_MAX_DEFAULT, value_parser = clap::value_parser!(u64).range(1..))]
    pub unflushed_bytes_max: u64,
    /// When the disk has no room for a segment's next buffer, producers wait
    /// up to this long for room (an operator freeing space, retention)
    /// before they are answered `Storage`; 0 answers at once. Nothing
    /// unwritten is ever acknowledged.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub disk_full_wait_ms: u64,
    /// Chunk uploads one shard has in flight at most (1 to 64): with a
    /// store that answers in L seconds a shard stores at most this many
    /// chunks per L; a segment has one in flight.
    #[arg(long, value_name = "N", default_value_t = engine::config::FILER_UPLOADS_DEFAULT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub filer_uploads: usize,
    /// Filer reads (chunk ranges, listings) one shard has in flight at
    /// most, apart from its uploads (1 to 64).
    #[arg(long, value_name = "N", default_value_t = engine::config::FILER_READS_DEFAULT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub filer_reads: usize,
    /// Bytes of chunk ranges read from S3 that the broker keeps in memory
    /// for the next reads (least recently used go first); 0 keeps none.
    /// Not used with a local-directory filer (the page cache does it).
    #[arg(long, value_name = "BYTES", default_value_t = engine::config::CHUNK_CACHE_BYTES_DEFAULT)]
    pub chunk_cache_bytes: u64,
    #[command(flatten)]
    pub log: LogArgs,
}

/// How to reach the broker; every client command takes these.
#[derive(Debug, Args)]
pub struct BrokerArgs {
    /// Any shard address of the broker, HOST:PORT; in a cluster, several
    /// brokers' as HOST:PORT,HOST:PORT,...: the first that answers is used,
    /// and admin requests fall back to the others.
    #[arg(long, env = "KELP_BROKER", default_value = "127.0.0.1:7420", value_parser = parse_broker_list)]
    pub broker: String,
    /// Transport to the broker: tcp, quic, or tls (TCP with TLS, to a
    /// broker started with --tcp-tls).
    #[arg(long, env = "KELP_TRANSPORT", value_enum, default_value_t = TransportArg::Tcp)]
    pub transport: TransportArg,
    /// CA certificate (DER or PEM) to verify the broker's certificate with
    /// (QUIC and tls); a broker's own self-signed one is
    /// DATA_DIR/tls/cert.der. QUIC and tls need it, or --insecure.
    #[arg(long, env = "KELP_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Over QUIC or tls without --tls-ca, accept any broker certificate: the
    /// broker is then not authenticated (anyone on the path can pose as
    /// it).
    #[arg(long)]
    pub insecure: bool,
    /// The name the broker's certificate must carry (default
    /// localhost, which a broker's self-signed certificate carries).
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// How long a request may wait for its answer (a durable produce waits
    /// for the filer: raise this to ride out a long storage outage).
    #[arg(long, value_name = "MS", default_value_t = client::REQUEST_TIMEOUT_MS_DEFAULT, value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout_ms: u64,
    /// The user to authenticate as, on a broker started with --auth.
    #[arg(long, env = "KELP_USER", requires = "password")]
    pub user: Option<String>,
    /// The user's password (prefer the environment variable: a flag shows
    /// in the process list).
    #[arg(long, env = "KELP_PASSWORD", hide_env_values = true, requires = "user")]
    pub password: Option<String>,
}

/// Where payloads passed by reference are: `pub` and `sub` take it.
#[derive(Debug, Args)]
pub struct PayloadArgs {
    /// The broker's filer directory (`<data-dir>/filer`), when this machine
    /// shares it: payloads passed by reference are written and read there
    /// directly instead of through the broker.
    #[arg(long, value_name = "DIR")]
    pub payload_dir: Option<PathBuf>,
    /// The broker's filer as a URL (s3://BUCKET/PREFIX) when this machine
    /// has credentials to it (AWS_ACCESS_KEY_ID, ...): payloads go straight
    /// to the bucket and are read from it.
    #[arg(long, value_name = "URL", conflicts_with = "payload_dir")]
    pub payload_filer: Option<String>,
}

/// How a listing command prints: `--output table|json`.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// `table`: aligned columns for people; `wide`: every column; `json`:
    /// one JSON document for scripts (fields in docs/cli.md).
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

/// `--output` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Wide,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    Tcp,
    Quic,
    /// TCP with TLS, to a broker started with --tcp-tls.
    Tls,
}

impl From<TransportArg> for Transport {
    fn from(t: TransportArg) -> Transport {
        match t {
            TransportArg::Tcp => Transport::Tcp,
            TransportArg::Quic => Transport::Quic,
            TransportArg::Tls => Transport::Tls,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        /// `namespace/name`.
        topic: String,
        /// Segments to split the key-hash ring into.
        #[arg(long, default_value_t = 1)]
        segments: u32,
        /// Brokers that keep each segment, its owner included (1 to 5; at
        /// most the live brokers). Default: 1.
        #[arg(long, value_parser = clap::value_parser!(u8).range(1..=5))]
        replicas: Option<u8>,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// List topics, one name per line.
    List {
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Show a topic's segments, every one ever (sealed ones with their
    /// successors): id, key-hash range, state, owner broker and shard,
    /// address, next offset, rates, created and sealed times (UTC).
    Describe {
        topic: String,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Delete a topic and its data.
    Delete {
        topic: String,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Seal an open segment and open successors over equal parts of its
    /// key range; prints the layout after.
    Split {
        topic: String,
        segment: u32,
        /// Successors to cut the range into.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..))]
        pieces: u32,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Seal two adjacent open segments and open one successor over both;
    /// prints the layout after.
    Merge {
        topic: String,
        a: u32,
        b: u32,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Seal an open segment and reopen its range on another broker (on a
    /// lone broker: on another shard); prints the layout after.
    Move {
        topic: String,
        segment: u32,
        /// The broker id to move it to; without it the control plane picks
        /// the least-loaded other broker, or another shard when there is no
        /// other broker.
        #[arg(long, value_name = "BROKER")]
        to: Option<u32>,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Set a topic's scaling policy (when segments split and merge by
    /// themselves); unset fields take their defaults. Prints the layout.
    Policy(PolicyArgs),
}

impl TopicCommand {
    /// Where the command goes.
    pub fn broker(&self) -> &BrokerArgs {
        match self {
            TopicCommand::Create { broker, .. }
            | TopicCommand::List { broker, .. }
            | TopicCommand::Describe { broker, .. }
            | TopicCommand::Delete { broker, .. }
            | TopicCommand::Split { broker, .. }
            | TopicCommand::Merge { broker, .. }
            | TopicCommand::Move { broker, .. } => broker,
            TopicCommand::Policy(args) => &args.broker,
        }
    }
}

/// `kelp topic policy`: the fields of `control::ScalingPolicy`.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    pub topic: String,
    /// Payload bytes per second one segment should carry (0: not
    /// considered; both targets 0: no automatic scaling).
    #[arg(long, value_name = "BYTES")]
    pub target_bytes_per_s: Option<u64>,
    /// Records per second one segment should carry.
    #[arg(long, value_name = "RECORDS")]
    pub target_records_per_s: Option<u64>,
    /// The four averaging windows in ms, shortest first: `a,b,c,d`.
    #[arg(long, value_name = "MS,MS,MS,MS", value_delimiter = ',')]
    pub windows_ms: Option<Vec<u64>>,
    /// No automatic split or merge of a segment younger than this.
    #[arg(long, value_name = "MS")]
    pub cooldown_ms: Option<u64>,
    /// Fewest open segments.
    #[arg(long, value_name = "N")]
    pub segments_min: Option<u32>,
    /// Most open segments.
    #[arg(long, value_name = "N")]
    pub segments_max: Option<u32>,
    /// Most pieces one automatic split cuts a segment into.
    #[arg(long, value_name = "N")]
    pub split_pieces_max: Option<u32>,
    /// Remove the policy (no automatic scaling).
    #[arg(long, conflicts_with_all = [
        "target_bytes_per_s", "target_records_per_s", "windows_ms",
        "cooldown_ms", "segments_min", "segments_max", "split_pieces_max",
    ])]
    pub off: bool,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub broker: BrokerArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AckArg {
    /// Fire and forget (errors the broker reports still fail the command).
    None,
    /// In the owning shard's memory.
    Leader,
    /// In the buffers of every replica of the segment (a segment has one
    /// replica today, its owner: as leader).
    All,
    /// In a chunk stored in the filer.
    Durable,
}

impl From<AckArg> for AckMode {
    fn from(a: AckArg) -> AckMode {
        match a {
            AckArg::None => AckMode::None,
            AckArg::Leader => AckMode::Leader,
            AckArg::All => AckMode::All,
            AckArg::Durable => AckMode::Durable,
        }
    }
}

#[derive(Debug, Args)]
pub struct PubArgs {
    /// `namespace/name`.
    pub topic: String,
    /// When the broker acknowledges a batch.
    #[arg(long, value_enum, default_value_t = AckArg::Leader)]
    pub ack: AckArg,
    /// Send a segment's batch once it reaches this many bytes.
    #[arg(long, default_value_t = client::BATCH_BYTES_MAX_DEFAULT)]
    pub batch_bytes: usize,
    /// Send a batch that has not filled this long after its first record.
    #[arg(long, default_value_t = client::LINGER_MS_DEFAULT)]
    pub linger_ms: u64,
    /// Values longer than this many bytes are uploaded to the filer and
    /// published as references; `never` sends every value inline.
    #[arg(long, value_name = "BYTES", default_value = "1048576", value_parser = parse_by_ref_over)]
    pub by_ref_over: ByRefOver,
    /// A header every record carries, `NAME=VALUE` (repeat for more; in
    /// this order).
    #[arg(long = "header", short = 'H', value_name = "NAME=VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// Stamp batches with a producer id and sequences, and resend those
    /// whose connection was lost: the broker stores each once (at most 5
    /// batches in flight).
    #[arg(long)]
    pub idempotent: bool,
    #[command(flatten)]
    pub payload: PayloadArgs,
    #[command(flatten)]
    pub broker: BrokerArgs,
}

#[derive(Debug, Args)]
pub struct SubArgs {
    /// `namespace/name`.
    pub topic: String,
    /// Where to start in every segment: `earliest`, `latest`, an offset
    /// (`1234`), `-N` (N records before the end of each open segment), an
    /// RFC 3339 time (`2026-11-30T15:00:00Z`) or `@<epoch-ms>`.
    #[arg(long, default_value = "latest", value_parser = parse_start, allow_hyphen_values = true)]
    pub from: Start,
    /// Exit after this many records; without it, tail forever (through
    /// broker restarts: it reconnects).
    #[arg(long)]
    pub count: Option<u64>,
    /// Read only this segment (repeat for more), not its successors.
    #[arg(long = "segment", value_name = "ID")]
    pub segments: Vec<u32>,
    /// How each record prints, kcat's way: `%k` key, `%s` value, `%t`
    /// topic, `%p` segment, `%o` offset, `%T` timestamp (ms since the Unix
    /// epoch), `%h` headers (`NAME=VALUE`, comma-separated), `%K` and `%S`
    /// key and value length in bytes, `%%` a percent sign; `\n`, `\t` and
    /// `\\` are a newline, a tab and a backslash.
    #[arg(long, short = 'f', default_value = "%k\\t%s\\n", value_parser = parse_format)]
    pub format: RecordFormat,
    /// Print payload references as `ref:PATH length=N crc32c=X` instead of
    /// reading the payloads they name.
    #[arg(long)]
    pub references: bool,
    /// Read on past records damaged on the broker's disk, saying on stderr
    /// which offsets were skipped. Without it, such records stop the read
    /// with an error naming the chunk and the offsets.
    #[arg(long)]
    pub skip_corrupt: bool,
    #[command(flatten)]
    pub payload: PayloadArgs,
    #[command(flatten)]
    pub broker: BrokerArgs,
}

/// A `kelp sub --from` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A position the broker resolves.
    At(FetchFrom),
    /// This many records before the end of each open segment.
    BeforeEnd(u64),
}

/// Parse a `--from` value: everything [`parse_from`] takes, and `-N`.
pub fn parse_start(s: &str) -> anyhow::Result<Start> {
    if let Some(n) = s.strip_prefix('-') {
        if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
            let n = n
                .parse()
                .with_context(|| format!("`{s}`: count out of range"))?;
            return Ok(Start::BeforeEnd(n));
        }
    }
    parse_from(s).map(Start::At)
}

/// Parse a `--broker` value: `HOST:PORT` (an IPv6 host in brackets).
pub fn parse_host_port(s: &str) -> anyhow::Result<String> {
    let Some((host, port)) = s.rsplit_once(':') else {
        bail!("`{s}` is not HOST:PORT (for example 127.0.0.1:7420)");
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        bail!("`{s}` is not HOST:PORT (for example 127.0.0.1:7420)");
    }
    Ok(s.to_owned())
}

/// Parse `--broker`: one HOST:PORT, or several separated by commas.
pub fn parse_broker_list(s: &str) -> anyhow::Result<String> {
    for one in s.split(',') {
        parse_host_port(one.trim())?;
    }
    Ok(s.to_owned())
}

/// Parse a `--header` value: `NAME=VALUE`, split at the first `=`.
pub fn parse_header(s: &str) -> anyhow::Result<(String, String)> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => bail!("`{s}` is not NAME=VALUE"),
    }
}

/// One piece of a `kelp sub --format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatPiece {
    /// Bytes printed as they are.
    Literal(Vec<u8>),
    Key,
    Value,
    Topic,
    Segment,
    Offset,
    Timestamp,
    Headers,
    KeyLength,
    ValueLength,
}

/// A parsed `kelp sub --format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFormat(pub Vec<FormatPiece>);

/// Parse a `--format` value (see [`SubArgs::format`]).
pub fn parse_format(s: &str) -> anyhow::Result<RecordFormat> {
    let mut pieces = Vec::new();
    let mut literal = Vec::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        let field = match c {
            '%' => match chars.next() {
                Some('k') => FormatPiece::Key,
                Some('s') => FormatPiece::Value,
                Some('t') => FormatPiece::Topic,
                Some('p') => FormatPiece::Segment,
                Some('o') => FormatPiece::Offset,
                Some('T') => FormatPiece::Timestamp,
                Some('h') => FormatPiece::Headers,
                Some('K') => FormatPiece::KeyLength,
                Some('S') => FormatPiece::ValueLength,
                Some('%') => {
                    literal.push(b'%');
                    continue;
                }
                Some(other) => bail!("`%{other}` in --format is not a field (see kelp sub --help)"),
                None => bail!("--format ends with a lone `%`"),
            },
            '\\' => {
                match chars.next() {
                    Some('n') => literal.push(b'\n'),
                    Some('t') => literal.push(b'\t'),
                    Some('\\') => literal.push(b'\\'),
                    Some(other) => bail!("`\\{other}` in --format is not \\n, \\t or \\\\"),
                    None => bail!("--format ends with a lone `\\`"),
                }
                continue;
            }
            c => {
                let mut utf8 = [0u8; 4];
                literal.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                continue;
            }
        };
        if !literal.is_empty() {
            pieces.push(FormatPiece::Literal(std::mem::take(&mut literal)));
        }
        pieces.push(field);
    }
    if !literal.is_empty() {
        pieces.push(FormatPiece::Literal(literal));
    }
    Ok(RecordFormat(pieces))
}

#[derive(Debug, Subcommand)]
pub enum ChunkCommand {
    /// Verify a chunk file and print `OFFSET<TAB>TIMESTAMP_MS<TAB>KEY<TAB>VALUE`
    /// per record.
    #[command(after_help = ESCAPING_HELP)]
    Cat {
        /// The chunk file.
        file: PathBuf,
    },
}

/// A `--by-ref-over` value: values longer than this go by reference;
/// `None` (`never`) keeps every value inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByRefOver(pub Option<usize>);

/// Parse a `--by-ref-over` value: bytes, or `never`.
pub fn parse_by_ref_over(s: &str) -> anyhow::Result<ByRefOver> {
    if s == "never" {
        return Ok(ByRefOver(None));
    }
    let bytes = s
        .parse()
        .with_context(|| format!("`{s}`: expected a number of bytes or `never`"))?;
    Ok(ByRefOver(Some(bytes)))
}

/// Parse a `--from` value.
pub fn parse_from(s: &str) -> anyhow::Result<FetchFrom> {
    match s {
        "earliest" => return Ok(FetchFrom::Earliest),
        "latest" => return Ok(FetchFrom::Latest),
        _ => {}
    }
    if let Some(ms) = s.strip_prefix('@') {
        let ms: i64 = ms
            .parse()
            .with_context(|| format!("`{s}`: expected @<milliseconds since the Unix epoch>"))?;
        return Ok(FetchFrom::Timestamp(ms));
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        let offset: u64 = s
            .parse()
            .with_context(|| format!("`{s}`: offset out of range"))?;
        return Ok(FetchFrom::Offset(offset));
    }
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| {
            anyhow!(
                "`{s}` is not earliest, latest, an offset, @<epoch-ms> or an RFC 3339 time ({e})"
            )
        })?;
    let ms = t.unix_timestamp_nanos() / 1_000_000;
    match i64::try_from(ms) {
        Ok(ms) => Ok(FetchFrom::Timestamp(ms)),
        Err(_) => bail!("`{s}`: time out of range"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("kelp").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn from_values() {
        assert_eq!(parse_from("earliest").unwrap(), FetchFrom::Earliest);
        assert_eq!(parse_from("latest").unwrap(), FetchFrom::Latest);
        assert_eq!(parse_from("0").unwrap(), FetchFrom::Offset(0));
        assert_eq!(parse_from("1234").unwrap(), FetchFrom::Offset(1234));
        assert_eq!(
            parse_from("@1700000000123").unwrap(),
            FetchFrom::Timestamp(1_700_000_000_123)
        );
        assert_eq!(
            parse_from("2026-11-30T15:00:00Z").unwrap(),
            FetchFrom::Timestamp(1_796_050_800_000)
        );
        assert_eq!(
            parse_from("2026-11-30T16:00:00.250+01:00").unwrap(),
            FetchFrom::Timestamp(1_796_050_800_250)
        );
        for bad in ["", "soon", "@x", "-5", "99999999999999999999", "2026-11-30"] {
            assert!(parse_from(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn start_values() {
        assert_eq!(parse_start("-5").unwrap(), Start::BeforeEnd(5));
        assert_eq!(parse_start("-0").unwrap(), Start::BeforeEnd(0));
        assert_eq!(parse_start("7").unwrap(), Start::At(FetchFrom::Offset(7)));
        assert_eq!(
            parse_start("earliest").unwrap(),
            Start::At(FetchFrom::Earliest)
        );
        for bad in ["-", "--5", "-x", "-99999999999999999999"] {
            assert!(parse_start(bad).is_err(), "{bad}");
        }
        let Command::Sub(s) = parse(&[
            "sub",
            "a/b",
            "--from",
            "-10",
            "--segment",
            "3",
            "--segment",
            "4",
        ])
        .command
        else {
            panic!()
        };
        assert_eq!(s.from, Start::BeforeEnd(10));
        assert_eq!(s.segments, vec![3, 4]);
    }

    #[test]
    fn host_port_and_header_values() {
        for good in [
            "127.0.0.1:7420",
            "localhost:1",
            "[::1]:7420",
            "kelp.example:65535",
        ] {
            assert_eq!(parse_host_port(good).unwrap(), good);
        }
        assert!(parse_broker_list("10.0.0.1:7420,10.0.0.2:7420").is_ok());
        assert!(parse_broker_list("10.0.0.1:7420,").is_err());
        assert!(parse_broker_list("10.0.0.1:7420,host").is_err());
        for bad in ["127.0.0.1", ":7420", "host:", "host:70000", "host:port", ""] {
            let e = parse_host_port(bad).unwrap_err().to_string();
            assert!(e.contains("is not HOST:PORT"), "{bad}: {e}");
        }
        assert_eq!(
            parse_header("a=b=c").unwrap(),
            ("a".to_owned(), "b=c".to_owned())
        );
        assert_eq!(parse_header("a=").unwrap(), ("a".to_owned(), String::new()));
        assert!(parse_header("=b").is_err());
        assert!(parse_header("ab").is_err());
    }

    #[test]
    fn format_strings() {
        use FormatPiece::*;
        let literal = |s: &str| Literal(s.as_bytes().to_vec());
        let directives = [
            ("%t", Topic),
            ("%p", Segment),
            ("%o", Offset),
            ("%T", Timestamp),
            ("%h", Headers),
            ("%K", KeyLength),
            ("%S", ValueLength),
            ("%k", Key),
            ("%s", Value),
        ];
        for (directive, piece) in directives {
            let format = format!("<{directive}>");
            let expected = [literal("<"), piece, literal(">")];
            assert_eq!(parse_format(&format).unwrap().0, expected, "{format}");
        }
        let pieces = parse_format("%k=%s 100%%\\n").unwrap().0;
        assert_eq!(pieces, [Key, literal("="), Value, literal(" 100%\n")]);
        assert_eq!(
            parse_format("\\t\\\\é").unwrap().0,
            vec![Literal("\t\\é".as_bytes().to_vec())]
        );
        for bad in ["%", "%x", "\\", "\\q"] {
            assert!(parse_format(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults() {
        let Command::Serve(s) = parse(&["serve"]).command else {
            panic!()
        };
        assert_eq!(s.data_dir, PathBuf::from("./kelp-data"));
        assert_eq!(s.listen, "127.0.0.1:7420".parse().unwrap());
        assert_eq!(s.shards, 0);
        assert_eq!(s.kafka, None, "the Kafka gateway is off by default");
        let Command::Serve(s) = parse(&["serve", "--kafka", "127.0.0.1:9092"]).command else {
            panic!()
        };
        assert_eq!(s.kafka, Some("127.0.0.1:9092".parse().unwrap()));
        assert_eq!(s.kafka_advertise, None);
        let kafka = ["serve", "--kafka", "0.0.0.0:9092", "--kafka-advertise"];
        let Command::Serve(s) =
            parse(&[&kafka[..], &["kafka-1.example.com:9092"]].concat()).command
        else {
            panic!()
        };
        assert_eq!(
            s.kafka_advertise.map(|a| a.to_string()),
            Some("kafka-1.example.com:9092".into())
        );
        let refused = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("kelp").chain(args.iter().copied())).is_err()
        };
        assert!(refused(&[&kafka[..], &["no-port"]].concat()));
        assert!(
            refused(&["serve", "--kafka-advertise", "h:9092"]),
            "needs --kafka"
        );

        let Command::Pub(p) = parse(&["pub", "ns/t"]).command else {
            panic!()
        };
        assert_eq!(p.topic, "ns/t");
        assert_eq!(p.ack, AckArg::Leader);
        assert_eq!(p.batch_bytes, 1 << 20);
        assert_eq!(p.linger_ms, 5);
        assert_eq!(p.by_ref_over, ByRefOver(Some(1 << 20)));
        assert!(p.payload.payload_dir.is_none());
        assert!(p.headers.is_empty());
        assert_eq!(p.broker.broker, "127.0.0.1:7420");
        assert_eq!(p.broker.transport, TransportArg::Tcp);
        assert!(p.broker.tls_ca.is_none());

        let Command::Sub(s) = parse(&["sub", "ns/t"]).command else {
            panic!()
        };
        assert_eq!(s.from, Start::At(FetchFrom::Latest));
        assert_eq!(s.count, None);
        assert!(s.segments.is_empty());
        assert_eq!(
            s.format,
            RecordFormat(vec![
                FormatPiece::Key,
                FormatPiece::Literal(b"\t".to_vec()),
                FormatPiece::Value,
                FormatPiece::Literal(b"\n".to_vec()),
            ]),
            "the default prints KEY<TAB>VALUE lines"
        );
        assert!(!s.references);
    }

    #[test]
    fn every_command_parses() {
        let Command::Topic {
            command:
                TopicCommand::Create {
                    topic,
                    segments,
                    replicas,
                    broker,
                },
        } = parse(&[
            "topic",
            "create",
            "ns/t",
            "--replicas",
            "3",
            "--segments",
            "8",
            "--broker",
            "10.0.0.1:9000",
            "--transport",
            "quic",
            "--tls-ca",
            "ca.pem",
        ])
        .command
        else {
            panic!()
        };
        assert_eq!((topic.as_str(), segments, replicas), ("ns/t", 8, Some(3)));
        assert_eq!(broker.broker, "10.0.0.1:9000");
        assert_eq!(broker.transport, TransportArg::Quic);
        assert_eq!(broker.tls_ca, Some(PathBuf::from("ca.pem")));

        assert!(matches!(
            parse(&["topic", "list"]).command,
            Command::Topic {
                command: TopicCommand::List { .. }
            }
        ));
        assert!(matches!(
            parse(&["topic", "describe", "a/b"]).command,
            Command::Topic {
                command: TopicCommand::Describe { .. }
            }
        ));
        assert!(matches!(
            parse(&["topic", "delete", "a/b"]).command,
            Command::Topic {
                command: TopicCommand::Delete { .. }
            }
        ));
        let Command::Topic {
            command:
                TopicCommand::Split {
                    topic,
                    segment,
                    pieces,
                    ..
                },
        } = parse(&["topic", "split", "a/b", "3", "--pieces", "4"]).command
        else {
            panic!()
        };
        assert_eq!((topic.as_str(), segment, pieces), ("a/b", 3, 4));
        let Command::Topic {
            command: TopicCommand::Split { pieces, .. },
        } = parse(&["topic", "split", "a/b", "3"]).command
        else {
            panic!()
        };
        assert_eq!(pieces, 2);
        assert!(
            Cli::try_parse_from(["kelp", "topic", "split", "a/b", "3", "--pieces", "1"]).is_err()
        );
        let Command::Topic {
            command: TopicCommand::Merge { a, b, .. },
        } = parse(&["topic", "merge", "a/b", "5", "6"]).command
        else {
            panic!()
        };
        assert_eq!((a, b), (5, 6));
        let Command::Topic {
            command: TopicCommand::Move { segment, to, .. },
        } = parse(&["topic", "move", "a/b", "5", "--to", "2"]).command
        else {
            panic!()
        };
        assert_eq!((segment, to), (5, Some(2)));
        let Command::Topic {
            command: TopicCommand::Move { to, .. },
        } = parse(&["topic", "move", "a/b", "5"]).command
        else {
            panic!()
        };
        assert_eq!(to, None);
        let Command::Topic {
            command: TopicCommand::Policy(p),
        } = parse(&[
            "topic",
            "policy",
            "a/b",
            "--target-bytes-per-s",
            "1000",
            "--windows-ms",
            "1,2,3,4",
            "--segments-max",
            "8",
        ])
        .command
        else {
            panic!()
        };
        assert_eq!(p.target_bytes_per_s, Some(1000));
        assert_eq!(p.windows_ms, Some(vec![1, 2, 3, 4]));
        assert_eq!(p.segments_max, Some(8));
        assert_eq!(p.cooldown_ms, None);
        assert!(!p.off);
        assert!(Cli::try_parse_from([
            "kelp",
            "topic",
            "policy",
            "a/b",
            "--off",
            "--cooldown-ms",
            "5"
        ])
        .is_err());
        let Command::Cluster { broker, output } =
            parse(&["cluster", "--broker", "10.0.0.1:1"]).command
        else {
            panic!()
        };
        assert_eq!(broker.broker, "10.0.0.1:1");
        assert_eq!(output.output, OutputFormat::Table);
        let Command::Pub(p) = parse(&[
            "pub",
            "a/b",
            "--ack",
            "none",
            "--batch-bytes",
            "4096",
            "--linger-ms",
            "0",
            "--by-ref-over",
            "never",
            "--payload-dir",
            "/srv/kelp/filer",
        ])
        .command
        else {
            panic!()
        };
        assert_eq!((p.ack, p.batch_bytes, p.linger_ms), (AckArg::None, 4096, 0));
        assert_eq!(p.by_ref_over, ByRefOver(None));
        assert_eq!(
            p.payload.payload_dir,
            Some(PathBuf::from("/srv/kelp/filer"))
        );
        let Command::Pub(p) = parse(&["pub", "a/b", "--by-ref-over", "4096"]).command else {
            panic!()
        };
        assert_eq!(p.by_ref_over, ByRefOver(Some(4096)));
        let Command::Sub(s) = parse(&[
            "sub",
            "a/b",
            "--from",
            "earliest",
            "--count",
            "10",
            "--references",
        ])
        .command
        else {
            panic!()
        };
        assert_eq!(
            (s.from, s.count),
            (Start::At(FetchFrom::Earliest), Some(10))
        );
        assert!(s.references);
        assert!(matches!(
            parse(&["chunk", "cat", "x.chunk"]).command,
            Command::Chunk {
                command: ChunkCommand::Cat { .. }
            }
        ));
        let serve = parse(&[
            "serve",
            "--data-dir",
            "/tmp/d",
            "--listen",
            "0.0.0.0:9000",
            "--shards",
            "2",
        ]);
        let Command::Serve(s) = serve.command else {
            panic!()
        };
        assert_eq!(s.shards, 2);
    }

    #[test]
    fn bench_parses() {
        let Command::Bench(b) = parse(&[
            "bench",
            "end-to-end",
            "--transport",
            "quic",
            "--rate",
            "10000",
            "--duration",
            "5",
        ])
        .command
        else {
            panic!()
        };
        assert_eq!(b.scenario, kelp_benches::bench::Scenario::EndToEnd);
        assert_eq!(b.rate, Some(10_000.0));
        assert!(b.count.is_none());
    }

    #[test]
    fn refuses_bad_arguments() {
        let bad: &[&[&str]] = &[
            &["pub", "a/b", "--ack", "quorum"],
            &["sub", "a/b", "--from", "yesterday"],
            &["sub", "a/b", "--from", "-x"],
            &["sub", "a/b", "--format", "%z"],
            &["pub", "a/b", "--header", "novalue"],
            &["topic", "list", "--broker", "127.0.0.1"],
            &["topic", "describe", "a/b", "--output", "yaml"],
            &["topic", "list", "--payload-dir", "/tmp"],
            &["topic", "create", "a/b", "--segments", "-1"],
            &["topic", "create", "a/b", "--replicas", "0"],
            &["topic", "create", "a/b", "--replicas", "6"],
            &["topic", "list", "--transport", "udp"],
            &["serve", "--listen", "not-an-address"],
            &["serve", "--buffer-bytes", "1"],
            &["serve", "--payload-sweep-ms", "0"],
            &["pub", "a/b", "--by-ref-over", "big"],
            &["bench", "produce", "--count", "5", "--duration", "1"],
            &["bench", "produce", "--ack", "all"],
            &["bench", "sideways"],
        ];
        for args in bad {
            assert!(
                Cli::try_parse_from(std::iter::once("kelp").chain(args.iter().copied())).is_err(),
                "{args:?}"
            );
        }
    }
}
