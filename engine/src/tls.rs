//! The broker's QUIC identity: the certificate chain and key given
//! (`--tls-cert`, `--tls-key`, PEM), or else a self-signed certificate
//! made on first start and kept under `<data-dir>/tls/` (`cert.der`,
//! `key.der`), which a client pins with `--tls-ca <data-dir>/tls/cert.der`.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::EngineError;
use crate::quic_shard::window::{STREAM_WINDOW_BYTES, WINDOW_BYTES_MIN};

/// ALPN protocol id of kelp's native protocol.
pub const ALPN: &[u8] = b"kelp/1";

/// The broker's certificate chain and key: from `given` (PEM files), or
/// its own self-signed one.
pub(crate) fn load(
    data_dir: &Path,
    given: Option<&(std::path::PathBuf, std::path::PathBuf)>,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), EngineError> {
    use rustls::pki_types::pem::PemObject;
    let Some((cert_path, key_path)) = given else {
        let (cert, key) = load_or_create(data_dir)?;
        return Ok((vec![cert], key));
    };
    let chain = CertificateDer::pem_file_iter(cert_path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| EngineError::Tls(format!("{}: {e}", cert_path.display())))?;
    if chain.is_empty() {
        return Err(EngineError::Tls(format!(
            "{}: no CERTIFICATE in it",
            cert_path.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(key_path)
        .map_err(|e| EngineError::Tls(format!("{}: {e}", key_path.display())))?;
    Ok((chain, key))
}

/// Load the broker's certificate, making one if there is none.
pub(crate) fn load_or_create(
    data_dir: &Path,
) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), EngineError> {
    let dir = data_dir.join("tls");
    let cert_path = dir.join("cert.der");
    let key_path = dir.join("key.der");
    if cert_path.exists() && key_path.exists() {
        let cert = std::fs::read(&cert_path).map_err(|e| EngineError::io("read", &cert_path, e))?;
        let key = std::fs::read(&key_path).map_err(|e| EngineError::io("read", &key_path, e))?;
        return Ok((
            CertificateDer::from(cert),
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
        ));
    }
    std::fs::create_dir_all(&dir).map_err(|e| EngineError::io("create dir", &dir, e))?;
    let names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let made =
        rcgen::generate_simple_self_signed(names).map_err(|e| EngineError::Tls(e.to_string()))?;
    let cert = made.cert.der().to_vec();
    let key = made.signing_key.serialize_der();
    write_private(&key_path, &key)?;
    std::fs::write(&cert_path, &cert).map_err(|e| EngineError::io("write", &cert_path, e))?;
    Ok((
        CertificateDer::from(cert),
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
    ))
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), EngineError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| EngineError::io("create", path, e))?;
    file.write_all(bytes)
        .map_err(|e| EngineError::io("write", path, e))
}

/// A window size as QUIC's variable-length integer (window.rs bounds them
/// below its maximum).
fn window_varint(bytes: u64) -> quinn_proto::VarInt {
    quinn_proto::VarInt::from_u64(bytes).unwrap_or(quinn_proto::VarInt::MAX)
}

/// A client's TLS for QUIC to a broker whose certificate is `cert` (the
/// one in its data dir, `tls/cert.der`): TLS 1.3 with ring, ALPN
/// [`ALPN`], no client certificate. What tests and benchmarks that talk to
/// a broker they started use; the SDK builds its own from a CA file.
pub fn client_tls_trusting(
    cert: CertificateDer<'static>,
) -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert)?;
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    Ok(tls)
}

/// The Kafka port's TLS (`--kafka-tls`): TLS 1.2 or 1.3 with ring, the
/// broker's certificate, no client certificate, no ALPN (Kafka clients
/// send none).
pub(crate) fn kafka_server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<rustls::ServerConfig>, EngineError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| EngineError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| EngineError::Tls(e.to_string()))?;
    Ok(Arc::new(tls))
}

/// The TCP port's TLS (`--tcp-tls`): what QUIC offers over TCP.
pub(crate) fn tcp_server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<rustls::ServerConfig>, EngineError> {
    Ok(Arc::new(native_server_tls(chain, key)?))
}

/// kelp's own protocol's server TLS, on QUIC and TCP: TLS 1.3 with ring,
/// ALPN [`ALPN`], no client certificate.
fn native_server_tls(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<rustls::ServerConfig, EngineError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| EngineError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| EngineError::Tls(e.to_string()))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    Ok(tls)
}

/// What a lone broker's own control plane dials the broker's TLS TCP
/// ports with: TLS 1.3, ALPN [`ALPN`], and only `certificate` (the
/// broker's own) accepted, whatever names it carries.
pub(crate) fn client_tls_pinned(
    certificate: CertificateDer<'static>,
) -> Result<Arc<rustls::ClientConfig>, EngineError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let check = auth::server_certificate::ServerCertificateCheck::pinned(
        Arc::clone(&provider),
        certificate,
    );
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| EngineError::Tls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(check))
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(tls))
}

/// quinn-proto's server configuration for the broker's shards.
pub(crate) fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<quinn_proto::ServerConfig, EngineError> {
    let tls = native_server_tls(chain, key)?;
    let crypto = quinn_proto::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| EngineError::Tls(e.to_string()))?;
    let mut config = quinn_proto::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn_proto::TransportConfig::default();
    // One ordered stream per connection carries everything. The
    // connection's window bounds what quinn-proto holds unread over all
    // its streams: it starts at the smallest, paid from the shard's
    // receive budget, and grows as the connection delivers
    // (`quic_shard/window.rs`).
    // No unreliable datagrams: kelp sends none, and quinn-proto would
    // buffer them outside the budget.
    transport
        .max_concurrent_bidi_streams(4u32.into())
        .max_concurrent_uni_streams(0u32.into())
        .stream_receive_window(window_varint(STREAM_WINDOW_BYTES))
        .receive_window(window_varint(WINDOW_BYTES_MIN))
        .datagram_receive_buffer_size(None)
        .send_window(32 << 20)
        .max_idle_timeout(Some(
            std::time::Duration::from_secs(60)
                .try_into()
                .map_err(|_| EngineError::Tls("idle timeout".into()))?,
        ));
    config.transport_config(Arc::new(transport));
    Ok(config)
}
