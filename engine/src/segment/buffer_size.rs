//! How big a segment's next buffer is: a segment that fills its buffers
//! gets bigger ones, doubling up to `buffer_bytes_max`; one that seals them
//! mostly empty (by age, or early for a `durable` producer) gets smaller
//! ones again, halving down to `buffer_bytes`.
//!
//! Every buffer costs a fixed amount besides its bytes: a spare file made,
//! its blocks reserved, mapped and its pages brought in; a seal (index and
//! header); a flush (a rename or an upload, an fdatasync and its journal
//! commit). At 1.1 GB/s into 8 MiB buffers that is 130 of each a second,
//! and it was nearly half of the broker's CPU per GB (BENCHMARKS.md,
//! "Buffers that grow"). A quiet segment keeps small buffers, so its chunks stay
//! small and its reserved disk stays `buffer_bytes` a buffer.
//!
//! Pure: the caller reports each seal; nothing here does I/O.

/// A sealed buffer at least this many quarters full makes the next one
/// twice as big (up to the limit).
const GROW_AT_QUARTERS: u64 = 3;
/// A sealed buffer less than this many quarters full makes the next one
/// half as big (down to the floor).
const SHRINK_BELOW_QUARTERS: u64 = 1;

/// The data capacity of a segment's next buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BufferSize {
    next: u64,
    /// `buffer_bytes`: where a segment starts, and the floor.
    floor: u64,
    /// `buffer_bytes_max` (never below the floor).
    ceiling: u64,
}

impl BufferSize {
    pub(crate) fn new(floor: u64, ceiling: u64) -> BufferSize {
        BufferSize {
            next: floor,
            floor,
            ceiling: ceiling.max(floor),
        }
    }

    /// Data bytes the next buffer holds.
    pub(crate) fn next(&self) -> u64 {
        self.next
    }

    /// A buffer of `capacity` data bytes was sealed holding `data` bytes.
    pub(crate) fn handle_sealed(&mut self, data: u64, capacity: u64) {
        let quarters = data.saturating_mul(4);
        if quarters >= capacity.saturating_mul(GROW_AT_QUARTERS) {
            self.next = self.next.saturating_mul(2).min(self.ceiling);
        } else if quarters < capacity.saturating_mul(SHRINK_BELOW_QUARTERS) {
            self.next = (self.next / 2).max(self.floor);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Full buffers double the next one up to the ceiling; nearly empty
    /// ones halve it down to the floor; in between it stays.
    #[test]
    fn grows_with_full_buffers_and_shrinks_with_empty_ones() {
        let mut size = BufferSize::new(8 * MIB, 64 * MIB);
        assert_eq!(size.next(), 8 * MIB);
        for want in [16, 32, 64, 64] {
            let capacity = size.next();
            size.handle_sealed(capacity - MIB, capacity);
            assert_eq!(size.next(), want * MIB);
        }
        size.handle_sealed(40 * MIB, 64 * MIB);
        assert_eq!(size.next(), 64 * MIB, "over a quarter, under 3/4: kept");
        for want in [32, 16, 8, 8] {
            size.handle_sealed(276, size.next());
            assert_eq!(size.next(), want * MIB);
        }
    }

    /// A spare made at an older size reports its own capacity: a full
    /// small buffer still grows the next one.
    #[test]
    fn each_seal_is_judged_by_its_own_capacity() {
        let mut size = BufferSize::new(8 * MIB, 64 * MIB);
        size.handle_sealed(8 * MIB, 8 * MIB);
        size.handle_sealed(8 * MIB, 8 * MIB);
        assert_eq!(size.next(), 32 * MIB);
        size.handle_sealed(3 * MIB, 16 * MIB);
        assert_eq!(size.next(), 16 * MIB);
    }

    /// A ceiling below the floor means buffers never grow.
    #[test]
    fn a_ceiling_below_the_floor_keeps_the_floor() {
        let mut size = BufferSize::new(8 * MIB, MIB);
        size.handle_sealed(8 * MIB, 8 * MIB);
        assert_eq!(size.next(), 8 * MIB);
    }
}
