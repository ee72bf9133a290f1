//! The encoder of Kafka's primitive types, appending to a `Vec<u8>`.
//!
//! Owns: big-endian integers, varints, length prefixes (classic and
//! compact) and tagged-field buffers. Lengths a prefix cannot hold are an
//! [`EncodeError`], never a silently truncated field.

use crate::decoder::Uuid;
use crate::error::EncodeError;

/// The largest length of a classic (INT16-prefixed) string.
pub const SHORT_LENGTH_MAX: usize = i16::MAX as usize;
/// The largest length of an INT32-prefixed field or a compact one.
pub const LENGTH_MAX: usize = i32::MAX as usize - 1;

/// Appends Kafka primitives. Implemented for `Vec<u8>`.
pub trait Encoder {
    /// Raw bytes, no prefix.
    fn put_slice(&mut self, bytes: &[u8]);
    /// INT8.
    fn put_i8(&mut self, v: i8);
    /// INT16, big-endian.
    fn put_i16(&mut self, v: i16);
    /// INT32, big-endian.
    fn put_i32(&mut self, v: i32);
    /// INT64, big-endian.
    fn put_i64(&mut self, v: i64);
    /// UINT32, big-endian.
    fn put_u32(&mut self, v: u32);
    /// BOOLEAN: 1 or 0.
    fn put_bool(&mut self, v: bool);
    /// UUID: 16 bytes.
    fn put_uuid(&mut self, v: Uuid);
    /// UNSIGNED_VARINT.
    fn put_unsigned_varint(&mut self, v: u32);
    /// VARINT (zigzag).
    fn put_varint(&mut self, v: i32);
    /// VARLONG (zigzag).
    fn put_varlong(&mut self, v: i64);
    /// A length prefix: INT16 (`short`), INT32, or compact (length + 1 as
    /// UNSIGNED_VARINT). `None` writes null (-1, or 0 when compact).
    fn put_length(
        &mut self,
        compact: bool,
        short: bool,
        len: Option<usize>,
    ) -> Result<(), EncodeError>;
    /// STRING or COMPACT_STRING.
    fn put_str(&mut self, compact: bool, v: &str) -> Result<(), EncodeError>;
    /// NULLABLE_STRING or COMPACT_NULLABLE_STRING.
    fn put_nullable_str(&mut self, compact: bool, v: Option<&str>) -> Result<(), EncodeError>;
    /// BYTES or COMPACT_BYTES.
    fn put_bytes(&mut self, compact: bool, v: &[u8]) -> Result<(), EncodeError>;
    /// NULLABLE_BYTES or COMPACT_NULLABLE_BYTES (and RECORDS).
    fn put_nullable_bytes(&mut self, compact: bool, v: Option<&[u8]>) -> Result<(), EncodeError>;
    /// An ARRAY or COMPACT_ARRAY whose items `item` writes.
    fn put_array<T>(
        &mut self,
        compact: bool,
        items: &[T],
        item: impl FnMut(&mut Self, &T) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError>;
    /// A nullable ARRAY or COMPACT_ARRAY.
    fn put_nullable_array<T>(
        &mut self,
        compact: bool,
        items: Option<&[T]>,
        item: impl FnMut(&mut Self, &T) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError>;
    /// A tagged-field buffer holding `fields` as (tag, encoded value), in
    /// ascending tag order. Fields whose value is the default must be left
    /// out by the caller, so the usual buffer is the single byte 0.
    fn put_tagged_fields(&mut self, fields: &[(u32, &[u8])]) -> Result<(), EncodeError>;
    /// An empty tagged-field buffer (one zero byte).
    fn put_empty_tagged_fields(&mut self);
}

impl Encoder for Vec<u8> {
    fn put_slice(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
    fn put_i8(&mut self, v: i8) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_i16(&mut self, v: i16) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_i32(&mut self, v: i32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_i64(&mut self, v: i64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_bool(&mut self, v: bool) {
        self.push(u8::from(v));
    }
    fn put_uuid(&mut self, v: Uuid) {
        self.extend_from_slice(&v.0);
    }
    fn put_unsigned_varint(&mut self, v: u32) {
        put_raw_varint(self, u64::from(v));
    }
    fn put_varint(&mut self, v: i32) {
        put_raw_varint(self, u64::from(((v << 1) ^ (v >> 31)) as u32));
    }
    fn put_varlong(&mut self, v: i64) {
        put_raw_varint(self, ((v << 1) ^ (v >> 63)) as u64);
    }
    fn put_length(
        &mut self,
        compact: bool,
        short: bool,
        len: Option<usize>,
    ) -> Result<(), EncodeError> {
        let max = if short && !compact {
            SHORT_LENGTH_MAX
        } else {
            LENGTH_MAX
        };
        match len {
            Some(n) if n > max => Err(EncodeError::TooLong { length: n, max }),
            // The guard above keeps every cast below in range.
            Some(n) if compact => {
                self.put_unsigned_varint(n as u32 + 1);
                Ok(())
            }
            Some(n) if short => {
                self.put_i16(n as i16);
                Ok(())
            }
            Some(n) => {
                self.put_i32(n as i32);
                Ok(())
            }
            None if compact => {
                self.put_unsigned_varint(0);
                Ok(())
            }
            None if short => {
                self.put_i16(-1);
                Ok(())
            }
            None => {
                self.put_i32(-1);
                Ok(())
            }
        }
    }
    fn put_str(&mut self, compact: bool, v: &str) -> Result<(), EncodeError> {
        self.put_length(compact, true, Some(v.len()))?;
        self.extend_from_slice(v.as_bytes());
        Ok(())
    }
    fn put_nullable_str(&mut self, compact: bool, v: Option<&str>) -> Result<(), EncodeError> {
        match v {
            Some(s) => self.put_str(compact, s),
            None => self.put_length(compact, true, None),
        }
    }
    fn put_bytes(&mut self, compact: bool, v: &[u8]) -> Result<(), EncodeError> {
        self.put_length(compact, false, Some(v.len()))?;
        self.extend_from_slice(v);
        Ok(())
    }
    fn put_nullable_bytes(&mut self, compact: bool, v: Option<&[u8]>) -> Result<(), EncodeError> {
        match v {
            Some(b) => self.put_bytes(compact, b),
            None => self.put_length(compact, false, None),
        }
    }
    fn put_array<T>(
        &mut self,
        compact: bool,
        items: &[T],
        mut item: impl FnMut(&mut Self, &T) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        self.put_length(compact, false, Some(items.len()))?;
        for i in items {
            item(self, i)?;
        }
        Ok(())
    }
    fn put_nullable_array<T>(
        &mut self,
        compact: bool,
        items: Option<&[T]>,
        item: impl FnMut(&mut Self, &T) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        match items {
            Some(items) => self.put_array(compact, items, item),
            None => self.put_length(compact, false, None),
        }
    }
    fn put_tagged_fields(&mut self, fields: &[(u32, &[u8])]) -> Result<(), EncodeError> {
        self.put_unsigned_varint(fields.len() as u32);
        for (tag, value) in fields {
            self.put_unsigned_varint(*tag);
            if value.len() > LENGTH_MAX {
                return Err(EncodeError::TooLong {
                    length: value.len(),
                    max: LENGTH_MAX,
                });
            }
            self.put_unsigned_varint(value.len() as u32);
            self.extend_from_slice(value);
        }
        Ok(())
    }
    fn put_empty_tagged_fields(&mut self) {
        self.push(0);
    }
}

fn put_raw_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}
