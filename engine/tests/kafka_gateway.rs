//! The Kafka gateway of a broker started in this process, spoken to over
//! loopback TCP with kelp-kafka's request encoders and response decoders
//! as the client (and the wire crate for native requests).
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use kafka::api::api_versions::ApiVersionsRequest;
use kafka::api::create_topics::{CreatableTopic, CreateTopicsRequest};
use kafka::api::delete_topics::{DeleteTopicState, DeleteTopicsRequest};
use kafka::api::describe_configs::{DescribeConfigsRequest, DescribeConfigsResource};
use kafka::api::describe_groups::DescribeGroupsRequest;
use kafka::api::fetch::{FetchPartition, FetchRequest, FetchTopic};
use kafka::api::find_coordinator::FindCoordinatorRequest;
use kafka::api::heartbeat::HeartbeatRequest;
use kafka::api::init_producer_id::InitProducerIdRequest;
use kafka::api::join_group::{JoinGroupProtocol, JoinGroupRequest};
use kafka::api::leave_group::{LeaveGroupRequest, LeavingMember};
use kafka::api::list_groups::ListGroupsRequest;
use kafka::api::list_offsets::{ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic};
use kafka::api::metadata::{MetadataRequest, MetadataRequestTopic};
use kafka::api::offset_commit::{OffsetCommitPartition, OffsetCommitRequest, OffsetCommitTopic};
use kafka::api::offset_fetch::{OffsetFetchRequest, OffsetFetchTopic};
use kafka::api::produce::{ProducePartition, ProduceRequest, ProduceTopic};
use kafka::api::sync_group::{SyncGroupAssignment, SyncGroupRequest};
use kafka::error_code as k;
use kafka::{
    decode_response, encode_record_batch, ApiKey, Compression, Record, RecordBatchHeader,
    RecordBatches, RecordHeader, RecordHeaders, Request, RequestBody, ResponseBody, Uuid,
};
use kelp_engine::{Broker, BrokerConfig};
use support::port;
use wire::chunk::BatchWalk;
use wire::message::Fetched;
use wire::{AckMode, BatchBuilder, FetchFrom, Response};

use test_support::TestConn;

/// [`support::config`] with the Kafka gateway on any free loopback port.
fn config(dir: &std::path::Path, port: u16) -> BrokerConfig {
    BrokerConfig {
        kafka_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..support::config(dir, port)
    }
}

fn start(dir: &std::path::Path, port: u16) -> Broker {
    Broker::start(config(dir, port)).unwrap()
}

/// A broker with a Kafka gateway, started on fresh ports in a fresh data
/// dir: the dir (removed when dropped), the native port and the broker.
fn started() -> (tempfile::TempDir, u16, Broker) {
    let dir = tempfile::tempdir().unwrap();
    let port = port();
    let broker = start(dir.path(), port);
    (dir, port, broker)
}

/// A Kafka client connection.
struct Kafka {
    stream: TcpStream,
    next_id: i32,
    client_id: String,
}

impl Kafka {
    fn open(broker: &Broker) -> Kafka {
        Kafka::open_at(broker.kafka_address().unwrap(), "kafka-gateway-test")
    }

    /// A connection to `broker` that has created `topic` with
    /// `partitions` partitions.
    fn with_topic(broker: &Broker, topic: &str, partitions: i32) -> Kafka {
        let mut c = Kafka::open(broker);
        create_topic(&mut c, topic, partitions);
        c
    }

    fn open_at(addr: SocketAddr, client_id: &str) -> Kafka {
        Kafka {
            stream: TcpStream::connect(addr).unwrap(),
            next_id: 1,
            client_id: client_id.into(),
        }
    }

    fn send(&mut self, body: RequestBody<'_>, version: i16) -> i32 {
        let id = self.next_id;
        self.next_id += 1;
        let request = Request::new(body, version, id, Some(self.client_id.clone()));
        let mut out = Vec::new();
        request.encode_frame(&mut out).unwrap();
        self.stream.write_all(&out).unwrap();
        id
    }

    /// The response frame (after the size prefix), or `None` at EOF.
    fn read(&mut self) -> Option<Vec<u8>> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).ok()?;
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut frame).ok()?;
        Some(frame)
    }

    fn call(&mut self, body: RequestBody<'_>, version: i16) -> (ApiKey, i16, Vec<u8>) {
        let key = body.api_key();
        let id = self.send(body, version);
        let frame = self.read().unwrap();
        let (header, _) = decode_response(&frame, key, version).unwrap();
        assert_eq!(header.correlation_id, id);
        (key, version, frame)
    }
}

fn body(answer: &(ApiKey, i16, Vec<u8>)) -> ResponseBody<'_> {
    decode_response(&answer.2, answer.0, answer.1).unwrap().1
}

macro_rules! expect {
    ($answer:expr, $variant:ident) => {
        match body(&$answer) {
            ResponseBody::$variant(r) => r,
            other => panic!("expected {}, got {other:?}", stringify!($variant)),
        }
    };
}

fn create_topic(c: &mut Kafka, name: &str, partitions: i32) {
    let r = c.call(
        RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.into(),
                num_partitions: partitions,
                replication_factor: -1,
                assignments: Vec::new(),
                configs: Vec::new(),
            }],
            timeout_ms: 5000,
            validate_only: false,
        }),
        5,
    );
    let r = expect!(r, CreateTopics);
    assert_eq!(r.topics[0].error_code, k::NONE, "{:?}", r.topics[0]);
    assert_eq!(r.topics[0].num_partitions, partitions);
}

/// A record as a test writes and reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    offset: i64,
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    headers: Vec<(String, Vec<u8>)>,
}

fn records(n: usize, tag: &str) -> Vec<Rec> {
    (0..n)
        .map(|i| Rec {
            offset: 0,
            timestamp: 1_700_000_000_000 + i as i64 * 7,
            key: (i % 3 != 0).then(|| format!("key-{i}").into_bytes()),
            value: format!("{tag} value {i} {}", "x".repeat(i % 50)).into_bytes(),
            headers: (0..i % 3)
                .map(|h| (format!("h{h}"), format!("v{i}.{h}").into_bytes()))
                .collect(),
        })
        .collect()
}

/// A Kafka batch of `recs`, with the producer fields given.
fn kafka_batch(recs: &[Rec], codec: Compression, producer: (i64, i16, i32)) -> Vec<u8> {
    let headers: Vec<Vec<RecordHeader<'_>>> = recs
        .iter()
        .map(|r| {
            r.headers
                .iter()
                .map(|(k, v)| RecordHeader {
                    key: k,
                    value: Some(v),
                })
                .collect()
        })
        .collect();
    let base = recs[0].timestamp;
    let list: Vec<Record<'_>> = recs
        .iter()
        .zip(&headers)
        .enumerate()
        .map(|(i, (r, h))| Record {
            attributes: 0,
            timestamp_delta: r.timestamp - base,
            offset_delta: i as i32,
            key: r.key.as_deref(),
            value: Some(&r.value),
            headers: RecordHeaders::List(h),
        })
        .collect();
    let max = recs.last().unwrap().timestamp;
    encode_batch(&list, (base, max), codec, producer)
}

/// A Kafka batch of `list`, whose timestamps run from `timestamps.0` (the
/// base its deltas count from) to `timestamps.1`, with the producer fields
/// given.
fn encode_batch(
    list: &[Record<'_>],
    timestamps: (i64, i64),
    codec: Compression,
    producer: (i64, i16, i32),
) -> Vec<u8> {
    let header = RecordBatchHeader {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: 0,
        last_offset_delta: 0,
        base_timestamp: timestamps.0,
        max_timestamp: timestamps.1,
        producer_id: producer.0,
        producer_epoch: producer.1,
        base_sequence: producer.2,
        record_count: list.len() as i32,
    };
    let mut out = Vec::new();
    encode_record_batch(&mut out, &header, list, codec, &mut Vec::new()).unwrap();
    out
}

/// ListOffsets (v7) of one partition at `timestamp`, which must succeed:
/// the (offset, timestamp) answered.
fn list_offset(c: &mut Kafka, topic: &str, partition: i32, timestamp: i64) -> (i64, i64) {
    let r = c.call(
        RequestBody::ListOffsets(ListOffsetsRequest {
            replica_id: -1,
            isolation_level: 0,
            topics: vec![ListOffsetsTopic {
                name: topic.into(),
                partitions: vec![ListOffsetsPartition {
                    partition_index: partition,
                    current_leader_epoch: -1,
                    timestamp,
                }],
            }],
        }),
        7,
    );
    let r = expect!(r, ListOffsets);
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, k::NONE, "partition {partition}, {timestamp}");
    (p.offset, p.timestamp)
}

