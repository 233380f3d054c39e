//! The function table and the job envelope: `Minion._thread_return` /
//! `_thread_multi_return` / `_execute_job_function` of Salt 3008.3, and the hook for
//! functions it lacks ([`Fallback`]).

use std::cell::Cell;
use std::sync::Arc;

use halite_pycall::Table;
use rmpv::Value;

use crate::args::{load_args_and_kwargs, Call, Kwargs};
use crate::error::ExecError;
use crate::modules;
use crate::pyval::{py_eq, py_str, text, truthy};
use crate::spec::{self, FunSpec};
use crate::{Context, JobReturn, MultiStatus};

/// A function body. It reads its bound arguments from the invocation and may set the
/// job's return code (Salt's `__context__["retcode"]`).
pub(crate) type Handler = fn(&mut Invocation<'_>) -> Result<Value, ExecError>;

/// How a module lists its functions: public name, body, and the `__outputter__` Salt
/// declares for it.
pub(crate) type Export = (&'static str, Handler, Option<&'static str>);

/// One call of a function, with what it may touch.
pub(crate) struct Invocation<'a> {
    /// The job's context.
    pub ctx: &'a Context,
    /// The registry, for `sys.*` and cross-module calls.
    pub registry: &'a Registry,
    /// The bound arguments.
    pub call: Call,
    /// `__context__["retcode"]`, shared with nested calls as Salt's loader shares it.
    pub retcode: &'a Cell<i64>,
}

impl Invocation<'_> {
    /// The value of parameter `name`.
    pub fn arg(&self, name: &str) -> &Value {
        self.call.get(name)
    }

    /// Sets `__context__["retcode"]` from a Python value (see [`coerce_retcode`]).
    pub fn set_retcode(&self, code: &Value) {
        self.retcode.set(coerce_retcode(code));
    }

    /// Calls another function as `__salt__[name](*args, **kwargs)` does: no
    /// `load_args_and_kwargs`, no `__pub_*`, the same `__context__`.
    pub fn call_function(
        &self,
        name: &str,
        args: Vec<Value>,
        kwargs: Kwargs,
    ) -> Result<Value, ExecError> {
        let Some(entry) = self.registry.functions.get(name) else {
            return Err(ExecError::exception(
                "KeyError",
                crate::pyval::repr_str(name),
            ));
        };
        let call = entry.spec.bind(args, kwargs)?;
        let mut inner = Invocation {
            ctx: self.ctx,
            registry: self.registry,
            call,
            retcode: self.retcode,
        };
        (entry.handler)(&mut inner)
    }
}

/// A Python return code as the job return carries it: ints as they are, booleans as
/// 0/1, floats truncated, numeric strings parsed. Salt would send any other value as it
/// is (and count the job failed); Halite sends 1.
pub(crate) fn coerce_retcode(code: &Value) -> i64 {
    match code {
        Value::Integer(i) => i.as_i64().unwrap_or(i64::MAX),
        Value::Boolean(b) => i64::from(*b),
        Value::F32(f) if f.is_finite() => *f as i64,
        Value::F64(f) if f.is_finite() => *f as i64,
        Value::String(_) => py_str(code).trim().parse().unwrap_or(1),
        _ => 1,
    }
}

struct Entry {
    spec: &'static FunSpec,
    handler: Handler,
    outputter: Option<&'static str>,
}

/// Where functions the native registry lacks run: the minion's fallback executor
/// (`halite-fallback`: Salt's own loader on the host's installed Salt, in a worker
/// process). The registry consults it only for names it does not know itself, so native
/// functions always win; it never manages processes itself.
pub trait Fallback: Send + Sync {
    /// Runs `fun` for the job of `ctx` with the publish `arg` list, and returns what
    /// Salt's `_thread_return` builds: the function's return, retcode, success and
    /// outputter; Salt's missing-function text when Salt lacks `fun` too; a one-line
    /// "not available" text saying why when there is no Salt to run it in. Never panics.
    fn run(&self, ctx: &Context, fun: &str, arg: &Value) -> JobReturn;

    /// Every function it offers, sorted (empty when it has no Salt to ask).
    fn functions(&self) -> Vec<String>;
}

