//! Python's view of msgpack values, for the texts and comparisons the runners make:
//! `str()`, `repr()`, `type()` (shared with the outputters), truthiness, `int()` and `==`
//! (shared with the execution modules through `halite_pycall`).
//!
//! A msgpack `str` holding bytes that are not UTF-8 is shown lossily; Python would hold
//! `bytes` there.

use std::borrow::Cow;

use rmpv::Value;

pub(crate) use halite_output::{py_repr, py_str, py_type_name};
pub(crate) use halite_proto::value::{get, map, truthy};
pub(crate) use halite_pycall::pyval::{dict_set, lookup, py_eq, py_int};

/// The text of a `str` (or `bin`) value, lossily decoded.
pub(crate) fn text(v: &Value) -> Option<Cow<'_, str>> {
    match v {
        Value::Binary(b) => Some(String::from_utf8_lossy(b)),
        other => halite_pycall::pyval::text(other),
    }
}

/// `key in dict` for a map value (`false` for anything else).
pub(crate) fn has_key(dict: &Value, key: &Value) -> bool {
    matches!(dict, Value::Map(entries) if entries.iter().any(|(k, _)| py_eq(k, key)))
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
    fn split_input_takes_lists_or_comma_strings() {
        assert_eq!(split_input(&Value::from("a*, b ,c")), ["a*", "b", "c"]);
        assert_eq!(
            split_input(&Value::Array(vec![Value::from("x,y"), Value::from(3)])),
            ["x,y", "3"]
        );
        assert_eq!(split_input(&Value::from(7)), ["7"]);
    }
}
