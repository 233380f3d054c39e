
# The Halite minion's fallback worker: Salt's own loader, warm, forking a process per job
# as stock's multiprocessing minion does. halite-pyworker's FRAMING_PY comes before this
# text (read_frame, write_frame, take_frame_streams).
#
# argv: <minion config file> <minion id> <pid of the Halite minion>
#
# Frames from the Halite minion (stdin), each a map with "op":
#   job     {job, fun, arg, data, pillar, master_uri, connected}: run `fun` in a forked
#           process; arg, data (the publish load) and pillar are Salt payloads (bin).
#   list    {job}: list the functions, in a forked process (loading every module costs
#           memory the worker should not keep).
#   reply   {req, ok, data | kind, message}: the master's answer to a request.
#   signal  {job, signal}: signal the job's process group.
#   exit    leave (so does the end of stdin); running jobs are killed.
# Frames to the Halite minion (stdout):
#   ready   {salt, seconds} once warm; fatal {error} when warming up failed.
#   request {job, req, kind ("send" | "pillar"), load}: one master request of a job.
#   result  {job, ret} (a Salt payload: return, retcode, success, out) or
#           {job, functions}; crashed {job, error} when the job process ended without one.
#
# The worker never signs in and never reads the minion's keys: Salt's request channels
# are replaced by one that hands every load to the Halite minion, which sends it on its own
# authenticated channel (SAuth is replaced too: the Halite minion puts its own token in the
# loads it sends). Events go to the minion's local bus, as stock's job processes fire them.

import errno as _errno
import os as _os
import selectors as _selectors
import signal as _signal
import socket as _socket
import struct as _struct
import sys as _sys
import tempfile as _tempfile
import threading as _threading
import time as _time
import traceback as _traceback
import types as _types

import msgpack as _msgpack

CONF_FILE = _sys.argv[1]
MINION_ID = _sys.argv[2]
HALITE_PID = int(_sys.argv[3])

# Set once warm (module globals inherited by every job process).
OPTS = None
FUNCTIONS = None
EXECUTORS = None
FUNCTION_ERRORS = {}
PROC_DIR = None


def _pack(obj):
    body = _msgpack.packb(obj, use_bin_type=True, unicode_errors="surrogateescape")
    return _struct.pack(">I", len(body)) + body


class _Frames:
    """Frames arriving in pieces on a non-blocking descriptor."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data):
        self.buf += data

    def take(self):
        out = []
        while len(self.buf) >= 4:
            (size,) = _struct.unpack(">I", self.buf[:4])
            if len(self.buf) < 4 + size:
                break
            body = bytes(self.buf[4 : 4 + size])
            del self.buf[: 4 + size]
            out.append(
                _msgpack.unpackb(
                    body,
                    raw=False,
                    strict_map_key=False,
                    unicode_errors="surrogateescape",
                )
            )
        return out


# ------------------------------------------------------------------ the job's line out


class _Link:
    """A job process's line to the worker: its requests go out, replies come back.

    The job process uses the socket made for it at fork time; a process forked from it
    (a parallel state) connects to the worker's private socket instead. One request at a
    time per process (a lock), so threads may share it.
    """

    job = None
    path = None
    owner = None
    sock = None
    rfile = None
    wfile = None
    lock = None

    @classmethod
    def adopt(cls, job, sock, path):
        cls.job = job
        cls.path = path
        cls._use(sock)

    @classmethod
    def _use(cls, sock):
        cls.owner = _os.getpid()
        cls.sock = sock
        cls.rfile = sock.makefile("rb")
        cls.wfile = sock.makefile("wb")
        cls.lock = _threading.Lock()

    @classmethod
    def _ours(cls):
        if cls.owner != _os.getpid():
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            sock.connect(cls.path)
            cls._use(sock)

    @classmethod
    def send(cls, frame):
        cls._ours()
        with cls.lock:
            write_frame(cls.wfile, frame)

    @classmethod
    def ask(cls, kind, load):
        import salt.exceptions
        import salt.payload

        if cls.job is None:
            raise salt.exceptions.SaltClientError(
                "the Halite fallback worker has no master channel outside a job"
            )
        cls._ours()
        with cls.lock:
            write_frame(
                cls.wfile,
                {
                    "op": "request",
                    "job": cls.job,
                    "kind": kind,
                    "load": salt.payload.dumps(load),
                },
            )
            reply = read_frame(cls.rfile)
        if reply is None:
            raise salt.exceptions.SaltClientError(
                "the Halite fallback worker went away during a master request"
            )
        if reply.get("ok"):
            return salt.payload.loads(reply["data"])
        message = reply.get("message") or "the master request failed"
        if reply.get("kind") == "timeout":
            raise salt.exceptions.SaltReqTimeoutError(message)
        raise salt.exceptions.SaltClientError(message)


class PipeReqChannel:
    """Salt's ReqChannel for the fallback worker: the Halite minion sends every load."""

    ttype = "halite"

    def __init__(self, opts, **kwargs):
        self.opts = opts
        self.auth = NoAuth(opts)
        self.crypt = "aes"

    def send(self, load, tries=None, timeout=None, raw=False):
        return _Link.ask("send", load)

    def crypted_transfer_decode_dictentry(
        self, load, dictkey=None, timeout=None, tries=None
    ):
        if dictkey != "pillar":
            import salt.exceptions

            raise salt.exceptions.SaltClientError(
                "the Halite fallback worker decodes only the pillar entry, not {!r}".format(
                    dictkey
                )
            )
        return _Link.ask("pillar", load)

    def connect(self):
        pass

    def close(self):
        pass

    destroy = close

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()


