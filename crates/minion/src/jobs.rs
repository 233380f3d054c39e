//! Running published jobs: each on its own thread (a slow, hanging or failing job never
//! holds up the minion or another job), listed in the job table `saltutil.running` and
//! `find_job` read, mirrored in `cachedir/proc/<jid>` like Salt's proc files, and answered
//! with a `_return` to the master (`Minion._thread_return` / `_return_pub`).

use crate::channel::Channel;
use crate::settings::Settings;
use halite_config::MinionConfig;
use halite_exec::{Context, JobHandle, JobReturn, JobTable, Registry};
use halite_proto::value::{self, s};
use halite_proto::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// The live jobs of this minion.
#[derive(Default)]
pub struct Jobs {
    running: Mutex<HashMap<String, (Value, Arc<JobHandle>)>>,
}

impl Jobs {
    /// An empty table.
    pub fn new() -> Jobs {
        Jobs::default()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Value, Arc<JobHandle>)>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, jid: &str, proc_data: Value, handle: Arc<JobHandle>) {
        self.table().insert(jid.to_owned(), (proc_data, handle));
    }

    fn remove(&self, jid: &str) {
        self.table().remove(jid);
    }
}

impl JobTable for Jobs {
    fn running(&self) -> Vec<Value> {
        let table = self.table();
        let mut jobs: Vec<(&String, &Value)> =
            table.iter().map(|(jid, (data, _))| (jid, data)).collect();
        jobs.sort_by(|a, b| a.0.cmp(b.0));
        jobs.into_iter().map(|(_, data)| data.clone()).collect()
    }

    fn find(&self, jid: &str) -> Option<Value> {
        self.table().get(jid).map(|(data, _)| data.clone())
    }

    fn signal(&self, jid: &str, signal: i32) -> bool {
        let handle = self.table().get(jid).map(|(_, h)| h.clone());
        match handle {
            Some(h) => {
                h.cancel(signal);
                true
            }
            None => false,
        }
    }
}

/// The job id as Salt uses it in paths and lookups (`str(jid)`), for a string or integer.
pub fn jid_text(jid: &Value) -> Option<String> {
    match jid {
        Value::Integer(i) => Some(i.to_string()),
        other => value::str_of(other).map(str::to_owned),
    }
}

/// What every job of this minion shares.
pub struct Runner {
    /// The settings.
    pub settings: Arc<Settings>,
    /// The configuration handed to functions (`__opts__`).
    pub opts: Arc<MinionConfig>,
    /// The functions.
    pub registry: Arc<Registry>,
    /// The grains.
    pub grains: Arc<Value>,
    /// The pillar, replaced on every connect.
    pub pillar: Arc<RwLock<Arc<Value>>>,
    /// The job table.
    pub jobs: Arc<Jobs>,
    /// Where returns go.
    pub channel: Arc<Channel>,
    /// `cachedir/proc`.
    pub proc_dir: PathBuf,
}

impl Runner {
    /// Starts `load` (a targeted, checked publish load with job id `jid`) on a new thread.
    pub fn spawn(self: &Arc<Self>, jid: String, load: Value) {
        let me = self.clone();
        let started = std::thread::Builder::new()
            .name(format!("job-{jid}"))
            .spawn(move || me.run(&jid, load));
        if let Err(e) = started {
            tracing::error!("Cannot start a thread for a job: {e}");
        }
    }

    fn run(&self, jid: &str, load: Value) {
        let pid = std::process::id();
        let handle = JobHandle::new();
        let mut proc_data = vec![(s("pid"), Value::from(pid))];
        if let Value::Map(fields) = &load {
            proc_data.extend(
                fields
                    .iter()
                    .filter(|(k, _)| value::str_of(k) != Some("pid"))
                    .cloned(),
            );
        }
        let proc_data = Value::Map(proc_data);
        tracing::info!("Starting a new job {jid} with PID {pid}");
        let proc_file = write_proc_file(&self.proc_dir, jid, &proc_data);
        self.jobs.insert(jid, proc_data, handle.clone());

        let ctx = Context {
            id: self.settings.id.clone(),
            opts: self.opts.clone(),
            grains: self.grains.clone(),
            pillar: self
                .pillar
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            jid: Some(jid.to_owned()),
            pub_data: Some(load.clone()),
            jobs: self.jobs.clone(),
            job: handle.clone(),
            master: Some(self.channel.clone()),
        };
        let nil = Value::Nil;
        let fun = value::get(&load, "fun").unwrap_or(&nil);
        let arg = value::get(&load, "arg").unwrap_or(&nil);
        let ret = self.registry.execute(&ctx, fun, arg);

        self.jobs.remove(jid);
        if let Some(path) = proc_file {
            let _ = std::fs::remove_file(path);
        }
        if let Some(sig) = handle.cancel_signal() {
            // Salt's killed job process sends nothing.
            tracing::info!("Job {jid} was cancelled with signal {sig}; no return is sent");
            return;
        }
        if value::get(&ret.ret, "__no_return__").is_some_and(value::truthy) {
            tracing::debug!("Suppressing return for job {jid} because __no_return__ is set");
            return;
        }
        if !self.settings.pub_ret {
            return;
        }
        let reply = return_load(&self.settings.id, &load, &ret);
        tracing::info!("Returning information for job: {jid}");
        let s = &self.settings;
        if let Err(e) = self
            .channel
            .send(&reply, s.return_timeout(), s.return_retry_tries)
        {
            tracing::warn!(
                "The minion failed to return the job information for job {jid}. This is often due to the master being shut down or overloaded. If the master is running, consider increasing the worker_threads value. ({e})"
            );
        }
    }
}

