//! A slow S3 store: a proxy in front of a real S3-compatible server holds
//! every upload (PUT) for as long as the test says, and lets everything
//! else through. The uploads in flight stay within the shards' upload
//! lanes (`--filer-uploads` per shard); while every upload slot is held,
//! reads of another topic's chunks from the bucket and leader-acked
//! produce go on; once the store takes uploads again everything is
//! stored, and each record is read once. Chunk ranges read once are
//! served from the broker's chunk cache after, with no GET.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::records::{publish_with, read, value};
use support::{port, Broker};
use test_support::S3Server;

/// Segments of each topic.
const SEGMENTS: u32 = 8;
/// Uploads each shard may have in flight (`--filer-uploads`).
const UPLOADS_PER_SHARD: usize = 2;
/// Records published per phase.
const RECORDS: u64 = 400;
/// How long the test waits for something that must happen (a bound on a
/// stall, never a measure of speed).
const PATIENCE: Duration = Duration::from_secs(60);

/// What the gate proxy saw and holds.
#[derive(Default)]
struct Gate {
    /// While set, every PUT is held before it reaches the store.
    closed: AtomicBool,
    /// The PUTs being held, by the proxy's number for each.
    held: Mutex<BTreeSet<u64>>,
    most_held: AtomicUsize,
    puts: AtomicU64,
    gets: AtomicU64,
}

/// A TCP proxy to the S3 server that can hold uploads: a test double for
/// a slow store (the store behind it is the real server). A request
/// starts with the first bytes the client sends after the last answer
/// (HTTP/1.1 without pipelining); one that starts with `PUT ` waits while
/// the gate is closed.
struct GateProxy {
    port: u16,
    gate: Arc<Gate>,
}

impl GateProxy {
    fn start(target: u16) -> GateProxy {
        let port = test_support::free_port_pair();
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let gate = Arc::new(Gate::default());
        let g = gate.clone();
        std::thread::spawn(move || {
            let ids = Arc::new(AtomicU64::new(0));
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let answered = Arc::new(AtomicBool::new(true));
                let (g, ids, a) = (g.clone(), ids.clone(), answered.clone());
                let (c, s) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || requests(c, s, &g, &ids, &a));
                std::thread::spawn(move || answers(server, client, &answered));
            }
        });
        GateProxy { port, gate }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn held(&self) -> BTreeSet<u64> {
        self.gate.held.lock().unwrap().clone()
    }
}

/// Client to server: each request's first bytes say what it is; a PUT
/// waits at the closed gate (or until its client gives up).
fn requests(
    mut client: TcpStream,
    mut server: TcpStream,
    gate: &Gate,
    ids: &AtomicU64,
    answered: &AtomicBool,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if answered.swap(false, Ordering::SeqCst) {
            if buf[..n].starts_with(b"GET ") {
                gate.gets.fetch_add(1, Ordering::SeqCst);
            }
            if buf[..n].starts_with(b"PUT ") {
                gate.puts.fetch_add(1, Ordering::SeqCst);
                if !hold(&client, gate, ids.fetch_add(1, Ordering::SeqCst)) {
                    break;
                }
            }
        }
        if server.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Both);
}

/// Hold a PUT while the gate is closed; `false` if its client hung up
/// meanwhile.
fn hold(client: &TcpStream, gate: &Gate, id: u64) -> bool {
    {
        let mut held = gate.held.lock().unwrap();
        held.insert(id);
        gate.most_held.fetch_max(held.len(), Ordering::SeqCst);
    }
    let mut alive = true;
    while alive && gate.closed.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
        client.set_nonblocking(true).unwrap();
        alive = match client.peek(&mut [0u8; 1]) {
            Ok(0) => false,
            Ok(_) => true,
            Err(e) => e.kind() == ErrorKind::WouldBlock,
        };
        client.set_nonblocking(false).unwrap();
    }
    gate.held.lock().unwrap().remove(&id);
    alive
}

/// Server to client: any answer byte means the next client bytes start a
/// new request.
fn answers(mut server: TcpStream, mut client: TcpStream, answered: &AtomicBool) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match server.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                answered.store(true, Ordering::SeqCst);
                if client.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = client.shutdown(Shutdown::Both);
}

/// How many of `topic`'s segments each shard owns.
fn segments_per_shard(b: &Broker, topic: &str) -> [usize; 2] {
    let out = b.cli(&["topic", "describe", topic, "-o", "json"]);
    assert!(out.status.success());
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut per_shard = [0usize; 2];
    for s in info["segments"].as_array().unwrap() {
        per_shard[s["shard"].as_u64().unwrap() as usize] += 1;
    }
    per_shard
}

