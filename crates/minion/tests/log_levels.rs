//! Salt's console log levels on a real minion: `-l critical` hides Salt's ERROR lines (the
//! "cached the public key" line a pending minion logs on every sign-in attempt) and
//! `-l error` prints them in Salt's form, `[ERROR   ] message`.

mod common;

use common::*;
use halite_testkit::*;
use std::process::Command;
use std::time::Duration;

/// The line a minion whose key the master holds as pending logs, at ERROR (Salt's
/// `crypt.py` logs it with `log.error`).
const PENDING: &str = "The Salt Master has cached the public key for this node";

/// Starts minion `id` with `-l level` against the master of `root`; the test's master never
/// accepts it.
fn start_at(root: &TempRoot, id: &str, level: &str) -> Proc {
    root.add_minion(id);
    let mut cmd = Command::new(halite_bin("halite-minion"));
    cmd.arg("-c")
        .arg(root.minion_config_dir(id))
        .args(["-l", level]);
    Proc::spawn(cmd, &root.procs_dir(), &format!("halite-minion-{id}"))
}

#[test]
fn critical_hides_salts_error_lines_that_error_prints_in_salts_form() {
    let root = TempRoot::new();
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let quiet = start_at(&root, "at-critical", "critical");
    let loud = start_at(&root, "at-error", "error");
    // Both have tried to sign in and were told their key is pending (their log files, at
    // the test kit's `debug`, say so whatever the console level).
    for id in ["at-critical", "at-error"] {
        wait_for_log(&root.minion_log(id), PENDING, JOIN);
    }
    let loud_stderr = loud.stderr();
    assert!(
        loud_stderr
            .lines()
            .any(|l| l.starts_with(&format!("[ERROR   ] {PENDING}"))),
        "-l error should print Salt's line:\n{loud_stderr}"
    );
    assert_eq!(quiet.stderr(), "", "-l critical should print nothing");
}
