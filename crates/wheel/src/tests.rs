//! Wheel behaviour through [`Registry::run`], against the fake master of `testhost`.

use halite_keystore::KeyState::{self, Accepted, Denied, Pending, Rejected};
use halite_proto::pem::clean_key;
use halite_proto::value::{get, map, s};
use rmpv::Value;

use crate::testhost::{pubkey, FakeHost};
use crate::{reply, requested_jid, Registry, WheelArgs, WheelCall, WheelOutcome, REDACTED};

const JID: &str = "20240301000000000001";

fn list(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|i| s(*i)).collect())
}

fn call<'a>(fun: &'a str, fields: &[(&str, Value)]) -> WheelCall<'a> {
    WheelCall {
        fun,
        args: WheelArgs::Low(fields.iter().map(|(k, v)| (s(*k), v.clone())).collect()),
        user: "root",
        jid: JID,
    }
}

fn run(host: &FakeHost, fun: &str, fields: &[(&str, Value)]) -> WheelOutcome {
    Registry::builtin().run(host, &call(fun, fields))
}

fn ret(host: &FakeHost, fun: &str, fields: &[(&str, Value)]) -> Value {
    let out = run(host, fun, fields);
    assert!(out.success, "{fun} failed: {}", out.ret);
    out.ret
}

fn text(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v}"))
        .to_owned()
}

/// `(act, id, pub present)` of each `salt/key` event.
fn acts(host: &FakeHost) -> Vec<(String, String, bool)> {
    host.key_events()
        .iter()
        .map(|d| {
            assert_eq!(get(d, "result"), Some(&Value::Boolean(true)));
            (
                text(get(d, "act").expect("act")),
                text(get(d, "id").expect("id")),
                get(d, "pub").is_some(),
            )
        })
        .collect()
}

fn state_of(host: &FakeHost, id: &str) -> Option<KeyState> {
    host.store.get(id).unwrap().map(|(state, _)| state)
}

// ----- the registry and the run envelope -----------------------------------------------

#[test]
fn the_registry_offers_salts_key_functions_minions_connected_and_config_values() {
    let reg = Registry::builtin();
    assert_eq!(reg.names().len(), 20, "{:?}", reg.names());
    for name in [
        "key.list",
        "key.print",
        "key.list_all",
        "key.accept_dict",
        "key.gen_accept",
        "key.name_match",
        "minions.connected",
        "config.values",
    ] {
        assert!(reg.contains(name), "{name}");
    }
    assert!(
        !reg.contains("key.list_"),
        "the Python name is not the wheel name"
    );
    assert!(!reg.contains("config.apply"));
    assert_eq!(
        reg.params("key.gen_accept"),
        Some(vec!["id_", "keysize", "force"])
    );
    assert_eq!(reg.params("nope.nope"), None);
    for slow in [
        "key.gen",
        "key.gen_accept",
        "key.gen_keys",
        "key.gen_signature",
    ] {
        assert!(reg.is_slow(slow), "{slow}");
    }
    assert!(!reg.is_slow("key.accept") && !reg.is_slow("nope.nope"));
}

