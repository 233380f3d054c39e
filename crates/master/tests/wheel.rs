//! The clear `wheel` command against real processes: stock Salt's own
//! `salt.wheel.WheelClient.master_call` gets the same answers, and the same `salt/key`
//! events, from a Halite master as from a stock salt-master in the same state; and a key
//! accepted through the wheel lets its minion answer at once.

mod common;

use common::*;
use halite_proto::rsa::PrivateKey;
use halite_proto::value::{self, map, s};
use halite_testkit::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// Runs each load of its input (a JSON list) through `WheelClient.master_call`, with the
/// master's root key unless the load carries eauth credentials, and prints the answers
/// (`{"ok": reply}` or `{"error": [exception class, message]}`) and the `salt/key` events
/// seen meanwhile.
const SCRIPT: &str = r#"
import json, sys, time
import salt.config, salt.exceptions, salt.utils.event, salt.wheel

opts = salt.config.master_config(sys.argv[1])
with open(opts["cachedir"] + "/.root_key") as f:
    key = f.read()
event = salt.utils.event.get_master_event(opts, opts["sock_dir"], listen=True)
wheel = salt.wheel.WheelClient(opts)
results = []
for low in json.load(sys.stdin):
    if "eauth" not in low:
        low["key"] = key
    try:
        results.append({"ok": wheel.master_call(**low)})
    except salt.exceptions.SaltException as exc:
        results.append({"error": [type(exc).__name__, str(exc)]})
events = []
deadline = time.time() + 3
while time.time() < deadline:
    got = event.get_event(full=True, wait=0.5, tag="salt/key")
    if got is not None:
        events.append([got["data"].get("act"), got["data"].get("id")])
wheel.destroy()
event.destroy()
print(json.dumps({"results": results, "key_events": events}))
"#;

/// The master config both masters run with: a fixed id (the local key names), and a
/// `file` eauth backend where `keyadmin` has `@key` and `pinger` only `test.*`.
fn config(passwords: &Path) -> String {
    format!(
        "id: wheeltest_master\nexternal_auth:\n  file:\n    ^filename: {}\n    keyadmin:\n      \
         - '@key'\n    pinger:\n      - test.*\n",
        passwords.display()
    )
}

/// A root with pending keys `web1`, `web2`, `db1` (the same texts in every root, in
/// `clean_key` form, as both masters store them after a move).
fn root_with_pending(keys: &[(String, String)]) -> TempRoot {
    let root = TempRoot::new();
    let passwords = root.path().join("passwords");
    std::fs::write(&passwords, "keyadmin:ka\npinger:pi\n").unwrap();
    root.write_master_config(&config(&passwords));
    let pre = root.master_pki_dir().join("minions_pre");
    std::fs::create_dir_all(&pre).unwrap();
    for (id, pem) in keys {
        std::fs::write(pre.join(id), pem).unwrap();
    }
    root
}

/// What is compared of one answer: `fun`, `user`, `success` and `return` of a reply
/// (only the keys of a generated pair, which differs every time), or the error.
fn comparable(result: &Value) -> Value {
    if let Some(err) = result.get("error") {
        return json!({ "error": err });
    }
    let data = &result["ok"]["data"];
    let mut ret = data["return"].clone();
    if let Some(obj) = ret.as_object() {
        if obj.contains_key("priv") {
            let mut keys: Vec<&String> = obj.keys().collect();
            keys.sort();
            ret = json!(keys);
        }
    }
    json!({
        "fun": data["fun"],
        "user": data["user"],
        "success": data["success"],
        "return": ret,
        "tag_is_the_jids": data["tag"].as_str().map(|t| Some(t) == result["ok"]["tag"].as_str()
            && t.strip_prefix("salt/wheel/") == data["jid"].as_str()),
    })
}

