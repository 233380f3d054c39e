//! `halite-run` sends runner calls to a master over the request port and prints the run's
//! return as `salt-run` does: against a stock salt-master (which runs the runners itself in
//! Python, so this proves halite-run's side of the protocol) and against `halite-master`,
//! each with one stock salt-minion and one Halite minion.

use halite_testkit::{
    halite_bin, run_command, run_halite, run_stock, start_halite_master, start_halite_minion,
    start_stock_master, start_stock_minion, wait_until, Proc, TempRoot, TIMEOUT,
};
use serde_json::{json, Value as Json};
use std::path::Path;
use std::process::{Command, Output};

/// Master options for these tests: minions are accepted as they come, and a silent minion
/// (or a runner a master does not have) is given up on after a few seconds.
const MASTER_EXTRA: &str = "auto_accept: true\ngather_job_timeout: 5\n";

const STOCK_MINION: &str = "stock-m";
const HALITE_MINION: &str = "halite-m";

#[derive(Clone, Copy, Debug)]
enum MasterKind {
    Stock,
    Halite,
}

fn halite_run_in(config_dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(halite_bin("halite-run"));
    cmd.arg("-c").arg(config_dir).args(args);
    run_command(cmd, TIMEOUT)
}

fn halite_run(root: &TempRoot, args: &[&str]) -> Output {
    halite_run_in(root.master_config_dir(), args)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON document a command printed; panics with its output otherwise.
fn json_of(what: &str, out: &Output) -> Json {
    assert!(
        out.status.success(),
        "{what}: {}\n{}{}",
        out.status,
        stdout(out),
        stderr(out)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}):\n{}{}", stdout(out), stderr(out)))
}

/// `{minion: return}` from one or more JSON documents; anything else gives an empty map.
fn returns(out: &Output) -> serde_json::Map<String, Json> {
    let mut merged = serde_json::Map::new();
    for doc in serde_json::Deserializer::from_slice(&out.stdout).into_iter::<Json>() {
        match doc {
            Ok(Json::Object(m)) => merged.extend(m),
            _ => return serde_json::Map::new(),
        }
    }
    merged
}

/// A master of `kind` with one stock and one Halite minion that both answer `test.ping`.
struct Fleet {
    root: TempRoot,
    _procs: Vec<Proc>,
}

impl Fleet {
    fn start(kind: MasterKind) -> Fleet {
        let root = TempRoot::with_master_extra(MASTER_EXTRA);
        let master = match kind {
            MasterKind::Stock => start_stock_master(&root),
            MasterKind::Halite => start_halite_master(&root),
        };
        let procs = vec![
            master,
            start_stock_minion(&root, STOCK_MINION),
            start_halite_minion(&root, HALITE_MINION),
        ];
        let mut last = String::new();
        let answered = wait_until(TIMEOUT, || {
            let out = run_halite(&root, ["*", "test.ping", "--out", "json", "-t", "10"]);
            last = format!("{}{}", stdout(&out), stderr(&out));
            let r = returns(&out);
            [STOCK_MINION, HALITE_MINION]
                .iter()
                .all(|id| r.get(*id) == Some(&Json::Bool(true)))
        });
        assert!(answered, "{kind:?} fleet never answered test.ping:\n{last}");
        Fleet {
            root,
            _procs: procs,
        }
    }
}

fn sorted_ids() -> Json {
    json!([HALITE_MINION, STOCK_MINION])
}

