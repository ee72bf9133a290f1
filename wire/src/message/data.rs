//! The data protocol, client to broker: a broker's shards, produce, fetch,
//! payloads uploaded and read through the broker, and the layout a broker
//! holds. Only a broker port takes these (`port::BrokerPortRequest`).
//!
//! A produce request and a fetch response carry record batches as their
//! last field, unframed, so both ends can pass the batch bytes through
//! without re-encoding them.

use crate::codec::{Reader, Writer};
use crate::error::DecodeError;
use crate::frame::{FrameHeader, FrameType, FRAME_HEADER_BYTES};
use crate::payload_ref::{PayloadId, PayloadRef, PAYLOAD_REF_BYTES};

use super::common::seal_frame;

/// When the broker acknowledges a produce request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AckMode {
    /// Never: the producer sends and forgets (errors are still reported).
    None = 0,
    /// Once the batch is in the owning shard's memory-mapped buffer.
    Leader = 1,
    /// Once the chunk holding the batch is stored in the filer.
    Durable = 2,
    /// Once the batch is in the buffers of every replica of the segment
    /// (today a segment has one replica, its owner: as `Leader`).
    All = 3,
}

impl AckMode {
    pub fn from_u8(v: u8) -> Option<AckMode> {
        match v {
            0 => Some(AckMode::None),
            1 => Some(AckMode::Leader),
            2 => Some(AckMode::Durable),
            3 => Some(AckMode::All),
            _ => None,
        }
    }
}

/// Where a fetch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchFrom {
    /// The record with this offset (or the first after it).
    Offset(u64),
    /// The first record whose timestamp is at least this (ms since epoch).
    Timestamp(i64),
    /// The oldest record still stored.
    Earliest,
    /// The next record to be appended.
    Latest,
    /// The first record with the largest timestamp in the segment (Kafka's
    /// ListOffsets timestamp -3); the end when the segment is empty.
    MaxTimestamp,
}

/// How much a broker checks the batches it answers a fetch with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FetchChecks {
    /// Send the stored batches as they are (from the file, with
    /// `sendfile`); the reader verifies them.
    #[default]
    Trust,
    /// Read and verify every batch before sending it: a damaged stretch
    /// is answered with `Corrupt`, naming the chunk and its offsets. For a
    /// reader that found a batch failing its checksum.
    Verify,
    /// As `Verify`, but a fetch that starts in a damaged stretch is
    /// answered with no batches and a next offset past the stretch.
    SkipDamaged,
}

impl FetchChecks {
    pub(super) fn to_u8(self) -> u8 {
        match self {
            FetchChecks::Trust => 0,
            FetchChecks::Verify => 1,
            FetchChecks::SkipDamaged => 2,
        }
    }

    pub(super) fn from_u8(v: u8) -> Option<FetchChecks> {
        match v {
            0 => Some(FetchChecks::Trust),
            1 => Some(FetchChecks::Verify),
            2 => Some(FetchChecks::SkipDamaged),
            _ => None,
        }
    }
}

/// What a fetch asks of a broker: batches of `segment` of `topic` from
/// `from`, what a broker's shard is handed to read, whoever asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub topic: String,
    pub segment: u32,
    pub from: FetchFrom,
    /// Soft limit: at least one whole batch is returned if there is one.
    pub max_bytes: u32,
    /// How long to wait for data when there is none yet.
    pub max_wait_ms: u32,
    /// Whether the broker verifies the batches it sends.
    pub checks: FetchChecks,
    /// Set when a follower of the segment asks: it holds every record
    /// before `from` (which the owner counts as its progress), and it
    /// never needs what the filer stores, so the answer starts no earlier
    /// than the owner's stored end.
    pub follower: Option<FollowerId>,
}

/// A follower as it names itself in a fetch: its broker and shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FollowerId {
    pub broker: u32,
    pub shard: u16,
}

