//! The SDK against an in-process fake broker with two shards (TCP): the
//! fake checks that each batch reaches the shard owning its segment and
//! that every key lies in its segment's range, so routing, batching,
//! pipelining, resends and subscribing are exercised without the engine.
//!
//! Clusters: a test can seal a segment into successors on the fly (a split
//! or a merge), place successors on a listener the broker does not list
//! among its shards (a shard of "another broker", reached through the
//! segment's `address`, advertised as 0.0.0.0), and have a successor
//! answer `SegmentNotFound` a few times as if not opened yet.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kelp_client::{
    AckMode, Client, ClientError, ClientOptions, ErrorCode, FetchFrom, OwnedRecord, Producer,
    ProducerConfig, SubscribeOptions, Subscriber, Transport,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wire::batch::{set_base_offset, BatchView};
use wire::frame::{FrameHeader, FRAME_HEADER_BYTES};
use wire::message::{BrokerStatus, Fetched, SegmentInfo, ShardAddress, TopicInfo};
use wire::{key_hash, AdminRequest, BrokerPortRequest, DataRequest, Response};

const TOPIC: &str = "test/events";

#[derive(Default)]
struct State {
    /// Every listener's address; the first `listed` are the shards the
    /// broker lists, the others stand for shards of other brokers.
    addrs: Vec<String>,
    listed: usize,
    segments: Vec<SegmentInfo>,
    /// Answer produces and fetches of a segment with `SegmentNotFound`
    /// this many times first (a successor not opened yet).
    not_open: HashMap<u32, usize>,
    /// Batches of each segment, offsets stamped.
    logs: HashMap<u32, Vec<Vec<u8>>>,
    /// Answer this many produce requests with `NotOwner` first.
    refuse_produces: usize,
    /// Answer every produce with this error.
    produce_error: Option<ErrorCode>,
    /// Reset every connection at its next request, new ones too: a broker
    /// killed a moment ago whose listening socket the kernel has not
    /// closed yet.
    dying: bool,
}

struct FakeBroker {
    addrs: Vec<String>,
    state: Arc<Mutex<State>>,
}

async fn fake_broker(shards: usize) -> FakeBroker {
    fake_cluster(shards, 0).await
}

/// A fake broker listing `shards` shards, with `others` more listeners
/// that only segment addresses name.
async fn fake_cluster(shards: usize, others: usize) -> FakeBroker {
    let mut listeners = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..shards + others {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(l.local_addr().unwrap().to_string());
        listeners.push(l);
    }
    let state = Arc::new(Mutex::new(State {
        addrs: addrs.clone(),
        listed: shards,
        ..State::default()
    }));
    for (shard, l) in listeners.into_iter().enumerate() {
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                tokio::spawn(serve(s, shard as u16, Arc::clone(&state)));
            }
        });
    }
    FakeBroker { addrs, state }
}

async fn serve(mut s: TcpStream, shard: u16, state: Arc<Mutex<State>>) {
    loop {
        let mut h = [0u8; FRAME_HEADER_BYTES];
        if s.read_exact(&mut h).await.is_err() {
            return;
        }
        if state.lock().unwrap().dying {
            s.set_zero_linger().unwrap();
            return;
        }
        let header = FrameHeader::decode(&h).unwrap();
        let mut payload = vec![0u8; header.payload_bytes as usize];
        s.read_exact(&mut payload).await.unwrap();
        header.verify_payload(&payload).unwrap();
        let request = BrokerPortRequest::decode(header.frame_type, &payload).unwrap();
        let mut out = Vec::new();
        let wait = matches!(request, BrokerPortRequest::Data(DataRequest::Fetch { .. }));
        let (response, batches) = answer(&request, shard, &state);
        match (response, batches) {
            (Some(r), None) => r.encode(header.request_id, &mut out),
            (Some(Response::Fetched(f)), Some(b)) => {
                Response::Fetched(Fetched { batches: &b, ..f }).encode(header.request_id, &mut out)
            }
            _ => {}
        }
        if wait && out.len() < 100 {
            // An empty fetch: the broker would long-poll.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        s.write_all(&out).await.unwrap();
    }
}

fn error(code: ErrorCode, message: &str) -> Option<Response<'static>> {
    Some(Response::Error {
        code,
        message: message.into(),
    })
}

