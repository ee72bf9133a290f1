//! The control-plane process on loopback: a real `ControlServer`, fake
//! brokers that answer `ApplyLayout` / `DropTopic` and record what they got,
//! and a blocking wire client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kelp_control::frame_stream::read_frame;
use kelp_control::{ControlServer, ControlServerConfig, Topic};
use wire::message::{SegmentLoadReport, ShardAddress, TopicInfo};
use wire::{
    AdminRequest, BrokerPortRequest, ControlPortRequest, DataRequest, ErrorCode, LayoutCommand,
    MembershipRequest, Response,
};

/// How long a test waits for something the control plane does on a tick.
const EVENT_WAIT: Duration = Duration::from_secs(20);

fn start(dir: &Path, silence_ms: u64, tick_ms: u64) -> ControlServer {
    ControlServer::start(ControlServerConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        data_dir: dir.to_path_buf(),
        broker_silence_ms: silence_ms,
        tick_ms,
        rebalance: None,
        ..ControlServerConfig::default()
    })
    .unwrap()
}

/// A blocking wire client.
struct Client {
    stream: TcpStream,
    next_id: u32,
}

impl Client {
    fn connect(address: SocketAddr) -> Client {
        let stream = TcpStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Client { stream, next_id: 1 }
    }

    fn call(&mut self, request: &ControlPortRequest) -> Response<'static> {
        self.call_with(|id, out| request.encode(id, out))
    }

    /// Send the frame `encode` writes under the next request id (any
    /// request, one the control port does not take too) and read the answer.
    fn call_with(&mut self, encode: impl FnOnce(u32, &mut Vec<u8>)) -> Response<'static> {
        let id = self.next_id;
        self.next_id += 1;
        let mut out = Vec::new();
        encode(id, &mut out);
        self.stream.write_all(&out).unwrap();
        self.read_answer(Some(id))
    }

    fn read_answer(&mut self, id: Option<u32>) -> Response<'static> {
        let mut payload = Vec::new();
        let header = read_frame(&mut self.stream, &mut payload).unwrap().unwrap();
        if let Some(id) = id {
            assert_eq!(header.request_id, id);
        }
        match Response::decode(header.frame_type, &payload).unwrap() {
            Response::Topic(t) => Response::Topic(t),
            Response::Done => Response::Done,
            Response::TopicList { topics } => Response::TopicList { topics },
            Response::Error { code, message } => Response::Error { code, message },
            Response::Brokers { brokers } => Response::Brokers { brokers },
            Response::Registered { id, filer } => Response::Registered { id, filer },
            other => panic!("unexpected answer {other:?}"),
        }
    }

    fn register(&mut self, id: Option<u32>, broker: &FakeBroker) -> u32 {
        match self.call(
            &MembershipRequest::RegisterBroker {
                id,
                shards: broker.shards(),
                capacity_bytes_per_s: 1 << 30,
                capacity_records_per_s: 1 << 20,
            }
            .into(),
        ) {
            Response::Registered { id, .. } => id,
            other => panic!("register: {other:?}"),
        }
    }

    fn topic(&mut self, request: &ControlPortRequest) -> TopicInfo {
        match self.call(request) {
            Response::Topic(t) => t,
            other => panic!("{request:?}: {other:?}"),
        }
    }

    fn describe(&mut self, topic: &str) -> TopicInfo {
        self.topic(
            &AdminRequest::DescribeTopic {
                topic: topic.to_owned(),
            }
            .into(),
        )
    }

    fn error(&mut self, request: &ControlPortRequest) -> (ErrorCode, String) {
        match self.call(request) {
            Response::Error { code, message } => (code, message),
            other => panic!("{request:?}: expected an error, got {other:?}"),
        }
    }

    fn report(&mut self, broker: u32, segments: Vec<SegmentLoadReport>) -> Response<'static> {
        self.call(&MembershipRequest::LoadReport { broker, segments }.into())
    }
}

