//! Turning one verified request frame into its answer, whatever transport
//! it came on. Produce is handled inline (its bytes are appended before the
//! next frame of the connection is read, which keeps per-key order); what
//! must wait (a durable ack, a long-polling fetch, an admin request that
//! goes to the control plane) comes back as a future that the transport
//! runs beside the connection.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wire::batch::BatchView;
use wire::frame::{encode_frame, FrameHeader};
use wire::limits::FRAME_PAYLOAD_BYTES_MAX;
use wire::message::{
    BrokerShards, Fetched, Successors, FETCHED_FRAME_PREFIX_BYTES, FETCHED_PREFIX_BYTES,
};
use wire::{
    key_hash, AckMode, AdminRequest, AuthRequest, BrokerPortRequest, DataRequest, ErrorCode,
    FetchFrom, FetchRequest, LayoutCommand, Response,
};

use crate::access;
use crate::control_plane::{ControlRequest, ShardCommand};
use crate::error::EngineError;
use crate::file_range::FileRanges;
use crate::segment::{blocking, FetchBody, FetchResult, Segment, SegmentCell};
use crate::serve_error::ServeError;
use crate::shard::{SegmentLookup, Shard};
use crate::shard_metrics::Transport;

/// The answer to one request.
pub(crate) enum Reply {
    /// No answer (a produce with ack `none` that succeeded).
    Silent,
    /// A whole response frame.
    Now(Vec<u8>),
    /// A response frame once the future completes.
    Later(Pin<Box<dyn Future<Output = Vec<u8>>>>),
    /// A fetch's answer once the future completes, its batches perhaps
    /// left in their file.
    Fetched(Pin<Box<dyn Future<Output = Outgoing>>>),
}

/// An answer on its way to a connection.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// A whole frame.
    Frame(Vec<u8>),
    /// A fetch response: its frame header and payload prefix, then its
    /// batches, sent from the files they are in.
    Fetched {
        head: [u8; FETCHED_FRAME_PREFIX_BYTES],
        body: FileRanges,
    },
}

impl Outgoing {
    /// The whole frame in memory, for transports that cannot send from a
    /// file: copies a fetch's batches once.
    pub(crate) fn into_frame(self) -> Vec<u8> {
        match self {
            Outgoing::Frame(frame) => frame,
            Outgoing::Fetched { head, body } => {
                let mut frame = Vec::with_capacity(head.len() + body.len());
                frame.extend_from_slice(&head);
                body.copy_to(&mut frame);
                frame
            }
        }
    }
}

pub(crate) fn response_frame(request_id: u32, response: &Response<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    response.encode(request_id, &mut out);
    out
}

/// The goodbye of a stopping broker: an unasked `ShuttingDown`, request id
/// 0 (docs/wire-format.md, "Goodbye").
pub(crate) fn goodbye_frame() -> Vec<u8> {
    error_frame(
        0,
        &ServeError::new(ErrorCode::ShuttingDown, "the broker is stopping"),
    )
}

/// The answer to a request a stopping broker read but did not apply.
pub(crate) fn not_applied_frame(request_id: u32) -> Vec<u8> {
    error_frame(request_id, &not_applied())
}

/// Why a stopping broker did not apply a request it read.
pub(crate) fn not_applied() -> ServeError {
    ServeError::new(
        ErrorCode::ShuttingDown,
        "the broker is stopping: request not applied",
    )
}

pub(crate) fn error_frame(request_id: u32, error: &ServeError) -> Vec<u8> {
    match &error.successors {
        Some(successors) => response_frame(
            request_id,
            &Response::Sealed {
                message: error.message.clone(),
                successors: Successors::clone(successors),
            },
        ),
        None => response_frame(
            request_id,
            &Response::Error {
                code: error.code,
                message: error.message.clone(),
            },
        ),
    }
}

fn answer<T>(
    request_id: u32,
    result: Result<T, ServeError>,
    ok: impl FnOnce(T) -> Vec<u8>,
) -> Vec<u8> {
    match result {
        Ok(v) => ok(v),
        Err(e) => error_frame(request_id, &e),
    }
}

