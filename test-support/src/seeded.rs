//! [`seeded`]: the one runner of seeded simulations.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs a seeded simulation once per seed: the seed in the environment
/// variable `replay_var` alone when it is set (a replay), else each of
/// `seeds` in turn. Each seed is printed before it runs, with how to
/// replay it, and a panic in `run` is raised again naming the seed, the
/// replay and the panic's own message. Returns what each run returned, in
/// seed order.
pub fn seeded<T>(
    replay_var: &str,
    seeds: impl IntoIterator<Item = u64>,
    mut run: impl FnMut(u64) -> T,
) -> Vec<T> {
    let seeds: Vec<u64> = match std::env::var(replay_var) {
        Ok(text) => vec![text
            .parse()
            .unwrap_or_else(|e| panic!("{replay_var}={text:?} is not a seed: {e}"))],
        Err(_) => seeds.into_iter().collect(),
    };
    seeds
        .into_iter()
        .map(|seed| {
            println!("seed {seed} (replay with {replay_var}={seed})");
            match catch_unwind(AssertUnwindSafe(|| run(seed))) {
                Ok(result) => result,
                Err(panic) => panic!(
                    "seed {seed} failed: {}\nreplay with {replay_var}={seed}",
                    panic_message(&*panic)
                ),
            }
        })
        .collect()
}

/// The message a panic was raised with, empty if it was not a string.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::seeded;

    #[test]
    fn every_seed_runs_in_order() {
        let runs = seeded("KELP_SEEDED_UNIT_TEST_SEED", [3, 1, 2], |seed| seed * 10);
        assert_eq!(runs, [30, 10, 20]);
    }

    #[test]
    fn a_failure_names_its_seed_and_its_replay() {
        let failed = std::panic::catch_unwind(|| {
            seeded("KELP_SEEDED_UNIT_TEST_SEED", [5, 6], |seed| {
                assert!(seed != 6, "six is broken");
            })
        });
        let panic = failed.expect_err("seed 6 fails");
        let message = panic.downcast_ref::<String>().expect("a formatted message");
        assert!(
            message.contains("seed 6 failed: six is broken"),
            "{message}"
        );
        assert!(
            message.contains("KELP_SEEDED_UNIT_TEST_SEED=6"),
            "{message}"
        );
    }
}
