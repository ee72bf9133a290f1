//! Dialing a shard over TCP or QUIC, and the QUIC client's TLS settings.
//!
//! Both transports carry the same frames: TCP on the connection itself,
//! QUIC on one bidirectional stream opened by the client (one ordered
//! stream, so per-key order holds exactly as over TCP).
//!
//! Certificates: the client verifies the broker's certificate against a CA
//! file (DER or PEM; a lone broker's self-signed certificate,
//! `<data-dir>/tls/cert.der`, is its own CA) for the server name
//! `localhost` (or the one given), and refuses to dial over QUIC without
//! one unless told to trust any certificate (`tls_insecure`, `--insecure`),
//! which it then says loudly: the handshake still proves the server holds
//! the certificate's key, but not who it is.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::connection::{Connection, ConnectionLimits};
use crate::error::ClientError;

/// The ALPN protocol a kelp broker speaks over QUIC.
pub const KELP_ALPN: &[u8] = b"kelp/1";
/// The TLS server name the client asks for (and verifies with a CA file).
pub const KELP_SERVER_NAME: &str = "localhost";
/// How often an idle QUIC connection pings, so the broker's idle timeout
/// does not close an admin connection a long-running producer keeps.
const QUIC_KEEP_ALIVE_MS: u64 = 5_000;

/// How the client talks to a broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// Plain TCP (the default: the kernel moves bytes with far less CPU).
    #[default]
    Tcp,
    /// QUIC (UDP) with TLS 1.3, one bidirectional stream per connection.
    Quic,
    /// TCP with TLS 1.3, to a broker whose TCP port speaks it
    /// (`kelp serve --tcp-tls`); the broker is verified as over QUIC.
    Tls,
}

/// What dials new connections for a client.
pub(crate) enum Dialer {
    Tcp,
    /// TLS over TCP, and the name the broker's certificate must carry.
    Tls(tokio_rustls::TlsConnector, ServerName<'static>),
    /// The endpoint, and the name the broker's certificate must carry.
    Quic(quinn::Endpoint, String),
}

/// How a QUIC client trusts the broker's certificate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Trust<'a> {
    pub(crate) ca_file: Option<&'a Path>,
    pub(crate) insecure: bool,
    pub(crate) server_name: Option<&'a str>,
}