/// Where a request came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A native client over TCP or QUIC.
    Network(Transport),
    /// The Kafka gateway in this process. Kafka clients pick a record's
    /// partition with their own partitioner, so a keyed record is accepted
    /// by the segment the client chose: the key-range check is skipped.
    KafkaGateway,
}

impl Origin {
    /// The transport whose traffic the request counts in.
    pub(crate) fn transport(self) -> Transport {
        match self {
            Origin::Network(t) => t,
            Origin::KafkaGateway => Transport::Kafka,
        }
    }
}

/// Handle one request frame whose header the transport decoded: its
/// payload is verified here (`BrokerPortRequest::decode_verified`), once,
/// and the request handed to the handler of its protocol.
pub(crate) async fn handle_frame(
    shard: &Rc<Shard>,
    header: &FrameHeader,
    payload: &[u8],
    origin: Origin,
    session: &mut auth::Session,
) -> Reply {
    let id = header.request_id;
    if !header.frame_type.is_request() {
        let e = ServeError::new(
            ErrorCode::Malformed,
            "a response frame was sent to the broker",
        );
        return Reply::Now(error_frame(id, &e));
    }
    let (request, batch) = match BrokerPortRequest::decode_verified(header, payload) {
        Ok(v) => (v.request, v.batch),
        Err(e) => return Reply::Now(error_frame(id, &ServeError::from(&e))),
    };
    if let BrokerPortRequest::Auth(AuthRequest::Authenticate { mechanism, message }) = &request {
        return Reply::Now(access::authenticate(shard, id, session, mechanism, message));
    }
    if let Err(denied) = session.permit(auth::request_access::broker_port_need(&request)) {
        return Reply::Now(access::denied_frame(shard, id, &denied));
    }
    if let BrokerPortRequest::Data(DataRequest::Produce { .. } | DataRequest::PayloadWrite { .. }) =
        &request
    {
        access::hold_to_quota(shard, session, payload.len()).await;
    }
    match request {
        BrokerPortRequest::Auth(_) => Reply::Now(error_frame(id, &ServeError::internal())),
        BrokerPortRequest::Data(request) => handle_data(shard, id, request, batch, origin).await,
        BrokerPortRequest::Admin(request) => handle_admin(shard, id, header, payload, request),
        BrokerPortRequest::Command(command) => handle_command(shard, id, command),
    }
}

/// A client's data request: produce and fetch, payloads, the broker's
/// shards and held layouts. `batch` is a produce request's, validated.
async fn handle_data(
    shard: &Rc<Shard>,
    id: u32,
    request: DataRequest<'_>,
    batch: Option<BatchView<'_>>,
    origin: Origin,
) -> Reply {
    match request {
        DataRequest::Shards => Reply::Now(response_frame(
            id,
            &Response::Shards {
                shards: shard.shard_addresses.as_ref().clone(),
            },
        )),
        DataRequest::Produce {
            topic,
            segment,
            ack,
            ..
        } => match batch {
            Some(batch) => produce(shard, id, topic, segment, ack, &batch, origin).await,
            None => Reply::Now(error_frame(id, &ServeError::internal())),
        },
        DataRequest::InitProducer => {
            Reply::Now(match shard.producer_ids.next(&shard.store).await {
                Ok(producer_id) => response_frame(
                    id,
                    &Response::Producer {
                        producer_id,
                        epoch: 0,
                    },
                ),
                Err(e) => error_frame(id, &e),
            })
        }
        DataRequest::Fetch(request) => {
            let segment = request.segment;
            let read = match start_fetch(shard, request, origin) {
                Ok(read) => read,
                Err(e) => return Reply::Now(error_frame(id, &e)),
            };
            Reply::Fetched(Box::pin(async move {
                let f = match read.await {
                    Ok(f) => f,
                    Err(e) => return Outgoing::Frame(error_frame(id, &e)),
                };
                let fetched = Fetched {
                    segment,
                    start_offset: f.start_offset,
                    next_offset: f.next_offset,
                    high_watermark: f.high_watermark,
                    sealed: f.sealed,
                    stored_end: f.stored_end,
                    batches: &[],
                };
                match f.body {
                    FetchBody::Copied(mut frame) => {
                        fetched.finish_frame(id, &mut frame);
                        Outgoing::Frame(frame)
                    }
                    FetchBody::Files(body) => Outgoing::Fetched {
                        head: fetched.frame_head(id, body.len(), body.crc()),
                        body,
                    },
                }
            }))
        }
        request @ (DataRequest::PayloadWrite { .. }
        | DataRequest::PayloadCommit { .. }
        | DataRequest::PayloadRead { .. }) => match handle_payload(shard, id, request).await {
            Ok(reply) => reply,
            Err(e) => Reply::Now(error_frame(id, &e)),
        },
        DataRequest::HeldLayout { topic } => Reply::Now(match shard.held_layout(&topic) {
            Some(info) => response_frame(id, &Response::Topic(info)),
            None => error_frame(
                id,
                &ServeError::new(
                    ErrorCode::TopicNotFound,
                    format!("topic {topic} does not exist"),
                ),
            ),
        }),
    }
}

