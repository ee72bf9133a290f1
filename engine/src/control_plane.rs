//! The embedded control plane: a thread that owns the topic layout (through
//! `control::ControlService`, which persists it in the filer), answers the
//! admin requests that shards forward to it, and tells shards which
//! segments to open or drop. Requests and commands travel over bounded
//! channels; no lock is shared with the shards.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use control::{ControlService, Topic, TopicName};
use wire::message::{SegmentInfo, TopicInfo};
use wire::ErrorCode;

use crate::payload::PayloadStore;
use crate::payload_sweep::PayloadSweeper;
use crate::segment::SegmentStats;
use crate::serve_error::ServeError;

/// Admin requests waiting for the control plane.
pub(crate) const CONTROL_REQUESTS_QUEUED_MAX: usize = 1024;
/// Commands waiting for one shard.
pub(crate) const SHARD_COMMANDS_QUEUED_MAX: usize = 64;
/// How long the control plane waits for a shard to apply a command
/// (opening a segment may flush recovered buffers).
const SHARD_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

pub(crate) type Reply<T> = flume::Sender<Result<T, ServeError>>;

/// What shards ask the control plane.
#[derive(Debug)]
pub(crate) enum ControlRequest {
    CreateTopic {
        topic: String,
        segments: u32,
        reply: Reply<TopicInfo>,
    },
    DeleteTopic {
        topic: String,
        reply: Reply<()>,
    },
    ListTopics {
        reply: Reply<Vec<String>>,
    },
    DescribeTopic {
        topic: String,
        reply: Reply<TopicInfo>,
    },
    /// A client's admin request for the cluster's control plane, passed on
    /// as it came (frame type and payload); the answer comes back the same
    /// way. Only a broker in a cluster takes these.
    Forward {
        frame_type: wire::FrameType,
        payload: Vec<u8>,
        reply: Reply<crate::cluster_agent::Answer>,
    },
    Shutdown {
        reply: flume::Sender<Result<(), String>>,
    },
}

/// A segment a shard opened, with the figures it publishes.
#[derive(Debug, Clone)]
pub(crate) struct SegmentHandle {
    pub(crate) id: u32,
    pub(crate) stats: Arc<SegmentStats>,
}

/// What the control plane tells a shard.
#[derive(Debug)]
pub(crate) enum ShardCommand {
    /// Here is a topic's layout: open the segments placed on you.
    TopicLayout {
        topic: Topic,
        reply: flume::Sender<Result<Vec<SegmentHandle>, String>>,
    },
    /// The topic is being deleted: drop its segments and local buffers.
    DropTopic {
        name: String,
        reply: flume::Sender<()>,
    },
    /// The counters of every open segment here (the cluster agent's load
    /// report).
    ReportLoad {
        reply: flume::Sender<Vec<crate::shard::SegmentLoadFigures>>,
    },
    /// Seal and flush everything, then report.
    Shutdown {
        reply: flume::Sender<Result<(), String>>,
    },
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(crate) struct EmbeddedControl {
    service: ControlService,
    shards: Vec<flume::Sender<ShardCommand>>,
    stats: HashMap<(String, u32), Arc<SegmentStats>>,
    payloads: Arc<PayloadStore>,
    sweeper: PayloadSweeper,
    sweep_interval: Duration,
    payload_grace: Duration,
}

impl EmbeddedControl {
    pub(crate) fn new(
        service: ControlService,
        shards: Vec<flume::Sender<ShardCommand>>,
        payloads: Arc<PayloadStore>,
        sweeper: PayloadSweeper,
        sweep_interval: Duration,
        payload_grace: Duration,
    ) -> Self {
        EmbeddedControl {
            service,
            shards,
            stats: HashMap::new(),
            payloads,
            sweeper,
            sweep_interval,
            payload_grace,
        }
    }

    /// Send every stored topic to the shards (they recover and flush what
    /// an earlier run left), before the broker serves anyone.
    pub(crate) fn announce_all(&mut self) -> Result<(), String> {
        for topic in self.service.topics() {
            self.announce(&topic)?;
        }
        Ok(())
    }

    fn announce(&mut self, topic: &Topic) -> Result<(), String> {
        let name = topic.name().to_string();
        let mut waiting = Vec::new();
        for (i, shard) in self.shards.iter().enumerate() {
            let (tx, rx) = flume::bounded(1);
            shard
                .send(ShardCommand::TopicLayout {
                    topic: topic.clone(),
                    reply: tx,
                })
                .map_err(|_| format!("shard {i} is gone"))?;
            waiting.push((i, rx));
        }
        for (i, rx) in waiting {
            let handles = rx
                .recv_timeout(SHARD_COMMAND_TIMEOUT)
                .map_err(|_| format!("shard {i} did not answer"))??;
            for h in handles {
                self.stats.insert((name.clone(), h.id), h.stats);
            }
        }
        Ok(())
    }

