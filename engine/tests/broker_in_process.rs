//! A broker started in this process, spoken to over real loopback TCP with
//! nothing but the wire crate: create, produce with every ack mode, fetch
//! back, bad input, restart.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU16, Ordering};

use kelp_engine::{Broker, BrokerConfig};
use wire::chunk::BatchWalk;
use wire::frame::{FrameHeader, FRAME_HEADER_BYTES};
use wire::message::Fetched;
use wire::{AckMode, BatchBuilder, ErrorCode, FetchFrom, Request, Response};

static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

fn port() -> u16 {
    // Spread tests over ports by process id so parallel runs do not clash.
    let base = 20_000 + (std::process::id() % 2_000) as u16 * 10;
    base + NEXT_PORT.fetch_add(3, Ordering::Relaxed)
}

fn config(dir: &std::path::Path, port: u16) -> BrokerConfig {
    BrokerConfig {
        data_dir: dir.to_path_buf(),
        listen: format!("127.0.0.1:{port}").parse().unwrap(),
        shards: 2,
        pin_shards: false,
        ..BrokerConfig::default()
    }
}

struct Conn {
    stream: TcpStream,
    next_id: u32,
}

impl Conn {
    fn open(port: u16) -> Conn {
        Conn {
            stream: TcpStream::connect(("127.0.0.1", port)).unwrap(),
            next_id: 1,
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    fn read_frame(&mut self) -> Option<(FrameHeader, Vec<u8>)> {
        let mut h = [0u8; FRAME_HEADER_BYTES];
        self.stream.read_exact(&mut h).ok()?;
        let header = FrameHeader::decode(&h).unwrap();
        let mut payload = vec![0u8; header.payload_bytes as usize];
        self.stream.read_exact(&mut payload).unwrap();
        header.verify_payload(&payload).unwrap();
        Some((header, payload))
    }

    fn call(&mut self, request: Request<'_>) -> (FrameHeader, Vec<u8>) {
        let id = self.next_id;
        self.next_id += 1;
        let mut out = Vec::new();
        request.encode(id, &mut out);
        self.send_raw(&out);
        let (h, p) = self.read_frame().unwrap();
        assert_eq!(h.request_id, id);
        (h, p)
    }
}

fn decode(frame: &(FrameHeader, Vec<u8>)) -> Response<'_> {
    Response::decode(frame.0.frame_type, &frame.1).unwrap()
}

fn batch(keys: &[&str], value: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for k in keys {
        b.push(1_700_000_000_000, k.as_bytes(), value.as_bytes(), &[])
            .unwrap();
    }
    b.finish(0, 0).to_vec()
}

fn fetch_all(conn: &mut Conn, topic: &str, segment: u32) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut from = FetchFrom::Earliest;
    loop {
        let frame = conn.call(Request::Fetch {
            topic: topic.into(),
            segment,
            from,
            max_bytes: 1 << 16,
            max_wait_ms: 0,
        });
        let Response::Fetched(Fetched {
            start_offset,
            next_offset,
            high_watermark,
            batches,
            ..
        }) = decode(&frame)
        else {
            panic!("not a fetch response: {:?}", decode(&frame));
        };
        for item in BatchWalk::new(batches) {
            let (_, b) = item.unwrap();
            for r in b.records() {
                let offset = b.base_offset() + u64::from(r.offset_delta);
                if offset >= start_offset {
                    out.push((offset, r.key.to_vec()));
                }
            }
        }
        if next_offset >= high_watermark {
            return out;
        }
        from = FetchFrom::Offset(next_offset);
    }
}

#[test]
fn produce_fetch_restart() {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = Broker::start(config(dir.path(), port)).unwrap();
    let mut c = Conn::open(port);
    let created = c.call(Request::CreateTopic {
        topic: "t/one".into(),
        segments: 1,
    });
    let Response::Topic(info) = decode(&created) else {
        panic!("{:?}", decode(&created))
    };
    assert_eq!(info.segments.len(), 1);
    let owner = info.segments[0].shard;
    let mut c = Conn::open(port + owner);
    for ack in [AckMode::Leader, AckMode::Durable] {
        let b = batch(&["a", "b", "c"], "v");
        let r = c.call(Request::Produce {
            topic: "t/one",
            segment: 0,
            ack,
            batch: &b,
        });
        assert!(
            matches!(
                decode(&r),
                Response::Produced {
                    record_count: 3,
                    ..
                }
            ),
            "{:?}",
            decode(&r)
        );
    }
    let records = fetch_all(&mut c, "t/one", 0);
    assert_eq!(records.len(), 6);
    assert_eq!(
        records.iter().map(|r| r.0).collect::<Vec<_>>(),
        (0..6).collect::<Vec<_>>()
    );

    // Bad input on a live connection: corrupt batch, wrong segment, unknown topic.
    let mut bad = batch(&["x"], "v");
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let r = c.call(Request::Produce {
        topic: "t/one",
        segment: 0,
        ack: AckMode::Leader,
        batch: &bad,
    });
    assert!(matches!(
        decode(&r),
        Response::Error {
            code: ErrorCode::Checksum,
            ..
        }
    ));
    let b = batch(&["x"], "v");
    let r = c.call(Request::Produce {
        topic: "t/nope",
        segment: 0,
        ack: AckMode::Leader,
        batch: &b,
    });
    assert!(matches!(
        decode(&r),
        Response::Error {
            code: ErrorCode::TopicNotFound,
            ..
        }
    ));
    let r = c.call(Request::CreateTopic {
        topic: "../etc".into(),
        segments: 1,
    });
    assert!(matches!(
        decode(&r),
        Response::Error {
            code: ErrorCode::InvalidTopicName,
            ..
        }
    ));
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
    assert_eq!(fetch_all(&mut c, "t/one", 0).len(), 6, "nothing lost");

    // Unflushed (leader-acked) records survive a restart.
    let b = batch(&["d"], "v");
    c.call(Request::Produce {
        topic: "t/one",
        segment: 0,
        ack: AckMode::Leader,
        batch: &b,
    });
    drop(c);
    broker.stop().unwrap();
    let broker = Broker::start(config(dir.path(), port)).unwrap();
    let mut c = Conn::open(port + owner);
    let records = fetch_all(&mut c, "t/one", 0);
    assert_eq!(records.len(), 7);
    let b = batch(&["e"], "v");
    let r = c.call(Request::Produce {
        topic: "t/one",
        segment: 0,
        ack: AckMode::Leader,
        batch: &b,
    });
    assert!(matches!(
        decode(&r),
        Response::Produced { base_offset: 7, .. }
    ));
    drop(c);
    broker.stop().unwrap();
}
