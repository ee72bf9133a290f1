//! [`ObjectPath`]: the validated key of an object in a filer.
//!
//! Validation is strict enough that every valid path is also a safe relative
//! filesystem path (no `..`, no absolute paths, no NUL, no `\`), so the local
//! backend can join it onto its root without escaping it.

use crate::FilerError;

/// Longest object path accepted, in bytes. S3 keys are limited to 1024 bytes;
/// matching that keeps every path portable to an object-store backend.
pub const OBJECT_PATH_BYTES_MAX: usize = 1024;

/// A validated relative object path: `/`-separated components, each non-empty,
/// not `.` or `..`, without NUL or `\`, no leading or trailing `/`, at most
/// [`OBJECT_PATH_BYTES_MAX`] bytes.
///
/// Components that look like [`LocalFiler`](crate::LocalFiler)'s in-flight
/// temp files (`.<name>.tmp-<digits>-<digits>`) are rejected too, so that
/// `list` can skip those files without ever hiding a real object.
///
/// Ordering is byte-wise on the string, which is the order `list` returns.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectPath(String);

impl ObjectPath {
    /// Validate `path` and wrap it.
    pub fn new(path: impl Into<String>) -> Result<ObjectPath, FilerError> {
        let path = path.into();
        match validate(&path) {
            Ok(()) => Ok(ObjectPath(path)),
            Err(reason) => Err(FilerError::InvalidPath { path, reason }),
        }
    }

    /// The path as a string, e.g. `topics/ns/name/topic.json`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// This path with one more component appended: `self/component`.
    /// `component` must not contain `/`.
    pub fn join(&self, component: &str) -> Result<ObjectPath, FilerError> {
        let joined = format!("{}/{}", self.0, component);
        if component.contains('/') {
            return Err(FilerError::InvalidPath {
                path: joined,
                reason: "joined component contains '/'",
            });
        }
        ObjectPath::new(joined)
    }

    /// The path's components, in order.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
}

impl std::fmt::Display for ObjectPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ObjectPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

fn validate(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("path is empty");
    }
    if path.len() > OBJECT_PATH_BYTES_MAX {
        return Err("path is longer than OBJECT_PATH_BYTES_MAX (1024) bytes");
    }
    if path.contains('\0') {
        return Err("path contains NUL");
    }
    if path.contains('\\') {
        return Err("path contains '\\'");
    }
    if path.starts_with('/') {
        return Err("path starts with '/'");
    }
    if path.ends_with('/') {
        return Err("path ends with '/'");
    }
    for component in path.split('/') {
        match component {
            "" => return Err("path has an empty component ('//')"),
            "." => return Err("path has a '.' component"),
            ".." => return Err("path has a '..' component"),
            _ if is_temp_name(component) => {
                return Err("path component is reserved for filer temp files")
            }
            _ => {}
        }
    }
    Ok(())
}

/// Marker between the object's name and the unique suffix of a temp file.
pub(crate) const TEMP_MARKER: &str = ".tmp-";

/// True for names of the form `.<name>.tmp-<digits>-<digits>`, the shape of
/// [`LocalFiler`](crate::LocalFiler)'s in-flight temp files.
pub(crate) fn is_temp_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.') else {
        return false;
    };
    let Some(marker_at) = rest.rfind(TEMP_MARKER) else {
        return false;
    };
    let suffix = &rest[marker_at + TEMP_MARKER.len()..];
    let Some((pid, counter)) = suffix.split_once('-') else {
        return false;
    };
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    all_digits(pid) && all_digits(counter)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn reason_of(path: &str) -> &'static str {
        match ObjectPath::new(path) {
            Err(FilerError::InvalidPath { reason, .. }) => reason,
            other => panic!("{path:?} should be invalid, got {other:?}"),
        }
    }

    #[test]
    fn accepts_ordinary_paths() {
        for path in [
            "a",
            "a/b",
            "topics/ns/name/topic.json",
            ".hidden",
            "a..b",
            "x.tmp-1-2",
        ] {
            assert_eq!(ObjectPath::new(path).unwrap().as_str(), path);
        }
        let longest = "a".repeat(OBJECT_PATH_BYTES_MAX);
        assert!(ObjectPath::new(longest).is_ok());
    }

    #[test]
    fn rejects_every_invalid_shape() {
        assert_eq!(reason_of(""), "path is empty");
        assert!(reason_of("..").contains("'..'"));
        assert!(reason_of("a/../b").contains("'..'"));
        assert!(reason_of(".").contains("'.'"));
        assert!(reason_of("a/./b").contains("'.'"));
        assert!(reason_of("a//b").contains("empty component"));
        assert!(reason_of("/a").contains("starts with '/'"));
        assert!(reason_of("a/").contains("ends with '/'"));
        assert!(reason_of("a\0b").contains("NUL"));
        assert!(reason_of("a\\b").contains("'\\'"));
        assert!(reason_of(&"a".repeat(OBJECT_PATH_BYTES_MAX + 1)).contains("longer"));
        assert!(reason_of("a/.b.tmp-12-3").contains("temp"));
    }

    #[test]
    fn join_validates_component() {
        let base = ObjectPath::new("topics").unwrap();
        assert_eq!(base.join("ns").unwrap().as_str(), "topics/ns");
        assert!(base.join("a/b").is_err());
        assert!(base.join("..").is_err());
        assert!(base.join("").is_err());
        let near_max = ObjectPath::new("a".repeat(OBJECT_PATH_BYTES_MAX - 2)).unwrap();
        assert!(near_max.join("b").is_ok());
        assert!(near_max.join("bc").is_err());
    }

    #[test]
    fn temp_name_shape() {
        assert!(is_temp_name(".topic.json.tmp-123-0"));
        assert!(is_temp_name("..tmp-1-1"));
        assert!(!is_temp_name("topic.json.tmp-123-0"));
        assert!(!is_temp_name(".topic.json.tmp-123"));
        assert!(!is_temp_name(".topic.json.tmp-12a-0"));
        assert!(!is_temp_name(".topic.json.tmp--0"));
    }

    #[test]
    fn display_and_order() {
        let a = ObjectPath::new("a/b").unwrap();
        let b = ObjectPath::new("a/c").unwrap();
        assert_eq!(a.to_string(), "a/b");
        assert!(a < b);
        assert_eq!(a.components().collect::<Vec<_>>(), ["a", "b"]);
    }
}
