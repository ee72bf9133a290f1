//! The one frame decoder: cuts kelp frames out of a byte stream, whatever
//! carries it (a TCP socket, a QUIC stream, a blocking or an async reader)
//! and whichever side reads it. It does no I/O: the caller reads into
//! [`FrameDecoder::unfilled`] (so bytes land where they stay, no copy) and
//! reports how many came with [`FrameDecoder::filled`], or hands over bytes
//! it already holds with [`FrameDecoder::push`].
//!
//! A decoded header does not size a buffer by itself: the payload waits
//! for room ([`FrameDecoder::room_needed`]) until the caller grants it with
//! [`FrameDecoder::admit`], so a caller with a byte budget (a broker shard)
//! takes the room first and a peer's header can never make it allocate
//! beyond the budget; a caller with none admits at once. Nothing is read
//! ahead of the frame being cut.
//!
//! Payload checksums are the caller's to check (`FrameHeader::verify_payload`,
//! or `BrokerPortRequest::decode_verified`, which folds the check into the batch's).

use crate::error::DecodeError;
use crate::frame::{FrameHeader, FRAME_HEADER_BYTES};

/// One whole frame: its decoded header and its payload (not yet verified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The header, decoded and bounded.
    pub header: FrameHeader,
    /// The payload, `header.payload_bytes` long.
    pub payload: Vec<u8>,
}

/// Where the decoder is within the stream.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    header_bytes: [u8; FRAME_HEADER_BYTES],
    header_len: usize,
    /// The current frame's header, once whole.
    header: Option<FrameHeader>,
    /// Whether its payload has room (then `payload` is sized to it).
    admitted: bool,
    payload: Vec<u8>,
    /// Payload bytes received so far.
    payload_len: usize,
    /// A bad header was seen: the stream cannot be resynchronised.
    broken: bool,
}

