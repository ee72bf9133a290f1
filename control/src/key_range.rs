//! [`KeyRange`]: a half-open range of the key-hash ring.

/// The exclusive end of the key-hash ring: hashes are `u32`, the ring is
/// `[0, RING_END)`.
pub const RING_END: u64 = 1 << 32;

/// A half-open range `[start, end)` of the ring `[0, 2^32)`, never empty.
///
/// `end` is a `u64` so the range that reaches the top of the ring can say
/// `end = 2^32` without wrapping. Invariant: `start < end <= RING_END`.
/// Persisted as `{"start": .., "end": ..}`; deserializing validates.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "KeyRangeFields")]
pub struct KeyRange {
    start: u32,
    end: u64,
}

/// The unvalidated persisted shape of a [`KeyRange`].
#[derive(serde::Deserialize)]
struct KeyRangeFields {
    start: u32,
    end: u64,
}

/// Persisted bounds that break `start < end <= 2^32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid key range [{start}, {end}): need start < end <= 2^32")]
#[non_exhaustive]
struct InvalidKeyRange {
    start: u32,
    end: u64,
}

impl TryFrom<KeyRangeFields> for KeyRange {
    type Error = InvalidKeyRange;

    fn try_from(fields: KeyRangeFields) -> Result<KeyRange, InvalidKeyRange> {
        KeyRange::new(fields.start, fields.end).ok_or(InvalidKeyRange {
            start: fields.start,
            end: fields.end,
        })
    }
}

impl KeyRange {
    /// The whole ring.
    pub const FULL: KeyRange = KeyRange {
        start: 0,
        end: RING_END,
    };

    /// `[start, end)`, or `None` unless `start < end <= RING_END`.
    pub fn new(start: u32, end: u64) -> Option<KeyRange> {
        (u64::from(start) < end && end <= RING_END).then_some(KeyRange { start, end })
    }

    /// The first hash in the range.
    pub fn start(&self) -> u32 {
        self.start
    }

    /// One past the last hash in the range (at most [`RING_END`]).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// How many hashes the range covers (at least 1).
    pub fn len(&self) -> u64 {
        self.end - u64::from(self.start)
    }

    /// Always false: a `KeyRange` is never empty. Present because clippy
    /// expects `is_empty` beside `len`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// True if `hash` falls in `[start, end)`.
    pub fn contains(&self, hash: u32) -> bool {
        self.start <= hash && u64::from(hash) < self.end
    }

    /// Cut this range into `n` consecutive ranges that tile it exactly, in
    /// order, with sizes differing by at most 1 (the larger ones first).
    /// Empty if `n` is 0 or larger than [`len`](Self::len), since a
    /// `KeyRange` cannot be empty.
    pub fn split_even(&self, n: u32) -> Vec<KeyRange> {
        let count = u64::from(n);
        if count == 0 || count > self.len() {
            return Vec::new();
        }
        let base = self.len() / count;
        let larger = self.len() % count;
        let mut ranges = Vec::with_capacity(n as usize);
        let mut start = u64::from(self.start);
        for i in 0..count {
            let end = start + base + u64::from(i < larger);
            ranges.push(KeyRange {
                start: u32::try_from(start)
                    .expect("each piece starts before the range's end <= 2^32"),
                end,
            });
            start = end;
        }
        debug_assert_eq!(start, self.end);
        ranges
    }
}

impl std::fmt::Display for KeyRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{:#010x}, {:#011x})", self.start, self.end)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn new_checks_bounds() {
        assert_eq!(KeyRange::new(0, RING_END), Some(KeyRange::FULL));
        assert!(KeyRange::new(5, 5).is_none());
        assert!(KeyRange::new(6, 5).is_none());
        assert!(KeyRange::new(0, RING_END + 1).is_none());
        assert_eq!(KeyRange::new(u32::MAX, RING_END).unwrap().len(), 1);
    }

    #[test]
    fn contains_is_half_open() {
        let r = KeyRange::new(10, 20).unwrap();
        assert!(!r.contains(9));
        assert!(r.contains(10));
        assert!(r.contains(19));
        assert!(!r.contains(20));
        assert!(KeyRange::FULL.contains(0));
        assert!(KeyRange::FULL.contains(u32::MAX));
    }

    fn assert_tiles(parent: KeyRange, pieces: &[KeyRange], n: u32) {
        assert_eq!(pieces.len(), n as usize);
        assert_eq!(pieces[0].start(), parent.start());
        assert_eq!(pieces[pieces.len() - 1].end(), parent.end());
        for pair in pieces.windows(2) {
            assert_eq!(pair[0].end(), u64::from(pair[1].start()), "gap or overlap");
        }
        let min = pieces.iter().map(KeyRange::len).min().unwrap();
        let max = pieces.iter().map(KeyRange::len).max().unwrap();
        assert!(max - min <= 1, "n={n}: sizes {min}..={max}");
        assert_eq!(pieces.iter().map(KeyRange::len).sum::<u64>(), parent.len());
    }

    #[test]
    fn split_even_tiles_the_ring_for_every_count_up_to_1024() {
        for n in 1..=1024 {
            assert_tiles(KeyRange::FULL, &KeyRange::FULL.split_even(n), n);
        }
        for n in [3_000, 65_537, 1 << 20] {
            assert_tiles(KeyRange::FULL, &KeyRange::FULL.split_even(n), n);
        }
    }

    #[test]
    fn split_even_of_a_sub_range() {
        let r = KeyRange::new(100, 110).unwrap();
        for n in 1..=10 {
            assert_tiles(r, &r.split_even(n), n);
        }
        assert!(r.split_even(11).is_empty());
        assert!(r.split_even(0).is_empty());
        let halves = KeyRange::FULL.split_even(2);
        assert_eq!(halves[0], KeyRange::new(0, 1 << 31).unwrap());
        assert_eq!(halves[1], KeyRange::new(1 << 31, RING_END).unwrap());
    }

    #[test]
    fn serde_validates() {
        let json = serde_json::to_string(&KeyRange::FULL).unwrap();
        assert_eq!(json, r#"{"start":0,"end":4294967296}"#);
        assert_eq!(
            serde_json::from_str::<KeyRange>(&json).unwrap(),
            KeyRange::FULL
        );
        for bad in [
            r#"{"start":5,"end":5}"#,
            r#"{"start":0,"end":4294967297}"#,
            r#"{"start":-1,"end":5}"#,
            r#"{"start":4294967296,"end":4294967297}"#,
            r#"{"start":0}"#,
        ] {
            assert!(serde_json::from_str::<KeyRange>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn invalid_fields_say_the_bounds() {
        let err = KeyRange::try_from(KeyRangeFields { start: 5, end: 5 }).unwrap_err();
        assert_eq!(err, InvalidKeyRange { start: 5, end: 5 });
        assert_eq!(
            err.to_string(),
            "invalid key range [5, 5): need start < end <= 2^32"
        );
        let err = serde_json::from_str::<KeyRange>(r#"{"start":0,"end":4294967297}"#).unwrap_err();
        assert!(
            err.to_string()
                .contains("invalid key range [0, 4294967297): need start < end <= 2^32"),
            "{err}"
        );
    }
}
