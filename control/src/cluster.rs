//! [`Cluster`]: the control core for many brokers. Sans-IO: every input
//! is a call with `now_ms`, every decision an [`Action`] returned to the
//! caller, already applied to the core's own state.
//!
//! It owns the topics (every segment they ever had), the [`Membership`] of
//! live brokers, each open segment's [`RateWindows`], and the segments
//! whose owner is gone with no live broker to take them ("orphans"). A
//! driver feeds it registrations, leaves, load reports and a periodic
//! [`Cluster::handle_tick`], persists the topics an action changed, and
//! sends the action's [`BrokerCommand`](crate::BrokerCommand)s.
//!
//! What a tick does, in order: brokers silent for longer than
//! [`ClusterConfig::broker_silence_ms`] are dead and their open segments
//! reopen elsewhere; orphans are re-homed; each topic's
//! [`ScalingPolicy`] splits hot segments and merges cold neighbours; the
//! rebalancer moves at most one segment off a hot broker.
//!
//! After a restart of the control plane ([`Cluster::from_topics`]) every
//! open segment is an orphan until its owner registers again and claims it;
//! orphans are re-homed only once one silence period has passed since the
//! core's first call, so brokers that kept running are not disturbed.

use std::collections::{BTreeMap, BTreeSet};

use crate::action::{Action, Cause, PlacedSegment, SealedSegment};
use crate::membership::SegmentLoad;
use crate::placement::{add, BrokerLoad, Placement};
use crate::rate::{sum_windows, RateWindows, RATE_WINDOWS};
use crate::rebalancer::{hot_and_cold, propose, Movable, RebalancePolicy};
use crate::topic::NewSegment;
use crate::{
    BrokerId, BrokerInfo, ControlError, Follower, FollowerLag, InvalidChange, InvalidTopic,
    KeyRange, Membership, PolicyError, Rate, ScalingPolicy, Segment, SegmentId, SegmentState,
    Topic, TopicName, DEFAULT_REPLICAS, REPLICAS_MAX, SEGMENTS_PER_TOPIC_MAX, TOPICS_MAX,
};

/// How the core treats brokers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusterConfig {
    /// A broker not heard from (registration, load report, heartbeat) for
    /// longer than this is dead.
    pub broker_silence_ms: u64,
    /// When to move segments off hot brokers; `None` turns the rebalancer
    /// off.
    pub rebalance: Option<RebalancePolicy>,
    /// An in-sync follower whose owner reports it has not held every
    /// record the owner had for longer than this leaves the in-sync set
    /// (an `all` produce stops waiting for it); an out-of-sync one back
    /// within half of it rejoins.
    pub follower_lag_max_ms: u64,
    /// How long a follower named to seal a dead owner's segment from its
    /// copy has before the control plane seals it at the filer's end
    /// itself (counted while the filer answers; docs/control-plane.md,
    /// "Failover").
    pub sealer_wait_ms: u64,
}

/// [`ClusterConfig::sealer_wait_ms`] by default. A follower stores at most
/// `REPLICA_BUFFERS_MAX` buffers, a few seconds of uploads even to S3; a
/// follower whose broker dies meanwhile is given up on sooner, once it is
/// declared dead.
pub const SEALER_WAIT_MS: u64 = 30_000;

/// [`ClusterConfig::follower_lag_max_ms`] by default: half the default
/// broker silence, so a frozen broker stops holding up `all` produces
/// before it is declared dead.
pub const FOLLOWER_LAG_MAX_MS: u64 = 5_000;

impl Default for ClusterConfig {
    /// Dead after 10 s of silence (brokers report every second); the
    /// default rebalancer.
    fn default() -> ClusterConfig {
        ClusterConfig {
            broker_silence_ms: 10_000,
            rebalance: Some(RebalancePolicy::default()),
            follower_lag_max_ms: FOLLOWER_LAG_MAX_MS,
            sealer_wait_ms: SEALER_WAIT_MS,
        }
    }
}

type SegmentKey = (TopicName, SegmentId);

/// What a new segment inherits: its share of its predecessors' averaged
/// rates, and since when they are known (`None`: not at all).
type Seed = ([Rate; RATE_WINDOWS], Option<u64>);

/// The multi-broker control core (see the module docs).
#[derive(Debug, Clone)]
pub struct Cluster {
    config: ClusterConfig,
    membership: Membership,
    topics: BTreeMap<TopicName, Topic>,
    /// Rates of open segments that have any; missing means zero.
    rates: RateBook,
    /// Open segments whose owner is not live.
    orphans: BTreeSet<SegmentKey>,
    /// What each open segment's owner last reported of its followers'
    /// lags (one entry per open segment at most).
    follower_lags: BTreeMap<TopicName, BTreeMap<SegmentId, Vec<FollowerLag>>>,
    /// The first `now_ms` the core saw.
    started_ms: Option<u64>,
    /// When the rebalancer last moved a segment.
    last_move_ms: Option<u64>,
}

impl Cluster {
    /// A core with no topics and no brokers.
    pub fn new(config: ClusterConfig) -> Cluster {
        Cluster {
            config,
            membership: Membership::new(),
            topics: BTreeMap::new(),
            rates: RateBook::default(),
            orphans: BTreeSet::new(),
            follower_lags: BTreeMap::new(),
            started_ms: None,
            last_move_ms: None,
        }
    }

    /// A core over topics loaded from storage (each already validated by
    /// [`Topic::from_json_bytes`]). Their open segments are orphans until
    /// their owners register again.
    pub fn from_topics(
        config: ClusterConfig,
        topics: impl IntoIterator<Item = Topic>,
    ) -> Result<Cluster, ControlError> {
        let mut cluster = Cluster::new(config);
        for topic in topics {
            if cluster.topics.contains_key(topic.name()) {
                return Err(ControlError::TopicExists(topic.name().to_string()));
            }
            if cluster.topics.len() >= TOPICS_MAX {
                return Err(ControlError::TooManyTopics { max: TOPICS_MAX });
            }
            for segment in topic.open_segments() {
                cluster.orphans.insert((topic.name().clone(), segment.id));
            }
            cluster.topics.insert(topic.name().clone(), topic);
        }
        Ok(cluster)
    }

    /// The configuration.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The live brokers.
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// Topic `name`, if it exists.
    pub fn topic(&self, name: &TopicName) -> Option<&Topic> {
        self.topics.get(name)
    }

    /// Every topic, sorted by name.
    pub fn topics(&self) -> impl Iterator<Item = &Topic> {
        self.topics.values()
    }

    /// The averaged rates of an open segment, if it has any.
    pub fn segment_rates(&self, topic: &TopicName, segment: SegmentId) -> Option<&RateWindows> {
        self.rates.get(topic, segment)
    }

    /// Open segments whose owner is not live, by topic and id.
    pub fn orphans(&self) -> &BTreeSet<(TopicName, SegmentId)> {
        &self.orphans
    }

    /// A live broker's load (the sum of its open segments' rates over the
    /// shortest window) and utilization (that load as a share of its
    /// capacity).
    pub fn broker_load(&self, id: BrokerId) -> Option<(Rate, f64)> {
        self.broker_loads()
            .into_iter()
            .find(|b| b.id == id)
            .map(|b| (b.load, b.utilization()))
    }

    /// A broker registers (joins, or re-registers while live): it claims
    /// the orphaned open segments recorded as its own, and any orphans left
    /// are re-homed if the restart grace is over.
    pub fn handle_register(
        &mut self,
        now_ms: u64,
        info: BrokerInfo,
    ) -> Result<Vec<Action>, ControlError> {
        self.observe(now_ms);
        let id = info.id;
        let shard_count = info.shard_count();
        self.membership.join(now_ms, info)?;
        let claimed: Vec<(SegmentKey, u16)> = self
            .orphans
            .iter()
            .filter_map(|key| {
                let segment = self.topics.get(&key.0)?.segment(key.1)?;
                (segment.broker == Some(id) && segment.shard < shard_count)
                    .then(|| (key.clone(), segment.shard))
            })
            .collect();
        for ((topic, segment), shard) in claimed {
            self.membership.add_segment(id, &topic, segment, shard);
            self.orphans.remove(&(topic, segment));
        }
        Ok(self.rehome_orphans(now_ms))
    }

    /// A broker leaves gracefully: each of its open segments is sealed on
    /// it and reopened on another live broker, then it is forgotten. Fails,
    /// changing nothing, if it owns open segments and no other broker is
    /// live.
    pub fn handle_leave(&mut self, now_ms: u64, id: BrokerId) -> Result<Vec<Action>, ControlError> {
        self.observe(now_ms);
        let entry = self
            .membership
            .broker(id)
            .ok_or(ControlError::BrokerNotFound(id))?;
        let owned: Vec<SegmentKey> = entry.segments().iter().cloned().collect();
        if !owned.is_empty() && self.membership.len() < 2 {
            return Err(InvalidChange::LastBroker {
                broker: id,
                segments: owned.len(),
            }
            .into());
        }
        let mut placement = self.placement();
        let mut actions = Vec::with_capacity(owned.len());
        for (topic, segment) in owned {
            let action = self.move_segment_with(
                now_ms,
                &mut placement,
                &topic,
                segment,
                None,
                Cause::BrokerLeft(id),
            )?;
            actions.push(action);
        }
        self.membership.remove(id);
        Ok(actions)
    }

    /// A broker's load report: one rate per open segment it owns. Also
    /// proves the broker alive. Reports for segments it does not own (moved
    /// or sealed since) are ignored; returns how many were used.
    pub fn handle_load_report(
        &mut self,
        now_ms: u64,
        id: BrokerId,
        loads: &[SegmentLoad],
    ) -> Result<usize, ControlError> {
        self.observe(now_ms);
        if !self.membership.touch(now_ms, id) {
            return Err(ControlError::BrokerNotFound(id));
        }
        let mut used = 0;
        for load in loads {
            let Some(topic) = self.topics.get(&load.topic) else {
                continue;
            };
            let Some(segment) = topic.segment(load.segment) else {
                continue;
            };
            if !segment.is_open() || segment.broker != Some(id) {
                continue;
            }
            if !segment.followers.is_empty() {
                self.follower_lags
                    .entry(load.topic.clone())
                    .or_default()
                    .insert(load.segment, load.followers.clone());
            }
            let windows = windows_of(topic);
            // A segment created under this core had no traffic before its
            // first report; one loaded after a restart is unknown until now.
            let since_ms = if self
                .started_ms
                .is_some_and(|start| segment.created_ms >= start)
            {
                segment.created_ms.min(now_ms)
            } else {
                now_ms
            };
            let rates = self
                .rates
                .get_or_insert(&load.topic, load.segment, || RateWindows::zero(since_ms));
            if rates.record(now_ms, load.rate, &windows) {
                used += 1;
            }
        }
        Ok(used)
    }

