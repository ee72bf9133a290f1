//! A broker that stores in an S3-compatible bucket (a real server, moto,
//! on 127.0.0.1) is stateless: killed with SIGKILL and replaced by a broker
//! with an empty data directory, every durably acknowledged record is read
//! back, once, in order, and its chunks are objects in the bucket.
//! Payloads go straight to the bucket from a client with credentials, and
//! the orphan sweep deletes unreferenced ones from it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::records::{publish_with, read, value};
use support::{port, Broker};
use test_support::S3Server;

/// Records published per round, and rounds.
const RECORDS_PER_ROUND: u64 = 2_000;

fn s3_broker(server: &S3Server, data_dir: &std::path::Path, port: u16) -> Broker {
    let filer = server.url("cluster-a");
    Broker::start_with_env(
        data_dir,
        port,
        &[
            "--filer",
            &filer,
            "--buffer-bytes",
            "65536",
            "--buffer-bytes-max",
            "65536",
        ],
        &server.env(),
    )
}

fn assert_all(records: &[(u64, String)], count: u64) {
    assert_eq!(records.len() as u64, count);
    for (i, (offset, v)) in records.iter().enumerate() {
        assert_eq!(*offset, i as u64, "offsets out of order at {i}");
        assert_eq!(*v, value(i as u64), "record {i}");
    }
}

#[test]
fn a_broker_on_s3_loses_nothing_durable_when_killed_and_replaced_by_an_empty_one() {
    let server = S3Server::start();
    let first_dir = tempfile::tempdir().unwrap();
    let broker = s3_broker(&server, first_dir.path(), port());
    let created = broker.cli(&["topic", "create", "app/events"]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    publish_with(
        &broker,
        "app/events",
        0,
        RECORDS_PER_ROUND,
        &["--ack", "durable"],
    );

    // The chunks and the layout are objects in the bucket, under the prefix.
    let keys = server.keys("cluster-a/");
    let chunks = keys.iter().filter(|k| k.ends_with(".chunk")).count();
    assert!(chunks > 0, "no chunk in the bucket: {keys:?}");
    assert!(
        keys.iter().any(|k| k.ends_with("/topic.json")),
        "no topic layout in the bucket: {keys:?}"
    );
    // Nothing was written to the broker's own disk as a filer.
    assert!(!first_dir.path().join("filer").join("topics").exists());

    broker.kill9();
    drop(first_dir);

    // A new broker with nothing on disk serves everything from the bucket.
    let second_dir = tempfile::tempdir().unwrap();
    let broker = s3_broker(&server, second_dir.path(), port());
    assert_all(
        &read(&broker, "app/events", &[], RECORDS_PER_ROUND),
        RECORDS_PER_ROUND,
    );

    // It goes on where the first left off, and a clean stop flushes.
    publish_with(
        &broker,
        "app/events",
        RECORDS_PER_ROUND,
        RECORDS_PER_ROUND,
        &["--ack", "durable"],
    );
    broker.stop();
    let third_dir = tempfile::tempdir().unwrap();
    let broker = s3_broker(&server, third_dir.path(), port());
    assert_all(
        &read(&broker, "app/events", &[], 2 * RECORDS_PER_ROUND),
        2 * RECORDS_PER_ROUND,
    );
    broker.stop();
}

#[test]
fn a_bad_filer_url_is_refused_at_start_with_the_reason() {
    let out = std::process::Command::new(support::kelp_bin())
        .args(["serve", "--filer", "gs://bucket/x"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("unknown scheme"), "{said}");
}

/// `kelp ARGS --broker ADDR` with the S3 environment and `input` on stdin.
fn kelp_with_env(
    broker: &Broker,
    server: &S3Server,
    args: &[&str],
    input: &[u8],
) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new(support::kelp_bin())
        .args(args)
        .args(["--broker", &broker.broker_arg()])
        .envs(server.env())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// A client with credentials to the bucket uploads payloads straight to
/// it (`--payload-filer`); readers get them through the broker or from the
/// bucket themselves.
#[test]
fn payloads_go_straight_to_the_bucket_and_read_back_either_way() {
    let server = S3Server::start();
    let dir = tempfile::tempdir().unwrap();
    let broker = s3_broker(&server, dir.path(), port());
    assert!(broker.cli(&["topic", "create", "app/big"]).status.success());
    let lines = support::mixed_lines(4, 6_000);
    let filer = server.url("cluster-a");
    let out = kelp_with_env(
        &broker,
        &server,
        &[
            "pub",
            "app/big",
            "--ack",
            "durable",
            "--by-ref-over",
            "1000",
            "--payload-filer",
            &filer,
        ],
        lines.as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let payloads = server.keys("cluster-a/topics/app/big/payloads/");
    assert_eq!(payloads.len(), 2, "{payloads:?}");

    let read = ["sub", "app/big", "--from", "earliest", "--count", "4"];
    let through_broker = kelp_with_env(&broker, &server, &read, b"");
    assert!(through_broker.status.success());
    assert_eq!(String::from_utf8(through_broker.stdout).unwrap(), lines);
    let mut direct = read.to_vec();
    direct.extend(["--payload-filer", filer.as_str()]);
    let from_bucket = kelp_with_env(&broker, &server, &direct, b"");
    assert!(
        from_bucket.status.success(),
        "{}",
        String::from_utf8_lossy(&from_bucket.stderr)
    );
    assert_eq!(String::from_utf8(from_bucket.stdout).unwrap(), lines);
    broker.stop();
}

/// The orphan sweep on S3: an upload no record refers to is deleted from
/// the bucket after the grace period, a published one stays and reads
/// back, and deleting the topic deletes its objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_payloads_are_swept_from_the_bucket_published_ones_stay() {
    use client::SubscribeOptions;
    use std::time::{Duration, Instant};
    let server = S3Server::start();
    let dir = tempfile::tempdir().unwrap();
    let filer = server.url("sweep");
    let broker = Broker::start_with_env(
        dir.path(),
        port(),
        &[
            "--filer",
            &filer,
            "--payload-grace-ms",
            "1500",
            "--payload-sweep-ms",
            "200",
        ],
        &server.env(),
    );
    let client = broker.client().await;
    client.create_topic("big/sweep", 1).await.unwrap();
    let big = |i: u8| vec![i; 300_000];
    let orphan = client.upload_payload("big/sweep", &big(1)).await.unwrap();
    let kept = client.upload_payload("big/sweep", &big(2)).await.unwrap();
    assert_ne!(orphan, kept);
    let payloads = || server.keys("sweep/topics/big/sweep/payloads/");
    assert_eq!(payloads().len(), 2, "{:?}", payloads());
    support::publish_reference(&client, "big/sweep", &kept).await;

    let deadline = Instant::now() + Duration::from_secs(30);
    while payloads().len() > 1 {
        assert!(
            Instant::now() < deadline,
            "the orphan was never swept: {:?}",
            payloads()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Several more sweeps pass; the published payload stays readable.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(payloads().len(), 1, "{:?}", payloads());
    let mut sub = client
        .subscribe(
            "big/sweep",
            client::FetchFrom::Earliest,
            SubscribeOptions::default(),
        )
        .await
        .unwrap();
    assert!(sub.next().await.unwrap().unwrap().value == big(2));

    client.delete_topic("big/sweep").await.unwrap();
    let left = server.keys("sweep/topics/big/sweep/");
    assert!(
        left.is_empty(),
        "left in the bucket after the delete: {left:?}"
    );
    drop(client);
    broker.stop();
}
