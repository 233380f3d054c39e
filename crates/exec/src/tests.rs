//! Job-level tests: `Registry::execute` as the minion and `halite-call` use it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use halite_config::MinionConfig;
use rmpv::Value;

use crate::pyval::py_str;
use crate::registry::job_retcode;
use crate::{Context, JobHandle, JobReturn, JobTable, NoJobs, Registry};

fn yaml(text: &str) -> Value {
    halite_config::yaml::load(text).expect("test YAML parses")
}

struct Env {
    _dir: tempfile::TempDir,
    opts: Arc<MinionConfig>,
}

fn env(config: &str) -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "id: exec-test\nroot_dir: {}\n{config}",
        dir.path().display()
    );
    let opts = MinionConfig::from_yaml_str(&text, &dir.path().join("minion")).expect("config");
    Env {
        _dir: dir,
        opts: Arc::new(opts),
    }
}

fn ctx_with(env: &Env, jid: Option<&str>, jobs: Arc<dyn JobTable>) -> Context {
    let grains = yaml(
        "id: exec-test\nkernel: Linux\nos: Debian\nos_family: Debian\nroles: [web, db]\n\
         deep: {a: {b: 1}, list: [{x: 1}, 7]}\nfqdn: host.example\n",
    );
    Context {
        id: "exec-test".to_owned(),
        opts: env.opts.clone(),
        grains: Arc::new(grains),
        pillar: Arc::new(Value::Map(Vec::new())),
        jid: jid.map(str::to_owned),
        pub_data: jid.map(|j| {
            yaml(&format!(
                "{{jid: '{j}', tgt: '*', tgt_type: glob, ret: '', user: root}}"
            ))
        }),
        jobs,
        job: JobHandle::new(),
        master: None,
    }
}

fn local(env: &Env) -> Context {
    ctx_with(env, None, Arc::new(NoJobs))
}

fn published(env: &Env) -> Context {
    ctx_with(env, Some("20240101000000000000"), Arc::new(NoJobs))
}

fn run(ctx: &Context, fun: &str, args: &str) -> JobReturn {
    Registry::builtin().execute(ctx, &Value::from(fun), &yaml(args))
}

fn text(ret: &JobReturn) -> String {
    py_str(&ret.ret)
}

#[test]
fn every_export_has_a_stock_signature_and_back() {
    let registry = Registry::builtin();
    let names = registry.names();
    let exported: Vec<&str> = crate::modules::exports().map(|e| e.0).collect();
    assert_eq!(names.len(), exported.len(), "an export lacks a spec");
    for name in &names {
        assert!(crate::spec::find(name).is_some(), "{name}");
        assert!(registry.has(name));
    }
    assert!(!registry.has("state.apply"));
}

#[test]
fn retcode_follows_context_then_result_and_success_keys() {
    let cases = [
        (0, "true", 0),
        (0, "{result: true}", 0),
        (0, "{result: false}", 1),
        (0, "{success: false}", 1),
        (0, "{result: null}", 1),
        (0, "{result: 'yes', success: 1}", 0),
        (0, "[{result: false}]", 0),
        (3, "{result: true}", 3),
        (-9, "x", -9),
    ];
    for (context, ret, want) in cases {
        assert_eq!(job_retcode(context, &yaml(ret)), want, "{ret}");
    }
}

#[test]
fn ping_succeeds_without_an_outputter() {
    let env = env("");
    let ret = run(&local(&env), "test.ping", "[]");
    assert_eq!(
        ret,
        JobReturn {
            ret: Value::Boolean(true),
            retcode: 0,
            success: true,
            out: None,
            multi: None,
        }
    );
    assert_eq!(ret.retcode_value(), Value::from(0));
    assert_eq!(ret.success_value(), Value::Boolean(true));
}

