//! `kelp bench`: one scenario against a broker, with the host's limits
//! measured in the same run.
//!
//! By default the broker is a child process (`kelp serve` from the same
//! executable) on free loopback ports with a fresh data directory, so its
//! CPU time and memory can be read from `/proc`; `--broker ADDR` uses a
//! running broker instead (then broker CPU and memory are not measured).
//!
//! Scenarios:
//! - `produce`: pipelined produce requests; latency is publish to ack, per
//!   batch;
//! - `consume`: the topic is filled first (not measured), then read from
//!   offset 0 by one fetch at a time per segment; `--from buffers` keeps
//!   everything in the broker's in-memory buffers, `--from chunks` waits
//!   until every record is in a chunk file in the filer; latency is one
//!   fetch's round trip;
//! - `end-to-end`: producers and consumers at once; each batch carries its
//!   send time, latency is publish to delivery (every record of a batch
//!   shares its batch's time);
//! - `backfill`: `produce` with `--ack durable` by default, compared with
//!   the fdatasync sequential-write limit.
//!
//! Every phase is bounded by `--timeout-s`; the topic must hold exactly the
//! records sent, and consumers must read them all, or the run fails.

use std::{
    net::{SocketAddr, ToSocketAddrs},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{anyhow, bail, ensure, Context, Result};
use hdrhistogram::Histogram;
use rustls::pki_types::CertificateDer;
use tokio::task::JoinSet;
use wire::{
    chunk::{ChunkHeader, CHUNK_HEADER_BYTES},
    message::TopicInfo,
    AckMode, AdminRequest, BrokerPortRequest, DataRequest,
};

pub use crate::bench_args::{
    AckArg, BenchArgs, ConsumeFrom, Scenario, TransportArg, COUNT_DEFAULT, REPEAT_MAX,
};
use crate::{
    baseline::current_thread_runtime,
    broker_process::{BrokerLauncher, BrokerProcess, BrokerSettings, ProcessStats, TempDir},
    by_reference::{produce_by_reference, ByRefPath, ByRefPlan},
    frames::{admin_request, quic_endpoint, read_certificate, AdminAnswer, Dialer},
    host_limits,
    load::{
        new_histogram, run_consumer, run_producer, segment_addresses, ConsumerPlan, ProducerPlan,
        Progress, SendBudget,
    },
    meter::Meter,
    placement::Placement,
    report::{Baselines, Report, Sample},
    workload::Workload,
};

/// The bench broker's buffer for `consume --from buffers`: the largest a
/// broker takes, and an age no run reaches, so nothing leaves memory.
const BUFFERS_ONLY_BUFFER_BYTES: u64 = 1 << 30;
const BUFFERS_ONLY_FLUSH_AGE_MS: u64 = 3_600_000;
/// For `consume --from chunks`: buffers sealed soon after the fill.
const CHUNKS_FLUSH_AGE_MS: u64 = 100;
/// The broker's own default flush age, for every other scenario.
const FLUSH_AGE_MS_DEFAULT: u64 = 1000;
/// The S3 PUT baseline stores at least this many objects.
const S3_PUT_OBJECTS_MIN: u64 = 4;
/// The baselines move at most this much payload, so a 20 GB backfill does
/// not spend minutes on them; their rate is steady long before.
const BASELINE_BYTES_MAX: u64 = 2 << 30;
/// Between `DescribeTopic` (or chunk-file) polls while waiting for records.
const POLL_INTERVAL: Duration = Duration::from_millis(5);
const NAMESPACE: &str = "bench";

/// Runs the benchmark `--repeat` times, prints each run and (repeated) the
/// spread of every figure, and writes the JSON and the plot.
pub fn run(args: &BenchArgs, launcher: &BrokerLauncher) -> Result<()> {
    let ack = validate(args)?;
    let runs = args.repeat;
    let mut reports = Vec::with_capacity(runs as usize);
    for index in 1..=runs {
        let report =
            run_once(args, launcher, ack).with_context(|| format!("run {index} of {runs}"))?;
        if runs == 1 {
            report.print();
        } else {
            println!("{}", report.run_line(index, runs));
        }
        reports.push(report);
    }
    if runs > 1 {
        crate::summary::print(&reports);
    }
    if let Some(path) = &args.json {
        let doc = match reports.as_slice() {
            [one] => one.json(),
            many => {
                crate::summary::repeated_json(&many.iter().map(Report::json).collect::<Vec<_>>())
            }
        };
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        crate::plot::draw(path, &reports)?;
    }
    Ok(())
}

/// Checks the arguments against each other before anything starts; the
/// ack mode the runs use.
fn validate(args: &BenchArgs) -> Result<AckArg> {
    let ack = args.ack.unwrap_or(match args.scenario {
        Scenario::Backfill => AckArg::Durable,
        _ => AckArg::Leader,
    });
    if !args.load_cpus.is_empty() {
        Placement::check(&args.load_cpus)?;
    }
    if let Some(rate) = args.rate {
        ensure!(
            rate.is_finite() && rate > 0.0,
            "--rate must be a positive number"
        );
    }
    if let Some(duration) = args.duration {
        ensure!(
            duration.is_finite() && duration > 0.0,
            "--duration must be a positive number of seconds"
        );
    }
    if args.by_ref.is_some() {
        ensure!(
            matches!(args.scenario, Scenario::Produce | Scenario::Backfill),
            "--by-ref is for produce and backfill"
        );
        ensure!(
            !args.baseline,
            "--by-ref has no host-limit baseline: compare it with the same run inline"
        );
        ensure!(
            args.by_ref != Some(ByRefPath::Direct) || args.broker.is_none(),
            "--by-ref direct needs the bench's own broker (it writes into its filer directory)"
        );
    } else {
        let inline_max = wire::limits::RECORD_BYTES_MAX as usize
            - wire::batch::RECORD_HEADER_BYTES
            - crate::workload::KEY_BYTES;
        ensure!(
            args.record_bytes as usize <= inline_max,
            "--record-bytes over {inline_max} cannot travel inline; add --by-ref"
        );
    }
    let needs_consumers = matches!(args.scenario, Scenario::Consume | Scenario::EndToEnd);
    ensure!(
        !needs_consumers || args.consumers <= args.segments,
        "--consumers {} needs at least as many --segments (each segment has one reader)",
        args.consumers
    );
    if args.scenario == Scenario::EndToEnd {
        ensure!(
            ack != AckArg::None,
            "end-to-end needs acknowledged produce (--ack leader or durable)"
        );
    }
    ensure!(
        !(args.broker.is_some() && args.transport == TransportArg::Quic && args.tls_ca.is_none()),
        "--transport quic with --broker needs --tls-ca (the broker's certificate)"
    );
    if args.plot.is_some() {
        // Fail before the run, not after it.
        crate::plot::load_font()?;
    }
    ensure!(
        (1..=REPEAT_MAX).contains(&args.repeat),
        "--repeat takes 1 to {REPEAT_MAX} runs, not {}",
        args.repeat
    );
    Ok(ack)
}

/// One run: a fresh broker (or a fresh topic on `--broker`), the measured
/// scenario and, with `--baseline`, the host limits measured right after.
fn run_once(args: &BenchArgs, launcher: &BrokerLauncher, ack: AckArg) -> Result<Report> {
    // The broker: our own child, or the one given.
    let own_data = if args.broker.is_none() {
        Some(TempDir::create(args.data_dir.as_deref(), "kelp-bench")?)
    } else {
        None
    };
    ensure!(
        args.filer.is_none()
            || !(args.scenario == Scenario::Consume && args.consume_from == ConsumeFrom::Chunks),
        "consume --from chunks counts chunk files on the local disk; it does not take --filer"
    );
    ensure!(
        args.filer.is_none() || args.broker.is_none(),
        "--filer is the bench's own broker's; a broker given with --broker keeps its own"
    );
    let broker = match &own_data {
        Some(dir) => Some(start_broker(args, launcher, dir)?),
        None => {
            ensure!(
                !(args.scenario == Scenario::Consume && args.consume_from == ConsumeFrom::Chunks),
                "consume --from chunks needs the bench's own broker (it waits for the chunk files)"
            );
            None
        }
    };
    let admin = match (&broker, &args.broker) {
        (Some(b), _) => b.listen(),
        (None, Some(addr)) => resolve(addr)?,
        (None, None) => bail!("no broker"),
    };
    let cert = match (&own_data, &args.tls_ca) {
        (_, Some(path)) => Some(read_certificate(path)?),
        (Some(dir), None) => Some(CertificateDer::from(
            std::fs::read(dir.path().join("broker/tls/cert.der"))
                .context("read the broker's certificate")?,
        )),
        (None, None) => None,
    };
    let stats = broker.as_ref().map(|b| ProcessStats::new(b.pid()));
    let timeout = Duration::from_secs(args.timeout_s);

    let rt = current_thread_runtime()?;
    let mut run = Run {
        args,
        own_broker_dir: own_data.as_ref().map(|d| d.path().join("broker")),
        ack,
        admin,
        stats,
        timeout,
        topic: format!(
            "{NAMESPACE}/{}-{}-{:x}",
            args.scenario.name(),
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ),
        shard_addresses: Vec::new(),
        layout: None,
        workload: None,
        dialer: None,
    };
    // Pinned after the broker started (it does not inherit the mask) and
    // released before the baselines.
    let placement = match args.load_cpus.as_slice() {
        [] => None,
        cpus => Some(Placement::pin(cpus)?),
    };
    let measured = rt.block_on(async {
        run.prepare(cert).await?;
        let measured = match args.scenario {
            Scenario::Produce | Scenario::Backfill => run.produce_measured().await?,
            Scenario::Consume => run.consume(own_data.as_ref().map(TempDir::path)).await?,
            Scenario::EndToEnd => run.end_to_end().await?,
        };
        run.check_topic(measured.produced_records).await?;
        anyhow::Ok(measured)
    });
    if let Some(placement) = placement {
        placement.release()?;
    }
    let measured = match measured {
        Ok(m) => m,
        Err(e) => {
            if broker.is_none() && run.layout.is_some() {
                // Someone else's broker: do not leave the topic behind.
                let deleted = rt.block_on(
                    run.admin(
                        &AdminRequest::DeleteTopic {
                            topic: run.topic.clone(),
                        }
                        .into(),
                    ),
                );
                if let Err(d) = deleted {
                    eprintln!("could not delete topic {}: {d:#}", run.topic);
                }
            }
            return Err(e);
        }
    };
    let peak_rss_bytes = stats.map(|s| s.peak_rss_bytes()).transpose()?;

    let baselines = if args.baseline {
        let dir = match &own_data {
            Some(d) => d.path().to_path_buf(),
            None => args.data_dir.clone().unwrap_or_else(std::env::temp_dir),
        };
        Some(run.baselines(measured.payload_bytes, &dir)?)
    } else {
        None
    };

    let report = Report {
        scenario: args.scenario.name(),
        transport: match args.transport {
            TransportArg::Tcp => "tcp",
            TransportArg::Quic => "quic",
        },
        ack: ack.name(),
        by_ref: args.by_ref.map(ByRefPath::name),
        consume_from: (args.scenario == Scenario::Consume).then_some(match args.consume_from {
            ConsumeFrom::Buffers => "buffers",
            ConsumeFrom::Chunks => "chunks",
        }),
        record_bytes: args.record_bytes,
        batch_records: args.batch_records,
        producers: args.producers,
        consumers: args.consumers,
        segments: args.segments,
        shards: run.shard_addresses.len(),
        in_flight: args.in_flight,
        rate: args.rate,
        records: measured.records,
        payload_bytes: measured.payload_bytes,
        elapsed: measured.elapsed,
        latency: measured.latency,
        latency_kind: measured.latency_kind,
        broker_cpu: measured.broker_cpu,
        broker_peak_rss_bytes: peak_rss_bytes,
        load_cpu: measured.load_cpu,
        samples: measured.samples,
        baselines,
    };
    if broker.is_none() {
        // Someone else's broker: leave it as it was.
        rt.block_on(admin_request(
            admin,
            &AdminRequest::DeleteTopic {
                topic: run.topic.clone(),
            }
            .into(),
        ))
        .context("delete the benchmark topic")?;
    }
    drop(rt);
    if let Some(broker) = broker {
        broker.stop()?;
    }
    drop(own_data);
    Ok(report)
}

/// The bench's own broker, with the buffer and flush age the scenario needs.
fn start_broker(
    args: &BenchArgs,
    launcher: &BrokerLauncher,
    dir: &TempDir,
) -> Result<BrokerProcess> {
    let (buffer_bytes, flush_age_ms) = match (args.scenario, args.consume_from) {
        (Scenario::Consume, ConsumeFrom::Buffers) => {
            (BUFFERS_ONLY_BUFFER_BYTES, BUFFERS_ONLY_FLUSH_AGE_MS)
        }
        (Scenario::Consume, ConsumeFrom::Chunks) => (args.buffer_mib << 20, CHUNKS_FLUSH_AGE_MS),
        _ => (args.buffer_mib << 20, FLUSH_AGE_MS_DEFAULT),
    };
    let settings = BrokerSettings {
        shards: args.shards as usize,
        buffer_bytes,
        buffer_bytes_max: args.buffer_max_mib.map(|mib| mib << 20),
        flush_age_ms,
        drop_flushed_pages: args.drop_flushed_pages,
        filer: args.filer.clone(),
    };
    let broker = BrokerProcess::start(launcher, &settings, &dir.path().join("broker"))?;
    eprintln!(
        "broker pid {} at {}, data in {}",
        broker.pid(),
        broker.listen(),
        dir.path().display()
    );
    Ok(broker)
}

fn resolve(addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .with_context(|| format!("resolve {addr}"))?
        .next()
        .ok_or_else(|| anyhow!("{addr} resolves to no address"))
}

/// The measured phase of a run.
struct Measured {
    /// Records the measured phase moved (sent, or delivered).
    records: u64,
    payload_bytes: u64,
    /// Records produced into the topic over the whole run.
    produced_records: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
    latency_kind: &'static str,
    broker_cpu: Option<Duration>,
    load_cpu: Duration,
    samples: Vec<Sample>,
}

/// One run's shared state.
struct Run<'a> {
    args: &'a BenchArgs,
    /// The bench broker's data directory, when the bench started it.
    own_broker_dir: Option<PathBuf>,
    ack: AckArg,
    admin: SocketAddr,
    stats: Option<ProcessStats>,
    timeout: Duration,
    topic: String,
    shard_addresses: Vec<SocketAddr>,
    layout: Option<TopicInfo>,
    workload: Option<Arc<Workload>>,
    dialer: Option<Dialer>,
}

