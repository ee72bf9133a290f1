//! The control plane's side of an elected instance: a [`Candidate`] is a
//! [`control::election::Election`], and the state store it hands the
//! leader of a term is an [`EtcdStateStore`] whose every write is guarded
//! by that term. What the keys hold is the control plane's
//! (`control::state_store`); this module only moves them in and out
//! of etcd.

use std::sync::Arc;

use control::election::{ElectedTerm, Election, ElectionState};
use control::state_store::{
    decode_etcd_broker, decode_etcd_topic, encode_etcd_broker, etcd_broker_key, etcd_topic_key,
    StateStore, StoredState, ETCD_BROKERS_PREFIX, ETCD_TOPICS_PREFIX,
};
use control::{BrokerId, BrokerInfo, ControlError, Topic, TopicName};

use crate::{Candidate, Leadership, StateSnapshot, Term, WriteError};

impl Election for Candidate {
    fn state(&self) -> ElectionState {
        match Candidate::state(self) {
            Leadership::Leader { term } => ElectionState::Leader {
                term: ElectedTerm {
                    revision: term.revision(),
                    lease_id: term.lease_id(),
                },
            },
            Leadership::Follower { leader } => ElectionState::Follower { leader },
        }
    }

    fn advertised_address(&self) -> &str {
        Candidate::advertised_address(self)
    }

    fn store(self: Arc<Self>, term: ElectedTerm) -> Box<dyn StateStore> {
        let term = Term::new(term.revision, term.lease_id);
        Box::new(EtcdStateStore::new(self, term))
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
            .map_err(|e| ControlError::State(format!("reading etcd {prefix}: {e}")))
    }
}

impl StateStore for EtcdStateStore {
    fn load(&self) -> Result<StoredState, ControlError> {
        let mut state = StoredState::default();
        for entry in self.read(ETCD_TOPICS_PREFIX)?.entries {
            state
                .topics
                .push(decode_etcd_topic(&entry.key, &entry.value)?);
        }
        state.topics.sort_by(|a, b| a.name().cmp(b.name()));
        for entry in self.read(ETCD_BROKERS_PREFIX)?.entries {
            state
                .brokers
                .push(decode_etcd_broker(&entry.key, &entry.value)?);
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
        let result = self
            .candidate
            .put_if_leader(self.term, &key, encode_etcd_broker(broker)?);
        self.write(&key, result)
    }

    fn delete_broker(&self, id: BrokerId) -> Result<(), ControlError> {
        let key = etcd_broker_key(id);
        let result = self.candidate.delete_if_leader(self.term, &key);
        self.write(&key, result)
    }
}
