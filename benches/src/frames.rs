//! kelp frames on the benchmark's connections: dialing a shard over TCP or
//! QUIC, reading one verified frame, admin requests, and the QUIC client
//! and raw-sink configurations.
//!
//! Every byte from the broker is checked (frame checksum, payload bounds)
//! before use; a bad frame is an error, never a panic.

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr},
    os::unix::io::{AsRawFd, RawFd},
    path::Path,
    sync::Arc,
    time::Duration,
};

use anyhow::{bail, ensure, Context, Result};
use rustls::pki_types::{pem::PemObject, CertificateDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use wire::{
    frame::{FrameHeader, FRAME_HEADER_BYTES},
    limits::FRAME_PAYLOAD_BYTES_MAX,
    message::TopicInfo,
    BrokerPortRequest, FrameDecoder, Response,
};

use crate::baseline::SERVER_NAME;
use client::low_water::ReceiveLowWater;

/// The broker's QUIC transport windows (engine `tls::server_config`), so
/// the raw quinn sink runs the same protocol configuration: the
/// connection window is the largest a broker connection grows to (it
/// starts at 64 KiB, paid from the shard's receive budget,
/// `engine/src/quic_shard/window.rs`).
pub const QUIC_STREAM_RECEIVE_WINDOW_BYTES: u32 = 16 << 20;
pub const QUIC_RECEIVE_WINDOW_BYTES: u32 = 32 << 20;
pub const QUIC_SEND_WINDOW_BYTES: u64 = 32 << 20;

pub type FrameReader = Box<dyn AsyncRead + Unpin + Send>;
pub type FrameWriter = Box<dyn AsyncWrite + Unpin + Send>;

/// One connection to a shard: TCP itself, or one bidirectional QUIC stream.
pub struct ShardConnection {
    pub read: FrameReader,
    pub write: FrameWriter,
    /// The QUIC connection, kept so it can be closed when done.
    pub quic: Option<quinn::Connection>,
    /// The TCP socket, for [`read_exact_waking_late`].
    pub tcp: Option<RawFd>,
}

/// `read_exact` for a large frame payload that wakes the reader only once
/// the kernel holds `min(remaining, RECEIVE_LOW_WATER_BYTES_MAX)` bytes
/// (`client::low_water`), instead of once per arriving segment: on
/// loopback those wake-ups are the broker's CPU. Without a socket (QUIC)
/// it is a plain `read_exact`.
pub async fn read_exact_waking_late<R: AsyncRead + Unpin + ?Sized>(
    read: &mut R,
    socket: Option<RawFd>,
    buf: &mut [u8],
) -> Result<()> {
    let mut low_water = ReceiveLowWater::new(socket);
    let mut at = 0;
    while at < buf.len() {
        low_water.expect(buf.len() - at)?;
        let n = read.read(&mut buf[at..]).await?;
        ensure!(n > 0, "the connection closed inside a frame");
        at += n;
    }
    low_water.expect(0)?;
    Ok(())
}

/// How the load generator reaches the broker.
#[derive(Clone)]
pub enum Dialer {
    Tcp,
    Quic(quinn::Endpoint),
}

impl Dialer {
    pub async fn dial(&self, addr: SocketAddr) -> Result<ShardConnection> {
        match self {
            Dialer::Tcp => {
                let stream = tokio::net::TcpStream::connect(addr)
                    .await
                    .with_context(|| format!("connect to {addr}"))?;
                stream.set_nodelay(true)?;
                let tcp = Some(stream.as_raw_fd());
                let (read, write) = stream.into_split();
                Ok(ShardConnection {
                    read: Box::new(read),
                    write: Box::new(write),
                    quic: None,
                    tcp,
                })
            }
            Dialer::Quic(endpoint) => {
                let connection = endpoint
                    .connect(addr, SERVER_NAME)?
                    .await
                    .with_context(|| format!("QUIC connect to {addr}"))?;
                let (send, recv) = connection.open_bi().await?;
                Ok(ShardConnection {
                    read: Box::new(recv),
                    write: Box::new(send),
                    quic: Some(connection),
                    tcp: None,
                })
            }
        }
    }
}

/// A QUIC client endpoint on loopback trusting `cert`, ALPN `kelp/1`.
pub fn quic_endpoint(cert: CertificateDer<'static>) -> Result<quinn::Endpoint> {
    let tls = engine::client_tls_trusting(cert)?;
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let mut endpoint = quinn::Endpoint::client(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
    Ok(endpoint)
}

/// A certificate file, DER or PEM.
pub fn read_certificate(path: &Path) -> Result<CertificateDer<'static>> {
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    if bytes.starts_with(b"-----BEGIN") {
        return CertificateDer::from_pem_slice(&bytes)
            .with_context(|| format!("{}: not a PEM certificate", path.display()));
    }
    Ok(CertificateDer::from(bytes))
}

/// The broker's transport windows on a quinn server configuration.
pub fn with_broker_windows(mut config: quinn::ServerConfig) -> quinn::ServerConfig {
    let mut transport = quinn::TransportConfig::default();
    transport
        .stream_receive_window(QUIC_STREAM_RECEIVE_WINDOW_BYTES.into())
        .receive_window(QUIC_RECEIVE_WINDOW_BYTES.into())
        .send_window(QUIC_SEND_WINDOW_BYTES);
    config.transport_config(Arc::new(transport));
    config
}

/// Reads one frame's header through `wire`'s frame decoder (magic,
/// version, type, length bounded); the caller reads and verifies the
/// payload.
pub async fn read_frame_header<R: AsyncRead + Unpin + ?Sized>(read: &mut R) -> Result<FrameHeader> {
    let mut decoder = FrameDecoder::new();
    read.read_exact(decoder.unfilled())
        .await
        .context("read frame header")?;
    decoder.filled(FRAME_HEADER_BYTES)?;
    decoder
        .header()
        .context("a whole header did not decode to one")
}

/// Reads one frame; its verified payload is left in `payload` (whose
/// memory is reused).
pub async fn read_frame<R: AsyncRead + Unpin + ?Sized>(
    read: &mut R,
    payload: &mut Vec<u8>,
) -> Result<FrameHeader> {
    let mut decoder = FrameDecoder::with_buffer(std::mem::take(payload));
    read.read_exact(decoder.unfilled())
        .await
        .context("read frame header")?;
    decoder.filled(FRAME_HEADER_BYTES)?;
    let frame = match decoder.admit() {
        Some(empty) => empty,
        None => {
            let n = decoder.unfilled().len();
            read.read_exact(decoder.unfilled())
                .await
                .context("read frame payload")?;
            decoder
                .filled(n)?
                .context("a whole payload did not complete its frame")?
        }
    };
    *payload = frame.payload;
    frame.header.verify_payload(payload)?;
    Ok(frame.header)
}

/// What an admin request answers.
#[derive(Debug)]
pub enum AdminAnswer {
    Topic(TopicInfo),
    TopicList(Vec<String>),
    /// Each shard's TCP and QUIC address.
    Shards(Vec<(String, String)>),
    Done,
}

impl AdminAnswer {
    pub fn topic(self) -> Result<TopicInfo> {
        match self {
            AdminAnswer::Topic(t) => Ok(t),
            other => bail!("expected a topic, got {other:?}"),
        }
    }
}

fn admin_answer(header: &FrameHeader, payload: &[u8]) -> Result<AdminAnswer> {
    match Response::decode(header.frame_type, payload)? {
        Response::Topic(topic) => Ok(AdminAnswer::Topic(topic)),
        Response::TopicList { topics } => Ok(AdminAnswer::TopicList(topics)),
        Response::Done => Ok(AdminAnswer::Done),
        Response::Shards { shards } => Ok(AdminAnswer::Shards(
            shards.into_iter().map(|s| (s.tcp, s.quic)).collect(),
        )),
        Response::Error { code, message } => bail!("broker error {code:?}: {message}"),
        other => bail!("unexpected answer {:?}", other.frame_type()),
    }
}

/// One admin request on its own TCP connection.
pub async fn admin_request(
    addr: SocketAddr,
    request: &BrokerPortRequest<'_>,
) -> Result<AdminAnswer> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect to {addr}"))?;
    let mut frame = Vec::new();
    request.encode(1, &mut frame);
    stream.write_all(&frame).await?;
    let mut payload = Vec::new();
    let header = read_frame(&mut stream, &mut payload).await?;
    admin_answer(&header, &payload)
}

/// The same on a blocking socket, every step bounded by `timeout`.
pub fn admin_request_blocking(
    addr: SocketAddr,
    request: &BrokerPortRequest<'_>,
    timeout: Duration,
) -> Result<AdminAnswer> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut frame = Vec::new();
    request.encode(1, &mut frame);
    stream.write_all(&frame)?;
    let mut header_bytes = [0u8; FRAME_HEADER_BYTES];
    stream.read_exact(&mut header_bytes)?;
    let header = FrameHeader::decode(&header_bytes)?;
    ensure!(
        header.payload_bytes <= FRAME_PAYLOAD_BYTES_MAX,
        "frame of {} bytes is over the limit",
        header.payload_bytes
    );
    let mut payload = vec![0u8; header.payload_bytes as usize];
    stream.read_exact(&mut payload)?;
    header.verify_payload(&payload)?;
    admin_answer(&header, &payload)
}
