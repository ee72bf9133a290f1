//! One connection's standing with a server: a pure state machine from
//! unauthenticated, through the SCRAM exchange, to a principal (or to
//! failed, after which the connection is refused everything). A server
//! without an auth file keeps every connection open.

use std::sync::Arc;

use crate::auth_file::AuthFile;
use crate::permission::{Operation, Principal};
use crate::scram::{nonce, ScramError, ScramHash, ScramServer, MESSAGE_BYTES_MAX};

/// Random bytes in a server nonce.
pub const NONCE_RANDOM_BYTES: usize = 18;

/// Where a connection stands.
#[derive(Debug)]
pub enum Session {
    /// The server has no auth file: every request is allowed.
    Open,
    /// No exchange yet.
    Anonymous,
    /// The server's first message was sent; the client's proof is next.
    Exchanging(ScramServer),
    Authenticated(Arc<Principal>),
    /// An exchange failed: every later request is refused.
    Failed,
}

/// What an authenticate step answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The server's first message: the client's proof is next.
    Challenge(Vec<u8>),
    /// The server's final message: the connection is authenticated.
    Done(Vec<u8>),
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error(
        "authentication required: this server was started with --auth; give a user and \
         password (KELP_USER and KELP_PASSWORD, or --user and --password)"
    )]
    Unauthenticated,
    #[error("authentication failed on this connection earlier: connect again")]
    FailedBefore,
    #[error("authentication failed: {0}")]
    Failed(ScramError),
    #[error("authentication failed: this server has no --auth file, so it takes no credentials; connect without a user")]
    NotEnabled,
    #[error("authentication failed: unknown mechanism {0:?} (SCRAM-SHA-256 or SCRAM-SHA-512)")]
    Mechanism(String),
    #[error("the connection is already authenticated")]
    Again,
    #[error("{principal:?} may not {operation} topic {topic:?}")]
    Forbidden {
        principal: String,
        operation: Operation,
        topic: String,
    },
    #[error("{principal:?} may not send the cluster's internal requests (only the cluster's processes, with the cluster secret)")]
    NotCluster { principal: String },
}

impl Denied {
    /// Whether the refusal is about who the client is (rather than what
    /// it may do): the connection is of no further use.
    pub fn is_authentication(&self) -> bool {
        !matches!(self, Denied::Forbidden { .. } | Denied::NotCluster { .. })
    }

    /// The reason a refusal counts under in metrics.
    pub fn reason(&self) -> DenialReason {
        match self {
            Denied::Unauthenticated | Denied::FailedBefore => DenialReason::Unauthenticated,
            Denied::Failed(_) | Denied::NotEnabled | Denied::Mechanism(_) | Denied::Again => {
                DenialReason::AuthenticationFailed
            }
            Denied::Forbidden { .. } | Denied::NotCluster { .. } => DenialReason::Forbidden,
        }
    }
}

/// Why a request was refused, as metrics count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenialReason {
    /// The connection had not authenticated (or failed to).
    Unauthenticated,
    /// An authentication step failed.
    AuthenticationFailed,
    /// The principal may not do it.
    Forbidden,
}

impl DenialReason {
    pub const ALL: [DenialReason; 3] = [
        DenialReason::Unauthenticated,
        DenialReason::AuthenticationFailed,
        DenialReason::Forbidden,
    ];

    /// Its `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            DenialReason::Unauthenticated => "unauthenticated",
            DenialReason::AuthenticationFailed => "authentication_failed",
            DenialReason::Forbidden => "forbidden",
        }
    }
}

/// A fresh server nonce.
pub fn server_nonce() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; NONCE_RANDOM_BYTES];
    // SystemRandom reads getrandom(2); a failure would leave zeros, which
    // only weakens this one nonce's freshness, never the proof.
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    nonce(&bytes)
}

impl Session {
    /// A connection's start on a server with `auth` (or without).
    pub fn new(auth: Option<&AuthFile>) -> Session {
        match auth {
            Some(_) => Session::Anonymous,
            None => Session::Open,
        }
    }

