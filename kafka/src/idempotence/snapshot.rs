//! The producer state snapshot's bytes: [`PartitionProducers::encode_snapshot`]
//! and its decoder. The layout is the byte table in `docs/kafka.md`
//! ("Producer state snapshot"); the offsets named there are the constants
//! below. All integers are big-endian.

use std::collections::{BTreeMap, VecDeque};

use super::{
    PartitionProducers, ProducerState, Recent, PRODUCERS_PER_PARTITION_MAX, RECENT_BATCHES_MAX,
};

/// First bytes of a snapshot: format name and version.
pub const SNAPSHOT_MAGIC: [u8; 4] = *b"KPS1";

// The header.
const MAGIC_AT: usize = 0; // 4 bytes
const COVERED_AT: usize = 4; // u64: the covered offset
const PRODUCER_COUNT_AT: usize = 12; // u32
const HEADER_BYTES: usize = 16;
/// Per producer, by increasing id: id i64, epoch i16, next sequence i32,
/// recent batch count u8.
const PRODUCER_BYTES: usize = 8 + 2 + 4 + 1;
/// Per recent batch, oldest first: first sequence i32, last sequence i32,
/// base offset i64.
const RECENT_BYTES: usize = 4 + 4 + 8;
/// Last: CRC-32C (Castagnoli) of every byte before it.
const CHECKSUM_BYTES: usize = 4;

/// The largest valid snapshot: every producer a partition keeps, each
/// with all its recent batches.
pub const SNAPSHOT_BYTES_MAX: usize = HEADER_BYTES
    + PRODUCERS_PER_PARTITION_MAX * (PRODUCER_BYTES + RECENT_BATCHES_MAX * RECENT_BYTES)
    + CHECKSUM_BYTES;

const _: () = assert!(MAGIC_AT + SNAPSHOT_MAGIC.len() == COVERED_AT);
const _: () = assert!(COVERED_AT + 8 == PRODUCER_COUNT_AT);
const _: () = assert!(PRODUCER_COUNT_AT + 4 == HEADER_BYTES);
// Counts must fit their fields.
const _: () = assert!(PRODUCERS_PER_PARTITION_MAX <= u32::MAX as usize);
const _: () = assert!(RECENT_BATCHES_MAX <= u8::MAX as usize);

/// Why a snapshot was refused. Nothing is taken from a refused snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Over [`SNAPSHOT_BYTES_MAX`].
    #[error("producer state snapshot of {bytes} bytes is over the limit of {SNAPSHOT_BYTES_MAX}")]
    TooLarge {
        /// The snapshot's length.
        bytes: usize,
    },
    /// The bytes end inside a field.
    #[error(
        "producer state snapshot cut short: {needed} bytes needed at offset {offset}, {remaining} left"
    )]
    Truncated {
        /// Where the field starts.
        offset: usize,
        /// How many bytes the field needs.
        needed: usize,
        /// How many bytes were left.
        remaining: usize,
    },
    /// The checksum does not match the bytes before it.
    #[error(
        "producer state snapshot checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
    )]
    Checksum {
        /// The checksum in the snapshot.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// Not a producer state snapshot, or a version this build does not read.
    #[error("not a producer state snapshot: magic {found:02x?}")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// More producers than a partition keeps.
    #[error(
        "producer state snapshot holds {count} producers, more than the {PRODUCERS_PER_PARTITION_MAX} a partition keeps"
    )]
    TooManyProducers {
        /// The producer count field.
        count: u32,
    },
    /// More recent batches than a producer keeps.
    #[error("producer {producer_id}: {count} recent batches, at most {RECENT_BATCHES_MAX}")]
    TooManyRecent {
        /// The producer.
        producer_id: i64,
        /// Its recent batch count field.
        count: u8,
    },
    /// Producers are not listed by increasing id.
    #[error("producer {producer_id} is listed after producer {previous}: ids must increase")]
    ProducerOrder {
        /// The producer out of place.
        producer_id: i64,
        /// The one listed before it.
        previous: i64,
    },
    /// Bytes follow the last producer before the checksum.
    #[error("producer state snapshot has {count} bytes after its last producer")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
}

