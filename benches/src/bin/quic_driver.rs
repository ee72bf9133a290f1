//! QUIC driver spike: how should a glommio shard take a QUIC stream in?
//!
//! One run measures, on loopback, the one-way throughput of one bidirectional
//! stream carrying `--total-mib` MiB in `--write-kib` KiB writes, from a client
//! that is always plain quinn on a tokio current-thread runtime (a tokio TCP
//! client for the TCP baseline), into these servers:
//!
//! - `tcp`: tokio `TcpListener`, reads into one reused buffer (baseline);
//! - `quinn`: quinn on a tokio current-thread runtime, `read_chunk` (baseline);
//! - `optionA`: the same quinn server hands every chunk through a
//!   `flume::bounded(64)` channel to a glommio executor thread, which copies it
//!   into a preallocated 64 MiB buffer (standing in for a segment's mmap);
//! - `optionB`: a glommio executor thread drives `quinn_proto` by hand on its
//!   own thread, `quinn_udp` does the GRO/GSO syscalls on a raw non-blocking
//!   socket, readiness comes from an io_uring `MSG_PEEK` on a dup of the fd;
//! - `optionB_timer`: the same driver, but it waits with a short glommio timer
//!   instead of readiness, to show what polling costs.
//!
//! Every figure is printed with its ratio to the baselines of the same run.
//! Server CPU is `getrusage(RUSAGE_THREAD)` taken at the end of each server
//! thread (summed for option A's two threads); process CPU is the
//! `getrusage(RUSAGE_SELF)` delta around a case (client + server + idle main).
//! Each case is bounded by `--timeout-s`; a failed, short or timed-out
//! transfer makes the program exit non-zero.

use std::{
    io::{self, IoSliceMut},
    net::{Ipv4Addr, SocketAddr, TcpListener as StdTcpListener, UdpSocket as StdUdpSocket},
    os::fd::{FromRawFd, IntoRawFd},
    path::PathBuf,
    sync::{mpsc, Arc},
    thread,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, ensure, Context, Result};
use bytes::{Bytes, BytesMut};
use clap::{Parser, ValueEnum};
use kelp_benches::baseline::{
    cpu_time, current_thread_runtime, parse_reply, quinn_accept, quinn_endpoint, quinn_reply,
    quinn_sink, tcp_sink, tls_configs, SinkReport as ServerReport, Tls, REPLY_BYTES, SERVER_NAME,
};
use quinn_proto::{
    ConnectionEvent, ConnectionHandle, DatagramEvent, Dir, EndpointConfig, Event, ReadError,
    StreamId,
};
use quinn_udp::{RecvMeta, UdpSocketState, BATCH_SIZE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bytes of the buffer that stands in for a segment's mmap buffer.
const SEGMENT_BUFFER_BYTES: usize = 64 << 20;
const PAGE_BYTES: usize = 4096;
/// Chunks in flight between the tokio thread and the shard in option A.
const HANDOFF_CHUNKS_MAX: usize = 64;
/// One receive slot: a GRO batch is one skb, and an skb carries at most 64 KiB.
const RECV_SLOT_BYTES: usize = 64 << 10;
/// Datagrams one turn of the option-B driver takes in before it transmits and
/// yields, so ACKs and flow-control credit go out while data keeps arriving.
const RECV_DATAGRAMS_PER_TURN_MAX: usize = 256;
/// Transmits per turn, as quinn's connection driver bounds them.
const TRANSMITS_PER_TURN_MAX: usize = 20;
/// Datagrams per GSO send, quinn's own cap (`MAX_TRANSMIT_SEGMENTS`).
const GSO_SEGMENTS_MAX: usize = 10;
/// How long the driver sleeps with no connection timer armed.
const IDLE_WAIT_MAX: Duration = Duration::from_millis(100);
/// Retry interval after a send hit a full socket buffer: glommio offers no
/// write readiness, and on loopback this happens rarely.
const SEND_RETRY_INTERVAL: Duration = Duration::from_micros(50);
/// Poll interval of `optionB_timer`.
const TIMER_POLL_INTERVAL: Duration = Duration::from_micros(50);
const GIGABYTE: f64 = 1e9;
const MEGABYTE: f64 = 1e6;

const _: () = assert!(SEGMENT_BUFFER_BYTES % PAGE_BYTES == 0);
const _: () = assert!(RECV_SLOT_BYTES >= u16::MAX as usize);

#[derive(Parser, Debug)]
#[command(
    about = "Throughput of one QUIC stream into a glommio shard: options A and B \
                   against raw quinn and raw TCP, on loopback"
)]
struct Args {
    /// MiB carried by the stream in each case.
    #[arg(long, default_value_t = 1024)]
    total_mib: u64,
    /// KiB per client write.
    #[arg(long, default_value_t = 1024)]
    write_kib: usize,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Time limit of each case, seconds.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Cases to run, comma separated; ratios need `tcp` and `quinn`.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Case::ALL)]
    cases: Vec<Case>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Case {
    #[value(name = "tcp")]
    Tcp,
    #[value(name = "quinn")]
    Quinn,
    #[value(name = "optionA")]
    OptionA,
    #[value(name = "optionB")]
    OptionB,
    #[value(name = "optionB_timer")]
    OptionBTimer,
}

