//! Hostile QUIC connections against a real broker (the QUIC side of
//! `connection_flood.rs`): many connections that each send all but the
//! last byte of a largest frame and then stall must not grow the broker
//! past its receive budget, whatever quinn-proto would buffer for them,
//! and must not stop a small produce and fetch on the same shard.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{port, produce_header, rss_mib, Broker};
use test_support::QuicConn;
use wire::chunk::BatchWalk;
use wire::frame::FRAME_HEADER_BYTES;
use wire::limits::FRAME_PAYLOAD_BYTES_MAX;
use wire::message::Fetched;
use wire::{AckMode, AdminRequest, BatchBuilder, DataRequest, FetchFrom, Response};

/// The receive budget the flooded broker runs with.
const BUDGET_MIB: u64 = 64;
/// Connections that each send most of a largest frame and stall. Their
/// smallest windows (64 KiB each) and the payloads the budget admits
/// (8 MiB each) leave room in it for one more connection's window and a
/// small frame.
const STALLED: usize = 48;
/// What the broker may use over its budget (connection state, allocator).
const SLACK_MIB: u64 = 64;
/// The client's send window per connection: bounds what this test
/// process buffers for the broker, not what the broker takes.
const CLIENT_SEND_WINDOW_BYTES: u64 = 1 << 20;
/// How often the broker's memory is sampled while the flood settles.
const SETTLE_SAMPLE_INTERVAL: Duration = Duration::from_millis(500);
/// Growth between samples below which the flood has settled.
const SETTLED_GROWTH_MIB: u64 = 1;
/// The longest the flood may take to settle, and the longest any one step
/// of the test may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// A quinn client endpoint that trusts the broker's own certificate.
fn client(data_dir: &std::path::Path) -> quinn::Endpoint {
    let cert = std::fs::read(data_dir.join("tls/cert.der")).unwrap();
    let tls = engine::client_tls_trusting(cert.into()).unwrap();
    let mut transport = quinn::TransportConfig::default();
    transport.send_window(CLIENT_SEND_WINDOW_BYTES);
    test_support::quic_endpoint("127.0.0.1:0", tls, transport)
}

/// A small produce, then a fetch of it, on a fresh connection: the values
/// fetched back.
async fn produce_and_fetch(endpoint: &quinn::Endpoint, port: u16, topic: &str) -> Vec<Vec<u8>> {
    let mut c = QuicConn::open(endpoint, port).await;
    let mut b = BatchBuilder::new();
    for i in 0..3u32 {
        b.push(
            1_700_000_000_000,
            b"k",
            format!("small {i}").as_bytes(),
            &[],
        )
        .unwrap();
    }
    let batch = b.finish(0, 0).to_vec();
    let produced = c
        .call(DataRequest::Produce {
            topic,
            segment: 0,
            ack: AckMode::Leader,
            batch: &batch,
        })
        .await;
    let answer = test_support::decode(&produced);
    assert!(
        matches!(
            answer,
            Response::Produced {
                record_count: 3,
                ..
            }
        ),
        "{answer:?}"
    );
    let fetched = c
        .call(DataRequest::Fetch(wire::FetchRequest {
            topic: topic.into(),
            segment: 0,
            from: FetchFrom::Earliest,
            max_bytes: 1 << 20,
            max_wait_ms: 0,
            checks: wire::FetchChecks::Trust,
            follower: None,
        }))
        .await;
    let Response::Fetched(Fetched { batches, .. }) = test_support::decode(&fetched) else {
        panic!("not a fetch answer: {:?}", test_support::decode(&fetched));
    };
    let mut values = Vec::new();
    for item in BatchWalk::new(batches) {
        let (_, b) = item.unwrap();
        values.extend(b.records().map(|r| r.value.to_vec()));
    }
    c.connection.close(0u32.into(), b"done");
    values
}

/// Samples the broker's memory until it stops growing (or `STEP_TIMEOUT`
/// passed): what it settled at.
async fn settled_rss_mib(pid: u32) -> u64 {
    let deadline = Instant::now() + STEP_TIMEOUT;
    let mut last = rss_mib(pid);
    loop {
        tokio::time::sleep(SETTLE_SAMPLE_INTERVAL).await;
        let now = rss_mib(pid);
        if now < last + SETTLED_GROWTH_MIB || Instant::now() >= deadline {
            return now.max(last);
        }
        last = now;
    }
}

#[test]
fn stalled_large_quic_frames_stay_within_the_receive_budget() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start_for_flood(dir.path(), port, BUDGET_MIB);
    let pid = broker.child.id();
    let created = test_support::TestConn::open(port).call(AdminRequest::CreateTopic {
        topic: "flood/small".into(),
        segments: 1,
        replicas: 0,
    });
    let Response::Topic(info) = test_support::decode(&created) else {
        panic!("{:?}", test_support::decode(&created))
    };
    // Flood the shard that owns the topic.
    let shard_port = port + info.segments[0].shard;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let endpoint = client(dir.path());
        let before = rss_mib(pid);
        // All but the last byte of a largest frame: it never completes.
        let mut frame = produce_header(FRAME_PAYLOAD_BYTES_MAX).to_vec();
        frame.resize(FRAME_HEADER_BYTES + FRAME_PAYLOAD_BYTES_MAX as usize - 1, 0);
        let frame = Arc::new(frame);
        let mut stalled = Vec::with_capacity(STALLED);
        for _ in 0..STALLED {
            let mut c = tokio::time::timeout(STEP_TIMEOUT, QuicConn::open(&endpoint, shard_port))
                .await
                .expect("a stalled connection opens");
            let frame = frame.clone();
            // Writes as much as the broker's flow control lets through,
            // then waits for ever; the connection is kept open.
            stalled.push(tokio::spawn(async move {
                let _ = c.send.write_all(&frame).await;
                std::future::pending::<()>().await;
                drop(c);
            }));
        }
        let flooded = settled_rss_mib(pid).await;
        println!(
            "broker RSS: {before} MiB before, {flooded} MiB with {STALLED} QUIC connections \
             stalled in an 8 MiB frame"
        );

        assert!(
            flooded <= before + BUDGET_MIB + SLACK_MIB,
            "RSS grew from {before} to {flooded} MiB with a {BUDGET_MIB} MiB budget \
             (slack {SLACK_MIB} MiB)"
        );

        // A small produce and fetch still get through on the flooded shard.
        let values = tokio::time::timeout(
            STEP_TIMEOUT,
            produce_and_fetch(&endpoint, shard_port, "flood/small"),
        )
        .await
        .expect("a small produce and fetch during the flood");
        assert_eq!(values, [&b"small 0"[..], b"small 1", b"small 2"]);

        for task in &stalled {
            task.abort();
        }
        endpoint.close(0u32.into(), b"done");
    });
    broker.stop();
}