/// What a produce phase did.
struct Produced {
    batches: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

impl Run<'_> {
    fn workload(&self) -> Result<&Arc<Workload>> {
        self.workload.as_ref().context("run not prepared")
    }

    fn layout(&self) -> Result<&TopicInfo> {
        self.layout.as_ref().context("run not prepared")
    }

    fn dialer(&self) -> Result<Dialer> {
        self.dialer.clone().context("run not prepared")
    }

    /// Asks for the shards, creates the topic, builds the batches.
    async fn prepare(&mut self, cert: Option<CertificateDer<'static>>) -> Result<()> {
        let AdminAnswer::Shards(shards) = self.admin(&DataRequest::Shards.into()).await? else {
            bail!("the broker did not list its shards");
        };
        self.shard_addresses = shards
            .iter()
            .map(|(tcp, quic)| {
                resolve(match self.args.transport {
                    TransportArg::Tcp => tcp,
                    TransportArg::Quic => quic,
                })
            })
            .collect::<Result<_>>()?;
        let layout = self
            .admin(
                &AdminRequest::CreateTopic {
                    topic: self.topic.clone(),
                    segments: self.args.segments,
                    replicas: 0,
                }
                .into(),
            )
            .await?
            .topic()?;
        // Known from here on, so a failure below can still delete it.
        self.layout = Some(layout.clone());
        ensure!(
            layout.segments.len() == self.args.segments as usize,
            "asked for {} segments, the broker made {}",
            self.args.segments,
            layout.segments.len()
        );
        if self.args.by_ref.is_none() {
            // Values by reference are made per record by the SDK instead.
            self.workload = Some(Arc::new(Workload::new(
                &layout.segments,
                self.args.record_bytes as usize,
                self.args.batch_records,
                self.ack.mode(),
                self.args.in_flight as usize,
            )?));
        }
        self.layout = Some(layout);
        self.dialer = Some(match self.args.transport {
            TransportArg::Tcp => Dialer::Tcp,
            TransportArg::Quic => {
                let cert = cert.context(
                    "--transport quic with --broker needs --tls-ca (the broker's certificate)",
                )?;
                Dialer::Quic(quic_endpoint(cert)?)
            }
        });
        Ok(())
    }

