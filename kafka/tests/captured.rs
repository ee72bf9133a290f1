//! Golden vectors captured from real Kafka clients: the request frames
//! confluent-kafka (librdkafka), kafka-python and kafkajs sent to kelp's
//! Kafka gateway, and the response frames the gateway answered them with,
//! recorded in `tests/vectors/` by `interop/capture/capture_vectors.py`
//! (docs/kafka.md, "Captured vectors", says how to capture them again).
//!
//! A request a real client wrote must decode, header and body, to the
//! last byte, and encode back at the same version to exactly the client's
//! bytes; a response the client accepted must do the same at the request's
//! version. Semantic checks per API pin what the capture sessions did
//! (topic `golden` with 3 partitions, group `golden-group`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kelp_kafka::api::join_group::JoinGroupRequest;
use kelp_kafka::api::produce::ProduceRequest;
use kelp_kafka::{
    decode_response, encode_response_frame, ApiKey, Compression, Request, RequestBody,
    ResponseBody, SUPPORTED_APIS,
};

const TOPIC: &str = "golden";
const DOOMED_TOPIC: &str = "golden-doomed";
const PARTITIONS: i32 = 3;
const GROUP: &str = "golden-group";
const RECORD_HEADER: &str = "kelp-key";
const KEYS: u64 = 3;
/// The user of the SASL sessions.
const SASL_USER: &str = "golden-user";
/// The interop programs' record value size.
const VALUE_BYTES: usize = 64;

/// A client whose vectors are in `tests/vectors/<dir>`, and what its
/// capture sessions did differently from the others.
struct Client {
    dir: &'static str,
    /// The codec of its idempotent producer, the one whose Produce request
    /// was kept.
    codec: Compression,
    /// Its consumer's rebalance timeout (confluent-kafka and kafka-python:
    /// `max.poll.interval.ms`).
    rebalance_timeout_ms: i32,
    /// The SASL mechanism of its SASL session.
    sasl_mechanism: &'static str,
}

const CLIENTS: [Client; 3] = [
    Client {
        dir: "confluent",
        codec: Compression::Zstd,
        rebalance_timeout_ms: 60_000,
        sasl_mechanism: "SCRAM-SHA-256",
    },
    Client {
        dir: "kafka-python",
        codec: Compression::Lz4,
        rebalance_timeout_ms: 60_000,
        sasl_mechanism: "SCRAM-SHA-512",
    },
    Client {
        dir: "kafkajs",
        codec: Compression::Gzip,
        rebalance_timeout_ms: 30_000,
        sasl_mechanism: "PLAIN",
    },
];

