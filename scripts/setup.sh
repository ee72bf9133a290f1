#!/usr/bin/env bash
# Install everything kelp's tests need on a fresh Debian machine with a Rust
# toolchain, and check it. `scripts/test.sh` runs this first; it is safe to
# run again (each step is skipped when its tool is already there).
#
#   bash scripts/setup.sh           # install what is missing, then check
#   bash scripts/setup.sh --check   # check only; say what is missing and how to get it
#
# What it installs:
#   cargo-fuzz          (crates.io)   the fuzz smoke run
#   fonts-dejavu-core   (Debian)      `kelp bench --plot` draws text with it
#   python3-venv        (Debian)      the venv of the Kafka interop clients
#   nodejs, npm         (Debian)      kafkajs, a Kafka interop client
#   etcd-server         (Debian)      the real etcd of the election tests (kelp-election)
#   protobuf-compiler   (Debian)      protoc, which the etcd-client crate's build script runs
#   interop/.venv       (PyPI)        confluent-kafka, kafka-python and codecs, moto[server] (the
#                                     S3-compatible server of the S3 filer tests) and prometheus-client
#                                     (the metrics page's parser), pinned in interop/requirements.txt
#   interop/node        (npm)         kafkajs, pinned in interop/node/package-lock.json
#
# Debian packages need root (or sudo). A failed install stops here with its
# error; nothing is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

check_only=false
if [ "${1:-}" = --check ]; then
  check_only=true
elif [ $# -ne 0 ]; then
  echo "usage: bash scripts/setup.sh [--check]" >&2
  exit 2
fi

font=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
venv_python="$PWD/interop/.venv/bin/python"
python_modules='import confluent_kafka, kafka, cramjam, lz4, zstandard, snappy, prometheus_client'

apt_updated=false
apt_install() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "error: installing Debian packages ($*) needs root or sudo" >&2
      exit 1
    fi
    sudo=sudo
  fi
  if ! $apt_updated; then
    $sudo apt-get update -qq
    apt_updated=true
  fi
  echo "==> apt-get install $*"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# Each check prints nothing when the prerequisite is there, else one line
# saying what is missing and the command that fixes it, and returns 1.
missing=0
need() {
  local what="$1" fix="$2"
  shift 2
  if ! "$@" >/dev/null 2>&1; then
    echo "missing: $what (fix: $fix)" >&2
    missing=$((missing + 1))
  fi
}
have_venv_clients() {
  [ -x "$venv_python" ] && "$venv_python" -c "$python_modules" && [ -x interop/.venv/bin/moto_server ]
}
have_kafkajs() { [ -d interop/node/node_modules/kafkajs ] && command -v node; }
# The whole output is read before matching: `etcd --version | grep -q` under
# pipefail fails at random, when grep exits at the first line and etcd's
# next write meets a closed pipe (SIGPIPE).
have_etcd() {
  local version
  version="$(etcd --version 2>/dev/null)" || return 1
  [[ "$version" =~ (^|$'\n')'etcd Version: 3.' ]]
}

check_all() {
  missing=0
  need "cargo (a Rust toolchain)" "https://rustup.rs" command -v cargo
  need "rustfmt" "rustup component add rustfmt" cargo fmt --version
  need "clippy" "rustup component add clippy" cargo clippy --version
  need "python3" "apt-get install python3" command -v python3
  need "cargo-fuzz" "cargo install cargo-fuzz --locked" cargo fuzz --version
  need "the DejaVu font for bench plots" "apt-get install fonts-dejavu-core" test -e "$font"
  need "the Kafka interop clients and moto_server in interop/.venv" \
    "python3 -m venv interop/.venv && interop/.venv/bin/pip install -r interop/requirements.txt" \
    have_venv_clients
  need "node and kafkajs" "apt-get install nodejs npm && npm ci --prefix interop/node" have_kafkajs
  need "etcd 3.x (the election tests' server)" "apt-get install etcd-server" have_etcd
  need "protoc (the etcd-client crate's build)" "apt-get install protobuf-compiler" command -v protoc
  return "$missing"
}

if $check_only; then
  if check_all; then
    echo "setup: every prerequisite is there"
    exit 0
  fi
  echo "setup: $missing prerequisite(s) missing; run bash scripts/setup.sh to install them" >&2
  exit 1
fi

if ! command -v cargo >/dev/null; then
  echo "error: no cargo on PATH; install a Rust toolchain first (https://rustup.rs)" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "==> cargo install cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
if [ ! -e "$font" ]; then
  apt_install fonts-dejavu-core
fi
if [ ! -x "$venv_python" ]; then
  if ! python3 -m venv interop/.venv 2>/dev/null; then
    rm -rf interop/.venv
    apt_install python3-venv
    python3 -m venv interop/.venv
  fi
fi
# Always: a no-op when the pinned versions are installed, an upgrade when
# interop/requirements.txt changed.
echo "==> pip install -r interop/requirements.txt"
interop/.venv/bin/pip install --quiet --disable-pip-version-check -r interop/requirements.txt
# Where an init system runs, the package starts an etcd service of its own
# on port 2379; the tests never use it: each starts its own etcd on free
# loopback ports (test-support/src/etcd_server.rs).
if ! have_etcd; then
  apt_install etcd-server
fi
if ! command -v protoc >/dev/null; then
  apt_install protobuf-compiler
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  apt_install nodejs npm
fi
# Again when the lock file is newer than what npm installed from it.
if [ ! -d interop/node/node_modules/kafkajs ] ||
  [ interop/node/package-lock.json -nt interop/node/node_modules/.package-lock.json ]; then
  echo "==> npm ci --prefix interop/node"
  npm ci --prefix interop/node --no-audit --no-fund
fi

if ! check_all; then
  echo "setup: $missing prerequisite(s) still missing after installing (above)" >&2
  exit 1
fi
echo "setup: every prerequisite is there"
