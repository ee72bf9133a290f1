//! What the engine's integration tests share: free ports for a broker.

use std::sync::atomic::{AtomicU16, Ordering};

static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// A port `p` such that TCP and UDP on `p` and `p + 1` are free now (a
/// two-shard broker's ports). All of them lie in 20000..29900, below the
/// ephemeral range (32768 and up), so no client connection can take one
/// between this check and the broker's bind.
pub fn free_port_pair() -> u16 {
    let base = 20_000 + (std::process::id() % 500) as u16 * 10;
    loop {
        let p = base + NEXT_PORT.fetch_add(3, Ordering::Relaxed) % 4_900;
        let free = (p..p + 2).all(|q| {
            std::net::TcpListener::bind(("127.0.0.1", q)).is_ok()
                && std::net::UdpSocket::bind(("127.0.0.1", q)).is_ok()
        });
        if free {
            return p;
        }
    }
}
