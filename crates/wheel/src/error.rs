//! Why a wheel call failed, mapped to the Python exception classes Salt's wheel client
//! tells apart when it builds the return (`client/mixins.py · SyncClientMixin.low`).

/// A failed wheel call. The [`crate::Registry`] turns each variant into the return text
/// Salt gives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WheelError {
    /// The function does not exist (`CommandExecutionError` from `verify_fun`).
    #[error("'{0}' is not available.")]
    NotAvailable(String),
    /// The load's fields do not fit the signature (`SaltInvocationError` from
    /// `format_call`): "accept takes at least 1 argument (0 given)", "'x' is an invalid
    /// keyword argument for 'salt.loaded.int.wheel.key.list_all'".
    #[error("{0}")]
    Invocation(String),
    /// Python `TypeError` while calling the function: the arguments do not fit the
    /// signature, or one has the wrong type. Salt returns
    /// `\nPassed invalid arguments: <msg>\n\nUsage:\n<docstring>`.
    #[error("{0}")]
    TypeError(String),
    /// Any other exception, by Python class name.
    #[error("{kind}: {message}")]
    Exception {
        /// The exception class as a traceback names it (`ValueError`,
        /// `salt.exceptions.SaltCacheError`).
        kind: &'static str,
        /// `str(exc)`.
        message: String,
    },
}

impl WheelError {
    /// A [`WheelError::Exception`].
    pub(crate) fn exception(kind: &'static str, message: impl Into<String>) -> WheelError {
        WheelError::Exception {
            kind,
            message: message.into(),
        }
    }

    /// The last line of a Python traceback for this error.
    pub(crate) fn traceback_line(&self) -> String {
        match self {
            WheelError::NotAvailable(_) => format!("salt.exceptions.CommandExecutionError: {self}"),
            WheelError::Invocation(_) => format!("salt.exceptions.SaltInvocationError: {self}"),
            WheelError::TypeError(msg) => format!("TypeError: {msg}"),
            WheelError::Exception { kind, message } if message.is_empty() => (*kind).to_owned(),
            WheelError::Exception { kind, message } => format!("{kind}: {message}"),
        }
    }
}

impl From<halite_pycall::CallError> for WheelError {
    fn from(err: halite_pycall::CallError) -> WheelError {
        use halite_pycall::CallError;
        match err {
            CallError::TypeError(message) => WheelError::TypeError(message),
            CallError::InvalidKwargs(_) => WheelError::Invocation(err.to_string()),
            CallError::Exception { kind, message } => WheelError::Exception { kind, message },
        }
    }
}

/// A key-store failure is what Salt's key cache raises: `SaltCacheError`, with Salt's
/// message for an id that cannot be a file name.
impl From<halite_keystore::Error> for WheelError {
    fn from(err: halite_keystore::Error) -> WheelError {
        let message = match &err {
            halite_keystore::Error::InvalidId(id) => format!("key {id} is not a valid minion_id"),
            other => other.to_string(),
        };
        WheelError::exception("salt.exceptions.SaltCacheError", message)
    }
}