/// Every `inv.arg("...")` in a module names a parameter of one of its functions (an
/// unknown name would silently read as `None`).
#[test]
fn functions_read_only_parameters_they_have() {
    for (module, source, reads) in [
        ("key", include_str!("modules/key.rs"), 20),
        ("minions", include_str!("modules/minions.rs"), 0),
        ("config", include_str!("modules/config.rs"), 0),
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
fn a_call_fires_new_and_ret_with_salts_fields_stores_the_run_and_replies_with_the_tag() {
    let host = FakeHost::with_keys(&[(Pending, "web1")]);
    let c = WheelCall {
        fun: "key.accept",
        args: WheelArgs::Low(vec![
            (s("cmd"), s("wheel")),
            (s("match"), s("web*")),
            (s("__jid__"), s("x")),
            (s("print_event"), Value::Boolean(false)),
        ]),
        user: "fred",
        jid: JID,
    };
    let out = Registry::builtin().run(&host, &c);
    assert_eq!(
        out,
        WheelOutcome {
            ret: map([("minions", list(&["web1"]))]),
            success: true,
            retcode: None
        }
    );
    let events = host.events();
    let tags: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        tags,
        [
            format!("salt/wheel/{JID}/new").as_str(),
            "salt/key",
            format!("salt/wheel/{JID}/ret").as_str()
        ]
    );
    // `format_call`'s keyword dict: the defaults in reverse parameter order.
    let fun_args = Value::Array(vec![
        s("web*"),
        map([
            ("include_denied", Value::Boolean(false)),
            ("include_rejected", Value::Boolean(false)),
        ]),
    ]);
    let new = map([
        ("fun", s("wheel.key.accept")),
        ("jid", s(JID)),
        ("user", s("fred")),
        ("fun_args", fun_args.clone()),
    ]);
    assert_eq!(events[0].1, new);
    assert_eq!(
        events[2].1,
        map([
            ("fun", s("wheel.key.accept")),
            ("jid", s(JID)),
            ("user", s("fred")),
            ("fun_args", fun_args),
            ("return", map([("minions", list(&["web1"]))])),
            ("success", Value::Boolean(true)),
        ])
    );
    let job = host.jobs_load(JID).expect("the run is in the job cache");
    assert_eq!(get(&job, "fun"), Some(&s("wheel.key.accept")));
    assert_eq!(get(&job, "tgt"), Some(&s("master1_master")));
    let tag = format!("salt/wheel/{JID}");
    assert_eq!(
        reply(&c, &out),
        map([
            ("tag", s(tag.as_str())),
            (
                "data",
                map([
                    ("fun", s("wheel.key.accept")),
                    ("jid", s(JID)),
                    ("tag", s(tag.as_str())),
                    ("user", s("fred")),
                    ("return", map([("minions", list(&["web1"]))])),
                    ("success", Value::Boolean(true)),
                ])
            )
        ])
    );
}

#[test]
fn an_unknown_function_fires_only_ret_with_the_exception_salt_means() {
    let host = FakeHost::with_keys(&[]);
    let out = run(&host, "nope.nope", &[]);
    assert!(!out.success);
    assert_eq!(out.retcode, Some(1));
    let text = text(&out.ret);
    assert!(
        text.starts_with("Exception occurred in wheel nope.nope: Traceback"),
        "{text}"
    );
    assert!(
        text.contains("CommandExecutionError: 'nope.nope' is not available."),
        "{text}"
    );
    let events = host.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, format!("salt/wheel/{JID}/ret"));
    assert_eq!(get(&events[0].1, "retcode"), Some(&Value::from(1)));
    assert_eq!(get(&events[0].1, "fun_args"), None);
}

#[test]
fn fields_that_do_not_fit_are_salts_invocation_errors_and_bad_explicit_arguments_a_usage() {
    let host = FakeHost::with_keys(&[]);
    let out = run(&host, "key.list_all", &[("user", s("root"))]);
    assert!(!out.success);
    assert!(
        text(&out.ret).contains(
            "SaltInvocationError: 'user' is an invalid keyword argument for 'salt.loaded.int.wheel.key.list_all'"
        ),
        "{}",
        out.ret
    );
    let out = run(&host, "key.accept", &[]);
    assert!(text(&out.ret).contains("accept takes at least 1 argument (0 given)"));
    assert!(host.events().iter().all(|(t, _)| !t.ends_with("/new")));

    let explicit = WheelCall {
        fun: "key.list",
        args: WheelArgs::Explicit {
            arg: Value::Array(vec![]),
            kwarg: Value::Map(vec![]),
        },
        user: "root",
        jid: JID,
    };
    let out = Registry::builtin().run(&host, &explicit);
    assert!(!out.success);
    assert_eq!(out.retcode, None);
    let text = text(&out.ret);
    assert!(
        text.starts_with(
            "\nPassed invalid arguments: list_() missing 1 required positional argument: 'match'\n\nUsage:\n"
        ),
        "{text}"
    );
    assert!(text.contains("List all the keys under a named status"));
    let explicit = WheelCall {
        args: WheelArgs::Explicit {
            arg: list(&["acc"]),
            kwarg: Value::Map(vec![]),
        },
        ..explicit
    };
    assert_eq!(
        Registry::builtin().run(&host, &explicit).ret,
        map([("minions", list(&[]))])
    );
}

