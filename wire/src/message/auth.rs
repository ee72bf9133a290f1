//! The authentication protocol: a SCRAM exchange (RFC 5802) in two
//! round trips, before any other request on a connection to a server
//! started with an auth file. Both ports take it
//! (`port::BrokerPortRequest`, `port::ControlPortRequest`); the server
//! answers each step with `Response::Authenticated`, or with an
//! `Unauthenticated` error after which the connection is refused
//! everything (docs/wire-format.md, "Authentication").

use crate::codec::{Reader, Writer};
use crate::error::DecodeError;
use crate::frame::FrameType;

/// One step of a client's authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthRequest {
    /// `mechanism` is `SCRAM-SHA-256` or `SCRAM-SHA-512`, the same in
    /// both steps; `message` is the client's first SCRAM message, then
    /// its final one.
    Authenticate { mechanism: String, message: String },
}

frame_types!(AuthRequest as "request" {
    Authenticate => AuthenticateRequest,
});

impl AuthRequest {
    fn write(&self, w: &mut Writer<'_>) {
        match self {
            AuthRequest::Authenticate { mechanism, message } => {
                w.string(mechanism);
                w.string(message);
            }
        }
    }

    fn read(frame_type: FrameType, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(match frame_type {
            FrameType::AuthenticateRequest => AuthRequest::Authenticate {
                mechanism: r.string()?,
                message: r.string()?,
            },
            frame_type => return Err(DecodeError::Foreign { frame_type }),
        })
    }
}
