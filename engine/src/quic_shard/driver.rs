//! The shard's QUIC driver: one task that owns the UDP socket, quinn-proto's
//! `Endpoint` and every connection of the shard, and turns the crank the
//! way quinn's own drivers do. Each turn takes a bounded number of
//! datagrams in and routes them by `ConnectionHandle`, fires due timers,
//! gives every connection that asked for it one turn (read frames, write
//! answers, route endpoint events, transmit), then waits for the socket,
//! the earliest connection timer, or a connection's request task.

use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::{ConnectionHandle, DatagramEvent, EndpointConfig, ServerConfig};

use super::connection::QuicConnection;
use super::requests::{handle_requests, ReadyList, Requests};
use super::socket::{proto_ecn, QuicSocket};
use super::timers::TimerQueue;
use crate::peer_limit::PeerLimit;
use crate::shard::Shard;

/// Datagrams one turn takes in before it drives connections and transmits,
/// so ACKs and flow-control credit go out while data keeps arriving.
const RECV_DATAGRAMS_PER_TURN_MAX: usize = 256;
/// Transmits per connection per turn, as quinn's connection driver bounds
/// them; a connection with more is driven again next turn.
const TRANSMITS_PER_TURN_MAX: usize = 20;
/// How long the driver sleeps when nothing at all is armed.
const IDLE_WAIT_MAX: Duration = Duration::from_secs(1);
/// Retry interval after a send hit a full socket buffer: glommio offers no
/// write readiness, and on loopback this happens rarely.
const SEND_RETRY_INTERVAL: Duration = Duration::from_micros(50);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TransmitState {
    /// `poll_transmit` has nothing more.
    Idle,
    /// The per-turn bound stopped it; drive again next turn.
    MoreToSend,
    /// The socket buffer is full; wait for the blocked transmit to go.
    Blocked,
}

pub(super) struct Driver {
    shard: Rc<Shard>,
    socket: QuicSocket,
    endpoint: quinn_proto::Endpoint,
    /// Indexed by `ConnectionHandle.0`: quinn-proto hands out dense slab
    /// indices, and at most `connections_per_shard_max` are accepted.
    connections: Vec<Option<QuicConnection>>,
    open: usize,
    /// QUIC connections by peer address (`connections_per_ip_max`),
    /// counted apart from the shard's TCP ones, as on the tokio driver.
    peers: Arc<PeerLimit>,
    timers: TimerQueue,
    ready: Rc<ReadyList>,
    /// Scratch: the connections driven this turn.
    turn: Vec<ConnectionHandle>,
    /// Connections that wanted to transmit while the socket was full.
    send_waiting: Vec<ConnectionHandle>,
    /// Endpoint-made packets (refusals, version negotiation, resets).
    response_buf: Vec<u8>,
    /// The current GSO batch of one connection.
    send_buf: Vec<u8>,
    /// A transmit that hit `WouldBlock`; its bytes are still in `send_buf`.
    blocked: Option<quinn_proto::Transmit>,
    gso_segments_max: usize,
}

impl Driver {
    pub(super) fn new(
        shard: Rc<Shard>,
        socket: std::net::UdpSocket,
        server_config: Arc<ServerConfig>,
    ) -> io::Result<Driver> {
        let socket = QuicSocket::new(socket)?;
        // MTU discovery only where the socket forbids fragmentation, as quinn.
        let allow_mtud = !socket.may_fragment();
        let endpoint = quinn_proto::Endpoint::new(
            Arc::new(EndpointConfig::default()),
            Some(server_config),
            allow_mtud,
            None,
        );
        let gso_segments_max = socket.gso_segments_max();
        let peers = PeerLimit::new(shard.config.connections_per_ip_max);
        Ok(Driver {
            shard,
            socket,
            endpoint,
            connections: Vec::new(),
            open: 0,
            peers,
            timers: TimerQueue::default(),
            ready: Rc::new(ReadyList::default()),
            turn: Vec::new(),
            send_waiting: Vec::new(),
            response_buf: Vec::new(),
            send_buf: Vec::new(),
            blocked: None,
            gso_segments_max,
        })
    }