/// What a fake broker got, in order of arrival across all fake brokers of
/// a test (`seq` comes from one shared counter).
#[derive(Debug, Clone)]
struct Event {
    seq: u64,
    /// `seq` taken just before answering.
    answered_seq: u64,
    layout: Option<Topic>,
    /// The layout of a `RefuseWrites`.
    refused: Option<Topic>,
    dropped: Option<String>,
}

/// A TCP listener that answers broker commands with `Done`.
struct FakeBroker {
    address: SocketAddr,
    events: Arc<Mutex<Vec<Event>>>,
}

impl FakeBroker {
    fn start(name: &'static str, clock: &Arc<AtomicU64>, answer_delay: Duration) -> FakeBroker {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let events: Arc<Mutex<Vec<Event>>> = Arc::default();
        let (log, clock) = (events.clone(), clock.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let (log, clock) = (log.clone(), clock.clone());
                std::thread::spawn(move || {
                    let mut payload = Vec::new();
                    while let Ok(Some(header)) = read_frame(&mut stream, &mut payload) {
                        let seq = clock.fetch_add(1, Ordering::SeqCst);
                        let mut event = Event {
                            seq,
                            answered_seq: 0,
                            layout: None,
                            refused: None,
                            dropped: None,
                        };
                        match BrokerPortRequest::decode(header.frame_type, &payload).unwrap() {
                            BrokerPortRequest::Command(LayoutCommand::ApplyLayout {
                                topic_json,
                                ..
                            }) => {
                                event.layout = Some(Topic::from_json_bytes(topic_json).unwrap());
                            }
                            BrokerPortRequest::Command(LayoutCommand::DropTopic { topic }) => {
                                event.dropped = Some(topic)
                            }
                            BrokerPortRequest::Command(LayoutCommand::RefuseWrites {
                                topic_json,
                                ..
                            }) => {
                                event.refused = Some(Topic::from_json_bytes(topic_json).unwrap());
                            }
                            other => panic!("fake broker {name} got {other:?}"),
                        }
                        std::thread::sleep(answer_delay);
                        event.answered_seq = clock.fetch_add(1, Ordering::SeqCst);
                        log.lock().unwrap().push(event);
                        let mut out = Vec::new();
                        Response::Done.encode(header.request_id, &mut out);
                        if stream.write_all(&out).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        FakeBroker { address, events }
    }

    fn shards(&self) -> Vec<ShardAddress> {
        vec![ShardAddress {
            tcp: self.address.to_string(),
            quic: "127.0.0.1:1".to_owned(),
        }]
    }

    fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    fn layouts(&self) -> Vec<Topic> {
        self.events().into_iter().filter_map(|e| e.layout).collect()
    }
}

/// Wait until `check` holds, polling; fails the test after EVENT_WAIT.
fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + EVENT_WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reports load for a broker every `every` until stopped; the loads can
/// be changed while it runs.
struct Reporter {
    loads: Arc<Mutex<Vec<SegmentLoadReport>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reporter {
    fn start(control: SocketAddr, broker: u32, every: Duration) -> Reporter {
        let loads: Arc<Mutex<Vec<SegmentLoadReport>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (loads.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut client = Client::connect(control);
            while !s.load(Ordering::SeqCst) {
                let segments = l.lock().unwrap().clone();
                let answer = client.report(broker, segments);
                assert_eq!(answer, Response::Done, "report of broker {broker}");
                std::thread::sleep(every);
            }
        });
        Reporter {
            loads,
            stop,
            thread: Some(thread),
        }
    }

    fn set(&self, loads: Vec<SegmentLoadReport>) {
        *self.loads.lock().unwrap() = loads;
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap();
    }
}

fn load(topic: &str, segment: u32, bytes_per_s: u64) -> SegmentLoadReport {
    SegmentLoadReport {
        topic: topic.to_owned(),
        segment,
        bytes_per_s,
        records_per_s: 1,
        next_offset: 0,
        first_append_ms: None,
        lost_records: 0,
        followers: Vec::new(),
    }
}

fn open_ids(info: &TopicInfo) -> Vec<u32> {
    info.segments
        .iter()
        .filter(|s| !s.sealed)
        .map(|s| s.id)
        .collect()
}

fn create(client: &mut Client, topic: &str, segments: u32) -> TopicInfo {
    client.topic(
        &AdminRequest::CreateTopic {
            topic: topic.to_owned(),
            segments,
            replicas: 0,
        }
        .into(),
    )
}

#[test]
fn registration_creation_and_describe() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 10_000, 1_000);
    let clock = Arc::new(AtomicU64::new(0));
    let (b0, b1) = (
        FakeBroker::start("b0", &clock, Duration::ZERO),
        FakeBroker::start("b1", &clock, Duration::ZERO),
    );
    let mut client = Client::connect(server.address());
    let first = client.register(None, &b0);
    let second = client.register(None, &b1);
    assert_eq!((first, second), (0, 1));
    // A given id is kept; a fresh one is past the highest ever seen.
    let b7 = FakeBroker::start("b7", &clock, Duration::ZERO);
    assert_eq!(client.register(Some(7), &b7), 7);
    let b8 = FakeBroker::start("b8", &clock, Duration::ZERO);
    assert_eq!(client.register(None, &b8), 8);
    let Response::Registered { filer, .. } = client.call(
        &MembershipRequest::RegisterBroker {
            id: Some(first),
            shards: b0.shards(),
            capacity_bytes_per_s: 1 << 30,
            capacity_records_per_s: 1 << 20,
        }
        .into(),
    ) else {
        panic!("re-register")
    };
    // The filer's URL, absolute, so brokers on other hosts can open it.
    let dir_url = format!(
        "file://{}",
        std::fs::canonicalize(dir.path().join("filer"))
            .unwrap()
            .display()
    );
    assert_eq!(filer, dir_url);

    let created = create(&mut client, "ns/orders", 4);
    assert_eq!(open_ids(&created), [0, 1, 2, 3]);
    let brokers = [(0, &b0), (1, &b1), (7, &b7), (8, &b8)];
    for segment in &created.segments {
        let owner = segment.broker.expect("placed on a broker");
        let (_, fake) = brokers.iter().find(|(id, _)| *id == owner).unwrap();
        // Describe names the owner's shard address.
        assert_eq!(segment.address.as_ref(), Some(&fake.shards()[0]));
        // The owner was told the layout before the answer came back.
        let layouts = fake.layouts();
        assert_eq!(layouts.len(), 1, "one ApplyLayout to broker {owner}");
        let told = layouts[0]
            .segment(kelp_control::SegmentId(segment.id))
            .unwrap();
        assert_eq!(told.broker.map(|b| b.0), Some(owner));
    }
    let owners: std::collections::BTreeSet<u32> =
        created.segments.iter().filter_map(|s| s.broker).collect();
    assert_eq!(owners.len(), 4, "four idle brokers take one segment each");
    assert_eq!(client.describe("ns/orders"), created);
    assert_eq!(
        std::fs::read(dir.path().join("filer/topics/ns/orders/topic.json")).unwrap(),
        Topic::from_json_bytes(
            &std::fs::read(dir.path().join("filer/topics/ns/orders/topic.json")).unwrap()
        )
        .unwrap()
        .to_json_bytes()
    );

    match client.call(&AdminRequest::ListBrokers.into()) {
        Response::Brokers { brokers } => {
            let ids: Vec<u32> = brokers.iter().map(|b| b.id).collect();
            assert_eq!(ids, [0, 1, 7, 8]);
            assert!(brokers.iter().all(|b| b.open_segments == 1));
        }
        other => panic!("{other:?}"),
    }

    assert_eq!(
        client.call(
            &AdminRequest::DeleteTopic {
                topic: "ns/orders".to_owned()
            }
            .into()
        ),
        Response::Done
    );
    for (_, fake) in brokers {
        let drops: Vec<String> = fake
            .events()
            .into_iter()
            .filter_map(|e| e.dropped)
            .collect();
        assert_eq!(drops, ["ns/orders"]);
    }
    assert!(!dir.path().join("filer/topics/ns/orders").exists());
    server.stop();
}

#[test]
fn manual_split_refuses_writes_before_it_opens_and_flushes_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 10_000, 1_000);
    let clock = Arc::new(AtomicU64::new(0));
    // The sealing broker takes a while to flush.
    let b0 = FakeBroker::start("b0", &clock, Duration::from_millis(200));
    let b1 = FakeBroker::start("b1", &clock, Duration::ZERO);
    let mut client = Client::connect(server.address());
    client.register(None, &b0);
    client.register(None, &b1);
    let created = create(&mut client, "ns/t", 1);
    let owner = created.segments[0].broker.unwrap();
    let (sealer, other) = if owner == 0 { (&b0, &b1) } else { (&b1, &b0) };
    let before = clock.load(Ordering::SeqCst);

