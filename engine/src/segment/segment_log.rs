//! The pure state of one segment's log, sans-IO: its offsets, whether it
//! takes writes (its [`SealState`]), the queue of sealed buffers on their
//! way to the filer, the chunks already there, the offsets recovery could
//! not read back, the flusher's claim, the oldest waiting `durable`
//! producer, and whether the segment failed.
//!
//! Inputs go in through `handle_*` (an append, a sealed buffer, a stored
//! chunk, a refreshed listing of a segment sealed elsewhere), the flusher's
//! work comes out of [`SegmentLog::poll_flush`], and time is passed in.
//! Nothing here touches a file, a mapping, the filer or the clock: the
//! buffers the queue holds are any [`QueuedBuffer`], so the tests below
//! drive the log with headers alone.
//!
//! Every handler asserts the log's invariants on the state it leaves, at
//! constant cost (the new element against its neighbour, never a walk of
//! every chunk): offsets only grow, nothing is flushed past what was
//! appended, the queue holds contiguous buffers in offset order and its byte
//! count is their sum, and a chunk follows the one before it. A failed
//! assertion is a bug in the broker, not bad input: every byte from a peer
//! or a disk is validated before it reaches the log.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use filer::ObjectPath;
use wire::chunk::ChunkHeader;

use crate::recovery::LostRange;

/// Whether a segment takes writes, and whether its end is known. It only
/// moves forward: open, sealing, sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum SealState {
    /// Takes writes.
    Open,
    /// Takes no writes; records may still be on their way to the filer
    /// (the owner is flushing, or another broker's view waits for the
    /// owner's seal marker).
    Sealing,
    /// Takes no writes and every record is in the filer: a reader at the
    /// end is done with the segment.
    Sealed,
}

/// A chunk in the filer.
#[derive(Debug, Clone)]
pub(crate) struct ChunkMeta {
    pub(crate) path: ObjectPath,
    pub(crate) header: ChunkHeader,
    /// Why its header could not be read, if it could not: `header` is then
    /// made up (base offset from the name, the end from what follows),
    /// and every read of the chunk verifies its batches.
    pub(crate) damaged: Option<String>,
}

/// A sealed buffer as the log sees it: the chunk header it will be stored
/// under.
pub(crate) trait QueuedBuffer {
    fn header(&self) -> &ChunkHeader;
}

/// One segment's log; see the module doc.
#[derive(Debug)]
pub(crate) struct SegmentLog<S> {
    seal: SealState,
    /// The offset the next appended record takes.
    next_offset: u64,
    /// Every offset below this is in a chunk in the filer (or lost).
    flushed_offset: u64,
    /// Oldest first; the front is the one being flushed.
    sealed: VecDeque<S>,
    /// The file bytes of `sealed`, held against `unflushed_bytes_max`.
    sealed_bytes: u64,
    /// By base offset.
    chunks: Vec<ChunkMeta>,
    /// Offsets recovery could not read back, by first offset: never given
    /// out again, skipped by readers, counted as flushed.
    lost: Vec<LostRange>,
    /// A flusher works through `sealed`.
    flushing: bool,
    /// When the oldest unanswered `durable` producer started waiting.
    durable_waiting_since: Option<Instant>,
    /// When the last buffer was sealed (for any reason): an early seal
    /// for a waiting `durable` producer comes one linger after it at the
    /// soonest, so early seals add at most one chunk per linger.
    sealed_at: Option<Instant>,
    /// The file bytes of the last buffer sealed (0 before any): whether
    /// the segment fills its buffers or seals them early, nearly empty.
    last_sealed_bytes: u64,
    /// Set when bytes of the segment could not be stored and cannot be
    /// trusted: it takes no more writes, flushes nothing more and
    /// acknowledges nothing more as durable.
    failed: Option<String>,
}

impl<S: QueuedBuffer + Clone> SegmentLog<S> {
    /// The log of a segment whose filer holds `chunks` up to
    /// `flushed_offset`, with `sealed` buffers to store after them up to
    /// `next_offset`.
    pub(crate) fn new(
        seal: SealState,
        chunks: Vec<ChunkMeta>,
        flushed_offset: u64,
        sealed: VecDeque<S>,
        next_offset: u64,
    ) -> SegmentLog<S> {
        assert!(flushed_offset <= next_offset);
        let log = SegmentLog {
            seal,
            next_offset,
            flushed_offset,
            sealed_bytes: sealed.iter().map(|s| s.header().file_bytes()).sum(),
            sealed,
            chunks,
            lost: Vec::new(),
            flushing: false,
            durable_waiting_since: None,
            sealed_at: None,
            last_sealed_bytes: 0,
            failed: None,
        };
        for (a, b) in log.sealed.iter().zip(log.sealed.iter().skip(1)) {
            assert!(a.header().next_offset <= b.header().base_offset);
        }
        log
    }