/// A refusal for a segment that is unknown, not opened yet, sealed (for
/// produces) or on another listener; `None` if `shard` serves it.
fn refusal(st: &mut State, segment: u32, shard: u16, produce: bool) -> Option<Response<'static>> {
    let Some(seg) = st.segments.iter().find(|s| s.id == segment) else {
        return error(ErrorCode::SegmentNotFound, "no such segment");
    };
    let (sealed, owner) = (seg.sealed, seg.shard);
    if let Some(n) = st.not_open.get_mut(&segment).filter(|n| **n > 0) {
        *n -= 1;
        return error(ErrorCode::SegmentNotFound, "not opened yet (test)");
    }
    if owner != shard {
        return error(ErrorCode::NotOwner, "wrong shard");
    }
    if produce && sealed {
        return error(ErrorCode::SegmentSealed, "sealed");
    }
    None
}

impl State {
    /// The address a segment on listener `shard` is described with: none
    /// for a listed shard, else that listener as 0.0.0.0:port.
    fn address(&self, shard: u16) -> Option<ShardAddress> {
        let i = usize::from(shard);
        (i >= self.listed).then(|| {
            let port = self.addrs[i].rsplit(':').next().unwrap();
            ShardAddress {
                tcp: format!("0.0.0.0:{port}"),
                quic: format!("0.0.0.0:{port}"),
            }
        })
    }

    fn next_id(&self) -> u32 {
        self.segments.iter().map(|s| s.id + 1).max().unwrap_or(0)
    }

    fn open(&mut self, start: u32, end: u64, shard: u16, not_open: usize) -> u32 {
        let id = self.next_id();
        self.segments.push(SegmentInfo {
            id,
            epoch: 1,
            start,
            end,
            shard,
            address: self.address(shard),
            ..SegmentInfo::default()
        });
        self.not_open.insert(id, not_open);
        id
    }

    fn seal(&mut self, id: u32, successors: &[u32]) {
        let s = self.segments.iter_mut().find(|s| s.id == id).unwrap();
        assert!(!s.sealed);
        s.sealed = true;
        s.successors = successors.to_vec();
    }

    /// Seal open segment `id` into two halves on listener `shard`, each
    /// answering `SegmentNotFound` `not_open` times first.
    fn split(&mut self, id: u32, shard: u16, not_open: usize) -> [u32; 2] {
        let s = self.segments.iter().find(|s| s.id == id).unwrap().clone();
        let mid = (u64::from(s.start) + s.end) / 2;
        let a = self.open(s.start, mid, shard, not_open);
        let b = self.open(mid as u32, s.end, shard, not_open);
        self.seal(id, &[a, b]);
        [a, b]
    }

    /// Seal open segment `id` and reopen its range on listener `shard`.
    fn move_to(&mut self, id: u32, shard: u16, not_open: usize) -> u32 {
        let s = self.segments.iter().find(|s| s.id == id).unwrap().clone();
        let moved = self.open(s.start, s.end, shard, not_open);
        self.seal(id, &[moved]);
        moved
    }

    /// Seal adjacent open segments `a` and `b` into one on `shard`.
    fn merge(&mut self, a: u32, b: u32, shard: u16, not_open: usize) -> u32 {
        let find = |id| self.segments.iter().find(|s| s.id == id).unwrap().clone();
        let (sa, sb) = (find(a), find(b));
        assert_eq!(sa.end, u64::from(sb.start));
        let m = self.open(sa.start, sb.end, shard, not_open);
        self.seal(a, &[m]);
        self.seal(b, &[m]);
        m
    }

    /// Segment `id`, which the test's requests name.
    fn segment(&self, id: u32) -> SegmentInfo {
        let found = self.segments.iter().find(|s| s.id == id);
        found.expect("the test names a segment it made").clone()
    }

