//! `ingest`: how fast a kelp broker takes produce requests in, against raw
//! TCP and raw quinn measured in the same run.
//!
//! One invocation re-executes itself as a child process in broker mode
//! (`--broker-child`), so the broker's CPU time (`/proc/<pid>/stat`) and peak
//! RSS (`VmHWM`) are its own, then runs these cases, each moving the same
//! number of produce frames of the same size:
//!
//! - `raw_tcp`: the frames written to a plain TCP sink (a thread reading
//!   into one reused buffer) — the baseline for `kelp_tcp`;
//! - `raw_quinn`: the frames over one quinn stream to a plain quinn sink
//!   with the broker's certificate, ALPN and transport settings — the
//!   baseline for `kelp_quic`;
//! - `kelp_tcp`: produce requests to the broker over TCP, `--in-flight`
//!   pipelined per connection, answers read by a second task;
//! - `kelp_quic`: the same over one QUIC stream per connection.
//!
//! The load generator builds one batch per segment once and re-sends the
//! same bytes (the broker assigns offsets), encoding each frame into one
//! reused buffer. "Payload" is record values: `--record-bytes` per record;
//! each record also carries an 8-byte key that hashes into its segment.
//! MB and GB are 10^6 and 10^9 payload bytes.
//!
//! After each kelp case `DescribeTopic` must show every record sent. Every
//! case is bounded by `--timeout-s`; any failure exits non-zero.

use std::{
    io::{BufRead, BufReader, Write},
    net::{Ipv4Addr, SocketAddr, TcpListener as StdTcpListener, UdpSocket as StdUdpSocket},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::{mpsc, Arc},
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{anyhow, bail, ensure, Context, Result};
use clap::{ArgAction, Parser, ValueEnum};
use engine::{Broker, BrokerConfig, QuicDriver, TerminationSignals};
use kelp_benches::baseline::{
    cpu_time, current_thread_runtime, parse_reply, quinn_sink, tcp_sink, SinkReport, REPLY_BYTES,
    SERVER_NAME,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    sync::Semaphore,
};
use wire::{
    frame::{FrameHeader, FRAME_HEADER_BYTES},
    message::TopicInfo,
    AckMode, BatchBuilder, Request, Response,
};

const GIGABYTE: f64 = 1e9;
const MEGABYTE: f64 = 1e6;
/// Printed by the broker child once it serves.
const BROKER_READY_LINE: &str = "kelp-ingest-broker-ready";
/// How long the broker child may take to start, and to flush and stop.
const BROKER_START_TIMEOUT: Duration = Duration::from_secs(60);
const BROKER_STOP_TIMEOUT: Duration = Duration::from_secs(120);
/// Pause after a kelp case, so the broker flushes that case's last buffers
/// (sealed by age after 1 s) before the next case's CPU is counted.
const SETTLE: Duration = Duration::from_millis(1500);
/// Between `DescribeTopic` polls while waiting for `--ack none` records.
const DESCRIBE_POLL_INTERVAL: Duration = Duration::from_millis(2);
/// Attempts at finding `shards` consecutive free ports.
const PORT_ATTEMPTS_MAX: usize = 50;
/// Every record's key: a u64, chosen so that it hashes into its segment.
const KEY_BYTES: usize = 8;
const NAMESPACE: &str = "bench";
/// The broker's QUIC transport settings (engine `tls::server_config`), so
/// the raw quinn sink runs the same protocol configuration.
const QUIC_STREAM_RECEIVE_WINDOW_BYTES: u32 = 16 << 20;
const QUIC_RECEIVE_WINDOW_BYTES: u32 = 32 << 20;
const QUIC_SEND_WINDOW_BYTES: u64 = 32 << 20;

/// The broker's QUIC driver, as a command-line value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Driver {
    Tokio,
    Shard,
}