/// Every captured request, (client, api, version): what the clients sent
/// in the capture sessions, one exchange kept per API and version. A new
/// capture that changes this list changes what is covered, so it must be
/// changed here (and in docs/kafka.md) on purpose.
const CAPTURED: &[(&str, ApiKey, i16)] = &[
    ("confluent", ApiKey::Produce, 9),
    ("confluent", ApiKey::Fetch, 12),
    ("confluent", ApiKey::ListOffsets, 7),
    ("confluent", ApiKey::Metadata, 12),
    ("confluent", ApiKey::OffsetCommit, 8),
    ("confluent", ApiKey::OffsetFetch, 7),
    ("confluent", ApiKey::FindCoordinator, 2),
    ("confluent", ApiKey::JoinGroup, 5),
    ("confluent", ApiKey::Heartbeat, 3),
    ("confluent", ApiKey::LeaveGroup, 1),
    ("confluent", ApiKey::SyncGroup, 3),
    ("confluent", ApiKey::DescribeGroups, 5),
    ("confluent", ApiKey::ListGroups, 4),
    ("confluent", ApiKey::ApiVersions, 3),
    ("confluent", ApiKey::CreateTopics, 4),
    ("confluent", ApiKey::DeleteTopics, 4),
    ("confluent", ApiKey::InitProducerId, 4),
    ("confluent", ApiKey::DescribeConfigs, 1),
    ("confluent", ApiKey::DeleteGroups, 2),
    ("confluent", ApiKey::ElectLeaders, 2),
    ("confluent", ApiKey::SaslHandshake, 1),
    ("confluent", ApiKey::SaslAuthenticate, 1),
    ("confluent", ApiKey::DescribeAcls, 2),
    ("kafka-python", ApiKey::Produce, 9),
    ("kafka-python", ApiKey::Fetch, 12),
    ("kafka-python", ApiKey::ListOffsets, 7),
    ("kafka-python", ApiKey::Metadata, 12),
    ("kafka-python", ApiKey::OffsetCommit, 8),
    ("kafka-python", ApiKey::OffsetFetch, 7),
    ("kafka-python", ApiKey::FindCoordinator, 4),
    ("kafka-python", ApiKey::JoinGroup, 7),
    ("kafka-python", ApiKey::Heartbeat, 4),
    ("kafka-python", ApiKey::LeaveGroup, 5),
    ("kafka-python", ApiKey::SyncGroup, 5),
    ("kafka-python", ApiKey::DescribeGroups, 5),
    ("kafka-python", ApiKey::ListGroups, 4),
    ("kafka-python", ApiKey::ApiVersions, 4),
    ("kafka-python", ApiKey::CreateTopics, 7),
    ("kafka-python", ApiKey::DeleteTopics, 6),
    ("kafka-python", ApiKey::InitProducerId, 4),
    ("kafka-python", ApiKey::DescribeConfigs, 4),
    ("kafka-python", ApiKey::DeleteGroups, 2),
    ("kafka-python", ApiKey::OffsetDelete, 0),
    ("kafka-python", ApiKey::DescribeCluster, 1),
    ("kafka-python", ApiKey::ElectLeaders, 2),
    ("kafka-python", ApiKey::AlterPartitionReassignments, 0),
    ("kafka-python", ApiKey::ListPartitionReassignments, 0),
    ("kafka-python", ApiKey::SaslHandshake, 1),
    ("kafka-python", ApiKey::SaslAuthenticate, 2),
    ("kafka-python", ApiKey::DescribeAcls, 3),
    ("kafkajs", ApiKey::Produce, 7),
    ("kafkajs", ApiKey::Fetch, 11),
    ("kafkajs", ApiKey::ListOffsets, 3),
    ("kafkajs", ApiKey::Metadata, 6),
    ("kafkajs", ApiKey::OffsetCommit, 5),
    ("kafkajs", ApiKey::OffsetFetch, 4),
    ("kafkajs", ApiKey::FindCoordinator, 2),
    ("kafkajs", ApiKey::JoinGroup, 5),
    ("kafkajs", ApiKey::Heartbeat, 3),
    ("kafkajs", ApiKey::LeaveGroup, 3),
    ("kafkajs", ApiKey::SyncGroup, 3),
    ("kafkajs", ApiKey::DescribeGroups, 2),
    ("kafkajs", ApiKey::ListGroups, 2),
    ("kafkajs", ApiKey::ApiVersions, 2),
    ("kafkajs", ApiKey::CreateTopics, 3),
    ("kafkajs", ApiKey::DeleteTopics, 1),
    ("kafkajs", ApiKey::InitProducerId, 1),
    ("kafkajs", ApiKey::DescribeConfigs, 2),
    ("kafkajs", ApiKey::DeleteGroups, 1),
    ("kafkajs", ApiKey::SaslHandshake, 1),
    ("kafkajs", ApiKey::SaslAuthenticate, 1),
];

/// One captured exchange: the request frame and the response frame (each
/// without its size prefix).
struct Exchange {
    client: &'static Client,
    api_key: ApiKey,
    version: i16,
    request: Vec<u8>,
    response: Vec<u8>,
}

impl Exchange {
    fn name(&self) -> String {
        format!(
            "{}/{}",
            self.client.dir,
            file_stem(self.api_key, self.version)
        )
    }
}

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

