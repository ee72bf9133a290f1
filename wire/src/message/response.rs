//! The answers, shared by every protocol: a port answers each request it
//! takes with one of these frames (`Done`, `Error` and `Topic` answer
//! requests of all three protocols), under the request's id.

use crate::batch::BatchView;
use crate::codec::{Reader, Writer};
use crate::error::DecodeError;
use crate::frame::{FrameHeader, FrameType};

use super::admin::BrokerStatus;
use super::common::{
    read_segment, read_shard_addresses, shard_addresses, write_segment, ErrorCode, ShardAddress,
    Successors, TopicInfo, SEGMENT_INFO_BYTES_MIN,
};
use super::data::Fetched;

/// What a broker answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response<'a> {
    Shards {
        shards: Vec<ShardAddress>,
    },
    Topic(TopicInfo),
    Done,
    TopicList {
        topics: Vec<String>,
    },
    Produced {
        segment: u32,
        base_offset: u64,
        record_count: u32,
    },
    Fetched(Fetched<'a>),
    /// A producer id handed out to an idempotent producer, with its epoch
    /// (0).
    Producer {
        producer_id: u64,
        epoch: u16,
    },
    /// Bytes of a payload, from `offset`; `length` is the whole payload's.
    PayloadBytes {
        length: u64,
        offset: u64,
        bytes: &'a [u8],
    },
    Error {
        code: ErrorCode,
        message: String,
    },
    /// A `SegmentSealed` refusal that names where the segment's range
    /// went: an `ErrorResponse` frame whose payload goes on past the
    /// message (`docs/wire-format.md`).
    Sealed {
        message: String,
        successors: Successors,
    },
    Brokers {
        brokers: Vec<BrokerStatus>,
    },
    /// A broker's registration was taken: its id, and the filer every
    /// broker of the cluster stores in (a local directory path).
    Registered {
        id: u32,
        filer: String,
    },
    /// One step of authentication taken: `message` is the server's SCRAM
    /// message; `done` once it is the final one (the connection is then
    /// authenticated, if the client accepts the server's proof).
    Authenticated {
        done: bool,
        message: String,
    },
}

/// A response whose frame checksum was verified, from
/// [`Response::decode_verified`]; a fetch response's batches come
/// validated, in order.
#[derive(Debug, Clone)]
pub struct VerifiedResponse<'a> {
    pub response: Response<'a>,
    /// The validated batches of a fetch response; empty for every other.
    pub batches: Vec<BatchView<'a>>,
}

/// One pass over a fetch response's batches: each batch's checksum, and the
/// frame's folded from them. `None` if the batches are not laid out whole
/// (the caller then checks the frame plainly, to report what is wrong).
fn verify_batches<'a>(
    header: &FrameHeader,
    payload: &'a [u8],
    batches: &'a [u8],
) -> Option<Result<Vec<BatchView<'a>>, DecodeError>> {
    use crate::batch::{BatchHead, CHECKSUMMED_FROM};
    use crate::checksum::{crc32c, crc32c_append, crc32c_combine, COMBINE_MIN_BYTES};
    let mut spans = Vec::new();
    let mut body_crc = 0u32;
    let mut at = 0usize;
    while at < batches.len() {
        let batch_head = BatchHead::peek(&batches[at..])?;
        let len = batch_head.batch_bytes as usize;
        if at + len > batches.len() {
            return None;
        }
        let bytes = &batches[at..at + len];
        let tail_crc = crc32c(&bytes[CHECKSUMMED_FROM..]);
        body_crc = if len < COMBINE_MIN_BYTES {
            // Cheaper to read a small batch again than to fold its sum.
            crc32c_append(body_crc, bytes)
        } else {
            crc32c_combine(body_crc, batch_head.whole_checksum_with(tail_crc), len)
        };
        spans.push((bytes, batch_head, tail_crc));
        at += len;
    }
    let head = &payload[..payload.len() - batches.len()];
    if let Err(e) = header.verify_split(head, body_crc, batches.len()) {
        // The frame agrees with the batches' own checksums but some batch's
        // bytes do not (a sender that stated the frame's checksum from them,
        // `Fetched::frame_head`, sent a batch damaged where it was kept, or
        // a batch was damaged on the way): name that batch.
        let stated = spans.iter().fold(0u32, |crc, (bytes, batch_head, _)| {
            crc32c_combine(crc, batch_head.whole_checksum(), bytes.len())
        });
        if header.verify_split(head, stated, batches.len()).is_ok() {
            if let Some(Err(bad)) = spans
                .iter()
                .map(|(bytes, _, tail_crc)| BatchView::validate_checksummed(bytes, *tail_crc))
                .find(Result::is_err)
            {
                return Some(Err(bad));
            }
        }
        return Some(Err(e));
    }
    Some(
        spans
            .into_iter()
            .map(|(bytes, _, tail_crc)| BatchView::validate_checksummed(bytes, tail_crc))
            .collect(),
    )
}

