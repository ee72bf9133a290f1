//! What kelp's integration tests share, so each exists once:
//!
//! - [`free_port_pair`]: the one port picker. A pair of ports free for TCP
//!   and UDP, reserved against every other kelp test process on this
//!   machine for as long as this one lives.
//! - [`TestConn`]: the one blocking test connection, and [`read_frame`],
//!   the one frame reader for tests: kelp's frames over a plain
//!   `TcpStream`, every frame's checksum verified. [`QuicConn`] is the
//!   same over a quinn stream, [`quic_endpoint`] its client.
//! - [`SeededRng`]: the one seed and generator of randomized tests: the
//!   seed printed, `KELP_TEST_SEED` replaying it.
//! - [`seeded`]: the one runner of seeded simulations: each seed printed
//!   with its replay, one seed replayed from an environment variable, a
//!   failure naming its seed.
//!
//! - [`S3Server`]: a real S3-compatible server (moto) on loopback with a
//!   fresh bucket.
//! - [`EtcdServer`]: a real single-member etcd on loopback with a fresh
//!   data directory.
//!
//! A test double or fixture that only one test file needs stays in that
//! file.
#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use wire::chunk::BatchWalk;
use wire::frame::{FrameHeader, FRAME_HEADER_BYTES};
use wire::message::Fetched;

mod etcd_server;
pub mod fault_filer;
mod http;
mod quic;
mod s3_server;
mod seeded;
pub use etcd_server::EtcdServer;
pub use quic::{quic_endpoint, QuicConn};
pub use s3_server::{S3Server, S3_ACCESS_KEY_ID, S3_REGION, S3_SECRET_ACCESS_KEY};
pub use seeded::seeded;

/// A randomized test's numbers (xorshift64), from `KELP_TEST_SEED` when it
/// is set, else from the clock; the seed is printed, so a failure can be
/// replayed.
#[derive(Debug, Clone)]
pub struct SeededRng {
    pub seed: u64,
    state: u64,
}

