//! A broker started in this process, spoken to over real loopback TCP with
//! nothing but the wire crate: create, produce with every ack mode, fetch
//! back, bad input, restart.
#![allow(clippy::unwrap_used)]

mod support;

use kelp_engine::{Broker, BrokerConfig};
use support::{config, port};
use wire::chunk::BatchWalk;
use wire::frame::FrameHeader;
use wire::{AckMode, AdminRequest, BatchBuilder, DataRequest, ErrorCode, FetchFrom, Response};

use test_support::{decode, error_code, TestConn as Conn};

/// A broker with one shard on fresh ports; returns it and its port.
fn one_shard_broker(dir: &std::path::Path) -> (Broker, u16) {
    let port = port();
    let broker = Broker::start(BrokerConfig {
        shards: 1,
        ..config(dir, port)
    })
    .unwrap();
    (broker, port)
}

/// [`one_shard_broker`] with a topic of `segments` segments created over a
/// connection: the broker, its port and the connection.
fn one_shard_topic(dir: &std::path::Path, topic: &str, segments: u32) -> (Broker, u16, Conn) {
    let (broker, port) = one_shard_broker(dir);
    let mut c = Conn::open(port);
    c.create_topic(topic, segments);
    (broker, port, c)
}

/// `frame` acknowledges `records` records.
fn assert_produced(frame: &(FrameHeader, Vec<u8>), records: u32) {
    assert!(
        matches!(decode(frame), Response::Produced { record_count, .. } if record_count == records),
        "{:?}",
        decode(frame)
    );
}

fn batch(keys: &[&str], value: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for k in keys {
        b.push(1_700_000_000_000, k.as_bytes(), value.as_bytes(), &[])
            .unwrap();
    }
    b.finish(0, 0).to_vec()
}

/// `batches` are whole batches from offset 0 to `next_offset`, end to end
/// (across the chunks an answer went on into).
fn assert_end_to_end(batches: &[u8], next_offset: u64) {
    let mut expect = 0;
    for item in BatchWalk::new(batches) {
        let (_, b) = item.unwrap();
        assert_eq!(b.base_offset(), expect, "batches end to end across chunks");
        expect = b.next_offset();
    }
    assert_eq!(expect, next_offset);
}

fn fetch_all(conn: &mut Conn, topic: &str, segment: u32) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut from = Some(FetchFrom::Earliest);
    while let Some(at) = from {
        let frame = conn.fetch(topic, segment, at, 1 << 16, 0);
        let (records, next) = test_support::fetched_records(&frame);
        out.extend(records.into_iter().map(|(offset, key, _)| (offset, key)));
        from = next;
    }
    out
}

#[test]
fn produce_fetch_restart() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start(config(dir.path(), port)).unwrap();
    let mut c = Conn::open(port);
    let created = c.create_topic("t/one", 1);
    let Response::Topic(info) = decode(&created) else {
        panic!("{:?}", decode(&created))
    };
    assert_eq!(info.segments.len(), 1);
    let owner = info.segments[0].shard;
    let mut c = Conn::open(port + owner);
    for ack in [AckMode::Leader, AckMode::All, AckMode::Durable] {
        let b = batch(&["a", "b", "c"], "v");
        let r = c.produce("t/one", ack, &b);
        assert_produced(&r, 3);
    }
    let records = fetch_all(&mut c, "t/one", 0);
    assert_eq!(records.len(), 9);
    assert_eq!(
        records.iter().map(|r| r.0).collect::<Vec<_>>(),
        (0..9).collect::<Vec<_>>()
    );

    // Bad input on a live connection: corrupt batch, wrong segment, unknown topic.
    let mut bad = batch(&["x"], "v");
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let r = c.produce("t/one", AckMode::Leader, &bad);
    assert_eq!(error_code(&r), Some(ErrorCode::Checksum));
    let b = batch(&["x"], "v");
    let r = c.produce("t/nope", AckMode::Leader, &b);
    assert_eq!(error_code(&r), Some(ErrorCode::TopicNotFound));
    let r = c.create_topic("../etc", 1);
    assert_eq!(error_code(&r), Some(ErrorCode::InvalidTopicName));
    // A frame with a bad magic closes only this connection.
    let mut other = Conn::open(port + owner);
    other.send_raw(b"GET / HTTP/1.1\r\n\r\n");
    let (h, p) = other.read_frame().unwrap();
    assert!(matches!(
        Response::decode(h.frame_type, &p).unwrap(),
        Response::Error { .. }
    ));
    assert!(
        other.read_frame().is_none(),
        "connection closed after bad magic"
    );
    assert_eq!(fetch_all(&mut c, "t/one", 0).len(), 9, "nothing lost");

    // Unflushed (leader-acked) records survive a restart.
    let b = batch(&["d"], "v");
    c.produce("t/one", AckMode::Leader, &b);
    drop(c);
    broker.stop().unwrap();
    let broker = Broker::start(config(dir.path(), port)).unwrap();
    let mut c = Conn::open(port + owner);
    let records = fetch_all(&mut c, "t/one", 0);
    assert_eq!(records.len(), 10);
    let b = batch(&["e"], "v");
    let r = c.produce("t/one", AckMode::Leader, &b);
    assert!(matches!(
        decode(&r),
        Response::Produced {
            base_offset: 10,
            ..
        }
    ));
    drop(c);
    broker.stop().unwrap();
}