impl Case {
    const ALL: [Case; 5] = [
        Case::Tcp,
        Case::Quinn,
        Case::OptionA,
        Case::OptionB,
        Case::OptionBTimer,
    ];

    fn name(self) -> &'static str {
        match self {
            Case::Tcp => "tcp",
            Case::Quinn => "quinn",
            Case::OptionA => "optionA",
            Case::OptionB => "optionB",
            Case::OptionBTimer => "optionB_timer",
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Transfer {
    total_bytes: u64,
    write_bytes: usize,
}

impl Transfer {
    fn writes(self) -> u64 {
        self.total_bytes / self.write_bytes as u64
    }
}

struct ClientReport {
    bytes_confirmed: u64,
    elapsed: Duration,
}

enum Finished {
    Server(Result<ServerReport>),
    Client(Result<ClientReport>),
}

struct CaseResult {
    case: Case,
    bytes: u64,
    elapsed: Duration,
    server_cpu: Duration,
    process_cpu: Duration,
}

impl CaseResult {
    fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / MEGABYTE / self.elapsed.as_secs_f64()
    }

    fn per_gb(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() / (self.bytes as f64 / GIGABYTE)
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let transfer = Transfer {
        total_bytes: args.total_mib << 20,
        write_bytes: args.write_kib << 10,
    };
    ensure!(
        transfer.write_bytes > 0 && transfer.total_bytes % transfer.write_bytes as u64 == 0,
        "--total-mib must be a whole number of --write-kib writes"
    );
    let tls = tls_configs()?;
    let timeout = Duration::from_secs(args.timeout_s);

    let mut results = Vec::new();
    for &case in &args.cases {
        // A failed case ends the run: its threads may still be running, and
        // returning from main ends them with the process.
        let result = run_case(case, transfer, &tls, timeout)
            .with_context(|| format!("case {} failed", case.name()))?;
        results.push(result);
    }
    report(&results, &args, transfer)
}

/// Runs one case: a server thread (two for option A), then a client thread,
/// and waits for both within `timeout`.
fn run_case(case: Case, transfer: Transfer, tls: &Tls, timeout: Duration) -> Result<CaseResult> {
    let process_cpu_before = cpu_time(libc::RUSAGE_SELF);
    let (finished_tx, finished_rx) = mpsc::channel();
    let addr = start_server(case, tls, finished_tx.clone())?;
    let client_config = tls.client.clone();
    let client_tx = finished_tx;
    thread::Builder::new()
        .name("client".into())
        .spawn(move || {
            let result = current_thread_runtime().and_then(|rt| match case {
                Case::Tcp => rt.block_on(tcp_client(addr, transfer)),
                _ => rt.block_on(quic_client(addr, transfer, client_config)),
            });
            let _ = client_tx.send(Finished::Client(result));
        })?;

    let deadline = Instant::now() + timeout;
    let (mut server, mut client) = (None, None);
    while server.is_none() || client.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        match finished_rx.recv_timeout(left) {
            Ok(Finished::Server(r)) => server = Some(r.context("server")?),
            Ok(Finished::Client(r)) => client = Some(r.context("client")?),
            Err(_) => bail!("timed out after {} s", timeout.as_secs()),
        }
    }
    let (server, client) = match (server, client) {
        (Some(s), Some(c)) => (s, c),
        _ => bail!("a side finished without a report"),
    };
    let process_cpu = cpu_time(libc::RUSAGE_SELF).saturating_sub(process_cpu_before);
    ensure!(
        server.bytes == transfer.total_bytes && client.bytes_confirmed == transfer.total_bytes,
        "incomplete transfer: sent {}, server took {}, server confirmed {}",
        transfer.total_bytes,
        server.bytes,
        client.bytes_confirmed
    );
    Ok(CaseResult {
        case,
        bytes: transfer.total_bytes,
        elapsed: client.elapsed,
        server_cpu: server.cpu,
        process_cpu,
    })
}

/// Binds the server socket on this thread, so the address is known before the
/// client starts, and moves it into the server thread.
fn start_server(case: Case, tls: &Tls, done: mpsc::Sender<Finished>) -> Result<SocketAddr> {
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let server_config = tls.server.clone();
    let (addr, body): (SocketAddr, Box<dyn FnOnce() -> Result<ServerReport> + Send>) = match case {
        Case::Tcp => {
            let listener = StdTcpListener::bind(loopback)?;
            listener.set_nonblocking(true)?;
            (listener.local_addr()?, Box::new(move || tcp_sink(listener)))
        }
        Case::Quinn | Case::OptionA => {
            let socket = StdUdpSocket::bind(loopback)?;
            let addr = socket.local_addr()?;
            if case == Case::Quinn {
                (addr, Box::new(move || quinn_sink(socket, server_config)))
            } else {
                (
                    addr,
                    Box::new(move || option_a_server(socket, server_config)),
                )
            }
        }
        Case::OptionB | Case::OptionBTimer => {
            let socket = StdUdpSocket::bind(loopback)?;
            let wait = if case == Case::OptionB {
                WaitMode::UringPeek
            } else {
                WaitMode::TimerPoll(TIMER_POLL_INTERVAL)
            };
            (
                socket.local_addr()?,
                Box::new(move || option_b_server(socket, server_config, wait)),
            )
        }
    };
    thread::Builder::new()
        .name(format!("server-{}", case.name()))
        .spawn(move || {
            let _ = done.send(Finished::Server(body()));
        })?;
    Ok(addr)
}

// ---------------------------------------------------------------- clients

async fn tcp_client(addr: SocketAddr, transfer: Transfer) -> Result<ClientReport> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let data = vec![0xA5u8; transfer.write_bytes];
    let start = Instant::now();
    for _ in 0..transfer.writes() {
        stream.write_all(&data).await?;
    }
    stream.shutdown().await?;
    let mut reply = Vec::with_capacity(REPLY_BYTES);
    stream.read_to_end(&mut reply).await?;
    let elapsed = start.elapsed();
    Ok(ClientReport {
        bytes_confirmed: parse_reply(&reply)?,
        elapsed,
    })
}

