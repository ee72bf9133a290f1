//! The S3 store goes away for 30 s under load (a TCP proxy in front of a
//! real S3-compatible server drops every connection and refuses new ones):
//! durable acks wait, leader acks go on until a segment's budget of
//! unflushed buffers is full and then wait, flushing resumes on its own once
//! the store is back, and nothing acknowledged is lost, also across a
//! kill -9 and a broker that replaces the first with an empty disk. The
//! failures of many segments are logged once per interval per shard, not
//! once per attempt.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use support::records::{publish_with, read, value};
use support::s3_proxy::Proxy;
use support::{port, Broker};
use test_support::S3Server;

/// How long the store is away.
const OUTAGE: Duration = Duration::from_secs(30);
/// Records per phase.
const RECORDS: u64 = 500;
/// Each segment's budget of sealed buffers waiting for the store
/// (`--unflushed-bytes-max`): four 64 KiB buffers.
const UNFLUSHED_BYTES_MAX: &str = "262144";
/// Records of the topic that fills its budget during the outage: about
/// 450 KiB, more than the budget and the active buffer hold.
const OVER_BUDGET_RECORDS: u64 = 5_000;
/// Segments of the second topic, whose flushes fail too during the outage.
const MANY_SEGMENTS: u64 = 8;
/// How long one S3 call retries before the flusher hears of the failure:
/// short, so every segment fails many times during the outage.
const S3_RETRY_TIMEOUT_MS: &str = "2000";
/// The broker reports its shards' flush failures once per this interval
/// (`FLUSH_ERROR_LOG_INTERVAL`), and its shards.
const LOG_INTERVAL: Duration = Duration::from_secs(10);
const SHARDS: u64 = 2;

fn broker(
    server: &S3Server,
    proxy: &Proxy,
    dir: &std::path::Path,
    log: &std::path::Path,
) -> Broker {
    let mut env = server.env();
    for (k, v) in &mut env {
        if *k == "AWS_ENDPOINT_URL" {
            *v = proxy.endpoint();
        }
    }
    Broker::start_logged(
        dir,
        port(),
        &[
            "--filer",
            &server.url("outage"),
            "--buffer-bytes",
            "65536",
            "--buffer-bytes-max",
            "65536",
            "--flush-age-ms",
            "100",
            "--s3-retry-timeout-ms",
            S3_RETRY_TIMEOUT_MS,
            "--unflushed-bytes-max",
            UNFLUSHED_BYTES_MAX,
        ],
        &env,
        log,
    )
}

#[test]
fn a_store_outage_makes_durable_acks_wait_and_loses_nothing() {
    let server = S3Server::start();
    let proxy = Proxy::start(
        server
            .endpoint()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap(),
    );
    let first_dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let first_log = logs.path().join("first.log");
    let b = broker(&server, &proxy, first_dir.path(), &first_log);
    assert!(b.cli(&["topic", "create", "app/outage"]).status.success());
    let segments = MANY_SEGMENTS.to_string();
    let created = b.cli(&[
        "topic",
        "create",
        "app/outage-many",
        "--segments",
        &segments,
    ]);
    assert!(created.status.success());
    assert!(b
        .cli(&["topic", "create", "app/outage-full"])
        .status
        .success());
    publish_with(&b, "app/outage", 0, RECORDS, &["--ack", "durable"]);

    proxy.take_down();
    let down_since = Instant::now();
    // Leader acks go on: the records are in the broker's buffers.
    publish_with(&b, "app/outage", RECORDS, RECORDS, &["--ack", "leader"]);
    publish_with(&b, "app/outage-many", 0, RECORDS, &["--ack", "leader"]);
    // A durable produce waits for the store; its request timeout is longer
    // than the outage and the flusher's backoff after it. So does a leader
    // produce of more than the segment's budget of unflushed buffers.
    let waiting = ["--request-timeout-ms", "120000"];
    std::thread::scope(|scope| {
        let durable = scope.spawn(|| {
            let mut args = vec!["--ack", "durable"];
            args.extend(waiting);
            publish_with(&b, "app/outage", 2 * RECORDS, RECORDS, &args)
        });
        let over_budget = scope.spawn(|| {
            let mut args = vec!["--ack", "leader"];
            args.extend(waiting);
            publish_with(&b, "app/outage-full", 0, OVER_BUDGET_RECORDS, &args)
        });
        while down_since.elapsed() < OUTAGE {
            assert!(
                !durable.is_finished(),
                "a durable produce finished while the store was down"
            );
            assert!(
                !over_budget.is_finished(),
                "a leader produce past the unflushed budget finished while the store was down"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        proxy.bring_up();
        // Flushing resumes by itself; both produces are acknowledged
        // (publish_with checks the acknowledgement).
        durable.join().unwrap();
        over_budget.join().unwrap();
    });

    // Every record, in order, from this broker; then from one with an
    // empty disk after a kill -9 (everything up to the durable ack is in
    // the bucket: chunks are stored in offset order).
    let all = 3 * RECORDS;
    let check = |records: Vec<(u64, String)>| {
        assert_eq!(records.len() as u64, all);
        for (i, (offset, v)) in records.iter().enumerate() {
            assert_eq!(*offset, i as u64);
            assert_eq!(*v, value(i as u64), "record {i}");
        }
    };
    check(read(&b, "app/outage", &[], all));
    let full = read(&b, "app/outage-full", &[], OVER_BUDGET_RECORDS);
    assert_eq!(full.len() as u64, OVER_BUDGET_RECORDS);
    for (i, (offset, v)) in full.iter().enumerate() {
        assert_eq!((*offset, v.as_str()), (i as u64, value(i as u64).as_str()));
    }
    // Then durably behind them on every segment (the keys hash to all 8),
    // so all of app/outage-many is in the bucket before the kill.
    publish_with(
        &b,
        "app/outage-many",
        RECORDS,
        RECORDS,
        &["--ack", "durable"],
    );
    let many = |b: &Broker| {
        let mut values: Vec<String> = read(b, "app/outage-many", &[], 2 * RECORDS)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        values.sort();
        let expected: Vec<String> = (0..2 * RECORDS).map(value).collect();
        assert_eq!(values, expected, "each record of app/outage-many once");
    };
    many(&b);
    b.kill9();

    // What the first broker logged: its flush failures, at most one line
    // per shard per interval (with how many were held back), and that
    // flushing resumed.
    let log = std::fs::read_to_string(&first_log).unwrap();
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("storing chunk") && l.contains("failed"))
        .collect();
    let most = SHARDS * ((OUTAGE + Duration::from_secs(10)).as_secs() / LOG_INTERVAL.as_secs() + 2);
    assert!(
        !failures.is_empty() && failures.len() as u64 <= most,
        "{} flush failure lines (1 to {most} expected):\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        failures
            .iter()
            .any(|l| l.contains("more failed flush attempts")),
        "no line says how many failures were held back:\n{}",
        failures.join("\n")
    );
    assert!(log.contains("flushing resumed"), "{log}");

    let second_dir = tempfile::tempdir().unwrap();
    let b = broker(
        &server,
        &proxy,
        second_dir.path(),
        &logs.path().join("second.log"),
    );
    check(read(&b, "app/outage", &[], all));
    many(&b);
    b.stop();
}