fn produce_request<'a>(topic: &str, partition: i32, batch: &'a [u8], acks: i16) -> RequestBody<'a> {
    RequestBody::Produce(ProduceRequest {
        transactional_id: None,
        acks,
        timeout_ms: 5000,
        topics: vec![ProduceTopic {
            name: topic.into(),
            partitions: vec![ProducePartition {
                index: partition,
                records: Some(batch),
            }],
        }],
    })
}

/// Produce one batch to `topic`/`partition`; the partition's error code
/// and base offset.
fn produce(c: &mut Kafka, topic: &str, partition: i32, batch: &[u8], acks: i16) -> (i16, i64) {
    let r = c.call(produce_request(topic, partition, batch, acks), 9);
    let r = expect!(r, Produce);
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.base_offset)
}

/// A Metadata request for `names`, creating missing topics when `auto`.
/// Produce `recs` as one batch compressed with `codec`, from no
/// idempotent producer; the answer's error code and base offset.
fn produce_records(
    c: &mut Kafka,
    topic: &str,
    partition: i32,
    recs: &[Rec],
    codec: Compression,
    acks: i16,
) -> (i16, i64) {
    let batch = kafka_batch(recs, codec, (-1, -1, -1));
    produce(c, topic, partition, &batch, acks)
}

/// An InitProducerId for a new idempotent (not transactional) producer.
fn new_producer_id_request() -> RequestBody<'static> {
    RequestBody::InitProducerId(InitProducerIdRequest {
        transactional_id: None,
        transaction_timeout_ms: 60_000,
        producer_id: -1,
        producer_epoch: -1,
    })
}

fn metadata_request(names: &[&str], auto: bool) -> RequestBody<'static> {
    RequestBody::Metadata(MetadataRequest {
        topics: Some(
            names
                .iter()
                .map(|n| MetadataRequestTopic {
                    topic_id: Uuid::ZERO,
                    name: Some((*n).into()),
                })
                .collect(),
        ),
        allow_auto_topic_creation: auto,
        include_cluster_authorized_operations: false,
        include_topic_authorized_operations: false,
    })
}

fn fetch_request(topic: &str, partition: i32, offset: i64, wait_ms: i32) -> RequestBody<'static> {
    RequestBody::Fetch(FetchRequest {
        replica_id: -1,
        max_wait_ms: wait_ms,
        min_bytes: 1,
        max_bytes: 50 << 20,
        isolation_level: 0,
        session_id: 0,
        session_epoch: -1,
        topics: vec![FetchTopic {
            topic: topic.into(),
            partitions: vec![FetchPartition {
                partition,
                current_leader_epoch: -1,
                fetch_offset: offset,
                last_fetched_epoch: -1,
                log_start_offset: -1,
                partition_max_bytes: 1 << 20,
            }],
        }],
        forgotten_topics_data: Vec::new(),
        rack_id: String::new(),
    })
}

/// Every record of `topic`/`partition` from offset 0, read with Fetch v12.
fn fetch_all(c: &mut Kafka, topic: &str, partition: i32) -> Vec<Rec> {
    let mut out = Vec::new();
    loop {
        let next = out.last().map_or(0, |r: &Rec| r.offset + 1);
        let r = c.call(fetch_request(topic, partition, next, 0), 12);
        let r = expect!(r, Fetch);
        let p = &r.topics[0].partitions[0];
        assert_eq!(p.error_code, k::NONE);
        let before = out.len();
        let mut scratch = Vec::new();
        for batch in RecordBatches::new(p.records.unwrap_or_default()) {
            let batch = batch.unwrap();
            for rec in batch.records(&mut scratch, 1 << 26).unwrap() {
                let rec = rec.unwrap();
                let offset = batch.header.base_offset + i64::from(rec.offset_delta);
                if offset < next {
                    continue;
                }
                out.push(Rec {
                    offset,
                    timestamp: batch.header.base_timestamp + rec.timestamp_delta,
                    key: rec.key.map(<[u8]>::to_vec),
                    value: rec.value.unwrap().to_vec(),
                    headers: rec
                        .headers
                        .iter()
                        .map(|h| (h.key.to_string(), h.value.unwrap().to_vec()))
                        .collect(),
                });
            }
        }
        if out.len() == before || out.last().unwrap().offset + 1 >= p.high_watermark {
            return out;
        }
    }
}

fn with_offsets(mut recs: Vec<Rec>, first: i64) -> Vec<Rec> {
    for (i, r) in recs.iter_mut().enumerate() {
        r.offset = first + i as i64;
    }
    recs
}

#[test]
fn every_codec_round_trips_records_keys_values_headers_and_timestamps() {
    let (_dir, _, broker) = started();
    let mut c = Kafka::with_topic(&broker, "codecs", 2);
    let mut expected = Vec::new();
    for (i, codec) in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ]
    .into_iter()
    .enumerate()
    {
        let recs = records(20 + i, &format!("{codec:?}"));
        let (error, base) = produce_records(&mut c, "codecs", 1, &recs, codec, 1);
        assert_eq!(error, k::NONE, "{codec:?}");
        assert_eq!(base, expected.len() as i64, "{codec:?}");
        expected.extend(with_offsets(recs, base));
    }
    assert_eq!(fetch_all(&mut c, "codecs", 1), expected);
    assert!(fetch_all(&mut c, "codecs", 0).is_empty());
    broker.stop().unwrap();
}

