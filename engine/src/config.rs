//! Broker settings: every limit the broker enforces, named with its unit,
//! with the defaults a single-node user gets.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Default address of shard 0; shard `i` listens on the next ports.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:7420";

/// `unflushed_bytes_max` unless set: enough that a burst of a few GB at
/// memory speed is taken at memory speed (the disk catches up behind it),
/// as with Kafka's and Iggy's page-cache writes; a sustained flood runs at
/// the disk's speed.
pub const UNFLUSHED_BYTES_MAX_DEFAULT: u64 = 4 << 30;

/// Uploads in flight per shard: enough to keep an S3 endpoint's
/// round trips overlapped, few enough that a slow store holds few threads.
pub const FILER_UPLOADS_DEFAULT: usize = 4;
/// Filer reads in flight per shard.
pub const FILER_READS_DEFAULT: usize = 4;
/// The broker's chunk cache for filers that keep nothing local.
pub const CHUNK_CACHE_BYTES_DEFAULT: u64 = 256 << 20;

/// Everything a broker needs to start.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Holds `filer/` (the local-directory filer), `buffers/` (unflushed
    /// memory-mapped buffers) and `tls/` (the QUIC certificate).
    pub data_dir: PathBuf,
    /// Shard 0's TCP and QUIC address; shard `i` uses port + `i`.
    pub listen: SocketAddr,
    /// Shards (glommio executors); 0 means one per available core.
    pub shards: usize,
    /// A segment's buffer is sealed and flushed when its batches reach this.
    /// A segment's first buffer is this big, and so is a quiet one's.
    pub buffer_bytes: u64,
    /// A segment that fills its buffers gets bigger ones, each twice the
    /// last, up to this; one that seals them mostly empty gets smaller ones
    /// again, down to `buffer_bytes` (`segment::buffer_size`). At or below
    /// `buffer_bytes`, buffers never grow.
    pub buffer_bytes_max: u64,
    /// ... or when its first batch is this old.
    pub flush_age_ms: u64,
    /// ... or when a `durable` producer waits: at once, unless the last
    /// such early seal is less than this long ago, then once it is (at
    /// most one early seal, so one small chunk, per this period).
    pub durable_linger_ms: u64,
    /// Bytes of one segment's sealed buffers waiting for the filer; past
    /// this, producers of that segment wait (backpressure). One sealed
    /// buffer may always wait, whatever its size. The bytes are buffer
    /// files on local disk (and dirty page cache until the kernel writes
    /// them back), so this bounds disk use, not the broker's memory.
    pub unflushed_bytes_max: u64,
    /// When the disk has no room for a segment's next buffer, its producers
    /// wait up to this long for room (checked every
    /// `segment::DISK_FULL_RETRY`) before they are answered `Storage`; 0
    /// answers at once. Either way nothing is acknowledged that is not
    /// written.
    pub disk_full_wait_ms: u64,
    /// Open connections per shard (TCP and QUIC each).
    pub connections_per_shard_max: usize,
    /// Open native TCP and QUIC connections per shard from one IP address
    /// (each counted apart, as their slots are), and Kafka connections from
    /// one address: one host cannot take every slot.
    pub connections_per_ip_max: usize,
    /// Request bytes one shard holds for its native TCP and QUIC
    /// connections together: frame payloads being received or handled,
    /// and every QUIC connection's receive window (what quinn-proto may
    /// hold for it unread). Past it, a TCP connection waits before it reads
    /// a frame's payload (counted in its frame timeout), a QUIC connection
    /// stops reading its stream and its window stops growing, and a new
    /// QUIC connection with no room for its smallest window is refused:
    /// peers sending large frames slowly, over any number of connections,
    /// cannot grow the broker's memory without bound. At least
    /// `FRAME_PAYLOAD_BYTES_MAX` plus one QUIC connection's smallest window
    /// (64 KiB).
    pub receive_bytes_max: u64,
    /// Requests one connection may have in flight before the broker stops
    /// reading from it.
    pub connection_requests_in_flight_max: usize,
    /// A connection that sent no frame for this long and is owed no answer
    /// is closed (native TCP and Kafka ports); 10 minutes, Kafka's
    /// `connections.max.idle.ms`.
    pub idle_timeout_ms: u64,
    /// A frame whose first byte came this long ago must be all here, or
    /// the connection is closed (native TCP and Kafka ports): a peer trickling bytes
    /// cannot hold a connection slot and a frame's buffer for ever.
    pub frame_timeout_ms: u64,
    /// Requests queued from the Kafka gateway's thread to one shard; past
    /// it the gateway waits for the shard.
    pub inbox_requests_max: usize,
    /// Longest a fetch may wait for data.
    pub fetch_wait_ms_max: u32,
    /// How often a shard checks buffer ages.
    pub tick_ms: u64,
    /// Whether to pin shard `i` to CPU `i`.
    pub pin_shards: bool,
    /// An uploaded payload no record refers to is deleted once it is this
    /// old (and a staged upload not written to for this long).
    pub payload_grace_ms: u64,
    /// How often the orphan payload sweep runs.
    pub payload_sweep_interval_ms: u64,
    /// Bytes of payload pieces one shard holds while they are written to
    /// staging files; a connection waits beyond this.
    pub payload_upload_bytes_max: u64,
    /// Whether flushed chunks' pages leave the page cache once synced, so
    /// new buffers reuse that memory (cheaper appends where fresh memory is
    /// slow; reads of older chunks go to the disk). Off by default.
    pub drop_flushed_pages: bool,
    /// Where the admin HTTP listener serves `/metrics`, `/health` and
    /// `/ready`; `None` (the default) runs none. Port 0 picks a free port
    /// (see `Broker::http_address`).
    pub http_listen: Option<SocketAddr>,
    /// Where the Kafka gateway listens; `None` (the default) runs none.
    /// Port 0 picks a free port (see `Broker::kafka_address`).
    pub kafka_listen: Option<SocketAddr>,
    /// The address Kafka clients are told to connect to (Metadata,
    /// FindCoordinator): `None` (the default) is the listen address, with
    /// 127.0.0.1 for an unspecified one (0.0.0.0 or ::).
    pub kafka_advertised: Option<AdvertisedAddress>,
    /// Whether the Kafka port speaks TLS (Kafka's `SSL` listener, or
    /// `SASL_SSL` with `auth`), with the broker's certificate.
    pub kafka_tls: bool,
    /// Whether the native TCP port speaks TLS (1.3, ALPN `kelp/1`, the
    /// broker's certificate, as QUIC does).
    pub tcp_tls: bool,
    /// The Kafka broker configs the gateway honours (and DescribeConfigs
    /// shows).
    pub kafka: KafkaSettings,
    /// Where chunks, layouts and payloads are stored: `None` (the
    /// default) is the local directory `<data_dir>/filer` alone, and the
    /// filer the control plane names in a cluster; `s3://bucket/prefix`
    /// stores in an S3-compatible bucket (see `s3`).
    pub filer: Option<filer::FilerUrl>,
    /// How to reach the S3-compatible store when the filer is `s3://`,
    /// beyond the standard AWS environment.
    pub s3: filer_s3::S3Settings,
    /// Chunk uploads (and seal markers) one shard has in flight at most,
    /// each on a thread of the shard's upload lane: with a store that
    /// answers in L seconds, a shard flushes at most this many buffers per
    /// L. A segment has one in flight (its chunks are stored in order).
    pub filer_uploads: usize,
    /// Filer reads (chunk ranges, listings) one shard has in flight at
    /// most, on its read lane, apart from the uploads.
    pub filer_reads: usize,
    /// Bytes of chunk ranges read from a filer that keeps nothing local
    /// (S3) that the broker keeps in memory for the next reads, split
    /// evenly between the shards; 0 keeps none. Unused with a local filer.
    pub chunk_cache_bytes: u64,
    /// The control plane to join (`host:port`); `None` (the default) runs
    /// the embedded single-broker control plane.
    pub control: Option<String>,
    /// This broker's id in the cluster: set by the broker when the control
    /// plane takes its registration (kept in `<data dir>/broker-id` for
    /// the next start); `None` on a single broker.
    pub broker_id: Option<u32>,
    /// What the broker tells the control plane it can take, per shard:
    /// the unit of its utilization for placement and rebalancing.
    pub capacity_bytes_per_s_per_shard: u64,
    pub capacity_records_per_s_per_shard: u64,
    /// How often a broker in a cluster reports its segments' load.
    pub load_report_ms: u64,
    /// Users, their permissions and the cluster secret (`--auth FILE`):
    /// with it, every connection to the broker's ports authenticates
    /// before anything else, and the broker authenticates to the rest of
    /// its cluster with the secret. `None` (the default): every client
    /// may do anything, as on a machine of one's own.
    pub auth: Option<std::sync::Arc<auth::AuthFile>>,
    /// The QUIC certificate chain and its private key (PEM files), instead
    /// of the self-signed certificate the broker makes under
    /// `<data_dir>/tls/`.
    pub tls_cert: Option<(PathBuf, PathBuf)>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            data_dir: PathBuf::from("kelp-data"),
            listen: LISTEN_DEFAULT.parse().expect("constant address parses"),
            shards: 0,
            buffer_bytes: 8 << 20,
            buffer_bytes_max: BUFFER_BYTES_MAX_DEFAULT,
            flush_age_ms: 1000,
            drop_flushed_pages: false,
            durable_linger_ms: 10,
            unflushed_bytes_max: UNFLUSHED_BYTES_MAX_DEFAULT,
            disk_full_wait_ms: 0,
            connections_per_shard_max: 1024,
            connections_per_ip_max: 256,
            receive_bytes_max: 256 << 20,
            connection_requests_in_flight_max: 256,
            idle_timeout_ms: 600_000,
            frame_timeout_ms: 30_000,
            inbox_requests_max: 256,
            fetch_wait_ms_max: 30_000,
            tick_ms: 5,
            pin_shards: true,
            payload_grace_ms: 3_600_000,
            payload_sweep_interval_ms: 60_000,
            payload_upload_bytes_max: 64 << 20,
            http_listen: None,
            kafka_listen: None,
            kafka_advertised: None,
            kafka_tls: false,
            tcp_tls: false,
            kafka: KafkaSettings::default(),
            filer: None,
            s3: filer_s3::S3Settings::default(),
            filer_uploads: FILER_UPLOADS_DEFAULT,
            filer_reads: FILER_READS_DEFAULT,
            chunk_cache_bytes: CHUNK_CACHE_BYTES_DEFAULT,
            control: None,
            broker_id: None,
            // About what one shard ingests on this class of host
            // (BENCHMARKS.md).
            capacity_bytes_per_s_per_shard: 500 << 20,
            capacity_records_per_s_per_shard: 1_000_000,
            load_report_ms: 1000,
            auth: None,
            tls_cert: None,
        }
    }
}