impl FetchRequest {
    fn write(&self, w: &mut Writer<'_>) {
        w.string(&self.topic);
        w.u32(self.segment);
        let (kind, value) = match self.from {
            FetchFrom::Offset(o) => (0u8, o),
            FetchFrom::Timestamp(t) => (1, t as u64),
            FetchFrom::Earliest => (2, 0),
            FetchFrom::Latest => (3, 0),
            FetchFrom::MaxTimestamp => (4, 0),
        };
        w.u8(kind);
        w.u64(value);
        w.u32(self.max_bytes);
        w.u32(self.max_wait_ms);
        w.u8(self.checks.to_u8());
        match self.follower {
            Some(f) => {
                w.u8(1);
                w.u32(f.broker);
                w.u16(f.shard);
            }
            None => w.u8(0),
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<FetchRequest, DecodeError> {
        let topic = r.string()?;
        let segment = r.u32()?;
        let kind = r.u8()?;
        let value = r.u64()?;
        let from = match kind {
            0 => FetchFrom::Offset(value),
            1 => FetchFrom::Timestamp(value as i64),
            2 => FetchFrom::Earliest,
            3 => FetchFrom::Latest,
            4 => FetchFrom::MaxTimestamp,
            _ => {
                return Err(DecodeError::Invalid {
                    what: "fetch request",
                    reason: "unknown start kind",
                })
            }
        };
        Ok(FetchRequest {
            topic,
            segment,
            from,
            max_bytes: r.u32()?,
            max_wait_ms: r.u32()?,
            checks: FetchChecks::from_u8(r.u8()?).ok_or(DecodeError::Invalid {
                what: "fetch request",
                reason: "unknown checks value",
            })?,
            follower: match r.u8()? {
                0 => None,
                1 => Some(FollowerId {
                    broker: r.u32()?,
                    shard: r.u16()?,
                }),
                _ => {
                    return Err(DecodeError::Invalid {
                        what: "fetch request",
                        reason: "follower flag is neither 0 nor 1",
                    })
                }
            },
        })
    }
}

/// What a client asks a broker about its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataRequest<'a> {
    /// The broker's shards and their addresses.
    Shards,
    /// The topic's layout as the broker asked holds it, answered by the
    /// broker itself (no control plane): what a subscriber that read a
    /// sealed segment to its end asks for its successors. A `Topic`
    /// response without live figures.
    HeldLayout { topic: String },
    /// Append one batch to a segment.
    Produce {
        topic: &'a str,
        segment: u32,
        ack: AckMode,
        batch: &'a [u8],
    },
    /// Read batches of a segment.
    Fetch(FetchRequest),
    /// A producer id for an idempotent producer, never handed out before
    /// (answered `Response::Producer`).
    InitProducer,
    /// Write bytes of a payload being uploaded through the broker, at
    /// `offset`: pieces go in order, the first at 0.
    PayloadWrite {
        topic: String,
        id: PayloadId,
        offset: u64,
        bytes: &'a [u8],
    },
    /// Finish an upload: the broker checks the bytes against the
    /// reference's length and checksum and stores the payload in the filer.
    PayloadCommit {
        topic: String,
        reference: PayloadRef,
    },
    /// Read up to `max_bytes` of a stored payload from `offset`.
    PayloadRead {
        topic: String,
        id: PayloadId,
        offset: u64,
        max_bytes: u32,
    },
}

/// Bytes of a produce request's payload before its topic name and batch.
pub const PRODUCE_PREFIX_BYTES: usize = 4 + 1 + 2;

frame_types!(DataRequest<'a> as "request" {
    Shards => ShardsRequest,
    HeldLayout => HeldLayoutRequest,
    Produce => ProduceRequest,
    Fetch => FetchRequest,
    InitProducer => InitProducerRequest,
    PayloadWrite => PayloadWriteRequest,
    PayloadCommit => PayloadCommitRequest,
    PayloadRead => PayloadReadRequest,
});

impl<'a> DataRequest<'a> {
    fn write(&self, w: &mut Writer<'_>) {
        match self {
            DataRequest::Shards => {}
            DataRequest::HeldLayout { topic } => w.string(topic),
            DataRequest::Produce {
                topic,
                segment,
                ack,
                batch,
            } => {
                w.u32(*segment);
                w.u8(*ack as u8);
                w.string(topic);
                w.bytes(batch);
            }
            DataRequest::Fetch(fetch) => fetch.write(w),
            DataRequest::InitProducer => {}
            DataRequest::PayloadWrite {
                topic,
                id,
                offset,
                bytes,
            } => {
                w.string(topic);
                write_payload_id(w, id);
                w.u64(*offset);
                w.bytes(bytes);
            }
            DataRequest::PayloadCommit { topic, reference } => {
                w.string(topic);
                w.bytes(&reference.encode());
            }
            DataRequest::PayloadRead {
                topic,
                id,
                offset,
                max_bytes,
            } => {
                w.string(topic);
                write_payload_id(w, id);
                w.u64(*offset);
                w.u32(*max_bytes);
            }
        }
    }

