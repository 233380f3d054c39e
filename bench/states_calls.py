#!/usr/bin/env python3
"""Helper of bench/states.sh: the timed `state.apply` runs and the table.

Standard library only; uses peer_calls.py's process handling. Subcommands:

  measure --setup S --count N --runs R --budget B --cpu-pid PID --out FILE -- CLI...
      run `CLI '*' state.apply --out json --static -t B` once cold (the first run makes
      the changes) and R times warm; record each run's wall time (process start to exit),
      the master process tree's CPU over the run, and whether every one of the N minions
      returned every state with result True (and, warm, no changes)
  table FILE
      the Markdown table: per set-up and N, the warm wall median (min-max), master CPU
      per minion-highstate, and the cold run; ratios against stock in the same run
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_calls import fmt, json_docs, run  # noqa: E402

SETUPS = {
    "stock": "stock salt-master + stock salt-minions, `salt`",
    "mixed": "Halite master + stock salt-minions, `halite`",
    "halite": "Halite master + Halite minions (fallback executor), `halite`",
}
STATES = 3


def tree_cpu(pid):
    """utime+stime (s) of `pid` and its descendants."""
    tck = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tck
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError, IndexError):
            continue
    return total


def check(out, n, warm):
    """(ok, note): every minion returned STATES states, all True, none changed if warm."""
    docs = [d for d in json_docs(out) if isinstance(d, dict)]
    rets = {}
    for d in docs:
        rets.update(d)
    if len(rets) < n:
        return False, f"{len(rets)}/{n} minions returned"
    for mid, ret in rets.items():
        if not isinstance(ret, dict) or len(ret) != STATES:
            return False, f"{mid}: {str(ret)[:200]}"
        for sid, st in ret.items():
            if not isinstance(st, dict) or st.get("result") is not True:
                return False, f"{mid} {sid}: {str(st)[:200]}"
            if warm and st.get("changes"):
                return False, f"{mid} {sid} changed on a warm run"
    return True, ""


def measure(a):
    cmd = a.cli + ["*", "state.apply", "--out", "json", "--static", "-t", str(a.budget)]
    recs = []
    for i in range(a.runs + 1):
        warm = i > 0
        cpu0 = tree_cpu(a.cpu_pid)
        secs, rc, out, err = run(cmd, a.budget + 30)
        cpu = tree_cpu(a.cpu_pid) - cpu0
        ok, note = check(out, a.count, warm) if rc is not None else (False, "killed")
        if not ok and err.strip():
            note += " | " + err.strip()[-300:]
        rec = {"setup": a.setup, "count": a.count, "warm": warm, "secs": secs,
               "master_cpu": cpu, "ok": ok, "note": note}
        recs.append(rec)
        print(f"  {a.setup} N={a.count} {'warm' if warm else 'cold'} run: {secs:.3f} s, "
              f"master CPU {cpu:.3f} s, {'ok' if ok else 'FAILED: ' + note}", file=sys.stderr)
    with open(a.out, "a") as f:
        for rec in recs:
            f.write(json.dumps(rec) + "\n")
    return 0


def table(path):
    if not os.path.exists(path):
        print("no results (every set-up failed; see progress.log and logs/)")
        return 1
    with open(path) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    rows = {}
    for r in recs:
        rows.setdefault((r["count"], r["setup"]), []).append(r)
    print("| N | set-up | warm wall median (min–max) | master CPU per minion-highstate "
          "| cold run (wall, master CPU) | wall vs stock | master CPU vs stock |")
    print("|---|---|---|---|---|---|---|")
    base = {}
    for (n, setup), rs in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1] != "stock")):
        warm = [r for r in rs if r["warm"] and r["ok"]]
        cold = next((r for r in rs if not r["warm"]), None)
        bad = sum(1 for r in rs if r["warm"] and not r["ok"])
        if warm:
            med = statistics.median(r["secs"] for r in warm)
            # The sum over the warm runs: /proc's CPU times tick every 10 ms.
            cpu = sum(r["master_cpu"] for r in warm) / (len(warm) * n)
            cell = f"{fmt(med)} ({fmt(min(r['secs'] for r in warm))}–{fmt(max(r['secs'] for r in warm))})"
            if bad:
                cell += f", {bad} failed"
            cpu_cell = f"{cpu * 1000:.1f} ms"
        else:
            med = cpu = None
            cell, cpu_cell = f"every warm run failed ({bad})", "–"
        if setup == "stock":
            base[n] = (med, cpu)
        ratio_wall = ratio_cpu = "–"
        if setup != "stock" and med and base.get(n, (None, None))[0]:
            ratio_wall = f"{base[n][0] / med:.1f}×"
        if setup != "stock" and cpu and base.get(n, (None, None))[1]:
            ratio_cpu = f"{base[n][1] / cpu:.1f}×"
        cold_cell = (f"{fmt(cold['secs'])}, {cold['master_cpu']:.2f} s"
                     + ("" if cold["ok"] else " (failed)")) if cold else "–"
        print(f"| {n} | {SETUPS.get(setup, setup)} | {cell} | {cpu_cell} | {cold_cell} "
              f"| {ratio_wall} | {ratio_cpu} |")
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("measure")
    sp.add_argument("--setup", required=True)
    sp.add_argument("--count", type=int, required=True)
    sp.add_argument("--runs", type=int, required=True)
    sp.add_argument("--budget", type=int, required=True)
    sp.add_argument("--cpu-pid", type=int, required=True)
    sp.add_argument("--out", required=True)
    sp.add_argument("cli", nargs="+")
    sp = sub.add_parser("table")
    sp.add_argument("path")
    a = ap.parse_args()
    if a.cmd == "measure":
        return measure(a)
    return table(a.path)


if __name__ == "__main__":
    sys.exit(main())
