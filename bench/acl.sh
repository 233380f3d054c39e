#!/usr/bin/env bash
# Access control (publisher_acl), Halite against stock Salt 3008.3, in one run:
#   1. the cost of one ACL check per publish at --minions (10,000) accepted minions with
#      a 50-entry ACL: Halite's UserAcl::check (crates/acl/examples/acl_cost.rs, see
#      there), then (when stock is among --masters) stock Salt's CkMinions.auth_check on the same
#      fleet, ACL and cases (in-process with the stock venv: key files and a localfs
#      grains cache as a stock master keeps them; one check per case, repeated when
#      under 0.1 s; a check over --cost-budget seconds is abandoned);
#   2. the wall time of an allowed `test.ping` from the CLI, as root and as a non-root
#      user the ACL allows: `halite` against a Halite master, `salt` against a stock
#      salt-master, with the same publisher_acl (acl_cost's 50 entries).
#
#   bench/acl.sh [--runs 10] [--budget 60] [--masters halite,stock] [--user halitebench]
#                [--seconds 1] [--minions 10000] [--cost-budget 300] [--no-cost]
#                [--no-stock-cost] [--no-build] [--start-timeout 120]
#
# Must run as root (it creates the user and runs the CLI as that user). The user is
# created when missing (`useradd --system`: own group, no home, no login shell, under the
# lock halite-testkit uses) and never deleted.
#
# Part 2, for each master (Halite first, then stock), in a fresh directory (mode 0755, so
# the user can traverse it) with fresh ports on 127.0.0.1: the master runs as root with
# Salt's defaults plus interface 127.0.0.1, auto_accept and publisher_acl {USER: <the 50
# entries>}; three real minions (halite-minion with the Halite master, salt-minion with
# the stock one): web0000, web0001, log0000. Once all three answer root's test.ping, three
# calls are timed, --runs times each for each caller, root and USER alternating (which
# goes first alternates between runs):
#   <cli> -c <master conf> 'web*' test.ping --out json -t 10            (ACL entry 4)
#   <cli> -c <master conf> 'log*' test.ping --out json -t 10            (ACL entry 49)
#   <cli> -c <master conf> 'web*' test.ping --out json -t 10 --static   (ACL entry 4)
# The second is allowed by the last entry, after every earlier target entry was tried
# (Halite tries the function regexes first and expands the 41 entries that allow
# test.ping; stock Salt expands all 45 target entries). The third is the first with
# --static, which sends stock `salt` down its batch path (it fires salt/batch events on
# master_event_pull.ipc, which only root may open). Each call is timed from process
# start to exit (Python's subprocess with user=/group=, i.e. setuid/setgid before exec,
# no wrapper process, for both callers; environment: HOME, USER, LOGNAME of the caller,
# no SUDO_*) and checked: the targeted minions and only they returned True. A call over
# --budget seconds is killed and the rest of that measure skipped. Last, the user runs
# `'*' test.ping` once, which no entry allows: it must be refused (the ACL is in force).
#
# Permissions: the Halite master opens what ACL users need itself (cachedir and sock_dir
# 0755, master_event_pub.ipc connectable, the user's key file owned by the user). For the
# stock master, Salt's publisher_acl documentation asks the administrator to open the
# directories by hand ("chmod 755 /var/cache/salt /var/cache/salt/master
# /var/cache/salt/master/jobs /var/run/salt /var/run/salt/master"); this script does that
# for the stock master only, on cachedir, cachedir/jobs and sock_dir, once the master is
# up. The docs stop there, but Salt 3008 creates master_event_pub.ipc with mode 0660 for
# CLI users in the master's group; with the master running as root the script gives the
# socket the user's group instead (chgrp), or the stock CLI publishes and then hears no
# return ("No return received").
#
# Environment: CARGO_TARGET_DIR (release binaries, default <repo>/target-swarm, shared with
# bench/swarm.sh and bench/peer.sh), HALITE_SALT_VENV (stock Salt venv, default
# <repo>/.salt-venv), HALITE_TEMP_BASE (run directories, default $TMPDIR or /tmp),
# RESULTS (default bench/results/acl-<timestamp>), HALITE_COMMIT (recorded as the commit
# when the tree is not a git checkout).
# Stock Salt must be runnable by the user: when the venv's interpreter is out of its reach
# (a venv made from a Python under /root), the script makes a venv from the system's
# Python of the same version whose .pth adds the stock venv's site-packages, and runs
# every stock process (master, minions, both callers' CLI) with it; machine.txt says
# which interpreter ran. The in-process auth_check timing runs as root with the venv's
# own interpreter.
#
# Writes under RESULTS: machine.txt, progress.log, acl_cost.md (Halite's table),
# cost.jsonl and stock_cost.jsonl (one record per
# case), cost_table.md (part 1 side by side), results.jsonl (one record per call),
# table.md (part 2) and logs/<master>/. Every process started here is stopped on exit
# (trap), by process group and pid.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target-swarm}
venv=${HALITE_SALT_VENV:-$repo/.salt-venv}
results=${RESULTS:-$repo/bench/results/acl-$(date +%Y%m%d-%H%M%S)}
bin=$CARGO_TARGET_DIR/release
ports_py=$repo/bench/peer_calls.py
py=python3

