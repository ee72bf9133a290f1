//! Hostile connections against a real broker (issue 16, "memory and
//! connections bounded whatever peers do"): many connections that each
//! announce a largest frame and then stall must not grow the broker past
//! its receive budget, and must not stop small requests; one address may
//! not take every connection slot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use support::flood::lists_topics;
use support::{port, produce_header, rss_mib, Broker};
use wire::limits::FRAME_PAYLOAD_BYTES_MAX;

/// The receive budget the flooded broker runs with.
const BUDGET_MIB: u64 = 64;
/// Connections that each announce a largest frame and stall.
const STALLED: usize = 200;
/// What the broker may use over its budget.
const SLACK_MIB: u64 = 64;

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
    support::flood::rss_comes_back(pid, before + SLACK_MIB, "broker");
    broker.stop();
}

#[test]
fn one_address_cannot_take_every_connection() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start_with(dir.path(), port, &["--connections-per-ip-max", "4"]);
    support::flood::one_address_cannot_take_every_connection(port);
    broker.stop();
}
