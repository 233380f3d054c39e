//! The executor the minion's registry consults: one worker at a time, started on first
//! use, stopped after `fallback_idle_timeout` without jobs.

use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use halite_exec::{Context, Fallback, JobReturn};
use rmpv::Value;

use crate::conn::{Conn, Event, Pending};
use crate::protocol;
use crate::{Error, Options};

/// How often a waiting job looks at its cancellation.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// How long a worker may take to warm up before it is killed.
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

/// How long `sys.list_functions` waits for the list (loading every Salt module).
const LIST_TIMEOUT: Duration = Duration::from_secs(120);

struct Slot {
    conn: Option<Arc<Conn>>,
    /// Jobs using the worker now.
    active: usize,
    /// When the last job ended (or the worker started).
    last_used: Instant,
}

struct Shared {
    options: Options,
    /// The worker's program: halite-pyworker's framing, then `worker.py`.
    script: String,
    slot: Mutex<Slot>,
    /// Wakes the idle watch of the current worker (a job ended, the worker went away).
    wake: Condvar,
    next_job: AtomicU64,
}

fn lock(shared: &Shared) -> MutexGuard<'_, Slot> {
    shared.slot.lock().unwrap_or_else(|e| e.into_inner())
}

/// The fallback executor: runs the functions the native registry lacks in Salt's own
/// loader, in a worker process it starts on first use and stops when idle.
pub struct Executor {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

/// A job using the worker: counted until dropped.
struct Active {
    shared: Arc<Shared>,
    conn: Arc<Conn>,
}

impl Drop for Active {
    fn drop(&mut self) {
        let mut slot = lock(&self.shared);
        slot.active = slot.active.saturating_sub(1);
        slot.last_used = Instant::now();
        self.shared.wake.notify_all();
    }
}

impl Executor {
    /// An executor with `options`; nothing starts until a function is run.
    pub fn new(options: Options) -> Executor {
        Executor::with_script(options, crate::WORKER_PY)
    }

    /// An executor whose worker runs `worker` (after the framing) instead of
    /// [`crate::WORKER_PY`]: for tests of worker failures.
    fn with_script(options: Options, worker: &str) -> Executor {
        Executor {
            shared: Arc::new(Shared {
                options,
                script: format!("{}\n{worker}", halite_pyworker::FRAMING_PY),
                slot: Mutex::new(Slot {
                    conn: None,
                    active: 0,
                    last_used: Instant::now(),
                }),
                wake: Condvar::new(),
                next_job: AtomicU64::new(1),
            }),
        }
    }

    /// The running worker's process id, if one runs.
    pub fn worker_pid(&self) -> Option<u32> {
        lock(&self.shared)
            .conn
            .as_ref()
            .filter(|c| !c.has_ended())
            .map(|c| c.pid())
    }

    /// The worker for one more job, started if none runs.
    fn acquire(&self) -> Result<Active, Error> {
        let shared = &self.shared;
        let mut slot = lock(shared);
        let conn = match slot.conn.as_ref().filter(|c| !c.has_ended()) {
            Some(conn) => conn.clone(),
            None => {
                let conn = start(shared)?;
                slot.conn = Some(conn.clone());
                slot.last_used = Instant::now();
                conn
            }
        };
        slot.active += 1;
        Ok(Active {
            shared: shared.clone(),
            conn,
        })
    }

