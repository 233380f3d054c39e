//! Why a function call failed, mapped to the Python exception classes Salt's minion
//! tells apart when it builds the job return (`minion.py · Minion._thread_return`).

/// A failed execution-module call.
///
/// The [`crate::Registry`] turns each variant into the return text Salt sends; the
/// `Display` form is the exception's `str()` (or `Class: message` for
/// [`ExecError::Exception`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// Python `TypeError`: the arguments do not fit the signature, or one has the wrong
    /// type. Salt returns `Passed invalid arguments to <fun>: <msg>\n<docstring>`.
    #[error("{0}")]
    TypeError(String),
    /// `salt.exceptions.CommandExecutionError`. Salt returns `ERROR: <msg>`.
    #[error("{0}")]
    CommandExecution(String),
    /// `salt.exceptions.SaltInvocationError` (bad keyword arguments, blackout mode).
    /// Salt returns `ERROR executing '<fun>': <msg>`.
    #[error("{0}")]
    SaltInvocation(String),
    /// Any other exception, by Python class name. Salt returns
    /// `The minion function caused an exception: <traceback>`.
    #[error("{kind}: {message}")]
    Exception {
        /// The exception class as a traceback names it (`ValueError`,
        /// `salt.exceptions.TimedProcTimeoutError`).
        kind: &'static str,
        /// `str(exc)`.
        message: String,
    },
    /// The job was cancelled by `saltutil.kill_job` / `term_job` while it ran. Salt's job
    /// process dies and sends nothing; the caller should drop this return.
    #[error("the job was cancelled by signal {0}")]
    Cancelled(i32),
}

impl ExecError {
    /// An [`ExecError::Exception`].
    pub(crate) fn exception(kind: &'static str, message: impl Into<String>) -> ExecError {
        ExecError::Exception {
            kind,
            message: message.into(),
        }
    }

    /// The last line of the Python traceback for this error.
    pub(crate) fn traceback_line(&self) -> String {
        match self {
            ExecError::TypeError(m) => format!("TypeError: {m}"),
            ExecError::CommandExecution(m) => {
                format!("salt.exceptions.CommandExecutionError: {m}")
            }
            ExecError::SaltInvocation(m) => format!("salt.exceptions.SaltInvocationError: {m}"),
            ExecError::Exception { kind, message } if message.is_empty() => (*kind).to_owned(),
            ExecError::Exception { kind, message } => format!("{kind}: {message}"),
            ExecError::Cancelled(sig) => format!("SystemExit: signal {sig}"),
        }
    }
}

impl From<halite_pycall::CallError> for ExecError {
    fn from(err: halite_pycall::CallError) -> ExecError {
        use halite_pycall::CallError;
        match err {
            CallError::TypeError(message) => ExecError::TypeError(message),
            CallError::InvalidKwargs(_) => ExecError::SaltInvocation(err.to_string()),
            CallError::Exception { kind, message } => ExecError::Exception { kind, message },
        }
    }
}
