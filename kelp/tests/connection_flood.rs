//! Hostile connections against a real broker (issue 16, "memory and
//! connections bounded whatever peers do"): many connections that each
//! announce a largest frame and then stall must not grow the broker past
//! its receive budget, and must not stop small requests; one address may
//! not take every connection slot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::{connect_from, port, produce_header, rss_mib, Broker};
use wire::limits::FRAME_PAYLOAD_BYTES_MAX;
use wire::{AdminRequest, Response};

/// The receive budget the flooded broker runs with.
const BUDGET_MIB: u64 = 64;
/// Connections that each announce a largest frame and stall.
const STALLED: usize = 200;
/// What the broker may use over its budget.
const SLACK_MIB: u64 = 64;

/// A ListTopics round trip on `stream`: whether it was answered.
fn lists_topics(stream: &mut TcpStream) -> bool {
    let mut out = Vec::new();
    AdminRequest::ListTopics.encode(9, &mut out);
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    if stream.write_all(&out).is_err() {
        return false;
    }
    match test_support::read_frame(stream) {
        Some(frame) => matches!(test_support::decode(&frame), Response::TopicList { .. }),
        None => false,
    }
}

#[test]
fn stalled_large_frames_stay_within_the_receive_budget() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start_for_flood(dir.path(), port, BUDGET_MIB);
    let pid = broker.child.id();
    let before = rss_mib(pid);

    let mut stalled = Vec::with_capacity(STALLED);
    for _ in 0..STALLED {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(&produce_header(FRAME_PAYLOAD_BYTES_MAX))
            .unwrap();
        // A little of the payload, then nothing.
        s.write_all(&[0u8; 1024]).unwrap();
        stalled.push(s);
    }
    // Let the broker take in all it will.
    std::thread::sleep(Duration::from_millis(1500));
    let flooded = rss_mib(pid);
    println!("broker RSS: {before} MiB before, {flooded} MiB with {STALLED} stalled 8 MiB frames");
    assert!(
        flooded <= before + BUDGET_MIB + SLACK_MIB,
        "RSS grew from {before} to {flooded} MiB with a {BUDGET_MIB} MiB budget"
    );

    // Small requests still get through on the flooded shard.
    let mut fresh = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert!(lists_topics(&mut fresh), "a small request was held back");

    drop(stalled);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = rss_mib(pid);
    while after > before + SLACK_MIB && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        after = rss_mib(pid);
    }
    println!("broker RSS after the connections closed: {after} MiB");
    broker.stop();
}

/// A connection from `source` (a loopback address) to `port`.
#[test]
fn one_address_cannot_take_every_connection() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start_with(dir.path(), port, &["--connections-per-ip-max", "4"]);
    let mut held: Vec<TcpStream> = (0..4).map(|_| connect_from("127.0.0.2", port)).collect();
    for s in &mut held {
        assert!(lists_topics(s), "a connection within the limit was refused");
    }
    // The fifth from that address is refused with Busy and closed.
    let mut refused = connect_from("127.0.0.2", port);
    refused
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let frame = test_support::read_frame(&mut refused).expect("a Busy answer");
    assert!(
        matches!(
            test_support::decode(&frame),
            Response::Error {
                code: wire::ErrorCode::Busy,
                ..
            }
        ),
        "{frame:?}"
    );
    let mut rest = Vec::new();
    assert_eq!(refused.read_to_end(&mut rest).unwrap_or(0), 0, "closed");
    // Another address is served.
    let mut other = connect_from("127.0.0.3", port);
    assert!(lists_topics(&mut other), "another address was held back");
    // A slot freed is a slot to take again.
    drop(held.pop());
    std::thread::sleep(Duration::from_millis(200));
    let mut again = connect_from("127.0.0.2", port);
    assert!(lists_topics(&mut again), "a freed slot was not given back");
    broker.stop();
}
