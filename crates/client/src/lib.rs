//! Talking to a master as a local client, the way Salt's `LocalClient`,
//! `RunnerClient.master_call`, `WheelClient.master_call` and `salt.auth.Resolver` do: a
//! clear `publish`, `runner` or `wheel` command on the request port ([`wheel`]: the reply
//! is the result), and job returns or runner events read from the master's event bus.
//! It works against a Halite master and a stock salt-master alike.
//!
//! Requests are authenticated with [`Credentials`]: by default the local user's key from
//! `cachedir` (`user` as Salt's `get_specific_user`); or external authentication
//! (`eauth`, `username`, `password`) or an eauth token, in the load where Salt's clients
//! put them ([`auth`]). [`LocalClient::mk_token`] and [`LocalClient::get_token`] ask the
//! master for a token and about one; [`TokenFile`] is the CLIs' saved token
//! ([`token`]); [`LocalClient::cli_credentials`] is the `-a`/`-T` logic `salt` and
//! `salt-run` share, in Salt's order.
//!
//! Following a job ([`LocalClient::follow`]) is `get_iter_returns`: returns as they come,
//! `saltutil.find_job` probes for minions silent past `timeout`, with the timing kept
//! apart and pure in [`follow`]. Unlike Salt, a probe ends with the last answer: a job
//! whose silent minions all say "not running" costs `timeout` plus one probe round trip,
//! not `gather_job_timeout` more. [`batch`] runs `salt --batch` (and `--static`) the way
//! `salt.cli.batch` does. Publishing resolves nodegroups (`-N`, `N@` words) from the
//! master config first, as Salt's `LocalClient._prep_pub` does.
//!
//! What it does not do: print results (the CLIs format them) or decide exit codes. The
//! only terminal I/O is [`TerminalPrompter`]'s, for a CLI that asks for eauth credentials.
//!
//! Invariants: replies and events are untrusted; whatever their shape, decoding them gives
//! a value or an [`Error`], never a panic. Passwords, keys and tokens are never logged
//! (`Credentials`' `Debug` hides them) and a saved token file is never readable by others.

pub mod auth;
pub mod batch;
pub mod follow;
pub mod local;
pub mod runner;
pub mod token;
pub mod wheel;

pub use auth::{
    resolve_eauth, unavailable_message, CliCredentials, CliKind, Credentials, EauthArgs, Prompter,
    TerminalPrompter, EAUTH_BACKENDS,
};
pub use local::{specific_user, JobEvent, LocalClient, PublishReply, PublishRequest};
pub use runner::{RunEvent, RunnerJob, RunnerRequest};
pub use token::{default_token_file, root_key, TokenFile, DEFAULT_TOKEN_EXPIRE};
pub use wheel::{WheelReply, WheelRequest};

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
    /// The master answered with an error of its own (`{"error": {"name", "message"}}`),
    /// e.g. a refused runner call: `EauthAuthenticationError`, 'Authentication failure
    /// of type "eauth" occurred for user alice.'.
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

impl Error {
    /// Whether the master refused the credentials: [`Error::Authentication`], or a master
    /// error named `AuthenticationError` or `*AuthenticationError`
    /// (`UserAuthenticationError`, `EauthAuthenticationError`,
    /// `TokenAuthenticationError`).
    pub fn is_authentication(&self) -> bool {
        match self {
            Error::Authentication => true,
            Error::Master { name, .. } => name.ends_with("AuthenticationError"),
            _ => false,
        }
    }

    /// Whether the master refused the operation: [`Error::Authorization`], or a master
    /// error named `AuthorizationError`.
    pub fn is_authorization(&self) -> bool {
        match self {
            Error::Authorization => true,
            Error::Master { name, .. } => name == "AuthorizationError",
            _ => false,
        }
    }
}