runs=10 budget=60 masters=halite,stock user=halitebench seconds=1 minions=10000
cost=1 stock_cost=1 cost_budget=300 build=1 start_timeout=120
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=${2:?}; shift 2 ;;
    --budget) budget=${2:?}; shift 2 ;;
    --masters) masters=${2:?}; shift 2 ;;
    --user) user=${2:?}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    --minions) minions=${2:?}; shift 2 ;;
    --start-timeout) start_timeout=${2:?}; shift 2 ;;
    --cost-budget) cost_budget=${2:?}; shift 2 ;;
    --no-cost) cost=0; shift ;;
    --no-stock-cost) stock_cost=0; shift ;;
    --no-build) build=0; shift ;;
    -h|--help) usage ;;
    *) echo "acl.sh: unknown option $1" >&2; usage ;;
  esac
done
for v in "$runs" "$budget" "$minions" "$start_timeout" "$cost_budget"; do
  [[ $v =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] || { echo "acl.sh: expected a positive integer, got '$v'" >&2; exit 2; }
done
[[ $seconds =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "acl.sh: --seconds: a number, got '$seconds'" >&2; exit 2; }
[[ $user =~ ^[a-z_][a-z0-9_-]{0,30}$ ]] && [ "$user" != root ] \
  || { echo "acl.sh: --user: a plain user name other than root, got '$user'" >&2; exit 2; }
IFS=, read -r -a master_list <<< "$masters"
for m in "${master_list[@]}"; do
  case $m in halite|stock) ;; *) echo "acl.sh: bad master '$m' (halite, stock)" >&2; exit 2 ;; esac
done
[ "$(id -u)" = 0 ] || { echo "acl.sh: run as root (it runs the CLI as root and as $user)" >&2; exit 2; }
if [[ " ${master_list[*]} " == *" stock "* ]] && [ ! -x "$venv/bin/salt-master" ]; then
  echo "acl.sh: no stock Salt in $venv (set HALITE_SALT_VENV)" >&2; exit 2
fi

# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
bench_init acl
chmod 755 "$work"

if [ "$build" = 1 ]; then
  cargo build --release --locked -p halite-master -p halite-minion -p halite-cli
  cargo build --release --locked -p halite-acl --example acl_cost
fi
needed=("examples/acl_cost")
[[ " ${master_list[*]} " == *" halite "* ]] && needed+=(halite-master halite-minion halite)
for b in "${needed[@]}"; do
  [ -x "$bin/$b" ] || { echo "acl.sh: $bin/$b is missing (build, or drop --no-build)" >&2; exit 2; }
done

# The user: created once, never deleted (harmless: no home, no login shell).
if ! id -u "$user" >/dev/null 2>&1; then
  (
    flock -w 60 9 || { echo "acl.sh: the useradd lock is held" >&2; exit 1; }
    id -u "$user" >/dev/null 2>&1 \
      || useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$user"
  ) 9>/tmp/halite-testkit-useradd.lock
  log "created the system user $user"
fi

{
  machine_header
  echo "ACL user: $user (uid $(id -u "$user"))"
  echo "args: --runs $runs --budget $budget --masters $masters --seconds $seconds --minions $minions --cost-budget $cost_budget$([ "$cost" = 1 ] || echo ' --no-cost')$([ "$stock_cost" = 1 ] || echo ' --no-stock-cost')"
  echo "stock permissions: chmod 755 cachedir cachedir/jobs sock_dir; chgrp $user sock_dir/master_event_pub.ipc (after the master is up)"
} > "$results/machine.txt"


