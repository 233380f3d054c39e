//! Stock salt-minion 3008.3 processes against a Halite master (issue: master core).

mod common;

use common::*;
use halite_testkit::*;
use serde_json::{json, Value};
use std::time::Duration;

/// A stock `salt.utils.event` listener on the master bus: appends each tag to a file.
const LISTENER: &str = r#"
import sys, salt.utils.event
ev = salt.utils.event.get_event("master", sock_dir=sys.argv[1], listen=True)
f = open(sys.argv[2], "a", buffering=1)
ev.get_event(wait=0.1)
f.write("listening\n")
while True:
    e = ev.get_event(wait=1, full=True)
    if e:
        f.write(e["tag"] + "\n")
"#;

fn sorted_keys(m: &serde_json::Map<String, Value>) -> Vec<String> {
    let mut k: Vec<String> = m.keys().cloned().collect();
    k.sort();
    k
}

fn start_bus_listener(root: &TempRoot) -> (Proc, std::path::PathBuf) {
    let tags = root.path().join("bus-tags.txt");
    let mut cmd = std::process::Command::new(salt_venv().join("bin/python"));
    cmd.arg("-c")
        .arg(LISTENER)
        .arg(root.master_root().join("sock"))
        .arg(&tags);
    let p = Proc::spawn(cmd, &root.procs_dir(), "bus-listener");
    let ready = wait_until(JOIN, || {
        std::fs::read_to_string(&tags).is_ok_and(|t| t.contains("listening"))
    });
    assert!(ready, "the stock bus listener did not start");
    (p, tags)
}

