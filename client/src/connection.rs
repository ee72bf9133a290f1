//! One connection to one broker shard: a writer task, a reader task, and a
//! table of requests waiting for their answers.
//!
//! Requests are pipelined: [`Connection::submit`] queues a frame in order
//! and returns at once; the answer arrives through a oneshot matched by
//! request id, since a broker may answer out of order (durable acks). The
//! connection bounds both the frames queued for writing
//! (`write_queue_frames_max`) and the requests awaiting an answer
//! (`in_flight_requests_max`); `submit` waits when either is full.
//!
//! After a stream error the connection is failed for good: every waiting
//! request gets the error and later submits fail at once. The client opens
//! a fresh connection the next time it needs that shard.
//!
//! A stopping broker says goodbye (docs/wire-format.md, "Goodbye"): the
//! connection takes no new requests from then on (a submit fails with
//! `ShuttingDown`, which callers treat as "never sent, re-route"), writes
//! what was queued, closes its sending side, and still delivers the answers
//! the broker owes.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use wire::frame::FrameType;
use wire::{BrokerPortRequest, ErrorCode, Response};

use crate::error::ClientError;
use crate::frame_io::{read_frame, FrameReadError, ResponseFrame};

/// Bytes of the read and write buffers around a stream: big enough that
/// small frames cost one syscall per buffer, not per frame.
const STREAM_BUFFER_BYTES: usize = 64 << 10;
/// Frames the writer takes off its queue before flushing the stream.
const WRITE_FRAMES_PER_FLUSH_MAX: usize = 64;
/// Broker errors kept for requests that expected no answer (produce with
/// ack `none`); older ones are dropped beyond this.
pub(crate) const UNSOLICITED_ERRORS_MAX: usize = 64;

/// The limits of one connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionLimits {
    pub(crate) in_flight_requests_max: usize,
    pub(crate) write_queue_frames_max: usize,
}

type Waiter = oneshot::Sender<Result<ResponseFrame, ClientError>>;

#[derive(Default)]
struct Table {
    waiting: HashMap<u32, Waiter>,
    /// Set once the stream failed; every later submit gets it.
    failed: Option<ClientError>,
    /// Errors answering requests nobody waits for (ack `none` produces).
    unsolicited: VecDeque<ClientError>,
}

struct Shared {
    table: Mutex<Table>,
    /// Woken by the broker's goodbye: the writer stops taking frames.
    goodbye: tokio::sync::Notify,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while holding this lock cannot leave the table
        // inconsistent (each operation is one map call), so poisoning is
        // ignored.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The broker said goodbye: no new requests, but the ones waiting keep
    /// waiting for their answers.
    fn goodbye(&self) {
        log::debug!("the broker said goodbye");
        {
            let mut t = self.table();
            if t.failed.is_none() {
                t.failed = Some(ClientError::Broker {
                    code: ErrorCode::ShuttingDown,
                    message: "the broker is stopping".into(),
                });
            }
        }
        self.goodbye.notify_one();
    }

    fn fail(&self, error: ClientError) {
        let waiting = {
            let mut t = self.table();
            if t.failed.is_none() {
                t.failed = Some(error.clone());
            }
            std::mem::take(&mut t.waiting)
        };
        for (_, waiter) in waiting {
            let _ = waiter.send(Err(error.clone()));
        }
    }

    fn deliver(&self, request_id: u32, result: Result<ResponseFrame, ClientError>) {
        let waiter = self.table().waiting.remove(&request_id);
        match waiter {
            Some(w) => {
                let _ = w.send(result);
            }
            None => {
                // Nobody waits: a produce with ack `none` that failed, or an
                // answer that came after its request timed out.
                let error = match result {
                    Err(e) => Some(e),
                    // A refusal (plain or naming successors) or bad bytes.
                    Ok(frame) if frame.header.frame_type == FrameType::ErrorResponse => {
                        frame.response().err()
                    }
                    Ok(_) => None,
                };
                if let Some(e) = error {
                    log::debug!("unsolicited error for request {request_id}: {e}");
                    let mut t = self.table();
                    if t.unsolicited.len() == UNSOLICITED_ERRORS_MAX {
                        t.unsolicited.pop_front();
                    }
                    t.unsolicited.push_back(e);
                }
            }
        }
    }
}

