//! Peer communication through a Halite master (seeds 000, 001): stock and Halite minions
//! publish to each other with the `publish` module and run master runners, under the
//! master's `peer` / `peer_run` ACLs.

mod common;

use common::*;
use halite_testkit::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

const PEER_CONFIG: &str = "auto_accept: True\n\
peer:\n  '.*':\n    - 'test.*'\n\
peer_run:\n  'stock.*':\n    - 'manage.*'\n";

/// `salt-call <args> --out json` on stock minion `id`: its `local` return.
fn stock_call(root: &TempRoot, id: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--out", "json", "-l", "quiet"]);
    let out = run_stock_salt_call(root, id, &all);
    parse_local(&out.stdout, &format!("salt-call {args:?} on {id}"))
}

/// `halite-call <args> --out json` with Halite minion `id`'s config: its `local` return.
fn halite_call(root: &TempRoot, id: &str, args: &[&str]) -> Value {
    let mut cmd = Command::new(halite_bin("halite-call"));
    cmd.arg("-c")
        .arg(root.minion_config_dir(id))
        .args(args)
        .args(["--out", "json", "-l", "quiet"]);
    let out = run_command(cmd, Duration::from_secs(60));
    parse_local(&out.stdout, &format!("halite-call {args:?} on {id}"))
}

fn parse_local(stdout: &[u8], what: &str) -> Value {
    let doc: Value = serde_json::from_slice(stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: output is not JSON ({e}): {}",
            String::from_utf8_lossy(stdout)
        )
    });
    doc.get("local")
        .cloned()
        .unwrap_or_else(|| panic!("{what}: no `local` in {doc}"))
}

#[test]
fn minions_publish_to_minions_and_run_runners_under_the_peer_acls() {
    let root = TempRoot::with_master_extra(PEER_CONFIG);
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let _s0 = start_stock_minion(&root, "stock-0");
    let _s1 = start_stock_minion(&root, "stock-1");
    let _h0 = start_halite_minion(&root, "hal-0");
    let all = ["hal-0", "stock-0", "stock-1"];
    wait_for_pings(&root, &all);
    let everyone: Value = all.iter().map(|id| (id.to_string(), json!(true))).collect();

    // A stock minion's publish module, unchanged, through a Halite master.
    assert_eq!(
        stock_call(&root, "stock-0", &["publish.publish", "*", "test.ping"]),
        everyone,
        "stock publish.publish '*' test.ping"
    );
    let full = stock_call(&root, "stock-0", &["publish.full_data", "*", "test.ping"]);
    for id in all {
        assert_eq!(
            full[id]["ret"],
            json!(true),
            "full_data shape for {id}: {full}"
        );
    }

    // Not allowed by `peer`: `{}`, and the master says so.
    assert_eq!(
        stock_call(&root, "stock-0", &["publish.publish", "*", "cmd.run", "id"]),
        json!({}),
        "cmd.run is not in the peer ACL"
    );
    wait_for_log(
        &root.master_log(),
        "Peer publish of cmd.run to * (glob) from minion stock-0 denied",
        Duration::from_secs(10),
    );

    // A Halite minion's publish module.
    assert_eq!(
        halite_call(&root, "hal-0", &["publish.publish", "*", "test.ping"]),
        everyone,
        "halite-call publish.publish '*' test.ping"
    );

    // peer_run: only ids matching `stock.*`, only manage.*.
    let up = stock_call(&root, "stock-0", &["publish.runner", "manage.up"]);
    assert_eq!(up, json!(all), "publish.runner manage.up from stock-0");
    assert_eq!(
        halite_call(&root, "hal-0", &["publish.runner", "manage.up"]),
        json!({}),
        "hal-0 does not match peer_run's 'stock.*'"
    );
    assert_eq!(
        stock_call(&root, "stock-1", &["publish.runner", "jobs.list_jobs"]),
        json!({}),
        "jobs.* is not in peer_run"
    );
}
