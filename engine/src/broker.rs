//! Starting and stopping a broker: the filer, the control plane (the
//! cluster's, or alone one of its own, in-process), one glommio shard per
//! core with its TCP listener and its QUIC socket.
//! `run` blocks until SIGINT or SIGTERM, then seals and flushes every
//! buffer before it returns.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use filer::{Filer, FilerUrl, LocalFiler};
use filer_s3::S3Filer;
use glommio::{LocalExecutorBuilder, Placement, PoolPlacement};
use wire::message::ShardAddress;

use crate::admin_http::AdminListener;
use crate::broker_pages::{BrokerPages, BrokerReadiness};
use crate::cluster_agent::{ClusterAgent, LocalControl};
use crate::config::{BrokerConfig, ConfigError};
use crate::control_plane::{
    ControlRequest, ShardCommand, ShutdownError, CONTROL_REQUESTS_QUEUED_MAX,
    SHARD_COMMANDS_QUEUED_MAX,
};
use crate::data_dir_lock::DataDirLock;
use crate::error::EngineError;
use crate::inbox::inbox_loop;
use crate::kafka::{GatewayParts, KafkaGateway};
use crate::payload::PayloadStore;
use crate::shard::Shard;
use crate::shard_filer::ShardFiler;
use crate::shard_metrics::{Connections, ShardMetrics};
use crate::signals::TerminationSignals;

/// Memory glommio registers per executor for its I/O buffers. Three times
/// this is locked per executor; 1 MiB keeps two shards within the 8 MiB
/// locked-memory limit a normal user has (PLATFORM.md).
const IO_MEMORY_BYTES: usize = 1 << 20;
/// io_uring depth per executor; 2048 registers within the same limit.
const RING_DEPTH: usize = 2048;

/// Threads of each shard's blocking pool: one can sit in a chunk's
/// fdatasync while another prepares the next buffer, so the shard never
/// waits for a spare buffer behind a flush.
const BLOCKING_THREADS: usize = 2;

/// How long a stopping shard waits for its connections to end.
const CONNECTIONS_DRAIN_WAIT: Duration = Duration::from_secs(2);
/// How long a stopped shard keeps answering its inbox (the Kafka gateway's
/// requests still queued when the gateway stopped), at most.
const INBOX_DRAIN_WAIT: Duration = Duration::from_secs(4);
const _: () =
    assert!(crate::connection::GOODBYE_WAIT.as_millis() + 500 < INBOX_DRAIN_WAIT.as_millis());
// A connection's goodbye ends within the shard's wait for it.
const _: () =
    assert!(crate::connection::GOODBYE_WAIT.as_millis() < CONNECTIONS_DRAIN_WAIT.as_millis());

/// Run a broker until SIGINT or SIGTERM.
pub fn run(config: BrokerConfig) -> Result<(), EngineError> {
    let signals = TerminationSignals::block();
    let broker = Broker::start(config)?;
    let signal = signals.wait();
    log::info!("received signal {signal}");
    log::info!("shutting down: flushing buffers");
    broker.stop()
}

/// The broker's filer: the cluster's when it joined one (a `--filer` of its
/// own must then name the same), else its own `filer` URL, else the local
/// directory `<data_dir>/filer`.
fn open_filer(
    config: &BrokerConfig,
    joined: Option<&crate::cluster_agent::Joined>,
) -> Result<(Arc<dyn Filer>, FilerUrl), EngineError> {
    let url = match (joined, &config.filer) {
        (Some(joined), own) => {
            let cluster = FilerUrl::parse(&joined.filer)
                .map_err(|source| ConfigError::ClusterFiler { source })?;
            if let Some(given) = own.as_ref().filter(|own| **own != cluster) {
                return Err(ConfigError::FilerMismatch {
                    given: given.clone(),
                    cluster,
                }
                .into());
            }
            cluster
        }
        (None, Some(own)) => own.clone(),
        (None, None) => FilerUrl::Local(config.data_dir.join("filer")),
    };
    log::info!("filer: {url}");
    let filer: Arc<dyn Filer> = match &url {
        FilerUrl::Local(dir) => {
            Arc::new(LocalFiler::open(dir)?.drop_handed_over_pages(config.drop_flushed_pages))
        }
        FilerUrl::S3 { bucket, prefix } => Arc::new(S3Filer::open(bucket, prefix, &config.s3)?),
    };
    Ok((filer, url))
}