    /// A broker says it is alive, with nothing to report.
    pub fn handle_heartbeat(&mut self, now_ms: u64, id: BrokerId) -> Result<(), ControlError> {
        self.observe(now_ms);
        if self.membership.touch(now_ms, id) {
            Ok(())
        } else {
            Err(ControlError::BrokerNotFound(id))
        }
    }

    /// The control plane did not run for `stalled_ms` up to `now_ms` (its
    /// driver blocked on the filer or the state store): no broker is
    /// counted silent for that time, since nothing it sent could be heard.
    pub fn handle_stall(&mut self, now_ms: u64, stalled_ms: u64) {
        self.observe(now_ms);
        self.membership.excuse(now_ms, stalled_ms);
    }

    /// The periodic step (see the module docs for what it does, in order).
    pub fn handle_tick(&mut self, now_ms: u64) -> Vec<Action> {
        self.observe(now_ms);
        let mut actions = Vec::new();
        for id in self
            .membership
            .silent(now_ms, self.config.broker_silence_ms)
        {
            actions.extend(self.bury(now_ms, id));
        }
        actions.extend(self.rehome_orphans(now_ms));
        actions.extend(self.repair_followers(now_ms));
        let automatic: Vec<TopicName> = self
            .topics
            .values()
            .filter(|t| t.policy().is_some_and(ScalingPolicy::is_automatic))
            .map(|t| t.name().clone())
            .collect();
        // One view of the brokers' loads for the whole pass: each split
        // and merge charges (and releases) it as it goes.
        let mut placement = self.placement();
        for name in automatic {
            actions.extend(self.scale(now_ms, &name, &mut placement));
        }
        actions.extend(self.rebalance(now_ms));
        actions
    }

    /// Create topic `name` with `segment_count` segments over equal ranges,
    /// each placed on the least-loaded live broker and kept on `replicas`
    /// brokers (0: [`Cluster::default_replicas`]), and an optional scaling
    /// policy (whose bounds must admit `segment_count`).
    pub fn create_topic(
        &mut self,
        now_ms: u64,
        name: &TopicName,
        segment_count: u32,
        replicas: u8,
        policy: Option<ScalingPolicy>,
    ) -> Result<Action, ControlError> {
        self.observe(now_ms);
        if segment_count == 0 || segment_count > SEGMENTS_PER_TOPIC_MAX {
            return Err(ControlError::InvalidSegmentCount {
                count: segment_count,
                max: SEGMENTS_PER_TOPIC_MAX,
            });
        }
        let live = self.membership.broker_ids().count();
        let replicas = match replicas {
            0 => self.default_replicas(),
            n => n,
        };
        if replicas > REPLICAS_MAX || usize::from(replicas) > live.max(1) {
            return Err(ControlError::InvalidReplicaCount {
                replicas,
                max: REPLICAS_MAX,
                live,
            });
        }
        if let Some(policy) = &policy {
            check_policy(policy, segment_count)?;
        }
        if self.topics.contains_key(name) {
            return Err(ControlError::TopicExists(name.to_string()));
        }
        if self.topics.len() >= TOPICS_MAX {
            return Err(ControlError::TooManyTopics { max: TOPICS_MAX });
        }
        if self.membership.is_empty() {
            return Err(ControlError::NoLiveBroker);
        }
        let mut placement = self.placement();
        let mut shards = ShardPicker::default();
        let mut segments = Vec::with_capacity(segment_count as usize);
        for (range, id) in KeyRange::FULL
            .split_even(segment_count)
            .into_iter()
            .zip(0..)
        {
            let broker = placement
                .pick(Rate::default(), None)
                .ok_or(ControlError::NoLiveBroker)?;
            let shard = shards.pick(&self.membership, broker, None);
            let followers = self.place_followers(
                &mut placement,
                &mut shards,
                Rate::default(),
                broker,
                usize::from(replicas - 1),
            );
            segments.push(Segment {
                id: SegmentId(id),
                epoch: 0,
                range,
                state: SegmentState::Open,
                shard,
                successors: Vec::new(),
                created_ms: now_ms,
                broker: Some(broker),
                sealed_ms: None,
                sealer: None,
                followers,
            });
        }
        let topic = Topic {
            name: name.clone(),
            segments,
            created_ms: now_ms,
            policy,
            replicas,
            follower_changes: 0,
        };
        let opened = topic.segments.iter().filter_map(placed).collect();
        for segment in &topic.segments {
            if let Some(broker) = segment.broker {
                self.membership
                    .add_segment(broker, name, segment.id, segment.shard);
            }
        }
        self.topics.insert(name.clone(), topic);
        Ok(Action::CreateTopic {
            topic: name.clone(),
            opened,
        })
    }

    /// Delete topic `name` and forget its rates.
    pub fn delete_topic(&mut self, now_ms: u64, name: &TopicName) -> Result<Action, ControlError> {
        self.observe(now_ms);
        let topic = self
            .topics
            .remove(name)
            .ok_or_else(|| ControlError::TopicNotFound(name.to_string()))?;
        let mut brokers = BTreeSet::new();
        for segment in topic.open_segments() {
            self.orphans.remove(&(name.clone(), segment.id));
            if let Some(broker) = segment.broker {
                if self.membership.is_live(broker) {
                    self.membership
                        .remove_segment(broker, name, segment.id, segment.shard);
                    brokers.insert(broker);
                }
            }
        }
        self.rates.remove_topic(name);
        Ok(Action::DeleteTopic {
            topic: name.clone(),
            brokers: brokers.into_iter().collect(),
        })
    }

    /// Set (or with `None`, clear) topic `name`'s scaling policy. Its
    /// bounds must admit the topic's current open segment count.
    pub fn set_policy(
        &mut self,
        name: &TopicName,
        policy: Option<ScalingPolicy>,
    ) -> Result<(), ControlError> {
        let topic = self
            .topics
            .get_mut(name)
            .ok_or_else(|| ControlError::TopicNotFound(name.to_string()))?;
        if let Some(policy) = &policy {
            let open = u32::try_from(topic.open_segment_count()).unwrap_or(u32::MAX);
            check_policy(policy, open)?;
        }
        topic.policy = policy;
        Ok(())
    }

    /// Split open segment `segment` of `name` into `pieces` equal ranges by
    /// hand. Obeys the topic's segment bounds but not its cooldown (an
    /// operator overrides the policy's timing, not its limits).
    pub fn split_segment(
        &mut self,
        now_ms: u64,
        name: &TopicName,
        segment: SegmentId,
        pieces: u32,
    ) -> Result<Action, ControlError> {
        self.observe(now_ms);
        let topic = self.topic_or_err(name)?;
        let (_, max) = bounds(topic);
        let open = u32::try_from(topic.open_segment_count()).unwrap_or(u32::MAX);
        if pieces < 2 || open.saturating_add(pieces - 1) > max {
            return Err(InvalidChange::SplitBounds {
                topic: name.clone(),
                pieces,
                open: open.saturating_add(pieces.saturating_sub(1)),
                max,
            }
            .into());
        }
        let mut placement = self.placement();
        self.split_with(now_ms, &mut placement, name, segment, pieces, Cause::Manual)
    }

    /// Merge adjacent open segments `a` and `b` of `name` by hand. Obeys
    /// the topic's segment bounds but not its cooldown.
    pub fn merge_segments(
        &mut self,
        now_ms: u64,
        name: &TopicName,
        a: SegmentId,
        b: SegmentId,
    ) -> Result<Action, ControlError> {
        self.observe(now_ms);
        let topic = self.topic_or_err(name)?;
        let (min, _) = bounds(topic);
        let open = u32::try_from(topic.open_segment_count()).unwrap_or(u32::MAX);
        if open <= min {
            return Err(InvalidChange::MergeBounds {
                topic: name.clone(),
                open,
                min,
            }
            .into());
        }
        let mut placement = self.placement();
        self.merge_with(now_ms, &mut placement, name, a, b, Cause::Manual)
    }

    /// Move open segment `segment` of `name` by hand: seal it and open a
    /// successor over the same range on broker `to`, or with `None` on the
    /// least-loaded other live broker.
    pub fn move_segment(
        &mut self,
        now_ms: u64,
        name: &TopicName,
        segment: SegmentId,
        to: Option<BrokerId>,
    ) -> Result<Action, ControlError> {
        self.observe(now_ms);
        if let Some(to) = to {
            if !self.membership.is_live(to) {
                return Err(ControlError::BrokerNotFound(to));
            }
        }
        let mut placement = self.placement();
        self.move_segment_with(now_ms, &mut placement, name, segment, to, Cause::Manual)
    }

