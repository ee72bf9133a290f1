//! A control plane whose store hangs must not take its own stall for the
//! brokers' silence. One `kelp control` and two `kelp serve --control`
//! brokers (127.0.0.2 and .3 standing for two hosts) share a real
//! S3-compatible server, the control plane with a 2 s silence limit. The
//! server is frozen (SIGSTOP: requests hang) while a topic is created, so
//! the control plane's driver waits on the store for several silence
//! periods and hears nothing the brokers send meanwhile. Once the store
//! answers, no broker may be declared dead: every segment keeps its owner
//! and epoch, none is sealed, and neither broker is told to register
//! again. The stall is counted (`kelp_control_stalled_ms`) and logged.
//! The same holds for a control plane whose process is frozen (SIGSTOP)
//! for as long and then resumed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{port, signal, Broker, ControlPlane};
use test_support::S3Server;

const SILENCE_MS: &str = "2000";
/// How long the store hangs: three silence periods.
const STALL: Duration = Duration::from_secs(6);
/// Ticks after the stall, in which a wrongly counted silence would show.
const AFTER: Duration = Duration::from_secs(4);
const TOPIC: &str = "stall/kept";

fn start_broker(
    host: &'static str,
    dir: &Path,
    control: &ControlPlane,
    env: &[(&str, String)],
) -> Broker {
    Broker::start_on_logged(
        host,
        &dir.join(host),
        port(),
        &["--control", &control.address(), "--unpinned"],
        env,
        &dir.join(format!("{host}.log")),
    )
}

/// Each segment of `topic` as `(id, state, owner, epoch)`.
fn segments(broker: &Broker, topic: &str) -> Vec<(u64, String, u64, u64)> {
    let out = broker.cli(&["topic", "describe", topic, "--output", "json"]);
    assert!(
        out.status.success(),
        "describe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    info["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_u64().unwrap(),
                s["state"].as_str().unwrap().to_owned(),
                s["broker"].as_u64().unwrap_or(u64::MAX),
                s["epoch"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `kelp_control_stalled_ms_total` on the control plane's metrics page
/// (its format is checked with Prometheus' parser in
/// `kelp/tests/metrics.rs`).
fn stalled_ms(http: u16) -> u64 {
    let (status, page) = support::http_get(http, "GET", "/metrics");
    assert_eq!(status, 200, "{page}");
    page.lines()
        .find_map(|l| l.strip_prefix("kelp_control_stalled_ms_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no kelp_control_stalled_ms_total in {page}"))
}

/// A control plane on S3 (silence limit 2 s, `--http` on `http`) and two
/// brokers, with a topic of two segments and two replicas.
struct Cluster {
    server: S3Server,
    dir: tempfile::TempDir,
    control_log: std::path::PathBuf,
    http: u16,
    control: ControlPlane,
    brokers: [Broker; 2],
    before: Vec<(u64, String, u64, u64)>,
}

impl Cluster {
    fn start() -> Cluster {
        let server = S3Server::start();
        let env = server.env();
        let dir = tempfile::tempdir().unwrap();
        let control_log = dir.path().join("control.log");
        let http = port();
        let control = ControlPlane::start_logged_with_env(
            &dir.path().join("control"),
            port(),
            &[
                "--broker-silence-ms",
                SILENCE_MS,
                "--filer",
                &server.url("stall"),
                "--http",
                &format!("127.0.0.1:{http}"),
            ],
            &env,
            &control_log,
        );
        let brokers = [
            start_broker("127.0.0.2", dir.path(), &control, &env),
            start_broker("127.0.0.3", dir.path(), &control, &env),
        ];
        let created = brokers[0].cli(&[
            "topic",
            "create",
            TOPIC,
            "--segments",
            "2",
            "--replicas",
            "2",
        ]);
        assert!(
            created.status.success(),
            "create failed: {}",
            String::from_utf8_lossy(&created.stderr)
        );
        let before = segments(&brokers[0], TOPIC);
        assert!(before.iter().all(|s| s.1 == "open"), "{before:?}");
        Cluster {
            server,
            dir,
            control_log,
            http,
            control,
            brokers,
            before,
        }
    }

    /// After a few ticks more: the stall was counted and logged, every
    /// segment kept its owner and epoch, and no broker was declared dead.
    fn check_nobody_was_declared_dead(self) {
        std::thread::sleep(AFTER);
        let control_said = std::fs::read_to_string(&self.control_log).unwrap();
        let after = segments(&self.brokers[0], TOPIC);
        assert_eq!(
            after, self.before,
            "segments moved or were sealed after the control plane's own stall:\n{control_said}"
        );
        let stalled_ms = stalled_ms(self.http);
        assert!(
            stalled_ms >= (STALL.as_millis() as u64) / 2,
            "kelp_control_stalled_ms counted {stalled_ms} ms:\n{control_said}"
        );
        assert!(
            control_said.contains("the control plane was stalled for"),
            "no stall logged:\n{control_said}"
        );
        for (i, broker) in self.brokers.iter().enumerate() {
            let log = self.dir.path().join(format!("{}.log", broker.host));
            let said = std::fs::read_to_string(log).unwrap();
            assert!(
                !said.contains("does not know this broker"),
                "broker {i} was declared dead:\n{said}"
            );
        }
        drop(self.brokers);
        drop(self.control);
        drop(self.server);
    }
}

#[test]
fn a_control_plane_stalled_by_a_hung_store_declares_no_broker_dead() {
    let cluster = Cluster::start();
    signal("STOP", cluster.server.pid());
    let started = Instant::now();
    // The control plane persists the new topic in the hung store: its
    // driver waits there until the store answers.
    let address = cluster.brokers[1].broker_arg();
    let creating = std::thread::spawn(move || {
        std::process::Command::new(support::kelp_bin())
            .args(["topic", "create", "stall/during", "--broker", &address])
            .output()
            .expect("run kelp")
    });
    std::thread::sleep(STALL);
    signal("CONT", cluster.server.pid());
    let during = creating.join().unwrap();
    println!(
        "create during the stall: {} after {:?}",
        during.status,
        started.elapsed()
    );
    cluster.check_nobody_was_declared_dead();
}

/// The control plane's process frozen (SIGSTOP) for three silence periods,
/// then resumed: it did not hear the brokers because it did not run.
#[test]
fn a_control_plane_frozen_and_resumed_declares_no_broker_dead() {
    let cluster = Cluster::start();
    let pid = cluster.control.child.id();
    signal("STOP", pid);
    std::thread::sleep(STALL);
    signal("CONT", pid);
    cluster.check_nobody_was_declared_dead();
}
