//! The Kafka gateway: Kafka clients speak to the broker over TCP, and
//! their requests go to the same shards and segments as native requests.
//!
//! One thread runs a current-thread tokio runtime. It accepts connections,
//! decodes requests with `kelp-kafka`, and reaches a shard through the
//! shard's bounded inbox (a typed `ShardRequest`), answered through a
//! reply channel. Admin
//! requests go to the control plane; consumer groups live in the
//! `kelp-kafka` coordinator, which only this thread touches. Nothing here
//! shares a lock with a shard.
//!
//! A Kafka topic `name` is the kelp topic `kafka/name`; partition `i` is
//! the topic's `i`-th segment by id; Kafka offsets are segment offsets.
//! `docs/kafka.md` describes the mapping and the differences from Kafka.

mod acls;
mod admin;
mod connection;
mod fetch;
mod gateway_error;
mod groups;
mod listener;
mod metadata;
mod offsets;
mod placement;
mod pool;
mod produce;
mod producer_ids;
mod producer_state;
mod sasl;
mod shards;
mod topic_access;
pub(crate) mod topics;

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use filer::Filer;

use crate::control_plane::ControlRequest;
use crate::error::EngineError;
use crate::inbox::ShardRequest;
use gateway_error::StoreError;

/// Kafka connections the gateway serves at once; more are refused.
pub(crate) const CONNECTIONS_MAX: usize = 1024;
/// The largest request frame the gateway reads (a produce request holds
/// batches of up to kelp's batch limit, several partitions each).
pub(crate) const REQUEST_FRAME_BYTES_MAX: usize = 32 << 20;
/// Request bytes all connections together may hold (read and not yet
/// answered); a connection waits for room before reading a request.
pub(crate) const REQUEST_BYTES_IN_FLIGHT_MAX: usize = 256 << 20;
/// The node id the gateway gives itself in Metadata and FindCoordinator.
pub(crate) const NODE_ID: i32 = 0;
/// glibc keeps up to this much freed memory at the top of a heap instead
/// of giving it back to the kernel (see [`keep_freed_memory`]).
const MALLOC_TRIM_THRESHOLD_BYTES: i32 = 64 << 20;
/// Allocations up to this size come from glibc's heaps, not their own
/// mappings (glibc's largest allowed value on 64-bit).
const MALLOC_MMAP_THRESHOLD_BYTES: i32 = 32 << 20;

const _: () = assert!(REQUEST_FRAME_BYTES_MAX <= MALLOC_MMAP_THRESHOLD_BYTES as usize);

/// Every produce request hands its shard a fresh ~1 MB payload, which the
/// shard frees on its own thread, and every Fetch answer comes back the
/// other way. With glibc's default, dynamic thresholds, those frees trim
/// the heap they came from, and the next megabyte is page-faulted and
/// zeroed in again: in a profile of a librdkafka produce that was a
/// quarter of the gateway thread's time (BENCHMARKS.md, "Kafka through
/// the gateway vs Tansu"). Fixed thresholds keep that memory for reuse,
/// bounded by the trim threshold per heap. Process-wide, so set only when
/// the gateway runs; a failed call leaves glibc's defaults.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes two of the allocator's tunables; it
        // is thread-safe and takes plain integers.
        let set = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD_BYTES) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD_BYTES) == 1
        };
        if !set {
            log::warn!("Kafka gateway: mallopt refused the heap thresholds; glibc's defaults stay");
        }
    }
}

/// The gateway's own filer object at `path`, at most its first `bytes_max`
/// bytes (a longer one is not the gateway's format and fails to decode).
pub(crate) fn read_object(
    filer: &dyn Filer,
    path: &filer::ObjectPath,
    bytes_max: usize,
) -> Result<Vec<u8>, filer::FilerError> {
    let size = filer.size(path)?;
    let size = usize::try_from(size).unwrap_or(usize::MAX).min(bytes_max);
    let mut bytes = vec![0u8; size];
    let n = filer.read_at(path, 0, &mut bytes)?;
    bytes.truncate(n);
    Ok(bytes)
}

