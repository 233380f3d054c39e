//! `publisher_acl_blacklist`: users and functions no publish may involve.

use std::fmt;

use halite_target::pyvalue;
use rmpv::Value;

use crate::acl::{repr_of, shorten, ParseWarning};
use crate::check::MAX_FUNCTIONS;
use crate::expr::{ExprForm, ExprMatch, ExprPattern};
use crate::pattern::{Matching, ModeNote, PatternKind};

/// The option this parses.
const OPTION: &str = "publisher_acl_blacklist";

/// The `publisher_acl_blacklist` option: `{users: [patterns], modules: [patterns]}`
/// (Salt's `salt.acl.PublisherACL`).
///
/// Salt checks it before anything else on every publish, root's included: a blacklisted
/// user (the load's `user`, e.g. `sudo_bob` under `sudo`) or function is refused with
/// "Authorization error occurred.". Each pattern is matched as Salt's `expr_match`: a glob
/// (`fnmatch`) first, then the regex `\A<pattern>\Z`. A `modules` pattern must match the
/// whole function name (`cmd` blocks only a function named `cmd`; write `cmd.*`), and one
/// blocked function blocks a whole multi-function job.
///
/// Fail-closed choices (deviations from Salt):
/// - **Anchoring.** The regex is Salt's ungrouped `\A<pattern>\Z` under every
///   `acl_regex_match` mode: it blocks everything the grouped `\A(?:<pattern>)\Z` would
///   and more (`admin|root` also blocks `administrator`: only the last branch is
///   end-anchored), so whole-name matching would let
///   through users and functions that Salt blocks. Such patterns are listed by
///   [`Blacklist::differing_patterns`].
/// - **Backtracking limit.** A regex that hits the limit counts as a match: the user or
///   function is blocked ([`ExprMatch::RegexFailed`]); Python would spin.
/// - **Malformed configuration.** A blacklist that is not a map, or a `users`/`modules`
///   value that is neither a list, a string (one pattern, as in Salt) nor null, blocks
///   every user / every function: Salt raises on every publish for most such values
///   (and reads a map's keys as patterns, which Halite does not guess at). A function that
///   is not a string or a list of strings, or a job of more than [`MAX_FUNCTIONS`]
///   functions, is blocked whenever `modules` has a pattern. Entries that are not strings
///   are ignored, as Salt ignores them; unknown keys are ignored. Each is reported.
///
/// A pattern that is no valid regex (`*`) is a glob only, silently, as in Salt.
#[derive(Debug, Default)]
pub struct Blacklist {
    users: Part,
    modules: Part,
    matching: Matching,
}

/// The patterns of `users` or `modules`.
#[derive(Debug, Default)]
enum Part {
    #[default]
    Empty,
    Patterns(Vec<Located>),
    /// Unusable: everything is blocked.
    Malformed,
}

#[derive(Debug)]
struct Located {
    pattern: ExprPattern,
    location: String,
}

/// Which list of the blacklist a hit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlacklistPart {
    /// `users`, matched against the load's user.
    Users,
    /// `modules`, matched against each function of the job.
    Modules,
}

impl BlacklistPart {
    /// The option's key (`users`, `modules`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Users => "users",
            Self::Modules => "modules",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Self::Users => "user",
            Self::Modules => "function",
        }
    }

    fn everything(self) -> &'static str {
        match self {
            Self::Users => "every user",
            Self::Modules => "every function",
        }
    }
}

/// Why a user or function is blocked: the answer of [`Blacklist::user_is_blacklisted`]
/// and [`Blacklist::cmd_is_blacklisted`]. Its `Display` is the reason for the log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlacklistHit {
    /// The list that blocks.
    pub part: BlacklistPart,
    /// The user or function name (shortened), or the Python `repr` of a malformed `fun`.
    pub subject: String,
    /// What blocks it.
    pub cause: HitCause,
}

