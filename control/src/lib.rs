//! kelp-control: the control plane.
//!
//! The `layout` core ([`Layout`] and the types it holds: [`TopicName`],
//! [`KeyRange`], [`Segment`], [`Topic`]) is sans-IO: no files, no clock, no
//! async, no threads. Time comes in as `now_ms: u64` arguments, so every
//! decision is deterministic and testable in memory.
//!
//! The [`service`] module is the thin driver around it: [`ControlService`]
//! persists the layout through a `kelp_filer` [`Filer`](filer::Filer) and
//! is synchronous, meant to run on a thread of its own. Nothing in this
//! crate depends on glommio, quinn or tokio.

mod error;
mod key_range;
mod layout;
mod segment;
pub mod service;
mod topic;
mod topic_name;

pub use error::ControlError;
pub use key_range::{KeyRange, RING_END};
pub use layout::{Layout, SEGMENTS_PER_TOPIC_MAX, TOPICS_MAX};
pub use segment::{Segment, SegmentId, SegmentState};
pub use service::ControlService;
pub use topic::{Topic, TOPIC_JSON_BYTES_MAX, TOPIC_JSON_VERSION};
pub use topic_name::{TopicName, TOPIC_NAME_BYTES_MAX};