#[derive(Parser, Debug, Clone)]
#[command(
    about = "kelp ingest throughput over TCP and QUIC, with raw TCP and raw quinn \
                   baselines measured in the same run"
)]
struct Args {
    /// MiB of record payload each case moves.
    #[arg(long, default_value_t = 1024)]
    total_mib: u64,
    /// Payload bytes per record (the value; an 8-byte key comes on top).
    #[arg(long, default_value_t = 1000)]
    record_bytes: usize,
    /// Records per batch (one batch per produce request).
    #[arg(long, default_value_t = 1000)]
    batch_records: u32,
    /// Produce requests outstanding per connection.
    #[arg(long, default_value_t = 32)]
    in_flight: usize,
    #[arg(long, value_enum, default_value_t = Ack::Leader)]
    ack: Ack,
    /// Segments of each case's topic; one connection per owning shard.
    #[arg(long, default_value_t = 1)]
    segments: u32,
    /// Broker shards.
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// Pin broker shard i to CPU i.
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    pin_shards: bool,
    /// The broker's buffer size, MiB.
    #[arg(long, default_value_t = 8)]
    buffer_mib: u64,
    /// How the broker drives QUIC: quinn on a tokio thread handing frames
    /// to the shard, or quinn-proto on the shard itself.
    #[arg(long, value_enum, default_value_t = Driver::Tokio)]
    quic_driver: Driver,
    /// Time limit of each case, seconds.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Tiny sizes for CI: every case in a few seconds.
    #[arg(long)]
    smoke: bool,
    /// Cases to run, comma separated; ratios need the raw cases.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Case::ALL)]
    cases: Vec<Case>,
    /// Internal: run as the broker child.
    #[arg(long, hide = true)]
    broker_child: bool,
    /// Internal: the broker child's data directory.
    #[arg(long, hide = true)]
    data_dir: Option<PathBuf>,
    /// Internal: the broker child's shard-0 address.
    #[arg(long, hide = true)]
    listen: Option<SocketAddr>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Ack {
    None,
    Leader,
    Durable,
}

impl Ack {
    fn mode(self) -> AckMode {
        match self {
            Ack::None => AckMode::None,
            Ack::Leader => AckMode::Leader,
            Ack::Durable => AckMode::Durable,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Case {
    #[value(name = "raw_tcp")]
    RawTcp,
    #[value(name = "raw_quinn")]
    RawQuinn,
    #[value(name = "kelp_tcp")]
    KelpTcp,
    #[value(name = "kelp_quic")]
    KelpQuic,
}

impl Case {
    const ALL: [Case; 4] = [Case::RawTcp, Case::RawQuinn, Case::KelpTcp, Case::KelpQuic];

    fn name(self) -> &'static str {
        match self {
            Case::RawTcp => "raw_tcp",
            Case::RawQuinn => "raw_quinn",
            Case::KelpTcp => "kelp_tcp",
            Case::KelpQuic => "kelp_quic",
        }
    }

    /// The raw case a kelp case is compared with.
    fn baseline(self) -> Option<Case> {
        match self {
            Case::KelpTcp => Some(Case::RawTcp),
            Case::KelpQuic => Some(Case::RawQuinn),
            Case::RawTcp | Case::RawQuinn => None,
        }
    }

    /// The topic a case's frames name. A raw case sends the frames of its
    /// kelp case byte for byte (only kelp cases write to the topic).
    fn topic(self) -> String {
        let transport = match self {
            Case::RawTcp | Case::KelpTcp => "tcp",
            Case::RawQuinn | Case::KelpQuic => "quic",
        };
        format!("{NAMESPACE}/ingest-{transport}")
    }
}

fn main() -> Result<()> {
    let mut args = Args::parse();
    if args.broker_child {
        return broker_child(&args);
    }
    if args.smoke {
        args.total_mib = 4;
        args.record_bytes = 100;
        args.batch_records = 100;
        args.timeout_s = args.timeout_s.min(30);
    }
    ensure!(args.record_bytes > 0, "--record-bytes must be at least 1");
    ensure!(
        args.batch_records > 0 && args.in_flight > 0 && args.segments > 0,
        "--batch-records, --in-flight and --segments must be at least 1"
    );
    let data_dir = TempDir::create()?;
    let listen = free_base_port(args.shards)?;
    let broker = BrokerChild::start(&args, data_dir.path(), listen)?;
    eprintln!(
        "broker child pid {} serving at {listen}, data in {}",
        broker.pid(),
        data_dir.path().display()
    );
    let mut bench = Bench::new(&args, &broker, listen, data_dir.path())?;
    let mut results = Vec::new();
    for &case in &args.cases {
        let result = bench
            .run(case)
            .with_context(|| format!("case {} failed", case.name()))?;
        results.push(result);
    }
    let workload = bench.workload.clone();
    drop(bench);
    let peak_rss_bytes = broker.peak_rss_bytes()?;
    broker.stop()?;
    report(&results, &args, &workload, peak_rss_bytes)
}

// ------------------------------------------------------------ broker child

/// Broker mode: start the broker, say so on stdout, serve until stdin
/// closes (the parent ended) or SIGINT/SIGTERM, then flush and stop.
fn broker_child(args: &Args) -> Result<()> {
    let data_dir = args
        .data_dir
        .clone()
        .context("--broker-child needs --data-dir")?;
    let listen = args.listen.context("--broker-child needs --listen")?;
    let signals = TerminationSignals::block();
    let broker = Broker::start(BrokerConfig {
        data_dir,
        listen,
        shards: args.shards,
        pin_shards: args.pin_shards,
        buffer_bytes: args.buffer_mib << 20,
        quic_driver: match args.quic_driver {
            Driver::Tokio => QuicDriver::Tokio,
            Driver::Shard => QuicDriver::Shard,
        },
        ..Default::default()
    })?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{BROKER_READY_LINE}")?;
    stdout.flush()?;
    drop(stdout);
    thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(|| {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            // Process-directed, so the thread blocked in sigwait takes it.
            // SAFETY: plain syscalls on this process.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGTERM);
            }
        })?;
    signals.wait();
    broker.stop()?;
    Ok(())
}

/// The broker child as the parent sees it. Dropping it kills the child if
/// it was not stopped.
struct BrokerChild {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl BrokerChild {
    fn start(args: &Args, data_dir: &Path, listen: SocketAddr) -> Result<Self> {
        let exe = std::env::current_exe().context("path of this program")?;
        let mut child = Command::new(exe)
            .arg("--broker-child")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg(listen.to_string())
            .arg("--shards")
            .arg(args.shards.to_string())
            .arg("--pin-shards")
            .arg(args.pin_shards.to_string())
            .arg("--buffer-mib")
            .arg(args.buffer_mib.to_string())
            .arg("--quic-driver")
            .arg(match args.quic_driver {
                Driver::Tokio => "tokio",
                Driver::Shard => "shard",
            })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("start the broker child")?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().context("broker child stdout")?;
        let broker = BrokerChild { child, stdin };
        let (ready_tx, ready_rx) = mpsc::channel();
        thread::Builder::new()
            .name("broker-stdout".into())
            .spawn(move || {
                let mut lines = BufReader::new(stdout).lines();
                let first = lines.next();
                let _ = ready_tx.send(first);
                // Keep draining so the child never blocks on a full pipe.
                for _ in lines {}
            })?;
        match ready_rx.recv_timeout(BROKER_START_TIMEOUT) {
            Ok(Some(Ok(line))) if line == BROKER_READY_LINE => Ok(broker),
            Ok(other) => bail!("broker child did not start: {other:?}"),
            Err(_) => bail!(
                "broker child did not start within {} s",
                BROKER_START_TIMEOUT.as_secs()
            ),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// User + system CPU of every thread of the child so far.
    fn cpu(&self) -> Result<Duration> {
        let path = format!("/proc/{}/stat", self.pid());
        let stat = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
        // Fields after the command name (which may hold spaces) start at
        // field 3 (state); utime and stime are fields 14 and 15.
        let after_name = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest)
            .context("malformed /proc stat")?;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks = |i: usize| -> Result<u64> {
            fields
                .get(i - 3)
                .context("short /proc stat")?
                .parse::<u64>()
                .context("/proc stat field")
        };
        // SAFETY: sysconf reads a constant.
        let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        ensure!(ticks_per_s > 0, "sysconf(_SC_CLK_TCK) failed");
        let total = ticks(14)? + ticks(15)?;
        Ok(Duration::from_secs_f64(total as f64 / ticks_per_s as f64))
    }

    /// The child's peak resident set (`VmHWM`).
    fn peak_rss_bytes(&self) -> Result<u64> {
        let path = format!("/proc/{}/status", self.pid());
        let status = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
        let line = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .context("no VmHWM in /proc status")?;
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .context("malformed VmHWM")?
            .parse()
            .context("VmHWM value")?;
        Ok(kib << 10)
    }

    /// Close the child's stdin, which makes it flush and stop, and check
    /// that it exited cleanly.
    fn stop(mut self) -> Result<()> {
        drop(self.stdin.take());
        let deadline = Instant::now() + BROKER_STOP_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                ensure!(status.success(), "broker child exited with {status}");
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "broker child did not stop within {} s",
                BROKER_STOP_TIMEOUT.as_secs()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for BrokerChild {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn create() -> Result<Self> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path =
            std::env::temp_dir().join(format!("kelp-ingest-{}-{nanos:08x}", std::process::id()));
        std::fs::create_dir(&path).with_context(|| format!("create {}", path.display()))?;
        Ok(TempDir(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!("could not remove {}: {e}", self.0.display());
        }
    }
}

/// A port `p` on 127.0.0.1 such that `p .. p + shards` are free for both
/// TCP and UDP right now.
fn free_base_port(shards: usize) -> Result<SocketAddr> {
    for _ in 0..PORT_ATTEMPTS_MAX {
        let probe = StdTcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let base = probe.local_addr()?.port();
        drop(probe);
        if usize::from(base) + shards > usize::from(u16::MAX) {
            continue;
        }
        let all_free = (0..shards as u16).all(|i| {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, base + i));
            StdTcpListener::bind(addr).is_ok() && StdUdpSocket::bind(addr).is_ok()
        });
        if all_free {
            return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, base)));
        }
    }
    bail!("no {shards} consecutive free ports found on 127.0.0.1")
}

// --------------------------------------------------------------- workload

/// What every case sends: the same number of frames of the same size.
#[derive(Debug, Clone)]
struct Workload {
    record_bytes: usize,
    batch_records: u32,
    /// Produce requests per case.
    batches: u64,
    in_flight: usize,
    ack: AckMode,
    /// One pre-built batch per segment, indexed by segment id.
    segment_batches: Vec<Arc<Vec<u8>>>,
}

impl Workload {
    fn records(&self) -> u64 {
        self.batches * u64::from(self.batch_records)
    }

