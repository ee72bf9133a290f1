//! [`Election`]: what an instance of a highly available control plane
//! needs from its election, so the control plane stays free of the etcd
//! client and its runtime (the implementation is `kelp_election`'s: a
//! lease and a leader key in etcd, `docs/etcd.md`).
//!
//! The driver of an elected [`ControlServer`](crate::ControlServer) reads
//! [`Election::state`] before every input; a term it leads in gets a fresh
//! state machine over [`Election::store`], whose writes only that term can
//! apply.

use std::sync::Arc;

use crate::state_store::StateStore;

/// One leadership, as the election numbers it: unique, and larger for
/// later leaders (a fencing token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ElectedTerm {
    /// The term's number (in etcd, the leader key's `create_revision`).
    pub revision: i64,
    /// The lease the leadership hangs on.
    pub lease_id: i64,
}

impl std::fmt::Display for ElectedTerm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} on lease {:x}", self.revision, self.lease_id)
    }
}

/// What an instance believes right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElectionState {
    /// This instance leads, in `term`.
    Leader { term: ElectedTerm },
    /// Another instance leads (its advertised address, when known), or
    /// nobody does yet.
    Follower { leader: Option<String> },
}

impl ElectionState {
    /// The term, if this instance leads.
    pub fn term(&self) -> Option<ElectedTerm> {
        match self {
            ElectionState::Leader { term } => Some(*term),
            ElectionState::Follower { .. } => None,
        }
    }
}

/// An instance's standing in its election (see the module docs).
pub trait Election: Send + Sync + std::fmt::Debug {
    /// What it believes now: never `Leader` past the moment its leadership
    /// may have ended, even if whatever keeps it is stuck.
    fn state(&self) -> ElectionState;
    /// The address brokers and the other instances reach this one on.
    fn advertised_address(&self) -> &str;
    /// The state store of the leader of `term`: every write is applied only
    /// while `term` holds, and fails with
    /// [`ControlError::NotLeader`](crate::ControlError::NotLeader) after.
    fn store(self: Arc<Self>, term: ElectedTerm) -> Box<dyn StateStore>;
}
