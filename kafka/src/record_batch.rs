//! Kafka record batches, message format v2 (magic 2), decoded and encoded.
//!
//! Owns: the 61-byte batch header at the offsets below, the CRC-32C over
//! attributes..end, the records with their varint fields and headers, and
//! compression of the records section. Legacy message sets (magic 0 and 1)
//! are rejected with [`DecodeError::UnsupportedMagic`]. Records are views
//! into the batch (or into a caller's reusable decompression buffer): no
//! allocation per record. docs/kafka.md has the byte layout.

use crate::compression::{Compression, COMPRESSION_MASK};
use crate::decoder::Decoder;
use crate::encoder::Encoder;
use crate::error::{DecodeError, EncodeError};

/// INT64 offset of the first record.
pub const BASE_OFFSET_OFFSET: usize = 0;
/// INT32 bytes after this field to the end of the batch.
pub const BATCH_LENGTH_OFFSET: usize = 8;
/// INT32 leader epoch, set by the broker.
pub const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
/// INT8, 2.
pub const MAGIC_OFFSET: usize = 16;
/// UINT32 CRC-32C of bytes [`ATTRIBUTES_OFFSET`].. end.
pub const CRC_OFFSET: usize = 17;
/// INT16 attributes: codec (bits 0-2), timestamp type (3), transactional
/// (4), control (5), delete horizon (6).
pub const ATTRIBUTES_OFFSET: usize = 21;
/// INT32 offset delta of the last record.
pub const LAST_OFFSET_DELTA_OFFSET: usize = 23;
/// INT64 timestamp of the first record.
pub const BASE_TIMESTAMP_OFFSET: usize = 27;
/// INT64 largest timestamp in the batch.
pub const MAX_TIMESTAMP_OFFSET: usize = 35;
/// INT64 producer id (-1 none).
pub const PRODUCER_ID_OFFSET: usize = 43;
/// INT16 producer epoch (-1 none).
pub const PRODUCER_EPOCH_OFFSET: usize = 51;
/// INT32 sequence of the first record (-1 none).
pub const BASE_SEQUENCE_OFFSET: usize = 53;
/// INT32 number of records.
pub const RECORDS_COUNT_OFFSET: usize = 57;
/// Where the (possibly compressed) records start.
pub const RECORDS_OFFSET: usize = 61;
/// The size of the batch header.
pub const BATCH_HEADER_BYTES: usize = RECORDS_OFFSET;
/// The bytes before the batch length field's coverage starts.
pub const BATCH_LENGTH_BASE_BYTES: usize = PARTITION_LEADER_EPOCH_OFFSET;
/// The magic byte of this format.
pub const MAGIC_V2: i8 = 2;
/// The default limit on a batch's decompressed records (Kafka bounds it by
/// the 1 MiB `max.message.bytes` by default; kelp allows 64 MiB).
pub const DECOMPRESSED_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Attribute bit 3: timestamps are log-append times.
pub const ATTR_LOG_APPEND_TIME: i16 = 0x08;
/// Attribute bit 4: part of a transaction.
pub const ATTR_TRANSACTIONAL: i16 = 0x10;
/// Attribute bit 5: a control batch (transaction markers).
pub const ATTR_CONTROL: i16 = 0x20;

const _: () = assert!(RECORDS_OFFSET == RECORDS_COUNT_OFFSET + 4);
const _: () = assert!(CRC_OFFSET + 4 == ATTRIBUTES_OFFSET);

/// The header fields of a record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Leader epoch, set by the broker.
    pub partition_leader_epoch: i32,
    /// Attributes (see the `ATTR_*` constants and [`Compression`]).
    pub attributes: i16,
    /// Offset delta of the last record.
    pub last_offset_delta: i32,
    /// Timestamp of the first record.
    pub base_timestamp: i64,
    /// Largest timestamp in the batch.
    pub max_timestamp: i64,
    /// Producer id (-1 none).
    pub producer_id: i64,
    /// Producer epoch (-1 none).
    pub producer_epoch: i16,
    /// Sequence number of the first record (-1 none).
    pub base_sequence: i32,
    /// Number of records.
    pub record_count: i32,
}

