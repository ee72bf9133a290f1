//! The `kelp` command line as a user meets it, with real processes: output
//! formats (`--output json|wide`, `sub --format`), where `sub` starts
//! (`--from -N`, `--segment`), headers on `pub`, `KELP_BROKER`, a `sub`
//! that reconnects when its broker comes back, help that lists only the
//! options a command uses, and errors that read as one plain sentence.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{kelp_bin, port, Broker, ControlPlane};

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

/// `kelp pub` with `lines` on stdin and `extra` arguments.
fn publish(broker: &Broker, topic: &str, lines: &str, extra: &[&str]) -> String {
    let out = broker.cli_with_stdin(&[&["pub", topic], extra].concat(), lines.as_bytes());
    assert!(out.status.success(), "pub failed: {}", stderr(&out));
    stdout(&out)
}

/// An error line as the user sees it: one line, `kelp: ...`, with no Rust
/// debug struct in it and no cause said twice.
fn assert_plain_error(out: &Output, says: &str) {
    assert!(!out.status.success(), "expected a failure");
    let text = stderr(out);
    assert!(text.contains(says), "wanted {says:?} in: {text}");
    let first = text.lines().next().unwrap_or("");
    for debug in ["Error {", " { code:", "message:", "Some(", "Os {"] {
        assert!(!text.contains(debug), "a debug struct in: {text}");
    }
    // No clause of the line is repeated (a doubled OS error).
    let clauses: Vec<&str> = first.split(": ").collect();
    for (i, c) in clauses.iter().enumerate() {
        assert!(
            !clauses[i + 1..].contains(c),
            "{c:?} said twice in: {first}"
        );
    }
}

