//! A buffer damaged on disk while its broker was down (issue 16, "recovery
//! that never hides loss"), with real processes: records are acknowledged,
//! the broker is killed with SIGKILL before it flushes, bytes of its buffer
//! file are flipped, and it is started again. It must start, keep a copy
//! of the damaged bytes, say exactly which offsets are lost (its log and
//! `kelp topic describe`), serve every other acknowledged record at the
//! offset it was acknowledged at, and never give a lost offset to a new
//! record, across a further restart too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};

use support::records::{batches, publish, read, value, Batch};
use support::{port, Broker};

/// Records published before the crash, in small batches.
const RECORDS: u64 = 2_000;
/// Keeps the records in the buffer (not flushed) until the kill.
const FLUSH_AGE: &[&str] = &["--flush-age-ms", "600000"];

/// The lost records `kelp topic describe -o json` reports for segment 0.
fn lost_records(broker: &Broker, topic: &str) -> u64 {
    let out = broker.cli(&["topic", "describe", topic, "-o", "json"]);
    assert!(out.status.success());
    let json = String::from_utf8(out.stdout).unwrap();
    let at = json
        .find("\"lost_records\":")
        .expect("describe has lost_records")
        + 15;
    let digits: String = json[at..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

/// The one buffer file of segment 0.
fn buffer_file(data_dir: &Path, topic: &str) -> PathBuf {
    let dir = data_dir.join("buffers").join(topic).join("0");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".buf") && !name.starts_with("spare-")
        })
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// Publish, kill, flip one byte in the middle of batch `victim(batches)`,
/// restart with a log. Returns the broker, its log, the damaged batch and
/// the damaged file's bytes.
fn crash_and_damage(
    data_dir: &Path,
    topic: &str,
    victim: impl Fn(&[Batch]) -> usize,
) -> (Broker, PathBuf, Batch, Vec<u8>) {
    let port = port();
    let broker = Broker::start_with(data_dir, port, FLUSH_AGE);
    assert!(broker.cli(&["topic", "create", topic]).status.success());
    publish(&broker, topic, 0, RECORDS);
    broker.kill9();

    let path = buffer_file(data_dir, topic);
    let mut bytes = std::fs::read(&path).unwrap();
    let all = batches(&bytes, bytes.len());
    assert!(all.len() >= 20, "{} batches", all.len());
    assert_eq!(all.iter().map(|b| b.count).sum::<u64>(), RECORDS);
    let batch = all[victim(&all)];
    // A byte of a record's value: the batch's checksum no longer holds,
    // while its structure still does.
    let flip = batch.at + batch.len - 10;
    bytes[flip] ^= 0x20;
    std::fs::write(&path, &bytes).unwrap();

    let log = data_dir.with_extension("log");
    let broker = Broker::start_logged(data_dir, port, FLUSH_AGE, &[], &log);
    (broker, log, batch, bytes)
}

/// What every damaged-buffer restart must show: the broker started, kept
/// the damaged file, logged the lost offsets and reports them.
fn assert_reported(broker: &Broker, log: &Path, topic: &str, lost: Batch, damaged: &[u8]) {
    let said = std::fs::read_to_string(log).unwrap();
    let range = format!("offsets {}..{}", lost.base, lost.base + lost.count);
    assert!(
        said.contains(&range) && said.contains("are lost"),
        "the log does not name {range}:\n{said}"
    );
    assert_eq!(lost_records(broker, topic), lost.count);
    let kept = broker
        .data_dir
        .join("quarantine")
        .join(topic)
        .join("0")
        .join(format!(
            "{:020}.buf.{}-{}",
            0,
            lost.base,
            lost.base + lost.count
        ));
    assert_eq!(
        std::fs::read(&kept).expect("the damaged bytes are kept"),
        &damaged[lost.at..lost.at + lost.len],
        "the quarantined copy is the damaged batch as it was found"
    );
}

/// Every record but `lost`'s, at the offset it was acknowledged at.
fn assert_all_but(records: &[(u64, String)], lost: Batch) {
    let expected: Vec<u64> = (0..RECORDS)
        .filter(|o| !(lost.base..lost.base + lost.count).contains(o))
        .collect();
    let offsets: Vec<u64> = records.iter().map(|r| r.0).take(expected.len()).collect();
    assert_eq!(offsets, expected);
    for (offset, v) in records.iter().take(expected.len()) {
        assert_eq!(v, &value(*offset), "offset {offset} holds another record");
    }
}

#[test]
fn a_damaged_batch_mid_buffer_loses_only_its_own_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let topic = "crash/mid";
    let (broker, log, lost, damaged) = crash_and_damage(&data_dir, topic, |b| b.len() / 2);
    assert_reported(&broker, &log, topic, lost, &damaged);
    let kept = RECORDS - lost.count;
    assert_all_but(&read(&broker, topic, &[], kept), lost);

    // New records continue after the end; none takes a lost offset.
    publish(&broker, topic, RECORDS, 100);
    let records = read(&broker, topic, &[], kept + 100);
    let new: Vec<u64> = records[kept as usize..].iter().map(|r| r.0).collect();
    assert_eq!(new, (RECORDS..RECORDS + 100).collect::<Vec<_>>());

    // A clean restart: the loss is still known, nothing else changed.
    let port = broker.port;
    broker.stop();
    let broker = Broker::start_with(&data_dir, port, FLUSH_AGE);
    assert_eq!(lost_records(&broker, topic), lost.count);
    let again = read(&broker, topic, &[], kept + 100);
    assert_eq!(again, records);
    broker.stop();
}

/// The last batch, with nothing after it to say where it ended: its own
/// header's count is fenced off, so an offset that may have been
/// acknowledged is never reused.
#[test]
fn a_damaged_last_batch_is_fenced_off() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let topic = "crash/last";
    let (broker, log, lost, damaged) = crash_and_damage(&data_dir, topic, |b| b.len() - 1);
    assert_eq!(lost.base + lost.count, RECORDS);
    assert_reported(&broker, &log, topic, lost, &damaged);
    let kept = RECORDS - lost.count;
    assert_all_but(&read(&broker, topic, &[], kept), lost);

    publish(&broker, topic, RECORDS, 50);
    let records = read(&broker, topic, &[], kept + 50);
    assert!(
        records[kept as usize..].iter().all(|r| r.0 >= RECORDS),
        "a new record took a lost offset"
    );
    broker.stop();
}

/// A damaged header (the file's magic) used to stop the broker ("no chunk
/// magic"); the batches are whole, so every record is kept.
#[test]
fn a_damaged_buffer_header_keeps_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let topic = "crash/header";
    let port = port();
    let broker = Broker::start_with(&data_dir, port, FLUSH_AGE);
    assert!(broker.cli(&["topic", "create", topic]).status.success());
    publish(&broker, topic, 0, RECORDS);
    broker.kill9();
    let path = buffer_file(&data_dir, topic);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[2] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();

    let broker = Broker::start_with(&data_dir, port, FLUSH_AGE);
    assert_eq!(lost_records(&broker, topic), 0);
    let records = read(&broker, topic, &[], RECORDS);
    assert_eq!(
        records.iter().map(|r| r.0).collect::<Vec<_>>(),
        (0..RECORDS).collect::<Vec<_>>()
    );
    assert!(records.iter().all(|(o, v)| v == &value(*o)));
    let kept = data_dir
        .join("quarantine")
        .join(topic)
        .join("0")
        .join(format!("{:020}.buf.header", 0));
    assert_eq!(std::fs::read(kept).unwrap(), &bytes[..64]);
    broker.stop();
}
