//! [`GroupState`]: where a group is in its rebalance cycle.

/// A group's state, as Kafka names them (DescribeGroups and ListGroups send
/// [`GroupState::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// No members; the group may still hold committed offsets.
    Empty,
    /// A rebalance started: waiting for every member to (re)join.
    PreparingRebalance,
    /// Every member joined a new generation: waiting for the leader's
    /// SyncGroup with the assignments.
    CompletingRebalance,
    /// The leader assigned; members heartbeat.
    Stable,
    /// The group does not exist (deleted, or never created).
    Dead,
}

impl GroupState {
    /// Kafka's name for the state.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }

    /// The state named `name` (ListGroups v4+ filters), case-insensitive as
    /// Kafka parses it.
    pub fn from_name(name: &str) -> Option<GroupState> {
        [
            GroupState::Empty,
            GroupState::PreparingRebalance,
            GroupState::CompletingRebalance,
            GroupState::Stable,
            GroupState::Dead,
        ]
        .into_iter()
        .find(|s| s.name().eq_ignore_ascii_case(name))
    }

    /// Whether a rebalance is under way.
    pub fn is_rebalancing(self) -> bool {
        matches!(
            self,
            GroupState::PreparingRebalance | GroupState::CompletingRebalance
        )
    }
}

#[cfg(test)]
mod tests {
    use super::GroupState;

    #[test]
    fn names_round_trip() {
        for s in [
            GroupState::Empty,
            GroupState::PreparingRebalance,
            GroupState::CompletingRebalance,
            GroupState::Stable,
            GroupState::Dead,
        ] {
            assert_eq!(GroupState::from_name(s.name()), Some(s));
        }
        assert_eq!(GroupState::from_name("stable"), Some(GroupState::Stable));
        assert_eq!(GroupState::from_name("Rebalancing"), None);
    }
}
