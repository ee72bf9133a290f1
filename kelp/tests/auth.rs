//! Authentication and authorization with `--auth FILE`, through real
//! processes and real sockets: the `kelp` CLI over TCP and QUIC against a
//! lone broker, raw frames on the broker's and the control plane's ports,
//! and a cluster whose brokers and control plane prove themselves to each
//! other with the cluster secret (a follower's copy included). What a
//! wrong or missing credential gets is a clear error and nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use test_support::{error_code, TestConn};
use wire::message::{LayoutCommand, MembershipRequest, ShardAddress};
use wire::{AdminRequest, ErrorCode, Response};

mod support;

use support::{kelp_bin, port, Broker, ControlPlane};

const CLUSTER_SECRET: &str = "a cluster secret only the cluster knows";

/// An auth file: alice the admin, bob who may produce to (and see)
/// `orders/*`, carol who may consume and see it; `extra` is added.
fn auth_file(dir: &Path, extra: &str) -> PathBuf {
    let path = dir.join("auth.toml");
    let text = format!(
        "{extra}\n\
         [[user]]\nname = \"alice\"\npassword = \"s3cret\"\nrole = \"admin\"\n\
         [[user]]\nname = \"bob\"\npassword = \"bobs password\"\n\
         [[user.grant]]\ntopics = \"orders/*\"\nallow = [\"produce\", \"describe\"]\n\
         [[user]]\nname = \"carol\"\npassword = \"carols password\"\n\
         [[user.grant]]\ntopics = \"orders/*\"\nallow = [\"consume\", \"describe\"]\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A broker in `dir` with the auth file `file` and an admin HTTP port
/// (returned), whose helpers log in as alice.
fn broker_with_metrics(dir: &Path, file: &Path) -> (Broker, u16) {
    let http = port();
    let broker = Broker::start_with_auth(
        &dir.join("data"),
        port(),
        &["--unpinned", "--http", &format!("127.0.0.1:{http}")],
        file,
        ("alice", "s3cret"),
    );
    (broker, http)
}

/// `kelp ARGS --broker ADDR` as `user` (none: no credentials), with
/// `stdin`; its status, stdout and stderr.
fn kelp_as(
    broker: &Broker,
    user: Option<(&str, &str)>,
    args: &[&str],
    stdin: &[u8],
) -> (bool, String, String) {
    let mut command = Command::new(kelp_bin());
    command
        .args(args)
        .arg("--broker")
        .arg(broker.broker_arg())
        .envs(broker.cli_env.iter().map(|(k, v)| (k, v)))
        .env_remove("KELP_USER")
        .env_remove("KELP_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some((name, password)) = user {
        command
            .env("KELP_USER", name)
            .env("KELP_PASSWORD", password);
    }
    let mut child = command.spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A raw connection authenticated (or refused) with `user`'s password.
fn authenticated(port: u16, user: &str, password: &str) -> Result<TestConn, String> {
    let mut conn = TestConn::open(port);
    control::frame_stream::authenticate(&mut conn.stream, &auth::Credentials::new(user, password))
        .map_err(|e| e.to_string())?;
    Ok(conn)
}

/// The error answer in `frame`: its code and message.
fn refusal(frame: &test_support::Frame) -> (ErrorCode, String) {
    match test_support::decode(frame) {
        Response::Error { code, message } => (code, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_broker_with_auth_serves_each_user_what_it_grants_and_nothing_to_anyone_else() {
    let dir = tempfile::tempdir().unwrap();
    let file = auth_file(dir.path(), "");
    let (broker, http) = broker_with_metrics(dir.path(), &file);
    let alice = Some(("alice", "s3cret"));
    let bob = Some(("bob", "bobs password"));
    let carol = Some(("carol", "carols password"));

    // No credentials, or wrong ones: a clear error, over both transports.
    for transport in ["tcp", "quic"] {
        let list = ["topic", "list", "--transport", transport];
        let (ok, _, err) = kelp_as(&broker, None, &list, b"");
        assert!(!ok && err.contains("authentication required"), "{err}");
        let (ok, _, err) = kelp_as(&broker, Some(("alice", "wrong")), &list, b"");
        assert!(!ok && err.contains("wrong user name or password"), "{err}");
        let (ok, _, err) = kelp_as(&broker, Some(("mallory", "s3cret")), &list, b"");
        assert!(!ok && err.contains("wrong user name or password"), "{err}");
    }

    // The admin creates topics; bob may not.
    for topic in ["orders/eu", "logs/app"] {
        let (ok, _, err) = kelp_as(&broker, alice, &["topic", "create", topic], b"");
        assert!(ok, "{err}");
    }
    let (ok, _, err) = kelp_as(&broker, bob, &["topic", "create", "orders/us"], b"");
    assert!(
        !ok && err.contains("\"bob\" may not create topic \"orders/us\""),
        "{err}"
    );
    let (ok, _, err) = kelp_as(&broker, bob, &["topic", "delete", "orders/eu"], b"");
    assert!(!ok && err.contains("may not delete"), "{err}");

    // Bob produces to orders/*, over TCP and QUIC, and nowhere else.
    let lines: Vec<String> = (0..200).map(|i| format!("k{i}\tv{i}\n")).collect();
    let (first, second) = lines.split_at(100);
    for (transport, part) in [("tcp", first), ("quic", second)] {
        let args = ["pub", "orders/eu", "--transport", transport];
        let (ok, out, err) = kelp_as(&broker, bob, &args, part.concat().as_bytes());
        assert!(ok, "{err}");
        assert!(out.contains("acknowledged 100 records"), "{out}");
    }
    let (ok, _, err) = kelp_as(&broker, bob, &["pub", "logs/app"], b"k\tv\n");
    assert!(!ok && err.contains("Forbidden"), "{err}");
    let (ok, _, err) = kelp_as(
        &broker,
        bob,
        &["sub", "orders/eu", "--from", "earliest", "--count", "1"],
        b"",
    );
    assert!(
        !ok && err.contains("\"bob\" may not consume topic \"orders/eu\""),
        "{err}"
    );

    // Carol reads exactly what bob wrote, over QUIC, and may not write.
    let (ok, out, err) = kelp_as(
        &broker,
        carol,
        &[
            "sub",
            "orders/eu",
            "--from",
            "earliest",
            "--count",
            "200",
            "--transport",
            "quic",
        ],
        b"",
    );
    assert!(ok, "{err}");
    let mut read: Vec<&str> = out.lines().collect();
    let mut wrote: Vec<&str> = lines.iter().map(|l| l.trim_end()).collect();
    read.sort_unstable();
    wrote.sort_unstable();
    assert_eq!(read, wrote);
    let (ok, _, err) = kelp_as(&broker, carol, &["pub", "orders/eu"], b"k\tv\n");
    assert!(!ok && err.contains("may not produce"), "{err}");

    // Raw frames on a shard's port: before authenticating, a control-plane
    // command gets Unauthenticated; after a failed attempt the connection
    // is refused everything; an admin user may still not send the
    // cluster's own commands. The topic outlives them all.
    let mut anonymous = TestConn::open(broker.port);
    let drop_topic = || LayoutCommand::DropTopic {
        topic: "orders/eu".into(),
    };
    let (code, message) = refusal(&anonymous.call(drop_topic()));
    assert_eq!(code, ErrorCode::Unauthenticated, "{message}");
    let failed = authenticated(broker.port + 1, "alice", "not it").unwrap_err();
    assert!(failed.contains("wrong user name or password"), "{failed}");
    let mut admin = authenticated(broker.port + 1, "alice", "s3cret").unwrap();
    let (code, message) = refusal(&admin.call(drop_topic()));
    assert_eq!(code, ErrorCode::Forbidden, "{message}");
    assert!(message.contains("cluster's internal requests"), "{message}");
    let frame = admin.call(AdminRequest::DescribeTopic {
        topic: "orders/eu".into(),
    });
    assert_eq!(error_code(&frame), None, "orders/eu was dropped");
    let (ok, _, err) = kelp_as(&broker, alice, &["topic", "describe", "orders/eu"], b"");
    assert!(ok, "{err}");

    // Every refusal was counted, by reason: three requests before any
    // login (two CLI commands and the raw command), five failed logins,
    // and at least the six forbidden operations above.
    let denied = |reason: &str| {
        let (status, body) = support::http_get(http, "GET", "/metrics");
        assert_eq!(status, 200, "{body}");
        body.lines()
            .filter(|l| {
                l.starts_with("kelp_requests_denied_total{")
                    && l.contains(&format!("reason=\"{reason}\""))
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum::<u64>()
    };
    assert_eq!(denied("unauthenticated"), 3);
    assert_eq!(denied("authentication_failed"), 5);
    assert!(denied("forbidden") >= 6, "{}", denied("forbidden"));
    broker.stop();
}

#[test]
fn hashed_credentials_from_kelp_auth_hash_log_in_and_the_password_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let mut hash = Command::new(kelp_bin())
        .args(["auth", "hash"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    hash.stdin
        .take()
        .unwrap()
        .write_all(b"a long passphrase\n")
        .unwrap();
    let out = hash.wait_with_output().unwrap();
    assert!(out.status.success());
    let lines = String::from_utf8(out.stdout).unwrap();
    assert!(
        lines.contains("scram_sha_256 = \"SCRAM-SHA-256$"),
        "{lines}"
    );
    assert!(
        lines.contains("scram_sha_512 = \"SCRAM-SHA-512$"),
        "{lines}"
    );
    assert!(!lines.contains("a long passphrase"), "{lines}");
    let file = dir.path().join("auth.toml");
    std::fs::write(
        &file,
        format!("[[user]]\nname = \"dave\"\nrole = \"admin\"\n{lines}"),
    )
    .unwrap();
    let broker = Broker::start_with_auth(
        &dir.path().join("data"),
        port(),
        &["--unpinned"],
        &file,
        ("dave", "a long passphrase"),
    );
    let (ok, _, err) = kelp_as(
        &broker,
        Some(("dave", "a long passphrase")),
        &["topic", "create", "x/y"],
        b"",
    );
    assert!(ok, "{err}");
    let (ok, _, err) = kelp_as(
        &broker,
        Some(("dave", "a long passphras")),
        &["topic", "list"],
        b"",
    );
    assert!(!ok && err.contains("wrong user name or password"), "{err}");
    broker.stop();
}

#[test]
fn a_bad_auth_file_is_refused_at_start_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("auth.toml");
    std::fs::write(
        &file,
        "[[user]]\nname = \"alice\"\npasword = \"typo\"\nrole = \"admin\"\n",
    )
    .unwrap();
    for command in [&["serve"][..], &["control"][..]] {
        let listen = format!("127.0.0.1:{}", port());
        let out = Command::new(kelp_bin())
            .args(command)
            .args(["--listen", &listen, "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--auth")
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command:?} started: {err}");
        assert!(err.contains("pasword"), "{command:?}: {err}");
        assert!(
            TcpStream::connect_timeout(&listen.parse().unwrap(), Duration::from_millis(200))
                .is_err(),
            "{command:?} left something listening"
        );
    }
}

#[test]
fn a_cluster_with_auth_refuses_a_rogue_client_and_its_own_processes_prove_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let file = auth_file(
        dir.path(),
        &format!("cluster_secret = \"{CLUSTER_SECRET}\""),
    );
    let auth = file.to_str().unwrap();
    let control_http = port();
    let control = ControlPlane::start(
        &dir.path().join("control"),
        port(),
        &[
            "--auth",
            auth,
            "--broker-silence-ms",
            "3000",
            "--http",
            &format!("127.0.0.1:{control_http}"),
        ],
    );
    let http = [port(), port()];
    let start = |name: &str, http: u16| {
        let http = format!("127.0.0.1:{http}");
        let join = [
            "--control",
            &control.address(),
            "--unpinned",
            "--http",
            &http,
        ];
        Broker::start_with_auth(
            &dir.path().join(name),
            port(),
            &join,
            &file,
            ("alice", "s3cret"),
        )
    };
    let b1 = start("b1", http[0]);
    let b2 = start("b2", http[1]);
    let brokers = |b: &Broker| {
        let out = b.cli(&["cluster", "--output", "json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_array().unwrap().len()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while brokers(&b1) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "two brokers never listed"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The rogue client of the control port: it cannot register a fake
    // broker or make a live one leave, anonymous, as an admin user, or with
    // a wrong cluster secret.
    let fake = MembershipRequest::RegisterBroker {
        id: None,
        shards: vec![ShardAddress {
            tcp: "127.0.0.1:1".into(),
            quic: "127.0.0.1:1".into(),
        }],
        capacity_bytes_per_s: 1 << 30,
        capacity_records_per_s: 1 << 20,
    };
    let leave = MembershipRequest::LeaveBroker { broker: 0 };
    let send = |conn: &mut TestConn, request: &MembershipRequest| {
        let mut frame = Vec::new();
        request.encode(77, &mut frame);
        conn.send_raw(&frame);
        refusal(&conn.read_frame().unwrap())
    };
    let mut anonymous = TestConn::open(control.port);
    for request in [&fake, &leave] {
        let (code, message) = send(&mut anonymous, request);
        assert_eq!(code, ErrorCode::Unauthenticated, "{message}");
    }
    let mut admin = authenticated(control.port, "alice", "s3cret").unwrap();
    for request in [&fake, &leave] {
        let (code, message) = send(&mut admin, request);
        assert_eq!(code, ErrorCode::Forbidden, "{message}");
    }
    let wrong = authenticated(control.port, auth::CLUSTER_USER, "a guess at the secret");
    assert!(
        wrong.unwrap_err().contains("wrong user name or password"),
        "a wrong cluster secret was taken"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(brokers(&b1), 2, "the rogue changed the brokers' list");
    let denied = |reason: &str| {
        let (status, body) = support::http_get(control_http, "GET", "/metrics");
        assert_eq!(status, 200, "{body}");
        let line = format!("kelp_control_requests_denied_total{{reason=\"{reason}\"}} ");
        body.lines()
            .find_map(|l| l.strip_prefix(&line))
            .unwrap_or_else(|| panic!("no {line} in {body}"))
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(denied("unauthenticated"), 2);
    assert_eq!(denied("forbidden"), 2);
    assert_eq!(denied("authentication_failed"), 1);

    // A broker with another secret cannot join.
    let other = dir.path().join("other.toml");
    std::fs::write(
        &other,
        "cluster_secret = \"not the cluster's secret at all\"\n",
    )
    .unwrap();
    let out = Command::new(kelp_bin())
        .args(["serve", "--shards", "1", "--unpinned"])
        .args(["--listen", &format!("127.0.0.1:{}", port())])
        .args(["--control", &control.address(), "--auth"])
        .arg(&other)
        .arg("--data-dir")
        .arg(dir.path().join("b3"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a broker with the wrong secret joined"
    );
    assert!(err.contains("wrong user name or password"), "{err}");

    // The cluster works for its users: the control plane's commands reach
    // the brokers, and an `all` produce waits for the follower on the other
    // broker, whose copy authenticated to its owner.
    let create = [
        "topic",
        "create",
        "orders/eu",
        "--segments",
        "2",
        "--replicas",
        "2",
    ];
    let out = b1.cli(&create);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: String = (0..300).map(|i| format!("k{i}\tv{i}\n")).collect();
    let out = b2.cli_with_stdin(&["pub", "orders/eu", "--ack", "all"], lines.as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("acknowledged 300 records"));
    let read = b1.sub_earliest("orders/eu", 300, "%k\\n");
    assert_eq!(read.lines().count(), 300);
    // Each segment's follower on the other broker copied its records: the
    // copies connected to their owners and authenticated. (An `all`
    // produce is also answered once the records are flushed, so its
    // success alone would not show it.)
    let copied = || {
        http.iter()
            .map(|p| {
                let (status, body) = support::http_get(*p, "GET", "/metrics");
                assert_eq!(status, 200, "{body}");
                body.lines()
                    .filter(|l| l.starts_with("kelp_replica_records_total"))
                    .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
                    .sum::<f64>()
            })
            .sum::<f64>()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while copied() < 300.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the followers copied {} of 300 records",
            copied()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = b1.cli(&["topic", "describe", "orders/eu", "--output", "json"]);
    assert!(out.status.success());
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let open: Vec<&serde_json::Value> = info["segments"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["state"] == "open")
        .collect();
    assert_eq!(open.len(), 2, "{info}");
    for segment in open {
        let followers = segment["followers"].as_array().unwrap();
        assert_eq!(followers.len(), 1, "{info}");
        assert_eq!(followers[0]["in_sync"], true, "{info}");
        assert_ne!(followers[0]["broker"], segment["broker"], "{info}");
    }
    let bob = kelp_as(
        &b2,
        Some(("bob", "bobs password")),
        &["topic", "delete", "orders/eu"],
        b"",
    );
    assert!(!bob.0 && bob.2.contains("may not delete"), "{}", bob.2);
    b1.stop();
    b2.stop();
    control.stop();
}

#[test]
fn a_users_produce_quota_holds_its_bytes_to_its_rate_and_no_one_elses() {
    let dir = tempfile::tempdir().unwrap();
    let file = auth_file(
        dir.path(),
        "[[user]]\nname = \"slow\"\npassword = \"slow password\"\nrole = \"admin\"\n\
         produce_bytes_per_s = 200000\n",
    );
    let (broker, http) = broker_with_metrics(dir.path(), &file);
    let out = broker.cli(&["topic", "create", "q/t", "--segments", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let throttled = |family: &str| {
        let (status, body) = support::http_get(http, "GET", "/metrics");
        assert_eq!(status, 200, "{body}");
        body.lines()
            .filter(|l| l.starts_with(&format!("{family}_total{{")))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum::<u64>()
    };
    // 2 MB of records: at 200,000 bytes a second with one second's burst,
    // the broker must hold them back about 9 s in all.
    let value = "v".repeat(1_000);
    let lines: String = (0..2_000).map(|i| format!("k{i}\t{value}\n")).collect();
    let (ok, out, err) = kelp_as(
        &broker,
        Some(("slow", "slow password")),
        &["pub", "q/t", "--batch-bytes", "65536"],
        lines.as_bytes(),
    );
    assert!(ok, "{err}");
    assert!(out.contains("acknowledged 2000 records"), "{out}");
    let held_ms = throttled("kelp_produce_throttled_ms");
    assert!(held_ms >= 6_000, "held back only {held_ms} ms");
    let held = throttled("kelp_produce_throttled");
    assert!(held > 0);
    // The same bytes from a user without a quota are not held back.
    let (ok, out, err) = kelp_as(
        &broker,
        Some(("alice", "s3cret")),
        &["pub", "q/t", "--batch-bytes", "65536"],
        lines.as_bytes(),
    );
    assert!(ok && out.contains("acknowledged 2000 records"), "{err}");
    assert_eq!(throttled("kelp_produce_throttled"), held);
    broker.stop();
}
