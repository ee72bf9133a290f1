//! The client: shard discovery, one lazily opened connection per shard
//! (of the bootstrap broker, and of any other broker a segment's address
//! names), and the admin requests.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use wire::message::{BrokerStatus, SegmentInfo, TopicInfo};
use wire::{AdminRequest, BrokerPortRequest, DataRequest, ErrorCode, FetchFrom, Response};

use crate::connection::{Connection, ConnectionLimits};
use crate::error::ClientError;
use crate::frame_io::ResponseFrame;
use crate::layout::{Layout, Target};
use crate::payload::PayloadRoute;
use crate::producer::{Producer, ProducerConfig};
use crate::subscriber::{SubscribeOptions, Subscriber};
use crate::transport::{Dialer, Transport};

/// Default for [`ClientOptions::in_flight_requests_max`].
pub const IN_FLIGHT_REQUESTS_MAX_DEFAULT: usize = 1024;
/// Default for [`ClientOptions::write_queue_frames_max`].
pub const WRITE_QUEUE_FRAMES_MAX_DEFAULT: usize = 64;
/// Default for [`ClientOptions::request_timeout_ms`].
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Default for [`ClientOptions::connect_timeout_ms`].
pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Connections a client keeps to shards of brokers other than the one it
/// bootstrapped from (a cluster's segments live on many brokers); beyond
/// this the least useful one (a failed one, else any) is forgotten, and
/// closes once its last user is done with it.
pub const PEER_CONNECTIONS_MAX: usize = 256;
/// Most brokers a bootstrap list (`A,B,C`) may name.
pub const BOOTSTRAP_BROKERS_MAX: usize = 64;

/// Settings of a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Requests awaiting an answer on one connection; a request waits for
    /// a free slot beyond this.
    pub in_flight_requests_max: usize,
    /// Frames queued for writing on one connection.
    pub write_queue_frames_max: usize,
    /// How long to wait for an answer (a fetch adds its `max_wait_ms`).
    pub request_timeout_ms: u64,
    /// How long to wait for a connection (TCP connect or QUIC handshake).
    pub connect_timeout_ms: u64,
    /// CA certificate (DER or PEM) to verify the broker's QUIC certificate
    /// with (a broker's self-signed one is `<data-dir>/tls/cert.der`).
    /// Without it a QUIC client does not connect, unless `tls_insecure`.
    pub tls_ca_file: Option<PathBuf>,
    /// Accept any QUIC server certificate when no CA is given: the broker
    /// is then not authenticated (a warning says so). Off by default.
    pub tls_insecure: bool,
    /// The name the broker's certificate must carry (default
    /// [`KELP_SERVER_NAME`](crate::KELP_SERVER_NAME), `localhost`, which a
    /// broker's self-signed certificate carries).
    pub tls_server_name: Option<String>,
    /// The broker's filer directory (`<data dir>/filer`), if this client
    /// can reach it: payloads passed by reference are then written and
    /// read there directly, and the broker never carries their bytes.
    /// Without it they go through the broker's upload path.
    pub payload_dir: Option<PathBuf>,
    /// The broker's filer as a URL (`s3://BUCKET/PREFIX`, or
    /// `file:///dir`), for a client with its own credentials to the store
    /// (the standard AWS environment): payloads are then written and read
    /// there directly, as with `payload_dir`. At most one of the two.
    pub payload_filer: Option<String>,
    /// The user and password every connection authenticates with (a
    /// broker started with `--auth`); `None` authenticates no connection.
    pub credentials: Option<auth::Credentials>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            in_flight_requests_max: IN_FLIGHT_REQUESTS_MAX_DEFAULT,
            write_queue_frames_max: WRITE_QUEUE_FRAMES_MAX_DEFAULT,
            request_timeout_ms: REQUEST_TIMEOUT_MS_DEFAULT,
            connect_timeout_ms: CONNECT_TIMEOUT_MS_DEFAULT,
            tls_ca_file: None,
            tls_insecure: false,
            tls_server_name: None,
            payload_dir: None,
            payload_filer: None,
            credentials: None,
        }
    }
}

