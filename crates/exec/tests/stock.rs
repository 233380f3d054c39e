//! Halite's execution modules against stock Salt 3008.3 (the venv `scripts/setup-tests` creates):
//! the generated signature table, job returns through the stock minion's job path
//! (`tests/stock_minion.py`), `salt-call --local grains.items` and the function list.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use halite_exec::{core_grains, Context, JobHandle, NoJobs, Registry, Value};
use halite_target::testutil::from_json;
use serde_json::Value as Json;

/// A program of the stock Salt venv (`halite_testkit::salt_venv`: fails the test with
/// instructions when the venv is missing).
fn venv_bin(name: &str) -> PathBuf {
    halite_testkit::salt_venv().join("bin").join(name)
}

/// A minion configuration directory for both implementations.
fn config_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).expect("root dir");
    let text = format!(
        "id: stock-compare\nroot_dir: {root}\ncachedir: {root}/cache\npki_dir: {root}/pki\n\
         log_file: {root}/minion.log\nuser: root\n\
         grains:\n  roles: [web, db]\n  deep:\n    a: {{b: 1}}\n    list: [{{x: 1}}, 7]\n",
        root = root.display()
    );
    std::fs::write(dir.path().join("minion"), text).expect("write config");
    dir
}

fn to_json(v: &Value) -> Json {
    match v {
        Value::Nil => Json::Null,
        Value::Boolean(b) => Json::Bool(*b),
        Value::Integer(i) => i
            .as_i64()
            .map(Json::from)
            .or_else(|| i.as_u64().map(Json::from))
            .unwrap_or(Json::Null),
        Value::F32(f) => Json::from(f64::from(*f)),
        Value::F64(f) => Json::from(*f),
        Value::String(s) => Json::from(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        Value::Binary(b) => Json::from(String::from_utf8_lossy(b).into_owned()),
        Value::Array(items) => Json::Array(items.iter().map(to_json).collect()),
        Value::Map(entries) => Json::Object(
            entries
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        Value::String(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
                        other => to_json(other).to_string(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        Value::Ext(_, _) => Json::Null,
    }
}

/// How a return is compared.
#[derive(Clone, Copy, Debug)]
enum Compare {
    /// Equal JSON.
    Exact,
    /// Equal after dropping these keys of the return dict (pids).
    Without(&'static [&'static str]),
    /// Both tracebacks: same first line and same exception line.
    Traceback,
    /// Same first element (the rest is a timing).
    First,
    /// Same dict keys (the values are live measurements).
    Keys,
}

fn check(label: &str, how: Compare, stock: &Json, ours: &Json) {
    match how {
        Compare::Exact => assert_eq!(ours, stock, "{label}"),
        Compare::Without(keys) => {
            let strip = |j: &Json| {
                let mut j = j.clone();
                if let Some(map) = j.as_object_mut() {
                    for k in keys {
                        assert!(map.remove(*k).is_some(), "{label}: no {k}");
                    }
                }
                j
            };
            assert_eq!(strip(ours), strip(stock), "{label}");
        }
        Compare::Traceback => {
            let lines = |j: &Json| {
                let text = j.as_str().unwrap_or_default().trim_end().to_owned();
                let first = text.lines().next().unwrap_or_default().to_owned();
                let last = text.lines().last().unwrap_or_default().to_owned();
                (first, last)
            };
            assert_eq!(lines(ours), lines(stock), "{label}");
        }
        Compare::First => assert_eq!(ours.get(0), stock.get(0), "{label}"),
        Compare::Keys => {
            let keys = |j: &Json| {
                let mut k: Vec<String> = j
                    .as_object()
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default();
                k.sort();
                k
            };
            assert_eq!(keys(ours), keys(stock), "{label}");
        }
    }
}

fn stock_returns(dir: &Path, jobs: &Json) -> Vec<Json> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stock_minion.py");
    match halite_testkit::run_stock_harness(&script, [dir], jobs) {
        Json::Array(returns) => returns,
        other => panic!("the stock harness printed {other}, not a list"),
    }
}

#[test]
fn job_returns_match_the_stock_minion() {
    let jobs: Vec<(&str, &str, Compare)> = vec![
        ("test.ping", "[]", Compare::Exact),
        ("test.version", "[]", Compare::Exact),
        ("test.echo", r#"["hello world"]"#, Compare::Exact),
        (
            "test.arg",
            r#"[1, "two", "k=v", "n=[1, {a: 2}]", {"__kwarg__": true, "z": [1, 2]}]"#,
            Compare::Exact,
        ),
        (
            "test.kwarg",
            r#"["a=1", "b=yes", "c=None", "d=1.5"]"#,
            Compare::Exact,
        ),
        ("test.arg_clean", r#"["x", "k=1"]"#, Compare::Exact),
        ("test.arg_repr", r#"["x", 2, "k=[1]"]"#, Compare::Exact),
        (
            "test.arg_type",
            r#"["x", 2, 1.5, null, "k={a: 1}"]"#,
            Compare::Exact,
        ),
        ("test.true", "[]", Compare::Exact),
        ("test.false", "[]", Compare::Exact),
        ("test.retcode", "[5]", Compare::Exact),
        ("test.retcode", "[]", Compare::Exact),
        ("test.outputter", r#"[{"a": [1, 2]}]"#, Compare::Exact),
        ("test.tty", "[]", Compare::Exact),
        ("test.collatz", "[7]", Compare::First),
        ("test.fib", "[30]", Compare::First),
        ("test.echo", "[]", Compare::Exact),
        (
            "test.echo",
            r#"["x", "y=2", {"__kwarg__": true, "z": 3}]"#,
            Compare::Exact,
        ),
        ("test.ping", "[1]", Compare::Exact),
        ("test.retcode", "[1, 2]", Compare::Exact),
        ("test.sleep", "[null]", Compare::Exact),
        ("test.pin", "[]", Compare::Exact),
        ("nope.fun", "[]", Compare::Exact),
        ("test.exception", r#"["Oh noes!"]"#, Compare::Traceback),
        ("test.sleep", r#"["abc"]"#, Compare::Traceback),
        ("test.fib", "[-1]", Compare::Traceback),
        ("grains.get", r#"["roles"]"#, Compare::Exact),
        ("grains.get", r#"["deep:a:b"]"#, Compare::Exact),
        ("grains.get", r#"["deep:list:x"]"#, Compare::Exact),
        ("grains.get", r#"["deep:list:1"]"#, Compare::Exact),
        ("grains.get", r#"["nope"]"#, Compare::Exact),
        ("grains.get", r#"["nope", "dflt"]"#, Compare::Exact),
        ("grains.item", r#"["roles", "missing"]"#, Compare::Exact),
        ("grains.has_value", r#"["deep:a"]"#, Compare::Exact),
        (
            "grains.equals",
            r#"["id", "stock-compare"]"#,
            Compare::Exact,
        ),
        (
            "grains.filter_by",
            r#"[{"web": "W", "default": "D"}, "roles"]"#,
            Compare::Exact,
        ),
        (
            "grains.filter_by",
            r#"[{"x": "X", "default": "D"}, "roles"]"#,
            Compare::Exact,
        ),
        ("sys.doc", r#"["test.echo"]"#, Compare::Exact),
        ("sys.argspec", r#"["test.retcode"]"#, Compare::Exact),
        ("sys.argspec", r#"["cmd.run"]"#, Compare::Exact),
        ("sys.argspec", "[]", Compare::Exact),
        ("sys.list_modules", r#"["zzz*"]"#, Compare::Exact),
        ("saltutil.running", "[]", Compare::Exact),
        ("saltutil.find_job", r#"["1"]"#, Compare::Exact),
        ("saltutil.kill_job", r#"["1"]"#, Compare::Exact),
        (
            "cmd.run",
            r#"["echo out; echo err >&2; exit 3"]"#,
            Compare::Exact,
        ),
        (
            "cmd.run_all",
            r#"["echo out; echo err >&2; exit 2"]"#,
            Compare::Without(&["pid"]),
        ),
        (
            "cmd.run_all",
            r#"["exit 2", "success_retcodes=[2]"]"#,
            Compare::Without(&["pid"]),
        ),
        (
            "cmd.run_all",
            r#"["echo hi", "bg=True"]"#,
            Compare::Without(&["pid"]),
        ),
        (
            "cmd.run_all",
            r#"["sleep 5", "timeout=1", "python_shell=False"]"#,
            Compare::Without(&["pid"]),
        ),
        ("cmd.run", r#"["sleep 5", "timeout=1"]"#, Compare::Exact),
        (
            "cmd.run",
            r#"["exit 2", "ignore_retcode=True"]"#,
            Compare::Exact,
        ),
        ("cmd.retcode", r#"["exit 4"]"#, Compare::Exact),
        (
            "cmd.run_stdout",
            r#"["echo out; echo err >&2"]"#,
            Compare::Exact,
        ),
        (
            "cmd.run_stderr",
            r#"["echo out; echo err >&2"]"#,
            Compare::Exact,
        ),
        ("cmd.shell", r#"["echo $((1+2))"]"#, Compare::Exact),
        (
            "cmd.run",
            r#"["echo $FOO $LC_CTYPE $LANGUAGE", "env={FOO: bar}"]"#,
            Compare::Exact,
        ),
        ("cmd.run", r#"["cat", "stdin=a\\nb"]"#, Compare::Exact),
        ("cmd.run", r#"["pwd", "cwd=/tmp"]"#, Compare::Exact),
        ("cmd.run", r#"["umask", "umask=027"]"#, Compare::Exact),
        (
            "cmd.run",
            r#"["echo hi", "cwd=/nonexistent"]"#,
            Compare::Exact,
        ),
        (
            "cmd.run",
            r#"["echo hi", "shell=/bin/nonexistent"]"#,
            Compare::Exact,
        ),
        (
            "cmd.run",
            r#"["echo hi", "runas=nosuchuser"]"#,
            Compare::Exact,
        ),
        (
            "cmd.run",
            r#"["echo hi", "template=jinja2x"]"#,
            Compare::Exact,
        ),
        ("cmd.run", r#"["umask", "umask=0"]"#, Compare::Exact),
        ("cmd.run", r#"["umask", "umask=abc"]"#, Compare::Exact),
        ("cmd.run", r#"["exit 1", "raise_err=True"]"#, Compare::Exact),
        (
            "cmd.run",
            r#"["nonexistent_cmd_xyz arg", "python_shell=False"]"#,
            Compare::Exact,
        ),
        (
            "cmd.run",
            r#"["echo \"unclosed", "python_shell=False"]"#,
            Compare::Traceback,
        ),
        (
            "cmd.run",
            r#"["echo hi", "timeout=abc"]"#,
            Compare::Traceback,
        ),
        ("cmd.which", r#"["sh"]"#, Compare::Exact),
        ("cmd.which_bin", r#"[["nope-xyz", "sh"]]"#, Compare::Exact),
        ("cmd.has_exec", r#"["nope-xyz"]"#, Compare::Exact),
        ("status.version", "[]", Compare::Exact),
        ("status.nproc", "[]", Compare::Exact),
        ("status.meminfo", "[]", Compare::Keys),
        ("status.cpuinfo", "[]", Compare::Keys),
        ("status.loadavg", "[]", Compare::Keys),
        ("status.uptime", "[]", Compare::Keys),
        ("status.diskusage", r#"["/"]"#, Compare::Keys),
        ("status.diskusage", r#"["tmpfs"]"#, Compare::Keys),
        (
            "test.echo",
            r#"[{"__kwarg__": true, "text": "x"}]"#,
            Compare::Exact,
        ),
        ("test.echo", r#"["x", "text=y"]"#, Compare::Exact),
        (
            "test.echo",
            r#"[{"__kwarg__": true, "text": "x", "bad": 1}]"#,
            Compare::Exact,
        ),
        (
            "test.arg",
            r#"[{"__kwarg__": false, "a": 1}]"#,
            Compare::Exact,
        ),
        ("test.arg", r#"["a=b\nc", "x=\n"]"#, Compare::Exact),
        (
            "test.arg",
            r#"["t=2024-01-01", "o=0755", "h=0x1f", "e=", "s=' q '", "n=~"]"#,
            Compare::Exact,
        ),
        ("test.kwarg", r#"["1a=b"]"#, Compare::Exact),
        ("test.sleep", r#"["1.5"]"#, Compare::Traceback),
        ("test.sleep", "[-1]", Compare::Traceback),
        ("test.random_hash", r#"["size=-1"]"#, Compare::Traceback),
        ("test.random_hash", r#"["hash_type=5"]"#, Compare::Exact),
        ("test.cross_test", r#"["nope.x"]"#, Compare::Traceback),
        ("test.cross_test", r#"["test.echo", 5]"#, Compare::Exact),
        (
            "test.cross_test",
            r#"["test.echo", ["hi"]]"#,
            Compare::Exact,
        ),
        (
            "test.try",
            r#"["module=test.echo", "text=hi"]"#,
            Compare::Exact,
        ),
        ("sys.doc", "[1]", Compare::Exact),
        ("sys.list_functions", r#"["test.e*"]"#, Compare::Exact),
        // Salt's two returners Halite has, as stock lists them (`master_bus` is Halite's).
        (
            "sys.list_returners",
            r#"["rawfile_json", "sys*", [1]]"#,
            Compare::Exact,
        ),
        (
            "sys.list_returner_functions",
            r#"["syslog.ret*", "rawfile_json.returner"]"#,
            Compare::Exact,
        ),
        ("sys.list_returners", "[5]", Compare::Exact),
        ("grains.get", "[1]", Compare::Exact),
        ("grains.get", r#"["deep:list:-1"]"#, Compare::Exact),
        ("grains.filter_by", r#"["notadict"]"#, Compare::Traceback),
        (
            "grains.item",
            r#"["roles", "sanitize=True"]"#,
            Compare::Exact,
        ),
        ("saltutil.signal_job", r#"["1", "abc"]"#, Compare::Exact),
        ("cmd.run", r#"["echo hi", "foo=bar"]"#, Compare::Exact),
        ("cmd.run", r#"[["echo", "a b"]]"#, Compare::Exact),
        (
            "cmd.run",
            r#"[["echo", "a b"], "python_shell=False"]"#,
            Compare::Exact,
        ),
        (
            "cmd.run",
            r#"["echo a  b", "python_shell=False"]"#,
            Compare::Exact,
        ),
        (
            "cmd.run_all",
            r#"["printf 'x\\n\\n'", "rstrip=False"]"#,
            Compare::Without(&["pid"]),
        ),
        (
            "cmd.run",
            r#"["echo hi", "hide_output=True"]"#,
            Compare::Exact,
        ),
        (
            "cmd.run",
            r#"["echo $PATH", "prepend_path=/opt/x"]"#,
            Compare::Exact,
        ),
        (
            "cmd.run",
            r#"["env", "clean_env=True", "reset_system_locale=False"]"#,
            Compare::Exact,
        ),
        (
            "cmd.run",
            r#"["exit 3", "success_stdout=[hi]"]"#,
            Compare::Exact,
        ),
        (
            "cmd.run",
            r#"["echo hi; exit 3", "success_stdout=hi"]"#,
            Compare::Exact,
        ),
        (
            "cmd.run",
            r#"["id -un; echo $HOME $USER", "runas=nobody"]"#,
            Compare::Exact,
        ),
        ("cmd.run", r#"["kill -9 $$"]"#, Compare::Exact),
    ];
    let dir = config_dir();
    let loads: Vec<Json> = jobs
        .iter()
        .map(|(fun, args, _)| {
            serde_json::json!({
                "fun": fun,
                "arg": serde_json::from_str::<Json>(args).expect("job args are JSON"),
            })
        })
        .collect();
    let stock = stock_returns(dir.path(), &Json::Array(loads.clone()));

    let opts = Arc::new(halite_config::MinionConfig::load(dir.path()).expect("config"));
    let grains = Arc::new(core_grains(&opts));
    let registry = Registry::builtin();
    for (((fun, args, how), load), stock) in jobs.iter().zip(&loads).zip(&stock) {
        let label = format!("{fun} {args}");
        let mut data = serde_json::json!({
            "jid": "20240101000000000000",
            "tgt": "*",
            "tgt_type": "glob",
            "ret": "",
            "user": "root",
        });
        if let (Some(d), Some(l)) = (data.as_object_mut(), load.as_object()) {
            d.extend(l.clone());
        }
        let ctx = Context {
            id: opts.id.clone(),
            opts: opts.clone(),
            grains: grains.clone(),
            pillar: Arc::new(Value::Map(Vec::new())),
            jid: Some("20240101000000000000".to_owned()),
            pub_data: Some(from_json(&data)),
            jobs: Arc::new(NoJobs),
            job: JobHandle::new(),
            master: None,
        };
        let ours = registry.execute(&ctx, &Value::from(*fun), &from_json(&load["arg"]));
        check(&label, *how, &stock["return"], &to_json(&ours.ret));
        assert_eq!(
            Json::from(ours.retcode),
            stock["retcode"],
            "{label}: retcode"
        );
        assert_eq!(
            Json::from(ours.success),
            stock["success"],
            "{label}: success"
        );
        assert_eq!(
            ours.out.map(Json::from).unwrap_or(Json::Null),
            stock.get("out").cloned().unwrap_or(Json::Null),
            "{label}: out"
        );
    }
}

#[test]
fn multi_function_returns_match_the_stock_minion() {
    let dir = config_dir();
    let load = serde_json::json!({
        "fun": ["test.ping", "test.retcode", "test.echo", "test.arg"],
        "arg": [[], [5], ["hi"], ["a", "k=1"]],
    });
    let stock = stock_returns(dir.path(), &Json::Array(vec![load.clone()]));
    let stock = &stock[0];
    let opts = Arc::new(halite_config::MinionConfig::load(dir.path()).expect("config"));
    let mut data = serde_json::json!({
        "jid": "20240101000000000000", "tgt": "*", "tgt_type": "glob", "ret": "", "user": "root",
    });
    if let (Some(d), Some(l)) = (data.as_object_mut(), load.as_object()) {
        d.extend(l.clone());
    }
    let ctx = Context {
        id: opts.id.clone(),
        opts: opts.clone(),
        grains: Arc::new(Value::Map(Vec::new())),
        pillar: Arc::new(Value::Map(Vec::new())),
        jid: Some("20240101000000000000".to_owned()),
        pub_data: Some(from_json(&data)),
        jobs: Arc::new(NoJobs),
        job: JobHandle::new(),
        master: None,
    };
    let ours =
        Registry::builtin().execute(&ctx, &from_json(&load["fun"]), &from_json(&load["arg"]));
    assert_eq!(to_json(&ours.ret), stock["return"]);
    assert_eq!(to_json(&ours.retcode_value()), stock["retcode"]);
    assert_eq!(to_json(&ours.success_value()), stock["success"]);
}

#[test]
fn specs_match_stock_salt() {
    halite_testkit::assert_generated_from_stock(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/gen_specs.py"),
        include_str!("../src/specs.rs"),
    );
}

fn salt_call(dir: &Path, args: &[&str]) -> Json {
    let out = Command::new(venv_bin("salt-call"))
        .arg("-c")
        .arg(dir)
        .arg("--local")
        .args(args)
        .args(["--out", "json"])
        .stderr(Stdio::null())
        .output()
        .expect("run salt-call");
    let parsed: Json = serde_json::from_slice(&out.stdout).expect("salt-call prints JSON");
    parsed["local"].clone()
}

#[test]
fn core_grains_match_salt_call_local() {
    let dir = config_dir();
    let stock = salt_call(dir.path(), &["grains.items"]);
    let stock = stock.as_object().expect("grains are a map").clone();
    let opts = halite_config::MinionConfig::load(dir.path()).expect("config");
    let ours = to_json(&core_grains(&opts));
    let ours = ours.as_object().expect("grains are a map").clone();

    // Python-only grains Halite does not have; `pid` is the process's own.
    let python_only = [
        "pythonexecutable",
        "pythonpath",
        "pythonversion",
        "saltpath",
        "zmqversion",
        "package",
        "ca_truststore",
    ];
    let volatile = ["pid"];
    for key in stock.keys() {
        if python_only.contains(&key.as_str()) {
            assert!(!ours.contains_key(key), "{key} should be absent");
            continue;
        }
        assert!(ours.contains_key(key), "Halite lacks the {key} grain");
        if !volatile.contains(&key.as_str()) {
            assert_eq!(ours[key], stock[key], "grain {key}");
        }
    }
    for key in ours.keys() {
        assert!(stock.contains_key(key), "Halite invents the {key} grain");
    }
    for key in [
        "id",
        "host",
        "fqdn",
        "domain",
        "localhost",
        "nodename",
        "os",
        "os_family",
        "osrelease",
        "osfinger",
        "oscodename",
        "osfullname",
        "osmajorrelease",
        "kernel",
        "kernelrelease",
        "kernelversion",
        "cpuarch",
        "num_cpus",
        "cpu_model",
        "mem_total",
        "swap_total",
        "ipv4",
        "ipv6",
        "fqdn_ip4",
        "hwaddr_interfaces",
        "ip_interfaces",
        "machine_id",
        "saltversion",
        "saltversioninfo",
        "path",
        "shell",
        "locale_info",
        "init",
        "virtual",
    ] {
        assert!(
            stock.contains_key(key) || key == "machine_id",
            "stock lacks {key}"
        );
    }
}

#[test]
fn implemented_functions_are_stock_functions() {
    let dir = config_dir();
    let stock = salt_call(
        dir.path(),
        &[
            "sys.list_functions",
            "test",
            "cmd",
            "event",
            "grains",
            "publish",
            "sys",
            "saltutil",
            "status",
        ],
    );
    let stock: Vec<String> = stock
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    for name in Registry::builtin().names() {
        assert!(stock.contains(&name), "{name} is not a stock function");
    }
}

#[test]
fn salt_call_argument_handling_matches_with_its_publish_data() {
    let dir = config_dir();
    let words = ["1", "two", "k=[1, {a: b}]", "flag=yes"];
    let mut args = vec!["test.arg"];
    args.extend(words);
    let mut stock = salt_call(dir.path(), &args);
    let opts = Arc::new(halite_config::MinionConfig::load(dir.path()).expect("config"));
    let words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
    let ctx = Context {
        id: opts.id.clone(),
        opts: opts.clone(),
        grains: Arc::new(Value::Map(Vec::new())),
        pillar: Arc::new(Value::Map(Vec::new())),
        jid: None,
        pub_data: Some(halite_exec::salt_call_pub_data(
            "test.arg",
            "20240101000000000000",
        )),
        jobs: Arc::new(NoJobs),
        job: JobHandle::new(),
        master: None,
    };
    let ours = Registry::builtin().execute(
        &ctx,
        &Value::from("test.arg"),
        &Value::Array(halite_config::args::parse_input(&words, &[])),
    );
    let mut ours = to_json(&ours.ret);
    for ret in [&mut stock, &mut ours] {
        let kwargs = ret["kwargs"].as_object_mut().expect("kwargs");
        for key in ["__pub_pid", "__pub_jid"] {
            assert!(kwargs.remove(key).is_some(), "{key}");
        }
    }
    assert_eq!(ours, stock);
}