/// A running broker.
pub struct Broker {
    control: flume::Sender<ControlRequest>,
    control_thread: Option<std::thread::JoinHandle<()>>,
    shard_threads: Vec<glommio::ExecutorJoinHandle<()>>,
    kafka: Option<KafkaGateway>,
    /// Stopped last, so `/ready` says "stopping" while the broker flushes.
    admin: Option<AdminListener>,
    readiness: Arc<BrokerReadiness>,
    addresses: Vec<ShardAddress>,
    /// Held until the broker has stopped: one broker per data dir.
    _lock: DataDirLock,
}

impl Broker {
    /// Start everything and return once every shard serves.
    pub fn start(config: BrokerConfig) -> Result<Broker, EngineError> {
        Broker::start_with_filer(config, |filer| filer)
    }

    /// [`Broker::start`], with the broker's filer passed through `wrap`
    /// first: how a test puts a fault-injecting double around the real
    /// filer.
    pub fn start_with_filer(
        mut config: BrokerConfig,
        wrap: impl FnOnce(Arc<dyn Filer>) -> Arc<dyn Filer>,
    ) -> Result<Broker, EngineError> {
        config.validate()?;
        if let Some(auth) = config.auth.clone() {
            if auth.cluster_secret().is_none() {
                if config.control.is_some() {
                    return Err(EngineError::Start(
                        "the auth file needs a cluster_secret to join a cluster: brokers and \
                         the control plane prove themselves to each other with it"
                            .to_owned(),
                    ));
                }
                // Alone: the broker and the control plane inside it prove
                // themselves to each other with a secret of this run.
                let with = auth::auth_file::random_secret()
                    .and_then(|secret| auth.with_cluster_secret(&secret))
                    .map_err(EngineError::Start)?;
                config.auth = Some(Arc::new(with));
            }
        }
        let shard_count = config.shard_count();
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| EngineError::io("create data dir", &config.data_dir, e))?;
        let lock = DataDirLock::take(&config.data_dir)?;
        // A follower's copies are not kept across a restart: it copies
        // again from each owner's stored end.
        let replicas = config.data_dir.join(crate::replica::REPLICAS_DIR);
        if replicas.exists() {
            std::fs::remove_dir_all(&replicas)
                .map_err(|e| EngineError::io("remove old replica files", &replicas, e))?;
        }
        let addresses: Vec<ShardAddress> = (0..shard_count)
            .map(|i| {
                let a = config.shard_address(i).to_string();
                ShardAddress {
                    tcp: a.clone(),
                    quic: a,
                }
            })
            .collect();
        // In a cluster the control plane names this broker's id and the
        // filer every broker shares; alone, the filer is the broker's own
        // and so is the control plane, started here over it.
        let joined = match config.control.clone() {
            Some(control) => Some(crate::cluster_agent::join(&config, &control, &addresses)?),
            None => None,
        };
        let (filer, url) = open_filer(&config, joined.as_ref())?;
        let filer: Arc<dyn Filer> = wrap(filer);
        let payloads = Arc::new(PayloadStore::new(filer.clone(), &config.data_dir));
        let (joined, local) = match joined {
            Some(joined) => (joined, None),
            None => {
                let (local, joined) = LocalControl::start(
                    &config,
                    filer.clone(),
                    &url,
                    payloads.clone(),
                    &addresses,
                )?;
                (joined, Some(local))
            }
        };
        config.broker_id = Some(joined.id);
        let (chain, key) = crate::tls::load(&config.data_dir, config.tls_cert.as_ref())?;
        let kafka_tls = if config.kafka_tls {
            Some(crate::tls::kafka_server_config(
                chain.clone(),
                key.clone_key(),
            )?)
        } else {
            None
        };
        let tcp_tls = if config.tcp_tls {
            Some(crate::tls::tcp_server_config(
                chain.clone(),
                key.clone_key(),
            )?)
        } else {
            None
        };
        let shard_quic_config = Arc::new(crate::tls::server_config(chain, key)?);

