//! Transports: moving whole Salt messages between master and minions.
//!
//! The master side is the [`ServerTransport`] trait: incoming request bodies arrive on a
//! bounded channel as [`Incoming`], replies and publishes go out through the trait. The
//! ZeroMQ implementation ([`zeromq::ZmqServer`]) binds Salt's ROUTER (`ret_port`) with libzmq
//! on a dedicated thread, bridged to tokio, and serves the PUB side (`publish_port`) with
//! Halite's own ZMTP engine ([`pubserver`], on the sans-I/O codec [`zmtp`]), which libzmq
//! SUB sockets cannot tell from libzmq's PUB but which costs a fraction of its memory per
//! minion.
//!
//! What this crate does not do: decode or encrypt anything. Bodies are opaque bytes; the
//! protocol lives in `halite-proto`.
//!
//! Limits on the request port (see [`zeromq`]):
//! - [`zeromq::ZmqServerConfig::max_msg_size`] is libzmq's `maxmsgsize` on the ROUTER: a
//!   peer that announces a bigger message is disconnected before anything is allocated
//!   for it. The master sets it from its `max_request_size` option, the limit its request
//!   handling enforces, so the two cannot disagree.
//! - Requests waiting for a worker are bounded in bytes
//!   ([`zeromq::ZmqServerConfig::incoming_bytes`]) as well as in number
//!   ([`zeromq::INCOMING_CAPACITY`]): a request holds its share of the byte budget until
//!   the worker drops its [`Incoming`]. When either is used up the socket thread stops
//!   reading, libzmq queues behind it and peers see back-pressure, while replies keep
//!   flowing.
//! - Large bodies are not copied: they stay in the libzmq message they arrived in
//!   ([`Body`]), so a request costs its size once.
//!
//! Invariants:
//! - Every request is answered at most once, to the peer it came from.
//! - Publishes leave in the order they were handed to [`ServerTransport::publish`].
//! - A peer's misbehaviour never stops the socket thread.
//! - Replies are sent between bounded batches of reads ([`zeromq::READ_BATCH`]), so a
//!   flood of requests cannot hold them back.

pub mod client;
pub mod pubserver;
pub mod zeromq;
pub mod zmtp;

use std::fmt;

/// Identifies the peer (ROUTER routing id) a reply must go to.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PeerId(pub Vec<u8>);

impl fmt::Debug for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PeerId({:02x?})", self.0)
    }
}

/// One request body received on the request port. Dropping it gives its bytes back to
/// the transport's byte budget.
#[derive(Debug)]
pub struct Incoming {
    /// Where the reply goes.
    pub peer: PeerId,
    /// The request body (one msgpack document).
    pub body: Body,
    /// Its share of the byte budget of requests waiting for or held by a worker.
    pub(crate) _bytes: zeromq::BytesPermit,
}

/// A request body: the bytes, owned by Halite (small bodies, copied) or still by the
/// libzmq message they arrived in (large ones, not copied). Reads as `[u8]`.
pub struct Body(BodyRepr);

enum BodyRepr {
    Bytes(Vec<u8>),
    Zmq(zmq::Message),
}

impl std::ops::Deref for Body {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            BodyRepr::Bytes(b) => b,
            BodyRepr::Zmq(m) => m,
        }
    }
}

impl From<Vec<u8>> for Body {
    fn from(bytes: Vec<u8>) -> Self {
        Body(BodyRepr::Bytes(bytes))
    }
}

impl Body {
    /// Bodies up to this size are copied out of libzmq's receive buffer (a message this
    /// small shares that buffer with its neighbours, which holding it would pin).
    pub const COPY_MAX: usize = 64 << 10;

    /// Takes a received message: copied when small, kept as it is when large.
    pub(crate) fn from_message(msg: zmq::Message) -> Self {
        if msg.len() <= Self::COPY_MAX {
            Body(BodyRepr::Bytes(msg.to_vec()))
        } else {
            Body(BodyRepr::Zmq(msg))
        }
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Body({} bytes)", self.len())
    }
}

/// Transport errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A ZeroMQ call failed.
    #[error("ZeroMQ {op}: {source}")]
    Zmq {
        /// What was being done.
        op: String,
        /// The libzmq error.
        source: zmq::Error,
    },
    /// A listening port could not be set up.
    #[error("bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The socket thread has stopped.
    #[error("transport is closed")]
    Closed,
    /// A request got no reply in time.
    #[error("request timed out after {0:?}")]
    Timeout(std::time::Duration),
}

impl Error {
    pub(crate) fn zmq(op: impl Into<String>) -> impl FnOnce(zmq::Error) -> Error {
        let op = op.into();
        move |source| Error::Zmq { op, source }
    }
}

/// The master side of a transport: replies to requests and publishes to all minions.
///
/// Implementations are cheap to call from any task; they never block on the network.
pub trait ServerTransport: Send + Sync {
    /// Sends `body` as the reply to the request that came from `peer`.
    fn reply(&self, peer: PeerId, body: Vec<u8>) -> Result<(), Error>;
    /// Sends one publish frame to every connected minion.
    fn publish(&self, frame: Vec<u8>) -> Result<(), Error>;
    /// The addresses connected to the publish port now (liveness as the connection shows
    /// it; Salt's `connected_ids` reads the same from the OS).
    fn publish_peers(&self) -> Vec<std::net::IpAddr>;
}