async fn quic_client(
    addr: SocketAddr,
    transfer: Transfer,
    config: quinn::ClientConfig,
) -> Result<ClientReport> {
    let mut endpoint = quinn::Endpoint::client((Ipv4Addr::LOCALHOST, 0).into())?;
    endpoint.set_default_client_config(config);
    let connection = endpoint.connect(addr, SERVER_NAME)?.await?;
    let (mut send, mut recv) = connection.open_bi().await?;
    let data = vec![0xA5u8; transfer.write_bytes];
    let start = Instant::now();
    for _ in 0..transfer.writes() {
        send.write_all(&data).await?;
    }
    send.finish()?;
    // The reply comes only after the server has taken in every byte, so the
    // clock covers the whole transfer, not just the client's buffers.
    let reply = recv.read_to_end(REPLY_BYTES).await?;
    let elapsed = start.elapsed();
    connection.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    Ok(ClientReport {
        bytes_confirmed: parse_reply(&reply)?,
        elapsed,
    })
}

// --------------------------------------------------------------- option A

fn option_a_server(
    socket: StdUdpSocket,
    server_config: quinn::ServerConfig,
) -> Result<ServerReport> {
    let (chunk_tx, chunk_rx) = flume::bounded::<Bytes>(HANDOFF_CHUNKS_MAX);
    let (count_tx, count_rx) = flume::bounded::<u64>(1);
    let shard = thread::Builder::new().name("optionA-shard".into()).spawn(
        move || -> Result<Duration> {
            shard_executor()?.run(async move {
                let mut segment = SegmentBuffer::new(SEGMENT_BUFFER_BYTES);
                // flume wakes this glommio task from the tokio thread; a
                // parked executor is woken through its eventfd.
                while let Ok(chunk) = chunk_rx.recv_async().await {
                    segment.append(&chunk);
                }
                let _ = count_tx.send(segment.appended_bytes());
            });
            Ok(cpu_time(libc::RUSAGE_THREAD))
        },
    )?;

    let rt = current_thread_runtime()?;
    let bytes = rt.block_on(async move {
        let endpoint = quinn_endpoint(socket, server_config)?;
        let (connection, send, mut recv) = quinn_accept(&endpoint).await?;
        while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
            chunk_tx
                .send_async(chunk.bytes)
                .await
                .map_err(|_| anyhow!("shard stopped taking chunks"))?;
        }
        drop(chunk_tx);
        // Only bytes that reached the segment buffer count as received.
        let bytes = count_rx.recv_async().await?;
        quinn_reply(connection, send, bytes).await?;
        anyhow::Ok(bytes)
    })?;
    let shard_cpu = shard
        .join()
        .map_err(|_| anyhow!("option A shard thread panicked"))??;
    Ok(ServerReport {
        bytes,
        cpu: cpu_time(libc::RUSAGE_THREAD) + shard_cpu,
    })
}

