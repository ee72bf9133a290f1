//! The driver's timer queue: one armed instant per connection, the earliest
//! of which bounds the driver's wait. Re-arming pushes a new entry and
//! leaves the old one stale; stale entries are skipped when they surface and
//! the heap is rebuilt when they outnumber the live ones.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use quinn_proto::ConnectionHandle;

/// Entries beyond twice the connections plus this trigger a rebuild.
const STALE_ENTRIES_SLACK: usize = 64;

#[derive(Default)]
pub(super) struct TimerQueue {
    heap: BinaryHeap<Reverse<(Instant, ConnectionHandle)>>,
}

impl TimerQueue {
    pub(super) fn push(&mut self, at: Instant, handle: ConnectionHandle) {
        self.heap.push(Reverse((at, handle)));
    }

    /// Pops every entry due at `now`, in order.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<(Instant, ConnectionHandle)> {
        match self.heap.peek() {
            Some(Reverse((at, _))) if *at <= now => self.heap.pop().map(|Reverse(e)| e),
            _ => None,
        }
    }

    /// The earliest live entry; `is_live` tells whether an entry is still
    /// its connection's armed instant. Stale entries on top are dropped.
    pub(super) fn earliest(
        &mut self,
        mut is_live: impl FnMut(Instant, ConnectionHandle) -> bool,
    ) -> Option<Instant> {
        while let Some(Reverse((at, handle))) = self.heap.peek().copied() {
            if is_live(at, handle) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// Rebuilds from the live entries when stale ones dominate.
    pub(super) fn compact(
        &mut self,
        connections: usize,
        live: impl Iterator<Item = (Instant, ConnectionHandle)>,
    ) {
        if self.heap.len() > connections * 2 + STALE_ENTRIES_SLACK {
            self.heap = live.map(Reverse).collect();
        }
    }
}
