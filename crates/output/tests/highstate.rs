//! The highstate outputter against stock Salt 3008.3's own: every case is packed as a
//! minion's return, handed to the venv's Python (`salt.payload.loads`, then
//! `salt.output.try_printout(data, "highstate", opts)` exactly as `display_output` calls
//! it) and to `halite_output::render`, in every `state_output` mode, verbose on and off,
//! colour on and off, and with the other `state_*` options.
//!
//! Needs the stock venv (`$HALITE_SALT_VENV`, `.salt-venv` or `/opt/halite/...`): skipped
//! with a notice when it is absent locally, a failure under `CI=true`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use halite_output::{render, HighstateOptions, OutputOptions, Outputter};
use rmpv::Value as V;
use serde_json::{json, Value as J};

/// The Python side: one `try_printout` per case, as the `salt` CLI prints a return.
const HARNESS: &str = r#"
import base64, copy, json, logging, sys
import salt.config, salt.output, salt.payload
logging.disable(logging.CRITICAL)
out = []
for case in json.load(sys.stdin):
    data = salt.payload.loads(base64.b64decode(case["data"]))
    opts = copy.deepcopy(salt.config.DEFAULT_MASTER_OPTS)
    for key, value in case["opts"].items():
        if value == "__absent__":
            opts.pop(key, None)
        else:
            opts[key] = value
    opts["color"] = case["color"]
    opts["strip_colors"] = case["strip_colors"]
    if case["arg"] is not None:
        opts["arg"] = case["arg"]
    try:
        text = salt.output.try_printout(data, "highstate", opts, _retcode=case["retcode"])
        out.append({"text": text + "\n" if text else ""})
    except Exception as exc:
        out.append({"crash": repr(exc)})
json.dump(out, sys.stdout)
"#;

/// The venv's python, or `None` (with a notice) when it is absent and this is not CI.
fn venv_python() -> Option<PathBuf> {
    let venv = std::env::var_os("HALITE_SALT_VENV")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let local = halite_testkit::repo_root().join(".salt-venv");
            if local.exists() {
                local
            } else {
                PathBuf::from("/opt/halite/salt-venv-3008.3")
            }
        });
    let python = venv.join("bin").join("python");
    if python.is_file() {
        return Some(python);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "stock Salt venv missing at {} (CI=true): run scripts/setup-tests",
            venv.display()
        );
    }
    eprintln!(
        "SKIPPED: stock Salt venv missing at {}; the highstate comparison did not run",
        venv.display()
    );
    None
}

fn s(text: &str) -> V {
    V::from(text)
}

fn map(pairs: Vec<(&str, V)>) -> V {
    V::Map(pairs.into_iter().map(|(k, v)| (s(k), v)).collect())
}

/// A non-UTF-8 string, as a minion sends undecodable output.
fn bad_bytes() -> V {
    rmpv::decode::read_value(&mut &[0xa3, b'a', 0xff, b'b'][..]).unwrap_or(V::Nil)
}

/// Salt's datetime extension.
fn datetime(text: &str) -> V {
    V::Ext(78, text.as_bytes().to_vec())
}

/// One state's return under its `module_|-id_|-name_|-function` key.
#[allow(clippy::too_many_arguments)]
fn state(
    fun: &str,
    id: &str,
    name: &str,
    result: V,
    comment: &str,
    changes: V,
    run: i64,
    duration: V,
) -> (String, V) {
    let (module, function) = fun.split_once('.').unwrap_or((fun, ""));
    let key = format!("{module}_|-{id}_|-{name}_|-{function}");
    let ret = map(vec![
        ("name", s(name)),
        ("changes", changes),
        ("result", result),
        ("comment", s(comment)),
        ("__sls__", s("web")),
        ("__run_num__", V::from(run)),
        ("start_time", s("10:11:12.345678")),
        ("duration", duration),
        ("__id__", s(id)),
    ]);
    (key, ret)
}

fn ok(fun: &str, id: &str, name: &str, run: i64) -> (String, V) {
    state(
        fun,
        id,
        name,
        V::Boolean(true),
        "Already in the correct state",
        map(vec![]),
        run,
        V::F64(1.25),
    )
}

