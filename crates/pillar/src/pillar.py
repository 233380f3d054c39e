# The pillar worker of halite-pillar: Salt's own pillar compiler in a warm process.
#
# Run as `python -c <FRAMING_PY + this> <master config file> <log level>` by the Halite
# master. It imports Salt and loads the master's options once
# (`salt.config.master_config`), says it is ready (`{"ready": True, "pid": ..., "reuse":
# <whether the reuse below is installed>}`), then answers one request frame at a time
# until stdin closes:
#
#   {"op": "compile", "load": <bin: the minion's `_pillar` load, msgpack>}
#       -> {"pillar": <bin: salt.payload.dumps(result)>, "base": <bin or nil>}
#          `base` (the pillar before `pillar_override`, what stock's PillarCache stores)
#          is present when stock would go through PillarCache.
#   {"op": "merge", "base": <bin>, "override": <bin>}
#       -> {"pillar": <bin>}: PillarCache's merge of a cached pillar with an override.
#   Any exception: {"exception": True}, after logging it as stock's run_func does
#   ("Error in function _pillar"); the master then answers "" as stock does.
#
# Results are serialized with salt.payload.dumps, as stock serializes the reply it
# encrypts, so datetimes, sets and the like reach the minion exactly as from stock.
#
# Each request goes through stock's `salt.pillar.Pillar` unchanged, which builds its own
# loaders, file clients and `__context__` dicts, exactly as stock's `_pillar` does. What
# makes that cheap here is the "Reuse between requests" section below: it memoizes the
# parts of building and filling those loaders whose result cannot depend on the minion or
# the request (directory listings of the module directories, and executing a few of Salt's
# own modules that hold no state), and builds the master's file server only when a module
# actually asks for it. Each piece says why its answer is the one stock would compute.

import logging
import os
import signal
import sys

# The master ends this process (stdin closes, or SIGKILL); a SIGTERM sent to the whole
# service (systemd's stop) must not kill it under a request the master is still serving.
signal.signal(signal.SIGTERM, signal.SIG_IGN)
_CONF, _LEVEL = sys.argv[1], sys.argv[2]
_INP, _OUT = take_frame_streams()  # noqa: F821 (from FRAMING_PY)

import salt._logging.impl as _salt_logging  # noqa: E402

_salt_logging.shutdown_temp_handler()
_salt_logging.setup_console_handler(log_level=_LEVEL)
logging.root.setLevel(_salt_logging.get_logging_level_from_string(_LEVEL))
log = logging.getLogger("salt.master")

try:
    import salt.config
    import salt.payload
    import salt.pillar
    import salt.utils.dictupdate
    import salt.utils.verify

    OPTS = salt.config.master_config(_CONF)
except Exception as exc:  # pylint: disable=broad-except
    log.critical("The pillar worker cannot load %s: %s", _CONF, exc, exc_info=True)
    write_frame(_OUT, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})  # noqa: F821
    sys.exit(1)

# ---- Reuse between requests ---------------------------------------------------------
#
# A stock compilation spends nearly all its time building loaders, not rendering: every
# `salt.pillar.Pillar` makes a dozen `LazyLoader`s (utils, execution modules, matchers,
# renderers, ext_pillar, the file clients' utils, the fileserver's backends), each listing
# and parsing the names in its module directories (hundreds of files) when built and again
# when cleared, then re-executes the code of every module it touches (jinja, yaml,
# confirm_top, compound_match, glob_match, ...), and builds the master's file server
# (`FSClient`, loading every fileserver backend) that pillar itself never reads. What
# follows removes that work where it is provably the same for every request, and nothing
# else: every loader, every pack, every `__opts__` copy and every `__context__` is
# still built fresh per request by stock's code, so no minion's grains, opts, pillar or
# context can reach another's. Installed only on the Salt version it was checked against.

import copy  # noqa: E402
import importlib  # noqa: E402
import inspect  # noqa: E402
import time  # noqa: E402

import salt.version  # noqa: E402

