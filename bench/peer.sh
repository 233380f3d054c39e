#!/usr/bin/env bash
# Peer communication, Halite against stock Salt 3008.3: how long a minion waits for
#   <call> -c <minion dir> publish.publish '*' test.ping --out=json     (peer)
#   <call> -c <minion dir> publish.runner manage.up --out=json          (peer_run)
#   <call> -c <minion dir> test.ping --out=json                         (the CLI's floor)
# where <call> is halite-call against a Halite master and salt-call against a stock
# salt-master (the calls of /work/shared/baseline/bench_peer.sh).
#
#   bench/peer.sh [--counts 20,1000] [--runs 5] [--budget 120] [--masters halite,stock]
#                 [--real-max 20] [--swarm-key-bits 1024] [--start-timeout 300] [--no-build]
#
# For each count N and each master (Halite first, then stock), in a fresh directory with
# fresh ports on 127.0.0.1:
#   - N <= --real-max: N real minions (halite-minion with the Halite master, salt-minion
#     with the stock one); the calls are made with minion-0's config (its daemon runs too,
#     so it is one of the N that answer);
#   - N >  --real-max: one real minion (minion-0, the publisher) and N-1 simulated ones in
#     one halite-swarm process (they answer test.ping and saltutil.find_job).
# Both masters get the same config: stock Salt's defaults plus interface 127.0.0.1,
# auto_accept, peer {'.*': ['.*']}, peer_run {'.*': ['manage.*']} (as the baseline's
# setup.sh, with peer_run narrowed to manage.*). Once every minion answers test.ping, the
# floor call runs --runs times, then publish.publish and publish.runner alternate --runs
# times. Each call is timed from process start to exit and checked (all N True; manage.up
# lists all N). A call over --budget seconds is killed and the rest of that measure skipped
# ("did not finish in B s").
#
# Environment: CARGO_TARGET_DIR (release binaries, default <repo>/target-swarm, shared with
# bench/swarm.sh), HALITE_SALT_VENV (stock Salt venv, default <repo>/.salt-venv),
# HALITE_TEMP_BASE (where run directories go, default $TMPDIR or /tmp; /dev/shm takes the
# file system out of the figures), RESULTS (default bench/results/peer-<timestamp>),
# HALITE_COMMIT (recorded as the commit when the tree is not a git checkout, e.g. a
# `git archive` snapshot built while the checkout is mid-edit).
# Writes machine.txt, progress.log, results.jsonl (one record per call), table.md and
# logs/<master>-<N>/ (master log, a minion log, swarm output) under RESULTS.
# Every process started here is stopped on exit (trap), by process group and pid.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target-swarm}
venv=${HALITE_SALT_VENV:-$repo/.salt-venv}
results=${RESULTS:-$repo/bench/results/peer-$(date +%Y%m%d-%H%M%S)}
bin=$CARGO_TARGET_DIR/release
helper_py=$repo/bench/peer_calls.py
py=python3

counts=20,1000 runs=5 budget=120 masters=halite,stock real_max=20 key_bits=1024
start_timeout=300 build=1
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --counts) counts=${2:?}; shift 2 ;;
    --runs) runs=${2:?}; shift 2 ;;
    --budget) budget=${2:?}; shift 2 ;;
    --masters) masters=${2:?}; shift 2 ;;
    --real-max) real_max=${2:?}; shift 2 ;;
    --swarm-key-bits) key_bits=${2:?}; shift 2 ;;
    --start-timeout) start_timeout=${2:?}; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) usage ;;
    *) echo "peer.sh: unknown option $1" >&2; usage ;;
  esac
done
for v in "$runs" "$budget" "$real_max" "$key_bits" "$start_timeout"; do
  [[ $v =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] || { echo "peer.sh: expected a positive integer, got '$v'" >&2; exit 2; }
done
IFS=, read -r -a count_list <<< "$counts"
IFS=, read -r -a master_list <<< "$masters"
for n in "${count_list[@]}"; do
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -gt 0 ] || { echo "peer.sh: bad count '$n'" >&2; exit 2; }
done
for m in "${master_list[@]}"; do
  case $m in halite|stock) ;; *) echo "peer.sh: bad master '$m' (halite, stock)" >&2; exit 2 ;; esac
done
if [[ " ${master_list[*]} " == *" stock "* ]] && [ ! -x "$venv/bin/salt-master" ]; then
  echo "peer.sh: no stock Salt in $venv (set HALITE_SALT_VENV)" >&2; exit 2
fi

# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
bench_init peer

if [ "$build" = 1 ]; then
  cargo build --release --locked -p halite-master -p halite-minion -p halite-call \
    -p halite-cli -p halite-swarm
