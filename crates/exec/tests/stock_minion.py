"""Run jobs through the stock Salt 3008.3 minion's job path and print the returns.

Usage: stock_minion.py CONFIG_DIR < jobs.json > returns.json

Each job is a partial publish load ({"fun": ..., "arg": [...]}, optionally more fields)
completed with a fixed jid/tgt/tgt_type/ret/user. The job runs through
`salt.minion.Minion._thread_return` (or `_thread_multi_return` for a list of functions)
on a stand-in minion object whose `_return_pub` records the return load, so binding,
retcodes and error texts are the stock code's own. The returns are printed as one JSON
list on the original stdout; anything the jobs print goes to stderr.
"""

import json
import os
import sys
import types

REAL_STDOUT = os.dup(1)
os.dup2(2, 1)

import salt.config  # noqa: E402
import salt.loader  # noqa: E402
import salt.minion  # noqa: E402

BASE = {
    "jid": "20240101000000000000",
    "tgt": "*",
    "tgt_type": "glob",
    "ret": "",
    "user": "root",
}


def main():
    opts = salt.config.minion_config(os.path.join(sys.argv[1], "minion"))
    opts["file_client"] = "local"
    opts["grains"] = salt.loader.grains(opts)
    opts["pillar"] = {}
    utils = salt.loader.utils(opts)
    functions = salt.loader.minion_mods(opts, utils=utils)
    minion = types.SimpleNamespace(
        opts=opts,
        functions=functions,
        executors=salt.loader.executors(opts, functions),
        returners={},
        function_errors={},
        resource_loaders={},
        resource_funcs={},
        connected=True,
        proc_dir=salt.minion.get_proc_dir(opts["cachedir"]),
    )
    returns = []

    def return_pub(ret, timeout=None):
        # `Minion._return_pub` adds the function's `__outputter__` to the load.
        fun = ret.get("fun")
        if "out" not in ret and isinstance(fun, str):
            try:
                oput = functions[fun].__outputter__
            except (KeyError, AttributeError, TypeError):
                oput = None
            if isinstance(oput, str):
                ret["out"] = oput
        returns.append(ret)

    minion._return_pub = return_pub
    minion.gen_modules = lambda: None
    minion._return_retry_timer = lambda max=False: 1
    minion._fire_start_event = lambda data: None
    minion._execute_job_function = types.MethodType(
        salt.minion.Minion._execute_job_function, minion
    )
    out = []
    for job in json.load(sys.stdin):
        data = dict(BASE)
        data.update(job)
        before = len(returns)
        if isinstance(data["fun"], list):
            salt.minion.Minion._thread_multi_return(minion, opts, data)
        else:
            salt.minion.Minion._thread_return(minion, opts, data)
        out.append(returns[before] if len(returns) > before else None)
    os.write(REAL_STDOUT, json.dumps(out, default=repr).encode())


if __name__ == "__main__":
    main()
