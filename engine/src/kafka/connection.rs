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
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::BufMut;
use kafka::api::alter_partition_reassignments::AlterPartitionReassignmentsResponse;
use kafka::api::api_versions::{ApiVersion, ApiVersionsResponse};
use kafka::api::elect_leaders::ElectLeadersResponse;
use kafka::api::list_partition_reassignments::ListPartitionReassignmentsResponse;
use kafka::api::produce::ProduceRequest;
use kafka::request::FRAME_PREFIX_BYTES;
use kafka::{ApiKey, DecodeError, Request, RequestBody, ResponseBody, SUPPORTED_APIS};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::task::JoinHandle;

use crate::connection::PeerTimeouts;

use super::sasl::Sasl;
use super::topic_access::Access;
use super::{
    acls, admin, fetch, groups, metadata, offsets, placement, produce, Gateway,
    REQUEST_FRAME_BYTES_MAX,
};

/// Requests of one connection in flight at once (librdkafka's most for an
/// idempotent producer).
pub(crate) const PIPELINE_MAX: usize = 5;

/// How long a failed authentication's answer is held back (Kafka's
/// `connection.failed.authentication.delay.ms` default).
const FAILED_AUTHENTICATION_DELAY: Duration = Duration::from_millis(100);

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

/// What one connection's requests share: who it is, and until when a
/// quota mutes it.
struct Peer {
    address: SocketAddr,
    sasl: RefCell<Sasl>,
    /// Produce v6+ (KIP-219): a throttled request is answered at once
    /// with its throttle time, and no more of the connection is read until
    /// then.
    muted_until: Cell<Option<Instant>>,
}

/// A running request: its answer's bytes (empty for a produce with acks
/// 0), or why the connection must close.
type Answer = JoinHandle<Result<Vec<u8>, AnswerError>>;

pub(crate) async fn serve(
    gateway: Rc<Gateway>,
    stream: tokio::net::TcpStream,
    address: SocketAddr,
) {
    let peer = Rc::new(Peer {
        address,
        sasl: RefCell::new(Sasl::new(gateway.auth.as_deref())),
        muted_until: Cell::new(None),
    });
    let Some(acceptor) = gateway.tls.clone() else {
        let (read, write) = stream.into_split();
        return serve_halves(gateway, read, write, peer).await;
    };
    // The handshake is bounded as a request's frame is.
    let handshake = gateway.timeouts.frame;
    match tokio::time::timeout(handshake, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            let (read, write) = tokio::io::split(tls);
            serve_halves(gateway, read, write, peer).await;
        }
        Ok(Err(e)) => log::info!("Kafka {address}: TLS handshake failed: {e}"),
        Err(_) => log::info!(
            "Kafka {address}: TLS handshake not done within {} ms",
            handshake.as_millis()
        ),
    }
}

