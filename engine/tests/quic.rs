//! A broker started in this process (quinn-proto driven on each shard's own
//! thread), spoken to over real loopback QUIC by a plain quinn client:
//! create, pipelined produce, fetch back, concurrent connections, bad
//! input, limits, and the goodbye when the broker stops. The same server
//! code under loss, reordering and a simulated clock is tested in
//! `engine/src/quic_shard/simulation_tests.rs`.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use kelp_engine::{Broker, BrokerConfig};
use support::{config, port};
use wire::{AckMode, AdminRequest, BatchBuilder, DataRequest, ErrorCode, FetchFrom, Response};

/// Produce requests a pipelined producer keeps in flight.
const PIPELINE_DEPTH: usize = 128;
/// Longest any single test step may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

use test_support::{decode, error_code, QuicConn as Conn, TestConn};

fn start(dir: &std::path::Path) -> (Broker, u16) {
    let port = port();
    (Broker::start(config(dir, port)).unwrap(), port)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A quinn client endpoint that trusts the broker's own certificate.
fn client(data_dir: &std::path::Path) -> quinn::Endpoint {
    client_on("127.0.0.1:0", data_dir)
}

/// [`client`] bound to `local` (another loopback address stands for
/// another host).
fn client_on(local: &str, data_dir: &std::path::Path) -> quinn::Endpoint {
    let cert = std::fs::read(data_dir.join("tls/cert.der")).unwrap();
    let tls = kelp_engine::client_tls_trusting(cert.into()).unwrap();
    test_support::quic_endpoint(local, tls, quinn::TransportConfig::default())
}

/// A leader-acknowledged produce of `batch` to segment 0 of `topic`.
fn produce<'a>(topic: &'a str, batch: &'a [u8]) -> DataRequest<'a> {
    DataRequest::Produce {
        topic,
        segment: 0,
        ack: AckMode::Leader,
        batch,
    }
}

/// 100 records whose values name the producer and the record's sequence.
fn batch(producer: u32, first: u64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for seq in first..first + 100 {
        let value = format!("{producer}:{seq}");
        b.push(
            1_700_000_000_000,
            format!("k{seq}").as_bytes(),
            value.as_bytes(),
            &[],
        )
        .unwrap();
    }
    b.finish(0, 0).to_vec()
}

/// Creates a one-segment topic through shard 0 and returns its owner.
async fn create_topic(endpoint: &quinn::Endpoint, port: u16, topic: &str) -> u16 {
    let mut c = Conn::open(endpoint, port).await;
    let created = c
        .call(AdminRequest::CreateTopic {
            topic: topic.into(),
            segments: 1,
            replicas: 0,
        })
        .await;
    let Response::Topic(info) = decode(&created) else {
        panic!("{:?}", decode(&created))
    };
    assert_eq!(info.segments.len(), 1);
    c.connection.close(0u32.into(), b"done");
    info.segments[0].shard
}

fn create_topic_over_tcp(port: u16, topic: &str) -> u16 {
    let frame = TestConn::open(port).call(AdminRequest::CreateTopic {
        topic: topic.into(),
        segments: 1,
        replicas: 0,
    });
    let Response::Topic(info) = decode(&frame) else {
        panic!("{:?}", decode(&frame))
    };
    info.segments[0].shard
}

/// Produces `batches` batches of 100 records with `PIPELINE_DEPTH` in
/// flight; checks each ack.
async fn produce_pipelined(c: &mut Conn, topic: &str, producer: u32, batches: u64) {
    let mut sent = 0u64;
    let mut acked = 0u64;
    while acked < batches {
        while sent < batches && sent - acked < PIPELINE_DEPTH as u64 {
            let b = batch(producer, sent * 100);
            c.send(produce(topic, &b)).await;
            sent += 1;
        }
        let frame = c.read_frame().await.unwrap();
        assert!(
            matches!(
                decode(&frame),
                Response::Produced {
                    record_count: 100,
                    ..
                }
            ),
            "{:?}",
            decode(&frame)
        );
        acked += 1;
    }
}

/// Every record of segment 0, as (offset, value).
async fn fetch_all(c: &mut Conn, topic: &str) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut from = Some(FetchFrom::Earliest);
    while let Some(at) = from {
        let frame = c
            .call(DataRequest::Fetch(wire::FetchRequest {
                topic: topic.into(),
                segment: 0,
                from: at,
                max_bytes: 1 << 20,
                max_wait_ms: 0,
                checks: wire::FetchChecks::Trust,
                follower: None,
            }))
            .await;
        let (records, next) = test_support::fetched_records(&frame);
        out.extend(
            records
                .into_iter()
                .map(|(offset, _, value)| (offset, value)),
        );
        from = next;
    }
    out
}

