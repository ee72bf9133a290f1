//! A range of Kafka API versions, as the schema files write it: `"3+"`,
//! `"8-10"`, `"1"` or `"none"`.
//!
//! Owns: parsing and checking that text, and the set arithmetic the
//! generator needs (does a field's range cover the range its code runs in,
//! and if not, the shortest Rust condition that tells the two apart).

use std::fmt;

/// An inclusive range of versions; `None` is the empty range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions(Option<(i16, i16)>);

/// Why a version range's text was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionsError {
    /// Not `N+`, `N-M`, `N` or `none`.
    Syntax,
    /// `N-M` with `M < N`.
    Backwards,
}

impl fmt::Display for VersionsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VersionsError::Syntax => {
                "expected \"N+\", \"N-M\", \"N\" or \"none\", N a version 0..=32767"
            }
            VersionsError::Backwards => "the last version is below the first",
        })
    }
}

impl Versions {
    /// No version.
    pub const NONE: Versions = Versions(None);
    /// Every version from 0 up.
    pub const ALL: Versions = Versions(Some((0, i16::MAX)));

    /// `first..=last`, empty when `last < first`.
    pub fn new(first: i16, last: i16) -> Versions {
        if last < first {
            Versions::NONE
        } else {
            Versions(Some((first, last)))
        }
    }

    /// Parses `N+`, `N-M`, `N` or `none`.
    pub fn parse(text: &str) -> Result<Versions, VersionsError> {
        let number = |s: &str| -> Result<i16, VersionsError> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(VersionsError::Syntax);
            }
            s.parse().map_err(|_| VersionsError::Syntax)
        };
        if text == "none" {
            return Ok(Versions::NONE);
        }
        if let Some(first) = text.strip_suffix('+') {
            return Ok(Versions::new(number(first)?, i16::MAX));
        }
        if let Some((first, last)) = text.split_once('-') {
            let (first, last) = (number(first)?, number(last)?);
            if last < first {
                return Err(VersionsError::Backwards);
            }
            return Ok(Versions::new(first, last));
        }
        let only = number(text)?;
        Ok(Versions::new(only, only))
    }

    /// Whether the range is empty.
    pub fn is_empty(self) -> bool {
        self.0.is_none()
    }

    /// The first version, if any.
    pub fn first(self) -> Option<i16> {
        self.0.map(|(first, _)| first)
    }

    /// The last version, if any (`i16::MAX` for an open range).
    pub fn last(self) -> Option<i16> {
        self.0.map(|(_, last)| last)
    }

    /// Whether the range has no upper end (`N+`).
    pub fn is_open(self) -> bool {
        self.last() == Some(i16::MAX)
    }

    /// The versions in both.
    pub fn intersect(self, other: Versions) -> Versions {
        match (self.0, other.0) {
            (Some((a, b)), Some((c, d))) => Versions::new(a.max(c), b.min(d)),
            _ => Versions::NONE,
        }
    }

    /// The smallest range holding both.
    pub fn hull(self, other: Versions) -> Versions {
        match (self.0, other.0) {
            (Some((a, b)), Some((c, d))) => Versions::new(a.min(c), b.max(d)),
            (Some(_), None) => self,
            (None, _) => other,
        }
    }

    /// Whether every version of `self` is in `other`.
    pub fn is_within(self, other: Versions) -> bool {
        self.intersect(other) == self
    }

    /// Whether the two have no version in common.
    pub fn is_disjoint(self, other: Versions) -> bool {
        self.intersect(other).is_empty()
    }

    /// A Rust condition on `version` that holds for the versions of `self`
    /// among those of `context` (where the code runs), or `None` when it
    /// holds for all of them. Bounds that `context` already implies are
    /// left out.
    pub fn condition(self, context: Versions) -> Option<String> {
        let Some((first, last)) = self.intersect(context).0 else {
            return Some("false".to_owned());
        };
        let (context_first, context_last) = context.0?;
        match (first > context_first, last < context_last) {
            (false, false) => None,
            (true, false) => Some(format!("version >= {first}")),
            (false, true) => Some(format!("version <= {last}")),
            (true, true) if first == last => Some(format!("version == {first}")),
            (true, true) => Some(format!("({first}..={last}).contains(&version)")),
        }
    }
}

impl fmt::Display for Versions {
    /// As the schema writes it, with a `v`: `v3+`, `v8-v10`, `v1`, `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("none"),
            Some((first, i16::MAX)) => write!(f, "v{first}+"),
            Some((first, last)) if first == last => write!(f, "v{first}"),
            Some((first, last)) => write!(f, "v{first}-v{last}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_four_forms() {
        assert_eq!(Versions::parse("3+"), Ok(Versions::new(3, i16::MAX)));
        assert_eq!(Versions::parse("8-10"), Ok(Versions::new(8, 10)));
        assert_eq!(Versions::parse("1"), Ok(Versions::new(1, 1)));
        assert_eq!(Versions::parse("none"), Ok(Versions::NONE));
        assert_eq!(Versions::parse("0+"), Ok(Versions::ALL));
    }

    #[test]
    fn refuses_what_is_not_a_range() {
        for bad in ["", "+", "-1+", "3-", "a", "3 +", "1-2-3", "40000", "v3+"] {
            assert_eq!(Versions::parse(bad), Err(VersionsError::Syntax), "{bad:?}");
        }
        assert_eq!(Versions::parse("9-3"), Err(VersionsError::Backwards));
    }

    #[test]
    fn set_arithmetic() {
        let v3_plus = Versions::new(3, i16::MAX);
        let v0_5 = Versions::new(0, 5);
        assert_eq!(v3_plus.intersect(v0_5), Versions::new(3, 5));
        assert_eq!(v3_plus.hull(v0_5), Versions::ALL);
        assert!(Versions::new(4, 6).is_within(v3_plus));
        assert!(!v0_5.is_within(v3_plus));
        assert!(Versions::new(0, 2).is_disjoint(v3_plus));
        assert!(Versions::NONE.is_within(v0_5));
        assert_eq!(Versions::NONE.hull(v0_5), v0_5);
    }

    #[test]
    fn conditions_leave_out_what_the_context_implies() {
        let (all, v3_plus) = (Versions::ALL, Versions::new(3, i16::MAX));
        let cases = [
            (v3_plus, all, Some("version >= 3")),
            (Versions::new(0, 3), all, Some("version <= 3")),
            (Versions::new(1, 1), all, Some("version == 1")),
            (
                Versions::new(8, 10),
                all,
                Some("(8..=10).contains(&version)"),
            ),
            (all, all, None),
            // Inside an array present from v3, a field from v3 needs no test.
            (v3_plus, v3_plus, None),
            (Versions::new(0, 4), v3_plus, Some("version <= 4")),
            (Versions::new(0, 2), v3_plus, Some("false")),
        ];
        for (versions, context, expected) in cases {
            assert_eq!(
                versions.condition(context).as_deref(),
                expected,
                "{versions} in {context}"
            );
        }
    }

    #[test]
    fn displays_as_the_docs_write_it() {
        assert_eq!(Versions::new(3, i16::MAX).to_string(), "v3+");
        assert_eq!(Versions::new(8, 10).to_string(), "v8-v10");
        assert_eq!(Versions::new(1, 1).to_string(), "v1");
        assert_eq!(Versions::NONE.to_string(), "none");
    }
}
