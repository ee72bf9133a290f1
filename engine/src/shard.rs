//! A shard: one glommio executor on one core, owning the segments the
//! control plane placed on it. Everything a shard owns is touched only by
//! its thread; other threads reach it through bounded channels (commands
//! from the control plane, frames from the Kafka gateway).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use control::{BrokerId, SegmentId, Topic};
use tracing::Instrument;
use wire::message::{BrokerShards, SegmentInfo, ShardAddress, Successors, TopicInfo};

use crate::config::BrokerConfig;
use crate::control_plane::{ControlRequest, ShardCommand, UnflushedSegment, UnflushedSegments};
use crate::error::EngineError;
use crate::payload::PayloadStore;
use crate::peer_limit::PeerLimit;
use crate::recovery;
use crate::segment::{blocking, SealState, SealedView, Segment, SegmentCell};
use crate::shard_filer::ShardFiler;
use crate::shard_metrics::Transport;

/// What a shard knows of a topic: its whole layout (to tell a client which
/// shard owns a segment), the segments it owns, the ones it owned and
/// sealed, and views of segments sealed elsewhere that it serves reads of.
#[derive(Debug)]
pub(crate) struct ShardTopic {
    pub(crate) layout: Topic,
    /// The shards of the brokers owning its open segments, as the layout
    /// came (this broker among them when it owns one).
    pub(crate) owners: Arc<[BrokerShards]>,
    pub(crate) segments: HashMap<u32, Segment>,
}

/// What a refused write to sealed segment `sealed` of `layout` names: the
/// open segments covering its range, each with the address of its shard
/// (this broker's own `shard_addresses` when `me` owns it, else from
/// `owners`). `None` if the layout has no such segment or an owner's
/// address is not known: the producer then asks for the layout instead.
fn successors_of(
    layout: &Topic,
    sealed: SegmentId,
    owners: &[BrokerShards],
    me: Option<BrokerId>,
    shard_addresses: &[ShardAddress],
) -> Option<Successors> {
    let range = layout.segment(sealed)?.range;
    let mut segments = Vec::new();
    for s in layout.segments() {
        let overlaps =
            u64::from(s.range.start()) < range.end() && u64::from(range.start()) < s.range.end();
        if !s.is_open() || !overlaps {
            continue;
        }
        let address = shard_address(s, owners, me, shard_addresses)?;
        segments.push(SegmentInfo {
            address: Some(address),
            ..s.info()
        });
    }
    if segments.is_empty() {
        return None;
    }
    let layout_version = layout.segments().iter().map(|s| s.id.0).max().unwrap_or(0);
    Some(Successors {
        layout_version,
        segments,
    })
}

/// The address of the shard owning open segment `s`: this broker's own
/// (`shard_addresses`) when `me` owns it, else as `owners` names it.
fn shard_address(
    s: &control::Segment,
    owners: &[BrokerShards],
    me: Option<BrokerId>,
    shard_addresses: &[ShardAddress],
) -> Option<ShardAddress> {
    let shards = if s.broker == me {
        shard_addresses
    } else {
        let broker = s.broker?;
        &owners.iter().find(|o| o.broker == broker.0)?.shards
    };
    shards.get(usize::from(s.shard)).cloned()
}

/// Orders layouts of one topic: segments are only ever added and sealed,
/// never removed or reopened, and followers changed (counted), so a later
/// layout has more of one.
fn layout_age(topic: &Topic) -> (usize, usize, u64) {
    topic.layout_age()
}

