//! Response::decode for a frame type chosen by the first byte, over the rest
//! as payload; a decoded response must survive an encode/decode round trip.
#![no_main]

use kelp_wire::frame::{FrameHeader, FrameType, FRAME_HEADER_BYTES};
use kelp_wire::message::{ErrorCode, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&type_byte, payload)) = data.split_first() else {
        return;
    };
    let frame_type = FrameType::from_u8(type_byte)
        .unwrap_or(FrameType::ALL[usize::from(type_byte) % FrameType::ALL.len()]);
    let Ok(response) = Response::decode(frame_type, payload) else {
        return;
    };
    assert!(!frame_type.is_request());
    assert_eq!(response.frame_type(), frame_type);
    if let Response::Error { code, .. } = &response {
        assert_eq!(ErrorCode::from_u16(code.to_u16()), *code);
    }

    let mut frame = Vec::new();
    response.encode(7, &mut frame);
    let (head, again) = frame
        .split_first_chunk::<FRAME_HEADER_BYTES>()
        .expect("an encoded frame has a header");
    let header = FrameHeader::decode(head).expect("an encoded header decodes");
    header
        .verify_payload(again)
        .expect("an encoded payload verifies");
    assert_eq!(header.frame_type, frame_type);
    assert_eq!(again.len(), payload.len(), "{response:?}");
    let decoded = Response::decode(frame_type, again).expect("a re-encoded response decodes");
    assert_eq!(decoded, response);
});
