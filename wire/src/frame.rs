//! Frames: the unit of every conversation with a broker, over a QUIC stream
//! or a TCP connection alike.
//!
//! ```text
//! offset size field
//!      0    2 magic          b"KL"
//!      2    1 version        1
//!      3    1 frame type     FrameType
//!      4    4 payload bytes  u32 LE, at most FRAME_PAYLOAD_BYTES_MAX
//!      8    4 request id     u32 LE, echoed by the response
//!     12    4 checksum       CRC-32C of bytes 0..12, then of the payload
//!     16    - payload
//! ```
//!
//! A header with a bad magic, version or length cannot be resynchronised:
//! the receiver reports the error and closes the stream. A payload whose
//! checksum fails was framed correctly, so the stream stays usable.

use crate::checksum::{self, crc32c, crc32c_append, crc32c_combine};
use crate::codec::le_u32;
use crate::error::DecodeError;
use crate::limits::FRAME_PAYLOAD_BYTES_MAX;

/// Bytes of a frame header.
pub const FRAME_HEADER_BYTES: usize = 16;
/// The two magic bytes that open every frame.
pub const FRAME_MAGIC: [u8; 2] = *b"KL";
/// The frame version this build writes and reads.
pub const FRAME_VERSION: u8 = 1;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = 2;
const TYPE_OFFSET: usize = 3;
const LENGTH_OFFSET: usize = 4;
const REQUEST_ID_OFFSET: usize = 8;
const CHECKSUM_OFFSET: usize = 12;

/// What a frame carries. Requests have the high bit clear, responses set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    ShardsRequest = 0x01,
    CreateTopicRequest = 0x02,
    DeleteTopicRequest = 0x03,
    ListTopicsRequest = 0x04,
    DescribeTopicRequest = 0x05,
    ProduceRequest = 0x10,
    FetchRequest = 0x11,
    InitProducerRequest = 0x12,
    PayloadWriteRequest = 0x20,
    PayloadCommitRequest = 0x21,
    PayloadReadRequest = 0x22,
    SplitSegmentRequest = 0x06,
    MergeSegmentsRequest = 0x07,
    MoveSegmentRequest = 0x08,
    SetPolicyRequest = 0x09,
    ListBrokersRequest = 0x0A,
    HeldLayoutRequest = 0x0B,
    RegisterBrokerRequest = 0x30,
    LoadReportRequest = 0x31,
    LeaveBrokerRequest = 0x32,
    ApplyLayoutRequest = 0x33,
    DropTopicRequest = 0x34,
    RefuseWritesRequest = 0x35,
    AuthenticateRequest = 0x0C,
    ShardsResponse = 0x81,
    TopicResponse = 0x82,
    DoneResponse = 0x83,
    TopicListResponse = 0x84,
    ProduceResponse = 0x90,
    FetchResponse = 0x91,
    ProducerResponse = 0x92,
    PayloadReadResponse = 0xA2,
    BrokersResponse = 0x85,
    RegisteredResponse = 0xB0,
    AuthenticateResponse = 0x86,
    ErrorResponse = 0xFF,
}

impl FrameType {
    /// Every frame type, for exhaustive tests.
    pub const ALL: [FrameType; 36] = [
        FrameType::ShardsRequest,
        FrameType::CreateTopicRequest,
        FrameType::DeleteTopicRequest,
        FrameType::ListTopicsRequest,
        FrameType::DescribeTopicRequest,
        FrameType::ProduceRequest,
        FrameType::FetchRequest,
        FrameType::InitProducerRequest,
        FrameType::PayloadWriteRequest,
        FrameType::PayloadCommitRequest,
        FrameType::PayloadReadRequest,
        FrameType::SplitSegmentRequest,
        FrameType::MergeSegmentsRequest,
        FrameType::MoveSegmentRequest,
        FrameType::SetPolicyRequest,
        FrameType::ListBrokersRequest,
        FrameType::HeldLayoutRequest,
        FrameType::RegisterBrokerRequest,
        FrameType::LoadReportRequest,
        FrameType::LeaveBrokerRequest,
        FrameType::ApplyLayoutRequest,
        FrameType::DropTopicRequest,
        FrameType::RefuseWritesRequest,
        FrameType::AuthenticateRequest,
        FrameType::ShardsResponse,
        FrameType::TopicResponse,
        FrameType::DoneResponse,
        FrameType::TopicListResponse,
        FrameType::ProduceResponse,
        FrameType::FetchResponse,
        FrameType::ProducerResponse,
        FrameType::PayloadReadResponse,
        FrameType::BrokersResponse,
        FrameType::RegisteredResponse,
        FrameType::AuthenticateResponse,
        FrameType::ErrorResponse,
    ];

