//! kelp's own idempotent producers (issue 19, item 3), against a real
//! `kelp serve` process over loopback TCP with nothing but the wire crate:
//! a producer id from `InitProducer`, batches stamped with it, an epoch and
//! a sequence; a resent batch is answered with the offsets it already has
//! and stored once, also after the broker was killed with SIGKILL (its
//! state is read back from the log: buffers and chunks); a gap and a stale
//! epoch are refused and store nothing; a resend to a segment sealed since
//! is answered from what that segment stored, by any shard. Then the SDK's
//! idempotent producer (and `kelp pub --idempotent`) through a SIGKILL and
//! restart of its broker: every record acknowledged and stored once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{port, Broker};
use test_support::{decode, error_code, fetched_records, TestConn};
use wire::producer_id::is_kelp_producer_id;
use wire::{AckMode, BatchBuilder, DataRequest, ErrorCode, FetchFrom, Response};

const TOPIC: &str = "idem/t";

/// A batch of `keys`, stamped by `producer` with `epoch` and base
/// sequence `first`.
fn stamped(keys: &[&str], producer: u64, epoch: u16, first: u32) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for k in keys {
        b.push(1_700_000_000_000, k.as_bytes(), b"v", &[]).unwrap();
    }
    b.finish_with_epoch(producer, epoch, first).to_vec()
}

fn init_producer(conn: &mut TestConn) -> u64 {
    let frame = conn.call(DataRequest::InitProducer);
    match decode(&frame) {
        Response::Producer { producer_id, epoch } => {
            assert_eq!(epoch, 0);
            assert!(is_kelp_producer_id(producer_id), "{producer_id:#x}");
            producer_id
        }
        other => panic!("InitProducer answered {other:?}"),
    }
}

/// Produce `batch` with `ack`; the base offset and record count answered.
fn produce(conn: &mut TestConn, ack: AckMode, batch: &[u8]) -> (u64, u32) {
    let frame = conn.produce(TOPIC, ack, batch);
    match decode(&frame) {
        Response::Produced {
            base_offset,
            record_count,
            ..
        } => (base_offset, record_count),
        other => panic!("produce answered {other:?}"),
    }
}

/// Every record of segment 0: (offset, key).
fn keys_stored(conn: &mut TestConn) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut from = Some(FetchFrom::Earliest);
    while let Some(at) = from {
        let frame = conn.fetch(TOPIC, 0, at, 1 << 16, 0);
        let (records, next) = fetched_records(&frame);
        out.extend(
            records
                .into_iter()
                .map(|(offset, key, _)| (offset, String::from_utf8(key).unwrap())),
        );
        from = next;
    }
    out
}

/// Create the one-segment topic through the broker at `port`; the port of
/// the shard that owns its segment.
fn create_topic(port: u16) -> u16 {
    let mut conn = TestConn::open(port);
    let created = conn.create_topic(TOPIC, 1);
    match decode(&created) {
        Response::Topic(info) => port + info.segments[0].shard,
        other => panic!("create answered {other:?}"),
    }
}

/// A broker with a one-segment topic; the broker and a connection to the
/// segment's owner.
fn broker_with_topic(dir: &std::path::Path) -> (Broker, TestConn) {
    let port = port();
    let broker = Broker::start(dir, port);
    let owner = create_topic(port);
    (broker, TestConn::open(owner))
}