/// `list-offsets-v7` for ListOffsets v7: the API's name in kebab case.
fn file_stem(api_key: ApiKey, version: i16) -> String {
    let mut name = String::new();
    for c in format!("{api_key:?}").chars() {
        if c.is_ascii_uppercase() && !name.is_empty() {
            name.push('-');
        }
        name.push(c.to_ascii_lowercase());
    }
    format!("{name}-v{version}")
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every exchange in CAPTURED, read from its two files.
fn exchanges() -> Vec<Exchange> {
    CAPTURED
        .iter()
        .map(|&(dir, api_key, version)| {
            let client = CLIENTS.iter().find(|c| c.dir == dir).expect("known client");
            let stem = file_stem(api_key, version);
            let at = vectors_dir().join(dir);
            Exchange {
                client,
                api_key,
                version,
                request: read(&at.join(format!("{stem}.request.bin"))),
                response: read(&at.join(format!("{stem}.response.bin"))),
            }
        })
        .collect()
}

#[test]
fn the_vector_files_are_the_captured_table() {
    // Every .bin file is in CAPTURED (none left untested), and the table
    // names no file that is missing (exchanges() reads them all).
    let mut on_disk = BTreeSet::new();
    for client in &CLIENTS {
        let dir = vectors_dir().join(client.dir);
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let name = entry.expect("dir entry").file_name();
            let name = name.to_str().expect("UTF-8 file name").to_owned();
            if name.ends_with(".bin") {
                on_disk.insert(format!("{}/{name}", client.dir));
            }
        }
    }
    let mut listed = BTreeSet::new();
    for e in exchanges() {
        for direction in ["request", "response"] {
            listed.insert(format!("{}.{direction}.bin", e.name()));
        }
    }
    assert_eq!(on_disk, listed);
}

#[test]
fn every_supported_api_has_a_real_clients_request() {
    for range in SUPPORTED_APIS {
        let versions: Vec<i16> = CAPTURED
            .iter()
            .filter(|(_, api_key, _)| *api_key == range.api_key)
            .map(|(_, _, version)| *version)
            .collect();
        assert!(
            !versions.is_empty(),
            "{:?}: no client sent it",
            range.api_key
        );
        for version in versions {
            assert!(
                range.api_key.supports(version),
                "{:?} v{version}",
                range.api_key
            );
        }
    }
}

#[test]
fn client_requests_decode_whole_and_encode_back_to_the_clients_bytes() {
    for e in exchanges() {
        let name = e.name();
        let request = Request::decode(&e.request).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(request.header.api_key, e.api_key.code(), "{name}");
        assert_eq!(request.header.api_version, e.version, "{name}");
        assert_eq!(request.body.api_key(), e.api_key, "{name}");
        let mut frame = Vec::new();
        request.encode_frame(&mut frame).expect("re-encode");
        // Request::decode fails on trailing bytes, so the frame was read
        // whole; the same length back says nothing was dropped either.
        assert_eq!(frame.len() - 4, e.request.len(), "{name}: length");
        assert_eq!(&frame[4..], &e.request[..], "{name}: bytes");
    }
}

#[test]
fn gateway_responses_decode_whole_and_encode_back_to_the_same_bytes() {
    for e in exchanges() {
        let name = e.name();
        let (header, body) = decode_response(&e.response, e.api_key, e.version)
            .unwrap_or_else(|err| panic!("{name} response: {err}"));
        let request = Request::decode(&e.request).expect("request decodes");
        assert_eq!(
            header.correlation_id, request.header.correlation_id,
            "{name}"
        );
        assert_eq!(body.api_key(), e.api_key, "{name}");
        let mut frame = Vec::new();
        encode_response_frame(&mut frame, header.correlation_id, e.version, &body)
            .expect("re-encode");
        assert_eq!(&frame[4..], &e.response[..], "{name} response: bytes");
    }
}

#[test]
fn every_truncation_of_a_captured_frame_fails_to_decode() {
    for e in exchanges() {
        let name = e.name();
        for cut in 0..e.request.len() {
            assert!(
                Request::decode(&e.request[..cut]).is_err(),
                "{name}: request cut at {cut} decoded"
            );
        }
        for cut in 0..e.response.len() {
            assert!(
                decode_response(&e.response[..cut], e.api_key, e.version).is_err(),
                "{name}: response cut at {cut} decoded"
            );
        }
    }
}

#[test]
fn client_requests_say_what_the_sessions_did() {
    for e in exchanges() {
        let name = e.name();
        let request = Request::decode(&e.request).expect("decodes");
        let client_id = request.header.client_id.as_deref().unwrap_or_default();
        assert!(!client_id.is_empty(), "{name}: client id");
        check_request(&e, &request.body);
    }
}

