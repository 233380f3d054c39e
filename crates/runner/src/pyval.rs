//! Python's view of msgpack values, for the texts and comparisons the runners make:
//! `str()`, `repr()`, `type()` (shared with the outputters), truthiness, `int()` and `==`.
//!
//! A msgpack `str` holding bytes that are not UTF-8 is shown lossily; Python would hold
//! `bytes` there.

use std::borrow::Cow;

use rmpv::Value;

use crate::error::RunnerError;

pub(crate) use halite_output::{py_repr, py_str, py_type_name};
pub(crate) use halite_proto::value::{get, map, truthy};

/// The text of a `str` (or `bin`) value, lossily decoded.
pub(crate) fn text(v: &Value) -> Option<Cow<'_, str>> {
    match v {
        Value::String(s) => Some(String::from_utf8_lossy(s.as_bytes())),
        Value::Binary(b) => Some(String::from_utf8_lossy(b)),
        _ => None,
    }
}

/// `dict[key] = value` on an ordered map, keeping the first position of an existing key.
pub(crate) fn dict_set(dict: &mut Vec<(Value, Value)>, key: Value, value: Value) {
    match dict.iter_mut().find(|(k, _)| py_eq(k, &key)) {
        Some(slot) => slot.1 = value,
        None => dict.push((key, value)),
    }
}

/// `key in dict` for a map value (`false` for anything else).
pub(crate) fn has_key(dict: &Value, key: &Value) -> bool {
    matches!(dict, Value::Map(entries) if entries.iter().any(|(k, _)| py_eq(k, key)))
}

/// `dict.get(key)` for a map value with any key type.
pub(crate) fn lookup<'v>(dict: &'v Value, key: &Value) -> Option<&'v Value> {
    match dict {
        Value::Map(entries) => entries.iter().find(|(k, _)| py_eq(k, key)).map(|(_, v)| v),
        _ => None,
    }
}

/// Python `int(v)` for the values an argument can hold (bools are ints, floats truncate,
/// strings are parsed in base 10 with surrounding whitespace).
pub(crate) fn py_int(v: &Value) -> Result<i64, RunnerError> {
    let too_large =
        || RunnerError::exception("OverflowError", "Python int too large to convert to C long");
    match v {
        Value::Integer(i) => i.as_i64().ok_or_else(too_large),
        Value::Boolean(b) => Ok(i64::from(*b)),
        Value::F32(f) => float_to_int(f64::from(*f)),
        Value::F64(f) => float_to_int(*f),
        Value::String(_) | Value::Binary(_) => {
            let s = text(v).unwrap_or_default();
            let t = s.trim();
            let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(RunnerError::exception(
                    "ValueError",
                    format!(
                        "invalid literal for int() with base 10: {}",
                        halite_output::str_repr(&s)
                    ),
                ));
            }
            t.parse().map_err(|_| too_large())
        }
        other => Err(RunnerError::TypeError(format!(
            "int() argument must be a string, a bytes-like object or a real number, not '{}'",
            py_type_name(other)
        ))),
    }
}

fn float_to_int(f: f64) -> Result<i64, RunnerError> {
    if f.is_nan() {
        return Err(RunnerError::exception(
            "ValueError",
            "cannot convert float NaN to integer",
        ));
    }
    if f.is_infinite() {
        return Err(RunnerError::exception(
            "OverflowError",
            "cannot convert float infinity to integer",
        ));
    }
    let t = f.trunc();
    if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&t) {
        return Err(RunnerError::exception(
            "OverflowError",
            "Python int too large to convert to C long",
        ));
    }
    Ok(t as i64)
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
pub(crate) fn py_eq(a: &Value, b: &Value) -> bool {
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

/// `salt.utils.args.split_input`: a list as it is, anything else `str(val)` split on
/// commas with each part stripped.
pub(crate) fn split_input(val: &Value) -> Vec<String> {
    match val {
        Value::Array(items) => items.iter().map(py_str).collect(),
        other => py_str(other)
            .split(',')
            .map(|part| part.trim().to_owned())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_conversion_matches_python() {
        assert_eq!(py_int(&Value::from(" 12 ")).ok(), Some(12));
        assert_eq!(py_int(&Value::from("-3")).ok(), Some(-3));
        assert_eq!(py_int(&Value::F64(2.9)).ok(), Some(2));
        assert_eq!(py_int(&Value::Boolean(true)).ok(), Some(1));
        assert_eq!(
            py_int(&Value::from("1.5")).err().map(|e| e.to_string()),
            Some("ValueError: invalid literal for int() with base 10: '1.5'".to_owned())
        );
        assert_eq!(
            py_int(&Value::Array(vec![])).err(),
            Some(RunnerError::TypeError(
                "int() argument must be a string, a bytes-like object or a real number, not 'list'"
                    .to_owned()
            ))
        );
        assert!(py_int(&Value::F64(f64::NAN)).is_err());
        assert!(py_int(&Value::from("99999999999999999999")).is_err());
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
        assert!(!py_eq(
            &a,
            &Value::Map(vec![(Value::from("x"), Value::from(1))])
        ));
    }

    #[test]
    fn split_input_takes_lists_or_comma_strings() {
        assert_eq!(split_input(&Value::from("a*, b ,c")), ["a*", "b", "c"]);
        assert_eq!(
            split_input(&Value::Array(vec![Value::from("x,y"), Value::from(3)])),
            ["x,y", "3"]
        );
        assert_eq!(split_input(&Value::from(7)), ["7"]);
    }
}
