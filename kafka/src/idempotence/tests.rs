//! The sequence decisions, the append protocol, eviction and the rebuild
//! from the log.

use super::*;

pub(super) fn batch(producer_id: i64, epoch: i16, first: i32, last: i32) -> ProducerBatch {
    ProducerBatch {
        producer_id,
        epoch,
        first,
        last,
    }
}

/// Append `b` at `base` and end it stored, as the gateway does.
pub(super) fn appended(p: &mut PartitionProducers, b: ProducerBatch, base: i64) {
    let append = p.begin(b);
    let end = base as u64 + (b.last - b.first) as u64 + 1;
    p.end(append, stored(base, end));
}

/// The appends of `batches`, begun in order and all in flight.
fn begun<const N: usize>(p: &mut PartitionProducers, batches: [ProducerBatch; N]) -> [Append; N] {
    batches.map(|b| p.begin(b))
}

fn stored(base_offset: i64, end_offset: u64) -> AppendOutcome {
    AppendOutcome::Stored {
        base_offset,
        end_offset,
    }
}

fn fact(producer_id: i64, epoch: i16, base_sequence: i32, records: u32, at: i64) -> StoredBatch {
    StoredBatch {
        producer_id,
        epoch,
        base_sequence,
        record_count: records,
        base_offset: at,
    }
}

#[test]
fn next_batch_is_fresh_and_a_resend_gets_its_offset() {
    let mut p = PartitionProducers::new(0);
    assert_eq!(p.check(&batch(7, 0, 0, 9)), Sequence::Fresh);
    appended(&mut p, batch(7, 0, 0, 9), 100);
    appended(&mut p, batch(7, 0, 10, 19), 110);
    assert_eq!(p.check(&batch(7, 0, 20, 29)), Sequence::Fresh);
    assert_eq!(p.check(&batch(7, 0, 0, 9)), Sequence::Duplicate(100));
    assert_eq!(p.check(&batch(7, 0, 10, 19)), Sequence::Duplicate(110));
    // Inside a stored range: its place in it.
    assert_eq!(p.check(&batch(7, 0, 15, 19)), Sequence::Duplicate(115));
    assert_eq!(p.check(&batch(7, 0, 25, 29)), Sequence::OutOfOrder);
    assert_eq!(p.check(&batch(7, 1, 0, 9)), Sequence::Fresh);
    assert_eq!(p.check(&batch(7, 1, 3, 9)), Sequence::OutOfOrder);
    appended(&mut p, batch(7, 1, 0, 0), 120);
    assert_eq!(p.check(&batch(7, 0, 20, 29)), Sequence::Fenced);
    // Another producer is new.
    assert_eq!(p.check(&batch(8, 0, 5, 5)), Sequence::Fresh);
}

#[test]
fn only_the_last_five_batches_are_recognised() {
    let mut p = PartitionProducers::new(0);
    for i in 0..7 {
        appended(&mut p, batch(1, 0, i, i), i64::from(i));
    }
    assert_eq!(p.check(&batch(1, 0, 1, 1)), Sequence::OutOfOrder);
    assert_eq!(p.check(&batch(1, 0, 2, 2)), Sequence::Duplicate(2));
    assert_eq!(p.check(&batch(1, 0, 6, 6)), Sequence::Duplicate(6));
}

#[test]
fn each_of_the_last_five_is_a_duplicate_and_the_one_before_is_not() {
    let mut p = PartitionProducers::new(0);
    // Six batches of three records, at offsets 1000, 1010, ...
    let window: Vec<(ProducerBatch, i64)> = (0..6)
        .map(|i| (batch(4, 2, i * 3, i * 3 + 2), 1000 + i64::from(i) * 10))
        .collect();
    for (b, base) in &window {
        appended(&mut p, *b, *base);
    }
    let (oldest, _) = window[0];
    assert_eq!(
        p.check(&oldest),
        Sequence::OutOfOrder,
        "older than the window"
    );
    for (b, base) in &window[1..] {
        assert_eq!(p.check(b), Sequence::Duplicate(*base), "resend of {b:?}");
        // Its later records, resent alone, are at their place in it.
        let tail = batch(4, 2, b.first + 2, b.last);
        assert_eq!(p.check(&tail), Sequence::Duplicate(*base + 2));
    }
    assert_eq!(p.check(&batch(4, 2, 18, 20)), Sequence::Fresh);
}

