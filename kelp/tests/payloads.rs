//! Large payloads by reference, end to end: a real broker process, the
//! client SDK and the CLI on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use client::{
    Client, ClientError, ClientOptions, ErrorCode, FetchFrom, PayloadRef, ProducerConfig,
    SubscribeOptions, Transport, ValueSource,
};

mod support;

use support::{kelp_bin, port, Broker};

const MIB: usize = 1 << 20;

/// Four MiB that differ for every `i` (and at every 8-byte word).
fn value(i: u64, len: usize) -> Vec<u8> {
    (0..len / 8)
        .flat_map(|w| {
            (i << 40 | w as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .to_le_bytes()
        })
        .collect()
}

async fn connect(broker: &Broker, payload_dir: Option<PathBuf>) -> Client {
    let options = ClientOptions {
        payload_dir,
        ..ClientOptions::default()
    };
    Client::connect(&broker.broker_arg(), Transport::Tcp, options)
        .await
        .unwrap()
}

async fn appended_bytes(client: &Client, topic: &str) -> u64 {
    let info = client.describe_topic(topic).await.unwrap();
    info.segments.iter().map(|s| s.appended_bytes).sum()
}

/// Publish `n` records keyed `k<i>` with values `value(i, len)`, durably.
async fn publish_all(
    client: &Client,
    topic: &str,
    n: usize,
    len: usize,
    by_ref_over: Option<usize>,
) {
    let config = ProducerConfig {
        by_ref_over,
        ..support::durable()
    };
    let producer = client.producer(topic, config).await.unwrap();
    for i in 0..n {
        producer
            .send(format!("k{i}").as_bytes(), &value(i as u64, len), &[])
            .await
            .unwrap();
    }
    assert_eq!(producer.flush().await.unwrap(), n as u64);
}

/// Read `n` records from the start of `topic`, keyed `k<i>`, and check
/// each value is `value(i)`. Returns how many came by reference.
async fn read_and_check(client: &Client, topic: &str, n: usize, len: usize) -> usize {
    let mut sub = support::keyed::subscribe_earliest(client, topic).await;
    let mut seen = vec![false; n];
    let mut by_reference = 0;
    for _ in 0..n {
        let record = tokio::time::timeout(Duration::from_secs(60), sub.next())
            .await
            .expect("records keep coming")
            .expect("the subscriber is open")
            .unwrap();
        let i: usize = std::str::from_utf8(&record.key[1..])
            .unwrap()
            .parse()
            .unwrap();
        assert!(!seen[i], "record {i} delivered twice");
        seen[i] = true;
        assert!(
            record.value == value(i as u64, len),
            "record {i}: bytes differ"
        );
        if let ValueSource::Resolved(r) = record.source {
            assert_eq!(r.length, len as u64);
            by_reference += 1;
        }
    }
    by_reference
}

/// The figure: 200 records of 4 MiB by reference and 200 inline,
/// all read back byte for byte; the broker's ingest counter grows by the
/// references' bytes only for the first set. The broker's upload path
/// carries the payloads (this client does not share the filer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_mib_values_by_reference_and_inline_read_back_identical() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), port());
    let client = connect(&broker, None).await;
    client.create_topic("big/refs", 2).await.unwrap();
    client.create_topic("big/inline", 2).await.unwrap();
    const N: usize = 200;
    let len = 4 * MIB;

    publish_all(&client, "big/refs", N, len, Some(MIB)).await;
    let ref_bytes = appended_bytes(&client, "big/refs").await;
    // Each reference record is a few dozen bytes plus batch overhead; the
    // 800 MiB of payload never went through a segment.
    assert!(ref_bytes > 0 && ref_bytes < (N * 200) as u64, "{ref_bytes}");

    publish_all(&client, "big/inline", N, len, None).await;
    let inline_bytes = appended_bytes(&client, "big/inline").await;
    assert!(inline_bytes >= (N * len) as u64, "{inline_bytes}");

    assert_eq!(read_and_check(&client, "big/refs", N, len).await, N);
    assert_eq!(read_and_check(&client, "big/inline", N, len).await, 0);
    drop(client);
    broker.stop();
}

fn payload_file(filer: &Path, topic: &str, r: &PayloadRef) -> PathBuf {
    let topic = control::TopicName::parse(topic).unwrap();
    filer.join(control::filer_layout::payload(&topic, &r.id).as_str())
}

