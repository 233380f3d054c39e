//! Master runners: `manage.*`, `jobs.*` and `test.*` of Salt 3008.3, run as the master's
//! runner client runs them (`salt-run`, and the clear `runner` request).
//!
//! # What it does
//!
//! * [`Registry::run`] is `SyncClientMixin.low` (with the argument checks of
//!   `Runner.run`) minus the process: it looks the function up, sorts the call's
//!   arguments into positional and keyword arguments with Salt's `load_args_and_kwargs`,
//!   binds them with Python's rules and error texts, fires `salt/run/<jid>/new`, runs the
//!   function, stores the run in the job cache as Salt's `store_job` does (when
//!   `runner_returns` is on), and fires `salt/run/<jid>/ret` with Salt's fields
//!   (`fun: "runner.<f>"`, `fun_args`, `jid`, `user`, `return`, `success`, and `retcode`
//!   when the function raised).
//! * The runners: `manage.up`, `down` (with `removekeys`), `status`, the presence lists
//!   (`present`, `joined`, `alived`, `allowed`, `reaped`, `list_state` and their `not_*`
//!   forms), and `jobs.list_jobs` (with the metadata, function, target and time filters),
//!   `lookup_jid`, `list_job`, `print_job`, `active`, `last_run`, `exit_success`,
//!   `list_jobs_filter`, with Salt's return shapes and field names; `test.arg`,
//!   `raw_arg`, `metasyntactic`, `stdout_print`, `sleep` and `stream` (progress events).
//! * The CLI's wait (`LocalClient.get_cli_event_returns`: `timeout`, then
//!   `saltutil.find_job` probes with `gather_job_timeout`), on which `manage.up/down/status`
//!   and `jobs.active` are built, ends as soon as every expected minion has answered.
//! * Signatures and docstrings come from the stock sources (`tools/gen_specs.py`
//!   generates `specs.rs`), so argument names, defaults and `salt-run -d` are Salt's.
//!   The binding itself, the Python value helpers it needs and the docstring cleaning
//!   are `halite-pycall`'s, shared with the execution modules.
//!
//! # What it does not do
//!
//! * No I/O of its own: publishing, waiting for returns, the job store, the key list, the
//!   connected minions, key deletion, events and sleeping all go through the
//!   [`RunnerHost`] the master implements. The host decides what "connected" means (Salt's
//!   `connected_ids`, which is empty without `minion_data_cache`).
//! * No proc file for the running runner (`cachedir/proc/<jid>`), so no `jobs.master`;
//!   no `EndTime` (`job_cache_store_endtime`); no external job caches: the runners read
//!   the master's own store, and naming another returner (`ext_source`,
//!   `ext_job_cache`) fails as Salt fails for a returner it cannot load.
//! * A runner run is stored in the host's job store only; Salt's `local_cache` tree,
//!   which the master writes for stock tools, does not get it.
//! * Runner modules other than `manage`, `jobs` and `test` (and their other functions,
//!   such as `test.get_opts`) are missing functions.
//! * What a runner prints goes nowhere (`test.stdout_print`, `test.sleep`), as in Salt's
//!   master, whose runner processes write to `/dev/null`; stock `salt-run` without eauth
//!   runs runners in its own process and shows it.
//!
//! # Deviations from Salt
//!
//! Each is also documented where it is implemented.
//!
//! * Waits end as soon as nobody is left to wait for (see the `wait` module); Salt waits
//!   out `timeout` for `manage.up` even when every minion answered at once.
//! * `manage.down removekeys=True` deletes exactly each down minion's key; Salt passes
//!   the id to `key.delete` as a glob, so a down minion named `web*` would take every
//!   `web` key with it.
//! * A string `subset` of the presence runners is a comma-separated list of ids; Salt
//!   iterates over its characters.
//! * `jobs.last_run outputter=X` answers the last job with outputter `X`; Salt looks up a
//!   job named `"outputter"`.
//! * `jobs.list_jobs`: a multi-function job matches `search_function` when one of its
//!   functions does, a time filter with a time zone is compared in UTC, and jobs whose
//!   `Target` or jid cannot be read are skipped; in each case Salt raises and the whole
//!   call fails.
//! * Bad arguments (a Python `TypeError`) report `success: false`; Salt reports `true`.
//! * An unknown runner or an invalid keyword argument fires only the `ret` event, with
//!   `salt-run`'s fields (`fun` without the `runner.` prefix, `retcode` 254) and Salt's
//!   message as the return; `salt-run` then prints the docs of `<fun>*` instead of the
//!   message, which Halite does not.
//! * Tracebacks have one frame (`File "halite-runner", in <fun>`) before Salt's
//!   exception line.
//!
//! # Invariants
//!
//! * No argument value makes a runner panic; every failure becomes Salt's return text.
//! * A wait never outlives `timeout` plus `gather_job_timeout` for a minion that does
//!   not answer, and ends at the last answer when all answer.

