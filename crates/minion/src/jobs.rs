//! Running published jobs: each on its own thread (a slow, hanging or failing job never
//! holds up the minion or another job), listed in the job table `saltutil.running` and
//! `find_job` read, mirrored in `cachedir/proc/<jid>` like Salt's proc files, and answered
//! with a `_return` to the master (`Minion._thread_return` / `_return_pub`).
//!
//! A job that panics is Salt's job that raised: the panic is caught on the job's thread,
//! logged ("The minion function caused an exception"), and answered with the return
//! `_thread_return` builds for an exception (`"The minion function caused an exception:
//! <traceback>"`, `retcode` 1, `out: nested`); the minion goes on. Whatever happens to a
//! job, a guard removes its table entry and proc file.
//!
//! Stopping ([`Jobs::drain`]): no job starts any more; running jobs get
//! `shutdown_job_timeout` (a Halite option, default 5 s: the time Salt's stopping minion
//! waits before it signals its jobs) to finish and send their returns; then those still
//! running get SIGTERM, as Salt's get, and send nothing, and returns still waiting for the
//! master are abandoned. A return that could not be sent while the minion was stopping is
//! kept on disk ([`Spool`]) and sent to its master at the next start. Deviations from
//! Salt: the wait ends as soon as no job runs (Salt always sleeps its 5 s); Salt loses a
//! return its master did not take.
//!
//! Returners (`--return`): once the return was sent (or could not be), the job's thread
//! runs the returners the job names ([`halite_returners::run`], Salt's step at the end of
//! `_thread_return`), with the minion's configuration, grains and pillar for their
//! options and its `fire_master` queues ([`crate::forward::offer_data`]) for
//! `master_bus`. They never delay or lose the normal return: it has gone out before they
//! start; a failing or unknown returner is logged with Salt's message. As in Salt, a job
//! whose return is suppressed (`__no_return__`) or that was cancelled runs none.
//!
//! Invariants: a job's table entry lives until its return is sent, kept or given up (then
//! the returners run); a job thread is counted from before it starts until its returners
//! have run, so the drain never ends while a return could still go out.

use crate::channel::Channel;
use crate::forward::Forwarder;
use crate::settings::Settings;
use crate::spool::Spool;
use halite_config::MinionConfig;
use halite_exec::{Context, JobHandle, JobReturn, JobTable, Registry};
use halite_proto::value::{self, s};
use halite_proto::Value;
use halite_returners::Finished;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

/// The signal jobs still running at the end of the shutdown wait get (SIGTERM, as Salt's
/// `_terminate_subprocess_list` sends).
pub const SHUTDOWN_SIGNAL: i32 = 15;

/// How long jobs signalled at shutdown get to end (Salt's `grace_seconds`) before the
/// minion exits without them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Salt's log line and return prefix for a job function that raised.
pub const EXCEPTION_TEXT: &str = "The minion function caused an exception";

#[derive(Default)]
struct State {
    /// The live jobs: proc data and cancellation handle by jid.
    running: HashMap<String, (Value, Arc<JobHandle>)>,
    /// Job threads alive: running, or sending or keeping their return.
    threads: usize,
    /// The minion is stopping: no job starts.
    closing: bool,
    /// The shutdown wait is over: returns still waiting for the master are given up.
    abandoned: bool,
}

/// The live jobs of this minion.
#[derive(Default)]
pub struct Jobs {
    state: Mutex<State>,
    /// Notified when a job thread ends.
    ended: Condvar,
}

/// A job thread, counted by [`Jobs`] until it is dropped (however the thread ends).
pub struct JobThread {
    jobs: Arc<Jobs>,
}

impl Drop for JobThread {
    fn drop(&mut self) {
        let mut st = self.jobs.lock();
        st.threads = st.threads.saturating_sub(1);
        self.jobs.ended.notify_all();
    }
}

