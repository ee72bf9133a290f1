//! [`ControlServer`]: the control-plane process. One thread for the TCP
//! listener and every connection (`control_connections`), one driver thread
//! that owns the
//! [`ClusterService`] state machine (and so the
//! [`Cluster`](crate::Cluster)), and one sender thread per broker with
//! commands to take.
//!
//! The driver waits on one bounded channel ([`REQUESTS_QUEUED_MAX`]) of
//! inputs: requests from the connection thread (each connection waits for
//! its answer), command results from sender threads, and stop; it wakes at the next tick
//! (every `tick_ms`) if nothing comes. After each input it hands out the
//! answers the state machine has, then its commands, each to its broker's
//! sender thread. A sender thread makes the blocking [`BrokerLink`] call
//! and posts the result back; the state machine keeps at most one command
//! in flight per broker, so a sender's channel (room for one) never fills
//! and the driver never blocks on a broker. A sender is started when its
//! broker first has a command and ends once the state machine has
//! forgotten the broker (it left or died and its queue drained).
//!
//! One instance alone (no `election` in its configuration) always leads
//! and keeps its state in the filer. One of several (`kelp control --etcd`)
//! is handed an [`Election`] (`kelp_election`'s candidate): the driver
//! checks it before every input and every [`LEADERSHIP_POLL_MS`]; when it
//! becomes leader it loads the state from the store its election hands the
//! term (etcd) and builds a fresh state machine over it, and when the term ends it drops
//! that state machine (answering whoever waits with `NotLeader`). A
//! follower answers every request `NotLeader`, naming the leader's
//! address: brokers go there.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use filer::{Filer, FilerUrl, LocalFiler, RetriedReads};
use wire::limits::FRAME_PAYLOAD_BYTES_MAX;
use wire::{ControlPortRequest, ErrorCode, Response};

use crate::broker_link::{BrokerLink, LinkError};
use crate::cluster_service::{
    AnswerToken, ClusterService, CommandFailed, CommandId, OutgoingCommand,
};
use crate::control_connections::{ConnectionLimits, ConnectionsHandle, ControlConnections, Reply};
use crate::control_figures::{ControlFigures, PublishedActions};
use crate::election::{ElectedTerm, Election, ElectionState};
use crate::state_store::FilerStateStore;
use crate::{BrokerId, ClusterConfig, ControlError, RebalancePolicy, BROKERS_MAX};

/// Most connections served at once; more are answered `Busy` and closed.
pub const CONNECTIONS_MAX: usize = 1024;
/// Most connections from one IP address, by default.
pub const CONNECTIONS_PER_IP_MAX: usize = 256;
/// Frame payload bytes held for all connections together, by default.
pub const RECEIVE_BYTES_MAX: u64 = 64 << 20;
/// A connection that sent nothing and is owed nothing for this long is
/// closed, by default (Kafka's `connections.max.idle.ms`; brokers call
/// every second).
pub const IDLE_TIMEOUT_MS: u64 = 600_000;
/// A frame must be all here this long after its first byte, by default.
pub const FRAME_TIMEOUT_MS: u64 = 30_000;
/// Most inputs (requests, command results) waiting for the driver;
/// connection and sender threads wait beyond it.
pub const REQUESTS_QUEUED_MAX: usize = 1024;
/// Most sender threads at once: one per broker the state machine has a
/// queue for (live brokers, and departed ones whose last commands are
/// still going out). A command for one more broker fails (that broker is
/// resynchronised).
pub const SENDERS_MAX: usize = BROKERS_MAX + 1024;
/// How much longer than the link's own limit the state machine waits for a
/// command's result before it counts it as failed.
const COMMAND_RESULT_SLACK_MS: u64 = 1_000;
/// How often the driver of an elected instance looks at its candidate when
/// nothing else wakes it: a new leader serves at most this long after its
/// campaign won, and a deposed one stops as soon.
pub const LEADERSHIP_POLL_MS: u64 = 100;
/// A stretch in which the driver handled inputs without waiting for the
/// next one (or woke from a wait later than it asked) for longer than
/// this is a stall of its own (a filer or state-store call that hung, the
/// process not scheduled or stopped): the state
/// machine is told ([`ClusterService::handle_stall`]), so what brokers
/// said meanwhile, queued and not heard yet, is not taken for silence.
pub const DRIVER_STALL_MS: u64 = 250;
/// A stall this long is logged as a warning (shorter ones at debug level:
/// a slow store call now and then is normal).
const DRIVER_STALL_WARN_MS: u64 = 1_000;

