//! kelp-kafka-codegen: generates kelp-kafka's Kafka request and response
//! messages from the schema files in `kafka/schema/`, one per API.
//!
//! `kafka/build.rs` runs [`generate`] on every build, writing Rust source
//! to `OUT_DIR`, where `kafka/src/api/mod.rs`, `kafka/src/api_key.rs` and
//! `kafka/src/request.rs` include it. The output is never checked in, so it
//! cannot go stale, and nobody maintains it by hand: a new API is a schema
//! file (and a handler in the gateway). The schema format is ours; it is
//! described field by field in docs/kafka.md ("The message schema").
//!
//! [`schema`] reads and checks the files, [`rust`] emits the source, and
//! [`versions`] is the version-range arithmetic both share. This crate
//! runs at build time only: nothing here is linked into kelp.

use std::path::{Path, PathBuf};

pub mod rust;
pub mod schema;
pub mod versions;

pub use rust::{emit, Sources};
pub use schema::{load_dir, parse, Api, SchemaError};
pub use versions::Versions;

/// Why [`generate`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    /// A schema file was refused.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// An output file could not be written.
    #[error("{file}: {source}")]
    Write {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Reads every schema file in `schema_dir` and writes `api.rs`,
/// `api_keys.rs` and `bodies.rs` to `out_dir`, each only if its text
/// changed (so an unchanged schema does not make kelp-kafka recompile).
pub fn generate(schema_dir: &Path, out_dir: &Path) -> Result<(), GenerateError> {
    let apis = load_dir(schema_dir)?;
    let sources = emit(&apis);
    for (name, text) in [
        ("api.rs", &sources.api),
        ("api_keys.rs", &sources.api_keys),
        ("bodies.rs", &sources.bodies),
    ] {
        let file = out_dir.join(name);
        if std::fs::read_to_string(&file).is_ok_and(|old| old == *text) {
            continue;
        }
        std::fs::write(&file, text).map_err(|source| GenerateError::Write { file, source })?;
    }
    Ok(())
}