/// A job's table entry and proc file, removed when dropped (also when the job panicked).
/// The job thread holds it until the return is sent, so `saltutil.find_job` never
/// answers "not running" for a job whose return is still on its way (a stock minion's
/// job process lives until it has returned).
#[must_use = "the job is listed as running only while its entry is held"]
pub struct Entry<'a> {
    jobs: &'a Jobs,
    jid: &'a str,
    proc_file: Option<PathBuf>,
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        self.jobs.lock().running.remove(self.jid);
        if let Some(path) = &self.proc_file {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// How the shutdown wait ended ([`Jobs::drain`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drained {
    /// Jobs that were still running at the end of the wait and got [`SHUTDOWN_SIGNAL`].
    pub signalled: Vec<String>,
    /// Job threads still alive when the minion gave up on them.
    pub left: usize,
}

impl Jobs {
    /// An empty table.
    pub fn new() -> Jobs {
        Jobs::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a new job thread, or `None` when the minion is stopping (no job starts).
    pub fn begin(self: &Arc<Self>) -> Option<JobThread> {
        let mut st = self.lock();
        if st.closing {
            return None;
        }
        st.threads += 1;
        Some(JobThread { jobs: self.clone() })
    }

    /// Whether the minion is stopping.
    pub fn is_closing(&self) -> bool {
        self.lock().closing
    }

    /// Whether the shutdown wait is over (returns still waiting are given up).
    pub fn is_abandoned(&self) -> bool {
        self.lock().abandoned
    }

    /// Runs `exec` as job `jid`, listed in the table (and `proc_dir/<jid>`) until the
    /// returned [`Entry`] is dropped, whatever happens; a panic becomes Salt's exception
    /// return for `fun`.
    pub fn run_guarded<'a>(
        &'a self,
        jid: &'a str,
        proc_data: Value,
        handle: Arc<JobHandle>,
        proc_dir: &Path,
        fun: &str,
        exec: impl FnOnce() -> JobReturn,
    ) -> (JobReturn, Entry<'a>) {
        let proc_file = write_proc_file(proc_dir, jid, &proc_data);
        let entry = Entry {
            jobs: self,
            jid,
            proc_file,
        };
        self.lock()
            .running
            .insert(jid.to_owned(), (proc_data, handle));
        let ret = match catch_unwind(AssertUnwindSafe(exec)) {
            Ok(ret) => ret,
            Err(panic) => {
                let what = panic_text(panic.as_ref());
                tracing::warn!("{EXCEPTION_TEXT} (job {jid}, {fun}): {what}");
                exception_return(fun, &what)
            }
        };
        (ret, entry)
    }

    /// Stops the jobs for shutdown: no job starts any more; waits up to `wait` for the
    /// job threads to end (their returns sent or kept); then signals the jobs still
    /// running with [`SHUTDOWN_SIGNAL`], gives up the returns still waiting for the master,
    /// and waits up to `grace` more.
    pub fn drain(&self, wait: Duration, grace: Duration) -> Drained {
        let mut st = self.lock();
        st.closing = true;
        if st.threads > 0 {
            tracing::info!(
                "Waiting up to {} s for {} running job(s) to finish and return",
                crate::auth::secs(wait),
                st.threads
            );
        }
        st = self.wait_ended(st, wait);
        // Only jobs whose threads still run are signalled (an entry can outlive its thread
        // for a moment: it goes when the return is sent).
        let mut signalled: Vec<String> = Vec::new();
        if st.threads > 0 {
            signalled = st.running.keys().cloned().collect();
            signalled.sort();
            if !signalled.is_empty() {
                tracing::warn!(
                    "Job(s) {} still running after shutdown_job_timeout ({} s): sending them signal {SHUTDOWN_SIGNAL}; they return nothing",
                    signalled.join(", "),
                    crate::auth::secs(wait)
                );
            }
            for (_, handle) in st.running.values() {
                handle.cancel(SHUTDOWN_SIGNAL);
            }
            st.abandoned = true;
            st = self.wait_ended(st, grace);
        }
        if st.threads > 0 {
            tracing::warn!(
                "{} job thread(s) did not end within {} s of the signal; the minion exits without them",
                st.threads,
                crate::auth::secs(grace)
            );
        }
        Drained {
            signalled,
            left: st.threads,
        }
    }

    /// Waits up to `wait` for every job thread to end.
    fn wait_ended<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        wait: Duration,
    ) -> MutexGuard<'a, State> {
        let deadline = Instant::now().checked_add(wait);
        while st.threads > 0 {
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                break;
            }
            st = self
                .ended
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        st
    }
}

