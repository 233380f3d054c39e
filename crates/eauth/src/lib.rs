//! Salt 3008.3's `external_auth` (eauth): who may log in with which backend, and the ACL an
//! authenticated identity gets.
//!
//! A client that sends `eauth`, `username` and `password` (`salt -a pam`, salt-api's
//! `/login`, `mk_token`) is authenticated by the backend named in the master's
//! `external_auth` option, then authorised with that backend's ACL map. This crate holds
//! what Salt's `salt/auth/__init__.py` (`LoadAuth.authenticate_eauth`, `time_auth`,
//! `get_auth_list`), `salt/auth/file.py`, `salt/auth/pam.py`, `salt/auth/sharedsecret.py`
//! and `salt/auth/auto.py` define:
//!
//! - [`ExternalAuth::from_config`]: the `external_auth` option, checked once at startup; a
//!   malformed option is an [`Error::Config`] naming the key, an unsupported backend is a
//!   [`ExternalAuth::warnings`] line and not enabled. [`Settings`] carries the master options
//!   it depends on (`acl_regex_match`, `permissive_acl`, `sharedsecret`, `auth.pam.service`).
//! - [`ExternalAuth::authenticate`]: runs the backend ([`Backend`]) and answers the
//!   [`Identity`] (name and, for `pam`, the OS groups) or `None`.
//! - [`ExternalAuth::acl`]: the backend's [`halite_acl::EauthAcl`], which turns an identity
//!   into an [`halite_acl::Acl`] (Salt's `fill_auth_list`, its argument swap fixed) or into
//!   the raw entries `keep_acl_in_token` stores.
//! - Backends: [`FileBackend`] (`text`, `htpasswd`, `htdigest`), [`PamBackend`],
//!   [`SharedSecretBackend`], [`AutoBackend`].
//! - [`FailureDelay`]: how long a failed attempt waits so that its timing tells nothing.
//!
//! What it does not do: no clock, no sleeping, no threads, no tokens (`halite-token`), no
//! request handling. Backends are synchronous and may block (PAM's own fail delay is
//! seconds, a bcrypt hash is tens of milliseconds): the master runs them on its own threads,
//! never on the async runtime, times each attempt and pads failures with [`FailureDelay`].
//! The `ldap` and `rest` backends, Salt's `acl()`/`process_acl()` hooks and
//! `eauth_acl_module` (only `rest` and `ldap` use them) are not implemented.
//!
//! Deviations from Salt (each the documented or the safe behaviour):
//! - **ACL keys** match as [`halite_acl::EauthAcl`] says: glob and regex user keys work
//!   (Salt swaps `expr_match`'s arguments, so only exact names match), and
//!   `permissive_acl: True` adds `'*'` to everyone's entries, as documented (Salt's swap
//!   makes `'*'` never apply then).
//! - **Configuration errors are found at startup.** Salt reads the `file` backend's options
//!   on every attempt and logs a missing `^filename`, a missing `^realm` or an unknown
//!   `^filetype` then; every login fails. Here they are [`Error::Config`], and the master
//!   refuses to start. An unknown `^option` of the file backend (a typo such as
//!   `^filenme`) is a warning (Salt ignores it).
//! - **Unsupported backends** (`ldap`, `rest`, anything else) are not enabled, with a
//!   warning; `auto` (accepts every password) is enabled with a warning.
//! - **`sharedsecret`** that is unset, empty or not a string accepts nobody (Salt accepts
//!   the empty password when it is empty).
//! - **`file`**: `text` files skip blank lines (Salt aborts the attempt at the first line
//!   without a username field, so a blank line locks out every user below it);
//!   `^hashtype` also accepts `sha1`, `sha224` and `sha384` (Salt's `hashutil.digest`
//!   knows only `md5`, `sha256` and `sha512` and fails every login with the others). In
//!   `htpasswd` files, plaintext passwords and traditional DES `crypt(3)` hashes are
//!   refused (passlib accepts both; Apache accepts neither on Linux; DES keeps only eight
//!   characters of a password), and `$2x$` bcrypt hashes too (as passlib does). Secrets are
//!   compared in constant time (Salt's `text` mode uses `==`). See [`FileBackend`].
//! - **`pam`** runs in-process with one PAM handle per attempt (Salt forks a Python helper
//!   for each); see [`PamBackend`].
//! - **Failure delay** has a floor and a ceiling; see [`FailureDelay`].
//!
//! Invariants:
//! - Untrusted input never panics: user names, passwords and file contents are only
//!   compared, hashed and split, never indexed unchecked; a password file is read with a
//!   size cap ([`MAX_FILE_BYTES`]) on every attempt, so an edited file takes effect at once.
//! - No secret is logged or printed: [`Settings`] and the backends redact it in `Debug`.
//! - An error of a backend ([`Error`]) is a failed authentication; the caller logs it (it
//!   says what the operator must fix) and pads it like any failure.

mod config;
mod crypt;
mod delay;
mod file;
mod pam;
mod simple;

use std::fmt;
use std::path::PathBuf;

pub use config::{ExternalAuth, Settings};
pub use delay::FailureDelay;
pub use file::{FileBackend, FileFormat, TextHash, TextOptions, MAX_FILE_BYTES};
pub use pam::{os_groups, PamBackend};
pub use simple::{AutoBackend, SharedSecretBackend};

/// Who a backend authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user name as the client sent it (Salt's `load_name`).
    pub name: String,
    /// The groups the backend knows the user to be in (`pam`: the OS groups), or `None`
    /// when the backend has no notion of groups (`file`, `sharedsecret`, `auto`). Group
    /// keys (`admins%`) of the ACL match these.
    pub groups: Option<Vec<String>>,
}

/// An eauth backend. Synchronous and possibly slow: call it from a thread that may block.
pub trait Backend: fmt::Debug + Send + Sync {
    /// `Ok(Some(identity))` when `password` is `username`'s, `Ok(None)` when it is not (or
    /// the user is unknown), `Err` when the backend could not decide (its file is unreadable
    /// or malformed, PAM failed to start): also a failed authentication, one the operator
    /// should hear about.
    fn authenticate(&self, username: &str, password: &str) -> Result<Option<Identity>, Error>;
}

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `external_auth` option or a master option it depends on is malformed; the
    /// message names the key (e.g. `external_auth:file:^filename must be a string, not 3`).
    #[error("{0}")]
    Config(String),
    /// `eauth` names no enabled backend (Salt's words).
    #[error("The eauth system \"{0}\" is not enabled")]
    NotEnabled(String),
    /// The password file cannot be read.
    #[error("salt.auth.file: cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The password file is larger than [`MAX_FILE_BYTES`].
    #[error("salt.auth.file: {} is larger than {MAX_FILE_BYTES} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The password file has a line the backend cannot use (or, with `line` 0, is not UTF-8
    /// text where text is required).
    #[error("salt.auth.file: {}, line {line}: {problem}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number (0: the whole file).
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// A digest could not be computed (OpenSSL refused the algorithm).
    #[error("digest {algorithm} failed: {message}")]
    Digest {
        /// The algorithm.
        algorithm: &'static str,
        /// OpenSSL's error.
        message: String,
    },
    /// PAM could not run the attempt (not a wrong password: those are `Ok(None)`).
    #[error("PAM {call} failed for service '{service}': {message} (code {code})")]
    Pam {
        /// The PAM call (`pam_start`, `pam_authenticate`, `pam_acct_mgmt`).
        call: &'static str,
        /// The PAM service.
        service: String,
        /// PAM's return code.
        code: i32,
        /// `pam_strerror`.
        message: String,
    },
}