impl SeededRng {
    pub fn from_env() -> SeededRng {
        let seed = std::env::var("KELP_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        println!("seed {seed} (replay with KELP_TEST_SEED={seed})");
        SeededRng {
            seed,
            state: seed | 1,
        }
    }

    /// Numbers from `seed` (a replayed one, or one the caller printed).
    pub fn from_seed(seed: u64) -> SeededRng {
        SeededRng {
            seed,
            state: seed | 1,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
use wire::{
    AckMode, AdminRequest, BrokerPortRequest, DataRequest, ErrorCode, FetchChecks, FetchFrom,
    Response,
};

/// Where the ports handed out lie: below the ephemeral range (32768 and
/// up), so no client connection can take one between the check and the
/// server's bind.
const PORTS_START: u16 = 20_000;
const PORTS_COUNT: u16 = 12_000;
/// Ports apart of two pairs handed out in a row; a broker with two shards
/// uses `p` and `p + 1`.
const PAIR_STRIDE: u16 = 3;

static NEXT_PAIR: AtomicU16 = AtomicU16::new(0);
/// The reservation locks this process holds; they are released when it
/// exits (the kernel drops the `flock`s with the descriptors).
static RESERVED: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// A port `p` with TCP and UDP on `p` and `p + 1` free now and reserved for
/// this process: every kelp test process takes an exclusive `flock` on
/// `$TMPDIR/kelp-test-ports/<p>.lock` before it uses a pair, so two test
/// binaries run at once never get the same ports (a free port alone is no
/// promise: another process may bind it a moment later). Other programs do
/// not take these locks; a test still checks that what answers on its port
/// is the server it started.
pub fn free_port_pair() -> u16 {
    let lock_dir = std::env::temp_dir().join("kelp-test-ports");
    std::fs::create_dir_all(&lock_dir).unwrap();
    let start = (std::process::id() % u32::from(PORTS_COUNT / PAIR_STRIDE)) as u16;
    for _ in 0..PORTS_COUNT / PAIR_STRIDE {
        let pair =
            (start + NEXT_PAIR.fetch_add(1, Ordering::Relaxed)) % (PORTS_COUNT / PAIR_STRIDE);
        let p = PORTS_START + pair * PAIR_STRIDE;
        let free = (p..p + 2).all(|q| {
            std::net::TcpListener::bind(("127.0.0.1", q)).is_ok()
                && std::net::UdpSocket::bind(("127.0.0.1", q)).is_ok()
        });
        if free && reserve(lock_dir.join(format!("{p}.lock"))) {
            return p;
        }
    }
    panic!(
        "no free pair of ports in {PORTS_START}..{}",
        PORTS_START + PORTS_COUNT
    );
}

/// Take the reservation lock at `path` for this process's life; false if
/// another process holds it.
fn reserve(path: PathBuf) -> bool {
    let Ok(file) = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
    else {
        return false;
    };
    // SAFETY: flock on a descriptor `file` holds open.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if locked {
        RESERVED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(file);
    }
    locked
}

/// One frame as read: its header, and its payload (checksum verified).
pub type Frame = (FrameHeader, Vec<u8>);

/// Read one whole frame from `stream` and verify its checksum; `None` if
/// the stream ends (or fails) before a whole frame. Panics on a frame that
/// does not decode or verify: in a test that is the bug.
pub fn read_frame(stream: &mut impl Read) -> Option<Frame> {
    let mut h = [0u8; FRAME_HEADER_BYTES];
    stream.read_exact(&mut h).ok()?;
    let header = FrameHeader::decode(&h).unwrap();
    let mut payload = vec![0u8; header.payload_bytes as usize];
    stream.read_exact(&mut payload).ok()?;
    header.verify_payload(&payload).unwrap();
    Some((header, payload))
}

/// A frame's response, decoded.
pub fn decode(frame: &Frame) -> Response<'_> {
    Response::decode(frame.0.frame_type, &frame.1).unwrap()
}

/// One record as a fetch returned it: offset, key, value.
pub type FetchedRecord = (u64, Vec<u8>, Vec<u8>);

/// The records of a `Fetched` answer from its start offset on, and where
/// the next fetch starts (`None` once the answer reached the high
/// watermark). Panics on any other answer.
pub fn fetched_records(frame: &Frame) -> (Vec<FetchedRecord>, Option<FetchFrom>) {
    let Response::Fetched(Fetched {
        start_offset,
        next_offset,
        high_watermark,
        batches,
        ..
    }) = decode(frame)
    else {
        panic!("not a fetch response: {:?}", decode(frame));
    };
    let mut out = Vec::new();
    for item in BatchWalk::new(batches) {
        let (_, b) = item.unwrap();
        for r in b.records() {
            let offset = b.base_offset() + u64::from(r.offset_delta);
            if offset >= start_offset {
                out.push((offset, r.key.to_vec(), r.value.to_vec()));
            }
        }
    }
    let next = (next_offset < high_watermark).then_some(FetchFrom::Offset(next_offset));
    (out, next)
}

/// Whether the peer closed `stream` (end of stream, or a reset) within
/// `within`; a read that times out means it is still open. Reads at most
/// one byte: a byte read means it is open and talking.
pub fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// The error code a frame answers with, if it is an error.
pub fn error_code(frame: &Frame) -> Option<ErrorCode> {
    match decode(frame) {
        Response::Error { code, .. } => Some(code),
        _ => None,
    }
}

/// A blocking connection to a broker shard, for tests: requests go out
/// with ids from 1 up, and [`TestConn::call`] checks the answer's id.
#[derive(Debug)]
pub struct TestConn {
    pub stream: TcpStream,
    pub next_id: u32,
}

/// How long a test waits for one frame before it fails instead of hanging.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

impl TestConn {
    /// Connect to `127.0.0.1:port`.
    pub fn open(port: u16) -> TestConn {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        TestConn { stream, next_id: 1 }
    }

    /// Write raw bytes, framed or not.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Send `request` with the next id, without waiting; returns the id.
    pub fn send<'a>(&mut self, request: impl Into<BrokerPortRequest<'a>>) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        let mut out = Vec::new();
        request.into().encode(id, &mut out);
        self.send_raw(&out);
        id
    }

    /// The next frame from the broker.
    pub fn read_frame(&mut self) -> Option<Frame> {
        read_frame(&mut self.stream)
    }

    /// Send `request` and read its answer, which must carry its id.
    pub fn call<'a>(&mut self, request: impl Into<BrokerPortRequest<'a>>) -> Frame {
        let id = self.send(request);
        let frame = self.read_frame().unwrap();
        assert_eq!(frame.0.request_id, id, "the answer to request {id}");
        frame
    }

    /// Create `topic` with `segments` segments and read the answer.
    pub fn create_topic(&mut self, topic: &str, segments: u32) -> Frame {
        self.call(AdminRequest::CreateTopic {
            topic: topic.into(),
            segments,
            replicas: 0,
        })
    }

    /// Fetch from `segment` of `topic` (trusting the stored checksums) and
    /// read the answer.
    pub fn fetch(
        &mut self,
        topic: &str,
        segment: u32,
        from: FetchFrom,
        max_bytes: u32,
        max_wait_ms: u32,
    ) -> Frame {
        self.call(DataRequest::Fetch(wire::FetchRequest {
            topic: topic.into(),
            segment,
            from,
            max_bytes,
            max_wait_ms,
            checks: FetchChecks::Trust,
            follower: None,
        }))
    }

    /// Produce `batch` to segment 0 of `topic` and read the answer.
    pub fn produce(&mut self, topic: &str, ack: AckMode, batch: &[u8]) -> Frame {
        self.call(DataRequest::Produce {
            topic,
            segment: 0,
            ack,
            batch,
        })
    }
}
