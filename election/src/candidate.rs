//! [`Candidate`]: the blocking handle a control-plane instance holds. It
//! owns the driver thread; every method is callable from any std thread
//! (it is `Send + Sync`: share it in an `Arc`) and returns within its time
//! limit. The methods block their thread, so they are not for async code.

use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};
use tokio::sync::{mpsc, watch};

use crate::config::{CandidateConfig, ConfigError};
use crate::control::Signal;
use crate::driver::{Driver, Op, Request, REQUESTS_QUEUED_MAX};
use crate::guarded_write::{GuardedBatch, WriteError};
use crate::keys::ClusterKeys;
use crate::leadership::{Leadership, LeadershipCell, Term};
use crate::request::RequestError;
use crate::state_read::{ReadError, StateEntry, StateSnapshot};

/// HTTP/2 pings on the gRPC connection, so a half-open connection does
/// not hold a watch for ever. etcd answers pings more frequent than its
/// `--grpc-keepalive-min-time` (5 s by default) by closing the connection,
/// so the interval stays above it. (A leader does not rely on these: its
/// lease deadline ends its term first.)
const CONNECTION_PING_INTERVAL_MS: u64 = 10_000;
const CONNECTION_PING_TIMEOUT_MS: u64 = 5_000;

// Shared across the control plane's threads.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Candidate>();
};

/// One control-plane instance standing for leader of its cluster.
#[derive(Debug)]
pub struct Candidate {
    config: CandidateConfig,
    keys: ClusterKeys,
    cell: Arc<LeadershipCell>,
    signal: watch::Sender<Signal>,
    requests: mpsc::Sender<Request>,
    driver: Option<JoinHandle<()>>,
}

