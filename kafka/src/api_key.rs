//! The Kafka APIs this codec speaks, the versions of each it supports, and
//! the version from which each API uses the flexible encoding (compact
//! strings and arrays, tagged fields).
//!
//! [`SUPPORTED_APIS`] is the one table the ApiVersions response is built
//! from; a request outside it is refused before its body is read.

/// A Kafka API, by its key on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ApiKey {
    /// 0: write record batches.
    Produce,
    /// 1: read record batches.
    Fetch,
    /// 2: offsets by timestamp, earliest, latest.
    ListOffsets,
    /// 3: brokers, topics, partitions, leaders.
    Metadata,
    /// 8: commit a group's offsets.
    OffsetCommit,
    /// 9: read a group's committed offsets.
    OffsetFetch,
    /// 10: which broker coordinates a group or transaction.
    FindCoordinator,
    /// 11: join a consumer group.
    JoinGroup,
    /// 12: a member's liveness.
    Heartbeat,
    /// 13: leave a consumer group.
    LeaveGroup,
    /// 14: hand out (leader) or receive assignments.
    SyncGroup,
    /// 15: describe groups and their members.
    DescribeGroups,
    /// 16: list groups.
    ListGroups,
    /// 18: which APIs and versions the broker supports.
    ApiVersions,
    /// 19: create topics.
    CreateTopics,
    /// 20: delete topics.
    DeleteTopics,
    /// 22: a producer id and epoch for idempotent producers.
    InitProducerId,
    /// 32: topic and broker configs.
    DescribeConfigs,
}

/// The versions of one API this codec decodes requests and encodes
/// responses for, and where its flexible encoding starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersionRange {
    /// The API.
    pub api_key: ApiKey,
    /// Lowest supported version.
    pub min: i16,
    /// Highest supported version.
    pub max: i16,
    /// First version with the flexible encoding (from the Kafka message
    /// definitions' `flexibleVersions`).
    pub flexible_min: i16,
}

const fn range(api_key: ApiKey, min: i16, max: i16, flexible_min: i16) -> ApiVersionRange {
    ApiVersionRange {
        api_key,
        min,
        max,
        flexible_min,
    }
}

/// Every supported API with its version range, in api-key order.
///
/// Why these ranges (docs/kafka.md has the details): the minimums follow
/// Kafka 4.0's baseline (KIP-896) where older versions need legacy message
/// sets (Produce v0-2, Fetch v0-3) or nothing current sends them; the
/// maximums reach at least the highest version librdkafka 2.x, kafka-python
/// 2.x/3.x and kafkajs 2.x send, except where a newer version needs topic
/// ids or KIP-848 groups (clients then use our maximum, which they all
/// support).
pub const SUPPORTED_APIS: [ApiVersionRange; 18] = [
    range(ApiKey::Produce, 3, 9, 9),
    range(ApiKey::Fetch, 4, 12, 12),
    range(ApiKey::ListOffsets, 1, 7, 6),
    range(ApiKey::Metadata, 0, 12, 9),
    range(ApiKey::OffsetCommit, 0, 8, 8),
    range(ApiKey::OffsetFetch, 0, 7, 6),
    range(ApiKey::FindCoordinator, 0, 4, 3),
    range(ApiKey::JoinGroup, 0, 9, 6),
    range(ApiKey::Heartbeat, 0, 4, 4),
    range(ApiKey::LeaveGroup, 0, 5, 4),
    range(ApiKey::SyncGroup, 0, 5, 4),
    range(ApiKey::DescribeGroups, 0, 5, 5),
    range(ApiKey::ListGroups, 0, 4, 3),
    range(ApiKey::ApiVersions, 0, 4, 3),
    range(ApiKey::CreateTopics, 0, 7, 5),
    range(ApiKey::DeleteTopics, 0, 6, 4),
    range(ApiKey::InitProducerId, 0, 4, 2),
    range(ApiKey::DescribeConfigs, 0, 4, 4),
];

impl ApiKey {
    /// Every API, in api-key order.
    pub const ALL: [ApiKey; 18] = [
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::ListOffsets,
        ApiKey::Metadata,
        ApiKey::OffsetCommit,
        ApiKey::OffsetFetch,
        ApiKey::FindCoordinator,
        ApiKey::JoinGroup,
        ApiKey::Heartbeat,
        ApiKey::LeaveGroup,
        ApiKey::SyncGroup,
        ApiKey::DescribeGroups,
        ApiKey::ListGroups,
        ApiKey::ApiVersions,
        ApiKey::CreateTopics,
        ApiKey::DeleteTopics,
        ApiKey::InitProducerId,
        ApiKey::DescribeConfigs,
    ];

    /// The key on the wire.
    pub const fn code(self) -> i16 {
        match self {
            ApiKey::Produce => 0,
            ApiKey::Fetch => 1,
            ApiKey::ListOffsets => 2,
            ApiKey::Metadata => 3,
            ApiKey::OffsetCommit => 8,
            ApiKey::OffsetFetch => 9,
            ApiKey::FindCoordinator => 10,
            ApiKey::JoinGroup => 11,
            ApiKey::Heartbeat => 12,
            ApiKey::LeaveGroup => 13,
            ApiKey::SyncGroup => 14,
            ApiKey::DescribeGroups => 15,
            ApiKey::ListGroups => 16,
            ApiKey::ApiVersions => 18,
            ApiKey::CreateTopics => 19,
            ApiKey::DeleteTopics => 20,
            ApiKey::InitProducerId => 22,
            ApiKey::DescribeConfigs => 32,
        }
    }

    /// The API with wire key `code`, if supported.
    pub fn from_code(code: i16) -> Option<ApiKey> {
        ApiKey::ALL.into_iter().find(|k| k.code() == code)
    }

    /// This API's row of [`SUPPORTED_APIS`].
    pub fn versions(self) -> ApiVersionRange {
        // ALL and SUPPORTED_APIS list the keys in the same order (a test
        // checks it), so the index lookup cannot miss.
        let index = ApiKey::ALL.iter().position(|k| *k == self).unwrap_or(0);
        SUPPORTED_APIS[index]
    }

    /// Whether `version` is in the supported range.
    pub fn supports(self, version: i16) -> bool {
        let r = self.versions();
        (r.min..=r.max).contains(&version)
    }

    /// Whether `version` uses the flexible encoding. Versions above the
    /// supported maximum count as flexible when the API has flexible
    /// versions, as Kafka does when it parses the header of a request it
    /// will refuse.
    pub fn is_flexible(self, version: i16) -> bool {
        version >= self.versions().flexible_min
    }

    /// The request header version for `version`: 2 when flexible, else 1.
    /// (Header v0, without a client id, is only used by ControlledShutdown
    /// v0, which this codec does not speak.)
    pub fn request_header_version(self, version: i16) -> i16 {
        if self.is_flexible(version) {
            2
        } else {
            1
        }
    }

    /// The response header version for `version`: 1 when flexible, else 0;
    /// always 0 for ApiVersions, so a client that does not know the broker's
    /// versions yet can read the answer.
    pub fn response_header_version(self, version: i16) -> i16 {
        if self != ApiKey::ApiVersions && self.is_flexible(version) {
            1
        } else {
            0
        }
    }
}
