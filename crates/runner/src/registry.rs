//! The runner table and the run envelope: `SyncClientMixin.low` and the argument checks
//! of `Runner.run` (Salt 3008.3 `client/mixins.py`, `runner.py`).

use std::time::{SystemTime, UNIX_EPOCH};

use halite_pycall::{strip_rst, Table};
use rmpv::Value;

use crate::args::{load_args_and_kwargs, Call};
use crate::error::RunnerError;
use crate::modules;
use crate::pyval::{get, map, text, truthy};
use crate::spec::{self, FunSpec};
use crate::{RunCall, RunOutcome, RunnerHost};

/// A runner body: reads its bound arguments and works through the host.
pub(crate) type Handler = fn(&Invocation<'_>) -> Result<Value, RunnerError>;

/// How a module lists its functions: public name and body.
pub(crate) type Export = (&'static str, Handler);

/// One call of a runner, with what it may touch.
pub(crate) struct Invocation<'a> {
    /// The master.
    pub host: &'a dyn RunnerHost,
    /// The bound arguments.
    pub call: Call,
    /// The runner job's jid.
    pub jid: &'a str,
}

impl Invocation<'_> {
    /// The value of parameter `name`.
    pub fn arg(&self, name: &str) -> &Value {
        self.call.get(name)
    }

    /// `__jid_event__.fire_event({"message": message}, "progress")`.
    pub fn progress(&self, message: String) {
        self.host.fire(
            &format!("salt/run/{}/progress", self.jid),
            map([("message", Value::from(message))]),
        );
    }
}

struct Entry {
    spec: &'static FunSpec,
    handler: Handler,
}

/// The runners the master offers, by `module.function` name.
#[derive(Debug)]
pub struct Registry {
    functions: Table<Entry>,
}

impl Registry {
    /// Every runner Halite ships: the `manage`, `jobs` and `test` functions and
    /// `acl.check`, listed by [`Registry::names`].
    pub fn builtin() -> Registry {
        let mut functions = Table::default();
        for &(name, handler) in modules::exports() {
            match spec::find(name) {
                Some(spec) => {
                    functions.insert(name, Entry { spec, handler });
                }
                None => tracing::error!("No signature for runner {}; it is not offered", name),
            }
        }
        Registry { functions }
    }

    /// Every runner name (`module.function`), sorted.
    pub fn names(&self) -> Vec<String> {
        self.functions.names()
    }

    /// Whether `fun` (`module.function`) is offered.
    pub fn contains(&self, fun: &str) -> bool {
        self.functions.contains(fun)
    }

    /// The parameter names of `fun`, in order (`None` for an unknown runner).
    pub fn params(&self, fun: &str) -> Option<Vec<&'static str>> {
        self.functions
            .get(fun)
            .map(|e| e.spec.params.iter().map(|p| p.name).collect())
    }

    /// Whether `fun` takes `**kwargs`, so any keyword argument (`false` for an unknown
    /// runner): `load_args_and_kwargs` then refuses no keyword.
    pub fn takes_kwargs(&self, fun: &str) -> bool {
        self.functions.get(fun).is_some_and(|e| e.spec.kwargs)
    }

    /// `salt-run -d [prefix]` (`SyncClientMixin.get_docs` + `strip_rst`): `(name,
    /// docstring)` sorted by name, for every runner when `prefix` is `None` or empty,
    /// those matching it as a glob when it has a `*`, else `prefix` itself and the
    /// functions of module `prefix`.
    pub fn doc(&self, prefix: Option<&str>) -> Vec<(String, String)> {
        let selected = |fun: &str| match prefix {
            None | Some("") => true,
            Some(p) if p.contains('*') => halite_target::fnmatch::fnmatch(fun, p),
            Some(p) => {
                let module = if p.ends_with('.') {
                    p.to_owned()
                } else {
                    format!("{p}.")
                };
                fun == p || fun.starts_with(&module)
            }
        };
        self.functions
            .iter()
            .filter(|(name, _)| selected(name))
            .map(|(name, e)| (name.to_owned(), strip_rst(e.spec.doc)))
            .collect()
    }

    /// Runs one runner call: binds the arguments, fires `salt/run/<jid>/new`, runs,
    /// stores the run in the job cache (`runner_returns`), fires `salt/run/<jid>/ret`.
    ///
    /// Never panics; every failure becomes the return Salt would give.
    pub fn run(&self, host: &dyn RunnerHost, call: &RunCall<'_>) -> RunOutcome {
        let Some(entry) = self.functions.get(call.fun) else {
            return refuse(host, call, &RunnerError::NotAvailable(call.fun.to_owned()));
        };
        let (args, kwargs) = match load_args_and_kwargs(entry.spec, &call.arg, &call.kwarg) {
            Ok(sorted) => sorted,
            Err(err) => return refuse(host, call, &err),
        };
        let mut fun_args = args.clone();
        if !kwargs.is_empty() {
            fun_args.push(Value::Map(kwargs.clone()));
        }
        let fun = format!("runner.{}", call.fun);
        let mut data = vec![
            (Value::from("fun"), Value::from(fun.as_str())),
            (Value::from("jid"), Value::from(call.jid)),
            (Value::from("user"), Value::from(call.user)),
            (Value::from("fun_args"), Value::Array(fun_args)),
        ];
        host.fire(
            &format!("salt/run/{}/new", call.jid),
            Value::Map(data.clone()),
        );

        let result = entry
            .spec
            .bind(args, kwargs)
            .map_err(RunnerError::from)
            .and_then(|bound| {
                let inv = Invocation {
                    host,
                    call: bound,
                    jid: call.jid,
                };
                (entry.handler)(&inv)
            });
        let (ret, success, retcode) = match result {
            Ok(ret) => {
                let success = match get(&ret, "data") {
                    Some(inner) if matches!(ret, Value::Map(_)) => check_result(inner, false),
                    _ => true,
                };
                (ret, success, None)
            }
            Err(RunnerError::TypeError(msg)) => (
                Value::from(format!(
                    "\nPassed invalid arguments: {msg}\n\nUsage:\n{}",
                    entry.spec.doc
                )),
                false,
                None,
            ),
            Err(err) => (
                Value::from(format!(
                    "Exception occurred in runner {}: {}",
                    call.fun,
                    traceback(entry.spec.pyname, &err)
                )),
                false,
                Some(1),
            ),
        };
        data.push((Value::from("return"), ret.clone()));
        data.push((Value::from("success"), Value::Boolean(success)));
        if let Some(code) = retcode {
            data.push((Value::from("retcode"), Value::from(code)));
        }
        let data = Value::Map(data);
        store_job(host, call, &fun, &data);
        host.fire(&format!("salt/run/{}/ret", call.jid), data);
        RunOutcome {
            outputter: outputter_of(&ret),
            ret,
            success,
            retcode,
        }
    }
}