/// Replaces (or adds) a key of a state's return.
fn with(mut st: (String, V), key: &str, value: V) -> (String, V) {
    if let V::Map(pairs) = &mut st.1 {
        match pairs.iter_mut().find(|(k, _)| k.as_str() == Some(key)) {
            Some(slot) => slot.1 = value,
            None => pairs.push((s(key), value)),
        }
    }
    st
}

fn without(mut st: (String, V), key: &str) -> (String, V) {
    if let V::Map(pairs) = &mut st.1 {
        pairs.retain(|(k, _)| k.as_str() != Some(key));
    }
    st
}

fn host(states: Vec<(String, V)>) -> V {
    V::Map(states.into_iter().map(|(k, v)| (V::from(k), v)).collect())
}

fn minion(id: &str, ret: V) -> V {
    map(vec![(id, ret)])
}

fn diff_changes() -> V {
    map(vec![(
        "diff",
        s("--- \n+++ \n@@ -1,2 +1,2 @@\n-listen 80\n+listen 8080\n server_name caf\u{e9};\n"),
    )])
}

fn cmd_changes() -> V {
    map(vec![
        ("pid", V::from(4242)),
        ("retcode", V::from(0)),
        ("stdout", s("restarted\nok")),
        ("stderr", s("")),
    ])
}

/// A typical run: unchanged, changed (a diff, a command), test-mode and failed states.
fn typical() -> Vec<(String, V)> {
    vec![
        ok("file.directory", "/srv/www", "/srv/www", 0),
        state(
            "file.managed",
            "nginx-conf",
            "/etc/nginx/nginx.conf",
            V::Boolean(true),
            "File /etc/nginx/nginx.conf updated",
            diff_changes(),
            1,
            V::F64(12.833),
        ),
        state(
            "cmd.run",
            "reload",
            "systemctl reload nginx",
            V::Boolean(true),
            "Command \"systemctl reload nginx\" run",
            cmd_changes(),
            2,
            V::F64(30.5),
        ),
        state(
            "pkg.installed",
            "tools",
            "tools",
            V::Nil,
            "The following packages would be installed: htop",
            map(vec![(
                "htop",
                map(vec![("new", s("installed")), ("old", s(""))]),
            )]),
            3,
            V::F64(401.2),
        ),
        state(
            "service.running",
            "nginx",
            "nginx",
            V::Boolean(false),
            "Service nginx failed to start\nJob for nginx.service failed.\n",
            map(vec![]),
            4,
            V::F64(1000.75),
        ),
    ]
}

