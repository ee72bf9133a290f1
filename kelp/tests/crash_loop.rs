//! Crash after crash (issue 16): a producer sends numbered records with
//! ack `leader` while the broker is killed with SIGKILL at a random moment,
//! then restarted, several times over. Every acknowledged record must be
//! there at the offset its ack named, no offset may hold two records, and
//! new records must never take an offset that was acknowledged. Seeded:
//! the seed is printed; `KELP_TEST_SEED=N` replays it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::records::sub;
use support::{port, Broker};
use wire::{AckMode, BatchBuilder, DataRequest, Response};

/// Kill-and-restart rounds.
const ROUNDS: usize = 6;
/// Records per produce request.
const BATCH_RECORDS: u64 = 20;
/// Longest a round runs before its kill, ms.
const ROUND_MS_MAX: u64 = 400;

fn value(n: u64) -> String {
    format!("n{n:08}-{}", "y".repeat(200))
}

/// An acknowledged batch: its first offset, record count and first
/// record number.
#[derive(Debug, Clone, Copy)]
struct Acked {
    base_offset: u64,
    count: u64,
    first: u64,
}

/// Produce numbered batches from `first` to segment 0 on `port` until the
/// connection fails or `stop`; the acknowledged ones.
fn produce_until_gone(port: u16, topic: &str, first: u64, stop: &AtomicBool) -> Vec<Acked> {
    let mut acked = Vec::new();
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return acked;
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut next = first;
    let mut out = Vec::new();
    let mut id = 1u32;
    while !stop.load(Ordering::Relaxed) {
        let mut builder = BatchBuilder::new();
        for n in next..next + BATCH_RECORDS {
            builder
                .push(1_000, format!("k{n}").as_bytes(), value(n).as_bytes(), &[])
                .unwrap();
        }
        let batch = builder.finish(0, 0).to_vec();
        out.clear();
        DataRequest::Produce {
            topic,
            segment: 0,
            ack: AckMode::Leader,
            batch: &batch,
        }
        .encode(id, &mut out);
        if stream.write_all(&out).is_err() {
            break;
        }
        let Some(frame) = test_support::read_frame(&mut stream) else {
            break;
        };
        match test_support::decode(&frame) {
            Response::Produced {
                base_offset,
                record_count,
                ..
            } => {
                assert_eq!(u64::from(record_count), BATCH_RECORDS);
                acked.push(Acked {
                    base_offset,
                    count: BATCH_RECORDS,
                    first: next,
                });
            }
            other => panic!("produce answered {other:?}"),
        }
        next += BATCH_RECORDS;
        id += 1;
    }
    acked
}

/// `next_offset` and `lost_records` of segment 0 from `describe -o json`.
fn segment_figures(broker: &Broker, topic: &str) -> (u64, u64) {
    let out = broker.cli(&["topic", "describe", topic, "-o", "json"]);
    assert!(out.status.success());
    let json = String::from_utf8(out.stdout).unwrap();
    let field = |name: &str| -> u64 {
        let at = json.find(&format!("\"{name}\":")).unwrap() + name.len() + 3;
        json[at..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap()
    };
    (field("next_offset"), field("lost_records"))
}

#[test]
fn acknowledged_records_survive_repeated_kill_minus_nine() {
    let mut rng = test_support::SeededRng::from_env();
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let topic = "crash/loop";
    let mut broker = Broker::start(dir.path(), port);
    assert!(broker.cli(&["topic", "create", topic]).status.success());
    let shard_port = {
        let out = broker.cli(&["topic", "describe", topic, "-o", "json"]);
        let json = String::from_utf8(out.stdout).unwrap();
        let at = json.find("\"shard\":").unwrap() + 8;
        let shard: u16 = json[at..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap();
        port + shard
    };

    let mut acked: Vec<Acked> = Vec::new();
    let mut next_number = 0u64;
    for round in 0..ROUNDS {
        let stop = Arc::new(AtomicBool::new(false));
        let producer = {
            let stop = stop.clone();
            let topic = topic.to_owned();
            let first = next_number;
            std::thread::spawn(move || produce_until_gone(shard_port, &topic, first, &stop))
        };
        std::thread::sleep(Duration::from_millis(50 + rng.below(ROUND_MS_MAX)));
        broker.kill9();
        stop.store(true, Ordering::Relaxed);
        let round_acked = producer.join().unwrap();
        println!("round {round}: {} batches acknowledged", round_acked.len());
        // Numbers of a batch that may or may not be stored are not reused.
        next_number += (round_acked.len() as u64 + 2) * BATCH_RECORDS;
        acked.extend(round_acked);
        broker = Broker::start(dir.path(), port);
    }

    // Every offset ever acknowledged is below the end, and holds its
    // record.
    let (next_offset, lost) = segment_figures(&broker, topic);
    println!("end: next offset {next_offset}, lost records {lost}");
    let readable = next_offset - lost;
    let read = sub(&broker, topic, readable, &[]);
    assert!(read.success, "{}", read.stderr);
    let mut by_offset = HashMap::with_capacity(read.records.len());
    let mut last = None;
    for (offset, v) in &read.records {
        assert!(
            last.is_none_or(|l| *offset > l),
            "offset {offset} read twice"
        );
        last = Some(*offset);
        by_offset.insert(*offset, v.clone());
    }
    let mut acked_offsets: Vec<u64> = Vec::new();
    for a in &acked {
        for i in 0..a.count {
            let offset = a.base_offset + i;
            let want = value(a.first + i);
            assert_eq!(
                by_offset.get(&offset),
                Some(&want),
                "acknowledged offset {offset} (record {}) is missing or holds another",
                a.first + i
            );
            acked_offsets.push(offset);
        }
    }
    acked_offsets.sort_unstable();
    let before = acked_offsets.len();
    acked_offsets.dedup();
    assert_eq!(
        before,
        acked_offsets.len(),
        "an offset was acknowledged twice"
    );
    assert!(
        !acked.is_empty(),
        "nothing was acknowledged in {ROUNDS} rounds"
    );
    broker.stop();
}
