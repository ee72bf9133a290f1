//! SASL on the Kafka port: who a connection is, before it may send
//! anything but ApiVersions.
//!
//! A gateway with an auth file (`--auth`) takes SaslHandshake v1 (the
//! mechanism: `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`) and then
//! SaslAuthenticate requests carrying the mechanism's messages, as Kafka's
//! `SASL_PLAINTEXT` listener does. PLAIN takes one step (RFC 4616); SCRAM
//! two (RFC 5802 and 7677), the same exchange as on kelp's own ports. The
//! standing itself is `auth::Session`, a pure state machine; this module
//! only carries its steps in Kafka's messages.
//!
//! Before a connection has authenticated, any other request closes it, as
//! Kafka closes a connection that skips the handshake. A failed
//! authentication is answered with SASL_AUTHENTICATION_FAILED and the
//! reason, and the connection may do nothing more. A gateway without an
//! auth file answers SaslHandshake with ILLEGAL_SASL_STATE (a plaintext
//! listener) and serves every request.

use auth::{AuthFile, Denied, Session, Step};
use kafka::api::sasl_authenticate::{SaslAuthenticateRequest, SaslAuthenticateResponse};
use kafka::api::sasl_handshake::{SaslHandshakeRequest, SaslHandshakeResponse};
use kafka::error_code;
use kafka::ApiKey;

use super::Gateway;

/// The mechanisms the gateway enables, as SaslHandshake names them.
pub(crate) const MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

const PLAIN: &str = MECHANISMS[0];

/// One connection's SASL state.
#[derive(Debug)]
pub(crate) struct Sasl {
    pub(crate) session: Session,
    /// The mechanism SaslHandshake chose, until its exchange ends.
    mechanism: Option<&'static str>,
}

impl Sasl {
    pub(crate) fn new(auth: Option<&AuthFile>) -> Sasl {
        Sasl {
            session: Session::new(auth),
            mechanism: None,
        }
    }

    /// Whether a request of `api_key` may be handled now: before a
    /// connection has authenticated, only ApiVersions and the SASL
    /// requests.
    pub(crate) fn admits(&self, api_key: ApiKey) -> Result<(), Denied> {
        match api_key {
            ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => Ok(()),
            _ => self.session.check_authenticated(),
        }
    }

    /// Answer SaslHandshake: the mechanism the exchange will use.
    pub(crate) fn handshake(
        &mut self,
        gateway: &Gateway,
        request: &SaslHandshakeRequest,
    ) -> SaslHandshakeResponse {
        let Some(_) = gateway.auth else {
            return SaslHandshakeResponse {
                error_code: error_code::ILLEGAL_SASL_STATE,
                mechanisms: Vec::new(),
            };
        };
        let mechanisms = MECHANISMS.iter().map(|m| (*m).to_owned()).collect();
        if !matches!(self.session, Session::Anonymous) || self.mechanism.is_some() {
            return SaslHandshakeResponse {
                error_code: error_code::ILLEGAL_SASL_STATE,
                mechanisms,
            };
        }
        match MECHANISMS.iter().find(|m| **m == request.mechanism) {
            Some(m) => {
                self.mechanism = Some(m);
                SaslHandshakeResponse {
                    error_code: error_code::NONE,
                    mechanisms,
                }
            }
            None => SaslHandshakeResponse {
                error_code: error_code::UNSUPPORTED_SASL_MECHANISM,
                mechanisms,
            },
        }
    }

    /// Answer one SaslAuthenticate step.
    pub(crate) fn authenticate(
        &mut self,
        gateway: &Gateway,
        request: &SaslAuthenticateRequest,
    ) -> SaslAuthenticateResponse {
        let auth = gateway.auth.as_deref();
        let Some(mechanism) = self.mechanism else {
            return refusal(
                error_code::ILLEGAL_SASL_STATE,
                "SaslAuthenticate without a SaslHandshake before it".to_owned(),
            );
        };
        let step = if mechanism == PLAIN {
            self.session.authenticate_plain(auth, &request.auth_bytes)
        } else {
            self.session.authenticate(
                auth,
                mechanism,
                &request.auth_bytes,
                auth::session::server_nonce,
            )
        };
        match step {
            Ok(Step::Challenge(bytes)) => accepted(bytes),
            Ok(Step::Done(bytes)) => {
                self.mechanism = None;
                if let Some(p) = self.session.principal() {
                    log::debug!("Kafka: a connection authenticated as {:?}", p.name);
                }
                accepted(bytes)
            }
            Err(denied) => {
                self.mechanism = None;
                gateway.connections.denied(denied.reason()).add(1);
                log::info!("Kafka: authentication refused: {denied}");
                let code = match denied {
                    Denied::Again | Denied::NotEnabled => error_code::ILLEGAL_SASL_STATE,
                    _ => error_code::SASL_AUTHENTICATION_FAILED,
                };
                refusal(code, denied.to_string())
            }
        }
    }
}

fn accepted(auth_bytes: Vec<u8>) -> SaslAuthenticateResponse {
    SaslAuthenticateResponse {
        error_code: error_code::NONE,
        error_message: None,
        auth_bytes,
        // A session lasts as long as its connection.
        session_lifetime_ms: 0,
    }
}

fn refusal(error_code: i16, message: String) -> SaslAuthenticateResponse {
    SaslAuthenticateResponse {
        error_code,
        error_message: Some(message),
        auth_bytes: Vec::new(),
        session_lifetime_ms: 0,
    }
}
