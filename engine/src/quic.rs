//! QUIC ingest. quinn runs on one small tokio thread for all shards, one
//! endpoint per shard on that shard's port (shard-aware addresses), and
//! hands each frame to the owning shard through a bounded channel;
//! answers come back the same way. The hand-off is the price of running
//! quinn next to glommio (see BENCHMARKS.md for the measured cost against
//! raw quinn and the alternative of driving quinn-proto on the shard).
//!
//! The QUIC thread never touches segment state; the shard never touches a
//! socket of the QUIC thread.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use wire::frame::{FrameHeader, FRAME_HEADER_BYTES};
use wire::ErrorCode;

use crate::error::EngineError;
use crate::inbox::InboxFrame;
use crate::request::{error_frame, Origin};
use crate::serve_error::ServeError;

/// Limits the QUIC thread applies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QuicLimits {
    pub(crate) connections_per_shard_max: usize,
    pub(crate) requests_in_flight_max: usize,
    pub(crate) inbox_bytes_max: usize,
}

/// The running QUIC thread.
pub(crate) struct QuicThread {
    runtime: tokio::runtime::Runtime,
    endpoints: Vec<quinn::Endpoint>,
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
        for (i, (addr, inbox)) in addresses.into_iter().zip(inboxes).enumerate() {
            let _guard = runtime.enter();
            let endpoint = crate::broker::retry_in_use(|| {
                quinn::Endpoint::server(server_config.clone(), addr)
            })
            .map_err(|e| EngineError::io("bind QUIC", addr.to_string(), e))?;
            endpoints.push(endpoint.clone());
            runtime.spawn(accept_loop(i, endpoint, inbox, limits));
        }
        Ok(QuicThread { runtime, endpoints })
    }

    /// Close every connection and stop the thread.
    pub(crate) fn stop(self) {
        for e in &self.endpoints {
            e.close(0u32.into(), b"broker shutting down");
        }
        self.runtime
            .shutdown_timeout(std::time::Duration::from_secs(2));
    }
}

async fn accept_loop(
    shard: usize,
    endpoint: quinn::Endpoint,
    inbox: flume::Sender<InboxFrame>,
    limits: QuicLimits,
) {
    let connections = Arc::new(AtomicUsize::new(0));
    let budget = Arc::new(tokio::sync::Semaphore::new(limits.inbox_bytes_max));
    while let Some(incoming) = endpoint.accept().await {
        if connections.load(Ordering::Relaxed) >= limits.connections_per_shard_max {
            log::warn!("shard {shard}: refusing QUIC connection: connection limit");
            incoming.refuse();
            continue;
        }
        connections.fetch_add(1, Ordering::Relaxed);
        let inbox = inbox.clone();
        let connections = connections.clone();
        let budget = budget.clone();
        tokio::spawn(async move {
            match incoming.await {
                Ok(connection) => serve_connection(connection, inbox, budget, limits).await,
                Err(e) => log::debug!("shard {shard}: QUIC handshake: {e}"),
            }
            connections.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

async fn serve_connection(
    connection: quinn::Connection,
    inbox: flume::Sender<InboxFrame>,
    budget: Arc<tokio::sync::Semaphore>,
    limits: QuicLimits,
) {
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
    loop {
        let Ok(permit) = slots.acquire().await else {
            break;
        };
        permit.forget();
        if recv.read_exact(&mut header_bytes).await.is_err() {
            break;
        }
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
        // The shard verifies the checksums (`Request::decode_verified`).
        let frame = InboxFrame {
            header,
            payload,
            reply: reply_tx.clone(),
            origin: Origin::Network,
            _budget: Some(share),
        };
        if inbox.send_async(frame).await.is_err() {
            let _ = reply_tx.try_send(error_frame(
                header.request_id,
                &ServeError::new(ErrorCode::Internal, "shard is shutting down"),
            ));
            break;
        }
    }
    drop(reply_tx);
    let _ = writer.await;
    connection.close(0u32.into(), b"done");
}
