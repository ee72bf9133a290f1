//! [`ControlConnections`]: the control plane's listener and every
//! connection it serves, on one thread (`mio`), however many there are.
//!
//! A connection has at most one request with the driver at a time: while it
//! waits for the answer it is not read, so its requests are answered in
//! order and it holds at most one frame. Every frame's payload is admitted
//! against one byte budget, [`ConnectionLimits::receive_bytes_max`]: past
//! it a connection waits before it reads a payload, its frame timeout
//! running (the oldest waiter whose payload fits goes first; a megabyte
//! of the budget is kept for small payloads). Peers that announce large
//! frames and stall, over any number of connections, cannot grow the
//! process past that budget.
//!
//! Connections are turned away with a `Busy` answer past
//! [`ConnectionLimits::connections_max`] or past
//! [`ConnectionLimits::connections_per_ip_max`] from one address. One that
//! sends no frame for [`ConnectionLimits::idle_timeout`] while none of its
//! requests is with the driver is closed (an answer it does not read
//! counts as idle), and so is one whose frame has not all arrived
//! [`ConnectionLimits::frame_timeout`] after its first byte: idle or
//! trickling peers cannot hold the connection slots.
//!
//! Every frame is decoded and checked before anything uses it: a payload
//! that fails its checksum or does not decode gets an error answer and the
//! connection goes on; a bad header (magic, version, type, length over the
//! limit) cannot be resynchronised, so it gets an error answer and the
//! connection is closed once that is written.

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use wire::{ControlPortRequest, DecodeError, ErrorCode, FrameDecoder, Response};

use crate::cluster_service::not_served;
use crate::control_figures::ControlFigures;

/// The listener's token.
const LISTENER: Token = Token(0);
/// The waker's token: answers came, or the server stops.
const WAKER: Token = Token(1);
/// The first connection's token; each connection gets a new one.
const FIRST_CONNECTION: u64 = 2;
/// Readiness events taken per poll.
const EVENTS_PER_POLL: usize = 256;
/// Payload memory a connection keeps between frames; a larger frame's
/// buffer is let go once the frame is handled.
const KEPT_PAYLOAD_BYTES_MAX: usize = 64 << 10;
/// A payload this large or smaller may use the part of the receive budget
/// larger ones leave ([`SMALL_PAYLOADS_RESERVED_BYTES`]).
const SMALL_PAYLOAD_BYTES_MAX: u64 = 64 << 10;
/// The part of the receive budget only small payloads may use.
const SMALL_PAYLOADS_RESERVED_BYTES: u64 = 1 << 20;
/// Longest wait between looks at the connections' deadlines.
const DEADLINE_CHECK_MAX: Duration = Duration::from_secs(1);
/// Shortest wait between those looks.
const DEADLINE_CHECK_MIN: Duration = Duration::from_millis(10);

/// What connections may hold and how long they may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionLimits {
    /// Most connections served at once; more are answered `Busy` and
    /// closed.
    pub(crate) connections_max: usize,
    /// Most connections from one IP address.
    pub(crate) connections_per_ip_max: usize,
    /// Frame payload bytes held for all connections together; at least
    /// `wire::limits::FRAME_PAYLOAD_BYTES_MAX`.
    pub(crate) receive_bytes_max: u64,
    /// A connection that sent no frame for this long and is owed no answer
    /// is closed.
    pub(crate) idle_timeout: Duration,
    /// A frame whose first byte came this long ago must be all here, or
    /// the connection is closed.
    pub(crate) frame_timeout: Duration,
}

/// Where the driver sends one request's answer: the connection thread's
/// queue, which it is woken to read. The queue has room for one answer per
/// connection slot, and a connection keeps its slot until its answer comes
/// back (even once it closed), so it never fills.
#[derive(Debug)]
pub(crate) struct Reply {
    connection: Token,
    request_id: u32,
    answers: SyncSender<Answered>,
    waker: Arc<Waker>,
}

impl Reply {
    /// Hand `response` to the connection it answers.
    pub(crate) fn send(self, response: Response<'static>) {
        let answered = Answered {
            connection: self.connection,
            request_id: self.request_id,
            response,
        };
        if self.answers.try_send(answered).is_ok() {
            // A waker that fails leaves the answer for the next wake-up.
            let _ = self.waker.wake();
        }
    }
}

/// An answer on its way back to its connection.
#[derive(Debug)]
struct Answered {
    connection: Token,
    request_id: u32,
    response: Response<'static>,
}

/// A request a connection decoded, for the driver: it must be answered
/// through `reply`.
pub(crate) type Ask = Box<dyn Fn(ControlPortRequest, Reply) -> bool + Send>;

