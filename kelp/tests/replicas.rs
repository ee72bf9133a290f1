//! Replicas, on a real cluster on loopback (one `kelp control`, two or
//! three `kelp serve --control` brokers): where the control plane places
//! each segment's followers, what `kelp topic create --replicas` and `kelp
//! topic describe` say of them, how a follower lost with its broker is
//! replaced, and that a follower copies its owner's records at their
//! offsets into files of its own, which an `all` produce waits for, and
//! that a follower seals a dead owner's segment from its copy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use wire::chunk::BatchWalk;

mod support;

use support::{broker_id, port, signal, Broker, ControlPlane};

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

    // With two or more brokers live, the default keeps two copies.
    let out = b1.cli(&["topic", "create", "rep/default", "--segments", "2"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8(out.stdout).unwrap();
    assert!(said.contains("each kept on 2 brokers"), "{said}");
    let default = open_copies(&describe(&b1, "rep/default"));
    assert!(
        default
            .iter()
            .all(|(owner, f)| f.len() == 1 && f[0].0 != *owner),
        "{default:?}"
    );
    // One copy when asked.
    let out = b1.cli(&["topic", "create", "rep/one", "--replicas", "1"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8(out.stdout).unwrap();
    assert!(said.contains("each kept on 1 broker"), "{said}");
    let one = open_copies(&describe(&b1, "rep/one"));
    assert!(one.iter().all(|(_, f)| f.is_empty()), "{one:?}");
    // Two copies: the follower elsewhere.
    let out = b1.cli(&[
        "topic",
        "create",
        "rep/two",
        "--segments",
        "4",
        "--replicas",
        "2",
    ]);
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

/// Every record a follower's copy files under `data_dir` hold, as
/// `(offset, key)`, in offset order: read straight from the files, each
/// batch checked by its checksum.
fn copied_records(data_dir: &Path) -> Vec<(u64, String)> {
    let mut files = Vec::new();
    let mut dirs = vec![data_dir.join("replicas")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "buf") {
                files.push(path);
            }
        }
    }
    let mut records = Vec::new();
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        let data = &bytes[wire::chunk::CHUNK_HEADER_BYTES..];
        // A buffer's batches run end to end; zeroes follow them.
        for batch in BatchWalk::new(data) {
            let Ok((_, view)) = batch else { break };
            for r in view.records() {
                let key = String::from_utf8(r.key.to_vec()).unwrap();
                records.push((view.base_offset() + u64::from(r.offset_delta), key));
            }
        }
    }
    records.sort();
    records
}

/// Two brokers joined to `control` that flush nothing during a test (what
/// a follower holds is everything produced), and a client of both once
/// both registered.
async fn two_unflushing_brokers(
    dir: &Path,
    control: &ControlPlane,
) -> (Broker, Broker, client::Client) {
    two_unflushing_brokers_with(dir, control, &[], &[]).await
}

/// [`two_unflushing_brokers`] with `env` and `extra` flags.
async fn two_unflushing_brokers_with(
    dir: &Path,
    control: &ControlPlane,
    env: &[(&'static str, String)],
    extra: &[&str],
) -> (Broker, Broker, client::Client) {
    let address = control.address();
    let mut args = vec![
        "--control",
        address.as_str(),
        "--unpinned",
        "--flush-age-ms",
        "600000",
    ];
    args.extend_from_slice(extra);
    let start = |name: &str| Broker::start_with_env(&dir.join(name), port(), &args, env);
    let b1 = start("b1");
    let b2 = start("b2");
    let both = format!("{},{}", b1.broker_arg(), b2.broker_arg());
    let client = support::tcp_client(&both).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.list_brokers().await.unwrap().len() < 2 {
        assert!(Instant::now() < deadline, "two brokers never registered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (b1, b2, client)
}

/// A topic of one segment kept on both `b1` and `b2`: the segment's id,
/// then the broker that owns it and the one that follows it.
async fn one_followed_segment(
    client: &client::Client,
    topic: &str,
    b1: Broker,
    b2: Broker,
) -> (u32, Broker, Broker) {
    let created = client
        .create_topic_with_replicas(topic, 1, 2)
        .await
        .unwrap();
    let segment = &created.segments[0];
    assert_eq!(segment.followers.len(), 1, "{segment:?}");
    if segment.broker == Some(broker_id(client, &b1).await) {
        (segment.id, b1, b2)
    } else {
        (segment.id, b2, b1)
    }
}

/// The control plane of the failover tests: a broker silent for 2 s is
/// dead; followers never leave the in-sync set.
const FAILOVER_CONTROL: [&str; 4] = ["--broker-silence-ms", "2000", "--follower-lag-ms", "600000"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_copies_its_owners_records_and_an_all_produce_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let control = ControlPlane::start(
        &dir.path().join("control"),
        port(),
        // Followers never leave the in-sync set here (the next test has
        // them do so).
        &[
            "--broker-silence-ms",
            "30000",
            "--follower-lag-ms",
            "600000",
        ],
    );
    let (b1, b2, client) = two_unflushing_brokers(dir.path(), &control).await;
    let created = client
        .create_topic_with_replicas("rep/copy", 1, 2)
        .await
        .unwrap();
    let segment = &created.segments[0];
    let owner = segment.broker.unwrap();
    assert_eq!(segment.followers.len(), 1, "{segment:?}");
    let follower_id = segment.followers[0].broker;
    let (owner_broker, follower) = if owner == broker_id(&client, &b1).await {
        (&b1, &b2)
    } else {
        (&b2, &b1)
    };
    assert_eq!(broker_id(&client, follower).await, follower_id);

    // `all`: each batch is answered once the follower holds it.
    let all = client::ProducerConfig {
        ack: client::AckMode::All,
        ..client::ProducerConfig::default()
    };
    let producer = client.producer("rep/copy", all).await.unwrap();
    const RECORDS: u64 = 3_000;
    for i in 0..RECORDS {
        let key = format!("k{i}");
        producer.send(key.as_bytes(), b"v", &[]).await.unwrap();
    }
    assert_eq!(producer.flush().await.unwrap(), RECORDS);
    // The copy holds every record at the owner's offsets.
    let copied = copied_records(&follower.data_dir);
    let keys: Vec<String> = (0..RECORDS).map(|i| format!("k{i}")).collect();
    assert_eq!(copied.len() as u64, RECORDS, "every record copied once");
    for (i, (offset, key)) in copied.iter().enumerate() {
        assert_eq!(*offset, i as u64, "offsets as the owner gave them");
        assert_eq!(key, &keys[i]);
    }
    assert!(
        copied_records(&owner_broker.data_dir).is_empty(),
        "the owner keeps no copy of its own"
    );

    // The follower frozen: an `all` produce is not answered; a `leader`
    // one is. Resumed, the `all` one is answered.
    let follower_pid = follower.child.id();
    signal("STOP", follower_pid);
    let leader = client::ProducerConfig {
        ack: client::AckMode::Leader,
        ..client::ProducerConfig::default()
    };
    let by_leader = client.producer("rep/copy", leader).await.unwrap();
    by_leader.send(b"lead", b"v", &[]).await.unwrap();
    let acked = tokio::time::timeout(Duration::from_secs(20), by_leader.flush()).await;
    assert_eq!(
        acked.unwrap().unwrap(),
        1,
        "`leader` does not wait for followers"
    );
    producer.send(b"waits", b"v", &[]).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(2), producer.flush()).await;
    assert!(
        waited.is_err(),
        "`all` answered while its follower was frozen"
    );
    signal("CONT", follower_pid);
    let acked = tokio::time::timeout(Duration::from_secs(20), producer.flush()).await;
    assert_eq!(acked.unwrap().unwrap(), RECORDS + 1);
    let copied = copied_records(&follower.data_dir);
    assert_eq!(copied.len() as u64, RECORDS + 2, "{:?}", copied.last());
    drop(client);
    drop((b1, b2, control));
}

/// Whether the single segment of `topic`'s follower is in sync, and on
/// which broker, as the control plane says.
async fn follower_state(client: &client::Client, topic: &str) -> (u32, bool) {
    let info = client.describe_topic(topic).await.unwrap();
    let segment = info.segments.iter().find(|s| !s.sealed).unwrap();
    assert_eq!(segment.followers.len(), 1, "{segment:?}");
    (segment.followers[0].broker, segment.followers[0].in_sync)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_too_long_leaves_the_in_sync_set_and_rejoins_once_caught_up() {
    let dir = tempfile::tempdir().unwrap();
    // A follower may be behind for 1 s; a broker is dead after 60 s, so
    // what lets an `all` produce through below is the in-sync set, not a
    // death.
    let control = ControlPlane::start(
        &dir.path().join("control"),
        port(),
        &["--broker-silence-ms", "60000", "--follower-lag-ms", "1000"],
    );
    let (b1, b2, client) = two_unflushing_brokers(dir.path(), &control).await;
    let created = client
        .create_topic_with_replicas("rep/lag", 1, 2)
        .await
        .unwrap();
    let owner = created.segments[0].broker.unwrap();
    let follower = if owner == broker_id(&client, &b1).await {
        &b2
    } else {
        &b1
    };
    let follower_id = broker_id(&client, follower).await;
    assert_eq!(
        follower_state(&client, "rep/lag").await,
        (follower_id, true)
    );

    let all = client::ProducerConfig {
        ack: client::AckMode::All,
        ..client::ProducerConfig::default()
    };
    let producer = client.producer("rep/lag", all).await.unwrap();
    let mut sent = 0u64;
    let mut send = |n: u64| {
        let keys: Vec<String> = (sent..sent + n).map(|i| format!("k{i}")).collect();
        sent += n;
        keys
    };
    for key in send(100) {
        producer.send(key.as_bytes(), b"v", &[]).await.unwrap();
    }
    assert_eq!(producer.flush().await.unwrap(), 100);

    // Frozen, the follower falls behind: the control plane takes it out
    // of the in-sync set. It is the segment's only follower, so `all` is
    // still not answered: an `all` record is always on a second broker.
    let pid = follower.child.id();
    signal("STOP", pid);
    for key in send(10) {
        producer.send(key.as_bytes(), b"v", &[]).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while follower_state(&client, "rep/lag").await != (follower_id, false) {
        assert!(Instant::now() < deadline, "the follower never left");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let waited = tokio::time::timeout(Duration::from_secs(2), producer.flush()).await;
    assert!(
        waited.is_err(),
        "`all` answered with no follower holding the batch"
    );

    // Resumed, it copies what it missed: the `all` batch is answered, and
    // the follower rejoins.
    signal("CONT", pid);
    let acked = tokio::time::timeout(Duration::from_secs(30), producer.flush()).await;
    assert_eq!(acked.unwrap().unwrap(), 110);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !follower_state(&client, "rep/lag").await.1 {
        assert!(Instant::now() < deadline, "the follower never rejoined");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for key in send(10) {
        producer.send(key.as_bytes(), b"v", &[]).await.unwrap();
    }
    assert_eq!(producer.flush().await.unwrap(), 120);
    // In sync again, an `all` answer means the follower holds the batch.
    let copied = copied_records(&follower.data_dir);
    assert_eq!(copied.len(), 120, "{:?}", copied.last());
    for (i, (offset, key)) in copied.iter().enumerate() {
        assert_eq!(*offset, i as u64);
        assert_eq!(key, &format!("k{i}"));
    }
    drop(client);
    drop((b1, b2, control));
}

/// Wait until `segment` of `topic` is sealed with an open successor (its
/// owner declared dead and its range moved).
async fn wait_sealed(client: &client::Client, topic: &str, segment: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(info) = client.describe_topic(topic).await {
            let sealed = info.segments.iter().any(|s| s.id == segment && s.sealed);
            if sealed && info.segments.iter().any(|s| !s.sealed) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "segment {segment} of {topic} was never sealed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Publish `keys` x `per_key` records with `ack`, valued `<key>:<seq>`,
/// and wait for every answer.
async fn publish_keyed(
    client: &client::Client,
    topic: &str,
    ack: client::AckMode,
    keys: u64,
    per_key: u64,
) {
    let config = client::ProducerConfig {
        ack,
        ..client::ProducerConfig::default()
    };
    let producer = client.producer(topic, config).await.unwrap();
    for seq in 0..per_key {
        for k in 0..keys {
            let key = format!("key-{k}");
            let value = format!("{key}:{seq}");
            producer
                .send(key.as_bytes(), value.as_bytes(), &[])
                .await
                .unwrap();
        }
    }
    let acked = tokio::time::timeout(Duration::from_secs(30), producer.flush()).await;
    assert_eq!(acked.unwrap().unwrap(), keys * per_key);
}

/// The seal marker of `segment` of `topic` in the cluster's filer.
fn seal_marker(control: &ControlPlane, topic: &str, segment: u32) -> String {
    let path = control
        .data_dir
        .join(format!("filer/topics/{topic}/{segment}/sealed"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// An owner killed with `kill -9` while every record is still only in
/// buffers (its own and its follower's; neither flushes during the test):
/// the follower seals the segment from its copy, and every record an
/// `all` produce was answered for is read back, each once, each key in
/// order. Without the copy the filer would hold none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_loses_no_record_an_all_produce_was_answered_for() {
    const TOPIC: &str = "rep/failover";
    const KEYS: u64 = 16;
    const PER_KEY: u64 = 250;
    let dir = tempfile::tempdir().unwrap();
    let control = ControlPlane::start(&dir.path().join("control"), port(), &FAILOVER_CONTROL);
    let (b1, b2, client) = two_unflushing_brokers(dir.path(), &control).await;
    let (segment, victim, survivor) = one_followed_segment(&client, TOPIC, b1, b2).await;
    publish_keyed(&client, TOPIC, client::AckMode::All, KEYS, PER_KEY).await;
    drop(client);
    let total = KEYS * PER_KEY;
    assert_eq!(
        copied_records(&survivor.data_dir).len() as u64,
        total,
        "the follower holds every record"
    );

    victim.kill9();
    let to_survivor = support::tcp_client(&survivor.broker_arg()).await;
    wait_sealed(&to_survivor, TOPIC, segment).await;
    let mut subscriber = support::keyed::subscribe_earliest(&to_survivor, TOPIC).await;
    let got = support::keyed::read_records(&mut subscriber, total, Duration::from_secs(60)).await;
    support::keyed::each_key_once_in_order(got, total);
    let marker = seal_marker(&control, TOPIC, segment);
    assert!(
        marker.contains("(follower)") && marker.contains(&format!(r#""end":{total},"#)),
        "the follower sealed it after every record: {marker}"
    );
    // Its copy is gone once it is sealed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !copied_records(&survivor.data_dir).is_empty() {
        assert!(Instant::now() < deadline, "the sealed copy was kept");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(to_survivor);
    drop((survivor, control));
}

/// An owner frozen (SIGSTOP) past the silence limit: its follower seals
/// the segment from its copy, after every record an `all` produce was
/// answered for. Resumed, the zombie answers no `all` produce (its
/// follower no longer fetches from it): a producer that kept the old
/// layout is refused and resends to the successor. Every record is read
/// once, each key in order, and nothing the zombie held past the seal
/// point becomes visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_owner_is_sealed_by_its_follower_and_answers_no_all_produce_after() {
    const TOPIC: &str = "rep/zombie";
    const KEYS: u64 = 16;
    const PER_KEY: u64 = 100;
    let dir = tempfile::tempdir().unwrap();
    let control = ControlPlane::start(&dir.path().join("control"), port(), &FAILOVER_CONTROL);
    let (b1, b2, client) = two_unflushing_brokers(dir.path(), &control).await;
    let (segment, zombie, survivor) = one_followed_segment(&client, TOPIC, b1, b2).await;
    // A producer that learns the layout now and keeps it.
    let all = client::ProducerConfig {
        ack: client::AckMode::All,
        ..client::ProducerConfig::default()
    };
    let stale = client.producer(TOPIC, all).await.unwrap();
    let send_round = |seq: u64| {
        let stale = &stale;
        async move {
            for k in 0..KEYS {
                let key = format!("key-{k}");
                let value = format!("{key}:{seq}");
                stale
                    .send(key.as_bytes(), value.as_bytes(), &[])
                    .await
                    .unwrap();
            }
        }
    };
    for seq in 0..PER_KEY {
        send_round(seq).await;
    }
    assert_eq!(stale.flush().await.unwrap(), KEYS * PER_KEY);

    let pid = zombie.child.id();
    signal("STOP", pid);
    let to_survivor = support::tcp_client(&survivor.broker_arg()).await;
    wait_sealed(&to_survivor, TOPIC, segment).await;
    // The follower seals it after the copy's last record.
    let before = KEYS * PER_KEY;
    let deadline = Instant::now() + Duration::from_secs(30);
    let marker = loop {
        let path = control
            .data_dir
            .join(format!("filer/topics/{TOPIC}/{segment}/sealed"));
        if path.exists() {
            break seal_marker(&control, TOPIC, segment);
        }
        assert!(Instant::now() < deadline, "no seal marker");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        marker.contains("(follower)") && marker.contains(&format!(r#""end":{before},"#)),
        "{marker}"
    );

    // Resumed, the zombie is sent `all` batches first thing.
    signal("CONT", pid);
    for seq in PER_KEY..2 * PER_KEY {
        send_round(seq).await;
    }
    let acked = tokio::time::timeout(Duration::from_secs(60), stale.flush()).await;
    assert_eq!(acked.unwrap().unwrap(), 2 * KEYS * PER_KEY);

    let mut subscriber = support::keyed::subscribe_earliest(&to_survivor, TOPIC).await;
    let total = 2 * KEYS * PER_KEY;
    let got = support::keyed::read_records(&mut subscriber, total, Duration::from_secs(60)).await;
    support::keyed::each_key_once_in_order(got, total);
    // Nothing was added past the seal point while it ran again.
    assert_eq!(seal_marker(&control, TOPIC, segment), marker);
    drop(stale);
    drop(client);
    drop(to_survivor);
    drop((zombie, survivor, control));
}

/// An owner killed while the S3 store is away (a proxy in front of a real
/// S3-compatible server refuses every connection): its follower cannot
/// store its copy until the store answers, and the control plane, whose
/// own calls fail too (its commit of the layout among them), does not
/// count that time against its wait for the follower (5 s here, against
/// an outage of 8 s). Once the store is back
/// the follower seals the segment from its copy, and every record an
/// `all` produce was answered for is read back; none was ever flushed by
/// the owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_during_an_s3_outage_is_sealed_by_its_follower_once_the_store_answers() {
    const TOPIC: &str = "rep/outage";
    const KEYS: u64 = 16;
    const PER_KEY: u64 = 100;
    let server = test_support::S3Server::start();
    let target: u16 = server
        .endpoint()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap();
    let proxy = support::s3_proxy::Proxy::start(target);
    let env = proxy.env(&server.env());
    let dir = tempfile::tempdir().unwrap();
    let filer = server.url("rep");
    let control = ControlPlane::start_with_env(
        &dir.path().join("control"),
        port(),
        &[
            FAILOVER_CONTROL[0],
            FAILOVER_CONTROL[1],
            FAILOVER_CONTROL[2],
            FAILOVER_CONTROL[3],
            "--sealer-wait-ms",
            "5000",
            "--s3-retry-timeout-ms",
            "500",
            "--filer",
            &filer,
        ],
        &env,
    );
    let (b1, b2, client) = two_unflushing_brokers_with(
        dir.path(),
        &control,
        &env,
        &["--s3-retry-timeout-ms", "500"],
    )
    .await;
    let (segment, victim, survivor) = one_followed_segment(&client, TOPIC, b1, b2).await;
    publish_keyed(&client, TOPIC, client::AckMode::All, KEYS, PER_KEY).await;
    drop(client);

    proxy.take_down();
    victim.kill9();
    let to_survivor = support::tcp_client(&survivor.broker_arg()).await;
    wait_sealed(&to_survivor, TOPIC, segment).await;
    // Well past the control plane's wait, with the store still away.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let marker = format!("rep/topics/{TOPIC}/{segment}/sealed");
    assert!(
        !server.keys("rep/").contains(&marker),
        "sealed while the store was away"
    );
    proxy.bring_up();

    let total = KEYS * PER_KEY;
    let mut subscriber = support::keyed::subscribe_earliest(&to_survivor, TOPIC).await;
    let got = support::keyed::read_records(&mut subscriber, total, Duration::from_secs(60)).await;
    support::keyed::each_key_once_in_order(got, total);
    assert!(
        server.keys("rep/").contains(&marker),
        "no seal marker: {:?}",
        server.keys("rep/")
    );
    drop(to_survivor);
    drop((survivor, control));
}
