//! Why a Kafka gateway connection ends, or a gateway write to the filer or
//! a batch conversion fails: typed, so callers choose the Kafka error code
//! or log line from the kind, not from a string.

use crate::connection::Expiry;

/// Why the gateway stops reading a connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectionEnd {
    /// The client closed it.
    #[error("the client closed it")]
    Closed,
    /// A read failed.
    #[error("read: {0}")]
    Read(#[from] std::io::Error),
    /// A timeout of the connection ran out.
    #[error(transparent)]
    Expired(#[from] Expiry),
}

/// Why a request got no answer and its connection closes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerError {
    /// The request could not be decoded.
    #[error("malformed request: {0}")]
    Malformed(kafka::DecodeError),
    /// The answer could not be encoded at the request's version.
    #[error("encoding the answer: {0}")]
    Encode(#[from] kafka::EncodeError),
    /// A request other than ApiVersions or SASL before the connection
    /// authenticated, or after its authentication failed.
    #[error("a {api_key:?} request refused: {denied}")]
    Unauthenticated {
        api_key: kafka::ApiKey,
        denied: auth::Denied,
    },
}

/// Why the gateway could not store an object in the filer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// No object path can name it (a group id too long for one).
    #[error("group id {group_id:?} is too long for a filer path")]
    GroupIdTooLong {
        /// The group.
        group_id: String,
    },
    /// The topic name does not make a kelp topic name.
    #[error(transparent)]
    TopicName(#[from] control::ControlError),
    /// The filer refused or failed the write.
    #[error(transparent)]
    Filer(#[from] filer::FilerError),
    /// The blocking task that wrote it did not finish.
    #[error("the filer task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Why stored kelp batches could not be turned into Kafka batches.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConvertError {
    /// The stored bytes end inside a batch.
    #[error("a stored batch is cut short")]
    CutShort,
    /// A stored batch does not validate.
    #[error("a stored batch is invalid: {0}")]
    Invalid(#[from] wire::DecodeError),
    /// The Kafka batch could not be encoded.
    #[error("encoding a Kafka batch: {0}")]
    Encode(#[from] kafka::EncodeError),
}
