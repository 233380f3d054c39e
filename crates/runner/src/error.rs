//! Why a runner call failed, mapped to the Python exception classes Salt's runner client
//! tells apart when it builds the return (`client/mixins.py · SyncClientMixin.low` and
//! `runner.py · Runner.run`).

/// A failed runner call. The [`crate::Registry`] turns each variant into the return text
/// Salt gives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RunnerError {
    /// The function does not exist (`CommandExecutionError` from `verify_fun`): the
    /// return is the message, `'x.y' is not available.`.
    #[error("'{0}' is not available.")]
    NotAvailable(String),
    /// Keyword arguments the function does not take (`SaltInvocationError` from
    /// `load_args_and_kwargs`): the return is the message.
    #[error("The following keyword arguments are not valid: {0}")]
    InvalidKwargs(String),
    /// Python `TypeError` while calling the function: the arguments do not fit the
    /// signature, or one has the wrong type. Salt returns
    /// `\nPassed invalid arguments: <msg>\n\nUsage:\n<docstring>`.
    #[error("{0}")]
    TypeError(String),
    /// Any other exception, by Python class name. Salt returns
    /// `Exception occurred in runner <fun>: <traceback>`.
    #[error("{kind}: {message}")]
    Exception {
        /// The exception class as a traceback names it (`ValueError`,
        /// `salt.exceptions.SaltClientError`).
        kind: &'static str,
        /// `str(exc)`.
        message: String,
    },
}

impl RunnerError {
    /// A [`RunnerError::Exception`].
    pub(crate) fn exception(kind: &'static str, message: impl Into<String>) -> RunnerError {
        RunnerError::Exception {
            kind,
            message: message.into(),
        }
    }
}

impl From<halite_pycall::CallError> for RunnerError {
    fn from(err: halite_pycall::CallError) -> RunnerError {
        use halite_pycall::CallError;
        match err {
            CallError::TypeError(message) => RunnerError::TypeError(message),
            CallError::InvalidKwargs(list) => RunnerError::InvalidKwargs(list.join(", ")),
            CallError::Exception { kind, message } => RunnerError::Exception { kind, message },
        }
    }
}
