//! One Kafka connection: read a size-prefixed request, decode it, answer
//! it, then read the next. Kafka answers a connection's requests in the
//! order they were sent; handling them one at a time keeps that order, and
//! a client's pipelined requests wait in the socket buffer (pushback
//! through TCP flow control). A request that does not decode closes the
//! connection, logged; nothing else is affected.

use std::net::SocketAddr;
use std::rc::Rc;

use kafka::api::api_versions::{ApiVersion, ApiVersionsResponse};
use kafka::request::FRAME_PREFIX_BYTES;
use kafka::{ApiKey, DecodeError, Request, RequestBody, ResponseBody, SUPPORTED_APIS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{admin, fetch, groups, metadata, offsets, produce, Gateway, REQUEST_FRAME_BYTES_MAX};

/// A connection keeps its receive buffer up to this size between requests.
const RECEIVE_BUFFER_KEPT_BYTES: usize = 256 << 10;

pub(crate) async fn serve(
    gateway: Rc<Gateway>,
    mut stream: tokio::net::TcpStream,
    peer: SocketAddr,
) {
    let mut frame = Vec::new();
    let mut out = Vec::new();
    let mut prefix = [0u8; FRAME_PREFIX_BYTES];
    loop {
        if let Err(e) = stream.read_exact(&mut prefix).await {
            if e.kind() != std::io::ErrorKind::UnexpectedEof {
                log::debug!("Kafka {peer}: read: {e}");
            }
            return;
        }
        let size = match kafka::frame_size(&prefix, REQUEST_FRAME_BYTES_MAX) {
            Ok(Some(n)) => n,
            Ok(None) => return,
            Err(e) => {
                log::warn!("Kafka {peer}: closing connection: {e}");
                return;
            }
        };
        // Room for the request among all connections' (the frame limit is
        // below the total, so one request always fits).
        let Ok(_room) = gateway.request_bytes.acquire_many(size as u32).await else {
            return;
        };
        frame.resize(size, 0);
        if let Err(e) = stream.read_exact(&mut frame).await {
            log::debug!("Kafka {peer}: read request: {e}");
            return;
        }
        out.clear();
        let handled = match Request::decode(&frame) {
            Ok(request) => handle(&gateway, request, &mut out, peer).await,
            Err(DecodeError::UnsupportedVersion {
                api_key: ApiKey::ApiVersions,
                correlation_id,
                ..
            }) => {
                // KIP-511: answer at v0 with the versions this side speaks.
                let body =
                    ResponseBody::ApiVersions(api_versions(kafka::error_code::UNSUPPORTED_VERSION));
                kafka::encode_response_frame(&mut out, correlation_id, 0, &body)
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(format!("malformed request: {e}")),
        };
        if let Err(e) = handled {
            log::warn!("Kafka {peer}: closing connection: {e}");
            return;
        }
        if !out.is_empty() {
            if let Err(e) = stream.write_all(&out).await {
                log::debug!("Kafka {peer}: write: {e}");
                return;
            }
        }
        if frame.capacity() > RECEIVE_BUFFER_KEPT_BYTES {
            frame = Vec::new();
        }
        if out.capacity() > RECEIVE_BUFFER_KEPT_BYTES {
            out = Vec::new();
        }
    }
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
) -> Result<(), String> {
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
            let body = ResponseBody::Fetch(fetched.response());
            return kafka::encode_response_frame(out, correlation_id, version, &body)
                .map_err(|e| e.to_string());
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
    };
    kafka::encode_response_frame(out, correlation_id, version, &body).map_err(|e| e.to_string())
}
