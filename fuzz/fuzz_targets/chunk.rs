//! ChunkView::open over arbitrary bytes, and ChunkHeader::decode plus
//! decode_index on its parts. A chunk that opens must seek correctly: by
//! offset to a batch at or before the one holding it, by timestamp to a
//! batch at or before the first one that reaches it.
#![no_main]

use kelp_wire::chunk::{
    decode_index, encode_index, index_bytes, seek_offset, seek_timestamp, BatchWalk, ChunkHeader,
    ChunkView, CHUNK_HEADER_BYTES,
};
use libfuzzer_sys::fuzz_target;

fn check_view(view: &ChunkView<'_>) {
    let header = view.header();
    let mut batches = Vec::new();
    for item in BatchWalk::new(view.data()) {
        batches.push(item.expect("an opened chunk's batches validate"));
    }
    assert_eq!(batches.len(), view.batches().count());
    let mut max_before = i64::MIN;
    for (position, batch) in &batches {
        for target in [batch.base_offset(), batch.next_offset() - 1] {
            let from = seek_offset(view.index(), target) as usize;
            assert!(from <= *position, "offset seek for {target} overshoots");
            let found = BatchWalk::from_position(view.data(), from)
                .map(|b| b.expect("seek lands on a batch boundary").1)
                .find(|b| b.next_offset() > target)
                .expect("the batch holding the offset is found");
            assert_eq!(found.base_offset(), batch.base_offset());
        }
        if batch.max_timestamp_ms() > max_before {
            // This is the first batch to reach its max timestamp.
            let from = seek_timestamp(view.index(), batch.max_timestamp_ms()) as usize;
            assert!(from <= *position, "timestamp seek overshoots");
            assert!(BatchWalk::from_position(view.data(), from)
                .next()
                .is_some_and(|b| b.is_ok()));
        }
        max_before = max_before.max(batch.max_timestamp_ms());
    }
    assert_eq!(
        batches
            .first()
            .map_or(header.next_offset, |(_, b)| b.base_offset()),
        header.base_offset
    );
}

fuzz_target!(|data: &[u8]| {
    if let Ok(view) = ChunkView::open(data) {
        check_view(&view);
    }

    let Ok(header) = ChunkHeader::decode(data) else {
        return;
    };
    let encoded = header.encode();
    assert_eq!(ChunkHeader::decode(&encoded), Ok(header));
    if data[10..12] == [0, 0] {
        // Flags are the only field decode does not keep.
        assert_eq!(&encoded[..], &data[..CHUNK_HEADER_BYTES]);
    }
    // The index wherever the header says it is, and the bytes right after
    // the header as if the data region were empty.
    let at = usize::try_from(header.index_position()).unwrap_or(usize::MAX);
    for index in [data.get(at..), data.get(CHUNK_HEADER_BYTES..)]
        .into_iter()
        .flatten()
    {
        let Ok(entries) = decode_index(&header, index) else {
            continue;
        };
        let mut out = vec![0u8; index_bytes(entries.len() as u64) as usize];
        encode_index(&entries, &mut out);
        assert_eq!(decode_index(&header, &out), Ok(entries));
    }
});