/// What in the blacklist blocks a user or function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HitCause {
    /// A pattern matched (or its regex hit the backtracking limit).
    Pattern {
        /// Where it is, e.g. `publisher_acl_blacklist['modules'][0]`.
        location: String,
        /// The pattern.
        pattern: String,
        /// How it matched.
        how: ExprMatch,
    },
    /// The list is malformed (reported at parse time), so it blocks everything.
    MalformedList,
    /// The job's `fun` is not a string or a list of strings.
    MalformedFunction,
    /// The job has more than [`MAX_FUNCTIONS`] functions.
    TooManyFunctions {
        /// How many.
        count: usize,
    },
}

impl fmt::Display for BlacklistHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (noun, subject) = (self.part.noun(), &self.subject);
        match &self.cause {
            HitCause::Pattern {
                location,
                pattern,
                how: ExprMatch::RegexFailed,
            } => write!(
                f,
                "{noun} '{subject}': {location} '{pattern}' exceeded the regex backtracking \
                 limit, which blocks (a blacklist fails closed)"
            ),
            HitCause::Pattern {
                location,
                pattern,
                how,
            } => write!(
                f,
                "{noun} '{subject}' matches {location} '{pattern}' ({how})"
            ),
            HitCause::MalformedList => write!(
                f,
                "{noun} '{subject}': {OPTION}['{}'] is malformed, so {} is blocked",
                self.part.as_str(),
                self.part.everything()
            ),
            HitCause::MalformedFunction => write!(
                f,
                "the function {subject} is not a string or a list of strings"
            ),
            HitCause::TooManyFunctions { count } => write!(
                f,
                "{count} functions in one job (at most {MAX_FUNCTIONS} are checked against the \
                 blacklist)"
            ),
        }
    }
}

impl Blacklist {
    /// Parses the `publisher_acl_blacklist` option (absent, `Nil`: nothing is blocked).
    /// `matching` (`acl_regex_match`) is only recorded in the mode notes: a blacklist
    /// matches as Salt does in every mode (see [`Blacklist`]).
    pub fn parse(value: &Value, matching: Matching) -> (Blacklist, Vec<ParseWarning>) {
        let mut warnings = Vec::new();
        let mut blacklist = Blacklist {
            matching,
            ..Blacklist::default()
        };
        let entries = match value {
            Value::Nil => return (blacklist, warnings),
            Value::Map(entries) => entries,
            other => {
                warnings.push(ParseWarning {
                    location: OPTION.to_owned(),
                    message: format!(
                        "not a map of users and modules ({}); every user and function is \
                         blocked (Salt fails every publish)",
                        shorten(&repr_of(other))
                    ),
                });
                blacklist.users = Part::Malformed;
                blacklist.modules = Part::Malformed;
                return (blacklist, warnings);
            }
        };
        for (key, list) in pyvalue::dict_entries(entries) {
            match pyvalue::text(key) {
                Some("users") => {
                    blacklist.users = parse_part(list, BlacklistPart::Users, &mut warnings);
                }
                Some("modules") => {
                    blacklist.modules = parse_part(list, BlacklistPart::Modules, &mut warnings);
                }
                _ => warnings.push(ParseWarning {
                    location: format!("{OPTION}[{}]", shorten(&repr_of(key))),
                    message: "unknown key, ignored (only 'users' and 'modules' are read)"
                        .to_owned(),
                }),
            }
        }
        (blacklist, warnings)
    }

    /// Salt's `user_is_blacklisted`: the hit blocking `user` (the load's `user`), or
    /// `None`.
    pub fn user_is_blacklisted(&self, user: &str) -> Option<BlacklistHit> {
        hit(&self.users, BlacklistPart::Users, user)
    }

    /// Salt's `cmd_is_blacklisted`: the hit blocking the job's `fun` (a function name, or
    /// a list of them: the first blocked one blocks the job), or `None`.
    pub fn cmd_is_blacklisted(&self, fun: &Value) -> Option<BlacklistHit> {
        let part = BlacklistPart::Modules;
        if matches!(self.modules, Part::Empty) {
            return None;
        }
        let malformed = |cause| {
            Some(BlacklistHit {
                part,
                subject: shorten(&repr_of(fun)),
                cause,
            })
        };
        if let Some(name) = pyvalue::text(fun) {
            return hit(&self.modules, part, name);
        }
        let Value::Array(names) = fun else {
            return malformed(HitCause::MalformedFunction);
        };
        if names.len() > MAX_FUNCTIONS {
            return malformed(HitCause::TooManyFunctions { count: names.len() });
        }
        for name in names {
            let Some(name) = pyvalue::text(name) else {
                return malformed(HitCause::MalformedFunction);
            };
            if let Some(found) = hit(&self.modules, part, name) {
                return Some(found);
            }
        }
        None
    }

