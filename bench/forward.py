#!/usr/bin/env python3
"""Issue-4 benchmark: minion -> master event forwarding (`fire_master` on the minion bus).

Phases, on this machine, in one run (everything on 127.0.0.1, all processes stopped at the end):
  halite: halite-master + halite-minion (release builds)
    - rust-flood:  a Rust sender writes N fire_master events to the minion bus as fast as it can
    - rust-paced:  the same at a fixed rate (default 20,000 events/s)
    - python:      the stock Python sender of shared/baseline/bench_events.py (minion-forward)
  halite-to-stock: halite-minion -> stock salt-master, rust-flood
  stock: stock salt-master + stock salt-minion, the stock Python sender (the baseline's case)

Every case listens on the master bus with `forward_load` (crates/minion/examples), which
reports events/s from the first send to the last arrival and the fire->master-bus latency
(p50/p99/max, from the send time carried in each event). CPU seconds of the daemons during
the Halite cases are read from /proc.

Run from the repository root with the stock venv's python:
    .salt-venv/bin/python bench/forward.py [--n 100000] [--rate 20000] [--python-n 2000]
        [--skip-stock] [--out FILE.json]
Environment: CARGO_TARGET_DIR (default <repo>/target), HALITE_SALT_VENV (default .salt-venv).
"""
import argparse
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.environ.get("HALITE_SALT_VENV", os.path.join(REPO, ".salt-venv"))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
REL = os.path.join(TARGET, "release")
PY = os.path.join(VENV, "bin", "python")
USER = pwd.getpwuid(os.getuid()).pw_name

# The stock sender of shared/baseline/bench_events.py (minion-forward), unchanged but for
# the tag prefix the listener counts.
FIRE_MINION = r"""
import sys, time, json
import salt.config, salt.utils.event
opts = salt.config.minion_config(sys.argv[1]); n = int(sys.argv[2])
ev = salt.utils.event.get_event('minion', opts=opts, listen=False)
ev.fire_event({'warmup': True}, 'warmup/x')
t0 = time.time(); ok = 0
for i in range(n):
    ok += bool(ev.fire_event({'data': {'i': i, 't_sent': time.time()}, 'tag': 'bench/fwd/%d' % i,
                              'events': None, 'pretag': None}, 'fire_master'))
t1 = time.time()
print(json.dumps({'t0': t0, 't1': t1, 'ok': ok}), flush=True)
time.sleep(1)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def master_conf(root, pub, ret):
    d = os.path.join(root, "master")
    for sub in ("pki", "cache", "sock", "run", "log"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    write(os.path.join(d, "master"), f"""interface: 127.0.0.1
publish_port: {pub}
ret_port: {ret}
user: {USER}
root_dir: {d}
pki_dir: {d}/pki
cachedir: {d}/cache
sock_dir: {d}/sock
pidfile: {d}/run/master.pid
log_file: {d}/log/master
key_logfile: {d}/log/key
log_level: warning
log_level_logfile: info
auto_accept: true
""")
    return d


def minion_conf(root, mid, ret, extra=""):
    d = os.path.join(root, mid)
    for sub in ("pki", "cache", "sock", "run", "log"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    write(os.path.join(d, "minion"), f"""id: {mid}
