//! `halite`, `halite-key` and `halite-run state.event` against a stock salt-master with a
//! stock and a Halite minion (issue 14): keys listed and accepted as `salt-key` does it,
//! jobs (nodegroups, a batch, `--static`) printed as stock `salt` prints them, and the
//! master's events watched.

mod common;

use common::*;
use halite_testkit::*;
use serde_json::Value as Json;
use std::process::Command;

const MINIONS: [&str; 2] = ["hal-1", "stock-1"];

fn key_lists(out: &std::process::Output) -> Json {
    let text = assert_success("key list", out);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn halite_halite_key_and_halite_run_drive_a_stock_master() {
    let root = TempRoot::with_master_extra("nodegroups:\n  both: L@hal-1,stock-1\n");
    let _procs = [
        start_stock_master(&root),
        start_halite_minion(&root, "hal-1"),
        start_stock_minion(&root, "stock-1"),
    ];

    // halite-key lists the pending keys as salt-key does, and accepts them.
    let mut last = Json::Null;
    let pending = wait_until(JOIN, || {
        last = key_lists(&run_halite_key(&root, ["-L", "--out", "json"]));
        MINIONS.iter().all(|id| {
            last["minions_pre"]
                .as_array()
                .is_some_and(|a| a.contains(&Json::from(*id)))
        })
    });
    assert!(pending, "the minions never asked to join: {last}");
    assert_eq!(
        last,
        key_lists(&run_stock_salt_key(&root, ["-L", "--out", "json"]))
    );
    assert_success("halite-key -A", &run_halite_key(&root, ["-A", "-y"]));
    let lists = key_lists(&run_halite_key(&root, ["-L", "--out", "json"]));
    assert_eq!(lists["minions"], serde_json::json!(MINIONS));
    assert_eq!(
        lists,
        key_lists(&run_stock_salt_key(&root, ["-L", "--out", "json"]))
    );
    let h = run_halite_key(&root, ["-f", "hal-1"]);
    let s = run_stock_salt_key(&root, ["-f", "hal-1"]);
    assert_eq!(
        assert_success("halite-key -f", &h),
        assert_success("salt-key -f", &s)
    );

    // The stock master accepted them: both answer.
    wait_for_pings(&root, &["*"], &MINIONS);

    // halite-run state.event sees the master's events while halite runs jobs.
    let mut watch = Command::new(halite_bin("halite-run"));
    watch.arg("-c").arg(root.master_config_dir()).args([
        "state.event",
        "salt/job/*/ret/hal-1",
        "count=2",
    ]);
    let mut watch = Proc::spawn(watch, &root.procs_dir(), "halite-run-state-event");
    let heard = wait_until(JOIN, || {
        halite(&root, &["hal-1", "test.ping"]);
        !watch.is_running()
    });
    assert!(
        heard,
        "halite-run state.event heard nothing: {}",
        watch.stderr()
    );
    assert_eq!(
        watch.wait_exit(TIMEOUT).map(|s| s.success()),
        Some(true),
        "{}",
        watch.stderr()
    );
    let printed = watch.stdout();
    let mut lines: Vec<&str> = printed.lines().collect();
    // Then the runner's return, as salt-run prints it.
    assert_eq!(lines.pop(), Some("None"), "{printed}");
    assert_eq!(lines.len(), 2, "{printed}");
    for line in lines {
        let (tag, data) = line.split_once('\t').expect("tag<TAB>data");
        assert!(
            tag.starts_with("salt/job/") && tag.ends_with("/ret/hal-1"),
            "{line}"
        );
        let data: Json = serde_json::from_str(data).expect("JSON event data");
        assert_eq!(data["return"], Json::Bool(true), "{line}");
    }

    // halite prints what stock salt prints on the same stock master.
    for args in [
        &["*", "test.ping", "--out", "json"][..],
        &["-N", "both", "test.ping", "--out", "json"],
        &["-C", "N@both and not stock-1", "test.ping", "--out", "json"],
    ] {
        let (h, s) = both(&root, args);
        assert_eq!((h.code, h.returns()), (s.code, s.returns()), "{args:?}");
        assert!(!h.returns().is_empty(), "{args:?}: {}{}", h.out, h.err);
    }
    let (h, s) = both(&root, &["*", "test.ping", "--static"]);
    assert_eq!((&h.out, h.code), (&s.out, s.code), "--static");
    let (h, s) = both(&root, &["*", "test.ping", "-b", "1", "--out", "json"]);
    assert_eq!(h.code, s.code);
    same_batch("-b 1", &h, &s);
    assert_eq!(batch_shape(&h.out).sizes(), [1, 1]);
}