#[test]
fn every_api_answers() {
    let (_dir, _, broker) = started();
    let addr = broker.kafka_address().unwrap();
    let mut c = Kafka::open(&broker);

    let r = c.call(RequestBody::ApiVersions(ApiVersionsRequest::default()), 3);
    let r = expect!(r, ApiVersions);
    assert_eq!(r.error_code, k::NONE);
    assert_eq!(r.api_keys.len(), kafka::SUPPORTED_APIS.len());

    create_topic(&mut c, "apis", 3);
    // Creating it again is refused.
    let r = c.call(
        RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: "apis".into(),
                num_partitions: 1,
                replication_factor: 1,
                assignments: Vec::new(),
                configs: Vec::new(),
            }],
            timeout_ms: 5000,
            validate_only: false,
        }),
        7,
    );
    assert_eq!(
        expect!(r, CreateTopics).topics[0].error_code,
        k::TOPIC_ALREADY_EXISTS
    );
    // The broker's default replication factor (-1) is one copy on a lone
    // broker; more copies than live brokers, or a factor out of range, are
    // refused as Kafka refuses them, and nothing is created.
    let create = |name: &str, replication_factor: i16| {
        RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.into(),
                num_partitions: 1,
                replication_factor,
                assignments: Vec::new(),
                configs: Vec::new(),
            }],
            timeout_ms: 5000,
            validate_only: false,
        })
    };
    let r = c.call(create("one-copy", -1), 7);
    let t = &expect!(r, CreateTopics).topics[0];
    assert_eq!((t.error_code, t.replication_factor), (k::NONE, 1), "{t:?}");
    for (name, rf) in [("three-copies", 3), ("no-copy", 0), ("six-copies", 6)] {
        let r = c.call(create(name, rf), 7);
        let t = &expect!(r, CreateTopics).topics[0];
        assert_eq!(t.error_code, k::INVALID_REPLICATION_FACTOR, "{t:?}");
        assert_eq!(t.replication_factor, -1);
        assert!(t.error_message.as_ref().is_some_and(|m| !m.is_empty()));
    }
    let r = c.call(metadata_request(&["three-copies"], false), 8);
    assert_eq!(
        expect!(r, Metadata).topics[0].error_code,
        k::UNKNOWN_TOPIC_OR_PARTITION,
        "a refused creation creates nothing"
    );

    let r = c.call(metadata_request(&["apis", "missing"], false), 9);
    let m = expect!(r, Metadata);
    assert_eq!(m.brokers.len(), 1);
    assert_eq!(m.brokers[0].port, i32::from(addr.port()));
    assert_eq!(m.topics[0].error_code, k::NONE);
    assert_eq!(m.topics[0].partitions.len(), 3);
    assert_eq!(m.topics[1].error_code, k::UNKNOWN_TOPIC_OR_PARTITION);
    let r = c.call(metadata_request(&["auto"], true), 12);
    let m = expect!(r, Metadata);
    assert_eq!(m.topics[0].error_code, k::NONE);
    assert_eq!(m.topics[0].partitions.len(), 1);

    let recs = records(10, "apis");
    let (e, base) = produce_records(&mut c, "apis", 2, &recs, Compression::None, -1);
    assert_eq!((e, base), (k::NONE, 0));
    let (e, _) = produce_records(&mut c, "apis", 7, &recs, Compression::None, 1);
    assert_eq!(e, k::UNKNOWN_TOPIC_OR_PARTITION);
    // Fetch v4 (oldest) and a fetch past the end.
    let r = c.call(fetch_request("apis", 2, 0, 0), 4);
    assert_eq!(expect!(r, Fetch).topics[0].partitions[0].high_watermark, 10);
    let r = c.call(fetch_request("apis", 2, 11, 0), 12);
    assert_eq!(
        expect!(r, Fetch).topics[0].partitions[0].error_code,
        k::OFFSET_OUT_OF_RANGE
    );

    // Partition 0: the largest timestamp is mid-partition, twice (the
    // first is the answer); partition 1 is empty.
    let mut out_of_order = records(5, "max");
    for (r, delta) in out_of_order.iter_mut().zip([0, 900, 5, 900, 10]) {
        r.timestamp = 1_700_000_000_000 + delta;
    }
    let (e, _) = produce_records(&mut c, "apis", 0, &out_of_order, Compression::None, -1);
    assert_eq!(e, k::NONE);
    for (partition, timestamp, offset, found) in [
        (2, -2, 0, -1),
        (2, -1, 10, -1),
        (2, recs[4].timestamp, 4, recs[4].timestamp),
        (2, i64::MAX / 2, -1, -1),
        (2, -3, 9, recs[9].timestamp),
        (0, -3, 1, 1_700_000_000_900),
        (1, -3, -1, -1),
    ] {
        assert_eq!(
            list_offset(&mut c, "apis", partition, timestamp),
            (offset, found),
            "partition {partition}, timestamp {timestamp}"
        );
    }
    // A larger timestamp only in the partition's buffers (acks=1): found
    // there, ahead of the chunks'.
    let mut buffered = records(2, "max-buffered");
    buffered[0].timestamp = 1_700_000_000_950;
    buffered[1].timestamp = 1_700_000_000_100;
    let (e, base) = produce_records(&mut c, "apis", 0, &buffered, Compression::None, 1);
    assert_eq!((e, base), (k::NONE, 5));
    assert_eq!(list_offset(&mut c, "apis", 0, -3), (5, 1_700_000_000_950));

    let r = c.call(
        RequestBody::FindCoordinator(FindCoordinatorRequest {
            key_type: 0,
            coordinator_keys: vec!["g".into()],
        }),
        4,
    );
    let f = expect!(r, FindCoordinator);
    assert_eq!(f.coordinators[0].port, i32::from(addr.port()));
    assert_eq!(f.coordinators[0].error_code, k::NONE);

    let r = c.call(new_producer_id_request(), 4);
    let p = expect!(r, InitProducerId);
    assert_eq!((p.error_code, p.producer_epoch), (k::NONE, 0));

    let r = c.call(
        RequestBody::DescribeConfigs(DescribeConfigsRequest {
            resources: vec![DescribeConfigsResource {
                resource_type: 2,
                resource_name: "apis".into(),
                configuration_keys: Some(vec!["cleanup.policy".into()]),
            }],
            include_synonyms: false,
            include_documentation: false,
        }),
        4,
    );
    let d = expect!(r, DescribeConfigs);
    assert_eq!(d.results[0].error_code, k::NONE);
    assert_eq!(d.results[0].configs.len(), 1);
    assert_eq!(d.results[0].configs[0].value.as_deref(), Some("delete"));
    // Its Kafka type (LIST) and source (the default).
    assert_eq!(
        (
            d.results[0].configs[0].config_type,
            d.results[0].configs[0].config_source
        ),
        (7, 5)
    );

    // A group of one: join (member id required first), sync, heartbeat,
    // commit, fetch, describe, list, leave.
    let member = join_until_member(&mut c, "solo", "");
    let r = c.call(join_request("solo", &member), 5);
    let j = expect!(r, JoinGroup);
    assert_eq!(j.error_code, k::NONE);
    assert_eq!(j.leader, member);
    let generation = j.generation_id;
    let r = c.call(
        sync_request(
            "solo",
            generation,
            &member,
            vec![(member.clone(), b"all".to_vec())],
        ),
        5,
    );
    assert_eq!(expect!(r, SyncGroup).assignment, b"all");
    let r = c.call(
        RequestBody::Heartbeat(HeartbeatRequest {
            group_id: "solo".into(),
            generation_id: generation,
            member_id: member.clone(),
            group_instance_id: None,
        }),
        4,
    );
    assert_eq!(expect!(r, Heartbeat).error_code, k::NONE);
    assert_eq!(
        commit(&mut c, "solo", generation, &member, "apis", 2, 7),
        k::NONE
    );
    assert_eq!(committed(&mut c, "solo", "apis", 2), 7);
    let r = c.call(
        RequestBody::DescribeGroups(DescribeGroupsRequest {
            groups: vec!["solo".into()],
            include_authorized_operations: false,
        }),
        5,
    );
    let d = expect!(r, DescribeGroups);
    assert_eq!(d.groups[0].group_state, "Stable");
    assert_eq!(d.groups[0].members.len(), 1);
    let r = c.call(RequestBody::ListGroups(ListGroupsRequest::default()), 4);
    assert!(expect!(r, ListGroups)
        .groups
        .iter()
        .any(|g| g.group_id == "solo"));
    for version in [1, 3, 5] {
        let r = c.call(
            RequestBody::LeaveGroup(LeaveGroupRequest {
                group_id: "solo".into(),
                members: vec![LeavingMember {
                    member_id: member.clone(),
                    group_instance_id: None,
                    reason: None,
                }],
            }),
            version,
        );
        let l = expect!(r, LeaveGroup);
        if version == 1 {
            assert_eq!(l.error_code, k::NONE);
        } else {
            // Already gone: the member's own error.
            assert_eq!(l.members[0].error_code, k::UNKNOWN_MEMBER_ID, "v{version}");
        }
    }

    let r = c.call(
        RequestBody::DeleteTopics(DeleteTopicsRequest {
            topics: vec![DeleteTopicState {
                name: Some("apis".into()),
                topic_id: Uuid::ZERO,
            }],
            timeout_ms: 5000,
        }),
        6,
    );
    assert_eq!(expect!(r, DeleteTopics).responses[0].error_code, k::NONE);
    let r = c.call(metadata_request(&["apis"], false), 9);
    assert_eq!(
        expect!(r, Metadata).topics[0].error_code,
        k::UNKNOWN_TOPIC_OR_PARTITION
    );
    broker.stop().unwrap();
}

fn join_request(group: &str, member: &str) -> RequestBody<'static> {
    join_request_timing(group, member, 10_000)
}

/// A JoinGroup whose session and rebalance timeouts are both `timeout_ms`.
fn join_request_timing(group: &str, member: &str, timeout_ms: i32) -> RequestBody<'static> {
    RequestBody::JoinGroup(JoinGroupRequest {
        group_id: group.into(),
        session_timeout_ms: timeout_ms,
        rebalance_timeout_ms: timeout_ms,
        member_id: member.into(),
        group_instance_id: None,
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupProtocol {
            name: "range".into(),
            metadata: b"meta".to_vec(),
        }],
        reason: None,
    })
}

fn sync_request(
    group: &str,
    generation: i32,
    member: &str,
    assignments: Vec<(String, Vec<u8>)>,
) -> RequestBody<'static> {
    RequestBody::SyncGroup(SyncGroupRequest {
        group_id: group.into(),
        generation_id: generation,
        member_id: member.into(),
        group_instance_id: None,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments: assignments
            .into_iter()
            .map(|(member_id, assignment)| SyncGroupAssignment {
                member_id,
                assignment,
            })
            .collect(),
    })
}

/// A first JoinGroup v5 is answered MEMBER_ID_REQUIRED with the id to use.
fn join_until_member(c: &mut Kafka, group: &str, member: &str) -> String {
    let r = c.call(join_request(group, member), 5);
    let j = expect!(r, JoinGroup);
    assert_eq!(j.error_code, k::MEMBER_ID_REQUIRED);
    assert!(!j.member_id.is_empty());
    j.member_id
}

