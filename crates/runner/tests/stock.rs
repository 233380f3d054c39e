//! Halite's runners against stock Salt 3008.3 (the venv `scripts/setup-tests` creates): the generated
//! signature table, and the `jobs` runners over the same jobs, written by the stock
//! `local_cache` returner for stock Salt and into the job store for Halite
//! (`tests/stock_jobs.py`).

use std::path::Path;
use std::time::Instant;

use halite_config::MasterConfig;
use halite_jobcache::{JobStore, RedbJobStore};
use halite_runner::{PublishJob, Published, Registry, RunCall, RunnerHost, Value};
use halite_target::testutil::from_json;
use serde_json::{json, Value as Json};

#[test]
fn specs_match_stock_salt() {
    halite_testkit::assert_generated_from_stock(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/gen_specs.py"),
        include_str!("../src/specs.rs"),
    );
}

/// A master with only a job store: the `jobs` runners compared here publish nothing.
struct StoreHost {
    opts: MasterConfig,
    store: RedbJobStore,
}

impl RunnerHost for StoreHost {
    fn publish(&self, _job: &PublishJob) -> Result<Published, String> {
        Err("this test master publishes nothing".to_owned())
    }
    fn wait_returns(
        &self,
        _jid: &str,
        _minions: &[String],
        _deadline: Instant,
    ) -> Vec<(String, Value)> {
        Vec::new()
    }
    fn jobs(&self) -> &dyn JobStore {
        &self.store
    }
    fn accepted_ids(&self) -> Vec<String> {
        Vec::new()
    }
    fn connected(&self) -> Vec<(String, Option<String>)> {
        Vec::new()
    }
    fn delete_key(&self, _id: &str) -> Result<(), String> {
        Err("no keys here".to_owned())
    }
    fn fire(&self, _tag: &str, _data: Value) {}
    fn opts(&self) -> &MasterConfig {
        &self.opts
    }
    fn acl_check(&self, _: &str, _: &Value, _: &str, _: &Value, _: &Value) -> Value {
        Value::Nil
    }
}

const J1: &str = "20240101120000000001";
const J2: &str = "20240102120000000002";
const J3: &str = "20240103120000000003";

fn ret_load(jid: &str, id: &str, fun: &str, ret: Json, out: Option<&str>) -> Json {
    let mut load = json!({
        "id": id, "jid": jid, "fun": fun, "return": ret, "retcode": 0, "success": true,
    });
    if let Some(out) = out {
        load["out"] = json!(out);
    }
    load
}

fn fixture() -> Json {
    json!([
        {
            "jid": J1,
            "load": {"fun": "test.ping", "arg": [], "tgt": "*", "tgt_type": "glob",
                     "jid": J1, "user": "root"},
            "minions": ["a", "b"],
            "returns": [ret_load(J1, "a", "test.ping", json!(true), None)],
        },
        {
            "jid": J2,
            "load": {"fun": "state.apply",
                     "arg": ["web", {"__kwarg__": true, "metadata": {"team": "x"}}],
                     "tgt": "web*", "tgt_type": "glob", "jid": J2, "user": "sudo_bob"},
            "minions": ["web1"],
            "returns": [ret_load(J2, "web1", "state.apply",
                                 json!({"file_|-x_|-/x_|-managed": {"result": true}}),
                                 Some("highstate"))],
        },
        {
            "jid": J3,
            "load": {"fun": "saltutil.find_job", "arg": [J1], "tgt": ["a"],
                     "tgt_type": "list", "jid": J3},
            "minions": ["a"],
            "returns": [ret_load(J3, "a", "saltutil.find_job", json!({}), None)],
        },
    ])
}

