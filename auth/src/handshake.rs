//! The client's side of authenticating a connection in kelp's protocol,
//! as a pure state machine: it makes the two `Authenticate` requests and
//! judges the two answers. The transports (the SDK's async connections,
//! the cluster's blocking links) carry the frames.

use std::fmt;

use wire::message::AuthRequest;
use wire::{ErrorCode, Response};

use crate::auth_file::CLUSTER_USER;
use crate::scram::{nonce, ScramClient, ScramError, ScramHash};

/// The mechanism kelp's own clients use.
pub const MECHANISM: ScramHash = ScramHash::Sha256;
/// Random bytes in a client nonce.
pub const CLIENT_NONCE_RANDOM_BYTES: usize = 18;

/// A user name and password to authenticate with.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Credentials {
        Credentials {
            user: user.into(),
            password: password.into(),
        }
    }

    /// The credentials the cluster's processes authenticate to each other
    /// with.
    pub fn cluster(secret: &str) -> Credentials {
        Credentials::new(CLUSTER_USER, secret)
    }
}

/// Why a connection could not authenticate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The server refused (wrong credentials, no auth on the server, ...):
    /// its message says why.
    #[error("{message}")]
    Refused { code: ErrorCode, message: String },
    #[error("authentication: {0}")]
    Scram(ScramError),
    #[error("authentication: the server answered {0} to an authentication step")]
    Unexpected(String),
}

/// One connection's authentication, from the client's side.
#[derive(Debug)]
pub struct Handshake {
    client: ScramClient,
    proof_sent: bool,
}

impl Handshake {
    /// Start with `client_random` bytes for the nonce; returns the first
    /// request to send.
    pub fn start(credentials: &Credentials, client_random: &[u8]) -> (Handshake, AuthRequest) {
        let client = ScramClient::new(
            MECHANISM,
            &credentials.user,
            &credentials.password,
            nonce(client_random),
        );
        let first = AuthRequest::Authenticate {
            mechanism: MECHANISM.mechanism().to_owned(),
            message: String::from_utf8_lossy(&client.client_first()).into_owned(),
        };
        (
            Handshake {
                client,
                proof_sent: false,
            },
            first,
        )
    }

    /// Start with a fresh random nonce.
    pub fn start_fresh(credentials: &Credentials) -> (Handshake, AuthRequest) {
        use ring::rand::SecureRandom;
        let mut random = [0u8; CLIENT_NONCE_RANDOM_BYTES];
        // A failed getrandom leaves zeros: a weaker nonce, never a proof
        // that passes without the password.
        let _ = ring::rand::SystemRandom::new().fill(&mut random);
        Handshake::start(credentials, &random)
    }

    /// Take the server's answer to the last request: the next request to
    /// send, or `None` once the connection is authenticated.
    pub fn answer(
        &mut self,
        response: &Response<'_>,
    ) -> Result<Option<AuthRequest>, HandshakeError> {
        match response {
            Response::Error { code, message } => Err(HandshakeError::Refused {
                code: *code,
                message: message.clone(),
            }),
            Response::Authenticated {
                done: false,
                message,
            } if !self.proof_sent => {
                let last = self
                    .client
                    .client_final(message.as_bytes())
                    .map_err(HandshakeError::Scram)?;
                self.proof_sent = true;
                Ok(Some(AuthRequest::Authenticate {
                    mechanism: MECHANISM.mechanism().to_owned(),
                    message: String::from_utf8_lossy(&last).into_owned(),
                }))
            }
            Response::Authenticated {
                done: true,
                message,
            } if self.proof_sent => {
                self.client
                    .verify(message.as_bytes())
                    .map_err(HandshakeError::Scram)?;
                Ok(None)
            }
            other => Err(HandshakeError::Unexpected(format!(
                "{:?}",
                other.frame_type()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::session::{server_nonce, Session, Step};
    use crate::AuthFile;
    use ring::rand::SystemRandom;

    /// A handshake against a session, as a server would answer it.
    fn run(auth: &AuthFile, credentials: &Credentials) -> Result<Session, HandshakeError> {
        let mut session = Session::new(Some(auth));
        let (mut handshake, mut request) = Handshake::start_fresh(credentials);
        loop {
            let AuthRequest::Authenticate { mechanism, message } = &request;
            let response =
                match session.authenticate(Some(auth), mechanism, message.as_bytes(), server_nonce)
                {
                    Ok(Step::Challenge(m)) => Response::Authenticated {
                        done: false,
                        message: String::from_utf8(m).unwrap(),
                    },
                    Ok(Step::Done(m)) => Response::Authenticated {
                        done: true,
                        message: String::from_utf8(m).unwrap(),
                    },
                    Err(e) => Response::Error {
                        code: ErrorCode::Unauthenticated,
                        message: e.to_string(),
                    },
                };
            match handshake.answer(&response)? {
                Some(next) => request = next,
                None => return Ok(session),
            }
        }
    }

    #[test]
    fn a_handshake_authenticates_or_says_why_not() {
        let auth = AuthFile::parse(
            "cluster_secret = \"a cluster secret of length\"\n\
             [[user]]\nname = \"alice\"\npassword = \"s3cret\"\nrole = \"admin\"\n",
            &SystemRandom::new(),
        )
        .unwrap();
        let session = run(&auth, &Credentials::new("alice", "s3cret")).unwrap();
        assert_eq!(session.principal().unwrap().name, "alice");
        let cluster = run(&auth, &Credentials::cluster("a cluster secret of length")).unwrap();
        assert!(cluster.check_cluster().is_ok());
        let Err(HandshakeError::Refused { code, message }) =
            run(&auth, &Credentials::new("alice", "nope"))
        else {
            panic!("a wrong password passed")
        };
        assert_eq!(code, ErrorCode::Unauthenticated);
        assert!(message.contains("wrong user name or password"), "{message}");
        assert!(!format!("{:?}", Credentials::new("a", "hidden")).contains("hidden"));
    }
}
