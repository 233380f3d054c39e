//! The fallback executor (issue 18, item 3): a Halite minion runs what it lacks in Salt's
//! own loader on the host's Salt. The same `state.apply` (a directory, a `file.managed`
//! from a Jinja template using a pillar value and grains, a `cmd.run` with `onchanges`)
//! gives the same result as a stock minion beside it, against a stock and a Halite master;
//! `pkg.list_pkgs`, `file.file_exists` and `user.info root` give what stock `salt-call`
//! gives on this host; events fired by Salt's modules reach the master; killing a job kills
//! its processes; the worker is gone after its idle timeout (the minion's RSS is printed
//! before, with and after it); `halite-call state.apply` runs through the same fallback;
//! and without Salt, a function Halite lacks says clearly that it is not available.

mod common;

use common::seed::BusTap;
use common::JOIN;
use halite_testkit::*;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The Halite minion under test and the stock minion beside it.
const HALITE: &str = "halite-fb";
const STOCK: &str = "stock-fb";

/// The worker's idle timeout in these tests.
const IDLE_SECS: u64 = 4;

/// Writes the state tree and the pillar under `srv`; the states write below
/// `out/<minion id>`.
fn write_tree(srv: &Path, out: &Path) {
    let salt = srv.join("salt");
    let pillar = srv.join("pillar");
    std::fs::create_dir_all(salt.join("web/files")).unwrap();
    std::fs::create_dir_all(&pillar).unwrap();
    std::fs::write(salt.join("top.sls"), "base:\n  '*':\n    - web\n").unwrap();
    std::fs::write(
        salt.join("web/init.sls"),
        format!(
            "{{% set out = '{}/' ~ grains['id'] %}}\n\
             web-dir:\n  file.directory:\n    - name: {{{{ out }}}}/site\n    - makedirs: True\n\n\
             web-motd:\n  file.managed:\n    - name: {{{{ out }}}}/site/motd\n    \
             - source: salt://web/files/motd.j2\n    - template: jinja\n    \
             - require:\n      - file: web-dir\n\n\
             web-reload:\n  cmd.run:\n    - name: echo reloaded >> {{{{ out }}}}/reloads\n    \
             - onchanges:\n      - file: web-motd\n",
            out.display()
        ),
    )
    .unwrap();
    std::fs::write(
        salt.join("web/files/motd.j2"),
        "Welcome to {{ grains['id'] }} running {{ grains['kernel'] }} on \
         {{ grains['os_family'] }}, role {{ salt['pillar.get']('role', 'none') }}\n",
    )
    .unwrap();
    std::fs::write(pillar.join("top.sls"), "base:\n  '*':\n    - common\n").unwrap();
    std::fs::write(pillar.join("common.sls"), "role: web\n").unwrap();
}

/// The venv's `bin`, first on the `PATH` the Halite minion gets (so it finds
/// `salt-call` there by itself).
fn path_with_salt() -> String {
    let bin = salt_venv().join("bin");
    match std::env::var("PATH") {
        Ok(path) if !path.is_empty() => format!("{}:{path}", bin.display()),
        _ => bin.display().to_string(),
    }
}

/// Starts the Halite minion `id` with `extra_yaml` and the venv on its `PATH`.
fn start_halite_minion_with_salt(root: &TempRoot, id: &str, extra_yaml: &str) -> Proc {
    root.add_minion_with(id, extra_yaml);
    let mut cmd = Command::new(halite_bin("halite-minion"));
    cmd.arg("-c")
        .arg(root.minion_config_dir(id))
        .env("PATH", path_with_salt());
    Proc::spawn(cmd, &root.procs_dir(), &format!("halite-minion-{id}"))
}

/// Stock `salt <args> --out json -t <timeout>`: `{minion: return}`.
fn salt_json(root: &TempRoot, args: &[&str], timeout: u32) -> Map<String, Value> {
    let timeout = timeout.to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--out", "json", "-t", &timeout]);
    common::returns(&run_stock_salt(root, &all).stdout)
}

/// The return of `id` for `salt <args>`, panicking with the output when there is none.
fn call(root: &TempRoot, id: &str, args: &[&str]) -> Value {
    let mut all = vec![id];
    all.extend_from_slice(args);
    salt_json(root, &all, 120)
        .remove(id)
        .unwrap_or_else(|| panic!("no return from {id} for {args:?}"))
}