class AsyncPipeReqChannel(PipeReqChannel):
    """The same for Salt's AsyncReqChannel (blocking inside the job's own loop)."""

    async def send(self, load, tries=None, timeout=None, raw=False):
        return PipeReqChannel.send(self, load, tries, timeout, raw)

    async def crypted_transfer_decode_dictentry(
        self, load, dictkey=None, timeout=None, tries=None
    ):
        return PipeReqChannel.crypted_transfer_decode_dictentry(
            self, load, dictkey, timeout, tries
        )

    async def connect(self):
        pass

    async def close_async(self):
        pass

    async def __aenter__(self):
        return self

    async def __aexit__(self, *args):
        self.close()


class NoAuth:
    """Stands in for salt.crypt.SAuth: the worker holds no key and never signs in; the
    Halite minion sets `tok` and `id` in every load it sends."""

    authenticated = True

    def __init__(self, opts=None, *args, **kwargs):
        self.opts = opts

    def gen_token(self, clear_tok):
        return b""

    def authenticate(self, *args, **kwargs):
        pass


def _patch_salt():
    import salt.channel.client
    import salt.crypt
    import salt.utils.minion

    salt.channel.client.ReqChannel.factory = staticmethod(
        lambda opts, **kwargs: PipeReqChannel(opts, **kwargs)
    )
    salt.channel.client.AsyncReqChannel.factory = classmethod(
        lambda cls, opts, **kwargs: AsyncPipeReqChannel(opts, **kwargs)
    )
    salt.crypt.SAuth = NoAuth

    # The Halite minion writes each job's proc file with its own pid before the job
    # process rewrites it with its pid; Salt keeps only proc files of processes whose
    # command line says "salt", which the Halite minion's does not.
    checked = salt.utils.minion._check_cmdline

    def _check_cmdline(data):
        return data.get("pid") == HALITE_PID or checked(data)

    salt.utils.minion._check_cmdline = _check_cmdline


# ------------------------------------------------------------------------- warming up


def _log_level(opts):
    import logging

    import salt._logging  # registers Salt's levels (trace, garbage, profile)

    names = [opts.get("log_level"), opts.get("log_level_logfile")]
    levels = [
        salt._logging.LOG_LEVELS.get(str(n).lower())
        for n in names
        if n is not None
    ]
    levels = [lvl for lvl in levels if isinstance(lvl, int)]
    return min(levels) if levels else logging.WARNING


