//! [`Placement`]: which live broker takes a new segment.
//!
//! The least-utilized one: utilization is a broker's reported traffic
//! divided by its capacity (the larger of the bytes and records ratios).
//! Ties go to the broker with fewer open segments, then to the lower id, so
//! the same inputs always give the same choice. Each pick adds the new
//! segment's expected traffic to its broker, so the pieces of one split or
//! of one new topic spread out.

use crate::{BrokerId, Capacity, Rate};

/// One live broker as placement and the rebalancer see it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BrokerLoad {
    pub(crate) id: BrokerId,
    pub(crate) capacity: Capacity,
    /// The sum of its open segments' rates.
    pub(crate) load: Rate,
    /// How many open segments it owns.
    pub(crate) segments: u64,
}

impl BrokerLoad {
    /// `load` (plus `extra`) as a share of capacity.
    pub(crate) fn utilization_with(&self, extra: Rate) -> f64 {
        utilization(add(self.load, extra), self.capacity)
    }

    pub(crate) fn utilization(&self) -> f64 {
        self.utilization_with(Rate::default())
    }
}

/// `rate` as a share of `capacity`: the larger of the two ratios.
pub(crate) fn utilization(rate: Rate, capacity: Capacity) -> f64 {
    let ratio = |value: u64, cap: u64| value as f64 / cap.max(1) as f64;
    ratio(rate.bytes_per_s, capacity.bytes_per_s)
        .max(ratio(rate.records_per_s, capacity.records_per_s))
}

pub(crate) fn add(a: Rate, b: Rate) -> Rate {
    Rate {
        bytes_per_s: a.bytes_per_s.saturating_add(b.bytes_per_s),
        records_per_s: a.records_per_s.saturating_add(b.records_per_s),
    }
}

pub(crate) fn subtract(a: Rate, b: Rate) -> Rate {
    Rate {
        bytes_per_s: a.bytes_per_s.saturating_sub(b.bytes_per_s),
        records_per_s: a.records_per_s.saturating_sub(b.records_per_s),
    }
}

/// The live brokers, with their loads, for a run of placements.
#[derive(Debug, Clone)]
pub(crate) struct Placement {
    brokers: Vec<BrokerLoad>,
    /// How many open segments each of `brokers` follows (same order).
    followed: Vec<u64>,
}

impl Placement {
    pub(crate) fn new(brokers: Vec<BrokerLoad>) -> Placement {
        let followed = vec![0; brokers.len()];
        Placement { brokers, followed }
    }

    /// Count one more open segment followed by `broker`.
    pub(crate) fn add_follower(&mut self, broker: BrokerId) {
        if let Some(i) = self.brokers.iter().position(|b| b.id == broker) {
            self.followed[i] += 1;
        }
    }

    /// Take a segment about to be sealed (carrying `rate`) off `broker`'s
    /// books, so its successors are placed as if it were gone.
    pub(crate) fn release(&mut self, broker: BrokerId, rate: Rate) {
        if let Some(b) = self.brokers.iter_mut().find(|b| b.id == broker) {
            b.load = subtract(b.load, rate);
            b.segments = b.segments.saturating_sub(1);
        }
    }

    /// Pick the broker for a segment expected to carry `expected`, never
    /// `avoid`; `None` if no other broker is live. The pick is charged with
    /// `expected` and one more segment.
    pub(crate) fn pick(&mut self, expected: Rate, avoid: Option<BrokerId>) -> Option<BrokerId> {
        let best = self
            .brokers
            .iter_mut()
            .filter(|b| Some(b.id) != avoid)
            .min_by(|a, b| {
                a.utilization()
                    .total_cmp(&b.utilization())
                    .then(a.segments.cmp(&b.segments))
                    .then(a.id.cmp(&b.id))
            })?;
        best.load = add(best.load, expected);
        best.segments += 1;
        Some(best.id)
    }

