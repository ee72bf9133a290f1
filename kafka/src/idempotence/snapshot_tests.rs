//! The snapshot format: golden bytes from the byte table in
//! `docs/kafka.md`, round trips, and every kind of damage refused with its
//! own error.

#![allow(clippy::unwrap_used)]

use super::snapshot::decode;
use super::tests::{appended, batch};
use super::*;

/// The state the golden snapshot holds.
fn golden_state() -> PartitionProducers {
    let mut p = PartitionProducers::new(0);
    appended(&mut p, batch(3, 2, 0, 9), 0);
    appended(&mut p, batch(3, 2, 10, 19), 10);
    appended(&mut p, batch(9, 0, 0, 0), 20);
    appended(
        &mut p,
        batch(0x0102_0304_0506_0708, 0x0A0B, 0x1122_3344, 0x1122_3345),
        0xAB_CDEF_0000,
    );
    p
}

/// The golden snapshot, field by field from the byte table in
/// `docs/kafka.md`. The same bytes were written by the gateway's encoder
/// before it moved here, and the checksum was computed by a separate
/// bitwise CRC-32C.
#[rustfmt::skip]
const GOLDEN: &[u8] = &[
    // magic "KPS1"
    0x4B, 0x50, 0x53, 0x31,
    // covered offset u64: 0xAB_CDEF_0000 + 2
    0x00, 0x00, 0x00, 0xAB, 0xCD, 0xEF, 0x00, 0x02,
    // producer count u32
    0x00, 0x00, 0x00, 0x03,
    // producer 3: id i64, epoch i16, next sequence i32 (20), 2 recent
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03,
    0x00, 0x02,
    0x00, 0x00, 0x00, 0x14,
    0x02,
    //   sequences 0..=9 at offset 0
    0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x09,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    //   sequences 10..=19 at offset 10
    0x00, 0x00, 0x00, 0x0A,
    0x00, 0x00, 0x00, 0x13,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0A,
    // producer 9: epoch 0, next sequence 1, 1 recent
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09,
    0x00, 0x00,
    0x00, 0x00, 0x00, 0x01,
    0x01,
    //   sequence 0 at offset 20
    0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14,
    // producer 0x0102030405060708: epoch 0x0A0B, next 0x11223346, 1 recent
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
    0x0A, 0x0B,
    0x11, 0x22, 0x33, 0x46,
    0x01,
    //   sequences 0x11223344..=0x11223345 at offset 0xAB_CDEF_0000
    0x11, 0x22, 0x33, 0x44,
    0x11, 0x22, 0x33, 0x45,
    0x00, 0x00, 0x00, 0xAB, 0xCD, 0xEF, 0x00, 0x00,
    // CRC-32C of every byte before it, u32
    0x30, 0xE9, 0xC9, 0x70,
];

/// `body` with its checksum appended.
fn sealed(mut body: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&body);
    body.extend_from_slice(&crc.to_be_bytes());
    body
}

/// A header claiming `count` producers.
fn header(covered: u64, count: u32) -> Vec<u8> {
    let mut b = SNAPSHOT_MAGIC.to_vec();
    b.extend_from_slice(&covered.to_be_bytes());
    b.extend_from_slice(&count.to_be_bytes());
    b
}

/// One producer's fixed fields.
fn producer(id: i64, epoch: i16, next: i32, recent: u8) -> Vec<u8> {
    let mut b = id.to_be_bytes().to_vec();
    b.extend_from_slice(&epoch.to_be_bytes());
    b.extend_from_slice(&next.to_be_bytes());
    b.push(recent);
    b
}

/// One recent batch.
fn recent(first: i32, last: i32, base_offset: i64) -> Vec<u8> {
    let mut b = first.to_be_bytes().to_vec();
    b.extend_from_slice(&last.to_be_bytes());
    b.extend_from_slice(&base_offset.to_be_bytes());
    b
}

