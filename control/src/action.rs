//! [`Action`]: what the control core decided, for a driver to carry out on
//! brokers.
//!
//! The core has already applied each action to its own state when it
//! returns it; the driver persists the changed topic and then sends the
//! [`BrokerCommand`]s of [`Action::commands`] in order: every seal before
//! any open, so a key's records reach a successor only after its
//! predecessor stopped taking them.

use crate::{BrokerId, Follower, KeyRange, SegmentId, TopicName};

/// Why an action happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// An operator asked for it.
    Manual,
    /// The topic's [`ScalingPolicy`](crate::ScalingPolicy) decided it.
    Policy,
    /// The rebalancer moved load off a hot broker.
    Rebalance,
    /// The owner left gracefully.
    BrokerLeft(BrokerId),
    /// The owner went silent for too long.
    BrokerDied(BrokerId),
    /// The owner was gone and no broker was live to take the segment; one
    /// has joined since.
    Orphaned,
    /// A follower's broker left or died, or a segment had fewer followers
    /// than its topic's replicas and a broker was live to take one.
    Replicas,
}

/// A segment the action sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedSegment {
    /// Its id.
    pub segment: SegmentId,
    /// Its epoch after sealing (one more than while open).
    pub epoch: u32,
    /// The broker to tell; `None` if its owner is gone (dead or left
    /// before), so there is nobody to seal it on.
    pub broker: Option<BrokerId>,
    /// The owning shard on that broker.
    pub shard: u16,
    /// With its owner gone: the follower broker whose copy seals it
    /// ([`Segment::sealer`](crate::Segment::sealer)), if one is live.
    pub sealer: Option<BrokerId>,
}

/// A segment the action opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacedSegment {
    /// Its id.
    pub segment: SegmentId,
    /// Its epoch (0 for a new segment).
    pub epoch: u32,
    /// The key hashes it takes.
    pub range: KeyRange,
    /// The broker that owns it.
    pub broker: BrokerId,
    /// The shard on that broker.
    pub shard: u16,
}

/// One change to a topic's layout, already applied by the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A topic was created with these segments.
    CreateTopic {
        /// The topic.
        topic: TopicName,
        /// Its segments.
        opened: Vec<PlacedSegment>,
    },
    /// A topic was deleted; these brokers held its open segments.
    DeleteTopic {
        /// The topic.
        topic: TopicName,
        /// Live brokers to tell, ascending, each once.
        brokers: Vec<BrokerId>,
    },
    /// One segment was sealed and its range cut into several successors.
    Split {
        /// The topic.
        topic: TopicName,
        /// The segment split.
        sealed: SealedSegment,
        /// Its successors, in range order.
        opened: Vec<PlacedSegment>,
        /// Why.
        cause: Cause,
    },
    /// Two adjacent segments were sealed and one successor took both ranges.
    Merge {
        /// The topic.
        topic: TopicName,
        /// The two segments merged, in range order.
        sealed: [SealedSegment; 2],
        /// Their successor.
        opened: PlacedSegment,
        /// Why.
        cause: Cause,
    },
    /// A segment was sealed and a successor over the same range opened on
    /// another broker (or another shard).
    Move {
        /// The topic.
        topic: TopicName,
        /// The segment moved.
        sealed: SealedSegment,
        /// Its successor.
        opened: PlacedSegment,
        /// Why.
        cause: Cause,
    },
    /// Open segments' followers changed (a follower on a broker that is
    /// gone was dropped, a new one placed); nothing sealed or opened.
    Followers {
        /// The topic.
        topic: TopicName,
        /// Each segment changed, with its followers before the change.
        before: Vec<(SegmentId, Vec<Follower>)>,
        /// The live brokers when it was decided, ascending (it is sent to
        /// every broker live when it is sent: any may hold the topic's
        /// layout).
        brokers: Vec<BrokerId>,
    },
}

/// One message for one broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerCommand {
    /// Stop taking writes for the segment, flush it, and refuse anything
    /// carrying an older epoch.
    Seal {
        /// Who.
        broker: BrokerId,
        /// The topic.
        topic: TopicName,
        /// What.
        segment: SealedSegment,
    },
    /// Start taking writes for the segment.
    Open {
        /// The topic.
        topic: TopicName,
        /// What and where.
        segment: PlacedSegment,
    },
    /// Drop everything of the topic.
    DropTopic {
        /// Who.
        broker: BrokerId,
        /// The topic.
        topic: TopicName,
    },
}

