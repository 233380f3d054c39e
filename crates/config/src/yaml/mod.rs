//! Salt's YAML loader: libyaml parsing, PyYAML YAML 1.1 typing, Salt's constructor tweaks.
//!
//! `load` turns a YAML document into an `rmpv::Value` the way
//! `salt.utils.yaml.safe_load` turns it into Python data:
//!
//! | YAML (plain)                     | Value                 |
//! |----------------------------------|-----------------------|
//! | `yes`, `No`, `ON`, `false`, ...  | `Boolean`             |
//! | `0x1f`, `0b11`, `1_000`, `1:30`  | `Integer` (31, 3, 1000, 90) |
//! | `0755`                           | `Integer` 755 (Salt strips leading zeros) |
//! | `1.5`, `.inf`, `3.`              | `F64`                 |
//! | `~`, `null`, empty               | `Nil`                 |
//! | `1e3`, `2001-12-14`, `yEs`       | `String`              |
//!
//! Quoted and block scalars are always strings (`'0755'` stays `"0755"`). Mapping keys
//! keep document order. See `construct` for the deviations on pathological inputs.

mod compose;
mod construct;
mod events;
mod resolve;

use rmpv::Value;

/// A document that is not valid YAML, or that Salt's loader would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct YamlError {
    /// 1-based line of the offending token or node.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong, in PyYAML's wording where it has one.
    pub message: String,
}

impl YamlError {
    fn at(mark: events::Mark, message: impl Into<String>) -> YamlError {
        YamlError {
            line: mark.line,
            column: mark.column,
            message: message.into(),
        }
    }

    fn internal(message: &str) -> YamlError {
        YamlError {
            line: 1,
            column: 1,
            message: message.to_owned(),
        }
    }
}

impl From<events::SyntaxError> for YamlError {
    fn from(err: events::SyntaxError) -> YamlError {
        YamlError::at(err.mark, err.message)
    }
}

/// Loads one YAML document; an empty stream is `Value::Nil`.
///
/// Never panics; every malformed or hostile input is a `YamlError`.
pub fn load(input: &str) -> Result<Value, YamlError> {
    load_bytes(input.as_bytes())
}

