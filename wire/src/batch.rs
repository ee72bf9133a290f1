//! Record batches: the unit a producer sends, a broker appends and a chunk
//! stores, byte for byte the same in all three places.
//!
//! ```text
//! batch header (56 bytes)
//! offset size field
//!      0    8 base offset        u64, assigned by the broker (producers send 0)
//!      8    4 batch bytes        u32, the whole batch, header included
//!     12    4 checksum           CRC-32C of bytes 16..batch bytes
//!     16    1 version            1
//!     17    1 attributes         bit 0: some record is a payload reference;
//!                                other bits 0
//!     18    2 reserved           0
//!     20    4 record count       u32, 1..=BATCH_RECORDS_MAX
//!     24    8 first timestamp    i64 ms since the Unix epoch, record 0's
//!     32    8 max timestamp      i64 ms, the largest of the records'
//!     40    8 producer id        u64, 0 when none
//!     48    4 base sequence      u32, the producer's sequence of record 0
//!     52    2 producer epoch     u16, 0 when none
//!     54    2 reserved           0
//!     56    - records
//!
//! record (20 bytes + variable)
//!      0    4 record bytes       u32, this record, this field included
//!      4    4 timestamp delta    i32 ms from the first timestamp
//!      8    4 key bytes          u32
//!     12    4 value bytes        u32
//!     16    2 header count       u16
//!     18    2 attributes         bit 0: the value is a payload reference
//!                                (`payload_ref`); bit 1: the key is null;
//!                                bit 2: the value is null (a Kafka
//!                                tombstone); a null key or value has 0
//!                                bytes, a null value is no reference;
//!                                other bits 0
//!     20    - key, value, then each header: u16 name bytes, name,
//!             u32 value bytes, value
//! ```
//!
//! The base offset sits outside the checksum so the broker can stamp it in
//! place after copying the batch into its buffer. Record `i` has offset
//! `base offset + i`.

use crate::checksum::{self, crc32c};
use crate::codec::{le_i64, le_u16, le_u32, le_u64};
use crate::error::DecodeError;
use crate::limits::{BATCH_BYTES_MAX, BATCH_RECORDS_MAX, RECORD_BYTES_MAX, RECORD_HEADERS_MAX};
use crate::payload_ref::PayloadRef;

/// Bytes of a batch header.
pub const BATCH_HEADER_BYTES: usize = 56;
/// Bytes of a record's fixed part.
pub const RECORD_HEADER_BYTES: usize = 20;
/// The batch version this build writes and reads.
pub const BATCH_VERSION: u8 = 1;
/// Batch attribute: at least one record's value is a payload reference.
pub const BATCH_ATTR_REFERENCES: u8 = 1;
/// Record attribute: the value is a [`PayloadRef`], not the payload.
pub const RECORD_ATTR_REFERENCE: u16 = 1;
/// Record attribute: the key is null, not empty (Kafka keeps the two apart).
pub const RECORD_ATTR_NULL_KEY: u16 = 2;
/// Record attribute: the value is null, not empty (a Kafka tombstone).
pub const RECORD_ATTR_NULL_VALUE: u16 = 4;
/// Every record attribute bit this version knows.
const RECORD_ATTRS_KNOWN: u16 =
    RECORD_ATTR_REFERENCE | RECORD_ATTR_NULL_KEY | RECORD_ATTR_NULL_VALUE;

pub const BASE_OFFSET_OFFSET: usize = 0;
pub const BATCH_BYTES_OFFSET: usize = 8;
pub const CHECKSUM_OFFSET: usize = 12;
/// The checksum covers the batch from here to its end.
pub const CHECKSUMMED_FROM: usize = 16;
pub const VERSION_OFFSET: usize = 16;
const ATTRIBUTES_OFFSET: usize = 17;
pub const RECORD_COUNT_OFFSET: usize = 20;
const FIRST_TIMESTAMP_OFFSET: usize = 24;
const MAX_TIMESTAMP_OFFSET: usize = 32;
const PRODUCER_ID_OFFSET: usize = 40;
const BASE_SEQUENCE_OFFSET: usize = 48;
const PRODUCER_EPOCH_OFFSET: usize = 52;

const _: () = assert!(BATCH_HEADER_BYTES == BASE_SEQUENCE_OFFSET + 8);

/// One header of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader<'a> {
    pub name: &'a [u8],
    pub value: &'a [u8],
}

/// A record as read from a validated batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Offset within the batch: the record's offset is base offset + this.
    pub offset_delta: u32,
    pub timestamp_ms: i64,
    pub key: &'a [u8],
    pub value: &'a [u8],
    attributes: u16,
    header_count: u16,
    header_bytes: &'a [u8],
}

