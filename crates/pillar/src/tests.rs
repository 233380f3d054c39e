//! The service end to end: misbehaving workers (scripts standing in for the pillar
//! worker), and stock Salt's pillar code compiling real trees.

use super::*;
use halite_proto::value::{map, s};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc;

/// A reply later than this fails the test (a worker import on a loaded machine is slow).
const REPLY_WAIT: Duration = Duration::from_secs(120);

fn venv_python() -> PathBuf {
    halite_testkit::salt_venv().join("bin").join("python3")
}

/// The answer to `load`, waiting for the pool when it is pending.
fn ask(p: &Pillars, id: &str, load: Value) -> Value {
    match p.answer(id, load) {
        Answer::Ready(v) => v,
        Answer::Pending(pending) => {
            let (tx, rx) = mpsc::channel();
            pending.then(move |v| {
                let _ = tx.send(v);
            });
            rx.recv_timeout(REPLY_WAIT).expect("a pillar reply")
        }
    }
}

/// Whether the answer is given without a worker.
fn is_ready(p: &Pillars, id: &str, load: Value) -> bool {
    matches!(p.answer(id, load), Answer::Ready(_))
}

fn load_of(id: &str, grains: Value) -> Value {
    map([
        ("id", s(id)),
        ("grains", grains),
        ("saltenv", Value::Nil),
        ("pillarenv", Value::Nil),
        ("pillar_override", Value::Map(vec![])),
        ("extra_minion_data", Value::Map(vec![])),
        ("ver", s("2")),
        ("cmd", s("_pillar")),
    ])
}

fn errors_of(v: &Value) -> Vec<String> {
    match value::get(v, "_errors") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(value::str_of)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// A master config in `dir` whose pillar root is `dir/pillar` (with a top file), plus
/// `extra` YAML.
fn master_config(dir: &Path, extra: &str) -> MasterConfig {
    let d = dir.display();
    std::fs::create_dir_all(dir.join("pillar")).unwrap();
    let conf = dir.join("master");
    std::fs::write(
        &conf,
        format!(
            "root_dir: {d}\npki_dir: {d}/pki\ncachedir: {d}/cache\nsock_dir: {d}/sock\n\
             log_file: {d}/log\npillar_roots:\n  base:\n    - {d}/pillar\n\
             halite_pillar_workers: 1\n{extra}\n"
        ),
    )
    .unwrap();
    MasterConfig::load_file(&conf).unwrap()
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join("pillar").join(name), text).unwrap();
}

// ---- Misbehaving workers -------------------------------------------------------------

/// A worker script that answers `{"ok": True, "pid": ...}` once `marker` exists, and
/// misbehaves (`mode`) on the request that creates it.
const FAKE_WORKER: &str = r#"
import os, sys, time, msgpack
inp, out = take_frame_streams()
write_frame(out, {"ready": True, "pid": os.getpid()})
mode, marker = sys.argv[1], sys.argv[2]
while True:
    req = read_frame(inp)
    if req is None:
        break
    if os.path.exists(marker):
        write_frame(out, {"pillar": msgpack.packb({"ok": True, "pid": os.getpid()}), "base": None})
        continue
    open(marker, "w").close()
    if mode == "die":
        os._exit(3)
    if mode == "hang":
        time.sleep(300)
    if mode == "garbage":
        out.write(b"\x00\x00\x00\x02\xc1\xc1")
        out.flush()
        time.sleep(300)
    if mode == "shape":
        write_frame(out, {"nope": 1})
"#;

/// A service running [`FAKE_WORKER`] in `mode`, one worker, `timeout`.
fn fake_service(dir: &Path, mode: &str, timeout: Duration) -> Pillars {
    let cfg = master_config(dir, "");
    write(dir, "top.sls", "base: {}\n");
    let opts = Options::from_master(&cfg).unwrap();
    let spec = Spec {
        python: Some(venv_python()),
        script: format!("{}\n{FAKE_WORKER}", halite_pyworker::FRAMING_PY),
        args: vec![mode.into(), dir.join("marker").into_os_string()],
        workers: 1,
        timeout,
    };
    Pillars::with_spec(opts, spec).unwrap()
}

/// The first request meets the misbehaviour and gets an `_errors` pillar naming it; the
/// worker is replaced and the next request is answered by a new process.
fn first_fails_then_a_new_worker_answers(mode: &str, timeout: Duration, expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let p = fake_service(dir.path(), mode, timeout);
    let first = ask(&p, "m1", load_of("m1", Value::Map(vec![])));
    let errors = errors_of(&first);
    assert_eq!(errors.len(), 1, "{first:?}");
    assert!(
        errors[0].starts_with("Failed to compile pillar on the master: ")
            && errors[0].contains(expect),
        "{mode}: {errors:?}"
    );
    let second = ask(&p, "m1", load_of("m1", Value::Map(vec![])));
    assert_eq!(
        value::get(&second, "ok"),
        Some(&Value::from(true)),
        "{second:?}"
    );
    let stats = p.stats().unwrap();
    assert_eq!(stats.lost.load(Ordering::Relaxed), 1);
    assert_eq!(stats.started.load(Ordering::Relaxed), 2);
}