/// Runs `test` against a fresh broker holding `topic` (one segment),
/// given a client endpoint and the port of the shard owning the segment;
/// closes the endpoint and stops the broker after it.
fn on_a_fresh_topic(topic: &str, test: impl AsyncFnOnce(&quinn::Endpoint, u16)) {
    let dir = tempfile::tempdir().unwrap();
    let (broker, port) = start(dir.path());
    runtime().block_on(async {
        let endpoint = client(dir.path());
        let owner = create_topic(&endpoint, port, topic).await;
        test(&endpoint, port + owner).await;
        endpoint.close(0u32.into(), b"done");
    });
    broker.stop().unwrap();
}

fn assert_every_offset_once(records: &[(u64, Vec<u8>)], count: u64) {
    assert_eq!(records.len() as u64, count);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.0, i as u64, "every offset once, in order");
    }
}

#[test]
fn pipelined_produce_then_fetch_everything_back() {
    on_a_fresh_topic("t/pipe", async |endpoint, owner| {
        let mut c = Conn::open(endpoint, owner).await;
        tokio::time::timeout(STEP_TIMEOUT, produce_pipelined(&mut c, "t/pipe", 0, 2_000))
            .await
            .expect("produce finished in time");
        let records = tokio::time::timeout(STEP_TIMEOUT, fetch_all(&mut c, "t/pipe"))
            .await
            .expect("fetch finished in time");
        assert_every_offset_once(&records, 200_000);
        for (i, r) in records.iter().enumerate() {
            assert_eq!(r.1, format!("0:{i}").as_bytes());
        }
        // A clean end: our FIN, then the broker's FIN after the answers.
        c.send.finish().unwrap();
        assert!(c.read_frame().await.is_none());
    });
}

#[test]
fn concurrent_connections_produce_at_once() {
    on_a_fresh_topic("t/multi", async |endpoint, owner| {
        let mut conns = Vec::new();
        for _ in 0..3 {
            conns.push(Conn::open(endpoint, owner).await);
        }
        let [a, b, c] = &mut conns[..] else {
            unreachable!()
        };
        let all = async {
            tokio::join!(
                produce_pipelined(a, "t/multi", 0, 300),
                produce_pipelined(b, "t/multi", 1, 300),
                produce_pipelined(c, "t/multi", 2, 300),
            )
        };
        tokio::time::timeout(STEP_TIMEOUT, all)
            .await
            .expect("produce finished in time");
        let records = fetch_all(&mut conns[0], "t/multi").await;
        assert_every_offset_once(&records, 90_000);
        // Each connection's records keep the order it sent them in.
        let mut next = [0u64; 3];
        for (_, value) in &records {
            let value = std::str::from_utf8(value).unwrap();
            let (producer, seq) = value.split_once(':').unwrap();
            let producer: usize = producer.parse().unwrap();
            assert_eq!(seq.parse::<u64>().unwrap(), next[producer]);
            next[producer] += 1;
        }
        assert_eq!(next, [30_000; 3]);
    });
}