/// The connection thread's handle: wakes it to stop.
#[derive(Debug)]
pub(crate) struct ConnectionsHandle {
    waker: Arc<Waker>,
    stopping: Arc<AtomicBool>,
}

impl ConnectionsHandle {
    /// Close every connection and end the thread.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
    }
}

/// The listener and its connections (see the module docs).
pub(crate) struct ControlConnections {
    poll: Poll,
    listener: TcpListener,
    limits: ConnectionLimits,
    /// Hands a decoded request to the driver; false once it has stopped.
    ask: Ask,
    answers: Receiver<Answered>,
    answers_in: SyncSender<Answered>,
    waker: Arc<Waker>,
    stopping: Arc<AtomicBool>,
    figures: Arc<ControlFigures>,
    connections: HashMap<Token, Connection>,
    per_ip: HashMap<IpAddr, usize>,
    next_token: u64,
    /// Payload bytes admitted and not yet handled, all connections.
    receive_bytes: u64,
    /// Connections waiting for payload room, oldest first.
    waiting_for_room: VecDeque<Token>,
    /// Users and the cluster secret; `None`: every connection is open.
    auth: Option<Arc<auth::AuthFile>>,
}

/// One connection's state.
struct Connection {
    /// `None` once the stream is closed while an answer is still owed:
    /// the slot is kept until it comes back.
    stream: Option<TcpStream>,
    peer: IpAddr,
    decoder: FrameDecoder,
    /// Payload bytes of the frame being read held against the budget.
    admitted: u64,
    /// Answers not yet written, from `written` on.
    out: Vec<u8>,
    written: usize,
    /// A request is with the driver.
    asking: bool,
    /// In `waiting_for_room`.
    waiting_for_room: bool,
    /// Close once `out` is written (after a bad header).
    closing: bool,
    last_frame_at: Instant,
    frame_started_at: Option<Instant>,
    /// Who the peer proved to be.
    session: auth::Session,
}

/// What reading a connection came to.
enum Pumped {
    /// It waits (for bytes, an answer, room or the socket's send buffer).
    Waits,
    /// It is to be closed, for this reason (`None`: the peer closed).
    Close(Option<String>),
}

impl ControlConnections {
    /// Take over `listener` (a bound std listener) and serve it on the
    /// calling thread until stopped.
    pub(crate) fn new(
        listener: std::net::TcpListener,
        limits: ConnectionLimits,
        ask: Ask,
        figures: Arc<ControlFigures>,
        auth: Option<Arc<auth::AuthFile>>,
    ) -> std::io::Result<(ControlConnections, ConnectionsHandle)> {
        listener.set_nonblocking(true)?;
        let mut listener = TcpListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        // One answer per connection slot at most (see `Reply`).
        let (answers_in, answers) = sync_channel(limits.connections_max);
        let stopping = Arc::new(AtomicBool::new(false));
        let handle = ConnectionsHandle {
            waker: waker.clone(),
            stopping: stopping.clone(),
        };
        Ok((
            ControlConnections {
                poll,
                listener,
                limits,
                ask,
                answers,
                answers_in,
                waker,
                stopping,
                figures,
                connections: HashMap::new(),
                per_ip: HashMap::new(),
                next_token: FIRST_CONNECTION,
                receive_bytes: 0,
                waiting_for_room: VecDeque::new(),
                auth,
            },
            handle,
        ))
    }

