//! [`Rate`] and [`RateWindows`]: traffic of a segment, as reported and as
//! averaged over the scaling policy's windows.

/// A traffic rate, as a broker reports it for one segment.
///
/// In JSON (a policy's `target`) either field may be left out: it is 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Rate {
    /// Payload bytes per second.
    pub bytes_per_s: u64,
    /// Records per second.
    pub records_per_s: u64,
}

/// How many averaging windows a [`RateWindows`] keeps (see
/// [`ScalingPolicy::windows_ms`](crate::ScalingPolicy::windows_ms)).
pub const RATE_WINDOWS: usize = 4;

/// A segment's rates averaged over [`RATE_WINDOWS`] windows.
///
/// Each window is an exponentially weighted moving average whose time
/// constant is the window's length: after a report covering `dt` ms the
/// average moves `1 - e^(-dt/window)` of the way to the reported rate. So a
/// window of 2 minutes mostly reflects the last 2 minutes, in constant
/// memory, however often brokers report (Pravega keeps its 2/5/10/20-minute
/// rates the same way).
#[derive(Debug, Clone, PartialEq)]
pub struct RateWindows {
    bytes_per_s: [f64; RATE_WINDOWS],
    records_per_s: [f64; RATE_WINDOWS],
    /// Time of the last report folded in (or of the segment's creation).
    updated_ms: u64,
    /// Since when the averages reflect real reports (for a successor: its
    /// predecessors' start, since it inherits their averages).
    since_ms: u64,
}

impl RateWindows {
    /// Averages that start at `seed` (a successor inherits its share of its
    /// predecessors' traffic) as of `now_ms`.
    pub fn new(now_ms: u64, seed: [Rate; RATE_WINDOWS]) -> RateWindows {
        RateWindows {
            bytes_per_s: seed.map(|r| r.bytes_per_s as f64),
            records_per_s: seed.map(|r| r.records_per_s as f64),
            updated_ms: now_ms,
            since_ms: now_ms,
        }
    }

    /// The same averages, known since `since_ms` (at most their current
    /// time) rather than since they were made.
    pub fn known_since(mut self, since_ms: u64) -> RateWindows {
        self.since_ms = since_ms.min(self.updated_ms);
        self
    }

    /// Since when the averages reflect reports: a decision that needs a
    /// window's worth of history waits until `now - since_ms` covers it.
    pub fn since_ms(&self) -> u64 {
        self.since_ms
    }

    /// Averages that start at zero as of `now_ms`.
    pub fn zero(now_ms: u64) -> RateWindows {
        RateWindows::new(now_ms, [Rate::default(); RATE_WINDOWS])
    }

    /// Fold in `rate`, measured up to `now_ms`, with window lengths
    /// `windows_ms` (each at least 1). A report not newer than the last one
    /// is ignored (reports can arrive out of order); returns whether it was
    /// used.
    pub fn record(&mut self, now_ms: u64, rate: Rate, windows_ms: &[u64; RATE_WINDOWS]) -> bool {
        if now_ms <= self.updated_ms {
            return false;
        }
        let dt = (now_ms - self.updated_ms) as f64;
        for (i, window_ms) in windows_ms.iter().enumerate() {
            let weight = 1.0 - (-dt / (*window_ms).max(1) as f64).exp();
            self.bytes_per_s[i] += weight * (rate.bytes_per_s as f64 - self.bytes_per_s[i]);
            self.records_per_s[i] += weight * (rate.records_per_s as f64 - self.records_per_s[i]);
        }
        self.updated_ms = now_ms;
        true
    }

    /// The average over window `i` (0 = shortest), rounded down.
    ///
    /// # Panics
    /// If `i >= RATE_WINDOWS`.
    pub fn window(&self, i: usize) -> Rate {
        Rate {
            bytes_per_s: self.bytes_per_s[i] as u64,
            records_per_s: self.records_per_s[i] as u64,
        }
    }

    /// Every window, shortest first.
    pub fn windows(&self) -> [Rate; RATE_WINDOWS] {
        std::array::from_fn(|i| self.window(i))
    }

