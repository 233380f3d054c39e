"""Captures protocol test vectors from stock Salt 3008.3 for halite-proto.

Regenerate (from the repository root, with the stock-Salt venv):

    .salt-venv/bin/python crates/proto/tests/vectors/capture.py [--new-keys] [--verbose]

Writes, next to this file:

* ``salt-3008.3.msgpack`` -- the vectors ``crates/proto/tests/salt_vectors.rs`` reads
  (msgpack with ``use_bin_type=True``: byte strings are ``bin``, text is ``str``);
* ``salt-3008.3.json`` -- the same data for people (byte strings as ``{"hex": ...}``).

The RSA keys under ``keys/`` were generated once with ``salt.crypt.gen_keys(2048)`` and are
reused; ``--new-keys`` replaces them (every deterministic vector then changes, and the
tests keep passing because they read the keys from ``keys/``). Symmetric keys and nonces
are fixed in ``saltenv.py``. Outputs that Salt randomises (OAEP padding, Crypticle IVs,
the per-reply pillar key) differ on every run; the Rust tests only decrypt/verify those,
while deterministic outputs (msgpack, PKCS#1 v1.5, X9.31, PEM, fingerprints, event frames)
are compared byte for byte.
"""

import asyncio
import datetime
import hashlib
import json
import logging
import os
import sys
from unittest import mock

import cryptography
import msgpack

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree

import saltenv  # noqa: E402
import salt.crypt
import salt.exceptions
import salt.defaults
import salt.master
import salt.payload
import salt.utils.crypt
import salt.utils.event
import salt.utils.jid
import salt.version
from saltenv import (
    AES_KEY,
    AUTH_NONCE,
    CRYPTICLE_KEY,
    MINION_ID,
    MINION_TOKEN,
    REQ_NONCE,
    SESSION_KEY,
    Env,
    key_text,
    run,
    view,
)

OUT = os.path.join(saltenv.HERE, "salt-3008.3")


def ensure_keys(force):
    os.makedirs(saltenv.KEYS, exist_ok=True)
    for name in ("master", "minion", "other"):
        pem = os.path.join(saltenv.KEYS, f"{name}.pem")
        if force or not os.path.exists(pem):
            priv, pub = salt.crypt.gen_keys(2048)
            with open(pem, "w", encoding="ascii") as f:
                f.write(priv)
            with open(os.path.join(saltenv.KEYS, f"{name}.pub"), "w", encoding="ascii") as f:
                f.write(pub)


def priv(name):
    return salt.crypt.PrivateKey(key_text(f"{name}.pem").encode())


def pub(name):
    return salt.crypt.PublicKey(key_text(f"{name}.pub").encode())


# ---------------------------------------------------------------------------- msgpack
def msgpack_vectors():
    s = lambda n: "".join(chr(ord("a") + i % 26) for i in range(n))  # noqa: E731
    cases = [
        ("nested_map", {"a": {"b": [1, 2, {"c": None}]}, "d": True, "e": "f"}),
        (
            "ints_of_every_width",
            [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1,
             -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63)],
        ),
        ("int_above_u64_becomes_string", {"big": 2**70}),
        ("floats", [0.0, 1.5, -2.25, 1e300, 5e-324, float("inf"), float("-inf")]),
        ("bools_and_none", [True, False, None]),
        ("unicode", "h\u00e9llo w\u00f6rld \u2713 \U0001f9c2"),
        ("nonce_32_chars_is_str16", AUTH_NONCE),
        ("str_31", s(31)),
        ("str_32", s(32)),
        ("str_255", s(255)),
        ("str_256", s(256)),
        ("str_65536", s(65536)),
        ("bytes_not_utf8", b"\xff\x00\xfe\x80"),
        ("bytes_that_are_utf8", b"plain"),
        ("bytes_all_256_values", bytes(range(256))),
        ("datetime_ext78", datetime.datetime(2026, 11, 22, 7, 23, 15, 104997)),
        ("date_ext78", datetime.date(2026, 1, 2)),
        ("constant_ext79", {"v": salt.defaults.NOT_SET}),
        ("tuple_and_set_become_arrays", {"t": (1, 2), "s": {3}}),
        ("int_keys", {1: "one", -2: "minus two"}),
        ("empties", [{}, [], "", b""]),
        ("array16", list(range(16))),
        ("map16", {f"k{i:02}": i for i in range(16)}),
        ("binary_in_map", {"sig": b"\x00\x01\xfe\xff", "load": "text"}),
    ]
    out = []
    for name, obj in cases:
        wire = salt.payload.dumps(obj)
        bin_wire = salt.payload.dumps(obj, use_bin_type=True)
        case = {"name": name, "wire": wire, "view": view(salt.payload.loads(wire))}
        # The use_bin_type=True encoding (event bus) and how the event bus reads it back,
        # stored only where they differ from the network encoding (keeps the file small).
        if bin_wire != wire:
            case["bin_type_wire"] = bin_wire
        bin_view = view(salt.payload.loads(bin_wire, encoding="utf-8"))
        if bin_view != case["view"]:
            case["bin_type_view"] = bin_view
        out.append(case)
    return out


