//! Taking a call's arguments as Salt does, in two steps:
//!
//! 1. [`split_args`] is `salt.utils.args.parse_input` followed by the sorting half of
//!    `minion.py · load_args_and_kwargs`: a `{"__kwarg__": true, ...}` map and
//!    `name=value` strings (the value typed as YAML by `halite_config::args::yamlify_arg`)
//!    are keyword arguments, everything else is positional. Positional strings are passed
//!    as they are (the CLIs have already typed them). Which keywords the function takes
//!    is checked by the caller (see the crate docs), listing each refused one with
//!    [`kwarg_text`].
//! 2. [`bind`] is Python's own call binding (`func(*args, **kwargs)`), with CPython
//!    3.11's TypeError texts.

use halite_config::args::{parse_kwarg, yamlify_arg};
use halite_output::py_str;
use rmpv::Value;

use crate::pyval::{dict_set, text};
use crate::spec::{Param, Signature};
use crate::CallError;

/// An ordered Python dict of keyword arguments.
pub type Kwargs = Vec<(Value, Value)>;

/// `arg.get("__kwarg__", False) is True`.
fn is_kwarg_map(entries: &[(Value, Value)]) -> bool {
    entries
        .iter()
        .any(|(k, v)| text(k).as_deref() == Some("__kwarg__") && *v == Value::Boolean(true))
}

/// Whether a map key is the `__kwarg__` marker.
fn is_marker(key: &Value) -> bool {
    text(key).as_deref() == Some("__kwarg__")
}

/// A map with its `__kwarg__` key removed.
fn without_kwarg_marker(entries: &[(Value, Value)]) -> Value {
    Value::Map(
        entries
            .iter()
            .filter(|(k, _)| !is_marker(k))
            .cloned()
            .collect(),
    )
}

/// The positional arguments of a call, and its keyword arguments in the order they were
/// met, repeats included (the caller decides which it takes; later ones win in a dict).
pub fn split_args(args: &[Value]) -> (Vec<Value>, Kwargs) {
    let mut positional = Vec::new();
    let mut keywords = Vec::new();
    for arg in args {
        match arg {
            Value::Map(entries) if is_kwarg_map(entries) => {
                keywords.extend(entries.iter().filter(|(key, _)| !is_marker(key)).cloned())
            }
            Value::String(_) => match parse_kwarg(&py_str(arg)) {
                Some((name, value)) => keywords.push((Value::from(name), yamlify_arg(value))),
                None => positional.push(arg.clone()),
            },
            // `parse_input` pops `__kwarg__` off a map it does not treat as keywords.
            Value::Map(entries) => positional.push(without_kwarg_marker(entries)),
            other => positional.push(other.clone()),
        }
    }
    (positional, keywords)
}

/// An argument as it looks once `load_args_and_kwargs` has run on the list holding it: a
/// map whose `__kwarg__` is not `True` has lost the key (Python's `pop` mutated it).
pub fn popped(arg: &Value) -> Value {
    match arg {
        Value::Map(entries) if !is_kwarg_map(entries) => without_kwarg_marker(entries),
        other => other.clone(),
    }
}

/// A refused keyword as `load_args_and_kwargs` lists it: `f"{key}={val}"`.
pub fn kwarg_text(key: &Value, val: &Value) -> String {
    format!("{}={}", py_str(key), py_str(val))
}

/// Arguments bound to a function's parameters.
#[derive(Debug)]
pub struct Call {
    params: &'static [Param],
    values: Vec<Value>,
    /// What `*args` received.
    pub varargs: Vec<Value>,
    /// What `**kwargs` received, in order.
    pub kwargs: Kwargs,
}

static NIL: Value = Value::Nil;

impl Call {
    /// The value bound to parameter `name` (its default when not passed). A name that
    /// is not a parameter reads as `None`; the callers' registry tests check every name
    /// their functions use.
    pub fn get(&self, name: &str) -> &Value {
        self.params
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

    /// The parameters of the function this call was bound to.
    pub fn params(&self) -> &'static [Param] {
        self.params
    }
}

