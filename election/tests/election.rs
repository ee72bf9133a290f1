//! Candidates against a real etcd (one fresh member per test, from
//! `test_support::EtcdServer`): one leader at a time, failover on resign,
//! on a kill -9 and on a stopped process, and guarded writes that a
//! deposed leader cannot apply.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use kelp_election::{Candidate, CandidateConfig, GuardedBatch, Leadership, Term, WriteError};
use test_support::EtcdServer;

/// How long any wait for the cluster to settle may take before the test
/// fails (far above what it takes).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(15);
const POLL_INTERVAL: Duration = Duration::from_millis(20);

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

fn config(etcd: &EtcdServer, address: &str, lease_ttl_s: u32) -> CandidateConfig {
    CandidateConfig::new(vec![etcd.endpoint()], "test", address).with_lease_ttl_s(lease_ttl_s)
}

fn start(etcd: &EtcdServer, count: usize, lease_ttl_s: u32) -> Vec<Candidate> {
    (0..count)
        .map(|i| Candidate::start(config(etcd, &format!("10.0.0.{i}:7000"), lease_ttl_s)).unwrap())
        .collect()
}

/// Poll `check` until it returns something, failing after `timeout`.
fn wait_until<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// `Some((index, term))` if exactly one candidate leads and every other
/// names its address as leader.
fn settled(candidates: &[&Candidate]) -> Option<(usize, Term)> {
    let states: Vec<Leadership> = candidates.iter().map(|c| c.state()).collect();
    let leaders: Vec<(usize, Term)> = states
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.term().map(|t| (i, t)))
        .collect();
    let [(index, term)] = leaders[..] else {
        return None;
    };
    let address = candidates[index].advertised_address();
    let all_follow = states.iter().enumerate().all(|(i, s)| {
        i == index
            || *s
                == Leadership::Follower {
                    leader: Some(address.to_owned()),
                }
    });
    all_follow.then_some((index, term))
}

fn refs(candidates: &[Candidate]) -> Vec<&Candidate> {
    candidates.iter().collect()
}

/// Wait (at most `timeout`) until `candidates` settle on one leader: its
/// index and term.
fn wait_settled(what: &str, timeout: Duration, candidates: &[Candidate]) -> (usize, Term) {
    wait_until(what, timeout, || settled(&refs(candidates)))
}

#[test]
fn three_candidates_elect_exactly_one_leader_and_followers_name_it() {
    init_log();
    let etcd = EtcdServer::start();
    let candidates = start(&etcd, 3, 3);
    let (leader, term) = wait_settled(
        "one leader, two followers naming it",
        SETTLE_TIMEOUT,
        &candidates,
    );
    // Watch it for a few seconds (past a whole TTL, so several keepalives
    // go by): never a second leader, never another term.
    let watch_until = Instant::now() + Duration::from_secs(4);
    let mut samples = 0;
    while Instant::now() < watch_until {
        let leaders: Vec<usize> = candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| c.state().is_leader())
            .map(|(i, _)| i)
            .collect();
        assert_eq!(leaders, vec![leader], "leaders after {samples} samples");
        assert_eq!(settled(&refs(&candidates)), Some((leader, term)));
        samples += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(samples > 10, "only {samples} samples");
}

#[test]
fn a_resigning_leader_is_replaced_before_its_lease_would_expire() {
    init_log();
    let etcd = EtcdServer::start();
    // A long TTL: a takeover well inside it cannot be lease expiry.
    let lease_ttl_s = 10;
    let mut candidates = start(&etcd, 3, lease_ttl_s);
    let (leader, old_term) = wait_settled("a first leader", SETTLE_TIMEOUT, &candidates);
    let resigned_at = Instant::now();
    candidates.remove(leader).stop();
    let (_, new_term) = wait_settled(
        "a new leader after the resignation",
        Duration::from_secs(u64::from(lease_ttl_s) / 2),
        &candidates,
    );
    assert!(new_term.revision() > old_term.revision());
    println!("failover after a resignation: {:?}", resigned_at.elapsed());
    assert!(
        resigned_at.elapsed() < Duration::from_secs(u64::from(lease_ttl_s) / 2),
        "took over in {:?}",
        resigned_at.elapsed()
    );
}

