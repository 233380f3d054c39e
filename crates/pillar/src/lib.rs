//! Pillar on the Halite master: `_pillar` answered by Salt's own Python pillar code in a
//! pool of warm worker processes.
//!
//! Pillar is the one part of a master whose specification is Salt's Python: the top file,
//! `pillar_roots`, every renderer (Jinja with `salt[...]` calls, `{% do %}`, yamlex, gpg,
//! ...), `ext_pillar` modules and the merge strategies. Rewriting them would never be
//! byte-identical, so [`Pillars`] hands each `_pillar` request to a worker process running
//! `salt.pillar` with the master's own options, and sends back what it compiled.
//!
//! # What a request costs
//!
//! A worker (see `pillar.py`) imports Salt and loads the master config
//! (`salt.config.master_config(<conf_file>)`) once, at start. Per request it does what
//! stock's `AESFuncs._pillar` does (the LTS default `_sync_pillar` path): the same checks
//! (`id` and `grains` present, a valid id, `grains["id"]` set), the same arguments to
//! `salt.pillar.Pillar` (`saltenv`/`env`, `ext`, `pillar_override`, `pillarenv`,
//! `extra_minion_data`), through PillarCache's path (pillar compiled without the
//! override, which is merged afterwards) when `pillar_cache` or `minion_data_cache` is on,
//! the plain path otherwise, and stock's async path (`master_async_mworker`) when that is
//! on. The result is serialized by `salt.payload.dumps`, as stock serializes the reply it
//! encrypts.
//!
//! # What is reused between requests, and why it is equivalent
//!
//! Every request still goes through stock's `salt.pillar.Pillar`, which builds its own
//! loaders, packs, `__opts__` copies, file clients and `__context__` dicts: nothing that
//! carries a minion's grains, options, pillar or per-call state outlives its request, so
//! one minion's data cannot reach another's (a loader shared between minions would share
//! `__context__`, where Salt's matchers and modules keep per-call state). What stock
//! spends its time on is building and filling those loaders, and the worker
//! (`pillar.py`, "Reuse between requests") memoizes only the parts whose result cannot
//! depend on the request:
//!
//! - **Module directory listings** (`LazyLoader._refresh_file_mapping`, twice per loader,
//!   a dozen loaders per request): kept per loader configuration. Salt's own package
//!   directories do not change under a running worker; every other directory
//!   (`extension_modules`, `*_dirs`, extensions) and its package subdirectories are
//!   checked by mtime on every use, and a directory changed in the last two seconds is
//!   listed afresh each time (its mtime may not move again within the timestamp's
//!   granularity), so modules synced to the master are seen at the next request.
//! - **Executing a module** (`LazyLoader._load_module`), for Salt's own renderers (not
//!   gpg or stateconf) and matchers and the `grains` and `pillar` execution modules: each
//!   was read in 3008.3 and has no `__virtual__`, no `__init__`, no `@depends`, no alias
//!   and no module-level object its functions change or hand out (`config` is left out:
//!   `config.get` hands out parts of its module-level defaults, which a template could
//!   change), so executing it again (what each stock loader does) recreates the same
//!   objects. A later load into a
//!   request's loader redoes the rest of stock's load for that loader: a fresh `__opts__`
//!   copied from the loader's options, the dunders bound to its pack, its functions added.
//!   Custom modules, ext_pillar modules and every other execution module are executed
//!   per loader, as in stock.
//! - **The master's file server** (`FSClient`, which loads every fileserver backend) that
//!   `Pillar.__init__` builds for execution modules is built when a module (`cp.*` from a
//!   template) first uses it, from the same options.
//! - `bool()` of Salt's copy-on-write options dict answers whether one key exists instead
//!   of counting all of them (the same truth value).
//!
//! This is installed only on the Salt release it was checked against (3008.3, reported
//! in the worker's ready frame and the debug log); any other release runs stock's code
//! unchanged. Jinja still compiles each template per request, as stock does (a compile
//! cache could fold filters at compile time). Measured on the crate's test tree (a top
//! file and two Jinja sls from grains), warm: about 4 ms of CPU per compilation against
//! 40 ms for stock's code in the same warm process
//! (`a_warm_worker_reuses_loaders_on_the_checked_salt_and_measures_a_compile`).
//!
//! # When Python runs at all
//!
//! Only when pillar is configured ([`Options::configured`]): `ext_pillar`, `pillar_opts`
//! or `decrypt_pillar` set, or a top file (`state_top`, default `top.sls`) in a
//! `pillar_roots` directory (or a root templated with `__env__`), or a request asking for
//! an on-demand `ext` pillar. Without a top file stock compiles nothing from
//! `pillar_roots`, so the answer is the request's `pillar_override` merged into `{}` (or
//! `{}`), computed here without Python. The configuration is looked at when the master
//! starts (the workers start then, warm before the first request) and, while it is not
//! configured, again at most once a second on a request, so a top file added later is
//! picked up. Nothing else in the master uses Python.
//!
//! # Workers and failures
//!
//! `halite_pillar_workers` processes (default `min(2, cores)`) take requests off one
//! bounded queue ([`pool::QUEUE_CAPACITY`]); the caller is never blocked (the reply is a
//! callback run on a pool thread). A worker that dies, sends a bad frame, or takes longer
//! than `halite_pillar_timeout` (default 60 s) is killed and replaced; the minion gets
//! Salt's failed-pillar shape, `{"_errors": ["Failed to compile pillar on the master:
//! ..."]}`, which makes `state.apply` refuse to run (as with a pillar that failed to
//! render) rather than run with missing data. The same holds when pillar is configured but
//! no Salt is found (`halite_salt_python`, an interpreter or a `salt-call`/`salt-master`
//! script; default `salt-call` on `PATH`): the error is logged, the minions get it as an
//! `_errors` entry, and the search is repeated after a minute. A Python exception in
//! `_pillar` itself is answered with `""`, as stock's `run_func` answers it. Render errors
//! are Salt's own `_errors` entries, exactly as stock reports them.
//!
//! # The cache
//!
//! Stock semantics, with the documented TTL: with `pillar_cache: True` (and the default
//! synchronous workers), each minion's compiled pillar (without `pillar_override`) is kept
//! under stock's key (`id`, or `id:pillarenv`) and served to later `_pillar` requests for
//! `pillar_cache_ttl` seconds, the request's override merged in by Salt's merge (a worker
//! does it; without an override no Python runs at all); an empty cached pillar is a miss.
//! `saltutil.refresh_pillar` (whose `clean_cache` defaults to `True`) makes the minion
//! send `clean_cache`, which drops its entry before compiling. Without `pillar_cache`
//! every request is compiled, as in stock: pillar Jinja may call any `salt[...]` function
//! or read any file, so serving a cached pillar would change what minions see.
//!
//! # Deviations from Salt
//!
//! - The cache is in memory (at most [`cache::MAX_ENTRIES`] entries), never on disk:
//!   stock's PillarCache writes every compiled pillar, secrets included, to
//!   `cachedir/pillar/<id>.p` whenever `minion_data_cache` is on (the default), and with
//!   its `localfs` driver ignores `pillar_cache_ttl` (entries never expire). Here the ttl
//!   is honoured, as documented; `pillar_cache_backend` (unused by 3008.3) is ignored.
//! - A hung compilation is stopped after `halite_pillar_timeout`; stock's worker would
//!   hang for ever. A request that waited longer than [`pool::MAX_QUEUE_WAIT`] for a
//!   worker is answered with an error instead of being compiled for a minion that gave up
//!   (and sends it again).
//! - The minion data cache (`grains`) is kept by the master itself, not by the worker, and
//!   no `minion_data_cache_events` event is fired.
//! - The master's file server is built only for a compilation whose templates use it (see
//!   above): a fileserver backend that cannot be built makes those templates fail to
//!   render, where stock fails every compilation; its backends' `init()` runs only then.
//!
//! # Invariants
//!
//! - In a worker, nothing holding a minion's grains, options, pillar or `__context__`
//!   serves a later request: only directory listings and the code of stateless Salt
//!   modules are reused (see above).
//! - No request is answered twice or dropped: every accepted request's callback runs
//!   exactly once (with the pillar or an error), on a pool thread.
//! - A panic in a callback is caught and logged; the slot goes on.
//! - Nothing a worker sends can panic the master or make it allocate more than
//!   [`pool::MAX_REPLY`] bytes for one frame.

