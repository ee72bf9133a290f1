//! [`EtcdServer`]: a real single-member etcd (Debian `etcd-server`,
//! installed by `scripts/setup.sh`) started on 127.0.0.1 for one test, on
//! free client and peer ports and a fresh data directory, and killed on drop
//! (the directory goes with it).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::free_port_pair;

/// How long etcd may take to answer `/health` after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(50);
const INSTALL_HINT: &str = "run bash scripts/setup.sh (it installs Debian etcd-server), \
                            or set KELP_TEST_ETCD_BIN to an etcd executable";

static SERVERS: AtomicU32 = AtomicU32::new(0);

/// A running etcd member that only this test uses.
#[derive(Debug)]
pub struct EtcdServer {
    child: Child,
    client_port: u16,
    data_dir: PathBuf,
}

impl EtcdServer {
    /// Start `etcd` (`$KELP_TEST_ETCD_BIN`, else `etcd` on `PATH`) with its client
    /// port `p` and peer port `p + 1` of a [`free_port_pair`], and wait
    /// until it reports itself healthy. Panics, saying how to install it,
    /// if etcd is missing.
    pub fn start() -> EtcdServer {
        let program = std::env::var_os("KELP_TEST_ETCD_BIN").unwrap_or_else(|| "etcd".into());
        let port = free_port_pair();
        let (client_url, peer_url) = (
            format!("http://127.0.0.1:{port}"),
            format!("http://127.0.0.1:{}", port + 1),
        );
        let data_dir = std::env::temp_dir().join(format!(
            "kelp-etcd-{}-{}",
            std::process::id(),
            SERVERS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&data_dir);
        std::fs::create_dir_all(&data_dir)
            .unwrap_or_else(|e| panic!("create {}: {e}", data_dir.display()));
        let name = "kelp-test";
        let child = Command::new(&program)
            .arg("--name")
            .arg(name)
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("{name}={peer_url}")])
            .args(["--initial-cluster-state", "new"])
            .args(["--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("start {}: {e} ({INSTALL_HINT})", program.to_string_lossy())
            });
        let mut server = EtcdServer {
            child,
            client_port: port,
            data_dir,
        };
        server.wait_ready();
        server
    }

    /// `http://127.0.0.1:PORT`, the endpoint a client connects to.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll etcd") {
                panic!(
                    "etcd exited at start ({status}); are ports {} and {} taken?",
                    self.client_port,
                    self.client_port + 1
                );
            }
            // Only etcd answers `/version` with an `etcdserver` field, and
            // `/health` says true once the member has elected itself: the
            // server on this port is the one started here, and it serves.
            let is_etcd = self
                .http_get("/version")
                .is_ok_and(|(status, body)| status == 200 && body.contains("etcdserver"));
            let healthy = self
                .http_get("/health")
                .is_ok_and(|(status, body)| status == 200 && body.contains("\"true\""));
            if is_etcd && healthy {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not become healthy on port {} within {START_TIMEOUT:?}",
                self.client_port
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// One plain HTTP/1.1 GET on the client port.
    fn http_get(&self, path: &str) -> std::io::Result<(u16, String)> {
        crate::http::request(self.client_port, "GET", path, Duration::from_secs(5))
    }

    /// Stop etcd (SIGKILL) and remove its data directory.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}
