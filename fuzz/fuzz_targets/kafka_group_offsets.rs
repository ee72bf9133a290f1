//! kelp_kafka::group::GroupOffsets::decode over arbitrary bytes, as the
//! gateway restores a group's committed offsets from a file in the filer.
//! The bytes are read twice: as given, and with the trailing checksum
//! recomputed so that mutations reach the fields behind it. A file that
//! decodes is canonical (it encodes back to the same bytes) and restores
//! into a coordinator, which then answers an OffsetFetch for all of the
//! group's partitions with exactly the decoded offsets.
#![no_main]

use kelp_kafka::group::{
    Coordinator, CoordinatorConfig, ErrorCode, GroupOffsets, OffsetFetchRequest,
};
use libfuzzer_sys::fuzz_target;

const CHECKSUM_BYTES: usize = 4;

fn check(bytes: &[u8]) {
    let Ok((group_id, offsets)) = GroupOffsets::decode(bytes) else {
        return;
    };
    assert_eq!(
        offsets.encode(&group_id),
        bytes,
        "the file is not canonical"
    );
    assert_eq!(offsets.iter().count(), offsets.len());

    let mut coordinator = Coordinator::new(CoordinatorConfig::default(), 0);
    assert_eq!(coordinator.restore_offsets(bytes), Ok(group_id.clone()));
    let fetched = coordinator.fetch_offsets(&OffsetFetchRequest {
        group_id: group_id.clone(),
        topics: None,
    });
    assert_eq!(fetched.error, ErrorCode::NONE);
    let fetched: Vec<_> = fetched
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic.as_str(), p)))
        .collect();
    assert_eq!(fetched.len(), offsets.len());
    for ((topic, p), (want_topic, want_partition, want)) in fetched.into_iter().zip(offsets.iter())
    {
        assert_eq!((topic, p.partition), (want_topic, want_partition));
        assert_eq!(p.error, ErrorCode::NONE);
        assert_eq!(p.offset, want.offset);
        assert_eq!(p.leader_epoch, want.leader_epoch);
        assert_eq!(p.metadata, want.metadata);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Some(body_len) = data.len().checked_sub(CHECKSUM_BYTES) {
        let mut fixed = data.to_vec();
        let crc = crc32c::crc32c(&fixed[..body_len]);
        fixed[body_len..].copy_from_slice(&crc.to_le_bytes());
        if fixed != data {
            check(&fixed);
        }
    }
});