pub mod cache;
pub mod options;
pub mod pool;

use cache::Cache;
use halite_config::MasterConfig;
use halite_proto::value;
use halite_proto::Value;
use options::Options;
use pool::{Job, Pool, Request, Spec};
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use pool::{error_pillar, PoolStats};

/// The worker script (after [`halite_pyworker::FRAMING_PY`]).
pub const PILLAR_PY: &str = include_str!("pillar.py");

/// While pillar is not configured, how often a request looks again.
pub const RECHECK: Duration = Duration::from_secs(1);

/// What can go wrong setting up pillar.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A pillar option is unusable.
    #[error("option {option}: {message}")]
    Config {
        /// The option.
        option: &'static str,
        /// Why.
        message: String,
    },
    /// A pool thread could not be started.
    #[error("cannot start a pillar thread: {0}")]
    Thread(String),
}

/// The answer to a `_pillar` request.
pub enum Answer {
    /// Known now: send it.
    Ready(Value),
    /// A worker compiles it: hand [`Pending::then`] the reply.
    Pending(Pending),
}

/// A request waiting for its reply callback.
pub struct Pending {
    pool: Arc<Pool>,
    request: Request,
}

impl Pending {
    /// Queues the request; `reply` runs once, on a pool thread, with the pillar (or
    /// Salt's error shape). A full queue runs it at once, on this thread, with an error.
    pub fn then(self, reply: impl FnOnce(Value) + Send + 'static) {
        self.pool.submit(Job {
            request: self.request,
            queued: Instant::now(),
            reply: Box::new(reply),
        });
    }
}

