//! The request bytes a shard holds at once, over all its connections, TCP
//! and QUIC alike (`receive_bytes_max`): a frame's payload takes its size
//! from the budget before it is read in and gives it back once the shard
//! has handled it. Past the budget the shard reads no more payloads: a TCP
//! connection waits before its read (the kernel's window holds the peer
//! back), a QUIC connection stops reading its stream (QUIC flow control
//! does). QUIC connections also pay their receive windows from it (the
//! bytes quinn-proto may hold for them unread, `quic_shard/window.rs`),
//! and a connection is refused when not even its smallest window fits. So
//! what peers send can never make a shard allocate more than the budget
//! for frames, however many connections they open.
//!
//! One thread only (a shard's): `Cell`s, no lock.

use std::cell::Cell;
use std::rc::Rc;

use event_listener::{Event, EventListener};

#[derive(Debug)]
pub(crate) struct ReceiveBudget {
    max: u64,
    free: Cell<u64>,
    /// Notified whenever bytes come back.
    released: Event,
}

/// Bytes taken from a [`ReceiveBudget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct ReceivePermit {
    budget: Rc<ReceiveBudget>,
    bytes: u64,
}

impl ReceiveBudget {
    pub(crate) fn new(max: u64) -> Rc<ReceiveBudget> {
        Rc::new(ReceiveBudget {
            max,
            free: Cell::new(max),
            released: Event::new(),
        })
    }

    /// Bytes taken now.
    pub(crate) fn in_use(&self) -> u64 {
        self.max - self.free.get()
    }

    /// Bytes that may be taken now.
    pub(crate) fn free(&self) -> u64 {
        self.free.get()
    }

    /// `bytes` now, or `None` if fewer are free. A request above the whole
    /// budget can never be met; callers bound frames below it (the config
    /// check keeps the budget at least one largest frame).
    pub(crate) fn try_take(self: &Rc<Self>, bytes: u64) -> Option<ReceivePermit> {
        assert!(
            bytes <= self.max,
            "{bytes} bytes asked of a budget of {}",
            self.max
        );
        let free = self.free.get();
        if bytes > free {
            return None;
        }
        self.free.set(free - bytes);
        Some(ReceivePermit {
            budget: self.clone(),
            bytes,
        })
    }

    /// `bytes`, once they are free. Waiters are woken together when bytes
    /// come back and the first to find room takes it.
    pub(crate) async fn take(self: &Rc<Self>, bytes: u64) -> ReceivePermit {
        loop {
            let released = self.released.listen();
            if let Some(permit) = self.try_take(bytes) {
                return permit;
            }
            released.await;
        }
    }

    /// Resolves when bytes next come back.
    pub(crate) fn listen(&self) -> EventListener {
        self.released.listen()
    }
}

impl ReceivePermit {
    /// Bytes this permit holds.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Takes `more` bytes into this permit, or nothing (false) if fewer
    /// are free.
    pub(crate) fn try_grow(&mut self, more: u64) -> bool {
        let free = self.budget.free.get();
        if more > free {
            return false;
        }
        self.budget.free.set(free - more);
        self.bytes += more;
        true
    }

    /// Gives `less` of this permit's bytes back now.
    pub(crate) fn shrink(&mut self, less: u64) {
        assert!(
            less <= self.bytes,
            "{less} bytes given back of a permit of {}",
            self.bytes
        );
        if less == 0 {
            return;
        }
        self.bytes -= less;
        let free = self.budget.free.get() + less;
        assert!(
            free <= self.budget.max,
            "a receive budget got back more than it gave"
        );
        self.budget.free.set(free);
        self.budget.released.notify(usize::MAX);
    }
}

impl Drop for ReceivePermit {
    fn drop(&mut self) {
        let free = self.budget.free.get() + self.bytes;
        assert!(
            free <= self.budget.max,
            "a receive budget got back more than it gave"
        );
        self.budget.free.set(free);
        if self.bytes > 0 {
            self.budget.released.notify(usize::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn bytes_are_taken_up_to_the_budget_and_come_back_on_drop() {
        let budget = ReceiveBudget::new(10);
        let a = budget.try_take(6).unwrap();
        assert!(budget.try_take(5).is_none());
        let b = budget.try_take(4).unwrap();
        assert_eq!(budget.in_use(), 10);
        drop(a);
        assert_eq!(budget.free(), 6);
        let listener = budget.listen();
        drop(b);
        assert_eq!(budget.in_use(), 0);
        // The release woke whoever listened.
        assert!(
            futures_lite::future::block_on(futures_lite::future::poll_once(listener)).is_some()
        );
        assert!(budget.try_take(10).is_some());
    }

    #[test]
    fn a_permit_grows_within_the_budget_and_shrinks_back() {
        let budget = ReceiveBudget::new(10);
        let mut permit = budget.try_take(4).unwrap();
        assert!(permit.try_grow(6));
        assert!(!permit.try_grow(1));
        assert_eq!(permit.bytes(), 10);
        let listener = budget.listen();
        permit.shrink(7);
        assert_eq!(budget.free(), 7);
        assert!(
            futures_lite::future::block_on(futures_lite::future::poll_once(listener)).is_some()
        );
        drop(permit);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn a_waiting_take_completes_once_room_comes_back() {
        let budget = ReceiveBudget::new(8);
        let held = budget.try_take(8).unwrap();
        let mut waiting = Box::pin(budget.take(3));
        assert!(
            futures_lite::future::block_on(futures_lite::future::poll_once(&mut waiting)).is_none()
        );
        drop(held);
        let permit = futures_lite::future::block_on(waiting);
        assert_eq!(budget.in_use(), 3);
        drop(permit);
        assert_eq!(budget.in_use(), 0);
    }
}