    let split = client.topic(
        &AdminRequest::SplitSegment {
            topic: "ns/t".to_owned(),
            segment: 0,
            pieces: 2,
        }
        .into(),
    );
    assert!(split.segments[0].sealed);
    assert_eq!(split.segments[0].successors, [1, 2]);
    assert_eq!(open_ids(&split), [1, 2]);
    let opened_on: Vec<u32> = split.segments[1..]
        .iter()
        .map(|s| s.broker.unwrap())
        .collect();
    assert!(
        opened_on.contains(&(1 - owner)),
        "a piece on the other broker: {opened_on:?}"
    );

    let events: Vec<Event> = sealer
        .events()
        .into_iter()
        .filter(|e| e.seq >= before)
        .collect();
    // The sealing broker, which also opens a piece, is told twice: refuse
    // writes, then the layout.
    assert_eq!(events.len(), 2, "{events:?}");
    let (refusal, seal) = (&events[0], &events[1]);
    for told in [&refusal.refused, &seal.layout] {
        let told = told.as_ref().expect("a refusal, then the layout");
        assert!(!told.segment(kelp_control::SegmentId(0)).unwrap().is_open());
    }
    // (The creation's layout may reach the other broker late too: it
    // follows segment 0, and followers are told after the answer.)
    let open = other
        .events()
        .into_iter()
        .find(|e| {
            e.seq >= before
                && e.layout
                    .as_ref()
                    .is_some_and(|l| l.segment(kelp_control::SegmentId(1)).is_some())
        })
        .expect("the opening broker was told");
    assert!(open.layout.is_some());
    assert!(
        open.seq > refusal.answered_seq,
        "the opening broker got the layout (seq {}) before writes were refused (seq {})",
        open.seq,
        refusal.answered_seq
    );
    // The piece elsewhere opens while the sealer flushes (its answer takes
    // 200 ms), not after.
    assert!(
        open.seq < seal.answered_seq,
        "the opening broker waited for the flush: told at {}, flush done at {}",
        open.seq,
        seal.answered_seq
    );
    server.stop();
}

