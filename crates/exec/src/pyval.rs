//! Python's view of msgpack values: `str()`, `repr()`, `type()`, `int()` and Salt's
//! `is_true`, for the texts Salt builds with f-strings (`k=v` in error messages,
//! `test.arg_repr`, `test.arg_type`). `str()`, `repr()` and `type()` are
//! `halite_output`'s, shared with the outputters and the config loader; `int()`, `==`
//! and the `str` text are `halite_pycall`'s, shared with the runners.
//!
//! A msgpack `str` holding bytes that are not UTF-8 is shown lossily; Python would hold
//! `bytes` there.

pub(crate) use halite_output::{py_repr, py_str, py_type_name, str_repr as repr_str};
pub(crate) use halite_proto::value::truthy;
pub(crate) use halite_pycall::pyval::{py_eq, py_int, text};

use halite_pycall::pyval::parse_int;
use rmpv::Value;

/// Python `repr(tuple(items))`.
pub(crate) fn tuple_repr(items: &[Value]) -> String {
    let inner: Vec<String> = items.iter().map(py_repr).collect();
    match inner.len() {
        1 => format!("({},)", inner[0]),
        _ => format!("({})", inner.join(", ")),
    }
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