frame_types!(Response<'a> as "response" {
    Shards => ShardsResponse,
    Topic => TopicResponse,
    Done => DoneResponse,
    TopicList => TopicListResponse,
    Produced => ProduceResponse,
    Fetched => FetchResponse,
    Producer => ProducerResponse,
    PayloadBytes => PayloadReadResponse,
    Error => ErrorResponse,
    Sealed => ErrorResponse,
    Brokers => BrokersResponse,
    Registered => RegisteredResponse,
    Authenticated => AuthenticateResponse,
});

impl<'a> Response<'a> {
    fn write(&self, w: &mut Writer<'_>) {
        match self {
            Response::Shards { shards } => shard_addresses(w, shards),
            Response::Topic(topic) => {
                w.string(&topic.name);
                w.count(topic.segments.len());
                for s in &topic.segments {
                    write_segment(w, s);
                }
            }
            Response::Brokers { brokers } => {
                w.count(brokers.len());
                for b in brokers {
                    w.u32(b.id);
                    shard_addresses(w, &b.shards);
                    w.u64(b.capacity_bytes_per_s);
                    w.u64(b.capacity_records_per_s);
                    w.u64(b.bytes_per_s);
                    w.u64(b.records_per_s);
                    w.u32(b.utilization_permille);
                    w.u32(b.open_segments);
                    w.u64(b.silent_ms);
                }
            }
            Response::Registered { id, filer } => {
                w.u32(*id);
                w.string(filer);
            }
            Response::Authenticated { done, message } => {
                w.u8(u8::from(*done));
                w.string(message);
            }
            Response::Done => {}
            Response::TopicList { topics } => {
                w.count(topics.len());
                for t in topics {
                    w.string(t);
                }
            }
            Response::Produced {
                segment,
                base_offset,
                record_count,
            } => {
                w.u32(*segment);
                w.u64(*base_offset);
                w.u32(*record_count);
            }
            Response::Producer { producer_id, epoch } => {
                w.u64(*producer_id);
                w.u16(*epoch);
            }
            Response::Fetched(f) => {
                w.bytes(&f.encode_prefix());
                w.bytes(f.batches);
            }
            Response::PayloadBytes {
                length,
                offset,
                bytes,
            } => {
                w.u64(*length);
                w.u64(*offset);
                w.bytes(bytes);
            }
            Response::Error { code, message } => {
                w.u16(code.to_u16());
                w.string(message);
            }
            Response::Sealed {
                message,
                successors,
            } => {
                w.u16(ErrorCode::SegmentSealed.to_u16());
                w.string(message);
                w.u32(successors.layout_version);
                w.count(successors.segments.len());
                for s in &successors.segments {
                    write_segment(w, s);
                }
            }
        }
    }