    async fn admin(&self, request: &BrokerPortRequest<'_>) -> Result<AdminAnswer> {
        tokio::time::timeout(self.timeout, admin_request(self.admin, request))
            .await
            .map_err(|_| anyhow!("admin request timed out"))?
    }

    async fn describe(&self) -> Result<TopicInfo> {
        self.admin(
            &AdminRequest::DescribeTopic {
                topic: self.topic.clone(),
            }
            .into(),
        )
        .await?
        .topic()
    }

    fn batches_to_send(&self) -> Option<u64> {
        if self.args.duration.is_some() {
            return None;
        }
        let records = self.args.count.unwrap_or(COUNT_DEFAULT);
        Some(records.div_ceil(u64::from(self.args.batch_records)).max(1))
    }

    /// Every producer connection: per producer, one connection per shard
    /// that owns segments, each writing its shard's segments in turn.
    async fn produce(&self, progress: Arc<Progress>, stamp: Option<Instant>) -> Result<Produced> {
        let workload = self.workload()?.clone();
        let layout = self.layout()?;
        let addresses = segment_addresses(layout, &self.shard_addresses)?;
        let mut groups: Vec<(SocketAddr, Vec<u32>)> = Vec::new();
        for (segment, addr) in addresses.iter().enumerate() {
            match groups.iter_mut().find(|(a, _)| a == addr) {
                Some((_, segments)) => segments.push(segment as u32),
                None => groups.push((*addr, vec![segment as u32])),
            }
        }
        let start = Instant::now();
        let deadline = self
            .args
            .duration
            .map(|s| start + Duration::from_secs_f64(s));
        let budget = Arc::new(SendBudget::new(self.batches_to_send(), deadline));
        let segments = f64::from(self.args.segments);
        let mut tasks = JoinSet::new();
        for _ in 0..self.args.producers {
            for (addr, group) in &groups {
                let plan = ProducerPlan {
                    addr: *addr,
                    topic: self.topic.as_str().into(),
                    rate: self.args.rate.map(|r| {
                        r * group.len() as f64 / segments / f64::from(self.args.producers)
                    }),
                    segments: group.clone(),
                    stamp_epoch: stamp,
                };
                tasks.spawn(run_producer(
                    self.dialer()?,
                    plan,
                    workload.clone(),
                    budget.clone(),
                    progress.clone(),
                ));
            }
        }
        let mut batches = 0;
        let mut latency = new_histogram();
        let all = async {
            while let Some(joined) = tasks.join_next().await {
                let report = joined??;
                batches += report.batches;
                latency.add(&report.latency)?;
            }
            if workload.ack == AckMode::None {
                // Nothing answers these; the topic tells when they are in.
                let records = batches * u64::from(workload.batch_records);
                while self.stored_records().await? < records {
                    tokio::time::sleep(POLL_INTERVAL).await;
                }
                progress.records.store(records, Ordering::Relaxed);
            }
            anyhow::Ok(())
        };
        tokio::time::timeout(self.timeout, all)
            .await
            .map_err(|_| anyhow!("producers did not finish within {:?}", self.timeout))??;
        Ok(Produced {
            batches,
            elapsed: start.elapsed(),
            latency,
        })
    }

