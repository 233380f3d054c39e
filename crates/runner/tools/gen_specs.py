#!/usr/bin/env python3
"""Generate crates/runner/src/specs.rs from the stock Salt 3008.3 runner modules.

Run with the venv's Python from the workspace root:

    .salt-venv/bin/python crates/runner/tools/gen_specs.py > crates/runner/src/specs.rs

For every runner function Halite implements it records what the master needs to bind
arguments exactly as Salt does and to answer `salt-run -d`: the Python name used in
TypeError texts (`co_qualname`), the parameters with their defaults, whether it takes
`*args` / `**kwargs`, and the raw docstring (`crates/pycall/tools/specgen.py` does the
inspecting and writing). Runners without a docstring are refused. The test
`specs_match_stock_salt` re-runs this script and compares its output with the committed
file.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "pycall" / "tools"))
import specgen  # noqa: E402

MODULES = {
    "jobs": (
        "salt.runners.jobs",
        "active exit_success last_run list_job list_jobs list_jobs_filter lookup_jid "
        "print_job",
    ),
    "manage": (
        "salt.runners.manage",
        "alived allowed down joined list_not_state list_state not_alived not_allowed "
        "not_joined not_present not_reaped present reaped status up",
    ),
    "test": (
        "salt.runners.test",
        "arg metasyntactic raw_arg sleep stdout_print stream",
    ),
}


def fields(name, func, varargs, kwargs):
    if func.__doc__ is None:
        raise SystemExit(f"{name}: no docstring")
    return [
        f"        varargs: {'true' if varargs else 'false'},",
        f"        kwargs: {'true' if kwargs else 'false'},",
        f"        doc: {specgen.rust_str(func.__doc__)},",
    ]


if __name__ == "__main__":
    specgen.main("crates/runner/tools/gen_specs.py", "runner function", MODULES, fields)
