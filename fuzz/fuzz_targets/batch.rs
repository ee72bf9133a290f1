//! BatchView::validate over arbitrary bytes, then every accessor, record and
//! header; a valid batch rebuilt from its records decodes to the same records.
#![no_main]

use kelp_wire::batch::{set_base_offset, BatchBuilder, BatchView, Record, RecordHeader};
use libfuzzer_sys::fuzz_target;

fn records<'a>(view: &BatchView<'a>) -> Vec<(Record<'a>, Vec<RecordHeader<'a>>)> {
    view.records()
        .map(|r| {
            let headers: Vec<_> = r.headers().collect();
            assert_eq!(headers.len(), r.header_count());
            (r, headers)
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(view) = BatchView::validate(data) else {
        return;
    };
    assert_eq!(BatchView::peek_len(data), Some(data.len() as u32));
    assert_eq!(view.bytes().len(), data.len());
    let count = view.record_count();
    assert!(view.next_offset() - view.base_offset() == u64::from(count));
    let _ = (
        view.first_timestamp_ms(),
        view.max_timestamp_ms(),
        view.producer_id(),
        view.base_sequence(),
    );

    let decoded = records(&view);
    assert_eq!(decoded.len() as u64, u64::from(count));
    for (i, (r, _)) in decoded.iter().enumerate() {
        assert_eq!(r.offset_delta as usize, i);
    }

    // Rebuild the batch from what was decoded: same length, same records.
    let mut builder = BatchBuilder::with_capacity(data.len());
    for (r, headers) in &decoded {
        match r.reference() {
            // A reference record goes back as one: its attribute is part
            // of the record.
            Some(reference) => builder.push_reference(r.timestamp_ms, r.key, &reference, headers),
            None => builder.push(r.timestamp_ms, r.key, r.value, headers),
        }
        .expect("a decoded record fits a batch again");
    }
    let mut rebuilt = builder
        .finish(view.producer_id(), view.base_sequence())
        .to_vec();
    set_base_offset(&mut rebuilt, view.base_offset());
    assert_eq!(rebuilt.len(), data.len());
    let again = BatchView::validate(&rebuilt).expect("a rebuilt batch validates");
    assert_eq!(again.base_offset(), view.base_offset());
    assert_eq!(again.first_timestamp_ms(), view.first_timestamp_ms());
    assert_eq!(records(&again), decoded);
});
