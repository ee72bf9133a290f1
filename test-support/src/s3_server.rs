//! [`S3Server`]: a real S3-compatible server (moto's server mode, from
//! PyPI, installed by `scripts/setup.sh` into `interop/.venv`) started on
//! 127.0.0.1 for one test, with one fresh bucket, and stopped on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::free_port_pair;

/// How long the server may take to answer its first request.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const POLL_INTERVAL: Duration = Duration::from_millis(100);
const INSTALL_HINT: &str =
    "run bash scripts/setup.sh (it installs moto[server] into interop/.venv), \
                            or set KELP_S3_SERVER to a moto_server executable";

/// The credentials the tests sign with; moto accepts any.
pub const S3_ACCESS_KEY_ID: &str = "kelp-test";
pub const S3_SECRET_ACCESS_KEY: &str = "kelp-test-secret";
pub const S3_REGION: &str = "us-east-1";

static BUCKETS: AtomicU32 = AtomicU32::new(0);

/// A running S3-compatible server and a bucket made for this test.
#[derive(Debug)]
pub struct S3Server {
    child: Child,
    port: u16,
    bucket: String,
}

impl S3Server {
    /// Start `moto_server` (`$KELP_S3_SERVER`, else
    /// `interop/.venv/bin/moto_server`) on a free port and create a bucket.
    /// Panics, saying how to install it, if the server is missing.
    pub fn start() -> S3Server {
        let program = std::env::var_os("KELP_S3_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../interop/.venv/bin/moto_server")
            });
        assert!(
            program.exists(),
            "no S3 server at {}: {INSTALL_HINT}",
            program.display()
        );
        let port = free_port_pair();
        let child = Command::new(&program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e} ({INSTALL_HINT})", program.display()));
        let bucket = format!(
            "kelp-test-{}-{}",
            std::process::id(),
            BUCKETS.fetch_add(1, Ordering::Relaxed)
        );
        let mut server = S3Server {
            child,
            port,
            bucket,
        };
        server.wait_ready();
        let status = server.request("PUT", &format!("/{}", server.bucket));
        assert_eq!(status, 200, "create bucket {}", server.bucket);
        server
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The bucket made for this test.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// `s3://BUCKET/prefix`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// What an S3 filer in this process needs to reach this server.
    pub fn settings(&self) -> filer_s3::S3Settings {
        filer_s3::S3Settings {
            endpoint: Some(self.endpoint()),
            region: Some(S3_REGION.into()),
            allow_http: Some(true),
            access_key_id: Some(S3_ACCESS_KEY_ID.into()),
            secret_access_key: Some(S3_SECRET_ACCESS_KEY.into()),
            retry_timeout: None,
        }
    }

    /// The standard AWS environment a kelp process needs to reach this
    /// server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY_ID.into()),
            ("AWS_SECRET_ACCESS_KEY", S3_SECRET_ACCESS_KEY.into()),
            ("AWS_REGION", S3_REGION.into()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// Every key in the bucket under `prefix`, from the server's own
    /// listing (`ListObjectsV2`, first 1000), to check what kelp stored.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let body = self.get(&format!("/{}?list-type=2&prefix={prefix}", self.bucket));
        body.split("<Key>")
            .skip(1)
            .filter_map(|s| s.split_once("</Key>").map(|(k, _)| k.to_owned()))
            .collect()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the S3 server") {
                panic!(
                    "the S3 server exited at start ({status}); is port {} taken?",
                    self.port
                );
            }
            // moto's own API answers only on moto: the server on this port
            // is the one started here.
            if let Ok(200) = self.try_request("GET", "/moto-api/") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the S3 server did not answer on port {} within {START_TIMEOUT:?}",
                self.port
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    fn request(&self, method: &str, path: &str) -> u16 {
        self.try_request(method, path)
            .unwrap_or_else(|e| panic!("{method} {path} on the S3 server: {e}"))
    }

    fn get(&self, path: &str) -> String {
        let (status, body) = self
            .exchange("GET", path)
            .unwrap_or_else(|e| panic!("GET {path} on the S3 server: {e}"));
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    fn try_request(&self, method: &str, path: &str) -> std::io::Result<u16> {
        self.exchange(method, path).map(|(status, _)| status)
    }

    /// One unsigned HTTP/1.1 request (moto does not check signatures).
    fn exchange(&self, method: &str, path: &str) -> std::io::Result<(u16, String)> {
        crate::http::request(self.port, method, path, Duration::from_secs(10))
    }

    /// The server's process id (to freeze it with SIGSTOP: an outage).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stop the server (SIGKILL). moto keeps objects in memory: they go
    /// with it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}
