//! Whole requests and responses: header plus body, dispatched on the api
//! key, and the 4-byte size prefix that frames each on a TCP stream.
//!
//! A frame on the wire is `size INT32` followed by `size` bytes of header
//! and body. [`frame_size`] reads the prefix; [`Request::decode`] takes the
//! bytes after it.

use crate::api::api_versions::{ApiVersionsRequest, ApiVersionsResponse};
use crate::api::create_topics::{CreateTopicsRequest, CreateTopicsResponse};
use crate::api::delete_topics::{DeleteTopicsRequest, DeleteTopicsResponse};
use crate::api::describe_configs::{DescribeConfigsRequest, DescribeConfigsResponse};
use crate::api::describe_groups::{DescribeGroupsRequest, DescribeGroupsResponse};
use crate::api::fetch::{FetchRequest, FetchResponse};
use crate::api::find_coordinator::{FindCoordinatorRequest, FindCoordinatorResponse};
use crate::api::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use crate::api::init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};
use crate::api::join_group::{JoinGroupRequest, JoinGroupResponse};
use crate::api::leave_group::{LeaveGroupRequest, LeaveGroupResponse};
use crate::api::list_groups::{ListGroupsRequest, ListGroupsResponse};
use crate::api::list_offsets::{ListOffsetsRequest, ListOffsetsResponse};
use crate::api::metadata::{MetadataRequest, MetadataResponse};
use crate::api::offset_commit::{OffsetCommitRequest, OffsetCommitResponse};
use crate::api::offset_fetch::{OffsetFetchRequest, OffsetFetchResponse};
use crate::api::produce::{ProduceRequest, ProduceResponse};
use crate::api::sync_group::{SyncGroupRequest, SyncGroupResponse};
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::Encoder;
use crate::error::{DecodeError, EncodeError};
use crate::header::{RequestHeader, ResponseHeader};
use crate::message::Message;

/// The size of the frame length prefix.
pub const FRAME_PREFIX_BYTES: usize = 4;
/// The default largest request frame, Kafka's `socket.request.max.bytes`
/// default (100 MiB).
pub const REQUEST_FRAME_BYTES_MAX: usize = 100 * 1024 * 1024;

/// Reads a frame's size prefix from the start of `buf`: `Ok(None)` until
/// four bytes are there, an error when the size is negative or above
/// `max_bytes`.
pub fn frame_size(buf: &[u8], max_bytes: usize) -> Result<Option<usize>, DecodeError> {
    let Some(prefix) = buf.first_chunk::<FRAME_PREFIX_BYTES>() else {
        return Ok(None);
    };
    let size = i32::from_be_bytes(*prefix);
    match usize::try_from(size) {
        Ok(n) if n <= max_bytes => Ok(Some(n)),
        _ => Err(DecodeError::FrameSize {
            size: i64::from(size),
            max_bytes,
        }),
    }
}

macro_rules! bodies {
    ($($variant:ident => $request:ident $(<$rl:lifetime>)?, $response:ident $(<$pl:lifetime>)?;)*) => {
        /// A request body of any supported API.
        #[derive(Debug, Clone, PartialEq, Eq)]
        #[allow(clippy::large_enum_variant)]
        pub enum RequestBody<'a> {
            $(
                #[doc = concat!("A ", stringify!($variant), " request.")]
                $variant($request $(<$rl>)?),
            )*
        }

        /// A response body of any supported API.
        #[derive(Debug, Clone, PartialEq, Eq)]
        #[allow(clippy::large_enum_variant)]
        pub enum ResponseBody<'a> {
            $(
                #[doc = concat!("A ", stringify!($variant), " response.")]
                $variant($response $(<$pl>)?),
            )*
        }

        impl<'a> RequestBody<'a> {
            /// Decodes the body of a request of `api_key` at `version`.
            pub fn decode(api_key: ApiKey, r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
                Ok(match api_key {
                    $(ApiKey::$variant => RequestBody::$variant(<$request>::decode(r, version)?),)*
                })
            }

            /// Encodes the body at `version`.
            pub fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
                match self {
                    $(RequestBody::$variant(b) => b.encode(w, version),)*
                }
            }

            /// The body's API.
            pub fn api_key(&self) -> ApiKey {
                match self {
                    $(RequestBody::$variant(_) => ApiKey::$variant,)*
                }
            }
        }

        impl<'a> ResponseBody<'a> {
            /// Decodes the body of a response of `api_key` at `version`.
            pub fn decode(api_key: ApiKey, r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
                Ok(match api_key {
                    $(ApiKey::$variant => ResponseBody::$variant(<$response>::decode(r, version)?),)*
                })
            }

            /// Encodes the body at `version`.
            pub fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
                match self {
                    $(ResponseBody::$variant(b) => b.encode(w, version),)*
                }
            }

            /// The body's API.
            pub fn api_key(&self) -> ApiKey {
                match self {
                    $(ResponseBody::$variant(_) => ApiKey::$variant,)*
                }
            }
        }
    };
}

