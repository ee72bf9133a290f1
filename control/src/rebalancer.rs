//! [`RebalancePolicy`] and the rebalancer: move a segment off a broker much
//! hotter than the rest.
//!
//! A broker is hot when its utilization is over `hot_ratio` times the mean
//! of all live brokers and over `utilization_min` (moving load among idle
//! brokers helps nobody). The rebalancer then moves one segment from the
//! hottest broker to the coldest: the one that leaves the pair's larger
//! utilization smallest, provided that is below the hot broker's current
//! one (a move never just shifts the hot spot). At most one move per
//! `cooldown_ms`, and never of a segment younger than that (a segment just
//! moved, split or merged stays put while its traffic settles).

use crate::placement::{subtract, utilization, BrokerLoad};
use crate::{BrokerId, Rate};

/// When the rebalancer moves segments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RebalancePolicy {
    /// A broker is hot above this multiple of the mean utilization (> 1).
    pub hot_ratio: f64,
    /// ... and above this utilization (a share of its capacity).
    pub utilization_min: f64,
    /// At most one move per this many ms, and no move of a segment younger
    /// than this.
    pub cooldown_ms: u64,
}

impl Default for RebalancePolicy {
    /// Hot at 1.5 times the mean and 10% of capacity; one move a minute.
    fn default() -> RebalancePolicy {
        RebalancePolicy {
            hot_ratio: 1.5,
            utilization_min: 0.1,
            cooldown_ms: 60_000,
        }
    }
}

/// An open segment the rebalancer may move.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Movable {
    /// Its owner.
    pub(crate) broker: BrokerId,
    /// Its current rate.
    pub(crate) rate: Rate,
    /// When it was created.
    pub(crate) created_ms: u64,
}

/// The hot broker and the cold one to relieve it, if a move is due at
/// `now_ms`: `(hot, cold)`.
pub(crate) fn hot_and_cold(
    policy: &RebalancePolicy,
    now_ms: u64,
    last_move_ms: Option<u64>,
    brokers: &[BrokerLoad],
) -> Option<(BrokerId, BrokerId)> {
    let (hot, cold) = hot_and_cold_loads(policy, now_ms, last_move_ms, brokers)?;
    Some((hot.id, cold.id))
}

fn hot_and_cold_loads<'a>(
    policy: &RebalancePolicy,
    now_ms: u64,
    last_move_ms: Option<u64>,
    brokers: &'a [BrokerLoad],
) -> Option<(&'a BrokerLoad, &'a BrokerLoad)> {
    if brokers.len() < 2 {
        return None;
    }
    if last_move_ms.is_some_and(|last| now_ms.saturating_sub(last) < policy.cooldown_ms) {
        return None;
    }
    // Ties go to the lowest id, on both ends.
    let hot = brokers.iter().max_by(|a, b| {
        a.utilization()
            .total_cmp(&b.utilization())
            .then(b.id.cmp(&a.id))
    })?;
    let cold = brokers.iter().min_by(|a, b| {
        a.utilization()
            .total_cmp(&b.utilization())
            .then(a.id.cmp(&b.id))
    })?;
    let mean = brokers.iter().map(BrokerLoad::utilization).sum::<f64>() / brokers.len() as f64;
    let hot_utilization = hot.utilization();
    if hot.id == cold.id
        || hot_utilization <= policy.utilization_min
        || hot_utilization <= policy.hot_ratio * mean
    {
        return None;
    }
    Some((hot, cold))
}

/// The move to make, if any: (index into `segments`, from, to).
pub(crate) fn propose(
    policy: &RebalancePolicy,
    now_ms: u64,
    last_move_ms: Option<u64>,
    brokers: &[BrokerLoad],
    segments: &[Movable],
) -> Option<(usize, BrokerId, BrokerId)> {
    let (hot, cold) = hot_and_cold_loads(policy, now_ms, last_move_ms, brokers)?;
    let hot_utilization = hot.utilization();
    let mut best: Option<(f64, usize)> = None;
    for (i, segment) in segments.iter().enumerate() {
        if segment.broker != hot.id
            || now_ms.saturating_sub(segment.created_ms) < policy.cooldown_ms
        {
            continue;
        }
        let source = utilization(subtract(hot.load, segment.rate), hot.capacity);
        let target = cold.utilization_with(segment.rate);
        let worst = source.max(target);
        if worst < hot_utilization && best.is_none_or(|(b, _)| worst < b) {
            best = Some((worst, i));
        }
    }
    best.map(|(_, i)| (i, hot.id, cold.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Capacity;

    fn broker(id: u32, bytes_load: u64) -> BrokerLoad {
        BrokerLoad {
            id: BrokerId(id),
            capacity: Capacity {
                bytes_per_s: 100,
                records_per_s: 100,
            },
            load: Rate {
                bytes_per_s: bytes_load,
                records_per_s: 0,
            },
            segments: 0,
        }
    }

    fn segment(broker: u32, bytes_per_s: u64, created_ms: u64) -> Movable {
        Movable {
            broker: BrokerId(broker),
            rate: Rate {
                bytes_per_s,
                records_per_s: 0,
            },
            created_ms,
        }
    }

    const POLICY: RebalancePolicy = RebalancePolicy {
        hot_ratio: 1.5,
        utilization_min: 0.1,
        cooldown_ms: 1_000,
    };

    #[test]
    fn moves_the_segment_that_evens_out_best() {
        let brokers = [broker(1, 90), broker(2, 10), broker(3, 20)];
        // b1 = 0.9 > 1.5 * mean 0.4. Moving 40 gives max(0.5, 0.5).
        let segments = [
            segment(1, 10, 0),
            segment(1, 40, 0),
            segment(1, 40, 0),
            segment(2, 10, 0),
        ];
        assert_eq!(
            propose(&POLICY, 5_000, None, &brokers, &segments),
            Some((1, BrokerId(1), BrokerId(2)))
        );
    }

    #[test]
    fn no_move_that_only_shifts_the_hot_spot() {
        let brokers = [broker(1, 90), broker(2, 0)];
        assert_eq!(
            propose(&POLICY, 5_000, None, &brokers, &[segment(1, 90, 0)]),
            None
        );
    }

    #[test]
    fn cooldowns_thresholds_and_young_segments() {
        let brokers = [broker(1, 60), broker(2, 0)];
        let segments = [segment(1, 30, 0), segment(1, 30, 4_500)];
        assert_eq!(
            propose(&POLICY, 5_000, None, &brokers, &segments),
            Some((0, BrokerId(1), BrokerId(2)))
        );
        assert_eq!(
            propose(&POLICY, 5_000, None, &brokers, &segments[1..]),
            None,
            "too young"
        );
        assert_eq!(
            propose(&POLICY, 5_000, Some(4_500), &brokers, &segments),
            None
        );
        assert!(propose(&POLICY, 5_500, Some(4_500), &brokers, &segments).is_some());
        let idle = [broker(1, 9), broker(2, 0)];
        assert_eq!(
            propose(&POLICY, 5_000, None, &idle, &[segment(1, 9, 0)]),
            None
        );
        let even = [broker(1, 60), broker(2, 50)];
        assert_eq!(propose(&POLICY, 5_000, None, &even, &segments), None);
        assert_eq!(
            propose(&POLICY, 5_000, None, &brokers[..1], &segments),
            None
        );
    }
}
