//! [`ClusterService`]: the control plane's state machine around
//! [`Cluster`], in the quinn-proto style. It owns the core, persists topics
//! in the filer, answers requests, and says which commands to send brokers;
//! it sends nothing itself, never blocks on a broker, never takes a lock
//! and never reads the clock.
//!
//! Inputs, each carrying `now_ms`:
//! - [`ClusterService::handle_request`]: a request, with the token the
//!   driver uses to route its answer back;
//! - [`ClusterService::handle_command_done`]: the result of a command the
//!   driver sent (an error for one that failed or timed out);
//! - [`ClusterService::handle_tick`]: the periodic step.
//!
//! Outputs, drained by the driver after every input (answers first):
//! - [`ClusterService::poll_answer`]: `(token, response)`;
//! - [`ClusterService::poll_command`]: the next [`OutgoingCommand`].
//!
//! Two I/Os stay inside: the [`StateStore`] and the filer. Storing the
//! topic (its `topic.json` in the filer, or its etcd key in an HA control
//! plane: `control/src/state_store.rs`) is each change's commit point and
//! must happen before the change is answered or anything is sent, and the
//! store is local or one the process already waits on for loading; so
//! store writes, seal markers and prefix deletes are direct synchronous
//! calls here, not outputs. A store write that fails because this instance
//! no longer leads is answered `NotLeader`; the driver then drops the
//! state machine.
//!
//! Carrying out an action (a *delivery*, `control/src/delivery.rs`):
//! 1. persist the topic as it stood right after the action (the commit
//!    point); a delete removes the stored topic first, then the prefix;
//! 2. for every sealed segment whose owner is gone, write the seal marker
//!    `topics/<ns>/<name>/<segment>/sealed` (nobody else will);
//! 3. queue that topic JSON as `ApplyLayout` to each sealing broker; when
//!    every one has completed, to each sealer that also opens; then to each
//!    opening broker not yet told; then to every other live broker if
//!    anything was sealed. A delete queues `DropTopic` to every broker
//!    that may hold the topic's layout (a broker ignores a layout with
//!    fewer segments than the one it holds, even one of a topic created
//!    again under the name); a drop not known done is resent by the
//!    broker's resync, ahead of the name's layout.
//!
//! Deliveries of one topic go one after another, in commit order: the next
//! starts once the previous was *released* (its seals and opens completed;
//! informing the other brokers may still be under way). An admin request
//! that changes a layout is answered at its deliveries' release.
//!
//! Each broker has a queue (`control/src/broker_queue.rs`): at most one
//! command in flight, at most [`COMMANDS_QUEUED_PER_BROKER_MAX`] queued. A command that fails, times out, or finds the queue full marks
//! the broker "needs resync" (its queue is emptied; its waiting steps
//! count as completed): its next load report makes the service send it
//! every topic's layout, and that report is answered only once those
//! commands have completed, so a broker that waits for the answer knows
//! every layout reached its shards.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use filer::Filer;
use wire::message::{
    BrokerShards, BrokerStatus, SegmentInfo, SegmentLoadReport, ShardAddress, TopicInfo,
};
use wire::{AdminRequest, ControlPortRequest, ErrorCode, MembershipRequest, Response};

use crate::broker_queue::{BrokerQueue, Origin, QueuedCommand, ResyncNext, ResyncState, Snapshot};
use crate::delivery::{Delivery, Step};
use crate::filer_layout;
use crate::segment_fence::{self, Fenced};
use crate::state_store::StateStore;
use crate::{
    Action, BrokerCommand, BrokerId, BrokerInfo, Capacity, Cluster, ClusterConfig, ControlError,
    FollowerLag, Rate, ScalingPolicy, SegmentId, SegmentLoad, SegmentState, Topic, TopicName,
};

pub use crate::broker_queue::{CommandId, CommandRequest, COMMANDS_QUEUED_PER_BROKER_MAX};

/// Most deliveries (actions being carried out) at once. At the limit,
/// admin requests that would change a layout are answered `Busy` and the
/// core's tick is put off, so what waits on slow brokers stays bounded.
pub const DELIVERIES_PENDING_MAX: usize = 4096;

/// The refusal of a request the control port does not take (a data
/// request, a broker command): what the control server answers a frame
/// that decodes as `DecodeError::Foreign` with.
pub fn not_served(frame_type: wire::FrameType) -> (ErrorCode, String) {
    (
        ErrorCode::InvalidArgument,
        format!(
            "this is a kelp control plane, not a broker: a {frame_type:?} is not a control-plane \
             request; send it to a broker (kelp serve)"
        ),
    )
}

/// Why a command sent to a broker was not done, as
/// [`ClusterService::handle_command_done`] takes it. Whatever the cause,
/// the broker is resynchronised; the variants say what happened. The core
/// names no I/O type: the driver maps its transport's errors (and its own
/// failures to hand a command on) into the last two variants, keeping them
/// as the source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandFailed {
    /// No result came within the command timeout (the state machine's own
    /// verdict; a late result is then ignored).
    #[error("no result within {timeout_ms} ms")]
    TimedOut {
        /// The timeout.
        timeout_ms: u64,
    },
    /// The broker answered the command with an error.
    #[error("broker {address} refused: {code:?}: {message}")]
    Refused {
        /// The address the command went to.
        address: String,
        /// The broker's error code.
        code: ErrorCode,
        /// The broker's message.
        message: String,
    },
    /// The command or its answer was lost on the way (no connection, a
    /// broken one, a bad answer): the broker may or may not have applied
    /// it. The source is the driver's transport error.
    #[error(transparent)]
    Lost(Box<dyn std::error::Error + Send + Sync>),
    /// The driver could not hand the command to what sends it: it never
    /// left this process. The source is the driver's reason.
    #[error(transparent)]
    NotSent(Box<dyn std::error::Error + Send + Sync>),
}

/// Who waits for an answer: chosen by the driver, handed back with the
/// answer by [`ClusterService::poll_answer`].
pub type AnswerToken = u64;

/// A command for the driver to send to a broker and report on with
/// [`ClusterService::handle_command_done`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingCommand {
    /// The broker.
    pub broker: BrokerId,
    /// Its shard 0 TCP address.
    pub address: String,
    /// The command's id, to hand back with its result.
    pub id: CommandId,
    /// What to send.
    pub request: CommandRequest,
}

/// The deliveries of one topic name.
#[derive(Debug, Default)]
struct TopicDeliveries {
    /// Deliveries in commit order; the front one is being carried out
    /// until it is released.
    queue: VecDeque<u64>,
    /// The latest layout safe to send any broker: every seal of the
    /// changes up to it completed (done, or failed and resynced).
    safe: Option<Snapshot>,
    /// Versions below this belong to a deleted topic of the same name.
    floor: u64,
}

/// What a forgotten broker was due, kept in case it registers again.
#[derive(Debug, Default)]
struct DepartedDue {
    /// Its [`BrokerQueue::layouts_due`]: a resync never sends it an older
    /// layout than one it may hold.
    layouts: HashMap<TopicName, Snapshot>,
    /// Its [`BrokerQueue::drops_due`], and the topics deleted since whose
    /// layout it may hold: its resync drops them first.
    drops: BTreeSet<TopicName>,
    /// Its [`BrokerQueue::refusals_due`]: its resync refuses those writes
    /// before it sends older layouts.
    refusals: HashMap<TopicName, Snapshot>,
}

/// An answer waiting for deliveries to be released.
#[derive(Debug)]
struct Gate {
    token: AnswerToken,
    /// Set once the request is handled (before any delivery can release).
    answer: Option<Response<'static>>,
    deliveries_left: usize,
}

/// The state machine (see the module docs).
#[derive(Debug)]
pub struct ClusterService {
    cluster: Cluster,
    /// Where changes are committed.
    store: Box<dyn StateStore>,
    /// Where chunk files and seal markers are.
    filer: Arc<dyn Filer>,
    /// What `Registered` tells brokers: the filer's absolute path.
    filer_location: String,
    /// The broker records in the store, as last written or loaded.
    recorded: BTreeMap<BrokerId, BrokerInfo>,
    /// Each broker's shard addresses as it registered them (kept while its
    /// queue is, so a leaving broker's seals still find it).
    addresses: BTreeMap<BrokerId, Vec<ShardAddress>>,
    /// Each segment's next offset and first append time, from the latest
    /// load report that named it (sealed segments keep their last).
    next_offsets: HashMap<(TopicName, SegmentId), (u64, Option<u64>, u64)>,
    /// Topics changed in the core whose persisting failed; retried every
    /// tick, and not sent to brokers until persisted.
    unpersisted: BTreeSet<TopicName>,
    /// Segments sealed while their owner was gone whose fence and marker
    /// could not be written yet (the filer failed), with their seal epoch:
    /// retried every tick. Readers wait at their end until it is written.
    unfenced: BTreeMap<(TopicName, SegmentId), u32>,
    /// Segments sealed while their owner was gone that a follower seals
    /// from its copy, until their marker is there or the control plane
    /// gives up on the follower (`give_up_on_sealers`).
    sealing_followers: BTreeMap<(TopicName, SegmentId), SealerWait>,
    /// The highest broker id ever seen (registrations, topics).
    broker_id_max: Option<u32>,
    /// A command with no result after this long has failed.
    command_timeout_ms: u64,
    /// The latest `now_ms` of any input (stamps commands sent).
    now_ms: u64,
    /// Ids of deliveries, gates, commands and snapshot versions.
    next_id: u64,
    queues: BTreeMap<BrokerId, BrokerQueue>,
    /// What brokers forgotten (dead or left) were due: handed back if the
    /// broker registers again, since one that was only stalled still holds
    /// what it was sent. Kept while it names anything.
    departed_due: BTreeMap<BrokerId, DepartedDue>,
    /// Brokers whose queue may have a command to send now.
    sendable: BTreeSet<BrokerId>,
    deliveries: BTreeMap<u64, Delivery>,
    topic_deliveries: HashMap<TopicName, TopicDeliveries>,
    gates: HashMap<u64, Gate>,
    /// Deliveries whose current step may have completed.
    to_advance: VecDeque<u64>,
    /// At most one per request handled, drained after every input.
    answers: VecDeque<(AnswerToken, Response<'static>)>,
    /// Actions decided since this state machine was built (counted where
    /// each is carried out: `execute`, and a topic's creation).
    actions: ActionCounts,
}

/// A segment's sealer being waited for (`ClusterService::sealing_followers`).
#[derive(Debug, Clone, Copy)]
struct SealerWait {
    /// The follower's broker.
    by: BrokerId,
    /// The segment's seal epoch.
    epoch: u32,
    /// Since when the wait counts: the first tick that saw it, and again
    /// at each tick its topic was not committed yet or the filer did not
    /// answer. `None` until a tick.
    since_ms: Option<u64>,
}

/// Actions a control plane decided, by kind (its metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActionCounts {
    /// Topics created.
    pub topics_created: u64,
    /// Topics deleted.
    pub topics_deleted: u64,
    /// Segments split, whatever the cause.
    pub splits: u64,
    /// Pairs of segments merged.
    pub merges: u64,
    /// Segments moved to another broker or shard (a dead or leaving
    /// broker's, the rebalancer's, an operator's).
    pub moves: u64,
    /// Changes of open segments' followers (one lost with its broker and
    /// replaced).
    pub follower_changes: u64,
}