    /// Take the segment's lost ranges (sorted by first offset) and flush
    /// past them.
    pub(crate) fn set_lost(&mut self, lost: Vec<LostRange>) {
        assert!(lost.windows(2).all(|p| p[0].from <= p[1].from));
        self.lost = lost;
        self.flushed_offset = self.past_lost(self.flushed_offset);
    }

    pub(crate) fn seal_state(&self) -> SealState {
        self.seal
    }

    /// Writes are refused from now on (the first step of a seal); returns
    /// whether the segment was open until now.
    pub(crate) fn handle_refuse_writes(&mut self) -> bool {
        let was_open = self.seal == SealState::Open;
        self.seal = self.seal.max(SealState::Sealing);
        was_open
    }

    /// Every record is in the filer and the seal marker is stored (by this
    /// broker, or found: by the owner or the control plane).
    pub(crate) fn handle_sealed_for_good(&mut self) {
        assert!(
            self.seal != SealState::Open,
            "writes are refused before a seal"
        );
        assert!(self.sealed.is_empty() && self.flushed_offset == self.next_offset);
        self.seal = SealState::Sealed;
    }

    pub(crate) fn next_offset(&self) -> u64 {
        self.next_offset
    }

    pub(crate) fn flushed_offset(&self) -> u64 {
        self.flushed_offset
    }

    pub(crate) fn chunks(&self) -> &[ChunkMeta] {
        &self.chunks
    }

    /// The sealed buffers not yet stored, oldest first.
    pub(crate) fn sealed(&self) -> impl Iterator<Item = &S> {
        self.sealed.iter()
    }

    /// The end of the last sealed buffer, if one waits.
    pub(crate) fn sealed_end(&self) -> Option<u64> {
        self.sealed.back().map(|b| b.header().next_offset)
    }

    pub(crate) fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// The first offset the filer or a sealed buffer holds, if any does.
    pub(crate) fn first_stored_offset(&self) -> Option<u64> {
        self.chunks
            .first()
            .map(|c| c.header.base_offset)
            .or_else(|| self.sealed.front().map(|b| b.header().base_offset))
    }

    /// The first chunk that ends after `start`: the one holding it, if
    /// any does.
    pub(crate) fn chunk_holding(&self, start: u64) -> Option<&ChunkMeta> {
        let i = self
            .chunks
            .partition_point(|c| c.header.next_offset <= start);
        self.chunks.get(i)
    }

    /// `offset`, or the end of the lost ranges it falls in (ranges may
    /// touch).
    pub(crate) fn past_lost(&self, offset: u64) -> u64 {
        skip_lost(&self.lost, offset)
    }

    /// Whether another buffer of `bytes` may be sealed: always while none
    /// waits (so a buffer larger than the limit still moves), else while
    /// the waiting ones stay within `max`.
    /// Bytes of the sealed buffers not yet flushed.
    pub(crate) fn sealed_bytes(&self) -> u64 {
        self.sealed_bytes
    }

    pub(crate) fn may_seal(&self, bytes: u64, max: u64) -> bool {
        self.sealed.is_empty() || self.sealed_bytes + bytes <= max
    }

    /// Records `[base, next)` were appended to the active buffer.
    pub(crate) fn handle_append(&mut self, base: u64, next: u64) {
        assert_eq!(base, self.next_offset, "an append starts at the log's end");
        assert!(next >= base);
        assert!(self.failed.is_none(), "a failed segment takes no writes");
        assert_eq!(
            self.seal,
            SealState::Open,
            "a sealing segment takes no writes"
        );
        self.next_offset = next;
    }

    /// The active buffer was sealed at `now`: it waits in the queue for
    /// the flusher.
    pub(crate) fn handle_sealed(&mut self, buffer: S, now: Instant) {
        self.sealed_at = Some(now);
        let header = *buffer.header();
        assert!(header.next_offset <= self.next_offset);
        assert!(header.base_offset >= self.flushed_offset);
        if let Some(last) = self.sealed.back() {
            assert!(last.header().next_offset <= header.base_offset);
        }
        self.sealed_bytes += header.file_bytes();
        self.last_sealed_bytes = header.file_bytes();
        self.sealed.push_back(buffer);
    }

    /// The file bytes of the last buffer sealed, 0 before any.
    pub(crate) fn last_sealed_bytes(&self) -> u64 {
        self.last_sealed_bytes
    }

