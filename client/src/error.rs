//! The one error every client operation returns.

use std::sync::Arc;

use wire::frame::FrameType;
use wire::message::Successors;
use wire::{DecodeError, ErrorCode};

/// Why a client operation failed.
///
/// It is `Clone` so one connection failure can be handed to every request
/// that was waiting on that connection.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The broker (or one of its shards) could not be reached.
    #[error("cannot reach broker at {addr}: {reason}")]
    Connect {
        /// The address that was dialed.
        addr: String,
        /// What went wrong, from the OS or the QUIC handshake.
        reason: String,
    },
    /// The broker refused the request.
    #[error("broker refused the request: {message} ({code:?})")]
    Broker {
        /// The broker's error code.
        code: ErrorCode,
        /// The broker's explanation.
        message: String,
    },
    /// The broker refused a write to a sealed segment and named where its
    /// range went ([`ClientError::broker_code`] is `SegmentSealed`): the
    /// producer routes there at once, asking no control plane.
    #[error("broker refused the request: {message} (SegmentSealed)")]
    Sealed {
        /// The broker's explanation.
        message: String,
        /// The open segments that took over the range, with their owners.
        successors: Arc<Successors>,
    },
    /// Reading from or writing to a connection failed.
    #[error("{operation} failed: {source}")]
    Io {
        /// What the client was doing.
        operation: &'static str,
        /// The OS error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The broker sent bytes that are not a valid frame, message or batch.
    #[error("invalid data from broker: {0}")]
    Decode(#[from] DecodeError),
    /// The broker answered with a message of the wrong kind.
    #[error("unexpected response from broker: wanted {expected}, got {got:?}")]
    UnexpectedResponse {
        /// The response kind the request calls for.
        expected: &'static str,
        /// The frame type that came back.
        got: FrameType,
    },
    /// No answer within the configured time.
    #[error("{operation} timed out after {after_ms} ms")]
    Timeout {
        /// What the client was waiting for.
        operation: &'static str,
        /// The limit that passed.
        after_ms: u64,
    },
    /// The connection closed before the answer came.
    #[error("connection to broker closed")]
    Closed,
    /// The topic layout cannot serve the request (no open segment for a
    /// key, a shard index the broker did not list, no segments at all).
    #[error("topic layout: {0}")]
    Layout(String),
    /// A record the client refuses to send (too large, too many headers).
    #[error("invalid record: {0}")]
    InvalidRecord(DecodeError),
    /// Client configuration that cannot be used (an unreadable CA file).
    #[error("client configuration: {0}")]
    Config(String),
    /// Offsets of a segment skipped because their records are damaged on
    /// the broker's disk ([`crate::SubscribeOptions::skip_corrupt`]). Only
    /// those offsets are affected; the subscriber goes on.
    #[error(
        "skipped offsets {from}..{to} of segment {segment}: their records are damaged on the \
         broker's disk"
    )]
    Skipped {
        segment: u32,
        /// The first offset skipped.
        from: u64,
        /// The next offset read.
        to: u64,
    },
    /// Records of a segment this subscriber read from its owner's buffers
    /// were never stored: the owner died (or was declared dead) before
    /// storing them, and the segment was sealed at `end`, below `read_to`.
    /// Offsets `end..read_to` are not in the topic; the subscriber goes on
    /// with the segment's successors. Only a segment with one replica and
    /// records read before they were stored can end so.
    #[error(
        "segment {segment} was sealed at offset {end} after its owner died: offsets          {end}..{read_to} were read from the owner's buffers but never stored"
    )]
    Truncated {
        segment: u32,
        /// The seal point: one past the last stored offset.
        end: u64,
        /// One past the last offset read.
        read_to: u64,
    },
    /// The payload a record refers to could not be read: it is missing or
    /// altered. Only that record is affected; the subscriber goes on.
    #[error("payload of record {offset} in segment {segment}: {error}")]
    Payload {
        segment: u32,
        offset: u64,
        /// Why (`PayloadNotFound` or `PayloadMismatch` from
        /// [`ClientError::broker_code`] of this, or a transport error).
        error: Box<ClientError>,
    },
}

impl ClientError {
    pub(crate) fn io(operation: &'static str, source: std::io::Error) -> ClientError {
        ClientError::Io {
            operation,
            source: Arc::new(source),
        }
    }

    /// The broker's error code, if the broker refused the request.
    pub fn broker_code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            ClientError::Sealed { .. } => Some(ErrorCode::SegmentSealed),
            ClientError::Payload { error, .. } => error.broker_code(),
            _ => None,
        }
    }
}
