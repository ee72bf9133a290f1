//! [`FilerUrl`]: where a filer keeps its objects, as the `--filer` flag and
//! the control plane's join answer name it.
//!
//! - `file:///abs/dir`, or a plain path: a [`LocalFiler`](crate::LocalFiler)
//!   rooted at that directory.
//! - `s3://BUCKET` or `s3://BUCKET/PREFIX`: an `S3Filer` (crate `kelp-filer-s3`)
//!   keeping every object under `PREFIX/` in `BUCKET`.

use std::fmt;
use std::path::PathBuf;

use crate::FilerError;

/// Longest S3 key prefix accepted, in bytes: object paths (at most 1024
/// bytes themselves) still have room under it before S3's 1024-byte key
/// limit bites only the deepest ones.
pub const S3_PREFIX_BYTES_MAX: usize = 256;

/// A parsed filer location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilerUrl {
    /// A directory on this machine.
    Local(PathBuf),
    /// A bucket of an S3-compatible store, and the key prefix (no leading
    /// or trailing `/`; empty for the bucket's root).
    S3 { bucket: String, prefix: String },
}

impl FilerUrl {
    /// Parse `file:///dir`, `s3://bucket[/prefix]`, or a plain path.
    pub fn parse(location: &str) -> Result<FilerUrl, FilerError> {
        let bad = |reason: &str| FilerError::Config {
            location: location.to_owned(),
            reason: reason.to_owned(),
        };
        if let Some(rest) = location.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let prefix = prefix.trim_end_matches('/');
            if !valid_bucket(bucket) {
                return Err(bad(
                    "the bucket name must be 3 to 63 lowercase letters, digits, '.' or '-', \
                     starting and ending with a letter or digit",
                ));
            }
            if prefix.len() > S3_PREFIX_BYTES_MAX {
                return Err(bad("the key prefix is longer than 256 bytes"));
            }
            if prefix
                .split('/')
                .any(|c| !prefix.is_empty() && (c.is_empty() || c == "." || c == ".."))
            {
                return Err(bad(
                    "the key prefix has an empty, '.' or '..' component (e.g. '//')",
                ));
            }
            if prefix.chars().any(|c| c.is_control() || c == '\\') {
                return Err(bad("the key prefix has a control character or '\\'"));
            }
            return Ok(FilerUrl::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
            });
        }
        if let Some(path) = location.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(bad(
                    "a file URL names an absolute directory: file:///path/to/dir",
                ));
            }
            return Ok(FilerUrl::Local(PathBuf::from(path)));
        }
        if let Some((scheme, _)) = location.split_once("://") {
            return Err(bad(&format!(
                "unknown scheme {scheme:?}: use file:///dir or s3://bucket/prefix"
            )));
        }
        if location.is_empty() {
            return Err(bad("empty location"));
        }
        Ok(FilerUrl::Local(PathBuf::from(location)))
    }
}

impl fmt::Display for FilerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilerUrl::Local(dir) if dir.is_absolute() => write!(f, "file://{}", dir.display()),
            FilerUrl::Local(dir) => write!(f, "{}", dir.display()),
            FilerUrl::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            FilerUrl::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

/// S3's bucket naming rules (the DNS-compatible ones every store accepts).
fn valid_bucket(bucket: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-';
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (3..=63).contains(&bucket.len())
        && bucket.chars().all(ok_char)
        && ends_ok(bucket.chars().next())
        && ends_ok(bucket.chars().last())
        && !bucket.contains("..")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(bucket: &str, prefix: &str) -> FilerUrl {
        FilerUrl::S3 {
            bucket: bucket.into(),
            prefix: prefix.into(),
        }
    }

    #[test]
    fn parses_each_form_and_prints_it_back() {
        let cases = [
            ("s3://kelp-data", s3("kelp-data", ""), "s3://kelp-data"),
            ("s3://kelp-data/", s3("kelp-data", ""), "s3://kelp-data"),
            (
                "s3://kelp-data/prod/eu-1/",
                s3("kelp-data", "prod/eu-1"),
                "s3://kelp-data/prod/eu-1",
            ),
            (
                "file:///var/lib/kelp/filer",
                FilerUrl::Local("/var/lib/kelp/filer".into()),
                "file:///var/lib/kelp/filer",
            ),
            (
                "/var/lib/kelp/filer",
                FilerUrl::Local("/var/lib/kelp/filer".into()),
                "file:///var/lib/kelp/filer",
            ),
            (
                "data/filer",
                FilerUrl::Local("data/filer".into()),
                "data/filer",
            ),
        ];
        for (text, want, shown) in cases {
            let got = FilerUrl::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string(), shown, "{text}");
        }
    }

    #[test]
    fn rejects_bad_locations_with_a_reason() {
        for (text, reason) in [
            ("s3://", "bucket name"),
            ("s3://ab", "bucket name"),
            ("s3://Upper", "bucket name"),
            ("s3://-dash", "bucket name"),
            ("s3://a..b", "bucket name"),
            ("s3://bucket/a//b", "empty"),
            ("s3://bucket/a/../b", "'..'"),
            ("file://relative", "absolute"),
            ("gs://bucket", "unknown scheme"),
            ("", "empty"),
        ] {
            match FilerUrl::parse(text) {
                Err(FilerError::Config { reason: got, .. }) => {
                    assert!(got.contains(reason), "{text}: {got}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        let long = format!("s3://bucket/{}", "p".repeat(S3_PREFIX_BYTES_MAX + 1));
        assert!(FilerUrl::parse(&long).is_err());
    }
}