impl FrameDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> FrameDecoder {
        FrameDecoder::default()
    }

    /// A decoder that reads its first payload into `buffer`'s memory (a
    /// caller's buffer kept from an earlier frame).
    pub fn with_buffer(buffer: Vec<u8>) -> FrameDecoder {
        FrameDecoder {
            payload: buffer,
            ..FrameDecoder::default()
        }
    }

    /// Whether the stream is at a frame boundary: no byte of a next frame
    /// has arrived (an end of stream here is clean).
    pub fn at_boundary(&self) -> bool {
        !self.broken && self.header_len == 0 && self.header.is_none()
    }

    /// Whether a frame has begun and is not whole yet.
    pub fn in_frame(&self) -> bool {
        !self.at_boundary()
    }

    /// Whether the current frame's header is whole (its payload is next).
    pub fn in_payload(&self) -> bool {
        self.header.is_some()
    }

    /// How long the piece being read is: the header's 16 bytes, or the
    /// decoded header's payload.
    pub fn piece_bytes(&self) -> usize {
        self.header
            .map_or(FRAME_HEADER_BYTES, |h| h.payload_bytes as usize)
    }

    /// The current frame's header, once whole.
    pub fn header(&self) -> Option<FrameHeader> {
        self.header
    }

    /// The payload bytes the decoded header waits to have room for.
    pub fn room_needed(&self) -> Option<u32> {
        match self.header {
            Some(h) if !self.admitted => Some(h.payload_bytes),
            _ => None,
        }
    }

    /// The waiting payload has room: its buffer is sized, and an empty
    /// payload completes the frame at once.
    pub fn admit(&mut self) -> Option<Frame> {
        let header = self.header?;
        if self.admitted {
            return None;
        }
        self.admitted = true;
        self.payload_len = 0;
        // Room is reserved, not zeroed: `push` appends into it, and
        // `unfilled` zeroes only what a kept buffer does not already hold
        // (every byte is overwritten before the frame completes).
        let n = header.payload_bytes as usize;
        self.payload.truncate(n);
        self.payload.reserve_exact(n - self.payload.len());
        self.complete()
    }

    /// Where the next bytes go: the rest of the header, or the rest of an
    /// admitted payload; empty while a payload waits for room or after a
    /// bad header.
    pub fn unfilled(&mut self) -> &mut [u8] {
        if self.broken {
            return &mut [];
        }
        match self.header {
            None => &mut self.header_bytes[self.header_len..],
            Some(h) if self.admitted => {
                let n = h.payload_bytes as usize;
                if self.payload.len() < n {
                    self.payload.resize(n, 0);
                }
                &mut self.payload[self.payload_len..n]
            }
            Some(_) => &mut [],
        }
    }

    /// `n` bytes were written to the front of [`FrameDecoder::unfilled`].
    /// Returns the frame they completed, if they did. A header that does
    /// not decode (bad magic, version, type, a payload over the frame
    /// limit) is an error, and the decoder takes nothing more.
    pub fn filled(&mut self, n: usize) -> Result<Option<Frame>, DecodeError> {
        if self.broken {
            return Err(DecodeError::Invalid {
                what: "frame",
                reason: "the stream broke its framing earlier",
            });
        }
        match self.header {
            None => {
                assert!(self.header_len + n <= FRAME_HEADER_BYTES);
                self.header_len += n;
                if self.header_len < FRAME_HEADER_BYTES {
                    return Ok(None);
                }
                self.header_len = 0;
                match FrameHeader::decode(&self.header_bytes) {
                    // decode bounds payload_bytes by FRAME_PAYLOAD_BYTES_MAX.
                    Ok(header) => {
                        self.header = Some(header);
                        self.admitted = false;
                        Ok(None)
                    }
                    Err(e) => {
                        self.broken = true;
                        Err(e)
                    }
                }
            }
            Some(_) => {
                assert!(self.admitted, "bytes filled into a payload without room");
                assert!(self.payload_len + n <= self.payload.len().min(self.piece_bytes()));
                self.payload_len += n;
                Ok(self.complete())
            }
        }
    }

    /// Takes bytes from the front of `bytes` (at most what the current
    /// piece needs, so nothing beyond one frame), advancing `bytes` past
    /// them. For transports that hand over bytes they already hold.
    pub fn push(&mut self, bytes: &mut &[u8]) -> Result<Option<Frame>, DecodeError> {
        if let (Some(header), true) = (self.header, self.admitted) {
            // Into the payload without zeroing it first: copied over bytes
            // a kept buffer holds, appended past them.
            let end = header.payload_bytes as usize;
            let n = (end - self.payload_len).min(bytes.len());
            let at = self.payload_len;
            if self.payload.len() >= at + n {
                self.payload[at..at + n].copy_from_slice(&bytes[..n]);
            } else {
                self.payload.truncate(at);
                self.payload.extend_from_slice(&bytes[..n]);
            }
            *bytes = &bytes[n..];
            return self.filled(n);
        }
        let unfilled = self.unfilled();
        let n = unfilled.len().min(bytes.len());
        unfilled[..n].copy_from_slice(&bytes[..n]);
        *bytes = &bytes[n..];
        if n == 0 && !self.broken {
            return Ok(None);
        }
        self.filled(n)
    }

    /// Bytes of payload memory kept for the next frame.
    pub fn kept_bytes(&self) -> usize {
        self.payload.capacity()
    }

    /// Lets go of the kept payload memory (between frames only).
    pub fn drop_kept(&mut self) {
        if self.header.is_none() {
            self.payload = Vec::new();
        }
    }

    /// Gives a payload's memory back for the next frame to reuse. Its
    /// length is kept: the next payload overwrites the bytes it needs, so
    /// a frame no longer than the last one costs no zeroing.
    pub fn recycle(&mut self, buffer: Vec<u8>) {
        if self.header.is_none() && buffer.capacity() > self.payload.capacity() {
            self.payload = buffer;
        }
    }

    fn complete(&mut self) -> Option<Frame> {
        let header = self.header?;
        if !self.admitted || self.payload_len < header.payload_bytes as usize {
            return None;
        }
        self.header = None;
        self.admitted = false;
        self.payload_len = 0;
        self.payload.truncate(header.payload_bytes as usize);
        debug_assert_eq!(self.payload.len(), header.payload_bytes as usize);
        Some(Frame {
            header,
            payload: std::mem::take(&mut self.payload),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::frame::{encode_frame, FrameType};

    fn stream(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            encode_frame(&mut out, FrameType::ProduceRequest, i as u32 + 1, p);
        }
        out
    }

    /// Feeds `bytes` in pieces of `piece` bytes, admitting every payload.
    fn decode_all(bytes: &[u8], piece: usize) -> Vec<Frame> {
        let mut decoder = FrameDecoder::new();
        let mut frames = Vec::new();
        for mut chunk in bytes.chunks(piece) {
            while !chunk.is_empty() {
                if decoder.room_needed().is_some() {
                    frames.extend(decoder.admit());
                    continue;
                }
                frames.extend(decoder.push(&mut chunk).unwrap());
            }
            if decoder.room_needed().is_some() {
                frames.extend(decoder.admit());
            }
        }
        assert!(decoder.at_boundary());
        frames
    }

    #[test]
    fn frames_come_out_whole_however_the_bytes_are_cut() {
        let payloads: [&[u8]; 4] = [b"first", b"", &[7u8; 3000], b"last"];
        let bytes = stream(&payloads);
        for piece in [1, 2, 15, 16, 17, 1000, bytes.len()] {
            let frames = decode_all(&bytes, piece);
            assert_eq!(frames.len(), 4, "pieces of {piece}");
            for (i, f) in frames.iter().enumerate() {
                assert_eq!(f.header.request_id, i as u32 + 1);
                assert_eq!(f.payload, payloads[i]);
                f.header.verify_payload(&f.payload).unwrap();
            }
        }
    }

    #[test]
    fn a_payload_is_read_only_once_admitted() {
        let bytes = stream(&[&[1u8; 100]]);
        let mut decoder = FrameDecoder::new();
        let mut rest = &bytes[..];
        assert!(decoder.push(&mut rest).unwrap().is_none());
        assert_eq!(decoder.room_needed(), Some(100));
        // Without room nothing more is taken.
        assert!(decoder.push(&mut rest).unwrap().is_none());
        assert_eq!(rest.len(), 100);
        assert!(decoder.unfilled().is_empty());
        assert!(decoder.admit().is_none());
        assert_eq!(decoder.unfilled().len(), 100);
        let frame = decoder.push(&mut rest).unwrap().unwrap();
        assert_eq!(frame.payload, [1u8; 100]);
        assert!(rest.is_empty() && decoder.at_boundary());
    }

    #[test]
    fn an_empty_payload_completes_on_admission() {
        let bytes = stream(&[b""]);
        let mut decoder = FrameDecoder::new();
        let mut rest = &bytes[..];
        assert!(decoder.push(&mut rest).unwrap().is_none());
        assert_eq!(decoder.room_needed(), Some(0));
        let frame = decoder.admit().unwrap();
        assert!(frame.payload.is_empty());
    }

    /// Found by the fuzz smoke: after a refused header the stream is not
    /// at a frame boundary (an end of stream there is not clean).
    #[test]
    fn after_a_refused_header_the_stream_is_not_at_a_boundary() {
        let input = [
            75u8, 76, 1, 1, 7, 75, 76, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 162, 7, 208, 36, 75, 76, 1, 0,
        ];
        let mut decoder = FrameDecoder::new();
        let mut rest = &input[..];
        assert!(matches!(
            decoder.push(&mut rest),
            Err(DecodeError::TooLarge { .. })
        ));
        assert!(!decoder.at_boundary());
        assert!(decoder.in_frame());
    }

    #[test]
    fn a_bad_header_is_an_error_and_ends_the_stream() {
        let mut bytes = stream(&[b"abc", b"def"]);
        bytes[0] = b'X';
        let mut decoder = FrameDecoder::new();
        let mut rest = &bytes[..];
        assert!(matches!(
            decoder.push(&mut rest),
            Err(DecodeError::BadMagic { .. })
        ));
        assert!(decoder.unfilled().is_empty());
        assert!(decoder.push(&mut rest).is_err());
    }

    #[test]
    fn an_oversized_length_is_refused_before_any_buffer_is_sized() {
        let mut header = FrameHeader::for_payload(FrameType::ProduceRequest, 1, b"").encode();
        header[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut decoder = FrameDecoder::new();
        let mut rest = &header[..];
        assert!(matches!(
            decoder.push(&mut rest),
            Err(DecodeError::TooLarge { .. })
        ));
        assert_eq!(decoder.payload.capacity(), 0);
    }

    #[test]
    fn a_cut_stream_is_in_a_frame_and_a_whole_one_at_a_boundary() {
        let bytes = stream(&[b"abc"]);
        let mut decoder = FrameDecoder::new();
        let mut rest = &bytes[..5];
        decoder.push(&mut rest).unwrap();
        assert!(decoder.in_frame());
    }

    #[test]
    fn a_recycled_buffer_is_reused() {
        let bytes = stream(&[&[1u8; 64], &[2u8; 64]]);
        let mut decoder = FrameDecoder::new();
        decoder.recycle(Vec::with_capacity(4096));
        let mut rest = &bytes[..];
        decoder.push(&mut rest).unwrap();
        decoder.admit();
        let first = decoder.push(&mut rest).unwrap().unwrap();
        assert!(first.payload.capacity() >= 4096);
        decoder.recycle(first.payload);
        decoder.push(&mut rest).unwrap();
        decoder.admit();
        let second = decoder.push(&mut rest).unwrap().unwrap();
        assert!(second.payload.capacity() >= 4096);
        assert_eq!(second.payload, [2u8; 64]);
    }

    #[test]
    fn a_kept_buffers_old_bytes_never_show_through() {
        let bytes = stream(&[&[1u8; 50], &[2u8; 200], &[3u8; 120]]);
        let mut decoder = FrameDecoder::new();
        decoder.recycle(vec![9u8; 100]);
        let mut rest = &bytes[..];
        // The first by push (over the kept bytes), the second by reading
        // into unfilled (past them), the third by push again.
        decoder.push(&mut rest).unwrap();
        decoder.admit();
        let first = decoder.push(&mut rest).unwrap().unwrap();
        assert_eq!(first.payload, [1u8; 50]);
        decoder.recycle(first.payload);
        decoder.push(&mut rest).unwrap();
        decoder.admit();
        let unfilled = decoder.unfilled();
        assert_eq!(unfilled.len(), 200);
        unfilled.copy_from_slice(&rest[..200]);
        rest = &rest[200..];
        let second = decoder.filled(200).unwrap().unwrap();
        assert_eq!(second.payload, [2u8; 200]);
        decoder.recycle(second.payload);
        decoder.push(&mut rest).unwrap();
        decoder.admit();
        let mut third = None;
        while third.is_none() {
            let mut piece = &rest[..rest.len().min(7)];
            let before = piece.len();
            third = decoder.push(&mut piece).unwrap();
            rest = &rest[before - piece.len()..];
        }
        assert_eq!(third.unwrap().payload, [3u8; 120]);
        assert!(rest.is_empty());
    }
}
