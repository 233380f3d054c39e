//! The network lab end to end: a Halite master on one host, a Halite minion on another,
//! reaching each other only over the lab network (see `halite_testkit::Lab`). Needs root;
//! elsewhere the test returns early saying why.

use std::net::SocketAddr;
use std::time::Duration;

use halite_testkit::{wait_until, Host, Lab, TempRoot, TIMEOUT};
use serde_json::{Map, Value};

/// How long the minion may take to start, authenticate and answer.
const JOIN: Duration = Duration::from_secs(90);

/// `halite <target> test.ping` run on `host`, as `{minion: return}` (empty when the output
/// is not JSON, e.g. "No minions matched the target.").
fn ping_from(host: &Host, root: &TempRoot, target: &str) -> Map<String, Value> {
    let out = host.run_halite(root, [target, "test.ping", "--out", "json", "-t", "5"]);
    let mut merged = Map::new();
    for doc in serde_json::Deserializer::from_slice(&out.stdout).into_iter::<Value>() {
        match doc {
            Ok(Value::Object(m)) => merged.extend(m),
            _ => return Map::new(),
        }
    }
    merged
}

/// Waits until `halite m1 test.ping` on `host` gets `true`.
fn wait_for_ping(host: &Host, root: &TempRoot, when: &str) {
    let mut last = Map::new();
    let answered = wait_until(JOIN, || {
        last = ping_from(host, root, "m1");
        last.get("m1") == Some(&Value::Bool(true))
    });
    assert!(
        answered,
        "m1 did not answer test.ping {when}; last answer: {last:?}"
    );
}

#[test]
fn a_minion_on_one_lab_host_answers_a_master_on_another_until_its_link_is_cut() {
    let mut lab = match Lab::new() {
        Ok(lab) => lab,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let master_host = lab.add_host("master");
    let minion_host = lab.add_host("minion");
    let root = TempRoot::for_lab_host(master_host.ip(), "auto_accept: true\n");
    root.add_minion_for("m1", &[master_host.ip()], "");

    let _master = master_host.start_halite_master(&root);
    master_host.wait_for_port(
        SocketAddr::from((master_host.ip(), root.ret_port())),
        TIMEOUT,
    );
    // The master listens on its host's address only: not on this test's loopback.
    let loopback = SocketAddr::from(([127, 0, 0, 1], root.ret_port()));
    assert!(!master_host.connects(loopback, Duration::from_secs(5)));
    let _minion = minion_host.start_halite_minion(&root, "m1");
    wait_for_ping(&master_host, &root, "over the lab network");

    lab.cut_link(&minion_host);
    let during_cut = ping_from(&master_host, &root, "m1");
    assert_ne!(
        during_cut.get("m1"),
        Some(&Value::Bool(true)),
        "m1 answered through a cut link"
    );
    lab.restore_link(&minion_host);
    wait_for_ping(&master_host, &root, "after its link was restored");
}
