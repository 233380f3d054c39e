//! A stock salt-master 3008.3 and the stock `salt` CLI drive Halite minions.

mod common;

use common::*;
use halite_testkit::*;
use std::time::Duration;

#[test]
fn stock_master_and_salt_cli_drive_halite_minions() {
    let root = TempRoot::new();
    let _master = start_stock_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(60));
    let ids = ["h1", "h2"];
    let _minions: Vec<Proc> = ids
        .iter()
        .map(|id| start_halite_minion(&root, id))
        .collect();

    // The keys arrive pending; nothing runs until `salt-key -A`.
    let arrived = wait_until(JOIN, || {
        let mut pending = pending_keys(&root);
        pending.sort();
        pending == ids
    });
    assert!(arrived, "keys never all pending: {:?}", pending_keys(&root));
    for id in ids {
        wait_for_log(
            &root.minion_log(id),
            "The Salt Master has cached the public key for this node",
            JOIN,
        );
    }
    assert_success("salt-key -A", &run_stock_salt_key(&root, ["-A", "-y"]));
    Cli::Stock.wait_for_pings(&root, &ids);
    check_jobs(&root, Cli::Stock, ids);
}
