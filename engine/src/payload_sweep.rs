//! The orphan sweep: payloads uploaded for a publish that never happened
//! are deleted once they are older than a grace period and no record
//! refers to them.
//!
//! A reference can only be published after its payload was uploaded, and
//! chunks are written in offset order, so the sweep reads each chunk once:
//! it remembers, per segment, the offset up to which chunks were scanned,
//! and the payloads referenced by what it read. Only chunks whose header
//! carries the references flag are read past their header. Payloads are
//! listed by hour bucket; once every payload of a bucket is past the grace
//! period the bucket is settled (each payload kept or deleted) and is not
//! listed again.
//!
//! References still in a broker's memory buffers are not seen, so the grace
//! period must be much longer than the flush age (the default is an hour
//! against a second), and a producer must publish a reference within the
//! grace period of its upload. State lives in memory: after a restart the
//! first sweep lists every payload and reads every chunk with references
//! once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use control::filer_layout;
use control::Topic;
use filer::{Filer, ObjectPath};
use wire::chunk::{ChunkView, CHUNK_HEADER_BYTES};
use wire::payload_ref::PAYLOAD_BUCKET_MS;
use wire::{ChunkHeader, PayloadId};

/// What one sweep did, for logs and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SweepReport {
    /// Orphans deleted.
    pub(crate) deleted: usize,
    /// Chunks read whole because they hold references.
    pub(crate) chunks_read: usize,
    /// Topics skipped because a chunk could not be read (nothing of theirs
    /// is deleted until every chunk reads).
    pub(crate) topics_skipped: usize,
}

/// Why a topic's sweep stopped before deleting anything of it (it is
/// tried again at the next sweep).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SweepError {
    /// Listing or reading the filer failed.
    #[error(transparent)]
    Filer(#[from] filer::FilerError),
    /// A chunk's header does not decode.
    #[error("chunk {chunk}: {source}")]
    ChunkHeader {
        chunk: ObjectPath,
        source: wire::DecodeError,
    },
    /// A chunk was shorter when read than its size said.
    #[error("chunk {chunk} shrank while being read")]
    ChunkShrank { chunk: ObjectPath },
    /// A chunk with references does not verify.
    #[error("chunk {chunk}: {source}")]
    Chunk {
        chunk: ObjectPath,
        source: wire::DecodeError,
    },
}

/// The sweep's memory of one topic incarnation.
#[derive(Debug, Default)]
struct TopicSweep {
    /// Per segment: chunks with a base offset below this were scanned.
    scanned_to: HashMap<u32, u64>,
    /// Payloads of unsettled buckets that a record refers to.
    referenced: HashSet<PayloadId>,
    /// Buckets below this are settled; `None` before the first sweep.
    settled_bucket: Option<u64>,
}

/// The sweeper; owned by the control plane thread.
pub(crate) struct PayloadSweeper {
    filer: Arc<dyn Filer>,
    grace_ms: u64,
    /// Keyed by topic name and creation time, so a topic deleted and
    /// created again starts from nothing.
    topics: HashMap<(String, u64), TopicSweep>,
}

impl PayloadSweeper {
    pub(crate) fn new(filer: Arc<dyn Filer>, grace_ms: u64) -> PayloadSweeper {
        PayloadSweeper {
            filer,
            grace_ms,
            topics: HashMap::new(),
        }
    }

    /// Sweep every topic once at time `now_ms`.
    pub(crate) fn sweep(&mut self, topics: &[Topic], now_ms: u64) -> SweepReport {
        let live: HashSet<(String, u64)> = topics
            .iter()
            .map(|t| (t.name().to_string(), t.created_ms()))
            .collect();
        self.topics.retain(|k, _| live.contains(k));
        let mut report = SweepReport::default();
        for topic in topics {
            let key = (topic.name().to_string(), topic.created_ms());
            let mut state = self.topics.remove(&key).unwrap_or_default();
            match self.sweep_topic(topic, &mut state, now_ms, &mut report) {
                Ok(()) => {}
                Err(e) => {
                    report.topics_skipped += 1;
                    log::warn!("payload sweep of {}: {e}; nothing deleted", topic.name());
                }
            }
            self.topics.insert(key, state);
        }
        report
    }