/// Store `bytes` as the object at `path`, on a blocking thread (the gateway
/// thread never waits on the filer itself).
pub(crate) async fn put_object(
    filer: Arc<dyn Filer>,
    path: filer::ObjectPath,
    bytes: Vec<u8>,
) -> Result<(), StoreError> {
    Ok(tokio::task::spawn_blocking(move || filer.put(&path, &bytes)).await??)
}

/// What the gateway thread is given.
pub(crate) struct GatewayParts {
    pub(crate) listen: SocketAddr,
    /// What clients are told to connect to; `None` derives it from the
    /// bound address.
    pub(crate) advertised: Option<crate::config::AdvertisedAddress>,
    pub(crate) inboxes: Vec<flume::Sender<ShardRequest>>,
    pub(crate) control: flume::Sender<ControlRequest>,
    pub(crate) filer: Arc<dyn Filer>,
    pub(crate) fetch_wait_ms_max: u32,
    /// The Kafka broker configs it honours.
    pub(crate) settings: crate::config::KafkaSettings,
    pub(crate) timeouts: crate::connection::PeerTimeouts,
    /// Connections from one address (`connections_per_ip_max`).
    pub(crate) connections_per_ip_max: usize,
    /// Where the port's connection counts go (the metrics page).
    pub(crate) connections: Arc<crate::shard_metrics::Connections>,
    /// Users, credentials and grants (`--auth`); `None` serves anyone.
    pub(crate) auth: Option<Arc<auth::AuthFile>>,
    /// TLS on the port (`--kafka-tls`); `None`: plaintext.
    pub(crate) tls: Option<Arc<rustls::ServerConfig>>,
}

/// The state every connection of the gateway thread shares (single
/// threaded: `Rc` and `RefCell`, never crossing to a shard).
pub(crate) struct Gateway {
    /// The address clients are told to connect to.
    pub(crate) advertised: crate::config::AdvertisedAddress,
    pub(crate) shards: shards::Shards,
    pub(crate) topics: topics::Topics,
    /// Idempotent producers' sequences, per partition.
    pub(crate) producers: producer_state::Sequences,
    pub(crate) producer_ids: producer_ids::ProducerIds,
    pub(crate) groups: groups::Groups,
    pub(crate) fetch_wait_ms_max: u32,
    /// The Kafka broker configs it honours (DescribeConfigs shows them).
    pub(crate) settings: crate::config::KafkaSettings,
    /// Idle and slow-sender timeouts, as on the native port.
    pub(crate) timeouts: crate::connection::PeerTimeouts,
    /// Connections by peer address, as on the native port.
    pub(crate) peers: std::sync::Arc<crate::peer_limit::PeerLimit>,
    /// Open and refused connections, for the metrics page.
    pub(crate) connections: Arc<crate::shard_metrics::Connections>,
    pub(crate) filer: Arc<dyn Filer>,
    /// Bounds the request bytes held by all connections.
    pub(crate) request_bytes: Arc<tokio::sync::Semaphore>,
    /// Request frames, reused.
    pub(crate) frames: pool::Pool<Vec<u8>>,
    /// Produce's batch builders, reused.
    pub(crate) builders: pool::Pool<wire::batch::BatchBuilder>,
    /// Users, credentials and grants (`--auth`); `None` serves anyone.
    pub(crate) auth: Option<Arc<auth::AuthFile>>,
    /// Produce byte-rate quotas, by user (this thread's own buckets).
    pub(crate) quotas: crate::produce_quota::Quotas,
    /// TLS on the port (`--kafka-tls`); `None`: plaintext.
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
}

/// The running gateway thread.
pub(crate) struct KafkaGateway {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    address: SocketAddr,
}

