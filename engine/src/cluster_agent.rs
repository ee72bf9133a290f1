//! The broker's side of the control plane, on threads of their own:
//!
//! - the agent registers the broker with the control plane, reports each
//!   open segment's load every second, hands admin requests on, sweeps a
//!   lone broker's orphan payloads, and leaves gracefully when the broker
//!   stops (the control plane seals the broker's segments here and opens
//!   successors elsewhere before the broker flushes and exits);
//! - [`ADMIN_CALLERS`] admin callers pass on the admin requests clients
//!   send to any shard, one call each at a time, taken from one bounded
//!   queue (full, a request is answered `Busy` at once).
//!
//! Each has its own connection, so a call that waits (a move that must
//! seal on a stopped broker) holds up neither the load reports, which keep
//! the broker alive in the control plane's eyes, nor the other admin calls.
//!
//! There is one control plane. In a cluster (`kelp serve --control ADDR`)
//! it is another process; a lone broker runs the same one in-process
//! ([`LocalControl`]) and reaches it the same way, over loopback TCP, as a
//! cluster of one whose shards take the pieces of its splits. A lone broker
//! does not leave when it stops (there is nobody to hand its segments to):
//! it flushes, and takes them back when it starts again. It also sweeps
//! orphan payloads, which in a cluster is not done yet.
//!
//! The control plane talks back through the shards: it sends each layout
//! change to shard 0 as an `ApplyLayout` request, which reaches every shard
//! over their command channels without passing through these threads, so a
//! request they pass on can never wait for them.
//!
//! Each connection is blocking and carries its thread's calls in order. A
//! broken one is reopened on the next call, and the agent registers again
//! with the id it has: a control plane that restarted takes it back
//! without moving anything. An HA control plane is several addresses
//! (`--control A,B,C`): a call that cannot connect tries the next one, and
//! one answered `NotLeader` goes to the leader the answer names (or, while
//! none is elected, to the next address after a pause), so the broker
//! follows whoever leads; the new leader does not know it and the agent
//! registers again.

use std::collections::HashMap;
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use control::frame_stream::read_frame;
use control::{BrokerId, ControlServer, ControlServerConfig};
use filer::{Filer, FilerUrl};
use wire::frame::{encode_frame, FRAME_HEADER_BYTES};
use wire::message::{SegmentLoadReport, ShardAddress, TopicInfo};
use wire::{AdminRequest, ControlPortRequest, ErrorCode, FrameType, MembershipRequest, Response};

use crate::config::{BrokerConfig, ConfigError};
use crate::control_plane::{shut_down_shards, ControlRequest, ShardCommand, ShutdownError};
use crate::error::EngineError;
use crate::payload::PayloadStore;
use crate::payload_sweep::PayloadSweeper;
use crate::serve_error::ServeError;
use crate::shard::SegmentLoadFigures;

/// How long a connection attempt to the control plane may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the control plane may take to answer. Leaving and splitting
/// wait for segments to be sealed and flushed.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a call waits for the first byte of its answer before it probes
/// the control plane on a second connection (see [`wait_for_answer`]).
const PROBE_AFTER: Duration = Duration::from_secs(1);
/// How long that probe may take: the control plane answers a list of
/// topics without waiting on any broker, so only a frozen or cut-off
/// instance takes longer (or one whose store, etcd, stalls a write that
/// long: the call is then tried elsewhere, and answered by the leader).
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a starting broker keeps trying to reach the control plane.
const JOIN_PATIENCE: Duration = Duration::from_secs(30);
/// How long a shard may take to report its counters.
const SHARD_REPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// The file in the data directory that keeps the broker's id.
const BROKER_ID_FILE: &str = "broker-id";
/// The id of a lone broker whose data directory names none.
const LONE_BROKER_ID: u32 = 0;
/// How long a lone broker's own control plane waits for a load report
/// before it declares the broker dead. The two share a process, so silence
/// means a stalled agent (a shard slow to report), not a dead broker: far
/// longer than a cluster's.
const LONE_BROKER_SILENCE_MS: u64 = 120_000;
/// How often a lone broker's control plane ticks (policy splits, merges).
const LONE_CONTROL_TICK_MS: u64 = 1_000;
/// Connections a lone broker's control plane accepts: its agent's and each
/// admin caller's, a probe beside each, and spares for a reconnect.
const LONE_CONTROL_CONNECTIONS_MAX: usize = 2 * (1 + ADMIN_CALLERS) + 2;
/// Threads that pass admin requests to the control plane, each on its own
/// connection: how many admin calls can wait at once (a move waiting on a
/// stopped broker) before the next ones queue.
const ADMIN_CALLERS: usize = 4;
/// Admin requests queued for a free admin caller; more are answered `Busy`.
const ADMIN_REQUESTS_QUEUED_MAX: usize = 64;
const _: () = assert!(ADMIN_CALLERS >= 1 && ADMIN_REQUESTS_QUEUED_MAX >= ADMIN_CALLERS);

/// Most control-plane addresses `--control` may list.
pub const CONTROL_ADDRESSES_MAX: usize = 16;
/// How long a call waits before asking again when no control-plane
/// instance leads (an election is under way).
const NO_LEADER_PAUSE: Duration = Duration::from_millis(200);

/// A frame answered by the control plane: its type and payload.
pub(crate) type Answer = (FrameType, Vec<u8>);

/// One blocking connection to the control plane, reopened when it breaks,
/// to whichever of its instances leads.
#[derive(Debug)]
pub(crate) struct ControlLink {
    /// The instances as configured, in order.
    addresses: Vec<String>,
    /// The configured one to try next when no leader is known.
    next: usize,
    /// Where calls go now: a configured address, or the leader a follower
    /// named.
    address: String,
    stream: Option<TcpStream>,
    next_request_id: u32,
    /// The cluster's credentials, when brokers run with an auth file:
    /// every connection (and probe) authenticates with them first.
    credentials: Option<Arc<auth::Credentials>>,
}