master: 127.0.0.1
master_port: {ret}
user: {USER}
root_dir: {d}
pki_dir: {d}/pki
cachedir: {d}/cache
sock_dir: {d}/sock
pidfile: {d}/run/minion.pid
log_file: {d}/log/minion
log_level: warning
log_level_logfile: info
acceptance_wait_time: 1
enable_fqdns_grains: false
{extra}""")
    return d


class Daemon:
    def __init__(self, argv, log):
        self.out = open(log, "w")
        self.p = subprocess.Popen(argv, stdout=self.out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)

    def tree(self):
        """pids of the daemon's process group."""
        pids = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.getpgid(int(name)) == self.p.pid:
                        pids.append(int(name))
                except OSError:
                    pass
        return pids

    def cpu(self):
        """utime+stime of the process group, in seconds."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in self.tree():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
            except OSError:
                pass
        return total / tick

    def stop(self):
        try:
            os.killpg(self.p.pid, signal.SIGTERM)
            self.p.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except OSError:
                pass
            self.p.wait()
        self.out.close()


def wait_for(path, needle, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with open(path, errors="replace") as f:
                if needle in f.read():
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {needle!r} in {path}")


def minion_pull(mdir, mid):
    import hashlib
    h = hashlib.sha256(mid.encode()).hexdigest()[:10]
    return os.path.join(mdir, "sock", f"minion_event_{h}_pull.ipc")


def load(master_dir, n, minion_pull_path=None, rate=None, idle=30, python_sender=None):
    """Runs forward_load (and the Python sender); returns its JSON result."""
    argv = [os.path.join(REL, "examples", "forward_load"), "--master-sock",
            os.path.join(master_dir, "sock"), "--n", str(n), "--idle", str(idle)]
    if minion_pull_path:
        argv += ["--minion-pull", minion_pull_path]
    if rate:
        argv += ["--rate", str(rate)]
    lis = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert lis.stdout.readline().strip() == "ready"
    fired = None
    if python_sender:
        f = subprocess.run([PY, "-c", FIRE_MINION, python_sender, str(n)], capture_output=True, text=True)
        if f.returncode:
            lis.kill()
            raise SystemExit(f.stderr[-3000:])
        fired = json.loads(f.stdout.strip().splitlines()[-1])
    out, _ = lis.communicate(timeout=900)
    res = json.loads(out.strip().splitlines()[-1])
    if fired:
        # forward_load did not send: take the Python sender's times.
        res["fire_s"] = round(fired["t1"] - fired["t0"], 3)
        res["fire_rate"] = round(n / (fired["t1"] - fired["t0"]))
    return res


def measured(case, daemons, fn):
    before = {k: d.cpu() for k, d in daemons.items()}
    t = time.time()
    res = fn()
    res["wall_s"] = round(time.time() - t, 3)
    res["cpu_s"] = {k: round(d.cpu() - before[k], 2) for k, d in daemons.items()}
    res["case"] = case
    print(json.dumps(res), flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--rate", type=float, default=20000)
    ap.add_argument("--python-n", type=int, default=2000)
    ap.add_argument("--skip-stock", action="store_true")
    ap.add_argument("--only-halite", action="store_true", help="only the halite phase's Rust cases")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    ap.add_argument("--out")
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-p", "halite-master", "-p", "halite-minion",
                    "--bins", "--example", "forward_load"], check=True, cwd=REPO)
    results = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "cpus": os.cpu_count(),
               "load_before": open("/proc/loadavg").read().split()[:3], "cases": []}
    root = tempfile.mkdtemp(prefix="hfwd-")
    try:
        # Halite master + Halite minion.
        pub, ret = free_port(), free_port()
        md = master_conf(root, pub, ret)
        # A queue larger than the flood, so that the flood measures throughput rather than
        # the default bound (10,000 events, beyond which the oldest are dropped).
        nd = minion_conf(root, "fwd-halite", ret, "fire_master_queue_size: 1000000\n")
        master = Daemon([os.path.join(REL, "halite-master"), "-c", md], os.path.join(root, "hm.out"))
        minion = Daemon([os.path.join(REL, "halite-minion"), "-c", nd], os.path.join(root, "hn.out"))
        wait_for(os.path.join(nd, "log", "minion"), "Minion is ready to receive requests!")
        ds = {"master": master, "minion": minion}
        pull = minion_pull(nd, "fwd-halite")
        results["cases"].append(measured("halite rust-flood", ds, lambda: load(md, args.n, pull)))
        results["cases"].append(measured(f"halite rust-paced {args.rate:.0f}/s", ds,
                                         lambda: load(md, args.n, pull, rate=args.rate)))
        if not args.only_halite:
            results["cases"].append(measured("halite python-sender", ds, lambda: load(
                md, args.python_n, python_sender=os.path.join(nd, "minion"))))
        minion.stop()
        master.stop()
        if not (args.skip_stock or args.only_halite):
            # Halite minion -> stock master, then stock minion -> stock master.
            pub, ret = free_port(), free_port()
            shutil.rmtree(md)
            md = master_conf(root, pub, ret)
            nd = minion_conf(root, "fwd-h2s", ret, "fire_master_queue_size: 1000000\n")
            master = Daemon([os.path.join(VENV, "bin", "salt-master"), "-c", md], os.path.join(root, "sm.out"))
            minion = Daemon([os.path.join(REL, "halite-minion"), "-c", nd], os.path.join(root, "hn2.out"))
            wait_for(os.path.join(nd, "log", "minion"), "Minion is ready to receive requests!")
            ds = {"master": master, "minion": minion}
            stock_n = min(args.n, 20000)
            results["cases"].append(measured("halite-minion -> stock-master rust-flood", ds,
                                             lambda: load(md, stock_n, minion_pull(nd, "fwd-h2s"), idle=60)))
            minion.stop()
            sd = minion_conf(root, "fwd-stock", ret)
            minion = Daemon([os.path.join(VENV, "bin", "salt-minion"), "-c", sd], os.path.join(root, "sn.out"))
            wait_for(os.path.join(sd, "log", "minion"), "Minion is ready to receive requests!")
            time.sleep(2)
            ds = {"master": master, "minion": minion}
            results["cases"].append(measured("stock python-sender", ds, lambda: load(
                md, args.python_n, python_sender=os.path.join(sd, "minion"), idle=60)))
            minion.stop()
            master.stop()
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    results["load_after"] = open("/proc/loadavg").read().split()[:3]
    print()
    print("| case | events | received | events/s delivered | p50 ms | p99 ms | max ms | CPU s master / minion |")
    print("|---|---|---|---|---|---|---|---|")
    for c in results["cases"]:
        cpu = c["cpu_s"]
        print(f"| {c['case']} | {c['n']} | {c['received']} | {c['delivered_rate']:.0f} | {c['p50_ms']:.2f} | "
              f"{c['p99_ms']:.2f} | {c['max_ms']:.2f} | {cpu['master']:.2f} / {cpu['minion']:.2f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