#[test]
fn a_gap_is_out_of_order() {
    let mut p = PartitionProducers::new(0);
    appended(&mut p, batch(1, 0, 0, 4), 0);
    assert_eq!(p.check(&batch(1, 0, 5, 5)), Sequence::Fresh);
    assert_eq!(p.check(&batch(1, 0, 6, 6)), Sequence::OutOfOrder);
    assert_eq!(
        p.check(&batch(1, 0, 1_000_000, 1_000_000)),
        Sequence::OutOfOrder
    );
    assert_eq!(
        p.check(&batch(1, 0, SEQUENCE_MAX, SEQUENCE_MAX)),
        Sequence::OutOfOrder
    );
}

#[test]
fn a_new_epoch_starts_at_zero() {
    let mut p = PartitionProducers::new(0);
    appended(&mut p, batch(1, 3, 0, 9), 0);
    appended(&mut p, batch(1, 3, 10, 19), 10);
    assert_eq!(p.check(&batch(1, 4, 0, 0)), Sequence::Fresh);
    assert_eq!(
        p.check(&batch(1, 4, 20, 20)),
        Sequence::OutOfOrder,
        "the old epoch's next"
    );
    assert_eq!(p.check(&batch(1, 9, 1, 1)), Sequence::OutOfOrder);
    appended(&mut p, batch(1, 4, 0, 0), 20);
    // The new epoch's batches only: the old epoch is fenced, even its
    // recent batches.
    assert_eq!(p.check(&batch(1, 4, 0, 0)), Sequence::Duplicate(20));
    assert_eq!(p.check(&batch(1, 4, 1, 1)), Sequence::Fresh);
    assert_eq!(p.check(&batch(1, 3, 0, 9)), Sequence::Fenced);
    assert_eq!(p.check(&batch(1, 3, 10, 19)), Sequence::Fenced);
    assert_eq!(p.check(&batch(1, 3, 20, 20)), Sequence::Fenced);
}

#[test]
fn an_older_epoch_is_fenced() {
    let mut p = PartitionProducers::new(0);
    appended(&mut p, batch(1, 5, 0, 0), 0);
    for epoch in [4, 0, -1, i16::MIN] {
        for first in [0, 1, 2] {
            assert_eq!(p.check(&batch(1, epoch, first, first)), Sequence::Fenced);
        }
    }
    // Another producer's epochs are its own.
    assert_eq!(p.check(&batch(2, 0, 0, 0)), Sequence::Fresh);
}

#[test]
fn an_unknown_producer_is_fresh_at_any_sequence() {
    // Evicted, or its batches are older than anything the partition holds:
    // its next batch is taken as its first.
    let p = PartitionProducers::new(0);
    for first in [0, 1, 77, SEQUENCE_MAX] {
        assert_eq!(p.check(&batch(5, 1, first, first)), Sequence::Fresh);
    }
}

#[test]
fn sequences_wrap_after_i32_max() {
    let mut p = PartitionProducers::new(0);
    appended(&mut p, batch(1, 0, i32::MAX - 1, i32::MAX), 0);
    assert_eq!(p.check(&batch(1, 0, 0, 4)), Sequence::Fresh);
    assert!(sequence_before(i32::MAX, 0));
    assert!(!sequence_before(0, i32::MAX));
}

#[test]
fn the_wrapping_order() {
    assert_eq!(sequence_add(0, 0), 0);
    assert_eq!(sequence_add(5, 3), 8);
    assert_eq!(sequence_add(SEQUENCE_MAX, 1), 0);
    assert_eq!(sequence_add(SEQUENCE_MAX - 1, 3), 1);
    assert_eq!(sequence_add(SEQUENCE_MAX, u32::MAX), SEQUENCE_MAX - 1);
    assert!(sequence_before(1, 2));
    assert!(!sequence_before(2, 1));
    assert!(!sequence_before(3, 3));
    assert!(sequence_before(SEQUENCE_MAX - 5, 5));
    assert!(!sequence_before(5, SEQUENCE_MAX - 5));
    // A batch's last sequence wraps with it.
    assert_eq!(
        ProducerBatch::new(1, 0, SEQUENCE_MAX, 0),
        batch(1, 0, SEQUENCE_MAX, SEQUENCE_MAX)
    );
    assert_eq!(
        ProducerBatch::new(1, 0, SEQUENCE_MAX - 1, 2),
        batch(1, 0, SEQUENCE_MAX - 1, 0)
    );
    assert_eq!(
        fact(1, 0, SEQUENCE_MAX, 2, 0).producer_batch(),
        Some(batch(1, 0, SEQUENCE_MAX, 0))
    );
    assert_eq!(fact(1, 0, -1, 2, 0).producer_batch(), None);
    assert_eq!(fact(1, 0, 0, 0, 0).producer_batch(), None);
}

