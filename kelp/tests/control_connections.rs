//! Hostile connections against a real `kelp control` process (issue 16,
//! "memory and connections bounded whatever peers do"): many idle
//! connections cost no thread each; connections that announce a largest
//! frame and stall stay within the receive budget; idle and trickling
//! connections are closed; one address cannot take every slot. Small
//! requests are served throughout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::flood::lists_topics;
use support::{port, produce_header, rss_mib, status_field, ControlPlane};
use test_support::closed_within;
use wire::limits::FRAME_PAYLOAD_BYTES_MAX;
use wire::{AdminRequest, ErrorCode, Response};

/// Idle connections held open at once (each file descriptor twice, in
/// this process and the control plane's, well under a 1,024 limit).
const IDLE: usize = 600;
/// Threads the control plane may run whatever its connections: the
/// driver, the connection thread, the signal and logging threads, and
/// sender threads of brokers (none here).
const THREADS_MAX: u64 = 16;
/// The receive budget the flooded control plane runs with.
const BUDGET_MIB: u64 = 16;
/// Connections that each announce a largest frame and stall.
const STALLED: usize = 100;
/// What the process may use over its budget.
const SLACK_MIB: u64 = 64;

#[test]
fn idle_connections_cost_no_thread_each() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let control = ControlPlane::start(dir.path(), port, &["--connections-per-ip-max", "1024"]);
    let pid = control.child.id();
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
    }
    // Each is served: a request on the last one opened is answered.
    assert!(lists_topics(idle.last_mut().unwrap()));
    let running = status_field(pid, "Threads");
    println!("control plane threads with {IDLE} connections open: {running}");
    assert!(
        running <= THREADS_MAX,
        "{running} threads for {IDLE} idle connections"
    );
    let mut fresh = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert!(lists_topics(&mut fresh), "a new connection was not served");
    control.stop();
}

#[test]
fn stalled_large_frames_stay_within_the_receive_budget() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let budget = (BUDGET_MIB << 20).to_string();
    let control = ControlPlane::start(dir.path(), port, &["--receive-bytes-max", &budget]);
    let pid = control.child.id();
    let before = rss_mib(pid);
    let mut stalled = Vec::with_capacity(STALLED);
    // All of each payload but its last byte, as far as the control plane
    // takes it (it reads a payload only once the budget has room): what it
    // reads is resident, unlike untouched room.
    let payload = vec![0x5au8; FRAME_PAYLOAD_BYTES_MAX as usize - 1];
    for _ in 0..STALLED {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(&produce_header(FRAME_PAYLOAD_BYTES_MAX))
            .unwrap();
        s.set_write_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let mut sent = 0;
        while sent < payload.len() {
            match s.write(&payload[sent..]) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        stalled.push(s);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let flooded = rss_mib(pid);
    println!(
        "control plane RSS: {before} MiB before, {flooded} MiB with {STALLED} stalled 8 MiB frames"
    );
    assert!(
        flooded <= before + BUDGET_MIB + SLACK_MIB,
        "RSS grew from {before} to {flooded} MiB with a {BUDGET_MIB} MiB budget"
    );
    // Small requests still get through.
    let mut fresh = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert!(lists_topics(&mut fresh), "a small request was held back");
    let created = AdminRequest::CreateTopic {
        topic: "flood/t".into(),
        segments: 1,
        replicas: 0,
    };
    let mut out = Vec::new();
    created.encode(10, &mut out);
    fresh.write_all(&out).unwrap();
    // Answered by the state machine: a layout, or (no broker has joined)
    // its refusal; not turned away at the door.
    let answer = test_support::read_frame(&mut fresh).expect("an answer");
    let answer = test_support::decode(&answer);
    assert!(
        match &answer {
            Response::Topic(_) => true,
            Response::Error { code, message } => {
                *code != ErrorCode::Busy || message.contains("broker")
            }
            _ => false,
        },
        "{answer:?}"
    );
    drop(stalled);
    support::flood::rss_comes_back(pid, before + SLACK_MIB, "control plane");
    assert!(lists_topics(&mut fresh));
    control.stop();
}

#[test]
fn idle_and_trickling_connections_are_closed_and_busy_ones_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let control = ControlPlane::start(
        dir.path(),
        port,
        &["--idle-timeout-ms", "400", "--frame-timeout-ms", "400"],
    );
    let mut idle = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut trickling = TcpStream::connect(("127.0.0.1", port)).unwrap();
    trickling.write_all(&produce_header(64)).unwrap();
    let mut busy = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        assert!(lists_topics(&mut busy), "a connection in use was closed");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        closed_within(&mut idle, Duration::from_secs(5)),
        "an idle connection was kept past --idle-timeout-ms"
    );
    assert!(
        closed_within(&mut trickling, Duration::from_secs(5)),
        "a trickling connection was kept past --frame-timeout-ms"
    );
    control.stop();
}

#[test]
fn one_address_cannot_take_every_connection() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let control = ControlPlane::start(dir.path(), port, &["--connections-per-ip-max", "4"]);
    support::flood::one_address_cannot_take_every_connection(port);
    control.stop();
}

#[test]
fn a_bad_header_is_answered_then_closed_and_a_bad_payload_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let control = ControlPlane::start(dir.path(), port, &[]);
    // A payload that fails its checksum: answered, and the connection
    // goes on.
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut corrupt = Vec::new();
    AdminRequest::CreateTopic {
        topic: "ns/t".into(),
        segments: 1,
        replicas: 0,
    }
    .encode(6, &mut corrupt);
    *corrupt.last_mut().unwrap() ^= 0xff;
    stream.write_all(&corrupt).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let answer = test_support::read_frame(&mut stream).expect("an answer");
    assert!(
        matches!(
            test_support::decode(&answer),
            Response::Error {
                code: ErrorCode::Checksum,
                ..
            }
        ),
        "{answer:?}"
    );
    assert!(lists_topics(&mut stream), "the connection did not go on");
    // Not a kelp frame: answered, then closed.
    let mut garbage = TcpStream::connect(("127.0.0.1", port)).unwrap();
    garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    garbage
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let answer = test_support::read_frame(&mut garbage).expect("an answer");
    assert!(
        matches!(test_support::decode(&answer), Response::Error { .. }),
        "{answer:?}"
    );
    assert!(closed_within(&mut garbage, Duration::from_secs(5)));
    control.stop();
}
