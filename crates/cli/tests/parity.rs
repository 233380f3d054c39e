//! `halite` beside stock `salt` on one Halite master with Halite and stock minions: the
//! flags and behaviours of issue 14, item 5 print what `salt` prints and exit as it exits —
//! nodegroups (`-N`, and `N@` inside `-C`), `--batch` (count, percent, `--batch-wait`,
//! `--failhard`), `--static`, `--summary`, `sys.doc`; and a job whose silent minions all
//! answer `saltutil.find_job` with "not running" ends at once (item 4).

mod common;

use common::*;
use halite_testkit::*;
use std::time::Duration;

const NODEGROUPS: &str = "\
nodegroups:
  up: L@hal-1,hal-2,stock-1
  webs: L@hal-1,stock-1
  lst: [hal-2, stock-1]
  nested: N@webs or N@lst
";

/// A Halite master (`gather_job_timeout` 2, so a silent minion costs little) with
/// `hal-1`, `hal-2` (Halite) and `stock-1` (stock) answering, and `zz-down`, whose key is
/// accepted but which never runs.
struct Fleet {
    root: TempRoot,
    _procs: Vec<Proc>,
}

fn fleet() -> Fleet {
    let root = TempRoot::with_master_extra(&format!(
        "auto_accept: true\ngather_job_timeout: 2\n{NODEGROUPS}"
    ));
    let master = start_halite_master(&root);
    wait_for_log(&root.master_log(), "The Salt Master is ready", JOIN);
    let procs = vec![
        master,
        start_halite_minion(&root, "hal-1"),
        start_halite_minion(&root, "hal-2"),
        start_stock_minion(&root, "stock-1"),
    ];
    wait_for_pings(&root, &["*"], &["hal-1", "hal-2", "stock-1"]);
    let pki = root.master_pki_dir().join("minions");
    std::fs::copy(pki.join("hal-1"), pki.join("zz-down")).expect("accept zz-down's key");
    Fleet {
        root,
        _procs: procs,
    }
}

fn same_exit(what: &str, h: &Run, s: &Run) {
    assert_eq!(
        h.code, s.code,
        "{what}: exit status\n--- halite ---\n{}{}\n--- salt ---\n{}{}",
        h.out, h.err, s.out, s.err
    );
}

/// The lines of `--summary` output, sorted, with the minion lists of the verbose lines
/// sorted too (minions are listed in the order they answered).
fn summary_lines(out: &str) -> Vec<String> {
    sorted_lines(out)
        .into_iter()
        .map(|line| match line.split_once(": ") {
            Some((head @ ("Minions with failures" | "Minions not responding"), ids)) => {
                let mut ids: Vec<&str> = ids.split(' ').collect();
                ids.sort();
                format!("{head}: {}", ids.join(" "))
            }
            _ => line,
        })
        .collect()
}

fn same_stdout(what: &str, h: &Run, s: &Run) {
    assert_eq!(mask_jids(&h.out), mask_jids(&s.out), "{what}: stdout");
    same_exit(what, h, s);
}