#[test]
fn no_argument_value_makes_a_function_panic() {
    let host = FakeHost::with_keys(&[(Pending, "web1"), (Denied, "web1")]);
    let weird = [
        Value::Nil,
        Value::from(7),
        Value::from(-1),
        Value::from(1e300),
        Value::Boolean(true),
        s(""),
        s("../../etc"),
        s("a\0b"),
        Value::Binary(b"web1".to_vec()),
        list(&["*", ".."]),
        Value::Array(vec![Value::from(1)]),
        map([("minions_pre", Value::from(1))]),
        map([("minions_pre", list(&["../x"]))]),
        map([("x", s("y"))]),
    ];
    let reg = Registry::builtin();
    for fun in reg.names() {
        for param in reg.params(&fun).unwrap_or_default() {
            for v in &weird {
                let mut fields = vec![(param, v.clone())];
                // Keep key generation out of it: a size above the limit is refused before
                // anything is generated (sizes have their own test).
                if reg.is_slow(&fun) {
                    if param == "keysize" {
                        continue;
                    }
                    fields.push(("keysize", Value::from(65536)));
                }
                let _ = run(&host, &fun, &fields);
            }
        }
    }
    assert_eq!(state_of(&host, "web1"), None, "deleted by some call");
}

#[test]
fn a_requested_jid_is_taken_when_well_formed_and_unused() {
    let host = FakeHost::with_keys(&[]);
    let latest = "20240301000000000009";
    let asked = |jid: &str| requested_jid(&host, &map([("__jid__", s(jid))]), latest);
    assert_eq!(asked(JID), Some(JID.to_owned()));
    assert_eq!(asked(latest), Some(latest.to_owned()));
    assert_eq!(asked("20240301000000000010"), None, "a jid of the future");
    assert_eq!(asked("12"), None);
    assert_eq!(asked("../../x"), None);
    assert_eq!(requested_jid(&host, &map([("fun", s("x"))]), latest), None);
    run(&host, "key.list_all", &[]);
    assert_eq!(asked(JID), None, "the run is stored under it now");
}

// ----- listing ---------------------------------------------------------------------------

#[test]
fn list_all_and_list_answer_salts_directories() {
    let host = FakeHost::with_keys(&[
        (Accepted, "b"),
        (Accepted, "A"),
        (Pending, "p"),
        (Rejected, "r"),
        (Denied, "d"),
    ]);
    assert_eq!(
        ret(&host, "key.list_all", &[]),
        map([
            ("minions_pre", list(&["p"])),
            ("minions_rejected", list(&["r"])),
            ("minions", list(&["A", "b"])),
            ("minions_denied", list(&["d"])),
            ("local", list(&["master1.pem", "master1.pub"])),
        ])
    );
    let l = |m: &str| ret(&host, "key.list", &[("match", s(m))]);
    assert_eq!(l("accepted"), map([("minions", list(&["A", "b"]))]));
    assert_eq!(l("un"), map([("minions_pre", list(&["p"]))]));
    assert_eq!(l("pre"), map([("minions_pre", list(&["p"]))]));
    assert_eq!(l("rej"), map([("minions_rejected", list(&["r"]))]));
    assert_eq!(l("den"), map([("minions_denied", list(&["d"]))]));
    assert_eq!(l("all"), ret(&host, "key.list_all", &[]));
    assert_eq!(l("nope"), Value::Map(vec![]));
    let out = run(&host, "key.list", &[("match", Value::from(1))]);
    assert!(text(&out.ret).contains("AttributeError: 'int' object has no attribute 'startswith'"));
}