/// A connection to one shard. Dropping it stops its tasks.
pub(crate) struct Connection {
    addr: String,
    shared: Arc<Shared>,
    outgoing: mpsc::Sender<Bytes>,
    in_flight: Arc<Semaphore>,
    next_request_id: AtomicU32,
    reader: JoinHandle<()>,
    /// Keeps the transport's connection object (the QUIC connection) alive
    /// as long as this connection.
    _guard: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The writer ends by itself when `outgoing` drops; the reader would
        // wait for the broker to close, so stop it.
        self.reader.abort();
    }
}

/// A request queued on a connection.
pub(crate) struct Submitted {
    /// The whole frame as written, shared with the writer (a producer keeps
    /// it to resend the batch inside).
    pub(crate) frame: Bytes,
    /// The answer to wait for, unless the request expects none.
    pub(crate) response: Option<PendingResponse>,
}

/// An answer not yet received. Holds one in-flight slot of its connection
/// until it resolves or is dropped.
pub(crate) struct PendingResponse {
    request_id: u32,
    rx: oneshot::Receiver<Result<ResponseFrame, ClientError>>,
    shared: Arc<Shared>,
    _permit: OwnedSemaphorePermit,
}

impl PendingResponse {
    /// Wait for the answer, at most `timeout`.
    pub(crate) async fn wait(
        self,
        operation: &'static str,
        timeout: Duration,
    ) -> Result<ResponseFrame, ClientError> {
        match tokio::time::timeout(timeout, self.rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(ClientError::Closed),
            Err(_) => {
                self.shared.table().waiting.remove(&self.request_id);
                Err(ClientError::Timeout {
                    operation,
                    after_ms: timeout.as_millis() as u64,
                })
            }
        }
    }
}