/// The addresses of `--control A,B,C`: 1 to [`CONTROL_ADDRESSES_MAX`],
/// none empty.
pub fn parse_control_addresses(list: &str) -> Result<Vec<String>, ConfigError> {
    let addresses: Vec<String> = list.split(',').map(|a| a.trim().to_owned()).collect();
    if addresses.iter().any(String::is_empty) {
        return Err(ConfigError::ControlAddressEmpty {
            list: list.to_owned(),
        });
    }
    if addresses.len() > CONTROL_ADDRESSES_MAX {
        return Err(ConfigError::ControlAddressesTooMany {
            count: addresses.len(),
            max: CONTROL_ADDRESSES_MAX,
        });
    }
    Ok(addresses)
}

/// Why a call to the control plane failed: on the one instance it went to
/// (reaching it, or its answer), or on every instance of an HA control
/// plane ([`NoLeader`](Self::NoLeader)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlLinkError {
    /// The address does not resolve.
    #[error("resolve control plane {address}: {source}")]
    Resolve {
        /// The address.
        address: String,
        /// The error.
        source: std::io::Error,
    },
    /// The address resolves to no socket address.
    #[error("control plane {address} resolves to nothing")]
    NoSocketAddress {
        /// The address.
        address: String,
    },
    /// Connecting failed or timed out.
    #[error("connect to control plane {address}: {source}")]
    Connect {
        /// The address.
        address: String,
        /// The error.
        source: std::io::Error,
    },
    /// Setting the connection's timeouts or options failed.
    #[error("configure control plane connection: {source}")]
    Configure {
        /// The error.
        source: std::io::Error,
    },
    /// Writing the request or waiting for the answer failed.
    #[error("control plane {address}: {source}")]
    Io {
        /// The address.
        address: String,
        /// The error.
        source: std::io::Error,
    },
    /// The answer's frame could not be read.
    #[error("control plane {address}: {source}")]
    Read {
        /// The address.
        address: String,
        /// The error.
        source: control::frame_stream::FrameReadError,
    },
    /// The instance refused the cluster's credentials (or the
    /// authentication failed on the way).
    #[error("control plane {address}: {source}")]
    Authenticate {
        /// The address.
        address: String,
        /// What failed.
        source: control::frame_stream::AuthenticateError,
    },
    /// The instance closed the connection without answering.
    #[error("control plane {address}: closed the connection without answering")]
    Closed {
        /// The address.
        address: String,
    },
    /// The answer is not one to the request sent.
    #[error(
        "control plane {address}: answer {frame_type:?} to request {answered} does not match \
         request {request}"
    )]
    Mismatched {
        /// The address.
        address: String,
        /// The answer's frame type.
        frame_type: FrameType,
        /// The request id the answer carries.
        answered: u32,
        /// The request id sent.
        request: u32,
    },
    /// No byte of the answer came within the answer timeout.
    #[error("control plane {address}: no answer in {timeout:?}")]
    NoAnswer {
        /// The address.
        address: String,
        /// The timeout.
        timeout: Duration,
    },
    /// While the answer was awaited, a probe found the instance frozen or
    /// no longer leading.
    #[error("control plane {address}: {source}")]
    Probe {
        /// The address.
        address: String,
        /// What the probe found.
        source: ProbeError,
    },
    /// The instance answered that it does not lead.
    #[error("control plane {address} does not lead")]
    NotLeader {
        /// The address.
        address: String,
    },
    /// Every attempt round the instances failed; the last one's error.
    #[error("no control-plane instance leads: {last}")]
    NoLeader {
        /// The last attempt's error.
        last: Box<ControlLinkError>,
    },
}

