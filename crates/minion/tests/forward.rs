//! Forwarding survives the master going away: events fired meanwhile wait in a bounded
//! queue and arrive in order once it is back; bad input on the minion bus is logged and
//! dropped while the bus and forwarding keep working.

mod common;

use common::seed::*;
use common::JOIN;
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_testkit::*;
use std::io::Write;
use std::time::Duration;

/// A Halite master with auto-accept and Halite minion `id` (with `extra` config) signed in.
fn master_and_minion(id: &str, extra: &str) -> (TempRoot, Proc, Proc) {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    root.add_minion_with(id, extra);
    let minion = start_halite_minion(&root, id);
    wait_for_log(
        &root.minion_log(id),
        "Minion is ready to receive requests!",
        JOIN,
    );
    (root, master, minion)
}

fn seq_events(range: std::ops::Range<i64>) -> Vec<(String, Value)> {
    range
        .map(|i| fire_master_single(map([("seq", Value::from(i))]), "queue/seq"))
        .collect()
}

fn seqs(events: &[(String, Value)]) -> Vec<i64> {
    events
        .iter()
        .map(|(_, d)| {
            value::get(d, "data")
                .and_then(|inner| value::get_i64(inner, "seq"))
                .unwrap_or(-1)
        })
        .collect()
}

/// Stops the master and waits until the minion noticed.
fn take_master_down(root: &TempRoot, master: &mut Proc, id: &str) {
    let offset = file_len(&root.minion_log(id));
    master.stop();
    wait_for_log_from(
        &root.minion_log(id),
        offset,
        "Connection to master 127.0.0.1 lost",
        JOIN,
    );
}

/// Starts the master again, with a tap on its bus subscribed before any minion can sign in.
fn bring_master_back(root: &TempRoot) -> (Proc, BusTap) {
    let sockets = halite_bus::BusSockets::master(&root.master_root().join("sock"));
    let (pub_addr, pull_addr) = (sockets.pub_addr, sockets.pull_addr);
    let tap = std::thread::spawn(move || BusTap::start(pub_addr, pull_addr));
    let master = start_halite_master(root);
    let tap = tap.join().expect("the bus tap thread failed");
    (master, tap)
}

#[test]
fn events_fired_while_the_master_is_down_arrive_in_order_once_it_is_back() {
    let (root, mut master, _minion) = master_and_minion("q1", "");
    take_master_down(&root, &mut master, "q1");
    let n = 2000;
    fire_on_minion(&root, "q1", seq_events(0..n));
    let (_master, tap) = bring_master_back(&root);
    let got = tap.wait_for("queue/seq", n as usize);
    assert_eq!(seqs(&got), (0..n).collect::<Vec<_>>());
    // The start events come first, then the queue.
    let all = tap.with_prefix("");
    let first_queued = all.iter().position(|(t, _)| t == "queue/seq").unwrap();
    assert!(
        all[..first_queued]
            .iter()
            .any(|(t, _)| t == "salt/minion/q1/start"),
        "{:?}",
        all.iter().map(|(t, _)| t).collect::<Vec<_>>()
    );
}

