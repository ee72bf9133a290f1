//! SASL and authorization on the Kafka port (`kelp serve --kafka --auth`),
//! with real clients: confluent-kafka (librdkafka) and kafka-python,
//! driven by `interop/python/kafka_client.py` and
//! `interop/python/kafka_auth_check.py` against a real broker process on
//! loopback. Right credentials are served with every mechanism (PLAIN,
//! SCRAM-SHA-256, SCRAM-SHA-512); a wrong password, no SASL at all, and a
//! principal without the permission each get the clear error and nothing
//! else; a user over their byte-rate quota is told to wait
//! (`throttle_time_ms`). The metrics page counts what was refused. With
//! `--kafka-tls` the port is Kafka's SSL (or SASL_SSL) listener: clients
//! that trust the broker's certificate are served, a client with another
//! CA and one that does not speak TLS get nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{http_get, interop_python, port, repo_root, Broker};

const MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];
const CLIENTS: [&str; 2] = ["confluent", "kafka-python"];
/// Records each produce run writes.
const RECORDS: u64 = 300;
/// How long one client run may take.
const RUN_S_MAX: u64 = 60;
/// bob's produce quota, bytes a second.
const BOB_BYTES_PER_S: u64 = 50_000;

/// alice the admin; bob who may produce to and describe `orders*` (with a
/// quota); carol who may consume and describe it.
fn auth_file(dir: &Path) -> PathBuf {
    let path = dir.join("auth.toml");
    let text = format!(
        "[[user]]\nname = \"alice\"\npassword = \"s3cret\"\nrole = \"admin\"\n\
         [[user]]\nname = \"bob\"\npassword = \"bobs password\"\n\
         produce_bytes_per_s = {BOB_BYTES_PER_S}\n\
         [[user.grant]]\ntopics = \"kafka/orders*\"\nallow = [\"produce\", \"describe\"]\n\
         [[user]]\nname = \"carol\"\npassword = \"carols password\"\n\
         [[user.grant]]\ntopics = \"kafka/orders*\"\nallow = [\"consume\", \"describe\"]\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

struct Gateway {
    broker: Broker,
    kafka: u16,
    http: u16,
}

impl Gateway {
    fn start(dir: &Path) -> Gateway {
        Gateway::start_with(dir, &[])
    }

    /// A broker with the auth file above and the Kafka port, and `extra`.
    fn start_with(dir: &Path, extra: &[&str]) -> Gateway {
        let kafka = port();
        let http = port();
        let listen = [
            "--unpinned".to_owned(),
            "--kafka".to_owned(),
            format!("127.0.0.1:{kafka}"),
            "--http".to_owned(),
            format!("127.0.0.1:{http}"),
        ];
        let mut args: Vec<&str> = listen.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        let broker = Broker::start_with_auth(
            &dir.join("data"),
            port(),
            &args,
            &auth_file(dir),
            ("alice", "s3cret"),
        );
        Gateway {
            broker,
            kafka,
            http,
        }
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.kafka)
    }

    /// The value of the Kafka port's counter `name` with `labels`.
    fn counter(&self, name: &str, labels: &str) -> u64 {
        let (status, page) = http_get(self.http, "GET", "/metrics");
        assert_eq!(status, 200, "{page}");
        let line = format!("{name}{labels} ");
        page.lines()
            .find_map(|l| l.strip_prefix(&line))
            .unwrap_or_else(|| panic!("{name}{labels} not on the metrics page:\n{page}"))
            .trim()
            .parse()
            .unwrap()
    }
}

/// Run `script ARGS` with the interop Python as `user` (none: no
/// credentials), bounded; the JSON line it printed last.
fn python(script: &str, args: &[&str], user: Option<(&str, &str)>) -> Value {
    let python = interop_python("confluent_kafka, kafka");
    let mut command = Command::new(python);
    command
        .arg(repo_root().join("interop/python").join(script))
        .args(args)
        .env_remove("KELP_USER")
        .env_remove("KELP_PASSWORD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some((name, password)) = user {
        command
            .env("KELP_USER", name)
            .env("KELP_PASSWORD", password);
    }
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(RUN_S_MAX + 30);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{script} {args:?} ran past {RUN_S_MAX} s and was killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{script} {args:?}: no JSON summary ({e}): {stdout}"))
}

fn check(
    gateway: &Gateway,
    command: &str,
    client: &str,
    mechanism: &str,
    topic: &str,
) -> Vec<String> {
    let timeout = RUN_S_MAX.to_string();
    [
        command,
        "--client",
        client,
        "--sasl-mechanism",
        mechanism,
        "--bootstrap",
        &gateway.bootstrap(),
        "--topic",
        topic,
        "--timeout-s",
        &timeout,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// ApiVersions then Metadata on one socket, without SASL or TLS: what came
/// back (`kafka_auth_check.py raw`).
fn raw_exchange(gateway: &Gateway) -> Value {
    let args = ["raw".into(), "--bootstrap".into(), gateway.bootstrap()];
    run_check(
        &[&args[..], &["--timeout-s".into(), "10".into()]].concat(),
        None,
    )
}

fn run_check(args: &[String], user: Option<(&str, &str)>) -> Value {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    python("kafka_auth_check.py", &args, user)
}

#[test]
fn kafka_clients_authenticate_with_every_mechanism_and_wrong_ones_get_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start(dir.path());
    let alice = Some(("alice", "s3cret"));

    // Without SASL: ApiVersions is answered (a client learns what to
    // speak), anything else closes the connection.
    let raw = raw_exchange(&gateway);
    assert_eq!(raw["api_versions_error"], 0, "{raw}");
    assert_eq!(raw["metadata"], "closed", "{raw}");
    assert_eq!(
        gateway.counter(
            "kelp_kafka_requests_denied_total",
            "{reason=\"unauthenticated\"}"
        ),
        1
    );

    // Right credentials, every client and mechanism: every record acked.
    for client in CLIENTS {
        for mechanism in MECHANISMS {
            let mut args = check(&gateway, "produce", client, mechanism, "orders");
            args.extend(["--count".into(), RECORDS.to_string()]);
            let out = run_check(&args, alice);
            assert_eq!(out["acked"], RECORDS, "{client} {mechanism}: {out}");
            assert_eq!(
                out["errors"],
                serde_json::json!({}),
                "{client} {mechanism}: {out}"
            );
        }
    }
    let stored = gateway
        .broker
        .sub_earliest("kafka/orders", (RECORDS * 6) as usize, "%o\\n");
    assert_eq!(stored.lines().count() as u64, RECORDS * 6);

    // A wrong password: the client says why, and nothing is stored.
    let denied_before = gateway.counter(
        "kelp_kafka_requests_denied_total",
        "{reason=\"authentication_failed\"}",
    );
    for mechanism in MECHANISMS {
        let mut args = check(&gateway, "produce", "confluent", mechanism, "orders");
        args.extend([
            "--count".into(),
            "1".into(),
            "--timeout-s".into(),
            "5".into(),
        ]);
        let out = run_check(&args, Some(("alice", "wrong")));
        assert_eq!(out["acked"], 0, "{mechanism}: {out}");
        let said = out["client_errors"].as_array().unwrap();
        assert!(
            said.contains(&Value::from("_AUTHENTICATION")),
            "{mechanism}: {out}"
        );

        let mut args = check(&gateway, "metadata", "kafka-python", mechanism, "orders");
        args.extend(["--timeout-s".into(), "5".into()]);
        let out = run_check(&args, Some(("nobody", "s3cret")));
        assert!(out["error"].is_string(), "{mechanism}: {out}");
        let log = out["log"].to_string();
        assert!(
            log.contains("SaslAuthenticationFailedError")
                && log.contains("wrong user name or password"),
            "{mechanism}: {out}"
        );
    }
    assert!(
        gateway.counter(
            "kelp_kafka_requests_denied_total",
            "{reason=\"authentication_failed\"}"
        ) >= denied_before + 6
    );
    let after = gateway
        .broker
        .sub_earliest("kafka/orders", (RECORDS * 6) as usize, "%o\\n");
    assert_eq!(after.lines().count() as u64, RECORDS * 6);
}

#[test]
fn kafka_principals_get_what_their_grants_allow_and_are_throttled_to_their_quota() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start(dir.path());
    let alice = Some(("alice", "s3cret"));
    let bob = Some(("bob", "bobs password"));
    let carol = Some(("carol", "carols password"));
    let timeout = RUN_S_MAX.to_string();
    let bootstrap = gateway.bootstrap();

    // alice (admin) makes both topics.
    for topic in ["orders", "secrets"] {
        let out = python(
            "kafka_client.py",
            &[
                "create-topic",
                "--client",
                "confluent",
                "--sasl-mechanism",
                "SCRAM-SHA-256",
                "--bootstrap",
                &bootstrap,
                "--topic",
                topic,
                "--partitions",
                "2",
                "--timeout-s",
                &timeout,
            ],
            alice,
        );
        assert_eq!(out["partitions"], 2, "{out}");
    }

    // bob may produce to orders, not to secrets, and may not see secrets;
    // carol may not produce at all. Each refusal is the Kafka error.
    for client in CLIENTS {
        let mut args = check(&gateway, "produce", client, "SCRAM-SHA-512", "secrets");
        args.extend([
            "--count".into(),
            "5".into(),
            "--timeout-s".into(),
            "10".into(),
        ]);
        let out = run_check(&args, bob);
        assert_eq!(out["acked"], 0, "{client}: {out}");
        let errors = out["errors"].to_string();
        assert!(
            errors.contains("TOPIC_AUTHORIZATION_FAILED")
                || errors.contains("TopicAuthorizationFailedError"),
            "{client}: {out}"
        );
        let out = run_check(&args_for(&gateway, client, "orders", 5), carol);
        assert_eq!(out["acked"], 0, "{client}: {out}");
        let errors = out["errors"].to_string();
        assert!(
            errors.contains("TOPIC_AUTHORIZATION_FAILED")
                || errors.contains("TopicAuthorizationFailedError"),
            "{client}: {out}"
        );
    }
    let out = run_check(
        &check(&gateway, "metadata", "confluent", "PLAIN", "secrets"),
        bob,
    );
    assert_eq!(out["error"], "TOPIC_AUTHORIZATION_FAILED", "{out}");
    assert!(
        gateway.counter("kelp_kafka_requests_denied_total", "{reason=\"forbidden\"}") >= 5,
        "forbidden requests are counted"
    );

    // The grants, read back as Kafka ACLs: by an admin, with both
    // clients; not by bob.
    let bob_acls = [
        [
            "TOPIC", "orders", "PREFIXED", "User:bob", "*", "DESCRIBE", "ALLOW",
        ],
        [
            "TOPIC", "orders", "PREFIXED", "User:bob", "*", "WRITE", "ALLOW",
        ],
        ["GROUP", "*", "LITERAL", "User:bob", "*", "READ", "ALLOW"],
    ];
    let carol_reads = [
        "TOPIC",
        "orders",
        "PREFIXED",
        "User:carol",
        "*",
        "READ",
        "ALLOW",
    ];
    for client in CLIENTS {
        let args = check(&gateway, "acls", client, "SCRAM-SHA-256", "orders");
        let out = run_check(&args, alice);
        assert_eq!(out["error"], Value::Null, "{client}: {out}");
        let acls = out["acls"].as_array().unwrap();
        for want in bob_acls.iter().chain([&carol_reads]) {
            assert!(
                acls.contains(&serde_json::json!(want)),
                "{client}: {want:?} not in {out}"
            );
        }
        assert!(
            !acls.iter().any(|a| a[3] == "User:@cluster"),
            "{client}: the cluster's principal is shown: {out}"
        );
    }
    let args = check(&gateway, "acls", "kafka-python", "PLAIN", "orders");
    let out = run_check(&args, bob);
    assert_eq!(out["error"], "ClusterAuthorizationFailedError", "{out}");

    // bob produces to orders within his grants, over his quota: every
    // record is stored and librdkafka is told a throttle time.
    let out = python(
        "kafka_auth_check.py",
        &[
            "produce",
            "--client",
            "confluent",
            "--sasl-mechanism",
            "SCRAM-SHA-256",
            "--bootstrap",
            &bootstrap,
            "--topic",
            "orders",
            "--count",
            "300",
            "--value-bytes",
            "1000",
            "--stats",
            "--timeout-s",
            &timeout,
        ],
        bob,
    );
    assert_eq!(out["acked"], 300, "{out}");
    assert!(out["throttle_max_ms"].as_u64().unwrap() > 0, "{out}");
    assert!(gateway.counter("kelp_kafka_produce_throttled_total", "") >= 1);
    assert!(gateway.counter("kelp_kafka_produce_throttled_ms_total", "") > 0);

    // carol consumes in a group (Fetch, JoinGroup, OffsetCommit under her
    // grants): every record alice stored, once.
    let out = python(
        "kafka_client.py",
        &[
            "produce",
            "--client",
            "confluent",
            "--sasl-mechanism",
            "SCRAM-SHA-256",
            "--bootstrap",
            &bootstrap,
            "--topic",
            "orders-seq",
            "--count",
            "200",
            "--timeout-s",
            &timeout,
        ],
        alice,
    );
    assert_eq!(out["acked"], 200, "{out}");
    for (client, group) in [("confluent", "carol-c"), ("kafka-python", "carol-p")] {
        let out = python(
            "kafka_client.py",
            &[
                "consume",
                "--client",
                client,
                "--sasl-mechanism",
                "SCRAM-SHA-512",
                "--bootstrap",
                &bootstrap,
                "--topic",
                "orders-seq",
                "--group",
                group,
                "--expect",
                "200",
                "--linger-s",
                "0.5",
                "--timeout-s",
                &timeout,
            ],
            carol,
        );
        assert_eq!(out["timed_out"], false, "{client}: {out}");
        assert_eq!(out["unique"], 200, "{client}: {out}");
        assert_eq!(out["corrupt"], 0, "{client}: {out}");
    }
}

fn args_for(gateway: &Gateway, client: &str, topic: &str, count: u64) -> Vec<String> {
    let mut args = check(gateway, "produce", client, "PLAIN", topic);
    args.extend([
        "--count".into(),
        count.to_string(),
        "--timeout-s".into(),
        "10".into(),
    ]);
    args
}

#[test]
fn a_kafka_tls_port_serves_clients_that_trust_its_certificate_and_no_others() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start_with(dir.path(), &["--kafka-tls"]);
    let own = dir.path().join("data/tls/cert.der");
    let own = own.to_str().unwrap();
    // Another broker's self-signed certificate: no CA of this one's.
    let other = Broker::start_with(&dir.path().join("other"), port(), &["--unpinned"]);
    let others = dir.path().join("other/tls/cert.der");
    let others = others.to_str().unwrap();
    let alice = Some(("alice", "s3cret"));

    // SASL_SSL: both clients, every record acked.
    for client in CLIENTS {
        let mut args = check(&gateway, "produce", client, "SCRAM-SHA-512", "orders");
        args.extend([
            "--count".into(),
            RECORDS.to_string(),
            "--tls-ca".into(),
            own.into(),
        ]);
        let out = run_check(&args, alice);
        assert_eq!(out["acked"], RECORDS, "{client}: {out}");
    }
    let stored = gateway
        .broker
        .sub_earliest("kafka/orders", (RECORDS * 2) as usize, "%o\\n");
    assert_eq!(stored.lines().count() as u64, RECORDS * 2);

    // The wrong CA: the client refuses the broker, nothing is stored.
    let mut args = check(&gateway, "produce", "confluent", "SCRAM-SHA-512", "orders");
    args.extend([
        "--count".into(),
        "1".into(),
        "--timeout-s".into(),
        "5".into(),
    ]);
    args.extend(["--tls-ca".into(), others.into()]);
    let out = run_check(&args, alice);
    assert_eq!(out["acked"], 0, "{out}");
    let said = out["client_errors"].as_array().unwrap();
    assert!(said.contains(&Value::from("_SSL")), "{out}");

    // A client without TLS is not answered at all.
    let raw = raw_exchange(&gateway);
    assert_eq!(raw["api_versions_error"], Value::Null, "{raw}");

    // Without --auth the port is Kafka's SSL listener.
    drop(other);
    let kafka = port();
    let listen = format!("127.0.0.1:{kafka}");
    let open = Broker::start_with(
        &dir.path().join("open"),
        port(),
        &["--unpinned", "--kafka", &listen, "--kafka-tls"],
    );
    let ca = dir.path().join("open/tls/cert.der");
    for client in CLIENTS {
        let out = python(
            "kafka_auth_check.py",
            &[
                "produce",
                "--client",
                client,
                "--bootstrap",
                &listen,
                "--topic",
                "events",
                "--count",
                "50",
                "--tls-ca",
                ca.to_str().unwrap(),
                "--timeout-s",
                "60",
            ],
            None,
        );
        assert_eq!(out["acked"], 50, "{client}: {out}");
    }
    drop(open);
}
