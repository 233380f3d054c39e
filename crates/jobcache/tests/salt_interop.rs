//! Stock Salt reads what `LocalCacheWriter` writes, and the two clean each other's jobs.
//!
//! These tests run the Salt 3008.3 venv's python (`$HALITE_SALT_VENV/bin/python`, else
//! `<repo>/.salt-venv/bin/python`). When that python does not exist they fail and say how
//! to create it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use halite_jobcache::{HashType, JobSummary, LocalCacheWriter, ReturnStatus, Value};
use serde_json::json;

const JID: &str = "20240101120000123456";

/// The venv's python; a missing venv fails the test (CI always installs it).
fn salt_python() -> PathBuf {
    halite_testkit::salt_venv().join("bin/python")
}

/// Salt's own `local_cache` code, driven from the command line; prints JSON.
const SCRIPT: &str = r#"
import json, sys
import salt.returners.local_cache as lc
lc.__opts__ = {"cachedir": sys.argv[1], "hash_type": "sha256", "keep_jobs_seconds": int(sys.argv[4])}
cmd, jid = sys.argv[2], sys.argv[3]
out = None
if cmd == "read":
    out = {"load": lc.get_load(jid), "ret": lc.get_jid(jid), "jids": lc.get_jids(),
           "filter": lc.get_jids_filter(10)}
elif cmd == "write":
    lc.prep_jid(passed_jid=jid)
    lc.save_load(jid, {"fun": "test.ping", "arg": [], "tgt": "m1", "tgt_type": "glob",
                       "jid": jid, "user": "root"}, minions=["m1"])
    lc.returner({"jid": jid, "id": "m1", "fun": "test.ping", "return": True, "retcode": 0,
                 "success": True})
elif cmd == "clean":
    lc.clean_old_jobs()
print(json.dumps(out))
"#;

fn run_salt(python: &Path, cachedir: &Path, cmd: &str, jid: &str, keep: u64) -> serde_json::Value {
    let out = Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(cachedir)
        .args([cmd, jid, &keep.to_string()])
        .output()
        .expect("run the venv python");
    assert!(
        out.status.success(),
        "salt {cmd} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("salt printed JSON")
}

fn text(s: &str) -> Value {
    Value::from(s)
}

fn map(pairs: &[(&str, Value)]) -> Value {
    Value::Map(pairs.iter().map(|(k, v)| (text(k), v.clone())).collect())
}

/// The JSON Python's `json.dumps` makes of the object Salt decodes from `v`.
fn to_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Nil => serde_json::Value::Null,
        Value::Boolean(b) => json!(b),
        Value::Integer(i) => i
            .as_i64()
            .map(|n| json!(n))
            .or_else(|| i.as_u64().map(|n| json!(n)))
            .unwrap_or(serde_json::Value::Null),
        Value::F32(f) => json!(f),
        Value::F64(f) => json!(f),
        Value::String(s) => json!(s.as_str().expect("test strings are UTF-8")),
        Value::Array(items) => serde_json::Value::Array(items.iter().map(to_json).collect()),
        Value::Map(entries) => serde_json::Value::Object(
            entries
                .iter()
                .map(|(k, v)| (k.as_str().expect("string keys").to_string(), to_json(v)))
                .collect(),
        ),
        Value::Binary(_) | Value::Ext(..) => panic!("not used in these tests"),
    }
}

fn publish_load() -> Value {
    map(&[
        ("fun", text("test.arg")),
        (
            "arg",
            Value::Array(vec![
                text("a"),
                Value::from(2),
                map(&[("__kwarg__", Value::Boolean(true)), ("k", text("v"))]),
            ]),
        ),
        ("tgt", text("web*")),
        ("tgt_type", text("glob")),
        ("jid", text(JID)),
        ("user", text("sudo_alice")),
        ("ret", text("")),
        ("kwargs", map(&[("show_jid", Value::Boolean(false))])),
    ])
}

fn minion_return(id: &str, ret: Value, out: Option<&str>) -> Value {
    let mut pairs = vec![
        ("id", text(id)),
        ("jid", text(JID)),
        ("fun", text("test.arg")),
        ("fun_args", Value::Array(vec![text("a")])),
        ("return", ret),
        ("retcode", Value::from(0)),
        ("success", Value::Boolean(true)),
    ];
    if let Some(out) = out {
        pairs.push(("out", text(out)));
    }
    map(&pairs)
}

fn set_mtime(path: &Path, unix: u64) {
    let f = std::fs::File::open(path).unwrap();
    f.set_modified(UNIX_EPOCH + Duration::from_secs(unix))
        .unwrap();
}

