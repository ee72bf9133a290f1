//! Kafka topics as kelp topics: the Kafka topic `name` is the kelp topic
//! `kafka/name`, and partition `i` is its `i`-th segment in id order. The
//! layouts come from the control plane and are cached until an answer says
//! they are stale.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use wire::message::{SegmentInfo, TopicInfo};
use wire::ErrorCode;

use crate::control_plane::ControlRequest;
use crate::request::ask;
use crate::serve_error::ServeError;

/// The kelp namespace of every Kafka-facing topic.
pub(crate) const KAFKA_NAMESPACE: &str = "kafka";

/// The kelp topic of Kafka topic `name`.
pub(crate) fn kelp_name(name: &str) -> String {
    format!("{KAFKA_NAMESPACE}/{name}")
}

/// The Kafka topic of kelp topic `name`, if it is Kafka-facing.
pub(crate) fn kafka_name(name: &str) -> Option<&str> {
    name.strip_prefix(KAFKA_NAMESPACE)?.strip_prefix('/')
}

/// A topic's partitions: partition `i` is `partitions[i]`.
#[derive(Debug)]
pub(crate) struct Layout {
    pub(crate) partitions: Vec<SegmentInfo>,
}

impl Layout {
    fn from_info(mut info: TopicInfo) -> Layout {
        info.segments.sort_by_key(|s| s.id);
        Layout {
            partitions: info.segments,
        }
    }

    /// Partition `index`, if the topic has it.
    pub(crate) fn partition(&self, index: i32) -> Option<&SegmentInfo> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }
}

pub(crate) struct Topics {
    control: flume::Sender<ControlRequest>,
    cache: RefCell<HashMap<String, Rc<Layout>>>,
}

impl Topics {
    pub(crate) fn new(control: flume::Sender<ControlRequest>) -> Topics {
        Topics {
            control,
            cache: RefCell::new(HashMap::new()),
        }
    }

    /// The layout of Kafka topic `name` (cached).
    pub(crate) async fn layout(&self, name: &str) -> Result<Rc<Layout>, ServeError> {
        if let Some(l) = self.cache.borrow().get(name) {
            return Ok(l.clone());
        }
        self.refresh(name).await
    }

    /// The segment serving partition `index` of Kafka topic `name`, or the
    /// Kafka error code saying why there is none.
    pub(crate) async fn partition(&self, name: &str, index: i32) -> Result<SegmentInfo, i16> {
        let layout = self.layout(name).await.map_err(|e| kafka_error(&e))?;
        layout
            .partition(index)
            .cloned()
            .ok_or(kafka::error_code::UNKNOWN_TOPIC_OR_PARTITION)
    }

    /// Ask the control plane for the layout of Kafka topic `name`.
    pub(crate) async fn refresh(&self, name: &str) -> Result<Rc<Layout>, ServeError> {
        let topic = kelp_name(name);
        let info = ask(&self.control, |reply| ControlRequest::DescribeTopic {
            topic,
            reply,
        })
        .await;
        let info = match info {
            Ok(i) => i,
            Err(e) => {
                self.forget(name);
                return Err(e);
            }
        };
        let layout = Rc::new(Layout::from_info(info));
        self.cache
            .borrow_mut()
            .insert(name.to_string(), layout.clone());
        Ok(layout)
    }

    /// Drop the cached layout of `name` (a shard said it is stale).
    pub(crate) fn forget(&self, name: &str) {
        self.cache.borrow_mut().remove(name);
    }

    /// Create Kafka topic `name` with `partitions` segments, each kept on
    /// `replicas` brokers (0: the cluster's default); returns how many
    /// brokers keep its first partition.
    pub(crate) async fn create(
        &self,
        name: &str,
        partitions: u32,
        replicas: u8,
    ) -> Result<usize, ServeError> {
        let topic = kelp_name(name);
        let info = ask(&self.control, |reply| ControlRequest::CreateTopic {
            topic,
            segments: partitions,
            replicas,
            reply,
        })
        .await?;
        let kept_on = 1 + info.segments.first().map_or(0, |s| s.followers.len());
        self.cache
            .borrow_mut()
            .insert(name.to_string(), Rc::new(Layout::from_info(info)));
        Ok(kept_on)
    }

    /// Delete Kafka topic `name`.
    pub(crate) async fn delete(&self, name: &str) -> Result<(), ServeError> {
        self.forget(name);
        let topic = kelp_name(name);
        ask(&self.control, |reply| ControlRequest::DeleteTopic {
            topic,
            reply,
        })
        .await
    }

    /// Every Kafka-facing topic's Kafka name.
    pub(crate) async fn list(&self) -> Result<Vec<String>, ServeError> {
        let all = ask(&self.control, |reply| ControlRequest::ListTopics { reply }).await?;
        Ok(all
            .iter()
            .filter_map(|t| kafka_name(t).map(str::to_string))
            .collect())
    }
}

/// The Kafka error code for a kelp error about a topic or partition.
pub(crate) fn kafka_error(e: &ServeError) -> i16 {
    use kafka::error_code as k;
    match e.code {
        ErrorCode::TopicNotFound | ErrorCode::SegmentNotFound => k::UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode::NotOwner | ErrorCode::SegmentSealed | ErrorCode::ShuttingDown => {
            k::NOT_LEADER_OR_FOLLOWER
        }
        ErrorCode::InvalidTopicName => k::INVALID_TOPIC_EXCEPTION,
        ErrorCode::TopicExists => k::TOPIC_ALREADY_EXISTS,
        ErrorCode::TooLarge => k::MESSAGE_TOO_LARGE,
        ErrorCode::Malformed | ErrorCode::Checksum | ErrorCode::Corrupt => k::CORRUPT_MESSAGE,
        ErrorCode::InvalidArgument => k::INVALID_REQUEST,
        ErrorCode::Busy => k::REQUEST_TIMED_OUT,
        ErrorCode::ControlUnavailable => k::LEADER_NOT_AVAILABLE,
        ErrorCode::OffsetOutOfRange => k::OFFSET_OUT_OF_RANGE,
        _ => k::UNKNOWN_SERVER_ERROR,
    }
}

/// Whether a kelp error means the cached layout is stale.
pub(crate) fn is_stale(e: &ServeError) -> bool {
    e.code.is_stale_layout() || e.code == ErrorCode::TopicNotFound
}
