//! Execution modules: the functions a minion runs for a job (`test.*`, `cmd.*`,
//! `event.*`, `grains.*`, `publish.*`, `sys.*`, `saltutil.*`, `status.*`), bound and reported
//! as Salt 3008.3's minion does it.
//!
//! # What it does
//!
//! * [`Registry::execute`] is `Minion._thread_return` (and `_thread_multi_return` for a
//!   list of functions) minus the transport: it looks the function up, sorts the publish
//!   `arg` list into positional and keyword arguments with Salt's
//!   `load_args_and_kwargs` (`k=v` strings, the trailing `__kwarg__` map, `__pub_*`
//!   fields), binds them with Python's rules and error texts, runs the function, and
//!   builds the [`JobReturn`]: `retcode` from the function's `__context__["retcode"]`,
//!   else 1 when a dict return has a falsy `result`/`success`; `success = retcode == 0`;
//!   Salt's texts for a missing function, bad arguments (`Passed invalid arguments to
//!   ...` with the docstring), `CommandExecutionError` (`ERROR: ...`),
//!   `SaltInvocationError` (`ERROR executing '...': ...`) and any other exception.
//! * Signatures and docstrings come from the stock sources (`tools/gen_specs.py`
//!   generates `specs.rs`), so argument names, defaults, `sys.doc` and `sys.argspec`
//!   are Salt's. The binding itself, the Python value helpers it needs and the
//!   docstring cleaning are `halite-pycall`'s, shared with the runners.
//! * [`core_grains`] computes the core grains on Linux as `salt/grains/core.py` does,
//!   with the static `grains` option merged over them.
//!
//! # What it does not do
//!
//! * No transport, job threads, proc files or returners: the minion daemon runs
//!   [`Registry::execute`] on a thread per job, keeps the job table behind
//!   [`JobTable`] and sends the return. `event.*` write to the running minion's bus
//!   socket; they and `publish.*` reach the master only through the [`MasterChannel`]
//!   the caller lends ([`Context::master`]).
//! * Only the functions listed by [`Registry::names`]; modules Salt loads that Halite
//!   lacks (`state`, `pkg`, `file`, ...) are missing functions, unless the caller attaches
//!   a [`Fallback`] ([`Registry::with_fallback`]; the minion's runs them in Salt's own
//!   loader). The registry only asks it; it starts no process itself.
//! * No Jinja templating (`cmd.run template=jinja` is refused), no `use_vt`, no
//!   Windows.
//!
//! # Deviations from Salt
//!
//! Each is also documented where it is implemented.
//!
//! * A `__context__["retcode"]` that is not an integer (`test.retcode code=abc`) is sent
//!   as an integer (numeric strings parsed, anything else 1); Salt sends the value.
//! * Tracebacks have one frame (`File "halite-exec", in <fun>`) before Salt's exception
//!   line.
//! * A multi-function job whose argument list is too short reports an `IndexError`
//!   for the function; Salt's job thread dies without a return.
//! * `test.collatz` with a start below 1 fails instead of looping until memory runs out;
//!   `test.fib` past 2^64 fails with `OverflowError` (Salt computes a number msgpack
//!   cannot carry); `test.try` with `return_try_exception` returns the error text.
//! * A cancelled job returns `The job was cancelled by signal N` (retcode 1); Salt's
//!   killed job process returns nothing.
//! * `cmd.*`: see the `cmd` module (`runas` environment, process groups, no templates).
//! * Grains: see [`core_grains`] (interfaces from `getifaddrs`, no Python grains).
//! * `publish.*`: see the `publish` module (`via_master` against the one master, a
//!   `pub_ret` the master may hold: Halite's `wait` field).
//!
//! # Invariants
//!
//! * No argument value makes a function panic; every failure is an [`ExecError`]
//!   turned into Salt's return text.
//! * Long functions (`test.sleep`, `cmd.*`) poll [`JobHandle::is_cancelled`] and
//!   register their child processes, so `saltutil.kill_job` / `term_job` stop them.
//!   A cancelled job's return says so and should be dropped by the caller, as Salt's
//!   killed job process sends nothing.
//! * `unsafe` code is confined to `os.rs` (libc calls for host facts and user
//!   switching) and the process-group signal in `job.rs`.

mod args;
mod error;
mod grains;
mod job;
mod modules;
mod os;
mod pyval;
mod registry;
mod spec;
#[rustfmt::skip]
mod specs;
#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use error::ExecError;
pub use grains::core_grains;
pub use job::{JobHandle, JobTable, NoJobs};
pub use registry::{Fallback, Registry};
pub use rmpv::Value;

/// The Salt version Halite reports (`test.version`, the `saltversion` grain).
pub const SALT_VERSION: &str = "3008.3";

/// The publish data `salt-call` hands its function: `{fun, pid, jid, tgt:
/// "salt-call"}`. A local caller passing it as [`Context::pub_data`] gets `salt-call`'s
/// `__pub_*` keyword arguments and, since `__pub_jid` is set, its `python_shell`
/// default for `cmd.*` (on).
pub fn salt_call_pub_data(fun: &str, jid: &str) -> Value {
    Value::Map(vec![
        (Value::from("fun"), Value::from(fun)),
        (Value::from("pid"), Value::from(std::process::id())),
        (Value::from("jid"), Value::from(jid)),
        (Value::from("tgt"), Value::from("salt-call")),
    ])
}

