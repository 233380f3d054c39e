//! The worker pool: slot threads, each owning at most one Python worker, taking jobs off
//! one bounded queue.

use crate::cache::Cache;
use crate::Error;
use halite_proto::value::{self, bin, map, s};
use halite_proto::Value;
use halite_pyworker::Worker;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Jobs that may wait for a worker; a request beyond them is answered with an error.
pub const QUEUE_CAPACITY: usize = 4096;
/// Largest reply frame a worker may send.
pub const MAX_REPLY: usize = 256 << 20;
/// A worker gets at least this long to import Salt and load the options.
pub const MIN_STARTUP: Duration = Duration::from_secs(30);
/// After a worker failed to start, requests are answered with the error for this long
/// before a slot tries again.
pub const RESTART_BACKOFF: Duration = Duration::from_secs(5);
/// After Salt's Python was not found, how long before looking again.
pub const FIND_RETRY: Duration = Duration::from_secs(60);
/// A request that waited longer than this for a worker is answered with an error instead
/// of being compiled: the minion's request has timed out (stock minions wait 60 s for a
/// `_pillar` reply, then send it again).
pub const MAX_QUEUE_WAIT: Duration = Duration::from_secs(60);

/// What a worker is asked.
#[derive(Debug)]
pub(crate) enum Request {
    /// Compile the pillar of `id` from its `_pillar` load; with `store`, keep the pillar
    /// before the override in the cache under that key.
    Compile {
        id: String,
        load: Value,
        store: Option<String>,
    },
    /// Merge `pillar_override` into a cached pillar (PillarCache on a hit).
    Merge {
        id: String,
        base: Value,
        overrides: Value,
    },
}

impl Request {
    fn id(&self) -> &str {
        match self {
            Request::Compile { id, .. } | Request::Merge { id, .. } => id,
        }
    }

    fn frame(&self) -> Value {
        match self {
            Request::Compile { load, .. } => {
                map([("op", s("compile")), ("load", bin(value::encode(load)))])
            }
            Request::Merge {
                base, overrides, ..
            } => map([
                ("op", s("merge")),
                ("base", bin(value::encode(base))),
                ("override", bin(value::encode(overrides))),
            ]),
        }
    }
}

/// Where a pillar reply goes.
pub(crate) type ReplyFn = Box<dyn FnOnce(Value) + Send>;

/// One queued request.
pub(crate) struct Job {
    pub request: Request,
    pub queued: Instant,
    pub reply: ReplyFn,
}

/// How to run the workers (the script is a parameter so tests can run misbehaving ones).
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// `halite_salt_python`, or `None` for `salt-call` on `PATH`.
    pub python: Option<PathBuf>,
    pub script: String,
    pub args: Vec<OsString>,
    pub workers: usize,
    pub timeout: Duration,
}

/// Counters of what the pool did (for tests and logs).
#[derive(Debug, Default)]
pub struct PoolStats {
    /// Workers started (ready).
    pub started: AtomicU64,
    /// Workers that died, hung, or sent a bad reply, and were killed.
    pub lost: AtomicU64,
    /// Requests answered by a worker.
    pub answered: AtomicU64,
    /// Requests answered with an error without (or after failing) a worker.
    pub failed: AtomicU64,
}

/// The pool: a queue and the slot threads reading it. Dropping it closes the queue; each
/// slot finishes the job it has, kills its worker and ends.
pub(crate) struct Pool {
    tx: SyncSender<Job>,
    stats: Arc<PoolStats>,
}

/// What the slots share.
struct Shared {
    spec: Spec,
    cache: Arc<Cache>,
    stats: Arc<PoolStats>,
    rx: Mutex<Receiver<Job>>,
    /// Salt's Python, once found (or why not, and when that was decided).
    python: Mutex<Option<(Result<PathBuf, String>, Instant)>>,
}

