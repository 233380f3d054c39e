//! `external_auth`: the ACL of an identity an eauth backend authenticated (Salt's
//! `CkMinions.fill_auth_list`, with its argument swap fixed).

use rmpv::Value;

use crate::acl::{Acl, ParseWarning};
use crate::expr::{ExprForm, ExprMatch, ExprPattern};
use crate::pattern::{Matching, ModeNote, PatternKind};
use crate::user::keyed_lists;

/// The ACLs of one `external_auth` backend: `{user_pattern | group% | '*' | ^option: [acl
/// entries]}`.
///
/// An identity (a user name and the groups its backend reported) gets, in configuration
/// order, the entries of
/// - every **user key** that matches the name the way a `publisher_acl` key does
///   ([`crate::UserAcl`]): as a glob first, then as a regex anchored at both ends (whole
///   names under [`Matching::Full`], Salt's ungrouped `\A<key>\Z` under
///   [`Matching::Prefix`]);
/// - every **group key** (`admins%`: the key without its trailing `%`s) naming one of the
///   identity's groups, compared literally;
/// - the **catch-all** `'*'`: only when no user key matched (group matches do not count),
///   appended last; with `permissive_acl` ([`EauthAcl::permissive`]) always, at its place in
///   the configuration.
///
/// `^`-prefixed keys are the backend's options and are skipped.
///
/// Deviations from Salt 3008.3, whose `fill_auth_list` calls `expr_match(key, name)` with
/// the arguments swapped (the user name is the pattern, the key the text):
/// - user keys that are globs or regexes (`fr*`, `steve|admin.*`) match the names they
///   describe; under Salt only keys equal to the name match (and a user named `*` matches
///   every key);
/// - with `permissive_acl: True` the catch-all applies to everyone, combined with the named
///   entries, as Salt documents; under Salt it never applies then;
/// - a key whose value is not a list grants nothing (Salt extends the list with a string's
///   characters or a map's keys), and a key that is not a string is ignored (Salt raises on
///   every request); both are reported.
#[derive(Debug, Default)]
pub struct EauthAcl {
    keys: Vec<EauthKey>,
    matching: Matching,
    permissive: bool,
}

#[derive(Debug)]
struct EauthKey {
    kind: KeyKind,
    location: String,
    acl: Acl,
    /// The configured entries (empty when the value is not a list).
    raw: Vec<Value>,
}

#[derive(Debug)]
enum KeyKind {
    User(ExprPattern),
    Group(String),
    CatchAll,
}

impl EauthAcl {
    /// Parses one backend's map (`external_auth: {pam: <this>}`); `label` names it in
    /// warnings and notes, e.g. `external_auth['pam']`. `Nil` is a backend without users.
    /// Never fails: what cannot be used is reported and grants nothing (a value that is not
    /// a map grants nothing at all).
    pub fn parse(value: &Value, matching: Matching, label: &str) -> (EauthAcl, Vec<ParseWarning>) {
        let mut warnings = Vec::new();
        let form = ExprForm::of(matching);
        // `^` keys are the backend's options.
        let options = |name: &str| name.starts_with('^');
        let keys = keyed_lists(value, matching, label, options, &mut warnings)
            .into_iter()
            .map(|k| EauthKey {
                kind: if k.name == "*" {
                    KeyKind::CatchAll
                } else if k.name.ends_with('%') {
                    KeyKind::Group(k.name.trim_end_matches('%').to_owned())
                } else {
                    KeyKind::User(ExprPattern::compile(k.name, form))
                },
                location: k.location,
                acl: k.acl,
                raw: k.raw.to_vec(),
            })
            .collect();
        let acl = EauthAcl {
            keys,
            matching,
            permissive: false,
        };
        (acl, warnings)
    }

    /// Sets the master option `permissive_acl`: the catch-all `'*'` then applies to every
    /// identity, besides its named entries.
    #[must_use]
    pub fn permissive(mut self, permissive_acl: bool) -> EauthAcl {
        self.permissive = permissive_acl;
        self
    }