    fn read(frame_type: FrameType, r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(match frame_type {
            FrameType::ShardsRequest => DataRequest::Shards,
            FrameType::HeldLayoutRequest => DataRequest::HeldLayout { topic: r.string()? },
            FrameType::ProduceRequest => {
                let segment = r.u32()?;
                let ack = AckMode::from_u8(r.u8()?).ok_or(DecodeError::Invalid {
                    what: "produce request",
                    reason: "unknown ack mode",
                })?;
                // Borrowed, not copied, with the same bound as every
                // other string field.
                let topic =
                    std::str::from_utf8(r.string_bytes()?).map_err(|_| DecodeError::Invalid {
                        what: "produce request",
                        reason: "topic is not UTF-8",
                    })?;
                DataRequest::Produce {
                    topic,
                    segment,
                    ack,
                    batch: r.rest(),
                }
            }
            FrameType::FetchRequest => DataRequest::Fetch(FetchRequest::read(r)?),
            FrameType::InitProducerRequest => DataRequest::InitProducer,
            FrameType::PayloadWriteRequest => DataRequest::PayloadWrite {
                topic: r.string()?,
                id: read_payload_id(r)?,
                offset: r.u64()?,
                bytes: r.rest(),
            },
            FrameType::PayloadCommitRequest => DataRequest::PayloadCommit {
                topic: r.string()?,
                reference: PayloadRef::decode(r.take(PAYLOAD_REF_BYTES)?)?,
            },
            FrameType::PayloadReadRequest => DataRequest::PayloadRead {
                topic: r.string()?,
                id: read_payload_id(r)?,
                offset: r.u64()?,
                max_bytes: r.u32()?,
            },
            frame_type => return Err(DecodeError::Foreign { frame_type }),
        })
    }
}

/// A fetch response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched<'a> {
    pub segment: u32,
    /// The first offset the reader should deliver; batches may begin
    /// earlier (a batch is never cut), records before this are skipped.
    pub start_offset: u64,
    /// The offset to fetch next.
    pub next_offset: u64,
    /// One past the last offset appended to the segment.
    pub high_watermark: u64,
    /// The segment is sealed and `next_offset` is its end.
    pub sealed: bool,
    /// One past the last offset the filer stores (what a follower no
    /// longer needs to keep).
    pub stored_end: u64,
    /// Whole batches, end to end.
    pub batches: &'a [u8],
}

/// Bytes of a fetch response's payload before its batches.
pub const FETCHED_PREFIX_BYTES: usize = 4 + 8 + 8 + 8 + 1 + 8;
/// Bytes of a fetch response frame before its batches: the frame header
/// and the payload's fixed part.
pub const FETCHED_FRAME_PREFIX_BYTES: usize = FRAME_HEADER_BYTES + FETCHED_PREFIX_BYTES;

impl Fetched<'_> {
    /// The fixed part of the payload; the batches follow it on the wire.
    pub fn encode_prefix(&self) -> [u8; FETCHED_PREFIX_BYTES] {
        let mut b = [0u8; FETCHED_PREFIX_BYTES];
        b[0..4].copy_from_slice(&self.segment.to_le_bytes());
        b[4..12].copy_from_slice(&self.start_offset.to_le_bytes());
        b[12..20].copy_from_slice(&self.next_offset.to_le_bytes());
        b[20..28].copy_from_slice(&self.high_watermark.to_le_bytes());
        b[28] = u8::from(self.sealed);
        b[29..37].copy_from_slice(&self.stored_end.to_le_bytes());
        b
    }

    /// Complete a fetch response frame whose batches a server copied
    /// straight into place: `frame` is [`FETCHED_FRAME_PREFIX_BYTES`] bytes
    /// of room, then the batches. Writes the payload's fixed part and the
    /// frame header (with its checksum); the result is the frame
    /// [`Response::encode`](super::Response::encode) makes of `self` with those batches, without
    /// copying them again. `self.batches` is not read.
    pub fn finish_frame(&self, request_id: u32, frame: &mut [u8]) {
        debug_assert!(frame.len() >= FETCHED_FRAME_PREFIX_BYTES);
        frame[FRAME_HEADER_BYTES..FETCHED_FRAME_PREFIX_BYTES]
            .copy_from_slice(&self.encode_prefix());
        seal_frame(frame, 0, FrameType::FetchResponse, request_id);
    }
}