/// The message a panic carried (`panic!` with a literal or a formatted string).
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// `_thread_return`'s return for a function that raised, with the panic in place of
/// Python's traceback (in the form `halite-exec` gives its exceptions).
pub fn exception_return(fun: &str, what: &str) -> JobReturn {
    JobReturn {
        ret: Value::from(format!(
            "{EXCEPTION_TEXT}: Traceback (most recent call last):\n  File \"halite-minion\", in {fun}\npanic: {what}\n"
        )),
        retcode: 1,
        success: false,
        out: Some("nested".to_owned()),
        multi: None,
    }
}

impl JobTable for Jobs {
    fn running(&self) -> Vec<Value> {
        let st = self.lock();
        let mut jobs: Vec<(&String, &Value)> = st
            .running
            .iter()
            .map(|(jid, (data, _))| (jid, data))
            .collect();
        jobs.sort_by(|a, b| a.0.cmp(b.0));
        jobs.into_iter().map(|(_, data)| data.clone()).collect()
    }

    fn find(&self, jid: &str) -> Option<Value> {
        self.lock().running.get(jid).map(|(data, _)| data.clone())
    }

    fn signal(&self, jid: &str, signal: i32) -> bool {
        let handle = self.lock().running.get(jid).map(|(_, h)| h.clone());
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
    /// The master entry the channel leads to (as configured), which kept returns name.
    pub master: String,
    /// Where returns that could not be sent while stopping are kept.
    pub spool: Arc<Spool>,
    /// `cachedir/proc`.
    pub proc_dir: PathBuf,
    /// The `fire_master` queues (one per master connected at once): where the
    /// `master_bus` returner's events go.
    pub forwarders: Vec<Arc<Forwarder>>,
}

impl Runner {
    /// Starts `load` (a targeted, checked publish load with job id `jid`) on a new
    /// thread, unless the minion is stopping.
    pub fn spawn(self: &Arc<Self>, jid: String, load: Value) {
        let Some(counted) = self.jobs.begin() else {
            tracing::info!("Not starting job {jid}: the minion is shutting down");
            return;
        };
        let me = self.clone();
        let started = std::thread::Builder::new()
            .name(format!("job-{jid}"))
            .spawn(move || {
                let _counted = counted;
                me.run(&jid, load);
            });
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
        let fun_text = value::str_of(fun).map_or_else(|| fun.to_string(), str::to_owned);
        // Listed as running until the return has been sent (`entry` is dropped then).
        let (ret, entry) = self.jobs.run_guarded(
            jid,
            proc_data,
            handle.clone(),
            &self.proc_dir,
            &fun_text,
            || self.registry.execute(&ctx, fun, arg),
        );

        if let Some(sig) = handle.cancel_signal() {
            // Salt's killed job process sends nothing.
            tracing::info!("Job {jid} was cancelled with signal {sig}; no return is sent");
            return;
        }
        if value::get(&ret.ret, "__no_return__").is_some_and(value::truthy) {
            tracing::debug!("Suppressing return for job {jid} because __no_return__ is set");
            return;
        }
        if self.settings.pub_ret {
            let reply = return_load(&self.settings.id, &load, &ret);
            self.send_return(jid, &reply);
        }
        drop(entry);
        self.run_returners(&ctx, &load, ret);
    }

    /// Runs the returners job `load` names with its return `ret` (after the return went
    /// to the master).
    fn run_returners(&self, ctx: &Context, load: &Value, ret: JobReturn) {
        let finished = Finished {
            load,
            retcode: ret.retcode_value(),
            success: ret.success_value(),
            // Salt's return dict has `out` only where the job failed; a function's
            // outputter goes to the master alone.
            out: ret.out.clone().filter(|_| !ret.success),
            multi: ret.multi.is_some(),
            ret: ret.ret,
        };
        let host = ReturnerHost {
            ctx,
            forwarders: &self.forwarders,
        };
        halite_returners::run(&host, &self.settings.id, &finished, self.opts.get("return"));
    }

