//! kelp's broker: the data plane.
//!
//! One glommio executor (a *shard*) per core owns the segments the control
//! plane placed on it. A batch arrives over TCP (glommio sockets on the
//! shard itself) or QUIC (quinn-proto driven on the shard itself, over its
//! own UDP socket), is validated, given offsets and copied once
//! into the segment's memory-mapped buffer. Sealed buffers are written to
//! the filer as chunk files straight from the mapping. Reads come from the
//! buffers or the chunks, then tail live.
//!
//! Nothing here locks across cores: shards share no mutable state, and
//! talk to the control plane and the Kafka gateway through bounded channels.

mod access;
pub mod admin_http;
mod background_priority;
mod broker;
mod broker_pages;
mod buffer;
mod chunk_cache;
mod cluster_agent;
pub mod config;
mod connection;
mod control_plane;
mod data_dir_lock;
pub mod error;
mod file_range;
mod filer_lane;
mod inbox;
mod kafka;
mod log_limit;
pub mod metrics_page;
mod payload;
mod payload_sweep;
mod peer_limit;
mod produce_quota;
mod producer_id_block;
mod quic_shard;
mod receive_budget;
mod recovery;
mod replica;
mod request;
mod salvage;
mod segment;
mod serve_error;
mod shard;
mod shard_filer;
mod shard_metrics;
pub mod signals;
mod tcp;
mod tls;

pub use broker::{run, Broker};
pub use config::{AdvertisedAddress, AdvertisedAddressError, BrokerConfig, KafkaSettings};
pub use error::EngineError;
pub use signals::TerminationSignals;
pub use tls::{client_tls_trusting, ALPN};

/// Internals the criterion benchmarks in `benches/` measure; not an API.
#[cfg(feature = "bench")]
#[doc(hidden)]
pub mod bench_internals {
    pub use crate::buffer::ActiveBuffer;
}
