//! `salt/modules/test.py`: functions for testing the minion and the job machinery.

use std::time::{Duration, Instant};

use rmpv::Value;

use super::{check_cancel, interruptible_sleep};
use crate::args::Kwargs;
use crate::error::ExecError;
use crate::pyval::{py_int, py_repr, py_str, py_type_name, text, truthy, tuple_repr};
use crate::registry::{Export, Invocation};
use crate::SALT_VERSION;

pub(crate) const EXPORTS: &[Export] = &[
    ("test.arg", arg, None),
    ("test.arg_clean", arg_clean, None),
    ("test.arg_repr", arg_repr, None),
    ("test.arg_type", arg_type, None),
    ("test.assertion", assertion, None),
    ("test.attr_call", attr_call, None),
    ("test.collatz", collatz, None),
    ("test.cross_test", cross_test, None),
    ("test.deprecation_warning", true_, None),
    ("test.echo", echo, None),
    ("test.exception", exception, None),
    ("test.false", false_, None),
    ("test.fib", fib, None),
    ("test.get_opts", get_opts, None),
    ("test.kwarg", kwarg, None),
    ("test.opts_pkg", opts_pkg, None),
    ("test.outputter", outputter, None),
    ("test.ping", true_, None),
    ("test.rand_sleep", rand_sleep, None),
    ("test.rand_str", random_hash, None),
    ("test.random_hash", random_hash, None),
    ("test.retcode", retcode, None),
    ("test.sleep", sleep, None),
    ("test.true", true_, None),
    ("test.try", try_, None),
    ("test.tty", tty, None),
    ("test.version", version, None),
    ("test.versions", versions_report, None),
    ("test.versions_information", versions_information, None),
    ("test.versions_report", versions_report, None),
];

fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::Map(
        pairs
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect(),
    )
}

fn true_(_: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(Value::Boolean(true))
}

fn false_(_: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(Value::Boolean(false))
}

fn version(_: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(Value::from(SALT_VERSION))
}

fn echo(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(inv.arg("text").clone())
}

fn outputter(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(inv.arg("data").clone())
}

fn tty(_: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(Value::from(
        "ERROR: This function has been moved to cmd.tty",
    ))
}

fn arg(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(map(vec![
        ("args", Value::Array(inv.call.varargs.clone())),
        ("kwargs", inv.call.kwargs_map()),
    ]))
}

/// `salt.utils.args.clean_kwargs`: drops every key starting with `__`.
fn clean_kwargs(kwargs: &Kwargs) -> Value {
    Value::Map(
        kwargs
            .iter()
            .filter(|(k, _)| !py_str(k).starts_with("__"))
            .cloned()
            .collect(),
    )
}

fn arg_clean(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(map(vec![
        ("args", Value::Array(inv.call.varargs.clone())),
        ("kwargs", clean_kwargs(&inv.call.kwargs)),
    ]))
}

fn arg_repr(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(map(vec![
        ("args", Value::from(tuple_repr(&inv.call.varargs))),
        ("kwargs", Value::from(py_repr(&inv.call.kwargs_map()))),
    ]))
}

fn arg_type(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let class = |v: &Value| Value::from(format!("<class '{}'>", py_type_name(v)));
    Ok(map(vec![
        (
            "args",
            Value::Array(inv.call.varargs.iter().map(class).collect()),
        ),
        (
            "kwargs",
            Value::Map(
                inv.call
                    .kwargs
                    .iter()
                    .map(|(k, v)| (k.clone(), class(v)))
                    .collect(),
            ),
        ),
    ]))
}

fn kwarg(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(inv.call.kwargs_map())
}

fn assertion(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    if truthy(inv.arg("assertion")) {
        Ok(Value::Nil)
    } else {
        Err(ExecError::exception("AssertionError", ""))
    }
}

fn exception(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Err(ExecError::exception(
        "Exception",
        py_str(inv.arg("message")),
    ))
}

fn retcode(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let code = inv.arg("code").clone();
    inv.set_retcode(&code);
    Ok(Value::Boolean(true))
}

fn sleep(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let secs = py_int(inv.arg("length"))?;
    if secs < 0 {
        return Err(ExecError::exception(
            "ValueError",
            "sleep length must be non-negative",
        ));
    }
    interruptible_sleep(inv.ctx, Duration::from_secs(secs.unsigned_abs()))?;
    Ok(Value::Boolean(true))
}