#[test]
fn a_batch_ending_at_the_wrap_is_recognised_after_it() {
    let mut p = PartitionProducers::new(0);
    appended(&mut p, batch(1, 0, SEQUENCE_MAX - 9, SEQUENCE_MAX), 50);
    appended(&mut p, batch(1, 0, 0, 9), 60);
    assert_eq!(
        p.check(&batch(1, 0, SEQUENCE_MAX - 9, SEQUENCE_MAX)),
        Sequence::Duplicate(50)
    );
    assert_eq!(p.check(&batch(1, 0, 0, 9)), Sequence::Duplicate(60));
    assert_eq!(p.check(&batch(1, 0, 10, 10)), Sequence::Fresh);
    assert_eq!(p.check(&batch(1, 0, 11, 11)), Sequence::OutOfOrder);
}

#[test]
fn a_batch_across_the_wrap_read_from_the_log() {
    // Records MAX-1, MAX, 0: the next is 1.
    let mut rebuild = Rebuild::from_log_start();
    rebuild.replay(&fact(1, 0, SEQUENCE_MAX - 1, 3, 40));
    let p = rebuild.finish(43);
    assert_eq!(p.check(&batch(1, 0, 1, 1)), Sequence::Fresh);
    assert_eq!(
        p.check(&batch(1, 0, SEQUENCE_MAX - 1, 0)),
        Sequence::Duplicate(40)
    );
}

#[test]
fn a_batch_across_the_wrap_appended_live() {
    // Records MAX-1, MAX, 0 as a Kafka header names them: base sequence
    // and last offset delta.
    let across = ProducerBatch::new(1, 0, SEQUENCE_MAX - 1, 2);
    assert_eq!(across, batch(1, 0, SEQUENCE_MAX - 1, 0));
    let mut p = PartitionProducers::new(40);
    let append = p.begin(across);
    p.end(append, stored(40, 43));
    assert_eq!(p.check(&batch(1, 0, 1, 1)), Sequence::Fresh);
    assert_eq!(p.check(&across), Sequence::Duplicate(40));
    assert_eq!(p.check(&batch(1, 0, 2, 2)), Sequence::OutOfOrder);
    // The same as a rebuild from the log finds.
    let mut rebuild = Rebuild::from_log_start();
    rebuild.replay(&fact(1, 0, SEQUENCE_MAX - 1, 3, 40));
    assert_eq!(rebuild.finish(43).producers, p.producers);
    // A last sequence given as the bit pattern of a wrapping i32 addition
    // still leads to the right next sequence.
    let mut p = PartitionProducers::new(0);
    let append = p.begin(batch(2, 0, SEQUENCE_MAX, i32::MIN));
    p.end(append, stored(0, 2));
    assert_eq!(p.check(&batch(2, 0, 1, 1)), Sequence::Fresh);
}

#[test]
fn past_the_limit_the_lowest_id_is_dropped() {
    let mut p = PartitionProducers::new(0);
    let max = PRODUCERS_PER_PARTITION_MAX as i64;
    // Ids 10, 11, ... not in order of arrival: the lowest id goes first,
    // whenever it arrived.
    for id in (10..10 + max).rev() {
        appended(&mut p, batch(id, 0, 0, 0), 0);
    }
    assert_eq!(p.producer_count(), PRODUCERS_PER_PARTITION_MAX);
    // A known producer's batch drops nobody.
    appended(&mut p, batch(10, 0, 1, 1), 1);
    assert_eq!(p.producer_count(), PRODUCERS_PER_PARTITION_MAX);
    assert!(p.producers.contains_key(&10));
    // A new one drops the lowest id.
    appended(&mut p, batch(5, 0, 0, 0), 2);
    assert_eq!(p.producer_count(), PRODUCERS_PER_PARTITION_MAX);
    assert!(!p.producers.contains_key(&10));
    assert!(p.producers.contains_key(&5));
    appended(&mut p, batch(10 + max, 0, 0, 0), 3);
    assert!(
        !p.producers.contains_key(&5),
        "the newcomer had the lowest id"
    );
    assert!(p.producers.contains_key(&11));
    // A dropped producer starts again: any sequence is its first, and its
    // old batches are no longer recognised.
    assert_eq!(p.check(&batch(10, 0, 1, 1)), Sequence::Fresh);
    assert_eq!(p.check(&batch(10, 0, 9, 9)), Sequence::Fresh);
    assert_eq!(p.check(&batch(11, 0, 0, 0)), Sequence::Duplicate(0));
}