impl Action {
    /// The topic the action changed.
    pub fn topic(&self) -> &TopicName {
        match self {
            Action::CreateTopic { topic, .. }
            | Action::DeleteTopic { topic, .. }
            | Action::Split { topic, .. }
            | Action::Merge { topic, .. }
            | Action::Move { topic, .. }
            | Action::Followers { topic, .. } => topic,
        }
    }

    /// Why the action happened (`Manual` for creating and deleting topics).
    pub fn cause(&self) -> Cause {
        match self {
            Action::CreateTopic { .. } | Action::DeleteTopic { .. } => Cause::Manual,
            Action::Followers { .. } => Cause::Replicas,
            Action::Split { cause, .. }
            | Action::Merge { cause, .. }
            | Action::Move { cause, .. } => *cause,
        }
    }

    /// The segments the action sealed.
    pub fn sealed(&self) -> &[SealedSegment] {
        match self {
            Action::CreateTopic { .. } | Action::DeleteTopic { .. } | Action::Followers { .. } => {
                &[]
            }
            Action::Split { sealed, .. } | Action::Move { sealed, .. } => {
                std::slice::from_ref(sealed)
            }
            Action::Merge { sealed, .. } => sealed,
        }
    }

    /// The segments the action opened.
    pub fn opened(&self) -> &[PlacedSegment] {
        match self {
            Action::CreateTopic { opened, .. } | Action::Split { opened, .. } => opened,
            Action::DeleteTopic { .. } | Action::Followers { .. } => &[],
            Action::Merge { opened, .. } | Action::Move { opened, .. } => {
                std::slice::from_ref(opened)
            }
        }
    }

    /// The messages to send, in the order to send them: every seal (to an
    /// owner still there) before any open; for a deleted topic, one drop
    /// per broker.
    pub fn commands(&self) -> Vec<BrokerCommand> {
        let topic = self.topic();
        if let Action::DeleteTopic { brokers, .. } = self {
            return brokers
                .iter()
                .map(|broker| BrokerCommand::DropTopic {
                    broker: *broker,
                    topic: topic.clone(),
                })
                .collect();
        }
        let seals = self.sealed().iter().filter_map(|segment| {
            segment.broker.map(|broker| BrokerCommand::Seal {
                broker,
                topic: topic.clone(),
                segment: *segment,
            })
        });
        let opens = self.opened().iter().map(|segment| BrokerCommand::Open {
            topic: topic.clone(),
            segment: *segment,
        });
        seals.chain(opens).collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Segment `id` sealed at epoch 1, owned by `broker` (if still there).
    pub(crate) fn sealed(id: u32, broker: Option<u32>) -> SealedSegment {
        SealedSegment {
            segment: SegmentId(id),
            epoch: 1,
            broker: broker.map(BrokerId),
            shard: 0,
            sealer: None,
        }
    }

    /// Segment `id` opened at epoch 0 on shard 1 of `broker`.
    pub(crate) fn placed(id: u32, broker: u32) -> PlacedSegment {
        PlacedSegment {
            segment: SegmentId(id),
            epoch: 0,
            range: KeyRange::FULL,
            broker: BrokerId(broker),
            shard: 1,
        }
    }

    #[test]
    fn seals_go_first_and_only_to_owners_still_there() {
        let topic = TopicName::parse("ns/t").unwrap();
        let merge = Action::Merge {
            topic: topic.clone(),
            sealed: [sealed(1, Some(4)), sealed(2, None)],
            opened: placed(3, 5),
            cause: Cause::Policy,
        };
        let commands = merge.commands();
        assert_eq!(commands.len(), 2);
        assert!(matches!(
            &commands[0],
            BrokerCommand::Seal { broker: BrokerId(4), segment, .. } if segment.segment == SegmentId(1)
        ));
        assert!(matches!(
            &commands[1],
            BrokerCommand::Open { segment, .. } if segment.broker == BrokerId(5)
        ));
        assert_eq!(merge.cause(), Cause::Policy);
        assert_eq!(merge.topic(), &topic);

        let delete = Action::DeleteTopic {
            topic: topic.clone(),
            brokers: vec![BrokerId(1), BrokerId(2)],
        };
        assert_eq!(delete.commands().len(), 2);
        assert!(delete.sealed().is_empty() && delete.opened().is_empty());

        let split = Action::Split {
            topic,
            sealed: sealed(0, Some(1)),
            opened: vec![placed(1, 1), placed(2, 2)],
            cause: Cause::Manual,
        };
        let kinds: Vec<bool> = split
            .commands()
            .iter()
            .map(|c| matches!(c, BrokerCommand::Seal { .. }))
            .collect();
        assert_eq!(kinds, [true, false, false]);
    }
}