#[test]
fn garbage_closes_only_its_own_connection() {
    on_a_fresh_topic("t/bad", async |endpoint, owner| {
        let mut good = Conn::open(endpoint, owner).await;
        let b = batch(0, 0);
        let r = good.call(produce("t/bad", &b)).await;
        assert!(matches!(decode(&r), Response::Produced { .. }));

        // A corrupt payload is answered and the connection goes on.
        let mut frame = Vec::new();
        produce("t/bad", &b).encode(77, &mut frame);
        let last = frame.len() - 1;
        frame[last] ^= 1;
        good.send.write_all(&frame).await.unwrap();
        let r = good.read_frame().await.unwrap();
        assert_eq!(r.0.request_id, 77);
        assert_eq!(error_code(&r), Some(ErrorCode::Checksum));

        let mut bad = Conn::open(endpoint, owner).await;
        bad.send.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let step = async {
            let r = bad.read_frame().await.expect("an error frame");
            assert!(
                matches!(decode(&r), Response::Error { .. }),
                "{:?}",
                decode(&r)
            );
            assert!(bad.read_frame().await.is_none(), "closed after bad magic");
            // The broker closes the whole connection, not just the stream.
            let reason = bad.connection.closed().await;
            assert!(
                matches!(reason, quinn::ConnectionError::ApplicationClosed(_)),
                "{reason:?}"
            );
        };
        tokio::time::timeout(STEP_TIMEOUT, step)
            .await
            .expect("bad connection closed in time");

        let r = good.call(produce("t/bad", &b)).await;
        assert!(matches!(
            decode(&r),
            Response::Produced {
                base_offset: 100,
                ..
            }
        ));
        assert_every_offset_once(&fetch_all(&mut good, "t/bad").await, 200);
    });
}

#[test]
fn limits_hold() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start(BrokerConfig {
        connection_requests_in_flight_max: 4,
        connections_per_shard_max: 2,
        ..config(dir.path(), port)
    })
    .unwrap();
    runtime().block_on(async {
        let endpoint = client(dir.path());
        // Over TCP, so no QUIC connection is still draining on the owner
        // when the two below fill its table.
        let owner = create_topic_over_tcp(port, "t/limits");
        let mut first = Conn::open(&endpoint, port + owner).await;
        let _second = Conn::open(&endpoint, port + owner).await;
        let addr: SocketAddr = format!("127.0.0.1:{}", port + owner).parse().unwrap();
        let refused = endpoint.connect(addr, "localhost").unwrap().await;
        assert!(
            matches!(refused, Err(quinn::ConnectionError::ConnectionClosed(_))),
            "third connection refused: {refused:?}"
        );
        // 128 pipelined requests against an in-flight limit of 4: the
        // broker stops reading and flow control holds the client back,
        // and every request is still answered in order.
        tokio::time::timeout(
            STEP_TIMEOUT,
            produce_pipelined(&mut first, "t/limits", 0, 500),
        )
        .await
        .expect("produce finished in time");
        assert_every_offset_once(&fetch_all(&mut first, "t/limits").await, 50_000);
        endpoint.close(0u32.into(), b"done");
    });
    broker.stop().unwrap();
}

/// A broker that stops closes its QUIC connections: a client that keeps
/// its stream open past the goodbye learns of the close within the goodbye
/// wait (ApplicationClosed), not after its 60 s idle timeout, and nothing
/// but the goodbye came on the stream.
#[test]
fn stopping_the_broker_closes_quic_connections() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, port) = start(dir.path());
    let rt = runtime();
    let mut c = rt.block_on(async {
        let endpoint = client(dir.path());
        let mut c = Conn::open(&endpoint, port).await;
        let r = c.call(AdminRequest::ListTopics).await;
        assert!(matches!(decode(&r), Response::TopicList { .. }));
        c
    });
    let stopper = std::thread::spawn(move || broker.stop());
    rt.block_on(async {
        let reason = tokio::time::timeout(Duration::from_secs(10), c.connection.closed())
            .await
            .expect("the client learned of the close well before its idle timeout");
        assert!(
            matches!(reason, quinn::ConnectionError::ApplicationClosed(_)),
            "{reason:?}"
        );
        while let Some(frame) = c.read_frame().await {
            assert_eq!(
                frame.0.request_id,
                0,
                "only the goodbye: {:?}",
                decode(&frame)
            );
            assert_eq!(error_code(&frame), Some(ErrorCode::ShuttingDown));
        }
    });
    stopper.join().unwrap().unwrap();
}

