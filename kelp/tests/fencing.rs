//! A broker declared dead can neither acknowledge nor make visible a
//! record past the point the control plane sealed its segment at: one
//! `kelp control` (2 s silence limit) and two `kelp serve --control`
//! brokers on loopback, the filer a directory they share.
//!
//! - A *zombie*: the owner is frozen with SIGSTOP past the silence limit,
//!   so the control plane seals its segment at the end of what the filer
//!   holds (the fence) and opens a successor on the other broker. Resumed,
//!   the owner is sent a `durable` batch by a producer that still holds
//!   the old layout. It must not acknowledge it (its chunk meets the
//!   fence), the producer must resend it to the successor, and every
//!   `durable` record must be read exactly once; the records the zombie
//!   held with `ack=leader` never become visible.
//! - A restart: the owner is killed with `kill -9` holding `ack=leader`
//!   records in its buffers, declared dead, and started again. Its
//!   leftover buffers of the segment sealed meanwhile are dropped with a
//!   log line that counts them, and the records stay invisible.
//! - A reader that read an owner's unstored records from its buffers when
//!   it died rides through: it says which offsets were never stored
//!   (`ClientError::Truncated`) and reads on from the successor.
//! - An idempotent `durable` producer rides through its owner's death: its
//!   batches in flight are resent unchanged, answered from what the sealed
//!   segment stored or re-routed to the successor, and every record is
//!   read exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use client::{AckMode, Client, FetchFrom, ProducerConfig, SubscribeOptions};
use support::{broker_id, port, signal, tcp_client, Broker, ControlPlane};

const SILENCE_MS: &str = "2000";
/// The owner's buffers are flushed by size or by `durable` waits only:
/// `ack=leader` records stay in its buffers for the whole test.
const FLUSH_AGE_MS: &str = "600000";
const DURABLE_BEFORE: u64 = 100;
const LEADER_HELD: u64 = 200;
const DURABLE_AFTER: u64 = 50;
const DEATH_LIMIT: Duration = Duration::from_secs(30);
const READ_LIMIT: Duration = Duration::from_secs(60);

fn broker_args(control: &ControlPlane) -> Vec<String> {
    vec![
        "--control".into(),
        control.address(),
        "--unpinned".into(),
        "--flush-age-ms".into(),
        FLUSH_AGE_MS.into(),
    ]
}

fn start(dir: &Path, control: &ControlPlane, log: Option<&Path>) -> Broker {
    let args = broker_args(control);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match log {
        Some(log) => Broker::start_logged(dir, port(), &args, &[], log),
        None => Broker::start_with(dir, port(), &args),
    }
}

/// Publish `count` records valued `<tag>-<n>` with `ack`, keys spread
/// over 16, and wait for every acknowledgement.
async fn publish(client: &Client, topic: &str, ack: AckMode, tag: &str, count: u64) {
    let config = ProducerConfig {
        ack,
        ..ProducerConfig::default()
    };
    let producer = client.producer(topic, config).await.unwrap();
    for n in 0..count {
        let key = format!("key-{}", n % 16);
        let value = format!("{tag}-{n}");
        producer
            .send(key.as_bytes(), value.as_bytes(), &[])
            .await
            .unwrap();
    }
    producer.flush().await.unwrap();
}

