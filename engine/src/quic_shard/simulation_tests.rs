//! The shard's QUIC server against a quinn-proto client over a simulated
//! network, in memory, on a simulated clock: datagrams are delayed, lost
//! and reordered by a seeded generator, and time moves only when nothing is
//! due, so a run of minutes of simulated time takes milliseconds, and a
//! failing seed replays exactly (`KELP_QUIC_SIM_SEED=<seed>`).
//!
//! The server side is the broker's own code (`QuicServer`, its connections,
//! framing and request bookkeeping); only the shard's request handling is
//! replaced by an application that echoes each frame's payload back under
//! its request id, so every byte can be checked at the client.

#![allow(clippy::unwrap_used)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::{Dir, Event, StreamId};
use wire::frame::{encode_frame, FrameHeader, FrameType, FRAME_HEADER_BYTES};

use super::requests::{Inbound, Requests};
use super::server::{Datagrams, QuicServer, ServerLimits};
use super::window::WINDOW_BYTES_MIN;
use crate::receive_budget::ReceiveBudget;

const SERVER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 4433);
const CLIENT: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 50000);
/// Steps a simulation may take before it is declared stuck.
const STEPS_MAX: usize = 5_000_000;
/// Simulated time a simulation may take before it is declared stuck.
const SIMULATED_TIME_MAX: Duration = Duration::from_secs(600);

/// The seed: `KELP_QUIC_SIM_SEED` to replay one, else a fresh one; printed
/// either way, so a failure names the seed that made it.
fn seed() -> u64 {
    let seed = std::env::var("KELP_QUIC_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("KELP_QUIC_SIM_SEED={seed}");
    seed
}

/// How the simulated network treats datagrams, each way alike.
#[derive(Clone, Copy)]
struct Conditions {
    /// Out of 1,000 datagrams, how many are lost.
    loss_per_mille: u32,
    /// One-way delay of every datagram.
    latency: Duration,
    /// Up to this much more, uniformly: datagrams overtake each other.
    jitter: Duration,
}

struct Datagram {
    to_server: bool,
    bytes: Vec<u8>,
}

struct Network {
    rng: fastrand::Rng,
    conditions: Conditions,
    /// Deliveries by (time, sequence), the sequence breaking ties in order.
    queue: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    /// Datagrams in flight, by the index in `queue`'s entries.
    slots: Vec<Option<Datagram>>,
    sequence: u64,
    /// Everything sent from now on is lost.
    cut: bool,
    now: Instant,
    sent: u64,
    lost: u64,
}

impl Network {
    fn new(seed: u64, conditions: Conditions, now: Instant) -> Network {
        Network {
            rng: fastrand::Rng::with_seed(seed),
            conditions,
            queue: BinaryHeap::new(),
            slots: Vec::new(),
            sequence: 0,
            cut: false,
            now,
            sent: 0,
            lost: 0,
        }
    }

    fn send(&mut self, to_server: bool, bytes: &[u8]) {
        self.sent += 1;
        if self.cut || self.rng.u32(0..1000) < self.conditions.loss_per_mille {
            self.lost += 1;
            return;
        }
        let jitter = self.conditions.jitter.mul_f64(self.rng.f64());
        let at = self.now + self.conditions.latency + jitter;
        let slot = self
            .slots
            .iter()
            .position(Option::is_none)
            .unwrap_or_else(|| {
                self.slots.push(None);
                self.slots.len() - 1
            });
        self.slots[slot] = Some(Datagram {
            to_server,
            bytes: bytes.to_vec(),
        });
        self.sequence += 1;
        self.queue.push(Reverse((at, self.sequence, slot)));
    }

    fn next_at(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse((at, _, _))| *at)
    }

    fn pop_due(&mut self) -> Option<Datagram> {
        match self.queue.peek() {
            Some(Reverse((at, _, _))) if *at <= self.now => {
                let Reverse((_, _, slot)) = self.queue.pop()?;
                self.slots[slot].take()
            }
            _ => None,
        }
    }
}

/// The server's sink: each GSO segment becomes one datagram to the client.
struct ToClient<'a>(&'a mut Network);

