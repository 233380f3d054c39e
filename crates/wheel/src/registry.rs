//! The wheel table and the run envelope: `SyncClientMixin.low` as the master's
//! `ClearFuncs.wheel` drives it (Salt 3008.3 `client/mixins.py`, `master.py`).

use std::time::{SystemTime, UNIX_EPOCH};

use halite_proto::value::{map, s, truthy};
use halite_pycall::{Call, Table};
use rmpv::Value;

use crate::args;
use crate::error::WheelError;
use crate::modules;
use crate::spec::{self, FunSpec};
use crate::{WheelCall, WheelHost, WheelOutcome};

/// What replaces a generated private key in the `ret` event and the job cache (the
/// caller alone gets the key, in the reply).
pub const REDACTED: &str = "<redacted: only the caller gets the private key>";

/// A wheel body: reads its bound arguments and works through the host.
pub(crate) type Handler = fn(&Invocation<'_>) -> Result<Value, WheelError>;

/// How a function is run and reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Traits {
    /// It generates RSA keys, which can take seconds.
    pub slow: bool,
    /// Its return holds a private key (`priv`), which only the caller gets.
    pub secret: bool,
}

impl Traits {
    /// Quick, nothing secret.
    pub const PLAIN: Traits = Traits {
        slow: false,
        secret: false,
    };
    /// Generates keys; nothing secret in the return.
    pub const SLOW: Traits = Traits {
        slow: true,
        secret: false,
    };
    /// Generates a key pair and returns its private half.
    pub const SECRET: Traits = Traits {
        slow: true,
        secret: true,
    };
}

/// How a module lists its functions: public name, body, traits.
pub(crate) type Export = (&'static str, Handler, Traits);

/// One call of a wheel function, with what it may touch.
pub(crate) struct Invocation<'a> {
    /// The master.
    pub host: &'a dyn WheelHost,
    /// The bound arguments.
    pub call: Call,
}

impl Invocation<'_> {
    /// The value of parameter `name`.
    pub fn arg(&self, name: &str) -> &Value {
        self.call.get(name)
    }
}

struct Entry {
    spec: &'static FunSpec,
    handler: Handler,
    traits: Traits,
}

/// The wheel functions the master offers, by `module.function` name.
#[derive(Debug)]
pub struct Registry {
    functions: Table<Entry>,
}

impl Registry {
    /// Every wheel function Halite ships, listed by [`Registry::names`].
    pub fn builtin() -> Registry {
        let mut functions = Table::default();
        for &(name, handler, traits) in modules::exports() {
            match spec::find(name) {
                Some(spec) => functions.insert(
                    name,
                    Entry {
                        spec,
                        handler,
                        traits,
                    },
                ),
                None => tracing::error!("No signature for wheel {}; it is not offered", name),
            }
        }
        Registry { functions }
    }

    /// Every function name (`module.function`), sorted.
    pub fn names(&self) -> Vec<String> {
        self.functions.names()
    }

    /// Whether `fun` (`module.function`) is offered.
    pub fn contains(&self, fun: &str) -> bool {
        self.functions.contains(fun)
    }