    /// The ACL of the identity `name` in `groups`: the entries of every key that applies
    /// (see [`EauthAcl`]), in that order. Empty when none does: every request is then an
    /// authorisation error, as in Salt. Entry indices in decisions refer to this list; each
    /// entry remembers its key.
    pub fn for_identity<S: AsRef<str>>(&self, name: &str, groups: &[S]) -> Acl {
        let mut acl = Acl::empty(self.matching);
        for key in self.applicable(name, groups) {
            acl.entries.extend(key.acl.entries.iter().cloned());
        }
        acl
    }

    /// The configured entries [`EauthAcl::for_identity`] is made of, as one list value: what
    /// `keep_acl_in_token` stores in a token, to be read back with [`Acl::parse`].
    pub fn entries_for<S: AsRef<str>>(&self, name: &str, groups: &[S]) -> Value {
        let entries = self
            .applicable(name, groups)
            .into_iter()
            .flat_map(|key| key.raw.iter().cloned())
            .collect();
        Value::Array(entries)
    }

    /// Whether some user or group key (not the catch-all) applies to the identity.
    pub fn names_identity<S: AsRef<str>>(&self, name: &str, groups: &[S]) -> bool {
        self.keys.iter().any(|key| match &key.kind {
            KeyKind::User(pattern) => user_matches(pattern, name),
            KeyKind::Group(group) => in_groups(group, groups),
            KeyKind::CatchAll => false,
        })
    }

    /// Every user key whose meaning differs between [`Matching::Full`] and
    /// [`Matching::Prefix`], and the function, argument and keyword regexes of every entry
    /// whose meaning does, for the master to log at startup.
    pub fn differing_patterns(&self) -> Vec<ModeNote> {
        let mut out = Vec::new();
        for key in &self.keys {
            if let KeyKind::User(pattern) = &key.kind {
                if pattern.differs() {
                    out.push(ModeNote {
                        location: key.location.clone(),
                        pattern: pattern.source().to_owned(),
                        kind: PatternKind::UserName,
                        matching: self.matching,
                    });
                }
            }
            out.extend(key.acl.differing_patterns());
        }
        out
    }

    /// The keys that apply to the identity, in the order their entries are granted.
    fn applicable<S: AsRef<str>>(&self, name: &str, groups: &[S]) -> Vec<&EauthKey> {
        let mut named = false;
        let mut catch_all = None;
        let mut out = Vec::new();
        for key in &self.keys {
            match &key.kind {
                KeyKind::User(pattern) => {
                    if user_matches(pattern, name) {
                        named = true;
                        out.push(key);
                    }
                }
                KeyKind::Group(group) => {
                    if in_groups(group, groups) {
                        out.push(key);
                    }
                }
                KeyKind::CatchAll if self.permissive => out.push(key),
                KeyKind::CatchAll => catch_all = Some(key),
            }
        }
        if !named {
            out.extend(catch_all);
        }
        out
    }
}

/// Whether a user key matches `name`; a regex over the backtracking limit does not.
fn user_matches(pattern: &ExprPattern, name: &str) -> bool {
    matches!(
        pattern.matches(name),
        Some(ExprMatch::Glob | ExprMatch::Regex)
    )
}