impl Datagrams for ToClient<'_> {
    fn send(&mut self, transmit: &quinn_proto::Transmit, contents: &[u8]) -> std::io::Result<()> {
        assert_eq!(transmit.destination, CLIENT);
        let segment = transmit.segment_size.unwrap_or(contents.len()).max(1);
        for datagram in contents.chunks(segment) {
            self.0.send(false, datagram);
        }
        Ok(())
    }
}

/// A kelp client on quinn-proto: one bidirectional stream, the frames of
/// `outgoing` written in order, answers collected; its side is finished
/// once everything is written.
struct Client {
    endpoint: quinn_proto::Endpoint,
    connection: quinn_proto::Connection,
    handle: quinn_proto::ConnectionHandle,
    stream: Option<StreamId>,
    outgoing: Vec<u8>,
    written: usize,
    finished: bool,
    answers: Vec<u8>,
    answers_ended: bool,
    lost: Option<quinn_proto::ConnectionError>,
    buf: Vec<u8>,
}

impl Client {
    fn connect(now: Instant, tls: rustls::ClientConfig, outgoing: Vec<u8>) -> Client {
        let crypto = quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let config = quinn_proto::ClientConfig::new(Arc::new(crypto));
        let mut endpoint = quinn_proto::Endpoint::new(
            Arc::new(quinn_proto::EndpointConfig::default()),
            None,
            true,
            None,
        );
        let (handle, connection) = endpoint.connect(now, config, SERVER, "localhost").unwrap();
        Client {
            endpoint,
            connection,
            handle,
            stream: None,
            outgoing,
            written: 0,
            finished: false,
            answers: Vec::new(),
            answers_ended: false,
            lost: None,
            buf: Vec::new(),
        }
    }

    fn receive(&mut self, now: Instant, datagram: &[u8]) {
        self.buf.clear();
        let event = self.endpoint.handle(
            now,
            SERVER,
            None,
            None,
            BytesMut::from(datagram),
            &mut self.buf,
        );
        if let Some(quinn_proto::DatagramEvent::ConnectionEvent(handle, event)) = event {
            assert_eq!(handle, self.handle);
            self.connection.handle_event(event);
        }
    }

    fn step(&mut self, now: Instant, network: &mut Network) {
        if self.connection.poll_timeout().is_some_and(|at| at <= now) {
            self.connection.handle_timeout(now);
        }
        while let Some(event) = self.connection.poll() {
            match event {
                Event::Connected => {
                    self.stream = self.connection.streams().open(Dir::Bi);
                    assert!(self.stream.is_some(), "the server allows a stream");
                }
                Event::ConnectionLost { reason } => self.lost = Some(reason),
                // Every step tries to write and read anyway.
                _ => {}
            }
        }
        if let Some(id) = self.stream {
            if !self.connection.is_closed() {
                self.write(id);
                self.read(id);
            }
        }
        while let Some(event) = self.connection.poll_endpoint_events() {
            if let Some(reply) = self.endpoint.handle_event(self.handle, event) {
                self.connection.handle_event(reply);
            }
        }
        loop {
            self.buf.clear();
            let Some(transmit) = self.connection.poll_transmit(now, 1, &mut self.buf) else {
                break;
            };
            network.send(true, &self.buf[..transmit.size]);
        }
    }

    fn write(&mut self, id: StreamId) {
        let mut send = self.connection.send_stream(id);
        while self.written < self.outgoing.len() {
            match send.write(&self.outgoing[self.written..]) {
                Ok(n) => self.written += n,
                Err(quinn_proto::WriteError::Blocked) => return,
                Err(e) => panic!("client write: {e}"),
            }
        }
        if !self.finished {
            send.finish().unwrap();
            self.finished = true;
        }
    }

    fn read(&mut self, id: StreamId) {
        let mut recv = self.connection.recv_stream(id);
        let Ok(mut chunks) = recv.read(true) else {
            return;
        };
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => self.answers.extend_from_slice(&chunk.bytes),
                Ok(None) => {
                    self.answers_ended = true;
                    break;
                }
                Err(quinn_proto::ReadError::Blocked) => break,
                Err(e) => panic!("client read: {e}"),
            }
        }
        let _ = chunks.finalize();
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        self.connection.poll_timeout()
    }
}

