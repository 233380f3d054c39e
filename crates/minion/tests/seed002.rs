//! Seed 002: third-party scripts written with the stock `salt` package talk over the
//! daemons' event buses — minion bus, master bus, and minion → master with the
//! `fire_master` tag — against Halite daemons, and against stock ones on the other side.

mod common;

use common::seed::*;
use common::JOIN;
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_testkit::*;
use std::time::Duration;

/// The messages of the seed's batched list, in order.
const BATCHED: [&str; 5] = [
    "a drap in the bucket",
    "a drep in the bucket",
    "a drip in the bucket",
    "a drop in the bucket",
    "a drup in the bucket",
];

/// The message of the single-form script.
const SINGLE: &str = "a single drop for the master";

fn python_str(text: &str) -> String {
    format!("'{text}'")
}

#[test]
fn seed_scripts_listen_and_emit_on_a_halite_minion_bus() {
    let root = TempRoot::new();
    root.add_minion("sb1");
    // No master answers: the minion serves its bus all the same.
    let _minion = start_halite_minion(&root, "sb1");
    wait_for_minion_bus(&root, "sb1");
    let side = Side::minion(&root, "sb1");
    let listener = start_seed(&root, "listen_to_minion_bus.py", &side);
    emit_until_heard(&listener, "'message': 'a drop in the bucket'", || {
        run_seed("emit_to_minion_bus.py", &side)
    });
    let out = listener.stdout();
    assert!(
        out.contains("Listening for events tagged 'mytag' on Salt Minion bus."),
        "{out}"
    );
    assert!(out.contains("'id': 'sb1', 'tag': 'mytag'"), "{out}");
}

#[test]
fn seed_scripts_listen_and_emit_on_a_halite_master_bus() {
    let root = TempRoot::new();
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let side = Side::master(&root);
    let listener = start_seed(&root, "listen_to_master_bus.py", &side);
    emit_until_heard(
        &listener,
        "'sample-msg': 'this is a test', 'example': 'this is the same test'",
        || run_seed("emit_to_master_bus.py", &side),
    );
    assert!(listener
        .stdout()
        .contains("Listening for events tagged 'mytag' on Salt Master bus."));
}

/// Starts the seed's master-bus listener and waits until it hears the seed's master-bus
/// emitter, so that it misses nothing fired afterwards.
fn master_listener(root: &TempRoot) -> Proc {
    let side = Side::master(root);
    let listener = start_seed(root, "listen_to_master_bus.py", &side);
    emit_until_heard(&listener, "'sample-msg': 'this is a test'", || {
        run_seed("emit_to_master_bus.py", &side)
    });
    listener
}

/// Runs the two forwarding scripts on minion `id` and checks that the seed's listener
/// printed all six events.
fn forward_seed_events(root: &TempRoot, id: &str, listener: &Proc) {
    let side = Side::minion(root, id);
    run_seed("emit_to_minion_bus_forward_single.py", &side);
    run_seed("emit_to_minion_bus_forward_to_master_bus.py", &side);
    let mut needles: Vec<String> = BATCHED.iter().map(|m| python_str(m)).collect();
    needles.push(python_str(SINGLE));
    let needles: Vec<&str> = needles.iter().map(String::as_str).collect();
    wait_heard(listener, &needles);
    let out = listener.stdout();
    for needle in needles {
        assert_eq!(out.matches(needle).count(), 1, "{needle} in:\n{out}");
    }
}