fn calls() -> Json {
    json!([
        {"fun": "jobs.list_jobs"},
        {"fun": "jobs.list_jobs", "kwargs": {"search_function": "test.*"}},
        {"fun": "jobs.list_jobs", "kwargs": {"search_function": "state.apply, saltutil.*"}},
        {"fun": "jobs.list_jobs", "kwargs": {"search_function": ["state.*", "nope"]}},
        {"fun": "jobs.list_jobs", "kwargs": {"search_target": "web*"}},
        {"fun": "jobs.list_jobs", "kwargs": {"search_target": "a"}},
        {"fun": "jobs.list_jobs", "kwargs": {"search_metadata": {"team": "x", "o": 1}}},
        {"fun": "jobs.list_jobs", "kwargs": {"search_metadata": {"team": "y"}}},
        {"fun": "jobs.list_jobs", "kwargs": {"start_time": "2024-01-02"}},
        {"fun": "jobs.list_jobs", "kwargs": {"end_time": "2024, Jan 02 12:00:00.000002"}},
        {"fun": "jobs.list_jobs", "kwargs": {"start_time": "Jan 2 2024 00:00",
                                             "end_time": "01/03/2024 11:00 pm"}},
        {"fun": "jobs.list_jobs", "kwargs": {"start_time": "whenever"}},
        {"fun": "jobs.list_jobs", "kwargs": {"outputter": "yaml"}},
        {"fun": "jobs.list_jobs", "kwargs": {"ext_source": "mysql"}},
        {"fun": "jobs.list_job", "args": [J1]},
        {"fun": "jobs.list_job", "args": [J3]},
        {"fun": "jobs.list_job", "args": ["20990101000000000000"]},
        {"fun": "jobs.list_job", "args": [J1], "kwargs": {"ext_source": "mysql"}},
        {"fun": "jobs.lookup_jid", "args": [J1]},
        {"fun": "jobs.lookup_jid", "args": [J1], "kwargs": {"missing": true}},
        {"fun": "jobs.lookup_jid", "args": [J1], "kwargs": {"missing": true, "returned": false}},
        {"fun": "jobs.lookup_jid", "args": [J2]},
        {"fun": "jobs.lookup_jid", "args": ["20990101000000000000"]},
        {"fun": "jobs.print_job", "args": [J2]},
        {"fun": "jobs.exit_success", "args": [J1]},
        {"fun": "jobs.exit_success", "args": [J3]},
        {"fun": "jobs.last_run"},
        {"fun": "jobs.last_run", "kwargs": {"target": "web*"}},
        {"fun": "jobs.last_run", "kwargs": {"function": "nope.*"}},
        {"fun": "jobs.last_run", "kwargs": {"metadata": "team"}},
        {"fun": "jobs.list_jobs_filter", "args": [2]},
        {"fun": "jobs.list_jobs_filter", "args": [2], "kwargs": {"filter_find_job": false}},
        {"fun": "jobs.list_jobs_filter", "args": [0]},
        {"fun": "jobs.list_jobs_filter", "args": [100], "kwargs": {"outputter": "json"}},
        {"fun": "jobs.list_jobs_filter", "args": [1], "kwargs": {"ext_source": "mysql"}},
    ])
}

/// Halite's answer in the harness's terms: the return, or `{"__exception__": "<Class>:
/// <message>"}` for a runner that raised.
fn ours(host: &StoreHost, call: &Json) -> Json {
    let arg: Vec<Value> = call["args"]
        .as_array()
        .map(|a| a.iter().map(from_json).collect())
        .unwrap_or_default();
    let kwarg: Vec<(String, Value)> = call["kwargs"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), from_json(v))).collect())
        .unwrap_or_default();
    let out = Registry::builtin().run(
        host,
        &RunCall {
            fun: call["fun"].as_str().expect("fun"),
            arg,
            kwarg,
            user: "root",
            jid: "20240301000000000001",
        },
    );
    match (out.retcode, out.ret.as_str()) {
        (Some(1), Some(text)) => {
            let last = text.trim_end().lines().last().unwrap_or_default();
            json!({"__exception__": last})
        }
        _ => halite_output::to_json(&out.ret),
    }
}

#[test]
fn jobs_runners_match_stock_salt_on_the_same_jobs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let user = halite_config::current_user().unwrap_or_else(|| "root".to_owned());
    std::fs::write(
        dir.path().join("master"),
        format!(
            "root_dir: {}\nuser: {user}\nrunner_returns: false\n",
            dir.path().join("root").display()
        ),
    )
    .expect("write config");
    let opts = MasterConfig::load(dir.path()).expect("config");
    let store = RedbJobStore::open(dir.path().join("jobs.redb")).expect("store");
    for job in fixture().as_array().expect("jobs") {
        let jid = job["jid"].as_str().expect("jid");
        let minions: Vec<String> = job["minions"]
            .as_array()
            .expect("minions")
            .iter()
            .map(|m| m.as_str().expect("id").to_owned())
            .collect();
        store
            .save_load(jid, &from_json(&job["load"]), &minions, 1)
            .expect("save");
        for ret in job["returns"].as_array().expect("returns") {
            let id = ret["id"].as_str().expect("id");
            let _ = store.add_return(jid, id, &from_json(ret), 1).expect("add");
        }
    }
    let host = StoreHost { opts, store };

    let stock = halite_testkit::run_stock_harness(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stock_jobs.py"),
        [dir.path()],
        &json!({"jobs": fixture(), "calls": calls()}),
    );
    let stock = stock.as_array().expect("stock prints a list");
    let calls = calls();
    let calls = calls.as_array().expect("calls");
    assert_eq!(stock.len(), calls.len());
    for (call, stock) in calls.iter().zip(stock) {
        assert_eq!(&ours(&host, call), stock, "{call}");
    }
}