fn check_request(e: &Exchange, body: &RequestBody<'_>) {
    let name = e.name();
    match body {
        RequestBody::Produce(r) => check_produce(e, r),
        RequestBody::Fetch(r) => {
            assert_eq!(r.replica_id, -1, "{name}");
            assert_eq!(r.topics.len(), 1, "{name}");
            assert_eq!(r.topics[0].topic, TOPIC, "{name}");
            for p in &r.topics[0].partitions {
                assert!((0..PARTITIONS).contains(&p.partition), "{name}");
                assert!(p.fetch_offset >= 0, "{name}");
            }
        }
        RequestBody::ListOffsets(r) => {
            // The consumer's first position: auto.offset.reset=earliest.
            assert_eq!(r.topics.len(), 1, "{name}");
            assert_eq!(r.topics[0].name, TOPIC, "{name}");
            for p in &r.topics[0].partitions {
                assert!((0..PARTITIONS).contains(&p.partition_index), "{name}");
                assert_eq!(p.timestamp, -2, "{name}: earliest");
            }
        }
        RequestBody::Metadata(r) => {
            let topics = r.topics.as_deref().unwrap_or_default();
            assert!(
                topics.iter().any(|t| t.name.as_deref() == Some(TOPIC)),
                "{name}: {topics:?}"
            );
        }
        RequestBody::OffsetCommit(r) => {
            assert_eq!(r.group_id, GROUP, "{name}");
            assert!(r.generation_id >= 1 && !r.member_id.is_empty(), "{name}");
            assert_eq!(r.topics.len(), 1, "{name}");
            assert_eq!(r.topics[0].name, TOPIC, "{name}");
            assert!(!r.topics[0].partitions.is_empty(), "{name}");
            for p in &r.topics[0].partitions {
                assert!(p.committed_offset >= 0, "{name}");
            }
        }
        RequestBody::OffsetFetch(r) => {
            assert_eq!(r.group_id, GROUP, "{name}");
            for t in r.topics.iter().flatten() {
                assert_eq!(t.name, TOPIC, "{name}");
                assert!(t
                    .partition_indexes
                    .iter()
                    .all(|p| (0..PARTITIONS).contains(p)));
            }
        }
        RequestBody::FindCoordinator(r) => {
            assert_eq!(r.key_type, 0, "{name}: a group");
            assert_eq!(r.coordinator_keys, [GROUP], "{name}");
        }
        RequestBody::JoinGroup(r) => check_join(e, r),
        RequestBody::Heartbeat(r) => {
            assert_eq!(r.group_id, GROUP, "{name}");
            assert!(r.generation_id >= 1 && !r.member_id.is_empty(), "{name}");
        }
        RequestBody::LeaveGroup(r) => {
            assert_eq!(r.group_id, GROUP, "{name}");
            assert_eq!(r.members.len(), 1, "{name}");
            assert!(!r.members[0].member_id.is_empty(), "{name}");
        }
        RequestBody::SyncGroup(r) => {
            // The only member leads: it sends its own assignment.
            assert_eq!(r.group_id, GROUP, "{name}");
            assert_eq!(r.assignments.len(), 1, "{name}");
            assert_eq!(r.assignments[0].member_id, r.member_id, "{name}");
            assert!(contains(&r.assignments[0].assignment, TOPIC), "{name}");
        }
        RequestBody::DescribeGroups(r) => assert_eq!(r.groups, [GROUP], "{name}"),
        RequestBody::ListGroups(r) => assert!(r.states_filter.is_empty(), "{name}"),
        RequestBody::ApiVersions(r) => {
            if e.version >= 3 {
                assert!(!r.client_software_name.is_empty(), "{name}");
                assert!(!r.client_software_version.is_empty(), "{name}");
            }
        }
        RequestBody::CreateTopics(r) => {
            assert_eq!(r.topics.len(), 1, "{name}");
            let t = &r.topics[0];
            assert_eq!(
                (t.name.as_str(), t.num_partitions),
                (TOPIC, PARTITIONS),
                "{name}"
            );
            assert!(!r.validate_only, "{name}");
        }
        RequestBody::DeleteTopics(r) => {
            assert_eq!(r.topics.len(), 1, "{name}");
            assert_eq!(r.topics[0].name.as_deref(), Some(DOOMED_TOPIC), "{name}");
        }
        RequestBody::InitProducerId(r) => {
            // An idempotent producer's first id: no transactional id.
            assert_eq!(r.transactional_id, None, "{name}");
            assert_eq!((r.producer_id, r.producer_epoch), (-1, -1), "{name}");
        }
        RequestBody::DescribeConfigs(r) => {
            assert_eq!(r.resources.len(), 1, "{name}");
            assert_eq!(r.resources[0].resource_type, 2, "{name}: a topic");
            assert_eq!(r.resources[0].resource_name, TOPIC, "{name}");
        }
        RequestBody::DeleteGroups(r) => {
            assert_eq!(r.groups_names, [GROUP], "{name}");
        }
        RequestBody::SaslHandshake(r) => {
            assert_eq!(r.mechanism, e.client.sasl_mechanism, "{name}");
        }
        RequestBody::DescribeAcls(r) => {
            // Every binding: any resource, pattern, operation, permission.
            assert_eq!(
                (
                    r.resource_type_filter,
                    r.pattern_type_filter,
                    r.operation,
                    r.permission_type
                ),
                (1, 1, 1, 1),
                "{name}"
            );
            assert_eq!(r.resource_name_filter, None, "{name}");
            assert_eq!(r.principal_filter, None, "{name}");
        }
        RequestBody::SaslAuthenticate(r) => {
            // The first message: PLAIN's whole credential (RFC 4616), or
            // SCRAM's client-first (RFC 5802: no channel binding).
            let text = String::from_utf8(r.auth_bytes.clone()).expect("UTF-8");
            if e.client.sasl_mechanism == "PLAIN" {
                assert_eq!(text, format!("\0{SASL_USER}\0golden-password"), "{name}");
            } else {
                let head = format!("n,,n={SASL_USER},r=");
                assert!(text.starts_with(&head), "{name}: {text}");
            }
        }
        RequestBody::OffsetDelete(r) => {
            assert_eq!(r.group_id, GROUP, "{name}");
            assert_eq!(r.topics[0].name, TOPIC, "{name}");
        }
        RequestBody::DescribeCluster(r) => {
            if e.version >= 1 {
                assert_eq!(r.endpoint_type, 1, "{name}: brokers");
            }
        }
        RequestBody::ElectLeaders(r) => {
            let topics = r.topic_partitions.as_deref().unwrap_or_default();
            assert!(topics.iter().all(|t| t.topic == TOPIC), "{name}");
        }
        RequestBody::AlterPartitionReassignments(r) => {
            assert!(r.topics.iter().all(|t| t.name == TOPIC), "{name}");
        }
        RequestBody::ListPartitionReassignments(r) => {
            let topics = r.topics.as_deref().unwrap_or_default();
            assert!(topics.iter().all(|t| t.name == TOPIC), "{name}");
        }
    }
}