fn commit(
    c: &mut Kafka,
    group: &str,
    generation: i32,
    member: &str,
    topic: &str,
    partition: i32,
    offset: i64,
) -> i16 {
    let r = c.call(
        RequestBody::OffsetCommit(OffsetCommitRequest {
            group_id: group.into(),
            generation_id: generation,
            member_id: member.into(),
            group_instance_id: None,
            retention_time_ms: -1,
            topics: vec![OffsetCommitTopic {
                name: topic.into(),
                partitions: vec![OffsetCommitPartition {
                    partition_index: partition,
                    committed_offset: offset,
                    committed_leader_epoch: -1,
                    commit_timestamp: -1,
                    committed_metadata: Some("m".into()),
                }],
            }],
        }),
        8,
    );
    expect!(r, OffsetCommit).topics[0].partitions[0].error_code
}

fn committed(c: &mut Kafka, group: &str, topic: &str, partition: i32) -> i64 {
    let r = c.call(
        RequestBody::OffsetFetch(OffsetFetchRequest {
            group_id: group.into(),
            topics: Some(vec![OffsetFetchTopic {
                name: topic.into(),
                partition_indexes: vec![partition],
            }]),
            require_stable: false,
        }),
        7,
    );
    let f = expect!(r, OffsetFetch);
    assert_eq!(f.error_code, k::NONE);
    f.topics[0].partitions[0].committed_offset
}

#[test]
fn deleted_groups_lose_their_offsets_for_good_and_the_cluster_is_described() {
    use kafka::api::delete_groups::DeleteGroupsRequest;
    use kafka::api::describe_cluster::DescribeClusterRequest;
    let (dir, port, broker) = started();
    let mut c = Kafka::with_topic(&broker, "dg", 1);
    // A simple consumer's commit (no member), and a group with a member.
    assert_eq!(commit(&mut c, "simple", -1, "", "dg", 0, 5), k::NONE);
    assert_eq!(committed(&mut c, "simple", "dg", 0), 5);
    let member = join_until_member(&mut c, "busy", "");
    let r = c.call(join_request("busy", &member), 5);
    assert_eq!(expect!(r, JoinGroup).error_code, k::NONE);

    let names = ["simple", "busy", "nobody"];
    let r = c.call(
        RequestBody::DeleteGroups(DeleteGroupsRequest {
            groups_names: names.iter().map(|n| n.to_string()).collect(),
        }),
        2,
    );
    let results: Vec<(String, i16)> = expect!(r, DeleteGroups)
        .results
        .into_iter()
        .map(|r| (r.group_id, r.error_code))
        .collect();
    assert_eq!(
        results,
        [
            ("simple".to_string(), k::NONE),
            ("busy".to_string(), k::NON_EMPTY_GROUP),
            ("nobody".to_string(), k::GROUP_ID_NOT_FOUND),
        ]
    );
    assert_eq!(committed(&mut c, "simple", "dg", 0), -1, "offsets deleted");
    drop(c);
    broker.stop().unwrap();
    // Gone from the filer too: a restart does not bring them back.
    let broker = start(dir.path(), port);
    let mut c = Kafka::open(&broker);
    assert_eq!(committed(&mut c, "simple", "dg", 0), -1, "after a restart");

    // OffsetDelete: a member subscribed to "dg" keeps that topic's
    // offsets; others go; once the group is empty, all may go.
    use kafka::api::offset_delete::{
        OffsetDeleteRequest, OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
    };
    let mut c2 = Kafka::with_topic(&broker, "other", 1);
    assert_eq!(commit(&mut c2, "sub", -1, "", "dg", 0, 3), k::NONE);
    assert_eq!(commit(&mut c2, "sub", -1, "", "other", 0, 4), k::NONE);
    let mut subscription = 1i16.to_be_bytes().to_vec();
    subscription.extend(1i32.to_be_bytes());
    subscription.extend(2i16.to_be_bytes());
    subscription.extend(b"dg");
    subscription.extend((-1i32).to_be_bytes());
    subscription.extend(0i32.to_be_bytes());
    let member = join_until_member(&mut c2, "sub", "");
    let mut join = join_request("sub", &member);
    if let RequestBody::JoinGroup(j) = &mut join {
        j.protocols[0].metadata = subscription;
    }
    let r = c2.call(join, 5);
    assert_eq!(expect!(r, JoinGroup).error_code, k::NONE);
    let delete_offsets = |c: &mut Kafka, group: &str| {
        let r = c.call(
            RequestBody::OffsetDelete(OffsetDeleteRequest {
                group_id: group.into(),
                topics: ["dg", "other"]
                    .iter()
                    .map(|t| OffsetDeleteRequestTopic {
                        name: t.to_string(),
                        partitions: vec![OffsetDeleteRequestPartition { partition_index: 0 }],
                    })
                    .collect(),
            }),
            0,
        );
        let d = expect!(r, OffsetDelete);
        let partitions: Vec<i16> = d
            .topics
            .iter()
            .map(|t| t.partitions[0].error_code)
            .collect();
        (d.error_code, partitions)
    };
    assert_eq!(
        delete_offsets(&mut c2, "sub"),
        (k::NONE, vec![k::GROUP_SUBSCRIBED_TO_TOPIC, k::NONE])
    );
    assert_eq!(committed(&mut c2, "sub", "dg", 0), 3);
    assert_eq!(committed(&mut c2, "sub", "other", 0), -1);
    assert_eq!(
        delete_offsets(&mut c2, "nobody"),
        (k::GROUP_ID_NOT_FOUND, vec![])
    );
    let r = c2.call(
        RequestBody::LeaveGroup(LeaveGroupRequest {
            group_id: "sub".into(),
            members: vec![LeavingMember {
                member_id: member,
                group_instance_id: None,
                reason: None,
            }],
        }),
        3,
    );
    assert_eq!(expect!(r, LeaveGroup).error_code, k::NONE);
    assert_eq!(
        delete_offsets(&mut c2, "sub"),
        (k::NONE, vec![k::NONE, k::NONE])
    );
    assert_eq!(committed(&mut c2, "sub", "dg", 0), -1);

    let kafka = broker.kafka_address().unwrap();
    for (endpoint_type, error) in [(1, k::NONE), (2, k::INVALID_REQUEST)] {
        let r = c.call(
            RequestBody::DescribeCluster(DescribeClusterRequest {
                include_cluster_authorized_operations: false,
                endpoint_type,
            }),
            1,
        );
        let d = expect!(r, DescribeCluster);
        assert_eq!(d.error_code, error, "endpoint type {endpoint_type}");
        if error == k::NONE {
            assert_eq!((d.cluster_id.as_str(), d.controller_id), ("kelp", 0));
            assert_eq!(d.brokers.len(), 1);
            assert_eq!(d.brokers[0].port, i32::from(kafka.port()));
        }
    }
    broker.stop().unwrap();
}

