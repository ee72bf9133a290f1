//! How large one QUIC connection's receive window is: the bytes its peer
//! may have sent that quinn-proto holds until the connection reads them.
//! Every window is paid from the shard's receive budget (the one its TCP
//! connections and every frame's payload draw from), so however many
//! connections peers open and however they stall, what QUIC buffers on a
//! shard stays within `receive_bytes_max`.
//!
//! The policy here is pure: time and the budget's free bytes are passed
//! in, it answers with the window it wants, and the caller reserves the
//! bytes and tells quinn-proto (`connection.rs`, [`super::connection`]).
//!
//! - A connection starts at [`WINDOW_BYTES_MIN`], reserved when it is
//!   accepted; with no room for it the connection is refused.
//! - A connection that delivered a whole window of complete frames within
//!   one [`WINDOW_REVIEW_INTERVAL`] doubles its window, up to
//!   [`WINDOW_BYTES_MAX`], when the budget keeps room for one largest
//!   frame besides ([`WindowLimits::headroom_bytes`]): growing never takes
//!   the room a frame's payload needs.
//! - A connection that delivered less than a quarter of its window in an
//!   interval halves it, down to the minimum. QUIC cannot take credit back,
//!   so the caller keeps paying for the credit already given until the
//!   connection has read that many bytes.
//!
//! It never reads the clock, the budget or the connection itself.

use std::time::{Duration, Instant};

/// A new connection's window, reserved when it is accepted: room for a
/// few small frames in flight, and what a stalled connection costs.
pub(crate) const WINDOW_BYTES_MIN: u64 = 64 << 10;
/// The most one connection's window grows to (the fixed window before
/// windows were paid from the budget).
pub(crate) const WINDOW_BYTES_MAX: u64 = 32 << 20;
/// The most one stream may have unread, within the connection's window
/// (kelp uses one stream per connection, so it is the connection's window
/// that binds; the stream's stays as it was before windows were paid).
pub(crate) const STREAM_WINDOW_BYTES: u64 = 16 << 20;
/// How often a connection's delivery is weighed: a window delivered
/// within one interval grows it, less than a quarter of it shrinks it.
pub(crate) const WINDOW_REVIEW_INTERVAL: Duration = Duration::from_secs(1);
/// In an interval, delivering less than `window / WINDOW_SHRINK_DIVISOR`
/// halves the window.
const WINDOW_SHRINK_DIVISOR: u64 = 4;

const _: () = assert!(WINDOW_BYTES_MIN > 0 && WINDOW_BYTES_MIN <= WINDOW_BYTES_MAX);
// A window is a QUIC variable-length integer (below 2^62).
const _: () = assert!(WINDOW_BYTES_MAX < 1 << 62);
// Doubling from the minimum lands on the maximum exactly.
const _: () = assert!(WINDOW_BYTES_MIN.is_power_of_two() && WINDOW_BYTES_MAX.is_power_of_two());

/// The bounds every window of a shard keeps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WindowLimits {
    pub(crate) min_bytes: u64,
    pub(crate) max_bytes: u64,
    /// Budget bytes a growth must leave free: one largest frame's payload.
    pub(crate) headroom_bytes: u64,
    pub(crate) review_interval: Duration,
}

impl WindowLimits {
    /// The broker's: [`WINDOW_BYTES_MIN`] to [`WINDOW_BYTES_MAX`], growing
    /// only while room for a largest frame stays free.
    pub(crate) const BROKER: WindowLimits = WindowLimits {
        min_bytes: WINDOW_BYTES_MIN,
        max_bytes: WINDOW_BYTES_MAX,
        headroom_bytes: wire::limits::FRAME_PAYLOAD_BYTES_MAX as u64,
        review_interval: WINDOW_REVIEW_INTERVAL,
    };
}

/// A change of one connection's window the caller applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WindowChange {
    /// Reserve `to - from` more bytes, then give the peer the credit.
    Grow { from: u64, to: u64 },
    /// Give less credit from now on; the reservation shrinks as the
    /// connection reads the credit already given.
    Shrink { from: u64, to: u64 },
}

/// One connection's window and what it delivered lately.
#[derive(Debug, Clone)]
pub(crate) struct WindowPolicy {
    limits: WindowLimits,
    window_bytes: u64,
    /// When the current review interval began.
    interval_start: Instant,
    /// Bytes of whole frames delivered since `interval_start`.
    delivered_bytes: u64,
}

