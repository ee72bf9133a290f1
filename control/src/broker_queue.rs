//! [`BrokerQueue`]: the commands waiting for one broker, the one in flight,
//! and where the broker stands on resync. Owned by
//! [`ClusterService`](crate::ClusterService); sans-IO like it: nothing here
//! sends, it only says what goes next.
//!
//! At most one command is in flight per broker, so a broker sees its
//! layouts in the order they were queued. The queue holds at most
//! [`COMMANDS_QUEUED_PER_BROKER_MAX`] commands; the service treats a full
//! queue like a failed command (the broker is resynchronised instead).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use wire::message::BrokerShards;
use wire::LayoutCommand;

use crate::TopicName;

/// Most commands waiting for one broker (not counting the one in flight).
/// A broker this far behind is resynchronised instead: its queue is
/// emptied and its next load report brings it every topic's layout.
pub const COMMANDS_QUEUED_PER_BROKER_MAX: usize = 256;

/// Names one command sent to a broker, so its result can be matched to it
/// (a result for a command no longer in flight, e.g. one already timed
/// out, is ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CommandId(pub u64);

/// What a command asks of a broker, owned so it can cross to the thread
/// that sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandRequest {
    /// Apply this topic JSON (`Topic::to_json_bytes`).
    ApplyLayout {
        /// The layout.
        topic_json: Arc<[u8]>,
        /// The shards of each broker owning one of its open segments.
        owners: Arc<[BrokerShards]>,
    },
    /// Drop everything of this topic.
    DropTopic {
        /// The topic's name.
        topic: String,
    },
    /// Refuse writes to what this layout seals, and nothing more yet (an
    /// `ApplyLayout` of it follows).
    RefuseWrites {
        /// The layout.
        topic_json: Arc<[u8]>,
        /// As `ApplyLayout`'s.
        owners: Arc<[BrokerShards]>,
    },
}

impl CommandRequest {
    /// The wire request to send.
    pub fn to_request(&self) -> LayoutCommand<'_> {
        match self {
            CommandRequest::ApplyLayout { topic_json, owners } => LayoutCommand::ApplyLayout {
                topic_json,
                owners: owners.to_vec(),
            },
            CommandRequest::DropTopic { topic } => LayoutCommand::DropTopic {
                topic: topic.clone(),
            },
            CommandRequest::RefuseWrites { topic_json, owners } => LayoutCommand::RefuseWrites {
                topic_json,
                owners: owners.to_vec(),
            },
        }
    }
}

/// A topic's layout as of one committed change: `version` grows with every
/// change the service commits (over all topics), so two snapshots of one
/// topic compare by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) version: u64,
    pub(crate) json: Arc<[u8]>,
    /// The shards of the brokers owning its open segments, as they
    /// registered them at the change.
    pub(crate) owners: Arc<[BrokerShards]>,
}

impl Snapshot {
    /// The command that tells a broker this layout.
    pub(crate) fn apply_layout(&self) -> CommandRequest {
        CommandRequest::ApplyLayout {
            topic_json: self.json.clone(),
            owners: self.owners.clone(),
        }
    }

    /// The command that has a broker refuse writes to what this layout
    /// seals, ahead of its `ApplyLayout`.
    pub(crate) fn refuse_writes(&self) -> CommandRequest {
        CommandRequest::RefuseWrites {
            topic_json: self.json.clone(),
            owners: self.owners.clone(),
        }
    }
}

/// Who waits for a command's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A step of a delivery (`ClusterService`'s carrying out of an action).
    Delivery(u64),
    /// The broker's resync.
    Resync,
}

/// A command queued or in flight.
#[derive(Debug, Clone)]
pub(crate) struct QueuedCommand {
    pub(crate) id: CommandId,
    pub(crate) request: CommandRequest,
    pub(crate) origin: Origin,
}

/// Where a broker stands on resync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ResyncState {
    /// Every command queued for it so far was done (or is still queued).
    Synced,
    /// Its next load report starts a resync. After a failure
    /// (`after_failure`) new commands are not even queued for it: it did
    /// not take the last one, the resync covers them, and a stalled broker
    /// is not handed one more command to time out on. After a registration
    /// they are (the broker is up and answering).
    Awaited {
        /// Whether a command failed or a queue overflowed.
        after_failure: bool,
    },
    /// Sending it every topic's layout, one at a time, in name order.
    Running {
        /// Topics still to send (fixed when the resync started; one deleted
        /// since is skipped), each with what goes next for it.
        topics: VecDeque<(TopicName, ResyncNext)>,
        /// Whether every topic was sent (false: one was not persisted, so
        /// it could not be sent; the next report tries again).
        complete: bool,
        /// Load reports answered when the resync ends.
        waiters: Vec<u64>,
    },
}