    /// Sends a job's return; while the minion is stopping, one that cannot be sent (or is
    /// still waiting at the end of the shutdown wait) is kept for the next start.
    fn send_return(&self, jid: &str, reply: &Value) {
        tracing::info!("Returning information for job: {jid}");
        let s = &self.settings;
        let jobs = &self.jobs;
        let sent =
            self.channel
                .send_until(reply, s.return_timeout(), s.return_retry_tries, &|| {
                    jobs.is_abandoned()
                });
        let Err(e) = sent else {
            return;
        };
        if !self.jobs.is_closing() {
            tracing::warn!(
                "The minion failed to return the job information for job {jid}. This is often due to the master being shut down or overloaded. If the master is running, consider increasing the worker_threads value. ({e})"
            );
            return;
        }
        match self.spool.keep(jid, &self.master, reply) {
            Ok(path) => tracing::info!(
                "The return of job {jid} could not be sent while the minion stops ({e}); kept in {} for master {} at the next start",
                path.display(),
                self.master
            ),
            Err(keep) => tracing::warn!(
                "The minion failed to return the job information for job {jid} while stopping ({e}), and cannot keep it: {keep}"
            ),
        }
    }
}

/// What a job's returners get from the minion: its configuration, grains and pillar
/// (`config.option`) and its `fire_master` queues.
struct ReturnerHost<'a> {
    ctx: &'a Context,
    forwarders: &'a [Arc<Forwarder>],
}

