//! The Halite minion's fallback executor: any function the native registry lacks
//! (`state.*`, `pkg.*`, `file.*`, ... about 1,200 of Salt's) runs in Salt's own loader on
//! the host's installed Salt.
//!
//! # What it does
//!
//! * [`Executor`] implements [`halite_exec::Fallback`]; the minion attaches it to its
//!   registry, which asks it only for names it does not know, so native functions always
//!   win.
//! * On first use it finds Salt's Python (`fallback_python`, else `salt-call` on the
//!   minion's `PATH`, through `halite-pyworker`) and starts one worker process
//!   ([`WORKER_PY`]): `salt.config.minion_config(<the minion's config file>)` with the
//!   minion's id, Salt's own grains (`salt.loader.grains`, so templates and `__virtual__`
//!   see exactly what a stock minion's would), `minion_mods`, executors, and the state,
//!   render and file-client modules imported once.
//! * Each job forks from that warm worker, as stock's multiprocessing minion forks its job
//!   processes, and runs with Salt's own argument handling (`load_args_and_kwargs`,
//!   `__pub_*`, `__context__`, executors, blackout) and the pillar the minion holds
//!   (`__pillar__`). Its return is built as `_thread_return` builds it: `return`,
//!   `retcode`, `success`, `out` (the function's `__outputter__`, e.g. `highstate`).
//!   Jobs run concurrently. A job's proc file (`cachedir/proc/<jid>`) carries its
//!   process's pid while it runs, so Salt's `saltutil.is_running` (`state.*`'s concurrency
//!   check) sees it.
//! * Every master request a job makes (the pillar in `state.apply`, the fileserver,
//!   `_return` and `_minion_event` loads) is handed to the minion, which sends it on its own
//!   authenticated channel ([`halite_exec::MasterChannel`]) and hands the reply back. The
//!   worker never signs in and never reads the minion's keys: Salt's request channels and
//!   `SAuth` are replaced in the worker, and the minion sets `id` and `tok` in every load
//!   it sends. Events go to the minion's local bus, as stock's job processes fire them
//!   (`fire_master` ones are forwarded by the minion).
//! * The worker exits after `fallback_idle_timeout` seconds without a job (default 300),
//!   so an idle minion is back to its native memory; the next job starts another. A
//!   worker that dies is replaced on next use; the jobs it was running get Salt's
//!   exception-shaped return. Killing a job (`saltutil.kill_job`, `term_job`, the
//!   shutdown signal) signals its process group in the worker.
//!
//! # What it does not do
//!
//! * No returners (the minion runs them natively after the return), no `sys.doc` /
//!   `sys.argspec` for Salt's functions (they list native ones), no beacons or
//!   scheduler, no proxy minions or resources.
//! * Without Salt (`fallback_python` unset and no `salt-call` on `PATH`, or an
//!   interpreter that cannot import Salt) a function Halite lacks returns a one-line text
//!   saying it is not available and why; `fallback: false` turns the executor off and
//!   Halite answers Salt's plain "'x.y' is not available.".
//!
//! # Deviations from Salt
//!
//! * Grains inside the worker are Salt's; what the minion itself reports to the master
//!   (targeting, the pillar it fetches at connect) are Halite's native core grains.
//! * A generator function's progress events are fired as `fire_master` events on the
//!   minion bus (forwarded by the minion) instead of `_minion_event` requests of the job.
//! * A return that Salt's serializer cannot encode comes back as an exception return;
//!   stock's job process fails to send anything.
//! * `multiprocessing: false` is ignored: every job runs in a process of its own.
//!
//! # Invariants
//!
//! * Nothing the worker writes panics the minion: every frame is size-limited, decoded
//!   within `halite-proto`'s budget and checked ([`protocol`]); a bad frame ends that
//!   worker and fails its jobs with the reason.
//! * Only the minion talks to the master. A worker request goes out only for a job the
//!   minion is waiting on, through that job's channel, with the minion's own id.
//! * A worker is signalled only while it is known not to be reaped, so a reused pid is
//!   never hit; a dropped worker is killed and reaped (`halite-pyworker`), and its job
//!   processes die with it (`PR_SET_PDEATHSIG`).

mod conn;
mod executor;
mod options;
mod protocol;

pub use executor::{Executor, START_TIMEOUT};
pub use options::{Options, DEFAULT_IDLE_TIMEOUT, MAX_IDLE_TIMEOUT};

/// The worker's program (Python), run after `halite_pyworker::FRAMING_PY`.
pub const WORKER_PY: &str = include_str!("worker.py");

/// Why the fallback executor could not run something.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable Salt Python, or the worker cannot be started or read.
    #[error(transparent)]
    Python(#[from] halite_pyworker::Error),
    /// The worker failed; the text says how ("the Salt fallback worker exited").
    #[error("{0}")]
    Worker(String),
    /// A thread could not be started.
    #[error("cannot start a thread: {0}")]
    Thread(String),
}
