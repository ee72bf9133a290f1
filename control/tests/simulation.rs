//! A seeded simulation of the control core: thousands of one-second steps
//! of traffic changes, topic churn, manual splits, merges and moves, broker
//! joins, graceful leaves, crashes (silence, then death), recoveries and
//! restarts of the control plane itself, checking after every step:
//!
//! - the open segments of every topic tile the ring exactly;
//! - every open segment is owned by a live broker once the actions are
//!   applied (unless no broker is live, or the restart grace is running);
//! - no automatic split or merge of a segment within its cooldown;
//! - every topic with a policy has an open count within its bounds;
//! - every sealed segment's successors cover exactly its range (several:
//!   a split) or a range containing it (one: a merge or a move);
//! - every action's sealed segments are sealed with the epoch it names;
//! - the core's own consistency check passes.
//!
//! `KELP_SIM_SEED=<n>` replays one seed, `KELP_SIM_STEPS=<n>` changes the
//! number of steps. A failure names the seed and the step.

#![allow(clippy::unwrap_used)]

use std::cell::Cell;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use kelp_control::{
    Action, BrokerId, BrokerInfo, Capacity, Cause, Cluster, ClusterConfig, ControlError,
    FollowerLag, InvalidRegistration, KeyRange, Rate, RebalancePolicy, ScalingPolicy, SegmentLoad,
    SegmentState, Topic, TopicName, RING_END,
};

const STEP_MS: u64 = 1_000;
const STEPS_DEFAULT: u64 = 2_500;
const SEEDS_DEFAULT: std::ops::Range<u64> = 0..6;
const SILENCE_MS: u64 = 3_000;
const TARGET_BYTES_PER_S: u64 = 10_000;
const BROKERS_RUNNING_MAX: usize = 7;
const TOPICS_MAX: usize = 6;

/// Traffic of one topic: a uniform part over the ring plus a hot range.
#[derive(Debug, Clone, Copy)]
struct Traffic {
    uniform_bytes_per_s: u64,
    hot_start: u32,
    hot_len: u64,
    hot_bytes_per_s: u64,
}

impl Traffic {
    fn random(rng: &mut fastrand::Rng, segments_max: u32) -> Traffic {
        let hot_len = rng.u64(1..=RING_END / 4);
        Traffic {
            uniform_bytes_per_s: rng.u64(0..=TARGET_BYTES_PER_S * u64::from(segments_max) * 3 / 2),
            hot_start: rng.u32(..u32::try_from(RING_END - hot_len).unwrap()),
            hot_len,
            hot_bytes_per_s: if rng.bool() {
                rng.u64(0..=TARGET_BYTES_PER_S * 8)
            } else {
                0
            },
        }
    }

    fn rate(&self, range: KeyRange) -> Rate {
        let share = |bytes: u64, part: u64, whole: u64| {
            u64::try_from(u128::from(bytes) * u128::from(part) / u128::from(whole)).unwrap()
        };
        let hot_end = u64::from(self.hot_start) + self.hot_len;
        let overlap = hot_end
            .min(range.end())
            .saturating_sub(u64::from(self.hot_start.max(range.start())));
        let bytes_per_s = share(self.uniform_bytes_per_s, range.len(), RING_END)
            + share(self.hot_bytes_per_s, overlap, self.hot_len);
        Rate {
            bytes_per_s,
            records_per_s: bytes_per_s / 100,
        }
    }
}

/// What happened, summed over a run, to show the run exercised it all.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    policy_splits: u64,
    policy_merges: u64,
    manual: u64,
    rebalance_moves: u64,
    deaths: u64,
    leaves: u64,
    orphans_rehomed: u64,
    joins: u64,
    restarts: u64,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.policy_splits += other.policy_splits;
        self.policy_merges += other.policy_merges;
        self.manual += other.manual;
        self.rebalance_moves += other.rebalance_moves;
        self.deaths += other.deaths;
        self.leaves += other.leaves;
        self.orphans_rehomed += other.orphans_rehomed;
        self.joins += other.joins;
        self.restarts += other.restarts;
    }

    fn count(&mut self, action: &Action) {
        match (action, action.cause()) {
            (Action::Split { .. }, Cause::Policy) => self.policy_splits += 1,
            (Action::Merge { .. }, Cause::Policy) => self.policy_merges += 1,
            (Action::Split { .. } | Action::Merge { .. } | Action::Move { .. }, Cause::Manual) => {
                self.manual += 1
            }
            (_, Cause::Rebalance) => self.rebalance_moves += 1,
            (_, Cause::BrokerDied(_)) => self.deaths += 1,
            (_, Cause::BrokerLeft(_)) => self.leaves += 1,
            (_, Cause::Orphaned) => self.orphans_rehomed += 1,
            _ => {}
        }
    }
}