#[test]
fn output_formats_start_positions_and_headers() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), port());
    let topic = "cli/fmt";
    assert!(broker
        .cli(&["topic", "create", topic, "--segments", "2"])
        .status
        .success());
    let lines: String = (0..40).map(|i| format!("key{i}\tvalue{i}\n")).collect();
    let said = publish(
        &broker,
        topic,
        &lines,
        &["-H", "trace=abc", "--header", "n=1"],
    );
    assert!(said.contains("acknowledged 40 records"), "{said}");

    // JSON describe: every segment with its fields; offsets add up.
    let out = broker.cli(&["topic", "describe", topic, "--output", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(doc["name"], topic);
    let segments = doc["segments"].as_array().unwrap();
    assert_eq!(segments.len(), 2);
    let total: u64 = segments
        .iter()
        .map(|s| s["next_offset"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 40);
    for s in segments {
        assert_eq!(s["state"], "open");
        assert!(s["successors"].as_array().unwrap().is_empty());
        for field in ["id", "range_start", "range_end", "shard", "created_ms"] {
            assert!(s[field].is_u64(), "{field} in {s}");
        }
    }
    let next_offsets: Vec<(u64, u64)> = segments
        .iter()
        .map(|s| {
            (
                s["id"].as_u64().unwrap(),
                s["next_offset"].as_u64().unwrap(),
            )
        })
        .collect();

    // JSON list.
    let out = broker.cli(&["topic", "list", "-o", "json"]);
    let names: Vec<String> = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(names, vec![topic.to_owned()]);

    // The default table is narrower than the wide one, which has every
    // column.
    let narrow = stdout(&broker.cli(&["topic", "describe", topic]));
    let wide = stdout(&broker.cli(&["topic", "describe", topic, "-o", "wide"]));
    let width = |t: &str| t.lines().map(str::len).max().unwrap();
    assert!(width(&narrow) < width(&wide), "{narrow}\n{wide}");
    assert!(width(&narrow) <= 140, "{narrow}");
    for column in ["EPOCH", "APPENDED BYTES", "FIRST WRITE", "SEALED"] {
        assert!(wide.lines().nth(1).unwrap().contains(column), "{wide}");
        assert!(!narrow.lines().nth(1).unwrap().contains(column), "{narrow}");
    }

    // kcat-like fields, headers included; every record once.
    let text = broker.sub_earliest(topic, 40, "%t|%p|%o|%T|%k|%s|%h|%K|%S|100%%\\n");
    let mut seen = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('|').collect();
        assert_eq!(f.len(), 10, "{line}");
        assert_eq!(f[0], topic);
        let segment: u64 = f[1].parse().unwrap();
        let offset: u64 = f[2].parse().unwrap();
        assert!(f[3].parse::<i64>().unwrap() > 1_600_000_000_000, "{line}");
        assert!(f[4].starts_with("key"));
        assert_eq!(f[6], "trace=abc,n=1", "{line}");
        assert_eq!(f[7], f[4].len().to_string());
        assert_eq!(f[8], f[5].len().to_string());
        assert_eq!(f[9], "100%");
        seen.push((segment, offset, f[5].to_owned()));
    }
    assert_eq!(seen.len(), 40, "{text}");
    let mut values: Vec<&str> = seen.iter().map(|s| s.2.as_str()).collect();
    values.sort();
    values.dedup();
    assert_eq!(values.len(), 40);

    // --from -N: the last N of each open segment.
    let out = broker.cli(&[
        "sub", topic, "--from", "-3", "--count", "6", "--format", "%p %o\\n",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut got: Vec<(u64, u64)> = stdout(&out)
        .lines()
        .map(|l| {
            let (p, o) = l.split_once(' ').unwrap();
            (p.parse().unwrap(), o.parse().unwrap())
        })
        .collect();
    got.sort();
    assert!(
        next_offsets.iter().all(|&(_, next)| next >= 3),
        "{next_offsets:?}"
    );
    let mut want: Vec<(u64, u64)> = next_offsets
        .iter()
        .flat_map(|&(id, next)| (next - 3..next).map(move |o| (id, o)))
        .collect();
    want.sort();
    assert_eq!(got, want);

    // --segment: that segment only.
    let (only, only_next) = next_offsets[1];
    let out = broker.cli(&[
        "sub",
        topic,
        "--from",
        "earliest",
        "--segment",
        &only.to_string(),
        "--count",
        &only_next.to_string(),
        "--format",
        "%p\\n",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let segments_read: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    assert_eq!(segments_read.len() as u64, only_next);
    assert!(segments_read.iter().all(|p| *p == only.to_string()));
    let out = broker.cli(&["sub", topic, "--segment", "99", "--count", "1"]);
    assert_plain_error(&out, "has no segment 99");

    // KELP_BROKER stands for --broker.
    let out = Command::new(kelp_bin())
        .args(["topic", "list"])
        .env("KELP_BROKER", broker.broker_arg())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), topic);
    broker.stop();
}

#[test]
fn errors_read_as_one_plain_sentence() {
    // Not HOST:PORT: said so before anything is dialed.
    let out = Command::new(kelp_bin())
        .args(["topic", "list", "--broker", "127.0.0.1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is not HOST:PORT"),
        "{}",
        stderr(&out)
    );
    // The same from the environment.
    let out = Command::new(kelp_bin())
        .args(["topic", "list"])
        .env("KELP_BROKER", "localhost")
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains("is not HOST:PORT"),
        "{}",
        stderr(&out)
    );

    // A missing file: the OS error once.
    let out = Command::new(kelp_bin())
        .args(["chunk", "cat", "/nonexistent/kelp-test.chunk"])
        .output()
        .unwrap();
    assert_plain_error(&out, "No such file or directory");
    assert_eq!(stderr(&out).matches("os error 2").count(), 1);

    // A control plane's address where a broker's belongs.
    let dir = tempfile::tempdir().unwrap();
    let control = ControlPlane::start(dir.path(), port(), &[]);
    let out = Command::new(kelp_bin())
        .args(["topic", "list", "--broker", &control.address()])
        .output()
        .unwrap();
    assert_plain_error(&out, "control plane, not a broker");

    // The broker's refusal, without a debug struct.
    let data = tempfile::tempdir().unwrap();
    let broker = Broker::start(data.path(), port());
    let out = broker.cli(&["topic", "describe", "no/such"]);
    assert_plain_error(&out, "topic no/such does not exist");
    let out = broker.cli(&["topic", "create", "bad"]);
    assert_plain_error(&out, "cannot create topic bad");
    let out = broker.cli(&["sub", "cli/x", "--format", "%q"]);
    assert!(stderr(&out).contains("`%q` in --format is not a field"));
    broker.stop();
    control.stop();
}

#[test]
fn help_lists_only_the_options_a_command_uses() {
    let help = |args: &[&str]| {
        let out = Command::new(kelp_bin())
            .args(args)
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success());
        stdout(&out)
    };
    for command in [
        &["topic", "list"][..],
        &["topic", "describe"],
        &["topic", "create"],
        &["topic", "delete"],
        &["cluster"],
    ] {
        let text = help(command);
        assert!(!text.contains("--payload-dir"), "{command:?}: {text}");
        assert!(text.contains("--broker"), "{command:?}: {text}");
        assert!(text.contains("KELP_BROKER"), "{command:?}: {text}");
    }
    for command in [&["pub"][..], &["sub"]] {
        assert!(help(command).contains("--payload-dir"), "{command:?}");
    }
    for command in [&["topic", "list"][..], &["topic", "describe"], &["cluster"]] {
        assert!(help(command).contains("--output"), "{command:?}");
    }
    let sub = help(&["sub"]);
    for option in ["--format", "--segment", "-N"] {
        assert!(sub.contains(option), "{option}: {sub}");
    }
    assert!(help(&["pub"]).contains("--header"));
}

#[test]
fn sub_reconnects_when_its_broker_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start(dir.path(), port);
    let topic = "cli/tail";
    assert!(broker
        .cli(&["topic", "create", topic, "--segments", "2"])
        .status
        .success());
    publish(&broker, topic, "a\t1\nb\t2\n", &[]);
    let tail = Command::new(kelp_bin())
        .args(["sub", topic, "--from", "earliest", "--count", "4"])
        .args(["--broker", &broker.broker_arg()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The tail has read the first two records before the broker goes:
    // give it until it would have.
    std::thread::sleep(Duration::from_millis(500));
    broker.stop();
    // Down for a while: longer than one fetch's wait.
    std::thread::sleep(Duration::from_secs(2));
    let broker = Broker::start(dir.path(), port);
    publish(&broker, topic, "c\t3\nd\t4\n", &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut tail = tail;
    while tail.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the tail did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = tail.wait_with_output().unwrap();
    assert!(out.status.success(), "sub failed: {}", stderr(&out));
    let mut lines: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    lines.sort();
    assert_eq!(lines, ["a\t1", "b\t2", "c\t3", "d\t4"]);
    broker.stop();
}
