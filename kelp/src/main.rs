//! The `kelp` binary: run a broker, manage topics, publish and subscribe
//! from the shell, inspect chunk files, and benchmark a broker.
//!
//! `kelp serve` runs the broker on the calling thread (the engine starts its
//! own executors); the client commands run on a tokio runtime built here,
//! so the broker never starts inside one.

mod cli;
mod commands;
mod tables;
mod text;

use std::process::ExitCode;

use clap::Parser;

use cli::{ChunkCommand, Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A broker says where it serves and when it stops; client commands
    // print only warnings. RUST_LOG overrides both.
    let default_level = match cli.command {
        Command::Serve(_) | Command::Control(_) => "info",
        _ => "warn",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_level))
        .init();
    let result = match cli.command {
        Command::Serve(args) => commands::serve(args),
        Command::Control(args) => commands::control(args),
        Command::Chunk {
            command: ChunkCommand::Cat { file },
        } => commands::chunk_cat(&file),
        Command::Topic { command } => run_async(commands::topic(command)),
        Command::Cluster { broker } => run_async(commands::cluster(broker)),
        Command::Pub(args) => run_async(commands::publish(args)),
        Command::Sub(args) => run_async(commands::subscribe(args)),
        // The bench builds its own runtimes and starts `kelp serve` from
        // this executable as its broker.
        Command::Bench(args) => kelp_benches::BrokerLauncher::this_executable_serve()
            .and_then(|launcher| kelp_benches::run(&args, &launcher)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kelp: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_async(command: impl std::future::Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(command)
}
