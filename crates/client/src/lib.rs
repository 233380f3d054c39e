//! Talking to a master as a local client, the way Salt's `LocalClient` and
//! `RunnerClient.master_call` do: a clear `publish` or `runner` command on the request port
//! authenticated with the local user's key from `cachedir` (`user` as Salt's
//! `get_specific_user`), and job returns or runner events read from the master's event bus.
//! It works against a Halite master and a stock salt-master alike.
//!
//! What it does not do: print anything (the CLIs format results), decide exit codes, or
//! eauth/tokens (only the local user's key).
//!
//! Invariant: replies and events are untrusted; whatever their shape, decoding them gives
//! a value or an [`Error`], never a panic.

pub mod local;
pub mod runner;

pub use local::{specific_user, JobEvent, LocalClient, PublishReply, PublishRequest};
pub use runner::{RunEvent, RunnerJob, RunnerRequest};

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
    /// The master answered with an error of its own (`{"error": {"name", "message"}}`).
    #[error("{message}")]
    Master {
        /// The Python exception name.
        name: String,
        /// Its message.
        message: String,
    },
    /// The master answered something that is not the expected reply.
    #[error("unexpected reply from the master: {0}")]
    BadReply(String),
    /// Transport failure.
    #[error(transparent)]
    Transport(#[from] halite_transport::Error),
    /// Event bus failure.
    #[error(transparent)]
    Bus(#[from] halite_bus::Error),
}