#[test]
fn glob_match_splits_commas_takes_lists_and_groups_in_list_keys_order() {
    let host = FakeHost::with_keys(&[
        (Accepted, "web1"),
        (Pending, "web2"),
        (Rejected, "db"),
        (Denied, "web1"),
    ]);
    let expected = map([
        ("minions_pre", list(&["web2"])),
        ("minions_rejected", list(&["db"])),
        ("minions", list(&["web1"])),
        ("minions_denied", list(&["web1"])),
    ]);
    assert_eq!(
        ret(&host, "key.glob_match", &[("match", s("web*,db"))]),
        expected
    );
    assert_eq!(
        ret(&host, "key.glob_match", &[("match", list(&["web*", "db"]))]),
        expected
    );
    assert_eq!(
        ret(&host, "key.name_match", &[("match", s("web*,db"))]),
        expected
    );
    assert_eq!(
        ret(&host, "key.glob_match", &[("match", s("zz*"))]),
        Value::Map(vec![])
    );
}

// ----- state changes ---------------------------------------------------------------------

#[test]
fn accept_moves_matching_pending_keys_fires_accepted_with_the_key_and_answers_the_glob() {
    let host = FakeHost::with_keys(&[
        (Pending, "web1"),
        (Pending, "web2"),
        (Accepted, "web3"),
        (Rejected, "web4"),
        (Pending, "db1"),
    ]);
    let got = ret(&host, "key.accept", &[("match", s("web*"))]);
    assert_eq!(
        got,
        map([
            ("minions_rejected", list(&["web4"])),
            ("minions", list(&["web1", "web2", "web3"])),
        ])
    );
    assert_eq!(
        acts(&host),
        [
            ("accepted".into(), "web1".into(), true),
            ("accepted".into(), "web2".into(), true),
        ]
    );
    let first = &host.key_events()[0];
    assert_eq!(
        get(first, "pub"),
        Some(&s(clean_key(&pubkey(0)))),
        "the event carries the key"
    );
    assert_eq!(state_of(&host, "db1"), Some(Pending));
    assert_eq!(host.changes(), 1);
}

#[test]
fn accept_takes_rejected_and_denied_keys_only_when_included() {
    let host = FakeHost::with_keys(&[(Rejected, "r1"), (Accepted, "d1"), (Denied, "d1")]);
    assert_eq!(
        ret(&host, "key.accept", &[("match", s("*"))]),
        map([
            ("minions_rejected", list(&["r1"])),
            ("minions", list(&["d1"])),
            ("minions_denied", list(&["d1"])),
        ])
    );
    assert!(acts(&host).is_empty());
    assert_eq!(host.changes(), 0, "nothing changed, nothing to tell");
    let got = ret(
        &host,
        "key.accept",
        &[
            ("match", s("*")),
            ("include_rejected", Value::Boolean(true)),
            ("include_denied", Value::Boolean(true)),
        ],
    );
    assert_eq!(got, map([("minions", list(&["d1", "r1"]))]));
    assert_eq!(
        acts(&host),
        [
            ("accepted".into(), "r1".into(), true),
            ("accepted".into(), "d1".into(), true),
        ]
    );
    // The denied key replaced d1's key.
    assert_eq!(
        host.store.get("d1").unwrap(),
        Some((Accepted, clean_key(&pubkey(2))))
    );
}

#[test]
fn an_invalid_key_is_left_pending_and_fires_nothing() {
    let host = FakeHost::with_keys(&[(Pending, "good")]);
    host.store
        .put(
            "bad",
            Pending,
            "-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----",
        )
        .unwrap();
    let got = ret(&host, "key.accept", &[("match", s("*"))]);
    assert_eq!(
        got,
        map([
            ("minions_pre", list(&["bad"])),
            ("minions", list(&["good"]))
        ])
    );
    assert_eq!(acts(&host), [("accepted".into(), "good".into(), true)]);
}