#[test]
fn error_returns_use_salt_texts_and_the_nested_outputter() {
    let env = env("");
    let ctx = published(&env);
    let cases: &[(&str, &str, &str)] = &[
        ("nope.fun", "[]", "'nope.fun' is not available."),
        (
            "test.echo",
            "[x, 'y=2']",
            "ERROR executing 'test.echo': The following keyword arguments are not valid: y=2",
        ),
        (
            "test.echo",
            "[]",
            "Passed invalid arguments to test.echo: echo() missing 1 required positional argument: 'text'\n",
        ),
        (
            "test.sleep",
            "[null]",
            "Passed invalid arguments to test.sleep: int() argument must be a string, a bytes-like object or a real number, not 'NoneType'\n",
        ),
        (
            "cmd.run",
            "['echo hi', 'cwd=/nonexistent/dir']",
            "ERROR: Specified cwd '/nonexistent/dir' either not absolute or does not exist",
        ),
        ("test.echo", "null", "Passed invalid arguments to test.echo: 'NoneType' object is not iterable\n"),
        (
            "sys.list_returners",
            "[5]",
            "Passed invalid arguments to sys.list_returners: argument of type 'int' is not iterable\n",
        ),
        (
            "sys.list_returner_functions",
            "[[syslog]]",
            "Passed invalid arguments to sys.list_returner_functions: can only concatenate list (not \"str\") to list\n",
        ),
    ];
    for (fun, args, want) in cases {
        let ret = run(&ctx, fun, args);
        assert!(text(&ret).starts_with(want), "{fun} {args}: {}", text(&ret));
        assert_eq!(
            (ret.retcode, ret.success, ret.out.as_deref()),
            (1, false, Some("nested")),
            "{fun}"
        );
    }
}

#[test]
fn a_near_miss_function_returns_the_docs_it_matches() {
    let env = env("");
    let ret = run(&local(&env), "test.pin", "[]");
    assert_eq!(
        halite_proto::value::get_str(&ret.ret, "test.pin"),
        Some("'test.pin' is not available.")
    );
    let doc = halite_proto::value::get_str(&ret.ret, "test.ping").expect("test.ping doc");
    assert!(doc.contains("Used to make sure the minion is up") && !doc.contains("code-block"));
    assert_eq!(ret.retcode, 1);
}

#[test]
fn exceptions_become_tracebacks() {
    let env = env("");
    let ret = run(&local(&env), "test.exception", "['Oh noes!']");
    let t = text(&ret);
    assert!(t.starts_with(
        "The minion function caused an exception: Traceback (most recent call last):\n"
    ));
    assert!(t.ends_with("\nException: Oh noes!\n"), "{t}");
    let ret = run(&local(&env), "test.assertion", "[false]");
    assert!(text(&ret).ends_with("\nAssertionError\n"));
    assert_eq!(
        run(&local(&env), "test.assertion", "[true]").ret,
        Value::Nil
    );
}

