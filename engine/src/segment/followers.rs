//! [`SegmentFollowers`]: an owned segment's followers as its owner sees
//! them: which the layout names, which of those are in sync, and how far
//! each has fetched. Pure state; the cell rings its event on each change.

use wire::message::FollowerId;

/// One follower and its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Progress {
    id: FollowerId,
    /// The owner waits for it before answering an `all` produce.
    in_sync: bool,
    /// It holds every record before this offset (what it last fetched
    /// from).
    fetched: u64,
}

/// The followers of one owned segment (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct SegmentFollowers {
    followers: Vec<Progress>,
}

impl SegmentFollowers {
    /// Take the followers a layout names; one kept keeps its progress, a
    /// new one starts at 0.
    pub(crate) fn set(&mut self, named: &[control::Follower]) {
        let mut next = Vec::with_capacity(named.len());
        for f in named {
            let id = FollowerId {
                broker: f.broker.0,
                shard: f.shard,
            };
            let fetched = self
                .followers
                .iter()
                .find(|p| p.id == id)
                .map_or(0, |p| p.fetched);
            next.push(Progress {
                id,
                in_sync: f.in_sync,
                fetched,
            });
        }
        self.followers = next;
    }

    /// `id` fetched from `offset`: it holds everything before. False if
    /// the layout does not name it (a follower the layout dropped, or one
    /// of a newer layout than this owner holds) or it was there already.
    pub(crate) fn fetched(&mut self, id: FollowerId, offset: u64) -> bool {
        match self.followers.iter_mut().find(|p| p.id == id) {
            Some(p) if offset > p.fetched => {
                p.fetched = offset;
                true
            }
            _ => false,
        }
    }

    /// Every in-sync follower holds every record before this offset;
    /// `None` when none is in sync (an `all` produce waits for nobody).
    pub(crate) fn replicated_to(&self) -> Option<u64> {
        self.followers
            .iter()
            .filter(|p| p.in_sync)
            .map(|p| p.fetched)
            .min()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use control::BrokerId;

    fn follower(broker: u32, in_sync: bool) -> control::Follower {
        control::Follower {
            broker: BrokerId(broker),
            shard: 0,
            in_sync,
        }
    }

    fn id(broker: u32) -> FollowerId {
        FollowerId { broker, shard: 0 }
    }

    #[test]
    fn the_slowest_in_sync_follower_sets_how_far_records_are_replicated() {
        let mut f = SegmentFollowers::default();
        assert_eq!(f.replicated_to(), None, "no followers: nobody to wait for");
        f.set(&[follower(1, true), follower(2, true), follower(3, false)]);
        assert_eq!(f.replicated_to(), Some(0));
        assert!(f.fetched(id(1), 10));
        assert_eq!(f.replicated_to(), Some(0), "follower 2 holds nothing yet");
        assert!(f.fetched(id(2), 7));
        assert_eq!(f.replicated_to(), Some(7));
        assert!(!f.fetched(id(2), 5), "progress never goes back");
        assert_eq!(f.replicated_to(), Some(7));
        assert!(f.fetched(id(3), 2));
        assert_eq!(
            f.replicated_to(),
            Some(7),
            "one out of sync is not waited for"
        );
        assert!(
            !f.fetched(id(9), 100),
            "a follower the layout does not name"
        );
        // A new layout: 2 dropped, 1 keeps its progress.
        f.set(&[follower(1, true), follower(4, true)]);
        assert_eq!(f.replicated_to(), Some(0), "4 starts at 0");
        assert!(f.fetched(id(4), 12));
        assert_eq!(f.replicated_to(), Some(10));
        f.set(&[follower(1, false)]);
        assert_eq!(f.replicated_to(), None);
    }
}
