//! Argument loading, as the minion does it (`minion.py · load_args_and_kwargs`).
//!
//! [`load_args_and_kwargs`] sorts the publish `arg` list with `halite_pycall`'s
//! [`split_args`] (a trailing `{"__kwarg__": true, ...}` map and `name=value` strings are
//! keyword arguments; positional strings are passed as they are, the `salt` CLI has
//! already typed them) and keeps a keyword only when the function takes that name or
//! `**kwargs`; any other keyword is a `SaltInvocationError`. A function with `**kwargs`
//! also gets every publish field as `__pub_<field>`. [`FunSpec::bind`] is then Python's
//! own call binding, with CPython 3.11's TypeError texts, which Salt returns as `Passed
//! invalid arguments to ...`.

use halite_pycall::{kwarg_text, popped, split_args, CallError};
use rmpv::Value;

use crate::error::ExecError;
use crate::pyval::{py_str, text};
use crate::spec::FunSpec;

pub(crate) use halite_pycall::pyval::dict_set;
pub(crate) use halite_pycall::{Call, Kwargs};

/// `minion.py · load_args_and_kwargs`: the positional and keyword arguments for a call
/// of `spec` with the publish `args`, plus `__pub_*` from the publish load `data`.
pub(crate) fn load_args_and_kwargs(
    spec: &FunSpec,
    args: &[Value],
    data: Option<&Value>,
) -> Result<(Vec<Value>, Kwargs), ExecError> {
    let accepts = |key: &Value| {
        spec.kwargs || text(key).is_some_and(|k| spec.params.iter().any(|p| p.name == k))
    };
    let (positional, keywords) = split_args(args);
    let mut kwargs: Kwargs = Vec::new();
    let mut invalid = Vec::new();
    for (key, val) in keywords {
        if accepts(&key) {
            dict_set(&mut kwargs, key, val);
        } else {
            invalid.push(kwarg_text(&key, &val));
        }
    }
    if !invalid.is_empty() {
        return Err(CallError::InvalidKwargs(invalid).into());
    }
    if spec.kwargs {
        if let Some(Value::Map(fields)) = data {
            for (key, val) in fields {
                let name = format!("__pub_{}", py_str(key));
                // Python's pop above mutated the very list the publish load holds.
                let val = match val {
                    Value::Array(items) if text(key).as_deref() == Some("arg") && items == args => {
                        Value::Array(items.iter().map(popped).collect())
                    }
                    other => other.clone(),
                };
                dict_set(&mut kwargs, Value::from(name), val);
            }
        }
    }
    Ok((positional, kwargs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::find;
    use halite_target::testutil::json;

    fn spec(name: &str) -> &'static FunSpec {
        find(name).expect("spec exists")
    }

    #[test]
    fn kwargs_need_a_matching_parameter_or_star_star_kwargs() {
        let (args, kwargs) = load_args_and_kwargs(
            spec("test.echo"),
            &[
                Value::from("hi"),
                json(r#"{"__kwarg__": true, "text": "x"}"#),
            ],
            None,
        )
        .expect("text is a parameter");
        assert_eq!(args, vec![Value::from("hi")]);
        assert_eq!(kwargs, vec![(Value::from("text"), Value::from("x"))]);

        let err = load_args_and_kwargs(
            spec("test.echo"),
            &[
                Value::from("hi"),
                Value::from("y=2"),
                json(r#"{"__kwarg__": true, "z": [1]}"#),
            ],
            None,
        )
        .expect_err("y and z are not parameters");
        assert_eq!(
            err,
            ExecError::SaltInvocation(
                "The following keyword arguments are not valid: y=2, z=[1]".to_owned()
            )
        );
    }

    #[test]
    fn star_star_kwargs_functions_get_pub_fields_in_publish_order() {
        let data = Value::Map(vec![
            (Value::from("fun"), Value::from("test.arg")),
            (Value::from("jid"), Value::from("1")),
        ]);
        let (args, kwargs) = load_args_and_kwargs(
            spec("test.arg"),
            &[Value::from("a"), Value::from("k=[1]")],
            Some(&data),
        )
        .expect("binds");
        assert_eq!(args, vec![Value::from("a")]);
        let keys: Vec<String> = kwargs.iter().map(|(k, _)| py_str(k)).collect();
        assert_eq!(keys, ["k", "__pub_fun", "__pub_jid"]);
        assert_eq!(kwargs[0].1, Value::Array(vec![Value::from(1)]));
    }

    #[test]
    fn binding_fills_defaults_and_collects_extras() {
        let call = spec("test.retcode").bind(vec![], vec![]).expect("binds");
        assert_eq!(call.get("code"), &Value::from(42));
        let call = spec("test.arg")
            .bind(
                vec![Value::from(1), Value::from(2)],
                vec![(Value::from("a"), Value::Nil)],
            )
            .expect("binds");
        assert_eq!(call.varargs, vec![Value::from(1), Value::from(2)]);
        assert_eq!(call.kwarg("a"), Some(&Value::Nil));
    }
}
