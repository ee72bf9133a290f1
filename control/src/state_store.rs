//! [`StateStore`]: where the control plane commits its state, and the two
//! places it can live.
//!
//! - [`FilerStateStore`]: one control plane alone (`kelp control` without
//!   `--etcd`, and the one a lone `kelp serve` runs). Each topic is its
//!   `topics/<ns>/<name>/topic.json` in the filer ([`crate::topic_store`]);
//!   membership is not kept (brokers register again after a restart, and a
//!   new broker's id is one past the highest any topic names).
//! - [`EtcdStateStore`]: one of several `kelp control --etcd` instances,
//!   while it leads. Topics and broker records are etcd keys, written by
//!   guarded txns in the leader's [`Term`]: a deposed leader's write fails
//!   with [`ControlError::NotLeader`] and applies nothing. The keys are in
//!   `docs/etcd.md`.
//!
//! Either way a write is the commit point of a change: it happens before
//! the change is answered or any broker hears of it. Chunk files, seal
//! markers and payloads stay in the filer whichever store holds the state.

use std::sync::Arc;

use election::{Candidate, ReadError, StateSnapshot, Term, WriteError};
use filer::Filer;

use crate::{filer_layout, topic_store, BrokerId, BrokerInfo, ControlError, Topic, TopicName};

/// Relative etcd state prefix of the topics: `topics/<ns>/<name>`.
pub const ETCD_TOPICS_PREFIX: &str = "topics/";
/// Relative etcd state prefix of the broker records: `brokers/<id>`.
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

/// The state of an HA control plane, in etcd, written in one term.
#[derive(Debug)]
pub struct EtcdStateStore {
    candidate: Arc<Candidate>,
    term: Term,
}

impl EtcdStateStore {
    /// The store of the leader of `term`: every write is guarded by it.
    pub fn new(candidate: Arc<Candidate>, term: Term) -> EtcdStateStore {
        EtcdStateStore { candidate, term }
    }

    fn write(&self, what: &str, result: Result<i64, WriteError>) -> Result<(), ControlError> {
        match result {
            Ok(_revision) => Ok(()),
            Err(WriteError::NotLeader { leader, .. }) => Err(ControlError::NotLeader { leader }),
            Err(e) => Err(ControlError::State(format!("writing {what} to etcd: {e}"))),
        }
    }

    fn read(&self, prefix: &str) -> Result<StateSnapshot, ControlError> {
        self.candidate
            .get_prefix(prefix)
            .map_err(|e: ReadError| ControlError::State(format!("reading etcd {prefix}: {e}")))
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

impl StateStore for EtcdStateStore {
    fn load(&self) -> Result<StoredState, ControlError> {
        let mut state = StoredState::default();
        for entry in self.read(ETCD_TOPICS_PREFIX)?.entries {
            let at = format!("etcd {}", entry.key);
            let topic = Topic::from_json_bytes_at(&entry.value, &at)?;
            if etcd_topic_key(topic.name()) != entry.key {
                return Err(ControlError::Corrupt {
                    path: at,
                    reason: format!("holds topic {}", topic.name()),
                });
            }
            state.topics.push(topic);
        }
        state.topics.sort_by(|a, b| a.name().cmp(b.name()));
        for entry in self.read(ETCD_BROKERS_PREFIX)?.entries {
            let at = format!("etcd {}", entry.key);
            let broker: BrokerInfo =
                serde_json::from_slice(&entry.value).map_err(|e| ControlError::Corrupt {
                    path: at.clone(),
                    reason: e.to_string(),
                })?;
            broker.validate().map_err(|reason| ControlError::Corrupt {
                path: at.clone(),
                reason,
            })?;
            if etcd_broker_key(broker.id) != entry.key {
                return Err(ControlError::Corrupt {
                    path: at,
                    reason: format!("holds broker {}", broker.id.0),
                });
            }
            state.brokers.push(broker);
        }
        Ok(state)
    }

    fn put_topic(&self, topic: &Topic) -> Result<(), ControlError> {
        let key = etcd_topic_key(topic.name());
        let result = self
            .candidate
            .put_if_leader(self.term, &key, topic.to_json_bytes());
        self.write(&key, result)
    }

    fn delete_topic(&self, name: &TopicName) -> Result<(), ControlError> {
        let key = etcd_topic_key(name);
        let result = self.candidate.delete_if_leader(self.term, &key);
        self.write(&key, result)
    }

    fn put_broker(&self, broker: &BrokerInfo) -> Result<(), ControlError> {
        let key = etcd_broker_key(broker.id);
        let json = serde_json::to_vec(broker)
            .map_err(|e| ControlError::State(format!("encoding broker {}: {e}", broker.id.0)))?;
        let result = self.candidate.put_if_leader(self.term, &key, json);
        self.write(&key, result)
    }

    fn delete_broker(&self, id: BrokerId) -> Result<(), ControlError> {
        let key = etcd_broker_key(id);
        let result = self.candidate.delete_if_leader(self.term, &key);
        self.write(&key, result)
    }
}
