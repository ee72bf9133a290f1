//! SIGINT and SIGTERM, taken by one thread: block them before any other
//! thread starts (threads inherit the mask), then wait for one.

/// The termination signals, blocked in the calling thread.
#[derive(Clone, Copy)]
pub struct TerminationSignals(libc::sigset_t);

impl std::fmt::Debug for TerminationSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TerminationSignals(SIGINT, SIGTERM)")
    }
}

impl TerminationSignals {
    /// Block SIGINT and SIGTERM in this thread. Call it before starting any
    /// thread, so that every thread inherits the mask and only `wait`
    /// receives them.
    pub fn block() -> TerminationSignals {
        // SAFETY: plain libc signal-set calls on a local set.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            TerminationSignals(set)
        }
    }

    /// Wait for one of them; returns its number.
    pub fn wait(&self) -> i32 {
        let mut signal: libc::c_int = 0;
        // SAFETY: the set was built by `block`; sigwait only writes `signal`.
        unsafe {
            libc::sigwait(&self.0, &mut signal);
        }
        signal
    }
}
