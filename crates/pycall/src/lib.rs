//! Salt's Python functions as Rust tables: what the execution modules (`halite-exec`) and
//! the runners (`halite-runner`) share to take arguments and answer for docs exactly as
//! Salt 3008.3's loader-called functions do.
//!
//! # What it does
//!
//! * [`spec`]: what binding needs of a function, as `inspect.signature` gives it
//!   ([`Signature`], [`Param`], [`ParamDefault`]), and [`find`] in a caller's generated
//!   table (sorted by name). `tools/specgen.py` is the shared half of the generators
//!   (`crates/{exec,runner}/tools/gen_specs.py`) that write those tables from the stock
//!   sources; each caller keeps its own entry type, as its generated file names it.
//! * [`args`]: the sorting half of `salt.minion.load_args_and_kwargs` after
//!   `salt.utils.args.parse_input` ([`split_args`]: `{"__kwarg__": True, ...}` maps and
//!   `name=value` strings become keywords; [`kwarg_text`] for a refused one, [`popped`]
//!   for the publish load's own `arg` afterwards) and Python's own call binding ([`bind`],
//!   with CPython 3.11's `TypeError` texts) into a [`Call`].
//! * [`pyval`]: the Python value semantics those need and both callers use (`==`,
//!   ordered-dict assignment, `int()`).
//! * [`strip_rst`]: `salt.utils.doc.strip_rst`, for `sys.doc` and `salt-run -d`.
//! * [`Table`]: the functions a registry offers, by `module.function` name.
//!
//! A msgpack `bin` is Python `bytes` here, as in Salt (whose payloads decode `bin` to
//! `bytes`): it is never a keyword name nor the `__kwarg__` marker.
//!
//! # What it does not do
//!
//! * Which keywords a function accepts is the caller's rule: the minion refuses each
//!   keyword as it meets it and adds `__pub_*` fields, the runner client lays explicit
//!   keywords over the sorted ones first. Both build on [`split_args`].
//! * No function bodies, no I/O, no logging, no loader: the tables are the callers'.
//!
//! # Deviations from Salt
//!
//! * `int()` of a number beyond 64 bits is an `OverflowError` (the C-long conversions
//!   Salt's callers make fail the same way; plain Python `int()` would not), and only ASCII
//!   digits are digits (Python also reads other Unicode decimal digits).
//!
//! # Invariants
//!
//! * No argument value panics; every refusal is a [`CallError`] with Salt's or CPython's
//!   text.

pub mod args;
pub mod pyval;
pub mod spec;

mod doc;
mod table;

pub use args::{bind, kwarg_text, popped, split_args, Call, Kwargs};
pub use doc::strip_rst;
pub use spec::{default_shell, find, Param, ParamDefault, Signature};
pub use table::Table;

/// Why arguments could not be taken, as the Python exception Salt would see.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// Python `TypeError`: the arguments do not fit the signature, or a value has the
    /// wrong type.
    #[error("{0}")]
    TypeError(String),
    /// `salt.exceptions.SaltInvocationError` from `load_args_and_kwargs`: the keyword
    /// arguments the function does not take, each as `name=value`.
    #[error("The following keyword arguments are not valid: {}", .0.join(", "))]
    InvalidKwargs(Vec<String>),
    /// Any other exception (`ValueError`, `OverflowError`), by Python class name.
    #[error("{kind}: {message}")]
    Exception {
        /// The exception class.
        kind: &'static str,
        /// `str(exc)`.
        message: String,
    },
}

impl CallError {
    /// A [`CallError::Exception`].
    pub(crate) fn exception(kind: &'static str, message: impl Into<String>) -> CallError {
        CallError::Exception {
            kind,
            message: message.into(),
        }
    }
}
