//! [`SegmentFollowers`]: an owned segment's followers as its owner sees
//! them: which the layout names, which of those are in sync, how far each
//! has fetched, and how long since each last held every record the owner
//! had (its *lag*, which the owner reports and by which the control plane
//! takes a follower out of the in-sync set or back in). Pure state with
//! `now` passed in; the cell rings its event on each change.
//!
//! A follower is *caught up* at a fetch from the owner's end; under steady
//! traffic it rarely is, so (as Kafka counts it) a fetch from at least the
//! end the owner had at that follower's previous fetch makes it caught up
//! as of that previous fetch.

use std::time::Instant;

use wire::message::{FollowerId, FollowerLag};

/// One follower and its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Progress {
    id: FollowerId,
    /// The owner waits for it before answering an `all` produce.
    in_sync: bool,
    /// It holds every record before this offset (what it last fetched
    /// from).
    fetched: u64,
    /// When it last held every record the owner had; `None`: not since
    /// the layout named it out of sync.
    caught_up: Option<Instant>,
    /// When it fetched last (or was named), and the owner's end then.
    previous: (Instant, u64),
}

/// The followers of one owned segment (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct SegmentFollowers {
    followers: Vec<Progress>,
}

impl SegmentFollowers {
    /// Take the followers a layout names, the owner's end being `end`; one
    /// kept keeps its progress, a new one starts at 0 (caught up now if
    /// the layout names it in sync: the control plane says it was).
    pub(crate) fn set(&mut self, named: &[control::Follower], now: Instant, end: u64) {
        let mut next = Vec::with_capacity(named.len());
        for f in named {
            let id = FollowerId {
                broker: f.broker.0,
                shard: f.shard,
            };
            let kept = self.followers.iter().find(|p| p.id == id);
            next.push(match kept {
                Some(p) => Progress {
                    in_sync: f.in_sync,
                    ..*p
                },
                None => Progress {
                    id,
                    in_sync: f.in_sync,
                    fetched: 0,
                    caught_up: f.in_sync.then_some(now),
                    previous: (now, end),
                },
            });
        }
        self.followers = next;
    }

    /// `id` fetched from `offset` at `now`, the owner's end being `end`:
    /// it holds everything before `offset`, and no more: a follower that
    /// fetches from less than before lost part of its copy (it restarted,
    /// or started its copy over), and its progress goes back. True if it
    /// now holds more than before; false if the layout does not name it
    /// (a follower the layout dropped, or one of a newer layout than this
    /// owner holds).
    pub(crate) fn fetched(&mut self, id: FollowerId, offset: u64, end: u64, now: Instant) -> bool {
        let Some(p) = self.followers.iter_mut().find(|p| p.id == id) else {
            return false;
        };
        if offset >= end {
            p.caught_up = Some(now);
        } else if offset >= p.previous.1 {
            p.caught_up = p.caught_up.max(Some(p.previous.0));
        }
        p.previous = (now, end);
        let more = offset > p.fetched;
        p.fetched = offset;
        more
    }

    /// How far an `all` produce's records are copied: every in-sync
    /// follower holds every record before this offset. With followers but
    /// none in sync (each one dropped from the set, or placed anew and
    /// still catching up), at least one follower holds them: a record an
    /// `all` produce was answered for is always on a second broker, so a
    /// follower can seal the segment from its copy if the owner dies.
    /// `None` with no followers (one replica: an `all` produce waits for
    /// nobody).
    pub(crate) fn replicated_to(&self) -> Option<u64> {
        let in_sync = self.followers.iter().filter(|p| p.in_sync);
        in_sync
            .map(|p| p.fetched)
            .min()
            .or_else(|| self.followers.iter().map(|p| p.fetched).max())
    }