#[test]
fn covered_waits_for_every_append_in_flight() {
    let mut p = PartitionProducers::new(10);
    let [one, two] = begun(&mut p, [batch(1, 0, 0, 0), batch(2, 0, 0, 8)]);
    p.end(one, stored(10, 11));
    assert_eq!(p.covered, 10, "one append still in flight");
    p.end(two, stored(11, 20));
    assert_eq!(p.covered, 20);
    // A failed append freezes it: whether it was stored is unknown.
    let failed = p.begin(batch(1, 0, 1, 1));
    p.end(failed, AppendOutcome::Unknown);
    let retried = p.begin(batch(1, 0, 1, 1));
    p.end(retried, stored(25, 26));
    assert_eq!(p.covered, 20);
}

#[test]
fn interleaved_appends_end_in_any_order() {
    let mut p = PartitionProducers::new(100);
    let [a, b, c] = begun(
        &mut p,
        [batch(1, 0, 0, 4), batch(2, 0, 0, 2), batch(3, 0, 0, 0)],
    );
    assert_eq!(a.batch(), &batch(1, 0, 0, 4));
    // Until it ends, a batch in flight is not in the state: its producer's
    // next batch is not the next yet, and a resend is not a duplicate.
    assert_eq!(
        p.check(&batch(1, 0, 5, 5)),
        Sequence::Fresh,
        "unknown producer"
    );
    p.end(c, stored(108, 109));
    assert_eq!(p.check(&batch(3, 0, 0, 0)), Sequence::Duplicate(108));
    assert_eq!(p.covered, 100);
    p.end(a, stored(100, 105));
    assert_eq!(p.check(&batch(1, 0, 0, 4)), Sequence::Duplicate(100));
    assert_eq!(p.check(&batch(1, 0, 5, 5)), Sequence::Fresh);
    assert_eq!(p.covered, 100);
    p.end(b, stored(105, 108));
    assert_eq!(p.covered, 109, "the largest end of them all");
    assert_eq!(p.check(&batch(2, 0, 3, 3)), Sequence::Fresh);
}

#[test]
fn an_unanswered_append_among_others_freezes_covered() {
    // acks 0 ends Unknown too: its append may or may not be stored.
    let mut p = PartitionProducers::new(0);
    let [lost, kept] = begun(&mut p, [batch(1, 0, 0, 0), batch(2, 0, 0, 0)]);
    p.end(kept, stored(0, 1));
    p.end(lost, AppendOutcome::Unknown);
    assert_eq!(p.covered, 0);
    assert_eq!(
        p.check(&batch(1, 0, 0, 0)),
        Sequence::Fresh,
        "nothing taken from it"
    );
    appended(&mut p, batch(2, 0, 1, 1), 1);
    assert_eq!(p.covered, 0, "frozen until the next start");
    // Its changes are still snapshotted, with the frozen covered offset.
    let due = p.snapshot_due().expect("changed");
    let back = Rebuild::from_snapshot(&due.bytes).expect("decodes");
    assert_eq!(back.scan_from(), 0);
    assert_eq!(back.producer_count(), 1);
}

#[test]
fn reading_the_log_again_changes_nothing() {
    let mut p = PartitionProducers::new(0);
    appended(&mut p, batch(1, 0, 0, 9), 0);
    appended(&mut p, batch(1, 0, 10, 19), 10);
    let before = p.producers.clone();
    // A scan from an older covered offset meets the same batches.
    p.apply(&batch(1, 0, 0, 9), 0);
    p.apply(&batch(1, 0, 10, 19), 10);
    assert_eq!(p.producers, before);
    // And an older epoch's batch changes nothing either.
    appended(&mut p, batch(1, 1, 0, 0), 20);
    let before = p.producers.clone();
    p.apply(&batch(1, 0, 20, 29), 21);
    assert_eq!(p.producers, before);
}

