//! [`Lease`]: the etcd lease a candidate's leader key hangs on, granted
//! with the configured TTL and kept alive every third of it.
//!
//! The lease's *deadline* is the instant it may be gone: the time the last
//! answered keepalive was sent plus the TTL etcd answered with. etcd
//! counts its own expiry from when it received that keepalive, which is
//! later, so the deadline is never past etcd's expiry. Once the deadline
//! passes without a newer answer, the lease is treated as lost, whether
//! or not etcd has expired it yet. A keepalive that failed or timed out
//! drops its stream, so a late answer to it is never mistaken for a
//! fresh one.

use std::cell::Cell;
use std::time::{Duration, Instant};

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tokio::sync::watch;

use crate::control::Signal;
use crate::leadership::LeadershipCell;
use crate::request::{bounded, RequestError};

/// One granted lease.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) id: i64,
    ttl: Duration,
    /// When the lease may be gone; moved on by every answered keepalive.
    pub(crate) deadline: Cell<Instant>,
}

/// Why a lease stopped being kept alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseLost {
    /// No keepalive was answered before the deadline.
    DeadlinePassed,
    /// etcd answered that it no longer holds the lease.
    Expired,
}

impl std::fmt::Display for LeaseLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LeaseLost::DeadlinePassed => "no keepalive answered within the lease TTL",
            LeaseLost::Expired => "etcd says the lease has expired",
        })
    }
}

impl Lease {
    /// Ask etcd for a lease of `ttl_s` seconds.
    pub(crate) async fn grant(
        client: &mut Client,
        ttl_s: u32,
        timeout: Duration,
    ) -> Result<Lease, RequestError> {
        let sent = Instant::now();
        let answer = bounded(
            "lease grant",
            timeout,
            client.lease_grant(i64::from(ttl_s), None),
        )
        .await?;
        let ttl = positive_ttl(answer.ttl()).ok_or(RequestError::Malformed {
            operation: "lease grant",
            what: "a TTL under 1 s",
        })?;
        Ok(Lease {
            id: answer.id(),
            ttl,
            deadline: Cell::new(sent + ttl),
        })
    }

    /// Keep the lease alive until it is lost, publishing every new
    /// deadline to `cell`. While `signal` says [`Signal::Paused`] no
    /// keepalive is sent (fault injection), so the lease runs out.
    pub(crate) async fn keep_alive(
        &self,
        mut client: Client,
        cell: &LeadershipCell,
        signal: watch::Receiver<Signal>,
        timeout: Duration,
    ) -> LeaseLost {
        let interval = self.ttl / 3;
        let mut stream: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
        let mut next_refresh = Instant::now() + interval;
        loop {
            let deadline = self.deadline.get();
            tokio::time::sleep_until(next_refresh.min(deadline).into()).await;
            let now = Instant::now();
            if now >= self.deadline.get() {
                return LeaseLost::DeadlinePassed;
            }
            if now < next_refresh {
                continue;
            }
            next_refresh = now + interval;
            if *signal.borrow() == Signal::Paused {
                continue;
            }
            match self.refresh(&mut client, &mut stream, timeout).await {
                Ok(Some(deadline)) => {
                    self.deadline.set(deadline);
                    cell.extend(self.id, deadline);
                }
                Ok(None) => return LeaseLost::Expired,
                Err(e) => {
                    log::warn!("lease {:x}: keepalive failed, retrying: {e}", self.id);
                    stream = None;
                }
            }
        }
    }

    /// Send one keepalive and read its answer: the new deadline, or `None`
    /// if etcd no longer holds the lease.
    async fn refresh(
        &self,
        client: &mut Client,
        stream: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
        timeout: Duration,
    ) -> Result<Option<Instant>, RequestError> {
        let sent = Instant::now();
        let Some((keeper, answers)) = stream else {
            // Opening the stream sends one keepalive and reads its answer;
            // etcd-client fails it with LeaseKeepAliveError when that
            // answer's TTL is 0, i.e. etcd does not know the lease.
            return match bounded("lease keepalive", timeout, client.lease_keep_alive(self.id)).await
            {
                Ok(opened) => {
                    *stream = Some(opened);
                    Ok(Some(sent + self.ttl))
                }
                Err(RequestError::Etcd {
                    source: etcd_client::Error::LeaseKeepAliveError(_),
                    ..
                }) => Ok(None),
                Err(e) => Err(e),
            };
        };
        let exchange = async {
            keeper.keep_alive().await?;
            answers.message().await
        };
        match bounded("lease keepalive", timeout, exchange).await? {
            Some(answer) => Ok(positive_ttl(answer.ttl()).map(|ttl| sent + ttl)),
            None => Err(RequestError::Malformed {
                operation: "lease keepalive",
                what: "the keepalive stream ended",
            }),
        }
    }

    /// Revoke the lease: etcd deletes every key attached to it at once.
    pub(crate) async fn revoke(
        &self,
        client: &mut Client,
        timeout: Duration,
    ) -> Result<(), RequestError> {
        bounded("lease revoke", timeout, client.lease_revoke(self.id))
            .await
            .map(drop)
    }
}

fn positive_ttl(ttl_s: i64) -> Option<Duration> {
    u64::try_from(ttl_s)
        .ok()
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}