    /// Claim the flusher: true when it should start (buffers wait, none
    /// runs, the segment has not failed); it runs until
    /// [`SegmentLog::handle_flusher_stopped`].
    pub(crate) fn claim_flusher(&mut self) -> bool {
        if self.flushing || self.sealed.is_empty() || self.failed.is_some() {
            return false;
        }
        self.flushing = true;
        true
    }

    /// The buffer the flusher stores next: the oldest, while the flusher
    /// runs and the segment has not failed.
    pub(crate) fn poll_flush(&self) -> Option<S> {
        if !self.flushing || self.failed.is_some() {
            return None;
        }
        self.sealed.front().cloned()
    }

    /// The oldest sealed buffer is stored as chunk `path`. `active_empty`
    /// says whether the active buffer holds nothing: then no `durable`
    /// producer waits on anything this flush did not store.
    pub(crate) fn handle_flushed(&mut self, path: ObjectPath, active_empty: bool) {
        assert!(self.flushing, "only the flusher stores chunks");
        let Some(buffer) = self.sealed.pop_front() else {
            panic!("a chunk was stored with no sealed buffer waiting");
        };
        let header = *buffer.header();
        self.sealed_bytes -= header.file_bytes();
        if let Some(last) = self.chunks.last() {
            assert!(last.header.next_offset <= header.base_offset);
        }
        let flushed = self.past_lost(header.next_offset);
        assert!(flushed >= self.flushed_offset && flushed <= self.next_offset);
        self.flushed_offset = flushed;
        self.chunks.push(ChunkMeta {
            path,
            header,
            damaged: None,
        });
        if self.flushed_offset >= self.next_offset || active_empty {
            self.durable_waiting_since = None;
        }
        assert!(self.sealed.is_empty() == (self.sealed_bytes == 0));
    }

    /// The flusher stopped (nothing left, the segment closed or failed).
    pub(crate) fn handle_flusher_stopped(&mut self) {
        self.flushing = false;
    }

    /// Give up on the segment; the first reason is kept. Returns whether
    /// this was the first.
    pub(crate) fn fail(&mut self, reason: String) -> bool {
        if self.failed.is_some() {
            return false;
        }
        self.failed = Some(reason);
        true
    }

    /// A `durable` producer waits for offsets not yet stored.
    pub(crate) fn note_durable_wait(&mut self, now: Instant) {
        self.durable_waiting_since.get_or_insert(now);
    }

    /// Whether to seal the active buffer early for a waiting `durable`
    /// producer now: one waits, and the last seal is `linger` or more ago.
    /// A lone durable write is so stored at once, and a steady stream of
    /// them is sealed once per `linger` (or sooner, by size), each chunk
    /// holding everything that waited meanwhile.
    pub(crate) fn durable_seal_due(&self, now: Instant, linger: Duration) -> bool {
        self.durable_waiting_since.is_some()
            && self
                .sealed_at
                .is_none_or(|t| now.saturating_duration_since(t) >= linger)
    }

    /// The topic was deleted: the queued buffers are gone.
    pub(crate) fn handle_deleted(&mut self) {
        self.sealed.clear();
        self.sealed_bytes = 0;
    }

    /// A new listing of a segment sealed elsewhere: chunks up to `end`.
    /// Taken only if it reaches further than what the log holds (a listing
    /// may come back older than one already taken).
    pub(crate) fn handle_listed(&mut self, chunks: Vec<ChunkMeta>, lost: Vec<LostRange>, end: u64) {
        assert!(self.sealed.is_empty(), "a view has no buffers");
        if end <= self.next_offset {
            return;
        }
        self.next_offset = end;
        self.flushed_offset = end;
        self.chunks = chunks;
        self.lost = lost;
    }

    /// The lost ranges' offsets.
    pub(crate) fn lost_records(&self) -> u64 {
        self.lost.iter().map(|l| l.to - l.from).sum()
    }
}