#[test]
fn a_leaving_broker_seals_its_segments_before_the_leave_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 10_000, 1_000);
    let clock = Arc::new(AtomicU64::new(0));
    let b0 = FakeBroker::start("b0", &clock, Duration::from_millis(100));
    let b1 = FakeBroker::start("b1", &clock, Duration::ZERO);
    let mut client = Client::connect(server.address());
    client.register(None, &b0);
    client.register(None, &b1);
    let created = create(&mut client, "ns/t", 2);
    let on_b0: Vec<u32> = created
        .segments
        .iter()
        .filter(|s| s.broker == Some(0))
        .map(|s| s.id)
        .collect();
    assert_eq!(on_b0.len(), 1, "one segment each: {created:?}");
    let before = clock.load(Ordering::SeqCst);

    assert_eq!(
        client.call(&MembershipRequest::LeaveBroker { broker: 0 }.into()),
        Response::Done
    );
    let answered = clock.load(Ordering::SeqCst);
    // The leaving broker was told to refuse writes and then to seal, and
    // had answered both, before the leave was answered; the other broker
    // opened the successor after the refusal.
    let told: Vec<Event> = b0
        .events()
        .into_iter()
        .filter(|e| e.seq >= before)
        .collect();
    assert_eq!(told.len(), 2, "{told:?}");
    let (refusal, seal) = (&told[0], &told[1]);
    assert!(refusal.refused.is_some());
    assert!(seal.answered_seq < answered);
    let layout = seal.layout.clone().unwrap();
    let moved = layout
        .segment(kelp_control::SegmentId(on_b0[0]))
        .unwrap()
        .clone();
    assert!(!moved.is_open());
    let successor = moved.successors[0];
    let open = b1
        .events()
        .into_iter()
        .find(|e| e.seq >= before)
        .expect("the other broker was told");
    assert!(open.seq > refusal.answered_seq);
    let info = client.describe("ns/t");
    let s = info.segments.iter().find(|s| s.id == successor.0).unwrap();
    assert_eq!((s.broker, s.sealed), (Some(1), false));
    // The leaver's sealed segment is read through a live broker now.
    let old = info.segments.iter().find(|s| s.id == on_b0[0]).unwrap();
    assert_eq!(old.address.as_ref(), Some(&b1.shards()[0]));
    // It is gone from the cluster.
    match client.call(&AdminRequest::ListBrokers.into()) {
        Response::Brokers { brokers } => {
            assert_eq!(brokers.iter().map(|b| b.id).collect::<Vec<_>>(), [1]);
        }
        other => panic!("{other:?}"),
    }
    server.stop();
}