    /// Serve requests until shutdown, sweeping orphan payloads between
    /// them every `sweep_interval`.
    pub(crate) fn run(mut self, requests: flume::Receiver<ControlRequest>) {
        let mut next_sweep = Instant::now() + self.sweep_interval;
        loop {
            let wait = next_sweep.saturating_duration_since(Instant::now());
            let request = match requests.recv_timeout(wait) {
                Ok(r) => r,
                Err(flume::RecvTimeoutError::Timeout) => {
                    self.sweep_payloads();
                    next_sweep = Instant::now() + self.sweep_interval;
                    continue;
                }
                Err(flume::RecvTimeoutError::Disconnected) => return,
            };
            match request {
                ControlRequest::CreateTopic {
                    topic,
                    segments,
                    reply,
                } => {
                    let _ = reply.send(self.create(&topic, segments));
                }
                ControlRequest::DeleteTopic { topic, reply } => {
                    let _ = reply.send(self.delete(&topic));
                }
                ControlRequest::ListTopics { reply } => {
                    let names = self
                        .service
                        .topics()
                        .iter()
                        .map(|t| t.name().to_string())
                        .collect();
                    let _ = reply.send(Ok(names));
                }
                ControlRequest::DescribeTopic { topic, reply } => {
                    let _ = reply.send(self.describe(&topic));
                }
                ControlRequest::Forward { reply, .. } => {
                    let _ = reply.send(Err(ServeError::new(
                        ErrorCode::InvalidArgument,
                        "this broker runs its own control plane: cluster requests need \
                         `kelp serve --control`",
                    )));
                }
                ControlRequest::Shutdown { reply } => {
                    let _ = reply.send(shut_down_shards(&self.shards));
                    return;
                }
            }
        }
    }

    fn sweep_payloads(&mut self) {
        let report = self.sweeper.sweep(&self.service.topics(), now_ms());
        let staged = self.payloads.clean_staging(self.payload_grace);
        if report.deleted > 0 || staged > 0 || report.topics_skipped > 0 {
            log::info!(
                "payload sweep: {} orphan(s) and {staged} abandoned upload(s) deleted, \
                 {} chunk(s) read, {} topic(s) skipped",
                report.deleted,
                report.chunks_read,
                report.topics_skipped
            );
        }
    }

    fn create(&mut self, topic: &str, segments: u32) -> Result<TopicInfo, ServeError> {
        let name = TopicName::parse(topic)?;
        let created = self.service.create_topic(now_ms(), &name, segments)?;
        self.announce(&created)
            .map_err(|e| ServeError::new(ErrorCode::Storage, e))?;
        Ok(self.info(&created))
    }

    fn delete(&mut self, topic: &str) -> Result<(), ServeError> {
        let name = TopicName::parse(topic)?;
        if self.service.topic(&name).is_none() {
            return Err(ServeError::new(
                ErrorCode::TopicNotFound,
                format!("topic {name} does not exist"),
            ));
        }
        // Shards stop writing first, so no flush lands after the delete.
        let mut waiting = Vec::new();
        for shard in &self.shards {
            let (tx, rx) = flume::bounded(1);
            if shard
                .send(ShardCommand::DropTopic {
                    name: name.to_string(),
                    reply: tx,
                })
                .is_ok()
            {
                waiting.push(rx);
            }
        }
        for rx in waiting {
            let _ = rx.recv_timeout(SHARD_COMMAND_TIMEOUT);
        }
        self.service.delete_topic(&name)?;
        self.payloads.drop_topic(&name);
        let key = name.to_string();
        self.stats.retain(|(t, _), _| *t != key);
        Ok(())
    }

    fn describe(&self, topic: &str) -> Result<TopicInfo, ServeError> {
        let name = TopicName::parse(topic)?;
        let t = self.service.topic(&name).ok_or_else(|| {
            ServeError::new(
                ErrorCode::TopicNotFound,
                format!("topic {name} does not exist"),
            )
        })?;
        Ok(self.info(&t))
    }

    fn info(&self, topic: &Topic) -> TopicInfo {
        let name = topic.name().to_string();
        TopicInfo {
            segments: topic
                .segments()
                .iter()
                .map(|s| SegmentInfo {
                    id: s.id.0,
                    epoch: s.epoch,
                    start: s.range.start(),
                    end: s.range.end(),
                    sealed: !s.is_open(),
                    shard: s.shard,
                    next_offset: self
                        .stats
                        .get(&(name.clone(), s.id.0))
                        .map_or(0, |st| st.next_offset.load(Ordering::Relaxed)),
                    appended_bytes: self
                        .stats
                        .get(&(name.clone(), s.id.0))
                        .map_or(0, |st| st.appended_bytes.load(Ordering::Relaxed)),
                    successors: s.successors.iter().map(|id| id.0).collect(),
                    broker: s.broker.map(|b| b.0),
                    first_append_ms: self
                        .stats
                        .get(&(name.clone(), s.id.0))
                        .map(|st| st.first_append_ms.load(Ordering::Relaxed))
                        .filter(|&t| t > 0),
                    created_ms: s.created_ms,
                    sealed_ms: s.sealed_ms,
                    lost_records: self
                        .stats
                        .get(&(name.clone(), s.id.0))
                        .map_or(0, |st| st.lost_records.load(Ordering::Relaxed)),
                    ..SegmentInfo::default()
                })
                .collect(),
            name,
        }
    }
}

/// Have every shard seal and flush everything, and wait for them.
pub(crate) fn shut_down_shards(shards: &[flume::Sender<ShardCommand>]) -> Result<(), String> {
    let mut waiting = Vec::new();
    for (i, shard) in shards.iter().enumerate() {
        let (tx, rx) = flume::bounded(1);
        if shard.send(ShardCommand::Shutdown { reply: tx }).is_ok() {
            waiting.push((i, rx));
        }
    }
    let mut failures = Vec::new();
    for (i, rx) in waiting {
        match rx.recv_timeout(SHARD_COMMAND_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("shard {i}: {e}")),
            Err(_) => failures.push(format!("shard {i} did not finish flushing")),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}
