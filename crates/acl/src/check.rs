//! The check: Salt's `CkMinions.auth_check` (with `validate_tgt`, `__fun_check`,
//! `__args_check`), answering which entry allowed a request or why none did.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use halite_target::pyvalue;
use rmpv::Value;

use crate::acl::{Acl, Condition, Entry, EntryKind};
use crate::args::{regex_miss, Args};

/// Most functions in one multi-function job; a larger job is denied.
pub const MAX_FUNCTIONS: usize = 256;

/// Most ids listed in a [`Reason::PublishValidate`].
const MAX_LISTED_IDS: usize = 5;

/// The master's view of targeting: which accepted minions a target expression reaches.
///
/// It is I/O-ish (accepted keys, grains/pillar cache), so the caller provides it; the
/// master implements it with [`halite_target::CkMinions`], for which this crate provides
/// the implementation (greedy, `:` delimiter, as every Salt publish does).
pub trait Targets {
    /// The accepted minion ids that `tgt` of type `tgt_type` (`glob`, `list`, `compound`,
    /// `pillar_exact`, …) reaches, each once. Failures are an empty list, as in Salt.
    fn expand(&self, tgt: &Value, tgt_type: &str) -> Vec<String>;

    /// The first of `candidates` (accepted ids, each once, as [`Targets::expand`] gives
    /// them) that `tgt` of type `tgt_type` does not reach, or `None` when it reaches every
    /// one. "Reaches" is [`Targets::expand`]'s answer for that minion, so the cost can be
    /// that of the candidates rather than of every accepted minion
    /// ([`halite_target::CkMinions::check_among`]).
    fn first_outside<'c>(
        &self,
        tgt: &Value,
        tgt_type: &str,
        candidates: &'c [String],
    ) -> Option<&'c str>;
}

impl Targets for halite_target::CkMinions<'_> {
    fn expand(&self, tgt: &Value, tgt_type: &str) -> Vec<String> {
        self.check_minions(tgt, tgt_type, halite_target::DEFAULT_DELIMITER, true)
            .minions
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// Evaluates the target over the candidates only (`check_among`); see there for the
    /// one case where that differs from expanding over every accepted minion.
    fn first_outside<'c>(
        &self,
        tgt: &Value,
        tgt_type: &str,
        candidates: &'c [String],
    ) -> Option<&'c str> {
        let reached = self.check_among(
            tgt,
            tgt_type,
            halite_target::DEFAULT_DELIMITER,
            true,
            candidates,
        );
        // No candidate is listed more often than it is a candidate: all are reached when
        // the counts agree.
        if reached.len() >= candidates.len() {
            return None;
        }
        let reached: HashSet<&str> = reached.into_iter().collect();
        candidates
            .iter()
            .map(String::as_str)
            .find(|id| !reached.contains(id))
    }
}

/// What is asked: a job as the master receives it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The function: a string, or a list of strings for a multi-function job.
    pub fun: &'a Value,
    /// The arguments: one arg list for a single function (possibly ending in a
    /// `{"__kwarg__": True, ...}` map that supplies the kwargs), a list of such lists (one
    /// per function) for a multi-function job.
    pub arg: &'a Value,
    /// The target expression.
    pub tgt: &'a Value,
    /// The target type (`glob`, `list`, `compound`, …).
    pub tgt_type: &'a str,
    /// The target's expansion when the caller has computed it already (Salt's
    /// `ClearFuncs.publish` passes its `check_minions` result; each id once, and in the
    /// master's order: an entry's target is tried on the first and last of them before
    /// the rest); `None` expands `tgt` through [`Targets`] when a target entry needs it.
    pub minions: Option<&'a [String]>,
    /// Salt's `publish_validate` (the `peer` path): expand the target as given and as its
    /// exact form ([`exact_tgt_type`]), and deny when the given form reaches a minion the
    /// exact form does not (pillar globbing/PCRE from a minion). Both expansions go
    /// through [`Targets`]; `minions` is then ignored, as in Salt.
    pub publish_validate: bool,
}

impl<'a> Request<'a> {
    /// A request with no precomputed expansion and no `publish_validate`.
    pub fn new(fun: &'a Value, arg: &'a Value, tgt: &'a Value, tgt_type: &'a str) -> Self {
        Self {
            fun,
            arg,
            tgt,
            tgt_type,
            minions: None,
            publish_validate: false,
        }
    }
}

/// The target type `publish_validate` compares a target type with: `pillar_exact` for
/// `pillar`/`pillar_pcre`, `compound_pillar_exact` for `compound` (case-insensitive, as
/// Salt compares), `None` when it is the type itself (nothing to compare).
pub fn exact_tgt_type(tgt_type: &str) -> Option<&'static str> {
    let lower = tgt_type.to_ascii_lowercase();
    match lower.as_str() {
        "pillar" | "pillar_pcre" => Some("pillar_exact"),
        "compound" => Some("compound_pillar_exact"),
        _ => None,
    }
}

/// The answer to a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may run.
    pub allowed: bool,
    /// Which entries allowed it, or why it was denied.
    pub reason: Reason,
}

impl Decision {
    fn deny(reason: Reason) -> Self {
        Self {
            allowed: false,
            reason,
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.allowed {
            "allowed: "
        } else {
            "denied: "
        })?;
        self.reason.fmt(f)
    }
}

