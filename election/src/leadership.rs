//! [`Leadership`], what a candidate believes about who leads, and
//! [`LeadershipCell`], the one place the driver publishes it and callers
//! read it.
//!
//! The cell never claims a leadership that may be gone: a published
//! `Leader` carries the instant its lease may expire at (measured from
//! when the last answered keepalive was *sent*, so it is never later than
//! etcd's own expiry), and every read past that instant says `Follower`,
//! even if the driver thread is stuck and has published nothing since.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One leadership: the etcd revision that created the leader key (unique
/// and increasing across leaders, so it is a fencing token) and the lease
/// the key is attached to. Guarded writes compare both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Term {
    revision: i64,
    lease_id: i64,
}

impl Term {
    pub(crate) fn new(revision: i64, lease_id: i64) -> Term {
        Term { revision, lease_id }
    }

    /// The leader key's `create_revision`: the term's number.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The etcd lease the leader key is attached to.
    pub fn lease_id(&self) -> i64 {
        self.lease_id
    }
}

impl std::fmt::Display for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} on lease {:x}", self.revision, self.lease_id)
    }
}

/// What a candidate believes right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leadership {
    /// Another instance leads (its advertised address, when known), or
    /// nobody does yet.
    Follower { leader: Option<String> },
    /// This instance leads, in `term`.
    Leader { term: Term },
}

impl Leadership {
    pub fn is_leader(&self) -> bool {
        matches!(self, Leadership::Leader { .. })
    }

    /// The term, if this instance leads.
    pub fn term(&self) -> Option<Term> {
        match self {
            Leadership::Leader { term } => Some(*term),
            Leadership::Follower { .. } => None,
        }
    }
}

#[derive(Debug)]
struct Published {
    leadership: Leadership,
    /// For a `Leader`: when its lease may be gone.
    lease_deadline: Option<Instant>,
}

/// The published leadership, shared by the driver thread and every caller.
#[derive(Debug)]
pub(crate) struct LeadershipCell {
    published: Mutex<Published>,
    changed: Condvar,
}

impl LeadershipCell {
    pub(crate) fn new() -> LeadershipCell {
        LeadershipCell {
            published: Mutex::new(Published {
                leadership: Leadership::Follower { leader: None },
                lease_deadline: None,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Published> {
        // A panic while holding this lock cannot leave it half-written
        // (each write is one assignment), so a poisoned lock is still good.
        self.published.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The leadership as of `now`.
    pub(crate) fn get(&self, now: Instant) -> Leadership {
        effective(&self.lock(), now)
    }

    /// The term last published as this instance's, whether or not its
    /// lease deadline has passed (the driver's view, for its log lines).
    pub(crate) fn published_term(&self) -> Option<Term> {
        self.lock().leadership.term()
    }

    /// Publish that this instance leads in `term` until `lease_deadline`.
    pub(crate) fn set_leader(&self, term: Term, lease_deadline: Instant) {
        let mut p = self.lock();
        p.leadership = Leadership::Leader { term };
        p.lease_deadline = Some(lease_deadline);
        self.changed.notify_all();
    }

    /// Move the lease deadline of a published `Leader` on (a keepalive was
    /// answered). Waiters need no wake-up: nothing they can see changed.
    pub(crate) fn extend(&self, lease_id: i64, lease_deadline: Instant) {
        let mut p = self.lock();
        if p.leadership.term().is_some_and(|t| t.lease_id == lease_id) {
            p.lease_deadline = Some(lease_deadline);
        }
    }

    /// Publish that another instance (or nobody) leads.
    pub(crate) fn set_follower(&self, leader: Option<String>) {
        let mut p = self.lock();
        p.leadership = Leadership::Follower { leader };
        p.lease_deadline = None;
        self.changed.notify_all();
    }

    /// Wait until the leadership differs from `seen`, at most `timeout`;
    /// returns the leadership then (equal to `seen` on a timeout).
    pub(crate) fn wait_for_change(&self, seen: &Leadership, timeout: Duration) -> Leadership {
        let deadline = Instant::now() + timeout;
        let mut p = self.lock();
        loop {
            let now = Instant::now();
            let current = effective(&p, now);
            if current != *seen || now >= deadline {
                return current;
            }
            // Wake at the lease deadline too: leadership ends there even if
            // nobody publishes anything.
            let wake = p
                .lease_deadline
                .filter(|d| *d > now)
                .map_or(deadline, |d| d.min(deadline));
            p = self
                .changed
                .wait_timeout(p, wake - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

fn effective(p: &Published, now: Instant) -> Leadership {
    match (&p.leadership, p.lease_deadline) {
        (Leadership::Leader { .. }, Some(deadline)) if now >= deadline => {
            Leadership::Follower { leader: None }
        }
        (leadership, _) => leadership.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_past_its_lease_deadline_reads_as_follower() {
        let cell = LeadershipCell::new();
        let t0 = Instant::now();
        let term = Term::new(7, 0x42);
        cell.set_leader(term, t0 + Duration::from_secs(3));
        assert_eq!(cell.get(t0), Leadership::Leader { term });
        assert_eq!(
            cell.get(t0 + Duration::from_secs(3)),
            Leadership::Follower { leader: None }
        );
        cell.extend(0x42, t0 + Duration::from_secs(5));
        assert_eq!(
            cell.get(t0 + Duration::from_secs(4)),
            Leadership::Leader { term }
        );
        // Another lease's keepalive does not extend this term.
        cell.extend(0x43, t0 + Duration::from_secs(9));
        assert!(!cell.get(t0 + Duration::from_secs(6)).is_leader());
    }

    #[test]
    fn waiting_wakes_at_the_lease_deadline() {
        let cell = LeadershipCell::new();
        let term = Term::new(7, 1);
        cell.set_leader(term, Instant::now() + Duration::from_millis(50));
        let seen = Leadership::Leader { term };
        let after = cell.wait_for_change(&seen, Duration::from_secs(10));
        assert_eq!(after, Leadership::Follower { leader: None });
    }

    #[test]
    fn waiting_times_out_with_the_same_leadership() {
        let cell = LeadershipCell::new();
        let seen = cell.get(Instant::now());
        assert_eq!(cell.wait_for_change(&seen, Duration::from_millis(10)), seen);
    }
}