/// The master's pillar service.
pub struct Pillars {
    opts: Options,
    spec: Spec,
    cache: Arc<Cache>,
    state: Mutex<State>,
}

enum State {
    /// Not configured when last looked at.
    Idle(Instant),
    Running(Arc<Pool>),
}

impl Pillars {
    /// The pillar service of a master: reads the options and, when pillar is configured,
    /// starts the workers (in the background: this never waits for Python).
    pub fn from_master(cfg: &MasterConfig) -> Result<Pillars, Error> {
        let opts = Options::from_master(cfg)?;
        let spec = Spec {
            python: opts.python.clone(),
            script: format!("{}\n{PILLAR_PY}", halite_pyworker::FRAMING_PY),
            args: vec![
                opts.conf_file.clone().into_os_string(),
                OsString::from(&opts.log_level),
            ],
            workers: opts.workers,
            timeout: opts.timeout,
        };
        Pillars::with_spec(opts, spec)
    }

    fn with_spec(opts: Options, spec: Spec) -> Result<Pillars, Error> {
        let cache = Arc::new(Cache::new(opts.pillar_cache_ttl));
        let state = if opts.configured() {
            State::Running(Arc::new(Pool::start(spec.clone(), cache.clone())?))
        } else {
            State::Idle(Instant::now())
        };
        Ok(Pillars {
            opts,
            spec,
            cache,
            state: Mutex::new(state),
        })
    }