impl ActionCounts {
    fn count(&mut self, action: &Action) {
        let n = match action {
            Action::CreateTopic { .. } => &mut self.topics_created,
            Action::DeleteTopic { .. } => &mut self.topics_deleted,
            Action::Split { .. } => &mut self.splits,
            Action::Merge { .. } => &mut self.merges,
            Action::Move { .. } => &mut self.moves,
            Action::Followers { .. } => &mut self.follower_changes,
        };
        *n += 1;
    }
}

impl ClusterService {
    /// Load every topic and broker record in `store` and build the core
    /// over them; `filer` is where the topics' data is. `filer_location`
    /// is what registering brokers are told to use; a command with no
    /// result after `command_timeout_ms` counts as failed (the driver's
    /// link should time out first).
    pub fn open(
        store: Box<dyn StateStore>,
        filer: Arc<dyn Filer>,
        filer_location: String,
        config: ClusterConfig,
        command_timeout_ms: u64,
    ) -> Result<ClusterService, ControlError> {
        let stored = store.load()?;
        let owners = stored
            .topics
            .iter()
            .flat_map(|t| t.segments().iter().filter_map(|s| s.broker));
        let broker_id_max = owners
            .chain(stored.brokers.iter().map(|b| b.id))
            .map(|b| b.0)
            .max();
        let cluster = Cluster::from_topics(config, stored.topics)?;
        let mut service = ClusterService {
            cluster,
            store,
            filer,
            filer_location,
            recorded: stored.brokers.into_iter().map(|b| (b.id, b)).collect(),
            addresses: BTreeMap::new(),
            next_offsets: HashMap::new(),
            unpersisted: BTreeSet::new(),
            unfenced: BTreeMap::new(),
            sealing_followers: BTreeMap::new(),
            broker_id_max,
            command_timeout_ms: command_timeout_ms.max(1),
            now_ms: 0,
            next_id: 1,
            queues: BTreeMap::new(),
            departed_due: BTreeMap::new(),
            sendable: BTreeSet::new(),
            deliveries: BTreeMap::new(),
            topic_deliveries: HashMap::new(),
            gates: HashMap::new(),
            to_advance: VecDeque::new(),
            answers: VecDeque::new(),
            actions: ActionCounts::default(),
        };
        // Segments a follower was to seal: waited for again (the marker of
        // each is looked for once its wait is over, which ends the wait of
        // those sealed already).
        for topic in service.cluster.topics() {
            for segment in topic.segments().iter().filter(|s| !s.is_open()) {
                if let Some(by) = segment.sealer {
                    service.sealing_followers.insert(
                        (topic.name().clone(), segment.id),
                        SealerWait {
                            by,
                            epoch: segment.epoch,
                            since_ms: None,
                        },
                    );
                }
            }
        }
        let names: Vec<TopicName> = service.cluster.topics().map(|t| t.name().clone()).collect();
        for name in names {
            let snapshot = service.snapshot(&name);
            service.topic_deliveries.entry(name).or_default().safe = Some(snapshot);
        }
        Ok(service)
    }