fn batch_at(keys: &[String], timestamp_ms: i64, value_bytes: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    let value = vec![b'v'; value_bytes];
    for k in keys {
        b.push(timestamp_ms, k.as_bytes(), &value, &[]).unwrap();
    }
    b.finish(0, 0).to_vec()
}

/// A segment that fills its buffers gets bigger ones, each twice the last,
/// up to `buffer_bytes_max`: its chunks, by base offset, grow from
/// `buffer_bytes` to the ceiling and never past it. Every record is still
/// read back once, in order.
#[test]
fn a_busy_segments_buffers_grow_up_to_the_ceiling() {
    const FLOOR: u64 = 64 << 10;
    const CEILING: u64 = 256 << 10;
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let cfg = BrokerConfig {
        buffer_bytes: FLOOR,
        buffer_bytes_max: CEILING,
        // Seals by size only: an age seal on a slow host cuts a buffer short.
        flush_age_ms: 600_000,
        shards: 1,
        ..config(dir.path(), port)
    };
    let broker = Broker::start(cfg).unwrap();
    let mut c = Conn::open(port);
    c.create_topic("t/grow", 1);
    let keys: Vec<String> = (0..8).map(|k| format!("key-{k}")).collect();
    // 240 batches of 8 records of 1,000 B: about 2 MB, 8 KB a batch.
    for i in 0..240i64 {
        let b = batch_at(&keys, 1_000_000 + i, 1000);
        let r = c.produce("t/grow", AckMode::Leader, &b);
        assert!(matches!(decode(&r), Response::Produced { .. }));
    }
    let b = batch_at(&keys, 2_000_000, 1000);
    let r = c.produce("t/grow", AckMode::Durable, &b);
    assert!(matches!(decode(&r), Response::Produced { .. }));

    let chunk_dir = dir.path().join("filer/topics/t/grow/0");
    let mut chunks: Vec<(u64, u64)> = std::fs::read_dir(&chunk_dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let base = e
                .file_name()
                .to_str()?
                .strip_suffix(".chunk")?
                .parse::<u64>()
                .ok()?;
            Some((base, e.metadata().unwrap().len()))
        })
        .collect();
    chunks.sort_unstable();
    let sizes: Vec<u64> = chunks.iter().map(|c| c.1).collect();
    // A chunk is its data plus a 64-byte header and an index.
    let overhead = 8 << 10;
    assert!(
        sizes[0] <= FLOOR + overhead,
        "the first buffer is the floor: {sizes:?}"
    );
    assert!(
        sizes.iter().all(|s| *s <= CEILING + overhead),
        "never past the ceiling: {sizes:?}"
    );
    let full: Vec<u64> = sizes[..sizes.len() - 1].to_vec();
    // Spares are made ahead at the size of their day: after each of the
    // two doublings (floor to ceiling), up to the two spares made before
    // it are used as they were made, smaller than the buffer before them.
    let drops = full.windows(2).filter(|w| w[1] + overhead < w[0]).count();
    assert!(
        drops <= 2 * 2,
        "a smaller buffer after a bigger one is only a spare made before a doubling: {sizes:?}"
    );
    assert!(
        full.iter().filter(|s| **s > CEILING / 2 + overhead).count() >= 4,
        "most of 2 MB went into buffers at the ceiling: {sizes:?}"
    );
    let all = fetch_all(&mut c, "t/grow", 0);
    assert_eq!(all.len(), 241 * 8);
    assert!(all.iter().enumerate().all(|(i, r)| r.0 == i as u64));
    drop(c);
    broker.stop().unwrap();
}

