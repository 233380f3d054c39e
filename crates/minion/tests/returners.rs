//! Returners on the Halite minion (issue 17), against a Halite master, side by side with
//! stock `salt-minion`s running the same jobs:
//! - seed 002's example end to end: a stock-Python listener on the master, subscribed to
//!   `monitoring`, gets one `master_bus` event per minion (Halite's, and a stock minion
//!   with `contrib/returners/master_bus.py`) while the returns still reach the CLI and
//!   the job cache;
//! - a `master_bus` return made while the master is down arrives once it is back, once;
//! - `syslog` and `rawfile_json` write the bytes stock Salt's write;
//! - failing and unknown returners are logged with Salt's messages, and the return is
//!   unaffected.
//!
//! Syslog: Salt's returner calls `syslog(3)`, which always writes to `/dev/log`; nothing
//! in its options moves that. So both minions run in a private mount namespace
//! (`unshare --mount`) whose `/dev` is an overlay of the real one with `/dev/log` a
//! symlink to a datagram socket this test binds: the records of both minions land on
//! the test's socket and nothing touches the machine's `/dev`.

mod common;

use common::seed::{emit_until_heard, BusTap};
use common::{Cli, JOIN};
use halite_bus::BusClient;
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_testkit::*;
use serde_json::{json, Value as Json};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const TAG: &str = "monitoring";
const KWARGS: &str = r#"{"tag": "monitoring"}"#;
/// The seed's job, failing on purpose: its retcode must reach the listener.
const CHECK: &str = "echo ok; exit 2";

/// A Halite master with auto-accept.
fn master(root: &TempRoot) -> Proc {
    let master = start_halite_master(root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    master
}

/// Stock minion `id` with `contrib/returners/master_bus.py` in its `extension_modules`,
/// as the returner's docs say to install it by hand.
fn add_stock_minion_with_contrib_returner(root: &TempRoot, id: &str) {
    // Under the minion's root_dir, which Salt prepends to paths outside it.
    let extmods = root.minion_config_dir(id).join("extmods");
    root.add_minion_with(id, &format!("extension_modules: {}\n", extmods.display()));
    let dir = extmods.join("returners");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        repo_root().join("contrib/returners/master_bus.py"),
        dir.join("master_bus.py"),
    )
    .unwrap();
}

fn halite_json(root: &TempRoot, args: &[&str]) -> serde_json::Map<String, Json> {
    let mut all = args.to_vec();
    all.extend(["--out", "json"]);
    let out = run_halite(root, &all);
    json_returns(&out.stdout)
}

/// `halite --async ...`: the job id.
fn publish_async(root: &TempRoot, args: &[&str]) -> String {
    let mut all = vec!["--async"];
    all.extend(args);
    let out = run_halite(root, &all);
    let text = assert_success("halite --async", &out);
    text.trim()
        .strip_prefix("Executed command with job ID: ")
        .unwrap_or_else(|| panic!("no job id in {text:?}"))
        .to_owned()
}

/// Fires `tag` with `data` on the master bus, as a program on the master does.
fn fire_on_master(root: &TempRoot, tag: &str, data: Value) {
    let pull = halite_bus::BusSockets::master(&root.master_root().join("sock")).pull_addr;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(BusClient::new(1 << 20).fire(&pull, tag, data))
        .unwrap();
}

