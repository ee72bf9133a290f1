//! The nemesis (issue 19, item 6): a cluster on loopback with real
//! processes (one `kelp control`, three `kelp serve --control` brokers, a
//! 2 s silence limit, a topic of two replicas) under keyed load from
//! idempotent producers, rounds alternating between `all` and `durable`
//! (`KELP_NEMESIS_ACKS=all` or `=durable` runs one), while a seeded
//! schedule of faults runs for a bounded time, one at a time:
//!
//! - a broker killed with SIGKILL and started again on its data dir after
//!   0 to 5 s (long enough, often, to be declared dead and have its
//!   segments moved);
//! - a broker frozen with SIGSTOP for 2.5 to 4.5 s (past the silence
//!   limit: a zombie when it resumes), then SIGCONT;
//! - the control plane killed with SIGKILL and started again after 0 to
//!   2 s;
//! - on S3 only: the S3 server frozen with SIGSTOP for 1 to 5 s (an
//!   outage: requests hang, then time out), then SIGCONT.
//!
//! Two runs: brokers sharing a filer directory on 127.0.0.1, and brokers
//! on 127.0.0.2-4 sharing only an S3 bucket (a real S3-compatible server).
//!
//! The load goes in rounds of records flushed together: a round whose
//! flush succeeded is acknowledged; one whose send or flush failed is
//! unknown (it may be stored), and the producer is replaced. Then every
//! record is read back and checked: each acknowledged record stored, no
//! record stored twice, and each key's acknowledged records in the order
//! they were sent. An `all` record a dead owner had not flushed is kept
//! by its follower, which seals the segment from its copy (docs/broker.md,
//! "Failover"); `leader` is not run (it keeps the loss window it
//! documents).
//!
//! The seed is printed; `KELP_NEMESIS_SEED` replays a schedule (timing on
//! a real machine still varies), and `KELP_NEMESIS_SECS` sets how long
//! faults run in each (60 s by default; RELIABILITY.md records longer
//! runs). Each process logs to a file in the run's directory, which a
//! failed run keeps (its path is printed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::{AckMode, Client, FetchFrom, ProducerConfig, SubscribeOptions};
use support::keyed::{key_name, read_records_while_moving};
use support::{port, signal, tcp_client, Broker, ControlPlane};
use test_support::{S3Server, SeededRng};

const TOPIC: &str = "nemesis/keyed";
const KEYS: u64 = 32;
const SEGMENTS: u32 = 4;
const BROKERS: usize = 3;
const SILENCE_MS: &str = "2000";
/// How long faults run in each test unless `KELP_NEMESIS_SECS` says
/// otherwise.
const RUN_SECS_DEFAULT: u64 = 60;
/// Records flushed together: acknowledged or unknown as one.
const ROUND_RECORDS: u64 = 200;
/// The load's pace at most: the nemesis is about faults, not speed, and a
/// run's records are all checked in memory at the end (an hour is about
/// 7 million).
const RECORDS_PER_S_MAX: u64 = 2_000;
/// A bound on the load, whatever the run's length.
const RECORDS_MAX: u64 = 10_000_000;
/// A round that takes longer counts as failed (unknown).
const ROUND_LIMIT: Duration = Duration::from_secs(60);
/// Records of the round after the faults, which must be acknowledged.
const FINAL_RECORDS: u64 = 1_000;
/// The read-back of every record gives up when no record arrived for
/// this long (the reader is stuck)...
const READ_QUIET: Duration = Duration::from_secs(60);
/// ...or when it took longer than this, or than the records at this
/// pace (an hour's 7 million records take minutes to read from S3).
const READ_LIMIT: Duration = Duration::from_secs(300);
const READ_RECORDS_PER_S_MIN: u64 = 2_000;

/// One fault of the schedule.
#[derive(Debug, Clone, Copy)]
enum Fault {
    KillRestart { broker: usize, down_ms: u64 },
    Freeze { broker: usize, frozen_ms: u64 },
    RestartControl { down_ms: u64 },
    S3Outage { frozen_ms: u64 },
}

impl Fault {
    fn draw(rng: &mut SeededRng, on_s3: bool) -> Fault {
        let broker = rng.below(BROKERS as u64) as usize;
        if on_s3 && rng.below(5) == 0 {
            return Fault::S3Outage {
                frozen_ms: 1_000 + rng.below(4_000),
            };
        }
        match rng.below(5) {
            0..=1 => Fault::KillRestart {
                broker,
                down_ms: rng.below(5_000),
            },
            2..=3 => Fault::Freeze {
                broker,
                frozen_ms: 2_500 + rng.below(2_000),
            },
            _ => Fault::RestartControl {
                down_ms: rng.below(2_000),
            },
        }
    }
}

