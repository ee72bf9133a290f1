//! The coordinator's behaviour, one named test per semantic the gateway
//! depends on (numbered as in kelp issue 5), plus the rules around them.

use super::consumer_group::ConsumerGroup;
use super::*;

const T0: u64 = 1_000_000;
const SESSION_MS: u32 = 10_000;
const REBALANCE_MS: u32 = 30_000;

/// A coordinator on a simulated clock, handing out tokens.
struct Harness {
    c: Coordinator,
    now: u64,
    next_token: u64,
}

fn protocols(names: &[&str]) -> Vec<Protocol> {
    names
        .iter()
        .map(|n| Protocol {
            name: (*n).to_owned(),
            metadata: format!("sub-{n}").into_bytes(),
        })
        .collect()
}

fn join_request(group: &str, member_id: &str, client_id: &str, names: &[&str]) -> JoinRequest {
    JoinRequest {
        group_id: group.to_owned(),
        member_id: member_id.to_owned(),
        group_instance_id: None,
        client_id: client_id.to_owned(),
        client_host: "/127.0.0.1".to_owned(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        protocol_type: "consumer".to_owned(),
        protocols: protocols(names),
        require_known_member_id: true,
    }
}

fn sync_request(
    group: &str,
    generation_id: i32,
    member_id: &str,
    assignments: Vec<MemberAssignment>,
) -> SyncRequest {
    SyncRequest {
        group_id: group.to_owned(),
        generation_id,
        member_id: member_id.to_owned(),
        group_instance_id: None,
        protocol_type: Some("consumer".to_owned()),
        protocol_name: None,
        assignments,
    }
}

fn assignment_for(member_id: &str, generation_id: i32) -> Vec<u8> {
    format!("{member_id}@{generation_id}").into_bytes()
}

const DEFAULT_PROTOCOLS: &[&str] = &["range", "roundrobin"];

impl Harness {
    fn new() -> Harness {
        let config = CoordinatorConfig {
            initial_rebalance_delay_ms: 0,
            ..CoordinatorConfig::default()
        };
        Harness {
            c: Coordinator::new(config, 7),
            now: T0,
            next_token: 1,
        }
    }

    fn token(&mut self) -> Token {
        self.next_token += 1;
        Token(self.next_token)
    }

    /// The v4+ first round trip: answered MEMBER_ID_REQUIRED with an id.
    fn member_id_for(&mut self, group: &str, client_id: &str) -> String {
        let token = self.token();
        let r = self.c.join(
            self.now,
            token,
            join_request(group, "", client_id, DEFAULT_PROTOCOLS),
        );
        let r = r.expect("first join is answered at once");
        assert_eq!(r.error, ErrorCode::MEMBER_ID_REQUIRED);
        assert!(!r.member_id.is_empty());
        r.member_id
    }

    fn join(&mut self, req: JoinRequest) -> (Token, Option<JoinResponse>) {
        let token = self.token();
        (token, self.c.join(self.now, token, req))
    }

    fn sync(&mut self, req: SyncRequest) -> (Token, Option<SyncResponse>) {
        let token = self.token();
        (token, self.c.sync(self.now, token, req))
    }

    fn heartbeat(&mut self, group: &str, generation_id: i32, member_id: &str) -> ErrorCode {
        let req = HeartbeatRequest {
            group_id: group.to_owned(),
            generation_id,
            member_id: member_id.to_owned(),
            group_instance_id: None,
        };
        self.c.heartbeat(self.now, &req)
    }

    fn released(&mut self) -> Vec<Released> {
        self.c.take_released()
    }

    fn group(&self, group: &str) -> &ConsumerGroup {
        self.c.groups.get(group).expect("group exists")
    }

    /// Answers released for JoinGroup, by token.
    fn released_joins(&mut self) -> Vec<(Token, JoinResponse)> {
        self.released()
            .into_iter()
            .map(|r| match r {
                Released::Join { token, response } => (token, response),
                other => panic!("expected a join answer, got {other:?}"),
            })
            .collect()
    }

    /// `clients.len()` members join; the join phase completes. Returns
    /// member ids in join order (the first is the leader) and the generation.
    fn joined_group(&mut self, group: &str, clients: &[&str]) -> (Vec<String>, i32) {
        let ids: Vec<String> = clients
            .iter()
            .map(|c| self.member_id_for(group, c))
            .collect();
        for (id, client) in ids.iter().zip(clients) {
            let (_, r) = self.join(join_request(group, id, client, DEFAULT_PROTOCOLS));
            assert!(r.is_none(), "a join during the join phase is parked");
        }
        let joins = self.released_joins();
        assert_eq!(joins.len(), ids.len());
        (ids, joins[0].1.generation_id)
    }

    /// `clients.len()` members join and sync; the group ends Stable. Returns
    /// member ids in join order (the first is the leader) and the generation.
    fn stable_group(&mut self, group: &str, clients: &[&str]) -> (Vec<String>, i32) {
        let (ids, generation) = self.joined_group(group, clients);
        self.sync_all(group, &ids, generation);
        assert_eq!(self.group(group).state, GroupState::Stable);
        (ids, generation)
    }

    /// A follower's SyncGroup, which waits for the leader: its token.
    fn parked_sync(&mut self, group: &str, generation: i32, member_id: &str) -> Token {
        let (token, r) = self.sync(sync_request(group, generation, member_id, Vec::new()));
        assert!(
            r.is_none(),
            "follower sync is parked until the leader assigns"
        );
        token
    }

    /// A LeaveGroup of dynamic members.
    fn leave(&mut self, group: &str, member_ids: &[&str]) -> LeaveResponse {
        let members = member_ids
            .iter()
            .map(|id| LeavingMember {
                member_id: (*id).to_owned(),
                group_instance_id: None,
            })
            .collect();
        let req = LeaveRequest {
            group_id: group.to_owned(),
            members,
        };
        self.c.leave(self.now, req)
    }

    /// Followers sync (parked), then the leader `ids[0]` assigns.
    fn sync_all(&mut self, group: &str, ids: &[String], generation: i32) {
        for id in &ids[1..] {
            self.parked_sync(group, generation, id);
        }
        let assignments = ids
            .iter()
            .map(|id| MemberAssignment {
                member_id: id.clone(),
                assignment: assignment_for(id, generation),
            })
            .collect();
        let (_, r) = self.sync(sync_request(group, generation, &ids[0], assignments));
        let r = r.expect("leader sync answered at once");
        assert_eq!(r.error, ErrorCode::NONE);
        assert_eq!(r.assignment, assignment_for(&ids[0], generation));
        let released = self.released();
        assert_eq!(released.len(), ids.len() - 1);
    }
}

// ---- 1. members are told apart by member id, never by client.id ----

#[test]
fn same_client_id_makes_two_members() {
    let mut h = Harness::new();
    let (ids, generation) = h.stable_group("g", &["app", "app"]);
    assert_ne!(ids[0], ids[1]);
    assert!(ids.iter().all(|id| id.starts_with("app-")));
    let g = h.group("g");
    assert_eq!(g.members.len(), 2);
    assert_eq!(generation, 1);
    // Each got its own assignment.
    for id in &ids {
        assert_eq!(g.members[id].assignment, assignment_for(id, generation));
    }
    let described = h.c.describe(&["g".to_owned()]);
    assert_eq!(described[0].members.len(), 2);
    assert!(described[0].members.iter().all(|m| m.client_id == "app"));
    // A heartbeat from one does not stand in for the other.
    h.now += u64::from(SESSION_MS) / 2;
    assert_eq!(h.heartbeat("g", generation, &ids[0]), ErrorCode::NONE);
    h.now += u64::from(SESSION_MS) / 2 + 1;
    assert!(h.c.tick(h.now).is_empty());
    assert!(h.group("g").members.contains_key(&ids[0]));
    assert!(
        !h.group("g").members.contains_key(&ids[1]),
        "the silent twin expires"
    );
}

#[test]
fn join_without_member_id_before_v4_joins_at_once_with_fresh_id() {
    let mut h = Harness::new();
    let mut req = join_request("g", "", "app", DEFAULT_PROTOCOLS);
    req.require_known_member_id = false;
    let (t1, r) = h.join(req.clone());
    assert!(r.is_none());
    let joins = h.released_joins();
    assert_eq!(joins.len(), 1);
    assert_eq!(joins[0].0, t1);
    assert_eq!(joins[0].1.error, ErrorCode::NONE);
    assert_eq!(joins[0].1.leader_id, joins[0].1.member_id);
    // The same client.id again is a second member, not the first one.
    let (_, r) = h.join(req);
    assert!(r.is_none());
    assert_eq!(h.group("g").members.len(), 2);
}

// ---- 2. a member that rejoins is updated in place and keeps its assignment ----

#[test]
fn rejoin_updates_member_in_place_and_keeps_assignment() {
    let mut h = Harness::new();
    let (ids, generation) = h.stable_group("g", &["a", "b"]);
    let (a, b) = (ids[0].clone(), ids[1].clone());

    // Unchanged follower rejoin while Stable (from a new address): updated in
    // place, the current generation, no rebalance.
    let mut req = join_request("g", &b, "b", DEFAULT_PROTOCOLS);
    req.client_host = "/10.0.0.1".to_owned();
    let (_, r) = h.join(req);
    let r = r.expect("answered at once");
    assert_eq!(
        (r.error, r.generation_id, r.member_id.as_str()),
        (ErrorCode::NONE, generation, b.as_str())
    );
    assert_eq!(h.group("g").state, GroupState::Stable);
    assert_eq!(h.group("g").members.len(), 2);
    assert_eq!(h.group("g").members[&b].client_host, "/10.0.0.1");
    let (_, s) = h.sync(sync_request("g", generation, &b, Vec::new()));
    assert_eq!(
        s.expect("stable sync answered").assignment,
        assignment_for(&b, generation)
    );

    // A changed subscription: updated in place, rebalance, assignment kept.
    let mut req = join_request("g", &b, "b-renamed", &["range"]);
    req.client_host = "/10.0.0.2".to_owned();
    let (_, r) = h.join(req);
    assert!(r.is_none(), "parked until the leader rejoins");
    let g = h.group("g");
    assert_eq!(g.state, GroupState::PreparingRebalance);
    assert_eq!(g.members.len(), 2, "no second entry for the same member");
    let m = &g.members[&b];
    assert_eq!(
        (m.client_id.as_str(), m.client_host.as_str()),
        ("b-renamed", "/10.0.0.2")
    );
    assert_eq!(m.protocols, protocols(&["range"]));
    assert_eq!(
        m.assignment,
        assignment_for(&b, generation),
        "assignment kept across the rejoin"
    );
    assert_eq!(m.join_seq, 1, "same member, same place in join order");

    let (_, r) = h.join(join_request("g", &a, "a", DEFAULT_PROTOCOLS));
    assert!(r.is_none());
    let joins = h.released_joins();
    assert_eq!(joins.len(), 2);
    assert!(joins.iter().all(|(_, j)| j.generation_id == generation + 1));
    assert_eq!(h.group("g").protocol_name.as_deref(), Some("range"));
    // Still held until the leader assigns the new generation.
    assert_eq!(
        h.group("g").members[&b].assignment,
        assignment_for(&b, generation)
    );
    h.sync_all("g", &ids, generation + 1);
    assert_eq!(
        h.group("g").members[&b].assignment,
        assignment_for(&b, generation + 1)
    );
}

// ---- 3. follower SyncGroup while not Stable ----

#[test]
fn follower_sync_while_not_stable_is_refused_or_parked_never_empty() {
    let mut h = Harness::new();
    let (ids, g1) = h.stable_group("g", &["a", "b", "c"]);
    // A new member starts a rebalance: the group is PreparingRebalance.
    let d = h.member_id_for("g", "d");
    let (_, r) = h.join(join_request("g", &d, "d", DEFAULT_PROTOCOLS));
    assert!(r.is_none());
    assert_eq!(h.group("g").state, GroupState::PreparingRebalance);
    let (_, s) = h.sync(sync_request("g", g1, &ids[1], Vec::new()));
    let s = s.expect("answered at once");
    assert_eq!(s.error, ErrorCode::REBALANCE_IN_PROGRESS);
    assert!(s.assignment.is_empty());

    // Everyone rejoins: CompletingRebalance. Followers' syncs are parked.
    for id in &ids {
        let client = id.split('-').next().unwrap_or("x").to_owned();
        let (_, r) = h.join(join_request("g", id, &client, DEFAULT_PROTOCOLS));
        assert!(r.is_none());
    }
    let joins = h.released_joins();
    assert_eq!(joins.len(), 4);
    let g2 = g1 + 1;
    assert_eq!(h.group("g").state, GroupState::CompletingRebalance);
    let mut parked = Vec::new();
    for id in [&ids[1], &ids[2], &d] {
        let (token, r) = h.sync(sync_request("g", g2, id, Vec::new()));
        assert!(
            r.is_none(),
            "follower sync is parked, not answered with an empty assignment"
        );
        parked.push((token, id.clone()));
    }
    assert!(h.released().is_empty());

    // The leader's sync completes the generation and releases every follower
    // with its own assignment.
    let all = [&ids[0], &ids[1], &ids[2], &d];
    let assignments = all
        .iter()
        .map(|id| MemberAssignment {
            member_id: (*id).clone(),
            assignment: assignment_for(id, g2),
        })
        .collect();
    let (_, s) = h.sync(sync_request("g", g2, &ids[0], assignments));
    assert_eq!(
        s.expect("leader answered").assignment,
        assignment_for(&ids[0], g2)
    );
    assert_eq!(h.group("g").state, GroupState::Stable);
    let released = h.released();
    assert_eq!(released.len(), 3);
    for (token, id) in parked {
        let answer = released
            .iter()
            .find(|r| r.token() == token)
            .expect("every parked follower released");
        match answer {
            Released::Sync { response, .. } => {
                assert_eq!(response.error, ErrorCode::NONE);
                assert_eq!(response.generation_id, g2);
                assert_eq!(response.assignment, assignment_for(&id, g2));
            }
            other => panic!("expected a sync answer, got {other:?}"),
        }
    }
}

#[test]
fn parked_follower_sync_is_released_with_rebalance_in_progress_when_a_rebalance_interrupts() {
    let mut h = Harness::new();
    let (ids, generation) = h.joined_group("g", &["a", "b"]);
    let token = h.parked_sync("g", generation, &ids[1]);
    // A third member arrives before the leader assigns.
    let c = h.member_id_for("g", "c");
    let _ = h.join(join_request("g", &c, "c", DEFAULT_PROTOCOLS));
    let released = h.released();
    assert_eq!(released.len(), 1);
    match &released[0] {
        Released::Sync { token: t, response } => {
            assert_eq!(*t, token);
            assert_eq!(response.error, ErrorCode::REBALANCE_IN_PROGRESS);
            assert!(response.assignment.is_empty());
        }
        other => panic!("expected a sync answer, got {other:?}"),
    }
}

// ---- 4. heartbeat with an old generation during a rebalance ----

#[test]
fn heartbeat_with_old_generation_during_rebalance_answers_rebalance_in_progress() {
    let mut h = Harness::new();
    let (ids, g1) = h.stable_group("g", &["a", "b"]);
    let c = h.member_id_for("g", "c");
    let _ = h.join(join_request("g", &c, "c", DEFAULT_PROTOCOLS));
    assert_eq!(h.group("g").state, GroupState::PreparingRebalance);
    assert_eq!(
        h.heartbeat("g", g1, &ids[1]),
        ErrorCode::REBALANCE_IN_PROGRESS
    );

    // a rejoins; b has not yet: still preparing, b's old generation is told to rejoin.
    let _ = h.join(join_request("g", &ids[0], "a", DEFAULT_PROTOCOLS));
    assert_eq!(
        h.heartbeat("g", g1, &ids[1]),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    let _ = h.join(join_request("g", &ids[1], "b", DEFAULT_PROTOCOLS));
    let joins = h.released_joins();
    let g2 = joins[0].1.generation_id;
    assert_eq!(g2, g1 + 1);
    assert_eq!(h.group("g").state, GroupState::CompletingRebalance);
    // A heartbeat still carrying generation 1 while the new one is assigned.
    assert_eq!(
        h.heartbeat("g", g1, &ids[1]),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    assert_eq!(h.heartbeat("g", g2, &ids[1]), ErrorCode::NONE);

    // Outside a rebalance an old generation is illegal, and a future one always is.
    h.sync_all("g", &[ids[0].clone(), ids[1].clone(), c.clone()], g2);
    assert_eq!(h.heartbeat("g", g1, &ids[1]), ErrorCode::ILLEGAL_GENERATION);
    assert_eq!(
        h.heartbeat("g", g2 + 1, &ids[1]),
        ErrorCode::ILLEGAL_GENERATION
    );
    assert_eq!(h.heartbeat("g", g2, "nobody"), ErrorCode::UNKNOWN_MEMBER_ID);
    assert_eq!(h.heartbeat("g", g2, &ids[1]), ErrorCode::NONE);
}

// ---- 5. leave: one member, and a list of members ----

#[test]
fn leave_of_one_member_rebalances_the_rest() {
    let mut h = Harness::new();
    let (ids, g1) = h.stable_group("g", &["a", "b"]);
    // The leader leaves: b becomes leader of the next generation.
    let r = h.leave("g", &[&ids[0]]);
    assert_eq!(r.error, ErrorCode::NONE);
    assert_eq!(r.members[0].error, ErrorCode::NONE);
    assert_eq!(h.group("g").state, GroupState::PreparingRebalance);
    assert_eq!(h.group("g").leader_id.as_deref(), Some(ids[1].as_str()));
    assert_eq!(h.heartbeat("g", g1, &ids[0]), ErrorCode::UNKNOWN_MEMBER_ID);
    assert_eq!(
        h.heartbeat("g", g1, &ids[1]),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    let _ = h.join(join_request("g", &ids[1], "b", DEFAULT_PROTOCOLS));
    let joins = h.released_joins();
    assert_eq!(joins.len(), 1);
    assert_eq!(joins[0].1.leader_id, ids[1]);
    assert_eq!(
        joins[0].1.members.len(),
        1,
        "the leader sees the one member left"
    );
}

#[test]
fn leave_of_a_list_gives_each_member_its_own_error() {
    let mut h = Harness::new();
    let (ids, _) = h.stable_group("g", &["a", "b", "c", "d"]);
    let r = h.leave("g", &[&ids[1], "ghost", &ids[2], &ids[1]]);
    let errors: Vec<ErrorCode> = r.members.iter().map(|m| m.error).collect();
    assert_eq!(
        errors,
        vec![
            ErrorCode::NONE,
            ErrorCode::UNKNOWN_MEMBER_ID,
            ErrorCode::NONE,
            ErrorCode::UNKNOWN_MEMBER_ID
        ]
    );
    assert_eq!(r.members[1].member_id, "ghost");
    let g = h.group("g");
    let left: Vec<&String> = g.members.keys().collect();
    assert_eq!(left.len(), 2);
    assert!(g.members.contains_key(&ids[0]) && g.members.contains_key(&ids[3]));
    // An unknown group: every member unknown, nothing created.
    let r = h.leave("other", &["x"]);
    assert_eq!(r.members[0].error, ErrorCode::UNKNOWN_MEMBER_ID);
    assert!(!h.c.groups.contains_key("other"));
}

// ---- 6. incompatible protocol refused, group unchanged ----

#[test]
fn incompatible_protocol_is_refused_and_group_left_exactly_as_it_was() {
    let mut h = Harness::new();
    let (ids, _) = h.stable_group("g", &["a", "b"]);
    let before: ConsumerGroup = h.group("g").clone();

    let mut other_type = join_request("g", "", "c", DEFAULT_PROTOCOLS);
    other_type.protocol_type = "connect".into();
    let no_common = join_request("g", "", "c", &["sticky"]);
    let mut empty_list = join_request("g", "", "c", &[]);
    empty_list.require_known_member_id = false;
    let mut v3_no_common = join_request("g", "", "c", &["sticky"]);
    v3_no_common.require_known_member_id = false;
    let existing_changes = join_request("g", &ids[1], "b", &["sticky"]);
    for req in [
        other_type,
        no_common,
        empty_list,
        v3_no_common,
        existing_changes,
    ] {
        let (_, r) = h.join(req.clone());
        let r = r.expect("answered at once");
        assert_eq!(r.error, ErrorCode::INCONSISTENT_GROUP_PROTOCOL, "{req:?}");
        assert_eq!(*h.group("g"), before, "group changed by refused {req:?}");
        assert!(h.released().is_empty());
    }
    // The same mid-rebalance, with a join parked and a member id pending.
    let _ = h.join(join_request("g", &ids[0], "a", &["range"]));
    let pending = h.member_id_for("g", "c");
    assert_eq!(h.group("g").state, GroupState::PreparingRebalance);
    let before: ConsumerGroup = h.group("g").clone();
    for req in [
        join_request("g", &pending, "c", &["roundrobin"]),
        join_request("g", &ids[1], "b", &["sticky"]),
        join_request("g", "", "d", &["roundrobin"]),
    ] {
        let (_, r) = h.join(req.clone());
        assert_eq!(
            r.map(|r| r.error),
            Some(ErrorCode::INCONSISTENT_GROUP_PROTOCOL),
            "{req:?}"
        );
        assert_eq!(*h.group("g"), before, "group changed by refused {req:?}");
        assert!(h.released().is_empty());
    }
    // A first member with no protocol creates no group.
    let (_, r) = h.join(join_request("fresh", "", "c", &[]));
    assert_eq!(
        r.expect("answered").error,
        ErrorCode::INCONSISTENT_GROUP_PROTOCOL
    );
    assert!(!h.c.groups.contains_key("fresh"));
}

// ---- 7. timeouts evict dead members; offsets survive a restore ----

#[test]
fn session_timeout_evicts_silent_member() {
    let mut h = Harness::new();
    let (ids, g1) = h.stable_group("g", &["a", "b"]);
    let deadline = h.now + u64::from(SESSION_MS);
    h.now += 4_000;
    assert_eq!(h.heartbeat("g", g1, &ids[0]), ErrorCode::NONE);
    h.now = deadline - 1;
    assert!(h.c.tick(h.now).is_empty());
    assert_eq!(h.group("g").members.len(), 2);
    assert_eq!(h.c.next_deadline_ms(), Some(deadline));
    h.now = deadline;
    assert!(h.c.tick(h.now).is_empty());
    let g = h.group("g");
    assert_eq!(g.members.len(), 1);
    assert!(!g.members.contains_key(&ids[1]));
    assert_eq!(g.state, GroupState::PreparingRebalance);
    assert_eq!(
        h.heartbeat("g", g1, &ids[0]),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    // The last member's session ends too: the group is Empty and, with no
    // offsets, forgotten.
    h.now += u64::from(SESSION_MS);
    let _ = h.c.tick(h.now);
    assert!(h.c.describe(&["g".into()])[0].state == GroupState::Dead);
}

#[test]
fn rebalance_timeout_evicts_member_that_does_not_rejoin() {
    let mut h = Harness::new();
    let (ids, g1) = h.stable_group("g", &["a", "b"]);
    let c = h.member_id_for("g", "c");
    let (tc, _) = h.join(join_request("g", &c, "c", DEFAULT_PROTOCOLS));
    let (ta, _) = h.join(join_request("g", &ids[0], "a", DEFAULT_PROTOCOLS));
    let deadline = h.now + u64::from(REBALANCE_MS);
    // b stays alive by heartbeats but never rejoins.
    while h.now + 5_000 < deadline {
        h.now += 5_000;
        assert_eq!(
            h.heartbeat("g", g1, &ids[1]),
            ErrorCode::REBALANCE_IN_PROGRESS
        );
        assert!(h.c.tick(h.now).is_empty());
    }
    h.now = deadline;
    let released = h.c.tick(h.now);
    let tokens: Vec<Token> = released.iter().map(Released::token).collect();
    assert_eq!(tokens.len(), 2);
    assert!(tokens.contains(&ta) && tokens.contains(&tc));
    let g = h.group("g");
    assert_eq!(g.state, GroupState::CompletingRebalance);
    assert_eq!(g.generation_id, g1 + 1);
    assert!(!g.members.contains_key(&ids[1]));
    assert_eq!(h.heartbeat("g", g1, &ids[1]), ErrorCode::UNKNOWN_MEMBER_ID);
}

#[test]
fn sync_timeout_evicts_leader_that_never_assigns() {
    let mut h = Harness::new();
    let (ids, generation) = h.joined_group("g", &["a", "b"]);
    let tb = h.parked_sync("g", generation, &ids[1]);
    h.now += u64::from(REBALANCE_MS);
    let released = h.c.tick(h.now);
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].token(), tb);
    assert!(
        matches!(&released[0], Released::Sync { response, .. } if response.error == ErrorCode::REBALANCE_IN_PROGRESS)
    );
    let g = h.group("g");
    assert!(
        !g.members.contains_key(&ids[0]),
        "the leader that never synced is gone"
    );
    assert_eq!(g.leader_id.as_deref(), Some(ids[1].as_str()));
    assert_eq!(g.state, GroupState::PreparingRebalance);
}

#[test]
fn unused_member_id_expires() {
    let mut h = Harness::new();
    let id = h.member_id_for("g", "a");
    assert!(h.group("g").pending_members.contains_key(&id));
    h.now += u64::from(SESSION_MS);
    let _ = h.c.tick(h.now);
    assert!(!h.c.groups.contains_key("g"));
    let (_, r) = h.join(join_request("g", &id, "a", DEFAULT_PROTOCOLS));
    assert_eq!(r.expect("answered").error, ErrorCode::UNKNOWN_MEMBER_ID);
}

fn commit_request(
    group: &str,
    generation_id: i32,
    member_id: &str,
    offsets: &[(&str, i32, i64)],
) -> OffsetCommitRequest {
    let mut topics: Vec<TopicCommit> = Vec::new();
    for &(topic, partition, offset) in offsets {
        let p = PartitionCommit {
            partition,
            offset,
            leader_epoch: 4,
            metadata: Some(format!("m{offset}")),
        };
        match topics.iter_mut().find(|t| t.topic == topic) {
            Some(t) => t.partitions.push(p),
            None => topics.push(TopicCommit {
                topic: topic.to_owned(),
                partitions: vec![p],
            }),
        }
    }
    OffsetCommitRequest {
        group_id: group.to_owned(),
        generation_id,
        member_id: member_id.to_owned(),
        group_instance_id: None,
        topics,
    }
}

fn errors(r: &OffsetCommitResponse) -> Vec<ErrorCode> {
    r.topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.1))
        .collect()
}

#[test]
fn committed_offsets_survive_restore() {
    let mut h = Harness::new();
    let (ids, generation) = h.stable_group("g", &["a"]);
    let offsets = [("orders", 0, 10), ("orders", 1, 20), ("audit", 3, 7)];
    let r = h.c.commit_offsets(
        h.now,
        commit_request("g", generation, &ids[0], &offsets),
        |_, _| true,
    );
    assert!(errors(&r).iter().all(|e| e.is_ok()));
    let bytes = h.c.group_offsets("g").expect("group").encode("g");

    // A new coordinator (a broker restart) restores and serves the same offsets.
    let mut restarted = Coordinator::new(CoordinatorConfig::default(), 99);
    assert_eq!(restarted.restore_offsets(&bytes), Ok("g".to_owned()));
    let fetch = OffsetFetchRequest {
        group_id: "g".into(),
        topics: Some(vec![
            TopicPartitions {
                topic: "orders".into(),
                partitions: vec![0, 1, 2],
            },
            TopicPartitions {
                topic: "audit".into(),
                partitions: vec![3],
            },
        ]),
    };
    let before = h.c.fetch_offsets(&fetch);
    let after = restarted.fetch_offsets(&fetch);
    assert_eq!(before, after);
    let got: Vec<(i32, i64, i32, String)> = after
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (p.partition, p.offset, p.leader_epoch, p.metadata.clone()))
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0, 10, 4, "m10".into()),
            (1, 20, 4, "m20".into()),
            (2, -1, -1, String::new()),
            (3, 7, 4, "m7".into())
        ]
    );
    // The restored group is Empty and takes members as usual.
    assert_eq!(
        restarted.describe(&["g".into()])[0].state,
        GroupState::Empty
    );
    assert_eq!(restarted.list(&[GroupState::Empty]).len(), 1);
    // Fetching everything lists every committed partition in order.
    let all = restarted.fetch_offsets(&OffsetFetchRequest {
        group_id: "g".into(),
        topics: None,
    });
    let names: Vec<&str> = all.topics.iter().map(|t| t.topic.as_str()).collect();
    assert_eq!(names, vec!["audit", "orders"]);
    // Corrupt bytes restore nothing.
    let mut bad = bytes.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let mut empty = Coordinator::new(CoordinatorConfig::default(), 1);
    assert!(empty.restore_offsets(&bad).is_err());
    assert!(empty.list(&[]).is_empty());
}

