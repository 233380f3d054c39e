//! Runner signatures: what Salt learns from `inspect.signature` and `__doc__`.
//!
//! The table itself (`specs.rs`) is generated from the stock Salt sources by
//! `tools/gen_specs.py`, so parameter names, defaults and docstrings are Salt's own.

use rmpv::Value;

use crate::specs::SPECS;

/// The signature and docstring of one runner function. None of the runners Halite
/// implements takes `*args` or `**kwargs` (the generator refuses them).
#[derive(Debug)]
pub(crate) struct FunSpec {
    /// The public name, `module.function`.
    pub name: &'static str,
    /// The Python function's `co_qualname`, used in Python's TypeError texts.
    pub pyname: &'static str,
    /// Positional-or-keyword parameters in order.
    pub params: &'static [Param],
    /// The raw `__doc__`.
    pub doc: &'static str,
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
    /// A string.
    Str(&'static str),
}

impl ParamDefault {
    /// The default as a value.
    pub fn value(self) -> Value {
        match self {
            ParamDefault::None => Value::Nil,
            ParamDefault::Bool(b) => Value::Boolean(b),
            ParamDefault::Str(s) => Value::from(s),
        }
    }
}

/// The spec of `name`, if Halite implements it.
pub(crate) fn find(name: &str) -> Option<&'static FunSpec> {
    SPECS
        .binary_search_by(|spec| spec.name.cmp(name))
        .ok()
        .and_then(|i| SPECS.get(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_sorted_for_binary_search() {
        assert!(SPECS.windows(2).all(|w| w[0].name < w[1].name));
        assert_eq!(find("manage.up").map(|s| s.pyname), Some("up"));
        assert!(find("manage.nope").is_none());
    }
}
