//! The one error type of the crate: why a returner failed, in the words the minion logs
//! after Salt's "The return failed for job `<jid>`: ".

/// Why a returner failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The returner's options could not be read as Salt reads them (the text is the
    /// Python exception Salt's `get_returner_options` or the returner would raise).
    #[error("{0}")]
    Options(String),
    /// The return cannot be written as JSON (`TypeError` of Python's `json`).
    #[error("{0}")]
    Json(String),
    /// A file could not be opened or written (Python's `str(OSError)`).
    #[error("{0}")]
    Io(String),
    /// The minion would not queue the event for the master.
    #[error("{0}")]
    FireMaster(String),
}

/// Python's `str(OSError)` for `err` on `file`: `[Errno 13] Permission denied: '/x'`.
pub(crate) fn os_error_text(err: &std::io::Error, file: &str) -> String {
    match err.raw_os_error() {
        Some(code) => {
            let text = std::io::Error::from_raw_os_error(code).to_string();
            let strerror = text
                .strip_suffix(&format!(" (os error {code})"))
                .unwrap_or(&text);
            format!(
                "[Errno {code}] {strerror}: {}",
                halite_output::str_repr(file)
            )
        }
        None => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_read_as_pythons_oserror() {
        let err = std::io::Error::from_raw_os_error(libc::EACCES);
        assert_eq!(
            os_error_text(&err, "/var/log/it's"),
            "[Errno 13] Permission denied: \"/var/log/it's\""
        );
        let err = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(
            os_error_text(&err, "/nope/x"),
            "[Errno 2] No such file or directory: '/nope/x'"
        );
    }
}
