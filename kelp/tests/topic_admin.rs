//! The topic admin commands of the real `kelp` binary against one broker
//! without a control plane: describe's columns, and the cluster commands
//! (split, merge, move, policy, cluster) refused with a clear error that
//! names `--control`. Against a cluster they are exercised by the
//! cluster integration test.
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
        // Open, on no particular broker, created at some time (UTC), not
        // sealed, no successors.
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(fields[3], "open", "{text}");
        assert_eq!(fields[4], "-", "{text}");
        assert!(fields.iter().any(|f| f.ends_with('Z')), "{text}");
        assert_eq!(*fields.last().unwrap(), "-", "{text}");
    }

    for args in [
        &["topic", "split", "admin/t", "0", "--pieces", "2"][..],
        &["topic", "merge", "admin/t", "0", "1"],
        &["topic", "move", "admin/t", "0", "--to", "1"],
        &["topic", "policy", "admin/t", "--target-bytes-per-s", "1000"],
        &["cluster"],
    ] {
        let out = broker.cli(args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--control"), "{args:?}: {stderr}");
    }
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
