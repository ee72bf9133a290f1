//! A shard: one glommio executor on one core, owning the segments the
//! control plane placed on it. Everything a shard owns is touched only by
//! its thread; other threads reach it through bounded channels (commands
//! from the control plane, frames from the QUIC threads).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use control::{SegmentId, Topic};
use filer::Filer;
use wire::message::ShardAddress;

use crate::config::BrokerConfig;
use crate::control_plane::{ControlRequest, SegmentHandle, ShardCommand};
use crate::error::EngineError;
use crate::payload::PayloadStore;
use crate::segment::SegmentCell;

/// What a shard knows of a topic: its whole layout (to tell a client which
/// shard owns a segment) and the segments it owns itself.
#[derive(Debug)]
pub(crate) struct ShardTopic {
    pub(crate) layout: Topic,
    pub(crate) segments: HashMap<u32, Rc<SegmentCell>>,
}

#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) index: usize,
    pub(crate) config: Rc<BrokerConfig>,
    pub(crate) filer: Arc<dyn Filer>,
    /// The upload path for payloads passed by reference.
    pub(crate) payloads: Arc<PayloadStore>,
    /// Bytes of payload pieces being written; bounds their memory.
    pub(crate) payload_budget: Rc<glommio::sync::Semaphore>,
    pub(crate) topics: RefCell<HashMap<String, ShardTopic>>,
    pub(crate) control: flume::Sender<ControlRequest>,
    pub(crate) shard_addresses: Rc<Vec<ShardAddress>>,
    pub(crate) connections: Cell<usize>,
    /// Set when the shard shuts down: listeners and connections end.
    pub(crate) stopping: Cell<bool>,
    pub(crate) stop: event_listener::Event,
}

/// Where a segment lives, from this shard's point of view.
pub(crate) enum SegmentLookup {
    Here(Rc<SegmentCell>),
    Elsewhere { shard: u16 },
    Sealed,
    NoSegment,
    NoTopic,
}

impl Shard {
    /// Whether this broker has topic `topic`.
    pub(crate) fn knows_topic(&self, topic: &str) -> bool {
        self.topics.borrow().contains_key(topic)
    }

    pub(crate) fn lookup(&self, topic: &str, segment: u32) -> SegmentLookup {
        let topics = self.topics.borrow();
        let Some(t) = topics.get(topic) else {
            return SegmentLookup::NoTopic;
        };
        if let Some(cell) = t.segments.get(&segment) {
            return SegmentLookup::Here(cell.clone());
        }
        match t.layout.segment(SegmentId(segment)) {
            None => SegmentLookup::NoSegment,
            Some(s) if !s.is_open() => SegmentLookup::Sealed,
            Some(s) => SegmentLookup::Elsewhere { shard: s.shard },
        }
    }

    /// Apply one command from the control plane.
    pub(crate) async fn handle_command(self: &Rc<Self>, command: ShardCommand) {
        match command {
            ShardCommand::TopicLayout { topic, reply } => {
                let result = self.open_topic(topic).await.map_err(|e| e.to_string());
                let _ = reply.send_async(result).await;
            }
            ShardCommand::DropTopic { name, reply } => {
                if let Some(t) = self.topics.borrow_mut().remove(&name) {
                    for cell in t.segments.values() {
                        cell.close();
                    }
                }
                let _ = reply.send_async(()).await;
            }
            ShardCommand::Shutdown { reply } => {
                self.stopping.set(true);
                self.stop.notify(usize::MAX);
                let _ = reply.send_async(self.flush_everything().await).await;
            }
        }
    }

    /// Resolves once the shard is shutting down.
    pub(crate) async fn stopped(&self) {
        loop {
            let listener = self.stop.listen();
            if self.stopping.get() {
                return;
            }
            listener.await;
        }
    }

    /// Wait (at most `limit`) until every connection task has ended.
    pub(crate) async fn wait_connections_closed(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.connections.get() > 0 && Instant::now() < deadline {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Learn a topic's layout and open the segments placed here.
    async fn open_topic(self: &Rc<Self>, topic: Topic) -> Result<Vec<SegmentHandle>, EngineError> {
        let name = topic.name().to_string();
        let prefix = topic.name().object_prefix();
        let buffers_root = self.config.data_dir.join("buffers").join(&name);
        let mut opened = HashMap::new();
        let existing: HashMap<u32, Rc<SegmentCell>> = self
            .topics
            .borrow()
            .get(&name)
            .map(|t| t.segments.clone())
            .unwrap_or_default();
        for segment in topic.open_segments() {
            if usize::from(segment.shard) != self.index {
                continue;
            }
            let id = segment.id.0;
            let cell = match existing.get(&id) {
                Some(cell) => cell.clone(),
                None => SegmentCell::open(
                    self.config.clone(),
                    self.filer.clone(),
                    &prefix,
                    buffers_root.join(id.to_string()),
                    id,
                    segment.range.start(),
                    segment.range.end(),
                )
                .await
                .map_err(|e| EngineError::Shard {
                    shard: self.index,
                    reason: format!("open {name} segment {id}: {e}"),
                })?,
            };
            opened.insert(id, cell);
        }
        let handles = opened
            .values()
            .map(|c| SegmentHandle {
                id: c.id,
                stats: c.stats.clone(),
            })
            .collect();
        self.topics.borrow_mut().insert(
            name,
            ShardTopic {
                layout: topic,
                segments: opened,
            },
        );
        Ok(handles)
    }

    fn all_segments(&self) -> Vec<Rc<SegmentCell>> {
        self.topics
            .borrow()
            .values()
            .flat_map(|t| t.segments.values().cloned())
            .collect()
    }

    /// Seal and flush every buffer (graceful shutdown).
    async fn flush_everything(&self) -> Result<(), String> {
        let mut failures = Vec::new();
        for cell in self.all_segments() {
            if let Err(e) = cell.shut_down().await {
                failures.push(format!("segment {}: {}", cell.id, e.message));
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }

    /// Seal buffers by age, forever. Each turn visits every segment once.
    pub(crate) async fn tick_forever(self: Rc<Self>) {
        let period = Duration::from_millis(self.config.tick_ms);
        loop {
            glommio::timer::sleep(period).await;
            let now = Instant::now();
            for cell in self.all_segments() {
                cell.tick(now);
            }
        }
    }
}
