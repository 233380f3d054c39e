//! What init scripts and monitoring rely on from the daemons' pidfiles (issue 14, item 5),
//! with the workspace binaries (`cargo build --workspace --bins` first): `halite-master` and
//! `halite-minion` write their configured `pidfile` (or `--pid-file`) and remove it on
//! exit, and a second daemon on the same pidfile exits 1 without touching the first one's
//! file (Salt's minion does too; Halite's master also refuses, see halite-daemon's
//! `PidFile`).

use halite_testkit::{
    halite_bin, start_halite_master, start_halite_minion, wait_until, Proc, TempRoot, TIMEOUT,
};
use std::path::Path;
use std::process::Command;

fn pid_in(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.parse().ok()
}

/// Starts a second daemon on `config_dir` and checks that it refuses to run.
fn second_instance_is_refused(program: &str, config_dir: &Path, procs: &Path, pidfile: &Path) {
    let first_pid = pid_in(pidfile);
    let mut cmd = Command::new(halite_bin(program));
    cmd.arg("-c").arg(config_dir);
    let mut second = Proc::spawn(cmd, procs, &format!("{program}-second"));
    let status = second
        .wait_exit(TIMEOUT)
        .unwrap_or_else(|| panic!("a second {program} kept running"));
    assert_eq!(status.code(), Some(1), "{program}: {}", second.stderr());
    assert!(
        second.stderr().contains("An instance is already running"),
        "{program}: {}",
        second.stderr()
    );
    assert_eq!(
        pid_in(pidfile),
        first_pid,
        "the first {program}'s pidfile changed"
    );
}

#[test]
fn master_writes_its_pidfile_refuses_a_second_instance_and_removes_the_file_on_exit() {
    let root = TempRoot::new();
    let pidfile = root.master_root().join("run/salt-master.pid");
    let mut master = start_halite_master(&root);
    assert!(
        wait_until(TIMEOUT, || pid_in(&pidfile) == Some(master.pid())),
        "no pidfile at {}",
        pidfile.display()
    );
    second_instance_is_refused(
        "halite-master",
        root.master_config_dir(),
        &root.procs_dir(),
        &pidfile,
    );
    assert!(
        master.is_running(),
        "the refused second master stopped the first"
    );
    assert!(master.stop().success());
    assert!(!pidfile.exists(), "the master left {}", pidfile.display());
}

#[test]
fn minion_writes_its_pidfile_refuses_a_second_instance_and_removes_the_file_on_exit() {
    let root = TempRoot::new();
    root.add_minion("pid-minion");
    let pidfile = root
        .minion_config_dir("pid-minion")
        .join("run/salt-minion.pid");
    // No master: the minion keeps looking for one, which is enough to hold its pidfile.
    let mut minion = start_halite_minion(&root, "pid-minion");
    assert!(
        wait_until(TIMEOUT, || pid_in(&pidfile) == Some(minion.pid())),
        "no pidfile at {}",
        pidfile.display()
    );
    second_instance_is_refused(
        "halite-minion",
        &root.minion_config_dir("pid-minion"),
        &root.procs_dir(),
        &pidfile,
    );
    assert!(
        minion.is_running(),
        "the refused second minion stopped the first"
    );
    assert!(minion.stop().success());
    assert!(!pidfile.exists(), "the minion left {}", pidfile.display());
}

#[test]
fn pid_file_flag_overrides_the_configured_pidfile() {
    let root = TempRoot::new();
    let configured = root.master_root().join("run/salt-master.pid");
    let flagged = root.path().join("elsewhere/halite-master.pid");
    let mut cmd = Command::new(halite_bin("halite-master"));
    cmd.arg("-c")
        .arg(root.master_config_dir())
        .arg("--pid-file")
        .arg(&flagged);
    let mut master = Proc::spawn(cmd, &root.procs_dir(), "halite-master");
    assert!(
        wait_until(TIMEOUT, || pid_in(&flagged) == Some(master.pid())),
        "no pidfile at {}",
        flagged.display()
    );
    assert!(!configured.exists());
    assert!(master.stop().success());
    assert!(!flagged.exists());
}
