//! The errors of the codec's two boundary operations: decoding bytes from a
//! peer and encoding a message for one.

use crate::api_key::ApiKey;

/// Why bytes could not be decoded. Every decoder in this crate returns this
/// instead of panicking; `offset` is counted from the start of the buffer the
/// [`Decoder`](crate::Decoder) was built over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended inside a field.
    #[error("truncated input: {needed} bytes needed at offset {offset}, {remaining} left")]
    Truncated {
        /// Where the field starts.
        offset: usize,
        /// How many bytes the field needs.
        needed: usize,
        /// How many bytes were left.
        remaining: usize,
    },
    /// A varint ran past its maximum length (5 bytes for 32 bits, 10 for 64).
    #[error("varint longer than {max_bytes} bytes at offset {offset}")]
    VarintTooLong {
        /// Where the varint starts.
        offset: usize,
        /// Its maximum encoded length.
        max_bytes: usize,
    },
    /// A length prefix is negative (other than -1 for null) or claims more
    /// bytes or elements than the input has left.
    #[error("invalid length {length} at offset {offset} ({remaining} bytes left)")]
    InvalidLength {
        /// Where the length prefix starts.
        offset: usize,
        /// The decoded length.
        length: i64,
        /// How many bytes were left after the prefix.
        remaining: usize,
    },
    /// A null where the field is not nullable in this version.
    #[error("null value at offset {offset} in a field that is not nullable")]
    UnexpectedNull {
        /// Where the length prefix starts.
        offset: usize,
    },
    /// A string is not UTF-8.
    #[error("string at offset {offset} is not UTF-8")]
    InvalidUtf8 {
        /// Where the string bytes start.
        offset: usize,
    },
    /// A message was decoded but bytes were left after it.
    #[error("{count} trailing bytes after the message at offset {offset}")]
    TrailingBytes {
        /// Where the trailing bytes start.
        offset: usize,
        /// How many there are.
        count: usize,
    },
    /// A request names an API key this codec does not know.
    #[error("unknown api key {api_key} (correlation id {correlation_id})")]
    UnknownApiKey {
        /// The key in the request header.
        api_key: i16,
        /// The request's correlation id, to answer it.
        correlation_id: i32,
    },
    /// A request asks for a version of an API outside the supported range.
    #[error("unsupported version {version} of {api_key:?} (correlation id {correlation_id})")]
    UnsupportedVersion {
        /// The API.
        api_key: ApiKey,
        /// The requested version.
        version: i16,
        /// The request's correlation id, to answer it.
        correlation_id: i32,
    },
    /// A frame's size prefix is negative or above the configured maximum.
    #[error("frame of {size} bytes is outside 0..={max_bytes}")]
    FrameSize {
        /// The size in the prefix.
        size: i64,
        /// The limit.
        max_bytes: usize,
    },
    /// A record batch has a magic byte other than 2. Legacy message sets
    /// (magic 0 and 1) are not supported.
    #[error("record batch magic {magic} is not supported (only magic 2; legacy message sets v0/v1 are rejected)")]
    UnsupportedMagic {
        /// The magic byte found.
        magic: i8,
    },
    /// A record batch's CRC-32C does not match its contents.
    #[error("record batch checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch {
        /// The CRC in the batch header.
        stored: u32,
        /// The CRC of the bytes.
        computed: u32,
    },
    /// A record batch's header is inconsistent with its contents.
    #[error("invalid record batch: {reason}")]
    InvalidBatch {
        /// What is wrong.
        reason: &'static str,
    },
    /// The compression codec id in a batch's attributes is unknown.
    #[error("unknown compression codec {codec}")]
    UnknownCompression {
        /// The three low bits of the attributes.
        codec: u8,
    },
    /// Decompressing a batch failed.
    #[error("{codec} decompression failed: {reason}")]
    Decompression {
        /// The codec's name.
        codec: &'static str,
        /// The codec's message.
        reason: String,
    },
    /// A batch decompresses to more than the allowed size.
    #[error("batch decompresses to more than {max_bytes} bytes")]
    DecompressedTooLarge {
        /// The limit.
        max_bytes: usize,
    },
}

/// Why a message could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A string, byte string or array is longer than its length prefix can
    /// say (32767 bytes for a non-compact string, 2^31-1 otherwise).
    #[error("value of length {length} exceeds the maximum {max} of its length prefix")]
    TooLong {
        /// The value's length.
        length: usize,
        /// The largest length the prefix can hold.
        max: usize,
    },
    /// The records would make a record batch its decoder refuses.
    #[error("invalid record batch: {reason}")]
    InvalidBatch {
        /// What is wrong.
        reason: &'static str,
    },
    /// Compressing a batch failed.
    #[error("{codec} compression failed: {reason}")]
    Compression {
        /// The codec's name.
        codec: &'static str,
        /// The codec's message.
        reason: String,
    },
}