#[test]
fn reads_span_chunks_buffers_and_seek_by_offset_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let cfg = BrokerConfig {
        buffer_bytes: 64 << 10,
        shards: 1,
        ..config(dir.path(), port)
    };
    let broker = Broker::start(cfg).unwrap();
    let mut c = Conn::open(port);
    c.create_topic("t/seek", 1);
    // 300 batches of 10 records, 100-byte values, one timestamp per batch.
    for i in 0..300i64 {
        let keys: Vec<String> = (0..10).map(|k| format!("key-{k}")).collect();
        let b = batch_at(&keys, 1_000_000 + i * 10, 100);
        let ack = if i == 149 {
            AckMode::Durable
        } else {
            AckMode::Leader
        };
        let r = c.call(DataRequest::Produce {
            topic: "t/seek",
            segment: 0,
            ack,
            batch: &b,
        });
        assert!(matches!(decode(&r), Response::Produced { .. }));
    }
    let chunks = std::fs::read_dir(dir.path().join("filer/topics/t/seek/0"))
        .unwrap()
        .count();
    assert!(
        chunks >= 2,
        "small buffers sealed into several chunks, got {chunks}"
    );

    let all = fetch_all(&mut c, "t/seek", 0);
    assert_eq!(all.len(), 3000);
    assert!(
        all.iter().enumerate().all(|(i, r)| r.0 == i as u64),
        "every offset once, in order"
    );

    // One answer goes on from one chunk into the next, up to max_bytes,
    // under a frame checksum (read_frame verifies it) folded across them.
    let first_chunk_end = {
        let mut names: Vec<u64> = std::fs::read_dir(dir.path().join("filer/topics/t/seek/0"))
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name();
                name.to_str()?.strip_suffix(".chunk")?.parse::<u64>().ok()
            })
            .collect();
        names.sort_unstable();
        *names
            .get(1)
            .expect("a second chunk, named by its base offset")
    };
    let r = c.fetch("t/seek", 0, FetchFrom::Earliest, 4 << 20, 0);
    let Response::Fetched(f) = decode(&r) else {
        panic!("{:?}", decode(&r))
    };
    assert!(
        f.next_offset > first_chunk_end,
        "an answer of up to 4 MiB ends at {}, inside the first chunk (which ends at {first_chunk_end})",
        f.next_offset
    );
    assert_end_to_end(f.batches, f.next_offset);

    // From an offset in the middle of a chunk's batch.
    let r = c.fetch("t/seek", 0, FetchFrom::Offset(1234), 1, 0);
    let Response::Fetched(f) = decode(&r) else {
        panic!()
    };
    assert_eq!(f.start_offset, 1234);
    let first = BatchWalk::new(f.batches).next().unwrap().unwrap().1;
    assert!(first.base_offset() <= 1234 && 1234 < first.next_offset());

    // By timestamp: batch i has timestamp 1_000_000 + 10 i, so 1_001_005
    // falls between batches 100 and 101: the answer is offset 1010.
    let r = c.fetch("t/seek", 0, FetchFrom::Timestamp(1_001_005), 1 << 16, 0);
    let Response::Fetched(f) = decode(&r) else {
        panic!()
    };
    assert_eq!(f.start_offset, 1010);

    // A timestamp after everything resolves to the end.
    let r = c.fetch("t/seek", 0, FetchFrom::Timestamp(9_000_000), 1 << 16, 0);
    let Response::Fetched(f) = decode(&r) else {
        panic!()
    };
    assert_eq!((f.start_offset, f.batches.len()), (3000, 0));

    // Latest long-polls until a record arrives from another connection.
    let waiter = std::thread::spawn(move || {
        let mut w = Conn::open(port);
        let r = w.fetch("t/seek", 0, FetchFrom::Latest, 1 << 16, 10_000);
        let Response::Fetched(f) = decode(&r) else {
            panic!()
        };
        (f.start_offset, f.next_offset)
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    let b = batch_at(&["late".to_string()], 2_000_000, 10);
    c.produce("t/seek", AckMode::Leader, &b);
    assert_eq!(waiter.join().unwrap(), (3000, 3001));

    // Past the end is an error for this request only.
    let r = c.fetch("t/seek", 0, FetchFrom::Offset(99_999), 1, 0);
    assert_eq!(error_code(&r), Some(ErrorCode::OffsetOutOfRange));
    drop(c);
    broker.stop().unwrap();
}

/// On a remote filer (a real S3-compatible server) an answer read from a
/// chunk goes on into the chunks after it, as one from local chunk files
/// does: a reader of the small chunks durable acks make gets many per
/// round trip. The records are read by a broker with an empty data dir,
/// so every answer comes from the bucket.
#[test]
fn an_answer_from_s3_goes_on_across_small_chunks() {
    use test_support::S3Server;
    const BATCHES: u64 = 40;
    const RECORDS_PER_BATCH: u64 = 5;
    let server = S3Server::start();
    let on_s3 = |dir: &std::path::Path, port: u16| BrokerConfig {
        shards: 1,
        filer: Some(filer::FilerUrl::parse(&server.url("spans")).unwrap()),
        s3: server.settings(),
        ..config(dir, port)
    };
    let first = tempfile::tempdir().unwrap();
    let first_port = port();
    let broker = Broker::start(on_s3(first.path(), first_port)).unwrap();
    let mut c = Conn::open(first_port);
    c.create_topic("t/small", 1);
    let keys: Vec<String> = (0..RECORDS_PER_BATCH).map(|k| format!("k{k}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    for i in 0..BATCHES {
        let r = c.produce("t/small", AckMode::Durable, &batch(&keys, &format!("v{i}")));
        assert_produced(&r, RECORDS_PER_BATCH as u32);
    }
    drop(c);
    broker.stop().unwrap();

    let mut bases: Vec<u64> = server
        .keys("spans/topics/t/small/0/")
        .iter()
        .filter_map(|k| k.rsplit('/').next()?.strip_suffix(".chunk")?.parse().ok())
        .collect();
    bases.sort_unstable();
    assert!(
        bases.len() >= 3,
        "durable acks made small chunks: {bases:?}"
    );

    let second = tempfile::tempdir().unwrap();
    let second_port = port();
    let broker = Broker::start(on_s3(second.path(), second_port)).unwrap();
    let mut c = Conn::open(second_port);
    let r = c.fetch("t/small", 0, FetchFrom::Earliest, 4 << 20, 0);
    let Response::Fetched(f) = decode(&r) else {
        panic!("{:?}", decode(&r))
    };
    assert!(
        f.next_offset > bases[2],
        "an answer of up to 4 MiB ends at {}, within the first two chunks ({bases:?})",
        f.next_offset
    );
    assert!(bases.contains(&f.next_offset) || f.next_offset == BATCHES * RECORDS_PER_BATCH);
    assert_end_to_end(f.batches, f.next_offset);
    // A small answer stops at its first chunk's end, or within it.
    let r = c.fetch("t/small", 0, FetchFrom::Earliest, 1, 0);
    let Response::Fetched(f) = decode(&r) else {
        panic!("{:?}", decode(&r))
    };
    assert!(
        f.next_offset <= bases[1],
        "{} past {}",
        f.next_offset,
        bases[1]
    );

    let all = fetch_all(&mut c, "t/small", 0);
    assert_eq!(all.len() as u64, BATCHES * RECORDS_PER_BATCH);
    assert!(all.iter().enumerate().all(|(i, r)| r.0 == i as u64));
    drop(c);
    broker.stop().unwrap();
}

#[test]
fn keys_outside_the_segment_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, _, mut c) = one_shard_topic(dir.path(), "t/range", 4);
    // Find a key that does not hash into segment 0 ([0, 2^30)).
    let key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| wire::key_hash(k.as_bytes()) >= 1 << 30)
        .unwrap();
    let b = batch_at(&[key], 1, 1);
    let r = c.produce("t/range", AckMode::Leader, &b);
    assert_eq!(error_code(&r), Some(ErrorCode::KeyOutOfRange));
    let r = c.call(AdminRequest::DescribeTopic {
        topic: "t/range".into(),
    });
    let Response::Topic(t) = decode(&r) else {
        panic!()
    };
    assert!(
        t.segments.iter().all(|s| s.next_offset == 0),
        "nothing appended"
    );
    drop(c);
    broker.stop().unwrap();
}

