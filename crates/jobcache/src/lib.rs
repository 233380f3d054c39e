//! The Halite master's job cache: what was published (the job "load") and what each minion
//! returned, kept for `keep_jobs_seconds`.
//!
//! Two pieces:
//!
//! * [`JobStore`], a small storage trait, and [`RedbJobStore`], its implementation on a
//!   single `redb` file (`cachedir/jobs.redb`). This is the master's own cache: durable
//!   across restarts, one transaction per call, a batch [`JobStore::add_returns`].
//! * [`LocalCacheWriter`], which writes Salt's `local_cache` returner layout
//!   (`cachedir/jobs/<h[:2]>/<h[2:]>/…`) so stock Salt tools can read Halite's jobs: the
//!   stock `salt` CLI checks `.load.p` before it waits for returns, and
//!   `salt-run jobs.lookup_jid` / `jobs.list_jobs` read this tree.
//!
//! Salt 3008.3 `salt/returners/local_cache.py` is the spec for both:
//!
//! * A duplicate return for the same (jid, minion id) does **not** replace the first one; it
//!   is ignored (Salt logs it). Both backends answer [`ReturnStatus::Duplicate`].
//! * Retention: a job is removed when `now - created > keep_jobs_seconds`, where `created`
//!   is when the job was first written (Salt: the `jid` file's mtime).
//!   `keep_jobs_seconds == 0` keeps jobs forever (`clean_old_jobs` does nothing).
//! * The expected-minion list is merged (sorted union) when a load is saved again.
//!
//! What this crate does not do: allocate jids, publish jobs, fire events, or read the
//! `local_cache` tree back (Halite reads its own store; the tree is for stock tools). It does
//! no clock reads: every timestamp is the caller's `now` (Unix seconds), so tests are
//! deterministic. `nocache` markers, syndic minion lists and `endtime` files are not
//! written.
//!
//! Invariants: data from the database or the file tree is never trusted; anything that does
//! not decode is an [`Error`], never a panic. Minion ids become directory names only after
//! the same checks as Salt's `valid_id` (no `/`, `\`, NUL, and not empty, `.` or `..`).
//! Every I/O or database error names the file or directory it failed on. A write that
//! failed on I/O ([`Error::is_retryable`]: a read-only or full file system) leaves nothing
//! half-written that would block the same write later, and the redb store reopens its
//! database after an I/O error, so the caller can retry until the file system takes it.

mod local_cache;
mod redb_store;
mod summary;
mod value;

use std::path::PathBuf;

pub use local_cache::{HashType, LocalCacheWriter};
pub use redb_store::RedbJobStore;
pub use rmpv::Value;
pub use summary::{jid_to_time, JobSummary};

/// Everything that can go wrong in the job cache.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory of the `local_cache` tree could not be read, written or removed.
    #[error("{path}: {source}")]
    Io {
        /// The path being worked on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The redb database at `path` failed: it could not be opened (locked by another
    /// process, not a redb file, failed its integrity check, not writable) or a transaction
    /// could not run or commit.
    #[error("job database {}: {source}", path.display())]
    Db {
        /// The database file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: redb::Error,
    },
    /// A record in the database (or a file of the tree) does not decode to what this crate
    /// wrote there.
    #[error("corrupt job cache entry {what}: {reason}")]
    Corrupt {
        /// Which entry: the file, or the database file with the table and key.
        what: String,
        /// Why it was refused.
        reason: String,
    },
    /// The database was written by a newer (or unknown) version of this crate.
    #[error(
        "job database {}: schema version {found} is not supported (expected {expected})",
        path.display()
    )]
    UnsupportedSchema {
        /// The database file.
        path: PathBuf,
        /// The version recorded in the database.
        found: u64,
        /// The version this crate writes.
        expected: u64,
    },
    /// Writing msgpack failed (it cannot when writing into memory; kept so no path panics).
    #[error("msgpack encoding failed: {0}")]
    Encode(#[from] rmpv::encode::Error),
    /// A value cannot be stored so that it reads back: nested deeper than the cache decodes
    /// (100 container levels) or a container or blob longer than msgpack's 2^32 - 1.
    #[error("value cannot be stored: {0}")]
    Unstorable(String),
    /// A minion id that cannot safely be a directory name (Salt's `valid_id` rules).
    #[error("invalid minion id {0:?}")]
    InvalidMinionId(String),
    /// A `hash_type` name this crate cannot compute.
    #[error("unsupported hash_type {0:?} (expected md5, sha1, sha224, sha256, sha384 or sha512)")]
    UnsupportedHashType(String),
    /// The hash of a jid could not be computed by OpenSSL.
    #[error("hashing the jid failed: {0}")]
    Hash(#[from] openssl::error::ErrorStack),
}

impl Error {
    /// Whether the same write may succeed later, once the file system is fixed: an I/O
    /// error (a read-only or full file system, a permission taken away) or a database that
    /// has to be reopened after one. Anything else (a value that cannot be stored, an
    /// invalid minion id, a corrupt record) fails the same way every time.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Io { .. } => true,
            Error::Db { source, .. } => matches!(
                source,
                redb::Error::Io(_) | redb::Error::PreviousIo | redb::Error::DatabaseClosed
            ),
            _ => false,
        }
    }
}

