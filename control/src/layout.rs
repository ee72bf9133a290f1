//! [`Layout`]: the pure core that owns every topic and its segments.
//!
//! Sans-IO: no files, no clock, no threads. Callers pass time in as
//! `now_ms`; the same calls in the same order give the same layout, which is
//! what makes the control plane testable deterministically.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::{ControlError, KeyRange, Segment, SegmentId, SegmentState, Topic, TopicName};

/// Most segments a topic can be created with.
pub const SEGMENTS_PER_TOPIC_MAX: u32 = 1024;

/// Most topics one layout holds.
pub const TOPICS_MAX: usize = 100_000;

/// Every segment a topic is created with must get a non-empty range.
const _: () = assert!(SEGMENTS_PER_TOPIC_MAX as u64 <= crate::RING_END);

/// Every topic and its segments, and how open segments spread over shards.
#[derive(Debug, Clone)]
pub struct Layout {
    shard_count: u16,
    topics: BTreeMap<TopicName, Topic>,
    /// Open segments owned by each shard, across all topics; index = shard.
    /// Kept up to date on every change so assignment is not a full scan.
    open_segments_per_shard: Vec<u64>,
}

impl Layout {
    /// An empty layout for brokers with `shard_count` shards.
    ///
    /// # Panics
    /// If `shard_count` is 0: a segment must have an owning shard.
    /// ([`ControlService::open`](crate::ControlService::open) returns an
    /// error instead.)
    pub fn new(shard_count: u16) -> Layout {
        assert!(shard_count > 0, "a layout needs at least one shard");
        Layout {
            shard_count,
            topics: BTreeMap::new(),
            open_segments_per_shard: vec![0; usize::from(shard_count)],
        }
    }

    /// The number of shards segments are assigned to.
    pub fn shard_count(&self) -> u16 {
        self.shard_count
    }

    /// How many open segments each shard owns, indexed by shard.
    pub fn open_segments_per_shard(&self) -> &[u64] {
        &self.open_segments_per_shard
    }

    /// How many topics exist.
    pub fn topic_count(&self) -> usize {
        self.topics.len()
    }

    /// Create topic `name` with `segment_count` open segments, ids
    /// `0..segment_count`, ranges [`KeyRange::FULL`]`.split_even(segment_count)`,
    /// each assigned to the shard with the fewest open segments (ties to the
    /// lowest index).
    pub fn create_topic(
        &mut self,
        now_ms: u64,
        name: &TopicName,
        segment_count: u32,
    ) -> Result<&Topic, ControlError> {
        let topic = self.prepare_topic(now_ms, name, segment_count)?;
        Ok(self.insert(topic))
    }

    /// Everything [`Layout::create_topic`] does except changing the layout:
    /// lets the service persist the topic first and insert it only once that
    /// succeeded.
    pub(crate) fn prepare_topic(
        &self,
        now_ms: u64,
        name: &TopicName,
        segment_count: u32,
    ) -> Result<Topic, ControlError> {
        if segment_count == 0 || segment_count > SEGMENTS_PER_TOPIC_MAX {
            return Err(ControlError::InvalidSegmentCount {
                count: segment_count,
                max: SEGMENTS_PER_TOPIC_MAX,
            });
        }
        if self.topics.contains_key(name) {
            return Err(ControlError::TopicExists(name.to_string()));
        }
        if self.topics.len() >= TOPICS_MAX {
            return Err(ControlError::TooManyTopics { max: TOPICS_MAX });
        }
        // Min-heap on (open segments, shard index): least loaded first,
        // lowest index on ties.
        let mut shards: BinaryHeap<Reverse<(u64, u16)>> = (0..self.shard_count)
            .map(|shard| Reverse((self.open_segments_per_shard[usize::from(shard)], shard)))
            .collect();
        let segments = KeyRange::FULL
            .split_even(segment_count)
            .into_iter()
            .zip(0..)
            .map(|(range, id)| {
                let Reverse((load, shard)) = shards
                    .pop()
                    .expect("the heap holds shard_count >= 1 entries and each pop is pushed back");
                shards.push(Reverse((load + 1, shard)));
                Segment {
                    id: SegmentId(id),
                    epoch: 0,
                    range,
                    state: SegmentState::Open,
                    shard,
                    successors: Vec::new(),
                    created_ms: now_ms,
                    broker: None,
                    sealed_ms: None,
                }
            })
            .collect();
        Ok(Topic {
            name: name.clone(),
            segments,
            created_ms: now_ms,
            policy: None,
        })
    }

