//! TCP ingest: each shard listens on its own port with glommio's io_uring
//! sockets and serves its connections on its own thread.

use std::rc::Rc;
use std::time::Duration;

use futures_lite::AsyncWriteExt;
use glommio::net::TcpListener;

use crate::connection::{admit, busy_frame, serve};
use crate::shard::Shard;

/// Accept connections forever.
pub(crate) async fn accept_loop(shard: Rc<Shard>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok(mut stream) => {
                let peer = stream
                    .peer_addr()
                    .map_or_else(|_| "tcp peer".to_string(), |a| a.to_string());
                if !admit(&shard) {
                    log::warn!("shard {}: refusing {peer}: connection limit", shard.index);
                    let _ = stream.write_all(&busy_frame()).await;
                    continue;
                }
                let _ = stream.set_nodelay(true);
                glommio::spawn_local(serve(shard.clone(), stream, peer)).detach();
            }
            Err(e) => {
                // Out of descriptors and the like: wait instead of spinning.
                log::error!("shard {}: accept: {e}", shard.index);
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
