//! [`FaultFiler`]: a test double around a real filer that injects faults
//! into chosen operations, the way TigerBeetle's and redb's tests drive
//! their storage: fail the Nth call of an operation, or, from a seed, a
//! share of every call, before or after the operation took effect, or
//! slow it down. Everything else goes to the real filer underneath.
//!
//! It keeps no object local ([`filer::Filer::local_file`] answers `None`),
//! so a broker reads every chunk through [`filer::Filer::read_at`], where
//! read faults land, as it does from S3.
//!
//! A seeded plan decides each call from the seed, the operation, the path
//! and how many times that path was tried with that operation, not from
//! the order calls arrive in, so a replay with the same seed injects the
//! same faults into the same objects however the broker's threads
//! interleave (as far as the broker names the same objects).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use filer::{Filer, FilerError, ObjectPath};

/// A filer operation faults can be injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Put,
    Create,
    PutFile,
    ReadAt,
    Size,
    List,
    Delete,
}

/// What happens to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// It fails and does nothing.
    Fail,
    /// It takes effect, then reports a failure (an upload whose answer was
    /// lost; a write whose `fdatasync` failed after the bytes landed).
    FailAfter,
    /// It waits this long, then goes through.
    Slow(Duration),
}

/// Which calls are faulted.
#[derive(Debug, Clone)]
pub enum FaultPlan {
    /// The `n`th call (1 = the first) of `op` on a path containing
    /// `path_contains`.
    Nth {
        op: Op,
        n: u64,
        path_contains: String,
        fault: Fault,
    },
    /// From `seed`: each call of an operation in `faults` on a path
    /// containing `path_contains` is faulted with probability
    /// `per_mille`/1000, the fault picked among that operation's.
    Seeded {
        seed: u64,
        per_mille: u64,
        path_contains: String,
        faults: Vec<(Op, Vec<Fault>)>,
    },
}

/// The double (see the module docs).
#[derive(Debug)]
pub struct FaultFiler {
    inner: Arc<dyn Filer>,
    plan: FaultPlan,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Calls of each operation that matched the plan's path.
    calls: HashMap<Op, u64>,
    /// Attempts of each operation on each path.
    attempts: HashMap<(Op, String), u64>,
    /// Faults injected, in order: "op path fault".
    injected: Vec<String>,
}

impl FaultFiler {
    /// `inner` with `plan`'s faults.
    pub fn new(inner: Arc<dyn Filer>, plan: FaultPlan) -> FaultFiler {
        FaultFiler {
            inner,
            plan,
            state: Mutex::new(State::default()),
        }
    }

    /// Every fault injected so far, in order.
    pub fn injected(&self) -> Vec<String> {
        self.state
            .lock()
            .map(|s| s.injected.clone())
            .unwrap_or_default()
    }

    /// The fault for this call of `op` on `path`, if any (recorded).
    fn fault(&self, op: Op, path: &str) -> Option<Fault> {
        let Ok(mut state) = self.state.lock() else {
            return None;
        };
        let contains = match &self.plan {
            FaultPlan::Nth { path_contains, .. } | FaultPlan::Seeded { path_contains, .. } => {
                path_contains
            }
        };
        if !path.contains(contains.as_str()) {
            return None;
        }
        let call = {
            let calls = state.calls.entry(op).or_insert(0);
            *calls += 1;
            *calls
        };
        let attempt = {
            let attempts = state.attempts.entry((op, path.to_owned())).or_insert(0);
            *attempts += 1;
            *attempts
        };
        let fault = match &self.plan {
            FaultPlan::Nth {
                op: at, n, fault, ..
            } => (*at == op && *n == call).then_some(*fault),
            FaultPlan::Seeded {
                seed,
                per_mille,
                faults,
                ..
            } => {
                let choices = faults.iter().find(|(o, _)| *o == op).map(|(_, f)| f)?;
                let mut draw = mix(*seed ^ mix(hash_str(path) ^ ((op as u64) << 56) ^ attempt));
                let hit = draw % 1000 < *per_mille;
                draw = mix(draw);
                if hit && !choices.is_empty() {
                    let pick = usize::try_from(draw % choices.len() as u64).unwrap_or(0);
                    choices.get(pick).copied()
                } else {
                    None
                }
            }
        };
        if let Some(fault) = fault {
            state.injected.push(format!("{op:?} {path} {fault:?}"));
        }
        fault
    }
}

