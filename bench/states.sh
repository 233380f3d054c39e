#!/usr/bin/env bash
# state.apply end to end, Halite against stock Salt 3008.3 (issue 18), in one run:
#   <cli> '*' state.apply --out json --static
# of a small tree (a directory, a `file.managed` rendered from a Jinja template that uses a
# pillar value and a grain, a `cmd.run` with `onchanges`), timed from the CLI's start to
# its exit, with the master's CPU (its whole process tree: pillar workers included).
#
#   bench/states.sh [--counts 1,20,1000] [--runs 5] [--budget 300]
#                   [--setups stock,mixed,halite] [--real-max 20] [--swarm-key-bits 1024]
#                   [--start-timeout 300] [--no-build]
#
# Set-ups, each in a fresh directory with fresh ports on 127.0.0.1:
#   stock:  salt-master + N salt-minions, the `salt` CLI
#   mixed:  halite-master + N salt-minions, the `halite` CLI
#   halite: halite-master + N halite-minions (their fallback executor runs the states in
#           the stock venv's Salt), the `halite` CLI
# Above --real-max minions, one real minion (minion-0) and N-1 simulated ones in one
# halite-swarm process with --simulate-states: each sends the master the requests a stock
# minion sends for a warm state.apply of this tree (its pillar compiled, 19 _file_list,
# 5 _file_hash, ...; crates/swarm/src/states.rs) and returns three unchanged states, so the
# master's CPU per minion-highstate is measured at scale for both masters.
# Every master gets the same file_roots/pillar_roots; each minion writes under its own
# directory. The first run is cold (it makes the changes; for Halite minions it also starts
# the fallback worker); the next --runs are warm (no changes) and give the table's median.
# Master CPU per minion-highstate = the master tree's CPU over a warm run / N.
#
# Environment: CARGO_TARGET_DIR (release binaries, default <repo>/target-swarm),
# HALITE_SALT_VENV (stock Salt venv, default <repo>/.salt-venv), HALITE_TEMP_BASE (run
# directories), RESULTS (default bench/results/states-<timestamp>), HALITE_COMMIT.
# Writes machine.txt, progress.log, results.jsonl, table.md and logs/<setup>-<N>/.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target-swarm}
venv=${HALITE_SALT_VENV:-$repo/.salt-venv}
results=${RESULTS:-$repo/bench/results/states-$(date +%Y%m%d-%H%M%S)}
bin=$CARGO_TARGET_DIR/release
py=python3
ports_py=$repo/bench/peer_calls.py
calls_py=$repo/bench/states_calls.py

counts=1,20,1000 runs=5 budget=300 setups=stock,mixed,halite real_max=20 key_bits=1024
start_timeout=300 build=1
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --counts) counts=${2:?}; shift 2 ;;
    --runs) runs=${2:?}; shift 2 ;;
    --budget) budget=${2:?}; shift 2 ;;
    --setups) setups=${2:?}; shift 2 ;;
    --real-max) real_max=${2:?}; shift 2 ;;
    --swarm-key-bits) key_bits=${2:?}; shift 2 ;;
    --start-timeout) start_timeout=${2:?}; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) usage ;;
    *) echo "states.sh: unknown option $1" >&2; usage ;;
  esac
done
for v in "$runs" "$budget" "$start_timeout" "$real_max" "$key_bits"; do
  [[ $v =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] || { echo "states.sh: expected a positive integer, got '$v'" >&2; exit 2; }
done
IFS=, read -r -a count_list <<< "$counts"
IFS=, read -r -a setup_list <<< "$setups"
for n in "${count_list[@]}"; do
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -gt 0 ] || { echo "states.sh: bad count '$n'" >&2; exit 2; }
done
for s in "${setup_list[@]}"; do
  case $s in stock|mixed|halite) ;; *) echo "states.sh: bad set-up '$s' (stock, mixed, halite)" >&2; exit 2 ;; esac
done
[ -x "$venv/bin/salt-master" ] || { echo "states.sh: no stock Salt in $venv (set HALITE_SALT_VENV)" >&2; exit 2; }

# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
bench_init states

if [ "$build" = 1 ]; then
  cargo build --release --locked -p halite-master -p halite-minion -p halite-cli -p halite-swarm
fi
for b in halite-master halite-minion halite halite-swarm; do
  [ -x "$bin/$b" ] || { echo "states.sh: $bin/$b is missing (build, or drop --no-build)" >&2; exit 2; }
done

{
  machine_header
  echo "binaries: $bin"
  echo "args: --counts $counts --runs $runs --budget $budget --setups $setups --real-max $real_max --swarm-key-bits $key_bits"
} > "$results/machine.txt"