impl KafkaGateway {
    /// Bind the listener, restore committed offsets and producer ids, and
    /// start serving.
    pub(crate) fn start(parts: GatewayParts) -> Result<KafkaGateway, EngineError> {
        let listener = crate::broker::retry_in_use(|| std::net::TcpListener::bind(parts.listen))
            .map_err(|e| EngineError::io("bind Kafka listener", parts.listen.to_string(), e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| EngineError::io("bind Kafka listener", parts.listen.to_string(), e))?;
        let local = listener
            .local_addr()
            .map_err(|e| EngineError::io("bind Kafka listener", parts.listen.to_string(), e))?;
        let advertised = match parts.advertised {
            Some(advertised) => advertised,
            None => {
                if local.ip().is_unspecified() {
                    log::warn!(
                        "the Kafka gateway listens on every address ({local}) but tells clients \
                         to connect to loopback; set --kafka-advertise HOST:PORT for clients on \
                         other hosts"
                    );
                }
                crate::config::AdvertisedAddress::of_listener(local)
            }
        };
        keep_freed_memory();
        let producer_ids = producer_ids::ProducerIds::open(parts.filer.clone())?;
        let groups = groups::Groups::open(parts.filer.clone(), &parts.settings)?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), EngineError>>();
        let advertised_text = advertised.to_string();
        let thread = std::thread::Builder::new()
            .name("kelp-kafka".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready_tx.send(Err(EngineError::io("start Kafka runtime", "", e)));
                        return;
                    }
                };
                let local_set = tokio::task::LocalSet::new();
                local_set.block_on(&runtime, async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(EngineError::io("Kafka listener", "", e)));
                            return;
                        }
                    };
                    let gateway = Rc::new(Gateway {
                        advertised,
                        shards: shards::Shards::new(parts.inboxes),
                        topics: topics::Topics::new(parts.control),
                        producers: producer_state::Sequences::default(),
                        producer_ids,
                        groups,
                        fetch_wait_ms_max: parts.fetch_wait_ms_max,
                        settings: parts.settings.clone(),
                        timeouts: parts.timeouts,
                        peers: crate::peer_limit::PeerLimit::new(parts.connections_per_ip_max),
                        connections: parts.connections,
                        filer: parts.filer,
                        request_bytes: Arc::new(tokio::sync::Semaphore::new(
                            REQUEST_BYTES_IN_FLIGHT_MAX,
                        )),
                        frames: pool::Pool::default(),
                        builders: pool::Pool::default(),
                        auth: parts.auth,
                        quotas: crate::produce_quota::Quotas::default(),
                        tls: parts.tls.map(tokio_rustls::TlsAcceptor::from),
                    });
                    let _ = ready_tx.send(Ok(()));
                    tokio::task::spawn_local(groups::tick_forever(gateway.clone()));
                    tokio::task::spawn_local(producer_state::store_forever(gateway.clone()));
                    tokio::select! {
                        () = listener::accept_loop(gateway.clone(), listener) => {}
                        _ = stop_rx => {}
                    }
                    // A graceful stop leaves nothing of the log to read at
                    // the next start.
                    gateway.producers.store_changed(&gateway).await;
                });
                // Connections still open end with the runtime.
                drop(local_set);
                runtime.shutdown_timeout(std::time::Duration::from_secs(2));
            })
            .map_err(|e| EngineError::io("spawn Kafka thread", "", e))?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(EngineError::io(
                    "start Kafka gateway",
                    "",
                    std::io::Error::other("the Kafka thread ended at start"),
                ))
            }
        }
        log::info!("Kafka gateway listening at {local} (advertised {advertised_text})");
        Ok(KafkaGateway {
            stop: Some(stop_tx),
            thread: Some(thread),
            address: local,
        })
    }

    /// The address the gateway listens at.
    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }

    /// Close the listener and every connection, and join the thread.
    pub(crate) fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
