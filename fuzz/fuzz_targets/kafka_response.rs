//! kelp_kafka::decode_response (the client side: tests and tools read the
//! gateway's answers with it) for an API chosen by the first byte and a
//! version by the second, over the rest as a frame after its size prefix.
//! A decoded response re-encodes to a frame that decodes to the same
//! response, and encodes again to the same bytes.
#![no_main]

use kelp_kafka::request::FRAME_PREFIX_BYTES;
use kelp_kafka::{decode_response, encode_response_frame, ApiKey};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&[key_byte, version_byte], frame)) = data.split_first_chunk::<2>() else {
        return;
    };
    // A real api key and a supported version are used as they are, so seeds
    // read naturally; any other byte still picks one, so no input is wasted.
    let api_key = ApiKey::from_code(i16::from(key_byte))
        .unwrap_or(ApiKey::ALL[usize::from(key_byte) % ApiKey::ALL.len()]);
    let range = api_key.versions();
    let version = if api_key.supports(i16::from(version_byte)) {
        i16::from(version_byte)
    } else {
        range.min + i16::from(version_byte) % (range.max - range.min + 1)
    };

    let Ok((header, body)) = decode_response(frame, api_key, version) else {
        return;
    };
    assert_eq!(body.api_key(), api_key);

    let mut encoded = Vec::new();
    encode_response_frame(&mut encoded, header.correlation_id, version, &body)
        .expect("a decoded response encodes");
    let (header_again, body_again) =
        decode_response(&encoded[FRAME_PREFIX_BYTES..], api_key, version).unwrap_or_else(|e| {
            panic!("a re-encoded {api_key:?} v{version} response does not decode: {e}\n{body:?}")
        });
    assert_eq!(header_again, header);
    assert_eq!(body_again, body);
    let mut encoded_again = Vec::new();
    encode_response_frame(
        &mut encoded_again,
        header.correlation_id,
        version,
        &body_again,
    )
    .expect("a decoded response encodes");
    assert_eq!(encoded_again, encoded, "encoding is not canonical");
});
