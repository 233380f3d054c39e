"""Write the seed corpora of halite-proto's fuzz targets (corpus/<target>/) from the
byte vectors captured from stock Salt 3008.3 (../tests/vectors/salt-3008.3.msgpack).

Run from the workspace root with the Salt venv's Python:

    .salt-venv/bin/python crates/proto/fuzz/seeds.py

The corpora are checked in; `scripts/fuzz` reads them and writes what the fuzzer finds to
a scratch directory, so they stay as written here.
"""

import os
import shutil
import sys

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "..", "tests", "vectors", "salt-3008.3.msgpack")


def main():
    with open(VECTORS, "rb") as f:
        v = msgpack.unpackb(f.read(), raw=False, strict_map_key=False)
    seeds = {t: {} for t in (
        "value_decode", "request_parse", "auth_request_parse", "event_frames",
        "event_stream", "crypticle_loads",
    )}

    def add(target, name, data):
        seeds[target][name] = bytes(data)

    for section in ("msgpack_dumps", "msgpack_loads", "msgpack_errors"):
        for case in v[section]:
            add("value_decode", f"{section}-{case['name']}", case["wire"])
    requests = [("send", v["requests"]["send"]["request"]),
                ("pillar", v["requests"]["pillar"]["request"])]
    for name in ("first", "reauth", "pending"):
        requests.append((f"auth-{name}", v["auth"][name]["request"]))
    requests.append(("auth-autosign_grains", v["auth"]["autosign_grains_request"]))
    for i, pub in enumerate(v["publish"]):
        requests.append((f"publish-{i}", pub["frame"]))
    for name, body in requests:
        add("request_parse", name, body)
        add("value_decode", name, body)
        if name.startswith("auth-"):
            load = msgpack.unpackb(body, raw=True)[b"load"]
            add("auth_request_parse", name, msgpack.packb(load, use_bin_type=False))
    pulls, pubs = b"", b""
    for i, ev in enumerate(v["events"]["events"]):
        for kind in ("event", "pull", "pub"):
            add("event_frames", f"{i}-{kind}", ev[kind])
        pulls += ev["pull"]
        pubs += ev["pub"]
    # Two control bytes (frame limit, read sizes), then a stream of every captured frame.
    add("event_stream", "pull-stream-64k-reads-3-and-52", b"\x02\x23" + pulls)
    add("event_stream", "pub-stream-unlimited-byte-by-byte", b"\x03\x00" + pubs)
    add("event_stream", "event-body", b"\x01\x11" + v["events"]["events"][0]["event"])
    for i, case in enumerate(v["crypticle"]["encrypt"]):
        add("crypticle_loads", f"encrypt-{i}", case["blob"])
    for i, case in enumerate(v["crypticle"]["dumps"]):
        add("crypticle_loads", f"dumps-{i}", case["blob"])
        add("crypticle_loads", f"dumps-{i}-body", case["body"])
    add("crypticle_loads", "tampered", v["crypticle"]["tampered"])
    add("crypticle_loads", "no_prefix", v["crypticle"]["no_prefix"])

    for target, files in seeds.items():
        out = os.path.join(HERE, "corpus", target)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        for name, data in files.items():
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
        print(f"{target}: {len(files)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