// --------------------------------------------------------------- option B

/// How the option-B driver waits when it has nothing to do.
#[derive(Clone, Copy, Debug)]
enum WaitMode {
    /// A one-byte `MSG_PEEK` recvmsg through glommio's io_uring on a dup of
    /// the socket: it completes when a datagram is queued and consumes
    /// nothing. glommio exposes no fd readiness, but this is readiness.
    UringPeek,
    /// Sleep on a glommio timer and try again.
    TimerPoll(Duration),
}

fn option_b_server(
    socket: StdUdpSocket,
    server_config: quinn::ServerConfig,
    wait: WaitMode,
) -> Result<ServerReport> {
    let bytes = shard_executor()?.run(async move {
        let driver = ShardDriver::new(socket, server_config, wait)?;
        driver.run().await
    })?;
    Ok(ServerReport {
        bytes,
        cpu: cpu_time(libc::RUSAGE_THREAD),
    })
}

/// The socket side of the option-B driver: non-blocking UDP with quinn-udp's
/// GRO/GSO/ECN/pktinfo handling, plus a readiness handle glommio can wait on.
struct UdpIo {
    socket: StdUdpSocket,
    state: UdpSocketState,
    /// `BATCH_SIZE` slots of `RECV_SLOT_BYTES`, one per recvmmsg message.
    recv_buf: Vec<u8>,
    readiness: Option<glommio::net::UdpSocket>,
    wait: WaitMode,
}

impl UdpIo {
    fn new(socket: StdUdpSocket, wait: WaitMode) -> Result<Self> {
        // Sets O_NONBLOCK, UDP_GRO, IP_PKTINFO, IP_RECVTOS and no-fragment.
        let state = UdpSocketState::new((&socket).into())?;
        let readiness = match wait {
            WaitMode::UringPeek => {
                let dup = socket.try_clone().context("dup of the QUIC socket")?;
                // SAFETY: `into_raw_fd` hands over sole ownership of a valid,
                // open descriptor, which the glommio socket then owns.
                Some(unsafe { glommio::net::UdpSocket::from_raw_fd(dup.into_raw_fd()) })
            }
            WaitMode::TimerPoll(_) => None,
        };
        Ok(Self {
            socket,
            state,
            recv_buf: vec![0; RECV_SLOT_BYTES * BATCH_SIZE],
            readiness,
            wait,
        })
    }

