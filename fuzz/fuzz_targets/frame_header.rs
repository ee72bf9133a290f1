//! FrameHeader::decode and verify_payload over arbitrary bytes: the first 16
//! are the header, the rest the payload.
#![no_main]

use kelp_wire::frame::{FrameHeader, FRAME_HEADER_BYTES};
use kelp_wire::message::frame_header_for_parts;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((head, payload)) = data.split_first_chunk::<FRAME_HEADER_BYTES>() else {
        return;
    };
    let Ok(header) = FrameHeader::decode(head) else {
        return;
    };
    // Every header field is significant: a decoded header re-encodes to the
    // same 16 bytes.
    assert_eq!(&header.encode(), head);
    if header.verify_payload(payload).is_err() {
        return;
    }
    assert_eq!(
        FrameHeader::for_payload(header.frame_type, header.request_id, payload),
        header
    );
    // Writing the payload in parts gives the same header.
    let split = payload.len() / 3;
    let parts: [&[u8]; 2] = [&payload[..split], &payload[split..]];
    assert_eq!(
        &frame_header_for_parts(header.frame_type, header.request_id, &parts),
        head
    );
});
