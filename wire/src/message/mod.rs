//! Requests and responses: the payloads of frames, split by protocol so
//! that each port is handed only the messages of the protocols it serves.
//! Each is an explicit little-endian layout; strings are a u16 length then
//! UTF-8 bytes, lists a u32 count then the items. `docs/wire-format.md`
//! gives every field.
//!
//! - [`auth`]: a connection's authentication, before anything else on a
//!   server with an auth file;
//! - [`data`]: client↔broker data (shards, produce, fetch, payloads, a
//!   broker's held layout);
//! - [`admin`]: topics and their segments, policies, the brokers' list;
//! - [`control`]: broker↔control plane (membership and load reports one
//!   way, layout commands the other);
//! - [`response`]: the answers, shared by every protocol;
//! - [`port`]: what each port takes ([`BrokerPortRequest`],
//!   [`ControlPortRequest`]); a frame of another protocol decodes as
//!   `DecodeError::Foreign`;
//! - [`common`]: error codes, the structures answers share, and the
//!   encoding helpers.
//!
//! The frame types and layouts are one table for all protocols
//! ([`FrameType`](crate::FrameType)): the split is in the types, not on the wire.

/// The frame-type table of one message enum, written once: each variant
/// and the frame type it travels as, and what a decoding error calls its
/// payload. Gives the enum `FRAME_TYPES`, `owns`, `frame_type`, `encode`
/// (the frame around the payload the enum's own `write` puts down) and
/// `decode` (the payload read whole by the enum's own `read`).
macro_rules! frame_types {
    ($enum:ident $(<$lt:lifetime>)? as $what:literal { $($variant:ident => $frame_type:ident),+ $(,)? }) => {
        impl$(<$lt>)? $enum$(<$lt>)? {
            /// The frame types of these messages.
            pub const FRAME_TYPES: &'static [FrameType] = &[$(FrameType::$frame_type),+];

            /// Whether `frame_type` is one of [`Self::FRAME_TYPES`].
            pub fn owns(frame_type: FrameType) -> bool {
                Self::FRAME_TYPES.contains(&frame_type)
            }

            pub fn frame_type(&self) -> FrameType {
                match self {
                    $($enum::$variant { .. } => FrameType::$frame_type,)+
                }
            }

            /// Append the whole frame (header and payload) to `out`.
            pub fn encode(&self, request_id: u32, out: &mut Vec<u8>) {
                super::common::write_frame(out, self.frame_type(), request_id, |w| self.write(w));
            }

            /// Decode a payload whose frame header and checksum were
            /// verified. A frame type not in [`Self::FRAME_TYPES`] is an
            /// error: `Foreign` where it is a request of another protocol.
            pub fn decode(
                frame_type: FrameType,
                payload: &$($lt)? [u8],
            ) -> Result<Self, crate::error::DecodeError> {
                super::common::read_whole(payload, $what, |r| Self::read(frame_type, r))
            }
        }
    };
}

pub mod admin;
pub mod auth;
pub mod common;
pub mod control;
pub mod data;
pub mod port;
pub mod response;
#[cfg(any(test, feature = "samples"))]
pub mod samples;

pub use admin::{AdminRequest, BrokerStatus};
pub use auth::AuthRequest;
pub use common::{
    frame_header_for_parts, ErrorCode, FollowerInfo, SegmentInfo, ShardAddress, Successors,
    TopicInfo,
};
pub use control::{
    BrokerShards, FollowerLag, LayoutCommand, MembershipRequest, SegmentLoadReport,
    FOLLOWER_LAGS_MAX,
};
pub use data::{
    produce_frame_head, AckMode, DataRequest, FetchChecks, FetchFrom, FetchRequest, Fetched,
    FollowerId, FETCHED_FRAME_PREFIX_BYTES, FETCHED_PREFIX_BYTES, PRODUCE_PREFIX_BYTES,
};
pub use port::{BrokerPortRequest, ControlPortRequest, VerifiedRequest};
pub use response::{Response, VerifiedResponse};

/// Helpers the tests of every protocol's module use.
#[cfg(test)]
pub(crate) mod testing {
    #![allow(clippy::unwrap_used)]
    use crate::frame::{FrameHeader, FRAME_HEADER_BYTES};

    /// A frame's header, decoded, and its payload, verified against it.
    pub(crate) fn decode_frame(bytes: &[u8]) -> (FrameHeader, &[u8]) {
        let h = FrameHeader::decode(bytes[..FRAME_HEADER_BYTES].try_into().unwrap()).unwrap();
        let payload = &bytes[FRAME_HEADER_BYTES..];
        h.verify_payload(payload).unwrap();
        (h, payload)
    }

    /// A produce request frame (id 7, segment 3 of "ns/t", ack leader)
    /// carrying `batch`.
    pub(crate) fn produce_frame(batch: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        super::DataRequest::Produce {
            topic: "ns/t",
            segment: 3,
            ack: super::AckMode::Leader,
            batch,
        }
        .encode(7, &mut out);
        out
    }