#[test]
fn test_functions_return_what_salt_returns() {
    let env = env("");
    let ctx = local(&env);
    let cases: &[(&str, &str, &str)] = &[
        ("test.version", "[]", "3008.3"),
        ("test.echo", "['a b']", "a b"),
        ("test.true", "[]", "True"),
        ("test.false", "[]", "False"),
        ("test.outputter", "[[1, 2]]", "[1, 2]"),
        ("test.arg", "[1, 'two', 'k=[1, 2]']", "{'args': [1, 'two'], 'kwargs': {'k': [1, 2]}}"),
        ("test.arg_repr", "[1, 'a=b']", "{'args': '(1,)', 'kwargs': \"{'a': 'b'}\"}"),
        ("test.arg_type", "[1, 'x', 'f=1.5']", "{'args': [\"<class 'int'>\", \"<class 'str'>\"], 'kwargs': {'f': \"<class 'float'>\"}}"),
        ("test.kwarg", "['a=1', {__kwarg__: true, b: null}]", "{'a': 1, 'b': None}"),
        ("test.tty", "[]", "ERROR: This function has been moved to cmd.tty"),
        ("test.cross_test", "[test.echo, [hi]]", "hi"),
        ("test.try", "['module=test.echo', 'text=hi']", "hi"),
        ("test.try", "['module=test.nope']", "None"),
        ("test.collatz", "[3]", ""),
        ("grains.get", "['deep:a:b']", "1"),
        ("grains.get", "['deep:list:x']", "1"),
        ("grains.get", "['deep:list:1']", "7"),
        ("grains.get", "['nope']", ""),
        ("grains.get", "['nope', 'dflt']", "dflt"),
        ("grains.get", "['deep|a', 'delimiter=|']", "{'b': 1}"),
        ("grains.fetch", "['os']", "Debian"),
        ("grains.has_value", "['deep:a']", "True"),
        ("grains.has_value", "['deep:z']", "False"),
        ("grains.item", "[os, roles, missing]", "{'os': 'Debian', 'roles': ['web', 'db'], 'missing': ''}"),
        ("grains.item", "[fqdn, 'sanitize=True']", "{'fqdn': 'MINION.DOMAINNAME'}"),
        ("grains.equals", "[os, Debian]", "True"),
        ("grains.ls", "[]", "['deep', 'fqdn', 'id', 'kernel', 'os', 'os_family', 'roles']"),
        ("grains.filter_by", "[{Debian: deb, RedHat: rh}]", "deb"),
        ("sys.list_modules", "['s*']", "['saltutil', 'status', 'sys']"),
        ("sys.list_functions", "['sys']", "['sys.argspec', 'sys.doc', 'sys.list_functions', 'sys.list_modules', 'sys.list_returner_functions', 'sys.list_returners', 'sys.reload_modules']"),
        ("sys.list_returners", "[]", "['master_bus', 'rawfile_json', 'syslog']"),
        ("sys.list_returners", "['s*', 'master_bus', 'mysql', [1]]", "['master_bus', 'syslog']"),
        ("sys.list_returner_functions", "[]", "['master_bus.returner', 'rawfile_json.returner', 'syslog.returner']"),
        ("sys.list_returner_functions", "['rawfile_json', '*.ret*r']", "['master_bus.returner', 'rawfile_json.returner', 'syslog.returner']"),
        ("sys.list_returner_functions", "['raw']", "[]"),
        ("sys.list_functions", "['test.v*']", "['test.version', 'test.versions', 'test.versions_information', 'test.versions_report']"),
        ("sys.argspec", "['test.echo']", "{'test.echo': {'args': ['text'], 'defaults': None, 'varargs': None, 'kwargs': None}}"),
        ("sys.argspec", "['test.arg']", "{'test.arg': {'args': None, 'defaults': None, 'varargs': True, 'kwargs': True}}"),
        ("sys.argspec", "[]", "{}"),
        ("sys.reload_modules", "[]", "True"),
        ("saltutil.running", "[]", "[]"),
        ("saltutil.find_job", "['1']", "{}"),
        ("saltutil.kill_job", "['1']", ""),
    ];
    for (fun, args, want) in cases {
        let ret = run(&ctx, fun, args);
        if *fun == "test.collatz" {
            assert_eq!(
                py_str(ret.ret.as_array().map(|a| &a[0]).unwrap_or(&Value::Nil)),
                "[3, 10, 5.0, 16.0, 8.0, 4.0, 2.0]"
            );
            continue;
        }
        assert_eq!(text(&ret), *want, "{fun} {args}");
        assert_eq!(ret.retcode, 0, "{fun} {args}");
    }
}

#[test]
fn fib_returns_the_number_and_the_time() {
    let env = env("");
    let ret = run(&local(&env), "test.fib", "[10]");
    let items = ret.ret.as_array().expect("a pair");
    assert_eq!(items[0], Value::from(55u64));
    assert!(matches!(items[1], Value::F64(t) if t >= 0.0));
    assert!(text(&run(&local(&env), "test.fib", "[-1]"))
        .ends_with("ValueError: Negative number is not allowed!\n"));
}

#[test]
fn random_hash_uses_the_requested_digest() {
    let env = env("");
    let ctx = local(&env);
    for (args, len) in [
        ("[]", 64),
        ("['hash_type=md5']", 32),
        ("['size=5', 'hash_type=sha512']", 128),
    ] {
        let ret = run(&ctx, "test.random_hash", args);
        assert_eq!(text(&ret).len(), len, "{args}");
        assert!(text(&ret).chars().all(|c| c.is_ascii_hexdigit()));
    }
    let ret = run(&ctx, "test.random_hash", "['hash_type=nope']");
    assert!(text(&ret).ends_with("AttributeError: module 'hashlib' has no attribute 'nope'\n"));
}