impl halite_returners::Host for ReturnerHost<'_> {
    fn config_option(&self, key: &str) -> Option<Value> {
        let ctx = self.ctx;
        halite_returners::config_option(key, |k| ctx.opts.get(k).cloned(), &ctx.grains, &ctx.pillar)
    }

    fn fire_master(&self, tag: &str, data: Value) -> Result<(), String> {
        if self.forwarders.is_empty() {
            return Err("the minion has no master to fire events to".to_owned());
        }
        let event = halite_proto::value::map([
            ("data", data),
            ("tag", s(tag)),
            ("events", Value::Nil),
            ("pretag", Value::Nil),
        ]);
        crate::forward::offer_data(self.forwarders, &event).map_err(|e| e.to_string())
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

    fn done() -> JobReturn {
        JobReturn {
            ret: Value::Boolean(true),
            retcode: 0,
            success: true,
            out: None,
            multi: None,
        }
    }

    /// Starts job `jid` on a thread, counted as the runner counts it; it runs until
    /// `release` (or, with `None`, until it is cancelled).
    fn start_job(
        jobs: &Arc<Jobs>,
        dir: &Path,
        jid: &str,
        release: Option<std::sync::mpsc::Receiver<()>>,
    ) -> (Arc<JobHandle>, std::thread::JoinHandle<JobReturn>) {
        let counted = jobs.begin().expect("the table takes jobs");
        let handle = JobHandle::new();
        let (jobs, dir, jid, h) = (jobs.clone(), dir.to_owned(), jid.to_owned(), handle.clone());
        let (started_tx, started) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let _counted = counted;
            let cancel = h.clone();
            jobs.run_guarded(&jid, job(&jid), h, &dir, "test.sleep", move || {
                started_tx.send(()).unwrap();
                match release {
                    Some(rx) => rx.recv().unwrap(),
                    None => {
                        while !cancel.is_cancelled() {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                }
                done()
            })
            .0
        });
        started.recv().unwrap();
        (handle, thread)
    }

    #[test]
    fn job_table_lists_finds_and_signals_running_jobs_until_they_end() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = Arc::new(Jobs::new());
        let (go2, rx2) = std::sync::mpsc::channel();
        let (go1, rx1) = std::sync::mpsc::channel();
        let (h2, t2) = start_job(&jobs, dir.path(), "2", Some(rx2));
        let (_, t1) = start_job(&jobs, dir.path(), "1", Some(rx1));
        let listed: Vec<_> = jobs
            .running()
            .iter()
            .map(|j| value::get_str(j, "jid").unwrap().to_owned())
            .collect();
        assert_eq!(listed, ["1", "2"]);
        assert_eq!(jobs.find("2"), Some(job("2")));
        assert!(dir.path().join("2").exists(), "no proc file while running");
        assert!(jobs.signal("2", 15));
        assert_eq!(h2.cancel_signal(), Some(15));
        go2.send(()).unwrap();
        assert_eq!(t2.join().unwrap(), done());
        assert_eq!(jobs.find("2"), None);
        assert!(!dir.path().join("2").exists(), "proc file left behind");
        assert!(!jobs.signal("2", 9));
        assert!(jobs.find("1").is_some());
        go1.send(()).unwrap();
        t1.join().unwrap();
        assert!(jobs.running().is_empty());
    }

    #[test]
    fn a_panicking_job_returns_salts_exception_and_leaves_no_table_entry() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = Jobs::new();
        let (ret, entry) = jobs.run_guarded(
            "7",
            job("7"),
            JobHandle::new(),
            dir.path(),
            "test.boom",
            || {
                // Listed while it runs, like any job.
                assert!(jobs.find("7").is_some() && dir.path().join("7").exists());
                panic!("boom in job {}", 7)
            },
        );
        // Still listed while its return is on its way (find_job must not say it ended).
        assert!(jobs.find("7").is_some() && dir.path().join("7").exists());
        drop(entry);
        assert_eq!((ret.retcode, ret.success), (1, false));
        assert_eq!(ret.out.as_deref(), Some("nested"));
        let text = value::str_of(&ret.ret).unwrap();
        assert!(
            text.starts_with(
                "The minion function caused an exception: Traceback (most recent call last):\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("in test.boom\npanic: boom in job 7\n"),
            "{text}"
        );
        assert_eq!(jobs.find("7"), None);
        assert!(jobs.running().is_empty());
        assert!(!dir.path().join("7").exists(), "proc file left behind");
        // The table goes on serving jobs.
        let (ret, _) = jobs.run_guarded(
            "8",
            job("8"),
            JobHandle::new(),
            dir.path(),
            "test.ping",
            done,
        );
        assert_eq!(ret, done());
        assert!(jobs.running().is_empty());
        let (ret, _) = jobs.run_guarded("9", job("9"), JobHandle::new(), dir.path(), "t.x", || {
            std::panic::panic_any(42u8)
        });
        assert!(value::str_of(&ret.ret)
            .unwrap()
            .contains("panic: a panic without a message"));
    }

    #[test]
    fn a_job_whose_thread_ended_but_whose_return_is_in_flight_is_not_reported_signalled() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = Arc::new(Jobs::new());
        let counted = jobs.begin().expect("the table takes jobs");
        let (_, entry) = jobs.run_guarded(
            "6",
            job("6"),
            JobHandle::new(),
            dir.path(),
            "test.ping",
            done,
        );
        // The thread is gone; the entry stays until the return is sent.
        drop(counted);
        let drained = jobs.drain(Duration::from_secs(60), SHUTDOWN_GRACE);
        assert_eq!(
            drained,
            Drained {
                signalled: vec![],
                left: 0
            }
        );
        drop(entry);
    }

    #[test]
    fn stopping_waits_for_running_jobs_and_takes_no_new_ones() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = Arc::new(Jobs::new());
        let (go, rx) = std::sync::mpsc::channel();
        let (h, t) = start_job(&jobs, dir.path(), "5", Some(rx));
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            go.send(()).unwrap();
        });
        let drained = jobs.drain(Duration::from_secs(60), SHUTDOWN_GRACE);
        assert_eq!(
            drained,
            Drained {
                signalled: vec![],
                left: 0
            }
        );
        assert_eq!(
            h.cancel_signal(),
            None,
            "a job that finished in time was signalled"
        );
        assert!(!jobs.is_abandoned());
        assert_eq!(t.join().unwrap(), done());
        releaser.join().unwrap();
        assert!(jobs.is_closing());
        assert!(jobs.begin().is_none(), "a job started while stopping");
    }

    #[test]
    fn jobs_still_running_after_the_shutdown_wait_get_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = Arc::new(Jobs::new());
        let (h, t) = start_job(&jobs, dir.path(), "6", None);
        let drained = jobs.drain(Duration::from_millis(50), Duration::from_secs(60));
        assert_eq!(
            drained,
            Drained {
                signalled: vec!["6".to_owned()],
                left: 0
            }
        );
        assert_eq!(h.cancel_signal(), Some(SHUTDOWN_SIGNAL));
        assert!(jobs.is_abandoned());
        t.join().unwrap();
        assert_eq!(jobs.find("6"), None);
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
