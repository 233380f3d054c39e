//! Talking to a master as a local client, the way Salt's `LocalClient` does: a clear
//! `publish` on the request port authenticated with the local user's key from `cachedir`,
//! and returns read from the master's event bus. It works against a Halite master and a
//! stock salt-master alike.
//!
//! What it does not do: print anything (the CLIs format results) or decide exit codes.

pub mod local;

pub use local::{JobEvent, LocalClient, PublishReply, PublishRequest};

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The master did not answer the publish in time.
    #[error("Salt request timed out. The master is not responding. You may need to run your command with `--async` in order to bypass the congested event bus. With `--async`, the CLI tool will print the job id (jid) and exit immediately without listening for responses. You can then use `salt-run jobs.lookup_jid` to look up the results of the job in the job cache later.")]
    Timeout,
    /// The master's event bus could not be reached.
    #[error("The salt master could not be contacted. Is master running?")]
    NoMaster,
    /// The master refused the credentials.
    #[error("Authentication error occurred.")]
    Authentication,
    /// The master refused the operation.
    #[error("Authorization error occurred.")]
    Authorization,
    /// The master answered something that is not a publish reply.
    #[error("unexpected reply from the master: {0}")]
    BadReply(String),
    /// Transport failure.
    #[error(transparent)]
    Transport(#[from] halite_transport::Error),
    /// Event bus failure.
    #[error(transparent)]
    Bus(#[from] halite_bus::Error),
}