/// An admin request: topic requests go to the control plane typed (so the
/// broker can complete a description with its own segments' live
/// figures); layout changes and the brokers' list go as they came.
fn handle_admin(
    shard: &Rc<Shard>,
    id: u32,
    header: &FrameHeader,
    payload: &[u8],
    request: AdminRequest,
) -> Reply {
    match request {
        AdminRequest::CreateTopic {
            topic,
            segments,
            replicas,
        } => ask_control(
            shard,
            id,
            move |reply| ControlRequest::CreateTopic {
                topic,
                segments,
                replicas,
                reply,
            },
            Response::Topic,
        ),
        AdminRequest::DeleteTopic { topic } => ask_control(
            shard,
            id,
            |reply| ControlRequest::DeleteTopic { topic, reply },
            |()| Response::Done,
        ),
        AdminRequest::ListTopics => ask_control(
            shard,
            id,
            |reply| ControlRequest::ListTopics { reply },
            |topics| Response::TopicList { topics },
        ),
        AdminRequest::DescribeTopic { topic } => ask_control(
            shard,
            id,
            |reply| ControlRequest::DescribeTopic { topic, reply },
            Response::Topic,
        ),
        // Layout changes and the brokers' list go to the control plane as
        // they came; the topic requests above go typed, so the broker can
        // complete a description with its own segments' live figures.
        AdminRequest::SplitSegment { topic, .. }
        | AdminRequest::MergeSegments { topic, .. }
        | AdminRequest::MoveSegment { topic, .. }
        | AdminRequest::SetPolicy { topic, .. }
            if crate::kafka::topics::kafka_name(&topic).is_some() =>
        {
            Reply::Now(error_frame(id, &kafka_partitions_stay(&topic)))
        }
        AdminRequest::SplitSegment { .. }
        | AdminRequest::MergeSegments { .. }
        | AdminRequest::MoveSegment { .. }
        | AdminRequest::SetPolicy { .. }
        | AdminRequest::ListBrokers => forward(shard, id, header.frame_type, payload),
    }
}

