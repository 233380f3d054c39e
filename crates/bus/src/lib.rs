//! Salt 3008's local event bus, byte-compatible with stock `salt.utils.event`.
//!
//! A daemon binds two sockets ([`BusServer`]): senders connect to the **pull** socket and
//! write length-prefixed frames; subscribers connect to the **pub** socket and read every
//! event as a bare msgpack stream. Stock Python programs calling
//! `salt.utils.event.get_event(...).get_event()` / `.fire_event()` work against a Halite
//! daemon unchanged. In-process code fires with [`BusHandle::fire`] and watches the bus with
//! [`BusHandle::subscribe`]; tools outside the daemon use [`BusClient`].
//!
//! What it does not do: framing and event encoding live in [`halite_proto::event`] (this
//! crate only moves those bytes over sockets); it knows nothing of tags' meaning, of
//! forwarding events to a master (`fire_master`), or of Salt's `subscribe()`/pending-event
//! cache (a [`Listener`] filters by tag prefix and drops the rest, like `get_event`, except
//! [`GAP_TAG`] events, which it always yields).
//!
//! Invariants:
//! - Nothing a peer sends can panic the bus or stop it serving others: a bad frame ends that
//!   connection (or, when the framing is intact, drops that one event) with a `warn` line.
//! - A pull frame's declared length is checked against [`frame_limit`] before its body is
//!   read, so a sender cannot make the bus allocate more than that per connection; frames
//!   over 64 KiB being received at once share [`PULL_BUFFER_BYTES`], and a sender waits
//!   for its share (back-pressure) before its frame is read.
//! - Frames are parsed without decoding the `{"head", "body"}` wrapper; an event's data is
//!   decoded within `halite_proto::value`'s budget (elements proportional to its bytes).
//! - Each event is encoded once; every subscriber is written the same bytes, in publish
//!   order, from its own queue; a pub-socket subscriber's writer takes what is queued in
//!   batches of up to [`WRITE_BATCH_BYTES`] and writes each with one `write`.
//! - A pub-socket subscriber is never more than [`SUBSCRIBER_BACKLOG_BYTES`] behind, each
//!   event counting its frame plus [`EVENT_OVERHEAD`] (so at most
//!   [`SUBSCRIBER_QUEUE_CAPACITY`] events and at most 64 MiB of frames; two
//!   [`frame_limit`]s if that is larger): beyond that it loses its oldest events, and it is never
//!   silent about it: a [`GAP_TAG`] event `{"dropped": n}` with their exact count comes
//!   right before the next event it gets. The loss is counted
//!   ([`BusHandle::dropped_events`]) and logged at most once per [`DROP_LOG_INTERVAL`] per
//!   subscriber, and again when it disconnects.
//! - An in-process [`Subscription`] loses nothing that came through the pull socket: a
//!   pull sender reserves its batch in every in-process subscriber's queue before
//!   publishing it, and waits while one is a budget behind (its connection stops being
//!   read; the kernel then holds the sender back). Pub-socket subscribers are never held
//!   back by anyone, and [`BusHandle::fire`] never waits: it is admitted up to a second
//!   budget, and only past that is an event refused to that subscriber, reported in its
//!   place ([`RecvError::Lagged`]).
//! - The wall clock is read in one place: the `_stamp` of [`BusHandle::fire`],
//!   [`BusClient::fire`] and gap events.

mod addr;
mod client;
mod event;
mod fanout;
mod server;
mod socket;

pub use addr::{minion_hash, BusAddr, BusSockets, MASTER_PUB, MASTER_PULL};
pub use client::{BusClient, Listener};
pub use event::{frame_limit, Event, DEFAULT_MAX_EVENT_SIZE, FRAME_SLACK};
pub use fanout::{RecvError, Subscription, TryRecvError, EVENT_OVERHEAD};
pub use server::{
    BusHandle, BusServer, DROP_LOG_INTERVAL, GAP_TAG, MAX_CONNECTIONS, PULL_BUFFER_BYTES,
    SUBSCRIBER_BACKLOG_BYTES, SUBSCRIBER_QUEUE_CAPACITY, WRITE_BATCH_BYTES,
};
pub use socket::{bind_unix, SocketFile, UnixBindError};

use std::path::PathBuf;

/// Every way a bus operation can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding the pub or pull socket failed (directory missing, port in use, permissions).
    #[error("cannot bind event bus socket {addr}: {source}")]
    Bind {
        /// The address being bound.
        addr: BusAddr,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The path where a socket should be bound holds something that is not a socket;
    /// the bus refuses to delete it.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    /// Connecting to a bus socket failed (usually: the daemon is not running).
    #[error("cannot connect to event bus {addr}: {source}")]
    Connect {
        /// The address connected to.
        addr: BusAddr,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Reading from or writing to an established bus connection failed.
    #[error("event bus connection {addr} failed: {source}")]
    Io {
        /// The address of the connection.
        addr: BusAddr,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The bus closed the connection in the middle of a frame.
    #[error("event bus {addr} closed the connection mid-frame")]
    Truncated {
        /// The address of the connection.
        addr: BusAddr,
    },
    /// A frame or event from the bus could not be decoded.
    #[error("bad event bus data: {0}")]
    Proto(#[from] halite_proto::Error),
    /// An event tag is empty or contains the `"\n\n"` separator.
    #[error("invalid event tag {0:?}: tags must be non-empty and must not contain \"\\n\\n\"")]
    BadTag(String),
    /// Event data is not a map (Salt: "Dict object expected").
    #[error("event data must be a map")]
    DataNotAMap,
    /// An event is larger than the bus accepts even after trimming.
    #[error("event of {size} bytes exceeds the bus limit of {limit} bytes")]
    EventTooLarge {
        /// Size of the frame.
        size: usize,
        /// The limit ([`frame_limit`]).
        limit: usize,
    },
    /// `hash_type` names a hash Salt's socket naming cannot use here.
    #[error("unsupported hash_type {0:?} for minion event socket names")]
    UnknownHashType(String),
    /// The hash library failed.
    #[error("hashing the minion id failed: {0}")]
    Hash(String),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
