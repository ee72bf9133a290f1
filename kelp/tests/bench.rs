//! `kelp bench` as a user runs it: each scenario, tiny, against the broker
//! child it starts itself; the JSON report must carry every key with
//! positive figures and exactly the records asked for, and the text one
//! unit system (MB/s, MB, every latency in ms).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn kelp_bin() -> PathBuf {
    std::env::var_os("KELP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kelp")))
}

/// Large enough that the broker's CPU time (counted in 10 ms ticks) is
/// never zero, small enough for a fraction of a second.
const RECORDS: u64 = 50_000;
const COMMON: &[&str] = &[
    "--count",
    "50000",
    "--record-bytes",
    "1000",
    "--batch-records",
    "500",
];

fn bench(dir: &Path, name: &str, args: &[&str]) -> Value {
    bench_with_text(dir, name, args).0
}

/// Runs `kelp bench`; its JSON report and its stdout.
fn bench_with_text(dir: &Path, name: &str, args: &[&str]) -> (Value, String) {
    bench_with_env(dir, name, args, &[])
}

/// [`bench_with_text`] with `env` added to the bench's environment (the
/// broker it starts inherits it).
fn bench_with_env(
    dir: &Path,
    name: &str,
    args: &[&str],
    env: &[(&str, String)],
) -> (Value, String) {
    let json = dir.join(format!("{name}.json"));
    let output = Command::new(kelp_bin())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .arg("bench")
        .args(args)
        .args(COMMON)
        .arg("--data-dir")
        .arg(dir)
        .arg("--json")
        .arg(&json)
        .arg("--timeout-s")
        .arg("120")
        .output()
        .expect("run kelp bench");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kelp bench {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("MB/s"), "no summary printed: {stdout}");
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).expect("read the JSON report"))
        .expect("the JSON report parses");
    let latencies = assert_one_unit_system(&stdout);
    if doc["latency_samples"].as_f64().unwrap_or(0.0) > 0.0 {
        assert!(latencies > 0, "no latency figure printed: {stdout}");
    }
    (doc, stdout)
}

/// The latency figures a summary prints: `p50=0.512ms`, ..., `max=...`.
const LATENCY_NAMES: &[&str] = &["p50", "p90", "p99", "p99.9", "max"];

/// No binary units, only MB/s for throughput, and every latency figure a
/// number of milliseconds (in the single-run lines and in the `--repeat`
/// table's labels); how many latency figures there were.
fn assert_one_unit_system(stdout: &str) -> usize {
    assert!(!stdout.contains("iB"), "binary units in: {stdout}");
    let mut latencies = 0;
    for line in stdout.lines() {
        for word in line.split([' ', ',', '(', ')']) {
            if !word.ends_with("/s") || word.is_empty() {
                continue;
            }
            assert!(
                ["MB/s", "records/s"].contains(&word),
                "throughput in {word}: {line}"
            );
        }
        for (name, value) in line
            .split([' ', ','])
            .filter_map(|w| w.split_once('='))
            .filter(|(name, _)| LATENCY_NAMES.contains(name))
        {
            let number = value.strip_suffix("ms");
            assert!(
                number.is_some_and(|n| n.parse::<f64>().is_ok()),
                "{name}={value} is not in ms: {line}"
            );
            latencies += 1;
        }
        if let Some(label) = line.trim_start().strip_prefix("latency p") {
            assert!(label.contains(" ms "), "latency row not in ms: {line}");
            latencies += 1;
        }
    }
    latencies
}

