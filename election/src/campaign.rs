//! [`Campaign`]: standing for leader on one lease, and following whoever
//! leads.
//!
//! The leader key is taken with one create-if-absent txn (not etcd's
//! election API: one key whose holder is its value is simpler to read,
//! document and fence on):
//!
//! ```text
//! If   create_revision(/kelp/<c>/control/leader) == 0
//! Then put(/kelp/<c>/control/leader, <advertised address>, lease = <our lease>)
//! ```
//!
//! The txn's revision is the key's `create_revision`, the new term. A
//! candidate that loses reads the key (the leader's address), then watches
//! it from the revision it read; any event on it (the leader resigned, its
//! lease expired, someone deleted it) starts the next attempt. A leader
//! watches its own key the same way, so a key deleted under it ends its
//! term at once. An attempt that finds the key held by its own lease (a
//! txn whose answer was lost) takes that term.

use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp, WatchOptions};
use tokio::sync::watch;

use crate::control::Signal;
use crate::keys::ClusterKeys;
use crate::leadership::{LeadershipCell, Term};
use crate::lease::Lease;
use crate::request::{bounded, header_revision, RequestError};

/// How long to wait before the next attempt after a failed request.
pub const RETRY_DELAY_MS: u64 = 200;
/// Even with no event, the leader key is read again this often, in case
/// a watch stream died without a word.
pub const LEADER_RECHECK_MS: u64 = 5_000;

/// Who holds the leader key, as read at `revision`.
#[derive(Debug)]
struct Holder {
    kind: HolderKind,
    revision: i64,
}

#[derive(Debug, PartialEq, Eq)]
enum HolderKind {
    Us(Term),
    Other(Option<String>),
    Nobody,
}

/// One candidate's campaign on one lease.
pub(crate) struct Campaign<'a> {
    pub(crate) client: Client,
    pub(crate) keys: &'a ClusterKeys,
    pub(crate) advertised_address: &'a str,
    pub(crate) lease: &'a Lease,
    pub(crate) cell: &'a LeadershipCell,
    pub(crate) timeout: Duration,
}

impl Campaign<'_> {
    /// Campaign, and follow or lead, until the future is dropped (the
    /// session ends when its lease is lost or the candidate stops).
    pub(crate) async fn run(mut self, mut signal: watch::Receiver<Signal>) {
        loop {
            // Paused (fault injection): do nothing, as a stopped process.
            if signal.wait_for(|s| *s != Signal::Paused).await.is_err() {
                return;
            }
            let holder = match self.attempt().await {
                Ok(holder) => holder,
                Err(e) => {
                    log::warn!("campaign for {}: {e}", self.keys.leader());
                    tokio::time::sleep(Duration::from_millis(RETRY_DELAY_MS)).await;
                    continue;
                }
            };
            match holder.kind {
                HolderKind::Us(term) => {
                    if self.cell.published_term() != Some(term) {
                        if let Some(old) = self.cell.published_term() {
                            log_stepped_down(self.keys, old, "the leader key was recreated");
                        }
                        log::info!(
                            "kelp election: {} became leader of {} in term {term}",
                            self.advertised_address,
                            self.keys.leader()
                        );
                        self.cell.set_leader(term, self.lease.deadline.get());
                    }
                }
                HolderKind::Other(leader) => {
                    if let Some(old) = self.cell.published_term() {
                        log_stepped_down(self.keys, old, "another instance holds the leader key");
                    }
                    self.cell.set_follower(leader);
                }
                // Deleted between the txn and the read: try again now.
                HolderKind::Nobody => continue,
            }
            if let Err(e) = self.wait_for_change(holder.revision + 1).await {
                log::warn!("watch on {}: {e}", self.keys.leader());
                tokio::time::sleep(Duration::from_millis(RETRY_DELAY_MS)).await;
            }
        }
    }

    /// Try to take the leader key; else read who holds it.
    async fn attempt(&mut self) -> Result<Holder, RequestError> {
        let leader_key = self.keys.leader();
        let take = Txn::new()
            .when([Compare::create_revision(leader_key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                leader_key,
                self.advertised_address,
                Some(PutOptions::new().with_lease(self.lease.id)),
            )]);
        let answer = bounded("campaign txn", self.timeout, self.client.txn(take)).await?;
        let revision = header_revision("campaign txn", answer.header())?;
        if answer.succeeded() {
            return Ok(Holder {
                kind: HolderKind::Us(Term::new(revision, self.lease.id)),
                revision,
            });
        }
        let read = bounded(
            "leader key read",
            self.timeout,
            self.client.get(leader_key, None),
        )
        .await?;
        let revision = header_revision("leader key read", read.header())?;
        let kind = match read.kvs().first() {
            None => HolderKind::Nobody,
            Some(kv) if kv.lease() == self.lease.id => {
                HolderKind::Us(Term::new(kv.create_revision(), self.lease.id))
            }
            Some(kv) => HolderKind::Other(match kv.value_str() {
                Ok(address) => Some(address.to_owned()),
                Err(_) => {
                    log::warn!("{leader_key} holds a value that is not UTF-8");
                    None
                }
            }),
        };
        Ok(Holder { kind, revision })
    }

    /// Return at the first event on the leader key at or after
    /// `start_revision` (or when the watch is cancelled, e.g. compacted),
    /// or after [`LEADER_RECHECK_MS`] with none.
    async fn wait_for_change(&mut self, start_revision: i64) -> Result<(), RequestError> {
        let options = WatchOptions::new().with_start_revision(start_revision);
        let mut stream = bounded(
            "leader key watch",
            self.timeout,
            self.client.watch(self.keys.leader(), Some(options)),
        )
        .await?;
        let recheck_at = Instant::now() + Duration::from_millis(LEADER_RECHECK_MS);
        loop {
            let message = tokio::time::timeout_at(recheck_at.into(), stream.message()).await;
            match message {
                Err(_) => return Ok(()),
                Ok(Err(source)) => {
                    return Err(RequestError::Etcd {
                        operation: "leader key watch",
                        source,
                    })
                }
                Ok(Ok(None)) => {
                    return Err(RequestError::Malformed {
                        operation: "leader key watch",
                        what: "the watch stream ended",
                    })
                }
                Ok(Ok(Some(answer))) => {
                    if answer.canceled() || !answer.events().is_empty() {
                        return Ok(());
                    }
                }
            }
        }
    }
}

pub(crate) fn log_stepped_down(keys: &ClusterKeys, term: Term, why: &str) {
    log::info!(
        "kelp election: stepped down as leader of {} in term {term}: {why}",
        keys.leader()
    );
}
