//! What every test of the `kelp` binary needs: the binary's path, free
//! ports, and a broker process that is killed when the test ends.
#![allow(dead_code)]

pub mod flood;
pub mod keyed;
pub mod records;
pub mod s3_proxy;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `kelp` binary under test: `$KELP_BIN` when set (to test another
/// build), else the one cargo built for this test.
pub fn kelp_bin() -> PathBuf {
    std::env::var_os("KELP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kelp")))
}

/// Ports for one broker (two shards): `test_support::free_port_pair`, the
/// one port picker of every kelp test.
pub fn port() -> u16 {
    test_support::free_port_pair()
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("kelp/ has a parent")
        .to_path_buf()
}

pub const INTEROP_INSTALL_HINT: &str = "install the interop clients with `.ci/run`, or by hand: \
     `python3 -m venv interop/.venv && interop/.venv/bin/pip install -r interop/requirements.txt` \
     and `npm ci --prefix interop/node`";

/// The interop Python (`$KELP_INTEROP_PYTHON`, else
/// `interop/.venv/bin/python`), which must import `modules` (a Python
/// import list): a missing one fails the test, naming how to install it.
pub fn interop_python(modules: &str) -> PathBuf {
    let python = std::env::var_os("KELP_INTEROP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("interop/.venv/bin/python"));
    assert!(
        python.exists(),
        "no Python for the interop tests at {} ($KELP_INTEROP_PYTHON): {INTEROP_INSTALL_HINT}",
        python.display()
    );
    let check = Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .output()
        .expect("run the interop Python");
    assert!(
        check.status.success(),
        "the interop Python {} lacks one of {modules} ({}): {INTEROP_INSTALL_HINT}",
        python.display(),
        String::from_utf8_lossy(&check.stderr).trim()
    );
    python
}

/// A TCP connection to port `port` of 127.0.0.1 from loopback address
/// `source` (127.0.0.2 and up stand for other hosts).
pub fn connect_from(source: &str, port: u16) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: std::net::SocketAddr = format!("{source}:0").parse().unwrap();
    socket.bind(&from.into()).unwrap();
    let to: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    socket.connect(&to.into()).unwrap();
    socket.into()
}

/// An SDK client over TCP with default options, of `brokers` (one
/// address, or several separated by commas).
pub async fn tcp_client(brokers: &str) -> client::Client {
    client::Client::connect(
        brokers,
        client::Transport::Tcp,
        client::ClientOptions::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("connecting to {brokers}: {e}"))
}

/// The id of the broker `broker` in its cluster (by its shard 0 address).
pub async fn broker_id(client: &client::Client, broker: &Broker) -> u32 {
    let brokers = client.list_brokers().await.unwrap();
    brokers
        .iter()
        .find(|b| b.shards.first().map(|s| s.tcp.as_str()) == Some(broker.broker_arg().as_str()))
        .map(|b| b.id)
        .unwrap()
}

/// A producer config that waits for durable acks, with the SDK's other
/// defaults.
pub fn durable() -> client::ProducerConfig {
    client::ProducerConfig {
        ack: client::AckMode::Durable,
        ..client::ProducerConfig::default()
    }
}

pub struct Broker {
    pub child: Child,
    /// The loopback address it listens on (127.0.0.1, or 127.0.0.2 and up
    /// standing for another host).
    pub host: &'static str,
    pub port: u16,
    pub data_dir: PathBuf,
    /// Variables every `kelp` command this broker's helpers run gets: the
    /// broker's own certificate as the QUIC CA (`KELP_TLS_CA`), and with
    /// `--auth` the user and password.
    pub cli_env: Vec<(String, String)>,
}

impl Broker {
    pub fn start(data_dir: &Path, port: u16) -> Broker {
        Broker::start_with(data_dir, port, &[])
    }

    pub fn start_with(data_dir: &Path, port: u16, extra: &[&str]) -> Broker {
        Broker::spawn("127.0.0.1", data_dir, port, extra, &[], Stdio::inherit())
    }

    /// A broker for a flood: a receive budget of `receive_mib` MiB, and
    /// room for 1024 connections from one address (the flooder's).
    pub fn start_for_flood(data_dir: &Path, port: u16, receive_mib: u64) -> Broker {
        let budget = (receive_mib << 20).to_string();
        Broker::start_with(
            data_dir,
            port,
            &[
                "--receive-bytes-max",
                &budget,
                "--connections-per-ip-max",
                "1024",
            ],
        )
    }

