//! [`BrokerId`] and [`BrokerInfo`]: who a broker is and what it can take.

/// A broker's id, chosen by the broker (or its operator) and stable across
/// its restarts. Unique among live brokers.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct BrokerId(pub u32);

impl std::fmt::Display for BrokerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b{}", self.0)
    }
}

/// Most shards one broker may register.
pub const SHARDS_PER_BROKER_MAX: usize = 1024;

/// Longest shard address accepted, in bytes.
pub const SHARD_ADDRESS_BYTES_MAX: usize = 256;

/// How much traffic a broker can take, the unit its load is measured in:
/// a broker's utilization is its reported rate divided by this, taking the
/// larger of the two ratios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Capacity {
    /// Payload bytes per second the broker can ingest. At least 1.
    pub bytes_per_s: u64,
    /// Records per second the broker can ingest. At least 1.
    pub records_per_s: u64,
}

/// What a broker says about itself when it registers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BrokerInfo {
    /// The broker's id.
    pub id: BrokerId,
    /// One address per shard (core), index = shard: clients send a segment's
    /// traffic straight to the shard that owns it. At least one.
    pub shard_addresses: Vec<String>,
    /// What the broker can take.
    pub capacity: Capacity,
}

impl BrokerInfo {
    /// How many shards the broker runs.
    pub fn shard_count(&self) -> u16 {
        // validate() bounds the count by SHARDS_PER_BROKER_MAX.
        u16::try_from(self.shard_addresses.len()).unwrap_or(u16::MAX)
    }

    /// Check what a broker sent before it is believed: at least one and at
    /// most [`SHARDS_PER_BROKER_MAX`] shard addresses, none empty or longer
    /// than [`SHARD_ADDRESS_BYTES_MAX`], and a non-zero capacity.
    pub fn validate(&self) -> Result<(), InvalidRegistration> {
        let broker = self.id;
        let count = self.shard_addresses.len();
        if count == 0 || count > SHARDS_PER_BROKER_MAX {
            return Err(InvalidRegistration::ShardCount {
                broker,
                count,
                max: SHARDS_PER_BROKER_MAX,
            });
        }
        for (shard, address) in self.shard_addresses.iter().enumerate() {
            if address.is_empty() || address.len() > SHARD_ADDRESS_BYTES_MAX {
                return Err(InvalidRegistration::ShardAddress {
                    broker,
                    shard,
                    bytes: address.len(),
                    max: SHARD_ADDRESS_BYTES_MAX,
                });
            }
        }
        if self.capacity.bytes_per_s == 0 || self.capacity.records_per_s == 0 {
            return Err(InvalidRegistration::ZeroCapacity { broker });
        }
        Ok(())
    }
}

/// Why a broker's registration is refused: what it says about itself
/// ([`BrokerInfo::validate`]), or a change the control plane cannot take
/// while it owns segments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidRegistration {
    /// No shard addresses, or more than the limit.
    #[error("broker {broker}: {count} shard addresses, need 1..={max}")]
    ShardCount {
        /// The broker.
        broker: BrokerId,
        /// The addresses it sent.
        count: usize,
        /// [`SHARDS_PER_BROKER_MAX`].
        max: usize,
    },
    /// A shard address that is empty or too long.
    #[error("broker {broker}: shard {shard} address is {bytes} bytes, need 1..={max}")]
    ShardAddress {
        /// The broker.
        broker: BrokerId,
        /// The shard whose address it is.
        shard: usize,
        /// The address's length.
        bytes: usize,
        /// [`SHARD_ADDRESS_BYTES_MAX`].
        max: usize,
    },
    /// A capacity with a zero field.
    #[error("broker {broker}: capacity must be non-zero")]
    ZeroCapacity {
        /// The broker.
        broker: BrokerId,
    },
    /// A live broker that owns open segments registered again with another
    /// shard count: it must leave first.
    #[error(
        "broker {broker} owns {segments} open segments on {shards} shards; it cannot \
         re-register with {requested} shards without leaving first"
    )]
    ShardCountChanged {
        /// The broker.
        broker: BrokerId,
        /// The open segments it owns.
        segments: usize,
        /// The shards it has now.
        shards: usize,
        /// The shards it registered with.
        requested: usize,
    },
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn info(addresses: &[&str], bytes_per_s: u64) -> BrokerInfo {
        BrokerInfo {
            id: BrokerId(3),
            shard_addresses: addresses.iter().map(|a| (*a).to_owned()).collect(),
            capacity: Capacity {
                bytes_per_s,
                records_per_s: 10,
            },
        }
    }

    #[test]
    fn validate_checks_addresses_and_capacity() {
        let broker = BrokerId(3);
        assert_eq!(info(&["a:1", "a:2"], 5).validate(), Ok(()));
        assert_eq!(info(&["a:1", "a:2"], 5).shard_count(), 2);
        let err = info(&[], 5).validate().unwrap_err();
        assert_eq!(
            err,
            InvalidRegistration::ShardCount {
                broker,
                count: 0,
                max: SHARDS_PER_BROKER_MAX
            }
        );
        assert!(err.to_string().contains("0 shard addresses"), "{err}");
        let err = info(&["a:1", ""], 5).validate().unwrap_err();
        assert_eq!(
            err,
            InvalidRegistration::ShardAddress {
                broker,
                shard: 1,
                bytes: 0,
                max: SHARD_ADDRESS_BYTES_MAX
            }
        );
        assert!(
            err.to_string().contains("shard 1 address is 0 bytes"),
            "{err}"
        );
        let long = "x".repeat(SHARD_ADDRESS_BYTES_MAX + 1);
        assert_eq!(
            info(&[&long], 5).validate(),
            Err(InvalidRegistration::ShardAddress {
                broker,
                shard: 0,
                bytes: SHARD_ADDRESS_BYTES_MAX + 1,
                max: SHARD_ADDRESS_BYTES_MAX
            })
        );
        let err = info(&["a:1"], 0).validate().unwrap_err();
        assert_eq!(err, InvalidRegistration::ZeroCapacity { broker });
        assert_eq!(err.to_string(), "broker b3: capacity must be non-zero");
        let many: Vec<&str> = vec!["a:1"; SHARDS_PER_BROKER_MAX + 1];
        assert!(matches!(
            info(&many, 5).validate(),
            Err(InvalidRegistration::ShardCount { count, .. }) if count == SHARDS_PER_BROKER_MAX + 1
        ));
        assert_eq!(BrokerId(7).to_string(), "b7");
    }
}
