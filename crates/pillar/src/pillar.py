# The pillar worker of halite-pillar: Salt's own pillar compiler in a warm process.
#
# Run as `python -c <FRAMING_PY + this> <master config file> <log level>` by the Halite
# master. It imports Salt and loads the master's options once
# (`salt.config.master_config`), says it is ready, then answers one request frame at a
# time until stdin closes:
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
    """Builds the loaders once, for no minion, and renders a constant template through the
    configured renderer pipeline, so the first request does not pay for importing them.
    Reads nothing but the pillar_roots listing: no sls is rendered, no ext_pillar runs."""
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
        finally:
            pillar.destroy()
    except Exception:  # pylint: disable=broad-except
        log.debug("The pillar worker's warm-up failed", exc_info=True)


warm_up()
write_frame(_OUT, {"ready": True, "pid": os.getpid()})  # noqa: F821
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
