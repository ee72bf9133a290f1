//! Reusable buffers of the gateway thread: request frames and batch
//! builders, each about a produce request's size (~1 MB from librdkafka).
//!
//! Allocating them per request costs more than using them on this kind of
//! host: every fresh megabyte is zero-filled or page-faulted in again once
//! the allocator has given it back to the kernel. A pool keeps a few of
//! them, bounded in count and in the capacity of each one it keeps, so an
//! odd 32 MiB request does not stay resident. Single threaded, like the
//! rest of the gateway: it never crosses to a shard.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

/// Buffers each pool keeps at most (a connection has at most
/// `PIPELINE_MAX` requests in flight; a few connections share the pool).
pub(crate) const POOLED_ITEMS_MAX: usize = 8;
/// A buffer whose capacity is above this is freed, not kept.
pub(crate) const POOLED_ITEM_BYTES_MAX: usize = 4 << 20;

const _: () = assert!(POOLED_ITEMS_MAX >= super::connection::PIPELINE_MAX);
const _: () = assert!(POOLED_ITEMS_MAX * POOLED_ITEM_BYTES_MAX <= 32 << 20);

/// What a pool holds: something with a capacity, emptied before reuse.
pub(crate) trait Reusable: Sized {
    fn capacity_bytes(&self) -> usize;
    /// Forget the contents, keep the memory.
    fn reset(&mut self);
}

impl Reusable for Vec<u8> {
    fn capacity_bytes(&self) -> usize {
        self.capacity()
    }

    fn reset(&mut self) {
        self.clear();
    }
}

impl Reusable for wire::batch::BatchBuilder {
    fn capacity_bytes(&self) -> usize {
        // Its size when given back, after its batch was built: its
        // capacity is at most about twice that (a `Vec` grows by doubling).
        self.bytes()
    }

    fn reset(&mut self) {
        self.clear();
    }
}

/// A bounded free list.
pub(crate) struct Pool<T> {
    free: RefCell<Vec<T>>,
}

impl<T: Reusable> Default for Pool<T> {
    fn default() -> Self {
        Pool {
            free: RefCell::new(Vec::with_capacity(POOLED_ITEMS_MAX)),
        }
    }
}

impl<T: Reusable> Pool<T> {
    /// An emptied item from the pool, or `new()`; it returns to the pool
    /// when dropped.
    pub(crate) fn take(&self, new: impl FnOnce() -> T) -> Pooled<'_, T> {
        Pooled {
            item: Some(self.take_owned(new)),
            pool: self,
        }
    }

    /// An emptied item from the pool, or `new()`, for a caller that hands
    /// it to [`Pool::give_back`] itself (it outlives a borrow of the pool).
    pub(crate) fn take_owned(&self, new: impl FnOnce() -> T) -> T {
        self.free.borrow_mut().pop().unwrap_or_else(new)
    }

    /// Keep `item` for reuse, unless the pool is full or it is too big.
    pub(crate) fn give_back(&self, mut item: T) {
        if item.capacity_bytes() > POOLED_ITEM_BYTES_MAX {
            return;
        }
        let mut free = self.free.borrow_mut();
        if free.len() < POOLED_ITEMS_MAX {
            item.reset();
            free.push(item);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.free.borrow().len()
    }
}

/// An item taken from a [`Pool`], given back when dropped.
pub(crate) struct Pooled<'a, T: Reusable> {
    item: Option<T>,
    pool: &'a Pool<T>,
}

impl<T: Reusable> Deref for Pooled<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // Only `drop` empties it.
        self.item.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl<T: Reusable> DerefMut for Pooled<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.item.as_mut().unwrap_or_else(|| unreachable!())
    }
}

impl<T: Reusable> Drop for Pooled<'_, T> {
    fn drop(&mut self) {
        if let Some(item) = self.item.take() {
            self.pool.give_back(item);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn items_come_back_emptied_and_bounded() {
        let pool: Pool<Vec<u8>> = Pool::default();
        {
            let mut a = pool.take(|| Vec::with_capacity(1000));
            a.extend_from_slice(b"abc");
        }
        assert_eq!(pool.len(), 1);
        let b = pool.take_owned(Vec::new);
        assert!(b.is_empty());
        assert!(b.capacity() >= 1000);
        assert_eq!(pool.len(), 0);
        pool.give_back(b);
        assert_eq!(pool.len(), 1);
        drop(pool.take_owned(Vec::new));

        pool.give_back(Vec::with_capacity(POOLED_ITEM_BYTES_MAX + 1));
        assert_eq!(pool.len(), 0, "a too-big buffer is freed");
        for _ in 0..POOLED_ITEMS_MAX + 3 {
            pool.give_back(Vec::with_capacity(10));
        }
        assert_eq!(pool.len(), POOLED_ITEMS_MAX);
    }
}