    fn sweep_topic(
        &self,
        topic: &Topic,
        state: &mut TopicSweep,
        now_ms: u64,
        report: &mut SweepReport,
    ) -> Result<(), SweepError> {
        for segment in topic.segments() {
            let id = segment.id.0;
            let scanned = state.scanned_to.entry(id).or_insert(0);
            let chunk_dir = filer_layout::segment_prefix(topic.name(), id);
            let chunks = self.filer.list(&chunk_dir)?;
            for chunk in chunks {
                let Some(base) = filer_layout::parse_chunk_name(chunk.as_str()) else {
                    continue;
                };
                if base < *scanned {
                    continue;
                }
                let header = self.read_header(&chunk)?;
                if header.has_references {
                    self.collect_references(&chunk, state.settled_bucket, &mut state.referenced)?;
                    report.chunks_read += 1;
                }
                *scanned = header.next_offset.max(base + 1);
            }
        }

        let cutoff_ms = now_ms.saturating_sub(self.grace_ms);
        let listed = match state.settled_bucket {
            None => self
                .filer
                .list(&filer_layout::payloads_prefix(topic.name()))?,
            Some(settled) => {
                let mut all = Vec::new();
                for bucket in settled..=now_ms / PAYLOAD_BUCKET_MS {
                    let dir = filer_layout::payload_bucket(topic.name(), bucket);
                    all.extend(self.filer.list(&dir)?);
                }
                all
            }
        };
        for path in listed {
            let Some(id) = path
                .components()
                .last()
                .and_then(PayloadId::parse_object_name)
            else {
                continue; // Not a payload this broker wrote: leave it.
            };
            if id.created_ms > cutoff_ms || state.referenced.contains(&id) {
                continue;
            }
            match self.filer.delete(&path) {
                Ok(()) => {
                    report.deleted += 1;
                    log::info!("deleted orphan payload {path} (no record refers to it)");
                }
                Err(e) => log::warn!("deleting orphan payload {path}: {e}"),
            }
        }
        let settled = cutoff_ms / PAYLOAD_BUCKET_MS;
        state.settled_bucket = Some(settled);
        state.referenced.retain(|id| id.bucket() >= settled);
        Ok(())
    }

    fn read_header(&self, chunk: &ObjectPath) -> Result<ChunkHeader, SweepError> {
        let mut buf = [0u8; CHUNK_HEADER_BYTES];
        let n = self.filer.read_at(chunk, 0, &mut buf)?;
        ChunkHeader::decode(&buf[..n]).map_err(|source| SweepError::ChunkHeader {
            chunk: chunk.clone(),
            source,
        })
    }