/// Every kind of bad frame gets a clear error on its own connection; the
/// ones that break framing close that connection; no other client notices
/// and nothing acknowledged is lost.
#[test]
fn bad_frames_get_clear_errors_and_hurt_no_one() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, port, mut good) = one_shard_topic(dir.path(), "t/bad", 1);
    let b = batch(&["k"], "acked");
    let r = good.produce("t/bad", AckMode::Leader, &b);
    assert!(matches!(decode(&r), Response::Produced { .. }));

    let error_of = |frame: &(FrameHeader, Vec<u8>)| match decode(frame) {
        Response::Error { code, message } => (code, message),
        other => panic!("expected an error, got {other:?}"),
    };
    let valid = {
        let mut out = Vec::new();
        AdminRequest::ListTopics.encode(9, &mut out);
        out
    };

    // Framing errors: answered, then the connection is closed.
    let mut wrong_version = valid.clone();
    wrong_version[2] = 7;
    let mut oversized = valid.clone();
    oversized[4..8].copy_from_slice(&(wire::limits::FRAME_PAYLOAD_BYTES_MAX + 1).to_le_bytes());
    let mut unknown_type = valid.clone();
    unknown_type[3] = 0x7E;
    for (bytes, code, words) in [
        (wrong_version, ErrorCode::UnsupportedVersion, "version"),
        (oversized, ErrorCode::TooLarge, "too large"),
        (unknown_type, ErrorCode::Malformed, "frame type"),
    ] {
        let mut c = Conn::open(port);
        c.send_raw(&bytes);
        let (got, message) = error_of(&c.read_frame().unwrap());
        assert_eq!(got, code, "{message}");
        assert!(
            message.contains(words),
            "{message:?} should mention {words:?}"
        );
        assert!(c.read_frame().is_none(), "connection closed after {code:?}");
    }

    // Stream-preserving errors: answered, and the connection carries on.
    let mut c = Conn::open(port);
    let mut corrupt = valid.clone();
    corrupt[12] ^= 0xFF; // the frame checksum
    c.send_raw(&corrupt);
    let (code, _) = error_of(&c.read_frame().unwrap());
    assert_eq!(code, ErrorCode::Checksum);
    let mut response_frame = Vec::new();
    Response::Done.encode(3, &mut response_frame);
    c.send_raw(&response_frame);
    let (code, _) = error_of(&c.read_frame().unwrap());
    assert_eq!(code, ErrorCode::Malformed);
    for name in [
        "../escape",
        "a/b/c",
        "a\0b/c",
        &format!("a/{}", "n".repeat(250)),
    ] {
        let r = c.produce(name, AckMode::Leader, &b);
        assert!(
            matches!(decode(&r), Response::Error { .. }),
            "{name:?} accepted"
        );
        let r = c.create_topic(name, 1);
        let (code, message) = error_of(&r);
        assert_eq!(code, ErrorCode::InvalidTopicName, "{name:?}: {message}");
    }
    let r = c.create_topic("t/zero", 0);
    assert_eq!(error_of(&r).0, ErrorCode::InvalidArgument);
    let r = c.call(AdminRequest::ListTopics);
    assert!(
        matches!(decode(&r), Response::TopicList { .. }),
        "still usable"
    );

    // A frame cut off mid-payload by a client that goes away.
    let mut cut = Conn::open(port);
    let mut produce = Vec::new();
    DataRequest::Produce {
        topic: "t/bad",
        segment: 0,
        ack: AckMode::Leader,
        batch: &b,
    }
    .encode(1, &mut produce);
    cut.send_raw(&produce[..produce.len() / 2]);
    drop(cut);

    // The well-behaved client never noticed, and its record is intact.
    let r = good.produce("t/bad", AckMode::Leader, &b);
    assert!(
        matches!(decode(&r), Response::Produced { base_offset: 1, .. }),
        "{:?}",
        decode(&r)
    );
    assert_eq!(fetch_all(&mut good, "t/bad", 0).len(), 2);
    drop(good);
    broker.stop().unwrap();
}

