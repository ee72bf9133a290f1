//! What each port takes: the requests of the protocols it serves, one
//! typed enum per port. Decoding a frame on a port whose protocols do not
//! own its type is `DecodeError::Foreign`, so a handler is only ever handed
//! messages it serves.
//!
//! | port | takes |
//! | --- | --- |
//! | a broker's (TCP, QUIC) | authentication ([`AuthRequest`]), data ([`DataRequest`]), admin ([`AdminRequest`]), the control plane's commands ([`LayoutCommand`]) |
//! | the control plane's | authentication ([`AuthRequest`]), admin ([`AdminRequest`]), the brokers' membership and load ([`MembershipRequest`]) |
//!
//! Both ports answer with [`Response`](super::Response) frames.

use crate::batch::BatchView;
use crate::error::DecodeError;
use crate::frame::{FrameHeader, FrameType};

use super::admin::AdminRequest;
use super::auth::AuthRequest;
use super::control::{LayoutCommand, MembershipRequest};
use super::data::DataRequest;

/// A request a broker port takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerPortRequest<'a> {
    Auth(AuthRequest),
    Data(DataRequest<'a>),
    Admin(AdminRequest),
    Command(LayoutCommand<'a>),
}

/// A request the control port takes. Every field is owned, so a decoded
/// request can cross to another thread as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlPortRequest {
    Auth(AuthRequest),
    Admin(AdminRequest),
    Membership(MembershipRequest),
}

/// A request whose frame checksum was verified, from
/// [`BrokerPortRequest::decode_verified`]; a produce request's batch comes
/// validated.
#[derive(Debug, Clone)]
pub struct VerifiedRequest<'a> {
    pub request: BrokerPortRequest<'a>,
    /// The validated batch of a produce request; `None` for every other.
    pub batch: Option<BatchView<'a>>,
}

impl<'a> BrokerPortRequest<'a> {
    /// Whether a broker port takes requests of `frame_type`.
    pub fn owns(frame_type: FrameType) -> bool {
        AuthRequest::owns(frame_type)
            || DataRequest::owns(frame_type)
            || AdminRequest::owns(frame_type)
            || LayoutCommand::owns(frame_type)
    }

    pub fn frame_type(&self) -> FrameType {
        match self {
            BrokerPortRequest::Auth(r) => r.frame_type(),
            BrokerPortRequest::Data(r) => r.frame_type(),
            BrokerPortRequest::Admin(r) => r.frame_type(),
            BrokerPortRequest::Command(r) => r.frame_type(),
        }
    }

    /// Append the whole frame (header and payload) to `out`.
    pub fn encode(&self, request_id: u32, out: &mut Vec<u8>) {
        match self {
            BrokerPortRequest::Auth(r) => r.encode(request_id, out),
            BrokerPortRequest::Data(r) => r.encode(request_id, out),
            BrokerPortRequest::Admin(r) => r.encode(request_id, out),
            BrokerPortRequest::Command(r) => r.encode(request_id, out),
        }
    }

    /// Decode a request payload whose frame header and checksum were
    /// verified. A frame type no broker port takes (a control-plane
    /// membership request, a response) is `Foreign`.
    pub fn decode(
        frame_type: FrameType,
        payload: &'a [u8],
    ) -> Result<BrokerPortRequest<'a>, DecodeError> {
        if AuthRequest::owns(frame_type) {
            AuthRequest::decode(frame_type, payload).map(BrokerPortRequest::Auth)
        } else if DataRequest::owns(frame_type) {
            DataRequest::decode(frame_type, payload).map(BrokerPortRequest::Data)
        } else if AdminRequest::owns(frame_type) {
            AdminRequest::decode(frame_type, payload).map(BrokerPortRequest::Admin)
        } else if LayoutCommand::owns(frame_type) {
            LayoutCommand::decode(frame_type, payload).map(BrokerPortRequest::Command)
        } else {
            Err(DecodeError::Foreign { frame_type })
        }
    }

    /// Verify a request frame's payload against `header` and decode it: the
    /// one entry point for bytes from a peer. A produce request's batch is
    /// validated here too, and its bytes are checksummed once for both the
    /// batch's checksum and the frame's (`FrameHeader::verify_split`); every
    /// other payload is checked whole, then decoded. The frame's checksum is
    /// always judged first, so a frame damaged in transit is reported as
    /// such, not as a bad batch or a foreign frame.
    pub fn decode_verified(
        header: &FrameHeader,
        payload: &'a [u8],
    ) -> Result<VerifiedRequest<'a>, DecodeError> {
        if header.frame_type == FrameType::ProduceRequest {
            let decoded = DataRequest::decode(header.frame_type, payload);
            if let Ok(request @ DataRequest::Produce { batch, .. }) = decoded {
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
                        request: BrokerPortRequest::Data(request),
                        batch: Some(view),
                    });
                }
            }
        }
        header.verify_payload(payload)?;
        let request = BrokerPortRequest::decode(header.frame_type, payload)?;
        let batch = match &request {
            BrokerPortRequest::Data(DataRequest::Produce { batch, .. }) => {
                Some(BatchView::validate(batch)?)
            }
            _ => None,
        };
        Ok(VerifiedRequest { request, batch })
    }
}

