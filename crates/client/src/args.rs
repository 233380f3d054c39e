//! Command-line arguments to job arguments: `salt.utils.args.parse_input`,
//! `yamlify_arg`, `parse_kwarg` and `condition_input`.
//!
//! `k=v` words become keyword arguments, every value is typed as YAML (`1` → int,
//! `[1,2]` → list, `yes` → true) with Salt's exceptions, and keyword arguments travel as a
//! trailing `{"__kwarg__": true, ...}` map.

use halite_proto::value::s;
use halite_proto::Value;

/// `yamlify_arg`: types one argument as YAML, keeping the original text where Salt does.
pub fn yamlify_arg(arg: &str) -> Value {
    let t = arg.trim();
    if matches!(t, "" | "---" | "...") {
        return s(arg);
    }
    if arg.contains('_') && t.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return s(arg);
    }
    if arg.contains(['\t', '\r', '\n']) {
        return s(arg);
    }
    if arg == "None" {
        return Value::Nil;
    }
    let Ok(parsed) = halite_config::yaml::load(arg) else {
        return s(arg);
    };
    if arg.contains('#') {
        return match parsed {
            Value::String(_) | Value::Nil => s(arg),
            other => other,
        };
    }
    match parsed {
        Value::Map(_) if !arg.starts_with('{') => s(arg),
        Value::Array(_) if !arg.starts_with('[') => s(arg),
        Value::Map(_) | Value::Array(_) => parsed,
        Value::String(ref v) if v.as_bytes().is_empty() && (arg == "|" || arg == "!") => s(arg),
        Value::Nil if t.starts_with('#') || arg == "!" => s(arg),
        Value::Nil | Value::String(_) | Value::Integer(_) | Value::F64(_) | Value::F32(_) => parsed,
        Value::Boolean(_) => parsed,
        _ => s(arg),
    }
}

/// `parse_kwarg`: `name=value` where name is an identifier (`^([^\d\W][\w.-]*)=(?!=)(.*)$`).
pub fn parse_kwarg(arg: &str) -> Option<(&str, &str)> {
    let (name, value) = arg.split_once('=')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    if !(first.is_alphabetic() || first == '_') {
        return None;
    }
    if !chars.all(|c| c.is_alphanumeric() || c == '_' || c == '.' || c == '-') {
        return None;
    }
    if value.starts_with('=') {
        return None;
    }
    Some((name, value))
}

/// `parse_input(args, condition=True)`: positional args and a trailing `__kwarg__` map.
pub fn parse_input(args: &[String], no_parse: &[String]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut kwargs: Vec<(Value, Value)> = Vec::new();
    for arg in args {
        match parse_kwarg(arg) {
            Some((name, value)) => {
                let v = if no_parse.iter().any(|n| n == name) {
                    s(value)
                } else {
                    yamlify_arg(value)
                };
                match kwargs
                    .iter_mut()
                    .find(|(k, _)| halite_proto::value::str_of(k) == Some(name))
                {
                    Some(slot) => slot.1 = v,
                    None => kwargs.push((s(name), v)),
                }
            }
            None => out.push(condition_arg(yamlify_arg(arg))),
        }
    }
    if !kwargs.is_empty() {
        let mut kw = vec![(s("__kwarg__"), Value::from(true))];
        kw.extend(kwargs);
        out.push(Value::Map(kw));
    }
    out
}

/// `condition_input`: integers that look like jids are sent as strings.
fn condition_arg(v: Value) -> Value {
    if let Value::Integer(i) = &v {
        let text = i.to_string();
        if halite_proto::jid::is_jid(&text) {
            return s(text);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positional_args_are_yaml_typed_like_salt() {
        assert_eq!(yamlify_arg("1"), Value::from(1));
        assert_eq!(yamlify_arg("two"), s("two"));
        assert_eq!(yamlify_arg("yes"), Value::from(true));
        assert_eq!(yamlify_arg("None"), Value::Nil);
        assert_eq!(yamlify_arg("1_000"), s("1_000"));
        assert_eq!(yamlify_arg("a: b"), s("a: b"));
        assert_eq!(
            yamlify_arg("[1, 2]"),
            Value::Array(vec![Value::from(1), Value::from(2)])
        );
        assert_eq!(yamlify_arg("- x"), s("- x"));
        assert_eq!(yamlify_arg(""), s(""));
        assert_eq!(yamlify_arg("echo hi # c"), s("echo hi # c"));
    }

    #[test]
    fn kwargs_follow_salts_regex() {
        assert_eq!(parse_kwarg("k=v"), Some(("k", "v")));
        assert_eq!(parse_kwarg("a.b-c=1=2"), Some(("a.b-c", "1=2")));
        assert_eq!(parse_kwarg("1k=v"), None);
        assert_eq!(parse_kwarg("k==v"), None);
        assert_eq!(parse_kwarg("echo hi"), None);
    }

    #[test]
    fn parse_input_appends_a_kwarg_map() {
        let args: Vec<String> = ["1", "two", "k=v"].iter().map(|x| x.to_string()).collect();
        let got = parse_input(&args, &[]);
        assert_eq!(got[0], Value::from(1));
        assert_eq!(got[1], s("two"));
        assert_eq!(
            got[2],
            Value::Map(vec![(s("__kwarg__"), Value::from(true)), (s("k"), s("v"))])
        );
        let jid = vec!["20261122070509000042".to_string()];
        assert_eq!(parse_input(&jid, &[]), vec![s("20261122070509000042")]);
    }
}
