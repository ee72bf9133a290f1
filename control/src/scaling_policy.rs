//! [`ScalingPolicy`]: when a topic's segments split and merge by themselves.
//!
//! The rules are Pravega's auto-scaler's, with every number configurable:
//! a segment splits when its rate over window 0 is above
//! [`SPLIT_FACTORS`]`[0]` times the target, or over window 1 above
//! `SPLIT_FACTORS[1]` times, or over window 2 above `SPLIT_FACTORS[2]` times;
//! it merges with a neighbour when its rates over windows 0, 1 and 2 are all
//! under the target and over window 3 under [`MERGE_FACTOR_LONGEST`] of it
//! (and the neighbour's are too). Nothing scales a segment younger than
//! the cooldown. Pravega's windows are 2, 5, 10 and 20 minutes and its
//! cooldown 10 minutes; they are the defaults here.

use crate::rate::{Rate, RateWindows, RATE_WINDOWS};
use crate::SEGMENTS_PER_TOPIC_MAX;

/// Split when window `i`'s rate is over `SPLIT_FACTORS[i]` times the target
/// (windows 0, 1, 2).
pub const SPLIT_FACTORS: [f64; 3] = [5.0, 2.0, 1.0];

/// Merge only when window 3's rate is under this share of the target (and
/// windows 0-2 under the target itself).
pub const MERGE_FACTOR_LONGEST: f64 = 0.5;

/// Why a [`ScalingPolicy`] cannot be used: its own fields
/// ([`ScalingPolicy::validate`]), or bounds that do not admit the topic it
/// is set on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A window of 0 ms.
    #[error("windows_ms {windows_ms:?}: each must be >= 1")]
    ZeroWindow {
        /// The windows as given.
        windows_ms: [u64; RATE_WINDOWS],
    },
    /// Segment bounds outside `1 <= min <= max <= limit`.
    #[error("segment bounds {min}..={max}: need 1 <= min <= max <= {limit}")]
    SegmentBounds {
        /// `segments_min` as given.
        min: u32,
        /// `segments_max` as given.
        max: u32,
        /// [`SEGMENTS_PER_TOPIC_MAX`].
        limit: u32,
    },
    /// A split into fewer than 2 pieces.
    #[error("split_pieces_max {split_pieces_max}: must be >= 2")]
    SplitPieces {
        /// `split_pieces_max` as given.
        split_pieces_max: u32,
    },
    /// A valid policy whose bounds do not admit the topic's open segments.
    #[error("the topic has {open} open segments, outside {min}..={max}")]
    OpenSegmentsOutside {
        /// The topic's open segments.
        open: u32,
        /// `segments_min`.
        min: u32,
        /// `segments_max`.
        max: u32,
    },
}

/// A topic's split/merge policy. Persisted in the topic's JSON as `policy`;
/// every field has a default, so a partial object is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ScalingPolicy {
    /// The rate one segment should carry. A zero field is not considered;
    /// both zero turns automatic scaling off (manual split and merge still
    /// obey the bounds below).
    pub target: Rate,
    /// The four averaging windows, shortest first, in ms (see the module
    /// docs for what each one decides). Each at least 1.
    pub windows_ms: [u64; RATE_WINDOWS],
    /// No automatic split or merge of a segment within this many ms of its
    /// creation.
    pub cooldown_ms: u64,
    /// Fewest open segments the topic may have (at least 1).
    pub segments_min: u32,
    /// Most open segments the topic may have.
    pub segments_max: u32,
    /// Most pieces one automatic split cuts a segment into (at least 2).
    pub split_pieces_max: u32,
}

impl Default for ScalingPolicy {
    /// Automatic scaling off, Pravega's windows and cooldown, bounds
    /// 1..=[`SEGMENTS_PER_TOPIC_MAX`], splits in two.
    fn default() -> ScalingPolicy {
        ScalingPolicy {
            target: Rate::default(),
            windows_ms: [120_000, 300_000, 600_000, 1_200_000],
            cooldown_ms: 600_000,
            segments_min: 1,
            segments_max: SEGMENTS_PER_TOPIC_MAX,
            split_pieces_max: 2,
        }
    }
}

impl ScalingPolicy {
    /// True if the policy splits and merges by itself.
    pub fn is_automatic(&self) -> bool {
        self.target.bytes_per_s > 0 || self.target.records_per_s > 0
    }

