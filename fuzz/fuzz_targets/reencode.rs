//! The check both message targets make of a decoded message: encoded
//! again, it is a well-formed frame of the same type and length.

use kelp_wire::frame::{FrameHeader, FrameType, FRAME_HEADER_BYTES};

/// Encode a decoded message again (`encode`) and check the frame: its
/// header, and a payload exactly as long as the one decoded (every field is
/// fixed-size or length-prefixed, so the canonical encoding is as long).
/// Returns the header and the payload.
pub fn reencode(
    frame_type: FrameType,
    payload: &[u8],
    encode: impl FnOnce(u32, &mut Vec<u8>),
) -> (FrameHeader, Vec<u8>) {
    let mut frame = Vec::new();
    encode(0xDEAD_BEEF, &mut frame);
    let (head, again) = frame
        .split_first_chunk::<FRAME_HEADER_BYTES>()
        .expect("an encoded frame has a header");
    let header = FrameHeader::decode(head).expect("an encoded header decodes");
    header
        .verify_payload(again)
        .expect("an encoded payload verifies");
    assert_eq!(header.frame_type, frame_type);
    assert_eq!(header.request_id, 0xDEAD_BEEF);
    assert_eq!(again.len(), payload.len());
    (header, again.to_vec())
}
