//! Whole requests and responses: header plus body, dispatched on the api
//! key, and the 4-byte size prefix that frames each on a TCP stream.
//!
//! A frame on the wire is `size INT32` followed by `size` bytes of header
//! and body. [`frame_size`] reads the prefix; [`Request::decode`] takes the
//! bytes after it.

use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::Encoder;
use crate::error::{DecodeError, EncodeError};
use crate::header::{RequestHeader, ResponseHeader};

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

// `RequestBody` and `ResponseBody`: one variant per schema file in
// `kafka/schema/`, with `decode`, `encode` and `api_key`.
include!(concat!(env!("OUT_DIR"), "/bodies.rs"));

/// A decoded request: its header and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// The header.
    pub header: RequestHeader,
    /// The body.
    pub body: RequestBody<'a>,
}

impl<'a> Request<'a> {
    /// A request of `body` at `api_version`, its header's api key the
    /// body's.
    pub fn new(
        body: RequestBody<'a>,
        api_version: i16,
        correlation_id: i32,
        client_id: Option<String>,
    ) -> Self {
        Request {
            header: RequestHeader {
                api_key: body.api_key().code(),
                api_version,
                correlation_id,
                client_id,
            },
            body,
        }
    }

    /// Decodes a request frame (the bytes after the size prefix). An
    /// unknown api key or a version outside [`crate::SUPPORTED_APIS`] is an
    /// error carrying the correlation id, so the caller can answer it (an
    /// ApiVersions request of an unknown version gets an ApiVersions v0
    /// response with UNSUPPORTED_VERSION, per KIP-511).
    pub fn decode(frame: &'a [u8]) -> Result<Self, DecodeError> {
        let (request, rest) = Request::decode_leaving(frame)?;
        rest.finish()?;
        Ok(request)
    }

    /// [`Request::decode`], but bytes past the end of the body are left
    /// unread rather than refused, as Kafka's brokers do: some clients
    /// send them (librdkafka's Metadata v9+ for all topics ends with a
    /// 4-byte placeholder where a 1-byte null compact array belongs).
    /// Returns the request and how many bytes were left.
    pub fn decode_lenient(frame: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let (request, rest) = Request::decode_leaving(frame)?;
        Ok((request, rest.remaining()))
    }

    fn decode_leaving(frame: &'a [u8]) -> Result<(Self, Decoder<'a>), DecodeError> {
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
        Ok((Request { header, body }, r))
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