    /// Verify a response frame's payload against `header` and decode it: the
    /// one entry point for a reader. A fetch response's batches are
    /// validated here too, each checksummed once, and the frame's checksum
    /// is folded from those same sums (`FrameHeader::verify_split`), so a
    /// broker that sends batches straight from a file, never reading them,
    /// is checked end to end by its reader. The frame's checksum is judged
    /// first, except that a batch whose bytes do not match its own checksum,
    /// in a frame that matches the batches' checksums, is reported as that
    /// batch's error: it was damaged where it was kept or on the way, and a
    /// second read tells which.
    pub fn decode_verified(
        header: &FrameHeader,
        payload: &'a [u8],
    ) -> Result<VerifiedResponse<'a>, DecodeError> {
        if header.frame_type == FrameType::FetchResponse {
            if let Ok(response @ Response::Fetched(Fetched { batches, .. })) =
                Response::decode(header.frame_type, payload)
            {
                if let Some(verified) = verify_batches(header, payload, batches) {
                    let batches = verified?;
                    return Ok(VerifiedResponse { response, batches });
                }
            }
        }
        header.verify_payload(payload)?;
        let response = Response::decode(header.frame_type, payload)?;
        let batches = match &response {
            Response::Fetched(f) => crate::chunk::BatchWalk::new(f.batches)
                .map(|b| b.map(|(_, view)| view))
                .collect::<Result<Vec<_>, _>>()?,
            _ => Vec::new(),
        };
        Ok(VerifiedResponse { response, batches })
    }

    fn read(frame_type: FrameType, r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(match frame_type {
            FrameType::ShardsResponse => Response::Shards {
                shards: read_shard_addresses(r)?,
            },
            FrameType::BrokersResponse => {
                let n = r.count(4 + 4 + 8 * 4 + 4 + 4 + 8)?;
                let mut brokers = Vec::with_capacity(n);
                for _ in 0..n {
                    brokers.push(BrokerStatus {
                        id: r.u32()?,
                        shards: read_shard_addresses(r)?,
                        capacity_bytes_per_s: r.u64()?,
                        capacity_records_per_s: r.u64()?,
                        bytes_per_s: r.u64()?,
                        records_per_s: r.u64()?,
                        utilization_permille: r.u32()?,
                        open_segments: r.u32()?,
                        silent_ms: r.u64()?,
                    });
                }
                Response::Brokers { brokers }
            }
            FrameType::RegisteredResponse => Response::Registered {
                id: r.u32()?,
                filer: r.string()?,
            },
            FrameType::TopicResponse => {
                let name = r.string()?;
                let n = r.count(SEGMENT_INFO_BYTES_MIN)?;
                let mut segments = Vec::with_capacity(n);
                for _ in 0..n {
                    segments.push(read_segment(r, "topic response")?);
                }
                Response::Topic(TopicInfo { name, segments })
            }
            FrameType::AuthenticateResponse => Response::Authenticated {
                done: r.u8()? != 0,
                message: r.string()?,
            },
            FrameType::DoneResponse => Response::Done,
            FrameType::TopicListResponse => {
                let n = r.count(2)?;
                let mut topics = Vec::with_capacity(n);
                for _ in 0..n {
                    topics.push(r.string()?);
                }
                Response::TopicList { topics }
            }
            FrameType::ProduceResponse => Response::Produced {
                segment: r.u32()?,
                base_offset: r.u64()?,
                record_count: r.u32()?,
            },
            FrameType::ProducerResponse => Response::Producer {
                producer_id: r.u64()?,
                epoch: r.u16()?,
            },
            FrameType::FetchResponse => Response::Fetched(Fetched {
                segment: r.u32()?,
                start_offset: r.u64()?,
                next_offset: r.u64()?,
                high_watermark: r.u64()?,
                sealed: r.u8()? != 0,
                stored_end: r.u64()?,
                batches: r.rest(),
            }),
            FrameType::PayloadReadResponse => Response::PayloadBytes {
                length: r.u64()?,
                offset: r.u64()?,
                bytes: r.rest(),
            },
            FrameType::ErrorResponse => {
                let code = ErrorCode::from_u16(r.u16()?);
                let message = r.string()?;
                if code == ErrorCode::SegmentSealed && !r.is_empty() {
                    let layout_version = r.u32()?;
                    let n = r.count(SEGMENT_INFO_BYTES_MIN)?;
                    let mut segments = Vec::with_capacity(n);
                    for _ in 0..n {
                        segments.push(read_segment(r, "sealed refusal")?);
                    }
                    Response::Sealed {
                        message,
                        successors: Successors {
                            layout_version,
                            segments,
                        },
                    }
                } else {
                    Response::Error { code, message }
                }
            }
            _ => {
                return Err(DecodeError::Invalid {
                    what: "response",
                    reason: "frame type is not a response",
                })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::frame::FRAME_HEADER_BYTES;
    use crate::message::testing::good_batch;
    use crate::message::FETCHED_FRAME_PREFIX_BYTES;

    fn fetched_frame(batches: &[u8], stated_crc: Option<u32>) -> Vec<u8> {
        let fetched = Fetched {
            segment: 2,
            start_offset: 0,
            next_offset: 80,
            high_watermark: 80,
            sealed: false,
            stored_end: 0,
            batches,
        };
        match stated_crc {
            None => {
                let mut out = Vec::new();
                Response::Fetched(fetched).encode(3, &mut out);
                out
            }
            Some(crc) => {
                let mut out = fetched.frame_head(3, batches.len(), crc).to_vec();
                out.extend_from_slice(batches);
                out
            }
        }
    }

    fn verified_response(frame: &[u8]) -> Result<VerifiedResponse<'_>, DecodeError> {
        let h = FrameHeader::decode(frame[..FRAME_HEADER_BYTES].try_into().unwrap()).unwrap();
        Response::decode_verified(&h, &frame[FRAME_HEADER_BYTES..])
    }

    /// A fetch response is verified in one pass: its batches come back
    /// validated; a flipped byte is the frame's error; a batch corrupt
    /// where it was kept (its stored checksum wrong, the frame's stated
    /// from it) is the batch's error.
    #[test]
    fn a_fetch_response_is_verified_with_its_batches() {
        let mut batches = good_batch();
        batches.extend_from_slice(&good_batch());
        let frame = fetched_frame(&batches, None);
        let v = verified_response(&frame).unwrap();
        assert_eq!(v.batches.len(), 2);
        assert!(matches!(
            v.response,
            Response::Fetched(Fetched { segment: 2, .. })
        ));

        // A flip in the prefix or a batch header is the frame's error; one
        // in a batch's records is that batch's (it no longer matches its
        // own checksum, which the frame's still agrees with).
        for (at, what) in [
            (FRAME_HEADER_BYTES + 5, "frame"),
            (FETCHED_FRAME_PREFIX_BYTES + 2, "frame"),
            (FETCHED_FRAME_PREFIX_BYTES + 400, "batch"),
        ] {
            let mut bad = frame.clone();
            bad[at] ^= 4;
            match verified_response(&bad) {
                Err(DecodeError::Checksum { what: w, .. }) if w == what => {}
                other => panic!("byte {at}: {other:?}"),
            }
        }

        // Stored: the second batch's record bytes rot after its checksum was
        // written; the sender states the frame's checksum from the stored.
        let stated = crate::checksum::crc32c(&batches);
        let second = batches.len() / 2;
        let mut rotten = batches.clone();
        rotten[second + 300] ^= 1;
        let err = verified_response(&fetched_frame(&rotten, Some(stated))).unwrap_err();
        assert!(
            matches!(err, DecodeError::Checksum { what: "batch", .. }),
            "{err:?}"
        );

        // Not whole batches: checked plainly, still an error, never a panic.
        let cut = fetched_frame(&batches[..batches.len() - 3], None);
        assert!(verified_response(&cut).is_err());
        let empty = fetched_frame(&[], None);
        assert!(verified_response(&empty).unwrap().batches.is_empty());
    }

    /// A whole error response frame, as printed in docs/wire-format.md.
    #[test]
    fn golden_error_response_frame() {
        let mut out = Vec::new();
        Response::Error {
            code: ErrorCode::NotOwner,
            message: "not mine".into(),
        }
        .encode(7, &mut out);
        let expected: &[u8] = &[
            0x4b, 0x4c, 0x01, 0xff, 0x0c, 0x00, 0x00, 0x00, // "KL", v1, Error, 12 bytes
            0x07, 0x00, 0x00, 0x00, 0x4a, 0x8b, 0xe7, 0xa8, // request id 7, checksum
            0x09, 0x00, // code 9: NotOwner
            0x08, 0x00, b'n', b'o', b't', b' ', b'm', b'i', b'n', b'e', // message
        ];
        assert_eq!(out, expected);
    }
}
