//! [`ClusterKeys`]: the one place that spells every etcd key kelp writes.
//! `docs/etcd.md` is the same table in prose; the two change together.
//!
//! ```text
//! /kelp/<cluster>/control/leader     the leader key: the leader's advertised address
//! /kelp/<cluster>/state/<key>        cluster state, written only by guarded txns
//! ```
//!
//! State keys are given relative (`topics/ns/name`) and always land under
//! `state/`, so no state write can touch the leader key.

/// A relative state key: 1 to this many bytes.
pub const STATE_KEY_BYTES_MAX: usize = 512;

/// The keys of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterKeys {
    leader: String,
    state_prefix: String,
}

impl ClusterKeys {
    /// The keys of cluster `cluster` (a name already checked by
    /// [`CandidateConfig::validate`](crate::CandidateConfig::validate)).
    pub fn new(cluster: &str) -> ClusterKeys {
        ClusterKeys {
            leader: format!("/kelp/{cluster}/control/leader"),
            state_prefix: format!("/kelp/{cluster}/state/"),
        }
    }

    /// `/kelp/<cluster>/control/leader`.
    pub fn leader(&self) -> &str {
        &self.leader
    }

    /// `/kelp/<cluster>/state/`.
    pub fn state_prefix(&self) -> &str {
        &self.state_prefix
    }

    /// The full etcd key of relative state key `key`.
    pub fn state(&self, key: &str) -> Result<String, KeyError> {
        check_state_key(key)?;
        Ok(format!("{}{key}", self.state_prefix))
    }

    /// The full etcd prefix of relative prefix `prefix` (empty: all state).
    pub fn state_range(&self, prefix: &str) -> Result<String, KeyError> {
        if !prefix.is_empty() {
            check_state_key(prefix)?;
        }
        Ok(format!("{}{prefix}", self.state_prefix))
    }

    /// The relative key of full etcd key `full`, if it is a state key of
    /// this cluster.
    pub fn relative<'a>(&self, full: &'a [u8]) -> Option<&'a str> {
        let rest = full.strip_prefix(self.state_prefix.as_bytes())?;
        std::str::from_utf8(rest).ok()
    }
}

fn check_state_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() || key.len() > STATE_KEY_BYTES_MAX {
        return Err(KeyError::Length { bytes: key.len() });
    }
    if key.bytes().any(|b| b.is_ascii_control()) {
        return Err(KeyError::ControlCharacter {
            key: key.escape_debug().to_string(),
        });
    }
    Ok(())
}

/// Why a state key was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    #[error("state key of {bytes} bytes: 1 to {STATE_KEY_BYTES_MAX} are allowed")]
    Length { bytes: usize },
    #[error("state key {key:?} holds a control character")]
    ControlCharacter { key: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_spelled_as_documented() {
        let keys = ClusterKeys::new("prod");
        assert_eq!(keys.leader(), "/kelp/prod/control/leader");
        assert_eq!(
            keys.state("topics/ns/orders"),
            Ok("/kelp/prod/state/topics/ns/orders".to_owned())
        );
        assert_eq!(keys.state_range(""), Ok("/kelp/prod/state/".to_owned()));
        assert_eq!(
            keys.relative(b"/kelp/prod/state/topics/a"),
            Some("topics/a")
        );
        assert_eq!(keys.relative(b"/kelp/prod/control/leader"), None);
        assert_eq!(keys.relative(b"/kelp/other/state/topics/a"), None);
    }

    #[test]
    fn bad_state_keys_are_refused() {
        let keys = ClusterKeys::new("prod");
        assert_eq!(keys.state(""), Err(KeyError::Length { bytes: 0 }));
        assert!(keys.state(&"k".repeat(STATE_KEY_BYTES_MAX)).is_ok());
        assert!(keys.state(&"k".repeat(STATE_KEY_BYTES_MAX + 1)).is_err());
        assert!(matches!(
            keys.state("a\0b"),
            Err(KeyError::ControlCharacter { .. })
        ));
    }
}
