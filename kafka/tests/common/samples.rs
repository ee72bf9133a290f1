//! One richly populated request and response of every API, every optional
//! field set to a non-default value, for round trips at every version.

use kelp_kafka::api::alter_partition_reassignments::*;
use kelp_kafka::api::api_versions::*;
use kelp_kafka::api::create_topics::*;
use kelp_kafka::api::delete_groups::*;
use kelp_kafka::api::delete_topics::*;
use kelp_kafka::api::describe_acls::*;
use kelp_kafka::api::describe_cluster::*;
use kelp_kafka::api::describe_configs::*;
use kelp_kafka::api::describe_groups::*;
use kelp_kafka::api::elect_leaders::*;
use kelp_kafka::api::fetch::*;
use kelp_kafka::api::find_coordinator::*;
use kelp_kafka::api::heartbeat::*;
use kelp_kafka::api::init_producer_id::*;
use kelp_kafka::api::join_group::*;
use kelp_kafka::api::leave_group::*;
use kelp_kafka::api::list_groups::*;
use kelp_kafka::api::list_offsets::*;
use kelp_kafka::api::list_partition_reassignments::*;
use kelp_kafka::api::metadata::*;
use kelp_kafka::api::offset_commit::*;
use kelp_kafka::api::offset_delete::*;
use kelp_kafka::api::offset_fetch::*;
use kelp_kafka::api::produce::*;
use kelp_kafka::api::sasl_authenticate::*;
use kelp_kafka::api::sasl_handshake::*;
use kelp_kafka::api::sync_group::*;
use kelp_kafka::{RequestBody, ResponseBody, Uuid};

fn s(v: &str) -> String {
    v.to_owned()
}

