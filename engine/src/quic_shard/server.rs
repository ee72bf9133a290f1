//! The shard's QUIC server without I/O: quinn-proto's `Endpoint`, the
//! connection table, the timer queue and the ready list. Datagrams come in
//! through [`QuicServer::handle_datagram`] with the time they arrived;
//! packets go out through a [`Datagrams`] sink the caller passes (the UDP
//! socket in the driver, a simulated network in the tests); time is always
//! passed in, never read. New connections are handed to the caller
//! ([`QuicServer::take_accepted`]) to serve their requests.
//!
//! The driver (`driver.rs`) turns the crank the way quinn's own drivers do:
//! datagrams in, due timers, one turn per connection that asked for it,
//! then waits for the socket, [`QuicServer::poll_timeout`] or the ready
//! list.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use quinn_proto::{ConnectionHandle, DatagramEvent, EcnCodepoint, EndpointConfig, ServerConfig};

use super::connection::{ConnectionWindow, QuicConnection};
use super::requests::{ReadyList, Requests};
use super::timers::TimerQueue;
use super::window::WindowLimits;
use crate::peer_limit::PeerLimit;
use crate::receive_budget::ReceiveBudget;
use crate::shard_metrics::Refusal;

/// Transmits per connection per turn, as quinn's connection driver bounds
/// them; a connection with more is driven again next turn.
const TRANSMITS_PER_TURN_MAX: usize = 20;

/// Where packets go: one call per transmit (a GSO batch of
/// `segment_size`-byte datagrams when it has one).
pub(super) trait Datagrams {
    /// Sends `contents`; only `WouldBlock` (the send buffer is full) is an
    /// error: any other failure is a lost datagram, QUIC's to repair.
    fn send(&mut self, transmit: &quinn_proto::Transmit, contents: &[u8]) -> io::Result<()>;
}

/// The limits a server applies to its peers.
#[derive(Debug, Clone, Copy)]
pub(super) struct ServerLimits {
    /// Connections open at once; more are refused.
    pub(super) connections_max: usize,
    /// Connections one peer address may hold.
    pub(super) connections_per_ip_max: usize,
    /// Frames of one connection cut and not yet answered.
    pub(super) requests_in_flight_max: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TransmitState {
    /// `poll_transmit` has nothing more.
    Idle,
    /// The per-turn bound stopped it; drive again next turn.
    MoreToSend,
    /// The send buffer is full; wait for the blocked transmit to go.
    Blocked,
}

pub(super) struct QuicServer {
    /// For logs: the shard this server belongs to.
    shard: usize,
    limits: ServerLimits,
    endpoint: quinn_proto::Endpoint,
    /// Indexed by `ConnectionHandle.0`: quinn-proto hands out dense slab
    /// indices, and at most `connections_max` are accepted.
    connections: Vec<Option<QuicConnection>>,
    open: usize,
    /// Connections refused since the start, by [`Refusal`].
    refused: [u64; Refusal::ALL.len()],
    peers: Arc<PeerLimit>,
    timers: TimerQueue,
    ready: Rc<ReadyList>,
    /// The shard's receive budget, shared with its TCP connections: every
    /// frame's payload is read into room taken from it, and every
    /// connection's receive window is paid from it.
    budget: Rc<ReceiveBudget>,
    /// Connections whose next payload waits for room in `budget`.
    room_waiting: Vec<ConnectionHandle>,
    /// Connections accepted since the last `take_accepted`, with their
    /// peers' addresses.
    accepted: Vec<(Rc<Requests>, SocketAddr)>,
    /// Scratch: the connections driven this turn.
    turn: Vec<ConnectionHandle>,
    /// Connections that wanted to transmit while the send buffer was full.
    send_waiting: Vec<ConnectionHandle>,
    /// Endpoint-made packets (refusals, version negotiation, resets).
    response_buf: Vec<u8>,
    sender: Sender,
    /// Set once every connection was told the broker is stopping.
    goodbye_said: bool,
}

impl QuicServer {
    /// `allow_mtud`: path MTU discovery, safe only where the kernel never
    /// fragments; `gso_segments_max`: datagrams per transmit the sink takes.
    pub(super) fn new(
        shard: usize,
        server_config: Arc<ServerConfig>,
        allow_mtud: bool,
        gso_segments_max: usize,
        limits: ServerLimits,
        budget: Rc<ReceiveBudget>,
    ) -> QuicServer {
        assert!(gso_segments_max >= 1);
        assert!(limits.requests_in_flight_max >= 1);
        let endpoint = quinn_proto::Endpoint::new(
            Arc::new(EndpointConfig::default()),
            Some(server_config),
            allow_mtud,
            None,
        );
        QuicServer {
            shard,
            limits,
            endpoint,
            connections: Vec::new(),
            open: 0,
            refused: [0; Refusal::ALL.len()],
            peers: PeerLimit::new(limits.connections_per_ip_max),
            timers: TimerQueue::default(),
            ready: Rc::new(ReadyList::default()),
            budget,
            room_waiting: Vec::new(),
            accepted: Vec::new(),
            turn: Vec::new(),
            send_waiting: Vec::new(),
            response_buf: Vec::new(),
            sender: Sender {
                buf: Vec::new(),
                blocked: None,
                gso_segments_max,
            },
            goodbye_said: false,
        }
    }

