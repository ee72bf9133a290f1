//! [`Delivery`]: one committed [`Action`] being carried out on brokers, as
//! explicit pending steps. Pure data; the
//! [`ClusterService`](crate::ClusterService) queues each step's commands
//! and moves to the next step once every one of them has completed (done,
//! or failed, which sends its broker to resync).
//!
//! The steps, each skipped when it names nobody:
//! 1. [`Step::Refuse`]: `RefuseWrites` to each sealing broker, when some
//!    other broker opens a successor: writes to what the action seals stop
//!    everywhere before any successor opens, and nothing waits for a
//!    flush yet;
//! 2. [`Step::Apply`]: the layout to every sealing and opening broker,
//!    at once: sealers flush and mark what they sealed while the
//!    successors open. (A broker that seals and opens refuses before it opens on its
//!    own, so an action on one broker needs no step 1.) The delivery is
//!    *released* here: the admin request that caused it may be answered
//!    and the next delivery of the same topic may start;
//! 3. [`Step::InformOthers`]: to every other live broker (taken when the
//!    step is sent), if anything was sealed (reads of a sealed segment go
//!    to any broker, which must know it is sealed) or what opens has
//!    followers (they start copying once told). A stalled broker here
//!    delays nobody: a follower on a stopped broker holds up no answer.
//!
//! A delete is one step, [`Step::Drop`]: `DropTopic` to each broker that
//! held the topic's open segments. A change of followers is one step,
//! [`Step::InformOthers`]: every broker live when it is sent (one that
//! registers meanwhile may hold the topic's layout too); the layout's age
//! orders it against the others.

use std::collections::VecDeque;

use crate::broker_queue::Snapshot;
use crate::{Action, BrokerCommand, BrokerId, TopicName};

/// One step of a delivery (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    Refuse(Vec<BrokerId>),
    Apply {
        brokers: Vec<BrokerId>,
        /// Whether a broker among them seals a segment with no
        /// [`Step::Refuse`] before (it refuses as it applies).
        seals: bool,
    },
    InformOthers,
    Drop(Vec<BrokerId>),
}

impl Step {
    /// Whether, until it completes, its layout could open a successor
    /// before every sealer stopped taking writes to its predecessor (so it
    /// is not safe to send just any broker yet).
    fn seals(&self) -> bool {
        match self {
            Step::Refuse(b) => !b.is_empty(),
            Step::Apply { seals, .. } => *seals,
            Step::InformOthers | Step::Drop(_) => false,
        }
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
    /// right after it; `followed` says whether a segment it opened has
    /// followers.
    pub(crate) fn new(
        action: &Action,
        snapshot: Snapshot,
        gate: Option<u64>,
        followed: bool,
    ) -> Delivery {
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
        if matches!(action, Action::Followers { .. }) {
            steps.push_back(Step::InformOthers);
        } else if matches!(action, Action::DeleteTopic { .. }) {
            steps.push_back(Step::Drop(droppers));
        } else {
            // Another broker opens a successor: writes stop on every
            // sealer first.
            let refusers = if openers.iter().any(|o| sealers.iter().any(|s| s != o)) {
                sealers.clone()
            } else {
                Vec::new()
            };
            let seals = !sealers.is_empty() && refusers.is_empty();
            let mut brokers = sealers;
            for broker in openers {
                if !brokers.contains(&broker) {
                    brokers.push(broker);
                }
            }
            steps.push_back(Step::Refuse(refusers));
            steps.push_back(Step::Apply { brokers, seals });
            if !action.sealed().is_empty() || followed {
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
    fn sealers_refuse_writes_before_any_other_broker_opens() {
        let merge = Action::Merge {
            topic: TopicName::parse("ns/t").unwrap(),
            sealed: [sealed(1, Some(4)), sealed(2, Some(5))],
            opened: placed(3, 5),
            cause: Cause::Manual,
        };
        let delivery = Delivery::new(&merge, snapshot(), None, false);
        let steps: Vec<Step> = delivery.steps.iter().cloned().collect();
        assert_eq!(
            steps,
            [
                Step::Refuse(vec![BrokerId(4), BrokerId(5)]),
                Step::Apply {
                    brokers: vec![BrokerId(4), BrokerId(5)],
                    seals: false
                },
                Step::InformOthers,
            ]
        );
        assert!(delivery.seals_pending() && !delivery.drop);
    }

    #[test]
    fn a_split_kept_on_its_broker_needs_no_refusal_first() {
        let split = Action::Split {
            topic: TopicName::parse("ns/t").unwrap(),
            sealed: sealed(1, Some(4)),
            opened: vec![placed(2, 4), placed(3, 4)],
            cause: Cause::Manual,
        };
        let delivery = Delivery::new(&split, snapshot(), None, false);
        assert_eq!(delivery.steps.front(), Some(&Step::Refuse(Vec::new())));
        assert_eq!(
            delivery.steps.get(1),
            Some(&Step::Apply {
                brokers: vec![BrokerId(4)],
                seals: true
            })
        );
    }

    #[test]
    fn a_creation_only_opens_and_a_delete_only_drops() {
        let topic = TopicName::parse("ns/t").unwrap();
        let create = Action::CreateTopic {
            topic: topic.clone(),
            opened: vec![placed(0, 1), placed(1, 2), placed(2, 1)],
        };
        let delivery = Delivery::new(&create, snapshot(), Some(9), false);
        assert!(!delivery.seals_pending());
        assert_eq!(
            delivery.steps.back(),
            Some(&Step::Apply {
                brokers: vec![BrokerId(1), BrokerId(2)],
                seals: false
            })
        );
        // Followers are told after the owners, by the step that holds
        // nothing up: the creation is answered once its owners opened.
        let delivery = Delivery::new(&create, snapshot(), Some(9), true);
        let steps: Vec<Step> = delivery.steps.iter().cloned().collect();
        assert_eq!(
            steps,
            [
                Step::Refuse(Vec::new()),
                Step::Apply {
                    brokers: vec![BrokerId(1), BrokerId(2)],
                    seals: false
                },
                Step::InformOthers,
            ]
        );
        let delete = Action::DeleteTopic {
            topic,
            brokers: vec![BrokerId(3)],
        };
        let delivery = Delivery::new(&delete, snapshot(), None, false);
        assert!(delivery.drop);
        assert_eq!(delivery.steps.len(), 1);
    }
}
