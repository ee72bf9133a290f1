//! kelp's wire formats: frames, request and response messages, record
//! batches, chunk files, the key hash, and the limits that bound them all.
//!
//! This crate is sans-IO: it does no I/O, spawns nothing, reads no clock and
//! depends on no runtime. Every decoder takes untrusted bytes and returns an
//! error instead of panicking; every encoder writes explicit little-endian
//! fields at the offsets documented in `docs/wire-format.md` and
//! `docs/chunk-format.md`, and named as constants in the modules below.

pub mod batch;
pub mod checksum;
pub mod chunk;
mod codec;
pub mod error;
pub mod frame;
pub mod frame_decoder;
pub mod key_hash;
pub mod limits;
pub mod message;
pub mod payload_ref;
pub mod producer_id;

pub use batch::{BatchBuilder, BatchHead, BatchView, Record, RecordHeader};
pub use chunk::{ChunkHeader, ChunkIndexEntry, ChunkView};
pub use error::DecodeError;
pub use frame::{FrameHeader, FrameType};
pub use frame_decoder::{Frame, FrameDecoder};
pub use key_hash::key_hash;
pub use message::{
    AckMode, AdminRequest, AuthRequest, BrokerPortRequest, ControlPortRequest, DataRequest,
    ErrorCode, FetchChecks, FetchFrom, FetchRequest, LayoutCommand, MembershipRequest, Response,
};
pub use payload_ref::{PayloadId, PayloadRef};
