//! The admin HTTP listener (`--http`) of a broker and of a control plane,
//! with real processes: `/metrics` read by Prometheus' own Python client
//! (its strict OpenMetrics parser, `interop/python/metrics_page.py`), its
//! counters moving by what the test produced and consumed; `/health` and
//! `/ready`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::records::publish_with;
use support::{connect_from, interop_python, port, repo_root, Broker, ControlPlane};

/// The interop Python, with Prometheus' client.
fn python() -> PathBuf {
    interop_python("prometheus_client")
}

/// A free port for an HTTP listener (the first of a reserved pair).
fn http_port() -> u16 {
    port()
}

/// [`support::http_get`].
fn get(port: u16, method: &str, path: &str) -> (u16, String) {
    support::http_get(port, method, path)
}

/// The page at `port` as the parser read it: `{"content_type", "families"}`.
fn scrape(port: u16) -> Value {
    let out = Command::new(python())
        .arg(repo_root().join("interop/python/metrics_page.py"))
        .arg(format!("http://127.0.0.1:{port}/metrics"))
        .output()
        .expect("run metrics_page.py");
    assert!(
        out.status.success(),
        "the Prometheus parser refused the page: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("metrics_page.py prints JSON")
}

/// The family `name` of `page`, which must be of type `kind`.
fn family<'a>(page: &'a Value, name: &str, kind: &str) -> &'a Value {
    let family = &page["families"][name];
    assert_eq!(family["type"], kind, "family {name}: {family}");
    family
}

/// The sum of the samples named `sample` of family `name` whose labels
/// include every pair of `labels`.
fn sum(page: &Value, name: &str, sample: &str, labels: &[(&str, &str)]) -> f64 {
    page["families"][name]["samples"]
        .as_array()
        .unwrap_or_else(|| panic!("no family {name}"))
        .iter()
        .filter(|s| s["name"] == sample)
        .filter(|s| labels.iter().all(|(k, v)| s["labels"][*k] == *v))
        .map(|s| s["value"].as_f64().expect("a number"))
        .sum()
}

