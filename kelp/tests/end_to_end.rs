//! The real `kelp` binary on loopback: a broker process, and the CLI as a
//! user runs it. Uses `$KELP_BIN` when set (to test another build),
//! else the binary cargo built for this test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod support;

use support::{kelp_bin, port, Broker};

/// Publish `lines` through `kelp pub`, returning its stdout.
fn publish(broker: &Broker, topic: &str, transport: &str, ack: &str, lines: &[u8]) -> String {
    let out = broker.cli_with_stdin(
        &["pub", topic, "--transport", transport, "--ack", ack],
        lines,
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kelp pub failed: {}, stdout {stdout}, stderr {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Publish `total` records over `keys` keys ([`keyed_lines`]) through
/// `kelp pub` and check that it says every one was acknowledged.
fn publish_keyed(
    broker: &Broker,
    topic: &str,
    transport: &str,
    ack: &str,
    total: usize,
    keys: usize,
) {
    let out = publish(broker, topic, transport, ack, &keyed_lines(total, keys));
    assert!(
        out.contains(&format!("acknowledged {total} records")),
        "pub said: {out}"
    );
}

/// `kelp topic create <topic> --segments <segments>`, which must succeed.
fn create_topic(broker: &Broker, topic: &str, segments: u32) {
    let out = broker.cli(&[
        "topic",
        "create",
        topic,
        "--segments",
        &segments.to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Read `count` records with `kelp sub`, as (key, value) lines.
fn subscribe(
    broker: &Broker,
    topic: &str,
    transport: &str,
    from: &str,
    count: usize,
) -> Vec<(String, String)> {
    let mut child = Command::new(kelp_bin())
        .args([
            "sub",
            topic,
            "--transport",
            transport,
            "--from",
            from,
            "--count",
        ])
        .arg(count.to_string())
        .arg("--broker")
        .arg(broker.broker_arg())
        .envs(broker.cli_env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let reader = BufReader::new(child.stdout.take().unwrap());
    let mut records = Vec::with_capacity(count);
    for line in reader.lines() {
        let line = line.unwrap();
        let (k, v) = line.split_once('\t').unwrap_or(("", line.as_str()));
        records.push((k.to_string(), v.to_string()));
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "kelp sub failed: {status}");
    records
}

/// Lines `key-K<TAB>K:SEQ` with SEQ counting up per key.
fn keyed_lines(records: usize, keys: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(records * 24);
    for i in 0..records {
        let k = i % keys;
        let seq = i / keys;
        writeln!(out, "key-{k}\t{k}:{seq}").unwrap();
    }
    out
}

/// Every record once, and each key's records in publish order.
fn check_complete_and_ordered(records: &[(String, String)], total: usize, keys: usize) {
    assert_eq!(records.len(), total, "record count");
    let mut next_seq: HashMap<&str, usize> = HashMap::new();
    for (key, value) in records {
        let (k, seq) = value.split_once(':').expect("value shape");
        assert_eq!(key, &format!("key-{k}"), "key matches value");
        let seq: usize = seq.parse().unwrap();
        let expected = next_seq.entry(key.as_str()).or_insert(0);
        assert_eq!(
            seq, *expected,
            "key {key}: got seq {seq}, expected {expected}"
        );
        *expected += 1;
    }
    assert_eq!(next_seq.len(), keys, "every key seen");
    let per_key = total / keys;
    assert!(
        next_seq.values().all(|n| *n == per_key),
        "every key complete"
    );
}

fn million_records_over(transport: &str) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), port());
    create_topic(&broker, "load/million", 4);
    const TOTAL: usize = 1_000_000;
    const KEYS: usize = 1_000;
    publish_keyed(&broker, "load/million", transport, "leader", TOTAL, KEYS);
    let records = subscribe(&broker, "load/million", transport, "earliest", TOTAL);
    check_complete_and_ordered(&records, TOTAL, KEYS);
    // Describe shows the four segments' offsets adding up.
    let out = broker.cli(&["topic", "describe", "load/million"]);
    assert!(out.status.success());
    broker.stop();
}

#[test]
fn a_million_keyed_records_over_tcp() {
    million_records_over("tcp");
}

#[test]
fn a_million_keyed_records_over_quic() {
    million_records_over("quic");
}

#[test]
fn kill_minus_nine_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start(dir.path(), port);
    create_topic(&broker, "crash/test", 4);
    // `all` on a lone broker (no followers) promises what `leader` does.
    create_topic(&broker, "crash/all", 2);
    const TOTAL: usize = 20_000;
    const KEYS: usize = 100;
    publish_keyed(&broker, "crash/test", "tcp", "leader", TOTAL, KEYS);
    publish_keyed(&broker, "crash/all", "tcp", "all", TOTAL / 4, KEYS);
    // Straight after the acks, before the 1 s age flush: nothing in the filer yet.
    broker.kill9();

    let broker = Broker::start(dir.path(), port);
    let records = subscribe(&broker, "crash/test", "tcp", "earliest", TOTAL);
    check_complete_and_ordered(&records, TOTAL, KEYS);
    let records = subscribe(&broker, "crash/all", "tcp", "earliest", TOTAL / 4);
    check_complete_and_ordered(&records, TOTAL / 4, KEYS);

    // Recovery flushed the buffers: chunk files exist and `chunk cat` reads them.
    let chunks = chunk_files(&broker.data_dir.join("filer/topics/crash/test"));
    assert!(
        !chunks.is_empty(),
        "recovered buffers were flushed as chunks"
    );
    let mut in_chunks = 0;
    for chunk in &chunks {
        let out = Command::new(kelp_bin())
            .arg("chunk")
            .arg("cat")
            .arg(chunk)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "chunk cat {}: {}",
            chunk.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        in_chunks += String::from_utf8_lossy(&out.stdout).lines().count();
    }
    assert_eq!(
        in_chunks, TOTAL,
        "every record is in a chunk after recovery"
    );

    // Offsets continue where they stopped.
    let out = publish(
        &broker,
        "crash/test",
        "tcp",
        "durable",
        &keyed_lines(KEYS, KEYS),
    );
    assert!(out.contains(&format!("acknowledged {KEYS} records")));
    let records = subscribe(&broker, "crash/test", "tcp", "earliest", TOTAL + KEYS);
    assert_eq!(records.len(), TOTAL + KEYS);
    broker.stop();
}

fn chunk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "chunk") {
                out.push(path);
            }
        }
    }
    out
}