/// A stopping broker ends a QUIC connection with the goodbye, as TCP does: the goodbye arrives
/// (request id 0, `ShuttingDown`), a request sent after it is answered
/// `ShuttingDown` and not applied, and once the client finishes its stream
/// the broker closes. After a restart the segment holds exactly what was
/// acknowledged.
#[test]
fn a_stopping_broker_says_goodbye_over_quic_and_answers_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start(config(dir.path(), port)).unwrap();
    let shard = create_topic_over_tcp(port, "t/bye");
    let rt = runtime();
    let endpoint = rt.block_on(async { client(dir.path()) });
    let mut c = rt.block_on(async {
        let mut c = Conn::open(&endpoint, port + shard).await;
        let r = c
            .call(DataRequest::Produce {
                topic: "t/bye",
                segment: 0,
                ack: AckMode::Durable,
                batch: &batch(1, 0),
            })
            .await;
        assert!(
            matches!(decode(&r), Response::Produced { .. }),
            "{:?}",
            decode(&r)
        );
        c
    });
    let stopper = std::thread::spawn(move || broker.stop());
    rt.block_on(async {
        let goodbye = tokio::time::timeout(STEP_TIMEOUT, c.read_frame())
            .await
            .expect("the goodbye before the step timeout")
            .expect("the goodbye before the end of the stream");
        assert_eq!(goodbye.0.request_id, 0);
        assert!(
            matches!(
                decode(&goodbye),
                Response::Error {
                    code: ErrorCode::ShuttingDown,
                    ..
                }
            ),
            "{:?}",
            decode(&goodbye)
        );
        let late = c.send(produce("t/bye", &batch(1, 100))).await;
        c.send.finish().unwrap();
        let mut answers = Vec::new();
        while let Some(frame) = tokio::time::timeout(STEP_TIMEOUT, c.read_frame())
            .await
            .expect("the broker closes once the client finished")
        {
            answers.push((frame.0.request_id, error_code(&frame)));
        }
        assert_eq!(answers, vec![(late, Some(ErrorCode::ShuttingDown))]);
    });
    stopper.join().unwrap().unwrap();

    // Only the acknowledged batch is stored.
    let port = support::port();
    let broker = Broker::start(config(dir.path(), port)).unwrap();
    rt.block_on(async {
        let endpoint = client(dir.path());
        let mut c = Conn::open(&endpoint, port + shard).await;
        assert_every_offset_once(&fetch_all(&mut c, "t/bye").await, 100);
    });
    broker.stop().unwrap();
}

/// One address may hold `connections_per_ip_max` QUIC connections per
/// shard: the next from it is refused (the handshake
/// fails), one from another address is served, and a closed connection's
/// slot is taken again.
#[test]
fn one_address_cannot_take_every_quic_connection() {
    {
        let dir = tempfile::tempdir().unwrap();
        let port = port();
        let broker = Broker::start(BrokerConfig {
            connections_per_ip_max: 2,
            ..config(dir.path(), port)
        })
        .unwrap();
        let rt = runtime();
        rt.block_on(async {
            let endpoint = client(dir.path());
            let to: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let mut held = vec![
                Conn::open(&endpoint, port).await,
                Conn::open(&endpoint, port).await,
            ];
            for c in &mut held {
                let listed = c.call(AdminRequest::ListTopics).await;
                assert!(
                    matches!(decode(&listed), Response::TopicList { .. }),
                    "a connection within the limit was not served"
                );
            }
            let third =
                tokio::time::timeout(STEP_TIMEOUT, endpoint.connect(to, "localhost").unwrap())
                    .await
                    .expect("the refusal comes at once");
            assert!(
                matches!(third, Err(quinn::ConnectionError::ConnectionClosed(_))),
                "a third connection from one address: {third:?}"
            );
            // Another address (another endpoint bound to 127.0.0.2) is served.
            let other_endpoint = client_on("127.0.0.2:0", dir.path());
            let mut other = Conn::open(&other_endpoint, port).await;
            let listed = other.call(AdminRequest::ListTopics).await;
            assert!(matches!(decode(&listed), Response::TopicList { .. }));
            // A closed connection's slot is given back.
            let gone = held.pop().unwrap();
            gone.connection.close(0u32.into(), b"done");
            drop(gone);
            let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
            loop {
                match endpoint.connect(to, "localhost").unwrap().await {
                    Ok(_) => break,
                    Err(e) => assert!(
                        tokio::time::Instant::now() < deadline,
                        "a freed slot was never given back: {e}"
                    ),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        broker.stop().unwrap();
    }
}
