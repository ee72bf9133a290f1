//! The two ports' request decoders (`BrokerPortRequest::decode`,
//! `ControlPortRequest::decode`) for a frame type chosen by the first byte,
//! over the rest as payload. A port refuses as `Foreign` exactly the types
//! it does not take; a decoded request must survive an encode/decode round
//! trip; and `BrokerPortRequest::decode_verified` (the one-pass produce
//! check) must agree with verifying the frame and validating the batch
//! separately.
#![no_main]

use kelp_wire::message::{BrokerPortRequest, ControlPortRequest, DataRequest};
use kelp_wire::{BatchView, DecodeError};
use libfuzzer_sys::fuzz_target;
use reencode::{reencode, typed_payload};

mod reencode;

fuzz_target!(|data: &[u8]| {
    let Some((frame_type, payload)) = typed_payload(data) else {
        return;
    };
    if !frame_type.is_request() {
        // Neither port takes a response frame.
        assert!(!BrokerPortRequest::owns(frame_type) && !ControlPortRequest::owns(frame_type));
    }

    let control = ControlPortRequest::decode(frame_type, payload);
    let foreign = matches!(control, Err(DecodeError::Foreign { .. }));
    assert_eq!(foreign, !ControlPortRequest::owns(frame_type));
    if let Ok(request) = control {
        assert_eq!(request.frame_type(), frame_type);
        let (_, again) = reencode(frame_type, payload, |id, out| request.encode(id, out));
        let decoded =
            ControlPortRequest::decode(frame_type, &again).expect("a re-encoded request decodes");
        assert_eq!(decoded, request);
    }

    let broker = BrokerPortRequest::decode(frame_type, payload);
    let foreign = matches!(broker, Err(DecodeError::Foreign { .. }));
    assert_eq!(foreign, !BrokerPortRequest::owns(frame_type));
    let Ok(request) = broker else {
        return;
    };
    assert_eq!(request.frame_type(), frame_type);
    let (header, again) = reencode(frame_type, payload, |id, out| request.encode(id, out));
    let decoded =
        BrokerPortRequest::decode(frame_type, &again).expect("a re-encoded request decodes");
    assert_eq!(decoded, request);

    let verified = BrokerPortRequest::decode_verified(&header, &again);
    match (&request, verified) {
        (BrokerPortRequest::Data(DataRequest::Produce { batch, .. }), Ok(v)) => {
            assert!(BatchView::validate(batch).is_ok());
            assert_eq!(v.batch.map(|b| b.bytes()), Some(*batch));
            assert_eq!(v.request, request);
        }
        (BrokerPortRequest::Data(DataRequest::Produce { batch, .. }), Err(_)) => {
            assert!(BatchView::validate(batch).is_err())
        }
        (_, v) => {
            let v = v.expect("a frame with its own checksum verifies");
            assert!(v.batch.is_none());
            assert_eq!(v.request, request);
        }
    }
    let mut wrong = header;
    wrong.checksum ^= 1;
    assert!(BrokerPortRequest::decode_verified(&wrong, &again).is_err());
});
