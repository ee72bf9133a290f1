//! One client connection on a shard, over any ordered byte stream (a TCP
//! connection here; the shard's QUIC driver has its own reader, in
//! `quic_shard/`, and shares `Outbox`'s discipline).
//!
//! A fetch answer whose batches are in a file is sent from the file: on a
//! TCP socket with `sendfile`, so the broker neither copies nor checksums
//! those bytes (`file_range.rs`).
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
use std::net::IpAddr;
use std::os::unix::io::RawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use event_listener::Event;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use wire::frame::FrameHeader;
use wire::ErrorCode;
use wire::FrameDecoder;

use crate::file_range::FileRange;
use crate::peer_limit::PeerSlot;
use crate::request::{
    error_frame, goodbye_frame, handle_frame, not_applied_frame, Origin, Outgoing, Reply,
};
use crate::serve_error::ServeError;
use crate::shard::Shard;
use crate::shard_metrics::{Refusal, Transport};

/// Answers below this size are coalesced into one write.
const COALESCE_BYTES_MAX: usize = 64 << 10;

/// A connection keeps its receive buffer up to this size between frames; a
/// larger frame (up to `FRAME_PAYLOAD_BYTES_MAX`) gets a buffer that is
/// released after it, so idle connections hold at most this much each.
const RECEIVE_BUFFER_KEPT_BYTES: usize = 2 << 20;

/// Answers waiting to be written, and the in-flight count that bounds them.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    queue: RefCell<VecDeque<Outgoing>>,
    ready: Event,
    in_flight: Cell<usize>,
    freed: Event,
    closed: Cell<bool>,
}

impl Outbox {
    fn push(&self, answer: Outgoing) {
        if self.closed.get() {
            return;
        }
        self.queue.borrow_mut().push_back(answer);
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

    /// Take a slot without waiting, past the bound if need be: for the one
    /// goodbye a connection may owe on top of its requests' answers.
    fn take_slot_over_bound(&self) {
        self.in_flight.set(self.in_flight.get() + 1);
    }

    fn close(&self) {
        self.closed.set(true);
        self.ready.notify(1);
        self.freed.notify(usize::MAX);
    }

    /// Wait until every request taken has been answered (or the writer
    /// failed), or until `until`.
    /// Whether answers are still owed besides the slot of the read under
    /// way.
    fn owed(&self) -> bool {
        self.in_flight.get() > 1
    }

    async fn answered(&self, until: Instant) {
        loop {
            let listener = self.freed.listen();
            if self.in_flight.get() == 0 || self.closed.get() || Instant::now() >= until {
                return;
            }
            futures_lite::future::or(listener, sleep_until(until)).await;
        }
    }
}

/// A connection counted by its shard and its peer's address; both counts
/// go when it ends.
pub(crate) struct ConnectionSlot {
    shard: Rc<Shard>,
    _peer: PeerSlot,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let connections = &self.shard.connections;
        connections.set(connections.get().saturating_sub(1));
    }
}

/// A slot for one more connection from `ip`, or why there is none (the
/// shard's limit, or the address's), counted in the shard's figures.
pub(crate) fn admit(shard: &Rc<Shard>, ip: IpAddr) -> Result<ConnectionSlot, Refusal> {
    let refused = |why: Refusal| {
        shard
            .metrics
            .traffic(Transport::Tcp)
            .connections
            .refused(why)
            .add(1);
        why
    };
    if shard.connections.get() >= shard.config.connections_per_shard_max {
        return Err(refused(Refusal::ConnectionLimit));
    }
    let peer = shard
        .peers
        .admit(ip)
        .ok_or_else(|| refused(Refusal::AddressLimit))?;
    shard.connections.set(shard.connections.get() + 1);
    Ok(ConnectionSlot {
        shard: shard.clone(),
        _peer: peer,
    })
}

/// How long a connection keeps a receive buffer above
/// `RECEIVE_BUFFER_IDLE_KEPT_BYTES` while no frame comes: past it the
/// buffer goes, so idle connections hold little memory.
const RECEIVE_BUFFER_IDLE: Duration = Duration::from_secs(1);
const RECEIVE_BUFFER_IDLE_KEPT_BYTES: usize = 64 << 10;

/// How long a connection of a stopping shard keeps going after its
/// goodbye, for the client to close its side and for the answers it is
/// owed to be written (docs/wire-format.md, "Goodbye"); also how long a
/// connection whose client closed its side waits for those answers. Under
/// the shard's own wait for its connections (`CONNECTIONS_DRAIN_WAIT`).
pub(crate) const GOODBYE_WAIT: Duration = Duration::from_millis(1_500);

