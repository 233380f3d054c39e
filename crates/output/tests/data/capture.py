"""Capture what stock Salt 3008.3 prints for sample returns, for tests/render.rs.

Each sample is packed with salt.payload.dumps (as a minion sends it), unpacked with
salt.payload.loads (as the CLI receives it) and printed through
salt.output.display_output with stdout captured, once per outputter/option variant.
The msgpack bytes and the exact printed text go to outputs.json.

Regenerate from the repository root with:

    /work/main/.salt-venv/bin/python crates/output/tests/data/capture.py \
        > crates/output/tests/data/outputs.json
"""

import base64
import contextlib
import datetime
import io
import json
import logging
import math
import struct
import sys

import msgpack
import salt.config
import salt.output
import salt.payload

logging.disable(logging.CRITICAL)

BASE_OPTS = salt.config.DEFAULT_MASTER_OPTS.copy()

NO_RESPONSE = (
    "Minion did not return. [No response]\n"
    "The minions may not have all finished running and any remaining minions will "
    "return upon completion. To look up the return data for this job later, run the "
    "following command:\n\nsalt-run jobs.lookup_jid 20240101010101010101"
)

# (out, color, indent, retcode, extra opts): indent is "unset", "null", "pretty" or an
# int string; extra opts are nested_indent/strip_colors overrides.
VARIANTS = [
    ("nested", False, "unset", 0, {}),
    ("nested", True, "unset", 0, {}),
    ("nested", True, "unset", 1, {}),
    ("json", False, "unset", 0, {}),
    ("json", False, "-1", 0, {}),
    ("json", False, "0", 0, {}),
    ("json", False, "2", 0, {}),
    ("json", False, "null", 0, {}),
    ("json", False, "pretty", 0, {}),
    ("yaml", False, "unset", 0, {}),
    ("yaml", False, "-1", 0, {}),
    ("yaml", False, "4", 0, {}),
    ("yaml", False, "pretty", 0, {}),
    ("txt", False, "unset", 0, {}),
    ("raw", False, "unset", 0, {}),
    ("pprint", False, "unset", 0, {}),
    ("pprint", False, "4", 0, {}),
    ("pprint", False, "0", 0, {}),
    ("no_return", False, "unset", 0, {}),
    ("no_return", True, "unset", 0, {}),
    ("nested", False, "unset", 0, {"nested_indent": 2}),
    ("nested", False, "unset", 0, {"strip_colors": False}),
]


def display(data, out, color, indent, retcode, extra):
    opts = dict(BASE_OPTS)
    opts.update(extra)
    opts["color"] = color
    if indent == "null":
        opts["output_indent"] = None
    elif indent == "pretty":
        opts["output_indent"] = "pretty"
    elif indent != "unset":
        opts["output_indent"] = int(indent)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        salt.output.display_output(data, out=out, opts=opts, _retcode=retcode)
    return buf.getvalue()


def renders(packed, variants=VARIANTS):
    result = []
    for out, color, indent, retcode, extra in variants:
        data = salt.payload.loads(packed)
        text = display(data, out, color, indent, retcode, extra)
        render = {"out": out, "color": color, "indent": indent, "retcode": retcode}
        render.update(extra)
        render["text"] = text
        result.append(render)
    return result


def raw_map(pairs):
    """A msgpack map built by hand, so keys may repeat."""
    assert len(pairs) < 16
    return bytes([0x80 | len(pairs)]) + b"".join(
        msgpack.packb(k) + msgpack.packb(v) for k, v in pairs
    )