/// Every record `0..n` of `topic`, each once (the topic has several
/// segments, so they come in no one order).
fn each_once(b: &Broker, topic: &str, n: u64) {
    let mut values: Vec<String> = read(b, topic, &[], n).into_iter().map(|(_, v)| v).collect();
    values.sort();
    let expected: Vec<String> = (0..n).map(value).collect();
    assert_eq!(values, expected, "{topic}: each record once");
}

/// Wait (at most `PATIENCE`) until `done`, saying `what` if it never is.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_slow_store_bounds_uploads_in_flight_and_stalls_no_read() {
    let server = S3Server::start();
    let target = server
        .endpoint()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let proxy = GateProxy::start(target);
    let mut env = server.env();
    for (k, v) in &mut env {
        if *k == "AWS_ENDPOINT_URL" {
            *v = proxy.endpoint();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let uploads = UPLOADS_PER_SHARD.to_string();
    let b = Broker::start_with_env(
        dir.path(),
        port(),
        &[
            "--filer",
            &server.url("slow"),
            "--buffer-bytes",
            "65536",
            "--buffer-bytes-max",
            "65536",
            "--flush-age-ms",
            "100",
            "--filer-uploads",
            &uploads,
        ],
        &env,
    );
    let segments = SEGMENTS.to_string();
    for topic in ["app/cold", "app/hot"] {
        let created = b.cli(&["topic", "create", topic, "--segments", &segments]);
        assert!(created.status.success());
    }
    // In the bucket, no longer in the broker's memory: every buffer aged
    // out and was flushed (a durable ack waits for that).
    publish_with(&b, "app/cold", 0, RECORDS, &["--ack", "durable"]);

    // The store stops taking uploads. Every hot segment seals a buffer
    // and wants to flush it; each shard has at most its lane's uploads in
    // flight.
    proxy.gate.closed.store(true, Ordering::SeqCst);
    publish_with(&b, "app/hot", 0, RECORDS, &["--ack", "leader"]);
    let expected: usize = segments_per_shard(&b, "app/hot")
        .iter()
        .map(|&n| n.min(UPLOADS_PER_SHARD))
        .sum();
    wait_until("the shards' upload slots fill", || {
        proxy.held().len() == expected
    });
    let held_before = proxy.held();

    // While every slot is held: the cold topic's chunks are read from the
    // bucket (GETs on the read lanes), and leader-acked produce goes on.
    let gets_before = proxy.gate.gets.load(Ordering::SeqCst);
    each_once(&b, "app/cold", RECORDS);
    let gets_first_read = proxy.gate.gets.load(Ordering::SeqCst) - gets_before;
    publish_with(&b, "app/hot", RECORDS, RECORDS, &["--ack", "leader"]);
    let held_after = proxy.held();
    assert!(
        held_before.is_subset(&held_after),
        "the uploads held before the reads ({held_before:?}) were no longer held after them \
         ({held_after:?}): the reads did not go on beside them"
    );
    assert!(
        gets_first_read > 0,
        "the cold topic's records did not come from the bucket"
    );
    let most = proxy.gate.most_held.load(Ordering::SeqCst);
    assert_eq!(
        most, expected,
        "uploads in flight at most: {most}, with {UPLOADS_PER_SHARD} per shard"
    );

    // Read again: every range is in the chunk cache.
    let gets_before = proxy.gate.gets.load(Ordering::SeqCst);
    each_once(&b, "app/cold", RECORDS);
    assert_eq!(
        proxy.gate.gets.load(Ordering::SeqCst),
        gets_before,
        "a second read of the same chunks asked the store again"
    );

    // The store takes uploads again: everything is stored by itself, and
    // a durable produce behind it is acknowledged.
    proxy.gate.closed.store(false, Ordering::SeqCst);
    publish_with(&b, "app/hot", 2 * RECORDS, RECORDS, &["--ack", "durable"]);
    each_once(&b, "app/hot", 3 * RECORDS);
    assert!(proxy.gate.most_held.load(Ordering::SeqCst) <= expected);
    b.kill9();

    // All of it is in the bucket: a broker with an empty disk reads it.
    let second = tempfile::tempdir().unwrap();
    let filer = server.url("slow");
    let b = Broker::start_with_env(second.path(), port(), &["--filer", &filer], &server.env());
    each_once(&b, "app/hot", 3 * RECORDS);
    each_once(&b, "app/cold", RECORDS);
    b.stop();
}