/// The frame header and payload prefix of a produce request whose batch
/// (`batch_len` bytes, whole-batch CRC-32C `batch_crc`, e.g.
/// `BatchHead::whole_checksum` of a batch the sender built) is sent right
/// after it: the bytes [`DataRequest::encode`] puts before the batch. A sender
/// that built the batch itself then neither copies it into a frame nor
/// checksums it a second time. Written to `out`, cleared first.
pub fn produce_frame_head(
    topic: &str,
    segment: u32,
    ack: AckMode,
    request_id: u32,
    batch_len: usize,
    batch_crc: u32,
    out: &mut Vec<u8>,
) {
    out.clear();
    DataRequest::Produce {
        topic,
        segment,
        ack,
        batch: &[],
    }
    .encode(request_id, out);
    let header = FrameHeader::for_split(
        FrameType::ProduceRequest,
        request_id,
        &out[FRAME_HEADER_BYTES..],
        batch_crc,
        batch_len,
    );
    out[..FRAME_HEADER_BYTES].copy_from_slice(&header.encode());
}

impl Fetched<'_> {
    /// The frame header and payload prefix of a fetch response whose
    /// batches (`body_len` bytes whose CRC-32C is `body_crc`) are sent right
    /// after it from somewhere else, a file say: the same bytes
    /// [`Response::encode`](super::Response::encode) would put before those batches.
    /// `self.batches` is not read.
    pub fn frame_head(
        &self,
        request_id: u32,
        body_len: usize,
        body_crc: u32,
    ) -> [u8; FETCHED_FRAME_PREFIX_BYTES] {
        let prefix = self.encode_prefix();
        let header = FrameHeader::for_split(
            FrameType::FetchResponse,
            request_id,
            &prefix,
            body_crc,
            body_len,
        );
        let mut out = [0u8; FETCHED_FRAME_PREFIX_BYTES];
        out[..FRAME_HEADER_BYTES].copy_from_slice(&header.encode());
        out[FRAME_HEADER_BYTES..].copy_from_slice(&prefix);
        out
    }
}

fn write_payload_id(w: &mut Writer<'_>, id: &PayloadId) {
    w.u64(id.created_ms);
    w.bytes(&id.nonce.to_le_bytes());
}