impl Dialer {
    /// A dialer for `transport`; QUIC binds one UDP endpoint of the same
    /// address family as `peer`, shared by every connection of the client.
    pub(crate) fn new(
        transport: Transport,
        peer: SocketAddr,
        trust: Trust<'_>,
    ) -> Result<Dialer, ClientError> {
        match transport {
            Transport::Tcp => Ok(Dialer::Tcp),
            Transport::Tls => {
                let name = trust.server_name.unwrap_or(KELP_SERVER_NAME).to_owned();
                let name = ServerName::try_from(name)
                    .map_err(|e| ClientError::Config(format!("TLS server name: {e}")))?;
                let config = Arc::new(client_tls(trust)?);
                Ok(Dialer::Tls(tokio_rustls::TlsConnector::from(config), name))
            }
            Transport::Quic => {
                let bind: SocketAddr = if peer.is_ipv4() {
                    (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
                } else {
                    (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
                };
                let mut endpoint = quinn::Endpoint::client(bind)
                    .map_err(|e| ClientError::io("binding a UDP socket for QUIC", e))?;
                endpoint.set_default_client_config(quic_client_config(trust)?);
                let name = trust.server_name.unwrap_or(KELP_SERVER_NAME).to_owned();
                Ok(Dialer::Quic(endpoint, name))
            }
        }
    }

    /// The transport this dialer speaks.
    pub(crate) fn transport(&self) -> Transport {
        match self {
            Dialer::Tcp => Transport::Tcp,
            Dialer::Tls(..) => Transport::Tls,
            Dialer::Quic(..) => Transport::Quic,
        }
    }

    /// Open a connection to `addr` and start its tasks. QUIC asks every
    /// address for the same server name ([`KELP_SERVER_NAME`]): every kelp
    /// broker's certificate is issued for it, so one endpoint and one TLS
    /// configuration reach any broker of a cluster.
    pub(crate) async fn dial(
        &self,
        addr: SocketAddr,
        limits: ConnectionLimits,
        connect_timeout: Duration,
        credentials: Option<&auth::Credentials>,
    ) -> Result<Connection, ClientError> {
        let name = addr.to_string();
        let connect_error = |reason: String| ClientError::Connect {
            addr: name.clone(),
            reason,
        };
        let timed_out =
            || connect_error(format!("no answer in {} ms", connect_timeout.as_millis()));
        match self {
            Dialer::Tcp => {
                let stream =
                    tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect(addr))
                        .await
                        .map_err(|_| timed_out())?
                        .map_err(|e| connect_error(e.to_string()))?;
                // Frames are already batched; Nagle would only add latency.
                stream
                    .set_nodelay(true)
                    .map_err(|e| ClientError::io("setting TCP_NODELAY", e))?;
                let socket = Some(std::os::unix::io::AsRawFd::as_raw_fd(&stream));
                let (mut r, mut w) = stream.into_split();
                if let Some(credentials) = credentials {
                    authenticate(&mut r, &mut w, credentials, connect_timeout).await?;
                }
                Ok(Connection::start(name, r, w, limits, None, socket))
            }
            Dialer::Tls(connector, server_name) => {
                let handshake = async {
                    let stream = tokio::net::TcpStream::connect(addr)
                        .await
                        .map_err(|e| connect_error(e.to_string()))?;
                    stream
                        .set_nodelay(true)
                        .map_err(|e| ClientError::io("setting TCP_NODELAY", e))?;
                    connector
                        .connect(server_name.clone(), stream)
                        .await
                        .map_err(|e| connect_error(format!("TLS: {e}")))
                };
                let stream = tokio::time::timeout(connect_timeout, handshake)
                    .await
                    .map_err(|_| timed_out())??;
                let (mut r, mut w) = tokio::io::split(stream);
                if let Some(credentials) = credentials {
                    authenticate(&mut r, &mut w, credentials, connect_timeout).await?;
                }
                Ok(Connection::start(name, r, w, limits, None, None))
            }
            Dialer::Quic(endpoint, server_name) => {
                let connecting = endpoint
                    .connect(addr, server_name)
                    .map_err(|e| connect_error(e.to_string()))?;
                let connection = tokio::time::timeout(connect_timeout, connecting)
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| connect_error(e.to_string()))?;
                let (mut send, mut recv) = connection
                    .open_bi()
                    .await
                    .map_err(|e| connect_error(e.to_string()))?;
                if let Some(credentials) = credentials {
                    authenticate(&mut recv, &mut send, credentials, connect_timeout).await?;
                }
                Ok(Connection::start(
                    name,
                    recv,
                    send,
                    limits,
                    Some(Box::new(connection)),
                    None,
                ))
            }
        }
    }
}

/// Authenticate a fresh connection with `credentials`, before anything
/// else is sent on it: two round trips, each within `timeout`.
async fn authenticate(
    reader: &mut (impl tokio::io::AsyncRead + Unpin),
    writer: &mut (impl tokio::io::AsyncWrite + Unpin),
    credentials: &auth::Credentials,
    timeout: Duration,
) -> Result<(), ClientError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use wire::frame::{FrameHeader, FRAME_HEADER_BYTES};
    let (mut handshake, mut request) = auth::Handshake::start_fresh(credentials);
    let mut frame = Vec::new();
    let mut payload = Vec::new();
    loop {
        frame.clear();
        request.encode(0, &mut frame);
        let round = async {
            writer
                .write_all(&frame)
                .await
                .map_err(|e| ClientError::io("sending an authentication step", e))?;
            let mut head = [0u8; FRAME_HEADER_BYTES];
            reader
                .read_exact(&mut head)
                .await
                .map_err(|e| ClientError::io("reading an authentication answer", e))?;
            let header = FrameHeader::decode(&head)?;
            payload.resize(header.payload_bytes as usize, 0);
            reader
                .read_exact(&mut payload)
                .await
                .map_err(|e| ClientError::io("reading an authentication answer", e))?;
            header.verify_payload(&payload)?;
            Ok::<_, ClientError>(header)
        };
        let header =
            tokio::time::timeout(timeout, round)
                .await
                .map_err(|_| ClientError::Timeout {
                    operation: "authenticating",
                    after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                })??;
        let response = wire::Response::decode(header.frame_type, &payload)?;
        match handshake.answer(&response) {
            Ok(Some(next)) => request = next,
            Ok(None) => return Ok(()),
            Err(auth::HandshakeError::Refused { code, message }) => {
                return Err(ClientError::Broker { code, message })
            }
            Err(e) => {
                return Err(ClientError::Broker {
                    code: wire::ErrorCode::Unauthenticated,
                    message: e.to_string(),
                })
            }
        }
    }
}

