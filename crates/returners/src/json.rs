//! `salt.utils.json.dumps(obj)`: Python's `json.dumps` with `ensure_ascii=False` and the
//! default separators (`", "`, `": "`), over a msgpack value as a minion's Python code
//! sees it. The returners write exactly these bytes.
//!
//! Python's rules kept: dict keys that are `int`, `float`, `bool` or `None` become
//! strings (`1` → `"1"`, `True` → `"true"`); equal keys collapse into one entry at the
//! first one's place with the last one's value, as in a Python dict (`1`, `1.0` and
//! `True` are equal keys); floats are `repr` (`NaN`, `Infinity` for the others); only
//! `"`, `\` and control characters are escaped. What Python's `json` refuses is an
//! [`Error::Json`] with Python's `TypeError` text (`bytes` values, `bytes` keys, ...).
//! A `str` that is not UTF-8 is read lossily, as Halite's Python views read it.
//! Nesting deeper than [`MAX_DEPTH`] is refused, as Python's recursion limit refuses it.

use crate::Error;
use halite_output::{py_repr, py_type_name};
use halite_proto::Value;

/// Deepest nesting encoded.
pub const MAX_DEPTH: usize = 512;

/// `json.dumps(value, ensure_ascii=False)`.
pub fn dumps(value: &Value) -> Result<String, Error> {
    let mut out = String::new();
    encode(value, 0, &mut out)?;
    Ok(out)
}

fn encode(value: &Value, depth: usize, out: &mut String) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(Error::Json(
            "maximum recursion depth exceeded while encoding a JSON object".to_owned(),
        ));
    }
    match value {
        Value::Nil => out.push_str("null"),
        Value::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Integer(i) => out.push_str(&i.to_string()),
        Value::F32(f) => out.push_str(&float_text(f64::from(*f))),
        Value::F64(f) => out.push_str(&float_text(*f)),
        Value::String(s) => push_str(&String::from_utf8_lossy(s.as_bytes()), out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                encode(item, depth + 1, out)?;
            }
            out.push(']');
        }
        Value::Map(entries) => {
            let mut keys: Vec<(Key, String, &Value)> = Vec::with_capacity(entries.len());
            for (k, v) in entries {
                let (key, text) = dict_key(k)?;
                match keys.iter_mut().find(|(seen, _, _)| *seen == key) {
                    Some(slot) => slot.2 = v,
                    None => keys.push((key, text, v)),
                }
            }
            out.push('{');
            for (i, (_, text, v)) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_str(text, out);
                out.push_str(": ");
                encode(v, depth + 1, out)?;
            }
            out.push('}');
        }
        Value::Binary(_) | Value::Ext(..) => {
            return Err(Error::Json(format!(
                "Object of type {} is not JSON serializable",
                py_type_name(value)
            )))
        }
    }
    Ok(())
}

/// A dict key as Python compares keys: numbers (and bools) by value, strings by text.
#[derive(Debug, PartialEq)]
enum Key {
    Str(String),
    Int(i128),
    Float(u64),
    None,
}

fn float_key(f: f64) -> Key {
    if f.fract() == 0.0 && f.abs() < 1e30 {
        // Integral floats equal the int of the same value (`1.0 == 1`).
        Key::Int(f as i128)
    } else {
        Key::Float(f.to_bits())
    }
}

/// The key's identity and its JSON text, or Python's `TypeError` for a key `json`
/// refuses.
fn dict_key(k: &Value) -> Result<(Key, String), Error> {
    Ok(match k {
        Value::String(s) => {
            let text = String::from_utf8_lossy(s.as_bytes()).into_owned();
            (Key::Str(text.clone()), text)
        }
        Value::Integer(i) => {
            let n = i
                .as_i64()
                .map(i128::from)
                .or_else(|| i.as_u64().map(i128::from))
                .unwrap_or_default();
            (Key::Int(n), i.to_string())
        }
        Value::Boolean(b) => (
            Key::Int(i128::from(*b)),
            if *b { "true" } else { "false" }.to_owned(),
        ),
        Value::F32(f) => (float_key(f64::from(*f)), float_text(f64::from(*f))),
        Value::F64(f) => (float_key(*f), float_text(*f)),
        Value::Nil => (Key::None, "null".to_owned()),
        other => {
            return Err(Error::Json(format!(
                "keys must be str, int, float, bool or None, not {}",
                py_type_name(other)
            )))
        }
    })
}

/// `json`'s float text: `repr`, with `NaN`, `Infinity` and `-Infinity`.
fn float_text(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_owned()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else {
        py_repr(&Value::F64(f))
    }
}

/// `json.encoder.py_encode_basestring`: only `"`, `\` and control characters escaped.
fn push_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::{bin, map, s};

    #[test]
    fn dumps_writes_pythons_compact_json_without_ascii_escapes() {
        let v = map([
            ("success", Value::Boolean(false)),
            (
                "return",
                map([
                    ("pid", Value::from(42)),
                    ("stdout", s("ok \"quoted\"\\ é\t\u{1}\u{7f}")),
                ]),
            ),
            ("retcode", Value::from(2)),
            (
                "fun_args",
                Value::Array(vec![s("echo ok; exit 2"), Value::Nil]),
            ),
            ("f", Value::F64(0.1)),
            ("big", Value::F64(1e16)),
            ("nan", Value::F64(f64::NAN)),
            ("inf", Value::F64(f64::NEG_INFINITY)),
            ("half", Value::F32(0.5)),
            ("empty", Value::Array(vec![])),
            ("none", Value::Map(vec![])),
        ]);
        assert_eq!(
            dumps(&v).unwrap(),
            "{\"success\": false, \"return\": {\"pid\": 42, \"stdout\": \"ok \\\"quoted\\\"\\\\ é\\t\\u0001\u{7f}\"}, \
             \"retcode\": 2, \"fun_args\": [\"echo ok; exit 2\", null], \"f\": 0.1, \"big\": 1e+16, \
             \"nan\": NaN, \"inf\": -Infinity, \"half\": 0.5, \"empty\": [], \"none\": {}}"
        );
    }

    #[test]
    fn dict_keys_become_strings_and_equal_keys_collapse_like_a_python_dict() {
        let v = Value::Map(vec![
            (Value::from(1), s("int")),
            (Value::Boolean(true), s("bool")),
            (Value::F64(2.5), s("float")),
            (Value::Nil, s("none")),
            (s("1"), s("text")),
            (Value::F64(1.0), s("last")),
        ]);
        assert_eq!(
            dumps(&v).unwrap(),
            "{\"1\": \"last\", \"2.5\": \"float\", \"null\": \"none\", \"1\": \"text\"}"
        );
    }

    #[test]
    fn what_python_json_refuses_is_its_type_error() {
        assert_eq!(
            dumps(&map([("b", bin(vec![1u8]))])),
            Err(Error::Json(
                "Object of type bytes is not JSON serializable".into()
            ))
        );
        assert_eq!(
            dumps(&Value::Map(vec![(Value::Array(vec![]), Value::Nil)])),
            Err(Error::Json(
                "keys must be str, int, float, bool or None, not list".into()
            ))
        );
        let mut deep = Value::Nil;
        for _ in 0..=MAX_DEPTH + 1 {
            deep = Value::Array(vec![deep]);
        }
        assert!(matches!(dumps(&deep), Err(Error::Json(_))));
    }
}