fn runners_work_against(kind: MasterKind) -> Fleet {
    let fleet = Fleet::start(kind);
    let root = &fleet.root;

    // manage.up lists both minions; the default outputter is nested, as salt-run's.
    let up = json_of(
        "manage.up",
        &halite_run(root, &["manage.up", "--out", "json"]),
    );
    assert_eq!(up, sorted_ids());
    let out = halite_run(root, &["manage.up"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("- {HALITE_MINION}\n- {STOCK_MINION}\n")
    );

    // manage.status: {"up": [...], "down": [...]}, the keyword argument reaching the runner.
    let status = json_of(
        "manage.status",
        &halite_run(root, &["manage.status", "tgt=*", "--out", "json"]),
    );
    assert_eq!(status, json!({"up": sorted_ids(), "down": []}));

    // A job published by `halite`, then looked up by its jid (a positional argument).
    let out = run_halite(root, ["--show-jid", "*", "test.ping", "--out", "json"]);
    let text = stdout(&out);
    let jid = text
        .lines()
        .find_map(|l| l.strip_prefix("jid: "))
        .unwrap_or_else(|| panic!("no jid in:\n{text}"))
        .to_owned();
    // Masters fire a return's event before the job cache has it (stock Salt's `store_job`
    // does too), so the cache may lag the `halite` command by a moment.
    let mut looked_up = Json::Null;
    let complete = wait_until(TIMEOUT, || {
        looked_up = json_of(
            "jobs.lookup_jid",
            &halite_run(root, &["jobs.lookup_jid", &jid, "--out", "json"]),
        );
        looked_up == json!({HALITE_MINION: true, STOCK_MINION: true})
    });
    assert!(complete, "jid {jid}: {looked_up:#}");
    // The same bytes as stock salt-run, which runs the runner in its own process.
    let ours = halite_run(root, &["jobs.lookup_jid", &jid]);
    let stock = run_stock(root, "salt-run", ["jobs.lookup_jid", &jid]);
    assert_eq!(stdout(&ours), stdout(&stock), "{}", stderr(&stock));

    // jobs.list_jobs has the job; a keyword filter reaches the runner.
    let jobs = json_of(
        "jobs.list_jobs",
        &halite_run(
            root,
            &[
                "jobs.list_jobs",
                "search_function=test.ping",
                "--out",
                "json",
            ],
        ),
    );
    let job = &jobs[&jid];
    assert_eq!(job["Function"], json!("test.ping"), "{jobs:#}");
    assert_eq!(job["Target"], json!("*"), "{jobs:#}");
    assert!(
        jobs.as_object()
            .is_some_and(|m| m.values().all(|j| j["Function"] == json!("test.ping"))),
        "{jobs:#}"
    );

    // --async: Salt's notice with the run's tag, nothing on stdout, no wait; `-t` became
    // the runner's `timeout`, as the stored run's fun_args show.
    let out = halite_run(root, &["--async", "-t", "7", "manage.up"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    let notice = stderr(&out);
    let tag = notice
        .trim()
        .strip_prefix(
            "[WARNING ] Running in asynchronous mode. Results of this execution may be \
             collected by attaching to the master event bus or by examining the master job \
             cache, if configured. This execution is running under tag ",
        )
        .unwrap_or_else(|| panic!("no async notice: {notice}"));
    let run_jid = tag
        .strip_prefix("salt/run/")
        .unwrap_or_else(|| panic!("tag {tag}"));
    let mut last = Json::Null;
    let stored = wait_until(TIMEOUT, || {
        let out = halite_run(root, &["jobs.lookup_jid", run_jid, "--out", "json"]);
        last = serde_json::from_slice(&out.stdout).unwrap_or(Json::Null);
        last.as_object()
            .and_then(|m| m.values().next())
            .is_some_and(|run| run["return"] == sorted_ids())
    });
    assert!(
        stored,
        "the async run never reached the job cache: {last:#}"
    );
    let run = last.as_object().and_then(|m| m.values().next()).unwrap();
    assert_eq!(run["fun"], json!("runner.manage.up"), "{last:#}");
    assert_eq!(run["fun_args"], json!([{"timeout": 7}]), "{last:#}");

    // A runner nobody has, and a keyword manage.up does not take: Salt's messages, exit 254.
    for (args, message) in [
        (vec!["nope.nothing"], "'nope.nothing' is not available.\n"),
        (vec!["manage"], "'manage' is not available.\n"),
        (
            vec!["manage.up", "foo=bar"],
            "The following keyword arguments are not valid: foo=bar\n",
        ),
    ] {
        let out = halite_run(root, &args);
        assert_eq!(out.status.code(), Some(254), "{args:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), message, "{args:?}");
    }

    // A key the master does not know: Salt's authentication error.
    let bad = root.path().join("badkey");
    let cache = bad.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let config = std::fs::read_to_string(root.master_config_file()).unwrap();
    let config: String = config
        .lines()
        .map(|l| {
            if l.starts_with("cachedir:") {
                format!("cachedir: {}\n", cache.display())
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(bad.join("master"), config).unwrap();
    std::fs::write(
        cache.join(format!(".{}_key", halite_testkit::current_user())),
        "not-the-key",
    )
    .unwrap();
    let out = halite_run_in(&bad, &["manage.up"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(stderr(&out), "Authentication error occurred.\n");
    assert_eq!(stdout(&out), "");
    fleet
}

#[test]
fn halite_run_drives_a_stock_master() {
    runners_work_against(MasterKind::Stock);
}

#[test]
fn halite_run_drives_a_halite_master_and_a_stopped_minion_is_down_within_the_timeout() {
    let mut fleet = runners_work_against(MasterKind::Halite);
    let root = &fleet.root;
    // The Halite minion is the third process started.
    fleet._procs[2].stop();
    let started = std::time::Instant::now();
    let status = json_of(
        "manage.status",
        &halite_run(
            root,
            &[
                "manage.status",
                "timeout=2",
                "gather_job_timeout=2",
                "--out",
                "json",
            ],
        ),
    );
    assert_eq!(
        status,
        json!({"up": [STOCK_MINION], "down": [HALITE_MINION]})
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "a down minion is reported after timeout + one find_job round: {:?}",
        started.elapsed()
    );
    let down = json_of(
        "manage.down",
        &halite_run(root, &["manage.down", "-t", "2", "--out", "json"]),
    );
    assert_eq!(down, json!([HALITE_MINION]));
}

#[test]
fn without_a_master_halite_run_says_so_and_fails() {
    let root = TempRoot::new();
    let out = halite_run(&root, &["manage.up"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "The salt master could not be contacted. Is master running?\n"
    );
    assert_eq!(stdout(&out), "");
}

#[test]
fn docs_are_salt_runs_for_the_runners_halite_has() {
    let root = TempRoot::new();
    for args in [
        vec!["-d", "jobs.lookup_jid"],
        vec!["-d", "manage.up", "--out", "json"],
        vec!["--doc", "jobs.list_jobs"],
    ] {
        let ours = halite_run(&root, &args);
        let stock = run_stock(&root, "salt-run", &args);
        assert!(ours.status.success(), "{args:?}");
        assert!(!ours.stdout.is_empty(), "{args:?}");
        assert_eq!(stdout(&ours), stdout(&stock), "{args:?}");
    }
    let out = halite_run(&root, &["-d", "a", "b"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(stderr(&out).ends_with(
        "halite-run: error: You can only get documentation for one method at one time\n"
    ));
}
