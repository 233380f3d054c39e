//! The README's quickstart command starts a master and three minions, answers a ping, and
//! stops everything cleanly on SIGTERM (issue: minion core, item 6), printing only its
//! own status lines (issue 14, item 2).

use halite_testkit::*;
use std::process::Command;
use std::time::Duration;

#[test]
fn quickstart_starts_a_fleet_that_answers_and_stops_cleanly() {
    let root = TempRoot::new();
    let state = root.path().join("local");
    let ports = free_ports(2);
    let bin_dir = halite_bin("halite").parent().expect("bin dir").to_owned();
    let mut cmd = Command::new(repo_root().join("scripts/quickstart"));
    cmd.env("HALITE_LOCAL_DIR", &state)
        .env("HALITE_BIN_DIR", &bin_dir)
        .env("HALITE_PORTS", format!("{} {}", ports[0], ports[1]));
    let mut fleet = Proc::spawn(cmd, &root.procs_dir(), "quickstart");
    wait_for_log(
        fleet.stdout_path(),
        "Halite is running",
        Duration::from_secs(120),
    );

    let out = run(
        bin_dir.join("halite"),
        [
            "-c",
            state.join("etc").to_str().unwrap(),
            "*",
            "test.ping",
            "--out",
            "json",
            "-t",
            "20",
        ],
        Duration::from_secs(120),
    );
    let pings = json_returns(&out.stdout);
    for id in ["minion-1", "minion-2", "minion-3"] {
        assert_eq!(
            pings.get(id),
            Some(&serde_json::Value::Bool(true)),
            "{pings:?}"
        );
    }

    // SIGTERM to the script alone (as Ctrl-C would): it stops its daemons and exits 0.
    let daemons: Vec<u32> = fleet
        .pids()
        .into_iter()
        .filter(|p| *p != fleet.pid())
        .collect();
    assert!(
        daemons.len() >= 4,
        "expected a master and three minions under the script: {daemons:?}"
    );
    // SAFETY: plain kill(2) on the pid of a child this test started.
    unsafe { libc::kill(fleet.pid() as i32, libc::SIGTERM) };
    let status = fleet
        .wait_exit(Duration::from_secs(60))
        .expect("quickstart did not stop");
    assert!(status.success(), "quickstart exited with {status}");
    assert!(fleet.stdout().contains("Stopped."));
    // Only the script's own status lines: its daemons run at `-l critical`, which hides
    // Salt's ERROR lines (a pending minion's "cached the public key" among them).
    assert_eq!(
        fleet.stderr(),
        "",
        "quickstart printed more than its status"
    );
    let alive: Vec<u32> = daemons
        .into_iter()
        .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
        .collect();
    assert!(
        alive.is_empty(),
        "daemons still running after stop: {alive:?}"
    );
}