/// A stopping broker says goodbye and answers every request it was sent:
/// a request read before the goodbye is applied and acknowledged, one read
/// after it is refused with `ShuttingDown` (even a produce with ack `none`)
/// and not applied; once the client closes its side, the broker closes.
/// After a restart the segment holds exactly what was acknowledged.
#[test]
fn a_stopping_broker_says_goodbye_and_answers_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, _, mut c) = one_shard_topic(dir.path(), "t/bye", 1);
    let produce = |c: &mut Conn, key: &str, ack: AckMode| -> u32 {
        c.send(DataRequest::Produce {
            topic: "t/bye",
            segment: 0,
            ack,
            batch: &batch(&[key], "v"),
        })
    };
    let first = produce(&mut c, "before", AckMode::Durable);
    let (h, _) = c.read_frame().unwrap();
    assert_eq!(h.request_id, first);
    // One more in flight as the broker starts to stop: it is answered,
    // applied or refused.
    let racing = produce(&mut c, "racing", AckMode::Durable);
    let stopping = std::thread::spawn(move || broker.stop());
    let mut racing_applied = None;
    loop {
        let frame = c.read_frame().expect("the goodbye before the end");
        match (frame.0.request_id, decode(&frame)) {
            (
                0,
                Response::Error {
                    code: ErrorCode::ShuttingDown,
                    ..
                },
            ) => break,
            (id, Response::Produced { .. }) if id == racing => racing_applied = Some(true),
            (
                id,
                Response::Error {
                    code: ErrorCode::ShuttingDown,
                    ..
                },
            ) if id == racing => racing_applied = Some(false),
            (id, other) => panic!("request {id}: unexpected answer {other:?}"),
        }
    }
    // After the goodbye: refused, whatever the ack mode.
    let late_leader = produce(&mut c, "late", AckMode::Leader);
    let late_none = produce(&mut c, "late-none", AckMode::None);
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut refused = Vec::new();
    while let Some(frame) = c.read_frame() {
        let id = frame.0.request_id;
        match decode(&frame) {
            Response::Produced { .. } if id == racing => racing_applied = Some(true),
            Response::Error {
                code: ErrorCode::ShuttingDown,
                ..
            } if id == racing => racing_applied = Some(false),
            Response::Error {
                code: ErrorCode::ShuttingDown,
                ..
            } => refused.push(id),
            other => panic!("request {id}: unexpected answer {other:?}"),
        }
    }
    refused.sort_unstable();
    assert_eq!(
        refused,
        vec![late_leader, late_none],
        "each late request refused once"
    );
    let racing_applied = racing_applied.expect("the racing produce was answered");
    stopping.join().unwrap().unwrap();

    // What is stored is what was acknowledged.
    let (broker, port) = one_shard_broker(dir.path());
    let mut c = Conn::open(port);
    let keys: Vec<Vec<u8>> = fetch_all(&mut c, "t/bye", 0)
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    let mut want = vec![b"before".to_vec()];
    if racing_applied {
        want.push(b"racing".to_vec());
    }
    assert_eq!(keys, want, "stored records against acknowledged ones");
    drop(c);
    broker.stop().unwrap();
}

