//! Requests and responses: the payloads of frames. Each is an explicit
//! little-endian layout; strings are a u16 length then UTF-8 bytes, lists a
//! u32 count then the items. `docs/wire-format.md` gives every field.
//!
//! A produce request and a fetch response carry record batches as their
//! last field, unframed, so both ends can pass the batch bytes through
//! without re-encoding them.

use crate::batch::BatchView;
use crate::codec::{Reader, Writer};
use crate::error::DecodeError;
use crate::frame::{FrameHeader, FrameType, FRAME_HEADER_BYTES};
use crate::limits::STRING_BYTES_MAX;
use crate::payload_ref::{PayloadId, PayloadRef, PAYLOAD_REF_BYTES};

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
}

impl AckMode {
    pub fn from_u8(v: u8) -> Option<AckMode> {
        match v {
            0 => Some(AckMode::None),
            1 => Some(AckMode::Leader),
            2 => Some(AckMode::Durable),
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
    fn to_u8(self) -> u8 {
        match self {
            FetchChecks::Trust => 0,
            FetchChecks::Verify => 1,
            FetchChecks::SkipDamaged => 2,
        }
    }

    fn from_u8(v: u8) -> Option<FetchChecks> {
        match v {
            0 => Some(FetchChecks::Trust),
            1 => Some(FetchChecks::Verify),
            2 => Some(FetchChecks::SkipDamaged),
            _ => None,
        }
    }
}

/// Error codes a broker answers with. Unknown codes decode as `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The request could not be decoded.
    Malformed,
    /// A checksum did not match.
    Checksum,
    /// A version this broker does not speak.
    UnsupportedVersion,
    /// A length over its limit.
    TooLarge,
    InvalidTopicName,
    TopicNotFound,
    TopicExists,
    SegmentNotFound,
    /// This shard does not own the segment: refresh the layout.
    NotOwner,
    /// The segment takes no more writes: refresh the layout.
    SegmentSealed,
    /// A record's key hash is outside the segment's range.
    KeyOutOfRange,
    /// A request argument is out of range.
    InvalidArgument,
    /// The broker could not store or read data (filer or disk trouble).
    Storage,
    /// The broker is at a configured limit; retry later.
    Busy,
    Internal,
    /// No payload by that name in the topic (never uploaded, deleted, or
    /// an upload that was not in progress).
    PayloadNotFound,
    /// A payload's bytes do not match its reference's length or checksum.
    PayloadMismatch,
    /// The broker is stopping and did not apply the request: send it again
    /// after refreshing the layout (the broker's segments are moving). Sent
    /// once unasked, with request id 0, as the connection's goodbye; every
    /// request read after it gets this answer (docs/wire-format.md).
    ShuttingDown,
    /// Stored records the fetch asked for are damaged (they fail their
    /// checksum on the broker's disk); the message names the chunk, the
    /// offsets and the next readable offset. Fetch with
    /// `FetchChecks::SkipDamaged` to read on past them.
    Corrupt,
    /// This control-plane instance does not lead: the message is the
    /// leader's address (empty while none is elected). Send the request
    /// there (docs/wire-format.md).
    NotLeader,
    /// The broker cannot reach the control plane (it is down, or a new
    /// leader is being elected), so it cannot say or change the layout:
    /// refresh the layout and retry after a backoff.
    ControlUnavailable,
    Other(u16),
}

impl ErrorCode {
    pub fn to_u16(self) -> u16 {
        match self {
            ErrorCode::Malformed => 1,
            ErrorCode::Checksum => 2,
            ErrorCode::UnsupportedVersion => 3,
            ErrorCode::TooLarge => 4,
            ErrorCode::InvalidTopicName => 5,
            ErrorCode::TopicNotFound => 6,
            ErrorCode::TopicExists => 7,
            ErrorCode::SegmentNotFound => 8,
            ErrorCode::NotOwner => 9,
            ErrorCode::SegmentSealed => 10,
            ErrorCode::KeyOutOfRange => 11,
            ErrorCode::InvalidArgument => 12,
            ErrorCode::Storage => 13,
            ErrorCode::Busy => 14,
            ErrorCode::Internal => 15,
            ErrorCode::PayloadNotFound => 16,
            ErrorCode::PayloadMismatch => 17,
            ErrorCode::ShuttingDown => 18,
            ErrorCode::Corrupt => 19,
            ErrorCode::NotLeader => 20,
            ErrorCode::ControlUnavailable => 21,
            ErrorCode::Other(v) => v,
        }
    }

    pub fn from_u16(v: u16) -> ErrorCode {
        match v {
            1 => ErrorCode::Malformed,
            2 => ErrorCode::Checksum,
            3 => ErrorCode::UnsupportedVersion,
            4 => ErrorCode::TooLarge,
            5 => ErrorCode::InvalidTopicName,
            6 => ErrorCode::TopicNotFound,
            7 => ErrorCode::TopicExists,
            8 => ErrorCode::SegmentNotFound,
            9 => ErrorCode::NotOwner,
            10 => ErrorCode::SegmentSealed,
            11 => ErrorCode::KeyOutOfRange,
            12 => ErrorCode::InvalidArgument,
            13 => ErrorCode::Storage,
            14 => ErrorCode::Busy,
            15 => ErrorCode::Internal,
            16 => ErrorCode::PayloadNotFound,
            17 => ErrorCode::PayloadMismatch,
            18 => ErrorCode::ShuttingDown,
            19 => ErrorCode::Corrupt,
            20 => ErrorCode::NotLeader,
            21 => ErrorCode::ControlUnavailable,
            v => ErrorCode::Other(v),
        }
    }

    /// Whether the client should refresh the topic layout and retry.
    pub fn is_stale_layout(self) -> bool {
        matches!(
            self,
            ErrorCode::NotOwner
                | ErrorCode::SegmentSealed
                | ErrorCode::ShuttingDown
                | ErrorCode::ControlUnavailable
        )
    }
}

impl From<&DecodeError> for ErrorCode {
    fn from(e: &DecodeError) -> ErrorCode {
        match e {
            DecodeError::Checksum { .. } => ErrorCode::Checksum,
            DecodeError::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            DecodeError::TooLarge { .. } => ErrorCode::TooLarge,
            _ => ErrorCode::Malformed,
        }
    }
}

/// The addresses of one shard of a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardAddress {
    /// `host:port` for TCP.
    pub tcp: String,
    /// `host:port` for QUIC (UDP).
    pub quic: String,
}