/// Serve a connection until the peer closes it or breaks the framing, or
/// the shard stops (then with a goodbye, so no request goes unanswered).
/// `socket` is the stream's descriptor if fetch answers may be sent from
/// their files with `sendfile` (it must then be non-blocking).
pub(crate) async fn serve<S>(slot: ConnectionSlot, stream: S, socket: Option<RawFd>, peer: String)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let shard = slot.shard.clone();
    let _slot = slot;
    let (mut reader, writer) = futures_lite::io::split(stream);
    let outbox = Rc::new(Outbox::default());
    let writer_task = glommio::spawn_local(write_loop(writer, socket, outbox.clone()));
    let in_flight_max = shard.config.connection_requests_in_flight_max;
    // Frames are cut by wire's decoder, which also keeps the payload
    // memory between frames.
    let mut decoder = FrameDecoder::new();
    let mut session = crate::access::new_session(&shard);
    // Set once the goodbye is queued: until then the shard's stop ends a
    // wait for the next frame, after it this deadline does.
    let mut goodbye_until: Option<Instant> = None;
    // Header bytes read so far stay in the decoder, outside the read, so a
    // read cut short by the shard's stop loses none of them (glommio
    // consumes bytes only in a read that completes).
    let timeouts = PeerTimeouts::of(&shard.config);
    // When the last whole frame came (or the connection opened), and when
    // the first bytes of the frame being read did.
    let mut last_frame_at = Instant::now();
    let mut frame_started_at: Option<Instant> = None;
    loop {
        outbox.acquire(in_flight_max).await;
        let mut deadline = timeouts.deadline(last_frame_at, frame_started_at);
        if decoder.kept_bytes() > RECEIVE_BUFFER_IDLE_KEPT_BYTES {
            deadline = deadline.min(last_frame_at + RECEIVE_BUFFER_IDLE);
        }
        let read = futures_lite::future::or(
            async { Some(read_header(&mut reader, &mut decoder, &mut frame_started_at).await) },
            async {
                futures_lite::future::or(
                    async {
                        match goodbye_until {
                            None => shard.stopped().await,
                            Some(until) => sleep_until(until).await,
                        }
                    },
                    sleep_until(deadline),
                )
                .await;
                None
            },
        )
        .await;
        if read.is_none() && goodbye_until.is_none() && !shard.stopping.get() {
            // The timer: idle, or a frame arriving too slowly, or neither
            // yet (a frame began during the wait; answers are still owed).
            let now = Instant::now();
            if frame_started_at.is_none()
                && now >= last_frame_at + RECEIVE_BUFFER_IDLE
                && decoder.kept_bytes() > RECEIVE_BUFFER_IDLE_KEPT_BYTES
            {
                // Idle for a while: its memory goes back.
                decoder.drop_kept();
            }
            match timeouts.expired(now, last_frame_at, frame_started_at, outbox.owed()) {
                Some(why) => {
                    log::info!("{peer}: closing connection: {why}");
                    outbox.release(1);
                    break;
                }
                None => {
                    // Owed answers keep the connection busy: its idle time
                    // counts from now.
                    if frame_started_at.is_none() && outbox.owed() {
                        last_frame_at = now;
                    }
                    outbox.release(1);
                    continue;
                }
            }
        }
        let decoded = match read {
            None if goodbye_until.is_none() => {
                // The shard stops: say goodbye between frames (in the slot
                // just taken), and read on until the client closes.
                outbox.push(Outgoing::Frame(goodbye_frame()));
                goodbye_until = Some(Instant::now() + GOODBYE_WAIT);
                continue;
            }
            // The client kept the connection open past the goodbye.
            None => {
                outbox.release(1);
                break;
            }
            Some(Ok(decoded)) => decoded,
            Some(Err(e)) => {
                if e.kind() != std::io::ErrorKind::UnexpectedEof {
                    log::debug!("{peer}: read: {e}");
                }
                outbox.release(1);
                break;
            }
        };
        let header = match decoded {
            Ok(h) => h,
            Err(e) => {
                // The stream cannot be resynchronised: answer and close.
                log::warn!("{peer}: closing connection: {e}");
                outbox.push(Outgoing::Frame(error_frame(0, &ServeError::from(&e))));
                break;
            }
        };
        let len = header.payload_bytes as usize;
        let started = frame_started_at.unwrap_or_else(Instant::now);
        // Room among the shard's frames before the bytes are taken in:
        // waiting here counts in the frame's timeout. A small frame needs
        // none (a connection's kept buffer holds it), so requests of a few
        // bytes go on while large ones wait.
        let budget = shard.receive_budget.clone();
        let needed = if len > RECEIVE_BUFFER_IDLE_KEPT_BYTES {
            len as u64
        } else {
            0
        };
        let room = match budget.try_take(needed) {
            Some(permit) => Some(permit),
            // No room now: wait for it, within the frame's time.
            None => {
                futures_lite::future::or(async { Some(budget.take(needed).await) }, async {
                    sleep_until(started + timeouts.frame).await;
                    None
                })
                .await
            }
        };
        let Some(_room) = room else {
            log::info!(
                "{peer}: closing connection: no room for a {len}-byte frame among the shard's \
                 (receive_bytes_max) within {} ms",
                timeouts.frame.as_millis()
            );
            outbox.release(1);
            break;
        };
        let frame = match decoder.admit() {
            Some(empty) => Ok(empty),
            None => {
                let read = futures_lite::future::or(
                    async { Some(reader.read_exact(decoder.unfilled()).await) },
                    async {
                        sleep_until(started + timeouts.frame).await;
                        None
                    },
                )
                .await;
                match read {
                    Some(Ok(())) => match decoder.filled(len) {
                        Ok(Some(frame)) => Ok(frame),
                        // A whole payload always completes its frame.
                        _ => Err(Some(std::io::Error::other("frame decoder out of step"))),
                    },
                    Some(Err(e)) => Err(Some(e)),
                    None => Err(None),
                }
            }
        };
        let frame = match frame {
            Ok(frame) => frame,
            Err(Some(e)) => {
                log::debug!("{peer}: read payload: {e}");
                outbox.release(1);
                break;
            }
            Err(None) => {
                log::info!(
                    "{peer}: closing connection: a {len}-byte frame not received within {} ms",
                    timeouts.frame.as_millis()
                );
                outbox.release(1);
                break;
            }
        };
        last_frame_at = Instant::now();
        frame_started_at = None;
        if goodbye_until.is_none() && shard.stopping.get() {
            // The shard stopped while this frame came in: say goodbye
            // first (one answer past the in-flight bound, once), then
            // refuse the frame like any read after it.
            outbox.take_slot_over_bound();
            outbox.push(Outgoing::Frame(goodbye_frame()));
            goodbye_until = Some(Instant::now() + GOODBYE_WAIT);
        }
        if goodbye_until.is_some() {
            // Read after the goodbye: not applied, and the client is told.
            outbox.push(Outgoing::Frame(not_applied_frame(header.request_id)));
            decoder.recycle(frame.payload);
            continue;
        }
        match handle_frame(
            &shard,
            &header,
            &frame.payload,
            Origin::Network(Transport::Tcp),
            &mut session,
        )
        .await
        {
            Reply::Silent => outbox.release(1),
            Reply::Now(frame) => outbox.push(Outgoing::Frame(frame)),
            Reply::Later(future) => {
                let outbox = outbox.clone();
                glommio::spawn_local(async move { outbox.push(Outgoing::Frame(future.await)) })
                    .detach();
            }
            Reply::Fetched(future) => {
                let outbox = outbox.clone();
                glommio::spawn_local(async move { outbox.push(future.await) }).detach();
            }
        }
        // A buffer up to the kept size serves the next frame.
        if frame.payload.len() <= RECEIVE_BUFFER_KEPT_BYTES {
            decoder.recycle(frame.payload);
        }
    }
    // Answers still being made (a durable produce waiting for its flush,
    // a fetch waiting for data) are written before the connection closes,
    // within a bound.
    let until = goodbye_until.unwrap_or_else(|| Instant::now() + GOODBYE_WAIT);
    outbox.answered(until).await;
    outbox.close();
    writer_task.await;
}

