//! `kelp chunk cat` on chunk files built here, and argument errors, through
//! the real binary; no broker needed.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

use wire::batch::{set_base_offset, RecordHeader};
use wire::chunk::build_chunk;
use wire::BatchBuilder;

fn kelp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kelp"))
        .args(args)
        .output()
        .unwrap()
}

/// A chunk of segment 3 from offset 100: two batches, with keys and values
/// that need escaping.
fn sample_chunk() -> Vec<u8> {
    let mut first = BatchBuilder::new();
    first.push(1_000, b"k1", b"plain", &[]).unwrap();
    first
        .push(
            1_001,
            b"",
            b"tab\there\nnewline",
            &[RecordHeader {
                name: b"h",
                value: b"v",
            }],
        )
        .unwrap();
    let mut first = first.finish(0, 0).to_vec();
    set_base_offset(&mut first, 100);
    let mut second = BatchBuilder::new();
    second.push(2_000, b"bin\xff", b"back\\slash", &[]).unwrap();
    let mut second = second.finish(0, 0).to_vec();
    set_base_offset(&mut second, 102);
    build_chunk(3, 100, &[&first, &second]).unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn prints_every_record_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "good.chunk", &sample_chunk());
    let out = kelp(&["chunk", "cat", &path]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "100\t1000\tk1\tplain\n\
         101\t1001\t\ttab\\there\\nnewline\n\
         102\t2000\tbin\\xff\tback\\\\slash\n"
    );
}

#[test]
fn corrupt_chunk_fails_and_names_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let good = sample_chunk();

    // A flipped byte inside the first batch's records: its checksum fails.
    let mut corrupt = good.clone();
    corrupt[64 + 60] ^= 0x40;
    let path = write(dir.path(), "corrupt.chunk", &corrupt);
    let out = kelp(&["chunk", "cat", &path]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a valid chunk file"), "{err}");
    assert!(err.contains("checksum"), "{err}");
    assert!(
        out.stdout.is_empty(),
        "nothing printed from a corrupt chunk"
    );

    // Cut short.
    let path = write(dir.path(), "short.chunk", &good[..good.len() - 10]);
    let out = kelp(&["chunk", "cat", &path]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("truncated"), "{err}");

    // Not a chunk at all.
    let path = write(dir.path(), "text.chunk", b"hello, this is not a chunk file at all, just text padding it out to more than sixty-four bytes");
    let out = kelp(&["chunk", "cat", &path]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("magic"), "{err}");

    // Missing.
    let missing = dir.path().join("missing.chunk");
    let out = kelp(&["chunk", "cat", missing.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read chunk file"), "{err}");
}

#[test]
fn bad_arguments_and_unreachable_broker() {
    let out = kelp(&["sub", "a/b", "--from", "yesterday"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("RFC 3339"));

    // A port nobody listens on.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let out = kelp(&["topic", "list", "--broker", &addr]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot reach broker at {addr}")),
        "{err}"
    );
}
