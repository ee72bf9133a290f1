//! The priority of a shard's blocking-pool threads: below the shards'.
//!
//! The blocking pool makes spare buffers (and brings their pages in), maps
//! chunk files and reads cold pages: work that is never on a request's
//! path when it is done on time, but that, unpinned, lands on a shard's
//! core and takes whole scheduler slices (milliseconds) from it. At a
//! lower priority a shard that has work preempts it at once; the pool
//! still gets every cycle the shards leave. The filer lanes keep normal
//! priority: a `durable` ack waits on their uploads.

use std::cell::Cell;

/// The nice value of a blocking-pool thread (CFS gives a nice-0 shard
/// about nine times its share of a contended core).
pub(crate) const BACKGROUND_NICE: libc::c_int = 10;

thread_local! {
    static LOWERED: Cell<bool> = const { Cell::new(false) };
}

/// Lower the calling thread's priority to [`BACKGROUND_NICE`] (or leave
/// it where it is if lower already), once per thread. A failure only leaves the thread at its priority: logged.
pub(crate) fn lower_this_thread() {
    if LOWERED.with(|l| l.replace(true)) {
        return;
    }
    // SAFETY: plain syscalls; `gettid` names the calling thread, which
    // `setpriority(PRIO_PROCESS, tid)` on Linux changes alone.
    let rc = unsafe {
        let tid = libc::gettid() as libc::id_t;
        // Never above the thread's own (a broker started under `nice`
        // keeps its pool at least as low).
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid).max(BACKGROUND_NICE);
        libc::setpriority(libc::PRIO_PROCESS, tid, nice)
    };
    if rc != 0 {
        log::debug!(
            "lowering a blocking-pool thread's priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lowered_thread_runs_at_the_background_nice_and_others_do_not() {
        let nice_of_this_thread = || {
            // SAFETY: plain syscalls on the calling thread.
            unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
        };
        let before = nice_of_this_thread();
        let lowered = std::thread::spawn(move || {
            lower_this_thread();
            lower_this_thread();
            nice_of_this_thread()
        })
        .join()
        .expect("thread");
        assert_eq!(lowered, BACKGROUND_NICE.max(before));
        assert_eq!(nice_of_this_thread(), before, "only the calling thread");
    }
}
