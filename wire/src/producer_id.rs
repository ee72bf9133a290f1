//! Producer ids as a batch header carries them (`docs/wire-format.md`,
//! "Producer ids"): 0 is no producer; the Kafka gateway's idempotent
//! producers are their Kafka id plus one, below [`KELP_PRODUCER_ID_BIT`];
//! kelp's own idempotent producers have that bit set, and the rest of the
//! id names the broker and shard that handed it out and a count of its own.

/// The producer id of a batch no idempotent producer sent.
pub const PRODUCER_ID_NONE: u64 = 0;
/// Set in every id a kelp broker hands out (`InitProducer`), and in no id
/// the Kafka gateway stamps.
pub const KELP_PRODUCER_ID_BIT: u64 = 1 << 62;
/// Bits of a kelp producer id that count within one shard.
const COUNT_BITS: u32 = 30;
/// Bits that name the shard.
const SHARD_BITS: u32 = 8;
/// Bits that name the broker.
const BROKER_BITS: u32 = 24;
const _: () = assert!(COUNT_BITS + SHARD_BITS + BROKER_BITS == 62);

/// Ids one shard of one broker can hand out, over all its runs.
pub const KELP_PRODUCER_IDS_PER_SHARD: u64 = 1 << COUNT_BITS;

/// The `count`-th id handed out by `shard` of `broker`; `None` when one of
/// them does not fit its bits.
pub fn kelp_producer_id(broker: u32, shard: u32, count: u64) -> Option<u64> {
    if u64::from(broker) >> BROKER_BITS != 0
        || u64::from(shard) >> SHARD_BITS != 0
        || count >= KELP_PRODUCER_IDS_PER_SHARD
    {
        return None;
    }
    Some(
        KELP_PRODUCER_ID_BIT
            | u64::from(broker) << (COUNT_BITS + SHARD_BITS)
            | u64::from(shard) << COUNT_BITS
            | count,
    )
}

/// Whether a batch header's producer id is a kelp producer's.
pub fn is_kelp_producer_id(id: u64) -> bool {
    id & KELP_PRODUCER_ID_BIT != 0 && id >> 63 == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ids_of_different_shards_and_brokers_never_meet() {
        let a = kelp_producer_id(1, 0, 5).unwrap();
        let b = kelp_producer_id(0, 1, 5).unwrap();
        let c = kelp_producer_id(0, 0, 5).unwrap();
        assert!(a != b && b != c && a != c);
        for id in [a, b, c] {
            assert!(is_kelp_producer_id(id));
            assert!(i64::try_from(id).is_ok(), "fits Kafka's signed id");
        }
        assert!(!is_kelp_producer_id(PRODUCER_ID_NONE));
        assert!(!is_kelp_producer_id(12_345 + 1), "a Kafka gateway stamp");
        assert_eq!(kelp_producer_id(1 << 24, 0, 0), None);
        assert_eq!(kelp_producer_id(0, 256, 0), None);
        assert_eq!(kelp_producer_id(0, 0, KELP_PRODUCER_IDS_PER_SHARD), None);
        assert_eq!(
            kelp_producer_id((1 << 24) - 1, 255, KELP_PRODUCER_IDS_PER_SHARD - 1),
            Some((1 << 63) - 1)
        );
    }
}
