//! Named limits of the wire formats. Every decoder enforces them; the broker
//! and client may configure lower values, never higher ones.

/// Largest frame payload (bytes after the 16-byte frame header).
pub const FRAME_PAYLOAD_BYTES_MAX: u32 = 8 << 20;

/// Largest record batch, header included.
pub const BATCH_BYTES_MAX: u32 = 7 << 20;

/// Largest single record (length field included): key, value and headers.
pub const RECORD_BYTES_MAX: u32 = 6 << 20;

/// Most records in one batch.
pub const BATCH_RECORDS_MAX: u32 = 1 << 20;

/// Most headers on one record.
pub const RECORD_HEADERS_MAX: u32 = 1024;

/// Longest string field in a message (topic names are shorter still).
pub const STRING_BYTES_MAX: u32 = 4096;

/// Most entries in any list field of a message (segments, topics, shards).
pub const LIST_ITEMS_MAX: u32 = 1 << 16;

/// The chunk index holds an entry at most every this many bytes of batches.
pub const CHUNK_INDEX_INTERVAL_BYTES: u32 = 4096;

/// Largest chunk data region (the batches); bounded so positions fit a `u32`.
pub const CHUNK_DATA_BYTES_MAX: u64 = 1 << 31;

const _: () = assert!(BATCH_BYTES_MAX + 4096 <= FRAME_PAYLOAD_BYTES_MAX);
const _: () = assert!(RECORD_BYTES_MAX < BATCH_BYTES_MAX);
const _: () = assert!((BATCH_BYTES_MAX as u64) < CHUNK_DATA_BYTES_MAX);
