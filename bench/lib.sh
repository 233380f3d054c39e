# Shell shared by the side-by-side benchmark scripts (peer.sh, acl.sh, api.sh, states.sh):
# sourced after the script has set `repo`, `venv`, `results` and parsed its flags.
#
#   bench_init NAME       run directory ($work, under HALITE_TEMP_BASE or TMPDIR), the
#                         progress log, the traps that stop every process on exit
#   log MSG...            a timestamped line on stderr and in progress.log
#   machine_header        the machine and commit lines every machine.txt starts with
#   start_bg NAME DIR CMD...  CMD in its own session, output in DIR/NAME.out and .err
#   waited CMD...         CMD in the background, waited for (a signal reaches the trap)
#   stop_all              SIGTERM then SIGKILL to every process start_bg started
#   tree_cpu PID          utime+stime (s) of PID and its descendants
#   master_config CONF ROOT PUB RET [LOGFILE_LEVEL]   the options every run's master shares
#   write_minion_config DIR ID RET_PORT
#
# Every script keeps its own flags, scenarios and tables; only process handling and the
# machine description live here.

# bench_init NAME: $work, $progress, $pids, traps.
bench_init() {
  mkdir -p "$results/logs"
  progress=$results/progress.log
  work=$(mktemp -d "${HALITE_TEMP_BASE:-${TMPDIR:-/tmp}}/halite-$1.XXXXXX")
  pids=()
  waited_pid=
  trap bench_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$progress" >&2; }

# machine_header: date, commit (and uncommitted work), kernel, CPUs, memory, load, limits,
# the stock Salt version and where run directories go.
machine_header() {
  echo "date: $(date -Is)"
  if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
    echo "commit: $(git -C "$repo" rev-parse --short HEAD)"
    echo "worktree: $(git -C "$repo" status --porcelain | wc -l) changed paths, diff sha1 $(git -C "$repo" diff HEAD | sha1sum | cut -c1-12) (uncommitted work is part of what was measured)"
  else
    echo "commit: ${HALITE_COMMIT:-unknown} (not a git checkout: $repo)"
  fi
  echo "kernel: $(uname -r)"
  echo "cpus: $(nproc)"
  grep -m1 'model name' /proc/cpuinfo || true
  free -m | sed -n 2p
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "RLIMIT_NOFILE: soft $(ulimit -Sn) hard $(ulimit -Hn)"
  echo "salt: $("$venv/bin/python" -c 'import salt.version; print(salt.version.__version__)' 2>/dev/null || echo none) ($venv)"
  echo "run directories: ${HALITE_TEMP_BASE:-${TMPDIR:-/tmp}}"
}

# waited CMD...: runs CMD in the background and waits for it, so that a signal reaches the
# trap at once; the trap stops it (and it kills what it started).
waited() {
  local rc=0
  "$@" &
  waited_pid=$!
  wait "$waited_pid" || rc=$?
  waited_pid=
  return "$rc"
}

descendants() {
  local p c
  for p in "$@"; do
    for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do
      echo "$c"; descendants "$c"
    done
  done
}

alive() {
  local p
  for p in "$@"; do
    [ -d /proc/"$p" ] && ! grep -q '^State:.*Z' /proc/"$p"/status 2>/dev/null && return 0
  done
  return 1
}

# stop_all: SIGTERM to each started process's group and descendants, SIGKILL to what is
# left after 8 s.
stop_all() {
  [ ${#pids[@]} -gt 0 ] || return 0
  local all=("${pids[@]}") p i
  for p in "${pids[@]}"; do all+=($(descendants "$p")); done
  for p in "${pids[@]}"; do kill -TERM -- -"$p" 2>/dev/null || true; done
  kill -TERM "${all[@]}" 2>/dev/null || true
  for i in $(seq 1 80); do alive "${all[@]}" || break; sleep 0.1; done
  for p in "${pids[@]}"; do kill -KILL -- -"$p" 2>/dev/null || true; done
  kill -KILL "${all[@]}" 2>/dev/null || true
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}

bench_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$waited_pid" ]; then
    kill -TERM "$waited_pid" 2>/dev/null || true
    wait "$waited_pid" 2>/dev/null || true
  fi
  stop_all
  # Run directories go only now, as halite-bench does: deleting many files makes later
  # file creation slower on this ext4 (see BENCHMARKS.md, "Machine").
  rm -rf "$work"
  sync
  exit "$rc"
}

start_bg() {
  local name=$1 dir=$2; shift 2
  setsid "$@" >"$dir/$name.out" 2>"$dir/$name.err" </dev/null &
  pids+=($!)
}

tree_cpu() {
  local tck p
  tck=$(getconf CLK_TCK)
  for p in "$1" $(descendants "$1"); do
    awk -v t="$tck" '{sub(/^.*\) /, ""); print ($12+$13)/t}' /proc/"$p"/stat 2>/dev/null
  done | awk '{s+=$1} END{printf "%.2f\n", s}'
}

# master_config CONF ROOT PUB RET [LOGFILE_LEVEL]: CONF/master with what every run's master
# shares (loopback, the ports, every path under ROOT, auto_accept, file_roots and
# pillar_roots under ROOT/srv); the caller appends its own options to CONF/master.
master_config() {
  local conf=$1 root=$2 pub=$3 ret=$4 file_level=${5:-info}
  mkdir -p "$conf" "$root"/{pki,cache,sock,log,run,srv/salt,srv/pillar}
  cat > "$conf/master" <<CONF
interface: 127.0.0.1
publish_port: $pub
ret_port: $ret
user: $(id -un)
root_dir: $root
pki_dir: $root/pki
cachedir: $root/cache
sock_dir: $root/sock
pidfile: $root/run/salt-master.pid
log_file: $root/log/master
key_logfile: $root/log/key
log_level: warning
log_level_logfile: $file_level
auto_accept: True
file_roots:
  base:
    - $root/srv/salt
pillar_roots:
  base:
    - $root/srv/pillar
CONF
}

write_minion_config() {
  local dir=$1 id=$2 ret=$3
  mkdir -p "$dir"/{pki,cache,sock,log,run}
  cat > "$dir/minion" <<CONF
id: $id
master: 127.0.0.1
master_port: $ret
user: $(id -un)
root_dir: $dir
pki_dir: $dir/pki
cachedir: $dir/cache
sock_dir: $dir/sock
pidfile: $dir/run/salt-minion.pid
log_file: $dir/log/minion
log_level: warning
log_level_logfile: info
CONF
}