#[test]
fn a_killed_leader_is_replaced_within_its_ttl_and_a_second() {
    init_log();
    let etcd = EtcdServer::start();
    let lease_ttl_s = 3;
    let mut candidates = start(&etcd, 3, lease_ttl_s);
    let (leader, old_term) = wait_settled("a first leader", SETTLE_TIMEOUT, &candidates);
    let killed_at = Instant::now();
    // As a kill -9: no resign, no revoke; the lease has to expire.
    candidates.remove(leader).abandon();
    let failover_max = Duration::from_secs(u64::from(lease_ttl_s) + 1);
    let (_, new_term) = wait_settled("a new leader after the kill", failover_max, &candidates);
    assert!(new_term.revision() > old_term.revision());
    assert!(killed_at.elapsed() <= failover_max);
    println!("failover after a kill: {:?}", killed_at.elapsed());
}

#[test]
fn a_paused_leader_reports_itself_follower_and_its_writes_fail() {
    init_log();
    let etcd = EtcdServer::start();
    let lease_ttl_s = 2;
    let a = Candidate::start(config(&etcd, "10.0.0.1:7000", lease_ttl_s)).unwrap();
    let a_term = wait_until("a leads", SETTLE_TIMEOUT, || a.state().term());
    let b = Candidate::start(config(&etcd, "10.0.0.2:7000", lease_ttl_s)).unwrap();
    wait_until("b follows a", SETTLE_TIMEOUT, || settled(&[&a, &b]));
    a.put_if_leader(a_term, "topics/t", "by a, while leading")
        .unwrap();

    // SIGSTOP, in effect: no keepalive, no campaign.
    let paused_at = Instant::now();
    a.pause_keepalive();
    let ttl = Duration::from_secs(u64::from(lease_ttl_s));
    // It says so itself once its lease may be gone, paused as it is.
    let seen = Leadership::Leader { term: a_term };
    let after = a.wait_for_change(&seen, ttl + Duration::from_secs(1));
    assert_eq!(after, Leadership::Follower { leader: None });
    println!(
        "paused leader reports follower after {:?}",
        paused_at.elapsed()
    );
    let b_term = wait_until("b leads", ttl + Duration::from_secs(2), || b.state().term());
    assert!(b_term.revision() > a_term.revision());

    // a's write with its old term goes to etcd and is refused there.
    let refused = a.put_if_leader(a_term, "topics/t", "by a, deposed");
    assert!(
        matches!(refused, Err(WriteError::NotLeader { term, .. }) if term == a_term),
        "{refused:?}"
    );
    // Resumed, it follows b and its old term still writes nothing.
    a.resume_keepalive();
    wait_until("a follows b", SETTLE_TIMEOUT, || settled(&[&a, &b]));
    let refused = a.write_if_leader(a_term, GuardedBatch::new().delete("topics/t"));
    assert!(
        matches!(refused, Err(WriteError::NotLeader { .. })),
        "{refused:?}"
    );
    let entry = b.get("topics/t").unwrap().unwrap();
    assert_eq!(entry.value, b"by a, while leading");
    b.put_if_leader(b_term, "topics/t", "by b").unwrap();
    assert_eq!(a.get("topics/t").unwrap().unwrap().value, b"by b");
}

#[test]
fn guarded_batches_apply_all_or_nothing() {
    init_log();
    let etcd = EtcdServer::start();
    let mut candidates = start(&etcd, 2, 3);
    let (leader, term) = wait_settled("a leader", SETTLE_TIMEOUT, &candidates);
    let c = &candidates[leader];

    let revision = c
        .write_if_leader(
            term,
            GuardedBatch::new()
                .put("topics/a", "1")
                .put("topics/b", "2")
                .expect_mod_revision("topics/a", 0),
        )
        .unwrap();
    let snapshot = c.get_prefix("topics/").unwrap();
    let written: Vec<(&str, &[u8], i64)> = snapshot
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_slice(), e.mod_revision))
        .collect();
    assert_eq!(
        written,
        vec![
            ("topics/a", &b"1"[..], revision),
            ("topics/b", &b"2"[..], revision)
        ]
    );
    assert!(snapshot.revision >= revision);

    // One stale expectation: nothing of the batch is applied.
    let stale = c.write_if_leader(
        term,
        GuardedBatch::new()
            .put("topics/c", "3")
            .delete("topics/a")
            .expect_mod_revision("topics/b", revision - 1),
    );
    assert!(
        matches!(stale, Err(WriteError::Conflict { .. })),
        "{stale:?}"
    );
    assert_eq!(c.get("topics/c").unwrap(), None);
    assert!(c.get("topics/a").unwrap().is_some());

    // The same batch with a fresh expectation: all of it.
    let applied = c
        .write_if_leader(
            term,
            GuardedBatch::new()
                .put("topics/c", "3")
                .delete("topics/a")
                .expect_mod_revision("topics/b", revision),
        )
        .unwrap();
    assert!(applied > revision);
    assert_eq!(c.get("topics/c").unwrap().unwrap().value, b"3");
    assert_eq!(c.get("topics/a").unwrap(), None);

    // A term that is over writes nothing, whoever sends it.
    candidates.remove(leader).stop();
    let (successor, _) = wait_settled("a successor", SETTLE_TIMEOUT, &candidates);
    let refused = candidates[successor].write_if_leader(
        term,
        GuardedBatch::new().put("topics/d", "4").delete("topics/b"),
    );
    assert!(
        matches!(refused, Err(WriteError::NotLeader { .. })),
        "{refused:?}"
    );
    let keys: Vec<String> = candidates[successor]
        .get_prefix("")
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(keys, vec!["topics/b", "topics/c"]);
}

