//! The master's panic boundary: a panic while handling one request, or one item of a
//! background thread's work (a held reply, a login, a job-cache write, a watch deadline),
//! is caught, logged with what was being done, counted in [`Stats`], and the thread goes
//! on with the next one. A panic is a bug — untrusted input never panics by design — but a
//! bug must cost one request, not a worker for the rest of the master's life.
//!
//! What it does not do: restore state a panicking handler left half-changed. Shared state
//! is behind locks that tolerate poisoning (`unwrap_or_else(|e| e.into_inner())`), and each
//! structure keeps its invariants across any single call; a handler that panics between two
//! calls leaves what the first one did. The panic message and location still go to stderr
//! through the standard panic hook.

use std::any::Any;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

/// Panics the master survived, since it started.
#[derive(Debug, Default)]
pub struct Stats {
    requests: AtomicU64,
    background: AtomicU64,
}

impl Stats {
    /// Requests whose handling panicked.
    pub fn request_panics(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Items of background work (held replies, logins, job-cache writes, watch deadlines)
    /// whose handling panicked.
    pub fn background_panics(&self) -> u64 {
        self.background.load(Ordering::Relaxed)
    }

    /// Counts a request that panicked; answers the count so far.
    pub(crate) fn request_panicked(&self) -> u64 {
        self.requests.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Runs one item of a background thread's work (`what` says which, for the log). A panic
/// is logged at `error`, counted, and answered as `None`; the caller goes on.
pub fn isolate<T>(stats: &Stats, what: impl Display, f: impl FnOnce() -> T) -> Option<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => Some(v),
        Err(payload) => {
            let n = stats.background.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::error!(
                panics = n,
                "Panic in {what}: {}; the thread goes on",
                panic_message(payload.as_ref())
            );
            None
        }
    }
}

/// The message a panic was raised with.
pub fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(a panic without a message)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_item_is_counted_and_answered_as_none() {
        let stats = Stats::default();
        assert_eq!(isolate(&stats, "a test item", || 7), Some(7));
        let got: Option<()> = isolate(&stats, "a test item", || panic!("boom {}", 1));
        assert_eq!(got, None);
        assert_eq!(stats.background_panics(), 1);
        assert_eq!(stats.request_panics(), 0);
    }

    #[test]
    fn panic_messages_are_read_from_both_payload_kinds() {
        let str_payload = catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(panic_message(str_payload.as_ref()), "plain");
        let string_payload = catch_unwind(|| panic!("formatted {}", 2)).unwrap_err();
        assert_eq!(panic_message(string_payload.as_ref()), "formatted 2");
    }
}
