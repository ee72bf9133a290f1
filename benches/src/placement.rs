//! Where the load generator's threads run (`kelp bench --load-cpus`).
//!
//! The bench's own broker pins shard `i` to CPU `i`. A load generator the
//! OS places beside a shard preempts it, and the shard then waits out a
//! scheduler slice: on a 2-CPU host that, not the broker, made the p99 of
//! one batch in flight (BENCHMARKS.md). Pinning the generator to other
//! CPUs makes the figure the broker's. Every thread of this process is
//! pinned (the runtime's, and those it starts later inherit the mask); the
//! broker is started before, so it does not inherit it, and the baselines
//! run after [`Placement::release`], unpinned as before.

use std::mem::size_of;

use anyhow::{ensure, Context, Result};

/// CPUs a `cpu_set_t` can name.
pub const CPUS_MAX: usize = libc::CPU_SETSIZE as usize;

/// This process's threads pinned to some CPUs until released.
#[derive(Debug)]
pub struct Placement {
    /// The mask the process had before.
    before: libc::cpu_set_t,
}

impl Placement {
    /// Whether `cpus` names CPUs of this host, and at least one.
    pub fn check(cpus: &[usize]) -> Result<()> {
        ensure!(!cpus.is_empty(), "--load-cpus names no CPU");
        let online = std::thread::available_parallelism().map_or(1, usize::from);
        for &cpu in cpus {
            ensure!(
                cpu < online.min(CPUS_MAX),
                "--load-cpus: CPU {cpu} is not one of this host's {online} (0-{})",
                online - 1
            );
        }
        Ok(())
    }

    /// Pins every thread of this process to `cpus`.
    pub fn pin(cpus: &[usize]) -> Result<Placement> {
        Placement::check(cpus)?;
        let mut set = empty_set();
        for &cpu in cpus {
            // SAFETY: `cpu` is below CPU_SETSIZE (`check`).
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        let before = process_mask()?;
        set_every_thread(&set)?;
        Ok(Placement { before })
    }

    /// Puts every thread back on the CPUs the process had before.
    pub fn release(self) -> Result<()> {
        set_every_thread(&self.before)
    }
}

fn empty_set() -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: clears the set just made.
    unsafe { libc::CPU_ZERO(&mut set) };
    set
}

/// The calling thread's mask (the process's, as the bench never pins
/// threads one by one).
fn process_mask() -> Result<libc::cpu_set_t> {
    let mut set = empty_set();
    // SAFETY: pid 0 is the calling thread; the size is the set's.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    ensure!(
        rc == 0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    Ok(set)
}

/// Sets `set` on every thread listed in /proc/self/task. A thread that
/// ended meanwhile (ESRCH) is skipped.
fn set_every_thread(set: &libc::cpu_set_t) -> Result<()> {
    let tasks = std::fs::read_dir("/proc/self/task").context("list /proc/self/task")?;
    for task in tasks {
        let task = task.context("read /proc/self/task")?;
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: a plain syscall on a thread of this process; the size
        // is the set's.
        let rc = unsafe { libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), set) };
        let error = std::io::Error::last_os_error();
        ensure!(
            rc == 0 || error.raw_os_error() == Some(libc::ESRCH),
            "sched_setaffinity of thread {tid}: {error}"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Pinned, the threads run only on the CPU named; released, on what
    /// they had before.
    #[test]
    fn pins_and_releases_every_thread() {
        let before = process_mask().unwrap();
        let placement = Placement::pin(&[0]).unwrap();
        let pinned = process_mask().unwrap();
        // SAFETY: reading bits of a set the kernel filled.
        assert!(unsafe { libc::CPU_ISSET(0, &pinned) });
        // SAFETY: as above.
        assert_eq!(unsafe { libc::CPU_COUNT(&pinned) }, 1);
        // A thread started while pinned inherits the mask.
        let child = std::thread::spawn(|| process_mask().unwrap())
            .join()
            .unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::CPU_COUNT(&child) }, 1);
        placement.release().unwrap();
        let after = process_mask().unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::CPU_COUNT(&after) }, unsafe {
            libc::CPU_COUNT(&before)
        });
    }

    #[test]
    fn refuses_cpus_the_host_does_not_have() {
        let e = Placement::pin(&[CPUS_MAX + 1]).unwrap_err().to_string();
        assert!(e.contains("is not one of this host's"), "{e}");
        assert!(Placement::pin(&[]).is_err());
    }
}
