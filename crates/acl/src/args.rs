//! The request's arguments as Salt's `__args_check` sees them, with bounded cost.

use std::borrow::Cow;

use halite_target::pyvalue;
use rmpv::Value;

use crate::acl::ArgSpec;
use crate::check::MissKind;
use crate::pattern::{Pattern, RegexTrouble};

/// Deepest nesting of a list/map argument that is rendered with `str()` for a regex.
pub const MAX_ARG_DEPTH: usize = 16;

/// Most values (all levels together) in a list/map argument rendered with `str()`.
pub const MAX_ARG_NODES: usize = 1024;

/// Most entries of the trailing `__kwarg__` map that are looked at; a larger map
/// satisfies no `kwargs:` rule.
pub const MAX_KWARGS: usize = 1024;

/// One function's arguments: positional ones, and the trailing `__kwarg__` map if any.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Args<'a> {
    positional: &'a [Value],
    kwargs: Option<&'a [(Value, Value)]>,
}

impl<'a> Args<'a> {
    /// Splits an arg list as Salt does: when the last element is a map with a `__kwarg__`
    /// key, it supplies the kwargs and is not positional. Anything but a list (or no value
    /// at all) is no arguments, so every `args:`/`kwargs:` rule fails on it.
    pub(crate) fn split(value: Option<&'a Value>) -> Self {
        let none = Self {
            positional: &[],
            kwargs: None,
        };
        let Some(Value::Array(items)) = value else {
            return none;
        };
        match items.split_last() {
            Some((Value::Map(map), rest)) if pyvalue::dict_get(map, "__kwarg__").is_some() => {
                Self {
                    positional: rest,
                    kwargs: Some(map),
                }
            }
            _ => Self {
                positional: items,
                kwargs: None,
            },
        }
    }

    /// Arguments of a runner/wheel request: `arg` and `kwarg` taken as they are (Salt's
    /// `spec_check` reads `kwarg["arg"]` and `kwarg["kwarg"]`, with no `__kwarg__` split).
    pub(crate) fn spec(arg: Option<&'a Value>, kwarg: Option<&'a Value>) -> Self {
        Self {
            positional: match arg {
                Some(Value::Array(items)) => items,
                _ => &[],
            },
            kwargs: match kwarg {
                Some(Value::Map(map)) => Some(map),
                _ => None,
            },
        }
    }

    /// Salt's `__args_check` for one spec: `Ok` when it passes, else the first failure.
    pub(crate) fn check(&self, spec: &ArgSpec) -> Result<(), MissKind> {
        let ArgSpec::Valid { args, kwargs } = spec else {
            return Err(MissKind::MalformedArgSpec);
        };
        for (index, rule) in args.iter().enumerate() {
            let Some(value) = self.positional.get(index) else {
                return Err(MissKind::ArgMissing { index });
            };
            if let Some(pattern) = rule {
                let Some(text) = py_str(value) else {
                    return Err(MissKind::ArgTooComplex { index });
                };
                matches(pattern, &text).map_err(|ok| match ok {
                    None => MissKind::ArgMismatch { index },
                    Some(trouble) => trouble,
                })?;
            }
        }
        for (name, rule) in kwargs {
            let Some(map) = self.kwargs else {
                return Err(MissKind::KwargMissing { name: name.clone() });
            };
            if map.len() > MAX_KWARGS {
                return Err(MissKind::TooManyKwargs);
            }
            let Some(value) = pyvalue::dict_get(map, name) else {
                return Err(MissKind::KwargMissing { name: name.clone() });
            };
            if let Some(pattern) = rule {
                let Some(text) = py_str(value) else {
                    return Err(MissKind::KwargTooComplex { name: name.clone() });
                };
                matches(pattern, &text).map_err(|ok| match ok {
                    None => MissKind::KwargMismatch { name: name.clone() },
                    Some(trouble) => trouble,
                })?;
            }
        }
        Ok(())
    }
}

/// `Ok` on a match; `Err(None)` on no match; `Err(Some(miss))` when the regex could not say.
fn matches(pattern: &Pattern, text: &str) -> Result<(), Option<MissKind>> {
    match pattern.is_match(text) {
        Ok(true) => Ok(()),
        Ok(false) => Err(None),
        Err(trouble) => Err(Some(regex_miss(pattern, trouble))),
    }
}