/// The execution modules a minion offers, by `module.function` name.
pub struct Registry {
    functions: Table<Entry>,
    fallback: Option<Arc<dyn Fallback>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("functions", &self.functions)
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

/// What one function call produced, before it is put in a [`JobReturn`].
enum Outcome {
    /// The function returned; `retcode` is already Salt's job retcode.
    Returned {
        ret: Value,
        retcode: i64,
        out: Option<&'static str>,
    },
    /// The function is missing; `ret` is the missing-function text (or docs).
    Missing(Value),
    /// The function is not native and the [`Fallback`] ran it.
    Elsewhere(JobReturn),
    /// The call failed.
    Failed(ExecError),
}

impl Registry {
    /// Every module Halite ships: `test`, `cmd`, `event`, `grains`, `publish`, `sys`,
    /// `saltutil`, `status`.
    pub fn builtin() -> Registry {
        let mut functions = Table::default();
        for &(name, handler, outputter) in modules::exports() {
            match spec::find(name) {
                Some(spec) => {
                    functions.insert(
                        name,
                        Entry {
                            spec,
                            handler,
                            outputter,
                        },
                    );
                }
                None => tracing::error!("No signature for {}; it is not offered", name),
            }
        }
        Registry {
            functions,
            fallback: None,
        }
    }

    /// This registry with `fallback` running the functions it lacks.
    pub fn with_fallback(mut self, fallback: Arc<dyn Fallback>) -> Registry {
        self.fallback = Some(fallback);
        self
    }

    /// The functions the [`Fallback`] offers (none without one), sorted.
    pub(crate) fn fallback_names(&self) -> Vec<String> {
        self.fallback
            .as_ref()
            .map(|f| f.functions())
            .unwrap_or_default()
    }

    /// Whether a [`Fallback`] runs what this registry lacks.
    pub fn has_fallback(&self) -> bool {
        self.fallback.is_some()
    }

    /// Whether `fun` (`module.function`) is offered natively.
    pub fn has(&self, fun: &str) -> bool {
        self.functions.contains(fun)
    }

    /// Every native function name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.functions.names()
    }