#[test]
fn a_leader_cut_off_from_etcd_steps_down_within_its_ttl() {
    init_log();
    let mut etcd = EtcdServer::start();
    let lease_ttl_s = 2;
    let a = Candidate::start(config(&etcd, "10.0.0.1:7000", lease_ttl_s)).unwrap();
    let term = wait_until("a leads", SETTLE_TIMEOUT, || a.state().term());
    let killed_at = Instant::now();
    etcd.kill();
    let ttl = Duration::from_secs(u64::from(lease_ttl_s));
    let after = a.wait_for_change(&Leadership::Leader { term }, ttl + Duration::from_secs(1));
    assert_eq!(after, Leadership::Follower { leader: None });
    println!(
        "leader without etcd steps down after {:?}",
        killed_at.elapsed()
    );
    // Writes and reads fail with a typed error; nothing hangs.
    let write = a.put_if_leader(term, "topics/t", "x");
    assert!(matches!(write, Err(WriteError::Request(_))), "{write:?}");
    assert!(a.get("topics/t").is_err());
    // Stopping cannot resign (etcd is gone) but still returns.
    let (done, stopped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        a.stop();
        let _ = done.send(());
    });
    stopped
        .recv_timeout(Duration::from_secs(10))
        .expect("stop returns without etcd");
}

#[test]
fn a_bad_config_is_refused_at_start() {
    let config =
        CandidateConfig::new(vec!["http://127.0.0.1:1".into()], "test", "a:1").with_lease_ttl_s(1);
    let refused = Candidate::start(config);
    assert!(
        matches!(refused, Err(kelp_election::StartError::Config(_))),
        "{refused:?}"
    );
}

/// The bytes in etcd are the ones `docs/etcd.md` gives, read with a plain
/// etcd client.
#[test]
fn the_keys_in_etcd_are_the_documented_bytes() {
    init_log();
    let etcd = EtcdServer::start();
    let a = Candidate::start(config(&etcd, "10.0.0.7:7000", 3)).unwrap();
    let term = wait_until("a leads", SETTLE_TIMEOUT, || a.state().term());
    let revision = a
        .put_if_leader(term, "topics/ns/orders", &b"\x00\x01layout"[..])
        .unwrap();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (leader, state) = runtime.block_on(async {
        let mut client = etcd_client::Client::connect([etcd.endpoint()], None)
            .await
            .unwrap();
        let leader = client.get("/kelp/test/control/leader", None).await.unwrap();
        let state = client
            .get("/kelp/test/state/topics/ns/orders", None)
            .await
            .unwrap();
        (leader.kvs().to_vec(), state.kvs().to_vec())
    });
    assert_eq!(leader.len(), 1);
    assert_eq!(leader[0].value(), b"10.0.0.7:7000");
    assert_eq!(leader[0].create_revision(), term.revision());
    assert_eq!(leader[0].lease(), term.lease_id());
    assert_eq!(state.len(), 1);
    assert_eq!(state[0].value(), b"\x00\x01layout");
    assert_eq!(state[0].mod_revision(), revision);
    assert_eq!(state[0].lease(), 0, "state keys hang on no lease");
    assert_eq!(a.keys().leader(), "/kelp/test/control/leader");
}