/// Like [`load`] for raw file contents; input that is not UTF-8 is an error.
pub fn load_bytes(input: &[u8]) -> Result<Value, YamlError> {
    match compose::compose(input)? {
        None => Ok(Value::Nil),
        Some(doc) => construct::construct(&doc),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_output::py_repr;

    /// Documents and Python's `repr(salt.utils.yaml.safe_load(doc))` in the stock Salt
    /// 3008.3 venv ("ERR" where Salt raises). One deliberate deviation is marked inline.
    #[test]
    fn documents_load_like_salt_yaml() {
        let cases: &[(&str, &str)] = &[
            ("a: 0755", "{'a': 755}"),
            ("a: 0o755", "{'a': '0o755'}"),
            ("a: 0x1f", "{'a': 31}"),
            ("a: 0xFF", "{'a': 255}"),
            ("a: -0x1f", "{'a': -31}"),
            ("a: 0b101", "{'a': 5}"),
            ("a: -0b1", "{'a': -1}"),
            ("a: 0b2", "{'a': '0b2'}"),
            ("a: 1_000", "{'a': 1000}"),
            ("a: 0", "{'a': 0}"),
            ("a: 00", "{'a': 0}"),
            ("a: -0755", "{'a': -493}"),
            ("a: +12", "{'a': 12}"),
            ("a: -0", "{'a': 0}"),
            ("a: 1:30", "{'a': 90}"),
            ("a: 190:20:30", "{'a': 685230}"),
            ("a: 1:60", "{'a': '1:60'}"),
            ("a: 0:30", "{'a': '0:30'}"),
            ("a: 1.5", "{'a': 1.5}"),
            ("a: 1e3", "{'a': '1e3'}"),
            ("a: 1.0e3", "{'a': '1.0e3'}"),
            ("a: 1.0e+3", "{'a': 1000.0}"),
            ("a: 6.8523015e+5", "{'a': 685230.15}"),
            ("a: 685.230_15e+03", "{'a': 685230.15}"),
            ("a: 685_230.15", "{'a': 685230.15}"),
            ("a: 190:20:30.15", "{'a': 685230.15}"),
            ("a: .inf", "{'a': inf}"),
            ("a: -.Inf", "{'a': -inf}"),
            ("a: +.INF", "{'a': inf}"),
            ("a: .nan", "{'a': nan}"),
            ("a: .NaN", "{'a': nan}"),
            ("a: -.nan", "{'a': '-.nan'}"),
            ("a: 3.", "{'a': 3.0}"),
            ("a: .5", "{'a': 0.5}"),
            ("a: ._", "{'a': '._'}"),
            ("a: yes", "{'a': True}"),
            ("a: Yes", "{'a': True}"),
            ("a: YES", "{'a': True}"),
            ("a: yEs", "{'a': 'yEs'}"),
            ("a: no", "{'a': False}"),
            ("a: NO", "{'a': False}"),
            ("a: on", "{'a': True}"),
            ("a: On", "{'a': True}"),
            ("a: Off", "{'a': False}"),
            ("a: OFF", "{'a': False}"),
            ("a: y", "{'a': 'y'}"),
            ("a: n", "{'a': 'n'}"),
            ("a: true", "{'a': True}"),
            ("a: True", "{'a': True}"),
            ("a: TRUE", "{'a': True}"),
            ("a: false", "{'a': False}"),
            ("a: ~", "{'a': None}"),
            ("a: null", "{'a': None}"),
            ("a: Null", "{'a': None}"),
            ("a: NULL", "{'a': None}"),
            ("a: nULL", "{'a': 'nULL'}"),
            ("a: ", "{'a': None}"),
            ("a: 2001-12-14", "{'a': '2001-12-14'}"),
            (
                "a: 2001-12-14 21:59:43.10 -5",
                "{'a': '2001-12-14 21:59:43.10 -5'}",
            ),
            ("a: 0777_1", "{'a': 7771}"),
            ("a: 1__0", "{'a': 10}"),
            ("a: 08", "{'a': '08'}"),
            ("a: 09.5", "{'a': 9.5}"),
            ("a: 99999999999999999999", "ERR"),
            ("a: -9223372036854775808", "{'a': -9223372036854775808}"),
            ("a: 18446744073709551615", "{'a': 18446744073709551615}"),
            ("a: '0755'", "{'a': '0755'}"),
            ("a: \"yes\"", "{'a': 'yes'}"),
            ("a: '~'", "{'a': '~'}"),
            ("a: \"\"", "{'a': ''}"),
            ("a: !!str 123", "{'a': '123'}"),
            ("a: !!int \"12\"", "{'a': 12}"),
            ("a: !!int 0755", "{'a': 755}"),
            ("a: !!float 1", "{'a': 1.0}"),
            ("a: !!float 1e3", "{'a': 1000.0}"),
            ("a: !!bool YeS", "{'a': True}"),
            ("a: !!null x", "{'a': None}"),
            ("a: !!timestamp 2020-01-01", "{'a': '2020-01-01'}"),
            ("a: !!python/unicode x", "{'a': 'x'}"),
            ("a: ! 123", "{'a': 123}"),
            ("a: ! '123'", "{'a': 123}"),
            ("a: !!str", "{'a': ''}"),
            ("a: |\n  0755\n", "{'a': '0755\\n'}"),
            ("a: salt", "{'a': 'salt'}"),
            ("a: a b", "{'a': 'a b'}"),
            ("a: \"a\\tb\"", "{'a': 'a\\tb'}"),
            ("a: 'it''s'", "{'a': \"it's\"}"),
            ("a: !!binary aGVsbG8=", "{'a': b'hello'}"),
            ("a: [1, '2', three, ~]", "{'a': [1, '2', 'three', None]}"),
            ("a: {x: 1, 'y': yes}", "{'a': {'x': 1, 'y': True}}"),
            ("", "None"),
            ("# nothing", "None"),
            ("~", "None"),
            ("--- \n...", "None"),
            ("a: 1\nb: [x, {c: d}]", "{'a': 1, 'b': ['x', {'c': 'd'}]}"),
            (
                "b: &b {x: 1, y: 5}\na: {<<: *b, x: 3}",
                "{'b': {'x': 1, 'y': 5}, 'a': {'y': 5, 'x': 3}}",
            ),
            (
                "b: &b {x: 1}\nc: &c {z: 2}\na: {<<: [*b, *c], w: 0}",
                "{'b': {'x': 1}, 'c': {'z': 2}, 'a': {'z': 2, 'x': 1, 'w': 0}}",
            ),
            ("x: &a [1, 2]\ny: *a", "{'x': [1, 2], 'y': [1, 2]}"),
            ("= : 1", "{'=': 1}"),
            ("1: a\n'1': b", "{1: 'a', '1': 'b'}"),
            ("? !!binary aGk=\n: v", "{b'hi': 'v'}"),
        ];
        for &(doc, want) in cases {
            let got = match load(doc) {
                Ok(value) => py_repr(&value),
                Err(_) => "ERR".to_owned(),
            };
            assert_eq!(got, want, "document {doc:?}");
        }
    }
}
