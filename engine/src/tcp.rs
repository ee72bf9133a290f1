//! TCP ingest: each shard listens on its own port with glommio's io_uring
//! sockets and serves its connections on its own thread.

use std::os::unix::io::{AsRawFd, RawFd};
use std::rc::Rc;
use std::time::Duration;

use futures_lite::AsyncWriteExt;
use glommio::net::TcpListener;
use tracing::Instrument;

use crate::connection::{admit, busy_frame, serve};
use crate::shard::Shard;

/// Accept connections forever; with `tls` (`--tcp-tls`), each speaks TLS.
pub(crate) async fn accept_loop(
    shard: Rc<Shard>,
    listener: TcpListener,
    fd: RawFd,
    tls: Option<futures_rustls::TlsAcceptor>,
) {
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            shard.stopped().await;
            None
        })
        .await;
        let Some(accepted) = accepted else {
            // Shutting down. An accept may still be queued in io_uring,
            // holding the socket (and the port) open after it is closed;
            // shutting the socket down completes it, so the port is free
            // when the broker's `stop` returns.
            // SAFETY: `fd` belongs to `listener`, which is still open.
            unsafe {
                libc::shutdown(fd, libc::SHUT_RDWR);
            }
            return;
        };
        match accepted {
            Ok(mut stream) => {
                let Ok(address) = stream.peer_addr() else {
                    continue;
                };
                let peer = address.to_string();
                let slot = match admit(&shard, address.ip()) {
                    Ok(slot) => slot,
                    Err(why) => {
                        log::warn!("shard {}: refusing {peer}: {}", shard.index, why.describe());
                        let _ = stream.write_all(&busy_frame()).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                // Non-blocking, so `sendfile` on it never blocks the shard
                // (glommio's own calls pass MSG_DONTWAIT and need no flag).
                let socket = stream.as_raw_fd();
                let socket = set_nonblocking(socket).then_some(socket);
                // Everything logged while serving it carries the span, at
                // any --log-level (a span at error level is never filtered
                // out while anything is logged).
                let span = tracing::error_span!(
                    "connection",
                    transport = "tcp",
                    shard = shard.index,
                    peer = %peer
                );
                match &tls {
                    None => {
                        glommio::spawn_local(serve(slot, stream, socket, peer).instrument(span))
                            .detach();
                    }
                    Some(tls) => {
                        let limit = crate::connection::PeerTimeouts::of(&shard.config).frame;
                        let served = serve_tls(tls.clone(), limit, slot, stream, peer);
                        glommio::spawn_local(served.instrument(span)).detach();
                    }
                }
            }
            Err(e) => {
                // Out of descriptors and the like: wait instead of spinning.
                log::error!("shard {}: accept: {e}", shard.index);
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Serve a TLS connection once its handshake is done (within the
/// connection's frame timeout). Answers go through TLS, never by
/// `sendfile`.
async fn serve_tls(
    tls: futures_rustls::TlsAcceptor,
    limit: Duration,
    slot: crate::connection::ConnectionSlot,
    stream: glommio::net::TcpStream,
    peer: String,
) {
    let handshake = futures_lite::future::or(async { Some(tls.accept(stream).await) }, async {
        glommio::timer::sleep(limit).await;
        None
    })
    .await;
    match handshake {
        Some(Ok(stream)) => serve(slot, stream, None, peer).await,
        Some(Err(e)) => log::info!("{peer}: TLS handshake failed: {e}"),
        None => log::info!(
            "{peer}: TLS handshake not done within {} ms",
            limit.as_millis()
        ),
    }
}

/// Set `O_NONBLOCK` on a socket; false if the kernel refused.
fn set_nonblocking(fd: RawFd) -> bool {
    // SAFETY: fcntl on a descriptor the caller holds open.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    }
}