#[test]
fn fire_master_events_on_a_halite_minion_reach_a_halite_master_bus() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    root.add_minion("f1");
    let _minion = start_halite_minion(&root, "f1");
    wait_for_log(
        &root.minion_log("f1"),
        "Minion is ready to receive requests!",
        JOIN,
    );
    let listener = master_listener(&root);
    let tap = BusTap::master(&root);
    forward_seed_events(&root, "f1", &listener);

    // The same events, as a Rust listener sees them: Salt's tags and data.
    let got = tap.wait_for("mytag", 6);
    assert_eq!(got.len(), 6, "{got:?}");
    let single = &got[0].1;
    assert_eq!(got[0].0, "mytag");
    for (k, want) in [
        ("id", s("f1")),
        ("cmd", s("_minion_event")),
        ("pretag", Value::Nil),
        ("data", map([("message", s(SINGLE))])),
        ("tag", s("mytag")),
    ] {
        assert_eq!(value::get(single, k), Some(&want), "{k} of {single}");
    }
    for ((tag, data), message) in got[1..].iter().zip(BATCHED) {
        assert_eq!(tag, "mytag");
        assert_eq!(
            unstamped(data),
            map([("message", s(message)), ("tag", s("mytag"))])
        );
    }

    // Many events at once: every one arrives, in order, with its data.
    let n = 3000;
    fire_on_minion(
        &root,
        "f1",
        (0..n)
            .map(|i| fire_master_single(map([("seq", Value::from(i))]), "burst/seq"))
            .collect(),
    );
    let got = tap.wait_for("burst/seq", n);
    let seqs: Vec<i64> = got
        .iter()
        .map(|(_, d)| {
            assert_eq!(value::get_str(d, "cmd"), Some("_minion_event"), "{d}");
            value::get(d, "data")
                .and_then(|inner| value::get_i64(inner, "seq"))
                .unwrap_or(-1)
        })
        .collect();
    assert_eq!(seqs, (0..n as i64).collect::<Vec<_>>());
}

#[test]
fn fire_master_events_on_a_halite_minion_reach_a_stock_master_bus() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = start_stock_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(60));
    root.add_minion("h1");
    let _minion = start_halite_minion(&root, "h1");
    wait_for_log(
        &root.minion_log("h1"),
        "Minion is ready to receive requests!",
        JOIN,
    );
    let listener = master_listener(&root);
    let tap = BusTap::master(&root);
    forward_seed_events(&root, "h1", &listener);
    let out = listener.stdout();
    assert!(
        out.contains("'id': 'h1', 'cmd': '_minion_event', 'pretag': None, 'data': {'message': 'a single drop for the master'}, 'tag': 'mytag'"),
        "{out}"
    );

    // A burst goes out batched; the stock master fires each event with the data it
    // fires for one event alone. Every event arrives once. Order holds only within one
    // request: a stock master's workers each push their events to its event publisher
    // over their own connection, and the publisher reads those connections as they
    // become readable, so consecutive requests handled by two workers can interleave
    // (the Halite master keeps the order, as the test above shows).
    let n = 500;
    fire_on_minion(
        &root,
        "h1",
        (0..n)
            .map(|i| fire_master_single(map([("seq", Value::from(i))]), "burst/seq"))
            .collect(),
    );
    let got = tap.wait_for("burst/seq", n);
    let mut seqs = Vec::new();
    for (_, d) in &got {
        let keys: Vec<&str> = d
            .as_map()
            .unwrap()
            .iter()
            .filter_map(|(k, _)| value::str_of(k))
            .collect();
        assert_eq!(
            keys,
            ["id", "cmd", "pretag", "data", "tag", "ts", "_stamp"],
            "{d}"
        );
        let data = value::get(d, "data");
        assert_eq!(
            data.and_then(Value::as_map).map(|m| m.len()),
            Some(1),
            "{d}"
        );
        seqs.push(data.and_then(|inner| value::get_i64(inner, "seq")));
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (0..n as i64).map(Some).collect::<Vec<_>>());
}