/// The upload path: pieces in order, a commit that checks length and
/// checksum, reads back; wrong pieces, wrong commits, unknown topics and
/// malformed reference records are refused, and nothing is appended.
#[test]
fn payload_upload_path_and_bad_references() {
    use wire::{PayloadId, PayloadRef};
    let dir = tempfile::tempdir().unwrap();
    let (broker, _, mut c) = one_shard_topic(dir.path(), "t/big", 1);
    let payload: Vec<u8> = (0..5_000_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let reference = PayloadRef {
        id: PayloadId {
            created_ms: 1_700_000_000_000,
            nonce: 42,
        },
        length: payload.len() as u64,
        checksum: wire::checksum::crc32c(&payload),
    };
    let write = |c: &mut Conn, topic: &str, offset: usize, bytes: &[u8]| {
        c.call(DataRequest::PayloadWrite {
            topic: topic.into(),
            id: reference.id,
            offset: offset as u64,
            bytes,
        })
    };
    assert_eq!(
        error_code(&write(&mut c, "t/none", 0, &payload[..10])),
        Some(ErrorCode::TopicNotFound)
    );
    assert_eq!(
        error_code(&write(&mut c, "t/big", 10, &payload[10..20])),
        Some(ErrorCode::PayloadNotFound),
        "a piece past the start of an upload that never began"
    );
    let half = payload.len() / 2;
    assert!(matches!(
        decode(&write(&mut c, "t/big", 0, &payload[..half])),
        Response::Done
    ));
    assert_eq!(
        error_code(&write(&mut c, "t/big", half + 1, &payload[half + 1..])),
        Some(ErrorCode::InvalidArgument),
        "a gap between pieces"
    );
    assert!(matches!(
        decode(&write(&mut c, "t/big", half, &payload[half..])),
        Response::Done
    ));
    let mut wrong = reference;
    wrong.length -= 1;
    assert_eq!(
        error_code(&c.call(DataRequest::PayloadCommit {
            topic: "t/big".into(),
            reference: wrong,
        })),
        Some(ErrorCode::PayloadMismatch)
    );
    // The mismatch dropped the upload: start again, then commit right.
    for (i, piece) in payload.chunks(4 << 20).enumerate() {
        assert!(matches!(
            decode(&write(&mut c, "t/big", i << 22, piece)),
            Response::Done
        ));
    }
    assert!(matches!(
        decode(&c.call(DataRequest::PayloadCommit {
            topic: "t/big".into(),
            reference,
        })),
        Response::Done
    ));
    let mut read_back = Vec::new();
    while read_back.len() < payload.len() {
        let frame = c.call(DataRequest::PayloadRead {
            topic: "t/big".into(),
            id: reference.id,
            offset: read_back.len() as u64,
            max_bytes: 3 << 20,
        });
        let Response::PayloadBytes { length, bytes, .. } = decode(&frame) else {
            panic!("{:?}", decode(&frame));
        };
        assert_eq!(length, payload.len() as u64);
        assert!(!bytes.is_empty());
        read_back.extend_from_slice(bytes);
    }
    assert!(read_back == payload, "payload read back differs");
    let mut other = reference.id;
    other.nonce += 1;
    assert_eq!(
        error_code(&c.call(DataRequest::PayloadRead {
            topic: "t/big".into(),
            id: other,
            offset: 0,
            max_bytes: 10,
        })),
        Some(ErrorCode::PayloadNotFound)
    );

    // A good reference record is appended; a record flagged as a reference
    // whose value is not one is refused with the whole batch.
    let mut b = BatchBuilder::new();
    b.push_reference(1, b"k", &reference, &[]).unwrap();
    let good = b.finish(0, 0).to_vec();
    let r = c.produce("t/big", AckMode::Leader, &good);
    assert!(
        matches!(decode(&r), Response::Produced { .. }),
        "{:?}",
        decode(&r)
    );
    let mut bad = good.clone();
    let value_at = wire::batch::BATCH_HEADER_BYTES + wire::batch::RECORD_HEADER_BYTES + 1;
    bad[value_at] = 99; // version 99
    let crc = wire::checksum::crc32c(&bad[wire::batch::CHECKSUMMED_FROM..]);
    bad[wire::batch::CHECKSUM_OFFSET..wire::batch::CHECKSUM_OFFSET + 4]
        .copy_from_slice(&crc.to_le_bytes());
    let r = c.produce("t/big", AckMode::Leader, &bad);
    assert_eq!(error_code(&r), Some(ErrorCode::UnsupportedVersion));
    let r = c.call(AdminRequest::DescribeTopic {
        topic: "t/big".into(),
    });
    let Response::Topic(t) = decode(&r) else {
        panic!()
    };
    assert_eq!(t.segments[0].next_offset, 1, "only the good batch is in");
    assert_eq!(t.segments[0].appended_bytes, good.len() as u64);
    drop(c);
    broker.stop().unwrap();
}

/// What [`FaultyFiler`] does to the first chunk it is handed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HandOverFault {
    /// Fail as a failed `fdatasync` does, the bytes still in the file.
    Fail,
    /// Fail as a failed `fdatasync` does after the kernel dropped the dirty
    /// pages: the file's data reads back as zeros.
    FailAndLosePages,
}