    fn recv(&mut self, metas: &mut [RecvMeta; BATCH_SIZE]) -> io::Result<usize> {
        let mut slots = self.recv_buf.chunks_mut(RECV_SLOT_BYTES);
        let mut iovs: [IoSliceMut<'_>; BATCH_SIZE] = std::array::from_fn(|_| {
            IoSliceMut::new(slots.next().expect("recv_buf holds BATCH_SIZE slots"))
        });
        self.state.recv((&self.socket).into(), &mut iovs, metas)
    }

    fn slot(&self, index: usize, len: usize) -> &[u8] {
        &self.recv_buf[index * RECV_SLOT_BYTES..][..len]
    }

    /// Only `WouldBlock` comes back as an error: quinn-udp logs and drops
    /// other send errors, as UDP loss is QUIC's to repair.
    fn send(&self, transmit: &quinn_proto::Transmit, contents: &[u8]) -> io::Result<()> {
        let transmit = quinn_udp::Transmit {
            destination: transmit.destination,
            ecn: transmit.ecn.map(udp_ecn),
            contents,
            segment_size: transmit.segment_size,
            src_ip: transmit.src_ip,
        };
        self.state.send((&self.socket).into(), &transmit)
    }

    /// Waits until the socket is readable or `timeout` passed.
    async fn wait(&self, timeout: Duration) -> Result<()> {
        match (self.wait, &self.readiness) {
            (WaitMode::UringPeek, Some(readiness)) => {
                let mut probe = [0u8; 1];
                let readable = async {
                    match readiness.peek_from(&mut probe).await {
                        Ok(_) => Ok(()),
                        Err(e) => {
                            let e = io::Error::from(e);
                            // Queued ICMP errors surface here too; the recv
                            // path skips them, so they are readiness as well.
                            match e.kind() {
                                io::ErrorKind::ConnectionRefused
                                | io::ErrorKind::ConnectionReset => Ok(()),
                                _ => Err(anyhow!(e).context("MSG_PEEK readiness probe")),
                            }
                        }
                    }
                };
                let timer = async {
                    glommio::timer::sleep(timeout).await;
                    Ok(())
                };
                futures_lite::future::or(readable, timer).await
            }
            (WaitMode::TimerPoll(interval), _) => {
                glommio::timer::sleep(timeout.min(interval)).await;
                Ok(())
            }
            (WaitMode::UringPeek, None) => bail!("no readiness socket"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Taking stream bytes in.
    Receiving,
    /// The FIN arrived and the byte count was written back; waiting for the
    /// client to close.
    Replied,
    /// The client closed the connection: done.
    Closed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TransmitState {
    /// `poll_transmit` has nothing more.
    Idle,
    /// The per-turn bound stopped us; come back without waiting.
    MoreToSend,
    /// The socket buffer is full; the transmit is kept for a retry.
    Blocked,
}

/// The protocol side of the option-B driver: quinn-proto's endpoint and the
/// one connection this spike serves, fed and drained by `ShardDriver`.
struct QuicServer {
    endpoint: quinn_proto::Endpoint,
    connection: Option<(ConnectionHandle, quinn_proto::Connection)>,
    stream: Option<StreamId>,
    phase: Phase,
    segment: SegmentBuffer,
    /// Endpoint-generated packets (refusals, stateless resets) land here.
    response_buf: Vec<u8>,
    /// The connection's current GSO batch.
    send_buf: Vec<u8>,
    /// A transmit that hit `WouldBlock`; its bytes are still in `send_buf`.
    blocked: Option<quinn_proto::Transmit>,
    gso_segments_max: usize,
}

impl QuicServer {
    /// Feeds one received buffer, which GRO may have filled with several
    /// datagrams of `meta.stride` bytes, to the endpoint.
    fn on_receive(&mut self, now: Instant, meta: &RecvMeta, data: &[u8], io: &UdpIo) {
        let stride = if meta.stride == 0 {
            data.len()
        } else {
            meta.stride
        };
        for datagram in data.chunks(stride) {
            // quinn-proto decrypts in place and hands out stream chunks that
            // share this allocation, so each datagram needs its own buffer.
            let datagram = BytesMut::from(datagram);
            self.response_buf.clear();
            match self.endpoint.handle(
                now,
                meta.addr,
                meta.dst_ip,
                meta.ecn.map(proto_ecn),
                datagram,
                &mut self.response_buf,
            ) {
                Some(DatagramEvent::ConnectionEvent(handle, event)) => self.on_event(handle, event),
                Some(DatagramEvent::NewConnection(incoming)) => self.accept(now, incoming, io),
                Some(DatagramEvent::Response(transmit)) => {
                    // Best effort: a lost response is like a lost datagram.
                    let _ = io.send(&transmit, &self.response_buf[..transmit.size]);
                }
                None => {}
            }
        }
    }

    fn on_event(&mut self, handle: ConnectionHandle, event: ConnectionEvent) {
        if let Some((ours, connection)) = self.connection.as_mut() {
            if *ours == handle {
                connection.handle_event(event);
            }
        }
    }

    fn accept(&mut self, now: Instant, incoming: quinn_proto::Incoming, io: &UdpIo) {
        self.response_buf.clear();
        if self.connection.is_some() {
            // The spike serves one connection; refusing (not ignoring) tells
            // the peer at once.
            let transmit = self.endpoint.refuse(incoming, &mut self.response_buf);
            let _ = io.send(&transmit, &self.response_buf[..transmit.size]);
            return;
        }
        match self
            .endpoint
            .accept(incoming, now, &mut self.response_buf, None)
        {
            Ok((handle, connection)) => self.connection = Some((handle, connection)),
            Err(e) => {
                if let Some(transmit) = e.response {
                    let _ = io.send(&transmit, &self.response_buf[..transmit.size]);
                }
            }
        }
    }

    /// Runs timers, routes endpoint events, takes application events, reads
    /// the stream and writes the reply. Does no I/O of its own.
    fn drive(&mut self, now: Instant) -> Result<()> {
        let Some((handle, connection)) = self.connection.as_mut() else {
            return Ok(());
        };
        if connection.poll_timeout().is_some_and(|at| at <= now) {
            connection.handle_timeout(now);
        }
        // The connection asks the endpoint for fresh connection IDs and
        // reports retired ones and its end here; without this routing the
        // peer runs out of CIDs and the endpoint leaks the connection.
        let mut drained = false;
        while let Some(event) = connection.poll_endpoint_events() {
            drained |= event.is_drained();
            if let Some(reply) = self.endpoint.handle_event(*handle, event) {
                connection.handle_event(reply);
            }
        }
        while let Some(event) = connection.poll() {
            if let Event::ConnectionLost { reason } = event {
                ensure!(
                    self.phase == Phase::Replied,
                    "connection lost mid-transfer: {reason}"
                );
                self.phase = Phase::Closed;
            }
            // Stream events need no handling: the stream is polled below on
            // every turn, which covers Opened and Readable.
        }
        if drained {
            ensure!(
                self.phase != Phase::Receiving,
                "connection drained mid-transfer"
            );
            self.phase = Phase::Closed;
            self.connection = None;
            return Ok(());
        }
        if self.stream.is_none() {
            self.stream = connection.streams().accept(Dir::Bi);
        }
        let Some(id) = self.stream else {
            return Ok(());
        };
        if self.phase != Phase::Receiving {
            return Ok(());
        }
        let mut recv = connection.recv_stream(id);
        let mut chunks = recv.read(true).context("stream readable")?;
        let mut finished = false;
        // Bounded by the stream's receive window: quinn-proto buffers no more.
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => {
                    ensure!(
                        chunk.offset == self.segment.appended_bytes(),
                        "ordered read returned offset {}, expected {}",
                        chunk.offset,
                        self.segment.appended_bytes()
                    );
                    self.segment.append(&chunk.bytes);
                }
                Ok(None) => {
                    finished = true;
                    break;
                }
                Err(ReadError::Blocked) => break,
                Err(ReadError::Reset(code)) => bail!("client reset the stream: {code}"),
            }
        }
        // finalize() queues MAX_STREAM_DATA/MAX_DATA for the bytes just
        // consumed; it goes out on the next poll_transmit. Skipping the
        // transmit after a read stalls the sender on flow control.
        let _ = chunks.finalize();
        if finished {
            let reply = self.segment.appended_bytes().to_le_bytes();
            let mut send = connection.send_stream(id);
            let written = send.write(&reply).context("write reply")?;
            ensure!(
                written == reply.len(),
                "reply did not fit the stream window"
            );
            send.finish().context("finish reply")?;
            self.phase = Phase::Replied;
        }
        Ok(())
    }

    /// Sends what the connection has queued: handshake, ACKs, flow-control
    /// credit, the reply, retransmits.
    fn transmit(&mut self, now: Instant, io: &UdpIo) -> Result<TransmitState> {
        let Some((_, connection)) = self.connection.as_mut() else {
            return Ok(TransmitState::Idle);
        };
        for _ in 0..TRANSMITS_PER_TURN_MAX {
            let transmit = match self.blocked.take() {
                Some(transmit) => transmit,
                None => {
                    self.send_buf.clear();
                    match connection.poll_transmit(now, self.gso_segments_max, &mut self.send_buf) {
                        Some(transmit) => transmit,
                        None => return Ok(TransmitState::Idle),
                    }
                }
            };
            match io.send(&transmit, &self.send_buf[..transmit.size]) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.blocked = Some(transmit);
                    return Ok(TransmitState::Blocked);
                }
                Err(e) => return Err(e).context("sendmsg on the QUIC socket"),
            }
        }
        Ok(TransmitState::MoreToSend)
    }

    fn next_timeout(&mut self) -> Option<Instant> {
        self.connection
            .as_mut()
            .and_then(|(_, connection)| connection.poll_timeout())
    }
}