    /// The answer to an admin request that changed or reads the layout.
    fn topic(&self, name: &str) -> Response<'static> {
        Response::Topic(TopicInfo {
            name: name.to_owned(),
            segments: self.segments.clone(),
        })
    }

    /// The shards a shards request lists, each on one address for both
    /// transports.
    fn listed_shards(&self) -> Vec<ShardAddress> {
        let address = |a: &String| ShardAddress {
            tcp: a.clone(),
            quic: a.clone(),
        };
        self.addrs[..self.listed].iter().map(address).collect()
    }
}

fn answer(
    request: &BrokerPortRequest<'_>,
    shard: u16,
    state: &Mutex<State>,
) -> (Option<Response<'static>>, Option<Vec<u8>>) {
    let mut st = state.lock().unwrap();
    let r = match request {
        BrokerPortRequest::Data(DataRequest::Shards) => Some(Response::Shards {
            shards: st.listed_shards(),
        }),
        BrokerPortRequest::Admin(AdminRequest::CreateTopic {
            topic, segments, ..
        }) => {
            let n = u64::from(*segments);
            st.segments = (0..n)
                .map(|i| SegmentInfo {
                    id: i as u32,
                    epoch: 1,
                    start: ((i << 32) / n) as u32,
                    end: ((i + 1) << 32) / n,
                    sealed: false,
                    shard: (i % st.listed as u64) as u16,
                    next_offset: 0,
                    appended_bytes: 0,
                    successors: vec![],
                    ..SegmentInfo::default()
                })
                .collect();
            Some(st.topic(topic))
        }
        BrokerPortRequest::Admin(AdminRequest::DescribeTopic { topic }) if topic == TOPIC => {
            Some(st.topic(topic))
        }
        BrokerPortRequest::Admin(AdminRequest::DescribeTopic { .. }) => {
            error(ErrorCode::TopicNotFound, "no such topic")
        }
        BrokerPortRequest::Admin(AdminRequest::ListTopics) => Some(Response::TopicList {
            topics: vec![TOPIC.into()],
        }),
        BrokerPortRequest::Admin(AdminRequest::DeleteTopic { .. }) => Some(Response::Done),
        BrokerPortRequest::Data(DataRequest::Produce {
            segment,
            ack,
            batch,
            ..
        }) => {
            let r = if let Some(code) = st.produce_error {
                error(code, "refused by the test")
            } else if st.refuse_produces > 0 {
                st.refuse_produces -= 1;
                error(ErrorCode::NotOwner, "not mine (test)")
            } else if let Some(refused) = refusal(&mut st, *segment, shard, true) {
                Some(refused)
            } else {
                let seg = st.segment(*segment);
                let view = BatchView::validate(batch).unwrap();
                let in_range = view.records().all(|r| {
                    let h = u64::from(key_hash(r.key));
                    u64::from(seg.start) <= h && h < seg.end
                });
                if !in_range {
                    error(ErrorCode::KeyOutOfRange, "key outside the segment")
                } else {
                    let s = st.segments.iter_mut().find(|s| s.id == *segment).unwrap();
                    let base = s.next_offset;
                    s.next_offset += u64::from(view.record_count());
                    let mut stored = batch.to_vec();
                    set_base_offset(&mut stored, base);
                    st.logs.entry(*segment).or_default().push(stored);
                    Some(Response::Produced {
                        segment: *segment,
                        base_offset: base,
                        record_count: view.record_count(),
                    })
                }
            };
            match (ack, &r) {
                (AckMode::None, Some(Response::Produced { .. })) => None,
                _ => r,
            }
        }
        // The client's payload path is tested against the real broker
        // (kelp/tests/payloads.rs); this fake stores no payloads.
        BrokerPortRequest::Data(DataRequest::PayloadWrite { .. })
        | BrokerPortRequest::Data(DataRequest::PayloadCommit { .. })
        | BrokerPortRequest::Data(DataRequest::PayloadRead { .. }) => error(
            ErrorCode::PayloadNotFound,
            "this fake broker stores no payloads",
        ),
        BrokerPortRequest::Data(DataRequest::Fetch(wire::FetchRequest {
            segment, from, ..
        })) => {
            if let Some(refused) = refusal(&mut st, *segment, shard, false) {
                return (Some(refused), None);
            }
            let seg = st.segment(*segment);
            let start = match from {
                FetchFrom::Offset(o) => *o,
                FetchFrom::Earliest | FetchFrom::Timestamp(_) => 0,
                FetchFrom::Latest | FetchFrom::MaxTimestamp => seg.next_offset,
            };
            let mut batches = Vec::new();
            for b in st.logs.get(segment).into_iter().flatten() {
                if BatchView::validate(b).unwrap().next_offset() > start {
                    batches.extend_from_slice(b);
                }
            }
            return (
                Some(Response::Fetched(Fetched {
                    segment: *segment,
                    start_offset: start,
                    next_offset: seg.next_offset.max(start),
                    high_watermark: seg.next_offset,
                    sealed: seg.sealed,
                    stored_end: 0,
                    batches: &[],
                })),
                Some(batches),
            );
        }
        BrokerPortRequest::Admin(AdminRequest::SplitSegment { topic, segment, .. }) => {
            st.split(*segment, 0, 0);
            Some(st.topic(topic))
        }
        BrokerPortRequest::Admin(AdminRequest::MergeSegments { topic, a, b }) => {
            st.merge(*a, *b, 0, 0);
            Some(st.topic(topic))
        }
        BrokerPortRequest::Admin(AdminRequest::SetPolicy { topic, .. }) => Some(st.topic(topic)),
        BrokerPortRequest::Admin(AdminRequest::ListBrokers) => Some(Response::Brokers {
            brokers: vec![BrokerStatus {
                id: 0,
                shards: st.listed_shards(),
                ..BrokerStatus::default()
            }],
        }),
        // Moves and the broker side of a cluster are tested against real
        // processes.
        _ => error(ErrorCode::InvalidArgument, "this fake broker moves nothing"),
    };
    (r, None)
}

