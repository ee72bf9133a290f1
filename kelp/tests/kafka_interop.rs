//! Interop with real Kafka clients: confluent-kafka (librdkafka),
//! kafka-python and kafkajs, driven through the programs in `interop/`
//! against a real `kelp serve --kafka` process on loopback.
//!
//! The clients are installed by `.ci/run` (see README.md, "Kafka interop
//! tests"). A missing client fails these tests with the command that
//! installs it; nothing is skipped.
//!
//! Every client run is bounded in records and in time: a process that
//! outlives its deadline is killed and the test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{interop_python, port, repo_root, Broker};

/// 5 codecs x 200,000 = 1,000,000 records per client.
const RECORDS_PER_CODEC: u64 = 200_000;
const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
const PARTITIONS: u64 = 4;
/// Records per second the background producer writes during the group
/// scenario, and its bounds.
const GROUP_PRODUCE_RATE: u64 = 2_000;
const GROUP_PRODUCE_RECORDS_MAX: u64 = 2_000_000;
const GROUP_SCENARIO_S_MAX: u64 = 300;
/// How long one produce or consume run of 200,000 records may take.
const ROUND_TRIP_RUN_S_MAX: u64 = 150;
/// How long a group state (an assignment, a first record) may take to appear.
const GROUP_WAIT_S_MAX: u64 = 60;

/// One interop test at a time: each starts its own broker and its clients
/// are CPU-bound; on a small machine running them side by side only makes
/// every deadline tighter.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Client {
    Confluent,
    KafkaPython,
    Kafkajs,
}

const INSTALL_HINT: &str = support::INTEROP_INSTALL_HINT;

/// The Python with confluent-kafka and kafka-python.
fn python() -> PathBuf {
    interop_python("confluent_kafka, kafka, cramjam, lz4, zstandard, snappy")
}

/// `node` (`$KELP_INTEROP_NODE`, else the one on PATH) with kafkajs
/// installed under `interop/node/node_modules`.
fn node() -> PathBuf {
    let node = std::env::var_os("KELP_INTEROP_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("node"));
    let modules = repo_root().join("interop/node/node_modules");
    for package in ["kafkajs", "kafkajs-snappy", "lz4js", "zstd-codec"] {
        assert!(
            modules.join(package).exists(),
            "{} is missing from {}: {INSTALL_HINT}",
            package,
            modules.display()
        );
    }
    let version = Command::new(&node).arg("--version").output();
    assert!(
        matches!(&version, Ok(out) if out.status.success()),
        "cannot run `{}` ($KELP_INTEROP_NODE) for the kafkajs interop tests: install Node.js 18+",
        node.display()
    );
    node
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::Confluent => "confluent",
            Client::KafkaPython => "kafka-python",
            Client::Kafkajs => "kafkajs",
        }
    }

    /// Fails the test now, with the fix, when this client is not installed.
    fn check_installed(self) {
        match self {
            Client::Confluent | Client::KafkaPython => drop(python()),
            Client::Kafkajs => drop(node()),
        }
    }

    fn command(self, command: &str, bootstrap: &str, topic: &str, timeout_s: u64) -> Command {
        let mut cmd = match self {
            Client::Confluent | Client::KafkaPython => {
                let mut cmd = Command::new(python());
                cmd.arg(repo_root().join("interop/python/kafka_client.py"))
                    .arg(command)
                    .args(["--client", self.name()]);
                cmd
            }
            Client::Kafkajs => {
                let mut cmd = Command::new(node());
                cmd.arg(repo_root().join("interop/node/kafka_client.js"))
                    .arg(command);
                cmd
            }
        };
        cmd.args(["--bootstrap", bootstrap, "--topic", topic])
            .args(["--partitions", &PARTITIONS.to_string()])
            .args(["--timeout-s", &timeout_s.to_string()])
            .stderr(Stdio::inherit());
        cmd
    }
}

/// A broker with the Kafka gateway on its own port.
struct Gateway {
    broker: Broker,
    kafka_port: u16,
}

impl Gateway {
    fn start(data_dir: &Path) -> Gateway {
        Gateway::start_on(data_dir, port(), port())
    }

    fn start_on(data_dir: &Path, broker_port: u16, kafka_port: u16) -> Gateway {
        Gateway::start_with_env(data_dir, broker_port, kafka_port, &[], &[])
    }

