//! [`ClusterService`]: the driver around [`Cluster`] in the control-plane
//! process. It owns the core, persists topics in the filer, carries out
//! actions on brokers through a [`BrokerLink`], and answers the requests
//! the server hands it. Synchronous and single-owner: one driver thread
//! calls it; it never takes a lock and never reads the clock (the caller
//! passes `now_ms`).
//!
//! Carrying out an action, in order:
//! 1. persist the topic as it stood right after the action (the commit
//!    point); a delete removes `topic.json` first, then the prefix;
//! 2. for every sealed segment whose owner is gone, write the seal marker
//!    `topics/<ns>/<name>/<segment>/sealed` (nobody else will);
//! 3. send that topic JSON as `ApplyLayout` once to each sealing broker and
//!    wait for each `Done`, then once to each opening broker that did not
//!    already get it; a delete sends `DropTopic` to each broker.
//!
//! A command that fails marks its broker "needs resync": its next load
//! report makes the driver send it the layout of every topic.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use filer::{Filer, FilerError};
use wire::message::{BrokerStatus, SegmentInfo, SegmentLoadReport, ShardAddress, TopicInfo};
use wire::{ErrorCode, Request, Response};

use crate::broker_link::BrokerLink;
use crate::filer_layout;
use crate::topic_store::load_topics;
use crate::{
    Action, BrokerCommand, BrokerId, BrokerInfo, Capacity, Cluster, ClusterConfig, ControlError,
    Rate, ScalingPolicy, SegmentId, SegmentLoad, SegmentState, Topic, TopicName,
};

/// A request the control plane answers, decoded and owned so it can cross
/// to the driver thread: a [`Request`] whose fields are all owned (every
/// control-plane request is), or the error to answer for one the control
/// plane does not serve (data-plane and broker-side requests).
pub fn control_request(request: Request<'_>) -> Result<Request<'static>, (ErrorCode, String)> {
    Ok(match request {
        Request::CreateTopic { topic, segments } => Request::CreateTopic { topic, segments },
        Request::DeleteTopic { topic } => Request::DeleteTopic { topic },
        Request::ListTopics => Request::ListTopics,
        Request::DescribeTopic { topic } => Request::DescribeTopic { topic },
        Request::SplitSegment {
            topic,
            segment,
            pieces,
        } => Request::SplitSegment {
            topic,
            segment,
            pieces,
        },
        Request::MergeSegments { topic, a, b } => Request::MergeSegments { topic, a, b },
        Request::MoveSegment { topic, segment, to } => Request::MoveSegment { topic, segment, to },
        Request::SetPolicy { topic, policy } => Request::SetPolicy { topic, policy },
        Request::ListBrokers => Request::ListBrokers,
        Request::RegisterBroker {
            id,
            shards,
            capacity_bytes_per_s,
            capacity_records_per_s,
        } => Request::RegisterBroker {
            id,
            shards,
            capacity_bytes_per_s,
            capacity_records_per_s,
        },
        Request::LoadReport { broker, segments } => Request::LoadReport { broker, segments },
        Request::LeaveBroker { broker } => Request::LeaveBroker { broker },
        other => return Err(not_served(&other)),
    })
}

fn not_served(request: &Request<'_>) -> (ErrorCode, String) {
    (
        ErrorCode::InvalidArgument,
        format!(
            "this is a kelp control plane, not a broker: a {:?} is not a control-plane request; \
             send it to a broker (kelp serve)",
            request.frame_type()
        ),
    )
}

/// What handling a request produced: the answer, and actions to carry out
/// only after the answer was sent (a registering broker must learn its id
/// and filer before it is told to open segments).
#[derive(Debug)]
pub struct Handled {
    /// The answer.
    pub answer: Response<'static>,
    /// Actions to carry out after answering.
    pub after: Vec<Action>,
}

impl From<Response<'static>> for Handled {
    fn from(answer: Response<'static>) -> Handled {
        Handled {
            answer,
            after: Vec::new(),
        }
    }
}

