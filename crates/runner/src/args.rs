//! Argument loading, as `salt-run` and the master's runner client do it.
//!
//! [`load_args_and_kwargs`] (`minion.py · load_args_and_kwargs`, as `Runner.run` and
//! `RunnerClient._reformat_low` use it) sorts the call's `arg` list with
//! `halite_pycall`'s [`split_args`] (a `{"__kwarg__": true, ...}` map and `name=value`
//! strings, the value typed as YAML, are keyword arguments), then lays the request's
//! explicit `kwarg` entries over them. Unless the function takes `**kwargs`, a keyword it
//! does not take (or whose name is not a `str`: a `bin` is Python `bytes`) is refused
//! with Salt's `SaltInvocationError` text; a function taking `**kwargs` takes them all
//! (a name that is not a `str` then fails the binding, as Python's call does). [`FunSpec::bind`] is then Python's own call
//! binding, with CPython 3.11's TypeError texts.

use halite_pycall::pyval::{dict_set, text};
use halite_pycall::{kwarg_text, split_args, CallError};
use rmpv::Value;

use crate::error::RunnerError;
use crate::spec::FunSpec;

pub(crate) use halite_pycall::{Call, Kwargs};

/// The positional and keyword arguments for a call of `spec`.
pub(crate) fn load_args_and_kwargs(
    spec: &FunSpec,
    args: &[Value],
    explicit: &[(String, Value)],
) -> Result<(Vec<Value>, Kwargs), RunnerError> {
    let (positional, keywords) = split_args(args);
    let mut kwargs: Kwargs = Vec::new();
    let explicit = explicit
        .iter()
        .map(|(name, val)| (Value::from(name.as_str()), val.clone()));
    for (key, val) in keywords.into_iter().chain(explicit) {
        dict_set(&mut kwargs, key, val);
    }
    if spec.kwargs {
        return Ok((positional, kwargs));
    }
    let invalid: Vec<String> = kwargs
        .iter()
        .filter(|(key, _)| !text(key).is_some_and(|k| spec.params.iter().any(|p| p.name == k)))
        .map(|(key, val)| kwarg_text(key, val))
        .collect();
    if !invalid.is_empty() {
        return Err(CallError::InvalidKwargs(invalid).into());
    }
    Ok((positional, kwargs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::find;
    use halite_target::testutil::json;

    #[test]
    fn keywords_merge_in_order_explicit_ones_last_and_unknown_ones_are_refused() {
        let up = find("manage.up").expect("manage.up has a spec");
        let sorted = |args: &[Value], explicit: &[(String, Value)]| {
            load_args_and_kwargs(up, args, explicit).map_err(|err| err.to_string())
        };
        let merged = sorted(
            &[
                Value::from("web*"),
                Value::from("timeout=3"),
                json(r#"{"__kwarg__": true, "tgt_type": "glob"}"#),
            ],
            &[("timeout".to_owned(), Value::from(7))],
        );
        assert_eq!(
            merged,
            Ok((
                vec![Value::from("web*")],
                vec![
                    (Value::from("timeout"), Value::from(7)),
                    (Value::from("tgt_type"), Value::from("glob")),
                ]
            ))
        );
        let refused = sorted(
            &[Value::from("y=2"), json(r#"{"__kwarg__": true, "z": [1]}"#)],
            &[],
        );
        assert_eq!(
            refused,
            Err("The following keyword arguments are not valid: y=2, z=[1]".to_owned())
        );
    }

    #[test]
    fn a_function_taking_kwargs_takes_every_keyword_even_private_and_non_str_ones() {
        let arg = find("test.arg").expect("test.arg has a spec");
        let bytes_name = Value::Map(vec![
            (Value::from("__kwarg__"), Value::Boolean(true)),
            (Value::Binary(b"x".to_vec()), Value::from(5)),
        ]);
        let sorted = load_args_and_kwargs(
            arg,
            &[
                Value::from(1),
                Value::from("a=2"),
                Value::from("__b=x"),
                bytes_name,
            ],
            &[("a".to_owned(), Value::from(4))],
        );
        assert_eq!(
            sorted,
            Ok((
                vec![Value::from(1)],
                vec![
                    (Value::from("a"), Value::from(4)),
                    (Value::from("__b"), Value::from("x")),
                    (Value::Binary(b"x".to_vec()), Value::from(5)),
                ]
            ))
        );
    }

    #[test]
    fn binding_fills_defaults() {
        let down = find("manage.down").expect("manage.down has a spec");
        let call = down
            .bind(vec![Value::Boolean(true)], vec![])
            .expect("binds");
        assert_eq!(call.get("removekeys"), &Value::Boolean(true));
        assert_eq!(call.get("tgt"), &Value::from("*"));
        assert_eq!(call.get("timeout"), &Value::Nil);
    }
}
