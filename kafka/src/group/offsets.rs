//! [`GroupOffsets`]: one group's committed offsets, and their persisted byte
//! form.
//!
//! The coordinator keeps offsets in memory; the gateway persists each group's
//! offsets through the filer with [`GroupOffsets::encode`] after a commit and
//! restores them at start with [`GroupOffsets::decode`]. The byte format is
//! documented in `docs/kafka-groups.md`; the offsets named there are the
//! constants below. All integers are little-endian.

use std::collections::BTreeMap;

/// Magic bytes opening an offsets file.
pub const OFFSETS_MAGIC: [u8; 8] = *b"KELPGOFS";
/// The format version written, and the only one read.
pub const OFFSETS_VERSION: u16 = 1;
/// Most committed partitions one group keeps.
pub const OFFSETS_PER_GROUP_MAX: usize = 100_000;
/// Longest offset metadata string kept, in bytes (Kafka's default
/// `offset.metadata.max.bytes`).
pub const OFFSET_METADATA_BYTES_MAX: usize = 4096;
/// Longest topic name, in bytes (Kafka's limit).
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// Longest group id, in bytes (what a Kafka string can carry).
pub const GROUP_ID_BYTES_MAX: usize = i16::MAX as usize;

// Byte offsets of the fixed header (see docs/kafka-groups.md).
const MAGIC_AT: usize = 0; // 8 bytes
const VERSION_AT: usize = 8; // u16
const GROUP_ID_LEN_AT: usize = 10; // u16, then the group id bytes
const HEADER_BYTES: usize = 12;
// After the group id: entry count, u32.
const COUNT_BYTES: usize = 4;
// Per entry, after the topic length (u16) and topic bytes:
// partition i32, offset i64, leader epoch i32, commit time u64, metadata
// length u16, then the metadata bytes.
const ENTRY_FIXED_BYTES: usize = 2 + 4 + 8 + 4 + 8 + 2;
const CHECKSUM_BYTES: usize = 4;

/// Largest offsets file accepted: a full group of the longest names.
pub const OFFSETS_FILE_BYTES_MAX: usize = HEADER_BYTES
    + GROUP_ID_BYTES_MAX
    + COUNT_BYTES
    + OFFSETS_PER_GROUP_MAX
        * (ENTRY_FIXED_BYTES + TOPIC_NAME_BYTES_MAX + OFFSET_METADATA_BYTES_MAX)
    + CHECKSUM_BYTES;