/// Option B: one glommio task owns the socket and the quinn-proto state and
/// turns the crank like quinn's own drivers: take datagrams in, let the
/// protocol react, transmit, then wait for the socket or the next timer.
struct ShardDriver {
    io: UdpIo,
    quic: QuicServer,
}

impl ShardDriver {
    fn new(
        socket: StdUdpSocket,
        server_config: quinn::ServerConfig,
        wait: WaitMode,
    ) -> Result<Self> {
        let io = UdpIo::new(socket, wait)?;
        // MTU discovery only where the socket forbids fragmentation, as quinn.
        let allow_mtud = !io.state.may_fragment();
        let endpoint = quinn_proto::Endpoint::new(
            Arc::new(EndpointConfig::default()),
            Some(Arc::new(server_config)),
            allow_mtud,
            None,
        );
        let gso_segments_max = io.state.max_gso_segments().min(GSO_SEGMENTS_MAX);
        Ok(Self {
            io,
            quic: QuicServer {
                endpoint,
                connection: None,
                stream: None,
                phase: Phase::Receiving,
                segment: SegmentBuffer::new(SEGMENT_BUFFER_BYTES),
                response_buf: Vec::new(),
                send_buf: Vec::new(),
                blocked: None,
                gso_segments_max,
            },
        })
    }