/// Where the cluster stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    /// A filer directory the processes share, all on 127.0.0.1.
    Directory,
    /// An S3 bucket, the brokers on 127.0.0.2-4 standing for other hosts.
    S3,
}

/// The cluster's processes, restarted on the same ports and data dirs.
struct Cluster {
    dir: RunDir,
    s3: Option<S3Server>,
    control: Option<ControlPlane>,
    control_port: u16,
    brokers: Vec<Option<Broker>>,
    hosts: Vec<&'static str>,
    ports: Vec<u16>,
}

impl Cluster {
    fn start(store: Store) -> Cluster {
        let dir = RunDir(Some(tempfile::tempdir().unwrap()));
        let control_port = port();
        let (s3, hosts) = match store {
            Store::Directory => (None, vec!["127.0.0.1"; BROKERS]),
            Store::S3 => (
                Some(S3Server::start()),
                vec!["127.0.0.2", "127.0.0.3", "127.0.0.4"],
            ),
        };
        let mut cluster = Cluster {
            dir,
            s3,
            control: None,
            control_port,
            brokers: (0..BROKERS).map(|_| None).collect(),
            hosts,
            ports: (0..BROKERS).map(|_| port()).collect(),
        };
        cluster.start_control();
        for i in 0..BROKERS {
            cluster.start_broker(i);
        }
        cluster
    }

    /// The S3 environment every process gets (none on a directory).
    fn env(&self) -> Vec<(&'static str, String)> {
        self.s3.as_ref().map(S3Server::env).unwrap_or_default()
    }