#[test]
fn a_worker_that_dies_is_replaced_and_the_minion_gets_an_error() {
    first_fails_then_a_new_worker_answers("die", Duration::from_secs(60), "exited unexpectedly");
}

#[test]
fn a_hung_worker_is_killed_after_the_timeout_and_replaced() {
    first_fails_then_a_new_worker_answers(
        "hang",
        Duration::from_secs(1),
        "took longer than 1 s (halite_pillar_timeout) and was stopped",
    );
}

#[test]
fn garbage_frames_from_a_worker_are_an_error_not_a_panic() {
    first_fails_then_a_new_worker_answers("garbage", Duration::from_secs(60), "bad reply");
}

#[test]
fn a_reply_without_a_pillar_is_an_error() {
    first_fails_then_a_new_worker_answers("shape", Duration::from_secs(60), "no pillar");
}

#[test]
fn no_salt_python_gives_an_errors_pillar_naming_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = master_config(dir.path(), "halite_salt_python: /nonexistent/bin/python3");
    write(dir.path(), "top.sls", "base: {}\n");
    let p = Pillars::from_master(&cfg).unwrap();
    let reply = ask(&p, "m1", load_of("m1", Value::Map(vec![])));
    let errors = errors_of(&reply);
    assert_eq!(errors.len(), 1, "{reply:?}");
    assert!(
        errors[0].contains("Salt's Python was not found"),
        "{errors:?}"
    );
    assert!(errors[0].contains("/nonexistent/bin/python3"), "{errors:?}");
    assert!(errors[0].contains("halite_salt_python"), "{errors:?}");
}

// ---- No pillar configured: no Python ---------------------------------------------------

#[test]
fn without_pillar_the_answer_is_the_override_and_no_python_runs() {
    let dir = tempfile::tempdir().unwrap();
    // A Python that does not exist: any attempt to use it would answer `_errors`.
    let cfg = master_config(dir.path(), "halite_salt_python: /nonexistent/bin/python3");
    let p = Pillars::from_master(&cfg).unwrap();
    assert!(p.stats().is_none(), "no pool without pillar");
    let load = load_of("m1", Value::Map(vec![]));
    assert_eq!(ask(&p, "m1", load), Value::Map(vec![]));
    let mut load = load_of("m1", Value::Map(vec![]));
    let over = map([("a", map([("b", Value::from(1))]))]);
    value::set(&mut load, "pillar_override", over.clone());
    assert_eq!(ask(&p, "m1", load), over);
    assert!(p.stats().is_none());
}

#[test]
fn a_load_without_grains_is_answered_false_as_in_stock() {
    let dir = tempfile::tempdir().unwrap();
    let p = fake_service(dir.path(), "die", Duration::from_secs(60));
    assert_eq!(ask(&p, "m1", map([("id", s("m1"))])), Value::from(false));
}

#[test]
fn a_top_file_added_later_starts_the_workers() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = master_config(
        dir.path(),
        &format!("halite_salt_python: {}", venv_python().display()),
    );
    let p = Pillars::from_master(&cfg).unwrap();
    assert!(is_ready(&p, "m1", load_of("m1", Value::Map(vec![]))));
    write(dir.path(), "top.sls", "base:\n  '*':\n    - common\n");
    write(dir.path(), "common.sls", "late: true\n");
    std::thread::sleep(RECHECK + Duration::from_millis(100));
    let pillar = ask(&p, "m1", load_of("m1", Value::Map(vec![])));
    assert_eq!(
        value::get(&pillar, "late"),
        Some(&Value::from(true)),
        "{pillar:?}"
    );
}

// ---- Stock Salt's pillar ----------------------------------------------------------------

fn stock_tree(dir: &Path) {
    write(
        dir,
        "top.sls",
        "base:\n  'm1':\n    - m1\n  'm2':\n    - m2\n  'bad':\n    - broken\n  '*':\n    - common\n",
    );
    write(
        dir,
        "common.sls",
        "who: {{ grains['id'] }}\nos: {{ grains.get('os') }}\n\
         {% set d = {} %}{% do d.update({'k': 'v'}) %}made: {{ d | json }}\n",
    );
    write(dir, "m1.sls", "secret: one\nnested:\n  a: 1\n");
    write(dir, "m2.sls", "secret: two\n");
    write(dir, "broken.sls", "x: {{ foo.bar( }}\n");
}