    /// Runs `frame` as job `job` on the worker and waits for its event; a cancelled
    /// job's process group gets the signal.
    fn wait(
        &self,
        active: &Active,
        job: u64,
        frame: &Value,
        ctx: Option<&Context>,
        limit: Option<Duration>,
    ) -> Result<Event, Error> {
        let (tx, rx) = mpsc::channel();
        let pending = Pending {
            tx,
            master: ctx.and_then(|c| c.master.clone()),
            handle: ctx.map_or_else(halite_exec::JobHandle::new, |c| c.job.clone()),
        };
        active.conn.submit(job, pending, frame)?;
        let deadline = limit.map(|l| Instant::now() + l);
        let mut signalled = false;
        loop {
            match rx.recv_timeout(CANCEL_POLL) {
                Ok(event) => return Ok(event),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Error::Worker(
                        "the Salt fallback worker dropped the job".to_owned(),
                    ))
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if let (false, Some(sig)) = (signalled, ctx.and_then(|c| c.job.cancel_signal())) {
                signalled = true;
                if let Err(e) = active.conn.send(&protocol::signal_frame(job, sig)) {
                    tracing::debug!("Cannot signal fallback job {job}: {e}");
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                active.conn.forget(job);
                return Err(Error::Worker(format!(
                    "the Salt fallback worker did not answer within {} s",
                    limit.unwrap_or_default().as_secs()
                )));
            }
        }
    }

    fn next_job(&self) -> u64 {
        self.shared.next_job.fetch_add(1, Ordering::Relaxed)
    }
}

/// Finds Salt's Python and starts a worker with its idle watch.
fn start(shared: &Arc<Shared>) -> Result<Arc<Conn>, Error> {
    let options = &shared.options;
    let python = halite_pyworker::find_salt_python(options.python.as_deref())?;
    let args = [
        OsString::from(options.config_file.as_os_str()),
        OsString::from(&options.id),
        OsString::from(std::process::id().to_string()),
    ];
    let watcher = Arc::downgrade(shared);
    let conn = Conn::start(
        &python,
        &shared.script,
        &args,
        Box::new(move |conn| {
            // The worker went away by itself: the next job starts another.
            if let Some(shared) = watcher.upgrade() {
                let mut slot = lock(&shared);
                if slot.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
                    slot.conn = None;
                }
                shared.wake.notify_all();
            }
        }),
    )?;
    tracing::info!(
        "Started the Salt fallback worker {} ({})",
        conn.pid(),
        python.display()
    );
    let (watched, shared) = (conn.clone(), Arc::downgrade(shared));
    std::thread::Builder::new()
        .name("salt-fallback-idle".into())
        .spawn(move || watch(&shared, &watched))
        .map_err(|e| {
            conn.kill("its idle watch cannot start");
            Error::Thread(e.to_string())
        })?;
    Ok(conn)
}

/// The idle watch of `conn`: stops it once no job used it for the idle timeout, kills it
/// if it does not warm up within [`START_TIMEOUT`]; ends when `conn` is no longer the
/// current worker.
fn watch(shared: &std::sync::Weak<Shared>, conn: &Arc<Conn>) {
    loop {
        let Some(shared) = shared.upgrade() else {
            conn.stop();
            return;
        };
        let idle = shared.options.idle_timeout;
        let mut slot = lock(&shared);
        if !slot.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            return;
        }
        let warming = !conn.is_ready();
        if warming && conn.age() >= START_TIMEOUT {
            drop(slot);
            conn.kill(&format!(
                "it did not warm up within {} s",
                START_TIMEOUT.as_secs()
            ));
            return;
        }
        let quiet = slot.last_used.elapsed();
        if slot.active == 0 && quiet >= idle {
            slot.conn = None;
            drop(slot);
            tracing::info!(
                "Stopping the Salt fallback worker {}: no job for {} s",
                conn.pid(),
                idle.as_secs_f64()
            );
            conn.stop();
            return;
        }
        let mut nap = if slot.active == 0 {
            idle.saturating_sub(quiet)
        } else {
            idle
        };
        if warming {
            nap = nap.min(START_TIMEOUT.saturating_sub(conn.age()));
        }
        let nap = nap.max(Duration::from_millis(10));
        drop(
            shared
                .wake
                .wait_timeout(slot, nap)
                .unwrap_or_else(|e| e.into_inner()),
        );
    }
}

impl Fallback for Executor {
    fn run(&self, ctx: &Context, fun: &str, arg: &Value) -> JobReturn {
        let active = match self.acquire() {
            Ok(active) => active,
            Err(Error::Python(
                e @ (halite_pyworker::Error::NotFound { .. }
                | halite_pyworker::Error::NotSalt { .. }),
            )) => return protocol::unavailable_return(fun, &e.to_string()),
            Err(e) => return protocol::exception_return(fun, &e.to_string()),
        };
        let job = self.next_job();
        let frame = protocol::job_frame(job, ctx, fun, arg);
        match self.wait(&active, job, &frame, Some(ctx), None) {
            Ok(Event::Ret(payload)) => protocol::job_return(fun, &payload),
            Ok(Event::Lost(why)) => protocol::exception_return(fun, &why),
            Ok(Event::Functions(_)) => {
                protocol::exception_return(fun, "the worker answered a job with a function list")
            }
            Err(e) => protocol::exception_return(fun, &e.to_string()),
        }
    }

