//! Response::decode for a frame type chosen by the first byte, over the rest
//! as payload; a decoded response must survive an encode/decode round trip.
#![no_main]

use kelp_wire::message::{ErrorCode, Response};
use libfuzzer_sys::fuzz_target;
use reencode::{reencode, typed_payload};

mod reencode;

fuzz_target!(|data: &[u8]| {
    let Some((frame_type, payload)) = typed_payload(data) else {
        return;
    };
    let Ok(response) = Response::decode(frame_type, payload) else {
        return;
    };
    assert!(!frame_type.is_request());
    assert_eq!(response.frame_type(), frame_type);
    if let Response::Error { code, .. } = &response {
        assert_eq!(ErrorCode::from_u16(code.to_u16()), *code);
    }

    let (_, again) = reencode(frame_type, payload, |id, out| response.encode(id, out));
    let decoded = Response::decode(frame_type, &again).expect("a re-encoded response decodes");
    assert_eq!(decoded, response);
});
