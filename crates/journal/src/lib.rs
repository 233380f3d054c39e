//! The master's durable event journal (a Halite extension), the socket that replays it, and
//! the client API for the master bus: listen with a tag filter, live or from a journal id or
//! time, and fire.
//!
//! Daemon side ([`JournalService`]): every event on the master bus is appended to an embedded
//! redb database (`cachedir/events.redb`, [`Journal`]) with a monotonically increasing id,
//! pruned by size and age ([`JournalConfig`]: `event_journal_max_bytes`,
//! `event_journal_max_age`). redb lets one process open the file, so the master serves
//! replays over a Unix socket (`sock_dir/halite_journal.ipc`, mode `0600`, protocol in
//! [`wire`]): a client asks for events from an id or a time, gets the stored ones, then live
//! ones as they are stored.
//!
//! Client side ([`MasterBus`], [`EventStream`]): the Rust counterpart of
//! `salt.utils.event.get_event('master', ...)`: events from the journal socket, from now
//! (live), from an id or from a time, gap-free however slowly they are read; or, where the
//! journal cannot be reached (a stock master, `event_journal: False`, a user the socket
//! does not admit), live events from the bus's pub socket. [`MasterBus::fire`] pushes into
//! the pull socket.
//! [`state_event_line`] prints an event as `salt-run state.event` does.
//!
//! What it does not do: it does not touch the bus's wire format (that is `halite-bus`), does
//! not journal the minion bus, and does not let other processes open the journal file.
//!
//! Invariants:
//! - The journal misses nothing the bus publishes: its bus subscription is lossless
//!   ([`halite_bus::Subscription`]): a sender on the pull socket waits while the journal
//!   is a budget (`halite_bus::SUBSCRIBER_BACKLOG_BYTES`) behind; nobody else waits for it.
//!   The writer appends whatever is queued in one transaction. Only the daemon's own fires,
//!   which never wait, can be refused to a journal more than two budgets behind, and a
//!   failed append loses its batch: either way the events are logged at `error` and a
//!   [`GAP_TAG`] entry (`{"missed": N, "reason": ...}`) takes their place, so a replaying
//!   client knows.
//! - An event is sent to replay clients only after its transaction is committed durably, so
//!   what a client saw is in the journal after a crash, and ids are never handed out twice.
//! - A replay session subscribes to committed batches *before* it reads the journal, then
//!   sends every id once, in order: events it already sent are skipped, and a hole between
//!   what it sent and a live batch (the session fell behind) is filled from the journal.
//! - Nothing a replay client sends can panic the master or stop it serving others: a bad
//!   request is logged at `warn`, answered with an error message, and the connection closed.
//! - Every database or file-system error names the file it failed on.

mod api;
mod client;
mod config;
mod format;
mod server;
mod socket;
mod store;
pub mod wire;
mod writer;

pub use api::{
    parse_since, BusEvent, EventSender, EventStream, MasterBus, Since, TagFilter, RECONNECT_DELAY,
};
pub use client::ReplayStream;
pub use config::{
    socket_path, JournalConfig, DEFAULT_MAX_AGE, DEFAULT_MAX_BYTES, JOURNAL_FILE, JOURNAL_SOCKET,
    MIN_MAX_BYTES,
};
pub use format::state_event_line;
pub use server::{MAX_SESSIONS, REQUEST_TIMEOUT};
pub use store::{Appended, Journal, Record, Retention, ENTRY_OVERHEAD};
pub use writer::{GAP_TAG, MAX_BATCH_EVENTS, PRUNE_INTERVAL};

use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Every way the journal, its socket or the bus client can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The redb database at `path` failed: it could not be opened (locked by another
    /// process, not a redb file, not writable) or a transaction could not run or commit.
    #[error("event journal database {}: {source}", path.display())]
    Db {
        /// The journal file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: redb::Error,
    },
    /// The journal file was written with another schema version.
    #[error(
        "event journal {}: schema version {found} is not supported (expected {expected})",
        path.display()
    )]
    UnsupportedSchema {
        /// The journal file.
        path: PathBuf,
        /// The version in the file.
        found: u64,
        /// The version this build writes.
        expected: u64,
    },
    /// The journal file's content breaks an invariant of the schema (the message starts
    /// with the file once it leaves [`Journal`]).
    #[error("event journal is corrupt: {0}")]
    Corrupt(String),
    /// A journal option in the master config has a bad value.
    #[error("{file}: invalid value for {option}: expected {expected}, got {got}")]
    Config {
        /// The option.
        option: &'static str,
        /// The master config file.
        file: PathBuf,
        /// What the option takes.
        expected: &'static str,
        /// The value found.
        got: String,
    },
    /// A file-system operation on the journal or its socket failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The replay socket path holds something that is not a socket; it is left alone.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    /// Connecting to the replay socket failed (usually: the master is not running, or
    /// `event_journal` is off).
    #[error("cannot connect to the event journal at {path}: {source}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The replay connection broke (I/O error, or closed in the middle of a message).
    #[error("event journal connection {path} failed: {reason}")]
    Connection {
        /// The socket.
        path: PathBuf,
        /// What happened.
        reason: String,
    },
    /// A replay message could not be parsed.
    #[error("event journal protocol: {0}")]
    Protocol(String),
    /// The replay server refused the request.
    #[error("event journal refused the request: {0}")]
    Refused(String),
    /// The master bus failed (connect, fire, read).
    #[error(transparent)]
    Bus(#[from] halite_bus::Error),
    /// A `--since` value is neither an id nor a time.
    #[error("invalid start {0:?}: expected an event id, an ISO 8601 time, or an age such as 10m")]
    BadSince(String),
}

