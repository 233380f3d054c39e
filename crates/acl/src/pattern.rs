//! The regexes of an ACL: compiled once, matched with the configured anchoring, and the
//! analysis of which of them mean something different under Salt's anchoring.

use std::fmt;

use halite_target::pyre::{Anchor, PyRegex};
use halite_target::pyvalue;
use rmpv::Value;

use crate::Error;

/// How ACL regexes are anchored: the master option `acl_regex_match`.
///
/// Salt uses `re.match`, which anchors at the start only, for every regex of `peer`,
/// `peer_run`, `publisher_acl` and `external_auth`: the minion-id keys, the function
/// regexes and the argument regexes. So `.*example.com` also admits
/// `web.example.com.evil.org`, `cmd.run` admits `cmd.run_all`, and an argument rule `ls`
/// admits `ls; rm -rf /`. Halite's default is [`Matching::Full`] (`re.fullmatch`), which
/// fails closed; [`Matching::Prefix`] is Salt's behaviour exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Matching {
    /// `re.fullmatch`: a regex must match the whole id, function name or argument.
    #[default]
    Full,
    /// `re.match`: a regex must match a prefix (Salt's behaviour).
    Prefix,
}

impl Matching {
    /// The value of the master option `acl_regex_match`: absent (`Nil`) is
    /// [`Matching::Full`]; otherwise the string `full` or `prefix`.
    ///
    /// Errors: [`Error::InvalidMatching`] for anything else (the master should refuse to
    /// start rather than guess how its ACLs are meant).
    pub fn from_config_value(value: &Value) -> Result<Self, Error> {
        match value {
            Value::Nil => Ok(Self::Full),
            other => match pyvalue::text(other) {
                Some("full") => Ok(Self::Full),
                Some("prefix") => Ok(Self::Prefix),
                _ => {
                    let mut shown = String::new();
                    pyvalue::repr(other, &mut shown);
                    Err(Error::InvalidMatching { value: shown })
                }
            },
        }
    }

    /// The option value naming this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Prefix => "prefix",
        }
    }

    fn anchor(self) -> Anchor {
        match self {
            Self::Full => Anchor::FullMatch,
            Self::Prefix => Anchor::Match,
        }
    }
}

impl fmt::Display for Matching {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a regex gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RegexTrouble {
    /// The pattern did not compile (Salt: "Invalid regular expression").
    Invalid,
    /// The match attempt failed (backtracking limit).
    Failed,
}

/// One regex of the configuration, compiled at parse time.
#[derive(Debug)]
pub(crate) struct Pattern {
    source: String,
    regex: Result<PyRegex, halite_target::Error>,
}

impl Pattern {
    /// Compiles `source` with `matching`'s anchoring. A pattern that does not compile is
    /// kept and never matches; [`Pattern::error`] says why.
    pub(crate) fn compile(source: &str, matching: Matching) -> Self {
        Self {
            source: source.to_owned(),
            regex: PyRegex::new(source, matching.anchor()),
        }
    }

    /// The configured pattern.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// A pattern shown as `source` whose regex was compiled elsewhere (the `expr_match`
    /// forms of [`crate::UserAcl`] keys and [`crate::Blacklist`] patterns).
    pub(crate) fn precompiled(source: &str, regex: Result<PyRegex, halite_target::Error>) -> Self {
        Self {
            source: source.to_owned(),
            regex,
        }
    }

    /// The compile error, when the pattern never matches.
    pub(crate) fn error(&self) -> Option<&halite_target::Error> {
        self.regex.as_ref().err()
    }

    /// Whether the pattern matches `text`; `Err` when it cannot say (invalid pattern, or
    /// the backtracking limit was hit), which callers treat as "no match".
    pub(crate) fn is_match(&self, text: &str) -> Result<bool, RegexTrouble> {
        let regex = self.regex.as_ref().map_err(|_| RegexTrouble::Invalid)?;
        regex.is_match(text).map_err(|e| {
            tracing::warn!("ACL regex {:?} gave no answer: {}", self.source, e);
            RegexTrouble::Failed
        })
    }
}

/// What a mode-sensitive pattern is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternKind {
    /// A `peer` / `peer_run` key, matched against the requesting minion's id.
    MinionId,
    /// A function regex.
    Function,
    /// A positional-argument regex (`args:`).
    Argument,
    /// A keyword-argument regex (`kwargs:`).
    Kwarg,
    /// A `publisher_acl` key, matched against the requesting user's name.
    UserName,
    /// A `publisher_acl_blacklist` `users` pattern.
    BlacklistedUser,
    /// A `publisher_acl_blacklist` `modules` pattern.
    BlacklistedFunction,
}