/// The miss for a regex that gave no answer.
pub(crate) fn regex_miss(pattern: &Pattern, trouble: RegexTrouble) -> MissKind {
    let pattern = pattern.source().to_owned();
    match trouble {
        RegexTrouble::Invalid => MissKind::InvalidRegex { pattern },
        RegexTrouble::Failed => MissKind::RegexFailed { pattern },
    }
}

/// Python `str(value)`, or `None` for a list/map nested deeper than [`MAX_ARG_DEPTH`] or
/// holding more than [`MAX_ARG_NODES`] values (such an argument matches no regex).
pub(crate) fn py_str(value: &Value) -> Option<Cow<'_, str>> {
    if matches!(value, Value::Array(_) | Value::Map(_)) {
        let mut budget = MAX_ARG_NODES;
        if !within_bounds(value, MAX_ARG_DEPTH, &mut budget) {
            return None;
        }
    }
    Some(pyvalue::to_str(value))
}

/// Whether `value` nests at most `depth` levels and has at most `budget` values; recursion
/// stops at `depth`.
fn within_bounds(value: &Value, depth: usize, budget: &mut usize) -> bool {
    let Some(left) = budget.checked_sub(1) else {
        return false;
    };
    *budget = left;
    match value {
        Value::Array(items) => {
            depth > 0 && items.iter().all(|v| within_bounds(v, depth - 1, budget))
        }
        Value::Map(entries) => {
            depth > 0
                && entries.iter().all(|(k, v)| {
                    within_bounds(k, depth - 1, budget) && within_bounds(v, depth - 1, budget)
                })
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::json;

    #[test]
    fn trailing_kwarg_map_supplies_kwargs_and_is_not_positional() {
        let v = json(r#"["a", {"__kwarg__": true, "k": 1}]"#);
        let args = Args::split(Some(&v));
        assert_eq!(args.positional.len(), 1);
        assert!(args.kwargs.is_some());
    }

    #[test]
    fn kwarg_marker_is_a_key_test_not_a_truth_test() {
        let v = json(r#"[{"__kwarg__": false, "k": 1}]"#);
        let args = Args::split(Some(&v));
        assert!(args.positional.is_empty());
        assert!(args.kwargs.is_some());
    }

    #[test]
    fn map_without_marker_or_not_last_stays_positional() {
        let v = json(r#"[{"k": 1}]"#);
        assert_eq!(Args::split(Some(&v)).positional.len(), 1);
        let v = json(r#"[{"__kwarg__": true}, "a"]"#);
        let args = Args::split(Some(&v));
        assert_eq!(args.positional.len(), 2);
        assert!(args.kwargs.is_none());
    }

    #[test]
    fn non_list_arguments_are_no_arguments() {
        for text in [r#""ls -l""#, "null", "{}", "7"] {
            let v = json(text);
            let args = Args::split(Some(&v));
            assert!(
                args.positional.is_empty() && args.kwargs.is_none(),
                "{text}"
            );
        }
        assert!(Args::split(None).positional.is_empty());
    }

    #[test]
    fn py_str_follows_python_str() {
        let cases = [
            ("1", "1"),
            ("1.5", "1.5"),
            ("true", "True"),
            ("null", "None"),
            (r#""x""#, "x"),
            (r#"["a", 1]"#, "['a', 1]"),
            (r#"{"a": null}"#, "{'a': None}"),
        ];
        for (text, want) in cases {
            assert_eq!(py_str(&json(text)).as_deref(), Some(want), "{text}");
        }
    }

    #[test]
    fn py_str_refuses_deep_or_large_containers() {
        let mut deep = Value::from("x");
        for _ in 0..=MAX_ARG_DEPTH {
            deep = Value::Array(vec![deep]);
        }
        assert!(py_str(&deep).is_none());
        let wide = Value::Array(vec![Value::from(1); MAX_ARG_NODES]);
        assert!(py_str(&wide).is_none());
        let ok = Value::Array(vec![Value::from(1); MAX_ARG_NODES - 1]);
        assert!(py_str(&ok).is_some());
    }
}