    /// When the last report was folded in.
    pub fn updated_ms(&self) -> u64 {
        self.updated_ms
    }

    /// These averages scaled by `numerator / denominator` (a split piece's
    /// share of its parent), as a seed for [`RateWindows::new`].
    pub fn share(&self, numerator: u64, denominator: u64) -> [Rate; RATE_WINDOWS] {
        let scale = |r: u64| {
            u64::try_from(u128::from(r) * u128::from(numerator) / u128::from(denominator.max(1)))
                .unwrap_or(u64::MAX)
        };
        self.windows().map(|r| Rate {
            bytes_per_s: scale(r.bytes_per_s),
            records_per_s: scale(r.records_per_s),
        })
    }
}

/// The element-wise sum of two seeds (a merge's successor inherits both).
pub fn sum_windows(a: [Rate; RATE_WINDOWS], b: [Rate; RATE_WINDOWS]) -> [Rate; RATE_WINDOWS] {
    std::array::from_fn(|i| Rate {
        bytes_per_s: a[i].bytes_per_s.saturating_add(b[i].bytes_per_s),
        records_per_s: a[i].records_per_s.saturating_add(b[i].records_per_s),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOWS: [u64; RATE_WINDOWS] = [1_000, 10_000, 100_000, 1_000_000];

    fn rate(bytes_per_s: u64) -> Rate {
        Rate {
            bytes_per_s,
            records_per_s: bytes_per_s / 10,
        }
    }

    #[test]
    fn short_windows_follow_faster_than_long_ones() {
        let mut windows = RateWindows::zero(0);
        for t in 1..=10 {
            assert!(windows.record(t * 1_000, rate(1_000), &WINDOWS));
        }
        let w = windows.windows();
        // After 10 s: the 1 s window is within e^-10 of the rate, the 10 s
        // one at 1 - e^-1, the longer ones far below.
        assert_eq!(w[0].bytes_per_s, 999);
        assert_eq!(w[1].bytes_per_s, 632);
        assert!(w[2].bytes_per_s < w[1].bytes_per_s);
        assert!(w[3].bytes_per_s < w[2].bytes_per_s);
        assert!(w[3].bytes_per_s > 0);
        assert_eq!(w[0].records_per_s, 99);
    }

    #[test]
    fn the_same_time_in_one_report_or_many_gives_the_same_average() {
        let mut once = RateWindows::zero(0);
        once.record(10_000, rate(500), &WINDOWS);
        let mut often = RateWindows::zero(0);
        for t in 1..=100 {
            often.record(t * 100, rate(500), &WINDOWS);
        }
        for i in 0..RATE_WINDOWS {
            let (a, b) = (once.window(i).bytes_per_s, often.window(i).bytes_per_s);
            assert!(a.abs_diff(b) <= 1, "window {i}: {a} vs {b}");
        }
    }

    #[test]
    fn stale_reports_are_ignored() {
        let mut windows = RateWindows::zero(5_000);
        assert!(!windows.record(5_000, rate(9), &WINDOWS));
        assert!(!windows.record(4_000, rate(9), &WINDOWS));
        assert_eq!(windows.window(0), Rate::default());
        assert!(windows.record(6_000, rate(9), &WINDOWS));
        assert_eq!(windows.updated_ms(), 6_000);
        assert_eq!(windows.since_ms(), 5_000);
        assert_eq!(windows.clone().known_since(100).since_ms(), 100);
        assert_eq!(windows.known_since(9_000).since_ms(), 6_000);
    }

    #[test]
    fn seeds_shares_and_sums() {
        let windows = RateWindows::new(0, [rate(1_000), rate(900), rate(30), rate(0)]);
        assert_eq!(windows.window(1), rate(900));
        let third = windows.share(1, 3);
        assert_eq!(third[0].bytes_per_s, 333);
        assert_eq!(third[1].records_per_s, 30);
        let sum = sum_windows(third, third);
        assert_eq!(sum[0].bytes_per_s, 666);
        assert_eq!(windows.share(1, 0)[0].bytes_per_s, 1_000);
    }
}