impl Default for RecordBatchHeader {
    fn default() -> Self {
        RecordBatchHeader {
            base_offset: 0,
            partition_leader_epoch: -1,
            attributes: 0,
            last_offset_delta: 0,
            base_timestamp: -1,
            max_timestamp: -1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            record_count: 0,
        }
    }
}

impl RecordBatchHeader {
    /// The batch's compression codec.
    pub fn compression(&self) -> Result<Compression, DecodeError> {
        Compression::from_attributes(self.attributes)
    }

    /// Whether the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Whether the batch holds control records.
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Whether timestamps are log-append times.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_LOG_APPEND_TIME != 0
    }

    /// The offset of the last record.
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }
}

/// A record batch borrowed from a buffer, its CRC checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBatch<'a> {
    /// The header.
    pub header: RecordBatchHeader,
    /// The stored CRC-32C.
    pub crc: u32,
    /// The whole batch's bytes.
    pub bytes: &'a [u8],
    /// The records section, compressed as the attributes say.
    pub records: &'a [u8],
}

impl<'a> RecordBatch<'a> {
    /// Decodes the batch at the start of `buf`; returns it and the bytes
    /// it spans. Checks the magic, the length, the CRC and the codec id.
    pub fn decode(buf: &'a [u8]) -> Result<(RecordBatch<'a>, usize), DecodeError> {
        let mut r = Decoder::new(buf);
        let base_offset = r.i64()?;
        let length_at = r.offset();
        let batch_length = r.i32()?;
        let partition_leader_epoch = r.i32()?;
        let magic = r.i8()?;
        if magic != MAGIC_V2 {
            return Err(DecodeError::UnsupportedMagic { magic });
        }
        let total = usize::try_from(batch_length)
            .ok()
            .and_then(|n| n.checked_add(BATCH_LENGTH_BASE_BYTES))
            .filter(|n| *n >= BATCH_HEADER_BYTES)
            .ok_or(DecodeError::InvalidLength {
                offset: length_at,
                length: i64::from(batch_length),
                remaining: buf.len().saturating_sub(BATCH_LENGTH_BASE_BYTES),
            })?;
        let Some(bytes) = buf.get(..total) else {
            return Err(DecodeError::Truncated {
                offset: 0,
                needed: total,
                remaining: buf.len(),
            });
        };
        let crc = r.u32()?;
        let computed = crc32c::crc32c(&bytes[ATTRIBUTES_OFFSET..]);
        if crc != computed {
            return Err(DecodeError::ChecksumMismatch {
                stored: crc,
                computed,
            });
        }
        let header = RecordBatchHeader {
            base_offset,
            partition_leader_epoch,
            attributes: r.i16()?,
            last_offset_delta: r.i32()?,
            base_timestamp: r.i64()?,
            max_timestamp: r.i64()?,
            producer_id: r.i64()?,
            producer_epoch: r.i16()?,
            base_sequence: r.i32()?,
            record_count: r.i32()?,
        };
        if header.record_count < 0 {
            return Err(DecodeError::InvalidBatch {
                reason: "negative record count",
            });
        }
        if header.last_offset_delta < 0 {
            return Err(DecodeError::InvalidBatch {
                reason: "negative last offset delta",
            });
        }
        header.compression()?;
        let batch = RecordBatch {
            header,
            crc,
            bytes,
            records: &bytes[RECORDS_OFFSET..],
        };
        Ok((batch, total))
    }

    /// The batch's records. Compressed records are decompressed into
    /// `scratch` (cleared first; reuse it across batches to allocate once),
    /// failing past `decompressed_bytes_max`.
    pub fn records<'b>(
        &'b self,
        scratch: &'b mut Vec<u8>,
        decompressed_bytes_max: usize,
    ) -> Result<Records<'b>, DecodeError> {
        let bytes: &'b [u8] = match self.header.compression()? {
            Compression::None => self.records,
            codec => {
                codec.decompress(self.records, scratch, decompressed_bytes_max)?;
                scratch
            }
        };
        Ok(Records {
            r: Decoder::new(bytes),
            left: self.header.record_count,
            failed: false,
        })
    }

    /// Every record of the batch, or the first error: [`RecordBatch::records`]
    /// collected.
    pub fn record_list<'b>(
        &'b self,
        scratch: &'b mut Vec<u8>,
        decompressed_bytes_max: usize,
    ) -> Result<Vec<Record<'b>>, DecodeError> {
        self.records(scratch, decompressed_bytes_max)?.collect()
    }
}

