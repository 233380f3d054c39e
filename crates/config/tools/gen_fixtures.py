"""Capture Salt 3008.3's fully applied default options as test fixtures.

Run from the workspace root:

    .salt-venv/bin/python crates/config/tools/gen_fixtures.py

Writes tests/data/salt_<role>_defaults.tsv: one `option<TAB>repr(value)` line per option
of `master_config`/`minion_config` for a missing main file with `root_dir` set to
/halite-root. Host-dependent options (id, user, home paths, memory) are left out.
"""

import os
import tempfile

import salt.config as c

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "data")
VOLATILE = {
    "id", "user", "ssh_config_file", "__role", "__cli", "__fs_update", "__cachedir",
    "worker_pools", "features", "ipc_write_buffer",
}


def dump(role, loader):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, role)
        with open(path, "w") as f:
            f.write("root_dir: /halite-root\nid: fixture\n")
        opts = loader(path)
    with open(os.path.join(OUT, f"salt_{role}_defaults.tsv"), "w") as out:
        for key, value in opts.items():
            if key in VOLATILE or key == "conf_file":
                continue
            out.write(f"{key}\t{value!r}\n")


dump("master", c.master_config)
dump("minion", c.minion_config)