fn positive(doc: &Value, key: &str) -> f64 {
    let v = doc[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {doc}"));
    assert!(v > 0.0, "{key} = {v}, want > 0");
    v
}

fn check(doc: &Value, scenario: &str, transport: &str) {
    assert_eq!(doc["scenario"], scenario);
    assert_eq!(doc["transport"], transport);
    assert_eq!(doc["records"].as_u64(), Some(RECORDS), "{doc}");
    assert_eq!(doc["payload_bytes"].as_u64(), Some(RECORDS * 1000));
    positive(doc, "throughput_mb_s");
    let records_per_s = positive(doc, "records_per_s");
    let mb_s = positive(doc, "throughput_mb_s");
    // 1000-byte values: records/s and MB/s are the same figure.
    assert!((records_per_s / 1e3 - mb_s).abs() < 1e-6 * mb_s.max(1.0));
    positive(doc, "broker_cpu_s_per_gb");
    positive(doc, "broker_peak_rss_mb");
    let latency = &doc["latency_us"];
    let mut last = 0.0;
    for p in ["p50", "p90", "p99", "p999", "max"] {
        let v = latency[p]
            .as_f64()
            .unwrap_or_else(|| panic!("latency_us.{p} missing in {doc}"));
        assert!(v > 0.0 && v >= last, "latency_us.{p} = {v} after {last}");
        last = v;
    }
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn produce_over_tcp() {
    let dir = temp();
    let doc = bench(dir.path(), "produce", &["produce"]);
    check(&doc, "produce", "tcp");
    assert_eq!(doc["ack"], "leader");
    assert!(doc.get("baseline_mb_s").is_none());
}

#[test]
fn produce_over_quic_with_baselines() {
    let dir = temp();
    let doc = bench(
        dir.path(),
        "produce-quic",
        &["produce", "--transport", "quic", "--baseline"],
    );
    check(&doc, "produce", "quic");
    assert_eq!(doc["baseline"], "raw_quinn");
    let baseline = positive(&doc, "baseline_mb_s");
    let ratio = positive(&doc, "ratio_to_baseline");
    assert!((ratio * baseline - doc["throughput_mb_s"].as_f64().unwrap()).abs() < 1e-6 * baseline);
    for limit in ["raw_tcp", "raw_quinn", "file_write", "file_write_fdatasync"] {
        positive(&doc["baselines"][limit], "mb_s");
    }
}

#[test]
fn consume_from_buffers_and_from_chunks() {
    let dir = temp();
    for from in ["buffers", "chunks"] {
        let doc = bench(
            dir.path(),
            &format!("consume-{from}"),
            &[
                "consume",
                "--from",
                from,
                "--segments",
                "2",
                "--consumers",
                "2",
            ],
        );
        check(&doc, "consume", "tcp");
        assert_eq!(doc["consume_from"], from);
    }
}

#[test]
fn end_to_end_at_a_fixed_rate() {
    let dir = temp();
    let doc = bench(
        dir.path(),
        "end-to-end",
        &["end-to-end", "--rate", "200000", "--segments", "2"],
    );
    check(&doc, "end-to-end", "tcp");
    assert_eq!(doc["latency_kind"], "publish to delivery, per record");
    assert_eq!(doc["rate_records_per_s"].as_f64(), Some(200_000.0));
}

#[test]
fn backfill_is_durable_by_default() {
    let dir = temp();
    let doc = bench(dir.path(), "backfill", &["backfill", "--baseline"]);
    check(&doc, "backfill", "tcp");
    assert_eq!(doc["ack"], "durable");
    assert_eq!(doc["baseline"], "file_write_fdatasync");
    positive(&doc, "ratio_to_baseline");
}

/// With `--filer s3://...` the broker stores in a real S3-compatible
/// server (moto on 127.0.0.1), and a durable figure is compared with that
/// server's own PUT throughput, measured in the same run.
#[test]
fn backfill_and_durable_produce_on_s3_are_compared_with_s3_put() {
    let server = test_support::S3Server::start();
    let dir = temp();
    for (name, scenario) in [("s3-backfill", "backfill"), ("s3-durable", "produce")] {
        let filer = server.url(name);
        let (doc, stdout) = bench_with_env(
            dir.path(),
            name,
            &[
                scenario,
                "--ack",
                "durable",
                "--filer",
                &filer,
                "--buffer-mib",
                "1",
                "--baseline",
            ],
            &server.env(),
        );
        check(&doc, scenario, "tcp");
        assert_eq!(doc["baseline"], "s3_put", "{stdout}");
        positive(&doc["baselines"]["s3_put"], "mb_s");
        positive(&doc, "ratio_to_baseline");
        assert!(
            stdout.contains("S3 PUT") || stdout.contains("s3_put"),
            "{stdout}"
        );
        // The chunks went to the bucket, under the run's prefix, and the
        // baseline's objects were cleaned up.
        let keys = server.keys(&format!("{name}/"));
        assert!(keys.iter().any(|k| k.ends_with(".chunk")), "{keys:?}");
        assert!(
            !keys.iter().any(|k| k.contains("kelp-bench-put-")),
            "{keys:?}"
        );
    }
}

#[test]
fn repeat_prints_every_run_and_the_spread() {
    let dir = temp();
    let plot = dir.path().join("repeat.png");
    let plot_arg = plot.to_str().unwrap();
    let (doc, stdout) = bench_with_text(
        dir.path(),
        "repeat",
        &["produce", "--repeat", "2", "--baseline", "--plot", plot_arg],
    );
    assert!(std::fs::metadata(&plot).unwrap().len() > 0, "empty plot");
    for run in ["run 1/2: ", "run 2/2: "] {
        let line = stdout.lines().find(|l| l.starts_with(run));
        let line = line.unwrap_or_else(|| panic!("no {run:?} line in {stdout}"));
        assert!(line.contains("MB/s") && line.contains("p99.9="), "{line}");
    }
    let header = stdout.lines().find(|l| l.contains("median"));
    let header: Vec<&str> = header
        .expect("a median/min/max header")
        .split_whitespace()
        .collect();
    assert_eq!(header, ["figure", "median", "min", "max"], "{stdout}");
    let row = |label: &str| -> [f64; 3] {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no {label:?} row in {stdout}"));
        let numbers: Vec<f64> = line[line.find(label).unwrap() + label.len()..]
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        numbers
            .try_into()
            .unwrap_or_else(|n| panic!("{label}: {n:?}"))
    };
    for label in [
        "throughput MB/s",
        "records/s",
        "latency p50 ms",
        "latency p99 ms",
        "latency p99.9 ms",
        "broker CPU s/GB",
        "broker peak RSS MB",
        "raw_tcp MB/s",
        "kelp / raw_tcp",
    ] {
        let [median, min, max] = row(label);
        assert!(
            min <= median && median <= max,
            "{label}: {median} {min} {max}"
        );
    }

    assert_eq!(doc["repeat"].as_u64(), Some(2));
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    for run in runs {
        check(run, "produce", "tcp");
        let ratio = positive(run, "ratio_to_baseline");
        let baseline = positive(run, "baseline_mb_s");
        // Each run's ratio is to the baseline measured in that run.
        assert!((ratio * baseline - positive(run, "throughput_mb_s")).abs() < 1e-6 * baseline);
    }
    let summary = &doc["summary"];
    for key in [
        "throughput_mb_s",
        "records_per_s",
        "broker_cpu_s_per_gb",
        "broker_peak_rss_mb",
        "baseline_mb_s",
        "ratio_to_baseline",
    ] {
        let values: Vec<f64> = runs.iter().map(|r| r[key].as_f64().unwrap()).collect();
        let spread = &summary[key];
        let (min, max) = (values[0].min(values[1]), values[0].max(values[1]));
        assert_eq!(spread["min"].as_f64(), Some(min), "{key}: {spread}");
        assert_eq!(spread["max"].as_f64(), Some(max), "{key}: {spread}");
        let median = spread["median"].as_f64().unwrap();
        assert!(
            (median - (min + max) / 2.0).abs() <= 1e-9 * max,
            "{key}: {spread}"
        );
        // The usual key holds the median.
        assert_eq!(doc[key].as_f64(), Some(median), "{key}");
    }
    for p in ["p50", "p99", "p999"] {
        assert!(summary["latency_us"][p]["median"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(doc["records"].as_f64(), Some(RECORDS as f64));
    assert!(doc.get("throughput_over_time_mb_s").is_none());
}

#[test]
fn refuses_repeat_out_of_bounds() {
    for repeat in ["0", "21"] {
        let output = Command::new(kelp_bin())
            .args(["bench", "produce", "--repeat", repeat])
            .output()
            .unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("--repeat") && stderr.contains("1..=20"),
            "{stderr}"
        );
    }
}

/// Arguments that do not fit each other or the host are refused, naming
/// what is wrong, before a broker starts.
#[test]
fn refuses_arguments_that_cannot_run() {
    let cases: [(&[&str], &str); 2] = [
        (
            &["consume", "--consumers", "2", "--segments", "1"],
            "--consumers 2",
        ),
        (
            &["produce", "--load-cpus", "0,4096"],
            "CPU 4096 is not one of this host's",
        ),
    ];
    for (args, expected) in cases {
        let output = Command::new(kelp_bin())
            .arg("bench")
            .args(args)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("broker pid"), "{args:?} started a broker");
    }
}

/// A running broker (`kelp serve`), killed on drop.
struct ServedBroker(std::process::Child);

impl Drop for ServedBroker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn against_a_running_broker_measures_and_leaves_no_topic() {
    let dir = temp();
    // Below the ephemeral range and away from the other tests' ports.
    let port = (0..200)
        .map(|i| 15_000 + (std::process::id() as u16 % 500) * 4 + i * 8)
        .find(|&p| {
            (p..p + 2).all(|q| {
                std::net::TcpListener::bind(("127.0.0.1", q)).is_ok()
                    && std::net::UdpSocket::bind(("127.0.0.1", q)).is_ok()
            })
        })
        .expect("a free port");
    let addr = format!("127.0.0.1:{port}");
    let _broker = ServedBroker(
        Command::new(kelp_bin())
            .args(["serve", "--shards", "2", "--listen", &addr, "--data-dir"])
            .arg(dir.path().join("served"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let list = || {
        Command::new(kelp_bin())
            .args(["topic", "list", "--broker", &addr])
            .output()
            .unwrap()
    };
    let start = std::time::Instant::now();
    while !list().status.success() {
        assert!(start.elapsed().as_secs() < 60, "the broker did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let doc = bench(
        dir.path(),
        "external",
        &["produce", "--broker", &addr, "--segments", "4"],
    );
    assert_eq!(doc["records"].as_u64(), Some(RECORDS));
    assert_eq!(doc["shards"].as_u64(), Some(2));
    positive(&doc, "throughput_mb_s");
    assert!(doc["broker_cpu_s_per_gb"].is_null());
    assert!(doc["broker_peak_rss_mb"].is_null());
    let topics = list();
    assert!(topics.status.success());
    assert!(
        topics.stdout.is_empty(),
        "left behind: {}",
        String::from_utf8_lossy(&topics.stdout)
    );
}