impl<'a> Record<'a> {
    /// The record's headers, in the order the producer gave them.
    pub fn headers(&self) -> impl Iterator<Item = RecordHeader<'a>> {
        let mut rest = self.header_bytes;
        (0..self.header_count).map(move |_| {
            // Validated by `BatchView::validate`: lengths are in bounds.
            let name_len = usize::from(le_u16(rest, 0));
            let name = &rest[2..2 + name_len];
            let value_len = le_u32(rest, 2 + name_len) as usize;
            let value_at = 6 + name_len;
            let value = &rest[value_at..value_at + value_len];
            rest = &rest[value_at + value_len..];
            RecordHeader { name, value }
        })
    }

    /// Whether the key is null (a producer sent none), not empty.
    pub fn key_is_null(&self) -> bool {
        self.attributes & RECORD_ATTR_NULL_KEY != 0
    }

    /// Whether the value is null (a Kafka tombstone), not empty.
    pub fn value_is_null(&self) -> bool {
        self.attributes & RECORD_ATTR_NULL_VALUE != 0
    }

    /// How many headers the record has.
    pub fn header_count(&self) -> usize {
        usize::from(self.header_count)
    }

    /// The payload reference this record's value is, if it is one
    /// (validated with its batch, so a flagged record always decodes).
    pub fn reference(&self) -> Option<PayloadRef> {
        if self.attributes & RECORD_ATTR_REFERENCE == 0 {
            return None;
        }
        PayloadRef::decode(self.value).ok()
    }
}