#[test]
fn retcode_sets_the_job_retcode() {
    let env = env("");
    let ret = run(&local(&env), "test.retcode", "[5]");
    assert_eq!(
        (ret.ret, ret.retcode, ret.success),
        (Value::Boolean(true), 5, false)
    );
    assert_eq!(run(&local(&env), "test.retcode", "[]").retcode, 42);
    assert_eq!(run(&local(&env), "test.retcode", "[0]").retcode, 0);
}

#[test]
fn published_jobs_pass_pub_fields_to_star_star_kwargs() {
    let env = env("");
    let ret = run(&published(&env), "test.arg", "[a, 'k=1']");
    let kwargs = halite_proto::value::get(&ret.ret, "kwargs").expect("kwargs");
    let keys: Vec<String> = match kwargs {
        Value::Map(entries) => entries.iter().map(|(k, _)| py_str(k)).collect(),
        _ => Vec::new(),
    };
    assert_eq!(
        keys,
        [
            "k",
            "__pub_jid",
            "__pub_tgt",
            "__pub_tgt_type",
            "__pub_ret",
            "__pub_user"
        ]
    );
    let clean = run(&published(&env), "test.arg_clean", "[a, 'k=1']");
    assert_eq!(text(&clean), "{'args': ['a'], 'kwargs': {'k': 1}}");
}

#[test]
fn multi_function_jobs_key_returns_by_function() {
    let env = env("");
    let registry = Registry::builtin();
    let ctx = local(&env);
    let ret = registry.execute(
        &ctx,
        &yaml("[test.ping, test.retcode, nope.fun, test.echo]"),
        &yaml("[[], [5], [], []]"),
    );
    assert_eq!(
        py_str(
            &halite_proto::value::get(&ret.ret, "test.ping")
                .cloned()
                .unwrap_or(Value::Nil)
        ),
        "True"
    );
    let missing = halite_proto::value::get_str(&ret.ret, "nope.fun").unwrap_or_default();
    assert!(
        missing.ends_with("TypeError: 'str' object is not callable\n"),
        "{missing}"
    );
    let multi = ret.multi.clone().expect("multi status");
    assert_eq!(
        py_str(&multi.retcode),
        "{'test.ping': 0, 'test.retcode': 5}"
    );
    assert_eq!(
        py_str(&multi.success),
        "{'test.ping': True, 'test.retcode': False, 'nope.fun': False, 'test.echo': False}"
    );
    assert_eq!(
        (ret.retcode, ret.success, ret.out.clone()),
        (5, false, None)
    );
    assert_eq!(ret.retcode_value(), multi.retcode);

    let env = env_ordered();
    let ret = registry.execute(
        &local(&env),
        &yaml("[test.ping, test.echo]"),
        &yaml("[[], [hi]]"),
    );
    assert_eq!(py_str(&ret.ret), "[True, 'hi']");
    let multi = ret.multi.expect("multi status");
    assert_eq!(py_str(&multi.retcode), "[0, 0]");
    assert_eq!(py_str(&multi.success), "[True, True]");
}

fn env_ordered() -> Env {
    env("multifunc_ordered: true\n")
}

#[test]
fn grains_items_uses_the_nested_outputter() {
    let env = env("");
    let ret = run(&local(&env), "grains.items", "[]");
    assert_eq!(ret.out.as_deref(), Some("nested"));
    assert_eq!(halite_proto::value::get_str(&ret.ret, "os"), Some("Debian"));
    let ret = run(&local(&env), "grains.items", "['sanitize=True']");
    assert_eq!(
        halite_proto::value::get_str(&ret.ret, "fqdn"),
        Some("MINION.DOMAINNAME")
    );
}

#[test]
fn blackout_blocks_all_but_whitelisted_functions() {
    let env = env("");
    let mut ctx = local(&env);
    ctx.grains = Arc::new(yaml(
        "{minion_blackout: true, minion_blackout_whitelist: [test.echo]}",
    ));
    let ret = run(&ctx, "test.ping", "[]");
    assert!(text(&ret).starts_with("ERROR executing 'test.ping': Minion in blackout mode."));
    assert_eq!(text(&run(&ctx, "test.echo", "[x]")), "x");
}

