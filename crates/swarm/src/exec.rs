//! What a simulated minion runs: `test.ping`, `test.echo`, `test.sleep` and
//! `saltutil.find_job` (which `salt`/`LocalClient` send to minions that are slow to
//! return), and the `_return` load it sends back.
//!
//! With `--simulate-states`, `state.apply` and `state.highstate` cost the master what a
//! stock minion's warm run costs it ([`crate::states`]).
//!
//! Anything else is answered the way a stock minion answers a function it does not have:
//! `"'<fun>' is not available."`, `retcode` 1, `success` false, `out: nested`.
//! Multi-function jobs (`fun` is a list) are not simulated; such a publish is dropped.

use halite_proto::value::{self, s};
use halite_proto::Value;
use std::time::Duration;

/// Longest `test.sleep` honoured; longer requests sleep this long.
pub const MAX_SLEEP: Duration = Duration::from_secs(3600);

/// The outcome of running a function.
#[derive(Debug, Clone, PartialEq)]
pub struct JobReturn {
    /// The `return` value.
    pub ret: Value,
    /// `retcode`.
    pub retcode: i64,
    /// `success`.
    pub success: bool,
    /// `out` (the outputter), when the minion names one.
    pub out: Option<&'static str>,
}

impl JobReturn {
    fn ok(ret: Value) -> Self {
        JobReturn {
            ret,
            retcode: 0,
            success: true,
            out: None,
        }
    }

    fn failed(msg: String) -> Self {
        JobReturn {
            ret: s(msg),
            retcode: 1,
            success: false,
            out: Some("nested"),
        }
    }
}

/// How a published job is run.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// The return is known at once.
    Now(JobReturn),
    /// `test.sleep`: return `True` after this long.
    Sleep(Duration),
    /// `saltutil.find_job` for this jid: the caller looks the job up.
    FindJob(String),
    /// `state.apply`/`state.highstate` with states simulated: the caller sends the
    /// requests of [`crate::states`], then returns [`crate::states::highstate_return`].
    StateApply,
}

/// The positional arguments of a job, without the trailing `__kwarg__` map.
fn positional(arg: &Value) -> Vec<&Value> {
    match arg {
        Value::Array(items) => items
            .iter()
            .filter(|a| !value::get(a, "__kwarg__").is_some_and(value::truthy))
            .collect(),
        _ => Vec::new(),
    }
}

/// Reads a number of seconds as Salt's `float(length)` would.
fn seconds(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => i.as_f64(),
        Value::F32(f) => Some(f64::from(*f)),
        Value::F64(f) => Some(*f),
        other => value::str_of(other).and_then(|t| t.trim().parse().ok()),
    }
    .filter(|f: &f64| f.is_finite() && *f >= 0.0)
}

/// Decides how to run `fun` with `arg` (the publish's `arg` list); `states`: whether
/// `state.apply` is simulated (`--simulate-states`).
pub fn plan(fun: &str, arg: &Value, states: bool) -> Plan {
    let args = positional(arg);
    match fun {
        "state.apply" | "state.highstate" if states => Plan::StateApply,
        "test.ping" => Plan::Now(JobReturn::ok(Value::Boolean(true))),
        "test.echo" => match args.first() {
            Some(text) => Plan::Now(JobReturn::ok((*text).clone())),
            None => Plan::Now(JobReturn::failed(
                "Passed invalid arguments to test.echo: echo() missing 1 required positional argument: 'text'"
                    .into(),
            )),
        },
        "test.sleep" => match args.first().and_then(|a| seconds(a)) {
            Some(secs) => Plan::Sleep(Duration::from_secs_f64(secs).min(MAX_SLEEP)),
            None => Plan::Now(JobReturn::failed(
                "Passed invalid arguments to test.sleep: expected a number of seconds".into(),
            )),
        },
        "saltutil.find_job" => match args.first().and_then(|a| value::str_of(a)) {
            Some(jid) => Plan::FindJob(jid.to_owned()),
            None => Plan::Now(JobReturn::ok(Value::Map(Vec::new()))),
        },
        other => Plan::Now(JobReturn::failed(format!("'{other}' is not available."))),
    }
}