/// The idempotent producer's request: acks=-1, one batch per partition in
/// the client's codec, with a producer id and sequence, holding records
/// as the interop programs write them (key `k{seq % 3}`, value `seq` then
/// filler, header `kelp-key` = key).
fn check_produce(e: &Exchange, r: &ProduceRequest<'_>) {
    let name = e.name();
    assert_eq!(r.transactional_id, None, "{name}");
    assert_eq!(r.acks, -1, "{name}");
    assert_eq!(r.topics.len(), 1, "{name}");
    assert_eq!(r.topics[0].name, TOPIC, "{name}");
    let mut records = 0;
    let mut scratch = Vec::new();
    for p in &r.topics[0].partitions {
        assert!((0..PARTITIONS).contains(&p.index), "{name}");
        let bytes = p.records.expect("records");
        for batch in kelp_kafka::RecordBatches::new(bytes) {
            let batch = batch.unwrap_or_else(|err| panic!("{name}: batch: {err}"));
            assert_eq!(batch.header.compression(), Ok(e.client.codec), "{name}");
            assert!(batch.header.producer_id >= 0, "{name}: idempotent");
            assert!(batch.header.base_sequence >= 0, "{name}: idempotent");
            for record in batch.records(&mut scratch, 1 << 20).expect("decompress") {
                let record = record.unwrap_or_else(|err| panic!("{name}: record: {err}"));
                let value = record.value.expect("value");
                assert_eq!(value.len(), VALUE_BYTES, "{name}");
                let seq = u64::from_be_bytes(value[..8].try_into().expect("8 bytes"));
                let key = format!("k{}", seq % KEYS);
                assert_eq!(record.key, Some(key.as_bytes()), "{name}");
                let headers: Vec<_> = record.headers.iter().collect();
                assert_eq!(headers.len(), 1, "{name}");
                assert_eq!(headers[0].key, RECORD_HEADER, "{name}");
                assert_eq!(headers[0].value, Some(key.as_bytes()), "{name}");
                records += 1;
            }
        }
    }
    // librdkafka sends a request per partition, the others one for all.
    assert!(records > 0, "{name}: no records");
}