#[test]
fn a_resent_batch_is_answered_with_its_offsets_and_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, mut conn) = broker_with_topic(dir.path());
    let p = init_producer(&mut conn);
    let q = init_producer(&mut conn);
    assert_ne!(p, q, "two producers, two ids");

    let a = stamped(&["a0", "a1", "a2"], p, 0, 0);
    assert_eq!(produce(&mut conn, AckMode::Leader, &a), (0, 3));
    assert_eq!(
        produce(&mut conn, AckMode::Leader, &a),
        (0, 3),
        "a resend is answered with the first offsets"
    );
    // A batch with no producer is never checked.
    let plain = stamped(&["n"], 0, 0, 0);
    assert_eq!(produce(&mut conn, AckMode::Leader, &plain), (3, 1));
    assert_eq!(produce(&mut conn, AckMode::Leader, &plain), (4, 1));
    let b = stamped(&["b0", "b1"], p, 0, 3);
    assert_eq!(produce(&mut conn, AckMode::Durable, &b), (5, 2));
    // Resends of the last batches, durable too, in any order.
    assert_eq!(produce(&mut conn, AckMode::Durable, &a), (0, 3));
    assert_eq!(produce(&mut conn, AckMode::Leader, &b), (5, 2));
    // Another producer's sequences are its own.
    let c = stamped(&["c0"], q, 0, 0);
    assert_eq!(produce(&mut conn, AckMode::Leader, &c), (7, 1));

    // A gap: the batch is refused and stores nothing.
    let gap = stamped(&["gap"], p, 0, 9);
    let r = conn.produce(TOPIC, AckMode::Leader, &gap);
    assert_eq!(
        error_code(&r),
        Some(ErrorCode::OutOfOrderSequence),
        "{:?}",
        decode(&r)
    );
    // A stamp no producer makes (an epoch past 2^15 - 1) is refused.
    let bad = stamped(&["bad"], p, u16::MAX, 5);
    let r = conn.produce(TOPIC, AckMode::Leader, &bad);
    assert_eq!(
        error_code(&r),
        Some(ErrorCode::InvalidArgument),
        "{:?}",
        decode(&r)
    );
    // A new epoch starts at sequence 0; the old one is fenced from then on.
    let next_epoch = stamped(&["e1"], q, 1, 0);
    assert_eq!(produce(&mut conn, AckMode::Leader, &next_epoch), (8, 1));
    let stale = stamped(&["stale"], q, 0, 1);
    let r = conn.produce(TOPIC, AckMode::Leader, &stale);
    assert_eq!(
        error_code(&r),
        Some(ErrorCode::ProducerFenced),
        "{:?}",
        decode(&r)
    );

    let stored = keys_stored(&mut conn);
    let keys: Vec<&str> = stored.iter().map(|(_, k)| k.as_str()).collect();
    assert_eq!(
        keys,
        ["a0", "a1", "a2", "n", "n", "b0", "b1", "c0", "e1"],
        "each idempotent batch once, refused ones not at all"
    );
    drop(conn);
    broker.stop();
}

/// The broker is killed with SIGKILL while the batches are only in its
/// buffers (leader acks, flushes an hour apart), and restarted on the same
/// data dir: the producer's resends are answered with their offsets, its
/// next batch is taken, and a gap is still a gap. Then once more after a
/// clean stop, when the records are in chunks.
#[test]
fn resends_after_a_sigkill_and_a_restart_are_not_stored_again() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let args = ["--flush-age-ms", "3600000"];
    let broker = Broker::start_with(dir.path(), port, &args);
    let owner = create_topic(port);
    let mut conn = TestConn::open(owner);
    let p = init_producer(&mut conn);
    let first = stamped(&["k0", "k1"], p, 0, 0);
    let second = stamped(&["k2"], p, 0, 2);
    assert_eq!(produce(&mut conn, AckMode::Leader, &first), (0, 2));
    assert_eq!(produce(&mut conn, AckMode::Leader, &second), (2, 1));
    drop(conn);
    broker.kill9();

    let broker = Broker::start_with(dir.path(), port, &args);
    let mut conn = TestConn::open(owner);
    let q = init_producer(&mut conn);
    assert_ne!(
        p, q,
        "an id handed out before the kill is not handed out again"
    );
    assert_eq!(produce(&mut conn, AckMode::Leader, &second), (2, 1));
    assert_eq!(produce(&mut conn, AckMode::Durable, &first), (0, 2));
    let third = stamped(&["k3"], p, 0, 3);
    assert_eq!(produce(&mut conn, AckMode::Durable, &third), (3, 1));
    let gap = stamped(&["gap"], p, 0, 7);
    let r = conn.produce(TOPIC, AckMode::Leader, &gap);
    assert_eq!(error_code(&r), Some(ErrorCode::OutOfOrderSequence));
    drop(conn);
    broker.stop();

    let broker = Broker::start_with(dir.path(), port, &args);
    let mut conn = TestConn::open(owner);
    assert_eq!(produce(&mut conn, AckMode::Leader, &third), (3, 1));
    assert_eq!(produce(&mut conn, AckMode::Leader, &second), (2, 1));
    let stored = keys_stored(&mut conn);
    assert_eq!(
        stored,
        [(0, "k0"), (1, "k1"), (2, "k2"), (3, "k3")]
            .map(|(o, k)| (o, k.to_owned()))
            .to_vec(),
        "every batch once, at the offsets first answered"
    );
    drop(conn);
    broker.stop();
}

