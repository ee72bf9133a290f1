//! Accepting Kafka connections, at most `CONNECTIONS_MAX` at once.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use tracing::Instrument;

use super::{connection, Gateway, CONNECTIONS_MAX};
use crate::shard_metrics::Refusal;

/// Accept connections until the gateway stops (the task is dropped).
pub(crate) async fn accept_loop(gateway: Rc<Gateway>, listener: tokio::net::TcpListener) {
    let open = Rc::new(Cell::new(0usize));
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                if open.get() >= CONNECTIONS_MAX {
                    log::warn!("Kafka gateway: refusing {peer}: connection limit");
                    gateway.connections.refused(Refusal::ConnectionLimit).add(1);
                    drop(stream);
                    continue;
                }
                let Some(slot) = gateway.peers.admit(peer.ip()) else {
                    log::warn!("Kafka gateway: refusing {peer}: connection limit for its address");
                    gateway.connections.refused(Refusal::AddressLimit).add(1);
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                open.set(open.get() + 1);
                gateway.connections.open.set(open.get() as u64);
                let gateway = gateway.clone();
                let open = open.clone();
                let span = tracing::error_span!("connection", transport = "kafka", peer = %peer);
                tokio::task::spawn_local(
                    async move {
                        connection::serve(gateway.clone(), stream, peer).await;
                        open.set(open.get().saturating_sub(1));
                        gateway.connections.open.set(open.get() as u64);
                        drop(slot);
                    }
                    .instrument(span),
                );
            }
            Err(e) => {
                // Out of descriptors and the like: wait instead of spinning.
                log::error!("Kafka gateway: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
