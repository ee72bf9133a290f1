//! What recovery makes of a buffer whose batches do not all check out: the
//! runs of good batches, and the stretches between them that no longer
//! verify, with the offsets those stretches held.
//!
//! A buffer file is written front to back from zeros, one whole batch at a
//! time, and every batch carries its own checksum. A batch that fails its
//! checksum is either a write the broker was killed in the middle of (never
//! acknowledged) or bytes damaged after they were written (acknowledged,
//! and lost). The two cannot be told apart with certainty, so recovery
//! treats every such stretch as lost: it keeps every good batch after it,
//! reports the offsets it held, and never hands those offsets out again.
//!
//! [`scan`] is pure: bytes in, a [`Scan`] out. Nothing here touches a file.

use wire::batch::{
    BatchView, BASE_OFFSET_OFFSET, BATCH_BYTES_OFFSET, BATCH_HEADER_BYTES, BATCH_VERSION,
    RECORD_COUNT_OFFSET, RECORD_HEADER_BYTES, VERSION_OFFSET,
};
use wire::limits::BATCH_RECORDS_MAX;

/// The little-endian u32 at `at` of a slice known to hold it.
fn le_u32(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Batches end to end that all check out, with contiguous offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// Byte range within the scanned data.
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) base_offset: u64,
    pub(crate) next_offset: u64,
}

/// Bytes that do not verify, and the offsets they held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Damage {
    /// Byte range within the scanned data.
    pub(crate) from: usize,
    pub(crate) to: usize,
    /// Offsets `[from_offset, to_offset)`: none of them is readable, and
    /// none may be given to another record.
    pub(crate) from_offset: u64,
    pub(crate) to_offset: u64,
    /// The last batch, its header whole and its bytes stopping short of
    /// its stated length with only zeros after: a write cut short by a
    /// crash, most likely (never acknowledged), though damage that leaves
    /// the same picture cannot be ruled out.
    pub(crate) cut_short: bool,
}

/// A buffer's data, sorted into runs and damage, in byte order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    pub(crate) runs: Vec<Run>,
    pub(crate) damage: Vec<Damage>,
}

impl Scan {
    pub(crate) fn is_clean(&self) -> bool {
        self.damage.is_empty()
    }

    /// One past the last offset the buffer held or may have held.
    #[cfg(test)]
    pub(crate) fn next_offset(&self, base_offset: u64) -> u64 {
        let runs = self.runs.last().map_or(base_offset, |r| r.next_offset);
        let damage = self.damage.last().map_or(base_offset, |d| d.to_offset);
        runs.max(damage)
    }
}

/// Sort `data` (a buffer's bytes after its header: batches end to end, then
/// zeros) into runs of good batches from `base_offset`, and damage.
///
/// `end_offset` is the buffer's end when something else states it (its
/// sealed header, or the base offset of the buffer that followed it); a
/// damaged stretch at the end then held offsets up to it. Without one, the
/// stretch is given as many offsets as it could have held: the count its
/// batch header states when the batch's records account for its bytes
/// exactly, else one per `RECORD_HEADER_BYTES` written, the smallest
/// possible record, so no acknowledged offset is ever given out again.
pub(crate) fn scan(data: &[u8], base_offset: u64, end_offset: Option<u64>) -> Scan {
    let written = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let mut out = Scan::default();
    let mut position = 0;
    let mut expected = base_offset;
    loop {
        let (run_from, run_base) = (position, expected);
        while let Some((len, next)) = good_batch(data, position, expected) {
            position += len;
            expected = next;
        }
        if position > run_from {
            out.runs.push(Run {
                from: run_from,
                to: position,
                base_offset: run_base,
                next_offset: expected,
            });
        }
        if position >= written {
            // Only zeros after the last good batch: the buffer ends here,
            // unless something else says it held more.
            if let Some(end) = end_offset.filter(|&e| e > expected) {
                out.damage.push(Damage {
                    from: position,
                    to: position,
                    from_offset: expected,
                    to_offset: end,
                    cut_short: false,
                });
            }
            return out;
        }
        match resync(data, position, written, expected) {
            Some((at, base)) => {
                out.damage.push(Damage {
                    from: position,
                    to: at,
                    from_offset: expected,
                    to_offset: base,
                    cut_short: false,
                });
                position = at;
                expected = base;
            }
            None => {
                let (offsets, cut_short) = tail_offsets(&data[position..written], expected);
                let to_offset = end_offset
                    .filter(|&e| e > expected)
                    .unwrap_or(expected + offsets);
                out.damage.push(Damage {
                    from: position,
                    to: written,
                    from_offset: expected,
                    to_offset,
                    cut_short,
                });
                return out;
            }
        }
    }
}