    fn payload_bytes(&self) -> u64 {
        self.records() * self.record_bytes as u64
    }

    /// Bytes of one produce frame naming `topic`.
    fn frame_bytes(&self, topic: &str) -> usize {
        let mut frame = Vec::new();
        let batch = &self.segment_batches[0];
        Request::Produce {
            topic,
            segment: 0,
            ack: self.ack,
            batch,
        }
        .encode(0, &mut frame);
        frame.len()
    }

    /// Batch `index` of a case goes to segment `index % segments`.
    fn segment_of(&self, index: u64) -> u32 {
        (index % self.segment_batches.len() as u64) as u32
    }
}

/// One batch of `records` records whose keys hash into `[start, end)`.
fn build_batch(start: u32, end: u64, records: u32, record_bytes: usize) -> Result<Vec<u8>> {
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
    Ok(builder.finish(0, 0).to_vec())
}

// ------------------------------------------------------------------ cases

struct CaseResult {
    case: Case,
    payload_bytes: u64,
    records: u64,
    elapsed: Duration,
    /// Broker process CPU (kelp cases) or sink thread CPU (raw cases).
    server_cpu: Duration,
    /// The load generator's thread.
    client_cpu: Duration,
}

impl CaseResult {
    fn mb_per_s(&self) -> f64 {
        self.payload_bytes as f64 / MEGABYTE / self.elapsed.as_secs_f64()
    }

