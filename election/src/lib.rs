//! The etcd layer of kelp's highly available control plane: which instance
//! leads, and cluster-state writes that only the current leader's term can
//! apply. `kelp-control` stays free of tokio; this crate runs its own
//! tokio current-thread runtime on one thread per [`Candidate`] and offers
//! a blocking API to std threads.
//!
//! - A [`Candidate`] grants an etcd lease (TTL [`LEASE_TTL_S_DEFAULT`] s,
//!   bounded by [`LEASE_TTL_S_MIN`] and [`LEASE_TTL_S_MAX`]), keeps it
//!   alive every third of the TTL, and campaigns with a create-if-absent
//!   txn on the leader key attached to it. [`Candidate::state`] says
//!   [`Leadership::Leader`] only until the lease may have expired;
//!   [`Candidate::stop`] resigns by revoking the lease.
//! - Guarded writes ([`Candidate::put_if_leader`],
//!   [`Candidate::delete_if_leader`], [`Candidate::write_if_leader`] with a
//!   [`GuardedBatch`]) carry the writer's [`Term`] and are one txn that
//!   compares the leader key's `create_revision` and lease with it: a
//!   deposed leader's writes fail with [`WriteError::NotLeader`], whatever
//!   it believes.
//! - Reads ([`Candidate::get`], [`Candidate::get_prefix`]) load the state.
//!
//! The `fault-injection` feature (tests only; this crate's own tests turn
//! it on through a dev-dependency on itself) adds
//! `Candidate::pause_keepalive`, `resume_keepalive` (a SIGSTOP, in effect)
//! and `abandon` (a kill -9 that leaves the lease to expire).
//!
//! Every key, value and compare is in `docs/etcd.md`. This crate never
//! decides what the state means: the control plane's state machine does,
//! and hands it writes tagged with the term it decided them in. A
//! [`Candidate`] is the control plane's `Election`, and the store it hands
//! a leader is an [`EtcdStateStore`] (`control_store`): the control plane
//! itself stays free of tokio and the etcd client.

mod campaign;
mod candidate;
mod config;
mod control;
mod control_store;
mod driver;
mod guarded_write;
mod keys;
mod leadership;
mod lease;
mod request;
mod state_read;

pub use campaign::{LEADER_RECHECK_MS, RETRY_DELAY_MS};
pub use candidate::{Candidate, StartError};
pub use config::{
    CandidateConfig, ConfigError, ADVERTISED_ADDRESS_BYTES_MAX, CLUSTER_NAME_BYTES_MAX,
    CONNECT_TIMEOUT_MS_DEFAULT, CONNECT_TIMEOUT_MS_MAX, CONNECT_TIMEOUT_MS_MIN, ENDPOINTS_MAX,
    LEASE_TTL_S_DEFAULT, LEASE_TTL_S_MAX, LEASE_TTL_S_MIN, REQUEST_TIMEOUT_MS_DEFAULT,
    REQUEST_TIMEOUT_MS_MAX, REQUEST_TIMEOUT_MS_MIN,
};
pub use control_store::EtcdStateStore;
pub use driver::{GRANT_RETRY_DELAY_MS_MAX, REQUESTS_QUEUED_MAX};
pub use guarded_write::{
    GuardedBatch, WriteError, BATCH_BYTES_MAX, BATCH_EXPECTATIONS_MAX, BATCH_OPS_MAX,
};
pub use keys::{ClusterKeys, KeyError, STATE_KEY_BYTES_MAX};
pub use leadership::{Leadership, Term};
pub use request::RequestError;
pub use state_read::{ReadError, StateEntry, StateSnapshot, PREFIX_KEYS_MAX};