    async fn run(mut self) -> Result<u64> {
        let mut metas = [RecvMeta::default(); BATCH_SIZE];
        loop {
            let now = Instant::now();
            let more_to_receive = self.receive(now, &mut metas)?;
            self.quic.drive(now)?;
            let transmit = self.quic.transmit(now, &self.io)?;
            if self.quic.phase == Phase::Closed {
                return Ok(self.quic.segment.appended_bytes());
            }
            if more_to_receive || transmit == TransmitState::MoreToSend {
                // Bounded work per turn: let other tasks of the shard run.
                glommio::yield_if_needed().await;
                continue;
            }
            let mut timeout = match self.quic.next_timeout() {
                Some(at) => at.saturating_duration_since(Instant::now()),
                None => IDLE_WAIT_MAX,
            };
            if transmit == TransmitState::Blocked {
                timeout = timeout.min(SEND_RETRY_INTERVAL);
            }
            if !timeout.is_zero() {
                self.io.wait(timeout).await?;
            }
        }
    }

    /// Takes datagrams until the socket is empty (false) or the per-turn
    /// bound is reached (true: more may be waiting).
    fn receive(&mut self, now: Instant, metas: &mut [RecvMeta; BATCH_SIZE]) -> Result<bool> {
        let mut datagrams = 0;
        while datagrams < RECV_DATAGRAMS_PER_TURN_MAX {
            let messages = match self.io.recv(metas) {
                Ok(messages) => messages,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                // ICMP errors queued on an unconnected socket mean nothing to
                // QUIC and may be forged; quinn skips them too.
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => continue,
                Err(e) => return Err(e).context("recvmmsg on the QUIC socket"),
            };
            for (index, meta) in metas.iter().enumerate().take(messages) {
                let data = self.io.slot(index, meta.len);
                datagrams += meta.len.div_ceil(meta.stride.max(1));
                self.quic.on_receive(now, meta, data, &self.io);
            }
        }
        Ok(true)
    }
}

fn proto_ecn(ecn: quinn_udp::EcnCodepoint) -> quinn_proto::EcnCodepoint {
    match ecn {
        quinn_udp::EcnCodepoint::Ect0 => quinn_proto::EcnCodepoint::Ect0,
        quinn_udp::EcnCodepoint::Ect1 => quinn_proto::EcnCodepoint::Ect1,
        quinn_udp::EcnCodepoint::Ce => quinn_proto::EcnCodepoint::Ce,
    }
}