# The timing helper (standard library; peer_calls.py's JSON reading).
cat > "$work/acl_calls.py" <<'PY'
"""Times CLI calls as root and as an ACL user; prints the table. See bench/acl.sh."""
import argparse, json, os, pwd, signal, statistics, subprocess, sys, time
sys.path.insert(0, os.environ["HALITE_BENCH_DIR"])
from peer_calls import json_docs, kill_group  # noqa: E402

CALLS = [("web", "web*", [], ["web0000", "web0001"], "ACL entry 4"),
         ("log", "log*", [], ["log0000"], "ACL entry 49, after every other"),
         ("static", "web*", ["--static"], ["web0000", "web0001"], "ACL entry 4")]


def env_of(name):
    pw = pwd.getpwnam(name)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SUDO_") and k not in ("HOME", "USER", "LOGNAME", "MAIL")}
    env.update(HOME=pw.pw_dir if name == "root" else os.environ["HALITE_USER_HOME"],
               USER=name, LOGNAME=name)
    return pw, env


def run(cmd, who, timeout):
    pw, env = env_of(who)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, start_new_session=True, text=True,
                         env=env, cwd="/", user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
    try:
        out, err = p.communicate(timeout=timeout)
        return time.perf_counter() - t0, p.returncode, out, err
    except subprocess.TimeoutExpired:
        kill_group(p)
        out, err = p.communicate()
        return time.perf_counter() - t0, None, out, err
    except BaseException:
        kill_group(p)
        p.wait()
        raise


def returned_true(out):
    ids = set()
    for doc in json_docs(out):
        if isinstance(doc, dict):
            ids |= {k for k, v in doc.items() if v is True}
    return ids


def measure(a):
    dnf = set()
    for r in range(1, a.runs + 1):
        whos = ["root", a.user] if r % 2 else [a.user, "root"]
        for key, tgt, extra, expect, _ in CALLS:
            for who in whos:
                if (key, who) in dnf:
                    continue
                cmd = a.cli + ["-c", a.config, tgt, "test.ping", "--out", "json", "-t", "10"] + extra
                try:
                    secs, rc, out, err = run(cmd, who, a.budget)
                except OSError as e:
                    secs, rc, out, err = 0.0, None, "", f"cannot start: {e}"
                rec = {"master": a.master, "call": key, "who": "root" if who == "root" else "user",
                       "user": who, "run": r, "secs": round(secs, 4), "rc": rc}
                if rc is None and err.startswith("cannot start"):
                    rec.update(ok=False, finished=False, note=err)
                    dnf.add((key, who))
                elif rc is None:
                    rec.update(ok=False, finished=False, note=f"did not finish in {a.budget:g} s")
                    dnf.add((key, who))
                else:
                    got = returned_true(out)
                    ok = got == set(expect)
                    rec.update(ok=ok, finished=True, note=f"{len(got & set(expect))}/{len(expect)} True")
                    if not ok:
                        rec.update(stdout=out[-2000:], stderr=err[-2000:])
                print(f"  {a.master} {' '.join([tgt] + extra)} as {who} run {r}: {secs:.3f} s "
                      f"{'ok' if rec['ok'] else 'CHECK FAILED'} ({rec['note']})", file=sys.stderr)
                with open(a.out, "a") as f:
                    f.write(json.dumps(rec) + "\n")
    # The ACL is in force: the same user is refused '*' (log0000 is outside entry 4 and
    # web0000 outside entry 49; no entry covers all three).
    cmd = a.cli + ["-c", a.config, "*", "test.ping", "--out", "json", "-t", "10"]
    try:
        secs, rc, out, err = run(cmd, a.user, a.budget)
    except OSError as e:
        secs, rc, out, err = 0.0, None, "", f"cannot start: {e}"
    got = returned_true(out)
    # Stock `salt` exits 0 here with --out json, and `halite` as stock does: the answer is
    # the text.
    refused = rc is not None and not got and "Authorization error" in out + err
    rec = {"master": a.master, "call": "deny", "who": "user", "user": a.user, "run": 1,
           "secs": round(secs, 4), "rc": rc, "finished": rc is not None, "ok": refused,
           "note": (err or out).strip()[-200:]}
    print(f"  {a.master} '*' as {a.user} (must be refused): {secs:.3f} s, rc {rc}, "
          f"{'refused' if refused else 'NOT REFUSED'}: {rec['note']}", file=sys.stderr)
    with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    return 0