    /// Check every invariant of the core: each topic is valid (ids,
    /// successors that cover what they replace, open ranges that tile the
    /// ring); each open segment is either recorded with its live owner on
    /// one of its shards or an orphan whose owner is not live; membership
    /// records exactly those segments, with matching per-shard counts; and
    /// every policy's bounds admit its topic's open count.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let mut owned: BTreeMap<BrokerId, Vec<u32>> = BTreeMap::new();
        for (name, topic) in &self.topics {
            if name != topic.name() {
                return Err(InvariantViolation::MisfiledTopic {
                    name: name.clone(),
                    holds: topic.name().clone(),
                });
            }
            topic.validate()?;
            if let Some(policy) = topic.policy() {
                let open = u32::try_from(topic.open_segment_count()).unwrap_or(u32::MAX);
                if open < policy.segments_min || open > policy.segments_max {
                    return Err(InvariantViolation::OpenOutsidePolicy {
                        topic: name.clone(),
                        open,
                        min: policy.segments_min,
                        max: policy.segments_max,
                    });
                }
            }
            for segment in topic.open_segments() {
                let key = (name.clone(), segment.id);
                let live = segment
                    .broker
                    .and_then(|b| self.membership.broker(b).map(|e| (b, e)));
                match live {
                    Some((broker, entry)) if !self.orphans.contains(&key) => {
                        if !entry.segments().contains(&key) {
                            return Err(InvariantViolation::UnrecordedSegment {
                                topic: name.clone(),
                                segment: segment.id,
                                broker,
                            });
                        }
                        let counts = owned
                            .entry(broker)
                            .or_insert_with(|| vec![0; entry.segments_per_shard().len()]);
                        let Some(count) = counts.get_mut(usize::from(segment.shard)) else {
                            return Err(InvariantViolation::NoSuchShard {
                                topic: name.clone(),
                                segment: segment.id,
                                shard: segment.shard,
                                broker,
                                shards: counts.len(),
                            });
                        };
                        *count += 1;
                    }
                    Some((broker, _)) => {
                        return Err(InvariantViolation::LiveOrphan {
                            topic: name.clone(),
                            segment: segment.id,
                            broker,
                        })
                    }
                    None if !self.orphans.contains(&key) => {
                        return Err(InvariantViolation::Ownerless {
                            topic: name.clone(),
                            segment: segment.id,
                        })
                    }
                    None => {}
                }
            }
        }
        for (id, entry) in self.membership.brokers() {
            let counted: u32 = owned.get(id).map_or(0, |c| c.iter().sum());
            if entry.segments().len() != counted as usize {
                return Err(InvariantViolation::SegmentCount {
                    broker: *id,
                    recorded: entry.segments().len(),
                    counted,
                });
            }
            let expected = owned
                .get(id)
                .cloned()
                .unwrap_or_else(|| vec![0; entry.segments_per_shard().len()]);
            if entry.segments_per_shard() != expected.as_slice() {
                return Err(InvariantViolation::ShardCounts {
                    broker: *id,
                    recorded: entry.segments_per_shard().to_vec(),
                    counted: expected,
                });
            }
        }
        for (topic, segment) in &self.orphans {
            let open = self
                .topics
                .get(topic)
                .and_then(|t| t.segment(*segment))
                .is_some_and(Segment::is_open);
            if !open {
                return Err(InvariantViolation::OrphanNotOpen {
                    topic: topic.clone(),
                    segment: *segment,
                });
            }
        }
        Ok(())
    }

    fn observe(&mut self, now_ms: u64) {
        self.started_ms.get_or_insert(now_ms);
    }

    fn topic_or_err(&self, name: &TopicName) -> Result<&Topic, ControlError> {
        self.topics
            .get(name)
            .ok_or_else(|| ControlError::TopicNotFound(name.to_string()))
    }

    fn open_segment_or_err(
        &self,
        name: &TopicName,
        id: SegmentId,
    ) -> Result<&Segment, ControlError> {
        let segment =
            self.topic_or_err(name)?
                .segment(id)
                .ok_or_else(|| ControlError::SegmentNotFound {
                    topic: name.to_string(),
                    segment: id,
                })?;
        if !segment.is_open() {
            return Err(InvalidChange::Sealed {
                topic: name.clone(),
                segment: id,
            }
            .into());
        }
        Ok(segment)
    }

    /// The rate of an open segment over the shortest window (zero if none
    /// reported).
    fn rate(&self, key: &SegmentKey) -> Rate {
        self.rates
            .get(&key.0, key.1)
            .map(|r| r.window(0))
            .unwrap_or_default()
    }

    fn seed(&self, key: &SegmentKey) -> Seed {
        self.rates
            .get(&key.0, key.1)
            .map_or(([Rate::default(); RATE_WINDOWS], None), |r| {
                (r.windows(), Some(r.since_ms()))
            })
    }

    fn broker_loads(&self) -> Vec<BrokerLoad> {
        self.membership
            .brokers()
            .map(|(id, entry)| BrokerLoad {
                id: *id,
                capacity: entry.info().capacity,
                load: entry
                    .segments()
                    .iter()
                    .fold(Rate::default(), |sum, key| add(sum, self.rate(key))),
                segments: entry.segments().len() as u64,
            })
            .collect()
    }

    fn placement(&self) -> Placement {
        let mut placement = Placement::new(self.broker_loads());
        for topic in self.topics.values() {
            for segment in topic.open_segments() {
                for follower in &segment.followers {
                    placement.add_follower(follower.broker);
                }
            }
        }
        placement
    }

    /// How many brokers keep a new topic's segments when its creator does
    /// not say: [`DEFAULT_REPLICAS`] while at least that many brokers are
    /// live, else 1 (a lone broker has nowhere to copy to). The count is
    /// the topic's for good: brokers that join later get followers placed
    /// only for topics that asked for them.
    pub fn default_replicas(&self) -> u8 {
        if self.membership.broker_ids().count() >= usize::from(DEFAULT_REPLICAS) {
            DEFAULT_REPLICAS
        } else {
            1
        }
    }

    /// Up to `count` followers for a new segment owned by `owner`, on
    /// other live brokers (fewer if fewer are live), each on its broker's
    /// least-loaded shard. A new segment holds nothing yet, so each starts
    /// in sync.
    fn place_followers(
        &self,
        placement: &mut Placement,
        shards: &mut ShardPicker,
        expected: Rate,
        owner: BrokerId,
        count: usize,
    ) -> Vec<Follower> {
        placement
            .pick_followers(expected, &[owner], count)
            .into_iter()
            .map(|broker| Follower {
                broker,
                shard: shards.pick(&self.membership, broker, None),
                in_sync: true,
            })
            .collect()
    }

    /// Broker `id` went silent: forget it and reopen its segments on live
    /// brokers (or leave them orphaned if none is live).
    fn bury(&mut self, now_ms: u64, id: BrokerId) -> Vec<Action> {
        let Some(entry) = self.membership.remove(id) else {
            return Vec::new();
        };
        self.orphans.extend(entry.segments().iter().cloned());
        self.rehome(now_ms, entry.segments(), Cause::BrokerDied(id))
    }

    /// Whether one silence period has passed since the first tick: before
    /// it, a broker not registered may just not have reported since the
    /// control plane started.
    pub fn restart_grace_over(&self, now_ms: u64) -> bool {
        self.started_ms
            .is_some_and(|start| now_ms.saturating_sub(start) >= self.config.broker_silence_ms)
    }

    /// Re-home every orphan, once the restart grace is over.
    fn rehome_orphans(&mut self, now_ms: u64) -> Vec<Action> {
        let grace_over = self.restart_grace_over(now_ms);
        if !grace_over || self.orphans.is_empty() || self.membership.is_empty() {
            return Vec::new();
        }
        let orphans = self.orphans.clone();
        self.rehome(now_ms, &orphans, Cause::Orphaned)
    }

    /// Take followers out of the in-sync set or back by their owners'
    /// reports (see [`sync_change`]); and once the restart grace is over,
    /// drop every open segment's followers on brokers that are not live,
    /// and place followers (out of sync: they start from the owner's
    /// stored end) until each open segment has its topic's replicas, as
    /// far as live brokers allow. One [`Action::Followers`] per topic
    /// changed.
    fn repair_followers(&mut self, now_ms: u64) -> Vec<Action> {
        // Before it, a broker not registered yet may just not have
        // reported since the restart.
        let grace_over = self.restart_grace_over(now_ms);
        if self.membership.is_empty() {
            return Vec::new();
        }
        let live = self.membership.broker_ids().count();
        // Reports of segments no longer open are of no use.
        let topics = &self.topics;
        self.follower_lags.retain(|topic, segments| {
            let Some(t) = topics.get(topic) else {
                return false;
            };
            segments.retain(|id, _| t.segment(*id).is_some_and(Segment::is_open));
            !segments.is_empty()
        });
        let (membership, lags) = (&self.membership, &self.follower_lags);
        let lag_max_ms = self.config.follower_lag_max_ms;
        let in_sync_due = |topic: &TopicName, segment: SegmentId, f: &Follower| {
            let lag = lags
                .get(topic)?
                .get(&segment)?
                .iter()
                .find(|l| l.broker == f.broker)?
                .lag_ms;
            sync_change(f.in_sync, lag, lag_max_ms)
        };
        let short = |topic: &Topic, s: &Segment| {
            let wanted = usize::from(topic.replicas().saturating_sub(1)).min(live - 1);
            let placing = grace_over
                && (s.followers.len() < wanted
                    || s.followers.iter().any(|f| !membership.is_live(f.broker)));
            s.broker.is_some_and(|owner| membership.is_live(owner))
                && (placing
                    || s.followers
                        .iter()
                        .any(|f| in_sync_due(topic.name(), s.id, f).is_some()))
        };
        let due: Vec<TopicName> = self
            .topics
            .values()
            .filter(|t| t.open_segments().any(|s| short(t, s)))
            .map(|t| t.name().clone())
            .collect();
        if due.is_empty() {
            return Vec::new();
        }
        let mut placement = self.placement();
        let mut shards = ShardPicker::default();
        let mut actions = Vec::new();
        for name in due {
            let Some(topic) = self.topics.get(&name) else {
                continue;
            };
            let wanted = usize::from(topic.replicas().saturating_sub(1)).min(live - 1);
            let mut changes: Vec<(SegmentId, Vec<Follower>, Vec<Follower>)> = Vec::new();
            for segment in topic.open_segments().filter(|s| short(topic, s)) {
                let Some(owner) = segment.broker else {
                    continue;
                };
                let mut kept: Vec<Follower> = segment
                    .followers
                    .iter()
                    .filter(|f| !grace_over || membership.is_live(f.broker))
                    .map(|f| Follower {
                        in_sync: in_sync_due(&name, segment.id, f).unwrap_or(f.in_sync),
                        ..*f
                    })
                    .collect();
                let expected = self
                    .rates
                    .get(&name, segment.id)
                    .map(|r| r.window(0))
                    .unwrap_or_default();
                let mut avoid: Vec<BrokerId> = kept.iter().map(|f| f.broker).collect();
                avoid.push(owner);
                let missing = if grace_over {
                    wanted.saturating_sub(kept.len())
                } else {
                    0
                };
                for broker in placement.pick_followers(expected, &avoid, missing) {
                    kept.push(Follower {
                        broker,
                        shard: shards.pick(membership, broker, None),
                        in_sync: false,
                    });
                }
                changes.push((segment.id, segment.followers.clone(), kept));
            }
            let Some(topic) = self.topics.get_mut(&name) else {
                continue;
            };
            let mut before = Vec::with_capacity(changes.len());
            for (id, old, new) in changes {
                if let Some(segment) = topic.segments.iter_mut().find(|s| s.id == id) {
                    segment.followers = new;
                    before.push((id, old));
                }
            }
            topic.follower_changes += 1;
            debug_assert_eq!(topic.validate(), Ok(()));
            // Every live broker hears of it, as of a seal: any of them may
            // hold the topic's layout (an owner, a follower, one told of
            // an earlier seal), and a layout a broker holds is never left
            // stale.
            actions.push(Action::Followers {
                topic: name,
                before,
                brokers: self.membership.broker_ids().collect(),
            });
        }
        actions
    }

    /// Move each of `segments` (orphans) to a live broker.
    fn rehome(
        &mut self,
        now_ms: u64,
        segments: &BTreeSet<SegmentKey>,
        cause: Cause,
    ) -> Vec<Action> {
        let mut placement = self.placement();
        let mut actions = Vec::new();
        for (topic, segment) in segments {
            match self.move_segment_with(now_ms, &mut placement, topic, *segment, None, cause) {
                Ok(action) => actions.push(action),
                // No live broker: it stays an orphan.
                Err(ControlError::NoLiveBroker) => break,
                Err(e) => debug_assert!(false, "re-homing {topic}/{segment}: {e}"),
            }
        }
        actions
    }

    /// Apply the topic's policy: split hot segments, then merge cold
    /// neighbours, never touching a segment within its cooldown or
    /// leaving the open count outside the bounds.
    fn scale(&mut self, now_ms: u64, name: &TopicName, placement: &mut Placement) -> Vec<Action> {
        let Some(topic) = self.topics.get(name) else {
            return Vec::new();
        };
        let Some(policy) = topic.policy().copied() else {
            return Vec::new();
        };
        let mut open = u32::try_from(topic.open_segment_count()).unwrap_or(u32::MAX);
        let mut actions = Vec::new();
        let mut splits = Vec::new();
        for segment in topic.open_segments() {
            if !policy.cooled_down(now_ms, segment.created_ms) {
                continue;
            }
            let Some(rates) = self.rates.get(name, segment.id) else {
                continue;
            };
            if now_ms.saturating_sub(rates.since_ms()) < policy.windows_ms[0] {
                continue;
            }
            let Some(wanted) = policy.split_pieces(&policy.load_factors(rates)) else {
                continue;
            };
            let room = policy.segments_max.saturating_sub(open).saturating_add(1);
            let pieces = wanted
                .min(room)
                .min(u32::try_from(segment.range.len()).unwrap_or(u32::MAX));
            if pieces >= 2 {
                splits.push((segment.id, pieces));
                open += pieces - 1;
            }
        }
        let mut touched = BTreeSet::new();
        for (segment, pieces) in splits {
            match self.split_with(now_ms, placement, name, segment, pieces, Cause::Policy) {
                Ok(action) => {
                    touched.extend(action.opened().iter().map(|p| p.segment));
                    actions.push(action);
                }
                Err(ControlError::NoLiveBroker) => return actions,
                Err(e) => debug_assert!(false, "policy split of {name}/{segment}: {e}"),
            }
        }
        let Some(topic) = self.topics.get(name) else {
            return actions;
        };
        let mut by_range: Vec<&Segment> = topic.open_segments().collect();
        by_range.sort_by_key(|s| s.range);
        // Merging needs a longest window's worth of reports: a segment
        // nobody reported on (or not for long) is not known to be cold.
        let cold = |s: &Segment| {
            !touched.contains(&s.id)
                && policy.cooled_down(now_ms, s.created_ms)
                && self.rates.get(name, s.id).is_some_and(|rates| {
                    now_ms.saturating_sub(rates.since_ms()) >= policy.windows_ms[3]
                        && policy.wants_merge(&policy.load_factors(rates))
                })
        };
        let mut merges = Vec::new();
        let mut i = 0;
        while i + 1 < by_range.len() {
            if open > policy.segments_min && cold(by_range[i]) && cold(by_range[i + 1]) {
                merges.push((by_range[i].id, by_range[i + 1].id));
                open -= 1;
                i += 2;
            } else {
                i += 1;
            }
        }
        for (a, b) in merges {
            match self.merge_with(now_ms, placement, name, a, b, Cause::Policy) {
                Ok(action) => actions.push(action),
                Err(ControlError::NoLiveBroker) => return actions,
                Err(e) => debug_assert!(false, "policy merge of {name}/{a}+{b}: {e}"),
            }
        }
        actions
    }

    /// Let the rebalancer move at most one segment.
    fn rebalance(&mut self, now_ms: u64) -> Option<Action> {
        let policy = self.config.rebalance?;
        let brokers = self.broker_loads();
        // Only the hot broker's segments are candidates.
        let (hot, _) = hot_and_cold(&policy, now_ms, self.last_move_ms, &brokers)?;
        let mut keys = Vec::new();
        let mut movable = Vec::new();
        for key in self.membership.broker(hot)?.segments() {
            let Some(segment) = self.topics.get(&key.0).and_then(|t| t.segment(key.1)) else {
                continue;
            };
            keys.push(key);
            movable.push(Movable {
                broker: hot,
                rate: self.rate(key),
                created_ms: segment.created_ms,
            });
        }
        let (index, _, to) = propose(&policy, now_ms, self.last_move_ms, &brokers, &movable)?;
        let (topic, segment) = (*keys.get(index)?).clone();
        let mut placement = Placement::new(brokers);
        let action = self
            .move_segment_with(
                now_ms,
                &mut placement,
                &topic,
                segment,
                Some(to),
                Cause::Rebalance,
            )
            .ok()?;
        self.last_move_ms = Some(now_ms);
        Some(action)
    }

    fn split_with(
        &mut self,
        now_ms: u64,
        placement: &mut Placement,
        name: &TopicName,
        id: SegmentId,
        pieces: u32,
        cause: Cause,
    ) -> Result<Action, ControlError> {
        let segment = self.open_segment_or_err(name, id)?;
        let ranges = segment.range.split_even(pieces);
        if ranges.len() < 2 {
            return Err(InvalidChange::CannotCut {
                topic: name.clone(),
                segment: id,
                range: segment.range,
                pieces,
            }
            .into());
        }
        let key = (name.clone(), id);
        let seed: Seed = self
            .rates
            .get(name, id)
            .map_or(([Rate::default(); RATE_WINDOWS], None), |r| {
                (r.share(1, u64::from(pieces)), Some(r.since_ms()))
            });
        if let Some(owner) = segment.broker {
            placement.release(owner, self.rate(&key));
        }
        let mut new = Vec::with_capacity(ranges.len());
        for range in ranges {
            let broker = placement
                .pick(seed.0[0], None)
                .ok_or(ControlError::NoLiveBroker)?;
            new.push((range, broker, seed));
        }
        let (sealed, opened) = self.replace(now_ms, name, &[id], new)?;
        Ok(Action::Split {
            topic: name.clone(),
            sealed: sealed[0],
            opened,
            cause,
        })
    }

    fn merge_with(
        &mut self,
        now_ms: u64,
        placement: &mut Placement,
        name: &TopicName,
        a: SegmentId,
        b: SegmentId,
        cause: Cause,
    ) -> Result<Action, ControlError> {
        let first = self.open_segment_or_err(name, a)?.range;
        let second = self.open_segment_or_err(name, b)?.range;
        let (low, high, ids) = if first < second {
            (first, second, [a, b])
        } else {
            (second, first, [b, a])
        };
        if low.end() != u64::from(high.start()) {
            return Err(InvalidChange::NotAdjacent {
                topic: name.clone(),
                a,
                a_range: first,
                b,
                b_range: second,
            }
            .into());
        }
        let range = KeyRange::new(low.start(), high.end()).ok_or_else(|| {
            ControlError::from(InvalidChange::CannotJoin {
                topic: name.clone(),
                low,
                high,
            })
        })?;
        for id in [a, b] {
            let key = (name.clone(), id);
            if let Some(owner) = self.topic_or_err(name)?.segment(id).and_then(|s| s.broker) {
                placement.release(owner, self.rate(&key));
            }
        }
        let (rates_a, since_a) = self.seed(&(name.clone(), a));
        let (rates_b, since_b) = self.seed(&(name.clone(), b));
        let seed = (
            sum_windows(rates_a, rates_b),
            since_a.zip(since_b).map(|(x, y)| x.max(y)),
        );
        let broker = placement
            .pick(seed.0[0], None)
            .ok_or(ControlError::NoLiveBroker)?;
        let (sealed, opened) = self.replace(now_ms, name, &ids, vec![(range, broker, seed)])?;
        Ok(Action::Merge {
            topic: name.clone(),
            sealed: [sealed[0], sealed[1]],
            opened: opened[0],
            cause,
        })
    }

    fn move_segment_with(
        &mut self,
        now_ms: u64,
        placement: &mut Placement,
        name: &TopicName,
        id: SegmentId,
        to: Option<BrokerId>,
        cause: Cause,
    ) -> Result<Action, ControlError> {
        let segment = self.open_segment_or_err(name, id)?;
        let range = segment.range;
        let from = segment.broker.filter(|b| self.membership.is_live(*b));
        let seed = self.seed(&(name.clone(), id));
        if let Some(owner) = from {
            placement.release(owner, seed.0[0]);
        }
        let broker = match to {
            Some(to) => to,
            // Another broker, else another shard of the same one: on a lone
            // broker, shards take the role of brokers.
            None => match placement.pick(seed.0[0], from) {
                Some(broker) => broker,
                None => from
                    .filter(|b| self.membership.shard_count(*b) > 1)
                    .ok_or(ControlError::NoLiveBroker)?,
            },
        };
        let (sealed, opened) = self.replace(now_ms, name, &[id], vec![(range, broker, seed)])?;
        Ok(Action::Move {
            topic: name.clone(),
            sealed: sealed[0],
            opened: opened[0],
            cause,
        })
    }

    /// Seal `sealed` and open `new` (range, live broker, rate seed) in
    /// their place, keeping membership, rates and orphans in step. On `Err`
    /// nothing changed.
    fn replace(
        &mut self,
        now_ms: u64,
        name: &TopicName,
        sealed: &[SegmentId],
        new: Vec<(KeyRange, BrokerId, Seed)>,
    ) -> Result<(Vec<SealedSegment>, Vec<PlacedSegment>), ControlError> {
        let topic = self
            .topics
            .get(name)
            .ok_or_else(|| ControlError::TopicNotFound(name.to_string()))?;
        let owners: Vec<(SegmentId, Option<BrokerId>, u16)> = sealed
            .iter()
            .filter_map(|id| topic.segment(*id).map(|s| (*id, s.broker, s.shard)))
            .collect();
        // The sealed segments leave their shards before the new ones are
        // placed; a segment moved within its broker goes to another shard.
        let mut shards = ShardPicker::default();
        for (_, broker, shard) in &owners {
            if let Some(b) = broker.filter(|b| self.membership.is_live(*b)) {
                shards.release(&self.membership, b, *shard);
            }
        }
        let avoid = match (owners.as_slice(), new.as_slice()) {
            ([(_, Some(from), shard)], [(_, to, _)]) if from == to => Some(*shard),
            _ => None,
        };
        let followers = usize::from(topic.replicas().saturating_sub(1));
        let mut placement = self.placement();
        let mut pieces = Vec::with_capacity(new.len());
        for (range, broker, seed) in &new {
            if !self.membership.is_live(*broker) {
                return Err(ControlError::BrokerNotFound(*broker));
            }
            let shard = shards.pick(&self.membership, *broker, avoid);
            let expected = seed.0.first().copied().unwrap_or_default();
            pieces.push(NewSegment {
                range: *range,
                broker: Some(*broker),
                shard,
                followers: self.place_followers(
                    &mut placement,
                    &mut shards,
                    expected,
                    *broker,
                    followers,
                ),
            });
        }
        let topic = self
            .topics
            .get_mut(name)
            .ok_or_else(|| ControlError::TopicNotFound(name.to_string()))?;
        let ids = topic.replace(now_ms, sealed, &pieces)?;
        let mut sealed_out = Vec::with_capacity(owners.len());
        for (id, broker, shard) in owners {
            self.rates.remove(name, id);
            self.orphans.remove(&(name.clone(), id));
            let live = broker.filter(|b| self.membership.is_live(*b));
            if let Some(b) = live {
                self.membership.remove_segment(b, name, id, shard);
            }
            let mut sealer = None;
            if let Some(segment) = topic.segments.iter_mut().find(|s| s.id == id) {
                if live.is_none() {
                    let lags = self
                        .follower_lags
                        .get(name)
                        .and_then(|t| t.get(&id))
                        .map_or(&[][..], Vec::as_slice);
                    sealer = pick_sealer(&segment.followers, lags, &self.membership);
                    segment.sealer = sealer;
                }
            }
            let epoch = topic.segment(id).map_or(0, |s| s.epoch);
            sealed_out.push(SealedSegment {
                segment: id,
                epoch,
                broker: live,
                shard,
                sealer,
            });
        }
        // `replace` returns ids in range order; `new` may not be sorted.
        let mut seeds: Vec<(KeyRange, Seed)> =
            new.iter().map(|(range, _, seed)| (*range, *seed)).collect();
        seeds.sort_by_key(|(range, _)| *range);
        let mut opened = Vec::with_capacity(ids.len());
        for (id, (_, seed)) in ids.iter().zip(seeds) {
            let Some(segment) = topic.segment(*id) else {
                continue;
            };
            if let Some(p) = placed(segment) {
                self.membership.add_segment(p.broker, name, *id, p.shard);
                opened.push(p);
            }
            let mut rates = RateWindows::new(now_ms, seed.0);
            if let Some(since_ms) = seed.1 {
                rates = rates.known_since(since_ms);
            }
            self.rates.insert(name, *id, rates);
        }
        Ok((sealed_out, opened))
    }
}

