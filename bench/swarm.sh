#!/usr/bin/env bash
# Halite master vs stock salt-master under halite-swarm (issue 5). Builds the release
# binaries, records the machine, runs halite-bench and keeps everything under one results
# directory:
#
#   bench/swarm.sh [halite-bench options...]
#   bench/swarm.sh --counts 100,1000 --publishes 20 --budget 300
#
# Environment: CARGO_TARGET_DIR (default <repo>/target-swarm), RESULTS (default
# bench/results/swarm-<timestamp>), HALITE_SALT_VENV (stock Salt venv, default .salt-venv).
# Everything listens on 127.0.0.1. Minion keys are cached in ~/.cache/halite-swarm/keys
# (pass --keys-dir to change it); generating 10,000 of them takes minutes the first time.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target-swarm}
results=${RESULTS:-$repo/bench/results/swarm-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$results"

cargo build --release --locked -p halite-swarm -p halite-master

venv=${HALITE_SALT_VENV:-$repo/.salt-venv}
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
{
  machine_header
  echo "args: $*"
} > "$results/machine.txt"

"$CARGO_TARGET_DIR/release/halite-bench" --out "$results/results.json" "$@" \
  2> >(tee "$results/progress.log" >&2) | tee "$results/table.md"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/machine.txt"
echo "results in $results"