    /// Add a topic the caller has checked is new and within limits.
    pub(crate) fn insert(&mut self, topic: Topic) -> &Topic {
        debug_assert!(
            !self.topics.contains_key(&topic.name),
            "insert of an existing topic"
        );
        for segment in topic.open_segments() {
            self.open_segments_per_shard[usize::from(segment.shard)] += 1;
        }
        self.topics.entry(topic.name.clone()).or_insert(topic)
    }

    /// Remove topic `name` and return it.
    pub fn delete_topic(&mut self, name: &TopicName) -> Result<Topic, ControlError> {
        let topic = self
            .topics
            .remove(name)
            .ok_or_else(|| ControlError::TopicNotFound(name.to_string()))?;
        for segment in topic.open_segments() {
            let load = &mut self.open_segments_per_shard[usize::from(segment.shard)];
            debug_assert!(*load > 0, "shard load counts every open segment");
            *load = load.saturating_sub(1);
        }
        Ok(topic)
    }

    /// The topic named `name`, if it exists.
    pub fn topic(&self, name: &TopicName) -> Option<&Topic> {
        self.topics.get(name)
    }

    /// Every topic, sorted by name (namespace, then name).
    pub fn topics(&self) -> impl Iterator<Item = &Topic> {
        self.topics.values()
    }

    /// Add a topic loaded from storage. Each segment's shard is re-mapped to
    /// `shard % shard_count`, so a layout written by a broker with more
    /// shards still loads (segments keep their relative spread).
    pub fn insert_loaded(&mut self, mut topic: Topic) -> Result<(), ControlError> {
        if self.topics.contains_key(&topic.name) {
            return Err(ControlError::TopicExists(topic.name.to_string()));
        }
        if self.topics.len() >= TOPICS_MAX {
            return Err(ControlError::TooManyTopics { max: TOPICS_MAX });
        }
        for segment in &mut topic.segments {
            segment.shard %= self.shard_count;
        }
        self.insert(topic);
        Ok(())
    }