    async fn stored_records(&self) -> Result<u64> {
        Ok(self
            .describe()
            .await?
            .segments
            .iter()
            .map(|s| s.next_offset)
            .sum())
    }

    /// `produce --by-ref`: uploads and references through the client SDK.
    async fn produce_by_reference_measured(&self, path: ByRefPath) -> Result<Measured> {
        let records = self
            .batches_to_send()
            .map(|b| b * u64::from(self.args.batch_records));
        let progress = Arc::new(Progress::default());
        let total = records.map(|r| r * u64::from(self.args.record_bytes));
        let plan = ByRefPlan {
            broker: self.admin,
            transport: match self.args.transport {
                TransportArg::Tcp => client::Transport::Tcp,
                TransportArg::Quic => client::Transport::Quic,
            },
            tls_ca: self
                .args
                .tls_ca
                .clone()
                .or_else(|| self.own_broker_dir.as_ref().map(|d| d.join("tls/cert.der"))),
            payload_dir: match path {
                ByRefPath::Direct => Some(
                    self.own_broker_dir
                        .as_ref()
                        .context("--by-ref direct needs the bench's own broker")?
                        .join("filer"),
                ),
                ByRefPath::Broker => None,
            },
            topic: self.topic.clone(),
            value_bytes: self.args.record_bytes as usize,
            ack: self.ack.mode(),
            producers: self.args.producers,
            records,
            deadline: self
                .args
                .duration
                .map(|s| Instant::now() + Duration::from_secs_f64(s)),
        };
        let meter = Meter::start(self.stats, progress.clone(), total, "produce by reference")?;
        let produced = tokio::time::timeout(self.timeout, produce_by_reference(plan, progress))
            .await
            .map_err(|_| anyhow!("producers did not finish within {:?}", self.timeout));
        let (samples, broker_cpu, load_cpu) = meter.finish()?;
        let (records, elapsed, latency) = produced??;
        Ok(Measured {
            records,
            payload_bytes: records * u64::from(self.args.record_bytes),
            produced_records: records,
            elapsed,
            latency,
            latency_kind: "send: upload, then batching, per record",
            broker_cpu,
            load_cpu,
            samples,
        })
    }