#[test]
fn accept_dict_moves_only_listed_pending_ids_and_answers_where_they_are() {
    let host = FakeHost::with_keys(&[
        (Pending, "a"),
        (Pending, "b"),
        (Rejected, "c"),
        (Pending, "d"),
    ]);
    let got = ret(
        &host,
        "key.accept_dict",
        &[(
            "match",
            map([
                ("minions_pre", list(&["b", "a", "ghost"])),
                ("minions_rejected", list(&["c"])),
                ("elsewhere", s("d")),
            ]),
        )],
    );
    // dict_match: every entry's ids (sorted, as globs), wherever they are now.
    assert_eq!(
        got,
        map([
            ("minions", list(&["a", "b"])),
            ("minions_rejected", list(&["c"])),
            ("minions_pre", list(&["d"])),
        ])
    );
    assert_eq!(
        acts(&host),
        [
            ("accepted".into(), "b".into(), true),
            ("accepted".into(), "a".into(), true),
        ],
        "ids without a key are skipped; rejected ones are not included"
    );
    let included = ret(
        &host,
        "key.accept_dict",
        &[
            ("match", map([("minions_rejected", list(&["c"]))])),
            ("include_rejected", Value::Boolean(true)),
        ],
    );
    assert_eq!(included, map([("minions", list(&["c"]))]));
    assert_eq!(
        ret(&host, "key.accept_dict", &[("match", s("a"))]),
        Value::Map(vec![]),
        "a match that is not a dict selects nothing"
    );
    let bad = run(
        &host,
        "key.accept_dict",
        &[("match", map([("minions_pre", list(&["../d"]))]))],
    );
    assert!(
        text(&bad.ret).contains("SaltCacheError: key ../d is not a valid minion_id"),
        "{}",
        bad.ret
    );
}

#[test]
fn reject_moves_pending_keys_and_accepted_ones_when_included_and_tells_the_host() {
    let host = FakeHost::with_keys(&[(Pending, "p1"), (Accepted, "a1"), (Denied, "d1")]);
    assert_eq!(
        ret(&host, "key.reject", &[("match", s("*1"))]),
        map([
            ("minions_rejected", list(&["p1"])),
            ("minions", list(&["a1"])),
            ("minions_denied", list(&["d1"])),
        ])
    );
    assert_eq!(acts(&host), [("rejected".into(), "p1".into(), true)]);
    assert_eq!(host.changes(), 1);
    let got = ret(
        &host,
        "key.reject",
        &[
            ("match", s("a1")),
            ("include_accepted", Value::Boolean(true)),
        ],
    );
    assert_eq!(got, map([("minions_rejected", list(&["a1"]))]));
    assert_eq!(host.changes(), 2);
    let got = ret(
        &host,
        "key.reject_dict",
        &[
            ("match", map([("minions_denied", list(&["d1"]))])),
            ("include_denied", Value::Boolean(true)),
        ],
    );
    assert_eq!(got, map([("minions_rejected", list(&["d1"]))]));
    assert_eq!(
        acts(&host).last(),
        Some(&("rejected".into(), "d1".into(), true))
    );
}

#[test]
fn delete_removes_every_matching_key_in_every_state_and_fires_delete_per_key() {
    let host = FakeHost::with_keys(&[
        (Accepted, "web1"),
        (Pending, "web2"),
        (Denied, "web1"),
        (Accepted, "db"),
    ]);
    assert_eq!(
        ret(&host, "key.delete", &[("match", s("web*"))]),
        Value::Map(vec![])
    );
    assert_eq!(
        acts(&host),
        [
            ("delete".into(), "web2".into(), false),
            ("delete".into(), "web1".into(), false),
            ("delete".into(), "web1".into(), false),
        ]
    );
    assert_eq!(state_of(&host, "web1"), None);
    assert_eq!(host.store.get_denied("web1").unwrap(), None);
    assert_eq!(state_of(&host, "db"), Some(Accepted));
    assert_eq!(host.changes(), 1);
    assert_eq!(
        ret(&host, "key.delete", &[("match", s("nothing*"))]),
        Value::Map(vec![])
    );
    assert_eq!(host.changes(), 1, "nothing deleted, nothing to tell");
}

