"""Stock-Salt 3008.3 master and minion objects with fixed inputs, shared by capture.py
(which records the vectors) and salt_check.py (which lets the Rust tests ask stock Salt
about bytes Halite produced).

Everything here drives Salt's own classes (AsyncAuth, AsyncReqChannel, ReqServerChannel,
AuthFuncs, PubServerChannel, AsyncPubChannel, Crypticle, PrivateKey/PublicKey) in one
process. Only the network transport is replaced: `FakeReqTransport` hands the bytes Salt
would put on the wire to a callback and returns the decoded answer, exactly as the ZeroMQ
request client does (`salt.payload.dumps` out, `salt.payload.loads` in).
"""

import asyncio
import base64
import contextlib
import copy
import ctypes
import datetime
import hashlib
import multiprocessing
import os
import shutil
import struct
import tempfile
import uuid
from unittest import mock

import salt.channel.client
import salt.channel.server
import salt.config
import salt.crypt
import salt.master
import salt.payload
import salt.utils.msgpack
import tornado.ioloop

HERE = os.path.dirname(os.path.abspath(__file__))
KEYS = os.path.join(HERE, "keys")

MINION_ID = "m1"
PUBLISH_PORT = 4505
# The nonces stock Salt would draw from uuid4(): fixed so Rust can bind replies to them.
AUTH_NONCE = "5f0c2b8e9d8a4c7bb0a6f2d9e1c3b4a5"
REQ_NONCE = "0d6e1f2a3b4c4d5e8f90a1b2c3d4e5f6"


def fixed_key_string(label):
    """A Crypticle key string (base64 of 56 bytes) derived from a label, so reruns agree."""
    return base64.b64encode(hashlib.sha512(label.encode()).digest()[:56]).decode()


AES_KEY = fixed_key_string("halite vectors: publish aes key")
SESSION_KEY = fixed_key_string("halite vectors: m1 session key")
CRYPTICLE_KEY = fixed_key_string("halite vectors: crypticle key")
# AsyncAuth.token: the random Crypticle key string a minion proves it can read back.
MINION_TOKEN = fixed_key_string("halite vectors: minion token").encode()


def key_text(name):
    with open(os.path.join(KEYS, name), encoding="ascii") as f:
        return f.read()


def view(obj):
    """What Salt sees after salt.payload.loads, as a type-tagged tree Rust can compare.

    ["nil"] ["bool", b] ["int", "decimal"] ["float", 8 big-endian bytes of the double]
    ["str", text] ["bytes", raw] ["list", [...]] ["map", [[k, v], ...]]
    ["datetime", "%Y%m%dT%H:%M:%S.%f"] ["const", name, view(value)]
    """
    if obj is None:
        return ["nil"]
    if isinstance(obj, bool):
        return ["bool", obj]
    if isinstance(obj, int):
        return ["int", str(obj)]
    if isinstance(obj, float):
        return ["float", struct.pack(">d", obj)]
    if isinstance(obj, str):
        return ["str", obj]
    if isinstance(obj, bytes):
        return ["bytes", obj]
    if isinstance(obj, (list, tuple)):
        return ["list", [view(x) for x in obj]]
    if isinstance(obj, dict):
        return ["map", [[view(k), view(v)] for k, v in obj.items()]]
    if isinstance(obj, datetime.datetime):
        return ["datetime", obj.strftime("%Y%m%dT%H:%M:%S.%f")]
    if isinstance(obj, salt.defaults._Constant):
        return ["const", obj.name, view(obj.value)]
    raise TypeError(f"no view for {type(obj)!r}")


def run(coro):
    return asyncio.get_event_loop().run_until_complete(coro)


@contextlib.contextmanager
def fixed_uuid(hexstr):
    with mock.patch("uuid.uuid4", return_value=uuid.UUID(hexstr)):
        yield


class FakeReqTransport:
    """Stands in for salt.transport.zeromq.RequestClient: dumps out, loads in."""

    def __init__(self, answer):
        self.answer = answer  # async callable(request wire bytes) -> reply wire bytes
        self.sent = []

    async def send(self, load, timeout=None):
        wire = salt.payload.dumps(load)
        self.sent.append(wire)
        return salt.payload.loads(await self.answer(wire))

    def close(self):
        pass


class NoTopicTransport:
    """Stands in for the ZeroMQ publish server in PubServerChannel.wrap_payload."""

    def topic_support(self):
        return False