/// The gateway is the only node: every partition is led by its preferred
/// (and only) replica, so no election is needed; a partition can be
/// "moved" only onto node 0, where it is; no move is ever under way.
#[test]
fn elections_are_never_needed_and_partitions_stay_on_node_0() {
    use kafka::api::alter_partition_reassignments::*;
    use kafka::api::elect_leaders::*;
    use kafka::api::list_partition_reassignments::*;
    let (_dir, _port, broker) = started();
    let mut c = Kafka::with_topic(&broker, "placed", 2);
    let elect = |election_type: i8, topics: Option<Vec<(&str, Vec<i32>)>>| {
        RequestBody::ElectLeaders(ElectLeadersRequest {
            election_type,
            topic_partitions: topics.map(|ts| {
                ts.into_iter()
                    .map(|(topic, partitions)| ElectLeadersTopicPartitions {
                        topic: topic.into(),
                        partitions,
                    })
                    .collect()
            }),
            timeout_ms: 5_000,
        })
    };
    let named = || Some(vec![("placed", vec![0, 1, 2]), ("nowhere", vec![0])]);
    for version in [0, 1, 2] {
        for election_type in [0, 1] {
            let r = c.call(elect(election_type, named()), version);
            let r = expect!(r, ElectLeaders);
            assert_eq!(r.error_code, k::NONE);
            let codes: Vec<(String, i32, i16)> = r
                .replica_election_results
                .iter()
                .flat_map(|t| {
                    t.partition_result
                        .iter()
                        .map(|p| (t.topic.clone(), p.partition_id, p.error_code))
                })
                .collect();
            assert_eq!(
                codes,
                [
                    ("placed".into(), 0, k::ELECTION_NOT_NEEDED),
                    ("placed".into(), 1, k::ELECTION_NOT_NEEDED),
                    ("placed".into(), 2, k::UNKNOWN_TOPIC_OR_PARTITION),
                    ("nowhere".into(), 0, k::UNKNOWN_TOPIC_OR_PARTITION),
                ],
                "v{version}, election type {election_type}"
            );
        }
    }
    // Every partition: none needed an election, so none is named.
    let r = c.call(elect(0, None), 2);
    let r = expect!(r, ElectLeaders);
    assert_eq!(r.error_code, k::NONE);
    assert!(r
        .replica_election_results
        .iter()
        .any(|t| t.topic == "placed"));
    assert!(r
        .replica_election_results
        .iter()
        .all(|t| t.partition_result.is_empty()));
    // An election type Kafka does not define.
    let r = c.call(elect(7, named()), 2);
    assert_eq!(expect!(r, ElectLeaders).error_code, k::INVALID_REQUEST);

    let moves: Vec<(i32, Option<Vec<i32>>)> = vec![
        (0, Some(vec![0])),
        (1, Some(vec![1])),
        (0, Some(vec![0, 0])),
        (1, Some(vec![])),
        (0, None),
        (5, Some(vec![0])),
    ];
    let r = c.call(
        RequestBody::AlterPartitionReassignments(AlterPartitionReassignmentsRequest {
            timeout_ms: 5_000,
            topics: vec![ReassignableTopic {
                name: "placed".into(),
                partitions: moves
                    .iter()
                    .map(|(partition_index, replicas)| ReassignablePartition {
                        partition_index: *partition_index,
                        replicas: replicas.clone(),
                    })
                    .collect(),
            }],
        }),
        0,
    );
    let r = expect!(r, AlterPartitionReassignments);
    assert_eq!(r.error_code, k::NONE);
    let codes: Vec<i16> = r.responses[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect();
    assert_eq!(
        codes,
        [
            k::NONE,
            k::INVALID_REPLICA_ASSIGNMENT,
            k::INVALID_REPLICA_ASSIGNMENT,
            k::INVALID_REPLICA_ASSIGNMENT,
            k::NO_REASSIGNMENT_IN_PROGRESS,
            k::UNKNOWN_TOPIC_OR_PARTITION,
        ]
    );
    let why = r.responses[0].partitions[1].error_message.as_deref();
    assert!(why.is_some_and(|m| m.contains("broker 1")), "{why:?}");

    for topics in [
        None,
        Some(vec![ListPartitionReassignmentsTopics {
            name: "placed".into(),
            partition_indexes: vec![0, 1],
        }]),
    ] {
        let r = c.call(
            RequestBody::ListPartitionReassignments(ListPartitionReassignmentsRequest {
                timeout_ms: 5_000,
                topics,
            }),
            0,
        );
        let r = expect!(r, ListPartitionReassignments);
        assert_eq!(r.error_code, k::NONE);
        assert!(r.topics.is_empty(), "nothing moves: {:?}", r.topics);
    }
    broker.stop().unwrap();
}

#[test]
fn acks_all_and_committed_offsets_survive_a_restart() {
    let (dir, port, broker) = started();
    let mut c = Kafka::with_topic(&broker, "durable", 2);
    let recs = records(40, "durable");
    let (e, base) = produce_records(&mut c, "durable", 0, &recs, Compression::Zstd, -1);
    assert_eq!((e, base), (k::NONE, 0));
    // Offsets may be committed outside a group (generation -1, no member).
    assert_eq!(commit(&mut c, "resume", -1, "", "durable", 0, 25), k::NONE);
    drop(c);
    broker.stop().unwrap();

    let broker = start(dir.path(), port);
    let mut c = Kafka::open(&broker);
    assert_eq!(fetch_all(&mut c, "durable", 0), with_offsets(recs, 0));
    assert_eq!(committed(&mut c, "resume", "durable", 0), 25);
    // Producer ids are never handed out twice across restarts.
    let init = |c: &mut Kafka| {
        let r = c.call(new_producer_id_request(), 2);
        expect!(r, InitProducerId).producer_id
    };
    let first = init(&mut c);
    drop(c);
    broker.stop().unwrap();
    let broker = start(dir.path(), port);
    let mut c = Kafka::open(&broker);
    assert!(init(&mut c) > first);
    broker.stop().unwrap();
}

#[test]
fn an_idempotent_resend_is_not_appended_twice_and_a_gap_is_refused_across_restarts() {
    let (dir, port, broker) = started();
    let mut c = Kafka::with_topic(&broker, "idem", 1);
    let pid = 4242;
    let a = records(5, "a");
    let b = records(3, "b");
    let batch_a = kafka_batch(&a, Compression::Lz4, (pid, 0, 0));
    let batch_b = kafka_batch(&b, Compression::None, (pid, 0, 5));
    assert_eq!(produce(&mut c, "idem", 0, &batch_a, -1), (k::NONE, 0));
    // The partition's first snapshot went in before its first idempotent
    // batch: what a broker killed now would find.
    let snapshot = dir.path().join("filer/topics/kafka/idem/kafka-producers/0");
    let before_any_batch = std::fs::read(&snapshot).unwrap();
    assert_eq!(produce(&mut c, "idem", 0, &batch_b, -1), (k::NONE, 5));
    // Both resent: answered with their first offsets, not appended.
    assert_eq!(produce(&mut c, "idem", 0, &batch_a, -1), (k::NONE, 0));
    assert_eq!(produce(&mut c, "idem", 0, &batch_b, -1), (k::NONE, 5));
    // A gap.
    let gap = kafka_batch(&b, Compression::None, (pid, 0, 20));
    assert_eq!(
        produce(&mut c, "idem", 0, &gap, -1).0,
        k::OUT_OF_ORDER_SEQUENCE_NUMBER
    );
    // Two idempotent batches for one partition in one request: refused
    // whole, as Kafka does from produce v3.
    let mut two = kafka_batch(&b, Compression::None, (pid, 0, 8));
    two.extend(kafka_batch(&b, Compression::None, (pid, 0, 11)));
    assert_eq!(produce(&mut c, "idem", 0, &two, -1).0, k::INVALID_RECORD);
    drop(c);
    broker.stop().unwrap();

    // A graceful restart: the stored snapshot holds the sequences.
    let broker = start(dir.path(), port);
    let mut c = Kafka::open(&broker);
    assert_eq!(produce(&mut c, "idem", 0, &batch_b, -1), (k::NONE, 5));
    assert_eq!(
        produce(&mut c, "idem", 0, &gap, -1).0,
        k::OUT_OF_ORDER_SEQUENCE_NUMBER
    );
    let c_recs = records(4, "c");
    let batch_c = kafka_batch(&c_recs, Compression::Gzip, (pid, 0, 8));
    assert_eq!(produce(&mut c, "idem", 0, &batch_c, -1), (k::NONE, 8));
    drop(c);
    broker.stop().unwrap();

    // As if killed before any later snapshot: the state comes from the log.
    std::fs::write(&snapshot, &before_any_batch).unwrap();
    let broker = start(dir.path(), port);
    let mut c = Kafka::open(&broker);
    assert_eq!(produce(&mut c, "idem", 0, &batch_c, -1), (k::NONE, 8));
    assert_eq!(produce(&mut c, "idem", 0, &batch_a, -1), (k::NONE, 0));
    assert_eq!(
        produce(&mut c, "idem", 0, &gap, -1).0,
        k::OUT_OF_ORDER_SEQUENCE_NUMBER
    );
    // An older epoch is fenced once a newer one has written.
    let d = records(1, "d");
    assert_eq!(
        produce(
            &mut c,
            "idem",
            0,
            &kafka_batch(&d, Compression::None, (pid, 1, 0)),
            -1
        ),
        (k::NONE, 12)
    );
    assert_eq!(
        produce(
            &mut c,
            "idem",
            0,
            &kafka_batch(&d, Compression::None, (pid, 0, 12)),
            -1
        )
        .0,
        k::INVALID_PRODUCER_EPOCH
    );
    let mut expected = with_offsets(a, 0);
    expected.extend(with_offsets(b, 5));
    expected.extend(with_offsets(c_recs, 8));
    expected.extend(with_offsets(d, 12));
    assert_eq!(fetch_all(&mut c, "idem", 0), expected);
    broker.stop().unwrap();
}

/// A batch whose header counts other records than its offset range holds
/// is refused (INVALID_RECORD, as Kafka's broker does) and nothing of it is
/// stored: an idempotent producer's sequences follow the offset range.
#[test]
fn a_batch_whose_record_count_disagrees_with_its_offsets_is_refused() {
    let (_dir, _, broker) = started();
    let mut c = Kafka::with_topic(&broker, "counted", 1);
    let mut batch = kafka_batch(&records(3, "c"), Compression::None, (77, 0, 0));
    // The record count (the last header field) says 2; the three records
    // and their last offset delta (2) stay. The CRC covers the change.
    let count_at = kafka::record_batch::RECORDS_COUNT_OFFSET;
    batch[count_at..count_at + 4].copy_from_slice(&2i32.to_be_bytes());
    let crc_at = kafka::record_batch::CRC_OFFSET;
    let crc = wire::checksum::crc32c(&batch[kafka::record_batch::ATTRIBUTES_OFFSET..]);
    batch[crc_at..crc_at + 4].copy_from_slice(&crc.to_be_bytes());
    assert_eq!(
        produce(&mut c, "counted", 0, &batch, -1).0,
        k::INVALID_RECORD
    );
    assert!(fetch_all(&mut c, "counted", 0).is_empty(), "nothing stored");
    // The same batch with its count intact goes in.
    let good = kafka_batch(&records(3, "c"), Compression::None, (77, 0, 0));
    assert_eq!(produce(&mut c, "counted", 0, &good, -1), (k::NONE, 0));
    assert_eq!(fetch_all(&mut c, "counted", 0).len(), 3);
    drop(c);
    broker.stop().unwrap();
}

#[test]
fn kafka_records_are_read_natively_and_native_records_through_kafka() {
    let (_dir, port, broker) = started();
    let mut c = Kafka::with_topic(&broker, "both", 1);
    let recs = records(12, "kafka");
    assert_eq!(
        produce_records(&mut c, "both", 0, &recs, Compression::Snappy, 1).0,
        k::NONE
    );

    // The partition's segment and its shard, from the native layout.
    let mut n = TestConn::open(port);
    let frame = n.call(wire::AdminRequest::DescribeTopic {
        topic: "kafka/both".into(),
    });
    let Response::Topic(info) = Response::decode(frame.0.frame_type, &frame.1).unwrap() else {
        panic!("no topic");
    };
    let segment = info.segments[0].clone();
    let mut n = TestConn::open(port + segment.shard);
    let frame = n.call(wire::DataRequest::Fetch(wire::FetchRequest {
        topic: "kafka/both".into(),
        segment: segment.id,
        from: FetchFrom::Earliest,
        max_bytes: 1 << 20,
        max_wait_ms: 0,
        checks: wire::FetchChecks::Trust,
        follower: None,
    }));
    let Response::Fetched(Fetched { batches, .. }) =
        Response::decode(frame.0.frame_type, &frame.1).unwrap()
    else {
        panic!("not fetched");
    };
    let mut native = Vec::new();
    for item in BatchWalk::new(batches) {
        let (_, b) = item.unwrap();
        for r in b.records() {
            native.push(Rec {
                offset: (b.base_offset() + u64::from(r.offset_delta)) as i64,
                timestamp: r.timestamp_ms,
                key: (!r.key.is_empty()).then(|| r.key.to_vec()),
                value: r.value.to_vec(),
                headers: r
                    .headers()
                    .map(|h| {
                        (
                            String::from_utf8(h.name.to_vec()).unwrap(),
                            h.value.to_vec(),
                        )
                    })
                    .collect(),
            });
        }
    }
    assert_eq!(native, with_offsets(recs.clone(), 0));

    // A native batch, keyless so any segment takes it, read through Kafka.
    let mut builder = BatchBuilder::new();
    builder
        .push(
            1_700_000_001_000,
            b"",
            b"native one",
            &[wire::batch::RecordHeader {
                name: b"n",
                value: b"1",
            }],
        )
        .unwrap();
    builder
        .push(1_700_000_001_005, b"", b"native two", &[])
        .unwrap();
    let frame = n.call(wire::DataRequest::Produce {
        topic: "kafka/both",
        segment: segment.id,
        ack: AckMode::Leader,
        batch: builder.finish(0, 0),
    });
    assert!(matches!(
        Response::decode(frame.0.frame_type, &frame.1).unwrap(),
        Response::Produced {
            base_offset: 12,
            ..
        }
    ));
    let all = fetch_all(&mut c, "both", 0);
    assert_eq!(all.len(), 14);
    assert_eq!(&all[..12], &with_offsets(recs, 0)[..]);
    assert_eq!(
        all[12],
        Rec {
            offset: 12,
            timestamp: 1_700_000_001_000,
            key: None,
            value: b"native one".to_vec(),
            headers: vec![("n".into(), b"1".to_vec())],
        }
    );
    assert_eq!(all[13].value, b"native two");
    broker.stop().unwrap();
}

/// The broker configs a deployment sets are honoured, and DescribeConfigs
/// shows them with their types and sources, beside the fixed ones.
#[test]
fn broker_configs_set_at_start_are_honoured_and_described() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BrokerConfig {
        kafka: kelp_engine::KafkaSettings {
            num_partitions: 3,
            group_min_session_timeout_ms: 1_000,
            group_max_session_timeout_ms: 20_000,
            group_initial_rebalance_delay_ms: 0,
        },
        ..config(dir.path(), port())
    })
    .unwrap();
    let mut c = Kafka::open(&broker);
    let r = c.call(
        RequestBody::DescribeConfigs(DescribeConfigsRequest {
            resources: vec![DescribeConfigsResource {
                resource_type: 4,
                resource_name: "0".into(),
                configuration_keys: None,
            }],
            include_synonyms: false,
            include_documentation: false,
        }),
        4,
    );
    let d = expect!(r, DescribeConfigs);
    assert_eq!(d.results[0].error_code, k::NONE);
    let entry = |name: &str| {
        d.results[0]
            .configs
            .iter()
            .find(|c| c.name == name)
            .map(|c| {
                (
                    c.value.clone().unwrap_or_default(),
                    c.config_type,
                    c.config_source,
                )
            })
            .unwrap_or_else(|| panic!("no {name} in {:?}", d.results[0].configs))
    };
    // (value, type: 1 BOOLEAN 3 INT 2 STRING, source: 4 static, 5 default;
    // is_default is a v0 field)
    assert_eq!(entry("num.partitions"), ("3".into(), 3, 4));
    assert_eq!(entry("group.min.session.timeout.ms"), ("1000".into(), 3, 4));
    assert_eq!(
        entry("group.initial.rebalance.delay.ms"),
        ("0".into(), 3, 4)
    );
    assert_eq!(
        entry("group.max.session.timeout.ms"),
        ("20000".into(), 3, 4)
    );
    assert_eq!(entry("auto.create.topics.enable"), ("true".into(), 1, 5));
    let advertised = format!("PLAINTEXT://{}", broker.kafka_address().unwrap());
    assert_eq!(entry("advertised.listeners"), (advertised, 2, 4));

    // num.partitions: a topic Metadata creates on first use.
    let r = c.call(metadata_request(&["auto3"], true), 12);
    let m = expect!(r, Metadata);
    assert_eq!(m.topics[0].error_code, k::NONE);
    assert_eq!(m.topics[0].partitions.len(), 3);
    // group.min.session.timeout.ms: 500 ms is below it, 1 s is not.
    let r = c.call(join_request_timing("short", "", 500), 5);
    assert_eq!(expect!(r, JoinGroup).error_code, k::INVALID_SESSION_TIMEOUT);
    let member = join_until_member(&mut c, "ok", "");
    let r = c.call(join_request_timing("ok", &member, 1_000), 5);
    assert_eq!(expect!(r, JoinGroup).error_code, k::NONE);
    broker.stop().unwrap();
}