    /// Pick up to `count` brokers for a segment's followers, none in
    /// `avoid` (its owner, its other followers) and each once, the least
    /// utilized first; fewer if fewer brokers are live. Each pick is charged with `expected`
    /// (a follower receives every byte the owner does) and one more
    /// segment followed: ties go to the broker following fewer, so
    /// followers spread as owners do, apart from them.
    pub(crate) fn pick_followers(
        &mut self,
        expected: Rate,
        avoid: &[BrokerId],
        count: usize,
    ) -> Vec<BrokerId> {
        let mut picked = Vec::with_capacity(count);
        while picked.len() < count {
            let followed = &self.followed;
            let best = (0..self.brokers.len())
                .filter(|&i| {
                    let id = self.brokers[i].id;
                    !avoid.contains(&id) && !picked.contains(&id)
                })
                .min_by(|&i, &j| {
                    let (a, b) = (&self.brokers[i], &self.brokers[j]);
                    a.utilization()
                        .total_cmp(&b.utilization())
                        .then(followed[i].cmp(&followed[j]))
                        .then(a.segments.cmp(&b.segments))
                        .then(a.id.cmp(&b.id))
                });
            let Some(i) = best else { break };
            let best = &mut self.brokers[i];
            best.load = add(best.load, expected);
            self.followed[i] += 1;
            picked.push(best.id);
        }
        picked
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn broker(id: u32, bytes_cap: u64, bytes_load: u64, segments: u64) -> BrokerLoad {
        BrokerLoad {
            id: BrokerId(id),
            capacity: Capacity {
                bytes_per_s: bytes_cap,
                records_per_s: 1_000,
            },
            load: Rate {
                bytes_per_s: bytes_load,
                records_per_s: 0,
            },
            segments,
        }
    }

    fn rate(bytes_per_s: u64) -> Rate {
        Rate {
            bytes_per_s,
            records_per_s: 0,
        }
    }

    #[test]
    fn least_utilized_then_fewest_segments_then_lowest_id() {
        // b1 carries more bytes but has twice the capacity: 0.25 < 0.3.
        let mut p = Placement::new(vec![broker(1, 200, 50, 9), broker(2, 100, 30, 0)]);
        assert_eq!(p.pick(rate(0), None), Some(BrokerId(1)));
        let mut p = Placement::new(vec![broker(3, 100, 0, 2), broker(4, 100, 0, 1)]);
        assert_eq!(p.pick(rate(0), None), Some(BrokerId(4)));
        assert_eq!(
            p.pick(rate(0), None),
            Some(BrokerId(3)),
            "tie on segments: lower id"
        );
        assert_eq!(p.pick(rate(0), None), Some(BrokerId(4)));
        assert_eq!(p.pick(rate(0), None), Some(BrokerId(3)));
    }

    #[test]
    fn followers_go_to_other_brokers_than_the_owner_and_each_other() {
        let mut p = Placement::new(vec![
            broker(1, 100, 0, 0),
            broker(2, 100, 50, 0),
            broker(3, 100, 10, 0),
        ]);
        assert_eq!(
            p.pick_followers(rate(0), &[BrokerId(1)], 1),
            [BrokerId(3)],
            "the least utilized broker other than the owner"
        );
        assert_eq!(
            p.pick_followers(rate(0), &[BrokerId(3)], 5),
            [BrokerId(1), BrokerId(2)],
            "no more followers than other brokers"
        );
        let mut alone = Placement::new(vec![broker(1, 100, 0, 0)]);
        assert!(alone.pick_followers(rate(0), &[BrokerId(1)], 1).is_empty());
    }

    #[test]
    fn picks_are_charged_so_pieces_spread() {
        let mut p = Placement::new(vec![
            broker(1, 100, 0, 0),
            broker(2, 100, 10, 0),
            broker(3, 100, 20, 0),
        ]);
        let picks: Vec<u32> = (0..6).map(|_| p.pick(rate(15), None).unwrap().0).collect();
        assert_eq!(picks, [1, 2, 1, 3, 2, 1]);
    }

    #[test]
    fn avoid_and_empty() {
        let mut p = Placement::new(vec![broker(1, 100, 0, 0)]);
        assert_eq!(p.pick(rate(1), Some(BrokerId(1))), None);
        assert_eq!(Placement::new(Vec::new()).pick(rate(1), None), None);
        let mut p = Placement::new(vec![broker(1, 100, 0, 0), broker(2, 100, 90, 5)]);
        assert_eq!(p.pick(rate(1), Some(BrokerId(1))), Some(BrokerId(2)));
        // b2 now carries 91 over 6 segments; release one of 80.
        p.release(BrokerId(2), rate(80));
        p.release(BrokerId(9), rate(80));
        assert_eq!((p.brokers[1].load, p.brokers[1].segments), (rate(11), 5));
        p.release(BrokerId(2), rate(80));
        assert_eq!((p.brokers[1].load, p.brokers[1].segments), (rate(0), 4));
        assert_eq!(
            p.pick(rate(0), None),
            Some(BrokerId(1)),
            "tie on load: fewer segments"
        );
    }

    #[test]
    fn utilization_takes_the_larger_ratio() {
        let cap = Capacity {
            bytes_per_s: 100,
            records_per_s: 10,
        };
        let r = Rate {
            bytes_per_s: 50,
            records_per_s: 8,
        };
        assert_eq!(utilization(r, cap), 0.8);
        assert_eq!(subtract(r, rate(60)).bytes_per_s, 0);
    }
}