def msgpack_loads_vectors():
    h = bytes.fromhex
    cases = [
        ("bin8_utf8_reads_as_str", h("c405") + b"hello"),
        ("bin8_not_utf8_reads_as_bytes", h("c402fffe")),
        ("str8_which_python_never_emits", h("d920") + b"a" * 32),
        ("str8_not_utf8", h("d903ff00fe")),
        ("fixstr_not_utf8", h("a3ff00fe")),
        ("str16_short", h("da0002") + b"hi"),
        ("str32_short", h("db00000002") + b"hi"),
        ("bin_map_keys", h("81c403") + b"cmd" + h("a5") + b"_auth"),
        ("float32", h("ca3fc00000")),
        ("uint64_max", h("cfffffffffffffffff")),
        ("int64_min", h("d38000000000000000")),
        ("int8_positive", h("d005")),
        ("uint8_small", h("cc01")),
        ("ext78_datetime", h("c7184e") + b"20261122T07:23:15.104997"),
        ("unknown_ext_reads_as_its_data", h("d40541")),
        ("bin_and_str_in_list", h("92c401ffa178")),
        ("nil_key", h("81c001")),
        ("int_key", h("8101a178")),
    ]
    out = []
    for name, wire in cases:
        out.append({"name": name, "wire": wire, "view": view(salt.payload.loads(wire))})
    errors = [
        ("reserved_byte_c1", h("c1")),
        ("truncated_str", h("a561")),
        ("truncated_array", h("9201")),
        ("trailing_data", h("c0c0")),
        ("truncated_str8", h("d9")),
        ("truncated_bin32", h("c6ffffffff")),
        ("empty_input", b""),
    ]
    err_out = []
    for name, wire in errors:
        try:
            salt.payload.loads(wire)
            rejected = False
        except salt.exceptions.SaltDeserializationError:
            rejected = True
        err_out.append({"name": name, "wire": wire, "salt_rejects": rejected})
    return out, err_out


# ---------------------------------------------------------------------------- crypticle
def crypticle_vectors():
    c = salt.crypt.Crypticle({}, CRYPTICLE_KEY)
    encrypt = []
    for n in (0, 1, 15, 16, 17, 100):
        pt = bytes((7 * i + 3) % 256 for i in range(n))
        encrypt.append({"plaintext": pt, "blob": c.encrypt(pt)})
    obj = {"fun": "test.ping", "arg": [], "jid": "20261122072315104997", "bin": b"\xff\xfe"}
    dumps = [
        {"nonce": None, "body": salt.payload.dumps(obj), "view": view(obj), "blob": c.dumps(obj)},
        {
            "nonce": REQ_NONCE,
            "body": salt.payload.dumps(obj),
            "view": view(obj),
            "blob": c.dumps(obj, nonce=REQ_NONCE),
        },
    ]
    tampered = bytearray(c.encrypt(b"pickle::" + salt.payload.dumps({"a": 1})))
    tampered[20] ^= 0x01
    try:
        c.decrypt(bytes(tampered))
        salt_rejects_tampered = False
    except salt.crypt.AuthenticationError:
        salt_rejects_tampered = True
    no_prefix = c.encrypt(b"not a salt payload")
    return {
        "key": CRYPTICLE_KEY,
        "encrypt": encrypt,
        "dumps": dumps,
        "tampered": bytes(tampered),
        "salt_rejects_tampered": salt_rejects_tampered,
        "no_prefix": no_prefix,
        "no_prefix_salt_loads": view(c.loads(no_prefix)),
    }


