#!/usr/bin/env bash
# Smoke-fuzz every decoder of kelp-wire and kelp-kafka: build all targets of
# this crate, run each for $FUZZ_SECONDS (default 20) from the committed
# seeds, and fail if any target does not build or finds a crash. Crashing
# inputs land in fuzz/artifacts/<target>/; replay one with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> fuzz/artifacts/<target>/<file>
#
# The machine has only a stable toolchain. cargo-fuzz passes nightly-only
# flags (-Zsanitizer=address), which stable rustc accepts when
# RUSTC_BOOTSTRAP=1; the AddressSanitizer runtime ships with stable rustc.
set -euo pipefail

cd "$(dirname "$0")"
fuzz_seconds="${FUZZ_SECONDS:-20}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

# Cargo caches rustc's answers to its target probe without keying them on
# RUSTC_BOOTSTRAP: a build once tried without it keeps failing until the
# cache goes. The file is only a cache.
rm -f target/.rustc_info.json

started=$SECONDS
cargo fuzz build
echo "smoke: built all targets in $((SECONDS - started)) s"

mkdir -p target/smoke
failed=()
for target in $(cargo fuzz list); do
    mkdir -p "corpus/$target"
    log="target/smoke/$target.log"
    # The first directory is the working corpus (grows, ignored by git); the
    # seeds are read only. max_len is above STRING_BYTES_MAX so inputs can
    # carry a string over the limit.
    if cargo fuzz run "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$fuzz_seconds" -max_len=8192 -print_final_stats=1 \
        >"$log" 2>&1; then
        runs=$(sed -n 's/.*stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
        echo "smoke: $target ok ($runs runs)"
    else
        echo "smoke: $target FAILED, log $PWD/$log:"
        tail -n 60 "$log"
        failed+=("$target")
    fi
done

echo "smoke: done in $((SECONDS - started)) s"
if ((${#failed[@]} > 0)); then
    echo "smoke: failing targets: ${failed[*]}" >&2
    exit 1
fi
