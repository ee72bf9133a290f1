//! The control plane's state in a real etcd (Debian `etcd-server`, started
//! on loopback by `test_support::EtcdServer`): what a leader writes, a new
//! leader loads; a deposed leader's writes fail and change nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use control::state_store::StateStore;
use control::{
    BrokerId, BrokerInfo, Capacity, Cluster, ClusterConfig, ControlError, Topic, TopicName,
};
use kelp_election::{Candidate, CandidateConfig, EtcdStateStore, Leadership, Term};
use test_support::EtcdServer;

fn candidate(etcd: &EtcdServer, address: &str) -> Arc<Candidate> {
    let config =
        CandidateConfig::new(vec![etcd.endpoint()], "store-test", address).with_lease_ttl_s(2);
    Arc::new(Candidate::start(config).unwrap())
}

fn term_of(candidate: &Candidate) -> Term {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = candidate.state();
    loop {
        if let Leadership::Leader { term } = seen {
            return term;
        }
        assert!(Instant::now() < deadline, "no leadership: {seen:?}");
        seen = candidate.wait_for_change(&seen, Duration::from_millis(200));
    }
}

fn broker(id: u32) -> BrokerInfo {
    BrokerInfo {
        id: BrokerId(id),
        shard_addresses: vec![format!("127.0.0.{}:7000", id + 1)],
        capacity: Capacity {
            bytes_per_s: 1_000,
            records_per_s: 1_000,
        },
    }
}

fn topic(name: &str, segments: u32) -> Topic {
    let mut cluster = Cluster::new(ClusterConfig::default());
    cluster.handle_register(0, broker(4)).unwrap();
    let name = TopicName::parse(name).unwrap();
    cluster.create_topic(0, &name, segments, 1, None).unwrap();
    cluster.topic(&name).cloned().unwrap()
}

#[test]
fn what_a_leader_stores_the_next_leader_loads_and_a_deposed_one_cannot_write() {
    let etcd = EtcdServer::start();
    let first = candidate(&etcd, "10.0.0.1:7400");
    let first_term = term_of(&first);
    let store = EtcdStateStore::new(first.clone(), first_term);
    let (orders, audit) = (topic("pay/orders", 3), topic("pay/audit", 1));
    store.put_topic(&orders).unwrap();
    store.put_topic(&audit).unwrap();
    store.put_broker(&broker(4)).unwrap();
    store.put_broker(&broker(9)).unwrap();
    store.delete_broker(BrokerId(9)).unwrap();
    store.delete_topic(audit.name()).unwrap();

    // The first leader resigns; the second loads exactly what was stored.
    let second = candidate(&etcd, "10.0.0.2:7400");
    drop(store);
    Arc::try_unwrap(first).expect("the only handle").stop();
    let second_term = term_of(&second);
    assert!(second_term.revision() > first_term.revision());
    let loaded = EtcdStateStore::new(second.clone(), second_term)
        .load()
        .unwrap();
    assert_eq!(loaded.topics, vec![orders.clone()]);
    assert_eq!(loaded.brokers, vec![broker(4)]);

    // A write in the first term is refused, names the new leader, and
    // applies nothing.
    let deposed = EtcdStateStore::new(second.clone(), first_term);
    let refused = deposed.put_topic(&topic("pay/late", 1));
    match refused {
        Err(ControlError::NotLeader { leader }) => {
            assert_eq!(leader.as_deref(), Some("10.0.0.2:7400"));
        }
        other => panic!("a deposed term wrote: {other:?}"),
    }
    assert!(matches!(
        deposed.delete_topic(orders.name()),
        Err(ControlError::NotLeader { .. })
    ));
    let after = EtcdStateStore::new(second.clone(), second_term)
        .load()
        .unwrap();
    assert_eq!(after.topics, vec![orders]);
}