/// A broker's shards, by its id: what an `ApplyLayout` carries for each
/// broker owning an open segment of the layout, so a broker that seals a
/// segment can name where its successors are ([`Successors`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerShards {
    pub broker: u32,
    pub shards: Vec<ShardAddress>,
}

/// Where the range of a sealed segment went, as the broker that refused a
/// write to it knows: the open segments of its layout that cover the
/// sealed one's range, each with its owner (`broker`, `shard`) and the
/// address of that shard. A producer routes to them at once, asking no
/// control plane. `layout_version` is the highest segment id of that
/// layout: it grows with every change of the topic (each change opens
/// segments with new ids), so of two notices the one with the higher
/// version is the newer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Successors {
    pub layout_version: u32,
    pub segments: Vec<SegmentInfo>,
}

/// One segment as the broker describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentInfo {
    pub id: u32,
    pub epoch: u32,
    /// Key-hash range `[start, end)`; `end` is at most 2^32.
    pub start: u32,
    pub end: u64,
    pub sealed: bool,
    /// Index of the owning shard in the broker's shard list.
    pub shard: u16,
    /// One past the last offset appended (the high watermark).
    pub next_offset: u64,
    /// Bytes of batches appended since the broker opened the segment
    /// (the ingest counter; not kept across restarts).
    pub appended_bytes: u64,
    pub successors: Vec<u32>,
    /// The owning broker in a cluster; `None` on a single broker (where
    /// `shard` indexes the answering broker's shard list).
    pub broker: Option<u32>,
    /// Where to send the segment's traffic, when another broker than the
    /// one asked may own it (a cluster). `None`: `shard` of the broker
    /// asked. For a sealed segment, a broker that serves its reads.
    pub address: Option<ShardAddress>,
    /// Recent traffic (the control plane's shortest averaging window);
    /// 0 where nobody measures it.
    pub bytes_per_s: u64,
    pub records_per_s: u64,
    /// When the segment was created and sealed, ms since the Unix epoch.
    pub created_ms: u64,
    pub sealed_ms: Option<u64>,
    /// When its owner appended its first record (the owner's clock, ms
    /// since the Unix epoch): with `created_ms`, how long producers took
    /// to reach a new segment.
    pub first_append_ms: Option<u64>,
    /// Offsets of the segment whose records were found damaged and could
    /// not be read back (its lost ranges, docs/broker.md).
    pub lost_records: u64,
}

/// Sentinel for "none" in the u32 and u64 fields that encode an `Option`.
const NONE_U32: u32 = u32::MAX;
const NONE_U64: u64 = u64::MAX;

/// One broker of a cluster as the control plane lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerStatus {
    pub id: u32,
    /// One address per shard, index = shard.
    pub shards: Vec<ShardAddress>,
    pub capacity_bytes_per_s: u64,
    pub capacity_records_per_s: u64,
    /// The broker's load: the sum of its open segments' recent rates.
    pub bytes_per_s: u64,
    pub records_per_s: u64,
    /// Load over capacity (the larger ratio), in thousandths.
    pub utilization_permille: u32,
    pub open_segments: u32,
    /// How long ago the broker was last heard from.
    pub silent_ms: u64,
}

/// One open segment's traffic, as a broker reports it to the control plane.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentLoadReport {
    pub topic: String,
    pub segment: u32,
    /// Rates since the broker's previous report.
    pub bytes_per_s: u64,
    pub records_per_s: u64,
    /// One past the last offset appended.
    pub next_offset: u64,
    /// When the first record was appended, ms since the Unix epoch; `None`
    /// before any.
    pub first_append_ms: Option<u64>,
    /// Offsets found damaged and lost (`SegmentInfo::lost_records`).
    pub lost_records: u64,
}

/// A topic's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub segments: Vec<SegmentInfo>,
}

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    /// The broker's shards and their addresses.
    Shards,
    CreateTopic {
        topic: String,
        segments: u32,
    },
    DeleteTopic {
        topic: String,
    },
    ListTopics,
    DescribeTopic {
        topic: String,
    },
    /// The topic's layout as the broker asked holds it, answered by the
    /// broker itself (no control plane): what a subscriber that read a
    /// sealed segment to its end asks for its successors. A `Topic`
    /// response without live figures.
    HeldLayout {
        topic: String,
    },
    /// Append one batch to a segment.
    Produce {
        topic: &'a str,
        segment: u32,
        ack: AckMode,
        batch: &'a [u8],
    },
    /// Read batches of a segment.
    Fetch {
        topic: String,
        segment: u32,
        from: FetchFrom,
        /// Soft limit: at least one whole batch is returned if there is one.
        max_bytes: u32,
        /// How long to wait for data when there is none yet.
        max_wait_ms: u32,
        /// Whether the broker verifies the batches it sends.
        checks: FetchChecks,
    },
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
    /// Seal an open segment and open `pieces` successors over equal parts
    /// of its range (answered by the control plane, through any broker).
    SplitSegment {
        topic: String,
        segment: u32,
        pieces: u32,
    },
    /// Seal two adjacent open segments and open one successor over both.
    MergeSegments {
        topic: String,
        a: u32,
        b: u32,
    },
    /// Seal an open segment and reopen its range on broker `to` (`None`:
    /// the least-loaded other broker).
    MoveSegment {
        topic: String,
        segment: u32,
        to: Option<u32>,
    },
    /// Replace a topic's scaling policy: `policy` is its JSON (see
    /// `docs/control-plane.md`), empty to remove it.
    SetPolicy {
        topic: String,
        policy: String,
    },
    /// The brokers of the cluster and their load.
    ListBrokers,
    /// A broker joins the control plane (`id: None` asks for a new id).
    RegisterBroker {
        id: Option<u32>,
        shards: Vec<ShardAddress>,
        capacity_bytes_per_s: u64,
        capacity_records_per_s: u64,
    },
    /// A broker's traffic per open segment since its previous report.
    LoadReport {
        broker: u32,
        segments: Vec<SegmentLoadReport>,
    },
    /// A broker leaves gracefully: its segments move elsewhere first.
    LeaveBroker {
        broker: u32,
    },
    /// The control plane tells a broker a topic's layout (the topic's
    /// JSON, `docs/control-plane.md`): the broker seals what the layout
    /// seals and opens what it places on it.
    ApplyLayout {
        topic_json: &'a [u8],
        /// The shards of each broker owning an open segment of the
        /// layout (for a refusal's [`Successors`]).
        owners: Vec<BrokerShards>,
    },
    /// The control plane tells a broker a topic is gone.
    DropTopic {
        topic: String,
    },
}

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
    /// Whole batches, end to end.
    pub batches: &'a [u8],
}

