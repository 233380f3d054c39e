#!/usr/bin/env python3
"""Issue-3 benchmark: Halite minions vs stock salt-minions, behind the same Halite master.

Measures, in one run on this machine:
  * idle RSS and PSS of one minion (process tree), Halite vs stock;
  * start -> first successful test.ping for a brand-new minion (fresh key, auto_accept),
    and for a minion whose key is already accepted, Halite vs stock;
  * `halite '*' test.ping` wall time (p50 of RUNS) with N Halite minions vs N stock minions.

Run with the stock venv's python after `cargo build --release`:
    .salt-venv/bin/python bench/minion.py [--n 20] [--runs 20] [--trials 3]
        [--halite-minion PATH]
--halite-minion measures another build of the minion, e.g. the packaged one
(`scripts/lean-minion` prints its path); the master and CLI stay those of target/release.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import master_ping as mp  # noqa: E402

HALITE = mp.HALITE_BIN
MINION = {"halite": [os.path.join(HALITE, "halite-minion")], "stock": [f"{mp.VENV}/bin/salt-minion"]}


def start_master(base, n):
    pub, ret = mp.free_port(), mp.free_port()
    mdir = mp.setup(base, n, pub, ret)
    master = mp.spawn([os.path.join(HALITE, "halite-master"), "-c", mdir], f"{base}/master.out")
    time.sleep(1)
    return mdir, master


def first_ping(mdir, mid, t0, budget=120):
    """Publishes `test.ping` to `mid` with --async every 0.1 s while listening on the master
    bus (the stock baseline's method); seconds from t0 to the first return event."""
    import salt.utils.event

    ev = salt.utils.event.get_event("master", sock_dir=f"{mdir}/root/sock", listen=True)
    try:
        last = 0.0
        while time.monotonic() - t0 < budget:
            if time.monotonic() - last > 0.1:
                subprocess.run([os.path.join(HALITE, "halite"), "-c", mdir, "-L", mid, "test.ping", "--async"],
                               capture_output=True, timeout=60)
                last = time.monotonic()
            e = ev.get_event(wait=0.05, tag="salt/job/", full=True)
            if e and e["tag"].endswith(f"/ret/{mid}"):
                return time.monotonic() - t0
        return None
    finally:
        ev.destroy()


def startup(kind, trials):
    fresh, reuse, rss, pss = [], [], [], []
    for _ in range(trials):
        base = tempfile.mkdtemp(prefix="hm-", dir="/tmp")
        mdir, master = start_master(base, 1)
        t0 = time.monotonic()
        p = mp.spawn(MINION[kind] + ["-c", f"{base}/n0"], f"{base}/n0.out")
        fresh.append(first_ping(mdir, "bm0", t0))
        time.sleep(3)
        rss.append(mp.rss_kib(mp.tree(p.pid)) / 1024)
        pss.append(mp.pss_kib(mp.tree(p.pid)) / 1024)
        mp.stop(p)
        time.sleep(1)
        t0 = time.monotonic()
        p = mp.spawn(MINION[kind] + ["-c", f"{base}/n0"], f"{base}/n0.out")
        reuse.append(first_ping(mdir, "bm0", t0))
        mp.stop(p)
        mp.stop(master)
        shutil.rmtree(base, ignore_errors=True)
    med = lambda xs: round(statistics.median([x for x in xs if x is not None]), 3) if any(x is not None for x in xs) else None
    return {"minion": kind, "fresh_key_first_ping_s": med(fresh), "known_key_first_ping_s": med(reuse),
            "idle_rss_mib": round(statistics.median(rss), 2), "idle_pss_mib": round(statistics.median(pss), 2)}


def fleet(kind, n, runs):
    base = tempfile.mkdtemp(prefix="hm-", dir="/tmp")
    mdir, master = start_master(base, n)
    minions = [mp.spawn(MINION[kind] + ["-c", f"{base}/n{i}"], f"{base}/n{i}.out") for i in range(n)]
    cli = [os.path.join(HALITE, "halite")]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not mp.ping(cli, mdir, n, wait=5)[1]:
        time.sleep(1)
    time.sleep(2)
    total_rss = sum(mp.rss_kib(mp.tree(m.pid)) for m in minions) / 1024
    times = []
    for _ in range(runs):
        dt, ok = mp.ping(cli, mdir, n)
        if not ok:
            raise SystemExit(f"{kind}: a ping missed a minion")
        times.append(dt)
    for m in minions:
        mp.stop(m)
    mp.stop(master)
    shutil.rmtree(base, ignore_errors=True)
    return {"minion": kind, "n": n, "ping_p50_s": round(statistics.median(times), 3),
            "ping_max_s": round(max(times), 3), "minions_total_rss_mib": round(total_rss, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--startup-only", action="store_true")
    ap.add_argument("--halite-minion", help="the halite-minion binary to measure")
    a = ap.parse_args()
    if a.halite_minion:
        MINION["halite"] = [os.path.abspath(a.halite_minion)]
    res = {}
    for kind in ("halite", "stock"):
        res[f"startup_{kind}"] = startup(kind, a.trials)
        print(json.dumps(res[f"startup_{kind}"]), flush=True)
    if a.startup_only:
        return
    for kind in ("halite", "stock"):
        res[f"fleet_{kind}"] = fleet(kind, a.n, a.runs)
        print(json.dumps(res[f"fleet_{kind}"]), flush=True)
    h, s = res["startup_halite"], res["startup_stock"]
    fh, fs = res["fleet_halite"], res["fleet_stock"]
    print(f"\nidle minion RSS: halite {h['idle_rss_mib']} MiB vs stock {s['idle_rss_mib']} MiB")
    print(f"idle minion PSS: halite {h['idle_pss_mib']} MiB vs stock {s['idle_pss_mib']} MiB")
    print(f"new minion start -> first ping: halite {h['fresh_key_first_ping_s']} s vs stock {s['fresh_key_first_ping_s']} s")
    print(f"known minion start -> first ping: halite {h['known_key_first_ping_s']} s vs stock {s['known_key_first_ping_s']} s")
    print(f"test.ping with {a.n} minions (Halite master, halite CLI): halite minions {fh['ping_p50_s']} s vs stock minions {fs['ping_p50_s']} s")


if __name__ == "__main__":
    sys.exit(main())