/// What a probe of a control-plane instance found while a call waited for
/// its answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// The address does not resolve.
    #[error("resolve: {0}")]
    Resolve(#[source] std::io::Error),
    /// The address resolves to no socket address.
    #[error("resolves to nothing")]
    NoSocketAddress,
    /// Connecting failed or timed out.
    #[error("a probe could not connect: {0}")]
    Connect(#[source] std::io::Error),
    /// Setting the probe's timeouts failed.
    #[error("configure a probe: {0}")]
    Configure(#[source] std::io::Error),
    /// The probe could not authenticate.
    #[error("a probe could not authenticate: {0}")]
    Authenticate(#[source] control::frame_stream::AuthenticateError),
    /// Writing the probe failed.
    #[error("a probe could not be sent: {0}")]
    Send(#[source] std::io::Error),
    /// No answer within the probe timeout (or a bad one).
    #[error("stopped answering (a probe got no answer in {timeout:?}: {source})")]
    NoAnswer {
        /// The probe timeout.
        timeout: Duration,
        /// The read's error.
        source: control::frame_stream::FrameReadError,
    },
    /// The instance closed the probe's connection without answering.
    #[error("closed a probe without answering")]
    Closed,
    /// The instance answered that it does not lead.
    #[error("no longer leads")]
    NotLeader,
}

impl ControlLink {
    /// A link to the control plane at `addresses` (checked by
    /// [`parse_control_addresses`]; an empty list is one empty address
    /// that fails every call).
    pub(crate) fn new(addresses: Vec<String>) -> ControlLink {
        let address = addresses.first().cloned().unwrap_or_default();
        ControlLink {
            next: 1 % addresses.len().max(1),
            addresses,
            address,
            stream: None,
            next_request_id: 1,
            credentials: None,
        }
    }

    /// This link, authenticating every connection with `credentials`.
    pub(crate) fn with_credentials(mut self, credentials: Option<Arc<auth::Credentials>>) -> Self {
        self.credentials = credentials;
        self
    }

    /// A link of its own to the same control plane, starting where this
    /// one goes now (the leader, if it followed a redirect).
    fn sibling(&self) -> ControlLink {
        ControlLink {
            addresses: self.addresses.clone(),
            next: self.next,
            address: self.address.clone(),
            stream: None,
            next_request_id: 1,
            credentials: self.credentials.clone(),
        }
    }

    /// Where calls go now.
    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    /// Go to the next configured address.
    fn rotate(&mut self) {
        self.stream = None;
        if let Some(address) = self.addresses.get(self.next) {
            self.address.clone_from(address);
        }
        self.next = (self.next + 1) % self.addresses.len().max(1);
    }

    /// Whether the last call left a usable connection.
    fn is_connected(&self) -> bool {
        self.stream.is_some()
    }

    fn connect(&mut self) -> Result<&mut TcpStream, ControlLinkError> {
        let stream = match self.stream.take() {
            Some(stream) => stream,
            None => {
                let address = &self.address;
                let addr = address
                    .to_socket_addrs()
                    .map_err(|source| ControlLinkError::Resolve {
                        address: address.clone(),
                        source,
                    })?
                    .next()
                    .ok_or_else(|| ControlLinkError::NoSocketAddress {
                        address: address.clone(),
                    })?;
                let stream =
                    TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|source| {
                        ControlLinkError::Connect {
                            address: address.clone(),
                            source,
                        }
                    })?;
                stream
                    .set_read_timeout(Some(ANSWER_TIMEOUT))
                    .and_then(|()| stream.set_write_timeout(Some(ANSWER_TIMEOUT)))
                    .and_then(|()| stream.set_nodelay(true))
                    .map_err(|source| ControlLinkError::Configure { source })?;
                let mut stream = stream;
                if let Some(credentials) = &self.credentials {
                    control::frame_stream::authenticate(&mut stream, credentials).map_err(
                        |source| ControlLinkError::Authenticate {
                            address: address.clone(),
                            source,
                        },
                    )?;
                }
                stream
            }
        };
        Ok(self.stream.insert(stream))
    }

    /// Send one request and wait for its answer.
    pub(crate) fn call(
        &mut self,
        request: &ControlPortRequest,
    ) -> Result<Answer, ControlLinkError> {
        let mut frame = Vec::new();
        let id = self.take_request_id();
        request.encode(id, &mut frame);
        self.exchange(id, &frame)
    }

    /// Send a request frame's payload as it came from a client.
    pub(crate) fn call_raw(
        &mut self,
        frame_type: FrameType,
        payload: &[u8],
    ) -> Result<Answer, ControlLinkError> {
        let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
        let id = self.take_request_id();
        encode_frame(&mut frame, frame_type, id, payload);
        self.exchange(id, &frame)
    }

    fn take_request_id(&mut self) -> u32 {
        let id = self.next_request_id;
        self.next_request_id = self.next_request_id.wrapping_add(1);
        id
    }

    /// Send `frame` to the instance that leads: on one that cannot be
    /// reached, or that does not lead, try the next (see the module docs),
    /// at most twice round the list plus once per redirect.
    fn exchange(&mut self, id: u32, frame: &[u8]) -> Result<Answer, ControlLinkError> {
        let attempts = 2 * self.addresses.len() + 2;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let connected = self.stream.is_some();
            let failed = match self.try_exchange(id, frame) {
                Ok(answer) => match not_leader(&answer) {
                    None => return Ok(answer),
                    Some(leader) => {
                        self.stream = None;
                        let failed = ControlLinkError::NotLeader {
                            address: self.address.clone(),
                        };
                        match leader {
                            Some(leader) if leader != self.address => self.address = leader,
                            _ => {
                                std::thread::sleep(NO_LEADER_PAUSE);
                                self.rotate();
                            }
                        }
                        failed
                    }
                },
                Err(e) => {
                    // Whatever the failure, the stream's position is unknown.
                    self.stream = None;
                    if self.addresses.len() == 1 {
                        // A connection kept from an earlier call may have
                        // been closed since (the instance restarted, or
                        // dropped it): once more, on a new one.
                        if !(connected && attempt == 1 && !e.move_on) {
                            return Err(e.error);
                        }
                    } else if !connected || e.move_on {
                        // A connection that broke mid-call may be to an
                        // instance that still leads: once more there, else
                        // the next.
                        self.rotate();
                    }
                    e.error
                }
            };
            if attempt >= attempts {
                return Err(ControlLinkError::NoLeader {
                    last: Box::new(failed),
                });
            }
        }
    }

    fn try_exchange(&mut self, id: u32, frame: &[u8]) -> Result<Answer, CallFailed> {
        let address = self.address.clone();
        // With one instance there is nowhere else to go: wait for it.
        let probe_after = (self.addresses.len() > 1).then_some(PROBE_AFTER);
        let credentials = self.credentials.clone();
        let stream = self.connect().map_err(CallFailed::retry)?;
        stream.write_all(frame).map_err(|source| {
            CallFailed::retry(ControlLinkError::Io {
                address: address.clone(),
                source,
            })
        })?;
        wait_for_answer(stream, &address, probe_after, credentials.as_deref()).map_err(
            |error| CallFailed {
                error,
                move_on: true,
            },
        )?;
        let mut payload = Vec::new();
        let header = read_frame(stream, &mut payload)
            .map_err(|source| {
                CallFailed::retry(ControlLinkError::Read {
                    address: address.clone(),
                    source,
                })
            })?
            .ok_or_else(|| {
                CallFailed::retry(ControlLinkError::Closed {
                    address: address.clone(),
                })
            })?;
        if header.request_id != id || header.frame_type.is_request() {
            return Err(CallFailed::retry(ControlLinkError::Mismatched {
                address,
                frame_type: header.frame_type,
                answered: header.request_id,
                request: id,
            }));
        }
        Ok((header.frame_type, payload))
    }
}

/// Why one call to one instance failed.
struct CallFailed {
    error: ControlLinkError,
    /// The instance stopped answering or no longer leads: go to the next,
    /// not once more to it.
    move_on: bool,
}

impl CallFailed {
    fn retry(error: ControlLinkError) -> CallFailed {
        CallFailed {
            error,
            move_on: false,
        }
    }
}

/// Wait until the answer on `stream` starts to arrive, at most
/// [`ANSWER_TIMEOUT`]; at once with no `probe_after` (one instance only:
/// the read that follows waits). Every `probe_after` without a byte, a probe on a
/// second connection asks `address` whether it still answers and leads: a
/// frozen instance (SIGSTOP, a hung host) accepts connections but never
/// answers, and one that lost the lead will not finish the call, so the
/// call fails then rather than at the timeout, and the link moves on.
fn wait_for_answer(
    stream: &mut TcpStream,
    address: &str,
    probe_after: Option<Duration>,
    credentials: Option<&auth::Credentials>,
) -> Result<(), ControlLinkError> {
    let Some(probe_after) = probe_after else {
        return Ok(());
    };
    let io = |source| ControlLinkError::Io {
        address: address.to_owned(),
        source,
    };
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    stream.set_read_timeout(Some(probe_after)).map_err(io)?;
    let arrived = loop {
        match stream.peek(&mut [0u8; 1]) {
            Ok(_) => break Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if Instant::now() >= deadline {
                    break Err(ControlLinkError::NoAnswer {
                        address: address.to_owned(),
                        timeout: ANSWER_TIMEOUT,
                    });
                }
                if let Err(source) = probe(address, credentials) {
                    break Err(ControlLinkError::Probe {
                        address: address.to_owned(),
                        source,
                    });
                }
            }
            Err(e) => break Err(io(e)),
        }
    };
    stream.set_read_timeout(Some(ANSWER_TIMEOUT)).map_err(io)?;
    arrived
}

/// Whether the control-plane instance at `address` answers a list of
/// topics within [`PROBE_TIMEOUT`] as leader.
fn probe(address: &str, credentials: Option<&auth::Credentials>) -> Result<(), ProbeError> {
    let addr = address
        .to_socket_addrs()
        .map_err(ProbeError::Resolve)?
        .next()
        .ok_or(ProbeError::NoSocketAddress)?;
    let mut stream =
        TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).map_err(ProbeError::Connect)?;
    stream
        .set_read_timeout(Some(PROBE_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(PROBE_TIMEOUT)))
        .map_err(ProbeError::Configure)?;
    if let Some(credentials) = credentials {
        control::frame_stream::authenticate(&mut stream, credentials)
            .map_err(ProbeError::Authenticate)?;
    }
    let mut frame = Vec::new();
    AdminRequest::ListTopics.encode(1, &mut frame);
    stream.write_all(&frame).map_err(ProbeError::Send)?;
    let mut payload = Vec::new();
    let header = read_frame(&mut stream, &mut payload)
        .map_err(|source| ProbeError::NoAnswer {
            timeout: PROBE_TIMEOUT,
            source,
        })?
        .ok_or(ProbeError::Closed)?;
    match not_leader(&(header.frame_type, payload)) {
        Some(_) => Err(ProbeError::NotLeader),
        None => Ok(()),
    }
}

