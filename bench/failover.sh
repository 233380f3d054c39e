#!/usr/bin/env bash
# Multi-master failover (issue 12), Halite against stock Salt 3008.3: failover time, p50/p99
# over many faults, for each fault (kill = SIGKILL, freeze = SIGSTOP, cut = network cut) and
# topology (two masters on two IPs; on one IP with two ports), for a Halite minion and a
# stock salt-minion, between two Halite masters and between two stock salt-masters, all in
# the network-namespace lab of halite-testkit; and whether the fire_master events fired on
# the minion during each outage reach the new master once each.
#
#   bench/failover.sh [--no-build] [--max-load 1.5] [--max-wait 1800] [-- ] [RUN OPTIONS...]
#   bench/failover.sh --stock-faults 10 --cap 30          (the run in BENCHMARKS.md)
#
# RUN OPTIONS go to `failover_bench run` (crates/minion/examples/failover_bench.rs, whose
# header describes the method): --faults 20 (per fault kind and setup), --stock-faults N
# (setups with a stock minion or stock masters; default --faults), --give-up-after 3 (a
# fault kind stops after that many faults in a row not detected), --cap 60 (seconds a
# fault may take), --events 10, --alive 2 (master_alive_interval), --ping-every-ms 50,
# --minions halite,stock, --masters halite,stock, --topologies two-ips,one-ip,
# --kinds kill,freeze,cut.
#
# Must run as root (network namespaces, veth pairs, tc). Before the measured run the script
# waits until the 1-minute load average is below --max-load (another job, e.g. a CI run,
# may be using the machine), at most --max-wait seconds, then runs anyway and says so.
#
# Environment: CARGO_TARGET_DIR (release build, default <repo>/target-swarm, shared with the
# other bench scripts), HALITE_SALT_VENV (stock Salt venv, default <repo>/.salt-venv),
# HALITE_TEMP_BASE (where the run directories go, default /tmp), RESULTS (default
# bench/results/failover-<timestamp>), HALITE_COMMIT (recorded as the commit when the
# tree is not a git checkout).
# Writes under RESULTS: machine.txt, progress.log, results.jsonl (one record per fault),
# table.md, logs/<minion>-<masters>-<topology>/ (minion and master logs, process outputs).
# The benchmark's daemons die with it (halite-testkit's watchdogs); its lab namespaces are
# deleted on exit.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target-swarm}
export HALITE_SALT_VENV=${HALITE_SALT_VENV:-$repo/.salt-venv}
results=${RESULTS:-$repo/bench/results/failover-$(date +%Y%m%d-%H%M%S)}
bench=$CARGO_TARGET_DIR/release/examples/failover_bench

build=1 max_load=1.5 max_wait=1800
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
run_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --no-build) build=0; shift ;;
    --max-load) max_load=${2:?}; shift 2 ;;
    --max-wait) max_wait=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    --) shift; run_args+=("$@"); break ;;
    *) run_args+=("$1"); shift ;;
  esac
done
[[ $max_load =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "failover.sh: bad --max-load '$max_load'" >&2; exit 2; }
[[ $max_wait =~ ^[0-9]+$ ]] || { echo "failover.sh: bad --max-wait '$max_wait'" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "failover.sh: must run as root (network namespaces)" >&2; exit 2; }
[ -x "$HALITE_SALT_VENV/bin/salt-master" ] || {
  echo "failover.sh: no stock Salt in $HALITE_SALT_VENV (set HALITE_SALT_VENV)" >&2; exit 2; }

if [ "$build" = 1 ]; then
  cargo build --release --locked -p halite-master -p halite-minion --example failover_bench
fi
for b in "$bench" "$CARGO_TARGET_DIR/release/halite-master" "$CARGO_TARGET_DIR/release/halite-minion"; do
  [ -x "$b" ] || { echo "failover.sh: $b is missing (build, or drop --no-build)" >&2; exit 2; }
done

mkdir -p "$results/logs"
progress=$results/progress.log
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$progress" >&2; }

load1() { cut -d' ' -f1 /proc/loadavg; }
waited=0
while awk -v l="$(load1)" -v m="$max_load" 'BEGIN{exit !(l >= m)}'; do
  if [ "$waited" -ge "$max_wait" ]; then
    log "load average still $(load1) after ${waited} s; running anyway"
    break
  fi
  [ $((waited % 60)) = 0 ] && log "waiting for the load average ($(load1)) to drop below $max_load"
  sleep 15; waited=$((waited + 15))
done

venv=$HALITE_SALT_VENV
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
{
  machine_header
  echo "waited ${waited} s for the load average"
  echo "args: ${run_args[*]}"
} > "$results/machine.txt"

bench_pid=
cleanup() {
  local rc=$? ns
  trap - EXIT INT TERM
  if [ -n "$bench_pid" ]; then
    kill -TERM "$bench_pid" 2>/dev/null || true
    wait "$bench_pid" 2>/dev/null || true
    # Its lab namespaces (halite-<pid>-...): its daemons died with it (watchdogs).
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^halite-$bench_pid-" || true); do
      ip netns del "$ns" 2>/dev/null || true
    done
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "failover_bench run ${run_args[*]}"
started=$(date +%s)
rc=0
"$bench" run --out "$results/results.jsonl" --logs "$results/logs" "${run_args[@]}" \
  2> >(tee -a "$progress" >&2) &
bench_pid=$!
wait "$bench_pid" || rc=$?
bench_pid=
log "run took $(( $(date +%s) - started )) s (exit $rc)"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/machine.txt"
echo "run time: $(( $(date +%s) - started )) s" >> "$results/machine.txt"
"$bench" table "$results/results.jsonl" | tee "$results/table.md"
echo "results in $results"
exit "$rc"