fn rand_sleep(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let max = py_int(inv.arg("max"))?;
    if max < 0 {
        return Err(ExecError::exception(
            "ValueError",
            format!("empty range for randrange() (0, {}, {})", max + 1, max + 1),
        ));
    }
    let secs = random_below(max.unsigned_abs() + 1);
    interruptible_sleep(inv.ctx, Duration::from_secs(secs))?;
    Ok(Value::Boolean(true))
}

/// A uniformly random number in `0..n` (`n > 0`) from OpenSSL's generator.
fn random_below(n: u64) -> u64 {
    let mut buf = [0u8; 8];
    if openssl::rand::rand_bytes(&mut buf).is_err() {
        return 0;
    }
    let zone = u64::MAX - (u64::MAX % n);
    let mut v = u64::from_le_bytes(buf);
    while v >= zone {
        if openssl::rand::rand_bytes(&mut buf).is_err() {
            return 0;
        }
        v = u64::from_le_bytes(buf);
    }
    v % n
}

fn fib(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let num = py_int(inv.arg("num"))?;
    if num < 0 {
        return Err(ExecError::exception(
            "ValueError",
            "Negative number is not allowed!",
        ));
    }
    let start = Instant::now();
    let result = if num < 2 {
        num.unsigned_abs()
    } else {
        let (mut prev, mut curr) = (0u64, 1u64);
        for _ in 1..num {
            check_cancel(inv.ctx)?;
            let next = prev.checked_add(curr).ok_or_else(|| {
                ExecError::exception("OverflowError", "Integer value out of range")
            })?;
            prev = curr;
            curr = next;
        }
        curr
    };
    Ok(Value::Array(vec![
        Value::from(result),
        Value::F64(start.elapsed().as_secs_f64()),
    ]))
}

fn collatz(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let start_num = py_int(inv.arg("start"))?;
    if start_num < 1 {
        // Salt loops forever here, appending to the list until memory runs out.
        return Err(ExecError::exception(
            "ValueError",
            "collatz needs a positive start (Salt 3008.3 loops forever here)",
        ));
    }
    let begin = Instant::now();
    let mut steps = Vec::new();
    // Python's `start / 2` turns the value into a float at the first halving.
    let mut int_value = Some(i128::from(start_num));
    let mut n = start_num as f64;
    while n != 1.0 {
        check_cancel(inv.ctx)?;
        steps.push(match int_value {
            Some(i) => i64::try_from(i).map_or(Value::F64(n), Value::from),
            None => Value::F64(n),
        });
        if n > 1.0 {
            if n % 2.0 == 0.0 {
                n /= 2.0;
                int_value = None;
            } else {
                n = n * 3.0 + 1.0;
                int_value = int_value.map(|i| i * 3 + 1);
            }
        }
        if !n.is_finite() {
            return Err(ExecError::exception(
                "OverflowError",
                "int too large to convert to float",
            ));
        }
    }
    Ok(Value::Array(vec![
        Value::Array(steps),
        Value::F64(begin.elapsed().as_secs_f64()),
    ]))
}

fn random_hash(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let size = py_int(inv.arg("size"))?;
    let hash_type = match inv.arg("hash_type") {
        v if truthy(v) => v.clone(),
        _ => inv
            .ctx
            .opts
            .get("hash_type")
            .cloned()
            .unwrap_or_else(|| Value::from("sha256")),
    };
    let Some(hash_type) = text(&hash_type).map(|t| t.into_owned()) else {
        return Err(ExecError::TypeError(format!(
            "attribute name must be string, not '{}'",
            py_type_name(&hash_type)
        )));
    };
    if size < 0 {
        return Err(ExecError::exception(
            "ValueError",
            format!(
                "empty range for randrange() (0, {}, {})",
                size + 1,
                size + 1
            ),
        ));
    }
    let num = random_below(size.unsigned_abs() + 1);
    hexdigest(&hash_type, num.to_string().as_bytes()).map(Value::from)
}

/// `getattr(hashlib, name)(data).hexdigest()`.
pub(crate) fn hexdigest(name: &str, data: &[u8]) -> Result<String, ExecError> {
    use openssl::hash::{hash, MessageDigest};
    let md = match name {
        "md5" => MessageDigest::md5(),
        "sha1" => MessageDigest::sha1(),
        "sha224" => MessageDigest::sha224(),
        "sha256" => MessageDigest::sha256(),
        "sha384" => MessageDigest::sha384(),
        "sha512" => MessageDigest::sha512(),
        "sha3_224" => MessageDigest::sha3_224(),
        "sha3_256" => MessageDigest::sha3_256(),
        "sha3_384" => MessageDigest::sha3_384(),
        "sha3_512" => MessageDigest::sha3_512(),
        _ => {
            return Err(ExecError::exception(
                "AttributeError",
                format!("module 'hashlib' has no attribute '{name}'"),
            ))
        }
    };
    let digest = hash(md, data).map_err(|e| ExecError::exception("ValueError", e.to_string()))?;
    Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
}