    fn records_per_s(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64()
    }

    fn per_gb(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() / (self.payload_bytes as f64 / GIGABYTE)
    }
}

/// What a load generator thread reports.
struct ClientReport {
    elapsed: Duration,
    cpu: Duration,
}

/// The state one run shares between cases.
struct Bench<'a> {
    broker: &'a BrokerChild,
    workload: Arc<Workload>,
    /// Each shard's address (TCP and QUIC).
    shard_addresses: Vec<SocketAddr>,
    /// The broker's identity, also used by the raw quinn sink.
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
    quic_client: quinn::ClientConfig,
    timeout: Duration,
    kelp_cases_run: usize,
}

impl<'a> Bench<'a> {
    fn new(
        args: &Args,
        broker: &'a BrokerChild,
        listen: SocketAddr,
        data_dir: &Path,
    ) -> Result<Self> {
        let shard_addresses: Vec<SocketAddr> = (0..args.shards as u16)
            .map(|i| SocketAddr::new(listen.ip(), listen.port() + i))
            .collect();
        let timeout = Duration::from_secs(args.timeout_s);
        // Every case's topic is created now, so the batches can be built
        // for the layout the broker chose, and raw cases send the same bytes.
        let admin = shard_addresses[0];
        let mut topics: Vec<String> = args.cases.iter().map(|c| c.topic()).collect();
        topics.sort();
        topics.dedup();
        let mut layout = None;
        for topic in topics {
            let request = Request::CreateTopic {
                topic,
                segments: args.segments,
            };
            let topic = run_with_timeout(timeout, move |rt| {
                rt.block_on(admin_request(admin, &request))
            })
            .context("create topic")?;
            layout.get_or_insert(topic);
        }
        let layout = layout.context("no cases to run")?;
        ensure!(
            layout.segments.len() == args.segments as usize,
            "asked for {} segments, the broker made {}",
            args.segments,
            layout.segments.len()
        );
        let mut segment_batches = Vec::new();
        for (index, segment) in layout.segments.iter().enumerate() {
            ensure!(segment.id as usize == index, "segment ids are not 0..n");
            segment_batches.push(Arc::new(build_batch(
                segment.start,
                segment.end,
                args.batch_records,
                args.record_bytes,
            )?));
        }
        let batch_payload_bytes = u64::from(args.batch_records) * args.record_bytes as u64;
        let workload = Workload {
            record_bytes: args.record_bytes,
            batch_records: args.batch_records,
            batches: ((args.total_mib << 20) / batch_payload_bytes).max(1),
            in_flight: args.in_flight,
            ack: args.ack.mode(),
            segment_batches,
        };
        let tls_dir = data_dir.join("tls");
        let cert = CertificateDer::from(std::fs::read(tls_dir.join("cert.der"))?);
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(std::fs::read(
            tls_dir.join("key.der"),
        )?));
        let quic_client = quic_client_config(cert.clone())?;
        Ok(Bench {
            broker,
            workload: Arc::new(workload),
            shard_addresses,
            cert,
            key,
            quic_client,
            timeout,
            kelp_cases_run: 0,
        })
    }

    fn run(&mut self, case: Case) -> Result<CaseResult> {
        let deadline = Instant::now() + self.timeout;
        let (client, server_cpu) = match case {
            Case::RawTcp | Case::RawQuinn => self.run_raw(case, deadline)?,
            Case::KelpTcp | Case::KelpQuic => {
                if self.kelp_cases_run > 0 {
                    thread::sleep(SETTLE);
                }
                self.kelp_cases_run += 1;
                self.run_kelp(case, deadline)?
            }
        };
        Ok(CaseResult {
            case,
            payload_bytes: self.workload.payload_bytes(),
            records: self.workload.records(),
            elapsed: client.elapsed,
            server_cpu,
            client_cpu: client.cpu,
        })
    }

    /// A sink thread, then a client thread that sends every frame and
    /// waits for the sink's count.
    fn run_raw(&self, case: Case, deadline: Instant) -> Result<(ClientReport, Duration)> {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let (sink_tx, sink_rx) = mpsc::channel::<Result<SinkReport>>();
        let addr = if case == Case::RawTcp {
            let listener = StdTcpListener::bind(loopback)?;
            listener.set_nonblocking(true)?;
            let addr = listener.local_addr()?;
            spawn_named("sink-tcp", move || {
                let _ = sink_tx.send(tcp_sink(listener));
            })?;
            addr
        } else {
            let socket = StdUdpSocket::bind(loopback)?;
            let addr = socket.local_addr()?;
            let config = quic_server_config(self.cert.clone(), self.key.clone_key())?;
            spawn_named("sink-quinn", move || {
                let _ = sink_tx.send(quinn_sink(socket, config));
            })?;
            addr
        };
        let workload = self.workload.clone();
        let quic_client = self.quic_client.clone();
        let topic = case.topic();
        let expected = workload.batches * workload.frame_bytes(&topic) as u64;
        let client = run_client(deadline, move |rt| {
            rt.block_on(async move {
                let (confirmed, elapsed) = if case == Case::RawTcp {
                    raw_tcp_client(addr, &workload, &topic).await?
                } else {
                    raw_quinn_client(addr, &workload, &topic, quic_client).await?
                };
                ensure!(
                    confirmed == expected,
                    "sink took {confirmed} bytes, {expected} were sent"
                );
                Ok(elapsed)
            })
        })?;
        let left = deadline.saturating_duration_since(Instant::now());
        let sink = sink_rx
            .recv_timeout(left)
            .map_err(|_| anyhow!("sink did not finish in time"))?
            .context("sink")?;
        ensure!(
            sink.bytes == expected,
            "sink counted {}, {expected} were sent",
            sink.bytes
        );
        Ok((client, sink.cpu))
    }

    /// Produce every batch to the case's topic, one connection per owning
    /// shard, then check the topic holds every record.
    fn run_kelp(&self, case: Case, deadline: Instant) -> Result<(ClientReport, Duration)> {
        let workload = self.workload.clone();
        let topic = case.topic();
        let admin = self.shard_addresses[0];
        let layout = run_with_timeout(self.timeout, {
            let topic = topic.clone();
            move |rt| rt.block_on(admin_request(admin, &Request::DescribeTopic { topic }))
        })?;
        // Batches per connection: each connection takes the batches of the
        // segments its shard owns, in the order the whole case would send them.
        let mut per_shard: Vec<(SocketAddr, Vec<u64>)> = Vec::new();
        for index in 0..workload.batches {
            let segment = &layout.segments[workload.segment_of(index) as usize];
            let addr = *self
                .shard_addresses
                .get(usize::from(segment.shard))
                .context("segment owned by an unknown shard")?;
            match per_shard.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, batches)) => batches.push(index),
                None => per_shard.push((addr, vec![index])),
            }
        }
        let quic_client = self.quic_client.clone();
        let broker_cpu_before = self.broker.cpu()?;
        let client = run_client(deadline, move |rt| {
            rt.block_on(async move {
                let topic: Arc<str> = topic.into();
                let mut connections = tokio::task::JoinSet::new();
                let endpoint = if case == Case::KelpQuic {
                    let mut endpoint =
                        quinn::Endpoint::client(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
                    endpoint.set_default_client_config(quic_client);
                    Some(endpoint)
                } else {
                    None
                };
                // Connect everything before the clock starts.
                for (addr, batches) in per_shard {
                    let plan = ConnectionPlan {
                        workload: workload.clone(),
                        topic: topic.clone(),
                        batches,
                    };
                    match &endpoint {
                        None => {
                            let stream = tokio::net::TcpStream::connect(addr).await?;
                            stream.set_nodelay(true)?;
                            let (read, write) = stream.into_split();
                            connections.spawn(async move {
                                plan.produce(read, write).await?;
                                anyhow::Ok(())
                            });
                        }
                        Some(endpoint) => {
                            let connection = endpoint.connect(addr, SERVER_NAME)?.await?;
                            let (send, recv) = connection.open_bi().await?;
                            connections.spawn(async move {
                                let mut send = plan.produce(recv, send).await?;
                                send.finish()?;
                                // The broker closes once it has read the
                                // whole stream; closing first could drop
                                // unacknowledged (`--ack none`) frames.
                                connection.closed().await;
                                anyhow::Ok(())
                            });
                        }
                    }
                }
                let start = Instant::now();
                while let Some(joined) = connections.join_next().await {
                    joined??;
                }
                if workload.ack == AckMode::None {
                    // Nothing answers these; the topic tells when they are in.
                    wait_for_records(admin, &topic, workload.records()).await?;
                }
                let elapsed = start.elapsed();
                if let Some(endpoint) = endpoint {
                    endpoint.wait_idle().await;
                }
                Ok(elapsed)
            })
        });
        let broker_cpu = self.broker.cpu()?.saturating_sub(broker_cpu_before);
        let client = client?;
        // Correctness: every record sent is in the topic.
        let topic = case.topic();
        let layout = run_with_timeout(
            deadline.saturating_duration_since(Instant::now()),
            move |rt| rt.block_on(admin_request(admin, &Request::DescribeTopic { topic })),
        )?;
        let stored: u64 = layout.segments.iter().map(|s| s.next_offset).sum();
        ensure!(
            stored == self.workload.records(),
            "topic {} holds {stored} records, {} were sent",
            layout.name,
            self.workload.records()
        );
        Ok((client, broker_cpu))
    }
}