/// Read the rest of a frame header into `decoder`, noting in `started_at`
/// when its first byte came: a caller that drops this future mid-header
/// calls it again and goes on where it stopped. The header decoded, or why
/// it does not (then the stream cannot be resynchronised).
async fn read_header<R: AsyncRead + Unpin>(
    reader: &mut R,
    decoder: &mut FrameDecoder,
    started_at: &mut Option<Instant>,
) -> std::io::Result<Result<FrameHeader, wire::DecodeError>> {
    loop {
        if let Some(header) = decoder.header() {
            return Ok(Ok(header));
        }
        let n = reader.read(decoder.unfilled()).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        started_at.get_or_insert_with(Instant::now);
        if let Err(e) = decoder.filled(n) {
            return Ok(Err(e));
        }
    }
}

/// How long a peer may stay silent, and how long one frame may take to
/// arrive: so idle and trickling connections cannot hold the connection
/// limit (or a frame's buffer) for ever.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerTimeouts {
    /// No frame for this long, and no answer owed: the connection closes.
    pub(crate) idle: Duration,
    /// A frame whose first byte came this long ago and that is not all
    /// here: the connection closes.
    pub(crate) frame: Duration,
}

/// Which of a connection's timeouts ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Expiry {
    /// A frame began and did not all arrive in time (`frame_timeout_ms`).
    #[error("a frame not received within {ms} ms")]
    Frame {
        /// The timeout.
        ms: u128,
    },
    /// Nothing came and nothing was owed for this long (`idle_timeout_ms`).
    #[error("idle for {ms} ms")]
    Idle {
        /// The timeout.
        ms: u128,
    },
}

