//! How a client of kelp's TLS (QUIC, or TCP with `--tcp-tls`) takes a
//! broker's certificate when it does not verify it against a CA: any
//! certificate (`--insecure`), or exactly one it already holds (a lone
//! broker's own control plane dialing the broker's TCP ports). Either way
//! the handshake's signatures are checked, so the server must hold the
//! certificate's private key.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// A certificate check without a CA.
#[derive(Debug)]
pub struct ServerCertificateCheck {
    provider: Arc<CryptoProvider>,
    /// `None`: any certificate; else only this one.
    pinned: Option<CertificateDer<'static>>,
}

impl ServerCertificateCheck {
    /// Accept any certificate.
    pub fn any(provider: Arc<CryptoProvider>) -> ServerCertificateCheck {
        ServerCertificateCheck {
            provider,
            pinned: None,
        }
    }

    /// Accept only `certificate`, whatever name it carries.
    pub fn pinned(
        provider: Arc<CryptoProvider>,
        certificate: CertificateDer<'static>,
    ) -> ServerCertificateCheck {
        ServerCertificateCheck {
            provider,
            pinned: Some(certificate),
        }
    }
}

impl ServerCertVerifier for ServerCertificateCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.pinned {
            Some(pinned) if pinned.as_ref() != end_entity.as_ref() => Err(
                rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
            ),
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
