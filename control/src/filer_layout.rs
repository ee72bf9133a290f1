//! The filer's namespace: the path of every object kelp stores is made, and
//! parsed back, here and nowhere else. `docs/filer-layout.md` gives each
//! object's path and format byte by byte.
//!
//! ```text
//! topics/<ns>/<name>/topic.json                      the topic's layout
//! topics/<ns>/<name>/<segment>/<base:020>.chunk      a chunk of records
//! topics/<ns>/<name>/<segment>/sealed                the segment's seal marker
//! topics/<ns>/<name>/<segment>/lost-<from:020>-<to:020>  offsets recovery could not read
//! topics/<ns>/<name>/payloads/<hour:010>/<id>        a payload passed by reference
//! topics/<ns>/<name>/kafka-producers/<segment>       Kafka idempotent-producer state
//! kafka/groups/<group, escaped>.offsets              a Kafka group's offsets
//! kafka/producer_ids                                 the next free Kafka producer id
//! ```
//!
//! Every name that goes into a path is validated before it gets here (a
//! [`TopicName`], a number, a [`PayloadId`], an escaped group id), and the
//! longest of them fits [`filer::OBJECT_PATH_BYTES_MAX`] (asserted below),
//! so making a path cannot fail.

use filer::{FilerError, ObjectPath, OBJECT_PATH_BYTES_MAX};
use wire::PayloadId;

use crate::topic_name::{TopicName, TOPIC_NAME_BYTES_MAX};
use crate::ControlError;

/// Everything of every topic is under this prefix.
pub const TOPICS_PREFIX: &str = "topics";
/// A topic's layout, JSON (docs/control-plane.md).
pub const TOPIC_FILE_NAME: &str = "topic.json";
/// A segment's seal marker, next to its chunks.
pub const SEAL_MARKER_NAME: &str = "sealed";
/// The suffix of a chunk's name; its stem is the base offset, 20 digits.
pub const CHUNK_SUFFIX: &str = ".chunk";
/// Digits of a chunk name's base offset (`u64::MAX` has 20).
const CHUNK_OFFSET_DIGITS: usize = 20;
/// A topic's payloads, under the topic's prefix.
pub const PAYLOADS_DIR: &str = "payloads";
/// Digits of a payload hour bucket's directory name.
const BUCKET_DIGITS: usize = 10;
/// A Kafka-facing topic's idempotent-producer snapshots, one per segment.
const KAFKA_PRODUCERS_DIR: &str = "kafka-producers";
/// Kafka group offsets, one object per group.
const KAFKA_GROUPS_PREFIX: &str = "kafka/groups";
const KAFKA_GROUP_SUFFIX: &str = ".offsets";
/// The next Kafka producer id not yet handed out.
const KAFKA_PRODUCER_IDS_PATH: &str = "kafka/producer_ids";
/// Where each broker shard keeps the end of the kelp producer ids it
/// reserved: `producer-ids/<broker>/<shard>`.
const PRODUCER_IDS_PREFIX: &str = "producer-ids";

/// The longest path below a topic: its prefix, then the longest of what
/// goes under it (a payload's `payloads/<bucket>/<id>`).
const TOPIC_PATH_BYTES_MAX: usize = TOPICS_PREFIX.len()
    + 1
    + TOPIC_NAME_BYTES_MAX
    + 1
    + PAYLOADS_DIR.len()
    + 1
    // An hour bucket of any u64 creation time: up to 20 digits.
    + 20
    + 1
    + wire::payload_ref::NAME_BYTES;
const _: () = assert!(TOPIC_PATH_BYTES_MAX <= OBJECT_PATH_BYTES_MAX);

/// A path from parts that are valid by construction (see the module doc).
fn path(text: String) -> ObjectPath {
    ObjectPath::new(text).expect("filer paths are made of validated names that fit (module doc)")
}

/// The prefix every topic is under.
pub fn topics() -> ObjectPath {
    path(TOPICS_PREFIX.to_owned())
}

/// `topics/<ns>/<name>`: everything of one topic.
pub fn topic_prefix(topic: &TopicName) -> ObjectPath {
    path(format!(
        "{TOPICS_PREFIX}/{}/{}",
        topic.namespace(),
        topic.name()
    ))
}