    /// Take one authenticate message; `server_nonce` is called once, for
    /// the first.
    pub fn authenticate(
        &mut self,
        auth: Option<&AuthFile>,
        mechanism: &str,
        message: &[u8],
        server_nonce: impl FnOnce() -> String,
    ) -> Result<Step, Denied> {
        let (auth, taken) = self.take_for_a_step(auth)?;
        match taken {
            Session::Anonymous => {
                let hash = ScramHash::from_mechanism(mechanism)
                    .ok_or_else(|| Denied::Mechanism(mechanism.to_owned()))?;
                let mut server = ScramServer::new(hash, server_nonce());
                let first = server
                    .server_first(message, |user| auth.lookup(hash, user))
                    .map_err(Denied::Failed)?;
                *self = Session::Exchanging(server);
                Ok(Step::Challenge(first))
            }
            Session::Exchanging(mut server) => {
                if ScramHash::from_mechanism(mechanism) != Some(server.hash()) {
                    return Err(Denied::Mechanism(mechanism.to_owned()));
                }
                let success = server.server_final(message).map_err(Denied::Failed)?;
                let principal = auth
                    .principal(&success.user)
                    .ok_or(Denied::Failed(ScramError::WrongCredentials))?;
                *self = Session::Authenticated(principal);
                Ok(Step::Done(success.server_final))
            }
            _ => Err(Denied::Again),
        }
    }

    /// The standing an authentication step starts from, taken out (the
    /// session is left failed until the step puts back what follows), with
    /// the file it checks against; a session that takes no step is
    /// refused here and left as it was.
    fn take_for_a_step<'a>(
        &mut self,
        auth: Option<&'a AuthFile>,
    ) -> Result<(&'a AuthFile, Session), Denied> {
        let Some(auth) = auth else {
            return Err(Denied::NotEnabled);
        };
        match std::mem::replace(self, Session::Failed) {
            Session::Open => {
                *self = Session::Open;
                Err(Denied::NotEnabled)
            }
            Session::Failed => Err(Denied::FailedBefore),
            Session::Authenticated(p) => {
                *self = Session::Authenticated(p);
                Err(Denied::Again)
            }
            taken => Ok((auth, taken)),
        }
    }

    /// Take a SASL PLAIN message (RFC 4616: `authzid NUL authcid NUL
    /// passwd`), the whole exchange in one step. An authorization identity,
    /// when given, must be the user's own: nobody acts for another. The
    /// password is checked against the user's SCRAM credential
    /// ([`AuthFile::check_password`]).
    pub fn authenticate_plain(
        &mut self,
        auth: Option<&AuthFile>,
        message: &[u8],
    ) -> Result<Step, Denied> {
        let (auth, taken) = self.take_for_a_step(auth)?;
        match taken {
            Session::Exchanging(_) => Err(Denied::Mechanism("PLAIN".to_owned())),
            Session::Anonymous => {
                let (user, password) = plain_message(message).map_err(Denied::Failed)?;
                let principal = auth
                    .check_password(user, password)
                    .ok_or(Denied::Failed(ScramError::WrongCredentials))?;
                *self = Session::Authenticated(principal);
                Ok(Step::Done(Vec::new()))
            }
            _ => Err(Denied::Again),
        }
    }

    /// The authenticated principal, if any.
    pub fn principal(&self) -> Option<&Principal> {
        match self {
            Session::Authenticated(p) => Some(p),
            _ => None,
        }
    }

    /// Whether the connection may send requests at all.
    pub fn check_authenticated(&self) -> Result<(), Denied> {
        match self {
            Session::Open | Session::Authenticated(_) => Ok(()),
            Session::Anonymous | Session::Exchanging(_) => Err(Denied::Unauthenticated),
            Session::Failed => Err(Denied::FailedBefore),
        }
    }

    /// Whether the connection may do `operation` to `topic`.
    pub fn check(&self, operation: Operation, topic: &str) -> Result<(), Denied> {
        self.check_authenticated()?;
        match self {
            Session::Authenticated(p) if !p.may(operation, topic) => Err(Denied::Forbidden {
                principal: p.name.clone(),
                operation,
                topic: topic.to_owned(),
            }),
            _ => Ok(()),
        }
    }

    /// Whether the connection may send the cluster's internal requests.
    pub fn check_cluster(&self) -> Result<(), Denied> {
        self.check_authenticated()?;
        match self {
            Session::Authenticated(p) if !p.is_cluster() => Err(Denied::NotCluster {
                principal: p.name.clone(),
            }),
            _ => Ok(()),
        }
    }
}