/// The JSON lines a listener printed.
fn lines(listener: &Proc) -> Vec<Json> {
    listener
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The listener's events for job `jid`.
fn events_of(listener: &Proc, jid: &str) -> Vec<Json> {
    lines(listener)
        .into_iter()
        .filter(|e| e["jid"] == json!(jid))
        .collect()
}

/// Waits until the listener printed an event of job `jid` from each of `ids`.
fn wait_events(listener: &Proc, jid: &str, ids: &[&str]) -> Vec<Json> {
    let mut got = Vec::new();
    let all = wait_until(TIMEOUT, || {
        got = events_of(listener, jid);
        ids.iter()
            .all(|id| got.iter().any(|e| e["minion"] == json!(id)))
    });
    assert!(
        all,
        "events of job {jid} from {ids:?} did not all arrive; got {got:?}\nlistener stderr:\n{}",
        listener.stderr()
    );
    got
}

#[test]
fn readme_shows_the_listener_script_shipped_in_contrib() {
    let script =
        std::fs::read_to_string(repo_root().join("contrib/returners/listen_master_bus.py"))
            .unwrap();
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    assert!(
        readme.contains(&script),
        "README.md does not show contrib/returners/listen_master_bus.py verbatim"
    );
    assert!(
        script.lines().count() <= 10,
        "the listener is over ten lines"
    );
}

#[test]
fn seed_002_master_bus_returns_reach_a_stock_python_listener_from_halite_and_stock_minions() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = master(&root);
    let ids = ["h1", "h2", "s1"];
    root.add_minion("h1");
    root.add_minion("h2");
    add_stock_minion_with_contrib_returner(&root, "s1");
    let _h1 = start_halite_minion(&root, "h1");
    let _h2 = start_halite_minion(&root, "h2");
    let _s1 = start_stock_minion(&root, "s1");
    Cli::Halite.wait_for_pings(&root, &ids);

    // The README's listener, run with the stock venv's Python.
    let mut cmd = Command::new(salt_venv().join("bin").join("python"));
    cmd.arg(repo_root().join("contrib/returners/listen_master_bus.py"))
        .arg(TAG)
        .arg(root.master_root().join("sock"))
        .env("PYTHONUNBUFFERED", "1");
    let listener = Proc::spawn(cmd, &root.procs_dir(), "listen_master_bus.py");
    emit_until_heard(&listener, "\"minion\": \"probe\"", || {
        fire_on_master(
            &root,
            TAG,
            map([("id", s("probe")), ("data", Value::Map(Vec::new()))]),
        )
    });

    let started = Instant::now();
    let returns = halite_json(
        &root,
        &[
            "*",
            "--return",
            "master_bus",
            "--return_kwargs",
            KWARGS,
            "cmd.run_all",
            CHECK,
        ],
    );
    // The normal returns reach the CLI.
    for id in ids {
        assert_eq!(returns[id]["retcode"], json!(2), "{id}: {returns:?}");
        assert_eq!(returns[id]["stdout"], json!("ok"), "{id}: {returns:?}");
    }
    let jid = wait_for_jid(&listener, "cmd.run_all");
    let events = wait_events(&listener, &jid, &ids);
    println!(
        "MEASURED publish to the last master_bus event of 3 minions: {:.3} s",
        started.elapsed().as_secs_f64()
    );
    for id in ids {
        let ev: Vec<&Json> = events.iter().filter(|e| e["minion"] == json!(id)).collect();
        let [ev] = ev.as_slice() else {
            panic!("{id}: {} events: {events:?}", ev.len())
        };
        assert_eq!(ev["id"], json!(id));
        assert_eq!(ev["fun"], json!("cmd.run_all"));
        assert_eq!(ev["fun_args"], json!([CHECK]));
        assert_eq!(ev["retcode"], json!(2), "{id}: {ev}");
        assert_eq!(ev["success"], json!(false), "{id}: {ev}");
        assert_eq!(ev["return"]["retcode"], json!(2), "{id}: {ev}");
        assert_eq!(ev["return"]["stdout"], json!("ok"), "{id}: {ev}");
        let keys: Vec<&str> = ev.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["minion", "id", "jid", "fun", "fun_args", "return", "retcode", "success"],
            "{id}"
        );
    }

    // The job cache has the returns.
    let out = run_stock(
        &root,
        "salt-run",
        ["jobs.lookup_jid", &jid, "--out", "json"],
    );
    let cached = json_returns(&out.stdout);
    for id in ids {
        assert_eq!(
            cached[id]["retcode"],
            json!(2),
            "{id} in the job cache: {cached:?}"
        );
    }

    // One event per minion: a second job's events come after any repeat of the first's.
    halite_json(
        &root,
        &[
            "*",
            "--return",
            "master_bus",
            "--return_kwargs",
            KWARGS,
            "test.ping",
        ],
    );
    let second = wait_for_jid(&listener, "test.ping");
    wait_events(&listener, &second, &ids);
    let events = events_of(&listener, &jid);
    for id in ids {
        let n = events.iter().filter(|e| e["minion"] == json!(id)).count();
        assert_eq!(n, 1, "{id} sent {n} events for job {jid}");
    }
}

/// The job id of the first event of function `fun` the listener printed.
fn wait_for_jid(listener: &Proc, fun: &str) -> String {
    let mut jid = None;
    let found = wait_until(TIMEOUT, || {
        jid = lines(listener)
            .into_iter()
            .find(|e| e["fun"] == json!(fun))
            .and_then(|e| e["jid"].as_str().map(str::to_owned));
        jid.is_some()
    });
    assert!(found, "no {fun} event; listener:\n{}", listener.stdout());
    jid.unwrap_or_default()
}