fn check_join(e: &Exchange, r: &JoinGroupRequest) {
    let name = e.name();
    assert_eq!(r.group_id, GROUP, "{name}");
    assert_eq!(r.session_timeout_ms, 10_000, "{name}");
    assert_eq!(
        r.rebalance_timeout_ms, e.client.rebalance_timeout_ms,
        "{name}"
    );
    assert_eq!(r.protocol_type, "consumer", "{name}");
    assert!(!r.protocols.is_empty(), "{name}");
    for p in &r.protocols {
        assert!(
            contains(&p.metadata, TOPIC),
            "{name}: {} subscribes",
            p.name
        );
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn gateway_responses_say_what_the_sessions_saw() {
    for e in exchanges() {
        let name = e.name();
        let (_, body) = decode_response(&e.response, e.api_key, e.version).expect("decodes");
        check_response(&name, &body);
    }
}

fn check_response(name: &str, body: &ResponseBody<'_>) {
    match body {
        ResponseBody::DescribeAcls(r) => {
            // The capture's one user, an admin: ALL on every topic and on
            // the cluster, READ on every group.
            assert_eq!((r.error_code, &r.error_message), (0, &None), "{name}");
            let mut seen: Vec<(i8, &str, i8, &str, i8)> = r
                .resources
                .iter()
                .flat_map(|res| {
                    res.acls.iter().map(move |a| {
                        (
                            res.resource_type,
                            res.resource_name.as_str(),
                            a.operation,
                            a.principal.as_str(),
                            a.permission_type,
                        )
                    })
                })
                .collect();
            seen.sort_unstable();
            let user = format!("User:{SASL_USER}");
            assert_eq!(
                seen,
                [
                    (2, "*", 2, user.as_str(), 3),
                    (3, "*", 3, user.as_str(), 3),
                    (4, "kafka-cluster", 2, user.as_str(), 3)
                ],
                "{name}"
            );
        }
        ResponseBody::SaslHandshake(r) => {
            assert_eq!(r.error_code, 0, "{name}");
            assert_eq!(
                r.mechanisms,
                ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                "{name}"
            );
        }
        ResponseBody::SaslAuthenticate(r) => {
            assert_eq!((r.error_code, &r.error_message), (0, &None), "{name}");
            // PLAIN is done in one step; SCRAM's server-first carries the
            // nonce, salt and iterations.
            let text = String::from_utf8(r.auth_bytes.clone()).expect("UTF-8");
            assert!(
                text.is_empty() || (text.starts_with("r=") && text.contains(",s=")),
                "{name}: {text}"
            );
        }
        ResponseBody::Produce(r) => {
            assert_eq!(r.topics[0].name, TOPIC, "{name}");
            assert!(
                r.topics[0].partitions.iter().all(|p| p.error_code == 0),
                "{name}"
            );
        }
        ResponseBody::Fetch(r) => assert_eq!(r.error_code, 0, "{name}"),
        ResponseBody::ListOffsets(r) => {
            let partitions = &r.topics[0].partitions;
            assert!(
                partitions
                    .iter()
                    .all(|p| p.error_code == 0 && p.offset == 0),
                "{name}"
            );
        }
        ResponseBody::Metadata(r) => {
            assert_eq!(r.brokers.len(), 1, "{name}");
            assert_eq!(r.brokers[0].host, "127.0.0.1", "{name}");
            let golden = r.topics.iter().find(|t| t.name.as_deref() == Some(TOPIC));
            let golden = golden.unwrap_or_else(|| panic!("{name}: no topic {TOPIC}"));
            assert_eq!(golden.partitions.len(), PARTITIONS as usize, "{name}");
        }
        ResponseBody::OffsetCommit(r) => {
            assert!(
                r.topics[0].partitions.iter().all(|p| p.error_code == 0),
                "{name}"
            );
        }
        ResponseBody::OffsetFetch(r) => assert_eq!(r.error_code, 0, "{name}"),
        ResponseBody::FindCoordinator(r) => {
            assert!(r.coordinators.iter().all(|c| c.error_code == 0), "{name}");
            assert_eq!(r.coordinators[0].host, "127.0.0.1", "{name}");
        }
        ResponseBody::JoinGroup(r) => assert!(!r.member_id.is_empty(), "{name}"),
        ResponseBody::Heartbeat(r) => assert_eq!(r.error_code, 0, "{name}"),
        ResponseBody::LeaveGroup(r) => assert_eq!(r.error_code, 0, "{name}"),
        ResponseBody::SyncGroup(r) => {
            assert_eq!(r.error_code, 0, "{name}");
            assert!(contains(&r.assignment, TOPIC), "{name}");
        }
        ResponseBody::DescribeGroups(r) => {
            assert_eq!(r.groups[0].group_id, GROUP, "{name}");
            assert_eq!(r.groups[0].group_state, "Empty", "{name}");
        }
        ResponseBody::ListGroups(r) => {
            let ids: Vec<&str> = r.groups.iter().map(|g| g.group_id.as_str()).collect();
            assert_eq!(ids, [GROUP], "{name}");
        }
        ResponseBody::ApiVersions(r) => {
            assert_eq!(r.error_code, 0, "{name}");
            assert_eq!(r.api_keys.len(), SUPPORTED_APIS.len(), "{name}");
        }
        ResponseBody::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0, "{name}"),
        ResponseBody::DeleteTopics(r) => assert_eq!(r.responses[0].error_code, 0, "{name}"),
        ResponseBody::InitProducerId(r) => {
            assert_eq!(r.error_code, 0, "{name}");
            assert!(r.producer_id >= 0, "{name}");
        }
        ResponseBody::DescribeConfigs(r) => {
            assert_eq!(r.results[0].error_code, 0, "{name}");
            assert!(!r.results[0].configs.is_empty(), "{name}");
        }
        ResponseBody::DeleteGroups(r) => {
            assert_eq!(r.results.len(), 1, "{name}");
            assert_eq!(
                (r.results[0].group_id.as_str(), r.results[0].error_code),
                (GROUP, 0),
                "{name}: deleted"
            );
        }
        ResponseBody::OffsetDelete(r) => {
            assert_eq!(r.error_code, 0, "{name}");
            assert!(
                r.topics[0].partitions.iter().all(|p| p.error_code == 0),
                "{name}: deleted"
            );
        }
        ResponseBody::DescribeCluster(r) => {
            assert_eq!((r.error_code, r.cluster_id.as_str()), (0, "kelp"), "{name}");
            assert_eq!(r.brokers.len(), 1, "{name}");
        }
        // One node leads every partition: no election is needed.
        ResponseBody::ElectLeaders(r) => {
            assert_eq!(r.error_code, 0, "{name}");
            for p in r
                .replica_election_results
                .iter()
                .flat_map(|t| &t.partition_result)
            {
                assert_eq!(p.error_code, 84, "{name}: ELECTION_NOT_NEEDED");
            }
        }
        ResponseBody::AlterPartitionReassignments(r) => assert_eq!(r.error_code, 0, "{name}"),
        ResponseBody::ListPartitionReassignments(r) => {
            assert_eq!(r.error_code, 0, "{name}");
            assert!(r.topics.is_empty(), "{name}: nothing moves");
        }
    }
}