// ---- the rules around them ----

#[test]
fn offset_commit_checks_member_generation_and_partition() {
    let mut h = Harness::new();
    let (ids, g1) = h.stable_group("g", &["a", "b"]);
    let exists = |t: &str, p: i32| t == "orders" && p < 4;
    let r = h.c.commit_offsets(
        h.now,
        commit_request(
            "g",
            g1,
            &ids[0],
            &[("orders", 0, 1), ("orders", 9, 1), ("nope", 0, 1)],
        ),
        exists,
    );
    assert_eq!(
        errors(&r),
        vec![
            ErrorCode::NONE,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        ]
    );
    let r = h.c.commit_offsets(
        h.now,
        commit_request("g", g1, "ghost", &[("orders", 0, 2)]),
        exists,
    );
    assert_eq!(errors(&r), vec![ErrorCode::UNKNOWN_MEMBER_ID]);
    let r = h.c.commit_offsets(
        h.now,
        commit_request("g", g1 + 1, &ids[0], &[("orders", 0, 2)]),
        exists,
    );
    assert_eq!(errors(&r), vec![ErrorCode::ILLEGAL_GENERATION]);
    // A commit from outside the group protocol while it has members.
    let r = h.c.commit_offsets(
        h.now,
        commit_request("g", -1, "", &[("orders", 0, 2)]),
        exists,
    );
    assert_eq!(errors(&r), vec![ErrorCode::UNKNOWN_MEMBER_ID]);
    // Too much metadata.
    let mut req = commit_request("g", g1, &ids[0], &[("orders", 1, 5)]);
    req.topics[0].partitions[0].metadata = Some("x".repeat(OFFSET_METADATA_BYTES_MAX + 1));
    assert_eq!(
        errors(&h.c.commit_offsets(h.now, req, exists)),
        vec![ErrorCode::OFFSET_METADATA_TOO_LARGE]
    );

    // While preparing a rebalance a member still commits what it consumed.
    let c = h.member_id_for("g", "c");
    let _ = h.join(join_request("g", &c, "c", DEFAULT_PROTOCOLS));
    let r = h.c.commit_offsets(
        h.now,
        commit_request("g", g1, &ids[1], &[("orders", 2, 3)]),
        exists,
    );
    assert_eq!(errors(&r), vec![ErrorCode::NONE]);
    // While the new generation is being assigned, it may not.
    let _ = h.join(join_request("g", &ids[0], "a", DEFAULT_PROTOCOLS));
    let _ = h.join(join_request("g", &ids[1], "b", DEFAULT_PROTOCOLS));
    assert_eq!(h.group("g").state, GroupState::CompletingRebalance);
    let r = h.c.commit_offsets(
        h.now,
        commit_request("g", g1 + 1, &ids[1], &[("orders", 2, 4)]),
        exists,
    );
    assert_eq!(errors(&r), vec![ErrorCode::REBALANCE_IN_PROGRESS]);
    let o = h.c.group_offsets("g").expect("offsets");
    assert_eq!(o.get("orders", 0).map(|c| c.offset), Some(1));
    assert_eq!(o.get("orders", 2).map(|c| c.offset), Some(3));
    assert_eq!(o.len(), 2);

    // A standalone consumer creates an offsets-only group.
    let r = h.c.commit_offsets(
        h.now,
        commit_request("solo", -1, "", &[("orders", 0, 8)]),
        exists,
    );
    assert_eq!(errors(&r), vec![ErrorCode::NONE]);
    assert_eq!(h.c.describe(&["solo".into()])[0].state, GroupState::Empty);
    let r = h.c.commit_offsets(
        h.now,
        commit_request("absent", 3, "m", &[("orders", 0, 8)]),
        exists,
    );
    assert_eq!(errors(&r), vec![ErrorCode::ILLEGAL_GENERATION]);
    assert!(!h.c.groups.contains_key("absent"));
}

