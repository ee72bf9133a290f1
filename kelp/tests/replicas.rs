//! Replicas in the layout, on a real cluster on loopback (one `kelp
//! control`, three `kelp serve --control` brokers): where the control plane
//! places each segment's followers, what `kelp topic create --replicas`
//! and `kelp topic describe` say of them, and how a follower lost with its
//! broker is replaced.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

use support::{broker_id, port, Broker, ControlPlane};

fn start_broker(dir: &std::path::Path, control: &ControlPlane) -> Broker {
    Broker::start_with(
        dir,
        port(),
        &["--control", &control.address(), "--unpinned"],
    )
}

/// `kelp topic describe TOPIC --output json` through `broker`, parsed.
fn describe(broker: &Broker, topic: &str) -> Value {
    let out = broker.cli(&["topic", "describe", topic, "--output", "json"]);
    assert!(
        out.status.success(),
        "describe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A follower as the JSON names it: broker, in sync, shard, its address.
type FollowerRow = (u64, bool, u64, String);

/// Each open segment's owner and its followers.
fn open_copies(info: &Value) -> Vec<(u64, Vec<FollowerRow>)> {
    info["segments"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["state"] == "open")
        .map(|s| {
            let followers = s["followers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    let address = f["address"]["tcp"].as_str().unwrap_or("-").to_owned();
                    (
                        f["broker"].as_u64().unwrap(),
                        f["in_sync"].as_bool().unwrap(),
                        f["shard"].as_u64().unwrap(),
                        address,
                    )
                })
                .collect();
            (s["broker"].as_u64().unwrap(), followers)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_are_kept_on_other_brokers_and_a_dead_followers_place_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let control = ControlPlane::start(
        &dir.path().join("control"),
        port(),
        &["--broker-silence-ms", "2000"],
    );
    let b1 = start_broker(&dir.path().join("b1"), &control);
    let b2 = start_broker(&dir.path().join("b2"), &control);
    let b3 = start_broker(&dir.path().join("b3"), &control);
    let client = support::tcp_client(&b1.broker_arg()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.list_brokers().await.unwrap().len() < 3 {
        assert!(Instant::now() < deadline, "three brokers never registered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ids = [
        broker_id(&client, &b1).await,
        broker_id(&client, &b2).await,
        broker_id(&client, &b3).await,
    ];
    // Shard i of a broker listens on its port + i.
    let address_of = |id: u64, shard: u64| {
        let i = ids.iter().position(|b| u64::from(*b) == id).unwrap();
        let broker = [&b1, &b2, &b3][i];
        format!("{}:{}", broker.host, u64::from(broker.port) + shard)
    };

    // The default in a cluster: two copies, the follower elsewhere.
    let out = b1.cli(&["topic", "create", "rep/two", "--segments", "4"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8(out.stdout).unwrap();
    assert!(said.contains("each kept on 2 brokers"), "{said}");
    let two = open_copies(&describe(&b1, "rep/two"));
    assert_eq!(two.len(), 4);
    let mut followers_used = BTreeSet::new();
    for (owner, followers) in &two {
        assert_eq!(followers.len(), 1, "{two:?}");
        let (broker, in_sync, shard, address) = &followers[0];
        assert_ne!(broker, owner, "a follower is never its segment's owner");
        assert!(in_sync, "a new segment's follower starts in sync");
        assert_eq!(address, &address_of(*broker, *shard), "its shard's address");
        followers_used.insert(*broker);
    }
    assert!(followers_used.len() >= 2, "followers spread: {two:?}");

    // Three copies: every broker holds each segment.
    let out = b2.cli(&["topic", "create", "rep/three", "--replicas", "3"]);
    assert!(out.status.success(), "{out:?}");
    for (owner, followers) in open_copies(&describe(&b2, "rep/three")) {
        let mut brokers: BTreeSet<u64> = followers.iter().map(|f| f.0).collect();
        brokers.insert(owner);
        assert_eq!(brokers.len(), 3);
    }
    // More copies than brokers is refused, clearly, and creates nothing.
    let out = b1.cli(&["topic", "create", "rep/four", "--replicas", "4"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("replica count 4") && err.contains("3 brokers are live"),
        "{err}"
    );
    let out = b1.cli(&["topic", "describe", "rep/four"]);
    assert!(!out.status.success(), "rep/four was not created");
    // The table shows them too.
    let out = b1.cli(&["topic", "describe", "rep/two"]);
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("FOLLOWERS"), "{table}");

    // Broker 3 dies: where it followed, another live broker takes its
    // place, out of sync (it starts from the owner's stored end).
    let victim = u64::from(ids[2]);
    let followed_by_victim = two.iter().filter(|(_, f)| f[0].0 == victim).count();
    b3.kill9();
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let copies = open_copies(&describe(&b1, "rep/two"));
        let gone = copies
            .iter()
            .all(|(owner, f)| *owner != victim && f.iter().all(|f| f.0 != victim));
        if gone && copies.iter().all(|(_, f)| f.len() == 1) {
            break copies;
        }
        assert!(
            Instant::now() < deadline,
            "broker {victim}'s copies never replaced: {copies:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (owner, followers) in &after {
        assert_ne!(followers[0].0, *owner, "{after:?}");
    }
    let behind = after.iter().filter(|(_, f)| !f[0].1).count();
    assert!(
        behind >= followed_by_victim,
        "{followed_by_victim} replacements start out of sync: {after:?}"
    );
    drop((b1, b2, control));
}