/// `Runner.run`'s answer when the function is missing or a keyword is invalid: only the
/// `ret` event, with `salt-run`'s fields and retcode 254, and the message as the return.
fn refuse(host: &dyn RunnerHost, call: &RunCall<'_>, err: &RunnerError) -> RunOutcome {
    const RETCODE: i64 = 254;
    let message = Value::from(err.to_string());
    let mut fun_args = call.arg.clone();
    if !call.kwarg.is_empty() {
        fun_args.push(Value::Map(
            call.kwarg
                .iter()
                .map(|(k, v)| (Value::from(k.as_str()), v.clone()))
                .collect(),
        ));
    }
    host.fire(
        &format!("salt/run/{}/ret", call.jid),
        map([
            ("success", Value::Boolean(false)),
            ("return", message.clone()),
            ("retcode", Value::from(RETCODE)),
            ("fun", Value::from(call.fun)),
            ("fun_args", Value::Array(fun_args)),
            ("jid", Value::from(call.jid)),
        ]),
    );
    RunOutcome {
        ret: message,
        success: false,
        retcode: Some(RETCODE),
        outputter: None,
    }
}

/// The outputter a return names: `X` of a return that is exactly `{"outputter": X,
/// "data": D}` (what `salt-run` checks before printing).
fn outputter_of(ret: &Value) -> Option<String> {
    match ret {
        Value::Map(entries) if entries.len() == 2 && get(ret, "data").is_some() => {
            get(ret, "outputter").and_then(text).map(|o| o.into_owned())
        }
        _ => None,
    }
}

/// A Python-style traceback for `err` raised by the runner `pyname`.
fn traceback(pyname: &str, err: &RunnerError) -> String {
    let last = match err {
        RunnerError::NotAvailable(_) => {
            format!("salt.exceptions.CommandExecutionError: {err}")
        }
        RunnerError::InvalidKwargs(_) => format!("salt.exceptions.SaltInvocationError: {err}"),
        RunnerError::TypeError(msg) => format!("TypeError: {msg}"),
        RunnerError::Exception { kind, message } if message.is_empty() => (*kind).to_owned(),
        RunnerError::Exception { kind, message } => format!("{kind}: {message}"),
    };
    format!("Traceback (most recent call last):\n  File \"halite-runner\", in {pyname}\n{last}\n")
}

/// `salt.utils.state.check_result(running)` without a highstate: whether a state-shaped
/// return reports no failure. Salt uses it for the `success` of a runner returning a
/// dict with `data`.
fn check_result(running: &Value, recurse: bool) -> bool {
    let Value::Map(entries) = running else {
        return false;
    };
    if entries.is_empty() {
        return false;
    }
    entries.iter().all(|(state_id, state_result)| {
        let extend = text(state_id).as_deref() == Some("__extend__");
        let typed = match state_result {
            Value::Map(_) => !extend,
            Value::Array(_) => extend,
            _ => false,
        };
        if !recurse && !typed {
            return false;
        }
        match (state_result, get(state_result, "result")) {
            (Value::Map(_), Some(Value::Boolean(false))) => false,
            (Value::Map(_), None) => check_result(state_result, true),
            _ => true,
        }
    })
}

/// `salt.utils.job.store_job` for a runner run: with `runner_returns` on, the job cache
/// on and no `ext_job_cache`, the run is saved as a job of the master (`id` and `tgt` the
/// master's id, `fun` `runner.<f>`) whose one return is the whole event data, so
/// `jobs.list_jobs` and `jobs.lookup_jid` show runner runs as in Salt.
fn store_job(host: &dyn RunnerHost, call: &RunCall<'_>, fun: &str, data: &Value) {
    let opts = host.opts();
    let enabled = opts.get("runner_returns").is_none_or(truthy)
        && opts.job_cache
        && !opts.get("ext_job_cache").is_some_and(truthy);
    if !enabled {
        return;
    }
    let load = map([
        ("id", Value::from(opts.id.as_str())),
        ("tgt", Value::from(opts.id.as_str())),
        ("jid", Value::from(call.jid)),
        ("return", data.clone()),
        ("fun", Value::from(fun)),
        ("user", Value::from(call.user)),
    ]);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let store = host.jobs();
    let stored = store
        .get_load(call.jid)
        .and_then(|job| match job {
            Some(_) => Ok(()),
            None => store.save_load(call.jid, &load, &[], now),
        })
        .and_then(|()| store.add_return(call.jid, &opts.id, &load, now));
    if let Err(err) = stored {
        tracing::error!(
            "Could not store job cache info. Job details for this run may be unavailable. ({})",
            err
        );
    }
}
