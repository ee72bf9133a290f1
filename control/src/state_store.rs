//! [`StateStore`]: where the control plane commits its state, and the two
//! places it can live.
//!
//! - [`FilerStateStore`]: one control plane alone (`kelp control` without
//!   `--etcd`, and the one a lone `kelp serve` runs). Each topic is its
//!   `topics/<ns>/<name>/topic.json` in the filer ([`crate::topic_store`]);
//!   membership is not kept (brokers register again after a restart, and a
//!   new broker's id is one past the highest any topic names).
//! - `kelp_election::EtcdStateStore`: one of several `kelp control --etcd`
//!   instances, while it leads (handed out by its
//!   [`Election`](crate::election::Election)). Topics and broker records are
//!   etcd keys under [`ETCD_TOPICS_PREFIX`] and [`ETCD_BROKERS_PREFIX`],
//!   written by guarded txns in the leader's term: a deposed leader's write
//!   fails with [`ControlError::NotLeader`] and applies nothing. The keys
//!   are in `docs/etcd.md`.
//!
//! Either way a write is the commit point of a change: it happens before
//! the change is answered or any broker hears of it. Chunk files, seal
//! markers and payloads stay in the filer whichever store holds the state.

use std::sync::Arc;

use filer::Filer;

use crate::{
    filer_layout, topic_store, BrokerId, BrokerInfo, ControlError, CorruptLayout, Topic, TopicName,
};

/// Relative etcd state prefix of the topics: `topics/<ns>/<name>`
/// ([`etcd_topic_key`]).
pub const ETCD_TOPICS_PREFIX: &str = "topics/";
/// Relative etcd state prefix of the broker records: `brokers/<id>`
/// ([`etcd_broker_key`]).
pub const ETCD_BROKERS_PREFIX: &str = "brokers/";

/// Everything a control plane loads when it starts or takes over.
#[derive(Debug, Default)]
pub struct StoredState {
    /// Sorted by name.
    pub topics: Vec<Topic>,
    /// Every broker record kept: brokers that registered and did not leave
    /// (a dead one keeps its record, so its id is never given to another).
    pub brokers: Vec<BrokerInfo>,
}

/// Where the control plane's state is committed (see the module docs).
pub trait StateStore: Send + std::fmt::Debug {
    /// Every topic and broker record stored.
    fn load(&self) -> Result<StoredState, ControlError>;
    /// Store `topic` as it stands (create or change).
    fn put_topic(&self, topic: &Topic) -> Result<(), ControlError>;
    /// Remove topic `name` (the commit point of a delete).
    fn delete_topic(&self, name: &TopicName) -> Result<(), ControlError>;
    /// Record that `broker` registered (its id is taken).
    fn put_broker(&self, broker: &BrokerInfo) -> Result<(), ControlError>;
    /// Forget broker `id`'s record (it left).
    fn delete_broker(&self, id: BrokerId) -> Result<(), ControlError>;
}

/// The state of one control plane alone, in the filer.
#[derive(Debug)]
pub struct FilerStateStore {
    filer: Arc<dyn Filer>,
}

impl FilerStateStore {
    pub fn new(filer: Arc<dyn Filer>) -> FilerStateStore {
        FilerStateStore { filer }
    }
}

impl StateStore for FilerStateStore {
    fn load(&self) -> Result<StoredState, ControlError> {
        Ok(StoredState {
            topics: topic_store::load_topics(self.filer.as_ref())?,
            brokers: Vec::new(),
        })
    }

    fn put_topic(&self, topic: &Topic) -> Result<(), ControlError> {
        topic_store::store_topic(self.filer.as_ref(), topic)
    }

    fn delete_topic(&self, name: &TopicName) -> Result<(), ControlError> {
        Ok(self.filer.delete(&filer_layout::topic_file(name))?)
    }

    fn put_broker(&self, _broker: &BrokerInfo) -> Result<(), ControlError> {
        Ok(())
    }

    fn delete_broker(&self, _id: BrokerId) -> Result<(), ControlError> {
        Ok(())
    }
}

/// `topics/<ns>/<name>`.
pub fn etcd_topic_key(name: &TopicName) -> String {
    format!("{ETCD_TOPICS_PREFIX}{name}")
}

/// `brokers/<id>`.
pub fn etcd_broker_key(id: BrokerId) -> String {
    format!("{ETCD_BROKERS_PREFIX}{}", id.0)
}

