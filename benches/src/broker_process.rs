//! A broker run as a child process for a benchmark, so its CPU time
//! (its CPU-time clock, every thread) and resident memory (`/proc/<pid>/status`)
//! are its own and not the load generator's.
//!
//! The caller says how to start a broker ([`BrokerLauncher`]: `kelp serve`
//! from the same executable); this module adds the data directory, the
//! address and the limits, waits until the broker answers on TCP, and stops
//! it with SIGTERM (the broker flushes, then exits) so its exit status is
//! checked. Dropping a [`BrokerProcess`] that was not stopped kills it.

use std::{
    ffi::OsString,
    net::{Ipv4Addr, SocketAddr, TcpListener as StdTcpListener, UdpSocket as StdUdpSocket},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, ensure, Context, Result};
use wire::AdminRequest;

use crate::frames::admin_request_blocking;

/// How long the broker may take to answer its first request, and to flush
/// and stop after SIGTERM.
const BROKER_START_TIMEOUT: Duration = Duration::from_secs(60);
const BROKER_STOP_TIMEOUT: Duration = Duration::from_secs(300);
/// Between readiness probes while the broker starts.
const START_POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Attempts at finding `shards` consecutive free ports.
const PORT_ATTEMPTS_MAX: usize = 200;
/// Broker ports are picked in `[PORT_FIRST, PORT_FIRST + PORT_SPAN)`, below
/// Linux's ephemeral range, stepping by a prime from a per-run start.
const PORT_FIRST: u16 = 20_000;
const PORT_SPAN: u16 = 12_000;
const PORT_STEP: u32 = 7_919;

/// The command that runs a broker in the foreground until SIGTERM; the
/// broker flags (`--data-dir`, `--listen`, ...) are appended to `args`.
#[derive(Debug, Clone)]
pub struct BrokerLauncher {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl BrokerLauncher {
    /// `kelp serve` from the running executable: the `kelp` binary itself.
    pub fn this_executable_serve() -> Result<BrokerLauncher> {
        Ok(BrokerLauncher {
            program: std::env::current_exe().context("path of this program")?,
            args: vec!["serve".into()],
        })
    }
}

/// The limits a benchmark starts its broker with.
#[derive(Debug, Clone)]
pub struct BrokerSettings {
    pub shards: usize,
    pub buffer_bytes: u64,
    /// Pass `--buffer-bytes-max` (else the broker's default).
    pub buffer_bytes_max: Option<u64>,
    pub flush_age_ms: u64,
    /// Pass `--drop-flushed-pages`.
    pub drop_flushed_pages: bool,
    /// Pass `--filer URL` (the environment carries the store's settings).
    pub filer: Option<String>,
}

/// A running broker child.
pub struct BrokerProcess {
    child: Child,
    listen: SocketAddr,
    stopped: bool,
}

impl BrokerProcess {
    /// Starts the broker with its data under `data_dir` on free loopback
    /// ports, and waits until shard 0 answers an admin request over TCP.
    pub fn start(
        launcher: &BrokerLauncher,
        settings: &BrokerSettings,
        data_dir: &Path,
    ) -> Result<BrokerProcess> {
        let listen = free_base_port(settings.shards)?;
        let child = Command::new(&launcher.program)
            .args(&launcher.args)
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg(listen.to_string())
            .arg("--shards")
            .arg(settings.shards.to_string())
            .arg("--buffer-bytes")
            .arg(settings.buffer_bytes.to_string())
            .arg("--flush-age-ms")
            .arg(settings.flush_age_ms.to_string())
            .args(
                settings
                    .drop_flushed_pages
                    .then_some("--drop-flushed-pages"),
            )
            .args(
                settings
                    .filer
                    .iter()
                    .flat_map(|url| ["--filer", url.as_str()]),
            )
            .args(
                settings
                    .buffer_bytes_max
                    .iter()
                    .flat_map(|max| ["--buffer-bytes-max".to_owned(), max.to_string()]),
            )
            // The broker's info lines would interleave with the summary.
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("start the broker ({})", launcher.program.display()))?;
        let mut broker = BrokerProcess {
            child,
            listen,
            stopped: false,
        };
        broker.wait_ready()?;
        Ok(broker)
    }

    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + BROKER_START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("the broker exited with {status} while starting");
            }
            if admin_request_blocking(
                self.listen,
                &AdminRequest::ListTopics.into(),
                START_POLL_INTERVAL * 10,
            )
            .is_ok()
            {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "the broker did not answer within {} s",
                BROKER_START_TIMEOUT.as_secs()
            );
            thread::sleep(START_POLL_INTERVAL);
        }
    }

    /// Shard 0's address.
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then wait for a clean exit (the broker flushes first).
    pub fn stop(mut self) -> Result<()> {
        self.stopped = true;
        // SAFETY: a plain syscall on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        ensure!(
            rc == 0,
            "kill -TERM {}: {}",
            self.child.id(),
            std::io::Error::last_os_error()
        );
        let deadline = Instant::now() + BROKER_STOP_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                ensure!(status.success(), "the broker exited with {status}");
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "the broker did not stop within {} s",
                BROKER_STOP_TIMEOUT.as_secs()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if !self.stopped && matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A process's CPU and memory as `/proc` shows them.