# ---------------------------------------------------------------------------- rsa / pem
def rsa_vectors():
    oaep = []
    for algo in (salt.crypt.OAEP_SHA1, salt.crypt.OAEP_SHA224):
        for pt in (AES_KEY.encode(), MINION_TOKEN, b"x"):
            ct = pub("minion").encrypt(pt, algo)
            assert priv("minion").decrypt(ct, algo) == pt
            oaep.append({"algo": algo, "plaintext": pt, "ciphertext": ct})
    pkcs1 = []
    msgs = [b"", b"load bytes", salt.payload.dumps({"ret": True, "nonce": AUTH_NONCE})]
    for algo in (salt.crypt.PKCS1v15_SHA1, salt.crypt.PKCS1v15_SHA224):
        for m in msgs:
            pkcs1.append({"algo": algo, "message": m, "signature": priv("master").sign(m, algo)})
    x931 = []
    digest = hashlib.sha256(AES_KEY.encode()).hexdigest().encode()
    for key, m in (("minion", b"salt"), ("master", digest), ("master", b"z" * 100), ("minion", b"y" * 254)):
        sig = priv(key).encrypt(m)
        assert pub(key).decrypt(sig) == m
        x931.append({"key": key, "message": m, "signature": sig})
    fingers = []
    for name in ("master.pub", "minion.pub", "master.pem"):
        for sum_type in ("sha256", "sha512", "md5"):
            path = os.path.join(saltenv.KEYS, name)
            fingers.append(
                {
                    "file": name,
                    "sum_type": sum_type,
                    "finger": salt.utils.crypt.pem_finger(path, sum_type=sum_type),
                }
            )
    p = key_text("master.pub")
    clean = []
    for name, text in (
        ("as_written", p),
        ("crlf", p.replace("\n", "\r\n")),
        ("surrounding_whitespace", "\n  " + p + "\n\n \t"),
        ("lone_cr_line_ends", p.replace("\n", "\r")),
    ):
        clean.append({"name": name, "input": text, "output": salt.crypt.clean_key(text)})
    return {
        "oaep": oaep,
        "pkcs1v15": pkcs1,
        "x931": x931,
        "pem_finger": fingers,
        "clean_key": clean,
        "pem": {n: key_text(n) for n in ("master.pem", "master.pub", "minion.pem", "minion.pub")},
    }


# ---------------------------------------------------------------------------- auth
def auth_vectors():
    out = {"nonce": AUTH_NONCE, "token": MINION_TOKEN, "aes": AES_KEY, "session": SESSION_KEY}
    with Env() as env:
        mopts = env.master(auto_accept=True)
        server = env.req_server(mopts)

        def exchange(wire):
            return salt.payload.dumps(run(server.handle_message(salt.payload.loads(wire))))

        opts, auth = env.minion(master_pub=False)
        load, wire = saltenv.sign_in_request(auth)
        reply = exchange(wire)
        creds = auth.handle_signin_response(load, salt.payload.loads(reply))
        assert creds["aes"] == AES_KEY and creds["session"] == SESSION_KEY.encode(), creds
        out["first"] = {"request": wire, "reply": reply}
        # minion_master.pub now exists, so the next sign-in carries a token.
        load, wire = saltenv.sign_in_request(auth)
        assert "token" in load
        reply = exchange(wire)
        creds = auth.handle_signin_response(load, salt.payload.loads(reply))
        assert creds["aes"] == AES_KEY, creds
        out["reauth"] = {"request": wire, "reply": reply}
        out["minion_master_pub"] = open(os.path.join(opts["pki_dir"], "minion_master.pub")).read()

        opts, auth = env.minion(master_pub=False, minion_id="grains1", autosign_grains=["os"])
        opts["grains"] = {"os": "Debian"}
        load, wire = saltenv.sign_in_request(auth)
        out["autosign_grains_request"] = wire

    with Env() as env:
        mopts = env.master(auto_accept=False)
        server = env.req_server(mopts)
        opts, auth = env.minion(master_pub=False)
        load, wire = saltenv.sign_in_request(auth)
        reply = salt.payload.dumps(run(server.handle_message(salt.payload.loads(wire))))
        assert auth.handle_signin_response(load, salt.payload.loads(reply)) == "retry"
        out["pending"] = {"request": wire, "reply": reply}
    out["bad_algorithms"] = bad_algorithm_vectors()
    out["decisions"] = decision_vectors()
    return out


