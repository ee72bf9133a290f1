//! A broker's logs with real processes: `--log-format json` writes one
//! JSON object per line, with the fields of the connection the event
//! happened on; `--log-level` filters what is written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::{port, Broker};

/// Send bytes that are not a kelp frame and read the refusal, so the
/// broker logs a warning on that connection; the connection's local
/// address.
fn send_garbage(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(&[0x5a; 64]).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    assert!(!answer.is_empty(), "the broker answers a malformed frame");
    stream.local_addr().unwrap().to_string()
}

/// The log's lines once one satisfies `done` (the broker writes them as
/// it goes), within 30 s.
fn log_until(path: &std::path::Path, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().any(&done) {
            return text;
        }
        assert!(Instant::now() < deadline, "never logged; the log:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn json_lines_carry_their_connections_fields() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("broker.log");
    let port = port();
    let data = dir.path().join("data");
    let extra = ["--log-format", "json"];
    let broker = Broker::start_logged(&data, port, &extra, &[], &log);
    let peer = send_garbage(port);
    let text = log_until(&log, |l| l.contains("bad magic"));
    let mut warned = None;
    for line in text.lines() {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(event["level"].is_string(), "{line}");
        assert!(event["timestamp"].is_string(), "{line}");
        let message = event["fields"]["message"].as_str().unwrap_or("");
        if message.contains("bad magic") {
            warned = Some(event);
        }
    }
    let warned = warned.unwrap();
    assert_eq!(warned["level"], "WARN", "{warned}");
    let span = &warned["span"];
    assert_eq!(span["name"], "connection", "{warned}");
    assert_eq!(span["transport"], "tcp", "{warned}");
    assert_eq!(span["peer"], peer, "{warned}");
    assert_eq!(span["shard"], 0, "{warned}");
    broker.stop();
}

#[test]
fn the_log_level_filters_what_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("broker.log");
    let port = port();
    let data = dir.path().join("data");
    let broker = Broker::start_logged(&data, port, &["--log-level", "warn"], &[], &log);
    send_garbage(port);
    let text = log_until(&log, |l| l.contains("bad magic"));
    assert!(
        !text.contains("kelp broker serving"),
        "an info line at --log-level warn:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("WARN") && l.contains("connection{transport=\"tcp\"")),
        "the warning names its connection in text too:\n{text}"
    );
    broker.stop();
}
