//! `halite m1 state.apply` prints what stock `salt` prints for the same run (the
//! `highstate` outputter the minion's return asks for), with the master config's
//! `state_*` options and the `--state-output`/`--state-verbose`/`--output-diff` flags, and
//! exits with the same status: a Halite master, a stock minion, a small state tree with
//! a directory, a templated file, test states with and without changes, and a failure.
//!
//! The master config turns `state_output_profile` off, so no start time or duration (which
//! differ from run to run) is printed; the state tree is reset before every run, so each
//! run makes the same changes.

mod common;

use common::*;
use halite_testkit::*;
use std::path::Path;

/// The state tree under `salt` (the master's `base` root); the states write below `out`.
fn write_tree(salt: &Path, out: &Path) {
    std::fs::create_dir_all(salt).unwrap();
    std::fs::write(salt.join("top.sls"), "base:\n  '*':\n    - web\n").unwrap();
    let out = out.display();
    std::fs::write(
        salt.join("web.sls"),
        format!(
            "web-dir:\n  file.directory:\n    - name: {out}/site\n    - makedirs: True\n\n\
             web-page:\n  file.managed:\n    - name: {out}/site/index.html\n    \
             - contents: \"hello {{{{ grains['id'] }}}}\"\n    \
             - require:\n      - file: web-dir\n\n\
             pretend:\n  test.succeed_with_changes: []\n\n\
             quiet:\n  test.succeed_without_changes:\n    - name: nothing to do\n\n\
             broken:\n  test.fail_without_changes:\n    - name: always broken\n"
        ),
    )
    .unwrap();
}

/// `text` with the values of the `Started:`, `Duration:` and `Total run time:` lines
/// masked (they differ from run to run).
fn without_times(text: &str) -> String {
    text.lines()
        .map(|line| {
            let trimmed = line.trim_start();
            match ["Started:", "Duration:", "Total run time:"]
                .iter()
                .find(|label| trimmed.starts_with(*label))
            {
                Some(label) => format!("{}{label} <time>", &line[..line.len() - trimmed.len()]),
                None => line.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Removes what the states made, so the next run makes the same changes.
fn reset(out: &Path) {
    let _ = std::fs::remove_dir_all(out.join("site"));
}

#[test]
fn state_apply_prints_what_stock_salt_prints() {
    let root = TempRoot::with_master_extra("auto_accept: true\nstate_output_profile: False\n");
    let out = root.path().join("out");
    write_tree(&root.master_root().join("srv/salt"), &out);
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), std::time::Duration::from_secs(60));
    let _minion = start_stock_minion(&root, "m1");
    wait_for_pings(&root, &["m1"], &["m1"]);

    let runs: [&[&str]; 7] = [
        &["m1", "state.apply"],
        &["m1", "state.apply", "--state-output", "terse"],
        &[
            "m1",
            "state.apply",
            "--state-output=mixed_id",
            "--state-verbose",
            "False",
        ],
        &[
            "m1",
            "state.apply",
            "--state_output",
            "changes",
            "--no-color",
        ],
        &["m1", "state.apply", "--output-diff", "--force-color"],
        &["m1", "state.apply", "test=True"],
        &["-s", "m1", "state.apply"],
    ];
    for args in runs {
        let mut args = args.to_vec();
        args.extend(["-t", "90"]);
        reset(&out);
        let h = halite(&root, &args);
        reset(&out);
        let s = stock(&root, &args);
        println!(
            "MEASURED {args:?}: halite {:.3} s, salt {:.3} s",
            h.took.as_secs_f64(),
            s.took.as_secs_f64()
        );
        assert!(
            s.out.contains("Summary for m1"),
            "{args:?}: stock salt printed no state run:\n{}\n{}",
            s.out,
            s.err
        );
        assert_eq!(
            h.out, s.out,
            "{args:?}: halite and salt print differently\n--- halite\n{}\n--- salt\n{}",
            h.out, s.out
        );
        assert_eq!(
            h.code, s.code,
            "{args:?}: exit status\n{}\n{}",
            h.err, s.err
        );
    }
    // Salt's default `state_output_profile: True`: the same text but for the times.
    root.write_master_config("auto_accept: true\n");
    let args = ["m1", "state.apply", "-t", "90"];
    reset(&out);
    let h = halite(&root, &args);
    reset(&out);
    let s = stock(&root, &args);
    assert!(s.out.contains("Total run time:"), "{}", s.out);
    assert_eq!(
        without_times(&h.out),
        without_times(&s.out),
        "with profile lines\n--- halite\n{}\n--- salt\n{}",
        h.out,
        s.out
    );
    // A failed state is a non-zero retcode: both exit 1 (salt has no --retcode-passthrough).
    let h = halite(&root, &["m1", "state.apply", "-t", "90"]);
    assert_eq!(h.code, Some(1), "{}", h.err);
    assert!(h
        .err
        .contains("ERROR: Minions returned with non-zero exit code"));
    assert!(h.out.contains("Failed:    1"), "{}", h.out);
}
