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

use crate::{filer_layout, topic_store, BrokerId, BrokerInfo, ControlError, Topic, TopicName};

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
        return Err(ControlError::Corrupt {
            path: at,
            reason: format!("holds topic {}", topic.name()),
        });
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
    let corrupt = |reason: String| ControlError::Corrupt {
        path: at.clone(),
        reason,
    };
    let broker: BrokerInfo = serde_json::from_slice(value).map_err(|e| corrupt(e.to_string()))?;
    broker.validate().map_err(corrupt)?;
    if etcd_broker_key(broker.id) != key {
        return Err(corrupt(format!("holds broker {}", broker.id.0)));
    }
    Ok(broker)
}