/// Why a [`Decision`] is what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Every function is allowed; one grant per function, in order.
    Granted(Vec<Grant>),
    /// `fun` is an empty list.
    NoFunction,
    /// `fun` is not a string or a list of strings.
    MalformedFunction,
    /// More than [`MAX_FUNCTIONS`] functions.
    TooManyFunctions {
        /// How many were asked for.
        count: usize,
    },
    /// `publish_validate`: the target reaches minions its exact form does not.
    PublishValidate {
        /// How many minions only the given form reaches.
        count: usize,
        /// The first few of them.
        ids: Vec<String>,
    },
    /// No `publisher_acl` key matches the user, or the keys that match list no entry
    /// ([`crate::UserAcl`]). Salt answers this with `UserAuthenticationError` ("Authentication
    /// error occurred."), not as an authorisation error.
    NoEntriesForUser {
        /// The user name.
        user: String,
    },
    /// A runner/wheel function is not `module.function` (Salt answers
    /// `SaltInvocationError`, "A command invocation error occurred: Check syntax.").
    BadSyntax,
    /// A function no entry allows.
    NotAuthorised {
        /// The function.
        fun: String,
        /// Its position in the job (0 for a single function).
        position: usize,
        /// Why entries that came close did not allow it (entries whose function regex
        /// does not match are not listed).
        misses: Vec<Miss>,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Granted(grants) => {
                for (n, grant) in grants.iter().enumerate() {
                    if n > 0 {
                        f.write_str("; ")?;
                    }
                    grant.fmt(f)?;
                }
                Ok(())
            }
            Self::NoFunction => f.write_str("no function in the request"),
            Self::MalformedFunction => {
                f.write_str("the function is not a string or a list of strings")
            }
            Self::TooManyFunctions { count } => write!(
                f,
                "{count} functions in one job (at most {MAX_FUNCTIONS} are checked)"
            ),
            Self::PublishValidate { count, ids } => write!(
                f,
                "the target reaches {count} minion(s) its exact form does not ({}): pillar \
                 globbing or PCRE is not allowed here",
                ids.join(", ")
            ),
            Self::NoEntriesForUser { user } => {
                write!(f, "no publisher_acl entries for user '{user}'")
            }
            Self::BadSyntax => f.write_str("the function is not module.function"),
            Self::NotAuthorised {
                fun,
                position,
                misses,
            } => {
                write!(f, "'{fun}'")?;
                if *position > 0 {
                    write!(f, " (function {position} of the job)")?;
                }
                if misses.is_empty() {
                    return f.write_str(": no entry allows it");
                }
                f.write_str(": no entry allows it: ")?;
                for (n, miss) in misses.iter().enumerate() {
                    if n > 0 {
                        f.write_str("; ")?;
                    }
                    miss.fmt(f)?;
                }
                Ok(())
            }
        }
    }
}

/// One function allowed, and by what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The function.
    pub fun: String,
    /// What allowed it.
    pub by: GrantedBy,
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "'{}' by ", self.fun)?;
        match &self.by {
            GrantedBy::Whitelist => f.write_str("the whitelist"),
            GrantedBy::Entry(entry) => entry.fmt(f),
        }
    }
}

/// What allowed a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantedBy {
    /// The caller's whitelist (e.g. `saltutil.find_job`).
    Whitelist,
    /// An ACL entry.
    Entry(EntryRef),
}

/// An ACL entry, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRef {
    /// Its index in the (merged) ACL list.
    pub index: usize,
    /// Python `repr` of the configured entry (shortened).
    pub text: Arc<str>,
    /// The `peer` / `peer_run` / `publisher_acl` key it came from, if any.
    pub origin: Option<Arc<str>>,
}

impl EntryRef {
    pub(crate) fn of(index: usize, entry: &Entry) -> Self {
        Self {
            index,
            text: Arc::clone(&entry.text),
            origin: entry.origin.clone(),
        }
    }
}

impl fmt::Display for EntryRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "entry {} {}", self.index, self.text)?;
        if let Some(origin) = &self.origin {
            write!(f, " (under '{origin}')")?;
        }
        Ok(())
    }
}

/// Why one entry did not allow a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Miss {
    /// The entry.
    pub entry: EntryRef,
    /// Why.
    pub kind: MissKind,
}

impl fmt::Display for Miss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.entry, self.kind)
    }
}

/// Why an entry did not allow a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissKind {
    /// The entry is malformed (reported at parse time) and never matches.
    Malformed,
    /// A `@runner`/`@wheel`/`@module` entry: it grants runner or wheel functions only.
    SpecEntry,
    /// The function regex is invalid (Salt: "Invalid regular expression").
    InvalidRegex {
        /// The pattern.
        pattern: String,
    },
    /// The regex hit the backtracking limit.
    RegexFailed {
        /// The pattern.
        pattern: String,
    },
    /// The entry's target is an `@…` key, which no minion target satisfies.
    TargetIsSpec,
    /// The request targets minions outside the entry's target. The check stops at the
    /// first one it finds, so there may be more.
    TargetNotSubset {
        /// The targeted minion found outside.
        outside: String,
    },
    /// An argument spec is malformed (reported at parse time) and never passes.
    MalformedArgSpec,
    /// Positional argument `index` is required and absent.
    ArgMissing {
        /// Zero-based position.
        index: usize,
    },
    /// Positional argument `index` does not match its regex.
    ArgMismatch {
        /// Zero-based position.
        index: usize,
    },
    /// Positional argument `index` is a list/map too deep or too large to compare.
    ArgTooComplex {
        /// Zero-based position.
        index: usize,
    },
    /// Keyword argument `name` is required and absent (kwargs only come from a trailing
    /// `__kwarg__` map).
    KwargMissing {
        /// The keyword.
        name: String,
    },
    /// Keyword argument `name` does not match its regex.
    KwargMismatch {
        /// The keyword.
        name: String,
    },
    /// Keyword argument `name` is a list/map too deep or too large to compare.
    KwargTooComplex {
        /// The keyword.
        name: String,
    },
    /// The `__kwarg__` map has more than [`crate::args::MAX_KWARGS`] entries.
    TooManyKwargs,
}