/// What stock's `AESFuncs._sync_pillar` compiles for `load` with this master config,
/// as JSON.
fn stock_pillar(conf: &Path, load: &Value) -> String {
    stock_pillars(conf, std::slice::from_ref(load)).remove(0)
}

/// What a stock master compiles for each of `loads` in turn, as JSON: one process (as
/// one stock master worker answers request after request, its loaded modules kept in
/// `sys.modules`), each request starting from the master's options as loaded.
fn stock_pillars(conf: &Path, loads: &[Value]) -> Vec<String> {
    let script = format!(
        "import json, sys\nimport salt.config, salt.pillar, salt.payload\n\
         for load in salt.payload.loads(sys.stdin.buffer.read()):\n\
         \x20   opts = salt.config.master_config({conf:?})\n\
         \x20   load['grains']['id'] = load['id']\n\
         \x20   p = salt.pillar.get_pillar(opts, load['grains'], load['id'], load.get('saltenv', load.get('env')), \
         ext=load.get('ext'), pillar_override=load.get('pillar_override', {{}}), pillarenv=load.get('pillarenv'), \
         extra_minion_data=load.get('extra_minion_data'), clean_cache=load.get('clean_cache'))\n\
         \x20   print(json.dumps(p.compile_pillar(), sort_keys=True))\n",
        conf = conf.display().to_string()
    );
    let out = halite_testkit::run_command_with_input(
        {
            let mut c = std::process::Command::new(venv_python());
            c.args(["-c", &script]);
            c
        },
        &value::encode(&Value::Array(loads.to_vec())),
        REPLY_WAIT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(printed.len(), loads.len(), "{printed:?}");
    printed
}

/// Ours, as the same JSON text (printed by Python's `json.dumps`, as stock's is).
fn as_json(v: &Value) -> String {
    as_jsons(std::slice::from_ref(v)).remove(0)
}

/// [`as_json`] of each of `vs`, in one Python process.
fn as_jsons(vs: &[Value]) -> Vec<String> {
    let script = "import json, sys, salt.payload\n\
                  for v in salt.payload.loads(sys.stdin.buffer.read()):\n\
                  \x20   print(json.dumps(v, sort_keys=True))\n";
    let out = halite_testkit::run_command_with_input(
        {
            let mut c = std::process::Command::new(venv_python());
            c.args(["-c", script]);
            c
        },
        &value::encode(&Value::Array(vs.to_vec())),
        REPLY_WAIT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn stock_service(dir: &Path, extra: &str) -> (Pillars, PathBuf) {
    let cfg = master_config(
        dir,
        &format!("halite_salt_python: {}\n{extra}", venv_python().display()),
    );
    stock_tree(dir);
    (Pillars::from_master(&cfg).unwrap(), dir.join("master"))
}

#[test]
fn each_minion_gets_its_own_pillar_exactly_as_stock_compiles_it() {
    let dir = tempfile::tempdir().unwrap();
    let (p, conf) = stock_service(dir.path(), "");
    for (id, os) in [("m1", "Debian"), ("m2", "Fedora"), ("m3", "Arch")] {
        let load = load_of(id, map([("os", s(os))]));
        let ours = ask(&p, id, load.clone());
        assert_eq!(value::get_str(&ours, "who"), Some(id), "{ours:?}");
        assert_eq!(value::get_str(&ours, "os"), Some(os));
        assert_eq!(as_json(&ours), stock_pillar(&conf, &load), "{id}");
    }
    let m2 = ask(&p, "m2", load_of("m2", Value::Map(vec![])));
    assert_eq!(value::get_str(&m2, "secret"), Some("two"));
    assert!(
        value::get(&m2, "nested").is_none(),
        "m2 never sees m1's pillar"
    );
}

#[test]
fn a_render_error_is_reported_as_stock_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let (p, conf) = stock_service(dir.path(), "");
    let load = load_of("bad", Value::Map(vec![]));
    let ours = ask(&p, "bad", load.clone());
    let errors = errors_of(&ours);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("Rendering SLS 'broken' failed")),
        "{errors:?}"
    );
    assert_eq!(as_json(&ours), stock_pillar(&conf, &load));
}

#[test]
fn the_override_is_merged_as_stock_merges_it() {
    let dir = tempfile::tempdir().unwrap();
    let (p, conf) = stock_service(dir.path(), "");
    let mut load = load_of("m1", Value::Map(vec![]));
    value::set(
        &mut load,
        "pillar_override",
        map([
            ("secret", s("over")),
            ("nested", map([("b", Value::from(2))])),
        ]),
    );
    let ours = ask(&p, "m1", load.clone());
    assert_eq!(value::get_str(&ours, "secret"), Some("over"));
    assert_eq!(as_json(&ours), stock_pillar(&conf, &load));
}

