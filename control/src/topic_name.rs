//! [`TopicName`]: a validated `namespace/name`.

use crate::ControlError;

/// Longest topic name accepted, in bytes, counting the `/`. Kafka's limit,
/// so every kelp topic can be exposed through a Kafka gateway.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;

/// A topic's name: `namespace/name`, exactly one `/`, each part one or more
/// bytes of `[A-Za-z0-9._-]` and neither part `.` or `..`, at most
/// [`TOPIC_NAME_BYTES_MAX`] bytes in all.
///
/// The character set is a subset of what object paths, file names, URLs and
/// Kafka accept, so a name needs no escaping anywhere it goes. Ordered by
/// namespace, then name. Serialized as the `namespace/name` string;
/// deserializing validates.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicName {
    namespace: String,
    name: String,
}

impl TopicName {
    /// Parse and validate `namespace/name`.
    pub fn parse(text: &str) -> Result<TopicName, ControlError> {
        let invalid = |why: String| ControlError::InvalidTopicName(format!("{text:?}: {why}"));
        if text.contains('\0') {
            return Err(invalid("contains NUL".into()));
        }
        if text.len() > TOPIC_NAME_BYTES_MAX {
            return Err(invalid(format!(
                "longer than {TOPIC_NAME_BYTES_MAX} bytes ({} bytes)",
                text.len()
            )));
        }
        let Some((namespace, name)) = text.split_once('/') else {
            return Err(invalid("topic name must be namespace/name (no '/')".into()));
        };
        if name.contains('/') {
            return Err(invalid(
                "topic name must be namespace/name (more than one '/')".into(),
            ));
        }
        for (part, label) in [(namespace, "namespace"), (name, "name")] {
            if part.is_empty() {
                return Err(invalid(format!(
                    "topic name must be namespace/name ({label} is empty)"
                )));
            }
            if let Some(bad) = part.chars().find(|c| !is_name_char(*c)) {
                return Err(invalid(format!(
                    "invalid character '{}' in {label}; allowed are A-Z a-z 0-9 . _ -",
                    bad.escape_debug()
                )));
            }
            if part == "." || part == ".." {
                return Err(invalid(format!("contains '{part}' as the {label}")));
            }
        }
        Ok(TopicName {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The part before the `/`.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The part after the `/`.
    pub fn name(&self) -> &str {
        &self.name
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

impl std::fmt::Display for TopicName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl std::str::FromStr for TopicName {
    type Err = ControlError;

    fn from_str(text: &str) -> Result<TopicName, ControlError> {
        TopicName::parse(text)
    }
}

impl serde::Serialize for TopicName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for TopicName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<TopicName, D::Error> {
        let text = String::deserialize(deserializer)?;
        TopicName::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn reason(text: &str) -> String {
        match TopicName::parse(text) {
            Err(ControlError::InvalidTopicName(reason)) => reason,
            other => panic!("{text:?} should be invalid, got {other:?}"),
        }
    }

    #[test]
    fn parses_valid_names() {
        let t = TopicName::parse("payments/orders.v2_eu-1").unwrap();
        assert_eq!(t.namespace(), "payments");
        assert_eq!(t.name(), "orders.v2_eu-1");
        assert_eq!(t.to_string(), "payments/orders.v2_eu-1");
        let longest = format!("{}/{}", "n".repeat(124), "t".repeat(124));
        assert_eq!(longest.len(), TOPIC_NAME_BYTES_MAX);
        assert!(TopicName::parse(&longest).is_ok());
        assert!(TopicName::parse("a..b/...").is_ok());
        assert_eq!(
            "a/b".parse::<TopicName>().unwrap(),
            TopicName::parse("a/b").unwrap()
        );
    }

    #[test]
    fn rejects_with_a_reason() {
        for text in ["", "noslash", "/name", "ns/", "a/b/c", "/"] {
            assert!(
                reason(text).contains("topic name must be namespace/name"),
                "{text}"
            );
        }
        assert!(reason("../name").contains("contains '..'"));
        assert!(reason("ns/..").contains("contains '..'"));
        assert!(reason("./x").contains("contains '.'"));
        assert!(reason("ns/a\0b").contains("contains NUL"));
        assert!(reason("ns/a b").contains("invalid character ' '"));
        assert!(reason("ns/é").contains("invalid character 'é'"));
        assert!(reason("ns/a\\b").contains("invalid character '\\\\'"));
        let long = format!("ns/{}", "x".repeat(TOPIC_NAME_BYTES_MAX));
        assert!(reason(&long).contains("longer than 249 bytes"));
        let message = TopicName::parse("x").unwrap_err().to_string();
        assert!(
            message.starts_with("invalid topic name: \"x\""),
            "{message}"
        );
    }

    #[test]
    fn serde_round_trip_validates() {
        let t = TopicName::parse("ns/t").unwrap();
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, "\"ns/t\"");
        assert_eq!(serde_json::from_str::<TopicName>(&json).unwrap(), t);
        let err = serde_json::from_str::<TopicName>("\"ns/../x\"").unwrap_err();
        assert!(err.to_string().contains("namespace/name"), "{err}");
        assert!(serde_json::from_str::<TopicName>("7").is_err());
    }

    #[test]
    fn ordered_by_namespace_then_name() {
        let mut names: Vec<TopicName> = ["b/a", "a/z", "a/b"]
            .iter()
            .map(|t| TopicName::parse(t).unwrap())
            .collect();
        names.sort();
        let shown: Vec<String> = names.iter().map(|t| t.to_string()).collect();
        assert_eq!(shown, ["a/b", "a/z", "b/a"]);
    }
}
