#!/usr/bin/env bash
# Every check kelp has, in one command: formatting, lints, the sans-IO rule,
# docs, unit/integration/interop tests, a short fuzz run of every decoder,
# and a smoke run of the benchmarks. Exits non-zero on the first failure.
#
#   bash scripts/test.sh           # everything (what CI runs); installs what the tests need first
#   bash scripts/test.sh --quick   # fmt, clippy and unit tests: the day-to-day tier
#
# The full run first calls scripts/setup.sh, which installs what is missing
# (cargo-fuzz, a font, the Kafka interop clients; Debian packages need root
# or sudo) and checks every prerequisite, so a machine that lacks one fails
# before the first build, saying what to do.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=false
case "${1:-}" in
  --quick) quick=true ;;
  "") ;;
  *) echo "usage: bash scripts/test.sh [--quick]" >&2; exit 2 ;;
esac

step() { printf '\n==> %s\n' "$*"; }

if $quick; then
  for tool in fmt clippy; do
    if ! cargo "$tool" --version >/dev/null 2>&1; then
      echo "error: cargo $tool is missing (rustup component add ${tool/fmt/rustfmt})" >&2
      exit 1
    fi
  done
  # The etcd-client crate (kelp-election) runs protoc in its build script.
  if ! command -v protoc >/dev/null; then
    echo "error: protoc is missing (bash scripts/setup.sh, or apt-get install protobuf-compiler)" >&2
    exit 1
  fi
  step "cargo fmt --check"
  cargo fmt --all -- --check
  step "cargo clippy -D warnings"
  cargo clippy --workspace --all-targets -- -D warnings
  # The release profile shares its build with the full run's.
  step "unit tests (cargo test --release --lib --bins)"
  cargo test --workspace --release --lib --bins
  echo
  echo "quick checks passed (the full run: bash scripts/test.sh)"
  exit 0
fi

step "setup: install and check prerequisites (scripts/setup.sh)"
bash scripts/setup.sh

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

# The Kafka interop tests drive the clients setup installed.
interop_python="${KELP_INTEROP_PYTHON:-$PWD/interop/.venv/bin/python}"
export KELP_INTEROP_PYTHON="$interop_python"

# Tests run in the release profile: the broker under test is the one users
# run, and the build is shared with the benchmark smoke run below.
step "cargo test --release"
cargo test --workspace --release

step "kelp bench smoke (every scenario, tiny sizes; baselines, JSON and plot once; --repeat 2 once)"
cargo build --release -p kelp
smoke_dir="$(mktemp -d)"
trap 'rm -rf "$smoke_dir"' EXIT
kelp_bench() {
  target/release/kelp bench "$@" --count 20000 --record-bytes 1000 --batch-records 200 \
    --timeout-s 60 --data-dir "$smoke_dir"
}
kelp_bench produce --baseline --json "$smoke_dir/produce.json" --plot "$smoke_dir/produce.png"
python3 -c 'import json, sys
doc = json.load(open(sys.argv[1]))
for key in ("scenario", "transport", "records", "throughput_mb_s", "records_per_s", "latency_us",
            "broker_cpu_s_per_gb", "broker_peak_rss_mb", "baseline_mb_s", "ratio_to_baseline"):
    assert key in doc, key
assert doc["records"] == 20000, doc["records"]' "$smoke_dir/produce.json"
test -s "$smoke_dir/produce.png"
kelp_bench produce --repeat 2 --baseline --json "$smoke_dir/repeat.json" >"$smoke_dir/repeat.txt"
cat "$smoke_dir/repeat.txt"
grep -q '^run 2/2: ' "$smoke_dir/repeat.txt"
grep -Eq '^ +figure +median +min +max$' "$smoke_dir/repeat.txt"
python3 -c 'import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["repeat"] == 2 and len(doc["runs"]) == 2, doc.get("repeat")
for key in ("throughput_mb_s", "records_per_s", "latency_us", "broker_cpu_s_per_gb",
            "broker_peak_rss_mb", "baseline_mb_s", "ratio_to_baseline"):
    assert key in doc["summary"] and key in doc, key
s = doc["summary"]["throughput_mb_s"]
assert s["min"] <= s["median"] <= s["max"], s' "$smoke_dir/repeat.json"
kelp_bench produce --transport quic
kelp_bench produce --ack none
kelp_bench produce --in-flight 1 --load-cpus 0
kelp_bench consume --from buffers
kelp_bench consume --from chunks --segments 2 --consumers 2
kelp_bench end-to-end --rate 100000
kelp_bench backfill
for path in direct broker; do
  target/release/kelp bench produce --by-ref "$path" --record-bytes 2097152 --batch-records 1 \
    --count 20 --producers 2 --timeout-s 60 --data-dir "$smoke_dir"
done

step "design-crate measurements, tiny sizes (each way must deliver every byte and message)"
cargo build --release -p kelp-benches --bin handoff --bin zero_copy_send
target/release/handoff --messages 20000 --round-trips 500
target/release/zero_copy_send --bytes 16777216 --rounds 1 --dir "$smoke_dir"

step "split_follow smoke (one split, merge and move under load; every record sent is acknowledged)"
cargo build --release -p kelp-benches --bin split_follow
target/release/split_follow --rounds 1 --rate 2000 --kelp target/release/kelp

step "replicated_ack smoke (ack all against leader on two brokers, replicas 2; every record sent is acknowledged)"
cargo build --release -p kelp-benches --bin replicated_ack
target/release/replicated_ack --rounds 1 --seconds 1 --rate 2000 --kelp target/release/kelp

step "criterion smoke (every micro-benchmark once, in test mode)"
cargo bench -p kelp-benches --bench hot_path -- --test

step "fuzz smoke (each decoder, ${FUZZ_SECONDS:=15}s)"
FUZZ_SECONDS="$FUZZ_SECONDS" bash fuzz/smoke.sh

echo
echo "all checks passed"
