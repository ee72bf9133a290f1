//! The `kelp` binary: run a broker, manage topics, publish and subscribe
//! from the shell, inspect chunk files, and benchmark a broker.
//!
//! `kelp serve` runs the broker on the calling thread (the engine starts its
//! own executors); the client commands run on a tokio runtime built here,
//! so the broker never starts inside one.

mod cli;
mod commands;
mod config_file;
mod control_pages;
mod tables;
mod text;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use cli::{ChunkCommand, Cli, Command, ConfigCommand, LogFormat};

fn main() -> ExitCode {
    // Every setting of `serve` and `control` also comes from KELP_*
    // variables and a `--config` file (config_file.rs).
    let command = config_file::with_env(Cli::command());
    let (cli, log_level_given) = match config_file::matches(command, std::env::args_os().collect())
    {
        Ok(matches) => {
            let given = matches.subcommand().is_some_and(|(_, sub)| {
                sub.try_contains_id("log_level").unwrap_or(false)
                    && sub.value_source("log_level")
                        != Some(clap::parser::ValueSource::DefaultValue)
            });
            (
                Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit()),
                given,
            )
        }
        Err(config_file::ConfigError::Clap(e)) => e.exit(),
        Err(config_file::ConfigError::File(e)) => {
            eprintln!("kelp: {}", plain_sentence(&e));
            return ExitCode::from(2);
        }
    };
    // A server says where it serves and when it stops; client commands
    // print only warnings. RUST_LOG stands in for a --log-level not given.
    let (level, format) = match &cli.command {
        Command::Serve(args) => (args.log.log_level.as_str(), args.log.log_format),
        Command::Control(args) => (args.log.log_level.as_str(), args.log.log_format),
        _ => ("warn", LogFormat::Text),
    };
    let from_env = std::env::var("RUST_LOG").ok().filter(|_| !log_level_given);
    init_logging(from_env.as_deref().unwrap_or(level), format);
    let result = match cli.command {
        Command::Serve(args) => commands::serve(args),
        Command::Control(args) => commands::control(args),
        Command::Chunk {
            command: ChunkCommand::Cat { file },
        } => commands::chunk_cat(&file),
        Command::Config {
            command: ConfigCommand::Default { of },
        } => config_file::print_default(of.name()),
        Command::Auth {
            command: cli::AuthCommand::Hash,
        } => commands::auth_hash(),
        Command::Topic { command } => run_async(commands::topic(command)),
        Command::Cluster { output, broker } => run_async(commands::cluster(output, broker)),
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
            eprintln!("kelp: {}", plain_sentence(&e));
            ExitCode::FAILURE
        }
    }
}

/// Log to stderr through `tracing` (the `log` records of every crate
/// included), with `filter` (a level or RUST_LOG-style filters; a bad one
/// falls back to `info`) in `format`.
fn init_logging(filter: &str, format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// An error and its causes as one line, `what: why: why`, leaving out a
/// cause whose text the line already holds (many errors print their
/// source inside their own message as well as returning it as their
/// source, which would say it twice).
fn plain_sentence(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn run_async(command: impl std::future::Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(command)
}

#[cfg(test)]
mod tests {
    use super::plain_sentence;

    #[test]
    fn a_cause_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        /// An error that prints its source and also returns it.
        #[derive(Debug)]
        struct Failed {
            source: std::io::Error,
        }
        impl std::fmt::Display for Failed {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "read failed: {}", self.source)
            }
        }
        impl std::error::Error for Failed {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.source)
            }
        }
        let e = anyhow::Error::new(Failed { source: io }).context("cannot read stdin");
        assert_eq!(
            plain_sentence(&e),
            "cannot read stdin: read failed: No such file or directory"
        );
        let e = anyhow::anyhow!("refused").context("cannot list topics");
        assert_eq!(plain_sentence(&e), "cannot list topics: refused");
    }
}