impl ControlPortRequest {
    /// Whether the control port takes requests of `frame_type`.
    pub fn owns(frame_type: FrameType) -> bool {
        AuthRequest::owns(frame_type)
            || AdminRequest::owns(frame_type)
            || MembershipRequest::owns(frame_type)
    }

    pub fn frame_type(&self) -> FrameType {
        match self {
            ControlPortRequest::Auth(r) => r.frame_type(),
            ControlPortRequest::Admin(r) => r.frame_type(),
            ControlPortRequest::Membership(r) => r.frame_type(),
        }
    }

    /// Append the whole frame (header and payload) to `out`.
    pub fn encode(&self, request_id: u32, out: &mut Vec<u8>) {
        match self {
            ControlPortRequest::Auth(r) => r.encode(request_id, out),
            ControlPortRequest::Admin(r) => r.encode(request_id, out),
            ControlPortRequest::Membership(r) => r.encode(request_id, out),
        }
    }

    /// Decode a request payload whose frame header and checksum were
    /// verified. A frame type the control port does not take (data, a
    /// broker command, a response) is `Foreign`.
    pub fn decode(
        frame_type: FrameType,
        payload: &[u8],
    ) -> Result<ControlPortRequest, DecodeError> {
        if AuthRequest::owns(frame_type) {
            AuthRequest::decode(frame_type, payload).map(ControlPortRequest::Auth)
        } else if AdminRequest::owns(frame_type) {
            AdminRequest::decode(frame_type, payload).map(ControlPortRequest::Admin)
        } else if MembershipRequest::owns(frame_type) {
            MembershipRequest::decode(frame_type, payload).map(ControlPortRequest::Membership)
        } else {
            Err(DecodeError::Foreign { frame_type })
        }
    }
}

impl<'a> From<DataRequest<'a>> for BrokerPortRequest<'a> {
    fn from(r: DataRequest<'a>) -> Self {
        BrokerPortRequest::Data(r)
    }
}

impl From<AdminRequest> for BrokerPortRequest<'_> {
    fn from(r: AdminRequest) -> Self {
        BrokerPortRequest::Admin(r)
    }
}

impl<'a> From<LayoutCommand<'a>> for BrokerPortRequest<'a> {
    fn from(r: LayoutCommand<'a>) -> Self {
        BrokerPortRequest::Command(r)
    }
}

impl From<AuthRequest> for BrokerPortRequest<'_> {
    fn from(r: AuthRequest) -> Self {
        BrokerPortRequest::Auth(r)
    }
}

impl From<AuthRequest> for ControlPortRequest {
    fn from(r: AuthRequest) -> Self {
        ControlPortRequest::Auth(r)
    }
}

impl From<AdminRequest> for ControlPortRequest {
    fn from(r: AdminRequest) -> Self {
        ControlPortRequest::Admin(r)
    }
}

impl From<MembershipRequest> for ControlPortRequest {
    fn from(r: MembershipRequest) -> Self {
        ControlPortRequest::Membership(r)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::frame::FRAME_HEADER_BYTES;
    use crate::message::samples;
    use crate::message::testing::{decode_frame, good_batch, produce_frame};

    fn verified(frame: &[u8]) -> Result<VerifiedRequest<'_>, DecodeError> {
        let h = FrameHeader::decode(frame[..FRAME_HEADER_BYTES].try_into().unwrap()).unwrap();
        BrokerPortRequest::decode_verified(&h, &frame[FRAME_HEADER_BYTES..])
    }