#[test]
fn with_pillar_cache_a_pillar_is_served_from_the_cache_until_clean_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = stock_service(dir.path(), "pillar_cache: true\npillar_cache_ttl: 3600");
    let load = load_of("m1", Value::Map(vec![]));
    let first = ask(&p, "m1", load.clone());
    assert_eq!(value::get_str(&first, "secret"), Some("one"));
    write(dir.path(), "m1.sls", "secret: changed\n");
    // A hit without an override: answered at once, the stale pillar (stock's semantics).
    match p.answer("m1", load.clone()) {
        Answer::Ready(v) => assert_eq!(v, first),
        Answer::Pending(_) => panic!("a cache hit needs no worker"),
    }
    // A hit with an override: merged by Salt, into the cached pillar.
    let mut with_override = load.clone();
    value::set(
        &mut with_override,
        "pillar_override",
        map([("extra", s("x"))]),
    );
    let merged = ask(&p, "m1", with_override);
    assert_eq!(value::get_str(&merged, "secret"), Some("one"));
    assert_eq!(value::get_str(&merged, "extra"), Some("x"));
    // The override was not cached.
    assert!(value::get(&ask(&p, "m1", load.clone()), "extra").is_none());
    // saltutil.refresh_pillar: clean_cache drops the entry and compiles afresh.
    let mut clean = load.clone();
    value::set(&mut clean, "clean_cache", Value::from(true));
    let fresh = ask(&p, "m1", clean);
    assert_eq!(value::get_str(&fresh, "secret"), Some("changed"));
    // Other minions' entries are their own.
    let m2 = ask(&p, "m2", load_of("m2", Value::Map(vec![])));
    assert_eq!(value::get_str(&m2, "secret"), Some("two"));
}

#[test]
fn without_pillar_cache_every_request_is_compiled_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = stock_service(dir.path(), "");
    let load = load_of("m1", Value::Map(vec![]));
    assert_eq!(
        value::get_str(&ask(&p, "m1", load.clone()), "secret"),
        Some("one")
    );
    write(dir.path(), "m1.sls", "secret: changed\n");
    assert!(
        !is_ready(&p, "m1", load.clone()),
        "no cache: a worker compiles"
    );
    assert_eq!(
        value::get_str(&ask(&p, "m1", load), "secret"),
        Some("changed")
    );
}

// ---- Reuse between requests (pillar.py) ----------------------------------------------------

/// A custom execution module that records its calls in `__context__` and reports what it
/// sees of the request: a leak of `__context__`, grains, opts or pillar between requests
/// shows in its answer.
const CTXPROBE: &str = r#"
def seen(who):
    __context__.setdefault("seen", []).append(who)
    return {
        "seen": list(__context__["seen"]),
        "grains_id": __grains__.get("id"),
        "grains_os": __grains__.get("os"),
        "opts_id": __opts__.get("id"),
        "opts_grains_os": __opts__.get("grains", {}).get("os"),
        "pillar": sorted(__pillar__),
    }


def fail():
    raise RuntimeError("ctxprobe was asked to fail")
"#;

/// An ext_pillar doing the same for the ext_pillar loader.
const PROBE_EXT: &str = r#"
def ext_pillar(minion_id, pillar, *args, **kwargs):
    __context__.setdefault("calls", []).append(minion_id)
    return {
        "ext": {
            "calls": list(__context__["calls"]),
            "grains_os": __grains__.get("os"),
            "opts_id": __opts__.get("id"),
            "pillar": sorted(pillar),
        }
    }
"#;

/// An ext_pillar that raises.
const BOOM_EXT: &str = r#"
def ext_pillar(minion_id, pillar, *args, **kwargs):
    raise ValueError("boom for " + minion_id)
"#;

const REUSE_TOP: &str =
    "base:\n  'os:Debian':\n    - match: grain\n    - debian\n  'm1':\n    - members\n  \
                         'failing':\n    - failing\n  '*':\n    - common\n";

/// Salt's own matchers (grain, compound), renderers and execution modules (`grains`,
/// `pillar` memoized, `config` not) reading the request, beside the probe.
const REUSE_COMMON: &str = "who: {{ grains['id'] }}\nos: {{ grains.get('os') }}\n\
                            via_grains_get: {{ salt['grains.get']('os') }}\n\
                            via_config_get: {{ salt['config.get']('os') }}\n\
                            via_pillar_get: {{ salt['pillar.get']('debian', False) }}\n\
                            probe: {{ salt['ctxprobe.seen'](grains['id']) | json }}\n\
                            cores: {{ salt['config.get']('solr.cores') | json }}\n";