#[test]
fn null_values_and_keys_come_back_null_and_empty_ones_empty() {
    let (_dir, _, broker) = started();
    let mut c = Kafka::with_topic(&broker, "nulls", 1);
    // (key, value): a tombstone, an empty value, a null key, both set.
    type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);
    let sent: [KeyValue<'_>; 4] = [
        (Some(b"k1"), None),
        (Some(b"k2"), Some(b"")),
        (None, Some(b"v3")),
        (Some(b"k4"), Some(b"v4")),
    ];
    let list: Vec<Record<'_>> = sent
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            attributes: 0,
            timestamp_delta: i as i64,
            offset_delta: i as i32,
            key: *key,
            value: *value,
            headers: RecordHeaders::List(&[]),
        })
        .collect();
    let batch = encode_batch(
        &list,
        (1_700_000_000_000, 1_700_000_000_003),
        Compression::None,
        (-1, -1, -1),
    );
    assert_eq!(produce(&mut c, "nulls", 0, &batch, -1), (k::NONE, 0));

    let r = c.call(fetch_request("nulls", 0, 0, 0), 12);
    let r = expect!(r, Fetch);
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, k::NONE);
    let mut got = Vec::new();
    let mut scratch = Vec::new();
    for batch in RecordBatches::new(p.records.unwrap_or_default()) {
        let batch = batch.unwrap();
        for rec in batch.records(&mut scratch, 1 << 20).unwrap() {
            let rec = rec.unwrap();
            got.push((rec.key.map(<[u8]>::to_vec), rec.value.map(<[u8]>::to_vec)));
        }
    }
    let expected: Vec<_> = sent
        .iter()
        .map(|(k, v)| (k.map(<[u8]>::to_vec), v.map(<[u8]>::to_vec)))
        .collect();
    assert_eq!(got, expected);
    broker.stop().unwrap();
}