/// The `_return` load for a published job, fields in Salt's order: `cmd`, `id`, `success`,
/// `return`, `retcode`, `out` (when set), `jid`, `fun`, `fun_args`, then `user`,
/// `master_id` and `metadata` when the publish had them, and `_stamp`.
pub fn return_load(id: &str, load: &Value, ret: &JobReturn) -> Value {
    let field = |k: &str| value::get(load, k).cloned();
    let mut out = vec![
        (s("cmd"), s("_return")),
        (s("id"), s(id)),
        (s("success"), ret.success_value()),
        (s("return"), ret.ret.clone()),
        (s("retcode"), ret.retcode_value()),
    ];
    if let Some(o) = &ret.out {
        out.push((s("out"), s(o.as_str())));
    }
    out.push((s("jid"), field("jid").unwrap_or(Value::Nil)));
    out.push((s("fun"), field("fun").unwrap_or(Value::Nil)));
    out.push((s("fun_args"), field("arg").unwrap_or(Value::Nil)));
    for k in ["user", "master_id"] {
        if let Some(v) = field(k) {
            out.push((s(k), v));
        }
    }
    if let Some(meta @ Value::Map(_)) = field("metadata") {
        out.push((s("metadata"), meta));
    }
    out.push((
        s("_stamp"),
        s(halite_proto::event::stamp(chrono::Utc::now())),
    ));
    Value::Map(out)
}

/// Writes `proc_dir/<jid>` (msgpack of the proc data, as `_thread_return` does). Only plain
/// job ids become file names; the file is best effort (the job table is what
/// `saltutil.running` reads).
fn write_proc_file(proc_dir: &Path, jid: &str, data: &Value) -> Option<PathBuf> {
    if !halite_proto::auth::valid_id(jid) {
        return None;
    }
    let path = proc_dir.join(jid);
    match std::fs::write(&path, value::encode(data)) {
        Ok(()) => Some(path),
        Err(e) => {
            tracing::debug!("Cannot write {}: {e}", path.display());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::map;

    fn job(n: &str) -> Value {
        map([
            ("pid", Value::from(1)),
            ("jid", s(n)),
            ("fun", s("test.sleep")),
        ])
    }

    #[test]
    fn job_table_lists_finds_and_signals_running_jobs() {
        let jobs = Jobs::new();
        let h = JobHandle::new();
        jobs.insert("2", job("2"), h.clone());
        jobs.insert("1", job("1"), JobHandle::new());
        let listed: Vec<_> = jobs
            .running()
            .iter()
            .map(|j| value::get_str(j, "jid").unwrap().to_owned())
            .collect();
        assert_eq!(listed, ["1", "2"]);
        assert_eq!(jobs.find("2"), Some(job("2")));
        assert!(jobs.signal("2", 15));
        assert_eq!(h.cancel_signal(), Some(15));
        jobs.remove("2");
        assert_eq!(jobs.find("2"), None);
        assert!(!jobs.signal("2", 9));
    }

    #[test]
    fn return_load_has_salts_fields_in_order() {
        let load = map([
            ("fun", s("test.ping")),
            ("arg", Value::Array(vec![])),
            ("tgt", s("*")),
            ("jid", s("20260101000000000000")),
            ("user", s("root")),
            ("metadata", s("not a dict")),
        ]);
        let ret = JobReturn {
            ret: Value::Boolean(true),
            retcode: 0,
            success: true,
            out: None,
            multi: None,
        };
        let r = return_load("m1", &load, &ret);
        let keys: Vec<_> = r
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| value::str_of(k).unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                "cmd", "id", "success", "return", "retcode", "jid", "fun", "fun_args", "user",
                "_stamp"
            ]
        );
        assert_eq!(value::get(&r, "fun_args"), Some(&Value::Array(vec![])));
        let failed = JobReturn {
            ret: s("'x.y' is not available."),
            retcode: 1,
            success: false,
            out: Some("nested".into()),
            multi: None,
        };
        let r = return_load("m1", &load, &failed);
        assert_eq!(value::get_str(&r, "out"), Some("nested"));
        assert_eq!(value::get(&r, "success"), Some(&Value::Boolean(false)));
    }

    #[test]
    fn jids_become_text_and_only_plain_ones_name_proc_files() {
        assert_eq!(jid_text(&s("123")), Some("123".into()));
        assert_eq!(jid_text(&Value::from(42)), Some("42".into()));
        assert_eq!(jid_text(&Value::Nil), None);
        let dir = tempfile::tempdir().unwrap();
        assert!(write_proc_file(dir.path(), "../evil", &Value::Nil).is_none());
        assert!(write_proc_file(dir.path(), "..", &Value::Nil).is_none());
        let p = write_proc_file(dir.path(), "2026", &job("2026")).unwrap();
        assert_eq!(
            value::decode(&std::fs::read(p).unwrap()).unwrap(),
            job("2026")
        );
    }
}