#[test]
fn a_master_bus_return_made_while_the_master_is_down_arrives_once_after_it_is_back() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let mut master = master(&root);
    // The normal return gives up after one try of one second.
    root.add_minion_with(
        "q1",
        "return_retry_timer: 1\nreturn_retry_timer_max: 1\nreturn_retry_tries: 1\n",
    );
    let _minion = start_halite_minion(&root, "q1");
    Cli::Halite.wait_for_pings(&root, &["q1"]);
    let log = root.minion_log("q1");

    // The job runs until the test lets it finish.
    let go = root.path().join("go");
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; echo ok; exit 2",
        go.display()
    );
    let jid = publish_async(
        &root,
        &[
            "q1",
            "--return",
            "master_bus",
            "--return_kwargs",
            KWARGS,
            "cmd.run_all",
            &script,
        ],
    );
    wait_for_log(&log, &format!("Starting a new job {jid}"), JOIN);
    let offset = file_len(&log);
    master.stop();
    wait_for_log_from(&log, offset, "Connection to master 127.0.0.1 lost", JOIN);

    std::fs::write(&go, b"").unwrap();
    wait_for_log_from(
        &log,
        offset,
        &format!("The minion failed to return the job information for job {jid}"),
        JOIN,
    );
    wait_for_log_from(
        &log,
        offset,
        &format!("master_bus: the return of job {jid} is queued for the master under tag {TAG}"),
        JOIN,
    );

    // Back, with a tap on its bus subscribed before the minion can sign in again.
    let sockets = halite_bus::BusSockets::master(&root.master_root().join("sock"));
    let (pub_addr, pull_addr) = (sockets.pub_addr, sockets.pull_addr);
    let tap = std::thread::spawn(move || BusTap::start(pub_addr, pull_addr));
    let back = Instant::now();
    let _master = start_halite_master(&root);
    let tap = tap.join().expect("the bus tap thread failed");
    let got = tap.wait_for(TAG, 1);
    println!(
        "MEASURED master start to the queued master_bus event: {:.3} s",
        back.elapsed().as_secs_f64()
    );
    // Anything sent after it on the same queue arrives after any repeat of it.
    run_halite(&root, ["q1", "event.fire_master", "{}", "marker/after"]);
    tap.wait_for("marker/after", 1);
    let got_all = tap.with_prefix(TAG);
    assert_eq!(got_all.len(), 1, "{got_all:?}");
    let (tag, data) = &got[0];
    assert_eq!(tag, TAG);
    assert_eq!(value::get_str(data, "id"), Some("q1"));
    let inner = value::get(data, "data").expect("the returner's data");
    assert_eq!(value::get_str(inner, "jid"), Some(jid.as_str()));
    assert_eq!(value::get(inner, "retcode"), Some(&Value::from(2)));
    assert_eq!(value::get(inner, "success"), Some(&Value::Boolean(false)));
    let ret = value::get(inner, "return").expect("return");
    assert_eq!(value::get_str(ret, "stdout"), Some("ok"));
}

/// Minion `id`'s config with the returners' options of the comparisons.
fn returner_options(root: &TempRoot, id: &str) -> String {
    format!(
        "rawfile_json.filename: {}\n\
         syslog:\n  facility: LOG_DAEMON\n\
         alternative.syslog.level: LOG_ERR\n\
         alternative.syslog.facility: LOG_LOCAL3\n\
         alternative.syslog.tag: mysalt-{id}\n",
        root.path().join(format!("{id}.json")).display()
    )
}

/// `s` with the minion ids replaced by `<id>`.
fn unnamed(text: &str) -> String {
    text.replace("\"h1\"", "\"<id>\"")
        .replace("\"s1\"", "\"<id>\"")
        .replace("mysalt-h1", "mysalt-<id>")
        .replace("mysalt-s1", "mysalt-<id>")
}

