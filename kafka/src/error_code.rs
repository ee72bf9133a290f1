//! Kafka's error codes that the gateway answers with (from Kafka's
//! `Errors` table; the numbers are the protocol's).

/// No error.
pub const NONE: i16 = 0;
/// An unexpected server error.
pub const UNKNOWN_SERVER_ERROR: i16 = -1;
/// The requested offset is outside the partition's range.
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
/// A record failed its CRC or is malformed.
pub const CORRUPT_MESSAGE: i16 = 2;
/// The topic or partition does not exist.
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// The partition has no leader right now (a retriable error).
pub const LEADER_NOT_AVAILABLE: i16 = 5;
/// The broker is not the partition's leader.
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
/// The request timed out.
pub const REQUEST_TIMED_OUT: i16 = 7;
/// A record batch is larger than allowed.
pub const MESSAGE_TOO_LARGE: i16 = 10;
/// The coordinator is loading.
pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
/// The coordinator is not available.
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
/// The broker is not the coordinator.
pub const NOT_COORDINATOR: i16 = 16;
/// The topic name is invalid.
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
/// A record batch is malformed.
pub const INVALID_RECORD: i16 = 87;
/// The generation is not the group's.
pub const ILLEGAL_GENERATION: i16 = 22;
/// The member's protocols do not match the group's.
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
/// The group id is invalid.
pub const INVALID_GROUP_ID: i16 = 24;
/// The member id is not known.
pub const UNKNOWN_MEMBER_ID: i16 = 25;
/// The session timeout is outside the allowed range.
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
/// The group is rebalancing.
pub const REBALANCE_IN_PROGRESS: i16 = 27;
/// A committed offset's metadata is too large.
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
/// The API version is not supported.
pub const UNSUPPORTED_VERSION: i16 = 35;
/// The topic already exists.
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
/// The partition count is invalid.
pub const INVALID_PARTITIONS: i16 = 37;
/// The replication factor is invalid.
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
/// The request is invalid.
pub const INVALID_REQUEST: i16 = 42;
/// The broker could not read or write its storage (retriable).
pub const KAFKA_STORAGE_ERROR: i16 = 56;
/// A producer sequence number is out of order.
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
/// A batch was already written (idempotent producer).
pub const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
/// The producer epoch is stale.
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
/// The group does not exist.
pub const GROUP_ID_NOT_FOUND: i16 = 69;
/// The producer id is not known.
pub const UNKNOWN_PRODUCER_ID: i16 = 59;
/// The member must rejoin with the member id it was given (KIP-394).
pub const MEMBER_ID_REQUIRED: i16 = 79;
/// A static member was fenced by a newer instance.
pub const FENCED_INSTANCE_ID: i16 = 82;
/// The group is at its size limit.
pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
/// The group has members and cannot be deleted.
pub const NON_EMPTY_GROUP: i16 = 68;
/// OffsetDelete: a member of the group is subscribed to the topic.
pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
/// The producer was fenced by a newer one.
pub const PRODUCER_FENCED: i16 = 90;
/// Pending offsets exist for the partition (require_stable).
pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;
/// The leader epoch is older than the broker's.
pub const FENCED_LEADER_EPOCH: i16 = 74;
/// The leader epoch is newer than the broker's.
pub const UNKNOWN_LEADER_EPOCH: i16 = 75;
/// A replica assignment names no broker, a broker twice, or one that is
/// not registered.
pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
/// The partition's leader is already the one an election would choose.
pub const ELECTION_NOT_NEEDED: i16 = 84;
/// A reassignment was cancelled where none is under way.
pub const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;
/// The principal may not do this to the topic.
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
/// The principal may not do this to the cluster.
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
/// The server does not enable the SASL mechanism the client asked for.
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
/// A SASL request out of its place in the exchange.
pub const ILLEGAL_SASL_STATE: i16 = 34;
/// SASL authentication failed (wrong user name or password).
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
/// No authorizer is configured (the gateway runs without `--auth`).
pub const SECURITY_DISABLED: i16 = 54;
