//! QUIC ingest. quinn runs on one small tokio thread for all shards, one
//! endpoint per shard on that shard's port (shard-aware addresses), and
//! hands each frame to the owning shard through a bounded channel;
//! answers come back the same way. The hand-off is the price of running
//! quinn next to glommio (see BENCHMARKS.md for the measured cost against
//! raw quinn and the alternative of driving quinn-proto on the shard).
//!
//! The QUIC thread never touches segment state; the shard never touches a
//! socket of the QUIC thread.
//!
//! A stopping broker says goodbye on every QUIC connection as on TCP
//! (docs/wire-format.md, "Goodbye"), once its shards have flushed:
//! requests read after the goodbye are answered `ShuttingDown` without
//! reaching a shard, answers owed are written, and the connection closes
//! when the client finishes its stream or `GOODBYE_WAIT` passes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wire::frame::{FrameHeader, FRAME_HEADER_BYTES};

use crate::connection::GOODBYE_WAIT;
use crate::error::EngineError;
use crate::inbox::InboxFrame;
use crate::request::{error_frame, goodbye_frame, not_applied_frame, Origin};
use crate::serve_error::ServeError;

/// Limits the QUIC thread applies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QuicLimits {
    pub(crate) connections_per_shard_max: usize,
    /// Connections one peer address may hold per shard endpoint.
    pub(crate) connections_per_ip_max: usize,
    pub(crate) requests_in_flight_max: usize,
    pub(crate) inbox_bytes_max: usize,
}

/// The running QUIC thread.
pub(crate) struct QuicThread {
    runtime: tokio::runtime::Runtime,
    endpoints: Vec<quinn::Endpoint>,
    /// Turned true once: every connection says goodbye.
    goodbye: tokio::sync::watch::Sender<bool>,
    /// Connections being served, over all shards.
    live: Arc<AtomicUsize>,
}

impl QuicThread {
    /// Bind every shard's endpoint and start serving.
    pub(crate) fn start(
        server_config: quinn::ServerConfig,
        addresses: Vec<SocketAddr>,
        inboxes: Vec<flume::Sender<InboxFrame>>,
        limits: QuicLimits,
    ) -> Result<QuicThread, EngineError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kelp-quic")
            .enable_all()
            .build()
            .map_err(|e| EngineError::io("start QUIC runtime", "", e))?;
        let mut endpoints = Vec::new();
        let (goodbye, goodbye_rx) = tokio::sync::watch::channel(false);
        let live = Arc::new(AtomicUsize::new(0));
        for (i, (addr, inbox)) in addresses.into_iter().zip(inboxes).enumerate() {
            let _guard = runtime.enter();
            let endpoint = crate::broker::retry_in_use(|| {
                quinn::Endpoint::server(server_config.clone(), addr)
            })
            .map_err(|e| EngineError::io("bind QUIC", addr.to_string(), e))?;
            endpoints.push(endpoint.clone());
            let serving = Serving {
                inbox,
                limits,
                goodbye: goodbye_rx.clone(),
                live: live.clone(),
            };
            runtime.spawn(accept_loop(i, endpoint, serving));
        }
        Ok(QuicThread {
            runtime,
            endpoints,
            goodbye,
            live,
        })
    }

    /// Take no new connections, and say goodbye on every open one.
    fn say_goodbye(&self) {
        for e in &self.endpoints {
            e.set_server_config(None);
        }
        self.goodbye.send_replace(true);
    }

    /// Wait (at most `GOODBYE_WAIT` and a little) for the connections to
    /// end after their goodbye, then close what is left and stop the
    /// thread.
    pub(crate) fn stop(self) {
        self.say_goodbye();
        let deadline = std::time::Instant::now() + GOODBYE_WAIT + GOODBYE_SLACK;
        while self.live.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        for e in &self.endpoints {
            e.close(0u32.into(), b"broker shutting down");
        }
        self.runtime.shutdown_timeout(Duration::from_secs(2));
    }
}

/// Time past a connection's own goodbye deadline for it to close.
const GOODBYE_SLACK: Duration = Duration::from_millis(200);

/// What every connection of the QUIC thread is served with.
#[derive(Clone)]
struct Serving {
    inbox: flume::Sender<InboxFrame>,
    limits: QuicLimits,
    goodbye: tokio::sync::watch::Receiver<bool>,
    live: Arc<AtomicUsize>,
}

