"""Asks stock Salt 3008.3 about bytes Halite produced (the Halite -> Salt direction).

Usage: salt_check.py COMMAND < request.msgpack > answer.msgpack

The request and the answer are msgpack maps (byte strings as bin, text as str). Run by
crates/proto/tests/salt_vectors.rs with the venv's python; each command drives the same
stock Salt code a real minion runs on the bytes it receives (see saltenv.py), with the
fixed keys under keys/. Failures Salt signals with an exception come back as
{"error": "<ExceptionType>: <message>"}; anything unexpected exits non-zero with a traceback.

Commands:
  loads      {"wires": [bin]}                     -> {"views": [view | {"error"}]}
  crypticle  {"key", "encrypted": [bin], "dumped": [{"blob", "nonce"}]}
                                                  -> {"decrypted": [bin], "loaded": [view]}
  oaep       {"items": [{"algo", "ciphertext"}]}  -> {"plaintexts": [bin]}   (minion key)
  signin     {"request", "reply", "master_pub"}   -> {"result": creds | str} | {"error"}
  send       {"reply", "nonce"}                   -> {"result": view} | {"error"}
  pillar     {"reply", "nonce"}                   -> {"result": view} | {"error"}
  publish    {"frame", "signed"}                  -> {"result": view | None} | {"error"}
"""

import asyncio
import logging
import os
import sys

import msgpack

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree

import saltenv  # noqa: E402
import salt.crypt
import salt.exceptions
import salt.payload
from saltenv import AES_KEY, SESSION_KEY, Env, run, view


def cmd_loads(req):
    views = []
    for wire in req["wires"]:
        try:
            views.append(view(salt.payload.loads(wire)))
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            views.append({"error": f"{type(exc).__name__}: {exc}"})
    return {"views": views}


def cmd_crypticle(req):
    c = salt.crypt.Crypticle({}, req["key"])
    return {
        "decrypted": [c.decrypt(b) for b in req["encrypted"]],
        "loaded": [view(c.loads(d["blob"], nonce=d["nonce"])) for d in req["dumped"]],
    }


def cmd_oaep(req):
    key = salt.crypt.PrivateKey(saltenv.key_text("minion.pem").encode())
    return {"plaintexts": [key.decrypt(i["ciphertext"], i["algo"]) for i in req["items"]]}


def cmd_signin(req):
    """AsyncAuth.handle_signin_response on a reply to a stock minion's own request."""
    with Env() as env:
        opts, auth = env.minion(master_pub=req["master_pub"])
        sign_in = salt.payload.loads(req["request"])["load"]
        result = auth.handle_signin_response(sign_in, salt.payload.loads(req["reply"]))
        if isinstance(result, dict):
            path = os.path.join(opts["pki_dir"], "minion_master.pub")
            result = {
                "aes": result["aes"],
                "session": result["session"],
                "publish_port": result["publish_port"],
                "minion_master_pub": open(path).read(),
            }
        return {"result": result}


def _req_channel(env, reply):
    opts, auth = env.minion(master_pub=True)
    saltenv.set_creds(auth, AES_KEY, SESSION_KEY.encode())

    async def answer(_wire):
        return reply

    return saltenv.req_channel(opts, auth, answer)[0]


def cmd_send(req):
    """AsyncReqChannel._crypted_transfer receiving `reply` to a request with `nonce`."""
    with Env() as env:
        chan = _req_channel(env, req["reply"])
        with saltenv.fixed_uuid(req["nonce"]):
            return {"result": view(run(chan._crypted_transfer({"cmd": "_return"}, timeout=5)))}


def cmd_pillar(req):
    """AsyncReqChannel.crypted_transfer_decode_dictentry receiving `reply` (send_private)."""
    with Env() as env:
        chan = _req_channel(env, req["reply"])
        load = {"cmd": "_pillar", "id": saltenv.MINION_ID, "ver": "2"}
        with saltenv.fixed_uuid(req["nonce"]):
            got = run(chan.crypted_transfer_decode_dictentry(load, dictkey="pillar"))
        return {"result": view(got)}


def cmd_publish(req):
    """What a stock minion's publish channel makes of one frame (ZeroMQ recv + decode)."""
    with Env() as env:
        opts, auth = env.minion(master_pub=True, sign_pub_messages=req["signed"])
        saltenv.set_creds(auth, AES_KEY, SESSION_KEY.encode())
        got = run(saltenv.pub_channel(opts, auth)._decode_payload(salt.payload.loads(req["frame"])))
        return {"result": None if got is None else view(got["load"])}


COMMANDS = {
    "loads": cmd_loads,
    "crypticle": cmd_crypticle,
    "oaep": cmd_oaep,
    "signin": cmd_signin,
    "send": cmd_send,
    "pillar": cmd_pillar,
    "publish": cmd_publish,
}

# Exceptions a stock minion raises to refuse what it received.
REFUSALS = (
    salt.exceptions.SaltClientError,
    salt.crypt.AuthenticationError,
    salt.exceptions.SaltDeserializationError,
)


def main():
    logging.getLogger("salt").setLevel(logging.CRITICAL + 1)
    asyncio.set_event_loop(asyncio.new_event_loop())
    req = msgpack.unpackb(sys.stdin.buffer.read(), raw=False, strict_map_key=False)
    try:
        answer = COMMANDS[sys.argv[1]](req)
    except REFUSALS as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.buffer.write(msgpack.packb(answer, use_bin_type=True))


if __name__ == "__main__":
    main()