impl fmt::Display for MissKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed => f.write_str("malformed entry, ignored"),
            Self::SpecEntry => f.write_str("grants runner/wheel functions only"),
            Self::InvalidRegex { pattern } => write!(f, "Invalid regular expression: {pattern}"),
            Self::RegexFailed { pattern } => {
                write!(f, "regex {pattern} exceeded the backtracking limit")
            }
            Self::TargetIsSpec => f.write_str("an @ target matches no minion target"),
            Self::TargetNotSubset { outside } => write!(
                f,
                "target not a subset: at least one targeted minion is outside it ({outside})"
            ),
            Self::MalformedArgSpec => f.write_str("malformed argument spec, never passes"),
            Self::ArgMissing { index } => write!(f, "argument {index} is missing"),
            Self::ArgMismatch { index } => write!(f, "argument {index} does not match"),
            Self::ArgTooComplex { index } => {
                write!(f, "argument {index} is too deep or large to compare")
            }
            Self::KwargMissing { name } => write!(f, "keyword argument {name} is missing"),
            Self::KwargMismatch { name } => write!(f, "keyword argument {name} does not match"),
            Self::KwargTooComplex { name } => {
                write!(f, "keyword argument {name} is too deep or large to compare")
            }
            Self::TooManyKwargs => f.write_str("too many keyword arguments to check"),
        }
    }
}

/// The functions of a request.
enum Funs<'a> {
    One(&'a str),
    Many(Vec<&'a str>),
}

impl<'a> Funs<'a> {
    fn of(fun: &'a Value) -> Result<Self, Reason> {
        if let Some(s) = pyvalue::text(fun) {
            return Ok(Self::One(s));
        }
        match fun {
            Value::Array(items) if items.is_empty() => Err(Reason::NoFunction),
            Value::Array(items) if items.len() > MAX_FUNCTIONS => {
                Err(Reason::TooManyFunctions { count: items.len() })
            }
            Value::Array(items) => items
                .iter()
                .map(pyvalue::text)
                .collect::<Option<Vec<_>>>()
                .map(Self::Many)
                .ok_or(Reason::MalformedFunction),
            _ => Err(Reason::MalformedFunction),
        }
    }
}

/// The request's expansion and the entries' subset tests, each computed at most once
/// per check.
struct TargetCache<'r> {
    targets: &'r dyn Targets,
    tgt: &'r Value,
    tgt_type: &'r str,
    requested: Option<Cow<'r, [String]>>,
    /// Per entry index: `None` until tested, then the targeted minion found outside the
    /// entry's target (`Some(None)` when there is none).
    entries: Vec<Option<Option<String>>>,
}

impl TargetCache<'_> {
    /// Salt's `validate_tgt` for entry `index` with target `target`.
    fn validate(&mut self, index: usize, target: &str, value: &Value) -> Result<(), MissKind> {
        if target == "*" {
            return Ok(());
        }
        if target.starts_with('@') {
            return Err(MissKind::TargetIsSpec);
        }
        let Self {
            targets,
            tgt,
            tgt_type,
            requested,
            entries,
        } = self;
        let requested = requested.get_or_insert_with(|| Cow::Owned(targets.expand(tgt, tgt_type)));
        if requested.is_empty() {
            // Salt's subset rule is vacuously true.
            return Ok(());
        }
        if entries.len() <= index {
            entries.resize_with(index + 1, || None);
        }
        // In bounds: resized just above.
        let tested =
            entries[index].get_or_insert_with(|| first_outside(*targets, value, requested));
        match tested {
            None => Ok(()),
            Some(outside) => Err(MissKind::TargetNotSubset {
                outside: outside.clone(),
            }),
        }
    }
}

/// The first of the `requested` minions that the entry target `value` (a compound
/// expression) does not reach. The first and last requested minions are tried before the
/// rest: requests and entries are usually groups of minions named alike, so an entry
/// that does not cover the request most often misses one of its ends, and then the rest
/// is never evaluated.
fn first_outside(targets: &dyn Targets, value: &Value, requested: &[String]) -> Option<String> {
    let outside = |candidates: &[String]| {
        targets
            .first_outside(value, "compound", candidates)
            .map(str::to_owned)
    };
    match requested {
        [first, middle @ .., last] if !middle.is_empty() => {
            outside(&[first.clone(), last.clone()]).or_else(|| outside(middle))
        }
        all => outside(all),
    }
}

impl Acl {
    /// Salt's `CkMinions.auth_check`, with Halite's rules (see the crate docs for the
    /// deviations): every function of the request must be allowed, by the `whitelist`
    /// (exact names, e.g. `["saltutil.find_job"]` for `publisher_acl`) or by one entry.
    ///
    /// A string entry is a function regex allowed on any target. A map entry
    /// `{target: conditions}` allows a function when one condition's function regex
    /// matches it (and its `args`/`kwargs` rules pass), and every minion the request
    /// targets is inside the entry's target, expanded as a compound expression (`*` is
    /// every minion; an `@…` target none). Entries are evaluated one at a time: two
    /// entries never combine to cover one target.
    pub fn check(&self, req: &Request<'_>, targets: &dyn Targets, whitelist: &[&str]) -> Decision {
        check_lists(&[self], req, targets, whitelist)
    }
}