struct Sim {
    rng: fastrand::Rng,
    config: ClusterConfig,
    cluster: Cluster,
    now_ms: u64,
    /// When the current core instance started (for the restart grace).
    core_started_ms: u64,
    /// Broker processes that are up and report every step.
    running: BTreeMap<BrokerId, BrokerInfo>,
    /// Broker processes that hang: registered maybe, but silent.
    hung: BTreeMap<BrokerId, BrokerInfo>,
    next_broker: u32,
    traffic: BTreeMap<TopicName, Traffic>,
    next_topic: u32,
    tally: Tally,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let config = ClusterConfig {
            broker_silence_ms: SILENCE_MS,
            rebalance: Some(RebalancePolicy {
                hot_ratio: 1.5,
                utilization_min: 0.05,
                cooldown_ms: 5_000,
            }),
            follower_lag_max_ms: kelp_control::FOLLOWER_LAG_MAX_MS,
            sealer_wait_ms: kelp_control::SEALER_WAIT_MS,
        };
        Sim {
            rng: fastrand::Rng::with_seed(seed),
            config,
            cluster: Cluster::new(config),
            now_ms: 1_000_000,
            core_started_ms: 1_000_000,
            running: BTreeMap::new(),
            hung: BTreeMap::new(),
            next_broker: 1,
            traffic: BTreeMap::new(),
            next_topic: 0,
            tally: Tally::default(),
        }
    }

    fn broker_info(&mut self, id: BrokerId) -> BrokerInfo {
        let shards = self.rng.usize(1..=4);
        BrokerInfo {
            id,
            shard_addresses: (0..shards)
                .map(|s| format!("10.1.{}.{s}:4000", id.0))
                .collect(),
            capacity: Capacity {
                bytes_per_s: TARGET_BYTES_PER_S * self.rng.u64(4..=16),
                records_per_s: TARGET_BYTES_PER_S,
            },
        }
    }

    fn random_policy(&mut self) -> Option<ScalingPolicy> {
        if self.rng.u8(..4) == 0 {
            return None;
        }
        let segments_min = self.rng.u32(1..=3);
        let automatic = self.rng.u8(..5) != 0;
        Some(ScalingPolicy {
            target: Rate {
                bytes_per_s: if automatic { TARGET_BYTES_PER_S } else { 0 },
                records_per_s: 0,
            },
            windows_ms: [2_000, 4_000, 8_000, 16_000],
            cooldown_ms: self.rng.u64(0..=20_000),
            segments_min,
            segments_max: self.rng.u32(segments_min.max(2)..=16),
            split_pieces_max: self.rng.u32(2..=4),
        })
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.rng.usize(..items.len())].clone())
    }

    fn live_brokers(&self) -> Vec<BrokerId> {
        self.cluster.membership().broker_ids().collect()
    }

    fn topic_names(&self) -> Vec<TopicName> {
        self.cluster.topics().map(|t| t.name().clone()).collect()
    }

    fn open_segments(&self, name: &TopicName) -> Vec<kelp_control::SegmentId> {
        self.cluster
            .topic(name)
            .map(|t| t.open_segments().map(|s| s.id).collect())
            .unwrap_or_default()
    }

    /// A manual operation may be refused, but only for a reason the caller
    /// could have caused.
    fn expect_clean<T>(result: Result<T, ControlError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(
                ControlError::InvalidChange(_)
                | ControlError::SegmentNotFound { .. }
                | ControlError::BrokerNotFound(_)
                | ControlError::NoLiveBroker
                | ControlError::InvalidReplicaCount { .. }
                | ControlError::TopicExists(_)
                | ControlError::TopicNotFound(_),
            ) => None,
            Err(other) => panic!("unexpected error: {other}"),
        }
    }

    /// One random event, then reports and a tick. Returns every action.
    fn step(&mut self) -> Vec<Action> {
        self.now_ms += STEP_MS;
        let now = self.now_ms;
        let mut actions = Vec::new();
        let roll = self.rng.u32(..1_000);
        match roll {
            0..40 if self.running.len() < BROKERS_RUNNING_MAX || self.running.is_empty() => {
                let id = BrokerId(self.next_broker);
                self.next_broker += 1;
                let info = self.broker_info(id);
                actions.extend(self.cluster.handle_register(now, info.clone()).unwrap());
                self.running.insert(id, info);
                self.tally.joins += 1;
            }
            40..50 => {
                if let Some(id) = self.pick(&self.running.keys().copied().collect::<Vec<_>>()) {
                    if let Some(done) = Sim::expect_clean(self.cluster.handle_leave(now, id)) {
                        actions.extend(done);
                        self.running.remove(&id);
                    }
                }
            }
            50..60 => {
                // A broker hangs: it stops reporting and will be declared dead.
                if let Some(id) = self.pick(&self.running.keys().copied().collect::<Vec<_>>()) {
                    let info = self.running.remove(&id).unwrap();
                    self.hung.insert(id, info);
                }
            }
            60..70 => {
                // A hung broker recovers and registers again (as itself).
                if let Some(id) = self.pick(&self.hung.keys().copied().collect::<Vec<_>>()) {
                    let info = self.hung.remove(&id).unwrap();
                    match self.cluster.handle_register(now, info.clone()) {
                        Ok(done) => actions.extend(done),
                        Err(ControlError::InvalidBroker(reason)) => assert!(
                            matches!(reason, InvalidRegistration::ShardCountChanged { .. }),
                            "{reason}"
                        ),
                        Err(e) => panic!("re-register: {e}"),
                    }
                    self.running.insert(id, info);
                }
            }
            70..90 if self.traffic.len() < TOPICS_MAX => {
                let name = TopicName::parse(&format!("sim/t{}", self.next_topic)).unwrap();
                self.next_topic += 1;
                let policy = self.random_policy();
                let (min, max) = policy.map_or((1, 8), |p| (p.segments_min, p.segments_max));
                let count = self.rng.u32(min..=max);
                let replicas = self.rng.u32(0..3) as u8;
                if let Some(action) = Sim::expect_clean(
                    self.cluster
                        .create_topic(now, &name, count, replicas, policy),
                ) {
                    actions.push(action);
                    let traffic = Traffic::random(&mut self.rng, max);
                    self.traffic.insert(name, traffic);
                }
            }
            90..95 => {
                if let Some(name) = self.pick(&self.topic_names()) {
                    actions.push(self.cluster.delete_topic(now, &name).unwrap());
                    self.traffic.remove(&name);
                }
            }
            95..125 => {
                if let Some(name) = self.pick(&self.topic_names()) {
                    let segments = self.open_segments(&name);
                    let a = self.pick(&segments).unwrap();
                    let result = match self.rng.u8(..3) {
                        0 => {
                            let pieces = self.rng.u32(1..=4);
                            self.cluster.split_segment(now, &name, a, pieces)
                        }
                        1 => {
                            let b = self.pick(&segments).unwrap();
                            self.cluster.merge_segments(now, &name, a, b)
                        }
                        _ => {
                            let to = self.pick(&self.live_brokers());
                            let to = if self.rng.bool() { to } else { None };
                            self.cluster.move_segment(now, &name, a, to)
                        }
                    };
                    actions.extend(Sim::expect_clean(result));
                }
            }
            125..225 => {
                if let Some(name) = self.pick(&self.topic_names()) {
                    let max = self
                        .cluster
                        .topic(&name)
                        .and_then(Topic::policy)
                        .map_or(8, |p| p.segments_max);
                    let traffic = Traffic::random(&mut self.rng, max);
                    self.traffic.insert(name, traffic);
                }
            }
            225..228 => {
                // The control plane restarts from what it persisted; the
                // running brokers register again at once, hung ones do not.
                let stored: Vec<Topic> = self
                    .cluster
                    .topics()
                    .map(|t| Topic::from_json_bytes(&t.to_json_bytes()).unwrap())
                    .collect();
                self.cluster = Cluster::from_topics(self.config, stored).unwrap();
                self.core_started_ms = now;
                for info in self.running.values() {
                    let done = self.cluster.handle_register(now, info.clone()).unwrap();
                    assert!(
                        done.is_empty(),
                        "a restart must not disturb brokers: {done:?}"
                    );
                }
                self.tally.restarts += 1;
            }
            _ => {}
        }
        // Every running broker reports on what it owns; one the core
        // declared dead registers again.
        for (id, info) in self.running.clone() {
            let mut loads: Vec<SegmentLoad> = match self.cluster.membership().broker(id) {
                Some(entry) => entry
                    .segments()
                    .iter()
                    .filter_map(|(topic, segment)| {
                        let range = self.cluster.topic(topic)?.segment(*segment)?.range;
                        let rate = self.traffic.get(topic)?.rate(range);
                        Some(SegmentLoad {
                            topic: topic.clone(),
                            segment: *segment,
                            rate,
                            followers: Vec::new(),
                        })
                    })
                    .collect(),
                None => {
                    actions.extend(self.cluster.handle_register(now, info).unwrap());
                    continue;
                }
            };
            // Followers keep up, fall behind, or never start: the core takes
            // them out of the in-sync set and back.
            for load in &mut loads {
                let followers = self
                    .cluster
                    .topic(&load.topic)
                    .and_then(|t| t.segment(load.segment))
                    .map(|s| s.followers.clone())
                    .unwrap_or_default();
                for f in followers {
                    let lag_ms = match self.rng.u8(..8) {
                        0 => u64::MAX,
                        1 => 60_000,
                        2 | 3 => 100,
                        _ => 0,
                    };
                    load.followers.push(FollowerLag {
                        broker: f.broker,
                        lag_ms,
                    });
                }
            }
            let used = self.cluster.handle_load_report(now, id, &loads).unwrap();
            assert!(used <= loads.len());
            // A report at the instant a segment was made (or first seen
            // after a restart) only starts its clock, but every report on an
            // owned segment is taken.
            for load in &loads {
                assert!(
                    self.cluster
                        .segment_rates(&load.topic, load.segment)
                        .is_some(),
                    "broker {id}'s report on {}/{} was dropped",
                    load.topic,
                    load.segment
                );
            }
        }
        actions.extend(self.cluster.handle_tick(now));
        for action in &actions {
            self.tally.count(action);
        }
        actions
    }

    fn check(&self, actions: &[Action]) -> Result<(), String> {
        let now = self.now_ms;
        self.cluster.check_invariants().map_err(|e| e.to_string())?;
        let owners_required =
            !self.cluster.membership().is_empty() && now >= self.core_started_ms + SILENCE_MS;
        for topic in self.cluster.topics() {
            let name = topic.name();
            let mut open: Vec<KeyRange> = topic.open_segments().map(|s| s.range).collect();
            open.sort();
            let mut next: u64 = 0;
            for range in &open {
                if u64::from(range.start()) != next {
                    return Err(format!("{name}: open ranges break at {next:#x}: {open:?}"));
                }
                next = range.end();
            }
            if next != RING_END {
                return Err(format!("{name}: open ranges end at {next:#x}"));
            }
            if let Some(policy) = topic.policy() {
                let count = open.len() as u32;
                if count < policy.segments_min || count > policy.segments_max {
                    return Err(format!(
                        "{name}: {count} open segments, bounds {}..={}",
                        policy.segments_min, policy.segments_max
                    ));
                }
            }
            for segment in topic.segments() {
                if segment.is_open() {
                    let live = segment
                        .broker
                        .is_some_and(|b| self.cluster.membership().is_live(b));
                    if owners_required && !live {
                        return Err(format!(
                            "{name}: open segment {} owned by {:?}, not a live broker",
                            segment.id, segment.broker
                        ));
                    }
                    continue;
                }
                if segment.successors.is_empty() {
                    return Err(format!(
                        "{name}: sealed segment {} names no successor",
                        segment.id
                    ));
                }
                let mut ranges: Vec<KeyRange> = segment
                    .successors
                    .iter()
                    .map(|id| topic.segment(*id).map(|s| s.range))
                    .collect::<Option<_>>()
                    .ok_or_else(|| format!("{name}: a successor of {} is missing", segment.id))?;
                ranges.sort();
                for pair in ranges.windows(2) {
                    if pair[0].end() != u64::from(pair[1].start()) {
                        return Err(format!(
                            "{name}: successors of {} not contiguous",
                            segment.id
                        ));
                    }
                }
                let (start, end) = (ranges[0].start(), ranges[ranges.len() - 1].end());
                let exact = start == segment.range.start() && end == segment.range.end();
                let contains = start <= segment.range.start() && segment.range.end() <= end;
                if (ranges.len() > 1 && !exact) || !contains {
                    return Err(format!(
                        "{name}: successors of {} cover [{start:#x}, {end:#x}), it had {}",
                        segment.id, segment.range
                    ));
                }
            }
        }
        for action in actions {
            let Some(topic) = self.cluster.topic(action.topic()) else {
                continue;
            };
            // A leaving broker seals its own segments; a dead one cannot.
            // Neither gets the successors.
            let told = |sealed: &kelp_control::SealedSegment| match action.cause() {
                Cause::BrokerLeft(b) => sealed.broker == Some(b),
                Cause::BrokerDied(_) | Cause::Orphaned => sealed.broker.is_none(),
                _ => true,
            };
            let gone = match action.cause() {
                Cause::BrokerLeft(b) | Cause::BrokerDied(b) => Some(b),
                _ => None,
            };
            if !action.sealed().iter().all(told)
                || action.opened().iter().any(|p| Some(p.broker) == gone)
            {
                return Err(format!("{action:?}: wrong brokers told"));
            }
            for sealed in action.sealed() {
                let segment = topic
                    .segment(sealed.segment)
                    .ok_or_else(|| format!("{action:?}: sealed segment missing"))?;
                if segment.state != SegmentState::Sealed || segment.epoch != sealed.epoch {
                    return Err(format!("{action:?}: segment is {segment:?}"));
                }
                let automatic_scale = action.cause() == Cause::Policy
                    && matches!(action, Action::Split { .. } | Action::Merge { .. });
                if automatic_scale {
                    let cooldown = topic.policy().map_or(0, |p| p.cooldown_ms);
                    if now - segment.created_ms < cooldown {
                        return Err(format!(
                            "{action:?}: segment {} created at {} scaled at {now}, cooldown {cooldown}",
                            segment.id, segment.created_ms
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Runs `simulate` (which records the step it reaches); if it panics,
/// panics again naming `what`, the seed, the step and how to replay it.
fn replayable<T>(what: &str, seed: u64, simulate: impl FnOnce(&Cell<u64>) -> T) -> T {
    let step_reached = Cell::new(0);
    match catch_unwind(AssertUnwindSafe(|| simulate(&step_reached))) {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            panic!(
                "{what} failed at seed {seed}, step {}: {message}\n\
                 replay with KELP_SIM_SEED={seed}",
                step_reached.get()
            );
        }
    }
}

fn run(seed: u64, steps: u64) -> Tally {
    replayable("simulation", seed, |step_reached| {
        let mut sim = Sim::new(seed);
        for step in 0..steps {
            step_reached.set(step);
            let actions = sim.step();
            if let Err(reason) = sim.check(&actions) {
                panic!("invariant broken: {reason}");
            }
        }
        sim.tally
    })
}

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.parse()
            .unwrap_or_else(|e| panic!("{name}={text:?} is not a number: {e}")),
    )
}

#[test]
fn seeded_simulation_keeps_every_invariant() {
    let steps = env_u64("KELP_SIM_STEPS").unwrap_or(STEPS_DEFAULT);
    if let Some(seed) = env_u64("KELP_SIM_SEED") {
        let tally = run(seed, steps);
        eprintln!("seed {seed}: {tally:?}");
        return;
    }
    let mut total = Tally::default();
    for seed in SEEDS_DEFAULT {
        let tally = run(seed, steps);
        eprintln!("seed {seed}: {tally:?}");
        total.add(&tally);
    }
    // The default seeds exercise every kind of change.
    let Tally {
        policy_splits,
        policy_merges,
        manual,
        rebalance_moves,
        deaths,
        leaves,
        orphans_rehomed,
        joins,
        restarts,
    } = total;
    for (what, count) in [
        ("policy splits", policy_splits),
        ("policy merges", policy_merges),
        ("manual changes", manual),
        ("rebalance moves", rebalance_moves),
        ("moves after deaths", deaths),
        ("moves after leaves", leaves),
        ("orphans re-homed", orphans_rehomed),
        ("joins", joins),
        ("restarts", restarts),
    ] {
        assert!(
            count > 0,
            "the default seeds never produced {what}: {total:?}"
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let trace = |seed| {
        let mut sim = Sim::new(seed);
        let mut all = Vec::new();
        for _ in 0..300 {
            all.extend(sim.step());
        }
        let topics: Vec<Vec<u8>> = sim.cluster.topics().map(Topic::to_json_bytes).collect();
        (format!("{all:?}"), topics)
    };
    assert_eq!(trace(7), trace(7));
    assert_ne!(trace(7).0, trace(8).0);
}

/// The state machine around the core, [`kelp_control::ClusterService`],
/// driven on a simulated clock against simulated brokers over a network
/// that delays command results, loses commands (a lost command times out:
/// its result is an error) and loses answers (applied, but the result is
/// an error), while brokers stall (silent, every command to them lost),
/// die of it and come back. Admin requests come all along. Checked after
/// every input:
///
/// - no broker has a segment of its own open whose predecessor still
///   takes writes on the broker that owned it (neither sealed there nor
///   refused by a `RefuseWrites`), unless that broker missed a command (it
///   is due a resync) or is gone;
/// - no broker goes back to an older layout of a topic that it then holds
///   (a segment it saw sealed is never open again, and a topic deleted and
///   created again never makes it take the older creation's layout back).
///   Like a real broker (`layout_age` in `engine/src/shard.rs`), a
///   simulated one ignores a layout with fewer segments, or as many with
///   fewer sealed, than the one it holds: an older layout may still arrive
///   after a newer one (a resync sends the newest ahead of what is queued),
///   and is harmless;
/// - every request gets exactly one answer, and read-only ones at once.
///
/// After a final quiet period (no losses, nobody stalled): every request
/// was answered, nothing is being carried out, no broker is due a resync,
/// and every broker that holds a topic holds its current layout.
mod service_sim {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    use kelp_control::cluster_service::{AnswerToken, CommandFailed, CommandId, CommandRequest};
    use kelp_control::{
        BrokerId, ClusterConfig, ClusterService, SegmentId, SegmentState, Topic, TopicName,
    };
    use wire::message::ShardAddress;
    use wire::{AdminRequest, ControlPortRequest, ErrorCode, MembershipRequest, Response};

    const STEP_MS: u64 = 100;
    const TICK_MS: u64 = 1_000;
    const REPORT_MS: u64 = 1_000;
    const SILENCE_MS: u64 = 4_000;
    /// The state machine's own limit on a command's result.
    const COMMAND_TIMEOUT_MS: u64 = 5_000;
    /// When a lost command's error comes back: mostly within the state
    /// machine's limit, sometimes past it.
    const LOST_AFTER_MS: std::ops::RangeInclusive<u64> = 500..=7_000;
    const BROKERS: u32 = 4;
    const NAMES: [&str; 4] = ["ns/a", "ns/b", "ns/c", "ns/d"];
    /// After the faults end, how long the cluster has to settle: this,
    /// plus [`SETTLE_PER_DELIVERY_MS`] per delivery still pending then
    /// (at most three steps before its release, each result within 600 ms),
    /// plus [`SETTLE_TAIL_MS`], which must also pass with nothing to do
    /// before the checks.
    const SETTLE_MS: u64 = 20_000;
    const SETTLE_PER_DELIVERY_MS: u64 = 2_000;
    const SETTLE_TAIL_MS: u64 = 10_000;

    /// How a broker orders layouts of one topic, as `layout_age` in
    /// `engine/src/shard.rs` does (`Topic::layout_age`): segments are only
    /// ever added and sealed, and followers changed, so a later layout has
    /// more of one; one that is less is ignored.
    fn layout_age(topic: &Topic) -> (usize, usize, u64) {
        topic.layout_age()
    }

    #[derive(Debug)]
    struct SimBroker {
        applied: BTreeMap<TopicName, Topic>,
        /// The layouts of the `RefuseWrites` it took: writes to what they
        /// seal are refused, whatever it applied since.
        refused: BTreeMap<TopicName, Topic>,
        stalled: bool,
        registered: bool,
        /// The token of its registration or report waiting for an answer.
        asking: Option<AnswerToken>,
        next_report_ms: u64,
        /// What happened to it lately, for a failure's message.
        log: std::collections::VecDeque<String>,
    }

    fn describe(request: &CommandRequest) -> String {
        match request {
            CommandRequest::DropTopic { topic } => format!("drop {topic}"),
            CommandRequest::RefuseWrites { topic_json, .. } => {
                let t = Topic::from_json_bytes(topic_json).unwrap();
                format!("refuse writes to {}", t.name())
            }
            CommandRequest::ApplyLayout { topic_json, .. } => {
                let t = Topic::from_json_bytes(topic_json).unwrap();
                let sealed: Vec<u32> = t
                    .segments()
                    .iter()
                    .filter(|s| !s.is_open())
                    .map(|s| s.id.0)
                    .collect();
                format!("layout {} sealed {sealed:?}", t.name())
            }
        }
    }

    #[derive(Debug)]
    struct Result_ {
        at_ms: u64,
        broker: BrokerId,
        id: CommandId,
        request: CommandRequest,
        applied: bool,
        ok: bool,
    }

    pub(super) struct ServiceSim {
        rng: fastrand::Rng,
        now_ms: u64,
        service: ClusterService,
        _dir: tempfile::TempDir,
        brokers: BTreeMap<BrokerId, SimBroker>,
        network: Vec<Result_>,
        /// Requests asked and not answered: which broker asked (if one).
        pending: BTreeMap<AnswerToken, Option<BrokerId>>,
        next_token: AnswerToken,
        /// When each broker was not a member (from, until): a segment
        /// sealed then was sealed with nobody to tell.
        away: BTreeMap<BrokerId, Vec<(u64, Option<u64>)>>,
        losses: bool,
        pub(super) answered_changes: u64,
        pub(super) failed_commands: u64,
        pub(super) resyncs: u64,
        /// Layouts a broker ignored as older than the one it held.
        pub(super) ignored_layouts: u64,
    }

    impl ServiceSim {
        pub(super) fn new(seed: u64) -> ServiceSim {
            let dir = tempfile::tempdir().unwrap();
            let filer = Arc::new(filer::LocalFiler::open(dir.path()).unwrap());
            let config = ClusterConfig {
                broker_silence_ms: SILENCE_MS,
                rebalance: None,
                follower_lag_max_ms: kelp_control::FOLLOWER_LAG_MAX_MS,
                sealer_wait_ms: kelp_control::SEALER_WAIT_MS,
            };
            let service = ClusterService::open(
                Box::new(kelp_control::state_store::FilerStateStore::new(
                    filer.clone(),
                )),
                filer,
                "file:///sim".into(),
                config,
                COMMAND_TIMEOUT_MS,
            )
            .unwrap();
            let brokers = (0..BROKERS)
                .map(|id| {
                    (
                        BrokerId(id),
                        SimBroker {
                            applied: BTreeMap::new(),
                            refused: BTreeMap::new(),
                            stalled: false,
                            registered: false,
                            asking: None,
                            next_report_ms: 0,
                            log: Default::default(),
                        },
                    )
                })
                .collect();
            ServiceSim {
                rng: fastrand::Rng::with_seed(seed),
                now_ms: 1_000_000,
                service,
                _dir: dir,
                brokers,
                network: Vec::new(),
                pending: BTreeMap::new(),
                next_token: 0,
                away: (0..BROKERS)
                    .map(|id| (BrokerId(id), vec![(0, None)]))
                    .collect(),
                losses: true,
                answered_changes: 0,
                failed_commands: 0,
                resyncs: 0,
                ignored_layouts: 0,
            }
        }

        fn ask(
            &mut self,
            from: Option<BrokerId>,
            request: impl Into<ControlPortRequest>,
        ) -> AnswerToken {
            let request = request.into();
            let token = self.next_token;
            self.next_token += 1;
            self.pending.insert(token, from);
            let read_only = matches!(
                request,
                ControlPortRequest::Admin(
                    AdminRequest::DescribeTopic { .. }
                        | AdminRequest::ListBrokers
                        | AdminRequest::ListTopics
                )
            );
            self.service.handle_request(self.now_ms, token, request);
            self.outputs();
            if read_only {
                assert!(
                    !self.pending.contains_key(&token),
                    "a read-only request was not answered at once"
                );
            }
            token
        }

        /// Drain answers and commands after an input; check the layouts.
        fn outputs(&mut self) {
            while let Some((token, answer)) = self.service.poll_answer() {
                let from = self
                    .pending
                    .remove(&token)
                    .unwrap_or_else(|| panic!("answer to {token}, not asked or answered twice"));
                let Some(broker) = from else {
                    if matches!(answer, Response::Topic(_) | Response::Done) {
                        self.answered_changes += 1;
                    }
                    continue;
                };
                self.note(broker, format!("answered {:?}", answer.frame_type()));
                let b = self.brokers.get_mut(&broker).unwrap();
                b.asking = None;
                match answer {
                    Response::Registered { .. } => b.registered = true,
                    Response::Error {
                        code: ErrorCode::NotOwner,
                        ..
                    } => b.registered = false,
                    _ => {}
                }
            }
            while let Some(command) = self.service.poll_command() {
                self.note(
                    command.broker,
                    format!("sent {} {}", command.id.0, describe(&command.request)),
                );
                let stalled = self.brokers[&command.broker].stalled;
                let roll = self.rng.u32(0..100);
                let (applied, ok, at_ms) = if stalled || (self.losses && roll < 8) {
                    (false, false, self.now_ms + self.rng.u64(LOST_AFTER_MS))
                } else if self.losses && roll < 14 {
                    // Applied, the answer lost: its error comes before the
                    // state machine gives up (the link's timeout is
                    // shorter), so nothing it gave up on is applied later.
                    let within = 500..=COMMAND_TIMEOUT_MS - 1;
                    (true, false, self.now_ms + self.rng.u64(within))
                } else {
                    (true, true, self.now_ms + self.rng.u64(0..=600))
                };
                self.network.push(Result_ {
                    at_ms,
                    broker: command.broker,
                    id: command.id,
                    request: command.request,
                    applied,
                    ok,
                });
            }
            self.note_membership();
            self.check_layouts();
        }

        fn note(&mut self, broker: BrokerId, event: String) {
            let now = self.now_ms;
            let log = &mut self.brokers.get_mut(&broker).unwrap().log;
            log.push_back(format!("{now}: {event}"));
            if log.len() > 30 {
                log.pop_front();
            }
        }

        fn note_membership(&mut self) {
            for (id, intervals) in &mut self.away {
                let live = self.service.cluster().membership().is_live(*id);
                match intervals.last_mut() {
                    Some((_, until @ None)) if live => *until = Some(self.now_ms),
                    Some((_, Some(_))) | None if !live => intervals.push((self.now_ms, None)),
                    _ => {}
                }
            }
        }

        fn was_away(&self, broker: BrokerId, at_ms: u64) -> bool {
            self.away.get(&broker).is_some_and(|intervals| {
                intervals
                    .iter()
                    .any(|(from, until)| *from <= at_ms && until.is_none_or(|u| at_ms <= u))
            })
        }

        fn apply(&mut self, broker: BrokerId, request: &CommandRequest) {
            let b = self.brokers.get_mut(&broker).unwrap();
            match request {
                CommandRequest::DropTopic { topic } => {
                    let name = TopicName::parse(topic).unwrap();
                    b.applied.remove(&name);
                    b.refused.remove(&name);
                }
                CommandRequest::RefuseWrites { topic_json, .. } => {
                    // Kept whole (a refusal of a topic created again
                    // replaces one of the old).
                    let topic = Topic::from_json_bytes(topic_json).unwrap();
                    let newer = b.refused.get(topic.name()).is_none_or(|old| {
                        old.created_ms() < topic.created_ms()
                            || (old.created_ms() == topic.created_ms()
                                && layout_age(old) <= layout_age(&topic))
                    });
                    if newer {
                        b.refused.insert(topic.name().clone(), topic);
                    }
                }
                CommandRequest::ApplyLayout { topic_json, .. } => {
                    let topic = Topic::from_json_bytes(topic_json).unwrap();
                    if let Some(old) = b.applied.get(topic.name()) {
                        // The broker's own rule: an older layout is ignored,
                        // so what it holds is what it acts on.
                        if layout_age(&topic) < layout_age(old) {
                            self.ignored_layouts += 1;
                            b.log
                                .push_back(format!("{}: ignored as older", self.now_ms));
                            return;
                        }
                        assert!(
                            topic.created_ms() >= old.created_ms(),
                            "broker {broker}: took a layout of {} created at {} over one \
                             created at {}",
                            topic.name(),
                            topic.created_ms(),
                            old.created_ms()
                        );
                        if old.created_ms() == topic.created_ms() {
                            for s in old.segments() {
                                let now = topic.segment(s.id).map(|n| n.state);
                                assert!(
                                    s.state == SegmentState::Open
                                        || now == Some(SegmentState::Sealed),
                                    "broker {broker}: layout of {} went back: segment {} \
                                     sealed, then {now:?}",
                                    topic.name(),
                                    s.id.0
                                );
                            }
                        }
                    }
                    b.applied.insert(topic.name().clone(), topic);
                }
            }
        }

        fn check_layouts(&self) {
            let membership = self.service.cluster().membership();
            for (x, broker) in &self.brokers {
                for (name, layout) in &broker.applied {
                    // A deleted topic's layout is left where its drop did
                    // not arrive (a resync sends only live topics): no
                    // producer is routed to it.
                    let current = self.service.cluster().topic(name);
                    if current.is_none_or(|t| t.created_ms() != layout.created_ms()) {
                        continue;
                    }
                    for s in layout.open_segments() {
                        if s.broker != Some(*x) {
                            continue;
                        }
                        for p in layout
                            .segments()
                            .iter()
                            .filter(|p| p.successors.contains(&s.id))
                        {
                            let Some(y) = p.broker.filter(|y| y != x) else {
                                continue;
                            };
                            // Sealed there, or at least refusing writes.
                            let sealed_on_y = self.brokers.get(&y).and_then(|b| {
                                let held = |layouts: &BTreeMap<TopicName, Topic>| {
                                    layouts
                                        .get(name)
                                        .filter(|t| t.created_ms() == layout.created_ms())
                                        .and_then(|t| t.segment(p.id))
                                        .map(|q| q.state == SegmentState::Sealed)
                                };
                                match (held(&b.applied), held(&b.refused)) {
                                    (Some(true), _) | (_, Some(true)) => Some(true),
                                    (applied, refused) => applied.or(refused),
                                }
                            });
                            let excused = self.service.needs_resync(y)
                                || !membership.is_live(y)
                                || p.sealed_ms.is_some_and(|at| self.was_away(y, at));
                            if !(sealed_on_y == Some(true) || excused) {
                                eprintln!(
                                    "broker {y} lately: {:#?}\nbroker {x} lately: {:#?}",
                                    self.brokers[&y].log, self.brokers[x].log
                                );
                            }
                            assert!(
                                sealed_on_y == Some(true) || excused,
                                "broker {x} has {name}/{} open, but its predecessor {} still \
                                 takes writes on broker {y} ({sealed_on_y:?}; it holds {:?}, \
                                 created {})",
                                s.id.0,
                                p.id.0,
                                self.brokers
                                    .get(&y)
                                    .and_then(|b| b.applied.get(name))
                                    .map(|t| (
                                        t.created_ms(),
                                        t.segments()
                                            .iter()
                                            .map(|q| (q.id.0, q.state == SegmentState::Sealed))
                                            .collect::<Vec<_>>()
                                    )),
                                layout.created_ms(),
                            );
                            let _ = &self.brokers[&y].log;
                        }
                    }
                }
            }
        }

        fn random_open_segment(&mut self) -> Option<(TopicName, SegmentId)> {
            let topics: Vec<&Topic> = self.service.cluster().topics().collect();
            let topic = *topics.get(self.rng.usize(..topics.len().max(1)))?;
            let open: Vec<SegmentId> = topic.open_segments().map(|s| s.id).collect();
            let id = *open.get(self.rng.usize(..open.len().max(1)))?;
            Some((topic.name().clone(), id))
        }

        fn admin(&mut self) {
            let name = NAMES[self.rng.usize(..NAMES.len())].to_owned();
            let request = match self.rng.u32(0..10) {
                0 | 1 => AdminRequest::CreateTopic {
                    topic: name,
                    segments: self.rng.u32(1..=4),
                    replicas: self.rng.u32(0..3) as u8,
                },
                2 => AdminRequest::DeleteTopic { topic: name },
                3 | 4 => match self.random_open_segment() {
                    Some((topic, segment)) => AdminRequest::SplitSegment {
                        topic: topic.to_string(),
                        segment: segment.0,
                        pieces: 2,
                    },
                    None => return,
                },
                5 => {
                    let Some((topic, segment)) = self.random_open_segment() else {
                        return;
                    };
                    let t = self.service.cluster().topic(&topic).unwrap();
                    let a = t.segment(segment).unwrap();
                    let Some(b) = t
                        .open_segments()
                        .find(|b| u64::from(b.range.start()) == a.range.end())
                    else {
                        return;
                    };
                    AdminRequest::MergeSegments {
                        topic: topic.to_string(),
                        a: a.id.0,
                        b: b.id.0,
                    }
                }
                6 | 7 => match self.random_open_segment() {
                    Some((topic, segment)) => AdminRequest::MoveSegment {
                        topic: topic.to_string(),
                        segment: segment.0,
                        to: None,
                    },
                    None => return,
                },
                8 => AdminRequest::DescribeTopic { topic: name },
                _ => AdminRequest::ListBrokers,
            };
            self.ask(None, request);
        }

        fn brokers_act(&mut self) {
            let ids: Vec<BrokerId> = self.brokers.keys().copied().collect();
            for id in ids {
                let b = &self.brokers[&id];
                if b.stalled || b.asking.is_some() || self.now_ms < b.next_report_ms {
                    continue;
                }
                let request = if b.registered {
                    if self.service.needs_resync(id) {
                        self.resyncs += 1;
                    }
                    MembershipRequest::LoadReport {
                        broker: id.0,
                        segments: Vec::new(),
                    }
                } else {
                    MembershipRequest::RegisterBroker {
                        id: Some(id.0),
                        shards: (0..2)
                            .map(|shard| ShardAddress {
                                tcp: format!("broker-{}:{shard}", id.0),
                                quic: String::new(),
                            })
                            .collect(),
                        capacity_bytes_per_s: 1 << 20,
                        capacity_records_per_s: 1 << 14,
                    }
                };
                self.note(
                    id,
                    format!(
                        "asks {:?} resync {}",
                        request.frame_type(),
                        self.service.needs_resync(id)
                    ),
                );
                let token = self.next_token;
                let b = self.brokers.get_mut(&id).unwrap();
                b.asking = Some(token);
                b.next_report_ms = self.now_ms + REPORT_MS;
                self.ask(Some(id), request);
            }
        }

        fn deliver_results(&mut self) {
            let now = self.now_ms;
            let (mut due, later): (Vec<Result_>, Vec<Result_>) = std::mem::take(&mut self.network)
                .into_iter()
                .partition(|r| r.at_ms <= now);
            self.network = later;
            self.rng.shuffle(&mut due);
            for result in due {
                self.note(
                    result.broker,
                    format!(
                        "result {} applied {} ok {}",
                        result.id.0, result.applied, result.ok
                    ),
                );
                if result.applied && !self.brokers[&result.broker].stalled {
                    self.apply(result.broker, &result.request);
                }
                let outcome = if result.ok && !self.brokers[&result.broker].stalled {
                    Ok(())
                } else {
                    self.failed_commands += 1;
                    Err(CommandFailed::Lost("the simulated network lost it".into()))
                };
                self.service
                    .handle_command_done(now, result.broker, result.id, outcome);
                self.outputs();
            }
        }

        pub(super) fn step(&mut self, step: u64) {
            self.now_ms += STEP_MS;
            if self.losses {
                if self.rng.u32(0..100) < 30 {
                    self.admin();
                }
                if self.rng.u32(0..1000) < 15 {
                    let id = BrokerId(self.rng.u32(0..BROKERS));
                    let b = self.brokers.get_mut(&id).unwrap();
                    b.stalled = !b.stalled;
                }
            }
            self.brokers_act();
            self.deliver_results();
            if step % (TICK_MS / STEP_MS) == 0 {
                self.service.handle_tick(self.now_ms);
                self.outputs();
            }
        }

        /// Whether nothing is left to do: every request answered, nothing
        /// being carried out, every broker live and synced.
        fn settled(&self) -> bool {
            let membership = self.service.cluster().membership();
            self.pending.is_empty()
                && self.service.deliveries_pending() == 0
                && self
                    .brokers
                    .keys()
                    .all(|id| membership.is_live(*id) && !self.service.needs_resync(*id))
        }

        /// Heal everything, run quietly, and check the cluster converged.
        pub(super) fn settle(&mut self) {
            self.losses = false;
            for b in self.brokers.values_mut() {
                b.stalled = false;
            }
            // Deliveries of one topic go one after another, so the backlog
            // left by the faulty period takes time in proportion to it
            // (brokers coming back add some).
            let mut backlog = 0;
            let mut deadline_ms = SETTLE_MS;
            let mut quiet_ms = 0;
            let mut step = 0;
            while quiet_ms < SETTLE_TAIL_MS && step * STEP_MS < deadline_ms {
                self.step(step);
                step += 1;
                backlog = backlog.max(self.service.deliveries_pending() as u64);
                deadline_ms = SETTLE_MS + SETTLE_PER_DELIVERY_MS * backlog + SETTLE_TAIL_MS;
                if self.settled() {
                    quiet_ms += STEP_MS;
                } else {
                    quiet_ms = 0;
                }
            }
            assert!(
                self.pending.is_empty(),
                "unanswered {deadline_ms} ms after the faults ended (at most {backlog} \
                 deliveries pending since): {:?}",
                self.pending
            );
            assert_eq!(self.service.deliveries_pending(), 0);
            let live: BTreeSet<BrokerId> =
                self.service.cluster().membership().broker_ids().collect();
            assert_eq!(live.len(), BROKERS as usize, "every broker is back");
            for (id, broker) in &self.brokers {
                assert!(!self.service.needs_resync(*id), "broker {id} is not synced");
                for topic in self.service.cluster().topics() {
                    let owns = topic.open_segments().any(|s| s.broker == Some(*id));
                    let held = broker.applied.get(topic.name());
                    if owns || held.is_some() {
                        assert_eq!(
                            held.map(Topic::to_json_bytes),
                            Some(topic.to_json_bytes()),
                            "broker {id} does not hold the current layout of {}",
                            topic.name()
                        );
                    }
                }
            }
        }
    }
}

/// What one service simulation run went through, to show it exercised
/// what it is about.
#[derive(Debug, Default, Clone, Copy)]
struct ServiceTally {
    answered_changes: u64,
    failed_commands: u64,
    resyncs: u64,
    ignored_layouts: u64,
}

fn run_service(seed: u64, steps: u64) -> ServiceTally {
    replayable("service simulation", seed, |step_reached| {
        let mut sim = service_sim::ServiceSim::new(seed);
        for step in 0..steps {
            step_reached.set(step);
            sim.step(step);
        }
        step_reached.set(steps);
        sim.settle();
        ServiceTally {
            answered_changes: sim.answered_changes,
            failed_commands: sim.failed_commands,
            resyncs: sim.resyncs,
            ignored_layouts: sim.ignored_layouts,
        }
    })
}

#[test]
fn service_simulation_converges_through_lost_and_late_command_results() {
    let steps = env_u64("KELP_SIM_STEPS").unwrap_or(3_000);
    let seeds: Vec<u64> = match env_u64("KELP_SIM_SEED") {
        Some(seed) => vec![seed],
        None => (100..106).collect(),
    };
    let mut totals = ServiceTally::default();
    for seed in seeds {
        eprintln!("service simulation seed {seed} (replay with KELP_SIM_SEED={seed})");
        let tally = run_service(seed, steps);
        eprintln!(
            "seed {seed}: {} changes answered, {} commands failed, {} resyncs, \
             {} layouts ignored as older",
            tally.answered_changes, tally.failed_commands, tally.resyncs, tally.ignored_layouts
        );
        totals.answered_changes += tally.answered_changes;
        totals.failed_commands += tally.failed_commands;
        totals.resyncs += tally.resyncs;
        totals.ignored_layouts += tally.ignored_layouts;
    }
    // The run exercised what it is about.
    assert!(
        totals.answered_changes > 0 && totals.failed_commands > 0 && totals.resyncs > 0,
        "{totals:?}"
    );
}