/// Writes `text` to `dir/path`, creating its parents.
fn put(dir: &Path, path: &str, text: &str) {
    let path = dir.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Sets `path`'s mtime ten seconds back (if it exists): the worker memoizes the listing
/// of a module directory only when it has not changed in the last two seconds.
fn age(path: &Path) {
    if let Ok(f) = std::fs::File::open(path) {
        f.set_modified(std::time::SystemTime::now() - Duration::from_secs(10))
            .unwrap();
    }
}

/// A service over the reuse tree (custom modules under `extmods`), one worker, `extra`
/// master config.
fn reuse_service(dir: &Path, extra: &str) -> (Pillars, PathBuf) {
    let d = dir.display();
    let cfg = master_config(
        dir,
        &format!(
            "halite_salt_python: {}\nextension_modules: {d}/extmods\n{extra}",
            venv_python().display()
        ),
    );
    write(dir, "top.sls", REUSE_TOP);
    write(dir, "debian.sls", "debian: true\n");
    write(
        dir,
        "members.sls",
        "members: {{ salt['ctxprobe.seen'](grains['id']) | json }}\n\
         {% do salt['config.get']('solr.cores').append(grains['id']) %}\n",
    );
    write(dir, "failing.sls", "x: {{ salt['ctxprobe.fail']() }}\n");
    write(dir, "common.sls", REUSE_COMMON);
    put(dir, "extmods/modules/ctxprobe.py", CTXPROBE);
    put(dir, "extmods/pillar/probe.py", PROBE_EXT);
    put(dir, "extmods/pillar/boom.py", BOOM_EXT);
    (Pillars::from_master(&cfg).unwrap(), dir.join("master"))
}

/// The value at `path` in nested maps.
fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, key| value::get(v, key))
}

fn strs(v: Option<&Value>) -> Vec<&str> {
    match v {
        Some(Value::Array(items)) => items.iter().filter_map(value::str_of).collect(),
        _ => Vec::new(),
    }
}

fn os_load(id: &str, os: &str) -> Value {
    load_of(id, map([("os", s(os))]))
}

/// Asks `p` for each `(minion, os grain)` in turn: the loads sent and the pillars answered.
fn ask_in_turn(p: &Pillars, asked: &[(&str, &str)]) -> (Vec<Value>, Vec<Value>) {
    let loads: Vec<Value> = asked.iter().map(|(id, os)| os_load(id, os)).collect();
    let ours = asked
        .iter()
        .zip(&loads)
        .map(|((id, _), load)| ask(p, id, load.clone()))
        .collect();
    (loads, ours)
}

#[test]
fn interleaved_minions_see_only_their_own_grains_context_and_pillar() {
    let dir = tempfile::tempdir().unwrap();
    let (p, conf) = reuse_service(dir.path(), "ext_pillar:\n  - probe: {}\n");
    let asked = [
        ("m1", "Debian"),
        ("m2", "Fedora"),
        ("m1", "Arch"),
        ("m2", "Debian"),
    ];
    let (loads, ours) = ask_in_turn(&p, &asked);
    for ((id, os), pillar) in asked.iter().zip(&ours) {
        let context = format!("{id} with os {os}: {pillar:?}");
        assert!(errors_of(pillar).is_empty(), "{context}");
        assert_eq!(value::get_str(pillar, "who"), Some(*id), "{context}");
        for key in ["os", "via_grains_get", "via_config_get"] {
            assert_eq!(value::get_str(pillar, key), Some(*os), "{key}: {context}");
        }
        // The grain matcher saw this request's grains.
        assert_eq!(
            value::get(pillar, "debian").is_some(),
            *os == "Debian",
            "{context}"
        );
        // A fresh `__context__` for every request: m1's sls call the probe twice
        // (members, common), m2's once; nothing from the requests before.
        let calls = if *id == "m1" { vec![*id; 2] } else { vec![*id] };
        assert_eq!(strs(at(pillar, &["probe", "seen"])), calls, "{context}");
        assert_eq!(
            value::get_str(at(pillar, &["probe"]).unwrap(), "grains_os"),
            Some(*os)
        );
        assert_eq!(
            value::get_str(at(pillar, &["probe"]).unwrap(), "opts_grains_os"),
            Some(*os)
        );
        assert_eq!(strs(at(pillar, &["ext", "calls"])), [*id], "{context}");
        // m1's template appends to a list `config.get` hands out from the module's
        // defaults; stock executes the module again for every request, so m2 never sees it.
        let cores: &[&str] = if *id == "m1" { &["m1"] } else { &[] };
        assert_eq!(strs(value::get(pillar, "cores")), cores, "{context}");
        assert_eq!(
            value::get_str(at(pillar, &["ext"]).unwrap(), "grains_os"),
            Some(*os)
        );
    }
    assert_eq!(as_jsons(&ours), stock_pillars(&conf, &loads));
    let stats = p.stats().unwrap();
    assert_eq!(
        stats.started.load(Ordering::Relaxed),
        1,
        "one worker answered all"
    );
    assert_eq!(stats.answered.load(Ordering::Relaxed), 4);
}