#[test]
fn a_rebuild_from_snapshot_and_log_matches_the_live_state() {
    let mut live = PartitionProducers::new(0);
    let log = [
        fact(1, 0, 0, 10, 0),
        fact(2, 0, 0, 1, 10),
        fact(1, 0, 10, 10, 11),
        fact(2, 1, 0, 5, 21),
        fact(1, 0, 20, 10, 26),
    ];
    let mut snapshot = None;
    for (i, f) in log.iter().enumerate() {
        let b = f.producer_batch().expect("idempotent");
        appended(&mut live, b, f.base_offset);
        if i == 2 {
            snapshot = live.snapshot_due();
        }
    }
    let snapshot = snapshot.expect("changed");
    let mut rebuild = Rebuild::from_snapshot(&snapshot.bytes).expect("decodes");
    assert_eq!(rebuild.scan_from(), 21);
    // The log is read from the covered offset; batches the snapshot holds
    // (an older covered offset) are met again and change nothing.
    for f in &log[1..] {
        rebuild.replay(f);
    }
    let rebuilt = rebuild.finish(36);
    assert_eq!(rebuilt.producers, live.producers);
    assert_eq!(rebuilt.covered(), 36);
    assert_eq!(live.covered(), 36);
    // The covered offset moved: a snapshot is due.
    assert!(rebuilt.snapshot_due().is_some());

    // The whole log from nothing gives the same.
    let mut whole = Rebuild::from_log_start();
    assert_eq!(whole.scan_from(), 0);
    for f in &log {
        whole.replay(f);
    }
    assert_eq!(whole.producer_count(), 2);
    assert_eq!(whole.finish(36).producers, live.producers);
}

#[test]
fn a_rebuild_that_reads_nothing_new_needs_no_snapshot() {
    let mut p = PartitionProducers::new(0);
    appended(&mut p, batch(1, 0, 0, 0), 0);
    let due = p.snapshot_due().expect("changed");
    let rebuild = Rebuild::from_snapshot(&due.bytes).expect("decodes");
    let state = rebuild.finish(1);
    assert_eq!(state.covered(), 1);
    assert_eq!(state.snapshot_due(), None);
    // A log that ends before the covered offset (unflushed writes lost in a
    // crash) does not move it back.
    let rebuild = Rebuild::from_snapshot(&due.bytes).expect("decodes");
    assert_eq!(rebuild.finish(0).covered(), 1);
}

#[test]
fn a_stored_batch_of_no_idempotent_producer_is_skipped() {
    let mut rebuild = Rebuild::from_log_start();
    rebuild.replay(&fact(1, 0, -1, 3, 0));
    rebuild.replay(&fact(1, 0, 0, 0, 3));
    assert_eq!(rebuild.producer_count(), 0);
}

#[test]
fn snapshots_are_due_after_changes_until_stored() {
    let mut p = PartitionProducers::new(7);
    assert_eq!(
        p.snapshot_due(),
        None,
        "a new partition's snapshot is stored by its caller"
    );
    appended(&mut p, batch(1, 0, 0, 0), 7);
    let first = p.snapshot_due().expect("changed");
    // More changes while the first is being stored.
    appended(&mut p, batch(1, 0, 1, 1), 8);
    let second = p.snapshot_due().expect("changed");
    assert_ne!(first.bytes, second.bytes);
    p.snapshot_stored(first.mark);
    assert_eq!(
        p.snapshot_due(),
        Some(second.clone()),
        "the later changes are not stored"
    );
    p.snapshot_stored(second.mark);
    assert_eq!(p.snapshot_due(), None);
    // An older mark stored late changes nothing.
    p.snapshot_stored(first.mark);
    assert_eq!(p.snapshot_due(), None);
    // A duplicate or fenced check changes nothing.
    assert_eq!(p.check(&batch(1, 0, 1, 1)), Sequence::Duplicate(8));
    assert_eq!(p.snapshot_due(), None);
}
