//! A cluster on loopback with real processes: one `kelp control`, three
//! `kelp serve --control` brokers, a producer that ramps traffic up until
//! the topic's policy splits its one segment into at least four, then down
//! until they merge back into one, and a subscriber reading all along.
//! Mid-run one broker leaves gracefully, another joins, and the control
//! plane restarts. Every acknowledged record must be read exactly once, and
//! each key's records in the order they were published.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::TopicInfo;
use client::{Client, FetchFrom, SubscribeOptions};

mod support;

use support::keyed::{
    create_hot_topic, each_key_once_in_order, key_name, parse, publish_until, read_records,
    subscribe_earliest, Publisher, RECORDS_PER_STEP,
};
use support::{broker_id, port, Broker, ControlPlane};

const TOPIC: &str = "cluster/ramp";
/// Distinct keys: enough that every piece of an eight-way split gets some.
const KEYS: u64 = 64;
/// The slow phase sends one record per this.
const SLOW_STEP: Duration = Duration::from_millis(50);
/// Bounds of the whole run: the test fails rather than hang.
const RAMP_UP_LIMIT: Duration = Duration::from_secs(90);
const RAMP_DOWN_LIMIT: Duration = Duration::from_secs(150);
const READ_LIMIT: Duration = Duration::from_secs(60);

fn start_broker(dir: &std::path::Path, control: &ControlPlane) -> Broker {
    Broker::start_with(
        dir,
        port(),
        &["--control", &control.address(), "--unpinned"],
    )
}

/// The layout, asked through any live broker; `None` while the control
/// plane is away (it restarts once during the run).
async fn describe(client: &Client) -> Option<TopicInfo> {
    client.describe_topic(TOPIC).await.ok()
}

