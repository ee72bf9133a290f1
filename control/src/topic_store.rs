//! The topics the control plane keeps in the filer: one object per topic at
//! `topics/<namespace>/<name>/topic.json` (its format is on
//! [`Topic::to_json_bytes`]); everything else of the topic (chunk files,
//! seal markers) lives under the same `topics/<namespace>/<name>/` prefix,
//! so deleting the prefix deletes the topic.
//!
//! `topic.json` is the commit point: creating writes it before the topic is
//! told to any broker; deleting removes it first, then the rest of the
//! prefix. A crash in between leaves files under a prefix without a
//! `topic.json`; they are ignored on load and cleared when a topic of that
//! name is created again.

use filer::{Filer, FilerError, ObjectPath};

use crate::{
    filer_layout, ControlError, CorruptLayout, Topic, TopicJsonError, TopicName,
    TOPIC_JSON_BYTES_MAX,
};

/// Every topic stored in `filer`, sorted by name: each
/// `topics/<ns>/<name>/topic.json`, decoded and validated.
///
/// Any layout object that fails to read, decode or validate, or that names a
/// different topic than its path, fails the whole load with
/// [`ControlError::Corrupt`] naming the path: starting without a topic would
/// silently drop its data. Only the two directory levels under `topics/` and
/// each topic's `topic.json` are read; chunk files and payloads below are
/// never listed.
pub fn load_topics(filer: &dyn Filer) -> Result<Vec<Topic>, ControlError> {
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
                return Err(ControlError::corrupt(
                    path.as_str(),
                    CorruptLayout::TopicStoredAs {
                        holds: topic.name().clone(),
                        stored_as: name,
                    },
                ));
            }
            loaded.push(topic);
        }
    }
    loaded.sort_by(|a, b| a.name().cmp(b.name()));
    Ok(loaded)
}

/// Write `topic`'s `topic.json` (the commit point of every change to it).
pub fn store_topic(filer: &dyn Filer, topic: &Topic) -> Result<(), ControlError> {
    filer.put(
        &filer_layout::topic_file(topic.name()),
        &topic.to_json_bytes(),
    )?;
    Ok(())
}

/// If `path` is `topics/<ns>/<name>/topic.json`, the topic name it is stored
/// under; `None` for any other shape. A layout object under a directory that
/// is not a valid topic name is corrupt, not ignorable.
fn topic_name_of_layout_object(path: &ObjectPath) -> Result<Option<TopicName>, ControlError> {
    filer_layout::parse_topic_file(path)
        .transpose()
        .map_err(|e| {
            ControlError::corrupt(path.as_str(), CorruptLayout::TopicDirectory(Box::new(e)))
        })
}