#[test]
fn protocol_selection_takes_the_common_protocol_preferred_by_most_then_the_leader() {
    let mut h = Harness::new();
    let a = h.member_id_for("g", "a");
    let b = h.member_id_for("g", "b");
    let c = h.member_id_for("g", "c");
    let _ = h.join(join_request(
        "g",
        &a,
        "a",
        &["sticky", "range", "roundrobin"],
    ));
    let _ = h.join(join_request("g", &b, "b", &["roundrobin", "range"]));
    let _ = h.join(join_request("g", &c, "c", &["range", "roundrobin"]));
    // Common: range, roundrobin. Votes: a range, b roundrobin, c range.
    let joins = h.released_joins();
    assert!(joins
        .iter()
        .all(|(_, j)| j.protocol_name.as_deref() == Some("range")));
    let leader = joins
        .iter()
        .find(|(_, j)| j.member_id == a)
        .expect("leader answer");
    assert_eq!(leader.1.leader_id, a);
    let metadata: Vec<&[u8]> = leader
        .1
        .members
        .iter()
        .map(|m| m.metadata.as_slice())
        .collect();
    assert_eq!(
        metadata,
        vec![b"sub-range".as_slice(); 3],
        "members' metadata for the chosen protocol, in join order"
    );
    assert!(joins
        .iter()
        .filter(|(_, j)| j.member_id != a)
        .all(|(_, j)| j.members.is_empty()));

    // A tie goes to the leader's order.
    let mut h = Harness::new();
    let a = h.member_id_for("t", "a");
    let b = h.member_id_for("t", "b");
    let _ = h.join(join_request("t", &a, "a", &["roundrobin", "range"]));
    let _ = h.join(join_request("t", &b, "b", &["range", "roundrobin"]));
    assert_eq!(h.group("t").protocol_name.as_deref(), Some("roundrobin"));
}

