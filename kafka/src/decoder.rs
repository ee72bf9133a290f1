//! The decoder of Kafka's primitive types over a byte slice.
//!
//! Owns: bounds checks, length prefixes (classic and compact), varints,
//! tagged-field buffers. Must never panic or allocate more than the input
//! could hold: every length is checked against the bytes left before
//! anything is allocated, and an array of `n` elements is only accepted when
//! at least `n` bytes are left (every element takes at least one byte). An
//! element can take far more memory than that one byte, so an array
//! reserves room for at most [`ARRAY_RESERVE_BYTES_MAX`] up front and grows
//! only as its elements decode.

use crate::error::DecodeError;

/// The most memory an array reserves before its elements are read. Its
/// length is checked at one byte per element, but an element in memory is
/// often tens of bytes (a CreateTopics topic is 80, at least 16 on the
/// wire), so reserving the whole length would let a 100 MiB frame ask for
/// gigabytes. Past this, the array grows as elements actually decode.
pub const ARRAY_RESERVE_BYTES_MAX: usize = 64 * 1024;

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
        let reserve = ARRAY_RESERVE_BYTES_MAX / std::mem::size_of::<T>().max(1);
        let mut out = Vec::with_capacity(n.min(reserve));
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

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::encoder::Encoder;

    fn enc(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut w = Vec::new();
        f(&mut w);
        w
    }

    #[test]
    fn varints_match_the_spec_examples() {
        // Zigzag: 0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, 63 -> 126, -64 -> 127, 64 -> 128.
        let cases: [(i32, &[u8]); 8] = [
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (-2, &[0x03]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (300, &[0xd8, 0x04]),
        ];
        for (v, bytes) in cases {
            assert_eq!(enc(|w| w.put_varint(v)), bytes, "{v}");
            assert_eq!(Decoder::new(bytes).varint(), Ok(v));
        }
        assert_eq!(enc(|w| w.put_unsigned_varint(300)), [0xac, 0x02]);
        assert_eq!(Decoder::new(&[0xac, 0x02]).unsigned_varint(), Ok(300));
        for v in [i32::MIN, i32::MAX, -1_000_000, 1_000_000] {
            let bytes = enc(|w| w.put_varint(v));
            assert!(bytes.len() <= 5);
            assert_eq!(Decoder::new(&bytes).varint(), Ok(v));
        }
        for v in [i64::MIN, i64::MAX, 0, -1, 1 << 40] {
            let bytes = enc(|w| w.put_varlong(v));
            assert!(bytes.len() <= 10);
            assert_eq!(Decoder::new(&bytes).varlong(), Ok(v));
        }
        assert_eq!(
            enc(|w| w.put_unsigned_varint(u32::MAX)),
            [0xff, 0xff, 0xff, 0xff, 0x0f]
        );
    }

    #[test]
    fn overlong_and_truncated_varints_are_errors() {
        assert_eq!(
            Decoder::new(&[0x80; 6]).unsigned_varint(),
            Err(DecodeError::VarintTooLong {
                offset: 0,
                max_bytes: 5
            })
        );
        assert!(matches!(
            Decoder::new(&[0x80; 11]).varlong(),
            Err(DecodeError::VarintTooLong { max_bytes: 10, .. })
        ));
        assert!(matches!(
            Decoder::new(&[0x80, 0x80]).varint(),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn strings_classic_and_compact() {
        assert_eq!(
            enc(|w| w.put_str(false, "ab").expect("encode")),
            [0, 2, b'a', b'b']
        );
        assert_eq!(
            enc(|w| w.put_str(true, "ab").expect("encode")),
            [3, b'a', b'b']
        );
        assert_eq!(
            enc(|w| w.put_nullable_str(false, None).expect("encode")),
            [0xff, 0xff]
        );
        assert_eq!(
            enc(|w| w.put_nullable_str(true, None).expect("encode")),
            [0]
        );
        assert_eq!(Decoder::new(&[3, b'a', b'b']).str(true), Ok("ab"));
        assert_eq!(Decoder::new(&[0]).nullable_str(true), Ok(None));
        assert_eq!(Decoder::new(&[0xff, 0xff]).nullable_str(false), Ok(None));
        assert_eq!(
            Decoder::new(&[0xff, 0xff]).str(false),
            Err(DecodeError::UnexpectedNull { offset: 0 })
        );
        assert_eq!(
            Decoder::new(&[0, 1, 0xff]).str(false),
            Err(DecodeError::InvalidUtf8 { offset: 2 })
        );
        // A length of -2 is not null, it is invalid.
        assert!(matches!(
            Decoder::new(&[0xff, 0xfe]).nullable_str(false),
            Err(DecodeError::InvalidLength { length: -2, .. })
        ));
        let long = "x".repeat(crate::encoder::SHORT_LENGTH_MAX + 1);
        assert!(Vec::new().put_str(false, &long).is_err());
        assert!(Vec::new().put_str(true, &long).is_ok());
    }

    #[test]
    fn bytes_and_arrays_are_bounded_by_the_input() {
        assert_eq!(Decoder::new(&[0, 0, 0, 1, 7]).bytes(false), Ok(&[7u8][..]));
        assert_eq!(
            Decoder::new(&[0xff, 0xff, 0xff, 0xff]).nullable_bytes(false),
            Ok(None)
        );
        assert!(matches!(
            Decoder::new(&[0, 0, 0, 5, 7]).bytes(false),
            Err(DecodeError::InvalidLength { length: 5, .. })
        ));
        // An array claiming a billion elements over 2 bytes.
        let mut r = Decoder::new(&[0x3b, 0x9a, 0xca, 0x00, 0, 0]);
        assert!(matches!(
            r.array_of(false, |r| r.i8()),
            Err(DecodeError::InvalidLength { .. })
        ));
        let mut r = Decoder::new(&[3, 1, 2]);
        assert_eq!(r.array_of(true, |r| r.i8()), Ok(vec![1, 2]));
        assert_eq!(
            Decoder::new(&[0]).nullable_array(true, |r| r.i8()),
            Ok(None)
        );
    }

    /// The unit tests' allocator: the system's, noting the largest single
    /// allocation asked for, so a test can see what a decoder reserved.
    struct LargestAllocation;

    static LARGEST_ALLOCATION_BYTES: AtomicUsize = AtomicUsize::new(0);

    // SAFETY: every call is forwarded to `System` unchanged.
    unsafe impl GlobalAlloc for LargestAllocation {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            LARGEST_ALLOCATION_BYTES.fetch_max(layout.size(), Ordering::Relaxed);
            // SAFETY: the caller upholds `alloc`'s contract.
            unsafe { System.alloc(layout) }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            LARGEST_ALLOCATION_BYTES.fetch_max(layout.size(), Ordering::Relaxed);
            // SAFETY: the caller upholds `alloc_zeroed`'s contract.
            unsafe { System.alloc_zeroed(layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            LARGEST_ALLOCATION_BYTES.fetch_max(new_size, Ordering::Relaxed);
            // SAFETY: the caller upholds `realloc`'s contract.
            unsafe { System.realloc(ptr, layout, new_size) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: the caller upholds `dealloc`'s contract.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static ALLOCATOR: LargestAllocation = LargestAllocation;

    /// A CreateTopics v0 request as large as a frame may be (100 MiB)
    /// whose topics array claims as many topics as bytes are left made the
    /// decoder reserve 100 Mi topics of 80 bytes, an 8.4 GB allocation,
    /// before the first topic failed to decode (the kafka_request fuzz
    /// target reports it as out-of-memory on this input; its 8 KiB inputs
    /// cannot reach it). It now fails with the first topic's error having
    /// reserved at most ARRAY_RESERVE_BYTES_MAX.
    #[test]
    fn an_array_claiming_every_byte_left_is_not_reserved_up_front() {
        let count = crate::request::REQUEST_FRAME_BYTES_MAX - 14;
        let mut frame = Vec::with_capacity(14 + count);
        frame.extend_from_slice(&[0, 19, 0, 0, 0, 0, 0, 1]); // CreateTopics v0, correlation id 1
        frame.extend_from_slice(&[0xff, 0xff]); // client id null
        frame.extend_from_slice(&(count as i32).to_be_bytes()); // topics
        frame.resize(14 + count, 0xff); // the first topic's name is null
        assert_eq!(
            crate::Request::decode(&frame),
            Err(DecodeError::UnexpectedNull { offset: 14 })
        );
        // The frame itself is the largest allocation of any unit test.
        let largest = LARGEST_ALLOCATION_BYTES.load(Ordering::Relaxed);
        assert!(largest <= frame.capacity(), "{largest} bytes reserved");
    }

    #[test]
    fn tagged_fields_known_unknown_and_malformed() {
        // Two fields: tag 1 (2 bytes, known) and tag 7 (1 byte, unknown).
        let bytes = [2, 1, 2, 0x12, 0x34, 7, 1, 0xaa, 0x55];
        let mut r = Decoder::new(&bytes);
        let mut seen = None;
        r.tagged_fields(|tag, field| {
            if tag == 1 {
                seen = Some(field.i16()?);
                Ok(true)
            } else {
                Ok(false)
            }
        })
        .expect("tags");
        assert_eq!(seen, Some(0x1234));
        assert_eq!(r.i8(), Ok(0x55));
        // A known field not read whole is an error.
        let mut r = Decoder::new(&bytes);
        let err = r.tagged_fields(|tag, field| {
            field.i8()?;
            Ok(tag == 1)
        });
        assert!(matches!(
            err,
            Err(DecodeError::TrailingBytes { offset: 4, .. })
        ));
        // A field size past the end.
        assert!(Decoder::new(&[1, 0, 9, 1]).skip_tagged_fields().is_err());
        // Encoding: empty is one zero byte; with fields, count, tag, size, value.
        assert_eq!(enc(|w| w.put_empty_tagged_fields()), [0]);
        assert_eq!(
            enc(|w| w.put_tagged_fields(&[(0, &[9, 9])]).expect("encode")),
            [1, 0, 2, 9, 9]
        );
    }

    #[test]
    fn errors_report_offsets_in_the_outer_buffer() {
        let bytes = [0, 0, 2, 1, 0x80];
        let mut r = Decoder::new(&bytes);
        r.take(2).expect("skip");
        let mut sub = r.sub(3).expect("sub");
        assert_eq!(sub.i8(), Ok(2));
        assert_eq!(sub.offset(), 3);
        assert!(matches!(
            sub.i32(),
            Err(DecodeError::Truncated {
                offset: 3,
                needed: 4,
                remaining: 2
            })
        ));
    }
}