impl Pool {
    /// Starts `spec.workers` slot threads, each of which finds Salt's Python (once for
    /// all), starts its worker at once and then serves jobs. Never blocks on Python.
    pub fn start(spec: Spec, cache: Arc<Cache>) -> Result<Pool, Error> {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE_CAPACITY);
        let stats = Arc::new(PoolStats::default());
        let workers = spec.workers.max(1);
        let shared = Arc::new(Shared {
            spec,
            cache,
            stats: stats.clone(),
            rx: Mutex::new(rx),
            python: Mutex::new(None),
        });
        for n in 0..workers {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("pillar-{n}"))
                .spawn(move || Slot::new(n, &shared).run())
                .map_err(|e| Error::Thread(e.to_string()))?;
        }
        Ok(Pool { tx, stats })
    }

    /// Queues `job`; a full queue answers it at once with an error.
    pub fn submit(&self, job: Job) {
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                let why = format!("{QUEUE_CAPACITY} pillar requests are already waiting");
                fail(job, &why);
            }
            Err(TrySendError::Disconnected(job)) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                fail(job, "the pillar workers have stopped");
            }
        }
    }

    pub fn stats(&self) -> &Arc<PoolStats> {
        &self.stats
    }
}

/// The reply of a pillar that could not be compiled: Salt's `_errors` list, which makes
/// the minion refuse to run states with it (as for a pillar that failed to render).
pub fn error_pillar(why: &str) -> Value {
    map([(
        "_errors",
        Value::Array(vec![s(format!(
            "Failed to compile pillar on the master: {why}"
        ))]),
    )])
}

/// Logs and answers a job that cannot be compiled.
fn fail(job: Job, why: &str) {
    tracing::error!(
        "Pillar for minion {} could not be compiled: {why}",
        job.request.id()
    );
    deliver(job.reply, error_pillar(why), job.request.id());
}

/// Runs a reply callback; a panic in it is logged and the slot goes on.
fn deliver(reply: ReplyFn, pillar: Value, id: &str) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || reply(pillar)));
    if outcome.is_err() {
        tracing::error!("Panic while sending the pillar of minion {id}; the pillar thread goes on");
    }
}

/// One slot: its worker (if running) and when its last start failed.
struct Slot<'a> {
    n: usize,
    shared: &'a Shared,
    worker: Option<Worker>,
    /// The last start failure: when, and why.
    failed_start: Option<(Instant, String)>,
    /// Whether the current worker has compiled anything yet (its first is the cold one).
    warm: bool,
}

impl<'a> Slot<'a> {
    fn new(n: usize, shared: &'a Shared) -> Slot<'a> {
        Slot {
            n,
            shared,
            worker: None,
            failed_start: None,
            warm: false,
        }
    }

    fn run(mut self) {
        // Warm up before the first request, so it does not pay for importing Salt.
        if let Err(why) = self.ensure_worker() {
            tracing::debug!(slot = self.n, "No pillar worker yet: {why}");
        }
        loop {
            let next = self
                .shared
                .rx
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .recv();
            let Ok(job) = next else { return };
            self.serve(job);
        }
    }

    fn serve(&mut self, job: Job) {
        let stats = &self.shared.stats;
        let waited = job.queued.elapsed();
        if waited > MAX_QUEUE_WAIT {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            let why = format!(
                "the request waited {:.1} s for a pillar worker, longer than its minion waits",
                waited.as_secs_f64()
            );
            return fail(job, &why);
        }
        if let Err(why) = self.ensure_worker() {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            return fail(job, &why);
        }
        let Some(worker) = self.worker.as_mut() else {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            return fail(job, "no pillar worker");
        };
        let started = Instant::now();
        let pid = worker.pid();
        match exchange(worker, &job.request, self.shared.spec.timeout) {
            Ok((pillar, base)) => {
                stats.answered.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    "Pillar for minion {} compiled in {:.1} ms by worker {pid} ({})",
                    job.request.id(),
                    started.elapsed().as_secs_f64() * 1000.0,
                    if self.warm { "warm" } else { "cold" }
                );
                self.warm = true;
                if let (
                    Request::Compile {
                        store: Some(key), ..
                    },
                    Some(base),
                ) = (&job.request, base)
                {
                    self.shared.cache.insert(key.clone(), base, started);
                }
                deliver(job.reply, pillar, job.request.id());
            }
            Err(why) => {
                stats.lost.fetch_add(1, Ordering::Relaxed);
                stats.failed.fetch_add(1, Ordering::Relaxed);
                // Dropping the worker kills and reaps it; the next job starts another.
                self.worker = None;
                tracing::error!("Pillar worker {pid} is stopped and will be replaced");
                fail(job, &why);
            }
        }
    }

