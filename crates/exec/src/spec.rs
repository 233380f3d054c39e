//! Function signatures: what Salt learns from `inspect.signature` and `__doc__`.
//!
//! The table itself (`specs.rs`) is generated from the stock Salt sources by
//! `tools/gen_specs.py`, so parameter names, defaults and docstrings are Salt's own.

use halite_pycall::{Call, CallError, Kwargs, Signature};
use rmpv::Value;

use crate::specs::SPECS;

pub(crate) use halite_pycall::spec::{default_shell, Param, ParamDefault};

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

impl FunSpec {
    /// Python's binding of `func(*args, **kwargs)`, with CPython 3.11's error texts.
    pub fn bind(&self, args: Vec<Value>, kwargs: Kwargs) -> Result<Call, CallError> {
        let signature = Signature {
            pyname: self.pyname,
            params: self.params,
            varargs: self.varargs,
            kwargs: self.kwargs,
        };
        halite_pycall::bind(&signature, args, kwargs)
    }
}

/// The spec of `name`, if Halite implements it.
pub(crate) fn find(name: &str) -> Option<&'static FunSpec> {
    halite_pycall::find(SPECS, name, |spec| spec.name)
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