#[test]
fn policy_splits_under_load_and_merges_when_it_drops() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 10_000, 50);
    let clock = Arc::new(AtomicU64::new(0));
    let b0 = FakeBroker::start("b0", &clock, Duration::ZERO);
    let mut client = Client::connect(server.address());
    let id = client.register(None, &b0);
    create(&mut client, "ns/hot", 1);
    // At most 2 open segments: the pieces inherit half the parent's rate
    // and would split again otherwise.
    let policy = r#"{"target":{"bytes_per_s":1000,"records_per_s":0},
        "windows_ms":[200,300,400,500],"cooldown_ms":0,"segments_min":1,"segments_max":2}"#;
    let with_policy = client.topic(
        &AdminRequest::SetPolicy {
            topic: "ns/hot".to_owned(),
            policy: policy.to_owned(),
        }
        .into(),
    );
    assert_eq!(open_ids(&with_policy), [0]);
    let stored = std::fs::read(dir.path().join("filer/topics/ns/hot/topic.json")).unwrap();
    assert!(Topic::from_json_bytes(&stored).unwrap().policy().is_some());

    let reporter = Reporter::start(server.address(), id, Duration::from_millis(25));
    // 100x the target: window 0 is over 5x as soon as it is known.
    reporter.set(vec![load("ns/hot", 0, 100_000)]);
    wait_for("a split", || open_ids(&client.describe("ns/hot")) == [1, 2]);
    let split = client.describe("ns/hot");
    assert!(split.segments[0].sealed);
    assert_eq!(split.segments[0].successors, [1, 2]);

    // Quiet pieces merge back once their averages decay.
    reporter.set(vec![load("ns/hot", 1, 0), load("ns/hot", 2, 0)]);
    wait_for("a merge", || open_ids(&client.describe("ns/hot")) == [3]);
    let merged = client.describe("ns/hot");
    assert_eq!(merged.segments[1].successors, [3]);
    assert_eq!(merged.segments[2].successors, [3]);
    reporter.stop();
    // The broker learned each layout.
    let told: Vec<Vec<u32>> = b0
        .layouts()
        .iter()
        .map(|t| t.open_segments().map(|s| s.id.0).collect())
        .collect();
    assert!(
        told.contains(&vec![1, 2]) && told.contains(&vec![3]),
        "{told:?}"
    );
    server.stop();
}

