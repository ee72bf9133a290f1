//! `kelp serve --config FILE` and `kelp control --config FILE`: every
//! flag of those commands as a TOML key (`--data-dir` is `data_dir`), and
//! every flag as a `KELP_*` environment variable (`KELP_DATA_DIR`).
//!
//! Precedence, highest first: the command line, the environment, the file,
//! the built-in default. A key the command does not have is an error that
//! names it, so a typo never passes silently. `kelp config default`
//! prints a commented file with every key and its default
//! (docs/operations.md, "Configuration").

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;

use anyhow::{anyhow, bail, Context};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

/// The commands that take `--config` and `KELP_*` variables.
pub const CONFIGURABLE: [&str; 2] = ["serve", "control"];

/// Arguments every command has that are not settings.
const NOT_SETTINGS: [&str; 3] = ["help", "version", "config"];

/// Bytes of a config file read at most: a file this large is a mistake.
const CONFIG_FILE_BYTES_MAX: u64 = 1 << 20;

/// The environment variable of a setting: `KELP_` and its key in capitals.
fn env_name(id: &str) -> String {
    format!("KELP_{}", id.to_ascii_uppercase())
}

/// `command` with every setting of the configurable subcommands readable
/// from its `KELP_*` variable (unless it names one of its own).
pub fn with_env(command: Command) -> Command {
    CONFIGURABLE.iter().fold(command, |command, name| {
        command.mut_subcommand(name, |sub| {
            sub.mut_args(|arg| {
                if arg.get_env().is_some() || NOT_SETTINGS.contains(&arg.get_id().as_str()) {
                    return arg;
                }
                // Built once per process at start: leaking the few names
                // gives clap the 'static strings it keeps.
                let name: &'static str =
                    Box::leak(env_name(arg.get_id().as_str()).into_boxed_str());
                arg.env(name)
            })
        })
    })
}

/// Parse `args` (the program's, first the binary) with `command`, the
/// settings of a configurable subcommand's `--config` file filled in where
/// neither the command line nor the environment gave them.
pub fn matches(command: Command, args: Vec<OsString>) -> Result<ArgMatches, ConfigError> {
    let first = command
        .clone()
        .try_get_matches_from(&args)
        .map_err(ConfigError::Clap)?;
    let Some((name, sub)) = first.subcommand() else {
        return Ok(first);
    };
    if !CONFIGURABLE.contains(&name) {
        return Ok(first);
    }
    let Some(file) = sub.get_one::<std::path::PathBuf>("config") else {
        return Ok(first);
    };
    let sub_command = command
        .find_subcommand(name)
        .ok_or_else(|| ConfigError::File(anyhow!("no subcommand {name}")))?;
    let table = read_table(file).map_err(ConfigError::File)?;
    let injected = file_args(sub_command, sub, &table)
        .with_context(|| format!("config file {}", file.display()))
        .map_err(ConfigError::File)?;
    // The file's settings go right after the subcommand's name: it takes
    // no positional arguments, so they read as its flags.
    let position = args
        .iter()
        .position(|a| a.to_str() == Some(name))
        .ok_or_else(|| ConfigError::File(anyhow!("no {name} in the arguments")))?;
    let mut with_file = args[..=position].to_vec();
    with_file.extend(injected);
    with_file.extend_from_slice(&args[position + 1..]);
    command.try_get_matches_from(with_file).map_err(|e| {
        ConfigError::File(anyhow!(
            "config file {}: {}",
            file.display(),
            e.kind_message()
        ))
    })
}

/// Why the command line and its config file did not parse.
#[derive(Debug)]
pub enum ConfigError {
    /// The command line itself (or `--help`, `--version`): clap prints it.
    Clap(clap::Error),
    /// The config file.
    File(anyhow::Error),
}

/// clap's own message of an error, without its usage lines.
trait KindMessage {
    fn kind_message(&self) -> String;
}

impl KindMessage for clap::Error {
    fn kind_message(&self) -> String {
        let text = self.to_string();
        let first = text.lines().next().unwrap_or("").trim();
        first.strip_prefix("error: ").unwrap_or(first).to_string()
    }
}

fn read_table(path: &Path) -> anyhow::Result<toml::Table> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("config file {}", path.display()))?
        .len();
    if size > CONFIG_FILE_BYTES_MAX {
        bail!(
            "config file {}: {size} bytes, more than the {CONFIG_FILE_BYTES_MAX} a config file may have",
            path.display()
        );
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("config file {}", path.display()))?;
    text.parse::<toml::Table>()
        .with_context(|| format!("config file {}", path.display()))
}

