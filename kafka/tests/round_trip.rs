//! Every API at every supported version: a populated request and response
//! survive encode -> decode -> encode byte for byte, as whole frames with
//! their headers; every truncation of a frame fails cleanly; and random
//! corruption never panics.

mod common;

use common::samples::{requests, responses};
use kelp_kafka::request::REQUEST_FRAME_BYTES_MAX;
use kelp_kafka::{
    decode_response, encode_response_frame, frame_size, ApiKey, Decoder, Request, RequestBody,
    ResponseBody, SUPPORTED_APIS,
};

const RECORDS: &[u8] = b"opaque record bytes";

#[test]
fn samples_cover_every_api() {
    let req: Vec<ApiKey> = requests(RECORDS).iter().map(|b| b.api_key()).collect();
    let resp: Vec<ApiKey> = responses(RECORDS).iter().map(|b| b.api_key()).collect();
    let all: Vec<ApiKey> = SUPPORTED_APIS.iter().map(|r| r.api_key).collect();
    assert_eq!(req, all);
    assert_eq!(resp, all);
}

const REQUEST_CORRELATION_ID: i32 = 0x0102_0304;
const RESPONSE_CORRELATION_ID: i32 = 77;

fn request_frame(body: &RequestBody<'_>, version: i16) -> Vec<u8> {
    let request = Request::new(
        body.clone(),
        version,
        REQUEST_CORRELATION_ID,
        Some("rt-client".into()),
    );
    let mut frame = Vec::new();
    request.encode_frame(&mut frame).expect("encode request");
    frame
}

fn response_frame(body: &ResponseBody<'_>, version: i16) -> Vec<u8> {
    let mut frame = Vec::new();
    encode_response_frame(&mut frame, RESPONSE_CORRELATION_ID, version, body)
        .expect("encode response");
    frame
}

/// Each of `bodies` framed by `frame` at every version of its API.
fn at_every_version<T>(
    bodies: &[T],
    api_key: impl Fn(&T) -> ApiKey,
    frame: impl Fn(&T, i16) -> Vec<u8>,
) -> Vec<(ApiKey, i16, Vec<u8>)> {
    let mut frames = Vec::new();
    for body in bodies {
        let key = api_key(body);
        let range = key.versions();
        for version in range.min..=range.max {
            frames.push((key, version, frame(body, version)));
        }
    }
    frames
}

/// Every sample request, framed at every version of its API.
fn request_frames() -> Vec<(ApiKey, i16, Vec<u8>)> {
    at_every_version(&requests(RECORDS), RequestBody::api_key, request_frame)
}

/// Every sample response, framed at every version of its API.
fn response_frames() -> Vec<(ApiKey, i16, Vec<u8>)> {
    at_every_version(&responses(RECORDS), ResponseBody::api_key, response_frame)
}

#[test]
fn every_request_round_trips_at_every_version() {
    for (api_key, version, frame) in request_frames() {
        let size = frame_size(&frame, REQUEST_FRAME_BYTES_MAX)
            .expect("size")
            .expect("complete prefix");
        assert_eq!(size, frame.len() - 4);
        let decoded =
            Request::decode(&frame[4..]).unwrap_or_else(|e| panic!("{api_key:?} v{version}: {e}"));
        assert_eq!(decoded.header.api_version, version);
        assert_eq!(decoded.header.correlation_id, REQUEST_CORRELATION_ID);
        assert_eq!(decoded.header.client_id.as_deref(), Some("rt-client"));
        assert_eq!(decoded.body.api_key(), api_key);
        let mut again = Vec::new();
        decoded.encode_frame(&mut again).expect("re-encode");
        assert_eq!(again, frame, "{api_key:?} v{version}");
    }
}

#[test]
fn every_response_round_trips_at_every_version() {
    for (api_key, version, frame) in response_frames() {
        let (header, decoded) = decode_response(&frame[4..], api_key, version)
            .unwrap_or_else(|e| panic!("{api_key:?} v{version}: {e}"));
        assert_eq!(header.correlation_id, RESPONSE_CORRELATION_ID);
        assert_eq!(
            response_frame(&decoded, version),
            frame,
            "{api_key:?} v{version}"
        );
    }
}