    /// The core, for read-only queries.
    /// Actions decided since this state machine was built.
    pub fn action_counts(&self) -> ActionCounts {
        self.actions
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Whether `broker` is due a resync (or in one).
    pub fn needs_resync(&self, broker: BrokerId) -> bool {
        self.queues
            .get(&broker)
            .is_some_and(BrokerQueue::needs_resync)
    }

    /// Whether commands may still go to `broker` (it is live, or has
    /// commands queued or in flight): the driver keeps its sender while
    /// this holds.
    pub fn has_broker_queue(&self, broker: BrokerId) -> bool {
        self.queues.contains_key(&broker)
    }

    /// Actions being carried out.
    pub fn deliveries_pending(&self) -> usize {
        self.deliveries.len()
    }

    /// The next answer to hand back.
    pub fn poll_answer(&mut self) -> Option<(AnswerToken, Response<'static>)> {
        self.answers.pop_front()
    }

    /// Handle one request; its answer comes out of
    /// [`poll_answer`](Self::poll_answer) with `token`, at once or once the
    /// commands it waits for completed.
    pub fn handle_request(&mut self, now_ms: u64, token: AnswerToken, request: ControlPortRequest) {
        self.now_ms = self.now_ms.max(now_ms);
        match self.try_handle(now_ms, token, request) {
            Ok(Some(answer)) => self.answers.push_back((token, answer)),
            Ok(None) => {}
            Err((code, message)) => self
                .answers
                .push_back((token, Response::Error { code, message })),
        }
        self.run_deliveries();
    }

    /// The result of command `id` sent to `broker`. One for a command no
    /// longer in flight (already timed out, or the broker forgotten) is
    /// ignored.
    pub fn handle_command_done(
        &mut self,
        now_ms: u64,
        broker: BrokerId,
        id: CommandId,
        result: Result<(), CommandFailed>,
    ) {
        self.now_ms = self.now_ms.max(now_ms);
        let Some(queue) = self.queues.get_mut(&broker) else {
            return;
        };
        if !matches!(&queue.in_flight, Some((c, _)) if c.id == id) {
            log::debug!("broker {broker}: result of command {} ignored", id.0);
            return;
        }
        let Some((command, _)) = queue.in_flight.take() else {
            return;
        };
        if let (Ok(()), CommandRequest::DropTopic { topic }) = (&result, &command.request) {
            // Done: its layouts are gone from the broker, unless another
            // drop of the name is still to go (the name was created and
            // deleted again meanwhile).
            if let Ok(name) = TopicName::parse(topic) {
                if !queue.drop_queued(&name) {
                    queue.drops_due.remove(&name);
                }
            }
        }
        self.complete(command.origin);
        if let Err(e) = result {
            log::warn!("command to broker {broker}: {e}; it is resynchronised");
            self.fail_queue(broker);
        }
        self.check_resync(broker);
        self.refresh_sendable(broker);
        self.run_deliveries();
    }

    /// The driver did not run for `stalled_ms` up to `now_ms` (a filer or
    /// state-store call blocked it, or the process was not scheduled):
    /// that time counts neither as brokers' silence
    /// ([`Cluster::handle_stall`]), nor against commands in flight (their
    /// results may be waiting in the driver's queue), nor against sealers
    /// being waited for.
    pub fn handle_stall(&mut self, now_ms: u64, stalled_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        self.cluster.handle_stall(now_ms, stalled_ms);
        let later = |t: u64| crate::membership::excused(t, now_ms, stalled_ms);
        for queue in self.queues.values_mut() {
            if let Some((_, sent_ms)) = &mut queue.in_flight {
                *sent_ms = later(*sent_ms);
            }
        }
        for wait in self.sealing_followers.values_mut() {
            wait.since_ms = wait.since_ms.map(later);
        }
    }

    /// The periodic step: time out commands, retry unpersisted topics, the
    /// core's tick (its actions carried out), and forget brokers gone
    /// whose queues are empty.
    pub fn handle_tick(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        let expired: Vec<(BrokerId, CommandId)> = self
            .queues
            .iter()
            .filter_map(|(broker, q)| match &q.in_flight {
                Some((c, sent_ms))
                    if now_ms.saturating_sub(*sent_ms) >= self.command_timeout_ms =>
                {
                    Some((*broker, c.id))
                }
                _ => None,
            })
            .collect();
        for (broker, id) in expired {
            let timeout_ms = self.command_timeout_ms;
            self.handle_command_done(
                now_ms,
                broker,
                id,
                Err(CommandFailed::TimedOut { timeout_ms }),
            );
        }
        for ((topic, segment), epoch) in std::mem::take(&mut self.unfenced) {
            if self.cluster.topic(&topic).is_some() {
                self.fence(&topic, segment, epoch);
            }
        }
        for name in std::mem::take(&mut self.unpersisted) {
            let Some(topic) = self.cluster.topic(&name).cloned() else {
                continue;
            };
            if let Err(e) = self.persist(&topic) {
                log::error!("persisting topic {name} again failed: {e}");
                self.unpersisted.insert(name);
                continue;
            }
            // Nothing of it was sent: resyncs carry it from now on, unless
            // a later change of it is being delivered (that one will).
            let idle = self
                .topic_deliveries
                .get(&name)
                .is_none_or(|t| t.queue.is_empty());
            if idle {
                let snapshot = self.snapshot(&name);
                self.topic_deliveries.entry(name).or_default().safe = Some(snapshot);
            }
        }
        if self.deliveries.len() >= DELIVERIES_PENDING_MAX {
            log::warn!(
                "{} actions still being carried out: the core's tick is put off",
                self.deliveries.len()
            );
        } else {
            let actions = self.cluster.handle_tick(now_ms);
            for action in &actions {
                self.log_followers_changed(action);
            }
            self.execute_all(&actions, None);
        }
        self.give_up_on_sealers(now_ms);
        self.forget_departed();
        self.prune_departed_due();
        let cluster = &self.cluster;
        self.next_offsets.retain(|(topic, segment), _| {
            cluster
                .topic(topic)
                .and_then(|t| t.segment(*segment))
                .is_some()
        });
        self.topic_deliveries
            .retain(|name, t| !t.queue.is_empty() || cluster.topic(name).is_some());
        self.run_deliveries();
    }

    /// The next command to send. Its result must come back through
    /// [`handle_command_done`](Self::handle_command_done); until it does
    /// (or it times out), nothing else goes to that broker.
    pub fn poll_command(&mut self) -> Option<OutgoingCommand> {
        while let Some(broker) = self.sendable.pop_first() {
            while let Some(command) = self.next_of(broker) {
                let Some(address) = self.command_address(broker) else {
                    log::warn!("no address for broker {broker}; it is resynchronised");
                    self.complete(command.origin);
                    self.fail_queue(broker);
                    self.check_resync(broker);
                    self.run_deliveries();
                    continue;
                };
                let now_ms = self.now_ms;
                if let Some(queue) = self.queues.get_mut(&broker) {
                    queue.in_flight = Some((command.clone(), now_ms));
                }
                return Some(OutgoingCommand {
                    broker,
                    address,
                    id: command.id,
                    request: command.request,
                });
            }
            self.check_resync(broker);
            self.run_deliveries();
        }
        None
    }

    /// Take the next command of `broker`'s queue if none is in flight: a
    /// resync's next topic first, then what is queued.
    fn next_of(&mut self, broker: BrokerId) -> Option<QueuedCommand> {
        loop {
            let queue = self.queues.get_mut(&broker)?;
            if queue.in_flight.is_some() {
                return None;
            }
            let next = match &mut queue.resync {
                ResyncState::Running { topics, .. } => topics.pop_front(),
                _ => None,
            };
            let Some((name, what)) = next else {
                return queue.queued.pop_front();
            };
            if what == ResyncNext::Drop {
                // The broker may hold a layout of the name from before a
                // delete: drop it, then send the topic's layout.
                let topic = name.to_string();
                if let ResyncState::Running { topics, .. } = &mut queue.resync {
                    topics.push_front((name, ResyncNext::Refusal));
                }
                return Some(QueuedCommand {
                    id: CommandId(self.next_id()),
                    request: CommandRequest::DropTopic { topic },
                    origin: Origin::Resync,
                });
            }
            if self.unpersisted.contains(&name) {
                if let Some(ResyncState::Running { complete, .. }) =
                    self.queues.get_mut(&broker).map(|q| &mut q.resync)
                {
                    *complete = false;
                }
                continue;
            }
            let Some(snapshot) = self.resync_snapshot(broker, &name) else {
                continue;
            };
            let id = CommandId(self.next_id());
            let queue = self.queues.get_mut(&broker)?;
            let refusal = queue
                .refusals_due
                .get(&name)
                .filter(|r| r.version > snapshot.version)
                .cloned();
            if let (ResyncNext::Refusal, Some(refusal)) = (what, refusal) {
                // Kept due until a layout that covers it is: the refusal
                // may fail too.
                if let ResyncState::Running { topics, .. } = &mut queue.resync {
                    topics.push_front((name, ResyncNext::Layout));
                }
                return Some(QueuedCommand {
                    id,
                    request: refusal.refuse_writes(),
                    origin: Origin::Resync,
                });
            }
            queue.layouts_due.insert(name, snapshot.clone());
            return Some(QueuedCommand {
                id,
                request: snapshot.apply_layout(),
                origin: Origin::Resync,
            });
        }
    }

    /// What a resync sends `broker` for topic `name`: the latest safe
    /// layout, or the latest one due to this broker if newer (a step that
    /// reached it, even one turned away; a broker's layouts never go back);
    /// `None` if the topic is gone or neither exists yet.
    fn resync_snapshot(&self, broker: BrokerId, name: &TopicName) -> Option<Snapshot> {
        self.cluster.topic(name)?;
        let deliveries = self.topic_deliveries.get(name)?;
        let due = self
            .queues
            .get(&broker)
            .and_then(|q| q.layouts_due.get(name))
            .filter(|s| s.version >= deliveries.floor);
        match (deliveries.safe.as_ref(), due) {
            (Some(safe), Some(due)) if due.version > safe.version => Some(due.clone()),
            (Some(safe), _) => Some(safe.clone()),
            (None, due) => due.cloned(),
        }
    }

    fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// `name` as the core has it now, with a fresh version.
    fn snapshot(&mut self, name: &TopicName) -> Snapshot {
        let json = self.topic_json(name);
        let owners = self.owners(self.cluster.topic(name));
        Snapshot {
            version: self.next_id(),
            json: Arc::from(json),
            owners,
        }
    }

    /// The shards of each broker owning an open segment of `topic`, as
    /// they registered (a broker with no known addresses is left out).
    fn owners(&self, topic: Option<&Topic>) -> Arc<[BrokerShards]> {
        let mut brokers: Vec<BrokerId> = topic
            .map(|t| {
                t.segments()
                    .iter()
                    .filter(|s| s.is_open())
                    .filter_map(|s| s.broker)
                    .collect()
            })
            .unwrap_or_default();
        brokers.sort_unstable();
        brokers.dedup();
        brokers
            .into_iter()
            .filter_map(|broker| {
                let shards = self.addresses.get(&broker)?;
                Some(BrokerShards {
                    broker: broker.0,
                    shards: shards.clone(),
                })
            })
            .collect()
    }

    fn refresh_sendable(&mut self, broker: BrokerId) {
        if self
            .queues
            .get(&broker)
            .is_some_and(BrokerQueue::has_sendable)
        {
            self.sendable.insert(broker);
        }
    }

    /// Queue `request` for `broker`; false if it was not queued (no such
    /// broker, or one turning commands away or overflowing: it is
    /// resynchronised instead).
    fn enqueue(
        &mut self,
        broker: BrokerId,
        request: CommandRequest,
        topic: &TopicName,
        snapshot: &Snapshot,
        origin: Origin,
    ) -> bool {
        let live = self.cluster.membership().is_live(broker);
        let Some(queue) = self.queues.get_mut(&broker) else {
            log::warn!("no queue for broker {broker}: not told of topic {topic}");
            return false;
        };
        // Due even if turned away below: the resync then sends it.
        match &request {
            CommandRequest::ApplyLayout { .. } => {
                queue.layouts_due.insert(topic.clone(), snapshot.clone());
                if queue
                    .refusals_due
                    .get(topic)
                    .is_some_and(|r| r.version <= snapshot.version)
                {
                    queue.refusals_due.remove(topic);
                }
            }
            // Not the layout, which a resync must not send before the step
            // that applies it (its successors could open before the other
            // sealers refuse): a refusal due, sent ahead of an older one.
            CommandRequest::RefuseWrites { .. } => {
                let newer = queue
                    .refusals_due
                    .get(topic)
                    .is_none_or(|r| r.version < snapshot.version);
                if newer {
                    queue.refusals_due.insert(topic.clone(), snapshot.clone());
                }
            }
            CommandRequest::DropTopic { .. } => {
                queue.layouts_due.remove(topic);
                queue.refusals_due.remove(topic);
                queue.drops_due.insert(topic.clone());
            }
        }
        if live && queue.turns_commands_away() {
            return false;
        }
        if queue.is_full() {
            log::warn!(
                "broker {broker}: {COMMANDS_QUEUED_PER_BROKER_MAX} commands queued; \
                 it is resynchronised instead"
            );
            self.fail_queue(broker);
            return false;
        }
        let id = CommandId(self.next_id);
        self.next_id += 1;
        queue.queued.push_back(QueuedCommand {
            id,
            request,
            origin,
        });
        self.refresh_sendable(broker);
        true
    }

    /// A command of `origin` completed (done or not).
    fn complete(&mut self, origin: Origin) {
        if let Origin::Delivery(id) = origin {
            if let Some(delivery) = self.deliveries.get_mut(&id) {
                delivery.commands_left = delivery.commands_left.saturating_sub(1);
                if delivery.commands_left == 0 {
                    self.to_advance.push_back(id);
                }
            }
        }
    }

    /// `broker` missed a command: empty its queue (those commands count as
    /// completed) and resynchronise it on its next report. A resync under
    /// way ends (its waiting reports are answered).
    fn fail_queue(&mut self, broker: BrokerId) {
        let Some(queue) = self.queues.get_mut(&broker) else {
            return;
        };
        let flushed: Vec<QueuedCommand> = queue.queued.drain(..).collect();
        let before = std::mem::replace(
            &mut queue.resync,
            ResyncState::Awaited {
                after_failure: true,
            },
        );
        for command in flushed {
            self.complete(command.origin);
        }
        if let ResyncState::Running { waiters, .. } = before {
            for token in waiters {
                self.answers.push_back((token, Response::Done));
            }
        }
    }

    /// If `broker`'s resync has sent everything and nothing of it is in
    /// flight, end it and answer the reports waiting for it.
    fn check_resync(&mut self, broker: BrokerId) {
        let Some(queue) = self.queues.get_mut(&broker) else {
            return;
        };
        if !queue.resync_finished() {
            return;
        }
        let ResyncState::Running {
            complete, waiters, ..
        } = std::mem::replace(&mut queue.resync, ResyncState::Synced)
        else {
            return;
        };
        if complete {
            log::info!("broker {broker} resynchronised");
        } else {
            queue.resync = ResyncState::Awaited {
                after_failure: false,
            };
        }
        for token in waiters {
            self.answers.push_back((token, Response::Done));
        }
    }

    /// Advance every delivery whose step may have completed.
    fn run_deliveries(&mut self) {
        while let Some(id) = self.to_advance.pop_front() {
            self.advance(id);
        }
    }

    /// Move delivery `id` on through its steps while they complete at once
    /// (see [`crate::delivery`]).
    fn advance(&mut self, id: u64) {
        loop {
            let Some(delivery) = self.deliveries.get_mut(&id) else {
                return;
            };
            if delivery.commands_left > 0 {
                return;
            }
            if !delivery.drop && !delivery.seals_pending() {
                let (topic, snapshot) = (delivery.topic.clone(), delivery.snapshot.clone());
                let t = self.topic_deliveries.entry(topic).or_default();
                let newer = t.safe.as_ref().is_none_or(|s| s.version < snapshot.version);
                if snapshot.version >= t.floor && newer {
                    t.safe = Some(snapshot);
                }
            }
            let Some(delivery) = self.deliveries.get_mut(&id) else {
                return;
            };
            if !delivery.released && delivery.releasable() {
                delivery.released = true;
                let (topic, gate) = (delivery.topic.clone(), delivery.gate);
                self.release(id, &topic, gate);
            }
            let Some(delivery) = self.deliveries.get_mut(&id) else {
                return;
            };
            let Some(step) = delivery.steps.pop_front() else {
                self.deliveries.remove(&id);
                return;
            };
            let topic = delivery.topic.clone();
            let snapshot = delivery.snapshot.clone();
            let mut told = std::mem::take(&mut delivery.told);
            // A refusal is not the layout: its brokers get that next.
            let refusal = matches!(step, Step::Refuse(_));
            let request = if delivery.drop {
                CommandRequest::DropTopic {
                    topic: topic.to_string(),
                }
            } else if refusal {
                snapshot.refuse_writes()
            } else {
                snapshot.apply_layout()
            };
            let brokers = match step {
                Step::Refuse(b) | Step::Apply { brokers: b, .. } => b,
                Step::InformOthers => self.live_brokers(),
                // Every broker that may hold a layout of it, not only the
                // owners of its open segments: informed brokers hold one
                // too, and one left in place could make a broker ignore the
                // layouts of a topic created again under the name.
                Step::Drop(mut b) => {
                    b.extend(self.live_brokers());
                    b.extend(
                        self.queues
                            .iter()
                            .filter(|(_, q)| q.layouts_due.contains_key(&topic))
                            .map(|(id, _)| *id),
                    );
                    b
                }
            };
            let mut queued = 0;
            for broker in brokers {
                if told.contains(&broker) {
                    continue;
                }
                if !refusal {
                    told.push(broker);
                }
                if self.enqueue(
                    broker,
                    request.clone(),
                    &topic,
                    &snapshot,
                    Origin::Delivery(id),
                ) {
                    queued += 1;
                }
            }
            if let Some(delivery) = self.deliveries.get_mut(&id) {
                delivery.told = told;
                delivery.commands_left += queued;
            }
        }
    }

    /// Delivery `id` of `topic` is released: answer what waited for it and
    /// start the topic's next delivery.
    fn release(&mut self, id: u64, topic: &TopicName, gate: Option<u64>) {
        if let Some(gate_id) = gate {
            if let Some(g) = self.gates.get_mut(&gate_id) {
                g.deliveries_left = g.deliveries_left.saturating_sub(1);
                if g.deliveries_left == 0 {
                    self.close_gate(gate_id);
                }
            }
        }
        if let Some(t) = self.topic_deliveries.get_mut(topic) {
            t.queue.retain(|d| *d != id);
            if let Some(next) = t.queue.front() {
                self.to_advance.push_back(*next);
            }
        }
    }

    /// A gate for `token`'s answer, to be given with
    /// [`set_gate_answer`](Self::set_gate_answer).
    fn open_gate(&mut self, token: AnswerToken) -> u64 {
        let id = self.next_id();
        self.gates.insert(
            id,
            Gate {
                token,
                answer: None,
                deliveries_left: 0,
            },
        );
        id
    }

    /// The answer of gate `id`, sent once its deliveries are released (at
    /// once if it has none).
    fn set_gate_answer(&mut self, id: u64, answer: Response<'static>) {
        if let Some(gate) = self.gates.get_mut(&id) {
            gate.answer = Some(answer);
        }
        self.close_gate(id);
    }

    fn close_gate(&mut self, id: u64) {
        let ready = self
            .gates
            .get(&id)
            .is_some_and(|g| g.deliveries_left == 0 && g.answer.is_some());
        if !ready {
            return;
        }
        if let Some(Gate {
            token,
            answer: Some(answer),
            ..
        }) = self.gates.remove(&id)
        {
            self.answers.push_back((token, answer));
        }
    }

    /// Queue the delivery of `action`, the topic standing as `snapshot`
    /// right after it; `gate` waits for its release.
    fn deliver(&mut self, action: &Action, snapshot: Snapshot, gate: Option<u64>) {
        let id = self.next_id();
        if let Some(g) = gate.and_then(|g| self.gates.get_mut(&g)) {
            g.deliveries_left += 1;
        }
        let followed = self.opens_followed(action);
        let delivery = Delivery::new(action, snapshot, gate, followed);
        let t = self
            .topic_deliveries
            .entry(delivery.topic.clone())
            .or_default();
        t.queue.push_back(id);
        if t.queue.len() == 1 {
            self.to_advance.push_back(id);
        }
        self.deliveries.insert(id, delivery);
    }

    /// Forget brokers that are no longer members and have nothing queued
    /// or in flight (a leaving broker's seals are sent first).
    fn forget_departed(&mut self) {
        let departed: Vec<BrokerId> = self
            .queues
            .iter()
            .filter(|(id, q)| !self.cluster.membership().is_live(**id) && q.is_idle())
            .map(|(id, _)| *id)
            .collect();
        for broker in departed {
            if let Some(queue) = self.queues.remove(&broker) {
                if !queue.layouts_due.is_empty()
                    || !queue.drops_due.is_empty()
                    || !queue.refusals_due.is_empty()
                {
                    let due = DepartedDue {
                        layouts: queue.layouts_due,
                        drops: queue.drops_due,
                        refusals: queue.refusals_due,
                    };
                    self.departed_due.insert(broker, due);
                }
                if let ResyncState::Running { waiters, .. } = queue.resync {
                    for token in waiters {
                        self.answers.push_back((token, Response::Done));
                    }
                }
            }
            self.addresses.remove(&broker);
            self.sendable.remove(&broker);
        }
    }

    /// Keep what departed brokers were due consistent with the topics: a
    /// layout of a topic gone (deleted, or one of a name deleted since)
    /// becomes a drop due. A layout the topic's safe one caught up with is
    /// kept too: the broker may still hold it, and a resync sends the newer
    /// of the two anyway.
    fn prune_departed_due(&mut self) {
        let topic_deliveries = &self.topic_deliveries;
        // Of a topic gone: a drop due instead (the broker may hold it).
        let gone = |due: &HashMap<TopicName, Snapshot>| -> Vec<TopicName> {
            due.iter()
                .filter(|(name, snapshot)| {
                    topic_deliveries
                        .get(*name)
                        .is_none_or(|t| snapshot.version < t.floor)
                })
                .map(|(name, _)| name.clone())
                .collect()
        };
        for due in self.departed_due.values_mut() {
            for name in gone(&due.layouts) {
                due.layouts.remove(&name);
                due.drops.insert(name);
            }
            for name in gone(&due.refusals) {
                due.refusals.remove(&name);
                due.drops.insert(name);
            }
        }
        self.departed_due.retain(|_, due| {
            !due.layouts.is_empty() || !due.drops.is_empty() || !due.refusals.is_empty()
        });
    }

    /// Refuse a change while too many are being carried out.
    fn room_for_a_change(&self) -> Result<(), (ErrorCode, String)> {
        if self.deliveries.len() >= DELIVERIES_PENDING_MAX {
            return Err((
                ErrorCode::Busy,
                format!(
                    "{} changes are still being carried out on brokers; try again",
                    self.deliveries.len()
                ),
            ));
        }
        Ok(())
    }

    /// Carry out actions the core returned, in order (see the module docs);
    /// `gate` waits for them all. Failures are logged; the brokers
    /// concerned are marked for resync.
    fn execute_all(&mut self, actions: &[Action], gate: Option<u64>) {
        let states = states_after(&self.cluster, actions);
        for (action, state) in actions.iter().zip(states) {
            if let Err(e) = self.execute(action, state.as_ref(), gate) {
                log::error!("carrying out {action:?}: {e}");
            }
        }
    }

    fn try_handle(
        &mut self,
        now_ms: u64,
        token: AnswerToken,
        request: ControlPortRequest,
    ) -> Result<Option<Response<'static>>, (ErrorCode, String)> {
        match request {
            // A connection answers its own authentication.
            ControlPortRequest::Auth(_) => Err((
                ErrorCode::Internal,
                "an authentication step reached the control plane's core".to_owned(),
            )),
            ControlPortRequest::Admin(request) => self.try_admin(now_ms, token, request),
            ControlPortRequest::Membership(request) => self.try_membership(now_ms, token, request),
        }
    }

