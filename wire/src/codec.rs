//! Bounds-checked little-endian cursor over untrusted bytes, and its writing
//! twin. Every read returns `DecodeError::Truncated` rather than panicking.

use crate::error::DecodeError;
use crate::limits::{LIST_ITEMS_MAX, STRING_BYTES_MAX};

pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Self { bytes, what }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError::Truncated {
                what: self.what,
                need: n as u64,
                have: self.bytes.len() as u64,
            });
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A string's bytes, not yet checked to be UTF-8: u16 length (at most
    /// `STRING_BYTES_MAX`, the most an encoder writes), then that many bytes.
    pub(crate) fn string_bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u16()?;
        if u32::from(len) > STRING_BYTES_MAX {
            return Err(DecodeError::TooLarge {
                what: "string",
                len: u64::from(len),
                max: u64::from(STRING_BYTES_MAX),
            });
        }
        self.take(usize::from(len))
    }

    /// A string: u16 length, then that many UTF-8 bytes.
    pub(crate) fn string(&mut self) -> Result<String, DecodeError> {
        let bytes = self.string_bytes()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::Invalid {
            what: self.what,
            reason: "string is not UTF-8",
        })
    }

    /// A list count: u32, at most `LIST_ITEMS_MAX`, and plausible for the
    /// bytes left given each item's minimum size (so a forged count cannot
    /// make the decoder reserve memory it will never fill).
    pub(crate) fn count(&mut self, item_bytes_min: usize) -> Result<usize, DecodeError> {
        let n = self.u32()?;
        if n > LIST_ITEMS_MAX {
            return Err(DecodeError::TooLarge {
                what: "list",
                len: u64::from(n),
                max: u64::from(LIST_ITEMS_MAX),
            });
        }
        let n = n as usize;
        if n.saturating_mul(item_bytes_min) > self.bytes.len() {
            return Err(DecodeError::Truncated {
                what: self.what,
                need: (n * item_bytes_min) as u64,
                have: self.bytes.len() as u64,
            });
        }
        Ok(n)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }

    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Invalid {
                what: self.what,
                reason: "trailing bytes after the last field",
            })
        }
    }
}

pub(crate) struct Writer<'a> {
    pub(crate) out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    pub(crate) fn u8(&mut self, v: u8) {
        self.out.push(v);
    }
    pub(crate) fn u16(&mut self, v: u16) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn bytes(&mut self, v: &[u8]) {
        self.out.extend_from_slice(v);
    }
    /// Strings longer than `STRING_BYTES_MAX` are cut at a char boundary:
    /// an encoder never produces what the decoder would refuse.
    pub(crate) fn string(&mut self, s: &str) {
        let mut end = s.len().min(STRING_BYTES_MAX as usize);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16);
        self.bytes(&s.as_bytes()[..end]);
    }
    /// Callers keep lists under `LIST_ITEMS_MAX`; a longer one is written
    /// as is and refused by the peer's decoder.
    pub(crate) fn count(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
}

/// Little-endian field readers at a fixed offset of a slice whose length the
/// caller already checked.
#[inline]
pub(crate) fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}
#[inline]
pub(crate) fn le_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}
#[inline]
pub(crate) fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}
#[inline]
pub(crate) fn le_i64(bytes: &[u8], at: usize) -> i64 {
    le_u64(bytes, at) as i64
}
