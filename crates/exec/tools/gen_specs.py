#!/usr/bin/env python3
"""Generate crates/exec/src/specs.rs from the stock Salt 3008.3 execution modules.

Run with the venv's Python from the workspace root:

    .salt-venv/bin/python crates/exec/tools/gen_specs.py > crates/exec/src/specs.rs

For every function Halite implements it records what the minion needs to bind arguments
exactly as Salt does and to answer `sys.doc` / `sys.argspec`: the Python name used in
TypeError texts (`co_qualname`), the parameters with their defaults, whether the function
takes `*args` / `**kwargs`, and the raw docstring (`crates/pycall/tools/specgen.py` does
the inspecting and writing). The test `specs_match_stock_salt` re-runs this script and
compares its output with the committed file.
"""

import pathlib
import sys

import salt.modules.cmdmod

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "pycall" / "tools"))
import specgen  # noqa: E402

MODULES = {
    "cmd": (
        "salt.modules.cmdmod",
        "has_exec retcode run run_all run_stderr run_stdout shell which which_bin",
    ),
    "event": ("salt.modules.event", "fire fire_master send"),
    "grains": (
        "salt.modules.grains",
        "equals fetch filter_by get has_value item items ls",
    ),
    "publish": ("salt.modules.publish", "full_data publish runner"),
    "saltutil": (
        "salt.modules.saltutil",
        "find_job is_running kill_all_jobs kill_job running signal_job term_all_jobs term_job",
    ),
    "status": (
        "salt.modules.status",
        "cpuinfo diskusage loadavg meminfo nproc uptime version",
    ),
    "sys": (
        "salt.modules.sysmod",
        "argspec doc list_functions list_modules list_returner_functions list_returners reload_modules",
    ),
    "test": (
        "salt.modules.test",
        "arg arg_clean arg_repr arg_type assertion attr_call collatz cross_test "
        "deprecation_warning echo exception false fib get_opts kwarg opts_pkg outputter "
        "ping rand_sleep rand_str random_hash retcode sleep true try tty version versions "
        "versions_information versions_report",
    ),
}


def shell_default(name, value):
    """`cmd.*`'s `shell=DEFAULT_SHELL`, which is the minion's own shell."""
    if name == "shell" and value is salt.modules.cmdmod.DEFAULT_SHELL:
        return "ParamDefault::Shell"
    return None


def fields(name, func, varargs, kwargs):
    doc = func.__doc__
    return [
        f"        varargs: {'true' if varargs else 'false'},",
        f"        kwargs: {'true' if kwargs else 'false'},",
        f"        doc: {'None' if doc is None else 'Some(' + specgen.rust_str(doc) + ')'},",
    ]


if __name__ == "__main__":
    specgen.main("crates/exec/tools/gen_specs.py", "function", MODULES, fields, shell_default)