/// Records the SDK test publishes.
const SDK_RECORDS: u64 = 40_000;

/// The SDK's idempotent producer publishes while its broker is killed with
/// SIGKILL and started again on the same data dir and port: batches whose
/// connection died are resent unchanged, every record is acknowledged,
/// and each is stored exactly once, in order per key.
#[test]
fn an_idempotent_producer_rides_through_a_sigkill_and_stores_each_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start(dir.path(), port);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(broker.client());
    runtime
        .block_on(client.create_topic(TOPIC, 2))
        .expect("create the topic");
    let config = client::ProducerConfig {
        linger_ms: 1,
        batch_bytes_max: 16 << 10,
        idempotent: true,
        ..client::ProducerConfig::default()
    };
    let producer = std::sync::Arc::new(
        runtime
            .block_on(client.producer(TOPIC, config))
            .expect("an idempotent producer"),
    );
    let sending = {
        let producer = producer.clone();
        runtime.spawn(async move {
            for n in 0..SDK_RECORDS {
                let key = format!("key-{}", n % 64);
                producer
                    .send(key.as_bytes(), n.to_string().as_bytes(), &[])
                    .await?;
            }
            producer.flush().await
        })
    };
    // Kill it in the middle of the stream, then bring it back.
    while producer.acked_records() < SDK_RECORDS / 4 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    broker.kill9();
    let broker = Broker::start(dir.path(), port);
    let acked = runtime
        .block_on(sending)
        .unwrap()
        .expect("every record acknowledged across the kill");
    assert_eq!(acked, SDK_RECORDS);
    let resent = producer.resent_batches();
    println!("batches resent unchanged after the kill: {resent}");
    assert!(
        resent > 0,
        "the kill caught batches in flight, which were resent"
    );

    // Read everything back: each record once, each key in order.
    let mut seen = vec![false; SDK_RECORDS as usize];
    let mut last_per_key = vec![None::<u64>; 64];
    let info = runtime.block_on(client.describe_topic(TOPIC)).unwrap();
    let owner = |segment: &wire::message::SegmentInfo| port + segment.shard;
    for segment in &info.segments {
        let mut conn = TestConn::open(owner(segment));
        let mut from = Some(FetchFrom::Earliest);
        while let Some(at) = from {
            let frame = conn.fetch(TOPIC, segment.id, at, 1 << 20, 0);
            let (records, next) = fetched_records(&frame);
            for (offset, key, value) in records {
                let n: u64 = std::str::from_utf8(&value).unwrap().parse().unwrap();
                assert!(
                    !std::mem::replace(&mut seen[n as usize], true),
                    "record {n} stored twice (again at offset {offset} of segment {})",
                    segment.id
                );
                let k = (n % 64) as usize;
                assert_eq!(key, format!("key-{k}").into_bytes());
                assert!(
                    last_per_key[k].is_none_or(|last| last < n),
                    "key {k}: record {n} after {:?}",
                    last_per_key[k]
                );
                last_per_key[k] = Some(n);
            }
            from = next;
        }
    }
    let missing = seen.iter().filter(|s| !**s).count();
    assert_eq!(missing, 0, "every acknowledged record is stored");
    drop(client);
    broker.stop();
}