#[test]
fn rawfile_json_writes_the_lines_a_stock_minion_writes() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = master(&root);
    root.add_minion_with("h1", &returner_options(&root, "h1"));
    root.add_minion_with("s1", &returner_options(&root, "s1"));
    let _h1 = start_halite_minion(&root, "h1");
    let _s1 = start_stock_minion(&root, "s1");
    Cli::Halite.wait_for_pings(&root, &["h1", "s1"]);

    // The configured file, then one chosen by --return_kwargs that both minions share.
    let text = "héllo \"quoted\" \\ back\ttab";
    halite_json(&root, &["*", "--return", "rawfile_json", "test.echo", text]);
    let shared = root.path().join("shared.json");
    let kwargs = format!(r#"{{"filename": "{}", "x": [1, 2.5]}}"#, shared.display());
    halite_json(
        &root,
        &[
            "*",
            "--return",
            "rawfile_json",
            "--return_config",
            "alternative",
            "--return_kwargs",
            &kwargs,
            "test.echo",
            text,
        ],
    );
    let read = |path: &Path, n: usize| -> Vec<String> {
        let mut got = Vec::new();
        wait_until(TIMEOUT, || {
            got = std::fs::read_to_string(path)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect();
            got.len() >= n
        });
        got
    };
    let h = read(&root.path().join("h1.json"), 1);
    let st = read(&root.path().join("s1.json"), 1);
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(unnamed(&h[0]), unnamed(&st[0]));
    assert!(
        h[0].contains("\"return\": \"héllo \\\"quoted\\\" \\\\ back\\ttab\""),
        "{}",
        h[0]
    );

    let both = read(&shared, 2);
    assert_eq!(both.len(), 2, "{both:?}");
    let of = |id: &str| {
        both.iter()
            .find(|l| l.ends_with(&format!("\"id\": \"{id}\"}}")))
            .unwrap_or_else(|| panic!("no line of {id} in {both:?}"))
            .clone()
    };
    assert_eq!(unnamed(&of("h1")), unnamed(&of("s1")));
    assert!(of("h1").contains("\"ret_config\": \"alternative\", \"ret_kwargs\": {\"filename\""));
}

/// The shell script that runs minion `id` in a private mount namespace whose `/dev/log`
/// leads to `socket` (see the module docs).
fn devlog_namespace(root: &TempRoot, id: &str, socket: &Path) -> PathBuf {
    let ns = root.path().join(format!("devns-{id}"));
    for d in ["up", "work", "pts", "shm"] {
        std::fs::create_dir_all(ns.join(d)).unwrap();
    }
    let script = ns.join("enter.sh");
    std::fs::write(
        &script,
        format!(
            "set -e\n\
             N={ns}\n\
             mount --bind /dev/pts $N/pts\n\
             mount --bind /dev/shm $N/shm\n\
             mount -t overlay overlay -o lowerdir=/dev,upperdir=$N/up,workdir=$N/work /dev\n\
             mount --move $N/pts /dev/pts\n\
             mount --move $N/shm /dev/shm\n\
             ln -s {socket} /dev/log\n\
             exec \"$@\"\n",
            ns = ns.display(),
            socket = socket.display()
        ),
    )
    .unwrap();
    script
}

/// Starts `program -c <minion dir>` inside the namespace of `script`.
fn start_in_namespace(root: &TempRoot, script: &Path, program: &Path, id: &str) -> Proc {
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh"])
        .arg(script)
        .arg(program)
        .arg("-c")
        .arg(root.minion_config_dir(id));
    Proc::spawn(cmd, &root.procs_dir(), &format!("ns-{id}")).with_stop_grace(STOCK_STOP_GRACE)
}

/// The records on `socket` whose text contains `needle`, until there are `n`.
fn records(socket: &UnixDatagram, needle: &str, n: usize) -> Vec<String> {
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let deadline = Instant::now() + TIMEOUT;
    while got.len() < n && Instant::now() < deadline {
        if let Ok(len) = socket.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..len]).into_owned();
            if text.contains(needle) {
                got.push(text);
            }
        }
    }
    assert_eq!(got.len(), n, "records with {needle}: {got:?}");
    got
}

/// A record with its `Mmm dd hh:mm:ss` timestamp, `[pid]` and minion id masked.
fn masked(record: &str) -> String {
    let Some(close) = record.find('>') else {
        return record.to_owned();
    };
    let (head, rest) = record.split_at(close + 1);
    let rest = rest.get(16..).unwrap_or_default();
    let (tag, message) = rest.split_once(": ").unwrap_or((rest, ""));
    let tag = match tag.find('[') {
        Some(at) => format!("{}[<pid>]", &tag[..at]),
        None => tag.to_owned(),
    };
    unnamed(&format!("{head}<time> {tag}: {message}"))
}