def bad_algorithm_vectors():
    """What a stock master answers to `_auth` loads naming algorithms it does not know."""
    out = []
    with Env() as env:
        mopts = env.master(auto_accept=True)
        server = env.req_server(mopts)
        opts, auth = env.minion(master_pub=True)
        load, _ = saltenv.sign_in_request(auth)
        for enc_algo, sig_algo, with_token in (
            ("OAEP-MD5", salt.crypt.PKCS1v15_SHA1, False),
            ("OAEP-MD5", salt.crypt.PKCS1v15_SHA1, True),
            (salt.crypt.OAEP_SHA1, "PKCS1v15-MD5", False),
        ):
            bad = dict(load, enc_algo=enc_algo, sig_algo=sig_algo)
            if not with_token:
                bad.pop("token", None)
            payload = {"enc": "clear", "load": bad, "version": 3}
            reply = run(server.handle_message(salt.payload.loads(salt.payload.dumps(payload))))
            out.append(
                {
                    "enc_algo": enc_algo,
                    "sig_algo": sig_algo,
                    "with_token": with_token,
                    "reply": salt.payload.dumps(reply),
                }
            )
    return out


def decision_vectors():
    """AuthFuncs._auth_impl_sync outcomes for every stored state x policy, via the stock
    master: the reply's `ret` (or "accept") and the keys bank afterwards."""
    presented = salt.crypt.clean_key(key_text("minion.pub"))
    keys = {"minion": presented, "other": salt.crypt.clean_key(key_text("other.pub"))}
    stored_cases = [
        ("none", None),
        ("pending", "minion"),
        ("pending", "other"),
        ("accepted", "minion"),
        ("accepted", "other"),
        ("rejected", "minion"),
        ("rejected", "other"),
        ("denied", "other"),
    ]
    policies = {
        "manual": {"auto_accept": False},
        "auto_accept": {"auto_accept": True},
        "autoreject": {"auto_accept": False},
        "autoreject_and_auto_accept": {"auto_accept": True},
        "open_mode": {"open_mode": True},
    }
    out = []
    for policy, conf in policies.items():
        with Env() as env:
            ids = [f"{state}-{who or 'nokey'}" for state, who in stored_cases]
            if policy.startswith("autoreject"):
                # master_config prefixes root_dir (<env>/master) to autoreject_file.
                os.makedirs(os.path.join(env.root, "master"), exist_ok=True)
                with open(os.path.join(env.root, "master", "autoreject"), "w") as f:
                    f.write("\n".join(ids) + "\n")
                conf = dict(conf, autoreject_file="/autoreject")
            mopts = env.master(**conf)
            server = env.req_server(mopts)
            cache = server.cache
            for (state, who), id_ in zip(stored_cases, ids):
                if state == "denied":
                    cache.store("denied_keys", id_, [keys[who]])
                elif state != "none":
                    cache.store("keys", id_, {"pub": keys[who], "state": state})
                load = {
                    "cmd": "_auth",
                    "id": id_,
                    "nonce": AUTH_NONCE,
                    "enc_algo": salt.crypt.OAEP_SHA1,
                    "sig_algo": salt.crypt.PKCS1v15_SHA1,
                    "pub": presented,
                }
                reply = run(server.handle_message({"enc": "clear", "load": load, "version": 3}))
                inner = salt.payload.loads(reply["load"])
                after = cache.fetch("keys", id_) or {}
                denied = cache.fetch("denied_keys", id_) or []
                whose = {v: k for k, v in keys.items()}
                out.append(
                    {
                        "policy": policy,
                        "stored_state": state,
                        "stored_key": who,
                        "outcome": "accept" if "aes" in inner else view(inner["ret"]),
                        "after_state": after.get("state"),
                        "after_key": whose.get(salt.crypt.clean_key(after["pub"])) if after else None,
                        "denied_keys": [whose.get(salt.crypt.clean_key(k)) for k in denied],
                    }
                )
    return out