/// The arguments `table` stands for, for the settings `given` did not get
/// from the command line or the environment.
fn file_args(
    command: &Command,
    given: &ArgMatches,
    table: &toml::Table,
) -> anyhow::Result<Vec<OsString>> {
    let unknown: BTreeSet<&str> = table
        .keys()
        .map(String::as_str)
        .filter(|key| setting(command, key).is_none())
        .collect();
    if !unknown.is_empty() {
        bail!(
            "unknown key{} {} (`kelp config default {}` lists every key)",
            if unknown.len() == 1 { "" } else { "s" },
            unknown.into_iter().collect::<Vec<_>>().join(", "),
            command.get_name()
        );
    }
    let mut args = Vec::new();
    for (key, value) in table {
        let Some(arg) = setting(command, key) else {
            continue;
        };
        let id = arg.get_id().as_str();
        if matches!(
            given.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let long = arg
            .get_long()
            .ok_or_else(|| anyhow!("key {key}: not a flag"))?;
        push_value(&mut args, long, arg, key, value)?;
    }
    Ok(args)
}

/// The setting `key` names: an argument of `command` that is not help,
/// version or the config file itself.
fn setting<'c>(command: &'c Command, key: &str) -> Option<&'c Arg> {
    command
        .get_arguments()
        .find(|a| a.get_id().as_str() == key && !NOT_SETTINGS.contains(&key))
}

fn push_value(
    args: &mut Vec<OsString>,
    long: &str,
    arg: &Arg,
    key: &str,
    value: &toml::Value,
) -> anyhow::Result<()> {
    let flag = format!("--{long}");
    if matches!(arg.get_action(), ArgAction::SetTrue) {
        match value {
            toml::Value::Boolean(true) => args.push(flag.into()),
            toml::Value::Boolean(false) => {}
            other => bail!("key {key}: true or false, not {other}"),
        }
        return Ok(());
    }
    let one = |value: &toml::Value| -> anyhow::Result<String> {
        Ok(match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => bail!("key {key}: a string, number or boolean, not {other}"),
        })
    };
    // A value that is the default is the same as no value, and must not
    // count as given (a default-valued `cluster` would otherwise demand
    // the `etcd` it goes with).
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if let (
        toml::Value::String(_)
        | toml::Value::Integer(_)
        | toml::Value::Float(_)
        | toml::Value::Boolean(_),
        [default],
    ) = (value, defaults.as_slice())
    {
        if one(value)? == *default {
            return Ok(());
        }
    }
    match value {
        toml::Value::Array(values) => {
            for v in values {
                args.push(flag.clone().into());
                args.push(one(v)?.into());
            }
        }
        v => {
            args.push(flag.into());
            args.push(one(v)?.into());
        }
    }
    Ok(())
}

/// `kelp config default NAME`: the default file of subcommand `name` on
/// stdout.
pub fn print_default(name: &str) -> anyhow::Result<()> {
    let command = with_env(<crate::cli::Cli as clap::CommandFactory>::command());
    let sub = command
        .find_subcommand(name)
        .ok_or_else(|| anyhow!("no subcommand {name}"))?;
    use std::io::Write;
    std::io::stdout()
        .write_all(default_file(sub).as_bytes())
        .context("write to stdout")
}

/// A config file for `command` with every setting: its help as comments,
/// then `key = default` (commented out where it has no default).
pub fn default_file(command: &Command) -> String {
    let mut out = format!(
        "# kelp {} --config FILE: every setting with its default.\n\
         # The command line and KELP_* variables (named after each key, in\n\
         # capitals) override this file; a key not listed here is an error.\n",
        command.get_name()
    );
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        if NOT_SETTINGS.contains(&id) || arg.is_hide_set() {
            continue;
        }
        out.push('\n');
        let help = arg
            .get_long_help()
            .or_else(|| arg.get_help())
            .map(ToString::to_string)
            .unwrap_or_default();
        for line in wrap(&help, 76) {
            out.push_str(&format!("# {line}\n"));
        }
        out.push_str(&format!(
            "# (--{} or {})\n",
            arg.get_long().unwrap_or(id),
            env_name(id)
        ));
        out.push_str(&setting_line(arg, id));
    }
    out
}

