//! One Kafka connection: read size-prefixed requests, answer them in the
//! order they were sent (Kafka's rule), and overlap what may overlap.
//!
//! Produce requests whose partitions are disjoint run concurrently, up to
//! [`PIPELINE_MAX`] at once: librdkafka keeps up to five requests in flight
//! per connection, one partition each, and with `acks=-1` each waits for
//! its chunk to be synced; one at a time, those waits would queue. A
//! produce request waits for every earlier one that shares a partition
//! with it (so a partition's appends, and an idempotent producer's
//! sequence checks, keep the request order), and every other request waits
//! until nothing is in flight and then runs alone, as Kafka runs a
//! connection's requests one at a time. A reader reads and starts
//! requests; a writer awaits them in order and writes the answers, so a
//! client waiting for answers before it sends more is never stuck behind a
//! read. A request that does not decode closes the connection, logged;
//! nothing else is affected.

use super::gateway_error::{AnswerError, ConnectionEnd};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use bytes::BufMut;
use kafka::api::api_versions::{ApiVersion, ApiVersionsResponse};
use kafka::request::FRAME_PREFIX_BYTES;
use kafka::{ApiKey, DecodeError, Request, RequestBody, ResponseBody, SUPPORTED_APIS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::task::JoinHandle;

use crate::connection::PeerTimeouts;

use super::{
    admin, fetch, groups, metadata, offsets, placement, produce, Gateway, REQUEST_FRAME_BYTES_MAX,
};

/// Requests of one connection in flight at once (librdkafka's most for an
/// idempotent producer).
pub(crate) const PIPELINE_MAX: usize = 5;

/// Room for a Fetch answer's fields around its records (headers, names,
/// per partition fields), reserved with the records' bytes.
const FETCH_ANSWER_OVERHEAD_BYTES: usize = 4096;

/// A request's claim while it runs: the (topic, partition)s a produce
/// request writes, or the whole connection.
#[derive(Debug, PartialEq)]
enum Claim {
    Partitions(Vec<(String, i32)>),
    Exclusive,
}

impl Claim {
    fn of(frame: &[u8]) -> Claim {
        match Request::decode_lenient(frame) {
            Ok((
                Request {
                    body: RequestBody::Produce(r),
                    ..
                },
                _,
            )) => Claim::Partitions(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| (t.name.clone(), p.index)))
                    .collect(),
            ),
            _ => Claim::Exclusive,
        }
    }

    /// Whether this claim may run beside `other`.
    fn fits_beside(&self, other: &Claim) -> bool {
        match (self, other) {
            (Claim::Partitions(a), Claim::Partitions(b)) => !a.iter().any(|p| b.contains(p)),
            _ => false,
        }
    }
}

/// The claims of the requests in flight, oldest first.
#[derive(Default)]
struct InFlight {
    claims: RefCell<VecDeque<Claim>>,
    /// Rung when the oldest request is answered.
    answered: Notify,
}

impl InFlight {
    /// Wait until `claim` may run, then record it.
    async fn enter(&self, claim: Claim) {
        loop {
            let answered = self.answered.notified();
            {
                let mut claims = self.claims.borrow_mut();
                if claims.len() < PIPELINE_MAX && claims.iter().all(|c| claim.fits_beside(c)) {
                    claims.push_back(claim);
                    return;
                }
            }
            answered.await;
        }
    }

    fn leave_oldest(&self) {
        self.claims.borrow_mut().pop_front();
        self.answered.notify_waiters();
    }
}

/// A running request: its answer's bytes (empty for a produce with acks
/// 0), or why the connection must close.
type Answer = JoinHandle<Result<Vec<u8>, AnswerError>>;

pub(crate) async fn serve(gateway: Rc<Gateway>, stream: tokio::net::TcpStream, peer: SocketAddr) {
    let (read, write) = stream.into_split();
    let in_flight = Rc::new(InFlight::default());
    let (answers_tx, answers_rx) = tokio::sync::mpsc::channel::<Answer>(PIPELINE_MAX);
    let mut writer = tokio::task::spawn_local(write_answers(
        gateway.clone(),
        write,
        answers_rx,
        in_flight.clone(),
        peer,
    ));
    tokio::select! {
        () = read_requests(&gateway, read, answers_tx, &in_flight, peer) => {
            // Every request read is answered before the connection closes.
            let _ = (&mut writer).await;
        }
        _ = &mut writer => {}
    }
}

