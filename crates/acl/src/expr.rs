//! Salt's `salt.utils.stringutils.expr_match(text, key)`: `fnmatch` first, then the regex
//! `\A<key>\Z`. It matches `publisher_acl` user keys and `publisher_acl_blacklist`
//! patterns.

use std::fmt;

use halite_target::fnmatch;
use halite_target::pyre::{Anchor, PyRegex};

use crate::pattern::{has_top_level_alternation, Matching, Pattern, RegexTrouble};

/// Which regex a key is compiled to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExprForm {
    /// `\A(?:key)\Z`, and only when `key` is a valid regex on its own, so that it cannot
    /// close the group itself: whole names only.
    Grouped,
    /// Salt's `\A<key>\Z`. The key is not grouped, so in `admin|manager_.*` only the last
    /// branch is end-anchored: `\Aadmin` admits `administrator`.
    Salt,
}

impl ExprForm {
    /// The form of user keys under `matching`.
    pub(crate) fn of(matching: Matching) -> ExprForm {
        match matching {
            Matching::Full => ExprForm::Grouped,
            Matching::Prefix => ExprForm::Salt,
        }
    }
}

/// How a [`crate::Blacklist`] pattern matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExprMatch {
    /// As a glob (`fnmatch`), which Salt tries first.
    Glob,
    /// As a regex.
    Regex,
    /// The regex hit the backtracking limit. For a blacklist this counts as a match (it
    /// fails closed).
    RegexFailed,
}

impl fmt::Display for ExprMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Glob => "glob",
            Self::Regex => "regex",
            Self::RegexFailed => "regex over the backtracking limit",
        })
    }
}

/// A key matched the way `expr_match` does, compiled once.
#[derive(Debug)]
pub(crate) struct ExprPattern {
    glob: fnmatch::Pattern,
    regex: Pattern,
    differs: bool,
}

impl ExprPattern {
    /// Compiles `key` as a glob and as a regex of `form`. A regex that does not compile is
    /// no regex: only the glob applies, as in Salt (which ignores `re.error` here; `*` is
    /// a glob and no regex).
    pub(crate) fn compile(key: &str, form: ExprForm) -> Self {
        let salt = PyRegex::new(&format!(r"\A{key}\Z"), Anchor::Match);
        let grouped = PyRegex::new(key, Anchor::Match)
            .and_then(|_| PyRegex::new(&format!(r"\A(?:{key})\Z"), Anchor::Match));
        // Grouped ⊆ Salt's form whenever the key is valid on its own; they differ when the
        // key has a top-level `|`, or when only Salt's form compiles (`fred\` becomes
        // `\Afred\\Z`, a literal backslash and `Z`).
        let differs = salt.is_ok() && (grouped.is_err() || has_top_level_alternation(key));
        let regex = match form {
            ExprForm::Grouped => grouped,
            ExprForm::Salt => salt,
        };
        Self {
            glob: fnmatch::Pattern::new(key),
            regex: Pattern::precompiled(key, regex),
            differs,
        }
    }

    /// The configured key.
    pub(crate) fn source(&self) -> &str {
        self.regex.source()
    }

    /// Whether [`ExprForm::Grouped`] and [`ExprForm::Salt`] can disagree on this key.
    pub(crate) fn differs(&self) -> bool {
        self.differs
    }

    /// How `text` matches, or `None`. The glob is tried first and, as in Salt, the regex
    /// only when the glob does not match.
    pub(crate) fn matches(&self, text: &str) -> Option<ExprMatch> {
        if self.glob.matches(text) {
            return Some(ExprMatch::Glob);
        }
        match self.regex.is_match(text) {
            Ok(true) => Some(ExprMatch::Regex),
            Ok(false) | Err(RegexTrouble::Invalid) => None,
            Err(RegexTrouble::Failed) => Some(ExprMatch::RegexFailed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(key: &str, form: ExprForm, text: &str) -> Option<ExprMatch> {
        ExprPattern::compile(key, form).matches(text)
    }

    #[test]
    fn glob_is_tried_before_the_regex() {
        assert_eq!(
            m("user_*", ExprForm::Grouped, "user_fred"),
            Some(ExprMatch::Glob)
        );
        assert_eq!(m("fred", ExprForm::Salt, "fred"), Some(ExprMatch::Glob));
        assert_eq!(m("fr.*", ExprForm::Grouped, "fred"), Some(ExprMatch::Regex));
    }

    #[test]
    fn key_that_is_no_regex_is_a_glob_only() {
        for form in [ExprForm::Grouped, ExprForm::Salt] {
            assert_eq!(m("*", form, "anyone"), Some(ExprMatch::Glob));
            assert_eq!(m("?", form, "ab"), None);
        }
    }

    #[test]
    fn salt_form_does_not_group_the_alternation() {
        let key = "admin|manager_.*";
        assert_eq!(
            m(key, ExprForm::Salt, "administrator"),
            Some(ExprMatch::Regex)
        );
        assert_eq!(m(key, ExprForm::Grouped, "administrator"), None);
        for form in [ExprForm::Grouped, ExprForm::Salt] {
            assert_eq!(m(key, form, "admin"), Some(ExprMatch::Regex));
            assert_eq!(m(key, form, "manager_bob"), Some(ExprMatch::Regex));
            assert_eq!(m(key, form, "xmanager_bob"), None);
        }
        assert!(ExprPattern::compile(key, ExprForm::Grouped).differs());
        assert!(!ExprPattern::compile("(admin|manager_.*)", ExprForm::Salt).differs());
        assert!(!ExprPattern::compile("fr.*", ExprForm::Salt).differs());
    }

    #[test]
    fn key_that_would_close_the_group_itself_is_no_regex() {
        // `\A(?:a)|(?:b)\Z` compiles, but the key is not a regex on its own, and Salt's
        // `\Aa)|(?:b\Z` is invalid: glob only in both forms.
        let key = "a)|(?:b";
        for form in [ExprForm::Grouped, ExprForm::Salt] {
            assert_eq!(m(key, form, "abc"), None);
            assert_eq!(m(key, form, "a)|(?:b"), Some(ExprMatch::Glob));
        }
        assert!(!ExprPattern::compile(key, ExprForm::Grouped).differs());
    }

    #[test]
    fn global_flags_inside_the_anchors_are_invalid_in_both_forms() {
        // Python 3.11: "global flags not at the start of the expression".
        for form in [ExprForm::Grouped, ExprForm::Salt] {
            assert_eq!(m("(?i)admin", form, "ADMIN"), None);
        }
        assert!(!ExprPattern::compile("(?i)admin", ExprForm::Salt).differs());
    }

    #[test]
    fn trailing_backslash_only_compiles_in_salt_form() {
        assert_eq!(
            m("fred\\", ExprForm::Salt, "fred\\Z"),
            Some(ExprMatch::Regex)
        );
        assert_eq!(m("fred\\", ExprForm::Grouped, "fred\\Z"), None);
        assert!(ExprPattern::compile("fred\\", ExprForm::Grouped).differs());
    }

    #[test]
    fn backtracking_limit_is_reported_not_a_plain_miss() {
        let text = "a".repeat(64);
        assert_eq!(
            m("(a|aa)+\\1c", ExprForm::Grouped, &text),
            Some(ExprMatch::RegexFailed)
        );
    }
}
