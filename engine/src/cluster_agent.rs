//! The broker's side of a cluster (`kelp serve --control ADDR`): a thread
//! that registers the broker with the control plane, reports each open
//! segment's load every second, forwards the admin requests clients send to
//! any shard, and leaves gracefully when the broker stops (the control
//! plane seals the broker's segments here and opens successors elsewhere
//! before the broker flushes and exits).
//!
//! The control plane talks back through the shards: it sends each layout
//! change to shard 0 as an `ApplyLayout` request, which reaches every shard
//! over their command channels without passing through this thread, so a
//! request this thread forwards can never wait for itself.
//!
//! One blocking TCP connection carries every call, in order. A broken
//! connection is reopened on the next call, and the broker registers again
//! with the id it has: a control plane that restarted takes it back
//! without moving anything.

use std::collections::HashMap;
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::{Duration, Instant};

use control::frame_stream::read_frame;
use wire::frame::{encode_frame, FRAME_HEADER_BYTES};
use wire::message::{SegmentLoadReport, ShardAddress};
use wire::{ErrorCode, FrameType, Request, Response};

use crate::config::BrokerConfig;
use crate::control_plane::{shut_down_shards, ControlRequest, ShardCommand};
use crate::error::EngineError;
use crate::serve_error::ServeError;
use crate::shard::SegmentLoadFigures;

/// How long a connection attempt to the control plane may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the control plane may take to answer. Leaving and splitting
/// wait for segments to be sealed and flushed.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a starting broker keeps trying to reach the control plane.
const JOIN_PATIENCE: Duration = Duration::from_secs(30);
/// How long a shard may take to report its counters.
const SHARD_REPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// The file in the data directory that keeps the broker's id.
const BROKER_ID_FILE: &str = "broker-id";

/// A frame answered by the control plane: its type and payload.
pub(crate) type Answer = (FrameType, Vec<u8>);

/// One blocking connection to the control plane, reopened when it breaks.
#[derive(Debug)]
pub(crate) struct ControlLink {
    address: String,
    stream: Option<TcpStream>,
    next_request_id: u32,
}

impl ControlLink {
    pub(crate) fn new(address: &str) -> ControlLink {
        ControlLink {
            address: address.to_owned(),
            stream: None,
            next_request_id: 1,
        }
    }

    /// Whether the last call left a usable connection.
    fn is_connected(&self) -> bool {
        self.stream.is_some()
    }

    fn connect(&mut self) -> Result<&mut TcpStream, String> {
        if self.stream.is_none() {
            let addr = self
                .address
                .to_socket_addrs()
                .map_err(|e| format!("resolve control plane {}: {e}", self.address))?
                .next()
                .ok_or_else(|| format!("control plane {} resolves to nothing", self.address))?;
            let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
                .map_err(|e| format!("connect to control plane {}: {e}", self.address))?;
            stream
                .set_read_timeout(Some(ANSWER_TIMEOUT))
                .and_then(|()| stream.set_write_timeout(Some(ANSWER_TIMEOUT)))
                .and_then(|()| stream.set_nodelay(true))
                .map_err(|e| format!("configure control plane connection: {e}"))?;
            self.stream = Some(stream);
        }
        self.stream
            .as_mut()
            .ok_or_else(|| "no control plane connection".to_owned())
    }

    /// Send one request and wait for its answer.
    pub(crate) fn call(&mut self, request: &Request<'_>) -> Result<Answer, String> {
        let mut frame = Vec::new();
        let id = self.take_request_id();
        request.encode(id, &mut frame);
        self.exchange(id, &frame)
    }

    /// Send a request frame's payload as it came from a client.
    pub(crate) fn call_raw(
        &mut self,
        frame_type: FrameType,
        payload: &[u8],
    ) -> Result<Answer, String> {
        let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
        let id = self.take_request_id();
        encode_frame(&mut frame, frame_type, id, payload);
        self.exchange(id, &frame)
    }

    fn take_request_id(&mut self) -> u32 {
        let id = self.next_request_id;
        self.next_request_id = self.next_request_id.wrapping_add(1);
        id
    }

    fn exchange(&mut self, id: u32, frame: &[u8]) -> Result<Answer, String> {
        let result = self.try_exchange(id, frame);
        if result.is_err() {
            // Whatever the failure, the stream's position is unknown.
            self.stream = None;
        }
        result
    }

    fn try_exchange(&mut self, id: u32, frame: &[u8]) -> Result<Answer, String> {
        let address = self.address.clone();
        let stream = self.connect()?;
        let failed = |e: &dyn std::fmt::Display| format!("control plane {address}: {e}");
        stream.write_all(frame).map_err(|e| failed(&e))?;
        let mut payload = Vec::new();
        let header = read_frame(stream, &mut payload)
            .map_err(|e| failed(&e))?
            .ok_or_else(|| failed(&"closed the connection without answering"))?;
        if header.request_id != id || header.frame_type.is_request() {
            return Err(failed(&format!(
                "answer {:?} to request {} does not match request {id}",
                header.frame_type, header.request_id
            )));
        }
        Ok((header.frame_type, payload))
    }
}