#[test]
fn a_stock_minions_events_reach_a_halite_master_bus() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    root.add_minion("s1");
    let tap = BusTap::master(&root);

    // salt-call sends fire_master straight to the master.
    let out = run_stock_salt_call(
        &root,
        "s1",
        [
            "event.fire_master",
            r#"{"data": "message for the master"}"#,
            "mytag",
        ],
    );
    assert_eq!(
        assert_success("salt-call event.fire_master", &out),
        "local:\n    True\n"
    );
    let got = tap.wait_for("mytag", 1);
    let data = &got[0].1;
    assert_eq!(value::get_str(data, "id"), Some("s1"));
    assert_eq!(value::get_str(data, "cmd"), Some("_minion_event"));
    assert_eq!(
        value::get(data, "data"),
        Some(&map([("data", s("message for the master"))]))
    );

    // A stock minion daemon forwards the seed's batched list from its bus.
    // Salt's minion drops what is fired before it counts itself connected, a moment
    // after its start event: fire until the list arrives.
    let _minion = start_stock_minion(&root, "s1");
    tap.wait_for("salt/minion/s1/start", 1);
    let arrived = wait_until(TIMEOUT, || {
        run_seed(
            "emit_to_minion_bus_forward_to_master_bus.py",
            &Side::minion(&root, "s1"),
        );
        wait_until(Duration::from_secs(5), || {
            tap.with_prefix("mytag").len() >= 6
        })
    });
    assert!(arrived, "the stock minion never forwarded the list");
    let got = tap.with_prefix("mytag");
    let messages: Vec<Option<&str>> = got[1..6]
        .iter()
        .map(|(_, d)| value::get_str(d, "message"))
        .collect();
    assert_eq!(messages, BATCHED.map(Some));
}

#[test]
fn halite_call_and_published_jobs_fire_events_with_salts_arguments() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    root.add_minion("c1");
    let _minion = start_halite_minion(&root, "c1");
    wait_for_log(
        &root.minion_log("c1"),
        "Minion is ready to receive requests!",
        JOIN,
    );
    let tap = BusTap::master(&root);
    let call = |args: &[&str]| {
        let mut cmd = std::process::Command::new(halite_bin("halite-call"));
        cmd.arg("-c").arg(root.minion_config_dir("c1")).args(args);
        run_command(cmd, TIMEOUT)
    };

    // As salt-call: straight to the master, the load salt-call sends.
    let out = call(&[
        "event.fire_master",
        r#"{"data": "message for the master"}"#,
        "mytag",
    ]);
    assert_eq!(
        assert_success("halite-call event.fire_master", &out),
        "local:\n    True\n"
    );
    let got = tap.wait_for("mytag", 1);
    let data = &got[0].1;
    assert_eq!(value::get_str(data, "id"), Some("c1"));
    assert_eq!(value::get_str(data, "cmd"), Some("_minion_event"));
    assert_eq!(
        value::get(data, "pretag"),
        None,
        "salt-call sends no pretag"
    );
    assert_eq!(
        value::get(data, "data"),
        Some(&map([("data", s("message for the master"))]))
    );

    let out = call(&["event.send", "myco/send", "foo=Foo", "with_env_opts=True"]);
    assert_eq!(
        assert_success("halite-call event.send", &out),
        "local:\n    True\n"
    );
    let got = tap.wait_for("myco/send", 1);
    let sent = value::get(&got[0].1, "data").unwrap();
    assert_eq!(value::get_str(sent, "foo"), Some("Foo"));
    assert_eq!(value::get(sent, "saltenv"), Some(&Value::Nil));

    // Masterless: nothing is sent.
    let out = call(&["--local", "event.fire_master", "{}", "never/sent"]);
    assert_eq!(
        assert_success("halite-call --local", &out),
        "local:\n    False\n"
    );

    // In a published job the function fires on the minion bus and the daemon forwards.
    let minion_tap = BusTap::minion(&root, "c1");
    let r = common::Cli::Halite.json(&root, &["c1", "event.fire_master", r#"{"x": 1}"#, "pubtag"]);
    assert_eq!(r["c1"], serde_json::json!(true), "{r:?}");
    let got = tap.wait_for("pubtag", 1);
    assert_eq!(value::get(&got[0].1, "pretag"), Some(&Value::Nil));
    assert_eq!(
        value::get(&got[0].1, "data"),
        Some(&map([("x", Value::from(1))]))
    );
    let r = common::Cli::Halite.json(&root, &["c1", "event.fire", r#"{"y": 2}"#, "localtag"]);
    assert_eq!(r["c1"], serde_json::json!(true), "{r:?}");
    let got = minion_tap.wait_for("localtag", 1);
    assert_eq!(unstamped(&got[0].1), map([("y", Value::from(2))]));
    assert!(tap.with_prefix("never/sent").is_empty());
    assert!(tap.with_prefix("localtag").is_empty());
}