/// The `_return` load for a published job, fields in the stock minion's order: `cmd`,
/// `id`, `success`, `return`, `retcode`, [`out`], `jid`, `fun`, `fun_args`, [`user`],
/// `_stamp`.
pub fn return_load(id: &str, job: &Value, ret: &JobReturn, stamp: String) -> Value {
    let field = |k: &str| value::get(job, k).cloned().unwrap_or(Value::Nil);
    let mut out = vec![
        (s("cmd"), s("_return")),
        (s("id"), s(id)),
        (s("success"), Value::Boolean(ret.success)),
        (s("return"), ret.ret.clone()),
        (s("retcode"), Value::from(ret.retcode)),
    ];
    if let Some(o) = ret.out {
        out.push((s("out"), s(o)));
    }
    out.push((s("jid"), field("jid")));
    out.push((s("fun"), field("fun")));
    out.push((s("fun_args"), field("arg")));
    if let Some(user) = value::get(job, "user") {
        out.push((s("user"), user.clone()));
    }
    out.push((s("_stamp"), s(stamp)));
    Value::Map(out)
}

/// What `saltutil.find_job` returns for a running job (the stock minion returns the job's
/// proc data; these are its fields a client reads).
pub fn running_job_info(job: &Value) -> Value {
    let mut out = Vec::new();
    for k in ["jid", "fun", "arg", "tgt", "tgt_type", "user"] {
        if let Some(v) = value::get(job, k) {
            out.push((s(k), v.clone()));
        }
    }
    out.push((s("pid"), Value::from(std::process::id())));
    Value::Map(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::map;

    fn args(items: Vec<Value>) -> Value {
        Value::Array(items)
    }

    #[test]
    fn functions_plan_like_the_stock_test_module() {
        let kw = map([("__kwarg__", Value::Boolean(true)), ("x", Value::from(1))]);
        let cases: Vec<(&str, Value, Plan)> = vec![
            (
                "test.ping",
                args(vec![]),
                Plan::Now(JobReturn::ok(Value::Boolean(true))),
            ),
            (
                "test.echo",
                args(vec![s("hi"), kw.clone()]),
                Plan::Now(JobReturn::ok(s("hi"))),
            ),
            (
                "test.sleep",
                args(vec![Value::from(2)]),
                Plan::Sleep(Duration::from_secs(2)),
            ),
            (
                "test.sleep",
                args(vec![s("0.5")]),
                Plan::Sleep(Duration::from_millis(500)),
            ),
            (
                "test.sleep",
                args(vec![Value::F64(1e12)]),
                Plan::Sleep(MAX_SLEEP),
            ),
            (
                "saltutil.find_job",
                args(vec![s("2026")]),
                Plan::FindJob("2026".into()),
            ),
        ];
        for (fun, arg, want) in cases {
            assert_eq!(plan(fun, &arg, false), want, "{fun} {arg}");
        }
    }

    #[test]
    fn bad_arguments_and_unknown_functions_fail_with_retcode_1() {
        for (fun, arg) in [
            ("test.echo", args(vec![])),
            ("test.sleep", args(vec![s("soon")])),
            ("test.sleep", args(vec![Value::from(-1)])),
            ("pkg.install", args(vec![])),
        ] {
            let Plan::Now(r) = plan(fun, &arg, false) else {
                panic!("{fun} should fail at once")
            };
            assert_eq!((r.retcode, r.success, r.out), (1, false, Some("nested")));
        }
        let Plan::Now(r) = plan("pkg.install", &Value::Nil, false) else {
            panic!()
        };
        assert_eq!(r.ret, s("'pkg.install' is not available."));
    }

    #[test]
    fn state_apply_is_simulated_only_when_asked() {
        assert_eq!(plan("state.apply", &args(vec![]), true), Plan::StateApply);
        assert_eq!(
            plan("state.highstate", &args(vec![]), true),
            Plan::StateApply
        );
        let Plan::Now(r) = plan("state.apply", &args(vec![]), false) else {
            panic!("state.apply without simulation should fail at once")
        };
        assert_eq!(r.ret, s("'state.apply' is not available."));
    }

    #[test]
    fn return_load_has_the_stock_fields_in_order() {
        let job = map([
            ("fun", s("test.echo")),
            ("arg", args(vec![s("x")])),
            ("jid", s("20260101000000000001")),
            ("tgt", s("*")),
            ("user", s("root")),
        ]);
        let r = return_load("m1", &job, &JobReturn::ok(s("x")), "now".into());
        let keys: Vec<&str> = r
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
        assert_eq!(value::get(&r, "fun_args"), Some(&args(vec![s("x")])));
        let info = running_job_info(&job);
        assert_eq!(value::get_str(&info, "jid"), Some("20260101000000000001"));
        assert!(value::get(&info, "pid").is_some());
    }
}