    fn functions(&self) -> Vec<String> {
        let active = match self.acquire() {
            Ok(active) => active,
            Err(e) => {
                tracing::info!("The fallback executor lists no function: {e}");
                return Vec::new();
            }
        };
        if let Some(names) = active.conn.functions() {
            return names;
        }
        let job = self.next_job();
        match self.wait(
            &active,
            job,
            &protocol::list_frame(job),
            None,
            Some(LIST_TIMEOUT),
        ) {
            Ok(Event::Functions(names)) => names,
            Ok(Event::Lost(why)) => {
                tracing::warn!("The fallback executor could not list its functions: {why}");
                Vec::new()
            }
            Ok(Event::Ret(_)) => Vec::new(),
            Err(e) => {
                tracing::warn!("The fallback executor could not list its functions: {e}");
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_exec::{JobHandle, MasterChannel, NoJobs};
    use halite_proto::value::{self, map, s};
    use std::path::PathBuf;

    struct Env {
        dir: tempfile::TempDir,
    }

    impl Env {
        fn new() -> Env {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            std::fs::write(
                root.join("minion"),
                format!(
                    "id: fb-test\nroot_dir: {r}\ncachedir: {r}/cache\nsock_dir: {r}/sock\n\
                     pki_dir: {r}/pki\nlog_file: {r}/minion.log\nenable_fqdns_grains: false\n",
                    r = root.display()
                ),
            )
            .unwrap();
            Env { dir }
        }

        fn options(&self, python: Option<PathBuf>, idle: Duration) -> Options {
            Options {
                enabled: true,
                python,
                idle_timeout: idle,
                config_file: self.dir.path().join("minion"),
                id: "fb-test".to_owned(),
            }
        }

        fn context(&self, master: Option<Arc<dyn MasterChannel>>) -> Context {
            let file = self.dir.path().join("minion");
            let text = std::fs::read_to_string(&file).unwrap();
            let opts = halite_config::MinionConfig::from_yaml_str(&text, &file).unwrap();
            Context {
                id: "fb-test".to_owned(),
                opts: Arc::new(opts),
                grains: Arc::new(Value::Map(Vec::new())),
                pillar: Arc::new(map([("role", s("web"))])),
                jid: Some("20260101000000000042".to_owned()),
                pub_data: Some(map([
                    ("jid", s("20260101000000000042")),
                    ("fun", s("test.arg")),
                    ("tgt", s("*")),
                ])),
                jobs: Arc::new(NoJobs),
                job: JobHandle::new(),
                master,
            }
        }
    }

    fn salt_python() -> PathBuf {
        halite_testkit::salt_venv().join("bin").join("python3")
    }

    fn args(items: &[&str]) -> Value {
        Value::Array(items.iter().map(|a| s(*a)).collect())
    }

    fn text(ret: &JobReturn) -> String {
        value::str_of(&ret.ret)
            .map(str::to_owned)
            .unwrap_or_else(|| ret.ret.to_string())
    }

    fn gone(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
            Err(_) => true,
        }
    }

    fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A fake worker (after the framing) that says it is ready, then does `then` with the
    /// first job frame `msg`.
    fn fake(then: &str) -> String {
        format!(
            "inp, out = take_frame_streams()\n\
             write_frame(out, {{'op': 'ready', 'salt': 'fake', 'seconds': 0.0}})\n\
             msg = read_frame(inp)\n\
             {then}\n"
        )
    }

    #[test]
    fn a_worker_that_writes_garbage_fails_the_job_with_the_reason_and_is_replaced() {
        let env = Env::new();
        let exec = Executor::with_script(
            env.options(Some(salt_python()), Duration::from_secs(60)),
            &fake("out.write(b'\\x00\\x00\\x00\\x03\\xc1\\xc1\\xc1'); out.flush()\nimport time\ntime.sleep(60)"),
        );
        let ctx = env.context(None);
        let ret = exec.run(&ctx, "state.apply", &args(&[]));
        let t = text(&ret);
        assert!(
            t.starts_with(
                "The minion function caused an exception: Traceback (most recent call last):\n"
            ),
            "{t}"
        );
        assert!(t.contains("in state.apply\n"), "{t}");
        assert!(t.contains("bad frame"), "{t}");
        assert_eq!((ret.retcode, ret.success), (1, false));
        assert_eq!(ret.out.as_deref(), Some("nested"));
        // The broken worker was killed; the next job gets a new one.
        let first = exec.worker_pid();
        assert_eq!(first, None, "the broken worker is still the current one");
        let again = exec.run(&ctx, "state.apply", &args(&[]));
        assert!(text(&again).contains("bad frame"));
    }

    #[test]
    fn a_worker_that_dies_mid_job_gives_salts_exception_return() {
        let env = Env::new();
        let exec = Executor::with_script(
            env.options(Some(salt_python()), Duration::from_secs(60)),
            &fake("import os\nos._exit(3)"),
        );
        let ret = exec.run(&env.context(None), "pkg.list_pkgs", &args(&[]));
        let t = text(&ret);
        assert!(
            t.starts_with("The minion function caused an exception: "),
            "{t}"
        );
        assert!(t.contains("the Salt fallback worker exited"), "{t}");
        assert_eq!(ret.retcode, 1);
    }

    #[test]
    fn a_worker_that_cannot_warm_up_says_why() {
        let env = Env::new();
        let exec = Executor::with_script(
            env.options(Some(salt_python()), Duration::from_secs(60)),
            "inp, out = take_frame_streams()\n\
             write_frame(out, {'op': 'fatal', 'error': 'Traceback...\\nImportError: no salt.loader'})\n",
        );
        let t = text(&exec.run(&env.context(None), "state.apply", &args(&[])));
        assert!(
            t.contains("the Salt fallback worker could not start: ImportError: no salt.loader"),
            "{t}"
        );
    }

    #[test]
    fn without_salt_a_function_is_not_available_and_the_text_says_why() {
        let env = Env::new();
        let exec = Executor::new(env.options(
            Some(PathBuf::from("/nonexistent/bin/salt-call")),
            Duration::from_secs(60),
        ));
        let ret = exec.run(&env.context(None), "pkg.list_pkgs", &args(&[]));
        let t = text(&ret);
        assert!(
            t.starts_with("'pkg.list_pkgs' is not available: it is not a native Halite function"),
            "{t}"
        );
        assert!(t.contains("/nonexistent/bin/salt-call"), "{t}");
        assert!(!t.contains('\n'), "{t}");
        assert_eq!((ret.retcode, ret.success), (1, false));
        assert!(exec.functions().is_empty());
    }

    /// A master that answers `_file_list` with one file and `_pillar` with a pillar, and
    /// records what it was sent.
    #[derive(Default)]
    struct FakeMaster {
        sent: std::sync::Mutex<Vec<Value>>,
    }

    impl MasterChannel for FakeMaster {
        fn request(&self, load: Value) -> Result<Value, String> {
            self.sent.lock().unwrap().push(load.clone());
            match value::get_str(&load, "cmd") {
                Some("_file_list") => Ok(Value::Array(vec![s("top.sls"), s("web/init.sls")])),
                _ => Ok(Value::Nil),
            }
        }

        fn pillar(&self, load: Value) -> Result<Value, halite_exec::ExecError> {
            self.sent.lock().unwrap().push(load);
            Ok(map([("from", s("the master"))]))
        }
    }

    #[test]
    fn salt_functions_run_in_the_worker_with_master_requests_through_the_minion() {
        let env = Env::new();
        let exec = Executor::new(env.options(Some(salt_python()), Duration::from_secs(60)));
        let master = Arc::new(FakeMaster::default());
        let ctx = env.context(Some(master.clone()));

        let ret = exec.run(&ctx, "file.file_exists", &args(&["/etc/passwd"]));
        assert_eq!(
            (ret.ret.clone(), ret.retcode, ret.success),
            (Value::Boolean(true), 0, true),
            "{ret:?}"
        );
        let ret = exec.run(&ctx, "test.arg", &args(&["one", "k=v"]));
        assert_eq!(
            value::get(&ret.ret, "args"),
            Some(&Value::Array(vec![s("one")]))
        );
        let kwargs = value::get(&ret.ret, "kwargs").unwrap();
        assert_eq!(value::get_str(kwargs, "k"), Some("v"));
        assert_eq!(
            value::get_str(kwargs, "__pub_jid"),
            Some("20260101000000000042")
        );
        // The job's pillar is the minion's.
        let ret = exec.run(&ctx, "pillar.raw", &args(&[]));
        assert_eq!(ret.ret, map([("role", s("web"))]));
        // Fileserver and pillar requests go through the minion's channel.
        let ret = exec.run(&ctx, "cp.list_master", &args(&[]));
        assert_eq!(
            ret.ret,
            Value::Array(vec![s("top.sls"), s("web/init.sls")]),
            "{ret:?}"
        );
        // (Salt 3008 masks pillar values in returns.)
        let ret = exec.run(&ctx, "pillar.items", &args(&[]));
        assert!(value::get(&ret.ret, "from").is_some(), "{ret:?}");
        let sent = master.sent.lock().unwrap().clone();
        let cmds: Vec<&str> = sent
            .iter()
            .filter_map(|l| value::get_str(l, "cmd"))
            .collect();
        assert!(
            cmds.contains(&"_file_list") && cmds.contains(&"_pillar"),
            "{cmds:?}"
        );
        // Missing everywhere: Salt's text.
        let ret = exec.run(&ctx, "no_such_module.fun", &args(&[]));
        assert_eq!(text(&ret), "'no_such_module.fun' is not available.");
        assert_eq!((ret.retcode, ret.out.as_deref()), (1, Some("nested")));
        // A state run (it asks the master for the pillar), with the outputter Salt
        // declares for it.
        let ret = exec.run(
            &ctx,
            "state.single",
            &args(&["test.succeed_without_changes", "name=fb"]),
        );
        assert_eq!(ret.out.as_deref(), Some("highstate"), "{ret:?}");
        assert_eq!((ret.retcode, ret.success), (0, true), "{ret:?}");
        let Value::Map(states) = &ret.ret else {
            panic!("{ret:?}")
        };
        assert_eq!(states.len(), 1, "{ret:?}");
        assert_eq!(
            value::get(&states[0].1, "result"),
            Some(&Value::Boolean(true)),
            "{ret:?}"
        );
        let names = exec.functions();
        assert!(names.len() > 500, "{}", names.len());
        assert!(names.iter().any(|n| n == "state.apply"));
    }

    #[test]
    fn a_killed_job_kills_its_process_and_an_idle_worker_exits() {
        let env = Env::new();
        let exec = Arc::new(Executor::new(
            env.options(Some(salt_python()), Duration::from_secs(2)),
        ));
        let ctx = env.context(None);
        let handle = ctx.job.clone();
        let (exec2, ctx2) = (exec.clone(), ctx.clone());
        let job = std::thread::spawn(move || exec2.run(&ctx2, "test.sleep", &args(&["600"])));
        // The job process writes its pid into the proc file.
        let proc_file = env.dir.path().join("cache/proc/20260101000000000042");
        let pid_in_file = || {
            let data = value::decode(&std::fs::read(&proc_file).ok()?).ok()?;
            u32::try_from(value::get(&data, "pid")?.as_u64()?).ok()
        };
        wait_for("the job's proc file", || pid_in_file().is_some());
        let child = pid_in_file().unwrap();
        let worker = exec.worker_pid().unwrap();
        assert_ne!(child, worker);
        handle.cancel(9);
        let ret = job.join().unwrap();
        assert!(text(&ret).contains("killed by signal 9"), "{ret:?}");
        wait_for("the job process to go", || gone(child));
        // No job: the worker exits after the idle timeout and a new one serves the next.
        wait_for("the idle worker to exit", || gone(worker));
        assert_eq!(exec.worker_pid(), None);
        let again = exec.run(&env.context(None), "test.ping", &args(&[]));
        assert_eq!(again.ret, Value::Boolean(true));
        assert_ne!(exec.worker_pid(), Some(worker));
    }

    #[test]
    fn jobs_run_at_once() {
        let env = Env::new();
        let exec = Arc::new(Executor::new(
            env.options(Some(salt_python()), Duration::from_secs(60)),
        ));
        // The first job waits (up to 120 s) for a file only the second creates: run one
        // after the other, it would give up.
        let flag = env.dir.path().join("flag");
        let script = format!(
            "for i in $(seq 2400); do [ -e {f} ] && echo seen && exit 0; sleep 0.05; done; echo gave up",
            f = flag.display()
        );
        let (exec2, ctx) = (exec.clone(), env.context(None));
        let waiting = std::thread::spawn(move || {
            exec2.run(
                &ctx,
                "cmd.run",
                &args(&[script.as_str(), "python_shell=True"]),
            )
        });
        let touched = exec.run(
            &env.context(None),
            "file.touch",
            &args(&[flag.to_str().unwrap()]),
        );
        assert_eq!(touched.ret, Value::Boolean(true), "{touched:?}");
        assert_eq!(waiting.join().unwrap().ret, s("seen"));
    }
}