/// Inside the crate a redb error starts without its file; [`RedbJobStore`] names the file
/// before the error leaves the crate, so every [`Error::Db`] a caller sees has its path.
macro_rules! redb_error_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                Error::Db {
                    path: PathBuf::new(),
                    source: redb::Error::from(e),
                }
            }
        }
    )*};
}
redb_error_from!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A saved job: the publish load and the minions it was expected to reach.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The job id.
    pub jid: String,
    /// The publish load as saved (Salt's `clear_load`).
    pub load: Value,
    /// Expected minions, sorted and de-duplicated (merged over every save of this jid).
    pub minions: Vec<String>,
    /// When the job was first written (caller's clock, Unix seconds); retention counts from
    /// here.
    pub created: u64,
}

/// One minion's return for a job.
#[derive(Debug, Clone, PartialEq)]
pub struct MinionReturn {
    /// The minion that returned.
    pub minion_id: String,
    /// The full return load as received (`id`, `jid`, `fun`, `return`, `retcode`, …).
    pub load: Value,
}

/// One return in a batch for [`JobStore::add_returns`].
#[derive(Debug, Clone, Copy)]
pub struct NewReturn<'a> {
    /// The job id.
    pub jid: &'a str,
    /// The minion that returned.
    pub minion_id: &'a str,
    /// The full return load.
    pub load: &'a Value,
    /// Also owed to a copy kept elsewhere (Salt's `local_cache` tree): the store remembers
    /// it, in the same transaction, until [`JobStore::settle_owed`], so a copy a crash
    /// interrupted can be made again from [`JobStore::owed`].
    pub owed: bool,
}

/// What happened to a return handed to the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum ReturnStatus {
    /// The return was stored.
    Stored,
    /// This minion already returned for this jid; the first return is kept and this one
    /// was ignored (Salt `local_cache.returner` behaviour).
    Duplicate,
}

/// Storage behind the master's job cache. Implementations are shared between threads;
/// readers may run while a write is in progress.
pub trait JobStore: Send + Sync {
    /// Saves (or replaces) the publish load of `jid` and merges `minions` into its expected
    /// minion list. `now` becomes the job's creation time if the jid is new.
    fn save_load(&self, jid: &str, load: &Value, minions: &[String], now: u64) -> Result<()>;

    /// Stores one minion's return. A return for a jid with no saved load is kept (Salt does
    /// the same) and starts that jid's retention clock at `now`.
    fn add_return(
        &self,
        jid: &str,
        minion_id: &str,
        load: &Value,
        now: u64,
    ) -> Result<ReturnStatus>;

    /// Stores many returns; the answer has one status per input, in order. Later entries
    /// of the same batch for an already-seen (jid, minion) are duplicates too.
    fn add_returns(&self, returns: &[NewReturn<'_>], now: u64) -> Result<Vec<ReturnStatus>> {
        returns
            .iter()
            .map(|r| self.add_return(r.jid, r.minion_id, r.load, now))
            .collect()
    }

    /// Every stored return still owed to its copy (see [`NewReturn::owed`]), as
    /// `(jid, return)`.
    fn owed(&self) -> Result<Vec<(String, MinionReturn)>>;

    /// The copies of these `(jid, minion)` returns are made: forget that they are owed.
    /// Not made durable by itself (a crash may bring them back from [`JobStore::owed`]:
    /// making a copy twice must be harmless).
    fn settle_owed(&self, done: &[(&str, &str)]) -> Result<()>;

    /// The saved job, or `None` when no load was saved for `jid`.
    fn get_load(&self, jid: &str) -> Result<Option<Job>>;

    /// The returns for `jid` in arrival order, one per minion (the first that arrived).
    fn get_returns(&self, jid: &str) -> Result<Vec<MinionReturn>>;

    /// A summary of every job that has a saved load, ordered by jid.
    fn list_jobs(&self) -> Result<Vec<JobSummary>>;

    /// Removes every job (load and returns) with `now - created > keep_jobs_seconds` and
    /// answers how many jobs were removed. `keep_jobs_seconds == 0` keeps everything.
    fn clean_expired(&self, now: u64, keep_jobs_seconds: u64) -> Result<usize>;
}
