//! Golden frames: size prefix, request header v1/v2, response header v0/v1
//! (ApiVersions always v0), and the header-version rule for every API.

mod common;

use common::B;
use kelp_kafka::api::api_versions::ApiVersionsResponse;
use kelp_kafka::api::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use kelp_kafka::request::REQUEST_FRAME_BYTES_MAX;
use kelp_kafka::{
    decode_response, encode_response_frame, frame_size, ApiKey, DecodeError, Decoder, Request,
    RequestBody, RequestHeader, ResponseBody, ResponseHeader,
};

fn heartbeat() -> HeartbeatRequest {
    HeartbeatRequest {
        group_id: "g".into(),
        generation_id: 1,
        member_id: "m".into(),
        group_instance_id: None,
    }
}

fn framed(payload: Vec<u8>) -> Vec<u8> {
    B::new().i32(payload.len() as i32).raw(&payload).done()
}

#[test]
fn request_header_v1_frame() {
    // Heartbeat v3: not flexible, so request header v1.
    let expected = framed(
        B::new()
            .i16(12)
            .i16(3)
            .i32(7)
            .str("client")
            .str("g")
            .i32(1)
            .str("m")
            .null_str()
            .done(),
    );
    let request = Request::new(
        RequestBody::Heartbeat(heartbeat()),
        3,
        7,
        Some("client".into()),
    );
    let mut frame = Vec::new();
    request.encode_frame(&mut frame).expect("encode");
    assert_eq!(frame, expected);
    assert_eq!(Request::decode(&expected[4..]).expect("decode"), request);
}

#[test]
fn request_header_v2_frame_keeps_a_classic_client_id_and_skips_tags() {
    // Heartbeat v4: flexible, so request header v2: the client id is
    // still an INT16-prefixed nullable string, then a tag buffer.
    let body = B::new().cstr("g").i32(1).cstr("m").cnull().tags().done();
    let expected = framed(
        B::new()
            .i16(12)
            .i16(4)
            .i32(7)
            .null_str()
            .tags()
            .raw(&body)
            .done(),
    );
    let request = Request::new(RequestBody::Heartbeat(heartbeat()), 4, 7, None);
    let mut frame = Vec::new();
    request.encode_frame(&mut frame).expect("encode");
    assert_eq!(frame, expected);
    assert_eq!(Request::decode(&expected[4..]).expect("decode"), request);

    // An unknown tag in the header is skipped.
    let tagged = B::new()
        .i16(12)
        .i16(4)
        .i32(7)
        .null_str()
        .uvar(1)
        .uvar(5)
        .uvar(2)
        .raw(&[1, 2])
        .raw(&body)
        .done();
    assert_eq!(Request::decode(&tagged).expect("decode"), request);
}

#[test]
fn request_header_v0_decodes_without_client_id() {
    let bytes = B::new().i16(18).i16(0).i32(9).done();
    let header = RequestHeader::decode(&mut Decoder::new(&bytes), 0).expect("decode");
    assert_eq!(
        header,
        RequestHeader {
            api_key: 18,
            api_version: 0,
            correlation_id: 9,
            client_id: None
        }
    );
    let mut out = Vec::new();
    header.encode(&mut out, 0).expect("encode");
    assert_eq!(out, bytes);
}

#[test]
fn response_header_v0_and_v1_frames() {
    let body = ResponseBody::Heartbeat(HeartbeatResponse {
        throttle_time_ms: 0,
        error_code: 0,
    });
    let mut v3 = Vec::new();
    encode_response_frame(&mut v3, 7, 3, &body).expect("encode");
    assert_eq!(v3, framed(B::new().i32(7).i32(0).i16(0).done()));
    let mut v4 = Vec::new();
    encode_response_frame(&mut v4, 7, 4, &body).expect("encode");
    assert_eq!(
        v4,
        framed(B::new().i32(7).tags().i32(0).i16(0).tags().done())
    );
    let (header, decoded) = decode_response(&v4[4..], ApiKey::Heartbeat, 4).expect("decode");
    assert_eq!(header, ResponseHeader { correlation_id: 7 });
    assert_eq!(decoded, body);
}

#[test]
fn api_versions_v3_response_uses_header_v0() {
    let body = ResponseBody::ApiVersions(ApiVersionsResponse {
        error_code: 0,
        api_keys: vec![],
        throttle_time_ms: 0,
    });
    let mut frame = Vec::new();
    encode_response_frame(&mut frame, 5, 3, &body).expect("encode");
    // No tag byte after the correlation id; the body itself is flexible.
    assert_eq!(
        frame,
        framed(B::new().i32(5).i16(0).carr(0).i32(0).tags().done())
    );
}

#[test]
fn header_versions_follow_the_flexible_boundary_of_each_api() {
    for row in kelp_kafka::SUPPORTED_APIS {
        let key = row.api_key;
        for version in row.min..=row.max {
            let flexible = version >= row.flexible_min;
            assert_eq!(key.is_flexible(version), flexible);
            assert_eq!(
                key.request_header_version(version),
                if flexible { 2 } else { 1 }
            );
            let response = if flexible && key != ApiKey::ApiVersions {
                1
            } else {
                0
            };
            assert_eq!(
                key.response_header_version(version),
                response,
                "{key:?} v{version}"
            );
        }
        assert_eq!(ApiKey::from_code(key.code()), Some(key));
        assert_eq!(key.versions(), row);
    }
    // The boundaries from Kafka's message definitions.
    let boundaries = [
        (ApiKey::Produce, 9),
        (ApiKey::Fetch, 12),
        (ApiKey::ListOffsets, 6),
        (ApiKey::Metadata, 9),
        (ApiKey::OffsetCommit, 8),
        (ApiKey::OffsetFetch, 6),
        (ApiKey::FindCoordinator, 3),
        (ApiKey::JoinGroup, 6),
        (ApiKey::Heartbeat, 4),
        (ApiKey::LeaveGroup, 4),
        (ApiKey::SyncGroup, 4),
        (ApiKey::DescribeGroups, 5),
        (ApiKey::ListGroups, 3),
        (ApiKey::ApiVersions, 3),
        (ApiKey::CreateTopics, 5),
        (ApiKey::DeleteTopics, 4),
        (ApiKey::InitProducerId, 2),
        (ApiKey::DescribeConfigs, 4),
    ];
    for (key, first_flexible) in boundaries {
        assert!(!key.is_flexible(first_flexible - 1), "{key:?}");
        assert!(key.is_flexible(first_flexible), "{key:?}");
    }
    assert_eq!(ApiKey::from_code(99), None);
    assert_eq!(ApiKey::ALL.len(), kelp_kafka::SUPPORTED_APIS.len());
}

#[test]
fn frame_size_prefix() {
    assert_eq!(frame_size(&[0, 0, 0], REQUEST_FRAME_BYTES_MAX), Ok(None));
    assert_eq!(
        frame_size(&[0, 0, 1, 0, 9], REQUEST_FRAME_BYTES_MAX),
        Ok(Some(256))
    );
    assert_eq!(
        frame_size(&[0xff, 0xff, 0xff, 0xff], REQUEST_FRAME_BYTES_MAX),
        Err(DecodeError::FrameSize {
            size: -1,
            max_bytes: REQUEST_FRAME_BYTES_MAX
        })
    );
    assert!(frame_size(&[0x7f, 0xff, 0xff, 0xff], REQUEST_FRAME_BYTES_MAX).is_err());
    assert_eq!(frame_size(&[0, 0, 0, 100], 100), Ok(Some(100)));
    assert!(frame_size(&[0, 0, 0, 101], 100).is_err());
}
