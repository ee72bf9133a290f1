//! Sample messages of every protocol, one or more of each kind: what the
//! round-trip tests beside the code and the fuzz crate's seed corpora
//! (`fuzz/examples/seeds.rs`) are made of. Built for tests and with the
//! `samples` feature only.

use crate::payload_ref::{PayloadId, PayloadRef};

use super::{
    AckMode, AdminRequest, AuthRequest, BrokerShards, BrokerStatus, DataRequest, ErrorCode,
    FetchChecks, FetchFrom, FetchRequest, Fetched, FollowerId, FollowerInfo, FollowerLag,
    LayoutCommand, MembershipRequest, Response, SegmentInfo, SegmentLoadReport, ShardAddress,
    Successors, TopicInfo,
};

/// Authentication steps, client to either port.
pub fn auth_requests() -> Vec<AuthRequest> {
    vec![
        AuthRequest::Authenticate {
            mechanism: "SCRAM-SHA-256".into(),
            message: "n,,n=user,r=rOprNGfwEbeRWgbNEkqO".into(),
        },
        AuthRequest::Authenticate {
            mechanism: "SCRAM-SHA-512".into(),
            message: "c=biws,r=abc,p=AAAA".into(),
        },
    ]
}

/// Data requests, client to broker.
pub fn data_requests() -> Vec<DataRequest<'static>> {
    vec![
        DataRequest::Shards,
        DataRequest::HeldLayout {
            topic: "ns/t".into(),
        },
        DataRequest::Produce {
            topic: "ns/t",
            segment: 3,
            ack: AckMode::Durable,
            batch: b"batch",
        },
        DataRequest::Fetch(FetchRequest {
            topic: "ns/t".into(),
            segment: 1,
            from: FetchFrom::Timestamp(-5),
            max_bytes: 1 << 20,
            max_wait_ms: 500,
            checks: FetchChecks::Trust,
            follower: None,
        }),
        DataRequest::Fetch(FetchRequest {
            topic: "a/b".into(),
            segment: 2,
            from: FetchFrom::Latest,
            max_bytes: 1,
            max_wait_ms: 0,
            checks: FetchChecks::Trust,
            follower: Some(FollowerId {
                broker: 7,
                shard: 3,
            }),
        }),
        DataRequest::InitProducer,
        DataRequest::PayloadWrite {
            topic: "ns/t".into(),
            id: PayloadId {
                created_ms: 5,
                nonce: u128::MAX - 3,
            },
            offset: 4 << 20,
            bytes: b"piece",
        },
        DataRequest::PayloadCommit {
            topic: "ns/t".into(),
            reference: PayloadRef {
                id: PayloadId {
                    created_ms: 5,
                    nonce: 6,
                },
                length: 7,
                checksum: 8,
            },
        },
        DataRequest::PayloadRead {
            topic: "ns/t".into(),
            id: PayloadId {
                created_ms: 9,
                nonce: 10,
            },
            offset: 11,
            max_bytes: 12,
        },
    ]
}

/// Admin requests.
pub fn admin_requests() -> Vec<AdminRequest> {
    vec![
        AdminRequest::ListTopics,
        AdminRequest::CreateTopic {
            topic: "ns/t".into(),
            segments: 4,
            replicas: 2,
        },
        AdminRequest::DeleteTopic {
            topic: "ns/t".into(),
        },
        AdminRequest::DescribeTopic {
            topic: "ns/t".into(),
        },
        AdminRequest::SplitSegment {
            topic: "ns/t".into(),
            segment: 3,
            pieces: 2,
        },
        AdminRequest::MergeSegments {
            topic: "ns/t".into(),
            a: 4,
            b: 5,
        },
        AdminRequest::MoveSegment {
            topic: "ns/t".into(),
            segment: 6,
            to: Some(2),
        },
        AdminRequest::MoveSegment {
            topic: "ns/t".into(),
            segment: 6,
            to: None,
        },
        AdminRequest::SetPolicy {
            topic: "ns/t".into(),
            policy: r#"{"target":{"bytes_per_s":1000}}"#.into(),
        },
        AdminRequest::ListBrokers,
    ]
}

/// A broker's requests to the control plane.
pub fn membership_requests() -> Vec<MembershipRequest> {
    vec![
        MembershipRequest::RegisterBroker {
            id: None,
            shards: vec![ShardAddress {
                tcp: "127.0.0.1:7420".into(),
                quic: "127.0.0.1:7420".into(),
            }],
            capacity_bytes_per_s: 1 << 30,
            capacity_records_per_s: 1 << 20,
        },
        MembershipRequest::LoadReport {
            broker: 3,
            segments: vec![SegmentLoadReport {
                topic: "ns/t".into(),
                segment: 1,
                bytes_per_s: 2,
                records_per_s: 3,
                next_offset: 4,
                first_append_ms: Some(5),
                lost_records: 6,
                followers: vec![FollowerLag {
                    broker: 7,
                    lag_ms: 8,
                }],
            }],
        },
        MembershipRequest::LeaveBroker { broker: 3 },
    ]
}

/// The control plane's commands to a broker.
pub fn layout_commands() -> Vec<LayoutCommand<'static>> {
    vec![
        LayoutCommand::ApplyLayout {
            topic_json: br#"{"name":"ns/t"}"#,
            owners: vec![
                BrokerShards {
                    broker: 2,
                    shards: vec![ShardAddress {
                        tcp: "127.0.0.2:9092".into(),
                        quic: "127.0.0.2:9093".into(),
                    }],
                },
                BrokerShards {
                    broker: 7,
                    shards: Vec::new(),
                },
            ],
        },
        LayoutCommand::DropTopic {
            topic: "ns/t".into(),
        },
        LayoutCommand::RefuseWrites {
            topic_json: br#"{"name":"ns/u"}"#,
            owners: vec![BrokerShards {
                broker: 4,
                shards: Vec::new(),
            }],
        },
    ]
}