/// The follower whose copy seals a segment whose owner is gone: the first
/// in-sync one on a live broker (it holds every record an `all` produce
/// was answered for), else the live one the owner last reported least
/// behind (with none in sync, `all` waits for at least one follower, the
/// furthest: docs/broker.md "Followers"), else none (the control plane
/// seals it at the filer's end).
fn pick_sealer(
    followers: &[Follower],
    lags: &[FollowerLag],
    membership: &Membership,
) -> Option<BrokerId> {
    let live = |f: &&Follower| membership.is_live(f.broker);
    let lag = |f: &&Follower| {
        lags.iter()
            .find(|l| l.broker == f.broker)
            .map_or(u64::MAX, |l| l.lag_ms)
    };
    followers
        .iter()
        .filter(live)
        .find(|f| f.in_sync)
        .or_else(|| followers.iter().filter(live).min_by_key(lag))
        .map(|f| f.broker)
}

/// Every open segment's averaged rates, by topic then segment (so a lookup
/// needs no owned key).
#[derive(Debug, Clone, Default)]
struct RateBook {
    by_topic: BTreeMap<TopicName, BTreeMap<SegmentId, RateWindows>>,
}

impl RateBook {
    fn get(&self, topic: &TopicName, segment: SegmentId) -> Option<&RateWindows> {
        self.by_topic.get(topic)?.get(&segment)
    }