/// Runs the script against the master of `root`; answers the comparable results and the
/// `salt/key` events as a sorted set of `(act, id)`.
fn drive(root: &TempRoot, loads: &Value) -> (Vec<Value>, Vec<Value>) {
    let script = root.path().join("wheel_calls.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let doc = run_stock_harness(&script, [root.master_config_file()], loads);
    let results = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(comparable)
        .collect();
    // A Halite master may also notice a change on its own directory watch; compare the
    // events Salt's wheel fires, each once.
    let mut events: Vec<Value> = doc["key_events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| matches!(e[0].as_str(), Some("accepted" | "rejected" | "delete")))
        .cloned()
        .collect();
    events.sort_by_key(|e| e.to_string());
    events.dedup();
    (results, events)
}

#[test]
fn stock_wheel_client_gets_the_same_answers_and_events_from_halite_and_stock_masters() {
    let keys: Vec<(String, String)> = ["web1", "web2", "db1"]
        .iter()
        .map(|id| {
            let pem = PrivateKey::generate(2048)
                .and_then(|k| k.public_key())
                .and_then(|p| p.to_pem())
                .unwrap();
            ((*id).to_owned(), halite_proto::pem::clean_key(&pem))
        })
        .collect();
    let loads = json!([
        {"fun": "key.list_all"},
        {"fun": "key.accept", "match": "web*"},
        {"fun": "key.list", "match": "acc"},
        {"fun": "key.finger", "match": "web1"},
        {"fun": "key.print", "match": "db*"},
        {"fun": "key.reject", "match": "db1"},
        {"fun": "key.accept_dict", "match": {"minions_rejected": ["db1"]}, "include_rejected": true},
        {"fun": "key.delete", "match": "web2"},
        {"fun": "key.delete_dict", "match": {"minions": ["db1"]}},
        {"fun": "key.glob_match", "match": "*"},
        {"fun": "key.gen_accept", "id_": "gen1"},
        {"fun": "key.gen_accept", "id_": "gen1"},
        {"fun": "key.list", "arg": ["all"], "kwarg": {}},
        {"fun": "key.list", "match": "acc", "eauth": "file", "username": "keyadmin", "password": "ka"},
        {"fun": "key.list_all", "eauth": "file", "username": "pinger", "password": "pi"},
        {"fun": "config.values", "eauth": "file", "username": "keyadmin", "password": "ka"},
    ]);

    let halite_root = root_with_pending(&keys);
    let master = start_halite_master(&halite_root);
    wait_for_port(halite_root.ret_port(), Duration::from_secs(30));
    let (halite, halite_events) = drive(&halite_root, &loads);
    drop(master);

    let stock_root = root_with_pending(&keys);
    let stock_master = start_stock_master(&stock_root);
    wait_for_port(stock_root.ret_port(), Duration::from_secs(60));
    let (stock, stock_events) = drive(&stock_root, &loads);
    drop(stock_master);

    for (n, (h, st)) in halite.iter().zip(&stock).enumerate() {
        assert_eq!(h, st, "answer {n} to {}", loads[n]);
    }
    assert_eq!(halite.len(), stock.len());
    assert_eq!(halite_events, stock_events);
    // The comparison is not vacuous: keys moved, and a refusal is Salt's.
    assert!(stock_events.contains(&json!(["accepted", "web1"])));
    assert_eq!(
        stock[14]["error"],
        json!([
            "EauthAuthenticationError",
            "Authentication failure of type \"eauth\" occurred for user pinger."
        ])
    );
    assert_eq!(stock[10]["return"], json!(["priv", "pub"]));
}

#[test]
fn a_pending_minion_accepted_through_the_wheel_answers_test_ping() {
    let root = TempRoot::new();
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let _minion = start_halite_minion(&root, "hal-0");
    let pending = wait_until(JOIN, || {
        ids_in(&key_lists(&root), "minions_pre") == ["hal-0"]
    });
    assert!(pending, "hal-0 never became pending: {}", key_lists(&root));
    let root_key = std::fs::read_to_string(root.master_root().join("cache/.root_key")).unwrap();
    let reply = clear_request(
        root.ret_port(),
        map([
            ("cmd", s("wheel")),
            ("fun", s("key.accept")),
            ("match", s("hal-0")),
            ("key", s(root_key)),
        ]),
    );
    let data = value::get(&reply, "data").unwrap_or_else(|| panic!("{reply}"));
    assert_eq!(
        value::get(data, "return"),
        Some(&map([(
            "minions",
            halite_proto::Value::Array(vec![s("hal-0")])
        )])),
        "{reply}"
    );
    wait_for_pings(&root, &["hal-0"]);
}