/// Iterates the record batches in a records field (Produce, Fetch),
/// stopping at the first error.
#[derive(Debug, Clone)]
pub struct RecordBatches<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> RecordBatches<'a> {
    /// The batches in `records`.
    pub fn new(records: &'a [u8]) -> Self {
        RecordBatches {
            rest: records,
            failed: false,
        }
    }
}

impl<'a> Iterator for RecordBatches<'a> {
    type Item = Result<RecordBatch<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        match RecordBatch::decode(self.rest) {
            Ok((batch, used)) => {
                self.rest = &self.rest[used..];
                Some(Ok(batch))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// A record header: a UTF-8 key and a nullable value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader<'a> {
    /// The key.
    pub key: &'a str,
    /// The value.
    pub value: Option<&'a [u8]>,
}

/// The headers of a record: either still encoded (as decoded, validated
/// already) or a list to encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordHeaders<'a> {
    /// `count` headers encoded in `bytes`, already validated.
    Encoded {
        /// How many.
        count: usize,
        /// Their bytes.
        bytes: &'a [u8],
    },
    /// A list.
    List(&'a [RecordHeader<'a>]),
}

impl<'a> RecordHeaders<'a> {
    /// No headers.
    pub const NONE: RecordHeaders<'static> = RecordHeaders::List(&[]);

    /// How many headers there are.
    pub fn len(&self) -> usize {
        match self {
            RecordHeaders::Encoded { count, .. } => *count,
            RecordHeaders::List(list) => list.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The headers, in order.
    pub fn iter(&self) -> RecordHeaderIter<'a> {
        match *self {
            RecordHeaders::Encoded { count, bytes } => RecordHeaderIter::Encoded {
                left: count,
                r: Decoder::new(bytes),
            },
            RecordHeaders::List(list) => RecordHeaderIter::List(list.iter()),
        }
    }
}

/// Iterates a record's headers.
#[derive(Debug, Clone)]
pub enum RecordHeaderIter<'a> {
    /// Over encoded headers.
    #[doc(hidden)]
    Encoded {
        /// Headers left.
        left: usize,
        /// Their bytes.
        r: Decoder<'a>,
    },
    /// Over a list.
    #[doc(hidden)]
    List(std::slice::Iter<'a, RecordHeader<'a>>),
}

impl<'a> Iterator for RecordHeaderIter<'a> {
    type Item = RecordHeader<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            RecordHeaderIter::Encoded { left, r } => {
                if *left == 0 {
                    return None;
                }
                *left -= 1;
                // The bytes were validated when the record was decoded, so
                // this cannot fail; if it did, the iteration just ends.
                read_header(r).ok()
            }
            RecordHeaderIter::List(it) => it.next().copied(),
        }
    }
}

fn read_varint_bytes<'a>(r: &mut Decoder<'a>) -> Result<Option<&'a [u8]>, DecodeError> {
    let offset = r.offset();
    let len = r.varint()?;
    if len == -1 {
        return Ok(None);
    }
    match usize::try_from(len) {
        Ok(n) => r.take(n).map(Some),
        Err(_) => Err(DecodeError::InvalidLength {
            offset,
            length: i64::from(len),
            remaining: r.remaining(),
        }),
    }
}

fn read_header<'a>(r: &mut Decoder<'a>) -> Result<RecordHeader<'a>, DecodeError> {
    let offset = r.offset();
    let key = read_varint_bytes(r)?.ok_or(DecodeError::UnexpectedNull { offset })?;
    let key = std::str::from_utf8(key).map_err(|_| DecodeError::InvalidUtf8 { offset })?;
    let value = read_varint_bytes(r)?;
    Ok(RecordHeader { key, value })
}

/// One record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Record attributes (unused by Kafka, 0).
    pub attributes: i8,
    /// Timestamp minus the batch's base timestamp.
    pub timestamp_delta: i64,
    /// Offset minus the batch's base offset.
    pub offset_delta: i32,
    /// The key.
    pub key: Option<&'a [u8]>,
    /// The value.
    pub value: Option<&'a [u8]>,
    /// The headers.
    pub headers: RecordHeaders<'a>,
}

