#!/usr/bin/env python3
"""Issue-4/15 benchmark: the master event bus of halite-master, with a Rust sender and with the
stock Python sender (`salt.utils.event` `fire_event`), events/s and fire->listener latency.

Runs, each against a fresh halite-master (journal on unless --no-journal; --stock adds the
same runs against a stock salt-master for a same-machine comparison):
  rust-flood   Rust sender (one pull connection, 256 events per write) -> Rust listener
               (`MasterBus::listen` live: the journal from now on a Halite master with the
               journal, else the pub socket), N_RUST events as fast as possible; also how
               many the journal stored.
  rust-flood-raw  the same with a plain pub-socket listener (`halite_bus::Listener`), which
               reports what its `halite/bus/gap` events say it lost (gap_dropped).
  rust-paced   Rust sender at --rate events/s -> Rust listener (latency when not saturated).
  py-py        stock Python sender -> stock Python listener, N_PY events: the method of
               shared/baseline/bench_events.py (one process fires with MasterEvent.fire_event,
               a separate get_event(listen=True) process counts).
  py-rust      stock Python sender -> Rust listener.

Build first (release):
    cargo build --release -p halite-master -p halite-journal --bins --examples
Then, with the stock venv's python:
    .salt-venv/bin/python bench/master_bus.py [--n-rust 200000] [--n-py 10000] [--stock]
Binaries come from $CARGO_TARGET_DIR (default target/)/release. Prints JSON per run.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.environ.get("HALITE_SALT_VENV", os.path.join(REPO, ".salt-venv"))
PY = os.path.join(VENV, "bin", "python")
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
MASTER_BIN = os.path.join(TARGET, "release", "halite-master")
BENCH_BIN = os.path.join(TARGET, "release", "examples", "bus_bench")

PY_LISTENER = r"""
import sys, time, json
import salt.config, salt.utils.event
opts = salt.config.master_config(sys.argv[1])
prefix, n, idle = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
ev = salt.utils.event.get_event('master', sock_dir=opts['sock_dir'], opts=opts, listen=True)
ev.get_event(wait=0.1)  # connect now
print('ready', flush=True)
cnt = 0; first = last = None; last_seen = time.time(); lat = []
while cnt < n and time.time() - last_seen < idle:
    e = ev.get_event(wait=0.5, full=True)
    if not e:
        continue
    if e['tag'].startswith(prefix):
        now = time.time()
        if first is None: first = now
        last = now; cnt += 1; last_seen = now
        lat.append(now - e['data']['t_sent'])
print(json.dumps({'received': cnt, 'first': first, 'last': last, 'lat': lat}), flush=True)
"""

PY_FIRE = r"""
import sys, time, json
import salt.config, salt.utils.event
opts = salt.config.master_config(sys.argv[1]); n = int(sys.argv[2])
ev = salt.utils.event.get_event('master', sock_dir=opts['sock_dir'], opts=opts, listen=False)
ev.fire_event({'warmup': True}, 'warmup/x')
t0 = time.time(); ok = 0
for i in range(n):
    ok += bool(ev.fire_event({'i': i, 't_sent': time.time()}, 'bench/py/%d' % i))
t1 = time.time()
print(json.dumps({'t0': t0, 't1': t1, 'ok': ok}), flush=True)
time.sleep(1)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup(extra):
    base = tempfile.mkdtemp(prefix="hbus-", dir="/tmp")
    user = os.environ.get("USER") or "root"
    r = f"{base}/root"
    for sub in ("pki", "cache", "sock", "log"):
        os.makedirs(f"{r}/{sub}", exist_ok=True)
    with open(f"{base}/master", "w") as f:
        f.write(f"""interface: 127.0.0.1
publish_port: {free_port()}
ret_port: {free_port()}
root_dir: {r}
pki_dir: {r}/pki
cachedir: {r}/cache
sock_dir: {r}/sock
log_file: {r}/log/master
log_level_logfile: warning
user: {user}
{extra}""")
    return base