    fn try_admin(
        &mut self,
        now_ms: u64,
        token: AnswerToken,
        request: AdminRequest,
    ) -> Result<Option<Response<'static>>, (ErrorCode, String)> {
        let answer = match request {
            AdminRequest::CreateTopic {
                topic,
                segments,
                replicas,
            } => {
                let name = parse_name(&topic)?;
                self.room_for_a_change()?;
                let action = self
                    .cluster
                    .create_topic(now_ms, &name, segments, replicas, None)
                    .map_err(error_answer)?;
                let created = self.cluster.topic(&name).cloned();
                // Leftovers of a delete interrupted after its commit point
                // belong to no live topic: clear them first.
                let persisted = match created {
                    Some(topic) => self
                        .filer
                        .delete(&filer_layout::topic_prefix(&name))
                        .map_err(ControlError::from)
                        .and_then(|()| self.store.put_topic(&topic)),
                    None => Err(ControlError::TopicNotFound(name.to_string())),
                };
                if let Err(e) = persisted {
                    // Nothing was told to brokers: undo in the core.
                    let _ = self.cluster.delete_topic(now_ms, &name);
                    return Err(error_answer(e));
                }
                self.actions.count(&action);
                let answer = Response::Topic(self.describe(now_ms, &name)?);
                let gate = self.open_gate(token);
                let snapshot = self.snapshot(&name);
                self.deliver(&action, snapshot, Some(gate));
                self.set_gate_answer(gate, answer);
                return Ok(None);
            }
            AdminRequest::DeleteTopic { topic } => {
                let name = parse_name(&topic)?;
                if self.cluster.topic(&name).is_none() {
                    return Err(error_answer(ControlError::TopicNotFound(name.to_string())));
                }
                self.room_for_a_change()?;
                let prefix = filer_layout::topic_prefix(&name);
                self.store.delete_topic(&name).map_err(error_answer)?;
                let action = self
                    .cluster
                    .delete_topic(now_ms, &name)
                    .map_err(error_answer)?;
                self.unpersisted.remove(&name);
                if let Err(e) = self.filer.delete(&prefix) {
                    // Deleted already; the leftovers go when the name is
                    // created again.
                    log::warn!("clearing the files of deleted topic {name}: {e}");
                }
                let gate = self.open_gate(token);
                // A delete has nothing to persist: this cannot fail.
                let _ = self.execute(&action, None, Some(gate));
                self.set_gate_answer(gate, Response::Done);
                return Ok(None);
            }
            AdminRequest::ListTopics => Response::TopicList {
                topics: self
                    .cluster
                    .topics()
                    .map(|t| t.name().to_string())
                    .collect(),
            },
            AdminRequest::DescribeTopic { topic } => {
                Response::Topic(self.describe(now_ms, &parse_name(&topic)?)?)
            }
            AdminRequest::SplitSegment {
                topic,
                segment,
                pieces,
            } => {
                let name = parse_name(&topic)?;
                self.room_for_a_change()?;
                let action = self
                    .cluster
                    .split_segment(now_ms, &name, SegmentId(segment), pieces)
                    .map_err(error_answer)?;
                return self.change_answer(now_ms, token, &name, &action);
            }
            AdminRequest::MergeSegments { topic, a, b } => {
                let name = parse_name(&topic)?;
                self.room_for_a_change()?;
                let action = self
                    .cluster
                    .merge_segments(now_ms, &name, SegmentId(a), SegmentId(b))
                    .map_err(error_answer)?;
                return self.change_answer(now_ms, token, &name, &action);
            }
            AdminRequest::MoveSegment { topic, segment, to } => {
                let name = parse_name(&topic)?;
                self.room_for_a_change()?;
                let action = self
                    .cluster
                    .move_segment(now_ms, &name, SegmentId(segment), to.map(BrokerId))
                    .map_err(error_answer)?;
                return self.change_answer(now_ms, token, &name, &action);
            }
            AdminRequest::SetPolicy { topic, policy } => {
                let name = parse_name(&topic)?;
                let policy = parse_policy(&policy)?;
                let before = self
                    .cluster
                    .topic(&name)
                    .map(|t| t.policy().copied())
                    .ok_or_else(|| error_answer(ControlError::TopicNotFound(name.to_string())))?;
                self.cluster
                    .set_policy(&name, policy)
                    .map_err(error_answer)?;
                if let Some(topic) = self.cluster.topic(&name).cloned() {
                    if let Err(e) = self.persist(&topic) {
                        // The old policy admitted the topic before: restoring
                        // it cannot fail.
                        let _ = self.cluster.set_policy(&name, before);
                        return Err(error_answer(e));
                    }
                }
                Response::Topic(self.describe(now_ms, &name)?)
            }
            AdminRequest::ListBrokers => Response::Brokers {
                brokers: self.broker_statuses(now_ms),
            },
        };
        Ok(Some(answer))
    }

    /// A broker's registration, load report or goodbye: each answered
    /// later, once what it set off is done.
    fn try_membership(
        &mut self,
        now_ms: u64,
        token: AnswerToken,
        request: MembershipRequest,
    ) -> Result<Option<Response<'static>>, (ErrorCode, String)> {
        match request {
            MembershipRequest::RegisterBroker {
                id,
                shards,
                capacity_bytes_per_s,
                capacity_records_per_s,
            } => self.register(
                now_ms,
                token,
                id,
                shards,
                capacity_bytes_per_s,
                capacity_records_per_s,
            ),
            MembershipRequest::LoadReport { broker, segments } => {
                self.load_report(now_ms, token, BrokerId(broker), &segments)
            }
            MembershipRequest::LeaveBroker { broker } => {
                let id = BrokerId(broker);
                let actions = self.cluster.handle_leave(now_ms, id).map_err(|e| match e {
                    ControlError::BrokerNotFound(_) => not_registered(id),
                    e => error_answer(e),
                })?;
                if self.recorded.remove(&id).is_some() {
                    if let Err(e) = self.store.delete_broker(id) {
                        // Its id stays taken; nothing else depends on it.
                        log::warn!("forgetting the record of broker {id}: {e}");
                    }
                }
                // Answered once its seals (and the successors' opens) are
                // done; its queue and address go when they are sent.
                let gate = self.open_gate(token);
                self.execute_all(&actions, Some(gate));
                self.set_gate_answer(gate, Response::Done);
                Ok(None)
            }
        }
    }

    fn register(
        &mut self,
        now_ms: u64,
        token: AnswerToken,
        id: Option<u32>,
        shards: Vec<ShardAddress>,
        capacity_bytes_per_s: u64,
        capacity_records_per_s: u64,
    ) -> Result<Option<Response<'static>>, (ErrorCode, String)> {
        let id = match id {
            Some(id) => id,
            None => {
                let live_max = self.live_brokers().iter().map(|b| b.0).max();
                match self.broker_id_max.max(live_max) {
                    None => 0,
                    Some(max) => max
                        .checked_add(1)
                        .ok_or_else(|| (ErrorCode::Busy, "broker ids are exhausted".to_owned()))?,
                }
            }
        };
        let info = BrokerInfo {
            id: BrokerId(id),
            shard_addresses: shards.iter().map(|s| s.tcp.clone()).collect(),
            capacity: Capacity {
                bytes_per_s: capacity_bytes_per_s,
                records_per_s: capacity_records_per_s,
            },
        };
        // The id is taken before the broker hears it (a new leader must not
        // give it to another); a record as stored is not written again.
        info.validate()
            .map_err(|e| error_answer(ControlError::InvalidBroker(e)))?;
        if self.recorded.get(&info.id) != Some(&info) {
            self.store.put_broker(&info).map_err(error_answer)?;
            self.recorded.insert(info.id, info.clone());
        }
        let actions = self
            .cluster
            .handle_register(now_ms, info)
            .map_err(error_answer)?;
        let broker = BrokerId(id);
        self.broker_id_max = self.broker_id_max.max(Some(id));
        self.addresses.insert(broker, shards);
        let departed_due = self.departed_due.remove(&broker);
        let queue = self.queues.entry(broker).or_insert_with(|| {
            let mut queue = BrokerQueue::registered();
            let due = departed_due.unwrap_or_default();
            queue.layouts_due = due.layouts;
            queue.drops_due = due.drops;
            queue.refusals_due = due.refusals;
            queue
        });
        let before = std::mem::replace(
            &mut queue.resync,
            ResyncState::Awaited {
                after_failure: false,
            },
        );
        if let ResyncState::Running { waiters, .. } = before {
            for waiter in waiters {
                self.answers.push_back((waiter, Response::Done));
            }
        }
        log::info!("broker {id} registered");
        // The broker learns its id and filer before it is told to open
        // anything: the answer goes out ahead of the commands below.
        self.answers.push_back((
            token,
            Response::Registered {
                id,
                filer: self.filer_location.clone(),
            },
        ));
        self.execute_all(&actions, None);
        Ok(None)
    }

    fn load_report(
        &mut self,
        now_ms: u64,
        token: AnswerToken,
        broker: BrokerId,
        segments: &[SegmentLoadReport],
    ) -> Result<Option<Response<'static>>, (ErrorCode, String)> {
        let mut loads = Vec::with_capacity(segments.len());
        for report in segments {
            // A name that does not parse names no topic: nothing to record.
            let Ok(topic) = TopicName::parse(&report.topic) else {
                continue;
            };
            self.next_offsets.insert(
                (topic.clone(), SegmentId(report.segment)),
                (
                    report.next_offset,
                    report.first_append_ms,
                    report.lost_records,
                ),
            );
            loads.push(SegmentLoad {
                topic,
                segment: SegmentId(report.segment),
                rate: Rate {
                    bytes_per_s: report.bytes_per_s,
                    records_per_s: report.records_per_s,
                },
                followers: report
                    .followers
                    .iter()
                    .map(|f| FollowerLag {
                        broker: BrokerId(f.broker),
                        lag_ms: f.lag_ms,
                    })
                    .collect(),
            });
        }
        self.cluster
            .handle_load_report(now_ms, broker, &loads)
            .map_err(|e| match e {
                ControlError::BrokerNotFound(_) => not_registered(broker),
                e => error_answer(e),
            })?;
        let Some(queue) = self.queues.get_mut(&broker) else {
            return Ok(Some(Response::Done));
        };
        let names: BTreeSet<TopicName> = self
            .cluster
            .topics()
            .map(|t| t.name().clone())
            .chain(queue.drops_due.iter().cloned())
            .collect();
        let topics: VecDeque<(TopicName, ResyncNext)> = names
            .into_iter()
            .map(|name| {
                let next = if queue.drops_due.contains(&name) {
                    ResyncNext::Drop
                } else {
                    ResyncNext::Refusal
                };
                (name, next)
            })
            .collect();
        match &mut queue.resync {
            ResyncState::Synced => return Ok(Some(Response::Done)),
            ResyncState::Running { waiters, .. } => waiters.push(token),
            ResyncState::Awaited { .. } => {
                // Answered once every topic's layout was sent and done (or
                // a command failed).
                queue.resync = ResyncState::Running {
                    topics,
                    complete: true,
                    waiters: vec![token],
                };
            }
        }
        self.refresh_sendable(broker);
        self.check_resync(broker);
        Ok(None)
    }

    /// Persist the change an admin request made, queue its delivery, and
    /// answer with the topic once it is released.
    fn change_answer(
        &mut self,
        now_ms: u64,
        token: AnswerToken,
        name: &TopicName,
        action: &Action,
    ) -> Result<Option<Response<'static>>, (ErrorCode, String)> {
        let state = self.cluster.topic(name).cloned();
        let gate = self.open_gate(token);
        if let Err(e) = self.execute(action, state.as_ref(), Some(gate)) {
            self.gates.remove(&gate);
            return Err(error_answer(e));
        }
        let answer = match self.describe(now_ms, name) {
            Ok(info) => Response::Topic(info),
            Err((code, message)) => Response::Error { code, message },
        };
        self.set_gate_answer(gate, answer);
        Ok(None)
    }

    /// Carry out one action with `state` the topic as it stood right after
    /// it (`None` for a delete): persist it, write seal markers, queue its
    /// delivery.
    fn execute(
        &mut self,
        action: &Action,
        state: Option<&Topic>,
        gate: Option<u64>,
    ) -> Result<(), ControlError> {
        self.actions.count(action);
        let Some(topic) = state else {
            let version = self.next_id();
            let snapshot = Snapshot {
                version,
                json: Arc::from(&[][..]),
                owners: Arc::from(Vec::new()),
            };
            if matches!(action, Action::DeleteTopic { .. }) {
                let t = self
                    .topic_deliveries
                    .entry(action.topic().clone())
                    .or_default();
                t.safe = None;
                t.floor = version;
                let name = action.topic();
                for due in self.departed_due.values_mut() {
                    let held = due.layouts.remove(name).is_some();
                    if due.refusals.remove(name).is_some() || held {
                        due.drops.insert(name.clone());
                    }
                }
            }
            self.deliver(action, snapshot, gate);
            return Ok(());
        };
        for sealed in action.sealed() {
            if sealed.broker.is_some() {
                continue;
            }
            // Before the topic is persisted, and whether or not that
            // succeeds: a marker written for a layout not yet committed
            // states a seal the retried commit will make (a segment whose
            // owner is gone is sealed in any layout after). The layout
            // goes out either way; readers wait at the segment's end
            // until its marker is written.
            match sealed.sealer {
                Some(by) => {
                    log::info!(
                        "segment {}/{}: its owner is gone; its follower on broker {by} \
                         seals it from its copy",
                        topic.name(),
                        sealed.segment.0
                    );
                    self.sealing_followers.insert(
                        (topic.name().clone(), sealed.segment),
                        SealerWait {
                            by,
                            epoch: sealed.epoch,
                            since_ms: Some(self.now_ms),
                        },
                    );
                }
                None => self.fence(topic.name(), sealed.segment, sealed.epoch),
            }
        }
        if let Err(e) = self.persist(topic) {
            // Not committed: brokers are not told until it is; they learn
            // the layout by resync once it is persisted.
            self.unpersisted.insert(topic.name().clone());
            for broker in action_brokers(action) {
                self.mark_behind(broker);
            }
            return Err(e);
        }
        let snapshot = Snapshot {
            version: self.next_id(),
            json: Arc::from(topic.to_json_bytes()),
            owners: self.owners(Some(topic)),
        };
        self.deliver(action, snapshot, gate);
        Ok(())
    }

    /// `broker` missed a change: resynchronise it on its next report.
    fn mark_behind(&mut self, broker: BrokerId) {
        if self.queues.contains_key(&broker) {
            self.fail_queue(broker);
        }
    }

    fn persist(&self, topic: &Topic) -> Result<(), ControlError> {
        self.store.put_topic(topic)
    }

    /// For each segment a follower was to seal from its copy whose wait is
    /// over (`ClusterConfig::sealer_wait_ms` since its layout was committed
    /// and of the filer answering), look for its marker: there, the
    /// follower sealed it; missing, seal it at the filer's end. A sealer
    /// declared dead meanwhile is still waited for: one declared dead by
    /// mistake (a stall) comes back with its copy, and sealing at the
    /// filer's end would lose what only the copy holds. The filer is asked
    /// only once the wait is over (its calls block the driver, and a store
    /// that is away can hold each for its retry timeout).
    fn give_up_on_sealers(&mut self, now_ms: u64) {
        let keys: Vec<(TopicName, SegmentId)> = self.sealing_followers.keys().cloned().collect();
        for key in keys {
            let Some(wait) = self.sealing_followers.get_mut(&key) else {
                continue;
            };
            let (topic, segment) = &key;
            if self.unpersisted.contains(topic) {
                // Not committed, so not sent: the follower does not know
                // yet, and the wait has not started.
                wait.since_ms = Some(now_ms);
                continue;
            }
            let since_ms = *wait.since_ms.get_or_insert(now_ms);
            if now_ms.saturating_sub(since_ms) < self.cluster.config().sealer_wait_ms {
                continue;
            }
            match self
                .filer
                .size(&filer_layout::seal_marker(topic, segment.0))
            {
                Ok(_) => {
                    log::info!(
                        "segment {topic}/{}: sealed by its follower on broker {}",
                        segment.0,
                        wait.by
                    );
                }
                Err(filer::FilerError::NotFound { .. }) => {
                    let (by, epoch) = (wait.by, wait.epoch);
                    if self.cluster.topic(topic).is_some() {
                        log::warn!(
                            "segment {topic}/{}: its follower on broker {by} did not seal \
                             it; sealing it at the filer's end",
                            segment.0
                        );
                        self.fence(topic, *segment, epoch);
                    }
                }
                Err(e) => {
                    // The store does not answer: the follower's uploads
                    // wait too, and the wait starts over.
                    log::warn!(
                        "segment {topic}/{}: looking for its seal marker: {e}; waiting for \
                         its follower again",
                        segment.0
                    );
                    wait.since_ms = Some(now_ms);
                    continue;
                }
            }
            self.sealing_followers.remove(&key);
        }
    }

    /// Say which followers `action` (if a change of followers) took out of
    /// the in-sync set, brought back, placed or dropped: an `all` produce
    /// stops or starts waiting for them.
    fn log_followers_changed(&self, action: &Action) {
        let Action::Followers { topic, before, .. } = action else {
            return;
        };
        let Some(now) = self.cluster.topic(topic) else {
            return;
        };
        for (id, old) in before {
            let Some(segment) = now.segment(*id) else {
                continue;
            };
            for f in &segment.followers {
                let was = old.iter().find(|o| o.broker == f.broker);
                let what = match (was.map(|o| o.in_sync), f.in_sync) {
                    (None, _) => "placed (behind until it copies)",
                    (Some(true), false) => "left the in-sync set: behind its owner for too long",
                    (Some(false), true) => "rejoined the in-sync set: caught up",
                    _ => continue,
                };
                log::info!(
                    "segment {topic}/{}: its follower on broker {} {what}",
                    id.0,
                    f.broker
                );
            }
            for o in old {
                if !segment.followers.iter().any(|f| f.broker == o.broker) {
                    log::info!(
                        "segment {topic}/{}: its follower on broker {} was dropped (broker gone)",
                        id.0,
                        o.broker
                    );
                }
            }
        }
    }

    /// Seal a segment whose owner is gone in the filer, at the end of what
    /// the filer holds of it, fencing the owner off should it come back
    /// (`segment_fence`); retried every tick until it is done.
    fn fence(&mut self, topic: &TopicName, segment: SegmentId, epoch: u32) {
        match segment_fence::fence_segment(self.filer.as_ref(), topic, segment.0, epoch, "control")
        {
            Ok(Fenced::At(end)) => {
                log::info!(
                    "segment {topic}/{}: its owner is gone; sealed at offset {end}",
                    segment.0
                );
            }
            Ok(Fenced::AlreadySealed) => {
                log::info!(
                    "segment {topic}/{}: sealed already (by its owner or a follower)",
                    segment.0
                );
            }
            Err(e) => {
                log::error!(
                    "segment {topic}/{}: sealing it in the filer: {e}; retrying",
                    segment.0
                );
                self.unfenced.insert((topic.clone(), segment), epoch);
            }
        }
    }

    /// Whether a segment `action` opened has followers.
    fn opens_followed(&self, action: &Action) -> bool {
        let Some(topic) = self.cluster.topic(action.topic()) else {
            return false;
        };
        action.opened().iter().any(|opened| {
            topic
                .segment(opened.segment)
                .is_some_and(|s| !s.followers.is_empty())
        })
    }

    fn topic_json(&self, name: &TopicName) -> Vec<u8> {
        self.cluster
            .topic(name)
            .map(Topic::to_json_bytes)
            .unwrap_or_default()
    }

    fn live_brokers(&self) -> Vec<BrokerId> {
        self.cluster.membership().broker_ids().collect()
    }

    /// Where commands for `broker` go: its shard 0. A leaving broker is no
    /// longer a member when its seals are sent, so the addresses it
    /// registered with are looked up first (they are forgotten once the
    /// leave is carried out).
    fn command_address(&self, broker: BrokerId) -> Option<String> {
        self.addresses
            .get(&broker)
            .and_then(|shards| shards.first())
            .map(|shard| shard.tcp.clone())
            .or_else(|| {
                self.cluster
                    .membership()
                    .broker(broker)
                    .and_then(|b| b.info().shard_addresses.first().cloned())
            })
    }

    fn shard_address(&self, broker: BrokerId, shard: u16) -> Option<ShardAddress> {
        if !self.cluster.membership().is_live(broker) {
            return None;
        }
        self.addresses
            .get(&broker)
            .and_then(|shards| shards.get(usize::from(shard)).cloned())
    }

    fn describe(&self, _now_ms: u64, name: &TopicName) -> Result<TopicInfo, (ErrorCode, String)> {
        let topic = self
            .cluster
            .topic(name)
            .ok_or_else(|| error_answer(ControlError::TopicNotFound(name.to_string())))?;
        let live = self.live_brokers();
        let segments = topic
            .segments()
            .iter()
            .map(|s| {
                let sealed = !s.is_open();
                let address = match s.broker {
                    Some(owner) if self.cluster.membership().is_live(owner) => {
                        self.shard_address(owner, s.shard)
                    }
                    // A sealed segment's reads: any live broker, spread by id.
                    _ if sealed && !live.is_empty() => {
                        let reader = live[s.id.0 as usize % live.len()];
                        self.shard_address(reader, 0)
                    }
                    _ => None,
                };
                let rate = self
                    .cluster
                    .segment_rates(name, s.id)
                    .map(|r| r.window(0))
                    .unwrap_or_default();
                let (next_offset, first_append_ms, lost_records) = self
                    .next_offsets
                    .get(&(name.clone(), s.id))
                    .copied()
                    .unwrap_or((0, None, 0));
                let mut info = SegmentInfo {
                    next_offset,
                    first_append_ms,
                    address,
                    bytes_per_s: rate.bytes_per_s,
                    records_per_s: rate.records_per_s,
                    lost_records,
                    ..s.info()
                };
                for (f, follower) in info.followers.iter_mut().zip(&s.followers) {
                    f.address = self.shard_address(follower.broker, follower.shard);
                }
                info
            })
            .collect();
        Ok(TopicInfo {
            name: name.to_string(),
            segments,
        })
    }

    fn broker_statuses(&self, now_ms: u64) -> Vec<BrokerStatus> {
        self.cluster
            .membership()
            .brokers()
            .map(|(id, entry)| {
                let info = entry.info();
                let (load, utilization) = self.cluster.broker_load(*id).unwrap_or_default();
                let shards = self.addresses.get(id).cloned().unwrap_or_else(|| {
                    info.shard_addresses
                        .iter()
                        .map(|tcp| ShardAddress {
                            tcp: tcp.clone(),
                            quic: String::new(),
                        })
                        .collect()
                });
                BrokerStatus {
                    id: id.0,
                    shards,
                    capacity_bytes_per_s: info.capacity.bytes_per_s,
                    capacity_records_per_s: info.capacity.records_per_s,
                    bytes_per_s: load.bytes_per_s,
                    records_per_s: load.records_per_s,
                    utilization_permille: permille(utilization),
                    open_segments: u32::try_from(entry.segments().len()).unwrap_or(u32::MAX),
                    silent_ms: now_ms.saturating_sub(entry.last_seen_ms()),
                }
            })
            .collect()
    }
}