impl<'a> Record<'a> {
    /// Decodes one record (its length prefix included).
    pub fn decode(r: &mut Decoder<'a>) -> Result<Self, DecodeError> {
        let offset = r.offset();
        let length = r.varint()?;
        let Ok(length) = usize::try_from(length) else {
            return Err(DecodeError::InvalidLength {
                offset,
                length: i64::from(length),
                remaining: r.remaining(),
            });
        };
        let mut body = r.sub(length)?;
        let attributes = body.i8()?;
        let timestamp_delta = body.varlong()?;
        let offset_delta = body.varint()?;
        let key = read_varint_bytes(&mut body)?;
        let value = read_varint_bytes(&mut body)?;
        let count_at = body.offset();
        let count = body.varint()?;
        let invalid_count = DecodeError::InvalidLength {
            offset: count_at,
            length: i64::from(count),
            remaining: body.remaining(),
        };
        let count = usize::try_from(count).map_err(|_| invalid_count.clone())?;
        if count > body.remaining() {
            return Err(invalid_count);
        }
        let headers_at = body.clone();
        for _ in 0..count {
            read_header(&mut body)?;
        }
        let headers_len = headers_at.remaining() - body.remaining();
        body.finish()?;
        let mut headers_r = headers_at;
        let bytes = headers_r.take(headers_len)?;
        Ok(Record {
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers: RecordHeaders::Encoded { count, bytes },
        })
    }

    /// Appends the record (length prefix included).
    pub fn encode(&self, w: &mut Vec<u8>) -> Result<(), EncodeError> {
        let body_len = self.body_len()?;
        let body_len = i32::try_from(body_len).map_err(|_| EncodeError::TooLong {
            length: body_len,
            max: i32::MAX as usize,
        })?;
        w.put_varint(body_len);
        w.put_i8(self.attributes);
        w.put_varlong(self.timestamp_delta);
        w.put_varint(self.offset_delta);
        put_varint_bytes(w, self.key)?;
        put_varint_bytes(w, self.value)?;
        w.put_varint(varint_length(self.headers.len())?);
        for h in self.headers.iter() {
            put_varint_bytes(w, Some(h.key.as_bytes()))?;
            put_varint_bytes(w, h.value)?;
        }
        Ok(())
    }

    /// The encoded size without the length prefix.
    fn body_len(&self) -> Result<usize, EncodeError> {
        let opt = |b: Option<&[u8]>| -> Result<usize, EncodeError> {
            Ok(match b {
                None => 1,
                Some(b) => varint_size(i64::from(varint_length(b.len())?)) + b.len(),
            })
        };
        let mut n = 1
            + varint_size(self.timestamp_delta)
            + varint_size(i64::from(self.offset_delta))
            + opt(self.key)?
            + opt(self.value)?
            + varint_size(i64::from(varint_length(self.headers.len())?));
        for h in self.headers.iter() {
            n += opt(Some(h.key.as_bytes()))? + opt(h.value)?;
        }
        Ok(n)
    }
}

fn varint_length(n: usize) -> Result<i32, EncodeError> {
    i32::try_from(n).map_err(|_| EncodeError::TooLong {
        length: n,
        max: i32::MAX as usize,
    })
}

fn put_varint_bytes(w: &mut Vec<u8>, b: Option<&[u8]>) -> Result<(), EncodeError> {
    match b {
        None => w.put_varint(-1),
        Some(b) => {
            w.put_varint(varint_length(b.len())?);
            w.put_slice(b);
        }
    }
    Ok(())
}

/// The size of `v` as a zigzag varint.
fn varint_size(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

/// Iterates the records of a batch; yields an error (and stops) on a
/// malformed record, on fewer records than the header counts, or on bytes
/// left after the last one.
#[derive(Debug, Clone)]
pub struct Records<'a> {
    r: Decoder<'a>,
    left: i32,
    failed: bool,
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            if let Err(e) = self.r.finish() {
                self.failed = true;
                return Some(Err(e));
            }
            return None;
        }
        self.left -= 1;
        let record = Record::decode(&mut self.r);
        self.failed = record.is_err();
        Some(record)
    }
}