/// A command of the control plane: a topic's layout to apply, or a topic
/// to drop.
fn handle_command(shard: &Rc<Shard>, id: u32, command: LayoutCommand<'_>) -> Reply {
    match command {
        LayoutCommand::ApplyLayout { topic_json, owners } => {
            let (topic, owners) = match layout(topic_json, owners) {
                Ok(l) => l,
                Err(e) => return Reply::Now(error_frame(id, &e)),
            };
            let commands = shard.shard_commands.clone();
            Reply::Later(Box::pin(async move {
                if let Err(e) = refuse_writes(&commands, &topic, &owners).await {
                    return error_frame(id, &e);
                }
                let result = ask_every_shard(&commands, |reply| ShardCommand::TopicLayout {
                    topic: topic.clone(),
                    owners: owners.clone(),
                    reply,
                })
                .await
                .and_then(|answers| {
                    answers
                        .into_iter()
                        .try_for_each(|a| a.map_err(|e| ServeError::storage(&e)))
                });
                answer(id, result, |()| response_frame(id, &Response::Done))
            }))
        }
        // Only the first round of an `ApplyLayout`: successors open on
        // another broker while this one flushes.
        LayoutCommand::RefuseWrites { topic_json, owners } => {
            let (topic, owners) = match layout(topic_json, owners) {
                Ok(l) => l,
                Err(e) => return Reply::Now(error_frame(id, &e)),
            };
            let commands = shard.shard_commands.clone();
            Reply::Later(Box::pin(async move {
                let refused = refuse_writes(&commands, &topic, &owners).await;
                answer(id, refused, |()| response_frame(id, &Response::Done))
            }))
        }
        LayoutCommand::DropTopic { topic } => {
            let name = match control::TopicName::parse(&topic) {
                Ok(n) => n,
                Err(e) => return Reply::Now(error_frame(id, &ServeError::from(e))),
            };
            let commands = shard.shard_commands.clone();
            let payloads = shard.payloads.clone();
            Reply::Later(Box::pin(async move {
                let result = ask_every_shard(&commands, |reply| ShardCommand::DropTopic {
                    name: topic.clone(),
                    reply,
                })
                .await;
                payloads.drop_topic(&name);
                answer(id, result, |_| response_frame(id, &Response::Done))
            }))
        }
    }
}

/// Every shard refuses writes to what `topic` seals (the first round of
/// applying a layout).
async fn refuse_writes(
    commands: &[flume::Sender<ShardCommand>],
    topic: &control::Topic,
    owners: &Arc<[BrokerShards]>,
) -> Result<(), ServeError> {
    ask_every_shard(commands, |reply| ShardCommand::RefuseWrites {
        topic: topic.clone(),
        owners: owners.clone(),
        reply,
    })
    .await
    .map(|_| ())
}

/// A layout command's topic and owners, decoded.
fn layout(
    topic_json: &[u8],
    owners: Vec<BrokerShards>,
) -> Result<(control::Topic, Arc<[BrokerShards]>), ServeError> {
    let topic = control::Topic::from_json_bytes(topic_json)
        .map_err(|e| ServeError::new(ErrorCode::InvalidArgument, format!("layout: {e}")))?;
    Ok((topic, Arc::from(owners)))
}

/// The refusal of a layout change to a Kafka-facing topic: its partitions
/// stay as they are until the gateway maps a sealed partition's keys onto
/// its successors (docs/kafka.md, "Splits and merges").
fn kafka_partitions_stay(topic: &str) -> ServeError {
    ServeError::new(
        ErrorCode::InvalidArgument,
        format!(
            "{topic} is a Kafka-facing topic: its partitions are not split, merged or moved \
             (Kafka producers would keep writing to a sealed partition)"
        ),
    )
}

/// Pass an admin request to the control plane (through the
/// cluster agent) and its answer back under the client's request id.
fn forward(shard: &Shard, id: u32, frame_type: wire::FrameType, payload: &[u8]) -> Reply {
    let control = shard.control.clone();
    let payload = payload.to_vec();
    Reply::Later(Box::pin(async move {
        let result = ask(&control, |reply| ControlRequest::Forward {
            frame_type,
            payload,
            reply,
        })
        .await;
        answer(id, result, |(frame_type, payload)| {
            let mut out = Vec::with_capacity(wire::frame::FRAME_HEADER_BYTES + payload.len());
            encode_frame(&mut out, frame_type, id, &payload);
            out
        })
    }))
}

/// Ask the control plane the question `make` builds and answer, once it
/// has, with the response `ok` makes of what it said.
fn ask_control<T: 'static>(
    shard: &Shard,
    id: u32,
    make: impl FnOnce(flume::Sender<Result<T, ServeError>>) -> ControlRequest + 'static,
    ok: impl FnOnce(T) -> Response<'static> + 'static,
) -> Reply {
    let control = shard.control.clone();
    Reply::Later(Box::pin(async move {
        let result = ask(&control, make).await;
        answer(id, result, |v| response_frame(id, &ok(v)))
    }))
}

