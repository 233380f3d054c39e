//! Runner behaviour through [`Registry::run`], against the fake master of `testhost`.

use std::time::{Duration, Instant};

use rmpv::Value;

use crate::pyval::{get, map};
use crate::testhost::{event_field, FakeHost, Minion};
use crate::{Registry, RunCall, RunOutcome, RunnerHost};

const RUN_JID: &str = "20240301000000000001";

fn s(text: &str) -> Value {
    Value::from(text)
}

fn list(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|i| s(i)).collect())
}

fn kwargs(pairs: &[(&str, Value)]) -> Value {
    let mut entries = vec![(s("__kwarg__"), Value::Boolean(true))];
    entries.extend(pairs.iter().map(|(k, v)| (s(k), v.clone())));
    Value::Map(entries)
}

fn run(host: &FakeHost, fun: &str, arg: Vec<Value>) -> RunOutcome {
    Registry::builtin().run(
        host,
        &RunCall {
            fun,
            arg,
            kwarg: Vec::new(),
            user: "root",
            jid: RUN_JID,
        },
    )
}

fn ret(host: &FakeHost, fun: &str, arg: Vec<Value>) -> Value {
    let out = run(host, fun, arg);
    assert!(out.success, "{fun} failed: {:?}", out.ret);
    out.ret
}

// ----- the registry and the run envelope -----------------------------------------------

#[test]
fn acl_check_hands_the_question_to_the_master() {
    let host = FakeHost::new(&[]);
    let got = ret(
        &host,
        "acl.check",
        vec![
            Value::from("fred"),
            Value::from("web*"),
            Value::from("test.ping"),
            Value::Map(vec![
                (Value::from("__kwarg__"), Value::Boolean(true)),
                (Value::from("arg"), Value::Array(vec![Value::from(1)])),
            ]),
        ],
    );
    assert_eq!(get(&got, "user"), Some(&Value::from("fred")));
    assert_eq!(get(&got, "tgt_type"), Some(&Value::from("glob")));
    assert_eq!(get(&got, "arg"), Some(&Value::Array(vec![Value::from(1)])));
    let out = run(&host, "acl.check", vec![Value::from("fred")]);
    assert!(!out.success, "missing arguments fail");
}

#[test]
fn the_registry_offers_every_manage_jobs_and_test_runner_and_acl_check() {
    let reg = Registry::builtin();
    assert_eq!(reg.names().len(), 30);
    assert!(reg.contains("acl.check"));
    for name in [
        "manage.up",
        "manage.down",
        "manage.status",
        "manage.not_reaped",
        "jobs.lookup_jid",
        "jobs.list_jobs_filter",
        "test.arg",
        "test.stream",
    ] {
        assert!(reg.contains(name), "{name}");
    }
    assert!(!reg.contains("manage.key_regen"));
    assert!(!reg.contains("test.get_opts"));
    assert_eq!(
        reg.params("manage.up"),
        Some(vec!["tgt", "tgt_type", "timeout", "gather_job_timeout"])
    );
    assert_eq!(reg.params("nope.nope"), None);
    assert_eq!(reg.params("test.arg"), Some(vec![]));
    assert!(reg.takes_kwargs("test.arg") && reg.takes_kwargs("test.raw_arg"));
    assert!(!reg.takes_kwargs("manage.up") && !reg.takes_kwargs("test.sleep"));
    assert!(!reg.takes_kwargs("nope.nope"));
}

/// Every `inv.arg("...")` in a module names a parameter of one of its runners (an unknown
/// name would silently read as `None`).
#[test]
fn runners_read_only_parameters_they_have() {
    for (module, source, reads) in [
        ("acl", include_str!("modules/acl.rs"), 5),
        ("manage", include_str!("modules/manage.rs"), 5),
        ("jobs", include_str!("modules/jobs.rs"), 5),
        ("test", include_str!("modules/test.rs"), 2),
    ] {
        let reg = Registry::builtin();
        let params: Vec<&str> = reg
            .names()
            .iter()
            .filter(|n| n.starts_with(&format!("{module}.")))
            .flat_map(|n| reg.params(n).unwrap_or_default())
            .collect();
        let mut rest = source;
        let mut seen = 0;
        while let Some(at) = rest.find("inv.arg(\"") {
            let tail = &rest[at + 9..];
            let name = &tail[..tail.find('"').expect("closing quote")];
            assert!(params.contains(&name), "{module}: {name}");
            seen += 1;
            rest = tail;
        }
        assert!(seen >= reads, "{module}: found {seen} reads");
    }
}

#[test]
fn docs_select_like_salt_run_d() {
    let reg = Registry::builtin();
    let names =
        |p: Option<&str>| -> Vec<String> { reg.doc(p).into_iter().map(|(n, _)| n).collect() };
    assert_eq!(names(None).len(), 30);
    assert_eq!(names(Some("")).len(), 30);
    assert_eq!(names(Some("manage")).len(), 15);
    assert_eq!(names(Some("manage.")).len(), 15);
    assert_eq!(names(Some("manage.up")), ["manage.up"]);
    assert_eq!(
        names(Some("jobs.list_job*")),
        ["jobs.list_job", "jobs.list_jobs", "jobs.list_jobs_filter"]
    );
    assert!(names(Some("man")).is_empty());
    let doc = &reg.doc(Some("manage.up"))[0].1;
    assert!(doc.contains("Changed in version 2017.7.0"), "{doc}");
    assert!(!doc.contains(".. code-block::"), "{doc}");
    assert!(doc.contains("\n        salt-run manage.up\n"), "{doc}");
}