#[test]
fn a_malformed_request_closes_only_its_connection() {
    let (_dir, _, broker) = started();
    let mut good = Kafka::with_topic(&broker, "still", 1);
    let mut bad = Kafka::open(&broker);
    // A Metadata v9 request whose body is cut short.
    bad.stream
        .write_all(&[0, 0, 0, 9, 0, 3, 0, 9, 0, 0, 0, 1, 0])
        .unwrap();
    assert!(bad.read().is_none(), "the bad connection is closed");
    // A negative frame size closes too.
    let mut worse = Kafka::open(&broker);
    worse.stream.write_all(&(-5i32).to_be_bytes()).unwrap();
    assert!(worse.read().is_none());
    // The other connection and new ones carry on.
    let recs = records(3, "still");
    assert_eq!(
        produce_records(&mut good, "still", 0, &recs, Compression::Gzip, 1),
        (k::NONE, 0)
    );
    let mut again = Kafka::open(&broker);
    assert_eq!(fetch_all(&mut again, "still", 0), with_offsets(recs, 0));
    broker.stop().unwrap();
}

#[test]
fn a_long_poll_fetch_returns_when_records_arrive() {
    let (_dir, _, broker) = started();
    let addr = broker.kafka_address().unwrap();
    let mut c = Kafka::with_topic(&broker, "poll", 1);
    let waiting = std::thread::spawn(move || {
        let mut f = Kafka::open_at(addr, "poller");
        let r = f.call(fetch_request("poll", 0, 0, 20_000), 12);
        let r = expect!(r, Fetch);
        let p = &r.topics[0].partitions[0];
        (
            p.error_code,
            p.high_watermark,
            p.records.map_or(0, <[u8]>::len),
        )
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let recs = records(2, "poll");
    assert_eq!(
        produce_records(&mut c, "poll", 0, &recs, Compression::None, 1).0,
        k::NONE
    );
    let (error, high_watermark, bytes) = waiting.join().unwrap();
    assert_eq!((error, high_watermark), (k::NONE, 2));
    assert!(bytes > 0);
    broker.stop().unwrap();
}

/// One consumer: joins, syncs (as leader: "index/members" for each
/// member), heartbeats, and rejoins on a rebalance until it holds an
/// assignment from a generation of `members` members. Returns its member
/// id and assignment.
fn consume_until(addr: SocketAddr, group: &str, members: usize) -> (String, String) {
    let mut c = Kafka::open_at(addr, "same-client");
    let mut member = join_until_member(&mut c, group, "");
    for _ in 0..400 {
        let r = c.call(join_request(group, &member), 5);
        let j = expect!(r, JoinGroup);
        if j.error_code == k::REBALANCE_IN_PROGRESS {
            continue;
        }
        assert_eq!(j.error_code, k::NONE);
        member = j.member_id.clone();
        let assignments = if j.leader == member {
            let n = j.members.len();
            j.members
                .iter()
                .enumerate()
                .map(|(i, m)| (m.member_id.clone(), format!("{i}/{n}").into_bytes()))
                .collect()
        } else {
            Vec::new()
        };
        let r = c.call(
            sync_request(group, j.generation_id, &member, assignments),
            5,
        );
        let s = expect!(r, SyncGroup);
        if s.error_code == k::REBALANCE_IN_PROGRESS {
            continue;
        }
        assert_eq!(s.error_code, k::NONE);
        let assignment = String::from_utf8(s.assignment.clone()).unwrap();
        if assignment.ends_with(&format!("/{members}")) {
            return (member, assignment);
        }
        // Heartbeat until the group rebalances (bounded).
        for _ in 0..200 {
            let r = c.call(
                RequestBody::Heartbeat(HeartbeatRequest {
                    group_id: group.into(),
                    generation_id: j.generation_id,
                    member_id: member.clone(),
                    group_instance_id: None,
                }),
                4,
            );
            if expect!(r, Heartbeat).error_code == k::REBALANCE_IN_PROGRESS {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    panic!("no assignment for {members} members");
}

#[test]
fn two_consumers_with_one_client_id_are_two_members_with_the_leaders_assignment() {
    let (_dir, _, broker) = started();
    let addr = broker.kafka_address().unwrap();
    let consumers: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || consume_until(addr, "pair", 2)))
        .collect();
    let mut got: Vec<(String, String)> = consumers.into_iter().map(|t| t.join().unwrap()).collect();
    got.sort_by(|a, b| a.1.cmp(&b.1));
    assert_ne!(got[0].0, got[1].0, "two member ids");
    assert_eq!(got[0].1, "0/2");
    assert_eq!(got[1].1, "1/2");
    let mut c = Kafka::open(&broker);
    let r = c.call(
        RequestBody::DescribeGroups(DescribeGroupsRequest {
            groups: vec!["pair".into()],
            include_authorized_operations: false,
        }),
        5,
    );
    let d = expect!(r, DescribeGroups);
    assert_eq!(d.groups[0].members.len(), 2);
    assert!(d.groups[0]
        .members
        .iter()
        .all(|m| m.client_id == "same-client"));
    broker.stop().unwrap();
}

#[test]
fn a_fetch_over_its_byte_limit_still_reports_every_partitions_high_watermark() {
    let (_dir, _, broker) = started();
    let mut c = Kafka::with_topic(&broker, "limit", 2);
    for p in 0..2 {
        let recs = records(30 + p as usize, "limit");
        let batch = kafka_batch(&recs, Compression::None, (-1, -1, -1));
        assert_eq!(produce(&mut c, "limit", p, &batch, 1), (k::NONE, 0));
    }
    let RequestBody::Fetch(mut request) = fetch_request("limit", 0, 0, 0) else {
        unreachable!()
    };
    let mut second = request.topics[0].partitions[0].clone();
    second.partition = 1;
    request.topics[0].partitions.push(second);
    request.max_bytes = 1;
    let r = c.call(RequestBody::Fetch(request), 12);
    let r = expect!(r, Fetch);
    let parts = &r.topics[0].partitions;
    // The first partition is whole (at least one batch), the second empty.
    assert!(!parts[0].records.unwrap_or_default().is_empty());
    assert!(parts[1].records.unwrap_or_default().is_empty());
    assert_eq!((parts[0].high_watermark, parts[1].high_watermark), (30, 31));
    broker.stop().unwrap();
}

fn heartbeat(c: &mut Kafka, group: &str, generation: i32, member: &str) -> i16 {
    let r = c.call(
        RequestBody::Heartbeat(HeartbeatRequest {
            group_id: group.into(),
            generation_id: generation,
            member_id: member.into(),
            group_instance_id: None,
        }),
        4,
    );
    expect!(r, Heartbeat).error_code
}

#[test]
fn silent_members_are_evicted_by_the_rebalance_and_then_the_session_timeout() {
    // The coordinator's smallest session timeout, as Kafka's default
    // group.min.session.timeout.ms.
    const TIMEOUT_MS: i32 = 6_000;
    let (_dir, _, broker) = started();
    let group = "silent";
    let join = |c: &mut Kafka, member: &str| {
        let r = c.call(join_request_timing(group, member, TIMEOUT_MS), 5);
        expect!(r, JoinGroup)
    };

    // A joins alone and is Stable at generation 1.
    let mut a = Kafka::open(&broker);
    let a_id = join(&mut a, "").member_id;
    let joined = join(&mut a, &a_id);
    assert_eq!(
        (joined.error_code, joined.leader.as_str()),
        (k::NONE, a_id.as_str())
    );
    let generation = joined.generation_id;
    let r = a.call(
        sync_request(
            group,
            generation,
            &a_id,
            vec![(a_id.clone(), b"a".to_vec())],
        ),
        5,
    );
    assert_eq!(expect!(r, SyncGroup).error_code, k::NONE);

    // B joins. A keeps its session alive with heartbeats but never rejoins,
    // so only the rebalance timeout can end the rebalance: without A.
    let beating = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let heartbeats = {
        let beating = beating.clone();
        let a_id = a_id.clone();
        std::thread::spawn(move || {
            let mut codes = Vec::new();
            while beating.load(std::sync::atomic::Ordering::Relaxed) {
                codes.push(heartbeat(&mut a, group, generation, &a_id));
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            codes
        })
    };
    let mut b = Kafka::open(&broker);
    let b_id = join(&mut b, "").member_id;
    let joined = join(&mut b, &b_id);
    beating.store(false, std::sync::atomic::Ordering::Relaxed);
    let codes = heartbeats.join().unwrap();
    assert_eq!(joined.error_code, k::NONE);
    assert_eq!(joined.leader, b_id);
    assert_eq!(
        joined
            .members
            .iter()
            .map(|m| m.member_id.as_str())
            .collect::<Vec<_>>(),
        vec![b_id.as_str()],
        "the member that never rejoined is still in the group"
    );
    assert!(joined.generation_id > generation);
    assert!(
        codes.contains(&k::REBALANCE_IN_PROGRESS),
        "A's heartbeats during the rebalance: {codes:?}"
    );
    let r = b.call(
        sync_request(
            group,
            joined.generation_id,
            &b_id,
            vec![(b_id.clone(), b"b".to_vec())],
        ),
        5,
    );
    assert_eq!(expect!(r, SyncGroup).assignment, b"b");

    // B goes silent: its session timeout empties the group (Dead: with no
    // member and no committed offset nothing of it is kept).
    let mut watcher = Kafka::open(&broker);
    let describe = |c: &mut Kafka| {
        let r = c.call(
            RequestBody::DescribeGroups(DescribeGroupsRequest {
                groups: vec![group.into()],
                include_authorized_operations: false,
            }),
            5,
        );
        let d = expect!(r, DescribeGroups);
        (d.groups[0].group_state.clone(), d.groups[0].members.len())
    };
    assert_eq!(describe(&mut watcher), ("Stable".to_string(), 1));
    let mut state = describe(&mut watcher);
    for _ in 0..(3 * TIMEOUT_MS / 100) {
        if state.1 == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        state = describe(&mut watcher);
    }
    assert_eq!(state, ("Dead".to_string(), 0), "B was not evicted");
    assert_eq!(
        heartbeat(&mut b, group, joined.generation_id, &b_id),
        k::UNKNOWN_MEMBER_ID
    );
    broker.stop().unwrap();
}

#[test]
fn pipelined_requests_are_answered_in_order_and_a_partition_keeps_request_order() {
    let (_dir, _, broker) = started();
    let mut c = Kafka::with_topic(&broker, "piped", 2);
    // Six produce requests sent back to back without reading: durable
    // (acks -1), alternating the two partitions, then a Metadata request
    // that must wait for all of them.
    let batches: Vec<(i32, Vec<Rec>, Vec<u8>)> = (0..6)
        .map(|i| {
            let recs = records(3 + i, &format!("piped{i}"));
            let batch = kafka_batch(&recs, Compression::None, (-1, -1, -1));
            (i as i32 % 2, recs, batch)
        })
        .collect();
    let mut ids = Vec::new();
    for (partition, _, batch) in &batches {
        ids.push(c.send(produce_request("piped", *partition, batch, -1), 9));
    }
    let metadata_id = c.send(metadata_request(&["piped"], false), 9);
    let mut next_offset = [0i64; 2];
    let mut expected: [Vec<Rec>; 2] = [Vec::new(), Vec::new()];
    for (id, (partition, recs, _)) in ids.iter().zip(&batches) {
        let frame = c.read().unwrap();
        let (header, body) = decode_response(&frame, ApiKey::Produce, 9).unwrap();
        assert_eq!(header.correlation_id, *id, "answers in request order");
        let ResponseBody::Produce(r) = body else {
            panic!("expected Produce, got {body:?}");
        };
        let p = &r.topics[0].partitions[0];
        assert_eq!(p.error_code, k::NONE);
        let slot = *partition as usize;
        // Each partition's batches are stored in the order they were sent.
        assert_eq!(p.base_offset, next_offset[slot]);
        next_offset[slot] += recs.len() as i64;
        expected[slot].extend(with_offsets(recs.clone(), p.base_offset));
    }
    let frame = c.read().unwrap();
    let (header, body) = decode_response(&frame, ApiKey::Metadata, 9).unwrap();
    assert_eq!(header.correlation_id, metadata_id);
    assert!(matches!(body, ResponseBody::Metadata(_)));
    for partition in 0..2 {
        assert_eq!(
            fetch_all(&mut c, "piped", partition),
            expected[partition as usize]
        );
    }
    broker.stop().unwrap();
}

/// The Kafka port closes idle and trickling connections as the native one
/// does (`idle_timeout_ms`, `frame_timeout_ms`), and serves a connection
/// in use across many idle periods.
#[test]
fn idle_and_trickling_kafka_connections_are_closed() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BrokerConfig {
        shards: 1,
        idle_timeout_ms: 300,
        frame_timeout_ms: 300,
        ..config(dir.path(), port())
    })
    .unwrap();
    // A close is waited for far past the timeouts: a slow machine does
    // not fail the test, a broker that never closes does.
    let closed = |c: &mut Kafka| {
        c.stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut byte = [0u8; 1];
        !matches!(c.stream.read(&mut byte), Ok(n) if n > 0)
    };
    let mut silent = Kafka::open(&broker);
    assert!(closed(&mut silent), "an idle Kafka connection stayed open");
    // Half a size prefix.
    let mut half_prefix = Kafka::open(&broker);
    half_prefix.stream.write_all(&[0, 0]).unwrap();
    assert!(
        closed(&mut half_prefix),
        "half a size prefix held the connection"
    );
    // A prefix promising 100 bytes, and 10 of them.
    let mut stalled = Kafka::open(&broker);
    stalled.stream.write_all(&100i32.to_be_bytes()).unwrap();
    stalled.stream.write_all(&[0u8; 10]).unwrap();
    assert!(
        closed(&mut stalled),
        "a stalled request held the connection"
    );
    // In use: answered across several idle periods.
    let mut busy = Kafka::open(&broker);
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(100));
        let r = busy.call(RequestBody::ApiVersions(ApiVersionsRequest::default()), 3);
        let versions = expect!(r, ApiVersions);
        assert_eq!(versions.error_code, 0);
    }
    drop(broker);
}