def samples():
    words = " ".join(f"word{i}" for i in range(40))
    yield "ping", {"m1": True}
    yield "simple_string", {"m1": "hello world"}
    yield "multiline_string", {"m1": "line1\nline2\r\nline3\n\nlast  \n"}
    yield "empty_string", {"m1": ""}
    yield "whitespace_only", {"m1": "   "}
    yield "trailing_blank_lines", {"m1": "out   \n\n"}
    yield "none", {"m1": None}
    yield "false", {"m1": False}
    yield "numbers", {
        "m1": {
            "int": 42,
            "neg": -7,
            "u64max": 2**64 - 1,
            "i64min": -(2**63),
            "float": 3.14,
            "exp": 1e20,
            "small": 1.5e-7,
            "whole": 2.0,
            "sum": 0.1 + 0.2,
            "third": 1 / 3,
            "e16": 1e16,
            "e15": 1e15,
            "nan": math.nan,
            "inf": math.inf,
            "ninf": -math.inf,
            "negzero": -0.0,
        }
    }
    yield "grains_like", {
        "m1": {
            "os": "Debian",
            "ipv4": ["127.0.0.1", "10.0.0.2"],
            "cpu": {"model": "Intel(R) Xeon(R)", "flags": ["fpu", "vme"]},
            "empty_list": [],
            "empty_dict": {},
            "osrelease_info": [12, 5],
        }
    }
    yield "lists_and_dicts", {
        "m1": [[1, 2], {"a": 1, "b": [3]}, [], {}, "s", None, [[]], [{"x": "y"}]]
    }
    yield "unicode", {
        "m1": {
            "café": "naïve ☃ 日本語",
            "emoji": "😀 grin",
            "zero_width": "a\u200bb",
            "nbsp": "a\xa0b",
            "controls": "bell\x07 esc\x1b[31mred\x1b[0m tab\tend",
            "quotes": 'it\'s "quoted"',
            "single": "it's",
            "double": 'say "hi"',
            "backslash": "C:\\path\\n",
            "bom": "\ufeffbom",
            "nel_ls": "a\x85b\u2028c\u2029d",
            "c1": "\x80\x9f",
            "private": "\ue000",
            "del": "x\x7fy",
            "cr": "a\rb",
            "vt": "a\x0bb\x0cc",
        }
    }
    yield "undecodable_bytes", {
        "m1": {
            "raw": b"\xff\xfe\x00\x01",
            "lines": b"ok\xff\nsecond\rthird\r\nfourth",
            "long": bytes(range(128, 256)) * 2,
            "quote": b"it's\xff",
        }
    }
    yield "no_response", {"m1": NO_RESPONSE}
    yield "not_connected", {"m1": "Minion did not return. [Not connected]"}
    yield "yaml_quoting", {
        "m1": {
            "yes": "yes",
            "No": "No",
            "on": "on",
            "num": "123",
            "float": "1.5",
            "octal": "0755",
            "hex": "0x1F",
            "null": "null",
            "tilde": "~",
            "empty": "",
            "colon": "key: value",
            "colon_end": "ends:",
            "colon_mid": "a:b",
            "dash": "- item",
            "dash_word": "-item",
            "hash": "a #comment",
            "hash_start": "#x",
            "hash_mid": "a#b",
            "star": "*alias",
            "amp": "&anchor",
            "bang": "!tag",
            "pct": "%x",
            "at": "@x",
            "backtick": "`x",
            "brackets": "[x]",
            "braces": "{x}",
            "comma": "a, b",
            "question": "? x",
            "question_word": "?x",
            "lead_space": " x",
            "trail_space": "x ",
            "date": "2024-01-02",
            "timestamp": "2024-01-02 03:04:05",
            "merge": "<<",
            "eq": "=",
            "dots": "...x",
            "dashes": "---x",
            "url": "http://example.com:8080/x",
            "sexagesimal": "1:30",
            "exp": "1e5",
            "pipe": "|x",
            "gt": ">x",
            "apostrophe": "it's",
        }
    }
    yield "yaml_keys", {
        "m1": {
            "yes": 1,
            "": 2,
            "a: b": 3,
            "multi\nline key": 4,
            "k" * 130: 5,
            "123": 6,
            "tab\tkey": 7,
        }
    }
    yield "long_strings", {
        "m1": {
            "long_plain": words,
            "long_single": "it's a " * 30,
            "long_double": "tab\t" + words,
            "long_nospace": "x" * 200,
            "multi_long": ("a long line with many words " * 5 + "\n") * 3,
            "double_spaces": "a  b  " * 30,
            "long_list": list(range(60)),
            "long_words": [words, words.upper()],
        }
    }
    yield "int_keys", {"m1": {10: "ten", 1: "one", 2: "two"}}
    yield "mixed_keys", {"m1": {1: "one", "a": "str", 2.5: "float"}}
    yield "none_key", {"m1": {None: "nothing"}}
    yield "bool_keys", {"m1": {True: "yes", False: "no"}}
    yield "datetimes", {
        "m1": {
            "when": datetime.datetime(2024, 1, 2, 3, 4, 5, 600000),
            "midnight": datetime.datetime(2024, 1, 2),
            "seconds": datetime.datetime(1999, 12, 31, 23, 59, 59),
        }
    }
    yield "state_return", {
        "m1": {
            "file_|-/tmp/x_|-/tmp/x_|-managed": {
                "result": True,
                "comment": "File /tmp/x updated",
                "changes": {"diff": "--- \n+++ \n@@ -1 +1 @@\n-a\n+b\n"},
                "__run_num__": 0,
                "duration": 12.345,
                "start_time": "10:00:00.123456",
                "name": "/tmp/x",
                "__id__": "/tmp/x",
                "__sls__": "foo",
            }
        }
    }
    yield "pprint_widths", {
        "m1": {
            "numbers": list(range(40)),
            "strings": ["alpha " * 8, "beta " * 20, "gamma"],
            "text": "lorem ipsum dolor sit amet " * 6,
            "lines": "first line is here\nsecond line is a lot longer than the first one " * 2,
            "nested": {"deeper": {"deepest": ["x" * 30, "y" * 30, "z" * 30]}},
            "blob": b"\xff" * 40,
            "short_blob": b"\xff\xfe",
        }
    }
    yield "top_level_string", "Salt request timed out. The master is not responding."
    yield "top_level_list", [1, "a", {"b": 2}]
    yield "multiple_minions", {"m2": "b", "m1": "a"}


def raw_samples():
    yield "duplicate_keys", {
        "m1": raw_map([("a", 1), ("b", 2), ("a", 3)]),
    }
    yield "equal_numeric_keys", {
        "m1": raw_map([(1, "int"), (True, "bool"), (1.0, "float"), ("1", "str")]),
    }
    yield "bin_type", {
        "m1": msgpack.packb(
            {"b": b"\x00binary\xff", "s": b"utf8 ok", "u": "str"}, use_bin_type=True
        ),
    }


def pack_with_raw(outer):
    """Pack {id: <already packed bytes>} by splicing the inner msgpack in."""
    (key, inner), = outer.items()
    return bytes([0x81]) + msgpack.packb(key) + inner


def main():
    cases = []
    for name, data in samples():
        packed = salt.payload.dumps(data)
        cases.append({"name": name, "msgpack": base64.b64encode(packed).decode(), "renders": renders(packed)})
    for name, data in raw_samples():
        packed = pack_with_raw(data)
        cases.append({"name": name, "msgpack": base64.b64encode(packed).decode(), "renders": renders(packed)})
    json.dump({"salt": salt.version.__version__, "cases": cases}, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    import salt.version

    main()