    /// Each follower's lag at `now`, the owner's end being `end`: 0 for
    /// one holding every record, `u64::MAX` for one never caught up since
    /// the layout named it out of sync.
    pub(crate) fn lags(&self, end: u64, now: Instant) -> Vec<FollowerLag> {
        self.followers
            .iter()
            .map(|p| FollowerLag {
                broker: p.id.broker,
                lag_ms: match p.caught_up {
                    _ if p.fetched >= end => 0,
                    Some(t) => u64::try_from(now.saturating_duration_since(t).as_millis())
                        .unwrap_or(u64::MAX),
                    None => u64::MAX,
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

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

    fn lag_of(f: &SegmentFollowers, broker: u32, end: u64, now: Instant) -> u64 {
        f.lags(end, now)
            .iter()
            .find(|l| l.broker == broker)
            .unwrap()
            .lag_ms
    }

    #[test]
    fn the_slowest_in_sync_follower_or_else_the_furthest_one_sets_how_far_records_are_replicated() {
        let now = Instant::now();
        let mut f = SegmentFollowers::default();
        assert_eq!(f.replicated_to(), None, "no followers: nobody to wait for");
        f.set(
            &[follower(1, true), follower(2, true), follower(3, false)],
            now,
            0,
        );
        assert_eq!(f.replicated_to(), Some(0));
        assert!(f.fetched(id(1), 10, 20, now));
        assert_eq!(f.replicated_to(), Some(0), "follower 2 holds nothing yet");
        assert!(f.fetched(id(2), 7, 20, now));
        assert_eq!(f.replicated_to(), Some(7));
        // From less than before: it lost part of its copy.
        assert!(!f.fetched(id(2), 5, 20, now));
        assert_eq!(f.replicated_to(), Some(5), "its progress goes back");
        assert!(f.fetched(id(2), 7, 20, now));
        assert!(f.fetched(id(3), 2, 20, now));
        assert_eq!(
            f.replicated_to(),
            Some(7),
            "one out of sync is not waited for"
        );
        assert!(
            !f.fetched(id(9), 100, 100, now),
            "a follower the layout does not name"
        );
        // A new layout: 2 dropped, 1 keeps its progress.
        f.set(&[follower(1, true), follower(4, true)], now, 20);
        assert_eq!(f.replicated_to(), Some(0), "4 starts at 0");
        assert!(f.fetched(id(4), 12, 20, now));
        assert_eq!(f.replicated_to(), Some(10));
        // None in sync: at least one follower holds the records.
        f.set(&[follower(1, false), follower(4, false)], now, 20);
        assert_eq!(f.replicated_to(), Some(12), "the furthest one");
        f.set(&[follower(5, false)], now, 20);
        assert_eq!(f.replicated_to(), Some(0), "a new one holds nothing");
        f.set(&[], now, 20);
        assert_eq!(f.replicated_to(), None, "no followers: nobody to wait for");
    }

    #[test]
    fn lag_is_the_time_since_a_follower_last_held_what_the_owner_had() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut f = SegmentFollowers::default();
        f.set(&[follower(1, true), follower(2, false)], t0, 0);
        // Named in sync: caught up as of the layout. Named out of sync:
        // never, until it catches up.
        assert_eq!(lag_of(&f, 1, 5, at(300)), 300);
        assert_eq!(lag_of(&f, 2, 5, at(300)), u64::MAX);
        // Holding everything is no lag, however long ago it fetched.
        assert_eq!(lag_of(&f, 1, 0, at(9_000)), 0);

        // Steady traffic: each fetch reaches the end the previous one
        // saw, so 1 counts as caught up as of its previous fetch.
        f.fetched(id(1), 0, 10, at(1_000));
        f.fetched(id(1), 10, 20, at(1_100));
        f.fetched(id(1), 20, 30, at(1_200));
        assert_eq!(lag_of(&f, 1, 30, at(1_250)), 150);
        // Then it stops fetching: its lag grows.
        assert_eq!(lag_of(&f, 1, 90, at(6_100)), 5_000);
        // A fetch that falls short of the previous end does not help.
        f.fetched(id(1), 25, 90, at(6_200));
        assert_eq!(lag_of(&f, 1, 90, at(6_200)), 5_100);
        // One from the end does.
        f.fetched(id(1), 90, 90, at(6_300));
        assert_eq!(lag_of(&f, 1, 95, at(6_400)), 100);

        // 2 fetches for the first time: it holds what the owner had when
        // the layout named it (nothing), so it was caught up then.
        f.fetched(id(2), 0, 90, at(6_500));
        assert_eq!(lag_of(&f, 2, 90, at(6_500)), 6_500);
        f.fetched(id(2), 90, 100, at(6_600));
        assert_eq!(lag_of(&f, 2, 100, at(6_700)), 200, "caught up at 6.5 s");
        // A layout that names it in sync keeps what it measured.
        f.set(&[follower(1, true), follower(2, true)], at(6_800), 100);
        assert_eq!(lag_of(&f, 2, 100, at(6_900)), 400);
    }
}