async fn client(broker: &FakeBroker) -> Client {
    Client::connect(&broker.addrs[0], Transport::Tcp, ClientOptions::default())
        .await
        .unwrap()
}

/// A producer of `TOPIC` with `config`.
async fn new_producer(client: &Client, config: ProducerConfig) -> Producer {
    client.producer(TOPIC, config).await.unwrap()
}

/// A producer config that keeps up to `in_flight` batches of at most
/// `batch_bytes` unacknowledged, each sent `linger_ms` after its first record.
fn pipelined(in_flight: usize, batch_bytes: usize, linger_ms: u64) -> ProducerConfig {
    ProducerConfig {
        batch_bytes_max: batch_bytes,
        linger_ms,
        in_flight_batches_max: in_flight,
        ..ProducerConfig::default()
    }
}

/// A subscriber to `TOPIC` from `from`.
async fn subscriber(client: &Client, from: FetchFrom) -> Subscriber {
    client
        .subscribe(TOPIC, from, SubscribeOptions::default())
        .await
        .unwrap()
}

/// The next record (within 10 s) and its value, a little-endian u32.
async fn next_numbered(sub: &mut Subscriber) -> (OwnedRecord, u32) {
    let r = tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let v = u32::from_le_bytes(r.value[..].try_into().unwrap());
    (r, v)
}

/// Sends `values` as little-endian u32s under the keys `key-{i % keys}`.
async fn send_numbered(producer: &Producer, values: std::ops::Range<u32>, keys: u32) {
    for i in values {
        let key = format!("key-{}", i % keys);
        producer
            .send(key.as_bytes(), &i.to_le_bytes(), &[(b"h", b"v")])
            .await
            .unwrap();
    }
}

/// Nothing more arrives within 100 ms: the subscriber waits.
async fn assert_waiting(sub: &mut Subscriber) {
    assert!(tokio::time::timeout(Duration::from_millis(100), sub.next())
        .await
        .is_err());
}

/// Checks that each key's values come in increasing order.
#[derive(Default)]
struct KeyOrder {
    last: HashMap<Vec<u8>, u32>,
}