#[test]
fn static_member_restart_takes_its_place_and_assignment_and_fences_the_old_id() {
    let mut h = Harness::new();
    let mut ids = Vec::new();
    for (client, instance) in [("a", "ia"), ("b", "ib")] {
        let mut req = join_request("g", "", client, DEFAULT_PROTOCOLS);
        req.group_instance_id = Some(instance.into());
        let (_, r) = h.join(req);
        assert!(
            r.is_none(),
            "static members join without MEMBER_ID_REQUIRED"
        );
    }
    // The first completed a generation alone; the second's join started
    // another, which the first rejoins.
    let first = h.released_joins();
    assert_eq!(first.len(), 1);
    let mut rejoin = join_request("g", &first[0].1.member_id, "a", DEFAULT_PROTOCOLS);
    rejoin.group_instance_id = Some("ia".into());
    let _ = h.join(rejoin);
    for (_, j) in h.released_joins() {
        ids.push(j.member_id);
    }
    assert_eq!(ids.len(), 2);
    let generation = h.group("g").generation_id;
    let leader = h.group("g").leader_id.clone().expect("leader");
    let follower = ids
        .iter()
        .find(|i| **i != leader)
        .expect("follower")
        .clone();
    let order = vec![leader.clone(), follower.clone()];
    h.sync_all("g", &order, generation);

    // The follower's process restarts with the same instance id.
    let follower_instance = h.group("g").members[&follower].group_instance_id.clone();
    let mut req = join_request("g", "", "b2", DEFAULT_PROTOCOLS);
    req.group_instance_id = follower_instance.clone();
    let (_, r) = h.join(req);
    let r = r.expect("a static rejoin into a Stable group is answered at once");
    assert_eq!((r.error, r.generation_id), (ErrorCode::NONE, generation));
    let new_id = r.member_id;
    assert_ne!(new_id, follower);
    assert_eq!(h.group("g").state, GroupState::Stable, "no rebalance");
    assert_eq!(
        h.group("g").members[&new_id].assignment,
        assignment_for(&follower, generation)
    );
    let mut hb = HeartbeatRequest {
        group_id: "g".into(),
        generation_id: generation,
        member_id: follower.clone(),
        group_instance_id: follower_instance.clone(),
    };
    assert_eq!(h.c.heartbeat(h.now, &hb), ErrorCode::FENCED_INSTANCE_ID);
    hb.member_id = new_id.clone();
    assert_eq!(h.c.heartbeat(h.now, &hb), ErrorCode::NONE);
    // A static member leaves by instance id alone.
    let r = h.c.leave(
        h.now,
        LeaveRequest {
            group_id: "g".into(),
            members: vec![LeavingMember {
                member_id: String::new(),
                group_instance_id: follower_instance,
            }],
        },
    );
    assert_eq!(r.members[0].error, ErrorCode::NONE);
    assert!(!h.group("g").members.contains_key(&new_id));
}