/// Stock `salt-call --local <args>` on this host (with the stock minion's config).
fn salt_call_local(root: &TempRoot, args: &[&str]) -> Value {
    let mut all = vec!["--local", "--out", "json"];
    all.extend_from_slice(args);
    let out = run_stock_salt_call(root, STOCK, &all);
    let parsed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "salt-call {args:?} did not print JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    parsed["local"].clone()
}

/// A state return made comparable across minions: the minion id replaced, timings and
/// pids dropped.
fn normalized(ret: &Value, id: &str) -> Value {
    let text = serde_json::to_string(ret).unwrap().replace(id, "<ID>");
    let mut ret: Value = serde_json::from_str(&text).unwrap();
    if let Some(states) = ret.as_object_mut() {
        for state in states.values_mut() {
            if let Some(state) = state.as_object_mut() {
                state.remove("duration");
                state.remove("start_time");
                if let Some(changes) = state.get_mut("changes").and_then(Value::as_object_mut) {
                    changes.remove("pid");
                }
            }
        }
    }
    ret
}

/// Asserts every state of a `state.apply` return succeeded; returns whether any changed.
fn check_states(ret: &Value, who: &str) -> bool {
    let states = ret
        .as_object()
        .unwrap_or_else(|| panic!("{who}: state.apply did not return states: {ret}"));
    assert_eq!(states.len(), 3, "{who}: {ret}");
    let mut changed = false;
    for (key, state) in states {
        assert_eq!(state["result"], json!(true), "{who}: {key} failed: {state}");
        changed |= state["changes"] != json!({});
    }
    changed
}

/// Applies the tree on both minions twice: the Halite minion's returns equal the stock
/// minion's (normalized), the first run changes everything, the second nothing; the
/// rendered files are the same.
fn apply_beside_stock(root: &TempRoot, out: &Path) {
    let both = format!("{HALITE},{STOCK}");
    for (run, expect_changes) in [("first", true), ("second", false)] {
        let rets = salt_json(root, &["-L", &both, "state.apply"], 120);
        let (Some(ours), Some(stock)) = (rets.get(HALITE), rets.get(STOCK)) else {
            panic!("{run} run: not both minions returned: {rets:?}");
        };
        assert_eq!(
            check_states(ours, HALITE),
            expect_changes,
            "{run} run: {ours}"
        );
        assert_eq!(
            check_states(stock, STOCK),
            expect_changes,
            "{run} run: {stock}"
        );
        assert_eq!(
            normalized(ours, HALITE),
            normalized(stock, STOCK),
            "{run} run: the Halite minion's state.apply differs from the stock minion's"
        );
    }
    let motd = |id: &str| std::fs::read_to_string(out.join(id).join("site/motd")).unwrap();
    assert_eq!(
        motd(HALITE).replace(HALITE, "<ID>"),
        motd(STOCK).replace(STOCK, "<ID>")
    );
    assert!(
        motd(HALITE).starts_with(&format!("Welcome to {HALITE} running Linux on "))
            && motd(HALITE).ends_with(", role web\n"),
        "the template did not render with grains and the pillar: {:?}",
        motd(HALITE)
    );
    assert_eq!(
        std::fs::read_to_string(out.join(HALITE).join("reloads")).unwrap(),
        "reloaded\n",
        "onchanges fired once"
    );
}

/// Starts the master, both minions, and waits until both answer.
fn start_all(root: &TempRoot, stock_master: bool) -> Vec<Proc> {
    let master = if stock_master {
        start_stock_master(root)
    } else {
        start_halite_master(root)
    };
    wait_for_port(root.ret_port(), Duration::from_secs(60));
    let halite = start_halite_minion_with_salt(
        root,
        HALITE,
        &format!("fallback_idle_timeout: {IDLE_SECS}\n"),
    );
    let stock = start_stock_minion(root, STOCK);
    let mut last = Map::new();
    let ok = wait_until(JOIN, || {
        last = salt_json(root, &["-L", &format!("{HALITE},{STOCK}"), "test.ping"], 10);
        last.get(HALITE) == Some(&json!(true)) && last.get(STOCK) == Some(&json!(true))
    });
    assert!(ok, "the minions never both answered test.ping: {last:?}");
    vec![master, halite, stock]
}

