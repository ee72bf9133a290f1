//! [`BrokerLink`]: the control process's blocking wire client for the
//! commands it sends brokers (`ApplyLayout`, `DropTopic`), each answered
//! `Done`.
//!
//! One TCP connection per command, to the broker's shard 0: commands are
//! rare (a layout change, a resync), and a fresh connection never carries a
//! half-read answer of an earlier command that timed out. Both the connect
//! and the wait for the answer are bounded.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use wire::{ErrorCode, LayoutCommand, Response};

use crate::frame_stream::{read_frame, FrameReadError};

/// How long connecting to a broker may take.
pub const BROKER_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// How long a broker may take to answer a command (a seal flushes the
/// segment's buffers to the filer first).
pub const BROKER_ANSWER_TIMEOUT_MS: u64 = 60_000;

/// The request id the link puts on its (single) request per connection.
const COMMAND_REQUEST_ID: u32 = 1;

/// Why a command did not reach a broker or was not done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The address does not resolve to a socket address.
    #[error("broker address {address}: {reason}")]
    Address {
        /// The address.
        address: String,
        /// Why.
        reason: String,
    },
    /// Connecting, writing or reading failed or timed out.
    #[error("broker {address}: {what}: {source}")]
    Io {
        /// The address.
        address: String,
        /// What was being done.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The answer was not a valid frame or message.
    #[error("broker {address}: bad answer: {reason}")]
    BadAnswer {
        /// The address.
        address: String,
        /// What was wrong.
        reason: String,
    },
    /// The broker answered with an error.
    #[error("broker {address} refused: {code:?}: {message}")]
    Refused {
        /// The address.
        address: String,
        /// The broker's error code.
        code: ErrorCode,
        /// The broker's message.
        message: String,
    },
}

/// Sends commands to brokers (see the module docs).
#[derive(Debug, Clone)]
pub struct BrokerLink {
    connect_timeout: Duration,
    answer_timeout: Duration,
    /// What the control plane authenticates to brokers with (the
    /// cluster's credentials), on brokers started with an auth file.
    credentials: Option<std::sync::Arc<auth::Credentials>>,
    /// TLS to brokers whose TCP ports speak it (`--tcp-tls`).
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

/// The name a TLS link asks for (its configuration decides what it trusts).
const TLS_SERVER_NAME: &str = "localhost";

impl Default for BrokerLink {
    fn default() -> BrokerLink {
        BrokerLink {
            connect_timeout: Duration::from_millis(BROKER_CONNECT_TIMEOUT_MS),
            answer_timeout: Duration::from_millis(BROKER_ANSWER_TIMEOUT_MS),
            credentials: None,
            tls: None,
        }
    }
}

impl BrokerLink {
    /// A link with these timeouts (each at least 1 ms).
    pub fn with_timeouts(connect_timeout: Duration, answer_timeout: Duration) -> BrokerLink {
        let floor = Duration::from_millis(1);
        BrokerLink {
            connect_timeout: connect_timeout.max(floor),
            answer_timeout: answer_timeout.max(floor),
            credentials: None,
            tls: None,
        }
    }

    /// This link, authenticating every connection with `credentials`.
    pub fn with_credentials(mut self, credentials: auth::Credentials) -> BrokerLink {
        self.credentials = Some(std::sync::Arc::new(credentials));
        self
    }

    /// This link, speaking TLS with `config` on every connection.
    pub fn with_tls(mut self, config: std::sync::Arc<rustls::ClientConfig>) -> BrokerLink {
        self.tls = Some(config);
        self
    }

    /// The longest one [`command`](Self::command) can take: the connect,
    /// then the write and the read, each within the answer timeout.
    pub fn command_time_max(&self) -> Duration {
        self.connect_timeout + self.answer_timeout * 2
    }

    /// Send `request` to the broker at `address` (`host:port`) and wait for
    /// its `Done`.
    pub fn command(&self, address: &str, request: &LayoutCommand<'_>) -> Result<(), LinkError> {
        let socket = resolve(address)?;
        let io = |what: &'static str| {
            move |source| LinkError::Io {
                address: address.to_owned(),
                what,
                source,
            }
        };
        let mut stream =
            TcpStream::connect_timeout(&socket, self.connect_timeout).map_err(io("connect"))?;
        stream.set_nodelay(true).map_err(io("set nodelay"))?;
        stream
            .set_read_timeout(Some(self.answer_timeout))
            .map_err(io("set read timeout"))?;
        stream
            .set_write_timeout(Some(self.answer_timeout))
            .map_err(io("set write timeout"))?;
        match &self.tls {
            None => self.exchange(address, &mut stream, request),
            Some(config) => {
                let name =
                    rustls::pki_types::ServerName::try_from(TLS_SERVER_NAME).map_err(|e| {
                        LinkError::BadAnswer {
                            address: address.to_owned(),
                            reason: format!("TLS server name: {e}"),
                        }
                    })?;
                let session = rustls::ClientConnection::new(config.clone(), name).map_err(|e| {
                    LinkError::BadAnswer {
                        address: address.to_owned(),
                        reason: format!("TLS: {e}"),
                    }
                })?;
                let mut tls = rustls::StreamOwned::new(session, stream);
                self.exchange(address, &mut tls, request)
            }
        }
    }

    /// Authenticate (with credentials), send the command and read its
    /// answer, over `stream`.
    fn exchange(
        &self,
        address: &str,
        stream: &mut (impl std::io::Read + std::io::Write),
        request: &LayoutCommand<'_>,
    ) -> Result<(), LinkError> {
        let io = |what: &'static str| {
            move |source| LinkError::Io {
                address: address.to_owned(),
                what,
                source,
            }
        };
        if let Some(credentials) = &self.credentials {
            crate::frame_stream::authenticate(stream, credentials).map_err(|e| {
                LinkError::BadAnswer {
                    address: address.to_owned(),
                    reason: e.to_string(),
                }
            })?;
        }
        let mut frame = Vec::new();
        request.encode(COMMAND_REQUEST_ID, &mut frame);
        std::io::Write::write_all(stream, &frame).map_err(io("send the command"))?;
        std::io::Write::flush(stream).map_err(io("send the command"))?;

        let bad = |reason: String| LinkError::BadAnswer {
            address: address.to_owned(),
            reason,
        };
        let mut payload = Vec::new();
        let header = match read_frame(stream, &mut payload) {
            Ok(Some(header)) => header,
            Ok(None) => return Err(bad("closed the connection without answering".to_owned())),
            Err(FrameReadError::Io { what, source }) => {
                return Err(LinkError::Io {
                    address: address.to_owned(),
                    what,
                    source,
                })
            }
            Err(e) => return Err(bad(e.to_string())),
        };
        if header.request_id != COMMAND_REQUEST_ID {
            return Err(bad(format!(
                "answer to request {} instead of {COMMAND_REQUEST_ID}",
                header.request_id
            )));
        }
        match Response::decode(header.frame_type, &payload) {
            Ok(Response::Done) => Ok(()),
            Ok(Response::Error { code, message }) => Err(LinkError::Refused {
                address: address.to_owned(),
                code,
                message,
            }),
            Ok(other) => Err(bad(format!("{:?} instead of Done", other.frame_type()))),
            Err(e) => Err(bad(e.to_string())),
        }
    }
}

fn resolve(address: &str) -> Result<SocketAddr, LinkError> {
    let error = |reason: String| LinkError::Address {
        address: address.to_owned(),
        reason,
    };
    address
        .to_socket_addrs()
        .map_err(|e| error(e.to_string()))?
        .next()
        .ok_or_else(|| error("resolves to no address".to_owned()))
}