impl Connection {
    /// Start the reader and writer tasks over a stream's two halves.
    pub(crate) fn start<R, W>(
        addr: String,
        reader: R,
        writer: W,
        limits: ConnectionLimits,
        guard: Option<Box<dyn std::any::Any + Send + Sync>>,
        socket: Option<std::os::unix::io::RawFd>,
    ) -> Connection
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let shared = Arc::new(Shared {
            table: Mutex::new(Table::default()),
            goodbye: tokio::sync::Notify::new(),
        });
        let (outgoing, queue) = mpsc::channel(limits.write_queue_frames_max.max(1));
        tokio::spawn(write_loop(writer, queue, Arc::clone(&shared)));
        let reader = tokio::spawn(read_loop(reader, socket, Arc::clone(&shared)));
        Connection {
            addr,
            shared,
            outgoing,
            in_flight: Arc::new(Semaphore::new(limits.in_flight_requests_max.max(1))),
            next_request_id: AtomicU32::new(1),
            reader,
            _guard: guard,
        }
    }

    /// The address this connection dialed.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the stream failed; a failed connection is replaced.
    pub(crate) fn is_failed(&self) -> bool {
        self.shared.table().failed.is_some() || self.outgoing.is_closed()
    }

    /// Broker errors that answered requests nobody waited for, oldest first.
    pub(crate) fn take_unsolicited_errors(&self) -> Vec<ClientError> {
        self.shared.table().unsolicited.drain(..).collect()
    }

    /// Queue a request. Requests submitted one after another from one task
    /// are written in that order. Waits while the connection is at its
    /// in-flight or write-queue limit.
    pub(crate) async fn submit(
        &self,
        request: &BrokerPortRequest<'_>,
        expect_response: bool,
    ) -> Result<Submitted, ClientError> {
        let permit = Arc::clone(&self.in_flight)
            .acquire_owned()
            .await
            .map_err(|_| ClientError::Closed)?;
        let request_id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let mut frame = Vec::new();
        request.encode(request_id, &mut frame);
        let frame = Bytes::from(frame);
        let response = if expect_response {
            let (tx, rx) = oneshot::channel();
            {
                let mut t = self.shared.table();
                if let Some(e) = &t.failed {
                    return Err(e.clone());
                }
                t.waiting.insert(request_id, tx);
            }
            Some(PendingResponse {
                request_id,
                rx,
                shared: Arc::clone(&self.shared),
                _permit: permit,
            })
        } else {
            if let Some(e) = &self.shared.table().failed {
                return Err(e.clone());
            }
            // No answer will come: the slot frees once the frame is queued.
            drop(permit);
            None
        };
        if self.outgoing.send(frame.clone()).await.is_err() {
            self.shared.table().waiting.remove(&request_id);
            let failed = self.shared.table().failed.clone();
            return Err(failed.unwrap_or(ClientError::Closed));
        }
        Ok(Submitted { frame, response })
    }

    /// Submit a request and wait for its answer.
    pub(crate) async fn call(
        &self,
        request: &BrokerPortRequest<'_>,
        operation: &'static str,
        timeout: Duration,
    ) -> Result<ResponseFrame, ClientError> {
        match self.submit(request, true).await?.response {
            Some(pending) => pending.wait(operation, timeout).await,
            None => Err(ClientError::Closed),
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    writer: W,
    mut queue: mpsc::Receiver<Bytes>,
    shared: Arc<Shared>,
) {
    let mut writer = BufWriter::with_capacity(STREAM_BUFFER_BYTES, writer);
    loop {
        let frame = tokio::select! {
            frame = queue.recv() => frame,
            () = shared.goodbye.notified() => {
                // Take nothing new (a submit from now on fails, never
                // sent); what is queued is written below, then our side
                // closes, which tells the broker we are done.
                queue.close();
                continue;
            }
        };
        let Some(frame) = frame else { break };
        let mut result = writer.write_all(&frame).await;
        // Take what else is queued before flushing, so a burst of small
        // frames leaves in a few large writes.
        let mut taken = 1;
        while result.is_ok() && taken < WRITE_FRAMES_PER_FLUSH_MAX {
            match queue.try_recv() {
                Ok(frame) => {
                    result = writer.write_all(&frame).await;
                    taken += 1;
                }
                Err(_) => break,
            }
        }
        if result.is_ok() {
            result = writer.flush().await;
        }
        if let Err(e) = result {
            shared.fail(ClientError::io("writing to broker", e));
            return;
        }
    }
    // The connection was dropped, or the broker said goodbye: close our
    // side politely.
    let _ = writer.shutdown().await;
}

/// `socket`: the TCP socket `reader` reads, if it is one (it stays open
/// while `reader` does).
async fn read_loop<R: AsyncRead + Unpin>(
    reader: R,
    socket: Option<std::os::unix::io::RawFd>,
    shared: Arc<Shared>,
) {
    let mut reader = BufReader::with_capacity(STREAM_BUFFER_BYTES, reader);
    let mut low_water = crate::low_water::ReceiveLowWater::new(socket);
    loop {
        match read_frame(&mut reader, &mut low_water).await {
            Ok(Some(frame)) if is_goodbye(&frame) => shared.goodbye(),
            Ok(Some(frame)) => shared.deliver(frame.header.request_id, Ok(frame)),
            Ok(None) => {
                shared.fail(ClientError::Closed);
                return;
            }
            Err(FrameReadError::Payload { request_id, error }) => {
                shared.deliver(request_id, Err(ClientError::Decode(error)));
            }
            Err(FrameReadError::Stream(e)) => {
                log::debug!("connection failed: {e}");
                shared.fail(e);
                return;
            }
        }
    }
}

/// Whether `frame` is a broker's goodbye: an unasked `ShuttingDown`.
fn is_goodbye(frame: &ResponseFrame) -> bool {
    frame.header.request_id == 0
        && frame.header.frame_type == FrameType::ErrorResponse
        && matches!(
            Response::decode(frame.header.frame_type, &frame.payload),
            Ok(Response::Error {
                code: ErrorCode::ShuttingDown,
                ..
            })
        )
}

/// Whether a broker's refusal means the client's layout is behind: the
/// segment moved or was sealed, or its successor is not open on that
/// broker yet (`SegmentNotFound`, `TopicNotFound`: a cluster's control
/// plane opens successors a few ms after it seals, and a broker learns a
/// topic when it is first given one of its segments). Refresh the layout
/// and retry, a bounded number of times.
///
/// A connection that could not be opened counts too: nothing was sent, and
/// the segment's owner may have left (or died, and the control plane moves
/// its segments once it notices).
pub(crate) fn is_stale_layout(error: &ClientError) -> bool {
    matches!(error, ClientError::Connect { .. })
        || error.broker_code().is_some_and(|code| {
            code.is_stale_layout()
                || matches!(code, ErrorCode::SegmentNotFound | ErrorCode::TopicNotFound)
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::AsyncReadExt;
    use wire::frame::{FrameHeader, FRAME_HEADER_BYTES};
    use wire::{AdminRequest, DataRequest};

    fn list_topics() -> BrokerPortRequest<'static> {
        AdminRequest::ListTopics.into()
    }

    fn shards() -> BrokerPortRequest<'static> {
        DataRequest::Shards.into()
    }

    const LIMITS: ConnectionLimits = ConnectionLimits {
        in_flight_requests_max: 8,
        write_queue_frames_max: 8,
    };

    /// Read one request frame from the fake broker's side.
    async fn read_request<R: AsyncRead + Unpin>(r: &mut R) -> (FrameHeader, Vec<u8>) {
        let mut h = [0u8; FRAME_HEADER_BYTES];
        r.read_exact(&mut h).await.unwrap();
        let header = FrameHeader::decode(&h).unwrap();
        let mut payload = vec![0u8; header.payload_bytes as usize];
        r.read_exact(&mut payload).await.unwrap();
        (header, payload)
    }

    #[tokio::test]
    async fn answers_out_of_order_reach_their_requests() {
        let (client_side, broker_side) = tokio::io::duplex(1 << 16);
        let (cr, cw) = tokio::io::split(client_side);
        let conn = Connection::start("test".into(), cr, cw, LIMITS, None, None);
        let (mut br, mut bw) = tokio::io::split(broker_side);
        let a = conn.submit(&list_topics(), true).await.unwrap();
        let b = conn.submit(&shards(), true).await.unwrap();
        let (ha, _) = read_request(&mut br).await;
        let (hb, _) = read_request(&mut br).await;
        let mut out = Vec::new();
        Response::Done.encode(hb.request_id, &mut out);
        Response::TopicList {
            topics: vec!["a/b".into()],
        }
        .encode(ha.request_id, &mut out);
        bw.write_all(&out).await.unwrap();
        let t = Duration::from_secs(5);
        let rb = b.response.unwrap().wait("b", t).await.unwrap();
        assert!(matches!(rb.response().unwrap(), Response::Done));
        let ra = a.response.unwrap().wait("a", t).await.unwrap();
        assert!(matches!(ra.response().unwrap(), Response::TopicList { .. }));
    }

    #[tokio::test]
    async fn corrupt_stream_fails_every_waiting_request() {
        let (client_side, broker_side) = tokio::io::duplex(1 << 16);
        let (cr, cw) = tokio::io::split(client_side);
        let conn = Connection::start("test".into(), cr, cw, LIMITS, None, None);
        let (_br, mut bw) = tokio::io::split(broker_side);
        let a = conn.submit(&list_topics(), true).await.unwrap();
        bw.write_all(b"garbage that is not a frame").await.unwrap();
        let r = a.response.unwrap().wait("a", Duration::from_secs(5)).await;
        assert!(matches!(r, Err(ClientError::Decode(_))), "{r:?}");
        assert!(conn.is_failed());
        assert!(conn.submit(&list_topics(), true).await.is_err());
    }

    #[tokio::test]
    async fn errors_for_unawaited_requests_are_kept() {
        let (client_side, broker_side) = tokio::io::duplex(1 << 16);
        let (cr, cw) = tokio::io::split(client_side);
        let conn = Connection::start("test".into(), cr, cw, LIMITS, None, None);
        let (mut br, mut bw) = tokio::io::split(broker_side);
        conn.submit(&list_topics(), false).await.unwrap();
        let barrier = conn.submit(&shards(), true).await.unwrap();
        let (h1, _) = read_request(&mut br).await;
        let (h2, _) = read_request(&mut br).await;
        let mut out = Vec::new();
        Response::Error {
            code: ErrorCode::TopicNotFound,
            message: "no such topic".into(),
        }
        .encode(h1.request_id, &mut out);
        Response::Done.encode(h2.request_id, &mut out);
        bw.write_all(&out).await.unwrap();
        barrier
            .response
            .unwrap()
            .wait("barrier", Duration::from_secs(5))
            .await
            .unwrap();
        let errors = conn.take_unsolicited_errors();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].broker_code(), Some(ErrorCode::TopicNotFound));
    }
}
