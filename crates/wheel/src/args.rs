//! How a wheel call's arguments come out of the master's clear `wheel` load
//! (`SyncClientMixin.low`).
//!
//! A load holding both `arg` and `kwarg` is called as `func(*arg, **kwarg)` ([`Explicit`]).
//! Any other load is Salt's historical form, where the function's arguments are fields of
//! the load itself (`{"fun": "key.accept", "match": "web*"}`): [`format_call`] takes each
//! parameter from the field of its name, with the default for a missing optional one, and
//! refuses a missing required one or a field that is neither a parameter nor one of the
//! client's own keywords ([`CLIENT_INTERNAL_KEYWORDS`]), with Salt's
//! `SaltInvocationError` texts.
//!
//! [`Explicit`]: WheelArgs::Explicit

use halite_output::py_str;
use halite_pycall::pyval::{dict_set, text};
use halite_pycall::Kwargs;
use rmpv::Value;

use crate::error::WheelError;
use crate::spec::FunSpec;

/// `salt.client.mixins.CLIENT_INTERNAL_KEYWORDS`: fields of a load that are the client's,
/// never a function's keyword argument (a function taking a parameter of that name still
/// gets it: `match`).
pub const CLIENT_INTERNAL_KEYWORDS: [&str; 14] = [
    "client",
    "cmd",
    "eauth",
    "fun",
    "kwarg",
    "match",
    "token",
    "__jid__",
    "__tag__",
    "__user__",
    "username",
    "password",
    "full_return",
    "print_event",
];

/// The arguments of one wheel call.
#[derive(Debug, Clone, PartialEq)]
pub enum WheelArgs {
    /// `func(*arg, **kwarg)`: the load had both `arg` and `kwarg`.
    Explicit {
        /// `arg`, as sent (a value that is not a list makes Python's `TypeError`).
        arg: Value,
        /// `kwarg`, as sent (a value that is not a map makes Python's `TypeError`).
        kwarg: Value,
    },
    /// The load's fields, in order, for Salt's `format_call`.
    Low(Vec<(Value, Value)>),
}

impl WheelArgs {
    /// The arguments a clear `wheel` load carries. The caller has taken its credential
    /// fields out (a key caller's `key` and `user`; `token`, `username`, `password`).
    /// A load that is not a map has no fields.
    pub fn from_load(load: &Value) -> WheelArgs {
        let fields = match load {
            Value::Map(entries) => entries.clone(),
            _ => Vec::new(),
        };
        let field = |name: &str| {
            fields
                .iter()
                .rev()
                .find(|(k, _)| text(k).as_deref() == Some(name))
                .map(|(_, v)| v.clone())
        };
        match (field("arg"), field("kwarg")) {
            (Some(arg), Some(kwarg)) => WheelArgs::Explicit { arg, kwarg },
            _ => WheelArgs::Low(fields),
        }
    }
}

/// The positional and keyword arguments of a call of `spec` (`args`, `kwargs`), and the
/// `fun_args` its events report (`args` plus the keyword dict when it is not empty).
pub(crate) struct Loaded {
    pub args: Vec<Value>,
    pub kwargs: Kwargs,
}

impl Loaded {
    /// `list(args) + ([kwargs] if kwargs else [])`.
    pub fn fun_args(&self) -> Value {
        let mut out = self.args.clone();
        if !self.kwargs.is_empty() {
            out.push(Value::Map(self.kwargs.clone()));
        }
        Value::Array(out)
    }
}

/// Sorts `args` for a call of `spec`. Explicit arguments are taken as they are (the call
/// itself checks them); a [`WheelArgs::Low`] load goes through [`format_call`].
pub(crate) fn load(spec: &FunSpec, args: &WheelArgs) -> Result<Loaded, WheelError> {
    match args {
        WheelArgs::Explicit { arg, kwarg } => {
            let args = match arg {
                Value::Array(items) => items.clone(),
                other => {
                    return Err(WheelError::TypeError(format!(
                        "{}() argument after * must be an iterable, not {}",
                        spec.pyname,
                        halite_output::py_type_name(other)
                    )))
                }
            };
            let kwargs = match kwarg {
                Value::Map(entries) => entries.clone(),
                other => {
                    return Err(WheelError::TypeError(format!(
                        "{}() argument after ** must be a mapping, not {}",
                        spec.pyname,
                        halite_output::py_type_name(other)
                    )))
                }
            };
            Ok(Loaded { args, kwargs })
        }
        WheelArgs::Low(fields) => format_call(spec, fields),
    }
}