#[test]
fn a_run_fires_new_and_ret_with_salts_fields() {
    let host = FakeHost::new(&[("a", Minion::up_after(0))]);
    let out = Registry::builtin().run(
        &host,
        &RunCall {
            fun: "manage.up",
            arg: vec![s("a*"), kwargs(&[("tgt_type", s("glob"))])],
            kwarg: vec![("timeout".to_owned(), Value::from(9))],
            user: "sudo_alice",
            jid: RUN_JID,
        },
    );
    assert_eq!(
        out,
        RunOutcome {
            ret: list(&["a"]),
            success: true,
            retcode: None,
            outputter: None
        }
    );
    let events = host.events();
    let tags: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        tags,
        [
            format!("salt/run/{RUN_JID}/new"),
            format!("salt/run/{RUN_JID}/ret")
        ]
    );
    let fun_args = Value::Array(vec![
        s("a*"),
        map([("tgt_type", s("glob")), ("timeout", Value::from(9))]),
    ]);
    assert_eq!(
        events[0].1,
        map([
            ("fun", s("runner.manage.up")),
            ("jid", s(RUN_JID)),
            ("user", s("sudo_alice")),
            ("fun_args", fun_args.clone()),
        ])
    );
    assert_eq!(
        events[1].1,
        map([
            ("fun", s("runner.manage.up")),
            ("jid", s(RUN_JID)),
            ("user", s("sudo_alice")),
            ("fun_args", fun_args),
            ("return", list(&["a"])),
            ("success", Value::Boolean(true)),
        ])
    );
    assert_eq!(host.published(0).timeout, Some(9));
}

#[test]
fn an_unknown_runner_gives_salts_text_and_only_a_ret_event() {
    let host = FakeHost::new(&[]);
    let out = run(&host, "manage.nope", vec![s("x")]);
    assert_eq!(out.ret, s("'manage.nope' is not available."));
    assert!(!out.success);
    assert_eq!(out.retcode, Some(254));
    let events = host.events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0],
        (
            format!("salt/run/{RUN_JID}/ret"),
            map([
                ("success", Value::Boolean(false)),
                ("return", s("'manage.nope' is not available.")),
                ("retcode", Value::from(254)),
                ("fun", s("manage.nope")),
                ("fun_args", list(&["x"])),
                ("jid", s(RUN_JID)),
            ])
        )
    );
    assert!(host.jobs().get_load(RUN_JID).unwrap().is_none());
}

#[test]
fn an_invalid_keyword_is_refused_before_the_runner_starts() {
    let host = FakeHost::new(&[("a", Minion::up_after(0))]);
    let out = run(&host, "manage.up", vec![s("bogus=1")]);
    assert_eq!(
        out.ret,
        s("The following keyword arguments are not valid: bogus=1")
    );
    assert_eq!(out.retcode, Some(254));
    assert!(host.published_funs().is_empty());
}

#[test]
fn bad_arguments_give_the_usage_text() {
    let host = FakeHost::new(&[]);
    let out = run(&host, "jobs.list_job", vec![]);
    let text = out.ret.as_str().unwrap_or_default().to_owned();
    assert!(
        text.starts_with(
            "\nPassed invalid arguments: list_job() missing 1 required positional argument: \
             'jid'\n\nUsage:\n\n    List a specific job given by its jid\n"
        ),
        "{text}"
    );
    assert!(!out.success);
    assert_eq!(out.retcode, None);
    assert_eq!(
        event_field(&host, &format!("salt/run/{RUN_JID}/ret"), "success"),
        Some(Value::Boolean(false))
    );
    assert!(event_field(&host, &format!("salt/run/{RUN_JID}/new"), "fun").is_some());
}

#[test]
fn exceptions_become_tracebacks_with_retcode_1() {
    let host = FakeHost::new(&[("a", Minion::up_after(0))]);
    let out = run(&host, "manage.up", vec![s("gather_job_timeout=abc")]);
    assert_eq!(
        out.ret,
        s(
            "Exception occurred in runner manage.up: Traceback (most recent call last):\n  \
           File \"halite-runner\", in up\nValueError: invalid literal for int() with base 10: \
           'abc'\n"
        )
    );
    assert!(!out.success);
    assert_eq!(out.retcode, Some(1));
    assert_eq!(
        event_field(&host, &format!("salt/run/{RUN_JID}/ret"), "retcode"),
        Some(Value::from(1))
    );
}

#[test]
fn no_argument_value_makes_a_runner_panic() {
    let odd = [
        Value::Nil,
        Value::Boolean(true),
        Value::from(-1),
        Value::F64(f64::NAN),
        Value::F64(1e300),
        s(""),
        s("*"),
        s("2015-13-45"),
        Value::Binary(vec![0xff, 0]),
        Value::Array(vec![Value::Nil, Value::Map(vec![])]),
        Value::Map(vec![(Value::from(1), Value::Nil)]),
        Value::Ext(1, vec![1]),
    ];
    let host = FakeHost::new(&[("a", Minion::up_after(0)), ("b", Minion::Down)]);
    let reg = Registry::builtin();
    for fun in reg.names() {
        let params = reg.params(&fun).unwrap_or_default();
        for value in &odd {
            for param in &params {
                reg.run(
                    &host,
                    &RunCall {
                        fun: &fun,
                        arg: vec![s("20240101120000000001")],
                        kwarg: vec![((*param).to_owned(), value.clone())],
                        user: "root",
                        jid: RUN_JID,
                    },
                );
                // Each call ends with its ret event.
                assert!(host
                    .events()
                    .last()
                    .is_some_and(|(t, _)| t.ends_with("/ret")));
            }
        }
    }
}

