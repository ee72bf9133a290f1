//! One client connection on a shard, over any ordered byte stream (a TCP
//! connection here; the QUIC driver has its own reader on the QUIC thread
//! and shares `Outbox`'s discipline).
//!
//! The reader takes one frame at a time, verifies it and handles it before
//! reading the next, so a connection's produce requests are appended in the
//! order they were sent. Answers go to the outbox; a writer task sends them,
//! coalescing small ones into one write. Every request holds one in-flight
//! slot until its answer is written (or, for a silent answer, until it is
//! handled); at `connection_requests_in_flight_max` the reader stops
//! reading, which pushes back on the client through the transport's own
//! flow control.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use event_listener::Event;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use wire::frame::{FrameHeader, FRAME_HEADER_BYTES};
use wire::ErrorCode;

use crate::request::{error_frame, handle_frame, Origin, Reply};
use crate::serve_error::ServeError;
use crate::shard::Shard;

/// Answers below this size are coalesced into one write.
const COALESCE_BYTES_MAX: usize = 64 << 10;

/// A connection keeps its receive buffer up to this size between frames; a
/// larger frame (up to `FRAME_PAYLOAD_BYTES_MAX`) gets a buffer that is
/// released after it, so idle connections hold at most this much each.
const RECEIVE_BUFFER_KEPT_BYTES: usize = 2 << 20;

/// Answers waiting to be written, and the in-flight count that bounds them.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    queue: RefCell<VecDeque<Vec<u8>>>,
    ready: Event,
    in_flight: Cell<usize>,
    freed: Event,
    closed: Cell<bool>,
}

impl Outbox {
    fn push(&self, frame: Vec<u8>) {
        if self.closed.get() {
            return;
        }
        self.queue.borrow_mut().push_back(frame);
        self.ready.notify(1);
    }

    fn release(&self, n: usize) {
        self.in_flight.set(self.in_flight.get().saturating_sub(n));
        self.freed.notify(1);
    }

    async fn acquire(&self, max: usize) {
        loop {
            let listener = self.freed.listen();
            if self.in_flight.get() < max {
                self.in_flight.set(self.in_flight.get() + 1);
                return;
            }
            listener.await;
        }
    }

    fn close(&self) {
        self.closed.set(true);
        self.ready.notify(1);
    }
}

/// Decrements the shard's connection count when the connection ends.
struct ConnectionSlot(Rc<Shard>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0
            .connections
            .set(self.0.connections.get().saturating_sub(1));
    }
}

/// Whether the shard can take one more connection; if so it is counted.
pub(crate) fn admit(shard: &Rc<Shard>) -> bool {
    if shard.connections.get() >= shard.config.connections_per_shard_max {
        return false;
    }
    shard.connections.set(shard.connections.get() + 1);
    true
}

/// Serve a connection until the peer closes it or breaks the framing.
pub(crate) async fn serve<S>(shard: Rc<Shard>, stream: S, peer: String)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let _slot = ConnectionSlot(shard.clone());
    let (mut reader, writer) = futures_lite::io::split(stream);
    let outbox = Rc::new(Outbox::default());
    let writer_task = glommio::spawn_local(write_loop(writer, outbox.clone()));
    let in_flight_max = shard.config.connection_requests_in_flight_max;
    let mut header_bytes = [0u8; FRAME_HEADER_BYTES];
    let mut payload = Vec::new();
    loop {
        outbox.acquire(in_flight_max).await;
        let read = futures_lite::future::or(
            async { Some(reader.read_exact(&mut header_bytes).await) },
            async {
                shard.stopped().await;
                None
            },
        )
        .await;
        match read {
            // Shutting down: the connection ends between frames.
            None => break,
            Some(Ok(())) => {}
            Some(Err(e)) => {
                if e.kind() != std::io::ErrorKind::UnexpectedEof {
                    log::debug!("{peer}: read: {e}");
                }
                break;
            }
        }
        let header = match FrameHeader::decode(&header_bytes) {
            Ok(h) => h,
            Err(e) => {
                // The stream cannot be resynchronised: answer and close.
                log::warn!("{peer}: closing connection: {e}");
                outbox.push(error_frame(0, &ServeError::from(&e)));
                break;
            }
        };
        let len = header.payload_bytes as usize;
        if payload.len() < len {
            payload.resize(len, 0);
        }
        if let Err(e) = reader.read_exact(&mut payload[..len]).await {
            log::debug!("{peer}: read payload: {e}");
            break;
        }
        if let Err(e) = header.verify_payload(&payload[..len]) {
            // Framed correctly, so the stream is still in step.
            outbox.push(error_frame(header.request_id, &ServeError::from(&e)));
            continue;
        }
        match handle_frame(&shard, &header, &payload[..len], Origin::Network).await {
            Reply::Silent => outbox.release(1),
            Reply::Now(frame) => outbox.push(frame),
            Reply::Later(future) => {
                let outbox = outbox.clone();
                glommio::spawn_local(async move { outbox.push(future.await) }).detach();
            }
        }
        if payload.len() > RECEIVE_BUFFER_KEPT_BYTES {
            payload = Vec::new();
        }
    }
    outbox.close();
    writer_task.await;
}

async fn write_loop<W: AsyncWrite + Unpin>(mut writer: W, outbox: Rc<Outbox>) {
    let mut coalesced = Vec::with_capacity(COALESCE_BYTES_MAX);
    loop {
        let listener = outbox.ready.listen();
        let batch: Vec<Vec<u8>> = outbox.queue.borrow_mut().drain(..).collect();
        if batch.is_empty() {
            if outbox.closed.get() {
                break;
            }
            listener.await;
            continue;
        }
        let n = batch.len();
        let mut result = Ok(());
        for frame in batch {
            if coalesced.len() + frame.len() <= COALESCE_BYTES_MAX {
                coalesced.extend_from_slice(&frame);
                continue;
            }
            if !coalesced.is_empty() {
                result = result.and(writer.write_all(&coalesced).await);
                coalesced.clear();
            }
            result = result.and(writer.write_all(&frame).await);
        }
        if !coalesced.is_empty() {
            result = result.and(writer.write_all(&coalesced).await);
            coalesced.clear();
        }
        outbox.release(n);
        if let Err(e) = result {
            log::debug!("write: {e}");
            outbox.close();
            break;
        }
    }
    let _ = writer.flush().await;
    let _ = writer.close().await;
}

/// The answer sent to a connection refused for the connection limit.
pub(crate) fn busy_frame() -> Vec<u8> {
    error_frame(
        0,
        &ServeError::new(ErrorCode::Busy, "too many connections to this shard"),
    )
}