    /// A gateway whose broker stores in `filer` (e.g. an S3 bucket).
    fn start_with_env(
        data_dir: &Path,
        broker_port: u16,
        kafka_port: u16,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> Gateway {
        let addr = format!("127.0.0.1:{kafka_port}");
        let mut args = vec!["--kafka", addr.as_str()];
        args.extend_from_slice(extra);
        let broker = Broker::start_with_env(data_dir, broker_port, &args, env);
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", kafka_port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the Kafka gateway did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Gateway { broker, kafka_port }
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.kafka_port)
    }

    fn restart(self) -> Gateway {
        let (data_dir, broker_port, kafka_port) = (
            self.broker.data_dir.clone(),
            self.broker.port,
            self.kafka_port,
        );
        self.broker.stop();
        Gateway::start_on(&data_dir, broker_port, kafka_port)
    }
}

/// Runs a client command to completion (killing it at `timeout_s` plus a
/// grace period) and returns the JSON summary on its last stdout line.
fn run(mut cmd: Command, timeout_s: u64) -> Value {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start interop client");
    let lines = read_lines(&mut child);
    let status = wait_bounded(&mut child, timeout_s);
    let summary = last_json("client", &lines, status);
    assert_eq!(summary["timed_out"], Value::Bool(false), "{summary}");
    summary
}

fn read_lines(child: &mut Child) -> Receiver<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::sync_channel(1024);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_bounded(child: &mut Child, timeout_s: u64) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(timeout_s + 30);
    loop {
        if let Some(status) = child.try_wait().expect("wait for interop client") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("interop client ran past its {timeout_s} s deadline and was killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The JSON summary `name` printed last, once it exited with `status`,
/// which must be success.
fn last_json(name: &str, lines: &Receiver<String>, status: std::process::ExitStatus) -> Value {
    let all: Vec<String> = lines.iter().collect();
    let last = all.last().map(String::as_str).unwrap_or("");
    let summary: Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{name}: no JSON summary ({e}): {all:?}"));
    assert!(status.success(), "{name} exited with {status}: {summary}");
    summary
}

fn u64_of(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} missing or not a count in {v}"))
}

fn create_topic(client: Client, bootstrap: &str, topic: &str) {
    let out = run(client.command("create-topic", bootstrap, topic, 60), 60);
    assert_eq!(u64_of(&out, "partitions"), PARTITIONS, "{out}");
}

/// Produces then consumes 200,000 records per codec (1,000,000 in all) and
/// checks each comes back exactly once, with its key, header and bytes,
/// in order per key.
fn round_trip(client: Client) {
    client.check_installed();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start(dir.path());
    let bootstrap = gateway.bootstrap();
    for codec in CODECS {
        let topic = format!("interop-{}-{codec}", client.name());
        create_topic(client, &bootstrap, &topic);
        let mut produce = client.command("produce", &bootstrap, &topic, ROUND_TRIP_RUN_S_MAX);
        produce.args(["--count", &RECORDS_PER_CODEC.to_string(), "--codec", codec]);
        let produced = run(produce, ROUND_TRIP_RUN_S_MAX);
        eprintln!("{} {codec} produce: {produced}", client.name());
        assert_eq!(
            u64_of(&produced, "produced"),
            RECORDS_PER_CODEC,
            "{produced}"
        );
        assert_eq!(u64_of(&produced, "acked"), RECORDS_PER_CODEC, "{produced}");
        assert_eq!(u64_of(&produced, "failed"), 0, "{produced}");

        let mut consume = client.command("consume", &bootstrap, &topic, ROUND_TRIP_RUN_S_MAX);
        consume
            .args(["--expect", &RECORDS_PER_CODEC.to_string()])
            .args(["--group", &format!("{topic}-reader")]);
        let consumed = run(consume, ROUND_TRIP_RUN_S_MAX);
        eprintln!("{} {codec} consume: {consumed}", client.name());
        assert_eq!(u64_of(&consumed, "unique"), RECORDS_PER_CODEC, "{consumed}");
        assert_eq!(u64_of(&consumed, "missing"), 0, "{consumed}");
        assert_eq!(u64_of(&consumed, "duplicates"), 0, "{consumed}");
        assert_eq!(u64_of(&consumed, "corrupt"), 0, "{consumed}");
        assert_eq!(u64_of(&consumed, "order_violations"), 0, "{consumed}");
        assert_eq!(
            u64_of(&consumed, "checksum"),
            u64_of(&produced, "checksum"),
            "payload checksums differ"
        );
    }
    gateway.broker.stop();
}

/// One `#[test]` per client library for a scenario that takes the client.
macro_rules! test_per_client {
    ($scenario:ident: $($test:ident => $client:expr),+ $(,)?) => {
        $(
            #[test]
            fn $test() {
                $scenario($client);
            }
        )+
    };
}

test_per_client!(round_trip:
    confluent_kafka_round_trips_a_million_records_with_every_codec => Client::Confluent,
    kafka_python_round_trips_a_million_records_with_every_codec => Client::KafkaPython,
    kafkajs_round_trips_a_million_records_with_every_codec => Client::Kafkajs,
);

/// A long-running client process the test talks to: stdin closed = stop,
/// stdout = JSON events, the last one the summary.
struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// The partitions the last "assigned" event named (cleared on "revoked").
    assigned: BTreeSet<u64>,
    /// The first offset read per partition ("first" events).
    first: BTreeMap<u64, u64>,
    name: String,
}