#[test]
fn cmd_run_merges_stderr_and_propagates_the_exit_code() {
    let env = env("");
    let ctx = published(&env);
    let ret = run(&ctx, "cmd.run", "['echo out; echo err >&2; exit 3']");
    assert_eq!(
        (text(&ret), ret.retcode, ret.success),
        ("out\nerr".to_owned(), 3, false)
    );
    let ret = run(&ctx, "cmd.run", "['exit 3', 'ignore_retcode=True']");
    assert_eq!((text(&ret), ret.retcode), (String::new(), 0));
    let ret = run(&ctx, "cmd.retcode", "['exit 4']");
    assert_eq!((text(&ret), ret.retcode), ("4".to_owned(), 4));
    let ret = run(&ctx, "cmd.run_stderr", "['echo out; echo err >&2']");
    assert_eq!(text(&ret), "err");
    let ret = run(&ctx, "cmd.run_stdout", "['echo out; echo err >&2']");
    assert_eq!(text(&ret), "out");
    let ret = run(&ctx, "cmd.shell", "['echo $((1+2))']");
    assert_eq!(text(&ret), "3");
    let ret = run(&ctx, "cmd.run", "['echo $FOO $LC_CTYPE', 'env={FOO: bar}']");
    assert_eq!(text(&ret), "bar C");
    let ret = run(&ctx, "cmd.run", "[cat, 'stdin=a\\nb']");
    assert_eq!(text(&ret), "a\nb");
    let ret = run(&ctx, "cmd.run", "[pwd, 'cwd=/tmp']");
    assert_eq!(text(&ret), "/tmp");
    let ret = run(&ctx, "cmd.run", "['umask', 'umask=027']");
    assert_eq!(text(&ret), "0027");
    let ret = run(&ctx, "cmd.run", "['exit 1', 'raise_err=True']");
    assert_eq!((text(&ret), ret.retcode), ("ERROR: ".to_owned(), 1));
}

#[test]
fn cmd_run_all_returns_salts_dict() {
    let env = env("");
    let ctx = published(&env);
    let ret = run(&ctx, "cmd.run_all", "['echo out; echo err >&2; exit 2']");
    let keys: Vec<String> = match &ret.ret {
        Value::Map(e) => e.iter().map(|(k, _)| py_str(k)).collect(),
        _ => Vec::new(),
    };
    assert_eq!(keys, ["pid", "retcode", "stdout", "stderr"]);
    assert_eq!(halite_proto::value::get_i64(&ret.ret, "retcode"), Some(2));
    assert_eq!(
        halite_proto::value::get_str(&ret.ret, "stdout"),
        Some("out")
    );
    assert_eq!(
        halite_proto::value::get_str(&ret.ret, "stderr"),
        Some("err")
    );
    assert_eq!(ret.retcode, 2);
    let ret = run(&ctx, "cmd.run_all", "['exit 2', 'success_retcodes=[2]']");
    assert_eq!(
        (
            halite_proto::value::get_i64(&ret.ret, "retcode"),
            ret.retcode
        ),
        (Some(0), 0)
    );
    let ret = run(&ctx, "cmd.run_all", "['echo hi', 'bg=True']");
    assert_eq!(
        halite_proto::value::get(&ret.ret, "retcode"),
        Some(&Value::Nil)
    );
}

#[test]
fn python_shell_defaults_to_off_without_a_jid() {
    let env = env("");
    let ret = run(&local(&env), "cmd.run", "['echo a | cat']");
    assert_eq!(text(&ret), "a | cat");
    let ret = run(&published(&env), "cmd.run", "['echo a | cat']");
    assert_eq!(text(&ret), "a");
    let ret = run(&local(&env), "cmd.run", "['nonexistent_cmd_xyz arg']");
    assert_eq!(
        text(&ret),
        "ERROR: Unable to run command '['nonexistent_cmd_xyz', 'arg']' with the context \
         '{'cwd': '/root', 'shell': False, 'stdout': -1, 'stderr': -2, 'with_communicate': True, \
         'timeout': None, 'bg': False, 'close_fds': True}', reason: [Errno 2] No such file or \
         directory: 'nonexistent_cmd_xyz'"
            .replace(
                "/root",
                &std::env::var("HOME").unwrap_or_else(|_| "/".into())
            )
    );
}

