//! [`Membership`]: the registry of live brokers, when each was last heard
//! from, and which open segments each owns on which shard.
//!
//! A broker joins by registering, proves it is alive with every load report
//! (or heartbeat), and is gone when it leaves or stays silent longer than
//! the configured silence. Departed brokers are forgotten: one that comes
//! back registers again like a new one.

use std::collections::{BTreeMap, BTreeSet};

use crate::{BrokerId, BrokerInfo, ControlError, InvalidRegistration, Rate, SegmentId, TopicName};

/// Most brokers registered at once.
pub const BROKERS_MAX: usize = 4096;

/// A broker's report about one segment it owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentLoad {
    /// The topic.
    pub topic: TopicName,
    /// The segment.
    pub segment: SegmentId,
    /// Its traffic since the broker's previous report.
    pub rate: Rate,
    /// How far behind each of its followers is, as the owner sees it.
    pub followers: Vec<FollowerLag>,
}

/// How far behind its owner one follower of a segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerLag {
    /// The follower's broker.
    pub broker: BrokerId,
    /// How long since it last held every record the owner had, in ms (0:
    /// it does now; `u64::MAX`: not since it was named out of sync).
    pub lag_ms: u64,
}

/// What the registry knows about one live broker.
#[derive(Debug, Clone)]
pub struct BrokerEntry {
    info: BrokerInfo,
    joined_ms: u64,
    last_seen_ms: u64,
    /// Open segments owned, by topic and id.
    segments: BTreeSet<(TopicName, SegmentId)>,
    /// Open segments per shard, index = shard.
    segments_per_shard: Vec<u32>,
}

impl BrokerEntry {
    /// What the broker registered with.
    pub fn info(&self) -> &BrokerInfo {
        &self.info
    }

    /// When it (last) registered.
    pub fn joined_ms(&self) -> u64 {
        self.joined_ms
    }

    /// When it was last heard from.
    pub fn last_seen_ms(&self) -> u64 {
        self.last_seen_ms
    }

    /// The open segments it owns, by topic and id.
    pub fn segments(&self) -> &BTreeSet<(TopicName, SegmentId)> {
        &self.segments
    }

    /// How many open segments each of its shards owns.
    pub fn segments_per_shard(&self) -> &[u32] {
        &self.segments_per_shard
    }

    /// The shard with the fewest open segments, lowest index on ties.
    pub fn least_loaded_shard(&self) -> u16 {
        let shard = (0..self.segments_per_shard.len())
            .min_by_key(|i| (self.segments_per_shard[*i], *i))
            .unwrap_or(0);
        u16::try_from(shard).unwrap_or(0)
    }
}

/// The live brokers, by id.
#[derive(Debug, Clone, Default)]
pub struct Membership {
    brokers: BTreeMap<BrokerId, BrokerEntry>,
}

impl Membership {
    /// No brokers.
    pub fn new() -> Membership {
        Membership::default()
    }

    /// Register `info` at `now_ms`: a new broker, or a live one
    /// re-registering (its addresses and capacity are replaced, what it owns
    /// is kept). A live broker that owns open segments cannot change its
    /// shard count: it must leave first.
    pub(crate) fn join(&mut self, now_ms: u64, info: BrokerInfo) -> Result<(), ControlError> {
        info.validate()?;
        let shard_count = usize::from(info.shard_count());
        if let Some(entry) = self.brokers.get_mut(&info.id) {
            if entry.segments_per_shard.len() != shard_count && !entry.segments.is_empty() {
                return Err(ControlError::InvalidBroker(
                    InvalidRegistration::ShardCountChanged {
                        broker: info.id,
                        segments: entry.segments.len(),
                        shards: entry.segments_per_shard.len(),
                        requested: shard_count,
                    },
                ));
            }
            entry.segments_per_shard.resize(shard_count, 0);
            entry.info = info;
            entry.last_seen_ms = entry.last_seen_ms.max(now_ms);
            return Ok(());
        }
        if self.brokers.len() >= BROKERS_MAX {
            return Err(ControlError::TooManyBrokers { max: BROKERS_MAX });
        }
        self.brokers.insert(
            info.id,
            BrokerEntry {
                info,
                joined_ms: now_ms,
                last_seen_ms: now_ms,
                segments: BTreeSet::new(),
                segments_per_shard: vec![0; shard_count],
            },
        );
        Ok(())
    }

