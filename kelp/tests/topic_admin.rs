//! The topic admin commands of the real `kelp` binary against one broker
//! that runs the control plane in-process: describe's columns, and the
//! cluster commands (split, merge, move, policy, cluster) on a cluster of
//! one. Against a cluster they are exercised by the cluster integration
//! test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{port, Broker};

#[test]
fn describe_columns_and_cluster_commands_on_a_lone_broker() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), port());
    assert!(broker
        .cli(&["topic", "create", "admin/t", "--segments", "2"])
        .status
        .success());
    let out = broker.cli(&["topic", "describe", "admin/t", "--output", "wide"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "topic admin/t");
    for column in [
        "SEGMENT",
        "RANGE",
        "STATE",
        "BROKER",
        "SHARD",
        "ADDRESS",
        "BYTES/S",
        "RECORDS/S",
        "CREATED",
        "SEALED",
        "SUCCESSORS",
    ] {
        assert!(lines[1].contains(column), "{text}");
    }
    assert_eq!(lines.len(), 4, "{text}");
    for row in &lines[2..] {
        // Open, on the lone broker (id 0), created at some time (UTC), not
        // sealed, no successors.
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(fields[3], "open", "{text}");
        assert_eq!(fields[4], "0", "{text}");
        assert!(fields.iter().any(|f| f.ends_with('Z')), "{text}");
        assert_eq!(*fields.last().unwrap(), "-", "{text}");
    }

    // The cluster commands work on a lone broker, a cluster of one.
    let ok = |args: &[&str]| {
        let out = broker.cli(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let split = ok(&["topic", "split", "admin/t", "0", "--pieces", "2"]);
    assert!(split.contains("sealed"), "{split}");
    let moved = ok(&["topic", "move", "admin/t", "2"]);
    assert!(moved.contains("sealed"), "{moved}");
    let merged = ok(&["topic", "merge", "admin/t", "1", "3"]);
    assert!(
        merged
            .lines()
            .any(|l| l.contains("40000000-100000000") && l.contains(" open ")),
        "one open segment over segments 1 and 3: {merged}"
    );
    ok(&["topic", "policy", "admin/t", "--target-bytes-per-s", "1000"]);
    let cluster = ok(&["cluster"]);
    assert_eq!(cluster.lines().count(), 2, "one broker: {cluster}");
    // A move to a broker that is not there is refused, saying so.
    let out = broker.cli(&["topic", "move", "admin/t", "4", "--to", "9"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("broker b9 is not registered"), "{stderr}");

    // A policy that cannot be valid is refused before it is sent.
    let out = broker.cli(&[
        "topic",
        "policy",
        "admin/t",
        "--segments-min",
        "3",
        "--segments-max",
        "2",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid scaling policy"));
    broker.stop();
}