# The Salt release whose loader, OptsDict, Pillar and FSChan code the replacements below
# were checked against line by line. Any other release runs stock's code unchanged (and
# none of its internals is even looked up: `reuse` does that after checking).
_CHECKED_SALT = (3008, 3)
# Set by `reuse`: the installed Salt package directory, and stock's functions replaced.
_SALT_DIR = None
_STOCK = {}
# A directory changed this recently may change again within its timestamp's granularity
# without its mtime moving: its listing is not memoized (git's "racy" rule).
_RACY_NS = 2_000_000_000


def _own(path):
    """Whether `path` is inside the installed Salt package (never changed under us)."""
    return path == _SALT_DIR or path.startswith(_SALT_DIR + os.sep)


def _mtime(path):
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _watched(module_dirs):
    """What a listing of `module_dirs` depends on outside Salt's own package: each
    directory, its `__pycache__` and its package subdirectories, with their mtimes
    (`None`: absent). A directory's mtime moves whenever an entry is added, removed or
    renamed, which is all a listing reads."""
    paths = []
    for mod_dir in module_dirs:
        if _own(mod_dir):
            continue
        paths += [mod_dir, os.path.join(mod_dir, "__pycache__")]
        try:
            with os.scandir(mod_dir) as entries:
                paths += [
                    e.path for e in entries if not os.path.splitext(e.name)[1] and e.is_dir()
                ]
        except OSError:
            pass
    return tuple((path, _mtime(path)) for path in paths)


_LISTINGS = {}


def _refresh_file_mapping(self):
    """`LazyLoader._refresh_file_mapping`, memoized.

    The mapping is a pure function of the loader's module directories' listings and of
    the loader attributes in the key; Salt's own directories never change while the
    worker runs and every other one is checked by mtime on every call, so a hit is the
    mapping a fresh listing would build. The mtimes are taken before listing, so a change
    during the listing makes the next call list again."""
    opts = self.opts
    key = (
        tuple(self.module_dirs),
        tuple(self.static_modules),
        frozenset(self.disabled),
        tuple(opts["optimization_order"]),
        opts.get("cython_enable", True) is True,
        opts.get("enable_zip_modules", True) is True,
        tuple(self.suffix_order),
        tuple(sorted(self.suffix_map.items())),
    )
    hit = _LISTINGS.get(key)
    if hit is not None and all(_mtime(path) == mtime for path, mtime in hit[0]):
        self.suffix_map = dict(hit[1])
        self.suffix_order = list(hit[2])
        self.file_mapping = dict(hit[3])
        return
    now = time.time_ns()
    watched = _watched(self.module_dirs)
    _STOCK["refresh"](self)
    if any(mtime is not None and now - mtime < _RACY_NS for _, mtime in watched):
        _LISTINGS.pop(key, None)
        return
    _LISTINGS[key] = (
        watched,
        dict(self.suffix_map),
        list(self.suffix_order),
        dict(self.file_mapping),
    )


# Salt modules whose loading is memoized: Salt's own renderers and matchers, and the
# `grains` and `pillar` execution modules pillar templates call most. Each was read in
# 3008.3: no `__virtual__`, no `__init__`, no `@depends`, no virtual name or alias, no
# mutable default argument, and no module-level object that a function changes or hands
# out (so executing the module again, as each stock loader does, recreates objects that
# behave exactly as the ones already there). Left
# out: the gpg renderer (its GPG_CACHE global), stateconf (`__init__`, module-level
# state), and `config`, whose `get` hands out parts of its module-level DEFAULTS, which
# a template could change for the minions after it. `_plain` re-checks the structural
# part at run time.
_MEMOIZED = {
    "render": {"jinja", "yaml", "json", "yamlex", "py", "mako", "msgpack", "nacl", "pyobjects"},
    "matchers": {
        "cache_match", "compound_match", "compound_pillar_exact_match", "confirm_top",
        "data_match", "glob_match", "grain_match", "grain_pcre_match", "ipcidr_match",
        "list_match", "managing_minion_match", "nodegroup_match", "pcre_match",
        "pillar_exact_match", "pillar_match", "pillar_pcre_match", "range_match",
        "resource_match",
    },
    "module": {"grains", "pillar"},
}
_MODULES = {}


