//! Function signatures: what Salt learns from `inspect.signature` and `__doc__`.
//!
//! The table itself (`specs.rs`) is generated from the stock Salt sources by
//! `tools/gen_specs.py`, so parameter names, defaults and docstrings are Salt's own.

use rmpv::Value;

use crate::specs::SPECS;

/// The signature and docstring of one execution-module function.
#[derive(Debug)]
pub(crate) struct FunSpec {
    /// The public name, `module.function`.
    pub name: &'static str,
    /// The Python function's `co_qualname`, used in Python's TypeError texts
    /// (`test.true` is `true_`, `grains.fetch` is `get`).
    pub pyname: &'static str,
    /// Positional-or-keyword parameters in order.
    pub params: &'static [Param],
    /// The function takes `*args`.
    pub varargs: bool,
    /// The function takes `**kwargs`.
    pub kwargs: bool,
    /// The raw `__doc__`.
    pub doc: Option<&'static str>,
}

/// One positional-or-keyword parameter.
#[derive(Debug)]
pub(crate) struct Param {
    /// The parameter name.
    pub name: &'static str,
    /// Its default, if it has one (a parameter without one is required).
    pub default: Option<ParamDefault>,
}

/// A parameter default, as a Python literal.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ParamDefault {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A string.
    Str(&'static str),
    /// `cmdmod.DEFAULT_SHELL`: `$SHELL`, else `/bin/sh`.
    Shell,
}

impl ParamDefault {
    /// The default as a value.
    pub fn value(self) -> Value {
        match self {
            ParamDefault::None => Value::Nil,
            ParamDefault::Bool(b) => Value::Boolean(b),
            ParamDefault::Int(i) => Value::from(i),
            ParamDefault::Str(s) => Value::from(s),
            ParamDefault::Shell => Value::from(default_shell()),
        }
    }
}

/// `salt.grains.extra.shell()`: the minion's `$SHELL`, else `/bin/sh`.
pub(crate) fn default_shell() -> String {
    std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".to_owned())
}

/// The spec of `name`, if Halite implements it.
pub(crate) fn find(name: &str) -> Option<&'static FunSpec> {
    SPECS
        .binary_search_by(|spec| spec.name.cmp(name))
        .ok()
        .map(|i| &SPECS[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_sorted_for_binary_search() {
        assert!(SPECS.windows(2).all(|w| w[0].name < w[1].name));
        assert_eq!(find("test.ping").map(|s| s.pyname), Some("ping"));
        assert!(find("test.nope").is_none());
    }

    #[test]
    fn aliased_functions_keep_their_python_names() {
        for (name, pyname) in [
            ("test.true", "true_"),
            ("test.false", "false_"),
            ("test.try", "try_"),
            ("grains.fetch", "get"),
            ("test.versions", "versions_report"),
        ] {
            assert_eq!(find(name).map(|s| s.pyname), Some(pyname), "{name}");
        }
    }
}
