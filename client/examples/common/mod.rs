//! What the examples share: the broker they talk to, how they end, and the
//! clock their topic names and cut points come from. Not an example itself
//! (cargo builds `examples/*.rs` and `examples/*/main.rs` only).

use std::error::Error;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use kelp_client::{Client, ClientOptions, Transport};

/// The broker an example connects to when `KELP_BROKER` names none: the
/// address `kelp serve` listens on by default.
pub const DEFAULT_BROKER: &str = "127.0.0.1:7420";

/// `KELP_BROKER`, or [`DEFAULT_BROKER`].
pub fn broker() -> String {
    std::env::var("KELP_BROKER").unwrap_or_else(|_| DEFAULT_BROKER.into())
}

/// A client of [`broker`] over TCP.
pub async fn connect(options: ClientOptions) -> Result<Client, Box<dyn Error>> {
    Ok(Client::connect(&broker(), Transport::Tcp, options).await?)
}

/// A topic name of its own for this run: `examples/<name>-<ms>`.
pub fn topic_name(name: &str) -> String {
    format!("examples/{name}-{}", now_ms())
}

/// An example's exit: success, or its error printed as a sentence (not
/// `main`'s debug print of it) and a failing status.
pub fn exit(outcome: Result<(), Box<dyn Error>>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Milliseconds since the Unix epoch (the clock records carry).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