/// Answers of every kind.
pub fn responses() -> Vec<Response<'static>> {
    vec![
        Response::Shards {
            shards: vec![ShardAddress {
                tcp: "127.0.0.1:7420".into(),
                quic: "127.0.0.1:7420".into(),
            }],
        },
        Response::Topic(TopicInfo {
            name: "ns/t".into(),
            segments: vec![SegmentInfo {
                id: 0,
                epoch: 1,
                start: 0,
                end: 1 << 32,
                sealed: false,
                shard: 1,
                next_offset: 99,
                appended_bytes: 12345,
                successors: vec![4, 5],
                lost_records: 17,
                followers: vec![
                    FollowerInfo {
                        broker: 3,
                        shard: 1,
                        in_sync: true,
                        address: Some(ShardAddress {
                            tcp: "127.0.0.3:7420".into(),
                            quic: "127.0.0.3:7420".into(),
                        }),
                    },
                    FollowerInfo {
                        broker: 4,
                        shard: 0,
                        in_sync: false,
                        address: None,
                    },
                ],
                ..SegmentInfo::default()
            }],
        }),
        Response::Topic(TopicInfo {
            name: "ns/t".into(),
            segments: vec![SegmentInfo {
                id: 7,
                epoch: 2,
                start: 5,
                end: 9,
                sealed: true,
                shard: 0,
                next_offset: 1,
                appended_bytes: 2,
                successors: vec![8],
                broker: Some(4),
                address: Some(ShardAddress {
                    tcp: "127.0.0.1:7500".into(),
                    quic: "127.0.0.1:7500".into(),
                }),
                bytes_per_s: 1000,
                records_per_s: 10,
                created_ms: 1_700_000_000_000,
                sealed_ms: Some(1_700_000_001_000),
                first_append_ms: Some(1_700_000_000_020),
                lost_records: 0,
                followers: Vec::new(),
            }],
        }),
        Response::Brokers {
            brokers: vec![BrokerStatus {
                id: 1,
                shards: vec![ShardAddress {
                    tcp: "127.0.0.1:7420".into(),
                    quic: "127.0.0.1:7420".into(),
                }],
                capacity_bytes_per_s: 100,
                capacity_records_per_s: 10,
                bytes_per_s: 50,
                records_per_s: 1,
                utilization_permille: 500,
                open_segments: 3,
                silent_ms: 400,
            }],
        },
        Response::Registered {
            id: 9,
            filer: "/var/lib/kelp/filer".into(),
        },
        Response::Authenticated {
            done: false,
            message: "r=abcdef,s=c2FsdA==,i=4096".into(),
        },
        Response::Authenticated {
            done: true,
            message: "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".into(),
        },
        Response::Done,
        Response::TopicList {
            topics: vec!["a/b".into(), "c/d".into()],
        },
        Response::Produced {
            segment: 2,
            base_offset: 1000,
            record_count: 10,
        },
        Response::Producer {
            producer_id: (1 << 62) | 7,
            epoch: 0,
        },
        Response::Fetched(Fetched {
            segment: 2,
            start_offset: 5,
            next_offset: 10,
            high_watermark: 12,
            sealed: false,
            stored_end: 8,
            batches: b"bytes",
        }),
        Response::PayloadBytes {
            length: 100,
            offset: 90,
            bytes: b"ten bytes!",
        },
        Response::Error {
            code: ErrorCode::NotOwner,
            message: "not mine".into(),
        },
        Response::Sealed {
            message: "segment 3 is sealed".into(),
            successors: Successors {
                layout_version: 5,
                segments: vec![
                    SegmentInfo {
                        id: 4,
                        epoch: 1,
                        start: 0,
                        end: 1 << 31,
                        shard: 1,
                        broker: Some(2),
                        address: Some(ShardAddress {
                            tcp: "127.0.0.2:9092".into(),
                            quic: "127.0.0.2:9093".into(),
                        }),
                        ..SegmentInfo::default()
                    },
                    SegmentInfo {
                        id: 5,
                        epoch: 1,
                        start: 1 << 31,
                        end: 1 << 32,
                        ..SegmentInfo::default()
                    },
                ],
            },
        },
    ]
}

/// Every sample request of every protocol as a whole frame, the `i`th
/// with request id `i`.
pub fn request_frames() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    encode_all(&mut frames, &auth_requests(), AuthRequest::encode);
    encode_all(&mut frames, &data_requests(), DataRequest::encode);
    encode_all(&mut frames, &admin_requests(), AdminRequest::encode);
    encode_all(
        &mut frames,
        &membership_requests(),
        MembershipRequest::encode,
    );
    encode_all(&mut frames, &layout_commands(), LayoutCommand::encode);
    frames
}

/// Every sample response as a whole frame, the `i`th with request id `i`.
pub fn response_frames() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    encode_all(&mut frames, &responses(), Response::encode);
    frames
}

/// Append each of `samples` to `frames` as a whole frame, its request id
/// its index in `frames`.
fn encode_all<T>(frames: &mut Vec<Vec<u8>>, samples: &[T], encode: impl Fn(&T, u32, &mut Vec<u8>)) {
    for sample in samples {
        let mut frame = Vec::new();
        encode(sample, frames.len() as u32, &mut frame);
        frames.push(frame);
    }
}
