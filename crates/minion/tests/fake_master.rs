//! A Halite minion against a fake master made of `halite_proto`'s master-side functions:
//! bad input on the publish port, replays, key rotation, "bad load", a pending key, a
//! changed master key and a rejected key.

mod common;

use common::*;
use halite_proto::rsa::PrivateKey;
use halite_proto::value::{self, s};
use halite_proto::Value;
use halite_testkit::*;
use std::time::Duration;

/// Sends one kind of bad input.
type Sender = Box<dyn Fn(&mut FakeMaster)>;

/// How long to wait for something that must not happen (a return of a dropped publish).
const QUIET: Duration = Duration::from_secs(2);

fn start(root: &TempRoot, id: &str, extra: &str, pending: u32) -> (FakeMaster, Proc) {
    root.add_minion_with(id, extra);
    let master = FakeMaster::start(root.ret_port(), root.publish_port(), pending);
    let minion = start_halite_minion(root, id);
    master.wait_for_subscriber(JOIN);
    wait_for_log(
        &root.minion_log(id),
        "Minion is ready to receive requests!",
        JOIN,
    );
    (master, minion)
}

fn jid_of(ret: &Value) -> &str {
    value::get_str(ret, "jid").unwrap_or("?")
}

#[test]
fn bad_publishes_are_logged_and_dropped_and_the_minion_keeps_serving() {
    let root = TempRoot::new();
    // `fallback: false`: an unknown function gets Salt's plain text, not the fallback
    // executor's (which says why it has no Salt to run it in).
    let (mut master, _minion) = start(&root, "f1", "sign_pub_messages: true\nfallback: false\n", 0);
    let log = root.minion_log("f1");

    master.publish(&FakeMaster::job("1", "test.ping", vec![]));
    let ret = master
        .next_return(JOIN)
        .expect("no return for a good publish");
    assert_eq!(jid_of(&ret), "1");
    assert_eq!(value::get(&ret, "return"), Some(&Value::Boolean(true)));
    assert_eq!(value::get_i64(&ret, "retcode"), Some(0));
    assert_eq!(value::get_str(&ret, "fun"), Some("test.ping"));
    assert_eq!(value::get(&ret, "fun_args"), Some(&Value::Array(vec![])));
    assert_eq!(value::get_str(&ret, "user"), Some("root"));
    assert!(value::get_str(&ret, "_stamp").is_some());

    let forger = PrivateKey::generate(2048).unwrap();
    let cases: Vec<(&str, Sender, &str)> = vec![
        (
            "a publish signed by another key",
            Box::new(move |m: &mut FakeMaster| {
                let serial = m.next_serial();
                m.publish_with(
                    &FakeMaster::job("2", "test.ping", vec![]),
                    serial,
                    Some(&forger),
                );
            }),
            "Message signature failed to validate.",
        ),
        (
            "an unsigned publish",
            Box::new(|m: &mut FakeMaster| {
                let serial = m.next_serial();
                m.publish_with(&FakeMaster::job("3", "test.ping", vec![]), serial, None);
            }),
            "Message signing is enabled but the payload has no signature.",
        ),
        (
            "a replayed publish",
            Box::new(|m: &mut FakeMaster| {
                let key = m.key().clone();
                m.publish_with(&FakeMaster::job("4", "test.ping", vec![]), 1, Some(&key));
            }),
            "A message with an invalid serial was received.",
        ),
        (
            "garbage frames",
            Box::new(|m: &mut FakeMaster| m.publish_raw(&[b"\xc1\xff garbage"])),
            "Dropping a publish that is not a Salt payload",
        ),
        (
            "a topic frame and a truncated payload",
            Box::new(|m: &mut FakeMaster| {
                m.publish_raw(&[b"broadcast", b"\x82\xa3enc\xa3aes\xa4load"])
            }),
            "Dropping a publish that is not a Salt payload",
        ),
        (
            "a job with malformed arguments",
            Box::new(|m: &mut FakeMaster| {
                let mut job = FakeMaster::job("5", "test.arg", vec![]);
                value::set(&mut job, "arg", s("not a list"));
                m.publish(&job);
            }),
            "Dropping job 5",
        ),
        (
            "a job whose fun is not a name",
            Box::new(|m: &mut FakeMaster| {
                let mut job = FakeMaster::job("6", "test.arg", vec![]);
                value::set(&mut job, "fun", Value::from(7));
                m.publish(&job);
            }),
            "Dropping job 6",
        ),
        (
            "a second publish of a job id already run",
            Box::new(|m: &mut FakeMaster| m.publish(&FakeMaster::job("1", "test.ping", vec![]))),
            "Job 1 was already started; duplicate publish dropped",
        ),
    ];
    for (what, send, line) in cases {
        let offset = file_len(&log);
        send(&mut master);
        wait_for_log_from(&log, offset, line, Duration::from_secs(30));
        assert!(master.next_return(QUIET).is_none(), "{what} was run");
    }

    // Still serving, and an unknown function gets Salt's text and a non-zero retcode.
    master.publish(&FakeMaster::job("7", "no.such", vec![]));
    let ret = master
        .next_return(JOIN)
        .expect("the minion stopped serving");
    assert_eq!(jid_of(&ret), "7");
    assert_eq!(
        value::get_str(&ret, "return"),
        Some("'no.such' is not available.")
    );
    assert_eq!(value::get_i64(&ret, "retcode"), Some(1));
    assert_eq!(value::get(&ret, "success"), Some(&Value::Boolean(false)));
}

