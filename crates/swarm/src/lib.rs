//! A minion swarm and a benchmark runner: thousands of simulated Salt 3008 minions in one
//! process, and the side-by-side measurements of a Halite master and a stock salt-master
//! under that swarm.
//!
//! The swarm ([`swarm::run`], binary `halite-swarm`) gives each simulated minion its own id
//! and RSA key ([`keys`], cached on disk), signs it in with `_auth` (retrying while the key
//! is pending), subscribes it to the publish port, decrypts every publish, decides targeting
//! with `halite-target`, answers `test.ping`, `test.echo`, `test.sleep` and
//! `saltutil.find_job` with `_return` ([`exec`]) — with `--simulate-states`, also `state.apply`
//! by sending the master the requests a stock minion sends for it ([`states`]) — and fires `_minion_event`s at a rate set at
//! start or on stdin. It only speaks the wire protocol, so it works against a Halite master
//! and a stock salt-master alike. The benchmark runner ([`bench`], binary `halite-bench`)
//! starts a master, the swarm, and measures auth storm, publish → returns, and sustained
//! events, with the master's CPU and memory. `halite-bench api` ([`api_bench`]) is the
//! load generator for an HTTP API in front of a master (`halite-api` or stock `salt-api`):
//! concurrent `POST /` `local` calls and `/events` streams under a fired event rate.
//!
//! Built for scale on a small machine: one process, a few tokio worker threads, one TCP
//! connection per minion to the publish port ([`zmtp`]: a minimal ZMTP 3.0 client, because
//! a libzmq socket costs two file descriptors and the hard descriptor limit here is 20,000)
//! and a shared pool of request connections ([`pool`], one request in flight each).
//!
//! What it does not do: everything of a minion beyond the messages above — see
//! [`minion`] for the list (pillar, start events, publish signature checks, forking) and
//! [`pool`] for how request connections differ from stock minions'. Loopback is not
//! enforced by the swarm (it connects where `--master` says); the benchmark runner only
//! ever uses 127.0.0.1.
//!
//! Invariants:
//! - Bytes from the master never panic the swarm: ZMTP frames are size-capped and parsed
//!   without indexing past their length; every decode goes through `halite-proto`.
//! - A REQ connection carries at most one request at a time, and a connection whose request
//!   failed or timed out is never reused.
//! - Counters only grow; `ready` is printed once, when every minion is subscribed.

pub mod api_bench;
pub mod bench;
pub mod exec;
pub mod floors;
pub mod keys;
pub mod minion;
pub mod pool;
pub mod states;
pub mod stats;
pub mod swarm;
pub mod zmtp;

use std::path::PathBuf;
use std::time::Duration;

/// Why a swarm or benchmark operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The peer broke the ZMTP protocol, or the handshake failed.
    #[error("ZMTP: {0}")]
    Zmtp(String),
    /// A message could not be built, decoded or decrypted.
    #[error(transparent)]
    Proto(#[from] halite_proto::Error),
    /// A key file could not be read, parsed or generated.
    #[error("minion key {path}: {source}")]
    Key {
        /// The key file.
        path: PathBuf,
        /// The cause.
        source: halite_proto::Error,
    },
    /// No reply within the timeout.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The request pool or the swarm is shutting down.
    #[error("the swarm is shutting down")]
    Closed,
    /// The master did not accept the session: the minion must sign in again.
    #[error("the master asks for a new sign-in: {0}")]
    Reauth(String),
    /// The master refused the minion for good (rejected or denied key, changed master key,
    /// unsupported algorithms).
    #[error("sign-in refused: {0}")]
    Refused(String),
    /// Invalid options or environment (bad id prefix, too few file descriptors).
    #[error("{0}")]
    Usage(String),
    /// A benchmark step failed (a master did not start, a client call failed).
    #[error("benchmark: {0}")]
    Bench(String),
}
