//! Argument binding, as the minion does it.
//!
//! Two steps, both Salt's:
//!
//! 1. [`load_args_and_kwargs`] (`minion.py · load_args_and_kwargs`) sorts the publish
//!    `arg` list into positional and keyword arguments. A trailing
//!    `{"__kwarg__": true, ...}` map and `name=value` strings become keyword arguments
//!    (the string's value typed as YAML by `halite_config::args::yamlify_arg`), but only
//!    when the function takes that name or `**kwargs`; any other keyword is a
//!    `SaltInvocationError`.
//!    Positional strings are passed as they are (the `salt` CLI has already typed them).
//!    A function with `**kwargs` also gets every publish field as `__pub_<field>`.
//! 2. [`bind`] is Python's own call binding (`func(*args, **kwargs)`), with CPython
//!    3.11's TypeError texts, which Salt returns as `Passed invalid arguments to ...`.

use halite_config::args::{parse_kwarg, yamlify_arg};
use rmpv::Value;

use crate::error::ExecError;
use crate::pyval::{py_eq, py_str, text};
use crate::spec::FunSpec;

/// An ordered Python dict of keyword arguments.
pub(crate) type Kwargs = Vec<(Value, Value)>;

/// `dict[key] = value`, keeping the first position of an existing key.
pub(crate) fn dict_set(dict: &mut Kwargs, key: Value, value: Value) {
    match dict.iter_mut().find(|(k, _)| py_eq(k, &key)) {
        Some(slot) => slot.1 = value,
        None => dict.push((key, value)),
    }
}

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
    let mut positional = Vec::new();
    let mut kwargs: Kwargs = Vec::new();
    let mut invalid = Vec::new();
    for arg in args {
        match arg {
            Value::Map(entries) if is_kwarg_map(entries) => {
                for (key, val) in entries {
                    if text(key).as_deref() == Some("__kwarg__") {
                        continue;
                    }
                    if accepts(key) {
                        dict_set(&mut kwargs, key.clone(), val.clone());
                    } else {
                        invalid.push(format!("{}={}", py_str(key), py_str(val)));
                    }
                }
            }
            Value::String(_) => {
                let s = py_str(arg);
                match parse_kwarg(&s) {
                    Some((name, value)) => {
                        let key = Value::from(name);
                        let val = yamlify_arg(value);
                        if accepts(&key) {
                            dict_set(&mut kwargs, key, val);
                        } else {
                            invalid.push(format!("{name}={}", py_str(&val)));
                        }
                    }
                    None => positional.push(arg.clone()),
                }
            }
            // `parse_input` pops `__kwarg__` off a map it does not treat as keywords.
            Value::Map(entries) => positional.push(without_kwarg_marker(entries)),
            other => positional.push(other.clone()),
        }
    }
    if !invalid.is_empty() {
        return Err(ExecError::SaltInvocation(format!(
            "The following keyword arguments are not valid: {}",
            invalid.join(", ")
        )));
    }
    if spec.kwargs {
        if let Some(Value::Map(fields)) = data {
            for (key, val) in fields {
                let name = format!("__pub_{}", py_str(key));
                // Python's pop above mutated the very list the publish load holds.
                let val = match val {
                    Value::Array(items) if text(key).as_deref() == Some("arg") && items == args => {
                        Value::Array(items.iter().map(strip_popped_marker).collect())
                    }
                    other => other.clone(),
                };
                dict_set(&mut kwargs, Value::from(name), val);
            }
        }
    }
    Ok((positional, kwargs))
}

/// A map with its `__kwarg__` key removed.
fn without_kwarg_marker(entries: &[(Value, Value)]) -> Value {
    Value::Map(
        entries
            .iter()
            .filter(|(k, _)| text(k).as_deref() != Some("__kwarg__"))
            .cloned()
            .collect(),
    )
}

/// An argument as it looks after `load_args_and_kwargs`: a map whose `__kwarg__` is not
/// `True` has lost the key.
fn strip_popped_marker(arg: &Value) -> Value {
    match arg {
        Value::Map(entries) if !is_kwarg_map(entries) => without_kwarg_marker(entries),
        other => other.clone(),
    }
}

/// `arg.get("__kwarg__", False) is True`.
fn is_kwarg_map(entries: &[(Value, Value)]) -> bool {
    entries
        .iter()
        .any(|(k, v)| text(k).as_deref() == Some("__kwarg__") && *v == Value::Boolean(true))
}

/// Arguments bound to a function's parameters.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    spec: &'static FunSpec,
    values: Vec<Value>,
    /// What `*args` received.
    pub varargs: Vec<Value>,
    /// What `**kwargs` received, in order.
    pub kwargs: Kwargs,
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

    /// `kwargs.get(name)` on the `**kwargs` dict.
    pub fn kwarg(&self, name: &str) -> Option<&Value> {
        self.kwargs
            .iter()
            .find(|(k, _)| text(k).as_deref() == Some(name))
            .map(|(_, v)| v)
    }

    /// `kwargs.pop(name)` on the `**kwargs` dict.
    pub fn pop_kwarg(&mut self, name: &str) -> Option<Value> {
        let pos = self
            .kwargs
            .iter()
            .position(|(k, _)| text(k).as_deref() == Some(name))?;
        Some(self.kwargs.remove(pos).1)
    }

    /// The `**kwargs` dict as a map value.
    pub fn kwargs_map(&self) -> Value {
        Value::Map(self.kwargs.clone())
    }

    /// The spec this call was bound to.
    pub fn spec(&self) -> &'static FunSpec {
        self.spec
    }
}