def fmt(secs):
    return f"{secs * 1000:.0f} ms" if secs < 1 else f"{secs:.2f} s"


def summary(recs):
    done = sorted(r["secs"] for r in recs if r["finished"])
    bad = sum(1 for r in recs if r["finished"] and not r["ok"])
    dnf = next((r["note"] for r in recs if not r["finished"]), None)
    if not done:
        return {"text": dnf or "not run", "median": None}
    med = statistics.median(done)
    text = f"{fmt(med)} ({fmt(done[0])}–{fmt(done[-1])})"
    if bad:
        text += f", **{bad} of {len(done)} failed the check**"
    if dnf:
        text += f"; then {dnf}"
    return {"text": text, "median": med if not bad else None}


def table(path):
    if not os.path.exists(path):
        print("no results (every set-up failed; see progress.log and logs/)")
        return 1
    with open(path) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    print("| call | caller | Halite median (min–max) | stock median (min–max) | stock / Halite |")
    print("|---|---|---|---|---|")
    for key, tgt, extra, expect, what in CALLS:
        med = {}
        for who in ("root", "user"):
            cells = {}
            for m in ("halite", "stock"):
                s = summary([r for r in recs if r["master"] == m and r["call"] == key
                             and r["who"] == who])
                cells[m] = s
                med[(m, who)] = s["median"]
            h, s = med[("halite", who)], med[("stock", who)]
            ratio = f"{s / h:.1f}×" if h and s else "–"
            users = sorted({r["user"] for r in recs if r["who"] == who})
            shown = " ".join([f"'{tgt}'", "test.ping"] + extra)
            label = f"`{shown}` ({len(expect)} minion(s), {what})" if who == "root" else ""
            print(f"| {label} | {', '.join(users) or who} | {cells['halite']['text']} | "
                  f"{cells['stock']['text']} | {ratio} |")
        deltas = []
        for m in ("halite", "stock"):
            r, u = med[(m, "root")], med[(m, "user")]
            deltas.append(f"{(u - r) * 1000:+.0f} ms" if r and u else "–")
        print(f"| | user − root (medians) | {deltas[0]} | {deltas[1]} | |")
    deny = {r["master"]: r for r in recs if r["call"] == "deny"}
    if deny:
        shown = [f"{m}: " + ("refused" if r["ok"] else "**not refused**") +
                 f" in {fmt(r['secs'])} ({r['note'].splitlines()[-1] if r['note'] else 'no output'})"
                 for m, r in deny.items()]
        print(f"\nACL in force, `'*' test.ping` as the user: {'; '.join(shown)}")
    for r in recs:
        if r["finished"] and not r["ok"] and r["call"] != "deny":
            print(f"\n- {r['master']} {r['call']} as {r['user']} run {r['run']}: {r['note']}: "
                  f"{(r.get('stderr') or r.get('stdout') or '').strip()[-300:]}")
    return 0


def us(x):
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:,.0f}"


