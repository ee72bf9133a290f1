//! [`CandidateConfig`]: what one control-plane instance needs to stand for
//! leader, and the bounds every setting is checked against before anything
//! talks to etcd.

use std::time::Duration;

/// The lease TTL a candidate asks for unless told otherwise.
pub const LEASE_TTL_S_DEFAULT: u32 = 3;
/// etcd refuses (silently raises) shorter leases: its minimum is 1.5 x its
/// election timeout, 2 s with etcd's defaults.
pub const LEASE_TTL_S_MIN: u32 = 2;
/// Past this a dead leader stalls the cluster for too long to be useful.
pub const LEASE_TTL_S_MAX: u32 = 60;

/// How long one etcd request (a keepalive, a txn, a read) may take; the
/// default fits the shortest TTL (under a third of 2 s).
pub const REQUEST_TIMEOUT_MS_DEFAULT: u32 = 600;
pub const REQUEST_TIMEOUT_MS_MIN: u32 = 50;
/// A request must fit well inside one keepalive interval (TTL / 3), or a
/// slow keepalive would eat the lease before it is answered; checked
/// against the TTL by [`CandidateConfig::validate`] as well.
pub const REQUEST_TIMEOUT_MS_MAX: u32 = 10_000;

/// How long opening a connection to an endpoint may take.
pub const CONNECT_TIMEOUT_MS_DEFAULT: u32 = 1_000;
pub const CONNECT_TIMEOUT_MS_MIN: u32 = 50;
pub const CONNECT_TIMEOUT_MS_MAX: u32 = 30_000;

/// Endpoints one candidate may be given.
pub const ENDPOINTS_MAX: usize = 16;
/// Cluster names: `[a-z0-9_-]`, 1 to this many bytes (they are part of
/// every key, so they are kept short and plain).
pub const CLUSTER_NAME_BYTES_MAX: usize = 64;
/// The advertised address (the leader key's value): 1 to this many bytes.
pub const ADVERTISED_ADDRESS_BYTES_MAX: usize = 256;

/// Everything a [`Candidate`](crate::Candidate) needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateConfig {
    /// etcd client URLs, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// The cluster name; every key lives under `/kelp/<cluster>/`.
    pub cluster: String,
    /// This instance's address as its peers and brokers reach it; written
    /// as the leader key's value while it leads.
    pub advertised_address: String,
    /// The lease's time to live, whole seconds in
    /// [`LEASE_TTL_S_MIN`]..=[`LEASE_TTL_S_MAX`]. It is refreshed every
    /// third of it; a leader that could not refresh it for this long
    /// considers itself deposed.
    pub lease_ttl_s: u32,
    /// The bound on each etcd request, in
    /// [`REQUEST_TIMEOUT_MS_MIN`]..=[`REQUEST_TIMEOUT_MS_MAX`] and under a
    /// third of the TTL.
    pub request_timeout_ms: u32,
    /// The bound on opening a connection.
    pub connect_timeout_ms: u32,
}

impl CandidateConfig {
    /// A configuration with the default TTL and timeouts.
    pub fn new(
        endpoints: Vec<String>,
        cluster: impl Into<String>,
        advertised_address: impl Into<String>,
    ) -> CandidateConfig {
        CandidateConfig {
            endpoints,
            cluster: cluster.into(),
            advertised_address: advertised_address.into(),
            lease_ttl_s: LEASE_TTL_S_DEFAULT,
            request_timeout_ms: REQUEST_TIMEOUT_MS_DEFAULT,
            connect_timeout_ms: CONNECT_TIMEOUT_MS_DEFAULT,
        }
    }

    /// The same configuration with another lease TTL.
    pub fn with_lease_ttl_s(mut self, lease_ttl_s: u32) -> CandidateConfig {
        self.lease_ttl_s = lease_ttl_s;
        self
    }

    /// The same configuration with another request timeout.
    pub fn with_request_timeout_ms(mut self, request_timeout_ms: u32) -> CandidateConfig {
        self.request_timeout_ms = request_timeout_ms;
        self
    }

