//! Salt's `job_cache` option on a Halite master, seen by stock tools (issue 15, item 1): a
//! stock `salt-minion` joins, stock `salt` runs jobs and prints the returns, and stock
//! `salt-run jobs.*` reads the `local_cache` tree.
//!
//! - `job_cache: True` (Salt's default): `salt-run jobs.lookup_jid` shows the return.
//! - `job_cache: False`: `salt-run jobs.lookup_jid` gives what it gives against a stock
//!   `salt-master` with `job_cache: False` (run here too, with the same minion config):
//!   `{}`, as stock keeps loads but no returns in the tree. `salt-run jobs.list_jobs` still
//!   lists the job, and `halite-run jobs.lookup_jid` still shows the return: Halite keeps
//!   returns in its own store (`jobs.redb`) either way.

mod common;

use common::*;
use halite_testkit::*;
use serde_json::{json, Map, Value};
use std::process::Output;
use std::time::Duration;

const MINION: &str = "jc-0";

fn text(out: &Output) -> String {
    format!(
        "--- stdout ---\n{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Stock `salt --show-jid <args> --out json`: the job's jid and what it printed per minion.
fn stock_salt(root: &TempRoot, args: &[&str]) -> (String, Map<String, Value>) {
    let mut all = vec!["--show-jid"];
    all.extend(args);
    all.extend(["--out", "json", "-t", "30"]);
    let out = run_stock_salt(root, &all);
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let (jid, returns) = printed
        .split_once('\n')
        .and_then(|(first, rest)| Some((first.strip_prefix("jid: ")?, rest)))
        .unwrap_or_else(|| panic!("salt {args:?}: no jid line first\n{}", text(&out)));
    (jid.trim().to_owned(), json_returns(returns.as_bytes()))
}

/// Waits until stock `salt` gets `true` from [`MINION`]'s `test.ping` (until the key is
/// accepted, it prints "No minions matched the target").
fn wait_for_stock_ping(root: &TempRoot) {
    let mut last = String::new();
    let ok = wait_until(JOIN, || {
        let out = run_stock_salt(root, [MINION, "test.ping", "--out", "json", "-t", "5"]);
        last = text(&out);
        serde_json::from_slice::<Value>(&out.stdout).is_ok_and(|v| v == json!({MINION: true}))
    });
    assert!(
        ok,
        "{MINION} never answered stock salt's test.ping:\n{last}"
    );
}

/// A stock minion on `root`'s master (`stock`: a stock `salt-master`, else Halite's), once
/// it answers: the master, the minion.
fn master_and_minion(root: &TempRoot, stock: bool) -> (Proc, Proc) {
    let master = if stock {
        start_stock_master(root)
    } else {
        start_halite_master(root)
    };
    wait_for_port(root.ret_port(), Duration::from_secs(60));
    let minion = start_stock_minion(root, MINION);
    wait_for_stock_ping(root);
    (master, minion)
}

/// Stock `salt` prints the returns of `test.ping` and of `test.echo <word>`; the jid of
/// the echo.
fn run_jobs(root: &TempRoot, word: &str) -> String {
    let (_, pings) = stock_salt(root, &[MINION, "test.ping"]);
    assert_eq!(
        Value::Object(pings),
        json!({MINION: true}),
        "stock salt test.ping"
    );
    let (jid, echoed) = stock_salt(root, &[MINION, "test.echo", word]);
    assert_eq!(
        Value::Object(echoed),
        json!({MINION: word}),
        "stock salt test.echo"
    );
    jid
}

/// Waits until `lookup` (`salt_run_json` or `halite_run_json`) of `jobs.lookup_jid <jid>`
/// gives `expected`.
fn wait_for_lookup(
    lookup: fn(&TempRoot, &[&str]) -> Value,
    root: &TempRoot,
    jid: &str,
    expected: Value,
) {
    let mut found = Value::Null;
    let stored = wait_until(TIMEOUT, || {
        found = lookup(root, &["jobs.lookup_jid", jid]);
        found == expected
    });
    assert!(
        stored,
        "jobs.lookup_jid {jid}: {found}, expected {expected}"
    );
}

#[test]
fn job_cache_true_stock_salt_run_finds_the_stock_minions_return() {
    let root = TempRoot::with_master_extra("auto_accept: True\njob_cache: True\n");
    let (_master, _minion) = master_and_minion(&root, false);
    let jid = run_jobs(&root, "kept");

    // The return's event reaches `salt` before the writer has the return in the tree.
    wait_for_lookup(salt_run_json, &root, &jid, json!({MINION: "kept"}));
    assert_eq!(
        halite_run_json(&root, &["jobs.lookup_jid", &jid]),
        json!({MINION: "kept"})
    );
}

#[test]
fn job_cache_false_keeps_returns_out_of_local_cache_as_stock_does_and_halite_run_still_finds_them()
{
    let extra = "auto_accept: True\njob_cache: False\n";

    let halite_root = TempRoot::with_master_extra(extra);
    let (master, minion) = master_and_minion(&halite_root, false);
    let jid = run_jobs(&halite_root, "not-in-the-tree");
    // Halite stores the return (redb); the writer writes a return's tree file (were it
    // to write one) in the same pass, right after the redb commit, so by the time
    // `halite-run` finds it the tree has had its chance.
    wait_for_lookup(
        halite_run_json,
        &halite_root,
        &jid,
        json!({MINION: "not-in-the-tree"}),
    );
    let halite_lookup = salt_run_json(&halite_root, &["jobs.lookup_jid", &jid]);
    let halite_jobs = salt_run_json(&halite_root, &["jobs.list_jobs"]);
    assert!(
        halite_jobs.get(&jid).is_some(),
        "salt-run jobs.list_jobs lacks {jid}: {halite_jobs}"
    );
    drop((minion, master));

    let stock_root = TempRoot::with_master_extra(extra);
    let (_master, _minion) = master_and_minion(&stock_root, true);
    let stock_jid = run_jobs(&stock_root, "not-in-the-tree");
    let stock_lookup = salt_run_json(&stock_root, &["jobs.lookup_jid", &stock_jid]);
    let stock_jobs = salt_run_json(&stock_root, &["jobs.list_jobs"]);
    assert!(
        stock_jobs.get(&stock_jid).is_some(),
        "stock master: salt-run jobs.list_jobs lacks {stock_jid}: {stock_jobs}"
    );

    assert_eq!(
        halite_lookup, stock_lookup,
        "salt-run jobs.lookup_jid: Halite master, stock master"
    );
    assert_eq!(stock_lookup, json!({}));
}
