#!/usr/bin/env bash
# Every check kelp has, in one command: formatting, lints, the sans-IO rule,
# docs, unit/integration/interop tests, a short fuzz run of every decoder,
# and a smoke run of the benchmarks. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "sans-IO: wire, control and kafka must not depend on glommio, quinn or tokio"
for crate in kelp-wire kelp-control kelp-kafka; do
  if cargo tree -e normal -p "$crate" --prefix none | grep -E '^(glommio|quinn|quinn-proto|quinn-udp|tokio) '; then
    echo "error: $crate depends on an I/O runtime (see above)" >&2
    exit 1
  fi
done

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

# Tests run in the release profile: the broker under test is the one users
# run, and the build is shared with the benchmark smoke run below.
step "cargo test --release"
cargo test --workspace --release

step "benchmark smoke (every ingest case, tiny sizes, baselines included)"
cargo build --release -p kelp-benches
target/release/ingest --smoke

step "fuzz smoke (each decoder, ${FUZZ_SECONDS:=15}s)"
FUZZ_SECONDS="$FUZZ_SECONDS" bash fuzz/smoke.sh

echo
echo "all checks passed"