    /// The raw docstring of `fun`.
    pub(crate) fn doc(&self, fun: &str) -> Option<&'static str> {
        self.functions.get(fun).and_then(|e| e.spec.doc)
    }

    /// The spec of every function, sorted by name.
    pub(crate) fn specs(&self) -> impl Iterator<Item = &'static FunSpec> + '_ {
        self.functions.iter().map(|(_, e)| e.spec)
    }

    /// Runs a job: `fun` is a function name, or a list of names for a multi-function
    /// job (then `arg` is a list of argument lists and the return is keyed by name);
    /// `arg` is the publish `arg` list.
    ///
    /// Never panics; every failure becomes the return Salt would send.
    pub fn execute(&self, ctx: &Context, fun: &Value, arg: &Value) -> JobReturn {
        match fun {
            Value::Array(funs) => self.execute_multi(ctx, funs, arg),
            _ => {
                let name = py_str(fun);
                let outcome = self.run_one(ctx, &name, arg);
                self.single_return(ctx, &name, outcome)
            }
        }
    }

    fn single_return(&self, ctx: &Context, name: &str, outcome: Outcome) -> JobReturn {
        let outcome = match (outcome, ctx.job.cancel_signal()) {
            (Outcome::Missing(ret), _) => Outcome::Missing(ret),
            (_, Some(sig)) => Outcome::Failed(ExecError::Cancelled(sig)),
            (outcome, None) => outcome,
        };
        match outcome {
            Outcome::Returned { ret, retcode, out } => JobReturn {
                ret,
                retcode,
                success: retcode == 0,
                out: out.map(str::to_owned),
                multi: None,
            },
            Outcome::Missing(ret) => failed_return(ret),
            Outcome::Elsewhere(ret) => ret,
            Outcome::Failed(err) => failed_return(Value::from(self.error_text(name, &err))),
        }
    }

    /// The return text `_thread_return` builds for an exception.
    fn error_text(&self, name: &str, err: &ExecError) -> String {
        match err {
            ExecError::TypeError(msg) => format!(
                "Passed invalid arguments to {name}: {msg}\n{}",
                self.doc(name).unwrap_or("")
            ),
            ExecError::CommandExecution(msg) => format!("ERROR: {msg}"),
            ExecError::SaltInvocation(msg) => format!("ERROR executing '{name}': {msg}"),
            ExecError::Exception { .. } => format!(
                "The minion function caused an exception: {}",
                traceback(name, err)
            ),
            ExecError::Cancelled(sig) => format!("The job was cancelled by signal {sig}"),
        }
    }

    /// `_thread_return` up to the retcode: look the function up, bind, run; a function
    /// that is not native goes to the [`Fallback`] when there is one.
    fn run_one(&self, ctx: &Context, name: &str, arg: &Value) -> Outcome {
        let Some(entry) = self.functions.get(name) else {
            return match &self.fallback {
                Some(fallback) => Outcome::Elsewhere(fallback.run(ctx, name, arg)),
                None => Outcome::Missing(self.missing(name)),
            };
        };
        let retcode = Cell::new(0);
        let result = self.invoke(ctx, name, entry, arg, &retcode);
        match result {
            Ok(ret) => {
                let retcode = job_retcode(retcode.get(), &ret);
                Outcome::Returned {
                    ret,
                    retcode,
                    out: entry.outputter,
                }
            }
            Err(err) => Outcome::Failed(err),
        }
    }

    /// `_execute_job_function`: blackout check, argument loading, the call.
    fn invoke(
        &self,
        ctx: &Context,
        name: &str,
        entry: &Entry,
        arg: &Value,
        retcode: &Cell<i64>,
    ) -> Result<Value, ExecError> {
        check_blackout(ctx, name)?;
        let args = match arg {
            Value::Array(items) => items.as_slice(),
            other => {
                return Err(ExecError::TypeError(format!(
                    "'{}' object is not iterable",
                    crate::pyval::py_type_name(other)
                )))
            }
        };
        let (args, kwargs) = load_args_and_kwargs(entry.spec, args, ctx.pub_data.as_ref())?;
        retcode.set(0);
        let call = entry.spec.bind(args, kwargs)?;
        let mut inv = Invocation {
            ctx,
            registry: self,
            call,
            retcode,
        };
        (entry.handler)(&mut inv)
    }

    /// The return for a function that does not exist: the `sys.doc` of `name*` plus the
    /// missing text when something matches, else just the text.
    fn missing(&self, name: &str) -> Value {
        let docs = modules::sys::docs_for(self, &[format!("{name}*")]);
        let missing = Value::from(format!("'{name}' is not available."));
        match docs {
            Value::Map(mut entries) if !entries.is_empty() => {
                crate::args::dict_set(&mut entries, Value::from(name), missing);
                Value::Map(entries)
            }
            _ => missing,
        }
    }

    /// `_thread_multi_return`: every function in turn; errors become tracebacks. A
    /// function that is not native runs on the [`Fallback`], and its return and retcode
    /// are taken as they come (an exception there is its text with retcode 1, where Salt
    /// puts a traceback and no retcode).
    fn execute_multi(&self, ctx: &Context, funs: &[Value], arg: &Value) -> JobReturn {
        let ordered = ctx.opts.get("multifunc_ordered").is_some_and(truthy);
        let mut rets = Vec::with_capacity(funs.len());
        let mut codes = Vec::with_capacity(funs.len());
        for (ind, fun) in funs.iter().enumerate() {
            let name = py_str(fun);
            let fun_args = match arg {
                Value::Array(lists) => lists.get(ind).cloned(),
                _ => None,
            };
            let result = match (fun_args, self.functions.get(name.as_str())) {
                (None, _) => Err(ExecError::exception(
                    "IndexError",
                    "list index out of range",
                )),
                (Some(fun_args), None) => match &self.fallback {
                    Some(fallback) => {
                        let done = fallback.run(ctx, &name, &fun_args);
                        Ok((done.retcode, done.ret))
                    }
                    None => Err(ExecError::TypeError(
                        "'str' object is not callable".to_owned(),
                    )),
                },
                (Some(fun_args), Some(entry)) => {
                    let retcode = Cell::new(0);
                    self.invoke(ctx, &name, entry, &fun_args, &retcode)
                        .map(|ret| (job_retcode(retcode.get(), &ret), ret))
                }
            };
            let result = match (result, ctx.job.cancel_signal()) {
                (_, Some(sig)) => Err(ExecError::Cancelled(sig)),
                (result, None) => result,
            };
            match result {
                Ok((code, ret)) => {
                    rets.push((fun.clone(), ret));
                    codes.push((fun.clone(), Some(code)));
                }
                Err(err) => {
                    rets.push((fun.clone(), Value::from(traceback(&name, &err))));
                    codes.push((fun.clone(), None));
                }
            }
        }
        let retcode = codes
            .iter()
            .find_map(|(_, c)| match c {
                Some(0) => None,
                Some(c) => Some(*c),
                None => Some(1),
            })
            .unwrap_or(0);
        let (ret, retcodes, successes) = if ordered {
            (
                Value::Array(rets.into_iter().map(|(_, r)| r).collect()),
                Value::Array(
                    codes
                        .iter()
                        .map(|(_, c)| c.map_or(Value::Nil, Value::from))
                        .collect(),
                ),
                Value::Array(
                    codes
                        .iter()
                        .map(|(_, c)| Value::Boolean(*c == Some(0)))
                        .collect(),
                ),
            )
        } else {
            let mut ret = Vec::new();
            let mut retcodes = Vec::new();
            let mut successes = Vec::new();
            for ((fun, r), (_, c)) in rets.into_iter().zip(&codes) {
                crate::args::dict_set(&mut successes, fun.clone(), Value::Boolean(*c == Some(0)));
                crate::args::dict_set(&mut ret, fun.clone(), r);
                if let Some(c) = c {
                    crate::args::dict_set(&mut retcodes, fun, Value::from(*c));
                }
            }
            (Value::Map(ret), Value::Map(retcodes), Value::Map(successes))
        };
        JobReturn {
            ret,
            retcode,
            success: retcode == 0,
            out: None,
            multi: Some(MultiStatus {
                retcode: retcodes,
                success: successes,
            }),
        }
    }
}