fn spawn_named(name: &str, body: impl FnOnce() + Send + 'static) -> Result<()> {
    thread::Builder::new().name(name.into()).spawn(body)?;
    Ok(())
}

/// Runs `body` on a fresh thread with its own current-thread runtime and
/// waits for it until `deadline`. The thread's own CPU is the client's.
fn run_client(
    deadline: Instant,
    body: impl FnOnce(&tokio::runtime::Runtime) -> Result<Duration> + Send + 'static,
) -> Result<ClientReport> {
    let (tx, rx) = mpsc::channel();
    spawn_named("load", move || {
        let result = current_thread_runtime().and_then(|rt| {
            let elapsed = body(&rt)?;
            drop(rt);
            Ok(ClientReport {
                elapsed,
                cpu: cpu_time(libc::RUSAGE_THREAD),
            })
        });
        let _ = tx.send(result);
    })?;
    let left = deadline.saturating_duration_since(Instant::now());
    rx.recv_timeout(left)
        .map_err(|_| anyhow!("timed out"))?
        .context("load generator")
}

/// The same for a short request that is not measured.
fn run_with_timeout<T: Send + 'static>(
    timeout: Duration,
    body: impl FnOnce(&tokio::runtime::Runtime) -> Result<T> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = mpsc::channel();
    spawn_named("admin", move || {
        let _ = tx.send(current_thread_runtime().and_then(|rt| body(&rt)));
    })?;
    rx.recv_timeout(timeout).map_err(|_| anyhow!("timed out"))?
}