    /// Serves until the socket fails or the shard stops.
    pub(super) async fn run(mut self) -> io::Result<()> {
        loop {
            let now = Instant::now();
            if self.shard.stopping.get() {
                self.close_all(now);
                return Ok(());
            }
            let more_to_receive = self.receive(now)?;
            self.expire_timers(now);
            self.retry_blocked();
            self.drive_ready(now);
            if more_to_receive || !self.ready.is_empty() {
                // Bounded work per turn: let the request tasks and the rest
                // of the shard run before the next one.
                futures_lite::future::yield_now().await;
                continue;
            }
            let woken = self.ready.event.listen();
            if !self.ready.is_empty() {
                continue;
            }
            let connections = &self.connections;
            let earliest = self.timers.earliest(|at, handle| {
                connection(connections, handle).is_some_and(|c| c.timer_armed == Some(at))
            });
            let mut timeout = earliest.map_or(IDLE_WAIT_MAX, |at| {
                at.saturating_duration_since(Instant::now())
            });
            if self.blocked.is_some() {
                timeout = timeout.min(SEND_RETRY_INTERVAL);
            }
            if timeout.is_zero() {
                continue;
            }
            let stopping = self.shard.clone();
            let other = futures_lite::future::or(woken, async move { stopping.stopped().await });
            self.socket.wait(timeout, other).await?;
        }
    }

    /// Shutdown: tell every peer the connection is closed (one CONNECTION_CLOSE
    /// each, best effort: no retransmission once the shard is gone), so
    /// clients learn it at once instead of after their idle timeout.
    fn close_all(&mut self, now: Instant) {
        for c in self.connections.iter_mut().flatten() {
            c.connection.close(
                now,
                0u32.into(),
                bytes::Bytes::from_static(b"broker shutting down"),
            );
            c.requests.close();
            self.blocked = None;
            let _ = transmit(
                &mut c.connection,
                &self.socket,
                &mut self.send_buf,
                &mut self.blocked,
                self.gso_segments_max,
                now,
            );
        }
    }

