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
    pub fn validate(&self) -> Result<(), String> {
        let count = self.shard_addresses.len();
        if count == 0 || count > SHARDS_PER_BROKER_MAX {
            return Err(format!(
                "broker {}: {count} shard addresses, need 1..={SHARDS_PER_BROKER_MAX}",
                self.id
            ));
        }
        for (shard, address) in self.shard_addresses.iter().enumerate() {
            if address.is_empty() || address.len() > SHARD_ADDRESS_BYTES_MAX {
                return Err(format!(
                    "broker {}: shard {shard} address is {} bytes, need 1..={SHARD_ADDRESS_BYTES_MAX}",
                    self.id,
                    address.len()
                ));
            }
        }
        if self.capacity.bytes_per_s == 0 || self.capacity.records_per_s == 0 {
            return Err(format!("broker {}: capacity must be non-zero", self.id));
        }
        Ok(())
    }
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
        assert_eq!(info(&["a:1", "a:2"], 5).validate(), Ok(()));
        assert_eq!(info(&["a:1", "a:2"], 5).shard_count(), 2);
        let err = info(&[], 5).validate().unwrap_err();
        assert!(err.contains("0 shard addresses"), "{err}");
        let err = info(&["a:1", ""], 5).validate().unwrap_err();
        assert!(err.contains("shard 1 address is 0 bytes"), "{err}");
        let long = "x".repeat(SHARD_ADDRESS_BYTES_MAX + 1);
        assert!(info(&[&long], 5).validate().is_err());
        let err = info(&["a:1"], 0).validate().unwrap_err();
        assert!(err.contains("capacity"), "{err}");
        let many: Vec<&str> = vec!["a:1"; SHARDS_PER_BROKER_MAX + 1];
        assert!(info(&many, 5).validate().is_err());
        assert_eq!(BrokerId(7).to_string(), "b7");
    }
}
