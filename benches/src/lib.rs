//! kelp benchmarks: the parts the load programs in `src/bin` share.

pub mod baseline;
