#!/usr/bin/env python3
"""Run stock Salt 3008.3's `jobs` runner functions on a `local_cache` fixture.

Usage: stock_jobs.py <config dir>, with on stdin
    {"jobs": [{"jid", "load", "minions", "returns": [return load, ...]}, ...],
     "calls": [{"fun", "args", "kwargs"}, ...]}
The jobs are written with the stock `local_cache` returner (`save_load`, `returner`) in the
cachedir of `<config dir>/master`; then each runner function is called directly and its
return (or `{"__exception__": "<Class>: <message>"}`) is printed, as a JSON list.
"""

import json
import sys

import salt.config
import salt.loader


def exception_text(exc):
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    return f"{name}: {exc}"


def main():
    spec = json.load(sys.stdin)
    opts = salt.config.master_config(f"{sys.argv[1]}/master")
    returners = salt.loader.returners(opts, {})
    for job in spec["jobs"]:
        returners["local_cache.save_load"](job["jid"], job["load"], minions=job["minions"])
        for ret in job["returns"]:
            returners["local_cache.returner"](ret)
    runners = salt.loader.runner(opts, utils=salt.loader.utils(opts))
    out = []
    for call in spec["calls"]:
        try:
            res = runners[call["fun"]](*call.get("args", []), **call.get("kwargs", {}))
        except Exception as exc:  # pylint: disable=broad-except
            res = {"__exception__": exception_text(exc)}
        out.append(res)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