    /// The frame type for a byte, if there is one.
    pub fn from_u8(byte: u8) -> Option<FrameType> {
        FrameType::ALL.into_iter().find(|t| *t as u8 == byte)
    }

    /// Whether a client sends this type.
    pub fn is_request(self) -> bool {
        (self as u8) & 0x80 == 0
    }
}

/// A decoded frame header; the checksum is verified against the payload by
/// [`FrameHeader::verify_payload`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub frame_type: FrameType,
    pub payload_bytes: u32,
    pub request_id: u32,
    pub checksum: u32,
}

impl FrameHeader {
    /// Build the header for `payload`, computing its checksum.
    pub fn for_payload(frame_type: FrameType, request_id: u32, payload: &[u8]) -> FrameHeader {
        let mut header = FrameHeader {
            frame_type,
            payload_bytes: u32::try_from(payload.len()).unwrap_or(u32::MAX),
            request_id,
            checksum: 0,
        };
        header.checksum = header.compute_checksum(payload);
        header
    }

    /// Build the header for a payload made of `head` followed by
    /// `tail_len` bytes whose CRC-32C is `tail_crc` (batches a sender built
    /// or stored, and sends from where they are), without reading the tail.
    pub fn for_split(
        frame_type: FrameType,
        request_id: u32,
        head: &[u8],
        tail_crc: u32,
        tail_len: usize,
    ) -> FrameHeader {
        let mut header = FrameHeader {
            frame_type,
            payload_bytes: u32::try_from(head.len() + tail_len).unwrap_or(u32::MAX),
            request_id,
            checksum: 0,
        };
        header.checksum = header.split_checksum(head, tail_crc, tail_len);
        header
    }

    fn prefix(&self) -> [u8; CHECKSUM_OFFSET] {
        let mut b = [0u8; CHECKSUM_OFFSET];
        b[MAGIC_OFFSET..MAGIC_OFFSET + 2].copy_from_slice(&FRAME_MAGIC);
        b[VERSION_OFFSET] = FRAME_VERSION;
        b[TYPE_OFFSET] = self.frame_type as u8;
        b[LENGTH_OFFSET..LENGTH_OFFSET + 4].copy_from_slice(&self.payload_bytes.to_le_bytes());
        b[REQUEST_ID_OFFSET..REQUEST_ID_OFFSET + 4].copy_from_slice(&self.request_id.to_le_bytes());
        b
    }

    fn compute_checksum(&self, payload: &[u8]) -> u32 {
        crc32c_append(crc32c(&self.prefix()), payload)
    }

    /// The checksum of a payload `head` + a tail known by its checksum.
    fn split_checksum(&self, head: &[u8], tail_crc: u32, tail_len: usize) -> u32 {
        crc32c_combine(self.compute_checksum(head), tail_crc, tail_len)
    }

    /// The 16 header bytes.
    pub fn encode(&self) -> [u8; FRAME_HEADER_BYTES] {
        let mut b = [0u8; FRAME_HEADER_BYTES];
        b[..CHECKSUM_OFFSET].copy_from_slice(&self.prefix());
        b[CHECKSUM_OFFSET..].copy_from_slice(&self.checksum.to_le_bytes());
        b
    }

