//! Payload references: the small record value that stands for a large value
//! stored whole in the filer.
//!
//! A producer uploads a large value to the filer first, then publishes a
//! record whose value is the reference below and whose attributes carry
//! [`crate::batch::RECORD_ATTR_REFERENCE`]. The broker appends those 40
//! bytes like any value; readers fetch the payload when they need it.
//!
//! ```text
//! payload reference (40 bytes)
//! offset size field
//!      0    1 version            1
//!      1    3 reserved           0
//!      4    4 checksum           CRC-32C of the whole payload
//!      8    8 length             u64, bytes of the payload
//!     16    8 created            u64 ms since the Unix epoch, when the
//!                                upload began (part of the payload's name)
//!     24   16 nonce              u128, random, chosen by the uploader
//! ```
//!
//! The payload lives at `<topic prefix>/payloads/<bucket>/<name>`, where
//! `bucket` is `created / PAYLOAD_BUCKET_MS` written as 10 decimal digits
//! and `name` is `created` as 16 hex digits, `-`, `nonce` as 32 hex digits.
//! Creation time and 128 random bits make names that never collide; the
//! bucket groups them by hour so the broker's orphan sweep lists only the
//! hours it has not settled.

use crate::codec::{le_u32, le_u64};
use crate::error::DecodeError;

/// Bytes of an encoded reference.
pub const PAYLOAD_REF_BYTES: usize = 40;
/// The reference version this build writes and reads.
pub const PAYLOAD_REF_VERSION: u8 = 1;
/// Payloads are grouped into directories of this many ms of creation time.
pub const PAYLOAD_BUCKET_MS: u64 = 3_600_000;

const CHECKSUM_OFFSET: usize = 4;
const LENGTH_OFFSET: usize = 8;
const CREATED_OFFSET: usize = 16;
const NONCE_OFFSET: usize = 24;
/// Bytes of a payload's object name, [`PayloadId::object_name`].
pub const NAME_BYTES: usize = 16 + 1 + 32;

const _: () = assert!(NONCE_OFFSET + 16 == PAYLOAD_REF_BYTES);

/// The name of one uploaded payload: unique within its topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PayloadId {
    /// When the upload began, ms since the Unix epoch.
    pub created_ms: u64,
    /// Random bits chosen by the uploader.
    pub nonce: u128,
}

impl PayloadId {
    /// The hour bucket the payload is stored under.
    pub fn bucket(&self) -> u64 {
        self.created_ms / PAYLOAD_BUCKET_MS
    }

    /// The object's file name: `<created:016x>-<nonce:032x>`.
    pub fn object_name(&self) -> String {
        format!("{:016x}-{:032x}", self.created_ms, self.nonce)
    }

    /// Parse an object name written by [`PayloadId::object_name`]; `None`
    /// for anything else (exact length, lowercase hex only).
    pub fn parse_object_name(name: &str) -> Option<PayloadId> {
        let bytes = name.as_bytes();
        if bytes.len() != NAME_BYTES || bytes[16] != b'-' {
            return None;
        }
        let lower_hex = |s: &[u8]| s.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
        if !lower_hex(&bytes[..16]) || !lower_hex(&bytes[17..]) {
            return None;
        }
        Some(PayloadId {
            created_ms: u64::from_str_radix(&name[..16], 16).ok()?,
            nonce: u128::from_str_radix(&name[17..], 16).ok()?,
        })
    }
}

/// A reference to a payload: where it is, how long, and its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PayloadRef {
    pub id: PayloadId,
    /// Bytes of the payload.
    pub length: u64,
    /// CRC-32C of the payload.
    pub checksum: u32,
}

impl PayloadRef {
    /// The 40 bytes a reference record carries as its value.
    pub fn encode(&self) -> [u8; PAYLOAD_REF_BYTES] {
        let mut b = [0u8; PAYLOAD_REF_BYTES];
        b[0] = PAYLOAD_REF_VERSION;
        b[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&self.checksum.to_le_bytes());
        b[LENGTH_OFFSET..LENGTH_OFFSET + 8].copy_from_slice(&self.length.to_le_bytes());
        b[CREATED_OFFSET..CREATED_OFFSET + 8].copy_from_slice(&self.id.created_ms.to_le_bytes());
        b[NONCE_OFFSET..NONCE_OFFSET + 16].copy_from_slice(&self.id.nonce.to_le_bytes());
        b
    }

