//! The Salt 3008 protocol core: bytes in, bytes out, no I/O.
//!
//! This crate holds everything Halite needs to speak Salt's wire protocol that can be
//! expressed as pure functions or state machines: msgpack with Salt's str/bin rules
//! ([`value`]), the Crypticle symmetric envelope ([`crypticle`]), the three RSA schemes Salt
//! mixes ([`rsa`]), PEM normalisation and fingerprints ([`pem`]), job ids ([`jid`]), the
//! request/publish envelopes ([`envelope`]), the master's `_auth` decision ([`auth`]), signed
//! master public keys ([`signing`]) and the event-bus framing ([`event`]).
//!
//! What it deliberately does not do: open sockets, read files or the clock. Callers pass
//! `now`, key material and key state in; every function returns data or an [`Error`].
//! `cargo tree -p halite-proto` shows no tokio and no zmq.
//!
//! Invariants:
//! - Decoders never panic on untrusted bytes; they return [`Error`].
//! - msgpack `str` and `bin` are equivalent on input and never require UTF-8
//!   (Salt's Python encoder puts random bytes in `str` containers).
//! - Signatures are verified over the transmitted bytes, never over a re-encoding.

pub mod auth;
pub mod crypticle;
pub mod envelope;
pub mod event;
pub mod jid;
pub mod minion;
pub mod pem;
pub mod rsa;
pub mod signing;
pub mod value;

pub use rmpv::Value;

/// Every way a protocol operation can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes are not valid msgpack (or are truncated, or nest too deeply).
    #[error("invalid msgpack: {0}")]
    Msgpack(String),
    /// A message decoded but lacks a field or has one of the wrong type.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// A Crypticle key string is not 76 base64 characters holding 56 bytes.
    #[error("invalid Crypticle key string")]
    BadKeyString,
    /// The HMAC of an encrypted blob did not verify (wrong key or tampered data).
    #[error("Crypticle HMAC verification failed")]
    BadHmac,
    /// Decryption produced data without the `pickle::` prefix or with a wrong nonce.
    #[error("decrypted payload is not a Salt payload: {0}")]
    BadPayload(String),
    /// An RSA or PEM operation failed.
    #[error("RSA: {0}")]
    Rsa(String),
    /// A signature did not verify.
    #[error("signature verification failed")]
    BadSignature,
    /// An algorithm name Salt does not know (or Halite does not support).
    #[error("unsupported algorithm {0:?}")]
    UnsupportedAlgorithm(String),
    /// A message is larger than the configured limit.
    #[error("message of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Size of the offending message.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
}

impl From<openssl::error::ErrorStack> for Error {
    fn from(e: openssl::error::ErrorStack) -> Self {
        Error::Rsa(e.to_string())
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