/// Appends a record batch holding `records`, compressed with `compression`.
/// The header's record count and last offset delta are taken from
/// `records` (the last record's offset delta, 0 when there are none); its
/// codec bits are replaced by `compression`'s. `scratch` holds the
/// uncompressed records while compressing (reuse it to allocate once).
/// A negative last offset delta is refused: [`RecordBatch::decode`] would
/// refuse the batch.
pub fn encode_record_batch(
    out: &mut Vec<u8>,
    header: &RecordBatchHeader,
    records: &[Record<'_>],
    compression: Compression,
    scratch: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let start = out.len();
    let record_count = varint_length(records.len())?;
    let last_offset_delta = records.last().map_or(0, |r| r.offset_delta);
    if last_offset_delta < 0 {
        // Records decode with any offset delta (the Java client does not
        // check them either), so a decoded record can carry this.
        return Err(EncodeError::InvalidBatch {
            reason: "negative last offset delta",
        });
    }
    out.put_i64(header.base_offset);
    out.put_i32(0); // batch length, patched below
    out.put_i32(header.partition_leader_epoch);
    out.put_i8(MAGIC_V2);
    out.put_u32(0); // CRC, patched below
    out.put_i16((header.attributes & !COMPRESSION_MASK) | compression.id());
    out.put_i32(last_offset_delta);
    out.put_i64(header.base_timestamp);
    out.put_i64(header.max_timestamp);
    out.put_i64(header.producer_id);
    out.put_i16(header.producer_epoch);
    out.put_i32(header.base_sequence);
    out.put_i32(record_count);
    let encoded = if compression == Compression::None {
        records.iter().try_for_each(|r| r.encode(out))
    } else {
        scratch.clear();
        records
            .iter()
            .try_for_each(|r| r.encode(scratch))
            .and_then(|()| compression.compress(scratch, out))
    };
    if let Err(e) = encoded {
        out.truncate(start);
        return Err(e);
    }
    let total = out.len() - start;
    let Ok(batch_length) = i32::try_from(total - BATCH_LENGTH_BASE_BYTES) else {
        out.truncate(start);
        return Err(EncodeError::TooLong {
            length: total,
            max: i32::MAX as usize,
        });
    };
    let batch = &mut out[start..];
    batch[BATCH_LENGTH_OFFSET..BATCH_LENGTH_OFFSET + 4]
        .copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Rewrites the base offset of the batch at the start of `batch` (outside
/// the CRC's coverage, so the CRC stays valid), as a broker does when it
/// assigns offsets. Fails if `batch` is shorter than a batch header.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) -> Result<(), DecodeError> {
    let Some(field) = batch.get_mut(BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8) else {
        return Err(DecodeError::Truncated {
            offset: BASE_OFFSET_OFFSET,
            needed: 8,
            remaining: batch.len(),
        });
    };
    field.copy_from_slice(&base_offset.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the kafka_record_batch fuzz target: a zstd batch whose last
    /// record has offset delta -1 decodes, and encoding its records again
    /// wrote a batch with a negative last offset delta, which decoding
    /// refuses. The encoder now refuses it itself.
    #[test]
    fn a_negative_last_offset_delta_is_refused_when_encoding() {
        const CRASH: &str = "000000000000000000000067ffffffff02fd68b82d0004000000020000018bcfe568\
            000000018bcfe56814000000000000002a0001000000070000000328b52ffd00586901\
            0014000000046b300476300034001402046b311276616c7565206f6e65020a74726163\
            650474310c000027000000";
        let bytes: Vec<u8> = (0..CRASH.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&CRASH[i..i + 2], 16).expect("hex"))
            .collect();
        let (batch, used) = RecordBatch::decode(&bytes).expect("the batch decodes");
        assert_eq!(used, bytes.len());
        let mut scratch = Vec::new();
        let records = batch
            .record_list(&mut scratch, DECOMPRESSED_BYTES_MAX)
            .expect("the records decompress and decode");
        assert!(records.last().is_some_and(|r| r.offset_delta < 0));

        let mut out = vec![7];
        let encoded = encode_record_batch(
            &mut out,
            &batch.header,
            &records,
            Compression::Zstd,
            &mut Vec::new(),
        );
        assert_eq!(
            encoded,
            Err(EncodeError::InvalidBatch {
                reason: "negative last offset delta"
            })
        );
        assert_eq!(out, [7], "nothing is written on error");
    }
}