    /// Check the fields: windows at least 1 ms, `1 <= segments_min <=
    /// segments_max <= SEGMENTS_PER_TOPIC_MAX`, `split_pieces_max >= 2`.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.windows_ms.contains(&0) {
            return Err(PolicyError::ZeroWindow {
                windows_ms: self.windows_ms,
            });
        }
        if self.segments_min == 0
            || self.segments_min > self.segments_max
            || self.segments_max > SEGMENTS_PER_TOPIC_MAX
        {
            return Err(PolicyError::SegmentBounds {
                min: self.segments_min,
                max: self.segments_max,
                limit: SEGMENTS_PER_TOPIC_MAX,
            });
        }
        if self.split_pieces_max < 2 {
            return Err(PolicyError::SplitPieces {
                split_pieces_max: self.split_pieces_max,
            });
        }
        Ok(())
    }

    /// The rate over each window as a multiple of the target: the larger of
    /// the bytes and records ratios, ignoring a zero target field. All zero
    /// when scaling is not automatic.
    pub fn load_factors(&self, rates: &RateWindows) -> [f64; RATE_WINDOWS] {
        std::array::from_fn(|i| {
            let rate = rates.window(i);
            let ratio = |value: u64, target: u64| {
                if target == 0 {
                    0.0
                } else {
                    value as f64 / target as f64
                }
            };
            ratio(rate.bytes_per_s, self.target.bytes_per_s)
                .max(ratio(rate.records_per_s, self.target.records_per_s))
        })
    }

    /// Into how many pieces a segment with these load factors should split,
    /// or `None` if it should not: `ceil` of the largest factor that
    /// crossed its threshold, at least 2, at most `split_pieces_max`.
    pub fn split_pieces(&self, factors: &[f64; RATE_WINDOWS]) -> Option<u32> {
        let triggered = SPLIT_FACTORS
            .iter()
            .zip(factors)
            .filter(|(threshold, factor)| *factor > *threshold)
            .map(|(_, factor)| *factor)
            .fold(None, |max: Option<f64>, f| {
                Some(max.map_or(f, |m| m.max(f)))
            })?;
        let wanted = triggered.ceil().min(f64::from(self.split_pieces_max)) as u32;
        Some(wanted.clamp(2, self.split_pieces_max))
    }

    /// True if a segment with these load factors is cold enough to merge.
    pub fn wants_merge(&self, factors: &[f64; RATE_WINDOWS]) -> bool {
        self.is_automatic()
            && factors[..3].iter().all(|f| *f < 1.0)
            && factors[3] < MERGE_FACTOR_LONGEST
    }

    /// True if a segment created at `created_ms` is past the cooldown.
    pub fn cooled_down(&self, now_ms: u64, created_ms: u64) -> bool {
        now_ms.saturating_sub(created_ms) >= self.cooldown_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> ScalingPolicy {
        ScalingPolicy {
            target: Rate {
                bytes_per_s: 1_000,
                records_per_s: 100,
            },
            split_pieces_max: 4,
            ..ScalingPolicy::default()
        }
    }

    fn rates(bytes: [u64; 4], records: [u64; 4]) -> RateWindows {
        RateWindows::new(
            0,
            std::array::from_fn(|i| Rate {
                bytes_per_s: bytes[i],
                records_per_s: records[i],
            }),
        )
    }

    #[test]
    fn defaults_are_pravegas_and_off() {
        let p = ScalingPolicy::default();
        assert!(!p.is_automatic());
        assert_eq!(p.windows_ms, [120_000, 300_000, 600_000, 1_200_000]);
        assert_eq!(p.cooldown_ms, 600_000);
        assert_eq!(p.validate(), Ok(()));
        assert_eq!(p.load_factors(&rates([9; 4], [9; 4])), [0.0; 4]);
        assert!(!p.wants_merge(&[0.0; 4]));
    }

    #[test]
    fn factors_take_the_larger_ratio() {
        let p = policy();
        let f = p.load_factors(&rates([2_000, 500, 0, 0], [50, 150, 0, 0]));
        assert_eq!(f, [2.0, 1.5, 0.0, 0.0]);
        let bytes_only = ScalingPolicy {
            target: Rate {
                bytes_per_s: 1_000,
                records_per_s: 0,
            },
            ..p
        };
        assert_eq!(
            bytes_only.load_factors(&rates([2_000, 500, 0, 0], [50, 150, 0, 0]))[1],
            0.5
        );
    }

    #[test]
    fn split_thresholds_per_window() {
        let p = policy();
        assert_eq!(p.split_pieces(&[5.0, 2.0, 1.0, 9.0]), None, "at, not over");
        assert_eq!(p.split_pieces(&[5.1, 0.0, 0.0, 0.0]), Some(4), "capped");
        assert_eq!(p.split_pieces(&[0.0, 2.5, 0.0, 0.0]), Some(3));
        assert_eq!(p.split_pieces(&[0.0, 0.0, 1.2, 0.0]), Some(2), "at least 2");
        assert_eq!(
            p.split_pieces(&[4.0, 1.0, 1.5, 0.0]),
            Some(2),
            "only triggered windows count"
        );
        assert_eq!(p.split_pieces(&[f64::MAX, 0.0, 0.0, 0.0]), Some(4));
    }

    #[test]
    fn merge_needs_every_window_cold() {
        let p = policy();
        assert!(p.wants_merge(&[0.9, 0.9, 0.9, 0.4]));
        assert!(!p.wants_merge(&[1.0, 0.9, 0.9, 0.4]));
        assert!(!p.wants_merge(&[0.9, 0.9, 1.0, 0.4]));
        assert!(!p.wants_merge(&[0.9, 0.9, 0.9, 0.5]));
    }

    #[test]
    fn cooldown_and_validation() {
        let p = ScalingPolicy {
            cooldown_ms: 10,
            ..policy()
        };
        assert!(!p.cooled_down(109, 100));
        assert!(p.cooled_down(110, 100));
        assert!(!p.cooled_down(5, 100), "a clock that went back waits");
        let cases = [
            (
                ScalingPolicy {
                    windows_ms: [1, 0, 1, 1],
                    ..p
                },
                PolicyError::ZeroWindow {
                    windows_ms: [1, 0, 1, 1],
                },
            ),
            (
                ScalingPolicy {
                    segments_min: 0,
                    ..p
                },
                PolicyError::SegmentBounds {
                    min: 0,
                    max: SEGMENTS_PER_TOPIC_MAX,
                    limit: SEGMENTS_PER_TOPIC_MAX,
                },
            ),
            (
                ScalingPolicy {
                    segments_min: 5,
                    segments_max: 4,
                    ..p
                },
                PolicyError::SegmentBounds {
                    min: 5,
                    max: 4,
                    limit: SEGMENTS_PER_TOPIC_MAX,
                },
            ),
            (
                ScalingPolicy {
                    segments_max: SEGMENTS_PER_TOPIC_MAX + 1,
                    ..p
                },
                PolicyError::SegmentBounds {
                    min: 1,
                    max: SEGMENTS_PER_TOPIC_MAX + 1,
                    limit: SEGMENTS_PER_TOPIC_MAX,
                },
            ),
            (
                ScalingPolicy {
                    split_pieces_max: 1,
                    ..p
                },
                PolicyError::SplitPieces {
                    split_pieces_max: 1,
                },
            ),
        ];
        for (bad, expected) in cases {
            assert_eq!(bad.validate(), Err(expected), "{bad:?}");
        }
    }

    #[test]
    fn policy_errors_say_the_numbers() {
        let text = |e: PolicyError| e.to_string();
        assert_eq!(
            text(PolicyError::ZeroWindow {
                windows_ms: [1, 0, 1, 1]
            }),
            "windows_ms [1, 0, 1, 1]: each must be >= 1"
        );
        assert_eq!(
            text(PolicyError::SegmentBounds {
                min: 5,
                max: 4,
                limit: 1024
            }),
            "segment bounds 5..=4: need 1 <= min <= max <= 1024"
        );
        assert_eq!(
            text(PolicyError::SplitPieces {
                split_pieces_max: 1
            }),
            "split_pieces_max 1: must be >= 2"
        );
        assert_eq!(
            text(PolicyError::OpenSegmentsOutside {
                open: 3,
                min: 1,
                max: 2
            }),
            "the topic has 3 open segments, outside 1..=2"
        );
    }

    #[test]
    fn partial_json_takes_defaults() {
        let p: ScalingPolicy =
            serde_json::from_str(r#"{"target": {"bytes_per_s": 10}, "segments_max": 9}"#)
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.target.bytes_per_s, 10);
        assert_eq!(p.target.records_per_s, 0);
        assert_eq!(p.segments_max, 9);
        assert_eq!(p.cooldown_ms, 600_000);
        assert!(serde_json::from_str::<ScalingPolicy>(r#"{"windows_ms": [1, 2]}"#).is_err());
        assert!(p.is_automatic());
    }
}