/// Every data shape the comparison runs, by name.
fn cases() -> Vec<(&'static str, V)> {
    let typical = typical();
    let nested_ret = minion(
        "m2",
        host(vec![
            ok("test.succeed_without_changes", "inner", "inner", 0),
            state(
                "test.succeed_with_changes",
                "inner2",
                "inner2",
                V::Boolean(true),
                "Success!",
                map(vec![(
                    "testing",
                    map(vec![
                        ("new", s("Something pretended to change")),
                        ("old", s("Unchanged")),
                    ]),
                )]),
                1,
                V::F64(0.5),
            ),
        ]),
    );
    let mut many = Vec::new();
    for i in 0..70 {
        many.push(ok(
            "test.nop",
            &format!("s{i:02}"),
            &format!("s{i:02}"),
            (i * 7) % 70,
        ));
    }
    vec![
        ("typical", minion("m1", host(typical.clone()))),
        (
            "all clean",
            minion(
                "m1",
                host(vec![ok("file.directory", "a", "a", 0), ok("pkg.installed", "b", "vim", 1)]),
            ),
        ),
        (
            "unicode",
            minion(
                "m\u{e9}",
                host(vec![state(
                    "file.managed",
                    "\u{1f600} id",
                    "/tmp/\u{1f600}/caf\u{e9}",
                    V::Boolean(true),
                    "\u{2603} done\n\u{65e5}\u{672c}",
                    map(vec![("\u{e9}t\u{e9}", s("\u{1f600}\nline"))]),
                    0,
                    V::F64(2.0),
                )]),
            ),
        ),
        (
            "durations",
            minion(
                "m1",
                host(vec![
                    with(ok("a.b", "int", "int", 0), "duration", V::from(3)),
                    with(ok("a.b", "str", "str", 1), "duration", s("12.5 ms")),
                    with(ok("a.b", "junk", "junk", 2), "duration", s("fast")),
                    with(ok("a.b", "under", "under", 3), "duration", s(" 1_000.5 ")),
                    without(ok("a.b", "none", "none", 4), "duration"),
                    with(ok("a.b", "bool", "bool", 5), "duration", V::Boolean(true)),
                    with(ok("a.b", "nan", "nan", 6), "duration", s("nan")),
                    with(
                        with(ok("a.b", "par", "par", 7), "__parallel__", V::Boolean(true)),
                        "duration",
                        V::F64(999.5),
                    ),
                    with(
                        with(ok("a.b", "par2", "par2", 8), "__parallel__", V::Boolean(true)),
                        "duration",
                        s("20 ms"),
                    ),
                ]),
            ),
        ),
        (
            "duration null raises",
            minion(
                "m1",
                host(vec![
                    ok("a.b", "first", "first", 0),
                    with(ok("a.b", "null", "null", 1), "duration", V::Nil),
                ]),
            ),
        ),
        (
            "run order",
            minion(
                "m1",
                host(vec![
                    ok("a.b", "third", "third", 7),
                    ok("a.b", "first", "first", -1),
                    with(ok("a.b", "second", "second", 0), "__run_num__", V::F64(2.5)),
                    without(ok("a.b", "unordered", "unordered", 0), "__run_num__"),
                ]),
            ),
        ),
        (
            "run order mixed types",
            minion(
                "m1",
                host(vec![
                    ok("a.b", "x", "x", 1),
                    with(ok("a.b", "y", "y", 0), "__run_num__", s("0")),
                ]),
            ),
        ),
        (
            "run order nan",
            minion(
                "m1",
                host(vec![
                    ok("a.b", "p", "p", 3),
                    with(ok("a.b", "q", "q", 0), "__run_num__", V::F64(f64::NAN)),
                    ok("a.b", "r", "r", 1),
                    ok("a.b", "t", "t", 2),
                ]),
            ),
        ),
        ("many states", minion("m1", host(many))),
        (
            "missing comment after a formatted state",
            minion(
                "m1",
                host(vec![
                    typical[1].clone(),
                    without(typical[2].clone(), "comment"),
                ]),
            ),
        ),
        (
            "missing changes",
            minion("m1", host(vec![without(ok("a.b", "c", "c", 0), "changes")])),
        ),
        (
            "no result",
            minion(
                "m1",
                host(vec![ok("a.b", "kept", "kept", 1), without(ok("a.b", "skip", "skip", 0), "result")]),
            ),
        ),
        (
            "render errors",
            minion(
                "m1",
                V::Array(vec![
                    s("Rendering SLS 'base:web' failed: Jinja variable 'foo' is undefined"),
                    s("Pillar failed to render with the following messages:\n\u{1b}[31mred\u{1b}[0m"),
                    map(vec![("nested", V::from(1))]),
                ]),
            ),
        ),
        (
            "string return",
            minion(
                "m1",
                s("No Top file or master_tops data matches found. Please see master log for details.\nsecond line"),
            ),
        ),
        ("int return", minion("m1", V::from(3))),
        ("bool return", minion("m1", V::Boolean(false))),
        ("empty dict", minion("m1", map(vec![]))),
        ("none return", minion("m1", V::Nil)),
        ("float return", minion("m1", V::F64(1.5))),
        ("no minions", map(vec![])),
        ("two minions", map(vec![("m1", host(typical.clone())), ("m2", host(vec![ok("a.b", "c", "c", 0)]))])),
        (
            "changes shapes",
            minion(
                "m1",
                host(vec![
                    with(ok("a.b", "list", "list", 0), "changes", V::Array(vec![s("x"), map(vec![("k", V::Array(vec![V::from(1), V::Nil]))])])),
                    with(ok("a.b", "str", "str", 1), "changes", s("changed it")),
                    with(ok("a.b", "deep", "deep", 2), "changes", map(vec![("a", map(vec![("b", map(vec![("c", V::Array(vec![V::from(1), V::F64(2.5), V::Boolean(true)]))]))])), ("z", bad_bytes())])),
                    with(ok("a.b", "int", "int", 3), "changes", V::from(5)),
                ]),
            ),
        ),
        (
            "nested highstate in changes",
            minion(
                "m1",
                host(vec![
                    with(
                        ok("salt.state", "deploy", "deploy", 0),
                        "changes",
                        map(vec![("out", s("highstate")), ("ret", nested_ret.clone())]),
                    ),
                    with(
                        ok("salt.state", "quiet", "quiet", 1),
                        "changes",
                        map(vec![("out", s("highstate")), ("ret", minion("m3", host(vec![ok("a.b", "q", "q", 0)])))]),
                    ),
                    with(
                        ok("salt.state", "bad", "bad", 2),
                        "changes",
                        map(vec![("out", s("highstate")), ("ret", map(vec![]))]),
                    ),
                ]),
            ),
        ),
        (
            "orchestration",
            minion(
                "master_master",
                host(vec![with(
                    with(ok("salt.state", "orch", "state.orch", 0), "name", s("state.orch")),
                    "changes",
                    map(vec![("return", nested_ret.clone())]),
                )]),
            ),
        ),
        (
            "orchestrator retcode",
            map(vec![
                ("orch_master", host(typical.clone())),
                ("retcode", V::from(1)),
            ]),
        ),
        (
            "lookup_jid envelope",
            minion(
                "m1",
                map(vec![
                    ("jid", s("20240101010101010101")),
                    ("fun", s("state.apply")),
                    ("return", map(vec![("data", minion("m1", host(typical.clone())))])),
                ]),
            ),
        ),
        (
            "return envelope",
            map(vec![("return", minion("m1", host(vec![ok("a.b", "c", "c", 0)])))]),
        ),
        (
            "warnings",
            minion(
                "m1",
                host(vec![
                    with(
                        ok("pkg.installed", "w", "w", 0),
                        "warnings",
                        V::Array(vec![
                            s("The 'foo' argument of pkg.installed is deprecated and will be removed in Salt 3009, use 'bar' instead. See https://docs.saltproject.io/en/latest/ref/states/all/salt.states.pkg.html for details."),
                            s("Second\twarning -- with em-dash and hy-phen-ated-words"),
                        ]),
                    ),
                    with(ok("a.b", "v", "v", 1), "warnings", s("chars")),
                ]),
            ),
        ),
        (
            "warning braces",
            minion(
                "m1",
                host(vec![with(
                    ok("a.b", "w", "w", 0),
                    "warnings",
                    V::Array(vec![s("value {6[duration]:>9.3f} and {2}")]),
                )]),
            ),
        ),
        (
            "warning bad format",
            minion(
                "m1",
                host(vec![with(ok("a.b", "w", "w", 0), "warnings", V::Array(vec![s("use {x}")]))]),
            ),
        ),
        (
            "warning not strings",
            minion(
                "m1",
                host(vec![with(ok("a.b", "w", "w", 0), "warnings", V::Array(vec![V::from(1)]))]),
            ),
        ),
        (
            "compressible",
            minion(
                "m1",
                host(vec![
                    with(state("cmd.run", "mix", "true", V::Boolean(true), "ran", cmd_changes(), 0, V::F64(8.5)), "start_time", s("19:10:10.9")),
                    with(state("cmd.run", "mix", "false", V::Boolean(false), "failed", map(vec![("retcode", V::from(1))]), 1, V::F64(8.6)), "start_time", s("19:10:10.97")),
                    with(state("cmd.run", "mix", "/bin/true", V::Boolean(true), "ran", map(vec![("retcode", V::from(0))]), 2, V::F64(7.6)), "start_time", s("19:10:10.95")),
                    with(state("cmd.run", "mix", "/bin/false", V::Boolean(false), "failed", map(vec![]), 3, V::from(9)), "start_time", s("19:10:10.99")),
                    ok("file.absent", "rm", "/a", 4),
                    ok("file.absent", "rm", "/b", 5),
                    ok("file.absent", "rm", "/c", 6),
                ]),
            ),
        ),
        (
            "compress raises",
            minion(
                "m1",
                host(vec![
                    ok("file.absent", "rm", "/a", 0),
                    with(ok("file.absent", "rm", "/b", 1), "duration", s("slow")),
                    without(ok("file.absent", "rm", "/c", 2), "duration"),
                ]),
            ),
        ),
        (
            "comment shapes",
            minion(
                "m1",
                host(vec![
                    with(ok("a.b", "list", "list", 0), "comment", V::Array(vec![s("one"), s("two")])),
                    with(ok("a.b", "int", "int", 1), "comment", V::from(7)),
                    with(ok("a.b", "none", "none", 2), "comment", V::Nil),
                    with(ok("a.b", "ws", "ws", 3), "comment", s("  padded\n\n  lines \t\n")),
                    with(ok("a.b", "bytes", "bytes", 4), "comment", bad_bytes()),
                ]),
            ),
        ),
        (
            "data key",
            minion(
                "m1",
                host(vec![
                    with(ok("a.b", "list", "list", 0), "data", V::Array(vec![s("x"), V::from(1)])),
                    with(ok("a.b", "dict", "dict", 1), "data", map(vec![("k", s("v")), ("n", V::Nil)])),
                    with(ok("a.b", "scalar", "scalar", 2), "data", V::F64(0.5)),
                ]),
            ),
        ),
        (
            "odd results",
            minion(
                "m1",
                host(vec![
                    with(ok("a.b", "one", "one", 0), "result", V::from(1)),
                    with(ok("a.b", "zero", "zero", 1), "result", V::from(0)),
                    with(ok("a.b", "yes", "yes", 2), "result", s("yes")),
                    with(
                        with(ok("a.b", "warn", "warn", 3), "result", s("warnings")),
                        "warnings",
                        V::Array(vec![s("careful")]),
                    ),
                ]),
            ),
        ),
        (
            "unhashable result",
            minion("m1", host(vec![with(ok("a.b", "l", "l", 0), "result", V::Array(vec![]))])),
        ),
        (
            "same id and name",
            minion("m1", host(vec![state("pkg.installed", "vim", "vim", V::Boolean(true), "ok", map(vec![("vim", s("9.0"))]), 0, V::F64(5.0))])),
        ),
        (
            "short state key",
            minion("m1", host(vec![(
                "justonepart".to_owned(),
                map(vec![("result", V::Boolean(true)), ("changes", map(vec![])), ("comment", s("x")), ("__run_num__", V::from(0))]),
            )])),
        ),
        (
            "escape in host",
            minion("bad\u{1b}[2Jhost", host(vec![ok("a.b", "c", "c", 0)])),
        ),
        (
            "datetime start",
            minion(
                "m1",
                host(vec![with(ok("a.b", "c", "c", 0), "start_time", datetime("20240102T03:04:05.600000"))]),
            ),
        ),
        (
            "pct ratios",
            minion(
                "m1",
                host(vec![
                    ok("a.b", "a", "a", 0),
                    ok("a.b", "b", "b", 1),
                    with(ok("a.b", "c", "c", 2), "result", V::Boolean(false)),
                ]),
            ),
        ),
    ]
}