/// `topics/<ns>/<name>/topic.json`.
pub fn topic_file(topic: &TopicName) -> ObjectPath {
    path(format!("{}/{TOPIC_FILE_NAME}", topic_prefix(topic)))
}

/// `topics/<ns>/<name>/topic.json` for names listed from the filer, not
/// yet validated: an error if they do not make an object path.
pub fn listed_topic_file(namespace: &str, name: &str) -> Result<ObjectPath, FilerError> {
    topics().join(namespace)?.join(name)?.join(TOPIC_FILE_NAME)
}

/// If `object` is `topics/<ns>/<name>/topic.json`, the topic it is the
/// layout of: `None` for any other shape, an error if the directories are
/// not a valid topic name (such a layout object is corrupt, not
/// ignorable).
pub fn parse_topic_file(object: &ObjectPath) -> Option<Result<TopicName, ControlError>> {
    let components: Vec<&str> = object.components().collect();
    let [TOPICS_PREFIX, namespace, name, TOPIC_FILE_NAME] = components[..] else {
        return None;
    };
    Some(TopicName::parse(&format!("{namespace}/{name}")))
}

/// `topics/<ns>/<name>/<segment>`: a segment's chunks and seal marker.
pub fn segment_prefix(topic: &TopicName, segment: u32) -> ObjectPath {
    path(format!("{}/{segment}", topic_prefix(topic)))
}

/// A chunk's name: its base offset, 20 digits, and `.chunk`, so names sort
/// in offset order.
pub fn chunk_name(base_offset: u64) -> String {
    format!("{base_offset:0CHUNK_OFFSET_DIGITS$}{CHUNK_SUFFIX}")
}

/// `topics/<ns>/<name>/<segment>/<base:020>.chunk`.
pub fn chunk(topic: &TopicName, segment: u32, base_offset: u64) -> ObjectPath {
    path(format!(
        "{}/{}",
        segment_prefix(topic, segment),
        chunk_name(base_offset)
    ))
}