bodies! {
    Produce => ProduceRequest<'a>, ProduceResponse;
    Fetch => FetchRequest, FetchResponse<'a>;
    ListOffsets => ListOffsetsRequest, ListOffsetsResponse;
    Metadata => MetadataRequest, MetadataResponse;
    OffsetCommit => OffsetCommitRequest, OffsetCommitResponse;
    OffsetFetch => OffsetFetchRequest, OffsetFetchResponse;
    FindCoordinator => FindCoordinatorRequest, FindCoordinatorResponse;
    JoinGroup => JoinGroupRequest, JoinGroupResponse;
    Heartbeat => HeartbeatRequest, HeartbeatResponse;
    LeaveGroup => LeaveGroupRequest, LeaveGroupResponse;
    SyncGroup => SyncGroupRequest, SyncGroupResponse;
    DescribeGroups => DescribeGroupsRequest, DescribeGroupsResponse;
    ListGroups => ListGroupsRequest, ListGroupsResponse;
    ApiVersions => ApiVersionsRequest, ApiVersionsResponse;
    CreateTopics => CreateTopicsRequest, CreateTopicsResponse;
    DeleteTopics => DeleteTopicsRequest, DeleteTopicsResponse;
    InitProducerId => InitProducerIdRequest, InitProducerIdResponse;
    DescribeConfigs => DescribeConfigsRequest, DescribeConfigsResponse;
}

/// A decoded request: its header and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// The header.
    pub header: RequestHeader,
    /// The body.
    pub body: RequestBody<'a>,
}

impl<'a> Request<'a> {
    /// Decodes a request frame (the bytes after the size prefix). An
    /// unknown api key or a version outside [`crate::SUPPORTED_APIS`] is an
    /// error carrying the correlation id, so the caller can answer it (an
    /// ApiVersions request of an unknown version gets an ApiVersions v0
    /// response with UNSUPPORTED_VERSION, per KIP-511).
    pub fn decode(frame: &'a [u8]) -> Result<Self, DecodeError> {
        let mut peek = Decoder::new(frame);
        let code = peek.i16()?;
        let version = peek.i16()?;
        let correlation_id = peek.i32()?;
        let Some(api_key) = ApiKey::from_code(code) else {
            return Err(DecodeError::UnknownApiKey {
                api_key: code,
                correlation_id,
            });
        };
        if !api_key.supports(version) {
            return Err(DecodeError::UnsupportedVersion {
                api_key,
                version,
                correlation_id,
            });
        }
        let mut r = Decoder::new(frame);
        let header = RequestHeader::decode(&mut r, api_key.request_header_version(version))?;
        let body = RequestBody::decode(api_key, &mut r, version)?;
        r.finish()?;
        Ok(Request { header, body })
    }

    /// Appends the request as a frame: size prefix, header, body.
    pub fn encode_frame(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let version = self.header.api_version;
        let api_key = self.body.api_key();
        let header = RequestHeader {
            api_key: api_key.code(),
            ..self.header.clone()
        };
        encode_frame(out, |w| {
            header.encode(w, api_key.request_header_version(version))?;
            self.body.encode(w, version)
        })
    }
}

/// Appends a response frame: size prefix, the response header of the
/// body's API at `version`, and the body.
pub fn encode_response_frame(
    out: &mut Vec<u8>,
    correlation_id: i32,
    version: i16,
    body: &ResponseBody<'_>,
) -> Result<(), EncodeError> {
    let header_version = body.api_key().response_header_version(version);
    encode_frame(out, |w| {
        ResponseHeader { correlation_id }.encode(w, header_version);
        body.encode(w, version)
    })
}

/// Decodes a response frame (the bytes after the size prefix) to a request
/// of `api_key` at `version`: what a client does, used by tests.
pub fn decode_response(
    frame: &[u8],
    api_key: ApiKey,
    version: i16,
) -> Result<(ResponseHeader, ResponseBody<'_>), DecodeError> {
    let mut r = Decoder::new(frame);
    let header = ResponseHeader::decode(&mut r, api_key.response_header_version(version))?;
    let body = ResponseBody::decode(api_key, &mut r, version)?;
    r.finish()?;
    Ok((header, body))
}

/// Writes a size prefix, then what `write` appends, then patches the size.
fn encode_frame(
    out: &mut Vec<u8>,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    let start = out.len();
    out.put_i32(0);
    let written = write(out);
    if let Err(e) = written {
        out.truncate(start);
        return Err(e);
    }
    let size = out.len() - start - FRAME_PREFIX_BYTES;
    let Ok(size) = i32::try_from(size) else {
        out.truncate(start);
        return Err(EncodeError::TooLong {
            length: size,
            max: i32::MAX as usize,
        });
    };
    out[start..start + FRAME_PREFIX_BYTES].copy_from_slice(&size.to_be_bytes());
    Ok(())
}
