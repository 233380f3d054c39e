//! `publish.*` from `halite-call` and from a Halite minion's job, through the peer
//! interface of a stock salt-master 3008.3 and of a Halite master, with one stock
//! salt-minion and one Halite minion answering.

use halite_testkit::*;
use serde_json::{json, Map, Value};
use std::process::Command;
use std::time::Duration;

/// Peer configuration: every minion may publish `test.*` and run `manage.*`.
const PEER: &str =
    "auto_accept: true\npeer:\n  '.*':\n    - 'test.*'\npeer_run:\n  '.*':\n    - 'manage.*'\n";

/// How long minions may take to start, sign in and answer.
const JOIN: Duration = Duration::from_secs(90);

/// The two minions: a stock one and a Halite one.
const STOCK: &str = "s1";
const HALITE: &str = "h1";

/// Merges the JSON documents of `--out json` output; anything else gives an empty map.
fn returns(stdout: &[u8]) -> Map<String, Value> {
    let mut merged = Map::new();
    for doc in serde_json::Deserializer::from_slice(stdout).into_iter::<Value>() {
        match doc {
            Ok(Value::Object(m)) => merged.extend(m),
            _ => return Map::new(),
        }
    }
    merged
}

/// Which master (and so which `salt` command) the test drives.
#[derive(Clone, Copy, Debug)]
enum Master {
    Stock,
    Halite,
}

impl Master {
    /// `salt <args> --out json` (or `halite`), as `{minion: return}`.
    fn salt(self, root: &TempRoot, args: &[&str]) -> Map<String, Value> {
        let mut all = args.to_vec();
        all.extend(["--out", "json"]);
        let out = match self {
            Master::Stock => run_stock_salt(root, all),
            Master::Halite => run_halite(root, all),
        };
        returns(&out.stdout)
    }

    fn wait_for_pings(self, root: &TempRoot) {
        let mut last = Map::new();
        let ok = wait_until(JOIN, || {
            last = self.salt(root, &["*", "test.ping", "-t", "10"]);
            [STOCK, HALITE]
                .iter()
                .all(|id| last.get(*id) == Some(&Value::Bool(true)))
        });
        assert!(
            ok,
            "the minions never all answered through {self:?}: {last:?}"
        );
    }
}

/// `halite-call -c <minion dir of id> <args> --out json`: the `local` value.
fn call(root: &TempRoot, id: &str, args: &[&str]) -> Value {
    let mut cmd = Command::new(halite_bin("halite-call"));
    cmd.arg("-c")
        .arg(root.minion_config_dir(id))
        .args(args)
        .args(["--out", "json"]);
    let out = run_command(cmd, TIMEOUT);
    let stdout = assert_success(&format!("halite-call {}", args.join(" ")), &out);
    let docs = json_documents(stdout.as_bytes());
    assert_eq!(docs.len(), 1, "{stdout}");
    docs[0]["local"].clone()
}

/// A JSON object of `pairs`.
fn obj<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn start_minions(root: &TempRoot) -> [Proc; 2] {
    [
        start_stock_minion(root, STOCK),
        start_halite_minion(root, HALITE),
    ]
}

/// What both masters must do for the Halite minion's `publish.*`.
fn check_peer(root: &TempRoot, master: Master) {
    let both = obj([(STOCK, json!(true)), (HALITE, json!(true))]);
    assert_eq!(
        call(root, HALITE, &["publish.publish", "*", "test.ping"]),
        both,
        "publish.publish through {master:?}"
    );
    assert_eq!(
        call(root, HALITE, &["publish.full_data", "*", "test.ping"]),
        obj([
            (STOCK, json!({"ret": true})),
            (HALITE, json!({"ret": true}))
        ]),
        "publish.full_data through {master:?}"
    );
    assert_eq!(
        call(
            root,
            HALITE,
            &["publish.publish", "*", "test.arg", "['foo,1020', 7]"]
        )[STOCK]["args"],
        json!(["foo,1020", 7]),
        "publish.publish with arguments through {master:?}"
    );
    // cmd.* is not in the peer configuration: the master refuses, silently.
    assert_eq!(
        call(root, HALITE, &["publish.publish", "*", "cmd.run", "id"]),
        json!({}),
        "denied publish through {master:?}"
    );
    assert_eq!(
        call(root, HALITE, &["publish.runner", "manage.up"]),
        json!([HALITE, STOCK]),
        "publish.runner manage.up through {master:?}"
    );
    // The Halite minion's own job publishes to itself too: its return must get through
    // while the job waits for it.
    let r = master.salt(
        root,
        &[HALITE, "publish.publish", "*", "test.ping", "-t", "60"],
    );
    assert_eq!(
        r.get(HALITE),
        Some(&both),
        "publish from a job through {master:?}"
    );
}

#[test]
fn halite_call_publishes_through_a_stock_master() {
    let root = TempRoot::with_master_extra(PEER);
    let _master = start_stock_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(60));
    let _minions = start_minions(&root);
    Master::Stock.wait_for_pings(&root);
    check_peer(&root, Master::Stock);
}

#[test]
fn halite_call_publishes_through_a_halite_master() {
    let root = TempRoot::with_master_extra(PEER);
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(60));
    let _minions = start_minions(&root);
    Master::Halite.wait_for_pings(&root);
    check_peer(&root, Master::Halite);
}

#[test]
fn halite_call_local_has_no_master_to_publish_through() {
    let root = TempRoot::new();
    root.add_minion("l1");
    let mut cmd = Command::new(halite_bin("halite-call"));
    cmd.arg("-c").arg(root.minion_config_dir("l1")).args([
        "--local",
        "publish.publish",
        "*",
        "test.ping",
        "--out",
        "json",
    ]);
    let out = run_command(cmd, TIMEOUT);
    assert_eq!(
        json_documents(assert_success("publish.publish --local", &out).as_bytes()),
        [json!({"local": {}})]
    );
    let mut cmd = Command::new(halite_bin("halite-call"));
    cmd.arg("-c").arg(root.minion_config_dir("l1")).args([
        "--local",
        "publish.runner",
        "manage.up",
    ]);
    let out = run_command(cmd, TIMEOUT);
    assert_eq!(
        assert_success("publish.runner --local", &out),
        "local:\n    No access to master. If using salt-call with --local, please remove.\n"
    );
}
