//! Python semantics over `rmpv::Value`, for the places where Salt's behaviour depends on
//! them: `==` between keys and list items (`1 == 1.0 == True`), `str()` of an option value
//! (numeric ids become strings) and `type()` (both `halite_output`'s), and `int()`/`float()`
//! of strings (Salt accepts `publish_port: "4505"`).

pub(crate) use halite_output::{py_str, py_type_name};
use rmpv::Value;

/// Python's `a == b` for the data YAML produces (tuples are lists here).
pub(crate) fn py_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Nil, Value::Nil) => true,
        (Value::String(x), Value::String(y)) => x.as_bytes() == y.as_bytes(),
        (Value::Binary(x), Value::Binary(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| py_eq(x, y))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len()
                && x.iter().all(|(k, v)| {
                    y.iter()
                        .find(|(k2, _)| py_eq(k, k2))
                        .is_some_and(|(_, v2)| py_eq(v, v2))
                })
        }
        _ => match (number(a), number(b)) {
            (Some(x), Some(y)) => x.eq(&y),
            _ => false,
        },
    }
}

/// A numeric value as Python sees it (`bool` is an `int`).
#[derive(Clone, Copy)]
enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn eq(&self, other: &Num) -> bool {
        match (*self, *other) {
            (Num::Int(x), Num::Int(y)) => x == y,
            (Num::Float(x), Num::Float(y)) => x == y,
            (Num::Int(i), Num::Float(f)) | (Num::Float(f), Num::Int(i)) => {
                // Exact comparison: a float equals an int only if it is that integer.
                f.fract() == 0.0 && f.is_finite() && f.abs() < 1e38 && f as i128 == i
            }
        }
    }
}

fn number(v: &Value) -> Option<Num> {
    match v {
        Value::Boolean(b) => Some(Num::Int(i128::from(*b))),
        Value::Integer(i) => i
            .as_i64()
            .map(|n| Num::Int(i128::from(n)))
            .or_else(|| i.as_u64().map(|n| Num::Int(i128::from(n)))),
        Value::F32(f) => Some(Num::Float(f64::from(*f))),
        Value::F64(f) => Some(Num::Float(*f)),
        _ => None,
    }
}

/// Removes PEP 515 underscores, which Python's `int()`/`float()` accept only between
/// digits; `None` if one is misplaced.
fn strip_digit_underscores(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'_' {
            let before = i.checked_sub(1).and_then(|j| bytes.get(j));
            let after = bytes.get(i + 1);
            if !(before.is_some_and(u8::is_ascii_digit) && after.is_some_and(u8::is_ascii_digit)) {
                return None;
            }
        } else {
            out.push(char::from(b));
        }
    }
    Some(out)
}

/// Python's `int(s)` for a string (base 10): surrounding whitespace, a sign, digits with
/// single underscores between them.
pub(crate) fn py_int_from_str(s: &str) -> Option<i128> {
    let t = s.trim();
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
        return None;
    }
    let n: i128 = strip_digit_underscores(digits)?.parse().ok()?;
    Some(if negative { -n } else { n })
}

/// Python's `float(s)` for a string.
pub(crate) fn py_float_from_str(s: &str) -> Option<f64> {
    let t = s.trim();
    if !t.is_ascii() || t.is_empty() {
        return None;
    }
    let cleaned = strip_digit_underscores(t)?;
    let lower = cleaned.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    if lower.len() - unsigned.len() > 1 {
        return None;
    }
    let special = matches!(unsigned, "inf" | "infinity" | "nan");
    let numeric = unsigned
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'+' | b'-'));
    if !(special || numeric) {
        return None;
    }
    lower.parse().ok()
}

/// Python's `int(v)` for any value, `None` where Python raises.
pub(crate) fn py_int(v: &Value) -> Option<i128> {
    match v {
        Value::Boolean(b) => Some(i128::from(*b)),
        Value::Integer(_) => match number(v) {
            Some(Num::Int(n)) => Some(n),
            _ => None,
        },
        Value::F32(_) | Value::F64(_) => match number(v) {
            Some(Num::Float(f)) if f.is_finite() && f.abs() < 1e38 => Some(f.trunc() as i128),
            _ => None,
        },
        Value::String(s) => s.as_str().and_then(py_int_from_str),
        Value::Binary(b) => std::str::from_utf8(b).ok().and_then(py_int_from_str),
        _ => None,
    }
}

/// Python's `float(v)` for any value, `None` where Python raises.
pub(crate) fn py_float(v: &Value) -> Option<f64> {
    match v {
        Value::Boolean(_) | Value::Integer(_) | Value::F32(_) | Value::F64(_) => match number(v)? {
            Num::Int(n) => Some(n as f64),
            Num::Float(f) => Some(f),
        },
        Value::String(s) => s.as_str().and_then(py_float_from_str),
        Value::Binary(b) => std::str::from_utf8(b).ok().and_then(py_float_from_str),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_across_types_like_python() {
        assert!(py_eq(&Value::from(1), &Value::Boolean(true)));
        assert!(py_eq(&Value::from(1), &Value::F64(1.0)));
        assert!(!py_eq(&Value::from(1), &Value::from("1")));
        assert!(!py_eq(&Value::F64(f64::NAN), &Value::F64(f64::NAN)));
        let a = Value::Map(vec![
            (Value::from("a"), Value::from(1)),
            (Value::from("b"), Value::Nil),
        ]);
        let b = Value::Map(vec![
            (Value::from("b"), Value::Nil),
            (Value::from("a"), Value::F64(1.0)),
        ]);
        assert!(py_eq(&a, &b));
    }

    #[test]
    fn int_and_float_of_strings_follow_python() {
        assert_eq!(py_int_from_str(" 4505 "), Some(4505));
        assert_eq!(py_int_from_str("0755"), Some(755));
        assert_eq!(py_int_from_str("1_000"), Some(1000));
        assert_eq!(py_int_from_str("1__0"), None);
        assert_eq!(py_int_from_str("0x1f"), None);
        assert_eq!(py_int_from_str("abc"), None);
        assert_eq!(py_int_from_str("-"), None);
        assert_eq!(py_float_from_str("1e3"), Some(1000.0));
        assert_eq!(py_float_from_str("-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(py_float_from_str("--1"), None);
        assert_eq!(py_float_from_str("1.5x"), None);
    }

    #[test]
    fn str_of_scalars_matches_python() {
        assert_eq!(py_str(&Value::Nil), "None");
        assert_eq!(py_str(&Value::Boolean(true)), "True");
        assert_eq!(py_str(&Value::from(123)), "123");
        assert_eq!(py_str(&Value::F64(2.0)), "2.0");
        assert_eq!(
            py_str(&Value::Array(vec![Value::from("a"), Value::from(1)])),
            "['a', 1]"
        );
    }
}
