//! The shard's QUIC driver: one task that owns the UDP socket and the
//! shard's [`QuicServer`], and turns the crank the way quinn's own drivers
//! do. Each turn takes a bounded number of datagrams in, starts a request
//! task for each new connection, fires due timers, gives every connection
//! that asked for it one turn, then waits for the socket, the earliest
//! connection timer, a connection's request task or the shard's stop.
//!
//! A stopping shard says goodbye on every connection, as over TCP
//! (docs/wire-format.md, "Goodbye"), and keeps driving them until each
//! has ended or `GOODBYE_WAIT` plus `CLOSE_GRACE` passed; then whatever is
//! left is closed.

use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::ServerConfig;
use tracing::Instrument;

use super::requests::handle_requests;
use super::server::{Datagrams, QuicServer, ServerLimits};
use super::socket::{proto_ecn, QuicSocket};
use crate::connection::GOODBYE_WAIT;
use crate::shard::Shard;
use crate::shard_metrics::{Refusal, Transport};

/// Datagrams one turn takes in before it drives connections and transmits,
/// so ACKs and flow-control credit go out while data keeps arriving.
const RECV_DATAGRAMS_PER_TURN_MAX: usize = 256;
/// How long the driver sleeps when nothing at all is armed.
const IDLE_WAIT_MAX: Duration = Duration::from_secs(1);
/// Retry interval after a send hit a full socket buffer: glommio offers no
/// write readiness, and on loopback this happens rarely.
const SEND_RETRY_INTERVAL: Duration = Duration::from_micros(50);
/// After the goodbye wait, how long a connection may take to finish
/// closing before the driver closes it and ends.
const CLOSE_GRACE: Duration = Duration::from_millis(500);

impl Datagrams for QuicSocket {
    fn send(&mut self, transmit: &quinn_proto::Transmit, contents: &[u8]) -> io::Result<()> {
        QuicSocket::send(self, transmit, contents)
    }
}

pub(super) struct Driver {
    shard: Rc<Shard>,
    socket: QuicSocket,
    server: QuicServer,
}

impl Driver {
    pub(super) fn new(
        shard: Rc<Shard>,
        socket: std::net::UdpSocket,
        server_config: Arc<ServerConfig>,
    ) -> io::Result<Driver> {
        let socket = QuicSocket::new(socket)?;
        let limits = ServerLimits {
            connections_max: shard.config.connections_per_shard_max,
            connections_per_ip_max: shard.config.connections_per_ip_max,
            requests_in_flight_max: shard.config.connection_requests_in_flight_max,
        };
        // MTU discovery only where the socket forbids fragmentation, as quinn.
        let server = QuicServer::new(
            shard.index,
            server_config,
            !socket.may_fragment(),
            socket.gso_segments_max(),
            limits,
            shard.receive_budget.clone(),
        );
        Ok(Driver {
            shard,
            socket,
            server,
        })
    }

    /// The server's connection counts, into the shard's figures.
    fn publish_figures(&self) {
        let traffic = self.shard.metrics.traffic(Transport::Quic);
        traffic.connections.open.set(self.server.open() as u64);
        for why in Refusal::ALL {
            traffic
                .connections
                .refused(why)
                .set(self.server.refused(why));
        }
    }

    /// Serves until the socket fails, or the shard stopped and every
    /// connection has said goodbye.
    pub(super) async fn run(mut self) -> io::Result<()> {
        // When the goodbye was said, every connection must be gone by then.
        let mut ends_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if ends_at.is_none() && self.shard.stopping.get() {
                self.server.say_goodbye(now, GOODBYE_WAIT);
                ends_at = Some(now + GOODBYE_WAIT + CLOSE_GRACE);
            }
            if let Some(at) = ends_at {
                if self.server.open() == 0 || now >= at {
                    self.server.close_all(now, &mut self.socket);
                    return Ok(());
                }
            }
            self.server.offer_room();
            let more_to_receive = self.receive(now)?;
            self.publish_figures();
            for (requests, peer) in self.server.take_accepted() {
                let span = tracing::error_span!(
                    "connection",
                    transport = "quic",
                    shard = self.shard.index,
                    peer = %peer
                );
                glommio::spawn_local(
                    handle_requests(self.shard.clone(), requests).instrument(span),
                )
                .detach();
            }
            self.server.expire_timers(now);
            self.server.retry_blocked(&mut self.socket);
            self.server.drive_ready(now, &mut self.socket);
            if more_to_receive || self.server.has_ready() {
                // Bounded work per turn: let the request tasks and the rest
                // of the shard run before the next one.
                futures_lite::future::yield_now().await;
                continue;
            }
            let woken = self.server.ready().event.listen();
            // Listening before the second look: bytes that come back after
            // it wake the wait.
            let room = self
                .server
                .waits_for_room()
                .then(|| self.server.budget().listen());
            self.server.offer_room();
            if self.server.has_ready() {
                continue;
            }
            let mut until = self.server.poll_timeout();
            if let Some(at) = ends_at {
                until = Some(until.map_or(at, |u| u.min(at)));
            }
            let mut timeout = until.map_or(IDLE_WAIT_MAX, |at| {
                at.saturating_duration_since(Instant::now())
            });
            if self.server.is_blocked() {
                timeout = timeout.min(SEND_RETRY_INTERVAL);
            }
            if timeout.is_zero() {
                continue;
            }
            let shard = self.shard.clone();
            let goodbye_due = ends_at.is_none();
            let room = async move {
                match room {
                    Some(room) => room.await,
                    None => std::future::pending::<()>().await,
                }
            };
            let stop = async move {
                if goodbye_due {
                    shard.stopped().await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            let other = futures_lite::future::or(woken, futures_lite::future::or(room, stop));
            self.socket.wait(timeout, other).await?;
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
                    self.server.handle_datagram(
                        now,
                        meta.addr,
                        meta.dst_ip,
                        meta.ecn.map(proto_ecn),
                        datagram,
                        &mut self.socket,
                    );
                }
            }
        }
        Ok(true)
    }
}