async fn accept_loop(shard: usize, endpoint: quinn::Endpoint, serving: Serving) {
    let connections = Arc::new(AtomicUsize::new(0));
    let budget = Arc::new(tokio::sync::Semaphore::new(serving.limits.inbox_bytes_max));
    let peers = crate::peer_limit::PeerLimit::new(serving.limits.connections_per_ip_max);
    while let Some(incoming) = endpoint.accept().await {
        if connections.load(Ordering::Relaxed) >= serving.limits.connections_per_shard_max {
            log::warn!("shard {shard}: refusing QUIC connection: connection limit");
            incoming.refuse();
            continue;
        }
        let peer = incoming.remote_address();
        let Some(slot) = peers.admit(peer.ip()) else {
            log::warn!(
                "shard {shard}: refusing QUIC connection from {peer}: {} connections from its \
                 address (--connections-per-ip-max)",
                serving.limits.connections_per_ip_max
            );
            incoming.refuse();
            continue;
        };
        connections.fetch_add(1, Ordering::Relaxed);
        serving.live.fetch_add(1, Ordering::AcqRel);
        let serving = serving.clone();
        let connections = connections.clone();
        let budget = budget.clone();
        tokio::spawn(async move {
            let live = serving.live.clone();
            match incoming.await {
                Ok(connection) => serve_connection(connection, serving, budget).await,
                Err(e) => log::debug!("shard {shard}: QUIC handshake: {e}"),
            }
            drop(slot);
            connections.fetch_sub(1, Ordering::Relaxed);
            live.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

async fn serve_connection(
    connection: quinn::Connection,
    serving: Serving,
    budget: Arc<tokio::sync::Semaphore>,
) {
    let Serving {
        inbox,
        limits,
        mut goodbye,
        ..
    } = serving;
    let peer = connection.remote_address();
    let (mut send, mut recv) = match connection.accept_bi().await {
        Ok(s) => s,
        Err(e) => {
            log::debug!("{peer}: no stream: {e}");
            return;
        }
    };
    let (reply_tx, reply_rx) = flume::bounded::<Vec<u8>>(limits.requests_in_flight_max);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.requests_in_flight_max));
    let writer_slots = slots.clone();
    let writer = tokio::spawn(async move {
        while let Ok(answer) = reply_rx.recv_async().await {
            writer_slots.add_permits(1);
            if !answer.is_empty() && send.write_all(&answer).await.is_err() {
                break;
            }
        }
        let _ = send.finish();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), send.stopped()).await;
    });
    let mut header_bytes = [0u8; FRAME_HEADER_BYTES];
    // Kept outside the read, so a read cut short by the goodbye loses no
    // header bytes (`RecvStream::read` is cancel-safe, `read_exact` is not).
    let mut header_filled = 0;
    // Set once the goodbye is sent; the shards are stopping when it is
    // owed (an inbox that no longer takes frames).
    let mut goodbye_until: Option<tokio::time::Instant> = None;
    let mut goodbye_owed = false;
    loop {
        let Ok(permit) = slots.acquire().await else {
            break;
        };
        permit.forget();
        if goodbye_owed && goodbye_until.is_none() {
            // Say it in the slot just taken.
            let _ = reply_tx.try_send(goodbye_frame());
            goodbye_until = Some(tokio::time::Instant::now() + GOODBYE_WAIT);
            continue;
        }
        let until = goodbye_until.unwrap_or_else(|| tokio::time::Instant::now() + GOODBYE_WAIT);
        let read = tokio::select! {
            r = read_header(&mut recv, &mut header_bytes, &mut header_filled) => Some(r),
            _ = goodbye.wait_for(|stopping| *stopping), if goodbye_until.is_none() => None,
            () = tokio::time::sleep_until(until), if goodbye_until.is_some() => None,
        };
        let Some(read) = read else {
            // No frame read: the slot goes back.
            slots.add_permits(1);
            if goodbye_until.is_some() {
                // The client kept the stream open past the goodbye.
                break;
            }
            goodbye_owed = true;
            continue;
        };
        if read.is_err() {
            break;
        }
        header_filled = 0;
        let header = match FrameHeader::decode(&header_bytes) {
            Ok(h) => h,
            Err(e) => {
                log::warn!("{peer}: closing QUIC connection: {e}");
                let _ = reply_tx.try_send(error_frame(0, &ServeError::from(&e)));
                break;
            }
        };
        // The header passed its size check, so this fits the budget, which
        // holds at least one largest frame.
        let Ok(share) = budget
            .clone()
            .acquire_many_owned(header.payload_bytes)
            .await
        else {
            break;
        };
        let mut payload = vec![0u8; header.payload_bytes as usize];
        if recv.read_exact(&mut payload).await.is_err() {
            break;
        }
        if goodbye_until.is_some() {
            // Read after the goodbye: not applied, and the client is told.
            let _ = reply_tx.try_send(not_applied_frame(header.request_id));
            continue;
        }
        // The shard verifies the checksums (`Request::decode_verified`).
        let frame = InboxFrame {
            header,
            payload,
            reply: reply_tx.clone(),
            origin: Origin::Network,
            _budget: Some(share),
        };
        if inbox.send_async(frame).await.is_err() {
            // The shard is gone: the broker is stopping.
            let _ = reply_tx.try_send(not_applied_frame(header.request_id));
            goodbye_owed = true;
        }
    }
    drop(reply_tx);
    let _ = writer.await;
    connection.close(0u32.into(), b"done");
}

/// Read the rest of a frame header into `header[*filled..]`, counting in
/// `filled` as bytes arrive, so a caller that drops this future goes on
/// where it stopped. An error at the end of the stream.
async fn read_header(
    recv: &mut quinn::RecvStream,
    header: &mut [u8; FRAME_HEADER_BYTES],
    filled: &mut usize,
) -> std::io::Result<()> {
    while *filled < header.len() {
        match recv.read(&mut header[*filled..]).await {
            Ok(Some(n)) => *filled += n,
            Ok(None) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
