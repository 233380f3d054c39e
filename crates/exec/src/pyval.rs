//! Python's view of msgpack values: `str()`, `repr()`, `type()`, `int()` and Salt's
//! `is_true`, for the texts Salt builds with f-strings (`k=v` in error messages,
//! `test.arg_repr`, `test.arg_type`). `str()`, `repr()` and `type()` are
//! `halite_output`'s, shared with the outputters and the config loader.
//!
//! A msgpack `str` holding bytes that are not UTF-8 is shown lossily; Python would hold
//! `bytes` there.

use std::borrow::Cow;

use rmpv::Value;

use crate::error::ExecError;

pub(crate) use halite_output::{py_repr, py_str, py_type_name, str_repr as repr_str};
pub(crate) use halite_proto::value::truthy;

/// The text of a `str` (or `bin`) value, lossily decoded.
pub(crate) fn text(v: &Value) -> Option<Cow<'_, str>> {
    match v {
        Value::String(s) => Some(String::from_utf8_lossy(s.as_bytes())),
        _ => None,
    }
}

/// Python `repr(tuple(items))`.
pub(crate) fn tuple_repr(items: &[Value]) -> String {
    let inner: Vec<String> = items.iter().map(py_repr).collect();
    match inner.len() {
        1 => format!("({},)", inner[0]),
        _ => format!("({})", inner.join(", ")),
    }
}

/// Python `int(v)` for the values a job argument can hold.
pub(crate) fn py_int(v: &Value) -> Result<i64, ExecError> {
    match v {
        Value::Integer(i) => i.as_i64().ok_or_else(|| {
            ExecError::exception("OverflowError", "Python int too large to convert to C long")
        }),
        Value::Boolean(b) => Ok(i64::from(*b)),
        Value::F32(f) => float_to_int(f64::from(*f)),
        Value::F64(f) => float_to_int(*f),
        Value::String(s) => parse_int(&String::from_utf8_lossy(s.as_bytes())),
        Value::Binary(b) => parse_int(&String::from_utf8_lossy(b)),
        other => Err(ExecError::TypeError(format!(
            "int() argument must be a string, a bytes-like object or a real number, not '{}'",
            py_type_name(other)
        ))),
    }
}

fn float_to_int(f: f64) -> Result<i64, ExecError> {
    if f.is_nan() {
        return Err(ExecError::exception(
            "ValueError",
            "cannot convert float NaN to integer",
        ));
    }
    if f.is_infinite() {
        return Err(ExecError::exception(
            "OverflowError",
            "cannot convert float infinity to integer",
        ));
    }
    let t = f.trunc();
    if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&t) {
        return Err(ExecError::exception(
            "OverflowError",
            "Python int too large to convert to C long",
        ));
    }
    Ok(t as i64)
}

/// `int(text)` in base 10: surrounding whitespace, a sign, and single `_` between digits.
fn parse_int(text: &str) -> Result<i64, ExecError> {
    let invalid = || {
        ExecError::exception(
            "ValueError",
            format!("invalid literal for int() with base 10: {}", repr_str(text)),
        )
    };
    let t = text.trim();
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return Err(invalid());
    }
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    let magnitude: i128 = clean.parse().map_err(|_| {
        ExecError::exception("OverflowError", "Python int too large to convert to C long")
    })?;
    let value = if negative { -magnitude } else { magnitude };
    i64::try_from(value).map_err(|_| {
        ExecError::exception("OverflowError", "Python int too large to convert to C long")
    })
}

/// Python `float(text)` for the texts `is_true` sees.
fn parse_float(text: &str) -> Option<f64> {
    let t = text.trim();
    if t.is_empty() || t.starts_with('_') || t.ends_with('_') || t.contains("__") {
        return None;
    }
    t.replace('_', "").parse().ok()
}

/// Salt's `salt.utils.data.is_true`: numbers above zero, the strings `true`/`True`
/// (any case), and otherwise Python truthiness.
pub(crate) fn is_true(v: &Value) -> bool {
    match v {
        Value::Integer(i) => i.as_i64().is_none_or(|n| n > 0),
        Value::Boolean(b) => *b,
        Value::F32(f) => *f > 0.0,
        Value::F64(f) => *f > 0.0,
        Value::String(_) | Value::Binary(_) => {
            let s = py_str(v);
            if let Ok(n) = parse_int(&s) {
                return n > 0;
            }
            if let Some(f) = parse_float(&s) {
                return f > 0.0;
            }
            s.to_lowercase() == "true"
        }
        other => truthy(other),
    }
}

/// Python `a == b` for the values that reach comparisons here (ints and floats compare
/// by number, `True == 1`).
pub(crate) fn py_eq(a: &Value, b: &Value) -> bool {
    fn num(v: &Value) -> Option<f64> {
        match v {
            Value::Integer(i) => i.as_f64(),
            Value::Boolean(b) => Some(f64::from(u8::from(*b))),
            Value::F32(f) => Some(f64::from(*f)),
            Value::F64(f) => Some(*f),
            _ => None,
        }
    }
    match (a, b) {
        (Value::Integer(x), Value::Integer(y)) => x == y,
        (Value::String(x), Value::String(y)) => x.as_bytes() == y.as_bytes(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| py_eq(p, q))
        }
        _ => match (num(a), num(b)) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reprs_follow_python_quoting() {
        assert_eq!(repr_str("a"), "'a'");
        assert_eq!(repr_str("it's"), "\"it's\"");
        assert_eq!(repr_str("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(repr_str("x\ny\\"), "'x\\ny\\\\'");
        let v = Value::Map(vec![
            (Value::from("a"), Value::from(1)),
            (
                Value::from("b"),
                Value::Array(vec![Value::Nil, Value::Boolean(true)]),
            ),
        ]);
        assert_eq!(py_repr(&v), "{'a': 1, 'b': [None, True]}");
        assert_eq!(py_str(&Value::from("plain")), "plain");
        assert_eq!(tuple_repr(&[Value::from(1)]), "(1,)");
        assert_eq!(tuple_repr(&[]), "()");
        assert_eq!(py_repr(&Value::Binary(b"a'\x00".to_vec())), "b\"a'\\x00\"");
    }

    #[test]
    fn int_conversion_matches_python() {
        assert_eq!(py_int(&Value::from(" 1_0 ")).ok(), Some(10));
        assert_eq!(py_int(&Value::from("-3")).ok(), Some(-3));
        assert_eq!(py_int(&Value::F64(2.9)).ok(), Some(2));
        assert_eq!(py_int(&Value::Boolean(true)).ok(), Some(1));
        let err = py_int(&Value::from("abc")).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("ValueError: invalid literal for int() with base 10: 'abc'")
        );
        let err = py_int(&Value::Nil).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("int() argument must be a string, a bytes-like object or a real number, not 'NoneType'")
        );
        assert!(py_int(&Value::F64(f64::NAN)).is_err());
        assert!(py_int(&Value::from("1__0")).is_err());
    }

    #[test]
    fn is_true_follows_salt() {
        for (v, want) in [
            (Value::from("True"), true),
            (Value::from("TRUE"), true),
            (Value::from("yes"), false),
            (Value::from("1"), true),
            (Value::from("0"), false),
            (Value::from("-1"), false),
            (Value::from("1.5"), true),
            (Value::from(2), true),
            (Value::from(0), false),
            (Value::Nil, false),
            (Value::Array(vec![Value::Nil]), true),
        ] {
            assert_eq!(is_true(&v), want, "{v:?}");
        }
    }
}