#[test]
fn a_silent_broker_dies_and_its_segments_move() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 300, 50);
    let clock = Arc::new(AtomicU64::new(0));
    let (b0, b1) = (
        FakeBroker::start("b0", &clock, Duration::ZERO),
        FakeBroker::start("b1", &clock, Duration::ZERO),
    );
    let mut client = Client::connect(server.address());
    let live = client.register(None, &b0);
    let silent = client.register(None, &b1);
    // One replica: no follower to seal the dead owner's segment from its
    // copy, so the control plane seals it (kelp/tests/replicas.rs has the
    // follower's seal).
    let created = client.topic(
        &AdminRequest::CreateTopic {
            topic: "ns/t".to_owned(),
            segments: 2,
            replicas: 1,
        }
        .into(),
    );
    let doomed = created
        .segments
        .iter()
        .find(|s| s.broker == Some(silent))
        .unwrap()
        .id;
    let reporter = Reporter::start(server.address(), live, Duration::from_millis(30));

    wait_for("the silent broker's segment to move", || {
        let info = client.describe("ns/t");
        info.segments[doomed as usize].sealed
            && info
                .segments
                .iter()
                .filter(|s| !s.sealed)
                .all(|s| s.broker == Some(live))
    });
    let info = client.describe("ns/t");
    let successor = info.segments[doomed as usize].successors[0];
    assert_eq!(
        info.segments[successor as usize].address.as_ref(),
        Some(&b0.shards()[0])
    );
    // Nobody else will: the control plane wrote the seal marker.
    let marker = dir
        .path()
        .join(format!("filer/topics/ns/t/{doomed}/sealed"));
    let text = std::fs::read_to_string(marker).unwrap();
    assert!(text.contains("\"written_by\":\"control\""), "{text}");
    // The sealed segment's reads go to a live broker.
    assert_eq!(
        info.segments[doomed as usize].address.as_ref(),
        Some(&b0.shards()[0])
    );
    reporter.stop();
    // The dead broker is gone: its report is refused with "register again".
    let (code, message) = client.error(
        &MembershipRequest::LoadReport {
            broker: silent,
            segments: Vec::new(),
        }
        .into(),
    );
    assert_eq!(code, ErrorCode::NotOwner);
    assert!(message.contains("register again"), "{message}");
    server.stop();
}

#[test]
fn restart_keeps_topics_and_registered_segments() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(AtomicU64::new(0));
    let (b0, b1) = (
        FakeBroker::start("b0", &clock, Duration::ZERO),
        FakeBroker::start("b1", &clock, Duration::ZERO),
    );
    let server = start(dir.path(), 1_000, 50);
    let mut client = Client::connect(server.address());
    let (i0, i1) = (client.register(None, &b0), client.register(None, &b1));
    let before = create(&mut client, "ns/keep", 4);
    server.stop();

    let server = start(dir.path(), 1_000, 50);
    let mut client = Client::connect(server.address());
    let after_restart = client.describe("ns/keep");
    assert_eq!(open_ids(&after_restart), [0, 1, 2, 3]);
    let mark = clock.load(Ordering::SeqCst);
    assert_eq!(client.register(Some(i0), &b0), i0);
    assert_eq!(client.register(Some(i1), &b1), i1);
    let r0 = Reporter::start(server.address(), i0, Duration::from_millis(30));
    let r1 = Reporter::start(server.address(), i1, Duration::from_millis(30));
    // Well past the restart grace (one silence period).
    wait_for("both brokers resynchronised", || {
        [&b0, &b1]
            .iter()
            .all(|b| b.events().iter().any(|e| e.seq >= mark))
    });
    std::thread::sleep(Duration::from_millis(1_500));
    let after = client.describe("ns/keep");
    assert_eq!(after, before, "nothing moved or sealed");
    for fake in [&b0, &b1] {
        for event in fake.events().into_iter().filter(|e| e.seq >= mark) {
            let layout = event.layout.expect("only layouts");
            assert!(layout.segments().iter().all(|s| s.is_open()), "{layout:?}");
        }
    }
    r0.stop();
    r1.stop();
    server.stop();
}

