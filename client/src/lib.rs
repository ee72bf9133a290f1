//! kelp's client SDK: admin requests, a producer that routes records by key
//! to the shard owning each segment, and a subscriber that reads every
//! segment of a topic, over TCP or QUIC.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kelp_client::ClientError> {
//! use kelp_client::{Client, ClientOptions, FetchFrom, ProducerConfig, SubscribeOptions, Transport};
//! let client = Client::connect("127.0.0.1:7420", Transport::Tcp, ClientOptions::default()).await?;
//! client.create_topic("demo/events", 4).await?;
//! let producer = client.producer("demo/events", ProducerConfig::default()).await?;
//! producer.send(b"user-1", b"clicked", &[]).await?;
//! let acked = producer.flush().await?;
//! let mut sub = client
//!     .subscribe("demo/events", FetchFrom::Earliest, SubscribeOptions::default())
//!     .await?;
//! if let Some(record) = sub.next().await {
//!     println!("{:?} (after {acked} acked)", record?);
//! }
//! # Ok(()) }
//! ```
//!
//! Shards: a broker runs one shard per core, each with its own address. The
//! client asks the address it is given for the list and opens one
//! connection per shard, lazily, carrying many requests at once. In a
//! cluster a segment may live on another broker: its described `address`
//! names that broker's shard, and the client keeps one connection per such
//! address too (at most [`PEER_CONNECTIONS_MAX`]). Producers and
//! subscribers follow splits, merges and moves as they happen (see
//! [`Producer`] and [`Subscriber`]).
//!
//! Every byte from a broker is checked (frame checksums, batch checksums,
//! bounds) before use; bad bytes give [`ClientError::Decode`], never a
//! panic.

mod client;
// docs/sdk.md's snippets compile as doctests, so the guide cannot drift
// from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/sdk.md")]
mod sdk_guide {}
mod connection;
mod error;
mod frame_io;
mod in_flight;
mod layout;
mod lineage;
pub mod low_water;
mod payload;
mod producer;
mod subscriber;
mod transport;

pub use auth::Credentials;
pub use client::{
    Client, ClientOptions, BOOTSTRAP_BROKERS_MAX, CONNECT_TIMEOUT_MS_DEFAULT,
    IN_FLIGHT_REQUESTS_MAX_DEFAULT, PEER_CONNECTIONS_MAX, REQUEST_TIMEOUT_MS_DEFAULT,
    WRITE_QUEUE_FRAMES_MAX_DEFAULT,
};
pub use error::ClientError;
pub use layout::segment_for_key;
pub use payload::{PayloadReader, PAYLOAD_PIECE_BYTES};
pub use producer::{
    Producer, ProducerConfig, BATCH_BYTES_MAX_DEFAULT, BY_REF_OVER_DEFAULT,
    IDEMPOTENT_IN_FLIGHT_MAX, IN_FLIGHT_BATCHES_MAX_DEFAULT, LINGER_MS_DEFAULT,
    RESEND_ATTEMPTS_MAX,
};
pub use subscriber::{
    OwnedRecord, SubscribeOptions, Subscriber, ValueSource, FETCHES_BUFFERED_MAX_DEFAULT,
    FETCH_MAX_BYTES_DEFAULT, FETCH_MAX_WAIT_MS_DEFAULT, RESOLVE_BYTES_MAX_DEFAULT,
};
pub use transport::{Transport, KELP_ALPN, KELP_SERVER_NAME};
pub use wire::message::{BrokerStatus, FollowerInfo, SegmentInfo, ShardAddress, TopicInfo};
pub use wire::{AckMode, ErrorCode, FetchFrom, PayloadId, PayloadRef};