def _load_modules():
    """The execution modules and executors, as Minion._load_modules makes them (also
    in a job process that does not find its function: modules synced since the worker
    started, such as custom `_modules`, are found then)."""
    global FUNCTIONS, EXECUTORS, FUNCTION_ERRORS
    import salt.loader

    context = {}
    utils = salt.loader.utils(OPTS, context=context)
    functions = salt.loader.minion_mods(OPTS, utils=utils, context=context)
    errors = {}
    if "_errors" in functions:
        errors = functions["_errors"]
        functions.pop("_errors")
    FUNCTIONS, FUNCTION_ERRORS = functions, errors
    EXECUTORS = salt.loader.executors(OPTS, functions, context=context)


def warm_up():
    global OPTS, PROC_DIR
    import logging
    import warnings

    import salt.config
    import salt.loader
    import salt.minion
    import salt.payload
    import salt.version

    # Python's deprecation notices about Salt's own imports are not the admin's business
    # (after importing salt, which installs its own warning filters first).
    warnings.filterwarnings("ignore", category=DeprecationWarning)

    _os.environ.pop("SALT_MINION_CONFIG", None)
    opts = salt.config.minion_config(CONF_FILE, minion_id=MINION_ID)
    opts["id"] = MINION_ID
    opts["__cli"] = "salt-minion"
    # Every job runs in a process of its own (Salt's proc-file rules depend on it).
    opts["multiprocessing"] = True
    logging.basicConfig(
        stream=_sys.stderr,
        level=_log_level(opts),
        format="[%(levelname)-8s] %(message)s",
        force=True,
    )
    _patch_salt()
    opts["grains"] = salt.loader.grains(opts)
    opts["pillar"] = {}
    OPTS = opts
    _load_modules()
    functions = FUNCTIONS
    utils = salt.loader.utils(opts)
    context = {}
    PROC_DIR = salt.minion.get_proc_dir(opts["cachedir"])
    # What most jobs load: imported once here, shared by every forked job.
    for name in (
        "state.apply",
        "cmd.run",
        "file.file_exists",
        "pkg.list_pkgs",
        "user.info",
        "cp.get_file",
        "config.get",
        "pillar.get",
        "grains.get",
        "sys.doc",
    ):
        try:
            functions[name]
        except Exception:  # pylint: disable=broad-except
            pass
    try:
        import salt.fileclient
        import salt.pillar
        import salt.state
        import salt.utils.jinja
        import salt.utils.templates

        serializers = salt.loader.serializers(opts)
        states = salt.loader.states(opts, functions, utils, serializers, context=context)
        for name in ("file.managed", "file.directory", "cmd.run", "pkg.installed"):
            try:
                states[name]
            except Exception:  # pylint: disable=broad-except
                pass
        render = salt.loader.render(opts, functions)
        for name in ("jinja", "yaml"):
            try:
                render[name]
            except Exception:  # pylint: disable=broad-except
                pass
    except Exception:  # pylint: disable=broad-except
        logging.getLogger(__name__).debug("Warming the state loaders failed", exc_info=True)
    import gc

    gc.collect()
    if hasattr(gc, "freeze"):
        # Forked jobs then leave the warm objects' pages shared.
        gc.freeze()
    return salt.version.__version__


# ------------------------------------------------------------------- a job, as stock


