//! Python's view of msgpack values: `str()`, `repr()`, `type()`, `int()` and Salt's
//! `is_true`, for the texts Salt builds with f-strings (`k=v` in error messages,
//! `test.arg_repr`, `test.arg_type`).
//!
//! A msgpack `str` holding bytes that are not UTF-8 is shown lossily; Python would hold
//! `bytes` there.

use std::borrow::Cow;

use rmpv::Value;

use crate::error::ExecError;

pub(crate) use halite_proto::value::truthy;

/// The text of a `str` (or `bin`) value, lossily decoded.
pub(crate) fn text(v: &Value) -> Option<Cow<'_, str>> {
    match v {
        Value::String(s) => Some(String::from_utf8_lossy(s.as_bytes())),
        _ => None,
    }
}

/// Python `str(v)`.
pub(crate) fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => py_repr(other),
    }
}

/// Python `repr(v)`.
pub(crate) fn py_repr(v: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, v);
    out
}

fn write_repr(out: &mut String, v: &Value) {
    match v {
        Value::Nil => out.push_str("None"),
        Value::Boolean(true) => out.push_str("True"),
        Value::Boolean(false) => out.push_str("False"),
        Value::Integer(i) => out.push_str(&i.to_string()),
        Value::F32(f) => out.push_str(&float_repr(f64::from(*f))),
        Value::F64(f) => out.push_str(&float_repr(*f)),
        Value::String(s) => out.push_str(&repr_str(&String::from_utf8_lossy(s.as_bytes()))),
        Value::Binary(b) => out.push_str(&repr_bytes(b)),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, item);
            }
            out.push(']');
        }
        Value::Map(entries) => {
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, k);
                out.push_str(": ");
                write_repr(out, v);
            }
            out.push('}');
        }
        Value::Ext(code, data) => {
            out.push_str(&format!("ExtType(code={code}, data={})", repr_bytes(data)));
        }
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

/// Python `repr(s)` for a `str`: single quotes unless the text has a `'` and no `"`.
pub(crate) fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {
                let n = u32::from(c);
                if n <= 0xff {
                    out.push_str(&format!("\\x{n:02x}"));
                } else {
                    out.push_str(&format!("\\u{n:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

fn repr_bytes(b: &[u8]) -> String {
    let quote = if b.contains(&b'\'') && !b.contains(&b'"') {
        b'"'
    } else {
        b'\''
    };
    let mut out = String::from("b");
    out.push(char::from(quote));
    for &byte in b {
        match byte {
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            q if q == quote => {
                out.push('\\');
                out.push(char::from(q));
            }
            0x20..=0x7e => out.push(char::from(byte)),
            _ => out.push_str(&format!("\\x{byte:02x}")),
        }
    }
    out.push(char::from(quote));
    out
}

/// Python `repr(float)`: the shortest text that reads back to the same value, in
/// scientific notation below 1e-4 and from 1e16 on.
pub(crate) fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if f.is_sign_negative() { "-" } else { "" };
    let decpt = exp + 1;
    if !(-3..=16).contains(&decpt) {
        let exp_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{mantissa}e{exp_sign}{:02}", exp.abs());
    }
    let len = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let body = if decpt <= 0 {
        format!("0.{}{digits}", "0".repeat(decpt.unsigned_abs() as usize))
    } else if decpt >= len {
        format!("{digits}{}.0", "0".repeat((decpt - len) as usize))
    } else {
        let (int, frac) = digits.split_at(decpt as usize);
        format!("{int}.{frac}")
    };
    format!("{sign}{body}")
}

/// Python `type(v).__name__`.
pub(crate) fn py_type(v: &Value) -> &'static str {
    match v {
        Value::Nil => "NoneType",
        Value::Boolean(_) => "bool",
        Value::Integer(_) => "int",
        Value::F32(_) | Value::F64(_) => "float",
        Value::String(_) => "str",
        Value::Binary(_) => "bytes",
        Value::Array(_) => "list",
        Value::Map(_) => "dict",
        Value::Ext(_, _) => "ExtType",
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
            py_type(other)
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
    fn floats_print_like_python_repr() {
        for (f, want) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (2.86102294921875e-06, "2.86102294921875e-06"),
            (1.5e300, "1.5e+300"),
            (f64::INFINITY, "inf"),
            (-123.456, "-123.456"),
        ] {
            assert_eq!(float_repr(f), want, "{f}");
        }
    }

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