fn read_payload_id(r: &mut Reader<'_>) -> Result<PayloadId, DecodeError> {
    let created_ms = r.u64()?;
    let mut nonce = [0u8; 16];
    nonce.copy_from_slice(r.take(16)?);
    Ok(PayloadId {
        created_ms,
        nonce: u128::from_le_bytes(nonce),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::limits::STRING_BYTES_MAX;
    use crate::message::testing::{decode_frame, good_batch, produce_frame};
    use crate::message::Response;

    #[test]
    fn a_fetched_frame_finished_in_place_is_the_encoded_one() {
        let batches = b"two whole batches, as far as this test cares";
        let fetched = Fetched {
            segment: 3,
            start_offset: 17,
            next_offset: 40,
            high_watermark: 41,
            sealed: true,
            stored_end: 0,
            batches,
        };
        let mut encoded = Vec::new();
        Response::Fetched(fetched.clone()).encode(9, &mut encoded);
        let mut in_place = vec![0xAA; FETCHED_FRAME_PREFIX_BYTES];
        in_place.extend_from_slice(batches);
        fetched.finish_frame(9, &mut in_place);
        assert_eq!(in_place, encoded);
    }

    /// A produce request's topic had no length bound: a topic over
    /// STRING_BYTES_MAX decoded, and re-encoding it cut it short.
    #[test]
    fn produce_topic_is_bounded_like_every_string() {
        let topic = "t".repeat(STRING_BYTES_MAX as usize + 1);
        let mut payload = vec![1, 0, 0, 0, AckMode::Leader as u8];
        payload.extend_from_slice(&(topic.len() as u16).to_le_bytes());
        payload.extend_from_slice(topic.as_bytes());
        assert!(matches!(
            DataRequest::decode(FrameType::ProduceRequest, &payload),
            Err(DecodeError::TooLarge { .. })
        ));
        let topic = &topic[..STRING_BYTES_MAX as usize];
        let mut out = Vec::new();
        DataRequest::Produce {
            topic,
            segment: 1,
            ack: AckMode::Leader,
            batch: b"",
        }
        .encode(1, &mut out);
        let (h, payload) = decode_frame(&out);
        assert!(matches!(
            DataRequest::decode(h.frame_type, payload).unwrap(),
            DataRequest::Produce { topic: t, .. } if t == topic
        ));
    }

    /// A fetch response's head stated from batch headers alone is the
    /// head of the frame `encode` makes of the same batches.
    #[test]
    fn a_fetched_head_from_batch_checksums_is_the_encoded_one() {
        let mut batches = good_batch();
        batches[..8].copy_from_slice(&77u64.to_le_bytes());
        let second = good_batch();
        batches.extend_from_slice(&second);
        let mut body_crc = 0;
        let mut at = 0;
        while at < batches.len() {
            let head = crate::batch::BatchHead::peek(&batches[at..]).unwrap();
            body_crc = crate::checksum::crc32c_combine(
                body_crc,
                head.whole_checksum(),
                head.batch_bytes as usize,
            );
            at += head.batch_bytes as usize;
        }
        assert_eq!(body_crc, crate::checksum::crc32c(&batches));
        let fetched = Fetched {
            segment: 4,
            start_offset: 77,
            next_offset: 157,
            high_watermark: 200,
            sealed: false,
            stored_end: 0,
            batches: &batches,
        };
        let mut encoded = Vec::new();
        Response::Fetched(fetched.clone()).encode(5, &mut encoded);
        let head = fetched.frame_head(5, batches.len(), body_crc);
        assert_eq!(&encoded[..FETCHED_FRAME_PREFIX_BYTES], &head[..]);
    }

    /// A produce frame's head stated from the batch's own checksum is the
    /// head `encode` writes before the same batch.
    #[test]
    fn a_produce_head_from_the_batch_checksum_is_the_encoded_one() {
        let batch = good_batch();
        let whole = produce_frame(&batch);
        let crc = crate::batch::BatchHead::peek(&batch)
            .unwrap()
            .whole_checksum();
        let mut head = Vec::new();
        produce_frame_head("ns/t", 3, AckMode::Leader, 7, batch.len(), crc, &mut head);
        assert_eq!(&whole[..head.len()], &head[..]);
        assert_eq!(head.len() + batch.len(), whole.len());
    }

    /// A whole fetch request frame, as printed in docs/wire-format.md.
    #[test]
    fn golden_fetch_request_frame() {
        let mut out = Vec::new();
        DataRequest::Fetch(FetchRequest {
            topic: "ns/t".into(),
            segment: 1,
            from: FetchFrom::Offset(42),
            max_bytes: 1 << 20,
            max_wait_ms: 500,
            checks: FetchChecks::Trust,
            follower: None,
        })
        .encode(7, &mut out);
        let expected: &[u8] = &[
            0x4b, 0x4c, 0x01, 0x11, 0x1d, 0x00, 0x00, 0x00, // "KL", v1, Fetch, 29 bytes
            0x07, 0x00, 0x00, 0x00, 0xb1, 0xc1, 0x76, 0x09, // request id 7, checksum
            0x04, 0x00, 0x6e, 0x73, 0x2f, 0x74, // topic "ns/t"
            0x01, 0x00, 0x00, 0x00, // segment 1
            0x00, // from: offset
            0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // 42
            0x00, 0x00, 0x10, 0x00, // max bytes 1 MiB
            0xf4, 0x01, 0x00, 0x00, // max wait 500 ms
            0x00, // checks: trust
            0x00, // no follower
        ];
        assert_eq!(out, expected);
    }

    #[test]
    fn golden_produce_request() {
        let mut out = Vec::new();
        DataRequest::Produce {
            topic: "a/b",
            segment: 1,
            ack: AckMode::Leader,
            batch: &[0xAA],
        }
        .encode(5, &mut out);
        assert_eq!(
            &out[FRAME_HEADER_BYTES..],
            &[1, 0, 0, 0, 1, 3, 0, b'a', b'/', b'b', 0xAA]
        );
        assert_eq!(&out[..8], &[b'K', b'L', 1, 0x10, 11, 0, 0, 0]);
    }
}