#[test]
fn golden_bytes() {
    assert_eq!(GOLDEN.len(), 16 + 3 * 15 + 4 * 16 + 4);
    let p = golden_state();
    assert_eq!(p.encode_snapshot(), GOLDEN);
    let back = decode(GOLDEN).unwrap();
    assert_eq!(back.producers, p.producers);
    assert_eq!(back.covered, 0xAB_CDEF_0002);
    // Decoded state counts as stored.
    assert_eq!(back.snapshot_due(), None);
    // The helpers below build the same bytes.
    let mut built = header(0xAB_CDEF_0002, 3);
    built.extend(producer(3, 2, 20, 2));
    built.extend(recent(0, 9, 0));
    built.extend(recent(10, 19, 10));
    built.extend(producer(9, 0, 1, 1));
    built.extend(recent(0, 0, 20));
    built.extend(producer(0x0102_0304_0506_0708, 0x0A0B, 0x1122_3346, 1));
    built.extend(recent(0x1122_3344, 0x1122_3345, 0xAB_CDEF_0000));
    assert_eq!(sealed(built), GOLDEN);
}

#[test]
fn snapshot_round_trips_and_refuses_damage() {
    let mut p = PartitionProducers::new(0);
    appended(&mut p, batch(3, 2, 0, 9), 0);
    appended(&mut p, batch(3, 2, 10, 19), 10);
    appended(&mut p, batch(9, 0, 0, 0), 20);
    let bytes = p.encode_snapshot();
    // 16 header + 2 producers x 15 + 3 recent x 16 + 4 checksum.
    assert_eq!(bytes.len(), 16 + 2 * 15 + 3 * 16 + 4);
    assert_eq!(&bytes[..4], b"KPS1");
    assert_eq!(&bytes[4..12], &21u64.to_be_bytes());
    let back = decode(&bytes).unwrap();
    assert_eq!(back.producers, p.producers);
    assert_eq!(back.covered, 21);
    let mut bad = bytes.clone();
    bad[20] ^= 1;
    let error = decode(&bad).unwrap_err();
    assert!(matches!(error, SnapshotError::Checksum { .. }), "{error:?}");
    assert!(error.to_string().contains("checksum"));
    assert!(decode(&bytes[..3]).is_err());
}

#[test]
fn an_empty_partition_round_trips() {
    let p = PartitionProducers::new(u64::MAX);
    let bytes = p.encode_snapshot();
    assert_eq!(bytes.len(), 16 + 4);
    let back = decode(&bytes).unwrap();
    assert_eq!(back.covered, u64::MAX);
    assert_eq!(back.producer_count(), 0);
}

#[test]
fn random_states_round_trip() {
    let seeds: u64 = 64;
    for seed in 0..seeds {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut p = PartitionProducers::new(rng.u64(..1 << 40));
        let mut offset = p.covered as i64;
        for _ in 0..rng.usize(..200) {
            let id = rng.i64(0..20);
            let epoch = rng.i16(0..3);
            let first = rng.i32(0..=SEQUENCE_MAX);
            let b = ProducerBatch::new(id, epoch, first, rng.u32(0..50));
            let records = (i64::from(b.last) - i64::from(b.first)).rem_euclid(SEQUENCE_SPAN) + 1;
            let append = p.begin(b);
            p.end(
                append,
                AppendOutcome::Stored {
                    base_offset: offset,
                    end_offset: (offset + records) as u64,
                },
            );
            offset += records;
        }
        let bytes = p.encode_snapshot();
        let back = decode(&bytes).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(back.producers, p.producers, "seed {seed}");
        assert_eq!(back.covered, p.covered, "seed {seed}");
        assert_eq!(back.encode_snapshot(), bytes, "seed {seed}");
    }
}

#[test]
fn the_largest_snapshot_is_the_limit() {
    let mut p = PartitionProducers::new(0);
    let mut offset = 0;
    for id in 0..PRODUCERS_PER_PARTITION_MAX as i64 {
        for sequence in 0..RECENT_BATCHES_MAX as i32 {
            appended(&mut p, batch(id, 0, sequence, sequence), offset);
            offset += 1;
        }
    }
    let bytes = p.encode_snapshot();
    assert_eq!(bytes.len(), SNAPSHOT_BYTES_MAX);
    assert_eq!(decode(&bytes).unwrap().producers, p.producers);
}

#[test]
fn every_truncation_is_refused() {
    for len in 0..GOLDEN.len() {
        let error = decode(&GOLDEN[..len]).unwrap_err();
        if len < 4 {
            assert_eq!(
                error,
                SnapshotError::Truncated {
                    offset: 0,
                    needed: 4,
                    remaining: len
                }
            );
        } else {
            // The last four bytes taken as the checksum do not match.
            assert!(
                matches!(error, SnapshotError::Checksum { .. }),
                "{len}: {error:?}"
            );
        }
    }
}