fn in_groups<S: AsRef<str>>(group: &str, groups: &[S]) -> bool {
    groups.iter().any(|g| g.as_ref() == group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{Decision, Request};
    use crate::testutil::{json, note_texts, FakeTargets};

    const LABEL: &str = "external_auth['pam']";

    fn parse(text: &str, m: Matching) -> EauthAcl {
        let (acl, warnings) = EauthAcl::parse(&json(text), m, LABEL);
        assert!(warnings.is_empty(), "{warnings:?}");
        acl
    }

    fn texts(acl: &Acl) -> Vec<&str> {
        (0..acl.len()).filter_map(|n| acl.entry_text(n)).collect()
    }

    fn check(acl: &Acl, fun: &str, tgt: &str) -> Decision {
        let (fun, arg, tgt) = (Value::from(fun), json("[]"), Value::from(tgt));
        acl.check(
            &Request::new(&fun, &arg, &tgt, "glob"),
            &FakeTargets::standard(),
            &["saltutil.find_job"],
        )
    }

    const NONE: &[&str] = &[];

    #[test]
    fn glob_and_regex_user_keys_match_the_names_they_describe() {
        // Salt's swapped expr_match would give `fred` nothing from `fr*` or `fr.*`.
        let acl = parse(
            r#"{"fr*": ["test.*"], "steve|admin.*": ["cmd.*"], "fr.*": ["grains.*"]}"#,
            Matching::Full,
        );
        assert_eq!(
            texts(&acl.for_identity("fred", NONE)),
            ["'test.*'", "'grains.*'"]
        );
        assert_eq!(texts(&acl.for_identity("steve", NONE)), ["'cmd.*'"]);
        assert_eq!(texts(&acl.for_identity("admin_bob", NONE)), ["'cmd.*'"]);
        assert_eq!(texts(&acl.for_identity("administrator", NONE)), ["'cmd.*'"]);
        assert!(acl.for_identity("bob", NONE).is_empty());
        assert!(check(&acl.for_identity("fred", NONE), "test.ping", "web1").allowed);
    }

    #[test]
    fn user_regex_keys_are_anchored_and_grouped_in_full_mode_only() {
        let full = parse(
            r#"{"admin|ops": ["test.*"], "dev[0-9]+": [".*"]}"#,
            Matching::Full,
        );
        let prefix = parse(
            r#"{"admin|ops": ["test.*"], "dev[0-9]+": [".*"]}"#,
            Matching::Prefix,
        );
        assert!(full.for_identity("administrator", NONE).is_empty());
        assert_eq!(prefix.for_identity("administrator", NONE).len(), 1);
        for acl in [&full, &prefix] {
            assert_eq!(acl.for_identity("dev12", NONE).len(), 1);
            assert!(acl.for_identity("dev12x", NONE).is_empty());
            assert!(acl.for_identity("xdev1", NONE).is_empty());
        }
        assert_eq!(
            note_texts(&full.differing_patterns()),
            ["external_auth['pam']['admin|ops']=admin|ops"]
        );
    }

    #[test]
    fn a_user_named_star_is_not_everyone() {
        // Under Salt's swap the name is the glob, so a user called `*` matched every key.
        let acl = parse(r#"{"fred": ["cmd.*"], "bob": ["test.*"]}"#, Matching::Full);
        assert!(acl.for_identity("*", NONE).is_empty());
        assert!(acl.for_identity(".*", NONE).is_empty());
    }

    #[test]
    fn group_keys_match_the_identitys_groups_literally() {
        let acl = parse(
            r#"{"admins%": ["cmd.*"], "web%%": ["test.*"], "adm*%": ["pkg.*"]}"#,
            Matching::Full,
        );
        assert_eq!(
            texts(&acl.for_identity("fred", &["admins", "users"])),
            ["'cmd.*'"]
        );
        assert_eq!(texts(&acl.for_identity("fred", &["web"])), ["'test.*'"]);
        assert!(acl.for_identity("fred", &["administrators"]).is_empty());
        assert_eq!(texts(&acl.for_identity("fred", &["adm*"])), ["'pkg.*'"]);
        assert!(
            acl.for_identity("admins", NONE).is_empty(),
            "a group is no user"
        );
        assert!(acl.names_identity("fred", &["admins"]));
        assert!(!acl.names_identity("fred", &["users"]));
    }

    #[test]
    fn catch_all_applies_only_without_a_named_match_by_default() {
        let acl = parse(
            r#"{"*": ["test.ping"], "fred": ["cmd.*"], "ops%": ["pkg.*"]}"#,
            Matching::Full,
        );
        assert_eq!(texts(&acl.for_identity("fred", NONE)), ["'cmd.*'"]);
        assert_eq!(texts(&acl.for_identity("bob", NONE)), ["'test.ping'"]);
        // A group match does not count as named: the catch-all still comes, last.
        assert_eq!(
            texts(&acl.for_identity("bob", &["ops"])),
            ["'pkg.*'", "'test.ping'"]
        );
        assert!(
            !acl.names_identity("bob", NONE),
            "the catch-all names nobody"
        );
    }

    #[test]
    fn permissive_acl_adds_the_catch_all_to_everyone_in_config_order() {
        let acl = parse(
            r#"{"fred": ["cmd.*"], "*": ["test.ping"], "ops%": ["pkg.*"]}"#,
            Matching::Full,
        )
        .permissive(true);
        assert_eq!(
            texts(&acl.for_identity("fred", NONE)),
            ["'cmd.*'", "'test.ping'"]
        );
        assert_eq!(
            texts(&acl.for_identity("fred", &["ops"])),
            ["'cmd.*'", "'test.ping'", "'pkg.*'"]
        );
        assert_eq!(texts(&acl.for_identity("bob", NONE)), ["'test.ping'"]);
    }

    #[test]
    fn option_keys_are_skipped() {
        let acl = parse(
            r#"{"^filename": "/etc/users", "^filetype": "text", "fred": ["test.*"]}"#,
            Matching::Full,
        );
        assert!(acl.for_identity("^filename", NONE).is_empty());
        assert_eq!(acl.for_identity("fred", NONE).len(), 1);
    }

    #[test]
    fn entries_for_gives_the_configured_values_for_a_token() {
        let acl = parse(
            r#"{"fred": ["test.*", {"web*": ["pkg.*"]}], "ops%": ["@runner"], "*": ["x.y"]}"#,
            Matching::Full,
        );
        let raw = acl.entries_for("fred", &["ops"]);
        assert_eq!(raw, json(r#"["test.*", {"web*": ["pkg.*"]}, "@runner"]"#));
        let (reparsed, warnings) = Acl::parse(&raw, Matching::Full, "token");
        assert!(warnings.is_empty());
        assert!(check(&reparsed, "pkg.install", "web1").allowed);
        assert!(!check(&reparsed, "pkg.install", "db1").allowed);
        assert_eq!(acl.entries_for("bob", NONE), json(r#"["x.y"]"#));
    }

    #[test]
    fn decisions_name_the_key_an_entry_came_from() {
        let acl = parse(r#"{"ops%": ["test.*"]}"#, Matching::Full);
        let d = check(&acl.for_identity("fred", &["ops"]), "test.ping", "*");
        assert_eq!(
            d.to_string(),
            "allowed: 'test.ping' by entry 0 'test.*' (under 'ops%')"
        );
    }

    #[test]
    fn malformed_configuration_is_reported_and_grants_nothing() {
        let (acl, warnings) = EauthAcl::parse(&Value::from(3), Matching::Full, LABEL);
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].location, LABEL);
        assert!(acl.for_identity("fred", NONE).is_empty());

        let v = Value::Map(vec![
            (Value::from(7), json(r#"[".*"]"#)),
            (Value::from("fred"), Value::from(".*")),
            (Value::from("*"), json(r#"{"a": 1}"#)),
            (Value::from("eve"), json(r#"["test.*"]"#)),
        ]);
        let (acl, warnings) = EauthAcl::parse(&v, Matching::Full, LABEL);
        let locations: Vec<&str> = warnings.iter().map(|w| w.location.as_str()).collect();
        assert_eq!(
            locations,
            [
                "external_auth['pam'][7]",
                "external_auth['pam']['fred']",
                "external_auth['pam']['*']"
            ]
        );
        // `fred` is named (so no catch-all) but granted nothing.
        assert!(acl.for_identity("fred", NONE).is_empty());
        assert_eq!(acl.entries_for("fred", NONE), json("[]"));
        assert_eq!(acl.for_identity("eve", NONE).len(), 1);

        let (acl, warnings) = EauthAcl::parse(&Value::Nil, Matching::Full, LABEL);
        assert!(warnings.is_empty() && acl.for_identity("fred", NONE).is_empty());
    }
}
