//! [`Delivery`]: one committed [`Action`] being carried out on brokers, as
//! explicit pending steps. Pure data; the
//! [`ClusterService`](crate::ClusterService) queues each step's commands
//! and moves to the next step once every one of them has completed (done,
//! or failed, which sends its broker to resync).
//!
//! The steps, each skipped when it names nobody:
//! 1. [`Step::Seal`]: the layout to each broker that seals a segment and
//!    opens none;
//! 2. [`Step::SealAndOpen`]: to each sealing broker that also opens one
//!    (a move to another shard, a split kept on its broker): last among the
//!    sealers, so it never opens a successor before the other sealers have
//!    sealed;
//! 3. [`Step::Open`]: to each opening broker not told yet. The delivery is
//!    *released* here: the admin request that caused it may be answered
//!    and the next delivery of the same topic may start;
//! 4. [`Step::InformOthers`]: to every other live broker, if anything was
//!    sealed (reads of a sealed segment go to any broker, which must know
//!    it is sealed). A stalled broker here delays nobody.
//!
//! A delete is one step, [`Step::Drop`]: `DropTopic` to each broker that
//! held the topic's open segments.

use std::collections::VecDeque;

use crate::broker_queue::Snapshot;
use crate::{Action, BrokerCommand, BrokerId, TopicName};

/// One step of a delivery (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    Seal(Vec<BrokerId>),
    SealAndOpen(Vec<BrokerId>),
    Open(Vec<BrokerId>),
    InformOthers,
    Drop(Vec<BrokerId>),
}

impl Step {
    fn seals(&self) -> bool {
        matches!(self, Step::Seal(b) | Step::SealAndOpen(b) if !b.is_empty())
    }
}

/// An action being carried out (see the module docs).
#[derive(Debug)]
pub(crate) struct Delivery {
    pub(crate) topic: TopicName,
    /// The topic as it stood right after the action (empty for a delete).
    pub(crate) snapshot: Snapshot,
    pub(crate) steps: VecDeque<Step>,
    /// Brokers already sent this delivery's command.
    pub(crate) told: Vec<BrokerId>,
    /// Commands of the current step not completed yet.
    pub(crate) commands_left: usize,
    /// The answer waiting for this delivery's release, if any.
    pub(crate) gate: Option<u64>,
    pub(crate) released: bool,
    /// Whether it is a delete (its command is `DropTopic`).
    pub(crate) drop: bool,
}

impl Delivery {
    /// The steps that carry out `action`, whose topic stood as `snapshot`
    /// right after it.
    pub(crate) fn new(action: &Action, snapshot: Snapshot, gate: Option<u64>) -> Delivery {
        let mut sealers: Vec<BrokerId> = Vec::new();
        let mut openers: Vec<BrokerId> = Vec::new();
        let mut droppers: Vec<BrokerId> = Vec::new();
        for command in action.commands() {
            let (list, broker) = match command {
                BrokerCommand::Seal { broker, .. } => (&mut sealers, broker),
                BrokerCommand::Open { segment, .. } => (&mut openers, segment.broker),
                BrokerCommand::DropTopic { broker, .. } => (&mut droppers, broker),
            };
            if !list.contains(&broker) {
                list.push(broker);
            }
        }
        let mut steps = VecDeque::new();
        if matches!(action, Action::DeleteTopic { .. }) {
            steps.push_back(Step::Drop(droppers));
        } else {
            let (seal_and_open, seal_only): (Vec<BrokerId>, Vec<BrokerId>) =
                sealers.iter().partition(|b| openers.contains(b));
            let open_only: Vec<BrokerId> = openers
                .iter()
                .copied()
                .filter(|b| !sealers.contains(b))
                .collect();
            steps.push_back(Step::Seal(seal_only));
            steps.push_back(Step::SealAndOpen(seal_and_open));
            steps.push_back(Step::Open(open_only));
            if !action.sealed().is_empty() {
                steps.push_back(Step::InformOthers);
            }
        }
        Delivery {
            topic: action.topic().clone(),
            snapshot,
            steps,
            told: Vec::new(),
            commands_left: 0,
            gate,
            released: false,
            drop: matches!(action, Action::DeleteTopic { .. }),
        }
    }

    /// Whether a step that seals is still to come.
    pub(crate) fn seals_pending(&self) -> bool {
        self.steps.iter().any(Step::seals)
    }

    /// Whether the delivery may be released: the current step is done and
    /// only informing others (or nothing) is left.
    pub(crate) fn releasable(&self) -> bool {
        self.commands_left == 0 && matches!(self.steps.front(), None | Some(Step::InformOthers))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::action::tests::{placed, sealed};
    use crate::Cause;

    fn snapshot() -> Snapshot {
        Snapshot {
            version: 1,
            json: Arc::from(&b"{}"[..]),
            owners: Arc::from(Vec::new()),
        }
    }

    #[test]
    fn a_sealer_that_also_opens_goes_after_the_other_sealers() {
        let merge = Action::Merge {
            topic: TopicName::parse("ns/t").unwrap(),
            sealed: [sealed(1, Some(4)), sealed(2, Some(5))],
            opened: placed(3, 5),
            cause: Cause::Manual,
        };
        let delivery = Delivery::new(&merge, snapshot(), None);
        let steps: Vec<Step> = delivery.steps.iter().cloned().collect();
        assert_eq!(
            steps,
            [
                Step::Seal(vec![BrokerId(4)]),
                Step::SealAndOpen(vec![BrokerId(5)]),
                Step::Open(vec![]),
                Step::InformOthers,
            ]
        );
        assert!(delivery.seals_pending() && !delivery.drop);
    }

    #[test]
    fn a_creation_only_opens_and_a_delete_only_drops() {
        let topic = TopicName::parse("ns/t").unwrap();
        let create = Action::CreateTopic {
            topic: topic.clone(),
            opened: vec![placed(0, 1), placed(1, 2), placed(2, 1)],
        };
        let delivery = Delivery::new(&create, snapshot(), Some(9));
        assert!(!delivery.seals_pending());
        assert_eq!(
            delivery.steps.back(),
            Some(&Step::Open(vec![BrokerId(1), BrokerId(2)]))
        );
        let delete = Action::DeleteTopic {
            topic,
            brokers: vec![BrokerId(3)],
        };
        let delivery = Delivery::new(&delete, snapshot(), None);
        assert!(delivery.drop);
        assert_eq!(delivery.steps.len(), 1);
    }
}
