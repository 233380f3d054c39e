//! Argument binding, as `salt-run` and the master's runner client do it.
//!
//! Two steps, both Salt's:
//!
//! 1. [`load_args_and_kwargs`] (`minion.py · load_args_and_kwargs`, as `Runner.run` and
//!    `RunnerClient._reformat_low` use it) sorts the call's `arg` list into positional and
//!    keyword arguments: a `{"__kwarg__": true, ...}` map and `name=value` strings (the
//!    value typed as YAML) become keyword arguments, then the request's explicit `kwarg`
//!    entries are laid over them. A keyword the function does not take is refused with
//!    Salt's `SaltInvocationError` text.
//! 2. [`bind`] is Python's own call binding (`func(*args, **kwargs)`), with CPython
//!    3.11's TypeError texts.

use halite_config::args::{parse_kwarg, yamlify_arg};
use rmpv::Value;

use crate::error::RunnerError;
use crate::pyval::{dict_set, py_str, text};
use crate::spec::FunSpec;

/// An ordered Python dict of keyword arguments.
pub(crate) type Kwargs = Vec<(Value, Value)>;

/// `arg.get("__kwarg__", False) is True`.
fn is_kwarg_map(entries: &[(Value, Value)]) -> bool {
    entries
        .iter()
        .any(|(k, v)| text(k).as_deref() == Some("__kwarg__") && *v == Value::Boolean(true))
}

/// The positional and keyword arguments for a call of `spec`.
pub(crate) fn load_args_and_kwargs(
    spec: &FunSpec,
    args: &[Value],
    explicit: &[(String, Value)],
) -> Result<(Vec<Value>, Kwargs), RunnerError> {
    let mut positional = Vec::new();
    let mut kwargs: Kwargs = Vec::new();
    for arg in args {
        match arg {
            Value::Map(entries) if is_kwarg_map(entries) => {
                for (key, val) in entries {
                    if text(key).as_deref() != Some("__kwarg__") {
                        dict_set(&mut kwargs, key.clone(), val.clone());
                    }
                }
            }
            // `parse_input` pops a `__kwarg__` that is not `True` off the map.
            Value::Map(entries) => positional.push(Value::Map(
                entries
                    .iter()
                    .filter(|(k, _)| text(k).as_deref() != Some("__kwarg__"))
                    .cloned()
                    .collect(),
            )),
            Value::String(_) => {
                let s = py_str(arg);
                match parse_kwarg(&s) {
                    Some((name, value)) => {
                        dict_set(&mut kwargs, Value::from(name), yamlify_arg(value));
                    }
                    None => positional.push(arg.clone()),
                }
            }
            other => positional.push(other.clone()),
        }
    }
    for (name, val) in explicit {
        dict_set(&mut kwargs, Value::from(name.as_str()), val.clone());
    }
    let invalid: Vec<String> = kwargs
        .iter()
        .filter(|(key, _)| !text(key).is_some_and(|k| spec.params.iter().any(|p| p.name == k)))
        .map(|(key, val)| format!("{}={}", py_str(key), py_str(val)))
        .collect();
    if !invalid.is_empty() {
        return Err(RunnerError::InvalidKwargs(invalid.join(", ")));
    }
    Ok((positional, kwargs))
}

/// Arguments bound to a function's parameters.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    spec: &'static FunSpec,
    values: Vec<Value>,
}

static NIL: Value = Value::Nil;

impl Call {
    /// The value bound to parameter `name` (its default when not passed). A name that
    /// is not a parameter reads as `None`; the registry tests check every name used.
    pub fn get(&self, name: &str) -> &Value {
        self.spec
            .params
            .iter()
            .position(|p| p.name == name)
            .and_then(|i| self.values.get(i))
            .unwrap_or(&NIL)
    }
}