/// `kelp pub --idempotent` publishes through an idempotent producer: the
/// lines are acknowledged and stored once, stamped with a kelp producer id.
#[test]
fn kelp_pub_idempotent_stamps_its_batches() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start(dir.path(), port);
    let owner = create_topic(port);
    let out = broker.cli_with_stdin(&["pub", TOPIC, "--idempotent"], b"a\t1\nb\t2\nc\t3\n");
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("acknowledged 3 records"), "{said}");
    let mut conn = TestConn::open(owner);
    let frame = conn.fetch(TOPIC, 0, FetchFrom::Earliest, 1 << 16, 0);
    let Response::Fetched(fetched) = decode(&frame) else {
        panic!("{:?}", decode(&frame))
    };
    let mut stored = 0;
    for item in wire::chunk::BatchWalk::new(fetched.batches) {
        let (_, batch) = item.unwrap();
        assert!(
            is_kelp_producer_id(batch.producer_id()),
            "batch at {} carries producer {:#x}",
            batch.base_offset(),
            batch.producer_id()
        );
        stored += batch.record_count();
    }
    assert_eq!(stored, 3);
    drop(conn);
    broker.stop();
}

/// A resend to a segment sealed since (a split) is answered with the
/// offsets it has there, by its old owner and by a shard that never owned
/// it (which reads it from the filer); a batch the sealed segment never
/// stored is refused `SegmentSealed`, naming the successors, and goes there
/// as a new batch.
#[test]
fn a_resend_to_a_sealed_segment_is_answered_from_what_it_stored() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start_with(dir.path(), port, &["--flush-age-ms", "3600000"]);
    let owner = create_topic(port);
    let mut conn = TestConn::open(owner);
    let p = init_producer(&mut conn);
    let stored = stamped(&["s0", "s1", "s2"], p, 0, 0);
    assert_eq!(produce(&mut conn, AckMode::Leader, &stored), (0, 3));
    let split = conn.call(wire::AdminRequest::SplitSegment {
        topic: TOPIC.into(),
        segment: 0,
        pieces: 2,
    });
    assert!(
        matches!(decode(&split), Response::Topic(_)),
        "{:?}",
        decode(&split)
    );

    // Its old owner, with and without durable.
    assert_eq!(produce(&mut conn, AckMode::Leader, &stored), (0, 3));
    assert_eq!(produce(&mut conn, AckMode::Durable, &stored), (0, 3));
    // The other shard, which reads it from the filer.
    let other = if owner == port { port + 1 } else { port };
    let mut elsewhere = TestConn::open(other);
    assert_eq!(produce(&mut elsewhere, AckMode::Durable, &stored), (0, 3));
    // A batch it never stored: refused, whoever is asked.
    let never = stamped(&["n0"], p, 0, 3);
    for c in [&mut conn, &mut elsewhere] {
        let r = c.produce(TOPIC, AckMode::Leader, &never);
        match decode(&r) {
            Response::Sealed { successors, .. } => {
                assert_eq!(successors.segments.len(), 2, "the split's two successors");
            }
            other => panic!("a batch the sealed segment never stored: {other:?}"),
        }
    }
    // Nothing was appended to the sealed segment by any of it.
    let keys: Vec<String> = keys_stored(&mut conn).into_iter().map(|(_, k)| k).collect();
    assert_eq!(keys, ["s0", "s1", "s2"]);
    drop((conn, elsewhere));
    broker.stop();
}

/// A shard's reserved-id file that is not 8 bytes long makes
/// `InitProducer` fail with a storage error naming it, and hands out no
/// id; the other shard, whose file is sound, still does.
#[test]
fn a_damaged_producer_id_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start(dir.path(), port);
    let mut shard0 = TestConn::open(port);
    let before = init_producer(&mut shard0);
    drop(shard0);
    broker.stop();
    let file = dir.path().join("filer/producer-ids/0/0");
    assert_eq!(std::fs::read(&file).unwrap().len(), 8, "{}", file.display());
    std::fs::write(&file, b"bad").unwrap();

    let broker = Broker::start(dir.path(), port);
    let mut shard0 = TestConn::open(port);
    let r = shard0.call(DataRequest::InitProducer);
    assert_eq!(error_code(&r), Some(ErrorCode::Storage), "{:?}", decode(&r));
    let Response::Error { message, .. } = decode(&r) else {
        unreachable!()
    };
    assert!(message.contains("producer-ids/0/0"), "{message}");
    let mut shard1 = TestConn::open(port + 1);
    let other = init_producer(&mut shard1);
    assert_ne!(other, before);
    drop((shard0, shard1));
    broker.stop();
}
