//! Python semantics over `rmpv::Value`, for the places where Salt's behaviour depends on
//! them: `==` between keys and list items (`1 == 1.0 == True`), `str()` of an option value
//! (numeric ids become strings), `repr()` in messages, and `int()`/`float()` of strings
//! (Salt accepts `publish_port: "4505"`).

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

/// Python's `type(v).__name__`.
pub(crate) fn py_type_name(v: &Value) -> &'static str {
    match v {
        Value::Nil => "NoneType",
        Value::Boolean(_) => "bool",
        Value::Integer(_) => "int",
        Value::F32(_) | Value::F64(_) => "float",
        Value::String(_) => "str",
        Value::Binary(_) => "bytes",
        Value::Array(_) => "list",
        Value::Map(_) => "dict",
        Value::Ext(..) => "object",
    }
}

/// Python's `repr(float)`: shortest round-trip digits, fixed notation for exponents in
/// `-4..16`, else `1e+20` style.
pub(crate) fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let point = exp + 1;
        let body = if point <= 0 {
            format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
        } else {
            let point = point as usize;
            if digits.len() <= point {
                format!("{digits}{}.0", "0".repeat(point - digits.len()))
            } else {
                format!("{}.{}", &digits[..point], &digits[point..])
            }
        };
        format!("{sign}{body}")
    } else {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{frac}e{exp_sign}{:02}", exp.unsigned_abs())
    }
}

fn int_string(v: &rmpv::Integer) -> String {
    v.as_i64()
        .map(|n| n.to_string())
        .or_else(|| v.as_u64().map(|n| n.to_string()))
        .unwrap_or_default()
}

/// Python's `str(v)`.
pub(crate) fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        Value::Array(_) | Value::Map(_) | Value::Binary(_) | Value::Ext(..) => py_repr(v),
        Value::Nil => "None".to_owned(),
        Value::Boolean(true) => "True".to_owned(),
        Value::Boolean(false) => "False".to_owned(),
        Value::Integer(i) => int_string(i),
        Value::F32(f) => float_repr(f64::from(*f)),
        Value::F64(f) => float_repr(*f),
    }
}

/// Python's `repr(v)` (close enough for messages: non-ASCII text is shown as is).
pub(crate) fn py_repr(v: &Value) -> String {
    match v {
        Value::String(s) => repr_str(&String::from_utf8_lossy(s.as_bytes())),
        Value::Binary(b) => repr_bytes(b),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(py_repr).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Map(pairs) => {
            let pairs: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{}: {}", py_repr(k), py_repr(v)))
                .collect();
            format!("{{{}}}", pairs.join(", "))
        }
        Value::Ext(..) => "<object>".to_owned(),
        other => py_str(other),
    }
}

fn repr_str(s: &str) -> String {
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
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

fn repr_bytes(b: &[u8]) -> String {
    let mut out = String::from("b'");
    for &byte in b {
        match byte {
            b'\\' => out.push_str("\\\\"),
            b'\'' => out.push_str("\\'"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(char::from(byte)),
            _ => out.push_str(&format!("\\x{byte:02x}")),
        }
    }
    out.push('\'');
    out
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
    fn float_repr_matches_python() {
        let cases = [
            (1.5, "1.5"),
            (10.0, "10.0"),
            (-0.0, "-0.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123456.789, "123456.789"),
            (1e100, "1e+100"),
            (f64::INFINITY, "inf"),
        ];
        for (f, want) in cases {
            assert_eq!(float_repr(f), want, "{f}");
        }
    }

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
        assert_eq!(py_repr(&Value::from("it's")), "\"it's\"");
        assert_eq!(
            py_str(&Value::Array(vec![Value::from("a"), Value::from(1)])),
            "['a', 1]"
        );
    }
}
