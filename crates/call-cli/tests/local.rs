//! `halite-call --local` runs functions with no master, printing like `salt-call`.

use halite_testkit::*;
use std::process::{Command, Output};

fn call(root: &TempRoot, id: &str, args: &[&str]) -> Output {
    if !root.has_minion(id) {
        root.add_minion(id);
    }
    let mut cmd = Command::new(halite_bin("halite-call"));
    cmd.arg("-c")
        .arg(root.minion_config_dir(id))
        .arg("--local")
        .args(args);
    run_command(cmd, TIMEOUT)
}

#[test]
fn local_test_ping_prints_like_salt_call() {
    let root = TempRoot::new();
    let out = call(&root, "l1", &["test.ping"]);
    assert_eq!(
        assert_success("halite-call --local test.ping", &out),
        "local:\n    True\n"
    );
}

#[test]
fn local_grains_items_work_without_a_master() {
    let root = TempRoot::new();
    let out = call(&root, "l2", &["grains.items", "--out", "json"]);
    let docs = json_documents(assert_success("grains.items", &out).as_bytes());
    assert_eq!(docs.len(), 1);
    let grains = &docs[0]["local"];
    assert_eq!(grains["id"], serde_json::json!("l2"));
    assert!(
        grains["os"].is_string() && grains["kernel"].is_string(),
        "{grains}"
    );
    let out = call(&root, "l2", &["grains.get", "id"]);
    assert_eq!(assert_success("grains.get id", &out), "local:\n    l2\n");
    let out = call(&root, "l2", &["--id", "other", "grains.get", "id"]);
    assert_eq!(
        assert_success("--id other grains.get id", &out),
        "local:\n    other\n"
    );
}

#[test]
fn local_arguments_are_parsed_and_retcodes_become_exit_codes() {
    let root = TempRoot::new();
    let out = call(
        &root,
        "l3",
        &["test.arg", "1", "two", "k=v", "--out", "json"],
    );
    let docs = json_documents(assert_success("test.arg", &out).as_bytes());
    assert_eq!(docs[0]["local"]["args"], serde_json::json!([1, "two"]));
    assert_eq!(docs[0]["local"]["kwargs"]["k"], serde_json::json!("v"));
    assert_eq!(
        docs[0]["local"]["kwargs"]["__pub_tgt"],
        serde_json::json!("salt-call")
    );

    let out = call(&root, "l3", &["cmd.retcode", "exit 3"]);
    assert_eq!(out.status.code(), Some(1));
    let out = call(
        &root,
        "l3",
        &["--retcode-passthrough", "cmd.retcode", "exit 3"],
    );
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn a_missing_function_is_reported_like_salt_call() {
    let root = TempRoot::new();
    let out = call(&root, "l4", &["no.such"]);
    assert_eq!(out.status.code(), Some(255));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "'no.such' is not available."
    );
}
