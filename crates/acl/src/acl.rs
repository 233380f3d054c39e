//! Parsing an ACL list (the value of a `peer` key, a `publisher_acl` user, an
//! `external_auth` user) into typed, pre-compiled entries.

use std::fmt;
use std::sync::Arc;

use halite_target::pyvalue;
use rmpv::Value;

use crate::pattern::{note_if_differs, Matching, ModeNote, Pattern, PatternKind};

/// Longest printable form kept for an entry (in characters).
const MAX_ENTRY_TEXT: usize = 160;

/// Something in the configuration that Halite ignores or never matches. The master logs
/// these at startup; Salt logs some of them ("Invalid regular expression: %s") on every
/// check and silently skips the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseWarning {
    /// Where, e.g. `peer['.*'][2]['web*'][0]`.
    pub location: String,
    /// What is wrong and what Halite does about it.
    pub message: String,
}

impl fmt::Display for ParseWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// One entry of an ACL list.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) kind: EntryKind,
    /// Python `repr` of the configured entry, shortened.
    pub(crate) text: Arc<str>,
    /// The `peer` or `publisher_acl` key the entry came from, if any.
    pub(crate) origin: Option<Arc<str>>,
    /// Where it is in the configuration, e.g. `peer['.*'][0]`.
    pub(crate) location: String,
}

#[derive(Debug)]
pub(crate) enum EntryKind {
    /// A string entry: a function regex allowed on any target.
    Function(Pattern),
    /// A string entry starting with `@` (`@runner`, `@wheel`, `@jobs`): runner/wheel access
    /// only, never an execution function.
    Spec(String),
    /// A one-key map `{target: conditions}`.
    Target {
        /// The target, evaluated as a compound expression (`*` and `@…` are special).
        target: String,
        /// `target` as a value, to hand to [`crate::Targets::expand`] without allocating.
        target_value: Value,
        conditions: Vec<Condition>,
    },
    /// Anything else: never matches.
    Malformed,
}

/// One function condition of a target entry.
#[derive(Debug)]
pub(crate) enum Condition {
    /// A function regex.
    Function(Pattern),
    /// `{fun_regex: arg_spec | [arg_spec, ...]}`: any one spec that passes is enough.
    Args { fun: Pattern, specs: Vec<ArgSpec> },
    /// Never matches.
    Malformed,
}

impl Condition {
    pub(crate) fn fun(&self) -> Option<&Pattern> {
        match self {
            Self::Function(p) | Self::Args { fun: p, .. } => Some(p),
            Self::Malformed => None,
        }
    }
}

/// `{args: [...], kwargs: {...}}`.
#[derive(Debug)]
pub(crate) enum ArgSpec {
    Valid {
        /// Positional rules; `None` means "present, any value".
        args: Vec<Option<Pattern>>,
        /// Keyword rules; `None` means "present, any value".
        kwargs: Vec<(String, Option<Pattern>)>,
    },
    /// Never passes.
    Malformed,
}

/// A parsed ACL list, ready for [`Acl::check`](crate::Acl::check).
///
/// Cheap to clone (entries are shared), and [`crate::PeerAcl::for_minion`] builds one by
/// concatenating shared entries.
#[derive(Debug, Clone, Default)]
pub struct Acl {
    pub(crate) entries: Vec<Arc<Entry>>,
    pub(crate) matching: Matching,
}

impl Acl {
    /// Parses an ACL list as read from the configuration: string entries (function
    /// regexes) and one-key maps `{target: [conditions]}`. `label` names the list in
    /// warnings and notes (e.g. `publisher_acl['fred']`).
    ///
    /// Never fails: whatever cannot be used is kept as an entry that never matches (or
    /// dropped, for a value that is not a list) and reported in the warnings.
    pub fn parse(value: &Value, matching: Matching, label: &str) -> (Acl, Vec<ParseWarning>) {
        let mut warnings = Vec::new();
        let mut acl = Acl::empty(matching);
        match value {
            Value::Array(items) => acl.extend_from(items, label, None, &mut warnings),
            other => warnings.push(ParseWarning {
                location: label.to_owned(),
                message: format!(
                    "not a list ({}); it grants nothing",
                    shorten(&repr_of(other))
                ),
            }),
        }
        (acl, warnings)
    }