#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) index: usize,
    pub(crate) config: Rc<BrokerConfig>,
    /// The filer, through this shard's upload and read lanes and cache.
    pub(crate) store: Rc<ShardFiler>,
    /// The upload path for payloads passed by reference.
    pub(crate) payloads: Arc<PayloadStore>,
    /// Bytes of payload pieces being written; bounds their memory.
    pub(crate) payload_budget: Rc<glommio::sync::Semaphore>,
    pub(crate) topics: RefCell<HashMap<String, ShardTopic>>,
    pub(crate) control: flume::Sender<ControlRequest>,
    /// Every shard's command channel (this one's too): a layout the
    /// control plane sends to one shard reaches them all.
    pub(crate) shard_commands: Rc<Vec<flume::Sender<ShardCommand>>>,
    pub(crate) shard_addresses: Rc<Vec<ShardAddress>>,
    pub(crate) connections: Cell<usize>,
    /// Connections by peer address (`connections_per_ip_max`).
    pub(crate) peers: Arc<PeerLimit>,
    /// Frame payload bytes being received or handled, over the shard's TCP
    /// and QUIC connections (`receive_bytes_max`).
    pub(crate) receive_budget: Rc<crate::receive_budget::ReceiveBudget>,
    /// Its figures, read by the admin listener's thread.
    pub(crate) metrics: Arc<crate::shard_metrics::ShardMetrics>,
    /// Set when the shard shuts down: listeners and connections end.
    pub(crate) stopping: Cell<bool>,
    pub(crate) stop: event_listener::Event,
    /// The ids it hands out to kelp's idempotent producers.
    pub(crate) producer_ids: crate::producer_id_block::ProducerIdBlock,
    /// The segments of other brokers this shard follows (keeps a copy
    /// of), by topic and segment (`replica`).
    pub(crate) followed: RefCell<HashMap<(String, u32), crate::replica::Follower>>,
    /// How many follower tasks it started, naming each copy's directory.
    pub(crate) followings_started: Cell<u64>,
    /// The segments whose layout names this shard's broker their sealer
    /// that were sealed here (or are being, without a copy), by topic and
    /// segment: each is sealed once per run, not on every layout.
    pub(crate) sealed_here: RefCell<std::collections::HashSet<(String, u32)>>,
    /// Each user's produce byte-rate bucket on this shard.
    pub(crate) quotas: crate::produce_quota::Quotas,
}

