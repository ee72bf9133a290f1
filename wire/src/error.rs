//! The one error every decoder in this crate returns.

use crate::frame::FrameType;

/// Why a frame, message, batch or chunk was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes than the format needs.
    #[error("{what} truncated: need {need} bytes, have {have}")]
    Truncated {
        what: &'static str,
        need: u64,
        have: u64,
    },
    /// The magic bytes are not kelp's.
    #[error("{what}: bad magic (not a kelp {what})")]
    BadMagic { what: &'static str },
    /// A version this build does not speak.
    #[error("{what}: unsupported version {version}")]
    UnsupportedVersion { what: &'static str, version: u16 },
    /// A length over its limit.
    #[error("{what} too large: {len} bytes, limit {max}")]
    TooLarge {
        what: &'static str,
        len: u64,
        max: u64,
    },
    /// A checksum that does not match the bytes.
    #[error("{what}: checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        what: &'static str,
        stored: u32,
        computed: u32,
    },
    /// A well-formed frame whose type belongs to another protocol than the
    /// decoder's: a control-plane message on a broker port, a data message
    /// on the control port, a response where a request belongs.
    #[error("frame type {frame_type:?} is not part of this port's protocol")]
    Foreign { frame_type: FrameType },
    /// A field whose value breaks the format.
    #[error("{what}: {reason}")]
    Invalid {
        what: &'static str,
        reason: &'static str,
    },
}