#[test]
fn nodegroups_batches_static_summary_and_sys_doc_print_as_stock_salt() {
    let fleet = fleet();
    let root = &fleet.root;

    // Nodegroups: `-N`, a nested group, and `N@` inside a compound.
    for args in [
        &["-N", "webs", "test.ping", "--out", "json"][..],
        &["-N", "nested", "test.ping", "--out", "json"],
        &["-C", "N@lst or hal-1", "test.ping", "--out", "json"],
    ] {
        let (h, s) = both(root, args);
        same_exit(&format!("{args:?}"), &h, &s);
        assert_eq!(h.returns(), s.returns(), "{args:?}");
        assert!(
            h.returns()
                .values()
                .all(|v| v == &serde_json::Value::Bool(true)),
            "{args:?}: {}",
            h.out
        );
    }
    let (h, s) = both(root, &["-N", "nope", "test.ping"]);
    same_stdout("-N nope", &h, &s);
    assert!(
        h.out.starts_with("Node group nope unavailable in "),
        "{}",
        h.out
    );

    // One minion, one sub-batch: the whole output is Salt's, byte for byte.
    for id in ["stock-1", "hal-1"] {
        let (h, s) = both(root, &[id, "test.ping", "-b", "1"]);
        same_stdout(&format!("{id} -b 1"), &h, &s);
        assert!(h.out.contains(&format!("\nExecuting run on ['{id}']\n\n")));
    }

    // Count and percent: who runs in which sub-batch is Salt's set order, so shapes are
    // compared.
    for (spec, sizes) in [
        ("2", vec![2, 1]),
        ("50%", vec![1, 1, 1]),
        ("0", vec![1, 1, 1]),
    ] {
        let args = ["-N", "up", "test.ping", "-b", spec, "--out", "json"];
        let (h, s) = both(root, &args);
        same_exit(&format!("-b {spec}"), &h, &s);
        same_batch(&format!("-b {spec}"), &h, &s);
        assert_eq!(batch_shape(&h.out).sizes(), sizes, "-b {spec}: {}", h.out);
    }

    // --batch-wait holds each slot a second after its minion returned: three minions one
    // at a time take two such seconds at least.
    let (h, s) = both(
        root,
        &[
            "-N",
            "up",
            "test.ping",
            "-b",
            "1",
            "--batch-wait",
            "1",
            "--out",
            "json",
        ],
    );
    same_exit("--batch-wait", &h, &s);
    same_batch("--batch-wait", &h, &s);
    assert_eq!(batch_shape(&h.out).sizes(), [1, 1, 1]);
    assert!(
        h.took >= Duration::from_secs(2),
        "--batch-wait took {:?}",
        h.took
    );

    // --failhard: the first return with a retcode above 0 ends the batch, exit status its
    // retcode.
    let args = [
        "-N",
        "up",
        "test.retcode",
        "3",
        "-b",
        "1",
        "--failhard",
        "--out",
        "json",
    ];
    let (h, s) = both(root, &args);
    same_exit("--failhard", &h, &s);
    assert_eq!(h.code, Some(3));
    for run in [&h, &s] {
        let shape = batch_shape(&run.out);
        assert_eq!(shape.sizes(), [1]);
        assert_eq!(shape.returns.len(), 1);
        assert!(
            run.err
                .contains("[ERROR   ] Batch run stopped due to failhard"),
            "{}",
            run.err
        );
    }
    // Without it every minion runs; the exit status is still the highest retcode.
    let (h, s) = both(
        root,
        &["-N", "up", "test.retcode", "3", "-b", "2", "--out", "json"],
    );
    same_exit("-b without --failhard", &h, &s);
    same_batch("-b without --failhard", &h, &s);
    assert_eq!(h.code, Some(3));

    // A minion that does not answer the ping gets no job, and says so.
    let (h, s) = both(
        root,
        &["*", "test.ping", "-b", "2", "-t", "1", "--out", "json"],
    );
    same_exit("-b with a minion down", &h, &s);
    same_batch("-b with a minion down", &h, &s);
    let shape = batch_shape(&h.out);
    assert_eq!(
        shape.down,
        ["Minion zz-down did not respond. No job will be sent."]
    );
    assert_eq!(shape.sizes(), [2, 1]);

    // --static: one document of the minions that returned (zz-down is left out).
    for args in [
        &["*", "test.ping", "--static", "-t", "1"][..],
        &["*", "test.ping", "--static", "-t", "1", "--out", "json"],
        &["-N", "up", "test.retcode", "3", "--static"],
    ] {
        let (h, s) = both(root, args);
        if args.contains(&"json") {
            same_exit(&format!("{args:?}"), &h, &s);
            assert_eq!(h.returns(), s.returns(), "{args:?}");
        } else {
            same_stdout(&format!("{args:?}"), &h, &s);
        }
        assert!(!h.out.contains("zz-down"), "{}", h.out);
    }

    // --summary, after the returns; minions answer in any order.
    for args in [
        &["-N", "up", "test.retcode", "3", "--summary", "-v"][..],
        &["*", "test.ping", "--summary", "-v", "-t", "1"],
        &["-N", "up", "test.ping", "--summary"],
    ] {
        let (h, s) = both(root, args);
        same_exit(&format!("{args:?}"), &h, &s);
        assert_eq!(summary_lines(&h.out), summary_lines(&s.out), "{args:?}");
        assert!(h
            .out
            .contains("\n\n\n-------------------------------------------\nSummary\n"));
    }
    let (h, _) = both(root, &["*", "test.ping", "--summary", "-t", "1"]);
    assert!(
        h.out.contains("# of minions that did not return: 1\n"),
        "{}",
        h.out
    );
    // Not with --out, as Salt.
    let (h, s) = both(
        root,
        &["-N", "up", "test.ping", "--summary", "--out", "json"],
    );
    assert!(!h.out.contains("Summary") && !s.out.contains("Summary"));

    // sys.doc: each function's doc once, without minion ids.
    for args in [
        &["-N", "up", "sys.doc", "test.ping"][..],
        &["-N", "up", "sys.doc", "test.ping", "--static"],
        &["-N", "up", "sys.doc", "test.ping", "--out", "json"],
    ] {
        let (h, s) = both(root, args);
        same_stdout(&format!("{args:?}"), &h, &s);
        assert!(!h.out.contains("hal-"), "{}", h.out);
    }

    // Nothing matched.
    for args in [
        &["nobody", "test.ping", "-b", "1"][..],
        &["nobody", "test.ping", "--static"],
        &["nobody", "test.ping", "--summary"],
        &["nobody", "sys.doc"],
    ] {
        let (h, s) = both(root, args);
        same_stdout(&format!("{args:?}"), &h, &s);
        assert_eq!(h.err, s.err, "{args:?}");
    }

    // Usage errors: Salt's parser error (its program name aside) and exit status.
    let (h, s) = both(root, &["-E", "-C", "-N", "x", "test.ping"]);
    same_exit("exclusive target options", &h, &s);
    let error = |run: &Run| {
        run.err
            .lines()
            .last()
            .map(|l| l.split_once(": error: ").map(|p| p.1.to_owned()))
    };
    assert_eq!(error(&h), error(&s));
    let (h, s) = both(root, &["-N", "up", "test.ping", "-b", "abc"]);
    same_exit("-b abc", &h, &s);
    let line = h.err.trim_end();
    assert!(
        line.starts_with("Invalid batch specification 'abc'") && s.err.contains(line),
        "halite: {}\nsalt: {}",
        h.err,
        s.err
    );
}