/// The driver (see the module docs).
#[derive(Debug)]
pub struct ClusterService {
    cluster: Cluster,
    filer: Arc<dyn Filer>,
    /// What `Registered` tells brokers: the filer's absolute path.
    filer_location: String,
    link: BrokerLink,
    /// Each live broker's shard addresses as it registered them.
    addresses: BTreeMap<BrokerId, Vec<ShardAddress>>,
    /// Each segment's next offset and first append time, from the latest
    /// load report that named it (sealed segments keep their last).
    next_offsets: HashMap<(TopicName, SegmentId), (u64, Option<u64>, u64)>,
    /// Brokers a command failed to reach (or that just registered): the
    /// next load report sends them every topic's layout.
    needs_resync: BTreeSet<BrokerId>,
    /// Topics changed in the core whose persisting failed; retried every
    /// tick, and not sent to brokers until persisted.
    unpersisted: BTreeSet<TopicName>,
    /// The highest broker id ever seen (registrations, topics).
    broker_id_max: Option<u32>,
}

impl ClusterService {
    /// Load every topic in `filer` and build the core over them.
    /// `filer_location` is what registering brokers are told to use.
    pub fn open(
        filer: Arc<dyn Filer>,
        filer_location: String,
        config: ClusterConfig,
        link: BrokerLink,
    ) -> Result<ClusterService, ControlError> {
        let topics = load_topics(filer.as_ref())?;
        let broker_id_max = topics
            .iter()
            .flat_map(|t| t.segments().iter().filter_map(|s| s.broker))
            .map(|b| b.0)
            .max();
        let cluster = Cluster::from_topics(config, topics)?;
        Ok(ClusterService {
            cluster,
            filer,
            filer_location,
            link,
            addresses: BTreeMap::new(),
            next_offsets: HashMap::new(),
            needs_resync: BTreeSet::new(),
            unpersisted: BTreeSet::new(),
            broker_id_max,
        })
    }

    /// The core, for read-only queries.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The periodic step: retry unpersisted topics, then the core's tick,
    /// carrying out its actions.
    pub fn tick(&mut self, now_ms: u64) {
        for name in std::mem::take(&mut self.unpersisted) {
            let Some(topic) = self.cluster.topic(&name).cloned() else {
                continue;
            };
            if let Err(e) = self.persist(&topic) {
                log::error!("persisting topic {name} again failed: {e}");
                self.unpersisted.insert(name);
            }
        }
        let actions = self.cluster.handle_tick(now_ms);
        self.execute_all(&actions);
        let live: BTreeSet<BrokerId> = self.live_brokers().into_iter().collect();
        self.addresses.retain(|id, _| live.contains(id));
        self.needs_resync.retain(|id| live.contains(id));
        let cluster = &self.cluster;
        self.next_offsets.retain(|(topic, segment), _| {
            cluster
                .topic(topic)
                .and_then(|t| t.segment(*segment))
                .is_some()
        });
    }

    /// Answer one request (carrying out what it changes, except
    /// [`Handled::after`]).
    pub fn handle(&mut self, now_ms: u64, request: Request<'static>) -> Handled {
        match self.try_handle(now_ms, request) {
            Ok(handled) => handled,
            Err((code, message)) => Response::Error { code, message }.into(),
        }
    }

    /// Carry out actions the core returned, in order (see the module docs).
    /// Failures are logged; the brokers concerned are marked for resync.
    pub fn execute_all(&mut self, actions: &[Action]) {
        let states = states_after(&self.cluster, actions);
        for (action, state) in actions.iter().zip(states) {
            if let Err(e) = self.execute(action, state.as_ref()) {
                log::error!("carrying out {action:?}: {e}");
            }
        }
    }

