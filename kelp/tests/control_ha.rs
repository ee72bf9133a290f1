//! The highly available control plane on loopback with real processes: a
//! real etcd (Debian `etcd-server`), three `kelp control --etcd` instances
//! over one shared filer, and three `kelp serve --control A,B,C` brokers.
//!
//! - Under durable keyed load with policy-driven splits, the leader is
//!   killed with SIGKILL twice; the brokers follow the new leader, the
//!   policy goes on splitting, and every acknowledged record is read once,
//!   each key in order. All along, a sampler asks every instance who
//!   leads: never two at once.
//! - A leader frozen with SIGSTOP past its lease, then resumed, is no
//!   longer leader: it answers `NotLeader` naming its successor and applies
//!   nothing, and says so in its log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::Client;
use client::TopicInfo;
use test_support::EtcdServer;
use wire::{AdminRequest, ErrorCode, Response};

mod support;

use support::keyed::{
    create_hot_topic, each_key_once_in_order, publish_until, read_records, subscribe_earliest,
    Publisher, RECORDS_PER_STEP,
};
use support::{port, Broker, ControlPlane};

const TOPIC: &str = "ha/orders";
const KEYS: u64 = 64;
/// The lease of every instance: a dead leader is replaced about this long
/// after its last keepalive.
const LEASE_TTL_S: u64 = 2;
/// Bounds: the test fails rather than hang.
const SPLIT_LIMIT: Duration = Duration::from_secs(90);
const TAKEOVER_LIMIT: Duration = Duration::from_secs(30);
const READ_LIMIT: Duration = Duration::from_secs(90);
/// How often the sampler asks every instance who leads.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// What one instance says when asked.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// It answered a request itself.
    Leads,
    /// `NotLeader`, naming the leader (empty: none elected yet).
    Follows(String),
    /// No answer (dead, frozen, or not listening yet).
    Silent,
}

/// Ask the instance on `port` to list topics, over a fresh connection with
/// short timeouts (a frozen instance must not hang the asker).
fn ask(port: u16) -> Answer {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(200)) else {
        return Answer::Silent;
    };
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut out = Vec::new();
    AdminRequest::ListTopics.encode(1, &mut out);
    if std::io::Write::write_all(&mut stream, &out).is_err() {
        return Answer::Silent;
    }
    let Some(frame) = test_support::read_frame(&mut stream) else {
        return Answer::Silent;
    };
    match test_support::decode(&frame) {
        Response::Error {
            code: ErrorCode::NotLeader,
            message,
        } => Answer::Follows(message.to_string()),
        Response::Error { code, message } => panic!("instance {port} answered {code:?} {message}"),
        _ => Answer::Leads,
    }
}

/// A thread asking every instance who leads every [`SAMPLE_EVERY`]; it
/// records each instant more than one answered as leader in one round.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<String>>,
    /// The port that answered as leader in the latest round, if one did.
    leader: Arc<Mutex<Option<u16>>>,
}