/// What the shard's request handling is replaced by.
#[derive(Clone, Copy, PartialEq, Eq)]
enum App {
    /// Every frame is answered at once with its own payload.
    Echo,
    /// Nothing is ever answered.
    Silent,
}

/// The broker's QUIC server, the client and the network, on one clock.
struct Simulation {
    now: Instant,
    start: Instant,
    network: Network,
    server: QuicServer,
    client: Client,
    app: App,
    /// The shard's receive budget the server reads payloads into.
    budget: Rc<ReceiveBudget>,
    /// The most of it ever in use, after any step.
    budget_in_use_max: u64,
    /// The largest receive window any connection had, after any step.
    window_bytes_max: u64,
    /// Connections the server accepted, with the frames their handler took.
    accepted: Vec<(Rc<Requests>, usize)>,
    steps: usize,
}

const LIMITS: ServerLimits = ServerLimits {
    connections_max: 4,
    connections_per_ip_max: 4,
    requests_in_flight_max: 16,
};

impl Simulation {
    fn new(seed: u64, conditions: Conditions, app: App, outgoing: Vec<u8>) -> Simulation {
        Simulation::with_budget(seed, conditions, app, outgoing, 64 << 20)
    }

    fn with_budget(
        seed: u64,
        conditions: Conditions,
        app: App,
        outgoing: Vec<u8>,
        budget_bytes: u64,
    ) -> Simulation {
        let budget = ReceiveBudget::new(budget_bytes);
        let now = Instant::now();
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let cert = rustls::pki_types::CertificateDer::from(made.cert.der().to_vec());
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(
            rustls::pki_types::PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()),
        );
        let client_tls = crate::tls::client_tls_trusting(cert.clone()).unwrap();
        let config = crate::tls::server_config(vec![cert], key).unwrap();
        Simulation {
            now,
            start: now,
            network: Network::new(seed, conditions, now),
            server: QuicServer::new(0, Arc::new(config), true, 10, LIMITS, budget.clone()),
            client: Client::connect(now, client_tls, outgoing),
            app,
            budget,
            budget_in_use_max: 0,
            window_bytes_max: 0,
            accepted: Vec::new(),
            steps: 0,
        }
    }

    fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// One step at the current time: deliver what is due, let the
    /// application answer, drive both sides.
    fn step(&mut self) {
        self.steps += 1;
        assert!(
            self.steps < STEPS_MAX && self.elapsed() < SIMULATED_TIME_MAX,
            "stuck after {} steps, {:?} simulated",
            self.steps,
            self.elapsed()
        );
        self.network.now = self.now;
        self.server.offer_room();
        while let Some(datagram) = self.network.pop_due() {
            if datagram.to_server {
                self.server.handle_datagram(
                    self.now,
                    CLIENT,
                    Some(SERVER.ip()),
                    None,
                    BytesMut::from(&datagram.bytes[..]),
                    &mut ToClient(&mut self.network),
                );
            } else {
                self.client.receive(self.now, &datagram.bytes);
            }
        }
        let accepted: Vec<_> = self.server.take_accepted().collect();
        self.accepted
            .extend(accepted.into_iter().map(|(r, _peer)| (r, 0)));
        self.server.expire_timers(self.now);
        self.server.retry_blocked(&mut ToClient(&mut self.network));
        self.server
            .drive_ready(self.now, &mut ToClient(&mut self.network));
        for (requests, taken) in &mut self.accepted {
            if self.app == App::Silent {
                continue;
            }
            while let Some(inbound) = requests.try_next() {
                let Inbound::Frame {
                    header,
                    payload,
                    permit,
                } = inbound
                else {
                    panic!("the server found a bad frame in a well-formed stream");
                };
                header.verify_payload(&payload).unwrap();
                *taken += 1;
                let mut answer = Vec::new();
                encode_frame(
                    &mut answer,
                    FrameType::ProduceResponse,
                    header.request_id,
                    &payload,
                );
                // Handled: its room goes back, as after `handle_frame`.
                drop(permit);
                requests.answer(answer);
            }
        }
        self.client.step(self.now, &mut self.network);
        self.budget_in_use_max = self.budget_in_use_max.max(self.budget.in_use());
        self.window_bytes_max = self.window_bytes_max.max(self.server.window_bytes_max());
    }

    /// Steps until `done`, moving the clock to the next thing due whenever
    /// nothing is due now.
    fn run_until(&mut self, done: impl FnMut(&mut Simulation) -> bool) {
        self.run(None, done);
    }

    /// Steps until the clock reads `at`, never past it.
    fn run_to(&mut self, at: Instant) {
        self.run(Some(at), |sim| sim.now >= at);
    }

    fn run(&mut self, cap: Option<Instant>, mut done: impl FnMut(&mut Simulation) -> bool) {
        loop {
            self.step();
            if done(self) {
                return;
            }
            if self.server.has_ready() {
                continue;
            }
            let next = [
                self.network.next_at(),
                self.client.poll_timeout(),
                self.server.poll_timeout(),
            ]
            .into_iter()
            .chain([cap])
            .flatten()
            .min();
            let Some(next) = next else {
                panic!(
                    "nothing more will happen after {:?}, and the simulation is not done",
                    self.elapsed()
                );
            };
            self.now = self.now.max(next);
        }
    }
}