/// The base offset a chunk's path or name states; `None` if the last
/// component is not a chunk name.
pub fn parse_chunk_name(object: &str) -> Option<u64> {
    let name = object.rsplit('/').next()?;
    let digits = name.strip_suffix(CHUNK_SUFFIX)?;
    if digits.len() != CHUNK_OFFSET_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The prefix of a lost-range record's name; the rest is its first offset
/// and one past its last, 20 digits each, joined by `-`.
pub const LOST_PREFIX: &str = "lost-";

/// `topics/<ns>/<name>/<segment>/lost-<from:020>-<to:020>`: a record that
/// offsets `[from, to)` of the segment held records that recovery could
/// not read back (docs/broker.md, "What happens when"). Its content is
/// for people; the offsets are in the name.
pub fn lost_range(topic: &TopicName, segment: u32, from: u64, to: u64) -> ObjectPath {
    path(format!(
        "{}/{LOST_PREFIX}{from:0CHUNK_OFFSET_DIGITS$}-{to:0CHUNK_OFFSET_DIGITS$}",
        segment_prefix(topic, segment)
    ))
}

/// The offsets `[from, to)` a lost-range record's path or name states;
/// `None` if the last component is not such a name or `from >= to`.
pub fn parse_lost_name(object: &str) -> Option<(u64, u64)> {
    let name = object.rsplit('/').next()?;
    let (from, to) = name.strip_prefix(LOST_PREFIX)?.split_once('-')?;
    let number = |digits: &str| {
        (digits.len() == CHUNK_OFFSET_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| digits.parse::<u64>().ok())
            .flatten()
    };
    let (from, to) = (number(from)?, number(to)?);
    (from < to).then_some((from, to))
}

/// A lost-range record's content: JSON for the operator reading it.
pub fn lost_range_content(segment: u32, from: u64, to: u64, bytes: u64, reason: &str) -> Vec<u8> {
    let reason: String = reason
        .chars()
        .map(|c| {
            if c == '"' || c == '\\' || c.is_control() {
                ' '
            } else {
                c
            }
        })
        .collect();
    format!(
        r#"{{"segment":{segment},"from":{from},"to":{to},"unreadable_bytes":{bytes},"reason":"{reason}"}}"#
    )
    .into_bytes()
}

/// `topics/<ns>/<name>/<segment>/sealed`.
pub fn seal_marker(topic: &TopicName, segment: u32) -> ObjectPath {
    path(format!(
        "{}/{SEAL_MARKER_NAME}",
        segment_prefix(topic, segment)
    ))
}

/// The seal marker's content: which segment, the epoch it was sealed in,
/// its end (one past its last offset: the seal point), and who wrote the
/// marker (a broker's id, or `control`).
pub fn seal_marker_content(segment: u32, epoch: u32, end: u64, written_by: &str) -> Vec<u8> {
    format!(r#"{{"segment":{segment},"epoch":{epoch},"end":{end},"written_by":"{written_by}"}}"#)
        .into_bytes()
}

/// Write `segment`'s seal marker unless one is there (a create-only put:
/// markers are never overwritten). `Ok(false)` if another writer (the
/// broker, or the control plane for a broker gone) sealed it first: the
/// segment is sealed either way, and the first marker stands.
pub fn create_seal_marker(
    filer: &dyn filer::Filer,
    topic: &TopicName,
    segment: u32,
    epoch: u32,
    end: u64,
    written_by: &str,
) -> Result<bool, filer::FilerError> {
    let path = seal_marker(topic, segment);
    match filer.create(&path, &seal_marker_content(segment, epoch, end, written_by)) {
        Ok(()) => Ok(true),
        Err(e) if e.is_already_exists() => Ok(false),
        Err(e) => Err(e),
    }
}

/// `topics/<ns>/<name>/payloads`: every payload of a topic.
pub fn payloads_prefix(topic: &TopicName) -> ObjectPath {
    path(format!("{}/{PAYLOADS_DIR}", topic_prefix(topic)))
}

/// The directory name of a payload hour bucket: 10 digits.
pub fn bucket_dir_name(bucket: u64) -> String {
    format!("{bucket:0BUCKET_DIGITS$}")
}

/// `topics/<ns>/<name>/payloads/<hour:010>`: the payloads created in one
/// hour (docs/payloads.md).
pub fn payload_bucket(topic: &TopicName, bucket: u64) -> ObjectPath {
    path(format!(
        "{}/{}",
        payloads_prefix(topic),
        bucket_dir_name(bucket)
    ))
}

/// `topics/<ns>/<name>/payloads/<hour:010>/<created:016x>-<nonce:032x>`.
pub fn payload(topic: &TopicName, id: &PayloadId) -> ObjectPath {
    path(format!(
        "{}/{}",
        payload_bucket(topic, id.bucket()),
        id.object_name()
    ))
}

/// `topics/<ns>/<name>/kafka-producers/<segment>`.
pub fn kafka_producer_snapshot(topic: &TopicName, segment: u32) -> ObjectPath {
    path(format!(
        "{}/{KAFKA_PRODUCERS_DIR}/{segment}",
        topic_prefix(topic)
    ))
}

/// The prefix of every Kafka group's offsets.
pub fn kafka_groups() -> ObjectPath {
    path(KAFKA_GROUPS_PREFIX.to_owned())
}

/// `kafka/groups/<group>.offsets`. A group id is any string; every byte
/// outside `A-Z a-z 0-9 . _ -` is written `%XX`, so any id is one path
/// component. `None` if the escaped id does not fit an object path.
pub fn kafka_group_offsets(group_id: &str) -> Option<ObjectPath> {
    let mut name = String::with_capacity(group_id.len() + KAFKA_GROUP_SUFFIX.len());
    for b in group_id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            name.push(char::from(b));
        } else {
            name.push_str(&format!("%{b:02X}"));
        }
    }
    name.push_str(KAFKA_GROUP_SUFFIX);
    ObjectPath::new(format!("{KAFKA_GROUPS_PREFIX}/{name}")).ok()
}

/// `kafka/producer_ids`.
pub fn kafka_producer_ids() -> ObjectPath {
    path(KAFKA_PRODUCER_IDS_PATH.to_owned())
}