#[test]
fn delete_dict_deletes_each_listed_id_whatever_its_state_and_fires_for_each() {
    let host = FakeHost::with_keys(&[
        (Pending, "p1"),
        (Accepted, "a1"),
        (Denied, "a1"),
        (Accepted, "keep"),
    ]);
    let got = ret(
        &host,
        "key.delete_dict",
        &[(
            "match",
            map([
                // p1 is pending, listed as accepted: Salt's flush("keys") removes it.
                ("minions", list(&["p1", "zzz"])),
                ("minions_denied", s("a1")),
                ("keep", list(&["keep"])),
            ]),
        )],
    );
    assert_eq!(
        acts(&host),
        [
            ("delete".into(), "p1".into(), false),
            ("delete".into(), "zzz".into(), false),
            ("delete".into(), "a1".into(), false),
            ("delete".into(), "keep".into(), false),
        ]
    );
    assert_eq!(state_of(&host, "p1"), None);
    assert_eq!(host.store.get_denied("a1").unwrap(), None);
    assert_eq!(
        state_of(&host, "a1"),
        Some(Accepted),
        "only its denied key went"
    );
    assert_eq!(
        state_of(&host, "keep"),
        None,
        "an unknown status deletes too"
    );
    assert_eq!(got, map([("minions", list(&["a1"]))]));
}

// ----- key texts and fingerprints -------------------------------------------------------

#[test]
fn print_answers_the_key_texts_by_directory() {
    let host = FakeHost::with_keys(&[(Accepted, "m1"), (Denied, "m1"), (Pending, "x")]);
    assert_eq!(
        ret(&host, "key.print", &[("match", s("m1,m*"))]),
        map([
            ("minions", map([("m1", s(clean_key(&pubkey(0))))])),
            ("minions_denied", map([("m1", s(clean_key(&pubkey(1))))])),
        ])
    );
}

#[test]
fn finger_hashes_matching_keys_and_local_files_with_the_masters_hash_type_or_the_given_one() {
    let host = FakeHost::with_keys(&[(Accepted, "m1"), (Denied, "m1")]);
    let fp = |text: &str, hash| halite_keystore::key_fingerprint(text, hash).unwrap();
    let local_pub = host.store.read_local("master1.pub").unwrap().unwrap();
    let local_pem = host.store.read_local("master1.pem").unwrap().unwrap();
    let acc = clean_key(&pubkey(0));
    let den = clean_key(&pubkey(1));
    assert_eq!(
        ret(&host, "key.finger", &[("match", s("*"))]),
        map([
            ("minions", map([("m1", s(fp(&acc, "sha256")))])),
            ("minions_denied", map([("m1", s(fp(&den, "sha256")))])),
            (
                "local",
                map([
                    ("master1.pem", s(fp(&local_pem, "sha256"))),
                    ("master1.pub", s(fp(&local_pub, "sha256"))),
                ])
            ),
        ])
    );
    assert_eq!(
        ret(
            &host,
            "key.finger",
            &[("match", s("*.pub")), ("hash_type", s("md5"))]
        ),
        map([("local", map([("master1.pub", s(fp(&local_pub, "md5")))]))])
    );
    let bad = run(
        &host,
        "key.finger",
        &[("match", s("m1")), ("hash_type", s("nope"))],
    );
    assert!(text(&bad.ret).contains("AttributeError: module 'hashlib' has no attribute 'nope'"));
}