/// Bytes of a fetch response's payload before its batches.
pub const FETCHED_PREFIX_BYTES: usize = 4 + 8 + 8 + 8 + 1;
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
        b
    }

    /// Complete a fetch response frame whose batches a server copied
    /// straight into place: `frame` is [`FETCHED_FRAME_PREFIX_BYTES`] bytes
    /// of room, then the batches. Writes the payload's fixed part and the
    /// frame header (with its checksum); the result is the frame
    /// [`Response::encode`] makes of `self` with those batches, without
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
/// after it: the bytes [`Request::encode`] puts before the batch. A sender
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
    Request::Produce {
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

/// A request whose frame checksum was verified, from
/// [`Request::decode_verified`]; a produce request's batch comes validated.
#[derive(Debug, Clone)]
pub struct VerifiedRequest<'a> {
    pub request: Request<'a>,
    /// The validated batch of a produce request; `None` for every other.
    pub batch: Option<BatchView<'a>>,
}

impl Fetched<'_> {
    /// The frame header and payload prefix of a fetch response whose
    /// batches (`body_len` bytes whose CRC-32C is `body_crc`) are sent right
    /// after it from somewhere else, a file say: the same bytes
    /// [`Response::encode`] would put before those batches.
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

/// Bytes of a produce request's payload before its topic name and batch.
pub const PRODUCE_PREFIX_BYTES: usize = 4 + 1 + 2;

impl<'a> Request<'a> {
    pub fn frame_type(&self) -> FrameType {
        match self {
            Request::Shards => FrameType::ShardsRequest,
            Request::CreateTopic { .. } => FrameType::CreateTopicRequest,
            Request::DeleteTopic { .. } => FrameType::DeleteTopicRequest,
            Request::ListTopics => FrameType::ListTopicsRequest,
            Request::DescribeTopic { .. } => FrameType::DescribeTopicRequest,
            Request::HeldLayout { .. } => FrameType::HeldLayoutRequest,
            Request::Produce { .. } => FrameType::ProduceRequest,
            Request::Fetch { .. } => FrameType::FetchRequest,
            Request::PayloadWrite { .. } => FrameType::PayloadWriteRequest,
            Request::PayloadCommit { .. } => FrameType::PayloadCommitRequest,
            Request::PayloadRead { .. } => FrameType::PayloadReadRequest,
            Request::SplitSegment { .. } => FrameType::SplitSegmentRequest,
            Request::MergeSegments { .. } => FrameType::MergeSegmentsRequest,
            Request::MoveSegment { .. } => FrameType::MoveSegmentRequest,
            Request::SetPolicy { .. } => FrameType::SetPolicyRequest,
            Request::ListBrokers => FrameType::ListBrokersRequest,
            Request::RegisterBroker { .. } => FrameType::RegisterBrokerRequest,
            Request::LoadReport { .. } => FrameType::LoadReportRequest,
            Request::LeaveBroker { .. } => FrameType::LeaveBrokerRequest,
            Request::ApplyLayout { .. } => FrameType::ApplyLayoutRequest,
            Request::DropTopic { .. } => FrameType::DropTopicRequest,
        }
    }

    /// Append the whole frame (header and payload) to `out`.
    pub fn encode(&self, request_id: u32, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + FRAME_HEADER_BYTES, 0);
        let mut w = Writer { out };
        match self {
            Request::Shards | Request::ListTopics | Request::ListBrokers => {}
            Request::CreateTopic { topic, segments } => {
                w.string(topic);
                w.u32(*segments);
            }
            Request::DeleteTopic { topic }
            | Request::DescribeTopic { topic }
            | Request::HeldLayout { topic }
            | Request::DropTopic { topic } => w.string(topic),
            Request::Produce {
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
            Request::Fetch {
                topic,
                segment,
                from,
                max_bytes,
                max_wait_ms,
                checks,
            } => {
                w.string(topic);
                w.u32(*segment);
                let (kind, value) = match from {
                    FetchFrom::Offset(o) => (0u8, *o),
                    FetchFrom::Timestamp(t) => (1, *t as u64),
                    FetchFrom::Earliest => (2, 0),
                    FetchFrom::Latest => (3, 0),
                };
                w.u8(kind);
                w.u64(value);
                w.u32(*max_bytes);
                w.u32(*max_wait_ms);
                w.u8(checks.to_u8());
            }
            Request::PayloadWrite {
                topic,
                id,
                offset,
                bytes,
            } => {
                w.string(topic);
                payload_id(&mut w, id);
                w.u64(*offset);
                w.bytes(bytes);
            }
            Request::PayloadCommit { topic, reference } => {
                w.string(topic);
                w.bytes(&reference.encode());
            }
            Request::PayloadRead {
                topic,
                id,
                offset,
                max_bytes,
            } => {
                w.string(topic);
                payload_id(&mut w, id);
                w.u64(*offset);
                w.u32(*max_bytes);
            }
            Request::SplitSegment {
                topic,
                segment,
                pieces,
            } => {
                w.string(topic);
                w.u32(*segment);
                w.u32(*pieces);
            }
            Request::MergeSegments { topic, a, b } => {
                w.string(topic);
                w.u32(*a);
                w.u32(*b);
            }
            Request::MoveSegment { topic, segment, to } => {
                w.string(topic);
                w.u32(*segment);
                w.u32(to.unwrap_or(NONE_U32));
            }
            Request::SetPolicy { topic, policy } => {
                w.string(topic);
                w.string(policy);
            }
            Request::RegisterBroker {
                id,
                shards,
                capacity_bytes_per_s,
                capacity_records_per_s,
            } => {
                w.u32(id.unwrap_or(NONE_U32));
                shard_addresses(&mut w, shards);
                w.u64(*capacity_bytes_per_s);
                w.u64(*capacity_records_per_s);
            }
            Request::LoadReport { broker, segments } => {
                w.u32(*broker);
                w.count(segments.len());
                for s in segments {
                    w.string(&s.topic);
                    w.u32(s.segment);
                    w.u64(s.bytes_per_s);
                    w.u64(s.records_per_s);
                    w.u64(s.next_offset);
                    w.u64(s.first_append_ms.unwrap_or(NONE_U64));
                    w.u64(s.lost_records);
                }
            }
            Request::LeaveBroker { broker } => w.u32(*broker),
            Request::ApplyLayout { topic_json, owners } => {
                w.u32(u32::try_from(topic_json.len()).unwrap_or(u32::MAX));
                w.bytes(topic_json);
                w.count(owners.len());
                for owner in owners {
                    w.u32(owner.broker);
                    shard_addresses(&mut w, &owner.shards);
                }
            }
        }
        seal_frame(out, start, self.frame_type(), request_id);
    }