#[test]
fn changed_sls_top_and_custom_modules_are_seen_by_the_next_request() {
    let dir = tempfile::tempdir().unwrap();
    let (p, conf) = reuse_service(dir.path(), "");
    let load = os_load("m2", "Fedora");
    let first = ask(&p, "m2", load.clone());
    assert!(errors_of(&first).is_empty(), "{first:?}");
    // Unchanged for a while: the module directories' listings are now memoized.
    for d in ["extmods/modules", "extmods/modules/__pycache__"] {
        age(&dir.path().join(d));
    }
    assert_eq!(ask(&p, "m2", load.clone()), first);
    // An sls's text, a new sls in the top file, a custom module's code (a different size,
    // so Python's own bytecode cache sees it too) and a new custom module.
    write(
        dir.path(),
        "common.sls",
        &format!("{REUSE_COMMON}added: here\n"),
    );
    write(dir.path(), "top.sls", &format!("{REUSE_TOP}    - extra\n"));
    write(
        dir.path(),
        "extra.sls",
        "fresh: {{ salt['newmod.answer']() }}\n",
    );
    put(
        dir.path(),
        "extmods/modules/ctxprobe.py",
        &CTXPROBE.replace("\"seen\": list", "\"version\": 2,\n        \"seen\": list"),
    );
    put(
        dir.path(),
        "extmods/modules/newmod.py",
        "def answer():\n    return 42\n",
    );
    let changed = ask(&p, "m2", load.clone());
    assert!(errors_of(&changed).is_empty(), "{changed:?}");
    assert_eq!(value::get_str(&changed, "added"), Some("here"));
    assert_eq!(value::get(&changed, "fresh"), Some(&Value::from(42)));
    assert_eq!(
        at(&changed, &["probe", "version"]),
        Some(&Value::from(2)),
        "{changed:?}"
    );
    assert_eq!(as_json(&changed), stock_pillar(&conf, &load));
}

#[test]
fn a_render_error_for_one_minion_does_not_break_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let (p, conf) = stock_service(dir.path(), "");
    let asked = [
        ("bad", "Debian"),
        ("m1", "Debian"),
        ("bad", "Arch"),
        ("m2", "Fedora"),
    ];
    let (loads, ours) = ask_in_turn(&p, &asked);
    for ((id, _), pillar) in asked.iter().zip(&ours) {
        assert_eq!(
            errors_of(pillar).is_empty(),
            *id != "bad",
            "{id}: {pillar:?}"
        );
        assert_eq!(value::get_str(pillar, "who"), Some(*id));
    }
    assert_eq!(as_jsons(&ours), stock_pillars(&conf, &loads));
    let stats = p.stats().unwrap();
    assert_eq!(stats.lost.load(Ordering::Relaxed), 0);
    assert_eq!(stats.started.load(Ordering::Relaxed), 1);
}

#[test]
fn a_raising_ext_pillar_or_module_is_reported_as_stock_and_the_worker_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (p, conf) = reuse_service(dir.path(), "ext_pillar:\n  - boom: {}\n");
    let asked = [("m1", "Debian"), ("failing", "Debian"), ("m2", "Arch")];
    let (loads, ours) = ask_in_turn(&p, &asked);
    for ((id, _), pillar) in asked.iter().zip(&ours) {
        let errors = errors_of(pillar);
        assert!(
            errors
                .iter()
                .any(|e| e == &format!("Failed to load ext_pillar boom: boom for {id}")),
            "{id}: {errors:?}"
        );
        assert_eq!(
            errors
                .iter()
                .any(|e| e.contains("Rendering SLS 'failing' failed")),
            *id == "failing",
            "{id}: {errors:?}"
        );
        assert_eq!(value::get_str(pillar, "who"), Some(*id));
    }
    assert_eq!(as_jsons(&ours), stock_pillars(&conf, &loads));
    // An exception out of `_pillar` itself (grains that are not a mapping) is answered
    // "", as stock's run_func answers it; the same worker serves the next request.
    assert_eq!(ask(&p, "m1", load_of("m1", Value::Array(vec![]))), s(""));
    let again = ask(&p, "m1", loads[0].clone());
    assert_eq!(as_json(&again), as_json(&ours[0]));
    let stats = p.stats().unwrap();
    assert_eq!(stats.lost.load(Ordering::Relaxed), 0);
    assert_eq!(stats.started.load(Ordering::Relaxed), 1);
}