    /// Serve until stopped.
    pub(crate) fn run(mut self) {
        let mut events = Events::with_capacity(EVENTS_PER_POLL);
        let check_every = self
            .limits
            .idle_timeout
            .min(self.limits.frame_timeout)
            .checked_div(4)
            .unwrap_or(DEADLINE_CHECK_MAX)
            .clamp(DEADLINE_CHECK_MIN, DEADLINE_CHECK_MAX);
        let mut next_check = Instant::now() + check_every;
        loop {
            let wait = next_check.saturating_duration_since(Instant::now());
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != ErrorKind::Interrupted {
                    log::error!("control plane connections: poll failed, stopping: {e}");
                    return;
                }
            }
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            for event in &events {
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER => self.take_answers(),
                    token => self.pump(token),
                }
            }
            // Answers may come between a wake-up and the poll that sees it.
            self.take_answers();
            let now = Instant::now();
            if now >= next_check {
                self.expire(now);
                next_check = now + check_every;
            }
            self.figures
                .set_connections(self.open_connections(), self.receive_bytes);
        }
    }

    /// Connections with an open stream.
    fn open_connections(&self) -> u64 {
        self.connections
            .values()
            .filter(|c| c.stream.is_some())
            .count() as u64
    }

    /// Take every connection waiting on the listener.
    fn accept(&mut self) {
        loop {
            let (stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors and the like: the next readiness
                    // event tries again.
                    log::warn!("control plane: accepting a connection: {e}");
                    return;
                }
            };
            self.admit(stream, peer);
        }
    }

    fn admit(&mut self, mut stream: TcpStream, peer: SocketAddr) {
        let from_peer = self.per_ip.get(&peer.ip()).copied().unwrap_or(0);
        let refusal = if self.connections.len() >= self.limits.connections_max {
            self.figures.count_refused_for_connections();
            Some(format!(
                "at most {} connections at once",
                self.limits.connections_max
            ))
        } else if from_peer >= self.limits.connections_per_ip_max {
            self.figures.count_refused_for_address();
            log::warn!(
                "control plane: refused a connection from {peer}: {from_peer} open from {} \
                 already (connections_per_ip_max)",
                peer.ip()
            );
            Some(format!(
                "at most {} connections from one address",
                self.limits.connections_per_ip_max
            ))
        } else {
            None
        };
        if let Some(message) = refusal {
            // The socket's send buffer is empty: one small frame fits.
            let mut out = Vec::new();
            Response::Error {
                code: ErrorCode::Busy,
                message,
            }
            .encode(0, &mut out);
            let _ = stream.write(&out);
            return;
        }
        let token = Token(usize::try_from(self.next_token).unwrap_or(usize::MAX));
        self.next_token += 1;
        let _ = stream.set_nodelay(true);
        if let Err(e) = self.poll.registry().register(
            &mut stream,
            token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            log::warn!("control plane: registering the connection from {peer}: {e}");
            return;
        }
        *self.per_ip.entry(peer.ip()).or_insert(0) += 1;
        let now = Instant::now();
        self.connections.insert(
            token,
            Connection {
                stream: Some(stream),
                peer: peer.ip(),
                decoder: FrameDecoder::new(),
                session: auth::Session::new(self.auth.as_deref()),
                admitted: 0,
                out: Vec::new(),
                written: 0,
                asking: false,
                waiting_for_room: false,
                closing: false,
                last_frame_at: now,
                frame_started_at: None,
            },
        );
        // Bytes may be there already; edge-triggered readiness says so
        // once, at registration, so this is not needed, but is harmless.
        self.pump(token);
    }

    /// Write every answer that came back, and read on where one was
    /// awaited.
    fn take_answers(&mut self) {
        while let Ok(answered) = self.answers.try_recv() {
            let Some(connection) = self.connections.get_mut(&answered.connection) else {
                continue;
            };
            connection.asking = false;
            if connection.stream.is_none() {
                // Closed while it waited: the slot goes now.
                self.forget(answered.connection);
                continue;
            }
            answered
                .response
                .encode(answered.request_id, &mut connection.out);
            self.pump(answered.connection);
        }
    }

    /// Write what `token` owes and read what it sent, as far as each goes
    /// now; close it if it is done.
    fn pump(&mut self, token: Token) {
        match self.pump_inner(token) {
            Pumped::Waits => {}
            Pumped::Close(reason) => self.close(token, reason),
        }
    }

    fn pump_inner(&mut self, token: Token) -> Pumped {
        loop {
            let Some(connection) = self.connections.get_mut(&token) else {
                return Pumped::Waits;
            };
            let Some(stream) = connection.stream.as_mut() else {
                return Pumped::Waits;
            };
            // Answers first: a peer that does not read them is not read.
            while connection.written < connection.out.len() {
                match stream.write(&connection.out[connection.written..]) {
                    Ok(0) => return Pumped::Close(Some("the peer stopped reading".into())),
                    Ok(n) => connection.written += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Pumped::Waits,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Pumped::Close(Some(format!("writing: {e}"))),
                }
            }
            connection.out.clear();
            connection.written = 0;
            if connection.closing {
                return Pumped::Close(None);
            }
            if connection.asking || connection.waiting_for_room {
                return Pumped::Waits;
            }
            if let Some(needed) = connection.decoder.room_needed() {
                if !fits(self.receive_bytes, self.limits.receive_bytes_max, needed) {
                    connection.waiting_for_room = true;
                    self.waiting_for_room.push_back(token);
                    return Pumped::Waits;
                }
                self.take_room(token);
                continue;
            }
            let at_boundary = connection.decoder.at_boundary();
            let n = match stream.read(connection.decoder.unfilled()) {
                Ok(0) if at_boundary => return Pumped::Close(None),
                Ok(0) => return Pumped::Close(Some("the stream ended inside a frame".into())),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Pumped::Waits,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Pumped::Close(Some(format!("reading: {e}"))),
            };
            if at_boundary {
                connection.frame_started_at = Some(Instant::now());
            }
            match connection.decoder.filled(n) {
                Ok(None) => {}
                Ok(Some(frame)) => self.handle_frame(token, frame),
                Err(error) => {
                    // Cannot be resynchronised: say why, then close.
                    let code = ErrorCode::from(&error);
                    Response::Error {
                        code,
                        message: format!("bad frame header: {error}"),
                    }
                    .encode(0, &mut connection.out);
                    connection.closing = true;
                }
            }
        }
    }

    /// Check and decode a whole frame, answer it or hand it to the driver.
    fn handle_frame(&mut self, token: Token, frame: wire::Frame) {
        let Some(connection) = self.connections.get_mut(&token) else {
            return;
        };
        let now = Instant::now();
        connection.last_frame_at = now;
        connection.frame_started_at = None;
        let header = frame.header;
        let payload = frame.payload;
        let verified = header.verify_payload(&payload);
        let request = match verified {
            Err(error) => Err((ErrorCode::from(&error), error.to_string())),
            Ok(()) if !header.frame_type.is_request() => Err((
                ErrorCode::InvalidArgument,
                format!("{:?} is a response, not a request", header.frame_type),
            )),
            Ok(()) => match ControlPortRequest::decode(header.frame_type, &payload) {
                Err(DecodeError::Foreign { frame_type }) => Err(not_served(frame_type)),
                Err(e) => Err((ErrorCode::from(&e), e.to_string())),
                Ok(request) => Ok(request),
            },
        };
        let request = request.map_err(|(code, message)| Response::Error { code, message });
        if payload.capacity() <= KEPT_PAYLOAD_BYTES_MAX {
            connection.decoder.recycle(payload);
        }
        let admitted = std::mem::take(&mut connection.admitted);
        self.receive_bytes = self.receive_bytes.saturating_sub(admitted);
        // Authentication is answered here, and a request the connection
        // may not send is refused here: neither reaches the driver.
        let request = request.and_then(|r| match r {
            ControlPortRequest::Auth(wire::AuthRequest::Authenticate { mechanism, message }) => {
                Err(authenticate(
                    &mut connection.session,
                    self.auth.as_deref(),
                    &mechanism,
                    &message,
                    &self.figures,
                ))
            }
            r => match connection
                .session
                .permit(auth::request_access::control_port_need(&r))
            {
                Ok(()) => Ok(r),
                Err(denied) => {
                    self.figures.count_denied(&denied);
                    Err(auth::request_access::refusal(&denied))
                }
            },
        });
        match request {
            Err(response) => {
                response.encode(header.request_id, &mut connection.out);
            }
            Ok(request) => {
                connection.asking = true;
                let reply = Reply {
                    connection: token,
                    request_id: header.request_id,
                    answers: self.answers_in.clone(),
                    waker: self.waker.clone(),
                };
                if !(self.ask)(request, reply) {
                    connection.asking = false;
                    Response::Error {
                        code: ErrorCode::Internal,
                        message: "the control plane is shutting down".to_owned(),
                    }
                    .encode(header.request_id, &mut connection.out);
                }
            }
        }
        if admitted > 0 {
            self.give_room();
        }
    }

    /// Let waiting connections read their payloads, oldest first, each
    /// whose payload fits the budget now.
    fn give_room(&mut self) {
        let mut turn = 0;
        while turn < self.waiting_for_room.len() {
            let token = self.waiting_for_room[turn];
            let needed = self
                .connections
                .get(&token)
                .and_then(|c| c.decoder.room_needed())
                .unwrap_or(0);
            if !fits(self.receive_bytes, self.limits.receive_bytes_max, needed) {
                turn += 1;
                continue;
            }
            self.waiting_for_room.remove(turn);
            if let Some(connection) = self.connections.get_mut(&token) {
                connection.waiting_for_room = false;
            }
            self.take_room(token);
            // May close connections, which may give room again: start over.
            self.pump(token);
            turn = 0;
        }
    }

    /// Hold the payload `token`'s decoder waits for against the budget,
    /// and handle the frame if that completes it (an empty payload).
    fn take_room(&mut self, token: Token) {
        let Some(connection) = self.connections.get_mut(&token) else {
            return;
        };
        let Some(needed) = connection.decoder.room_needed() else {
            return;
        };
        self.receive_bytes += u64::from(needed);
        connection.admitted = u64::from(needed);
        if let Some(frame) = connection.decoder.admit() {
            self.handle_frame(token, frame);
        }
    }

    /// Close connections past their idle or frame timeout.
    fn expire(&mut self, now: Instant) {
        let limits = self.limits;
        let expired: Vec<(Token, String)> = self
            .connections
            .iter()
            .filter(|(_, c)| c.stream.is_some() && !c.asking)
            .filter_map(|(token, c)| match c.frame_started_at {
                Some(started) if now >= started + limits.frame_timeout => Some((
                    *token,
                    format!(
                        "a frame not received within {} ms",
                        limits.frame_timeout.as_millis()
                    ),
                )),
                // An answer the peer does not take counts as idle too: the
                // connection reads nothing more until it is taken.
                None if now >= c.last_frame_at + limits.idle_timeout => Some((
                    *token,
                    format!("idle for {} ms", limits.idle_timeout.as_millis()),
                )),
                _ => None,
            })
            .collect();
        for (token, reason) in expired {
            self.close(token, Some(reason));
        }
    }

    /// Close `token`'s stream; its slot goes too unless an answer is owed.
    fn close(&mut self, token: Token, reason: Option<String>) {
        let Some(connection) = self.connections.get_mut(&token) else {
            return;
        };
        if let Some(mut stream) = connection.stream.take() {
            let _ = self.poll.registry().deregister(&mut stream);
            if let Some(reason) = reason {
                match stream.peer_addr() {
                    Ok(peer) => log::info!("control plane: closing connection {peer}: {reason}"),
                    Err(_) => log::info!("control plane: closing a connection: {reason}"),
                }
            }
        }
        let admitted = std::mem::take(&mut connection.admitted);
        self.receive_bytes = self.receive_bytes.saturating_sub(admitted);
        if connection.waiting_for_room {
            connection.waiting_for_room = false;
            self.waiting_for_room.retain(|t| *t != token);
        }
        if !connection.asking {
            self.forget(token);
        }
        if admitted > 0 || !self.waiting_for_room.is_empty() {
            self.give_room();
        }
    }

    /// Drop `token`'s slot.
    fn forget(&mut self, token: Token) {
        let Some(connection) = self.connections.remove(&token) else {
            return;
        };
        if let Some(n) = self.per_ip.get_mut(&connection.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&connection.peer);
            }
        }
    }
}