    fn get_or_insert(
        &mut self,
        topic: &TopicName,
        segment: SegmentId,
        make: impl FnOnce() -> RateWindows,
    ) -> &mut RateWindows {
        if !self.by_topic.contains_key(topic) {
            self.by_topic.insert(topic.clone(), BTreeMap::new());
        }
        self.by_topic
            .get_mut(topic)
            .expect("inserted above")
            .entry(segment)
            .or_insert_with(make)
    }

    fn insert(&mut self, topic: &TopicName, segment: SegmentId, rates: RateWindows) {
        if let Some(segments) = self.by_topic.get_mut(topic) {
            segments.insert(segment, rates);
        } else {
            self.by_topic
                .insert(topic.clone(), BTreeMap::from([(segment, rates)]));
        }
    }

    fn remove(&mut self, topic: &TopicName, segment: SegmentId) {
        if let Some(segments) = self.by_topic.get_mut(topic) {
            segments.remove(&segment);
            if segments.is_empty() {
                self.by_topic.remove(topic);
            }
        }
    }

    fn remove_topic(&mut self, topic: &TopicName) {
        self.by_topic.remove(topic);
    }
}

/// Picks shards on brokers for a batch of new segments: the least-loaded
/// shard, counting the batch's earlier picks.
#[derive(Default)]
struct ShardPicker {
    counts: BTreeMap<BrokerId, Vec<u32>>,
}

impl ShardPicker {
    /// The least-loaded shard of `broker` (lowest index on a tie), other
    /// than `avoid` if the broker has another; counted as one more.
    fn pick(&mut self, membership: &Membership, broker: BrokerId, avoid: Option<u16>) -> u16 {
        let counts = self.counts_of(membership, broker);
        let shard = (0..counts.len())
            .filter(|i| counts.len() < 2 || Some(*i) != avoid.map(usize::from))
            .min_by_key(|i| (counts[*i], *i))
            .unwrap_or(0);
        counts[shard] += 1;
        u16::try_from(shard).unwrap_or(0)
    }

    /// Count one segment fewer on `shard` of `broker` (one being sealed).
    fn release(&mut self, membership: &Membership, broker: BrokerId, shard: u16) {
        if let Some(count) = self
            .counts_of(membership, broker)
            .get_mut(usize::from(shard))
        {
            *count = count.saturating_sub(1);
        }
    }

    fn counts_of(&mut self, membership: &Membership, broker: BrokerId) -> &mut Vec<u32> {
        self.counts.entry(broker).or_insert_with(|| {
            membership
                .broker(broker)
                .map(|e| e.segments_per_shard().to_vec())
                .unwrap_or_else(|| vec![0])
        })
    }
}

/// An open segment with a broker, as an [`Action`] names it.
fn placed(segment: &Segment) -> Option<PlacedSegment> {
    Some(PlacedSegment {
        segment: segment.id,
        epoch: segment.epoch,
        range: segment.range,
        broker: segment.broker?,
        shard: segment.shard,
    })
}

/// The windows a topic's rates are averaged over.
fn windows_of(topic: &Topic) -> [u64; RATE_WINDOWS] {
    topic.policy().copied().unwrap_or_default().windows_ms
}

/// The topic's open-segment bounds: its policy's, or 1..=max.
fn bounds(topic: &Topic) -> (u32, u32) {
    topic.policy().map_or((1, SEGMENTS_PER_TOPIC_MAX), |p| {
        (p.segments_min, p.segments_max)
    })
}

fn check_policy(policy: &ScalingPolicy, open: u32) -> Result<(), ControlError> {
    policy.validate()?;
    if open < policy.segments_min || open > policy.segments_max {
        return Err(ControlError::InvalidPolicy(
            PolicyError::OpenSegmentsOutside {
                open,
                min: policy.segments_min,
                max: policy.segments_max,
            },
        ));
    }
    Ok(())
}

/// An invariant of the core that does not hold
/// ([`Cluster::check_invariants`]): a bug, never an input error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvariantViolation {
    /// A topic kept under another topic's name.
    #[error("topic {holds} stored under name {name}")]
    MisfiledTopic {
        /// The name it is kept under.
        name: TopicName,
        /// The topic's own name.
        holds: TopicName,
    },
    /// A topic breaks a topic invariant.
    #[error(transparent)]
    Topic(#[from] InvalidTopic),
    /// A topic has more or fewer open segments than its policy admits.
    #[error("topic {topic}: {open} open segments outside {min}..={max}")]
    OpenOutsidePolicy {
        /// The topic.
        topic: TopicName,
        /// Its open segments.
        open: u32,
        /// Its policy's `segments_min`.
        min: u32,
        /// Its policy's `segments_max`.
        max: u32,
    },
    /// An open segment of a live broker that the broker's records lack.
    #[error("topic {topic}: segment {segment} of live broker {broker} not in its records")]
    UnrecordedSegment {
        /// The topic.
        topic: TopicName,
        /// The segment.
        segment: SegmentId,
        /// Its owner.
        broker: BrokerId,
    },
    /// An open segment on a shard its broker does not have.
    #[error(
        "topic {topic}: segment {segment} on shard {shard} of broker {broker} with {shards} shards"
    )]
    NoSuchShard {
        /// The topic.
        topic: TopicName,
        /// The segment.
        segment: SegmentId,
        /// The shard it names.
        shard: u16,
        /// Its owner.
        broker: BrokerId,
        /// The shards the owner has.
        shards: usize,
    },
    /// An orphan whose owner is live and owns it.
    #[error(
        "topic {topic}: segment {segment} is an orphan but broker {broker} is live and owns it"
    )]
    LiveOrphan {
        /// The topic.
        topic: TopicName,
        /// The segment.
        segment: SegmentId,
        /// Its live owner.
        broker: BrokerId,
    },
    /// An open segment with no live owner that is not an orphan.
    #[error("topic {topic}: segment {segment} has no live owner and is not an orphan")]
    Ownerless {
        /// The topic.
        topic: TopicName,
        /// The segment.
        segment: SegmentId,
    },
    /// A broker's records hold another number of open segments than the
    /// topics give it.
    #[error("broker {broker} records {recorded} open segments, the topics give it {counted}")]
    SegmentCount {
        /// The broker.
        broker: BrokerId,
        /// The open segments its records hold.
        recorded: usize,
        /// The open segments the topics give it.
        counted: u32,
    },
    /// A broker's per-shard counts differ from the topics'.
    #[error(
        "broker {broker} counts {recorded:?} open segments per shard, the topics give {counted:?}"
    )]
    ShardCounts {
        /// The broker.
        broker: BrokerId,
        /// Its recorded count per shard.
        recorded: Vec<u32>,
        /// The topics' count per shard.
        counted: Vec<u32>,
    },
    /// An orphan that is not an open segment of its topic.
    #[error("orphan {topic}/{segment} is not an open segment")]
    OrphanNotOpen {
        /// The topic.
        topic: TopicName,
        /// The segment.
        segment: SegmentId,
    },
}

