//! The Halite master's metrics, and how a local reader gets them.
//!
//! # What it does
//!
//! * [`MasterMetrics`]: the master's counters and request-latency histograms as plain
//!   atomics. Counting is one relaxed atomic add (a histogram observation is two: its
//!   bucket and its sum), so the request workers pay nothing measurable for it.
//! * [`Snapshot`]: every metric family at one moment (name, help, kind, unit, labelled
//!   samples; counters, gauges, histograms as bucket counts + sum + count), a serde type
//!   encoded as msgpack with named fields. [`MasterMetrics::snapshot`] builds it from the
//!   counters plus the gauges the master reads at that moment ([`Sampled`]: keys by
//!   state, connected minions, event bus, job-cache queue, panics).
//! * [`MetricsServer`] / [`fetch`]: a local Unix socket, `<sock_dir>/master_metrics.ipc`
//!   ([`SOCKET_NAME`], mode `0600`): a client connects, the server writes one snapshot as a
//!   4-byte big-endian length and the msgpack body, and closes.
//!
//! # What it does not do
//!
//! No HTTP, no text exposition: `halite-api` serves `GET /metrics` and encodes the
//! snapshot with the `prometheus-client` crate. No clock on the hot path and no
//! per-request allocation. Nothing here decides what the master counts: the master calls
//! the `count_*` methods where things happen.
//!
//! # Deviations from Salt
//!
//! None to speak of: stock Salt has no metrics. The socket is a Halite extension; a stock
//! master has none, which a reader sees as an absent socket.
//!
//! # Invariants
//!
//! * A reply is read with a bounded length ([`MAX_SNAPSHOT_BYTES`], checked before the
//!   body is read), within a timeout, and [`Snapshot::decode`] validates what it decoded
//!   (metric and label names, unique families and label sets, histogram buckets in order
//!   and adding up): a malformed or oversized reply is an [`Error`], never a panic, and
//!   never reaches an encoder.
//! * The socket is created with its mode already set (bound in a private directory, then
//!   renamed into place), so it is never reachable with a looser mode.
//! * Metric families carry the [`PREFIX`] `halite_master_`; label values of the request
//!   histogram come only from the command names the master registered, so the series count
//!   is fixed whatever clients send.

mod ipc;
mod master;
mod snapshot;

pub use ipc::{fetch, socket_path, MetricsServer, FETCH_TIMEOUT, MAX_CLIENTS, SOCKET_NAME};
pub use master::{
    AuthFailure, BusCounts, ClientAuth, Counter, JobCacheQueue, KeyCounts, LatencyHistogram,
    MasterMetrics, Panics, RequestRefusal, Sampled, LATENCY_BUCKETS_NANOS,
};
pub use snapshot::{
    Family, HistogramSample, Kind, Sample, SampleValue, Snapshot, Unit, FORMAT, MAX_SNAPSHOT_BYTES,
    PREFIX, UP,
};

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong serving or reading metrics.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The socket could not be bound.
    #[error("cannot bind the metrics socket {path}: {source}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Something that is not a socket is where the socket should be; it is left alone.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    /// Connecting to or reading the socket failed (no master, or not a Halite one).
    #[error("cannot read the master's metrics from {path}: {source}")]
    Io {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The master did not answer in time.
    #[error("no metrics from {path} within {timeout:?}")]
    Timeout {
        /// The socket path.
        path: PathBuf,
        /// How long the reader waited.
        timeout: Duration,
    },
    /// The reply announced more bytes than a snapshot may have.
    #[error("a metrics reply of {size} bytes is over the limit of {limit} bytes")]
    TooLarge {
        /// The announced size.
        size: u64,
        /// [`MAX_SNAPSHOT_BYTES`].
        limit: usize,
    },
    /// The reply is not a valid snapshot.
    #[error("malformed metrics snapshot: {0}")]
    Malformed(String),
    /// A snapshot could not be encoded (a bug).
    #[error("cannot encode the metrics snapshot: {0}")]
    Encode(String),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
