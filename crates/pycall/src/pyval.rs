//! Python's view of msgpack values, as far as taking arguments needs it and both callers
//! share it: `str` text, `==`, ordered-dict assignment and lookup, `int()`.
//! (`str()`, `repr()` and `type()` are `halite_output`'s.)
//!
//! A msgpack `str` holding bytes that are not UTF-8 is read lossily; Python would hold
//! `bytes` there.

use std::borrow::Cow;

use halite_output::{py_type_name, str_repr};
use rmpv::Value;

use crate::CallError;

/// The text of a `str` value, lossily decoded (`None` for anything else, `bin` included:
/// Python's `bytes` is not a `str`).
pub fn text(v: &Value) -> Option<Cow<'_, str>> {
    match v {
        Value::String(s) => Some(String::from_utf8_lossy(s.as_bytes())),
        _ => None,
    }
}

/// A number as Python compares it (`True == 1`, `1 == 1.0`).
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => i.as_f64(),
        Value::Boolean(b) => Some(f64::from(u8::from(*b))),
        Value::F32(f) => Some(f64::from(*f)),
        Value::F64(f) => Some(*f),
        _ => None,
    }
}

/// Python `a == b`: numbers by value, strings by content (a msgpack `str` and `bin` differ,
/// as `str` and `bytes` do), lists in order, dicts as sets of pairs.
pub fn py_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Integer(x), Value::Integer(y)) => x == y,
        (Value::String(x), Value::String(y)) => x.as_bytes() == y.as_bytes(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| py_eq(p, q))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| lookup(b, k).is_some_and(|other| py_eq(v, other)))
        }
        _ => match (number(a), number(b)) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        },
    }
}

/// `dict.get(key)` for a map value with any key type (`None` for anything else).
pub fn lookup<'v>(dict: &'v Value, key: &Value) -> Option<&'v Value> {
    match dict {
        Value::Map(entries) => entries.iter().find(|(k, _)| py_eq(k, key)).map(|(_, v)| v),
        _ => None,
    }
}

/// `dict[key] = value` on an ordered map, keeping the first position of an existing key.
pub fn dict_set(dict: &mut Vec<(Value, Value)>, key: Value, value: Value) {
    match dict.iter_mut().find(|(k, _)| py_eq(k, &key)) {
        Some(slot) => slot.1 = value,
        None => dict.push((key, value)),
    }
}

/// The `OverflowError` of a Python int that does not fit a C long.
fn too_large() -> CallError {
    CallError::exception("OverflowError", "Python int too large to convert to C long")
}

/// Python `int(v)` for the values an argument can hold: ints, bools, floats (truncated)
/// and `str`/`bytes` in base 10 (see [`parse_int`]); results beyond 64 bits are an
/// `OverflowError`, as Salt's C-long conversions give.
pub fn py_int(v: &Value) -> Result<i64, CallError> {
    match v {
        Value::Integer(i) => i.as_i64().ok_or_else(too_large),
        Value::Boolean(b) => Ok(i64::from(*b)),
        Value::F32(f) => float_to_int(f64::from(*f)),
        Value::F64(f) => float_to_int(*f),
        Value::String(s) => parse_int(&String::from_utf8_lossy(s.as_bytes())),
        Value::Binary(b) => parse_int(&String::from_utf8_lossy(b)),
        other => Err(CallError::TypeError(format!(
            "int() argument must be a string, a bytes-like object or a real number, not '{}'",
            py_type_name(other)
        ))),
    }
}

/// Python `int(f)` for a float.
fn float_to_int(f: f64) -> Result<i64, CallError> {
    if f.is_nan() {
        return Err(CallError::exception(
            "ValueError",
            "cannot convert float NaN to integer",
        ));
    }
    if f.is_infinite() {
        return Err(CallError::exception(
            "OverflowError",
            "cannot convert float infinity to integer",
        ));
    }
    let t = f.trunc();
    if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&t) {
        return Err(too_large());
    }
    Ok(t as i64)
}