/// One set of options: overrides of `DEFAULT_MASTER_OPTS` (`"__absent__"` removes a
/// key), colour, `strip_colors`, the retcode and `__opts__["arg"]`.
#[derive(Clone, Debug)]
struct Variant {
    opts: serde_json::Map<String, J>,
    color: bool,
    strip_colors: bool,
    retcode: i64,
    arg: Option<J>,
}

fn variant(opts: J) -> Variant {
    Variant {
        opts: opts.as_object().cloned().unwrap_or_default(),
        color: false,
        strip_colors: true,
        retcode: 0,
        arg: None,
    }
}

fn variants() -> Vec<Variant> {
    let mut out = Vec::new();
    let modes = [
        "full",
        "terse",
        "mixed",
        "changes",
        "full_id",
        "terse_id",
        "mixed_id",
        "changes_id",
        "filter",
        "Changes",
        "bogus",
    ];
    for mode in modes {
        for verbose in [true, false] {
            for color in [false, true] {
                let mut v = variant(json!({"state_output": mode, "state_verbose": verbose}));
                v.color = color;
                out.push(v);
            }
        }
    }
    let extras = [
        json!({"state_output_profile": false}),
        json!({"state_output_profile": false, "state_output": "terse"}),
        json!({"state_output_diff": true}),
        json!({"state_output_pct": true}),
        json!({"state_output_pct": true, "state_verbose": false}),
        json!({"state_tabular": true, "state_output": "terse"}),
        json!({"state_tabular": true, "state_output": "mixed", "state_output_profile": false}),
        json!({"state_tabular": "{0}{2}.{3} {4:>8} {1!r}{5} [{6[duration]!s}] {6[__run_num__]:03d}", "state_output": "terse"}),
        json!({"state_tabular": "", "state_output": "terse"}),
        json!({"state_compress_ids": true}),
        json!({"state_compress_ids": true, "state_output": "terse_id"}),
        json!({"state_output": "filter", "state_output_exclude": "True,", "state_output_terse": ["None", "False"]}),
        json!({"state_output": "filter_id", "state_output_terse": "True,None"}),
        json!({"state_output": "filter", "state_output_terse": true}),
        json!({"state_verbose": "__absent__"}),
        json!({"state_output": "__absent__", "state_output_profile": "__absent__"}),
        json!({"state_output": null}),
        json!({"state_output": 3}),
        json!({"state_verbose": "False"}),
    ];
    for opts in extras {
        out.push(variant(opts));
    }
    let mut raw = variant(json!({}));
    raw.color = true;
    raw.strip_colors = false;
    out.push(raw);
    let mut failed = variant(json!({}));
    failed.retcode = 2;
    failed.color = true;
    out.push(failed);
    let mut filtered = variant(json!({"state_output": "filter", "state_output_exclude": "None,"}));
    filtered.arg = Some(json!(["web", {"__kwarg__": true, "exclude": "False,", "terse": "True"}]));
    out.push(filtered);
    out
}

