//! Wheel signatures: what Salt learns from `inspect.signature` and `__doc__`.
//!
//! The table itself (`specs.rs`) is generated from the stock Salt sources by
//! `tools/gen_specs.py`, so parameter names, defaults and docstrings are Salt's own.

use halite_pycall::{Call, CallError, Kwargs, Signature};
use rmpv::Value;

use crate::specs::SPECS;

pub(crate) use halite_pycall::spec::{Param, ParamDefault};

/// The signature and docstring of one wheel function.
#[derive(Debug)]
pub(crate) struct FunSpec {
    /// The public name, `module.function`.
    pub name: &'static str,
    /// The Python function's `co_qualname` (also its `__name__`), used in Python's
    /// TypeError texts and `format_call`'s messages (`key.list` is `list_`).
    pub pyname: &'static str,
    /// Positional-or-keyword parameters in order.
    pub params: &'static [Param],
    /// Whether the function takes `*args`.
    pub varargs: bool,
    /// Whether the function takes `**kwargs`.
    pub kwargs: bool,
    /// The raw `__doc__`.
    pub doc: &'static str,
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

    /// The function's `__module__` as the wheel loader names it
    /// (`salt.loaded.int.wheel.key`), which `format_call` quotes.
    pub fn module_path(&self) -> String {
        let module = self.name.split('.').next().unwrap_or_default();
        format!("salt.loaded.int.wheel.{module}")
    }
}

/// The spec of `name`, if Halite implements it.
pub(crate) fn find(name: &str) -> Option<&'static FunSpec> {
    halite_pycall::find(SPECS, name, |spec| spec.name)
}