/// `offset`, or the end of the lost ranges it falls in (`lost` sorted by
/// first offset; ranges may touch).
pub(crate) fn skip_lost(lost: &[LostRange], mut offset: u64) -> u64 {
    for range in lost {
        if range.from <= offset && offset < range.to {
            offset = range.to;
        }
    }
    offset
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A sealed buffer reduced to its header: what the log sees.
    #[derive(Debug, Clone)]
    struct Buffer(ChunkHeader);

    impl QueuedBuffer for Buffer {
        fn header(&self) -> &ChunkHeader {
            &self.0
        }
    }

    fn buffer(base: u64, next: u64, data_bytes: u64) -> Buffer {
        Buffer(ChunkHeader {
            segment_id: 7,
            base_offset: base,
            next_offset: next,
            data_bytes,
            min_timestamp_ms: 0,
            max_timestamp_ms: 0,
            index_entries: 0,
            has_references: false,
        })
    }

    fn path(base: u64) -> ObjectPath {
        ObjectPath::new(format!("topics/t/x/7/{base:020}.chunk")).unwrap()
    }

    fn empty() -> SegmentLog<Buffer> {
        SegmentLog::new(SealState::Open, Vec::new(), 0, VecDeque::new(), 0)
    }

    /// An open log whose records `0..next` are appended and sealed in one
    /// buffer of 10 data bytes, not yet flushed.
    fn one_sealed_buffer(next: u64) -> SegmentLog<Buffer> {
        let mut log = empty();
        log.handle_append(0, next);
        log.handle_sealed(buffer(0, next, 10), Instant::now());
        log
    }

    /// Append, seal, flush: offsets move in order, the queue's bytes are
    /// held until the chunk is stored, and the chunk is found by offset.
    #[test]
    fn appended_records_are_flushed_in_order_and_found_in_their_chunk() {
        let mut log = empty();
        log.handle_append(0, 3);
        log.handle_append(3, 5);
        assert_eq!((log.next_offset(), log.flushed_offset()), (5, 0));
        let first = buffer(0, 5, 100);
        let bytes = first.header().file_bytes();
        log.handle_sealed(first, Instant::now());
        assert!(!log.may_seal(u64::MAX - bytes, u64::MAX - 1));
        assert!(log.may_seal(10, bytes + 10));
        assert!(log.claim_flusher());
        assert!(!log.claim_flusher(), "one flusher at a time");
        assert_eq!(log.poll_flush().unwrap().header().base_offset, 0);
        log.handle_flushed(path(0), true);
        assert_eq!(log.flushed_offset(), 5);
        assert!(log.poll_flush().is_none());
        assert!(log.may_seal(u64::MAX, 0), "an empty queue always takes one");
        assert_eq!(log.chunk_holding(4).unwrap().header.base_offset, 0);
        assert!(log.chunk_holding(5).is_none());
        log.handle_flusher_stopped();
        assert!(!log.claim_flusher(), "nothing waits");
    }

    /// With several buffers queued, the flusher takes the oldest each
    /// time, and a durable producer's wait ends only when nothing newer
    /// than the stored chunks is left in memory.
    #[test]
    fn the_flusher_takes_the_oldest_buffer_and_durable_waits_end_when_caught_up() {
        let mut log = one_sealed_buffer(2);
        let start = Instant::now();
        log.handle_append(2, 4);
        log.handle_sealed(buffer(2, 4, 10), start);
        log.handle_append(4, 6);
        let linger = Duration::from_millis(5);
        let later = start + linger;
        assert!(!log.durable_seal_due(later, linger), "nobody waits");
        log.note_durable_wait(start);
        log.note_durable_wait(start + Duration::from_secs(1));
        assert!(
            log.durable_seal_due(later, linger),
            "a linger after the last seal"
        );
        assert!(log.claim_flusher());
        log.handle_flushed(path(0), false);
        assert_eq!(log.poll_flush().unwrap().header().base_offset, 2);
        assert!(log.durable_seal_due(later, linger), "the wait goes on");
        log.handle_flushed(path(2), true);
        assert!(!log.durable_seal_due(start + Duration::from_secs(9), Duration::ZERO));
        assert_eq!(log.flushed_offset(), 4);
        assert_eq!(log.first_stored_offset(), Some(0));
    }

    /// Early seals for `durable` producers come one linger after the last
    /// seal at the soonest, however many producers wait.
    #[test]
    fn early_durable_seals_are_one_linger_apart() {
        let mut log = empty();
        let start = Instant::now();
        let linger = Duration::from_millis(10);
        log.handle_append(0, 3);
        log.note_durable_wait(start);
        assert!(log.durable_seal_due(start, linger), "never sealed: at once");
        log.handle_sealed(buffer(0, 3, 1), start);
        for ms in [0, 1, 9] {
            let now = start + Duration::from_millis(ms);
            log.note_durable_wait(now);
            assert!(!log.durable_seal_due(now, linger), "{ms} ms after a seal");
        }
        assert!(log.durable_seal_due(start + linger, linger));
        // A clock that went back (an `Instant` from before the seal) waits.
        assert!(!log.durable_seal_due(start - Duration::from_millis(1), linger));
    }

    /// Lost offsets count as flushed and are skipped by readers.
    #[test]
    fn lost_ranges_are_flushed_past_and_skipped() {
        let mut log: SegmentLog<Buffer> =
            SegmentLog::new(SealState::Open, Vec::new(), 10, VecDeque::new(), 20);
        log.set_lost(vec![
            LostRange { from: 10, to: 12 },
            LostRange { from: 12, to: 15 },
        ]);
        assert_eq!(log.lost_records(), 5);
        assert_eq!(
            log.flushed_offset(),
            15,
            "touching ranges are skipped together"
        );
        assert_eq!(log.past_lost(11), 15);
        assert_eq!(log.past_lost(15), 15);
        assert_eq!(log.past_lost(3), 3);
    }

    /// A failed segment hands the flusher nothing more, and the first
    /// reason is the one kept.
    #[test]
    fn a_failed_segment_flushes_nothing_more() {
        let mut log = one_sealed_buffer(1);
        assert!(log.claim_flusher());
        assert!(log.fail("first".into()));
        assert!(!log.fail("second".into()));
        assert_eq!(log.failed(), Some("first"));
        assert!(log.poll_flush().is_none());
        log.handle_flusher_stopped();
        assert!(!log.claim_flusher());
    }

    /// A view takes a listing only when it reaches further.
    #[test]
    fn a_listing_older_than_the_one_held_is_ignored() {
        let mut log: SegmentLog<Buffer> =
            SegmentLog::new(SealState::Sealing, Vec::new(), 0, VecDeque::new(), 0);
        let chunk = |base, next| ChunkMeta {
            path: path(base),
            header: *buffer(base, next, 1).header(),
            damaged: None,
        };
        log.handle_listed(vec![chunk(0, 4), chunk(4, 9)], Vec::new(), 9);
        assert_eq!((log.next_offset(), log.flushed_offset()), (9, 9));
        log.handle_listed(vec![chunk(0, 4)], Vec::new(), 4);
        assert_eq!(log.chunks().len(), 2);
        assert_eq!(log.next_offset(), 9);
    }

    /// The queue's byte count follows what is queued, the last sealed
    /// buffer's size is kept, and a deleted topic's queue is emptied.
    #[test]
    fn queued_bytes_follow_the_queue() {
        let mut log = empty();
        assert_eq!(log.last_sealed_bytes(), 0);
        log.handle_append(0, 1);
        let one = buffer(0, 1, 1000);
        let bytes = one.header().file_bytes();
        log.handle_sealed(one, Instant::now());
        assert_eq!(log.last_sealed_bytes(), bytes);
        log.handle_append(1, 2);
        assert!(log.may_seal(bytes, 2 * bytes));
        assert!(!log.may_seal(bytes + 1, 2 * bytes));
        log.handle_deleted();
        assert!(log.may_seal(u64::MAX, 0));
        assert_eq!(log.sealed_end(), None);
    }

    /// A seal only moves forward: writes are refused first, and the segment
    /// is sealed for good once everything is stored.
    #[test]
    fn a_seal_refuses_writes_first_and_ends_when_everything_is_stored() {
        let mut log = one_sealed_buffer(2);
        assert!(log.handle_refuse_writes());
        assert!(!log.handle_refuse_writes(), "once");
        assert_eq!(log.seal_state(), SealState::Sealing);
        assert!(log.claim_flusher());
        log.handle_flushed(path(0), true);
        log.handle_sealed_for_good();
        assert_eq!(log.seal_state(), SealState::Sealed);
        assert!(!log.handle_refuse_writes());
        assert_eq!(log.seal_state(), SealState::Sealed, "never back");
    }

    #[test]
    #[should_panic(expected = "a sealing segment takes no writes")]
    fn an_append_after_writes_are_refused_is_a_bug() {
        let mut log = empty();
        log.handle_refuse_writes();
        log.handle_append(0, 1);
    }

    #[test]
    #[should_panic]
    fn sealing_for_good_with_buffers_unstored_is_a_bug() {
        let mut log = one_sealed_buffer(2);
        log.handle_refuse_writes();
        log.handle_sealed_for_good();
    }

    /// What the assertions guard: an append that does not start at the
    /// end, and a buffer queued out of order, are broker bugs that stop it.
    #[test]
    #[should_panic(expected = "an append starts at the log's end")]
    fn an_append_off_the_end_is_a_bug() {
        let mut log = empty();
        log.handle_append(1, 2);
    }

    #[test]
    #[should_panic]
    fn a_buffer_queued_out_of_order_is_a_bug() {
        let mut log = empty();
        log.handle_append(0, 4);
        log.handle_sealed(buffer(2, 4, 1), Instant::now());
        log.handle_sealed(buffer(0, 2, 1), Instant::now());
    }
}