#[test]
fn salt_local_cache_reads_the_job_we_write() {
    let python = salt_python();
    let dir = tempfile::tempdir().unwrap();
    let w = LocalCacheWriter::new(dir.path(), HashType::Sha256);
    let load = publish_load();
    w.write_load(JID, &load, &["web2".into(), "web1".into(), "web3".into()])
        .unwrap();
    let web1 = minion_return(
        "web1",
        map(&[("args", Value::Array(vec![text("a")]))]),
        Some("nested"),
    );
    let web2 = minion_return("web2", Value::from(-3), None);
    assert_eq!(
        w.write_return(JID, "web1", &web1).unwrap(),
        ReturnStatus::Stored
    );
    assert_eq!(
        w.write_return(JID, "web2", &web2).unwrap(),
        ReturnStatus::Stored
    );
    let again = minion_return("web1", text("late duplicate"), None);
    assert_eq!(
        w.write_return(JID, "web1", &again).unwrap(),
        ReturnStatus::Duplicate
    );

    let got = run_salt(&python, dir.path(), "read", JID, 86400);

    let mut want_load = to_json(&load);
    want_load["Minions"] = json!(["web1", "web2", "web3"]);
    assert_eq!(got["load"], want_load);
    assert_eq!(
        got["ret"],
        json!({
            "web1": {"return": {"args": ["a"]}, "retcode": 0, "success": true, "out": "nested"},
            "web2": {"return": -3, "retcode": 0, "success": true},
        })
    );
    let summary = JobSummary::from_load(JID, 0, &load).to_salt_value();
    assert_eq!(got["jids"], json!({ JID: to_json(&summary) }));
    let mut with_jid = to_json(&summary);
    with_jid["JID"] = json!(JID);
    assert_eq!(got["filter"], json!([with_jid]));
}

#[test]
fn salt_local_cache_reads_a_job_without_target_or_minions() {
    let python = salt_python();
    let dir = tempfile::tempdir().unwrap();
    let w = LocalCacheWriter::new(dir.path(), HashType::Sha256);
    let load = map(&[("fun", text("runner.test.arg")), ("jid", text(JID))]);
    w.write_load(JID, &load, &[]).unwrap();
    let got = run_salt(&python, dir.path(), "read", JID, 86400);
    assert_eq!(got["load"], to_json(&load));
    assert_eq!(got["ret"], json!({}));
}

#[test]
fn salt_run_lookup_jid_reads_the_job_we_write() {
    let python = salt_python();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf");
    let root = dir.path().join("root");
    let cachedir = root.join("cache");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::create_dir_all(cachedir.join("proc")).unwrap();
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap();
    std::fs::write(
        conf.join("master"),
        format!(
            "root_dir: {}\ncachedir: /cache\nuser: {}\n",
            root.display(),
            user.trim()
        ),
    )
    .unwrap();

    let w = LocalCacheWriter::new(&cachedir, HashType::Sha256);
    w.write_load(JID, &publish_load(), &["web1".into(), "web2".into()])
        .unwrap();
    let web1 = minion_return("web1", text("hello"), None);
    assert_eq!(
        w.write_return(JID, "web1", &web1).unwrap(),
        ReturnStatus::Stored
    );

    let salt_run = python.with_file_name("salt-run");
    let out = Command::new(&salt_run)
        .arg("-c")
        .arg(&conf)
        .args(["jobs.lookup_jid", JID, "missing=True", "--out=json"])
        .output()
        .expect("run salt-run");
    assert!(
        out.status.success(),
        "salt-run failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("salt-run JSON");
    assert_eq!(
        got,
        json!({"web1": "hello", "web2": "Minion did not return"})
    );
}

#[test]
fn salt_and_halite_clean_each_others_expired_jobs() {
    let python = salt_python();
    let dir = tempfile::tempdir().unwrap();
    let w = LocalCacheWriter::new(dir.path(), HashType::Sha256);
    let salts = "20240202020202020202";

    // Ours, made old; Salt's own, fresh.
    w.write_load(JID, &publish_load(), &["web1".into()])
        .unwrap();
    set_mtime(&w.jid_dir(JID).unwrap().join("jid"), 1);
    run_salt(&python, dir.path(), "write", salts, 3600);
    assert!(w.jid_dir(salts).unwrap().join(".load.p").is_file());

    // The same directory: a second return from Salt's minion is a duplicate here too.
    let m1 = map(&[("return", Value::Boolean(false))]);
    assert_eq!(
        w.write_return(salts, "m1", &m1).unwrap(),
        ReturnStatus::Duplicate
    );
    let m2 = map(&[("return", text("ok")), ("retcode", Value::from(0))]);
    assert_eq!(
        w.write_return(salts, "m2", &m2).unwrap(),
        ReturnStatus::Stored
    );
    let got = run_salt(&python, dir.path(), "read", salts, 3600);
    assert_eq!(
        got["ret"],
        json!({
            "m1": {"return": true, "retcode": 0, "success": true},
            "m2": {"return": "ok", "retcode": 0},
        })
    );

    // Salt's clean_old_jobs removes our old job and keeps its own.
    run_salt(&python, dir.path(), "clean", salts, 3600);
    assert!(!w.jid_dir(JID).unwrap().exists());
    assert!(w.jid_dir(salts).unwrap().exists());

    // Ours removes Salt's once it is old enough.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(w.clean_expired(now, 3600).unwrap(), 0);
    assert_eq!(w.clean_expired(now + 7200, 3600).unwrap(), 1);
    assert!(!w.jid_dir(salts).unwrap().exists());
}