fn open_count(info: &TopicInfo) -> usize {
    info.segments.iter().filter(|s| !s.sealed).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_split_and_merge_under_load_without_losing_or_reordering_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let control_dir = dir.path().join("control");
    let control_port = port();
    let mut control =
        ControlPlane::start(&control_dir, control_port, &["--broker-silence-ms", "5000"]);
    let b1 = start_broker(&dir.path().join("b1"), &control);
    let b2 = start_broker(&dir.path().join("b2"), &control);
    let b3 = start_broker(&dir.path().join("b3"), &control);

    // Clients bootstrap through broker 1, which stays up all along.
    let client = b1.client().await;
    create_hot_topic(&client, TOPIC, 8).await;

    // The reader, from the start, all along: it stops once it has read
    // `expected` records and a while more (to catch any read twice), or
    // when told to give up.
    let expected = Arc::new(AtomicU64::new(u64::MAX));
    let give_up = Arc::new(AtomicBool::new(false));
    let mut subscriber = subscribe_earliest(&client, TOPIC).await;
    let reader = {
        let expected = expected.clone();
        let give_up = give_up.clone();
        tokio::spawn(async move {
            let mut got: Vec<(String, u64)> = Vec::new();
            let mut complete_at: Option<Instant> = None;
            while !give_up.load(Ordering::Relaxed)
                && complete_at.is_none_or(|t| t.elapsed() < Duration::from_secs(2))
            {
                let next =
                    tokio::time::timeout(Duration::from_millis(200), subscriber.next()).await;
                if complete_at.is_none() && got.len() as u64 >= expected.load(Ordering::Relaxed) {
                    complete_at = Some(Instant::now());
                }
                let Ok(next) = next else { continue };
                let record = next.expect("the subscriber ended").expect("read a record");
                got.push(parse(&record));
            }
            got
        })
    };

    let mut publisher = Publisher::durable(&client, TOPIC, KEYS).await;

    // Ramp up until the policy has split the topic into at least four.
    let most_open = publish_until(
        &mut publisher,
        &client,
        TOPIC,
        RAMP_UP_LIMIT,
        "the policy splits the topic into 4 open segments",
        |info| Some(open_count(info)).filter(|open| *open >= 4),
    )
    .await;
    eprintln!("{most_open} open segments after the ramp-up");

    // Broker 2 leaves gracefully under load; its segments move first.
    let leaving = tokio::task::spawn_blocking(move || b2.stop());
    while !leaving.is_finished() {
        publisher.step(RECORDS_PER_STEP).await;
    }
    leaving.await.unwrap();
    let info = describe(&client).await.expect("describe after a leave");
    let owners: HashSet<Option<u32>> = info
        .segments
        .iter()
        .filter(|s| !s.sealed)
        .map(|s| s.broker)
        .collect();
    eprintln!("after broker 2 left, open segments are on brokers {owners:?}");

    // Broker 4 joins, and the control plane restarts; brokers and
    // producers carry on.
    let b4 = start_broker(&dir.path().join("b4"), &control);
    let before_restart = describe(&client).await.expect("describe before restart");
    control.stop();
    for _ in 0..100 {
        publisher.step(RECORDS_PER_STEP / 4).await;
    }
    control = ControlPlane::start(&control_dir, control_port, &["--broker-silence-ms", "5000"]);
    let after_restart = loop {
        if let Some(info) = describe(&client).await {
            break info;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let open_of = |info: &TopicInfo| -> BTreeMap<u32, (u32, u64, Option<u32>)> {
        info.segments
            .iter()
            .filter(|s| !s.sealed)
            .map(|s| (s.id, (s.start, s.end, s.broker)))
            .collect()
    };
    // The policy may act once the new control plane has rates again, but
    // a restart by itself moves nothing: every segment open before it is
    // either still open where it was, or was split or merged since.
    for (id, before) in open_of(&before_restart) {
        let now = after_restart.segments.iter().find(|s| s.id == id).unwrap();
        if !now.sealed {
            assert_eq!(
                (now.start, now.end, now.broker),
                before,
                "segment {id} changed owner or range across a control plane restart"
            );
        }
    }

    // Ramp down until the policy has merged everything back into one.
    let slowing = Instant::now();
    let mut last_look = Instant::now();
    let mut open = usize::MAX;
    while open > 1 {
        assert!(
            slowing.elapsed() < RAMP_DOWN_LIMIT,
            "the policy did not merge the topic back into one segment ({open} open)"
        );
        publisher.send(1).await;
        tokio::time::sleep(SLOW_STEP).await;
        if last_look.elapsed() >= Duration::from_millis(500) {
            last_look = Instant::now();
            if let Some(info) = describe(&client).await {
                open = open_count(&info);
            }
        }
    }
    eprintln!("merged back into one segment after {:?}", slowing.elapsed());
    let sent = publisher.finish().await;

    // Every acknowledged record is read exactly once, each key in order.
    expected.store(sent, Ordering::Relaxed);
    let reader = {
        let give_up = give_up.clone();
        tokio::spawn(async move {
            tokio::time::sleep(READ_LIMIT).await;
            give_up.store(true, Ordering::Relaxed);
        });
        reader
    };
    let got = reader.await.unwrap();
    let per_key = each_key_once_in_order(got, sent);
    for k in 0..KEYS {
        let key = key_name(k);
        assert_eq!(
            per_key.get(&key).map_or(0, |s| s.len() as u64),
            publisher.next_seq[&k],
            "key {key}: every acknowledged record read"
        );
    }

    // The history: the topic went through at least four open segments and
    // back, every sealed segment names successors, and splits took how long
    // to reach producers.
    let history = describe(&client).await.expect("history");
    let sealed = history.segments.iter().filter(|s| s.sealed).count();
    assert!(sealed >= 4, "history holds {sealed} sealed segments");
    assert!(history
        .segments
        .iter()
        .filter(|s| s.sealed)
        .all(|s| !s.successors.is_empty()));
    // Each successor by the change that made it: a split's pieces share a
    // predecessor, a merge's successor has two, a move's has one of the
    // same range.
    // Load figures are not persisted: what the control plane learned
    // before its restart is in the layout read before it.
    let first_appends: HashMap<u32, u64> = before_restart
        .segments
        .iter()
        .chain(&history.segments)
        .filter_map(|s| Some((s.id, s.first_append_ms?)))
        .collect();
    let mut made_by: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for s in &history.segments {
        let predecessors: Vec<_> = history
            .segments
            .iter()
            .filter(|p| p.successors.contains(&s.id))
            .collect();
        let kind = match predecessors.as_slice() {
            [] => continue,
            [p] if p.successors.len() > 1 => "split",
            [_] => "move",
            _ => "merge",
        };
        if let Some(first) = first_appends.get(&s.id) {
            made_by
                .entry(kind)
                .or_default()
                .push(first.saturating_sub(s.created_ms));
        }
    }
    for (kind, delays) in &mut made_by {
        delays.sort_unstable();
        eprintln!("{kind}: ms from the decision to the successor's first append: {delays:?}");
    }
    assert!(
        made_by.get("split").is_some_and(|d| d.len() >= 3),
        "the splits' successors took writes: {made_by:?}"
    );

    drop(b1);
    drop(b3);
    drop(b4);
    drop(control);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_broker_is_declared_dead_and_its_segments_move() {
    let dir = tempfile::tempdir().unwrap();
    let control = ControlPlane::start(
        &dir.path().join("control"),
        port(),
        &["--broker-silence-ms", "2000"],
    );
    let b1 = start_broker(&dir.path().join("b1"), &control);
    let b2 = start_broker(&dir.path().join("b2"), &control);
    // Clients bootstrap from both, broker 2 first: it is the one that dies,
    // and their admin requests (layouts after the move) fall back to 1.
    let both = format!("{},{}", b2.broker_arg(), b1.broker_arg());
    let client = support::tcp_client(&both).await;
    let created = client.create_topic(TOPIC, 4).await.unwrap();
    // Broker 2 dies; broker 1 survives.
    let victim = broker_id(&client, &b2).await;
    let (victim_broker, survivor) = (b2, b1);
    let on_victim: Vec<u32> = created
        .segments
        .iter()
        .filter(|s| s.broker == Some(victim))
        .map(|s| s.id)
        .collect();
    assert!(!on_victim.is_empty());

    // Durable records, all acknowledged before the kill.
    let config = support::durable();
    let mut before = Publisher::new(client.producer(TOPIC, config).await.unwrap(), KEYS);
    before.send(2_000).await;
    before.producer.flush().await.unwrap();
    let mut subscriber = subscribe_earliest(&client, TOPIC).await;

    victim_broker.kill9();

    // Declared dead after its silence; its segments reopen on the survivor.
    let deadline = Instant::now() + Duration::from_secs(30);
    let moved = loop {
        let info = client.describe_topic(TOPIC).await.unwrap();
        if info
            .segments
            .iter()
            .all(|s| s.sealed || s.broker != Some(victim))
        {
            break info;
        }
        assert!(
            Instant::now() < deadline,
            "broker {victim} never declared dead"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for id in &on_victim {
        let s = moved.segments.iter().find(|s| s.id == *id).unwrap();
        assert!(s.sealed && s.successors.len() == 1, "{s:?}");
        let successor = moved
            .segments
            .iter()
            .find(|x| x.id == s.successors[0])
            .unwrap();
        assert_ne!(successor.broker, Some(victim));
        // Its owner could not: its follower (from its copy) or the control
        // plane marks the segment sealed.
        let marker = control
            .data_dir
            .join(format!("filer/topics/{TOPIC}/{id}/sealed"));
        while !marker.exists() {
            assert!(
                Instant::now() < deadline,
                "segment {id} never marked sealed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let brokers = client.list_brokers().await.unwrap();
    assert_eq!(brokers.len(), 1, "{brokers:?}");

    // A producer that starts now, from the same list, bootstraps through
    // the survivor and reaches the successors; keys go on from where they
    // were.
    let fresh = support::tcp_client(&both).await;
    assert_eq!(
        fresh.shard_addresses()[0].to_string(),
        survivor.broker_arg(),
        "the dead broker cannot be the bootstrap"
    );
    let mut after = Publisher::after(fresh.producer(TOPIC, config).await.unwrap(), &before);
    after.send(2_000).await;
    after.producer.flush().await.unwrap();

    // The subscriber rode through: everything, once, each key in order.
    let total = before.sent + after.sent;
    let got = read_records(&mut subscriber, total, Duration::from_secs(60)).await;
    each_key_once_in_order(got, total);
    drop(survivor);
    drop(control);
}

/// After a split, producers and subscribers learn the successors from the
/// brokers alone: the control plane is killed right after the split, so a
/// describe (which brokers pass to it) cannot answer, and still every
/// record published after it is acknowledged and read once, in key order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_and_subscribers_follow_a_split_with_the_control_plane_gone() {
    const FOLLOWED: &str = "cluster/follow";
    let dir = tempfile::tempdir().unwrap();
    let control = ControlPlane::start(&dir.path().join("control"), port(), &[]);
    let b1 = start_broker(&dir.path().join("b1"), &control);
    let b2 = start_broker(&dir.path().join("b2"), &control);
    let client = b1.client().await;
    let created = client.create_topic(FOLLOWED, 1).await.unwrap();
    let config = support::durable();
    let mut publisher = Publisher::new(client.producer(FOLLOWED, config).await.unwrap(), KEYS);
    publisher.send(1_000).await;
    publisher.producer.flush().await.unwrap();
    let mut subscriber = subscribe_earliest(&client, FOLLOWED).await;

    // Split by hand; the answer comes once the pieces are open. Then the
    // control plane is gone for good.
    let split = client
        .split_segment(FOLLOWED, created.segments[0].id, 2)
        .await
        .unwrap();
    assert_eq!(open_count(&split), 2, "{split:?}");
    control.kill9();
    assert!(
        client.describe_topic(FOLLOWED).await.is_err(),
        "a describe needs the control plane"
    );

    // The producer's layout still has the sealed segment: its refusal
    // names the pieces, and the records go there.
    publisher.send(2_000).await;
    let sent = publisher.finish().await;
    // The subscriber read the sealed segment to its end and asked its
    // broker for the pieces.
    let got = read_records(&mut subscriber, sent, READ_LIMIT).await;
    each_key_once_in_order(got, sent);
    drop(b1);
    drop(b2);
}

/// Brokers on separate hosts (127.0.0.2 to .5) that share nothing but an
/// S3 bucket (a real S3-compatible server on 127.0.0.1) and the control
/// plane: durable records survive a kill -9 of one broker, and a broker
/// that joins with an empty data dir reads every record once, each key in
/// order. The chunks are objects in the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_on_separate_hosts_share_only_an_s3_bucket() {
    const S3_TOPIC: &str = "cluster/on-s3";
    let server = test_support::S3Server::start();
    let env = server.env();
    let filer = server.url("cluster");
    let dir = tempfile::tempdir().unwrap();
    let control = ControlPlane::start_with_env(
        &dir.path().join("control"),
        port(),
        &["--broker-silence-ms", "2000", "--filer", &filer],
        &env,
    );
    let join = ["--control", &control.address(), "--unpinned"];
    let on = |host: &'static str, name: &str| {
        Broker::start_on(host, &dir.path().join(name), port(), &join, &env)
    };
    let b1 = on("127.0.0.2", "b1");
    let b2 = on("127.0.0.3", "b2");
    let b3 = on("127.0.0.4", "b3");
    let client = b1.client().await;
    let created = client.create_topic(S3_TOPIC, 3).await.unwrap();
    let victim = broker_id(&client, &b2).await;
    assert!(
        created.segments.iter().any(|s| s.broker == Some(victim)),
        "no segment on the broker to kill: {created:?}"
    );

    let config = support::durable();
    let mut before = Publisher::new(client.producer(S3_TOPIC, config).await.unwrap(), KEYS);
    before.send(2_000).await;
    before.producer.flush().await.unwrap();
    b2.kill9();

    // Declared dead; its segments reopen on the others.
    let deadline = Instant::now() + Duration::from_secs(30);
    while client
        .describe_topic(S3_TOPIC)
        .await
        .unwrap()
        .segments
        .iter()
        .any(|s| !s.sealed && s.broker == Some(victim))
    {
        assert!(
            Instant::now() < deadline,
            "broker {victim} never declared dead"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A new broker on another host, nothing on its disk.
    let b4 = on("127.0.0.5", "b4");
    let through_new = b4.client().await;
    let mut after = Publisher::after(
        through_new.producer(S3_TOPIC, config).await.unwrap(),
        &before,
    );
    after.send(1_000).await;
    after.producer.flush().await.unwrap();

    // Read through the new broker: everything, once, each key in order.
    let total = before.sent + after.sent;
    let mut subscriber = through_new
        .subscribe(S3_TOPIC, FetchFrom::Earliest, SubscribeOptions::default())
        .await
        .unwrap();
    let got = read_records(&mut subscriber, total, Duration::from_secs(60)).await;
    each_key_once_in_order(got, total);

    // The data is in the bucket, not on any host's disk.
    let keys = server.keys("cluster/");
    assert!(
        keys.iter().any(|k| k.ends_with(".chunk")),
        "no chunk in the bucket: {keys:?}"
    );
    assert!(
        keys.iter().any(|k| k.ends_with("/sealed")),
        "no seal marker in the bucket: {keys:?}"
    );
    for name in ["control", "b1", "b3", "b4"] {
        let local = dir.path().join(name).join("filer").join("topics");
        assert!(!local.exists(), "{} exists", local.display());
    }
    drop((b1, b3, b4, control));
}