/// `Some(leader)` if `answer` is a `NotLeader` error: the leader's address
/// when the answer names one.
fn not_leader(answer: &Answer) -> Option<Option<String>> {
    let (frame_type, payload) = answer;
    if *frame_type != FrameType::ErrorResponse {
        return None;
    }
    match Response::decode(*frame_type, payload) {
        Ok(Response::Error {
            code: ErrorCode::NotLeader,
            message,
        }) => Some((!message.is_empty()).then_some(message)),
        _ => None,
    }
}

/// What a broker learns when it joins.
#[derive(Debug)]
pub(crate) struct Joined {
    pub(crate) link: ControlLink,
    pub(crate) id: u32,
    /// The filer every broker of the cluster shares, as the control plane
    /// named it (a [`filer::FilerUrl`]: `file:///dir` or `s3://bucket/prefix`).
    pub(crate) filer: String,
}

/// Register with the control plane before the shards start: the answer
/// names the broker's id and the filer the shards store in. Keeps trying
/// for [`JOIN_PATIENCE`] (the control plane may be starting too).
pub(crate) fn join(
    config: &BrokerConfig,
    control: &str,
    shards: &[ShardAddress],
) -> Result<Joined, EngineError> {
    let id_path = config.data_dir.join(BROKER_ID_FILE);
    let known = read_broker_id(&id_path)?;
    join_as(config, control, shards, known)
}

/// [`join`] as broker `known` (or as whatever id the control plane gives).
/// What this broker authenticates to the rest of its cluster with: the
/// auth file's cluster secret (none without an auth file).
pub(crate) fn cluster_credentials(config: &BrokerConfig) -> Option<Arc<auth::Credentials>> {
    let secret = config.auth.as_ref()?.cluster_secret()?;
    Some(Arc::new(auth::Credentials::cluster(secret)))
}

fn join_as(
    config: &BrokerConfig,
    control: &str,
    shards: &[ShardAddress],
    known: Option<u32>,
) -> Result<Joined, EngineError> {
    let id_path = config.data_dir.join(BROKER_ID_FILE);
    let addresses = parse_control_addresses(control)?;
    let mut link = ControlLink::new(addresses).with_credentials(cluster_credentials(config));
    let deadline = Instant::now() + JOIN_PATIENCE;
    let (id, filer) = loop {
        match register(&mut link, config, known, shards) {
            Ok(joined) => break joined,
            // Refused credentials do not come right by waiting.
            Err(e @ RegisterError::Link(ControlLinkError::Authenticate { .. })) => {
                return Err(ConfigError::Join { source: e }.into())
            }
            Err(e) if !link.is_connected() && Instant::now() < deadline => {
                log::warn!("{e}; retrying");
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(source) => return Err(ConfigError::Join { source }.into()),
        }
    };
    if known != Some(id) {
        std::fs::write(&id_path, format!("{id}\n"))
            .map_err(|e| EngineError::io("write broker id", &id_path, e))?;
    }
    log::info!(
        "joined the control plane at {} as broker {id}; filer {filer}",
        link.address()
    );
    Ok(Joined { link, id, filer })
}

/// A lone broker's own control plane, and the chores that come with it.
pub(crate) struct LocalControl {
    server: ControlServer,
    sweeper: PayloadSweeper,
    payloads: Arc<PayloadStore>,
    filer: Arc<dyn Filer>,
}

impl LocalControl {
    /// Start the control plane of a lone broker over its filer (`url` is
    /// what the filer is called) and join it. Segments that name no broker
    /// (stored by a kelp whose lone broker ran a control plane of its own
    /// kind) become this broker's first, on the shards they name.
    pub(crate) fn start(
        config: &BrokerConfig,
        filer: Arc<dyn Filer>,
        url: &FilerUrl,
        payloads: Arc<PayloadStore>,
        shards: &[ShardAddress],
    ) -> Result<(LocalControl, Joined), EngineError> {
        let id = read_broker_id(&config.data_dir.join(BROKER_ID_FILE))?.unwrap_or(LONE_BROKER_ID);
        adopt_unowned(&filer::RetriedReads::new(filer.clone()), BrokerId(id))?;
        let mut link = control::broker_link::BrokerLink::default();
        if config.tcp_tls {
            // The broker's TCP ports speak TLS: its control plane takes
            // exactly the broker's own certificate.
            let (chain, _) = crate::tls::load(&config.data_dir, config.tls_cert.as_ref())?;
            if let Some(own) = chain.into_iter().next() {
                link = link.with_tls(crate::tls::client_tls_pinned(own)?);
            }
        }
        let server = ControlServer::start(ControlServerConfig {
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: config.data_dir.clone(),
            filer: Some(control::ClusterFiler {
                url: url.clone(),
                filer: filer.clone(),
            }),
            broker_silence_ms: LONE_BROKER_SILENCE_MS,
            tick_ms: LONE_CONTROL_TICK_MS,
            rebalance: None,
            link,
            connections_max: LONE_CONTROL_CONNECTIONS_MAX,
            election: None,
            auth: config.auth.clone(),
            ..ControlServerConfig::default()
        })
        .map_err(|e| EngineError::Start(format!("start the control plane: {e}")))?;
        let joined = join_as(config, &server.address().to_string(), shards, Some(id))?;
        let local = LocalControl {
            server,
            sweeper: PayloadSweeper::new(filer.clone(), config.payload_grace_ms),
            payloads,
            filer,
        };
        Ok((local, joined))
    }

    /// Delete payloads no chunk refers to, and uploads abandoned past the
    /// grace.
    fn sweep_payloads(&mut self, grace: Duration) {
        let topics = match control::topic_store::load_topics(self.filer.as_ref()) {
            Ok(topics) => topics,
            Err(e) => {
                log::warn!("payload sweep: reading the topics: {e}");
                return;
            }
        };
        let report = self.sweeper.sweep(&topics, now_ms());
        let staged = self.payloads.clean_staging(grace);
        if report.deleted > 0 || staged > 0 || report.topics_skipped > 0 {
            log::info!(
                "payload sweep: {} orphan(s) and {staged} abandoned upload(s) deleted, \
                 {} chunk(s) read, {} topic(s) skipped",
                report.deleted,
                report.chunks_read,
                report.topics_skipped
            );
        }
    }
}

/// Give broker `id` every open segment that names no broker, in the filer.
fn adopt_unowned(filer: &dyn Filer, id: BrokerId) -> Result<(), EngineError> {
    let failed = |e: control::ControlError| EngineError::Start(format!("loading topics: {e}"));
    for mut topic in control::topic_store::load_topics(filer).map_err(failed)? {
        if topic.adopt_unowned(id) {
            control::topic_store::store_topic(filer, &topic).map_err(failed)?;
            log::info!("topic {}: its segments are broker {id}'s", topic.name());
        }
    }
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn read_broker_id(path: &Path) -> Result<Option<u32>, EngineError> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            EngineError::from(ConfigError::BrokerIdFile {
                path: path.to_owned(),
                text: text.trim().to_owned(),
            })
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(EngineError::io("read broker id", path, e)),
    }
}

