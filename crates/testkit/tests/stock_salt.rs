//! Proves the kit against stock Salt 3008.3 on this machine: the venv, the generated
//! configs, the starters and the process cleanup.

use std::collections::HashSet;
use std::path::Path;

use halite_testkit::{
    assert_success, json_returns, run_stock_salt, run_stock_salt_call, run_stock_salt_key,
    start_stock_master, start_stock_minion, wait_for_log, wait_for_port, wait_until, TempRoot,
    TIMEOUT,
};

/// Live (non-zombie) process with this pid.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| !matches!(state, "Z" | "X")),
        Err(_) => false,
    }
}

#[test]
fn stock_master_and_two_stock_minions_answer_test_ping_and_leave_no_process() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let master = start_stock_master(&root);
    wait_for_port(root.ret_port(), TIMEOUT);
    wait_for_port(root.publish_port(), TIMEOUT);
    let ids = ["m1", "m2"];
    let minions: Vec<_> = ids.iter().map(|id| start_stock_minion(&root, id)).collect();
    for id in ids {
        wait_for_log(
            &root.minion_log(id),
            "Minion is ready to receive requests!",
            TIMEOUT,
        );
    }

    // A minion that has just subscribed can still miss a publish (ZeroMQ's slow joiner),
    // so ping until both have answered one round; each round waits for its own returns.
    let mut last = String::new();
    let all_answered = wait_until(TIMEOUT, || {
        let out = run_stock_salt(&root, ["*", "test.ping", "--out", "json", "-t", "15"]);
        last = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let returns = json_returns(&out.stdout);
        ids.iter()
            .all(|id| returns.get(*id) == Some(&serde_json::Value::Bool(true)))
    });
    assert!(
        all_answered,
        "not every minion answered test.ping; last output:\n{last}"
    );

    let keys = json_returns(
        assert_success(
            "salt-key -L",
            &run_stock_salt_key(&root, ["-L", "--out", "json"]),
        )
        .as_bytes(),
    );
    let accepted: HashSet<&str> = keys["minions"]
        .as_array()
        .expect("minions list")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(accepted, HashSet::from(ids));

    let mut pids: Vec<u32> = master.pids();
    for minion in &minions {
        pids.extend(minion.pids());
    }
    // salt-master forks its publisher, request workers and maintenance processes;
    // salt-minion forks a keep-alive parent's child.
    assert!(master.pids().len() > 3, "master tree: {:?}", master.pids());
    drop(minions);
    drop(master);
    let leaked: Vec<u32> = pids.into_iter().filter(|p| alive(*p)).collect();
    assert!(leaked.is_empty(), "processes left running: {leaked:?}");
}

#[test]
fn stock_salt_call_local_runs_in_a_minion_root() {
    let root = TempRoot::new();
    root.add_minion_with("solo", "file_client: local\n");
    let out = run_stock_salt_call(&root, "solo", ["--local", "test.ping", "--out", "json"]);
    let returns = json_returns(assert_success("salt-call --local", &out).as_bytes());
    assert_eq!(returns["local"], serde_json::Value::Bool(true));
}
