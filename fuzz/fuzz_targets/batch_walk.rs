//! BatchWalk over arbitrary data, from the start and from a position taken
//! from the first two bytes: positions are contiguous, each yielded batch
//! validates on its own, and the walk ends at the first error.
#![no_main]

use kelp_wire::batch::BatchView;
use kelp_wire::chunk::BatchWalk;
use libfuzzer_sys::fuzz_target;

fn walk(data: &[u8], start: usize) {
    let mut expected = start;
    let mut errors = 0;
    for item in BatchWalk::from_position(data, start) {
        assert_eq!(errors, 0, "the walk goes on after an error");
        match item {
            Ok((position, batch)) => {
                assert_eq!(position, expected);
                assert_eq!(
                    batch.bytes(),
                    &data[position..position + batch.bytes().len()]
                );
                assert!(BatchView::validate(batch.bytes()).is_ok());
                for record in batch.records() {
                    for _ in record.headers() {}
                }
                expected += batch.bytes().len();
            }
            Err(_) => errors += 1,
        }
    }
    if errors == 0 && start <= data.len() {
        assert_eq!(expected, data.len(), "a clean walk ends at the end");
    }
}

fuzz_target!(|data: &[u8]| {
    walk(data, 0);
    if let Some((&[a, b], rest)) = data.split_first_chunk::<2>() {
        let start = usize::from(u16::from_le_bytes([a, b]));
        walk(rest, start);
    }
});