        let (control_tx, control_rx) = flume::bounded(CONTROL_REQUESTS_QUEUED_MAX);
        let (command_txs, mut command_rxs): (Vec<_>, Vec<_>) = (0..shard_count)
            .map(|_| flume::bounded::<ShardCommand>(SHARD_COMMANDS_QUEUED_MAX))
            .unzip();
        let mut inbox_txs = Vec::new();
        let mut shard_threads = Vec::new();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), EngineError>>();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let io_memory = (IO_MEMORY_BYTES * 2 / shard_count.max(2)).max(128 << 10);
        let metrics: Vec<Arc<ShardMetrics>> = (0..shard_count)
            .map(|_| Arc::new(ShardMetrics::default()))
            .collect();
        // Up before the shards, so `/health` answers and `/ready` says
        // "starting" while buffers are recovered.
        let readiness = Arc::new(BrokerReadiness::default());
        let kafka_connections = Arc::new(Connections::default());
        let admin = match config.http_listen {
            Some(listen) => Some(
                AdminListener::start(
                    listen,
                    Arc::new(BrokerPages {
                        shards: metrics.clone(),
                        commands: command_txs.clone(),
                        readiness: readiness.clone(),
                        kafka: config
                            .kafka_listen
                            .is_some()
                            .then(|| kafka_connections.clone()),
                    }),
                )
                .map_err(|e| EngineError::io("listen for admin HTTP on", listen.to_string(), e))?,
            ),
            None => None,
        };
        for (index, command_rx) in command_rxs.drain(..).enumerate() {
            let (inbox_tx, inbox_rx) = flume::bounded(config.inbox_requests_max);
            inbox_txs.push(inbox_tx);
            let shard_commands = command_txs.clone();
            let placement = if config.pin_shards {
                Placement::Fixed(index % cpus)
            } else {
                Placement::Unbound
            };
            let config_send = config.clone();
            let filer = filer.clone();
            let payloads = payloads.clone();
            let control = control_tx.clone();
            let addresses = addresses.clone();
            let ready = ready_tx.clone();
            let server_crypto = shard_quic_config.clone();
            let tcp_tls = tcp_tls.clone();
            let shard_metrics = metrics[index].clone();
            let handle = LocalExecutorBuilder::new(placement)
                .name(&format!("kelp-shard-{index}"))
                .io_memory(io_memory)
                .ring_depth(RING_DEPTH)
                .blocking_thread_pool_placement(PoolPlacement::Unbound(BLOCKING_THREADS))
                .spawn(move || async move {
                    let config = Rc::new(config_send);
                    let broker_id = config.broker_id.unwrap_or(0);
                    let addr = config.shard_address(index);
                    let bound = bind_tcp(addr)
                        .map_err(|e| format!("bind TCP {addr}: {e}"))
                        .and_then(|tcp| {
                            retry_in_use(|| std::net::UdpSocket::bind(addr))
                                .map(|udp| (tcp, udp))
                                .map_err(|e| format!("bind UDP {addr}: {e}"))
                        });
                    let ((listener, listener_fd), quic_socket) = match bound {
                        Ok(bound) => bound,
                        Err(reason) => {
                            let _ = ready.send(Err(EngineError::Shard {
                                shard: index,
                                reason,
                            }));
                            return;
                        }
                    };
                    let payload_budget = Rc::new(glommio::sync::Semaphore::new(
                        config.payload_upload_bytes_max,
                    ));
                    let peers = crate::peer_limit::PeerLimit::new(config.connections_per_ip_max);
                    let receive_budget =
                        crate::receive_budget::ReceiveBudget::new(config.receive_bytes_max);
                    shard_metrics
                        .receive_bytes_max
                        .set(config.receive_bytes_max);
                    let store =
                        match ShardFiler::start(index, filer, &config, shard_metrics.clone()) {
                            Ok(store) => Rc::new(store),
                            Err(e) => {
                                let _ = ready.send(Err(EngineError::Shard {
                                    shard: index,
                                    reason: format!("start the filer threads: {e}"),
                                }));
                                return;
                            }
                        };
                    let shard = Rc::new(Shard {
                        index,
                        config,
                        store,
                        payloads,
                        payload_budget,
                        topics: RefCell::new(HashMap::new()),
                        control,
                        shard_commands: Rc::new(shard_commands),
                        shard_addresses: Rc::new(addresses),
                        connections: Cell::new(0),
                        peers,
                        receive_budget,
                        metrics: shard_metrics,
                        stopping: Cell::new(false),
                        stop: event_listener::Event::new(),
                        producer_ids: crate::producer_id_block::ProducerIdBlock::new(
                            broker_id,
                            u32::try_from(index).unwrap_or(u32::MAX),
                        ),
                        followed: RefCell::new(HashMap::new()),
                        sealed_here: RefCell::new(std::collections::HashSet::new()),
                        quotas: crate::produce_quota::Quotas::default(),
                        followings_started: Cell::new(0),
                    });
                    glommio::spawn_local(shard.clone().tick_forever()).detach();
                    // Tasks that own a socket are awaited at shutdown, so the
                    // ports are closed before `stop` returns.
                    let accept = glommio::spawn_local(crate::tcp::accept_loop(
                        shard.clone(),
                        listener,
                        listener_fd,
                        tcp_tls.map(futures_rustls::TlsAcceptor::from),
                    ));
                    // The driver says goodbye on its connections when the
                    // shard stops, and ends once they are gone.
                    let quic = glommio::spawn_local(crate::quic_shard::serve(
                        shard.clone(),
                        quic_socket,
                        server_crypto,
                    ));
                    let inbox = glommio::spawn_local(inbox_loop(shard.clone(), inbox_rx));
                    let _ = ready.send(Ok(()));
                    // Commands arrive until shutdown, which ends the shard.
                    while let Ok(command) = command_rx.recv_async().await {
                        let last = matches!(command, ShardCommand::Shutdown { .. });
                        shard.handle_command(command).await;
                        if last {
                            break;
                        }
                    }
                    accept.await;
                    quic.await;
                    shard.wait_connections_closed(CONNECTIONS_DRAIN_WAIT).await;
                    // Frames the Kafka gateway queued before it stopped are
                    // answered until it has let go of the inbox, within a
                    // bound.
                    futures_lite::future::or(inbox, glommio::timer::sleep(INBOX_DRAIN_WAIT)).await;
                })
                .map_err(|e| EngineError::Shard {
                    shard: index,
                    reason: format!("start executor: {e}"),
                })?;
            shard_threads.push(handle);
        }
        drop(ready_tx);
        for _ in 0..shard_count {
            match ready_rx.recv_timeout(Duration::from_secs(30)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(EngineError::Start("a shard did not start in 30 s".into())),
            }
        }

        // The first load report makes the control plane send this broker
        // every topic's layout; once it is answered the shards have
        // recovered and opened their segments, before anyone is served.
        let mut agent = ClusterAgent::new(
            joined,
            config.clone(),
            addresses.clone(),
            command_txs,
            local,
        )?;
        agent.report();
        let control_thread = std::thread::Builder::new()
            .name("kelp-control-agent".into())
            .spawn(move || agent.run(control_rx))
            .map_err(|e| EngineError::io("spawn control agent thread", "", e))?;

        let kafka = match config.kafka_listen {
            Some(listen) => Some(KafkaGateway::start(GatewayParts {
                listen,
                advertised: config.kafka_advertised.clone(),
                inboxes: inbox_txs.clone(),
                control: control_tx.clone(),
                filer: filer.clone(),
                fetch_wait_ms_max: config.fetch_wait_ms_max,
                settings: config.kafka.clone(),
                timeouts: crate::connection::PeerTimeouts::of(&config),
                connections_per_ip_max: config.connections_per_ip_max,
                connections: kafka_connections,
                auth: config.auth.clone(),
                tls: kafka_tls,
            })?),
            None => None,
        };
        log::info!(
            "kelp broker serving {} shard(s) at {} (TCP and QUIC), data in {}",
            shard_count,
            config.listen,
            config.data_dir.display()
        );
        readiness.serving();
        Ok(Broker {
            control: control_tx,
            control_thread: Some(control_thread),
            shard_threads,
            kafka,
            admin,
            readiness,
            addresses,
            _lock: lock,
        })
    }

    /// Where the admin HTTP listener serves, if it runs.
    pub fn http_address(&self) -> Option<std::net::SocketAddr> {
        self.admin.as_ref().map(AdminListener::address)
    }

    /// Each shard's addresses.
    pub fn addresses(&self) -> &[ShardAddress] {
        &self.addresses
    }

    /// Where the Kafka gateway listens, if it runs.
    pub fn kafka_address(&self) -> Option<std::net::SocketAddr> {
        self.kafka.as_ref().map(KafkaGateway::address)
    }

    /// Stop serving, seal and flush every buffer, and join every thread.
    ///
    /// In order: the Kafka gateway stops; the control plane (a cluster
    /// broker leaves, its segments moving elsewhere while TCP and QUIC
    /// still answer) has every shard flush, and the TCP and QUIC
    /// connections say goodbye as their shard stops.
    pub fn stop(mut self) -> Result<(), EngineError> {
        self.readiness.stopping();
        if let Some(kafka) = self.kafka.take() {
            kafka.stop();
        }
        let (tx, rx) = flume::bounded(1);
        let flushed = if self
            .control
            .send(ControlRequest::Shutdown { reply: tx })
            .is_ok()
        {
            rx.recv().unwrap_or(Err(ShutdownError::AgentGone))
        } else {
            Err(ShutdownError::AgentGone)
        };
        if let Some(t) = self.control_thread.take() {
            let _ = t.join();
        }
        for t in self.shard_threads.drain(..) {
            let _ = t.join();
        }
        if let Some(admin) = self.admin.take() {
            admin.stop();
        }
        flushed.map_err(EngineError::Stop)
    }
}