#[test]
fn initial_rebalance_delay_waits_for_more_members() {
    let config = CoordinatorConfig {
        initial_rebalance_delay_ms: 3_000,
        ..CoordinatorConfig::default()
    };
    let mut c = Coordinator::new(config, 3);
    let mut req = join_request("g", "", "a", DEFAULT_PROTOCOLS);
    req.require_known_member_id = false;
    assert!(c.join(T0, Token(1), req.clone()).is_none());
    assert!(c.take_released().is_empty(), "waits for the delay");
    assert_eq!(c.next_deadline_ms(), Some(T0 + 3_000));
    assert!(c.join(T0 + 1_000, Token(2), req).is_none());
    assert!(c.tick(T0 + 2_999).is_empty());
    let released = c.tick(T0 + 3_000);
    assert_eq!(released.len(), 2);
    assert!(released
        .iter()
        .all(|r| matches!(r, Released::Join { response, .. } if response.generation_id == 1)));
}

#[test]
fn limits_and_bad_input_are_refused_without_changes() {
    let config = CoordinatorConfig {
        initial_rebalance_delay_ms: 0,
        group_members_max: 2,
        groups_max: 1,
        ..CoordinatorConfig::default()
    };
    /// Each JoinGroup in turn, by group, member id and session timeout,
    /// with the error it is answered at once.
    fn joins(c: &mut Coordinator, joins: &[(&str, &str, u32, ErrorCode)]) {
        for &(group, member_id, session_timeout_ms, error) in joins {
            let mut req = join_request(group, member_id, "a", DEFAULT_PROTOCOLS);
            req.session_timeout_ms = session_timeout_ms;
            let answer = c.join(T0, Token(1), req).map(|r| r.error);
            assert_eq!(answer, Some(error), "{group:?} {member_id:?}");
        }
    }
    let mut c = Coordinator::new(config, 5);
    joins(
        &mut c,
        &[
            ("g", "", 1, ErrorCode::INVALID_SESSION_TIMEOUT),
            ("", "", SESSION_MS, ErrorCode::INVALID_GROUP_ID),
            ("g", "m", SESSION_MS, ErrorCode::UNKNOWN_MEMBER_ID),
        ],
    );
    assert!(c.list(&[]).is_empty());
    joins(
        &mut c,
        &[
            ("g", "", SESSION_MS, ErrorCode::MEMBER_ID_REQUIRED),
            ("g", "", SESSION_MS, ErrorCode::MEMBER_ID_REQUIRED),
            ("g", "", SESSION_MS, ErrorCode::GROUP_MAX_SIZE_REACHED),
            ("h", "", SESSION_MS, ErrorCode::COORDINATOR_NOT_AVAILABLE),
        ],
    );
    assert_eq!(c.delete_group("g"), ErrorCode::NON_EMPTY_GROUP);
    assert_eq!(c.delete_group("h"), ErrorCode::GROUP_ID_NOT_FOUND);
}

