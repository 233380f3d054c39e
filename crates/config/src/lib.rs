//! Salt 3008.3 master and minion configuration files, loaded the way Salt loads them.
//!
//! # What it does
//!
//! * Reads `DIR/master` (or `DIR/minion`), then the files matched by `default_include`
//!   (`master.d/*.conf`, sorted) and by `include`, merging them with Salt's rules (see
//!   `merge`): included files merge into each other recursively, and their result replaces
//!   the main file's top-level options. A missing main file means Salt's defaults.
//! * Parses YAML exactly as Salt's `SaltYamlSafeLoader` types it: YAML 1.1 plain scalars
//!   (`yes`/`off` are booleans, `0x1f` is 31, `~` is null) and Salt's own twist that
//!   `0755` is the decimal 755; quoted scalars stay strings. See [`yaml`].
//! * Starts from Salt's `DEFAULT_MASTER_OPTS` / `DEFAULT_MINION_OPTS` (generated from the
//!   stock Salt by `tools/gen_tables.py`) and applies `apply_master_config` /
//!   `apply_minion_config`: `log_dir`, the generated or cached id, derived directories,
//!   `root_dir` prepending, algorithm checks.
//! * Exposes typed [`MasterConfig`] / [`MinionConfig`] fields for the options the daemons
//!   use, plus `raw`, an `rmpv::Value` map of every option in Salt's key order.
//! * Types command-line words with the same YAML rules, as `salt.utils.args` does for the
//!   CLIs and the minion (see [`args`]).
//!
//! # What it does not do
//!
//! * No environment variables (`SALT_MASTER_CONFIG`, `SALT_CONFIG_DIR`) and no command
//!   line overrides: callers pass the directory and patch fields themselves.
//! * No `sdb://` resolution, `id_function` evaluation (refused), `ssl` translation or
//!   worker-pool expansion; those options are kept verbatim in `raw`. `file_roots` and
//!   `pillar_roots` are verbatim in `raw` too; [`MasterConfig::roots`] reads them as
//!   Salt's `_validate_file_roots` leaves them.
//! * It does not write the minion id cache; [`IdSource::Generated`] tells the minion
//!   daemon when Salt would.
//! * It does not log: [`MasterConfig::warnings`] and [`MasterConfig::unknown_options`]
//!   hand Salt's messages, and the unknown (likely misspelt) options with the closest
//!   valid name, to the caller.
//!
//! # Deviations from Salt (all fail closed)
//!
//! * Salt only logs a warning for an option of the wrong type and carries on (coercing
//!   e.g. `auto_accept: maybe` to false). The options behind typed fields are checked
//!   strictly here, with range checks Salt lacks (ports, `worker_threads >= 1`), and a
//!   bad value fails the load with [`ConfigError::InvalidValue`]. Other options get
//!   Salt's warnings only.
//! * A broken included file fails the load (Salt's master skips it); an unreadable main
//!   file is an error (Salt treats it as missing).
//! * `ipc_mode` and `master_type` must be valid names; a non-scalar `id` is refused.
//! * The YAML loader refuses integers beyond 64 bits, recursive aliases and alias bombs.
//! * An option neither Salt nor Halite knows is reported ([`UnknownOption`], with the
//!   closest valid name) for the daemons to warn about; Salt is silent. See `names`.
//!
//! # Invariants
//!
//! * Loading never panics on any file content; every failure is a [`ConfigError`].
//! * `unsafe` code is confined to the libyaml event wrapper (`yaml/events.rs`) and the
//!   host lookups (`host.rs`).
//! * The YAML parser is libyaml itself, through `unsafe-libyaml-norway` (the parser under
//!   `serde_norway`), because Salt's typing needs each scalar's style and tag, which
//!   serde's data model does not expose. It is the same parser PyYAML's `CSafeLoader`
//!   uses in the stock Salt.

mod apply;
pub mod args;
mod glob;
mod host;
mod master;
mod merge;
mod minion;
mod names;
mod option_names;
mod options;
mod paths;
mod pyval;
mod types;
mod valid_opts;
mod validate;
pub mod yaml;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use host::{all_user_names, current_user, generate_minion_id, hostname, user_ids};
pub use master::{
    MasterConfig, DEFAULT_MAX_CLEAR_REQUEST_SIZE, DEFAULT_MAX_PENDING_KEYS,
    DEFAULT_MAX_REQUEST_SIZE,
};
pub use merge::MAX_INCLUDE_DEPTH;
pub use minion::MinionConfig;
pub use names::{UnknownOption, HALITE_MASTER_OPTIONS, HALITE_MINION_OPTIONS};
pub use options::Origin;
pub use types::{
    EncryptionAlgorithm, IdSource, IpcMode, LogLevel, Master, MasterType, SigningAlgorithm,
};
pub use yaml::YamlError;

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A configuration file exists but cannot be read.
    #[error("cannot read configuration file {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O failure.
        error: std::io::Error,
    },
    /// A configuration file is not valid YAML, or holds YAML Salt's loader refuses
    /// (duplicate keys, unknown tags, ...).
    #[error("invalid YAML in {} at {error}", path.display())]
    Yaml {
        /// The file.
        path: PathBuf,
        /// Line, column and cause.
        error: YamlError,
    },
    /// A configuration file holds something other than a mapping of options.
    #[error("configuration file {} must be a mapping of options, not {found}", path.display())]
    NotAMapping {
        /// The file.
        path: PathBuf,
        /// What it holds instead ("a list", "a string", ...).
        found: &'static str,
    },
    /// An option has a value of the wrong type or out of range.
    #[error("invalid value for option '{option}' in {origin}: expected {expected}, got {got}")]
    InvalidValue {
        /// The option name.
        option: String,
        /// The file that set it.
        origin: Origin,
        /// What the option accepts.
        expected: String,
        /// The offending value, shortly rendered (`"abc"`, `-1`, `a list`).
        got: String,
    },
    /// An option asks for something this implementation cannot do.
    #[error("option '{option}' in {origin} is not supported: {reason}")]
    Unsupported {
        /// The option name.
        option: String,
        /// The file that set it.
        origin: Origin,
        /// Why, and what to do instead.
        reason: String,
    },
    /// `include` options nest deeper than [`MAX_INCLUDE_DEPTH`] (or include themselves).
    #[error("configuration includes nest deeper than {MAX_INCLUDE_DEPTH} levels at {}", path.display())]
    IncludeDepth {
        /// The file whose `include` went too deep.
        path: PathBuf,
    },
}