/// The length and next offset of the batch at `position`, if it is whole,
/// verifies, and starts at `expected`.
fn good_batch(data: &[u8], position: usize, expected: u64) -> Option<(usize, u64)> {
    let rest = data.get(position..)?;
    let len = BatchView::peek_len(rest)? as usize;
    if len < BATCH_HEADER_BYTES || len > rest.len() {
        return None;
    }
    let batch = BatchView::validate(&rest[..len]).ok()?;
    (batch.base_offset() == expected).then(|| (len, batch.next_offset()))
}

/// The first position after `damaged` (and before `written`) where a good
/// batch starts whose offsets could follow the damaged bytes: past
/// `expected`, by no more offsets than the bytes between could hold.
/// Cheap header tests come first; a candidate must then pass the batch's
/// checksum, which bytes that are not a batch fail but for one in 2^32.
fn resync(data: &[u8], damaged: usize, written: usize, expected: u64) -> Option<(usize, u64)> {
    for at in damaged + 1..written {
        let head = data.get(at..at + BATCH_HEADER_BYTES)?;
        if head[VERSION_OFFSET] != BATCH_VERSION {
            continue;
        }
        let len = le_u32(head, BATCH_BYTES_OFFSET) as usize;
        let count = le_u32(head, RECORD_COUNT_OFFSET);
        let base = le_u64(head, BASE_OFFSET_OFFSET);
        let most = ((at - damaged) / RECORD_HEADER_BYTES) as u64;
        if len < BATCH_HEADER_BYTES
            || at + len > data.len()
            || count == 0
            || count > BATCH_RECORDS_MAX
            || base <= expected
            || base - expected > most
        {
            continue;
        }
        if good_batch(data, at, base).is_some() {
            return Some((at, base));
        }
    }
    None
}

/// How many offsets a damaged stretch at the end of a buffer may have held
/// (`bytes`: from the damage to the last byte written; `expected`: the
/// offset it started at).
///
/// A batch whose header is intact and whose records' own lengths add up
/// to its stated length exactly (so its count is right, though some byte
/// is not) held its stated count, and each byte after it at most one
/// offset per smallest record. A batch whose bytes stop short of its
/// stated length, zeros after, is a write cut short by a crash: never
/// acknowledged, its header states the count it would have had. Anything
/// else: one offset per smallest record written.
/// Also whether the stretch is a write cut short.
fn tail_offsets(bytes: &[u8], expected: u64) -> (u64, bool) {
    let per_record = |n: usize| n.div_ceil(RECORD_HEADER_BYTES) as u64;
    let Some(head) = bytes.get(..BATCH_HEADER_BYTES) else {
        return (per_record(bytes.len()).max(1), false);
    };
    let len = le_u32(head, BATCH_BYTES_OFFSET) as usize;
    let count = le_u32(head, RECORD_COUNT_OFFSET);
    let plausible = head[VERSION_OFFSET] == BATCH_VERSION
        && le_u64(head, BASE_OFFSET_OFFSET) == expected
        && (1..=BATCH_RECORDS_MAX).contains(&count)
        && len >= BATCH_HEADER_BYTES;
    if !plausible {
        return (per_record(bytes.len()).max(1), false);
    }
    if len > bytes.len() {
        // Cut short: what was written of it is all there is.
        return (u64::from(count), true);
    }
    if records_fill(&bytes[BATCH_HEADER_BYTES..len], count) {
        return (u64::from(count) + per_record(bytes.len() - len), false);
    }
    (per_record(bytes.len()).max(1), false)
}