/// splitmix64's finaliser: a well-mixed 64-bit function of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// FNV-1a of `s`.
fn hash_str(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn injected(op: &'static str, path: &str) -> FilerError {
    FilerError::Io {
        op,
        path: path.to_owned(),
        source: std::io::Error::other("injected fault"),
    }
}

/// Run `call` under `fault`: fail before it, fail after it, or delay it.
fn apply<T>(
    fault: Option<Fault>,
    op: &'static str,
    path: &str,
    call: impl FnOnce() -> Result<T, FilerError>,
) -> Result<T, FilerError> {
    match fault {
        None => call(),
        Some(Fault::Fail) => Err(injected(op, path)),
        Some(Fault::FailAfter) => {
            call()?;
            Err(injected(op, path))
        }
        Some(Fault::Slow(by)) => {
            std::thread::sleep(by);
            call()
        }
    }
}

impl Filer for FaultFiler {
    fn put(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
        let fault = self.fault(Op::Put, path.as_str());
        apply(fault, "put", path.as_str(), || self.inner.put(path, bytes))
    }

    fn create(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
        let fault = self.fault(Op::Create, path.as_str());
        apply(fault, "create", path.as_str(), || {
            self.inner.create(path, bytes)
        })
    }

    fn read_at(&self, path: &ObjectPath, offset: u64, buf: &mut [u8]) -> Result<usize, FilerError> {
        let fault = self.fault(Op::ReadAt, path.as_str());
        apply(fault, "read", path.as_str(), || {
            self.inner.read_at(path, offset, buf)
        })
    }

    fn size(&self, path: &ObjectPath) -> Result<u64, FilerError> {
        let fault = self.fault(Op::Size, path.as_str());
        apply(fault, "size", path.as_str(), || self.inner.size(path))
    }

    fn list(&self, prefix: &ObjectPath) -> Result<Vec<ObjectPath>, FilerError> {
        let fault = self.fault(Op::List, prefix.as_str());
        apply(fault, "list", prefix.as_str(), || self.inner.list(prefix))
    }

    fn delete(&self, path: &ObjectPath) -> Result<(), FilerError> {
        let fault = self.fault(Op::Delete, path.as_str());
        apply(fault, "delete", path.as_str(), || self.inner.delete(path))
    }

    fn local_file(&self, _path: &ObjectPath) -> Option<PathBuf> {
        None
    }

    fn put_file(&self, path: &ObjectPath, local: &Path, len: u64) -> Result<(), FilerError> {
        let fault = self.fault(Op::PutFile, path.as_str());
        apply(fault, "put_file", path.as_str(), || {
            self.inner.put_file(path, local, len)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn filer(dir: &Path, plan: FaultPlan) -> FaultFiler {
        FaultFiler::new(Arc::new(filer::LocalFiler::open(dir).unwrap()), plan)
    }

    fn path(s: &str) -> ObjectPath {
        ObjectPath::new(s).unwrap()
    }

    #[test]
    fn the_nth_call_fails_before_or_after_it_takes_effect() {
        let dir = tempfile::tempdir().unwrap();
        let before = filer(
            dir.path(),
            FaultPlan::Nth {
                op: Op::Create,
                n: 2,
                path_contains: ".chunk".into(),
                fault: Fault::Fail,
            },
        );
        before.create(&path("a/1.chunk"), b"one").unwrap();
        before.create(&path("a/other"), b"not counted").unwrap();
        assert!(before.create(&path("a/2.chunk"), b"two").is_err());
        assert!(matches!(
            before.size(&path("a/2.chunk")),
            Err(FilerError::NotFound { .. })
        ));
        before.create(&path("a/2.chunk"), b"two").unwrap();
        assert_eq!(before.injected(), ["Create a/2.chunk Fail"]);

        let after = filer(
            dir.path(),
            FaultPlan::Nth {
                op: Op::Create,
                n: 1,
                path_contains: String::new(),
                fault: Fault::FailAfter,
            },
        );
        assert!(after.create(&path("b/1.chunk"), b"landed").is_err());
        assert_eq!(after.size(&path("b/1.chunk")).unwrap(), 6);
    }

    #[test]
    fn a_seeded_plan_faults_the_same_calls_whatever_their_order() {
        let dir = tempfile::tempdir().unwrap();
        let plan = FaultPlan::Seeded {
            seed: 7,
            per_mille: 300,
            path_contains: String::new(),
            faults: vec![(Op::Size, vec![Fault::Fail])],
        };
        let names: Vec<String> = (0..64).map(|i| format!("p/{i}")).collect();
        let forward = filer(dir.path(), plan.clone());
        for name in &names {
            let _ = forward.size(&path(name));
        }
        let backward = filer(dir.path(), plan);
        for name in names.iter().rev() {
            let _ = backward.size(&path(name));
        }
        let mut a = forward.injected();
        let mut b = backward.injected();
        assert!(!a.is_empty() && a.len() < names.len(), "{a:?}");
        a.sort();
        b.sort();
        assert_eq!(a, b);
    }
}