    /// The parameter names of `fun`, in order (`None` for an unknown function).
    pub fn params(&self, fun: &str) -> Option<Vec<&'static str>> {
        self.functions
            .get(fun)
            .map(|e| e.spec.params.iter().map(|p| p.name).collect())
    }

    /// Whether `fun` generates RSA keys (`key.gen`, `gen_accept`, `gen_keys`,
    /// `gen_signature`), which can take seconds: the master runs those off its request
    /// workers.
    pub fn is_slow(&self, fun: &str) -> bool {
        self.functions.get(fun).is_some_and(|e| e.traits.slow)
    }

    /// Runs one wheel call: takes its arguments, fires `salt/wheel/<jid>/new`, runs,
    /// stores the run in the job cache, fires `salt/wheel/<jid>/ret`.
    ///
    /// Never panics; every failure becomes the return Salt would give.
    pub fn run(&self, host: &dyn WheelHost, call: &WheelCall<'_>) -> WheelOutcome {
        let mut data = vec![
            (s("fun"), s(format!("wheel.{}", call.fun))),
            (s("jid"), s(call.jid)),
            (s("user"), s(call.user)),
        ];
        let Some(entry) = self.functions.get(call.fun) else {
            let err = WheelError::NotAvailable(call.fun.to_owned());
            return finish(
                host,
                call,
                data,
                failed(call.fun, "verify_fun", &err),
                false,
            );
        };
        let loaded = match args::load(entry.spec, &call.args) {
            Ok(loaded) => loaded,
            Err(err) => {
                let outcome = failure(entry.spec, call.fun, "format_call", &err);
                return finish(host, call, data, outcome, false);
            }
        };
        data.push((s("fun_args"), loaded.fun_args()));
        host.fire(
            &format!("salt/wheel/{}/new", call.jid),
            Value::Map(data.clone()),
        );
        let result = entry
            .spec
            .bind(loaded.args, loaded.kwargs)
            .map_err(WheelError::from)
            .and_then(|bound| (entry.handler)(&Invocation { host, call: bound }));
        let outcome = match result {
            Ok(ret) => WheelOutcome {
                ret,
                success: true,
                retcode: None,
            },
            Err(err) => failure(entry.spec, call.fun, entry.spec.pyname, &err),
        };
        finish(host, call, data, outcome, entry.traits.secret)
    }
}

/// The return of a call that raised: "Passed invalid arguments" with the usage for a
/// `TypeError`, Salt's exception text otherwise.
fn failure(spec: &FunSpec, fun: &str, frame: &str, err: &WheelError) -> WheelOutcome {
    match err {
        WheelError::TypeError(msg) => WheelOutcome {
            ret: s(format!(
                "\nPassed invalid arguments: {msg}\n\nUsage:\n{}",
                spec.doc
            )),
            success: false,
            retcode: None,
        },
        other => failed(fun, frame, other),
    }
}

/// `Exception occurred in wheel <fun>: <traceback>`, retcode 1.
fn failed(fun: &str, frame: &str, err: &WheelError) -> WheelOutcome {
    WheelOutcome {
        ret: s(format!(
            "Exception occurred in wheel {fun}: Traceback (most recent call last):\n  File \"halite-wheel\", in {frame}\n{}\n",
            err.traceback_line()
        )),
        success: false,
        retcode: Some(1),
    }
}

/// Completes the event data with the outcome, stores the run and fires `ret`; a secret
/// return is redacted in both.
fn finish(
    host: &dyn WheelHost,
    call: &WheelCall<'_>,
    mut data: Vec<(Value, Value)>,
    outcome: WheelOutcome,
    secret: bool,
) -> WheelOutcome {
    let public = if secret {
        redact(&outcome.ret)
    } else {
        outcome.ret.clone()
    };
    data.push((s("return"), public));
    data.push((s("success"), Value::Boolean(outcome.success)));
    if let Some(code) = outcome.retcode {
        data.push((s("retcode"), Value::from(code)));
    }
    let data = Value::Map(data);
    store_job(host, call, &data);
    host.fire(&format!("salt/wheel/{}/ret", call.jid), data);
    outcome
}

/// `ret` with the value of `priv` replaced by [`REDACTED`].
fn redact(ret: &Value) -> Value {
    match ret {
        Value::Map(entries) => Value::Map(
            entries
                .iter()
                .map(|(k, v)| match k.as_str() {
                    Some("priv") => (k.clone(), s(REDACTED)),
                    _ => (k.clone(), v.clone()),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `salt.utils.job.store_job` for a wheel run: with the job cache on and no
/// `ext_job_cache`, the run is saved as a job of the master (`id` and `tgt` the master's
/// id, `fun` `wheel.<f>`) whose one return is the whole event data, so
/// `jobs.list_jobs` shows wheel runs as in Salt. (The wheel client's class-named
/// `wheelclient_returns` option never exists, so Salt always stores them.)
fn store_job(host: &dyn WheelHost, call: &WheelCall<'_>, data: &Value) {
    let opts = host.opts();
    if !opts.job_cache || opts.get("ext_job_cache").is_some_and(truthy) {
        return;
    }
    let load = map([
        ("id", s(opts.id.as_str())),
        ("tgt", s(opts.id.as_str())),
        ("jid", s(call.jid)),
        ("return", data.clone()),
        ("fun", s(format!("wheel.{}", call.fun))),
        ("user", s(call.user)),
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