/// Read a whole layout object, refusing ones too large to be valid.
fn read_layout_object(filer: &dyn Filer, path: &ObjectPath) -> Result<Vec<u8>, ControlError> {
    let size = filer.size(path)?;
    if size > TOPIC_JSON_BYTES_MAX {
        return Err(ControlError::corrupt(
            path.as_str(),
            TopicJsonError::TooLarge {
                bytes: size,
                max: TOPIC_JSON_BYTES_MAX,
            },
        ));
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
    use filer::LocalFiler;

    use super::*;
    use crate::{BrokerId, BrokerInfo, Capacity, Cluster, ClusterConfig, InvalidTopic};

    fn name(text: &str) -> TopicName {
        TopicName::parse(text).unwrap()
    }

    fn p(path: &str) -> ObjectPath {
        ObjectPath::new(path).unwrap()
    }

    fn local() -> (tempfile::TempDir, LocalFiler) {
        let dir = tempfile::tempdir().unwrap();
        let filer = LocalFiler::open(dir.path()).unwrap();
        (dir, filer)
    }

    /// A topic of `segments` segments on a one-broker core.
    fn topic(text: &str, segments: u32) -> Topic {
        let mut cluster = Cluster::new(ClusterConfig::default());
        cluster
            .handle_register(
                0,
                BrokerInfo {
                    id: BrokerId(0),
                    shard_addresses: vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()],
                    capacity: Capacity {
                        bytes_per_s: 1,
                        records_per_s: 1,
                    },
                },
            )
            .unwrap();
        cluster
            .create_topic(5, &name(text), segments, 1, None)
            .unwrap();
        cluster.topic(&name(text)).unwrap().clone()
    }

    fn corrupt_path(result: Result<Vec<Topic>, ControlError>) -> (String, CorruptLayout) {
        match result {
            Err(ControlError::Corrupt { path, reason }) => (path, *reason),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn stored_topics_load_back_sorted_by_name() {
        let (_dir, filer) = local();
        assert!(load_topics(&filer).unwrap().is_empty());
        let orders = topic("pay/orders", 3);
        let audit = topic("ops/audit", 2);
        store_topic(&filer, &orders).unwrap();
        store_topic(&filer, &audit).unwrap();
        assert_eq!(load_topics(&filer).unwrap(), vec![audit, orders]);
    }

    #[test]
    fn corrupt_topic_json_names_the_path() {
        let (_dir, filer) = local();
        let good = topic("ns/good", 2);
        store_topic(&filer, &good).unwrap();
        let good_json = good.to_json_bytes();
        let bad = p("topics/ns/bad/topic.json");

        filer.put(&bad, b"{ this is not json").unwrap();
        let (path, reason) = corrupt_path(load_topics(&filer));
        assert_eq!(path, "topics/ns/bad/topic.json");
        assert!(
            matches!(reason, CorruptLayout::Topic(TopicJsonError::NotAnObject(_))),
            "{reason:?}"
        );
        assert!(
            reason.to_string().contains("not a topic JSON object"),
            "{reason}"
        );

        // Valid JSON, but stored under another topic's name.
        filer.put(&bad, &good_json).unwrap();
        let (path, reason) = corrupt_path(load_topics(&filer));
        assert_eq!(path, "topics/ns/bad/topic.json");
        match &reason {
            CorruptLayout::TopicStoredAs { holds, stored_as } => {
                assert_eq!((holds, stored_as), (&name("ns/good"), &name("ns/bad")));
            }
            other => panic!("expected TopicStoredAs, got {other:?}"),
        }
        assert!(
            reason
                .to_string()
                .contains("holds topic ns/good but is stored as ns/bad"),
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
        let (_, reason) = corrupt_path(load_topics(&filer));
        assert!(
            matches!(
                reason,
                CorruptLayout::Topic(TopicJsonError::Invalid(InvalidTopic::Uncovered {
                    start: 0,
                    end: 1,
                    ..
                }))
            ),
            "{reason:?}"
        );
        assert!(
            reason
                .to_string()
                .contains("no open segment covers [0x0, 0x1)"),
            "{reason}"
        );

        // Too large to be a layout object.
        filer
            .put(&bad, &vec![b' '; TOPIC_JSON_BYTES_MAX as usize + 1])
            .unwrap();
        let (_, reason) = corrupt_path(load_topics(&filer));
        assert!(
            matches!(
                reason,
                CorruptLayout::Topic(TopicJsonError::TooLarge {
                    bytes,
                    max: TOPIC_JSON_BYTES_MAX
                }) if bytes == TOPIC_JSON_BYTES_MAX + 1
            ),
            "{reason:?}"
        );
        assert!(reason.to_string().contains("limit"), "{reason}");
        filer.delete(&p("topics/ns/bad")).unwrap();

        // A directory name that is not a valid topic name.
        let odd = p("topics/ns/b@d/topic.json");
        filer.put(&odd, &good_json).unwrap();
        let (path, reason) = corrupt_path(load_topics(&filer));
        assert_eq!(path, "topics/ns/b@d/topic.json");
        assert!(
            matches!(&reason, CorruptLayout::TopicDirectory(e)
                if matches!(**e, ControlError::InvalidTopicName(_))),
            "{reason:?}"
        );
        assert!(
            reason.to_string().contains("invalid character '@'"),
            "{reason}"
        );
        filer.delete(&p("topics/ns/b@d")).unwrap();

        assert_eq!(load_topics(&filer).unwrap(), vec![good]);
    }

    #[test]
    fn directories_and_objects_that_are_not_layouts_are_ignored() {
        let (_dir, filer) = local();
        filer
            .put(&p("topics/ns/gone/0/00000000000000000000.chunk"), b"x")
            .unwrap();
        filer.put(&p("topics/ns/b@d/notes"), b"x").unwrap();
        filer.put(&p("topics/stray"), b"x").unwrap();
        assert!(load_topics(&filer).unwrap().is_empty());
        let t = topic("ns/t", 2);
        store_topic(&filer, &t).unwrap();
        for stray in [
            "topics/README",
            "topics/ns/topic.json",
            "topics/ns/t/segments/0/topic.json",
            "topics/ns/t/other.json",
        ] {
            filer.put(&p(stray), b"not a layout").unwrap();
        }
        assert_eq!(load_topics(&filer).unwrap(), vec![t]);
    }
}