    fn collect_references(
        &self,
        chunk: &ObjectPath,
        settled: Option<u64>,
        into: &mut HashSet<PayloadId>,
    ) -> Result<(), SweepError> {
        let len = self.filer.size(chunk)?;
        let mut bytes = vec![0u8; len as usize];
        // `read_at` is short only at the object's end.
        let n = self.filer.read_at(chunk, 0, &mut bytes)?;
        if n < bytes.len() {
            return Err(SweepError::ChunkShrank {
                chunk: chunk.clone(),
            });
        }
        let view = ChunkView::open(&bytes).map_err(|source| SweepError::Chunk {
            chunk: chunk.clone(),
            source,
        })?;
        for batch in view.batches().filter(|b| b.has_references()) {
            for record in batch.records() {
                if let Some(reference) = record.reference() {
                    if settled.is_none_or(|s| reference.id.bucket() >= s) {
                        into.insert(reference.id);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use control::TopicName;
    use filer::LocalFiler;
    use wire::batch::set_base_offset;
    use wire::chunk::build_chunk;
    use wire::{BatchBuilder, PayloadRef};

    const HOUR: u64 = PAYLOAD_BUCKET_MS;

    fn setup() -> (tempfile::TempDir, Arc<LocalFiler>, Topic) {
        let dir = tempfile::tempdir().unwrap();
        let filer = Arc::new(LocalFiler::open(dir.path()).unwrap());
        let mut cluster = control::Cluster::new(control::ClusterConfig::default());
        cluster
            .handle_register(
                0,
                control::BrokerInfo {
                    id: control::BrokerId(0),
                    shard_addresses: vec!["127.0.0.1:1".into()],
                    capacity: control::Capacity {
                        bytes_per_s: 1,
                        records_per_s: 1,
                    },
                },
            )
            .unwrap();
        let name = TopicName::parse("ns/t").unwrap();
        cluster.create_topic(5, &name, 1, 1, None).unwrap();
        let topic = cluster.topic(&name).unwrap().clone();
        control::topic_store::store_topic(filer.as_ref(), &topic).unwrap();
        (dir, filer, topic)
    }

    fn upload(filer: &LocalFiler, topic: &Topic, created_ms: u64, nonce: u128) -> PayloadRef {
        let id = PayloadId { created_ms, nonce };
        let bytes = nonce.to_le_bytes();
        filer
            .put(&filer_layout::payload(topic.name(), &id), &bytes)
            .unwrap();
        PayloadRef {
            id,
            length: 16,
            checksum: wire::checksum::crc32c(&bytes),
        }
    }

    fn publish(filer: &LocalFiler, topic: &Topic, base: u64, refs: &[PayloadRef]) {
        let mut b = BatchBuilder::new();
        b.push(1, b"", b"inline", &[]).unwrap();
        for r in refs {
            b.push_reference(1, b"", r, &[]).unwrap();
        }
        let mut batch = b.finish(0, 0).to_vec();
        set_base_offset(&mut batch, base);
        let chunk = build_chunk(0, base, &[&batch]).unwrap();
        let path = filer_layout::chunk(topic.name(), 0, base);
        filer.put(&path, &chunk).unwrap();
    }

    fn exists(filer: &LocalFiler, topic: &Topic, r: &PayloadRef) -> bool {
        filer
            .size(&filer_layout::payload(topic.name(), &r.id))
            .is_ok()
    }

    #[test]
    fn orphans_go_after_the_grace_period_referenced_payloads_stay() {
        let (_dir, filer, topic) = setup();
        let t0 = 100 * HOUR + 10;
        let kept = upload(&filer, &topic, t0, 1);
        let orphan = upload(&filer, &topic, t0, 2);
        let young = upload(&filer, &topic, t0 + HOUR, 3);
        publish(&filer, &topic, 0, &[kept]);
        let mut sweeper = PayloadSweeper::new(filer.clone(), 1_000);
        // Within the grace period nothing goes.
        let r = sweeper.sweep(std::slice::from_ref(&topic), t0 + 500);
        assert_eq!(r.deleted, 0);
        assert_eq!(r.chunks_read, 1);
        // Past it, the orphan goes; the referenced and the young stay.
        let r = sweeper.sweep(std::slice::from_ref(&topic), t0 + 2_000);
        assert_eq!(r.deleted, 1);
        assert_eq!(r.chunks_read, 0, "chunks are read once");
        assert!(exists(&filer, &topic, &kept));
        assert!(!exists(&filer, &topic, &orphan));
        assert!(exists(&filer, &topic, &young));
        // A reference published late, in a new chunk, still saves its
        // payload; a fresh sweeper (a restarted broker) agrees.
        publish(&filer, &topic, 2, &[young]);
        let r = sweeper.sweep(std::slice::from_ref(&topic), t0 + 3 * HOUR);
        assert_eq!((r.deleted, r.chunks_read), (0, 1));
        let mut restarted = PayloadSweeper::new(filer.clone(), 1_000);
        let r = restarted.sweep(std::slice::from_ref(&topic), t0 + 3 * HOUR);
        assert_eq!((r.deleted, r.chunks_read), (0, 2));
        assert!(exists(&filer, &topic, &kept) && exists(&filer, &topic, &young));
    }

    #[test]
    fn an_unreadable_chunk_stops_deletion() {
        let (_dir, filer, topic) = setup();
        let orphan = upload(&filer, &topic, 10, 9);
        let path = filer_layout::chunk(topic.name(), 0, 0);
        filer.put(&path, b"not a chunk").unwrap();
        let mut sweeper = PayloadSweeper::new(filer.clone(), 1_000);
        let r = sweeper.sweep(std::slice::from_ref(&topic), 10 * HOUR);
        assert_eq!((r.deleted, r.topics_skipped), (0, 1));
        assert!(exists(&filer, &topic, &orphan));
    }

    #[test]
    fn a_sweep_error_names_the_chunk() {
        let (_dir, filer, topic) = setup();
        let path = filer_layout::chunk(topic.name(), 0, 0);
        filer.put(&path, b"not a chunk").unwrap();
        let sweeper = PayloadSweeper::new(filer.clone(), 1_000);
        let err = sweeper
            .sweep_topic(
                &topic,
                &mut TopicSweep::default(),
                10 * HOUR,
                &mut SweepReport::default(),
            )
            .unwrap_err();
        assert!(
            matches!(&err, SweepError::ChunkHeader { chunk, .. } if *chunk == path),
            "{err:?}"
        );
        assert!(
            err.to_string().starts_with(&format!("chunk {path}: ")),
            "{err}"
        );
    }

    #[test]
    fn foreign_objects_are_left_alone() {
        let (_dir, filer, topic) = setup();
        let stray = filer_layout::payload_bucket(topic.name(), 1)
            .join("notes.txt")
            .unwrap();
        filer.put(&stray, b"mine").unwrap();
        let mut sweeper = PayloadSweeper::new(filer.clone(), 0);
        let r = sweeper.sweep(std::slice::from_ref(&topic), 10 * HOUR);
        assert_eq!(r.deleted, 0);
        assert!(filer.size(&stray).is_ok());
    }
}
