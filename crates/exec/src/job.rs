//! The running job as the functions see it: the cancellation handle and the table of
//! live jobs the minion keeps (Salt's `cachedir/proc/<jid>` files).

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rmpv::Value;

/// Cancellation for one running job.
///
/// `saltutil.kill_job` / `term_job` reach a job through [`JobTable::signal`]; the minion
/// then calls [`JobHandle::cancel`]. Long functions poll [`JobHandle::is_cancelled`], and
/// the `cmd.*` functions register their child processes here so the signal reaches
/// them. Salt signals the job's process and its children instead; the effect is the
/// same: the job stops and sends no return.
///
/// Invariant: a registered pid is removed under the same lock that reaps it, so
/// [`JobHandle::cancel`] never signals a pid that has been reaped and reused.
#[derive(Debug, Default)]
pub struct JobHandle {
    cancelled: AtomicBool,
    signal: AtomicI32,
    children: Mutex<Vec<u32>>,
}

impl JobHandle {
    /// A handle for a job that has not been cancelled.
    pub fn new() -> Arc<Self> {
        Arc::new(JobHandle::default())
    }

    /// Marks the job cancelled and sends `signal` to the process group of every
    /// registered child process.
    pub fn cancel(&self, signal: i32) {
        let children = self.children();
        self.signal.store(signal, Ordering::SeqCst);
        self.cancelled.store(true, Ordering::SeqCst);
        for &pid in children.iter() {
            signal_group(pid, signal);
        }
    }

    /// Whether [`JobHandle::cancel`] has been called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// The signal the job was cancelled with, if it was.
    pub fn cancel_signal(&self) -> Option<i32> {
        self.is_cancelled()
            .then(|| self.signal.load(Ordering::SeqCst))
    }

    /// The registered children, locked (a poisoned lock still holds a valid list).
    pub(crate) fn children(&self) -> MutexGuard<'_, Vec<u32>> {
        self.children.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a child process (a process-group leader) and signals it at once if the
    /// job was cancelled before it started.
    pub(crate) fn register_child(&self, pid: u32) {
        self.children().push(pid);
        if let Some(sig) = self.cancel_signal() {
            signal_group(pid, sig);
        }
    }
}

/// Sends `signal` to the process group `pid` leads.
pub(crate) fn signal_group(pid: u32, signal: i32) {
    if let Ok(pgid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill has no memory-safety preconditions; an invalid group or signal
        // only yields an error code.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// The minion's table of live jobs, behind `saltutil.running`, `find_job`, `kill_job`,
/// `signal_job` and `term_job`.
pub trait JobTable: Send + Sync {
    /// The proc dicts of the live jobs: `{"pid", "jid", "fun", "arg", "tgt",
    /// "tgt_type", "ret", "user", ...}` (Salt's proc file: the publish load plus `pid`).
    fn running(&self) -> Vec<Value>;
    /// The proc dict of the live job `jid`.
    fn find(&self, jid: &str) -> Option<Value>;
    /// Sends `signal` to job `jid`; false if it is not running.
    fn signal(&self, jid: &str, signal: i32) -> bool;
}

/// A job table with no jobs, for `halite-call --local` and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoJobs;

impl JobTable for NoJobs {
    fn running(&self) -> Vec<Value> {
        Vec::new()
    }

    fn find(&self, _jid: &str) -> Option<Value> {
        None
    }

    fn signal(&self, _jid: &str, _signal: i32) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_records_the_signal() {
        let job = JobHandle::new();
        assert!(!job.is_cancelled());
        assert_eq!(job.cancel_signal(), None);
        job.cancel(15);
        assert!(job.is_cancelled());
        assert_eq!(job.cancel_signal(), Some(15));
    }

    #[test]
    fn no_jobs_is_empty() {
        assert!(NoJobs.running().is_empty());
        assert!(NoJobs.find("1").is_none());
        assert!(!NoJobs.signal("1", 9));
    }
}
