//! The batches a producer sent and has not settled yet, in the order it
//! sent them, and which refused batch may be resent now.
//!
//! A batch refused for a stale layout (its segment was sealed, moved, or
//! its successor is not open yet) was not appended. To keep each key's
//! records in publish order through a split, merge or move, a refused
//! batch is resent only once every batch sent before it is settled
//! (acknowledged, failed, or itself resent), and by one resender at a
//! time: so refused batches are appended in the order they were first
//! sent, each before any later batch of the same segment that was refused
//! with it. (Batches built on a newer layout wait until every batch of
//! the older one settled: the producer's `sync_layout` does that.)
//!
//! Pure bookkeeping: no I/O, no clock; the producer drives it.

use std::collections::BTreeMap;

/// Where one sent batch stands.
#[derive(Debug)]
enum State<T> {
    /// Sent; no answer yet.
    Waiting,
    /// Refused for a stale layout; waits to be resent.
    Refused(T),
    /// Handed to the resender.
    Resending,
}

/// The unsettled batches, by send sequence number.
#[derive(Debug)]
pub(crate) struct InFlight<T> {
    next_seq: u64,
    batches: BTreeMap<u64, State<T>>,
    /// Whether some task is resending (at most one at a time).
    resender: bool,
}

impl<T> InFlight<T> {
    pub(crate) fn new() -> InFlight<T> {
        InFlight {
            next_seq: 0,
            batches: BTreeMap::new(),
            resender: false,
        }
    }

    /// A batch was sent (its answer expected): its sequence number.
    pub(crate) fn sent(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.batches.insert(seq, State::Waiting);
        seq
    }

    /// Batch `seq` is settled: acknowledged, failed, or resent by the
    /// resender. True if the caller must now become the resender and call
    /// [`InFlight::next_resend`] until it returns `None`.
    pub(crate) fn settled(&mut self, seq: u64) -> bool {
        self.batches.remove(&seq);
        self.claim()
    }

    /// Batch `seq` was refused for a stale layout; `item` is what the
    /// resender needs to resend it. True as for [`InFlight::settled`].
    pub(crate) fn refused(&mut self, seq: u64, item: T) -> bool {
        if let Some(state) = self.batches.get_mut(&seq) {
            *state = State::Refused(item);
        }
        self.claim()
    }

    /// For the resender: the next batch to resend, once every batch sent
    /// before it is settled; it must call [`InFlight::settled`] for it
    /// before asking again. `None`: nothing to resend yet, and the caller
    /// is no longer the resender.
    pub(crate) fn next_resend(&mut self) -> Option<(u64, T)> {
        let mut first = self.batches.first_entry();
        if let Some(entry) = first.as_mut() {
            if matches!(entry.get(), State::Refused(_)) {
                let seq = *entry.key();
                if let State::Refused(item) = std::mem::replace(entry.get_mut(), State::Resending) {
                    return Some((seq, item));
                }
            }
        }
        self.resender = false;
        None
    }

    /// Batches not settled yet.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.batches.len()
    }

    /// Become the resender if nobody is and the oldest batch is refused.
    fn claim(&mut self) -> bool {
        let ready = matches!(self.batches.first_key_value(), Some((_, State::Refused(_))));
        if ready && !self.resender {
            self.resender = true;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Drive the resender as the producer does, resending every batch it
    /// is handed at once; returns the order of the resends.
    fn resend_all(f: &mut InFlight<&'static str>) -> Vec<&'static str> {
        let mut out = Vec::new();
        while let Some((seq, item)) = f.next_resend() {
            out.push(item);
            assert!(!f.settled(seq), "the resender is already running");
        }
        out
    }

    #[test]
    fn a_refused_batch_waits_for_every_earlier_one() {
        let mut f = InFlight::new();
        let a = f.sent();
        let b = f.sent();
        let c = f.sent();
        // b is refused first, but a has no answer yet: nobody resends.
        assert!(!f.refused(b, "b"));
        // a is acknowledged: b is now the oldest, and whoever settled a
        // becomes the resender.
        assert!(f.settled(a));
        // c has no answer yet, so only b goes.
        assert_eq!(resend_all(&mut f), vec!["b"]);
        assert!(f.refused(c, "c"));
        assert_eq!(resend_all(&mut f), vec!["c"]);
        assert_eq!(f.len(), 0);
    }

    #[test]
    fn refused_batches_are_resent_in_send_order_by_one_resender() {
        let mut f = InFlight::new();
        let seqs: Vec<u64> = (0..5).map(|_| f.sent()).collect();
        // Answers arrive out of order (different connections).
        assert!(!f.refused(seqs[3], "3"));
        assert!(!f.refused(seqs[1], "1"));
        assert!(f.refused(seqs[0], "0"));
        // The resender takes 0, and while it resends, 2 is refused too:
        // no second resender starts.
        let (s0, i0) = f.next_resend().unwrap();
        assert_eq!(i0, "0");
        assert!(!f.refused(seqs[2], "2"));
        assert!(!f.settled(s0));
        let mut order = vec![i0];
        order.extend(resend_all(&mut f));
        assert_eq!(order, vec!["0", "1", "2", "3"]);
        // 4 is still waiting; its acknowledgement starts nothing.
        assert!(!f.settled(seqs[4]));
        assert_eq!(f.len(), 0);
        assert!(f.next_resend().is_none());
    }

    #[test]
    fn an_acknowledged_batch_never_blocks_a_later_resend() {
        let mut f = InFlight::new();
        let a = f.sent();
        let b = f.sent();
        assert!(!f.settled(b));
        assert!(f.refused(a, "a"));
        let (sa, _) = f.next_resend().unwrap();
        // A new batch sent while a is being resent queues behind it.
        let c = f.sent();
        assert!(!f.refused(c, "c"));
        assert!(!f.settled(sa));
        assert_eq!(resend_all(&mut f), vec!["c"]);
        assert_eq!(f.len(), 0);
    }

    #[test]
    fn seeded_random_answers_keep_send_order() {
        // Any interleaving of answers: refused batches come out in send
        // order, each exactly once, and only one resender at a time.
        for seed in 0..200u64 {
            let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut f: InFlight<u64> = InFlight::new();
            let n = 20;
            let seqs: Vec<u64> = (0..n).map(|_| f.sent()).collect();
            let mut pending: Vec<u64> = seqs.clone();
            let mut refused = Vec::new();
            let mut resent = Vec::new();
            while !pending.is_empty() {
                let i = (next() % pending.len() as u64) as usize;
                let seq = pending.swap_remove(i);
                let start = if next() % 2 == 0 {
                    refused.push(seq);
                    f.refused(seq, seq)
                } else {
                    f.settled(seq)
                };
                if start {
                    while let Some((s, item)) = f.next_resend() {
                        assert_eq!(s, item);
                        resent.push(item);
                        assert!(!f.settled(s));
                    }
                }
            }
            refused.sort_unstable();
            assert_eq!(resent, refused, "seed {seed}");
            assert_eq!(f.len(), 0, "seed {seed}");
        }
    }
}