/// Whether a payload of `needed` bytes fits a budget of `max` with `held`
/// taken. One frame always does when nothing else is held (the budget is
/// at least the largest frame); past that, payloads over
/// [`SMALL_PAYLOAD_BYTES_MAX`] leave [`SMALL_PAYLOADS_RESERVED_BYTES`] of
/// the budget to small ones, so stalled large frames cannot hold back a
/// broker's heartbeat.
/// The answer to one authentication step.
fn authenticate(
    session: &mut auth::Session,
    auth: Option<&auth::AuthFile>,
    mechanism: &str,
    message: &str,
    figures: &ControlFigures,
) -> Response<'static> {
    let step = session.authenticate(
        auth,
        mechanism,
        message.as_bytes(),
        auth::session::server_nonce,
    );
    step.map(auth::request_access::step_answer)
        .unwrap_or_else(|denied| {
            log::info!("control connection: authentication refused: {denied}");
            figures.count_denied(&denied);
            auth::request_access::refusal(&denied)
        })
}

fn fits(held: u64, max: u64, needed: u32) -> bool {
    let needed = u64::from(needed);
    let limit = if needed > SMALL_PAYLOAD_BYTES_MAX {
        max.saturating_sub(SMALL_PAYLOADS_RESERVED_BYTES)
    } else {
        max
    };
    held == 0 || held + needed <= limit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_payloads_leave_room_for_small_ones_and_one_frame_always_fits() {
        let max = 16 << 20;
        let large = 8 << 20;
        // Nothing held: any frame fits, even one over the budget's share.
        assert!(fits(0, max, large));
        // One large held: a second would eat into the small payloads' part.
        assert!(!fits(u64::from(large), max, large));
        // Small payloads still fit beside it, up to the whole budget.
        assert!(fits(u64::from(large), max, 64 << 10));
        assert!(fits(max - 100, max, 100));
        assert!(!fits(max - 100, max, 101));
        // A large one fits while the reserve stays free.
        let limit = max - SMALL_PAYLOADS_RESERVED_BYTES;
        assert!(fits(limit - (1 << 20), max, 1 << 20));
        assert!(!fits(limit - (1 << 20) + 1, max, 1 << 20));
    }
}