/// `count` request frames of sizes up to `bytes_max`, request ids from 1.
fn frames(rng: &mut fastrand::Rng, count: u32, bytes_max: usize) -> Vec<u8> {
    frames_sized(rng, count, |rng| rng.usize(0..=bytes_max))
}

/// `count` produce frames, ids 1 up, of random bytes, each as long as
/// `len` says.
fn frames_sized(
    rng: &mut fastrand::Rng,
    count: u32,
    mut len: impl FnMut(&mut fastrand::Rng) -> usize,
) -> Vec<u8> {
    let mut out = Vec::new();
    for id in 1..=count {
        let len = len(rng);
        let payload: Vec<u8> = std::iter::repeat_with(|| rng.u8(..)).take(len).collect();
        encode_frame(&mut out, FrameType::ProduceRequest, id, &payload);
    }
    out
}

/// The whole answers at the front of `bytes`, as (request id, payload),
/// each checked against its header's checksum; a partial last one is left.
fn answers(mut bytes: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(header) = bytes.first_chunk::<FRAME_HEADER_BYTES>() {
        let header = FrameHeader::decode(header).unwrap();
        let end = FRAME_HEADER_BYTES + header.payload_bytes as usize;
        let Some(payload) = bytes.get(FRAME_HEADER_BYTES..end) else {
            break;
        };
        header.verify_payload(payload).unwrap();
        out.push((header.request_id, payload.to_vec()));
        bytes = &bytes[end..];
    }
    out
}

/// The requests in `bytes`, the same way.
fn requests_in(bytes: &[u8]) -> Vec<(u32, Vec<u8>)> {
    answers(bytes)
}

/// Over a network that loses 5% of datagrams each way and reorders them
/// (0.5 ms latency, up to 2 ms jitter), every frame of a pipelined client
/// reaches the server whole, is answered exactly once and in order, the
/// in-flight bound holds throughout, and after the client finishes its
/// stream the server finishes its own, closes, and frees the connection.
#[test]
fn frames_are_answered_in_order_over_a_lossy_reordering_network() {
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    let outgoing = frames(&mut rng, 200, 30_000);
    let sent = requests_in(&outgoing);
    let conditions = Conditions {
        loss_per_mille: 50,
        latency: Duration::from_micros(500),
        jitter: Duration::from_millis(2),
    };
    let mut sim = Simulation::new(seed, conditions, App::Echo, outgoing);
    let mut in_flight_max_seen = 0;
    sim.run_until(|sim| {
        for (requests, _) in &sim.accepted {
            in_flight_max_seen = in_flight_max_seen.max(requests.in_flight());
        }
        sim.client.answers_ended && sim.server.open() == 0
    });
    assert_eq!(answers(&sim.client.answers), sent, "seed {seed}");
    let answered: usize = sent.iter().map(|(_, p)| FRAME_HEADER_BYTES + p.len()).sum();
    assert_eq!(
        sim.client.answers.len(),
        answered,
        "bytes past the last answer"
    );
    assert!(
        sim.network.lost > 0,
        "the network lost nothing (seed {seed})"
    );
    assert!(
        in_flight_max_seen <= LIMITS.requests_in_flight_max,
        "{in_flight_max_seen} frames in flight, bound {} (seed {seed})",
        LIMITS.requests_in_flight_max
    );
    assert_eq!(sim.accepted.len(), 1);
    assert_eq!(sim.accepted[0].1, sent.len());
    assert!(sim.accepted[0].0.is_closed());
    println!(
        "{} datagrams, {} lost, {:?} simulated, {} steps",
        sim.network.sent,
        sim.network.lost,
        sim.elapsed(),
        sim.steps
    );
}

