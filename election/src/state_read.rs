//! Reads of the cluster state under `/kelp/<cluster>/state/`, for loading
//! it: one key ([`get`]) or every key under a prefix at one revision
//! ([`get_prefix`]). Reads are linearizable (etcd's default), so a new
//! leader sees every write its predecessors' terms applied.

use std::time::Duration;

use etcd_client::{Client, GetOptions, KeyValue};

use crate::keys::{ClusterKeys, KeyError};
use crate::request::{bounded, header_revision, RequestError};

/// Keys one prefix read may return; a larger state needs paging, which
/// this crate does not do yet.
pub const PREFIX_KEYS_MAX: usize = 10_000;

/// One state key as etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateEntry {
    /// Relative to `/kelp/<cluster>/state/`.
    pub key: String,
    pub value: Vec<u8>,
    pub create_revision: i64,
    /// What [`GuardedBatch::expect_mod_revision`](crate::GuardedBatch::expect_mod_revision)
    /// compares.
    pub mod_revision: i64,
}

/// Every key under a prefix, as of one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateSnapshot {
    /// The etcd revision the read saw; a watch from `revision + 1` misses
    /// nothing.
    pub revision: i64,
    /// In key order.
    pub entries: Vec<StateEntry>,
}

pub(crate) async fn get(
    client: &mut Client,
    keys: &ClusterKeys,
    key: &str,
    timeout: Duration,
) -> Result<Option<StateEntry>, ReadError> {
    let full = keys.state(key)?;
    let answer = bounded("state read", timeout, client.get(full, None)).await?;
    answer.kvs().first().map(|kv| entry(keys, kv)).transpose()
}

pub(crate) async fn get_prefix(
    client: &mut Client,
    keys: &ClusterKeys,
    prefix: &str,
    timeout: Duration,
) -> Result<StateSnapshot, ReadError> {
    let full = keys.state_range(prefix)?;
    let limit = i64::try_from(PREFIX_KEYS_MAX + 1).unwrap_or(i64::MAX);
    let options = GetOptions::new().with_prefix().with_limit(limit);
    let answer = bounded(
        "state prefix read",
        timeout,
        client.get(full, Some(options)),
    )
    .await?;
    let revision = header_revision("state prefix read", answer.header())?;
    if answer.kvs().len() > PREFIX_KEYS_MAX || answer.more() {
        return Err(ReadError::TooManyKeys {
            prefix: prefix.to_owned(),
        });
    }
    let entries = answer
        .kvs()
        .iter()
        .map(|kv| entry(keys, kv))
        .collect::<Result<_, _>>()?;
    Ok(StateSnapshot { revision, entries })
}

fn entry(keys: &ClusterKeys, kv: &KeyValue) -> Result<StateEntry, ReadError> {
    let key = keys
        .relative(kv.key())
        .ok_or(ReadError::Request(RequestError::Malformed {
            operation: "state read",
            what: "a key outside the state prefix, or not UTF-8",
        }))?;
    Ok(StateEntry {
        key: key.to_owned(),
        value: kv.value().to_vec(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
    })
}

/// Why a state read failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    #[error("more than {PREFIX_KEYS_MAX} state keys under {prefix:?}")]
    TooManyKeys { prefix: String },
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Request(#[from] RequestError),
}