impl PatternKind {
    fn noun(self) -> &'static str {
        match self {
            Self::MinionId => "id",
            Self::Function => "function",
            Self::Argument => "argument",
            Self::Kwarg => "keyword value",
            Self::UserName | Self::BlacklistedUser => "user name",
            Self::BlacklistedFunction => "function name",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Self::MinionId => "ids",
            Self::Function => "functions",
            Self::Argument => "arguments",
            Self::Kwarg => "keyword values",
            Self::UserName | Self::BlacklistedUser => "user names",
            Self::BlacklistedFunction => "function names",
        }
    }
}

/// A configured pattern whose meaning depends on [`Matching`]: full match and Salt's
/// prefix match can disagree on it. Its `Display` is the line the master logs at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeNote {
    /// Where the pattern is, e.g. `peer['.*example.com']` or `peer['.*'][0]`.
    pub location: String,
    /// The pattern.
    pub pattern: String,
    /// What it is matched against.
    pub kind: PatternKind,
    /// The mode in force.
    pub matching: Matching,
}

impl fmt::Display for ModeNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (noun, plural) = (self.kind.noun(), self.kind.plural());
        let (location, pattern) = (&self.location, &self.pattern);
        match (self.kind, self.matching) {
            (PatternKind::UserName, Matching::Full) => {
                return write!(
                    f,
                    "{location}: '{pattern}' matches whole {plural} (\\A(?:{pattern})\\Z); \
                     Salt's \\A{pattern}\\Z does not group it, so a branch of the alternation \
                     also matches {plural} that only start with it (set acl_regex_match: \
                     prefix for Salt's behaviour)"
                )
            }
            (PatternKind::UserName, Matching::Prefix) => {
                return write!(
                    f,
                    "{location}: '{pattern}' is matched as Salt does (\\A{pattern}\\Z, \
                     acl_regex_match: prefix): it is not grouped, so a branch of the \
                     alternation also matches {plural} that only start with it; write \
                     '(?:{pattern})' to match whole {plural}"
                )
            }
            (PatternKind::BlacklistedUser | PatternKind::BlacklistedFunction, _) => {
                return write!(
                    f,
                    "{location}: '{pattern}' blocks what Salt's \\A{pattern}\\Z matches, in \
                     every acl_regex_match mode (a blacklist fails closed): it is not \
                     grouped, so a branch of the alternation also blocks {plural} that only \
                     start with it; write '(?:{pattern})' to block whole {plural} only"
                )
            }
            _ => {}
        }
        match self.matching {
            Matching::Full => write!(
                f,
                "{}: '{}' matches {plural} by full match; Salt matches any {noun} starting with \
                 it (set acl_regex_match: prefix for Salt's behaviour)",
                self.location, self.pattern
            ),
            Matching::Prefix => write!(
                f,
                "{}: '{}' matches any {noun} starting with it, as Salt does (acl_regex_match: \
                 prefix); end it with '$' to match whole {plural}",
                self.location, self.pattern
            ),
        }
    }
}

/// Collects [`ModeNote`]s for the valid patterns that [`prefix_differs`].
pub(crate) fn note_if_differs(
    out: &mut Vec<ModeNote>,
    pattern: &Pattern,
    location: &str,
    kind: PatternKind,
    matching: Matching,
) {
    if pattern.error().is_none() && prefix_differs(pattern.source()) {
        out.push(ModeNote {
            location: location.to_owned(),
            pattern: pattern.source().to_owned(),
            kind,
            matching,
        });
    }
}

/// Whether `re.fullmatch(pattern, s)` and `re.match(pattern, s)` can disagree for some
/// `s` — conservatively: `true` unless the pattern visibly ends the match itself.
///
/// A pattern is reported as mode-independent only when it has no top-level `|`, no `(?`
/// construct (inline flags such as `(?x)`/`(?m)`/`(?s)` and look-arounds change what the
/// tail means), and ends in an unescaped `$` or `\Z`, or in an unescaped `.*` / `.+`
/// (greedy or lazy). Caveat, shared with Salt's own advice to write `foo$`: `$` also
/// matches before a final newline and `.` does not match a newline, so the two modes still
/// differ for texts that contain a newline; minion ids and function names do not.
pub fn prefix_differs(pattern: &str) -> bool {
    if pattern.contains("(?") || has_top_level_alternation(pattern) {
        return true;
    }
    !(ends_with_unescaped(pattern, "$")
        || ends_with_unescaped(pattern, "\\Z")
        || ends_with_any_tail(pattern))
}

