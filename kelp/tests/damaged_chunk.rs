//! A chunk damaged in the filer (issue 16, "corruption is local"), with
//! real processes: records are flushed to chunks by a clean stop, bytes of
//! one chunk file are flipped, and the broker is started again. It must
//! start, every other topic must serve as before, a reader of the damaged
//! records must get a clear error naming the chunk and the offsets, and
//! `kelp sub --skip-corrupt` must read on past them, saying what it
//! skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};

use support::records::{batches, publish, read, sub, value, Batch, CHUNK_HEADER_BYTES};
use support::{port, Broker};

/// Records of the topic that gets damaged, in small batches.
const RECORDS: u64 = 2_000;
/// Records of the topic beside it.
const OTHER_RECORDS: u64 = 300;

/// The one chunk file of segment 0 of `topic` in the local filer.
fn chunk_file(data_dir: &Path, topic: &str) -> PathBuf {
    let dir = data_dir.join("filer/topics").join(topic).join("0");
    let chunks: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "chunk"))
        .collect();
    assert_eq!(chunks.len(), 1, "{chunks:?}");
    chunks[0].clone()
}

/// A broker with `damaged/t` (RECORDS) and `damaged/other`
/// (OTHER_RECORDS) flushed to chunks, then stopped: the chunk of
/// `damaged/t`, its bytes, and the broker's port.
fn flushed(data_dir: &Path) -> (PathBuf, Vec<u8>, u16) {
    let port = port();
    let broker = Broker::start(data_dir, port);
    for topic in ["damaged/t", "damaged/other"] {
        assert!(broker.cli(&["topic", "create", topic]).status.success());
    }
    publish(&broker, "damaged/t", 0, RECORDS);
    publish(&broker, "damaged/other", 0, OTHER_RECORDS);
    broker.stop();
    let path = chunk_file(data_dir, "damaged/t");
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes, port)
}

/// The chunk's batches, from its header's data length.
fn chunk_batches(bytes: &[u8]) -> Vec<Batch> {
    let data_bytes = u64::from_le_bytes(bytes[32..40].try_into().unwrap()) as usize;
    batches(bytes, CHUNK_HEADER_BYTES + data_bytes)
}

fn assert_other_topic_serves(broker: &Broker) {
    let records = read(broker, "damaged/other", &[], OTHER_RECORDS);
    assert_records(&records, (0..OTHER_RECORDS).collect());
}

/// `records` are exactly the numbered records at `offsets`, each at its
/// own offset (the first difference is what a failure prints).
fn assert_records(records: &[(u64, String)], offsets: Vec<u64>) {
    for (i, (offset, v)) in records.iter().enumerate() {
        assert_eq!(
            Some(offset),
            offsets.get(i),
            "record {i} of {}",
            records.len()
        );
        assert_eq!(v, &value(*offset), "offset {offset} holds another record");
    }
    assert_eq!(records.len(), offsets.len(), "records read");
}

#[test]
fn a_damaged_batch_in_a_chunk_is_named_and_can_be_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let (path, mut bytes, port) = flushed(&data_dir);
    let all = chunk_batches(&bytes);
    assert!(all.len() >= 20, "{} batches", all.len());
    let lost = all[all.len() / 2];
    // A value byte of its last record: the batch no longer verifies.
    bytes[lost.at + lost.len - 10] ^= 0x20;
    std::fs::write(&path, &bytes).unwrap();

    let broker = Broker::start(&data_dir, port);
    assert_other_topic_serves(&broker);

    // Without --skip-corrupt: the read stops with an error that names the
    // chunk, the offset and where reading can go on.
    let refused = sub(&broker, "damaged/t", RECORDS, &[]);
    assert!(!refused.success, "read past damage without saying so");
    let resume = lost.base + lost.count;
    for part in [
        "damaged stretch of chunk".to_owned(),
        format!("offset {}", lost.base),
        format!("next readable offset is {resume}"),
        "--skip-corrupt".to_owned(),
    ] {
        assert!(refused.stderr.contains(&part), "{}", refused.stderr);
    }
    // Everything before the damage was delivered first.
    assert_records(&refused.records, (0..lost.base).collect());

    // With it: every other record, and a line saying what was skipped.
    let kept = RECORDS - lost.count;
    let skipped = sub(&broker, "damaged/t", kept, &["--skip-corrupt"]);
    assert!(skipped.success, "{}", skipped.stderr);
    assert_records(
        &skipped.records,
        (0..RECORDS)
            .filter(|o| !(lost.base..resume).contains(o))
            .collect(),
    );
    assert!(
        skipped.stderr.contains(&format!(
            "skipped offsets {}..{resume} of segment 0",
            lost.base
        )),
        "{}",
        skipped.stderr
    );

    // A read that starts after the damage needs no skipping.
    let after = read(&broker, "damaged/t", &["--from", &resume.to_string()], 10);
    assert_eq!(after[0], (resume, value(resume)));
    broker.stop();
}

/// A damaged chunk header used to stop the whole broker ("chunk header:
/// checksum mismatch"); now only that chunk's reads are affected, and
/// since its batches are whole they are all still served.
#[test]
fn a_damaged_chunk_header_affects_only_that_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let (path, mut bytes, port) = flushed(&data_dir);
    bytes[26] ^= 0x01; // next offset: the header checksum fails
    std::fs::write(&path, &bytes).unwrap();

    let broker = Broker::start(&data_dir, port);
    assert_other_topic_serves(&broker);
    let records = read(&broker, "damaged/t", &[], RECORDS);
    assert_records(&records, (0..RECORDS).collect());
    // New records continue after the old ones.
    publish(&broker, "damaged/t", RECORDS, 10);
    let records = read(&broker, "damaged/t", &[], RECORDS + 10);
    assert_eq!(
        records[RECORDS as usize..]
            .iter()
            .map(|r| r.0)
            .collect::<Vec<_>>(),
        (RECORDS..RECORDS + 10).collect::<Vec<_>>()
    );
    broker.stop();
}