/// Whether a follower now `in_sync` whose owner reports `lag_ms` should
/// change (`None`: stay as it is): one in sync whose lag passed `max_ms`
/// ([`ClusterConfig::follower_lag_max_ms`]) leaves, one out of sync back
/// within half of it rejoins (the gap keeps a follower near the limit from
/// flapping).
fn sync_change(in_sync: bool, lag_ms: u64, max_ms: u64) -> Option<bool> {
    match in_sync {
        true if lag_ms > max_ms => Some(false),
        false if lag_ms <= max_ms / 2 => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{BrokerCommand, Capacity};

    fn name(text: &str) -> TopicName {
        TopicName::parse(text).unwrap()
    }

    fn info(id: u32, shards: usize) -> BrokerInfo {
        BrokerInfo {
            id: BrokerId(id),
            shard_addresses: (0..shards)
                .map(|s| format!("10.0.0.{id}:{}", 7000 + s))
                .collect(),
            capacity: Capacity {
                bytes_per_s: 1_000_000,
                records_per_s: 10_000,
            },
        }
    }

    fn rate(bytes_per_s: u64) -> Rate {
        Rate {
            bytes_per_s,
            records_per_s: 0,
        }
    }

    /// A core with brokers 1..=n (two shards each), no rebalancer.
    fn cluster(brokers: u32) -> Cluster {
        let mut c = Cluster::new(ClusterConfig {
            broker_silence_ms: 3_000,
            rebalance: None,
            follower_lag_max_ms: FOLLOWER_LAG_MAX_MS,
            sealer_wait_ms: SEALER_WAIT_MS,
        });
        for id in 1..=brokers {
            assert!(c.handle_register(0, info(id, 2)).unwrap().is_empty());
        }
        c
    }

    fn policy() -> ScalingPolicy {
        ScalingPolicy {
            target: rate(1_000),
            windows_ms: [1_000, 2_000, 4_000, 8_000],
            cooldown_ms: 5_000,
            segments_min: 1,
            segments_max: 4,
            split_pieces_max: 2,
        }
    }

    fn owners(c: &Cluster, topic: &TopicName) -> Vec<(u32, u32, u16)> {
        c.topic(topic)
            .unwrap()
            .open_segments()
            .map(|s| (s.id.0, s.broker.unwrap().0, s.shard))
            .collect()
    }

    /// Every live broker reports `bytes_per_s` for every open segment it owns.
    fn report_all(c: &mut Cluster, now_ms: u64, bytes_per_s: u64) {
        let brokers: Vec<BrokerId> = c.membership().brokers().map(|(id, _)| *id).collect();
        for id in brokers {
            let loads: Vec<SegmentLoad> = c
                .membership()
                .broker(id)
                .unwrap()
                .segments()
                .iter()
                .map(|(topic, segment)| SegmentLoad {
                    topic: topic.clone(),
                    segment: *segment,
                    rate: rate(bytes_per_s),
                    followers: Vec::new(),
                })
                .collect();
            c.handle_load_report(now_ms, id, &loads).unwrap();
        }
    }

    #[test]
    fn a_lone_broker_splits_moves_and_merges_over_its_shards() {
        let mut c = cluster(1);
        let t = name("ns/t");
        c.create_topic(0, &t, 1, 1, None).unwrap();
        assert_eq!(owners(&c, &t), [(0, 1, 0)]);
        // Split: the parent leaves shard 0, so the pieces take both shards.
        let split = c.split_segment(10, &t, SegmentId(0), 2).unwrap();
        assert_eq!(split.opened().len(), 2);
        assert_eq!(owners(&c, &t), [(1, 1, 0), (2, 1, 1)]);
        // Move with no other broker: another shard of the same one.
        c.move_segment(20, &t, SegmentId(2), None).unwrap();
        assert_eq!(owners(&c, &t), [(1, 1, 0), (3, 1, 0)]);
        c.move_segment(30, &t, SegmentId(3), Some(BrokerId(1)))
            .unwrap();
        assert_eq!(owners(&c, &t), [(1, 1, 0), (4, 1, 1)]);
        // Merge: one segment again, on the emptier shard.
        c.merge_segments(40, &t, SegmentId(1), SegmentId(4))
            .unwrap();
        assert_eq!(owners(&c, &t), [(5, 1, 0)]);
        c.check_invariants().unwrap();
        // A policy split under load spreads the pieces over both shards too.
        let hot = name("ns/hot");
        c.create_topic(50, &hot, 1, 1, Some(policy())).unwrap();
        let mut split = Vec::new();
        for now in (1_000..20_000).step_by(1_000) {
            report_all(&mut c, now, 5_000);
            split.extend(c.handle_tick(now));
            if !split.is_empty() {
                break;
            }
        }
        assert_eq!(split.len(), 1, "{split:?}");
        assert_eq!(split[0].cause(), Cause::Policy);
        let shards: BTreeSet<u16> = owners(&c, &hot).iter().map(|o| o.2).collect();
        assert_eq!(shards, BTreeSet::from([0, 1]));
        c.check_invariants().unwrap();
        // With one shard there is nowhere else to move to.
        let mut single = Cluster::new(ClusterConfig::default());
        single.handle_register(0, info(1, 1)).unwrap();
        single.create_topic(0, &t, 1, 1, None).unwrap();
        assert!(matches!(
            single.move_segment(1, &t, SegmentId(0), None),
            Err(ControlError::NoLiveBroker)
        ));
    }

    #[test]
    fn create_spreads_segments_over_brokers_and_shards() {
        let mut c = cluster(3);
        let t = name("ns/t");
        let action = c.create_topic(10, &t, 7, 1, None).unwrap();
        let Action::CreateTopic { opened, .. } = &action else {
            panic!("{action:?}")
        };
        assert_eq!(opened.len(), 7);
        assert_eq!(
            owners(&c, &t),
            [
                (0, 1, 0),
                (1, 2, 0),
                (2, 3, 0),
                (3, 1, 1),
                (4, 2, 1),
                (5, 3, 1),
                (6, 1, 0)
            ]
        );
        assert_eq!(action.commands().len(), 7);
        c.check_invariants().unwrap();

        let err = c.create_topic(10, &t, 1, 1, None).unwrap_err();
        assert!(matches!(err, ControlError::TopicExists(_)), "{err}");
        let err = c
            .create_topic(10, &name("ns/u"), 5, 1, Some(policy()))
            .unwrap_err();
        assert!(
            matches!(
                err,
                ControlError::InvalidPolicy(PolicyError::OpenSegmentsOutside {
                    open: 5,
                    min: 1,
                    max: 4
                })
            ),
            "{err}"
        );
        let err = c
            .create_topic(
                10,
                &name("ns/u"),
                1,
                1,
                Some(ScalingPolicy {
                    split_pieces_max: 1,
                    ..policy()
                }),
            )
            .unwrap_err();
        assert!(
            matches!(
                err,
                ControlError::InvalidPolicy(PolicyError::SplitPieces {
                    split_pieces_max: 1
                })
            ),
            "{err}"
        );
        let err = Cluster::new(ClusterConfig::default())
            .create_topic(0, &t, 1, 1, None)
            .unwrap_err();
        assert!(matches!(err, ControlError::NoLiveBroker), "{err}");
    }

    /// Each broken invariant is named with what broke it.
    #[test]
    fn broken_invariants_are_named() {
        let mut c = cluster(2);
        let t = name("ns/t");
        c.create_topic(0, &t, 2, 1, Some(policy())).unwrap();
        c.check_invariants().unwrap();

        let mut misfiled = c.clone();
        let topic = misfiled.topics.remove(&t).unwrap();
        misfiled.topics.insert(name("ns/u"), topic);
        assert_eq!(
            misfiled.check_invariants(),
            Err(InvariantViolation::MisfiledTopic {
                name: name("ns/u"),
                holds: t.clone(),
            })
        );

        let mut unsorted = c.clone();
        unsorted.topics.get_mut(&t).unwrap().segments.swap(0, 1);
        assert!(matches!(
            unsorted.check_invariants(),
            Err(InvariantViolation::Topic(
                InvalidTopic::SegmentsOutOfOrder { .. }
            ))
        ));

        let mut narrow = c.clone();
        narrow.topics.get_mut(&t).unwrap().policy = Some(ScalingPolicy {
            segments_max: 1,
            ..policy()
        });
        assert_eq!(
            narrow.check_invariants(),
            Err(InvariantViolation::OpenOutsidePolicy {
                topic: t.clone(),
                open: 2,
                min: 1,
                max: 1,
            })
        );

        let mut stray = c.clone();
        stray.orphans.insert((t.clone(), SegmentId(9)));
        let err = stray.check_invariants().unwrap_err();
        assert_eq!(
            err,
            InvariantViolation::OrphanNotOpen {
                topic: t.clone(),
                segment: SegmentId(9),
            }
        );
        assert_eq!(err.to_string(), "orphan ns/t/9 is not an open segment");

        let mut lost = c.clone();
        lost.topics.get_mut(&t).unwrap().segments[0].broker = Some(BrokerId(9));
        assert_eq!(
            lost.check_invariants(),
            Err(InvariantViolation::Ownerless {
                topic: t.clone(),
                segment: SegmentId(0),
            })
        );
    }

    #[test]
    fn manual_split_merge_and_move() {
        let mut c = cluster(2);
        let t = name("ns/t");
        c.create_topic(0, &t, 1, 1, Some(policy())).unwrap();

        let split = c.split_segment(1, &t, SegmentId(0), 3).unwrap();
        let Action::Split {
            sealed,
            opened,
            cause,
            ..
        } = &split
        else {
            panic!("{split:?}")
        };
        assert_eq!(*cause, Cause::Manual);
        assert_eq!(
            (sealed.segment, sealed.epoch, sealed.broker),
            (SegmentId(0), 1, Some(BrokerId(1)))
        );
        let ids: Vec<u32> = opened.iter().map(|p| p.segment.0).collect();
        assert_eq!(ids, [1, 2, 3]);
        let ranges: Vec<KeyRange> = opened.iter().map(|p| p.range).collect();
        assert_eq!(ranges, KeyRange::FULL.split_even(3));
        let topic = c.topic(&t).unwrap();
        let parent = topic.segment(SegmentId(0)).unwrap();
        assert_eq!(
            parent.successors,
            [SegmentId(1), SegmentId(2), SegmentId(3)]
        );
        assert_eq!(parent.sealed_ms, Some(1));
        assert!(matches!(split.commands()[0], BrokerCommand::Seal { .. }));
        c.check_invariants().unwrap();

        // Bounds: at most 4 open, so no 3-way split of a piece.
        let err = c.split_segment(2, &t, SegmentId(1), 3).unwrap_err();
        assert!(err.to_string().contains("the most is 4"), "{err}");
        let err = c.split_segment(2, &t, SegmentId(0), 2).unwrap_err();
        assert!(err.to_string().contains("sealed"), "{err}");
        let err = c.split_segment(2, &t, SegmentId(9), 2).unwrap_err();
        assert!(matches!(err, ControlError::SegmentNotFound { .. }), "{err}");

        let err = c
            .merge_segments(3, &t, SegmentId(1), SegmentId(3))
            .unwrap_err();
        assert!(err.to_string().contains("not adjacent"), "{err}");
        let merge = c.merge_segments(3, &t, SegmentId(3), SegmentId(2)).unwrap();
        let Action::Merge { sealed, opened, .. } = &merge else {
            panic!("{merge:?}")
        };
        assert_eq!(sealed.map(|s| s.segment), [SegmentId(2), SegmentId(3)]);
        assert_eq!(opened.segment, SegmentId(4));
        assert_eq!(opened.range.end(), crate::RING_END);
        let topic = c.topic(&t).unwrap();
        assert_eq!(
            topic.segment(SegmentId(2)).unwrap().successors,
            [SegmentId(4)]
        );
        assert_eq!(
            topic.segment(SegmentId(3)).unwrap().successors,
            [SegmentId(4)]
        );

        let owner = topic.segment(SegmentId(4)).unwrap().broker.unwrap();
        let other = if owner == BrokerId(1) {
            BrokerId(2)
        } else {
            BrokerId(1)
        };
        let moved = c.move_segment(4, &t, SegmentId(4), None).unwrap();
        let Action::Move { sealed, opened, .. } = &moved else {
            panic!("{moved:?}")
        };
        assert_eq!(sealed.broker, Some(owner));
        assert_eq!(opened.broker, other);
        assert_eq!(
            opened.range,
            c.topic(&t).unwrap().segment(SegmentId(4)).unwrap().range
        );
        let err = c
            .move_segment(4, &t, SegmentId(5), Some(BrokerId(9)))
            .unwrap_err();
        assert!(
            matches!(err, ControlError::BrokerNotFound(BrokerId(9))),
            "{err}"
        );

        c.merge_segments(5, &t, SegmentId(1), SegmentId(5)).unwrap();
        let err = c
            .merge_segments(5, &t, SegmentId(1), SegmentId(6))
            .unwrap_err();
        assert!(err.to_string().contains("the fewest allowed is 1"), "{err}");
        assert_eq!(c.topic(&t).unwrap().open_segment_count(), 1);
        c.check_invariants().unwrap();
    }

    #[test]
    fn death_and_leave_reopen_segments_elsewhere() {
        let mut c = cluster(3);
        let t = name("ns/t");
        c.create_topic(0, &t, 6, 1, None).unwrap();
        // b1 and b3 keep reporting; b2 goes silent.
        for now in [1_000, 2_000, 3_000] {
            c.handle_heartbeat(now, BrokerId(1)).unwrap();
            c.handle_heartbeat(now, BrokerId(3)).unwrap();
            assert!(c.handle_tick(now).is_empty());
        }
        c.handle_heartbeat(3_001, BrokerId(1)).unwrap();
        c.handle_heartbeat(3_001, BrokerId(3)).unwrap();
        let actions = c.handle_tick(3_001);
        assert_eq!(actions.len(), 2, "b2 owned two segments: {actions:?}");
        for action in &actions {
            assert_eq!(action.cause(), Cause::BrokerDied(BrokerId(2)));
            assert_eq!(action.sealed()[0].broker, None, "nobody to seal on");
            assert_ne!(action.opened()[0].broker, BrokerId(2));
        }
        assert!(!c.membership().is_live(BrokerId(2)));
        assert!(c.handle_heartbeat(3_002, BrokerId(2)).is_err());
        c.check_invariants().unwrap();

        let actions = c.handle_leave(3_100, BrokerId(1)).unwrap();
        assert_eq!(actions.len(), 3);
        for action in &actions {
            assert_eq!(action.cause(), Cause::BrokerLeft(BrokerId(1)));
            assert_eq!(
                action.sealed()[0].broker,
                Some(BrokerId(1)),
                "it seals its own"
            );
            assert_eq!(action.opened()[0].broker, BrokerId(3));
        }
        let err = c.handle_leave(3_200, BrokerId(3)).unwrap_err();
        assert!(err.to_string().contains("no other broker"), "{err}");
        assert_eq!(c.topic(&t).unwrap().open_segment_count(), 6);
        c.check_invariants().unwrap();
    }

    /// The brokers of each open segment: owner, then followers (in sync?).
    fn copies(c: &Cluster, topic: &TopicName) -> Vec<(u32, Vec<(u32, bool)>)> {
        c.topic(topic)
            .unwrap()
            .open_segments()
            .map(|s| {
                let followers = s.followers.iter().map(|f| (f.broker.0, f.in_sync));
                (s.broker.unwrap().0, followers.collect())
            })
            .collect()
    }

    #[test]
    fn a_follower_behind_too_long_leaves_the_in_sync_set_and_rejoins_once_caught_up() {
        let mut c = cluster(2);
        let t = name("ns/t");
        c.create_topic(0, &t, 1, 2, None).unwrap();
        let segment = c.topic(&t).unwrap().open_segments().next().unwrap().clone();
        let owner = segment.broker.unwrap();
        let follower = segment.followers[0].broker;
        let mut now = 0;
        // Both brokers report; the owner says how far its follower is.
        let report = |c: &mut Cluster, now: u64, lag_ms: u64| {
            let load = SegmentLoad {
                topic: t.clone(),
                segment: segment.id,
                rate: rate(1),
                followers: vec![FollowerLag {
                    broker: follower,
                    lag_ms,
                }],
            };
            c.handle_load_report(now, owner, &[load]).unwrap();
            c.handle_heartbeat(now, follower).unwrap();
            c.handle_tick(now)
        };
        let in_sync = |c: &Cluster| c.topic(&t).unwrap().segment(segment.id).unwrap().followers[0];
        // Behind, but within the limit (the start's grace does not hold
        // this up: a report is news, not a silence).
        while now < 1_000 {
            now += 1_000;
            assert!(report(&mut c, now, FOLLOWER_LAG_MAX_MS).is_empty());
        }
        assert!(in_sync(&c).in_sync);
        // Past it: out, in one change of followers.
        now += 1_000;
        let actions = report(&mut c, now, FOLLOWER_LAG_MAX_MS + 1);
        assert!(
            matches!(&actions[..], [Action::Followers { before, .. }] if before[0].1[0].in_sync),
            "{actions:?}"
        );
        let out = in_sync(&c);
        assert!(!out.in_sync);
        assert_eq!(out.broker, follower, "kept, only out of sync");
        // Still behind, or back but not by enough: nothing more.
        for lag in [u64::MAX, FOLLOWER_LAG_MAX_MS, FOLLOWER_LAG_MAX_MS / 2 + 1] {
            now += 1_000;
            assert!(report(&mut c, now, lag).is_empty(), "lag {lag}");
        }
        // Caught up: back in.
        now += 1_000;
        let actions = report(&mut c, now, 0);
        assert!(
            matches!(&actions[..], [Action::Followers { .. }]),
            "{actions:?}"
        );
        assert!(in_sync(&c).in_sync);
        assert_eq!(c.topic(&t).unwrap().follower_changes, 2);
        assert_eq!(sync_change(true, 10, 5), Some(false));
        assert_eq!(sync_change(false, 2, 5), Some(true));
        assert_eq!(sync_change(false, 3, 5), None);
    }

    #[test]
    fn replicas_go_to_other_brokers_and_default_to_two_in_a_cluster() {
        let mut alone = cluster(1);
        let t = name("ns/t");
        alone.create_topic(0, &t, 2, 0, None).unwrap();
        assert_eq!(alone.topic(&t).unwrap().replicas(), 1, "alone: one copy");
        assert!(copies(&alone, &t).iter().all(|(_, f)| f.is_empty()));
        let err = alone
            .create_topic(0, &name("ns/u"), 1, 2, None)
            .unwrap_err();
        assert!(
            matches!(
                err,
                ControlError::InvalidReplicaCount {
                    replicas: 2,
                    live: 1,
                    ..
                }
            ),
            "{err}"
        );

        let mut c = cluster(3);
        c.create_topic(0, &name("ns/default"), 2, 0, None).unwrap();
        assert_eq!(c.topic(&name("ns/default")).unwrap().replicas(), 2);
        assert!(copies(&c, &name("ns/default"))
            .iter()
            .all(|(owner, f)| f.len() == 1 && f[0].0 != *owner));
        c.create_topic(0, &t, 6, 2, None).unwrap();
        assert_eq!(c.topic(&t).unwrap().replicas(), 2);
        for (owner, followers) in copies(&c, &t) {
            assert_eq!(followers.len(), 1);
            assert_ne!(followers[0].0, owner, "a follower is never its owner");
            assert!(followers[0].1, "a new segment's followers start in sync");
        }
        let three = name("ns/three");
        c.create_topic(0, &three, 3, 3, None).unwrap();
        for (owner, followers) in copies(&c, &three) {
            let mut brokers: Vec<u32> = followers.iter().map(|f| f.0).collect();
            brokers.push(owner);
            brokers.sort_unstable();
            assert_eq!(brokers, [1, 2, 3], "three copies on three brokers");
        }
        for replicas in [4, REPLICAS_MAX + 1] {
            let err = c
                .create_topic(0, &name("ns/v"), 1, replicas, None)
                .unwrap_err();
            assert!(
                matches!(err, ControlError::InvalidReplicaCount { .. }),
                "{err}"
            );
        }
        // Successors of a split get their own followers.
        let first = c.topic(&t).unwrap().open_segments().next().unwrap().id;
        c.split_segment(10, &t, first, 2).unwrap();
        for (owner, followers) in copies(&c, &t) {
            assert_eq!(followers.len(), 1);
            assert_ne!(followers[0].0, owner);
        }
        // The JSON keeps them.
        let topic = c.topic(&t).unwrap();
        assert_eq!(
            &Topic::from_json_bytes(&topic.to_json_bytes()).unwrap(),
            topic
        );
        c.check_invariants().unwrap();
    }

    #[test]
    fn a_dead_followers_place_is_taken_by_a_live_broker_out_of_sync() {
        let mut c = cluster(3);
        let t = name("ns/t");
        c.create_topic(0, &t, 6, 2, None).unwrap();
        let followed_by_2 = copies(&c, &t).iter().filter(|(_, f)| f[0].0 == 2).count();
        assert!(followed_by_2 > 0, "{:?}", copies(&c, &t));
        for now in [1_000, 2_000, 3_000] {
            c.handle_heartbeat(now, BrokerId(1)).unwrap();
            c.handle_heartbeat(now, BrokerId(3)).unwrap();
            assert!(c.handle_tick(now).is_empty());
        }
        c.handle_heartbeat(3_001, BrokerId(1)).unwrap();
        c.handle_heartbeat(3_001, BrokerId(3)).unwrap();
        let actions = c.handle_tick(3_001);
        let followers: Vec<&Action> = actions
            .iter()
            .filter(|a| matches!(a, Action::Followers { .. }))
            .collect();
        assert_eq!(followers.len(), 1, "one change for the topic: {actions:?}");
        let Action::Followers {
            before, brokers, ..
        } = followers[0]
        else {
            unreachable!()
        };
        assert_eq!(before.len(), followed_by_2, "{before:?}");
        assert!(before.iter().all(|(_, f)| f[0].broker == BrokerId(2)));
        assert_eq!(
            brokers,
            &[BrokerId(1), BrokerId(3)],
            "only live brokers are told"
        );
        for (owner, followers) in copies(&c, &t) {
            assert_ne!(owner, 2, "b2's own segments moved");
            assert_eq!(followers.len(), 1, "two live brokers: one follower each");
            assert_ne!(followers[0].0, owner);
            assert_ne!(followers[0].0, 2);
        }
        let behind = copies(&c, &t).iter().filter(|(_, f)| !f[0].1).count();
        assert_eq!(behind, followed_by_2, "the replacements start out of sync");
        c.check_invariants().unwrap();
        // Nothing more to repair.
        c.handle_heartbeat(4_000, BrokerId(1)).unwrap();
        c.handle_heartbeat(4_000, BrokerId(3)).unwrap();
        assert!(c.handle_tick(4_000).is_empty());
    }

    #[test]
    fn all_brokers_dead_leaves_orphans_until_one_joins() {
        let mut c = cluster(1);
        let t = name("ns/t");
        c.create_topic(0, &t, 2, 1, None).unwrap();
        assert!(c.handle_tick(5_000).is_empty());
        assert_eq!(c.orphans().len(), 2);
        c.check_invariants().unwrap();
        let actions = c.handle_register(6_000, info(7, 1)).unwrap();
        assert_eq!(actions.len(), 2);
        assert!(actions.iter().all(|a| a.cause() == Cause::Orphaned));
        assert!(c.orphans().is_empty());
        assert_eq!(owners(&c, &t), [(2, 7, 0), (3, 7, 0)]);
        c.check_invariants().unwrap();
    }

    #[test]
    fn the_control_planes_own_stall_is_not_counted_as_brokers_silence() {
        // Silence limit 3 s. Both brokers were last heard at 1 s; the
        // control plane then stalled for 5 s, and ticks at 6 s.
        let mut c = cluster(2);
        let t = name("ns/t");
        c.create_topic(0, &t, 2, 1, None).unwrap();
        c.handle_heartbeat(1_000, BrokerId(1)).unwrap();
        c.handle_heartbeat(1_000, BrokerId(2)).unwrap();
        c.handle_stall(6_000, 5_000);
        assert!(c.handle_tick(6_000).is_empty(), "silent for 0 s it heard");
        // Broker 1 speaks after the stall; broker 2 stays silent: it is
        // dead once it was silent for 3 s of the control plane running.
        c.handle_heartbeat(6_500, BrokerId(1)).unwrap();
        assert!(c.handle_tick(9_000).is_empty());
        c.handle_heartbeat(9_000, BrokerId(1)).unwrap();
        let actions = c.handle_tick(9_001);
        assert!(!actions.is_empty(), "broker 2 silent for 3 s of running");
        assert!(actions
            .iter()
            .all(|a| a.cause() == Cause::BrokerDied(BrokerId(2))));
        assert!(!c.membership().is_live(BrokerId(2)));
        assert!(c.membership().is_live(BrokerId(1)));
        // A stall never makes a broker heard later than now.
        c.handle_stall(9_100, 60_000);
        assert_eq!(
            c.membership().broker(BrokerId(1)).unwrap().last_seen_ms(),
            9_100
        );
        c.check_invariants().unwrap();
    }

    #[test]
    fn policy_splits_hot_segments_after_the_window_and_cooldown() {
        let mut c = cluster(2);
        let t = name("ns/t");
        c.create_topic(0, &t, 1, 1, Some(policy())).unwrap();
        let mut splits = Vec::new();
        for now in (100..=20_000).step_by(100) {
            report_all(&mut c, now, 6_000);
            for action in c.handle_tick(now) {
                assert_eq!(action.cause(), Cause::Policy);
                splits.push((now, action));
            }
            c.check_invariants().unwrap();
        }
        // Over 5x the target: the first split waits for the cooldown (5 s),
        // the next ones for their pieces' cooldown; the bound stops at 4.
        let times: Vec<u64> = splits.iter().map(|(now, _)| *now).collect();
        assert_eq!(times, [5_000, 10_000, 10_000]);
        assert!(splits
            .iter()
            .all(|(_, a)| matches!(a, Action::Split { opened, .. } if opened.len() == 2)));
        assert_eq!(c.topic(&t).unwrap().open_segment_count(), 4);
        let brokers: BTreeSet<u32> = owners(&c, &t).iter().map(|o| o.1).collect();
        assert_eq!(brokers.len(), 2, "pieces spread over both brokers");
    }

    #[test]
    fn policy_merges_cold_neighbours_after_the_longest_window() {
        let mut c = cluster(1);
        let t = name("ns/t");
        c.create_topic(
            0,
            &t,
            4,
            1,
            Some(ScalingPolicy {
                segments_min: 2,
                ..policy()
            }),
        )
        .unwrap();
        let mut merges = Vec::new();
        for now in (100..=20_000).step_by(100) {
            report_all(&mut c, now, 100);
            for action in c.handle_tick(now) {
                merges.push((now, action.sealed().len(), action.opened()[0].range));
            }
            c.check_invariants().unwrap();
        }
        // Cold from the start; merging waits for 8 s of reports, then pairs
        // neighbours; the min bound of 2 stops it.
        let halves = KeyRange::FULL.split_even(2);
        assert_eq!(merges, [(8_000, 2, halves[0]), (8_000, 2, halves[1])]);
        assert_eq!(c.topic(&t).unwrap().open_segment_count(), 2);
    }

    #[test]
    fn load_reports_only_count_for_the_owner() {
        let mut c = cluster(2);
        let t = name("ns/t");
        c.create_topic(0, &t, 2, 1, None).unwrap();
        let load = |segment| SegmentLoad {
            topic: t.clone(),
            segment: SegmentId(segment),
            rate: rate(5),
            followers: Vec::new(),
        };
        // Segment 0 is on b1, 1 on b2; 9 does not exist.
        assert_eq!(
            c.handle_load_report(600_000, BrokerId(1), &[load(0), load(1), load(9)])
                .unwrap(),
            1
        );
        assert!(c.segment_rates(&t, SegmentId(0)).is_some());
        assert!(c.segment_rates(&t, SegmentId(1)).is_none());
        let err = c.handle_load_report(600_000, BrokerId(5), &[]).unwrap_err();
        assert!(
            matches!(err, ControlError::BrokerNotFound(BrokerId(5))),
            "{err}"
        );
        assert!(c.broker_load(BrokerId(1)).unwrap().0.bytes_per_s > 0);
    }

    #[test]
    fn rebalancer_moves_one_segment_per_cooldown() {
        let mut c = Cluster::new(ClusterConfig {
            broker_silence_ms: 60_000,
            rebalance: Some(RebalancePolicy {
                hot_ratio: 1.2,
                utilization_min: 0.1,
                cooldown_ms: 2_000,
            }),
            follower_lag_max_ms: FOLLOWER_LAG_MAX_MS,
            sealer_wait_ms: SEALER_WAIT_MS,
        });
        c.handle_register(0, info(1, 1)).unwrap();
        let t = name("ns/t");
        // Manual scaling only, but rates averaged over a 1 s window.
        let short_windows = ScalingPolicy {
            windows_ms: [1_000, 2_000, 4_000, 8_000],
            ..ScalingPolicy::default()
        };
        c.create_topic(0, &t, 4, 1, Some(short_windows)).unwrap();
        c.handle_register(0, info(2, 1)).unwrap();
        c.handle_register(0, info(3, 1)).unwrap();
        let mut moves = Vec::new();
        for now in (1_000..=10_000).step_by(1_000) {
            report_all(&mut c, now, 100_000);
            for action in c.handle_tick(now) {
                assert_eq!(action.cause(), Cause::Rebalance);
                assert_eq!(action.sealed()[0].broker, Some(BrokerId(1)));
                moves.push((now, action.opened()[0].broker.0));
            }
            c.check_invariants().unwrap();
        }
        // Four equal segments on b1: two moves, one per cooldown, leave
        // 2:1:1; a third would only make another broker the hot one.
        assert_eq!(moves, [(2_000, 2), (4_000, 3)]);
        let mut per_broker = [0; 3];
        for (_, broker, _) in owners(&c, &t) {
            per_broker[broker as usize - 1] += 1;
        }
        assert_eq!(per_broker, [2, 1, 1]);
    }

    #[test]
    fn a_single_broker_topic_moves_onto_the_cluster_after_the_grace() {
        // As a broker that ran its own control plane before there was one
        // for all wrote it: segments on shards, naming no broker.
        let t = name("ns/old");
        let old = Topic {
            name: t.clone(),
            segments: KeyRange::FULL
                .split_even(3)
                .into_iter()
                .zip(0..)
                .map(|(range, id)| Segment {
                    id: SegmentId(id),
                    epoch: 0,
                    range,
                    state: SegmentState::Open,
                    shard: (id % 2) as u16,
                    successors: Vec::new(),
                    created_ms: 0,
                    broker: None,
                    sealed_ms: None,
                    sealer: None,
                    followers: Vec::new(),
                })
                .collect(),
            created_ms: 0,
            policy: None,
            replicas: 1,
            follower_changes: 0,
        };
        let mut c = Cluster::from_topics(ClusterConfig::default(), [old]).unwrap();
        assert!(c.handle_register(100, info(1, 2)).unwrap().is_empty());
        assert_eq!(
            c.orphans().len(),
            3,
            "no broker claims segments that name none"
        );
        let actions = c.handle_register(10_100, info(2, 2)).unwrap();
        assert_eq!(actions.len(), 3);
        for action in &actions {
            assert_eq!(action.cause(), Cause::Orphaned);
            assert_eq!(action.sealed()[0].broker, None);
        }
        let brokers: BTreeSet<u32> = owners(&c, &t).iter().map(|o| o.1).collect();
        assert_eq!(brokers, BTreeSet::from([1, 2]));
        c.check_invariants().unwrap();
    }

    #[test]
    fn restart_keeps_running_brokers_undisturbed() {
        let mut c = cluster(2);
        let t = name("ns/t");
        c.create_topic(0, &t, 3, 1, Some(policy())).unwrap();
        c.split_segment(1, &t, SegmentId(0), 2).unwrap();
        let stored: Vec<Topic> = c
            .topics()
            .map(|t| Topic::from_json_bytes(&t.to_json_bytes()).unwrap())
            .collect();
        let before = owners(&c, &t);

        let mut restarted = Cluster::from_topics(*c.config(), stored).unwrap();
        assert_eq!(restarted.orphans().len(), 4);
        restarted.check_invariants().unwrap();
        // b1 re-registers at once; b2 is late, but within the grace.
        assert!(restarted
            .handle_register(50_000, info(1, 2))
            .unwrap()
            .is_empty());
        assert!(restarted.handle_tick(52_000).is_empty());
        assert!(restarted
            .handle_register(52_500, info(2, 2))
            .unwrap()
            .is_empty());
        assert!(restarted.orphans().is_empty());
        assert_eq!(owners(&restarted, &t), before);
        assert_eq!(restarted.topic(&t).unwrap().policy(), Some(&policy()));
        restarted.check_invariants().unwrap();

        // Had b2 not come back, its segments move once the grace is over.
        let stored: Vec<Topic> = c.topics().cloned().collect();
        let mut restarted = Cluster::from_topics(*c.config(), stored).unwrap();
        restarted.handle_register(50_000, info(1, 2)).unwrap();
        restarted.handle_heartbeat(52_999, BrokerId(1)).unwrap();
        assert!(restarted.handle_tick(52_999).is_empty());
        let actions = restarted.handle_tick(53_000);
        let on_two = before.iter().filter(|o| o.1 == 2).count();
        assert_eq!(actions.len(), on_two);
        assert!(actions.iter().all(|a| a.cause() == Cause::Orphaned));
        restarted.check_invariants().unwrap();
    }
}