fn register(
    link: &mut ControlLink,
    config: &BrokerConfig,
    id: Option<u32>,
    shards: &[ShardAddress],
) -> Result<(u32, String), RegisterError> {
    let count = shards.len() as u64;
    let register = MembershipRequest::RegisterBroker {
        id,
        shards: shards.to_vec(),
        capacity_bytes_per_s: config.capacity_bytes_per_s_per_shard.saturating_mul(count),
        capacity_records_per_s: config
            .capacity_records_per_s_per_shard
            .saturating_mul(count),
    };
    let (frame_type, payload) = link.call(&register.into())?;
    match Response::decode(frame_type, &payload)? {
        Response::Registered { id: given, filer } => match id {
            Some(kept) if kept != given => Err(RegisterError::IdChanged { kept, given }),
            _ => Ok((given, filer)),
        },
        Response::Error { code, message } => Err(RegisterError::Refused { code, message }),
        other => Err(RegisterError::Unexpected {
            answer: other.frame_type(),
        }),
    }
}

/// Why the control plane did not take the broker's registration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// The call did not get through.
    #[error(transparent)]
    Link(#[from] ControlLinkError),
    /// The answer does not decode.
    #[error(transparent)]
    Decode(#[from] wire::DecodeError),
    /// The control plane gave the broker another id than the one it keeps.
    #[error("the control plane registered broker {kept} as {given}")]
    IdChanged {
        /// The id the broker asked to keep.
        kept: u32,
        /// The id it was given.
        given: u32,
    },
    /// The control plane answered with an error.
    #[error("the control plane refused to register: {code:?}: {message}")]
    Refused {
        /// Its error code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// The control plane answered with something else than a registration.
    #[error("unexpected answer to a registration: {answer:?}")]
    Unexpected {
        /// The answer's frame type.
        answer: FrameType,
    },
}

/// Why a call the control plane answers with `Done` (a load report,
/// leaving the cluster) was not taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
enum NotDone {
    /// Registering again (on a new connection, or when the control plane
    /// did not know the broker) failed.
    #[error(transparent)]
    Register(#[from] RegisterError),
    /// The call did not get through.
    #[error(transparent)]
    Link(#[from] ControlLinkError),
    /// The answer does not decode.
    #[error(transparent)]
    Decode(#[from] wire::DecodeError),
    /// The control plane answered with an error.
    #[error("refused: {code:?}: {message}")]
    Refused { code: ErrorCode, message: String },
    /// The control plane answered with something else than `Done`.
    #[error("unexpected answer {answer:?}")]
    Unexpected { answer: FrameType },
}

impl NotDone {
    /// `Ok` for `Done`, else why not.
    fn check(answer: Response<'_>) -> Result<(), NotDone> {
        match answer {
            Response::Done => Ok(()),
            Response::Error { code, message } => Err(NotDone::Refused { code, message }),
            other => Err(NotDone::Unexpected {
                answer: other.frame_type(),
            }),
        }
    }
}

/// The thread that speaks for the broker once it runs.
pub(crate) struct ClusterAgent {
    link: ControlLink,
    id: u32,
    config: BrokerConfig,
    shard_addresses: Vec<ShardAddress>,
    shards: Vec<flume::Sender<ShardCommand>>,
    /// Whether the control plane knows this broker on the current link.
    registered: bool,
    /// Each open segment's counters at the previous report.
    last: HashMap<(String, u32), (u64, u64)>,
    last_at: Instant,
    /// A lone broker's own control plane.
    local: Option<LocalControl>,
    /// Where admin requests go.
    admin: AdminCallers,
}

impl ClusterAgent {
    pub(crate) fn new(
        joined: Joined,
        config: BrokerConfig,
        shard_addresses: Vec<ShardAddress>,
        shards: Vec<flume::Sender<ShardCommand>>,
        local: Option<LocalControl>,
    ) -> Result<ClusterAgent, EngineError> {
        let admin = AdminCallers::start(AdminCaller {
            link: joined.link.sibling(),
            broker: joined.id,
            lone: local.is_some(),
            shards: shards.clone(),
        })?;
        Ok(ClusterAgent {
            link: joined.link,
            id: joined.id,
            config,
            shard_addresses,
            shards,
            registered: true,
            last: HashMap::new(),
            last_at: Instant::now(),
            local,
            admin,
        })
    }

    /// Hand the shards' admin requests on and report load until shutdown.
    pub(crate) fn run(mut self, requests: flume::Receiver<ControlRequest>) {
        let interval = Duration::from_millis(self.config.load_report_ms);
        let sweep_interval = Duration::from_millis(self.config.payload_sweep_interval_ms);
        let mut next_report = Instant::now() + interval;
        let mut next_sweep = Instant::now() + sweep_interval;
        loop {
            let next = if self.local.is_some() {
                next_report.min(next_sweep)
            } else {
                next_report
            };
            let wait = next.saturating_duration_since(Instant::now());
            match requests.recv_timeout(wait) {
                Ok(ControlRequest::Shutdown { reply }) => {
                    let flushed = match self.local.take() {
                        // Nobody to hand the segments to: they stay this
                        // broker's, flushed, until it starts again.
                        Some(local) => {
                            let flushed = shut_down_shards(&self.shards);
                            local.server.stop();
                            flushed
                        }
                        None => {
                            self.leave();
                            shut_down_shards(&self.shards)
                        }
                    };
                    let _ = reply.send(flushed);
                    return;
                }
                Ok(request) => self.admin.pass_on(request),
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => return,
            }
            let now = Instant::now();
            if now >= next_report {
                self.report();
                next_report = Instant::now() + interval;
            }
            if now >= next_sweep {
                let grace = Duration::from_millis(self.config.payload_grace_ms);
                if let Some(local) = &mut self.local {
                    local.sweep_payloads(grace);
                }
                next_sweep = Instant::now() + sweep_interval;
            }
        }
    }

    fn ensure_registered(&mut self) -> Result<(), RegisterError> {
        if self.registered && self.link.is_connected() {
            return Ok(());
        }
        let (id, _) = register(
            &mut self.link,
            &self.config,
            Some(self.id),
            &self.shard_addresses,
        )?;
        log::info!("registered again with the control plane as broker {id}");
        self.registered = true;
        Ok(())
    }

    /// Every open segment's rates since the previous report. The first
    /// one, before the broker serves anyone, is what makes the control
    /// plane send this broker every topic's layout; its answer comes once
    /// those were applied (the shards recovered and opened their segments).
    pub(crate) fn report(&mut self) {
        let figures = collect(&self.shards, false);
        let now = Instant::now();
        let elapsed_ms = now.duration_since(self.last_at).as_millis().max(1) as u64;
        self.last_at = now;
        let mut segments = Vec::with_capacity(figures.len());
        let mut last = HashMap::with_capacity(figures.len());
        for f in figures {
            let key = (f.topic, f.segment);
            let (bytes, records) = self.last.get(&key).copied().unwrap_or((0, 0));
            let per_s = |now: u64, before: u64| now.saturating_sub(before) * 1000 / elapsed_ms;
            segments.push(SegmentLoadReport {
                topic: key.0.clone(),
                segment: key.1,
                bytes_per_s: per_s(f.appended_bytes, bytes),
                records_per_s: per_s(f.appended_records, records),
                next_offset: f.next_offset,
                first_append_ms: f.first_append_ms,
                lost_records: f.lost_records,
                followers: f.followers,
            });
            last.insert(key, (f.appended_bytes, f.appended_records));
        }
        self.last = last;
        if let Err(e) = self.send_report(segments) {
            log::warn!("load report: report {e}");
        }
    }

    fn send_report(&mut self, segments: Vec<SegmentLoadReport>) -> Result<(), NotDone> {
        self.ensure_registered()?;
        let request = ControlPortRequest::from(MembershipRequest::LoadReport {
            broker: self.id,
            segments,
        });
        let (frame_type, payload) = self.link.call(&request).inspect_err(|_| {
            self.registered = false;
        })?;
        match Response::decode(frame_type, &payload)? {
            Response::Done => Ok(()),
            Response::Error {
                code: ErrorCode::NotOwner,
                message,
            } => {
                // The control plane does not know this broker (it restarted,
                // or declared it dead): register and report again.
                log::warn!("the control plane does not know this broker ({message})");
                self.registered = false;
                self.ensure_registered()?;
                let (frame_type, payload) = self.link.call(&request)?;
                NotDone::check(Response::decode(frame_type, &payload)?)
            }
            other => NotDone::check(other),
        }
    }

    /// Tell the control plane this broker goes: it seals the broker's
    /// segments (here, through shard 0) and opens them elsewhere, then
    /// answers. If it cannot be reached the broker still stops; the control
    /// plane declares it dead after its silence limit.
    fn leave(&mut self) {
        let result = self.leave_call();
        match result {
            Ok(()) => log::info!("left the cluster: segments moved to other brokers"),
            Err(e) => log::warn!("leaving the cluster: {e}"),
        }
    }

    fn leave_call(&mut self) -> Result<(), NotDone> {
        self.ensure_registered()?;
        let (frame_type, payload) = self
            .link
            .call(&MembershipRequest::LeaveBroker { broker: self.id }.into())?;
        NotDone::check(Response::decode(frame_type, &payload)?)
    }
}

/// The admin callers, fed through one bounded queue. Dropping this closes
/// the queue: each caller ends once the requests queued before are
/// answered. They are not joined: a call in flight when the broker stops
/// is abandoned, and its thread ends with it (within [`ANSWER_TIMEOUT`]).
struct AdminCallers {
    queue: flume::Sender<ControlRequest>,
}

impl AdminCallers {
    /// Start [`ADMIN_CALLERS`] threads, each with a link like `caller`'s.
    fn start(caller: AdminCaller) -> Result<AdminCallers, EngineError> {
        let (queue, requests) = flume::bounded(ADMIN_REQUESTS_QUEUED_MAX);
        for index in 0..ADMIN_CALLERS {
            let caller = AdminCaller {
                link: caller.link.sibling(),
                shards: caller.shards.clone(),
                ..caller
            };
            let requests = requests.clone();
            std::thread::Builder::new()
                .name(format!("kelp-control-admin-{index}"))
                .spawn(move || caller.run(requests))
                .map_err(|e| EngineError::io("spawn control admin thread", "", e))?;
        }
        Ok(AdminCallers { queue })
    }

    /// Hand an admin request to a caller; with every caller busy and the
    /// queue full, answer it at once rather than hold up the agent.
    fn pass_on(&self, request: ControlRequest) {
        match self.queue.try_send(request) {
            Ok(()) => {}
            Err(flume::TrySendError::Full(request)) => refuse(
                request,
                ServeError::new(
                    ErrorCode::Busy,
                    format!(
                        "{ADMIN_CALLERS} admin requests wait for the control plane and \
                         {ADMIN_REQUESTS_QUEUED_MAX} more are queued: try again later"
                    ),
                ),
            ),
            Err(flume::TrySendError::Disconnected(request)) => refuse(
                request,
                ServeError::new(ErrorCode::Internal, "the broker's admin callers are gone"),
            ),
        }
    }
}

/// One thread that passes admin requests to the control plane on a
/// connection of its own. It needs the broker registered no more than any
/// client does: the control plane answers admin requests from anyone.
struct AdminCaller {
    link: ControlLink,
    broker: u32,
    /// A lone broker's topic descriptions name no shard addresses.
    lone: bool,
    /// The shards' command channels, for the live figures of a describe.
    shards: Vec<flume::Sender<ShardCommand>>,
}

impl AdminCaller {
    fn run(mut self, requests: flume::Receiver<ControlRequest>) {
        while let Ok(request) = requests.recv() {
            self.answer(request);
        }
    }

    /// Answer one request of the shards (or the Kafka gateway) through the
    /// control plane.
    fn answer(&mut self, request: ControlRequest) {
        match request {
            ControlRequest::Forward {
                frame_type,
                payload,
                reply,
            } => {
                let _ = reply.send(self.forward(frame_type, &payload));
            }
            ControlRequest::CreateTopic {
                topic,
                segments,
                replicas,
                reply,
            } => {
                let answer = self.ask(AdminRequest::CreateTopic {
                    topic,
                    segments,
                    replicas,
                });
                let _ = reply.send(answer.and_then(|r| self.topic_info(r)));
            }
            ControlRequest::DescribeTopic { topic, reply } => {
                let answer = self.ask(AdminRequest::DescribeTopic { topic });
                let _ = reply.send(answer.and_then(|r| self.topic_info(r)));
            }
            ControlRequest::DeleteTopic { topic, reply } => {
                let answer = self.ask(AdminRequest::DeleteTopic { topic });
                let _ = reply.send(answer.and_then(|r| match r {
                    Response::Done => Ok(()),
                    other => Err(unexpected(&other)),
                }));
            }
            ControlRequest::ListTopics { reply } => {
                let answer = self.ask(AdminRequest::ListTopics);
                let _ = reply.send(answer.and_then(|r| match r {
                    Response::TopicList { topics } => Ok(topics),
                    other => Err(unexpected(&other)),
                }));
            }
            // The agent keeps it.
            ControlRequest::Shutdown { reply } => {
                let _ = reply.send(Err(ShutdownError::AlreadyStopping));
            }
        }
    }

    /// Ask the control plane; its error answers become errors.
    fn ask(&mut self, request: AdminRequest) -> Result<Response<'static>, ServeError> {
        let (frame_type, payload) = self.link.call(&request.into()).map_err(unreachable)?;
        let response = Response::decode(frame_type, &payload).map_err(|e| {
            ServeError::new(
                ErrorCode::Internal,
                format!("the control plane's answer does not decode: {e}"),
            )
        })?;
        match response {
            Response::Error { code, message } => Err(ServeError::new(code, message)),
            Response::Topic(info) => Ok(Response::Topic(info)),
            Response::TopicList { topics } => Ok(Response::TopicList { topics }),
            Response::Done => Ok(Response::Done),
            other => Err(unexpected(&other)),
        }
    }

    /// A topic's description from the control plane, completed with the
    /// live figures of this broker's own segments (the control plane knows
    /// them as of the last load report).
    fn topic_info(&self, response: Response<'_>) -> Result<TopicInfo, ServeError> {
        let Response::Topic(mut info) = response else {
            return Err(unexpected(&response));
        };
        let figures: HashMap<u32, SegmentLoadFigures> = collect(&self.shards, true)
            .into_iter()
            .filter(|f| f.topic == info.name)
            .map(|f| (f.segment, f))
            .collect();
        for segment in &mut info.segments {
            if segment.broker != Some(self.broker) {
                continue;
            }
            if let Some(f) = figures.get(&segment.id) {
                segment.next_offset = f.next_offset;
                segment.appended_bytes = f.appended_bytes;
                segment.first_append_ms = f.first_append_ms;
                segment.lost_records = f.lost_records;
            }
            // A lone broker's segments are on the shards of the broker the
            // client asked.
            if self.lone {
                segment.address = None;
            }
        }
        Ok(info)
    }

    /// Pass a client's admin request to the control plane, answer and all.
    fn forward(&mut self, frame_type: FrameType, payload: &[u8]) -> Result<Answer, ServeError> {
        self.link.call_raw(frame_type, payload).map_err(unreachable)
    }
}

/// Answer `request` with `error`.
fn refuse(request: ControlRequest, error: ServeError) {
    match request {
        ControlRequest::Forward { reply, .. } => {
            let _ = reply.send(Err(error));
        }
        ControlRequest::CreateTopic { reply, .. } | ControlRequest::DescribeTopic { reply, .. } => {
            let _ = reply.send(Err(error));
        }
        ControlRequest::DeleteTopic { reply, .. } => {
            let _ = reply.send(Err(error));
        }
        ControlRequest::ListTopics { reply } => {
            let _ = reply.send(Err(error));
        }
        ControlRequest::Shutdown { reply } => {
            let _ = reply.send(Err(ShutdownError::Refused {
                code: error.code,
                message: error.message,
            }));
        }
    }
}

/// Every shard's open segments' counters (and with `sealed` those of the
/// sealed segments they hold).
fn collect(shards: &[flume::Sender<ShardCommand>], sealed: bool) -> Vec<SegmentLoadFigures> {
    let mut waiting = Vec::with_capacity(shards.len());
    for shard in shards {
        let (tx, rx) = flume::bounded(1);
        if shard
            .send(ShardCommand::ReportLoad { sealed, reply: tx })
            .is_ok()
        {
            waiting.push(rx);
        }
    }
    waiting
        .into_iter()
        .filter_map(|rx| rx.recv_timeout(SHARD_REPORT_TIMEOUT).ok())
        .flatten()
        .collect()
}

fn unreachable(e: ControlLinkError) -> ServeError {
    ServeError::new(
        ErrorCode::ControlUnavailable,
        format!("the control plane is unreachable: {e}"),
    )
}

fn unexpected(response: &Response<'_>) -> ServeError {
    ServeError::new(
        ErrorCode::Internal,
        format!(
            "unexpected answer from the control plane: {:?}",
            response.frame_type()
        ),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::net::TcpListener;

    use super::*;

    /// An address nothing listens on.
    fn closed_address() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    }

    /// A control plane that answers its first request with `answer`.
    fn answering(answer: Response<'static>) -> (String, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let served = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut payload = Vec::new();
            let header = read_frame(&mut stream, &mut payload).unwrap().unwrap();
            let mut frame = Vec::new();
            answer.encode(header.request_id, &mut frame);
            stream.write_all(&frame).unwrap();
        });
        (address, served)
    }

    fn register_with(answer: Response<'static>) -> Result<(u32, String), RegisterError> {
        let (address, served) = answering(answer);
        let mut link = ControlLink::new(vec![address]);
        let shards = [ShardAddress {
            tcp: "127.0.0.1:1".into(),
            quic: "127.0.0.1:1".into(),
        }];
        let result = register(&mut link, &BrokerConfig::default(), Some(3), &shards);
        served.join().unwrap();
        result
    }

    #[test]
    fn control_addresses_are_checked() {
        assert_eq!(parse_control_addresses("a:1, b:2").unwrap(), ["a:1", "b:2"]);
        let err = parse_control_addresses("a:1,,b:2").unwrap_err();
        assert!(
            matches!(&err, ConfigError::ControlAddressEmpty { list } if list == "a:1,,b:2"),
            "{err:?}"
        );
        let many = vec!["a:1"; CONTROL_ADDRESSES_MAX + 1].join(",");
        let err = parse_control_addresses(&many).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::ControlAddressesTooMany { count, max: CONTROL_ADDRESSES_MAX }
                    if count == CONTROL_ADDRESSES_MAX + 1
            ),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "17 control-plane addresses: at most 16");
    }

    #[test]
    fn a_call_that_cannot_get_through_says_where() {
        let address = closed_address();
        let err = ControlLink::new(vec![address.clone()])
            .call(&AdminRequest::ListTopics.into())
            .unwrap_err();
        assert!(
            matches!(&err, ControlLinkError::Connect { address: a, .. } if *a == address),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("connect to control plane {address}: ")),
            "{err}"
        );

        let err = ControlLink::new(vec!["no port here".into()])
            .call(&AdminRequest::ListTopics.into())
            .unwrap_err();
        assert!(matches!(err, ControlLinkError::Resolve { .. }), "{err:?}");

        // Several instances, none reachable: every one is tried, and the
        // last failure is kept.
        let err = ControlLink::new(vec![closed_address(), closed_address()])
            .call(&AdminRequest::ListTopics.into())
            .unwrap_err();
        let ControlLinkError::NoLeader { last } = &err else {
            panic!("expected NoLeader, got {err:?}")
        };
        assert!(
            matches!(**last, ControlLinkError::Connect { .. }),
            "{last:?}"
        );
        assert!(
            err.to_string()
                .starts_with("no control-plane instance leads: connect to control plane "),
            "{err}"
        );
    }

    #[test]
    fn a_connection_closed_between_calls_is_replaced() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        // Each connection answers one request and is closed, as by an
        // instance that restarted between two calls.
        let served = std::thread::spawn(move || {
            for _ in 0..2 {
                let (mut stream, _) = listener.accept().unwrap();
                let mut payload = Vec::new();
                let header = read_frame(&mut stream, &mut payload).unwrap().unwrap();
                let mut frame = Vec::new();
                Response::Done.encode(header.request_id, &mut frame);
                stream.write_all(&frame).unwrap();
            }
        });
        let mut link = ControlLink::new(vec![address]);
        for _ in 0..2 {
            let (frame_type, _) = link.call(&AdminRequest::ListTopics.into()).unwrap();
            assert_eq!(frame_type, FrameType::DoneResponse);
        }
        served.join().unwrap();
    }

    #[test]
    fn a_refused_registration_says_why() {
        let err = register_with(Response::Error {
            code: ErrorCode::InvalidArgument,
            message: "no shards".into(),
        })
        .unwrap_err();
        assert!(
            matches!(&err, RegisterError::Refused { code: ErrorCode::InvalidArgument, message }
                if message == "no shards"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "the control plane refused to register: InvalidArgument: no shards"
        );

        let err = register_with(Response::Registered {
            id: 4,
            filer: "file:///f".into(),
        })
        .unwrap_err();
        assert!(
            matches!(err, RegisterError::IdChanged { kept: 3, given: 4 }),
            "{err:?}"
        );

        let err = register_with(Response::Done).unwrap_err();
        assert!(
            matches!(
                err,
                RegisterError::Unexpected {
                    answer: FrameType::DoneResponse
                }
            ),
            "{err:?}"
        );

        let joined = ConfigError::Join {
            source: RegisterError::IdChanged { kept: 3, given: 4 },
        };
        assert_eq!(
            EngineError::from(joined).to_string(),
            "invalid configuration: joining the cluster: the control plane registered broker 3 \
             as 4"
        );
    }

    #[test]
    fn probe_errors_read_as_before() {
        assert_eq!(ProbeError::NotLeader.to_string(), "no longer leads");
        let err = ControlLinkError::Probe {
            address: "c:1".into(),
            source: ProbeError::Closed,
        };
        assert_eq!(
            err.to_string(),
            "control plane c:1: closed a probe without answering"
        );
    }
}