/// `salt.utils.args.format_call(func, low, expected_extra_kws=CLIENT_INTERNAL_KEYWORDS)`.
///
/// The keyword dict holds every parameter with a default, in reverse parameter order
/// (Salt builds it with `dict(zip(args[::-1], defaults[::-1]))`), each the load's value of
/// that name or the default; required parameters are positional, in order. A function
/// taking `**kwargs` also gets every other field that is not an internal keyword.
pub(crate) fn format_call(spec: &FunSpec, fields: &[(Value, Value)]) -> Result<Loaded, WheelError> {
    // A Python dict: a repeated key keeps its first position and its last value.
    let mut data: Kwargs = Vec::new();
    for (k, v) in fields {
        dict_set(&mut data, k.clone(), v.clone());
    }
    let mut taken = vec![false; data.len()];
    let mut take = |name: &str| -> Option<Value> {
        let i = data
            .iter()
            .position(|(k, _)| text(k).as_deref() == Some(name))?;
        taken[i] = true;
        data.get(i).map(|(_, v)| v.clone())
    };
    let mut kwargs: Kwargs = Vec::new();
    for param in spec.params.iter().rev() {
        if let Some(default) = param.default {
            let val = take(param.name).unwrap_or_else(|| default.value());
            kwargs.push((Value::from(param.name), val));
        }
    }
    let mut args = Vec::new();
    let mut missing = 0usize;
    for param in spec.params.iter().filter(|p| p.default.is_none()) {
        match take(param.name) {
            Some(v) => args.push(v),
            None => missing += 1,
        }
    }
    if missing > 0 {
        let given = args.len();
        let count = given + missing;
        return Err(WheelError::Invocation(format!(
            "{} takes at least {count} argument{} ({given} given)",
            spec.pyname,
            if count > 1 { "s" } else { "" }
        )));
    }
    let extra: Vec<(Value, Value)> = data
        .into_iter()
        .zip(taken)
        .filter(|((k, _), taken)| {
            !taken && !text(k).is_some_and(|k| CLIENT_INTERNAL_KEYWORDS.contains(&k.as_ref()))
        })
        .map(|(kv, _)| kv)
        .collect();
    if spec.kwargs {
        kwargs.extend(extra);
        return Ok(Loaded { args, kwargs });
    }
    let target = format!("{}.{}", spec.module_path(), spec.pyname);
    match extra.as_slice() {
        [] => Ok(Loaded { args, kwargs }),
        [(one, _)] => Err(WheelError::Invocation(format!(
            "'{}' is an invalid keyword argument for '{target}'",
            py_str(one)
        ))),
        [init @ .., (last, _)] => Err(WheelError::Invocation(format!(
            "{} and '{}' are invalid keyword arguments for '{target}'",
            init.iter()
                .map(|(k, _)| format!("'{}'", py_str(k)))
                .collect::<Vec<_>>()
                .join(", "),
            py_str(last)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::find;
    use halite_proto::value::{map, s};

    fn fields(pairs: &[(&str, Value)]) -> Vec<(Value, Value)> {
        pairs.iter().map(|(k, v)| (s(*k), v.clone())).collect()
    }

    fn spec(name: &str) -> &'static FunSpec {
        find(name).unwrap_or_else(|| panic!("{name} has a spec"))
    }

    #[test]
    fn format_call_makes_required_parameters_positional_and_defaults_keywords_in_reverse() {
        let got = format_call(
            spec("key.accept"),
            &fields(&[
                ("cmd", s("wheel")),
                ("match", s("web*")),
                ("include_rejected", Value::Boolean(true)),
                ("__jid__", s("1")),
                ("print_event", Value::Boolean(false)),
            ]),
        )
        .unwrap();
        assert_eq!(got.args, vec![s("web*")]);
        assert_eq!(
            Value::Map(got.kwargs.clone()),
            map([
                ("include_denied", Value::Boolean(false)),
                ("include_rejected", Value::Boolean(true)),
            ])
        );
        assert_eq!(
            got.fun_args(),
            Value::Array(vec![
                s("web*"),
                map([
                    ("include_denied", Value::Boolean(false)),
                    ("include_rejected", Value::Boolean(true)),
                ])
            ])
        );
        let none = format_call(spec("key.list_all"), &fields(&[("match", s("x"))])).unwrap();
        assert_eq!(none.fun_args(), Value::Array(vec![]), "match is internal");
    }

    #[test]
    fn format_call_refuses_missing_arguments_and_unknown_fields_with_salts_texts() {
        let err = |name: &str, f: &[(&str, Value)]| {
            format_call(spec(name), &fields(f))
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("key.accept", &[]),
            "accept takes at least 1 argument (0 given)"
        );
        assert_eq!(
            err("key.gen_signature", &[("pub", s("x"))]),
            "gen_signature takes at least 3 arguments (1 given)"
        );
        assert_eq!(
            err("key.list_all", &[("user", s("root"))]),
            "'user' is an invalid keyword argument for 'salt.loaded.int.wheel.key.list_all'"
        );
        assert_eq!(
            err(
                "key.list",
                &[
                    ("match", s("acc")),
                    ("x", Value::from(1)),
                    ("y", Value::from(2)),
                    ("z", Value::Nil)
                ]
            ),
            "'x', 'y' and 'z' are invalid keyword arguments for 'salt.loaded.int.wheel.key.list_'"
        );
        // Missing arguments are reported before unknown fields, as Salt does.
        assert_eq!(
            err("key.delete", &[("x", Value::from(1))]),
            "delete takes at least 1 argument (0 given)"
        );
    }

    #[test]
    fn a_load_with_arg_and_kwarg_is_explicit_and_anything_else_is_fields() {
        let explicit = map([
            ("fun", s("key.list")),
            ("arg", Value::Array(vec![s("acc")])),
            ("kwarg", Value::Map(vec![])),
        ]);
        assert_eq!(
            WheelArgs::from_load(&explicit),
            WheelArgs::Explicit {
                arg: Value::Array(vec![s("acc")]),
                kwarg: Value::Map(vec![])
            }
        );
        let only_arg = map([("arg", Value::Array(vec![s("acc")]))]);
        assert!(matches!(
            WheelArgs::from_load(&only_arg),
            WheelArgs::Low(f) if f.len() == 1
        ));
        assert_eq!(WheelArgs::from_load(&Value::Nil), WheelArgs::Low(vec![]));
        let bad = load(
            spec("key.list"),
            &WheelArgs::Explicit {
                arg: s("acc"),
                kwarg: Value::Map(vec![]),
            },
        );
        assert!(matches!(bad, Err(WheelError::TypeError(m)) if m.contains("after *")));
        let bad = load(
            spec("key.list"),
            &WheelArgs::Explicit {
                arg: Value::Array(vec![]),
                kwarg: Value::Array(vec![]),
            },
        );
        assert!(matches!(bad, Err(WheelError::TypeError(m)) if m.contains("after **")));
    }
}
