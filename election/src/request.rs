//! [`RequestError`]: how one etcd request failed, shared by every operation
//! that sends one, and [`bounded`], the one wrapper that puts a time limit
//! on each request.

use std::future::Future;
use std::time::Duration;

/// Why one request to etcd did not give an answer kelp can use. After
/// `Etcd` or `Timeout` on a write its outcome is unknown: etcd may have
/// applied it. Read the state again before deciding.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    #[error("etcd {operation}: {source}")]
    Etcd {
        operation: &'static str,
        #[source]
        source: etcd_client::Error,
    },
    #[error("etcd {operation}: no answer within {timeout:?}")]
    Timeout {
        operation: &'static str,
        timeout: Duration,
    },
    #[error("etcd {operation}: malformed answer: {what}")]
    Malformed {
        operation: &'static str,
        what: &'static str,
    },
    /// The candidate's request queue is full; nothing was sent.
    #[error("{queued} requests already queued for etcd; nothing was sent")]
    Busy { queued: usize },
    /// The candidate has stopped; nothing was sent.
    #[error("the candidate has stopped")]
    Stopped,
}

/// Run `request`, named `operation` in errors, for at most `timeout`.
pub(crate) async fn bounded<T>(
    operation: &'static str,
    timeout: Duration,
    request: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, RequestError> {
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(source)) => Err(RequestError::Etcd { operation, source }),
        Err(_) => Err(RequestError::Timeout { operation, timeout }),
    }
}

/// The revision in an answer's header; etcd always sends one, but it
/// comes off the network, so its absence is an error, not a panic.
pub(crate) fn header_revision(
    operation: &'static str,
    header: Option<&etcd_client::ResponseHeader>,
) -> Result<i64, RequestError> {
    match header.map(|h| h.revision()) {
        Some(revision) if revision > 0 => Ok(revision),
        _ => Err(RequestError::Malformed {
            operation,
            what: "no header revision",
        }),
    }
}