/// How to run the control plane.
#[derive(Debug, Clone)]
pub struct ControlServerConfig {
    /// Where to listen (port 0: any free port).
    pub listen: SocketAddr,
    /// The control plane's directory; the filer brokers share is
    /// `<data_dir>/filer` unless `filer` names another.
    pub data_dir: PathBuf,
    /// The filer every broker of the cluster shares, opened by the caller
    /// (an `s3://` one needs an object-store client this sans-IO crate does
    /// not carry); `None` is a local directory, `<data_dir>/filer`. Brokers
    /// are handed its URL when they join and reach it with their own
    /// credentials.
    pub filer: Option<ClusterFiler>,
    /// A broker silent for longer than this is dead.
    pub broker_silence_ms: u64,
    /// A follower behind its owner for longer than this leaves the
    /// in-sync set ([`ClusterConfig::follower_lag_max_ms`]).
    pub follower_lag_max_ms: u64,
    /// How long a follower named to seal a dead owner's segment has
    /// before the control plane seals it itself
    /// ([`ClusterConfig::sealer_wait_ms`]).
    pub sealer_wait_ms: u64,
    /// How often the core ticks.
    pub tick_ms: u64,
    /// The rebalancer; `None` turns it off.
    pub rebalance: Option<RebalancePolicy>,
    /// How commands reach brokers.
    pub link: BrokerLink,
    /// Most connections at once.
    pub connections_max: usize,
    /// Most connections from one IP address.
    pub connections_per_ip_max: usize,
    /// Frame payload bytes held for all connections together: past it a
    /// connection waits before it reads a payload. At least
    /// `FRAME_PAYLOAD_BYTES_MAX` (8 MiB).
    pub receive_bytes_max: u64,
    /// A connection that sent no frame for this long and is owed no answer
    /// is closed.
    pub idle_timeout_ms: u64,
    /// A frame whose first byte came this long ago must be all here, or
    /// the connection is closed.
    pub frame_timeout_ms: u64,
    /// Run as one of several instances elected through etcd (state in
    /// etcd); `None`: alone, state in the filer. The filer must then be one
    /// every instance shares (`filer` set).
    pub election: Option<Arc<dyn Election>>,
    /// Users, their permissions and the cluster secret (`--auth FILE`):
    /// with it, every connection authenticates first; only the cluster's
    /// processes (with the secret) may register, report or leave as
    /// brokers, and commands to brokers authenticate with the secret.
    /// `None`: anyone who reaches the port may do anything.
    pub auth: Option<Arc<auth::AuthFile>>,
}

/// The filer a cluster shares, and the URL brokers are handed to reach it.
#[derive(Debug, Clone)]
pub struct ClusterFiler {
    /// Where it is, as brokers open it: absolute (`file:///dir`,
    /// `s3://bucket/prefix`).
    pub url: FilerUrl,
    /// This control plane's handle on it.
    pub filer: Arc<dyn Filer>,
}

impl Default for ControlServerConfig {
    fn default() -> ControlServerConfig {
        ControlServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7400)),
            data_dir: PathBuf::from("./kelp-control"),
            filer: None,
            broker_silence_ms: ClusterConfig::default().broker_silence_ms,
            follower_lag_max_ms: ClusterConfig::default().follower_lag_max_ms,
            sealer_wait_ms: ClusterConfig::default().sealer_wait_ms,
            tick_ms: 1_000,
            rebalance: ClusterConfig::default().rebalance,
            link: BrokerLink::default(),
            connections_max: CONNECTIONS_MAX,
            connections_per_ip_max: CONNECTIONS_PER_IP_MAX,
            receive_bytes_max: RECEIVE_BYTES_MAX,
            idle_timeout_ms: IDLE_TIMEOUT_MS,
            frame_timeout_ms: FRAME_TIMEOUT_MS,
            election: None,
            auth: None,
        }
    }
}