#[test]
fn restart_keeps_topics_and_records_and_bad_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start(dir.path(), port);
    for bad in [
        "../escape",
        "a/b/c",
        "noslash",
        "a/..",
        &format!("a/{}", "x".repeat(250)),
    ] {
        let out = broker.cli(&["topic", "create", bad]);
        assert!(!out.status.success(), "topic {bad:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
        assert!(
            err.contains("topic"),
            "error for {bad:?} names the problem: {err}"
        );
    }
    create_topic(&broker, "keep/me", 2);
    let out = publish(
        &broker,
        "keep/me",
        "quic",
        "leader",
        b"a\t1\nb\t2\nno-tab-line\n",
    );
    assert!(out.contains("acknowledged 3 records"), "{out}");
    broker.stop();

    let broker = Broker::start(dir.path(), port);
    let listed = broker.cli(&["topic", "list"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), "keep/me");
    let mut records = subscribe(&broker, "keep/me", "tcp", "earliest", 3);
    records.sort();
    assert_eq!(
        records,
        vec![
            (String::new(), "no-tab-line".to_string()),
            ("a".to_string(), "1".to_string()),
            ("b".to_string(), "2".to_string()),
        ]
    );
    assert!(broker.cli(&["topic", "delete", "keep/me"]).status.success());
    let listed = broker.cli(&["topic", "list"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), "");
    assert!(!dir.path().join("filer/topics/keep/me/topic.json").exists());
    broker.stop();
}

#[test]
fn quic_driven_on_the_shards_carries_keyed_records_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_with(dir.path(), port(), &[]);
    create_topic(&broker, "load/shard-quic", 4);
    const TOTAL: usize = 200_000;
    const KEYS: usize = 500;
    publish_keyed(&broker, "load/shard-quic", "quic", "leader", TOTAL, KEYS);
    let records = subscribe(&broker, "load/shard-quic", "quic", "earliest", TOTAL);
    check_complete_and_ordered(&records, TOTAL, KEYS);
    broker.stop();
}

/// One broker per data dir: a second `kelp serve` on the directory of a
/// running one exits at once with an error naming the first one's pid, and
/// the first carries on serving what it acknowledged.
#[test]
fn a_second_broker_on_the_same_data_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let first = Broker::start(dir.path(), port());
    assert!(first.cli(&["topic", "create", "one/dir"]).status.success());
    let out = publish(&first, "one/dir", "tcp", "durable", b"k\tv\n");
    assert!(out.contains("acknowledged 1 records"), "pub said: {out}");
    let mut second = Command::new(kelp_bin())
        .args(["serve", "--shards", "2", "--listen"])
        .arg(format!("127.0.0.1:{}", port()))
        .arg("--data-dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the second broker did not exit"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    second
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success(), "the second broker exited with {status}");
    assert!(
        stderr.contains("in use by another kelp broker")
            && stderr.contains(&format!("pid {}", first.child.id())),
        "{stderr}"
    );
    let records = subscribe(&first, "one/dir", "tcp", "earliest", 1);
    assert_eq!(records.len(), 1, "the first broker still serves its record");
    first.stop();
}
