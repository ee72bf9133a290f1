//! Seeded randomized test: many simulated consumers join, sync, heartbeat,
//! commit, leave, change subscriptions and die against one coordinator on a
//! simulated clock, with invariants checked after every step. A failure
//! names its seed; `GROUP_SIM_SEED=<seed>` reruns that seed alone, and
//! `GROUP_SIM_SEEDS=<n>` runs n seeds instead of the default 48.

use std::collections::BTreeMap;

use super::consumer_group::ConsumerGroup;
use super::*;

const GROUP: &str = "sim";
const SESSION_MS: u32 = 10_000;
const REBALANCE_MS: u32 = 20_000;
const HEARTBEAT_EVERY_MS: u64 = 3_000;
const CLIENTS_MAX: usize = 10;
const SEEDS: u64 = 48;
const STEPS: usize = 2_500;
const SETTLE_STEPS: usize = 400;

/// Where a simulated consumer is, as a Kafka client tracks it.
#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Not in the group; its next move is a first JoinGroup.
    Idle,
    /// Has a member id, must (re)join.
    NeedJoin,
    /// A JoinGroup is parked under this token.
    Joining(Token),
    /// Joined generation `generation`; must SyncGroup. The leader holds the
    /// member list to assign to.
    Joined {
        generation: i32,
        members: Vec<String>,
    },
    /// A SyncGroup is parked under this token.
    Syncing(Token, i32),
    /// Has its assignment for `generation`.
    Stable { generation: i32 },
}

#[derive(Debug)]
struct Client {
    client_id: String,
    instance_id: Option<String>,
    member_id: String,
    phase: Phase,
    alive: bool,
    died_at_ms: u64,
    next_heartbeat_ms: u64,
    /// Toggled to change its protocol order (a resubscription).
    prefer_roundrobin: bool,
}

/// The kinds of event the simulation counts: the test fails if one never
/// happened, so a change that makes the simulation vacuous does not pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    GenerationJoined,
    AssignmentReceived,
    ParkedSyncReleased,
    RebalanceHeartbeat,
    MemberEvicted,
    IncompatibleRefused,
    BatchLeave,
    Fenced,
    Commit,
}

impl Event {
    const ALL: [Event; 9] = [
        Event::GenerationJoined,
        Event::AssignmentReceived,
        Event::ParkedSyncReleased,
        Event::RebalanceHeartbeat,
        Event::MemberEvicted,
        Event::IncompatibleRefused,
        Event::BatchLeave,
        Event::Fenced,
        Event::Commit,
    ];
}

/// How often each kind of event happened.
#[derive(Debug, Default, Clone)]
struct Stats(BTreeMap<Event, u64>);

impl Stats {
    fn saw(&mut self, event: Event) {
        *self.0.entry(event).or_default() += 1;
    }

    fn add(&mut self, other: &Stats) {
        for (&event, &count) in &other.0 {
            *self.0.entry(event).or_default() += count;
        }
    }

    /// The kinds of event that never happened.
    fn unseen(&self) -> Vec<Event> {
        Event::ALL
            .into_iter()
            .filter(|e| !self.0.contains_key(e))
            .collect()
    }
}

struct Sim {
    stats: Stats,
    rng: fastrand::Rng,
    c: Coordinator,
    now: u64,
    next_token: u64,
    clients: Vec<Client>,
    /// Chaos on: deaths, leaves, resubscriptions, new clients.
    chaos: bool,
    steps_done: usize,
}