def cost_table(halite_path, stock_path):
    """Halite's check (acl_cost) beside stock Salt's auth_check, per case. The ratio is
    taken against Halite's master step (the check and the decision's text)."""
    def load(path):
        if not os.path.exists(path):
            return {}
        with open(path) as f:
            return {r["name"]: r for r in (json.loads(l) for l in f if l.strip())}
    hal, stock = load(halite_path), load(stock_path)
    print("| case | minions | Halite decision | entry evaluations (minions) | Halite check median / p99 (µs) "
          "| Halite master step median (µs) | stock decision | stock auth_check | stock / Halite master step |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, h in hal.items():
        s = stock.get(name)
        if s is None:
            scell, sdec, ratio = "not run", "–", "–"
        elif not s["finished"]:
            scell, sdec = f"did not finish in {s['budget_s']:g} s", "–"
            ratio = f"≥ {s['budget_s'] * 1e6 / h['master_p50_us']:,.0f}×"
        else:
            secs = s["auth_check_s"]
            scell = (f"{secs * 1e6:.1f} µs" if secs < 1e-3 else
                     f"{secs * 1000:,.1f} ms" if secs < 1 else f"{secs:.2f} s")
            sdec = "allowed" if s["allowed"] else "denied"
            if s["minions"] != h["minions"]:
                sdec += f" (**{s['minions']} minions targeted, Halite {h['minions']}**)"
            r = secs * 1e6 / h["master_p50_us"]
            ratio = f"{r:.2g}×" if r < 10 else f"{r:,.0f}×"
        print(f"| {name} | {h['minions']} | {h['decision']} | "
              f"{h['evaluations']} ({h['minions_evaluated']}) | "
              f"{us(h['check_p50_us'])} / {us(h['check_p99_us'])} | {us(h['master_p50_us'])} | "
              f"{sdec} | {scell} | {ratio} |")
    return 0


def main():
    signal.signal(signal.SIGTERM, lambda s, _f: sys.exit(128 + s))
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("measure")
    sp.add_argument("--master", required=True)
    sp.add_argument("--runs", type=int, required=True)
    sp.add_argument("--budget", type=float, required=True)
    sp.add_argument("--user", required=True)
    sp.add_argument("--config", required=True)
    sp.add_argument("--out", required=True)
    sp.add_argument("cli", nargs="+")
    sp = sub.add_parser("table")
    sp.add_argument("file")
    sp = sub.add_parser("cost-table")
    sp.add_argument("halite")
    sp.add_argument("stock")
    a = p.parse_args()
    if a.cmd == "cost-table":
        return cost_table(a.halite, a.stock)
    return measure(a) if a.cmd == "measure" else table(a.file)


if __name__ == "__main__":
    sys.exit(main())
PY
# Stock Salt where the user can run it: the venv as it is when the user can run its
# `salt` (through `env`, which execs it after setpriv dropped root: setpriv's own exec was
# seen to reach paths the user cannot); otherwise (a venv made from a Python under /root, mode 0700) a
# venv made here from the system's Python of the same version, whose .pth puts the stock
# venv's site-packages on the path, with its own salt, salt-master and salt-minion
# scripts. It then runs every stock process (master, minions, both callers' CLI).
stock_py=$venv/bin/python3
if [[ " ${master_list[*]} " == *" stock "* ]] \
  && ! setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups env "$venv/bin/salt" --version >/dev/null 2>&1; then
  pyver=$("$stock_py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  site=$("$stock_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  sys_py=$(command -v "/usr/bin/python$pyver" "/usr/local/bin/python$pyver" | head -1 || true)
  [ -n "$sys_py" ] || { echo "acl.sh: $user cannot run $stock_py and there is no python$pyver in /usr/bin or /usr/local/bin: set HALITE_SALT_VENV to a venv made from a Python other users can run" >&2; exit 2; }
  "$sys_py" -m venv --without-pip "$work/stock-venv"
  echo "$site" > "$("$work/stock-venv/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/stock-salt.pth"
  for s in salt:salt_main salt-master:salt_master salt-minion:salt_minion; do
    printf '#!%s\nimport sys\nfrom salt.scripts import %s\nsys.exit(%s())\n' \
      "$work/stock-venv/bin/python3" "${s#*:}" "${s#*:}" > "$work/stock-venv/bin/${s%%:*}"
    chmod 755 "$work/stock-venv/bin/${s%%:*}"
  done
  setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups env "$work/stock-venv/bin/salt" --version >/dev/null \
    || { echo "acl.sh: $user cannot import salt from $work/stock-venv" >&2; exit 2; }
  stock_bin=$work/stock-venv/bin
  echo "stock interpreter: $sys_py ($("$sys_py" -V 2>&1)) with $site (the venv's own, $("$stock_py" -V 2>&1), is not reachable by $user)" >> "$results/machine.txt"
else
  stock_bin=$venv/bin
  echo "stock interpreter: $stock_py ($("$stock_py" -V 2>&1))" >> "$results/machine.txt"
fi

# Stock Salt's publisher_acl check (CkMinions.auth_check, as ClearFuncs.publish calls it)
# on acl_cost's fleet, ACL and cases, in-process with the stock venv, run as root.
cat > "$work/stock_cost.py" <<'PY'
"""Times stock Salt's CkMinions.auth_check on acl_cost's fleet, ACL and cases.

The fleet is acl_cost's fleet(), written as Salt keeps it: an empty key file per accepted
minion under pki_dir/minions and the grains in the master's localfs minion data cache
(bank `grains`). Per case: the request's check_minions (what ClearFuncs.publish passes as
`minions`), then auth_check(auth_list, fun, arg, tgt, tgt_type, minions=...,
whitelist=["saltutil.find_job"]); a check under 0.1 s is repeated (up to 1 s) and the
median kept. A check over --budget seconds is abandoned (SIGALRM). See bench/acl.sh."""
import argparse, json, os, signal, statistics, sys, time
import salt.cache, salt.config, salt.utils.minions


class Budget(Exception):
    pass


def fleet(root, n, opts):
    """acl_cost's fleet(): the same ids and grains."""
    width = max(4, len(str(max(n - 1, 0))))
    os.makedirs(f"{root}/pki/minions", exist_ok=True)
    cache = salt.cache.factory(opts)
    placed, with_grains = 0, 0
    groups = [("web", 40), ("db", 20), ("app", 20), ("log", 20)]
    for g, (prefix, percent) in enumerate(groups):
        count = n - placed if g + 1 == len(groups) else n * percent // 100
        placed += count
        for i in range(count):
            mid = f"{prefix}{i:0{width}d}"
            open(f"{root}/pki/minions/{mid}", "w").close()
            if prefix == "log" and i >= count // 2:
                continue
            roles = [prefix] + (["cache"] if i % 10 == 0 else []) + \
                (["monitoring"] if i % 25 == 0 else [])
            cache.store("grains", mid, {
                "id": mid, "os": "CentOS" if i % 3 == 0 else "Debian", "role": prefix,
                "env": "dev" if i % 4 == 0 else "prod", "roles": roles})
            with_grains += 1
    return placed, with_grains


def main():
    p = argparse.ArgumentParser()
    for name in ("--root", "--user", "--acl", "--cases", "--out"):
        p.add_argument(name, required=True)
    p.add_argument("--minions", type=int, required=True)
    p.add_argument("--budget", type=float, required=True)
    a = p.parse_args()
    os.makedirs(f"{a.root}/conf", exist_ok=True)
    with open(f"{a.root}/conf/master", "w") as f:
        f.write(f"root_dir: {a.root}\npki_dir: {a.root}/pki\ncachedir: {a.root}/cache\n"
                f"sock_dir: {a.root}/sock\nlog_file: {a.root}/log/master\nuser: root\n")
    opts = salt.config.master_config(f"{a.root}/conf/master")
    t0 = time.perf_counter()
    n, with_grains = fleet(a.root, a.minions, opts)
    print(f"  stock fleet: {n} keys, {with_grains} grains entries written in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    with open(a.acl) as f:
        auth_list = json.load(f)[a.user]
    with open(a.cases) as f:
        cases = json.load(f)
    ck = salt.utils.minions.CkMinions(opts)

    def on_alarm(_s, _f):
        raise Budget()
    signal.signal(signal.SIGALRM, on_alarm)
    for c in cases:
        t = time.perf_counter()
        minions = ck.check_minions(c["tgt"], c["tgt_type"])["minions"]
        expand = time.perf_counter() - t
        times, allowed, finished = [], None, True
        start = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, a.budget)
        try:
            while True:
                t = time.perf_counter()
                allowed = ck.auth_check(auth_list, c["fun"], c["arg"], c["tgt"], c["tgt_type"],
                                        minions=minions, whitelist=["saltutil.find_job"])
                times.append(time.perf_counter() - t)
                if times[-1] >= 0.1 or time.perf_counter() - start >= 1.0 or len(times) >= 200:
                    break
        except Budget:
            finished = False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        rec = {"name": c["name"], "minions": len(minions), "allowed": allowed,
               "finished": finished, "auth_check_s": statistics.median(times) if times else None,
               "checks": len(times), "expand_s": expand, "budget_s": a.budget}
        print(f"  stock {c['name']}: expand {expand * 1000:.0f} ms, auth_check "
              + (f"{rec['auth_check_s']:.3f} s -> {allowed}" if finished
                 else f"did not finish in {a.budget:g} s"), file=sys.stderr)
        with open(a.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
PY

export HALITE_BENCH_DIR=$repo/bench
export HALITE_USER_HOME=$work/home
mkdir -p "$HALITE_USER_HOME"
chown "$user:" "$HALITE_USER_HOME"

write_master_config() {
  master_config "$@"
  echo "publisher_acl: $acl_json" >> "$1/master"
}

# scenario MASTER: start, wait for the minions, open what stock needs, measure.
scenario() {
  local master=$1 dir pub ret id t0 root
  dir=$work/$master
  mkdir -p "$dir/procs"
  read -r pub ret < <("$py" "$ports_py" ports 2 | paste -sd' ')
  root=$dir/master-root
  write_master_config "$dir/master-conf" "$root" "$pub" "$ret"
  log "== $master master, ports $pub/$ret, load $(cut -d' ' -f1-3 /proc/loadavg)"
  local master_cmd minion_cmd cli_cmd
  if [ "$master" = halite ]; then
    master_cmd=("$bin/halite-master"); minion_cmd=("$bin/halite-minion"); cli_cmd=("$bin/halite")
  else
    master_cmd=("$stock_bin/salt-master"); minion_cmd=("$stock_bin/salt-minion"); cli_cmd=("$stock_bin/salt")
  fi
  t0=$(date +%s.%N)
  start_bg master "$dir/procs" "${master_cmd[@]}" -c "$dir/master-conf"
  waited "$py" "$ports_py" wait-port "$ret" 60 || { log "$master master did not listen"; return 1; }
  for id in web0000 web0001 log0000; do
    write_minion_config "$dir/minion-$id" "$id" "$ret"
    start_bg "minion-$id" "$dir/procs" "${minion_cmd[@]}" -c "$dir/minion-$id"
  done
  waited "$py" "$ports_py" wait-ping 3 "$start_timeout" -- \
    "${cli_cmd[@]}" -c "$dir/master-conf" '*' test.ping --out json --static -t 10 || return 1
  log "all 3 minions answer after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s"
  [ -f "$root/cache/.${user}_key" ] || { log "$master master wrote no key for $user"; return 1; }
  if [ "$master" = stock ]; then
    # Salt's publisher_acl documentation: the administrator opens these to ACL users.
    chmod 755 "$root/cache" "$root/cache/jobs" "$root/sock"
    # Salt 3008 creates master_event_pub.ipc 0660 for CLI users in the master's group
    # (transport/base.py); the master runs as root here, so the socket's group becomes
    # the user's instead of putting the user in group root.
    chgrp "$(id -g "$user")" "$root/sock/master_event_pub.ipc"
  fi
  waited "$py" "$work/acl_calls.py" measure --master "$master" --runs "$runs" --budget "$budget" \
    --user "$user" --config "$dir/master-conf" --out "$results/results.jsonl" \
    -- "${cli_cmd[@]}" 2> >(tee -a "$progress" >&2)
}

keep_logs() {
  local dir=$work/$1 to=$results/logs/$1
  mkdir -p "$to"
  cp "$dir/master-root/log/master" "$to/" 2>/dev/null || true
  cp "$dir/master-conf/master" "$to/master.conf" 2>/dev/null || true
  cp "$dir"/procs/* "$to/" 2>/dev/null || true
}

acl_json=$("$bin/examples/acl_cost" --print-acl --user "$user")
if [ "$cost" = 1 ]; then
  log "== Halite's ACL check: $minions minions, 50 entries, $seconds s per case"
  "$bin/examples/acl_cost" --minions "$minions" --seconds "$seconds" --user "$user" \
    --jsonl "$results/cost.jsonl" | tee "$results/acl_cost.md"
  if [ "$stock_cost" = 1 ] && [[ " ${master_list[*]} " == *" stock "* ]]; then
    echo "$acl_json" > "$work/acl.json"
    "$bin/examples/acl_cost" --print-cases > "$work/cases.json"
    log "== stock Salt's auth_check on the same fleet, ACL and cases (budget ${cost_budget} s per check)"
    waited "$venv/bin/python3" "$work/stock_cost.py" --root "$work/stock-cost" \
      --minions "$minions" --user "$user" --acl "$work/acl.json" --cases "$work/cases.json" \
      --budget "$cost_budget" --out "$results/stock_cost.jsonl" 2> >(tee -a "$progress" >&2) \
      || log "!! stock auth_check timing failed"
  fi
  "$py" "$work/acl_calls.py" cost-table "$results/cost.jsonl" "$results/stock_cost.jsonl" \
    | tee "$results/cost_table.md"
fi

for m in "${master_list[@]}"; do
  scenario "$m" || log "!! $m master: set-up failed; logs in $results/logs/$m"
  stop_all
  keep_logs "$m"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/machine.txt"
"$py" "$work/acl_calls.py" table "$results/results.jsonl" | tee "$results/table.md"
echo "results in $results"
