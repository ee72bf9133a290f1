//! QUIC, driven on the shard's own thread: each shard owns a UDP socket on
//! its own address and runs quinn-proto's sans-IO endpoint and connections
//! itself, with quinn-udp doing the GRO/GSO syscalls. A connection's bytes,
//! timers and ACKs live on the core that owns its segments: no QUIC thread
//! and no cross-thread hop per frame. BENCHMARKS.md ("The QUIC driver")
//! has the measurements that chose this over quinn on a tokio thread.
//!
//! A connection behaves as over TCP: one bidirectional stream of frames,
//! handled in order by `request::handle_frame`, answers written back as
//! they complete. Limits: `connections_per_shard_max` connections (more are
//! refused), `connection_requests_in_flight_max` requests per connection
//! (the stream is not read beyond it, so QUIC flow control pushes back), a
//! receive window per connection paid from the shard's receive budget (a
//! connection the budget has no room for is refused), a bounded number of
//! datagrams and transmits per driver turn.
//!
//! - `socket`: the UDP socket, quinn-udp, and readiness through io_uring;
//! - `server`: the endpoint, the connection table and the turn of each
//!   connection, with no I/O (time passed in, packets to a sink), so the
//!   simulated-network tests (`simulation_tests`) run the same code;
//! - `driver`: the loop that joins the server to the socket and the shard;
//! - `timers`: the earliest-timeout queue across connections;
//! - `connection`: one connection's stream, framing, answers and ending;
//! - `requests`: the per-connection task that handles frames in order;
//! - `window`: how large each connection's receive window is, paid from
//!   the shard's receive budget.
//!
//! This module never blocks the shard: every socket call is non-blocking,
//! and it waits only through glommio.

mod connection;
mod driver;
mod requests;
mod server;
#[cfg(test)]
mod simulation_tests;
mod socket;
mod timers;
pub(crate) mod window;

use std::rc::Rc;
use std::sync::Arc;

use crate::shard::Shard;

/// Serve QUIC on `socket` (bound to the shard's address) until the socket
/// fails or the shard's executor ends.
pub(crate) async fn serve(
    shard: Rc<Shard>,
    socket: std::net::UdpSocket,
    server_config: Arc<quinn_proto::ServerConfig>,
) {
    let addr = socket
        .local_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    let index = shard.index;
    let driver = match driver::Driver::new(shard, socket, server_config) {
        Ok(driver) => driver,
        Err(e) => {
            log::error!("shard {index}: QUIC socket {addr}: set up: {e}");
            return;
        }
    };
    if let Err(e) = driver.run().await {
        log::error!("shard {index}: QUIC socket {addr}: stopped serving: {e}");
    }
}