    /// `produce` and `backfill`: the produce phase is the measurement.
    async fn produce_measured(&self) -> Result<Measured> {
        if let Some(path) = self.args.by_ref {
            return self.produce_by_reference_measured(path).await;
        }
        let workload = self.workload()?.clone();
        let progress = Arc::new(Progress::default());
        let total = self
            .batches_to_send()
            .map(|b| b * workload.batch_payload_bytes());
        let meter = Meter::start(self.stats, progress.clone(), total, "produce")?;
        let produced = self.produce(progress, None).await;
        let (samples, broker_cpu, load_cpu) = meter.finish()?;
        let produced = produced?;
        let records = produced.batches * u64::from(workload.batch_records);
        Ok(Measured {
            records,
            payload_bytes: produced.batches * workload.batch_payload_bytes(),
            produced_records: records,
            elapsed: produced.elapsed,
            latency: produced.latency,
            latency_kind: if workload.ack == AckMode::None {
                "none: with ack=none nothing answers"
            } else {
                "publish to ack, per batch"
            },
            broker_cpu,
            load_cpu,
            samples,
        })
    }

    /// Fill (not measured), wait for the data to be where `--from` says,
    /// then read every segment from offset 0.
    async fn consume(&self, own_data: Option<&Path>) -> Result<Measured> {
        let workload = self.workload()?.clone();
        let fill_progress = Arc::new(Progress::default());
        let total = self
            .batches_to_send()
            .map(|b| b * workload.batch_payload_bytes());
        let meter = Meter::start(self.stats, fill_progress.clone(), total, "fill")?;
        let filled = self.produce(fill_progress, None).await;
        meter.finish()?;
        let filled = filled?;
        let records = filled.batches * u64::from(workload.batch_records);
        if let Some(dir) = own_data {
            let filer = dir.join("broker/filer");
            match self.args.consume_from {
                ConsumeFrom::Chunks => {
                    let deadline = Instant::now() + self.timeout;
                    while chunked_records(&filer)? < records {
                        ensure!(
                            Instant::now() < deadline,
                            "the broker did not flush every record to chunks in time"
                        );
                        tokio::time::sleep(POLL_INTERVAL * 10).await;
                    }
                }
                ConsumeFrom::Buffers => {
                    let chunked = chunked_records(&filer)?;
                    ensure!(
                        chunked == 0,
                        "{chunked} of {records} records left the buffers for chunks: lower \
                         --count or raise --segments (a buffer holds at most 1 GiB)"
                    );
                }
            }
        }
        let layout = self.describe().await?;
        let targets: Vec<u64> = layout.segments.iter().map(|s| s.next_offset).collect();
        let progress = Arc::new(Progress::default());
        let total_bytes = records * workload.record_bytes as u64;
        let meter = Meter::start(self.stats, progress.clone(), Some(total_bytes), "consume")?;
        let start = Instant::now();
        let read = self
            .consume_all(
                &layout,
                targets
                    .iter()
                    .map(|&t| Arc::new(AtomicU64::new(t)))
                    .collect(),
                progress,
                None,
            )
            .await;
        let elapsed = start.elapsed();
        let (samples, broker_cpu, load_cpu) = meter.finish()?;
        let (delivered, latency) = read?;
        ensure!(
            delivered == records,
            "consumers read {delivered} records, {records} were produced"
        );
        Ok(Measured {
            records: delivered,
            payload_bytes: delivered * workload.record_bytes as u64,
            produced_records: records,
            elapsed,
            latency,
            latency_kind: "fetch round trip",
            broker_cpu,
            load_cpu,
            samples,
        })
    }

