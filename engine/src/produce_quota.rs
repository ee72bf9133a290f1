//! Produce byte-rate quotas (`produce_bytes_per_s` of a user in the auth
//! file): each shard keeps a token bucket per user, so a user's produce
//! requests bring at most that many bytes a second to one shard, with a
//! burst of one second's worth. A request over it is held back (its
//! connection is not read meanwhile, so the client slows down) for as long
//! as the rate needs, at most [`QUOTA_DELAY_MAX`] a request; the debt
//! carries to the next. Shard-local: no state is shared across cores.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The longest one request is held back; a larger debt holds back the
/// requests after it too.
pub(crate) const QUOTA_DELAY_MAX: Duration = Duration::from_secs(5);

const NANOS_PER_S: u128 = 1_000_000_000;

/// A token bucket of bytes: pure, `now` passed in.
#[derive(Debug, Clone)]
pub(crate) struct ByteRate {
    /// Bytes a second, at least 1.
    rate: u64,
    /// Bytes that may come now; negative while a debt is paid back.
    tokens: i128,
    /// Up to when the refill has been counted.
    counted: Instant,
}

impl ByteRate {
    /// A full bucket (one second's worth).
    pub(crate) fn new(rate: u64, now: Instant) -> ByteRate {
        let rate = rate.max(1);
        ByteRate {
            rate,
            tokens: i128::from(rate),
            counted: now,
        }
    }

    /// Take `bytes` at `now`: how long their sender should wait so its rate
    /// stays within the bucket's (zero when it does).
    pub(crate) fn charge(&mut self, bytes: u64, now: Instant) -> Duration {
        let rate = u128::from(self.rate);
        let elapsed = now.saturating_duration_since(self.counted).as_nanos();
        // Whole bytes refilled; the time of the fraction left is counted
        // next time, so frequent small charges lose nothing.
        let refilled = elapsed * rate / NANOS_PER_S;
        let used = refilled * NANOS_PER_S / rate;
        self.counted += Duration::from_nanos(u64::try_from(used).unwrap_or(u64::MAX));
        let burst = i128::from(self.rate);
        self.tokens = (self.tokens + i128::try_from(refilled).unwrap_or(i128::MAX)).min(burst);
        self.tokens -= i128::from(bytes);
        if self.tokens >= 0 {
            return Duration::ZERO;
        }
        let owed = u128::try_from(-self.tokens).unwrap_or(u128::MAX);
        let wait =
            Duration::from_nanos(u64::try_from(owed * NANOS_PER_S / rate).unwrap_or(u64::MAX));
        wait.min(QUOTA_DELAY_MAX)
    }
}

/// One shard's buckets, by user (only users with a quota: as many as the
/// auth file lists at most).
#[derive(Debug, Default)]
pub(crate) struct Quotas {
    by_user: RefCell<HashMap<String, ByteRate>>,
}

impl Quotas {
    /// Charge `bytes` to `user`, whose quota is `rate`: how long to hold
    /// the request back.
    pub(crate) fn charge(&self, user: &str, rate: u64, bytes: u64, now: Instant) -> Duration {
        let mut by_user = self.by_user.borrow_mut();
        if let Some(bucket) = by_user.get_mut(user) {
            return bucket.charge(bytes, now);
        }
        let mut bucket = ByteRate::new(rate, now);
        let wait = bucket.charge(bytes, now);
        by_user.insert(user.to_owned(), bucket);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_the_rate_holds_and_fractions_are_not_lost() {
        let start = Instant::now();
        let mut b = ByteRate::new(1_000, start);
        // One second's worth at once passes.
        assert_eq!(b.charge(1_000, start), Duration::ZERO);
        // 500 more owe half a second.
        assert_eq!(b.charge(500, start), Duration::from_millis(500));
        // Half a second later the debt is paid: nothing more is owed for 0.
        assert_eq!(
            b.charge(0, start + Duration::from_millis(500)),
            Duration::ZERO
        );
        // A thousand 1-byte charges 1 ms apart keep pace exactly (1,000
        // bytes a second): each refill is one byte, never rounded away.
        let mut at = start + Duration::from_millis(500);
        for _ in 0..1_000 {
            at += Duration::from_millis(1);
            assert_eq!(b.charge(1, at), Duration::ZERO);
        }
        // Idle time refills at most one second's worth.
        let later = at + Duration::from_secs(60);
        assert_eq!(b.charge(1_000, later), Duration::ZERO);
        assert_eq!(b.charge(1, later), Duration::from_millis(1));
        // A huge debt holds one request back at most QUOTA_DELAY_MAX.
        assert_eq!(b.charge(1 << 30, later), QUOTA_DELAY_MAX);
        assert_eq!(b.charge(0, later + QUOTA_DELAY_MAX), QUOTA_DELAY_MAX);
    }

    #[test]
    fn users_have_buckets_of_their_own() {
        let now = Instant::now();
        let quotas = Quotas::default();
        assert_eq!(quotas.charge("a", 100, 100, now), Duration::ZERO);
        assert_eq!(quotas.charge("a", 100, 50, now), Duration::from_millis(500));
        assert_eq!(quotas.charge("b", 100, 100, now), Duration::ZERO);
    }
}