/// Send every shard of this broker the command `make` builds and wait for
/// each answer, in shard order (a layout: sealed segments flushed, new ones
/// open; a drop: the topic's segments closed).
async fn ask_every_shard<T>(
    commands: &[flume::Sender<ShardCommand>],
    make: impl Fn(flume::Sender<T>) -> ShardCommand,
) -> Result<Vec<T>, ServeError> {
    let mut waiting = Vec::with_capacity(commands.len());
    for (i, c) in commands.iter().enumerate() {
        let (tx, rx) = flume::bounded(1);
        c.send_async(make(tx))
            .await
            .map_err(|_| ServeError::new(ErrorCode::Internal, format!("shard {i} is gone")))?;
        waiting.push((i, rx));
    }
    let mut answers = Vec::with_capacity(waiting.len());
    for (i, rx) in waiting {
        answers.push(rx.recv_async().await.map_err(|_| {
            ServeError::new(ErrorCode::Internal, format!("shard {i} did not answer"))
        })?);
    }
    Ok(answers)
}

/// Most payload bytes one read answers with: a frame's payload less the
/// response's two u64 fields.
const PAYLOAD_READ_BYTES_MAX: usize = FRAME_PAYLOAD_BYTES_MAX as usize - 16;

/// A payload request of a topic this broker knows: a piece of an upload
/// written, an upload committed, or bytes of a stored payload read, each
/// in the filer off the shard's thread. A refusal is the caller's to send.
async fn handle_payload(
    shard: &Rc<Shard>,
    id: u32,
    request: DataRequest<'_>,
) -> Result<Reply, ServeError> {
    let store = shard.payloads.clone();
    Ok(match request {
        DataRequest::PayloadWrite {
            topic,
            id: payload,
            offset,
            bytes,
        } => {
            let name = payload_topic(shard, &topic)?;
            // Waiting here stops this connection from reading more until
            // earlier pieces are on disk: the shard's memory stays bounded.
            let permit = shard
                .payload_budget
                .acquire_static_permit(bytes.len() as u64)
                .await
                .map_err(|_| ServeError::internal())?;
            let piece = bytes.to_vec();
            Reply::Later(Box::pin(async move {
                let result = blocking(move || store.write(&name, &payload, offset, &piece)).await;
                drop(permit);
                answer(id, result, |()| response_frame(id, &Response::Done))
            }))
        }
        DataRequest::PayloadCommit { topic, reference } => {
            let name = payload_topic(shard, &topic)?;
            Reply::Later(Box::pin(async move {
                let result = blocking(move || store.commit(&name, &reference)).await;
                answer(id, result, |()| response_frame(id, &Response::Done))
            }))
        }
        DataRequest::PayloadRead {
            topic,
            id: payload,
            offset,
            max_bytes,
        } => {
            let name = payload_topic(shard, &topic)?;
            let max_bytes = (max_bytes as usize).clamp(1, PAYLOAD_READ_BYTES_MAX);
            Reply::Later(Box::pin(async move {
                let result = blocking(move || store.read(&name, &payload, offset, max_bytes)).await;
                answer(id, result, |(length, bytes)| {
                    response_frame(
                        id,
                        &Response::PayloadBytes {
                            length,
                            offset,
                            bytes: &bytes,
                        },
                    )
                })
            }))
        }
        _ => return Err(ServeError::internal()),
    })
}

/// The topic of a payload request, which must exist on this broker.
fn payload_topic(shard: &Shard, topic: &str) -> Result<control::TopicName, ServeError> {
    let name = control::TopicName::parse(topic)?;
    if !shard.knows_topic(topic) {
        return Err(ServeError::new(
            ErrorCode::TopicNotFound,
            format!("topic {topic} does not exist"),
        ));
    }
    Ok(name)
}

/// Sends the control plane the request `make` builds around a reply
/// channel, and waits for its answer.
pub(crate) async fn ask<T>(
    control: &flume::Sender<ControlRequest>,
    make: impl FnOnce(flume::Sender<Result<T, ServeError>>) -> ControlRequest,
) -> Result<T, ServeError> {
    let (tx, rx) = flume::bounded(1);
    let gone = || ServeError::new(ErrorCode::Internal, "the control plane is shutting down");
    control.send_async(make(tx)).await.map_err(|_| gone())?;
    rx.recv_async().await.map_err(|_| gone())?
}

