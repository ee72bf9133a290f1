//! [`ControlService`]: the embedded control plane, persisting the
//! [`Layout`] through a [`Filer`].
//!
//! Synchronous and single-owner: the broker runs it on a thread of its own
//! and sends it requests. It is the only writer of `topics/*/*/topic.json`;
//! the in-memory layout is the truth and the filer its durable copy.
//!
//! Storage layout: one object per topic at
//! `topics/<namespace>/<name>/topic.json` (format in [`Topic`]'s module docs
//! and on [`Topic::to_json_bytes`]); everything else of the topic (chunk
//! files) lives under the same `topics/<namespace>/<name>/` prefix, so
//! deleting the prefix deletes the topic.
//!
//! Crash consistency: `topic.json` is the commit point. Creating writes it
//! atomically before the topic joins the layout; deleting removes it first,
//! then the rest of the prefix. A crash in between leaves files under a
//! prefix without a `topic.json`; they are ignored on load and cleared when a
//! topic of that name is created again.

use std::sync::Arc;

use filer::{Filer, FilerError, ObjectPath};

use crate::{ControlError, Layout, Topic, TopicName, TOPIC_JSON_BYTES_MAX};

use crate::filer_layout::{self, TOPICS_PREFIX};

/// The control plane of a single broker: the [`Layout`] plus its persistence.
#[derive(Debug)]
pub struct ControlService {
    filer: Arc<dyn Filer>,
    layout: Layout,
}

impl ControlService {
    /// Load every topic stored in `filer` into a layout for brokers with
    /// `shard_count` shards (segment shards are re-mapped modulo it).
    ///
    /// Any `topics/<ns>/<name>/topic.json` that fails to read, decode or
    /// validate, or that names a different topic than its path, fails the
    /// whole open with [`ControlError::Corrupt`] naming the path: starting
    /// without a topic would silently drop its data. Only the two directory
    /// levels under `topics/` and each topic's `topic.json` are read; chunk
    /// files and payloads below are never listed.
    ///
    /// `now_ms` is the caller's clock; loading does not depend on it today,
    /// but it is taken so the service's entry points all receive time the
    /// same way.
    pub fn open(
        filer: Arc<dyn Filer>,
        shard_count: u16,
        now_ms: u64,
    ) -> Result<ControlService, ControlError> {
        let _ = now_ms;
        if shard_count == 0 {
            return Err(ControlError::InvalidShardCount);
        }
        let mut layout = Layout::new(shard_count);
        for topic in load_topics(filer.as_ref())? {
            layout.insert_loaded(topic)?;
        }
        // Each topic was validated on decode; this also checks the derived
        // per-shard counts before the service takes any request.
        layout
            .check_invariants()
            .map_err(|reason| ControlError::Corrupt {
                path: TOPICS_PREFIX.to_owned(),
                reason,
            })?;
        Ok(ControlService { filer, layout })
    }

    /// Create topic `name` with `segment_count` segments (see
    /// [`Layout::create_topic`]) and persist it before returning. If
    /// persisting fails the layout is unchanged and the error returned.
    pub fn create_topic(
        &mut self,
        now_ms: u64,
        name: &TopicName,
        segment_count: u32,
    ) -> Result<Topic, ControlError> {
        let topic = self.layout.prepare_topic(now_ms, name, segment_count)?;
        // Leftovers of a delete interrupted after its commit point belong to
        // no live topic; clear them so the new topic starts empty.
        self.filer.delete(&filer_layout::topic_prefix(name))?;
        self.filer
            .put(&filer_layout::topic_file(name), &topic.to_json_bytes())?;
        Ok(self.layout.insert(topic).clone())
    }

    /// Delete topic `name`: its `topic.json` first (the commit point), then
    /// the layout entry, then everything else under its prefix (chunk files).
    ///
    /// If removing `topic.json` fails, nothing changed. If only the final
    /// cleanup fails, the topic is already deleted (from the layout and
    /// durably) and the error is still returned; the leftovers are cleared
    /// by the next creation of the same name.
    pub fn delete_topic(&mut self, name: &TopicName) -> Result<Topic, ControlError> {
        if self.layout.topic(name).is_none() {
            return Err(ControlError::TopicNotFound(name.to_string()));
        }
        self.filer.delete(&filer_layout::topic_file(name))?;
        let topic = self.layout.delete_topic(name)?;
        self.filer.delete(&filer_layout::topic_prefix(name))?;
        Ok(topic)
    }