// ----------------------------------------------------------- load clients

/// One connection's share of a kelp case.
struct ConnectionPlan {
    workload: Arc<Workload>,
    topic: Arc<str>,
    /// Indexes of the case's batches this connection sends, in order; the
    /// request id of batch `i` is `i`.
    batches: Vec<u64>,
}

impl ConnectionPlan {
    /// Sends every batch with at most `in_flight` unanswered, while a
    /// second future reads and checks the answers. Returns the writer.
    async fn produce<R, W>(&self, read: R, write: W) -> Result<W>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let acked = self.workload.ack != AckMode::None;
        let slots = Semaphore::new(self.workload.in_flight);
        let send = send_frames(
            write,
            &self.workload,
            &self.topic,
            self.batches.iter().copied(),
            acked.then_some(&slots),
        );
        if !acked {
            return send.await;
        }
        let receive = self.read_acks(read, &slots);
        let (write, ()) = tokio::try_join!(send, receive)?;
        Ok(write)
    }

    async fn read_acks<R: AsyncRead + Unpin>(&self, mut read: R, slots: &Semaphore) -> Result<()> {
        let mut answered = vec![false; self.batches.len()];
        let mut payload = Vec::new();
        for _ in 0..self.batches.len() {
            let header = read_frame(&mut read, &mut payload).await?;
            let id = u64::from(header.request_id);
            let slot = self
                .batches
                .binary_search(&id)
                .map_err(|_| anyhow!("answer to unknown request {id}"))?;
            match Response::decode(header.frame_type, &payload)? {
                Response::Produced {
                    segment,
                    record_count,
                    ..
                } => {
                    ensure!(
                        segment == self.workload.segment_of(id)
                            && record_count == self.workload.batch_records,
                        "request {id}: produced {record_count} records in segment {segment}"
                    );
                }
                Response::Error { code, message } => {
                    bail!("request {id}: broker error {code:?}: {message}")
                }
                other => bail!("request {id}: unexpected {:?}", other.frame_type()),
            }
            ensure!(!answered[slot], "request {id} answered twice");
            answered[slot] = true;
            slots.add_permits(1);
        }
        Ok(())
    }
}

