#!/usr/bin/env python3
"""Generate crates/wheel/src/specs.rs from the stock Salt 3008.3 wheel modules.

Run with the venv's Python from the workspace root:

    .salt-venv/bin/python crates/wheel/tools/gen_specs.py > crates/wheel/src/specs.rs

For every wheel function Halite implements it records what the master needs to take
arguments exactly as Salt's wheel client does (`format_call`, or `func(*arg, **kwarg)`)
and to quote the function in its messages: the Python name (`co_qualname`, which is also
`__name__` for these module-level functions), the parameters with their defaults, whether
it takes `*args` / `**kwargs`, and the raw docstring (`crates/pycall/tools/specgen.py`
does the inspecting and writing). Functions without a docstring are refused. The test
`specs_match_stock_salt` re-runs this script and compares its output with the committed
file.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "pycall" / "tools"))
import specgen  # noqa: E402

MODULES = {
    "config": ("salt.wheel.config", "values"),
    "key": (
        "salt.wheel.key",
        "accept accept_dict delete delete_dict finger finger_master gen gen_accept "
        "gen_keys gen_signature glob_match list list_all master_key_str name_match print "
        "reject reject_dict",
    ),
    "minions": ("salt.wheel.minions", "connected"),
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
    specgen.main("crates/wheel/tools/gen_specs.py", "wheel function", MODULES, fields)
