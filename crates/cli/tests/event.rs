//! `halite event listen|fire` against a running `halite-master`: the journal replays what
//! was fired while nobody listened, follows live events, survives a master restart, and
//! refuses garbage; events cross between Halite's CLI and stock Python's `salt.utils.event`.

use halite_bus::DEFAULT_MAX_EVENT_SIZE;
use halite_journal::MasterBus;
use halite_proto::value::map;
use halite_proto::Value;
use halite_testkit::{
    assert_success, file_len, halite_bin, run_halite, salt_venv, start_halite_master,
    wait_for_log_from, wait_until, Proc, TempRoot,
};
use serde_json::Value as Json;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const READY: &str = "The Salt Master is ready";
const WAIT: Duration = Duration::from_secs(120);

fn sock_dir(root: &TempRoot) -> PathBuf {
    root.master_root().join("sock")
}

fn start_master(root: &TempRoot) -> Proc {
    let offset = file_len(&root.master_log());
    let master = start_halite_master(root);
    wait_for_log_from(&root.master_log(), offset, READY, WAIT);
    master
}

/// Fires events `tag` with data `{"i": i}` through the master bus's pull socket over one
/// connection, in order (as one stock `SaltEvent` object does).
fn fire_many(root: &TempRoot, tag: &str, range: std::ops::Range<u64>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let bus = MasterBus::new(sock_dir(root), DEFAULT_MAX_EVENT_SIZE);
        let mut sender = bus.sender().await.unwrap();
        for i in range {
            sender
                .send(tag, map([("i", Value::from(i))]))
                .await
                .unwrap();
        }
    });
}

/// A long-running `halite event listen` whose stdout is a file.
fn start_listener(root: &TempRoot, name: &str, args: &[&str]) -> Proc {
    let mut cmd = Command::new(halite_bin("halite"));
    cmd.args(["event", "listen", "-c"])
        .arg(root.master_config_dir())
        .args(args);
    Proc::spawn(cmd, &root.procs_dir(), name)
}

fn json_lines(text: &str) -> Vec<Json> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Waits until `proc` has printed at least `n` lines and returns them parsed.
fn wait_lines(proc: &Proc, n: usize) -> Vec<Json> {
    let ok = wait_until(WAIT, || proc.stdout().lines().count() >= n);
    assert!(
        ok,
        "{} printed {} lines, expected {n}; stderr:\n{}",
        proc.name(),
        proc.stdout().lines().count(),
        proc.stderr()
    );
    json_lines(&proc.stdout())
}