async fn read_requests(
    gateway: &Rc<Gateway>,
    mut stream: OwnedReadHalf,
    answers: tokio::sync::mpsc::Sender<Answer>,
    in_flight: &InFlight,
    peer: SocketAddr,
) {
    let mut prefix = [0u8; FRAME_PREFIX_BYTES];
    let timeouts = gateway.timeouts;
    let mut last_frame_at = Instant::now();
    loop {
        let started_at =
            match read_prefix(&mut stream, &mut prefix, timeouts, last_frame_at, in_flight).await {
                Ok(started_at) => started_at,
                Err(why) => {
                    log::debug!("Kafka {peer}: closing connection: {why}");
                    return;
                }
            };
        let size = match kafka::frame_size(&prefix, REQUEST_FRAME_BYTES_MAX) {
            Ok(Some(n)) => n,
            Ok(None) => return,
            Err(e) => {
                log::warn!("Kafka {peer}: closing connection: {e}");
                return;
            }
        };
        // Room for the request among all connections' (the frame limit is
        // below the total, so one request always fits), held until it is
        // answered.
        let Ok(room) = gateway
            .request_bytes
            .clone()
            .acquire_many_owned(size as u32)
            .await
        else {
            return;
        };
        // Into a reused buffer, without zero-filling it first.
        let mut frame = gateway.frames.take_owned(Vec::new);
        frame.reserve_exact(size);
        let frame_deadline = tokio::time::Instant::from_std(started_at + timeouts.frame);
        while frame.len() < size {
            let want = size - frame.len();
            let read = tokio::time::timeout_at(
                frame_deadline,
                stream.read_buf(&mut (&mut frame).limit(want)),
            )
            .await;
            match read {
                Ok(Ok(0)) => {
                    log::debug!("Kafka {peer}: read request: the connection closed");
                    return;
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    log::debug!("Kafka {peer}: read request: {e}");
                    return;
                }
                Err(_) => {
                    log::info!(
                        "Kafka {peer}: closing connection: a {size}-byte request not received \
                         within {} ms",
                        timeouts.frame.as_millis()
                    );
                    return;
                }
            }
        }
        last_frame_at = Instant::now();
        in_flight.enter(Claim::of(&frame)).await;
        let answer = tokio::task::spawn_local(answer(gateway.clone(), frame, room, peer));
        if answers.send(answer).await.is_err() {
            return;
        }
    }
}

/// Read a request's size prefix, byte by byte as it comes (cancel-safe
/// reads, so a timer may end a wait without losing bytes), under the
/// connection's timeouts: idle with nothing owed, or a prefix begun and
/// not finished in time, is the end of the connection. Returns when the
/// prefix's first byte came.
async fn read_prefix(
    stream: &mut OwnedReadHalf,
    prefix: &mut [u8; FRAME_PREFIX_BYTES],
    timeouts: PeerTimeouts,
    mut last_frame_at: Instant,
    in_flight: &InFlight,
) -> Result<Instant, ConnectionEnd> {
    let mut filled = 0;
    let mut started_at = None;
    while filled < prefix.len() {
        let deadline = tokio::time::Instant::from_std(timeouts.deadline(last_frame_at, started_at));
        match tokio::time::timeout_at(deadline, stream.read(&mut prefix[filled..])).await {
            Ok(Ok(0)) => return Err(ConnectionEnd::Closed),
            Ok(Ok(n)) => {
                started_at.get_or_insert_with(Instant::now);
                filled += n;
            }
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => {
                let now = Instant::now();
                let owed = !in_flight.claims.borrow().is_empty();
                if let Some(why) = timeouts.expired(now, last_frame_at, started_at, owed) {
                    return Err(why.into());
                }
                if started_at.is_none() && owed {
                    last_frame_at = now;
                }
            }
        }
    }
    Ok(started_at.unwrap_or_else(Instant::now))
}

async fn write_answers(
    gateway: Rc<Gateway>,
    mut stream: OwnedWriteHalf,
    mut answers: tokio::sync::mpsc::Receiver<Answer>,
    in_flight: Rc<InFlight>,
    peer: SocketAddr,
) {
    while let Some(answer) = answers.recv().await {
        let answered = answer.await;
        in_flight.leave_oldest();
        let out = match answered {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                log::warn!("Kafka {peer}: closing connection: {e}");
                return;
            }
            Err(e) => {
                log::error!("Kafka {peer}: a request's task failed: {e}");
                return;
            }
        };
        if !out.is_empty() {
            if let Err(e) = stream.write_all(&out).await {
                log::debug!("Kafka {peer}: write: {e}");
                return;
            }
        }
        gateway.frames.give_back(out);
    }
}

/// Decode and answer one request.
async fn answer(
    gateway: Rc<Gateway>,
    frame: Vec<u8>,
    _room: OwnedSemaphorePermit,
    peer: SocketAddr,
) -> Result<Vec<u8>, AnswerError> {
    let mut out = gateway.frames.take_owned(Vec::new);
    let handled = match Request::decode_lenient(&frame) {
        Ok((request, trailing)) => {
            if trailing > 0 {
                log::debug!(
                    "{peer}: {:?} v{} request: {trailing} bytes past its end, ignored (as Kafka \
                     does)",
                    request.body.api_key(),
                    request.header.api_version
                );
            }
            handle(&gateway, request, &mut out, peer).await
        }
        Err(DecodeError::UnsupportedVersion {
            api_key: ApiKey::ApiVersions,
            correlation_id,
            ..
        }) => {
            // KIP-511: answer at v0 with the versions this side speaks.
            let body =
                ResponseBody::ApiVersions(api_versions(kafka::error_code::UNSUPPORTED_VERSION));
            kafka::encode_response_frame(&mut out, correlation_id, 0, &body).map_err(Into::into)
        }
        Err(e) => Err(AnswerError::Malformed(e)),
    };
    gateway.frames.give_back(frame);
    handled.map(|()| out)
}