impl KeyOrder {
    fn see(&mut self, key: &[u8], value: u32) {
        if let Some(prev) = self.last.insert(key.to_vec(), value) {
            assert!(prev < value, "key {key:?}: {prev} then {value}");
        }
    }
}

#[tokio::test]
async fn produce_then_subscribe_keeps_per_key_order() {
    let broker = fake_broker(2).await;
    let client = client(&broker).await;
    assert_eq!(client.shard_addresses().len(), 2);
    let info = client.create_topic(TOPIC, 4).await.unwrap();
    assert_eq!(info.segments.len(), 4);
    assert_eq!(client.list_topics().await.unwrap(), vec![TOPIC.to_string()]);

    let linger_ms = ProducerConfig::default().linger_ms;
    let producer = new_producer(&client, pipelined(4, 4096, linger_ms)).await;
    let n = 20_000u32;
    send_numbered(&producer, 0..n, 101).await;
    assert_eq!(producer.flush().await.unwrap(), u64::from(n));

    let mut sub = subscriber(&client, FetchFrom::Earliest).await;
    let mut order = KeyOrder::default();
    let mut segments_seen = std::collections::HashSet::new();
    for _ in 0..n {
        let (r, v) = next_numbered(&mut sub).await;
        order.see(&r.key, v);
        assert_eq!(r.headers.len(), 1);
        segments_seen.insert(r.segment);
    }
    assert_eq!(segments_seen.len(), 4);
    assert_eq!(order.last.len(), 101);
    assert_waiting(&mut sub).await;
}

#[tokio::test]
async fn stale_layout_is_resent_and_errors_are_reported() {
    let broker = fake_broker(2).await;
    let client = client(&broker).await;
    client.create_topic(TOPIC, 2).await.unwrap();
    broker.state.lock().unwrap().refuse_produces = 2;
    let producer = new_producer(&client, ProducerConfig::default()).await;
    for i in 0..100u32 {
        producer
            .send(format!("k{i}").as_bytes(), b"v", &[])
            .await
            .unwrap();
    }
    assert_eq!(producer.flush().await.unwrap(), 100);
    let stored: u64 = broker
        .state
        .lock()
        .unwrap()
        .segments
        .iter()
        .map(|s| s.next_offset)
        .sum();
    assert_eq!(stored, 100);

    // Any other broker error fails the producer, with ack leader or none.
    broker.state.lock().unwrap().produce_error = Some(ErrorCode::Storage);
    for ack in [AckMode::Leader, AckMode::None] {
        let producer = new_producer(
            &client,
            ProducerConfig {
                ack,
                ..ProducerConfig::default()
            },
        )
        .await;
        producer.send(b"k", b"v", &[]).await.unwrap();
        let e = producer.flush().await.unwrap_err();
        assert_eq!(e.broker_code(), Some(ErrorCode::Storage), "{ack:?}: {e}");
        // The failure sticks.
        assert!(producer.send(b"k", b"v", &[]).await.is_err());
    }
}

#[tokio::test]
async fn admin_errors_and_unreachable_brokers() {
    let broker = fake_broker(1).await;
    let client = client(&broker).await;
    let e = client.describe_topic("no/such").await.unwrap_err();
    assert_eq!(e.broker_code(), Some(ErrorCode::TopicNotFound));

    // A port nobody listens on.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let e = Client::connect(&addr, Transport::Tcp, ClientOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Connect { .. }));
    assert!(e
        .to_string()
        .starts_with(&format!("cannot reach broker at {addr}")));
}