def _load_module(self, name):
    """`LazyLoader._load_module`, with the module's execution memoized for `_MEMOIZED`.

    The first load runs stock's code (collecting the functions it adds in a dict of their
    own, so they are known exactly). Later loads of the same file into any loader with
    the same tag skip executing the module and binding its `__virtual__` (neither can
    differ, see `_MEMOIZED`) and do the rest of what stock's load does for that loader:
    a fresh `__opts__` copied from this loader's opts, the dunders bound to this loader's
    pack, its functions added to this loader."""
    entry = self.file_mapping.get(name)
    if (
        entry is None
        or name not in _MEMOIZED.get(self.tag, ())
        or entry[1] not in (".py", ".pyc")
        or not _own(entry[0])
        or "proxy" in self.opts
    ):
        return _STOCK["load_module"](self, name)
    fpath = entry[0]
    key = (
        self.tag,
        self.loaded_base_name,
        name,
        fpath,
        self.virtual_enable,
        tuple(self.virtual_funcs),
        self._only_pack_properly_namespaced_functions,
    )
    namespace = ".".join((self.loaded_base_name, self.mod_type_check(fpath), self.tag, name))
    mtime = _mtime(fpath)
    memo = _MODULES.get(key)
    if memo is not None and memo[0] == mtime and sys.modules.get(namespace) is memo[1]:
        _bind(self, name, memo[1], memo[2])
        return True
    loaded = self._dict
    self._dict = self.mod_dict_class()
    try:
        ok = _STOCK["load_module"](self, name)
    finally:
        added, self._dict = self._dict, loaded
    for fun, func in added.items():
        if fun not in loaded:
            loaded[fun] = func
    mod = sys.modules.get(namespace)
    if ok and mod is not None and _plain(self.tag, name, mod, added):
        _MODULES[key] = (mtime, mod, list(added.items()))
    else:
        _MODULES.pop(key, None)
    return ok


def _plain(tag, name, mod, added):
    """The structural conditions `_MEMOIZED` was chosen by, checked on the loaded module."""
    if inspect.isfunction(getattr(mod, "__virtual__", None)):
        return False
    if inspect.isfunction(getattr(mod, "__init__", None)):
        return False
    if getattr(mod, "__virtual_aliases__", ()) or getattr(mod, "__virtualname__", name) != name:
        return False
    for dependents in salt.utils.decorators.Depends.dependency_dict.get(tag, {}).values():
        if any(mod_name == name for mod_name, _ in dependents):
            return False
    return bool(added) and all(fun.split(".", 1)[0] == name for fun in added)


def _bind(self, name, mod, funcs):
    """The end state of stock's `_load_module(name)` for loader `self`, minus executing
    the module again (same order of effects, same objects)."""
    self.loaded_files.add(name)
    if not isinstance(getattr(mod, "__opts__", None), salt.loader.context.NamedLoaderContext):
        if not hasattr(mod, "__orig_opts__"):
            mod.__orig_opts__ = {}
        mod.__opts__ = salt.utils.optsdict.safe_opts_copy(self.opts, name=f"module:{name}")
        if mod.__orig_opts__:
            mod.__opts__.update(mod.__orig_opts__)
    loader_context = salt.loader.context.LoaderContext()
    dunders = [p_name for p_name in self.pack if p_name != "__opts__"]
    if self.pack_self is not None:
        dunders.append(self.pack_self)
    for p_name in dunders:
        current = getattr(mod, p_name, None)
        default = copy.deepcopy(current.default) if hasattr(current, "default") else None
        setattr(mod, p_name, loader_context.named_context(p_name, default))
    for fun, func in funcs:
        if fun not in self._dict:
            self._dict[fun] = func
    self.loaded_modules.add(name)