    /// An ACL without entries, matching patterns by `matching`.
    pub(crate) fn empty(matching: Matching) -> Acl {
        Acl {
            matching,
            ..Acl::default()
        }
    }

    /// Appends the entries of the list `items` (`label`).
    pub(crate) fn extend_from(
        &mut self,
        items: &[Value],
        label: &str,
        origin: Option<&Arc<str>>,
        warnings: &mut Vec<ParseWarning>,
    ) {
        for (n, item) in items.iter().enumerate() {
            let location = format!("{label}[{n}]");
            let kind = parse_entry(item, &location, self.matching, warnings);
            self.entries.push(Arc::new(Entry {
                kind,
                text: Arc::from(shorten(&repr_of(item))),
                origin: origin.cloned(),
                location,
            }));
        }
    }

    /// Number of entries (including those that never match).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries (nothing is allowed).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The printable form of entry `index` (Python `repr` of the configured value).
    pub fn entry_text(&self, index: usize) -> Option<&str> {
        self.entries.get(index).map(|e| &*e.text)
    }

    /// The mode this ACL was parsed with.
    pub fn matching(&self) -> Matching {
        self.matching
    }

    /// Every valid pattern of this ACL (function, argument and keyword regexes) whose
    /// meaning differs between [`Matching::Full`] and [`Matching::Prefix`].
    pub fn differing_patterns(&self) -> Vec<ModeNote> {
        let mut out = Vec::new();
        for entry in &self.entries {
            entry_notes(&mut out, entry, self.matching);
        }
        out
    }
}

fn entry_notes(out: &mut Vec<ModeNote>, entry: &Entry, m: Matching) {
    let location = entry.location.as_str();
    match &entry.kind {
        EntryKind::Function(p) => note_if_differs(out, p, location, PatternKind::Function, m),
        EntryKind::Target {
            target, conditions, ..
        } => {
            for (n, cond) in conditions.iter().enumerate() {
                let here = format!("{location}['{target}'][{n}]");
                if let Some(p) = cond.fun() {
                    note_if_differs(out, p, &here, PatternKind::Function, m);
                }
                let Condition::Args { fun, specs } = cond else {
                    continue;
                };
                for (s, spec) in specs.iter().enumerate() {
                    let ArgSpec::Valid { args, kwargs } = spec else {
                        continue;
                    };
                    let base = format!("{here}['{}'][{s}]", fun.source());
                    for (i, rule) in args.iter().enumerate() {
                        if let Some(p) = rule {
                            let at = format!("{base}['args'][{i}]");
                            note_if_differs(out, p, &at, PatternKind::Argument, m);
                        }
                    }
                    for (k, rule) in kwargs {
                        if let Some(p) = rule {
                            let at = format!("{base}['kwargs']['{k}']");
                            note_if_differs(out, p, &at, PatternKind::Kwarg, m);
                        }
                    }
                }
            }
        }
        EntryKind::Spec(_) | EntryKind::Malformed => {}
    }
}

/// Python `repr` of a configured value.
pub(crate) fn repr_of(value: &Value) -> String {
    let mut out = String::new();
    pyvalue::repr(value, &mut out);
    out
}