impl PeerTimeouts {
    pub(crate) fn of(config: &crate::BrokerConfig) -> PeerTimeouts {
        PeerTimeouts {
            idle: Duration::from_millis(config.idle_timeout_ms),
            frame: Duration::from_millis(config.frame_timeout_ms),
        }
    }

    /// When to look again, waiting for a frame.
    pub(crate) fn deadline(
        &self,
        last_frame_at: Instant,
        frame_started_at: Option<Instant>,
    ) -> Instant {
        match frame_started_at {
            Some(started) => started + self.frame,
            None => last_frame_at + self.idle,
        }
    }

    /// Why the connection should close at `now`, if it should: a frame
    /// too slow, or silence with nothing owed (a long-poll fetch being
    /// answered is not idleness).
    pub(crate) fn expired(
        &self,
        now: Instant,
        last_frame_at: Instant,
        frame_started_at: Option<Instant>,
        answers_owed: bool,
    ) -> Option<Expiry> {
        match frame_started_at {
            Some(started) if now >= started + self.frame => Some(Expiry::Frame {
                ms: self.frame.as_millis(),
            }),
            Some(_) => None,
            None if !answers_owed && now >= last_frame_at + self.idle => Some(Expiry::Idle {
                ms: self.idle.as_millis(),
            }),
            None => None,
        }
    }
}

/// Sleep until `until` (at once if it passed).
async fn sleep_until(until: Instant) {
    glommio::timer::sleep(until.saturating_duration_since(Instant::now())).await;
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut writer: W,
    socket: Option<RawFd>,
    outbox: Rc<Outbox>,
) {
    let mut coalesced = Vec::with_capacity(COALESCE_BYTES_MAX);
    loop {
        let listener = outbox.ready.listen();
        let batch: Vec<Outgoing> = outbox.queue.borrow_mut().drain(..).collect();
        if batch.is_empty() {
            if outbox.closed.get() {
                break;
            }
            listener.await;
            continue;
        }
        let n = batch.len();
        let mut result = Ok(());
        for answer in batch {
            let (frame, body) = match &answer {
                Outgoing::Frame(frame) => (&frame[..], None),
                Outgoing::Fetched { head, body } => (&head[..], Some(body)),
            };
            if coalesced.len() + frame.len() <= COALESCE_BYTES_MAX {
                coalesced.extend_from_slice(frame);
            } else {
                if !coalesced.is_empty() {
                    result = result.and(writer.write_all(&coalesced).await);
                    coalesced.clear();
                }
                result = result.and(writer.write_all(frame).await);
            }
            let Some(body) = body else { continue };
            // What came before goes first; then the batches, from their file.
            if !coalesced.is_empty() {
                result = result.and(writer.write_all(&coalesced).await);
                coalesced.clear();
            }
            for range in body.iter() {
                if result.is_ok() {
                    result = send_file_range(&mut writer, socket, range).await;
                }
            }
        }
        if !coalesced.is_empty() {
            result = result.and(writer.write_all(&coalesced).await);
            coalesced.clear();
        }
        // A stream without its socket (TLS) holds what it encrypted until
        // flushed; the plain socket's writes are already sent.
        if socket.is_none() {
            result = result.and(writer.flush().await);
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

/// Bytes written through the stream (a copy) while `sendfile` waits for
/// room in the socket: the stream's write waits for that room, then the
/// rest goes by `sendfile` again.
const SEND_WAIT_PIECE_BYTES: usize = 16 << 10;

/// Send a fetch answer's batches from their file: with `sendfile` on a
/// socket that allows it, else through the stream from the mapping.
async fn send_file_range<W: AsyncWrite + Unpin>(
    writer: &mut W,
    socket: Option<RawFd>,
    body: &FileRange,
) -> std::io::Result<()> {
    let (mut at, to) = body.span();
    let Some(socket) = socket else {
        return writer.write_all(body.bytes()).await;
    };
    while at < to {
        if body.send_some(socket, &mut at)? {
            break;
        }
        let piece = body.piece(at, SEND_WAIT_PIECE_BYTES);
        let written = writer.write(piece).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        at += written;
    }
    Ok(())
}

/// The answer sent to a connection refused for the connection limit.
pub(crate) fn busy_frame() -> Vec<u8> {
    error_frame(
        0,
        &ServeError::new(ErrorCode::Busy, "too many connections to this shard"),
    )
}
