//! [`ErrorCode`]: Kafka's numeric error codes, as the coordinator answers them.
//!
//! The numbers are Kafka's own (the protocol guide's error table), so the
//! gateway copies them onto the wire unchanged.

/// A Kafka protocol error code. [`ErrorCode::NONE`] is success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ErrorCode(pub i16);

impl ErrorCode {
    /// Success.
    pub const NONE: ErrorCode = ErrorCode(0);
    /// The topic or partition is not known to this broker.
    pub const UNKNOWN_TOPIC_OR_PARTITION: ErrorCode = ErrorCode(3);
    /// An offset's metadata string is longer than
    /// [`OFFSET_METADATA_BYTES_MAX`](crate::group::OFFSET_METADATA_BYTES_MAX).
    pub const OFFSET_METADATA_TOO_LARGE: ErrorCode = ErrorCode(12);
    /// The coordinator cannot take the request now (a limit on groups is
    /// reached); the client retries, possibly elsewhere.
    pub const COORDINATOR_NOT_AVAILABLE: ErrorCode = ErrorCode(15);
    /// The generation id in the request is not the group's.
    pub const ILLEGAL_GENERATION: ErrorCode = ErrorCode(22);
    /// The member's protocol type or protocols are incompatible with the group.
    pub const INCONSISTENT_GROUP_PROTOCOL: ErrorCode = ErrorCode(23);
    /// The group id is empty or too long.
    pub const INVALID_GROUP_ID: ErrorCode = ErrorCode(24);
    /// The coordinator does not know this member id.
    pub const UNKNOWN_MEMBER_ID: ErrorCode = ErrorCode(25);
    /// The session timeout is outside the coordinator's allowed range.
    pub const INVALID_SESSION_TIMEOUT: ErrorCode = ErrorCode(26);
    /// The group is rebalancing: the member must rejoin.
    pub const REBALANCE_IN_PROGRESS: ErrorCode = ErrorCode(27);
    /// Committing would take the group over
    /// [`OFFSETS_PER_GROUP_MAX`](crate::group::OFFSETS_PER_GROUP_MAX).
    pub const INVALID_COMMIT_OFFSET_SIZE: ErrorCode = ErrorCode(28);
    /// The group still has members, so it cannot be deleted.
    pub const NON_EMPTY_GROUP: ErrorCode = ErrorCode(68);
    /// The group id does not exist.
    pub const GROUP_ID_NOT_FOUND: ErrorCode = ErrorCode(69);
    /// OffsetDelete: a member of the group is subscribed to the topic.
    pub const GROUP_SUBSCRIBED_TO_TOPIC: ErrorCode = ErrorCode(86);
    /// JoinGroup v4+: the member must rejoin with the member id returned.
    pub const MEMBER_ID_REQUIRED: ErrorCode = ErrorCode(79);
    /// The group already has its maximum number of members.
    pub const GROUP_MAX_SIZE_REACHED: ErrorCode = ErrorCode(81);
    /// Another member registered with this `group.instance.id` since.
    pub const FENCED_INSTANCE_ID: ErrorCode = ErrorCode(82);

    /// Whether this is [`ErrorCode::NONE`].
    pub fn is_ok(self) -> bool {
        self == ErrorCode::NONE
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    /// The numbers clients depend on, from Kafka's protocol error table.
    #[test]
    fn codes_match_kafka() {
        let table = [
            (ErrorCode::NONE, 0),
            (ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, 3),
            (ErrorCode::OFFSET_METADATA_TOO_LARGE, 12),
            (ErrorCode::COORDINATOR_NOT_AVAILABLE, 15),
            (ErrorCode::ILLEGAL_GENERATION, 22),
            (ErrorCode::INCONSISTENT_GROUP_PROTOCOL, 23),
            (ErrorCode::INVALID_GROUP_ID, 24),
            (ErrorCode::UNKNOWN_MEMBER_ID, 25),
            (ErrorCode::INVALID_SESSION_TIMEOUT, 26),
            (ErrorCode::REBALANCE_IN_PROGRESS, 27),
            (ErrorCode::INVALID_COMMIT_OFFSET_SIZE, 28),
            (ErrorCode::NON_EMPTY_GROUP, 68),
            (ErrorCode::GROUP_ID_NOT_FOUND, 69),
            (ErrorCode::MEMBER_ID_REQUIRED, 79),
            (ErrorCode::GROUP_MAX_SIZE_REACHED, 81),
            (ErrorCode::FENCED_INSTANCE_ID, 82),
        ];
        for (code, number) in table {
            assert_eq!(code.0, number, "{code:?}");
        }
    }
}
