//! [`LogLimit`]: the same kind of message logged once per interval, not
//! once per event. A bucket that stops answering fails every segment's
//! flush every few seconds; an operator needs the first failure, how many
//! followed, and the next report a while later, not a line per attempt.
//!
//! A pure state machine: the caller passes `now`.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub(crate) struct LogLimit {
    interval: Duration,
    /// When the last admitted event was logged.
    last: Option<Instant>,
    /// Events held back since then.
    held_back: u64,
}

impl LogLimit {
    pub(crate) fn new(interval: Duration) -> LogLimit {
        LogLimit {
            interval,
            last: None,
            held_back: 0,
        }
    }

    /// Whether an event at `now` is logged: `Some(n)` with the number of
    /// events held back since the last one logged, or `None` (counted, to
    /// be reported with the next one logged).
    pub(crate) fn admit(&mut self, now: Instant) -> Option<u64> {
        let due = self
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= self.interval);
        if !due {
            self.held_back += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.held_back))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_event_is_logged_then_one_per_interval_with_the_count_held_back() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let mut limit = LogLimit::new(10 * second);
        assert_eq!(limit.admit(t0), Some(0));
        for i in 1..=5 {
            assert_eq!(limit.admit(t0 + i * second), None);
        }
        assert_eq!(limit.admit(t0 + 10 * second), Some(5));
        assert_eq!(limit.admit(t0 + 11 * second), None);
        assert_eq!(limit.admit(t0 + 25 * second), Some(1));
    }

    #[test]
    fn a_clock_that_goes_back_holds_events_back_instead_of_logging_them() {
        let t0 = Instant::now() + Duration::from_secs(60);
        let mut limit = LogLimit::new(Duration::from_secs(10));
        assert_eq!(limit.admit(t0), Some(0));
        assert_eq!(limit.admit(t0 - Duration::from_secs(30)), None);
    }
}