/// What a broker learns when it joins.
#[derive(Debug)]
pub(crate) struct Joined {
    pub(crate) link: ControlLink,
    pub(crate) id: u32,
    /// The filer every broker of the cluster shares, as the control plane
    /// named it (a [`filer::FilerUrl`]: `file:///dir` or `s3://bucket/prefix`).
    pub(crate) filer: String,
}

/// Register with the control plane before the shards start: the answer
/// names the broker's id and the filer the shards store in. Keeps trying
/// for [`JOIN_PATIENCE`] (the control plane may be starting too).
pub(crate) fn join(
    config: &BrokerConfig,
    control: &str,
    shards: &[ShardAddress],
) -> Result<Joined, EngineError> {
    let id_path = config.data_dir.join(BROKER_ID_FILE);
    let known = read_broker_id(&id_path)?;
    let mut link = ControlLink::new(control);
    let deadline = Instant::now() + JOIN_PATIENCE;
    let (id, filer) = loop {
        match register(&mut link, config, known, shards) {
            Ok(joined) => break joined,
            Err(e) if !link.is_connected() && Instant::now() < deadline => {
                log::warn!("{e}; retrying");
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => return Err(EngineError::Config(format!("joining the cluster: {e}"))),
        }
    };
    if known != Some(id) {
        std::fs::write(&id_path, format!("{id}\n"))
            .map_err(|e| EngineError::io("write broker id", &id_path, e))?;
    }
    log::info!("joined the cluster at {control} as broker {id}; filer {filer}");
    Ok(Joined { link, id, filer })
}

fn read_broker_id(path: &Path) -> Result<Option<u32>, EngineError> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            EngineError::Config(format!(
                "{} holds {:?}, not a broker id",
                path.display(),
                text.trim()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(EngineError::io("read broker id", path, e)),
    }
}

fn register(
    link: &mut ControlLink,
    config: &BrokerConfig,
    id: Option<u32>,
    shards: &[ShardAddress],
) -> Result<(u32, String), String> {
    let count = shards.len() as u64;
    let (frame_type, payload) = link.call(&Request::RegisterBroker {
        id,
        shards: shards.to_vec(),
        capacity_bytes_per_s: config.capacity_bytes_per_s_per_shard.saturating_mul(count),
        capacity_records_per_s: config
            .capacity_records_per_s_per_shard
            .saturating_mul(count),
    })?;
    match Response::decode(frame_type, &payload).map_err(|e| e.to_string())? {
        Response::Registered { id: given, filer } => match id {
            Some(kept) if kept != given => Err(format!(
                "the control plane registered broker {kept} as {given}"
            )),
            _ => Ok((given, filer)),
        },
        Response::Error { code, message } => Err(format!(
            "the control plane refused to register: {code:?}: {message}"
        )),
        other => Err(format!("unexpected answer to a registration: {other:?}")),
    }
}

/// The thread that speaks for the broker once it runs.
pub(crate) struct ClusterAgent {
    link: ControlLink,
    id: u32,
    config: BrokerConfig,
    shard_addresses: Vec<ShardAddress>,
    shards: Vec<flume::Sender<ShardCommand>>,
    /// Whether the control plane knows this broker on the current link.
    registered: bool,
    /// Each open segment's counters at the previous report.
    last: HashMap<(String, u32), (u64, u64)>,
    last_at: Instant,
}

impl ClusterAgent {
    pub(crate) fn new(
        joined: Joined,
        config: BrokerConfig,
        shard_addresses: Vec<ShardAddress>,
        shards: Vec<flume::Sender<ShardCommand>>,
    ) -> ClusterAgent {
        ClusterAgent {
            link: joined.link,
            id: joined.id,
            config,
            shard_addresses,
            shards,
            registered: true,
            last: HashMap::new(),
            last_at: Instant::now(),
        }
    }

    /// Serve the shards' requests and report load until shutdown. The
    /// first report goes out at once: it is what makes the control plane
    /// send this broker every topic's layout.
    pub(crate) fn run(mut self, requests: flume::Receiver<ControlRequest>) {
        let interval = Duration::from_millis(self.config.load_report_ms);
        let mut next_report = Instant::now();
        loop {
            let wait = next_report.saturating_duration_since(Instant::now());
            match requests.recv_timeout(wait) {
                Ok(ControlRequest::Forward {
                    frame_type,
                    payload,
                    reply,
                }) => {
                    let answer = self.forward(frame_type, &payload);
                    let _ = reply.send(answer);
                }
                Ok(ControlRequest::Shutdown { reply }) => {
                    self.leave();
                    let _ = reply.send(shut_down_shards(&self.shards));
                    return;
                }
                Ok(other) => refuse(other),
                Err(flume::RecvTimeoutError::Timeout) => {
                    self.report();
                    next_report = Instant::now() + interval;
                }
                Err(flume::RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Pass a client's admin request to the control plane, answer and all.
    fn forward(&mut self, frame_type: FrameType, payload: &[u8]) -> Result<Answer, ServeError> {
        self.ensure_registered().map_err(unreachable)?;
        let answer = self.link.call_raw(frame_type, payload).map_err(unreachable);
        if answer.is_err() {
            self.registered = false;
        }
        answer
    }

    fn ensure_registered(&mut self) -> Result<(), String> {
        if self.registered && self.link.is_connected() {
            return Ok(());
        }
        let (id, _) = register(
            &mut self.link,
            &self.config,
            Some(self.id),
            &self.shard_addresses,
        )?;
        log::info!("registered again with the control plane as broker {id}");
        self.registered = true;
        Ok(())
    }

    /// Every open segment's rates since the previous report.
    fn report(&mut self) {
        let figures = self.collect();
        let now = Instant::now();
        let elapsed_ms = now.duration_since(self.last_at).as_millis().max(1) as u64;
        self.last_at = now;
        let mut segments = Vec::with_capacity(figures.len());
        let mut last = HashMap::with_capacity(figures.len());
        for f in figures {
            let key = (f.topic, f.segment);
            let (bytes, records) = self.last.get(&key).copied().unwrap_or((0, 0));
            let per_s = |now: u64, before: u64| now.saturating_sub(before) * 1000 / elapsed_ms;
            segments.push(SegmentLoadReport {
                topic: key.0.clone(),
                segment: key.1,
                bytes_per_s: per_s(f.appended_bytes, bytes),
                records_per_s: per_s(f.appended_records, records),
                next_offset: f.next_offset,
                first_append_ms: f.first_append_ms,
                lost_records: f.lost_records,
            });
            last.insert(key, (f.appended_bytes, f.appended_records));
        }
        self.last = last;
        if let Err(e) = self.send_report(segments) {
            log::warn!("load report: {e}");
        }
    }

    fn send_report(&mut self, segments: Vec<SegmentLoadReport>) -> Result<(), String> {
        self.ensure_registered()?;
        let request = Request::LoadReport {
            broker: self.id,
            segments,
        };
        let (frame_type, payload) = self.link.call(&request).inspect_err(|_| {
            self.registered = false;
        })?;
        match Response::decode(frame_type, &payload).map_err(|e| e.to_string())? {
            Response::Done => Ok(()),
            Response::Error {
                code: ErrorCode::NotOwner,
                message,
            } => {
                // The control plane does not know this broker (it restarted,
                // or declared it dead): register and report again.
                log::warn!("the control plane does not know this broker ({message})");
                self.registered = false;
                self.ensure_registered()?;
                let (frame_type, payload) = self.link.call(&request)?;
                match Response::decode(frame_type, &payload).map_err(|e| e.to_string())? {
                    Response::Done => Ok(()),
                    other => Err(format!("report refused: {other:?}")),
                }
            }
            other => Err(format!("report refused: {other:?}")),
        }
    }

    fn collect(&self) -> Vec<SegmentLoadFigures> {
        let mut waiting = Vec::with_capacity(self.shards.len());
        for shard in &self.shards {
            let (tx, rx) = flume::bounded(1);
            if shard.send(ShardCommand::ReportLoad { reply: tx }).is_ok() {
                waiting.push(rx);
            }
        }
        waiting
            .into_iter()
            .filter_map(|rx| rx.recv_timeout(SHARD_REPORT_TIMEOUT).ok())
            .flatten()
            .collect()
    }

    /// Tell the control plane this broker goes: it seals the broker's
    /// segments (here, through shard 0) and opens them elsewhere, then
    /// answers. If it cannot be reached the broker still stops; the control
    /// plane declares it dead after its silence limit.
    fn leave(&mut self) {
        let result = self.ensure_registered().and_then(|()| {
            let (frame_type, payload) =
                self.link.call(&Request::LeaveBroker { broker: self.id })?;
            match Response::decode(frame_type, &payload).map_err(|e| e.to_string())? {
                Response::Done => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
        match result {
            Ok(()) => log::info!("left the cluster: segments moved to other brokers"),
            Err(e) => log::warn!("leaving the cluster: {e}"),
        }
    }
}

fn unreachable(e: String) -> ServeError {
    ServeError::new(
        ErrorCode::Storage,
        format!("the control plane is unreachable: {e}"),
    )
}

/// The typed requests only the embedded control plane answers (the Kafka
/// gateway's, which does not run in a cluster).
fn refuse(request: ControlRequest) {
    let message = "not answered by a broker in a cluster: ask the control plane";
    let e = || ServeError::new(ErrorCode::InvalidArgument, message);
    match request {
        ControlRequest::CreateTopic { reply, .. } | ControlRequest::DescribeTopic { reply, .. } => {
            let _ = reply.send(Err(e()));
        }
        ControlRequest::DeleteTopic { reply, .. } => {
            let _ = reply.send(Err(e()));
        }
        ControlRequest::ListTopics { reply } => {
            let _ = reply.send(Err(e()));
        }
        ControlRequest::Forward { reply, .. } => {
            let _ = reply.send(Err(e()));
        }
        ControlRequest::Shutdown { reply } => {
            let _ = reply.send(Err(message.into()));
        }
    }
}