impl PartitionProducers {
    /// The snapshot of this state: its producers and its covered offset.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let recent: usize = self.producers.values().map(|s| s.recent.len()).sum();
        let mut b = Vec::with_capacity(
            HEADER_BYTES
                + self.producers.len() * PRODUCER_BYTES
                + recent * RECENT_BYTES
                + CHECKSUM_BYTES,
        );
        b.extend_from_slice(&SNAPSHOT_MAGIC);
        b.extend_from_slice(&self.covered.to_be_bytes());
        // At most PRODUCERS_PER_PARTITION_MAX (`apply` and `decode` keep
        // it so), which fits a u32.
        b.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        for (id, s) in &self.producers {
            b.extend_from_slice(&id.to_be_bytes());
            b.extend_from_slice(&s.epoch.to_be_bytes());
            b.extend_from_slice(&s.next_sequence.to_be_bytes());
            // At most RECENT_BATCHES_MAX, which fits a u8.
            b.push(s.recent.len() as u8);
            for r in &s.recent {
                b.extend_from_slice(&r.first.to_be_bytes());
                b.extend_from_slice(&r.last.to_be_bytes());
                b.extend_from_slice(&r.base_offset.to_be_bytes());
            }
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_be_bytes());
        b
    }
}

/// The state a snapshot holds, its covered offset as `covered`; nothing
/// counts as changed.
pub(super) fn decode(bytes: &[u8]) -> Result<PartitionProducers, SnapshotError> {
    if bytes.len() > SNAPSHOT_BYTES_MAX {
        return Err(SnapshotError::TooLarge { bytes: bytes.len() });
    }
    let Some((body, stored)) = bytes.split_last_chunk::<CHECKSUM_BYTES>() else {
        return Err(SnapshotError::Truncated {
            offset: 0,
            needed: CHECKSUM_BYTES,
            remaining: bytes.len(),
        });
    };
    let stored = u32::from_be_bytes(*stored);
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(SnapshotError::Checksum { stored, computed });
    }
    let mut r = Reader { bytes: body, at: 0 };
    let found: [u8; 4] = r.take()?;
    if found != SNAPSHOT_MAGIC {
        return Err(SnapshotError::BadMagic { found });
    }
    debug_assert_eq!(r.at, COVERED_AT);
    let covered = u64::from_be_bytes(r.take()?);
    debug_assert_eq!(r.at, PRODUCER_COUNT_AT);
    let count = u32::from_be_bytes(r.take()?);
    if count as usize > PRODUCERS_PER_PARTITION_MAX {
        return Err(SnapshotError::TooManyProducers { count });
    }
    // Nothing is allocated ahead for `count`: each producer takes bytes
    // that must be there.
    let mut producers = BTreeMap::new();
    let mut previous: Option<i64> = None;
    for _ in 0..count {
        let producer_id = i64::from_be_bytes(r.take()?);
        if let Some(previous) = previous.filter(|&p| p >= producer_id) {
            return Err(SnapshotError::ProducerOrder {
                producer_id,
                previous,
            });
        }
        previous = Some(producer_id);
        let epoch = i16::from_be_bytes(r.take()?);
        let next_sequence = i32::from_be_bytes(r.take()?);
        let [recent_count] = r.take::<1>()?;
        if usize::from(recent_count) > RECENT_BATCHES_MAX {
            return Err(SnapshotError::TooManyRecent {
                producer_id,
                count: recent_count,
            });
        }
        let mut recent = VecDeque::with_capacity(RECENT_BATCHES_MAX);
        for _ in 0..recent_count {
            recent.push_back(Recent {
                first: i32::from_be_bytes(r.take()?),
                last: i32::from_be_bytes(r.take()?),
                base_offset: i64::from_be_bytes(r.take()?),
            });
        }
        producers.insert(
            producer_id,
            ProducerState {
                epoch,
                next_sequence,
                recent,
            },
        );
    }
    if r.remaining() != 0 {
        return Err(SnapshotError::TrailingBytes {
            count: r.remaining(),
        });
    }
    let mut state = PartitionProducers::new(covered);
    state.producers = producers;
    Ok(state)
}

/// Reads a snapshot's body front to back.
struct Reader<'a> {
    bytes: &'a [u8],
    /// Where `bytes` starts in the snapshot.
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let Some((head, rest)) = self.bytes.split_first_chunk::<N>() else {
            return Err(SnapshotError::Truncated {
                offset: self.at,
                needed: N,
                remaining: self.bytes.len(),
            });
        };
        self.bytes = rest;
        self.at += N;
        Ok(*head)
    }

    fn remaining(&self) -> usize {
        self.bytes.len()
    }
}