/// The quinn client configuration: [`client_tls`], and keep-alives.
pub(crate) fn quic_client_config(trust: Trust<'_>) -> Result<quinn::ClientConfig, ClientError> {
    let tls = client_tls(trust)?;
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| ClientError::Config(format!("QUIC TLS: {e}")))?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(Some(Duration::from_millis(QUIC_KEEP_ALIVE_MS)));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// A client's TLS to a broker, over QUIC or TCP: TLS 1.3 with ring, ALPN
/// `kelp/1`, and the CA in the trust's file, or (told so) any server
/// certificate; with neither it is refused.
fn client_tls(trust: Trust<'_>) -> Result<rustls::ClientConfig, ClientError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| ClientError::Config(format!("TLS: {e}")))?;
    let mut tls = match trust.ca_file {
        None if !trust.insecure => {
            return Err(ClientError::Config(
                "TLS (QUIC, --transport tls) verifies the broker's certificate: give its CA (--tls-ca FILE; a broker's \
                 own certificate is <data-dir>/tls/cert.der) or trust any certificate with \
                 --insecure"
                    .to_owned(),
            ))
        }
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in load_certificates(path)? {
                roots
                    .add(cert)
                    .map_err(|e| ClientError::Config(format!("CA file {}: {e}", path.display())))?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => {
            log::warn!(
                "TLS with --insecure: the broker's certificate is not verified, so anyone \
                 on the path can pose as the broker"
            );
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(
                    auth::server_certificate::ServerCertificateCheck::any(provider),
                ))
                .with_no_client_auth()
        }
    };
    tls.alpn_protocols = vec![KELP_ALPN.to_vec()];
    Ok(tls)
}

/// Certificates from a PEM file (every CERTIFICATE block) or a DER file.
fn load_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let bytes = std::fs::read(path)
        .map_err(|e| ClientError::Config(format!("cannot read CA file {}: {e}", path.display())))?;
    if bytes.starts_with(b"-----BEGIN") || bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        let certs = CertificateDer::pem_slice_iter(&bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ClientError::Config(format!("CA file {}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(ClientError::Config(format!(
                "CA file {} holds no certificate",
                path.display()
            )));
        }
        Ok(certs)
    } else {
        Ok(vec![CertificateDer::from(bytes)])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn trust(ca_file: Option<&Path>, insecure: bool) -> Trust<'_> {
        Trust {
            ca_file,
            insecure,
            server_name: None,
        }
    }

    #[test]
    fn quic_config_needs_a_ca_or_insecure_and_refuses_a_bad_ca() {
        assert!(quic_client_config(trust(None, true)).is_ok());
        let Err(ClientError::Config(why)) = quic_client_config(trust(None, false)) else {
            panic!("QUIC without a CA was configured")
        };
        assert!(
            why.contains("--tls-ca") && why.contains("--insecure"),
            "{why}"
        );
        let dir = std::env::temp_dir().join(format!("kelp-client-ca-{}", std::process::id()));
        std::fs::write(
            &dir,
            b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let r = quic_client_config(trust(Some(&dir), false));
        let _ = std::fs::remove_file(&dir);
        assert!(matches!(r, Err(ClientError::Config(_))));
        assert!(matches!(
            quic_client_config(trust(Some(Path::new("/nonexistent/ca.pem")), false)),
            Err(ClientError::Config(_))
        ));
    }
}
