//! Test helpers: a byte builder for writing expected encodings by hand,
//! field by field, independent of the crate's encoder; and the checks every
//! golden vector goes through.

#![allow(dead_code)]

use std::fmt::Debug;

use kelp_kafka::Message;

/// Builds expected bytes one Kafka field at a time.
///
/// The methods named for a type's classic form (`str`, `arr`, ...) or its
/// compact form (`cstr`, `carr`, ...) write that form. The methods named
/// for the type alone (`string`, `array`, ...) write the form of the side
/// of the flexible-version boundary the builder was made for ([`B::at`]),
/// so one chain states a message's fields for both sides.
#[derive(Default)]
pub struct B {
    bytes: Vec<u8>,
    flexible: bool,
}

impl B {
    /// A builder for a classic (non-flexible) version.
    pub fn new() -> Self {
        B::default()
    }
    /// A builder for a flexible version if `flexible`, a classic one if not.
    pub fn at(flexible: bool) -> Self {
        B {
            bytes: Vec::new(),
            flexible,
        }
    }
    pub fn raw(mut self, bytes: &[u8]) -> Self {
        self.bytes.extend_from_slice(bytes);
        self
    }
    /// `fields` applied only `if present`: a field that some versions lack.
    pub fn when(self, present: bool, fields: impl FnOnce(Self) -> Self) -> Self {
        if present {
            fields(self)
        } else {
            self
        }
    }
    pub fn i8(self, v: i8) -> Self {
        self.raw(&v.to_be_bytes())
    }
    pub fn bool(self, v: bool) -> Self {
        self.raw(&[v as u8])
    }
    pub fn i16(self, v: i16) -> Self {
        self.raw(&v.to_be_bytes())
    }
    pub fn i32(self, v: i32) -> Self {
        self.raw(&v.to_be_bytes())
    }
    pub fn i64(self, v: i64) -> Self {
        self.raw(&v.to_be_bytes())
    }
    /// UNSIGNED_VARINT, for values below 128 (one byte) or 16384 (two).
    pub fn uvar(self, v: u32) -> Self {
        assert!(v < 16384);
        if v < 128 {
            self.raw(&[v as u8])
        } else {
            self.raw(&[(v as u8) | 0x80, (v >> 7) as u8])
        }
    }
    /// STRING: INT16 length, bytes.
    pub fn str(self, s: &str) -> Self {
        self.i16(s.len() as i16).raw(s.as_bytes())
    }
    /// NULLABLE_STRING null.
    pub fn null_str(self) -> Self {
        self.i16(-1)
    }
    /// COMPACT_STRING: UNSIGNED_VARINT length + 1, bytes.
    pub fn cstr(self, s: &str) -> Self {
        self.uvar(s.len() as u32 + 1).raw(s.as_bytes())
    }
    /// COMPACT_NULLABLE_STRING null (and compact null bytes/array).
    pub fn cnull(self) -> Self {
        self.uvar(0)
    }
    /// BYTES: INT32 length, bytes.
    pub fn bytes(self, b: &[u8]) -> Self {
        self.i32(b.len() as i32).raw(b)
    }
    /// COMPACT_BYTES.
    pub fn cbytes(self, b: &[u8]) -> Self {
        self.uvar(b.len() as u32 + 1).raw(b)
    }
    /// ARRAY length.
    pub fn arr(self, n: i32) -> Self {
        self.i32(n)
    }
    /// COMPACT_ARRAY length.
    pub fn carr(self, n: u32) -> Self {
        self.uvar(n + 1)
    }
    /// An empty tagged-field buffer.
    pub fn tags(self) -> Self {
        self.uvar(0)
    }
    pub fn uuid(self, u: [u8; 16]) -> Self {
        self.raw(&u)
    }
    /// STRING or COMPACT_STRING.
    pub fn string(self, s: &str) -> Self {
        if self.flexible {
            self.cstr(s)
        } else {
            self.str(s)
        }
    }
    /// A null NULLABLE_STRING or COMPACT_NULLABLE_STRING.
    pub fn null_string(self) -> Self {
        if self.flexible {
            self.cnull()
        } else {
            self.null_str()
        }
    }
    /// BYTES or COMPACT_BYTES.
    pub fn blob(self, b: &[u8]) -> Self {
        if self.flexible {
            self.cbytes(b)
        } else {
            self.bytes(b)
        }
    }
    /// ARRAY or COMPACT_ARRAY length.
    pub fn array(self, n: u32) -> Self {
        if self.flexible {
            self.carr(n)
        } else {
            self.arr(n as i32)
        }
    }
    /// A null ARRAY or COMPACT_ARRAY.
    pub fn null_array(self) -> Self {
        if self.flexible {
            self.cnull()
        } else {
            self.arr(-1)
        }
    }
    /// An empty tagged-field buffer in a flexible version; nothing in a
    /// classic one.
    pub fn tagged(self) -> Self {
        if self.flexible {
            self.tags()
        } else {
            self
        }
    }
    pub fn done(self) -> Vec<u8> {
        self.bytes
    }
}

/// Checks a golden vector: `msg` encodes at `version` to exactly
/// `expected`, `expected` decodes to exactly `msg`, and every truncation of
/// `expected` fails to decode (without panicking).
pub fn golden<'a, M>(msg: &M, version: i16, expected: &'a [u8])
where
    M: Message<'a> + PartialEq + Debug,
{
    let encoded = msg.to_bytes(version).expect("encode");
    assert_eq!(
        encoded,
        expected,
        "{:?} v{version}: encoding differs from the golden bytes",
        M::API_KEY
    );
    let decoded = M::decode_exact(expected, version).expect("decode golden bytes");
    assert_eq!(
        &decoded,
        msg,
        "{:?} v{version}: decoded value differs",
        M::API_KEY
    );
    for cut in 0..expected.len() {
        assert!(
            M::decode_exact(&expected[..cut], version).is_err(),
            "{:?} v{version}: truncation at {cut} of {} decoded",
            M::API_KEY,
            expected.len()
        );
    }
}

/// Checks the golden vectors of one message at each of `versions`: the
/// message `msg` makes for a version against the bytes `fields` writes for
/// it on a builder for its side of the flexible boundary, the first
/// flexible version being `flexible_from` (see [`golden`]).
pub fn golden_versions<M>(
    versions: &[i16],
    flexible_from: i16,
    msg: impl Fn(i16) -> M,
    fields: impl Fn(B, i16) -> B,
) where
    M: for<'a> Message<'a> + PartialEq + Debug,
{
    for &version in versions {
        let expected = fields(B::at(version >= flexible_from), version).done();
        golden(&msg(version), version, &expected);
    }
}

/// `value` from version `first` on, the default before it: what a field
/// that older versions lack holds (they decode it as the default).
pub fn since<T: Default>(version: i16, first: i16, value: T) -> T {
    if version >= first {
        value
    } else {
        T::default()
    }
}

pub mod samples;
