//! The QUIC side of [`crate::TestConn`]: kelp's frames over one quinn
//! bidirectional stream, for tests that speak to a broker's QUIC port with
//! a plain quinn client.

use std::net::SocketAddr;
use std::sync::Arc;

use wire::frame::{FrameHeader, FRAME_HEADER_BYTES};
use wire::BrokerPortRequest;

use crate::Frame;

/// A quinn client endpoint bound to `local` (another loopback address
/// stands for another host) that speaks `tls` (a configuration trusting
/// the broker's certificate) with `transport`'s windows and limits.
pub fn quic_endpoint(
    local: &str,
    tls: quinn::rustls::ClientConfig,
    transport: quinn::TransportConfig,
) -> quinn::Endpoint {
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    config.transport_config(Arc::new(transport));
    let mut endpoint = quinn::Endpoint::client(local.parse().unwrap()).unwrap();
    endpoint.set_default_client_config(config);
    endpoint
}

/// One QUIC connection to a broker's shard and its one request stream.
/// Requests are numbered from 1 in the order they are sent.
pub struct QuicConn {
    pub connection: quinn::Connection,
    pub send: quinn::SendStream,
    pub recv: quinn::RecvStream,
    next_id: u32,
}

impl QuicConn {
    /// Connects to `127.0.0.1:port` and opens the request stream.
    pub async fn open(endpoint: &quinn::Endpoint, port: u16) -> QuicConn {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let connection = endpoint.connect(addr, "localhost").unwrap().await.unwrap();
        let (send, recv) = connection.open_bi().await.unwrap();
        QuicConn {
            connection,
            send,
            recv,
            next_id: 1,
        }
    }

    /// Sends `request` without waiting for its answer: its request id.
    pub async fn send(&mut self, request: impl Into<BrokerPortRequest<'_>>) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        let mut out = Vec::new();
        request.into().encode(id, &mut out);
        self.send.write_all(&out).await.unwrap();
        id
    }

    /// The next answer, or `None` once the broker ended the stream or the
    /// connection. Panics on a frame that does not decode or verify.
    pub async fn read_frame(&mut self) -> Option<Frame> {
        let mut h = [0u8; FRAME_HEADER_BYTES];
        self.recv.read_exact(&mut h).await.ok()?;
        let header = FrameHeader::decode(&h).unwrap();
        let mut payload = vec![0u8; header.payload_bytes as usize];
        self.recv.read_exact(&mut payload).await.unwrap();
        header.verify_payload(&payload).unwrap();
        Some((header, payload))
    }

    /// Sends `request` and reads its answer, which must be the next frame.
    pub async fn call(&mut self, request: impl Into<BrokerPortRequest<'_>>) -> Frame {
        let id = self.send(request).await;
        let frame = self.read_frame().await.unwrap();
        assert_eq!(frame.0.request_id, id);
        frame
    }
}