    /// Spawns one reader per segment (segments shared out among
    /// `--consumers`) and waits for all of them.
    async fn consume_all(
        &self,
        layout: &TopicInfo,
        targets: Vec<Arc<AtomicU64>>,
        progress: Arc<Progress>,
        stamp: Option<Instant>,
    ) -> Result<(u64, Histogram<u64>)> {
        let tasks = self.spawn_consumers(layout, targets, progress, stamp)?;
        self.join_consumers(tasks).await
    }

    /// Waits for every consumer (at most the run's timeout): the records
    /// they delivered and their latencies, merged.
    async fn join_consumers(
        &self,
        mut tasks: JoinSet<Result<crate::load::ConsumerReport>>,
    ) -> Result<(u64, Histogram<u64>)> {
        let mut delivered = 0;
        let mut latency = new_histogram();
        let all = async {
            while let Some(joined) = tasks.join_next().await {
                let report = joined??;
                delivered += report.records;
                latency.add(&report.latency)?;
            }
            anyhow::Ok(())
        };
        tokio::time::timeout(self.timeout, all)
            .await
            .map_err(|_| anyhow!("consumers did not finish within {:?}", self.timeout))??;
        Ok((delivered, latency))
    }

    fn spawn_consumers(
        &self,
        layout: &TopicInfo,
        targets: Vec<Arc<AtomicU64>>,
        progress: Arc<Progress>,
        stamp: Option<Instant>,
    ) -> Result<JoinSet<Result<crate::load::ConsumerReport>>> {
        let workload = self.workload()?;
        let addresses = segment_addresses(layout, &self.shard_addresses)?;
        let mut tasks = JoinSet::new();
        // Consumer c reads segments c, c + consumers, ...: every segment
        // has exactly one reader, so the consumer count only groups them.
        for (segment, (addr, target)) in addresses.into_iter().zip(targets).enumerate() {
            let plan = ConsumerPlan {
                addr,
                topic: self.topic.clone(),
                segment: segment as u32,
                fetch_bytes_max: self.args.fetch_bytes,
                target,
                stamp_epoch: stamp,
            };
            tasks.spawn(run_consumer(
                self.dialer()?,
                plan,
                workload.record_bytes,
                progress.clone(),
            ));
        }
        Ok(tasks)
    }