def _execute_job_function(function_name, function_args, executors, data, connected):
    """Minion._execute_job_function of Salt 3008.3."""
    import salt.minion
    from salt.exceptions import SaltInvocationError

    opts = OPTS
    blackout = False
    if connected and opts["pillar"].get("minion_blackout", False):
        whitelist = opts["pillar"].get("minion_blackout_whitelist", [])
        if function_name != "saltutil.refresh_pillar" and function_name not in whitelist:
            blackout = True
    if opts["grains"].get("minion_blackout", False):
        whitelist = opts["grains"].get("minion_blackout_whitelist", [])
        if function_name != "saltutil.refresh_pillar" and function_name not in whitelist:
            blackout = True
    if blackout:
        raise SaltInvocationError(
            "Minion in blackout mode. Set 'minion_blackout' "
            "to False in pillar or grains to resume operations. Only "
            "saltutil.refresh_pillar allowed in blackout mode."
        )
    if function_name in FUNCTIONS:
        func = FUNCTIONS[function_name]
        args, kwargs = salt.minion.load_args_and_kwargs(func, function_args, data)
    else:
        func = function_name
        args, kwargs = function_args, data
    FUNCTIONS.pack["__context__"]["retcode"] = 0
    if isinstance(executors, str):
        executors = [executors]
    elif not isinstance(executors, list) or not executors:
        raise SaltInvocationError(
            "Wrong executors specification: {}. String or non-empty list expected".format(
                executors
            )
        )
    if opts.get("sudo_user", "") and executors[-1] != "sudo":
        executors[-1] = "sudo"
    for name in executors:
        fname = "{}.execute".format(name)
        if fname not in EXECUTORS:
            raise SaltInvocationError("Executor '{}' is not available".format(name))
        return_data = EXECUTORS[fname](opts, data, func, args, kwargs)
        if return_data is not None:
            return return_data
    return None


def _fire_master(data, tag):
    import salt.utils.event

    with salt.utils.event.get_event("minion", opts=OPTS, listen=False) as event:
        event.fire_event(
            {"data": data, "tag": tag, "events": None, "pretag": None}, "fire_master"
        )


def thread_return(function_name, function_args, data, connected):
    """The return Minion._thread_return of Salt 3008.3 builds (without resources,
    returners and the send, which the Halite minion does)."""
    import logging

    import salt.defaults.exitcodes
    import salt.exceptions
    import salt.utils.error
    from salt.exceptions import (
        CommandExecutionError,
        CommandNotFoundError,
        SaltClientError,
        SaltInvocationError,
    )
    from salt.utils.event import tagify

    log = logging.getLogger("salt.minion")
    ex_ok = salt.defaults.exitcodes.EX_OK
    ex_generic = salt.defaults.exitcodes.EX_GENERIC
    ret = {"success": False}
    executors = data.get("module_executors") or OPTS.get(
        "module_executors", ["direct_call"]
    )
    allow_missing_funcs = any(
        [
            EXECUTORS["{}.allow_missing_func".format(executor)](function_name)
            for executor in executors
            if "{}.allow_missing_func".format(executor) in EXECUTORS
        ]
    )
    if function_name in FUNCTIONS or allow_missing_funcs is True:
        try:
            return_data = _execute_job_function(
                function_name, function_args, executors, data, connected
            )
            if isinstance(return_data, _types.GeneratorType):
                ind = 0
                iret = {}
                for single in return_data:
                    if isinstance(single, dict) and isinstance(iret, dict):
                        iret.update(single)
                    else:
                        if not iret:
                            iret = []
                        iret.append(single)
                    tag = tagify([data.get("jid"), "prog", OPTS["id"], str(ind)], "job")
                    _fire_master({"return": single}, tag)
                    ind += 1
                ret["return"] = iret
            else:
                ret["return"] = return_data
            retcode = FUNCTIONS.pack["__context__"].get("retcode", ex_ok)
            if retcode == ex_ok:
                try:
                    if isinstance(return_data, dict):
                        func_result = all(
                            return_data.get(x, True) for x in ("result", "success")
                        )
                    else:
                        func_result = True
                except Exception:  # pylint: disable=broad-except
                    func_result = True
                if not func_result:
                    retcode = ex_generic
            ret["retcode"] = retcode
            ret["success"] = retcode == ex_ok
        except CommandNotFoundError as exc:
            msg = "Command required for '{}' not found".format(function_name)
            log.debug(msg, exc_info=True)
            ret["return"] = "{}: {}".format(msg, exc)
            ret["out"] = "nested"
            ret["retcode"] = ex_generic
        except CommandExecutionError as exc:
            log.error("A command in '%s' had a problem: %s", function_name, exc)
            ret["return"] = "ERROR: {}".format(exc)
            ret["out"] = "nested"
            ret["retcode"] = ex_generic
        except SaltInvocationError as exc:
            log.error("Problem executing '%s': %s", function_name, exc)
            ret["return"] = "ERROR executing '{}': {}".format(function_name, exc)
            ret["out"] = "nested"
            ret["retcode"] = ex_generic
        except SaltClientError as exc:
            log.error("Problem executing '%s': %s", function_name, exc)
            ret["return"] = "ERROR executing '{}': {}".format(function_name, exc)
            ret["out"] = "nested"
            ret["retcode"] = ex_generic
        except TypeError as exc:
            msg = "Passed invalid arguments to {}: {}\n{}".format(
                function_name, exc, FUNCTIONS[function_name].__doc__ or ""
            )
            log.warning(msg)
            ret["return"] = msg
            ret["out"] = "nested"
            ret["retcode"] = ex_generic
        except Exception:  # pylint: disable=broad-except
            msg = "The minion function caused an exception"
            log.warning(msg, exc_info=True)
            try:
                salt.utils.error.fire_exception(
                    salt.exceptions.MinionError(msg), OPTS, job=data
                )
            except Exception:  # pylint: disable=broad-except
                log.debug("Cannot fire the exception event", exc_info=True)
            ret["return"] = "{}: {}".format(msg, _traceback.format_exc())
            ret["out"] = "nested"
            ret["retcode"] = ex_generic
    else:
        sys_loader = getattr(FUNCTIONS, "_dunder_salt", None) or FUNCTIONS
        docs = sys_loader["sys.doc"]("{}*".format(function_name))
        if docs:
            docs[function_name] = FUNCTIONS.missing_fun_string(function_name)
            ret["return"] = docs
        else:
            ret["return"] = FUNCTIONS.missing_fun_string(function_name)
            mod_name = function_name.split(".")[0]
            if mod_name in FUNCTION_ERRORS:
                ret["return"] += " Possible reasons: '{}'".format(
                    FUNCTION_ERRORS[mod_name]
                )
        ret["success"] = False
        ret["retcode"] = ex_generic
        ret["out"] = "nested"
    if "out" not in ret:
        # Minion._prepare_return_pub: the function's declared outputter.
        try:
            oput = FUNCTIONS[function_name].__outputter__
        except (KeyError, AttributeError, TypeError):
            pass
        else:
            if isinstance(oput, str):
                ret["out"] = oput
    return ret