/// Scrape until `done` holds for the page (levels are published at a
/// shard's or the control plane's tick), for at most 30 s.
fn scrape_until(port: u16, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = scrape(port);
        if done(&page) {
            return page;
        }
        assert!(Instant::now() < deadline, "never: {what}; last page {page}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_brokers_counters_move_by_what_was_produced_and_read() {
    let dir = tempfile::tempdir().unwrap();
    let http = http_port();
    let listen = format!("127.0.0.1:{http}");
    let broker = Broker::start_with(dir.path(), port(), &["--http", &listen]);

    assert_eq!(get(http, "GET", "/health"), (200, "ok\n".into()));
    assert_eq!(get(http, "GET", "/ready"), (200, "ready\n".into()));
    assert_eq!(get(http, "GET", "/nothing").0, 404);
    assert_eq!(get(http, "POST", "/metrics").0, 405);

    let before = scrape(http);
    assert!(
        before["content_type"]
            .as_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{}",
        before["content_type"]
    );
    for (name, kind) in [
        ("kelp_records_in", "counter"),
        ("kelp_bytes_in", "counter"),
        ("kelp_records_out", "counter"),
        ("kelp_bytes_out", "counter"),
        ("kelp_connections", "gauge"),
        ("kelp_connections_refused", "counter"),
        ("kelp_produce_seconds", "histogram"),
        ("kelp_produce_errors", "counter"),
        ("kelp_fetch_seconds", "histogram"),
        ("kelp_flushes", "counter"),
        ("kelp_flushed_bytes", "counter"),
        ("kelp_flush_seconds", "histogram"),
        ("kelp_flush_errors", "counter"),
        ("kelp_fenced_records", "counter"),
        ("kelp_filer_request_seconds", "histogram"),
        ("kelp_unflushed_bytes", "gauge"),
        ("kelp_receive_bytes", "gauge"),
        ("kelp_receive_bytes_max", "gauge"),
        ("kelp_segment_appended_records", "counter"),
        ("kelp_segment_next_offset", "gauge"),
        ("kelp_segment_lost_records", "gauge"),
    ] {
        family(&before, name, kind);
    }
    // 256 MiB per shard by default, two shards.
    assert_eq!(
        sum(
            &before,
            "kelp_receive_bytes_max",
            "kelp_receive_bytes_max",
            &[]
        ),
        2.0 * 268_435_456.0
    );

    let created = broker.cli(&["topic", "create", "m/counted", "--segments", "2"]);
    assert!(created.status.success(), "{created:?}");
    // 1,000 records acked by the leader over TCP, 500 durable over QUIC.
    publish_with(&broker, "m/counted", 0, 1_000, &["--ack", "leader"]);
    publish_with(
        &broker,
        "m/counted",
        1_000,
        500,
        &["--ack", "durable", "--transport", "quic"],
    );
    let read = broker.sub_earliest("m/counted", 1_500, "%o\\n");
    assert_eq!(read.lines().count(), 1_500);

    let after = scrape(http);
    let moved = |name: &str, sample: &str, labels: &[(&str, &str)]| {
        sum(&after, name, sample, labels) - sum(&before, name, sample, labels)
    };
    let tcp = [("transport", "tcp")];
    let quic = [("transport", "quic")];
    assert_eq!(
        moved("kelp_records_in", "kelp_records_in_total", &tcp),
        1_000.0
    );
    assert_eq!(
        moved("kelp_records_in", "kelp_records_in_total", &quic),
        500.0
    );
    assert_eq!(
        moved("kelp_records_out", "kelp_records_out_total", &tcp),
        1_500.0
    );
    // Every batch appended was read once, whole.
    let bytes_in = moved("kelp_bytes_in", "kelp_bytes_in_total", &[]);
    assert!(bytes_in > 1_500.0 * 8.0, "{bytes_in}");
    assert_eq!(
        moved("kelp_bytes_out", "kelp_bytes_out_total", &tcp),
        bytes_in
    );
    // Each produce request is one observation of its ack mode.
    let leader = [("ack", "leader")];
    let durable = [("ack", "durable")];
    let produce = "kelp_produce_seconds";
    assert!(moved(produce, "kelp_produce_seconds_count", &leader) >= 1.0);
    assert!(moved(produce, "kelp_produce_seconds_count", &durable) >= 1.0);
    assert_eq!(
        moved(
            produce,
            "kelp_produce_seconds_bucket",
            &[("ack", "durable"), ("le", "+Inf")]
        ),
        moved(produce, "kelp_produce_seconds_count", &durable)
    );
    assert_eq!(
        moved("kelp_produce_errors", "kelp_produce_errors_total", &[]),
        0.0
    );
    assert!(moved("kelp_fetch_seconds", "kelp_fetch_seconds_count", &[]) >= 2.0);
    // The durable records are in the filer: at least one chunk, holding
    // at least their bytes.
    assert!(moved("kelp_flushes", "kelp_flushes_total", &[]) >= 1.0);
    let flushed = moved("kelp_flushed_bytes", "kelp_flushed_bytes_total", &[]);
    let quic_bytes = moved("kelp_bytes_in", "kelp_bytes_in_total", &quic);
    assert!(flushed >= quic_bytes, "{flushed} < {quic_bytes}");
    assert!(moved("kelp_flush_seconds", "kelp_flush_seconds_count", &[]) >= 1.0);
    assert!(
        moved(
            "kelp_filer_request_seconds",
            "kelp_filer_request_seconds_count",
            &[("lane", "upload")]
        ) >= 1.0
    );
    // The topic's two open segments hold every record.
    let topic = [("topic", "m/counted")];
    let segments = "kelp_segment_appended_records";
    assert_eq!(
        sum(
            &after,
            segments,
            "kelp_segment_appended_records_total",
            &topic
        ),
        1_500.0
    );
    assert_eq!(
        sum(
            &after,
            "kelp_segment_next_offset",
            "kelp_segment_next_offset",
            &topic
        ),
        1_500.0
    );
    assert_eq!(
        sum(
            &after,
            "kelp_segment_lost_records",
            "kelp_segment_lost_records",
            &topic
        ),
        0.0
    );
    broker.stop();
}

#[test]
fn connections_are_counted_and_refusals_named() {
    let dir = tempfile::tempdir().unwrap();
    let http = http_port();
    let port = port();
    let listen = format!("127.0.0.1:{http}");
    let kafka_port = support::port();
    let kafka = format!("127.0.0.1:{kafka_port}");
    let extra = [
        "--http",
        &listen,
        "--connections-per-ip-max",
        "2",
        "--kafka",
        &kafka,
    ];
    let _broker = Broker::start_with(dir.path(), port, &extra);
    // The Kafka port counts its own connections.
    let kafka_held = TcpStream::connect(("127.0.0.1", kafka_port)).unwrap();
    scrape_until(http, "the Kafka connection counted", |page| {
        sum(
            page,
            "kelp_kafka_connections",
            "kelp_kafka_connections",
            &[],
        ) == 1.0
    });
    drop(kafka_held);
    scrape_until(http, "the Kafka connection gone", |page| {
        sum(
            page,
            "kelp_kafka_connections",
            "kelp_kafka_connections",
            &[],
        ) == 0.0
    });
    // Two connections from 127.0.0.2 to shard 0 are held; the third is
    // refused for its address's limit.
    let held: Vec<TcpStream> = (0..2).map(|_| connect_from("127.0.0.2", port)).collect();
    let mut refused = connect_from("127.0.0.2", port);
    refused
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert!(
        test_support::read_frame(&mut refused).is_some(),
        "the third connection gets its Busy answer"
    );
    let shard0_tcp = [("shard", "0"), ("transport", "tcp")];
    let address_limit = [
        ("shard", "0"),
        ("transport", "tcp"),
        ("reason", "address_limit"),
    ];
    scrape_until(http, "two connections counted, one refusal", |page| {
        sum(page, "kelp_connections", "kelp_connections", &shard0_tcp) == 2.0
            && sum(
                page,
                "kelp_connections_refused",
                "kelp_connections_refused_total",
                &address_limit,
            ) == 1.0
    });
    drop(held);
    scrape_until(http, "the connections gone", |page| {
        sum(page, "kelp_connections", "kelp_connections", &shard0_tcp) == 0.0
    });
}

#[test]
fn a_control_plane_publishes_its_brokers_segments_and_actions() {
    let dir = tempfile::tempdir().unwrap();
    let http = http_port();
    let listen = format!("127.0.0.1:{http}");
    let control = ControlPlane::start(
        &dir.path().join("control"),
        port(),
        &["--http", &listen, "--tick-ms", "100"],
    );
    assert_eq!(get(http, "GET", "/health").0, 200);
    let broker = Broker::start_with(
        &dir.path().join("broker"),
        port(),
        &["--control", &control.address(), "--unpinned"],
    );
    assert_eq!(get(http, "GET", "/ready"), (200, "ready\n".into()));
    let created = broker.cli(&["topic", "create", "m/split", "--segments", "2"]);
    assert!(created.status.success(), "{created:?}");
    let split = broker.cli(&["topic", "split", "m/split", "0"]);
    assert!(split.status.success(), "{split:?}");
    let action = |page: &Value, kind: &str| {
        sum(
            page,
            "kelp_control_actions",
            "kelp_control_actions_total",
            &[("action", kind)],
        )
    };
    let page = scrape_until(http, "the topic and its split published", |page| {
        action(page, "split") == 1.0
    });
    assert_eq!(
        family(&page, "kelp_control_leader", "gauge")["samples"][0]["value"],
        1.0
    );
    assert_eq!(
        sum(&page, "kelp_control_brokers", "kelp_control_brokers", &[]),
        1.0
    );
    assert_eq!(
        sum(&page, "kelp_control_topics", "kelp_control_topics", &[]),
        1.0
    );
    let state = |s: &str| {
        sum(
            &page,
            "kelp_control_segments",
            "kelp_control_segments",
            &[("state", s)],
        )
    };
    // Segment 0 split in two: three open, one sealed.
    assert_eq!((state("open"), state("sealed")), (3.0, 1.0));
    assert_eq!(action(&page, "create_topic"), 1.0);
    assert_eq!(action(&page, "merge"), 0.0);
    // A counter, there from the start (kelp/tests/control_store_stall.rs
    // sees it count).
    let stalled = family(&page, "kelp_control_stalled_ms", "counter");
    assert!(
        stalled["samples"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "kelp_control_stalled_ms_total"),
        "{stalled}"
    );
    broker.stop();
    control.stop();
}

/// An idempotent producer's resends that the segment already held are
/// counted as found, and not as records in.
#[test]
fn resends_found_are_counted_and_not_stored() {
    use test_support::{decode, TestConn};
    use wire::{AckMode, BatchBuilder, DataRequest, Response};

    let dir = tempfile::tempdir().unwrap();
    let http = http_port();
    let listen = format!("127.0.0.1:{http}");
    let port = port();
    let broker = Broker::start_with(dir.path(), port, &["--http", &listen]);
    let mut conn = TestConn::open(port);
    let Response::Topic(info) = decode(&conn.create_topic("m/idem", 1)) else {
        panic!("no topic")
    };
    let mut conn = TestConn::open(port + info.segments[0].shard);
    let Response::Producer { producer_id, .. } = decode(&conn.call(DataRequest::InitProducer))
    else {
        panic!("no producer id")
    };
    let mut b = BatchBuilder::new();
    for key in ["a", "b", "c"] {
        b.push(1_700_000_000_000, key.as_bytes(), b"v", &[])
            .unwrap();
    }
    let batch = b.finish(producer_id, 0).to_vec();
    for _ in 0..3 {
        let answer = conn.produce("m/idem", AckMode::Leader, &batch);
        assert!(
            matches!(decode(&answer), Response::Produced { base_offset: 0, .. }),
            "{:?}",
            decode(&answer)
        );
    }
    let page = scrape(http);
    family(&page, "kelp_produce_resends_found", "counter");
    assert_eq!(
        sum(
            &page,
            "kelp_produce_resends_found",
            "kelp_produce_resends_found_total",
            &[]
        ),
        2.0
    );
    assert_eq!(
        sum(&page, "kelp_records_in", "kelp_records_in_total", &[]),
        3.0,
        "the batch's records counted once"
    );
    drop(conn);
    broker.stop();
}