fn opts_value(inv: &Invocation<'_>) -> Value {
    let mut opts = inv.ctx.opts.raw.clone();
    halite_proto::value::set(&mut opts, "grains", (*inv.ctx.grains).clone());
    halite_proto::value::set(&mut opts, "pillar", (*inv.ctx.pillar).clone());
    opts
}

fn get_opts(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(opts_value(inv))
}

fn opts_pkg(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(opts_value(inv))
}

fn attr_call(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    inv.call_function("grains.items", Vec::new(), Vec::new())
}

fn cross_test(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let func = py_str(inv.arg("func"));
    let args = match inv.arg("args") {
        Value::Nil => Vec::new(),
        Value::Array(items) => items.clone(),
        other => {
            return Err(ExecError::TypeError(format!(
                "salt.loaded.int.module.{func}() argument after * must be an iterable, not {}",
                py_type_name(other)
            )))
        }
    };
    inv.call_function(&func, args, Vec::new())
}

/// `test.try`: `__salt__[module](**kwargs)` (the `__pub_*` keys included), `None` on
/// any error. With `return_try_exception` Halite returns the error text where Salt
/// returns the exception object (which it cannot serialise).
fn try_(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let module = py_str(inv.arg("module"));
    let kwargs = inv.call.kwargs.clone();
    match inv.call_function(&module, Vec::new(), kwargs) {
        Ok(v) => Ok(v),
        Err(ExecError::Cancelled(sig)) => Err(ExecError::Cancelled(sig)),
        Err(e) if truthy(inv.arg("return_try_exception")) => Ok(Value::from(e.to_string())),
        Err(_) => Ok(Value::Nil),
    }
}

/// The sections of `salt.version.versions_information`, for Halite.
fn version_sections() -> Vec<(&'static str, Vec<(&'static str, String)>)> {
    let uname = crate::os::uname();
    let release = crate::grains::os_release();
    let field = |k: &str| release.get(k).cloned().unwrap_or_default();
    let codename = release.get("VERSION_CODENAME").cloned().unwrap_or_default();
    let join = |parts: &[String]| {
        parts
            .iter()
            .filter(|p| !p.is_empty())
            .cloned()
            .collect::<Vec<_>>()
            .join(" ")
    };
    vec![
        ("Salt Version", vec![("Salt", SALT_VERSION.to_owned())]),
        (
            "Halite Version",
            vec![("Halite", env!("CARGO_PKG_VERSION").to_owned())],
        ),
        (
            "System Versions",
            vec![
                (
                    "dist",
                    join(&[field("ID"), field("VERSION_ID"), codename.clone()]),
                ),
                ("locale", "utf-8".to_owned()),
                ("machine", uname.machine),
                ("release", uname.release),
                ("system", uname.sysname),
                (
                    "version",
                    join(&[field("NAME"), field("VERSION_ID"), codename]),
                ),
            ],
        ),
    ]
}

fn versions_information(_: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(Value::Map(
        version_sections()
            .into_iter()
            .map(|(section, items)| {
                (
                    Value::from(section),
                    Value::Map(
                        items
                            .into_iter()
                            .map(|(k, v)| (Value::from(k), Value::from(v)))
                            .collect(),
                    ),
                )
            })
            .collect(),
    ))
}

/// `salt.version.versions_report`, joined with newlines: names right-aligned one past
/// the longest name (at least `Not Installed`), a `" "` line after each section.
fn versions_report(_: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let sections = version_sections();
    let pad = sections
        .iter()
        .flat_map(|(_, items)| items.iter().map(|(k, _)| k.len()))
        .chain(["Not Installed".len()])
        .max()
        .unwrap_or(13)
        + 1;
    let mut lines = Vec::new();
    for (section, mut items) in sections {
        lines.push(format!("{section}:"));
        items.sort_by_key(|(k, _)| k.to_lowercase());
        for (k, v) in items {
            let v = if v.is_empty() {
                "Not Installed".to_owned()
            } else {
                v
            };
            lines.push(format!("{k:>pad$}: {v}"));
        }
        lines.push(" ".to_owned());
    }
    Ok(Value::from(lines.join("\n")))
}