/// A test double around the real local filer that injects one fault: the
/// first `put_file` (a sealed buffer handed over as a chunk) fails. It
/// records every call that stores a chunk, in order.
#[derive(Debug)]
struct FaultyFiler {
    inner: std::sync::Arc<dyn filer::Filer>,
    fault: HandOverFault,
    calls: std::sync::Mutex<Vec<String>>,
}

impl FaultyFiler {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl filer::Filer for FaultyFiler {
    fn put(&self, path: &filer::ObjectPath, bytes: &[u8]) -> Result<(), filer::FilerError> {
        if path.as_str().ends_with(".chunk") {
            self.calls.lock().unwrap().push(format!("put {path}"));
        }
        self.inner.put(path, bytes)
    }
    fn create(&self, path: &filer::ObjectPath, bytes: &[u8]) -> Result<(), filer::FilerError> {
        if path.as_str().ends_with(".chunk") {
            self.calls.lock().unwrap().push(format!("create {path}"));
        }
        self.inner.create(path, bytes)
    }
    fn read_at(
        &self,
        path: &filer::ObjectPath,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, filer::FilerError> {
        self.inner.read_at(path, offset, buf)
    }
    fn size(&self, path: &filer::ObjectPath) -> Result<u64, filer::FilerError> {
        self.inner.size(path)
    }
    fn list(
        &self,
        prefix: &filer::ObjectPath,
    ) -> Result<Vec<filer::ObjectPath>, filer::FilerError> {
        self.inner.list(prefix)
    }
    fn delete(&self, path: &filer::ObjectPath) -> Result<(), filer::FilerError> {
        self.inner.delete(path)
    }
    fn local_file(&self, path: &filer::ObjectPath) -> Option<std::path::PathBuf> {
        self.inner.local_file(path)
    }
    fn put_file(
        &self,
        path: &filer::ObjectPath,
        local: &std::path::Path,
        len: u64,
    ) -> Result<(), filer::FilerError> {
        let first = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(format!("put_file {path}"));
            calls.iter().filter(|c| c.starts_with("put_file")).count() == 1
        };
        if !first {
            return self.inner.put_file(path, local, len);
        }
        if self.fault == HandOverFault::FailAndLosePages {
            use std::os::unix::fs::FileExt;
            let file = std::fs::OpenOptions::new().write(true).open(local).unwrap();
            let header = wire::chunk::CHUNK_HEADER_BYTES as u64;
            file.write_all_at(&vec![0u8; (len - header) as usize], header)
                .unwrap();
        }
        Err(filer::FilerError::Io {
            op: "fdatasync",
            path: local.display().to_string(),
            source: std::io::Error::other("injected: Input/output error"),
        })
    }
}

/// Start a one-shard broker whose filer is a [`FaultyFiler`].
fn faulty_broker(
    dir: &std::path::Path,
    fault: HandOverFault,
) -> (Broker, u16, std::sync::Arc<FaultyFiler>) {
    let port = port();
    let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
    let keep = slot.clone();
    let broker = Broker::start_with_filer(
        BrokerConfig {
            shards: 1,
            ..config(dir, port)
        },
        move |inner| {
            let faulty = std::sync::Arc::new(FaultyFiler {
                inner,
                fault,
                calls: std::sync::Mutex::new(Vec::new()),
            });
            *keep.lock().unwrap() = Some(faulty.clone());
            faulty
        },
    )
    .unwrap();
    let faulty = slot.lock().unwrap().take().unwrap();
    (broker, port, faulty)
}

/// A chunk whose hand-over failed (as after a failed `fdatasync`) is never
/// synced from that file again: its verified bytes go to the filer from
/// memory as a new object, and only then is the durable produce
/// acknowledged. After a restart every acknowledged record is there once.
#[test]
fn a_failed_chunk_write_is_stored_again_from_memory_never_synced_again() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, port, faulty) = faulty_broker(dir.path(), HandOverFault::Fail);
    let mut c = Conn::open(port);
    c.create_topic("t/fsync", 1);
    let b = batch(&["a", "b", "c"], "durable");
    let r = c.produce("t/fsync", AckMode::Durable, &b);
    assert_produced(&r, 3);
    let calls = faulty.calls();
    let chunk = calls[0].strip_prefix("put_file ").unwrap().to_owned();
    assert_eq!(
        calls,
        vec![format!("put_file {chunk}"), format!("create {chunk}")],
        "the failed file is not handed over again; its bytes are put from memory"
    );
    drop(c);
    broker.stop().unwrap();

    let (broker, port) = one_shard_broker(dir.path());
    let mut c = Conn::open(port);
    let keys: Vec<Vec<u8>> = fetch_all(&mut c, "t/fsync", 0)
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    drop(c);
    broker.stop().unwrap();
}