mod args;
mod dates;
mod error;
mod modules;
mod pyval;
mod registry;
mod spec;
#[rustfmt::skip]
mod specs;
#[cfg(test)]
mod testhost;
#[cfg(test)]
mod tests;
mod wait;

use std::time::{Duration, Instant};

pub use registry::Registry;
pub use rmpv::Value;

/// What the runners need from the master.
pub trait RunnerHost: Send + Sync {
    /// Publishes a job as the master's own user (like a runner's `LocalClient`);
    /// answers the jid and the minions the master expects (empty when nothing matched),
    /// or why the job could not be published.
    fn publish(&self, job: &PublishJob) -> Result<Published, String>;
    /// Blocks until every one of `minions` has returned for `jid` or `deadline` passes,
    /// and answers the returns for `jid` that have arrived, from any minion (including
    /// ones that arrived before the call): (minion id, the full return load as in
    /// `salt/job/<jid>/ret/<id>`). Never waits past the deadline; a deadline already
    /// passed answers at once.
    fn wait_returns(
        &self,
        jid: &str,
        minions: &[String],
        deadline: Instant,
    ) -> Vec<(String, Value)>;
    /// The master's job store (saved loads and returns).
    fn jobs(&self) -> &dyn halite_jobcache::JobStore;
    /// Accepted minion ids, sorted.
    fn accepted_ids(&self) -> Vec<String>;
    /// Minions connected now (Salt's `connected_ids`), with their IP when known.
    fn connected(&self) -> Vec<(String, Option<String>)>;
    /// Deletes a minion's key (wheel `key.delete` of exactly this id).
    fn delete_key(&self, id: &str) -> Result<(), String>;
    /// Fires an event on the master bus.
    fn fire(&self, tag: &str, data: Value);
    /// What the master's access control decides for `user` running `fun` with `arg` on
    /// `tgt` (`acl.check`): `{user, fun, tgt, tgt_type, minions, allowed, error, reason}`.
    fn acl_check(&self, user: &str, tgt: &Value, tgt_type: &str, fun: &Value, arg: &Value)
        -> Value;
    /// The master's options (`timeout`, `gather_job_timeout`, `id`, `raw`, ...).
    fn opts(&self) -> &halite_config::MasterConfig;
    /// Blocks the runner for `duration` (a runner's `time.sleep`). The default sleeps the
    /// calling thread, which is the runner's own, as Salt's runner process does; a host
    /// may end it early (on shutdown) or keep time its own way (tests).
    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// A job a runner publishes.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishJob {
    /// `tgt`: a string, or a list for `tgt_type` `list`.
    pub tgt: Value,
    /// `tgt_type` (`glob`, `list`, ...).
    pub tgt_type: String,
    /// `fun`.
    pub fun: String,
    /// `arg`.
    pub arg: Vec<Value>,
    /// The client's `timeout` for this job, in seconds.
    pub timeout: Option<u64>,
}

/// A published job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The job id.
    pub jid: String,
    /// The minions the master expects to return.
    pub minions: Vec<String>,
}

/// One runner call.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCall<'a> {
    /// `module.function`.
    pub fun: &'a str,
    /// Arguments after `parse_input`: positional values, possibly `name=value` strings,
    /// possibly ending with a `{"__kwarg__": true, ...}` map of keyword arguments.
    pub arg: Vec<Value>,
    /// Explicit keyword arguments (the clear `runner` command's `kwarg`); they override
    /// keywords of the same name in `arg`.
    pub kwarg: Vec<(String, Value)>,
    /// Who runs it (the events' `user`).
    pub user: &'a str,
    /// The runner job's jid (the events are `salt/run/<jid>/...`).
    pub jid: &'a str,
}

/// What a runner call produced, as the `salt/run/<jid>/ret` event carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// `return`. A runner naming its outputter returns `{"outputter": X, "data": D}`, as
    /// in Salt.
    pub ret: Value,
    /// `success`.
    pub success: bool,
    /// `retcode`, present when the call failed with an exception or was refused.
    pub retcode: Option<i64>,
    /// The outputter the return names (`X` of `{"outputter": X, "data": D}`), with which
    /// `salt-run` prints `D`.
    pub outputter: Option<String>,
}
