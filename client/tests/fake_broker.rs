//! The SDK against an in-process fake broker with two shards (TCP): the
//! fake checks that each batch reaches the shard owning its segment and
//! that every key lies in its segment's range, so routing, batching,
//! pipelining, resends and subscribing are exercised without the engine.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kelp_client::{
    AckMode, Client, ClientError, ClientOptions, ErrorCode, FetchFrom, ProducerConfig,
    SubscribeOptions, Transport,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wire::batch::{set_base_offset, BatchView};
use wire::frame::{FrameHeader, FRAME_HEADER_BYTES};
use wire::message::{Fetched, SegmentInfo, ShardAddress, TopicInfo};
use wire::{key_hash, Request, Response};

const TOPIC: &str = "test/events";

#[derive(Default)]
struct State {
    segments: Vec<SegmentInfo>,
    /// Batches of each segment, offsets stamped.
    logs: HashMap<u32, Vec<Vec<u8>>>,
    /// Answer this many produce requests with `NotOwner` first.
    refuse_produces: usize,
    /// Answer every produce with this error.
    produce_error: Option<ErrorCode>,
}

struct FakeBroker {
    addrs: Vec<String>,
    state: Arc<Mutex<State>>,
}

async fn fake_broker(shards: usize) -> FakeBroker {
    let mut listeners = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..shards {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(l.local_addr().unwrap().to_string());
        listeners.push(l);
    }
    let state = Arc::new(Mutex::new(State::default()));
    for (shard, l) in listeners.into_iter().enumerate() {
        let state = Arc::clone(&state);
        let addrs = addrs.clone();
        tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                tokio::spawn(serve(s, shard as u16, Arc::clone(&state), addrs.clone()));
            }
        });
    }
    FakeBroker { addrs, state }
}