/// Issue 14, item 4: minions that are up but did not get the job (here the master
/// expects them for a grain it has no cache of, and they do not match it) answer
/// find_job "not running", and `halite` ends right after their answers instead of
/// waiting out `gather_job_timeout`, reporting them as Salt reports them.
#[test]
fn a_job_whose_silent_minions_all_say_not_running_costs_the_timeout_and_one_probe() {
    let gather_job_timeout = 60;
    let root = TempRoot::with_master_extra(&format!(
        "auto_accept: true\nminion_data_cache: false\ngather_job_timeout: {gather_job_timeout}\n"
    ));
    let _master = start_halite_master(&root);
    wait_for_log(&root.master_log(), "The Salt Master is ready", JOIN);
    let _minions = [
        start_halite_minion(&root, "hal-1"),
        start_stock_minion(&root, "stock-1"),
    ];
    wait_for_pings(&root, &["*"], &["hal-1", "stock-1"]);

    let timeout = 2;
    let run = halite(
        &root,
        &[
            "-G",
            "os:NoSuchOs",
            "test.ping",
            "-t",
            &timeout.to_string(),
            "--out",
            "json",
        ],
    );
    println!(
        "MEASURED silent minions answering not running: halite {:.3} s (timeout {timeout} s, gather_job_timeout {gather_job_timeout} s)",
        run.took.as_secs_f64()
    );
    assert_eq!(run.code, Some(1), "{}{}", run.out, run.err);
    let returns = run.returns();
    assert_eq!(returns.len(), 2, "{}", run.out);
    for (id, ret) in &returns {
        let text = ret.as_str().unwrap_or_default();
        assert!(
            text.starts_with("Minion did not return. [No response]\n")
                && text.contains("salt-run jobs.lookup_jid "),
            "{id}: {ret}"
        );
    }
    assert!(run
        .err
        .contains("ERROR: Minions returned with non-zero exit code"));
    // It waited for the timeout and probed ...
    assert!(run.took >= Duration::from_secs(timeout), "{:?}", run.took);
    // ... but did not wait out gather_job_timeout after the answers.
    assert!(
        run.took < Duration::from_secs(gather_job_timeout),
        "took {:?}: the find_job answers were not taken as final",
        run.took
    );
}
