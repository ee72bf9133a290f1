//! Generates the request and response messages, `ApiKey` with the
//! supported-versions table, and the body dispatch from the schema files in
//! `kafka/schema/` into `OUT_DIR` (docs/kafka.md, "The message schema").

use std::path::Path;

fn main() {
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema");
    // A directory: Cargo reruns when any file in it changes.
    println!("cargo:rerun-if-changed=schema");
    println!("cargo:rerun-if-changed=build.rs");
    let Some(out_dir) = std::env::var_os("OUT_DIR") else {
        eprintln!("error: OUT_DIR is not set (build.rs runs under Cargo only)");
        std::process::exit(1);
    };
    if let Err(e) = kafka_codegen::generate(&schema, Path::new(&out_dir)) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