    /// The options in use.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// What the pool did so far (`None` while pillar is not configured).
    pub fn stats(&self) -> Option<Arc<PoolStats>> {
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            State::Running(pool) => Some(pool.stats().clone()),
            State::Idle(_) => None,
        }
    }

    /// Answers the `_pillar` load of minion `id` (whose id the caller verified): now,
    /// when no compilation is needed (a load without `id` or `grains` gets `False`, as in
    /// stock; no pillar configured gets the override alone; a cache hit without an
    /// override gets the cached pillar), or later through a worker.
    pub fn answer(&self, id: &str, load: Value) -> Answer {
        if value::get(&load, "id").is_none() || value::get(&load, "grains").is_none() {
            return Answer::Ready(Value::from(false));
        }
        let overrides = value::get(&load, "pillar_override")
            .cloned()
            .unwrap_or(Value::Nil);
        let on_demand = value::get(&load, "ext").is_some_and(value::truthy);
        let pool = match self.pool(on_demand) {
            Some(pool) => pool,
            None => match override_only(&overrides, &self.opts.merge_strategy) {
                Some(pillar) => return Answer::Ready(pillar),
                // A merge only Salt can do (`aggregate`, `list`, a non-dict override).
                None => match self.start_pool() {
                    Some(pool) => pool,
                    None => return Answer::Ready(error_pillar("the pillar workers cannot start")),
                },
            },
        };
        let mut store = None;
        if self.opts.pillar_cache {
            if let Some(key) = cache::pillar_key(
                id,
                &load,
                self.opts.pillarenv.as_deref(),
                self.opts.pillarenv_from_saltenv,
            ) {
                if value::get(&load, "clean_cache").is_some_and(value::truthy) {
                    self.cache.flush(&key);
                } else if let Some(base) = self.cache.get(&key, Instant::now()) {
                    tracing::debug!("Pillar cache hit for minion {id} ({key})");
                    if !value::truthy(&overrides) {
                        return Answer::Ready(base);
                    }
                    let request = Request::Merge {
                        id: id.to_owned(),
                        base,
                        overrides,
                    };
                    return Answer::Pending(Pending { pool, request });
                }
                store = Some(key);
            }
        }
        let request = Request::Compile {
            id: id.to_owned(),
            load,
            store,
        };
        Answer::Pending(Pending { pool, request })
    }

    /// The pool when pillar needs Python now (configured, or `on_demand`), started if it
    /// was not.
    fn pool(&self, on_demand: bool) -> Option<Arc<Pool>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &*state {
            State::Running(pool) => return Some(pool.clone()),
            State::Idle(checked) if !on_demand && checked.elapsed() < RECHECK => return None,
            State::Idle(_) => {}
        }
        if !on_demand && !self.opts.configured() {
            *state = State::Idle(Instant::now());
            return None;
        }
        tracing::info!("Pillar is configured: starting the pillar workers");
        self.start_locked(&mut state)
    }

    /// The pool, started whatever the configuration.
    fn start_pool(&self) -> Option<Arc<Pool>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let State::Running(pool) = &*state {
            return Some(pool.clone());
        }
        self.start_locked(&mut state)
    }

    fn start_locked(&self, state: &mut State) -> Option<Arc<Pool>> {
        match Pool::start(self.spec.clone(), self.cache.clone()) {
            Ok(pool) => {
                let pool = Arc::new(pool);
                *state = State::Running(pool.clone());
                Some(pool)
            }
            Err(e) => {
                tracing::error!("{e}");
                None
            }
        }
    }
}

/// The pillar when nothing is configured: stock merges the override into `{}`, which for
/// the recursive strategies is the override itself. `None` when only Salt can say (the
/// `aggregate` and `list` strategies, an override that is not a mapping).
fn override_only(overrides: &Value, strategy: &str) -> Option<Value> {
    match overrides {
        Value::Nil => Some(Value::Map(vec![])),
        Value::Map(m) if m.is_empty() => Some(Value::Map(vec![])),
        Value::Map(_) if matches!(strategy, "recurse" | "overwrite" | "none") => {
            Some(overrides.clone())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