#[test]
fn delete_group_forgets_an_empty_group_and_its_offsets() {
    let mut c = Coordinator::new(CoordinatorConfig::default(), 5);
    let r = c.commit_offsets(
        T0,
        commit_request("g", -1, "", &[("orders", 0, 8)]),
        |_, _| true,
    );
    assert_eq!(errors(&r), vec![ErrorCode::NONE]);
    assert_eq!(c.delete_group("g"), ErrorCode::NONE);
    assert_eq!(c.describe(&["g".into()])[0].state, GroupState::Dead);
    let fetched = c.fetch_offsets(&OffsetFetchRequest {
        group_id: "g".into(),
        topics: None,
    });
    assert!(fetched.topics.is_empty());
}

#[test]
fn describe_and_list_report_state_protocol_and_members() {
    let mut h = Harness::new();
    let (ids, generation) = h.stable_group("g", &["a", "b"]);
    let d = &h.c.describe(&["g".into()])[0];
    assert_eq!(
        (d.state, d.protocol_type.as_str(), d.protocol_name.as_str()),
        (GroupState::Stable, "consumer", "range")
    );
    let described: Vec<(&str, &[u8])> = d
        .members
        .iter()
        .map(|m| (m.member_id.as_str(), m.assignment.as_slice()))
        .collect();
    let expected: Vec<(&str, Vec<u8>)> = ids
        .iter()
        .map(|id| (id.as_str(), assignment_for(id, generation)))
        .collect();
    assert_eq!(
        described,
        expected
            .iter()
            .map(|(i, a)| (*i, a.as_slice()))
            .collect::<Vec<_>>()
    );
    assert_eq!(d.members[0].metadata, b"sub-range");
    let listed = h.c.list(&[]);
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].group_id.as_str(), listed[0].state),
        ("g", GroupState::Stable)
    );
    assert!(h.c.list(&[GroupState::Empty]).is_empty());
    // Mid-rebalance: no protocol, no assignments shown.
    let _ = h.leave("g", &[&ids[1]]);
    let d = &h.c.describe(&["g".into()])[0];
    assert_eq!(d.state, GroupState::PreparingRebalance);
    assert!(d.protocol_name.is_empty() && d.members.iter().all(|m| m.assignment.is_empty()));
}

#[test]
fn retried_join_from_a_new_connection_supersedes_the_parked_one() {
    let mut h = Harness::new();
    let (ids, _) = h.stable_group("g", &["a", "b"]);
    let (t1, r) = h.join(join_request("g", &ids[0], "a", DEFAULT_PROTOCOLS));
    assert!(r.is_none());
    let (t2, r) = h.join(join_request("g", &ids[0], "a", DEFAULT_PROTOCOLS));
    assert!(r.is_none());
    let released = h.released_joins();
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].0, t1);
    assert_eq!(released[0].1.error, ErrorCode::REBALANCE_IN_PROGRESS);
    let _ = h.join(join_request("g", &ids[1], "b", DEFAULT_PROTOCOLS));
    let released = h.released_joins();
    assert!(released.iter().any(|(t, j)| *t == t2 && j.error.is_ok()));
    assert!(released.iter().all(|(t, _)| *t != t1));
}
