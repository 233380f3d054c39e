//! Salt 3008.3 eauth tokens: minting ids, expiry rules, the token dict, and the master's
//! token store.
//!
//! A client that authenticated through `external_auth` (`salt -a pam -T`, salt-api's
//! `/login`) asks the master for a token (clear `mk_token`), then presents it instead of
//! credentials (`token` in the publish `kwargs`, clear `get_token`). This crate holds the
//! parts of that flow that are Salt's data rules, as `salt/auth/__init__.py`
//! (`LoadAuth.mk_token`, `get_tok`, `rm_token`, `_allow_custom_expire`) and
//! `salt/daemons/masterapi.py` (`clean_expired_tokens`) define them:
//!
//! - [`Token`] and [`Token::to_value`]: exactly the dict Salt builds (`start`, `expire`,
//!   `name`, `eauth`, then `auth_list` and `groups` when present, then `token`, in that
//!   order), which the master returns to `mk_token`/`get_token` and stock `salt -T` and
//!   salt-api read.
//! - [`new_token_id`]: the hex digest of `hash_type` over 512 random bytes;
//!   [`is_token_id`]: the shape check the master applies before any store lookup.
//! - [`expire_for`] / [`allow_custom_expire`]: `token_expire` and
//!   `token_expire_user_override`.
//! - [`TokenStore`], and [`RedbTokenStore`] on `cachedir/tokens.redb` ([`TOKEN_FILE`]).
//!
//! What it does not do: authenticate anyone (eauth backends, `time_auth`), compute ACLs
//! (`auth_list` is stored as the caller gives it; `halite-acl` evaluates it), check that a
//! token's `eauth` is still enabled in `external_auth` (`authenticate_token`; the master
//! does that), read the clock (every `now` is the caller's, in Unix seconds as an `f64`, as
//! Salt stores them), or schedule cleaning: the master calls
//! [`TokenStore::clean_expired`] every `loop_interval`, as Salt's Maintenance process calls
//! `clean_expired_tokens`.
//!
//! Deviations from Salt (each the documented or safe behaviour):
//! - **Storage.** Salt's default store is the `localfs` cache, one file per token at
//!   `cachedir/tokens/<token>.p`. Halite keeps tokens in one redb file,
//!   `cachedir/tokens.redb` (mode 0600, like Salt's umask-0177 token files). Stock programs
//!   that open Salt's token directory themselves instead of asking the master (salt-api's
//!   cherrypy `/ws` and `/logout`, rest_tornado) therefore do not see Halite's tokens.
//! - **Token ids never reach the store unchecked.** Salt's `localfs` cache joins the
//!   client's token into a file name, so a "token" such as `../../x` reaches the
//!   filesystem. Halite accepts only 1 to [`MAX_TOKEN_ID_LEN`] lowercase hex characters
//!   (what `hexdigest()` produces): the master answers anything else as an invalid token
//!   without a lookup, and the store itself refuses to write such an id and never finds one.
//! - **`token_expire_user_override: {eauth: "name"}`.** Salt tests `username in value`, which
//!   for a string value is a *substring* test (`{pam: fredx}` lets `fred` and `red` choose
//!   their expiry; verified against 3008.3). Halite treats a string as one user name and
//!   compares it whole. A list (or the keys of a map) is matched element by element, as in
//!   Salt.
//! - **A requested `token_expire` that is not a finite number** (`inf`, `nan`) is ignored and
//!   the default used; Salt would mint a token that never expires (or crash on a string,
//!   which the caller turns into `None` before calling here).
//! - A store read that fails (I/O, database error) is logged with Salt's "transient error"
//!   wording and returned as an error; the token is not removed, as in Salt.
//! - No cap on the number of tokens, as in Salt: tokens are only minted after a successful
//!   eauth login, and expired ones go at the next [`TokenStore::clean_expired`].
//!
//! Invariants:
//! - Nothing read from the store or from a client panics; a record that does not decode to a
//!   token (or is stored under another token's id) is removed with Salt's "could not be
//!   loaded" warning, like an expired one.
//! - A token is expired when `expire < now` (Salt's test); a token whose `expire` is not a
//!   number (NaN) counts as expired.
//! - Every store write is one durable redb transaction: a restarted master keeps every
//!   unexpired token.

mod expire;
mod id;
mod redb_store;
mod token;

pub use expire::{allow_custom_expire, expire_for, DEFAULT_TOKEN_EXPIRE};
pub use id::{is_token_id, new_token_id, MAX_TOKEN_ID_LEN, RANDOM_BYTES};
pub use redb_store::{RedbTokenStore, TOKEN_FILE};
pub use rmpv::Value;
pub use token::Token;

use std::path::PathBuf;

/// Everything that can go wrong with tokens.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A `hash_type` that Salt's master does not offer for tokens.
    #[error("unsupported hash_type {0:?} (expected md5, sha1, sha224, sha256, sha384 or sha512)")]
    UnsupportedHashType(String),
    /// OpenSSL failed to produce random bytes or a digest.
    #[error("OpenSSL: {0}")]
    OpenSsl(#[from] openssl::error::ErrorStack),
    /// A token id that is not 1 to [`MAX_TOKEN_ID_LEN`] lowercase hex characters.
    #[error("a token id must be 1 to {MAX_TOKEN_ID_LEN} lowercase hex characters")]
    InvalidTokenId,
    /// A value is not a token dict (missing or mistyped field).
    #[error("malformed token: {0}")]
    Malformed(String),
    /// A token cannot be stored so that it reads back (its `auth_list` nests deeper than
    /// msgpack decoding allows).
    #[error("token cannot be stored: {0}")]
    Unstorable(String),
    /// The token file could not be created or its mode set.
    #[error("{path}: {source}")]
    Io {
        /// The token database file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The redb database failed: it could not be opened (locked by another process, not a
    /// redb file, failed its integrity check) or a transaction could not run or commit.
    #[error("token database: {0}")]
    Db(#[from] redb::Error),
}

macro_rules! redb_error_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                Error::Db(redb::Error::from(e))
            }
        }
    )*};
}
redb_error_from!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where the master keeps eauth tokens. Implementations are shared between worker threads.
///
/// Ids handed to these methods need not be checked by the caller for safety: an id that is
/// not [`is_token_id`] is never stored and never found. The master still checks first, to
/// answer "Invalid token" without a lookup.
pub trait TokenStore: Send + Sync {
    /// Stores `token` under `token.token`, replacing any token with that id.
    /// [`Error::InvalidTokenId`] when the id is not a token id.
    fn put(&self, token: &Token) -> Result<()>;

    /// The token with this id if it exists and has not expired at `now`.
    ///
    /// A missing, expired or undecodable token is `Ok(None)`, logged at WARNING as Salt's
    /// `get_tok` does ("Token %r could not be loaded (%r); removing it from the store."); an
    /// expired or undecodable one is removed (an unknown id costs no write). A database failure is logged with Salt's
    /// "transient error" wording and returned; the caller treats the request as not
    /// authenticated and need not log it again.
    fn get(&self, id: &str, now: f64) -> Result<Option<Token>>;

    /// Removes the token; `true` when there was one.
    fn remove(&self, id: &str) -> Result<bool>;

    /// Removes every token that has expired at `now` or does not decode, and answers how
    /// many were removed (Salt's `clean_expired_tokens`, run every `loop_interval`).
    fn clean_expired(&self, now: f64) -> Result<usize>;

    /// How many tokens are stored (expired ones included until they are cleaned).
    fn len(&self) -> Result<usize>;

    /// Whether the store holds no token.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
}