/// The tree, the master config (stock roots, plus the Halite master's Salt Python for
/// its pillar) for `root`.
fn prepare(root: &TempRoot) -> PathBuf {
    let srv = root.master_root().join("srv");
    let out = root.path().join("out");
    write_tree(&srv, &out);
    let python = salt_venv().join("bin").join("python3");
    root.write_master_config(&format!(
        "auto_accept: true\nhalite_salt_python: {}\n",
        python.display()
    ));
    out
}

/// Processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = stat.rsplit_once(')')?.1.to_owned();
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// `Rss` of `pid` in KiB (`/proc/<pid>/smaps_rollup`), 0 when it is gone.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("Rss:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[test]
fn state_apply_through_the_fallback_matches_a_stock_minion_against_a_stock_master() {
    let root = TempRoot::new();
    let out = prepare(&root);
    let procs = start_all(&root, true);
    let minion_pid = procs[1].pid();
    assert!(
        children(minion_pid).is_empty(),
        "a worker runs before any fallback job"
    );
    let native_rss = rss_kib(minion_pid);

    apply_beside_stock(&root, &out);

    // The highstate outputter Salt names reaches the CLI.
    let printed = run_stock_salt(&root, [HALITE, "state.apply", "-t", "120"]);
    let text = String::from_utf8_lossy(&printed.stdout);
    assert!(
        text.contains(&format!("Summary for {HALITE}")) && text.contains("Succeeded: 3"),
        "{text}"
    );

    // Functions a stock minion has, as stock salt-call gives them on this host.
    for args in [
        vec!["pkg.list_pkgs"],
        vec!["file.file_exists", "/etc/passwd"],
        vec!["user.info", "root"],
    ] {
        assert_eq!(
            call(&root, HALITE, &args),
            salt_call_local(&root, &args),
            "{args:?}"
        );
    }

    // Missing everywhere: Salt's text, as the stock minion gives it.
    let missing = call(&root, HALITE, &["no_such_module.fun"]);
    assert_eq!(missing, json!("'no_such_module.fun' is not available."));
    assert_eq!(call(&root, STOCK, &["no_such_module.fun"]), missing);

    // Both kinds are listed; native ones win.
    let listed = call(&root, HALITE, &["sys.list_functions", "origin=True"]);
    let has = |kind: &str, fun: &str| {
        listed[kind]
            .as_array()
            .is_some_and(|a| a.contains(&json!(fun)))
    };
    assert!(
        has("native", "test.ping") && has("fallback", "state.apply"),
        "{listed}"
    );
    assert!(!has("fallback", "test.ping"), "{listed}");
    let flat = call(&root, HALITE, &["sys.list_functions", "pkg"]);
    assert!(
        flat.as_array()
            .is_some_and(|a| a.contains(&json!("pkg.list_pkgs"))),
        "{flat}"
    );

    // An event Salt's own module fires reaches the master through the minion.
    let tap = BusTap::master(&root);
    let sent = call(
        &root,
        HALITE,
        &["state.single", "event.send", "name=halite/fallback/hello"],
    );
    assert!(
        sent.as_object()
            .is_some_and(|s| s.values().all(|st| st["result"] == json!(true))),
        "{sent}"
    );
    tap.wait_for("halite/fallback/hello", 1);

    // A long fallback job: the worker and the job's process run; killing the job kills
    // its process group (the job process and its `sleep`).
    let started = run_stock_salt(
        &root,
        [
            HALITE,
            "state.single",
            "cmd.run",
            "name=sleep 300",
            "--async",
        ],
    );
    let printed = String::from_utf8_lossy(&started.stdout).into_owned();
    let jid = printed
        .rsplit("job ID: ")
        .next()
        .map(str::trim)
        .filter(|j| !j.is_empty() && j.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or_else(|| panic!("no job id in {printed:?}"))
        .to_owned();
    let mut tree = (Vec::new(), Vec::new(), Vec::new());
    let ok = wait_until(Duration::from_secs(120), || {
        let workers = children(minion_pid);
        let jobs: Vec<u32> = workers.iter().flat_map(|w| children(*w)).collect();
        let sleeps: Vec<u32> = jobs.iter().flat_map(|j| children(*j)).collect();
        let running = workers.len() == 1 && jobs.len() == 1 && !sleeps.is_empty();
        tree = (workers, jobs, sleeps);
        running
    });
    assert!(ok, "the job never ran in a worker: {tree:?}");
    let (workers, jobs, sleeps) = tree;
    let (minion_rss, worker_rss) = (rss_kib(minion_pid), rss_kib(workers[0]));
    let running = call(&root, HALITE, &["saltutil.find_job", &jid]);
    assert_eq!(running["fun"], json!("state.single"), "{running}");
    call(&root, HALITE, &["saltutil.kill_job", &jid]);
    let gone = |pids: &[u32]| pids.iter().all(|p| rss_kib(*p) == 0 && !alive(*p));
    let ok = wait_until(Duration::from_secs(60), || gone(&jobs) && gone(&sleeps));
    assert!(
        ok,
        "the killed job's processes {jobs:?} {sleeps:?} still run"
    );

    // No job: the worker exits after its idle timeout and the minion is back to itself.
    let ok = wait_until(Duration::from_secs(IDLE_SECS * 15), || {
        children(minion_pid).is_empty()
    });
    assert!(
        ok,
        "the worker {workers:?} did not exit after its idle timeout"
    );
    let after = rss_kib(minion_pid);
    println!(
        "MEASURED fallback RSS: halite-minion before the first fallback job {:.1} MiB; \
         with a warm worker running a job: minion {:.1} MiB + worker {:.1} MiB = {:.1} MiB; \
         minion after the worker's idle timeout ({IDLE_SECS} s) {:.1} MiB, no worker",
        mib(native_rss),
        mib(minion_rss),
        mib(worker_rss),
        mib(minion_rss + worker_rss),
        mib(after)
    );

    // The next job starts a new worker.
    assert_eq!(
        call(&root, HALITE, &["file.file_exists", "/etc/passwd"]),
        json!(true)
    );
    drop(procs);
}

#[test]
fn state_apply_through_the_fallback_matches_a_stock_minion_against_a_halite_master() {
    let root = TempRoot::new();
    let out = prepare(&root);
    let _procs = start_all(&root, false);
    apply_beside_stock(&root, &out);

    // `halite-call state.apply` on the minion's host: the same fallback, through the
    // call's own channel to the master (the tree is applied already: nothing changes).
    let mut cmd = Command::new(halite_bin("halite-call"));
    cmd.arg("-c")
        .arg(root.minion_config_dir(HALITE))
        .args(["state.apply", "--out", "json"])
        .env("PATH", path_with_salt());
    let run = run_command(cmd, Duration::from_secs(180));
    let stdout = assert_success("halite-call state.apply", &run);
    let docs = json_documents(stdout.as_bytes());
    assert_eq!(docs.len(), 1, "{stdout}");
    assert!(
        !check_states(&docs[0]["local"], "halite-call"),
        "halite-call state.apply changed something on a second application: {stdout}"
    );
}

#[test]
fn without_salt_a_function_halite_lacks_says_it_is_not_available_and_why() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(60));
    let nowhere = root.path().join("no-salt/bin/python3");
    root.add_minion_with(HALITE, &format!("fallback_python: {}\n", nowhere.display()));
    let _minion = start_halite_minion(&root, HALITE);
    let mut last = Map::new();
    let ok = wait_until(JOIN, || {
        last = common::Cli::Halite.json(&root, &[HALITE, "test.ping", "-t", "10"]);
        last.get(HALITE) == Some(&json!(true))
    });
    assert!(ok, "{HALITE} never answered: {last:?}");
    let ret = common::Cli::Halite.json(&root, &[HALITE, "pkg.list_pkgs", "-t", "60"]);
    let text = ret[HALITE].as_str().unwrap_or_default();
    assert!(
        text.starts_with("'pkg.list_pkgs' is not available: it is not a native Halite function"),
        "{ret:?}"
    );
    assert!(text.contains(&nowhere.display().to_string()), "{text}");
    assert!(!text.contains('\n'), "{text}");
    // Native functions are untouched.
    let ret = common::Cli::Halite.json(&root, &[HALITE, "sys.list_functions", "test.p*"]);
    assert_eq!(ret[HALITE], json!(["test.ping"]));
}