/// Writes the produce frame of every batch in `batches`, encoding each into
/// one reused buffer. With `slots`, each frame first takes a slot that the
/// reader of its answer gives back.
async fn send_frames<W: AsyncWrite + Unpin>(
    mut write: W,
    workload: &Workload,
    topic: &str,
    batches: impl Iterator<Item = u64>,
    slots: Option<&Semaphore>,
) -> Result<W> {
    let mut frame = Vec::with_capacity(workload.frame_bytes(topic));
    for index in batches {
        if let Some(slots) = slots {
            slots.acquire().await?.forget();
        }
        let segment = workload.segment_of(index);
        frame.clear();
        Request::Produce {
            topic,
            segment,
            ack: workload.ack,
            batch: &workload.segment_batches[segment as usize],
        }
        .encode(u32::try_from(index)?, &mut frame);
        write.write_all(&frame).await?;
    }
    write.flush().await?;
    Ok(write)
}

/// Reads one frame; its verified payload is left in `payload`.
async fn read_frame<R: AsyncRead + Unpin>(
    read: &mut R,
    payload: &mut Vec<u8>,
) -> Result<FrameHeader> {
    let mut header_bytes = [0u8; FRAME_HEADER_BYTES];
    read.read_exact(&mut header_bytes)
        .await
        .context("read frame header")?;
    let header = FrameHeader::decode(&header_bytes)?;
    payload.resize(header.payload_bytes as usize, 0);
    read.read_exact(payload)
        .await
        .context("read frame payload")?;
    header.verify_payload(payload)?;
    Ok(header)
}

/// The raw TCP case: every frame to the sink, then its count; timed from
/// the first write to the count.
async fn raw_tcp_client(
    addr: SocketAddr,
    workload: &Workload,
    topic: &str,
) -> Result<(u64, Duration)> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut read, write) = stream.into_split();
    let start = Instant::now();
    let mut write = send_frames(write, workload, topic, 0..workload.batches, None).await?;
    write.shutdown().await?;
    let mut reply = Vec::with_capacity(REPLY_BYTES);
    read.read_to_end(&mut reply).await?;
    Ok((parse_reply(&reply)?, start.elapsed()))
}