/// Python's binding of `func(*args, **kwargs)`, with CPython 3.11's error texts.
pub(crate) fn bind(
    spec: &'static FunSpec,
    args: Vec<Value>,
    kwargs: Kwargs,
) -> Result<Call, RunnerError> {
    let name = spec.pyname;
    let nparams = spec.params.len();
    let given = args.len();
    let mut values: Vec<Option<Value>> = args.into_iter().take(nparams).map(Some).collect();
    values.resize(nparams, None);
    for (key, val) in kwargs {
        let Some(k) = text(&key).map(|k| k.into_owned()) else {
            return Err(RunnerError::TypeError(format!(
                "{name}() keywords must be strings"
            )));
        };
        let Some(slot) = spec
            .params
            .iter()
            .position(|p| p.name == k)
            .and_then(|i| values.get_mut(i))
        else {
            return Err(RunnerError::TypeError(format!(
                "{name}() got an unexpected keyword argument '{k}'"
            )));
        };
        if slot.is_some() {
            return Err(RunnerError::TypeError(format!(
                "{name}() got multiple values for argument '{k}'"
            )));
        }
        *slot = Some(val);
    }
    if given > nparams {
        let defaults = spec.params.iter().filter(|p| p.default.is_some()).count();
        let (sig, plural) = if defaults > 0 {
            (format!("from {} to {nparams}", nparams - defaults), true)
        } else {
            (nparams.to_string(), nparams != 1)
        };
        return Err(RunnerError::TypeError(format!(
            "{name}() takes {sig} positional argument{} but {given} {} given",
            if plural { "s" } else { "" },
            if given == 1 { "was" } else { "were" },
        )));
    }
    let missing: Vec<String> = spec
        .params
        .iter()
        .zip(&values)
        .filter(|(p, v)| v.is_none() && p.default.is_none())
        .map(|(p, _)| format!("'{}'", p.name))
        .collect();
    if !missing.is_empty() {
        let list = match missing.as_slice() {
            [one] => one.clone(),
            [a, b] => format!("{a} and {b}"),
            [init @ .., last] => format!("{}, and {last}", init.join(", ")),
            [] => String::new(),
        };
        return Err(RunnerError::TypeError(format!(
            "{name}() missing {} required positional argument{}: {list}",
            missing.len(),
            if missing.len() == 1 { "" } else { "s" },
        )));
    }
    let values = spec
        .params
        .iter()
        .zip(values)
        .map(|(p, v)| {
            v.or_else(|| p.default.map(|d| d.value()))
                .unwrap_or(Value::Nil)
        })
        .collect();
    Ok(Call { spec, values })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::find;

    fn spec(name: &str) -> &'static FunSpec {
        find(name).expect("spec exists")
    }

    fn kw(pairs: &[(&str, Value)]) -> Value {
        let mut entries = vec![(Value::from("__kwarg__"), Value::Boolean(true))];
        entries.extend(pairs.iter().map(|(k, v)| (Value::from(*k), v.clone())));
        Value::Map(entries)
    }

    #[test]
    fn kwarg_maps_strings_and_explicit_kwargs_merge_in_order() {
        let (args, kwargs) = load_args_and_kwargs(
            spec("manage.up"),
            &[
                Value::from("web*"),
                Value::from("timeout=3"),
                kw(&[("tgt_type", Value::from("glob"))]),
            ],
            &[("timeout".to_owned(), Value::from(7))],
        )
        .expect("all are parameters");
        assert_eq!(args, vec![Value::from("web*")]);
        assert_eq!(
            kwargs,
            vec![
                (Value::from("timeout"), Value::from(7)),
                (Value::from("tgt_type"), Value::from("glob")),
            ]
        );
    }

    #[test]
    fn unknown_keywords_are_refused_with_salts_text() {
        let err = load_args_and_kwargs(
            spec("manage.up"),
            &[
                Value::from("y=2"),
                kw(&[("z", Value::Array(vec![Value::from(1)]))]),
            ],
            &[],
        )
        .expect_err("y and z are not parameters");
        assert_eq!(
            err.to_string(),
            "The following keyword arguments are not valid: y=2, z=[1]"
        );
    }

    #[test]
    fn a_map_without_kwarg_true_is_positional_and_loses_the_marker() {
        let arg = Value::Map(vec![
            (Value::from("__kwarg__"), Value::Boolean(false)),
            (Value::from("a"), Value::from(1)),
        ]);
        let (args, kwargs) =
            load_args_and_kwargs(spec("jobs.list_job"), &[arg], &[]).expect("binds");
        assert_eq!(
            args,
            vec![Value::Map(vec![(Value::from("a"), Value::from(1))])]
        );
        assert!(kwargs.is_empty());
    }

    #[test]
    fn binding_errors_use_cpython_texts() {
        let cases: &[(&str, Vec<Value>, Kwargs, &str)] = &[
            (
                "jobs.list_job",
                vec![],
                vec![],
                "list_job() missing 1 required positional argument: 'jid'",
            ),
            (
                "jobs.list_job",
                vec![
                    Value::from(1),
                    Value::from(2),
                    Value::from(3),
                    Value::from(4),
                ],
                vec![],
                "list_job() takes from 1 to 3 positional arguments but 4 were given",
            ),
            (
                "jobs.active",
                vec![Value::from(1), Value::from(2)],
                vec![],
                "active() takes from 0 to 1 positional arguments but 2 were given",
            ),
            (
                "jobs.list_job",
                vec![Value::from(1)],
                vec![(Value::from("jid"), Value::from(2))],
                "list_job() got multiple values for argument 'jid'",
            ),
            (
                "manage.up",
                vec![],
                vec![(Value::from("x"), Value::from(2))],
                "up() got an unexpected keyword argument 'x'",
            ),
            (
                "manage.up",
                vec![],
                vec![(Value::from(1), Value::from(2))],
                "up() keywords must be strings",
            ),
        ];
        for (fun, args, kwargs, want) in cases {
            let err = bind(spec(fun), args.clone(), kwargs.clone()).expect_err(fun);
            assert_eq!(err, RunnerError::TypeError((*want).to_owned()), "{fun}");
        }
    }

    #[test]
    fn binding_fills_defaults() {
        let call = bind(spec("manage.down"), vec![Value::Boolean(true)], vec![]).expect("binds");
        assert_eq!(call.get("removekeys"), &Value::Boolean(true));
        assert_eq!(call.get("tgt"), &Value::from("*"));
        assert_eq!(call.get("timeout"), &Value::Nil);
    }
}