#[test]
fn a_full_queue_keeps_the_newest_events_and_logs_what_it_dropped() {
    let (root, mut master, _minion) = master_and_minion("q2", "fire_master_queue_size: 5\n");
    take_master_down(&root, &mut master, "q2");
    fire_on_minion(&root, "q2", seq_events(0..20));
    wait_for_log(
        &root.minion_log("q2"),
        "The fire_master queue is full (fire_master_queue_size: 5)",
        TIMEOUT,
    );
    let (_master, tap) = bring_master_back(&root);
    let got = tap.wait_for("queue/seq", 5);
    assert_eq!(seqs(&got), (15..20).collect::<Vec<_>>());
    // Nothing else turns up later.
    fire_on_minion(&root, "q2", seq_events(100..101));
    let got = tap.wait_for("queue/seq", 6);
    assert_eq!(seqs(&got), [15, 16, 17, 18, 19, 100]);
    let log = std::fs::read_to_string(root.minion_log("q2")).unwrap();
    let dropped: u64 = log
        .lines()
        .filter(|l| l.contains("The fire_master queue is full"))
        .filter_map(|l| {
            let (_, rest) = l.split_once("dropped the ")?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum();
    assert_eq!(dropped, 15, "{log}");
}

/// Writes `bytes` to a Unix socket and closes it.
fn send_raw(path: &std::path::Path, bytes: &[u8]) {
    let mut conn = std::os::unix::net::UnixStream::connect(path).unwrap();
    // The bus may close the connection before reading everything (oversized frames).
    let _ = conn.write_all(bytes);
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

#[test]
fn bad_input_on_the_minion_bus_is_logged_and_dropped_and_the_bus_keeps_serving() {
    let (root, _master, _minion) = master_and_minion("b1", "max_event_size: 65536\n");
    let sockets = minion_bus(&root, "b1");
    let (halite_bus::BusAddr::Unix(pull), halite_bus::BusAddr::Unix(publ)) =
        (&sockets.pull_addr, &sockets.pub_addr)
    else {
        panic!("the minion bus is not on Unix sockets");
    };
    let minion_tap = BusTap::minion(&root, "b1");
    let master_tap = BusTap::master(&root);
    let log = root.minion_log("b1");
    let offset = file_len(&log);

    // Garbage, a truncated frame, a frame over the size limit, a frame whose body is not
    // msgpack, and a wrapper whose event body is not `tag\n\n msgpack`.
    send_raw(pull, b"\xde\xad\xbe\xef garbage that is no frame at all");
    send_raw(pull, &framed(&[0x81; 100])[..40]);
    send_raw(pull, &framed(&vec![0x90; 2 << 20]));
    send_raw(pull, &framed(b"\xc1\xc1\xc1\xc1not msgpack"));
    let wrapper = value::encode(&map([
        ("head", Value::Map(vec![])),
        ("body", value::bin(b"no separator and no msgpack".to_vec())),
    ]));
    send_raw(pull, &framed(&wrapper));
    // Garbage on the pub socket too.
    send_raw(publ, b"\x00\x01\x02 subscribers do not talk");
    // fire_master events Salt's minion cannot forward.
    fire_on_minion(
        &root,
        "b1",
        vec![
            (
                "fire_master".into(),
                map([("tag", s("t")), ("data", s("x"))]),
            ),
            (
                "fire_master".into(),
                map([
                    ("events", map([("tag", s("t"))])),
                    ("tag", Value::Nil),
                    ("data", Value::Nil),
                    ("pretag", Value::Nil),
                ]),
            ),
            (
                "fire_master".into(),
                map([
                    ("events", Value::Array(vec![s("not a map")])),
                    ("tag", Value::Nil),
                    ("data", Value::Nil),
                    ("pretag", Value::Nil),
                ]),
            ),
        ],
    );
    for needle in [
        "Closing event bus sender connection: bad frame",
        "exceeds the limit",
        "Dropping malformed event from event bus sender",
        "Not forwarding fire_master event to the master: the event lacks events, pretag",
        "Not forwarding fire_master event to the master: events is not a list",
        "Not forwarding an event of fire_master to the master: events[0] is not a map",
    ] {
        wait_for_log_from(&log, offset, needle, TIMEOUT);
    }

    // The bus still serves, and forwarding still works.
    fire_on_minion(
        &root,
        "b1",
        vec![
            ("after/bad".into(), map([("ok", Value::Boolean(true))])),
            fire_master_single(map([("ok", Value::Boolean(true))]), "after/forward"),
        ],
    );
    let got = minion_tap.wait_for("after/bad", 1);
    assert_eq!(unstamped(&got[0].1), map([("ok", Value::Boolean(true))]));
    let got = master_tap.wait_for("after/forward", 1);
    assert_eq!(
        value::get(&got[0].1, "data"),
        Some(&map([("ok", Value::Boolean(true))]))
    );
    assert!(master_tap.with_prefix("t").is_empty());
}
