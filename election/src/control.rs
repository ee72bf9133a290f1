//! [`Signal`]: what the owner of a [`Candidate`](crate::Candidate) tells
//! its driver thread, through a `tokio::sync::watch` channel (sending on
//! it never blocks and needs no runtime).

/// The driver's orders; the latest one counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// Keep the lease alive and campaign.
    Run,
    /// Fault injection: send no keepalive and do not campaign, as if the
    /// process were stopped (SIGSTOP); guarded writes and reads still go
    /// out, so a test can see etcd refuse them.
    Paused,
    /// Resign (revoke the lease) and stop.
    Stop,
    /// Fault injection: stop without resigning, as a kill -9 would; the
    /// lease is left to expire. Sent only by the `fault-injection` hook.
    #[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
    Abandon,
}

impl Signal {
    pub(crate) fn is_end(self) -> bool {
        matches!(self, Signal::Stop | Signal::Abandon)
    }
}