/// Wait until the control plane declared `victim` dead: every segment it
/// owned is sealed, with a successor elsewhere.
async fn wait_declared_dead(client: &Client, topic: &str, victim: u32) {
    let deadline = Instant::now() + DEATH_LIMIT;
    loop {
        if let Ok(info) = client.describe_topic(topic).await {
            let moved = info
                .segments
                .iter()
                .all(|s| s.sealed || s.broker != Some(victim));
            if moved && info.segments.iter().any(|s| !s.sealed) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "broker {victim} was not declared dead"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A subscriber to every segment of `topic` from the start, riding
/// through broker deaths (`reconnect`, as `kelp sub` has it).
async fn from_the_start(client: &Client, topic: &str) -> client::Subscriber {
    let options = SubscribeOptions {
        reconnect: true,
        ..SubscribeOptions::default()
    };
    client
        .subscribe(topic, FetchFrom::Earliest, options)
        .await
        .unwrap()
}

/// Every record of `topic` from the start, read until `want` values of
/// `durable` tags are in and nothing more came for a second: value ->
/// times read.
async fn read_all(client: &Client, topic: &str, want: u64) -> HashMap<String, u64> {
    let mut subscriber = from_the_start(client, topic).await;
    let mut got: HashMap<String, u64> = HashMap::new();
    let deadline = Instant::now() + READ_LIMIT;
    let mut complete_at: Option<Instant> = None;
    while Instant::now() < deadline
        && complete_at.is_none_or(|t| t.elapsed() < Duration::from_secs(1))
    {
        let durable = got.keys().filter(|v| v.starts_with("durable")).count() as u64;
        if complete_at.is_none() && durable >= want {
            complete_at = Some(Instant::now());
        }
        let Ok(next) = tokio::time::timeout(Duration::from_millis(200), subscriber.next()).await
        else {
            continue;
        };
        let record = next.expect("the subscriber ended").expect("read a record");
        let value = String::from_utf8(record.value.to_vec()).unwrap();
        *got.entry(value).or_default() += 1;
    }
    got
}

fn count_tagged(got: &HashMap<String, u64>, tag: &str) -> u64 {
    got.keys()
        .filter(|v| v.rsplit_once('-').is_some_and(|(t, _)| t == tag))
        .count() as u64
}

/// The segment's directory in the shared filer.
fn segment_dir(control: &ControlPlane, topic: &str, segment: u32) -> PathBuf {
    control
        .data_dir
        .join(format!("filer/topics/{topic}/{segment}"))
}

/// The seal point the control plane's marker states, after checking that
/// the fence chunk (no records) sits there and no chunk lies past it.
fn fenced_end(dir: &Path) -> u64 {
    let marker = std::fs::read_to_string(dir.join("sealed")).expect("the seal marker");
    assert!(
        marker.contains(r#""written_by":"control""#),
        "the control plane sealed it: {marker}"
    );
    let end: u64 = marker
        .split(r#""end":"#)
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no end in the marker: {marker}"));
    let mut bases: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".chunk").map(|b| b.parse().unwrap())
        })
        .collect();
    bases.sort_unstable();
    assert_eq!(
        bases.last(),
        Some(&end),
        "the last chunk is the fence: {bases:?}"
    );
    let fence = std::fs::read(dir.join(format!("{end:020}.chunk"))).unwrap();
    let header = wire::chunk::ChunkHeader::decode(&fence).unwrap();
    assert_eq!(
        (header.base_offset, header.next_offset, header.data_bytes),
        (end, end, 0),
        "the fence holds no record"
    );
    end
}

/// The one segment of a fresh topic, and its owner.
async fn only_segment(client: &Client, topic: &str) -> (u32, u32) {
    let info = client.describe_topic(topic).await.unwrap();
    assert_eq!(info.segments.len(), 1, "{info:?}");
    let s = &info.segments[0];
    (s.id, s.broker.expect("an owner"))
}

/// What every test starts from: a control plane (2 s silence limit), an
/// owner that started alone and so holds the one segment of `topic`, a
/// survivor that joined after, and `DURABLE_BEFORE` durable records stored
/// then `LEADER_HELD` leader-acked ones held only in the owner's buffers.
struct Scene {
    dir: tempfile::TempDir,
    control: ControlPlane,
    owner: Broker,
    survivor: Broker,
    /// A client bootstrapped from the owner alone.
    to_owner: Client,
    segment: u32,
    owner_id: u32,
}

impl Scene {
    async fn start(topic: &str) -> Scene {
        let dir = tempfile::tempdir().unwrap();
        let control = ControlPlane::start(
            &dir.path().join("control"),
            port(),
            &["--broker-silence-ms", SILENCE_MS],
        );
        let owner = start(&dir.path().join("owner"), &control, None);
        let to_owner = tcp_client(&owner.broker_arg()).await;
        to_owner.create_topic(topic, 1).await.unwrap();
        let (segment, owner_id) = only_segment(&to_owner, topic).await;
        assert_eq!(owner_id, broker_id(&to_owner, &owner).await);
        let survivor = start(&dir.path().join("survivor"), &control, None);
        publish(
            &to_owner,
            topic,
            AckMode::Durable,
            "durable",
            DURABLE_BEFORE,
        )
        .await;
        publish(&to_owner, topic, AckMode::Leader, "leader", LEADER_HELD).await;
        Scene {
            dir,
            control,
            owner,
            survivor,
            to_owner,
            segment,
            owner_id,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_owner_declared_dead_neither_acknowledges_nor_shows_records_past_its_seal() {
    const TOPIC: &str = "fence/zombie";
    let Scene {
        dir: _dir,
        control,
        owner,
        survivor,
        to_owner,
        segment,
        owner_id,
    } = Scene::start(TOPIC).await;
    // A producer that learns the layout now and keeps it.
    let stale = to_owner
        .producer(
            TOPIC,
            ProducerConfig {
                ack: AckMode::Durable,
                ..ProducerConfig::default()
            },
        )
        .await
        .unwrap();

    let pid = owner.child.id();
    signal("STOP", pid);
    let to_survivor = tcp_client(&survivor.broker_arg()).await;
    wait_declared_dead(&to_survivor, TOPIC, owner_id).await;
    let end = fenced_end(&segment_dir(&control, TOPIC, segment));
    assert_eq!(end, DURABLE_BEFORE, "sealed where the stored records end");

    // Resumed, the zombie is sent a durable batch first thing.
    signal("CONT", pid);
    for n in 0..DURABLE_AFTER {
        let value = format!("durable-after-{n}");
        stale
            .send(format!("key-{}", n % 16).as_bytes(), value.as_bytes(), &[])
            .await
            .unwrap();
    }
    stale.flush().await.unwrap();

    let got = read_all(&to_survivor, TOPIC, DURABLE_BEFORE + DURABLE_AFTER).await;
    let durable = count_tagged(&got, "durable");
    let after = got
        .keys()
        .filter(|v| v.starts_with("durable-after-"))
        .count() as u64;
    assert_eq!(
        (durable, after),
        (DURABLE_BEFORE, DURABLE_AFTER),
        "every durable record, before and after the freeze"
    );
    let twice: Vec<_> = got.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "read more than once: {twice:?}");
    assert_eq!(
        count_tagged(&got, "leader"),
        0,
        "the zombie's unstored records never became visible"
    );
    // Nothing was added past the seal point while it ran again.
    assert_eq!(fenced_end(&segment_dir(&control, TOPIC, segment)), end);
    drop(owner);
    drop(survivor);
    drop(control);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_owner_drops_the_buffers_of_a_segment_sealed_while_it_was_away() {
    const TOPIC: &str = "fence/restart";
    let Scene {
        dir,
        control,
        owner,
        survivor,
        segment,
        owner_id,
        ..
    } = Scene::start(TOPIC).await;
    let owner_dir = dir.path().join("owner");
    let buffers = owner_dir.join(format!("buffers/{TOPIC}/{segment}"));
    assert!(
        buffers.exists(),
        "the leader records are in the owner's buffers"
    );

    owner.kill9();
    let to_survivor = tcp_client(&survivor.broker_arg()).await;
    wait_declared_dead(&to_survivor, TOPIC, owner_id).await;
    let end = fenced_end(&segment_dir(&control, TOPIC, segment));

    let log = dir.path().join("owner-again.log");
    let again = start(&owner_dir, &control, Some(&log));
    let deadline = Instant::now() + DEATH_LIMIT;
    while buffers.exists() {
        assert!(
            Instant::now() < deadline,
            "the leftover buffers were not dropped: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let said = std::fs::read_to_string(&log).unwrap();
    let expected = format!(
        "held {LEADER_HELD} records past that (offsets {end}..{})",
        end + LEADER_HELD
    );
    assert!(
        said.contains(&expected),
        "no {expected:?} in the log:\n{said}"
    );

    let got = read_all(&to_survivor, TOPIC, DURABLE_BEFORE).await;
    assert_eq!(count_tagged(&got, "durable"), DURABLE_BEFORE);
    assert_eq!(count_tagged(&got, "leader"), 0, "dropped, not shown");
    assert_eq!(fenced_end(&segment_dir(&control, TOPIC, segment)), end);
    drop(again);
    drop(survivor);
    drop(control);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_rides_through_its_owners_death_and_says_what_was_never_stored() {
    const TOPIC: &str = "fence/reader";
    let Scene {
        dir: _dir,
        control,
        owner,
        survivor,
        segment,
        owner_id,
        ..
    } = Scene::start(TOPIC).await;
    // Bootstrapped from both: its layout requests reach the survivor
    // once the owner is gone.
    let both = tcp_client(&format!("{},{}", owner.broker_arg(), survivor.broker_arg())).await;

    // The reader has every record, the unstored ones from the owner's
    // buffers too, when the owner dies.
    let mut subscriber = from_the_start(&both, TOPIC).await;
    let mut read = 0u64;
    while read < DURABLE_BEFORE + LEADER_HELD {
        let next = tokio::time::timeout(READ_LIMIT, subscriber.next())
            .await
            .expect("records before the kill")
            .expect("the subscriber ended");
        next.expect("a record");
        read += 1;
    }
    owner.kill9();
    wait_declared_dead(&both, TOPIC, owner_id).await;
    publish(
        &both,
        TOPIC,
        AckMode::Durable,
        "durable-after",
        DURABLE_AFTER,
    )
    .await;

    // It says which records were never stored, then goes on with the
    // successor: the subscriber does not end.
    let mut truncated = None;
    let mut after = 0u64;
    let deadline = Instant::now() + READ_LIMIT;
    while after < DURABLE_AFTER {
        assert!(
            Instant::now() < deadline,
            "read {after} records after the kill"
        );
        let Ok(next) = tokio::time::timeout(Duration::from_millis(200), subscriber.next()).await
        else {
            continue;
        };
        match next.expect("the subscriber ended") {
            Ok(record) => {
                let value = String::from_utf8(record.value.to_vec()).unwrap();
                assert!(value.starts_with("durable-after-"), "read {value} again");
                after += 1;
            }
            Err(client::ClientError::Truncated {
                segment: s,
                end,
                read_to,
            }) => {
                assert!(truncated.is_none(), "said twice");
                truncated = Some((s, end, read_to));
            }
            Err(e) => panic!("the subscriber failed: {e}"),
        }
    }
    assert_eq!(
        truncated,
        Some((segment, DURABLE_BEFORE, DURABLE_BEFORE + LEADER_HELD)),
        "the records read from the dead owner's buffers are named"
    );
    drop(survivor);
    drop(control);
}

/// Records the idempotent producer publishes through its owner's death.
const IDEMPOTENT_RECORDS: u64 = 3_000;

/// An idempotent `durable` producer publishes while the owner of its
/// segment is killed with `kill -9` and declared dead. Its batches in
/// flight are resent unchanged: a shard that serves their keys now checks
/// each against what the sealed segment stored (the batch acknowledged by
/// the filer but not to the producer is answered with its offsets), and
/// the rest go to the successor as new batches. Every record is
/// acknowledged and read exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_producer_rides_through_its_owners_death_storing_each_record_once() {
    const TOPIC: &str = "fence/idempotent";
    let Scene {
        dir: _dir,
        control: _control,
        owner,
        survivor,
        owner_id,
        ..
    } = Scene::start(TOPIC).await;
    let both = tcp_client(&format!("{},{}", owner.broker_arg(), survivor.broker_arg())).await;
    let config = ProducerConfig {
        ack: AckMode::Durable,
        linger_ms: 1,
        batch_bytes_max: 4 << 10,
        idempotent: true,
        ..ProducerConfig::default()
    };
    let producer = std::sync::Arc::new(both.producer(TOPIC, config).await.unwrap());
    let sending = {
        let producer = producer.clone();
        tokio::spawn(async move {
            for n in 0..IDEMPOTENT_RECORDS {
                let key = format!("key-{}", n % 16);
                let value = format!("idem-{n}");
                producer.send(key.as_bytes(), value.as_bytes(), &[]).await?;
            }
            producer.flush().await
        })
    };
    while producer.acked_records() < IDEMPOTENT_RECORDS / 3 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    owner.kill9();
    wait_declared_dead(&both, TOPIC, owner_id).await;
    let acked = sending
        .await
        .unwrap()
        .expect("every record acknowledged through the owner's death");
    assert_eq!(acked, IDEMPOTENT_RECORDS);
    println!(
        "batches resent unchanged after the kill: {}",
        producer.resent_batches()
    );

    let got = read_all(&both, TOPIC, DURABLE_BEFORE).await;
    let twice: Vec<_> = got
        .iter()
        .filter(|(v, n)| v.starts_with("idem-") && **n > 1)
        .collect();
    assert!(twice.is_empty(), "read more than once: {twice:?}");
    assert_eq!(
        count_tagged(&got, "idem"),
        IDEMPOTENT_RECORDS,
        "every acknowledged record is stored"
    );
    drop(both);
    survivor.stop();
}
