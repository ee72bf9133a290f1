//! The driver: the one thread per candidate that talks to etcd, on a tokio
//! current-thread runtime. It runs two things side by side:
//!
//! - the election: sessions one after another, each a granted lease kept
//!   alive beside a campaign on it, ended by a lost lease (then the next
//!   session starts) or by the owner's stop (then it resigns by revoking
//!   the lease, which deletes the leader key at once);
//! - the requests (guarded writes, reads) from the owner's threads, taken
//!   from a bounded queue and sent one at a time, in order.
//!
//! It never blocks a thread: the owner's calls wait on their own reply
//! channel, each with a time limit.

use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::Client;
use tokio::sync::{mpsc, watch};

use crate::campaign::{log_stepped_down, Campaign, RETRY_DELAY_MS};
use crate::config::CandidateConfig;
use crate::control::Signal;
use crate::guarded_write::{self, GuardedBatch, WriteError};
use crate::keys::ClusterKeys;
use crate::leadership::{LeadershipCell, Term};
use crate::lease::{Lease, LeaseLost};
use crate::request::RequestError;
use crate::state_read::{self, ReadError, StateEntry, StateSnapshot};

/// The longest wait between two lease grants while etcd fails them.
pub const GRANT_RETRY_DELAY_MS_MAX: u64 = 2_000;
const _: () = assert!(RETRY_DELAY_MS <= GRANT_RETRY_DELAY_MS_MAX);

/// Requests queued for the driver at most; past it a call fails with
/// [`RequestError::Busy`] without waiting.
pub const REQUESTS_QUEUED_MAX: usize = 64;

/// One request from the owner's threads; `expires` is when the caller
/// stops waiting for it to be *sent*, so a request that queued too long
/// is answered with a timeout instead of being sent late.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) expires: Instant,
    pub(crate) op: Op,
}

/// What a [`Request`] asks etcd for, and where its answer goes.
#[derive(Debug)]
pub(crate) enum Op {
    Write {
        term: Term,
        batch: GuardedBatch,
        reply: SyncSender<Result<i64, WriteError>>,
    },
    Get {
        key: String,
        reply: SyncSender<Result<Option<StateEntry>, ReadError>>,
    },
    GetPrefix {
        prefix: String,
        reply: SyncSender<Result<StateSnapshot, ReadError>>,
    },
}

pub(crate) struct Driver {
    pub(crate) client: Client,
    pub(crate) config: CandidateConfig,
    pub(crate) keys: ClusterKeys,
    pub(crate) cell: Arc<LeadershipCell>,
    pub(crate) signal: watch::Receiver<Signal>,
    pub(crate) requests: mpsc::Receiver<Request>,
}

impl Driver {
    pub(crate) async fn run(self) {
        let Driver {
            client,
            config,
            keys,
            cell,
            signal,
            requests,
        } = self;
        let serving = serve(client.clone(), &keys, requests, config.request_timeout());
        let election = elect(client, &config, &keys, &cell, signal);
        // The election returns when the candidate stops; serving never
        // returns on its own, so it is dropped then, and callers waiting
        // on a request still queued see the candidate stopped.
        tokio::select! {
            () = election => {}
            () = serving => {}
        }
    }
}

/// How a session ended.
enum SessionEnd {
    Lost(LeaseLost),
    Signalled(Signal),
}