/// Python's binding of `func(*args, **kwargs)`, with CPython 3.11's error texts.
pub fn bind(spec: &Signature, args: Vec<Value>, kwargs: Kwargs) -> Result<Call, CallError> {
    let name = spec.pyname;
    let params = spec.params;
    let nparams = params.len();
    let given = args.len();
    let mut args = args.into_iter();
    let mut values: Vec<Option<Value>> = args.by_ref().take(nparams).map(Some).collect();
    values.resize(nparams, None);
    let varargs: Vec<Value> = if spec.varargs {
        args.collect()
    } else {
        Vec::new()
    };
    let mut extra: Kwargs = Vec::new();
    for (key, val) in kwargs {
        let Some(k) = text(&key).map(|k| k.into_owned()) else {
            return Err(CallError::TypeError(format!(
                "{name}() keywords must be strings"
            )));
        };
        let slot = params
            .iter()
            .position(|p| p.name == k)
            .and_then(|i| values.get_mut(i));
        match slot {
            Some(Some(_)) => {
                return Err(CallError::TypeError(format!(
                    "{name}() got multiple values for argument '{k}'"
                )));
            }
            Some(slot) => *slot = Some(val),
            None if spec.kwargs => dict_set(&mut extra, key, val),
            None => {
                return Err(CallError::TypeError(format!(
                    "{name}() got an unexpected keyword argument '{k}'"
                )));
            }
        }
    }
    if given > nparams && !spec.varargs {
        let defaults = params.iter().filter(|p| p.default.is_some()).count();
        let (sig, plural) = if defaults > 0 {
            (format!("from {} to {nparams}", nparams - defaults), true)
        } else {
            (nparams.to_string(), nparams != 1)
        };
        return Err(CallError::TypeError(format!(
            "{name}() takes {sig} positional argument{} but {given} {} given",
            if plural { "s" } else { "" },
            if given == 1 { "was" } else { "were" },
        )));
    }
    let missing: Vec<String> = params
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
        return Err(CallError::TypeError(format!(
            "{name}() missing {} required positional argument{}: {list}",
            missing.len(),
            if missing.len() == 1 { "" } else { "s" },
        )));
    }
    let values = params
        .iter()
        .zip(values)
        .map(|(p, v)| {
            v.or_else(|| p.default.map(|d| d.value()))
                .unwrap_or(Value::Nil)
        })
        .collect();
    Ok(Call {
        params,
        values,
        varargs,
        kwargs: extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ParamDefault;

    const fn required(name: &'static str) -> Param {
        Param {
            name,
            default: None,
        }
    }

    const fn optional(name: &'static str, default: ParamDefault) -> Param {
        Param {
            name,
            default: Some(default),
        }
    }

    /// A signature with both `*args` and `**kwargs` when `star`, else neither.
    const fn sig(pyname: &'static str, params: &'static [Param], star: bool) -> Signature {
        Signature {
            varargs: star,
            kwargs: star,
            ..Signature::plain(pyname, params)
        }
    }

    static NONE: Signature = sig("none", &[], false);
    static ONE: Signature = sig("one", &[required("text")], false);
    static TWO: Signature = sig("two", &[required("jid"), required("sig")], false);
    static THREE: Signature = sig(
        "three",
        &[required("a"), required("b"), required("c")],
        false,
    );
    static OPT: Signature = sig(
        "opt_",
        &[
            required("jid"),
            optional("n", ParamDefault::Int(42)),
            optional("flag", ParamDefault::Bool(false)),
        ],
        false,
    );
    static STAR: Signature = sig("star", &[optional("code", ParamDefault::None)], true);

    fn kw(pairs: &[(&str, Value)]) -> Value {
        let mut entries = vec![(Value::from("__kwarg__"), Value::Boolean(true))];
        entries.extend(pairs.iter().map(|(k, v)| (Value::from(*k), v.clone())));
        Value::Map(entries)
    }

    #[test]
    fn kwarg_maps_and_name_value_strings_are_keywords_in_order_met() {
        let (args, keywords) = split_args(&[
            Value::from("web*"),
            Value::from("timeout=3"),
            kw(&[("k", Value::from("v")), ("timeout", Value::from(4))]),
            Value::from(7),
            Value::from("not a kwarg"),
        ]);
        assert_eq!(
            args,
            vec![
                Value::from("web*"),
                Value::from(7),
                Value::from("not a kwarg")
            ]
        );
        assert_eq!(
            keywords,
            vec![
                (Value::from("timeout"), Value::from(3)),
                (Value::from("k"), Value::from("v")),
                (Value::from("timeout"), Value::from(4)),
            ]
        );
    }

    #[test]
    fn maps_without_a_true_marker_are_positional_and_lose_it() {
        let arg = Value::Map(vec![
            (Value::from("__kwarg__"), Value::Boolean(false)),
            (Value::from("a"), Value::from(1)),
        ]);
        let stripped = Value::Map(vec![(Value::from("a"), Value::from(1))]);
        let (args, keywords) = split_args(std::slice::from_ref(&arg));
        assert_eq!(args, vec![stripped.clone()]);
        assert!(keywords.is_empty());
        assert_eq!(popped(&arg), stripped);
        let marked = kw(&[("a", Value::from(1))]);
        assert_eq!(popped(&marked), marked, "a keyword map keeps its marker");
    }

    #[test]
    fn bytes_are_neither_keyword_names_nor_the_marker() {
        let bytes_marker = Value::Map(vec![(
            Value::Binary(b"__kwarg__".to_vec()),
            Value::Boolean(true),
        )]);
        let (args, keywords) = split_args(std::slice::from_ref(&bytes_marker));
        assert_eq!(args, vec![bytes_marker]);
        assert!(keywords.is_empty());
        let err = bind(
            &ONE,
            vec![],
            vec![(Value::Binary(b"text".to_vec()), Value::Nil)],
        )
        .err();
        assert_eq!(
            err,
            Some(CallError::TypeError(
                "one() keywords must be strings".to_owned()
            ))
        );
    }

    #[test]
    fn refused_keywords_read_as_salt_lists_them() {
        assert_eq!(
            kwarg_text(&Value::from("z"), &Value::Array(vec![Value::from(1)])),
            "z=[1]"
        );
        assert_eq!(
            CallError::InvalidKwargs(vec!["y=2".to_owned(), "z=[1]".to_owned()]).to_string(),
            "The following keyword arguments are not valid: y=2, z=[1]"
        );
    }

    #[test]
    fn binding_errors_use_cpython_texts() {
        let cases: &[(&Signature, Vec<Value>, Kwargs, &str)] = &[
            (
                &ONE,
                vec![],
                vec![],
                "one() missing 1 required positional argument: 'text'",
            ),
            (
                &TWO,
                vec![],
                vec![],
                "two() missing 2 required positional arguments: 'jid' and 'sig'",
            ),
            (
                &THREE,
                vec![],
                vec![],
                "three() missing 3 required positional arguments: 'a', 'b', and 'c'",
            ),
            (
                &ONE,
                vec![Value::from(1), Value::from(2)],
                vec![],
                "one() takes 1 positional argument but 2 were given",
            ),
            (
                &NONE,
                vec![Value::from(1)],
                vec![],
                "none() takes 0 positional arguments but 1 was given",
            ),
            (
                &TWO,
                vec![Value::from(1), Value::from(2), Value::from(3)],
                vec![],
                "two() takes 2 positional arguments but 3 were given",
            ),
            (
                &OPT,
                vec![
                    Value::from(1),
                    Value::from(2),
                    Value::from(3),
                    Value::from(4),
                ],
                vec![],
                "opt_() takes from 1 to 3 positional arguments but 4 were given",
            ),
            (
                &ONE,
                vec![Value::from(1)],
                vec![(Value::from("text"), Value::from(2))],
                "one() got multiple values for argument 'text'",
            ),
            (
                &ONE,
                vec![Value::from(1)],
                vec![(Value::from("x"), Value::from(2))],
                "one() got an unexpected keyword argument 'x'",
            ),
            (
                &STAR,
                vec![],
                vec![(Value::from(1), Value::from(2))],
                "star() keywords must be strings",
            ),
        ];
        for (spec, args, kwargs, want) in cases {
            let err = bind(spec, args.clone(), kwargs.clone()).err();
            assert_eq!(
                err,
                Some(CallError::TypeError((*want).to_owned())),
                "{want}"
            );
        }
    }

    #[test]
    fn binding_fills_defaults_and_collects_extras() {
        let call = bind(&OPT, vec![Value::from("j")], vec![]).expect("binds");
        assert_eq!(call.get("jid"), &Value::from("j"));
        assert_eq!(call.get("n"), &Value::from(42));
        assert_eq!(call.get("flag"), &Value::Boolean(false));
        assert_eq!(call.get("nope"), &Value::Nil);
        assert!(call.varargs.is_empty() && call.kwargs.is_empty());

        let mut call = bind(
            &STAR,
            vec![Value::from(1), Value::from(2), Value::from(3)],
            vec![
                (Value::from("a"), Value::Nil),
                (Value::from("b"), Value::from(5)),
            ],
        )
        .expect("binds");
        assert_eq!(call.get("code"), &Value::from(1));
        assert_eq!(call.varargs, vec![Value::from(2), Value::from(3)]);
        assert_eq!(call.kwarg("a"), Some(&Value::Nil));
        assert_eq!(call.pop_kwarg("b"), Some(Value::from(5)));
        assert_eq!(
            call.kwargs_map(),
            Value::Map(vec![(Value::from("a"), Value::Nil)])
        );
        assert_eq!(call.params().len(), 1);
    }
}