    /// Check every setting against its bounds.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.endpoints.is_empty() || self.endpoints.len() > ENDPOINTS_MAX {
            return Err(ConfigError::Endpoints {
                count: self.endpoints.len(),
            });
        }
        let cluster_ok = !self.cluster.is_empty()
            && self.cluster.len() <= CLUSTER_NAME_BYTES_MAX
            && self
                .cluster
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !cluster_ok {
            return Err(ConfigError::ClusterName {
                name: self.cluster.clone(),
            });
        }
        if self.advertised_address.is_empty()
            || self.advertised_address.len() > ADVERTISED_ADDRESS_BYTES_MAX
        {
            return Err(ConfigError::AdvertisedAddress {
                bytes: self.advertised_address.len(),
            });
        }
        check_range(
            "lease_ttl_s",
            self.lease_ttl_s,
            LEASE_TTL_S_MIN,
            LEASE_TTL_S_MAX,
        )?;
        check_range(
            "request_timeout_ms",
            self.request_timeout_ms,
            REQUEST_TIMEOUT_MS_MIN,
            REQUEST_TIMEOUT_MS_MAX,
        )?;
        check_range(
            "connect_timeout_ms",
            self.connect_timeout_ms,
            CONNECT_TIMEOUT_MS_MIN,
            CONNECT_TIMEOUT_MS_MAX,
        )?;
        if u64::from(self.request_timeout_ms) * 3 >= u64::from(self.lease_ttl_s) * 1000 {
            return Err(ConfigError::RequestTimeoutOverTtl {
                request_timeout_ms: self.request_timeout_ms,
                lease_ttl_s: self.lease_ttl_s,
            });
        }
        Ok(())
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        Duration::from_millis(u64::from(self.request_timeout_ms))
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        Duration::from_millis(u64::from(self.connect_timeout_ms))
    }
}

fn check_range(setting: &'static str, value: u32, min: u32, max: u32) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            setting,
            value,
            min,
            max,
        })
    }
}

/// Why a [`CandidateConfig`] was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("{count} etcd endpoints given; 1 to {ENDPOINTS_MAX} are needed")]
    Endpoints { count: usize },
    #[error("cluster name {name:?}: 1 to {CLUSTER_NAME_BYTES_MAX} bytes of [a-z0-9_-] are needed")]
    ClusterName { name: String },
    #[error("advertised address of {bytes} bytes: 1 to {ADVERTISED_ADDRESS_BYTES_MAX} are needed")]
    AdvertisedAddress { bytes: usize },
    #[error("{setting} = {value} is outside {min}..={max}")]
    OutOfRange {
        setting: &'static str,
        value: u32,
        min: u32,
        max: u32,
    },
    #[error(
        "request_timeout_ms = {request_timeout_ms} must be under a third of \
         lease_ttl_s = {lease_ttl_s} (the keepalive interval)"
    )]
    RequestTimeoutOverTtl {
        request_timeout_ms: u32,
        lease_ttl_s: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CandidateConfig {
        CandidateConfig::new(
            vec!["http://127.0.0.1:2379".into()],
            "prod-1",
            "10.0.0.1:7000",
        )
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(config().validate(), Ok(()));
    }

    #[test]
    fn ttl_is_bounded() {
        for (ttl, ok) in [(1, false), (2, true), (60, true), (61, false)] {
            assert_eq!(
                config().with_lease_ttl_s(ttl).validate().is_ok(),
                ok,
                "ttl {ttl}"
            );
        }
    }

    #[test]
    fn request_timeout_must_fit_in_a_keepalive_interval() {
        let c = config().with_lease_ttl_s(3).with_request_timeout_ms(1_000);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::RequestTimeoutOverTtl { .. })
        ));
        assert_eq!(c.with_request_timeout_ms(999).validate(), Ok(()));
    }

    #[test]
    fn cluster_names_are_plain() {
        for name in ["", "Prod", "a/b", "a b", &"x".repeat(65)] {
            let mut c = config();
            c.cluster = name.into();
            assert!(
                matches!(c.validate(), Err(ConfigError::ClusterName { .. })),
                "{name:?}"
            );
        }
    }

    #[test]
    fn endpoints_and_address_are_required() {
        let mut c = config();
        c.endpoints.clear();
        assert_eq!(c.validate(), Err(ConfigError::Endpoints { count: 0 }));
        let mut c = config();
        c.advertised_address.clear();
        assert_eq!(
            c.validate(),
            Err(ConfigError::AdvertisedAddress { bytes: 0 })
        );
    }
}