fn local_segment(shard: &Shard, topic: &str, segment: u32) -> Result<Segment, ServeError> {
    match shard.lookup(topic, segment) {
        SegmentLookup::Here(cell) => Ok(cell),
        SegmentLookup::Elsewhere { shard: owner } => Err(ServeError::new(
            ErrorCode::NotOwner,
            format!("segment {segment} of {topic} is owned by shard {owner}"),
        )),
        SegmentLookup::Sealed => Err(ServeError::sealed(
            segment,
            shard.successors(topic, segment).map(Arc::new),
        )),
        SegmentLookup::NoSegment => Err(ServeError::new(
            ErrorCode::SegmentNotFound,
            format!("topic {topic} has no segment {segment}"),
        )),
        SegmentLookup::NoTopic => Err(ServeError::new(
            ErrorCode::TopicNotFound,
            format!("topic {topic} does not exist"),
        )),
    }
}

/// Start the read `request` asks for: the segment is looked up now (an
/// error if this shard neither owns it nor can read it sealed), the read
/// itself runs in the future, waiting at most `max_wait_ms` for data.
pub(crate) fn start_fetch(
    shard: &Rc<Shard>,
    request: FetchRequest,
    origin: Origin,
) -> Result<impl Future<Output = Result<FetchResult, ServeError>> + 'static, ServeError> {
    let arrived = Instant::now();
    // A segment sealed elsewhere is read from the filer through a view
    // this shard opens on first use.
    let cell = match local_segment(shard, &request.topic, request.segment) {
        Ok(c) => Some(c),
        Err(e) if e.code == ErrorCode::SegmentSealed => None,
        Err(e) => return Err(e),
    };
    let max_bytes = (request.max_bytes as usize)
        .clamp(1, FRAME_PAYLOAD_BYTES_MAX as usize - FETCHED_PREFIX_BYTES);
    let max_wait_ms = request.max_wait_ms.min(shard.config.fetch_wait_ms_max);
    let max_wait = Duration::from_millis(u64::from(max_wait_ms));
    // A follower holds everything before where it fetches from, and
    // needs nothing the filer stores.
    let mut from = request.from;
    if let (Some(id), Some(Segment::Owned(owned)), FetchFrom::Offset(offset)) =
        (request.follower, &cell, request.from)
    {
        owned.follower_fetched(id, offset);
        from = FetchFrom::Offset(offset.max(owned.stored_end()));
    }
    let shard = shard.clone();
    Ok(async move {
        let cell = match cell {
            Some(c) => c,
            None => shard
                .sealed_view(&request.topic, request.segment)
                .await
                .map_err(|e| ServeError::storage(&e))?,
        };
        let fetched = cell
            .fetch(from, max_bytes, max_wait, request.checks)
            .await?;
        let metrics = &shard.metrics;
        metrics.fetch.observe(arrived.elapsed());
        let traffic = metrics.traffic(origin.transport());
        traffic
            .records_out
            .add(fetched.next_offset.saturating_sub(fetched.start_offset));
        traffic.bytes_out.add(fetched.body.batch_bytes() as u64);
        Ok(fetched)
    })
}

/// A batch appended to a segment: the segment (`None` for a resend a
/// sealed segment already held in the filer), and the offsets it took.
pub(crate) struct Appended {
    pub(crate) cell: Option<Rc<SegmentCell>>,
    pub(crate) base_offset: u64,
    pub(crate) next_offset: u64,
}