#[test]
fn a_timed_out_command_is_killed_with_salts_message() {
    let env = env("");
    let start = Instant::now();
    let ret = run(&local(&env), "cmd.run_all", "['sleep 30', 'timeout=1']");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(
        halite_proto::value::get_str(&ret.ret, "stdout"),
        Some("['sleep', '30'] : Timed out after 1 seconds")
    );
    assert_eq!(halite_proto::value::get_i64(&ret.ret, "retcode"), Some(1));
    assert_eq!(ret.retcode, 0);
    let ret = run(&published(&env), "cmd.run", "['sleep 30', 'timeout=1']");
    assert_eq!(text(&ret), "sleep 30 : Timed out after 1 seconds");
    let ret = run(&local(&env), "cmd.run", "['sleep 1', 'timeout=abc']");
    assert!(text(&ret)
        .ends_with("salt.exceptions.TimedProcTimeoutError: Error: timeout abc must be a number\n"));
}

#[test]
fn cancelling_a_job_stops_sleep_and_commands() {
    let env = env("");
    for (fun, args) in [
        ("test.sleep", "[30]"),
        ("cmd.run", "['sleep 30; echo done']"),
    ] {
        let ctx = published(&env);
        let job = ctx.job.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            job.cancel(9);
        });
        let start = Instant::now();
        let ret = run(&ctx, fun, args);
        canceller.join().expect("canceller");
        assert!(start.elapsed() < Duration::from_secs(10), "{fun}");
        assert_eq!(text(&ret), "The job was cancelled by signal 9", "{fun}");
        assert_eq!((ret.retcode, ret.success), (1, false));
        assert!(
            ctx.job.children().is_empty(),
            "{fun} left a child registered"
        );
    }
}

struct FakeJobs {
    jobs: Vec<Value>,
    signals: Mutex<Vec<(String, i32)>>,
}

impl JobTable for FakeJobs {
    fn running(&self) -> Vec<Value> {
        self.jobs.clone()
    }

    fn find(&self, jid: &str) -> Option<Value> {
        self.jobs
            .iter()
            .find(|j| halite_proto::value::get_str(j, "jid") == Some(jid))
            .cloned()
    }

    fn signal(&self, jid: &str, signal: i32) -> bool {
        if let Ok(mut s) = self.signals.lock() {
            s.push((jid.to_owned(), signal));
        }
        jid != "3"
    }
}

