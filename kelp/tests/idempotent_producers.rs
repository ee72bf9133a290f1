//! kelp's own idempotent producers (issue 19, item 3), against a real
//! `kelp serve` process over loopback TCP with nothing but the wire crate:
//! a producer id from `InitProducer`, batches stamped with it, an epoch and
//! a sequence; a resent batch is answered with the offsets it already has
//! and stored once, also after the broker was killed with SIGKILL (its
//! state is read back from the log: buffers and chunks); a gap and a stale
//! epoch are refused and store nothing.
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
