//! Command-line words to job arguments, as Salt's `salt.utils.args` types them:
//! [`parse_input`] for the `salt`, `salt-call` and `salt-run` command lines, and the
//! [`parse_kwarg`] / [`yamlify_arg`] steps the minion also applies to `name=value`
//! strings it receives (`minion.py · load_args_and_kwargs`).
//!
//! `name=value` words become keyword arguments gathered into a trailing
//! `{"__kwarg__": true, ...}` map, and every value is typed as YAML (`1` → int, `[1, 2]` →
//! list, `yes` → true) by the same loader as the config files, with Salt's exceptions.

use rmpv::Value;

use crate::pyval::py_eq;

/// `salt.utils.args.parse_kwarg`: `name=value` where the name matches
/// `^([^\d\W][\w.-]*)=(?!=)(.*)$` (Python's `.` stops at a newline; `$` may sit before
/// a final one).
pub fn parse_kwarg(arg: &str) -> Option<(&str, &str)> {
    let (name, value) = arg.split_once('=')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    if !((first.is_alphanumeric() || first == '_') && !first.is_numeric()) {
        return None;
    }
    if !chars.all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '-')) {
        return None;
    }
    if value.starts_with('=') {
        return None;
    }
    let value = value.strip_suffix('\n').unwrap_or(value);
    if value.contains('\n') {
        return None;
    }
    Some((name, value))
}

/// `salt.utils.args.yamlify_arg`: types a string as YAML, keeping the original text
/// wherever Salt does (blank strings, digit/underscore runs, control whitespace, a
/// mapping or list not written in flow style, `#` comments that would eat the value,
/// `|` and `!`, anything that is not a scalar, list or mapping, and any load error).
pub fn yamlify_arg(arg: &str) -> Value {
    let original = || Value::from(arg);
    let trimmed = arg.trim();
    if matches!(trimmed, "" | "---" | "...") {
        return original();
    }
    if arg.contains('_') && trimmed.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return original();
    }
    if arg.contains(['\t', '\r', '\n']) {
        return original();
    }
    if arg.contains('#') {
        return match crate::yaml::load(arg) {
            Ok(Value::String(_) | Value::Nil) | Err(_) => original(),
            Ok(parsed) => parsed,
        };
    }
    if arg == "None" {
        return Value::Nil;
    }
    let Ok(parsed) = crate::yaml::load(arg) else {
        return original();
    };
    match parsed {
        Value::Map(_) if !arg.starts_with('{') => original(),
        Value::Array(_) if !arg.starts_with('[') => original(),
        Value::String(ref s) if s.as_bytes().is_empty() && matches!(arg, "|" | "!") => original(),
        Value::Nil if trimmed.starts_with('#') || arg == "!" => original(),
        Value::Map(_)
        | Value::Array(_)
        | Value::Nil
        | Value::String(_)
        | Value::Integer(_)
        | Value::F64(_)
        | Value::F32(_)
        | Value::Boolean(_) => parsed,
        Value::Binary(_) | Value::Ext(_, _) => original(),
    }
}

/// `salt.utils.args.parse_input(args, condition=True, no_parse=no_parse)`: every word
/// typed as YAML (except `name=value` words whose name is in `no_parse`), `name=value`
/// words gathered into a trailing `{"__kwarg__": true, ...}` map, and integers that read
/// as jids (`condition_input`: 20 characters) kept as strings.
pub fn parse_input(args: &[String], no_parse: &[String]) -> Vec<Value> {
    let args: Vec<Value> = args.iter().map(|a| Value::from(a.as_str())).collect();
    parse_input_values(&args, no_parse)
}

