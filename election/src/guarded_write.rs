//! [`GuardedBatch`]: state writes that etcd applies only while the writer's
//! term still holds, all of them or none.
//!
//! Every write is one txn:
//!
//! ```text
//! If   create_revision(/kelp/<c>/control/leader) == term.revision
//!  and lease(/kelp/<c>/control/leader)           == term.lease_id
//!  and mod_revision(<key>) == <expected>          (for each expectation)
//! Then put / delete of each state key, in order
//! ```
//!
//! A deposed leader's key is gone (its lease expired or was revoked) or
//! belongs to a newer term with another `create_revision`, so the first
//! compare fails and nothing is applied. The caller's term is sent as
//! given: no local belief about leadership is consulted, etcd decides.

use std::collections::HashSet;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};

use crate::keys::{ClusterKeys, KeyError};
use crate::leadership::Term;
use crate::request::{bounded, header_revision, RequestError};

/// Puts and deletes in one batch (etcd's default `--max-txn-ops` is 128).
pub const BATCH_OPS_MAX: usize = 64;
/// Expected revisions in one batch.
pub const BATCH_EXPECTATIONS_MAX: usize = 64;
/// Key and value bytes in one batch (etcd's default request limit is
/// 1.5 MiB).
pub const BATCH_BYTES_MAX: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
enum BatchOp {
    Put { key: String, value: Vec<u8> },
    Delete { key: String },
}

impl BatchOp {
    fn key(&self) -> &str {
        match self {
            BatchOp::Put { key, .. } | BatchOp::Delete { key } => key,
        }
    }
}

/// Several state writes applied in one txn, with optional per-key
/// revision expectations for optimistic updates. Keys are relative to
/// `/kelp/<cluster>/state/`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardedBatch {
    ops: Vec<BatchOp>,
    expectations: Vec<(String, i64)>,
}

impl GuardedBatch {
    pub fn new() -> GuardedBatch {
        GuardedBatch::default()
    }

    /// Set `key` to `value`.
    pub fn put(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> GuardedBatch {
        self.ops.push(BatchOp::Put {
            key: key.into(),
            value: value.into(),
        });
        self
    }

    /// Delete `key` (nothing happens if it is absent).
    pub fn delete(mut self, key: impl Into<String>) -> GuardedBatch {
        self.ops.push(BatchOp::Delete { key: key.into() });
        self
    }

    /// Apply the batch only if `key`'s `mod_revision` is `mod_revision`
    /// (0: only if `key` is absent).
    pub fn expect_mod_revision(
        mut self,
        key: impl Into<String>,
        mod_revision: i64,
    ) -> GuardedBatch {
        self.expectations.push((key.into(), mod_revision));
        self
    }

    /// Puts and deletes in the batch.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The txn for `term`, after checking every limit.
    fn txn(&self, keys: &ClusterKeys, term: Term) -> Result<Txn, WriteError> {
        if self.ops.is_empty() {
            return Err(WriteError::Empty);
        }
        if self.ops.len() > BATCH_OPS_MAX || self.expectations.len() > BATCH_EXPECTATIONS_MAX {
            return Err(WriteError::TooManyOps {
                ops: self.ops.len(),
                expectations: self.expectations.len(),
            });
        }
        let bytes: usize = self
            .ops
            .iter()
            .map(|op| match op {
                BatchOp::Put { key, value } => key.len() + value.len(),
                BatchOp::Delete { key } => key.len(),
            })
            .sum();
        if bytes > BATCH_BYTES_MAX {
            return Err(WriteError::TooLarge { bytes });
        }
        // etcd refuses a txn that writes one key twice.
        let mut seen = HashSet::new();
        if let Some(op) = self.ops.iter().find(|op| !seen.insert(op.key())) {
            return Err(WriteError::DuplicateKey {
                key: op.key().to_owned(),
            });
        }
        let leader = keys.leader();
        let mut compares = vec![
            Compare::create_revision(leader, CompareOp::Equal, term.revision()),
            Compare::lease(leader, CompareOp::Equal, term.lease_id()),
        ];
        for (key, mod_revision) in &self.expectations {
            compares.push(Compare::mod_revision(
                keys.state(key)?,
                CompareOp::Equal,
                *mod_revision,
            ));
        }
        let mut ops = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            ops.push(match op {
                BatchOp::Put { key, value } => TxnOp::put(keys.state(key)?, value.clone(), None),
                BatchOp::Delete { key } => TxnOp::delete(keys.state(key)?, None),
            });
        }
        Ok(Txn::new().when(compares).and_then(ops))
    }
}