impl BrokerConfig {
    /// The number of shards this config resolves to on this machine.
    pub fn shard_count(&self) -> usize {
        if self.shards > 0 {
            self.shards
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    /// Shard `index`'s address (TCP and UDP).
    pub fn shard_address(&self, index: usize) -> SocketAddr {
        let mut addr = self.listen;
        addr.set_port(self.listen.port() + index as u16);
        addr
    }

    pub(crate) fn flush_age(&self) -> Duration {
        Duration::from_millis(self.flush_age_ms)
    }

    pub(crate) fn durable_linger(&self) -> Duration {
        Duration::from_millis(self.durable_linger_ms)
    }

    /// Refuse settings that cannot work, with the reason.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let shards = self.shard_count();
        if shards == 0 || shards > SHARDS_MAX {
            return Err(ConfigError::ShardCount {
                shards,
                max: SHARDS_MAX,
            });
        }
        if u32::from(self.listen.port()) + shards as u32 > 65_536 {
            return Err(ConfigError::PortsPastEnd {
                port: self.listen.port(),
                shards,
            });
        }
        if self.listen.port() == 0 {
            return Err(ConfigError::PortZero);
        }
        for bytes in [self.buffer_bytes, self.buffer_bytes_max] {
            if !(BUFFER_BYTES_MIN..=BUFFER_BYTES_MAX).contains(&bytes) {
                return Err(ConfigError::BufferBytes {
                    bytes,
                    min: BUFFER_BYTES_MIN,
                    max: BUFFER_BYTES_MAX,
                });
            }
        }
        let zero = self
            .at_least_one()
            .into_iter()
            .find(|(value, _)| *value == 0);
        if let Some((_, refusal)) = zero {
            return Err(refusal);
        }
        let frame_bytes_max = u64::from(wire::limits::FRAME_PAYLOAD_BYTES_MAX);
        if self.payload_upload_bytes_max < frame_bytes_max {
            return Err(ConfigError::PayloadUploadBudget {
                bytes: self.payload_upload_bytes_max,
                min: frame_bytes_max,
            });
        }
        // One largest frame's payload must fit beside one QUIC
        // connection's smallest window, or that frame could never be read.
        let quic_window_bytes = crate::quic_shard::window::WINDOW_BYTES_MIN;
        if self.receive_bytes_max < frame_bytes_max + quic_window_bytes {
            return Err(ConfigError::ReceiveBudget {
                bytes: self.receive_bytes_max,
                frame_bytes: frame_bytes_max,
                quic_window_bytes,
            });
        }
        if self.control.is_some() && self.kafka_listen.is_some() {
            return Err(ConfigError::KafkaInCluster);
        }
        if self.kafka_advertised.is_some() && self.kafka_listen.is_none() {
            return Err(ConfigError::AdvertisedWithoutKafka);
        }
        if self.kafka_tls && self.kafka_listen.is_none() {
            return Err(ConfigError::KafkaTlsWithoutKafka);
        }
        if self.tcp_tls && self.control.is_some() {
            return Err(ConfigError::TcpTlsInCluster);
        }
        self.kafka.validate()?;
        let lane = 1..=crate::filer_lane::LANE_THREADS_MAX;
        if !lane.contains(&self.filer_uploads) || !lane.contains(&self.filer_reads) {
            return Err(ConfigError::FilerLanes {
                uploads: self.filer_uploads,
                reads: self.filer_reads,
                max: crate::filer_lane::LANE_THREADS_MAX,
            });
        }
        Ok(())
    }

    /// The settings that must be at least 1, each with the refusal that
    /// names it when it is 0; `validate` refuses the first that is.
    fn at_least_one(&self) -> [(u64, ConfigError); 11] {
        let zero_limit = |setting| ConfigError::ZeroLimit { setting };
        let zero_timeout = |setting| ConfigError::TimeoutZero { setting };
        [
            (self.unflushed_bytes_max, zero_limit("unflushed_bytes_max")),
            (
                self.connection_requests_in_flight_max as u64,
                zero_limit("connection_requests_in_flight_max"),
            ),
            (self.inbox_requests_max as u64, ConfigError::InboxEmpty),
            (
                self.payload_sweep_interval_ms,
                ConfigError::SweepIntervalZero,
            ),
            (
                self.connections_per_ip_max as u64,
                ConfigError::ConnectionsPerIpZero,
            ),
            (self.idle_timeout_ms, zero_timeout("idle_timeout_ms")),
            (self.frame_timeout_ms, zero_timeout("frame_timeout_ms")),
            (self.tick_ms, ConfigError::TickZero),
            (
                self.capacity_bytes_per_s_per_shard,
                ConfigError::CapacityZero,
            ),
            (
                self.capacity_records_per_s_per_shard,
                ConfigError::CapacityZero,
            ),
            (self.load_report_ms, ConfigError::LoadReportZero),
        ]
    }
}

/// Most shards one broker runs.
const SHARDS_MAX: usize = 256;
/// Smallest `buffer_bytes`: 64 KiB.
const BUFFER_BYTES_MIN: u64 = 64 << 10;
/// Largest `buffer_bytes` and `buffer_bytes_max`: 1 GiB.
const BUFFER_BYTES_MAX: u64 = 1 << 30;
/// Default `buffer_bytes_max`: 64 MiB, where a busy segment's fixed cost
/// per buffer stops showing (BENCHMARKS.md, "Buffers that grow").
pub const BUFFER_BYTES_MAX_DEFAULT: u64 = 64 << 20;
// The messages below name these limits in words.
const _: () = assert!(wire::limits::FRAME_PAYLOAD_BYTES_MAX == 8 << 20);

/// Why a broker cannot start with what it was given: a setting out of
/// range ([`BrokerConfig::validate`]), or what a setting names (the
/// control-plane addresses, the broker id kept in the data directory, the
/// cluster's filer, the cluster to join). Shown as `invalid configuration:
/// ..` ([`EngineError::Config`](crate::EngineError::Config)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A Kafka broker setting out of its range.
    #[error("{name} must be {range}, got {value}")]
    KafkaSetting {
        name: &'static str,
        range: String,
        value: u64,
    },
    /// A Kafka advertised address without a Kafka listener.
    #[error("--kafka-advertise needs --kafka (the Kafka gateway is off)")]
    AdvertisedWithoutKafka,
    /// TLS on a Kafka port there is not.
    #[error("--kafka-tls needs --kafka (the Kafka gateway is off)")]
    KafkaTlsWithoutKafka,
    /// TLS on the TCP port of a cluster's broker.
    #[error(
        "--tcp-tls is for a lone broker: a cluster's brokers and control plane reach each \
         other's TCP ports without TLS (use QUIC, which is always TLS)"
    )]
    TcpTlsInCluster,
    /// A shard count outside `1..=max`.
    #[error("--shards must be 1..={max}, got {shards}")]
    ShardCount {
        /// The shards asked for (or found).
        shards: usize,
        /// The most a broker runs.
        max: usize,
    },
    /// Shard ports would run past 65535.
    #[error("listen port + shard count exceeds 65535")]
    PortsPastEnd {
        /// Shard 0's port.
        port: u16,
        /// The shards, one port each.
        shards: usize,
    },
    /// Listen port 0: shards need known ports.
    #[error("listen port 0 is not supported: shards need known ports")]
    PortZero,
    /// A buffer size outside `min..=max`.
    #[error("buffer bytes must be between 64 KiB and 1 GiB")]
    BufferBytes {
        /// The size given.
        bytes: u64,
        /// 64 KiB.
        min: u64,
        /// 1 GiB.
        max: u64,
    },
    /// A limit of 0.
    #[error("limits must be at least 1")]
    ZeroLimit {
        /// The setting that is 0.
        setting: &'static str,
    },
    /// A shard inbox that holds no request.
    #[error("the shard inbox must hold at least one request")]
    InboxEmpty,
    /// A payload sweep interval of 0.
    #[error("the payload sweep interval must be at least 1 ms")]
    SweepIntervalZero,
    /// A payload upload budget smaller than one largest frame.
    #[error("the payload upload budget must hold at least one largest frame (8 MiB)")]
    PayloadUploadBudget {
        /// The budget given.
        bytes: u64,
        /// One largest frame's payload.
        min: u64,
    },
    /// A receive budget smaller than one largest frame plus one QUIC
    /// connection's smallest receive window.
    #[error(
        "--receive-bytes-max ({bytes} bytes) must hold one largest frame ({frame_bytes} bytes) \
         plus one QUIC connection's smallest receive window ({quic_window_bytes} bytes)"
    )]
    ReceiveBudget {
        /// The budget given.
        bytes: u64,
        /// One largest frame's payload.
        frame_bytes: u64,
        /// One QUIC connection's smallest receive window, paid from the
        /// same budget.
        quic_window_bytes: u64,
    },
    /// At most 0 connections per IP address.
    #[error("--connections-per-ip-max must be at least 1")]
    ConnectionsPerIpZero,
    /// An idle or frame timeout of 0.
    #[error("the idle and frame timeouts must be at least 1 ms")]
    TimeoutZero {
        /// The setting that is 0.
        setting: &'static str,
    },
    /// A tick of 0.
    #[error("tick must be at least 1 ms")]
    TickZero,
    /// A Kafka gateway on a broker of a cluster.
    #[error("the Kafka gateway runs only on a single broker (no --control) for now")]
    KafkaInCluster,
    /// A capacity of 0.
    #[error("capacities must be at least 1")]
    CapacityZero,
    /// Upload or read lanes outside `1..=max` threads.
    #[error("--filer-uploads and --filer-reads must be 1..={max}")]
    FilerLanes {
        /// `filer_uploads` as given.
        uploads: usize,
        /// `filer_reads` as given.
        reads: usize,
        /// The most threads one lane runs.
        max: usize,
    },
    /// A load report interval of 0.
    #[error("the load report interval must be at least 1 ms")]
    LoadReportZero,
    /// An empty address in `--control A,B,C`.
    #[error("control-plane addresses {list:?}: an empty address (write A,B,C)")]
    ControlAddressEmpty {
        /// The list as given.
        list: String,
    },
    /// More control-plane addresses than a broker follows.
    #[error("{count} control-plane addresses: at most {max}")]
    ControlAddressesTooMany {
        /// The addresses given.
        count: usize,
        /// The most a broker follows.
        max: usize,
    },
    /// The data directory's broker id file holds something else.
    #[error("{} holds {text:?}, not a broker id", path.display())]
    BrokerIdFile {
        /// The file.
        path: PathBuf,
        /// What it holds (trimmed).
        text: String,
    },
    /// The control plane named a filer this build cannot open.
    #[error("the control plane named a filer kelp cannot use: {source}")]
    ClusterFiler {
        /// Why its URL does not parse.
        source: filer::FilerError,
    },
    /// The broker was given a filer other than its cluster's.
    #[error(
        "this broker was given --filer {given} but its cluster stores in {cluster}; \
         brokers of a cluster share the control plane's filer"
    )]
    FilerMismatch {
        /// The broker's own `--filer`.
        given: filer::FilerUrl,
        /// The filer the control plane named.
        cluster: filer::FilerUrl,
    },
    /// The control plane the broker was pointed at did not take its
    /// registration within the join patience.
    #[error("joining the cluster: {source}")]
    Join {
        /// Why the last attempt failed.
        source: crate::error::RegisterError,
    },
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// What `validate` says of `config`, which must be refused with an
    /// error that matches `pattern`.
    macro_rules! refused_as {
        ($config:expr, $pattern:pat $(if $guard:expr)?) => {{
            let err = $config.validate().unwrap_err();
            assert!(matches!(err, $pattern $(if $guard)?), "{err:?}");
            err
        }};
    }

    fn config() -> BrokerConfig {
        BrokerConfig {
            shards: 2,
            ..BrokerConfig::default()
        }
    }

    #[test]
    fn validate_names_the_setting_and_the_numbers() {
        config().validate().unwrap();
        let err = refused_as!(
            BrokerConfig {
                shards: 300,
                ..config()
            },
            ConfigError::ShardCount {
                shards: 300,
                max: 256
            }
        );
        assert_eq!(err.to_string(), "--shards must be 1..=256, got 300");
        refused_as!(
            BrokerConfig {
                listen: "127.0.0.1:65535".parse().unwrap(),
                ..config()
            },
            ConfigError::PortsPastEnd {
                port: 65535,
                shards: 2
            }
        );
        let err = refused_as!(
            BrokerConfig {
                buffer_bytes: 1,
                ..config()
            },
            ConfigError::BufferBytes {
                bytes: 1,
                min: 65_536,
                max: 1_073_741_824
            }
        );
        assert_eq!(
            err.to_string(),
            "buffer bytes must be between 64 KiB and 1 GiB"
        );
        refused_as!(
            BrokerConfig {
                buffer_bytes_max: 2 << 30,
                ..config()
            },
            ConfigError::BufferBytes {
                bytes: 2_147_483_648,
                min: 65_536,
                max: 1_073_741_824
            }
        );
        refused_as!(
            BrokerConfig {
                connection_requests_in_flight_max: 0,
                ..config()
            },
            ConfigError::ZeroLimit {
                setting: "connection_requests_in_flight_max"
            }
        );
        refused_as!(
            BrokerConfig {
                frame_timeout_ms: 0,
                ..config()
            },
            ConfigError::TimeoutZero {
                setting: "frame_timeout_ms"
            }
        );
        let budget_one = BrokerConfig {
            receive_bytes_max: 1,
            ..config()
        };
        refused_as!(
            budget_one,
            ConfigError::ReceiveBudget { bytes: 1, frame_bytes, .. } if frame_bytes == 8 << 20
        );
        // One largest frame alone is not enough: a QUIC connection's
        // window is paid from the same budget.
        let quic_window = crate::quic_shard::window::WINDOW_BYTES_MIN;
        let budget_one_frame = BrokerConfig {
            receive_bytes_max: 8 << 20,
            ..config()
        };
        refused_as!(
            budget_one_frame,
            ConfigError::ReceiveBudget { bytes, quic_window_bytes, .. }
                if bytes == 8 << 20 && quic_window_bytes == quic_window
        );
        BrokerConfig {
            receive_bytes_max: (8 << 20) + quic_window,
            ..config()
        }
        .validate()
        .unwrap();
        let err = refused_as!(
            BrokerConfig {
                filer_reads: 0,
                ..config()
            },
            ConfigError::FilerLanes { reads: 0, .. }
        );
        assert_eq!(
            err.to_string(),
            format!(
                "--filer-uploads and --filer-reads must be 1..={}",
                crate::filer_lane::LANE_THREADS_MAX
            )
        );
        refused_as!(
            BrokerConfig {
                control: Some("127.0.0.1:7400".into()),
                kafka_listen: Some("127.0.0.1:0".parse().unwrap()),
                ..config()
            },
            ConfigError::KafkaInCluster
        );
        let err = crate::EngineError::from(ConfigError::PortZero);
        assert_eq!(
            err.to_string(),
            "invalid configuration: listen port 0 is not supported: shards need known ports"
        );
    }
}

