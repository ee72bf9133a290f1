//! Routing: which open segment of a topic takes a key.
//!
//! A key goes to the open segment whose key-hash range `[start, end)`
//! contains `wire::key_hash(key)`. The empty key hashes like any other key
//! (to 0, so to the segment that starts the ring): keyless records then all
//! land in one segment, keep their publish order, and pass a broker's
//! range check. Spreading them round-robin would balance load but needs a
//! broker that exempts empty keys from that check.
//!
//! Each route carries its [`Target`], so code that sends to a segment
//! needs no other lookup.

use std::net::SocketAddr;

use wire::key_hash;
use wire::message::{Successors, TopicInfo};

use crate::error::ClientError;

/// Where a segment's requests go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    /// A shard of the broker the client bootstrapped from, by index in
    /// its shard list.
    Shard(u16),
    /// A shard of another broker (a cluster), resolved.
    Address(SocketAddr),
}

/// One open segment, as routing needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) segment: u32,
    pub(crate) target: Target,
    start: u32,
    end: u64,
}

/// The open segments of a topic, sorted by range start.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    routes: Vec<Route>,
}

impl Layout {
    /// The routing table of a topic whose segments all live on the
    /// bootstrap broker (each goes to its `shard`).
    pub(crate) fn new(topic: &TopicInfo) -> Result<Layout, ClientError> {
        let targets: Vec<Target> = topic
            .segments
            .iter()
            .map(|s| Target::Shard(s.shard))
            .collect();
        Layout::with_targets(topic, &targets)
    }

    /// The routing table of a topic, `targets[i]` being where segment `i`
    /// of `topic.segments` is sent. Refuses a topic with no open segment
    /// or with open segments whose ranges overlap (a broker bug that would
    /// break per-key order).
    pub(crate) fn with_targets(
        topic: &TopicInfo,
        targets: &[Target],
    ) -> Result<Layout, ClientError> {
        let mut routes: Vec<Route> = topic
            .segments
            .iter()
            .zip(targets)
            .filter(|(s, _)| !s.sealed)
            .map(|(s, target)| Route {
                segment: s.id,
                target: *target,
                start: s.start,
                end: s.end,
            })
            .collect();
        if routes.is_empty() {
            return Err(ClientError::Layout(format!(
                "topic {} has no open segment",
                topic.name
            )));
        }
        routes.sort_by_key(|r| r.start);
        if routes.windows(2).any(|w| w[0].end > u64::from(w[1].start)) {
            return Err(ClientError::Layout(format!(
                "open segments of topic {} overlap",
                topic.name
            )));
        }
        Ok(Layout { routes })
    }

    /// The highest segment id routed. Every change of a topic opens
    /// segments with ids above all before, and the newest segment of a
    /// layout is always open (a sealed one has newer successors), so this
    /// grows with every change: the scale [`Successors::layout_version`]
    /// is on.
    pub(crate) fn version(&self) -> u32 {
        self.routes.iter().map(|r| r.segment).max().unwrap_or(0)
    }

    /// This layout with the open segments a sealed refusal named
    /// (`placed`, each with its target) in place of the routes whose
    /// ranges they overlap; `None` if the notice is not newer than this
    /// layout (a late refusal must not undo a later change) or does not
    /// fit (overlapping ranges).
    pub(crate) fn with_successors(
        &self,
        successors: &Successors,
        targets: &[Target],
    ) -> Option<Layout> {
        if successors.layout_version <= self.version()
            || successors.segments.is_empty()
            || successors.segments.len() != targets.len()
        {
            return None;
        }
        let named = || successors.segments.iter().zip(targets);
        let overlapped = |r: &Route| {
            named().any(|(s, _)| u64::from(r.start) < s.end && u64::from(s.start) < r.end)
        };
        let mut routes: Vec<Route> = self
            .routes
            .iter()
            .copied()
            .filter(|r| !overlapped(r))
            .collect();
        routes.extend(named().map(|(s, target)| Route {
            segment: s.id,
            target: *target,
            start: s.start,
            end: s.end,
        }));
        routes.sort_by_key(|r| r.start);
        if routes.windows(2).any(|w| w[0].end > u64::from(w[1].start)) {
            return None;
        }
        Some(Layout { routes })
    }