    /// Verify a request frame's payload against `header` and decode it: the
    /// one entry point for bytes from a peer. A produce request's batch is
    /// validated here too, and its bytes are checksummed once for both the
    /// batch's checksum and the frame's (`FrameHeader::verify_split`); every
    /// other payload is checked whole, then decoded. The frame's checksum is
    /// always judged first, so a frame damaged in transit is reported as
    /// such, not as a bad batch.
    pub fn decode_verified(
        header: &FrameHeader,
        payload: &'a [u8],
    ) -> Result<VerifiedRequest<'a>, DecodeError> {
        if header.frame_type == FrameType::ProduceRequest {
            let decoded = Request::decode(header.frame_type, payload);
            if let Ok(request @ Request::Produce { batch, .. }) = decoded {
                // A small batch is cheaper to read twice than to fold.
                let tail = batch
                    .get(crate::batch::CHECKSUMMED_FROM..)
                    .filter(|t| t.len() >= crate::checksum::COMBINE_MIN_BYTES);
                if let Some(tail) = tail {
                    let tail_crc = crate::checksum::crc32c(tail);
                    let head = &payload[..payload.len() - tail.len()];
                    header.verify_split(head, tail_crc, tail.len())?;
                    let view = BatchView::validate_checksummed(batch, tail_crc)?;
                    return Ok(VerifiedRequest {
                        request,
                        batch: Some(view),
                    });
                }
            }
        }
        header.verify_payload(payload)?;
        let request = Request::decode(header.frame_type, payload)?;
        let batch = match &request {
            Request::Produce { batch, .. } => Some(BatchView::validate(batch)?),
            _ => None,
        };
        Ok(VerifiedRequest { request, batch })
    }

    /// Decode a request payload whose frame header and checksum were
    /// verified.
    pub fn decode(frame_type: FrameType, payload: &'a [u8]) -> Result<Request<'a>, DecodeError> {
        let mut r = Reader::new(payload, "request");
        let request = match frame_type {
            FrameType::ShardsRequest => Request::Shards,
            FrameType::ListTopicsRequest => Request::ListTopics,
            FrameType::ListBrokersRequest => Request::ListBrokers,
            FrameType::SplitSegmentRequest => Request::SplitSegment {
                topic: r.string()?,
                segment: r.u32()?,
                pieces: r.u32()?,
            },
            FrameType::MergeSegmentsRequest => Request::MergeSegments {
                topic: r.string()?,
                a: r.u32()?,
                b: r.u32()?,
            },
            FrameType::MoveSegmentRequest => Request::MoveSegment {
                topic: r.string()?,
                segment: r.u32()?,
                to: some_u32(r.u32()?),
            },
            FrameType::SetPolicyRequest => Request::SetPolicy {
                topic: r.string()?,
                policy: r.string()?,
            },
            FrameType::RegisterBrokerRequest => Request::RegisterBroker {
                id: some_u32(r.u32()?),
                shards: read_shard_addresses(&mut r)?,
                capacity_bytes_per_s: r.u64()?,
                capacity_records_per_s: r.u64()?,
            },
            FrameType::LoadReportRequest => {
                let broker = r.u32()?;
                let n = r.count(2 + 4 + 8 * 5)?;
                let mut segments = Vec::with_capacity(n);
                for _ in 0..n {
                    segments.push(SegmentLoadReport {
                        topic: r.string()?,
                        segment: r.u32()?,
                        bytes_per_s: r.u64()?,
                        records_per_s: r.u64()?,
                        next_offset: r.u64()?,
                        first_append_ms: some_u64(r.u64()?),
                        lost_records: r.u64()?,
                    });
                }
                Request::LoadReport { broker, segments }
            }
            FrameType::LeaveBrokerRequest => Request::LeaveBroker { broker: r.u32()? },
            FrameType::ApplyLayoutRequest => Request::ApplyLayout {
                topic_json: {
                    // A byte length, bounded by the frame (`take`).
                    let n = r.u32()? as usize;
                    r.take(n)?
                },
                owners: {
                    let n = r.count(8)?;
                    let mut owners = Vec::with_capacity(n);
                    for _ in 0..n {
                        owners.push(BrokerShards {
                            broker: r.u32()?,
                            shards: read_shard_addresses(&mut r)?,
                        });
                    }
                    owners
                },
            },
            FrameType::DropTopicRequest => Request::DropTopic { topic: r.string()? },
            FrameType::CreateTopicRequest => Request::CreateTopic {
                topic: r.string()?,
                segments: r.u32()?,
            },
            FrameType::DeleteTopicRequest => Request::DeleteTopic { topic: r.string()? },
            FrameType::DescribeTopicRequest => Request::DescribeTopic { topic: r.string()? },
            FrameType::HeldLayoutRequest => Request::HeldLayout { topic: r.string()? },
            FrameType::ProduceRequest => {
                let segment = r.u32()?;
                let ack = AckMode::from_u8(r.u8()?).ok_or(DecodeError::Invalid {
                    what: "produce request",
                    reason: "unknown ack mode",
                })?;
                let len = r.u16()?;
                // The same bound as every other string field: the encoder
                // never writes more, so the decoder accepts no more.
                if u32::from(len) > STRING_BYTES_MAX {
                    return Err(DecodeError::TooLarge {
                        what: "string",
                        len: u64::from(len),
                        max: u64::from(STRING_BYTES_MAX),
                    });
                }
                let len = usize::from(len);
                let topic =
                    std::str::from_utf8(r.take(len)?).map_err(|_| DecodeError::Invalid {
                        what: "produce request",
                        reason: "topic is not UTF-8",
                    })?;
                Request::Produce {
                    topic,
                    segment,
                    ack,
                    batch: r.rest(),
                }
            }
            FrameType::FetchRequest => {
                let topic = r.string()?;
                let segment = r.u32()?;
                let kind = r.u8()?;
                let value = r.u64()?;
                let from = match kind {
                    0 => FetchFrom::Offset(value),
                    1 => FetchFrom::Timestamp(value as i64),
                    2 => FetchFrom::Earliest,
                    3 => FetchFrom::Latest,
                    _ => {
                        return Err(DecodeError::Invalid {
                            what: "fetch request",
                            reason: "unknown start kind",
                        })
                    }
                };
                let max_bytes = r.u32()?;
                let max_wait_ms = r.u32()?;
                let checks = FetchChecks::from_u8(r.u8()?).ok_or(DecodeError::Invalid {
                    what: "fetch request",
                    reason: "unknown checks value",
                })?;
                Request::Fetch {
                    topic,
                    segment,
                    from,
                    max_bytes,
                    max_wait_ms,
                    checks,
                }
            }
            FrameType::PayloadWriteRequest => Request::PayloadWrite {
                topic: r.string()?,
                id: read_payload_id(&mut r)?,
                offset: r.u64()?,
                bytes: r.rest(),
            },
            FrameType::PayloadCommitRequest => Request::PayloadCommit {
                topic: r.string()?,
                reference: PayloadRef::decode(r.take(PAYLOAD_REF_BYTES)?)?,
            },
            FrameType::PayloadReadRequest => Request::PayloadRead {
                topic: r.string()?,
                id: read_payload_id(&mut r)?,
                offset: r.u64()?,
                max_bytes: r.u32()?,
            },
            _ => {
                return Err(DecodeError::Invalid {
                    what: "request",
                    reason: "frame type is not a request",
                })
            }
        };
        r.finish()?;
        Ok(request)
    }
}