class Env:
    """A temporary root holding a stock master config, a stock minion config, or both."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="halite-vectors-")

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _config(self, name, body):
        d = os.path.join(self.root, name)
        for sub in ("pki", "cache", "sock", "log"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        path = os.path.join(d, name)
        with open(path, "w", encoding="ascii") as f:
            f.write(
                f"root_dir: {d}\npki_dir: {d}/pki\ncachedir: {d}/cache\n"
                f"sock_dir: {d}/sock\nlog_file: {d}/log/{name}\n{body}"
            )
        return d, path

    # ------------------------------------------------------------------ master
    def master(self, **conf):
        """Stock master opts with the fixed master key, AES key and m1 session key."""
        # auth_events off: nobody listens on this master's event bus (firing would only
        # wait for a socket that is not there); it does not change any reply.
        lines = "id: vectors_master\nworker_pools_enabled: False\nauth_events: False\n"
        lines += "".join(f"{k}: {v!r}\n" for k, v in conf.items())
        d, path = self._config("master", lines)
        # MasterKeys: master_id = id without "_master" -> vectors.pem / vectors.pub.
        shutil.copy(os.path.join(KEYS, "master.pem"), os.path.join(d, "pki", "vectors.pem"))
        shutil.copy(os.path.join(KEYS, "master.pub"), os.path.join(d, "pki", "vectors.pub"))
        os.makedirs(os.path.join(d, "cache", "sessions"), exist_ok=True)
        with open(os.path.join(d, "cache", "sessions", MINION_ID), "w") as f:
            f.write(SESSION_KEY)
        opts = salt.config.master_config(path)
        salt.master.SMaster.secrets["aes"] = {
            "secret": multiprocessing.Array(ctypes.c_char, AES_KEY.encode()),
            "serial": multiprocessing.Value(ctypes.c_longlong, lock=False),
            "reload": salt.crypt.Crypticle.generate_key_string,
        }
        return opts

    def req_server(self, opts, handler=None):
        """A stock ReqServerChannel (non-pooled path); `handler` plays the MWorker."""
        ch = salt.channel.server.ReqServerChannel(opts, None)

        async def payload_handler(payload):
            return handler(payload)

        ch.payload_handler = payload_handler
        return ch

    def pub_server(self, opts):
        """A stock PubServerChannel as it is rebuilt in the publisher process."""
        ch = salt.channel.server.PubServerChannel.__new__(salt.channel.server.PubServerChannel)
        ch.__setstate__({"opts": opts, "transport": NoTopicTransport(), "presence_events": False})
        return ch

    # ------------------------------------------------------------------ minion
    def minion(self, master_pub=False, minion_id=MINION_ID, **conf):
        """A stock AsyncAuth for the fixed minion key; `master_pub` pre-seeds
        minion_master.pub as a minion that authenticated before has it."""
        lines = f"id: {minion_id}\nmaster: 127.0.0.1\n"
        lines += "".join(f"{k}: {v!r}\n" for k, v in conf.items())
        d, path = self._config("minion-" + minion_id, lines)
        shutil.copy(os.path.join(KEYS, "minion.pem"), os.path.join(d, "pki", "minion.pem"))
        shutil.copy(os.path.join(KEYS, "minion.pub"), os.path.join(d, "pki", "minion.pub"))
        if master_pub:
            with open(os.path.join(d, "pki", "minion_master.pub"), "w") as f:
                f.write(salt.crypt.clean_key(key_text("master.pub")))
        opts = salt.config.minion_config(path)
        opts["master_uri"] = "tcp://127.0.0.1:4506"
        opts.update(conf)
        auth = salt.crypt.AsyncAuth(opts, io_loop=tornado.ioloop.IOLoop.current())
        auth.token = MINION_TOKEN
        return opts, auth


def set_creds(auth, aes, session):
    """What AsyncAuth._authenticate does with a successful handle_signin_response."""
    auth._creds = {"aes": aes, "session": session, "master_uri": auth.opts["master_uri"]}
    auth._crypticle = salt.crypt.Crypticle(auth.opts, aes)
    auth._session_crypticle = salt.crypt.Crypticle(auth.opts, session)
    fut = asyncio.get_event_loop().create_future()
    fut.set_result(True)
    auth._authenticate_future = fut


def req_channel(opts, auth, answer):
    transport = FakeReqTransport(answer)
    return salt.channel.client.AsyncReqChannel(opts, transport, auth), transport


def pub_channel(opts, auth):
    ch = salt.channel.client.AsyncPubChannel.__new__(salt.channel.client.AsyncPubChannel)
    ch.opts = opts
    ch.auth = auth
    ch.master_pubkey_path = os.path.join(opts["pki_dir"], auth.mpub)
    return ch


def sign_in_request(auth):
    """The `_auth` body a stock minion sends (minion_sign_in_payload + _package_load)."""
    with fixed_uuid(AUTH_NONCE):
        load = auth.minion_sign_in_payload()
    ch = salt.channel.client.AsyncReqChannel(auth.opts, None, None)
    return load, salt.payload.dumps(ch._package_load(load))


def frame_msg_ipc(body):
    import salt.transport.frame

    return salt.transport.frame.frame_msg_ipc(body)


def deepcopy(x):
    return copy.deepcopy(x)