    /// [`Broker::start_with`] with `env` added to the broker's environment
    /// (e.g. the AWS variables of an S3 filer).
    pub fn start_with_env(
        data_dir: &Path,
        port: u16,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> Broker {
        Broker::spawn("127.0.0.1", data_dir, port, extra, env, Stdio::inherit())
    }

    /// [`Broker::start_with_env`] on another loopback address, standing
    /// for another host.
    pub fn start_on(
        host: &'static str,
        data_dir: &Path,
        port: u16,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> Broker {
        Broker::spawn(host, data_dir, port, extra, env, Stdio::inherit())
    }

    /// [`Broker::start_on`], its log (stderr) appended to `log` instead of
    /// the test's, for tests that keep each process's log apart.
    pub fn start_on_logged(
        host: &'static str,
        data_dir: &Path,
        port: u16,
        extra: &[&str],
        env: &[(&str, String)],
        log: &Path,
    ) -> Broker {
        Broker::spawn(host, data_dir, port, extra, env, appending_to(log))
    }

    /// [`Broker::start_with_env`], its log (stderr) written to `log`
    /// instead of the test's, for tests that read what the broker said.
    pub fn start_logged(
        data_dir: &Path,
        port: u16,
        extra: &[&str],
        env: &[(&str, String)],
        log: &Path,
    ) -> Broker {
        let file = std::fs::File::create(log).expect("create broker log");
        Broker::spawn("127.0.0.1", data_dir, port, extra, env, Stdio::from(file))
    }

    /// A broker started with `--auth auth_file`, whose helpers' commands
    /// authenticate as `user` with `password`.
    pub fn start_with_auth(
        data_dir: &Path,
        port: u16,
        extra: &[&str],
        auth_file: &Path,
        (user, password): (&str, &str),
    ) -> Broker {
        let auth = auth_file.to_str().expect("a UTF-8 path");
        let extra = [extra, &["--auth", auth]].concat();
        let child = spawn_kelp(
            &["serve", "--shards", "2"],
            &extra,
            &[],
            &format!("127.0.0.1:{port}"),
            data_dir,
            Stdio::inherit(),
        );
        let mut broker = Broker {
            child,
            host: "127.0.0.1",
            port,
            data_dir: data_dir.to_path_buf(),
            cli_env: vec![
                ("KELP_USER".to_owned(), user.to_owned()),
                ("KELP_PASSWORD".to_owned(), password.to_owned()),
                own_certificate(data_dir),
            ],
        };
        broker.wait_ready();
        broker
    }

    fn spawn(
        host: &'static str,
        data_dir: &Path,
        port: u16,
        extra: &[&str],
        env: &[(&str, String)],
        stderr: Stdio,
    ) -> Broker {
        let child = spawn_kelp(
            &["serve", "--shards", "2"],
            extra,
            env,
            &format!("{host}:{port}"),
            data_dir,
            stderr,
        );
        let mut broker = Broker {
            child,
            host,
            port,
            data_dir: data_dir.to_path_buf(),
            cli_env: vec![own_certificate(data_dir)],
        };
        if extra.contains(&"--tcp-tls") {
            broker
                .cli_env
                .push(("KELP_TRANSPORT".to_owned(), "tls".to_owned()));
        }
        broker.wait_ready();
        broker
    }

    /// Ready when both shards accept and the admin path answers, while
    /// the process started is still running: something else answering on
    /// the port (the broker failed to bind it and exited) fails the test.
    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "the broker started on port {} exited with {status}",
                    self.port
                );
            }
            let up = (0..2).all(|i| TcpStream::connect((self.host, self.port + i)).is_ok());
            if up && self.cli(&["topic", "list"]).status.success() {
                // Answered; it was ours only if ours still runs (a failed
                // bind exits at once).
                std::thread::sleep(Duration::from_millis(50));
                if let Some(status) = self.child.try_wait().unwrap() {
                    panic!(
                        "the broker started on port {} exited with {status}, and something \
                         else answers there",
                        self.port
                    );
                }
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
        format!("{}:{}", self.host, self.port)
    }

    /// An SDK client of this broker over TCP, with default options.
    pub async fn client(&self) -> client::Client {
        tcp_client(&self.broker_arg()).await
    }

    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(kelp_bin())
            .args(args)
            .arg("--broker")
            .arg(self.broker_arg())
            .envs(self.cli_env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run kelp")
    }

