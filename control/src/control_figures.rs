//! The control plane's figures for its metrics page: the driver thread
//! writes them at every tick, any thread reads them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::cluster_service::{ActionCounts, ClusterService};

/// What a control plane instance publishes.
#[derive(Debug, Default)]
pub struct ControlFigures {
    leader: AtomicBool,
    brokers: AtomicU64,
    topics: AtomicU64,
    segments_open: AtomicU64,
    segments_sealed: AtomicU64,
    topics_created: AtomicU64,
    topics_deleted: AtomicU64,
    splits: AtomicU64,
    merges: AtomicU64,
    moves: AtomicU64,
    follower_changes: AtomicU64,
    connections: AtomicU64,
    receive_bytes: AtomicU64,
    refused_for_connections: AtomicU64,
    refused_for_address: AtomicU64,
    denied_unauthenticated: AtomicU64,
    denied_authentication_failed: AtomicU64,
    denied_forbidden: AtomicU64,
    stalled_ms: AtomicU64,
}

/// The figures read at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlFiguresSnapshot {
    /// This instance leads (one alone always does).
    pub leader: bool,
    /// Live brokers, as the leader sees them (0 on a follower).
    pub brokers: u64,
    /// Topics, and their segments open and sealed (0 on a follower).
    pub topics: u64,
    /// Open segments.
    pub segments_open: u64,
    /// Sealed segments still in the layouts.
    pub segments_sealed: u64,
    /// Actions this process decided while it led, over its life.
    pub actions: ActionCounts,
    /// Connections open.
    pub connections: u64,
    /// Frame payload bytes held against the receive budget.
    pub receive_bytes: u64,
    /// Connections turned away: all slots taken (`connections_max`).
    pub refused_for_connections: u64,
    /// Connections turned away: their address holds its share
    /// (`connections_per_ip_max`).
    pub refused_for_address: u64,
    /// Requests refused for who sent them (`--auth`): the connection had
    /// not logged in; a login step failed; the principal may not do it.
    pub denied_unauthenticated: u64,
    pub denied_authentication_failed: u64,
    pub denied_forbidden: u64,
    /// Milliseconds the driver was stalled, in stretches over
    /// `DRIVER_STALL_MS` (not counted as brokers' silence).
    pub stalled_ms: u64,
}

/// The driver's record of what it published of one state machine's
/// action counts, so totals carry on across terms.
#[derive(Debug, Default)]
pub(crate) struct PublishedActions {
    generation: u64,
    counted: ActionCounts,
}

impl ControlFigures {
    /// Publish the state of `service` (`None`: not leading), built in
    /// `generation`.
    pub(crate) fn publish(
        &self,
        service: Option<&ClusterService>,
        generation: u64,
        published: &mut PublishedActions,
    ) {
        self.leader.store(service.is_some(), Relaxed);
        let Some(service) = service else {
            for level in [
                &self.brokers,
                &self.topics,
                &self.segments_open,
                &self.segments_sealed,
            ] {
                level.store(0, Relaxed);
            }
            return;
        };
        let cluster = service.cluster();
        let (mut topics, mut open, mut sealed) = (0u64, 0u64, 0u64);
        for topic in cluster.topics() {
            topics += 1;
            for segment in topic.segments() {
                if segment.is_open() {
                    open += 1;
                } else {
                    sealed += 1;
                }
            }
        }
        self.brokers
            .store(cluster.membership().len() as u64, Relaxed);
        self.topics.store(topics, Relaxed);
        self.segments_open.store(open, Relaxed);
        self.segments_sealed.store(sealed, Relaxed);
        if published.generation != generation {
            *published = PublishedActions {
                generation,
                counted: ActionCounts::default(),
            };
        }
        let now = service.action_counts();
        let was = published.counted;
        let add = |total: &AtomicU64, now: u64, was: u64| {
            total.fetch_add(now.saturating_sub(was), Relaxed);
        };
        add(&self.topics_created, now.topics_created, was.topics_created);
        add(&self.topics_deleted, now.topics_deleted, was.topics_deleted);
        add(&self.splits, now.splits, was.splits);
        add(&self.merges, now.merges, was.merges);
        add(&self.moves, now.moves, was.moves);
        add(
            &self.follower_changes,
            now.follower_changes,
            was.follower_changes,
        );
        published.counted = now;
    }

    /// The connection thread's levels: connections open, payload bytes
    /// held.
    pub(crate) fn set_connections(&self, open: u64, receive_bytes: u64) {
        self.connections.store(open, Relaxed);
        self.receive_bytes.store(receive_bytes, Relaxed);
    }

    /// A connection was turned away: every slot is taken.
    pub(crate) fn count_refused_for_connections(&self) {
        self.refused_for_connections.fetch_add(1, Relaxed);
    }

    /// A connection was turned away: its address has its share.
    pub(crate) fn count_refused_for_address(&self) {
        self.refused_for_address.fetch_add(1, Relaxed);
    }

    /// A request was refused for who sent it.
    pub(crate) fn count_denied(&self, denied: &auth::Denied) {
        let counter = match denied.reason() {
            auth::DenialReason::Unauthenticated => &self.denied_unauthenticated,
            auth::DenialReason::AuthenticationFailed => &self.denied_authentication_failed,
            auth::DenialReason::Forbidden => &self.denied_forbidden,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// The driver was stalled for `ms`.
    pub(crate) fn count_stall(&self, ms: u64) {
        self.stalled_ms.fetch_add(ms, Relaxed);
    }

    /// The figures now.
    pub fn read(&self) -> ControlFiguresSnapshot {
        ControlFiguresSnapshot {
            leader: self.leader.load(Relaxed),
            brokers: self.brokers.load(Relaxed),
            topics: self.topics.load(Relaxed),
            segments_open: self.segments_open.load(Relaxed),
            segments_sealed: self.segments_sealed.load(Relaxed),
            actions: ActionCounts {
                topics_created: self.topics_created.load(Relaxed),
                topics_deleted: self.topics_deleted.load(Relaxed),
                splits: self.splits.load(Relaxed),
                merges: self.merges.load(Relaxed),
                moves: self.moves.load(Relaxed),
                follower_changes: self.follower_changes.load(Relaxed),
            },
            connections: self.connections.load(Relaxed),
            receive_bytes: self.receive_bytes.load(Relaxed),
            refused_for_connections: self.refused_for_connections.load(Relaxed),
            refused_for_address: self.refused_for_address.load(Relaxed),
            denied_unauthenticated: self.denied_unauthenticated.load(Relaxed),
            denied_authentication_failed: self.denied_authentication_failed.load(Relaxed),
            denied_forbidden: self.denied_forbidden.load(Relaxed),
            stalled_ms: self.stalled_ms.load(Relaxed),
        }
    }
}