/// A connection to one kelp broker: cheap to clone, all clones share the
/// connections.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    options: ClientOptions,
    dialer: Dialer,
    /// The broker the client bootstrapped from: its shards are `shards`.
    bootstrap: SocketAddr,
    /// Every broker of the bootstrap list, as given.
    brokers: Vec<String>,
    /// Connection for admin requests (any shard of any broker answers
    /// them), and where it goes: the bootstrap broker until it cannot be
    /// reached, then the next of `brokers` that can.
    admin: Mutex<AdminSlot>,
    pub(crate) shards: Vec<SocketAddr>,
    /// One slot per shard, filled on first use and refilled after a
    /// connection fails.
    connections: Vec<Mutex<Option<Arc<Connection>>>>,
    /// Shards of other brokers, by address, at most
    /// [`PEER_CONNECTIONS_MAX`]; each slot is filled on first use.
    peers: std::sync::Mutex<HashMap<SocketAddr, PeerSlot>>,
    pub(crate) payloads: PayloadRoute,
}

type PeerSlot = Arc<Mutex<Option<Arc<Connection>>>>;

/// A bootstrap broker reached: its address, the dialer, the connection
/// and the shards it listed.
struct Bootstrapped {
    bootstrap: SocketAddr,
    dialer: Dialer,
    admin: Arc<Connection>,
    listed: Vec<wire::message::ShardAddress>,
}

/// The admin connection and the address it is (or was last) open to.
struct AdminSlot {
    conn: Option<Arc<Connection>>,
    addr: SocketAddr,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("bootstrap", &self.inner.bootstrap)
            .field("shards", &self.inner.shards)
            .finish()
    }
}

/// How long [`Client::close`] waits for the broker to learn of the close.
const CLOSE_WAIT: Duration = Duration::from_millis(500);

impl Client {
    /// Close every connection of this client (and of its clones, producers
    /// and subscribers) and wait a bounded moment until the broker was
    /// told. Over QUIC a process that exits without this leaves its
    /// connections open on the broker until their idle timeout; over TCP
    /// the kernel tells the broker anyway.
    pub async fn close(&self) {
        if let Dialer::Quic(endpoint, _) = &self.inner.dialer {
            endpoint.close(0u32.into(), b"client closed");
            let _ = tokio::time::timeout(CLOSE_WAIT, endpoint.wait_idle()).await;
        }
    }