    /// Decode a header. Errors here mean the stream cannot be resynchronised.
    pub fn decode(bytes: &[u8; FRAME_HEADER_BYTES]) -> Result<FrameHeader, DecodeError> {
        if bytes[MAGIC_OFFSET..MAGIC_OFFSET + 2] != FRAME_MAGIC {
            return Err(DecodeError::BadMagic { what: "frame" });
        }
        let version = bytes[VERSION_OFFSET];
        if version != FRAME_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                what: "frame",
                version: u16::from(version),
            });
        }
        let frame_type = FrameType::from_u8(bytes[TYPE_OFFSET]).ok_or(DecodeError::Invalid {
            what: "frame",
            reason: "unknown frame type",
        })?;
        let payload_bytes = le_u32(bytes, LENGTH_OFFSET);
        if payload_bytes > FRAME_PAYLOAD_BYTES_MAX {
            return Err(DecodeError::TooLarge {
                what: "frame payload",
                len: u64::from(payload_bytes),
                max: u64::from(FRAME_PAYLOAD_BYTES_MAX),
            });
        }
        Ok(FrameHeader {
            frame_type,
            payload_bytes,
            request_id: le_u32(bytes, REQUEST_ID_OFFSET),
            checksum: le_u32(bytes, CHECKSUM_OFFSET),
        })
    }

    /// Check the payload against the header's checksum and length.
    pub fn verify_payload(&self, payload: &[u8]) -> Result<(), DecodeError> {
        self.verify_split(payload, 0, 0)
    }

    /// Check a payload made of `head` followed by `tail_len` bytes whose
    /// CRC-32C the caller has computed (`tail_crc`), without reading the
    /// tail again: the frame's checksum is folded from the two. A produce
    /// request's batch is checksummed once this way, for the batch's own
    /// checksum and the frame's (`BrokerPortRequest::decode_verified`).
    pub fn verify_split(
        &self,
        head: &[u8],
        tail_crc: u32,
        tail_len: usize,
    ) -> Result<(), DecodeError> {
        let have = head.len() as u64 + tail_len as u64;
        if have != u64::from(self.payload_bytes) {
            return Err(DecodeError::Truncated {
                what: "frame payload",
                need: u64::from(self.payload_bytes),
                have,
            });
        }
        let computed = self.split_checksum(head, tail_crc, tail_len);
        checksum::expect_match("frame", self.checksum, computed)
    }
}

/// Append a whole frame (header and payload) to `out`.
pub fn encode_frame(out: &mut Vec<u8>, frame_type: FrameType, request_id: u32, payload: &[u8]) {
    let header = FrameHeader::for_payload(frame_type, request_id, payload);
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn round_trip_every_type() {
        for t in FrameType::ALL {
            let payload = b"payload bytes";
            let h = FrameHeader::for_payload(t, 7, payload);
            let d = FrameHeader::decode(&h.encode()).unwrap();
            assert_eq!(d, h);
            d.verify_payload(payload).unwrap();
        }
    }

    #[test]
    fn golden_header() {
        let h = FrameHeader::for_payload(FrameType::ListTopicsRequest, 0x0102_0304, b"");
        let bytes = h.encode();
        assert_eq!(&bytes[..12], &[b'K', b'L', 1, 0x04, 0, 0, 0, 0, 4, 3, 2, 1]);
        assert_eq!(
            u32::from_le_bytes(bytes[12..16].try_into().unwrap()),
            crate::checksum::crc32c(&bytes[..12])
        );
    }

    #[test]
    fn refuses_bad_headers() {
        let good = FrameHeader::for_payload(FrameType::FetchRequest, 1, b"x").encode();
        let mut b = good;
        b[0] = b'X';
        assert_eq!(
            FrameHeader::decode(&b),
            Err(DecodeError::BadMagic { what: "frame" })
        );
        let mut b = good;
        b[2] = 9;
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(DecodeError::UnsupportedVersion { version: 9, .. })
        ));
        let mut b = good;
        b[3] = 0x7E;
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(DecodeError::Invalid { .. })
        ));
        let mut b = good;
        b[4..8].copy_from_slice(&(FRAME_PAYLOAD_BYTES_MAX + 1).to_le_bytes());
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(DecodeError::TooLarge { .. })
        ));
    }

    #[test]
    fn refuses_corrupt_payload() {
        let h = FrameHeader::for_payload(FrameType::FetchRequest, 1, b"abc");
        assert!(matches!(
            h.verify_payload(b"abd"),
            Err(DecodeError::Checksum { .. })
        ));
        assert!(matches!(
            h.verify_payload(b"ab"),
            Err(DecodeError::Truncated { .. })
        ));
    }
}