#[tokio::test]
async fn a_read_goes_to_the_next_broker_when_its_broker_dies_mid_call() {
    let (dying, alive) = (fake_broker(1).await, fake_broker(1).await);
    let list = format!("{},{}", dying.addrs[0], alive.addrs[0]);
    let client = Client::connect(&list, Transport::Tcp, ClientOptions::default())
        .await
        .unwrap();
    assert_eq!(client.list_brokers().await.unwrap().len(), 1);
    // The first broker resets the admin connection mid-call, then accepts
    // the reconnection and resets that too.
    dying.state.lock().unwrap().dying = true;
    let brokers = client.list_brokers().await.unwrap();
    assert_eq!(brokers.len(), 1);
    // And later reads stay with the broker that answered.
    client.list_brokers().await.unwrap();

    // A request that changes something is not asked again, not even of a
    // broker that would take it: it may have been carried out.
    dying.state.lock().unwrap().dying = false;
    alive.state.lock().unwrap().dying = true;
    let e = client.create_topic(TOPIC, 2).await.unwrap_err();
    assert!(
        matches!(e, ClientError::Io { .. } | ClientError::Closed),
        "{e}"
    );
    assert!(dying.state.lock().unwrap().segments.is_empty());
}

/// A segment's id and its stored records as (key, value).
type StoredSegment = (u32, Vec<(Vec<u8>, u32)>);

