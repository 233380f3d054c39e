//! Shared steps of the master's integration tests.

#![allow(dead_code)]

use halite_testkit::{run_halite, wait_until, TempRoot};
use serde_json::{Map, Value};
use std::time::Duration;

/// How long a stock minion may take to start, authenticate and answer.
pub const JOIN: Duration = Duration::from_secs(90);

/// Runs `halite <args> --out json` and returns `{minion: return}`; output that is not
/// JSON (e.g. "No minions matched the target.") gives an empty map.
pub fn halite_json(root: &TempRoot, args: &[&str]) -> Map<String, Value> {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--out", "json"]);
    let out = run_halite(root, &all);
    let mut merged = Map::new();
    for doc in serde_json::Deserializer::from_slice(&out.stdout).into_iter::<Value>() {
        match doc {
            Ok(Value::Object(m)) => merged.extend(m),
            _ => return Map::new(),
        }
    }
    merged
}

/// Waits until `halite '*' test.ping` gets `true` from exactly `ids`.
pub fn wait_for_pings(root: &TempRoot, ids: &[&str]) {
    let mut last = Map::new();
    let ok = wait_until(JOIN, || {
        last = halite_json(root, &["*", "test.ping", "-t", "5"]);
        ids.iter()
            .all(|id| last.get(*id) == Some(&Value::Bool(true)))
    });
    assert!(
        ok,
        "minions {ids:?} did not all answer test.ping; last answer: {last:?}"
    );
}

/// `halite-key -L --out json` as a JSON object.
pub fn key_lists(root: &TempRoot) -> Value {
    let out = halite_testkit::run_halite_key(root, ["-L", "--out", "json"]);
    assert!(
        out.status.success(),
        "halite-key -L failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "halite-key -L --out json is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The ids in one `halite-key -L --out json` list.
pub fn ids_in(lists: &Value, state: &str) -> Vec<String> {
    lists[state]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// One clear request on the request port, as the local clients send it, answered within
/// 30 s.
pub fn clear_request(port: u16, load: halite_proto::Value) -> halite_proto::Value {
    use halite_proto::value::{self, map, s};
    let ctx = zmq::Context::new();
    let body = value::encode(&map([
        ("enc", s("clear")),
        ("load", load),
        ("version", halite_proto::Value::from(3)),
    ]));
    let reply = halite_transport::client::request(
        &ctx,
        &format!("tcp://127.0.0.1:{port}"),
        &body,
        Duration::from_secs(30),
    )
    .expect("the master answers within 30 s");
    value::decode(&reply).expect("the reply is msgpack")
}

/// `out`'s stdout as JSON, or a panic naming `what` with both outputs.
pub fn json_of(what: &str, out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Stock `salt-run <args> --out json -l quiet` against the root's master.
pub fn salt_run_json(root: &TempRoot, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--out", "json", "-l", "quiet"]);
    json_of(
        &format!("salt-run {args:?}"),
        &halite_testkit::run_stock(root, "salt-run", &all),
    )
}

/// `halite-run -c <root> <args>`.
pub fn halite_run(root: &TempRoot, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(halite_testkit::halite_bin("halite-run"));
    cmd.arg("-c").arg(root.master_config_dir()).args(args);
    halite_testkit::run_command(cmd, halite_testkit::TIMEOUT)
}

/// `halite-run <args> --out json`.
pub fn halite_run_json(root: &TempRoot, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--out", "json"]);
    json_of(&format!("halite-run {args:?}"), &halite_run(root, &all))
}