impl Sampler {
    fn start(ports: Vec<u16>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let leader = Arc::new(Mutex::new(None));
        let thread = {
            let (stop, leader) = (stop.clone(), leader.clone());
            std::thread::spawn(move || {
                let mut doubles = Vec::new();
                let started = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let leading: Vec<u16> = ports
                        .iter()
                        .copied()
                        .filter(|p| ask(*p) == Answer::Leads)
                        .collect();
                    if leading.len() > 1 {
                        doubles.push(format!("{:?}: {leading:?}", started.elapsed()));
                    }
                    *leader.lock().unwrap() = leading.first().copied();
                    std::thread::sleep(SAMPLE_EVERY);
                }
                doubles
            })
        };
        Sampler {
            stop,
            thread,
            leader,
        }
    }

    fn leader(&self) -> Option<u16> {
        *self.leader.lock().unwrap()
    }

    /// Wait until an instance other than `not` leads; how long it took.
    fn wait_for_leader_other_than(&self, not: Option<u16>) -> (u16, Duration) {
        let started = Instant::now();
        loop {
            if let Some(leader) = self.leader().filter(|l| Some(*l) != not) {
                return (leader, started.elapsed());
            }
            assert!(
                started.elapsed() < TAKEOVER_LIMIT,
                "no instance other than {not:?} took over"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop; every round where two instances answered as leader.
    fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Three instances on free ports over one etcd and one filer.
struct ControlPlanes {
    ports: Vec<u16>,
    instances: Vec<Option<ControlPlane>>,
    args: Vec<String>,
    dir: std::path::PathBuf,
}

impl ControlPlanes {
    fn start(dir: &Path, etcd: &EtcdServer) -> ControlPlanes {
        let filer = dir.join("filer");
        std::fs::create_dir_all(&filer).unwrap();
        let args = vec![
            "--etcd".to_owned(),
            etcd.endpoint(),
            "--cluster".to_owned(),
            "ha-test".to_owned(),
            "--lease-ttl-s".to_owned(),
            LEASE_TTL_S.to_string(),
            "--filer".to_owned(),
            format!("file://{}", filer.display()),
            "--broker-silence-ms".to_owned(),
            "5000".to_owned(),
        ];
        let mut planes = ControlPlanes {
            ports: (0..3).map(|_| port()).collect(),
            instances: Vec::new(),
            args,
            dir: dir.to_path_buf(),
        };
        for i in 0..3 {
            let instance = planes.spawn(i);
            planes.instances.push(Some(instance));
        }
        planes
    }

    fn spawn(&self, i: usize) -> ControlPlane {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        ControlPlane::start_logged(
            &self.dir.join(format!("control{i}")),
            self.ports[i],
            &args,
            &self.log(i),
        )
    }

    fn log(&self, i: usize) -> std::path::PathBuf {
        self.dir.join(format!("control{i}.log"))
    }

    fn index_of(&self, port: u16) -> usize {
        self.ports.iter().position(|p| *p == port).unwrap()
    }

    /// `--control A,B,C`.
    fn addresses(&self) -> String {
        let all: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        all.join(",")
    }

    fn kill9(&mut self, i: usize) {
        self.instances[i]
            .take()
            .expect("a running instance")
            .kill9();
    }

    fn restart(&mut self, i: usize) {
        assert!(self.instances[i].is_none());
        self.instances[i] = Some(self.spawn(i));
    }

    fn instance(&self, i: usize) -> &ControlPlane {
        self.instances[i].as_ref().expect("a running instance")
    }
}

fn start_broker(dir: &Path, planes: &ControlPlanes) -> Broker {
    Broker::start_with(
        dir,
        port(),
        &["--control", &planes.addresses(), "--unpinned"],
    )
}

fn open_count(info: &TopicInfo) -> usize {
    info.segments.iter().filter(|s| !s.sealed).count()
}

/// Publish until the topic has at least `open` open segments; how many it
/// has then.
async fn publish_until_open(client: &Client, publisher: &mut Publisher, open: usize) -> usize {
    let what = format!("the policy splits the topic into {open} open segments");
    publish_until(publisher, client, TOPIC, SPLIT_LIMIT, &what, |info| {
        Some(open_count(info)).filter(|n| *n >= open)
    })
    .await
}

/// Publish while waiting for an instance other than `old` to lead.
async fn publish_through_takeover(
    sampler: &Sampler,
    publisher: &mut Publisher,
    old: u16,
) -> (u16, Duration) {
    let started = Instant::now();
    loop {
        if let Some(leader) = sampler.leader().filter(|l| *l != old) {
            return (leader, started.elapsed());
        }
        assert!(
            started.elapsed() < TAKEOVER_LIMIT,
            "no instance took over from {old}"
        );
        publisher.step(RECORDS_PER_STEP / 4).await;
    }
}

fn log_of(planes: &ControlPlanes, i: usize) -> String {
    std::fs::read_to_string(planes.log(i)).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_elected_control_planes_survive_two_leader_kills_under_durable_load() {
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut planes = ControlPlanes::start(dir.path(), &etcd);
    let sampler = Sampler::start(planes.ports.clone());
    let (first, elected_in) = sampler.wait_for_leader_other_than(None);
    eprintln!("instance {first} leads after {elected_in:?}");

    let b1 = start_broker(&dir.path().join("b1"), &planes);
    let b2 = start_broker(&dir.path().join("b2"), &planes);
    let b3 = start_broker(&dir.path().join("b3"), &planes);
    let client = b1.client().await;
    create_hot_topic(&client, TOPIC, 8).await;
    let mut subscriber = subscribe_earliest(&client, TOPIC).await;
    let mut publisher = Publisher::durable(&client, TOPIC, KEYS).await;

    // The first leader splits the topic, then dies.
    let open = publish_until_open(&client, &mut publisher, 2).await;
    planes.kill9(planes.index_of(first));
    let (second, took) = publish_through_takeover(&sampler, &mut publisher, first).await;
    eprintln!("kill -9 of leader {first}: {second} leads {took:?} later");
    planes.restart(planes.index_of(first));

    // The second leader goes on splitting, then dies too.
    let open = publish_until_open(&client, &mut publisher, open + 1).await;
    planes.kill9(planes.index_of(second));
    let (third, took) = publish_through_takeover(&sampler, &mut publisher, second).await;
    eprintln!("kill -9 of leader {second}: {third} leads {took:?} later");

    // The third leader splits further.
    publish_until_open(&client, &mut publisher, open + 1).await;
    let sent = publisher.finish().await;

    let got = read_records(&mut subscriber, sent, READ_LIMIT).await;
    each_key_once_in_order(got, sent);

    let doubles = sampler.finish();
    assert!(
        doubles.is_empty(),
        "two instances answered as leader at once: {doubles:?}"
    );
    for i in 0..3 {
        for line in log_of(&planes, i).lines() {
            if line.contains("leader") || line.contains("stepped down") {
                eprintln!("control {i} ({}): {line}", planes.ports[i]);
            }
        }
    }
    // Each leader said so in one line; the history is in etcd's terms.
    for leader in [first, second, third] {
        let log = log_of(&planes, planes.index_of(leader));
        assert!(
            log.contains("became leader in term"),
            "instance {leader} logged no takeover:\n{log}"
        );
    }
    let info = client.describe_topic(TOPIC).await.unwrap();
    assert!(
        info.segments
            .iter()
            .filter(|s| !s.sealed)
            .all(|s| s.broker.is_some()),
        "every open segment has an owner: {info:?}"
    );
    drop((b1, b2, b3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_frozen_past_its_lease_cannot_write_when_it_resumes() {
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let planes = ControlPlanes::start(dir.path(), &etcd);
    let sampler = Sampler::start(planes.ports.clone());
    let (frozen, _) = sampler.wait_for_leader_other_than(None);
    let broker = start_broker(&dir.path().join("b1"), &planes);
    let client = broker.client().await;
    client.create_topic(TOPIC, 1).await.unwrap();

    // Frozen past its lease: another instance takes over, and the layout
    // changes under it.
    let frozen_at = Instant::now();
    let instance = planes.instance(planes.index_of(frozen));
    instance.signal("STOP");
    let (successor, took) = sampler.wait_for_leader_other_than(Some(frozen));
    eprintln!("{successor} took over from the frozen {frozen} after {took:?}");
    // The broker may still be finding the new leader: bounded retries of
    // an admin request that must succeed once it has.
    let split = loop {
        match client.split_segment(TOPIC, 0, 2).await {
            Ok(info) => break info,
            Err(e) => {
                assert!(
                    frozen_at.elapsed() < TAKEOVER_LIMIT,
                    "the split was never applied: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(open_count(&split), 2, "{split:?}");
    std::thread::sleep(Duration::from_secs(LEASE_TTL_S));

    // Resumed: it knows its term is over before it handles anything, and
    // soon names its successor.
    instance.signal("CONT");
    let resumed = Instant::now();
    loop {
        match ask(frozen) {
            Answer::Leads => panic!("the resumed instance answered as leader"),
            Answer::Follows(leader) if leader == format!("127.0.0.1:{successor}") => break,
            other => {
                assert!(
                    resumed.elapsed() < TAKEOVER_LIMIT,
                    "the resumed instance never named its successor: {other:?}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    // A change sent straight to it is refused and changes nothing.
    let mut stream = TcpStream::connect(("127.0.0.1", frozen)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut out = Vec::new();
    AdminRequest::SplitSegment {
        topic: TOPIC.into(),
        segment: 1,
        pieces: 2,
    }
    .encode(7, &mut out);
    std::io::Write::write_all(&mut stream, &out).unwrap();
    let frame = test_support::read_frame(&mut stream).expect("an answer");
    assert!(
        matches!(
            test_support::decode(&frame),
            Response::Error {
                code: ErrorCode::NotLeader,
                ..
            }
        ),
        "the deposed leader applied a split: {:?}",
        test_support::decode(&frame)
    );
    let after = client.describe_topic(TOPIC).await.unwrap();
    assert_eq!(
        after.segments.len(),
        split.segments.len(),
        "the layout changed after the deposed leader was asked: {after:?}"
    );
    let log = log_of(&planes, planes.index_of(frozen));
    assert!(
        log.contains("stepped down"),
        "the deposed leader did not log stepping down:\n{log}"
    );
    let doubles = sampler.finish();
    assert!(
        doubles.is_empty(),
        "two instances answered as leader at once: {doubles:?}"
    );
    drop(broker);
}