#[test]
fn bad_load_and_aes_rotation_make_the_minion_sign_in_again() {
    let root = TempRoot::new();
    let (mut master, _minion) = start(&root, "f2", "", 0);
    assert_eq!(master.auths(), 1);

    // The master does not accept the return's session: re-auth, then the return goes through.
    master.bad_load_next(1);
    master.publish(&FakeMaster::job("1", "test.echo", vec![s("hello")]));
    let ret = master.next_return(JOIN).expect("no return after bad load");
    assert_eq!(value::get_str(&ret, "return"), Some("hello"));
    assert_eq!(master.auths(), 2);

    // A new AES key: the publish does not decrypt until the minion signs in again.
    master.rotate_aes();
    master.publish(&FakeMaster::job("2", "test.ping", vec![]));
    let ret = master
        .next_return(JOIN)
        .expect("no return after AES rotation");
    assert_eq!(jid_of(&ret), "2");
    assert_eq!(master.auths(), 3);
}

#[test]
fn slow_jobs_run_concurrently_and_do_not_block_others() {
    let root = TempRoot::new();
    let (mut master, _minion) = start(&root, "f3", "", 0);
    master.publish(&FakeMaster::job("1", "test.sleep", vec![Value::from(30)]));
    master.publish(&FakeMaster::job("2", "cmd.run", vec![s("sleep 30")]));
    master.publish(&FakeMaster::job("3", "test.exception", vec![s("boom")]));
    master.publish(&FakeMaster::job("4", "test.ping", vec![]));
    let mut seen: Vec<String> = master
        .drain_returns(Duration::from_secs(5))
        .iter()
        .map(|r| jid_of(r).to_owned())
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        ["3", "4"],
        "fast jobs must return while slow ones run"
    );
    master.publish(&FakeMaster::job("5", "saltutil.running", vec![]));
    let ret = master.next_return(JOIN).expect("saltutil.running");
    let running: Vec<&str> = ret
        .as_map()
        .and_then(|_| value::get(&ret, "return"))
        .and_then(Value::as_array)
        .map(|jobs| {
            jobs.iter()
                .filter_map(|j| value::get_str(j, "jid"))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        running.contains(&"1") && running.contains(&"2"),
        "running: {running:?}"
    );
    // Killing a job stops it and, as in Salt, it sends no return.
    master.publish(&FakeMaster::job("6", "saltutil.kill_job", vec![s("2")]));
    let ret = master.next_return(JOIN).expect("saltutil.kill_job");
    assert_eq!(jid_of(&ret), "6");
    assert!(
        master.drain_returns(QUIET).iter().all(|r| jid_of(r) != "2"),
        "a killed job returned"
    );
}

#[test]
fn pending_key_is_retried_until_the_master_accepts_it() {
    let root = TempRoot::new();
    let (mut master, _minion) = start(&root, "f4", "", 2);
    let log = root.minion_log("f4");
    wait_for_log(
        &log,
        "The Salt Master has cached the public key for this node, this salt minion will wait for 1 seconds before attempting to re-authenticate",
        JOIN,
    );
    assert_eq!(master.auths(), 3);
    master.publish(&FakeMaster::job("1", "test.ping", vec![]));
    assert!(master.next_return(JOIN).is_some());
}

#[test]
fn changed_master_key_is_refused_and_nothing_runs() {
    let root = TempRoot::new();
    let (first, _minion) = start(&root, "f5", "", 0);
    let pinned =
        std::fs::read_to_string(root.minion_pki_dir("f5").join("minion_master.pub")).unwrap();
    let log = root.minion_log("f5");
    let offset = file_len(&log);
    drop(first);
    // Another master, with another key, on the same address.
    let mut impostor = FakeMaster::start(root.ret_port(), root.publish_port(), 0);
    wait_for_log_from(
        &log,
        offset,
        "The master key has changed, the salt master could have been subverted, verify salt master's public key",
        JOIN,
    );
    wait_for_log_from(
        &log,
        offset,
        "The Salt Master server's public key did not authenticate!",
        JOIN,
    );
    assert!(impostor.auths() >= 1);
    impostor.publish(&FakeMaster::job(
        "1",
        "cmd.run",
        vec![s("touch /tmp/halite-impostor-ran")],
    ));
    assert!(impostor.next_return(QUIET).is_none());
    let still =
        std::fs::read_to_string(root.minion_pki_dir("f5").join("minion_master.pub")).unwrap();
    assert_eq!(still, pinned, "the pinned master key was replaced");
}

#[test]
fn rejected_key_makes_the_minion_exit_77() {
    let root = TempRoot::new();
    root.add_minion("f6");
    let master = FakeMaster::start(root.ret_port(), root.publish_port(), 0);
    master.reject_all();
    let mut minion = start_halite_minion(&root, "f6");
    let status = minion
        .wait_exit(Duration::from_secs(60))
        .expect("the minion did not exit");
    assert_eq!(status.code(), Some(77));
    assert!(log_tail(&root.minion_log("f6"), 50).contains("has rejected this minion's public key!"));
}
