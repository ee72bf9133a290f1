//! kelp-control: the control plane.
//!
//! The pure core is sans-IO: no files, no clock, no async, no threads. Time
//! comes in as `now_ms: u64` arguments, so every decision is deterministic
//! and testable in memory. It is made of:
//!
//! - [`Cluster`]: the core. It owns the topics ([`KeyRange`]s,
//!   [`Segment`]s placed on a broker's shard), the [`Membership`] of
//!   brokers and their load, places segments, rebalances, and splits and
//!   merges segments by hand or by each topic's [`ScalingPolicy`]. Every
//!   `handle_*(now_ms, ..)` call returns the [`Action`]s a driver must
//!   carry out on brokers. A lone broker is a cluster of one whose shards
//!   take the pieces of its splits.
//!
//! [`topic_store`] reads and writes the topics in a `kelp_filer`
//! [`Filer`](filer::Filer).
//!
//! The control-plane process around [`Cluster`] (`kelp control`, and the
//! one a lone `kelp serve` runs in-process) is
//! [`ControlServer`]: a TCP listener with a thread per connection
//! ([`control_server`]), one driver thread owning [`ClusterService`]
//! ([`cluster_service`]: a sans-IO state machine around the core that
//! persists topics, orders and queues commands for brokers, and resyncs
//! them), one sender thread per broker, and a blocking client for commands
//! to brokers ([`broker_link`]). Only `control_server` and `broker_link`
//! use `std::net` and threads; `cluster_service` calls the filer and
//! nothing else. Nothing in this crate depends on glommio, quinn or tokio.
//!
//! The policies and the actions are described in `docs/control-plane.md`.

mod action;
mod broker;
pub mod broker_link;
mod broker_queue;
mod cluster;
pub mod cluster_service;
mod control_connections;
pub mod control_figures;
pub mod control_server;
mod delivery;
pub mod election;
mod error;
pub mod filer_layout;
pub mod frame_stream;
mod key_range;
mod membership;
mod placement;
mod rate;
mod rebalancer;
mod scaling_policy;
mod segment;
pub mod segment_fence;
pub mod state_store;
#[cfg(test)]
mod test_filer;
mod topic;
mod topic_name;
pub mod topic_store;

pub use action::{Action, BrokerCommand, Cause, PlacedSegment, SealedSegment};
pub use broker::{
    BrokerId, BrokerInfo, Capacity, InvalidRegistration, SHARDS_PER_BROKER_MAX,
    SHARD_ADDRESS_BYTES_MAX,
};
pub use cluster::{
    Cluster, ClusterConfig, InvariantViolation, FOLLOWER_LAG_MAX_MS, SEALER_WAIT_MS,
};
pub use cluster_service::{ActionCounts, ClusterService};
pub use control_server::{ClusterFiler, ControlServer, ControlServerConfig, ControlServerError};
pub use error::{ControlError, CorruptLayout, InvalidChange};
pub use key_range::{KeyRange, RING_END};
pub use membership::{BrokerEntry, FollowerLag, Membership, SegmentLoad, BROKERS_MAX};
pub use rate::{Rate, RateWindows, RATE_WINDOWS};
pub use rebalancer::RebalancePolicy;
pub use scaling_policy::{PolicyError, ScalingPolicy, MERGE_FACTOR_LONGEST, SPLIT_FACTORS};
pub use segment::{Follower, Segment, SegmentId, SegmentState};
pub use topic::{
    InvalidTopic, Topic, TopicJsonError, DEFAULT_REPLICAS, REPLICAS_MAX, SEGMENTS_PER_TOPIC_MAX,
    TOPICS_MAX, TOPIC_JSON_BYTES_MAX, TOPIC_JSON_VERSION,
};
pub use topic_name::{TopicName, TOPIC_NAME_BYTES_MAX};
