//! `test.*` (Salt 3008.3 `runners/test.py`): runners for trying the runner system out.
//!
//! * `test.arg *args **kwargs` → `{"args": [...], "kwargs": {...}}` without the keywords
//!   whose names start with `__`; `test.raw_arg` keeps them.
//! * `test.metasyntactic locality=us` → the `us` or `uk` list, `None` for any other
//!   locality; a list or dict locality is Python's `unhashable type` TypeError.
//! * `test.stdout_print` → `"bar"`; `test.sleep s_time=10` sleeps `s_time` seconds
//!   (`time.sleep`'s conversions and error texts), then → `True`.
//! * `test.stream` fires `salt/run/<jid>/progress` `{"message": "Runner is <i>% done"}`
//!   for `i` in 1..=99, 0.1 s apart, then → `True`.
//!
//! What `test.stdout_print` and `test.sleep` print (`foo`, `s_time`) is discarded.
//! Halite runs every runner in the master, where Salt's master runs it in a daemonized
//! process whose stdout is `/dev/null` (`salt-run -a`, the API, `publish.runner`); only
//! stock `salt-run` without eauth, which runs the runner in its own process, shows it
//! before the return.
//!
//! Not offered: `test.get_opts`, which returns the master's whole `__opts__`: Halite keeps
//! typed options and the files' own values, not the dict of every option and computed
//! default Salt holds, so it cannot answer what Salt answers.

use std::time::Duration;

use rmpv::Value;

use crate::error::RunnerError;
use crate::pyval::{py_type_name, text};
use crate::registry::{Export, Invocation};

pub(crate) const EXPORTS: &[Export] = &[
    ("test.arg", arg),
    ("test.metasyntactic", metasyntactic),
    ("test.raw_arg", raw_arg),
    ("test.sleep", sleep),
    ("test.stdout_print", stdout_print),
    ("test.stream", stream),
];

/// `{"args": args, "kwargs": kwargs}` with the keywords `keep` accepts.
fn args_and_kwargs(inv: &Invocation<'_>, keep: fn(&str) -> bool) -> Value {
    let kwargs = inv
        .call
        .kwargs
        .iter()
        .filter(|(key, _)| text(key).is_some_and(|k| keep(&k)))
        .cloned()
        .collect();
    Value::Map(vec![
        (Value::from("args"), Value::Array(inv.call.varargs.clone())),
        (Value::from("kwargs"), Value::Map(kwargs)),
    ])
}

fn arg(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    Ok(args_and_kwargs(inv, |key| !key.starts_with("__")))
}

fn raw_arg(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    Ok(args_and_kwargs(inv, |_| true))
}

const US: &[&str] = &[
    "foo", "bar", "baz", "qux", "quux", "quuz", "corge", "grault", "garply", "waldo", "fred",
    "plugh", "xyzzy", "thud",
];
const UK: &[&str] = &["wibble", "wobble", "wubble", "flob"];

/// `lookup.get(locality, None)`: only the `str`s `us` and `uk` are keys.
fn metasyntactic(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let words = |list: &[&str]| Value::Array(list.iter().map(|w| Value::from(*w)).collect());
    match inv.arg("locality") {
        unhashable @ (Value::Array(_) | Value::Map(_)) => Err(RunnerError::TypeError(format!(
            "unhashable type: '{}'",
            py_type_name(unhashable)
        ))),
        Value::String(s) => Ok(match s.as_str() {
            Some("us") => words(US),
            Some("uk") => words(UK),
            _ => Value::Nil,
        }),
        _ => Ok(Value::Nil),
    }
}

fn stdout_print(_inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    Ok(Value::from("bar"))
}

fn sleep(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let length = sleep_length(inv.arg("s_time"))?;
    inv.host.sleep(length);
    Ok(Value::Boolean(true))
}

fn stream(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    for i in 1..100 {
        inv.progress(format!("Runner is {i}% done"));
        inv.host.sleep(Duration::from_millis(100));
    }
    Ok(Value::Boolean(true))
}

const NANOS_PER_SEC: i64 = 1_000_000_000;