    /// Decode a reference record's value: exactly 40 bytes, version 1,
    /// reserved bytes zero.
    pub fn decode(bytes: &[u8]) -> Result<PayloadRef, DecodeError> {
        const WHAT: &str = "payload reference";
        if bytes.len() != PAYLOAD_REF_BYTES {
            return Err(DecodeError::Invalid {
                what: WHAT,
                reason: "a reference value is exactly 40 bytes",
            });
        }
        if bytes[0] != PAYLOAD_REF_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                what: WHAT,
                version: u16::from(bytes[0]),
            });
        }
        if bytes[1..4] != [0, 0, 0] {
            return Err(DecodeError::Invalid {
                what: WHAT,
                reason: "reserved bytes are not zero",
            });
        }
        let mut nonce = [0u8; 16];
        nonce.copy_from_slice(&bytes[NONCE_OFFSET..NONCE_OFFSET + 16]);
        Ok(PayloadRef {
            id: PayloadId {
                created_ms: le_u64(bytes, CREATED_OFFSET),
                nonce: u128::from_le_bytes(nonce),
            },
            length: le_u64(bytes, LENGTH_OFFSET),
            checksum: le_u32(bytes, CHECKSUM_OFFSET),
        })
    }
}

impl std::fmt::Display for PayloadRef {
    /// `ref:<path> length=<n> crc32c=<hex>`, as `kelp sub` and `kelp chunk
    /// cat` print references, `<path>` being the payload's object path
    /// below its topic's prefix (control's `filer_layout::payload`, whose
    /// tests hold the two together).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ref:payloads/{:010}/{} length={} crc32c={:08x}",
            self.id.bucket(),
            self.id.object_name(),
            self.length,
            self.checksum
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sample() -> PayloadRef {
        PayloadRef {
            id: PayloadId {
                created_ms: 1_764_520_000_123,
                nonce: 0x0011_2233_4455_6677_8899_aabb_ccdd_eeff,
            },
            length: 4 << 20,
            checksum: 0xdead_beef,
        }
    }

    #[test]
    fn golden_bytes() {
        let b = sample().encode();
        let mut want = vec![1u8, 0, 0, 0];
        want.extend_from_slice(&0xdead_beefu32.to_le_bytes());
        want.extend_from_slice(&(4u64 << 20).to_le_bytes());
        want.extend_from_slice(&1_764_520_000_123u64.to_le_bytes());
        want.extend_from_slice(&0x0011_2233_4455_6677_8899_aabb_ccdd_eeffu128.to_le_bytes());
        assert_eq!(b.to_vec(), want);
        assert_eq!(PayloadRef::decode(&b).unwrap(), sample());
    }

    #[test]
    fn names_and_paths() {
        let id = sample().id;
        assert_eq!(
            id.object_name(),
            "0000019ad5967a7b-00112233445566778899aabbccddeeff"
        );
        assert_eq!(id.bucket(), 1_764_520_000_123 / 3_600_000);
        assert_eq!(
            sample().to_string(),
            "ref:payloads/0000490144/0000019ad5967a7b-00112233445566778899aabbccddeeff \
             length=4194304 crc32c=deadbeef"
        );
        assert_eq!(PayloadId::parse_object_name(&id.object_name()), Some(id));
        for bad in [
            "",
            "0000019ad5967a7b_00112233445566778899aabbccddeeff",
            "0000019ADAA7587B-00112233445566778899aabbccddeeff",
            "0000019ad5967a7b-00112233445566778899aabbccddeef",
            "0000019ad5967a7b-00112233445566778899aabbccddeeff.part",
            "+000019adaa7587b-00112233445566778899aabbccddeeff",
        ] {
            assert_eq!(PayloadId::parse_object_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn bad_references_are_errors() {
        let good = sample().encode();
        assert!(PayloadRef::decode(&good[..39]).is_err());
        let mut long = good.to_vec();
        long.push(0);
        assert!(PayloadRef::decode(&long).is_err());
        let mut v2 = good;
        v2[0] = 2;
        assert!(matches!(
            PayloadRef::decode(&v2),
            Err(DecodeError::UnsupportedVersion { .. })
        ));
        let mut reserved = good;
        reserved[2] = 1;
        assert!(PayloadRef::decode(&reserved).is_err());
    }

    #[test]
    fn display_names_the_path() {
        let text = sample().to_string();
        assert!(text.starts_with("ref:payloads/0000490144/0000019ad5967a7b-"));
        assert!(text.ends_with("length=4194304 crc32c=deadbeef"));
    }
}