    /// One pass over a produce request's batch checks the frame's checksum
    /// and the batch's: a good frame gives the validated batch.
    #[test]
    fn a_produce_frame_is_verified_with_its_batch() {
        let batch = good_batch();
        let frame = produce_frame(&batch);
        let v = verified(&frame).unwrap();
        assert_eq!(v.batch.unwrap().bytes(), &batch[..]);
        assert!(matches!(
            v.request,
            BrokerPortRequest::Data(DataRequest::Produce { segment: 3, .. })
        ));
        // Every other request comes without a batch, verified whole.
        let mut out = Vec::new();
        AdminRequest::ListTopics.encode(1, &mut out);
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

    /// What a port made of a frame of `frame_type` (its request's frame
    /// type, or the error): the request when the port `takes` the type,
    /// `Foreign` naming it when not.
    fn assert_port_judged(
        decoded: Result<FrameType, DecodeError>,
        takes: bool,
        frame_type: FrameType,
    ) {
        match decoded {
            Ok(t) => assert!(takes && t == frame_type, "{frame_type:?}"),
            Err(e) => {
                assert!(!takes, "{e:?}");
                assert_eq!(e, DecodeError::Foreign { frame_type });
            }
        }
    }

    /// A frame of a protocol the port does not serve decodes as `Foreign`,
    /// naming its type, on either port; every frame of a protocol it
    /// serves decodes.
    #[test]
    fn a_foreign_frame_on_each_port_is_a_typed_error() {
        for frame in samples::request_frames() {
            let (h, payload) = decode_frame(&frame);
            let t = h.frame_type;
            let (broker, control) = (BrokerPortRequest::owns(t), ControlPortRequest::owns(t));
            // Some port takes every request; both take the admin and
            // authentication ones only.
            assert!(broker || control, "{t:?}");
            assert_eq!(
                broker && control,
                AdminRequest::owns(t) || AuthRequest::owns(t),
                "{t:?}"
            );
            let decoded = BrokerPortRequest::decode(t, payload).map(|r| r.frame_type());
            assert_port_judged(decoded, broker, t);
            let decoded = ControlPortRequest::decode(t, payload).map(|r| r.frame_type());
            assert_port_judged(decoded, control, t);
        }
        // Responses are no port's requests.
        for frame in samples::response_frames() {
            let (h, payload) = decode_frame(&frame);
            let foreign = Some(DecodeError::Foreign {
                frame_type: h.frame_type,
            });
            assert_eq!(
                BrokerPortRequest::decode(h.frame_type, payload).err(),
                foreign
            );
            assert_eq!(
                ControlPortRequest::decode(h.frame_type, payload).err(),
                foreign
            );
        }
    }

    /// The split by port, spelled out: what a broker refuses and what the
    /// control plane refuses.
    #[test]
    fn each_port_takes_its_protocols() {
        use FrameType as T;
        for t in [
            T::RegisterBrokerRequest,
            T::LoadReportRequest,
            T::LeaveBrokerRequest,
        ] {
            assert!(
                !BrokerPortRequest::owns(t) && ControlPortRequest::owns(t),
                "{t:?}"
            );
        }
        for t in [
            T::ProduceRequest,
            T::FetchRequest,
            T::ShardsRequest,
            T::ApplyLayoutRequest,
            T::RefuseWritesRequest,
        ] {
            assert!(
                BrokerPortRequest::owns(t) && !ControlPortRequest::owns(t),
                "{t:?}"
            );
        }
        for &t in AdminRequest::FRAME_TYPES {
            assert!(
                BrokerPortRequest::owns(t) && ControlPortRequest::owns(t),
                "{t:?}"
            );
        }
        // A broker's goodbye on a broker port, as bytes from a peer, through
        // the entry point that checks the frame first.
        let mut frame = Vec::new();
        ControlPortRequest::from(MembershipRequest::LeaveBroker { broker: 1 })
            .encode(5, &mut frame);
        let (h, payload) = decode_frame(&frame);
        assert!(matches!(
            BrokerPortRequest::decode_verified(&h, payload),
            Err(DecodeError::Foreign {
                frame_type: T::LeaveBrokerRequest
            })
        ));
    }
}