async fn serve(mut s: TcpStream, shard: u16, state: Arc<Mutex<State>>, addrs: Vec<String>) {
    loop {
        let mut h = [0u8; FRAME_HEADER_BYTES];
        if s.read_exact(&mut h).await.is_err() {
            return;
        }
        let header = FrameHeader::decode(&h).unwrap();
        let mut payload = vec![0u8; header.payload_bytes as usize];
        s.read_exact(&mut payload).await.unwrap();
        header.verify_payload(&payload).unwrap();
        let request = Request::decode(header.frame_type, &payload).unwrap();
        let mut out = Vec::new();
        let wait = matches!(request, Request::Fetch { .. });
        let (response, batches) = answer(&request, shard, &state, &addrs);
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

fn answer(
    request: &Request<'_>,
    shard: u16,
    state: &Mutex<State>,
    addrs: &[String],
) -> (Option<Response<'static>>, Option<Vec<u8>>) {
    let mut st = state.lock().unwrap();
    let r = match request {
        Request::Shards => Some(Response::Shards {
            shards: addrs
                .iter()
                .map(|a| ShardAddress {
                    tcp: a.clone(),
                    quic: a.clone(),
                })
                .collect(),
        }),
        Request::CreateTopic { topic, segments } => {
            let n = u64::from(*segments);
            st.segments = (0..n)
                .map(|i| SegmentInfo {
                    id: i as u32,
                    epoch: 1,
                    start: ((i << 32) / n) as u32,
                    end: ((i + 1) << 32) / n,
                    sealed: false,
                    shard: (i % addrs.len() as u64) as u16,
                    next_offset: 0,
                    appended_bytes: 0,
                    successors: vec![],
                    ..SegmentInfo::default()
                })
                .collect();
            Some(Response::Topic(TopicInfo {
                name: topic.clone(),
                segments: st.segments.clone(),
            }))
        }
        Request::DescribeTopic { topic } if topic == TOPIC => Some(Response::Topic(TopicInfo {
            name: topic.clone(),
            segments: st.segments.clone(),
        })),
        Request::DescribeTopic { .. } => error(ErrorCode::TopicNotFound, "no such topic"),
        Request::ListTopics => Some(Response::TopicList {
            topics: vec![TOPIC.into()],
        }),
        Request::DeleteTopic { .. } => Some(Response::Done),
        Request::Produce {
            segment,
            ack,
            batch,
            ..
        } => {
            let seg = st
                .segments
                .iter()
                .find(|s| s.id == *segment)
                .unwrap()
                .clone();
            let r = if let Some(code) = st.produce_error {
                error(code, "refused by the test")
            } else if st.refuse_produces > 0 {
                st.refuse_produces -= 1;
                error(ErrorCode::NotOwner, "not mine (test)")
            } else if seg.shard != shard {
                error(ErrorCode::NotOwner, "wrong shard")
            } else {
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
        Request::PayloadWrite { .. }
        | Request::PayloadCommit { .. }
        | Request::PayloadRead { .. } => error(
            ErrorCode::PayloadNotFound,
            "this fake broker stores no payloads",
        ),
        Request::Fetch { segment, from, .. } => {
            let seg = st
                .segments
                .iter()
                .find(|s| s.id == *segment)
                .unwrap()
                .clone();
            let start = match from {
                FetchFrom::Offset(o) => *o,
                FetchFrom::Earliest | FetchFrom::Timestamp(_) => 0,
                FetchFrom::Latest => seg.next_offset,
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
                    sealed: false,
                    batches: &[],
                })),
                Some(batches),
            );
        }
        // Cluster requests are tested against real processes
        // (kelp/tests/cluster.rs).
        _ => error(
            ErrorCode::InvalidArgument,
            "this fake broker has no cluster",
        ),
    };
    (r, None)
}

async fn client(broker: &FakeBroker) -> Client {
    Client::connect(&broker.addrs[0], Transport::Tcp, ClientOptions::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn produce_then_subscribe_keeps_per_key_order() {
    let broker = fake_broker(2).await;
    let client = client(&broker).await;
    assert_eq!(client.shard_addresses().len(), 2);
    let info = client.create_topic(TOPIC, 4).await.unwrap();
    assert_eq!(info.segments.len(), 4);
    assert_eq!(client.list_topics().await.unwrap(), vec![TOPIC.to_string()]);

    let producer = client
        .producer(
            TOPIC,
            ProducerConfig {
                batch_bytes_max: 4096,
                in_flight_batches_max: 4,
                ..ProducerConfig::default()
            },
        )
        .await
        .unwrap();
    let n = 20_000u32;
    for i in 0..n {
        let key = format!("key-{}", i % 101);
        producer
            .send(key.as_bytes(), &i.to_le_bytes(), &[(b"h", b"v")])
            .await
            .unwrap();
    }
    assert_eq!(producer.flush().await.unwrap(), u64::from(n));

    let mut sub = client
        .subscribe(TOPIC, FetchFrom::Earliest, SubscribeOptions::default())
        .await
        .unwrap();
    let mut last: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut segments_seen = std::collections::HashSet::new();
    for _ in 0..n {
        let r = tokio::time::timeout(Duration::from_secs(10), sub.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let v = u32::from_le_bytes(r.value[..].try_into().unwrap());
        if let Some(prev) = last.insert(r.key.to_vec(), v) {
            assert!(prev < v, "key order broken: {prev} then {v}");
        }
        assert_eq!(r.headers.len(), 1);
        segments_seen.insert(r.segment);
    }
    assert_eq!(segments_seen.len(), 4);
    assert_eq!(last.len(), 101);
    // Nothing more is there: the subscriber waits.
    assert!(tokio::time::timeout(Duration::from_millis(100), sub.next())
        .await
        .is_err());
}

#[tokio::test]
async fn stale_layout_is_resent_and_errors_are_reported() {
    let broker = fake_broker(2).await;
    let client = client(&broker).await;
    client.create_topic(TOPIC, 2).await.unwrap();
    broker.state.lock().unwrap().refuse_produces = 2;
    let producer = client
        .producer(TOPIC, ProducerConfig::default())
        .await
        .unwrap();
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
        let producer = client
            .producer(
                TOPIC,
                ProducerConfig {
                    ack,
                    ..ProducerConfig::default()
                },
            )
            .await
            .unwrap();
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