/// `text` cut to [`MAX_ENTRY_TEXT`] characters.
pub(crate) fn shorten(text: &str) -> String {
    match text.char_indices().nth(MAX_ENTRY_TEXT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// Compiles a regex found at `location`, reporting it when it does not compile.
pub(crate) fn compile(
    source: &str,
    location: &str,
    matching: Matching,
    warnings: &mut Vec<ParseWarning>,
) -> Pattern {
    let pattern = Pattern::compile(source, matching);
    if let Some(err) = pattern.error() {
        warnings.push(ParseWarning {
            location: location.to_owned(),
            message: format!("Invalid regular expression: {source} ({err}); it never matches"),
        });
    }
    pattern
}

/// The single `(key, value)` of a one-key map (duplicates merged as a Python dict does).
fn single_pair(entries: &[(Value, Value)]) -> Option<(&Value, &Value)> {
    let mut pairs = pyvalue::dict_entries(entries);
    let first = pairs.next()?;
    match pairs.next() {
        Some(_) => None,
        None => Some(first),
    }
}

fn parse_entry(
    item: &Value,
    location: &str,
    m: Matching,
    warnings: &mut Vec<ParseWarning>,
) -> EntryKind {
    if let Some(s) = pyvalue::text(item) {
        if s.starts_with('@') {
            return EntryKind::Spec(s.to_owned());
        }
        return EntryKind::Function(compile(s, location, m, warnings));
    }
    let mut malformed = |message: &str| {
        warnings.push(ParseWarning {
            location: location.to_owned(),
            message: message.to_owned(),
        });
        EntryKind::Malformed
    };
    let Value::Map(entries) = item else {
        return malformed("entry is neither a function regex nor a one-key map; ignored");
    };
    let Some((key, conds)) = single_pair(entries) else {
        return malformed("a map entry must have exactly one key (the target); ignored");
    };
    let Some(target) = pyvalue::text(key) else {
        return malformed("the target of a map entry is not a string; ignored");
    };
    let here = format!("{location}['{target}']");
    // Salt wraps a single condition into a list.
    let conditions = match conds {
        Value::Array(list) => list
            .iter()
            .enumerate()
            .map(|(n, c)| parse_condition(c, &format!("{here}[{n}]"), m, warnings))
            .collect(),
        single => vec![parse_condition(single, &here, m, warnings)],
    };
    EntryKind::Target {
        target: target.to_owned(),
        target_value: Value::from(target),
        conditions,
    }
}

fn parse_condition(
    cond: &Value,
    location: &str,
    m: Matching,
    warnings: &mut Vec<ParseWarning>,
) -> Condition {
    if let Some(s) = pyvalue::text(cond) {
        return Condition::Function(compile(s, location, m, warnings));
    }
    let mut malformed = |message: &str| {
        warnings.push(ParseWarning {
            location: location.to_owned(),
            message: message.to_owned(),
        });
        Condition::Malformed
    };
    let Value::Map(entries) = cond else {
        return malformed("condition is neither a function regex nor a one-key map; ignored");
    };
    let Some((key, spec)) = single_pair(entries) else {
        return malformed("a condition map must have exactly one key (a function regex); ignored");
    };
    let Some(fun) = pyvalue::text(key) else {
        return malformed("the function regex of a condition is not a string; ignored");
    };
    let here = format!("{location}['{fun}']");
    let fun = compile(fun, location, m, warnings);
    // Salt wraps a single spec into a list; non-map items are skipped.
    let specs = match spec {
        Value::Array(list) => list
            .iter()
            .enumerate()
            .map(|(n, s)| parse_arg_spec(s, &format!("{here}[{n}]"), m, warnings))
            .collect(),
        single => vec![parse_arg_spec(single, &here, m, warnings)],
    };
    if specs.is_empty() {
        warnings.push(ParseWarning {
            location: here,
            message: "empty list of argument specs; this condition never passes".to_owned(),
        });
    }
    Condition::Args { fun, specs }
}

fn parse_arg_spec(
    spec: &Value,
    location: &str,
    m: Matching,
    warnings: &mut Vec<ParseWarning>,
) -> ArgSpec {
    let malformed = |warnings: &mut Vec<ParseWarning>, message: String| {
        warnings.push(ParseWarning {
            location: location.to_owned(),
            message,
        });
        ArgSpec::Malformed
    };
    let Value::Map(entries) = spec else {
        return malformed(
            warnings,
            "argument spec is not a map; it never passes".to_owned(),
        );
    };
    let mut args = Vec::new();
    let mut kwargs = Vec::new();
    for (key, value) in pyvalue::dict_entries(entries) {
        match pyvalue::text(key) {
            Some("args") => {
                let Value::Array(rules) = value else {
                    return malformed(
                        warnings,
                        "'args' is not a list; this spec never passes (Salt would iterate it)"
                            .to_owned(),
                    );
                };
                for (i, rule) in rules.iter().enumerate() {
                    match rule {
                        Value::Nil => args.push(None),
                        other => match pyvalue::text(other) {
                            Some(s) => args.push(Some(compile(
                                s,
                                &format!("{location}['args'][{i}]"),
                                m,
                                warnings,
                            ))),
                            None => {
                                return malformed(
                                    warnings,
                                    format!(
                                    "'args'[{i}] is neither a regex string nor null; this spec \
                                     never passes"
                                ),
                                )
                            }
                        },
                    }
                }
            }
            Some("kwargs") => {
                let Value::Map(rules) = value else {
                    return malformed(
                        warnings,
                        "'kwargs' is not a map; this spec never passes".to_owned(),
                    );
                };
                for (k, rule) in pyvalue::dict_entries(rules) {
                    let Some(name) = pyvalue::text(k) else {
                        return malformed(
                            warnings,
                            "a 'kwargs' name is not a string; this spec never passes".to_owned(),
                        );
                    };
                    match rule {
                        Value::Nil => kwargs.push((name.to_owned(), None)),
                        other => match pyvalue::text(other) {
                            Some(s) => {
                                let at = format!("{location}['kwargs']['{name}']");
                                kwargs.push((name.to_owned(), Some(compile(s, &at, m, warnings))));
                            }
                            None => {
                                return malformed(
                                    warnings,
                                    format!(
                                        "'kwargs'['{name}'] is neither a regex string nor null; \
                                     this spec never passes"
                                    ),
                                )
                            }
                        },
                    }
                }
            }
            _ => {
                return malformed(
                    warnings,
                    format!(
                        "unknown key {} in an argument spec (only 'args' and 'kwargs'); this spec \
                     never passes (Salt ignores it and allows any arguments)",
                        repr_of(key)
                    ),
                )
            }
        }
    }
    ArgSpec::Valid { args, kwargs }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{json, note_texts};

    fn parse(text: &str) -> (Acl, Vec<ParseWarning>) {
        Acl::parse(&json(text), Matching::Full, "acl")
    }

    #[test]
    fn string_and_target_entries_parse_without_warnings() {
        let (acl, warnings) = parse(
            r#"["test.*", {"web*": ["pkg.*", {"cmd.run": {"args": ["ls", null], "kwargs": {"cwd": "/tmp"}}}]}, "@runner"]"#,
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(acl.len(), 3);
        assert!(matches!(acl.entries[0].kind, EntryKind::Function(_)));
        assert!(matches!(acl.entries[2].kind, EntryKind::Spec(_)));
        let EntryKind::Target { conditions, .. } = &acl.entries[1].kind else {
            panic!("target entry expected");
        };
        assert_eq!(conditions.len(), 2);
        let Condition::Args { specs, .. } = &conditions[1] else {
            panic!("args condition expected");
        };
        let ArgSpec::Valid { args, kwargs } = &specs[0] else {
            panic!("valid spec expected");
        };
        assert_eq!(args.len(), 2);
        assert!(args[1].is_none());
        assert_eq!(kwargs[0].0, "cwd");
    }

    #[test]
    fn invalid_regex_is_kept_and_reported_with_salts_words() {
        let (acl, warnings) = parse(r#"["test.(", {"*": ["cmd.[run"]}]"#);
        assert_eq!(acl.len(), 2);
        assert_eq!(warnings.len(), 2);
        assert_eq!(warnings[0].location, "acl[0]");
        assert!(warnings[0]
            .message
            .starts_with("Invalid regular expression: test.("));
        assert_eq!(warnings[1].location, "acl[1]['*'][0]");
    }

    #[test]
    fn non_list_acl_grants_nothing_and_is_reported() {
        for text in [r#""test.ping""#, r#"{"web*": ["test.*"]}"#, "null", "3"] {
            let (acl, warnings) = parse(text);
            assert!(acl.is_empty(), "{text}");
            assert_eq!(warnings.len(), 1, "{text}");
        }
    }

    #[test]
    fn malformed_entries_are_kept_as_never_matching_and_reported() {
        let (acl, warnings) = parse(
            r#"[3, null, ["test.*"], {"a": ["x"], "b": ["y"]}, {}, {"*": [5, {"a": 1, "b": 2}]}]"#,
        );
        assert_eq!(acl.len(), 6);
        for e in &acl.entries[..5] {
            assert!(matches!(e.kind, EntryKind::Malformed), "{:?}", e.text);
        }
        let EntryKind::Target { conditions, .. } = &acl.entries[5].kind else {
            panic!("target entry expected");
        };
        assert!(conditions.iter().all(|c| matches!(c, Condition::Malformed)));
        assert_eq!(warnings.len(), 7);
    }

    #[test]
    fn single_condition_and_single_spec_are_wrapped_like_salt() {
        let (acl, warnings) = parse(r#"[{"*": {"cmd.run": {"args": ["ls"]}}}]"#);
        assert!(warnings.is_empty(), "{warnings:?}");
        let EntryKind::Target { conditions, .. } = &acl.entries[0].kind else {
            panic!("target entry expected");
        };
        assert!(matches!(&conditions[0], Condition::Args { specs, .. } if specs.len() == 1));
    }

    #[test]
    fn arg_spec_with_unknown_key_or_wrong_shapes_never_passes() {
        for spec in [
            r#"{"arg": ["ls"]}"#,
            r#"{"args": "ls"}"#,
            r#"{"args": null}"#,
            r#"{"args": [1]}"#,
            r#"{"kwargs": ["a"]}"#,
            r#"{"kwargs": {"a": 1}}"#,
            r#""ls""#,
        ] {
            let (acl, warnings) = parse(&format!(r#"[{{"*": [{{"cmd.run": {spec}}}]}}]"#));
            assert_eq!(warnings.len(), 1, "{spec}");
            let EntryKind::Target { conditions, .. } = &acl.entries[0].kind else {
                panic!("target entry expected");
            };
            let Condition::Args { specs, .. } = &conditions[0] else {
                panic!("args condition expected");
            };
            assert!(matches!(specs[0], ArgSpec::Malformed), "{spec}");
        }
    }

    #[test]
    fn entry_text_is_the_python_repr() {
        let (acl, _) = parse(r#"["test.*", {"web*": ["pkg.*"]}]"#);
        assert_eq!(acl.entry_text(0), Some("'test.*'"));
        assert_eq!(acl.entry_text(1), Some("{'web*': ['pkg.*']}"));
        assert_eq!(acl.entry_text(2), None);
    }

    #[test]
    fn long_entry_text_is_shortened() {
        let long = "x".repeat(500);
        let (acl, _) = parse(&format!(r#"["{long}"]"#));
        let text = acl.entry_text(0).unwrap_or_default();
        assert_eq!(text.chars().count(), MAX_ENTRY_TEXT + 1);
        assert!(text.ends_with('…'));
    }

    #[test]
    fn differing_patterns_lists_function_argument_and_kwarg_regexes() {
        let (acl, _) = parse(
            r#"["test.*", "cmd.run", "@runner", {"web*": ["pkg.install$", {"cmd.run": {"args": ["ls", null], "kwargs": {"cwd": "/tmp"}}}]}]"#,
        );
        let notes = note_texts(&acl.differing_patterns());
        assert_eq!(
            notes,
            [
                "acl[1]=cmd.run",
                "acl[3]['web*'][1]=cmd.run",
                "acl[3]['web*'][1]['cmd.run'][0]['args'][0]=ls",
                "acl[3]['web*'][1]['cmd.run'][0]['kwargs']['cwd']=/tmp",
            ]
        );
    }
}
