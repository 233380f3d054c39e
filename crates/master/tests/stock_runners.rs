//! Stock `salt-run` against a Halite master: its runners run in the `salt-run` process and
//! reach the master through what Halite keeps Salt's — LocalClient publishes on the request
//! port, returns on the event bus, and the `local_cache` job tree.

mod common;

use common::*;
use halite_testkit::*;
use serde_json::json;
use std::time::Duration;

#[test]
fn stock_salt_run_manage_and_jobs_work_against_a_halite_master() {
    let root = TempRoot::with_master_extra("auto_accept: True\n");
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let _stock = start_stock_minion(&root, "stock-0");
    let mut hal = start_halite_minion(&root, "hal-0");
    wait_for_pings(&root, &["hal-0", "stock-0"]);

    assert_eq!(
        salt_run_json(&root, &["manage.up"]),
        json!(["hal-0", "stock-0"])
    );

    let out = run_halite(&root, ["*", "test.ping", "--out", "json", "--show-jid"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let jid = text
        .lines()
        .find_map(|l| l.strip_prefix("jid: "))
        .unwrap_or_else(|| panic!("no jid line in {text}"))
        .trim()
        .to_owned();
    assert_eq!(
        salt_run_json(&root, &["jobs.lookup_jid", &jid]),
        json!({"hal-0": true, "stock-0": true})
    );

    hal.stop();
    assert_eq!(
        salt_run_json(&root, &["manage.down", "timeout=2", "gather_job_timeout=2"]),
        json!(["hal-0"])
    );
}