#[test]
fn finger_master_is_the_minions_master_finger_of_master_pub() {
    let host = FakeHost::with_keys(&[]);
    let path = host.opts.pki_dir.join("master.pub");
    let bytes = std::fs::read(&path).unwrap();
    let expected = halite_proto::pem::pem_finger(&bytes, "sha256").unwrap();
    assert_eq!(
        ret(&host, "key.finger_master", &[]),
        map([("local", map([("master.pub", s(expected))]))])
    );
    std::fs::remove_file(&path).unwrap();
    assert_eq!(
        ret(&host, "key.finger_master", &[]),
        map([("local", map([("master.pub", s(""))]))])
    );
}

#[test]
fn master_key_str_is_the_id_named_public_key_even_without_its_file() {
    let host = FakeHost::with_keys(&[]);
    let public = host.store.read_local("master1.pub").unwrap().unwrap();
    let expected = map([("local", map([("master1.pub", s(clean_key(&public)))]))]);
    assert_eq!(ret(&host, "key.master_key_str", &[]), expected);
    std::fs::remove_file(host.opts.pki_dir.join("master1.pub")).unwrap();
    assert_eq!(ret(&host, "key.master_key_str", &[]), expected);
}

// ----- generation ------------------------------------------------------------------------

#[test]
fn gen_returns_a_pair_to_the_caller_and_only_a_redacted_one_to_the_bus() {
    let host = FakeHost::with_keys(&[]);
    let got = ret(&host, "key.gen", &[("keysize", Value::from(1024))]);
    let private = text(get(&got, "priv").expect("priv"));
    let public = text(get(&got, "pub").expect("pub"));
    let key = halite_proto::rsa::PrivateKey::from_pem(private.as_bytes()).unwrap();
    assert_eq!(key.bits(), 2048, "below 2048 is raised to 2048");
    assert!(private.starts_with("-----BEGIN RSA PRIVATE KEY-----\n"));
    assert_eq!(key.public_key().unwrap().to_pem().unwrap(), public);
    let ret_event = host
        .events()
        .into_iter()
        .find(|(t, _)| t.ends_with("/ret"))
        .expect("ret event")
        .1;
    let fired = get(&ret_event, "return").expect("return");
    assert_eq!(get(fired, "priv"), Some(&s(REDACTED)));
    assert_eq!(get(fired, "pub"), Some(&s(public.as_str())));
    let stored = host.jobs_load(JID).expect("stored");
    assert!(!stored.to_string().contains("PRIVATE KEY"), "{stored}");
    let refused = run(&host, "key.gen", &[("keysize", Value::from(65536))]);
    assert!(text(&refused.ret).contains("The maximum value for keysize is 32768"));
    assert!(acts(&host).is_empty());
}

#[test]
fn gen_accept_accepts_a_new_key_keeps_an_existing_one_unless_forced() {
    let host = FakeHost::with_keys(&[(Pending, "old")]);
    let got = ret(&host, "key.gen_accept", &[("id_", s(" new.example.com "))]);
    let public = text(get(&got, "pub").expect("pub"));
    assert_eq!(
        host.store.get("new.example.com").unwrap(),
        Some((Accepted, clean_key(&public)))
    );
    assert_eq!(host.changes(), 1);
    assert!(
        acts(&host).is_empty(),
        "Salt fires no salt/key for gen_accept"
    );

    assert_eq!(
        ret(&host, "key.gen_accept", &[("id_", s("old"))]),
        Value::Map(vec![]),
        "a pending key counts as existing"
    );
    assert_eq!(state_of(&host, "old"), Some(Pending));
    let forced = ret(
        &host,
        "key.gen_accept",
        &[("id_", s("old")), ("force", Value::Boolean(true))],
    );
    assert_eq!(
        host.store.get("old").unwrap(),
        Some((Accepted, clean_key(&text(get(&forced, "pub").unwrap()))))
    );
    // `clean.id`: only [a-zA-Z0-9.-], dots stripped at the ends; empty refused.
    ret(&host, "key.gen_accept", &[("id_", s("../we b$1."))]);
    assert_eq!(state_of(&host, "..web1"), None);
    assert_eq!(state_of(&host, "web1"), Some(Accepted));
    let empty = run(&host, "key.gen_accept", &[("id_", s("  "))]);
    assert!(text(&empty.ret).contains("CommandExecutionError: Empty value during sanitation"));
    let invalid = run(&host, "key.gen_accept", &[("id_", s("..."))]);
    assert!(
        text(&invalid.ret).contains("SaltCacheError"),
        "{}",
        invalid.ret
    );
}

