#!/usr/bin/env python3
"""Issue-2 benchmark: `test.ping` through a Halite master vs a stock salt-master.

For each N, two phases on this machine, in one run:
  A. halite-master + N stock salt-minions (3008.3), auto_accept
  B. stock salt-master + N stock salt-minions, auto_accept
Each phase measures RUNS sequential CLI calls `<cli> '*' test.ping` (wall time, all N True
required) with the Halite CLI (`halite`) and with the stock `salt` CLI, plus the master
process tree's RSS and CPU-seconds consumed during those calls.

Run with the stock venv's python (it only needs the standard library):
    .salt-venv/bin/python bench/master_ping.py [N ...] [--runs 20]
Everything listens on 127.0.0.1; all processes are stopped at the end.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.environ.get("HALITE_SALT_VENV", os.path.join(REPO, ".salt-venv"))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
HALITE_BIN = os.path.join(TARGET, "release")
CLK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def _sum_kib(pids, name, field):
    """The sum of `field` (a kB line of /proc/<pid>/<name>) over `pids`; gone processes count 0."""
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/{name}") as f:
                for line in f:
                    if line.startswith(field):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def rss_kib(pids):
    return _sum_kib(pids, "status", "VmRSS:")


def pss_kib(pids):
    return _sum_kib(pids, "smaps_rollup", "Pss:")


def cpu_s(pids):
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / CLK


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def setup(base, n, pub, ret):
    user = os.environ.get("USER") or "root"
    m = f"{base}/m"
    write(f"{m}/master", f"""interface: 127.0.0.1
publish_port: {pub}
ret_port: {ret}
root_dir: {m}/root
pki_dir: {m}/root/pki
cachedir: {m}/root/cache
sock_dir: {m}/root/sock
log_file: {m}/root/log/master
user: {user}
auto_accept: true
worker_threads: 5
""")
    for i in range(n):
        d = f"{base}/n{i}"
        write(f"{d}/minion", f"""id: bm{i}
master: 127.0.0.1
master_port: {ret}
root_dir: {d}
pki_dir: {d}/pki
cachedir: {d}/cache
sock_dir: {d}/sock
log_file: {d}/log/minion
user: {user}
acceptance_wait_time: 1
random_reauth_delay: 0
enable_fqdns_grains: false
""")
    return m


def spawn(cmd, log):
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def stop(p):
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(20)
    except Exception:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except Exception:
            pass


def ping(cli, mdir, n, wait=20):
    t0 = time.monotonic()
    try:
        out = subprocess.run(cli + ["-c", mdir, "*", "test.ping", "--out", "json", "-t", str(wait)],
                             capture_output=True, timeout=wait + 60)
    except subprocess.TimeoutExpired:
        return time.monotonic() - t0, False
    dt = time.monotonic() - t0
    got = {}
    for doc in out.stdout.decode().replace("}\n{", "}\x00{").split("\x00"):
        try:
            got.update(json.loads(doc))
        except ValueError:
            pass
    ok = len([v for v in got.values() if v is True]) == n
    return dt, ok


def phase(kind, n, runs):
    base = tempfile.mkdtemp(prefix="hb-", dir="/tmp")
    pub, ret = free_port(), free_port()
    mdir = setup(base, n, pub, ret)
    if kind == "halite":
        master = spawn([os.path.join(HALITE_BIN, "halite-master"), "-c", mdir], f"{base}/master.out")
    else:
        master = spawn([f"{VENV}/bin/salt-master", "-c", mdir], f"{base}/master.out")
    time.sleep(2 if kind == "halite" else 6)
    minions = [spawn([f"{VENV}/bin/salt-minion", "-c", f"{base}/n{i}"], f"{base}/n{i}.out") for i in range(n)]
    halite_cli = [os.path.join(HALITE_BIN, "halite")]
    stock_cli = [f"{VENV}/bin/salt"]
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if ping(halite_cli if kind == "halite" else stock_cli, mdir, n, wait=5)[1]:
            break
        time.sleep(1)
    else:
        raise SystemExit(f"{kind}: {n} minions never all answered")
    pids = tree(master.pid)
    res = {"master": kind, "minions": n}
    for name, cli in (("halite_cli", halite_cli), ("salt_cli", stock_cli)):
        cpu0 = cpu_s(pids)
        times, peak = [], 0
        for _ in range(runs):
            dt, ok = ping(cli, mdir, n)
            if not ok:
                raise SystemExit(f"{kind}/{name}: a ping missed a minion")
            times.append(dt)
            peak = max(peak, rss_kib(tree(master.pid)))
        res[name] = {
            "p50_s": round(statistics.median(times), 3),
            "max_s": round(max(times), 3),
            "master_cpu_s": round(cpu_s(tree(master.pid)) - cpu0, 2),
            "master_peak_rss_mib": round(peak / 1024, 1),
        }
    res["master_rss_mib_after"] = round(rss_kib(tree(master.pid)) / 1024, 1)
    for m in minions:
        stop(m)
    stop(master)
    shutil.rmtree(base, ignore_errors=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ns", nargs="*", type=int, default=[1, 5, 20])
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    results = []
    for n in a.ns:
        for kind in ("halite", "stock"):
            r = phase(kind, n, a.runs)
            print(json.dumps(r), flush=True)
            results.append(r)
    print("\n| N | master | CLI | p50 s | master CPU s | master peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    for r in results:
        for cli in ("halite_cli", "salt_cli"):
            c = r[cli]
            print(f"| {r['minions']} | {r['master']} | {cli} | {c['p50_s']} | {c['master_cpu_s']} | {c['master_peak_rss_mib']} |")
    for n in a.ns:
        h = next(r for r in results if r["minions"] == n and r["master"] == "halite")
        s = next(r for r in results if r["minions"] == n and r["master"] == "stock")
        print(f"N={n}: halite master+CLI p50 {h['halite_cli']['p50_s']} s vs stock {s['salt_cli']['p50_s']} s "
              f"(x{s['salt_cli']['p50_s'] / max(h['halite_cli']['p50_s'], 1e-6):.1f}); "
              f"master RSS {h['halite_cli']['master_peak_rss_mib']} vs {s['salt_cli']['master_peak_rss_mib']} MiB "
              f"(x{s['salt_cli']['master_peak_rss_mib'] / max(h['halite_cli']['master_peak_rss_mib'], 1e-6):.1f})")


if __name__ == "__main__":
    sys.exit(main())