    /// Check every invariant of the layout: each topic is valid (ids unique
    /// and ordered, successors exist, open ranges tile the ring exactly) and
    /// stored under its own name, every shard index is in range, and the
    /// per-shard load counts match the open segments. `Err` says which.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut loads = vec![0u64; usize::from(self.shard_count)];
        for (name, topic) in &self.topics {
            if *name != topic.name {
                return Err(format!("topic {} stored under name {name}", topic.name));
            }
            topic.validate()?;
            for segment in &topic.segments {
                let Some(load) = loads.get_mut(usize::from(segment.shard)) else {
                    return Err(format!(
                        "topic {name}: segment {} on shard {} of {}",
                        segment.id, segment.shard, self.shard_count
                    ));
                };
                if segment.is_open() {
                    *load += 1;
                }
            }
        }
        if loads != self.open_segments_per_shard {
            return Err(format!(
                "open segments per shard are {:?} but counted {loads:?}",
                self.open_segments_per_shard
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::RING_END;

    fn name(text: &str) -> TopicName {
        TopicName::parse(text).unwrap()
    }

    fn shards_of(topic: &Topic) -> Vec<u16> {
        topic.segments().iter().map(|s| s.shard).collect()
    }

    #[test]
    fn create_topic_builds_open_segments_over_the_ring() {
        let mut layout = Layout::new(4);
        let topic = layout.create_topic(1_000, &name("ns/t"), 3).unwrap();
        assert_eq!(topic.name(), &name("ns/t"));
        assert_eq!(topic.created_ms(), 1_000);
        let ids: Vec<u32> = topic.segments().iter().map(|s| s.id.0).collect();
        assert_eq!(ids, [0, 1, 2]);
        let ranges: Vec<KeyRange> = topic.segments().iter().map(|s| s.range).collect();
        assert_eq!(ranges, KeyRange::FULL.split_even(3));
        for segment in topic.segments() {
            assert!(segment.is_open());
            assert_eq!(segment.epoch, 0);
            assert_eq!(segment.created_ms, 1_000);
            assert!(segment.successors.is_empty());
        }
        assert_eq!(shards_of(topic), [0, 1, 2]);
        layout.check_invariants().unwrap();
    }

    #[test]
    fn shards_go_to_the_least_loaded_lowest_index_first() {
        let mut layout = Layout::new(4);
        assert_eq!(
            shards_of(layout.create_topic(0, &name("a/1"), 3).unwrap()),
            [0, 1, 2]
        );
        assert_eq!(
            shards_of(layout.create_topic(0, &name("a/2"), 3).unwrap()),
            [3, 0, 1]
        );
        assert_eq!(layout.open_segments_per_shard(), [2, 2, 1, 1]);
        assert_eq!(
            shards_of(layout.create_topic(0, &name("a/3"), 1).unwrap()),
            [2]
        );
        layout.delete_topic(&name("a/1")).unwrap();
        assert_eq!(layout.open_segments_per_shard(), [1, 1, 1, 1]);
        assert_eq!(
            shards_of(layout.create_topic(0, &name("a/4"), 6).unwrap()),
            [0, 1, 2, 3, 0, 1]
        );
        layout.check_invariants().unwrap();
    }

    #[test]
    fn assignment_is_deterministic() {
        let build = || {
            let mut layout = Layout::new(7);
            for (i, count) in [5, 1, 9, 2, 13, 1024, 3].into_iter().enumerate() {
                layout
                    .create_topic(i as u64, &name(&format!("ns/t{i}")), count)
                    .unwrap();
            }
            layout.delete_topic(&name("ns/t2")).unwrap();
            layout.create_topic(99, &name("ns/again"), 11).unwrap();
            layout.topics().cloned().collect::<Vec<_>>()
        };
        assert_eq!(build(), build());
    }

    #[test]
    fn load_stays_balanced() {
        let mut layout = Layout::new(5);
        for i in 0..40 {
            layout
                .create_topic(0, &name(&format!("ns/t{i}")), i % 7 + 1)
                .unwrap();
            let loads = layout.open_segments_per_shard();
            let spread = loads.iter().max().unwrap() - loads.iter().min().unwrap();
            assert!(spread <= 1, "after topic {i}: {loads:?}");
        }
    }

    #[test]
    fn every_segment_count_tiles_the_ring() {
        let mut layout = Layout::new(3);
        for count in 1..=SEGMENTS_PER_TOPIC_MAX {
            let topic = layout
                .create_topic(0, &name(&format!("tiling/n{count}")), count)
                .unwrap();
            assert_eq!(topic.segments().len(), count as usize);
            topic.validate().unwrap();
            // Every boundary hash lands in the segment that starts there.
            for segment in topic.segments() {
                let start = segment.range.start();
                assert_eq!(topic.segment_for_hash(start).unwrap().id, segment.id);
                let last = u32::try_from(segment.range.end() - 1).unwrap();
                assert_eq!(topic.segment_for_hash(last).unwrap().id, segment.id);
            }
        }
        layout.check_invariants().unwrap();
        assert_eq!(layout.topic_count(), SEGMENTS_PER_TOPIC_MAX as usize);
    }

    #[test]
    fn create_topic_errors() {
        let mut layout = Layout::new(2);
        let t = name("ns/t");
        for bad in [0, SEGMENTS_PER_TOPIC_MAX + 1, u32::MAX] {
            let err = layout.create_topic(0, &t, bad).unwrap_err();
            assert!(
                matches!(err, ControlError::InvalidSegmentCount { count, max: 1024 } if count == bad),
                "{err}"
            );
        }
        layout.create_topic(0, &t, SEGMENTS_PER_TOPIC_MAX).unwrap();
        let err = layout.create_topic(0, &t, 1).unwrap_err();
        assert!(
            matches!(&err, ControlError::TopicExists(n) if n == "ns/t"),
            "{err}"
        );
        assert_eq!(err.to_string(), "topic ns/t already exists");
        assert_eq!(layout.topic_count(), 1);
        layout.check_invariants().unwrap();
    }

    #[test]
    fn too_many_topics() {
        let mut layout = Layout::new(1);
        for i in 0..TOPICS_MAX {
            layout
                .create_topic(0, &name(&format!("ns/t{i}")), 1)
                .unwrap();
        }
        let err = layout.create_topic(0, &name("ns/one-more"), 1).unwrap_err();
        assert!(
            matches!(err, ControlError::TooManyTopics { max: TOPICS_MAX }),
            "{err}"
        );
        let loaded = layout.delete_topic(&name("ns/t0")).unwrap();
        layout.create_topic(0, &name("ns/one-more"), 1).unwrap();
        let err = layout.insert_loaded(loaded).unwrap_err();
        assert!(matches!(err, ControlError::TooManyTopics { .. }), "{err}");
    }

    #[test]
    fn delete_and_lookup() {
        let mut layout = Layout::new(2);
        layout.create_topic(0, &name("b/x"), 2).unwrap();
        layout.create_topic(0, &name("a/y"), 2).unwrap();
        layout.create_topic(0, &name("a/x"), 2).unwrap();
        let listed: Vec<String> = layout.topics().map(|t| t.name().to_string()).collect();
        assert_eq!(listed, ["a/x", "a/y", "b/x"]);
        let deleted = layout.delete_topic(&name("a/y")).unwrap();
        assert_eq!(deleted.name(), &name("a/y"));
        assert!(layout.topic(&name("a/y")).is_none());
        assert!(layout.topic(&name("a/x")).is_some());
        let err = layout.delete_topic(&name("a/y")).unwrap_err();
        assert_eq!(err.to_string(), "topic a/y not found");
        assert_eq!(layout.open_segments_per_shard(), [2, 2]);
        layout.check_invariants().unwrap();
    }

    #[test]
    fn insert_loaded_remaps_shards() {
        let mut wide = Layout::new(8);
        let topic = wide.create_topic(0, &name("ns/t"), 8).unwrap().clone();
        assert_eq!(shards_of(&topic), [0, 1, 2, 3, 4, 5, 6, 7]);

        let mut narrow = Layout::new(3);
        narrow.insert_loaded(topic.clone()).unwrap();
        let loaded = narrow.topic(&name("ns/t")).unwrap();
        assert_eq!(shards_of(loaded), [0, 1, 2, 0, 1, 2, 0, 1]);
        assert_eq!(narrow.open_segments_per_shard(), [3, 3, 2]);
        narrow.check_invariants().unwrap();
        // New topics fill the lightest shard first.
        assert_eq!(
            shards_of(narrow.create_topic(0, &name("ns/u"), 1).unwrap()),
            [2]
        );

        let err = narrow.insert_loaded(topic).unwrap_err();
        assert!(matches!(err, ControlError::TopicExists(_)), "{err}");
        narrow.check_invariants().unwrap();
    }

    #[test]
    fn sealed_segments_do_not_count_as_load() {
        let mut layout = Layout::new(2);
        let mut topic = layout.prepare_topic(0, &name("ns/t"), 1).unwrap();
        let halves = KeyRange::FULL.split_even(2);
        topic.segments[0].state = SegmentState::Sealed;
        topic.segments[0].successors = vec![SegmentId(1), SegmentId(2)];
        for (id, range) in [(1, halves[0]), (2, halves[1])] {
            topic.segments.push(Segment {
                id: SegmentId(id),
                epoch: 1,
                range,
                state: SegmentState::Open,
                shard: 1,
                successors: Vec::new(),
                created_ms: 5,
                broker: None,
                sealed_ms: None,
            });
        }
        layout.insert_loaded(topic).unwrap();
        assert_eq!(layout.open_segments_per_shard(), [0, 2]);
        layout.check_invariants().unwrap();
        layout.delete_topic(&name("ns/t")).unwrap();
        assert_eq!(layout.open_segments_per_shard(), [0, 0]);
    }

    #[test]
    fn check_invariants_catches_breakage() {
        let base = {
            let mut layout = Layout::new(2);
            layout.create_topic(0, &name("ns/t"), 2).unwrap();
            layout
        };
        let broken = |edit: &dyn Fn(&mut Layout)| {
            let mut layout = base.clone();
            edit(&mut layout);
            layout.check_invariants().unwrap_err()
        };
        fn topic(layout: &mut Layout) -> &mut Topic {
            layout.topics.get_mut(&name("ns/t")).unwrap()
        }

        let err =
            broken(&|l| topic(l).segments[1].range = KeyRange::new(1 << 31, RING_END - 1).unwrap());
        assert!(err.contains("no open segment covers"), "{err}");
        let err = broken(&|l| topic(l).segments[1].range = KeyRange::new(5, RING_END).unwrap());
        assert!(err.contains("overlaps"), "{err}");
        let err = broken(&|l| topic(l).segments[1].id = SegmentId(0));
        assert!(err.contains("duplicate segment id 0"), "{err}");
        let err = broken(&|l| topic(l).segments[0].successors.push(SegmentId(9)));
        assert!(err.contains("has successors"), "{err}");
        let err = broken(&|l| {
            let s = &mut topic(l).segments[0];
            s.state = SegmentState::Sealed;
            s.successors.push(SegmentId(9));
        });
        assert!(err.contains("missing successor 9"), "{err}");
        let err = broken(&|l| topic(l).segments[0].shard = 2);
        assert!(err.contains("shard 2 of 2"), "{err}");
        let err = broken(&|l| topic(l).segments[0].shard = 1);
        assert!(err.contains("open segments per shard"), "{err}");
        let err = broken(&|l| topic(l).name = name("ns/other"));
        assert!(err.contains("stored under name ns/t"), "{err}");
    }

    #[test]
    #[should_panic(expected = "at least one shard")]
    fn zero_shards_is_a_bug() {
        let _ = Layout::new(0);
    }
}
