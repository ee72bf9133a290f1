//! Connections per peer address, so one host cannot take every connection
//! slot of a port. Each shard (its TCP listener and its QUIC server apart)
//! and the Kafka gateway's thread keep their own counts, touched by that
//! one thread only; the mutex is never contended.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Open connections by peer address, at most `max_per_ip` each.
#[derive(Debug)]
pub(crate) struct PeerLimit {
    max_per_ip: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection; its count goes when it is dropped.
#[derive(Debug)]
pub(crate) struct PeerSlot {
    limit: Arc<PeerLimit>,
    ip: IpAddr,
}

impl PeerLimit {
    pub(crate) fn new(max_per_ip: usize) -> Arc<PeerLimit> {
        Arc::new(PeerLimit {
            max_per_ip,
            open: Mutex::new(HashMap::new()),
        })
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        // A count is changed in one step: a panic elsewhere leaves it whole.
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A slot for one more connection from `ip`, or `None` at the limit.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<PeerSlot> {
        let mut open = self.open();
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max_per_ip {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            limit: self.clone(),
            ip,
        })
    }

    #[cfg(test)]
    fn open_from(&self, ip: IpAddr) -> usize {
        self.open().get(&ip).copied().unwrap_or(0)
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.limit.open();
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                // Addresses seen once do not pile up.
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_address_gets_its_own_limit_and_slots_come_back() {
        let limit = PeerLimit::new(2);
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let first = limit.admit(a).unwrap();
        let _second = limit.admit(a).unwrap();
        assert!(limit.admit(a).is_none(), "a third from one address");
        let other = limit.admit(b);
        assert!(other.is_some(), "another address is not held back");
        drop(first);
        assert_eq!(limit.open_from(a), 1);
        assert!(limit.admit(a).is_some());
        drop(other);
        assert!(!limit.open().contains_key(&b));
    }
}
