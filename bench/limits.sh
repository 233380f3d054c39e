#!/usr/bin/env bash
# Physical limits the swarm benchmark is held against, measured on this machine:
#   1. RSA-2048 private operations per second per core (`openssl speed rsa2048`, one core);
#   2. libzmq PUB->SUB loopback throughput (one subscriber, 256-byte messages), with pyzmq
#      from the stock Salt venv (the send loop is Python; libzmq batches, so this is close
#      to libzmq's own figure). Fan-out to many subscribers is what the swarm's publish
#      phase measures end to end.
# Usage: bench/limits.sh [seconds per test, default 3]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${HALITE_SALT_VENV:-$repo/.salt-venv}
secs=${1:-3}

echo "== openssl speed -seconds $secs rsa2048 ($(openssl version))"
openssl speed -seconds "$secs" rsa2048 2>/dev/null | grep -E '^ *(sign|rsa)'

echo "== libzmq PUB->SUB over tcp://127.0.0.1 (pyzmq, libzmq $("$venv/bin/python" -c 'import zmq; print(zmq.zmq_version())'))"
"$venv/bin/python" - "$secs" <<'PY'
import sys, threading, time, zmq

secs = float(sys.argv[1])
ctx = zmq.Context(io_threads=1)
MSG = b"x" * 256

def throughput():
    pub = ctx.socket(zmq.PUB); pub.sndhwm = 0
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    sub = ctx.socket(zmq.SUB); sub.rcvhwm = 0
    sub.subscribe(b""); sub.connect(f"tcp://127.0.0.1:{port}")
    while True:  # wait for the subscription to reach the PUB
        pub.send(b"warm")
        if sub.poll(50):
            sub.recv(); break
    got = 0; stop = time.perf_counter() + secs
    def drain():
        nonlocal got
        while True:
            m = sub.recv()
            if m == b"end": return
            got += 1
    t = threading.Thread(target=drain); t.start()
    start = time.perf_counter(); sent = 0
    while time.perf_counter() < stop:
        for _ in range(1000):
            pub.send(MSG)
        sent += 1000
    pub.send(b"end"); t.join(); elapsed = time.perf_counter() - start
    print(f"1 PUB -> 1 SUB, 256 B: {got} of {sent} msgs in {elapsed:.2f} s = {got/elapsed:,.0f} msgs/s")
    pub.close(); sub.close()

throughput()
ctx.term()
PY