/// With the filer shared, the client writes and reads payloads itself. A
/// missing or altered payload is an error for its record alone: the
/// records after it still arrive. Without resolving, references come as
/// they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_altered_payloads_fail_their_record_only() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), port());
    let filer = dir.path().join("filer");
    let client = connect(&broker, Some(filer.clone())).await;
    client.create_topic("big/damaged", 1).await.unwrap();
    let producer = client
        .producer("big/damaged", support::durable())
        .await
        .unwrap();
    let mut refs = Vec::new();
    for i in 0..4u64 {
        let r = client
            .upload_payload("big/damaged", &value(i, 2 * MIB))
            .await
            .unwrap();
        assert!(payload_file(&filer, "big/damaged", &r).is_file());
        producer
            .send_reference(format!("k{i}").as_bytes(), &r, &[])
            .await
            .unwrap();
        refs.push(r);
    }
    producer.flush().await.unwrap();
    std::fs::remove_file(payload_file(&filer, "big/damaged", &refs[1])).unwrap();
    let altered = payload_file(&filer, "big/damaged", &refs[2]);
    let mut bytes = std::fs::read(&altered).unwrap();
    bytes[MIB] ^= 0x40;
    std::fs::write(&altered, &bytes).unwrap();

    let mut sub = client
        .subscribe(
            "big/damaged",
            FetchFrom::Earliest,
            SubscribeOptions::default(),
        )
        .await
        .unwrap();
    let first = sub.next().await.unwrap().unwrap();
    assert!(first.value == value(0, 2 * MIB));
    let missing = sub.next().await.unwrap().unwrap_err();
    assert!(
        matches!(missing, ClientError::Payload { offset: 1, .. }),
        "{missing}"
    );
    assert_eq!(missing.broker_code(), Some(ErrorCode::PayloadNotFound));
    let changed = sub.next().await.unwrap().unwrap_err();
    assert!(
        matches!(changed, ClientError::Payload { offset: 2, .. }),
        "{changed}"
    );
    assert_eq!(changed.broker_code(), Some(ErrorCode::PayloadMismatch));
    let last = sub.next().await.unwrap().unwrap();
    assert_eq!(last.offset, 3);
    assert!(last.value == value(3, 2 * MIB));

    let mut raw = client
        .subscribe(
            "big/damaged",
            FetchFrom::Earliest,
            SubscribeOptions {
                resolve_references: false,
                ..SubscribeOptions::default()
            },
        )
        .await
        .unwrap();
    for r in &refs {
        let record = raw.next().await.unwrap().unwrap();
        assert_eq!(record.source, ValueSource::Reference(*r));
        assert_eq!(&record.value[..], &r.encode()[..]);
    }
    drop(client);
    broker.stop();
}

/// An upload never published is deleted after the grace period; a
/// published one stays; deleting the topic deletes its payloads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_uploads_are_swept_published_ones_stay() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_with(
        dir.path(),
        port(),
        &["--payload-grace-ms", "1500", "--payload-sweep-ms", "200"],
    );
    let filer = dir.path().join("filer");
    let client = connect(&broker, Some(filer.clone())).await;
    client.create_topic("big/sweep", 1).await.unwrap();
    let orphan = client
        .upload_payload("big/sweep", &value(1, MIB))
        .await
        .unwrap();
    let kept = client
        .upload_payload("big/sweep", &value(2, MIB))
        .await
        .unwrap();
    support::publish_reference(&client, "big/sweep", &kept).await;
    let orphan_file = payload_file(&filer, "big/sweep", &orphan);
    let kept_file = payload_file(&filer, "big/sweep", &kept);
    let deadline = Instant::now() + Duration::from_secs(30);
    while orphan_file.exists() {
        assert!(Instant::now() < deadline, "the orphan was never swept");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Several more sweeps pass; the published payload stays readable.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(kept_file.is_file());
    let mut sub = client
        .subscribe(
            "big/sweep",
            FetchFrom::Earliest,
            SubscribeOptions::default(),
        )
        .await
        .unwrap();
    assert!(sub.next().await.unwrap().unwrap().value == value(2, MIB));

    client.delete_topic("big/sweep").await.unwrap();
    assert!(!kept_file.exists());
    assert!(!filer.join("topics/big/sweep").exists());
    drop(client);
    broker.stop();
}

/// `kelp pub --by-ref-over` and `kelp sub` (resolved, and with
/// `--references`), and `kelp chunk cat` shows references as references.
#[test]
fn cli_publishes_and_reads_by_reference() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), port());
    assert!(broker
        .cli(&["topic", "create", "cli/big", "--segments", "1"])
        .status
        .success());
    let lines = support::mixed_lines(6, 5_000);
    let big_value = lines.lines().next().unwrap().split_once('\t').unwrap().1;
    let mut child = Command::new(kelp_bin())
        .args([
            "pub",
            "cli/big",
            "--ack",
            "durable",
            "--by-ref-over",
            "1000",
        ])
        .arg("--broker")
        .arg(broker.broker_arg())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "acknowledged 6 records"
    );

    let out = broker.cli(&["sub", "cli/big", "--from", "earliest", "--count", "6"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), lines);

    let out = broker.cli(&[
        "sub",
        "cli/big",
        "--from",
        "earliest",
        "--count",
        "6",
        "--references",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let printed: Vec<&str> = text.lines().collect();
    assert_eq!(printed.len(), 6);
    assert!(
        printed[0].starts_with("k0\tref:payloads/"),
        "{}",
        printed[0]
    );
    assert!(
        printed[0].contains(&format!(" length={} crc32c=", big_value.len())),
        "{}",
        printed[0]
    );
    assert_eq!(printed[1], "k1\tsmall-1");

    // The chunk holding them (flushed: the producer asked for durable).
    let chunk = walk(&dir.path().join("filer/topics/cli/big"))
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "chunk"))
        .expect("a chunk file");
    let out = Command::new(kelp_bin())
        .args(["chunk", "cat"])
        .arg(&chunk)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert!(rows[0].contains("\tk0\tref:payloads/"), "{}", rows[0]);
    assert!(rows[1].ends_with("\tk1\tsmall-1"), "{}", rows[1]);
    broker.stop();
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