/// 2^63 as a float: the first value past `i64::MAX` (`-2^63` is `i64::MIN`).
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// `time.sleep(secs)`'s reading of its argument (CPython 3.11: seconds to a signed 64-bit
/// count of nanoseconds, a float rounded away from zero, then the sign check), with its
/// exceptions and texts.
fn sleep_length(secs: &Value) -> Result<Duration, RunnerError> {
    let nanos = match secs {
        Value::Boolean(b) => i64::from(*b) * NANOS_PER_SEC,
        Value::Integer(i) => i
            .as_i64()
            .and_then(|n| n.checked_mul(NANOS_PER_SEC))
            .ok_or_else(|| {
                RunnerError::exception(
                    "OverflowError",
                    "timestamp too large to convert to C _PyTime_t",
                )
            })?,
        Value::F32(f) => float_nanos(f64::from(*f))?,
        Value::F64(f) => float_nanos(*f)?,
        other => {
            return Err(RunnerError::TypeError(format!(
                "'{}' object cannot be interpreted as an integer",
                py_type_name(other)
            )))
        }
    };
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| RunnerError::exception("ValueError", "sleep length must be non-negative"))
}

/// Float seconds as nanoseconds, rounded away from zero.
fn float_nanos(secs: f64) -> Result<i64, RunnerError> {
    if secs.is_nan() {
        return Err(RunnerError::exception(
            "ValueError",
            "Invalid value NaN (not a number)",
        ));
    }
    let nanos = secs * 1e9;
    let nanos = if nanos >= 0.0 {
        nanos.ceil()
    } else {
        nanos.floor()
    };
    if !(-TWO_POW_63..TWO_POW_63).contains(&nanos) {
        return Err(RunnerError::exception(
            "OverflowError",
            "timestamp out of range for platform time_t",
        ));
    }
    // In range and integral: the cast is exact.
    Ok(nanos as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn length(v: Value) -> Result<Duration, String> {
        sleep_length(&v).map_err(|e| match e {
            RunnerError::TypeError(msg) => format!("TypeError: {msg}"),
            other => other.to_string(),
        })
    }

    #[test]
    fn sleep_lengths_are_read_as_time_sleep_reads_them() {
        assert_eq!(length(Value::from(5)), Ok(Duration::from_secs(5)));
        assert_eq!(length(Value::Boolean(true)), Ok(Duration::from_secs(1)));
        assert_eq!(length(Value::F64(0.25)), Ok(Duration::from_millis(250)));
        assert_eq!(length(Value::F64(1e-10)), Ok(Duration::from_nanos(1)));
        assert_eq!(length(Value::F64(-0.0)), Ok(Duration::ZERO));
        assert_eq!(length(Value::F32(0.5)), Ok(Duration::from_millis(500)));
        assert_eq!(
            length(Value::from(9_223_372_036_i64)),
            Ok(Duration::from_secs(9_223_372_036))
        );
    }

    #[test]
    fn bad_sleep_lengths_raise_pythons_errors() {
        let negative = Err("ValueError: sleep length must be non-negative".to_owned());
        assert_eq!(length(Value::from(-1)), negative);
        assert_eq!(length(Value::F64(-0.5)), negative);
        assert_eq!(length(Value::F64(-1e-10)), negative);
        assert_eq!(
            length(Value::F64(f64::NAN)),
            Err("ValueError: Invalid value NaN (not a number)".to_owned())
        );
        let int_overflow =
            Err("OverflowError: timestamp too large to convert to C _PyTime_t".to_owned());
        assert_eq!(length(Value::from(9_223_372_037_i64)), int_overflow);
        assert_eq!(length(Value::from(u64::MAX)), int_overflow);
        assert_eq!(length(Value::from(i64::MIN)), int_overflow);
        let float_overflow =
            Err("OverflowError: timestamp out of range for platform time_t".to_owned());
        for f in [f64::INFINITY, f64::NEG_INFINITY, 1e19, 9_223_372_036.9] {
            assert_eq!(length(Value::F64(f)), float_overflow, "{f}");
        }
        for (v, ty) in [
            (Value::from("5"), "str"),
            (Value::Nil, "NoneType"),
            (Value::Binary(b"1".to_vec()), "bytes"),
            (Value::Array(vec![]), "list"),
            (Value::Map(vec![]), "dict"),
        ] {
            assert_eq!(
                length(v),
                Err(format!(
                    "TypeError: '{ty}' object cannot be interpreted as an integer"
                ))
            );
        }
    }
}