def _proc_file(data):
    jid = str(data.get("jid") or "")
    if not jid or jid in (".", "..") or "/" in jid or "\0" in jid:
        return None
    return _os.path.join(PROC_DIR, jid)


def run_job(msg):
    import salt.payload

    fun = msg.get("fun")
    args = salt.payload.loads(msg["arg"])
    data = salt.payload.loads(msg["data"])
    if isinstance(data, dict) and data.get("arg") == args:
        # As in stock, the arguments are the publish load's own list.
        args = data["arg"]
    pillar = salt.payload.loads(msg["pillar"])
    if not isinstance(pillar, dict):
        pillar = {}
    OPTS["pillar"] = pillar
    if isinstance(fun, str) and fun not in FUNCTIONS:
        _load_modules()
    FUNCTIONS.pack["__pillar__"] = pillar
    inner = getattr(FUNCTIONS, "_dunder_salt", None)
    if inner is not None and hasattr(inner, "pack"):
        inner.pack["__pillar__"] = pillar
    if msg.get("master_uri"):
        OPTS["master_uri"] = msg["master_uri"]
    fn_ = _proc_file(data) if isinstance(data, dict) and data.get("jid") else None
    if fn_:
        # This process runs only this job: `state.running` skips `__opts__["jid"]` when it
        # looks for other state runs in the proc directory (its self-detection).
        OPTS["jid"] = data["jid"]
        sdata = {"pid": _os.getpid()}
        sdata.update(data)
        try:
            with open(fn_, "w+b") as fp_:
                fp_.write(salt.payload.dumps(sdata))
        except OSError:
            fn_ = None
    import salt.utils.ctx

    data = data if isinstance(data, dict) else {}
    try:
        # Minion._target: the job's data and opts for the log records of the job.
        with salt.utils.ctx.request_context({"data": data, "opts": OPTS}):
            return thread_return(fun, args, data, msg.get("connected"))
    finally:
        if fn_:
            try:
                _os.remove(fn_)
            except OSError:
                pass