# ---------------------------------------------------------------------------- requests
RETURN_LOAD = {
    "cmd": "_return",
    "id": MINION_ID,
    "success": True,
    "return": True,
    "retcode": 0,
    "jid": "20261122072315104997",
    "fun": "test.ping",
    "fun_args": [],
    "user": "root",
}
PILLAR_LOAD = {
    "cmd": "_pillar",
    "id": MINION_ID,
    "grains": {"os": "Debian"},
    "saltenv": None,
    "pillarenv": None,
    "pillar_override": {},
    "extra_minion_data": {},
    "ver": "2",
}
PILLAR = {"role": "web", "ports": [80, 443], "secret": b"\x00\xff"}


def request_vectors():
    out = {"nonce": REQ_NONCE}
    with Env() as env:
        mopts = env.master(auto_accept=True)
        seen = []

        def handler(payload):
            seen.append(view(payload["load"]))
            if payload["load"]["cmd"] == "_pillar":
                return PILLAR, {"fun": "send_private", "key": "pillar", "tgt": MINION_ID}
            return {"stored": True}, {"fun": "send"}

        server = env.req_server(mopts, handler)
        server.cache.store(
            "keys", MINION_ID, {"pub": salt.crypt.clean_key(key_text("minion.pub")), "state": "accepted"}
        )

        async def answer(wire):
            return salt.payload.dumps(await server.handle_message(salt.payload.loads(wire)))

        opts, auth = env.minion(master_pub=True)
        saltenv.set_creds(auth, AES_KEY, SESSION_KEY.encode())
        chan, transport = saltenv.req_channel(opts, auth, answer)
        with saltenv.fixed_uuid(REQ_NONCE):
            result = run(chan._crypted_transfer(dict(RETURN_LOAD), timeout=5))
        reply = salt.payload.dumps(run(server.handle_message(salt.payload.loads(transport.sent[0]))))
        out["send"] = {
            "request": transport.sent[0],
            "reply": reply,
            "master_saw": seen[0],
            "minion_got": view(result),
        }
        seen.clear()
        chan, transport = saltenv.req_channel(opts, auth, answer)
        with saltenv.fixed_uuid(REQ_NONCE):
            result = run(chan.crypted_transfer_decode_dictentry(dict(PILLAR_LOAD), dictkey="pillar"))
        reply = salt.payload.dumps(run(server.handle_message(salt.payload.loads(transport.sent[0]))))
        out["pillar"] = {
            "request": transport.sent[0],
            "reply": reply,
            "pillar": view(PILLAR),
            "minion_got": view(result),
        }
    return out


# ---------------------------------------------------------------------------- publish
PUBLISH_LOAD = {
    "fun": "test.ping",
    "arg": [],
    "tgt": MINION_ID,
    "jid": "20261122072315104997",
    "ret": "",
    "tgt_type": "glob",
    "user": "root",
}


def publish_vectors():
    out = []
    for signed in (True, False):
        with Env() as env:
            mopts = env.master(sign_pub_messages=signed)
            ch = env.pub_server(mopts)
            salt.master.SMaster.secrets["aes"]["serial"].value = 0
            load = dict(PUBLISH_LOAD)
            wrapped = ch.wrap_payload(load)
            # PubServerChannel.publish_payload: loads + dumps before handing to ZeroMQ.
            frame = salt.payload.dumps(salt.payload.loads(wrapped["payload"]))
            opts, auth = env.minion(master_pub=True, sign_pub_messages=signed)
            saltenv.set_creds(auth, AES_KEY, SESSION_KEY.encode())
            got = run(saltenv.pub_channel(opts, auth)._decode_payload(salt.payload.loads(frame)))
            out.append(
                {
                    "signed": signed,
                    "aes": AES_KEY,
                    "load": view(load),
                    "frame": frame,
                    "minion_got": view(got["load"]),
                }
            )
    return out