#[test]
fn syslog_writes_the_records_a_stock_minion_writes() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = master(&root);
    let socket_path = root.path().join("devlog.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    root.add_minion_with("h1", &returner_options(&root, "h1"));
    root.add_minion_with("s1", &returner_options(&root, "s1"));
    let h1 = devlog_namespace(&root, "h1", &socket_path);
    let s1 = devlog_namespace(&root, "s1", &socket_path);
    let _h1 = start_in_namespace(&root, &h1, &halite_bin("halite-minion"), "h1");
    let _s1 = start_in_namespace(&root, &s1, &stock_bin("salt-minion"), "s1");
    Cli::Halite.wait_for_pings(&root, &["h1", "s1"]);

    let text = "syslog héllo \"q\"";
    // Salt's defaults, then the alternative profile with options from the command line.
    let first = publish_async(&root, &["*", "--return", "syslog", "test.echo", text]);
    let got = records(&socket, &first, 2);
    let second = publish_async(
        &root,
        &[
            "*",
            "--return",
            "syslog",
            "--return_config",
            "alternative",
            "--return_kwargs",
            r#"{"options": ["LOG_PID", "LOG_NDELAY"]}"#,
            "test.echo",
            text,
        ],
    );
    let alt = records(&socket, &second, 2);
    for (job, recs) in [(&first, &got), (&second, &alt)] {
        let of = |id: &str| {
            recs.iter()
                .find(|r| r.ends_with(&format!("\"id\": \"{id}\"}}")))
                .unwrap_or_else(|| panic!("no record of {id} for job {job}: {recs:?}"))
                .clone()
        };
        let (h, st) = (of("h1"), of("s1"));
        assert_eq!(masked(&h), masked(&st), "job {job}");
        println!("halite: {h}\nstock:  {st}");
    }
    let h_first = masked(got.iter().find(|r| r.contains("\"h1\"")).unwrap());
    // LOG_DAEMON | LOG_INFO, and the default tag (the stock minion's `argv[0]`).
    assert!(
        h_first.starts_with("<30><time> salt-minion: {\"success\": true"),
        "{h_first}"
    );
    let h_alt = masked(alt.iter().find(|r| r.contains("\"h1\"")).unwrap());
    // LOG_LOCAL3 | LOG_ERR, and a pid.
    assert!(
        h_alt.starts_with("<155><time> mysalt-<id>[<pid>]: {"),
        "{h_alt}"
    );
}

#[test]
fn failing_and_unknown_returners_are_logged_and_the_return_is_unaffected() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = master(&root);
    root.add_minion("h1");
    root.add_minion("s1");
    let _h1 = start_halite_minion(&root, "h1");
    let _s1 = start_stock_minion(&root, "s1");
    Cli::Halite.wait_for_pings(&root, &["h1", "s1"]);
    let offsets: Vec<u64> = ["h1", "s1"]
        .iter()
        .map(|id| file_len(&root.minion_log(id)))
        .collect();

    let bad = "/nonexistent-dir/events";
    let kwargs = format!(r#"{{"filename": "{bad}"}}"#);
    let returns = halite_json(
        &root,
        &[
            "*",
            "--return",
            "rawfile_json,nosuch",
            "--return_kwargs",
            &kwargs,
            "test.echo",
            "still here",
        ],
    );
    assert_eq!(returns["h1"], json!("still here"), "{returns:?}");
    assert_eq!(returns["s1"], json!("still here"), "{returns:?}");
    let jid = {
        let log = std::fs::read_to_string(root.minion_log("h1")).unwrap_or_default();
        let tail = log.get(offsets[0] as usize..).unwrap_or_default();
        tail.lines()
            .find_map(|l| l.split("Returning information for job: ").nth(1))
            .map(|j| j.trim().to_owned())
            .expect("the minion returned the job")
    };
    // The same messages from both minions.
    for (id, offset) in ["h1", "s1"].iter().zip(offsets.iter().copied()) {
        let log = root.minion_log(id);
        for line in [
            format!("Could not write to rawdata_json file {bad}"),
            format!(
                "The return failed for job {jid}: [Errno 2] No such file or directory: '{bad}'"
            ),
            "Returner nosuch.returner could not be loaded: 'nosuch.returner' is not available."
                .to_owned(),
        ] {
            wait_for_log_from(&log, offset, &line, JOIN);
        }
    }
    let out = run_stock(
        &root,
        "salt-run",
        ["jobs.lookup_jid", &jid, "--out", "json"],
    );
    let cached = json_returns(&out.stdout);
    assert_eq!(cached["h1"], json!("still here"), "{cached:?}");
}
