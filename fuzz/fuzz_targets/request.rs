//! Request::decode for a frame type chosen by the first byte, over the rest
//! as payload; a decoded request must survive an encode/decode round trip,
//! and `Request::decode_verified` (the one-pass produce check) must agree
//! with verifying the frame and validating the batch separately.
#![no_main]

use kelp_wire::frame::{FrameHeader, FrameType, FRAME_HEADER_BYTES};
use kelp_wire::message::Request;
use kelp_wire::BatchView;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&type_byte, payload)) = data.split_first() else {
        return;
    };
    // A real frame type byte is used as is, so seeds read naturally; any
    // other byte still picks one, so no input is wasted.
    let frame_type = FrameType::from_u8(type_byte)
        .unwrap_or(FrameType::ALL[usize::from(type_byte) % FrameType::ALL.len()]);
    let Ok(request) = Request::decode(frame_type, payload) else {
        return;
    };
    assert!(frame_type.is_request());
    assert_eq!(request.frame_type(), frame_type);

    let mut frame = Vec::new();
    request.encode(0xDEAD_BEEF, &mut frame);
    let (head, again) = frame
        .split_first_chunk::<FRAME_HEADER_BYTES>()
        .expect("an encoded frame has a header");
    let header = FrameHeader::decode(head).expect("an encoded header decodes");
    header
        .verify_payload(again)
        .expect("an encoded payload verifies");
    assert_eq!(header.frame_type, frame_type);
    assert_eq!(header.request_id, 0xDEAD_BEEF);
    // Every field is fixed-size or length-prefixed, so the canonical
    // encoding is exactly as long as what was decoded.
    assert_eq!(again.len(), payload.len(), "{request:?}");
    let decoded = Request::decode(frame_type, again).expect("a re-encoded request decodes");
    assert_eq!(decoded, request);

    let verified = Request::decode_verified(&header, again);
    match (&request, verified) {
        (Request::Produce { batch, .. }, Ok(v)) => {
            assert!(BatchView::validate(batch).is_ok());
            assert_eq!(v.batch.map(|b| b.bytes()), Some(*batch));
            assert_eq!(v.request, request);
        }
        (Request::Produce { batch, .. }, Err(_)) => assert!(BatchView::validate(batch).is_err()),
        (_, v) => {
            let v = v.expect("a frame with its own checksum verifies");
            assert!(v.batch.is_none());
            assert_eq!(v.request, request);
        }
    }
    let mut wrong = header;
    wrong.checksum ^= 1;
    assert!(Request::decode_verified(&wrong, again).is_err());
});
