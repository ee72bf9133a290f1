//! A lone broker (`kelp serve --shards 2`, no `--control`) runs the one
//! control plane in-process, as a cluster of one whose shards take the
//! place of brokers: a hot segment's policy split puts its pieces on both
//! shards, and split, merge and move work by hand. Every acknowledged
//! record is read exactly once, each key in the order it was published,
//! across the changes and a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use client::{Client, TopicInfo};

mod support;

use support::keyed::{
    create_hot_topic, each_key_once_in_order, key_name, publish_until, read_records,
    subscribe_earliest, Publisher, RECORDS_PER_STEP,
};
use support::{port, Broker};

/// Distinct keys: enough that both pieces of a split get some.
const KEYS: u64 = 32;
/// Bounds of the run: the test fails rather than hang.
const SPLIT_LIMIT: Duration = Duration::from_secs(60);
const READ_LIMIT: Duration = Duration::from_secs(60);

/// `info`'s segments that are not sealed.
fn open_segments(info: &TopicInfo) -> impl Iterator<Item = &client::SegmentInfo> {
    info.segments.iter().filter(|s| !s.sealed)
}

/// The shards holding `info`'s open segments.
fn open_shards(info: &TopicInfo) -> BTreeSet<u16> {
    open_segments(info).map(|s| s.shard).collect()
}

/// The ids of `info`'s open segments.
fn open_ids(info: &TopicInfo) -> Vec<u32> {
    open_segments(info).map(|s| s.id).collect()
}

/// Send `n` records and wait until all are acknowledged.
async fn publish(publisher: &mut Publisher, n: u64) {
    publisher.send(n).await;
    publisher.producer.flush().await.expect("acknowledged");
}

async fn connect(broker: &Broker) -> Client {
    broker.client().await
}

/// Read the whole topic from the earliest record and check every one of
/// `publisher`'s records arrived once, each key in order.
async fn read_all_once_in_order(client: &Client, topic: &str, publisher: &Publisher) {
    let sent: u64 = publisher.next_seq.values().sum();
    let mut subscriber = subscribe_earliest(client, topic).await;
    let got = read_records(&mut subscriber, sent, READ_LIMIT).await;
    let per_key = each_key_once_in_order(got, sent);
    for (k, n) in &publisher.next_seq {
        let key = key_name(*k);
        assert_eq!(
            per_key.get(&key).map_or(0, |s| s.len() as u64),
            *n,
            "key {key}: every acknowledged record read"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_segment_splits_onto_both_shards_and_no_record_is_lost_or_reordered() {
    const TOPIC: &str = "lone/ramp";
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), port());
    let client = connect(&broker).await;
    let created = create_hot_topic(&client, TOPIC, 2).await;
    assert_eq!(open_shards(&created), BTreeSet::from([0]));
    // A subscriber from the start follows the split as it reads.
    let mut subscriber = subscribe_earliest(&client, TOPIC).await;
    let mut publisher = Publisher::durable(&client, TOPIC, KEYS).await;

    let split = publish_until(
        &mut publisher,
        &client,
        TOPIC,
        SPLIT_LIMIT,
        "the policy splits the hot segment",
        |info| (open_ids(info).len() >= 2).then(|| info.clone()),
    )
    .await;
    assert_eq!(
        open_shards(&split),
        BTreeSet::from([0, 1]),
        "the pieces are on both shards: {split:?}"
    );
    let parent = &split.segments[0];
    assert!(parent.sealed, "{split:?}");
    assert_eq!(parent.successors.len(), 2, "{split:?}");
    // The pieces take writes.
    for _ in 0..50 {
        publisher.step(RECORDS_PER_STEP).await;
    }
    let sent = publisher.finish().await;
    let after = client.describe_topic(TOPIC).await.unwrap();
    for id in &parent.successors {
        let piece = after.segments.iter().find(|s| s.id == *id).unwrap();
        assert!(piece.next_offset > 0, "piece {id} took writes: {after:?}");
        // How long the producer took to follow the split (BENCHMARKS.md).
        if let Some(first) = piece.first_append_ms {
            eprintln!(
                "piece {id} on shard {}: ms from the decision to its first append: {}",
                piece.shard,
                first.saturating_sub(piece.created_ms)
            );
        }
    }
    let got = read_records(&mut subscriber, sent, READ_LIMIT).await;
    each_key_once_in_order(got, sent);
    broker.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_merge_and_move_by_hand_then_a_restart_keeps_the_layout() {
    const TOPIC: &str = "lone/manual";
    let dir = tempfile::tempdir().unwrap();
    let listen = port();
    let broker = Broker::start(dir.path(), listen);
    let client = connect(&broker).await;
    client.create_topic(TOPIC, 1).await.unwrap();
    let mut publisher = Publisher::durable(&client, TOPIC, KEYS).await;
    publish(&mut publisher, 300).await;

    // Split: the pieces go to both shards.
    let split = client.split_segment(TOPIC, 0, 2).await.unwrap();
    assert_eq!(open_ids(&split), [1, 2]);
    assert_eq!(open_shards(&split), BTreeSet::from([0, 1]));
    publish(&mut publisher, 300).await;

    // Move with no other broker: to the other shard.
    let before = split.segments.iter().find(|s| s.id == 2).unwrap().shard;
    let moved = client.move_segment(TOPIC, 2, None).await.unwrap();
    assert_eq!(open_ids(&moved), [1, 3]);
    let now = moved.segments.iter().find(|s| s.id == 3).unwrap();
    assert_ne!(now.shard, before, "moved to the other shard: {moved:?}");
    publish(&mut publisher, 300).await;

    // Merge the two back into one.
    let merged = client.merge_segments(TOPIC, 1, 3).await.unwrap();
    assert_eq!(open_ids(&merged), [4]);
    publish(&mut publisher, 300).await;
    let brokers = client.list_brokers().await.unwrap();
    assert_eq!(brokers.len(), 1, "a lone broker is a cluster of one");
    assert_eq!(brokers[0].shards.len(), 2);
    read_all_once_in_order(&client, TOPIC, &publisher).await;
    client.close().await;

    // A restart takes the same segments back on the same shards, and the
    // records written before it are all there with the ones after.
    broker.stop();
    let broker = Broker::start(dir.path(), listen);
    let client = connect(&broker).await;
    let restarted = client.describe_topic(TOPIC).await.unwrap();
    assert_eq!(open_ids(&restarted), [4]);
    assert_eq!(
        restarted.segments.len(),
        merged.segments.len(),
        "a restart seals nothing: {restarted:?}"
    );
    let merged_shard = merged.segments.iter().find(|s| s.id == 4).unwrap().shard;
    let restarted_shard = restarted.segments.iter().find(|s| s.id == 4).unwrap().shard;
    assert_eq!(restarted_shard, merged_shard);
    let mut after = Publisher::durable_after(&client, TOPIC, &publisher).await;
    publish(&mut after, 300).await;
    read_all_once_in_order(&client, TOPIC, &after).await;
    broker.stop();
}