    /// Forget broker `id`; returns what was known of it.
    pub(crate) fn remove(&mut self, id: BrokerId) -> Option<BrokerEntry> {
        self.brokers.remove(&id)
    }

    /// Note that `id` was heard from at `now_ms`; false if it is not live.
    pub(crate) fn touch(&mut self, now_ms: u64, id: BrokerId) -> bool {
        match self.brokers.get_mut(&id) {
            Some(entry) => {
                entry.last_seen_ms = entry.last_seen_ms.max(now_ms);
                true
            }
            None => false,
        }
    }

    /// The control plane itself did not run for `stalled_ms` up to
    /// `now_ms`: what it could not hear in that time is not silence, so
    /// each broker's silence is counted from `stalled_ms` later (never
    /// past `now_ms`).
    pub(crate) fn excuse(&mut self, now_ms: u64, stalled_ms: u64) {
        for entry in self.brokers.values_mut() {
            entry.last_seen_ms = excused(entry.last_seen_ms, now_ms, stalled_ms);
        }
    }

    /// Brokers silent for more than `silence_ms` at `now_ms`, ascending.
    pub fn silent(&self, now_ms: u64, silence_ms: u64) -> Vec<BrokerId> {
        self.brokers
            .iter()
            .filter(|(_, entry)| now_ms.saturating_sub(entry.last_seen_ms) > silence_ms)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Record that `id` now owns open segment `segment` of `topic` on
    /// `shard`. False (and nothing recorded) if `id` is not live or has no
    /// such shard.
    pub(crate) fn add_segment(
        &mut self,
        id: BrokerId,
        topic: &TopicName,
        segment: SegmentId,
        shard: u16,
    ) -> bool {
        let Some(entry) = self.brokers.get_mut(&id) else {
            return false;
        };
        let Some(count) = entry.segments_per_shard.get_mut(usize::from(shard)) else {
            return false;
        };
        if entry.segments.insert((topic.clone(), segment)) {
            *count += 1;
        }
        true
    }

    /// Record that `id` no longer owns open segment `segment` of `topic`
    /// (sealed or deleted).
    pub(crate) fn remove_segment(
        &mut self,
        id: BrokerId,
        topic: &TopicName,
        segment: SegmentId,
        shard: u16,
    ) {
        if let Some(entry) = self.brokers.get_mut(&id) {
            if entry.segments.remove(&(topic.clone(), segment)) {
                if let Some(count) = entry.segments_per_shard.get_mut(usize::from(shard)) {
                    *count = count.saturating_sub(1);
                }
            }
        }
    }

    /// The live broker `id`, if it is live.
    pub fn broker(&self, id: BrokerId) -> Option<&BrokerEntry> {
        self.brokers.get(&id)
    }

    /// True if `id` is live.
    pub fn is_live(&self, id: BrokerId) -> bool {
        self.brokers.contains_key(&id)
    }

    /// How many shards live broker `id` has (0 if it is not live).
    pub fn shard_count(&self, id: BrokerId) -> u16 {
        self.brokers
            .get(&id)
            .map_or(0, |entry| entry.info().shard_count())
    }

    /// Every live broker, ascending by id.
    pub fn brokers(&self) -> impl Iterator<Item = (&BrokerId, &BrokerEntry)> {
        self.brokers.iter()
    }

    /// Every live broker's id, ascending.
    pub fn broker_ids(&self) -> impl Iterator<Item = BrokerId> + '_ {
        self.brokers.keys().copied()
    }

    /// How many brokers are live.
    pub fn len(&self) -> usize {
        self.brokers.len()
    }

    /// True if no broker is live.
    pub fn is_empty(&self) -> bool {
        self.brokers.is_empty()
    }
}