/// A request of every API.
pub fn requests(records: &[u8]) -> Vec<RequestBody<'_>> {
    vec![
        RequestBody::Produce(ProduceRequest {
            transactional_id: Some(s("tx")),
            acks: -1,
            timeout_ms: 1500,
            topics: vec![ProduceTopic {
                name: s("orders"),
                partitions: vec![
                    ProducePartition {
                        index: 0,
                        records: Some(records),
                    },
                    ProducePartition {
                        index: 1,
                        records: None,
                    },
                ],
            }],
        }),
        RequestBody::Fetch(FetchRequest {
            replica_id: -1,
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 1 << 20,
            isolation_level: 1,
            session_id: 3,
            session_epoch: 4,
            topics: vec![FetchTopic {
                topic: s("orders"),
                partitions: vec![FetchPartition {
                    partition: 2,
                    current_leader_epoch: 5,
                    fetch_offset: 1234,
                    last_fetched_epoch: 6,
                    log_start_offset: 7,
                    partition_max_bytes: 65536,
                }],
            }],
            forgotten_topics_data: vec![ForgottenTopic {
                topic: s("old"),
                partitions: vec![1, 2],
            }],
            rack_id: s("rack-a"),
        }),
        RequestBody::ListOffsets(ListOffsetsRequest {
            replica_id: -1,
            isolation_level: 1,
            topics: vec![ListOffsetsTopic {
                name: s("orders"),
                partitions: vec![ListOffsetsPartition {
                    partition_index: 3,
                    current_leader_epoch: 2,
                    timestamp: 1_700_000_000_000,
                }],
            }],
        }),
        RequestBody::Metadata(MetadataRequest {
            topics: Some(vec![MetadataRequestTopic {
                topic_id: Uuid([9; 16]),
                name: Some(s("orders")),
            }]),
            allow_auto_topic_creation: false,
            include_cluster_authorized_operations: true,
            include_topic_authorized_operations: true,
        }),
        RequestBody::OffsetCommit(OffsetCommitRequest {
            group_id: s("g"),
            generation_id: 4,
            member_id: s("m-1"),
            group_instance_id: Some(s("i-1")),
            retention_time_ms: 86_400_000,
            topics: vec![OffsetCommitTopic {
                name: s("orders"),
                partitions: vec![OffsetCommitPartition {
                    partition_index: 0,
                    committed_offset: 99,
                    committed_leader_epoch: 3,
                    commit_timestamp: 1_700_000_000_000,
                    committed_metadata: Some(s("meta")),
                }],
            }],
        }),
        RequestBody::OffsetFetch(OffsetFetchRequest {
            group_id: s("g"),
            topics: Some(vec![OffsetFetchTopic {
                name: s("orders"),
                partition_indexes: vec![0, 1, 2],
            }]),
            require_stable: true,
        }),
        RequestBody::FindCoordinator(FindCoordinatorRequest {
            key_type: 1,
            coordinator_keys: vec![s("g")],
        }),
        RequestBody::JoinGroup(JoinGroupRequest {
            group_id: s("g"),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            member_id: s("m-1"),
            group_instance_id: Some(s("i-1")),
            protocol_type: s("consumer"),
            protocols: vec![
                JoinGroupProtocol {
                    name: s("range"),
                    metadata: vec![0, 1, 0, 0, 0, 1],
                },
                JoinGroupProtocol {
                    name: s("roundrobin"),
                    metadata: vec![],
                },
            ],
            reason: Some(s("rejoin")),
        }),
        RequestBody::Heartbeat(HeartbeatRequest {
            group_id: s("g"),
            generation_id: 4,
            member_id: s("m-1"),
            group_instance_id: Some(s("i-1")),
        }),
        RequestBody::LeaveGroup(LeaveGroupRequest {
            group_id: s("g"),
            members: vec![LeavingMember {
                member_id: s("m-1"),
                group_instance_id: Some(s("i-1")),
                reason: Some(s("shutdown")),
            }],
        }),
        RequestBody::SyncGroup(SyncGroupRequest {
            group_id: s("g"),
            generation_id: 4,
            member_id: s("m-1"),
            group_instance_id: Some(s("i-1")),
            protocol_type: Some(s("consumer")),
            protocol_name: Some(s("range")),
            assignments: vec![SyncGroupAssignment {
                member_id: s("m-1"),
                assignment: vec![1, 2, 3],
            }],
        }),
        RequestBody::DescribeGroups(DescribeGroupsRequest {
            groups: vec![s("g"), s("h")],
            include_authorized_operations: true,
        }),
        RequestBody::ListGroups(ListGroupsRequest {
            states_filter: vec![s("Stable")],
        }),
        RequestBody::SaslHandshake(SaslHandshakeRequest {
            mechanism: s("SCRAM-SHA-256"),
        }),
        RequestBody::ApiVersions(ApiVersionsRequest {
            client_software_name: s("kelp"),
            client_software_version: s("1.0"),
        }),
        RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: s("orders"),
                num_partitions: -1,
                replication_factor: -1,
                assignments: vec![CreatableReplicaAssignment {
                    partition_index: 0,
                    broker_ids: vec![1],
                }],
                configs: vec![CreatableTopicConfig {
                    name: s("retention.ms"),
                    value: None,
                }],
            }],
            timeout_ms: 1000,
            validate_only: true,
        }),
        RequestBody::DeleteTopics(DeleteTopicsRequest {
            topics: vec![DeleteTopicState {
                name: Some(s("orders")),
                topic_id: Uuid([1; 16]),
            }],
            timeout_ms: 1000,
        }),
        RequestBody::InitProducerId(InitProducerIdRequest {
            transactional_id: Some(s("tx")),
            transaction_timeout_ms: 60_000,
            producer_id: 12,
            producer_epoch: 3,
        }),
        RequestBody::DescribeAcls(DescribeAclsRequest {
            resource_type_filter: 2,
            resource_name_filter: Some(s("orders")),
            pattern_type_filter: 2,
            principal_filter: Some(s("User:bob")),
            host_filter: None,
            operation: 4,
            permission_type: 3,
        }),
        RequestBody::DescribeConfigs(DescribeConfigsRequest {
            resources: vec![DescribeConfigsResource {
                resource_type: 2,
                resource_name: s("orders"),
                configuration_keys: Some(vec![s("retention.ms")]),
            }],
            include_synonyms: true,
            include_documentation: true,
        }),
        RequestBody::SaslAuthenticate(SaslAuthenticateRequest {
            auth_bytes: b"n,,n=alice,r=nonce".to_vec(),
        }),
        RequestBody::DeleteGroups(DeleteGroupsRequest {
            groups_names: vec![s("g"), s("h")],
        }),
        RequestBody::ElectLeaders(ElectLeadersRequest {
            election_type: 1,
            topic_partitions: Some(vec![ElectLeadersTopicPartitions {
                topic: s("orders"),
                partitions: vec![0, 2],
            }]),
            timeout_ms: 30_000,
        }),
        RequestBody::AlterPartitionReassignments(AlterPartitionReassignmentsRequest {
            timeout_ms: 30_000,
            topics: vec![ReassignableTopic {
                name: s("orders"),
                partitions: vec![
                    ReassignablePartition {
                        partition_index: 0,
                        replicas: Some(vec![1, 2]),
                    },
                    ReassignablePartition {
                        partition_index: 1,
                        replicas: None,
                    },
                ],
            }],
        }),
        RequestBody::ListPartitionReassignments(ListPartitionReassignmentsRequest {
            timeout_ms: 30_000,
            topics: Some(vec![ListPartitionReassignmentsTopics {
                name: s("orders"),
                partition_indexes: vec![1, 3],
            }]),
        }),
        RequestBody::OffsetDelete(OffsetDeleteRequest {
            group_id: s("g"),
            topics: vec![OffsetDeleteRequestTopic {
                name: s("orders"),
                partitions: vec![OffsetDeleteRequestPartition { partition_index: 2 }],
            }],
        }),
        RequestBody::DescribeCluster(DescribeClusterRequest {
            include_cluster_authorized_operations: true,
            endpoint_type: 1,
        }),
    ]
}