impl Running {
    fn spawn(mut cmd: Command, name: &str) -> Running {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start interop client");
        let stdin = child.stdin.take();
        let lines = read_lines(&mut child);
        Running {
            child,
            stdin,
            lines,
            assigned: BTreeSet::new(),
            first: BTreeMap::new(),
            name: name.to_string(),
        }
    }

    /// Takes in the events printed so far.
    fn pump(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                panic!("{}: not JSON: {line}", self.name)
            };
            match event["event"].as_str() {
                Some("assigned") => {
                    self.assigned = event["partitions"]
                        .as_array()
                        .expect("partitions array")
                        .iter()
                        .map(|p| p.as_u64().expect("partition number"))
                        .collect();
                }
                Some("revoked") => self.assigned.clear(),
                Some("first") => {
                    self.first
                        .insert(u64_of(&event, "partition"), u64_of(&event, "offset"));
                }
                _ => {}
            }
        }
    }

    /// Closes stdin (the signal to stop) and returns the summary.
    fn stop(mut self) -> Value {
        drop(self.stdin.take());
        let status = wait_bounded(&mut self.child, GROUP_WAIT_S_MAX);
        last_json(&self.name, &self.lines, status)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(what: &str, members: &mut [&mut Running], done: impl Fn(&[&mut Running]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(GROUP_WAIT_S_MAX);
    loop {
        for m in members.iter_mut() {
            m.pump();
            if let Some(status) = m.child.try_wait().expect("poll member") {
                panic!("{} exited with {status} while waiting for {what}", m.name);
            }
        }
        if done(members) {
            return;
        }
        let state: Vec<String> = members
            .iter()
            .map(|m| format!("{}: {:?}", m.name, m.assigned))
            .collect();
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; assignments {state:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every member holds partitions, no two the same, all of them covered.
fn balanced(members: &[&mut Running]) -> bool {
    let mut all = BTreeSet::new();
    for m in members {
        if m.assigned.is_empty() {
            return false;
        }
        for p in &m.assigned {
            if !all.insert(*p) {
                return false;
            }
        }
    }
    all == (0..PARTITIONS).collect()
}

fn read_everywhere(members: &[&mut Running]) -> bool {
    members.iter().all(|m| m.first.len() as u64 == PARTITIONS)
}

struct GroupRun<'a> {
    client: Client,
    topic: &'a str,
    group: &'a str,
    dir: &'a Path,
    members: usize,
}

impl GroupRun<'_> {
    fn member(&mut self, bootstrap: &str, client_id: &str, extra: &[&str]) -> Running {
        self.members += 1;
        let name = format!("member-{}", self.members);
        let seen = self.dir.join(format!("{name}.seen"));
        let mut cmd = self
            .client
            .command("consume", bootstrap, self.topic, GROUP_SCENARIO_S_MAX);
        cmd.args(["--group", self.group, "--client-id", client_id])
            .arg("--seen-file")
            .arg(&seen)
            .arg("--until-stdin-closes")
            .args(extra);
        Running::spawn(cmd, &name)
    }

    fn committed(&self, bootstrap: &str) -> BTreeMap<u64, u64> {
        let mut cmd = self.client.command("committed", bootstrap, self.topic, 60);
        cmd.args(["--group", self.group]);
        let out = run(cmd, 60);
        let committed: BTreeMap<u64, u64> = out["committed"]
            .as_object()
            .expect("committed map")
            .iter()
            .map(|(p, o)| {
                (
                    p.parse().expect("partition number"),
                    o.as_u64().expect("offset"),
                )
            })
            .collect();
        assert_eq!(
            committed.len() as u64,
            PARTITIONS,
            "a partition has no committed offset: {out}"
        );
        committed
    }

    /// Every sequence number any member read, from their `--seen-file`s.
    fn seen(&self) -> Vec<bool> {
        let mut seen = Vec::new();
        for n in 1..=self.members {
            let path = self.dir.join(format!("member-{n}.seen"));
            let bytes = std::fs::read(&path).unwrap_or_default();
            for seq in bytes.chunks_exact(8) {
                let seq = u64::from_le_bytes(seq.try_into().expect("8 bytes")) as usize;
                if seen.len() <= seq {
                    seen.resize(seq + 1, false);
                }
                seen[seq] = true;
            }
        }
        seen
    }
}

/// One consumer; a second with the same client.id joins (both get
/// partitions); the first leaves (the second gets all); three join at once;
/// all stop and a new one resumes at the committed offsets; the broker
/// restarts and a new one resumes at the same committed offsets. An
/// idempotent producer writes throughout; every acknowledged record is read
/// at least once and stored exactly once.
fn group_scenario(client: Client) {
    client.check_installed();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    let mut gateway = Gateway::start(&data_dir);
    let bootstrap = gateway.bootstrap();
    let topic = format!("group-{}", client.name());
    let group = format!("group-{}-readers", client.name());
    create_topic(client, &bootstrap, &topic);
    let mut g = GroupRun {
        client,
        topic: &topic,
        group: &group,
        dir: dir.path(),
        members: 0,
    };

    let mut produce = client.command("produce", &bootstrap, &topic, GROUP_SCENARIO_S_MAX);
    produce
        .args(["--count", &GROUP_PRODUCE_RECORDS_MAX.to_string()])
        .args(["--rate", &GROUP_PRODUCE_RATE.to_string()])
        .args(["--client-id", "group-producer", "--until-stdin-closes"]);
    let producer = Running::spawn(produce, "producer");

    let same_id = "same-client-id";
    let mut m1 = g.member(&bootstrap, same_id, &[]);
    wait_for("one member with every partition", &mut [&mut m1], balanced);

    let mut m2 = g.member(&bootstrap, same_id, &[]);
    wait_for(
        "two members with the same client.id sharing the partitions",
        &mut [&mut m1, &mut m2],
        balanced,
    );

    m1.stop();
    wait_for(
        "the remaining member taking every partition",
        &mut [&mut m2],
        balanced,
    );

    let mut m3 = g.member(&bootstrap, "joiner-a", &[]);
    let mut m4 = g.member(&bootstrap, "joiner-b", &[]);
    let mut m5 = g.member(&bootstrap, "joiner-c", &[]);
    wait_for(
        "three members joining at once",
        &mut [&mut m2, &mut m3, &mut m4, &mut m5],
        balanced,
    );

    // Restart the consumers: stop them all, then a new member must start
    // every partition exactly at the committed offset.
    let mut all = [m2, m3, m4, m5];
    for m in &mut all {
        drop(m.stdin.take()); // all leave at once
    }
    for m in all {
        m.stop();
    }
    let committed = g.committed(&bootstrap);
    eprintln!(
        "{} committed after the consumers stopped: {committed:?}",
        client.name()
    );
    let mut m6 = g.member(&bootstrap, same_id, &[]);
    wait_for(
        "the restarted member reading every partition",
        &mut [&mut m6],
        read_everywhere,
    );
    assert_eq!(
        m6.first, committed,
        "restarted consumer did not resume at the committed offsets"
    );
    eprintln!("{} restarted member: {}", client.name(), m6.stop());

    // Restart the broker: the committed offsets survive, and a new member
    // resumes at them.
    let committed = g.committed(&bootstrap);
    eprintln!(
        "{} committed before the broker restart: {committed:?}",
        client.name()
    );
    gateway = gateway.restart();
    assert_eq!(
        g.committed(&bootstrap),
        committed,
        "committed offsets changed across a broker restart"
    );
    let mut m7 = g.member(&bootstrap, same_id, &[]);
    wait_for(
        "the member after the broker restart reading every partition",
        &mut [&mut m7],
        read_everywhere,
    );
    assert_eq!(
        m7.first, committed,
        "after a broker restart the consumer did not resume at the committed offsets"
    );

    let produced = producer.stop();
    eprintln!("{} group producer: {produced}", client.name());
    assert_eq!(u64_of(&produced, "failed"), 0, "{produced}");
    assert_eq!(u64_of(&produced, "unacked"), 0, "{produced}");
    let acked = u64_of(&produced, "acked");
    assert_eq!(acked, u64_of(&produced, "produced"), "{produced}");
    assert!(acked > 0, "{produced}");
    let after_restart = m7.stop();
    eprintln!(
        "{} member after the broker restart: {after_restart}",
        client.name()
    );

    // Drain what the producer wrote last, then check nothing was lost.
    let drain = g.member(&bootstrap, same_id, &["--idle-exit-s", "8"]);
    let drained = drain.stop_when_idle();
    eprintln!("{} group drain: {drained}", client.name());
    // Records in the log (from the highest offset read per partition) next
    // to records acknowledged: the producer is idempotent, so a retry,
    // even across the broker restart, must not be stored twice.
    let log_records: u64 = (0..PARTITIONS)
        .map(|p| {
            let key = p.to_string();
            [&after_restart, &drained]
                .iter()
                .filter_map(|summary| summary["next_offset"][&key].as_u64())
                .max()
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(
        log_records,
        acked,
        "{}: {log_records} records in the log for {acked} acknowledged: an idempotent retry was stored twice",
        client.name()
    );
    let seen = g.seen();
    let lost: Vec<u64> = (0..acked)
        .filter(|&s| !seen.get(s as usize).copied().unwrap_or(false))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {acked} acknowledged records were never consumed, first {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    assert!(
        seen.len() as u64 <= acked,
        "a consumer read sequence number {} beyond the {acked} produced",
        seen.len() - 1
    );
    gateway.broker.stop();
}

impl Running {
    /// Waits for a member started with `--idle-exit-s` to exit by itself.
    fn stop_when_idle(mut self) -> Value {
        let status = wait_bounded(&mut self.child, GROUP_SCENARIO_S_MAX);
        last_json(&self.name, &self.lines, status)
    }
}

test_per_client!(group_scenario:
    confluent_kafka_consumer_group_rebalances_and_resumes => Client::Confluent,
    kafkajs_consumer_group_rebalances_and_resumes => Client::Kafkajs,
);

/// The gateway on an S3 bucket (a real S3-compatible server): an
/// idempotent confluent-kafka producer and a consumer group that commits;
/// the broker is killed with SIGKILL and replaced by one with an empty data
/// dir on the same bucket. The group's committed offsets, the producers'
/// state and the records are all in the bucket: the offsets are the same,
/// the group reads on from them and sees only the new records, and a new
/// group reads every record once.
#[test]
fn kafka_groups_and_producers_on_s3_survive_a_broker_replaced_with_an_empty_disk() {
    const RECORDS: u64 = 20_000;
    let client = Client::Confluent;
    client.check_installed();
    let _serial = serial();
    let server = test_support::S3Server::start();
    let filer = server.url("kafka");
    let env = server.env();
    let first_dir = tempfile::tempdir().unwrap();
    let kafka_port = port();
    let gateway = Gateway::start_with_env(
        first_dir.path(),
        port(),
        kafka_port,
        &["--filer", &filer],
        &env,
    );
    let bootstrap = gateway.bootstrap();
    let topic = "on-s3";
    let group = "on-s3-readers";
    create_topic(client, &bootstrap, topic);
    let produce = |first: u64| {
        let mut cmd = client.command("produce", &bootstrap, topic, ROUND_TRIP_RUN_S_MAX);
        cmd.args([
            "--count",
            &RECORDS.to_string(),
            "--first-seq",
            &first.to_string(),
        ]);
        let produced = run(cmd, ROUND_TRIP_RUN_S_MAX);
        assert_eq!(u64_of(&produced, "acked"), RECORDS, "{produced}");
        assert_eq!(u64_of(&produced, "failed"), 0, "{produced}");
    };
    // Reads records 0..seqs (`--expect`), or, with `idle`, whatever comes
    // until nothing more does, checking each against the ledger of 0..seqs.
    let consume = |group: &str, seqs: u64, reads: u64, idle: bool| {
        let mut cmd = client.command("consume", &bootstrap, topic, ROUND_TRIP_RUN_S_MAX);
        cmd.args(["--group", group]);
        if idle {
            cmd.args(["--idle-exit-s", "5"]);
        } else {
            cmd.args(["--expect", &seqs.to_string()]);
        }
        let consumed = run(cmd, ROUND_TRIP_RUN_S_MAX);
        assert_eq!(u64_of(&consumed, "unique"), reads, "{consumed}");
        assert_eq!(u64_of(&consumed, "duplicates"), 0, "{consumed}");
        assert_eq!(u64_of(&consumed, "corrupt"), 0, "{consumed}");
        assert_eq!(u64_of(&consumed, "order_violations"), 0, "{consumed}");
        consumed
    };
    let committed = || {
        let mut cmd = client.command("committed", &bootstrap, topic, 60);
        cmd.args(["--group", group]);
        let out = run(cmd, 60);
        out["committed"].clone()
    };
    produce(0);
    consume(group, RECORDS, RECORDS, false);
    let before = committed();
    let total: u64 = before
        .as_object()
        .unwrap()
        .values()
        .map(|o| o.as_u64().unwrap())
        .sum();
    assert_eq!(total, RECORDS, "committed offsets {before}");

    // What the gateway keeps is in the bucket, not on the broker's disk.
    let keys = server.keys("kafka/");
    for wanted in [
        "kafka/kafka/groups/on-s3-readers.offsets",
        "kafka/kafka/producer_ids",
    ] {
        assert!(keys.iter().any(|k| k == wanted), "no {wanted} in {keys:?}");
    }
    assert!(
        keys.iter().any(|k| k.contains("/kafka-producers/")),
        "no producer state in {keys:?}"
    );
    assert!(!first_dir.path().join("filer").join("kafka").exists());
    gateway.broker.kill9();

    let second_dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start_with_env(
        second_dir.path(),
        port(),
        kafka_port,
        &["--filer", &filer],
        &env,
    );
    assert_eq!(
        committed(),
        before,
        "committed offsets changed with the broker"
    );
    produce(RECORDS);
    // The group reads on from its offsets: only the new records, from
    // exactly the offsets committed before the kill.
    let resumed = consume(group, 0, RECORDS, true);
    assert_eq!(resumed["first_offset"], before, "{resumed}");
    // A new group reads everything, each record once.
    let all = consume("on-s3-everything", 2 * RECORDS, 2 * RECORDS, false);
    assert_eq!(u64_of(&all, "missing"), 0, "{all}");
    gateway.broker.stop();
}

/// Records the admin scenario produces and reads with a group before the
/// admin session.
const ADMIN_RECORDS: u64 = 40;
/// How long one admin session may take.
const ADMIN_SESSION_S_MAX: u64 = 90;

/// Each client's admin library (`interop/capture/admin_session.*`, the
/// session the vector capture records) against a gateway whose topic has
/// `ADMIN_RECORDS` records read and committed by a group that has left:
/// every step succeeds and answers what the gateway holds (partitions,
/// offsets, committed offsets, the group, one broker), elections are not
/// needed, partitions move only onto node 0 and no move is under way, and
/// the group is deleted.
fn admin_session(client: Client) {
    client.check_installed();
    drop(python()); // the set-up uses confluent-kafka
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start(dir.path());
    let bootstrap = gateway.bootstrap();
    let topic = format!("admin-{}", client.name());
    let group = format!("{topic}-group");
    create_topic(Client::Confluent, &bootstrap, &topic);
    let mut produce = Client::Confluent.command("produce", &bootstrap, &topic, 60);
    produce.args(["--count", &ADMIN_RECORDS.to_string(), "--keys", "16"]);
    assert_eq!(u64_of(&run(produce, 60), "acked"), ADMIN_RECORDS);
    let mut consume = Client::Confluent.command("consume", &bootstrap, &topic, 60);
    consume
        .args(["--expect", &ADMIN_RECORDS.to_string(), "--keys", "16"])
        .args(["--group", &group]);
    assert_eq!(u64_of(&run(consume, 60), "unique"), ADMIN_RECORDS);

    let mut session = match client {
        Client::Confluent | Client::KafkaPython => {
            let mut cmd = Command::new(python());
            cmd.arg(repo_root().join("interop/capture/admin_session.py"))
                .args(["--client", client.name()]);
            cmd
        }
        Client::Kafkajs => {
            let mut cmd = Command::new(node());
            cmd.arg(repo_root().join("interop/capture/admin_session.js"))
                .env("NODE_PATH", repo_root().join("interop/node/node_modules"));
            cmd
        }
    };
    session
        .args([
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--group",
            &group,
        ])
        .args(["--timeout-s", &ADMIN_SESSION_S_MAX.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = session.spawn().expect("start the admin session");
    let lines = read_lines(&mut child);
    let status = wait_bounded(&mut child, ADMIN_SESSION_S_MAX);
    let steps: BTreeMap<String, Value> = lines
        .iter()
        .map(|line| {
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("admin session printed {line:?}: {e}"));
            (v["step"].as_str().unwrap().to_string(), v["result"].clone())
        })
        .collect();
    eprintln!("{} admin session: {steps:?}", client.name());
    assert!(
        status.success(),
        "{} admin session: {status}",
        client.name()
    );
    let step = |name: &str| -> &Value {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("{}: no step {name:?} in {steps:?}", client.name()))
    };
    let partitions: Vec<u64> = (0..PARTITIONS).collect();
    assert_eq!(step("metadata"), &serde_json::json!(partitions));
    assert!(step("describe-configs")
        .to_string()
        .contains("retention.ms"));
    // Latest offsets and committed offsets: both the records read, in all.
    let (latest, committed): (u64, u64) = match client {
        Client::Confluent => (
            offsets_in(step("list-offsets latest")),
            offsets_in(step("offset-fetch")),
        ),
        Client::KafkaPython => (
            offsets_in(step("list-offsets latest")),
            offsets_in(&step("offset-fetch")[&group]),
        ),
        Client::Kafkajs => (
            offsets_in(step("list-offsets")),
            offsets_in(&step("offset-fetch")[0]["partitions"]),
        ),
    };
    assert_eq!((latest, committed), (ADMIN_RECORDS, ADMIN_RECORDS));
    assert!(step("list-groups").to_string().contains(&group));
    assert!(step("describe-groups")
        .to_string()
        .to_lowercase()
        .contains("empty"));
    assert_eq!(
        step("delete-topics"),
        &Value::String(format!("{topic}-doomed"))
    );
    if client == Client::Kafkajs {
        // kafkajs has no election or reassignment admin calls.
        assert_eq!(step("delete-groups")[0]["errorCode"], 0);
    } else {
        assert!(step("describe-cluster").to_string().contains("\"kelp\""));
        // Every partition: "not needed" however the client spells it.
        let elected = step("elect-leaders").as_object().unwrap();
        assert_eq!(elected.len(), PARTITIONS as usize, "{elected:?}");
        for outcome in elected.values() {
            let spelled = outcome.as_str().unwrap_or_default().to_lowercase();
            assert!(
                spelled.replace('_', "").starts_with("electionnotneeded"),
                "{outcome}"
            );
        }
        assert!(steps.contains_key("delete-groups"));
        assert!(steps.contains_key("done"));
    }
    if client == Client::KafkaPython {
        assert_eq!(step("list-reassignments"), &serde_json::json!({}));
        // Partition 0 onto node 0 (where it is), 1 onto an unknown
        // broker, 2's move (none) cancelled.
        assert_eq!(
            step("alter-reassignments"),
            &serde_json::json!({
                "0": null,
                "1": "InvalidReplicationAssignmentError",
                "2": "NoReassignmentInProgressError",
            })
        );
    }
    gateway.broker.stop();
}

/// The sum of the offsets in a client's per-partition listing (an object
/// or array of numbers, numeric strings, `[offset, ...]` tuples or
/// `{"offset": ...}` objects); negative ones (none committed) count 0.
fn offsets_in(listing: &Value) -> u64 {
    let offset = |v: &Value| -> i64 {
        let v = match v {
            Value::Array(tuple) => &tuple[0],
            Value::Object(o) => &o["offset"],
            v => v,
        };
        match v {
            Value::String(s) => s.parse().unwrap(),
            v => v.as_i64().unwrap_or_else(|| panic!("no offset in {v}")),
        }
    };
    let each: Vec<i64> = match listing {
        Value::Object(o) => o.values().map(offset).collect(),
        Value::Array(a) => a.iter().map(offset).collect(),
        other => panic!("not a listing of offsets: {other}"),
    };
    each.into_iter().map(|o| o.max(0) as u64).sum()
}

test_per_client!(admin_session:
    confluent_kafka_admin_client_session => Client::Confluent,
    kafka_python_admin_client_session => Client::KafkaPython,
    kafkajs_admin_session => Client::Kafkajs,
);