/// Whether `count` records, walked by their own length fields, fill
/// `records` exactly.
fn records_fill(records: &[u8], count: u32) -> bool {
    let mut at = 0usize;
    for _ in 0..count {
        let Some(field) = records.get(at..at + 4) else {
            return false;
        };
        let len = le_u32(field, 0) as usize;
        if len < RECORD_HEADER_BYTES || at + len > records.len() {
            return false;
        }
        at += len;
    }
    at == records.len()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wire::batch::set_base_offset;
    use wire::BatchBuilder;

    /// Batches of `records` records of `value_bytes` each, from offset 0,
    /// end to end, then `zeros` zero bytes; and each batch's position.
    fn buffer(
        batches: usize,
        records: usize,
        value_bytes: usize,
        zeros: usize,
    ) -> (Vec<u8>, Vec<usize>) {
        let mut data = Vec::new();
        let mut starts = Vec::new();
        let mut offset = 0u64;
        for b in 0..batches {
            let mut builder = BatchBuilder::new();
            for r in 0..records {
                let value = vec![(b * 7 + r) as u8 | 1; value_bytes];
                builder.push(1_000 + r as i64, b"k", &value, &[]).unwrap();
            }
            let mut bytes = builder.finish(0, 0).to_vec();
            set_base_offset(&mut bytes, offset);
            offset += records as u64;
            starts.push(data.len());
            data.extend_from_slice(&bytes);
        }
        data.resize(data.len() + zeros, 0);
        (data, starts)
    }

    #[test]
    fn a_clean_buffer_is_one_run() {
        let (data, starts) = buffer(4, 3, 10, 500);
        let scan = scan(&data, 0, None);
        assert!(scan.is_clean());
        assert_eq!(
            scan.runs,
            vec![Run {
                from: 0,
                to: data.len() - 500,
                base_offset: 0,
                next_offset: 12
            }]
        );
        assert_eq!(starts.len(), 4);
        assert_eq!(scan.next_offset(0), 12);
    }

    #[test]
    fn an_empty_buffer_has_no_run_and_no_damage() {
        let scan = scan(&[0u8; 4096], 40, None);
        assert_eq!(scan, Scan::default());
        assert_eq!(scan.next_offset(40), 40);
    }

    /// A byte flipped in a middle batch loses that batch's offsets only:
    /// the batches after it are kept at their own offsets.
    #[test]
    fn damage_in_the_middle_keeps_what_follows() {
        let (mut data, starts) = buffer(5, 4, 30, 200);
        data[starts[2] + 70] ^= 0x10;
        let scan = scan(&data, 0, None);
        assert_eq!(scan.runs.len(), 2);
        assert_eq!((scan.runs[0].base_offset, scan.runs[0].next_offset), (0, 8));
        assert_eq!(
            (scan.runs[1].base_offset, scan.runs[1].next_offset),
            (12, 20)
        );
        assert_eq!(scan.runs[1].from, starts[3]);
        assert_eq!(
            scan.damage,
            vec![Damage {
                from: starts[2],
                to: starts[3],
                from_offset: 8,
                to_offset: 12,
                cut_short: false,
            }]
        );
        assert_eq!(scan.next_offset(0), 20);
    }

    /// A flipped byte in the last batch, whose records still account for
    /// its length: its stated count is lost, nothing more.
    #[test]
    fn damage_in_the_last_batch_loses_its_count() {
        let (mut data, starts) = buffer(3, 5, 20, 300);
        data[starts[2] + 70] ^= 0x01; // a value byte of record 0
        let scan = scan(&data, 0, None);
        assert_eq!(scan.runs.len(), 1);
        assert_eq!(scan.damage.len(), 1);
        assert_eq!(
            (scan.damage[0].from_offset, scan.damage[0].to_offset),
            (10, 15)
        );
        assert!(
            !scan.damage[0].cut_short,
            "a whole batch with a flipped byte"
        );
    }

    /// A batch cut short by a crash (its tail still zeros) was never
    /// acknowledged; its header's count is fenced off all the same.
    #[test]
    fn a_write_cut_short_is_fenced_by_its_stated_count() {
        let (mut data, starts) = buffer(3, 6, 50, 0);
        let cut = starts[2] + 120;
        data[cut..].fill(0);
        let scan = scan(&data, 0, None);
        assert_eq!((scan.runs[0].next_offset, scan.damage.len()), (12, 1));
        assert_eq!(scan.damage[0].to_offset, 18);
        assert!(scan.damage[0].cut_short);
    }

    /// Without a readable header, the fence is one offset per smallest
    /// record the damaged bytes could hold; a stated end wins over it.
    #[test]
    fn an_unreadable_tail_is_fenced_conservatively_or_by_the_stated_end() {
        let (mut data, starts) = buffer(2, 2, 10, 64);
        let bytes = data.len() - 64 - starts[1];
        data[starts[1] + 16] = 9; // version
        let fenced = scan(&data, 0, None);
        assert_eq!(fenced.damage[0].from_offset, 2);
        assert_eq!(
            fenced.damage[0].to_offset,
            2 + bytes.div_ceil(RECORD_HEADER_BYTES) as u64
        );
        let stated = scan(&data, 0, Some(4));
        assert_eq!(stated.damage[0].to_offset, 4);
    }

    /// A buffer whose data stops before the end something else states
    /// (pages lost with the host) lost the offsets in between.
    #[test]
    fn data_short_of_the_stated_end_is_damage() {
        let (data, _) = buffer(2, 2, 10, 100);
        let scan = scan(&data, 0, Some(9));
        assert_eq!(scan.runs[0].next_offset, 4);
        assert_eq!(
            (scan.damage[0].from_offset, scan.damage[0].to_offset),
            (4, 9)
        );
    }

    /// Seeded: flip one random byte of a random batch; every batch but
    /// that one is kept, and the lost offsets are exactly that batch's
    /// (or, in the last batch, at least its own). Prints its seed.
    #[test]
    fn any_single_flip_loses_only_its_own_batch() {
        let mut rng = test_support::SeededRng::from_env();
        let seed = rng.seed;
        let (clean, starts) = buffer(8, 3, 40, 256);
        let end = clean.len() - 256;
        for _ in 0..200 {
            let victim = rng.below(starts.len() as u64) as usize;
            let from = starts[victim];
            let to = starts.get(victim + 1).copied().unwrap_or(end);
            // The base offset (bytes 0..8) is outside the checksum, so a
            // flip there may leave a batch that verifies at the wrong
            // offset: damage all the same, and caught by the offset test.
            let at = from + rng.below((to - from) as u64) as usize;
            let mut data = clean.clone();
            data[at] ^= 1 << rng.below(8);
            let scan = scan(&data, 0, None);
            let lost_from = victim as u64 * 3;
            assert_eq!(scan.damage.len(), 1, "seed {seed}: flip at {at}");
            assert_eq!(scan.damage[0].from_offset, lost_from, "seed {seed}");
            if victim + 1 < starts.len() {
                assert_eq!(scan.damage[0].to_offset, lost_from + 3, "seed {seed}");
                assert_eq!(scan.next_offset(0), 24, "seed {seed}");
            } else {
                assert!(scan.damage[0].to_offset >= 24, "seed {seed}");
            }
            let kept: u64 = scan
                .runs
                .iter()
                .map(|r| r.next_offset - r.base_offset)
                .sum();
            assert_eq!(kept, 21, "seed {seed}: flip at {at}");
        }
    }
}
