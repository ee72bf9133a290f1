//! What both message targets share: how an input names a frame type, and
//! the check they make of a decoded message (encoded again, it is a
//! well-formed frame of the same type and length).

use kelp_wire::frame::{FrameHeader, FrameType, FRAME_HEADER_BYTES};

/// The frame type an input's first byte picks, and the rest as payload.
/// A real frame type byte is used as is, so seeds read naturally; any other
/// byte still picks one, so no input is wasted. `None` for an empty input.
pub fn typed_payload(data: &[u8]) -> Option<(FrameType, &[u8])> {
    let (&type_byte, payload) = data.split_first()?;
    let frame_type = FrameType::from_u8(type_byte)
        .unwrap_or(FrameType::ALL[usize::from(type_byte) % FrameType::ALL.len()]);
    Some((frame_type, payload))
}

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
