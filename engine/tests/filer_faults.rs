//! The flusher, reads and recovery against a filer that fails (issue 16,
//! item 6): a seeded [`FaultFiler`] fails a share of chunk uploads (before
//! or after they land), of hand-overs, sizes and reads, and slows others.
//! Every record acknowledged `durable` must be read back at the offset its
//! ack named, through the failing filer (a failed read is answered with an
//! error, never with other records) and again after a restart whose
//! listings, sizes and reads fail now and then; no offset may hold two
//! records. Each seed is printed;
//! `KELP_TEST_SEED=<seed>` replays one.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kelp_engine::{Broker, BrokerConfig};
use support::{config, port};
use test_support::fault_filer::{Fault, FaultFiler, FaultPlan, Op};
use test_support::{decode, TestConn as Conn};
use wire::{AckMode, BatchBuilder, FetchFrom, Response};

/// The seeds a plain run tries.
const SEEDS: [u64; 3] = [11, 12, 13];
/// Batches produced per seed, each acknowledged `durable` (so each is a
/// chunk of its own, or nearly).
const BATCHES: usize = 40;
const RECORDS_PER_BATCH: usize = 25;
const VALUE_BYTES: usize = 200;
/// Chance, in thousandths, that a chunk operation is faulted.
const FAULTS_PER_MILLE: u64 = 200;
/// Tries of one fetch before the test gives up on the filer recovering.
const FETCH_TRIES_MAX: usize = 1_000;
const TOPIC: &str = "faults/t";

#[test]
fn acknowledged_records_survive_a_failing_filer_and_a_restart() {
    test_support::seeded("KELP_TEST_SEED", SEEDS, run);
}

fn plan(seed: u64) -> FaultPlan {
    let slow = Fault::Slow(Duration::from_millis(20));
    FaultPlan::Seeded {
        seed,
        per_mille: FAULTS_PER_MILLE,
        path_contains: ".chunk".into(),
        faults: vec![
            (Op::Create, vec![Fault::Fail, Fault::FailAfter, slow]),
            (Op::PutFile, vec![Fault::Fail, Fault::FailAfter]),
            (Op::ReadAt, vec![Fault::Fail, slow]),
            (Op::Size, vec![Fault::Fail]),
        ],
    }
}

fn broker_config(dir: &std::path::Path, port: u16) -> BrokerConfig {
    BrokerConfig {
        shards: 1,
        ..config(dir, port)
    }
}

fn run(seed: u64) {
    let _ = env_logger::builder().is_test(true).try_init();
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let slot = Arc::new(Mutex::new(None));
    let keep = slot.clone();
    let broker = Broker::start_with_filer(broker_config(dir.path(), port), move |inner| {
        let faulty = Arc::new(FaultFiler::new(inner, plan(seed)));
        *keep.lock().unwrap() = Some(faulty.clone());
        faulty
    })
    .unwrap();
    let faulty: Arc<FaultFiler> = slot.lock().unwrap().take().unwrap();
    let mut c = Conn::open(port);
    assert!(matches!(
        decode(&c.create_topic(TOPIC, 1)),
        Response::Topic(_)
    ));

    let value = vec![b'v'; VALUE_BYTES];
    let mut acked: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut refused = 0;
    for b in 0..BATCHES {
        let keys: Vec<Vec<u8>> = (0..RECORDS_PER_BATCH)
            .map(|r| format!("s{seed}-b{b}-r{r}").into_bytes())
            .collect();
        let mut builder = BatchBuilder::new();
        for key in &keys {
            builder.push(1_700_000_000_000, key, &value, &[]).unwrap();
        }
        let bytes = builder.finish(0, 0).to_vec();
        let frame = c.produce(TOPIC, AckMode::Durable, &bytes);
        match decode(&frame) {
            Response::Produced {
                base_offset,
                record_count,
                ..
            } => {
                assert_eq!(record_count as usize, RECORDS_PER_BATCH);
                for (i, key) in keys.into_iter().enumerate() {
                    assert!(acked.insert(base_offset + i as u64, key).is_none());
                }
            }
            Response::Error { code, message } => {
                refused += 1;
                println!("batch {b} not acknowledged: {code:?}: {message}");
            }
            other => panic!("batch {b}: {other:?}"),
        }
    }
    let injected = faulty.injected();
    println!(
        "seed {seed}: {} records acknowledged, {refused} batches refused, {} faults injected",
        acked.len(),
        injected.len()
    );
    assert!(
        acked.len() >= RECORDS_PER_BATCH * BATCHES / 2,
        "most batches must be acknowledged: the flusher retries"
    );
    for fault in &injected {
        println!("  injected: {fault}");
    }
    assert!(!injected.is_empty(), "the plan injected nothing");

    check(&mut c, &acked, "through the failing filer");
    drop(c);
    broker.stop().unwrap();

    // The same data dir, its reads failing as it opens and serves.
    let port = support::port();
    let broker = Broker::start_with_filer(broker_config(dir.path(), port), move |inner| {
        Arc::new(FaultFiler::new(inner, reopen_plan(seed)))
    })
    .unwrap();
    let mut c = Conn::open(port);
    check(&mut c, &acked, "after a restart");
    drop(c);
    broker.stop().unwrap();
}

/// Faults for the restart: listings, sizes and reads of the topic's
/// objects fail now and then.
fn reopen_plan(seed: u64) -> FaultPlan {
    FaultPlan::Seeded {
        seed: seed ^ 0x5eed,
        per_mille: FAULTS_PER_MILLE,
        path_contains: TOPIC.into(),
        faults: vec![
            (Op::List, vec![Fault::Fail]),
            (Op::ReadAt, vec![Fault::Fail]),
            (Op::Size, vec![Fault::Fail]),
        ],
    }
}

/// Every record of `acked` is read at its offset; offsets read are
/// distinct and rising.
fn check(c: &mut Conn, acked: &BTreeMap<u64, Vec<u8>>, when: &str) {
    let read = read_all(c);
    for (offset, key) in acked {
        assert_eq!(
            read.get(offset),
            Some(key),
            "{when}: acknowledged offset {offset} reads {:?}, not {:?}",
            read.get(offset)
                .map(|k| String::from_utf8_lossy(k).into_owned()),
            String::from_utf8_lossy(key)
        );
    }
}

/// Every record of segment 0 from the earliest on, by offset; a fetch
/// answered with an error is tried again.
fn read_all(c: &mut Conn) -> BTreeMap<u64, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut from = Some(FetchFrom::Earliest);
    let mut tries = 0;
    while let Some(at) = from {
        let frame = c.fetch(TOPIC, 0, at, 1 << 16, 0);
        if let Response::Error { code, message } = decode(&frame) {
            tries += 1;
            assert!(
                tries < FETCH_TRIES_MAX,
                "fetches keep failing: {code:?}: {message}"
            );
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let (records, next) = test_support::fetched_records(&frame);
        for (offset, key, _) in records {
            let last = out.keys().next_back().copied();
            assert!(
                last.is_none_or(|last| offset > last),
                "offset {offset} read after {last:?}"
            );
            out.insert(offset, key);
        }
        from = next;
    }
    out
}
