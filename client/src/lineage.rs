//! A topic's segment history as a subscriber walks it: which segments to
//! read first, and which successor may start once a segment is read to
//! its end.
//!
//! Segments form a graph: a sealed segment lists its successors (two or
//! more after a split, one after a merge or a move). A successor holds
//! later records of the keys of its predecessors, so it is read only once
//! every predecessor was read to its end (a merge's successor waits for
//! both), and every segment is read at most once.
//!
//! Pure bookkeeping: no I/O; the subscriber feeds it descriptions.

use std::collections::HashSet;

use wire::message::{SegmentInfo, TopicInfo};

/// What a subscriber started and finished.
#[derive(Debug, Default)]
pub(crate) struct Lineage {
    started: HashSet<u32>,
    /// Read to their end, or deliberately skipped.
    finished: HashSet<u32>,
}

impl Lineage {
    /// The segments to read first, marked started. From the start of the
    /// topic (`from_roots`): the roots, segments nobody lists as a
    /// successor. From its end: the open segments; the sealed ones count
    /// as read, so their successors need not wait for them.
    pub(crate) fn begin(&mut self, topic: &TopicInfo, from_roots: bool) -> Vec<SegmentInfo> {
        let first: Vec<SegmentInfo> = if from_roots {
            topic
                .segments
                .iter()
                .filter(|s| !has_predecessor(topic, s.id))
                .cloned()
                .collect()
        } else {
            self.finished
                .extend(topic.segments.iter().filter(|s| s.sealed).map(|s| s.id));
            topic
                .segments
                .iter()
                .filter(|s| !s.sealed)
                .cloned()
                .collect()
        };
        self.started.extend(first.iter().map(|s| s.id));
        first
    }

    /// Segment `id` was read to its end.
    pub(crate) fn finished(&mut self, id: u32) {
        self.finished.insert(id);
    }

    /// The successors of `id` in `topic` (a description taken after `id`
    /// finished) that may start now: not started yet, and every one of
    /// their predecessors finished. Marked started.
    pub(crate) fn successors_ready(&mut self, topic: &TopicInfo, id: u32) -> Vec<SegmentInfo> {
        let Some(segment) = topic.segments.iter().find(|s| s.id == id) else {
            return Vec::new();
        };
        let mut ready = Vec::new();
        for successor in &segment.successors {
            if self.started.contains(successor) {
                continue;
            }
            let Some(info) = topic.segments.iter().find(|s| s.id == *successor) else {
                continue;
            };
            let all_read = topic
                .segments
                .iter()
                .filter(|p| p.successors.contains(successor))
                .all(|p| self.finished.contains(&p.id));
            if all_read {
                self.started.insert(*successor);
                ready.push(info.clone());
            }
        }
        ready
    }

    /// Segments started so far.
    pub(crate) fn started(&self) -> usize {
        self.started.len()
    }
}

/// Whether some segment of `topic` lists `id` as a successor.
fn has_predecessor(topic: &TopicInfo, id: u32) -> bool {
    topic.segments.iter().any(|s| s.successors.contains(&id))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn segment(id: u32, sealed: bool, successors: &[u32]) -> SegmentInfo {
        SegmentInfo {
            id,
            sealed,
            successors: successors.to_vec(),
            ..SegmentInfo::default()
        }
    }

    fn ids(segments: &[SegmentInfo]) -> Vec<u32> {
        segments.iter().map(|s| s.id).collect()
    }

    /// 0 split into 1 and 2; 1 and 2 merged into 3; 4 an untouched root.
    fn history() -> TopicInfo {
        TopicInfo {
            name: "ns/t".into(),
            segments: vec![
                segment(0, true, &[1, 2]),
                segment(1, true, &[3]),
                segment(2, true, &[3]),
                segment(3, false, &[]),
                segment(4, false, &[]),
            ],
        }
    }

    #[test]
    fn from_the_start_roots_then_successors_once_all_parents_are_read() {
        let t = history();
        let mut l = Lineage::default();
        assert_eq!(ids(&l.begin(&t, true)), vec![0, 4]);
        l.finished(0);
        assert_eq!(ids(&l.successors_ready(&t, 0)), vec![1, 2]);
        // Asking again starts nothing twice.
        assert!(l.successors_ready(&t, 0).is_empty());
        l.finished(1);
        // The merge waits for its other parent.
        assert!(l.successors_ready(&t, 1).is_empty());
        l.finished(2);
        assert_eq!(ids(&l.successors_ready(&t, 2)), vec![3]);
        // The other parent's late look finds it started already.
        assert!(l.successors_ready(&t, 1).is_empty());
        assert_eq!(l.started(), 5);
    }

    #[test]
    fn from_the_end_the_open_segments_and_sealed_ones_count_as_read() {
        let mut t = history();
        let mut l = Lineage::default();
        assert_eq!(ids(&l.begin(&t, false)), vec![3, 4]);
        // 3 is later split into 5 and 6, whose only parent is 3.
        t.segments[3].sealed = true;
        t.segments[3].successors = vec![5, 6];
        t.segments.push(segment(5, false, &[]));
        t.segments.push(segment(6, false, &[]));
        l.finished(3);
        assert_eq!(ids(&l.successors_ready(&t, 3)), vec![5, 6]);
    }

    #[test]
    fn successors_missing_from_the_description_wait() {
        let mut t = history();
        t.segments.retain(|s| s.id != 2);
        let mut l = Lineage::default();
        l.begin(&t, true);
        l.finished(0);
        // 2 is not described (yet): only 1 starts; 2 can start later.
        assert_eq!(ids(&l.successors_ready(&t, 0)), vec![1]);
        let t = history();
        assert_eq!(ids(&l.successors_ready(&t, 0)), vec![2]);
    }
}