async fn elect(
    mut client: Client,
    config: &CandidateConfig,
    keys: &ClusterKeys,
    cell: &LeadershipCell,
    mut signal: watch::Receiver<Signal>,
) {
    let timeout = config.request_timeout();
    let mut lost_lease: Option<Lease> = None;
    let mut grant_failures: u32 = 0;
    loop {
        // Paused (fault injection): nothing goes out, as in a stopped
        // process.
        let now = match signal.wait_for(|s| *s != Signal::Paused).await {
            Ok(s) => *s,
            Err(_) => Signal::Stop,
        };
        if now.is_end() {
            cell.set_follower(None);
            if let (Signal::Stop, Some(old)) = (now, lost_lease.take()) {
                let _ = old.revoke(&mut client, timeout).await;
            }
            return;
        }
        // A lease lost to a missed deadline may still live in etcd, and
        // with it the old leader key: revoke it so a successor (maybe this
        // candidate) need not wait for etcd to expire it.
        if let Some(old) = lost_lease.take() {
            if let Err(e) = old.revoke(&mut client, timeout).await {
                log::debug!("revoke lost lease {:x}: {e}", old.id);
            }
        }
        let lease = match Lease::grant(&mut client, config.lease_ttl_s, timeout).await {
            Ok(lease) => {
                grant_failures = 0;
                lease
            }
            Err(e) => {
                // Doubling delays: an etcd that is down is not asked (nor
                // logged about) more than every GRANT_RETRY_DELAY_MS_MAX.
                let delay_ms =
                    (RETRY_DELAY_MS << grant_failures.min(4)).min(GRANT_RETRY_DELAY_MS_MAX);
                grant_failures += 1;
                log::warn!("{}: {e}; again in {delay_ms} ms", keys.leader());
                let retry = tokio::time::sleep(Duration::from_millis(delay_ms));
                tokio::select! {
                    () = retry => {}
                    _ = signal.wait_for(|s| s.is_end()) => {}
                }
                continue;
            }
        };
        let end = {
            let keepalive = lease.keep_alive(client.clone(), cell, signal.clone(), timeout);
            let campaign = Campaign {
                client: client.clone(),
                keys,
                advertised_address: &config.advertised_address,
                lease: &lease,
                cell,
                timeout,
            }
            .run(signal.clone());
            tokio::select! {
                lost = keepalive => SessionEnd::Lost(lost),
                () = campaign => SessionEnd::Signalled(Signal::Stop),
                s = signal.wait_for(|s| s.is_end()) => {
                    SessionEnd::Signalled(s.map_or(Signal::Stop, |s| *s))
                }
            }
        };
        let term = cell.published_term();
        match end {
            SessionEnd::Lost(why) => {
                if let Some(term) = term {
                    log_stepped_down(keys, term, &why.to_string());
                }
                cell.set_follower(None);
                if why == LeaseLost::DeadlinePassed {
                    lost_lease = Some(lease);
                }
            }
            SessionEnd::Signalled(Signal::Abandon) => {
                // As a kill -9: no revoke, the lease is left to expire.
                cell.set_follower(None);
                return;
            }
            SessionEnd::Signalled(_) => {
                cell.set_follower(None);
                match lease.revoke(&mut client, timeout).await {
                    Ok(()) => {
                        if let Some(term) = term {
                            log_stepped_down(keys, term, "resigned (the lease is revoked)");
                        }
                    }
                    Err(e) => log::warn!(
                        "{}: resign failed, the lease will expire in {} s: {e}",
                        keys.leader(),
                        config.lease_ttl_s
                    ),
                }
                return;
            }
        }
    }
}

async fn serve(
    mut client: Client,
    keys: &ClusterKeys,
    mut requests: mpsc::Receiver<Request>,
    timeout: Duration,
) {
    while let Some(Request { expires, op }) = requests.recv().await {
        match op {
            Op::Write { term, batch, reply } => {
                let work = guarded_write::write(&mut client, keys, term, &batch, timeout);
                answer_unless_late(reply, expires, timeout, work).await;
            }
            Op::Get { key, reply } => {
                let work = state_read::get(&mut client, keys, &key, timeout);
                answer_unless_late(reply, expires, timeout, work).await;
            }
            Op::GetPrefix { prefix, reply } => {
                let work = state_read::get_prefix(&mut client, keys, &prefix, timeout);
                answer_unless_late(reply, expires, timeout, work).await;
            }
        }
    }
    std::future::pending::<()>().await
}

/// Answer `reply` with what `work` gives, unless the request waited in the
/// queue past `expires`: a caller that gave up must not have it carried
/// out after all. A reply nobody waits for any more is dropped.
async fn answer_unless_late<T, E: From<RequestError>>(
    reply: SyncSender<Result<T, E>>,
    expires: Instant,
    timeout: Duration,
    work: impl std::future::Future<Output = Result<T, E>>,
) {
    let answer = if Instant::now() >= expires {
        Err(RequestError::Timeout {
            operation: "queued request",
            timeout,
        }
        .into())
    } else {
        work.await
    };
    let _ = reply.try_send(answer);
}