    /// Consumers tail the topic while producers write stamped batches;
    /// measured from the first send to the last delivery.
    async fn end_to_end(&self) -> Result<Measured> {
        let workload = self.workload()?.clone();
        let layout = self.layout()?.clone();
        let targets: Vec<Arc<AtomicU64>> = layout
            .segments
            .iter()
            .map(|_| Arc::new(AtomicU64::new(u64::MAX)))
            .collect();
        let delivered_progress = Arc::new(Progress::default());
        let total = self
            .batches_to_send()
            .map(|b| b * workload.batch_payload_bytes());
        let meter = Meter::start(self.stats, delivered_progress.clone(), total, "end-to-end")?;
        let epoch = Instant::now();
        let consumers =
            self.spawn_consumers(&layout, targets.clone(), delivered_progress, Some(epoch))?;
        let result = async {
            let produced = self
                .produce(Arc::new(Progress::default()), Some(epoch))
                .await?;
            // Now the consumers know where to stop.
            let stored = self.describe().await?;
            for (segment, target) in stored.segments.iter().zip(&targets) {
                target.store(segment.next_offset, Ordering::Release);
            }
            let (delivered, latency) = self.join_consumers(consumers).await?;
            anyhow::Ok((produced, delivered, latency, epoch.elapsed()))
        }
        .await;
        let (samples, broker_cpu, load_cpu) = meter.finish()?;
        let (produced, delivered, latency, elapsed) = result?;
        let records = produced.batches * u64::from(workload.batch_records);
        ensure!(
            delivered == records,
            "consumers read {delivered} records, {records} were produced"
        );
        Ok(Measured {
            records,
            payload_bytes: records * workload.record_bytes as u64,
            produced_records: records,
            elapsed,
            latency,
            latency_kind: "publish to delivery, per record",
            broker_cpu,
            load_cpu,
            samples,
        })
    }

    /// The topic holds exactly the records produced.
    async fn check_topic(&self, produced: u64) -> Result<()> {
        let stored = self.stored_records().await?;
        ensure!(
            stored == produced,
            "topic {} holds {stored} records, {produced} were produced",
            self.topic
        );
        Ok(())
    }