#[derive(Debug, Clone, Copy)]
pub struct ProcessStats {
    pid: u32,
}

impl ProcessStats {
    pub fn new(pid: u32) -> ProcessStats {
        ProcessStats { pid }
    }

    /// User + system CPU of every thread so far, exited ones included, read
    /// from the process's CPU-time clock: nanoseconds, where `/proc/<pid>/stat`
    /// truncates to clock ticks (10 ms) and a short run could measure zero.
    pub fn cpu(&self) -> Result<Duration> {
        let pid = libc::pid_t::try_from(self.pid).context("pid out of range")?;
        let mut clock: libc::clockid_t = 0;
        // SAFETY: `clock` is a valid out-pointer for the call's duration.
        let rc = unsafe { libc::clock_getcpuclockid(pid, &mut clock) };
        ensure!(rc == 0, "clock_getcpuclockid({pid}): error {rc}");
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid out-pointer for the call's duration.
        let rc = unsafe { libc::clock_gettime(clock, &mut now) };
        ensure!(
            rc == 0,
            "clock_gettime(CPU clock of {pid}): {}",
            std::io::Error::last_os_error()
        );
        let secs = u64::try_from(now.tv_sec).context("negative CPU time")?;
        let nanos = u32::try_from(now.tv_nsec).context("CPU time nanoseconds")?;
        Ok(Duration::new(secs, nanos))
    }

    /// Peak resident set (`VmHWM`), bytes.
    pub fn peak_rss_bytes(&self) -> Result<u64> {
        self.status_kib("VmHWM:").map(|kib| kib << 10)
    }

    /// Resident set now (`VmRSS`), bytes.
    pub fn rss_bytes(&self) -> Result<u64> {
        self.status_kib("VmRSS:").map(|kib| kib << 10)
    }

    fn status_kib(&self, field: &str) -> Result<u64> {
        let path = format!("/proc/{}/status", self.pid);
        let status = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
        let line = status
            .lines()
            .find(|l| l.starts_with(field))
            .with_context(|| format!("no {field} in {path}"))?;
        line.split_whitespace()
            .nth(1)
            .with_context(|| format!("malformed {field}"))?
            .parse()
            .with_context(|| format!("{field} value"))
    }
}

/// A fresh directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Under `parent` (or the system temp dir).
    pub fn create(parent: Option<&Path>, prefix: &str) -> Result<TempDir> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let path = parent.join(format!("{prefix}-{}-{nanos:08x}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("create {}", path.display()))?;
        Ok(TempDir(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!("could not remove {}: {e}", self.0.display());
        }
    }
}

/// A port `p` on 127.0.0.1 such that `p .. p + shards` are free for both
/// TCP and UDP right now. Ports come from below the ephemeral range
/// (32768 and up), so no client connection made in the meantime (the bench's
/// own, or another program's) can take them before the broker binds.
pub fn free_base_port(shards: usize) -> Result<SocketAddr> {
    let shards = u16::try_from(shards).context("too many shards")?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut candidate = (std::process::id() ^ nanos) % u32::from(PORT_SPAN);
    for _ in 0..PORT_ATTEMPTS_MAX {
        let base = PORT_FIRST + candidate as u16;
        candidate = (candidate + PORT_STEP) % u32::from(PORT_SPAN);
        if u32::from(base) + u32::from(shards) > u32::from(PORT_FIRST + PORT_SPAN) {
            continue;
        }
        let all_free = (0..shards).all(|i| {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, base + i));
            StdTcpListener::bind(addr).is_ok() && StdUdpSocket::bind(addr).is_ok()
        });
        if all_free {
            return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, base)));
        }
    }
    bail!("no {shards} consecutive free ports found on 127.0.0.1")
}

/// The `kelp` executable a benchmark starts: `given` (`--kelp`), else the
/// one beside this program; it must exist.
pub fn kelp_executable(given: Option<&Path>) -> Result<PathBuf> {
    let kelp = match given {
        Some(path) => path.to_path_buf(),
        None => std::env::current_exe()
            .context("path of this program")?
            .with_file_name("kelp"),
    };
    ensure!(
        kelp.is_file(),
        "no kelp executable at {} (build it with cargo build --release -p kelp, or pass --kelp)",
        kelp.display()
    );
    Ok(kelp)
}