/// Most partitions a topic created through the Kafka gateway may have.
pub const KAFKA_PARTITIONS_MAX: u32 = 1024;

/// The Kafka broker configs the gateway honours, by their Kafka names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSettings {
    /// `num.partitions`: partitions of a topic auto-created by Metadata, or
    /// created with -1 partitions.
    pub num_partitions: u32,
    /// `group.min.session.timeout.ms` and `group.max.session.timeout.ms`:
    /// the session timeouts a group member may ask for.
    pub group_min_session_timeout_ms: u32,
    pub group_max_session_timeout_ms: u32,
    /// `group.initial.rebalance.delay.ms`: how long a group's first
    /// rebalance waits for more members.
    pub group_initial_rebalance_delay_ms: u32,
}

impl Default for KafkaSettings {
    /// Kafka's defaults.
    fn default() -> Self {
        KafkaSettings {
            num_partitions: 1,
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            group_initial_rebalance_delay_ms: 3_000,
        }
    }
}

impl KafkaSettings {
    fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=KAFKA_PARTITIONS_MAX).contains(&self.num_partitions) {
            return Err(ConfigError::KafkaSetting {
                name: "--kafka-num-partitions",
                range: format!("1..={KAFKA_PARTITIONS_MAX}"),
                value: u64::from(self.num_partitions),
            });
        }
        if self.group_min_session_timeout_ms == 0
            || self.group_min_session_timeout_ms > self.group_max_session_timeout_ms
        {
            return Err(ConfigError::KafkaSetting {
                name: "--kafka-group-min-session-timeout-ms",
                range: format!(
                    "1..=--kafka-group-max-session-timeout-ms ({})",
                    self.group_max_session_timeout_ms
                ),
                value: u64::from(self.group_min_session_timeout_ms),
            });
        }
        Ok(())
    }
}

