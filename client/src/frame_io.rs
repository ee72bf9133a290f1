//! Reading response frames from a byte stream (a TCP connection or a QUIC
//! stream). Every header and payload is verified before anything uses it:
//! a fetch response's payload when it is decoded (`ResponseFrame::fetched`,
//! one pass for the frame's checksum and every batch's), every other one
//! here.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, BufReader};
use wire::frame::{FrameHeader, FrameType};
use wire::message::VerifiedResponse;
use wire::{DecodeError, Frame, FrameDecoder, Response};

use crate::error::ClientError;
use crate::low_water::ReceiveLowWater;

/// One frame, header checked, payload checksum checked (a fetch response's
/// when it is decoded). The payload is refcounted so records handed to the
/// user can point into it.
#[derive(Debug, Clone)]
pub(crate) struct ResponseFrame {
    pub(crate) header: FrameHeader,
    pub(crate) payload: bytes::Bytes,
}

impl ResponseFrame {
    /// Decode the payload. A broker `Error` becomes `ClientError::Broker`.
    pub(crate) fn response(&self) -> Result<Response<'_>, ClientError> {
        self.verified().map(|v| v.response)
    }

    /// Decode the payload with a fetch response's batches validated (empty
    /// for every other response).
    pub(crate) fn verified(&self) -> Result<VerifiedResponse<'_>, ClientError> {
        let v = if self.header.frame_type == FrameType::FetchResponse {
            Response::decode_verified(&self.header, &self.payload)?
        } else {
            // Verified when it was read.
            VerifiedResponse {
                response: Response::decode(self.header.frame_type, &self.payload)?,
                batches: Vec::new(),
            }
        };
        match v.response {
            Response::Error { code, message } => Err(ClientError::Broker { code, message }),
            Response::Sealed {
                message,
                successors,
            } => Err(ClientError::Sealed {
                message,
                successors: Arc::new(successors),
            }),
            _ => Ok(v),
        }
    }
}

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum FrameReadError {
    /// The stream cannot be trusted any more (bad header, cut short, I/O
    /// error): every request waiting on it fails.
    Stream(ClientError),
    /// The frame was framed correctly but its payload checksum failed: only
    /// the request it answers fails, the stream stays usable.
    Payload { request_id: u32, error: DecodeError },
}

