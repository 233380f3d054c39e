//! Salt 3008.3 targeting: which minions a publish is for.
//!
//! Salt decides targeting twice. The master computes the minions it **expects**
//! ([`CkMinions::check_minions`]; [`CkMinions::check_among`] over given candidates, for
//! the ACL checks) to know whom to wait for; every connected minion receives
//! the publish anyway and decides for itself ([`minion_match`]), and the minion's decision
//! is the one that counts. This crate implements both sides with Salt's exact rules,
//! including the places where the two disagree (a glob is comma-split on the master only;
//! an unclosed `(` is auto-closed on the master only), and the Python behaviour those rules
//! lean on:
//!
//! - [`pyre`]: Python `re` semantics (`re.match`, `re.fullmatch`, `re.search`) on
//!   `fancy-regex`, with a backtracking limit so a hostile pattern fails instead of hanging.
//!   Also meant for the ACL evaluators (`peer`, `publisher_acl`, `external_auth`).
//! - [`fnmatch`]: Python `fnmatch.fnmatch` on POSIX.
//! - [`pyvalue`]: how Salt's Python code sees a msgpack value (`str()`, `repr()`, dict
//!   lookups with duplicate keys); also used by the ACL evaluator.
//! - [`subdict_match`]: grain/pillar matching (deepest key first, `*` wildcards, lists,
//!   key existence, lower-casing of both sides, including regex patterns).
//! - [`parse_target`]: the compound word grammar (`G@`, `G|@os|RedHat`, …) and
//!   [`nodegroup_comp`]: nodegroup expansion, and [`resolve_nodegroups`]: the client's
//!   resolution of `nodegroup` targets and `N@` words before a publish.
//!
//! What it does not do: no I/O, no configuration parsing, no key management. The caller
//! passes the accepted minion ids and a [`MinionDataCache`] on the master, and the minion's
//! id, grains and pillar ([`MinionFacts`]) on the minion. Salt 3008's resource targeting
//! (`T@`, glob augmentation with resource ids) and `range` (`R@`, needs `seco.range`) are not
//! implemented; see the module docs for every deliberate difference.
//!
//! Invariants:
//! - Untrusted targets never panic and never run unbounded: regexes are size- and
//!   backtrack-limited, globs match in O(pattern × name), compound expressions are
//!   depth-limited, and grain/pillar matching is depth- and step-limited.
//! - No global mutable state: compiled regexes live in a caller-owned [`RegexCache`].
//! - Errors Salt would log and swallow are logged with Salt's message (through `tracing`)
//!   and turn into "no match" / an empty result, as in Salt.

pub mod compound;
pub mod fnmatch;
pub mod master;
pub mod minion;
pub mod nodegroup;
pub mod pyre;
pub mod pyvalue;
pub mod subdict;

mod ipcidr;
#[cfg(any(test, feature = "test-util"))]
pub mod testutil;

pub use compound::{parse_target, TargetWord, MAX_PARENS};
pub use master::{Bank, CheckResult, CkMinions, EmptyCache, MinionDataCache};
pub use minion::{minion_match, MinionFacts};
pub use nodegroup::{nodegroup_comp, resolve_nodegroups};
pub use pyre::RegexCache;
pub use rmpv::Value;
pub use subdict::{
    subdict_match, traverse_dict_and_list, MatchMode, SubdictMatcher, MAX_DEPTH, MAX_STEPS,
};

/// Salt's `DEFAULT_TARGET_DELIM`.
pub const DEFAULT_DELIMITER: &str = ":";

/// Why a regular expression could not be used. Targeting itself never fails: like Salt, it
/// logs and reports "no match"; these errors surface from [`pyre`] for callers that need
/// the reason (the ACL evaluators).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Python's `re` would reject the pattern (`re.error`).
    #[error("invalid regex {pattern:?}: {message} at position {position}")]
    InvalidRegex {
        /// The Python pattern.
        pattern: String,
        /// Python's message.
        message: String,
        /// Character offset of the error.
        position: usize,
    },
    /// The pattern is valid Python but uses a construct this crate does not translate.
    #[error("unsupported regex feature in {pattern:?}: {feature}")]
    UnsupportedRegex {
        /// The Python pattern.
        pattern: String,
        /// The construct.
        feature: String,
    },
    /// The regex engine refused the translated pattern (size limits, quantified look-around).
    #[error("regex {pattern:?} cannot be compiled: {message}")]
    RegexCompile {
        /// The Python pattern.
        pattern: String,
        /// The engine's message.
        message: String,
    },
    /// A nodegroup the master config does not define, named in a `nodegroup` target or as
    /// `N@<name>` in a compound one ([`resolve_nodegroups`]; Salt's client raises
    /// `SaltInvocationError`).
    #[error("Node group {0} unavailable")]
    UnknownNodegroup(String),
    /// A match attempt needed more than [`pyre::BACKTRACK_LIMIT`] backtracking steps.
    #[error("regex {pattern:?} exceeded the backtracking limit")]
    BacktrackLimit {
        /// The Python pattern.
        pattern: String,
    },
    /// The regex engine failed while matching for another reason (stack exhaustion).
    #[error("regex {pattern:?} failed while matching: {message}")]
    RegexRuntime {
        /// The Python pattern.
        pattern: String,
        /// The engine's message.
        message: String,
    },
}