/// The ApiVersions answer: every API and version range the gateway speaks.
pub(crate) fn api_versions(error_code: i16) -> ApiVersionsResponse {
    ApiVersionsResponse {
        error_code,
        api_keys: SUPPORTED_APIS
            .iter()
            .map(|r| ApiVersion {
                api_key: r.api_key.code(),
                min_version: r.min,
                max_version: r.max,
            })
            .collect(),
        throttle_time_ms: 0,
    }
}

/// Answer one request into `out` (nothing for a produce with acks 0).
async fn handle(
    gateway: &Rc<Gateway>,
    request: Request<'_>,
    out: &mut Vec<u8>,
    peer: SocketAddr,
) -> Result<(), AnswerError> {
    let version = request.header.api_version;
    let correlation_id = request.header.correlation_id;
    let body = match request.body {
        RequestBody::ApiVersions(_) => {
            ResponseBody::ApiVersions(api_versions(kafka::error_code::NONE))
        }
        RequestBody::Metadata(r) => {
            ResponseBody::Metadata(metadata::metadata(gateway, r, version).await)
        }
        RequestBody::Produce(r) => {
            let acks = r.acks;
            let response = produce::produce(gateway, r).await;
            if acks == 0 {
                return Ok(());
            }
            ResponseBody::Produce(response)
        }
        RequestBody::Fetch(r) => {
            // The records borrow the converted batches, which live here.
            let fetched = fetch::fetch(gateway, &r).await;
            // Room for the records and the fields around them, so the
            // answer is not grown (copied) on the way.
            out.reserve(fetched.bytes() + FETCH_ANSWER_OVERHEAD_BYTES);
            let body = ResponseBody::Fetch(fetched.response());
            return Ok(kafka::encode_response_frame(
                out,
                correlation_id,
                version,
                &body,
            )?);
        }
        RequestBody::ListOffsets(r) => {
            ResponseBody::ListOffsets(offsets::list_offsets(gateway, r).await)
        }
        RequestBody::CreateTopics(r) => {
            ResponseBody::CreateTopics(admin::create_topics(gateway, r).await)
        }
        RequestBody::DeleteTopics(r) => {
            ResponseBody::DeleteTopics(admin::delete_topics(gateway, r).await)
        }
        RequestBody::DescribeConfigs(r) => {
            ResponseBody::DescribeConfigs(admin::describe_configs(gateway, r).await)
        }
        RequestBody::InitProducerId(r) => {
            ResponseBody::InitProducerId(admin::init_producer_id(gateway, r).await)
        }
        RequestBody::FindCoordinator(r) => {
            ResponseBody::FindCoordinator(groups::find_coordinator(gateway, r, version))
        }
        RequestBody::JoinGroup(r) => {
            ResponseBody::JoinGroup(groups::join(gateway, r, &request.header, version, peer).await)
        }
        RequestBody::SyncGroup(r) => ResponseBody::SyncGroup(groups::sync(gateway, r).await),
        RequestBody::Heartbeat(r) => ResponseBody::Heartbeat(groups::heartbeat(gateway, r)),
        RequestBody::LeaveGroup(r) => ResponseBody::LeaveGroup(groups::leave(gateway, r, version)),
        RequestBody::OffsetCommit(r) => {
            ResponseBody::OffsetCommit(groups::commit_offsets(gateway, r).await)
        }
        RequestBody::OffsetFetch(r) => {
            ResponseBody::OffsetFetch(groups::fetch_offsets(gateway, r, version))
        }
        RequestBody::DescribeGroups(r) => {
            ResponseBody::DescribeGroups(groups::describe(gateway, r))
        }
        RequestBody::ListGroups(r) => ResponseBody::ListGroups(groups::list(gateway, r)),
        RequestBody::DeleteGroups(r) => {
            ResponseBody::DeleteGroups(groups::delete(gateway, r).await)
        }
        RequestBody::OffsetDelete(r) => {
            ResponseBody::OffsetDelete(groups::delete_offsets(gateway, r).await)
        }
        RequestBody::DescribeCluster(r) => {
            ResponseBody::DescribeCluster(metadata::describe_cluster(gateway, r))
        }
        RequestBody::ElectLeaders(r) => {
            ResponseBody::ElectLeaders(placement::elect_leaders(gateway, r).await)
        }
        RequestBody::AlterPartitionReassignments(r) => ResponseBody::AlterPartitionReassignments(
            placement::alter_reassignments(gateway, r).await,
        ),
        RequestBody::ListPartitionReassignments(r) => {
            ResponseBody::ListPartitionReassignments(placement::list_reassignments(r))
        }
    };
    Ok(kafka::encode_response_frame(
        out,
        correlation_id,
        version,
        &body,
    )?)
}