/// Longest host name of an advertised address (DNS's limit).
pub const ADVERTISED_HOST_BYTES_MAX: usize = 253;

/// A `host:port` that clients are told to connect to; the host is a name
/// or an address, as Kafka's `advertised.listeners` takes it (an IPv6
/// address in brackets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvertisedAddress {
    /// The host name or address, without brackets.
    pub host: String,
    /// The port, not 0.
    pub port: u16,
}

/// Why a text is not a `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdvertisedAddressError {
    /// No `:port` at the end.
    #[error("{0:?} is not host:port")]
    NoPort(String),
    /// The port is not 1..=65535.
    #[error("{0:?}: the port must be 1..=65535")]
    Port(String),
    /// The host is empty, too long, or has characters a host cannot.
    #[error("{0:?}: the host must be 1..=253 letters, digits, '-', '.', ':' or '_'")]
    Host(String),
}

impl std::str::FromStr for AdvertisedAddress {
    type Err = AdvertisedAddressError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| AdvertisedAddressError::NoPort(text.to_owned()))?;
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| AdvertisedAddressError::Port(text.to_owned()))?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':' | '_');
        if host.is_empty() || host.len() > ADVERTISED_HOST_BYTES_MAX || !host.chars().all(valid) {
            return Err(AdvertisedAddressError::Host(text.to_owned()));
        }
        Ok(AdvertisedAddress {
            host: host.to_owned(),
            port,
        })
    }
}

