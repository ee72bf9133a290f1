//! Numbered records for the damage tests: publish them in small batches,
//! read them back with their offsets, and find the batches in a buffer or
//! chunk file to damage one.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{kelp_bin, Broker};

/// Batch bytes of a publish: about 35 records a batch.
const BATCH_BYTES: &str = "4096";
/// Bytes of the chunk header that leads a buffer or chunk file.
pub const CHUNK_HEADER_BYTES: usize = 64;
/// How long a `kelp sub` may take to read what it is asked for.
const SUB_TIMEOUT: Duration = Duration::from_secs(60);

/// Record `i`'s value.
pub fn value(i: u64) -> String {
    format!("v{i:06}-{}", "x".repeat(80))
}

/// Publish records `from..from + n` (key `k<i>`, value `value(i)`).
pub fn publish(broker: &Broker, topic: &str, from: u64, n: u64) {
    publish_with(broker, topic, from, n, &[]);
}

/// [`publish`] with more `kelp pub` flags, e.g. `--ack durable`.
pub fn publish_with(broker: &Broker, topic: &str, from: u64, n: u64, extra: &[&str]) {
    let mut lines = String::new();
    for i in from..from + n {
        lines.push_str(&format!("k{i}\t{}\n", value(i)));
    }
    let mut args = vec!["pub", topic, "--batch-bytes", BATCH_BYTES];
    args.extend_from_slice(extra);
    let out = broker.cli_with_stdin(&args, lines.as_bytes());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains(&format!("acknowledged {n} records")),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What one `kelp sub` printed.
#[derive(Debug)]
pub struct Read {
    pub success: bool,
    /// (offset, value) per record.
    pub records: Vec<(u64, String)>,
    pub stderr: String,
}

/// `kelp sub TOPIC --count COUNT EXTRA...`, from the earliest record
/// unless `extra` says `--from`, bounded in time (a read that stalls fails
/// the test, saying how far it got).
pub fn sub(broker: &Broker, topic: &str, count: u64, extra: &[&str]) -> Read {
    let from: &[&str] = if extra.contains(&"--from") {
        &[]
    } else {
        &["--from", "earliest"]
    };
    let mut child = Command::new(kelp_bin())
        .args(["sub", topic, "--format", "%o %s\\n"])
        .args(from)
        .args(["--count", &count.to_string()])
        .args(extra)
        .args(["--broker", &broker.broker_arg()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its output is read as it comes (a full pipe would stall it).
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
        text
    });
    let deadline = Instant::now() + SUB_TIMEOUT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            let text = reader.join().unwrap();
            panic!(
                "kelp sub did not read {count} records in {SUB_TIMEOUT:?}; it read {} lines",
                text.lines().count()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let records = reader
        .join()
        .unwrap()
        .lines()
        .map(|l| {
            let (offset, value) = l.split_once(' ').unwrap();
            (offset.parse().unwrap(), value.to_owned())
        })
        .collect();
    Read {
        success: out.status.success(),
        records,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The first `count` records from the start, which must all be there.
pub fn read(broker: &Broker, topic: &str, extra: &[&str], count: u64) -> Vec<(u64, String)> {
    let read = sub(broker, topic, count, extra);
    assert!(read.success, "{}", read.stderr);
    read.records
}

/// A batch in a buffer or chunk file: where it starts, its length, its
/// offsets.
#[derive(Debug, Clone, Copy)]
pub struct Batch {
    pub at: usize,
    pub len: usize,
    pub base: u64,
    pub count: u64,
}

/// The batches of a buffer or chunk file, read from their headers
/// (docs/wire-format.md: base offset at 0, length at 8, count at 20), up
/// to the first zero length or `data_end`.
pub fn batches(bytes: &[u8], data_end: usize) -> Vec<Batch> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut out = Vec::new();
    let mut at = CHUNK_HEADER_BYTES;
    while at + 56 <= data_end && u32_at(at + 8) != 0 {
        let batch = Batch {
            at,
            len: u32_at(at + 8) as usize,
            base: u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()),
            count: u64::from(u32_at(at + 20)),
        };
        at += batch.len;
        out.push(batch);
    }
    out
}