    /// A valid batch of 40 records of 300 bytes.
    pub(crate) fn good_batch() -> Vec<u8> {
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
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::testing::decode_frame;
    use super::*;
    use crate::error::DecodeError;
    use crate::frame::{FrameType, FRAME_HEADER_BYTES};

    /// What a decoder made of a payload, as [`round_trip_and_cut`] judges it.
    struct Judged {
        /// It is the sample.
        same: bool,
        /// A cut payload may decode to it.
        cut_may_be: bool,
    }

    /// Every sample of one protocol: encoded, then decoded, it is itself;
    /// cut short anywhere, it is an error (not a panic) or what a cut may
    /// decode to. `judge(sample, frame_type, payload)` decodes and judges.
    fn round_trip_and_cut<T: std::fmt::Debug>(
        samples: &[T],
        encode: impl Fn(&T, u32, &mut Vec<u8>),
        judge: impl Fn(&T, FrameType, &[u8]) -> Result<Judged, DecodeError>,
    ) {
        for sample in samples {
            let mut out = Vec::new();
            encode(sample, 42, &mut out);
            let (h, payload) = decode_frame(&out);
            assert_eq!(h.request_id, 42);
            assert!(
                judge(sample, h.frame_type, payload).unwrap().same,
                "{sample:?}"
            );
            for n in 0..payload.len() {
                if let Ok(cut) = judge(sample, h.frame_type, &payload[..n]) {
                    assert!(cut.cut_may_be, "{sample:?} cut to {n} decoded");
                }
            }
        }
    }

    /// A judge for a protocol whose cut payloads never decode.
    fn never_cut<T: PartialEq>(sample: &T, decoded: T) -> Judged {
        Judged {
            same: decoded == *sample,
            cut_may_be: false,
        }
    }

    #[test]
    fn requests_round_trip_and_refuse_cuts() {
        // The last field of Produce and PayloadWrite is "the rest", so any
        // cut past the fixed part decodes; everything else must refuse.
        round_trip_and_cut(
            &samples::data_requests(),
            DataRequest::encode,
            |sample, t, p| {
                DataRequest::decode(t, p).map(|d| Judged {
                    same: d == *sample,
                    cut_may_be: matches!(
                        d,
                        DataRequest::Produce { .. } | DataRequest::PayloadWrite { .. }
                    ),
                })
            },
        );
        round_trip_and_cut(
            &samples::auth_requests(),
            AuthRequest::encode,
            |sample, t, p| AuthRequest::decode(t, p).map(|d| never_cut(sample, d)),
        );
        round_trip_and_cut(
            &samples::admin_requests(),
            AdminRequest::encode,
            |sample, t, p| AdminRequest::decode(t, p).map(|d| never_cut(sample, d)),
        );
        round_trip_and_cut(
            &samples::membership_requests(),
            MembershipRequest::encode,
            |sample, t, p| MembershipRequest::decode(t, p).map(|d| never_cut(sample, d)),
        );
        round_trip_and_cut(
            &samples::layout_commands(),
            LayoutCommand::encode,
            |sample, t, p| LayoutCommand::decode(t, p).map(|d| never_cut(sample, d)),
        );
        for frame in samples::request_frames() {
            assert!(decode_frame(&frame).0.frame_type.is_request());
        }
    }

    #[test]
    fn responses_round_trip_and_refuse_cuts() {
        // A sealed refusal cut right after its message is a plain
        // `SegmentSealed` error (the successors are optional).
        round_trip_and_cut(&samples::responses(), Response::encode, |sample, t, p| {
            Response::decode(t, p).map(|d| {
                let plain_sealed = matches!(sample, Response::Sealed { .. })
                    && matches!(
                        d,
                        Response::Error {
                            code: ErrorCode::SegmentSealed,
                            ..
                        }
                    );
                Judged {
                    same: d == *sample,
                    cut_may_be: plain_sealed
                        || matches!(d, Response::Fetched(_) | Response::PayloadBytes { .. }),
                }
            })
        });
        for frame in samples::response_frames() {
            assert!(!decode_frame(&frame).0.frame_type.is_request());
        }
    }

    /// Every request frame type belongs to exactly one protocol, and each
    /// protocol's decoder calls every other type foreign.
    #[test]
    fn every_request_type_has_one_protocol() {
        for t in FrameType::ALL {
            let owners = [
                AuthRequest::owns(t),
                DataRequest::owns(t),
                AdminRequest::owns(t),
                MembershipRequest::owns(t),
                LayoutCommand::owns(t),
            ];
            let n = owners.iter().filter(|o| **o).count();
            assert_eq!(n, usize::from(t.is_request()), "{t:?}");
            let foreign = Some(DecodeError::Foreign { frame_type: t });
            if !DataRequest::owns(t) {
                assert_eq!(DataRequest::decode(t, b"").err(), foreign);
            }
            if !AdminRequest::owns(t) {
                assert_eq!(AdminRequest::decode(t, b"").err(), foreign);
            }
            if !MembershipRequest::owns(t) {
                assert_eq!(MembershipRequest::decode(t, b"").err(), foreign);
            }
            if !LayoutCommand::owns(t) {
                assert_eq!(LayoutCommand::decode(t, b"").err(), foreign);
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
            stored_end: 0,
            batches: b"abcdef",
        };
        let mut whole = Vec::new();
        Response::Fetched(f.clone()).encode(9, &mut whole);
        let prefix = f.encode_prefix();
        let header =
            frame_header_for_parts(FrameType::FetchResponse, 9, &[&prefix, b"abc", b"def"]);
        assert_eq!(&whole[..FRAME_HEADER_BYTES], &header);
    }
}