#[test]
fn clients_are_told_the_advertised_address_not_the_bound_one() {
    let dir = tempfile::tempdir().unwrap();
    let advertised: kelp_engine::AdvertisedAddress = "kafka-1.example.com:19092".parse().unwrap();
    let broker = Broker::start(BrokerConfig {
        shards: 1,
        // Every address: without --kafka-advertise it would tell 127.0.0.1.
        kafka_listen: Some("0.0.0.0:0".parse().unwrap()),
        kafka_advertised: Some(advertised),
        ..config(dir.path(), port())
    })
    .unwrap();
    let bound = broker.kafka_address().unwrap();
    let mut c = Kafka::open_at(
        SocketAddr::new([127, 0, 0, 1].into(), bound.port()),
        "advertised-test",
    );
    for version in [1, 9, 12] {
        let r = c.call(metadata_request(&[], false), version);
        let m = expect!(r, Metadata);
        assert_eq!(m.brokers.len(), 1, "v{version}");
        assert_eq!(m.brokers[0].host, "kafka-1.example.com", "v{version}");
        assert_eq!(m.brokers[0].port, 19092, "v{version}");
    }
    let r = c.call(
        RequestBody::FindCoordinator(FindCoordinatorRequest {
            key_type: 0,
            coordinator_keys: vec!["g".into()],
        }),
        4,
    );
    let f = expect!(r, FindCoordinator);
    assert_eq!(f.coordinators[0].host, "kafka-1.example.com");
    assert_eq!(f.coordinators[0].port, 19092);
}