/// A response of every API.
pub fn responses(records: &[u8]) -> Vec<ResponseBody<'_>> {
    vec![
        ResponseBody::Produce(ProduceResponse {
            topics: vec![ProduceTopicResult {
                name: s("orders"),
                partitions: vec![ProducePartitionResult {
                    index: 0,
                    error_code: 0,
                    base_offset: 100,
                    log_append_time_ms: 1_700_000_000_000,
                    log_start_offset: 5,
                    record_errors: vec![BatchIndexError {
                        batch_index: 1,
                        batch_index_error_message: Some(s("bad")),
                    }],
                    error_message: Some(s("partly")),
                }],
            }],
            throttle_time_ms: 10,
        }),
        ResponseBody::Fetch(FetchResponse {
            throttle_time_ms: 10,
            error_code: 0,
            session_id: 3,
            topics: vec![FetchTopicData {
                topic: s("orders"),
                partitions: vec![FetchPartitionData {
                    partition_index: 2,
                    error_code: 0,
                    high_watermark: 2000,
                    last_stable_offset: 1999,
                    log_start_offset: 10,
                    aborted_transactions: Some(vec![AbortedTransaction {
                        producer_id: 12,
                        first_offset: 1500,
                    }]),
                    preferred_read_replica: 1,
                    records: Some(records),
                }],
            }],
        }),
        ResponseBody::ListOffsets(ListOffsetsResponse {
            throttle_time_ms: 10,
            topics: vec![ListOffsetsTopicResult {
                name: s("orders"),
                partitions: vec![ListOffsetsPartitionResult {
                    partition_index: 3,
                    error_code: 0,
                    timestamp: 1_700_000_000_000,
                    offset: 77,
                    leader_epoch: 2,
                }],
            }],
        }),
        ResponseBody::Metadata(MetadataResponse {
            throttle_time_ms: 10,
            brokers: vec![MetadataBroker {
                node_id: 1,
                host: s("127.0.0.1"),
                port: 9092,
                rack: Some(s("rack-a")),
            }],
            cluster_id: Some(s("kelp")),
            controller_id: 1,
            topics: vec![MetadataTopic {
                error_code: 0,
                name: Some(s("orders")),
                topic_id: Uuid([9; 16]),
                is_internal: true,
                partitions: vec![MetadataPartition {
                    error_code: 0,
                    partition_index: 0,
                    leader_id: 1,
                    leader_epoch: 3,
                    replica_nodes: vec![1, 2],
                    isr_nodes: vec![1],
                    offline_replicas: vec![2],
                }],
                topic_authorized_operations: 0x0f,
            }],
            cluster_authorized_operations: 0x1f,
        }),
        ResponseBody::OffsetCommit(OffsetCommitResponse {
            throttle_time_ms: 10,
            topics: vec![OffsetCommitTopicResult {
                name: s("orders"),
                partitions: vec![OffsetCommitPartitionResult {
                    partition_index: 0,
                    error_code: 27,
                }],
            }],
        }),
        ResponseBody::OffsetFetch(OffsetFetchResponse {
            throttle_time_ms: 10,
            topics: vec![OffsetFetchTopicResult {
                name: s("orders"),
                partitions: vec![OffsetFetchPartition {
                    partition_index: 0,
                    committed_offset: 99,
                    committed_leader_epoch: 3,
                    metadata: Some(s("meta")),
                    error_code: 0,
                }],
            }],
            error_code: 14,
        }),
        ResponseBody::FindCoordinator(FindCoordinatorResponse {
            throttle_time_ms: 10,
            coordinators: vec![Coordinator {
                key: s("g"),
                node_id: 1,
                host: s("127.0.0.1"),
                port: 9092,
                error_code: 0,
                error_message: Some(s("ok")),
            }],
        }),
        ResponseBody::JoinGroup(JoinGroupResponse {
            throttle_time_ms: 10,
            error_code: 0,
            generation_id: 5,
            protocol_type: Some(s("consumer")),
            protocol_name: Some(s("range")),
            leader: s("m-1"),
            skip_assignment: true,
            member_id: s("m-1"),
            members: vec![JoinGroupMember {
                member_id: s("m-1"),
                group_instance_id: Some(s("i-1")),
                metadata: vec![0, 1],
            }],
        }),
        ResponseBody::Heartbeat(HeartbeatResponse {
            throttle_time_ms: 10,
            error_code: 27,
        }),
        ResponseBody::LeaveGroup(LeaveGroupResponse {
            throttle_time_ms: 10,
            error_code: 0,
            members: vec![LeftMember {
                member_id: s("m-1"),
                group_instance_id: Some(s("i-1")),
                error_code: 25,
            }],
        }),
        ResponseBody::SyncGroup(SyncGroupResponse {
            throttle_time_ms: 10,
            error_code: 0,
            protocol_type: Some(s("consumer")),
            protocol_name: Some(s("range")),
            assignment: vec![4, 5, 6],
        }),
        ResponseBody::DescribeGroups(DescribeGroupsResponse {
            throttle_time_ms: 10,
            groups: vec![DescribedGroup {
                error_code: 0,
                group_id: s("g"),
                group_state: s("Stable"),
                protocol_type: s("consumer"),
                protocol_data: s("range"),
                members: vec![DescribedMember {
                    member_id: s("m-1"),
                    group_instance_id: Some(s("i-1")),
                    client_id: s("c"),
                    client_host: s("/127.0.0.1"),
                    member_metadata: vec![1],
                    member_assignment: vec![2],
                }],
                authorized_operations: 0x0f,
            }],
        }),
        ResponseBody::ListGroups(ListGroupsResponse {
            throttle_time_ms: 10,
            error_code: 0,
            groups: vec![ListedGroup {
                group_id: s("g"),
                protocol_type: s("consumer"),
                group_state: s("Stable"),
            }],
        }),
        ResponseBody::SaslHandshake(SaslHandshakeResponse {
            error_code: 0,
            mechanisms: vec![s("PLAIN"), s("SCRAM-SHA-256")],
        }),
        ResponseBody::ApiVersions(ApiVersionsResponse::supported(0)),
        ResponseBody::CreateTopics(CreateTopicsResponse {
            throttle_time_ms: 10,
            topics: vec![CreatableTopicResult {
                name: s("orders"),
                topic_id: Uuid([2; 16]),
                error_code: 0,
                error_message: Some(s("none")),
                topic_config_error_code: 29,
                num_partitions: 3,
                replication_factor: 1,
                configs: Some(vec![CreatableTopicConfigs {
                    name: s("retention.ms"),
                    value: Some(s("1000")),
                    read_only: false,
                    config_source: 1,
                    is_sensitive: false,
                }]),
            }],
        }),
        ResponseBody::DeleteTopics(DeleteTopicsResponse {
            throttle_time_ms: 10,
            responses: vec![DeletableTopicResult {
                name: Some(s("orders")),
                topic_id: Uuid([1; 16]),
                error_code: 3,
                error_message: Some(s("unknown")),
            }],
        }),
        ResponseBody::InitProducerId(InitProducerIdResponse {
            throttle_time_ms: 10,
            error_code: 0,
            producer_id: 12,
            producer_epoch: 3,
        }),
        ResponseBody::DescribeAcls(DescribeAclsResponse {
            throttle_time_ms: 0,
            error_code: 0,
            error_message: None,
            resources: vec![DescribeAclsResource {
                resource_type: 2,
                resource_name: s("orders"),
                pattern_type: 4,
                acls: vec![AclDescription {
                    principal: s("User:bob"),
                    host: s("*"),
                    operation: 4,
                    permission_type: 3,
                }],
            }],
        }),
        ResponseBody::DescribeConfigs(DescribeConfigsResponse {
            throttle_time_ms: 10,
            results: vec![DescribeConfigsResult {
                error_code: 0,
                error_message: Some(s("none")),
                resource_type: 2,
                resource_name: s("orders"),
                configs: vec![DescribeConfigsEntry {
                    name: s("retention.ms"),
                    value: Some(s("1000")),
                    read_only: false,
                    is_default: true,
                    config_source: 1,
                    is_sensitive: false,
                    synonyms: vec![DescribeConfigsSynonym {
                        name: s("log.retention.ms"),
                        value: None,
                        source: 5,
                    }],
                    config_type: 5,
                    documentation: Some(s("how long")),
                }],
            }],
        }),
        ResponseBody::SaslAuthenticate(SaslAuthenticateResponse {
            error_code: 58,
            error_message: Some(s("wrong user name or password")),
            auth_bytes: b"r=nonce,s=salt,i=4096".to_vec(),
            session_lifetime_ms: 3_600_000,
        }),
        ResponseBody::DeleteGroups(DeleteGroupsResponse {
            throttle_time_ms: 10,
            results: vec![
                DeletableGroupResult {
                    group_id: s("g"),
                    error_code: 0,
                },
                DeletableGroupResult {
                    group_id: s("h"),
                    error_code: 68,
                },
            ],
        }),
        ResponseBody::ElectLeaders(ElectLeadersResponse {
            throttle_time_ms: 10,
            error_code: 42,
            replica_election_results: vec![ReplicaElectionResult {
                topic: s("orders"),
                partition_result: vec![ElectionPartitionResult {
                    partition_id: 2,
                    error_code: 84,
                    error_message: Some(s("not needed")),
                }],
            }],
        }),
        ResponseBody::AlterPartitionReassignments(AlterPartitionReassignmentsResponse {
            throttle_time_ms: 10,
            error_code: 0,
            error_message: Some(s("partly")),
            responses: vec![ReassignableTopicResponse {
                name: s("orders"),
                partitions: vec![ReassignablePartitionResponse {
                    partition_index: 0,
                    error_code: 39,
                    error_message: Some(s("broker 1 is not registered")),
                }],
            }],
        }),
        ResponseBody::ListPartitionReassignments(ListPartitionReassignmentsResponse {
            throttle_time_ms: 10,
            error_code: 0,
            error_message: None,
            topics: vec![OngoingTopicReassignment {
                name: s("orders"),
                partitions: vec![OngoingPartitionReassignment {
                    partition_index: 1,
                    replicas: vec![0, 1],
                    adding_replicas: vec![1],
                    removing_replicas: vec![],
                }],
            }],
        }),
        ResponseBody::OffsetDelete(OffsetDeleteResponse {
            error_code: 0,
            throttle_time_ms: 10,
            topics: vec![OffsetDeleteResponseTopic {
                name: s("orders"),
                partitions: vec![OffsetDeleteResponsePartition {
                    partition_index: 2,
                    error_code: 86,
                }],
            }],
        }),
        ResponseBody::DescribeCluster(DescribeClusterResponse {
            throttle_time_ms: 10,
            error_code: 0,
            error_message: None,
            endpoint_type: 1,
            cluster_id: s("kelp"),
            controller_id: 0,
            brokers: vec![DescribeClusterBroker {
                broker_id: 0,
                host: s("localhost"),
                port: 9092,
                rack: None,
            }],
            cluster_authorized_operations: i32::MIN,
        }),
    ]
}
