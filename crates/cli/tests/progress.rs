//! `halite --progress` against 20 minions (a `halite-swarm`): on a pseudo-terminal it draws
//! a bar of returns against the expected minions on stderr, and on a pipe nothing; either
//! way the summary follows on stdout instead of the returns (issue 14, item 6).

mod common;

use common::*;
use halite_testkit::*;
use std::path::PathBuf;
use std::process::Command;

const COUNT: usize = 20;

/// Keys survive between runs in the target directory, so reruns skip key generation.
fn keys_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-progress-keys")
}

/// What `--progress` prints on stdout for 20 minions that all returned.
fn summary() -> String {
    let rule = "-".repeat(43);
    format!(
        "\n\n{rule}\nSummary\n{rule}\n# of minions targeted: {COUNT}\n# of minions returned: {COUNT}\n# of minions that did not return: 0\n# of minions with errors: 0\n{rule}\n"
    )
}

#[test]
fn progress_draws_a_bar_on_a_terminal_and_nothing_on_a_pipe() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = start_halite_master(&root);
    wait_for_log(&root.master_log(), "The Salt Master is ready", JOIN);
    let mut swarm = Command::new(halite_bin("halite-swarm"));
    swarm
        .args(["--count", &COUNT.to_string(), "--id-prefix", "prog-"])
        .args(["--master", &format!("127.0.0.1:{}", root.ret_port())])
        .arg("--keys-dir")
        .arg(keys_dir());
    let _swarm = Proc::spawn(swarm, &root.procs_dir(), "halite-swarm");
    let ids: Vec<String> = (0..COUNT).map(|i| format!("prog-{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    wait_for_pings(&root, &["prog-*"], &ids);

    // A pseudo-terminal on stderr (and stdin); stdout to a file.
    let out_file = root.path().join("progress.out");
    let command = format!(
        "{} -c {} --progress 'prog-*' test.sleep 1 > {}",
        halite_bin("halite").display(),
        root.master_config_dir().display(),
        out_file.display()
    );
    let mut script = Command::new("script");
    script
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env("TERM", "xterm");
    let tty = run_command(script, TIMEOUT);
    let drawn = String::from_utf8_lossy(&tty.stdout);
    assert!(
        tty.status.success(),
        "{drawn}{}",
        String::from_utf8_lossy(&tty.stderr)
    );
    assert!(
        drawn.contains(&format!("Returns: [0/{COUNT}]")) && drawn.contains("100% ["),
        "no bar drawn on the terminal: {drawn:?}"
    );
    let last = drawn
        .rsplit('\r')
        .find(|frame| frame.contains("Returns:"))
        .unwrap_or_default();
    assert!(
        last.contains(&format!("Returns: [{COUNT}/{COUNT}]")),
        "the bar did not end full: {last:?}"
    );
    let stdout = std::fs::read_to_string(&out_file).expect("stdout of halite --progress");
    assert_eq!(stdout, summary());

    // On a pipe: no bar, the same summary.
    let piped = halite(&root, &["--progress", "prog-*", "test.sleep", "1"]);
    assert_eq!(piped.code, Some(0), "{}", piped.err);
    assert_eq!(piped.err, "", "something was drawn on a pipe");
    assert_eq!(piped.out, summary());
}