    /// The patterns whose ungrouped alternation blocks more than whole names (see
    /// [`Blacklist`]), for the master to log at startup.
    pub fn differing_patterns(&self) -> Vec<ModeNote> {
        let mut out = Vec::new();
        for (part, kind) in [
            (&self.users, PatternKind::BlacklistedUser),
            (&self.modules, PatternKind::BlacklistedFunction),
        ] {
            let Part::Patterns(patterns) = part else {
                continue;
            };
            for p in patterns.iter().filter(|p| p.pattern.differs()) {
                out.push(ModeNote {
                    location: p.location.clone(),
                    pattern: p.pattern.source().to_owned(),
                    kind,
                    matching: self.matching,
                });
            }
        }
        out
    }
}

/// Parses the value of `users` or `modules`.
fn parse_part(value: &Value, part: BlacklistPart, warnings: &mut Vec<ParseWarning>) -> Part {
    let here = format!("{OPTION}['{}']", part.as_str());
    let compile = |text: &str, location: String| Located {
        pattern: ExprPattern::compile(text, ExprForm::Salt),
        location,
    };
    if let Some(text) = pyvalue::text(value) {
        return Part::Patterns(vec![compile(text, here)]);
    }
    match value {
        Value::Nil => Part::Empty,
        Value::Array(items) => {
            let mut patterns = Vec::with_capacity(items.len());
            for (n, item) in items.iter().enumerate() {
                let location = format!("{here}[{n}]");
                match pyvalue::text(item) {
                    Some(text) => patterns.push(compile(text, location)),
                    None => warnings.push(ParseWarning {
                        location,
                        message: format!(
                            "not a string ({}); ignored, as Salt ignores it",
                            shorten(&repr_of(item))
                        ),
                    }),
                }
            }
            Part::Patterns(patterns)
        }
        other => {
            warnings.push(ParseWarning {
                location: here,
                message: format!(
                    "not a list of patterns ({}); {} is blocked",
                    shorten(&repr_of(other)),
                    part.everything()
                ),
            });
            Part::Malformed
        }
    }
}

