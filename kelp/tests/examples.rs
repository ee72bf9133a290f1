//! The SDK's examples (`client/examples/*.rs`, the ones docs/sdk.md
//! quotes) run for real against a `kelp serve` on loopback, and what they
//! print is checked.
//!
//! Finding the example binaries: an integration test only gets
//! `CARGO_BIN_EXE_*` for its own package's binaries, and cargo builds
//! other packages' examples only when they are selected (`cargo test
//! --workspace` does, `cargo test -p kelp --test examples` does not). So
//! the test asks cargo itself: `$CARGO build --workspace --examples
//! --message-format=json`, in the profile and target directory this test
//! was built in, and runs the executables cargo reports. Cargo holds no
//! lock while tests run, so this works inside `cargo test`. It is
//! `--workspace`, not `-p kelp-client`, because cargo unifies features
//! over the packages and targets selected: after `cargo test --workspace
//! --release` (what CI runs) this build finds every artifact fresh
//! (checked: 98 of 98), where `-p kelp-client` alone resolves fewer
//! features and rebuilds tokio, quinn and the client. A narrower run
//! (`cargo test -p kelp --test examples`) resolves differently too, so
//! there this build recompiles a few crates (ring, rustls, quinn, the
//! client: a minute or two on two cores), and the next narrow run
//! recompiles them back. A failed build fails the test; nothing is
//! skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::{port, Broker};

/// How long one example may run before the test kills it.
const EXAMPLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The examples the test runs; each must be built.
const EXAMPLES: [&str; 3] = ["produce", "subscribe_from_time", "by_reference"];

/// Build every workspace example and return their executables by name.
fn build_examples() -> HashMap<String, PathBuf> {
    // This test is <target dir>/<profile dir>/deps/examples-<hash>.
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let target_dir = profile_dir.parent().unwrap();
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(name) => name,
        None => panic!("cannot tell the profile from {}", exe.display()),
    };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let output = Command::new(env!("CARGO"))
        .args([
            "build",
            "--workspace",
            "--examples",
            "--message-format=json",
        ])
        .args(["--profile", profile])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(workspace)
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo build --examples");
    assert!(
        output.status.success(),
        "cargo build --workspace --examples --profile {profile} failed: {}",
        output.status
    );
    let mut built = HashMap::new();
    for line in String::from_utf8(output.stdout).unwrap().lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_example = message["target"]["kind"]
            .as_array()
            .is_some_and(|kinds| kinds.iter().any(|k| k == "example"));
        if let (true, Some(name), Some(path)) = (
            is_example,
            message["target"]["name"].as_str(),
            message["executable"].as_str(),
        ) {
            built.insert(name.to_owned(), PathBuf::from(path));
        }
    }
    for name in EXAMPLES {
        assert!(
            built.get(name).is_some_and(|p| p.is_file()),
            "cargo built no example {name} (built: {:?})",
            built.keys()
        );
    }
    built
}

/// Run an example against `broker` with `env`; its stdout if it exits 0.
fn run(exe: &Path, broker: &Broker, env: &[(&str, &Path)]) -> String {
    let mut child = Command::new(exe)
        .env("KELP_BROKER", broker.broker_arg())
        .envs(env.iter().map(|(k, v)| (k, v.as_os_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", exe.display()));
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).unwrap();
        out
    });
    let deadline = Instant::now() + EXAMPLE_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} ran over {EXAMPLE_TIMEOUT:?}", exe.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = reader.join().unwrap();
    print!("{}:\n{out}", exe.display());
    assert!(
        status.success(),
        "{} exited with {status}; it printed:\n{out}",
        exe.display()
    );
    out
}

fn assert_prints(out: &str, line: &str) {
    assert!(
        out.lines().any(|l| l == line),
        "expected the line {line:?} in:\n{out}"
    );
}

#[test]
fn examples_run_against_a_real_broker() {
    let examples = build_examples();
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), port());

    let out = run(&examples["produce"], &broker, &[]);
    let shards = format!("connected to {} (2 shards)", broker.broker_arg());
    assert_prints(&out, &shards);
    assert_prints(&out, "ack None: sent 1000 records, all handled");
    assert_prints(&out, "ack Leader: acknowledged 1000 records");
    assert_prints(&out, "ack Durable: acknowledged 1000 records");
    assert_prints(&out, "read back 3000 records from earliest");

    let out = run(&examples["subscribe_from_time"], &broker, &[]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("read 200 records from timestamp ")
                && l.ends_with(", none from before it, in key order")),
        "subscribe_from_time printed:\n{out}"
    );

    let filer = broker.data_dir.join("filer");
    for env in [vec![], vec![("KELP_PAYLOAD_DIR", filer.as_path())]] {
        let out = run(&examples["by_reference"], &broker, &env);
        assert_prints(&out, "published 3 records: 1 inline, 2 by reference");
        assert_prints(&out, "offset 0: 13 bytes inline");
        for (offset, bytes) in [(1, 4 << 20), (2, 100_000)] {
            let resolved = format!("offset {offset}: {bytes} bytes resolved from ref:payloads/");
            assert!(
                out.lines().any(|l| l.starts_with(&resolved)),
                "expected a line starting {resolved:?} in:\n{out}"
            );
        }
        assert_prints(
            &out,
            "offset 1: a 40-byte reference, read on demand: 4194304 bytes",
        );
    }

    // Each example deletes its topic when it is done.
    let topics = broker.cli(&["topic", "list"]);
    assert!(topics.status.success());
    let listed = String::from_utf8_lossy(&topics.stdout);
    assert!(
        !listed.contains("examples/"),
        "topics left behind: {listed}"
    );
    broker.stop();
}