/// For each action, the topic as it stood right after it (`None` for a
/// delete): the core applies a whole batch before returning it, so the
/// later actions on the same topic are undone from its current state. Each
/// broker is then told a layout in which no segment is open whose
/// predecessors are not yet sealed.
fn states_after(cluster: &Cluster, actions: &[Action]) -> Vec<Option<Topic>> {
    let mut states = vec![None; actions.len()];
    let mut current: HashMap<TopicName, Topic> = HashMap::new();
    for (i, action) in actions.iter().enumerate().rev() {
        if matches!(action, Action::DeleteTopic { .. }) {
            continue;
        }
        let name = action.topic();
        if !current.contains_key(name) {
            match cluster.topic(name) {
                Some(topic) => {
                    current.insert(name.clone(), topic.clone());
                }
                None => continue,
            }
        }
        if let Some(topic) = current.get_mut(name) {
            states[i] = Some(topic.clone());
            undo(topic, action);
        }
    }
    states
}

/// Undo one action on the topic it produced: drop the segments it opened,
/// reopen the ones it sealed, give back the followers it changed.
fn undo(topic: &mut Topic, action: &Action) {
    if let Action::Followers { before, .. } = action {
        for (id, followers) in before {
            if let Some(segment) = topic.segments.iter_mut().find(|s| s.id == *id) {
                segment.followers.clone_from(followers);
            }
        }
        topic.follower_changes = topic.follower_changes.saturating_sub(1);
        return;
    }
    let opened: Vec<SegmentId> = action.opened().iter().map(|p| p.segment).collect();
    topic.segments.retain(|s| !opened.contains(&s.id));
    for sealed in action.sealed() {
        if let Some(segment) = topic.segments.iter_mut().find(|s| s.id == sealed.segment) {
            segment.state = SegmentState::Open;
            segment.epoch = sealed.epoch.wrapping_sub(1);
            segment.successors.clear();
            segment.sealed_ms = None;
        }
    }
}

