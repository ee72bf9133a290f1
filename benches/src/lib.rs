//! kelp benchmarks: the load generator behind `kelp bench` (scenarios,
//! the broker child process, host limits, reports, repeat summaries and
//! plots), and the parts the load programs in `src/bin` share.

pub mod baseline;
pub mod bench;
pub mod bench_args;
pub mod broker_process;
pub mod by_reference;
pub mod frames;
pub mod host_limits;
pub mod load;
pub mod meter;
pub mod placement;
pub mod plot;
pub mod report;
pub mod summary;
pub mod workload;

pub use bench::{run, BenchArgs};
pub use broker_process::BrokerLauncher;