/// Everything a function may read about the job and the minion.
#[derive(Clone)]
pub struct Context {
    /// The minion id.
    pub id: String,
    /// The minion configuration (Salt's `__opts__`).
    pub opts: Arc<halite_config::MinionConfig>,
    /// The grains (a map; Salt's `__grains__`).
    pub grains: Arc<Value>,
    /// The pillar (a map; Salt's `__pillar__`).
    pub pillar: Arc<Value>,
    /// The job id; `None` for `halite-call --local`.
    pub jid: Option<String>,
    /// The publish load the job came from: the source of the `__pub_*` keyword
    /// arguments, one per field. `None` locally. (`salt-call` passes `{fun, pid, jid,
    /// tgt: "salt-call"}`; a caller wanting its behaviour passes that.)
    pub pub_data: Option<Value>,
    /// The minion's live jobs.
    pub jobs: Arc<dyn JobTable>,
    /// This job's cancellation handle.
    pub job: Arc<JobHandle>,
    /// A request channel to the master, for what Salt sends there directly
    /// (`event.fire_master` from `salt-call` or with `preload`); `None` for
    /// `halite-call --local`.
    pub master: Option<Arc<dyn MasterChannel>>,
}

/// An encrypted request channel to the master (Salt's `ReqChannel`), lent to functions by
/// the minion daemon and `halite-call`.
pub trait MasterChannel: Send + Sync {
    /// Sends `load` as one encrypted request and returns the master's reply, or why no
    /// usable reply came.
    fn request(&self, load: Value) -> Result<Value, String>;

    /// Sends `load` as one encrypted request on a connection of its own, so that a reply
    /// the master holds back (`pub_ret` with Halite's `wait`) or computes slowly
    /// (`minion_runner`) does not delay the other requests of the process, such as the
    /// return of the very job being waited for. Each try waits the channel's usual
    /// timeout plus `hold`, the time the master may keep the reply; `abort` is polled
    /// while waiting and abandons the request when it returns true.
    ///
    /// Fails with the exception Salt's `ReqChannel.send` raises: kind
    /// [`SALT_REQ_TIMEOUT_ERROR`] when no reply came in time.
    ///
    /// The default sends `load` with [`MasterChannel::request`]: on the shared
    /// connection, within that method's own timeout, and every failure is a
    /// `SaltClientError`.
    fn request_apart(
        &self,
        load: Value,
        hold: std::time::Duration,
        abort: &dyn Fn() -> bool,
    ) -> Result<Value, ExecError> {
        let _ = (hold, abort);
        self.request(load).map_err(|message| ExecError::Exception {
            kind: "salt.exceptions.SaltClientError",
            message,
        })
    }

    /// Sends a `_pillar` request and returns the pillar the master signed for this minion
    /// (Salt's `crypted_transfer_decode_dictentry(load, dictkey="pillar")`).
    ///
    /// Fails with the exception Salt's channel raises. The default cannot fetch a pillar
    /// and fails with a `SaltClientError` saying so.
    fn pillar(&self, load: Value) -> Result<Value, ExecError> {
        let _ = load;
        Err(ExecError::Exception {
            kind: "salt.exceptions.SaltClientError",
            message: "this channel to the master cannot fetch the pillar".to_owned(),
        })
    }

    /// The master's request URI (`tcp://<ip>:<port>`, Salt's `__opts__["master_uri"]`),
    /// when the channel knows it.
    fn master_uri(&self) -> Option<String> {
        None
    }
}

/// The exception class of a request the master did not answer in time (Salt's
/// `SaltReqTimeoutError`), as [`MasterChannel::request_apart`] reports it in
/// [`ExecError::Exception`].
pub const SALT_REQ_TIMEOUT_ERROR: &str = "salt.exceptions.SaltReqTimeoutError";

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("id", &self.id)
            .field("jid", &self.jid)
            .field("pub_data", &self.pub_data)
            .finish_non_exhaustive()
    }
}

/// What a job produced, as the minion's return load carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobReturn {
    /// `return`.
    pub ret: Value,
    /// `retcode` (for a multi-function job: the first non-zero one, or 1 if a function
    /// failed; the load carries [`JobReturn::multi`] instead).
    pub retcode: i64,
    /// `success`: `retcode == 0` (for a multi-function job: every function succeeded).
    pub success: bool,
    /// `out`: the outputter Salt names for the return (`nested` on errors), if any.
    pub out: Option<String>,
    /// For a multi-function job, Salt's per-function `retcode` and `success`.
    pub multi: Option<MultiStatus>,
}

/// The per-function status of a multi-function job.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiStatus {
    /// `{fun: retcode}` (a list with `multifunc_ordered`); a function that raised has no
    /// entry (`None` in the list), as in Salt.
    pub retcode: Value,
    /// `{fun: success}` (a list with `multifunc_ordered`).
    pub success: Value,
}

impl JobReturn {
    /// The `retcode` field of the return load.
    pub fn retcode_value(&self) -> Value {
        match &self.multi {
            Some(multi) => multi.retcode.clone(),
            None => Value::from(self.retcode),
        }
    }

    /// The `success` field of the return load.
    pub fn success_value(&self) -> Value {
        match &self.multi {
            Some(multi) => multi.success.clone(),
            None => Value::Boolean(self.success),
        }
    }
}