/// [`parse_input`] over values, as the master applies it to what a minion or an API
/// client sent: strings are parsed as command-line words, a map with `__kwarg__: true`
/// merges into the keyword arguments, anything else is a positional argument as it is.
pub fn parse_input_values(args: &[Value], no_parse: &[String]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut kwargs: Vec<(Value, Value)> = Vec::new();
    let set = |kwargs: &mut Vec<(Value, Value)>, key: Value, value: Value| match kwargs
        .iter_mut()
        .find(|(k, _)| py_eq(k, &key))
    {
        Some(slot) => slot.1 = value,
        None => kwargs.push((key, value)),
    };
    for arg in args {
        match arg {
            Value::String(text) => {
                let Some(word) = text.as_str() else {
                    out.push(arg.clone());
                    continue;
                };
                match parse_kwarg(word) {
                    Some((name, value)) => {
                        let value = if no_parse.iter().any(|n| n == name) {
                            Value::from(value)
                        } else {
                            yamlify_arg(value)
                        };
                        set(&mut kwargs, Value::from(name), value);
                    }
                    None => out.push(yamlify_arg(word)),
                }
            }
            Value::Map(entries)
                if entries.iter().any(|(k, v)| {
                    k.as_str() == Some("__kwarg__") && *v == Value::Boolean(true)
                }) =>
            {
                for (k, v) in entries {
                    if k.as_str() != Some("__kwarg__") {
                        set(&mut kwargs, k.clone(), v.clone());
                    }
                }
            }
            other => out.push(other.clone()),
        }
    }
    // `condition_input`: integers that read as jids stay strings.
    for v in &mut out {
        if let Value::Integer(i) = v {
            if i.to_string().len() == 20 {
                *v = Value::from(i.to_string());
            }
        }
    }
    if !kwargs.is_empty() {
        let mut map = vec![(Value::from("__kwarg__"), Value::Boolean(true))];
        map.extend(kwargs);
        out.push(Value::Map(map));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_from_a_minion_parse_as_salt_parse_input_does() {
        let kw = Value::Map(vec![
            (Value::from("__kwarg__"), Value::Boolean(true)),
            (Value::from("b"), Value::from(2)),
        ]);
        let plain_map = Value::Map(vec![(Value::from("k"), Value::from("v"))]);
        let got = parse_input_values(
            &[
                Value::from("1"),
                Value::from("a=[1, 2]"),
                Value::from(7),
                plain_map.clone(),
                kw,
                Value::from(12345678901234567890u64),
                Value::from("raw=yes"),
            ],
            &["raw".to_owned()],
        );
        assert_eq!(
            got,
            vec![
                Value::from(1),
                Value::from(7),
                plain_map,
                Value::from("12345678901234567890"),
                Value::Map(vec![
                    (Value::from("__kwarg__"), Value::Boolean(true)),
                    (
                        Value::from("a"),
                        Value::Array(vec![Value::from(1), Value::from(2)])
                    ),
                    (Value::from("b"), Value::from(2)),
                    (Value::from("raw"), Value::from("yes")),
                ]),
            ]
        );
        assert_eq!(
            parse_input_values(&[Value::from("x=1")], &[]),
            parse_input(&["x=1".to_owned()], &[])
        );
    }

    #[test]
    fn kwarg_strings_follow_the_salt_regex() {
        for (arg, want) in [
            ("a=1", Some(("a", "1"))),
            ("_x.y-z=v=w", Some(("_x.y-z", "v=w"))),
            ("a.b-c=1=2", Some(("a.b-c", "1=2"))),
            ("a==b", None),
            ("1a=b", None),
            ("=b", None),
            ("a b=c", None),
            ("echo hi", None),
            ("a=b\n", Some(("a", "b"))),
            ("a=b\nc", None),
            ("a=", Some(("a", ""))),
            ("plain", None),
        ] {
            assert_eq!(parse_kwarg(arg), want, "{arg:?}");
        }
    }

    #[test]
    fn yamlify_types_values_like_salt() {
        for (arg, want) in [
            ("1", Value::from(1)),
            ("two", Value::from("two")),
            ("1.5", Value::F64(1.5)),
            ("yes", Value::Boolean(true)),
            ("None", Value::Nil),
            ("~", Value::Nil),
            ("1_000", Value::from("1_000")),
            ("[1, 2]", Value::Array(vec![Value::from(1), Value::from(2)])),
            ("a: 1", Value::from("a: 1")),
            ("- a", Value::from("- a")),
            (
                "{a: 1}",
                Value::Map(vec![(Value::from("a"), Value::from(1))]),
            ),
            ("#", Value::from("#")),
            ("a #b", Value::from("a #b")),
            ("echo hi # c", Value::from("echo hi # c")),
            ("|", Value::from("|")),
            ("!", Value::from("!")),
            ("", Value::from("")),
            ("x\ty", Value::from("x\ty")),
            ("'quoted'", Value::from("quoted")),
            ("[unclosed", Value::from("[unclosed")),
        ] {
            assert_eq!(yamlify_arg(arg), want, "{arg:?}");
        }
    }

    #[test]
    fn cli_words_become_typed_args_and_a_kwarg_map() {
        let words: Vec<String> = [
            "1",
            "two",
            "k=[1, 2]",
            "20240101000000000000",
            "raw=1",
            "k=3",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let got = parse_input(&words, &["raw".to_owned()]);
        assert_eq!(
            halite_output::py_repr(&Value::Array(got)),
            "[1, 'two', '20240101000000000000', {'__kwarg__': True, 'k': 3, 'raw': '1'}]"
        );
        assert!(parse_input(&[], &[]).is_empty());
    }
}