/// `format()` specs and values checked through a warning spliced into the terse
/// template (`{6[v]:SPEC}`), the way Salt formats it.
fn format_matrix() -> Vec<(String, V)> {
    let specs = [
        "",
        ">9",
        "<9",
        "^9",
        "*^9",
        "09",
        "+",
        " ",
        "-",
        "z",
        "#",
        ",",
        "_",
        "010,",
        "09,",
        ".2f",
        ".0f",
        "#.0f",
        "+.3e",
        "E",
        ".3g",
        "#g",
        "g",
        ".10g",
        "%",
        ".1%",
        ".3",
        "#.3",
        "x",
        "#X",
        "b",
        "#o",
        "_b",
        "c",
        "d",
        "n",
        "=+8",
        "z.1f",
        "s",
        ".2",
        "10.3s",
        ",d",
        "_x",
        "05.1f",
        "-^+11,.2f",
    ];
    let values = [
        V::from(0),
        V::from(1234567),
        V::from(-42),
        V::F64(1234.5678),
        V::F64(-0.0001),
        V::F64(1e16),
        V::F64(2.5e-5),
        V::F64(f64::INFINITY),
        V::F64(f64::NAN),
        V::Boolean(true),
        s("text"),
        V::Nil,
    ];
    let mut out = Vec::new();
    for spec in specs {
        for value in &values {
            let st = with(
                with(ok("a.b", "f", "f", 0), "v", value.clone()),
                "warnings",
                V::Array(vec![s(&format!("<{{6[v]:{spec}}}>"))]),
            );
            out.push((
                format!("format {spec:?} of {value}"),
                minion("m1", host(vec![st])),
            ));
        }
    }
    out
}