#[test]
fn every_flipped_bit_is_refused() {
    for at in 0..GOLDEN.len() {
        for bit in 0..8 {
            let mut bad = GOLDEN.to_vec();
            bad[at] ^= 1 << bit;
            let error = decode(&bad).unwrap_err();
            assert!(
                matches!(error, SnapshotError::Checksum { .. }),
                "{at}.{bit}: {error:?}"
            );
        }
    }
}

#[test]
fn an_oversized_snapshot_is_refused_before_it_is_read() {
    let huge = vec![0u8; SNAPSHOT_BYTES_MAX + 1];
    assert_eq!(
        decode(&huge).unwrap_err(),
        SnapshotError::TooLarge {
            bytes: SNAPSHOT_BYTES_MAX + 1
        }
    );
}

#[test]
fn checksummed_damage_is_refused_by_what_it_breaks() {
    // Another format or version.
    let mut b = header(0, 0);
    b[3] = b'2';
    assert_eq!(
        decode(&sealed(b)).unwrap_err(),
        SnapshotError::BadMagic { found: *b"KPS2" }
    );
    // A header cut short.
    assert_eq!(
        decode(&sealed(SNAPSHOT_MAGIC.to_vec())).unwrap_err(),
        SnapshotError::Truncated {
            offset: 4,
            needed: 8,
            remaining: 0
        }
    );
    // More producers than a partition keeps: refused before any is read.
    let too_many = PRODUCERS_PER_PARTITION_MAX as u32 + 1;
    assert_eq!(
        decode(&sealed(header(0, too_many))).unwrap_err(),
        SnapshotError::TooManyProducers { count: too_many }
    );
    assert_eq!(
        decode(&sealed(header(0, u32::MAX))).unwrap_err(),
        SnapshotError::TooManyProducers { count: u32::MAX }
    );
    // The largest count the limit allows, and no producer bytes: cut short
    // at the first one.
    assert_eq!(
        decode(&sealed(header(0, PRODUCERS_PER_PARTITION_MAX as u32))).unwrap_err(),
        SnapshotError::Truncated {
            offset: 16,
            needed: 8,
            remaining: 0
        }
    );
    // A producer cut short inside its recent batches.
    let mut b = header(0, 1);
    b.extend(producer(1, 0, 2, 2));
    b.extend(recent(0, 0, 0));
    b.extend(&recent(1, 1, 1)[..10]);
    assert_eq!(
        decode(&sealed(b)).unwrap_err(),
        SnapshotError::Truncated {
            offset: 16 + 15 + 16 + 8,
            needed: 8,
            remaining: 2
        }
    );
    // Six recent batches.
    let mut b = header(0, 1);
    b.extend(producer(1, 0, 6, 6));
    for i in 0..6 {
        b.extend(recent(i, i, i64::from(i)));
    }
    assert_eq!(
        decode(&sealed(b)).unwrap_err(),
        SnapshotError::TooManyRecent {
            producer_id: 1,
            count: 6
        }
    );
    // Ids not increasing: the same twice, or going down.
    for (one, two) in [(5, 5), (5, 4)] {
        let mut b = header(0, 2);
        b.extend(producer(one, 0, 0, 0));
        b.extend(producer(two, 0, 0, 0));
        assert_eq!(
            decode(&sealed(b)).unwrap_err(),
            SnapshotError::ProducerOrder {
                producer_id: two,
                previous: one
            }
        );
    }
    // Bytes after the last producer.
    let mut b = header(0, 1);
    b.extend(producer(1, 0, 0, 0));
    b.push(0);
    assert_eq!(
        decode(&sealed(b)).unwrap_err(),
        SnapshotError::TrailingBytes { count: 1 }
    );
    // The same without the extra byte is fine.
    let mut b = header(9, 1);
    b.extend(producer(1, 0, 0, 0));
    let back = decode(&sealed(b)).unwrap();
    assert_eq!(back.covered, 9);
    assert_eq!(back.producer_count(), 1);
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = fastrand::Rng::with_seed(0x6b70_7331);
    for _ in 0..2000 {
        let mut b = header(rng.u64(..), rng.u32(..4));
        for _ in 0..rng.usize(..80) {
            b.push(rng.u8(..));
        }
        // Checksummed, so the structure is what gets tested.
        let _ = decode(&sealed(b));
    }
}
