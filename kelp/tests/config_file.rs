//! `kelp serve --config` and `kelp control --config` with real processes:
//! `kelp config default` edited and served, `KELP_*` variables over the
//! file, flags over both, and an unknown key refused by name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{kelp_bin, port};

/// `kelp config default [of]`, which must succeed.
fn default_file(of: &str) -> String {
    let out = Command::new(kelp_bin())
        .args(["config", "default", of])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// `text` with the line setting `key` (commented out or not) replaced by
/// `key = value`.
fn set(text: &str, key: &str, value: &str) -> String {
    let mut found = false;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let bare = line.trim_start_matches("# ");
            if bare.starts_with(&format!("{key} =")) {
                found = true;
                format!("{key} = {value}")
            } else {
                line.to_string()
            }
        })
        .collect();
    assert!(found, "no line for {key}");
    lines.join("\n") + "\n"
}

/// A process of `kelp ARGS`, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(args: &[&str], env: &[(&str, String)]) -> Running {
    Running(
        Command::new(kelp_bin())
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// Wait until `port` on 127.0.0.1 accepts, while `process` runs.
fn wait_listening(process: &mut Running, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = process.0.try_wait().unwrap() {
            panic!("kelp exited with {status} before listening on {port}");
        }
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn written(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_broker_serves_from_its_edited_default_file_under_variables_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let broker_port = port();
    let (file_http, env_http) = (port(), port());
    let flag_dir = dir.path().join("from-flag");
    let file_dir = dir.path().join("from-file");
    let env_dir = dir.path().join("from-env");
    let text = default_file("serve");
    let text = set(&text, "listen", &format!("\"127.0.0.1:{broker_port}\""));
    let text = set(
        &text,
        "data_dir",
        &format!("{:?}", file_dir.to_str().unwrap()),
    );
    let text = set(&text, "shards", "2");
    let text = set(&text, "unpinned", "true");
    let text = set(&text, "http", &format!("\"127.0.0.1:{file_http}\""));
    let file = written(dir.path(), "kelp.toml", &text);
    // The variable beats the file (http), the flag beats the variable
    // (data_dir); the file's listen, shards and unpinned stand.
    let mut broker = spawn(
        &[
            "serve",
            "--config",
            &file,
            "--data-dir",
            flag_dir.to_str().unwrap(),
        ],
        &[
            ("KELP_HTTP", format!("127.0.0.1:{env_http}")),
            ("KELP_DATA_DIR", env_dir.to_str().unwrap().into()),
        ],
    );
    wait_listening(&mut broker, broker_port);
    wait_listening(&mut broker, broker_port + 1);
    wait_listening(&mut broker, env_http);
    assert!(
        TcpStream::connect(("127.0.0.1", file_http)).is_err(),
        "the file's http address is overridden by KELP_HTTP"
    );
    assert!(
        flag_dir.join("lock").exists(),
        "the flag's data dir is used"
    );
    let listed = Command::new(kelp_bin())
        .args([
            "topic",
            "list",
            "--broker",
            &format!("127.0.0.1:{broker_port}"),
        ])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
}

#[test]
fn an_unknown_key_stops_the_start_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let text = default_file("serve") + "flush_age = 5\nbuffer_byte = 7\n";
    let file = written(dir.path(), "kelp.toml", &text);
    for of in ["serve", "control"] {
        let out = Command::new(kelp_bin())
            .args([of, "--config", &file])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{of}: {out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("unknown keys"), "{of}: {said}");
        if of == "serve" {
            assert!(said.contains("buffer_byte, flush_age"), "{said}");
        }
    }
}

#[test]
fn a_control_plane_serves_from_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let (control_port, http) = (port(), port());
    let text = default_file("control");
    let text = set(&text, "listen", &format!("\"127.0.0.1:{control_port}\""));
    let data = dir.path().join("control");
    let text = set(&text, "data_dir", &format!("{:?}", data.to_str().unwrap()));
    let text = set(&text, "http", &format!("\"127.0.0.1:{http}\""));
    let file = written(dir.path(), "control.toml", &text);
    let mut control = spawn(&["control", "--config", &file], &[]);
    wait_listening(&mut control, control_port);
    wait_listening(&mut control, http);
    assert!(data.join("filer").is_dir(), "the file's data dir is used");
}