    /// Connections open (accepted and not yet drained).
    pub(super) fn open(&self) -> usize {
        self.open
    }

    /// Connections refused since the start for `why`.
    pub(super) fn refused(&self, why: Refusal) -> u64 {
        self.refused[why as usize]
    }

    /// The list connections put themselves on when they want a turn; its
    /// event wakes a waiting driver.
    pub(super) fn ready(&self) -> &ReadyList {
        &self.ready
    }

    /// Whether a connection waits for a turn.
    pub(super) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The receive budget the connections read payloads into.
    pub(super) fn budget(&self) -> &Rc<ReceiveBudget> {
        &self.budget
    }

    /// Whether a connection waits for room in the receive budget.
    pub(super) fn waits_for_room(&self) -> bool {
        !self.room_waiting.is_empty()
    }

    /// Gives a turn to every connection waiting for room whose payload
    /// fits in what the budget has free now (the first to run takes it).
    pub(super) fn offer_room(&mut self) {
        if self.room_waiting.is_empty() {
            return;
        }
        let free = self.budget.free();
        let connections = &self.connections;
        let ready = &self.ready;
        self.room_waiting.retain(|&handle| {
            let Some(c) = connection(connections, handle) else {
                return false;
            };
            match c.room_needed() {
                Some(bytes) if bytes <= free => {
                    ready.schedule(&c.requests);
                    false
                }
                Some(_) => true,
                None => false,
            }
        });
    }

    /// The largest receive window of any open connection.
    #[cfg(test)]
    pub(super) fn window_bytes_max(&self) -> u64 {
        self.connections
            .iter()
            .flatten()
            .map(QuicConnection::window_bytes)
            .max()
            .unwrap_or(0)
    }

    /// Whether a transmit waits for room in the send buffer.
    pub(super) fn is_blocked(&self) -> bool {
        self.sender.blocked.is_some()
    }

    /// The connections accepted since the last call, for the caller to serve.
    pub(super) fn take_accepted(&mut self) -> std::vec::Drain<'_, (Rc<Requests>, SocketAddr)> {
        self.accepted.drain(..)
    }

    /// The earliest instant a connection needs a turn without input.
    pub(super) fn poll_timeout(&mut self) -> Option<Instant> {
        let connections = &self.connections;
        self.timers.earliest(|at, handle| {
            connection(connections, handle).is_some_and(|c| c.timer_armed == Some(at))
        })
    }

