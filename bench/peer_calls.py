#!/usr/bin/env python3
"""Helper of bench/peer.sh: free ports, readiness waits, the timed peer calls, the table.

Standard library only (any python3 runs it). Subcommands:

  ports K
      print K free TCP ports on 127.0.0.1, one per line
  wait-port PORT TIMEOUT
      wait until something accepts TCP connections on 127.0.0.1:PORT
  wait-swarm FILE TIMEOUT
      wait until halite-swarm's JSON-lines output FILE has its `ready` line
  wait-ping N TIMEOUT -- CMD...
      run CMD (a `salt`/`halite` '*' test.ping --out json --static) until N minions
      answer True, at most TIMEOUT seconds in all
  measure --master M --count N --runs R --budget B --call BIN --config DIR --out FILE
      time `BIN -c DIR test.ping`, then R times (interleaved, as the stock baseline does)
      `BIN -c DIR publish.publish '*' test.ping` and `BIN -c DIR publish.runner manage.up`,
      all with `--out=json`; append one JSON record per call to FILE
  table FILE
      print the Markdown table of the records in FILE (median, min, max; Halite vs stock)

A call is timed from before its process starts to its exit (wall clock, perf_counter), so
the figures include the CLI's own start-up, its sign-in and the master's work, as a user
would see them. A call still running after B seconds is killed (its whole process group)
and the remaining runs of that measure are skipped; the table then says "did not finish
in B s". The check of each call (every minion returned True; manage.up listed every
minion) is recorded beside its time.
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

MEASURES = [
    ("publish", "publish.publish '*' test.ping", ["publish.publish", "*", "test.ping"]),
    ("runner", "publish.runner manage.up", ["publish.runner", "manage.up"]),
    ("call_ping", "test.ping (no publish: the CLI's floor)", ["test.ping"]),
]
LABELS = {key: label for key, label, _ in MEASURES}
ARGS = {key: args for key, _, args in MEASURES}
GOALS = {("publish", 20): 0.1, ("runner", 20): 0.2, ("publish", 1000): 0.3, ("runner", 1000): 0.5}


def ports(k):
    socks = []
    try:
        for _ in range(k):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        for s in socks:
            print(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()


def wait_port(port, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return 0
        except OSError:
            time.sleep(0.1)
    print(f"nothing listens on 127.0.0.1:{port} after {timeout} s", file=sys.stderr)
    return 1


def wait_swarm(path, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                for line in f:
                    try:
                        doc = json.loads(line)
                    except ValueError:
                        continue
                    if doc.get("type") == "ready":
                        print(f"swarm ready: {json.dumps(doc)}", file=sys.stderr)
                        return 0
        except OSError:
            pass
        time.sleep(0.2)
    print(f"the swarm was not ready within {timeout} s ({path})", file=sys.stderr)
    return 1


def json_docs(text):
    """Every JSON document in `text` (Salt's json outputter prints one per minion/call)."""
    dec, i, out = json.JSONDecoder(), 0, []
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        try:
            doc, i = dec.raw_decode(text, i)
        except ValueError:
            break
        out.append(doc)
    return out


def trues(text):
    n = 0
    for doc in json_docs(text):
        if isinstance(doc, dict):
            n += sum(1 for v in doc.values() if v is True)
    return n


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run(cmd, timeout):
    """(seconds, returncode or None when killed at `timeout`, stdout, stderr).

    The command runs in its own process group, which is killed on timeout and when this
    helper is interrupted (SIGINT, SIGTERM), so no call outlives the benchmark."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, start_new_session=True, text=True)
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


def wait_ping(n, timeout, cmd):
    deadline = time.monotonic() + timeout
    got = 0
    while time.monotonic() < deadline:
        left = max(1.0, deadline - time.monotonic())
        _, _, out, _ = run(cmd, min(left, 120.0))
        got = trues(out)
        if got >= n:
            print(f"{got}/{n} minions answer test.ping", file=sys.stderr)
            return 0
        time.sleep(1)
    print(f"only {got}/{n} minions answered test.ping within {timeout} s", file=sys.stderr)
    return 1


def check(measure, n, out):
    """(ok, what the call returned, in words)."""
    local = None
    for doc in json_docs(out):
        if isinstance(doc, dict) and "local" in doc:
            local = doc["local"]
    if measure == "call_ping":
        return local is True, repr(local)
    if measure == "publish":
        if not isinstance(local, dict):
            return False, f"not a mapping: {str(local)[:200]}"
        got = sum(1 for v in local.values() if v is True)
        return got == n, f"{got}/{n} True"
    if not isinstance(local, list):
        return False, f"not a list: {str(local)[:200]}"
    return len(set(local)) == n, f"{len(set(local))}/{n} up"


def measure(a):
    records = []
    order = ["call_ping"] * a.runs + ["publish", "runner"] * a.runs
    dnf = set()
    seen = {}
    for m in order:
        if m in dnf:
            continue
        seen[m] = seen.get(m, 0) + 1
        cmd = [a.call, "-c", a.config] + ARGS[m] + ["--out=json"]
        secs, rc, out, err = run(cmd, a.budget)
        rec = {"master": a.master, "count": a.count, "measure": m, "run": seen[m],
               "secs": round(secs, 4), "rc": rc}
        if rc is None:
            rec.update(ok=False, finished=False, note=f"did not finish in {a.budget:g} s")
            dnf.add(m)
        else:
            ok, what = check(m, a.count, out)
            rec.update(ok=ok, finished=True, note=what)
            if not ok:
                rec["stdout"] = out[-2000:]
                rec["stderr"] = err[-2000:]
        records.append(rec)
        print(f"  {a.master} N={a.count} {m} run {seen[m]}: {secs:.3f} s "
              f"{'ok' if rec['ok'] else 'CHECK FAILED'} ({rec['note']})", file=sys.stderr)
        with open(a.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
    return 0


def fmt(secs):
    return f"{secs * 1000:.0f} ms" if secs < 1 else f"{secs:.2f} s"


def summary(recs):
    """(median, min, max, runs, failed checks, dnf note) of one measure's records."""
    done = [r["secs"] for r in recs if r["finished"]]
    bad = sum(1 for r in recs if r["finished"] and not r["ok"])
    dnf = next((r["note"] for r in recs if not r["finished"]), None)
    if not done:
        return None, None, None, 0, bad, dnf
    return statistics.median(done), min(done), max(done), len(done), bad, dnf


def cell(s):
    med, lo, hi, n, bad, dnf = s
    if med is None:
        return dnf or "–"
    text = f"{fmt(med)} ({fmt(lo)}–{fmt(hi)})"
    if bad:
        text += f", {bad} of {n} incomplete"
    if dnf:
        text += f"; then {dnf}"
    return text


def table(path):
    recs = []
    if not os.path.exists(path):
        print("no results (every set-up failed; see progress.log and logs/)")
        return 1
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                recs.append(json.loads(line))
    counts = sorted({r["count"] for r in recs})
    print("| N | call | Halite median (min–max) | stock median (min–max) | ratio for Halite | goal |")
    print("|---|---|---|---|---|---|")
    for n in counts:
        for key, label, _ in MEASURES:
            by = {m: [r for r in recs if r["count"] == n and r["measure"] == key and r["master"] == m]
                  for m in ("halite", "stock")}
            if not by["halite"] and not by["stock"]:
                continue
            h, s = summary(by["halite"]), summary(by["stock"])
            stock_dnf = [r["secs"] for r in by["stock"] if not r["finished"]]
            if h[0] and s[0]:
                ratio = f"{s[0] / h[0]:.1f}×" + (" (stock incomplete)" if s[4] else "")
            elif h[0] and stock_dnf:
                ratio = f"≥ {min(stock_dnf) / h[0]:.0f}×"
            else:
                ratio = "–"
            goal = GOALS.get((key, n))
            gtext = "–" if goal is None else f"≤ {fmt(goal)}: " + (
                "met" if h[0] is not None and h[0] <= goal else "missed")
            print(f"| {n} | `{label}` | {cell(h) if by['halite'] else 'not run'} | "
                  f"{cell(s) if by['stock'] else 'not run'} | {ratio} | {gtext} |")
    incomplete = [r for r in recs if r["finished"] and not r["ok"]]
    for r in incomplete:
        print(f"\n- {r['master']} N={r['count']} {r['measure']} run {r['run']}: {r['note']}")
    return 0


def on_term(signum, _frame):
    raise SystemExit(128 + signum)


def main():
    signal.signal(signal.SIGTERM, on_term)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("ports")
    sp.add_argument("k", type=int)
    sp = sub.add_parser("wait-port")
    sp.add_argument("port", type=int)
    sp.add_argument("timeout", type=float)
    sp = sub.add_parser("wait-swarm")
    sp.add_argument("file")
    sp.add_argument("timeout", type=float)
    sp = sub.add_parser("wait-ping")
    sp.add_argument("n", type=int)
    sp.add_argument("timeout", type=float)
    sp.add_argument("command", nargs=argparse.REMAINDER)
    sp = sub.add_parser("measure")
    sp.add_argument("--master", required=True, choices=["halite", "stock"])
    sp.add_argument("--count", type=int, required=True)
    sp.add_argument("--runs", type=int, required=True)
    sp.add_argument("--budget", type=float, required=True)
    sp.add_argument("--call", required=True)
    sp.add_argument("--config", required=True)
    sp.add_argument("--out", required=True)
    sp = sub.add_parser("table")
    sp.add_argument("file")
    a = p.parse_args()
    if a.cmd == "ports":
        ports(a.k)
        return 0
    if a.cmd == "wait-port":
        return wait_port(a.port, a.timeout)
    if a.cmd == "wait-swarm":
        return wait_swarm(a.file, a.timeout)
    if a.cmd == "wait-ping":
        cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
        return wait_ping(a.n, a.timeout, cmd)
    if a.cmd == "measure":
        return measure(a)
    return table(a.file)


if __name__ == "__main__":
    sys.exit(main())