/// Builds one batch into a reusable buffer: no allocation per record once the
/// buffer has grown to the batch size.
#[derive(Debug)]
pub struct BatchBuilder {
    buf: Vec<u8>,
    records: u32,
    first_timestamp_ms: i64,
    max_timestamp_ms: i64,
    has_references: bool,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchBuilder {
    pub fn new() -> BatchBuilder {
        BatchBuilder::with_capacity(0)
    }

    pub fn with_capacity(bytes: usize) -> BatchBuilder {
        let mut buf = Vec::with_capacity(bytes.max(BATCH_HEADER_BYTES));
        buf.resize(BATCH_HEADER_BYTES, 0);
        BatchBuilder {
            buf,
            records: 0,
            first_timestamp_ms: 0,
            max_timestamp_ms: i64::MIN,
            has_references: false,
        }
    }

    /// Bytes a record with these fields takes in a batch.
    pub fn record_bytes(key: &[u8], value: &[u8], headers: &[RecordHeader<'_>]) -> usize {
        RECORD_HEADER_BYTES
            + key.len()
            + value.len()
            + headers
                .iter()
                .map(|h| 6 + h.name.len() + h.value.len())
                .sum::<usize>()
    }

    /// Records added so far.
    pub fn len(&self) -> u32 {
        self.records
    }

    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Bytes the batch would take if finished now.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Whether a record of `record_bytes` still fits under `batch_bytes_max`.
    pub fn fits(&self, record_bytes: usize, batch_bytes_max: usize) -> bool {
        self.buf.len() + record_bytes <= batch_bytes_max.min(BATCH_BYTES_MAX as usize)
            && self.records < BATCH_RECORDS_MAX
    }

    /// Append a record. Refuses a record over `RECORD_BYTES_MAX`, more than
    /// `RECORD_HEADERS_MAX` headers, a header name over 65535 bytes, a
    /// timestamp more than ±24 days from the batch's first, or a batch over
    /// its limits; the batch is unchanged on error.
    pub fn push(
        &mut self,
        timestamp_ms: i64,
        key: &[u8],
        value: &[u8],
        headers: &[RecordHeader<'_>],
    ) -> Result<(), DecodeError> {
        self.push_with_attributes(timestamp_ms, key, value, headers, 0)
    }

    /// Append a record whose value is `reference` (the payload itself is
    /// in the filer). Same refusals as [`BatchBuilder::push`].
    pub fn push_reference(
        &mut self,
        timestamp_ms: i64,
        key: &[u8],
        reference: &PayloadRef,
        headers: &[RecordHeader<'_>],
    ) -> Result<(), DecodeError> {
        self.push_with_attributes(
            timestamp_ms,
            key,
            &reference.encode(),
            headers,
            RECORD_ATTR_REFERENCE,
        )?;
        self.has_references = true;
        Ok(())
    }

    /// [`BatchBuilder::push`] of a key and value that may be null (kept
    /// apart from empty ones: Kafka's null keys and tombstones).
    pub fn push_nullable(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[RecordHeader<'_>],
    ) -> Result<(), DecodeError> {
        let mut attributes = 0;
        if key.is_none() {
            attributes |= RECORD_ATTR_NULL_KEY;
        }
        if value.is_none() {
            attributes |= RECORD_ATTR_NULL_VALUE;
        }
        self.push_with_attributes(
            timestamp_ms,
            key.unwrap_or_default(),
            value.unwrap_or_default(),
            headers,
            attributes,
        )
    }

    fn push_with_attributes(
        &mut self,
        timestamp_ms: i64,
        key: &[u8],
        value: &[u8],
        headers: &[RecordHeader<'_>],
        attributes: u16,
    ) -> Result<(), DecodeError> {
        let record_bytes = Self::record_bytes(key, value, headers);
        if record_bytes > RECORD_BYTES_MAX as usize {
            return Err(DecodeError::TooLarge {
                what: "record",
                len: record_bytes as u64,
                max: u64::from(RECORD_BYTES_MAX),
            });
        }
        if headers.len() > RECORD_HEADERS_MAX as usize
            || headers.iter().any(|h| h.name.len() > usize::from(u16::MAX))
        {
            return Err(DecodeError::Invalid {
                what: "record",
                reason: "too many headers or a header name over 65535 bytes",
            });
        }
        if !self.fits(record_bytes, BATCH_BYTES_MAX as usize) {
            return Err(DecodeError::TooLarge {
                what: "batch",
                len: (self.buf.len() + record_bytes) as u64,
                max: u64::from(BATCH_BYTES_MAX),
            });
        }
        if self.records == 0 {
            self.first_timestamp_ms = timestamp_ms;
        }
        let delta =
            i32::try_from(timestamp_ms.wrapping_sub(self.first_timestamp_ms)).map_err(|_| {
                DecodeError::Invalid {
                    what: "record",
                    reason: "timestamp more than 24 days from the batch's first",
                }
            })?;
        self.max_timestamp_ms = self.max_timestamp_ms.max(timestamp_ms);
        let b = &mut self.buf;
        b.extend_from_slice(&(record_bytes as u32).to_le_bytes());
        b.extend_from_slice(&delta.to_le_bytes());
        b.extend_from_slice(&(key.len() as u32).to_le_bytes());
        b.extend_from_slice(&(value.len() as u32).to_le_bytes());
        b.extend_from_slice(&(headers.len() as u16).to_le_bytes());
        b.extend_from_slice(&attributes.to_le_bytes());
        b.extend_from_slice(key);
        b.extend_from_slice(value);
        for h in headers {
            b.extend_from_slice(&(h.name.len() as u16).to_le_bytes());
            b.extend_from_slice(h.name);
            b.extend_from_slice(&(h.value.len() as u32).to_le_bytes());
            b.extend_from_slice(h.value);
        }
        self.records += 1;
        Ok(())
    }

    /// Finish the batch: fill the header and checksum, and return its bytes.
    /// The builder is reset by [`BatchBuilder::clear`].
    pub fn finish(&mut self, producer_id: u64, base_sequence: u32) -> &[u8] {
        self.finish_with_epoch(producer_id, 0, base_sequence)
    }

    /// [`BatchBuilder::finish`], with the producer's epoch as well.
    pub fn finish_with_epoch(&mut self, producer_id: u64, epoch: u16, base_sequence: u32) -> &[u8] {
        let len = self.buf.len();
        let b = &mut self.buf;
        b[BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8].copy_from_slice(&0u64.to_le_bytes());
        b[BATCH_BYTES_OFFSET..BATCH_BYTES_OFFSET + 4].copy_from_slice(&(len as u32).to_le_bytes());
        b[VERSION_OFFSET] = BATCH_VERSION;
        b[ATTRIBUTES_OFFSET] = if self.has_references {
            BATCH_ATTR_REFERENCES
        } else {
            0
        };
        b[18..20].copy_from_slice(&[0, 0]);
        b[RECORD_COUNT_OFFSET..RECORD_COUNT_OFFSET + 4]
            .copy_from_slice(&self.records.to_le_bytes());
        b[FIRST_TIMESTAMP_OFFSET..FIRST_TIMESTAMP_OFFSET + 8]
            .copy_from_slice(&self.first_timestamp_ms.to_le_bytes());
        let max_ts = if self.records == 0 {
            self.first_timestamp_ms
        } else {
            self.max_timestamp_ms
        };
        b[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8].copy_from_slice(&max_ts.to_le_bytes());
        b[PRODUCER_ID_OFFSET..PRODUCER_ID_OFFSET + 8].copy_from_slice(&producer_id.to_le_bytes());
        b[BASE_SEQUENCE_OFFSET..BASE_SEQUENCE_OFFSET + 4]
            .copy_from_slice(&base_sequence.to_le_bytes());
        b[PRODUCER_EPOCH_OFFSET..PRODUCER_EPOCH_OFFSET + 2].copy_from_slice(&epoch.to_le_bytes());
        b[54..56].copy_from_slice(&[0; 2]);
        let crc = crc32c(&b[CHECKSUMMED_FROM..]);
        b[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        &self.buf
    }

    /// Forget the records, keep the buffer.
    pub fn clear(&mut self) {
        self.buf.truncate(BATCH_HEADER_BYTES);
        self.buf[..].fill(0);
        self.records = 0;
        self.first_timestamp_ms = 0;
        self.max_timestamp_ms = i64::MIN;
        self.has_references = false;
    }
}

/// A batch header's fixed fields, read without validating the batch: for
/// walking batches whose records this reader does not check itself (a
/// broker sending batches straight from a file; the receiver checks them
/// against the frame's checksum, which [`BatchHead::whole_checksum`]
/// lets the sender state without reading the records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHead {
    /// The whole batch, header included; at least `BATCH_HEADER_BYTES`.
    pub batch_bytes: u32,
    pub base_offset: u64,
    pub record_count: u32,
    /// The stored CRC-32C of bytes `CHECKSUMMED_FROM..batch_bytes`.
    pub checksum: u32,
    /// The CRC-32C of bytes `0..CHECKSUMMED_FROM` (base offset, length,
    /// checksum), which the stored checksum leaves out.
    head_checksum: u32,
}

impl BatchHead {
    /// The header at the start of `bytes`, if all of it is there and its
    /// length field is at least a header's and at most `BATCH_BYTES_MAX`.
    pub fn peek(bytes: &[u8]) -> Option<BatchHead> {
        if bytes.len() < BATCH_HEADER_BYTES {
            return None;
        }
        let batch_bytes = le_u32(bytes, BATCH_BYTES_OFFSET);
        if (batch_bytes as usize) < BATCH_HEADER_BYTES || batch_bytes > BATCH_BYTES_MAX {
            return None;
        }
        Some(BatchHead {
            batch_bytes,
            base_offset: le_u64(bytes, BASE_OFFSET_OFFSET),
            record_count: le_u32(bytes, RECORD_COUNT_OFFSET),
            checksum: le_u32(bytes, CHECKSUM_OFFSET),
            head_checksum: crc32c(&bytes[..CHECKSUMMED_FROM]),
        })
    }

    /// One past the last record's offset, unless it overflows.
    pub fn next_offset(&self) -> Option<u64> {
        self.base_offset.checked_add(u64::from(self.record_count))
    }

    /// The CRC-32C of the whole batch as it would be if its stored checksum
    /// is right: folded from the first 16 bytes' and the stored one.
    pub fn whole_checksum(&self) -> u32 {
        self.whole_checksum_with(self.checksum)
    }

    /// The whole checksum a sender may state for `batch`, a batch it built
    /// itself, instead of reading its bytes again: `Some` for a batch large
    /// enough that folding costs less than a pass over it
    /// (`COMBINE_MIN_BYTES`) whose header's length is its own; `None` means
    /// checksum it outright.
    pub fn stated_checksum(batch: &[u8]) -> Option<u32> {
        if batch.len() < crate::checksum::COMBINE_MIN_BYTES {
            return None;
        }
        BatchHead::peek(batch)
            .filter(|h| h.batch_bytes as usize == batch.len())
            .map(|h| h.whole_checksum())
    }

    /// The CRC-32C of the whole batch given the CRC-32C of its bytes from
    /// `CHECKSUMMED_FROM` on (computed by the caller, or the stored one).
    pub fn whole_checksum_with(&self, tail_crc: u32) -> u32 {
        crate::checksum::crc32c_combine(
            self.head_checksum,
            tail_crc,
            self.batch_bytes as usize - CHECKSUMMED_FROM,
        )
    }
}

/// A batch whose structure and checksum were verified.
#[derive(Debug, Clone, Copy)]
pub struct BatchView<'a> {
    bytes: &'a [u8],
}

impl<'a> BatchView<'a> {
    /// Length of the batch that starts `bytes`, read from its header, if the
    /// header is there. Used to walk batches laid end to end.
    pub fn peek_len(bytes: &[u8]) -> Option<u32> {
        (bytes.len() >= BATCH_HEADER_BYTES).then(|| le_u32(bytes, BATCH_BYTES_OFFSET))
    }

    /// Verify one batch occupying exactly `bytes`: lengths, version,
    /// checksum, and every record's bounds. Nothing of the batch is trusted
    /// before this returns.
    pub fn validate(bytes: &'a [u8]) -> Result<BatchView<'a>, DecodeError> {
        let computed = bytes.get(CHECKSUMMED_FROM..).map_or(0, crc32c);
        Self::validate_checksummed(bytes, computed)
    }

    /// [`BatchView::validate`] for a caller that has already computed the
    /// CRC-32C of `bytes[CHECKSUMMED_FROM..]` (`computed`) in a pass of its
    /// own, so the batch bytes are checksummed once. `computed` is compared
    /// with the stored checksum exactly as `validate` compares its own.
    pub fn validate_checksummed(
        bytes: &'a [u8],
        computed: u32,
    ) -> Result<BatchView<'a>, DecodeError> {
        if bytes.len() < BATCH_HEADER_BYTES {
            return Err(DecodeError::Truncated {
                what: "batch",
                need: BATCH_HEADER_BYTES as u64,
                have: bytes.len() as u64,
            });
        }
        let batch_bytes = le_u32(bytes, BATCH_BYTES_OFFSET);
        if batch_bytes > BATCH_BYTES_MAX {
            return Err(DecodeError::TooLarge {
                what: "batch",
                len: u64::from(batch_bytes),
                max: u64::from(BATCH_BYTES_MAX),
            });
        }
        if batch_bytes as usize != bytes.len() {
            return Err(DecodeError::Invalid {
                what: "batch",
                reason: "batch length field does not match the bytes given",
            });
        }
        let version = bytes[VERSION_OFFSET];
        if version != BATCH_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                what: "batch",
                version: u16::from(version),
            });
        }
        let stored = le_u32(bytes, CHECKSUM_OFFSET);
        checksum::expect_match("batch", stored, computed)?;
        let count = le_u32(bytes, RECORD_COUNT_OFFSET);
        if count == 0 || count > BATCH_RECORDS_MAX {
            return Err(DecodeError::Invalid {
                what: "batch",
                reason: "record count is zero or over BATCH_RECORDS_MAX",
            });
        }
        // The base offset is outside the checksum, so anything can be there;
        // refuse one whose last record's offset would not fit a u64, which
        // makes `next_offset` total on every validated batch.
        if le_u64(bytes, BASE_OFFSET_OFFSET)
            .checked_add(u64::from(count))
            .is_none()
        {
            return Err(DecodeError::Invalid {
                what: "batch",
                reason: "base offset + record count overflows u64",
            });
        }
        let attributes = bytes[ATTRIBUTES_OFFSET];
        if attributes & !BATCH_ATTR_REFERENCES != 0 {
            return Err(DecodeError::Invalid {
                what: "batch",
                reason: "unknown batch attribute bits",
            });
        }
        let references_allowed = attributes & BATCH_ATTR_REFERENCES != 0;
        // The header's timestamps are what time lookups trust to skip a
        // batch, so they must be the records' own: record 0 is at the first
        // timestamp and the max timestamp is the largest record's.
        let first = le_i64(bytes, FIRST_TIMESTAMP_OFFSET);
        let mut max = i64::MIN;
        let mut at = BATCH_HEADER_BYTES;
        for i in 0..count {
            let (record_bytes, delta) = validate_record(&bytes[at..], references_allowed)?;
            if i == 0 && delta != 0 {
                return Err(DecodeError::Invalid {
                    what: "batch",
                    reason: "the first record's timestamp delta is not 0",
                });
            }
            max = max.max(first.wrapping_add(i64::from(delta)));
            at += record_bytes;
        }
        if max != le_i64(bytes, MAX_TIMESTAMP_OFFSET) {
            return Err(DecodeError::Invalid {
                what: "batch",
                reason: "max timestamp is not the largest record timestamp",
            });
        }
        if at != bytes.len() {
            return Err(DecodeError::Invalid {
                what: "batch",
                reason: "bytes left after the last record",
            });
        }
        Ok(BatchView { bytes })
    }

    /// Wrap bytes this process validated earlier (its own buffers). Panics
    /// on a header too short to read, never reads out of bounds later since
    /// the record walk stays within `bytes`; use only on trusted bytes.
    pub fn trusted(bytes: &'a [u8]) -> BatchView<'a> {
        assert!(bytes.len() >= BATCH_HEADER_BYTES);
        BatchView { bytes }
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    pub fn base_offset(&self) -> u64 {
        le_u64(self.bytes, BASE_OFFSET_OFFSET)
    }
    pub fn record_count(&self) -> u32 {
        le_u32(self.bytes, RECORD_COUNT_OFFSET)
    }
    /// One past the last record's offset. `validate` guarantees it fits a
    /// u64; a base offset stamped later must keep it so.
    pub fn next_offset(&self) -> u64 {
        self.base_offset() + u64::from(self.record_count())
    }
    pub fn first_timestamp_ms(&self) -> i64 {
        le_i64(self.bytes, FIRST_TIMESTAMP_OFFSET)
    }
    pub fn max_timestamp_ms(&self) -> i64 {
        le_i64(self.bytes, MAX_TIMESTAMP_OFFSET)
    }
    /// Whether some record of the batch is a payload reference.
    pub fn has_references(&self) -> bool {
        self.bytes[ATTRIBUTES_OFFSET] & BATCH_ATTR_REFERENCES != 0
    }

    pub fn producer_id(&self) -> u64 {
        le_u64(self.bytes, PRODUCER_ID_OFFSET)
    }
    pub fn base_sequence(&self) -> u32 {
        le_u32(self.bytes, BASE_SEQUENCE_OFFSET)
    }
    pub fn producer_epoch(&self) -> u16 {
        le_u16(self.bytes, PRODUCER_EPOCH_OFFSET)
    }

    /// The records, in offset order.
    pub fn records(&self) -> RecordIter<'a> {
        RecordIter {
            rest: &self.bytes[BATCH_HEADER_BYTES..],
            next_delta: 0,
            remaining: self.record_count(),
            first_timestamp_ms: self.first_timestamp_ms(),
        }
    }
}

/// Stamp the broker-assigned base offset into a batch's header in place.
/// The checksum does not cover it, so nothing else changes.
pub fn set_base_offset(batch: &mut [u8], base_offset: u64) {
    batch[BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8].copy_from_slice(&base_offset.to_le_bytes());
}

/// Check one record at the start of `bytes`; returns its length. A record
/// flagged as a reference must be in a batch flagged as holding references
/// (`references_allowed`) and its value must decode as a [`PayloadRef`].
/// Returns the record's length and its timestamp delta.
fn validate_record(bytes: &[u8], references_allowed: bool) -> Result<(usize, i32), DecodeError> {
    const WHAT: &str = "record";
    if bytes.len() < RECORD_HEADER_BYTES {
        return Err(DecodeError::Truncated {
            what: WHAT,
            need: RECORD_HEADER_BYTES as u64,
            have: bytes.len() as u64,
        });
    }
    let record_bytes = le_u32(bytes, 0) as usize;
    if record_bytes > RECORD_BYTES_MAX as usize {
        return Err(DecodeError::TooLarge {
            what: WHAT,
            len: record_bytes as u64,
            max: u64::from(RECORD_BYTES_MAX),
        });
    }
    if record_bytes < RECORD_HEADER_BYTES || record_bytes > bytes.len() {
        return Err(DecodeError::Invalid {
            what: WHAT,
            reason: "record length outside its batch",
        });
    }
    let key = le_u32(bytes, 8) as usize;
    let value = le_u32(bytes, 12) as usize;
    let headers = le_u16(bytes, 16);
    if u32::from(headers) > RECORD_HEADERS_MAX {
        return Err(DecodeError::Invalid {
            what: WHAT,
            reason: "more headers than RECORD_HEADERS_MAX",
        });
    }
    let attributes = le_u16(bytes, 18);
    if attributes & !RECORD_ATTRS_KNOWN != 0 {
        return Err(DecodeError::Invalid {
            what: WHAT,
            reason: "unknown record attribute bits",
        });
    }
    if (attributes & RECORD_ATTR_NULL_KEY != 0 && key != 0)
        || (attributes & RECORD_ATTR_NULL_VALUE != 0
            && (value != 0 || attributes & RECORD_ATTR_REFERENCE != 0))
    {
        return Err(DecodeError::Invalid {
            what: WHAT,
            reason: "a null key or value with bytes, or a null reference",
        });
    }
    let mut at = RECORD_HEADER_BYTES
        .checked_add(key)
        .and_then(|a| a.checked_add(value))
        .filter(|a| *a <= record_bytes)
        .ok_or(DecodeError::Invalid {
            what: WHAT,
            reason: "key and value lengths exceed the record",
        })?;
    if attributes & RECORD_ATTR_REFERENCE != 0 {
        if !references_allowed {
            return Err(DecodeError::Invalid {
                what: WHAT,
                reason: "a reference record in a batch not flagged as holding references",
            });
        }
        let value_at = RECORD_HEADER_BYTES + key;
        PayloadRef::decode(&bytes[value_at..value_at + value])?;
    }
    for _ in 0..headers {
        if at + 2 > record_bytes {
            return Err(DecodeError::Invalid {
                what: WHAT,
                reason: "header outside the record",
            });
        }
        let name = usize::from(le_u16(bytes, at));
        if at + 6 + name > record_bytes {
            return Err(DecodeError::Invalid {
                what: WHAT,
                reason: "header outside the record",
            });
        }
        let value = le_u32(bytes, at + 2 + name) as usize;
        at = (at + 6 + name)
            .checked_add(value)
            .filter(|a| *a <= record_bytes)
            .ok_or(DecodeError::Invalid {
                what: WHAT,
                reason: "header outside the record",
            })?;
    }
    if at != record_bytes {
        return Err(DecodeError::Invalid {
            what: WHAT,
            reason: "record length does not match its fields",
        });
    }
    Ok((record_bytes, le_u32(bytes, 4) as i32))
}

/// Iterator over a validated batch's records.
#[derive(Debug, Clone)]
pub struct RecordIter<'a> {
    rest: &'a [u8],
    next_delta: u32,
    remaining: u32,
    first_timestamp_ms: i64,
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        if self.remaining == 0 || self.rest.len() < RECORD_HEADER_BYTES {
            return None;
        }
        let b = self.rest;
        let len = (le_u32(b, 0) as usize).min(b.len());
        let delta = le_u32(b, 4) as i32;
        let key_len = le_u32(b, 8) as usize;
        let value_len = le_u32(b, 12) as usize;
        let key_end = (RECORD_HEADER_BYTES + key_len).min(len);
        let value_end = (key_end + value_len).min(len);
        let record = Record {
            offset_delta: self.next_delta,
            timestamp_ms: self.first_timestamp_ms.wrapping_add(i64::from(delta)),
            key: &b[RECORD_HEADER_BYTES..key_end],
            value: &b[key_end..value_end],
            attributes: le_u16(b, 18),
            header_count: le_u16(b, 16),
            header_bytes: &b[value_end..len],
        };
        self.rest = &b[len.max(RECORD_HEADER_BYTES).min(b.len())..];
        self.next_delta += 1;
        self.remaining -= 1;
        Some(record)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn null_keys_and_values_stay_apart_from_empty_ones() {
        let mut b = BatchBuilder::new();
        b.push_nullable(1, None, Some(b"v"), &[]).unwrap();
        b.push_nullable(2, Some(b"k"), None, &[]).unwrap();
        b.push_nullable(3, Some(b""), Some(b""), &[]).unwrap();
        let bytes = b.finish(0, 0).to_vec();
        let view = BatchView::validate(&bytes).unwrap();
        let got: Vec<_> = view
            .records()
            .map(|r| (r.key_is_null(), r.key, r.value_is_null(), r.value))
            .collect();
        assert_eq!(
            got,
            [
                (true, &b""[..], false, &b"v"[..]),
                (false, &b"k"[..], true, &b""[..]),
                (false, &b""[..], false, &b""[..]),
            ]
        );
        // A null value with bytes, or a null value that is a reference,
        // does not validate.
        let mut bad = bytes.clone();
        let second = BATCH_HEADER_BYTES + le_u32(&bytes, BATCH_HEADER_BYTES) as usize;
        bad[second + 18] |= RECORD_ATTR_NULL_KEY as u8;
        let crc = crc32c(&bad[CHECKSUMMED_FROM..]);
        bad[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        assert!(BatchView::validate(&bad).is_err(), "a null key with bytes");
        let mut bad = bytes.clone();
        bad[BATCH_HEADER_BYTES + 18] |= RECORD_ATTR_NULL_VALUE as u8;
        let crc = crc32c(&bad[CHECKSUMMED_FROM..]);
        bad[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        assert!(
            BatchView::validate(&bad).is_err(),
            "a null value with bytes"
        );
    }

    /// A stated checksum is the batch's real one, and only for a whole
    /// batch large enough to fold.
    #[test]
    fn stated_checksums_are_the_batch_checksum() {
        let batch = |value_bytes: usize| {
            let mut b = BatchBuilder::new();
            b.push(1, b"k", &vec![3u8; value_bytes], &[]).unwrap();
            b.finish(0, 0).to_vec()
        };
        let large = batch(crate::checksum::COMBINE_MIN_BYTES);
        assert_eq!(
            BatchHead::stated_checksum(&large),
            Some(crate::checksum::crc32c(&large))
        );
        assert_eq!(BatchHead::stated_checksum(&large[..large.len() - 1]), None);
        assert_eq!(BatchHead::stated_checksum(&batch(10)), None);
    }

    fn sample() -> Vec<u8> {
        let mut b = BatchBuilder::new();
        b.push(1_000, b"k1", b"v1", &[]).unwrap();
        b.push(
            1_005,
            b"",
            b"value two",
            &[RecordHeader {
                name: b"h",
                value: b"x",
            }],
        )
        .unwrap();
        b.finish_with_epoch(9, 2, 3).to_vec()
    }

    fn reference() -> PayloadRef {
        PayloadRef {
            id: crate::payload_ref::PayloadId {
                created_ms: 77,
                nonce: 5,
            },
            length: 9 << 20,
            checksum: 0x1234_5678,
        }
    }

    /// Re-checksum a batch after a test edited bytes under the checksum.
    fn reseal(bytes: &mut [u8]) {
        let crc = crc32c(&bytes[CHECKSUMMED_FROM..]);
        bytes[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn reference_records_round_trip_and_flag_the_batch() {
        let mut b = BatchBuilder::new();
        b.push(1, b"a", b"inline", &[]).unwrap();
        b.push_reference(2, b"b", &reference(), &[]).unwrap();
        let bytes = b.finish(0, 0).to_vec();
        let v = BatchView::validate(&bytes).unwrap();
        assert!(v.has_references());
        let r: Vec<_> = v.records().collect();
        assert_eq!(r[0].reference(), None);
        assert_eq!(r[1].reference(), Some(reference()));
        assert_eq!(r[1].value, &reference().encode()[..]);
        b.clear();
        b.push(1, b"a", b"inline", &[]).unwrap();
        let plain = b.finish(0, 0).to_vec();
        assert!(!BatchView::validate(&plain).unwrap().has_references());
    }

    #[test]
    fn bad_reference_records_are_refused() {
        let mut b = BatchBuilder::new();
        b.push_reference(2, b"b", &reference(), &[]).unwrap();
        let good = b.finish(0, 0).to_vec();
        let value_at = BATCH_HEADER_BYTES + RECORD_HEADER_BYTES + 1;
        // A reference flag without the batch flag.
        let mut unflagged = good.clone();
        unflagged[ATTRIBUTES_OFFSET] = 0;
        reseal(&mut unflagged);
        assert!(BatchView::validate(&unflagged).is_err());
        // A flagged value that is not a reference.
        let mut garbage = good.clone();
        garbage[value_at] = 9;
        reseal(&mut garbage);
        assert!(BatchView::validate(&garbage).is_err());
        // Unknown attribute bits, on the batch and on a record.
        let mut batch_bits = good.clone();
        batch_bits[ATTRIBUTES_OFFSET] |= 0x80;
        reseal(&mut batch_bits);
        assert!(BatchView::validate(&batch_bits).is_err());
        let mut record_bits = good.clone();
        record_bits[BATCH_HEADER_BYTES + 18] |= 2;
        reseal(&mut record_bits);
        assert!(BatchView::validate(&record_bits).is_err());
        // A flagged batch may hold inline records only.
        let mut inline_only = sample();
        inline_only[ATTRIBUTES_OFFSET] = BATCH_ATTR_REFERENCES;
        reseal(&mut inline_only);
        assert!(BatchView::validate(&inline_only).is_ok());
    }

    #[test]
    fn round_trip() {
        let mut bytes = sample();
        set_base_offset(&mut bytes, 40);
        let v = BatchView::validate(&bytes).unwrap();
        assert_eq!(v.base_offset(), 40);
        assert_eq!(v.record_count(), 2);
        assert_eq!(v.next_offset(), 42);
        assert_eq!(v.first_timestamp_ms(), 1_000);
        assert_eq!(v.max_timestamp_ms(), 1_005);
        assert_eq!(v.producer_id(), 9);
        assert_eq!(v.base_sequence(), 3);
        assert_eq!(v.producer_epoch(), 2);
        let r: Vec<_> = v.records().collect();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].key, r[0].value, r[0].timestamp_ms),
            (&b"k1"[..], &b"v1"[..], 1_000)
        );
        assert_eq!(r[1].offset_delta, 1);
        assert_eq!(r[1].timestamp_ms, 1_005);
        let h: Vec<_> = r[1].headers().collect();
        assert_eq!(
            h,
            vec![RecordHeader {
                name: b"h",
                value: b"x"
            }]
        );
    }

    /// The exact bytes of a one-record batch: the format's golden vector.
    #[test]
    fn golden_vector() {
        let mut b = BatchBuilder::new();
        b.push(0x0102_0304_0506, b"key", b"value", &[]).unwrap();
        let bytes = b.finish(0, 0).to_vec();
        let mut expected = Vec::new();
        expected.extend_from_slice(&0u64.to_le_bytes()); // base offset
        expected.extend_from_slice(&84u32.to_le_bytes()); // batch bytes: 56 + 28
        expected.extend_from_slice(&[0; 4]); // checksum, filled below
        expected.extend_from_slice(&[1, 0, 0, 0]); // version, attributes, reserved
        expected.extend_from_slice(&1u32.to_le_bytes()); // record count
        expected.extend_from_slice(&0x0102_0304_0506i64.to_le_bytes());
        expected.extend_from_slice(&0x0102_0304_0506i64.to_le_bytes());
        expected.extend_from_slice(&0u64.to_le_bytes()); // producer id
        expected.extend_from_slice(&[0; 8]); // base sequence, epoch, reserved
        expected.extend_from_slice(&28u32.to_le_bytes()); // record bytes
        expected.extend_from_slice(&0i32.to_le_bytes()); // timestamp delta
        expected.extend_from_slice(&3u32.to_le_bytes());
        expected.extend_from_slice(&5u32.to_le_bytes());
        expected.extend_from_slice(&[0, 0, 0, 0]); // header count, attributes
        expected.extend_from_slice(b"keyvalue");
        let crc = crate::checksum::crc32c(&expected[16..]);
        expected[12..16].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(bytes, expected);
        assert_eq!(
            crc, 0xEF8E_23AC,
            "golden checksum changed: the format changed"
        );
    }

    #[test]
    fn refuses_corruption_anywhere_in_the_checksummed_part() {
        let bytes = sample();
        for i in CHECKSUMMED_FROM..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(BatchView::validate(&b).is_err(), "flip at {i} accepted");
        }
    }

    #[test]
    fn refuses_truncation_and_bad_lengths() {
        let bytes = sample();
        for n in 0..bytes.len() {
            assert!(
                BatchView::validate(&bytes[..n]).is_err(),
                "truncated to {n} accepted"
            );
        }
        // A forged record length that still checksums must be caught.
        let mut b = bytes.clone();
        b[BATCH_HEADER_BYTES..BATCH_HEADER_BYTES + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let crc = crc32c(&b[CHECKSUMMED_FROM..]);
        b[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            BatchView::validate(&b),
            Err(DecodeError::TooLarge { .. })
        ));
    }

    /// Found by the `batch` fuzz target: a base offset near u64::MAX made
    /// `next_offset` overflow (a panic in debug builds, a wrapped offset in
    /// release ones).
    #[test]
    fn refuses_base_offset_that_overflows() {
        let mut bytes = sample();
        set_base_offset(&mut bytes, u64::MAX - 1);
        assert!(matches!(
            BatchView::validate(&bytes),
            Err(DecodeError::Invalid { .. })
        ));
        set_base_offset(&mut bytes, u64::MAX - 2);
        assert_eq!(BatchView::validate(&bytes).unwrap().next_offset(), u64::MAX);
    }

    /// Found by the `batch` fuzz target: a batch whose record 0 was not at
    /// the first timestamp and whose max timestamp was below a record's
    /// validated, so a time lookup could skip records it should return.
    #[test]
    fn refuses_timestamps_the_records_do_not_have() {
        let restamp = |b: &mut Vec<u8>| {
            let crc = crc32c(&b[CHECKSUMMED_FROM..]);
            b[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        };
        let mut builder = BatchBuilder::new();
        builder.push(1_000, b"a", b"1", &[]).unwrap();
        builder.push(1_005, b"b", b"2", &[]).unwrap();
        builder.push(990, b"c", b"3", &[]).unwrap();
        let good = builder.finish(0, 0).to_vec();
        assert_eq!(
            BatchView::validate(&good).unwrap().max_timestamp_ms(),
            1_005
        );

        let mut low_max = good.clone();
        low_max[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8]
            .copy_from_slice(&1_004i64.to_le_bytes());
        restamp(&mut low_max);
        assert!(matches!(
            BatchView::validate(&low_max),
            Err(DecodeError::Invalid { reason, .. }) if reason.contains("max timestamp")
        ));

        let mut shifted_first = good.clone();
        let delta_at = BATCH_HEADER_BYTES + 4;
        shifted_first[delta_at..delta_at + 4].copy_from_slice(&2i32.to_le_bytes());
        restamp(&mut shifted_first);
        assert!(matches!(
            BatchView::validate(&shifted_first),
            Err(DecodeError::Invalid { reason, .. }) if reason.contains("first record")
        ));

        // The fuzz target's own input, kept as found.
        let found = [
            0x64, 0x00, 0x01, 0x00, 0x70, 0x00, 0x00, 0x00, 0x53, 0x00, 0x00, 0x00, 0xe0, 0xb9,
            0x30, 0xab, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x68, 0xe5, 0xcf,
            0x8b, 0x01, 0x00, 0x00, 0x00, 0x68, 0xe5, 0xcf, 0x8b, 0x01, 0x00, 0x00, 0x2a, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x1b, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf5, 0x00, 0x02, 0x00, 0x00, 0x00, 0x05, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x6b, 0x30, 0x76, 0x76, 0x76, 0x76, 0x76,
        ];
        assert!(matches!(
            BatchView::validate(&found),
            Err(DecodeError::Invalid { reason, .. }) if reason.contains("first record")
        ));
    }

    #[test]
    fn builder_refuses_oversized_record_and_keeps_batch() {
        let mut b = BatchBuilder::new();
        b.push(0, b"a", b"b", &[]).unwrap();
        let big = vec![0u8; RECORD_BYTES_MAX as usize];
        assert!(b.push(0, b"", &big, &[]).is_err());
        assert_eq!(b.len(), 1);
        let bytes = b.finish(0, 0).to_vec();
        assert_eq!(BatchView::validate(&bytes).unwrap().record_count(), 1);
    }

    #[test]
    fn clear_reuses() {
        let mut b = BatchBuilder::new();
        b.push(5, b"a", b"b", &[]).unwrap();
        b.finish(0, 0);
        b.clear();
        b.push(7, b"c", b"d", &[]).unwrap();
        let bytes = b.finish(0, 0).to_vec();
        let v = BatchView::validate(&bytes).unwrap();
        assert_eq!(v.first_timestamp_ms(), 7);
        assert_eq!(v.records().next().unwrap().key, b"c");
    }
}
