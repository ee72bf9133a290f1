//! QUIC clients verify the broker's certificate by default, through the
//! real `kelp` binary: without a CA they do not dial (unless told
//! `--insecure`, which they say loudly), a wrong CA or name is refused,
//! and a broker serves a certificate it is given (`--tls-cert`,
//! `--tls-key`) signed by a CA of the test's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

mod support;

use support::{kelp_bin, port, Broker};

/// `kelp topic list --transport quic --broker ADDR ARGS` with no CA in
/// the environment: its status and stderr.
fn list_over_quic(broker: &Broker, args: &[&str]) -> (bool, String) {
    let out = Command::new(kelp_bin())
        .args(["topic", "list", "--transport", "quic", "--broker"])
        .arg(broker.broker_arg())
        .args(args)
        .env_remove("KELP_TLS_CA")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_quic_client_verifies_the_broker_unless_told_not_to() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_with(&dir.path().join("a"), port(), &["--unpinned"]);
    let other = Broker::start_with(&dir.path().join("b"), port(), &["--unpinned"]);
    let own = dir.path().join("a/tls/cert.der");
    let others = dir.path().join("b/tls/cert.der");

    let (ok, err) = list_over_quic(&broker, &[]);
    assert!(
        !ok && err.contains("--tls-ca") && err.contains("--insecure"),
        "{err}"
    );
    let (ok, err) = list_over_quic(&broker, &["--tls-ca", path(&own)]);
    assert!(ok, "{err}");
    // Another broker's self-signed certificate is no CA of this one's.
    let (ok, err) = list_over_quic(&broker, &["--tls-ca", path(&others)]);
    assert!(!ok && err.contains("cannot reach broker"), "{err}");
    let (ok, err) = list_over_quic(&broker, &["--insecure"]);
    assert!(ok, "{err}");
    assert!(
        err.contains("not verified"),
        "--insecure said nothing: {err}"
    );
    // TCP has no TLS: no CA is needed.
    let out = Command::new(kelp_bin())
        .args(["topic", "list", "--broker"])
        .arg(broker.broker_arg())
        .env_remove("KELP_TLS_CA")
        .output()
        .unwrap();
    assert!(out.status.success());
    broker.stop();
    other.stop();
}

#[test]
fn a_broker_serves_the_certificate_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["kelp.example".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let (ca_pem, cert_pem, key_pem) = (
        dir.path().join("ca.pem"),
        dir.path().join("cert.pem"),
        dir.path().join("key.pem"),
    );
    std::fs::write(&ca_pem, ca_cert.pem()).unwrap();
    std::fs::write(&cert_pem, leaf.pem()).unwrap();
    std::fs::write(&key_pem, leaf_key.serialize_pem()).unwrap();
    let broker = Broker::start_with(
        &dir.path().join("data"),
        port(),
        &[
            "--unpinned",
            "--tls-cert",
            path(&cert_pem),
            "--tls-key",
            path(&key_pem),
        ],
    );
    let (ok, err) = list_over_quic(
        &broker,
        &[
            "--tls-ca",
            path(&ca_pem),
            "--tls-server-name",
            "kelp.example",
        ],
    );
    assert!(ok, "{err}");
    // The certificate is for kelp.example, not localhost.
    let (ok, err) = list_over_quic(&broker, &["--tls-ca", path(&ca_pem)]);
    assert!(!ok && err.contains("cannot reach broker"), "{err}");
    // Nor is it the self-signed one (none was made).
    assert!(!dir.path().join("data/tls/cert.der").exists());
    broker.stop();
}

/// `kelp topic list --broker ADDR ARGS` with no transport or CA in the
/// environment: its status and stderr.
fn list(broker: &Broker, args: &[&str]) -> (bool, String) {
    let out = Command::new(kelp_bin())
        .args(["topic", "list", "--broker"])
        .arg(broker.broker_arg())
        .args(args)
        .env_remove("KELP_TLS_CA")
        .env_remove("KELP_TRANSPORT")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_tcp_tls_broker_serves_clients_that_verify_it_and_no_plain_ones() {
    let dir = tempfile::tempdir().unwrap();
    // Its own control plane reaches its TCP ports through TLS too: a topic
    // is created and its records read back only if that works.
    let broker = Broker::start_with(&dir.path().join("a"), port(), &["--unpinned", "--tcp-tls"]);
    let other = Broker::start_with(&dir.path().join("b"), port(), &["--unpinned"]);
    let own = dir.path().join("a/tls/cert.der");
    let others = dir.path().join("b/tls/cert.der");

    let created = broker.cli(&["topic", "create", "secure/events"]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let lines = support::mixed_lines(500, 0);
    let published = broker.cli_with_stdin(&["pub", "secure/events"], lines.as_bytes());
    assert!(
        published.status.success(),
        "{}",
        String::from_utf8_lossy(&published.stderr)
    );
    let read = broker.sub_earliest("secure/events", 500, "%k\\t%s\\n");
    assert_eq!(read, lines);

    let (ok, err) = list(&broker, &["--transport", "tls", "--tls-ca", path(&own)]);
    assert!(ok, "{err}");
    // Without a CA it does not dial; with another broker's it is refused;
    // plain TCP gets nothing from a TLS port.
    let (ok, err) = list(&broker, &["--transport", "tls"]);
    assert!(!ok && err.contains("--tls-ca"), "{err}");
    let (ok, err) = list(&broker, &["--transport", "tls", "--tls-ca", path(&others)]);
    assert!(!ok && err.contains("TLS"), "{err}");
    let (ok, err) = list(&broker, &[]);
    assert!(!ok, "a plain TCP client was served by a TLS port: {err}");
    drop(other);
}
