#!/usr/bin/env bash
# HTTP API, halite-api against stock salt-api 3008.3 (issue 13), in one run:
#   1. `POST /` `[{"client": "local", "tgt": "*", "fun": "test.ping"}]` with X-Auth-Token
#      from --clients concurrent clients for --post-secs (after --warmup-secs): requests/s,
#      latency p50/p99, errors, and every reply checked (all --minions minions true);
#   2. `/events` with --sse-clients streams while --events-per-sec events are fired into
#      the master's bus for --event-secs (then up to --drain-secs to catch up): delivered
#      rate, lost events, fire-to-receipt latency p50/p99;
#   3. the API's peak RSS (VmRSS sampled every 100 ms, VmHWM, PSS) and CPU, per phase,
#      beside the master's and the load generator's CPU.
#
#   bench/api.sh [--apis halite,stock] [--minions 20] [--clients 50] [--post-secs 20]
#                [--warmup-secs 3] [--sse-clients 100] [--events-per-sec 10000]
#                [--event-secs 10] [--drain-secs 5] [--swarm-key-bits 1024]
#                [--start-timeout 180] [--no-build] [--bin-dir DIR]
#
# For each API (halite first, then stock), in a fresh directory with fresh ports on
# 127.0.0.1, nothing else running:
#   halite: halite-master + halite-swarm (--minions simulated minions) + halite-api
#   stock:  salt-master   + halite-swarm (--minions simulated minions) + salt-api
# Both masters get the same config: Salt's defaults plus interface 127.0.0.1, auto_accept,
# logging at warning, external_auth file (user bench, password bench, `test.*`),
# netapi_enable_clients [local], and rest_cherrypy {port, host: 127.0.0.1,
# disable_ssl: true, thread_pool: 200} (salt-api serves each /events stream on a thread
# of its pool for the stream's life; 200 leaves room for the 100 streams and the rest;
# for halite-api thread_pool only caps requests talking to the master at once).
# The minions are the swarm for both masters, not real minions: the same minions answer
# both, so the figures compare the APIs and masters, not minion implementations; a stock
# salt-minion forks a process per job (about 20 forks per request here, on 2 cores), which
# would measure the minions more than the API.
# The load generator is `halite-bench api` (crates/swarm/src/api_bench.rs; Rust, one
# connection per client); it fires events through the master's master_event_pull.ipc and
# samples the API, master and swarm process trees (--watch). Every phase is bounded in
# time, so a stalled API cannot hang the run; the whole run takes about 3-5 minutes with
# the defaults (a stock master and salt-api take a while to start).
#
# Environment: CARGO_TARGET_DIR (release binaries, default <repo>/target-swarm, shared with
# bench/swarm.sh), HALITE_SALT_VENV (stock Salt venv with CherryPy, default
# <repo>/.salt-venv), HALITE_TEMP_BASE (run directories, default $TMPDIR or /tmp),
# RESULTS (default bench/results/api-<timestamp>), HALITE_COMMIT (recorded when the tree
# is not a git checkout). --bin-dir takes the binaries from elsewhere (e.g. target/debug
# with --no-build; machine.txt records which).
# Writes machine.txt, progress.log, results.jsonl (one JSON record per API), result.txt
# (the RESULT lines), table.md, and logs/<api>/ under RESULTS. Every process started here
# is stopped on exit (trap), by process group and pid.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target-swarm}
venv=${HALITE_SALT_VENV:-$repo/.salt-venv}
results=${RESULTS:-$repo/bench/results/api-$(date +%Y%m%d-%H%M%S)}
bin=$CARGO_TARGET_DIR/release
helper_py=$repo/bench/peer_calls.py
py=python3

apis=halite,stock minions=20 clients=50 post_secs=20 warmup_secs=3 sse_clients=100
events_per_sec=10000 event_secs=10 drain_secs=5 key_bits=1024 start_timeout=180 build=1
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --apis) apis=${2:?}; shift 2 ;;
    --minions) minions=${2:?}; shift 2 ;;
    --clients) clients=${2:?}; shift 2 ;;
    --post-secs) post_secs=${2:?}; shift 2 ;;
    --warmup-secs) warmup_secs=${2:?}; shift 2 ;;
    --sse-clients) sse_clients=${2:?}; shift 2 ;;
    --events-per-sec) events_per_sec=${2:?}; shift 2 ;;
    --event-secs) event_secs=${2:?}; shift 2 ;;
    --drain-secs) drain_secs=${2:?}; shift 2 ;;
    --swarm-key-bits) key_bits=${2:?}; shift 2 ;;
    --start-timeout) start_timeout=${2:?}; shift 2 ;;
    --no-build) build=0; shift ;;
    --bin-dir) bin=$(cd "${2:?}" && pwd); shift 2 ;;
    -h|--help) usage ;;
    *) echo "api.sh: unknown option $1" >&2; usage ;;
  esac
done
for v in "$minions" "$clients" "$sse_clients" "$key_bits" "$start_timeout"; do
  [[ $v =~ ^[0-9]+$ ]] || { echo "api.sh: expected an integer, got '$v'" >&2; exit 2; }
done
[ "$minions" -gt 0 ] && [ "$start_timeout" -gt 0 ] || { echo "api.sh: --minions and --start-timeout must be positive" >&2; exit 2; }
for v in "$post_secs" "$warmup_secs" "$events_per_sec" "$event_secs" "$drain_secs"; do
  [[ $v =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "api.sh: expected a number, got '$v'" >&2; exit 2; }
done
IFS=, read -r -a api_list <<< "$apis"
for a in "${api_list[@]}"; do
  case $a in halite|stock) ;; *) echo "api.sh: bad API '$a' (halite, stock)" >&2; exit 2 ;; esac
