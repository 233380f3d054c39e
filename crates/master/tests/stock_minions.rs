//! Stock salt-minion 3008.3 processes against a Halite master (issue: master core).

mod common;

use common::*;
use halite_testkit::*;
use serde_json::{json, Value};
use std::time::Duration;

#[test]
fn stock_minions_join_after_halite_key_accepts_them_and_run_jobs() {
    let root = TempRoot::new();
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let ids = ["m1", "m2", "m3"];
    let _minions: Vec<Proc> = ids.iter().map(|id| start_stock_minion(&root, id)).collect();

    // Keys arrive as unaccepted; halite-key and stock salt-key list the same thing.
    let arrived = wait_until(JOIN, || ids_in(&key_lists(&root), "minions_pre").len() == 3);
    assert!(arrived, "keys never all pending: {}", key_lists(&root));
    let stock = run_stock_salt_key(&root, ["-L", "--out", "json"]);
    let stock: Value = serde_json::from_slice(&stock.stdout).expect("salt-key -L --out json");
    assert_eq!(stock, key_lists(&root), "salt-key and halite-key disagree");

    // Nothing runs before acceptance.
    let out = run_halite(&root, ["*", "test.ping"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("No minions matched the target"));
    assert_eq!(out.status.code(), Some(2));

    assert_success("halite-key -A -y", &run_halite_key(&root, ["-A", "-y"]));
    assert_eq!(ids_in(&key_lists(&root), "minions"), ["m1", "m2", "m3"]);
    wait_for_pings(&root, &ids);

    let args = halite_json(&root, &["m1", "test.arg", "1", "two", "k=v"]);
    assert_eq!(args["m1"]["args"], json!([1, "two"]));
    assert_eq!(args["m1"]["kwargs"]["k"], json!("v"));

    let hi = halite_json(&root, &["*", "cmd.run", "echo hi"]);
    for id in ids {
        assert_eq!(hi[id], json!("hi"), "cmd.run on {id}");
    }

    // Nested output and exit code, as `salt` prints them.
    let out = run_halite(&root, ["-L", "m2", "test.ping"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "m2:\n    True\n");
    assert_eq!(out.status.code(), Some(0));

    // The stock `salt` CLI and `salt-key` work against the Halite master.
    let out = run_stock_salt(&root, ["*", "test.ping", "--out", "json", "-t", "20"]);
    let stock_pings = json_returns(&out.stdout);
    for id in ids {
        assert_eq!(
            stock_pings.get(id),
            Some(&Value::Bool(true)),
            "stock salt: {stock_pings:?}"
        );
    }
    let stock = run_stock_salt_key(&root, ["-L", "--out", "json"]);
    let stock: Value = serde_json::from_slice(&stock.stdout).expect("salt-key -L --out json");
    assert_eq!(stock, key_lists(&root));
}

#[test]
fn restarted_master_keeps_keys_and_returns_and_minions_come_back() {
    let root = TempRoot::new();
    let mut master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let _m = start_stock_minion(&root, "r1");
    assert!(wait_until(JOIN, || ids_in(
        &key_lists(&root),
        "minions_pre"
    ) == ["r1"]));
    assert_success(
        "halite-key -a r1 -y",
        &run_halite_key(&root, ["-a", "r1", "-y"]),
    );
    wait_for_pings(&root, &["r1"]);

    let out = run_halite(&root, ["-v", "r1", "test.echo", "before-restart"]);
    let text = assert_success("halite -v", &out);
    let jid = text
        .lines()
        .find_map(|l| l.strip_prefix("Executing job with jid "))
        .unwrap_or_else(|| panic!("no jid in {text}"))
        .to_owned();

    master.stop();
    let mut _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    assert_eq!(
        ids_in(&key_lists(&root), "minions"),
        ["r1"],
        "accepted key lost over restart"
    );

    // The stored return is still in the job cache (read by stock salt-run from local_cache).
    let out = run_stock(
        &root,
        "salt-run",
        ["jobs.lookup_jid", jid.as_str(), "--out", "json"],
    );
    let stored = json_returns(&out.stdout);
    assert_eq!(
        stored.get("r1"),
        Some(&json!("before-restart")),
        "salt-run jobs.lookup_jid: {stored:?}"
    );

    // The stock minion re-authenticates by itself and the next job succeeds.
    wait_for_pings(&root, &["r1"]);
}

#[test]
fn changed_rejected_and_deleted_keys_run_nothing() {
    let root = TempRoot::new();
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let ids = ["keep", "changed", "rejected", "deleted"];
    let mut minions: Vec<Proc> = ids.iter().map(|id| start_stock_minion(&root, id)).collect();
    assert!(wait_until(JOIN, || ids_in(
        &key_lists(&root),
        "minions_pre"
    )
    .len()
        == 4));
    assert_success("halite-key -A -y", &run_halite_key(&root, ["-A", "-y"]));
    wait_for_pings(&root, &ids);

    // A minion whose key changed is denied and refused.
    let changed = &mut minions[1];
    changed.stop();
    for f in ["minion.pem", "minion.pub"] {
        std::fs::remove_file(root.minion_pki_dir("changed").join(f)).expect("remove minion key");
    }
    let _changed = start_stock_minion(&root, "changed");
    let denied = root.master_pki_dir().join("minions_denied").join("changed");
    assert!(
        wait_until(JOIN, || denied.exists()),
        "changed key never landed in minions_denied"
    );
    wait_for_log(&root.master_log(), "the public keys did not match", JOIN);
    assert!(ids_in(&key_lists(&root), "minions_denied").contains(&"changed".to_owned()));

    // Rejected and deleted keys: the master rotates its AES key, so they can no longer read
    // publishes.
    let log_offset = file_len(&root.master_log());
    assert_success(
        "halite-key -r",
        &run_halite_key(&root, ["-r", "rejected", "--include-accepted", "-y"]),
    );
    assert_success(
        "halite-key -d",
        &run_halite_key(&root, ["-d", "deleted", "-y"]),
    );
    wait_for_log_from(&root.master_log(), log_offset, "Rotating AES key", JOIN);

    let pings = halite_json(&root, &["*", "test.ping", "-t", "5"]);
    assert_eq!(pings.get("keep"), Some(&Value::Bool(true)), "{pings:?}");
    // `changed` is still expected (its old key is accepted) and shows "did not return";
    // the others are no longer expected and must not answer at all.
    assert_ne!(
        pings.get("changed"),
        Some(&Value::Bool(true)),
        "changed ran a job: {pings:?}"
    );
    for id in ["rejected", "deleted"] {
        assert!(!pings.contains_key(id), "{id} ran a job: {pings:?}");
    }
}