    fn start_control(&mut self) {
        let mut args = vec!["--broker-silence-ms".to_owned(), SILENCE_MS.to_owned()];
        if let Some(s3) = &self.s3 {
            args.extend(["--filer".to_owned(), s3.url("nemesis")]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.control = Some(ControlPlane::start_logged_with_env(
            &self.dir.path().join("control"),
            self.control_port,
            &args,
            &self.env(),
            &self.dir.path().join("control.log"),
        ));
    }

    fn start_broker(&mut self, i: usize) {
        let control = format!("127.0.0.1:{}", self.control_port);
        self.brokers[i] = Some(Broker::start_on_logged(
            self.hosts[i],
            &self.dir.path().join(format!("broker-{i}")),
            self.ports[i],
            &["--control", &control, "--unpinned"],
            &self.env(),
            &self.dir.path().join(format!("broker-{i}.log")),
        ));
    }

    fn bootstrap(&self) -> String {
        self.hosts
            .iter()
            .zip(&self.ports)
            .map(|(h, p)| format!("{h}:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Inject `fault` and undo it: every process runs again after.
    fn inject(&mut self, fault: Fault) {
        match fault {
            Fault::KillRestart { broker, down_ms } => {
                self.brokers[broker].take().unwrap().kill9();
                std::thread::sleep(Duration::from_millis(down_ms));
                self.start_broker(broker);
            }
            Fault::Freeze { broker, frozen_ms } => {
                let pid = self.brokers[broker].as_ref().unwrap().child.id();
                signal("STOP", pid);
                std::thread::sleep(Duration::from_millis(frozen_ms));
                signal("CONT", pid);
            }
            Fault::RestartControl { down_ms } => {
                self.control.take().unwrap().kill9();
                std::thread::sleep(Duration::from_millis(down_ms));
                self.start_control();
            }
            Fault::S3Outage { frozen_ms } => {
                let pid = self.s3.as_ref().expect("an S3 server").pid();
                signal("STOP", pid);
                std::thread::sleep(Duration::from_millis(frozen_ms));
                signal("CONT", pid);
            }
        }
    }
}

/// The run's directory: the processes' data dirs and logs
/// (`control.log`, `broker-N.log`). Removed after a run that passed, kept
/// (and its path printed) after one that failed, to read what happened.
struct RunDir(Option<tempfile::TempDir>);

impl RunDir {
    fn path(&self) -> &std::path::Path {
        self.0.as_ref().expect("the run's directory").path()
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(dir) = self.0.take() {
                eprintln!(
                    "nemesis: logs and data dirs kept in {}",
                    dir.keep().display()
                );
            }
        }
    }
}

/// What became of each record sent: by key, by sequence.
#[derive(Default)]
struct Ledger {
    /// Per key: `true` where acknowledged, `false` where unknown.
    acked: HashMap<u64, Vec<bool>>,
    rounds_acked: u64,
    /// Rounds acknowledged, by ack ([`acks`]).
    rounds_by_ack: [u64; 2],
    rounds_failed: u64,
    resent_batches: u64,
}

impl Ledger {
    fn next_seq(&self, key: u64) -> u64 {
        self.acked.get(&key).map_or(0, |v| v.len() as u64)
    }

    fn sent(&self) -> u64 {
        self.acked.values().map(|v| v.len() as u64).sum()
    }

    fn acked_count(&self) -> u64 {
        self.acked
            .values()
            .map(|v| v.iter().filter(|a| **a).count() as u64)
            .sum()
    }
}

/// The acks rounds take in turn: `all` and `durable` unless
/// `KELP_NEMESIS_ACKS` names others (`all`, `durable`).
fn acks() -> Vec<AckMode> {
    let Ok(names) = std::env::var("KELP_NEMESIS_ACKS") else {
        return vec![AckMode::All, AckMode::Durable];
    };
    let acks: Vec<AckMode> = names
        .split(',')
        .map(|name| match name.trim() {
            "all" => AckMode::All,
            "durable" => AckMode::Durable,
            other => panic!("KELP_NEMESIS_ACKS: {other:?} is not all or durable"),
        })
        .collect();
    assert!(
        (1..=2).contains(&acks.len()),
        "KELP_NEMESIS_ACKS names one or two acks"
    );
    acks
}

fn producer_config(ack: AckMode) -> ProducerConfig {
    ProducerConfig {
        ack,
        linger_ms: 2,
        idempotent: true,
        ..ProducerConfig::default()
    }
}

/// Send one round of `records` records, spread over the keys, and flush:
/// whether every one was acknowledged. The round's records are in the
/// ledger either way (acknowledged, or unknown).
async fn round(producer: &client::Producer, ledger: &Mutex<Ledger>, records: u64) -> bool {
    let mut sent = Vec::with_capacity(records as usize);
    let sending = async {
        for _ in 0..records {
            let (key, seq) = {
                let mut l = ledger.lock().unwrap();
                let key = l.sent() % KEYS;
                let seq = l.next_seq(key);
                l.acked.entry(key).or_default().push(false);
                (key, seq)
            };
            sent.push((key, seq));
            let name = key_name(key);
            let value = format!("{name}:{seq}");
            producer
                .send(name.as_bytes(), value.as_bytes(), &[])
                .await?;
        }
        producer.flush().await
    };
    let done = matches!(tokio::time::timeout(ROUND_LIMIT, sending).await, Ok(Ok(_)));
    let mut l = ledger.lock().unwrap();
    if done {
        for (key, seq) in &sent {
            l.acked.get_mut(key).unwrap()[*seq as usize] = true;
        }
        l.rounds_acked += 1;
    } else {
        l.rounds_failed += 1;
    }
    done
}

/// Rounds until `stop`, taking the acks of [`acks`] in turn, each with a
/// producer of its own, replaced after each failed round.
async fn load(client: Client, stop: Arc<AtomicBool>, ledger: Arc<Mutex<Ledger>>) {
    let acks = acks();
    let mut producers: Vec<Option<client::Producer>> = acks.iter().map(|_| None).collect();
    let started = Instant::now();
    let mut turn = 0;
    while !stop.load(Ordering::Relaxed) && ledger.lock().unwrap().sent() < RECORDS_MAX {
        let due = Duration::from_millis(ledger.lock().unwrap().sent() * 1_000 / RECORDS_PER_S_MAX);
        if let Some(early) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(early).await;
        }
        let slot = &mut producers[turn];
        let p = match slot {
            Some(p) => p,
            None => match client.producer(TOPIC, producer_config(acks[turn])).await {
                Ok(p) => slot.insert(p),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            },
        };
        let done = round(p, &ledger, ROUND_RECORDS).await;
        ledger.lock().unwrap().rounds_by_ack[turn] += u64::from(done);
        if !done {
            if let Some(p) = slot.take() {
                ledger.lock().unwrap().resent_batches += p.resent_batches();
            }
        }
        turn = (turn + 1) % acks.len();
    }
    for p in producers.into_iter().flatten() {
        ledger.lock().unwrap().resent_batches += p.resent_batches();
    }
}

#[test]
fn acknowledged_all_and_durable_records_survive_kills_freezes_and_control_restarts() {
    run(Store::Directory);
}

#[test]
fn acknowledged_all_and_durable_records_survive_all_that_and_s3_outages_on_s3() {
    run(Store::S3);
}

/// One nemesis run over `store` (module docs).
fn run(store: Store) {
    let seed = std::env::var("KELP_NEMESIS_SEED")
        .ok()
        .map(|s| s.parse().expect("KELP_NEMESIS_SEED is a number"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let run_secs: u64 = std::env::var("KELP_NEMESIS_SECS")
        .ok()
        .map(|s| s.parse().expect("KELP_NEMESIS_SECS is a number of seconds"))
        .unwrap_or(RUN_SECS_DEFAULT);
    println!(
        "nemesis on {store:?}: seed {seed} (replay with KELP_NEMESIS_SEED={seed}), faults for \
         {run_secs} s"
    );
    let mut rng = SeededRng::from_seed(seed);

    let mut cluster = Cluster::start(store);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = runtime.block_on(tcp_client(&cluster.bootstrap()));
    runtime
        .block_on(client.create_topic_with_replicas(TOPIC, SEGMENTS, 2))
        .expect("create the topic");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let loading = runtime.spawn(load(client.clone(), stop.clone(), ledger.clone()));

    let started = Instant::now();
    let mut faults = 0u32;
    while started.elapsed() < Duration::from_secs(run_secs) {
        std::thread::sleep(Duration::from_millis(1_000 + rng.below(2_000)));
        let fault = Fault::draw(&mut rng, store == Store::S3);
        println!(
            "{:>6.1} s: {fault:?} ({} acknowledged so far)",
            started.elapsed().as_secs_f64(),
            ledger.lock().unwrap().acked_count()
        );
        cluster.inject(fault);
        faults += 1;
    }
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(loading).unwrap();

    // The cluster, whole again, takes a last round.
    let last = runtime.block_on(async {
        let deadline = Instant::now() + ROUND_LIMIT;
        loop {
            if let Ok(p) = client.producer(TOPIC, producer_config(acks()[0])).await {
                if round(&p, &ledger, FINAL_RECORDS).await {
                    return true;
                }
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    assert!(last, "the cluster took no round after the faults ended");

    let ledger = ledger.lock().unwrap();
    let acked = ledger.acked_count();
    let unknown = ledger.sent() - acked;
    let got = runtime.block_on(async {
        let options = SubscribeOptions {
            reconnect: true,
            ..SubscribeOptions::default()
        };
        let mut subscriber = client
            .subscribe(TOPIC, FetchFrom::Earliest, options)
            .await
            .expect("subscribe");
        let limit = READ_LIMIT.max(Duration::from_secs(acked / READ_RECORDS_PER_S_MIN));
        read_records_while_moving(&mut subscriber, acked, READ_QUIET, limit).await
    });

    // Per key, per sequence: read or not.
    let mut read: HashMap<u64, Vec<bool>> = ledger
        .acked
        .iter()
        .map(|(k, states)| (*k, vec![false; states.len()]))
        .collect();
    let mut last_acked: HashMap<u64, u64> = HashMap::new();
    let keys: HashMap<String, u64> = (0..KEYS).map(|k| (key_name(k), k)).collect();
    for (name, seq) in &got {
        let key = keys[name];
        let i = *seq as usize;
        let slot = read
            .get_mut(&key)
            .and_then(|r| r.get_mut(i))
            .unwrap_or_else(|| panic!("seed {seed}: {name}:{seq} was never sent"));
        assert!(!*slot, "seed {seed}: {name}:{seq} stored twice");
        *slot = true;
        if ledger.acked[&key][i] {
            if let Some(before) = last_acked.get(&key) {
                assert!(
                    before < seq,
                    "seed {seed}: {name}: acknowledged {seq} read after {before}"
                );
            }
            last_acked.insert(key, *seq);
        }
    }
    let mut lost = Vec::new();
    for (key, states) in &ledger.acked {
        for (seq, acked) in states.iter().enumerate() {
            if *acked && !read[key][seq] {
                lost.push(format!("{}:{seq}", key_name(*key)));
            }
        }
    }
    let unknown_stored = got.len() as u64 + lost.len() as u64 - acked;
    println!(
        "{store:?}, seed {seed}: {faults} faults; rounds acknowledged {} ({:?}: {:?}), failed {}; \
         records acknowledged {acked}, unknown {unknown} (of which stored {unknown_stored}), lost \
         {}; batches resent unchanged {}",
        ledger.rounds_acked,
        acks(),
        &ledger.rounds_by_ack[..acks().len()],
        ledger.rounds_failed,
        lost.len(),
        ledger.resent_batches,
    );
    let acks = acks();
    assert!(
        ledger.rounds_by_ack[..acks.len()].iter().all(|n| *n > 0),
        "seed {seed}: a round of every ack was acknowledged ({acks:?}: {:?})",
        &ledger.rounds_by_ack[..acks.len()]
    );
    assert!(
        lost.is_empty(),
        "seed {seed}: {} acknowledged records lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    drop(client);
    drop(runtime);
    drop(cluster);
}