def _optsdict_bool(self):
    """`bool(OptsDict)`: stock counts every key through the parent chain (`__len__`, some
    600 lookups) each time a child copy is made; whether one live key exists is the same
    truth value."""
    with self._ensure_lock():
        return any(key in self for key in self._get_all_keys())


class _FileServerOnDemand:
    """The file client `Pillar.__init__` builds for the master's file server (`FSClient`,
    handed to execution modules as `__file_client__`), built on first use with the same
    options object.

    Stock builds it for every compilation: a loader of the fileserver backends, every one
    of which (gitfs, hgfs, s3fs, svnfs, azurefs, minionfs, roots) is then loaded and
    `__virtual__`-checked to list the enabled ones, and each enabled backend's `init()`
    run, though pillar reads `pillar_roots` through its own client and only a module such
    as `cp.*` called from a template reaches this one. (The update `FSChan` may run is
    skipped on a master in any case: `master_config` sets `__fs_update`.)"""

    def __init__(self, opts):
        object.__setattr__(self, "_opts", opts)
        object.__setattr__(self, "_client", None)

    def _built(self):
        if self._client is None:
            object.__setattr__(self, "_client", salt.fileclient.FSClient(self._opts))
        return self._client

    def __getattr__(self, key):
        return getattr(self._built(), key)

    def destroy(self):
        if self._client is not None:
            self._client.destroy()


def _get_file_client(opts, pillar=False):
    """`salt.fileclient.get_file_client`, with the master file server of `Pillar.__init__`
    (and only that call) built on demand."""
    if (
        not pillar
        and opts.get("file_client", "remote") == "local"
        and sys._getframe(1).f_code is _STOCK["pillar_init"]  # pylint: disable=protected-access
    ):
        return _FileServerOnDemand(opts)
    return _STOCK["get_file_client"](opts, pillar)


def reuse():
    """Installs the replacements above; `False` on a Salt release they were not checked
    against (stock's code then runs unchanged)."""
    if salt.version.__saltstack_version__.info[:2] != _CHECKED_SALT:
        log.info(
            "Salt %s: the pillar workers build every loader from scratch, as stock does "
            "(the reuse is checked against %s)",
            salt.version.__version__,
            ".".join(map(str, _CHECKED_SALT)),
        )
        return False
    for module in (
        "salt.fileclient",
        "salt.loader.context",
        "salt.loader.lazy",
        "salt.utils.decorators",
        "salt.utils.optsdict",
    ):
        importlib.import_module(module)
    global _SALT_DIR  # pylint: disable=global-statement
    _SALT_DIR = str(salt.loader.lazy.SALT_BASE_PATH)
    loader = salt.loader.lazy.LazyLoader
    _STOCK["refresh"] = loader._refresh_file_mapping
    _STOCK["load_module"] = loader._load_module
    _STOCK["get_file_client"] = salt.fileclient.get_file_client
    _STOCK["pillar_init"] = salt.pillar.Pillar.__init__.__code__
    loader._refresh_file_mapping = _refresh_file_mapping
    loader._load_module = _load_module
    salt.utils.optsdict.OptsDict.__bool__ = _optsdict_bool
    salt.fileclient.get_file_client = _get_file_client
    return True


REUSE = reuse()


# The LTS default (`master_async_mworker: False`) answers `_pillar` with `_sync_pillar`,
# which goes through `salt.pillar.get_pillar`: PillarCache when `pillar_cache` or
# `minion_data_cache` is on (the pillar compiled without the override, which is merged
# afterwards), plain Pillar otherwise. With `master_async_mworker` on, stock uses
# `get_async_pillar`: plain (Async)Pillar with the override, never the cache.
_CACHE_PATH = not OPTS.get("master_async_mworker", False) and bool(
    OPTS.get("pillar_cache") or OPTS.get("minion_data_cache")
)