def job_process(msg, sock, path):
    """The body of a forked job process; never returns."""
    import salt.payload

    job = msg.get("job")
    try:
        try:
            import ctypes

            # Die with the worker (PR_SET_PDEATHSIG = 1).
            ctypes.CDLL(None, use_errno=True).prctl(1, _signal.SIGKILL, 0, 0, 0)
        except Exception:  # pylint: disable=broad-except
            pass
        import asyncio

        # Stock's _thread_return runs each job with an event loop of its own.
        asyncio.set_event_loop(asyncio.new_event_loop())
        _Link.adopt(job, sock, path)
        if msg.get("op") == "list":
            _load_modules()
            names = sorted(FUNCTIONS.keys())
            _Link.send({"op": "result", "job": job, "functions": names})
        else:
            ret = run_job(msg)
            try:
                body = salt.payload.dumps(ret)
            except Exception:  # pylint: disable=broad-except
                body = salt.payload.dumps(
                    {
                        "return": "The minion function caused an exception: {}".format(
                            _traceback.format_exc()
                        ),
                        "retcode": 1,
                        "success": False,
                        "out": "nested",
                    }
                )
            _Link.send({"op": "result", "job": job, "ret": body})
    except BaseException:  # pylint: disable=broad-except
        _traceback.print_exc()
        _sys.stderr.flush()
        _os._exit(1)
    _sys.stderr.flush()
    _os._exit(0)


# ------------------------------------------------------------------------ the loop