/// Resets the sample fields that Kafka removed before the API's highest
/// supported version, so the rest can be compared exactly.
fn without_removed_request_fields(mut body: RequestBody<'_>) -> RequestBody<'_> {
    match &mut body {
        // Metadata: include_cluster_authorized_operations is v8-v10 only.
        RequestBody::Metadata(m) => m.include_cluster_authorized_operations = false,
        // OffsetCommit: retention is v2-v4, commit timestamp v1 only.
        RequestBody::OffsetCommit(m) => {
            m.retention_time_ms = -1;
            for t in &mut m.topics {
                for p in &mut t.partitions {
                    p.commit_timestamp = -1;
                }
            }
        }
        _ => {}
    }
    body
}

fn without_removed_response_fields(mut body: ResponseBody<'_>) -> ResponseBody<'_> {
    match &mut body {
        // Metadata: cluster_authorized_operations is v8-v10 only.
        ResponseBody::Metadata(m) => m.cluster_authorized_operations = i32::MIN,
        // DescribeConfigs: is_default is v0 only.
        ResponseBody::DescribeConfigs(m) => {
            for r in &mut m.results {
                for c in &mut r.configs {
                    c.is_default = false;
                }
            }
        }
        _ => {}
    }
    body
}

#[test]
fn highest_versions_carry_every_current_field_of_the_sample() {
    for body in requests(RECORDS) {
        let version = body.api_key().versions().max;
        let frame = request_frame(&body, version);
        let decoded = Request::decode(&frame[4..]).expect("decode");
        let expected = without_removed_request_fields(body.clone());
        assert_eq!(decoded.body, expected, "{:?} v{version}", body.api_key());
    }
    for body in responses(RECORDS) {
        let api_key = body.api_key();
        let version = api_key.versions().max;
        let frame = response_frame(&body, version);
        let (_, decoded) = decode_response(&frame[4..], api_key, version).expect("decode");
        let expected = without_removed_response_fields(body.clone());
        assert_eq!(decoded, expected, "{api_key:?} v{version}");
    }
}

#[test]
fn every_truncated_frame_is_an_error() {
    for (api_key, version, frame) in request_frames() {
        let payload = &frame[4..];
        for cut in 0..payload.len() {
            assert!(
                Request::decode(&payload[..cut]).is_err(),
                "{api_key:?} v{version}: request cut at {cut} decoded"
            );
        }
    }
    for (api_key, version, frame) in response_frames() {
        let payload = &frame[4..];
        for cut in 0..payload.len() {
            assert!(
                decode_response(&payload[..cut], api_key, version).is_err(),
                "{api_key:?} v{version}: response cut at {cut} decoded"
            );
        }
    }
}

/// xorshift64*: a tiny deterministic generator, so a failure names a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn corrupted_frames_never_panic() {
    const SEED: u64 = 0x6b65_6c70;
    const MUTATIONS_PER_FRAME: usize = 200;
    let mut rng = Rng(SEED);
    let mut decoded_ok = 0usize;
    let mut rejected = 0usize;
    for (_, _, frame) in request_frames() {
        for _ in 0..MUTATIONS_PER_FRAME {
            let mut bad = frame[4..].to_vec();
            let flips = 1 + rng.below(3);
            for _ in 0..flips {
                let at = rng.below(bad.len());
                bad[at] = rng.next() as u8;
            }
            // Either outcome is fine; a panic fails the test (seed above).
            match Request::decode(&bad) {
                Ok(_) => decoded_ok += 1,
                Err(_) => rejected += 1,
            }
        }
    }
    assert!(rejected > 0, "seed {SEED:#x}: no corruption was rejected");
    assert!(decoded_ok + rejected > 0);
}

#[test]
fn huge_length_prefixes_are_rejected_before_allocating() {
    // A Metadata v1 request whose topics array claims i32::MAX entries, and
    // a v9 one whose compact array claims 2^32-2: both refused by length.
    let mut classic = vec![0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff];
    classic.extend_from_slice(&i32::MAX.to_be_bytes());
    let err = Request::decode(&classic).expect_err("huge array");
    assert!(
        matches!(err, kelp_kafka::DecodeError::InvalidLength { .. }),
        "{err}"
    );

    let mut flexible = vec![0, 3, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0];
    flexible.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    let err = Request::decode(&flexible).expect_err("huge compact array");
    assert!(
        matches!(err, kelp_kafka::DecodeError::InvalidLength { .. }),
        "{err}"
    );

    // A string claiming 32767 bytes with 3 left.
    let mut r = Decoder::new(&[0x7f, 0xff, b'a', b'b', b'c']);
    assert!(matches!(
        r.string(false),
        Err(kelp_kafka::DecodeError::InvalidLength { .. })
    ));
}

#[test]
fn unsupported_versions_and_unknown_keys_name_the_correlation_id() {
    let unsupported: [(&[u8], ApiKey, i16, i32); 2] = [
        // Produce v2 (legacy message sets) is below the supported range.
        (
            &[0, 0, 0, 2, 0, 0, 0, 42, 0xff, 0xff],
            ApiKey::Produce,
            2,
            42,
        ),
        // ApiVersions v9 (newer than supported): answerable with v0.
        (
            &[0, 18, 0, 9, 0, 0, 0, 43, 0xff, 0xff, 0],
            ApiKey::ApiVersions,
            9,
            43,
        ),
    ];
    for (frame, api_key, version, correlation_id) in unsupported {
        assert_eq!(
            Request::decode(frame),
            Err(kelp_kafka::DecodeError::UnsupportedVersion {
                api_key,
                version,
                correlation_id
            })
        );
    }
    // Api key 99 does not exist.
    let frame = [0, 99, 0, 0, 0, 0, 0, 44, 0xff, 0xff];
    assert_eq!(
        Request::decode(&frame),
        Err(kelp_kafka::DecodeError::UnknownApiKey {
            api_key: 99,
            correlation_id: 44
        })
    );
}

#[test]
fn trailing_bytes_after_a_request_are_an_error() {
    let body = &requests(RECORDS)[8]; // Heartbeat
    assert_eq!(body.api_key(), ApiKey::Heartbeat);
    let mut frame = request_frame(body, 4);
    frame.push(0);
    assert!(matches!(
        Request::decode(&frame[4..]),
        Err(kelp_kafka::DecodeError::TrailingBytes { count: 1, .. })
    ));
}

#[test]
fn a_flexible_response_read_as_non_flexible_fails() {
    let body = &responses(RECORDS)[8]; // Heartbeat
    let frame = response_frame(body, 4);
    assert!(decode_response(&frame[4..], ApiKey::Heartbeat, 4).is_ok());
    // Read as the non-flexible v3, the header has no tag byte, so the body
    // is off by one and the decoder notices the trailing byte.
    assert!(decode_response(&frame[4..], ApiKey::Heartbeat, 3).is_err());
}

#[test]
fn bytes_past_a_request_are_left_as_kafka_leaves_them() {
    // librdkafka's Metadata v12 for every topic: a 4-byte placeholder where
    // the 1-byte null compact array of topics belongs, then the request's
    // last three bytes (allow auto-creation, include authorized
    // operations, tagged fields), which are left over.
    let mut frame = vec![0, 3, 0, 12, 0, 0, 0, 7, 0xff, 0xff, 0];
    frame.extend_from_slice(&[0, 0, 0, 0]);
    frame.extend_from_slice(&[1, 0, 0]);
    let err = Request::decode(&frame).expect_err("strict");
    assert!(
        matches!(err, kelp_kafka::DecodeError::TrailingBytes { count: 3, .. }),
        "{err}"
    );
    let (request, trailing) = Request::decode_lenient(&frame).expect("lenient");
    assert_eq!(trailing, 3);
    assert_eq!(request.header.correlation_id, 7);
    let RequestBody::Metadata(metadata) = request.body else {
        panic!("{:?}", request.body)
    };
    assert_eq!(metadata.topics, None, "all topics");
    // A body cut short is still an error.
    assert!(Request::decode_lenient(&frame[..12]).is_err());
}
