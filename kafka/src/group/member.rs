//! [`Member`]: one member of a group, as the coordinator tracks it.

use crate::group::{JoinRequest, Protocol, Token};

/// A group member. Identified by its member id only; `client_id` and
/// `client_host` are kept for DescribeGroups and never used to match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) member_id: String,
    pub(crate) group_instance_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) session_timeout_ms: u32,
    pub(crate) rebalance_timeout_ms: u32,
    pub(crate) protocol_type: String,
    pub(crate) protocols: Vec<Protocol>,
    /// The leader's last assignment for this member, kept across rejoins.
    pub(crate) assignment: Vec<u8>,
    /// The generation `assignment` was given in; -1 before the first.
    pub(crate) assignment_generation: i32,
    /// Order of first join: the leader is re-elected as the earliest.
    pub(crate) join_seq: u64,
    /// When the session expires without a heartbeat (while nothing is parked).
    pub(crate) session_deadline_ms: u64,
    /// A parked JoinGroup, answered when the join phase completes.
    pub(crate) awaiting_join: Option<Token>,
    /// A parked SyncGroup, answered when the leader assigns.
    pub(crate) awaiting_sync: Option<Token>,
    /// Joined the current generation but has not sent its SyncGroup yet.
    pub(crate) sync_pending: bool,
}

impl Member {
    /// Whether the member lists a protocol named `name`.
    pub(crate) fn supports(&self, name: &str) -> bool {
        self.protocols.iter().any(|p| p.name == name)
    }

    /// Its metadata for protocol `name`, empty if it has none.
    pub(crate) fn metadata_for(&self, name: &str) -> &[u8] {
        self.protocols
            .iter()
            .find(|p| p.name == name)
            .map_or(&[][..], |p| &p.metadata[..])
    }

    /// Its most preferred protocol among `candidates`.
    pub(crate) fn vote<'a>(&'a self, candidates: &[&str]) -> Option<&'a str> {
        self.protocols
            .iter()
            .map(|p| p.name.as_str())
            .find(|n| candidates.contains(n))
    }

    /// Takes a rejoin's client details and timeouts (not its protocols,
    /// which decide whether the group rebalances) and restarts the session.
    pub(crate) fn update_client(&mut self, req: &JoinRequest, now_ms: u64) {
        self.client_id.clone_from(&req.client_id);
        self.client_host.clone_from(&req.client_host);
        self.session_timeout_ms = req.session_timeout_ms;
        self.rebalance_timeout_ms = req.rebalance_timeout_ms;
        self.heard_from(now_ms);
    }

    /// Restarts the session clock.
    pub(crate) fn heard_from(&mut self, now_ms: u64) {
        self.session_deadline_ms = now_ms.saturating_add(u64::from(self.session_timeout_ms));
    }
}