done
if [[ " ${api_list[*]} " == *" stock "* ]]; then
  [ -x "$venv/bin/salt-api" ] || { echo "api.sh: no stock salt-api in $venv (set HALITE_SALT_VENV)" >&2; exit 2; }
  "$venv/bin/python" -c 'import cherrypy' 2>/dev/null \
    || { echo "api.sh: $venv has no CherryPy (salt-api's rest_cherrypy needs it)" >&2; exit 2; }
fi

if [ "$build" = 1 ]; then
  cargo build --release --locked -p halite-master -p halite-api -p halite-swarm
fi
needed=(halite-bench halite-swarm)
[[ " ${api_list[*]} " == *" halite "* ]] && needed+=(halite-master halite-api)
for b in "${needed[@]}"; do
  [ -x "$bin/$b" ] || { echo "api.sh: $bin/$b is missing (build, or drop --no-build)" >&2; exit 2; }
done

# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
bench_init api-bench

{
  machine_header
  echo "binaries: $bin"
  echo "cherrypy: $("$venv/bin/python" -c 'import cherrypy; print(cherrypy.__version__)' 2>/dev/null || echo none)"
  echo "args: --apis $apis --minions $minions --clients $clients --post-secs $post_secs --warmup-secs $warmup_secs --sse-clients $sse_clients --events-per-sec $events_per_sec --event-secs $event_secs --drain-secs $drain_secs --swarm-key-bits $key_bits"
} > "$results/machine.txt"

# helper ARGS...: peer_calls.py ARGS (its ports, wait-port and wait-swarm commands).
helper() { waited "$py" "$helper_py" "$@"; }

write_master_config() {
  local conf=$1 root=$2 api=$5
  master_config "$conf" "$root" "$3" "$4" warning
  printf 'bench:bench\n' > "$root/eauth-users"
  cat >> "$conf/master" <<CONF
external_auth:
  file:
    ^filename: $root/eauth-users
    ^filetype: text
    bench:
      - 'test.*'
netapi_enable_clients:
  - local
api_pidfile: $root/run/salt-api.pid
api_logfile: $root/log/api
rest_cherrypy:
  port: $api
  host: 127.0.0.1
  disable_ssl: true
  thread_pool: 200
CONF
}

# scenario API: start the master, the swarm and the API; run the load generator.
scenario() {
  local kind=$1 dir pub ret api mpid spid apid
  dir=$work/$kind
  mkdir -p "$dir/procs"
  read -r pub ret api < <("$py" "$helper_py" ports 3 | paste -sd' ')
  write_master_config "$dir/conf" "$dir/root" "$pub" "$ret" "$api"
  log "== $kind: master ports $pub/$ret, API port $api, load $(cut -d' ' -f1-3 /proc/loadavg)"
  local master_cmd api_cmd
  if [ "$kind" = halite ]; then
    master_cmd=("$bin/halite-master"); api_cmd=("$bin/halite-api")
  else
    master_cmd=("$venv/bin/salt-master"); api_cmd=("$venv/bin/salt-api")
  fi
  start_bg master "$dir/procs" "${master_cmd[@]}" -c "$dir/conf"
  mpid=${pids[-1]}
  helper wait-port "$ret" "$start_timeout" || { log "$kind master did not listen"; return 1; }
  start_bg swarm "$dir/procs" "$bin/halite-swarm" --count "$minions" --id-prefix apibench- \
    --master "127.0.0.1:$ret" --key-bits "$key_bits" --log-level warn
  spid=${pids[-1]}
  helper wait-swarm "$dir/procs/swarm.out" "$start_timeout" || return 1
  start_bg api "$dir/procs" "${api_cmd[@]}" -c "$dir/conf" -l warning
  apid=${pids[-1]}
  local rc=0
  waited "$bin/halite-bench" api --url "http://127.0.0.1:$api" --label "$kind" \
    --minions "$minions" --ready-timeout "$start_timeout" \
    --clients "$clients" --post-secs "$post_secs" --warmup-secs "$warmup_secs" \
    --sse-clients "$sse_clients" --events-per-sec "$events_per_sec" \
    --event-secs "$event_secs" --drain-secs "$drain_secs" --sock-dir "$dir/root/sock" \
    --watch "api=$apid" --watch "master=$mpid" --watch "swarm=$spid" \
    --out "$results/results.jsonl" \
    2> >(tee -a "$progress" >&2) >> "$results/result.txt" || rc=$?
  [ "$rc" = 0 ] || log "!! $kind: halite-bench api failed ($rc)"
  return "$rc"
}

keep_logs() {
  local dir=$work/$1 to=$results/logs/$1
  mkdir -p "$to"
  cp "$dir/root/log/master" "$dir/root/log/api" "$to/" 2>/dev/null || true
  cp "$dir"/procs/* "$to/" 2>/dev/null || true
}

for a in "${api_list[@]}"; do
  scenario "$a" || log "!! $a: the run failed; logs in $results/logs/$a"
  stop_all
  keep_logs "$a"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/machine.txt"
cat "$results/result.txt" 2>/dev/null || true
if [ -s "$results/results.jsonl" ]; then
  "$bin/halite-bench" api --table "$results/results.jsonl" | tee "$results/table.md"
fi
echo "results in $results"
