//! Salt 3008.3's ACL evaluator: may this request run? One evaluator for `peer`,
//! `peer_run`, `publisher_acl` and `publisher_acl_blacklist` now, and `external_auth` and
//! the HTTP API later.
//!
//! Salt has one grammar for all of them (`salt.utils.minions.CkMinions.auth_check`): a
//! list of string entries (function regexes allowed on any target) and one-key maps
//! `{target: [conditions]}`, where a condition is a function regex or
//! `{fun_regex: {args: [...], kwargs: {...}}}` (or a list of such specs). This crate
//!
//! - parses such a list once ([`Acl::parse`]) into typed entries with compiled regexes
//!   (Python `re` semantics and a backtracking limit, from [`halite_target::pyre`]),
//!   reporting what it cannot use ([`ParseWarning`]);
//! - parses `peer` ([`PeerAcl`]: `{id_regex: [entries]}`, every matching key's entries
//!   concatenated) and `peer_run` ([`RunnerAcl`]: `{id_regex: [runner_fun_regex]}`);
//! - parses `publisher_acl` ([`UserAcl`]: `{user_pattern: [entries]}`, every key matching
//!   the user name by Salt's `expr_match` — glob, then anchored regex — concatenated) and
//!   checks a user's publish ([`UserAcl::check`]) and runner call
//!   ([`UserAcl::check_runner`]), with a distinct [`Reason::NoEntriesForUser`] for a user
//!   without entries (Salt's authentication failure);
//! - parses `publisher_acl_blacklist` ([`Blacklist`]) and names the pattern that blocks a
//!   user or function ([`BlacklistHit`]);
//! - checks a request ([`Acl::check`], [`Request`]) and answers a [`Decision`] that says
//!   which entry allowed each function, or why the request was denied;
//! - checks runner/wheel access ([`Acl::check_spec`]: `@runner`, `@wheel`, `@<module>`);
//! - lists the patterns whose meaning depends on the anchoring mode
//!   ([`Acl::differing_patterns`], [`ModeNote`]), for the master to log at startup.
//!
//! ```
//! use halite_acl::{Matching, PeerAcl, Request, Targets};
//! use halite_acl::Value;
//!
//! struct Accepted; // the master implements this with halite_target::CkMinions
//! impl Targets for Accepted {
//!     fn expand(&self, _tgt: &Value, _tgt_type: &str) -> Vec<String> {
//!         vec!["web1".to_owned()]
//!     }
//!     fn first_outside<'c>(&self, _: &Value, _: &str, ids: &'c [String]) -> Option<&'c str> {
//!         ids.iter().map(String::as_str).find(|id| *id != "web1")
//!     }
//! }
//! let matching = Matching::from_config_value(&Value::Nil).unwrap(); // acl_regex_match
//! let peer = Value::Map(vec![(".*example.com".into(), vec![Value::from("test.*")].into())]);
//! let (peer, warnings) = PeerAcl::parse(&peer, matching);
//! assert!(warnings.is_empty());
//! let (fun, arg, tgt) = (Value::from("test.ping"), Value::Array(vec![]), Value::from("*"));
//! let req = Request::new(&fun, &arg, &tgt, "glob");
//! let decision = peer.check("web.example.com", &req, &Accepted);
//! assert_eq!(
//!     decision.to_string(),
//!     "allowed: 'test.ping' by entry 0 'test.*' (under '.*example.com')"
//! );
//! assert!(!peer.check("web.example.com.evil.org", &req, &Accepted).allowed);
//! for note in peer.differing_patterns() {
//!     println!("{note}"); // the master logs these at startup
//! }
//! ```
//!
//! What it does not do: no I/O, no clock, no configuration loading, no logging of parse
//! warnings (the caller logs them). Target expansion (accepted keys, grains and pillar
//! cache) comes from the caller through [`Targets`], which is implemented here for
//! [`halite_target::CkMinions`]. Salt's other peer rules live in the master: the
//! `publish.*` recursion guard, comma-separated multi-function peer publishes (which always
//! fail in Salt), `parse_input` of the arguments, nodegroup handling. Salt's
//! `auth.enable_expanded_auth_matching` (`auth_check_expanded`, broken in 3008.3) is not
//! implemented. Who is root, key authentication and `sudo_acl` are the master's
//! (it asks [`UserAcl`] only for users that are not root). `external_auth`'s ACLs are
//! [`EauthAcl`] (Salt's `fill_auth_list` with its swapped `expr_match` arguments fixed);
//! authenticating the identity is `halite-eauth`'s.
//!
//! Deviations from Salt, each failing closed where Salt is insecure or inconsistent:
//! - **Anchoring.** Salt uses `re.match` (start-anchored only) for every regex: id keys,
//!   function regexes, argument regexes. The default here is [`Matching::Full`]
//!   (`re.fullmatch`); [`Matching::Prefix`] (master option `acl_regex_match: prefix`) is
//!   Salt's behaviour exactly. Argument and keyword regexes follow the same mode: under
//!   Salt, `args: ['ls']` admits `ls; rm -rf /`.
//! - **Multi-function jobs.** Salt authorises a whole job when *any one* function is
//!   authorised (or whitelisted), so `[test.ping, cmd.run]` passes an ACL that only allows
//!   `test.ping`. Here **every** function must be allowed; the whitelist allows only the
//!   functions it names. At most [`MAX_FUNCTIONS`] functions are checked; a larger job is
//!   denied.
//! - **Malformed configuration never grants.** An argument spec with a key other than
//!   `args`/`kwargs` (Salt ignores it, so the typo `arg:` allows any arguments), an `args`
//!   value that is not a list (Salt iterates a string character by character), a `kwargs`
//!   value that is not a map, or a rule that is not a string or null never passes. An
//!   ACL that is not a list grants nothing (Salt iterates a string's characters or a map's
//!   keys as function regexes). Each is reported as a [`ParseWarning`].
//! - **Malformed entries are skipped one at a time.** Where Salt raises (a non-string
//!   target key, `kwargs: null`, an invalid or non-string `peer`/`peer_run` key, an
//!   invalid `peer_run` function regex) and so denies the whole request, or every peer
//!   request, only the bad entry or key is ignored.
//! - **`@` string entries** (`@runner`, `@jobs`) only grant runner/wheel functions
//!   ([`Acl::check_spec`]); Salt also tries them as function regexes, which no real function
//!   name matches.
//! - **Arguments that are not a list** (for one function, or one function of a
//!   multi-function job) are no arguments: every `args`/`kwargs` rule fails on them (Salt
//!   indexes a string character by character). A list/map argument nested deeper than
//!   [`MAX_ARG_DEPTH`] or larger than [`MAX_ARG_NODES`] values, and a `__kwarg__` map with
//!   more than [`MAX_KWARGS`] entries, satisfy no rule that inspects them.
//! - **Regexes**: a pattern `halite_target::pyre` cannot translate, or a match that hits
//!   the backtracking limit, is no match (Python would accept or spin) — except in the
//!   blacklist, where it blocks.
//! - **`publisher_acl` user keys.** Salt matches the regex `\A<key>\Z` without grouping
//!   the key, so `admin|manager_.*` admits `administrator`. Under [`Matching::Full`] the key
//!   is matched as `\A(?:<key>)\Z` (whole names; only when the key is a valid regex on its
//!   own); [`Matching::Prefix`] is Salt's form. A key whose value is not a list grants
//!   nothing (Salt extends the list with a string's characters: `fred: '.*'` gives `'.'`,
//!   which admits every function).
//! - **`publisher_acl_blacklist`** always matches with Salt's ungrouped form, which blocks
//!   everything whole-name matching would and more: a blacklist fails closed. A malformed
//!   `users`/`modules` value blocks everything (Salt raises on every publish for most
//!   such values), as do a malformed `fun` and a job of more than [`MAX_FUNCTIONS`]
//!   functions when `modules` is set. See [`Blacklist`].
//! - **Runner calls by local users** are checked against the user's `@runner`,
//!   `@<module>` entries ([`UserAcl::check_runner`]); Salt checks nothing for them.
//! - **Entry targets are evaluated over the request's minions** ([`Targets::first_outside`]),
//!   not expanded over every accepted minion as Salt does, and the subset test stops at
//!   the first targeted minion outside ([`MissKind::TargetNotSubset`] names that one).
//!   The answer is the same for each targeted minion, so the decision is too, except
//!   where Salt's expansion fails as a whole because of a minion the request does not
//!   target (under `S@`, an `ipv4` grain that is not an address): that minion no longer
//!   voids the entry for requests that do not target it. A targeted minion that fails it
//!   still does.
//!
//! `tests/salt_auth_table.json` holds 205 cases decided by stock Salt 3008.3
//! (`tools/gen_auth_table.py`) with the answer Halite gives in each mode; every case where
//! Halite differs from Salt carries a note.
//!
//! Invariants:
//! - Pure: no I/O, no clock, no global state; a check calls [`Targets::expand`] at most
//!   once for the request's target (twice with `publish_validate`, never when the caller
//!   passes the expansion in [`Request::minions`]), and [`Targets::first_outside`] at most
//!   twice per map entry it reaches, over the request's minions only: first over its first
//!   and last minions, then over the rest only if both are inside (the `*` target, entries
//!   whose function regexes do not match and requests that reach no minion evaluate
//!   nothing). The cost of a check grows with the request's minions and the entries
//!   reached, not with the number of accepted minions.
//! - Untrusted requests never panic and cost is bounded: no recursion on request data
//!   beyond [`MAX_ARG_DEPTH`], at most [`MAX_FUNCTIONS`] functions, regexes compiled once at
//!   parse time and run with a backtracking limit.
//! - A target that expands to no minion passes every target entry (Salt's subset rule is
//!   vacuously true); the caller publishes nothing in that case, as Salt does.
//! - Regexes are compiled once, at parse time. A check allocates the request's expansion
//!   when the caller did not pass it, one grant per function, and the reasons of entries
//!   that came close; it never copies the ACL.

mod acl;
mod args;
mod blacklist;
mod check;
mod eauth;
mod expr;
mod pattern;
mod peer;
mod spec;
#[cfg(test)]
mod testutil;
mod user;

pub use acl::{Acl, ParseWarning};
pub use args::{MAX_ARG_DEPTH, MAX_ARG_NODES, MAX_KWARGS};
pub use blacklist::{Blacklist, BlacklistHit, BlacklistPart, HitCause};
pub use check::{
    exact_tgt_type, Decision, EntryRef, Grant, GrantedBy, Miss, MissKind, Reason, Request, Targets,
    MAX_FUNCTIONS,
};
pub use eauth::EauthAcl;
pub use expr::ExprMatch;
pub use pattern::{prefix_differs, Matching, ModeNote, PatternKind};
pub use peer::{PeerAcl, RunnerAcl};
pub use rmpv::Value;
pub use spec::SpecForm;
pub use user::UserAcl;

/// Errors of this crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The master option `acl_regex_match` has a value other than `full` or `prefix`.
    #[error("acl_regex_match must be 'full' or 'prefix', not {value}")]
    InvalidMatching {
        /// Python `repr` of the configured value.
        value: String,
    },
}