fn udp_ecn(ecn: quinn_proto::EcnCodepoint) -> quinn_udp::EcnCodepoint {
    match ecn {
        quinn_proto::EcnCodepoint::Ect0 => quinn_udp::EcnCodepoint::Ect0,
        quinn_proto::EcnCodepoint::Ect1 => quinn_udp::EcnCodepoint::Ect1,
        quinn_proto::EcnCodepoint::Ce => quinn_udp::EcnCodepoint::Ce,
    }
}

// ------------------------------------------------------------ shared parts

/// Stands in for a segment's mmap buffer: preallocated, page-aligned and
/// pre-faulted, so the copy into it costs what the real copy would. Wraps
/// at the end; only the count of appended bytes is kept.
struct SegmentBuffer {
    storage: Vec<u8>,
    start: usize,
    position: usize,
    appended: u64,
}

impl SegmentBuffer {
    fn new(len: usize) -> Self {
        // Filling with a non-zero byte touches every page now rather than
        // during the measured copy.
        let storage = vec![0x5Au8; len + PAGE_BYTES];
        let start = storage.as_ptr().align_offset(PAGE_BYTES);
        Self {
            storage,
            start,
            position: 0,
            appended: 0,
        }
    }

    fn append(&mut self, mut src: &[u8]) {
        self.appended += src.len() as u64;
        let buffer = &mut self.storage[self.start..self.start + SEGMENT_BUFFER_BYTES];
        while !src.is_empty() {
            let n = (buffer.len() - self.position).min(src.len());
            buffer[self.position..self.position + n].copy_from_slice(&src[..n]);
            self.position = (self.position + n) % buffer.len();
            src = &src[n..];
        }
    }

    fn appended_bytes(&self) -> u64 {
        self.appended
    }
}

/// The executor every shard thread uses: small enough to register its
/// buffers under an 8 MiB memlock limit.
fn shard_executor() -> Result<glommio::LocalExecutor> {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(1 << 20)
        .ring_depth(2048)
        .make()
        .map_err(|e| anyhow!("glommio executor: {e}"))
}

// ----------------------------------------------------------------- output

fn report(results: &[CaseResult], args: &Args, transfer: Transfer) -> Result<()> {
    let baseline = |case| {
        results
            .iter()
            .find(|r| r.case == case)
            .map(CaseResult::mb_per_s)
    };
    let (quinn, tcp) = (baseline(Case::Quinn), baseline(Case::Tcp));
    let ratio = |value: f64, base: Option<f64>| base.map(|base| value / base);
    let fmt_ratio = |r: Option<f64>| r.map_or("n/a".to_string(), |r| format!("{r:.2}"));

    let mut rows = Vec::new();
    for r in results {
        let mb_per_s = r.mb_per_s();
        let (to_quinn, to_tcp) = (ratio(mb_per_s, quinn), ratio(mb_per_s, tcp));
        println!(
            "{:<14} MB/s={:<7.1} ratio_to_raw_quinn={} ratio_to_raw_tcp={}  server_cpu_s={:.2} \
             server_cpu_s_per_gb={:.2} process_cpu_s_per_gb={:.2}",
            r.case.name(),
            mb_per_s,
            fmt_ratio(to_quinn),
            fmt_ratio(to_tcp),
            r.server_cpu.as_secs_f64(),
            r.per_gb(r.server_cpu),
            r.per_gb(r.process_cpu),
        );
        rows.push(serde_json::json!({
            "case": r.case.name(),
            "bytes": r.bytes,
            "elapsed_s": r.elapsed.as_secs_f64(),
            "mb_per_s": mb_per_s,
            "ratio_to_raw_quinn": to_quinn,
            "ratio_to_raw_tcp": to_tcp,
            "server_cpu_s": r.server_cpu.as_secs_f64(),
            "server_cpu_s_per_gb": r.per_gb(r.server_cpu),
            "process_cpu_s_per_gb": r.per_gb(r.process_cpu),
        }));
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "total_bytes": transfer.total_bytes,
            "write_bytes": transfer.write_bytes,
            "server_cpu": "getrusage(RUSAGE_THREAD) at the end of each server thread, summed",
            "process_cpu": "getrusage(RUSAGE_SELF) delta around the case",
            "cases": rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}