/// The segment ids that have a directory under a topic's buffers
/// directory `root` (none if it is missing or cannot be read: leftovers are
/// looked for again with the next layout).
fn segment_dirs(root: &std::path::Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Where a segment lives, from this shard's point of view.
pub(crate) enum SegmentLookup {
    Here(Segment),
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
            ShardCommand::TopicLayout {
                topic,
                owners,
                reply,
            } => {
                let result = self.open_topic(topic, owners).await;
                let _ = reply.send_async(result).await;
            }
            ShardCommand::RefuseWrites {
                topic,
                owners,
                reply,
            } => {
                self.refuse_sealed_writes(&topic, &owners);
                let _ = reply.send_async(()).await;
            }
            ShardCommand::ReportLoad { sealed, reply } => {
                let _ = reply.send_async(self.load(sealed)).await;
            }
            ShardCommand::DropTopic { name, reply } => {
                if let Some(t) = self.topics.borrow_mut().remove(&name) {
                    for cell in t.segments.values() {
                        cell.close();
                    }
                }
                self.followed.borrow_mut().retain(|(topic, _), f| {
                    let keep = *topic != name;
                    if !keep {
                        f.stop();
                    }
                    keep
                });
                self.sealed_here
                    .borrow_mut()
                    .retain(|(topic, _)| *topic != name);
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

    /// Learn a topic's layout: seal the segments it seals, open the ones
    /// it places here (this shard, and this broker in a cluster), keep the
    /// sealed ones for reads. A layout older than the one held is ignored
    /// (layouts of one topic may reach shards out of order).
    async fn open_topic(
        self: &Rc<Self>,
        topic: Topic,
        owners: Arc<[BrokerShards]>,
    ) -> Result<(), EngineError> {
        let name = topic.name().to_string();
        let topic_name = topic.name().clone();
        let buffers_root = self.config.data_dir.join("buffers").join(&name);
        let (existing, held_age) = match self.topics.borrow().get(&name) {
            Some(t) => (t.segments.clone(), Some(layout_age(&t.layout))),
            None => (HashMap::new(), None),
        };
        if held_age.is_some_and(|held| layout_age(&topic) < held) {
            return Ok(());
        }
        let me = self.config.broker_id.map(BrokerId);
        let mut kept = HashMap::new();
        // Segments it seals refuse writes at once (naming their
        // successors); those it opens here open before the seals' flushes
        // are awaited, so a producer turned away goes on at once.
        let mut to_seal = Vec::new();
        let mut opened = Ok(());
        for segment in topic.segments() {
            let id = segment.id.0;
            if let Some(held) = existing.get(&id) {
                if !segment.is_open() && held.is_fenced() {
                    // Sealed by the control plane while this broker was
                    // away: a view of its chunks serves it from now on.
                    continue;
                }
                if !segment.is_open() {
                    let successors =
                        successors_of(&topic, segment.id, &owners, me, &self.shard_addresses)
                            .map(Arc::new);
                    match held {
                        // Open, or refusing writes since `RefuseWrites`:
                        // this shard's to seal.
                        Segment::Owned(cell) if cell.core.seal_state() != SealState::Sealed => {
                            cell.refuse_writes(successors);
                            to_seal.push((cell.clone(), segment.epoch));
                        }
                        // Sealed before (or a view of a segment sealed
                        // elsewhere): its successors may have changed.
                        _ => held.core().set_successors(successors),
                    }
                }
                kept.insert(id, held.clone());
                continue;
            }
            if !segment.is_open()
                || usize::from(segment.shard) != self.index
                || segment.broker != me
                || opened.is_err()
            {
                continue;
            }
            match SegmentCell::open(
                self.config.clone(),
                self.store.clone(),
                &topic_name,
                buffers_root.join(id.to_string()),
                id,
                segment.range.start(),
                segment.range.end(),
            )
            // Recovery's findings are logged in the segment's span.
            .instrument(tracing::error_span!("segment", topic = %topic_name, segment = id))
            .await
            {
                Ok(cell) => {
                    kept.insert(id, Segment::Owned(cell));
                }
                Err(e) => {
                    opened = Err(EngineError::Shard {
                        shard: self.index,
                        reason: format!("open {name} segment {id}: {e}"),
                    });
                }
            }
        }
        // Buffers an earlier run of this broker left for segments sealed
        // while it was away (declared dead): one shard, the one each
        // names, applies the rule of `recovery::drop_leftover_buffers`.
        // The topic's buffers directory is listed once: it holds only the
        // segments this broker holds or held, never the layout's history.
        for id in segment_dirs(&buffers_root) {
            let Some(segment) = topic.segment(SegmentId(id)) else {
                continue;
            };
            let mine = usize::from(segment.shard) % self.shard_commands.len() == self.index;
            if segment.is_open() || !mine || existing.contains_key(&id) {
                continue;
            }
            let finish = segment.broker == me;
            let dir = buffers_root.join(id.to_string());
            self.settle_leftover_buffers(&topic_name, segment, finish, dir)
                .await;
        }
        // A layout this shard cannot carry out whole is not installed (the
        // control plane resynchronises the broker); what it seals is
        // flushed all the same, its writes being refused already.
        if opened.is_ok() {
            for segment in topic.open_segments() {
                if let Some(Segment::Owned(cell)) = kept.get(&segment.id.0) {
                    cell.set_followers(&segment.followers);
                }
            }
            self.topics.borrow_mut().insert(
                name.clone(),
                ShardTopic {
                    layout: topic,
                    owners,
                    segments: kept,
                },
            );
            self.follow(&name);
        }
        for (cell, epoch) in to_seal {
            cell.seal(epoch).await.map_err(|e| EngineError::Shard {
                shard: self.index,
                reason: format!("seal {name} segment {}: {}", cell.core.id, e.message),
            })?;
            if cell.core.is_fenced() {
                // Its flush met the control plane's fence: a view of the
                // chunks serves it from now on.
                if let Some(t) = self.topics.borrow_mut().get_mut(&name) {
                    t.segments.remove(&cell.core.id);
                }
                continue;
            }
            let end = cell.core.stats.next_offset.load(Relaxed);
            log::info!("{name} segment {}: sealed at offset {end}", cell.core.id);
        }
        opened
    }

    /// Follow the open segments of topic `name` whose layout names this
    /// shard a follower (start a copy of each not followed yet, `replica`),
    /// have the copy of each sealed one that names this broker its sealer
    /// seal it, and stop following its others (their copies are removed).
    fn follow(&self, name: &str) {
        let Some(me) = self.config.broker_id else {
            return;
        };
        let topics = self.topics.borrow();
        let Some(t) = topics.get(name) else {
            return;
        };
        let mine = |s: &control::Segment| {
            s.followers
                .iter()
                .any(|f| f.broker.0 == me && usize::from(f.shard) == self.index)
        };
        // Each open segment this shard follows, with its owner's address
        // (`None` while the layout knows none: the owner has not
        // registered with a control plane that just started).
        let mut wanted: HashMap<u32, Option<String>> = HashMap::new();
        let mut to_seal: HashMap<u32, u32> = HashMap::new();
        for s in t.layout.segments() {
            if !mine(s) {
                continue;
            }
            if !s.is_open() {
                if s.sealer.is_some_and(|b| b.0 == me) {
                    to_seal.insert(s.id.0, s.epoch);
                }
                continue;
            }
            let owner = s.broker.and_then(|b| {
                let shards = &t.owners.iter().find(|o| o.broker == b.0)?.shards;
                Some(shards.get(usize::from(s.shard))?.tcp.clone())
            });
            wanted.insert(s.id.0, owner);
        }
        let mut followed = self.followed.borrow_mut();
        let mut sealed_here = self.sealed_here.borrow_mut();
        followed.retain(|(topic, segment), f| {
            if topic != name {
                return true;
            }
            if let Some(epoch) = to_seal.get(segment) {
                // Kept until the seal is done.
                f.seal(*epoch);
                sealed_here.insert((topic.clone(), *segment));
                return !f.is_done();
            }
            if f.sealing() {
                return !f.is_done();
            }
            // A task that ended while the layout still names this copy
            // (its owner answered that it sealed the segment) is started
            // again below. One whose owner's address changed (the owner
            // restarted) goes on there with its copy; one whose owner's
            // address is not known now keeps its copy and tries the last.
            let Some(owner) = wanted.get(segment) else {
                log::debug!("replica of {name}/{segment}: no longer followed here; dropped");
                f.stop();
                return false;
            };
            if f.is_done() {
                return false;
            }
            if let Some(owner) = owner {
                if f.redirect(owner) {
                    log::info!("replica of {name}/{segment}: its owner is at {owner} now");
                }
            }
            true
        });
        for (segment, epoch) in to_seal {
            if sealed_here.insert((name.to_owned(), segment)) {
                // No copy (this broker restarted since, or never had the
                // layout that made it a follower): sealed at the
                // filer's end unless it is sealed already.
                crate::replica::Sealer {
                    topic: name.to_owned(),
                    segment,
                    epoch,
                    me,
                    store: self.store.clone(),
                }
                .seal_without_copy();
            }
        }
        for (segment, owner) in wanted {
            let Some(owner) = owner else {
                continue;
            };
            let key = (name.to_owned(), segment);
            if followed.contains_key(&key) {
                continue;
            }
            let n = self.followings_started.get() + 1;
            self.followings_started.set(n);
            let dir = self
                .config
                .data_dir
                .join(crate::replica::REPLICAS_DIR)
                .join(name)
                .join(format!("{segment}-{}-{n}", self.index));
            let following = crate::replica::Following {
                topic: name.to_owned(),
                segment,
                owner,
                me: wire::message::FollowerId {
                    broker: me,
                    shard: u16::try_from(self.index).unwrap_or(u16::MAX),
                },
                dir,
                buffer_bytes: usize::try_from(self.config.buffer_bytes).unwrap_or(usize::MAX),
                store: self.store.clone(),
                credentials: crate::cluster_agent::cluster_credentials(&self.config),
            };
            followed.insert(key, crate::replica::start(following, self.metrics.clone()));
        }
    }

    /// Buffers an earlier run left in `dir` for `segment` of `topic`, which
    /// the layout seals and this shard does not hold:
    ///
    /// - its seal marker is there: the rule for a segment sealed while this
    ///   broker was away. Below the seal point the records are in the
    ///   filer, past it they were never stored; both go, counted in the
    ///   log;
    /// - no marker, and this broker sealed it (`finish`: the run before
    ///   stopped mid-seal): the seal is finished, buffers recovered and
    ///   flushed, then the marker written;
    /// - no marker otherwise: kept until a later layout finds one.
    async fn settle_leftover_buffers(
        &self,
        topic: &control::TopicName,
        segment: &control::Segment,
        finish: bool,
        dir: PathBuf,
    ) {
        let id = segment.id.0;
        let seal_point = match crate::segment::seal_point(&self.store, topic, id).await {
            Ok(Some(at)) => at,
            Ok(None) if finish => {
                log::info!(
                    "segment {topic}/{id}: the run before stopped while sealing it; \
                     recovering its buffers to finish the seal"
                );
                let opened = SegmentCell::open(
                    self.config.clone(),
                    self.store.clone(),
                    topic,
                    dir,
                    id,
                    segment.range.start(),
                    segment.range.end(),
                )
                .await;
                let sealed = match opened {
                    Ok(cell) => cell.seal(segment.epoch).await.map_err(|e| e.message),
                    Err(e) => Err(e.to_string()),
                };
                if let Err(e) = sealed {
                    log::error!("segment {topic}/{id}: finishing its seal: {e}");
                }
                return;
            }
            Ok(None) => {
                log::info!(
                    "segment {topic}/{id}: buffers an earlier run left in {} are kept until \
                     its seal marker is written",
                    dir.display()
                );
                return;
            }
            Err(e) => {
                log::warn!("segment {topic}/{id}: reading its seal point: {e}");
                return;
            }
        };
        let shown = dir.display().to_string();
        let found = blocking(move || recovery::drop_leftover_buffers(&dir, id, seal_point)).await;
        match found {
            Ok(left) if left.dropped > 0 => {
                self.metrics.fenced_records.add(left.dropped);
                log::warn!(
                    "segment {topic}/{id}: sealed at offset {seal_point} while this broker was \
                     away; its buffers in {shown} held {} records past that (offsets \
                     {seal_point}..{}), dropped: never stored, none acknowledged as durable, \
                     any acknowledged with ack=leader lost; {} records below it are in the filer",
                    left.dropped,
                    left.end,
                    left.stored
                );
            }
            Ok(left) => log::info!(
                "segment {topic}/{id}: sealed at offset {seal_point} while this broker was away; \
                 the {} records its buffers in {shown} held are in the filer; removed",
                left.stored
            ),
            Err(e) => log::warn!("segment {topic}/{id}: leftover buffers in {shown}: {e}"),
        }
    }

    /// Refuse writes to the segments here that `topic` seals, naming
    /// their successors; the rest of the layout comes next
    /// ([`ShardCommand::RefuseWrites`]). A layout older than the one held
    /// changes nothing.
    fn refuse_sealed_writes(&self, topic: &Topic, owners: &[BrokerShards]) {
        let topics = self.topics.borrow();
        let Some(held) = topics.get(&topic.name().to_string()) else {
            return;
        };
        if layout_age(topic) < layout_age(&held.layout) {
            return;
        }
        let me = self.config.broker_id.map(BrokerId);
        for segment in topic.segments().iter().filter(|s| !s.is_open()) {
            let Some(Segment::Owned(cell)) = held.segments.get(&segment.id.0) else {
                continue;
            };
            if cell.core.seal_state() == SealState::Open {
                let successors =
                    successors_of(topic, segment.id, owners, me, &self.shard_addresses);
                cell.refuse_writes(successors.map(Arc::new));
            }
        }
    }

    /// Topic `topic` as this shard holds its layout, for a subscriber
    /// that follows a split without asking the control plane: each open
    /// segment with the address of its owner's shard (when known), each
    /// sealed one with this broker's (any broker serves its reads). No
    /// live figures.
    pub(crate) fn held_layout(&self, topic: &str) -> Option<TopicInfo> {
        let topics = self.topics.borrow();
        let t = topics.get(topic)?;
        let me = self.config.broker_id.map(BrokerId);
        let segments = t
            .layout
            .segments()
            .iter()
            .map(|s| {
                let address = if s.is_open() {
                    shard_address(s, &t.owners, me, &self.shard_addresses)
                } else {
                    self.shard_addresses.get(self.index).cloned()
                };
                SegmentInfo {
                    address,
                    ..s.info()
                }
            })
            .collect();
        Some(TopicInfo {
            name: topic.to_owned(),
            segments,
        })
    }

    /// Where the range of sealed segment `segment` of `topic` went, as the
    /// layout held says.
    pub(crate) fn successors(&self, topic: &str, segment: u32) -> Option<Successors> {
        let topics = self.topics.borrow();
        let t = topics.get(topic)?;
        let me = self.config.broker_id.map(BrokerId);
        successors_of(
            &t.layout,
            SegmentId(segment),
            &t.owners,
            me,
            &self.shard_addresses,
        )
    }

    /// A read-only view of a segment sealed on another broker (or before
    /// this one started), opened on first use and kept.
    pub(crate) async fn sealed_view(
        &self,
        topic: &str,
        segment: u32,
    ) -> Result<Segment, EngineError> {
        let (name, start, end) = {
            let topics = self.topics.borrow();
            let t = topics.get(topic).ok_or_else(|| EngineError::Shard {
                shard: self.index,
                reason: format!("topic {topic} is gone"),
            })?;
            if let Some(cell) = t.segments.get(&segment) {
                return Ok(cell.clone());
            }
            let s = t
                .layout
                .segment(SegmentId(segment))
                .ok_or_else(|| EngineError::Shard {
                    shard: self.index,
                    reason: format!("topic {topic} has no segment {segment}"),
                })?;
            (t.layout.name().clone(), s.range.start(), s.range.end())
        };
        let view = SealedView::open(
            self.config.clone(),
            self.store.clone(),
            &name,
            segment,
            start,
            end,
        )
        .await?;
        let view = Segment::View(view);
        let mut topics = self.topics.borrow_mut();
        let Some(t) = topics.get_mut(topic) else {
            return Ok(view);
        };
        // Another fetch may have opened it meanwhile: keep one.
        Ok(t.segments.entry(segment).or_insert(view).clone())
    }

    /// The figures of every open segment here, for the load report.
    fn load(&self, sealed: bool) -> Vec<SegmentLoadFigures> {
        let topics = self.topics.borrow();
        let mut out = Vec::new();
        for (name, t) in topics.iter() {
            for held in t.segments.values() {
                let cell = held.core();
                if !sealed && cell.seal_state() != SealState::Open {
                    continue;
                }
                let st = &cell.stats;
                let followers = match held {
                    Segment::Owned(owned) => owned.follower_lags(),
                    _ => Vec::new(),
                };
                out.push(SegmentLoadFigures {
                    topic: name.clone(),
                    segment: cell.id,
                    next_offset: st.next_offset.load(Relaxed),
                    appended_bytes: st.appended_bytes.load(Relaxed),
                    appended_records: st.appended_records.load(Relaxed),
                    first_append_ms: Some(st.first_append_ms.load(Relaxed)).filter(|&t| t > 0),
                    lost_records: st.lost_records.load(Relaxed),
                    followers,
                });
            }
        }
        out
    }

    fn all_segments(&self) -> Vec<Segment> {
        self.topics
            .borrow()
            .values()
            .flat_map(|t| t.segments.values().cloned())
            .collect()
    }

    /// Seal and flush every buffer (graceful shutdown).
    async fn flush_everything(&self) -> Result<(), UnflushedSegments> {
        let mut segments = Vec::new();
        for cell in self.all_segments() {
            if let Err(e) = cell.shut_down().await {
                segments.push(UnflushedSegment::new(cell.core().id, e));
            }
        }
        if segments.is_empty() {
            Ok(())
        } else {
            Err(UnflushedSegments { segments })
        }
    }

    /// Seal buffers by age, forever. Each turn visits every segment once.
    pub(crate) async fn tick_forever(self: Rc<Self>) {
        let period = Duration::from_millis(self.config.tick_ms);
        loop {
            glommio::timer::sleep(period).await;
            let now = Instant::now();
            let mut unflushed = 0;
            for cell in self.all_segments() {
                cell.tick(now);
                unflushed += cell.unflushed_bytes();
            }
            // Levels the metrics page shows, as of this tick.
            let metrics = &self.metrics;
            metrics.unflushed_bytes.set(unflushed);
            metrics.receive_bytes.set(self.receive_budget.in_use());
            metrics
                .traffic(Transport::Tcp)
                .connections
                .open
                .set(self.connections.get() as u64);
        }
    }
}

/// One open segment's counters, as a shard reports them.
#[derive(Debug, Clone)]
pub(crate) struct SegmentLoadFigures {
    pub(crate) topic: String,
    pub(crate) segment: u32,
    pub(crate) next_offset: u64,
    pub(crate) appended_bytes: u64,
    pub(crate) appended_records: u64,
    pub(crate) first_append_ms: Option<u64>,
    pub(crate) lost_records: u64,
    /// How far behind each follower is (an owned segment's).
    pub(crate) followers: Vec<wire::message::FollowerLag>,
}