/// A moment `t_ms` as a stall of `stalled_ms` up to `now_ms` shifts it:
/// that much later, never past `now_ms`. The one rule for every clock a
/// stall excuses (brokers' silence, commands in flight, sealer waits).
pub(crate) fn excused(t_ms: u64, now_ms: u64, stalled_ms: u64) -> u64 {
    t_ms.saturating_add(stalled_ms).min(now_ms)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Capacity;

    fn info(id: u32, shards: usize) -> BrokerInfo {
        BrokerInfo {
            id: BrokerId(id),
            shard_addresses: (0..shards).map(|s| format!("10.0.0.{id}:{s}")).collect(),
            capacity: Capacity {
                bytes_per_s: 100,
                records_per_s: 100,
            },
        }
    }

    #[test]
    fn join_touch_and_silence() {
        let mut m = Membership::new();
        m.join(0, info(2, 2)).unwrap();
        m.join(500, info(1, 1)).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m.silent(1_000, 1_000), []);
        assert_eq!(m.silent(1_001, 1_000), [BrokerId(2)]);
        assert!(m.touch(1_001, BrokerId(2)));
        assert!(!m.touch(1_001, BrokerId(9)));
        assert_eq!(m.silent(1_501, 1_000), [BrokerId(1)]);
        assert_eq!(m.silent(9_000, 1_000), [BrokerId(1), BrokerId(2)]);
        // A stall of the control plane's own moves silence on, never past now.
        m.excuse(1_200, 100);
        assert_eq!(m.broker(BrokerId(2)).unwrap().last_seen_ms(), 1_101);
        assert_eq!(m.broker(BrokerId(1)).unwrap().last_seen_ms(), 600);
        m.excuse(1_200, 10_000);
        assert_eq!(m.broker(BrokerId(1)).unwrap().last_seen_ms(), 1_200);
        m.touch(1_001, BrokerId(2));
        assert_eq!(m.broker(BrokerId(2)).unwrap().last_seen_ms(), 1_200);
        // A stale touch never moves last_seen back.
        m.touch(10, BrokerId(2));
        assert_eq!(m.broker(BrokerId(2)).unwrap().last_seen_ms(), 1_200);
        assert!(m.remove(BrokerId(2)).is_some());
        assert!(!m.is_live(BrokerId(2)));
        let err = m.join(0, info(3, 0)).unwrap_err();
        assert!(
            matches!(
                err,
                ControlError::InvalidBroker(InvalidRegistration::ShardCount { count: 0, .. })
            ),
            "{err}"
        );

        let mut full = Membership::new();
        for id in 0..BROKERS_MAX as u32 {
            full.join(0, info(id, 1)).unwrap();
        }
        let err = full.join(0, info(BROKERS_MAX as u32, 1)).unwrap_err();
        assert!(
            matches!(err, ControlError::TooManyBrokers { max: BROKERS_MAX }),
            "{err}"
        );
        full.join(1, info(0, 1)).unwrap();
        assert_eq!(
            full.len(),
            BROKERS_MAX,
            "a live broker may still re-register"
        );
    }

    #[test]
    fn segments_per_shard_and_rejoin() {
        let mut m = Membership::new();
        let t = TopicName::parse("ns/t").unwrap();
        m.join(0, info(1, 3)).unwrap();
        assert!(m.add_segment(BrokerId(1), &t, SegmentId(0), 0));
        assert!(
            m.add_segment(BrokerId(1), &t, SegmentId(0), 0),
            "idempotent"
        );
        assert!(m.add_segment(BrokerId(1), &t, SegmentId(1), 2));
        assert!(
            !m.add_segment(BrokerId(1), &t, SegmentId(2), 3),
            "no shard 3"
        );
        assert!(!m.add_segment(BrokerId(7), &t, SegmentId(2), 0), "not live");
        let entry = m.broker(BrokerId(1)).unwrap();
        assert_eq!(entry.segments_per_shard(), [1, 0, 1]);
        assert_eq!(entry.least_loaded_shard(), 1);
        assert_eq!(entry.segments().len(), 2);

        let err = m.join(5, info(1, 2)).unwrap_err();
        assert!(
            matches!(
                err,
                ControlError::InvalidBroker(InvalidRegistration::ShardCountChanged {
                    broker: BrokerId(1),
                    segments: 2,
                    shards: 3,
                    requested: 2,
                })
            ),
            "{err}"
        );
        assert!(err.to_string().contains("without leaving first"), "{err}");
        m.join(5, info(1, 3)).unwrap();
        assert_eq!(m.broker(BrokerId(1)).unwrap().segments().len(), 2);

        m.remove_segment(BrokerId(1), &t, SegmentId(0), 0);
        m.remove_segment(BrokerId(1), &t, SegmentId(0), 0);
        assert_eq!(
            m.broker(BrokerId(1)).unwrap().segments_per_shard(),
            [0, 0, 1]
        );
        m.remove_segment(BrokerId(1), &t, SegmentId(1), 2);
        m.join(6, info(1, 1)).unwrap();
        assert_eq!(m.broker(BrokerId(1)).unwrap().segments_per_shard(), [0]);
    }
}
