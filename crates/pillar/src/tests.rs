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
    let script = format!(
        "import json, sys\nimport salt.config, salt.pillar, salt.payload\n\
         opts = salt.config.master_config({conf:?})\n\
         load = salt.payload.loads(sys.stdin.buffer.read())\n\
         load['grains']['id'] = load['id']\n\
         p = salt.pillar.get_pillar(opts, load['grains'], load['id'], load.get('saltenv', load.get('env')), \
         ext=load.get('ext'), pillar_override=load.get('pillar_override', {{}}), pillarenv=load.get('pillarenv'), \
         extra_minion_data=load.get('extra_minion_data'), clean_cache=load.get('clean_cache'))\n\
         print(json.dumps(p.compile_pillar(), sort_keys=True))\n",
        conf = conf.display().to_string()
    );
    let out = halite_testkit::run_command_with_input(
        {
            let mut c = std::process::Command::new(venv_python());
            c.args(["-c", &script]);
            c
        },
        &value::encode(load),
        REPLY_WAIT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Ours, as the same JSON text (printed by Python's `json.dumps`, as stock's is).
fn as_json(v: &Value) -> String {
    let script = "import json, sys, salt.payload\n\
                  print(json.dumps(salt.payload.loads(sys.stdin.buffer.read()), sort_keys=True))\n";
    let out = halite_testkit::run_command_with_input(
        {
            let mut c = std::process::Command::new(venv_python());
            c.args(["-c", script]);
            c
        },
        &value::encode(v),
        REPLY_WAIT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
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