#[test]
fn gen_keys_writes_a_pair_once_and_answers_its_fingerprint() {
    let host = FakeHost::with_keys(&[]);
    let dir = host.dir.path().join("genkeys");
    let fields = [
        ("keydir", s(dir.to_str().unwrap())),
        ("keyname", s("mykey")),
    ];
    let first = ret(&host, "key.gen_keys", &fields);
    let public = std::fs::read_to_string(dir.join("mykey.pub")).unwrap();
    assert_eq!(
        first,
        s(halite_keystore::key_fingerprint(&public, "sha256").unwrap())
    );
    assert_eq!(
        ret(&host, "key.gen_keys", &fields),
        first,
        "loaded, not replaced"
    );
    ret(&host, "key.gen_keys", &[]);
    assert!(
        host.opts.pki_dir.join("minion.pem").is_file(),
        "Salt's defaults"
    );
    let bad = run(&host, "key.gen_keys", &[("keyname", s("../x"))]);
    assert!(text(&bad.ret).contains("is not a valid minion_id"));
}

#[test]
fn gen_signature_signs_the_master_key_once() {
    let host = FakeHost::with_keys(&[]);
    let none = [
        ("priv", Value::Nil),
        ("pub", Value::Nil),
        ("signature_path", Value::Nil),
    ];
    assert_eq!(
        ret(&host, "key.gen_signature", &none),
        s("No usable private-key found")
    );
    let mut create = none.to_vec();
    create.push(("auto_create", Value::Boolean(true)));
    assert_eq!(
        ret(&host, "key.gen_signature", &create),
        Value::Boolean(true)
    );
    let sig = host
        .store
        .read_pubkey_signature(&host.opts.master_pubkey_signature)
        .unwrap();
    assert!(sig.is_some_and(|s| !s.is_empty()));
    assert_eq!(
        ret(&host, "key.gen_signature", &create),
        Value::Boolean(false),
        "an existing signature is kept"
    );
    assert_eq!(
        ret(
            &host,
            "key.gen_signature",
            &[
                ("priv", Value::Nil),
                ("pub", s("/nonexistent/x.pub")),
                ("signature_path", Value::Nil)
            ]
        ),
        s("Public-key /nonexistent/x.pub does not exist")
    );
}

// ----- minions and config ----------------------------------------------------------------

#[test]
fn connected_lists_the_hosts_connected_minions_sorted() {
    let mut host = FakeHost::with_keys(&[]);
    assert_eq!(ret(&host, "minions.connected", &[]), list(&[]));
    host.connected = vec!["web2".into(), "db".into(), "web2".into()];
    assert_eq!(ret(&host, "minions.connected", &[]), list(&["db", "web2"]));
}

#[test]
fn config_values_reads_the_configuration_file_again() {
    let host = FakeHost::with_keys(&[]);
    std::fs::write(
        &host.opts.conf_file,
        format!(
            "root_dir: {}\nid: edited_master\nsaltgui_templates: {{a: 1}}\n",
            host.dir.path().display()
        ),
    )
    .unwrap();
    let got = ret(&host, "config.values", &[]);
    assert_eq!(get(&got, "id"), Some(&s("edited_master")));
    assert_eq!(
        get(&got, "saltgui_templates"),
        Some(&map([("a", Value::from(1))]))
    );
    assert_eq!(
        get(&got, "ret_port"),
        Some(&Value::from(4506)),
        "Salt's defaults"
    );
}
