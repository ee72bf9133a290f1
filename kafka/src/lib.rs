//! kelp's Kafka protocol, sans-IO: the request and response messages of the
//! APIs the Kafka gateway speaks, their headers and framing, and record
//! batches (message format v2) with their compression codecs.
//!
//! This crate is sans-IO: it does no I/O, spawns nothing, reads no clock
//! and depends on no runtime. Every decoder takes untrusted bytes and
//! returns an error instead of panicking, and never allocates more than the
//! input could describe. Encoders write the big-endian fields Kafka
//! defines; `docs/kafka.md` lists the APIs, their versions and the record
//! batch layout byte by byte.
//!
//! Broker side: [`Request::decode`] a frame, build a [`ResponseBody`], and
//! [`encode_response_frame`] it at the request's version. The opposite
//! directions (request encode, response decode) exist too, for tests and
//! tools.

pub mod api;
pub mod api_key;
pub mod compression;
pub mod decoder;
pub mod encoder;
pub mod error;
pub mod error_code;
pub mod group;
pub mod header;
pub mod idempotence;
pub mod message;
pub mod record_batch;
pub mod request;

pub use api_key::{ApiKey, ApiVersionRange, SUPPORTED_APIS};
pub use compression::Compression;
pub use decoder::{Decoder, Uuid};
pub use encoder::Encoder;
pub use error::{DecodeError, EncodeError};
pub use header::{RequestHeader, ResponseHeader};
pub use message::Message;
pub use record_batch::{
    encode_record_batch, Record, RecordBatch, RecordBatchHeader, RecordBatches, RecordHeader,
    RecordHeaders,
};
pub use request::{
    decode_response, encode_response_frame, frame_size, Request, RequestBody, ResponseBody,
};