#[test]
fn runner_runs_are_stored_as_jobs_of_the_master() {
    let host = FakeHost::new(&[("a", Minion::up_after(0))]);
    run(&host, "manage.up", vec![]);
    let listed = ret(&host, "jobs.list_jobs", vec![]);
    let job = get(&listed, RUN_JID).cloned().expect("runner job listed");
    assert_eq!(
        job,
        map([
            ("Function", s("runner.manage.up")),
            ("Arguments", Value::Array(vec![])),
            ("Target", s("master1_master")),
            ("Target-type", s("list")),
            ("User", s("root")),
            ("StartTime", s("2024, Mar 01 00:00:00.000001")),
        ])
    );
    let looked = ret(&host, "jobs.lookup_jid", vec![s(RUN_JID)]);
    let data = get(&looked, "master1_master")
        .cloned()
        .expect("master return");
    assert_eq!(get(&data, "return"), Some(&list(&["a"])));
    assert_eq!(get(&data, "fun"), Some(&s("runner.manage.up")));

    let quiet = FakeHost::with_config(&[], "runner_returns: false\n");
    run(&quiet, "manage.up", vec![]);
    assert!(quiet.jobs().get_load(RUN_JID).unwrap().is_none());
}

// ----- manage ---------------------------------------------------------------------------