/// Append the validated batch `view` to `segment` of `topic`, which this
/// shard must own; keyed records from the network must hash into it. An
/// idempotent producer's resend to a sealed segment is answered with its
/// offsets if the segment stored it before the seal (on any shard: a
/// segment sealed elsewhere is read from the filer).
pub(crate) async fn append(
    shard: &Rc<Shard>,
    topic: &str,
    segment: u32,
    view: &BatchView<'_>,
    origin: Origin,
) -> Result<Appended, ServeError> {
    // The Kafka gateway's records went where the Kafka client's
    // partitioner put them, and the gateway checks its own idempotent
    // producers' batches.
    let checked = origin != Origin::KafkaGateway;
    let producer = if checked {
        crate::segment::kelp_batch(view)?
    } else {
        None
    };
    let found = match local_segment(shard, topic, segment) {
        Ok(found) => found,
        Err(e) if e.code == ErrorCode::SegmentSealed && producer.is_some() => shard
            .sealed_view(topic, segment)
            .await
            .map_err(|e| ServeError::storage(&e))?,
        Err(e) => return Err(e),
    };
    let cell = match found {
        Segment::Owned(cell) => cell,
        // A view of a segment sealed elsewhere takes no writes.
        Segment::View(sealed) => {
            if producer.is_some() {
                if let Some(placed) = sealed.sealed_duplicate(view).await? {
                    shard.metrics.resends_found.add(1);
                    return Ok(Appended {
                        cell: None,
                        base_offset: placed.base,
                        next_offset: placed.next,
                    });
                }
            }
            return Err(ServeError::sealed(
                segment,
                shard.successors(topic, segment).map(Arc::new),
            ));
        }
    };
    let core = &cell.core;
    // Keyless records may go to any segment; keyed ones must hash into it,
    // or per-key order would break when segments split.
    if let Some(r) = view
        .records()
        .find(|r| checked && !r.key.is_empty() && !core.covers(key_hash(r.key)))
    {
        return Err(ServeError::new(
            ErrorCode::KeyOutOfRange,
            format!(
                "record {} has key hash {:#010x}, outside segment {segment} [{:#x}, {:#x})",
                r.offset_delta,
                key_hash(r.key),
                core.range_start,
                core.range_end
            ),
        ));
    }
    let placed = cell.append(view, producer).await?;
    if placed.duplicate {
        shard.metrics.resends_found.add(1);
    } else {
        let traffic = shard.metrics.traffic(origin.transport());
        traffic.records_in.add(placed.next - placed.base);
        traffic.bytes_in.add(view.bytes().len() as u64);
    }
    Ok(Appended {
        cell: Some(cell),
        base_offset: placed.base,
        next_offset: placed.next,
    })
}

async fn produce(
    shard: &Rc<Shard>,
    id: u32,
    topic: &str,
    segment: u32,
    ack: AckMode,
    view: &BatchView<'_>,
    origin: Origin,
) -> Reply {
    let arrived = Instant::now();
    let Appended {
        cell,
        base_offset: base,
        next_offset: next,
    } = match append(shard, topic, segment, view, origin).await {
        Ok(appended) => appended,
        Err(e) => {
            shard.metrics.produce_errors.add(1);
            return Reply::Now(error_frame(id, &e));
        }
    };
    if ack == AckMode::None {
        shard.metrics.produce(ack).observe(arrived.elapsed());
        return Reply::Silent;
    }
    let metrics = shard.metrics.clone();
    let produced = move || {
        response_frame(
            id,
            &Response::Produced {
                segment,
                base_offset: base,
                record_count: (next - base) as u32,
            },
        )
    };
    let answered = move |result: Result<(), EngineError>| match result {
        Ok(()) => {
            metrics.produce(ack).observe(arrived.elapsed());
            produced()
        }
        Err(e) => {
            metrics.produce_errors.add(1);
            error_frame(id, &ServeError::storage(&e))
        }
    };
    match (ack, cell) {
        // With no cell, a resend a sealed segment held: in the filer.
        (AckMode::None | AckMode::Leader, _) | (_, None) => Reply::Now(answered(Ok(()))),
        // Every in-sync follower's buffers too (none: as `Leader`).
        (AckMode::All, Some(cell)) => Reply::Later(Box::pin(async move {
            answered(cell.wait_replicated(next).await)
        })),
        (AckMode::Durable, Some(cell)) => {
            Reply::Later(Box::pin(
                async move { answered(cell.wait_flushed(next).await) },
            ))
        }
    }
}