    /// The host's limits with the same frames, at most `BASELINE_BYTES_MAX`.
    fn baselines(&self, payload_bytes: u64, dir: &Path) -> Result<Baselines> {
        let workload = self.workload()?;
        let batch_bytes = workload.batch_payload_bytes();
        let batches = (payload_bytes.min(BASELINE_BYTES_MAX) / batch_bytes).max(1);
        let bytes = batches * batch_bytes;
        eprintln!(
            "baselines: {:.0} MB each (raw TCP, raw quinn, file write, file write + fdatasync)",
            bytes as f64 / 1e6
        );
        let timeout = self.timeout;
        let raw_tcp = host_limits::raw_tcp(workload, &self.topic, batches, timeout)
            .context("raw TCP baseline")?;
        let raw_quinn = host_limits::raw_quinn(workload, &self.topic, batches, timeout)
            .context("raw quinn baseline")?;
        let file_write = host_limits::file_write(dir, bytes, false).context("file write")?;
        let file_write_fdatasync =
            host_limits::file_write(dir, bytes, true).context("file write with fdatasync")?;
        let s3_put = match &self.args.filer {
            Some(url) => {
                let object_bytes = self.args.buffer_mib << 20;
                let objects = (bytes / object_bytes).max(S3_PUT_OBJECTS_MIN);
                let concurrency = self.args.segments.max(1);
                eprintln!(
                    "baseline: S3 PUT of {objects} objects of {} MiB, {concurrency} at once",
                    self.args.buffer_mib
                );
                Some(
                    host_limits::s3_put(url, object_bytes, objects, concurrency)
                        .context("S3 PUT baseline")?,
                )
            }
            None => None,
        };
        let stores_durably =
            self.args.scenario == Scenario::Backfill || self.ack == AckArg::Durable;
        let primary = match (stores_durably, &s3_put, self.args.transport) {
            (true, Some(_), _) => "s3_put",
            (true, None, _) if self.args.scenario == Scenario::Backfill => "file_write_fdatasync",
            (_, _, TransportArg::Tcp) => "raw_tcp",
            (_, _, TransportArg::Quic) => "raw_quinn",
        };
        Ok(Baselines {
            raw_tcp,
            raw_quinn,
            file_write,
            file_write_fdatasync,
            s3_put,
            primary,
        })
    }
}

/// Records in every chunk file under the filer's directory, from the
/// chunk headers (`docs/chunk-format.md`).
fn chunked_records(filer: &Path) -> Result<u64> {
    let mut records = 0;
    let mut dirs = vec![filer.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("list {}", dir.display())),
        };
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "chunk") {
                let mut header = [0u8; CHUNK_HEADER_BYTES];
                let mut file = std::fs::File::open(&path)
                    .with_context(|| format!("open {}", path.display()))?;
                std::io::Read::read_exact(&mut file, &mut header)
                    .with_context(|| format!("read {}", path.display()))?;
                let header = ChunkHeader::decode(&header)
                    .with_context(|| format!("chunk header of {}", path.display()))?;
                records += header.next_offset.saturating_sub(header.base_offset);
            }
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wire::{batch::set_base_offset, chunk::build_chunk, BatchBuilder};

    fn chunk(base_offset: u64, records: u32) -> Vec<u8> {
        let mut builder = BatchBuilder::new();
        for i in 0..records {
            builder.push(1, &i.to_le_bytes(), b"v", &[]).unwrap();
        }
        let mut batch = builder.finish(0, 0).to_vec();
        set_base_offset(&mut batch, base_offset);
        build_chunk(0, base_offset, &[&batch]).unwrap()
    }

    #[test]
    fn chunked_records_counts_every_chunk_file_under_the_filer() {
        let dir = TempDir::create(None, "kelp-bench-test").unwrap();
        let filer = dir.path().join("filer");
        assert_eq!(chunked_records(&filer).unwrap(), 0);
        let segment = filer.join("topics/bench/t/0");
        std::fs::create_dir_all(&segment).unwrap();
        std::fs::write(segment.join("00000000000000000000.chunk"), chunk(0, 10)).unwrap();
        std::fs::write(segment.join("00000000000000000010.chunk"), chunk(10, 5)).unwrap();
        // Not chunks: the layout and a buffer in the making.
        std::fs::write(filer.join("layout"), b"not a chunk").unwrap();
        std::fs::write(segment.join("x.buf"), b"nor this").unwrap();
        assert_eq!(chunked_records(&filer).unwrap(), 15);
        std::fs::write(segment.join("bad.chunk"), b"short").unwrap();
        assert!(chunked_records(&filer).is_err());
    }
}