/// Inside the crate a redb error starts without its file; [`Journal`] names the file before
/// the error leaves it ([`Error::at`]), so every [`Error::Db`] a caller sees has its path.
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
    redb::CommitError
);

impl Error {
    /// Names the journal file `path` in an error of a call on it: a database error (made
    /// without its file) or a corrupt record.
    pub(crate) fn at(self, path: &std::path::Path) -> Error {
        match self {
            Error::Db { path: p, source } if p.as_os_str().is_empty() => Error::Db {
                path: path.to_path_buf(),
                source,
            },
            Error::Corrupt(what) => Error::Corrupt(format!("{}: {what}", path.display())),
            other => other,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The running journal: the writer and the replay server of one master.
pub struct JournalService {
    stop: CancellationToken,
    writer: writer::Writer,
    server: tokio::task::JoinHandle<()>,
    journal: Arc<Journal>,
}

impl JournalService {
    /// Starts the journal of a master: subscribes to `bus` first (so no event fired from now
    /// on is missed), opens the journal file, binds the replay socket and spawns the writer
    /// and the server. `Ok(None)` when `event_journal` is off.
    ///
    /// A journal file that cannot be read as a journal (corrupt, foreign, another schema)
    /// is renamed to `events.redb.bad-<unix time>` with an `error` line and a fresh journal
    /// is started, so a damaged journal never keeps the master from starting.
    pub async fn start(
        cfg: &JournalConfig,
        bus: &halite_bus::BusHandle,
    ) -> Result<Option<JournalService>> {
        if !cfg.enabled {
            tracing::info!("Event journal disabled (event_journal: False)");
            return Ok(None);
        }
        let rx = bus.subscribe();
        let journal = Arc::new(open_or_set_aside(cfg).await?);
        let (live, _) = tokio::sync::broadcast::channel(writer::LIVE_CAPACITY);
        let server = server::ReplayServer::bind(&cfg.socket, journal.clone(), live.clone())?;
        let stop = CancellationToken::new();
        let writer = writer::Writer::spawn(journal.clone(), rx, live, stop.clone())?;
        let server = tokio::spawn(server.run(stop.clone()));
        tracing::info!(
            file = %cfg.path.display(),
            socket = %cfg.socket.display(),
            max_bytes = cfg.retention.max_bytes,
            max_age_s = cfg.retention.max_age.map(|a| a.as_secs()),
            "Event journal ready"
        );
        Ok(Some(JournalService {
            stop,
            writer,
            server,
            journal,
        }))
    }

    /// The journal this service writes.
    pub fn journal(&self) -> &Arc<Journal> {
        &self.journal
    }

    /// Stops: journals the events already on the bus, commits them, closes every replay
    /// connection and removes the socket file.
    pub async fn shutdown(self) {
        self.stop.cancel();
        self.writer.join().await;
        let _ = self.server.await;
    }
}

async fn open_or_set_aside(cfg: &JournalConfig) -> Result<Journal> {
    let (path, retention) = (cfg.path.clone(), cfg.retention);
    let open = move || -> Result<Journal> {
        match Journal::open(&path, retention) {
            Err(
                e @ (Error::Db {
                    source:
                        redb::Error::Corrupted(_)
                        | redb::Error::UpgradeRequired(_)
                        | redb::Error::TableTypeMismatch { .. },
                    ..
                }
                | Error::UnsupportedSchema { .. }
                | Error::Corrupt(_)),
            ) => {
                let secs = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let aside = path.with_extension(format!("redb.bad-{secs}"));
                tracing::error!(
                    file = %path.display(),
                    moved_to = %aside.display(),
                    error = %e,
                    "Event journal unreadable; setting it aside and starting a new one"
                );
                std::fs::rename(&path, &aside).map_err(|source| Error::Io {
                    what: "cannot set aside",
                    path: path.clone(),
                    source,
                })?;
                Journal::open(&path, retention)
            }
            other => other,
        }
    };
    tokio::task::spawn_blocking(open)
        .await
        .map_err(|e| Error::Corrupt(format!("opening the journal panicked: {e}")))?
}