#[test]
fn manage_up_returns_as_soon_as_every_minion_answered() {
    let host = FakeHost::new(&[("b", Minion::up_after(0)), ("a", Minion::up_after(0))]);
    let started = Instant::now();
    let up = ret(
        &host,
        "manage.up",
        vec![s("timeout=3600"), s("gather_job_timeout=3600")],
    );
    assert_eq!(up, list(&["a", "b"]));
    assert_eq!(host.elapsed(), Duration::ZERO);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn manage_status_reports_a_dead_minion_after_timeout_and_one_probe() {
    let host = FakeHost::new(&[
        ("web2", Minion::up_after(1)),
        ("dead", Minion::Down),
        ("web1", Minion::up_after(0)),
    ]);
    let status = ret(&host, "manage.status", vec![]);
    assert_eq!(
        status,
        map([("up", list(&["web1", "web2"])), ("down", list(&["dead"]))])
    );
    // The master's timeout (5) and gather_job_timeout (10).
    assert_eq!(host.elapsed(), Duration::from_secs(15));
    assert_eq!(host.published(0).tgt, s("*"));
    assert_eq!(host.published(0).fun, "test.ping");
}

#[test]
fn manage_timeouts_follow_salts_defaults_and_conversions() {
    for (args, elapsed) in [
        (vec![s("timeout=2"), s("gather_job_timeout=3")], 5),
        (vec![s("timeout='2'"), s("gather_job_timeout=3.9")], 5),
        // Falsy values take the master's; a float timeout is ignored by the client.
        (vec![s("timeout=0"), s("gather_job_timeout=0")], 15),
        (vec![s("timeout=2.5")], 15),
        (vec![s("timeout=-4"), s("gather_job_timeout=1")], 1),
    ] {
        let host = FakeHost::with_config(&[("dead", Minion::Down)], "");
        let down = ret(&host, "manage.down", args.clone());
        assert_eq!(down, list(&["dead"]), "{args:?}");
        assert_eq!(host.elapsed(), Duration::from_secs(elapsed), "{args:?}");
    }
    let host = FakeHost::with_config(
        &[("dead", Minion::Down)],
        "timeout: 1\ngather_job_timeout: 2\n",
    );
    ret(&host, "manage.down", vec![]);
    assert_eq!(host.elapsed(), Duration::from_secs(3));
}

#[test]
fn manage_targets_and_matching_nothing() {
    let host = FakeHost::new(&[("web1", Minion::up_after(0)), ("db1", Minion::Down)]);
    assert_eq!(ret(&host, "manage.up", vec![s("web*")]), list(&["web1"]));
    assert_eq!(host.elapsed(), Duration::ZERO);
    let status = ret(
        &host,
        "manage.status",
        vec![s("tgt=[db1, web1]"), s("tgt_type=list")],
    );
    assert_eq!(
        status,
        map([("up", list(&["web1"])), ("down", list(&["db1"]))])
    );
    let none = ret(&host, "manage.status", vec![s("tgt=nomatch*")]);
    assert_eq!(
        none,
        map([("up", Value::Array(vec![])), ("down", Value::Array(vec![]))])
    );
}

#[test]
fn manage_down_removes_exactly_the_down_keys_when_asked() {
    let host = FakeHost::new(&[
        ("web*", Minion::Down),
        ("web1", Minion::up_after(0)),
        ("web2", Minion::Down),
    ]);
    assert_eq!(ret(&host, "manage.down", vec![]), list(&["web*", "web2"]));
    assert!(host.deleted().is_empty());
    assert_eq!(
        ret(&host, "manage.down", vec![s("removekeys=True")]),
        list(&["web*", "web2"])
    );
    assert_eq!(host.deleted(), ["web*", "web2"]);
}

#[test]
fn a_refused_publish_fails_the_runner_with_salt_client_error() {
    let mut host = FakeHost::new(&[("a", Minion::up_after(0))]);
    host.refuse_publish = Some("Salt request timed out.".to_owned());
    let out = run(&host, "manage.up", vec![]);
    assert!(out
        .ret
        .as_str()
        .unwrap_or_default()
        .ends_with("\nsalt.exceptions.SaltClientError: Salt request timed out.\n"));
    assert_eq!(out.retcode, Some(1));
}

fn presence_host() -> FakeHost {
    let mut host = FakeHost::new(&[
        ("c", Minion::Down),
        ("a", Minion::Down),
        ("b", Minion::Down),
        ("d", Minion::Down),
    ]);
    host.connected = vec![
        ("c".to_owned(), Some("10.0.0.3".to_owned())),
        ("a".to_owned(), Some("10.0.0.1".to_owned())),
        ("a".to_owned(), Some("fe80::1".to_owned())),
        ("ghost".to_owned(), None),
    ];
    host
}

#[test]
fn presence_lists_read_connections_and_send_nothing() {
    let host = presence_host();
    for fun in [
        "manage.present",
        "manage.joined",
        "manage.alived",
        "manage.allowed",
        "manage.reaped",
        "manage.list_state",
    ] {
        assert_eq!(ret(&host, fun, vec![]), list(&["a", "c", "ghost"]), "{fun}");
    }
    for fun in [
        "manage.not_present",
        "manage.not_joined",
        "manage.not_alived",
        "manage.not_allowed",
        "manage.not_reaped",
        "manage.list_not_state",
    ] {
        assert_eq!(ret(&host, fun, vec![]), list(&["b", "d"]), "{fun}");
    }
    assert!(host.published_funs().is_empty());
    assert_eq!(
        ret(&host, "manage.present", vec![s("show_ip=True")]),
        map([
            ("a", s("10.0.0.1")),
            ("c", s("10.0.0.3")),
            ("ghost", Value::Nil)
        ])
    );
}

#[test]
fn presence_subsets_follow_salt() {
    let host = presence_host();
    assert_eq!(
        ret(&host, "manage.present", vec![s("subset=[a, b]")]),
        list(&["a"])
    );
    // A string is a comma-separated list (Salt iterates over its characters).
    assert_eq!(
        ret(&host, "manage.present", vec![s("subset=ghost,c")]),
        list(&["c", "ghost"])
    );
    // An empty subset means everyone for the connected list, no one for the others.
    assert_eq!(
        ret(
            &host,
            "manage.present",
            vec![kwargs(&[("subset", list(&[]))])]
        ),
        list(&["a", "c", "ghost"])
    );
    assert_eq!(
        ret(
            &host,
            "manage.not_present",
            vec![kwargs(&[("subset", list(&[]))])]
        ),
        list(&[])
    );
    assert_eq!(
        ret(&host, "manage.not_present", vec![s("subset=[b, c]")]),
        list(&["b"])
    );
}

// ----- jobs -----------------------------------------------------------------------------

const J1: &str = "20240101120000000001";
const J2: &str = "20240102120000000002";
const J3: &str = "20240103120000000003";
const J4: &str = "20240104120000000004";

fn ret_load(jid: &str, id: &str, fun: &str, ret: Value, out: Option<&str>) -> Value {
    let mut load = vec![
        (s("id"), s(id)),
        (s("jid"), s(jid)),
        (s("fun"), s(fun)),
        (s("return"), ret),
        (s("retcode"), Value::from(0)),
        (s("success"), Value::Boolean(true)),
    ];
    if let Some(out) = out {
        load.push((s("out"), s(out)));
    }
    Value::Map(load)
}

/// J1 `test.ping` to a and b (b never returned), J2 `state.apply` with metadata to
/// web1 (a highstate return), J3 a `find_job` probe, J4 a multi-function job.
fn jobs_host(state_result: bool) -> FakeHost {
    let host = FakeHost::with_config(
        &[
            ("a", Minion::Down),
            ("b", Minion::Down),
            ("web1", Minion::Down),
        ],
        "runner_returns: false\n",
    );
    let store = host.jobs();
    let save = |jid: &str, load: Value, minions: &[&str]| {
        let minions: Vec<String> = minions.iter().map(|m| (*m).to_owned()).collect();
        store.save_load(jid, &load, &minions, 1).expect("save");
    };
    save(
        J1,
        map([
            ("fun", s("test.ping")),
            ("arg", Value::Array(vec![])),
            ("tgt", s("*")),
            ("tgt_type", s("glob")),
            ("jid", s(J1)),
            ("user", s("root")),
        ]),
        &["a", "b"],
    );
    save(
        J2,
        map([
            ("fun", s("state.apply")),
            (
                "arg",
                Value::Array(vec![
                    s("web"),
                    kwargs(&[("metadata", map([("team", s("x"))]))]),
                ]),
            ),
            ("tgt", s("web*")),
            ("tgt_type", s("glob")),
            ("jid", s(J2)),
            ("user", s("sudo_bob")),
        ]),
        &["web1"],
    );
    save(
        J3,
        map([
            ("fun", s("saltutil.find_job")),
            ("arg", list(&[J1])),
            ("tgt", list(&["a"])),
            ("tgt_type", s("list")),
            ("jid", s(J3)),
        ]),
        &["a"],
    );
    save(
        J4,
        map([
            ("fun", list(&["test.ping", "test.echo"])),
            (
                "arg",
                Value::Array(vec![Value::Array(vec![]), list(&["hi"])]),
            ),
            ("tgt", s("a")),
            ("tgt_type", s("glob")),
            ("jid", s(J4)),
            ("user", s("root")),
        ]),
        &["a"],
    );
    let state = map([(
        "file_|-x_|-/x_|-managed",
        map([("result", Value::Boolean(state_result))]),
    )]);
    for (jid, id, fun, value, out) in [
        (J1, "a", "test.ping", Value::Boolean(true), None),
        (J2, "web1", "state.apply", state, Some("highstate")),
        (J3, "a", "saltutil.find_job", Value::Map(vec![]), None),
    ] {
        let status = store
            .add_return(jid, id, &ret_load(jid, id, fun, value, out), 1)
            .expect("return");
        assert_eq!(status, halite_jobcache::ReturnStatus::Stored);
    }
    host
}

fn keys(v: &Value) -> Vec<String> {
    match v {
        Value::Map(entries) => entries
            .iter()
            .map(|(k, _)| k.as_str().unwrap_or_default().to_owned())
            .collect(),
        _ => panic!("not a map: {v:?}"),
    }
}

#[test]
fn list_jobs_lists_every_job_with_salts_fields() {
    let host = jobs_host(true);
    let all = ret(&host, "jobs.list_jobs", vec![]);
    assert_eq!(keys(&all), [J1, J2, J3, J4]);
    assert_eq!(
        get(&all, J2).cloned(),
        Some(map([
            ("Function", s("state.apply")),
            (
                "Arguments",
                Value::Array(vec![
                    s("web"),
                    kwargs(&[("metadata", map([("team", s("x"))]))])
                ])
            ),
            ("Target", s("web*")),
            ("Target-type", s("glob")),
            ("User", s("sudo_bob")),
            ("Metadata", map([("team", s("x"))])),
            ("StartTime", s("2024, Jan 02 12:00:00.000002")),
        ]))
    );
    let wrapped = ret(&host, "jobs.list_jobs", vec![s("outputter=yaml")]);
    assert_eq!(get(&wrapped, "outputter"), Some(&s("yaml")));
    assert_eq!(keys(get(&wrapped, "data").expect("data")), [J1, J2, J3, J4]);
}

#[test]
fn list_jobs_filters_combine() {
    let host = jobs_host(true);
    let find = |args: Vec<Value>| keys(&ret(&host, "jobs.list_jobs", args));
    assert_eq!(find(vec![s("search_function=test.*")]), [J1, J4]);
    assert_eq!(
        find(vec![s("search_function=state.apply, test.ping")]),
        [J1, J2, J4]
    );
    assert_eq!(find(vec![s("search_function=[saltutil.*]")]), [J3]);
    assert_eq!(find(vec![s("search_target=web*")]), [J2]);
    assert_eq!(find(vec![s("search_target=a")]), [J3, J4]);
    assert_eq!(find(vec![s("search_metadata={team: x, other: y}")]), [J2]);
    assert_eq!(
        find(vec![s("search_metadata={team: z}")]),
        Vec::<String>::new()
    );
    // A non-dict search_metadata matches nothing.
    assert_eq!(find(vec![s("search_metadata=team")]), Vec::<String>::new());
    assert_eq!(find(vec![s("start_time=2024-01-02")]), [J2, J3, J4]);
    assert_eq!(
        find(vec![s("end_time=2024, Jan 02 12:00:00.000002")]),
        [J1, J2]
    );
    assert_eq!(
        find(vec![
            s("start_time=Jan 2 2024"),
            s("end_time=2024-01-03T14:00:00+01:00"),
            s("search_function=saltutil.*"),
        ]),
        [J3]
    );
}

#[test]
fn list_jobs_time_filter_errors_are_salts() {
    let host = jobs_host(true);
    let out = run(&host, "jobs.list_jobs", vec![s("start_time=whenever")]);
    assert!(out
        .ret
        .as_str()
        .unwrap_or_default()
        .ends_with("\ndateutil.parser._parser.ParserError: Unknown string format: whenever\n"));
    let out = run(&host, "jobs.list_jobs", vec![s("start_time=2015")]);
    assert_eq!(
        out.ret.as_str().unwrap_or_default().lines().nth(1),
        Some("Passed invalid arguments: Parser must be a string or character stream, not int")
    );
}

#[test]
fn list_job_and_print_job_show_load_minions_and_results() {
    let host = jobs_host(true);
    let result_a = map([
        ("return", Value::Boolean(true)),
        ("retcode", Value::from(0)),
        ("success", Value::Boolean(true)),
    ]);
    let body = vec![
        (s("Function"), s("test.ping")),
        (s("Arguments"), Value::Array(vec![])),
        (s("Target"), s("*")),
        (s("Target-type"), s("glob")),
        (s("User"), s("root")),
        (s("Minions"), list(&["a", "b"])),
        (s("StartTime"), s("2024, Jan 01 12:00:00.000001")),
        (s("Result"), map([("a", result_a)])),
    ];
    let mut listed = vec![(s("jid"), s(J1))];
    listed.extend(body.clone());
    assert_eq!(ret(&host, "jobs.list_job", vec![s(J1)]), Value::Map(listed));
    assert_eq!(
        ret(&host, "jobs.print_job", vec![s(J1)]),
        Value::Map(vec![(s(J1), Value::Map(body))])
    );
    assert_eq!(
        ret(&host, "jobs.list_job", vec![s("20990101000000000000")]),
        map([
            ("jid", s("20990101000000000000")),
            (
                "Error",
                s("Cannot contact returner or no job with this jid")
            ),
            ("StartTime", s("2099, Jan 01 00:00:00.000000")),
            ("Result", Value::Map(vec![])),
        ])
    );
}

#[test]
fn lookup_jid_gives_returns_missing_minions_and_the_outputter() {
    let host = jobs_host(true);
    assert_eq!(
        ret(&host, "jobs.lookup_jid", vec![s(J1)]),
        map([("a", Value::Boolean(true))])
    );
    assert_eq!(
        ret(&host, "jobs.lookup_jid", vec![s(J1), s("missing=True")]),
        map([
            ("a", Value::Boolean(true)),
            ("b", s("Minion did not return"))
        ])
    );
    assert_eq!(
        ret(
            &host,
            "jobs.lookup_jid",
            vec![s(J1), s("returned=False"), s("missing=True")]
        ),
        map([("b", s("Minion did not return"))])
    );
    let out = run(&host, "jobs.lookup_jid", vec![s(J2)]);
    assert_eq!(out.outputter.as_deref(), Some("highstate"));
    assert_eq!(get(&out.ret, "outputter"), Some(&s("highstate")));
    assert_eq!(keys(get(&out.ret, "data").expect("data")), ["web1"]);
    assert!(out.success, "every state succeeded");

    let failed = jobs_host(false);
    let out = run(&failed, "jobs.lookup_jid", vec![s(J2)]);
    assert!(!out.success, "a state failed");
    assert_eq!(out.retcode, None);
}

#[test]
fn exit_success_is_true_for_minions_with_a_truthy_return() {
    let host = jobs_host(true);
    assert_eq!(
        ret(&host, "jobs.exit_success", vec![s(J1)]),
        map([("a", Value::Boolean(true)), ("b", Value::Boolean(false))])
    );
    assert_eq!(
        ret(&host, "jobs.exit_success", vec![s(J3)]),
        map([("a", Value::Boolean(false))])
    );
}

#[test]
fn last_run_answers_the_newest_matching_job() {
    let host = jobs_host(true);
    let last = ret(&host, "jobs.last_run", vec![s("target=web*")]);
    assert_eq!(keys(&last), [J2]);
    assert_eq!(
        get(get(&last, J2).expect("job"), "Function"),
        Some(&s("state.apply"))
    );
    let last = ret(&host, "jobs.last_run", vec![s("function=saltutil.*")]);
    assert_eq!(keys(&last), [J3]);
    assert_eq!(
        ret(&host, "jobs.last_run", vec![s("function=nope.*")]),
        Value::Boolean(false)
    );
    assert_eq!(
        ret(&host, "jobs.last_run", vec![s("metadata=team")]),
        Value::Boolean(false)
    );
    let wrapped = ret(
        &host,
        "jobs.last_run",
        vec![s("function=state.*"), s("outputter=json")],
    );
    assert_eq!(get(&wrapped, "outputter"), Some(&s("json")));
    assert_eq!(keys(get(&wrapped, "data").expect("data")), [J2]);
}

#[test]
fn list_jobs_filter_keeps_the_newest_jobs() {
    let host = jobs_host(true);
    let jids = |v: Value| -> Vec<String> {
        match v {
            Value::Array(items) => items
                .iter()
                .map(|i| {
                    get(i, "JID")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                })
                .collect(),
            other => panic!("not a list: {other:?}"),
        }
    };
    assert_eq!(
        jids(ret(&host, "jobs.list_jobs_filter", vec![Value::from(2)])),
        [J2, J4]
    );
    assert_eq!(
        jids(ret(
            &host,
            "jobs.list_jobs_filter",
            vec![Value::from(2), s("filter_find_job=False")]
        )),
        [J3, J4]
    );
    assert_eq!(
        jids(ret(&host, "jobs.list_jobs_filter", vec![Value::from(0)])),
        Vec::<String>::new()
    );
    assert_eq!(
        jids(ret(&host, "jobs.list_jobs_filter", vec![Value::F64(2.7)])),
        [J2, J4]
    );
    assert_eq!(
        jids(ret(&host, "jobs.list_jobs_filter", vec![Value::from(100)])),
        [J1, J2, J4]
    );
    let first = ret(&host, "jobs.list_jobs_filter", vec![Value::from(1)]);
    let Value::Array(items) = first else {
        panic!("not a list")
    };
    assert_eq!(
        items[0],
        map([
            ("Function", list(&["test.ping", "test.echo"])),
            (
                "Arguments",
                Value::Array(vec![Value::Array(vec![]), list(&["hi"])])
            ),
            ("Target", s("a")),
            ("Target-type", s("glob")),
            ("User", s("root")),
            ("JID", s(J4)),
            ("StartTime", s("2024, Jan 04 12:00:00.000004")),
        ])
    );
    let out = run(&host, "jobs.list_jobs_filter", vec![s("x")]);
    assert_eq!(
        out.ret.as_str().unwrap_or_default().lines().nth(1),
        Some("Passed invalid arguments: '>' not supported between instances of 'int' and 'str'")
    );
}

#[test]
fn other_returners_fail_as_salt_fails_to_load_them() {
    let host = jobs_host(true);
    let last_line = |out: RunOutcome| {
        out.ret
            .as_str()
            .unwrap_or_default()
            .trim_end()
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(
        last_line(run(
            &host,
            "jobs.list_job",
            vec![s(J1), s("ext_source=mysql")]
        )),
        "KeyError: 'mysql.get_load'"
    );
    assert_eq!(
        last_line(run(&host, "jobs.list_jobs", vec![s("ext_source=mysql")])),
        "KeyError: 'mysql.get_jids'"
    );
    assert_eq!(
        last_line(run(
            &host,
            "jobs.list_jobs_filter",
            vec![Value::from(1), s("ext_source=mysql")]
        )),
        "NotImplementedError: 'mysql.get_jids_filter' returner function not implemented yet."
    );
    assert_eq!(
        ret(
            &host,
            "jobs.list_job",
            vec![s(J1), s("ext_source=local_cache")]
        ),
        ret(&host, "jobs.list_job", vec![s(J1)])
    );
}

#[test]
fn progress_events_are_fired_when_asked() {
    let host = jobs_host(true);
    ret(
        &host,
        "jobs.lookup_jid",
        vec![s(J1), s("display_progress=True")],
    );
    let progress: Vec<Value> = host
        .events()
        .into_iter()
        .filter(|(t, _)| *t == format!("salt/run/{RUN_JID}/progress"))
        .map(|(_, d)| d)
        .collect();
    assert_eq!(
        progress,
        [
            map([("message", s("Querying returner: local_cache"))]),
            map([("message", s("a"))]),
        ]
    );
}

fn proc_entry(jid: &str, fun: &str, pid: i64) -> Value {
    map([
        ("fun", s(fun)),
        ("arg", Value::Array(vec![])),
        ("tgt", s("*")),
        ("tgt_type", s("glob")),
        ("user", s("root")),
        ("jid", s(jid)),
        ("pid", Value::from(pid)),
    ])
}

#[test]
fn active_gathers_running_jobs_by_jid() {
    let mut host = jobs_host(true);
    host.minions = vec![
        (
            "a".to_owned(),
            Minion::running(Value::Array(vec![proc_entry(J1, "test.sleep", 11)])),
        ),
        (
            "b".to_owned(),
            Minion::running(Value::Array(vec![
                proc_entry(J1, "test.sleep", 12),
                map([("fun", s("no jid"))]),
            ])),
        ),
        ("web1".to_owned(), Minion::Down),
    ];
    let active = ret(&host, "jobs.active", vec![s("display_progress=True")]);
    assert_eq!(
        active,
        map([(
            J1,
            map([
                ("Function", s("test.sleep")),
                ("Arguments", Value::Array(vec![])),
                ("Target", s("*")),
                ("Target-type", s("glob")),
                ("User", s("root")),
                ("StartTime", s("2024, Jan 01 12:00:00.000001")),
                (
                    "Running",
                    Value::Array(vec![
                        map([("a", Value::from(11))]),
                        map([("b", Value::from(12))])
                    ])
                ),
                ("Returned", list(&["a"])),
            ])
        )])
    );
    assert_eq!(host.published(0).fun, "saltutil.running");
    // The down minion costs timeout + one probe round, as for the CLI.
    assert_eq!(host.elapsed(), Duration::from_secs(15));
    assert_eq!(
        event_field(&host, &format!("salt/run/{RUN_JID}/progress"), "message"),
        Some(s("Attempting to contact minions: ['a', 'b', 'web1']"))
    );
}

#[test]
fn active_with_a_refused_publish_is_empty() {
    let mut host = jobs_host(true);
    host.refuse_publish = Some("no master".to_owned());
    assert_eq!(ret(&host, "jobs.active", vec![]), Value::Map(vec![]));
}

// ----- test ------------------------------------------------------------------------------

#[test]
fn test_arg_returns_args_and_kwargs_without_private_keywords() {
    let host = FakeHost::new(&[]);
    let arg = vec![
        Value::from(1),
        s("a=2"),
        s("__b=3"),
        kwargs(&[("c", list(&["x"]))]),
    ];
    assert_eq!(
        ret(&host, "test.arg", arg.clone()),
        map([
            ("args", Value::Array(vec![Value::from(1)])),
            ("kwargs", map([("a", Value::from(2)), ("c", list(&["x"]))])),
        ])
    );
    // The new event shows every keyword the function was called with.
    assert_eq!(
        event_field(&host, &format!("salt/run/{RUN_JID}/new"), "fun_args"),
        Some(Value::Array(vec![
            Value::from(1),
            map([
                ("a", Value::from(2)),
                ("__b", Value::from(3)),
                ("c", list(&["x"])),
            ]),
        ]))
    );
}

#[test]
fn test_raw_arg_keeps_private_keywords() {
    let host = FakeHost::new(&[]);
    assert_eq!(
        ret(&host, "test.raw_arg", vec![s("foo"), s("__bar=baz")]),
        map([
            ("args", list(&["foo"])),
            ("kwargs", map([("__bar", s("baz"))])),
        ])
    );
    assert_eq!(
        ret(&host, "test.raw_arg", vec![]),
        map([
            ("args", Value::Array(vec![])),
            ("kwargs", Value::Map(vec![])),
        ])
    );
}

/// What `halite-run -a ... test.arg 1 a=2` hands the master: Salt's `_reformat_low`
/// has already sorted the arguments into `arg` and `kwarg`.
#[test]
fn test_arg_takes_the_explicit_keywords_of_a_runner_request() {
    let host = FakeHost::new(&[]);
    let out = Registry::builtin().run(
        &host,
        &RunCall {
            fun: "test.arg",
            arg: vec![Value::from(1)],
            kwarg: vec![("a".to_owned(), Value::from(2))],
            user: "bob",
            jid: RUN_JID,
        },
    );
    assert_eq!(
        out,
        RunOutcome {
            ret: map([
                ("args", Value::Array(vec![Value::from(1)])),
                ("kwargs", map([("a", Value::from(2))])),
            ]),
            success: true,
            retcode: None,
            outputter: None,
        }
    );
}

#[test]
fn test_arg_with_a_keyword_name_that_is_not_a_str_is_a_type_error() {
    let host = FakeHost::new(&[]);
    let bytes_name = Value::Map(vec![
        (s("__kwarg__"), Value::Boolean(true)),
        (Value::Binary(b"x".to_vec()), Value::from(1)),
    ]);
    let out = run(&host, "test.arg", vec![bytes_name]);
    let text = out.ret.as_str().unwrap_or_default().to_owned();
    assert!(text.starts_with("\nPassed invalid arguments: "), "{text}");
    assert!(text.contains("keywords must be strings"), "{text}");
    assert!(!out.success);
}

#[test]
fn test_metasyntactic_answers_the_us_and_uk_lists_and_none_otherwise() {
    let host = FakeHost::new(&[]);
    let us = ret(&host, "test.metasyntactic", vec![]);
    let us = us.as_array().cloned().unwrap_or_default();
    assert_eq!(us.len(), 14);
    assert_eq!(us.first(), Some(&s("foo")));
    assert_eq!(us.last(), Some(&s("thud")));
    let uk = list(&["wibble", "wobble", "wubble", "flob"]);
    assert_eq!(ret(&host, "test.metasyntactic", vec![s("locality=uk")]), uk);
    assert_eq!(ret(&host, "test.metasyntactic", vec![s("uk")]), uk);
    for other in [
        s("fr"),
        s("UK"),
        Value::from(1),
        Value::Nil,
        Value::Binary(b"us".to_vec()),
    ] {
        assert_eq!(
            ret(&host, "test.metasyntactic", vec![other.clone()]),
            Value::Nil,
            "{other:?}"
        );
    }
}

#[test]
fn test_metasyntactic_with_an_unhashable_locality_is_a_type_error() {
    let host = FakeHost::new(&[]);
    for (locality, ty) in [(list(&["us"]), "list"), (map([("us", Value::Nil)]), "dict")] {
        let out = run(&host, "test.metasyntactic", vec![locality]);
        let text = out.ret.as_str().unwrap_or_default().to_owned();
        assert!(
            text.starts_with(&format!(
                "\nPassed invalid arguments: unhashable type: '{ty}'\n\nUsage:\n\n    Return \
                 common metasyntactic variables"
            )),
            "{text}"
        );
        assert!(!out.success);
    }
}

#[test]
fn test_stdout_print_returns_bar_and_takes_no_arguments() {
    let host = FakeHost::new(&[]);
    assert_eq!(ret(&host, "test.stdout_print", vec![]), s("bar"));
    let out = run(&host, "test.stdout_print", vec![s("x")]);
    let text = out.ret.as_str().unwrap_or_default().to_owned();
    assert!(
        text.starts_with(
            "\nPassed invalid arguments: stdout_print() takes 0 positional arguments but 1 \
             was given\n"
        ),
        "{text}"
    );
}

#[test]
fn test_sleep_sleeps_s_time_seconds_then_returns_true() {
    let host = FakeHost::new(&[]);
    assert_eq!(
        ret(&host, "test.sleep", vec![s("s_time=3")]),
        Value::Boolean(true)
    );
    assert_eq!(host.elapsed(), Duration::from_secs(3));
    assert_eq!(
        ret(&host, "test.sleep", vec![Value::F64(0.5)]),
        Value::Boolean(true)
    );
    assert_eq!(host.elapsed(), Duration::from_millis(3500));
    ret(&host, "test.sleep", vec![]);
    assert_eq!(host.elapsed(), Duration::from_millis(13500));
}

#[test]
fn test_sleep_with_a_bad_length_fails_as_time_sleep_does() {
    let host = FakeHost::new(&[]);
    let out = run(&host, "test.sleep", vec![Value::from(-1)]);
    assert_eq!(
        out.ret,
        s(
            "Exception occurred in runner test.sleep: Traceback (most recent call last):\n  \
           File \"halite-runner\", in sleep\nValueError: sleep length must be non-negative\n"
        )
    );
    assert_eq!(out.retcode, Some(1));
    let out = run(&host, "test.sleep", vec![s("soon")]);
    let text = out.ret.as_str().unwrap_or_default().to_owned();
    assert!(
        text.starts_with(
            "\nPassed invalid arguments: 'str' object cannot be interpreted as an integer\n"
        ),
        "{text}"
    );
    assert_eq!(host.elapsed(), Duration::ZERO);
}

#[test]
fn test_stream_fires_99_progress_events_a_tenth_of_a_second_apart() {
    let host = FakeHost::new(&[]);
    assert_eq!(ret(&host, "test.stream", vec![]), Value::Boolean(true));
    let events = host.events();
    let progress = format!("salt/run/{RUN_JID}/progress");
    let messages: Vec<Value> = events
        .iter()
        .filter(|(t, _)| *t == progress)
        .map(|(_, d)| d.clone())
        .collect();
    assert_eq!(messages.len(), 99);
    assert_eq!(messages[0], map([("message", s("Runner is 1% done"))]));
    assert_eq!(messages[98], map([("message", s("Runner is 99% done"))]));
    // new, the progress events, then ret.
    assert_eq!(events.len(), 101);
    assert!(events[0].0.ends_with("/new") && events[100].0.ends_with("/ret"));
    assert_eq!(host.elapsed(), Duration::from_millis(9900));
}