    /// Takes datagrams until the socket is empty (false) or the per-turn
    /// bound is reached (true: more may be waiting).
    fn receive(&mut self, now: Instant) -> io::Result<bool> {
        let mut datagrams = 0;
        while datagrams < RECV_DATAGRAMS_PER_TURN_MAX {
            let messages = match self.socket.recv() {
                Ok(messages) => messages,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ICMP errors queued on an unconnected socket mean nothing
                // to QUIC and may be forged; quinn skips them too.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionRefused
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            for index in 0..messages {
                let meta = self.socket.metas[index];
                // One allocation per GRO batch, as quinn does: quinn-proto
                // decrypts in place and its stream chunks keep the buffer,
                // so it cannot be the reused receive slot.
                let mut batch = BytesMut::from(self.socket.slot(index));
                let stride = if meta.stride == 0 {
                    batch.len().max(1)
                } else {
                    meta.stride
                };
                while !batch.is_empty() {
                    let datagram = batch.split_to(stride.min(batch.len()));
                    datagrams += 1;
                    self.on_datagram(now, &meta, datagram);
                }
            }
        }
        Ok(true)
    }

    fn on_datagram(&mut self, now: Instant, meta: &quinn_udp::RecvMeta, datagram: BytesMut) {
        self.response_buf.clear();
        let event = self.endpoint.handle(
            now,
            meta.addr,
            meta.dst_ip,
            meta.ecn.map(proto_ecn),
            datagram,
            &mut self.response_buf,
        );
        match event {
            Some(DatagramEvent::ConnectionEvent(handle, event)) => {
                if let Some(c) = connection_mut(&mut self.connections, handle) {
                    c.connection.handle_event(event);
                    self.ready.schedule(&c.requests);
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => self.accept(now, incoming),
            Some(DatagramEvent::Response(transmit)) => self.send_response(&transmit),
            None => {}
        }
    }

    fn accept(&mut self, now: Instant, incoming: quinn_proto::Incoming) {
        self.response_buf.clear();
        if self.open >= self.shard.config.connections_per_shard_max {
            log::warn!(
                "shard {}: refusing QUIC connection from {}: connection limit",
                self.shard.index,
                incoming.remote_address()
            );
            let transmit = self.endpoint.refuse(incoming, &mut self.response_buf);
            self.send_response(&transmit);
            return;
        }
        let peer = incoming.remote_address();
        let Some(slot) = self.peers.admit(peer.ip()) else {
            log::warn!(
                "shard {}: refusing QUIC connection from {peer}: {} connections from its \
                 address (--connections-per-ip-max)",
                self.shard.index,
                self.shard.config.connections_per_ip_max
            );
            let transmit = self.endpoint.refuse(incoming, &mut self.response_buf);
            self.send_response(&transmit);
            return;
        };
        match self
            .endpoint
            .accept(incoming, now, &mut self.response_buf, None)
        {
            Ok((handle, connection)) => {
                let requests = Rc::new(Requests::new(handle, self.ready.clone()));
                glommio::spawn_local(handle_requests(self.shard.clone(), requests.clone()))
                    .detach();
                let in_flight_max = self.shard.config.connection_requests_in_flight_max;
                let quic = QuicConnection::new(handle, connection, requests, in_flight_max, slot);
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
            }
            Err(e) => {
                log::debug!("shard {}: QUIC handshake: {}", self.shard.index, e.cause);
                if let Some(transmit) = e.response {
                    self.send_response(&transmit);
                }
            }
        }
    }

    /// Best effort: a lost endpoint response is like a lost datagram.
    fn send_response(&self, transmit: &quinn_proto::Transmit) {
        let contents = &self.response_buf[..transmit.size.min(self.response_buf.len())];
        let _ = self.socket.send(transmit, contents);
    }

    fn expire_timers(&mut self, now: Instant) {
        while let Some((at, handle)) = self.timers.pop_due(now) {
            if let Some(c) = connection_mut(&mut self.connections, handle) {
                if c.timer_armed == Some(at) {
                    c.timer_armed = None;
                    self.ready.schedule(&c.requests);
                }
            }
        }
    }

    /// Sends the transmit that found the socket full, and on success lets
    /// the connections that waited behind it transmit again.
    fn retry_blocked(&mut self) {
        let Some(transmit) = &self.blocked else {
            return;
        };
        match self.socket.send(transmit, &self.send_buf[..transmit.size]) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            // Other errors are reported as sent by quinn-udp; a loss.
            _ => self.blocked = None,
        }
        for handle in self.send_waiting.drain(..) {
            if let Some(c) = connection(&self.connections, handle) {
                self.ready.schedule(&c.requests);
            }
        }
    }

    /// One turn for every connection on the ready list.
    fn drive_ready(&mut self, now: Instant) {
        let mut turn = std::mem::take(&mut self.turn);
        self.ready.take(&mut turn);
        for &handle in &turn {
            let Some(c) = connection_mut(&mut self.connections, handle) else {
                continue;
            };
            c.requests.scheduled.set(false);
            c.drive(now);
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
            match transmit(
                &mut c.connection,
                &self.socket,
                &mut self.send_buf,
                &mut self.blocked,
                self.gso_segments_max,
                now,
            ) {
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
}

/// Sends what one connection has queued: handshake, ACKs, flow-control
/// credit, answers, retransmits; at most `TRANSMITS_PER_TURN_MAX` batches.
fn transmit(
    connection: &mut quinn_proto::Connection,
    socket: &QuicSocket,
    send_buf: &mut Vec<u8>,
    blocked: &mut Option<quinn_proto::Transmit>,
    gso_segments_max: usize,
    now: Instant,
) -> TransmitState {
    if blocked.is_some() {
        // send_buf holds the blocked transmit and the socket is full.
        return TransmitState::Blocked;
    }
    for _ in 0..TRANSMITS_PER_TURN_MAX {
        send_buf.clear();
        let Some(transmit) = connection.poll_transmit(now, gso_segments_max, send_buf) else {
            return TransmitState::Idle;
        };
        match socket.send(&transmit, &send_buf[..transmit.size]) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                *blocked = Some(transmit);
                return TransmitState::Blocked;
            }
            // quinn-udp reports every other error as sent (UDP loss is
            // QUIC's to repair), so anything else is a sent datagram.
            _ => {}
        }
    }
    TransmitState::MoreToSend
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