/// Every broker an action's commands go to.
fn action_brokers(action: &Action) -> Vec<BrokerId> {
    if let Action::Followers { brokers, .. } = action {
        return brokers.clone();
    }
    action
        .commands()
        .iter()
        .map(|command| match command {
            BrokerCommand::Seal { broker, .. } | BrokerCommand::DropTopic { broker, .. } => *broker,
            BrokerCommand::Open { segment, .. } => segment.broker,
        })
        .collect()
}

fn permille(utilization: f64) -> u32 {
    let scaled = (utilization * 1000.0).round();
    if scaled.is_nan() || scaled <= 0.0 {
        0
    } else if scaled >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        // In range and integral after the checks above.
        scaled as u32
    }
}

fn parse_name(topic: &str) -> Result<TopicName, (ErrorCode, String)> {
    TopicName::parse(topic).map_err(error_answer)
}

fn parse_policy(json: &str) -> Result<Option<ScalingPolicy>, (ErrorCode, String)> {
    if json.is_empty() {
        return Ok(None);
    }
    let policy: ScalingPolicy = serde_json::from_str(json).map_err(|e| {
        (
            ErrorCode::InvalidArgument,
            format!("invalid scaling policy JSON: {e}"),
        )
    })?;
    policy
        .validate()
        .map_err(|reason| error_answer(ControlError::InvalidPolicy(reason)))?;
    Ok(Some(policy))
}

