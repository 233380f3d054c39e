//! Function signatures: what Salt learns from `inspect.signature`.
//!
//! Each caller keeps its own generated table (`specs.rs`, written from the stock sources
//! by its `tools/gen_specs.py` with the shared `tools/specgen.py`) of its own spec type,
//! and hands [`bind`](crate::bind) the [`Signature`] of an entry.

use rmpv::Value;

/// What binding needs to know of a function.
#[derive(Debug, Clone, Copy)]
pub struct Signature {
    /// The Python function's `co_qualname`, used in Python's TypeError texts
    /// (`test.true` is `true_`).
    pub pyname: &'static str,
    /// The positional-or-keyword parameters, in order.
    pub params: &'static [Param],
    /// Whether the function takes `*args`.
    pub varargs: bool,
    /// Whether the function takes `**kwargs`.
    pub kwargs: bool,
}

impl Signature {
    /// A function taking neither `*args` nor `**kwargs`.
    pub const fn plain(pyname: &'static str, params: &'static [Param]) -> Signature {
        Signature {
            pyname,
            params,
            varargs: false,
            kwargs: false,
        }
    }
}

/// One positional-or-keyword parameter.
#[derive(Debug)]
pub struct Param {
    /// The parameter name.
    pub name: &'static str,
    /// Its default, if it has one (a parameter without one is required).
    pub default: Option<ParamDefault>,
}

/// A parameter default, as a Python literal.
#[derive(Debug, Clone, Copy)]
pub enum ParamDefault {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A string.
    Str(&'static str),
    /// `cmdmod.DEFAULT_SHELL`: `$SHELL`, else `/bin/sh` (see [`default_shell`]).
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

/// `salt.grains.extra.shell()`: this process's `$SHELL`, else `/bin/sh`.
pub fn default_shell() -> String {
    std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".to_owned())
}

/// The entry of `table` (sorted by `name_of`) named `name`.
pub fn find<S>(
    table: &'static [S],
    name: &str,
    name_of: impl Fn(&S) -> &str,
) -> Option<&'static S> {
    table
        .binary_search_by(|spec| name_of(spec).cmp(name))
        .ok()
        .and_then(|i| table.get(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    static TABLE: &[(&str, &str)] = &[("a.one", "one"), ("a.two", "two"), ("b.one", "one_")];

    #[test]
    fn find_looks_names_up_in_a_sorted_table() {
        let find = |name| find(TABLE, name, |s| s.0).map(|s| s.1);
        assert_eq!(find("a.two"), Some("two"));
        assert_eq!(find("b.one"), Some("one_"));
        assert_eq!(find("a.three"), None);
        assert_eq!(find(""), None);
    }

    #[test]
    fn defaults_are_python_literals() {
        assert_eq!(ParamDefault::None.value(), Value::Nil);
        assert_eq!(ParamDefault::Bool(true).value(), Value::Boolean(true));
        assert_eq!(ParamDefault::Int(-3).value(), Value::from(-3));
        assert_eq!(ParamDefault::Str("x").value(), Value::from("x"));
        assert_eq!(ParamDefault::Shell.value(), Value::from(default_shell()));
    }
}
