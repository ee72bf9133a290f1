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
    Action, BrokerId, BrokerInfo, Capacity, Cause, Cluster, ClusterConfig, ControlError, KeyRange,
    Rate, RebalancePolicy, ScalingPolicy, SegmentLoad, SegmentState, Topic, TopicName, RING_END,
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
        self.cluster
            .membership()
            .brokers()
            .map(|(id, _)| *id)
            .collect()
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
                        Err(ControlError::InvalidBroker(reason)) => {
                            assert!(reason.contains("without leaving first"), "{reason}")
                        }
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
                if let Some(action) =
                    Sim::expect_clean(self.cluster.create_topic(now, &name, count, policy))
                {
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
            let loads: Vec<SegmentLoad> = match self.cluster.membership().broker(id) {
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
                        })
                    })
                    .collect(),
                None => {
                    actions.extend(self.cluster.handle_register(now, info).unwrap());
                    continue;
                }
            };
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
        self.cluster.check_invariants()?;
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

fn run(seed: u64, steps: u64) -> Tally {
    let step_reached = Cell::new(0);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut sim = Sim::new(seed);
        for step in 0..steps {
            step_reached.set(step);
            let actions = sim.step();
            if let Err(reason) = sim.check(&actions) {
                panic!("invariant broken: {reason}");
            }
        }
        sim.tally
    }));
    match outcome {
        Ok(tally) => tally,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            panic!(
                "simulation failed at seed {seed}, step {}: {message}\nreplay with KELP_SIM_SEED={seed}",
                step_reached.get()
            );
        }
    }
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
