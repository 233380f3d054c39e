//! Bad input to access control (issue: access control, "Bad input"): malformed
//! `publisher_acl` and `external_auth` stop the master with an error naming the key; a
//! catastrophically backtracking ACL regex is bounded, denied and logged; a flood of failed
//! eauth logins is answered while the master keeps serving everyone else.
//!
//! Requests go straight to the request port as the clear loads `salt` sends, so each case
//! is exactly the input it names.

mod common;

use common::*;
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_testkit::*;
use std::time::{Duration, Instant};

/// A publish of `fun` with `arg` to `tgt` by the eauth `file` user `user`.
fn eauth_publish(user: &str, password: &str, tgt: &str, fun: &str, arg: Vec<Value>) -> Value {
    map([
        ("cmd", s("publish")),
        ("tgt", s(tgt)),
        ("tgt_type", s("glob")),
        ("fun", s(fun)),
        ("arg", Value::Array(arg)),
        ("ret", s("")),
        ("jid", s("")),
        ("key", s("")),
        ("user", s("root")),
        (
            "kwargs",
            map([
                ("eauth", s("file")),
                ("username", s(user)),
                ("password", s(password)),
            ]),
        ),
    ])
}

fn error_name(reply: &Value) -> Option<&str> {
    value::get(reply, "error").and_then(|e| value::get_str(e, "name"))
}

/// Starts `halite-master` on `extra` and returns its exit status and stderr (it must stop
/// by itself).
fn master_refuses_to_start(extra: &str) -> String {
    let root = TempRoot::with_master_extra(extra);
    let out = run(
        halite_bin("halite-master"),
        ["-c", root.master_config_dir().to_str().unwrap()],
        Duration::from_secs(30),
    );
    assert!(
        !out.status.success(),
        "halite-master started with {extra:?}"
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn malformed_publisher_acl_or_external_auth_stops_the_master_naming_the_key() {
    let cases = [
        ("publisher_acl: [fred]\n", "publisher_acl"),
        ("external_auth: [pam]\n", "external_auth"),
        ("external_auth:\n  pam: 3\n", "external_auth:pam"),
        (
            "external_auth:\n  file:\n    fred: [test.*]\n",
            "external_auth:file:^filename",
        ),
        (
            "external_auth:\n  file:\n    ^filename: /x\n    ^filetype: htdigest\n    fred: []\n",
            "^realm",
        ),
    ];
    for (extra, key) in cases {
        let err = master_refuses_to_start(extra);
        assert!(
            err.contains(key),
            "{extra:?}: stderr does not name {key}: {err}"
        );
    }
}

#[test]
fn backtracking_acl_regex_is_bounded_denied_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let passwords = dir.path().join("passwords");
    std::fs::write(&passwords, "alice:secret\n").unwrap();
    let root = TempRoot::with_master_extra(&format!(
        "auto_accept: true\nexternal_auth:\n  file:\n    ^filename: {}\n    alice:\n      \
         - '*':\n        - test.arg:\n            args: ['(a|aa)+\\1c']\n",
        passwords.display()
    ));
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let _minion = start_halite_minion(&root, "m1");
    wait_for_pings(&root, &["m1"]);

    let log = root.master_log();
    let offset = file_len(&log);
    let started = Instant::now();
    let evil = Value::Array(vec![s("a".repeat(5000))]);
    let reply = clear_request(
        root.ret_port(),
        eauth_publish(
            "alice",
            "secret",
            "*",
            "test.arg",
            evil.as_array().unwrap().clone(),
        ),
    );
    assert_eq!(error_name(&reply), Some("AuthorizationError"), "{reply}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the check took {:?}",
        started.elapsed()
    );
    wait_for_log_from(&log, offset, "backtracking limit", Duration::from_secs(20));
    // The same entry still allows what its regex matches.
    let fine = clear_request(
        root.ret_port(),
        eauth_publish("alice", "secret", "*", "test.arg", vec![s("aac")]),
    );
    assert!(error_name(&fine).is_none(), "{fine}");
}

#[test]
fn a_thousand_failed_logins_are_refused_while_the_master_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let passwords = dir.path().join("passwords");
    std::fs::write(&passwords, "alice:secret\n").unwrap();
    let root = TempRoot::with_master_extra(&format!(
        "auto_accept: true\nexternal_auth:\n  file:\n    ^filename: {}\n    alice: [test.*]\n",
        passwords.display()
    ));
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let _minion = start_halite_minion(&root, "m1");
    wait_for_pings(&root, &["m1"]);

    // 1,000 wrong passwords in flight at once on one DEALER socket.
    let ctx = zmq::Context::new();
    let flood = ctx.socket(zmq::DEALER).unwrap();
    flood.set_linger(0).unwrap();
    flood
        .connect(&format!("tcp://127.0.0.1:{}", root.ret_port()))
        .unwrap();
    const N: usize = 1000;
    for n in 0..N {
        let mut load = map([
            ("cmd", s("mk_token")),
            ("eauth", s("file")),
            ("username", s(if n % 2 == 0 { "alice" } else { "mallory" })),
            ("password", s(format!("guess{n}"))),
        ]);
        value::set(&mut load, "token_expire", Value::from(60));
        let body = value::encode(&map([
            ("enc", s("clear")),
            ("load", load),
            ("version", Value::from(3)),
        ]));
        flood.send_multipart([&b""[..], &body], 0).unwrap();
    }

    // Meanwhile: the minion answers, and a right password gets its token.
    let started = Instant::now();
    wait_for_pings(&root, &["m1"]);
    let token = clear_request(
        root.ret_port(),
        map([
            ("cmd", s("mk_token")),
            ("eauth", s("file")),
            ("username", s("alice")),
            ("password", s("secret")),
        ]),
    );
    assert!(value::get_str(&token, "token").is_some(), "{token}");
    let served_in = started.elapsed();
    assert!(
        served_in < Duration::from_secs(15),
        "serving others took {served_in:?} during the flood"
    );

    // Every failed login is answered with Salt's "" (after its delay).
    flood.set_rcvtimeo(30_000).unwrap();
    for n in 0..N {
        let frames = flood
            .recv_multipart(0)
            .unwrap_or_else(|e| panic!("reply {n} of {N} missing: {e}"));
        let body = frames.last().unwrap();
        assert_eq!(value::decode(body).unwrap(), s(""), "reply {n}");
    }
    println!(
        "{N} failed logins in flight: a minion's test.ping and a right password served in \
         {served_in:?}; every failure answered {:?} after the flood began",
        started.elapsed()
    );
}