fn to_rmpv(j: &J) -> V {
    match j {
        J::Null => V::Nil,
        J::Bool(b) => V::Boolean(*b),
        J::Number(n) => n
            .as_i64()
            .map(V::from)
            .unwrap_or_else(|| V::F64(n.as_f64().unwrap_or(0.0))),
        J::String(t) => s(t),
        J::Array(items) => V::Array(items.iter().map(to_rmpv).collect()),
        J::Object(o) => V::Map(o.iter().map(|(k, v)| (s(k), to_rmpv(v))).collect()),
    }
}

/// The options Halite's CLI would build for this variant.
fn halite_options(v: &Variant) -> OutputOptions {
    let mut config: Vec<(String, V)> = vec![
        ("state_verbose".into(), V::Boolean(true)),
        ("state_output".into(), s("full")),
        ("state_output_diff".into(), V::Boolean(false)),
        ("state_output_profile".into(), V::Boolean(true)),
    ];
    for (key, value) in &v.opts {
        config.retain(|(k, _)| k != key);
        if value.as_str() != Some("__absent__") {
            config.push((key.clone(), to_rmpv(value)));
        }
    }
    let mut highstate = HighstateOptions::from_config(|name| {
        config.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    });
    if let Some(arg) = &v.arg {
        highstate = highstate.with_job_args(&to_rmpv(arg));
    }
    OutputOptions {
        color: v.color,
        strip_colors: v.strip_colors,
        retcode: v.retcode,
        highstate,
        ..OutputOptions::default()
    }
}