fi
needed=()
[[ " ${master_list[*]} " == *" halite "* ]] && needed+=(halite-master halite-minion halite-call halite)
for n in "${count_list[@]}"; do [ "$n" -gt "$real_max" ] && needed+=(halite-swarm); done
for b in "${needed[@]}"; do
  [ -x "$bin/$b" ] || { echo "peer.sh: $bin/$b is missing (build, or drop --no-build)" >&2; exit 2; }
done

{
  machine_header
  echo "args: --counts $counts --runs $runs --budget $budget --masters $masters --real-max $real_max --swarm-key-bits $key_bits"
} > "$results/machine.txt"

# helper ARGS...: peer_calls.py ARGS (ports, wait-port, wait-swarm, wait-ping, measure).
helper() { waited "$py" "$helper_py" "$@"; }

write_master_config() {
  master_config "$@"
  cat >> "$1/master" <<CONF
peer:
  .*:
    - .*
peer_run:
  .*:
    - manage.*
CONF
}

# scenario MASTER N: start, wait for every minion, measure. Returns 1 (and leaves the
# processes to the caller's stop_all) when the set-up does not come up in time.
scenario() {
  local master=$1 n=$2 dir pub ret nreal nswarm k mpid cpu0 cpu1 t0
  dir=$work/$master-$n
  mkdir -p "$dir/procs"
  read -r pub ret < <("$py" "$helper_py" ports 2 | paste -sd' ')
  write_master_config "$dir/master-conf" "$dir/master-root" "$pub" "$ret"
  if [ "$n" -le "$real_max" ]; then nreal=$n; else nreal=1; fi
  nswarm=$((n - nreal))
  log "== $master master, N=$n ($nreal real minion(s), $nswarm swarm), ports $pub/$ret, load $(cut -d' ' -f1-3 /proc/loadavg)"
  local master_cmd minion_cmd call_cmd cli_cmd
  if [ "$master" = halite ]; then
    master_cmd=("$bin/halite-master"); minion_cmd=("$bin/halite-minion")
    call_cmd=$bin/halite-call; cli_cmd=("$bin/halite")
  else
    master_cmd=("$venv/bin/salt-master"); minion_cmd=("$venv/bin/salt-minion")
    call_cmd=$venv/bin/salt-call; cli_cmd=("$venv/bin/salt")
  fi
  t0=$(date +%s.%N)
  start_bg master "$dir/procs" "${master_cmd[@]}" -c "$dir/master-conf"
  mpid=${pids[-1]}
  helper wait-port "$ret" 60 || { log "$master master did not listen"; return 1; }
  for k in $(seq 0 $((nreal - 1))); do
    write_minion_config "$dir/minion-$k" "minion-$k" "$ret"
    start_bg "minion-$k" "$dir/procs" "${minion_cmd[@]}" -c "$dir/minion-$k"
    sleep 0.1
  done
  if [ "$nswarm" -gt 0 ]; then
    start_bg swarm "$dir/procs" "$bin/halite-swarm" --count "$nswarm" --id-prefix swarm- \
      --master "127.0.0.1:$ret" --key-bits "$key_bits" --log-level warn
    helper wait-swarm "$dir/procs/swarm.out" "$start_timeout" || return 1
  fi
  helper wait-ping "$n" "$start_timeout" -- \
    "${cli_cmd[@]}" -c "$dir/master-conf" '*' test.ping --out json --static -t 10 || return 1
  log "all $n minions answer after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s"
  cpu0=$(tree_cpu "$mpid")
  helper measure --master "$master" --count "$n" --runs "$runs" --budget "$budget" \
    --call "$call_cmd" --config "$dir/minion-0" --out "$results/results.jsonl" \
    2> >(tee -a "$progress" >&2)
  cpu1=$(tree_cpu "$mpid")
  log "master CPU during the calls: $(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN{printf "%.2f", b - a}') s (process tree)"
}

# keep_logs MASTER N: the master's log, minion-0's, and the processes' outputs.
keep_logs() {
  local dir=$work/$1-$2 to=$results/logs/$1-$2
  mkdir -p "$to"
  cp "$dir/master-root/log/master" "$dir/minion-0/log/minion" "$to/" 2>/dev/null || true
  cp "$dir"/procs/* "$to/" 2>/dev/null || true
}

for n in "${count_list[@]}"; do
  for m in "${master_list[@]}"; do
    scenario "$m" "$n" || log "!! $m master, N=$n: set-up failed; logs in $results/logs/$m-$n"
    stop_all
    keep_logs "$m" "$n"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/machine.txt"
"$py" "$helper_py" table "$results/results.jsonl" | tee "$results/table.md"
echo "results in $results"