/// [`Acl::check`] of the concatenation of `lists`, without copying it: entry indices
/// count across the lists, as in the merged [`Acl`] of a user or a minion.
pub(crate) fn check_lists(
    lists: &[&Acl],
    req: &Request<'_>,
    targets: &dyn Targets,
    whitelist: &[&str],
) -> Decision {
    let funs = match Funs::of(req.fun) {
        Ok(funs) => funs,
        Err(reason) => return Decision::deny(reason),
    };
    let mut cache = TargetCache {
        targets,
        tgt: req.tgt,
        tgt_type: req.tgt_type,
        requested: req.minions.map(Cow::Borrowed),
        entries: Vec::new(),
    };
    if req.publish_validate {
        let given = targets.expand(req.tgt, req.tgt_type);
        if let Some(exact_type) = exact_tgt_type(req.tgt_type) {
            let exact = targets.expand(req.tgt, exact_type);
            let exact: HashSet<&str> = exact.iter().map(String::as_str).collect();
            let mut extra = given.iter().filter(|id| !exact.contains(id.as_str()));
            let ids: Vec<String> = extra.by_ref().take(MAX_LISTED_IDS).cloned().collect();
            if !ids.is_empty() {
                return Decision::deny(Reason::PublishValidate {
                    count: ids.len() + extra.count(),
                    ids,
                });
            }
        }
        cache.requested = Some(Cow::Owned(given));
    }
    let jobs: Vec<(&str, Option<&Value>)> = match &funs {
        Funs::One(fun) => vec![(fun, Some(req.arg))],
        // Salt indexes the arg list by the function's position.
        Funs::Many(names) => names
            .iter()
            .enumerate()
            .map(|(n, fun)| (*fun, req.arg.as_array().and_then(|a| a.get(n))))
            .collect(),
    };
    let mut grants = Vec::with_capacity(jobs.len());
    for (position, (fun, args)) in jobs.into_iter().enumerate() {
        if whitelist.contains(&fun) {
            grants.push(Grant {
                fun: fun.to_owned(),
                by: GrantedBy::Whitelist,
            });
            continue;
        }
        match check_fun(lists, fun, Args::split(args), &mut cache) {
            Ok(entry) => grants.push(Grant {
                fun: fun.to_owned(),
                by: GrantedBy::Entry(entry),
            }),
            Err(misses) => {
                return Decision::deny(Reason::NotAuthorised {
                    fun: fun.to_owned(),
                    position,
                    misses,
                })
            }
        }
    }
    Decision {
        allowed: true,
        reason: Reason::Granted(grants),
    }
}

/// The first entry of `lists` allowing `fun` with `args`, or why none does.
fn check_fun(
    lists: &[&Acl],
    fun: &str,
    args: Args<'_>,
    cache: &mut TargetCache<'_>,
) -> Result<EntryRef, Vec<Miss>> {
    let mut misses = Vec::new();
    let entries = lists.iter().flat_map(|acl| acl.entries.iter());
    for (index, entry) in entries.enumerate() {
        let miss = match &entry.kind {
            EntryKind::Function(p) => match p.is_match(fun) {
                Ok(true) => return Ok(EntryRef::of(index, entry)),
                Ok(false) => None,
                Err(trouble) => Some(regex_miss(p, trouble)),
            },
            EntryKind::Spec(_) => Some(MissKind::SpecEntry),
            EntryKind::Malformed => Some(MissKind::Malformed),
            EntryKind::Target {
                target,
                target_value,
                conditions,
            } => match target_entry(fun, args, index, target, target_value, conditions, cache) {
                Ok(()) => return Ok(EntryRef::of(index, entry)),
                Err(miss) => miss,
            },
        };
        if let Some(kind) = miss {
            misses.push(Miss {
                entry: EntryRef::of(index, entry),
                kind,
            });
        }
    }
    Err(misses)
}

/// A map entry: `Ok` when it allows `fun`; `Err(None)` when no condition's function regex
/// matches (not worth reporting); `Err(Some(miss))` otherwise.
///
/// The function regexes are tried before the target is expanded (the answer is the same
/// as Salt's target-first order, and most entries are ruled out without an expansion).
fn target_entry(
    fun: &str,
    args: Args<'_>,
    index: usize,
    target: &str,
    target_value: &Value,
    conditions: &[Condition],
    cache: &mut TargetCache<'_>,
) -> Result<(), Option<MissKind>> {
    let mut trouble = None;
    let mut any = false;
    for p in conditions.iter().filter_map(Condition::fun) {
        match p.is_match(fun) {
            Ok(true) => any = true,
            Ok(false) => {}
            Err(t) => {
                trouble.get_or_insert_with(|| regex_miss(p, t));
            }
        }
    }
    if !any {
        return Err(trouble);
    }
    cache.validate(index, target, target_value).map_err(Some)?;
    conditions_allow(conditions, fun, args)
}