#[test]
fn bad_input_gets_clear_errors_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 10_000, 1_000);
    let mut client = Client::connect(server.address());

    let (code, message) = client.error(
        &AdminRequest::DescribeTopic {
            topic: "ns/missing".to_owned(),
        }
        .into(),
    );
    assert_eq!(code, ErrorCode::TopicNotFound);
    assert!(message.contains("ns/missing"), "{message}");
    let (code, _) = client.error(
        &AdminRequest::DescribeTopic {
            topic: "no slash".to_owned(),
        }
        .into(),
    );
    assert_eq!(code, ErrorCode::InvalidTopicName);
    let (code, message) = client.error(
        &AdminRequest::CreateTopic {
            topic: "ns/t".to_owned(),
            segments: 1,
            replicas: 0,
        }
        .into(),
    );
    assert_eq!(code, ErrorCode::Busy, "{message}");
    assert!(message.contains("no live broker"), "{message}");
    let (code, _) = client.error(
        &AdminRequest::SetPolicy {
            topic: "ns/missing".to_owned(),
            policy: "{bad json".to_owned(),
        }
        .into(),
    );
    assert_eq!(code, ErrorCode::InvalidArgument);
    // A data-plane request is not the control plane's.
    let produce = DataRequest::Produce {
        topic: "ns/t",
        segment: 0,
        ack: wire::AckMode::Leader,
        batch: b"",
    };
    let Response::Error { code, message } = client.call_with(|id, out| produce.encode(id, out))
    else {
        panic!("a produce request on the control port was not refused");
    };
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(message.contains("not a control-plane request"), "{message}");
    // Neither is a broker command.
    let drop = LayoutCommand::DropTopic {
        topic: "ns/t".to_owned(),
    };
    let Response::Error { code, message } = client.call_with(|id, out| drop.encode(id, out)) else {
        panic!("a broker command on the control port was not refused");
    };
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(message.contains("DropTopicRequest"), "{message}");
    let (code, _) = client.error(
        &MembershipRequest::RegisterBroker {
            id: None,
            shards: Vec::new(),
            capacity_bytes_per_s: 1,
            capacity_records_per_s: 1,
        }
        .into(),
    );
    assert_eq!(code, ErrorCode::InvalidArgument);

    // A payload that fails its checksum: an error, and the stream goes on.
    let mut frame = Vec::new();
    AdminRequest::ListTopics.encode(9, &mut frame);
    frame[12] ^= 0xFF;
    client.stream.write_all(&frame).unwrap();
    match client.read_answer(Some(9)) {
        Response::Error { code, .. } => assert_eq!(code, ErrorCode::Checksum),
        other => panic!("{other:?}"),
    }
    // A payload that does not decode as its type.
    let mut frame = Vec::new();
    wire::frame::encode_frame(
        &mut frame,
        wire::FrameType::DescribeTopicRequest,
        10,
        b"\x01",
    );
    client.stream.write_all(&frame).unwrap();
    match client.read_answer(Some(10)) {
        Response::Error { code, .. } => assert_eq!(code, ErrorCode::Malformed),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        client.call(&AdminRequest::ListTopics.into()),
        Response::TopicList { topics: Vec::new() }
    );

    // Garbage headers (an unknown frame type, then no magic at all): an
    // error, then the connection is closed.
    for garbage in [&b"KL\x01\x7e\0\0\0\0\0\0\0\0\0\0\0\0"[..], &[0xAB; 16][..]] {
        let mut raw = Client::connect(server.address());
        raw.stream.write_all(garbage).unwrap();
        match raw.read_answer(None) {
            Response::Error { code, message } => {
                assert_eq!(code, ErrorCode::Malformed, "{message}");
            }
            other => panic!("{other:?}"),
        }
        let mut rest = Vec::new();
        assert_eq!(raw.stream.read_to_end(&mut rest).unwrap(), 0, "closed");
    }
    // Still serving.
    let mut again = Client::connect(server.address());
    assert_eq!(
        again.call(&AdminRequest::ListTopics.into()),
        Response::TopicList { topics: Vec::new() }
    );
    server.stop();
}