    /// A copy of topic `name`, if it exists.
    pub fn topic(&self, name: &TopicName) -> Option<Topic> {
        self.layout.topic(name).cloned()
    }

    /// Copies of every topic, sorted by name.
    pub fn topics(&self) -> Vec<Topic> {
        self.layout.topics().cloned().collect()
    }

    /// The layout, for read-only queries.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
}

/// Every topic stored in `filer`, sorted by name: each
/// `topics/<ns>/<name>/topic.json`, decoded and validated.
///
/// Any layout object that fails to read, decode or validate, or that names a
/// different topic than its path, fails the whole load with
/// [`ControlError::Corrupt`] naming the path: starting without a topic would
/// silently drop its data. Only the two directory levels under `topics/` and
/// each topic's `topic.json` are read; chunk files and payloads below are
/// never listed. Shared by [`ControlService`] and the cluster's driver.
pub(crate) fn load_topics(filer: &dyn Filer) -> Result<Vec<Topic>, ControlError> {
    let mut loaded = Vec::new();
    let topics = filer_layout::topics();
    // Two levels of names, then one object per topic: never a walk of the
    // chunks and payloads below.
    for namespace in filer.list_children(&topics)? {
        for topic in filer.list_children(&topics.join(&namespace)?)? {
            let path = filer_layout::listed_topic_file(&namespace, &topic)?;
            let bytes = match read_layout_object(filer, &path) {
                // A directory without a layout: an interrupted delete's
                // leftovers, or not a topic at all.
                Err(ControlError::Filer(FilerError::NotFound { .. })) => continue,
                other => other?,
            };
            let Some(name) = topic_name_of_layout_object(&path)? else {
                continue;
            };
            let topic = Topic::from_json_bytes_at(&bytes, path.as_str())?;
            if topic.name() != &name {
                return Err(ControlError::Corrupt {
                    path: path.to_string(),
                    reason: format!("holds topic {} but is stored as {name}", topic.name()),
                });
            }
            loaded.push(topic);
        }
    }
    loaded.sort_by(|a, b| a.name().cmp(b.name()));
    Ok(loaded)
}

/// If `path` is `topics/<ns>/<name>/topic.json`, the topic name it is stored
/// under; `None` for any other shape. A layout object under a directory that
/// is not a valid topic name is corrupt, not ignorable.
fn topic_name_of_layout_object(path: &ObjectPath) -> Result<Option<TopicName>, ControlError> {
    filer_layout::parse_topic_file(path)
        .transpose()
        .map_err(|e| ControlError::Corrupt {
            path: path.to_string(),
            reason: e.to_string(),
        })
}