impl WindowPolicy {
    /// A new connection's, at `now`: [`WindowLimits::min_bytes`].
    pub(crate) fn new(limits: WindowLimits, now: Instant) -> WindowPolicy {
        assert!(limits.min_bytes > 0 && limits.min_bytes <= limits.max_bytes);
        WindowPolicy {
            limits,
            window_bytes: limits.min_bytes,
            interval_start: now,
            delivered_bytes: 0,
        }
    }

    /// The window now.
    pub(crate) fn window_bytes(&self) -> u64 {
        self.window_bytes
    }

    /// Whole frames of `bytes` (headers included) were delivered at `now`
    /// with `budget_free` bytes free in the shard's budget: the window to
    /// grow to, if the connection earned it and the budget has room.
    pub(crate) fn on_delivered(
        &mut self,
        now: Instant,
        bytes: u64,
        budget_free: u64,
    ) -> Option<WindowChange> {
        if let Some(change) = self.review(now) {
            // A new interval began; count these frames in it.
            self.delivered_bytes = bytes;
            return Some(change);
        }
        self.delivered_bytes = self.delivered_bytes.saturating_add(bytes);
        if self.delivered_bytes < self.window_bytes || self.window_bytes >= self.limits.max_bytes {
            return None;
        }
        let to = (self.window_bytes * 2).min(self.limits.max_bytes);
        let extra = to - self.window_bytes;
        if budget_free < extra.saturating_add(self.limits.headroom_bytes) {
            // No room: stay, and earn it again in a fresh interval.
            self.start_interval(now);
            return None;
        }
        let from = self.window_bytes;
        self.window_bytes = to;
        self.start_interval(now);
        Some(WindowChange::Grow { from, to })
    }

    /// At `now`: once an interval has passed, the window to shrink to if
    /// the connection delivered little in it. Called on every turn of the
    /// connection, so a connection that stalls shrinks on its next turn.
    pub(crate) fn review(&mut self, now: Instant) -> Option<WindowChange> {
        if now.saturating_duration_since(self.interval_start) < self.limits.review_interval {
            return None;
        }
        let idle = self.delivered_bytes < self.window_bytes / WINDOW_SHRINK_DIVISOR;
        self.start_interval(now);
        if !idle || self.window_bytes <= self.limits.min_bytes {
            return None;
        }
        let from = self.window_bytes;
        self.window_bytes = (from / 2).max(self.limits.min_bytes);
        Some(WindowChange::Shrink {
            from,
            to: self.window_bytes,
        })
    }

    /// `change` could not be applied: the window stays what it was.
    pub(crate) fn undo(&mut self, change: WindowChange) {
        let (WindowChange::Grow { from, to } | WindowChange::Shrink { from, to }) = change;
        debug_assert_eq!(to, self.window_bytes);
        self.window_bytes = from;
    }

    fn start_interval(&mut self, now: Instant) {
        self.interval_start = now;
        self.delivered_bytes = 0;
    }
}

/// What one connection has reserved from the budget for its window: the
/// window, plus credit given under a larger window and not yet read
/// (`debt_bytes`). QUIC cannot take credit back, so after a shrink the
/// peer may still send that much; quinn-proto pays the debt from the bytes
/// the connection reads, and so does this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WindowReservation {
    window_bytes: u64,
    debt_bytes: u64,
}

impl WindowReservation {
    pub(crate) fn new(window_bytes: u64) -> WindowReservation {
        WindowReservation {
            window_bytes,
            debt_bytes: 0,
        }
    }

    /// Bytes the reservation must hold: what the peer may have sent that
    /// the connection has not read.
    pub(crate) fn bytes(&self) -> u64 {
        self.window_bytes + self.debt_bytes
    }

    /// Applies `change`: the reservation's new size.
    pub(crate) fn apply(&mut self, change: WindowChange) -> u64 {
        match change {
            WindowChange::Grow { from, to } => {
                debug_assert_eq!(from, self.window_bytes);
                self.window_bytes = to;
            }
            WindowChange::Shrink { from, to } => {
                debug_assert_eq!(from, self.window_bytes);
                self.debt_bytes += from - to;
                self.window_bytes = to;
            }
        }
        self.bytes()
    }