/// The topic stored at etcd state key `key`: decoded, validated, and stored
/// under its own name, else [`ControlError::Corrupt`].
pub fn decode_etcd_topic(key: &str, value: &[u8]) -> Result<Topic, ControlError> {
    let at = format!("etcd {key}");
    let topic = Topic::from_json_bytes_at(value, &at)?;
    if etcd_topic_key(topic.name()) != key {
        return Err(ControlError::corrupt(
            at,
            CorruptLayout::TopicKey {
                holds: topic.name().clone(),
            },
        ));
    }
    Ok(topic)
}

/// A broker record's value: [`BrokerInfo`] as JSON.
pub fn encode_etcd_broker(broker: &BrokerInfo) -> Result<Vec<u8>, ControlError> {
    serde_json::to_vec(broker)
        .map_err(|e| ControlError::State(format!("encoding broker {}: {e}", broker.id.0)))
}

/// The broker record at etcd state key `key`: decoded, validated, and
/// stored under its own id, else [`ControlError::Corrupt`].
pub fn decode_etcd_broker(key: &str, value: &[u8]) -> Result<BrokerInfo, ControlError> {
    let at = format!("etcd {key}");
    let corrupt = |reason: CorruptLayout| ControlError::corrupt(at.clone(), reason);
    let broker: BrokerInfo =
        serde_json::from_slice(value).map_err(|e| corrupt(CorruptLayout::BrokerJson(e)))?;
    broker
        .validate()
        .map_err(|e| corrupt(CorruptLayout::Broker(e)))?;
    if etcd_broker_key(broker.id) != key {
        return Err(corrupt(CorruptLayout::BrokerKey { holds: broker.id }));
    }
    Ok(broker)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Capacity, Cluster, ClusterConfig, InvalidRegistration};

    fn broker(id: u32, shards: usize) -> BrokerInfo {
        BrokerInfo {
            id: BrokerId(id),
            shard_addresses: vec!["127.0.0.1:1".to_owned(); shards],
            capacity: Capacity {
                bytes_per_s: 1,
                records_per_s: 1,
            },
        }
    }

    fn corrupt<T: std::fmt::Debug>(result: Result<T, ControlError>) -> (String, CorruptLayout) {
        match result {
            Err(ControlError::Corrupt { path, reason }) => (path, *reason),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn etcd_records_must_be_what_their_keys_say() {
        let b3 = broker(3, 1);
        let value = encode_etcd_broker(&b3).unwrap();
        assert_eq!(
            decode_etcd_broker(&etcd_broker_key(BrokerId(3)), &value).unwrap(),
            b3
        );
        let (path, reason) = corrupt(decode_etcd_broker(&etcd_broker_key(BrokerId(4)), &value));
        assert_eq!(path, "etcd brokers/4");
        assert!(
            matches!(reason, CorruptLayout::BrokerKey { holds: BrokerId(3) }),
            "{reason:?}"
        );
        assert_eq!(reason.to_string(), "holds broker 3");

        let (_, reason) = corrupt(decode_etcd_broker("brokers/3", b"[1]"));
        assert!(matches!(reason, CorruptLayout::BrokerJson(_)), "{reason:?}");
        let none = encode_etcd_broker(&broker(3, 0)).unwrap();
        let (_, reason) = corrupt(decode_etcd_broker("brokers/3", &none));
        assert!(
            matches!(
                reason,
                CorruptLayout::Broker(InvalidRegistration::ShardCount { count: 0, .. })
            ),
            "{reason:?}"
        );

        let mut cluster = Cluster::new(ClusterConfig::default());
        cluster.handle_register(0, broker(0, 1)).unwrap();
        let name = TopicName::parse("ns/t").unwrap();
        cluster.create_topic(0, &name, 1, 1, None).unwrap();
        let value = cluster.topic(&name).unwrap().to_json_bytes();
        assert!(decode_etcd_topic(&etcd_topic_key(&name), &value).is_ok());
        let other = TopicName::parse("ns/u").unwrap();
        let (path, reason) = corrupt(decode_etcd_topic(&etcd_topic_key(&other), &value));
        assert_eq!(path, format!("etcd {}", etcd_topic_key(&other)));
        assert!(
            matches!(&reason, CorruptLayout::TopicKey { holds } if *holds == name),
            "{reason:?}"
        );
        assert_eq!(reason.to_string(), "holds topic ns/t");
    }
}