/// `pattern` ends with `suffix` and the character before the suffix is not escaped (the
/// run of backslashes before it has even length).
fn ends_with_unescaped(pattern: &str, suffix: &str) -> bool {
    match pattern.strip_suffix(suffix) {
        Some(rest) => {
            let backslashes = rest.chars().rev().take_while(|&c| c == '\\').count();
            // For `\Z` the suffix's own backslash is the escape; what precedes it must not
            // escape that backslash.
            backslashes % 2 == 0
        }
        None => false,
    }
}

/// Ends in `.*`, `.+`, `.*?` or `.+?` with an unescaped `.`.
fn ends_with_any_tail(pattern: &str) -> bool {
    let rest = pattern.strip_suffix('?').unwrap_or(pattern);
    let Some(rest) = rest.strip_suffix('*').or_else(|| rest.strip_suffix('+')) else {
        return false;
    };
    ends_with_unescaped(rest, ".")
}

/// A `|` outside any group and character class.
pub(crate) fn has_top_level_alternation(pattern: &str) -> bool {
    let mut depth = 0usize;
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '[' => {
                // A `^` and then a `]` right after the `[` are literal.
                if chars.peek() == Some(&'^') {
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    chars.next();
                }
                while let Some(d) = chars.next() {
                    match d {
                        '\\' => {
                            chars.next();
                        }
                        ']' => break,
                        _ => {}
                    }
                }
            }
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            '|' if depth == 0 => return true,
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_config_value_defaults_to_full_and_accepts_both_names() {
        assert_eq!(Matching::from_config_value(&Value::Nil), Ok(Matching::Full));
        assert_eq!(
            Matching::from_config_value(&Value::from("full")),
            Ok(Matching::Full)
        );
        assert_eq!(
            Matching::from_config_value(&Value::from("prefix")),
            Ok(Matching::Prefix)
        );
    }

    #[test]
    fn from_config_value_refuses_other_values() {
        for bad in [
            Value::from("Full"),
            Value::from("match"),
            Value::from(true),
            Value::from(1),
        ] {
            assert!(Matching::from_config_value(&bad).is_err(), "{bad:?}");
        }
        let err = Matching::from_config_value(&Value::from("exact")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "acl_regex_match must be 'full' or 'prefix', not 'exact'"
        );
    }

    #[test]
    fn full_mode_refuses_suffixes_prefix_mode_admits_them() {
        let full = Pattern::compile(".*example.com", Matching::Full);
        let prefix = Pattern::compile(".*example.com", Matching::Prefix);
        assert_eq!(full.is_match("web.example.com"), Ok(true));
        assert_eq!(full.is_match("web.example.com.evil.org"), Ok(false));
        assert_eq!(prefix.is_match("web.example.com.evil.org"), Ok(true));
    }

    #[test]
    fn invalid_pattern_is_kept_and_never_matches() {
        let p = Pattern::compile("test.(", Matching::Prefix);
        assert!(p.error().is_some());
        assert_eq!(p.is_match("test.("), Err(RegexTrouble::Invalid));
    }

    #[test]
    fn prefix_differs_flags_unanchored_patterns() {
        for p in [
            ".*example.com",
            "cmd.run",
            "test",
            "",
            "a$|b",
            "(a$)",
            "a\\$",
            "a\\.*",
            "a.\\*",
            "a.*\\?",
            "[.*]",
            "(?s)a.*",
            "(?x)a$ ",
            "a.{1,}",
            "a\\\\Z",
        ] {
            assert!(prefix_differs(p), "{p:?} should be flagged");
        }
    }

    #[test]
    fn prefix_differs_accepts_end_anchored_and_open_tails() {
        for p in [
            "cmd.run$", "web1\\Z", ".*", "test.*", "test.+", "test.*?", "(a|b)$", "[|]x$",
            "a\\\\.*", "a\\\\$", "$",
        ] {
            assert!(!prefix_differs(p), "{p:?} should not be flagged");
        }
    }

    #[test]
    fn mode_note_wording_names_the_mode_and_the_fix() {
        let note = ModeNote {
            location: "peer".into(),
            pattern: ".*example.com".into(),
            kind: PatternKind::MinionId,
            matching: Matching::Full,
        };
        assert_eq!(
            note.to_string(),
            "peer: '.*example.com' matches ids by full match; Salt matches any id starting \
             with it (set acl_regex_match: prefix for Salt's behaviour)"
        );
        let note = ModeNote {
            matching: Matching::Prefix,
            kind: PatternKind::Function,
            pattern: "cmd.run".into(),
            ..note
        };
        assert!(note.to_string().contains("end it with '$'"));
    }
}