/// Python's binding of `func(*args, **kwargs)`, with CPython 3.11's error texts.
pub(crate) fn bind(
    spec: &'static FunSpec,
    args: Vec<Value>,
    kwargs: Kwargs,
) -> Result<Call, ExecError> {
    let name = spec.pyname;
    let nparams = spec.params.len();
    let given = args.len();
    let mut values: Vec<Option<Value>> = vec![None; nparams];
    let mut varargs = Vec::new();
    for (i, arg) in args.into_iter().enumerate() {
        if i < nparams {
            values[i] = Some(arg);
        } else if spec.varargs {
            varargs.push(arg);
        }
    }
    let mut extra: Kwargs = Vec::new();
    for (key, val) in kwargs {
        let Some(k) = text(&key).map(|k| k.into_owned()) else {
            return Err(ExecError::TypeError(format!(
                "{name}() keywords must be strings"
            )));
        };
        match spec.params.iter().position(|p| p.name == k) {
            Some(i) if values[i].is_some() => {
                return Err(ExecError::TypeError(format!(
                    "{name}() got multiple values for argument '{k}'"
                )));
            }
            Some(i) => values[i] = Some(val),
            None if spec.kwargs => dict_set(&mut extra, key, val),
            None => {
                return Err(ExecError::TypeError(format!(
                    "{name}() got an unexpected keyword argument '{k}'"
                )));
            }
        }
    }
    if given > nparams && !spec.varargs {
        let defaults = spec.params.iter().filter(|p| p.default.is_some()).count();
        let (sig, plural) = if defaults > 0 {
            (format!("from {} to {nparams}", nparams - defaults), true)
        } else {
            (nparams.to_string(), nparams != 1)
        };
        return Err(ExecError::TypeError(format!(
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
        return Err(ExecError::TypeError(format!(
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
    Ok(Call {
        spec,
        values,
        varargs,
        kwargs: extra,
    })
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
    fn kwargs_need_a_matching_parameter_or_star_star_kwargs() {
        let (args, kwargs) = load_args_and_kwargs(
            spec("test.echo"),
            &[Value::from("hi"), kw(&[("text", Value::from("x"))])],
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
                kw(&[("z", Value::Array(vec![Value::from(1)]))]),
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
    fn a_map_without_kwarg_true_is_positional_and_loses_the_marker() {
        let arg = Value::Map(vec![
            (Value::from("__kwarg__"), Value::Boolean(false)),
            (Value::from("a"), Value::from(1)),
        ]);
        let (args, kwargs) = load_args_and_kwargs(spec("test.echo"), &[arg], None).expect("binds");
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
                "test.echo",
                vec![],
                vec![],
                "echo() missing 1 required positional argument: 'text'",
            ),
            (
                "test.echo",
                vec![Value::from(1), Value::from(2)],
                vec![],
                "echo() takes 1 positional argument but 2 were given",
            ),
            (
                "test.ping",
                vec![Value::from(1)],
                vec![],
                "ping() takes 0 positional arguments but 1 was given",
            ),
            (
                "test.retcode",
                vec![Value::from(1), Value::from(2)],
                vec![],
                "retcode() takes from 0 to 1 positional arguments but 2 were given",
            ),
            (
                "test.echo",
                vec![Value::from(1)],
                vec![(Value::from("text"), Value::from(2))],
                "echo() got multiple values for argument 'text'",
            ),
            (
                "test.true",
                vec![],
                vec![(Value::from("x"), Value::from(2))],
                "true_() got an unexpected keyword argument 'x'",
            ),
            (
                "test.arg",
                vec![],
                vec![(Value::from(1), Value::from(2))],
                "arg() keywords must be strings",
            ),
            (
                "grains.filter_by",
                vec![],
                vec![],
                "filter_by() missing 1 required positional argument: 'lookup_dict'",
            ),
            (
                "saltutil.signal_job",
                vec![],
                vec![],
                "signal_job() missing 2 required positional arguments: 'jid' and 'sig'",
            ),
        ];
        for (fun, args, kwargs, want) in cases {
            let err = bind(spec(fun), args.clone(), kwargs.clone()).expect_err(fun);
            assert_eq!(err, ExecError::TypeError((*want).to_owned()), "{fun}");
        }
    }

    #[test]
    fn binding_fills_defaults_and_collects_extras() {
        let call = bind(spec("test.retcode"), vec![], vec![]).expect("binds");
        assert_eq!(call.get("code"), &Value::from(42));
        let call = bind(
            spec("test.arg"),
            vec![Value::from(1), Value::from(2)],
            vec![(Value::from("a"), Value::Nil)],
        )
        .expect("binds");
        assert_eq!(call.varargs, vec![Value::from(1), Value::from(2)]);
        assert_eq!(call.kwarg("a"), Some(&Value::Nil));
    }
}