# write_tree ROOT OUT: the state and pillar trees under ROOT/srv; states write to OUT/<id>.
write_tree() {
  local root=$1 out=$2
  mkdir -p "$root/srv/salt/web/files" "$root/srv/pillar"
  printf "base:\n  '*':\n    - web\n" > "$root/srv/salt/top.sls"
  cat > "$root/srv/salt/web/init.sls" <<SLS
web-dir:
  file.directory:
    - name: $out/{{ grains['id'] }}/site
    - makedirs: True

web-motd:
  file.managed:
    - name: $out/{{ grains['id'] }}/site/motd
    - source: salt://web/files/motd.j2
    - template: jinja
    - require:
      - file: web-dir

web-reload:
  cmd.run:
    - name: echo reloaded >> $out/{{ grains['id'] }}/reloads
    - onchanges:
      - file: web-motd
SLS
  printf "{{ pillar['motd'] }} on {{ grains['id'] }} ({{ grains['kernel'] }})\n" \
    > "$root/srv/salt/web/files/motd.j2"
  printf "base:\n  '*':\n    - common\n" > "$root/srv/pillar/top.sls"
  printf "motd: Welcome\n" > "$root/srv/pillar/common.sls"
}

write_master_config() {
  master_config "$@"
  echo "halite_salt_python: $venv/bin/python3" >> "$1/master"
}

scenario() {
  local setup=$1 n=$2 dir pub ret k mpid t0 nreal
  dir=$work/$setup-$n
  mkdir -p "$dir/procs" "$dir/out"
  read -r pub ret < <("$py" "$ports_py" ports 2 | paste -sd' ')
  write_master_config "$dir/master-conf" "$dir/master-root" "$pub" "$ret"
  write_tree "$dir/master-root" "$dir/out"
  log "== $setup, N=$n, ports $pub/$ret, load $(cut -d' ' -f1-3 /proc/loadavg)"
  local master_cmd minion_cmd cli_cmd
  case $setup in
    stock) master_cmd=("$venv/bin/salt-master"); minion_cmd=("$venv/bin/salt-minion"); cli_cmd=("$venv/bin/salt") ;;
    mixed) master_cmd=("$bin/halite-master"); minion_cmd=("$venv/bin/salt-minion"); cli_cmd=("$bin/halite") ;;
    halite) master_cmd=("$bin/halite-master"); minion_cmd=("$bin/halite-minion"); cli_cmd=("$bin/halite") ;;
  esac
  t0=$(date +%s.%N)
  start_bg master "$dir/procs" "${master_cmd[@]}" -c "$dir/master-conf"
  mpid=${pids[-1]}
  waited "$py" "$ports_py" wait-port "$ret" 60 || { log "$setup master did not listen"; return 1; }
  if [ "$n" -le "$real_max" ]; then nreal=$n; else nreal=1; fi
  for k in $(seq 0 $((nreal - 1))); do
    write_minion_config "$dir/minion-$k" "minion-$k" "$ret"
    echo "fallback_python: $venv/bin/python3" >> "$dir/minion-$k/minion"
    start_bg "minion-$k" "$dir/procs" "${minion_cmd[@]}" -c "$dir/minion-$k"
    sleep 0.1
  done
  if [ "$n" -gt "$nreal" ]; then
    start_bg swarm "$dir/procs" "$bin/halite-swarm" --count $((n - nreal)) --id-prefix swarm- \
      --master "127.0.0.1:$ret" --key-bits "$key_bits" --simulate-states --log-level warn
    waited "$py" "$ports_py" wait-swarm "$dir/procs/swarm.out" "$start_timeout" || return 1
  fi
  waited "$py" "$ports_py" wait-ping "$n" "$start_timeout" -- \
    "${cli_cmd[@]}" -c "$dir/master-conf" '*' test.ping --out json --static -t 10 || return 1
  log "all $n minions answer after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s"
  waited "$py" "$calls_py" measure --setup "$setup" --count "$n" --runs "$runs" \
    --budget "$budget" --cpu-pid "$mpid" --out "$results/results.jsonl" \
    -- "${cli_cmd[@]}" -c "$dir/master-conf" 2> >(tee -a "$progress" >&2)
}

keep_logs() {
  local dir=$work/$1-$2 to=$results/logs/$1-$2
  mkdir -p "$to"
  cp "$dir/master-root/log/master" "$dir/minion-0/log/minion" "$to/" 2>/dev/null || true
  cp "$dir"/procs/* "$to/" 2>/dev/null || true
}

for n in "${count_list[@]}"; do
  for s in "${setup_list[@]}"; do
    scenario "$s" "$n" || log "!! $s, N=$n: set-up failed; logs in $results/logs/$s-$n"
    stop_all
    keep_logs "$s" "$n"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/machine.txt"
"$py" "$calls_py" table "$results/results.jsonl" | tee "$results/table.md"
echo "results in $results"
