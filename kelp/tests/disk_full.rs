//! A broker on a disk that fills (issue 16, "disk full and partial
//! files"), with real processes on a real small filesystem: a 48 MiB
//! tmpfs mounted for the test. Producers get a clear storage error and
//! nothing acknowledged is lost; the broker is then killed with SIGKILL
//! while the disk is still full, and it must start again on that full
//! disk (no unreadable partial buffer file) and serve every acknowledged
//! record. With `--disk-full-wait-ms`, producers wait for room instead,
//! and carry on once there is some. Mounting needs root, which CI has;
//! without it the test fails and says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashSet;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::{port, Broker};

/// Size of the filesystem that fills.
const DISK_BYTES: &str = "48m";
/// Records per `kelp pub` run: each run is acknowledged whole or fails.
const RECORDS_PER_RUN: usize = 1_000;
/// Value bytes of each record.
const VALUE_BYTES: usize = 1_000;
/// Runs before the test gives up on filling the disk (about 3x its size).
const RUNS_MAX: usize = 150;

/// A tmpfs mounted for the test, unmounted when dropped.
struct SmallDisk {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount() -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk");
        std::fs::create_dir(&path).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={DISK_BYTES}"), "tmpfs"])
            .arg(&path)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test mounts a {DISK_BYTES} tmpfs and needs root for it (CI runs as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk { path, _dir: dir }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

/// Publish keys `first..first + RECORDS_PER_RUN`; whether all were
/// acknowledged, and what the command said.
fn publish_run(broker: &Broker, topic: &str, first: usize) -> (bool, String) {
    let value = "v".repeat(VALUE_BYTES);
    let mut lines = String::with_capacity(RECORDS_PER_RUN * (VALUE_BYTES + 16));
    for key in first..first + RECORDS_PER_RUN {
        lines.push_str(&format!("k{key}\t{value}\n"));
    }
    // A broker that refuses may end `pub` before stdin is all written.
    let out = broker.cli_with_stdin(&["pub", topic], lines.as_bytes());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let acked =
        out.status.success() && said.contains(&format!("acknowledged {RECORDS_PER_RUN} records"));
    (acked, said)
}

/// Keys `k0` to `k{acknowledged - 1}` are all read back from `topic`.
fn assert_read_back(broker: &Broker, topic: &str, acknowledged: usize) {
    let keys: HashSet<String> = broker
        .sub_earliest(topic, acknowledged, "%k\\n")
        .lines()
        .map(str::to_owned)
        .collect();
    for key in 0..acknowledged {
        assert!(
            keys.contains(&format!("k{key}")),
            "acknowledged record k{key} is missing"
        );
    }
}

/// Every file under the broker's buffers directory with its size.
fn buffer_files(data_dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut dirs = vec![data_dir.join("buffers")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                dirs.push(entry.path());
            } else {
                out.push((entry.path(), meta.len()));
            }
        }
    }
    out
}

#[test]
fn a_full_disk_loses_nothing_acknowledged_and_the_broker_restarts_on_it() {
    let disk = SmallDisk::mount();
    let data_dir = disk.path.join("data");
    let port = port();
    let broker = Broker::start(&data_dir, port);
    let topic = "full/disk";
    assert!(broker.cli(&["topic", "create", topic]).status.success());

    let mut acked_runs = 0;
    let mut refusal = None;
    for run in 0..RUNS_MAX {
        let (acked, said) = publish_run(&broker, topic, run * RECORDS_PER_RUN);
        if acked {
            acked_runs += 1;
        } else {
            refusal = Some(said);
            break;
        }
    }
    let refusal = refusal.expect("the disk never filled");
    assert!(acked_runs > 0, "nothing was acknowledged: {refusal}");
    // A clear storage error, naming the cause.
    assert!(
        refusal.contains("No space left on device") && refusal.contains("(Storage)"),
        "{refusal}"
    );
    // A failed attempt leaves no file behind (one spare per attempt used
    // to pile up): at most the active buffer, the sealed ones and the
    // spares the segment keeps.
    let files = buffer_files(&data_dir);
    assert!(files.len() <= 16, "{files:?}");

    // Killed while the disk is full; it must start on that disk.
    broker.kill9();
    let broker = Broker::start(&data_dir, port);
    for (path, bytes) in buffer_files(&data_dir) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            bytes > 0 || name.starts_with("spare-"),
            "an empty buffer file survived recovery: {}",
            path.display()
        );
    }
    assert_read_back(&broker, topic, acked_runs * RECORDS_PER_RUN);
    broker.stop();
}

/// Fill what is left of the filesystem at `path` with one file; its path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = vec![0xa5u8; 64 << 10];
    loop {
        match file.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    path
}

#[test]
fn with_a_disk_full_wait_producers_wait_for_room_and_carry_on() {
    let disk = SmallDisk::mount();
    let data_dir = disk.path.join("data");
    let log = disk._dir.path().join("broker.log");
    let port = port();
    // One-MiB buffers that never grow: the run below needs new ones.
    let broker = Broker::start_logged(
        &data_dir,
        port,
        &[
            "--disk-full-wait-ms",
            "120000",
            "--buffer-bytes",
            "1048576",
            "--buffer-bytes-max",
            "1048576",
        ],
        &[],
        &log,
    );
    let topic = "full/wait";
    assert!(broker.cli(&["topic", "create", topic]).status.success());
    let (acked, said) = publish_run(&broker, topic, 0);
    assert!(acked, "{said}");

    let filler = fill(&disk.path);
    // Runs of RECORDS_PER_RUN records of 1 KB: more than the buffers the
    // segment holds ready, so it needs a new one the disk has no room for.
    let runs = 4;
    std::thread::scope(|scope| {
        let publishing = scope.spawn(|| {
            (1..=runs)
                .map(|run| publish_run(&broker, topic, run * RECORDS_PER_RUN))
                .collect::<Vec<_>>()
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let waiting = loop {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            if said.contains("--disk-full-wait-ms") {
                break true;
            }
            if publishing.is_finished() || std::time::Instant::now() > deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(
            waiting,
            "the producer never waited for room; broker log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        // Still waiting a while later: not answered with an error.
        std::thread::sleep(Duration::from_secs(2));
        assert!(!publishing.is_finished(), "the waiting producer gave up");
        std::fs::remove_file(&filler).unwrap();
        for (acked, said) in publishing.join().unwrap() {
            assert!(
                acked,
                "a run was not acknowledged once there was room: {said}"
            );
        }
    });
    assert_read_back(&broker, topic, (runs + 1) * RECORDS_PER_RUN);
    broker.stop();
}