/// `producer-ids/<broker>/<shard>`: 8 bytes, the count of the first id
/// shard `shard` of broker `broker` has not reserved (docs/filer-layout.md).
pub fn producer_id_block(broker: u32, shard: u32) -> ObjectPath {
    path(format!("{PRODUCER_IDS_PREFIX}/{broker}/{shard}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn topic() -> TopicName {
        TopicName::parse("pay/orders").unwrap()
    }

    #[test]
    fn every_path_is_where_the_docs_say() {
        let t = topic();
        let id = PayloadId {
            created_ms: 3_600_000 * 5 + 7,
            nonce: 0xab,
        };
        let cases = [
            (topic_prefix(&t), "topics/pay/orders"),
            (topic_file(&t), "topics/pay/orders/topic.json"),
            (segment_prefix(&t, 3), "topics/pay/orders/3"),
            (
                chunk(&t, 3, 42),
                "topics/pay/orders/3/00000000000000000042.chunk",
            ),
            (seal_marker(&t, 3), "topics/pay/orders/3/sealed"),
            (
                lost_range(&t, 3, 7, 12),
                "topics/pay/orders/3/lost-00000000000000000007-00000000000000000012",
            ),
            (payloads_prefix(&t), "topics/pay/orders/payloads"),
            (
                payload(&t, &id),
                "topics/pay/orders/payloads/0000000005/000000000112a887-000000000000000000000000000000ab",
            ),
            (
                kafka_producer_snapshot(&t, 2),
                "topics/pay/orders/kafka-producers/2",
            ),
            (kafka_group_offsets("g 1/x").unwrap(), "kafka/groups/g%201%2Fx.offsets"),
            (kafka_producer_ids(), "kafka/producer_ids"),
        ];
        for (made, want) in cases {
            assert_eq!(made.as_str(), want);
        }
    }

    #[test]
    fn names_parse_back_and_others_do_not() {
        let t = topic();
        assert_eq!(parse_topic_file(&topic_file(&t)).unwrap().unwrap(), t);
        assert!(parse_topic_file(&seal_marker(&t, 0)).is_none());
        let odd = listed_topic_file("ns", "b@d").unwrap();
        assert!(parse_topic_file(&odd).unwrap().is_err());
        assert_eq!(
            parse_chunk_name(chunk(&t, 0, u64::MAX).as_str()),
            Some(u64::MAX)
        );
        assert_eq!(parse_chunk_name(&chunk_name(0)), Some(0));
        assert_eq!(
            parse_lost_name(lost_range(&t, 1, 5, u64::MAX).as_str()),
            Some((5, u64::MAX))
        );
        for bad in [
            "lost-00000000000000000005-00000000000000000005",
            "lost-00000000000000000009-00000000000000000005",
            "lost-5-9",
            "lost-00000000000000000005",
            "00000000000000000001.chunk",
        ] {
            assert_eq!(parse_lost_name(bad), None, "{bad}");
        }
        for bad in [
            "sealed",
            "1.chunk",
            "0000000000000000000x.chunk",
            "00000000000000000001.chunkx",
        ] {
            assert_eq!(parse_chunk_name(bad), None, "{bad}");
        }
    }

    /// A reference prints as its payload's path below the topic's prefix.
    #[test]
    fn a_reference_prints_its_payload_path() {
        let t = topic();
        let reference = wire::PayloadRef {
            id: PayloadId {
                created_ms: 1_764_520_000_123,
                nonce: 7,
            },
            length: 1,
            checksum: 2,
        };
        let path = payload(&t, &reference.id);
        let below = path
            .as_str()
            .strip_prefix(&format!("{}/", topic_prefix(&t)))
            .unwrap();
        assert!(
            reference.to_string().starts_with(&format!("ref:{below} ")),
            "{reference}"
        );
    }

    #[test]
    fn the_longest_topic_name_fits_every_path() {
        let longest = format!("{}/{}", "n".repeat(124), "t".repeat(124));
        let t = TopicName::parse(&longest).unwrap();
        let id = PayloadId {
            created_ms: u64::MAX,
            nonce: u128::MAX,
        };
        // None of these may panic.
        let _ = payload(&t, &id);
        let _ = chunk(&t, u32::MAX, u64::MAX);
        let _ = kafka_producer_snapshot(&t, u32::MAX);
    }
}
