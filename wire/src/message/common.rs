//! What every protocol's messages share: error codes, the segment and
//! topic descriptions answers carry, and the helpers every encoder and
//! decoder of `message` uses (a frame written around its payload, optional
//! fields, shard address lists). Owns no message of its own.

use crate::codec::{Reader, Writer};
use crate::error::DecodeError;
use crate::frame::{FrameHeader, FrameType, FRAME_HEADER_BYTES};

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
    /// A fetch asked for an offset past the segment's end. On a sealed
    /// segment whose owner died, the records a reader read past the seal
    /// point were never stored (docs/broker.md, "What each ack mode
    /// survives").
    OffsetOutOfRange,
    /// An idempotent producer's batch does not follow its last one in the
    /// segment (a sequence gap): records before it were lost, or the
    /// producer's state was. The batch was not stored.
    OutOfOrderSequence,
    /// An idempotent producer's batch carries an epoch older than one the
    /// segment has already stored for its producer id. Not stored.
    ProducerFenced,
    /// The server requires authentication and the connection has not
    /// authenticated, or authentication failed: the message says which.
    /// After a failure the connection is refused everything.
    Unauthenticated,
    /// The authenticated principal may not do this (the message names
    /// the principal, the operation and the topic).
    Forbidden,
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
            ErrorCode::OffsetOutOfRange => 22,
            ErrorCode::OutOfOrderSequence => 23,
            ErrorCode::ProducerFenced => 24,
            ErrorCode::Unauthenticated => 25,
            ErrorCode::Forbidden => 26,
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
            22 => ErrorCode::OffsetOutOfRange,
            23 => ErrorCode::OutOfOrderSequence,
            24 => ErrorCode::ProducerFenced,
            25 => ErrorCode::Unauthenticated,
            26 => ErrorCode::Forbidden,
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
            // A well-formed frame of another port's protocol: as the
            // handlers refused one before ports decoded typed requests.
            DecodeError::Foreign { .. } => ErrorCode::InvalidArgument,
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
    /// The brokers that keep a copy of the segment besides its owner (its
    /// followers), in the order the control plane placed them.
    pub followers: Vec<FollowerInfo>,
}

/// One follower of a segment: a broker shard that copies the owner's
/// records into its own buffers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FollowerInfo {
    pub broker: u32,
    pub shard: u16,
    /// Whether the owner waits for it before answering an `all` produce
    /// (the in-sync set, kept by the control plane).
    pub in_sync: bool,
    /// Its shard's address, when the one describing knows it.
    pub address: Option<ShardAddress>,
}

/// Sentinel for "none" in the u32 and u64 fields that encode an `Option`.
pub(super) const NONE_U32: u32 = u32::MAX;
pub(super) const NONE_U64: u64 = u64::MAX;

/// A topic's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub segments: Vec<SegmentInfo>,
}

/// Bytes of the smallest encoded [`SegmentInfo`] (no successors, no
/// address): what a list count of them is checked against.
pub(super) const SEGMENT_INFO_BYTES_MIN: usize = 43 + 4 + 1 + 8 * 6 + 4;
/// Bytes of the smallest encoded [`FollowerInfo`] (no address).
const FOLLOWER_INFO_BYTES_MIN: usize = 4 + 2 + 1 + 1;

/// One [`SegmentInfo`], as a topic response and a sealed refusal carry it.
pub(super) fn write_segment(w: &mut Writer<'_>, s: &SegmentInfo) {
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
    write_address(w, s.address.as_ref());
    w.u64(s.bytes_per_s);
    w.u64(s.records_per_s);
    w.u64(s.created_ms);
    w.u64(s.sealed_ms.unwrap_or(NONE_U64));
    w.u64(s.first_append_ms.unwrap_or(NONE_U64));
    w.u64(s.lost_records);
    w.count(s.followers.len());
    for f in &s.followers {
        w.u32(f.broker);
        w.u16(f.shard);
        w.u8(u8::from(f.in_sync));
        write_address(w, f.address.as_ref());
    }
}

fn write_address(w: &mut Writer<'_>, address: Option<&ShardAddress>) {
    match address {
        Some(a) => {
            w.u8(1);
            w.string(&a.tcp);
            w.string(&a.quic);
        }
        None => w.u8(0),
    }
}

fn read_address(
    r: &mut Reader<'_>,
    what: &'static str,
) -> Result<Option<ShardAddress>, DecodeError> {
    match r.u8()? {
        0 => Ok(None),
        1 => Ok(Some(ShardAddress {
            tcp: r.string()?,
            quic: r.string()?,
        })),
        _ => Err(DecodeError::Invalid {
            what,
            reason: "address flag is neither 0 nor 1",
        }),
    }
}

/// The twin of [`write_segment`]; `what` names the message in errors.
pub(super) fn read_segment(
    r: &mut Reader<'_>,
    what: &'static str,
) -> Result<SegmentInfo, DecodeError> {
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
    let address = read_address(r, what)?;
    let bytes_per_s = r.u64()?;
    let records_per_s = r.u64()?;
    let created_ms = r.u64()?;
    let sealed_ms = some_u64(r.u64()?);
    let first_append_ms = some_u64(r.u64()?);
    let lost_records = r.u64()?;
    let n = r.count(FOLLOWER_INFO_BYTES_MIN)?;
    let mut followers = Vec::with_capacity(n);
    for _ in 0..n {
        followers.push(FollowerInfo {
            broker: r.u32()?,
            shard: r.u16()?,
            in_sync: match r.u8()? {
                0 => false,
                1 => true,
                _ => {
                    return Err(DecodeError::Invalid {
                        what,
                        reason: "in-sync flag is neither 0 nor 1",
                    })
                }
            },
            address: read_address(r, what)?,
        });
    }
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
        followers,
    })
}

pub(super) fn some_u32(v: u32) -> Option<u32> {
    (v != NONE_U32).then_some(v)
}

pub(super) fn some_u64(v: u64) -> Option<u64> {
    (v != NONE_U64).then_some(v)
}

pub(super) fn shard_addresses(w: &mut Writer<'_>, shards: &[ShardAddress]) {
    w.count(shards.len());
    for s in shards {
        w.string(&s.tcp);
        w.string(&s.quic);
    }
}

pub(super) fn read_shard_addresses(r: &mut Reader<'_>) -> Result<Vec<ShardAddress>, DecodeError> {
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

/// Decode a whole payload with `read`: every byte must be read
/// (`Invalid`, "trailing bytes", when some are left); `what` names the
/// message in errors.
pub(super) fn read_whole<'a, T>(
    payload: &'a [u8],
    what: &'static str,
    read: impl FnOnce(&mut Reader<'a>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let mut r = Reader::new(payload, what);
    let value = read(&mut r)?;
    r.finish()?;
    Ok(value)
}

/// Append a whole frame to `out`: a header reserved, the payload `body`
/// writes, then the header filled in for that payload.
pub(super) fn write_frame(
    out: &mut Vec<u8>,
    frame_type: FrameType,
    request_id: u32,
    body: impl FnOnce(&mut Writer<'_>),
) {
    let start = out.len();
    out.resize(start + FRAME_HEADER_BYTES, 0);
    body(&mut Writer { out });
    seal_frame(out, start, frame_type, request_id);
}

/// Fill the frame header reserved at `out[start..start + 16]` for the
/// payload written after it.
pub(super) fn seal_frame(out: &mut [u8], start: usize, frame_type: FrameType, request_id: u32) {
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
