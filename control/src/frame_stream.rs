//! Whole kelp frames over a blocking byte stream (a `std::net::TcpStream`):
//! the control process's server side and its broker link both read and
//! write through these two functions.
//!
//! Frames are cut by `wire`'s one [`FrameDecoder`]: every header is decoded
//! (magic, version, type, length bounded by
//! `wire::limits::FRAME_PAYLOAD_BYTES_MAX`) before a payload buffer is sized
//! from it, and every payload is checked against the header's checksum
//! before it is returned.

use std::io::{ErrorKind, Read, Write};

use wire::frame::{encode_frame, FrameHeader, FrameType};
use wire::{DecodeError, FrameDecoder};

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameReadError {
    /// The stream failed (or timed out) while reading.
    #[error("{what}: {source}")]
    Io {
        /// What was being read.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The stream ended inside a frame.
    #[error("the stream ended inside a frame ({what})")]
    Truncated {
        /// What was being read.
        what: &'static str,
    },
    /// The header is not a kelp frame header: the stream cannot be
    /// resynchronised and must be closed.
    #[error("bad frame header: {0}")]
    Header(DecodeError),
    /// The payload failed its checksum; the stream is still framed
    /// correctly, so only this frame is lost.
    #[error("frame payload: {error}")]
    Payload {
        /// The frame's header (its request id, for the answer).
        header: FrameHeader,
        /// What failed.
        error: DecodeError,
    },
}

impl FrameReadError {
    /// Whether the stream may still be used after this error.
    pub fn stream_usable(&self) -> bool {
        matches!(self, FrameReadError::Payload { .. })
    }
}

/// Read one frame into `payload` (its memory reused, the frame's payload on
/// return). `Ok(None)`: the peer closed the stream cleanly at a frame
/// boundary.
pub fn read_frame(
    reader: &mut impl Read,
    payload: &mut Vec<u8>,
) -> Result<Option<FrameHeader>, FrameReadError> {
    let mut decoder = FrameDecoder::with_buffer(std::mem::take(payload));
    let frame = loop {
        if decoder.room_needed().is_some() {
            // A blocking reader holds one frame at a time: room is given.
            match decoder.admit() {
                Some(frame) => break frame,
                None => continue,
            }
        }
        let (piece, reading) = if decoder.in_payload() {
            ("frame payload", "reading a frame payload")
        } else {
            ("frame header", "reading a frame header")
        };
        let n = match reader.read(decoder.unfilled()) {
            Ok(0) if decoder.at_boundary() => return Ok(None),
            Ok(0) => return Err(FrameReadError::Truncated { what: piece }),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(FrameReadError::Io {
                    what: reading,
                    source,
                })
            }
        };
        if let Some(frame) = decoder.filled(n).map_err(FrameReadError::Header)? {
            break frame;
        }
    };
    *payload = frame.payload;
    let header = frame.header;
    header
        .verify_payload(payload)
        .map_err(|error| FrameReadError::Payload { header, error })?;
    Ok(Some(header))
}

/// Write one whole frame with `frame_type`, `request_id` and `payload`, using
/// `scratch` to assemble it so it goes out in one write.
pub fn write_frame(
    writer: &mut impl Write,
    scratch: &mut Vec<u8>,
    frame_type: FrameType,
    request_id: u32,
    payload: &[u8],
) -> std::io::Result<()> {
    scratch.clear();
    encode_frame(scratch, frame_type, request_id, payload);
    writer.write_all(scratch)?;
    writer.flush()
}

/// Why a blocking connection could not authenticate.
#[derive(Debug, thiserror::Error)]
pub enum AuthenticateError {
    #[error("authenticating: {0}")]
    Io(std::io::Error),
    #[error("authenticating: {0}")]
    Read(FrameReadError),
    #[error("authenticating: the answer does not decode: {0}")]
    Decode(DecodeError),
    #[error(transparent)]
    Refused(auth::HandshakeError),
}

/// The request id of authentication steps on a blocking link (the link
/// sends nothing else until they are answered).
const AUTHENTICATE_REQUEST_ID: u32 = 1;

/// Authenticate a blocking connection with `credentials` before anything
/// else is sent on it: two round trips.
pub fn authenticate(
    stream: &mut (impl Read + Write),
    credentials: &auth::Credentials,
) -> Result<(), AuthenticateError> {
    let (mut handshake, mut request) = auth::Handshake::start_fresh(credentials);
    let mut frame = Vec::new();
    let mut payload = Vec::new();
    loop {
        frame.clear();
        request.encode(AUTHENTICATE_REQUEST_ID, &mut frame);
        stream.write_all(&frame).map_err(AuthenticateError::Io)?;
        let header = read_frame(stream, &mut payload)
            .map_err(AuthenticateError::Read)?
            .ok_or(AuthenticateError::Read(FrameReadError::Truncated {
                what: "authentication answer",
            }))?;
        let response = wire::Response::decode(header.frame_type, &payload)
            .map_err(AuthenticateError::Decode)?;
        match handshake
            .answer(&response)
            .map_err(AuthenticateError::Refused)?
        {
            Some(next) => request = next,
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        write_frame(&mut out, &mut scratch, FrameType::DoneResponse, 7, b"abc").unwrap();
        let mut payload = Vec::new();
        let header = read_frame(&mut out.as_slice(), &mut payload)
            .unwrap()
            .unwrap();
        assert_eq!(
            (header.frame_type, header.request_id),
            (FrameType::DoneResponse, 7)
        );
        assert_eq!(payload, b"abc");

        assert!(read_frame(&mut &b""[..], &mut payload).unwrap().is_none());
        let err = read_frame(&mut &out[..5], &mut payload).unwrap_err();
        assert!(matches!(err, FrameReadError::Truncated { .. }), "{err}");
        let err = read_frame(&mut &out[..18], &mut payload).unwrap_err();
        assert!(matches!(err, FrameReadError::Truncated { .. }), "{err}");

        let mut bad = out.clone();
        bad[0] = b'X';
        let err = read_frame(&mut bad.as_slice(), &mut payload).unwrap_err();
        assert!(matches!(err, FrameReadError::Header(_)) && !err.stream_usable());

        let mut corrupt = out.clone();
        *corrupt.last_mut().unwrap() ^= 1;
        let err = read_frame(&mut corrupt.as_slice(), &mut payload).unwrap_err();
        assert!(err.stream_usable(), "{err}");
    }
}