class Worker:
    def __init__(self, inp_fd, out):
        self.inp_fd = inp_fd
        self.out = out
        self.sel = _selectors.DefaultSelector()
        self.stdin = _Frames()
        self.dir = _tempfile.mkdtemp(prefix="halite-fallback-")
        self.path = _os.path.join(self.dir, "s")
        self.listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.jobs = {}  # job -> {"pid", "sock", "done"}
        self.conns = {}  # socket -> {"frames", "job"}
        self.routes = {}  # req -> socket
        self.next_req = 0
        self.exits = {}  # pid -> exit status
        _os.set_blocking(inp_fd, False)
        self.sel.register(inp_fd, _selectors.EVENT_READ, "stdin")
        self.sel.register(self.listener, _selectors.EVENT_READ, "listen")

    def emit(self, frame):
        write_frame(self.out, frame)

    def serve(self):
        try:
            while True:
                for key, _ in self.sel.select(timeout=1.0):
                    if key.data == "stdin":
                        if not self.read_stdin():
                            return
                    elif key.data == "listen":
                        self.accept()
                    else:
                        self.read_conn(key.fileobj)
                self.reap()
        finally:
            self.stop()

    def read_stdin(self):
        try:
            data = _os.read(self.inp_fd, 1 << 20)
        except BlockingIOError:
            return True
        if not data:
            return False
        self.stdin.feed(data)
        for msg in self.stdin.take():
            if not isinstance(msg, dict):
                continue
            op = msg.get("op")
            if op in ("job", "list"):
                self.fork(msg)
            elif op == "reply":
                self.reply(msg)
            elif op == "signal":
                job = self.jobs.get(msg.get("job"))
                if job is not None:
                    try:
                        _os.killpg(job["pid"], int(msg.get("signal") or _signal.SIGTERM))
                    except (OSError, ValueError):
                        pass
            elif op == "exit":
                return False
        return True

    def fork(self, msg):
        job = msg.get("job")
        mine, theirs = _socket.socketpair()
        pid = _os.fork()
        if pid == 0:
            try:
                _os.setpgid(0, 0)
                for sock in list(self.conns):
                    sock.close()
                mine.close()
                self.listener.close()
                self.sel.close()
                devnull = _os.open(_os.devnull, _os.O_RDWR)
                _os.dup2(devnull, 0)
                _os.close(devnull)
                _os.close(self.inp_fd)
                self.out.close()
            except BaseException:  # pylint: disable=broad-except
                _os._exit(1)
            job_process(msg, theirs, self.path)
        theirs.close()
        try:
            _os.setpgid(pid, pid)
        except OSError:
            pass
        mine.setblocking(False)
        self.jobs[job] = {"pid": pid, "sock": mine, "done": False}
        self.conns[mine] = {"frames": _Frames(), "job": job}
        self.sel.register(mine, _selectors.EVENT_READ, "conn")

    def accept(self):
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        creds = sock.getsockopt(
            _socket.SOL_SOCKET, _socket.SO_PEERCRED, _struct.calcsize("3i")
        )
        _, uid, _ = _struct.unpack("3i", creds)
        if uid != _os.getuid():
            sock.close()
            return
        sock.setblocking(False)
        self.conns[sock] = {"frames": _Frames(), "job": None}
        self.sel.register(sock, _selectors.EVENT_READ, "conn")

    def read_conn(self, sock):
        conn = self.conns.get(sock)
        if conn is None:
            return
        try:
            data = sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            conn["frames"].feed(data)
            for msg in conn["frames"].take():
                self.from_job(sock, msg)
            return
        self.sel.unregister(sock)
        del self.conns[sock]
        sock.close()
        for job, state in list(self.jobs.items()):
            if state["sock"] is sock:
                self.ended(job, state)

    def from_job(self, sock, msg):
        if not isinstance(msg, dict):
            return
        job = msg.get("job")
        state = self.jobs.get(job)
        if state is None:
            return
        op = msg.get("op")
        if op == "request":
            self.next_req += 1
            req = self.next_req
            self.routes[req] = sock
            self.emit(
                {
                    "op": "request",
                    "job": job,
                    "req": req,
                    "kind": msg.get("kind"),
                    "load": msg.get("load"),
                }
            )
        elif op == "result" and not state["done"]:
            state["done"] = True
            out = {"op": "result", "job": job}
            if "functions" in msg:
                out["functions"] = msg["functions"]
            else:
                out["ret"] = msg.get("ret")
            self.emit(out)

    def reply(self, msg):
        sock = self.routes.pop(msg.get("req"), None)
        if sock is None or sock not in self.conns:
            return
        frame = _pack(msg)
        try:
            sock.setblocking(True)
            sock.sendall(frame)
            sock.setblocking(False)
        except OSError:
            pass

    def ended(self, job, state):
        """The job process closed its line: it ended, with or without a result."""
        del self.jobs[job]
        self.routes = {r: s for r, s in self.routes.items() if s is not state["sock"]}
        if state["done"]:
            return
        status = None
        for _ in range(20):
            self.reap()
            if state["pid"] in self.exits:
                status = self.exits.pop(state["pid"])
                break
            _time.sleep(0.01)
        if status is None:
            why = "it closed its line to the worker"
        elif _os.WIFSIGNALED(status):
            why = "it was killed by signal {}".format(_os.WTERMSIG(status))
        else:
            why = "it exited with status {}".format(_os.WEXITSTATUS(status))
        self.emit(
            {
                "op": "crashed",
                "job": job,
                "error": "the job process {} ended without a return: {}".format(
                    state["pid"], why
                ),
            }
        )

    def reap(self):
        while True:
            try:
                pid, status = _os.waitpid(-1, _os.WNOHANG)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if pid == 0:
                return
            self.exits[pid] = status
            if len(self.exits) > 1000:
                self.exits.pop(next(iter(self.exits)))

    def stop(self):
        for state in self.jobs.values():
            try:
                _os.killpg(state["pid"], _signal.SIGKILL)
            except OSError:
                pass
        try:
            self.listener.close()
            _os.unlink(self.path)
            _os.rmdir(self.dir)
        except OSError:
            pass


def main():
    inp, out = take_frame_streams()
    started = _time.monotonic()
    try:
        version = warm_up()
    except BaseException:  # pylint: disable=broad-except
        write_frame(out, {"op": "fatal", "error": _traceback.format_exc()})
        return 1
    write_frame(
        out, {"op": "ready", "salt": version, "seconds": _time.monotonic() - started}
    )
    Worker(inp.fileno(), out).serve()
    return 0


_sys.exit(main())