    /// The open segments, by range start.
    pub(crate) fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// Index in [`Layout::routes`] of the segment holding `hash`, if an open
    /// segment covers it.
    pub(crate) fn route_hash(&self, hash: u32) -> Option<usize> {
        let after = self.routes.partition_point(|r| r.start <= hash);
        let i = after.checked_sub(1)?;
        (u64::from(hash) < self.routes[i].end).then_some(i)
    }

    /// Index in [`Layout::routes`] of the segment taking `key`.
    pub(crate) fn route_key(&self, key: &[u8]) -> Option<usize> {
        self.route_hash(key_hash(key))
    }

    /// Where to send a batch for `segment` whose first record's key is
    /// `key`: the segment's owner while it is open here; once it is sealed
    /// (not in the layout), the shard that serves `key` now, which reads
    /// the sealed segment from the filer (an idempotent producer's resend).
    pub(crate) fn route_for_segment(&self, segment: u32, key: &[u8]) -> Option<Route> {
        if let Some(route) = self.routes.iter().find(|r| r.segment == segment) {
            return Some(*route);
        }
        let serving = self.routes[self.route_key(key)?];
        Some(Route { segment, ..serving })
    }
}

/// The id of the open segment of `topic` that takes records with `key`, if
/// one covers its hash.
pub fn segment_for_key(topic: &TopicInfo, key: &[u8]) -> Option<u32> {
    let layout = Layout::new(topic).ok()?;
    layout.route_key(key).map(|i| layout.routes[i].segment)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wire::message::SegmentInfo;

    fn segment(id: u32, start: u32, end: u64, sealed: bool) -> SegmentInfo {
        SegmentInfo {
            id,
            epoch: 1,
            start,
            end,
            sealed,
            shard: (id % 2) as u16,
            next_offset: 0,
            appended_bytes: 0,
            successors: vec![],
            ..SegmentInfo::default()
        }
    }

    fn topic(segments: Vec<SegmentInfo>) -> TopicInfo {
        TopicInfo {
            name: "ns/t".into(),
            segments,
        }
    }

    #[test]
    fn hashes_go_to_the_segment_covering_them() {
        let quarter = 1u64 << 30;
        // Listed out of order, with a sealed parent that must be ignored.
        let t = topic(vec![
            segment(3, (2 * quarter) as u32, 1 << 32, false),
            segment(0, 0, 1 << 32, true),
            segment(1, 0, quarter, false),
            segment(2, quarter as u32, 2 * quarter, false),
        ]);
        let layout = Layout::new(&t).unwrap();
        let seg = |h: u32| layout.routes()[layout.route_hash(h).unwrap()].segment;
        assert_eq!(seg(0), 1);
        assert_eq!(seg(quarter as u32 - 1), 1);
        assert_eq!(seg(quarter as u32), 2);
        assert_eq!(seg((2 * quarter) as u32 - 1), 2);
        assert_eq!(seg((2 * quarter) as u32), 3);
        assert_eq!(seg(u32::MAX), 3);
        // Keys route by their hash; the empty key hashes to 0.
        assert_eq!(segment_for_key(&t, b""), Some(1));
        let h = key_hash(b"hello");
        assert_eq!(segment_for_key(&t, b"hello"), Some(seg(h)));
    }

    #[test]
    fn gaps_and_bad_layouts() {
        let t = topic(vec![segment(1, 100, 200, false)]);
        let layout = Layout::new(&t).unwrap();
        assert_eq!(layout.route_hash(99), None);
        assert_eq!(layout.route_hash(100), Some(0));
        assert_eq!(layout.route_hash(199), Some(0));
        assert_eq!(layout.route_hash(200), None);
        assert!(Layout::new(&topic(vec![segment(1, 0, 1 << 32, true)])).is_err());
        assert!(Layout::new(&topic(vec![
            segment(1, 0, 200, false),
            segment(2, 100, 1 << 32, false)
        ]))
        .is_err());
    }

    #[test]
    fn routes_carry_their_segments_targets() {
        let addr: SocketAddr = "10.0.0.2:7421".parse().unwrap();
        let t = topic(vec![
            segment(0, 0, 1 << 32, true),
            segment(1, 0, 1 << 31, false),
            segment(2, 1 << 31, 1 << 32, false),
        ]);
        // Targets line up with `topic.segments`, sealed ones included.
        let targets = [Target::Shard(0), Target::Address(addr), Target::Shard(1)];
        let layout = Layout::with_targets(&t, &targets).unwrap();
        let by_segment: Vec<(u32, Target)> = layout
            .routes()
            .iter()
            .map(|r| (r.segment, r.target))
            .collect();
        assert_eq!(
            by_segment,
            vec![(1, Target::Address(addr)), (2, Target::Shard(1))]
        );
        // Without targets, each segment goes to its shard.
        let layout = Layout::new(&t).unwrap();
        assert_eq!(layout.routes()[0].target, Target::Shard(1));
        assert_eq!(layout.routes()[1].target, Target::Shard(0));
    }

    #[test]
    fn every_key_of_a_full_ring_routes() {
        let n = 7u64;
        let segments = (0..n)
            .map(|i| {
                let start = (i << 32) / n;
                let end = ((i + 1) << 32) / n;
                segment(i as u32, start as u32, end, false)
            })
            .collect();
        let layout = Layout::new(&topic(segments)).unwrap();
        for k in 0..10_000u32 {
            let key = k.to_le_bytes();
            let i = layout.route_key(&key).unwrap();
            let r = layout.routes()[i];
            let h = u64::from(key_hash(&key));
            assert!(u64::from(r.start) <= h && h < r.end);
        }
    }

    #[test]
    fn a_sealed_refusal_patches_the_layout_only_when_newer() {
        let half = 1u64 << 31;
        let quarter = 1u64 << 30;
        // Segments 1 and 2 halve the ring.
        let layout = Layout::new(&topic(vec![
            segment(1, 0, half, false),
            segment(2, half as u32, 1 << 32, false),
        ]))
        .unwrap();
        assert_eq!(layout.version(), 2);
        // Segment 1 split into 3 and 4, on shards 1 and 0.
        let split = Successors {
            layout_version: 4,
            segments: vec![
                segment(3, 0, quarter, false),
                segment(4, quarter as u32, half, false),
            ],
        };
        let patched = layout
            .with_successors(&split, &[Target::Shard(1), Target::Shard(0)])
            .unwrap();
        let routed: Vec<(u32, Target)> = patched
            .routes()
            .iter()
            .map(|r| (r.segment, r.target))
            .collect();
        assert_eq!(
            routed,
            vec![
                (3, Target::Shard(1)),
                (4, Target::Shard(0)),
                (2, Target::Shard(0))
            ]
        );
        assert_eq!(patched.version(), 4);
        // Every key still routes, each to the segment covering its hash.
        for k in 0..2_000u32 {
            let key = k.to_le_bytes();
            let r = patched.routes()[patched.route_key(&key).unwrap()];
            let h = u64::from(key_hash(&key));
            assert!(u64::from(r.start) <= h && h < r.end);
        }
        // The same notice again, or an older one, changes nothing.
        assert!(patched
            .with_successors(&split, &[Target::Shard(1), Target::Shard(0)])
            .is_none());
        // A merge of 4 and 2 into 5 replaces both.
        let merge = Successors {
            layout_version: 5,
            segments: vec![segment(5, quarter as u32, 1 << 32, false)],
        };
        let merged = patched
            .with_successors(&merge, &[Target::Shard(1)])
            .unwrap();
        let ids: Vec<u32> = merged.routes().iter().map(|r| r.segment).collect();
        assert_eq!(ids, vec![3, 5]);
        // Targets that do not match the segments are refused.
        assert!(layout
            .with_successors(&split, &[Target::Shard(1)])
            .is_none());
    }
}
