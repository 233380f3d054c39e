"""Write the seed corpus of the ZMTP fuzz target (corpus/zmtp_codec/): the bytes real
libzmq peers (pyzmq in the Salt venv, as a stock minion uses it) send to a publisher and
to a router, captured on a raw TCP listener that speaks its half of the handshake.

Run from the workspace root with the Salt venv's Python:

    .salt-venv/bin/python crates/transport/fuzz/seeds.py

Each seed starts with the target's control byte (frame limit and read size), then the
peer's bytes from its greeting on.
"""

import os
import shutil
import socket
import sys
import time

import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "zmtp_codec")


def greeting():
    g = bytearray(64)
    g[0], g[9], g[10], g[11] = 0xFF, 0x7F, 3, 0
    g[12:16] = b"NULL"
    return bytes(g)


def frame(body, command=False, more=False):
    flags = (1 if more else 0) | (4 if command else 0)
    if len(body) > 255:
        return bytes([flags | 2]) + len(body).to_bytes(8, "big") + body
    return bytes([flags, len(body)]) + body


def ready(kind):
    prop = b"\x0bSocket-Type" + len(kind).to_bytes(4, "big") + kind
    return frame(b"\x05READY" + prop, command=True)


def capture(kind, our_type, setup, after=None, seconds=0.5):
    """What a libzmq socket of `kind` sends to a raw peer announcing `our_type`."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    ctx = zmq.Context()
    s = ctx.socket(kind)
    s.setsockopt(zmq.LINGER, 0)
    setup(s)
    s.connect("tcp://127.0.0.1:%d" % lsock.getsockname()[1])
    conn, _ = lsock.accept()
    conn.sendall(greeting() + ready(our_type))
    if after:
        after(s)
    conn.settimeout(0.05)
    got = b""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            chunk = conn.recv(65536)
            if not chunk:
                break
            got += chunk
        except socket.timeout:
            pass
    s.close()
    ctx.term()
    conn.close()
    lsock.close()
    return got


def main():
    seeds = {}

    def sub(s):
        s.setsockopt(zmq.SUBSCRIBE, b"")
        s.setsockopt(zmq.SUBSCRIBE, b"topic")
        s.setsockopt(zmq.HEARTBEAT_IVL, 50)

    def req(s):
        s.setsockopt(zmq.IDENTITY, b"minion-1")

    def request(s):
        s.send(b"\x83\xa3enc\xa5clear" + b"x" * 300)

    seeds["libzmq-sub-limit64k-read5"] = b"\x12" + capture(zmq.SUB, b"PUB", sub)
    seeds["libzmq-req-unlimited-read1"] = b"\x03" + capture(zmq.REQ, b"ROUTER", req, request)
    # The publisher's side, as Halite's server writes it: greeting, READY, a PING, a
    # short and a long message.
    server = greeting() + ready(b"PUB") + frame(b"\x04PING\x00\x00", command=True)
    server += frame(b"short") + frame(b"m" * 300)
    seeds["server-limit255-read16"] = b"\x3d" + server
    os.makedirs(OUT, exist_ok=True)
    shutil.rmtree(OUT)
    os.makedirs(OUT)
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