#[test]
fn saltutil_reports_and_signals_other_jobs() {
    let env = env("");
    let jobs = Arc::new(FakeJobs {
        jobs: vec![
            yaml("{pid: 100, jid: '1', fun: test.sleep, arg: [30]}"),
            yaml("{pid: 101, jid: '2', fun: cmd.run, arg: [x]}"),
            yaml("{pid: 102, jid: '3', fun: test.sleep, arg: [5]}"),
        ],
        signals: Mutex::new(Vec::new()),
    });
    let ctx = ctx_with(&env, Some("2"), jobs.clone());
    let running = run(&ctx, "saltutil.running", "[]");
    assert_eq!(
        running.ret.as_array().map(Vec::len),
        Some(2),
        "the caller is not listed"
    );
    assert_eq!(
        halite_proto::value::get_i64(&run(&ctx, "saltutil.find_job", "['1']").ret, "pid"),
        Some(100)
    );
    assert_eq!(text(&run(&ctx, "saltutil.find_job", "['2']")), "{}");
    assert_eq!(
        run(&ctx, "saltutil.is_running", "['test.*']")
            .ret
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    assert_eq!(
        text(&run(&ctx, "saltutil.kill_job", "['1']")),
        "Signal 9 sent to job 1 at pid 100"
    );
    assert_eq!(
        text(&run(&ctx, "saltutil.term_job", "['1']")),
        "Signal 15 sent to job 1 at pid 100"
    );
    assert_eq!(
        text(&run(&ctx, "saltutil.signal_job", "['1', 10]")),
        "Signal 10 sent to job 1 at pid 100"
    );
    assert_eq!(
        text(&run(&ctx, "saltutil.kill_job", "['3']")),
        "Job 3 was not running and job data has been cleaned up"
    );
    assert_eq!(text(&run(&ctx, "saltutil.kill_job", "['9']")), "");
    assert_eq!(
        text(&run(&ctx, "saltutil.term_all_jobs", "[]")),
        "['Signal 15 sent to job 1 at pid 100', 'Job 3 was not running and job data has been cleaned up']"
    );
    let signals = jobs.signals.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(signals[0], ("1".to_owned(), 9));
}

#[test]
fn status_functions_have_salts_shapes() {
    let env = env("");
    let ctx = local(&env);
    let uptime = run(&ctx, "status.uptime", "[]");
    for key in ["seconds", "since_iso", "since_t", "days", "time"] {
        assert!(
            halite_proto::value::get(&uptime.ret, key).is_some(),
            "{key}"
        );
    }
    let load = run(&ctx, "status.loadavg", "[]");
    assert!(matches!(
        halite_proto::value::get(&load.ret, "1-min"),
        Some(Value::F64(_))
    ));
    let mem = run(&ctx, "status.meminfo", "[]");
    assert!(
        halite_proto::value::get_str(
            halite_proto::value::get(&mem.ret, "MemTotal").expect("MemTotal"),
            "unit"
        ) == Some("kB")
    );
    let cpu = run(&ctx, "status.cpuinfo", "[]");
    assert!(matches!(
        halite_proto::value::get(&cpu.ret, "flags"),
        Some(Value::Array(_)) | None
    ));
    let disk = run(&ctx, "status.diskusage", "['/']");
    let root = halite_proto::value::get(&disk.ret, "/").expect("/ is listed");
    assert!(halite_proto::value::get_i64(root, "total").is_some_and(|t| t > 0));
    assert!(matches!(
        run(&ctx, "status.nproc", "[]").ret,
        Value::Integer(_)
    ));
    assert!(text(&run(&ctx, "status.version", "[]")).starts_with("Linux version"));
    let ret = run(&ctx, "status.diskusage", "[1]");
    assert!(text(&ret).ends_with("AttributeError: 'int' object has no attribute 'startswith'\n"));
}

#[test]
fn no_argument_value_panics() {
    let env = env("");
    let ctx = published(&env);
    let registry = Registry::builtin();
    let values = [
        "null",
        "true",
        "-1",
        "1.5e300",
        "''",
        "'a=b'",
        "[1, [2]]",
        "{a: 1}",
        "{__kwarg__: true, x: 1}",
        "'*'",
        "'..'",
    ];
    for name in registry.names() {
        if name.starts_with("cmd.") || matches!(name.as_str(), "test.sleep" | "test.rand_sleep") {
            continue;
        }
        for v in values {
            let _ = registry.execute(&ctx, &Value::from(name.as_str()), &yaml(&format!("[{v}]")));
            let _ = registry.execute(
                &ctx,
                &Value::from(name.as_str()),
                &yaml(&format!("[{v}, {v}, {v}]")),
            );
        }
    }
    for fun in ["null", "1", "{a: 1}", "[[1]]", "[]"] {
        let _ = registry.execute(&ctx, &yaml(fun), &yaml("[]"));
        let _ = registry.execute(&ctx, &yaml(fun), &yaml("null"));
    }
}

#[test]
fn odd_command_arguments_fail_cleanly() {
    let env = env("");
    let ctx = local(&env);
    for args in [
        "[null]",
        "[[]]",
        "[{a: 1}]",
        "[1.5]",
        "['']",
        "['true', 'timeout=-1']",
        "['true', 'timeout=.nan']",
        "['true', 'timeout=.inf']",
        "['true', 'env=[1, [2]]']",
        "['true', 'umask=[1]']",
        "['true', 'success_retcodes=[a]']",
        "['true', 'cwd=relative']",
        "['true', 'stdin=[1]']",
        "['true', 'shell=null', 'python_shell=True']",
    ] {
        for fun in ["cmd.run", "cmd.run_all", "cmd.retcode", "cmd.shell"] {
            let ret = run(&ctx, fun, args);
            assert!(ret.retcode == 0 || !ret.success, "{fun} {args}");
        }
    }
    let ret = run(&ctx, "cmd.run", "['true', 'success_retcodes=[a]']");
    assert_eq!(
        text(&ret),
        "ERROR executing 'cmd.run': success_retcodes must be a list of integers"
    );
}