/// Read a whole layout object, refusing ones too large to be valid.
fn read_layout_object(filer: &dyn Filer, path: &ObjectPath) -> Result<Vec<u8>, ControlError> {
    let size = filer.size(path)?;
    if size > TOPIC_JSON_BYTES_MAX {
        return Err(ControlError::Corrupt {
            path: path.to_string(),
            reason: format!("{size} bytes is over the {TOPIC_JSON_BYTES_MAX}-byte limit"),
        });
    }
    let mut bytes =
        vec![0; usize::try_from(size).expect("size <= TOPIC_JSON_BYTES_MAX fits usize")];
    let read = filer.read_at(path, 0, &mut bytes)?;
    // Short only if the object shrank since size(); decoding what is there
    // then fails or succeeds on its own merits.
    bytes.truncate(read);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicBool, Ordering};

    use filer::{FilerError, LocalFiler};

    use super::*;
    use crate::SegmentId;

    fn name(text: &str) -> TopicName {
        TopicName::parse(text).unwrap()
    }

    fn p(path: &str) -> ObjectPath {
        ObjectPath::new(path).unwrap()
    }

    fn local() -> (tempfile::TempDir, Arc<LocalFiler>) {
        let dir = tempfile::tempdir().unwrap();
        let filer = Arc::new(LocalFiler::open(dir.path()).unwrap());
        (dir, filer)
    }

    fn open(filer: &Arc<LocalFiler>, shards: u16) -> Result<ControlService, ControlError> {
        ControlService::open(filer.clone(), shards, 0)
    }

    fn corrupt_path(result: Result<ControlService, ControlError>) -> (String, String) {
        match result {
            Err(ControlError::Corrupt { path, reason }) => (path, reason),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    /// A LocalFiler whose puts and deletes can be made to fail.
    #[derive(Debug)]
    struct FlakyFiler {
        inner: LocalFiler,
        fail_puts: AtomicBool,
        fail_deletes: AtomicBool,
    }

    impl FlakyFiler {
        fn failure(op: &'static str, path: &ObjectPath) -> FilerError {
            FilerError::Io {
                op,
                path: path.to_string(),
                source: std::io::Error::other("injected failure"),
            }
        }
    }

    impl Filer for FlakyFiler {
        fn put(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
            if self.fail_puts.load(Ordering::Relaxed) {
                return Err(FlakyFiler::failure("put", path));
            }
            self.inner.put(path, bytes)
        }
        fn create(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
            if self.fail_puts.load(Ordering::Relaxed) {
                return Err(FlakyFiler::failure("create", path));
            }
            self.inner.create(path, bytes)
        }
        fn read_at(
            &self,
            path: &ObjectPath,
            offset: u64,
            buf: &mut [u8],
        ) -> Result<usize, FilerError> {
            self.inner.read_at(path, offset, buf)
        }
        fn size(&self, path: &ObjectPath) -> Result<u64, FilerError> {
            self.inner.size(path)
        }
        fn list(&self, prefix: &ObjectPath) -> Result<Vec<ObjectPath>, FilerError> {
            self.inner.list(prefix)
        }
        fn delete(&self, path: &ObjectPath) -> Result<(), FilerError> {
            if self.fail_deletes.load(Ordering::Relaxed) {
                return Err(FlakyFiler::failure("delete", path));
            }
            self.inner.delete(path)
        }
    }

    #[test]
    fn create_persists_and_reopen_sees_it() {
        let (_dir, filer) = local();
        let mut service = open(&filer, 4).unwrap();
        let orders = service.create_topic(10, &name("pay/orders"), 3).unwrap();
        let audit = service.create_topic(20, &name("ops/audit"), 2).unwrap();
        assert_eq!(service.topic(&name("pay/orders")), Some(orders.clone()));
        assert_eq!(service.topics(), vec![audit.clone(), orders.clone()]);
        let stored = filer.file_path(&p("topics/pay/orders/topic.json"));
        assert_eq!(std::fs::read(stored).unwrap(), orders.to_json_bytes());

        let reopened = open(&filer, 4).unwrap();
        assert_eq!(reopened.topics(), vec![audit, orders]);
        assert_eq!(
            reopened.layout().open_segments_per_shard(),
            service.layout().open_segments_per_shard()
        );
        reopened.layout().check_invariants().unwrap();
    }

    #[test]
    fn empty_store_opens_empty() {
        let (_dir, filer) = local();
        let service = open(&filer, 1).unwrap();
        assert!(service.topics().is_empty());
        assert_eq!(service.layout().shard_count(), 1);
    }

    #[test]
    fn create_errors_leave_no_trace() {
        let (_dir, filer) = local();
        let mut service = open(&filer, 2).unwrap();
        let first = service.create_topic(1, &name("ns/t"), 2).unwrap();
        let err = service.create_topic(2, &name("ns/t"), 5).unwrap_err();
        assert!(matches!(err, ControlError::TopicExists(_)), "{err}");
        let err = service.create_topic(2, &name("ns/u"), 0).unwrap_err();
        assert!(
            matches!(err, ControlError::InvalidSegmentCount { .. }),
            "{err}"
        );
        assert_eq!(service.topics(), vec![first.clone()]);
        assert_eq!(open(&filer, 2).unwrap().topics(), vec![first]);
    }

    #[test]
    fn failed_put_leaves_layout_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let flaky = Arc::new(FlakyFiler {
            inner: LocalFiler::open(dir.path()).unwrap(),
            fail_puts: AtomicBool::new(false),
            fail_deletes: AtomicBool::new(false),
        });
        let mut service = ControlService::open(flaky.clone(), 2, 0).unwrap();
        service.create_topic(0, &name("ns/a"), 1).unwrap();
        let loads_before = service.layout().open_segments_per_shard().to_vec();

        flaky.fail_puts.store(true, Ordering::Relaxed);
        let err = service.create_topic(0, &name("ns/b"), 3).unwrap_err();
        assert!(
            matches!(err, ControlError::Filer(FilerError::Io { op: "put", .. })),
            "{err}"
        );
        assert!(service.topic(&name("ns/b")).is_none());
        assert_eq!(service.layout().open_segments_per_shard(), loads_before);
        service.layout().check_invariants().unwrap();

        flaky.fail_puts.store(false, Ordering::Relaxed);
        let b = service.create_topic(0, &name("ns/b"), 3).unwrap();
        assert_eq!(b.segments().len(), 3);

        // A delete whose commit point fails changes nothing either.
        flaky.fail_deletes.store(true, Ordering::Relaxed);
        let err = service.delete_topic(&name("ns/b")).unwrap_err();
        assert!(matches!(err, ControlError::Filer(_)), "{err}");
        assert_eq!(service.topic(&name("ns/b")), Some(b.clone()));
        flaky.fail_deletes.store(false, Ordering::Relaxed);
        let reopened = ControlService::open(flaky, 2, 0).unwrap();
        assert_eq!(reopened.topic(&name("ns/b")), Some(b));
    }

    #[test]
    fn delete_removes_everything_under_the_prefix() {
        let (_dir, filer) = local();
        let mut service = open(&filer, 2).unwrap();
        let kept = service.create_topic(0, &name("ns/keep"), 1).unwrap();
        service.create_topic(0, &name("ns/t"), 2).unwrap();
        // Chunk files the engine would have written.
        filer
            .put(&p("topics/ns/t/segments/0/chunk-0"), b"records")
            .unwrap();
        filer
            .put(&p("topics/ns/t/segments/1/chunk-0"), b"records")
            .unwrap();
        filer
            .put(&p("topics/ns/keep/segments/0/chunk-0"), b"records")
            .unwrap();

        let deleted = service.delete_topic(&name("ns/t")).unwrap();
        assert_eq!(deleted.name(), &name("ns/t"));
        assert!(service.topic(&name("ns/t")).is_none());
        assert!(filer.list(&p("topics/ns/t")).unwrap().is_empty());
        assert_eq!(filer.list(&p("topics/ns/keep")).unwrap().len(), 2);
        assert_eq!(service.layout().open_segments_per_shard(), [1, 0]);

        let err = service.delete_topic(&name("ns/t")).unwrap_err();
        assert!(matches!(err, ControlError::TopicNotFound(_)), "{err}");

        let reopened = open(&filer, 2).unwrap();
        assert_eq!(reopened.topics(), vec![kept]);
    }

    #[test]
    fn recreate_clears_leftovers_of_an_interrupted_delete() {
        let (_dir, filer) = local();
        let mut service = open(&filer, 1).unwrap();
        // A delete that crashed after removing topic.json.
        filer
            .put(&p("topics/ns/t/segments/0/chunk-0"), b"old records")
            .unwrap();
        let reopened = open(&filer, 1).unwrap();
        assert!(reopened.topics().is_empty());

        service.create_topic(0, &name("ns/t"), 1).unwrap();
        assert_eq!(
            filer.list(&p("topics/ns/t")).unwrap(),
            vec![p("topics/ns/t/topic.json")]
        );
    }

    #[test]
    fn reopen_with_a_different_shard_count() {
        let (_dir, filer) = local();
        let mut service = open(&filer, 8).unwrap();
        service.create_topic(0, &name("ns/wide"), 8).unwrap();
        service.create_topic(0, &name("ns/two"), 2).unwrap();

        let narrow = open(&filer, 3).unwrap();
        narrow.layout().check_invariants().unwrap();
        let shards: Vec<u16> = narrow
            .topic(&name("ns/wide"))
            .unwrap()
            .segments()
            .iter()
            .map(|s| s.shard)
            .collect();
        assert_eq!(shards, [0, 1, 2, 0, 1, 2, 0, 1]);
        // "ns/two" sat on shards 0 and 1 of 8, so stays there.
        assert_eq!(narrow.layout().open_segments_per_shard(), [4, 4, 2]);
        // Ranges and ids survive untouched.
        let before = service.topic(&name("ns/wide")).unwrap();
        let after = narrow.topic(&name("ns/wide")).unwrap();
        for (b, a) in before.segments().iter().zip(after.segments()) {
            assert_eq!((b.id, b.range), (a.id, a.range));
        }

        let err = open(&filer, 0).unwrap_err();
        assert!(matches!(err, ControlError::InvalidShardCount), "{err}");
    }

    #[test]
    fn corrupt_topic_json_names_the_path() {
        let (_dir, filer) = local();
        let mut service = open(&filer, 2).unwrap();
        service.create_topic(0, &name("ns/good"), 2).unwrap();
        let good_json = service.topic(&name("ns/good")).unwrap().to_json_bytes();
        let bad = p("topics/ns/bad/topic.json");

        filer.put(&bad, b"{ this is not json").unwrap();
        let (path, reason) = corrupt_path(open(&filer, 2));
        assert_eq!(path, "topics/ns/bad/topic.json");
        assert!(reason.contains("not a topic JSON object"), "{reason}");
        let message = open(&filer, 2).unwrap_err().to_string();
        assert!(message.contains("topics/ns/bad/topic.json"), "{message}");

        // Valid JSON, but stored under another topic's name.
        filer.put(&bad, &good_json).unwrap();
        let (path, reason) = corrupt_path(open(&filer, 2));
        assert_eq!(path, "topics/ns/bad/topic.json");
        assert!(
            reason.contains("holds topic ns/good but is stored as ns/bad"),
            "{reason}"
        );

        // Open ranges that no longer tile the ring.
        let gap = String::from_utf8(good_json.clone()).unwrap().replacen(
            "\"start\": 0",
            "\"start\": 1",
            1,
        );
        filer
            .put(&bad, gap.replace("ns/good", "ns/bad").as_bytes())
            .unwrap();
        let (path, reason) = corrupt_path(open(&filer, 2));
        assert_eq!(path, "topics/ns/bad/topic.json");
        assert!(
            reason.contains("no open segment covers [0x0, 0x1)"),
            "{reason}"
        );

        // Too large to be a layout object.
        filer
            .put(&bad, &vec![b' '; TOPIC_JSON_BYTES_MAX as usize + 1])
            .unwrap();
        let (path, reason) = corrupt_path(open(&filer, 2));
        assert_eq!(path, "topics/ns/bad/topic.json");
        assert!(reason.contains("limit"), "{reason}");
        filer.delete(&p("topics/ns/bad")).unwrap();

        // A directory name that is not a valid topic name.
        let odd = p("topics/ns/b@d/topic.json");
        filer.put(&odd, &good_json).unwrap();
        let (path, reason) = corrupt_path(open(&filer, 2));
        assert_eq!(path, "topics/ns/b@d/topic.json");
        assert!(reason.contains("invalid character '@'"), "{reason}");
        filer.delete(&p("topics/ns/b@d")).unwrap();

        let healed = open(&filer, 2).unwrap();
        assert_eq!(healed.topics().len(), 1);
    }

    #[test]
    fn directories_without_a_layout_are_ignored() {
        let (_dir, filer) = local();
        filer
            .put(&p("topics/ns/gone/0/00000000000000000000.chunk"), b"x")
            .unwrap();
        filer.put(&p("topics/ns/b@d/notes"), b"x").unwrap();
        filer.put(&p("topics/stray"), b"x").unwrap();
        let service = open(&filer, 1).unwrap();
        assert!(service.topics().is_empty());
    }

    #[test]
    fn other_objects_under_topics_are_ignored() {
        let (_dir, filer) = local();
        let mut service = open(&filer, 2).unwrap();
        let t = service.create_topic(0, &name("ns/t"), 2).unwrap();
        for stray in [
            "topics/README",
            "topics/ns/topic.json",
            "topics/ns/t/segments/0/topic.json",
            "topics/ns/t/other.json",
        ] {
            filer.put(&p(stray), b"not a layout").unwrap();
        }
        assert_eq!(open(&filer, 2).unwrap().topics(), vec![t]);
    }

    #[test]
    fn many_topics_round_trip() {
        let (_dir, filer) = local();
        let mut service = open(&filer, 5).unwrap();
        for i in 0..50u32 {
            service
                .create_topic(u64::from(i), &name(&format!("ns{}/t{i}", i % 4)), i % 9 + 1)
                .unwrap();
        }
        for i in (0..50).step_by(3) {
            service
                .delete_topic(&name(&format!("ns{}/t{i}", i % 4)))
                .unwrap();
        }
        let reopened = open(&filer, 5).unwrap();
        assert_eq!(reopened.topics(), service.topics());
        assert_eq!(
            reopened.layout().open_segments_per_shard(),
            service.layout().open_segments_per_shard()
        );
        let t1 = reopened.topic(&name("ns1/t1")).unwrap();
        assert_eq!(t1.segment(SegmentId(1)).unwrap().id, SegmentId(1));
    }
}