impl AdvertisedAddress {
    /// What a listener bound to `local` advertises when no address is
    /// configured: `local` itself, or 127.0.0.1 (::1) with its port when it
    /// is bound to every address.
    pub fn of_listener(local: SocketAddr) -> AdvertisedAddress {
        let ip = match local.ip() {
            ip if !ip.is_unspecified() => ip,
            std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        };
        AdvertisedAddress {
            host: ip.to_string(),
            port: local.port(),
        }
    }
}

impl std::fmt::Display for AdvertisedAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod advertised_tests {
    use super::*;

    #[test]
    fn advertised_addresses_parse_names_and_addresses_and_refuse_the_rest() {
        let parse = |t: &str| t.parse::<AdvertisedAddress>();
        let ok = |host: &str, port| AdvertisedAddress {
            host: host.into(),
            port,
        };
        assert_eq!(
            parse("kafka-1.example.com:9092"),
            Ok(ok("kafka-1.example.com", 9092))
        );
        assert_eq!(parse("10.0.0.7:19092"), Ok(ok("10.0.0.7", 19092)));
        assert_eq!(parse("[fd00::1]:9092"), Ok(ok("fd00::1", 9092)));
        assert_eq!(
            parse("[fd00::1]:9092").unwrap().to_string(),
            "[fd00::1]:9092"
        );
        assert_eq!(parse("host:9092").unwrap().to_string(), "host:9092");
        for bad in [
            "host",
            "host:",
            "host:0",
            "host:65536",
            ":9092",
            "a b:9092",
            "h/x:1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse(&format!("{}:1", "a".repeat(254))).is_err());
    }

    #[test]
    fn an_unspecified_listener_advertises_loopback() {
        let of = |t: &str| AdvertisedAddress::of_listener(t.parse().unwrap()).to_string();
        assert_eq!(of("0.0.0.0:9092"), "127.0.0.1:9092");
        assert_eq!(of("[::]:9092"), "[::1]:9092");
        assert_eq!(of("10.1.2.3:9092"), "10.1.2.3:9092");
    }
}