/// A fileserver backend that notes each `init()` its loader runs (stock runs it for every
/// compilation, building the master's file server).
const PROBE_BACKEND: &str = r#"
import os


def envs():
    return []


def init():
    os.makedirs(__opts__["cachedir"], exist_ok=True)
    with open(os.path.join(__opts__["cachedir"], "probe-inits"), "a") as f:
        f.write("init\n")
"#;

/// The master's file server (`__file_client__`) is built only when a module asks for it: a
/// compilation that does not use it does not build the fileserver backends (no `init()`
/// of the probe backend); one that does gets it, with the files' current contents,
/// exactly as stock.
#[test]
fn the_master_file_server_is_built_only_for_modules_that_use_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let (p, conf) = stock_service(
        dir.path(),
        &format!(
            "extension_modules: {d}/extmods\nfileserver_backend:\n  - roots\n  - probe\n\
             file_roots:\n  base:\n    - {d}/states\n"
        ),
    );
    put(dir.path(), "extmods/fileserver/probe.py", PROBE_BACKEND);
    write(
        dir.path(),
        "top.sls",
        "base:\n  'm1':\n    - files\n  '*':\n    - common\n",
    );
    write(
        dir.path(),
        "files.sls",
        "listed: {{ salt['cp.list_master']() | json }}\n\
         text: {{ salt['cp.get_file_str']('salt://a.txt') | json }}\n",
    );
    put(dir.path(), "states/a.txt", "one");
    let inits = dir.path().join("cache/probe-inits");
    let other = ask(&p, "m2", os_load("m2", "Debian"));
    assert_eq!(value::get_str(&other, "who"), Some("m2"), "{other:?}");
    assert!(!inits.exists(), "no file server without a module using it");
    let load = os_load("m1", "Debian");
    let first = ask(&p, "m1", load.clone());
    assert_eq!(value::get_str(&first, "text"), Some("one"), "{first:?}");
    assert_eq!(
        std::fs::read_to_string(&inits).unwrap(),
        "init\n",
        "built once, for the module that used it"
    );
    assert_eq!(as_json(&first), stock_pillar(&conf, &load));
    put(dir.path(), "states/a.txt", "two, longer");
    let second = ask(&p, "m1", load.clone());
    assert_eq!(value::get_str(&second, "text"), Some("two, longer"));
    // The listing is the file server's own, cached `fileserver_list_cache_time` as stock.
    assert_eq!(strs(value::get(&second, "listed")), ["a.txt"]);
    assert_eq!(as_json(&second), stock_pillar(&conf, &load));
}

#[test]
fn with_pillar_opts_the_master_options_in_pillar_are_exactly_stocks() {
    let dir = tempfile::tempdir().unwrap();
    let (p, conf) = stock_service(dir.path(), "pillar_opts: true");
    let loads = [os_load("m1", "Debian"), os_load("m2", "Arch")];
    let ours: Vec<Value> = ["m1", "m2"]
        .iter()
        .zip(&loads)
        .map(|(id, load)| ask(&p, id, load.clone()))
        .collect();
    for (id, pillar) in ["m1", "m2"].iter().zip(&ours) {
        assert_eq!(
            at(pillar, &["master", "id"]).and_then(value::str_of),
            Some(*id)
        );
        assert_eq!(
            at(pillar, &["master", "grains", "id"]).and_then(value::str_of),
            Some(*id)
        );
    }
    assert_eq!(as_jsons(&ours), stock_pillars(&conf, &loads));
}

/// The test tree of the measurement: a top file and two sls rendered with Jinja from
/// grains.
fn measured_tree(dir: &Path) {
    write(dir, "top.sls", "base:\n  '*':\n    - common\n    - os\n");
    write(
        dir,
        "common.sls",
        "who: {{ grains['id'] }}\nkernel: {{ grains.get('kernel') }}\n\
         {% set d = {} %}{% do d.update({'k': 'v'}) %}made: {{ d | json }}\n",
    );
    write(
        dir,
        "os.sls",
        "{% if grains.get('os') == 'Debian' %}\npkg: apt\n{% else %}\npkg: other\n{% endif %}\n",
    );
}

/// utime + stime of `pid`, in seconds (USER_HZ is 100 on Linux).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