/// When the bytes of a chunk whose write failed no longer verify (the
/// kernel dropped the pages), the segment fails loudly: the durable
/// produce gets a storage error, never an ack; later writes are refused;
/// and the broker's stop reports the failure.
#[test]
fn bytes_lost_after_a_failed_write_fail_the_segment_and_are_never_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, port, faulty) = faulty_broker(dir.path(), HandOverFault::FailAndLosePages);
    let mut c = Conn::open(port);
    c.create_topic("t/lost", 1);
    let b = batch(&["a", "b"], "lost");
    let r = c.produce("t/lost", AckMode::Durable, &b);
    assert_eq!(error_code(&r), Some(ErrorCode::Storage), "{:?}", decode(&r));
    let r = c.produce("t/lost", AckMode::Leader, &b);
    assert_eq!(error_code(&r), Some(ErrorCode::Storage), "{:?}", decode(&r));
    let calls = faulty.calls();
    assert_eq!(calls.len(), 1, "nothing stored after the loss: {calls:?}");
    drop(c);
    let stopped = broker.stop();
    assert!(
        stopped
            .as_ref()
            .is_err_and(|e| e.to_string().contains("failed")),
        "{stopped:?}"
    );
}

/// Idle and trickling peers cannot hold a connection for ever: a silent
/// connection closes after the idle timeout, one that sends part of a
/// frame (header or payload) and stops closes after the frame timeout,
/// a long-poll fetch that waits longer than the idle timeout is answered
/// (waiting for an answer is not idleness), and a connection in use stays.
#[test]
fn idle_and_trickling_connections_are_closed() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start(BrokerConfig {
        shards: 1,
        idle_timeout_ms: 300,
        frame_timeout_ms: 300,
        fetch_wait_ms_max: 5_000,
        ..config(dir.path(), port)
    })
    .unwrap();
    // How long the test waits for a close it expects: far past the
    // timeouts, so a slow machine does not fail it; a broker that never
    // closes does.
    let bound = Duration::from_secs(30);
    let closed_within = |conn: &mut Conn| test_support::closed_within(&mut conn.stream, bound);

    // Silent from the start.
    let mut silent = Conn::open(port);
    let opened = Instant::now();
    assert!(closed_within(&mut silent), "an idle connection stayed open");
    assert!(opened.elapsed() < bound);

    // Half a header, then nothing.
    let mut trickle = Conn::open(port);
    let mut frame = Vec::new();
    AdminRequest::ListTopics.encode(1, &mut frame);
    trickle.send_raw(&frame[..7]);
    assert!(
        closed_within(&mut trickle),
        "a half header held the connection"
    );

    // A whole header promising a payload that never comes.
    let mut stalled = Conn::open(port);
    let b = batch(&["k"], "v");
    let mut produce = Vec::new();
    DataRequest::Produce {
        topic: "idle/t",
        segment: 0,
        ack: AckMode::Leader,
        batch: &b,
    }
    .encode(1, &mut produce);
    stalled.send_raw(&produce[..produce.len() - 10]);
    assert!(
        closed_within(&mut stalled),
        "a missing payload held the connection"
    );

    // A connection in use is served across many idle periods' worth of
    // time, and a fetch that waits past the idle timeout is answered.
    let mut busy = Conn::open(port);
    assert!(matches!(
        decode(&busy.create_topic("idle/t", 1)),
        Response::Topic(_)
    ));
    let fetch = busy.fetch("idle/t", 0, FetchFrom::Latest, 1 << 20, 1_000);
    assert!(
        matches!(decode(&fetch), Response::Fetched(_)),
        "{:?}",
        decode(&fetch)
    );
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(100));
        assert!(matches!(
            decode(&busy.call(AdminRequest::ListTopics)),
            Response::TopicList { .. }
        ));
    }
    drop(broker);
}