    /// `kelp sub TOPIC --from earliest --count COUNT --format FORMAT`,
    /// which must succeed; its stdout.
    pub fn sub_earliest(&self, topic: &str, count: usize, format: &str) -> String {
        let count = count.to_string();
        let args = ["sub", topic, "--from", "earliest", "--count", &count];
        let out = self.cli(&[&args[..], &["--format", format]].concat());
        assert!(
            out.status.success(),
            "kelp sub failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("kelp sub prints UTF-8 here")
    }

    /// `kelp ARGS --broker ADDR` with `input` on its stdin (written from
    /// a thread, so a large input cannot deadlock against its output; a
    /// command that exits before reading all of it is not an error here:
    /// its status says how it ended).
    pub fn cli_with_stdin(&self, args: &[&str], input: &[u8]) -> std::process::Output {
        let mut child = Command::new(kelp_bin())
            .args(args)
            .arg("--broker")
            .arg(self.broker_arg())
            .envs(self.cli_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kelp");
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_vec();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().expect("wait for kelp");
        writer.join().unwrap();
        out
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
        ControlPlane::start_with_env(data_dir, port, extra, &[])
    }

    /// [`ControlPlane::start`] with `env` added to its environment.
    pub fn start_with_env(
        data_dir: &Path,
        port: u16,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> ControlPlane {
        ControlPlane::spawn(data_dir, port, extra, env, Stdio::inherit())
    }

    /// [`ControlPlane::start`], its log (stderr) appended to `log`, for
    /// tests that read what it said.
    pub fn start_logged(data_dir: &Path, port: u16, extra: &[&str], log: &Path) -> ControlPlane {
        ControlPlane::start_logged_with_env(data_dir, port, extra, &[], log)
    }

    /// [`ControlPlane::start_logged`] with `env` added to its environment.
    pub fn start_logged_with_env(
        data_dir: &Path,
        port: u16,
        extra: &[&str],
        env: &[(&str, String)],
        log: &Path,
    ) -> ControlPlane {
        ControlPlane::spawn(data_dir, port, extra, env, appending_to(log))
    }

    fn spawn(
        data_dir: &Path,
        port: u16,
        extra: &[&str],
        env: &[(&str, String)],
        stderr: Stdio,
    ) -> ControlPlane {
        let mut child = spawn_kelp(
            &["control"],
            extra,
            env,
            &format!("127.0.0.1:{port}"),
            data_dir,
            stderr,
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "control plane did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // What answers is ours only if ours still runs.
        std::thread::sleep(Duration::from_millis(50));
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the control plane started on port {port} exited with {status}");
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

    pub fn kill9(mut self) {
        self.child.kill().unwrap(); // SIGKILL
        self.child.wait().unwrap();
    }

    /// Send the process `signal` (`STOP`, `CONT`).
    pub fn signal(&self, signal: &str) {
        self::signal(signal, self.child.id());
    }
}

/// `kill -NAME PID` (`STOP`, `CONT`, `TERM`...), which must succeed.
pub fn signal(name: &str, pid: u32) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid}: {status}");
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGTERM `child`, and it must exit cleanly.
/// Publishes one record under key `k` whose value is `reference` (an
/// uploaded payload), with ack durable, and waits for its ack.
pub async fn publish_reference(
    client: &client::Client,
    topic: &str,
    reference: &client::PayloadRef,
) {
    let producer = client.producer(topic, durable()).await.expect("a producer");
    producer
        .send_reference(b"k", reference, &[])
        .await
        .expect("send the reference");
    producer.flush().await.expect("the reference acknowledged");
}

/// `count` lines of `kelp produce` input (`key<TAB>value`): even ones
/// with a value of about `big_bytes` (larger than a by-reference
/// threshold), odd ones with a small value.
pub fn mixed_lines(count: usize, big_bytes: usize) -> String {
    let mut lines = String::new();
    for i in 0..count {
        if i % 2 == 0 {
            lines += &format!("k{i}\t{i}-{}\n", "x".repeat(big_bytes));
        } else {
            lines += &format!("k{i}\tsmall-{i}\n");
        }
    }
    lines
}

/// The resident memory of process `pid`, MiB (`VmRSS`).
pub fn rss_mib(pid: u32) -> u64 {
    status_field(pid, "VmRSS") / 1024
}

/// The number a field of `/proc/<pid>/status` starts with (`VmRSS` in
/// KiB, `Threads`).
pub fn status_field(pid: u32, name: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(':'))
        })
        .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A frame header announcing a Produce of `payload_bytes` whose payload
/// never comes (so its checksum is never checked): what a peer that
/// stalls mid-frame sends.
pub fn produce_header(payload_bytes: u32) -> [u8; wire::frame::FRAME_HEADER_BYTES] {
    let mut h = [0u8; wire::frame::FRAME_HEADER_BYTES];
    h[0..2].copy_from_slice(b"KL");
    h[2] = 1;
    h[3] = wire::frame::FrameType::ProduceRequest as u8;
    h[4..8].copy_from_slice(&payload_bytes.to_le_bytes());
    h[8..12].copy_from_slice(&1u32.to_le_bytes());
    h
}

/// A process's stderr appended to the file `log` (created if missing).
fn appending_to(log: &Path) -> Stdio {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("open the log {}: {e}", log.display()));
    Stdio::from(file)
}

/// `GET`-like `method` of `path` from an HTTP listener on
/// `127.0.0.1:port`: the status code and the body.
pub fn http_get(port: u16, method: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the admin port");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status: u16 = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// `kelp <command> <extra>` listening on `listen` with its data in
/// `data_dir`, `env` added to its environment, its stderr to `stderr`.
/// `KELP_TLS_CA` naming the self-signed certificate a broker with this
/// data directory makes (a QUIC client verifies the broker with it).
fn own_certificate(data_dir: &Path) -> (String, String) {
    let path = data_dir.join("tls").join("cert.der");
    ("KELP_TLS_CA".to_owned(), path.display().to_string())
}

fn spawn_kelp(
    command: &[&str],
    extra: &[&str],
    env: &[(&str, String)],
    listen: &str,
    data_dir: &Path,
    stderr: Stdio,
) -> Child {
    Command::new(kelp_bin())
        .args(command)
        .args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(["--listen", listen])
        .arg("--data-dir")
        .arg(data_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("start kelp {}: {e}", command[0]))
}

fn terminate(child: &mut Child, what: &str) {
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{what} exited with {status}");
}