impl<'a> Response<'a> {
    pub fn frame_type(&self) -> FrameType {
        match self {
            Response::Shards { .. } => FrameType::ShardsResponse,
            Response::Topic(_) => FrameType::TopicResponse,
            Response::Done => FrameType::DoneResponse,
            Response::TopicList { .. } => FrameType::TopicListResponse,
            Response::Produced { .. } => FrameType::ProduceResponse,
            Response::Fetched(_) => FrameType::FetchResponse,
            Response::PayloadBytes { .. } => FrameType::PayloadReadResponse,
            Response::Error { .. } | Response::Sealed { .. } => FrameType::ErrorResponse,
            Response::Brokers { .. } => FrameType::BrokersResponse,
            Response::Registered { .. } => FrameType::RegisteredResponse,
        }
    }

    /// Append the whole frame (header and payload) to `out`.
    pub fn encode(&self, request_id: u32, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + FRAME_HEADER_BYTES, 0);
        let mut w = Writer { out };
        match self {
            Response::Shards { shards } => shard_addresses(&mut w, shards),
            Response::Topic(topic) => {
                w.string(&topic.name);
                w.count(topic.segments.len());
                for s in &topic.segments {
                    write_segment(&mut w, s);
                }
            }
            Response::Brokers { brokers } => {
                w.count(brokers.len());
                for b in brokers {
                    w.u32(b.id);
                    shard_addresses(&mut w, &b.shards);
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
                    write_segment(&mut w, s);
                }
            }
        }
        seal_frame(out, start, self.frame_type(), request_id);
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