fn not_registered(broker: BrokerId) -> (ErrorCode, String) {
    (
        ErrorCode::NotOwner,
        format!(
            "broker {} is not registered with the control plane: register again",
            broker.0
        ),
    )
}

/// The wire error for a core error.
pub fn error_answer(e: ControlError) -> (ErrorCode, String) {
    let code = match &e {
        ControlError::InvalidTopicName(_) => ErrorCode::InvalidTopicName,
        ControlError::TopicExists(_) => ErrorCode::TopicExists,
        ControlError::TopicNotFound(_) => ErrorCode::TopicNotFound,
        ControlError::SegmentNotFound { .. } => ErrorCode::SegmentNotFound,
        ControlError::InvalidSegmentCount { .. }
        | ControlError::InvalidReplicaCount { .. }
        | ControlError::InvalidShardCount
        | ControlError::InvalidBroker(_)
        | ControlError::BrokerNotFound(_)
        | ControlError::InvalidChange(_)
        | ControlError::InvalidPolicy(_) => ErrorCode::InvalidArgument,
        ControlError::TooManyTopics { .. }
        | ControlError::TooManyBrokers { .. }
        | ControlError::NoLiveBroker => ErrorCode::Busy,
        ControlError::Corrupt { .. } => ErrorCode::Internal,
        ControlError::Filer(_) | ControlError::State(_) | ControlError::Fence { .. } => {
            ErrorCode::Storage
        }
        ControlError::NotLeader { leader } => {
            // The message is the address to go to (docs/wire-format.md).
            return (ErrorCode::NotLeader, leader.clone().unwrap_or_default());
        }
    };
    (code, e.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn undo_restores_the_state_before_each_action() {
        let mut cluster = Cluster::new(ClusterConfig::default());
        let info = |id| BrokerInfo {
            id: BrokerId(id),
            shard_addresses: vec!["127.0.0.1:1".to_owned()],
            capacity: Capacity {
                bytes_per_s: 100,
                records_per_s: 100,
            },
        };
        cluster.handle_register(0, info(1)).unwrap();
        cluster.handle_register(0, info(2)).unwrap();
        let name = TopicName::parse("ns/t").unwrap();
        cluster.create_topic(0, &name, 2, 1, None).unwrap();
        let before = cluster.topic(&name).unwrap().clone();
        let split = cluster.split_segment(1, &name, SegmentId(0), 2).unwrap();
        let after_split = cluster.topic(&name).unwrap().clone();
        let moved = cluster.move_segment(2, &name, SegmentId(1), None).unwrap();
        let states = states_after(&cluster, &[split.clone(), moved.clone()]);
        assert_eq!(states[0].as_ref(), Some(&after_split));
        assert_eq!(states[1].as_ref(), cluster.topic(&name));
        let mut undone = after_split;
        undo(&mut undone, &split);
        assert_eq!(undone, before);
    }

    /// A service over a fresh filer with brokers 0 and 1 registered, and
    /// what its commands were (all answered done until `fail` says no).
    struct Harness {
        _dir: tempfile::TempDir,
        service: ClusterService,
        now_ms: u64,
        token: AnswerToken,
    }

    impl Harness {
        fn new() -> Harness {
            let dir = tempfile::tempdir().unwrap();
            let filer = Arc::new(filer::LocalFiler::open(dir.path()).unwrap());
            Harness::with_filer(dir, filer)
        }

        fn with_filer(dir: tempfile::TempDir, filer: Arc<dyn Filer>) -> Harness {
            let service = ClusterService::open(
                Box::new(crate::state_store::FilerStateStore::new(filer.clone())),
                filer,
                "file:///t".into(),
                ClusterConfig::default(),
                5_000,
            )
            .unwrap();
            let mut h = Harness {
                _dir: dir,
                service,
                now_ms: 1_000,
                token: 0,
            };
            for id in 0..2 {
                h.ask(MembershipRequest::RegisterBroker {
                    id: Some(id),
                    shards: vec![ShardAddress {
                        tcp: format!("b{id}:0"),
                        quic: String::new(),
                    }],
                    capacity_bytes_per_s: 1_000,
                    capacity_records_per_s: 1_000,
                });
            }
            h
        }

        /// Both brokers synced (by their first load report), then a topic
        /// created: the harness and the first command that sets off, not
        /// yet sent.
        fn commanded() -> (Harness, OutgoingCommand) {
            let mut h = Harness::new();
            for broker in 0..2 {
                h.ask(MembershipRequest::LoadReport {
                    broker,
                    segments: Vec::new(),
                });
                assert!(!h.service.needs_resync(BrokerId(broker)));
            }
            h.send(AdminRequest::CreateTopic {
                topic: "ns/t".into(),
                segments: 2,
                replicas: 0,
            });
            let command = h.service.poll_command().unwrap();
            (h, command)
        }

        fn ask(
            &mut self,
            request: impl Into<ControlPortRequest>,
        ) -> Vec<(BrokerId, CommandRequest)> {
            self.send(request);
            self.run(|_, _| true)
        }

        /// `broker` reports (nothing of its own), then a tick, both now.
        fn report_and_tick(&mut self, broker: BrokerId) {
            self.ask(MembershipRequest::LoadReport {
                broker: broker.0,
                segments: Vec::new(),
            });
            self.service.handle_tick(self.now_ms);
        }

        /// Hand the service `request`, sending none of the commands it
        /// sets off.
        fn send(&mut self, request: impl Into<ControlPortRequest>) {
            self.token += 1;
            self.service
                .handle_request(self.now_ms, self.token, request.into());
        }

        /// Send every command, each done if `ok` says so; what was sent.
        fn run(
            &mut self,
            mut ok: impl FnMut(BrokerId, &CommandRequest) -> bool,
        ) -> Vec<(BrokerId, CommandRequest)> {
            let mut sent = Vec::new();
            while let Some(command) = self.service.poll_command() {
                let result = if ok(command.broker, &command.request) {
                    Ok(())
                } else {
                    Err(CommandFailed::Lost("the test lost it".into()))
                };
                self.service
                    .handle_command_done(self.now_ms, command.broker, command.id, result);
                sent.push((command.broker, command.request));
            }
            while self.service.poll_answer().is_some() {}
            sent
        }
    }

    fn drops(sent: &[(BrokerId, CommandRequest)]) -> Vec<BrokerId> {
        sent.iter()
            .filter(|(_, c)| matches!(c, CommandRequest::DropTopic { .. }))
            .map(|(b, _)| *b)
            .collect()
    }

    /// A broker ignores a layout with fewer segments than the one it holds,
    /// whatever its creation time: one that kept the layout of a deleted
    /// topic would ignore every layout of the topic created again, so the
    /// delete must reach every broker that holds one, not only the owners
    /// of its open segments.
    #[test]
    fn a_delete_drops_the_topic_on_brokers_that_only_hold_its_layout() {
        let mut h = Harness::new();
        h.ask(AdminRequest::CreateTopic {
            topic: "ns/t".into(),
            segments: 1,
            replicas: 0,
        });
        let owner = h
            .service
            .cluster()
            .topic(&TopicName::parse("ns/t").unwrap())
            .unwrap()
            .segments()[0]
            .broker
            .unwrap();
        let sent = h.ask(AdminRequest::MoveSegment {
            topic: "ns/t".into(),
            segment: 0,
            to: None,
        });
        assert!(sent.iter().any(|(b, _)| *b == owner), "{sent:?}");
        // The former owner holds the layout, with no open segment of it.
        let sent = h.ask(AdminRequest::DeleteTopic {
            topic: "ns/t".into(),
        });
        let mut dropped = drops(&sent);
        dropped.sort();
        assert_eq!(dropped, [BrokerId(0), BrokerId(1)]);
    }

    /// A drop that failed is sent again by the broker's resync, before the
    /// layout of a topic created again under the name.
    #[test]
    fn a_resync_sends_a_failed_drop_before_the_layout() {
        let mut h = Harness::new();
        h.ask(AdminRequest::CreateTopic {
            topic: "ns/t".into(),
            segments: 2,
            replicas: 0,
        });
        h.send(AdminRequest::DeleteTopic {
            topic: "ns/t".into(),
        });
        let sent = h.run(|b, _| b != BrokerId(0));
        assert!(drops(&sent).contains(&BrokerId(0)));
        assert!(h.service.needs_resync(BrokerId(0)));
        h.ask(AdminRequest::CreateTopic {
            topic: "ns/t".into(),
            segments: 1,
            replicas: 0,
        });
        let sent = h.ask(MembershipRequest::LoadReport {
            broker: 0,
            segments: Vec::new(),
        });
        let to_b0: Vec<&CommandRequest> = sent
            .iter()
            .filter(|(b, _)| *b == BrokerId(0))
            .map(|(_, c)| c)
            .collect();
        assert!(
            matches!(
                to_b0.as_slice(),
                [
                    CommandRequest::DropTopic { .. },
                    CommandRequest::ApplyLayout { .. }
                ]
            ),
            "{to_b0:?}"
        );
        assert!(!h.service.needs_resync(BrokerId(0)));
        // Done: the next resync has nothing to drop.
        assert!(h
            .service
            .queues
            .get(&BrokerId(0))
            .is_some_and(|q| q.drops_due.is_empty()));
    }

    /// Whatever a command's failure, its broker is resynchronised; one
    /// with no result within the timeout fails as `TimedOut`.
    #[test]
    fn every_command_failure_resyncs_the_broker() {
        let failures: [fn() -> CommandFailed; 3] = [
            || CommandFailed::Refused {
                address: "b0:0".into(),
                code: ErrorCode::Storage,
                message: "disk full".into(),
            },
            || CommandFailed::Lost("connection reset".into()),
            || CommandFailed::NotSent("no sender thread".into()),
        ];
        for failure in failures {
            let (mut h, command) = Harness::commanded();
            let broker = command.broker;
            h.service
                .handle_command_done(h.now_ms, broker, command.id, Err(failure()));
            assert!(h.service.needs_resync(broker), "{}", failure());
        }

        let (mut h, command) = Harness::commanded();
        h.service.handle_tick(h.now_ms + 4_999);
        assert!(!h.service.needs_resync(command.broker));
        h.service.handle_tick(h.now_ms + 5_000);
        assert!(h.service.needs_resync(command.broker));
        // Its late result is ignored.
        h.service
            .handle_command_done(h.now_ms + 5_001, command.broker, command.id, Ok(()));
        assert!(h.service.needs_resync(command.broker));
    }

    /// A stall of the driver (it did not run for a while) counts neither
    /// against a command in flight, whose result may be waiting in the
    /// driver's queue, nor as the brokers' silence.
    #[test]
    fn a_stall_times_out_no_command_and_buries_no_broker() {
        let (mut h, command) = Harness::commanded();
        let silence_ms = ClusterConfig::default().broker_silence_ms;
        let stalled_ms = 2 * silence_ms;
        let back = h.now_ms + stalled_ms;
        h.service.handle_stall(back, stalled_ms);
        h.service.handle_tick(back);
        assert!(!h.service.needs_resync(command.broker), "timed out");
        assert_eq!(h.service.cluster().membership().len(), 2, "buried");
        h.service
            .handle_command_done(back, command.broker, command.id, Ok(()));
        assert!(!h.service.needs_resync(command.broker));
        // Time the driver runs counts again.
        h.service.handle_tick(back + silence_ms + 1);
        assert_eq!(h.service.cluster().membership().len(), 0);
    }

    /// A dead owner's segment is sealed in the filer (fence, then marker);
    /// while the filer refuses, the seal is tried again every tick.
    #[test]
    fn a_dead_owners_segment_is_fenced_once_the_filer_answers() {
        use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
        let dir = tempfile::tempdir().unwrap();
        // The filer's outage: creates fail while `down` is set.
        let down = Arc::new(AtomicBool::new(false));
        let hook: crate::test_filer::CreateHook = {
            let down = down.clone();
            Box::new(move |_, path| match down.load(Relaxed) {
                true => Err(filer::FilerError::Io {
                    op: "create",
                    path: path.to_string(),
                    source: std::io::Error::other("the test's filer is down"),
                }),
                false => Ok(()),
            })
        };
        let filer = Arc::new(crate::test_filer::HookedCreates::new(dir.path(), hook));
        let mut h = Harness::with_filer(dir, filer.clone());
        for broker in 0..2 {
            h.ask(MembershipRequest::LoadReport {
                broker,
                segments: Vec::new(),
            });
        }
        h.ask(AdminRequest::CreateTopic {
            topic: "ns/t".into(),
            segments: 1,
            replicas: 1,
        });
        let name = TopicName::parse("ns/t").unwrap();
        let owner = h.service.cluster().topic(&name).unwrap().segments()[0]
            .broker
            .unwrap();
        let survivor = 1 - owner.0;
        down.store(true, Relaxed);
        h.now_ms += ClusterConfig::default().broker_silence_ms + 1;
        h.ask(MembershipRequest::LoadReport {
            broker: survivor,
            segments: Vec::new(),
        });
        h.service.handle_tick(h.now_ms);
        h.run(|_, _| true);
        let sealed = &h.service.cluster().topic(&name).unwrap().segments()[0];
        assert!(!sealed.is_open(), "the dead owner's segment is sealed");
        let marker = filer_layout::seal_marker(&name, 0);
        assert!(
            filer.size(&marker).is_err(),
            "no marker while the filer is down"
        );
        assert_eq!(h.service.unfenced.len(), 1);

        h.service.handle_tick(h.now_ms + 1_000);
        assert_eq!(h.service.unfenced.len(), 1, "still down: kept");
        down.store(false, Relaxed);
        h.service.handle_tick(h.now_ms + 2_000);
        assert!(h.service.unfenced.is_empty());
        let mut content = vec![0u8; 128];
        let n = filer.read_at(&marker, 0, &mut content).unwrap();
        let content = std::str::from_utf8(&content[..n]).unwrap();
        assert!(
            content.contains(r#""end":0,"written_by":"control""#),
            "{content}"
        );
        assert!(
            filer.size(&filer_layout::chunk(&name, 0, 0)).is_ok(),
            "the fence"
        );
    }

    /// `brokers` brokers on a local filer and topic `ns/t` of one segment
    /// on two replicas: the harness, the filer, the topic's name, and its
    /// segment's owner and follower.
    fn a_followed_segment(
        brokers: u32,
    ) -> (
        Harness,
        Arc<filer::LocalFiler>,
        TopicName,
        BrokerId,
        BrokerId,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let filer = Arc::new(filer::LocalFiler::open(dir.path()).unwrap());
        let mut h = Harness::with_filer(dir, filer.clone());
        for broker in 0..brokers {
            h.ask(MembershipRequest::LoadReport {
                broker,
                segments: Vec::new(),
            });
        }
        h.ask(AdminRequest::CreateTopic {
            topic: "ns/t".into(),
            segments: 1,
            replicas: 2,
        });
        let name = TopicName::parse("ns/t").unwrap();
        let segment = h.service.cluster().topic(&name).unwrap().segments()[0].clone();
        let (owner, follower) = (segment.broker.unwrap(), segment.followers[0].broker);
        assert_ne!(owner, follower);
        (h, filer, name, owner, follower)
    }

    /// Two brokers, a topic of one segment and two replicas, its owner
    /// silent past the limit: the segment sealed, naming its follower the
    /// sealer. The harness, the topic, the follower and the filer.
    fn dead_owner_with_a_follower() -> (Harness, TopicName, BrokerId, Arc<filer::LocalFiler>) {
        let (mut h, filer, name, _, follower) = a_followed_segment(2);
        h.now_ms += ClusterConfig::default().broker_silence_ms + 1;
        h.report_and_tick(follower);
        h.run(|_, _| true);
        let sealed = &h.service.cluster().topic(&name).unwrap().segments()[0];
        assert!(!sealed.is_open());
        assert_eq!(sealed.sealer, Some(follower), "its follower seals it");
        assert_eq!(h.service.sealing_followers.len(), 1);
        (h, name, follower, filer)
    }

    /// A dead owner's segment with a follower on a live broker is sealed
    /// by that follower from its copy: the control plane names it in the
    /// layout and writes nothing itself until `sealer_wait_ms` has passed;
    /// then, with no marker there, it seals it at the filer's end.
    #[test]
    fn a_dead_owners_follower_seals_its_segment_unless_it_takes_too_long() {
        let (mut h, name, follower, filer) = dead_owner_with_a_follower();
        let marker = filer_layout::seal_marker(&name, 0);
        // Still waiting just before the limit (the follower reports).
        h.now_ms += crate::cluster::SEALER_WAIT_MS - 1;
        h.report_and_tick(follower);
        assert!(filer.size(&marker).is_err(), "the control plane waits");
        assert_eq!(h.service.sealing_followers.len(), 1);
        // At it, the control plane seals it at the filer's end.
        h.now_ms += 1;
        h.report_and_tick(follower);
        assert!(h.service.sealing_followers.is_empty());
        let mut content = vec![0u8; 128];
        let n = filer.read_at(&marker, 0, &mut content).unwrap();
        let content = std::str::from_utf8(&content[..n]).unwrap();
        assert!(content.contains(r#""written_by":"control""#), "{content}");
    }

    /// The follower sealed it in time: at the limit the control plane
    /// finds its marker and writes nothing.
    #[test]
    fn a_segment_its_follower_sealed_is_left_as_it_is() {
        let (mut h, name, follower, filer) = dead_owner_with_a_follower();
        let marker = filer_layout::seal_marker(&name, 0);
        assert!(filer_layout::create_seal_marker(
            filer.as_ref(),
            &name,
            0,
            1,
            7,
            "broker 1 (follower)"
        )
        .unwrap());
        h.now_ms += crate::cluster::SEALER_WAIT_MS;
        h.report_and_tick(follower);
        assert!(h.service.sealing_followers.is_empty());
        assert!(
            filer.size(&filer_layout::chunk(&name, 0, 0)).is_err(),
            "no fence of the control plane's"
        );
        let mut content = vec![0u8; 128];
        let n = filer.read_at(&marker, 0, &mut content).unwrap();
        let content = std::str::from_utf8(&content[..n]).unwrap();
        assert!(content.contains("(follower)"), "{content}");
    }

    /// Its follower's broker declared dead too: the control plane still
    /// waits for it (declared dead by mistake, it comes back with its
    /// copy), and seals the segment itself only once the wait is over.
    #[test]
    fn a_sealer_declared_dead_is_still_waited_for() {
        let (mut h, filer, name, owner, follower) = a_followed_segment(3);
        let third = (0..3).find(|b| *b != owner.0 && *b != follower.0).unwrap();
        let silence_ms = ClusterConfig::default().broker_silence_ms;
        // The owner goes silent first; the follower a little later.
        h.now_ms += silence_ms / 2;
        for broker in [follower.0, third] {
            h.ask(MembershipRequest::LoadReport {
                broker,
                segments: Vec::new(),
            });
        }
        h.now_ms += silence_ms / 2 + 1;
        h.ask(MembershipRequest::LoadReport {
            broker: third,
            segments: Vec::new(),
        });
        h.service.handle_tick(h.now_ms);
        h.run(|_, _| true);
        assert_eq!(h.service.sealing_followers.len(), 1);
        let marker = filer_layout::seal_marker(&name, 0);
        assert!(filer.size(&marker).is_err());
        h.now_ms += silence_ms / 2 + 1;
        h.ask(MembershipRequest::LoadReport {
            broker: third,
            segments: Vec::new(),
        });
        h.service.handle_tick(h.now_ms);
        assert!(
            !h.service.cluster().membership().is_live(follower),
            "the follower is declared dead"
        );
        assert_eq!(h.service.sealing_followers.len(), 1, "still waited for");
        assert!(filer.size(&marker).is_err());
        h.now_ms += crate::cluster::SEALER_WAIT_MS;
        h.report_and_tick(BrokerId(third));
        assert!(h.service.sealing_followers.is_empty());
        assert!(filer.size(&marker).is_ok(), "sealed at the filer's end");
    }

    #[test]
    fn command_failures_say_what_happened() {
        assert_eq!(
            CommandFailed::TimedOut { timeout_ms: 5_000 }.to_string(),
            "no result within 5000 ms"
        );
        assert_eq!(
            CommandFailed::Refused {
                address: "b0:0".into(),
                code: ErrorCode::Storage,
                message: "disk full".into(),
            }
            .to_string(),
            "broker b0:0 refused: Storage: disk full"
        );
        let lost = CommandFailed::Lost(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset by peer",
        )));
        assert_eq!(lost.to_string(), "reset by peer");
        let CommandFailed::Lost(source) = lost else {
            unreachable!()
        };
        assert!(source.downcast_ref::<std::io::Error>().is_some());
    }

    #[test]
    fn errors_map_to_codes() {
        assert_eq!(
            error_answer(ControlError::TopicNotFound("ns/x".into())).0,
            ErrorCode::TopicNotFound
        );
        assert_eq!(error_answer(ControlError::NoLiveBroker).0, ErrorCode::Busy);
        assert!(parse_policy("{not json").is_err());
        assert_eq!(parse_policy("").unwrap(), None);
        let p = parse_policy("{\"target\":{\"bytes_per_s\":10,\"records_per_s\":0}}")
            .unwrap()
            .unwrap();
        assert!(p.is_automatic());
        assert_eq!(permille(0.5), 500);
        assert_eq!(permille(f64::NAN), 0);
    }
}
