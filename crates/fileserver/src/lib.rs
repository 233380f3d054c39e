//! The master's `roots` file server: Salt 3008.3's fileserver requests answered from
//! `file_roots`.
//!
//! What a minion's `salt://` URLs reach. [`Roots`] is the backend (built from the master
//! config by [`Roots::from_master`]); [`Roots::answer`] takes a decrypted request load and
//! returns the reply [`Value`] with the shapes stock sends ([`load`]): `_serve_file`
//! (chunks of at most `file_buffer_size` bytes from `loc`, gzip on request),
//! `_file_hash`, `_file_hash_and_stat`, `_file_find`, `_file_list`,
//! `_file_list_emptydirs`, `_dir_list`, `_symlink_list`, `_file_envs` and `_master_tops`.
//!
//! Options: `file_roots` (per saltenv a list of directories, globbed as Salt does; a
//! `__env__` entry serves any other saltenv with the name substituted),
//! `fileserver_backend` (only `roots` serves), `hash_type` (md5, sha1, sha224, sha256,
//! sha384, sha512, through OpenSSL), `file_buffer_size`, `file_ignore_regex`,
//! `file_ignore_glob`, `fileserver_followsymlinks`, `fileserver_ignoresymlinks`.
//!
//! # What it does not do
//!
//! No network I/O and no encryption: the master's dispatch does that. No other backend
//! (`gitfs`, `hgfs`, `svnfs`, `minionfs`, `s3fs`, `azurefs`: a warning names each one
//! configured). No `master_tops`: its modules are Python, so `_master_tops` answers `{}`
//! (what stock answers when none is configured) and a configured `master_tops` gets a
//! warning. No `_file_recv` (`file_recv` is a separate feature), no `fileserver_events`,
//! no `cachedir/roots` or `cachedir/file_lists` files (caches are in memory).
//!
//! # Deviations from Salt (each the safe reading of something Salt leaves open)
//!
//! - **Saltenv names under `__env__`.** Salt substitutes any requested saltenv into the
//!   `__env__` roots, so `saltenv: ../../etc` serves `/etc`. Here a saltenv that is not
//!   configured by name must be a plain name ([`request::safe_env_name`]: no `/`, no
//!   `..`, no NUL, not empty) or it is unknown.
//! - **Paths.** Refused like Salt (absolute, `../`), plus any `..` component, NUL bytes
//!   and empty paths, before the file system is touched ([`request::RelPath`]).
//! - **Ignore rules.** Salt matches `file_ignore_*` against the relative path when
//!   listing but the absolute path when serving, and walks into ignored directories, so
//!   files it does not list can be fetched and files it cannot serve are listed. Here an
//!   entry is ignored when either form matches, and everything below an ignored
//!   directory is ignored, in listings and when serving alike.
//! - **`fileserver_ignoresymlinks: True`.** Salt only hides symlinks from listings (and
//!   still walks into linked directories, and serves through links). Here a path through
//!   a symlink below its root is neither listed nor served.
//! - **`fileserver_followsymlinks: False`.** As Salt: a file that resolves outside its
//!   root is not served. The check is made on the opened file (`/proc/self/fd`), so a link
//!   swapped between the check and the read cannot escape. With the default `True`, links
//!   are followed wherever they point, as in Salt: links in `file_roots` are the admin's.
//! - **Symlink loops** are listed once, not walked until the path is too long.
//! - **Special files.** Only regular files are served; a FIFO is opened without waiting
//!   for a writer and refused.
//! - **`_file_find`** answers `path` with the relative path: stock sends the master's
//!   absolute path (which its `_master_opts` otherwise hides); minions only read `stat`.
//! - **Sorted replies** where Salt's order is a set's (`_file_envs`, `_symlink_list`).
//! - **`file_buffer_size`** above 64 MiB is lowered to it; 0 or a negative value refuses
//!   to start (Salt would serve every file empty, or whole in one reply).
//! - **Bad input** (`loc` that is not a non-negative integer, a read error, a gzip level
//!   outside -1..9) gets the "nothing" reply of its request, where Salt's worker raises
//!   and answers `""` (or, for the gzip level, serves the chunk uncompressed).
//!
//! # Listing cache
//!
//! Listings are cached per saltenv in memory with directory-mtime change detection
//! ([`listing`]): within a second of the last check the cached listing is served; after
//! it one request re-stats the directories the walk read and walks again only if one
//! changed. So 10,000 minions asking at once cost one walk, and a new file is listed
//! within a second (Salt's `fileserver_list_cache_time` keeps a listing for 20 s,
//! changed or not, and rewrites a cache file each time). Hashes are cached per file
//! (device, inode) while its size, mtime and ctime are unchanged, as Salt's hash cache
//! is by mtime.
//!
//! # Invariants
//!
//! - Nothing outside the saltenv's roots is served, hashed or listed, except through
//!   symlinks placed in the roots when `fileserver_followsymlinks` is on.
//! - Every reply is built from an opened file descriptor checked after opening: stat,
//!   hash and data all come from that descriptor.
//! - Untrusted load fields never panic; memory per request is bounded by
//!   `file_buffer_size` (hashing streams 64 KiB at a time); the caches are bounded
//!   ([`listing::MAX_CACHED_ENVS`], [`roots::MAX_CACHED_HASHES`]).

pub mod listing;
pub mod load;
pub mod options;
pub mod request;
pub mod roots;

mod ignore;

#[cfg(test)]
mod tests;

pub use listing::Listing;
pub use load::Command;
pub use options::{HashType, Options};
pub use rmpv::Value;
pub use roots::{Found, Roots};

/// What can go wrong in the file server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is unusable.
    #[error("option {option}: {message}")]
    Config {
        /// The option.
        option: &'static str,
        /// Why.
        message: String,
    },
    /// A file could not be read.
    #[error("{what} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// OpenSSL failed to hash.
    #[error("hashing: {0}")]
    Crypto(openssl::error::ErrorStack),
}
