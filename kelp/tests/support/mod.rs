//! What every test of the `kelp` binary needs: the binary's path, free
//! ports, and a broker process that is killed when the test ends.
#![allow(dead_code)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

/// The `kelp` binary under test: `$KELP_BIN` when set (to test another
/// build), else the one cargo built for this test.
pub fn kelp_bin() -> PathBuf {
    std::env::var_os("KELP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kelp")))
}

pub static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// Ports for one broker (two shards), free for TCP and UDP now, below the
/// ephemeral range (32768 and up) so no client connection takes them.
pub fn port() -> u16 {
    let base = 10_000 + (std::process::id() % 1_000) as u16 * 8;
    loop {
        let p = base + NEXT_PORT.fetch_add(4, Ordering::Relaxed) % 1_800;
        let free = (p..p + 2).all(|q| {
            std::net::TcpListener::bind(("127.0.0.1", q)).is_ok()
                && std::net::UdpSocket::bind(("127.0.0.1", q)).is_ok()
        });
        if free {
            return p;
        }
    }
}

pub struct Broker {
    pub child: Child,
    pub port: u16,
    pub data_dir: PathBuf,
}

impl Broker {
    pub fn start(data_dir: &Path, port: u16) -> Broker {
        Broker::start_with(data_dir, port, &[])
    }

    pub fn start_with(data_dir: &Path, port: u16, extra: &[&str]) -> Broker {
        let child = Command::new(kelp_bin())
            .args(["serve", "--shards", "2"])
            .args(extra)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start kelp serve");
        let broker = Broker {
            child,
            port,
            data_dir: data_dir.to_path_buf(),
        };
        broker.wait_ready();
        broker
    }

    /// Ready when both shards accept and the admin path answers.
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let up = (0..2).all(|i| TcpStream::connect(("127.0.0.1", self.port + i)).is_ok());
            if up && self.cli(&["topic", "list"]).status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "broker did not start on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn broker_arg(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(kelp_bin())
            .args(args)
            .arg("--broker")
            .arg(self.broker_arg())
            .output()
            .expect("run kelp")
    }

    pub fn kill9(mut self) {
        self.child.kill().unwrap(); // SIGKILL
        self.child.wait().unwrap();
    }

    pub fn stop(mut self) {
        terminate(&mut self.child, "broker");
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `kelp control` process, killed when the test ends.
pub struct ControlPlane {
    pub child: Child,
    pub port: u16,
    pub data_dir: PathBuf,
}

impl ControlPlane {
    /// Start a control plane on `port` and wait until it accepts.
    pub fn start(data_dir: &Path, port: u16, extra: &[&str]) -> ControlPlane {
        let child = Command::new(kelp_bin())
            .arg("control")
            .args(extra)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start kelp control");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "control plane did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        ControlPlane {
            child,
            port,
            data_dir: data_dir.to_path_buf(),
        }
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// SIGTERM, and the process must exit cleanly.
    pub fn stop(mut self) {
        terminate(&mut self.child, "control plane");
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGTERM `child`, and it must exit cleanly.
fn terminate(child: &mut Child, what: &str) {
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{what} exited with {status}");
}