/// What a resync sends next for one topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResyncNext {
    /// A `DropTopic` (its drop was due: see [`BrokerQueue::drops_due`]),
    /// then what its layout needs.
    Drop,
    /// A `RefuseWrites` if one is due newer than the layout to send (see
    /// [`BrokerQueue::refusals_due`]), then the layout.
    Refusal,
    /// The layout.
    Layout,
}

/// The commands for one broker (see the module docs).
#[derive(Debug)]
pub(crate) struct BrokerQueue {
    pub(crate) queued: VecDeque<QueuedCommand>,
    /// The command sent, and when (the service's latest `now_ms`).
    pub(crate) in_flight: Option<(QueuedCommand, u64)>,
    pub(crate) resync: ResyncState,
    /// The latest layout of each topic meant for this broker: queued, sent,
    /// or turned away (then its resync sends it). A resync never sends an
    /// older one, so the broker's layouts never go back.
    pub(crate) layouts_due: HashMap<TopicName, Snapshot>,
    /// Topics whose `DropTopic` was meant for this broker and is not known
    /// done (queued, sent, turned away or failed). A broker ignores a
    /// layout with fewer segments than the one it holds, whatever its
    /// creation time, so until the drop is done it could ignore every
    /// layout of a topic created again under the name; its resync sends
    /// the drop first.
    pub(crate) drops_due: BTreeSet<TopicName>,
    /// The latest `RefuseWrites` of each topic meant for this broker whose
    /// layout is not due to it yet (the step that applies it comes after
    /// the other sealers refused). Its resync sends the refusal before an
    /// older layout, so a broker that missed it still stops taking writes
    /// to what other brokers' successors now take.
    pub(crate) refusals_due: HashMap<TopicName, Snapshot>,
}

impl BrokerQueue {
    /// A queue for a broker that just registered: it is resynchronised on
    /// its first report.
    pub(crate) fn registered() -> BrokerQueue {
        BrokerQueue {
            queued: VecDeque::new(),
            in_flight: None,
            resync: ResyncState::Awaited {
                after_failure: false,
            },
            layouts_due: HashMap::new(),
            drops_due: BTreeSet::new(),
            refusals_due: HashMap::new(),
        }
    }

    /// Whether a `DropTopic` of `topic` is queued.
    pub(crate) fn drop_queued(&self, topic: &TopicName) -> bool {
        let name = topic.to_string();
        self.queued
            .iter()
            .any(|c| matches!(&c.request, CommandRequest::DropTopic { topic: t } if *t == name))
    }

    /// Whether commands are turned away rather than queued (see
    /// [`ResyncState::Awaited`]).
    pub(crate) fn turns_commands_away(&self) -> bool {
        self.resync
            == ResyncState::Awaited {
                after_failure: true,
            }
    }

    /// Whether the queue is full.
    pub(crate) fn is_full(&self) -> bool {
        self.queued.len() >= COMMANDS_QUEUED_PER_BROKER_MAX
    }

    /// Whether a command could be sent now: none in flight, and one queued
    /// or a resync topic to send.
    pub(crate) fn has_sendable(&self) -> bool {
        self.in_flight.is_none()
            && (!self.queued.is_empty()
                || matches!(&self.resync, ResyncState::Running { topics, .. } if !topics.is_empty()))
    }

    /// Whether nothing is queued or in flight.
    pub(crate) fn is_idle(&self) -> bool {
        self.in_flight.is_none() && self.queued.is_empty()
    }

    /// Whether a resync is due or running.
    pub(crate) fn needs_resync(&self) -> bool {
        self.resync != ResyncState::Synced
    }

    /// Whether the resync is running and has nothing left to send or wait
    /// for.
    pub(crate) fn resync_finished(&self) -> bool {
        let resync_in_flight =
            matches!(&self.in_flight, Some((c, _)) if c.origin == Origin::Resync);
        matches!(&self.resync, ResyncState::Running { topics, .. } if topics.is_empty())
            && !resync_in_flight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_broker_takes_commands_and_a_failed_one_does_not() {
        let mut queue = BrokerQueue::registered();
        assert!(queue.needs_resync() && !queue.turns_commands_away());
        assert!(!queue.has_sendable() && queue.is_idle());
        queue.resync = ResyncState::Awaited {
            after_failure: true,
        };
        assert!(queue.turns_commands_away());
        queue.resync = ResyncState::Running {
            topics: VecDeque::new(),
            complete: true,
            waiters: vec![1],
        };
        assert!(queue.resync_finished());
        queue.in_flight = Some((
            QueuedCommand {
                id: CommandId(1),
                request: CommandRequest::DropTopic {
                    topic: "a/b".into(),
                },
                origin: Origin::Resync,
            },
            0,
        ));
        assert!(!queue.resync_finished() && !queue.has_sendable());
    }
}