    /// A running worker, started if needed (not within [`RESTART_BACKOFF`] of a failed
    /// start); the error says why there is none.
    fn ensure_worker(&mut self) -> Result<(), String> {
        if self.worker.is_some() {
            return Ok(());
        }
        if let Some((at, why)) = &self.failed_start {
            if at.elapsed() < RESTART_BACKOFF {
                return Err(why.clone());
            }
        }
        let python = self.shared.find_python()?;
        match start_worker(&python, self.n, &self.shared.spec) {
            Ok(worker) => {
                self.shared.stats.started.fetch_add(1, Ordering::Relaxed);
                self.failed_start = None;
                self.warm = false;
                self.worker = Some(worker);
                Ok(())
            }
            Err(why) => {
                tracing::error!("A pillar worker could not be started: {why}");
                self.failed_start = Some((Instant::now(), why.clone()));
                Err(why)
            }
        }
    }
}

impl Shared {
    /// Salt's Python: found once, or the reason it was not (looked for again after
    /// [`FIND_RETRY`]).
    fn find_python(&self) -> Result<PathBuf, String> {
        let mut found = self.python.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((result, at)) = found.as_ref() {
            if result.is_ok() || at.elapsed() < FIND_RETRY {
                return result.clone();
            }
        }
        let result = halite_pyworker::find_salt_python(self.spec.python.as_deref()).map_err(|e| {
            let why = format!(
                "pillar is configured but Salt's Python was not found ({e}); install Salt \
                     on the master host or set {} in the master config",
                crate::options::OPT_PYTHON
            );
            tracing::error!("{why}");
            why
        });
        if let Ok(p) = &result {
            tracing::info!("Pillar is compiled by Salt's Python at {}", p.display());
        }
        *found = Some((result.clone(), Instant::now()));
        result
    }
}

/// Starts a worker and waits for its `ready` frame.
fn start_worker(python: &Path, n: usize, spec: &Spec) -> Result<Worker, String> {
    let name = format!("pillar-worker-{n}");
    let mut worker =
        Worker::spawn(python, &name, &spec.script, &spec.args, &[]).map_err(|e| e.to_string())?;
    let ready = worker
        .recv_timeout(MAX_REPLY, spec.timeout.max(MIN_STARTUP))
        .map_err(|e| format!("{name} did not start: {e}"))?;
    match ready {
        Some(v) if value::get(&v, "ready") == Some(&Value::from(true)) => {
            tracing::debug!(
                "{name} is ready (pid {}; loaders reused between requests: {})",
                worker.pid(),
                value::get(&v, "reuse").is_some_and(value::truthy)
            );
            Ok(worker)
        }
        Some(v) => Err(format!(
            "{name} did not start: {}",
            value::get_str(&v, "error").unwrap_or("it sent no ready frame")
        )),
        None => Err(format!("{name} exited while starting")),
    }
}

/// Sends one request and reads its reply: the pillar, and the pillar to cache (for a
/// compile on the cache path). `Err` means the worker is unusable.
fn exchange(
    worker: &mut Worker,
    request: &Request,
    timeout: Duration,
) -> Result<(Value, Option<Value>), String> {
    let pid = worker.pid();
    worker
        .send(&request.frame())
        .map_err(|e| format!("the pillar worker {pid} could not be sent the request: {e}"))?;
    let reply = match worker.recv_timeout(MAX_REPLY, timeout) {
        Ok(Some(v)) => v,
        Ok(None) => return Err(format!("the pillar worker {pid} exited unexpectedly")),
        Err(halite_pyworker::Error::Timeout(t)) => {
            return Err(format!(
                "the pillar worker {pid} took longer than {} s ({}) and was stopped",
                t.as_secs_f64(),
                crate::options::OPT_TIMEOUT
            ))
        }
        Err(e) => return Err(format!("the pillar worker {pid} sent a bad reply: {e}")),
    };
    if value::get(&reply, "exception").is_some_and(value::truthy) {
        // Stock's run_func answers "" when `_pillar` raised (the worker logged it).
        return Ok((s(""), None));
    }
    let decode = |name: &str| -> Result<Option<Value>, String> {
        match value::get(&reply, name) {
            None | Some(Value::Nil) => Ok(None),
            Some(v) => {
                let bytes = value::bytes_of(v).ok_or_else(|| {
                    format!("the pillar worker {pid} sent a bad reply: {name} is not bytes")
                })?;
                value::decode(bytes)
                    .map(Some)
                    .map_err(|e| format!("the pillar worker {pid} sent a bad reply: {name}: {e}"))
            }
        }
    };
    let pillar = decode("pillar")?
        .ok_or_else(|| format!("the pillar worker {pid} sent a bad reply: no pillar"))?;
    Ok((pillar, decode("base")?))
}