/// Read one frame. `Ok(None)` means the peer closed the stream cleanly at
/// a frame boundary. A large payload wakes the reader once per
/// `low_water`'s worth of bytes, not per arriving segment.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    low_water: &mut ReceiveLowWater,
) -> Result<Option<ResponseFrame>, FrameReadError> {
    let low_water_failed = |e| FrameReadError::Stream(ClientError::io("setting SO_RCVLOWAT", e));
    // One frame per call: the decoder starts at a boundary and every
    // payload has room (the SDK holds the frames it asked for).
    let mut decoder = FrameDecoder::new();
    let frame = loop {
        if decoder.room_needed().is_some() {
            match decoder.admit() {
                Some(frame) => break frame,
                None => continue,
            }
        }
        let in_payload = decoder.in_payload();
        let wanted = decoder.unfilled().len();
        // With nothing buffered, the socket holds the rest of the payload.
        if in_payload && reader.buffer().is_empty() {
            low_water.expect(wanted).map_err(low_water_failed)?;
        }
        let (what, reading) = if in_payload {
            ("frame payload", "reading a frame payload")
        } else {
            ("frame header", "reading a frame header")
        };
        let n = reader
            .read(decoder.unfilled())
            .await
            .map_err(|e| FrameReadError::Stream(ClientError::io(reading, e)))?;
        if n == 0 {
            if decoder.at_boundary() {
                return Ok(None);
            }
            return Err(FrameReadError::Stream(ClientError::Decode(
                DecodeError::Truncated {
                    what,
                    need: decoder.piece_bytes() as u64,
                    have: (decoder.piece_bytes() - wanted) as u64,
                },
            )));
        }
        if let Some(frame) = decoder
            .filled(n)
            .map_err(|e| FrameReadError::Stream(ClientError::Decode(e)))?
        {
            break frame;
        }
    };
    low_water.expect(0).map_err(low_water_failed)?;
    let Frame { header, payload } = frame;
    if header.frame_type != FrameType::FetchResponse {
        header
            .verify_payload(&payload)
            .map_err(|error| FrameReadError::Payload {
                request_id: header.request_id,
                error,
            })?;
    }
    Ok(Some(ResponseFrame {
        header,
        payload: payload.into(),
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wire::frame::FrameType;
    use wire::ErrorCode;

    fn frames() -> Vec<u8> {
        let mut out = Vec::new();
        Response::Done.encode(1, &mut out);
        Response::Produced {
            segment: 3,
            base_offset: 10,
            record_count: 2,
        }
        .encode(2, &mut out);
        Response::Error {
            code: ErrorCode::InvalidTopicName,
            message: "bad name".into(),
        }
        .encode(3, &mut out);
        out
    }

    async fn read_all(bytes: &[u8]) -> Vec<Result<Option<ResponseFrame>, FrameReadError>> {
        let mut reader = BufReader::new(bytes);
        let mut low_water = ReceiveLowWater::new(None);
        let mut out = Vec::new();
        loop {
            let r = read_frame(&mut reader, &mut low_water).await;
            let stop = !matches!(r, Ok(Some(_)));
            out.push(r);
            if stop {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn reads_frames_in_order_then_clean_end() {
        let bytes = frames();
        let got = read_all(&bytes).await;
        assert_eq!(got.len(), 4);
        let f = got[0].as_ref().unwrap().as_ref().unwrap();
        assert_eq!(f.header.request_id, 1);
        assert!(matches!(f.response().unwrap(), Response::Done));
        let f = got[1].as_ref().unwrap().as_ref().unwrap();
        assert!(matches!(
            f.response().unwrap(),
            Response::Produced {
                record_count: 2,
                ..
            }
        ));
        let f = got[2].as_ref().unwrap().as_ref().unwrap();
        assert!(matches!(
            f.response(),
            Err(ClientError::Broker {
                code: ErrorCode::InvalidTopicName,
                ..
            })
        ));
        assert!(matches!(got[3], Ok(None)));
    }

    #[tokio::test]
    async fn truncated_stream_is_an_error_at_every_cut() {
        let bytes = frames();
        let mut one = Vec::new();
        Response::Done.encode(1, &mut one);
        for cut in 1..bytes.len() {
            let got = read_all(&bytes[..cut]).await;
            let last = got.last().unwrap();
            // A cut exactly at a frame boundary is a clean end.
            let at_boundary = got.len() > 1 && matches!(last, Ok(None));
            if !at_boundary {
                assert!(
                    matches!(last, Err(FrameReadError::Stream(ClientError::Decode(_)))),
                    "cut at {cut}: {last:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn corrupt_header_is_fatal_corrupt_payload_is_not() {
        let mut bytes = frames();
        bytes[0] = b'X';
        let got = read_all(&bytes).await;
        assert!(matches!(
            got[0],
            Err(FrameReadError::Stream(ClientError::Decode(
                DecodeError::BadMagic { .. }
            )))
        ));

        let mut bytes = Vec::new();
        Response::Produced {
            segment: 3,
            base_offset: 10,
            record_count: 2,
        }
        .encode(9, &mut bytes);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xFF;
        Response::Done.encode(10, &mut bytes);
        let mut reader = BufReader::new(bytes.as_slice());
        let mut low_water = ReceiveLowWater::new(None);
        match read_frame(&mut reader, &mut low_water).await {
            Err(FrameReadError::Payload { request_id, error }) => {
                assert_eq!(request_id, 9);
                assert!(matches!(error, DecodeError::Checksum { .. }));
            }
            other => panic!("{other:?}"),
        }
        // The next frame still reads.
        let next = read_frame(&mut reader, &mut low_water)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(next.header.frame_type, FrameType::DoneResponse);
    }
}