/// Salt's `__fun_check`: some condition's function regex matches `fun` and, for a
/// condition with argument specs, one spec passes. `Err(None)` when no function regex
/// matches; `Err(Some(miss))` with the first failure otherwise.
pub(crate) fn conditions_allow(
    conditions: &[Condition],
    fun: &str,
    args: Args<'_>,
) -> Result<(), Option<MissKind>> {
    let mut trouble = None;
    let mut first_miss = None;
    for cond in conditions {
        let Some(p) = cond.fun() else { continue };
        match p.is_match(fun) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(t) => {
                trouble.get_or_insert_with(|| regex_miss(p, t));
                continue;
            }
        }
        let Condition::Args { specs, .. } = cond else {
            return Ok(());
        };
        for spec in specs {
            match args.check(spec) {
                Ok(()) => return Ok(()),
                Err(miss) => {
                    first_miss.get_or_insert(miss);
                }
            }
        }
        // A matching condition with an empty spec list passes nothing.
        first_miss.get_or_insert(MissKind::MalformedArgSpec);
    }
    Err(first_miss.or(trouble))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::testutil::{json, FakeTargets};
    use crate::Matching;

    fn acl(text: &str, m: Matching) -> Acl {
        Acl::parse(&json(text), m, "acl").0
    }

    fn check(acl_text: &str, fun: &str, arg: &str, tgt: &str, tgt_type: &str) -> Decision {
        check_mode(acl_text, fun, arg, tgt, tgt_type, Matching::Full)
    }

    fn check_mode(
        acl_text: &str,
        fun: &str,
        arg: &str,
        tgt: &str,
        tgt_type: &str,
        m: Matching,
    ) -> Decision {
        let (fun, arg, tgt) = (json(fun), json(arg), json(tgt));
        acl(acl_text, m).check(
            &Request::new(&fun, &arg, &tgt, tgt_type),
            &FakeTargets::standard(),
            &[],
        )
    }

    #[test]
    fn string_entry_allows_function_on_any_target() {
        let d = check(r#"["test.*"]"#, r#""test.ping""#, "[]", r#""*""#, "glob");
        assert!(d.allowed, "{d}");
        assert_eq!(d.to_string(), "allowed: 'test.ping' by entry 0 'test.*'");
    }

    #[test]
    fn full_match_refuses_longer_function_names_prefix_admits_them() {
        let full = check(r#"["cmd.run"]"#, r#""cmd.run_all""#, "[]", r#""*""#, "glob");
        assert!(!full.allowed);
        let prefix = check_mode(
            r#"["cmd.run"]"#,
            r#""cmd.run_all""#,
            "[]",
            r#""*""#,
            "glob",
            Matching::Prefix,
        );
        assert!(prefix.allowed);
    }

    #[test]
    fn function_regex_dot_is_a_wildcard_in_both_modes() {
        let d = check(r#"["test.*"]"#, r#""testing.ping""#, "[]", r#""*""#, "glob");
        assert!(
            d.allowed,
            "Salt's regex semantics: `test.*` covers testing.ping"
        );
    }

    #[test]
    fn star_target_entry_short_circuits_without_expansion() {
        let targets = FakeTargets::standard();
        let (fun, arg, tgt) = (json(r#""test.ping""#), json("[]"), json(r#""nobody*""#));
        let d = acl(r#"[{"*": ["test.*"]}]"#, Matching::Full).check(
            &Request::new(&fun, &arg, &tgt, "glob"),
            &targets,
            &[],
        );
        assert!(d.allowed);
        assert_eq!(targets.calls(), 0);
    }

    #[test]
    fn target_entry_requires_every_targeted_minion_inside_it() {
        let acl_text = r#"[{"web*": ["test.*"]}]"#;
        assert!(check(acl_text, r#""test.ping""#, "[]", r#""web*""#, "glob").allowed);
        assert!(check(acl_text, r#""test.ping""#, "[]", r#""web1""#, "glob").allowed);
        let d = check(acl_text, r#""test.ping""#, "[]", r#""*""#, "glob");
        assert!(!d.allowed);
        let Reason::NotAuthorised { misses, .. } = &d.reason else {
            panic!("{d}");
        };
        assert!(matches!(
            &misses[0].kind,
            MissKind::TargetNotSubset { outside } if outside == "db1"
        ));
        assert!(d.to_string().contains("target not a subset"), "{d}");
    }

    #[test]
    fn two_entries_never_combine_to_cover_a_target() {
        let d = check(
            r#"[{"web1": ["test.*"]}, {"db1": ["test.*"]}]"#,
            r#""test.ping""#,
            "[]",
            r#""web1,db1""#,
            "list",
        );
        assert!(!d.allowed);
    }

    #[test]
    fn target_expanding_to_no_minion_passes_every_target_entry() {
        let d = check(
            r#"[{"web*": ["test.*"]}]"#,
            r#""test.ping""#,
            "[]",
            r#""nothing*""#,
            "glob",
        );
        assert!(d.allowed, "Salt's subset rule is vacuously true");
    }

    #[test]
    fn at_target_never_matches_minion_targets() {
        let d = check(
            r#"[{"@runner": [".*"]}]"#,
            r#""test.ping""#,
            "[]",
            r#""web1""#,
            "glob",
        );
        assert!(!d.allowed);
        assert!(d.to_string().contains("an @ target"), "{d}");
    }

    #[test]
    fn at_string_entry_never_grants_execution_functions() {
        let d = check(
            r#"["@runner", "@wheel"]"#,
            r#""runner""#,
            "[]",
            r#""*""#,
            "glob",
        );
        assert!(!d.allowed);
        assert!(d.to_string().contains("runner/wheel functions only"), "{d}");
    }

    #[test]
    fn compound_acl_target_is_expanded_as_compound() {
        let targets = FakeTargets::standard();
        let (fun, arg) = (json(r#""test.ping""#), json("[]"));
        let tgt = json(r#""web1""#);
        let d = acl(r#"[{"web* and G@os:Debian": ["test.*"]}]"#, Matching::Full).check(
            &Request::new(&fun, &arg, &tgt, "glob"),
            &targets,
            &[],
        );
        assert!(d.allowed);
        assert!(targets
            .seen()
            .contains(&("web* and G@os:Debian".to_owned(), "compound".to_owned())));
    }

    #[test]
    fn precomputed_minions_are_used_instead_of_expanding_the_target() {
        let targets = FakeTargets::standard();
        let minions = ["web1".to_owned()];
        let (fun, arg, tgt) = (json(r#""test.ping""#), json("[]"), json(r#""*""#));
        let mut req = Request::new(&fun, &arg, &tgt, "glob");
        req.minions = Some(&minions);
        let d = acl(r#"[{"web*": ["test.*"]}]"#, Matching::Full).check(&req, &targets, &[]);
        assert!(d.allowed);
        assert!(!targets.seen().iter().any(|(t, _)| t == "*"));
    }

    /// [`FakeTargets`], recording how many candidates each `first_outside` call gets.
    struct Probing {
        inner: FakeTargets,
        sizes: RefCell<Vec<usize>>,
    }

    impl Targets for Probing {
        fn expand(&self, tgt: &Value, tgt_type: &str) -> Vec<String> {
            self.inner.expand(tgt, tgt_type)
        }

        fn first_outside<'c>(
            &self,
            tgt: &Value,
            tgt_type: &str,
            candidates: &'c [String],
        ) -> Option<&'c str> {
            self.sizes.borrow_mut().push(candidates.len());
            self.inner.first_outside(tgt, tgt_type, candidates)
        }
    }

    fn probing_check(acl_text: &str, minions: &[&str]) -> (Decision, Vec<usize>) {
        let targets = Probing {
            inner: FakeTargets::standard(),
            sizes: RefCell::new(Vec::new()),
        };
        let minions: Vec<String> = minions.iter().map(|m| (*m).to_owned()).collect();
        let (fun, arg, tgt) = (json(r#""test.ping""#), json("[]"), json(r#""*""#));
        let mut req = Request::new(&fun, &arg, &tgt, "glob");
        req.minions = Some(&minions);
        let d = acl(acl_text, Matching::Full).check(&req, &targets, &[]);
        (d, targets.sizes.into_inner())
    }

    #[test]
    fn entry_missing_the_first_or_last_requested_minion_is_not_evaluated_further() {
        let acl_text = r#"[{"web*": ["test.*"]}]"#;
        for minions in [["db1", "web1", "web2"], ["web1", "web2", "db1"]] {
            let (d, sizes) = probing_check(acl_text, &minions);
            let Reason::NotAuthorised { misses, .. } = &d.reason else {
                panic!("{d}");
            };
            assert_eq!(
                misses[0].kind,
                MissKind::TargetNotSubset {
                    outside: "db1".to_owned()
                }
            );
            assert_eq!(sizes, [2], "only the first and last were evaluated");
        }
    }

    #[test]
    fn subset_test_reaches_the_middle_only_when_both_ends_are_inside() {
        let acl_text = r#"[{"web*": ["test.*"]}]"#;
        let (d, sizes) = probing_check(acl_text, &["web1", "db1", "web.example.com", "web2"]);
        assert_eq!(
            d.to_string(),
            "denied: 'test.ping': no entry allows it: entry 0 {'web*': ['test.*']}: target not \
             a subset: at least one targeted minion is outside it (db1)"
        );
        assert_eq!(sizes, [2, 2]);
        let (d, sizes) = probing_check(acl_text, &["web1", "web.example.com", "web2"]);
        assert!(d.allowed, "{d}");
        assert_eq!(sizes, [2, 1]);
        let (d, sizes) = probing_check(acl_text, &["web1", "web2"]);
        assert!(d.allowed, "{d}");
        assert_eq!(sizes, [2], "two minions are tested in one call");
        let (d, sizes) = probing_check(acl_text, &[]);
        assert!(d.allowed, "an empty request passes every target entry");
        assert!(sizes.is_empty());
    }

    #[test]
    fn first_outside_names_the_first_candidate_the_target_misses_even_with_duplicates() {
        let targets = FakeTargets::standard();
        let ids = |list: &[&str]| -> Vec<String> { list.iter().map(|s| (*s).to_owned()).collect() };
        let outside = |tgt: &str, candidates: &[String]| {
            targets
                .first_outside(&Value::from(tgt), "compound", candidates)
                .map(str::to_owned)
        };
        let dup = ids(&["web1", "web1", "db1", "web2"]);
        assert_eq!(outside("web*", &dup).as_deref(), Some("db1"));
        assert_eq!(outside("web* or db1", &dup), None);
        assert_eq!(outside("not web2", &dup).as_deref(), Some("web2"));
        assert_eq!(outside("web1 or web2", &ids(&["web1", "web1"])), None);
        assert_eq!(
            outside("web1 and not web1", &ids(&["web1", "web1"])).as_deref(),
            Some("web1")
        );
        assert_eq!(outside("web*", &[]), None);
    }

    /// [`FakeTargets`] answering `first_outside` from a full expansion of the target over
    /// every accepted minion: the way the check worked before it evaluated entries over
    /// the request's minions only.
    struct ExpandAll(FakeTargets);

    impl Targets for ExpandAll {
        fn expand(&self, tgt: &Value, tgt_type: &str) -> Vec<String> {
            self.0.expand(tgt, tgt_type)
        }

        fn first_outside<'c>(
            &self,
            tgt: &Value,
            tgt_type: &str,
            candidates: &'c [String],
        ) -> Option<&'c str> {
            let all = self.0.expand(tgt, tgt_type);
            candidates
                .iter()
                .map(String::as_str)
                .find(|c| !all.iter().any(|a| a == c))
        }
    }

    #[test]
    fn evaluating_entries_over_the_request_decides_as_expanding_them_over_all_minions() {
        let entries = [
            "web*",
            "web1",
            "db*",
            "G@os:Debian",
            "web* and G@os:Debian",
            "web* and not G@os:Debian",
            "not web1",
            "not G@os:RedHat",
            "L@web1,db1",
            "L@web1,web2 or G@os:Debian",
            "E@web[0-9]",
            "I@env:prod",
            "( web* or db1 ) and not I@env:production",
            "web.example.com*",
            "web* and (",
        ];
        let requests = [
            ("*", "glob"),
            ("web*", "glob"),
            ("web1", "glob"),
            ("web1,db1", "list"),
            ("G@os:Debian", "compound"),
            ("web* and not web1", "compound"),
            ("I@env:prod*", "compound"),
            ("nobody", "glob"),
        ];
        let mut checked = 0;
        for entry in entries {
            let acl = acl(&format!(r#"[{{"{entry}": ["test.*"]}}]"#), Matching::Full);
            for (tgt, tgt_type) in requests {
                let (fun, arg, tgt) = (json(r#""test.ping""#), json("[]"), Value::from(tgt));
                let req = Request::new(&fun, &arg, &tgt, tgt_type);
                let within = acl.check(&req, &FakeTargets::standard(), &[]);
                let all = acl.check(&req, &ExpandAll(FakeTargets::standard()), &[]);
                assert_eq!(within, all, "{entry} over {tgt} ({tgt_type})");
                checked += usize::from(within.allowed);
            }
        }
        assert!(checked > 10, "the grid allows some requests: {checked}");
    }

    #[test]
    fn publish_validate_denies_pillar_globbing() {
        let targets = FakeTargets::standard();
        let (fun, arg) = (json(r#""test.ping""#), json("[]"));
        let tgt = json(r#""env:prod*""#);
        let mut req = Request::new(&fun, &arg, &tgt, "pillar");
        req.publish_validate = true;
        let acl = acl(r#"[".*"]"#, Matching::Full);
        let d = acl.check(&req, &targets, &[]);
        assert!(!d.allowed);
        assert!(matches!(d.reason, Reason::PublishValidate { .. }), "{d}");
        let tgt = json(r#""env:prod""#);
        let mut req = Request::new(&fun, &arg, &tgt, "pillar");
        req.publish_validate = true;
        assert!(acl.check(&req, &targets, &[]).allowed);
    }

    #[test]
    fn exact_tgt_type_maps_like_salt() {
        assert_eq!(exact_tgt_type("pillar"), Some("pillar_exact"));
        assert_eq!(exact_tgt_type("PILLAR_PCRE"), Some("pillar_exact"));
        assert_eq!(exact_tgt_type("compound"), Some("compound_pillar_exact"));
        assert_eq!(exact_tgt_type("glob"), None);
        assert_eq!(exact_tgt_type("pillar_exact"), None);
    }

    #[test]
    fn every_function_of_a_multi_function_job_must_be_allowed() {
        let acl_text = r#"[{"*": ["test.ping"]}]"#;
        let d = check(
            acl_text,
            r#"["test.ping", "cmd.run"]"#,
            r#"[[], ["rm -rf /"]]"#,
            r#""*""#,
            "glob",
        );
        assert!(!d.allowed, "Salt would allow this job");
        let Reason::NotAuthorised { fun, position, .. } = &d.reason else {
            panic!("{d}");
        };
        assert_eq!((fun.as_str(), *position), ("cmd.run", 1));
        let d = check(
            r#"["test.ping", "cmd.run"]"#,
            r#"["test.ping", "cmd.run"]"#,
            r#"[[], []]"#,
            r#""*""#,
            "glob",
        );
        assert!(d.allowed);
        let Reason::Granted(grants) = &d.reason else {
            panic!("{d}");
        };
        assert_eq!(grants.len(), 2);
    }

    #[test]
    fn whitelist_allows_only_the_whitelisted_function() {
        let targets = FakeTargets::standard();
        let (arg, tgt) = (json("[[], []]"), json(r#""*""#));
        let acl = acl(r#"["test.*"]"#, Matching::Full);
        let fun = json(r#""saltutil.find_job""#);
        let one = json("[]");
        let d = acl.check(
            &Request::new(&fun, &one, &tgt, "glob"),
            &targets,
            &["saltutil.find_job"],
        );
        assert!(d.allowed);
        assert_eq!(
            d.to_string(),
            "allowed: 'saltutil.find_job' by the whitelist"
        );
        let fun = json(r#"["saltutil.find_job", "cmd.run"]"#);
        let d = acl.check(
            &Request::new(&fun, &arg, &tgt, "glob"),
            &targets,
            &["saltutil.find_job"],
        );
        assert!(!d.allowed, "Salt would allow the whole job");
    }

    #[test]
    fn malformed_function_values_are_denied() {
        for fun in ["[]", "3", "null", r#"["a", 1]"#, r#"{"a": 1}"#] {
            let d = check(r#"[".*"]"#, fun, "[]", r#""*""#, "glob");
            assert!(!d.allowed, "{fun}");
        }
        let many = Value::Array(vec![Value::from("test.ping"); MAX_FUNCTIONS + 1]);
        let (arg, tgt) = (json("[]"), json(r#""*""#));
        let d = acl(r#"[".*"]"#, Matching::Full).check(
            &Request::new(&many, &arg, &tgt, "glob"),
            &FakeTargets::standard(),
            &[],
        );
        assert!(matches!(d.reason, Reason::TooManyFunctions { .. }));
    }

    #[test]
    fn positional_arg_rules_match_python_str_of_the_arg() {
        let acl_text = r#"[{"*": [{"test.arg": {"args": ["1", null, "True"]}}]}]"#;
        let yes = check(
            acl_text,
            r#""test.arg""#,
            r#"[1, "x", true]"#,
            r#""*""#,
            "glob",
        );
        assert!(yes.allowed, "{yes}");
        let missing = check(acl_text, r#""test.arg""#, "[1]", r#""*""#, "glob");
        assert!(
            missing.to_string().contains("argument 1 is missing"),
            "{missing}"
        );
        let wrong = check(
            acl_text,
            r#""test.arg""#,
            r#"[2, "x", true]"#,
            r#""*""#,
            "glob",
        );
        assert!(
            wrong.to_string().contains("argument 0 does not match"),
            "{wrong}"
        );
        let extra = check(
            acl_text,
            r#""test.arg""#,
            r#"[1, 2, true, 4]"#,
            r#""*""#,
            "glob",
        );
        assert!(extra.allowed, "extra positional args are allowed");
    }

    #[test]
    fn full_match_applies_to_argument_regexes() {
        let acl_text = r#"[{"*": [{"cmd.run": {"args": ["ls"]}}]}]"#;
        let arg = r#"["ls; rm -rf /"]"#;
        assert!(!check(acl_text, r#""cmd.run""#, arg, r#""*""#, "glob").allowed);
        assert!(
            check_mode(
                acl_text,
                r#""cmd.run""#,
                arg,
                r#""*""#,
                "glob",
                Matching::Prefix
            )
            .allowed
        );
    }

    #[test]
    fn kwarg_rules_only_see_the_trailing_kwarg_map() {
        let acl_text = r#"[{"*": [{"test.arg": {"kwargs": {"a": "1.*", "b": null}}}]}]"#;
        let raw = check(
            acl_text,
            r#""test.arg""#,
            r#"["a=12", "b=1"]"#,
            r#""*""#,
            "glob",
        );
        assert!(!raw.allowed);
        assert!(
            raw.to_string().contains("keyword argument a is missing"),
            "{raw}"
        );
        let packed = check(
            acl_text,
            r#""test.arg""#,
            r#"[{"__kwarg__": true, "a": 12, "b": null}]"#,
            r#""*""#,
            "glob",
        );
        assert!(packed.allowed, "{packed}");
        let wrong = check(
            acl_text,
            r#""test.arg""#,
            r#"[{"__kwarg__": true, "a": 2, "b": 1}]"#,
            r#""*""#,
            "glob",
        );
        assert!(wrong
            .to_string()
            .contains("keyword argument a does not match"));
    }

    #[test]
    fn any_one_arg_spec_of_a_list_is_enough() {
        let acl_text = r#"[{"*": [{"test.arg": [{"args": ["a"]}, {"args": ["b"]}]}]}]"#;
        assert!(check(acl_text, r#""test.arg""#, r#"["b"]"#, r#""*""#, "glob").allowed);
        assert!(!check(acl_text, r#""test.arg""#, r#"["c"]"#, r#""*""#, "glob").allowed);
    }

    #[test]
    fn empty_arg_spec_allows_any_arguments_and_empty_spec_list_none() {
        let any = r#"[{"*": [{"test.arg": {}}]}]"#;
        assert!(check(any, r#""test.arg""#, r#"["x"]"#, r#""*""#, "glob").allowed);
        let none = r#"[{"*": [{"test.arg": []}]}]"#;
        assert!(!check(none, r#""test.arg""#, r#"["x"]"#, r#""*""#, "glob").allowed);
    }

    #[test]
    fn unknown_arg_spec_key_never_passes() {
        let d = check(
            r#"[{"*": [{"cmd.run": {"arg": ["ls"]}}]}]"#,
            r#""cmd.run""#,
            r#"["rm -rf /"]"#,
            r#""*""#,
            "glob",
        );
        assert!(!d.allowed, "Salt ignores the typo and allows any arguments");
        assert!(d.to_string().contains("malformed argument spec"), "{d}");
    }

    #[test]
    fn invalid_regex_entry_never_matches_and_is_named() {
        let d = check(r#"["test.("]"#, r#""test.(""#, "[]", r#""*""#, "glob");
        assert!(!d.allowed);
        assert!(
            d.to_string().contains("Invalid regular expression: test.("),
            "{d}"
        );
        let d = check(
            r#"["test.(", "test.*"]"#,
            r#""test.ping""#,
            "[]",
            r#""*""#,
            "glob",
        );
        assert!(d.allowed, "later valid entries still apply");
    }

    #[test]
    fn non_list_args_satisfy_no_arg_rule() {
        let acl_text = r#"[{"*": [{"cmd.run": {"args": ["l"]}}]}]"#;
        assert!(!check(acl_text, r#""cmd.run""#, r#""ls""#, r#""*""#, "glob").allowed);
        let plain = r#"[{"*": ["cmd.run"]}]"#;
        assert!(check(plain, r#""cmd.run""#, r#""ls""#, r#""*""#, "glob").allowed);
    }

    #[test]
    fn multi_function_args_are_taken_per_function() {
        let acl_text = r#"[{"*": ["test.ping", {"cmd.run": {"args": ["ls"]}}]}]"#;
        let fun = r#"["test.ping", "cmd.run"]"#;
        assert!(check(acl_text, fun, r#"[[], ["ls"]]"#, r#""*""#, "glob").allowed);
        assert!(!check(acl_text, fun, r#"[["ls"], []]"#, r#""*""#, "glob").allowed);
        assert!(!check(acl_text, fun, r#"[[]]"#, r#""*""#, "glob").allowed);
    }

    #[test]
    fn each_entry_target_is_expanded_once_per_check() {
        let targets = FakeTargets::standard();
        let fun = json(r#"["test.ping", "test.echo", "test.arg"]"#);
        let (arg, tgt) = (json("[[], [], []]"), json(r#""web1""#));
        let d = acl(r#"[{"web*": ["test.*"]}]"#, Matching::Full).check(
            &Request::new(&fun, &arg, &tgt, "glob"),
            &targets,
            &[],
        );
        assert!(d.allowed);
        assert_eq!(targets.calls(), 2, "{:?}", targets.seen());
    }

    #[test]
    fn regex_hitting_the_backtrack_limit_is_no_match() {
        let acl_text = r#"[{"*": [{"test.arg": {"args": ["(a|aa)+\\1c"]}}]}]"#;
        let arg = format!(r#"["{}"]"#, "a".repeat(64));
        let d = check(acl_text, r#""test.arg""#, &arg, r#""*""#, "glob");
        assert!(!d.allowed);
        assert!(d.to_string().contains("backtracking limit"), "{d}");
    }

    #[test]
    fn empty_acl_denies_with_no_entry() {
        let d = check("[]", r#""test.ping""#, "[]", r#""*""#, "glob");
        assert_eq!(d.to_string(), "denied: 'test.ping': no entry allows it");
    }
}