/// Runs the harness over `(data, variant)` pairs; Python's text or crash for each.
fn stock(python: &Path, jobs: &[(&V, &Variant)]) -> Vec<J> {
    let input: Vec<J> = jobs
        .iter()
        .map(|(data, v)| {
            let mut packed = Vec::new();
            rmpv::encode::write_value(&mut packed, data).expect("msgpack encodes");
            json!({
                "data": base64::engine::general_purpose::STANDARD.encode(&packed),
                "opts": v.opts,
                "color": v.color,
                "strip_colors": v.strip_colors,
                "retcode": v.retcode,
                "arg": v.arg,
            })
        })
        .collect();
    let mut child = Command::new(python)
        .args(["-c", HARNESS])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python starts");
    let body = serde_json::to_vec(&input).expect("json");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(&body));
    let output = child.wait_with_output().expect("python runs");
    writer.join().expect("writer").expect("stdin written");
    assert!(output.status.success(), "the Python harness failed");
    let results: Vec<J> = serde_json::from_slice(&output.stdout).expect("harness json");
    assert_eq!(results.len(), jobs.len());
    results
}

/// Compares every job; returns (compared, crashes in Salt).
fn compare(python: &Path, jobs: &[(String, &V, &Variant)]) -> (usize, usize) {
    let pairs: Vec<(&V, &Variant)> = jobs.iter().map(|(_, d, v)| (*d, *v)).collect();
    let results = stock(python, &pairs);
    let mut failures = Vec::new();
    let mut crashes = 0;
    for ((name, data, v), want) in jobs.iter().zip(&results) {
        let got = render(Outputter::Highstate, data, &halite_options(v));
        match want.get("text").and_then(J::as_str) {
            Some(want) => {
                if got != want {
                    failures.push(format!(
                        "{name} / {v:?}\n--- salt\n{want}\n--- halite\n{got}\n--- salt {want:?}\n--- halite {got:?}"
                    ));
                }
            }
            None => {
                // Salt dies with a traceback; Halite prints the data with nested.
                crashes += 1;
                assert!(!got.is_empty(), "{name}: nothing printed");
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} renders differ from stock Salt:\n\n{}",
        failures.len(),
        jobs.len(),
        failures
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
    (jobs.len(), crashes)
}

#[test]
fn every_case_in_every_mode_prints_what_stock_salt_prints() {
    let Some(python) = venv_python() else {
        return;
    };
    let cases = cases();
    let variants = variants();
    let mut jobs = Vec::new();
    for (name, data) in &cases {
        for v in &variants {
            jobs.push((name.to_string(), data, v));
        }
    }
    let (compared, crashes) = compare(&python, &jobs);
    println!("compared {compared} renders with stock Salt ({crashes} where Salt crashes)");
    assert!(compared > 2000);
    assert!(
        crashes < compared / 20,
        "{crashes} crashes: the cases are too exotic"
    );
}

#[test]
fn python_format_specs_in_warnings_format_as_in_salt() {
    let Some(python) = venv_python() else {
        return;
    };
    let matrix = format_matrix();
    let terse = variant(json!({"state_output": "terse"}));
    let jobs: Vec<(String, &V, &Variant)> = matrix
        .iter()
        .map(|(name, data)| (name.clone(), data, &terse))
        .collect();
    let (compared, crashes) = compare(&python, &jobs);
    println!("compared {compared} format specs with stock Salt ({crashes} where Salt crashes)");
    assert!(compared > 500);
}

#[test]
fn hostile_returns_never_panic() {
    let mut deep = s("leaf");
    for _ in 0..400 {
        deep = map(vec![(
            "x_|-y_|-z_|-w",
            map(vec![
                ("result", V::Boolean(true)),
                ("comment", s("c")),
                ("__run_num__", V::from(0)),
                ("name", s("state.sls")),
                ("changes", minion("m", deep)),
            ]),
        )]);
    }
    let hostile = [
        minion("m", deep),
        minion("m", V::Ext(78, b"\xff".to_vec())),
        map(vec![("m", map(vec![("x", V::Array(vec![bad_bytes()]))]))]),
        V::Map(vec![(V::from(1), V::Nil)]),
        V::Array(vec![]),
        bad_bytes(),
    ];
    for data in hostile {
        for v in variants() {
            let _ = render(Outputter::Highstate, &data, &halite_options(&v));
        }
    }
}