/// Bind a shard's TCP listener. glommio's own `bind` sets SO_REUSEPORT,
/// which would let a second broker (or a listener a stopped one left
/// behind) share the port and silently take half the connections; this
/// one refuses a port in use.
///
/// Returns the listener and its descriptor (glommio's listener does not
/// expose it), which the accept loop shuts down when the shard stops.
fn bind_tcp(
    addr: std::net::SocketAddr,
) -> std::io::Result<(glommio::net::TcpListener, std::os::unix::io::RawFd)> {
    use std::os::unix::io::{FromRawFd, IntoRawFd};
    let domain = socket2::Domain::for_address(addr);
    let socket = retry_in_use(|| {
        let socket =
            socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.bind(&addr.into())?;
        Ok(socket)
    })?;
    socket.listen(1024)?;
    let fd = socket.into_raw_fd();
    // SAFETY: the descriptor is a bound, listening TCP socket we own, and
    // ownership moves to the listener.
    Ok((unsafe { glommio::net::TcpListener::from_raw_fd(fd) }, fd))
}

/// How long a bind retries a port that is still in use.
const BIND_RETRY_LIMIT: Duration = Duration::from_secs(5);

/// Retry `bind` while the port is in use, for a few seconds: a broker
/// restarted at once may find its previous run's sockets still being torn
/// down by the kernel. Past the limit the error stands (another process
/// holds the port).
pub(crate) fn retry_in_use<T>(mut bind: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    let deadline = std::time::Instant::now() + BIND_RETRY_LIMIT;
    loop {
        match bind() {
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}