/// The user and password of a SASL PLAIN message.
fn plain_message(message: &[u8]) -> Result<(&str, &str), ScramError> {
    if message.len() > MESSAGE_BYTES_MAX {
        return Err(ScramError::Malformed("longer than MESSAGE_BYTES_MAX"));
    }
    let text = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
    let mut parts = text.split('\0');
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ScramError::Malformed(
            "a PLAIN message is authzid, user and password, NUL between",
        ));
    };
    if user.is_empty() {
        return Err(ScramError::Malformed("no user name"));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(ScramError::Malformed(
            "the authorization identity is not the user's own",
        ));
    }
    Ok((user, password))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::scram::ScramClient;
    use ring::rand::SystemRandom;

    fn file() -> AuthFile {
        AuthFile::parse(
            "cluster_secret = \"0123456789abcdef\"\n\
             [[user]]\nname = \"bob\"\npassword = \"pw\"\n\
             [[user.grant]]\ntopics = \"orders/*\"\nallow = [\"produce\"]\n",
            &SystemRandom::new(),
        )
        .unwrap()
    }

    fn log_in(auth: &AuthFile, user: &str, password: &str) -> (Session, Result<(), Denied>) {
        let mut session = Session::new(Some(auth));
        let mut client = ScramClient::new(ScramHash::Sha256, user, password, nonce(b"c"));
        let result = (|| {
            let Step::Challenge(first) = session.authenticate(
                Some(auth),
                "SCRAM-SHA-256",
                &client.client_first(),
                server_nonce,
            )?
            else {
                panic!("no challenge")
            };
            let last = client.client_final(&first).map_err(Denied::Failed)?;
            let Step::Done(done) =
                session.authenticate(Some(auth), "SCRAM-SHA-256", &last, server_nonce)?
            else {
                panic!("not done")
            };
            client.verify(&done).map_err(Denied::Failed)
        })();
        (session, result)
    }

    #[test]
    fn a_session_moves_from_anonymous_to_its_principal_permissions() {
        let auth = file();
        let fresh = Session::new(Some(&auth));
        assert_eq!(fresh.check_authenticated(), Err(Denied::Unauthenticated));
        assert!(fresh.check(Operation::Produce, "orders/x").is_err());

        let (bob, result) = log_in(&auth, "bob", "pw");
        result.unwrap();
        assert!(bob.check(Operation::Produce, "orders/x").is_ok());
        assert!(matches!(
            bob.check(Operation::Consume, "orders/x"),
            Err(Denied::Forbidden { .. })
        ));
        assert!(matches!(
            bob.check_cluster(),
            Err(Denied::NotCluster { .. })
        ));

        let (cluster, result) = log_in(&auth, "@cluster", "0123456789abcdef");
        result.unwrap();
        assert!(cluster.check_cluster().is_ok());

        let (mut failed, result) = log_in(&auth, "bob", "wrong");
        assert_eq!(result, Err(Denied::Failed(ScramError::WrongCredentials)));
        assert_eq!(failed.check_authenticated(), Err(Denied::FailedBefore));
        assert_eq!(
            failed.authenticate(Some(&auth), "SCRAM-SHA-256", b"n,,n=bob,r=x", server_nonce),
            Err(Denied::FailedBefore)
        );
    }

    #[test]
    fn an_open_server_allows_everything_and_takes_no_credentials() {
        let mut open = Session::new(None);
        assert!(open.check(Operation::Delete, "a/b").is_ok());
        assert!(open.check_cluster().is_ok());
        assert_eq!(
            open.authenticate(None, "SCRAM-SHA-256", b"n,,n=a,r=b", server_nonce),
            Err(Denied::NotEnabled)
        );
    }

    #[test]
    fn plain_takes_the_password_once_and_only_for_the_users_own_identity() {
        let auth = file();
        let mut bob = Session::new(Some(&auth));
        assert_eq!(
            bob.authenticate_plain(Some(&auth), b"\0bob\0pw"),
            Ok(Step::Done(Vec::new()))
        );
        assert!(bob.check(Operation::Produce, "orders/x").is_ok());
        assert_eq!(
            bob.authenticate_plain(Some(&auth), b"\0bob\0pw"),
            Err(Denied::Again)
        );

        let mut as_self = Session::new(Some(&auth));
        assert!(as_self
            .authenticate_plain(Some(&auth), b"bob\0bob\0pw")
            .is_ok());

        for (message, want) in [
            (&b"\0bob\0wrong"[..], ScramError::WrongCredentials),
            (b"\0nobody\0pw", ScramError::WrongCredentials),
            (b"\0@cluster\0pw", ScramError::WrongCredentials),
            (
                b"alice\0bob\0pw",
                ScramError::Malformed("the authorization identity is not the user's own"),
            ),
            (
                b"bob\0pw",
                ScramError::Malformed("a PLAIN message is authzid, user and password, NUL between"),
            ),
            (b"\0\0pw", ScramError::Malformed("no user name")),
        ] {
            let mut session = Session::new(Some(&auth));
            assert_eq!(
                session.authenticate_plain(Some(&auth), message),
                Err(Denied::Failed(want)),
                "{message:?}"
            );
            assert_eq!(session.check_authenticated(), Err(Denied::FailedBefore));
        }
        let mut open = Session::new(None);
        assert_eq!(
            open.authenticate_plain(None, b"\0bob\0pw"),
            Err(Denied::NotEnabled)
        );
    }
}