/// The worker script talked to directly: it says it reuses what it can on the Salt it was
/// checked against, every compile is stock's, and the cost per warm compile is printed
/// beside stock's (a fresh `Pillar` per request, in one warm process, which is what the
/// worker did before the reuse).
#[test]
fn a_warm_worker_reuses_loaders_on_the_checked_salt_and_measures_a_compile() {
    const ROUNDS: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let cfg = master_config(dir.path(), "");
    measured_tree(dir.path());
    let mut worker = halite_pyworker::Worker::spawn(
        &venv_python(),
        "pillar-measure",
        &format!("{}\n{PILLAR_PY}", halite_pyworker::FRAMING_PY),
        &[cfg.conf_file.clone().into_os_string(), "warning".into()],
        &[],
    )
    .unwrap();
    let ready = worker
        .recv_timeout(pool::MAX_REPLY, REPLY_WAIT)
        .unwrap()
        .unwrap();
    assert_eq!(
        value::get(&ready, "ready"),
        Some(&Value::from(true)),
        "{ready:?}"
    );
    assert_eq!(
        value::get(&ready, "reuse"),
        Some(&Value::from(true)),
        "the worker reuses loaders on the Salt it was checked against: {ready:?}"
    );
    let minions = [("m1", "Debian"), ("m2", "Fedora"), ("m3", "Arch")];
    let loads: Vec<Value> = (0..ROUNDS)
        .map(|n| {
            let (id, os) = minions[n % minions.len()];
            load_of(id, map([("os", s(os)), ("kernel", s("Linux"))]))
        })
        .collect();
    let pid = worker.pid();
    let mut compile = |load: &Value| -> Value {
        worker
            .send(&map([
                ("op", s("compile")),
                ("load", value::bin(value::encode(load))),
            ]))
            .unwrap();
        let reply = worker
            .recv_timeout(pool::MAX_REPLY, REPLY_WAIT)
            .unwrap()
            .unwrap();
        let bytes = value::get(&reply, "pillar")
            .and_then(value::bytes_of)
            .unwrap_or_else(|| panic!("no pillar in {reply:?}"));
        value::decode(bytes).unwrap()
    };
    for load in loads.iter().take(minions.len()) {
        compile(load);
    }
    let (cpu, wall) = (cpu_seconds(pid), Instant::now());
    let mut last = Vec::new();
    for (n, load) in loads.iter().enumerate() {
        let pillar = compile(load);
        let (id, os) = minions[n % minions.len()];
        assert_eq!(value::get_str(&pillar, "who"), Some(id), "{pillar:?}");
        let pkg = if os == "Debian" { "apt" } else { "other" };
        assert_eq!(value::get_str(&pillar, "pkg"), Some(pkg), "{pillar:?}");
        if n >= ROUNDS - minions.len() {
            last.push(pillar);
        }
    }
    let ours_wall = wall.elapsed().as_secs_f64() * 1000.0 / ROUNDS as f64;
    let ours_cpu = (cpu_seconds(pid) - cpu) * 1000.0 / ROUNDS as f64;

    // Stock, the same loads in one warm process, a fresh Pillar each.
    let script = format!(
        "import json, sys, time\nimport salt.config, salt.pillar, salt.payload\n\
         loads = salt.payload.loads(sys.stdin.buffer.read())\n\
         def one(load):\n\
         \x20   opts = salt.config.master_config({conf:?})\n\
         \x20   load = dict(load, grains=dict(load['grains'], id=load['id']))\n\
         \x20   return salt.pillar.get_pillar(opts, load['grains'], load['id'], None, pillar_override={{}}, \
         extra_minion_data={{}}).compile_pillar()\n\
         for load in loads[:3]:\n\
         \x20   one(load)\n\
         wall, cpu = time.perf_counter(), time.process_time()\n\
         out = [one(load) for load in loads]\n\
         print(json.dumps({{'wall': (time.perf_counter() - wall) * 1000 / len(loads), \
         'cpu': (time.process_time() - cpu) * 1000 / len(loads)}}))\n\
         for pillar in out[-3:]:\n\
         \x20   print(json.dumps(pillar, sort_keys=True))\n",
        conf = cfg.conf_file.display().to_string()
    );
    let out = halite_testkit::run_command_with_input(
        {
            let mut c = std::process::Command::new(venv_python());
            c.args(["-c", &script]);
            c
        },
        &value::encode(&Value::Array(loads.clone())),
        REPLY_WAIT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let figures = lines.next().unwrap_or_default().to_owned();
    let stock_last: Vec<String> = lines.map(str::to_owned).collect();
    assert_eq!(as_jsons(&last), stock_last, "the same pillars as stock");
    let figure = |name: &str| -> f64 {
        let at = figures.find(&format!("\"{name}\": ")).unwrap() + name.len() + 4;
        figures[at..]
            .split([',', '}'])
            .next()
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    };
    println!(
        "MEASURED pillar compile per request, warm, top + 2 Jinja sls from grains, {ROUNDS} \
         requests over 3 minions: halite worker (reuse) {ours_wall:.2} ms wall, {ours_cpu:.2} ms \
         CPU; stock Pillar per request in one warm process {:.2} ms wall, {:.2} ms CPU",
        figure("wall"),
        figure("cpu")
    );
}