fn setting_line(arg: &Arg, id: &str) -> String {
    if matches!(arg.get_action(), ArgAction::SetTrue) {
        return format!("{id} = false\n");
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    match defaults.as_slice() {
        [] => {
            let example = arg
                .get_value_names()
                .and_then(|names| names.first())
                .map_or_else(|| id.to_ascii_uppercase(), ToString::to_string);
            format!("# {id} = {}\n", toml_value(&example, false))
        }
        [one] => format!("{id} = {}\n", toml_value(one, true)),
        many => format!(
            "{id} = [{}]\n",
            many.iter()
                .map(|v| toml_value(v, true))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `text` as a TOML value: a bare integer or boolean where it reads as one
/// (and `bare` allows it), else a string.
fn toml_value(text: &str, bare: bool) -> String {
    if bare && (text.parse::<i64>().is_ok() || text == "true" || text == "false") {
        return text.to_string();
    }
    toml::Value::String(text.to_string()).to_string()
}

/// `text` in lines of at most `width` characters, at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for paragraph in text.lines() {
        let mut line = String::new();
        for word in paragraph.split_whitespace() {
            if !line.is_empty() && line.len() + 1 + word.len() > width {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::CommandFactory;

    fn cli() -> Command {
        with_env(crate::cli::Cli::command())
    }

    fn parse(args: &[&str]) -> Result<ArgMatches, ConfigError> {
        matches(cli(), args.iter().map(OsString::from).collect())
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    fn serve_value(m: &ArgMatches, id: &str) -> String {
        let (_, sub) = m.subcommand().unwrap();
        sub.get_raw(id)
            .and_then(|mut v| v.next())
            .map(|v| v.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    #[test]
    fn the_file_fills_what_the_command_line_does_not_give() {
        let f = file("listen = \"127.0.0.1:9000\"\nshards = 3\nunpinned = true\n");
        let path = f.path().to_str().unwrap();
        let m = parse(&["kelp", "serve", "--config", path, "--shards", "2"])
            .ok()
            .unwrap();
        assert_eq!(serve_value(&m, "listen"), "127.0.0.1:9000");
        assert_eq!(serve_value(&m, "shards"), "2", "the flag beats the file");
        let (_, sub) = m.subcommand().unwrap();
        assert!(sub.get_flag("unpinned"));
    }

    #[test]
    fn an_unknown_key_is_named() {
        let f = file("listen = \"127.0.0.1:9000\"\nshard = 3\nbufer_bytes = 1\n");
        let path = f.path().to_str().unwrap();
        let Err(ConfigError::File(e)) = parse(&["kelp", "serve", "--config", path]) else {
            panic!("accepted");
        };
        let text = format!("{e:#}");
        assert!(text.contains("unknown keys bufer_bytes, shard"), "{text}");
    }

    #[test]
    fn a_bad_value_names_its_file() {
        let f = file("listen = \"nowhere\"\n");
        let path = f.path().to_str().unwrap();
        let Err(ConfigError::File(e)) = parse(&["kelp", "serve", "--config", path]) else {
            panic!("accepted");
        };
        let text = format!("{e:#}");
        assert!(text.contains(path) && text.contains("nowhere"), "{text}");
    }

    #[test]
    fn the_default_file_reads_back_as_the_defaults() {
        for name in CONFIGURABLE {
            let command = cli();
            let sub = command.find_subcommand(name).unwrap();
            let text = default_file(sub);
            let table: toml::Table = text.parse().unwrap();
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if NOT_SETTINGS.contains(&id) {
                    continue;
                }
                assert!(
                    text.contains(&format!("{id} =")),
                    "{name}: no line for {id}"
                );
            }
            let f = file(&text);
            let path = f.path().to_str().unwrap();
            let with = parse(&["kelp", name, "--config", path]).ok().unwrap();
            let without = parse(&["kelp", name]).ok().unwrap();
            let (_, with) = with.subcommand().unwrap();
            let (_, without) = without.subcommand().unwrap();
            for key in table.keys() {
                let raw = |m: &ArgMatches| {
                    m.get_raw(key)
                        .map(|v| v.map(|s| s.to_owned()).collect::<Vec<_>>())
                };
                assert_eq!(raw(with), raw(without), "{name}: {key}");
            }
        }
    }
}
