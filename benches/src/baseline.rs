//! The raw baselines every load program measures in the same run: a plain
//! TCP sink and a plain quinn sink that read one stream, count its bytes,
//! and reply with the count after the peer's FIN. Plus the small tools the
//! programs share: per-thread CPU time, a current-thread tokio runtime and
//! a self-signed TLS identity.
//!
//! A sink never interprets the bytes it reads; it only proves it took them
//! all, so whatever a kelp case costs above it is kelp's.

use std::{
    io,
    net::{TcpListener as StdTcpListener, UdpSocket as StdUdpSocket},
    sync::Arc,
    time::Duration,
};

use anyhow::{anyhow, Context, Result};
use quinn_proto::EndpointConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A sink's reply: the number of stream bytes it took in, u64 little-endian.
pub const REPLY_BYTES: usize = 8;
/// The name every self-signed certificate here is made for.
pub const SERVER_NAME: &str = "localhost";
/// The TCP sink reads into one buffer of this size.
const TCP_READ_BYTES: usize = 1 << 20;

/// What a sink took in, and the CPU its thread spent doing it.
#[derive(Debug, Clone, Copy)]
pub struct SinkReport {
    pub bytes: u64,
    /// `getrusage(RUSAGE_THREAD)` of the sink's thread at its end.
    pub cpu: Duration,
}

/// A server and client configuration that trust each other.
pub struct Tls {
    pub server: quinn::ServerConfig,
    pub client: quinn::ClientConfig,
}

/// A self-signed certificate for `localhost` that the client trusts; both
/// sides use quinn's default transport settings.
pub fn tls_configs() -> Result<Tls> {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])?;
    let cert = cert.der().clone();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(signing_key.serialize_der());
    let server = quinn::ServerConfig::with_single_cert(vec![cert.clone()], key.into())?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert)?;
    let client = quinn::ClientConfig::with_root_certificates(Arc::new(roots))?;
    Ok(Tls { server, client })
}

/// Decodes a sink's reply.
pub fn parse_reply(reply: &[u8]) -> Result<u64> {
    let bytes: [u8; REPLY_BYTES] = reply
        .try_into()
        .map_err(|_| anyhow!("server reply has {} bytes, want {REPLY_BYTES}", reply.len()))?;
    Ok(u64::from_le_bytes(bytes))
}

/// Runs on the calling thread: accepts one connection on the (non-blocking)
/// listener, reads it to EOF into one reused buffer, replies with the count.
pub fn tcp_sink(listener: StdTcpListener) -> Result<SinkReport> {
    let rt = current_thread_runtime()?;
    let bytes = rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let (mut stream, _) = listener.accept().await?;
        let mut buf = vec![0u8; TCP_READ_BYTES];
        let mut bytes = 0u64;
        loop {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
        }
        stream.write_all(&bytes.to_le_bytes()).await?;
        stream.shutdown().await?;
        anyhow::Ok(bytes)
    })?;
    Ok(SinkReport {
        bytes,
        cpu: cpu_time(libc::RUSAGE_THREAD),
    })
}

/// Runs on the calling thread: quinn on a current-thread runtime accepts
/// one connection and its first bidirectional stream, counts the stream's
/// bytes with `read_chunk`, replies with the count and waits for the client
/// to close.
pub fn quinn_sink(socket: StdUdpSocket, server_config: quinn::ServerConfig) -> Result<SinkReport> {
    let rt = current_thread_runtime()?;
    let bytes = rt.block_on(async move {
        let endpoint = quinn_endpoint(socket, server_config)?;
        let (connection, send, mut recv) = quinn_accept(&endpoint).await?;
        let mut bytes = 0u64;
        while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
            bytes += chunk.bytes.len() as u64;
        }
        quinn_reply(connection, send, bytes).await?;
        anyhow::Ok(bytes)
    })?;
    Ok(SinkReport {
        bytes,
        cpu: cpu_time(libc::RUSAGE_THREAD),
    })
}

/// Accepts one connection and its first bidirectional stream.
pub async fn quinn_accept(
    endpoint: &quinn::Endpoint,
) -> Result<(quinn::Connection, quinn::SendStream, quinn::RecvStream)> {
    let incoming = endpoint.accept().await.context("endpoint closed")?;
    let connection = incoming.await?;
    let (send, recv) = connection.accept_bi().await?;
    Ok((connection, send, recv))
}

/// Replies with the byte count and waits for the client to close, so the
/// server thread's CPU covers the whole connection.
pub async fn quinn_reply(
    connection: quinn::Connection,
    mut send: quinn::SendStream,
    bytes: u64,
) -> Result<()> {
    send.write_all(&bytes.to_le_bytes()).await?;
    send.finish()?;
    connection.closed().await;
    Ok(())
}

/// A quinn server endpoint on an already bound socket, on the current
/// tokio runtime.
pub fn quinn_endpoint(
    socket: StdUdpSocket,
    server_config: quinn::ServerConfig,
) -> Result<quinn::Endpoint> {
    Ok(quinn::Endpoint::new(
        EndpointConfig::default(),
        Some(server_config),
        socket,
        Arc::new(quinn::TokioRuntime),
    )?)
}

pub fn current_thread_runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// User + system CPU of the calling thread (`RUSAGE_THREAD`) or of the whole
/// process (`RUSAGE_SELF`, which keeps the time of threads that exited).
pub fn cpu_time(who: libc::c_int) -> Duration {
    // SAFETY: rusage is plain integers, so all-zero is a valid value, and
    // getrusage writes only into the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(who, &mut usage) };
    assert_eq!(rc, 0, "getrusage({who}): {}", io::Error::last_os_error());
    let timeval = |tv: libc::timeval| {
        Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64)
    };
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}