impl Candidate {
    /// Check `config`, connect to etcd and start campaigning on a thread
    /// of its own. The candidate starts as a follower of nobody; it does
    /// not wait for the first campaign.
    pub fn start(config: CandidateConfig) -> Result<Candidate, StartError> {
        config.validate()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(StartError::Runtime)?;
        let options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout())
            .with_keep_alive(
                Duration::from_millis(CONNECTION_PING_INTERVAL_MS),
                Duration::from_millis(CONNECTION_PING_TIMEOUT_MS),
            )
            // A member cut off from its cluster's leader answers nothing,
            // rather than stale reads or keepalives it cannot apply.
            .with_require_leader(true);
        let connect = crate::request::bounded(
            "connect",
            config.connect_timeout(),
            Client::connect(&config.endpoints, Some(options)),
        );
        let client = runtime.block_on(connect)?;
        let keys = ClusterKeys::new(&config.cluster);
        let cell = Arc::new(LeadershipCell::new());
        let (signal, signal_rx) = watch::channel(Signal::Run);
        let (requests, requests_rx) = mpsc::channel(REQUESTS_QUEUED_MAX);
        let driver = Driver {
            client,
            config: config.clone(),
            keys: keys.clone(),
            cell: cell.clone(),
            signal: signal_rx,
            requests: requests_rx,
        };
        let thread = std::thread::Builder::new()
            .name(format!("kelp-election-{}", config.cluster))
            .spawn(move || runtime.block_on(driver.run()))
            .map_err(StartError::Thread)?;
        Ok(Candidate {
            config,
            keys,
            cell,
            signal,
            requests,
            driver: Some(thread),
        })
    }

    /// What this candidate believes now. Never `Leader` past the instant
    /// its lease may have expired, even if the driver is stuck.
    pub fn state(&self) -> Leadership {
        self.cell.get(Instant::now())
    }

    /// Wait until the leadership differs from `seen`, at most `timeout`;
    /// the leadership then (`seen` itself on a timeout).
    pub fn wait_for_change(&self, seen: &Leadership, timeout: Duration) -> Leadership {
        self.cell.wait_for_change(seen, timeout)
    }

    /// This instance's advertised address (the leader key's value while it
    /// leads).
    pub fn advertised_address(&self) -> &str {
        &self.config.advertised_address
    }

    /// The etcd keys of this candidate's cluster.
    pub fn keys(&self) -> &ClusterKeys {
        &self.keys
    }

    /// Set state key `key` to `value` if `term` still holds; the revision
    /// it was written at.
    pub fn put_if_leader(
        &self,
        term: Term,
        key: &str,
        value: impl Into<Vec<u8>>,
    ) -> Result<i64, WriteError> {
        self.write_if_leader(term, GuardedBatch::new().put(key, value))
    }

    /// Delete state key `key` if `term` still holds (an absent key is no
    /// error); the revision of the txn.
    pub fn delete_if_leader(&self, term: Term, key: &str) -> Result<i64, WriteError> {
        self.write_if_leader(term, GuardedBatch::new().delete(key))
    }

    /// Apply every write of `batch` in one txn if `term` still holds and
    /// every expectation of the batch is met, else none; the revision it
    /// was applied at. [`WriteError::NotLeader`] if the term is over.
    pub fn write_if_leader(&self, term: Term, batch: GuardedBatch) -> Result<i64, WriteError> {
        self.submit(|reply| Op::Write { term, batch, reply })
    }

    /// State key `key`, if it exists.
    pub fn get(&self, key: &str) -> Result<Option<StateEntry>, ReadError> {
        let key = key.to_owned();
        self.submit(|reply| Op::Get { key, reply })
    }

    /// Every state key under `prefix` (empty: all of them) at one revision.
    pub fn get_prefix(&self, prefix: &str) -> Result<StateSnapshot, ReadError> {
        let prefix = prefix.to_owned();
        self.submit(|reply| Op::GetPrefix { prefix, reply })
    }

    /// Step down and stop: the lease is revoked, which deletes the leader
    /// key, so a follower takes over at once instead of after the TTL.
    pub fn stop(mut self) {
        self.end(Signal::Stop);
    }

    /// Queue a request and wait for its answer: at most one request
    /// timeout to be sent, and one more for etcd to answer it.
    fn submit<T, E: From<RequestError>>(
        &self,
        op: impl FnOnce(SyncSender<Result<T, E>>) -> Op,
    ) -> Result<T, E> {
        let timeout = self.config.request_timeout();
        let (reply, answer) = sync_channel(1);
        let request = Request {
            expires: Instant::now() + timeout,
            op: op(reply),
        };
        match self.requests.try_send(request) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                return Err(RequestError::Busy {
                    queued: REQUESTS_QUEUED_MAX,
                }
                .into())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(RequestError::Stopped.into()),
        }
        match answer.recv_timeout(timeout * 2 + Duration::from_millis(REPLY_SLACK_MS)) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(RequestError::Timeout {
                operation: "request",
                timeout: timeout * 2,
            }
            .into()),
            Err(RecvTimeoutError::Disconnected) => Err(RequestError::Stopped.into()),
        }
    }

    fn end(&mut self, signal: Signal) {
        // send_replace: the driver may already be gone; that is no error.
        self.signal.send_replace(signal);
        if let Some(driver) = self.driver.take() {
            if driver.join().is_err() {
                log::error!("{}: the election driver panicked", self.keys.leader());
            }
        }
    }
}

/// What a caller waits beyond two request timeouts for a reply, for the
/// driver's own scheduling.
const REPLY_SLACK_MS: u64 = 200;

/// Fault injection, for tests only (the `fault-injection` feature): these
/// break the candidate on purpose to show what its peers and etcd do.
#[cfg(feature = "fault-injection")]
impl Candidate {
    /// Stop sending keepalives and campaigning, as if the process were
    /// stopped with SIGSTOP; guarded writes and reads still go out.
    pub fn pause_keepalive(&self) {
        self.signal.send_replace(Signal::Paused);
    }

    /// Undo [`Candidate::pause_keepalive`].
    pub fn resume_keepalive(&self) {
        self.signal.send_replace(Signal::Run);
    }

    /// Stop without resigning, as a kill -9 would: the driver and its
    /// connections are gone, the lease is left to expire.
    pub fn abandon(mut self) {
        self.end(Signal::Abandon);
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        self.end(Signal::Stop);
    }
}

/// Why a candidate could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("build the driver's tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Connect(#[from] RequestError),
    #[error("spawn the driver thread: {0}")]
    Thread(#[source] std::io::Error),
}