    /// The connection read `bytes` from its streams: the bytes of the
    /// reservation that may be given back.
    pub(crate) fn on_read(&mut self, bytes: u64) -> u64 {
        let paid = bytes.min(self.debt_bytes);
        self.debt_bytes -= paid;
        paid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: WindowLimits = WindowLimits {
        min_bytes: 64,
        max_bytes: 1024,
        headroom_bytes: 1000,
        review_interval: Duration::from_secs(1),
    };
    /// Plenty of room in the budget.
    const ROOMY: u64 = 1 << 30;

    #[test]
    fn a_new_connection_starts_at_the_minimum() {
        let policy = WindowPolicy::new(LIMITS, Instant::now());
        assert_eq!(policy.window_bytes(), 64);
    }

    #[test]
    fn a_window_delivered_within_an_interval_doubles_up_to_the_maximum() {
        let start = Instant::now();
        let mut policy = WindowPolicy::new(LIMITS, start);
        assert_eq!(policy.on_delivered(start, 63, ROOMY), None);
        assert_eq!(
            policy.on_delivered(start, 1, ROOMY),
            Some(WindowChange::Grow { from: 64, to: 128 })
        );
        let mut now = start;
        let mut window = 128;
        while window < 1024 {
            now += Duration::from_millis(10);
            let change = policy.on_delivered(now, window, ROOMY);
            assert_eq!(
                change,
                Some(WindowChange::Grow {
                    from: window,
                    to: window * 2
                })
            );
            window *= 2;
        }
        assert_eq!(policy.on_delivered(now, 1 << 20, ROOMY), None);
        assert_eq!(policy.window_bytes(), 1024);
    }

    #[test]
    fn growth_leaves_room_for_a_largest_frame() {
        let now = Instant::now();
        let mut policy = WindowPolicy::new(LIMITS, now);
        // Growing by 64 needs 64 + 1000 free.
        assert_eq!(policy.on_delivered(now, 64, 1063), None);
        assert_eq!(policy.window_bytes(), 64);
        // Refused growth restarts the count: one window is not enough
        // until it is delivered again.
        assert_eq!(policy.on_delivered(now, 63, 1064), None);
        assert_eq!(
            policy.on_delivered(now, 1, 1064),
            Some(WindowChange::Grow { from: 64, to: 128 })
        );
    }

    #[test]
    fn a_window_delivered_slowly_does_not_grow() {
        let start = Instant::now();
        let mut policy = WindowPolicy::new(LIMITS, start);
        // 60 bytes a second: never a whole window within an interval.
        for second in 1..10 {
            let now = start + Duration::from_secs(second);
            assert_eq!(policy.on_delivered(now, 60, ROOMY), None);
        }
        assert_eq!(policy.window_bytes(), 64);
    }

    #[test]
    fn an_idle_connection_halves_its_window_each_interval_down_to_the_minimum() {
        let start = Instant::now();
        let mut policy = WindowPolicy::new(LIMITS, start);
        let mut now = start;
        for _ in 0..4 {
            policy.on_delivered(now, policy.window_bytes(), ROOMY);
        }
        assert_eq!(policy.window_bytes(), 1024);
        // Within the interval nothing changes.
        assert_eq!(policy.review(now + Duration::from_millis(999)), None);
        let mut expected = vec![(1024, 512), (512, 256), (256, 128), (128, 64)];
        expected.reverse();
        while let Some((from, to)) = expected.pop() {
            now += Duration::from_secs(1);
            assert_eq!(policy.review(now), Some(WindowChange::Shrink { from, to }));
        }
        now += Duration::from_secs(1);
        assert_eq!(policy.review(now), None);
        assert_eq!(policy.window_bytes(), 64);
    }

    #[test]
    fn a_connection_delivering_a_quarter_of_its_window_keeps_it() {
        let start = Instant::now();
        let mut policy = WindowPolicy::new(LIMITS, start);
        policy.on_delivered(start, 64, ROOMY);
        assert_eq!(policy.window_bytes(), 128);
        let now = start + Duration::from_millis(500);
        assert_eq!(policy.on_delivered(now, 32, ROOMY), None);
        assert_eq!(policy.review(start + Duration::from_millis(1500)), None);
        assert_eq!(policy.window_bytes(), 128);
    }

    #[test]
    fn a_reservation_keeps_credit_given_until_it_is_read() {
        let mut reservation = WindowReservation::new(64);
        assert_eq!(reservation.bytes(), 64);
        assert_eq!(
            reservation.apply(WindowChange::Grow { from: 64, to: 256 }),
            256
        );
        // Reads pay nothing back while there is no debt.
        assert_eq!(reservation.on_read(100), 0);
        // Shrinking keeps the credit already given.
        assert_eq!(
            reservation.apply(WindowChange::Shrink { from: 256, to: 64 }),
            256
        );
        assert_eq!(reservation.on_read(150), 150);
        assert_eq!(reservation.bytes(), 106);
        assert_eq!(reservation.on_read(100), 42);
        assert_eq!(reservation.bytes(), 64);
        assert_eq!(reservation.on_read(100), 0);
    }
}