impl Client {
    fn protocols(&self) -> Vec<Protocol> {
        let mut names = vec!["range", "roundrobin"];
        if self.prefer_roundrobin {
            names.reverse();
        }
        names
            .into_iter()
            .map(|n| Protocol {
                name: n.into(),
                metadata: n.as_bytes().to_vec(),
            })
            .collect()
    }
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let config = CoordinatorConfig {
            initial_rebalance_delay_ms: if seed % 2 == 0 { 0 } else { 1_500 },
            ..CoordinatorConfig::default()
        };
        Sim {
            stats: Stats::default(),
            rng: fastrand::Rng::with_seed(seed),
            c: Coordinator::new(config, seed),
            now: 1_000_000,
            next_token: 0,
            clients: Vec::new(),
            chaos: true,
            steps_done: 0,
        }
    }

    fn token(&mut self) -> Token {
        self.next_token += 1;
        Token(self.next_token)
    }

    fn spawn(&mut self) {
        let n = self.clients.len();
        // Few distinct client.ids: members must still be told apart.
        let client_id = format!("app{}", n % 3);
        let instance_id = (self.rng.u8(..) < 64).then(|| format!("instance-{n}"));
        self.clients.push(Client {
            client_id,
            instance_id,
            member_id: String::new(),
            phase: Phase::Idle,
            alive: true,
            died_at_ms: 0,
            next_heartbeat_ms: self.now,
            prefer_roundrobin: self.rng.bool(),
        });
    }

    fn group(&self) -> Option<&ConsumerGroup> {
        self.c.groups.get(GROUP)
    }

    fn step(&mut self) {
        self.steps_done += 1;
        self.now += self.rng.u64(0..=1_500);
        let released = self.c.tick(self.now);
        self.deliver(released);
        self.check();
        // Dead clients' members must be gone once their session ran out.
        for c in self
            .clients
            .iter_mut()
            .filter(|c| !c.alive && !c.member_id.is_empty())
        {
            let g = self.c.groups.get(GROUP);
            if !g.is_some_and(|g| g.has_id(&c.member_id)) {
                self.stats.saw(Event::MemberEvicted);
                c.member_id.clear();
            } else {
                // Worst case: parked in a join phase (rebalance timeout),
                // then silent in the next generation (session timeout).
                let limit = u64::from(REBALANCE_MS + SESSION_MS) + 1_500;
                assert!(
                    self.now < c.died_at_ms + limit,
                    "dead member {} outlived its timeouts",
                    c.member_id
                );
            }
        }

        if self.chaos {
            let alive = self.clients.iter().filter(|c| c.alive).count();
            if alive < CLIENTS_MAX && self.rng.u8(..) < 40 {
                self.spawn();
            }
            if self.rng.u8(..) < 6 {
                if let Some(i) = self.pick_alive() {
                    self.die(i);
                }
            }
            if self.rng.u8(..) < 4 {
                self.static_twin();
            }
            if self.rng.u8(..) < 8 {
                self.incompatible_join();
            }
            if self.rng.u8(..) < 6 {
                self.leave_several();
            }
        }
        for i in 0..self.clients.len() {
            if !self.clients[i].alive {
                continue;
            }
            let due = self.now >= self.clients[i].next_heartbeat_ms;
            if due || self.rng.u8(..) < 90 {
                self.act(i);
                self.check();
            }
        }
    }

    fn die(&mut self, i: usize) {
        self.clients[i].alive = false;
        self.clients[i].died_at_ms = self.now;
    }

    /// A static member's process is restarted while the old one still runs
    /// (a zombie): the new one takes the instance id, the old is fenced.
    fn static_twin(&mut self) {
        let alive = self.clients.iter().filter(|c| c.alive).count();
        let candidates: Vec<usize> = (0..self.clients.len())
            .filter(|&i| self.clients[i].alive && self.clients[i].instance_id.is_some())
            .collect();
        if candidates.is_empty() || alive >= CLIENTS_MAX {
            return;
        }
        let old = candidates[self.rng.usize(..candidates.len())];
        self.spawn();
        let new = self.clients.len() - 1;
        self.clients[new].instance_id = self.clients[old].instance_id.clone();
        self.clients[new].client_id = self.clients[old].client_id.clone();
    }

    /// FENCED_INSTANCE_ID is fatal to a Kafka client: it stops.
    fn fenced(&mut self, i: usize) {
        self.stats.saw(Event::Fenced);
        self.die(i);
        self.clients[i].member_id.clear();
    }

    fn pick_alive(&mut self) -> Option<usize> {
        let alive: Vec<usize> = (0..self.clients.len())
            .filter(|&i| self.clients[i].alive)
            .collect();
        (!alive.is_empty()).then(|| alive[self.rng.usize(..alive.len())])
    }

    fn join_request(&self, i: usize) -> JoinRequest {
        let c = &self.clients[i];
        JoinRequest {
            group_id: GROUP.into(),
            member_id: c.member_id.clone(),
            group_instance_id: c.instance_id.clone(),
            client_id: c.client_id.clone(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: SESSION_MS,
            rebalance_timeout_ms: REBALANCE_MS,
            protocol_type: "consumer".into(),
            protocols: c.protocols(),
            require_known_member_id: true,
        }
    }

    /// One move of client `i`, then the answers it released are delivered
    /// at once, as the gateway does after every call.
    fn act(&mut self, i: usize) {
        self.act_inner(i);
        let released = self.c.take_released();
        self.deliver(released);
    }

    fn act_inner(&mut self, i: usize) {
        let phase = self.clients[i].phase.clone();
        match phase {
            Phase::Idle | Phase::NeedJoin => {
                if phase == Phase::Idle {
                    self.clients[i].member_id.clear();
                }
                let token = self.token();
                let answer = self.c.join(self.now, token, self.join_request(i));
                self.clients[i].phase = Phase::Joining(token);
                if let Some(r) = answer {
                    self.on_join(i, token, r);
                }
            }
            Phase::Joining(_) | Phase::Syncing(..) => {}
            Phase::Joined {
                generation,
                members,
            } => {
                let member_id = self.clients[i].member_id.clone();
                let leader = !members.is_empty();
                let assignments = members
                    .iter()
                    .map(|m| MemberAssignment {
                        member_id: m.clone(),
                        assignment: format!("{m}@{generation}").into_bytes(),
                    })
                    .collect();
                let req = SyncRequest {
                    group_id: GROUP.into(),
                    generation_id: generation,
                    member_id,
                    group_instance_id: self.clients[i].instance_id.clone(),
                    protocol_type: Some("consumer".into()),
                    protocol_name: None,
                    assignments: if leader { assignments } else { Vec::new() },
                };
                let token = self.token();
                self.clients[i].phase = Phase::Syncing(token, generation);
                let answer = self.c.sync(self.now, token, req);
                if let Some(r) = answer {
                    self.on_sync(i, token, r);
                }
            }
            Phase::Stable { generation } => {
                let roll = self.rng.u8(..);
                if self.chaos && roll < 4 {
                    self.leave_one(i);
                } else if self.chaos && roll < 10 {
                    // Resubscribe: same protocols, other order.
                    self.clients[i].prefer_roundrobin = !self.clients[i].prefer_roundrobin;
                    self.clients[i].phase = Phase::NeedJoin;
                    self.act_inner(i);
                } else if roll < 40 {
                    self.commit(i, generation);
                } else {
                    self.heartbeat(i, generation);
                }
            }
        }
    }

    fn heartbeat(&mut self, i: usize, generation: i32) {
        let req = HeartbeatRequest {
            group_id: GROUP.into(),
            generation_id: generation,
            member_id: self.clients[i].member_id.clone(),
            group_instance_id: self.clients[i].instance_id.clone(),
        };
        let error = self.c.heartbeat(self.now, &req);
        self.clients[i].next_heartbeat_ms = self.now + HEARTBEAT_EVERY_MS;
        let group_generation = self.group().map_or(-1, |g| g.generation_id);
        let state = self.group().map(|g| g.state);
        match error {
            ErrorCode::NONE => {
                assert_eq!(
                    group_generation, generation,
                    "heartbeat accepted for another generation"
                );
                assert!(matches!(
                    state,
                    Some(GroupState::Stable | GroupState::CompletingRebalance)
                ));
            }
            ErrorCode::REBALANCE_IN_PROGRESS => {
                assert!(
                    state.is_some_and(|s| s.is_rebalancing()),
                    "REBALANCE_IN_PROGRESS in {state:?}"
                );
                self.stats.saw(Event::RebalanceHeartbeat);
                self.clients[i].phase = Phase::NeedJoin;
            }
            ErrorCode::UNKNOWN_MEMBER_ID => {
                self.stats.saw(Event::MemberEvicted);
                self.clients[i].phase = Phase::Idle;
            }
            ErrorCode::FENCED_INSTANCE_ID => self.fenced(i),
            ErrorCode::ILLEGAL_GENERATION => {
                assert!(
                    !state.is_some_and(|s| s.is_rebalancing()) || generation > group_generation
                );
                self.clients[i].phase = Phase::NeedJoin;
            }
            other => panic!("unexpected heartbeat answer {other:?}"),
        }
    }

    fn commit(&mut self, i: usize, generation: i32) {
        let offset = self.rng.i64(0..1_000_000);
        let partition = self.rng.i32(0..4);
        let req = OffsetCommitRequest {
            group_id: GROUP.into(),
            generation_id: generation,
            member_id: self.clients[i].member_id.clone(),
            group_instance_id: self.clients[i].instance_id.clone(),
            topics: vec![TopicCommit {
                topic: "orders".into(),
                partitions: vec![PartitionCommit {
                    partition,
                    offset,
                    leader_epoch: -1,
                    metadata: None,
                }],
            }],
        };
        let r = self
            .c
            .commit_offsets(self.now, req, |t, p| t == "orders" && (0..4).contains(&p));
        let error = r.topics[0].partitions[0].1;
        let committed = self
            .c
            .group_offsets(GROUP)
            .and_then(|o| o.get("orders", partition))
            .map(|c| c.offset);
        if error.is_ok() {
            self.stats.saw(Event::Commit);
            assert_eq!(committed, Some(offset));
        } else if error == ErrorCode::FENCED_INSTANCE_ID {
            self.fenced(i);
        } else {
            assert!(
                [
                    ErrorCode::REBALANCE_IN_PROGRESS,
                    ErrorCode::ILLEGAL_GENERATION,
                    ErrorCode::UNKNOWN_MEMBER_ID,
                    ErrorCode::FENCED_INSTANCE_ID
                ]
                .contains(&error),
                "unexpected commit answer {error:?}"
            );
        }
    }

    fn leave_one(&mut self, i: usize) {
        let req = LeaveRequest {
            group_id: GROUP.into(),
            members: vec![LeavingMember {
                member_id: self.clients[i].member_id.clone(),
                group_instance_id: None,
            }],
        };
        let r = self.c.leave(self.now, req);
        assert!(matches!(
            r.members[0].error,
            ErrorCode::NONE | ErrorCode::UNKNOWN_MEMBER_ID
        ));
        self.clients[i].phase = Phase::Idle;
        self.clients[i].member_id.clear();
        assert!(!self
            .group()
            .is_some_and(|g| g.members.contains_key(&self.clients[i].member_id)));
    }

    /// A batch LeaveGroup of some members and an unknown one: each answered
    /// on its own, the unknown one without disturbing the others.
    fn leave_several(&mut self) {
        let Some(g) = self.group() else { return };
        let known: Vec<String> = g.members.keys().cloned().collect();
        if known.is_empty() {
            return;
        }
        let chosen: Vec<String> = known.into_iter().filter(|_| self.rng.u8(..) < 60).collect();
        let mut members: Vec<LeavingMember> = chosen
            .iter()
            .map(|m| LeavingMember {
                member_id: m.clone(),
                group_instance_id: None,
            })
            .collect();
        members.insert(
            0,
            LeavingMember {
                member_id: "no-such-member".into(),
                group_instance_id: None,
            },
        );
        let r = self.c.leave(
            self.now,
            LeaveRequest {
                group_id: GROUP.into(),
                members,
            },
        );
        assert_eq!(r.members[0].error, ErrorCode::UNKNOWN_MEMBER_ID);
        assert!(
            r.members[1..].iter().all(|m| m.error == ErrorCode::NONE),
            "{r:?}"
        );
        self.stats.saw(Event::BatchLeave);
        for m in &chosen {
            assert!(!self.group().is_some_and(|g| g.members.contains_key(m)));
            // The clients learn on their next call; the simulation moves them on now.
            if let Some(c) = self.clients.iter_mut().find(|c| &c.member_id == m) {
                c.phase = Phase::Idle;
                c.member_id.clear();
            }
        }
        let released = self.c.take_released();
        self.deliver(released);
    }

    fn incompatible_join(&mut self) {
        let Some(before) = self.group().cloned() else {
            return;
        };
        if before.members.is_empty() {
            return;
        }
        let mut req = JoinRequest {
            group_id: GROUP.into(),
            member_id: String::new(),
            group_instance_id: None,
            client_id: "intruder".into(),
            client_host: "/127.0.0.2".into(),
            session_timeout_ms: SESSION_MS,
            rebalance_timeout_ms: REBALANCE_MS,
            protocol_type: "consumer".into(),
            protocols: vec![Protocol {
                name: "sticky".into(),
                metadata: Vec::new(),
            }],
            require_known_member_id: self.rng.bool(),
        };
        if self.rng.bool() {
            req.protocol_type = "connect".into();
            req.protocols[0].name = "range".into();
        }
        let token = self.token();
        let r = self.c.join(self.now, token, req);
        assert_eq!(
            r.map(|r| r.error),
            Some(ErrorCode::INCONSISTENT_GROUP_PROTOCOL)
        );
        assert_eq!(
            self.group(),
            Some(&before),
            "a refused join changed the group"
        );
        assert!(self.c.take_released().is_empty());
        self.stats.saw(Event::IncompatibleRefused);
    }

    fn client_by_token(&self, token: Token) -> Option<usize> {
        self.clients.iter().position(|c| match c.phase {
            Phase::Joining(t) | Phase::Syncing(t, _) => t == token,
            _ => false,
        })
    }

    /// Hands released answers to their clients, checking that one batch
    /// never mixes generations or leaders.
    fn deliver(&mut self, released: Vec<Released>) {
        let mut join_generation: Option<i32> = None;
        let mut leader: Option<String> = None;
        for r in released {
            if let Released::Join { response, .. } = &r {
                if response.error.is_ok() {
                    assert_eq!(
                        *join_generation.get_or_insert(response.generation_id),
                        response.generation_id,
                        "joins of two generations released together"
                    );
                    assert_eq!(
                        leader.get_or_insert(response.leader_id.clone()),
                        &response.leader_id,
                        "two leaders in one generation"
                    );
                }
            }
            let token = r.token();
            let Some(i) = self.client_by_token(token) else {
                continue;
            };
            if !self.clients[i].alive {
                continue; // its connection is gone; the answer is dropped
            }
            match r {
                Released::Join { response, .. } => self.on_join(i, token, response),
                Released::Sync { response, .. } => {
                    if response.error.is_ok() {
                        self.stats.saw(Event::ParkedSyncReleased);
                    }
                    self.on_sync(i, token, response)
                }
            }
        }
    }

    fn on_join(&mut self, i: usize, token: Token, r: JoinResponse) {
        assert_eq!(self.clients[i].phase, Phase::Joining(token));
        self.clients[i].next_heartbeat_ms = self.now + HEARTBEAT_EVERY_MS;
        match r.error {
            ErrorCode::NONE => {
                let g = self.group().expect("group exists after a join");
                assert!(
                    g.members.contains_key(&r.member_id),
                    "joined member is a member"
                );
                assert!(
                    g.members.contains_key(&r.leader_id),
                    "leader {} is a member",
                    r.leader_id
                );
                if !self.clients[i].member_id.is_empty() && self.clients[i].instance_id.is_none() {
                    assert_eq!(
                        r.member_id, self.clients[i].member_id,
                        "a dynamic member keeps its id"
                    );
                }
                if r.leader_id == r.member_id {
                    let mut listed: Vec<&str> =
                        r.members.iter().map(|m| m.member_id.as_str()).collect();
                    listed.sort_unstable();
                    let current: Vec<&str> = g.members.keys().map(String::as_str).collect();
                    assert_eq!(
                        g.generation_id, r.generation_id,
                        "join answer of an old generation"
                    );
                    assert_eq!(listed, current, "the leader sees exactly the members");
                } else {
                    assert!(r.members.is_empty(), "only the leader gets the member list");
                }
                self.stats.saw(Event::GenerationJoined);
                self.clients[i].member_id = r.member_id;
                let members = r.members.into_iter().map(|m| m.member_id).collect();
                self.clients[i].phase = Phase::Joined {
                    generation: r.generation_id,
                    members,
                };
            }
            ErrorCode::MEMBER_ID_REQUIRED => {
                self.clients[i].member_id = r.member_id;
                self.clients[i].phase = Phase::NeedJoin;
            }
            ErrorCode::REBALANCE_IN_PROGRESS => self.clients[i].phase = Phase::NeedJoin,
            ErrorCode::UNKNOWN_MEMBER_ID | ErrorCode::GROUP_MAX_SIZE_REACHED => {
                self.clients[i].phase = Phase::Idle
            }
            ErrorCode::FENCED_INSTANCE_ID => self.fenced(i),
            other => panic!("unexpected join answer {other:?}"),
        }
    }

    fn on_sync(&mut self, i: usize, token: Token, r: SyncResponse) {
        let Phase::Syncing(t, generation) = self.clients[i].phase else {
            panic!(
                "sync answer for a client not syncing: {:?}",
                self.clients[i].phase
            )
        };
        assert_eq!(t, token);
        self.clients[i].next_heartbeat_ms = self.now + HEARTBEAT_EVERY_MS;
        match r.error {
            ErrorCode::NONE => {
                assert_eq!(
                    r.generation_id, generation,
                    "sync answer of another generation than joined"
                );
                let text = String::from_utf8(r.assignment).expect("assignments are text here");
                let (member, assigned_generation) =
                    text.rsplit_once('@').expect("assignment shape");
                assert_eq!(
                    assigned_generation,
                    generation.to_string(),
                    "assignment of another generation"
                );
                if self.clients[i].instance_id.is_none() {
                    assert_eq!(
                        member, self.clients[i].member_id,
                        "someone else's assignment"
                    );
                }
                self.stats.saw(Event::AssignmentReceived);
                self.clients[i].phase = Phase::Stable { generation };
            }
            ErrorCode::REBALANCE_IN_PROGRESS | ErrorCode::ILLEGAL_GENERATION => {
                assert!(r.assignment.is_empty());
                self.clients[i].phase = Phase::NeedJoin;
            }
            ErrorCode::UNKNOWN_MEMBER_ID => self.clients[i].phase = Phase::Idle,
            ErrorCode::FENCED_INSTANCE_ID => self.fenced(i),
            other => panic!("unexpected sync answer {other:?}"),
        }
    }

    fn check(&self) {
        let Some(g) = self.group() else { return };
        g.assert_invariants();
        // Two live clients never hold the same member id.
        let mut ids: Vec<&str> = self
            .clients
            .iter()
            .filter(|c| c.alive && !c.member_id.is_empty())
            .map(|c| c.member_id.as_str())
            .collect();
        ids.sort_unstable();
        let before = ids.len();
        ids.dedup();
        assert_eq!(before, ids.len(), "two clients share a member id");
        if g.state == GroupState::Stable {
            for c in self.clients.iter().filter(|c| c.alive) {
                if let Phase::Stable { generation } = c.phase {
                    if g.members.contains_key(&c.member_id) && generation == g.generation_id {
                        let m = &g.members[&c.member_id];
                        assert_eq!(m.assignment_generation, generation);
                    }
                }
            }
        }
    }

    /// Chaos off: every live client behaves; the group must settle Stable
    /// with exactly the live clients as members.
    fn settle(&mut self) {
        self.chaos = false;
        for _ in 0..SETTLE_STEPS {
            self.step();
        }
        let live: Vec<&str> = {
            let mut v: Vec<&str> = self
                .clients
                .iter()
                .filter(|c| c.alive)
                .map(|c| c.member_id.as_str())
                .collect();
            v.sort_unstable();
            v
        };
        match self.group() {
            Some(g) if !live.is_empty() => {
                assert_eq!(g.state, GroupState::Stable, "did not settle");
                let members: Vec<&str> = g.members.keys().map(String::as_str).collect();
                assert_eq!(members, live, "members are not the live clients");
            }
            Some(g) => assert!(g.members.is_empty()),
            None => assert!(live.is_empty(), "live clients but no group"),
        }
    }
}

fn run(seed: u64) -> (usize, Stats) {
    let mut sim = Sim::new(seed);
    for _ in 0..3 {
        sim.spawn();
    }
    for _ in 0..STEPS {
        sim.step();
    }
    sim.settle();
    (sim.steps_done, sim.stats)
}

#[test]
fn randomized_members_against_tick_keep_invariants() {
    // GROUP_SIM_SEEDS=<n> runs more seeds (a longer soak by hand).
    let count = std::env::var("GROUP_SIM_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SEEDS);
    let seeds = (0..count).map(|i| 0x6b65_6c70_0000 + i);
    let mut steps = 0;
    let mut stats = Stats::default();
    for (n, s) in test_support::seeded("GROUP_SIM_SEED", seeds, run) {
        steps += n;
        stats.add(&s);
    }
    eprintln!("group simulation: {steps} steps, {stats:?}");
    let unseen = stats.unseen();
    assert!(unseen.is_empty(), "never happened: {unseen:?} ({stats:?})");
}