def start_master(kind, base):
    cmd = [MASTER_BIN, "-c", base] if kind == "halite" else [f"{VENV}/bin/salt-master", "-c", base]
    p = subprocess.Popen(cmd, stdout=open(f"{base}/master.out", "w"), stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    pull = f"{base}/root/sock/master_event_pull.ipc"
    deadline = time.time() + 60
    while not os.path.exists(pull):
        if time.time() > deadline or p.poll() is not None:
            raise SystemExit(f"{kind} master did not start; see {base}/master.out")
        time.sleep(0.1)
    time.sleep(1 if kind == "halite" else 5)
    return p


def stop(p):
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(30)
    except Exception:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except Exception:
            pass


def lat_stats(lat):
    if not lat:
        return None
    lat = sorted(lat)
    return {"p50_ms": round(1000 * lat[len(lat) // 2], 3),
            "p99_ms": round(1000 * lat[min(len(lat) - 1, int(len(lat) * .99))], 3),
            "max_ms": round(1000 * lat[-1], 3)}


def run_rust_sender(base, n, rate=None, raw=False):
    cmd = [BENCH_BIN, f"{base}/root/sock", "send", str(n)] + ([str(rate)] if rate else [])
    cmd += ["--raw"] if raw else []
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise SystemExit(f"bus_bench failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_python_sender(base, n, listener):
    if listener == "python":
        lis = subprocess.Popen([PY, "-c", PY_LISTENER, f"{base}/master", "bench/py/", str(n), "15"],
                               stdout=subprocess.PIPE, text=True)
    else:
        lis = subprocess.Popen([BENCH_BIN, f"{base}/root/sock", "listen", str(n), "bench/py/"],
                               stdout=subprocess.PIPE, text=True)
    assert lis.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    f = subprocess.run([PY, "-c", PY_FIRE, f"{base}/master", str(n)], capture_output=True, text=True)
    if f.returncode:
        lis.kill()
        raise SystemExit(f.stderr[-3000:])
    fr = json.loads(f.stdout.strip().splitlines()[-1])
    out, _ = lis.communicate(timeout=900)
    lr = json.loads(out.strip().splitlines()[-1])
    res = {"N": n, "fired_ok": fr["ok"], "received": lr["received"],
           "fire_s": round(fr["t1"] - fr["t0"], 3),
           "fire_rate_per_s": round(n / (fr["t1"] - fr["t0"]), 1)}
    if lr["received"]:
        span = lr["last"] - fr["t0"]
        res["end_to_end_s"] = round(span, 3)
        res["delivered_rate_per_s"] = round(lr["received"] / span, 1)
        res["latency"] = lat_stats(lr["lat"]) if "lat" in lr else lr.get("latency")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-rust", type=int, default=200000)
    ap.add_argument("--n-py", type=int, default=10000)
    ap.add_argument("--rate", type=int, default=10000)
    ap.add_argument("--no-journal", action="store_true")
    ap.add_argument("--stock", action="store_true", help="also run against a stock salt-master")
    ap.add_argument("--only", default="rust-flood,rust-flood-raw,rust-paced,py-py,py-rust")
    a = ap.parse_args()
    for b in (MASTER_BIN, BENCH_BIN):
        if not os.path.exists(b):
            raise SystemExit(f"{b} missing: cargo build --release -p halite-master -p halite-journal --bins --examples")
    kinds = ["halite"] + (["stock"] if a.stock else [])
    extra = "event_journal: false\n" if a.no_journal else ""
    for kind in kinds:
        for run in a.only.split(","):
            base = setup(extra)
            master = start_master(kind, base)
            try:
                if run in ("rust-flood", "rust-flood-raw"):
                    n = a.n_rust if kind == "halite" else min(a.n_rust, 20000)
                    res = run_rust_sender(base, n, raw=run == "rust-flood-raw")
                elif run == "rust-paced":
                    res = run_rust_sender(base, min(a.n_py, a.rate * 5), a.rate)
                elif run == "py-py":
                    res = run_python_sender(base, a.n_py, "python")
                elif run == "py-rust":
                    res = run_python_sender(base, a.n_py, "rust")
                else:
                    raise SystemExit(f"unknown run {run}")
            finally:
                stop(master)
            print(json.dumps({"master": kind, "journal_on": kind == "halite" and not a.no_journal,
                              "run": run, **res}), flush=True)
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