    fn try_handle(
        &mut self,
        now_ms: u64,
        request: Request<'static>,
    ) -> Result<Handled, (ErrorCode, String)> {
        let answer = match request {
            Request::CreateTopic { topic, segments } => {
                let name = parse_name(&topic)?;
                let action = self
                    .cluster
                    .create_topic(now_ms, &name, segments, None)
                    .map_err(error_answer)?;
                let created = self.cluster.topic(&name).cloned();
                // Leftovers of a delete interrupted after its commit point
                // belong to no live topic: clear them first.
                let persisted = match created {
                    Some(topic) => self
                        .filer
                        .delete(&filer_layout::topic_prefix(&name))
                        .map_err(ControlError::from)
                        .and_then(|()| self.persist(&topic)),
                    None => Err(ControlError::TopicNotFound(name.to_string())),
                };
                if let Err(e) = persisted {
                    // Nothing was told to brokers: undo in the core.
                    let _ = self.cluster.delete_topic(now_ms, &name);
                    return Err(error_answer(e));
                }
                self.send_commands(&action, &self.topic_json(&name));
                Response::Topic(self.describe(now_ms, &name)?)
            }
            Request::DeleteTopic { topic } => {
                let name = parse_name(&topic)?;
                if self.cluster.topic(&name).is_none() {
                    return Err(error_answer(ControlError::TopicNotFound(name.to_string())));
                }
                let prefix = filer_layout::topic_prefix(&name);
                let commit = filer_layout::topic_file(&name);
                self.filer.delete(&commit).map_err(filer_answer)?;
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
                self.send_commands(&action, &[]);
                Response::Done
            }
            Request::ListTopics => Response::TopicList {
                topics: self
                    .cluster
                    .topics()
                    .map(|t| t.name().to_string())
                    .collect(),
            },
            Request::DescribeTopic { topic } => {
                Response::Topic(self.describe(now_ms, &parse_name(&topic)?)?)
            }
            Request::SplitSegment {
                topic,
                segment,
                pieces,
            } => {
                let name = parse_name(&topic)?;
                let action = self
                    .cluster
                    .split_segment(now_ms, &name, SegmentId(segment), pieces)
                    .map_err(error_answer)?;
                self.change_answer(now_ms, &name, &action)?
            }
            Request::MergeSegments { topic, a, b } => {
                let name = parse_name(&topic)?;
                let action = self
                    .cluster
                    .merge_segments(now_ms, &name, SegmentId(a), SegmentId(b))
                    .map_err(error_answer)?;
                self.change_answer(now_ms, &name, &action)?
            }
            Request::MoveSegment { topic, segment, to } => {
                let name = parse_name(&topic)?;
                let action = self
                    .cluster
                    .move_segment(now_ms, &name, SegmentId(segment), to.map(BrokerId))
                    .map_err(error_answer)?;
                self.change_answer(now_ms, &name, &action)?
            }
            Request::SetPolicy { topic, policy } => {
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
            Request::ListBrokers => Response::Brokers {
                brokers: self.broker_statuses(now_ms),
            },
            Request::RegisterBroker {
                id,
                shards,
                capacity_bytes_per_s,
                capacity_records_per_s,
            } => {
                return self.register(
                    now_ms,
                    id,
                    shards,
                    capacity_bytes_per_s,
                    capacity_records_per_s,
                )
            }
            Request::LoadReport { broker, segments } => {
                self.load_report(now_ms, BrokerId(broker), &segments)?;
                Response::Done
            }
            Request::LeaveBroker { broker } => {
                let id = BrokerId(broker);
                let actions = self.cluster.handle_leave(now_ms, id).map_err(|e| match e {
                    ControlError::BrokerNotFound(_) => not_registered(id),
                    e => error_answer(e),
                })?;
                self.execute_all(&actions);
                self.addresses.remove(&id);
                self.needs_resync.remove(&id);
                Response::Done
            }
            other => return Err(not_served(&other)),
        };
        Ok(answer.into())
    }

    fn register(
        &mut self,
        now_ms: u64,
        id: Option<u32>,
        shards: Vec<ShardAddress>,
        capacity_bytes_per_s: u64,
        capacity_records_per_s: u64,
    ) -> Result<Handled, (ErrorCode, String)> {
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
        let actions = self
            .cluster
            .handle_register(now_ms, info)
            .map_err(error_answer)?;
        self.broker_id_max = self.broker_id_max.max(Some(id));
        self.addresses.insert(BrokerId(id), shards);
        self.needs_resync.insert(BrokerId(id));
        log::info!("broker {id} registered");
        Ok(Handled {
            answer: Response::Registered {
                id,
                filer: self.filer_location.clone(),
            },
            after: actions,
        })
    }

    fn load_report(
        &mut self,
        now_ms: u64,
        broker: BrokerId,
        segments: &[SegmentLoadReport],
    ) -> Result<(), (ErrorCode, String)> {
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
            });
        }
        self.cluster
            .handle_load_report(now_ms, broker, &loads)
            .map_err(|e| match e {
                ControlError::BrokerNotFound(_) => not_registered(broker),
                e => error_answer(e),
            })?;
        if self.needs_resync.contains(&broker) {
            self.resync(broker);
        }
        Ok(())
    }

    /// Send `broker` the layout of every topic, in name order; clear its
    /// flag if every one was done.
    fn resync(&mut self, broker: BrokerId) {
        let Some(address) = self.command_address(broker) else {
            return;
        };
        let mut all_done = true;
        for topic in self.cluster.topics() {
            if self.unpersisted.contains(topic.name()) {
                all_done = false;
                continue;
            }
            let json = topic.to_json_bytes();
            if let Err(e) = self
                .link
                .command(&address, &Request::ApplyLayout { topic_json: &json })
            {
                log::warn!("resync of broker {broker}: topic {}: {e}", topic.name());
                all_done = false;
                break;
            }
        }
        if all_done {
            self.needs_resync.remove(&broker);
            log::info!("broker {broker} resynchronised");
        }
    }

    /// Persist the change an admin request made and tell brokers, then
    /// describe the topic.
    fn change_answer(
        &mut self,
        now_ms: u64,
        name: &TopicName,
        action: &Action,
    ) -> Result<Response<'static>, (ErrorCode, String)> {
        let state = self.cluster.topic(name).cloned();
        self.execute(action, state.as_ref()).map_err(error_answer)?;
        Ok(Response::Topic(self.describe(now_ms, name)?))
    }

    /// Carry out one action with `state` the topic as it stood right after
    /// it (`None` for a delete).
    fn execute(&mut self, action: &Action, state: Option<&Topic>) -> Result<(), ControlError> {
        let Some(topic) = state else {
            self.send_commands(action, &[]);
            return Ok(());
        };
        if let Err(e) = self.persist(topic) {
            // Not committed: brokers are not told until it is; they learn
            // the layout by resync once it is persisted.
            self.unpersisted.insert(topic.name().clone());
            for command in action.commands() {
                if let Some(broker) = command_broker(&command) {
                    self.needs_resync.insert(broker);
                }
            }
            return Err(e);
        }
        for sealed in action.sealed() {
            if sealed.broker.is_none() {
                self.write_seal_marker(topic.name(), sealed.segment, sealed.epoch)?;
            }
        }
        self.send_commands(action, &topic.to_json_bytes());
        Ok(())
    }

    /// Send an action's commands: the layout once to each sealing broker,
    /// waiting for each, then once to each opening broker not yet told;
    /// `DropTopic` to each broker of a delete.
    fn send_commands(&mut self, action: &Action, topic_json: &[u8]) {
        let mut told: Vec<BrokerId> = Vec::new();
        for command in action.commands() {
            let Some(broker) = command_broker(&command) else {
                continue;
            };
            if told.contains(&broker) {
                continue;
            }
            told.push(broker);
            let request = match &command {
                BrokerCommand::DropTopic { topic, .. } => Request::DropTopic {
                    topic: topic.to_string(),
                },
                _ => Request::ApplyLayout { topic_json },
            };
            self.tell(broker, &request, action.topic());
        }
        // Reads of a sealed segment go to any live broker (spread by id),
        // so every other broker learns of a seal too: one with a stale
        // layout would refuse the read as another broker's open segment.
        let deleting = action
            .commands()
            .iter()
            .any(|c| matches!(c, BrokerCommand::DropTopic { .. }));
        if action.sealed().is_empty() || deleting {
            return;
        }
        let layout = Request::ApplyLayout { topic_json };
        for broker in self.live_brokers() {
            if !told.contains(&broker) {
                self.tell(broker, &layout, action.topic());
            }
        }
    }

    /// Send `request` about `topic` to `broker`; one that cannot be
    /// reached is resynchronised when it next reports.
    fn tell(&mut self, broker: BrokerId, request: &Request<'_>, topic: &TopicName) {
        let Some(address) = self.command_address(broker) else {
            log::warn!("no address for broker {broker}; it is resynchronised when it reports");
            self.needs_resync.insert(broker);
            return;
        };
        if let Err(e) = self.link.command(&address, request) {
            log::warn!("command to broker {broker} for topic {topic}: {e}");
            self.needs_resync.insert(broker);
        }
    }

    fn persist(&self, topic: &Topic) -> Result<(), ControlError> {
        let path = filer_layout::topic_file(topic.name());
        self.filer.put(&path, &topic.to_json_bytes())?;
        Ok(())
    }

    /// The marker a broker writes after flushing a sealed segment; written
    /// here when the owner is gone.
    fn write_seal_marker(
        &self,
        topic: &TopicName,
        segment: SegmentId,
        epoch: u32,
    ) -> Result<(), ControlError> {
        if !filer_layout::create_seal_marker(
            self.filer.as_ref(),
            topic,
            segment.0,
            epoch,
            "control",
        )? {
            log::info!("segment {topic}/{}: its owner sealed it first", segment.0);
        }
        Ok(())
    }

    fn topic_json(&self, name: &TopicName) -> Vec<u8> {
        self.cluster
            .topic(name)
            .map(Topic::to_json_bytes)
            .unwrap_or_default()
    }

    fn live_brokers(&self) -> Vec<BrokerId> {
        self.cluster
            .membership()
            .brokers()
            .map(|(id, _)| *id)
            .collect()
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
                let sealed = s.state == SegmentState::Sealed;
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
                SegmentInfo {
                    id: s.id.0,
                    epoch: s.epoch,
                    start: s.range.start(),
                    end: s.range.end(),
                    sealed,
                    shard: s.shard,
                    next_offset,
                    first_append_ms,
                    appended_bytes: 0,
                    successors: s.successors.iter().map(|id| id.0).collect(),
                    broker: s.broker.map(|b| b.0),
                    address,
                    bytes_per_s: rate.bytes_per_s,
                    records_per_s: rate.records_per_s,
                    created_ms: s.created_ms,
                    sealed_ms: s.sealed_ms,
                    lost_records,
                }
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
/// reopen the ones it sealed.
fn undo(topic: &mut Topic, action: &Action) {
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

fn command_broker(command: &BrokerCommand) -> Option<BrokerId> {
    match command {
        BrokerCommand::Seal { broker, .. } | BrokerCommand::DropTopic { broker, .. } => {
            Some(*broker)
        }
        BrokerCommand::Open { segment, .. } => Some(segment.broker),
    }
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

fn filer_answer(e: FilerError) -> (ErrorCode, String) {
    error_answer(ControlError::Filer(e))
}

/// The wire error for a core error.
pub fn error_answer(e: ControlError) -> (ErrorCode, String) {
    let code = match &e {
        ControlError::InvalidTopicName(_) => ErrorCode::InvalidTopicName,
        ControlError::TopicExists(_) => ErrorCode::TopicExists,
        ControlError::TopicNotFound(_) => ErrorCode::TopicNotFound,
        ControlError::SegmentNotFound { .. } => ErrorCode::SegmentNotFound,
        ControlError::InvalidSegmentCount { .. }
        | ControlError::InvalidShardCount
        | ControlError::InvalidBroker(_)
        | ControlError::BrokerNotFound(_)
        | ControlError::InvalidChange(_)
        | ControlError::InvalidPolicy(_) => ErrorCode::InvalidArgument,
        ControlError::TooManyTopics { .. }
        | ControlError::TooManyBrokers { .. }
        | ControlError::NoLiveBroker => ErrorCode::Busy,
        ControlError::Corrupt { .. } => ErrorCode::Internal,
        ControlError::Filer(_) => ErrorCode::Storage,
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
        cluster.create_topic(0, &name, 2, None).unwrap();
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