/// A failed single-function return: retcode 1, the `nested` outputter.
fn failed_return(ret: Value) -> JobReturn {
    JobReturn {
        ret,
        retcode: 1,
        success: false,
        out: Some("nested".to_owned()),
        multi: None,
    }
}

/// The retcode rule: `__context__["retcode"]` if non-zero, else 1 when the return is a
/// dict whose `result` or `success` is falsy, else 0.
pub(crate) fn job_retcode(context_retcode: i64, ret: &Value) -> i64 {
    if context_retcode != 0 {
        return context_retcode;
    }
    let failed = match ret {
        Value::Map(entries) => entries
            .iter()
            .any(|(k, v)| matches!(text(k).as_deref(), Some("result" | "success")) && !truthy(v)),
        _ => false,
    };
    i64::from(failed)
}

/// A Python-style traceback for `err` raised by `fun`.
fn traceback(fun: &str, err: &ExecError) -> String {
    format!(
        "Traceback (most recent call last):\n  File \"halite-exec\", in {fun}\n{}\n",
        err.traceback_line()
    )
}

/// Salt's blackout mode: with `minion_blackout` set in pillar (when connected to a
/// master) or grains, only `saltutil.refresh_pillar` and the whitelisted functions run.
fn check_blackout(ctx: &Context, name: &str) -> Result<(), ExecError> {
    let flag = |data: &Value| halite_proto::value::get(data, "minion_blackout").is_some_and(truthy);
    let whitelisted =
        |data: &Value| match halite_proto::value::get(data, "minion_blackout_whitelist") {
            Some(Value::Array(items)) => items.iter().any(|i| py_eq(i, &Value::from(name))),
            _ => false,
        };
    let pillar = ctx.jid.is_some() && flag(&ctx.pillar) && !whitelisted(&ctx.pillar);
    let grains = flag(&ctx.grains) && !whitelisted(&ctx.grains);
    if name != "saltutil.refresh_pillar" && (pillar || grains) {
        return Err(ExecError::SaltInvocation(
            "Minion in blackout mode. Set 'minion_blackout' to False in pillar or grains to \
             resume operations. Only saltutil.refresh_pillar allowed in blackout mode."
                .to_owned(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JobHandle, NoJobs};
    use std::sync::Mutex;

    /// A fallback that records its calls and answers `retcode` 2 with the `highstate`
    /// outputter (what `state.apply` with a failed state gives).
    #[derive(Default)]
    struct Recording {
        calls: Mutex<Vec<(String, Value)>>,
    }

    impl Fallback for Recording {
        fn run(&self, _: &Context, fun: &str, arg: &Value) -> JobReturn {
            self.calls
                .lock()
                .unwrap()
                .push((fun.to_owned(), arg.clone()));
            JobReturn {
                ret: Value::from(format!("{fun} from the fallback")),
                retcode: 2,
                success: false,
                out: Some("highstate".to_owned()),
                multi: None,
            }
        }

        fn functions(&self) -> Vec<String> {
            vec!["state.apply".to_owned()]
        }
    }

    fn context(dir: &std::path::Path) -> Context {
        let opts = halite_config::MinionConfig::from_yaml_str(
            &format!("id: t\nroot_dir: {}\n", dir.display()),
            &dir.join("minion"),
        )
        .expect("config");
        Context {
            id: "t".to_owned(),
            opts: Arc::new(opts),
            grains: Arc::new(Value::Map(Vec::new())),
            pillar: Arc::new(Value::Map(Vec::new())),
            jid: Some("20260101000000000001".to_owned()),
            pub_data: None,
            jobs: Arc::new(NoJobs),
            job: JobHandle::new(),
            master: None,
        }
    }

    #[test]
    fn a_function_the_registry_lacks_runs_on_the_fallback_and_its_return_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let fallback = Arc::new(Recording::default());
        let registry = Registry::builtin().with_fallback(fallback.clone());
        let arg = Value::Array(vec![Value::from("web"), Value::from("test=True")]);
        let ret = registry.execute(&ctx, &Value::from("state.apply"), &arg);
        assert_eq!(
            ret,
            JobReturn {
                ret: Value::from("state.apply from the fallback"),
                retcode: 2,
                success: false,
                out: Some("highstate".to_owned()),
                multi: None,
            }
        );
        // A native function never reaches it.
        let ping = registry.execute(&ctx, &Value::from("test.ping"), &Value::Array(vec![]));
        assert_eq!(ping.ret, Value::Boolean(true));
        assert_eq!(
            *fallback.calls.lock().unwrap(),
            [("state.apply".to_owned(), arg)]
        );
    }

    #[test]
    fn a_multi_function_job_runs_the_functions_it_lacks_on_the_fallback() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let fallback = Arc::new(Recording::default());
        let registry = Registry::builtin().with_fallback(fallback.clone());
        let funs = Value::Array(vec![Value::from("test.ping"), Value::from("pkg.version")]);
        let args = Value::Array(vec![
            Value::Array(vec![]),
            Value::Array(vec![Value::from("bash")]),
        ]);
        let ret = registry.execute(&ctx, &funs, &args);
        assert_eq!(
            ret.ret,
            Value::Map(vec![
                (Value::from("test.ping"), Value::Boolean(true)),
                (
                    Value::from("pkg.version"),
                    Value::from("pkg.version from the fallback")
                ),
            ])
        );
        assert_eq!(ret.retcode, 2);
        assert_eq!(
            ret.multi.map(|m| m.retcode),
            Some(Value::Map(vec![
                (Value::from("test.ping"), Value::from(0)),
                (Value::from("pkg.version"), Value::from(2)),
            ]))
        );
        assert_eq!(fallback.calls.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_cancelled_fallback_job_reports_the_signal() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        ctx.job.cancel(9);
        let registry = Registry::builtin().with_fallback(Arc::new(Recording::default()));
        let ret = registry.execute(&ctx, &Value::from("state.apply"), &Value::Array(vec![]));
        assert_eq!(ret.ret, Value::from("The job was cancelled by signal 9"));
        assert_eq!(ret.retcode, 1);
    }
}