#[test]
fn stock_minions_join_after_halite_key_accepts_them_and_run_jobs() {
    let root = TempRoot::new();
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let (_listener, tags) = start_bus_listener(&root);
    let ids = ["m1", "m2", "m3"];
    let _minions: Vec<Proc> = ids.iter().map(|id| start_stock_minion(&root, id)).collect();

    // Keys arrive as unaccepted; halite-key and stock salt-key list the same thing.
    let arrived = wait_until(JOIN, || ids_in(&key_lists(&root), "minions_pre").len() == 3);
    assert!(arrived, "keys never all pending: {}", key_lists(&root));
    let stock = run_stock_salt_key(&root, ["-L", "--out", "json"]);
    let stock: Value = serde_json::from_slice(&stock.stdout).expect("salt-key -L --out json");
    assert_eq!(stock, key_lists(&root), "salt-key and halite-key disagree");

    // Nothing runs before acceptance.
    let out = run_halite(&root, ["*", "test.ping"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("No minions matched the target"));
    assert_eq!(out.status.code(), Some(2));

    assert_success("halite-key -A -y", &run_halite_key(&root, ["-A", "-y"]));
    assert_eq!(ids_in(&key_lists(&root), "minions"), ["m1", "m2", "m3"]);
    wait_for_pings(&root, &ids);

    let args = halite_json(&root, &["m1", "test.arg", "1", "two", "k=v"]);
    assert_eq!(args["m1"]["args"], json!([1, "two"]));
    assert_eq!(args["m1"]["kwargs"]["k"], json!("v"));

    let hi = halite_json(&root, &["*", "cmd.run", "echo hi"]);
    for id in ids {
        assert_eq!(hi[id], json!("hi"), "cmd.run on {id}");
    }

    // Nested output and exit code, as `salt` prints them.
    let out = run_halite(&root, ["-L", "m2", "test.ping"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "m2:\n    True\n");
    assert_eq!(out.status.code(), Some(0));

    // The stock `salt` CLI and `salt-key` work against the Halite master.
    let out = run_stock_salt(&root, ["*", "test.ping", "--out", "json", "-t", "20"]);
    let stock_pings = json_returns(&out.stdout);
    for id in ids {
        assert_eq!(
            stock_pings.get(id),
            Some(&Value::Bool(true)),
            "stock salt: {stock_pings:?}"
        );
    }
    let stock = run_stock_salt_key(&root, ["-L", "--out", "json"]);
    let stock: Value = serde_json::from_slice(&stock.stdout).expect("salt-key -L --out json");
    assert_eq!(stock, key_lists(&root));

    // Targeting: the master computes the expected minions, the minions decide.
    let os = halite_json(&root, &["m1", "grains.get", "os"])["m1"]
        .as_str()
        .expect("os grain")
        .to_owned();
    let by_grain = halite_json(&root, &["-G", &format!("os:{os}"), "test.ping"]);
    assert_eq!(by_grain.len(), 3, "{by_grain:?}");
    let compound = halite_json(
        &root,
        &["-C", &format!("G@os:{os} and L@m1,m3"), "test.ping"],
    );
    assert_eq!(sorted_keys(&compound), ["m1", "m3"], "{compound:?}");
    let pcre = halite_json(&root, &["-E", "m[12]$", "test.ping"]);
    assert_eq!(sorted_keys(&pcre), ["m1", "m2"], "{pcre:?}");

    // A multi-function call, --static, --async.
    let multi = halite_json(&root, &["m1", "test.echo,test.ping", "hello", ","]);
    assert_eq!(
        multi["m1"],
        json!({"test.echo": "hello", "test.ping": true})
    );
    let out = run_halite(&root, ["*", "test.ping", "--static", "--out", "json"]);
    let docs = json_documents(&out.stdout);
    assert_eq!(docs.len(), 1, "--static prints one document");
    assert_eq!(docs[0].as_object().map(|o| o.len()), Some(3));
    let out = run_halite(&root, ["*", "test.ping", "--async"]);
    let text = assert_success("halite --async", &out);
    assert!(text.starts_with("Executed command with job ID: "), "{text}");

    // A failing command sets the exit code, as `salt` does.
    let out = run_halite(&root, ["m1", "cmd.run", "exit 3"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("ERROR: Minions returned with non-zero exit code"));

    // The master bus carried Salt's events, seen by a stock Python listener.
    let seen = std::fs::read_to_string(&tags).unwrap_or_default();
    for tag in [
        "salt/auth",
        "salt/key",
        "minion_start",
        "salt/minion/m1/start",
    ] {
        assert!(
            seen.lines().any(|l| l == tag),
            "no {tag} event on the master bus:\n{seen}"
        );
    }
    assert!(
        seen.lines()
            .any(|l| l.starts_with("salt/job/") && l.ends_with("/new")),
        "{seen}"
    );
    assert!(
        seen.lines()
            .any(|l| l.starts_with("salt/job/") && l.ends_with("/ret/m2")),
        "{seen}"
    );
}

#[test]
fn restarted_master_keeps_keys_and_returns_and_minions_come_back() {
    let root = TempRoot::new();
    let mut master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let _m = start_stock_minion(&root, "r1");
    assert!(wait_until(JOIN, || ids_in(
        &key_lists(&root),
        "minions_pre"
    ) == ["r1"]));
    assert_success(
        "halite-key -a r1 -y",
        &run_halite_key(&root, ["-a", "r1", "-y"]),
    );
    wait_for_pings(&root, &["r1"]);

    let out = run_halite(&root, ["-v", "r1", "test.echo", "before-restart"]);
    let text = assert_success("halite -v", &out);
    let jid = text
        .lines()
        .find_map(|l| l.strip_prefix("Executing job with jid "))
        .unwrap_or_else(|| panic!("no jid in {text}"))
        .to_owned();

    master.stop();
    let mut _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    assert_eq!(
        ids_in(&key_lists(&root), "minions"),
        ["r1"],
        "accepted key lost over restart"
    );

    // The stored return is still in the job cache (read by stock salt-run from local_cache).
    let out = run_stock(
        &root,
        "salt-run",
        ["jobs.lookup_jid", jid.as_str(), "--out", "json"],
    );
    let stored = json_returns(&out.stdout);
    assert_eq!(
        stored.get("r1"),
        Some(&json!("before-restart")),
        "salt-run jobs.lookup_jid: {stored:?}"
    );

    // The stock minion re-authenticates by itself and the next job succeeds.
    wait_for_pings(&root, &["r1"]);
}

#[test]
fn changed_rejected_and_deleted_keys_run_nothing() {
    let root = TempRoot::new();
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let ids = ["keep", "changed", "rejected", "deleted"];
    let mut minions: Vec<Proc> = ids.iter().map(|id| start_stock_minion(&root, id)).collect();
    assert!(wait_until(JOIN, || ids_in(
        &key_lists(&root),
        "minions_pre"
    )
    .len()
        == 4));
    assert_success("halite-key -A -y", &run_halite_key(&root, ["-A", "-y"]));
    wait_for_pings(&root, &ids);

    // A minion whose key changed is denied and refused: the original stops, and a second
    // minion with its own new key pair presents the id `changed`.
    minions[1].stop();
    root.add_minion_with("impostor", "id: changed\n");
    let _impostor = start_stock_minion(&root, "impostor");
    let denied = root.master_pki_dir().join("minions_denied").join("changed");
    assert!(
        wait_until(JOIN, || denied.exists()),
        "changed key never landed in minions_denied"
    );
    wait_for_log(&root.master_log(), "the public keys did not match", JOIN);
    assert!(ids_in(&key_lists(&root), "minions_denied").contains(&"changed".to_owned()));

    // Rejected and deleted keys: the master rotates its AES key, so they can no longer read
    // publishes.
    let log_offset = file_len(&root.master_log());
    assert_success(
        "halite-key -r",
        &run_halite_key(&root, ["-r", "rejected", "--include-accepted", "-y"]),
    );
    assert_success(
        "halite-key -d",
        &run_halite_key(&root, ["-d", "deleted", "-y"]),
    );
    for id in ["rejected", "deleted"] {
        let line = format!("Key for minion {id} is no longer accepted");
        wait_for_log_from(&root.master_log(), log_offset, &line, JOIN);
    }
    wait_for_log_from(&root.master_log(), log_offset, "Rotating AES key", JOIN);

    let pings = halite_json(&root, &["*", "test.ping", "-t", "5"]);
    assert_eq!(pings.get("keep"), Some(&Value::Bool(true)), "{pings:?}");
    // None of them runs anything: `changed` (now only the impostor) is still expected, as
    // its old key is accepted, and shows "did not return"; the others are not expected.
    for id in ["changed", "rejected", "deleted"] {
        assert_ne!(
            pings.get(id),
            Some(&Value::Bool(true)),
            "{id} ran a job: {pings:?}"
        );
    }
}