/// The raw quinn case: every frame over one stream, then the sink's count.
async fn raw_quinn_client(
    addr: SocketAddr,
    workload: &Workload,
    topic: &str,
    config: quinn::ClientConfig,
) -> Result<(u64, Duration)> {
    let mut endpoint = quinn::Endpoint::client(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    endpoint.set_default_client_config(config);
    let connection = endpoint.connect(addr, SERVER_NAME)?.await?;
    let (send, mut recv) = connection.open_bi().await?;
    let start = Instant::now();
    let mut send = send_frames(send, workload, topic, 0..workload.batches, None).await?;
    send.finish()?;
    // The count comes only after the sink has taken every byte.
    let reply = recv.read_to_end(REPLY_BYTES).await?;
    let elapsed = start.elapsed();
    connection.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    Ok((parse_reply(&reply)?, elapsed))
}

/// One admin request on its own TCP connection; the answer must be a topic.
async fn admin_request(addr: SocketAddr, request: &Request<'_>) -> Result<TopicInfo> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let mut frame = Vec::new();
    request.encode(1, &mut frame);
    stream.write_all(&frame).await?;
    let mut payload = Vec::new();
    let header = read_frame(&mut stream, &mut payload).await?;
    match Response::decode(header.frame_type, &payload)? {
        Response::Topic(topic) => Ok(topic),
        Response::Error { code, message } => bail!("broker error {code:?}: {message}"),
        other => bail!("unexpected {:?}", other.frame_type()),
    }
}

/// Polls `DescribeTopic` until the topic holds `records` records.
async fn wait_for_records(admin: SocketAddr, topic: &str, records: u64) -> Result<()> {
    loop {
        let layout = admin_request(
            admin,
            &Request::DescribeTopic {
                topic: topic.to_string(),
            },
        )
        .await?;
        if layout.segments.iter().map(|s| s.next_offset).sum::<u64>() >= records {
            return Ok(());
        }
        tokio::time::sleep(DESCRIBE_POLL_INTERVAL).await;
    }
}

// -------------------------------------------------------------------- TLS

/// The client side of every QUIC case: TLS 1.3, ALPN `kelp/1`, trusting the
/// broker's self-signed certificate, quinn's default transport settings.
fn quic_client_config(cert: CertificateDer<'static>) -> Result<quinn::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert)?;
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![engine::ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    Ok(quinn::ClientConfig::new(Arc::new(quic)))
}

/// The raw quinn sink's configuration: the broker's certificate, ALPN and
/// transport windows, so only what kelp does with the bytes differs.
fn quic_server_config(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> Result<quinn::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)?;
    tls.alpn_protocols = vec![engine::ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport
        .stream_receive_window(QUIC_STREAM_RECEIVE_WINDOW_BYTES.into())
        .receive_window(QUIC_RECEIVE_WINDOW_BYTES.into())
        .send_window(QUIC_SEND_WINDOW_BYTES);
    config.transport_config(Arc::new(transport));
    Ok(config)
}

// ----------------------------------------------------------------- output

fn report(
    results: &[CaseResult],
    args: &Args,
    workload: &Workload,
    broker_peak_rss_bytes: u64,
) -> Result<()> {
    let mut rows = Vec::new();
    for r in results {
        let mb_per_s = r.mb_per_s();
        let baseline = r
            .case
            .baseline()
            .and_then(|b| results.iter().find(|x| x.case == b));
        let ratio = baseline.map(|b| mb_per_s / b.mb_per_s());
        let server = if r.case.baseline().is_some() {
            "broker"
        } else {
            "sink"
        };
        let mut line = format!(
            "{:<9} MB/s={:.1} rec/s={:.0} {server}_cpu_s_per_gb={:.2} client_cpu_s_per_gb={:.2}",
            r.case.name(),
            mb_per_s,
            r.records_per_s(),
            r.per_gb(r.server_cpu),
            r.per_gb(r.client_cpu),
        );
        if let (Some(b), Some(ratio)) = (baseline, ratio) {
            line.push_str(&format!(" ratio_to_{}={ratio:.2}", b.case.name()));
        }
        println!("{line}");
        rows.push(serde_json::json!({
            "case": r.case.name(),
            "payload_bytes": r.payload_bytes,
            "records": r.records,
            "elapsed_s": r.elapsed.as_secs_f64(),
            "mb_per_s": mb_per_s,
            "records_per_s": r.records_per_s(),
            "server": server,
            "server_cpu_s_per_gb": r.per_gb(r.server_cpu),
            "client_cpu_s_per_gb": r.per_gb(r.client_cpu),
            "baseline": baseline.map(|b| b.case.name()),
            "ratio_to_baseline": ratio,
        }));
    }
    println!(
        "broker_peak_rss_mib={:.1}",
        broker_peak_rss_bytes as f64 / f64::from(1 << 20)
    );
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "total_mib": args.total_mib,
            "record_bytes": workload.record_bytes,
            "batch_records": workload.batch_records,
            "batches": workload.batches,
            "frame_bytes_tcp": workload.frame_bytes(&Case::KelpTcp.topic()),
            "in_flight": workload.in_flight,
            "ack": format!("{:?}", args.ack).to_lowercase(),
            "segments": args.segments,
            "shards": args.shards,
            "broker_cpu": "/proc/<broker pid>/stat utime+stime delta, from connect to last ack",
            "sink_cpu": "getrusage(RUSAGE_THREAD) of the sink thread",
            "client_cpu": "getrusage(RUSAGE_THREAD) of the load generator thread",
            "broker_peak_rss_bytes": broker_peak_rss_bytes,
            "cases": rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}
