//! Hot-hot multi-master (`master: [a, b]`, `master_type: str`): one Halite minion signed in
//! to two Halite masters at once runs jobs from both and returns each to the master that
//! published it; a job both publish with the same jid runs once; events fired with
//! `fire_master` reach both; a master that is down at start is joined when it comes up.

mod common;
mod multi;

use common::seed::{fire_master_single, fire_on_minion, wait_for_minion_bus};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_testkit::*;
use multi::*;
use std::net::Ipv4Addr;
use std::time::Duration;

fn loopback(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

/// Two Halite masters on `ips` (same ports, one master key pair, auto-accept), B started
/// only when `start_b`.
fn two_masters(ips: (Ipv4Addr, Ipv4Addr), start_b: bool) -> (Master, Master) {
    let mut a = Master::new(Kind::Halite, ips.0, None, "auto_accept: true\n");
    a.start();
    let ports = Some((a.publish_port, a.ret_port));
    let mut b = Master::new(Kind::Halite, ips.1, ports, "auto_accept: true\n");
    share_master_key(&a, &b);
    if start_b {
        b.start();
    }
    (a, b)
}

fn hot_hot_minion(minions: &TempRoot, id: &str, a: &Master, b: &Master) -> Proc {
    minions.add_minion_with(
        id,
        &format!("master: {}\n", yaml_list(&[a.entry(), b.entry()])),
    );
    start_halite_minion(minions, id)
}

/// The returns of `jid` by `id` seen on `tap`.
fn returns_of_jid(tap: &common::seed::BusTap, id: &str, jid: &str) -> Vec<Value> {
    returns(tap, id)
        .into_iter()
        .filter(|(tag, _)| tag.starts_with(&format!("salt/job/{jid}/")))
        .map(|(_, data)| data)
        .collect()
}

#[test]
fn one_minion_runs_jobs_from_both_masters_and_fires_events_to_both() {
    let minions = TempRoot::new();
    let id = "hh-both";
    let (a, b) = two_masters((loopback(14), loopback(15)), true);
    let _minion = hot_hot_minion(&minions, id, &a, &b);
    wait_answering(&a, id);
    wait_answering(&b, id);

    let (tap_a, tap_b) = (a.tap(), b.tap());
    for (from, other, word) in [(&a, &tap_b, "from-a"), (&b, &tap_a, "from-b")] {
        let tap = from.tap();
        let jid = from
            .publish(id, "test.echo", vec![s(word)], None)
            .expect("the master published nothing");
        let got = wait_until(TIMEOUT, || !returns_of_jid(&tap, id, &jid).is_empty());
        assert!(got, "no return of {jid} on {}", from.entry());
        let ret = &returns_of_jid(&tap, id, &jid)[0];
        assert_eq!(value::get_str(ret, "return"), Some(word));
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            returns_of_jid(other, id, &jid).is_empty(),
            "the return of {jid} went to the other master too"
        );
    }

    // fire_master events go to every master.
    wait_for_minion_bus(&minions, id);
    fire_on_minion(
        &minions,
        id,
        vec![fire_master_single(
            map([("n", Value::from(1))]),
            "hothot/event",
        )],
    );
    for tap in [&tap_a, &tap_b] {
        let got = tap.wait_for("hothot/event", 1);
        assert_eq!(got.len(), 1, "{got:?}");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(tap_a.with_prefix("hothot/event").len(), 1);
    assert_eq!(tap_b.with_prefix("hothot/event").len(), 1);
}

#[test]
fn a_job_both_masters_publish_with_one_jid_runs_once_and_returns_to_the_first() {
    let minions = TempRoot::new();
    let id = "hh-jid";
    let (a, b) = two_masters((loopback(16), loopback(17)), true);
    let _minion = hot_hot_minion(&minions, id, &a, &b);
    wait_answering(&a, id);
    wait_answering(&b, id);
    let (tap_a, tap_b) = (a.tap(), b.tap());
    let out = minions.path().join("runs");
    let command = format!("echo ran >> {}", out.display());
    for (n, (first, second, first_tap, second_tap)) in
        [(&a, &b, &tap_a, &tap_b), (&b, &a, &tap_b, &tap_a)]
            .into_iter()
            .enumerate()
    {
        let jid = format!("2026010112000000000{n}");
        let arg = vec![s(command.as_str())];
        assert_eq!(
            first
                .publish(id, "cmd.run", arg.clone(), Some(&jid))
                .as_deref(),
            Some(jid.as_str())
        );
        assert_eq!(
            second.publish(id, "cmd.run", arg, Some(&jid)).as_deref(),
            Some(jid.as_str())
        );
        let got = wait_until(TIMEOUT, || !returns_of_jid(first_tap, id, &jid).is_empty());
        assert!(got, "no return of {jid} on {}", first.entry());
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            returns_of_jid(second_tap, id, &jid).is_empty(),
            "{jid} returned to {} as well",
            second.entry()
        );
        let runs = std::fs::read_to_string(&out).unwrap_or_default();
        assert_eq!(runs.lines().count(), n + 1, "job {jid} ran {runs:?}");
    }
    let log = std::fs::read_to_string(minions.minion_log(id)).unwrap();
    assert!(log.contains("was already started; duplicate publish dropped"));
}

#[test]
fn a_master_down_at_start_is_joined_when_it_comes_up() {
    let minions = TempRoot::new();
    let id = "hh-late";
    let (a, mut b) = two_masters((loopback(18), loopback(19)), false);
    let _minion = hot_hot_minion(&minions, id, &a, &b);
    wait_answering(&a, id);
    b.start();
    wait_answering(&b, id);
    // A master lost is retried on its own; the other keeps serving.
    let offset = file_len(&minions.minion_log(id));
    b.kill();
    wait_for_log_from(
        &minions.minion_log(id),
        offset,
        "Connection to master 127.0.0.19 lost",
        TIMEOUT,
    );
    wait_answering(&a, id);
}