# ---------------------------------------------------------------------------- events
def event_vectors():
    mpub = salt.crypt.clean_key(key_text("minion.pub"))
    cases = [
        ("salt/job/123/ret/m1", {"a": b"x", "s": "y"}),
        (
            "salt/auth",
            {"result": True, "act": "accept", "id": MINION_ID, "pub": mpub,
             "_stamp": "2026-11-22T07:23:15.104997+00:00"},
        ),
        ("salt/job/20261122072315104997/new", {
            "jid": "20261122072315104997", "tgt_type": "glob", "tgt": "*", "user": "root",
            "fun": "test.ping", "arg": [], "minions": ["m1", "m2"], "missing": [],
            "_stamp": "2026-11-22T07:23:15.104997+00:00"}),
        ("t\u00e4g/\u2713", {"n": [0, -1, 300, -300, 70000, 2**40, 1.5], "s40": "s" * 40, "none": None}),
    ]
    out = []
    for tag, data in cases:
        event = salt.utils.event.SaltEvent.pack(tag, data)
        pull = saltenv.frame_msg_ipc(event)
        utag, udata = salt.utils.event.SaltEvent.unpack(event)
        out.append(
            {"tag": tag, "event": event, "pull": pull, "pub": pull[4:], "unpacked_tag": utag,
             "unpacked_data": view(udata)}
        )
    stamps = []
    for micros in (1795418595104997, 1795418595000000, 1795418595000001):
        t = datetime.datetime.fromtimestamp(micros // 10**6, datetime.timezone.utc).replace(
            microsecond=micros % 10**6
        )
        # SaltEvent.fire_event: data["_stamp"] = datetime.now(timezone.utc).isoformat()
        stamps.append({"unix_micros": micros, "stamp": t.isoformat()})
    jids = []
    for micros in (1795418595104997, 1795418595000000):
        t = datetime.datetime.fromtimestamp(micros // 10**6, datetime.timezone.utc).replace(
            microsecond=micros % 10**6
        )
        with mock.patch("salt.utils.jid._utc_now", return_value=t):
            jids.append({"unix_micros": micros, "jid": salt.utils.jid.gen_jid({})})
    return {"events": out, "stamps": stamps, "jids": jids}


# ---------------------------------------------------------------------------- output
def to_json(x):
    """The human-readable mirror: bytes as hex, long values abbreviated."""
    if isinstance(x, bytes):
        if len(x) > 1024:
            return {"hex_prefix": x[:64].hex(), "len": len(x)}
        return {"hex": x.hex()}
    if isinstance(x, str) and len(x) > 1024:
        return {"str_prefix": x[:64], "len": len(x)}
    if isinstance(x, dict):
        return {k: to_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    return x


def main():
    if "--verbose" not in sys.argv:
        # The expected failures (denied keys, undecodable inputs) log loudly; the
        # assertions in this script are what guards the capture.
        logging.getLogger("salt").setLevel(logging.CRITICAL + 1)
    ensure_keys("--new-keys" in sys.argv)
    asyncio.set_event_loop(asyncio.new_event_loop())
    loads, loads_errors = msgpack_loads_vectors()
    vectors = {
        "salt_version": salt.version.__version__,
        "msgpack_version": ".".join(map(str, msgpack.version)),
        "cryptography_version": cryptography.__version__,
        "fixed": {
            "minion_id": MINION_ID,
            "auth_nonce": AUTH_NONCE,
            "req_nonce": REQ_NONCE,
            "aes": AES_KEY,
            "session": SESSION_KEY,
            "crypticle": CRYPTICLE_KEY,
            "token": MINION_TOKEN,
            "publish_port": saltenv.PUBLISH_PORT,
        },
        "msgpack_dumps": msgpack_vectors(),
        "msgpack_loads": loads,
        "msgpack_errors": loads_errors,
        "crypticle": crypticle_vectors(),
        "rsa": rsa_vectors(),
        "auth": auth_vectors(),
        "requests": request_vectors(),
        "publish": publish_vectors(),
        "events": event_vectors(),
    }
    with open(OUT + ".msgpack", "wb") as f:
        f.write(msgpack.packb(vectors, use_bin_type=True))
    with open(OUT + ".json", "w", encoding="utf-8") as f:
        json.dump(to_json(vectors), f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {OUT}.msgpack and {OUT}.json")


if __name__ == "__main__":
    main()