/// Serve a connection's requests, read from `read`, answered on `write`.
async fn serve_halves<R, W>(gateway: Rc<Gateway>, read: R, write: W, peer: Rc<Peer>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + 'static,
{
    let address = peer.address;
    let in_flight = Rc::new(InFlight::default());
    let (answers_tx, answers_rx) = tokio::sync::mpsc::channel::<Answer>(PIPELINE_MAX);
    let mut writer = tokio::task::spawn_local(write_answers(
        gateway.clone(),
        write,
        answers_rx,
        in_flight.clone(),
        address,
    ));
    tokio::select! {
        () = read_requests(&gateway, read, answers_tx, &in_flight, &peer) => {
            // Every request read is answered before the connection closes.
            let _ = (&mut writer).await;
        }
        _ = &mut writer => {}
    }
}

async fn read_requests<R: AsyncRead + Unpin>(
    gateway: &Rc<Gateway>,
    mut stream: R,
    answers: tokio::sync::mpsc::Sender<Answer>,
    in_flight: &InFlight,
    peer: &Rc<Peer>,
) {
    let mut prefix = [0u8; FRAME_PREFIX_BYTES];
    let timeouts = gateway.timeouts;
    let mut last_frame_at = Instant::now();
    loop {
        if let Some(until) = peer.muted_until.take() {
            tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
            last_frame_at = Instant::now();
        }
        if matches!(peer.sasl.borrow().session, auth::Session::Failed) {
            log::debug!(
                "Kafka {}: closing connection: its authentication failed",
                peer.address
            );
            return;
        }
        let started_at =
            match read_prefix(&mut stream, &mut prefix, timeouts, last_frame_at, in_flight).await {
                Ok(started_at) => started_at,
                Err(why) => {
                    log::debug!("Kafka {}: closing connection: {why}", peer.address);
                    return;
                }
            };
        let size = match kafka::frame_size(&prefix, REQUEST_FRAME_BYTES_MAX) {
            Ok(Some(n)) => n,
            Ok(None) => return,
            Err(e) => {
                log::warn!("Kafka {}: closing connection: {e}", peer.address);
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
                    log::debug!(
                        "Kafka {}: read request: the connection closed",
                        peer.address
                    );
                    return;
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    log::debug!("Kafka {}: read request: {e}", peer.address);
                    return;
                }
                Err(_) => {
                    log::info!(
                        "Kafka {}: closing connection: a {size}-byte request not received \
                         within {} ms",
                        peer.address,
                        timeouts.frame.as_millis()
                    );
                    return;
                }
            }
        }
        last_frame_at = Instant::now();
        in_flight.enter(Claim::of(&frame)).await;
        let answer = tokio::task::spawn_local(answer(gateway.clone(), frame, room, peer.clone()));
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
async fn read_prefix<R: AsyncRead + Unpin>(
    stream: &mut R,
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

async fn write_answers<W: AsyncWrite + Unpin>(
    gateway: Rc<Gateway>,
    mut stream: W,
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
            // TLS holds what it encrypts until flushed; plain TCP
            // flushes nothing.
            let written = match stream.write_all(&out).await {
                Ok(()) => stream.flush().await,
                Err(e) => Err(e),
            };
            if let Err(e) = written {
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
    peer: Rc<Peer>,
) -> Result<Vec<u8>, AnswerError> {
    let mut out = gateway.frames.take_owned(Vec::new);
    let handled = match Request::decode_lenient(&frame) {
        Ok((request, trailing)) => {
            if trailing > 0 {
                log::debug!(
                    "{}: {:?} v{} request: {trailing} bytes past its end, ignored (as Kafka \
                     does)",
                    peer.address,
                    request.body.api_key(),
                    request.header.api_version
                );
            }
            handle(&gateway, request, &mut out, &peer).await
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

/// Charge a produce request's record bytes to its user's byte-rate quota
/// (`produce_bytes_per_s`): the throttle time to answer with. Produce v6+
/// is answered at once and the connection muted for that long (KIP-219:
/// the client waits too); an older version's answer is held back as long.
async fn hold_to_quota(
    gateway: &Gateway,
    access: &Access,
    request: &ProduceRequest<'_>,
    version: i16,
    peer: &Peer,
) -> Duration {
    let Access::Principal(principal) = access else {
        return Duration::ZERO;
    };
    let Some(rate) = principal.produce_bytes_per_s else {
        return Duration::ZERO;
    };
    let bytes: usize = request
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| p.records.map_or(0, <[u8]>::len))
        .sum();
    let now = Instant::now();
    let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
    let wait = gateway.quotas.charge(&principal.name, rate, bytes, now);
    if wait.is_zero() {
        return wait;
    }
    gateway.connections.throttled.add(1);
    gateway
        .connections
        .throttled_ms
        .add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
    if version >= PRODUCE_CLIENT_THROTTLES_VERSION {
        peer.muted_until.set(Some(now + wait));
    } else {
        tokio::time::sleep(wait).await;
    }
    wait
}

/// The first Produce version whose clients wait out the throttle time
/// themselves (KIP-219).
const PRODUCE_CLIENT_THROTTLES_VERSION: i16 = 6;

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
    peer: &Peer,
) -> Result<(), AnswerError> {
    let version = request.header.api_version;
    let correlation_id = request.header.correlation_id;
    if let Err(denied) = peer.sasl.borrow().admits(request.body.api_key()) {
        gateway.connections.denied(denied.reason()).add(1);
        return Err(AnswerError::Unauthenticated {
            api_key: request.body.api_key(),
            denied,
        });
    }
    let access = Access::of(&peer.sasl.borrow().session);
    let body = match request.body {
        RequestBody::ApiVersions(_) => {
            ResponseBody::ApiVersions(api_versions(kafka::error_code::NONE))
        }
        RequestBody::DescribeAcls(r) => {
            ResponseBody::DescribeAcls(acls::describe(gateway.auth.as_deref(), &access, &r))
        }
        RequestBody::SaslHandshake(r) => {
            ResponseBody::SaslHandshake(peer.sasl.borrow_mut().handshake(gateway, &r))
        }
        RequestBody::SaslAuthenticate(r) => {
            let response = peer.sasl.borrow_mut().authenticate(gateway, &r);
            if response.error_code != kafka::error_code::NONE {
                // As Kafka's connection.failed.authentication.delay.ms: a
                // client guessing passwords gets its answers slowly.
                tokio::time::sleep(FAILED_AUTHENTICATION_DELAY).await;
            }
            ResponseBody::SaslAuthenticate(response)
        }
        RequestBody::Metadata(mut r) => {
            let denied = access.metadata(gateway, &mut r);
            let mut response = metadata::metadata(gateway, r, version).await;
            access.metadata_answer(&mut response);
            response.topics.extend(denied);
            ResponseBody::Metadata(response)
        }
        RequestBody::Produce(mut r) => {
            let acks = r.acks;
            let denied = access.produce(gateway, &mut r);
            let throttle = hold_to_quota(gateway, &access, &r, version, peer).await;
            let mut response = produce::produce(gateway, r).await;
            if acks == 0 {
                return Ok(());
            }
            response.topics.extend(denied);
            response.throttle_time_ms = i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX);
            ResponseBody::Produce(response)
        }
        RequestBody::Fetch(mut r) => {
            let denied = access.fetch(gateway, &mut r);
            // The records borrow the converted batches, which live here.
            let fetched = fetch::fetch(gateway, &r).await;
            // Room for the records and the fields around them, so the
            // answer is not grown (copied) on the way.
            out.reserve(fetched.bytes() + FETCH_ANSWER_OVERHEAD_BYTES);
            let mut response = fetched.response();
            response.topics.extend(denied);
            let body = ResponseBody::Fetch(response);
            return Ok(kafka::encode_response_frame(
                out,
                correlation_id,
                version,
                &body,
            )?);
        }
        RequestBody::ListOffsets(mut r) => {
            let denied = access.list_offsets(gateway, &mut r);
            let mut response = offsets::list_offsets(gateway, r).await;
            response.topics.extend(denied);
            ResponseBody::ListOffsets(response)
        }
        RequestBody::CreateTopics(mut r) => {
            let denied = access.create_topics(gateway, &mut r);
            let mut response = admin::create_topics(gateway, r).await;
            response.topics.extend(denied);
            ResponseBody::CreateTopics(response)
        }
        RequestBody::DeleteTopics(mut r) => {
            let denied = access.delete_topics(gateway, &mut r);
            let mut response = admin::delete_topics(gateway, r).await;
            response.responses.extend(denied);
            ResponseBody::DeleteTopics(response)
        }
        RequestBody::DescribeConfigs(mut r) => {
            let denied = access.describe_configs(gateway, &mut r);
            let mut response = admin::describe_configs(gateway, r).await;
            response.results.extend(denied);
            ResponseBody::DescribeConfigs(response)
        }
        RequestBody::InitProducerId(r) => {
            ResponseBody::InitProducerId(admin::init_producer_id(gateway, r).await)
        }
        RequestBody::FindCoordinator(r) => {
            ResponseBody::FindCoordinator(groups::find_coordinator(gateway, r, version))
        }
        RequestBody::JoinGroup(r) => ResponseBody::JoinGroup(
            groups::join(gateway, r, &request.header, version, peer.address).await,
        ),
        RequestBody::SyncGroup(r) => ResponseBody::SyncGroup(groups::sync(gateway, r).await),
        RequestBody::Heartbeat(r) => ResponseBody::Heartbeat(groups::heartbeat(gateway, r)),
        RequestBody::LeaveGroup(r) => ResponseBody::LeaveGroup(groups::leave(gateway, r, version)),
        RequestBody::OffsetCommit(mut r) => {
            let denied = access.offset_commit(gateway, &mut r);
            let mut response = groups::commit_offsets(gateway, r).await;
            response.topics.extend(denied);
            ResponseBody::OffsetCommit(response)
        }
        RequestBody::OffsetFetch(r) => {
            let asked = r.clone();
            let mut response = groups::fetch_offsets(gateway, r, version);
            access.offset_fetch(gateway, &asked, &mut response);
            ResponseBody::OffsetFetch(response)
        }
        RequestBody::DescribeGroups(r) => {
            ResponseBody::DescribeGroups(groups::describe(gateway, r))
        }
        RequestBody::ListGroups(r) => ResponseBody::ListGroups(groups::list(gateway, r)),
        RequestBody::DeleteGroups(r) => {
            ResponseBody::DeleteGroups(groups::delete(gateway, r).await)
        }
        RequestBody::OffsetDelete(mut r) => {
            let denied = access.offset_delete(gateway, &mut r);
            let mut response = groups::delete_offsets(gateway, r).await;
            response.topics.extend(denied);
            ResponseBody::OffsetDelete(response)
        }
        RequestBody::DescribeCluster(r) => {
            ResponseBody::DescribeCluster(metadata::describe_cluster(gateway, r))
        }
        RequestBody::ElectLeaders(r) => {
            let names = r
                .topic_partitions
                .as_ref()
                .map(|t| t.iter().map(|t| t.topic.as_str()));
            ResponseBody::ElectLeaders(match access.placement(gateway, names) {
                Ok(()) => placement::elect_leaders(gateway, r).await,
                Err(error_code) => ElectLeadersResponse {
                    error_code,
                    ..ElectLeadersResponse::default()
                },
            })
        }
        RequestBody::AlterPartitionReassignments(r) => {
            let names = Some(r.topics.iter().map(|t| t.name.as_str()));
            ResponseBody::AlterPartitionReassignments(match access.placement(gateway, names) {
                Ok(()) => placement::alter_reassignments(gateway, r).await,
                Err(error_code) => AlterPartitionReassignmentsResponse {
                    error_code,
                    error_message: Some("not allowed to move these topics".to_owned()),
                    ..AlterPartitionReassignmentsResponse::default()
                },
            })
        }
        RequestBody::ListPartitionReassignments(r) => {
            let names = r.topics.as_ref().map(|t| t.iter().map(|t| t.name.as_str()));
            ResponseBody::ListPartitionReassignments(match access.placement(gateway, names) {
                Ok(()) => placement::list_reassignments(r),
                Err(error_code) => ListPartitionReassignmentsResponse {
                    error_code,
                    error_message: Some("not allowed to see these topics' moves".to_owned()),
                    ..ListPartitionReassignmentsResponse::default()
                },
            })
        }
    };
    Ok(kafka::encode_response_frame(
        out,
        correlation_id,
        version,
        &body,
    )?)
}