    /// Decode a response payload whose frame header and checksum were
    /// verified.
    pub fn decode(frame_type: FrameType, payload: &'a [u8]) -> Result<Response<'a>, DecodeError> {
        let mut r = Reader::new(payload, "response");
        let response = match frame_type {
            FrameType::ShardsResponse => Response::Shards {
                shards: read_shard_addresses(&mut r)?,
            },
            FrameType::BrokersResponse => {
                let n = r.count(4 + 4 + 8 * 4 + 4 + 4 + 8)?;
                let mut brokers = Vec::with_capacity(n);
                for _ in 0..n {
                    brokers.push(BrokerStatus {
                        id: r.u32()?,
                        shards: read_shard_addresses(&mut r)?,
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
                    segments.push(read_segment(&mut r, "topic response")?);
                }
                Response::Topic(TopicInfo { name, segments })
            }
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
            FrameType::FetchResponse => Response::Fetched(Fetched {
                segment: r.u32()?,
                start_offset: r.u64()?,
                next_offset: r.u64()?,
                high_watermark: r.u64()?,
                sealed: r.u8()? != 0,
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
                        segments.push(read_segment(&mut r, "sealed refusal")?);
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
        };
        r.finish()?;
        Ok(response)
    }
}

/// Bytes of the smallest encoded [`SegmentInfo`] (no successors, no
/// address): what a list count of them is checked against.
const SEGMENT_INFO_BYTES_MIN: usize = 43 + 4 + 1 + 8 * 6;

/// One [`SegmentInfo`], as a topic response and a sealed refusal carry it.
fn write_segment(w: &mut Writer<'_>, s: &SegmentInfo) {
    w.u32(s.id);
    w.u32(s.epoch);
    w.u32(s.start);
    w.u64(s.end);
    w.u8(u8::from(s.sealed));
    w.u16(s.shard);
    w.u64(s.next_offset);
    w.u64(s.appended_bytes);
    w.count(s.successors.len());
    for id in &s.successors {
        w.u32(*id);
    }
    w.u32(s.broker.unwrap_or(NONE_U32));
    match &s.address {
        Some(a) => {
            w.u8(1);
            w.string(&a.tcp);
            w.string(&a.quic);
        }
        None => w.u8(0),
    }
    w.u64(s.bytes_per_s);
    w.u64(s.records_per_s);
    w.u64(s.created_ms);
    w.u64(s.sealed_ms.unwrap_or(NONE_U64));
    w.u64(s.first_append_ms.unwrap_or(NONE_U64));
    w.u64(s.lost_records);
}

/// The twin of [`write_segment`]; `what` names the message in errors.
fn read_segment(r: &mut Reader<'_>, what: &'static str) -> Result<SegmentInfo, DecodeError> {
    let id = r.u32()?;
    let epoch = r.u32()?;
    let start = r.u32()?;
    let end = r.u64()?;
    let sealed = r.u8()? != 0;
    let shard = r.u16()?;
    let next_offset = r.u64()?;
    let appended_bytes = r.u64()?;
    let k = r.count(4)?;
    let mut successors = Vec::with_capacity(k);
    for _ in 0..k {
        successors.push(r.u32()?);
    }
    let broker = some_u32(r.u32()?);
    let address = match r.u8()? {
        0 => None,
        1 => Some(ShardAddress {
            tcp: r.string()?,
            quic: r.string()?,
        }),
        _ => {
            return Err(DecodeError::Invalid {
                what,
                reason: "address flag is neither 0 nor 1",
            })
        }
    };
    let bytes_per_s = r.u64()?;
    let records_per_s = r.u64()?;
    let created_ms = r.u64()?;
    let sealed_ms = some_u64(r.u64()?);
    let first_append_ms = some_u64(r.u64()?);
    let lost_records = r.u64()?;
    if u64::from(start) >= end || end > 1 << 32 {
        return Err(DecodeError::Invalid {
            what,
            reason: "segment range is empty or beyond 2^32",
        });
    }
    Ok(SegmentInfo {
        id,
        epoch,
        start,
        end,
        sealed,
        shard,
        next_offset,
        appended_bytes,
        successors,
        broker,
        address,
        bytes_per_s,
        records_per_s,
        created_ms,
        sealed_ms,
        first_append_ms,
        lost_records,
    })
}

fn some_u32(v: u32) -> Option<u32> {
    (v != NONE_U32).then_some(v)
}

fn some_u64(v: u64) -> Option<u64> {
    (v != NONE_U64).then_some(v)
}

fn shard_addresses(w: &mut Writer<'_>, shards: &[ShardAddress]) {
    w.count(shards.len());
    for s in shards {
        w.string(&s.tcp);
        w.string(&s.quic);
    }
}

fn read_shard_addresses(r: &mut Reader<'_>) -> Result<Vec<ShardAddress>, DecodeError> {
    let n = r.count(4)?;
    let mut shards = Vec::with_capacity(n);
    for _ in 0..n {
        shards.push(ShardAddress {
            tcp: r.string()?,
            quic: r.string()?,
        });
    }
    Ok(shards)
}

fn payload_id(w: &mut Writer<'_>, id: &PayloadId) {
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

/// Fill the frame header reserved at `out[start..start + 16]` for the
/// payload written after it.
fn seal_frame(out: &mut [u8], start: usize, frame_type: FrameType, request_id: u32) {
    let payload = &out[start + FRAME_HEADER_BYTES..];
    let header = FrameHeader::for_payload(frame_type, request_id, payload);
    out[start..start + FRAME_HEADER_BYTES].copy_from_slice(&header.encode());
}

/// The header of a frame whose payload is the concatenation of `parts`, so
/// a sender can write large parts (batches in a buffer) without copying
/// them into one payload first.
pub fn frame_header_for_parts(
    frame_type: FrameType,
    request_id: u32,
    parts: &[&[u8]],
) -> [u8; FRAME_HEADER_BYTES] {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut header = FrameHeader {
        frame_type,
        payload_bytes: u32::try_from(len).unwrap_or(u32::MAX),
        request_id,
        checksum: 0,
    };
    // The checksum covers the first 12 header bytes, then the payload.
    let prefix = header.encode();
    let mut crc = crate::checksum::crc32c(&prefix[..12]);
    for p in parts {
        crc = crate::checksum::crc32c_append(crc, p);
    }
    header.checksum = crc;
    header.encode()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_fetched_frame_finished_in_place_is_the_encoded_one() {
        let batches = b"two whole batches, as far as this test cares";
        let fetched = Fetched {
            segment: 3,
            start_offset: 17,
            next_offset: 40,
            high_watermark: 41,
            sealed: true,
            batches,
        };
        let mut encoded = Vec::new();
        Response::Fetched(fetched.clone()).encode(9, &mut encoded);
        let mut in_place = vec![0xAA; FETCHED_FRAME_PREFIX_BYTES];
        in_place.extend_from_slice(batches);
        fetched.finish_frame(9, &mut in_place);
        assert_eq!(in_place, encoded);
    }
    use crate::frame::FRAME_HEADER_BYTES;

    fn decode_frame(bytes: &[u8]) -> (FrameHeader, &[u8]) {
        let h = FrameHeader::decode(bytes[..FRAME_HEADER_BYTES].try_into().unwrap()).unwrap();
        let payload = &bytes[FRAME_HEADER_BYTES..];
        h.verify_payload(payload).unwrap();
        (h, payload)
    }

    pub(crate) fn sample_requests() -> Vec<Request<'static>> {
        vec![
            Request::Shards,
            Request::ListTopics,
            Request::CreateTopic {
                topic: "ns/t".into(),
                segments: 4,
            },
            Request::DeleteTopic {
                topic: "ns/t".into(),
            },
            Request::HeldLayout {
                topic: "ns/t".into(),
            },
            Request::DescribeTopic {
                topic: "ns/t".into(),
            },
            Request::Produce {
                topic: "ns/t",
                segment: 3,
                ack: AckMode::Durable,
                batch: b"batch",
            },
            Request::Fetch {
                topic: "ns/t".into(),
                segment: 1,
                from: FetchFrom::Timestamp(-5),
                max_bytes: 1 << 20,
                max_wait_ms: 500,
                checks: FetchChecks::Trust,
            },
            Request::Fetch {
                topic: "a/b".into(),
                segment: 2,
                from: FetchFrom::Latest,
                max_bytes: 1,
                max_wait_ms: 0,
                checks: FetchChecks::Trust,
            },
            Request::PayloadWrite {
                topic: "ns/t".into(),
                id: PayloadId {
                    created_ms: 5,
                    nonce: u128::MAX - 3,
                },
                offset: 4 << 20,
                bytes: b"piece",
            },
            Request::PayloadCommit {
                topic: "ns/t".into(),
                reference: PayloadRef {
                    id: PayloadId {
                        created_ms: 5,
                        nonce: 6,
                    },
                    length: 7,
                    checksum: 8,
                },
            },
            Request::PayloadRead {
                topic: "ns/t".into(),
                id: PayloadId {
                    created_ms: 9,
                    nonce: 10,
                },
                offset: 11,
                max_bytes: 12,
            },
            Request::SplitSegment {
                topic: "ns/t".into(),
                segment: 3,
                pieces: 2,
            },
            Request::MergeSegments {
                topic: "ns/t".into(),
                a: 4,
                b: 5,
            },
            Request::MoveSegment {
                topic: "ns/t".into(),
                segment: 6,
                to: Some(2),
            },
            Request::MoveSegment {
                topic: "ns/t".into(),
                segment: 6,
                to: None,
            },
            Request::SetPolicy {
                topic: "ns/t".into(),
                policy: r#"{"target":{"bytes_per_s":1000}}"#.into(),
            },
            Request::ListBrokers,
            Request::RegisterBroker {
                id: None,
                shards: vec![ShardAddress {
                    tcp: "127.0.0.1:7420".into(),
                    quic: "127.0.0.1:7420".into(),
                }],
                capacity_bytes_per_s: 1 << 30,
                capacity_records_per_s: 1 << 20,
            },
            Request::LoadReport {
                broker: 3,
                segments: vec![SegmentLoadReport {
                    topic: "ns/t".into(),
                    segment: 1,
                    bytes_per_s: 2,
                    records_per_s: 3,
                    next_offset: 4,
                    first_append_ms: Some(5),
                    lost_records: 6,
                }],
            },
            Request::LeaveBroker { broker: 3 },
            Request::ApplyLayout {
                topic_json: br#"{"name":"ns/t"}"#,
                owners: vec![
                    BrokerShards {
                        broker: 2,
                        shards: vec![ShardAddress {
                            tcp: "127.0.0.2:9092".into(),
                            quic: "127.0.0.2:9093".into(),
                        }],
                    },
                    BrokerShards {
                        broker: 7,
                        shards: Vec::new(),
                    },
                ],
            },
            Request::DropTopic {
                topic: "ns/t".into(),
            },
        ]
    }

    pub(crate) fn sample_responses() -> Vec<Response<'static>> {
        vec![
            Response::Shards {
                shards: vec![ShardAddress {
                    tcp: "127.0.0.1:7420".into(),
                    quic: "127.0.0.1:7420".into(),
                }],
            },
            Response::Topic(TopicInfo {
                name: "ns/t".into(),
                segments: vec![SegmentInfo {
                    id: 0,
                    epoch: 1,
                    start: 0,
                    end: 1 << 32,
                    sealed: false,
                    shard: 1,
                    next_offset: 99,
                    appended_bytes: 12345,
                    successors: vec![4, 5],
                    lost_records: 17,
                    ..SegmentInfo::default()
                }],
            }),
            Response::Topic(TopicInfo {
                name: "ns/t".into(),
                segments: vec![SegmentInfo {
                    id: 7,
                    epoch: 2,
                    start: 5,
                    end: 9,
                    sealed: true,
                    shard: 0,
                    next_offset: 1,
                    appended_bytes: 2,
                    successors: vec![8],
                    broker: Some(4),
                    address: Some(ShardAddress {
                        tcp: "127.0.0.1:7500".into(),
                        quic: "127.0.0.1:7500".into(),
                    }),
                    bytes_per_s: 1000,
                    records_per_s: 10,
                    created_ms: 1_700_000_000_000,
                    sealed_ms: Some(1_700_000_001_000),
                    first_append_ms: Some(1_700_000_000_020),
                    lost_records: 0,
                }],
            }),
            Response::Brokers {
                brokers: vec![BrokerStatus {
                    id: 1,
                    shards: vec![ShardAddress {
                        tcp: "127.0.0.1:7420".into(),
                        quic: "127.0.0.1:7420".into(),
                    }],
                    capacity_bytes_per_s: 100,
                    capacity_records_per_s: 10,
                    bytes_per_s: 50,
                    records_per_s: 1,
                    utilization_permille: 500,
                    open_segments: 3,
                    silent_ms: 400,
                }],
            },
            Response::Registered {
                id: 9,
                filer: "/var/lib/kelp/filer".into(),
            },
            Response::Done,
            Response::TopicList {
                topics: vec!["a/b".into(), "c/d".into()],
            },
            Response::Produced {
                segment: 2,
                base_offset: 1000,
                record_count: 10,
            },
            Response::Fetched(Fetched {
                segment: 2,
                start_offset: 5,
                next_offset: 10,
                high_watermark: 12,
                sealed: false,
                batches: b"bytes",
            }),
            Response::PayloadBytes {
                length: 100,
                offset: 90,
                bytes: b"ten bytes!",
            },
            Response::Error {
                code: ErrorCode::NotOwner,
                message: "not mine".into(),
            },
            Response::Sealed {
                message: "segment 3 is sealed".into(),
                successors: Successors {
                    layout_version: 5,
                    segments: vec![
                        SegmentInfo {
                            id: 4,
                            epoch: 1,
                            start: 0,
                            end: 1 << 31,
                            shard: 1,
                            broker: Some(2),
                            address: Some(ShardAddress {
                                tcp: "127.0.0.2:9092".into(),
                                quic: "127.0.0.2:9093".into(),
                            }),
                            ..SegmentInfo::default()
                        },
                        SegmentInfo {
                            id: 5,
                            epoch: 1,
                            start: 1 << 31,
                            end: 1 << 32,
                            ..SegmentInfo::default()
                        },
                    ],
                },
            },
        ]
    }

    #[test]
    fn requests_round_trip() {
        for req in sample_requests() {
            let mut out = Vec::new();
            req.encode(42, &mut out);
            let (h, payload) = decode_frame(&out);
            assert_eq!(h.request_id, 42);
            assert!(h.frame_type.is_request());
            assert_eq!(Request::decode(h.frame_type, payload).unwrap(), req);
        }
    }

    #[test]
    fn responses_round_trip() {
        for resp in sample_responses() {
            let mut out = Vec::new();
            resp.encode(7, &mut out);
            let (h, payload) = decode_frame(&out);
            assert!(!h.frame_type.is_request());
            assert_eq!(Response::decode(h.frame_type, payload).unwrap(), resp);
        }
    }

    #[test]
    fn truncated_payloads_are_errors_not_panics() {
        for req in sample_requests() {
            let mut out = Vec::new();
            req.encode(1, &mut out);
            let payload = &out[FRAME_HEADER_BYTES..];
            for n in 0..payload.len() {
                // The last field of Produce and PayloadWrite is "the
                // rest", so any cut past the fixed part decodes;
                // everything else must refuse.
                if let Ok(r) = Request::decode(req.frame_type(), &payload[..n]) {
                    assert!(
                        matches!(r, Request::Produce { .. } | Request::PayloadWrite { .. }),
                        "{req:?} cut to {n} decoded"
                    );
                }
            }
        }
        for resp in sample_responses() {
            let mut out = Vec::new();
            resp.encode(1, &mut out);
            let payload = &out[FRAME_HEADER_BYTES..];
            for n in 0..payload.len() {
                // A sealed refusal cut right after its message is a plain
                // `SegmentSealed` error (the successors are optional).
                if let Ok(r) = Response::decode(resp.frame_type(), &payload[..n]) {
                    let plain_sealed = matches!(resp, Response::Sealed { .. })
                        && matches!(
                            r,
                            Response::Error {
                                code: ErrorCode::SegmentSealed,
                                ..
                            }
                        );
                    assert!(
                        plain_sealed
                            || matches!(r, Response::Fetched(_) | Response::PayloadBytes { .. }),
                        "{resp:?} cut to {n} decoded"
                    );
                }
            }
        }
    }

    #[test]
    fn parts_header_matches_whole() {
        let f = Fetched {
            segment: 1,
            start_offset: 2,
            next_offset: 3,
            high_watermark: 4,
            sealed: true,
            batches: b"abcdef",
        };
        let mut whole = Vec::new();
        Response::Fetched(f.clone()).encode(9, &mut whole);
        let prefix = f.encode_prefix();
        let header =
            frame_header_for_parts(FrameType::FetchResponse, 9, &[&prefix, b"abc", b"def"]);
        assert_eq!(&whole[..FRAME_HEADER_BYTES], &header);
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
            Request::decode(FrameType::ProduceRequest, &payload),
            Err(DecodeError::TooLarge { .. })
        ));
        let topic = &topic[..STRING_BYTES_MAX as usize];
        let mut out = Vec::new();
        Request::Produce {
            topic,
            segment: 1,
            ack: AckMode::Leader,
            batch: b"",
        }
        .encode(1, &mut out);
        let (h, payload) = decode_frame(&out);
        assert!(matches!(
            Request::decode(h.frame_type, payload).unwrap(),
            Request::Produce { topic: t, .. } if t == topic
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
            batches: &batches,
        };
        let mut encoded = Vec::new();
        Response::Fetched(fetched.clone()).encode(5, &mut encoded);
        let head = fetched.frame_head(5, batches.len(), body_crc);
        assert_eq!(&encoded[..FETCHED_FRAME_PREFIX_BYTES], &head[..]);
    }

    fn fetched_frame(batches: &[u8], stated_crc: Option<u32>) -> Vec<u8> {
        let fetched = Fetched {
            segment: 2,
            start_offset: 0,
            next_offset: 80,
            high_watermark: 80,
            sealed: false,
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

    fn produce_frame(batch: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        Request::Produce {
            topic: "ns/t",
            segment: 3,
            ack: AckMode::Leader,
            batch,
        }
        .encode(7, &mut out);
        out
    }

    fn verified(frame: &[u8]) -> Result<VerifiedRequest<'_>, DecodeError> {
        let h = FrameHeader::decode(frame[..FRAME_HEADER_BYTES].try_into().unwrap()).unwrap();
        Request::decode_verified(&h, &frame[FRAME_HEADER_BYTES..])
    }

    fn good_batch() -> Vec<u8> {
        let mut b = crate::BatchBuilder::new();
        for i in 0..40 {
            b.push(
                1000 + i,
                format!("key-{i}").as_bytes(),
                &[i as u8; 300],
                &[],
            )
            .unwrap();
        }
        b.finish(0, 0).to_vec()
    }

    /// One pass over a produce request's batch checks the frame's checksum
    /// and the batch's: a good frame gives the validated batch.
    #[test]
    fn a_produce_frame_is_verified_with_its_batch() {
        let batch = good_batch();
        let frame = produce_frame(&batch);
        let v = verified(&frame).unwrap();
        assert_eq!(v.batch.unwrap().bytes(), &batch[..]);
        assert!(matches!(v.request, Request::Produce { segment: 3, .. }));
        // Every other request comes without a batch, verified whole.
        let mut out = Vec::new();
        Request::ListTopics.encode(1, &mut out);
        assert!(verified(&out).unwrap().batch.is_none());
        out[FRAME_HEADER_BYTES - 1] ^= 1;
        assert!(matches!(
            verified(&out),
            Err(DecodeError::Checksum { what: "frame", .. })
        ));
    }

    /// A byte flipped anywhere in a produce frame's payload (topic, batch
    /// header, records, last byte) is the frame's checksum error, not a
    /// batch error, and never a panic.
    #[test]
    fn a_flipped_byte_in_a_produce_frame_is_a_frame_checksum_error() {
        let frame = produce_frame(&good_batch());
        for at in [
            FRAME_HEADER_BYTES,
            FRAME_HEADER_BYTES + 8,
            FRAME_HEADER_BYTES + 20,
            200,
            frame.len() - 1,
        ] {
            let mut bad = frame.clone();
            bad[at] ^= 0x10;
            let err = verified(&bad).unwrap_err();
            assert!(
                matches!(err, DecodeError::Checksum { what: "frame", .. }),
                "byte {at}: {err:?}"
            );
        }
    }

    /// A client that built a batch with a wrong checksum, then framed it
    /// correctly, gets the batch's error: the frame's checksum passing does
    /// not let a bad batch in.
    #[test]
    fn a_bad_batch_in_a_good_frame_is_a_batch_error() {
        let mut batch = good_batch();
        batch[crate::batch::CHECKSUMMED_FROM + 30] ^= 1;
        let err = verified(&produce_frame(&batch)).unwrap_err();
        assert!(
            matches!(err, DecodeError::Checksum { what: "batch", .. }),
            "{err:?}"
        );
        // A batch too short to have a checksummed part is refused too.
        let err = verified(&produce_frame(&batch[..10])).unwrap_err();
        assert!(
            matches!(err, DecodeError::Truncated { what: "batch", .. }),
            "{err:?}"
        );
    }

    /// A whole fetch request frame, as printed in docs/wire-format.md.
    #[test]
    fn golden_fetch_request_frame() {
        let mut out = Vec::new();
        Request::Fetch {
            topic: "ns/t".into(),
            segment: 1,
            from: FetchFrom::Offset(42),
            max_bytes: 1 << 20,
            max_wait_ms: 500,
            checks: FetchChecks::Trust,
        }
        .encode(7, &mut out);
        let expected: &[u8] = &[
            0x4b, 0x4c, 0x01, 0x11, 0x1c, 0x00, 0x00, 0x00, // "KL", v1, Fetch, 28 bytes
            0x07, 0x00, 0x00, 0x00, 0x86, 0xd2, 0x3f, 0x39, // request id 7, checksum
            0x04, 0x00, 0x6e, 0x73, 0x2f, 0x74, // topic "ns/t"
            0x01, 0x00, 0x00, 0x00, // segment 1
            0x00, // from: offset
            0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // 42
            0x00, 0x00, 0x10, 0x00, // max bytes 1 MiB
            0xf4, 0x01, 0x00, 0x00, // max wait 500 ms
            0x00, // checks: trust
        ];
        assert_eq!(out, expected);
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

    #[test]
    fn golden_produce_request() {
        let mut out = Vec::new();
        Request::Produce {
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