def _merge_override(opts, pillar, override):
    """PillarCache's merge of the override into a (cached or fresh) pillar."""
    if not override:
        return pillar
    return salt.utils.dictupdate.merge(
        pillar,
        override,
        opts.get("pillar_source_merging_strategy") or "smart",
        opts.get("renderer", "yaml"),
        opts.get("pillar_merge_lists", False),
    )


def compile_pillar(load):
    """`AESFuncs._sync_pillar`, less the minion data cache (the master keeps grains).

    Answers the result and, on PillarCache's path, the pillar before the override,
    serialized (what PillarCache would store).
    """
    if any(key not in load for key in ("id", "grains")):
        return False, None
    if not salt.utils.verify.valid_id(OPTS, load["id"]):
        return False, None
    load["grains"]["id"] = load["id"]
    # Pillar() may set opts["pillarenv"] (pillarenv_from_saltenv): keep the warm opts as
    # loaded, as each stock request starts from the master's opts.
    opts = dict(OPTS)
    saltenv = load.get("saltenv", load.get("env"))
    override = load.get("pillar_override", {})
    if _CACHE_PATH:
        pillar = salt.pillar.Pillar(
            opts,
            load["grains"],
            load["id"],
            saltenv,
            ext=load.get("ext"),
            functions=None,
            pillarenv=load.get("pillarenv"),
            extra_minion_data=load.get("extra_minion_data"),
        )
        try:
            base = pillar.compile_pillar()
        finally:
            pillar.destroy()
        # Serialized before the merge, as PillarCache stores it before merging (the
        # `overwrite` strategy changes its first argument).
        stored = salt.payload.dumps(base)
        return _merge_override(opts, base, override or {}), stored
    pillar = salt.pillar.Pillar(
        opts,
        load["grains"],
        load["id"],
        saltenv,
        load.get("ext"),
        functions=None,
        pillar_override=override,
        pillarenv=load.get("pillarenv"),
        extra_minion_data=load.get("extra_minion_data"),
    )
    try:
        return pillar.compile_pillar(), None
    finally:
        pillar.destroy()


def answer(request):
    op = request.get("op")
    if op == "compile":
        load = salt.payload.loads(request["load"])
        pillar, stored = compile_pillar(load)
        return {"pillar": salt.payload.dumps(pillar), "base": stored}
    if op == "merge":
        base = salt.payload.loads(request["base"])
        override = salt.payload.loads(request["override"])
        return {"pillar": salt.payload.dumps(_merge_override(OPTS, base, override))}
    raise ValueError(f"unknown request {op!r}")


def warm_up():
    """Builds the loaders once, for no minion, renders a constant template through the
    configured renderer pipeline and loads (without calling) the matchers every top file
    goes through, so the first request does not pay for importing them (nor, with the
    reuse, for executing them). Reads nothing but the pillar_roots listing: no sls is
    rendered, no ext_pillar runs, no matcher runs."""
    try:
        import salt.template

        pillar = salt.pillar.Pillar(dict(OPTS), {}, "halite-pillar-warm-up", None)
        try:
            salt.template.compile_template_str(
                "warm: {{ 1 + 1 }}\n",
                pillar.rend,
                OPTS["renderer"],
                OPTS["renderer_blacklist"],
                OPTS["renderer_whitelist"],
            )
            for fun in ("confirm_top.confirm_top", "compound_match.match", "glob_match.match"):
                pillar.matchers[fun]  # pylint: disable=pointless-statement
        finally:
            pillar.destroy()
    except Exception:  # pylint: disable=broad-except
        log.debug("The pillar worker's warm-up failed", exc_info=True)


warm_up()
write_frame(_OUT, {"ready": True, "pid": os.getpid(), "reuse": REUSE})  # noqa: F821
while True:
    request = read_frame(_INP)  # noqa: F821
    if request is None:
        break
    try:
        reply = answer(request)
    except Exception:  # pylint: disable=broad-except
        log.error("Error in function %s:\n", "_pillar", exc_info=True)
        reply = {"exception": True}
    write_frame(_OUT, reply)  # noqa: F821
