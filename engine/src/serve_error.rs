//! The error a request gets: a code for the client's logic and a message
//! for its user. Sent to that client only; the broker carries on.

use std::sync::Arc;

use wire::message::Successors;
use wire::ErrorCode;

use crate::error::EngineError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServeError {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
    /// For a `SegmentSealed` refusal, where the segment's range went, if
    /// this broker knows (the answer is then a `Response::Sealed`).
    pub(crate) successors: Option<Arc<Successors>>,
}

impl ServeError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> ServeError {
        ServeError {
            code,
            message: message.into(),
            successors: None,
        }
    }

    /// A refused write to sealed segment `segment`, naming its successors
    /// when they are known.
    pub(crate) fn sealed(segment: u32, successors: Option<Arc<Successors>>) -> ServeError {
        ServeError {
            code: ErrorCode::SegmentSealed,
            message: format!("segment {segment} is sealed"),
            successors,
        }
    }

    /// The answer to a request an engine failure stopped: `NotOwner` for
    /// a segment fenced off (the client looks for the layout again and
    /// resends; nothing of it was stored), else `Storage`.
    pub(crate) fn storage(e: &EngineError) -> ServeError {
        let code = match e {
            EngineError::Fenced { .. } => ErrorCode::NotOwner,
            _ => ErrorCode::Storage,
        };
        ServeError::new(code, e.to_string())
    }

    pub(crate) fn internal() -> ServeError {
        ServeError::new(ErrorCode::Internal, "internal error")
    }
}

impl From<&wire::DecodeError> for ServeError {
    fn from(e: &wire::DecodeError) -> ServeError {
        ServeError::new(ErrorCode::from(e), e.to_string())
    }
}

impl From<control::ControlError> for ServeError {
    fn from(e: control::ControlError) -> ServeError {
        use control::ControlError as C;
        let code = match &e {
            C::InvalidTopicName(_) => ErrorCode::InvalidTopicName,
            C::TopicExists(_) => ErrorCode::TopicExists,
            C::TopicNotFound(_) => ErrorCode::TopicNotFound,
            C::InvalidSegmentCount { .. } => ErrorCode::InvalidArgument,
            C::TooManyTopics { .. } => ErrorCode::Busy,
            _ => ErrorCode::Storage,
        };
        ServeError::new(code, e.to_string())
    }
}