/// The first pattern of `patterns` matching `subject`.
fn hit(patterns: &Part, part: BlacklistPart, subject: &str) -> Option<BlacklistHit> {
    let cause = match patterns {
        Part::Empty => return None,
        Part::Malformed => HitCause::MalformedList,
        Part::Patterns(patterns) => patterns.iter().find_map(|p| {
            p.pattern.matches(subject).map(|how| HitCause::Pattern {
                location: p.location.clone(),
                pattern: p.pattern.source().to_owned(),
                how,
            })
        })?,
    };
    Some(BlacklistHit {
        part,
        subject: shorten(subject),
        cause,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{json, note_texts};

    /// The configuration verified against Salt in salt-semantics.md §2.4.
    const VERIFIED: &str =
        r#"{"users": ["root", "^(?!sudo_).*$"], "modules": ["cmd.*", "test.echo", "cmd"]}"#;

    fn blacklist(text: &str) -> Blacklist {
        let (b, warnings) = Blacklist::parse(&json(text), Matching::Full);
        assert!(warnings.is_empty(), "{warnings:?}");
        b
    }

    #[test]
    fn verified_users_block_root_and_bob_not_sudo_bob() {
        let b = blacklist(VERIFIED);
        let root = b.user_is_blacklisted("root");
        assert_eq!(
            root.map(|h| h.to_string()).as_deref(),
            Some("user 'root' matches publisher_acl_blacklist['users'][0] 'root' (glob)")
        );
        let bob = b.user_is_blacklisted("bob");
        assert_eq!(
            bob.map(|h| h.to_string()).as_deref(),
            Some("user 'bob' matches publisher_acl_blacklist['users'][1] '^(?!sudo_).*$' (regex)")
        );
        assert_eq!(b.user_is_blacklisted("sudo_bob"), None);
    }

    #[test]
    fn module_patterns_must_match_the_whole_function_name() {
        let b = blacklist(VERIFIED);
        for blocked in ["cmd.run", "test.echo", "cmd"] {
            assert!(
                b.cmd_is_blacklisted(&Value::from(blocked)).is_some(),
                "{blocked}"
            );
        }
        for allowed in ["test.echo2", "test.ping", "cm"] {
            assert_eq!(
                b.cmd_is_blacklisted(&Value::from(allowed)),
                None,
                "{allowed}"
            );
        }
        let only_cmd = blacklist(r#"{"modules": ["cmd"]}"#);
        assert_eq!(only_cmd.cmd_is_blacklisted(&Value::from("cmd.run")), None);
        // `.` is a regex wildcard: `cmd.*` also blocks `cmdx`, as in Salt.
        assert!(b.cmd_is_blacklisted(&Value::from("cmdx")).is_some());
    }

    #[test]
    fn one_blocked_function_blocks_a_multi_function_job() {
        let b = blacklist(VERIFIED);
        let hit = b.cmd_is_blacklisted(&json(r#"["test.ping", "cmd.run_all"]"#));
        assert_eq!(
            hit.map(|h| h.to_string()).as_deref(),
            Some("function 'cmd.run_all' matches publisher_acl_blacklist['modules'][0] 'cmd.*' (glob)")
        );
        assert_eq!(
            b.cmd_is_blacklisted(&json(r#"["test.ping", "grains.items"]"#)),
            None
        );
    }

    #[test]
    fn single_string_is_one_pattern_as_in_salt() {
        let b = blacklist(r#"{"users": "bob", "modules": "cmd.*"}"#);
        assert!(b.user_is_blacklisted("bob").is_some());
        assert!(b.user_is_blacklisted("bobby").is_none());
        assert!(b.cmd_is_blacklisted(&Value::from("cmd.run")).is_some());
    }

    #[test]
    fn ungrouped_alternation_blocks_prefixes_in_every_mode() {
        for m in [Matching::Full, Matching::Prefix] {
            let (b, _) = Blacklist::parse(&json(r#"{"users": ["admin|root"]}"#), m);
            assert!(b.user_is_blacklisted("administrator").is_some(), "{m}");
            assert!(b.user_is_blacklisted("root").is_some(), "{m}");
            assert!(
                b.user_is_blacklisted("rootkit").is_none(),
                "{m}: last branch is anchored"
            );
            assert!(b.user_is_blacklisted("xadmin").is_none(), "{m}");
            let notes = b.differing_patterns();
            assert_eq!(
                note_texts(&notes),
                ["publisher_acl_blacklist['users'][0]=admin|root"]
            );
            assert!(
                notes[0].to_string().contains("fails closed"),
                "{}",
                notes[0]
            );
        }
    }

    #[test]
    fn regex_over_the_backtracking_limit_blocks() {
        let b = blacklist(r#"{"users": ["(a|aa)+\\1c"], "modules": ["(a|aa)+\\1c"]}"#);
        let long = "a".repeat(64);
        let hit = b.user_is_blacklisted(&long);
        let Some(BlacklistHit {
            cause: HitCause::Pattern { how, .. },
            ..
        }) = &hit
        else {
            panic!("{hit:?}");
        };
        assert_eq!(*how, ExprMatch::RegexFailed);
        assert!(hit
            .as_ref()
            .is_some_and(|h| h.to_string().contains("fails closed")));
        assert!(b.cmd_is_blacklisted(&Value::from(long)).is_some());
        assert!(
            b.user_is_blacklisted("aac").is_some(),
            "a real match still blocks"
        );
        assert!(b.user_is_blacklisted("bob").is_none());
    }

    #[test]
    fn malformed_lists_block_everything_and_are_reported() {
        let (b, warnings) = Blacklist::parse(
            &json(r#"{"users": 5, "modules": {"cmd.*": 1}}"#),
            Matching::Full,
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert_eq!(warnings[0].location, "publisher_acl_blacklist['users']");
        let hit = b.user_is_blacklisted("anyone");
        assert_eq!(
            hit.map(|h| h.to_string()).as_deref(),
            Some("user 'anyone': publisher_acl_blacklist['users'] is malformed, so every user is blocked")
        );
        assert!(b.cmd_is_blacklisted(&Value::from("test.ping")).is_some());
        for bad in [r#"["root"]"#, r#""root""#, "true"] {
            let (b, warnings) = Blacklist::parse(&json(bad), Matching::Full);
            assert_eq!(warnings.len(), 1, "{bad}");
            assert!(b.user_is_blacklisted("bob").is_some(), "{bad}");
            assert!(
                b.cmd_is_blacklisted(&Value::from("test.ping")).is_some(),
                "{bad}"
            );
        }
    }

    #[test]
    fn non_string_entries_and_unknown_keys_are_ignored_and_reported() {
        let (b, warnings) = Blacklist::parse(
            &json(r#"{"users": [1000, null, "bob"], "user": ["eve"]}"#),
            Matching::Full,
        );
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert_eq!(warnings[0].location, "publisher_acl_blacklist['users'][0]");
        assert_eq!(warnings[2].location, "publisher_acl_blacklist['user']");
        assert!(b.user_is_blacklisted("1000").is_none());
        assert!(b.user_is_blacklisted("eve").is_none());
        let hit = b.user_is_blacklisted("bob");
        assert!(hit.is_some_and(|h| h.to_string().contains("['users'][2]")));
    }

    #[test]
    fn malformed_or_huge_function_values_are_blocked_when_modules_are_listed() {
        let b = blacklist(r#"{"modules": ["cmd.*"]}"#);
        for fun in ["5", "null", r#"["test.ping", 5]"#, r#"{"cmd.run": 1}"#] {
            let hit = b.cmd_is_blacklisted(&json(fun));
            assert!(
                matches!(
                    hit,
                    Some(BlacklistHit {
                        cause: HitCause::MalformedFunction,
                        ..
                    })
                ),
                "{fun}: {hit:?}"
            );
        }
        let many = Value::Array(vec![Value::from("test.ping"); MAX_FUNCTIONS + 1]);
        let hit = b.cmd_is_blacklisted(&many);
        assert!(matches!(
            hit,
            Some(BlacklistHit {
                cause: HitCause::TooManyFunctions { .. },
                ..
            })
        ));
        let no_modules = blacklist(r#"{"users": ["bob"]}"#);
        assert_eq!(no_modules.cmd_is_blacklisted(&json("5")), None);
        assert_eq!(no_modules.cmd_is_blacklisted(&many), None);
    }

    #[test]
    fn absent_or_empty_blacklist_blocks_nothing() {
        for text in ["null", "{}", r#"{"users": null, "modules": []}"#] {
            let (b, warnings) = Blacklist::parse(&json(text), Matching::Full);
            assert!(warnings.is_empty(), "{text}");
            assert!(b.user_is_blacklisted("root").is_none(), "{text}");
            assert!(
                b.cmd_is_blacklisted(&Value::from("cmd.run")).is_none(),
                "{text}"
            );
        }
    }

    #[test]
    fn glob_only_pattern_blocks_everyone() {
        let b = blacklist(r#"{"users": ["*"]}"#);
        let hit = b.user_is_blacklisted("anyone");
        assert!(hit.is_some_and(|h| h.to_string().ends_with("'*' (glob)")));
    }

    #[test]
    fn long_subjects_are_shortened() {
        let b = blacklist(r#"{"users": [".*"]}"#);
        let long = "u".repeat(1000);
        let hit = b.user_is_blacklisted(&long);
        assert!(hit.is_some_and(|h| h.subject.chars().count() < 200));
    }
}