/// A server that never answers takes exactly the in-flight bound of frames
/// and reads no further, however many the client has sent: the stream's
/// flow control holds the rest at the client.
#[test]
fn an_unanswered_connection_stops_at_the_in_flight_bound() {
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    let outgoing = frames(&mut rng, 200, 2_000);
    let conditions = Conditions {
        loss_per_mille: 0,
        latency: Duration::from_micros(200),
        jitter: Duration::ZERO,
    };
    let mut sim = Simulation::new(seed, conditions, App::Silent, outgoing);
    // Well before the idle timeout, long after the client wrote what the
    // server's flow control let it.
    sim.run_to(sim.start + Duration::from_secs(5));
    assert_eq!(sim.accepted.len(), 1);
    let (requests, _) = &sim.accepted[0];
    assert!(!requests.is_closed());
    assert_eq!(requests.in_flight(), LIMITS.requests_in_flight_max);
    let mut queued = 0;
    while requests.try_next().is_some() {
        queued += 1;
    }
    assert_eq!(queued, LIMITS.requests_in_flight_max, "seed {seed}");
    assert!(sim.client.answers.is_empty());
}

/// An echo server's simulation under `conditions`, run until the client's
/// `count` random frames (seeded by `seed`) are answered; the client keeps
/// its side of the stream open (it never finishes it).
fn echoed_and_open(seed: u64, count: u32, conditions: Conditions) -> Simulation {
    let mut rng = fastrand::Rng::with_seed(seed);
    let outgoing = frames(&mut rng, count, 1_000);
    let mut sim = Simulation::new(seed, conditions, App::Echo, outgoing);
    sim.client.finished = true;
    sim.run_until(|sim| answers(&sim.client.answers).len() == count as usize);
    sim
}

/// A client that vanishes (every datagram from then on lost, both ways) is
/// dropped at the idle timeout: the connection is freed, its request
/// handler ends, and nothing else is needed to get there but time.
#[test]
fn a_vanished_client_is_dropped_at_the_idle_timeout() {
    let seed = seed();
    let conditions = Conditions {
        loss_per_mille: 0,
        latency: Duration::from_micros(200),
        jitter: Duration::from_micros(100),
    };
    let mut sim = echoed_and_open(seed, 4, conditions);
    let vanished_at = sim.now;
    sim.network.cut = true;
    sim.run_until(|sim| sim.server.open() == 0);
    let idle = sim.now - vanished_at;
    assert!(
        (Duration::from_secs(20)..=Duration::from_secs(61)).contains(&idle),
        "dropped after {idle:?} without a datagram (seed {seed})"
    );
    assert!(sim.accepted[0].0.is_closed());
}

/// The goodbye of a stopping broker: a connection with frames in flight
/// gets their answers, then the goodbye (request id 0, `ShuttingDown`);
/// frames it sends after that are answered not-applied, never handled;
/// once the client finishes its stream the connection closes.
#[test]
fn the_goodbye_follows_owed_answers_and_refuses_later_frames() {
    let seed = seed();
    let conditions = Conditions {
        loss_per_mille: 20,
        latency: Duration::from_micros(300),
        jitter: Duration::from_millis(1),
    };
    let mut sim = echoed_and_open(seed, 3, conditions);
    sim.server.say_goodbye(sim.now, Duration::from_secs(30));
    sim.run_until(|sim| answers(&sim.client.answers).len() == 4);
    let (goodbye_id, goodbye) = answers(&sim.client.answers).pop().unwrap();
    assert_eq!(goodbye_id, 0);
    assert!(matches!(
        wire::Response::decode(FrameType::ErrorResponse, &goodbye).unwrap(),
        wire::Response::Error {
            code: wire::ErrorCode::ShuttingDown,
            ..
        }
    ));
    // Two more frames, then the end of the client's stream.
    let mut late = Vec::new();
    encode_frame(&mut late, FrameType::ProduceRequest, 7, b"late");
    encode_frame(&mut late, FrameType::ProduceRequest, 8, b"later");
    sim.client.outgoing.extend_from_slice(&late);
    sim.client.finished = false;
    sim.run_until(|sim| {
        sim.client.answers_ended && sim.server.open() == 0 && sim.client.lost.is_some()
    });
    let all = answers(&sim.client.answers);
    assert_eq!(all.len(), 6, "seed {seed}");
    for (id, payload) in &all[4..] {
        assert!([7, 8].contains(id));
        assert!(matches!(
            wire::Response::decode(FrameType::ErrorResponse, payload).unwrap(),
            wire::Response::Error {
                code: wire::ErrorCode::ShuttingDown,
                ..
            }
        ));
    }
    // The handler saw only the three frames sent before the goodbye.
    assert_eq!(sim.accepted[0].1, 3);
}

