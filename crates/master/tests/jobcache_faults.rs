//! A job cache that stops taking writes under a running master (issue 16, item 5): new
//! publishes are refused the way Salt refuses them when `prep_jid` cannot store a jid (the
//! `salt` CLI prints the error, exit code 0), the error names the path that failed, and a
//! return the master accepted while the cache could not be written is not lost: it reaches
//! the job cache once the cache takes writes again, where `halite-run` and stock `salt-run`
//! find it.
//!
//! The tests run as root, whom file modes do not stop, so the master runs in a mount
//! namespace of its own (`unshare --mount`), where the test makes its `cachedir/jobs` a
//! read-only bind mount and later removes it (`nsenter`); nothing outside that namespace
//! sees the change, and it ends with the master.

mod common;

use common::*;
use halite_testkit::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// What Halite's refusal starts with: the line Salt's `local_cache.prep_jid` logs.
const REFUSAL: &str = "prep_jid could not store a jid";

/// `halite-master` in a private mount namespace.
fn start_master_in_own_mount_namespace(root: &TempRoot) -> Proc {
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "--"])
        .arg(halite_bin("halite-master"))
        .arg("-c")
        .arg(root.master_config_dir());
    Proc::spawn(cmd, &root.procs_dir(), "halite-master")
}

/// Runs `args` in the mount namespace of process `pid`.
fn in_namespace_of(pid: u32, args: &[&str]) {
    let mut cmd = Command::new("nsenter");
    cmd.args(["-t", &pid.to_string(), "-m", "--"]).args(args);
    let out = run_command(cmd, TIMEOUT);
    assert!(
        out.status.success(),
        "nsenter -t {pid} -m -- {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn make_read_only(master: &Proc, dir: &Path) {
    let dir = dir.to_str().expect("a UTF-8 path");
    in_namespace_of(master.pid(), &["mount", "--bind", dir, dir]);
    in_namespace_of(master.pid(), &["mount", "-o", "remount,bind,ro", dir]);
}

fn make_writable(master: &Proc, dir: &Path) {
    in_namespace_of(
        master.pid(),
        &["umount", dir.to_str().expect("a UTF-8 path")],
    );
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_read_only_job_cache_refuses_publishes_and_loses_no_accepted_return() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let master = start_master_in_own_mount_namespace(&root);
    wait_for_port(root.ret_port(), std::time::Duration::from_secs(30));
    let _minion = start_halite_minion(&root, "ro-1");
    wait_for_pings(&root, &["ro-1"]);
    let jobs = root.master_root().join("cache").join("jobs");
    let log = root.master_log();

    // A job goes out while the cache is writable; its return comes after the cache
    // became read-only.
    let out = run_halite(&root, ["ro-1", "test.sleep", "4", "--async"]);
    let text = assert_success("halite --async", &out);
    let jid = text
        .trim()
        .strip_prefix("Executed command with job ID: ")
        .unwrap_or_else(|| panic!("no job id in {text:?}"))
        .to_owned();
    make_read_only(&master, &jobs);

    // New jobs are refused, with the error and the exit code the `salt` CLI gives for a
    // publish the master refused, naming the directory that could not be written.
    for (cli, out) in [
        ("halite", run_halite(&root, ["ro-1", "test.ping"])),
        ("stock salt", run_stock_salt(&root, ["ro-1", "test.ping"])),
    ] {
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{cli}: {text}");
        assert!(text.contains(REFUSAL), "{cli} printed: {text}");
        assert!(
            text.contains(&*jobs.to_string_lossy()),
            "{cli}: the error names the path: {text}"
        );
        assert!(text.contains("Read-only file system"), "{cli}: {text}");
    }

    // The return of the job that went out is accepted, and cannot be written.
    wait_for_log(
        &log,
        "The job cache cannot be written",
        Duration::from_secs(60),
    );
    let job_dir = halite_jobcache::LocalCacheWriter::new(
        root.master_root().join("cache"),
        Default::default(),
    )
    .jid_dir(&jid)
    .expect("the job directory of the jid");
    let returned = job_dir.join("ro-1").join("return.p");
    assert!(
        !returned.exists(),
        "the return was written to a read-only tree"
    );

    make_writable(&master, &jobs);
    wait_for_log(
        &log,
        "The job cache can be written again",
        Duration::from_secs(60),
    );
    assert!(returned.is_file(), "the kept return reached local_cache");
    assert_eq!(
        halite_json(&root, &["ro-1", "test.ping"]),
        serde_json::from_value::<serde_json::Map<String, Value>>(json!({"ro-1": true})).unwrap(),
        "publishes are taken again"
    );
    assert_eq!(
        salt_run_json(&root, &["jobs.lookup_jid", &jid]),
        json!({"ro-1": true}),
        "stock salt-run finds the return"
    );
    let found = halite_run_json(&root, &["jobs.lookup_jid", &jid]);
    assert_eq!(found, json!({"ro-1": true}), "halite-run finds the return");
}