// Lengths must fit their u16 fields.
const _: () = assert!(GROUP_ID_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(TOPIC_NAME_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(OFFSET_METADATA_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(OFFSETS_PER_GROUP_MAX <= u32::MAX as usize);

/// One committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The offset.
    pub offset: i64,
    /// The leader epoch, -1 if unknown.
    pub leader_epoch: i32,
    /// When it was committed, ms (the `now_ms` of the commit).
    pub commit_time_ms: u64,
    /// Client metadata, at most [`OFFSET_METADATA_BYTES_MAX`] bytes.
    pub metadata: String,
}

/// A group's committed offsets, keyed by (topic, partition).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupOffsets {
    /// Topic -> partition -> offset: lookups by `&str` need no allocation.
    topics: BTreeMap<String, BTreeMap<i32, CommittedOffset>>,
    /// Partitions across all topics.
    len: usize,
}

/// Why an offsets file was refused. Nothing is restored from a refused file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OffsetsError {
    /// The bytes end before the structure does.
    #[error("offsets file truncated: {0}")]
    Truncated(&'static str),
    /// Over [`OFFSETS_FILE_BYTES_MAX`].
    #[error("offsets file of {0} bytes is over the limit")]
    TooLarge(usize),
    /// Not an offsets file.
    #[error("offsets file has bad magic bytes")]
    BadMagic,
    /// A version this build does not read.
    #[error("offsets file version {0} is not supported (only {OFFSETS_VERSION})")]
    UnsupportedVersion(u16),
    /// The checksum does not match the contents.
    #[error("offsets file checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// The checksum in the file.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// A field holds a value outside its range; the string says which.
    #[error("offsets file field invalid: {0}")]
    Invalid(&'static str),
    /// Bytes follow the last entry before the checksum.
    #[error("offsets file has {0} unexpected bytes after its entries")]
    TrailingBytes(usize),
}

impl GroupOffsets {
    /// How many partitions have a committed offset.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no offset is committed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The committed offset of one partition.
    pub fn get(&self, topic: &str, partition: i32) -> Option<&CommittedOffset> {
        self.topics.get(topic)?.get(&partition)
    }

    /// Whether committing (topic, partition) would need a new entry.
    pub(crate) fn contains(&self, topic: &str, partition: i32) -> bool {
        self.get(topic, partition).is_some()
    }

    /// Stores an offset, replacing any earlier one.
    pub(crate) fn insert(&mut self, topic: &str, partition: i32, offset: CommittedOffset) {
        let partitions = match self.topics.get_mut(topic) {
            Some(p) => p,
            None => self.topics.entry(topic.to_owned()).or_default(),
        };
        if partitions.insert(partition, offset).is_none() {
            self.len += 1;
        }
    }

    /// Forgets one partition's offset; whether it had one.
    pub(crate) fn remove(&mut self, topic: &str, partition: i32) -> bool {
        let Some(partitions) = self.topics.get_mut(topic) else {
            return false;
        };
        let removed = partitions.remove(&partition).is_some();
        if partitions.is_empty() {
            self.topics.remove(topic);
        }
        if removed {
            self.len -= 1;
        }
        removed
    }

    /// Every committed offset in (topic, partition) order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i32, &CommittedOffset)> {
        self.topics
            .iter()
            .flat_map(|(t, parts)| parts.iter().map(move |(p, o)| (t.as_str(), *p, o)))
    }

    /// The persisted form of `group_id`'s offsets.
    pub fn encode(&self, group_id: &str) -> Vec<u8> {
        debug_assert!(group_id.len() <= GROUP_ID_BYTES_MAX);
        let mut out = Vec::with_capacity(
            HEADER_BYTES + group_id.len() + COUNT_BYTES + self.len * 64 + CHECKSUM_BYTES,
        );
        out.extend_from_slice(&OFFSETS_MAGIC);
        out.extend_from_slice(&OFFSETS_VERSION.to_le_bytes());
        put_str(&mut out, group_id);
        out.extend_from_slice(&(self.len as u32).to_le_bytes());
        for (topic, partition, o) in self.iter() {
            put_str(&mut out, topic);
            out.extend_from_slice(&partition.to_le_bytes());
            out.extend_from_slice(&o.offset.to_le_bytes());
            out.extend_from_slice(&o.leader_epoch.to_le_bytes());
            out.extend_from_slice(&o.commit_time_ms.to_le_bytes());
            put_str(&mut out, &o.metadata);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads an offsets file: the group id and its offsets. Every field is
    /// checked; a file that fails any check is refused whole.
    pub fn decode(bytes: &[u8]) -> Result<(String, GroupOffsets), OffsetsError> {
        if bytes.len() > OFFSETS_FILE_BYTES_MAX {
            return Err(OffsetsError::TooLarge(bytes.len()));
        }
        if bytes.len() < HEADER_BYTES + COUNT_BYTES + CHECKSUM_BYTES {
            return Err(OffsetsError::Truncated("shorter than the fixed header"));
        }
        if bytes[MAGIC_AT..MAGIC_AT + 8] != OFFSETS_MAGIC {
            return Err(OffsetsError::BadMagic);
        }
        let (body, stored) = bytes.split_at(bytes.len() - CHECKSUM_BYTES);
        let mut crc_bytes = [0u8; CHECKSUM_BYTES];
        crc_bytes.copy_from_slice(stored);
        let stored = u32::from_le_bytes(crc_bytes);
        let computed = crc32c::crc32c(body);
        if stored != computed {
            return Err(OffsetsError::Checksum { stored, computed });
        }
        let mut r = Reader {
            bytes: body,
            at: VERSION_AT,
        };
        let version = r.u16("version")?;
        if version != OFFSETS_VERSION {
            return Err(OffsetsError::UnsupportedVersion(version));
        }
        debug_assert_eq!(r.at, GROUP_ID_LEN_AT);
        let group_id = r.str("group id", GROUP_ID_BYTES_MAX)?;
        if group_id.is_empty() {
            return Err(OffsetsError::Invalid("empty group id"));
        }
        let count = r.u32("entry count")? as usize;
        if count > OFFSETS_PER_GROUP_MAX {
            return Err(OffsetsError::Invalid(
                "entry count over OFFSETS_PER_GROUP_MAX",
            ));
        }
        let mut offsets = GroupOffsets::default();
        let mut previous: Option<(String, i32)> = None;
        for _ in 0..count {
            let topic = r.str("topic", TOPIC_NAME_BYTES_MAX)?;
            if topic.is_empty() {
                return Err(OffsetsError::Invalid("empty topic name"));
            }
            let partition = r.i32("partition")?;
            if partition < 0 {
                return Err(OffsetsError::Invalid("negative partition"));
            }
            let offset = r.i64("offset")?;
            let leader_epoch = r.i32("leader epoch")?;
            let commit_time_ms = r.u64("commit time")?;
            let metadata = r.str("metadata", OFFSET_METADATA_BYTES_MAX)?;
            let in_order = match &previous {
                None => true,
                Some((t, p)) => (t.as_str(), *p) < (topic.as_str(), partition),
            };
            if !in_order {
                return Err(OffsetsError::Invalid(
                    "entries not in strictly increasing (topic, partition) order",
                ));
            }
            offsets.insert(
                &topic,
                partition,
                CommittedOffset {
                    offset,
                    leader_epoch,
                    commit_time_ms,
                    metadata,
                },
            );
            previous = Some((topic, partition));
        }
        if r.at != body.len() {
            return Err(OffsetsError::TrailingBytes(body.len() - r.at));
        }
        Ok((group_id, offsets))
    }
}

/// Appends a u16 length and the string's bytes. Callers keep strings within
/// their limits, all of which fit a u16.
fn put_str(out: &mut Vec<u8>, s: &str) {
    debug_assert!(s.len() <= u16::MAX as usize);
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A bounds-checked little-endian reader over a checksummed body.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], OffsetsError> {
        let end = self.at.checked_add(N).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or(OffsetsError::Truncated(what))?;
        let mut a = [0u8; N];
        a.copy_from_slice(&self.bytes[self.at..end]);
        self.at = end;
        Ok(a)
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, OffsetsError> {
        self.take::<2>(what).map(u16::from_le_bytes)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, OffsetsError> {
        self.take::<4>(what).map(u32::from_le_bytes)
    }
    fn i32(&mut self, what: &'static str) -> Result<i32, OffsetsError> {
        self.take::<4>(what).map(i32::from_le_bytes)
    }
    fn i64(&mut self, what: &'static str) -> Result<i64, OffsetsError> {
        self.take::<8>(what).map(i64::from_le_bytes)
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, OffsetsError> {
        self.take::<8>(what).map(u64::from_le_bytes)
    }
    fn str(&mut self, what: &'static str, max: usize) -> Result<String, OffsetsError> {
        let len = usize::from(self.u16(what)?);
        if len > max {
            return Err(OffsetsError::Invalid(what));
        }
        let end = self.at + len;
        let raw = self
            .bytes
            .get(self.at..end)
            .ok_or(OffsetsError::Truncated(what))?;
        let s = std::str::from_utf8(raw).map_err(|_| OffsetsError::Invalid(what))?;
        self.at = end;
        Ok(s.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> GroupOffsets {
        let mut o = GroupOffsets::default();
        o.insert(
            "orders",
            1,
            CommittedOffset {
                offset: 42,
                leader_epoch: 3,
                commit_time_ms: 1000,
                metadata: "m".into(),
            },
        );
        o.insert(
            "orders",
            0,
            CommittedOffset {
                offset: 7,
                leader_epoch: -1,
                commit_time_ms: 999,
                metadata: String::new(),
            },
        );
        o
    }

    /// Pins the byte format of docs/kafka-groups.md: one file, byte by byte.
    #[test]
    fn golden_offsets_file() {
        let mut one = GroupOffsets::default();
        one.insert(
            "t",
            2,
            CommittedOffset {
                offset: 5,
                leader_epoch: -1,
                commit_time_ms: 9,
                metadata: "x".into(),
            },
        );
        let bytes = one.encode("g");
        let mut expected: Vec<u8> = Vec::new();
        expected.extend_from_slice(b"KELPGOFS"); // magic
        expected.extend_from_slice(&[1, 0]); // version 1
        expected.extend_from_slice(&[1, 0, b'g']); // group id
        expected.extend_from_slice(&[1, 0, 0, 0]); // one entry
        expected.extend_from_slice(&[1, 0, b't']); // topic
        expected.extend_from_slice(&[2, 0, 0, 0]); // partition 2
        expected.extend_from_slice(&[5, 0, 0, 0, 0, 0, 0, 0]); // offset 5
        expected.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]); // leader epoch -1
        expected.extend_from_slice(&[9, 0, 0, 0, 0, 0, 0, 0]); // commit time 9
        expected.extend_from_slice(&[1, 0, b'x']); // metadata
        let crc = crc32c::crc32c(&expected);
        expected.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(bytes, expected);
        assert_eq!(
            bytes.len(),
            HEADER_BYTES + 1 + COUNT_BYTES + ENTRY_FIXED_BYTES + 1 + 1 + 4
        );
    }

    #[test]
    fn round_trip_keeps_every_field() {
        let o = sample();
        let (group, back) = GroupOffsets::decode(&o.encode("payments")).expect("decode");
        assert_eq!(group, "payments");
        assert_eq!(back, o);
        let order: Vec<i32> = back.iter().map(|(_, p, _)| p).collect();
        assert_eq!(order, vec![0, 1]);
    }

    #[test]
    fn every_truncation_and_bit_flip_is_refused() {
        let bytes = sample().encode("payments");
        for len in 0..bytes.len() {
            assert!(
                GroupOffsets::decode(&bytes[..len]).is_err(),
                "truncated to {len}"
            );
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            assert!(GroupOffsets::decode(&b).is_err(), "flip at {i}");
        }
    }

    /// A file with a valid checksum but a bad field is still refused: the
    /// checksum guards against rot, the field checks against bad writers.
    #[test]
    fn valid_checksum_bad_fields_refused() {
        let reseal = |mut body: Vec<u8>| {
            body.truncate(body.len() - CHECKSUM_BYTES);
            let crc = crc32c::crc32c(&body);
            body.extend_from_slice(&crc.to_le_bytes());
            body
        };
        // Version 2.
        let mut b = sample().encode("g");
        b[VERSION_AT] = 2;
        assert_eq!(
            GroupOffsets::decode(&reseal(b)),
            Err(OffsetsError::UnsupportedVersion(2))
        );
        // Count larger than the entries present.
        let mut b = sample().encode("g");
        let count_at = HEADER_BYTES + 1;
        b[count_at] = 3;
        assert!(matches!(
            GroupOffsets::decode(&reseal(b)),
            Err(OffsetsError::Truncated(_))
        ));
        // Count smaller: the rest is trailing bytes.
        let mut b = sample().encode("g");
        b[count_at] = 1;
        assert!(matches!(
            GroupOffsets::decode(&reseal(b)),
            Err(OffsetsError::TrailingBytes(_))
        ));
        // Entries out of order (partition 0 rewritten to 5, after partition 1).
        let mut b = sample().encode("g");
        let first_partition_at = HEADER_BYTES + 1 + COUNT_BYTES + 2 + "orders".len();
        b[first_partition_at] = 5;
        assert!(matches!(
            GroupOffsets::decode(&reseal(b)),
            Err(OffsetsError::Invalid(_))
        ));
        // Negative partition.
        let mut b = sample().encode("g");
        b[first_partition_at + 3] = 0x80;
        assert!(matches!(
            GroupOffsets::decode(&reseal(b)),
            Err(OffsetsError::Invalid(_))
        ));
    }
}