/// Every stored record, by segment id.
fn stored(broker: &FakeBroker) -> Vec<StoredSegment> {
    let st = broker.state.lock().unwrap();
    let mut ids: Vec<u32> = st.segments.iter().map(|s| s.id).collect();
    ids.sort_unstable();
    ids.into_iter()
        .map(|id| {
            let mut records = Vec::new();
            for b in st.logs.get(&id).into_iter().flatten() {
                for r in BatchView::validate(b).unwrap().records() {
                    let v = u32::from_le_bytes(r.value.try_into().unwrap());
                    records.push((r.key.to_vec(), v));
                }
            }
            (id, records)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_follows_a_split_a_move_and_a_merge_under_load() {
    // Shards 0 and 1 are listed; listener 2 is "another broker".
    let broker = fake_cluster(2, 1).await;
    let client = client(&broker).await;
    client.create_topic(TOPIC, 2).await.unwrap();
    let producer = new_producer(&client, pipelined(8, 2048, 1)).await;
    let n = 30_000u32;
    let keys = 97;
    let (mut halves, mut merged, mut moved) = (None, None, None);
    for i in 0..n {
        if i == n / 2 {
            // Move segment 1 to the other broker.
            moved = Some(broker.state.lock().unwrap().move_to(1, 2, 2));
        }
        if i == n / 3 {
            // Split segment 0 while its batches are in flight; the halves
            // live on the other broker and are not open for a while.
            halves = Some(broker.state.lock().unwrap().split(0, 2, 3));
        }
        if i == 2 * n / 3 {
            let [a, b] = halves.unwrap();
            merged = Some(broker.state.lock().unwrap().merge(a, b, 1, 2));
        }
        let key = format!("key-{}", i % keys);
        producer
            .send(key.as_bytes(), &i.to_le_bytes(), &[])
            .await
            .unwrap();
    }
    // Every record acknowledged once...
    assert_eq!(producer.flush().await.unwrap(), u64::from(n));
    let segments = stored(&broker);
    assert_eq!(segments.len(), 6);
    // ...stored once...
    let mut seen = vec![false; n as usize];
    for (_, records) in &segments {
        for (_, v) in records {
            assert!(!seen[*v as usize], "record {v} stored twice");
            seen[*v as usize] = true;
        }
    }
    assert!(seen.iter().all(|s| *s), "a record is missing");
    // ...and each key's records in publish order along predecessor then
    // successors (ids grow along the history).
    let mut order = KeyOrder::default();
    for (_, records) in &segments {
        for (k, v) in records {
            order.see(k, *v);
        }
    }
    // The successors took records (through the other broker's address for
    // the halves and the moved segment).
    let [a, b] = halves.unwrap();
    for id in [a, b, merged.unwrap(), moved.unwrap()] {
        let records = &segments.iter().find(|(s, _)| *s == id).unwrap().1;
        assert!(!records.is_empty(), "segment {id} got nothing");
    }
}

#[tokio::test]
async fn subscriber_reads_parents_before_their_successors() {
    let broker = fake_cluster(2, 1).await;
    let client = client(&broker).await;
    client.create_topic(TOPIC, 1).await.unwrap();
    let per_phase = 2_000u32;
    let keys = 13;
    let mut next_value = 0u32;
    let mut produce_phase = || {
        let client = client.clone();
        let from = next_value;
        next_value += per_phase;
        async move {
            let producer = new_producer(&client, ProducerConfig::default()).await;
            send_numbered(&producer, from..from + per_phase, keys).await;
            assert_eq!(producer.flush().await.unwrap(), u64::from(per_phase));
        }
    };
    produce_phase().await;
    let [a, b] = broker.state.lock().unwrap().split(0, 2, 2);
    produce_phase().await;
    let m = broker.state.lock().unwrap().merge(a, b, 1, 0);
    produce_phase().await;

    let mut sub = subscriber(&client, FetchFrom::Earliest).await;
    let total = 3 * per_phase;
    let mut order = Vec::new();
    let mut key_order = KeyOrder::default();
    for _ in 0..total {
        let (r, v) = next_numbered(&mut sub).await;
        key_order.see(&r.key, v);
        order.push(r.segment);
    }
    let position = |id: u32| {
        let first = order.iter().position(|s| *s == id).unwrap();
        let last = order.iter().rposition(|s| *s == id).unwrap();
        (first, last)
    };
    let (p, (af, al), (bf, bl), (mf, _)) = (position(0), position(a), position(b), position(m));
    assert!(p.1 < af && p.1 < bf, "the parent is read before its halves");
    assert!(al < mf && bl < mf, "the merge is read after both parents");
    assert_eq!(
        order.iter().filter(|s| **s == 0).count(),
        per_phase as usize
    );
    // The merged segment is open: the subscriber waits for more.
    assert_waiting(&mut sub).await;

    // From the end: only the open segment is read, new records only.
    let mut latest = subscriber(&client, FetchFrom::Latest).await;
    produce_phase().await;
    for _ in 0..per_phase {
        let (r, v) = next_numbered(&mut latest).await;
        assert_eq!(r.segment, m);
        assert!(v >= total);
    }
}

#[tokio::test]
async fn cluster_admin_requests_reach_the_broker() {
    let broker = fake_broker(1).await;
    let client = client(&broker).await;
    client.create_topic(TOPIC, 2).await.unwrap();
    let info = client.split_segment(TOPIC, 0, 2).await.unwrap();
    assert_eq!(info.segments.len(), 4);
    assert_eq!(info.segments[0].successors, vec![2, 3]);
    let info = client.merge_segments(TOPIC, 2, 3).await.unwrap();
    assert_eq!(info.segments.iter().filter(|s| !s.sealed).count(), 2);
    let e = client.move_segment(TOPIC, 4, Some(7)).await.unwrap_err();
    assert_eq!(e.broker_code(), Some(ErrorCode::InvalidArgument));
    let info = client.set_policy(TOPIC, "").await.unwrap();
    assert_eq!(info.name, TOPIC);
    let brokers = client.list_brokers().await.unwrap();
    assert_eq!(brokers.len(), 1);
    assert_eq!(brokers[0].shards.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_not_open_yet_is_not_overtaken_by_pipelined_batches() {
    let broker = fake_broker(1).await;
    let client = client(&broker).await;
    client.create_topic(TOPIC, 1).await.unwrap();
    let batch_bytes = ProducerConfig::default().batch_bytes_max;
    let producer = new_producer(&client, pipelined(8, batch_bytes, 0)).await;
    // The segment refuses its first few requests as if not opened yet;
    // batches pipelined behind the first must not land before its resend.
    broker.state.lock().unwrap().not_open.insert(0, 4);
    let n = 200u32;
    for i in 0..n {
        producer
            .send(b"one key", &i.to_le_bytes(), &[])
            .await
            .unwrap();
    }
    assert_eq!(producer.flush().await.unwrap(), u64::from(n));
    let segments = stored(&broker);
    let values: Vec<u32> = segments[0].1.iter().map(|(_, v)| *v).collect();
    assert_eq!(values, (0..n).collect::<Vec<_>>());
    assert_eq!(broker.state.lock().unwrap().not_open[&0], 0);
}