/// Python `int(text)` in base 10: surrounding whitespace, a sign, and single `_` between
/// digits.
pub fn parse_int(text: &str) -> Result<i64, CallError> {
    let invalid = || {
        CallError::exception(
            "ValueError",
            format!("invalid literal for int() with base 10: {}", str_repr(text)),
        )
    };
    let t = text.trim();
    let (negative, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
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
    let magnitude: i128 = clean.parse().map_err(|_| too_large())?;
    let value = if negative { -magnitude } else { magnitude };
    i64::try_from(value).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_follows_python() {
        assert_eq!(py_int(&Value::from(" 1_0 ")).ok(), Some(10));
        assert_eq!(py_int(&Value::from(" 12 ")).ok(), Some(12));
        assert_eq!(py_int(&Value::from("-7")).ok(), Some(-7));
        assert_eq!(py_int(&Value::from("+7")).ok(), Some(7));
        assert_eq!(py_int(&Value::Binary(b"12".to_vec())).ok(), Some(12));
        assert_eq!(py_int(&Value::F64(-2.9)).ok(), Some(-2));
        assert_eq!(py_int(&Value::Boolean(true)).ok(), Some(1));
        assert_eq!(
            py_int(&Value::from("abc")).err().map(|e| e.to_string()),
            Some("ValueError: invalid literal for int() with base 10: 'abc'".to_owned())
        );
        assert_eq!(
            py_int(&Value::from("1.5")).err().map(|e| e.to_string()),
            Some("ValueError: invalid literal for int() with base 10: '1.5'".to_owned())
        );
        assert_eq!(
            py_int(&Value::Array(vec![])).err().map(|e| e.to_string()),
            Some(
                "int() argument must be a string, a bytes-like object or a real number, not 'list'"
                    .to_owned()
            )
        );
        assert_eq!(
            py_int(&Value::Nil).err(),
            Some(CallError::TypeError(
                "int() argument must be a string, a bytes-like object or a real number, not 'NoneType'"
                    .to_owned()
            ))
        );
        for bad in ["1__0", "_1", "1_", "", "-", "1.5", "+-1"] {
            assert!(py_int(&Value::from(bad)).is_err(), "{bad:?}");
        }
        assert_eq!(
            py_int(&Value::from("99999999999999999999")).err(),
            Some(too_large())
        );
        assert_eq!(py_int(&Value::from(u64::MAX)).err(), Some(too_large()));
        assert!(py_int(&Value::F64(f64::NAN)).is_err());
        assert!(py_int(&Value::F64(f64::INFINITY)).is_err());
        assert!(py_int(&Value::F64(1e300)).is_err());
    }

    #[test]
    fn equality_is_pythons() {
        let a = Value::Map(vec![
            (Value::from("x"), Value::from(1)),
            (Value::from("y"), Value::Array(vec![Value::Boolean(true)])),
        ]);
        let b = Value::Map(vec![
            (Value::from("y"), Value::Array(vec![Value::from(1)])),
            (Value::from("x"), Value::F64(1.0)),
        ]);
        assert!(
            py_eq(&a, &b),
            "dicts compare as sets of pairs, True == 1 == 1.0"
        );
        assert!(!py_eq(&Value::from("1"), &Value::from(1)));
        assert!(!py_eq(&Value::from("a"), &Value::Binary(b"a".to_vec())));
        assert!(!py_eq(
            &a,
            &Value::Map(vec![(Value::from("x"), Value::from(1))])
        ));
    }

    #[test]
    fn dict_set_keeps_the_first_position_of_a_key() {
        let mut dict = vec![(Value::from(1), Value::from("a"))];
        dict_set(&mut dict, Value::from("k"), Value::from("b"));
        dict_set(&mut dict, Value::F64(1.0), Value::from("c"));
        assert_eq!(
            dict,
            vec![
                (Value::from(1), Value::from("c")),
                (Value::from("k"), Value::from("b")),
            ]
        );
        let map = Value::Map(dict);
        assert_eq!(lookup(&map, &Value::Boolean(true)), Some(&Value::from("c")));
        assert_eq!(lookup(&Value::Nil, &Value::from("k")), None);
    }

    #[test]
    fn only_str_values_have_text() {
        assert_eq!(text(&Value::from("a")).as_deref(), Some("a"));
        assert_eq!(text(&Value::Binary(b"a".to_vec())), None);
        assert_eq!(text(&Value::from(1)), None);
    }
}