    /// Connect to the broker at `broker` (`host:port`), ask it for its
    /// shards, and return a client that opens a connection per shard when
    /// it first needs one. `broker` may list several brokers of one
    /// cluster, `A,B,C` (at most [`BOOTSTRAP_BROKERS_MAX`]): the first that
    /// answers is the bootstrap broker, and admin requests (layouts, topic
    /// changes) fall back to the others, in order, when the one they go to
    /// cannot be reached.
    pub async fn connect(
        broker: &str,
        transport: Transport,
        options: ClientOptions,
    ) -> Result<Client, ClientError> {
        let payloads = PayloadRoute::open(
            options.payload_dir.as_deref(),
            options.payload_filer.as_deref(),
        )?;
        let brokers = bootstrap_list(broker)?;
        let mut last = None;
        for candidate in &brokers {
            match Client::bootstrap(candidate, transport, &options).await {
                Ok(reached) => {
                    return Client::assemble(options, transport, brokers, reached, payloads).await;
                }
                Err(e) => {
                    if brokers.len() > 1 {
                        log::warn!("bootstrap broker {candidate}: {e}");
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Connect {
            addr: broker.to_owned(),
            reason: "no broker to connect to".into(),
        }))
    }

    /// Reach `broker` and ask it for its shards.
    async fn bootstrap(
        broker: &str,
        transport: Transport,
        options: &ClientOptions,
    ) -> Result<Bootstrapped, ClientError> {
        let bootstrap = resolve(broker).await?;
        let trust = crate::transport::Trust {
            ca_file: options.tls_ca_file.as_deref(),
            insecure: options.tls_insecure,
            server_name: options.tls_server_name.as_deref(),
        };
        let dialer = Dialer::new(transport, bootstrap, trust)?;
        let limits = limits(options);
        let connect_timeout = Duration::from_millis(options.connect_timeout_ms);
        let admin = Arc::new(
            dialer
                .dial(
                    bootstrap,
                    limits,
                    connect_timeout,
                    options.credentials.as_ref(),
                )
                .await?,
        );
        let frame = admin
            .call(
                &DataRequest::Shards.into(),
                "asking the broker for its shards",
                Duration::from_millis(options.request_timeout_ms),
            )
            .await?;
        let answer = frame.response().map_err(|e| match e {
            // Whatever answered there is not a broker (a control plane
            // says so).
            ClientError::Broker {
                code: ErrorCode::InvalidArgument,
                message,
            } => ClientError::Connect {
                addr: broker.to_owned(),
                reason: message,
            },
            other => other,
        })?;
        let listed = match answer {
            Response::Shards { shards } => shards,
            _ => return Err(unexpected(&frame, "shards")),
        };
        if listed.is_empty() {
            return Err(ClientError::Layout("the broker lists no shards".into()));
        }
        Ok(Bootstrapped {
            bootstrap,
            dialer,
            admin,
            listed,
        })
    }

    /// The client over the bootstrap broker's connection and shards.
    async fn assemble(
        options: ClientOptions,
        transport: Transport,
        brokers: Vec<String>,
        reached: Bootstrapped,
        payloads: PayloadRoute,
    ) -> Result<Client, ClientError> {
        let Bootstrapped {
            bootstrap,
            dialer,
            admin,
            listed,
        } = reached;
        let mut shards = Vec::with_capacity(listed.len());
        for shard in &listed {
            let advertised = match transport {
                Transport::Tcp | Transport::Tls => &shard.tcp,
                Transport::Quic => &shard.quic,
            };
            let mut addr = resolve(advertised).await?;
            // A broker listening on 0.0.0.0 advertises that; reach it the
            // way the bootstrap address did.
            if addr.ip().is_unspecified() {
                addr.set_ip(bootstrap.ip());
            }
            shards.push(addr);
        }
        let connections = shards
            .iter()
            .map(|addr| Mutex::new((*addr == bootstrap).then(|| Arc::clone(&admin))))
            .collect();
        Ok(Client {
            inner: Arc::new(ClientInner {
                options,
                dialer,
                bootstrap,
                brokers,
                admin: Mutex::new(AdminSlot {
                    conn: Some(admin),
                    addr: bootstrap,
                }),
                shards,
                connections,
                peers: std::sync::Mutex::new(HashMap::new()),
                payloads,
            }),
        })
    }

    /// The address of each shard, in the broker's order (a segment's
    /// `shard` indexes this list).
    pub fn shard_addresses(&self) -> &[SocketAddr] {
        &self.inner.shards
    }

    /// Create a topic `namespace/name` with `segments` segments splitting
    /// the key-hash ring evenly, each kept on the cluster's default number
    /// of brokers (1 today).
    pub async fn create_topic(&self, topic: &str, segments: u32) -> Result<TopicInfo, ClientError> {
        self.create_topic_with_replicas(topic, segments, 0).await
    }

    /// [`Client::create_topic`], each segment kept on `replicas` brokers
    /// (its owner and `replicas - 1` followers; 0: the default). More
    /// than there are live brokers is refused.
    pub async fn create_topic_with_replicas(
        &self,
        topic: &str,
        segments: u32,
        replicas: u8,
    ) -> Result<TopicInfo, ClientError> {
        self.topic_call(
            &AdminRequest::CreateTopic {
                topic: topic.to_owned(),
                segments,
                replicas,
            }
            .into(),
            "creating a topic",
        )
        .await
    }

    /// Delete a topic and its data.
    pub async fn delete_topic(&self, topic: &str) -> Result<(), ClientError> {
        let frame = self
            .admin_call(
                &AdminRequest::DeleteTopic {
                    topic: topic.to_owned(),
                }
                .into(),
                "deleting a topic",
            )
            .await?;
        match frame.response()? {
            Response::Done => Ok(()),
            _ => Err(unexpected(&frame, "done")),
        }
    }

    /// The names of every topic.
    pub async fn list_topics(&self) -> Result<Vec<String>, ClientError> {
        let frame = self
            .admin_call(&AdminRequest::ListTopics.into(), "listing topics")
            .await?;
        match frame.response()? {
            Response::TopicList { topics } => Ok(topics),
            _ => Err(unexpected(&frame, "topic list")),
        }
    }

    /// A topic's layout: its segments, their ranges, owners and offsets.
    pub async fn describe_topic(&self, topic: &str) -> Result<TopicInfo, ClientError> {
        self.topic_call(
            &AdminRequest::DescribeTopic {
                topic: topic.to_owned(),
            }
            .into(),
            "describing a topic",
        )
        .await
    }

    /// The layout of `topic` as the broker behind `target` holds it, asked
    /// of that broker alone (no control plane): how a subscriber that read
    /// a sealed segment to its end finds the successors.
    pub(crate) async fn held_layout(
        &self,
        target: Target,
        topic: &str,
    ) -> Result<TopicInfo, ClientError> {
        let conn = self.connection_to(target).await?;
        let frame = conn
            .call(
                &DataRequest::HeldLayout {
                    topic: topic.to_owned(),
                }
                .into(),
                "asking a broker for its layout",
                self.request_timeout(),
            )
            .await?;
        topic_answer(&frame)
    }

    /// Seal open segment `segment` of `topic` and open `pieces` successors
    /// over equal parts of its range (a cluster's control plane does it;
    /// any broker forwards the request). Returns the layout after.
    pub async fn split_segment(
        &self,
        topic: &str,
        segment: u32,
        pieces: u32,
    ) -> Result<TopicInfo, ClientError> {
        self.topic_call(
            &AdminRequest::SplitSegment {
                topic: topic.to_owned(),
                segment,
                pieces,
            }
            .into(),
            "splitting a segment",
        )
        .await
    }

    /// Seal the adjacent open segments `a` and `b` of `topic` and open one
    /// successor over both ranges. Returns the layout after.
    pub async fn merge_segments(
        &self,
        topic: &str,
        a: u32,
        b: u32,
    ) -> Result<TopicInfo, ClientError> {
        self.topic_call(
            &AdminRequest::MergeSegments {
                topic: topic.to_owned(),
                a,
                b,
            }
            .into(),
            "merging segments",
        )
        .await
    }

    /// Seal open segment `segment` of `topic` and reopen its range on
    /// broker `to` (`None`: the control plane picks the least-loaded other
    /// broker). Returns the layout after.
    pub async fn move_segment(
        &self,
        topic: &str,
        segment: u32,
        to: Option<u32>,
    ) -> Result<TopicInfo, ClientError> {
        self.topic_call(
            &AdminRequest::MoveSegment {
                topic: topic.to_owned(),
                segment,
                to,
            }
            .into(),
            "moving a segment",
        )
        .await
    }

    /// Replace the scaling policy of `topic` by `policy_json` (the JSON of
    /// `control::ScalingPolicy`); an empty string removes it. Returns the
    /// layout after.
    pub async fn set_policy(
        &self,
        topic: &str,
        policy_json: &str,
    ) -> Result<TopicInfo, ClientError> {
        self.topic_call(
            &AdminRequest::SetPolicy {
                topic: topic.to_owned(),
                policy: policy_json.to_owned(),
            }
            .into(),
            "setting a scaling policy",
        )
        .await
    }

    /// The brokers of the cluster, with their shards and load.
    pub async fn list_brokers(&self) -> Result<Vec<BrokerStatus>, ClientError> {
        let frame = self
            .admin_call(&AdminRequest::ListBrokers.into(), "listing brokers")
            .await?;
        match frame.response()? {
            Response::Brokers { brokers } => Ok(brokers),
            _ => Err(unexpected(&frame, "brokers")),
        }
    }

    /// An admin request answered with a topic's layout.
    async fn topic_call(
        &self,
        request: &BrokerPortRequest<'_>,
        operation: &'static str,
    ) -> Result<TopicInfo, ClientError> {
        let frame = self.admin_call(request, operation).await?;
        topic_answer(&frame)
    }

    /// A producer id for an idempotent producer (`InitProducer`): never
    /// handed out before, by any broker of the cluster. Its epoch is 0.
    pub async fn init_producer(&self) -> Result<u64, ClientError> {
        let frame = self
            .admin_call(
                &DataRequest::InitProducer.into(),
                "asking for a producer id",
            )
            .await?;
        match frame.response()? {
            Response::Producer { producer_id, .. } => Ok(producer_id),
            _ => Err(unexpected(&frame, "producer")),
        }
    }

    /// A producer for `topic` that routes each record by its key.
    pub async fn producer(
        &self,
        topic: &str,
        config: ProducerConfig,
    ) -> Result<Producer, ClientError> {
        Producer::start(self.clone(), topic, config).await
    }

    /// Read every segment of `topic` starting at `from`.
    pub async fn subscribe(
        &self,
        topic: &str,
        from: FetchFrom,
        options: SubscribeOptions,
    ) -> Result<Subscriber, ClientError> {
        Subscriber::start(self.clone(), topic, from, options, None).await
    }

    /// Read only the segments `segments` of `topic`, each from `from`: a
    /// sealed one to its end, an open one as it grows; their successors
    /// are not followed. An id the topic never had is an error.
    pub async fn subscribe_segments(
        &self,
        topic: &str,
        segments: &[u32],
        from: FetchFrom,
        options: SubscribeOptions,
    ) -> Result<Subscriber, ClientError> {
        Subscriber::start(self.clone(), topic, from, options, Some(segments)).await
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.inner.options.request_timeout_ms)
    }

    async fn admin_call(
        &self,
        request: &BrokerPortRequest<'_>,
        operation: &'static str,
    ) -> Result<ResponseFrame, ClientError> {
        let mut gone = None;
        // A request that only reads is asked again, of the next reachable
        // broker, when its broker went away mid-call (it left or died), at
        // most once per broker of the list: a broker killed a moment ago
        // may still complete a connection (its listening socket outlives
        // the process until the kernel has torn down its io_uring) and
        // then reset it. One that changes something is asked once: it may
        // have been carried out, so the error is the caller's to judge.
        let asks = if only_reads(request) {
            1 + self.inner.brokers.len()
        } else {
            1
        };
        let mut ask = 1;
        loop {
            let (conn, addr) = {
                let mut slot = self.inner.admin.lock().await;
                (self.admin_connection(&mut slot, gone).await?, slot.addr)
            };
            let result = conn.call(request, operation, self.request_timeout()).await;
            let broker_gone = matches!(&result, Err(ClientError::Io { .. } | ClientError::Closed));
            if !broker_gone || ask >= asks || self.inner.brokers.len() < 2 {
                return result;
            }
            gone = Some(addr);
            ask += 1;
        }
    }

    /// The admin connection, reopened if it failed: to where it went, else
    /// to the first broker of the bootstrap list that can be reached. A
    /// broker that just went away mid-call (`gone`) is tried last.
    async fn admin_connection(
        &self,
        slot: &mut AdminSlot,
        gone: Option<SocketAddr>,
    ) -> Result<Arc<Connection>, ClientError> {
        let addr = slot.addr;
        let mut first = None;
        if gone == Some(addr) {
            slot.conn = None;
        } else {
            let e = match self.fresh(&mut slot.conn, addr).await {
                Ok(conn) => return Ok(conn),
                Err(e) => e,
            };
            if self.inner.brokers.len() < 2 {
                return Err(e);
            }
            first = Some(e);
        }
        for broker in &self.inner.brokers {
            let Ok(other) = resolve(broker).await else {
                continue;
            };
            if other == addr {
                continue;
            }
            if let Ok(conn) = self.fresh(&mut slot.conn, other).await {
                match &first {
                    Some(e) => {
                        log::info!("admin requests go to {other}: {addr} cannot be reached ({e})")
                    }
                    None => log::info!("admin requests go to {other}: {addr} went away"),
                }
                slot.addr = other;
                return Ok(conn);
            }
        }
        match first {
            Some(e) => Err(e),
            // Nobody else answers: the broker that went away, once more.
            None => self.fresh(&mut slot.conn, addr).await,
        }
    }

    /// Where a segment's traffic goes: its `address` if it names one (a
    /// shard of the bootstrap broker counts as that shard), else shard
    /// `shard` of the bootstrap broker.
    pub(crate) async fn target(&self, segment: &SegmentInfo) -> Result<Target, ClientError> {
        let Some(address) = &segment.address else {
            return Ok(Target::Shard(segment.shard));
        };
        let advertised = match self.inner.dialer.transport() {
            Transport::Tcp | Transport::Tls => &address.tcp,
            Transport::Quic => &address.quic,
        };
        let addr = self.reachable(advertised).await?;
        Ok(match self.inner.shards.iter().position(|a| *a == addr) {
            Some(i) => Target::Shard(u16::try_from(i).unwrap_or(u16::MAX)),
            None => Target::Address(addr),
        })
    }

    /// The routing table of `topic`, with each open segment's target.
    pub(crate) async fn layout(&self, topic: &TopicInfo) -> Result<Layout, ClientError> {
        let mut targets = Vec::with_capacity(topic.segments.len());
        for segment in &topic.segments {
            targets.push(if segment.sealed {
                Target::Shard(segment.shard)
            } else {
                self.target(segment).await?
            });
        }
        Layout::with_targets(topic, &targets)
    }

    /// `host:port` resolved, an unspecified IP replaced by the bootstrap's.
    async fn reachable(&self, advertised: &str) -> Result<SocketAddr, ClientError> {
        let mut addr = match advertised.parse::<SocketAddr>() {
            Ok(a) => a,
            Err(_) => resolve(advertised).await?,
        };
        if addr.ip().is_unspecified() {
            addr.set_ip(self.inner.bootstrap.ip());
        }
        Ok(addr)
    }

    /// The connection to `target`, opened if needed.
    pub(crate) async fn connection_to(
        &self,
        target: Target,
    ) -> Result<Arc<Connection>, ClientError> {
        match target {
            Target::Shard(shard) => self.connection(shard).await,
            Target::Address(addr) => {
                let slot = self.peer_slot(addr);
                let mut slot = slot.lock().await;
                self.fresh(&mut slot, addr).await
            }
        }
    }

    /// The slot of a shard of another broker, made if new; makes room by
    /// forgetting a failed connection, else any other.
    fn peer_slot(&self, addr: SocketAddr) -> PeerSlot {
        let mut peers = self.inner.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = peers.get(&addr) {
            return Arc::clone(slot);
        }
        if peers.len() >= PEER_CONNECTIONS_MAX {
            let failed = peers.iter().find_map(|(a, slot)| {
                let conn = slot.try_lock().ok()?;
                conn.as_ref().is_none_or(|c| c.is_failed()).then_some(*a)
            });
            let victim = failed.or_else(|| peers.keys().next().copied());
            if let Some(victim) = victim {
                peers.remove(&victim);
            }
        }
        let slot = PeerSlot::default();
        peers.insert(addr, Arc::clone(&slot));
        slot
    }

    /// The connection to shard `shard`, opened if needed.
    pub(crate) async fn connection(&self, shard: u16) -> Result<Arc<Connection>, ClientError> {
        let i = usize::from(shard);
        let (Some(slot), Some(addr)) = (self.inner.connections.get(i), self.inner.shards.get(i))
        else {
            return Err(ClientError::Layout(format!(
                "a segment is owned by shard {shard} but the broker lists {} shards",
                self.inner.shards.len()
            )));
        };
        let mut slot = slot.lock().await;
        self.fresh(&mut slot, *addr).await
    }

    /// The connection in `slot`, replaced by a new one if absent or failed.
    async fn fresh(
        &self,
        slot: &mut Option<Arc<Connection>>,
        addr: SocketAddr,
    ) -> Result<Arc<Connection>, ClientError> {
        if let Some(conn) = slot.as_ref().filter(|c| !c.is_failed()) {
            return Ok(Arc::clone(conn));
        }
        let conn = Arc::new(
            self.inner
                .dialer
                .dial(
                    addr,
                    limits(&self.inner.options),
                    Duration::from_millis(self.inner.options.connect_timeout_ms),
                    self.inner.options.credentials.as_ref(),
                )
                .await?,
        );
        log::debug!("connected to {}", conn.addr());
        *slot = Some(Arc::clone(&conn));
        Ok(conn)
    }
}

fn limits(options: &ClientOptions) -> ConnectionLimits {
    ConnectionLimits {
        in_flight_requests_max: options.in_flight_requests_max,
        write_queue_frames_max: options.write_queue_frames_max,
    }
}

/// The topic layout `frame` answers with.
fn topic_answer(frame: &ResponseFrame) -> Result<TopicInfo, ClientError> {
    match frame.response()? {
        Response::Topic(info) => Ok(info),
        _ => Err(unexpected(frame, "topic")),
    }
}

pub(crate) fn unexpected(frame: &ResponseFrame, expected: &'static str) -> ClientError {
    ClientError::UnexpectedResponse {
        expected,
        got: frame.header.frame_type,
    }
}

/// Resolve `host:port` to its first address.
/// The brokers of `list` (`A` or `A,B,C`): 1 to [`BOOTSTRAP_BROKERS_MAX`],
/// none empty.
fn bootstrap_list(list: &str) -> Result<Vec<String>, ClientError> {
    let brokers: Vec<String> = list.split(',').map(|b| b.trim().to_owned()).collect();
    let refuse = |reason: String| ClientError::Connect {
        addr: list.to_owned(),
        reason,
    };
    if brokers.iter().any(String::is_empty) {
        return Err(refuse("an empty broker address (write A or A,B,C)".into()));
    }
    if brokers.len() > BOOTSTRAP_BROKERS_MAX {
        return Err(refuse(format!(
            "{} brokers listed: at most {BOOTSTRAP_BROKERS_MAX}",
            brokers.len()
        )));
    }
    Ok(brokers)
}

async fn resolve(addr: &str) -> Result<SocketAddr, ClientError> {
    let connect_error = |reason: String| ClientError::Connect {
        addr: addr.to_owned(),
        reason,
    };
    tokio::net::lookup_host(addr)
        .await
        .map_err(|e| connect_error(e.to_string()))?
        .next()
        .ok_or_else(|| connect_error("the name resolves to no address".into()))
}

/// Whether an admin request only reads, so asking it twice is harmless.
fn only_reads(request: &BrokerPortRequest<'_>) -> bool {
    matches!(
        request,
        BrokerPortRequest::Data(DataRequest::Shards)
            | BrokerPortRequest::Admin(AdminRequest::ListTopics)
            | BrokerPortRequest::Admin(AdminRequest::DescribeTopic { .. })
            | BrokerPortRequest::Data(DataRequest::HeldLayout { .. })
            | BrokerPortRequest::Admin(AdminRequest::ListBrokers)
            // Asking again only hands out another id, never a repeated one.
            | BrokerPortRequest::Data(DataRequest::InitProducer)
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wire::message::ShardAddress;

    /// A client of a broker at 10.0.0.1 with two shards, never dialed.
    fn offline_client() -> Client {
        let bootstrap: SocketAddr = "10.0.0.1:7420".parse().unwrap();
        let shards = vec![bootstrap, "10.0.0.1:7421".parse().unwrap()];
        Client {
            inner: Arc::new(ClientInner {
                options: ClientOptions::default(),
                dialer: Dialer::Tcp,
                bootstrap,
                brokers: vec![bootstrap.to_string()],
                admin: Mutex::new(AdminSlot {
                    conn: None,
                    addr: bootstrap,
                }),
                connections: shards.iter().map(|_| Mutex::new(None)).collect(),
                shards,
                peers: std::sync::Mutex::new(HashMap::new()),
                payloads: PayloadRoute::Broker,
            }),
        }
    }

    fn on(tcp: &str) -> SegmentInfo {
        SegmentInfo {
            shard: 1,
            address: Some(ShardAddress {
                tcp: tcp.into(),
                quic: "10.9.9.9:1".into(),
            }),
            ..SegmentInfo::default()
        }
    }

    #[tokio::test]
    async fn segments_are_sent_where_their_address_says() {
        let client = offline_client();
        // No address: the bootstrap broker's shard.
        let local = SegmentInfo {
            shard: 1,
            ..SegmentInfo::default()
        };
        assert_eq!(client.target(&local).await.unwrap(), Target::Shard(1));
        // An address of the bootstrap broker's own shard reuses its slot.
        assert_eq!(
            client.target(&on("10.0.0.1:7421")).await.unwrap(),
            Target::Shard(1)
        );
        // Another broker's shard, by the transport's address; 0.0.0.0 is
        // reached at the bootstrap's IP.
        assert_eq!(
            client.target(&on("10.0.0.2:7430")).await.unwrap(),
            Target::Address("10.0.0.2:7430".parse().unwrap())
        );
        assert_eq!(
            client.target(&on("0.0.0.0:7500")).await.unwrap(),
            Target::Address("10.0.0.1:7500".parse().unwrap())
        );
    }

    #[test]
    fn peer_connections_are_one_per_address_and_bounded() {
        let client = offline_client();
        let addr = |i: usize| SocketAddr::from(([10, 0, 1, (i / 250) as u8], 1000 + i as u16));
        let first = client.peer_slot(addr(0));
        assert!(Arc::ptr_eq(&first, &client.peer_slot(addr(0))));
        for i in 1..PEER_CONNECTIONS_MAX + 50 {
            client.peer_slot(addr(i));
            let peers = client.inner.peers.lock().unwrap().len();
            assert!(peers <= PEER_CONNECTIONS_MAX, "{peers} slots");
        }
        // The newest address always has its slot.
        let last = addr(PEER_CONNECTIONS_MAX + 49);
        assert!(client.inner.peers.lock().unwrap().contains_key(&last));
    }

    #[test]
    fn bootstrap_lists_are_checked() {
        assert_eq!(bootstrap_list("a:1").unwrap(), vec!["a:1"]);
        assert_eq!(bootstrap_list("a:1, b:2").unwrap(), vec!["a:1", "b:2"]);
        assert!(bootstrap_list("a:1,,b:2").is_err());
        assert!(bootstrap_list("").is_err());
        let many = vec!["a:1"; BOOTSTRAP_BROKERS_MAX + 1].join(",");
        assert!(bootstrap_list(&many).is_err());
    }

    /// A stand-in broker on loopback (a test double: it answers only what
    /// the bootstrap and admin paths ask) naming `topic` in its topic list;
    /// its listener and connections stop when the task is aborted.
    async fn fake_broker(topic: &'static str) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            // Owned here: aborting the task drops every connection too.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                connections.spawn(async move {
                    let mut h = [0u8; wire::frame::FRAME_HEADER_BYTES];
                    while stream.read_exact(&mut h).await.is_ok() {
                        let header = wire::frame::FrameHeader::decode(&h).unwrap();
                        let mut payload = vec![0u8; header.payload_bytes as usize];
                        stream.read_exact(&mut payload).await.unwrap();
                        let answer =
                            match BrokerPortRequest::decode(header.frame_type, &payload).unwrap() {
                                BrokerPortRequest::Data(DataRequest::Shards) => Response::Shards {
                                    shards: vec![ShardAddress {
                                        tcp: addr.to_string(),
                                        quic: addr.to_string(),
                                    }],
                                },
                                _ => Response::TopicList {
                                    topics: vec![topic.to_owned()],
                                },
                            };
                        let mut out = Vec::new();
                        answer.encode(header.request_id, &mut out);
                        if stream.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, task)
    }

    /// A loopback address nothing listens on.
    fn closed_port() -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    }

    #[tokio::test]
    async fn the_first_broker_of_the_list_that_answers_is_the_bootstrap() {
        let (live, _task) = fake_broker("a/one").await;
        let list = format!("{},{live}", closed_port());
        let client = Client::connect(&list, Transport::Tcp, ClientOptions::default())
            .await
            .unwrap();
        assert_eq!(client.inner.bootstrap, live);
        assert_eq!(client.list_topics().await.unwrap(), vec!["a/one"]);
        // Alone, an unreachable broker is the error it always was.
        let alone = Client::connect(
            &closed_port().to_string(),
            Transport::Tcp,
            ClientOptions::default(),
        )
        .await;
        assert!(
            matches!(alone, Err(ClientError::Connect { .. })),
            "{alone:?}"
        );
    }

    #[tokio::test]
    async fn admin_requests_fall_back_to_the_next_broker_when_the_bootstrap_dies() {
        let (first, first_task) = fake_broker("from/first").await;
        let (second, _second_task) = fake_broker("from/second").await;
        let client = Client::connect(
            &format!("{first},{second}"),
            Transport::Tcp,
            ClientOptions::default(),
        )
        .await
        .unwrap();
        assert_eq!(client.list_topics().await.unwrap(), vec!["from/first"]);
        // The bootstrap broker dies: its listener and connections go.
        first_task.abort();
        let _ = first_task.await;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let topics = loop {
            match client.list_topics().await {
                Ok(topics) => break topics,
                // The call in flight on the dying connection fails once.
                Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
            }
        };
        assert_eq!(topics, vec!["from/second"]);
    }
}