/// Checks that `events` carry consecutive ids starting at `first` and returns the
/// `(tag, i)` of each.
fn contiguous(events: &[Json], first: u64) -> Vec<(String, i64)> {
    events
        .iter()
        .enumerate()
        .map(|(k, e)| {
            assert_eq!(e["id"].as_u64(), Some(first + k as u64), "event {k}: {e}");
            (
                e["tag"].as_str().unwrap().to_owned(),
                e["data"]["i"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

#[test]
fn ten_thousand_events_fired_unheard_are_replayed_in_order_then_live_and_after_restart() {
    let root = TempRoot::new();
    let mut master = start_master(&root);
    fire_many(&root, "bench/ev", 0..10_000);

    let listener = start_listener(&root, "listen-since-0", &["--since", "0", "--json"]);
    let lines = wait_lines(&listener, 10_000);
    let seen = contiguous(&lines, 1);
    let bench: Vec<i64> = seen
        .iter()
        .filter(|(t, _)| t == "bench/ev")
        .map(|(_, i)| *i)
        .collect();
    assert_eq!(
        bench,
        (0..10_000).collect::<Vec<_>>(),
        "in order, none missing or repeated"
    );
    let before_live = seen.len();

    for i in 0..5 {
        let data = format!("{{\"i\": {i}}}");
        assert_success(
            "halite event fire",
            &run_halite(
                &root,
                ["event", "fire", "live/ev", data.as_str(), "--master"],
            ),
        );
    }
    let lines = wait_lines(&listener, before_live + 5);
    let seen = contiguous(&lines, 1);
    let live: Vec<_> = seen[before_live..].to_vec();
    assert_eq!(
        live,
        (0..5)
            .map(|i| ("live/ev".to_owned(), i))
            .collect::<Vec<_>>()
    );

    // Restart: the listener reconnects and resumes after its last event.
    master.stop();
    let _master = start_master(&root);
    fire_many(&root, "after/ev", 0..3);
    let lines = wait_lines(&listener, before_live + 8);
    let seen = contiguous(&lines, 1);
    let after: Vec<_> = seen
        .iter()
        .filter(|(t, _)| t == "after/ev")
        .cloned()
        .collect();
    assert_eq!(
        after,
        (0..3)
            .map(|i| ("after/ev".to_owned(), i))
            .collect::<Vec<_>>()
    );
    let total = seen.len();

    // The journal is intact after the restart: a fresh replay gives the same events.
    let out = run_halite(
        &root,
        [
            "event",
            "listen",
            "--since",
            "0",
            "--json",
            "-n",
            &total.to_string(),
        ],
    );
    let replayed = json_lines(&assert_success("halite event listen --since 0", &out));
    assert_eq!(contiguous(&replayed, 1), seen);
    // And the default output is Salt's `tag<TAB>json`.
    let out = run_halite(&root, ["event", "listen", "--since", "1", "-n", "1"]);
    let line = assert_success("halite event listen", &out);
    let (tag, data) = line.trim_end().split_once('\t').unwrap();
    assert_eq!(tag, lines[0]["tag"].as_str().unwrap());
    let data: Json = serde_json::from_str(data).unwrap();
    assert_eq!(data, lines[0]["data"]);
}

/// `halite event listen --since 0 --json` with `args`, the events it printed.
fn replay(root: &TempRoot, what: &str, args: &[&str]) -> Vec<Json> {
    let mut argv = vec!["event", "listen", "--json"];
    if !args.contains(&"--since") {
        argv.extend(["--since", "0"]);
    }
    argv.extend(args);
    json_lines(&assert_success(what, &run_halite(root, argv)))
}

/// `(tag, i)` of each event.
fn tags_and_i(events: &[Json]) -> Vec<(String, i64)> {
    events
        .iter()
        .map(|e| {
            (
                e["tag"].as_str().unwrap().to_owned(),
                e["data"]["i"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

#[test]
fn since_a_time_and_tag_globs_select_what_is_replayed() {
    let root = TempRoot::new();
    let _master = start_master(&root);
    fire_many(&root, "early/x", 0..3);
    // The journal times each event when it stores it. Once the early events can be
    // replayed they are stored, so a cut taken now falls after all of them and before
    // anything fired next, however slowly this machine runs (no sleep needed).
    let early = replay(&root, "listen early", &["--tag", "early/x", "-n", "3"]);
    assert_eq!(early.len(), 3);
    let cut = chrono::Utc::now();
    let cut_text = cut.to_rfc3339();
    fire_many(&root, "late/x", 0..2);
    fire_many(&root, "late/y", 0..2);

    // `*/x` matches the early events as well as the late ones: only the time keeps the
    // early ones out (with `--since 0` the first two would be early/x).
    let x = replay(
        &root,
        "listen --since TIME",
        &["--since", &cut_text, "--tag", "*/x", "-n", "2"],
    );
    assert_eq!(
        tags_and_i(&x),
        [("late/x".to_owned(), 0), ("late/x".to_owned(), 1)]
    );
    for e in &x {
        let time = chrono::DateTime::parse_from_rfc3339(e["time"].as_str().unwrap()).unwrap();
        assert!(
            time.timestamp_micros() >= cut.timestamp_micros(),
            "{e} is from before {cut_text}"
        );
    }
    let first_late = x[0]["id"].as_u64().unwrap();
    assert!(
        first_late > early[2]["id"].as_u64().unwrap(),
        "ids grow with time"
    );

    // A glob picks among what the time selects. Two connections fired these: the bus
    // may interleave them.
    let late = replay(
        &root,
        "listen --since TIME --tag",
        &["--since", &cut_text, "--tag", "late/?", "-n", "4"],
    );
    let mut tags: Vec<&str> = late.iter().map(|l| l["tag"].as_str().unwrap()).collect();
    tags.sort();
    assert_eq!(tags, ["late/x", "late/x", "late/y", "late/y"]);

    let out = run_halite(&root, ["event", "listen", "--since", "yesterday-ish"]);
    assert_eq!(out.status.code(), Some(42));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid start"));
}

#[test]
fn garbage_on_the_journal_socket_is_logged_and_dropped_and_the_master_keeps_serving() {
    let root = TempRoot::new();
    let _master = start_master(&root);
    fire_many(&root, "t/x", 0..1);
    let socket = sock_dir(&root).join("halite_journal.ipc");
    let offset = file_len(&root.master_log());
    for garbage in [
        &b"\x00\x00\x00\x04\xc1\xc1\xc1\xc1"[..],
        b"\xff\xff\xff\xffzzzz",
        b"hello\n",
    ] {
        let mut conn = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        conn.set_read_timeout(Some(WAIT)).unwrap();
        conn.write_all(garbage).unwrap();
        let _ = conn.shutdown(std::net::Shutdown::Write);
        let mut reply = Vec::new();
        conn.read_to_end(&mut reply).unwrap();
        let (range, used) = halite_journal::wire::check_frame(&reply, 1 << 16)
            .unwrap()
            .unwrap();
        assert_eq!(
            used,
            reply.len(),
            "an error message, then the connection closes"
        );
        assert!(matches!(
            halite_journal::wire::Reply::decode(&reply[range]).unwrap(),
            halite_journal::wire::Reply::Error(_)
        ));
    }
    wait_for_log_from(
        &root.master_log(),
        offset,
        "Dropping event journal connection: bad request",
        WAIT,
    );
    let out = run_halite(
        &root,
        ["event", "listen", "--since", "0", "--json", "-n", "1"],
    );
    let lines = json_lines(&assert_success("listen after garbage", &out));
    assert_eq!(lines[0]["tag"], "t/x");
    assert_eq!(
        std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

const PY_LISTEN: &str = r#"
import sys, json
import salt.config, salt.utils.event
opts = salt.config.master_config(sys.argv[1])
ev = salt.utils.event.get_event("master", sock_dir=opts["sock_dir"], opts=opts, listen=True)
while True:
    e = ev.get_event(wait=1, full=True)
    if e:
        print(json.dumps({"tag": e["tag"], "data": e["data"]}), flush=True)
"#;

const PY_FIRE: &str = r#"
import sys, json
import salt.config, salt.utils.event
opts = salt.config.master_config(sys.argv[1])
ev = salt.utils.event.get_event("master", sock_dir=opts["sock_dir"], opts=opts, listen=False)
assert ev.fire_event(json.loads(sys.argv[3]), sys.argv[2])
"#;

#[test]
fn events_cross_between_halite_cli_and_stock_python() {
    let root = TempRoot::new();
    let _master = start_master(&root);
    let python = salt_venv().join("bin").join("python");
    let mut cmd = Command::new(&python);
    cmd.args(["-c", PY_LISTEN]).arg(root.master_config_file());
    let py_listener = Proc::spawn(cmd, &root.procs_dir(), "py-listen");
    // Probe until the stock listener is subscribed.
    let ready = wait_until(WAIT, || {
        assert_success(
            "halite event fire",
            &run_halite(&root, ["event", "fire", "probe/x", "{}"]),
        );
        py_listener.stdout().contains("probe/x")
    });
    assert!(
        ready,
        "stock listener never heard a probe: {}",
        py_listener.stderr()
    );
    assert_success(
        "halite event fire",
        &run_halite(
            &root,
            [
                "event",
                "fire",
                "interop/halite",
                r#"{"k": "v", "n": [1, 2.5, null]}"#,
            ],
        ),
    );
    wait_until(WAIT, || py_listener.stdout().contains("interop/halite"));
    let got = json_lines(&py_listener.stdout())
        .into_iter()
        .find(|l| l["tag"] == "interop/halite")
        .unwrap();
    assert_eq!(got["data"]["k"], "v");
    assert_eq!(got["data"]["n"], serde_json::json!([1, 2.5, null]));
    assert!(got["data"]["_stamp"].is_string());

    let listener = start_listener(&root, "listen-live", &["--tag", "interop/py*"]);
    let log = listener.stderr_path().to_owned();
    // The listener is connected once it would see a probe; fire from stock Python until then.
    let mut fired = 0;
    let heard = wait_until(WAIT, || {
        let out = Command::new(&python)
            .args(["-c", PY_FIRE])
            .arg(root.master_config_file())
            .args(["interop/python", r#"{"from": "python", "x": "é"}"#])
            .output()
            .unwrap();
        assert_success("firing from stock Python", &out);
        fired += 1;
        listener.stdout().contains("interop/python")
    });
    assert!(
        heard,
        "halite listener heard nothing; stderr: {}",
        halite_testkit::log_tail(&log, 20)
    );
    let line = listener.stdout().lines().next().unwrap().to_owned();
    let (tag, data) = line.split_once('\t').unwrap();
    assert_eq!(tag, "interop/python");
    assert!(
        data.starts_with(r#"{"from": "python", "x": "é", "_stamp": ""#),
        "{data}"
    );
    assert!(fired >= 1);
}

#[test]
fn halite_event_is_not_taken_for_a_salt_target() {
    // `halite event test.ping` is a Salt command line (target "event"): it must reach the
    // salt-style parser, which answers that no minion matched.
    let root = TempRoot::new();
    let _master = start_master(&root);
    let out = run_halite(&root, ["event", "test.ping"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("No minions matched the target"), "{text}");
}

#[test]
fn a_bad_journal_option_stops_the_master_naming_it() {
    let root = TempRoot::with_master_extra("event_journal_max_bytes: lots\n");
    let mut master = start_halite_master(&root);
    let status = master
        .wait_exit(WAIT)
        .expect("the master should refuse to start");
    assert!(!status.success());
    let err = master.stderr();
    assert!(
        err.contains("event_journal_max_bytes") && err.contains("lots"),
        "{err}"
    );
}