/// How long a control plane may take to listen.
const CONTROL_START_TIMEOUT: Duration = Duration::from_secs(60);

/// A `kelp control` child on a free loopback port, killed on drop.
pub struct ControlProcess {
    child: Child,
    /// Where it listens.
    pub listen: SocketAddr,
}

impl ControlProcess {
    /// `kelp control` from `kelp`, its data under `data_dir`; waits until
    /// it listens.
    pub fn start(kelp: &Path, data_dir: &Path) -> Result<ControlProcess> {
        let listen = free_base_port(1)?;
        let child = Command::new(kelp)
            .arg("control")
            .arg("--listen")
            .arg(listen.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("start the control plane ({})", kelp.display()))?;
        let mut control = ControlProcess { child, listen };
        let deadline = Instant::now() + CONTROL_START_TIMEOUT;
        while std::net::TcpStream::connect(listen).is_err() {
            if let Some(status) = control.child.try_wait()? {
                bail!("the control plane exited with {status} while starting");
            }
            ensure!(
                Instant::now() < deadline,
                "the control plane did not listen within {CONTROL_START_TIMEOUT:?}"
            );
            thread::sleep(START_POLL_INTERVAL);
        }
        Ok(control)
    }
}

impl Drop for ControlProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The brokers a benchmark measures: a lone broker, or a `kelp control`
/// and brokers joined to it (unpinned: they share this host's cores).
pub struct BrokerGroup {
    control: Option<ControlProcess>,
    pub brokers: Vec<BrokerProcess>,
}

impl BrokerGroup {
    /// `brokers` brokers of `kelp` with `settings`, their data under
    /// `data`; with more than one, a control plane first.
    pub fn start(
        kelp: &Path,
        brokers: usize,
        settings: &BrokerSettings,
        data: &Path,
    ) -> Result<BrokerGroup> {
        let mut launcher = BrokerLauncher {
            program: kelp.to_path_buf(),
            args: vec!["serve".into()],
        };
        let control = if brokers > 1 {
            let control = ControlProcess::start(kelp, &data.join("control"))?;
            launcher.args.extend([
                "--control".into(),
                control.listen.to_string().into(),
                "--unpinned".into(),
            ]);
            Some(control)
        } else {
            None
        };
        let mut started = Vec::with_capacity(brokers);
        for i in 0..brokers {
            let dir = data.join(format!("broker-{i}"));
            std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
            started.push(BrokerProcess::start(&launcher, settings, &dir)?);
        }
        Ok(BrokerGroup {
            control,
            brokers: started,
        })
    }

    /// Every broker's address, for a client's bootstrap list.
    pub fn bootstrap(&self) -> String {
        let addresses: Vec<String> = self
            .brokers
            .iter()
            .map(|b| b.listen().to_string())
            .collect();
        addresses.join(",")
    }

    /// Stops the brokers (each flushes and must exit cleanly), then the
    /// control plane.
    pub fn stop(self) -> Result<()> {
        for broker in self.brokers {
            broker.stop()?;
        }
        drop(self.control);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that spins for `spin` of CPU, then waits on stdin.
    fn spinning_child(spin: &str) -> Child {
        Command::new("sh")
            .args(["-c", &format!("end=$(( $(date +%s%N) + {spin} )); while [ $(date +%s%N) -lt $end ]; do :; done; cat >/dev/null")])
            .stdin(Stdio::piped())
            .spawn()
            .expect("spawn sh")
    }

    #[test]
    fn cpu_of_another_process_counts_below_one_clock_tick() {
        // 3 ms of spinning is under one 10 ms clock tick, which
        // `/proc/<pid>/stat` would have reported as zero.
        let mut child = spinning_child("3000000");
        let stats = ProcessStats::new(child.id());
        let mut cpu = Duration::ZERO;
        for _ in 0..500 {
            cpu = stats.cpu().expect("CPU clock of child");
            if cpu > Duration::ZERO && cpu.subsec_nanos() % 10_000_000 != 0 {
                break;
            }
            thread::sleep(Duration::from_millis(2));
        }
        assert!(cpu > Duration::ZERO, "child's CPU read as zero");
        assert_ne!(
            cpu.subsec_nanos() % 10_000_000,
            0,
            "CPU {cpu:?} is a whole number of clock ticks"
        );
        drop(child.stdin.take());
        let status = child.wait().expect("wait child");
        assert!(status.success());
    }

    #[test]
    fn cpu_of_a_missing_process_is_an_error() {
        let mut child = Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait true");
        assert!(ProcessStats::new(pid).cpu().is_err());
    }
}