    /// One datagram that arrived at `now` from `remote` (to `local_ip`).
    pub(super) fn handle_datagram(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        local_ip: Option<IpAddr>,
        ecn: Option<EcnCodepoint>,
        datagram: BytesMut,
        out: &mut impl Datagrams,
    ) {
        self.response_buf.clear();
        let event =
            self.endpoint
                .handle(now, remote, local_ip, ecn, datagram, &mut self.response_buf);
        match event {
            Some(DatagramEvent::ConnectionEvent(handle, event)) => {
                if let Some(c) = connection_mut(&mut self.connections, handle) {
                    c.connection.handle_event(event);
                    self.ready.schedule(&c.requests);
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => self.accept(now, incoming, out),
            Some(DatagramEvent::Response(transmit)) => self.send_response(&transmit, out),
            None => {}
        }
    }

    fn accept(&mut self, now: Instant, incoming: quinn_proto::Incoming, out: &mut impl Datagrams) {
        self.response_buf.clear();
        let peer = incoming.remote_address();
        if self.open >= self.limits.connections_max || self.goodbye_said {
            let why = if self.goodbye_said {
                Refusal::Stopping
            } else {
                Refusal::ConnectionLimit
            };
            self.refused[why as usize] += 1;
            log::warn!(
                "shard {}: refusing QUIC connection from {peer}: {}",
                self.shard,
                why.describe()
            );
            let transmit = self.endpoint.refuse(incoming, &mut self.response_buf);
            self.send_response(&transmit, out);
            return;
        }
        let Some(slot) = self.peers.admit(peer.ip()) else {
            self.refused[Refusal::AddressLimit as usize] += 1;
            log::warn!(
                "shard {}: refusing QUIC connection from {peer}: {} connections from its \
                 address (--connections-per-ip-max)",
                self.shard,
                self.limits.connections_per_ip_max
            );
            let transmit = self.endpoint.refuse(incoming, &mut self.response_buf);
            self.send_response(&transmit, out);
            return;
        };
        // Its window is paid before quinn-proto holds a byte for it: with
        // no room in the shard's receive budget the peer must come back
        // later (backpressure), never make the shard hold more.
        let Some(window) = ConnectionWindow::reserve(&self.budget, WindowLimits::BROKER, now)
        else {
            self.refused[Refusal::ReceiveBudget as usize] += 1;
            log::warn!(
                "shard {}: refusing QUIC connection from {peer}: no room for its receive window \
                 in the shard's receive budget (--receive-bytes-max)",
                self.shard
            );
            let transmit = self.endpoint.refuse(incoming, &mut self.response_buf);
            self.send_response(&transmit, out);
            return;
        };
        match self
            .endpoint
            .accept(incoming, now, &mut self.response_buf, None)
        {
            Ok((handle, connection)) => {
                let requests = Rc::new(Requests::new(handle, self.ready.clone()));
                self.accepted.push((requests.clone(), peer));
                let quic = QuicConnection::new(
                    handle,
                    connection,
                    requests,
                    self.limits.requests_in_flight_max,
                    self.budget.clone(),
                    window,
                    slot,
                );
                self.ready.schedule(&quic.requests);
                if self.connections.len() <= handle.0 {
                    self.connections.resize_with(handle.0 + 1, || None);
                }
                if let Some(old) = self.connections[handle.0].replace(quic) {
                    // quinn-proto reuses a handle only after Drained, which
                    // removed the old entry; never leave its task running.
                    log::error!("QUIC connection handle {handle:?} reused while live");
                    old.requests.close();
                } else {
                    self.open += 1;
                }
                debug_assert!(self.open <= self.limits.connections_max);
            }
            Err(e) => {
                log::debug!("shard {}: QUIC handshake: {}", self.shard, e.cause);
                if let Some(transmit) = e.response {
                    self.send_response(&transmit, out);
                }
            }
        }
    }

    /// Best effort: a lost endpoint response is like a lost datagram.
    fn send_response(&self, transmit: &quinn_proto::Transmit, out: &mut impl Datagrams) {
        let contents = &self.response_buf[..transmit.size.min(self.response_buf.len())];
        let _ = out.send(transmit, contents);
    }

    /// Gives every connection whose timer is due at `now` a turn.
    pub(super) fn expire_timers(&mut self, now: Instant) {
        while let Some((at, handle)) = self.timers.pop_due(now) {
            if let Some(c) = connection_mut(&mut self.connections, handle) {
                if c.timer_armed == Some(at) {
                    c.timer_armed = None;
                    self.ready.schedule(&c.requests);
                }
            }
        }
    }

    /// Sends the transmit that found the send buffer full, and on success
    /// lets the connections that waited behind it transmit again.
    pub(super) fn retry_blocked(&mut self, out: &mut impl Datagrams) {
        let Some(transmit) = &self.sender.blocked else {
            return;
        };
        match out.send(transmit, &self.sender.buf[..transmit.size]) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            // Anything else is sent, or lost like any datagram.
            _ => self.sender.blocked = None,
        }
        for handle in self.send_waiting.drain(..) {
            if let Some(c) = connection(&self.connections, handle) {
                self.ready.schedule(&c.requests);
            }
        }
    }

    /// One turn for every connection on the ready list.
    pub(super) fn drive_ready(&mut self, now: Instant, out: &mut impl Datagrams) {
        let mut turn = std::mem::take(&mut self.turn);
        self.ready.take(&mut turn);
        for &handle in &turn {
            let Some(c) = connection_mut(&mut self.connections, handle) else {
                continue;
            };
            c.requests.scheduled.set(false);
            c.drive(now);
            if c.room_needed().is_some() && !self.room_waiting.contains(&handle) {
                self.room_waiting.push(handle);
            }
            // The connection asks the endpoint for fresh connection IDs,
            // retires old ones and reports its end here; without this the
            // peer runs out of CIDs and drained connections are never freed.
            let mut drained = false;
            while let Some(event) = c.connection.poll_endpoint_events() {
                drained |= event.is_drained();
                if let Some(reply) = self.endpoint.handle_event(handle, event) {
                    c.connection.handle_event(reply);
                }
            }
            if drained {
                c.requests.close();
                self.connections[handle.0] = None;
                self.open -= 1;
                continue;
            }
            // Every turn transmits: reading queued flow-control credit and
            // handle_* queued ACKs that only poll_transmit sends.
            match self.sender.transmit(&mut c.connection, out, now) {
                TransmitState::Idle => {}
                TransmitState::MoreToSend => self.ready.schedule(&c.requests),
                TransmitState::Blocked => self.send_waiting.push(handle),
            }
            // poll_timeout changes after every handle_*, read, write and
            // transmit: ask again now, never cache it across turns.
            let next = c.next_timeout();
            if next != c.timer_armed {
                c.timer_armed = next;
                if let Some(at) = next {
                    self.timers.push(at, handle);
                }
            }
        }
        self.turn = turn;
        let connections = &self.connections;
        self.timers.compact(
            self.open,
            connections
                .iter()
                .flatten()
                .filter_map(|c| c.timer_armed.map(|at| (at, c.handle))),
        );
    }

    /// The broker is stopping: every connection gets the goodbye
    /// (docs/wire-format.md, "Goodbye") after the answers already queued;
    /// frames read from then on are answered not-applied without reaching
    /// the shard, and each connection closes once its client finished its
    /// stream and every answer is written, or `linger` after now. New
    /// connections are refused. Called once; later calls do nothing.
    pub(super) fn say_goodbye(&mut self, now: Instant, linger: std::time::Duration) {
        if std::mem::replace(&mut self.goodbye_said, true) {
            return;
        }
        for c in self.connections.iter_mut().flatten() {
            c.say_goodbye(now, linger);
            self.ready.schedule(&c.requests);
        }
    }

    /// Shutdown: tell every peer the connection is closed (one
    /// CONNECTION_CLOSE each, best effort: no retransmission once the
    /// server is gone), so clients learn it at once instead of after their
    /// idle timeout.
    pub(super) fn close_all(&mut self, now: Instant, out: &mut impl Datagrams) {
        for c in self.connections.iter_mut().flatten() {
            c.connection.close(
                now,
                0u32.into(),
                bytes::Bytes::from_static(b"broker shutting down"),
            );
            c.requests.close();
            self.sender.blocked = None;
            let _ = self.sender.transmit(&mut c.connection, out, now);
        }
    }
}

/// What goes out: one connection's GSO batch at a time.
struct Sender {
    /// The current GSO batch of one connection.
    buf: Vec<u8>,
    /// A transmit that hit `WouldBlock`; its bytes are still in `buf`.
    blocked: Option<quinn_proto::Transmit>,
    gso_segments_max: usize,
}

impl Sender {
    /// Sends what one connection has queued: handshake, ACKs, flow-control
    /// credit, answers, retransmits; at most `TRANSMITS_PER_TURN_MAX`
    /// batches.
    fn transmit(
        &mut self,
        connection: &mut quinn_proto::Connection,
        out: &mut impl Datagrams,
        now: Instant,
    ) -> TransmitState {
        if self.blocked.is_some() {
            // buf holds the blocked transmit and the sink is full.
            return TransmitState::Blocked;
        }
        for _ in 0..TRANSMITS_PER_TURN_MAX {
            self.buf.clear();
            let Some(transmit) =
                connection.poll_transmit(now, self.gso_segments_max, &mut self.buf)
            else {
                return TransmitState::Idle;
            };
            match out.send(&transmit, &self.buf[..transmit.size]) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.blocked = Some(transmit);
                    return TransmitState::Blocked;
                }
                // Every other error is a lost datagram (UDP loss is QUIC's
                // to repair), so anything else counts as sent.
                _ => {}
            }
        }
        TransmitState::MoreToSend
    }
}

fn connection(
    connections: &[Option<QuicConnection>],
    handle: ConnectionHandle,
) -> Option<&QuicConnection> {
    connections.get(handle.0).and_then(Option::as_ref)
}

fn connection_mut(
    connections: &mut [Option<QuicConnection>],
    handle: ConnectionHandle,
) -> Option<&mut QuicConnection> {
    connections.get_mut(handle.0).and_then(Option::as_mut)
}