/// Apply `batch` under `term`; the revision it was applied at.
pub(crate) async fn write(
    client: &mut Client,
    keys: &ClusterKeys,
    term: Term,
    batch: &GuardedBatch,
    timeout: Duration,
) -> Result<i64, WriteError> {
    let txn = batch.txn(keys, term)?;
    let answer = bounded("guarded write txn", timeout, client.txn(txn)).await?;
    let revision = header_revision("guarded write txn", answer.header())?;
    if answer.succeeded() {
        return Ok(revision);
    }
    // Which compare failed? A leader key still created at the term's
    // revision on the term's lease existed when the txn ran (that
    // revision can never be created again), so then an expectation failed.
    let read = bounded("leader key read", timeout, client.get(keys.leader(), None)).await?;
    let holder = read.kvs().first();
    let still_ours = holder
        .is_some_and(|kv| kv.create_revision() == term.revision() && kv.lease() == term.lease_id());
    if still_ours && !batch.expectations.is_empty() {
        Err(WriteError::Conflict { term })
    } else {
        Err(WriteError::NotLeader {
            term,
            leader: holder
                .filter(|_| !still_ours)
                .and_then(|kv| kv.value_str().ok().map(str::to_owned)),
        })
    }
}

/// Why a guarded write was not applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// `term` is over: the leader key is gone or belongs to a newer term.
    /// Nothing was applied.
    #[error("not the leader: term {term} is over (the leader key is held by {leader:?})")]
    NotLeader { term: Term, leader: Option<String> },
    /// The term holds, but a key's revision was not the one expected.
    /// Nothing was applied.
    #[error("term {term} holds, but an expected mod_revision did not match; nothing applied")]
    Conflict { term: Term },
    #[error("an empty batch")]
    Empty,
    #[error(
        "{ops} ops and {expectations} expectations in one batch: at most \
         {BATCH_OPS_MAX} and {BATCH_EXPECTATIONS_MAX}"
    )]
    TooManyOps { ops: usize, expectations: usize },
    #[error("{bytes} bytes of keys and values in one batch: at most {BATCH_BYTES_MAX}")]
    TooLarge { bytes: usize },
    #[error("state key {key:?} is written twice in one batch")]
    DuplicateKey { key: String },
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The request failed; after `Etcd` or `Timeout` the outcome is
    /// unknown.
    #[error(transparent)]
    Request(#[from] RequestError),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term() -> Term {
        Term::new(5, 9)
    }

    #[test]
    fn limits_are_checked_before_anything_is_sent() {
        let keys = ClusterKeys::new("c");
        assert!(matches!(
            GuardedBatch::new().txn(&keys, term()),
            Err(WriteError::Empty)
        ));
        let mut many = GuardedBatch::new();
        for i in 0..=BATCH_OPS_MAX {
            many = many.put(format!("k{i}"), "v");
        }
        assert!(matches!(
            many.txn(&keys, term()),
            Err(WriteError::TooManyOps { .. })
        ));
        let big = GuardedBatch::new().put("k", vec![0u8; BATCH_BYTES_MAX]);
        assert!(matches!(
            big.txn(&keys, term()),
            Err(WriteError::TooLarge { .. })
        ));
        let twice = GuardedBatch::new().put("k", "1").delete("k");
        assert!(matches!(
            twice.txn(&keys, term()),
            Err(WriteError::DuplicateKey { .. })
        ));
        let bad_key = GuardedBatch::new().put("", "1");
        assert!(matches!(
            bad_key.txn(&keys, term()),
            Err(WriteError::Key(_))
        ));
        assert!(GuardedBatch::new()
            .put("a", "1")
            .delete("b")
            .expect_mod_revision("a", 0)
            .txn(&keys, term())
            .is_ok());
    }
}