/// Frames wait for room in the shard's receive budget before their payload
/// is read: with room for three 256 KiB frames beside the connection's
/// smallest receive window (paid from the same budget), a client pipelining forty
/// to a server that answers nothing gets exactly three taken, the budget is
/// never exceeded, and nothing more is read; once the server answers, room
/// comes back and every frame goes through, in order, the budget never
/// exceeded on the way.
#[test]
fn payloads_wait_for_room_in_the_shards_receive_budget() {
    const FRAME_BYTES: usize = 256 << 10;
    const BUDGET_BYTES: u64 = 3 * FRAME_BYTES as u64 + WINDOW_BYTES_MIN + 1000;
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    let out = frames_sized(&mut rng, 40, |_| FRAME_BYTES);
    let sent = requests_in(&out);
    let conditions = Conditions {
        loss_per_mille: 10,
        latency: Duration::from_micros(300),
        jitter: Duration::from_millis(1),
    };
    let mut sim = Simulation::with_budget(seed, conditions, App::Silent, out, BUDGET_BYTES);
    sim.run_to(sim.start + Duration::from_secs(5));
    let (requests, _) = &sim.accepted[0];
    assert_eq!(requests.in_flight(), 3, "seed {seed}");
    assert_eq!(
        sim.budget.in_use(),
        3 * FRAME_BYTES as u64 + WINDOW_BYTES_MIN
    );
    assert!(sim.server.waits_for_room());
    sim.app = App::Echo;
    sim.run_until(|sim| sim.client.answers_ended && sim.server.open() == 0);
    assert_eq!(answers(&sim.client.answers), sent, "seed {seed}");
    assert!(
        sim.budget_in_use_max <= BUDGET_BYTES,
        "{} bytes of frames held, budget {BUDGET_BYTES} (seed {seed})",
        sim.budget_in_use_max
    );
    assert_eq!(sim.budget.in_use(), 0);
}

/// A connection's receive window is paid from the shard's receive budget:
/// it starts at the smallest, grows while the connection delivers whole
/// frames and the budget has room beside one largest frame, the budget is
/// never exceeded on the way, and every byte comes back when it ends.
#[test]
fn a_delivering_connection_grows_its_window_within_the_budget() {
    const FRAME_BYTES: usize = 256 << 10;
    const FRAMES: u32 = 64;
    const BUDGET_BYTES: u64 = 24 << 20;
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    let out = frames_sized(&mut rng, FRAMES, |_| FRAME_BYTES);
    let sent = requests_in(&out);
    let conditions = Conditions {
        loss_per_mille: 5,
        latency: Duration::from_micros(300),
        jitter: Duration::from_micros(200),
    };
    let mut sim = Simulation::with_budget(seed, conditions, App::Echo, out, BUDGET_BYTES);
    sim.run_until(|sim| sim.client.answers_ended && sim.server.open() == 0);
    assert_eq!(answers(&sim.client.answers), sent, "seed {seed}");
    assert!(
        sim.window_bytes_max > WINDOW_BYTES_MIN,
        "the window never grew (seed {seed})"
    );
    assert!(
        sim.budget_in_use_max <= BUDGET_BYTES,
        "{} bytes held, budget {BUDGET_BYTES} (seed {seed})",
        sim.budget_in_use_max
    );
    assert_eq!(sim.budget.in_use(), 0, "seed {seed}");
}
