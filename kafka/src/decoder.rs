//! The decoder of Kafka's primitive types over a byte slice.
//!
//! Owns: bounds checks, length prefixes (classic and compact), varints,
//! tagged-field buffers. Must never panic or allocate more than the input
//! could hold: every length is checked against the bytes left before
//! anything is allocated, and an array of `n` elements is only accepted when
//! at least `n` bytes are left (every element takes at least one byte).

use crate::error::DecodeError;

/// A Kafka UUID (topic ids): 16 bytes, big-endian as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// The all-zero UUID Kafka uses for "no id".
    pub const ZERO: Uuid = Uuid([0; 16]);
}

/// Reads Kafka primitives from a byte slice, front to back.
#[derive(Debug, Clone)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Added to `pos` in errors, so a sub-decoder reports offsets in its
    /// parent's buffer.
    base: usize,
}

impl<'a> Decoder<'a> {
    /// A decoder at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Decoder {
            buf,
            pos: 0,
            base: 0,
        }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The offset of the next byte, from the start of the buffer.
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Fails unless every byte was read.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                offset: self.offset(),
                count: self.remaining(),
            })
        }
    }

    /// The next `n` bytes, borrowed.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated {
                offset: self.offset(),
                needed: n,
                remaining: self.remaining(),
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// A sub-decoder over the next `n` bytes; this decoder skips them.
    pub fn sub(&mut self, n: usize) -> Result<Decoder<'a>, DecodeError> {
        let base = self.offset();
        let buf = self.take(n)?;
        Ok(Decoder { buf, pos: 0, base })
    }

    /// INT8.
    pub fn i8(&mut self) -> Result<i8, DecodeError> {
        Ok(i8::from_be_bytes(self.array()?))
    }

    /// INT16, big-endian.
    pub fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    /// INT32, big-endian.
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    /// INT64, big-endian.
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    /// UINT32, big-endian (CRCs).
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// BOOLEAN: one byte, zero is false, anything else true (as Kafka reads it).
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        Ok(self.i8()? != 0)
    }

    /// UUID: 16 bytes.
    pub fn uuid(&mut self) -> Result<Uuid, DecodeError> {
        Ok(Uuid(self.array()?))
    }

    fn raw_varint(&mut self, max_bytes: usize) -> Result<u64, DecodeError> {
        let start = self.offset();
        let mut value = 0u64;
        for i in 0..max_bytes {
            let byte = self.array::<1>()?[0];
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::VarintTooLong {
            offset: start,
            max_bytes,
        })
    }

    /// UNSIGNED_VARINT: up to 5 bytes, 7 bits each, least significant first.
    /// Bits beyond 32 in the fifth byte are ignored, as Kafka does.
    pub fn unsigned_varint(&mut self) -> Result<u32, DecodeError> {
        Ok(self.raw_varint(5)? as u32)
    }

    /// VARINT: a zigzag-encoded signed 32-bit integer.
    pub fn varint(&mut self) -> Result<i32, DecodeError> {
        let raw = self.unsigned_varint()?;
        Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
    }

    /// VARLONG: a zigzag-encoded signed 64-bit integer, up to 10 bytes.
    pub fn varlong(&mut self) -> Result<i64, DecodeError> {
        let raw = self.raw_varint(10)?;
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }

    /// A length prefix: INT16 (`short`) or INT32 for classic fields, an
    /// UNSIGNED_VARINT holding length + 1 for compact ones. `None` is null.
    /// The length is checked against the bytes left (`per_item_bytes_min`
    /// bytes per item).
    fn length(
        &mut self,
        compact: bool,
        short: bool,
        per_item_bytes_min: usize,
    ) -> Result<Option<usize>, DecodeError> {
        let offset = self.offset();
        let length: i64 = if compact {
            i64::from(self.unsigned_varint()?) - 1
        } else if short {
            i64::from(self.i16()?)
        } else {
            i64::from(self.i32()?)
        };
        if length == -1 {
            return Ok(None);
        }
        let invalid = DecodeError::InvalidLength {
            offset,
            length,
            remaining: self.remaining(),
        };
        let Ok(n) = usize::try_from(length) else {
            return Err(invalid);
        };
        if n.saturating_mul(per_item_bytes_min) > self.remaining() {
            return Err(invalid);
        }
        Ok(Some(n))
    }

    fn non_null<T>(offset: usize, value: Option<T>) -> Result<T, DecodeError> {
        value.ok_or(DecodeError::UnexpectedNull { offset })
    }

    /// NULLABLE_STRING or COMPACT_NULLABLE_STRING, borrowed.
    pub fn nullable_str(&mut self, compact: bool) -> Result<Option<&'a str>, DecodeError> {
        let Some(n) = self.length(compact, true, 1)? else {
            return Ok(None);
        };
        let offset = self.offset();
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes)
            .map(Some)
            .map_err(|_| DecodeError::InvalidUtf8 { offset })
    }

    /// STRING or COMPACT_STRING, borrowed.
    pub fn str(&mut self, compact: bool) -> Result<&'a str, DecodeError> {
        let offset = self.offset();
        let value = self.nullable_str(compact)?;
        Self::non_null(offset, value)
    }

    /// STRING or COMPACT_STRING, owned.
    pub fn string(&mut self, compact: bool) -> Result<String, DecodeError> {
        Ok(self.str(compact)?.to_owned())
    }

    /// NULLABLE_STRING or COMPACT_NULLABLE_STRING, owned.
    pub fn nullable_string(&mut self, compact: bool) -> Result<Option<String>, DecodeError> {
        Ok(self.nullable_str(compact)?.map(str::to_owned))
    }

    /// NULLABLE_BYTES or COMPACT_NULLABLE_BYTES (and RECORDS), borrowed.
    pub fn nullable_bytes(&mut self, compact: bool) -> Result<Option<&'a [u8]>, DecodeError> {
        match self.length(compact, false, 1)? {
            None => Ok(None),
            Some(n) => self.take(n).map(Some),
        }
    }

    /// BYTES or COMPACT_BYTES, borrowed.
    pub fn bytes(&mut self, compact: bool) -> Result<&'a [u8], DecodeError> {
        let offset = self.offset();
        let value = self.nullable_bytes(compact)?;
        Self::non_null(offset, value)
    }

    /// A nullable ARRAY or COMPACT_ARRAY of items read by `item`.
    pub fn nullable_array<T>(
        &mut self,
        compact: bool,
        mut item: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Option<Vec<T>>, DecodeError> {
        let Some(n) = self.length(compact, false, 1)? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(item(self)?);
        }
        Ok(Some(out))
    }

    /// An ARRAY or COMPACT_ARRAY of items read by `item`.
    pub fn array_of<T>(
        &mut self,
        compact: bool,
        item: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let offset = self.offset();
        let value = self.nullable_array(compact, item)?;
        Self::non_null(offset, value)
    }

    /// A tagged-field buffer: `handle(tag, field)` is called for each field
    /// with a decoder over exactly its bytes and returns whether it knew the
    /// tag; unknown tags are skipped. A known field must be read whole.
    pub fn tagged_fields(
        &mut self,
        mut handle: impl FnMut(u32, &mut Decoder<'a>) -> Result<bool, DecodeError>,
    ) -> Result<(), DecodeError> {
        let count = self.unsigned_varint()?;
        for _ in 0..count {
            let tag = self.unsigned_varint()?;
            let size_offset = self.offset();
            let size = self.unsigned_varint()? as usize;
            if size > self.remaining() {
                return Err(DecodeError::InvalidLength {
                    offset: size_offset,
                    length: size as i64,
                    remaining: self.remaining(),
                });
            }
            let mut field = self.sub(size)?;
            if handle(tag, &mut field)? {
                field.finish()?;
            }
        }
        Ok(())
    }

    /// A tagged-field buffer whose fields are all skipped.
    pub fn skip_tagged_fields(&mut self) -> Result<(), DecodeError> {
        self.tagged_fields(|_, _| Ok(false))
    }
}