/// Why the control plane could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlServerError {
    /// A setting is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Creating the data directory or listening failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On what.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// Loading the topics failed.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// A thread could not be started.
    #[error("starting thread {name}: {source}")]
    Thread {
        /// The thread.
        name: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

/// What the connection thread, sender threads and `stop` send the driver.
#[derive(Debug)]
enum DriverInput {
    Request {
        request: ControlPortRequest,
        reply: Reply,
    },
    CommandDone {
        /// The state machine that sent it ([`Driver::generation`]).
        generation: u64,
        broker: BrokerId,
        id: CommandId,
        result: Result<(), CommandFailed>,
    },
    Stop,
}

/// Why the driver could not hand a command to its broker's sender thread
/// (the command then fails as [`CommandFailed::NotSent`], and the broker is
/// resynchronised).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandOffError {
    /// [`SENDERS_MAX`] sender threads run already.
    #[error("{max} sender threads already")]
    SendersFull {
        /// [`SENDERS_MAX`].
        max: usize,
    },
    /// A new sender thread could not be started.
    #[error("starting a sender thread: {source}")]
    Spawn {
        /// The error.
        source: std::io::Error,
    },
    /// The broker's sender thread is missing just after it was made sure of.
    #[error("no sender thread")]
    NoSender,
    /// The sender thread's channel is full or closed; the command is handed
    /// back inside.
    #[error("the sender thread did not take the command: {0}")]
    Rejected(#[source] TrySendError<OutgoingCommand>),
}

/// A running control plane.
#[derive(Debug)]
pub struct ControlServer {
    address: SocketAddr,
    figures: Arc<ControlFigures>,
    driver: SyncSender<DriverInput>,
    driver_thread: Option<JoinHandle<()>>,
    connections: ConnectionsHandle,
    connections_thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Load the topics, listen, and start the driver and connection
    /// threads.
    pub fn start(config: ControlServerConfig) -> Result<ControlServer, ControlServerError> {
        if config.tick_ms == 0
            || config.broker_silence_ms == 0
            || config.follower_lag_max_ms == 0
            || config.connections_max == 0
            || config.connections_per_ip_max == 0
            || config.idle_timeout_ms == 0
            || config.frame_timeout_ms == 0
        {
            return Err(ControlServerError::Config(
                "tick_ms, broker_silence_ms, follower_lag_max_ms, connections_max, \
                 connections_per_ip_max, idle_timeout_ms and frame_timeout_ms must be at \
                 least 1"
                    .to_owned(),
            ));
        }
        if config.receive_bytes_max < u64::from(FRAME_PAYLOAD_BYTES_MAX) {
            return Err(ControlServerError::Config(format!(
                "receive_bytes_max must be at least one largest frame, {FRAME_PAYLOAD_BYTES_MAX} \
                 bytes"
            )));
        }
        let cluster_secret = config.auth.as_ref().map(|a| a.cluster_secret());
        if cluster_secret == Some(None) {
            return Err(ControlServerError::Config(
                "the auth file needs a cluster_secret on a control plane: brokers prove \
                 themselves with it, and it with them"
                    .to_owned(),
            ));
        }
        let io = |what: &'static str, path: String| {
            move |source| ControlServerError::Io { what, path, source }
        };
        let ClusterFiler { url, filer } = match config.filer.clone() {
            Some(shared) => shared,
            None => {
                // Brokers on other hosts are handed this location: absolute.
                let dir = config.data_dir.join("filer");
                std::fs::create_dir_all(&dir)
                    .map_err(io("create directory", dir.display().to_string()))?;
                let dir = std::fs::canonicalize(&dir)
                    .map_err(io("resolve directory", dir.display().to_string()))?;
                ClusterFiler {
                    filer: Arc::new(LocalFiler::open(&dir).map_err(ControlError::from)?),
                    url: FilerUrl::Local(dir),
                }
            }
        };
        // Reads that fail with an I/O error are tried again before the
        // start, a takeover or a fence gives up on them.
        let filer: Arc<dyn Filer> = Arc::new(RetriedReads::new(filer));
        if config.election.is_some() && config.filer.is_none() {
            return Err(ControlServerError::Config(
                "an elected control plane needs a filer every instance shares".to_owned(),
            ));
        }
        let link = match cluster_secret.flatten() {
            Some(secret) => config
                .link
                .clone()
                .with_credentials(auth::Credentials::cluster(secret)),
            None => config.link.clone(),
        };
        let command_time_max_ms =
            u64::try_from(link.command_time_max().as_millis()).unwrap_or(u64::MAX);
        let cluster_config = ClusterConfig {
            broker_silence_ms: config.broker_silence_ms,
            rebalance: config.rebalance,
            follower_lag_max_ms: config.follower_lag_max_ms,
            sealer_wait_ms: config.sealer_wait_ms,
        };
        let command_timeout_ms = command_time_max_ms.saturating_add(COMMAND_RESULT_SLACK_MS);
        let (service, candidate) = match config.election.clone() {
            None => {
                let store = Box::new(FilerStateStore::new(filer.clone()));
                let service = ClusterService::open(
                    store,
                    filer.clone(),
                    url.to_string(),
                    cluster_config,
                    command_timeout_ms,
                )?;
                (Some(service), None)
            }
            Some(election) => (None, Some(election)),
        };
        let listener =
            TcpListener::bind(config.listen).map_err(io("listen on", config.listen.to_string()))?;
        let address = listener
            .local_addr()
            .map_err(io("local address of", config.listen.to_string()))?;

        let (driver, inputs) = sync_channel(REQUESTS_QUEUED_MAX);
        let figures = Arc::new(ControlFigures::default());
        let tick = Duration::from_millis(config.tick_ms);
        let driver_loop = Driver {
            service,
            generation: 0,
            candidate,
            serving: None,
            takeover_failed_at: None,
            filer,
            filer_location: url.to_string(),
            cluster_config,
            command_timeout_ms,
            inputs,
            results: driver.clone(),
            link,
            waiting: HashMap::new(),
            next_token: 0,
            senders: HashMap::new(),
            figures: figures.clone(),
            published: PublishedActions::default(),
        };
        let driver_thread = std::thread::Builder::new()
            .name("kelp-control-driver".to_owned())
            .spawn(move || driver_loop.run(tick))
            .map_err(|source| ControlServerError::Thread {
                name: "driver",
                source,
            })?;
        let limits = ConnectionLimits {
            connections_max: config.connections_max,
            connections_per_ip_max: config.connections_per_ip_max,
            receive_bytes_max: config.receive_bytes_max,
            idle_timeout: Duration::from_millis(config.idle_timeout_ms),
            frame_timeout: Duration::from_millis(config.frame_timeout_ms),
        };
        let to_driver = driver.clone();
        // Blocks while the driver's queue is full: the driver never waits
        // on this thread, so it always drains.
        let ask = Box::new(move |request, reply| {
            to_driver
                .send(DriverInput::Request { request, reply })
                .is_ok()
        });
        let (serving, connections) =
            ControlConnections::new(listener, limits, ask, figures.clone(), config.auth.clone())
                .map_err(io("serve connections on", address.to_string()))?;
        let connections_thread = std::thread::Builder::new()
            .name("kelp-control-conns".to_owned())
            .spawn(move || serving.run())
            .map_err(|source| ControlServerError::Thread {
                name: "connections",
                source,
            })?;
        match &config.election {
            None => log::info!("control plane listening on {address}, filer {url}"),
            Some(e) => log::info!(
                "control plane listening on {address} (advertised as {}), filer {url}; \
                 standing for leader",
                e.advertised_address()
            ),
        }
        Ok(ControlServer {
            address,
            figures,
            driver,
            driver_thread: Some(driver_thread),
            connections,
            connections_thread: Some(connections_thread),
        })
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Its figures, as of its last tick (for a metrics page).
    pub fn figures(&self) -> Arc<ControlFigures> {
        self.figures.clone()
    }

    /// Stop accepting, close every connection, and stop the driver once it
    /// finished the request it is on.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        self.connections.stop();
        if let Some(thread) = self.connections_thread.take() {
            let _ = thread.join();
        }
        let _ = self.driver.send(DriverInput::Stop);
        if let Some(thread) = self.driver_thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        if self.driver_thread.is_some() {
            self.shut_down();
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The driver thread's state (see the module docs).
struct Driver {
    /// The state machine, while this instance leads.
    service: Option<ClusterService>,
    /// Counts state machines built; a command result is for the one that
    /// sent it only (a deposed one's ids mean nothing to the next).
    generation: u64,
    /// This instance's candidacy, when it is one of several.
    candidate: Option<Arc<dyn Election>>,
    /// The term `service` was built in (elected instances).
    serving: Option<ElectedTerm>,
    /// When loading the state for a term last failed: tried again a tick
    /// later, not on every input.
    takeover_failed_at: Option<(ElectedTerm, Instant)>,
    filer: Arc<dyn Filer>,
    filer_location: String,
    cluster_config: ClusterConfig,
    command_timeout_ms: u64,
    inputs: Receiver<DriverInput>,
    /// Where sender threads post results (the same channel as `inputs`).
    results: SyncSender<DriverInput>,
    link: BrokerLink,
    /// Connections waiting for an answer, by token.
    waiting: HashMap<AnswerToken, Reply>,
    next_token: AnswerToken,
    /// Each broker's sender thread, by the channel that feeds it.
    senders: HashMap<BrokerId, SyncSender<OutgoingCommand>>,
    /// Published at every tick for the metrics page.
    figures: Arc<ControlFigures>,
    published: PublishedActions,
}

impl Driver {
    /// Inputs as they come, a tick every `tick`, outputs after each.
    fn run(mut self, tick: Duration) {
        let mut next_tick = Instant::now() + tick;
        let poll = Duration::from_millis(LEADERSHIP_POLL_MS);
        loop {
            let mut wait = next_tick.saturating_duration_since(Instant::now());
            if self.candidate.is_some() {
                wait = wait.min(poll);
            }
            let waited_from = Instant::now();
            let input = self.inputs.recv_timeout(wait);
            // From here to the next wait the driver hears nothing; nor did
            // it from when its wait should have ended, if it woke that
            // much later (the process was not scheduled, or stopped).
            let mut busy_since = Instant::now().min(waited_from + wait);
            // Whatever came, it is handled by who leads now.
            self.follow_leadership(tick);
            match input {
                Ok(DriverInput::Request { request, reply }) => match self.service.as_mut() {
                    Some(service) => {
                        let token = self.next_token;
                        self.next_token = self.next_token.wrapping_add(1);
                        self.waiting.insert(token, reply);
                        service.handle_request(now_ms(), token, request);
                    }
                    None => reply.send(self.not_serving()),
                },
                Ok(DriverInput::CommandDone {
                    generation,
                    broker,
                    id,
                    result,
                }) => {
                    if let Some(service) = self.service.as_mut() {
                        if generation == self.generation {
                            service.handle_command_done(now_ms(), broker, id, result);
                        }
                    }
                }
                Ok(DriverInput::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {}
            }
            // A stall is told before the tick that would count it.
            self.note_stall(&mut busy_since);
            if Instant::now() >= next_tick {
                if let Some(service) = self.service.as_mut() {
                    service.handle_tick(now_ms());
                }
                self.figures
                    .publish(self.service.as_ref(), self.generation, &mut self.published);
                next_tick = Instant::now() + tick;
            }
            self.transmit();
            self.note_stall(&mut busy_since);
        }
    }

    /// Tell the state machine of a stall: the driver has been busy since
    /// `busy_since` for longer than [`DRIVER_STALL_MS`] (and the count
    /// starts again).
    fn note_stall(&mut self, busy_since: &mut Instant) {
        let busy = busy_since.elapsed();
        if busy < Duration::from_millis(DRIVER_STALL_MS) {
            return;
        }
        *busy_since = Instant::now();
        let stalled_ms = u64::try_from(busy.as_millis()).unwrap_or(u64::MAX);
        self.figures.count_stall(stalled_ms);
        if let Some(service) = self.service.as_mut() {
            let said = "the control plane was stalled for";
            let why = "(a filer or state-store call, or the process not scheduled); brokers' \
                       silence is not counted for that time";
            if stalled_ms >= DRIVER_STALL_WARN_MS {
                log::warn!("{said} {stalled_ms} ms {why}");
            } else {
                log::debug!("{said} {stalled_ms} ms {why}");
            }
            service.handle_stall(now_ms(), stalled_ms);
        }
    }

    /// Take over when the candidate leads in a term not served yet; drop
    /// the state machine when the term it serves is over.
    fn follow_leadership(&mut self, retry_after: Duration) {
        let Some(candidate) = self.candidate.clone() else {
            return;
        };
        let state = candidate.state();
        let term = state.term();
        if self.serving.is_some() && self.serving != term {
            self.step_down(&state);
        }
        let Some(term) = term else {
            return;
        };
        if self.serving == Some(term) {
            return;
        }
        if let Some((failed, at)) = self.takeover_failed_at {
            if failed == term && at.elapsed() < retry_after {
                return;
            }
        }
        let started = Instant::now();
        let store = candidate.clone().store(term);
        let opened = ClusterService::open(
            store,
            self.filer.clone(),
            self.filer_location.clone(),
            self.cluster_config,
            self.command_timeout_ms,
        );
        match opened {
            Ok(service) => {
                log::info!(
                    "control plane {}: became leader in term {term}; serving {} topic(s) \
                     loaded from etcd in {} ms",
                    candidate.advertised_address(),
                    service.cluster().topics().count(),
                    started.elapsed().as_millis()
                );
                self.generation += 1;
                self.service = Some(service);
                self.serving = Some(term);
                self.takeover_failed_at = None;
            }
            Err(e) => {
                log::error!(
                    "control plane {}: leader in term {term}, but loading the state failed \
                     (trying again in {} ms): {e}",
                    candidate.advertised_address(),
                    retry_after.as_millis()
                );
                self.takeover_failed_at = Some((term, Instant::now()));
            }
        }
    }

    /// The term served is over: forget its state machine, its senders and
    /// whoever waits on it.
    fn step_down(&mut self, now: &ElectionState) {
        let Some(term) = self.serving.take() else {
            return;
        };
        self.service = None;
        self.generation += 1;
        // Closing a sender's channel ends its thread after the command it
        // may be making.
        self.senders.clear();
        let answer = self.not_serving();
        for (_, reply) in self.waiting.drain() {
            reply.send(answer.clone());
        }
        let leader = match now {
            ElectionState::Follower {
                leader: Some(leader),
            } => leader.as_str(),
            ElectionState::Follower { leader: None } => "none elected yet",
            ElectionState::Leader { .. } => "this instance, in a new term",
        };
        log::warn!(
            "control plane {}: stepped down: term {term} is over (leader now: {leader})",
            self.candidate
                .as_ref()
                .map_or("", |c| c.advertised_address())
        );
    }

    /// The answer of an instance with no state machine.
    fn not_serving(&self) -> Response<'static> {
        let leader = match self.candidate.as_ref().map(|c| c.state()) {
            Some(ElectionState::Follower { leader }) => leader.unwrap_or_default(),
            // Leads, but could not load the state yet: nobody to send to.
            _ => String::new(),
        };
        error_response(ErrorCode::NotLeader, leader)
    }

    /// Hand out every answer, then every command (a command that cannot be
    /// handed to a sender fails at once, which may answer more).
    fn transmit(&mut self) {
        let Some(service) = self.service.as_mut() else {
            return;
        };
        loop {
            while let Some((token, answer)) = service.poll_answer() {
                if let Some(reply) = self.waiting.remove(&token) {
                    // The asker may have gone: the change stands
                    // regardless.
                    reply.send(answer);
                }
            }
            let Some(command) = service.poll_command() else {
                break;
            };
            let (broker, id) = (command.broker, command.id);
            let handed = hand_to_sender(
                &mut self.senders,
                command,
                self.link.clone(),
                self.generation,
                &self.results,
            );
            if let Err(e) = handed {
                self.senders.remove(&broker);
                let failed = CommandFailed::NotSent(Box::new(e));
                service.handle_command_done(now_ms(), broker, id, Err(failed));
            }
        }
        self.senders
            .retain(|broker, _| service.has_broker_queue(*broker));
    }
}

/// Give `command` to its broker's sender thread, starting one if needed.
fn hand_to_sender(
    senders: &mut HashMap<BrokerId, SyncSender<OutgoingCommand>>,
    command: OutgoingCommand,
    link: BrokerLink,
    generation: u64,
    results: &SyncSender<DriverInput>,
) -> Result<(), HandOffError> {
    let broker = command.broker;
    if !senders.contains_key(&broker) {
        if senders.len() >= SENDERS_MAX {
            return Err(HandOffError::SendersFull { max: SENDERS_MAX });
        }
        let sender = spawn_sender(broker, link, generation, results.clone())
            .map_err(|source| HandOffError::Spawn { source })?;
        senders.insert(broker, sender);
    }
    let Some(sender) = senders.get(&broker) else {
        return Err(HandOffError::NoSender);
    };
    sender.try_send(command).map_err(HandOffError::Rejected)
}

/// A command's failure as the state machine takes it: a refusal is the
/// broker's answer; anything else the link could not get through.
fn command_failed(error: LinkError) -> CommandFailed {
    match error {
        LinkError::Refused {
            address,
            code,
            message,
        } => CommandFailed::Refused {
            address,
            code,
            message,
        },
        other => CommandFailed::Lost(Box::new(other)),
    }
}

/// A thread that sends `broker` the commands it is handed, one at a time,
/// and posts each result to `results`; it ends when its channel closes.
fn spawn_sender(
    broker: BrokerId,
    link: BrokerLink,
    generation: u64,
    results: SyncSender<DriverInput>,
) -> std::io::Result<SyncSender<OutgoingCommand>> {
    // One in flight per broker: room for one is all it ever needs.
    let (sender, commands) = sync_channel::<OutgoingCommand>(1);
    std::thread::Builder::new()
        .name(format!("kelp-control-send-{}", broker.0))
        .spawn(move || {
            for command in commands {
                let result = link
                    .command(&command.address, &command.request.to_request())
                    .map_err(command_failed);
                let done = DriverInput::CommandDone {
                    generation,
                    broker,
                    id: command.id,
                    result,
                };
                if results.send(done).is_err() {
                    return;
                }
            }
        })?;
    Ok(sender)
}

fn error_response(code: ErrorCode, message: String) -> Response<'static> {
    Response::Error { code, message }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::cluster_service::CommandRequest;

    fn command() -> OutgoingCommand {
        OutgoingCommand {
            broker: BrokerId(4),
            address: "127.0.0.1:1".into(),
            id: CommandId(7),
            request: CommandRequest::DropTopic {
                topic: "ns/t".into(),
            },
        }
    }

    #[test]
    fn a_refusal_stays_a_refusal_and_the_rest_is_lost() {
        let refused = command_failed(LinkError::Refused {
            address: "b:1".into(),
            code: ErrorCode::Storage,
            message: "disk full".into(),
        });
        assert!(
            matches!(&refused, CommandFailed::Refused { address, code: ErrorCode::Storage, message }
                if address == "b:1" && message == "disk full"),
            "{refused:?}"
        );
        assert_eq!(
            refused.to_string(),
            "broker b:1 refused: Storage: disk full"
        );

        let lost = command_failed(LinkError::BadAnswer {
            address: "b:1".into(),
            reason: "short frame".into(),
        });
        assert_eq!(lost.to_string(), "broker b:1: bad answer: short frame");
        let CommandFailed::Lost(source) = lost else {
            panic!("expected Lost, got {lost:?}")
        };
        assert!(matches!(
            source.downcast_ref::<LinkError>(),
            Some(LinkError::BadAnswer { .. })
        ));
    }

    #[test]
    fn a_rejected_command_is_handed_back() {
        let (sender, _commands) = sync_channel::<OutgoingCommand>(1);
        sender.try_send(command()).unwrap();
        let mut senders = HashMap::from([(BrokerId(4), sender)]);
        let (results, _inputs) = sync_channel(1);
        let err = hand_to_sender(&mut senders, command(), BrokerLink::default(), 0, &results)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the sender thread did not take the command: sending on a full channel"
        );
        let HandOffError::Rejected(TrySendError::Full(back)) = err else {
            panic!("expected Rejected, got {err:?}")
        };
        assert_eq!(back, command());
        assert_eq!(
            HandOffError::SendersFull { max: SENDERS_MAX }.to_string(),
            format!("{SENDERS_MAX} sender threads already")
        );
    }
}
