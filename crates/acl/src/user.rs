//! `publisher_acl`: ACLs keyed by a pattern on the local user's name.

use std::sync::Arc;

use halite_target::pyvalue;
use rmpv::Value;

use crate::acl::{repr_of, shorten, Acl, ParseWarning};
use crate::check::{check_lists, Decision, Reason, Request, Targets};
use crate::expr::{ExprForm, ExprMatch, ExprPattern};
use crate::pattern::{Matching, ModeNote, PatternKind};
use crate::spec::SpecForm;

/// The option this parses.
const OPTION: &str = "publisher_acl";

/// The `publisher_acl` option: `{user_pattern: [acl entries]}`.
///
/// A user's ACL is the entries of **every** key that matches the user name, concatenated
/// in configuration order (Salt's `get_values_of_matching_keys`). A key matches as Salt's
/// `expr_match(user, key)` does: as a glob (`fnmatch`) first, then as a regex anchored at
/// both ends. Salt writes that regex `\A<key>\Z` without grouping the key, so the key
/// `admin|manager_.*` admits `administrator` (its first branch is only start-anchored).
/// Under [`Matching::Full`] Halite compiles `\A(?:<key>)\Z` instead, and only when the key
/// is a valid regex on its own (so it cannot close the group itself): whole names only,
/// which fails closed. [`Matching::Prefix`] uses Salt's exact form. Keys on which the two
/// differ are listed by [`UserAcl::differing_patterns`].
///
/// A key that is no valid regex (`*`, `dev[`) is still a glob, silently, as in Salt. A
/// regex that hits the backtracking limit matches nothing (logged at WARN). This is not
/// `external_auth`, whose `fill_auth_list` swaps the arguments of `expr_match`.
#[derive(Debug, Default)]
pub struct UserAcl {
    keys: Vec<UserKey>,
    matching: Matching,
}

#[derive(Debug)]
struct UserKey {
    pattern: ExprPattern,
    location: String,
    acl: Acl,
}

impl UserAcl {
    /// Parses the `publisher_acl` option. Absent (`Nil`): no user has entries. Not a map:
    /// no user has entries, reported. A key that is not a string is ignored (Salt's
    /// `fnmatch` raises `TypeError`, which `expr_match` logs and treats as no match). A
    /// key whose value is not a list still matches its users but grants nothing (Salt
    /// extends the list with a string's characters, a map's keys, or raises); reported.
    pub fn parse(value: &Value, matching: Matching) -> (UserAcl, Vec<ParseWarning>) {
        let mut warnings = Vec::new();
        let form = ExprForm::of(matching);
        let keys = keyed_lists(value, matching, OPTION, |_| false, &mut warnings)
            .into_iter()
            .map(|k| UserKey {
                pattern: ExprPattern::compile(k.name, form),
                location: k.location,
                acl: k.acl,
            })
            .collect();
        (UserAcl { keys, matching }, warnings)
    }

    /// The configured keys, literally and in configuration order (string keys only): the
    /// names the master makes `cachedir/.<user>_key` files for when such a user exists.
    pub fn users(&self) -> Vec<&str> {
        self.keys.iter().map(|k| k.pattern.source()).collect()
    }

    /// Whether some key matches `user` (whatever its entries): Salt's test for giving an
    /// existing local user a key file (`access_keys`, `check_whitelist_blacklist`).
    pub fn matches_user(&self, user: &str) -> bool {
        self.keys.iter().any(|k| key_matches(k, user))
    }

    /// The ACL of `user`: the entries of every key that matches `user`, in configuration
    /// order (an empty [`Acl`] when none does). Entry indices in decisions refer to this
    /// merged list; each entry remembers its key.
    pub fn for_user(&self, user: &str) -> Acl {
        let mut acl = Acl::empty(self.matching);
        for key in self.keys.iter().filter(|k| key_matches(k, user)) {
            acl.entries.extend(key.acl.entries.iter().cloned());
        }
        acl
    }

    /// The `publisher_acl` check of Salt's `ClearFuncs.publish` for a user that is not
    /// root (the caller decides who is): [`UserAcl::for_user`]`(user)` checks `req` with
    /// `whitelist` (Salt passes `["saltutil.find_job"]`), without building that merged
    /// list. A user without entries gets [`Reason::NoEntriesForUser`], Salt's
    /// authentication failure, whatever the request.
    pub fn check(
        &self,
        user: &str,
        req: &Request<'_>,
        targets: &dyn Targets,
        whitelist: &[&str],
    ) -> Decision {
        let lists: Vec<&Acl> = self
            .keys
            .iter()
            .filter(|k| key_matches(k, user))
            .map(|k| &k.acl)
            .collect();
        if lists.iter().all(|acl| acl.is_empty()) {
            return no_entries(user);
        }
        check_lists(&lists, req, targets, whitelist)
    }

    /// May `user` run the runner `fun` (`module.function`) with `kwarg` (the request's
    /// `kwarg` map, whose `arg`/`kwarg` members `args`/`kwargs` rules read)? The user's
    /// `@runner`, `@runners`, `@<module>` entries decide ([`Acl::check_spec`]); plain
    /// function regexes grant no runner. A user without entries gets
    /// [`Reason::NoEntriesForUser`].
    ///
    /// Deviation: Salt checks nothing for a runner call authenticated by a user key (any
    /// user with a key runs any runner on the master); Halite applies the user's
    /// `publisher_acl` entries the way Salt applies `external_auth` entries to runners.
    pub fn check_runner(&self, user: &str, fun: &str, kwarg: &Value) -> Decision {
        let acl = self.for_user(user);
        if acl.is_empty() {
            return no_entries(user);
        }
        acl.check_spec(fun, SpecForm::Runner, kwarg)
    }

    /// Every valid pattern whose meaning differs between [`Matching::Full`] and
    /// [`Matching::Prefix`]: user keys (see [`UserAcl`]) and the function, argument and
    /// keyword regexes of their entries.
    pub fn differing_patterns(&self) -> Vec<ModeNote> {
        let mut out = Vec::new();
        for key in &self.keys {
            if key.pattern.differs() {
                out.push(ModeNote {
                    location: key.location.clone(),
                    pattern: key.pattern.source().to_owned(),
                    kind: PatternKind::UserName,
                    matching: self.matching,
                });
            }
            out.extend(key.acl.differing_patterns());
        }
        out
    }
}

/// One key of a `{pattern: [acl entries]}` option (`publisher_acl`, an `external_auth`
/// backend): its text, where it is, its parsed entries and the entries as written.
pub(crate) struct KeyedList<'v> {
    pub(crate) name: &'v str,
    pub(crate) location: String,
    pub(crate) acl: Acl,
    pub(crate) raw: &'v [Value],
}

/// The string keys of the map option `label` with their parsed lists, in configuration
/// order, except the keys `skip` names (unparsed). Absent (`Nil`): none. Not a map: none, reported. A key that is not a string is
/// ignored (Salt's `fnmatch` raises `TypeError`, which `expr_match` logs and treats as no
/// match), reported. A value that is not a list grants nothing (Salt extends the list with
/// a string's characters, a map's keys, or raises), reported.
pub(crate) fn keyed_lists<'v>(
    value: &'v Value,
    matching: Matching,
    label: &str,
    skip: fn(&str) -> bool,
    warnings: &mut Vec<ParseWarning>,
) -> Vec<KeyedList<'v>> {
    let entries: Vec<(&Value, &Value)> = match value {
        Value::Nil => Vec::new(),
        Value::Map(entries) => pyvalue::dict_entries(entries).collect(),
        other => {
            warnings.push(ParseWarning {
                location: label.to_owned(),
                message: format!(
                    "not a map ({}); nobody is allowed anything",
                    shorten(&repr_of(other))
                ),
            });
            Vec::new()
        }
    };
    let mut keys = Vec::new();
    for (key, list) in entries {
        let Some(name) = pyvalue::text(key) else {
            warnings.push(ParseWarning {
                location: format!("{label}[{}]", shorten(&repr_of(key))),
                message: "the key is not a string; ignored".to_owned(),
            });
            continue;
        };
        if skip(name) {
            continue;
        }
        let location = format!("{label}['{name}']");
        let mut acl = Acl::empty(matching);
        let raw: &[Value] = match list {
            Value::Array(items) => {
                let origin: Arc<str> = Arc::from(name);
                acl.extend_from(items, &location, Some(&origin), warnings);
                items
            }
            other => {
                warnings.push(ParseWarning {
                    location: location.clone(),
                    message: format!(
                        "the value is not a list ({}); it grants nothing",
                        shorten(&repr_of(other))
                    ),
                });
                &[]
            }
        };
        keys.push(KeyedList {
            name,
            location,
            acl,
            raw,
        });
    }
    keys
}

/// Whether `key` matches `user`; a regex over the backtracking limit does not.
fn key_matches(key: &UserKey, user: &str) -> bool {
    matches!(
        key.pattern.matches(user),
        Some(ExprMatch::Glob | ExprMatch::Regex)
    )
}

fn no_entries(user: &str) -> Decision {
    Decision {
        allowed: false,
        reason: Reason::NoEntriesForUser {
            user: shorten(user),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{json, note_texts, FakeTargets};
    use crate::MissKind;

    /// The example of salt-semantics.md §2.3.
    const DOC: &str = r#"{
        "thatch": [".*"],
        "fred": [{"web*": ["test.*", "pkg.*"]}, {"G@os:RedHat": ["kmod.*"]}],
        "admin|manager_.*": ["saltutil.*"],
        "user_.*": [{"web*": [{"my_mod.*": {"args": ["a.*", "b.*"], "kwargs": {"kwa": "kwa.*", "kwb": "kwb"}}}]}]
    }"#;

    fn users(text: &str, m: Matching) -> UserAcl {
        let (acl, warnings) = UserAcl::parse(&json(text), m);
        assert!(warnings.is_empty(), "{warnings:?}");
        acl
    }

    fn check(acl: &UserAcl, user: &str, fun: &str, tgt: &str) -> Decision {
        let (fun, arg, tgt) = (Value::from(fun), json("[]"), Value::from(tgt));
        acl.check(
            user,
            &Request::new(&fun, &arg, &tgt, "glob"),
            &FakeTargets::standard(),
            &["saltutil.find_job"],
        )
    }

    #[test]
    fn user_gets_the_entries_of_its_key_only() {
        let acl = users(DOC, Matching::Full);
        assert!(check(&acl, "fred", "test.ping", "web1").allowed);
        assert!(!check(&acl, "fred", "test.ping", "db1").allowed);
        assert!(check(&acl, "thatch", "cmd.run", "*").allowed);
        assert!(!check(&acl, "fred", "cmd.run", "web1").allowed);
        let d = check(&acl, "fred", "test.ping", "web1");
        assert_eq!(
            d.to_string(),
            "allowed: 'test.ping' by entry 0 {'web*': ['test.*', 'pkg.*']} (under 'fred')"
        );
    }

    #[test]
    fn every_matching_key_contributes_in_config_order() {
        let acl = users(
            r#"{"fr*": ["test.*"], "bob": ["cmd.*"], "f.*": ["grains.items"]}"#,
            Matching::Full,
        );
        let merged = acl.for_user("fred");
        assert_eq!(merged.len(), 2);
        assert_eq!(merged.entry_text(0), Some("'test.*'"));
        assert_eq!(merged.entry_text(1), Some("'grains.items'"));
        assert_eq!(
            check(&acl, "fred", "grains.items", "*").to_string(),
            "allowed: 'grains.items' by entry 1 'grains.items' (under 'f.*')"
        );
    }

    #[test]
    fn user_keys_match_by_glob_then_by_anchored_regex() {
        let acl = users(
            r#"{"user_*": ["test.*"], "dev[0-9]+": ["test.*"]}"#,
            Matching::Full,
        );
        assert!(acl.matches_user("user_x"));
        assert!(acl.matches_user("dev12"));
        assert!(
            !acl.matches_user("dev12x"),
            "the regex is anchored at both ends"
        );
        assert!(!acl.matches_user("xdev1"));
        let prefix = users(r#"{"dev[0-9]+": ["test.*"]}"#, Matching::Prefix);
        assert!(!prefix.matches_user("dev12x"), "Salt anchors user keys too");
    }

    #[test]
    fn ungrouped_alternation_admits_administrator_in_prefix_mode_only() {
        let full = users(DOC, Matching::Full);
        let prefix = users(DOC, Matching::Prefix);
        for acl in [&full, &prefix] {
            assert!(check(acl, "admin", "saltutil.sync_all", "*").allowed);
            assert!(check(acl, "manager_bob", "saltutil.sync_all", "*").allowed);
        }
        assert!(check(&prefix, "administrator", "saltutil.sync_all", "*").allowed);
        let d = check(&full, "administrator", "saltutil.sync_all", "*");
        assert_eq!(
            d.reason,
            Reason::NoEntriesForUser {
                user: "administrator".into()
            }
        );
    }

    #[test]
    fn user_without_entries_is_an_authentication_failure_even_for_find_job() {
        let acl = users(r#"{"fred": ["test.*"], "empty": []}"#, Matching::Full);
        for user in ["bob", "empty"] {
            let d = check(&acl, user, "saltutil.find_job", "*");
            assert!(!d.allowed);
            assert!(matches!(d.reason, Reason::NoEntriesForUser { .. }), "{d}");
        }
        assert_eq!(
            check(&acl, "bob", "test.ping", "*").to_string(),
            "denied: no publisher_acl entries for user 'bob'"
        );
        assert!(acl.matches_user("empty"), "the key still names the user");
        let d = check(&acl, "fred", "saltutil.find_job", "*");
        assert_eq!(
            d.to_string(),
            "allowed: 'saltutil.find_job' by the whitelist"
        );
        let d = check(&acl, "fred", "cmd.run", "*");
        assert!(matches!(d.reason, Reason::NotAuthorised { .. }), "{d}");
    }

    #[test]
    fn args_rules_of_a_user_entry_apply() {
        let acl = users(DOC, Matching::Full);
        let (fun, tgt) = (Value::from("my_mod.go"), Value::from("web1"));
        let good = json(r#"["apple", "banana", {"__kwarg__": true, "kwa": "kwa1", "kwb": "kwb"}]"#);
        let bad = json(r#"["apple", "cherry", {"__kwarg__": true, "kwa": "kwa1", "kwb": "kwb"}]"#);
        let targets = FakeTargets::standard();
        let req = Request::new(&fun, &good, &tgt, "glob");
        assert!(acl.check("user_x", &req, &targets, &[]).allowed);
        let req = Request::new(&fun, &bad, &tgt, "glob");
        let d = acl.check("user_x", &req, &targets, &[]);
        let Reason::NotAuthorised { misses, .. } = &d.reason else {
            panic!("{d}");
        };
        assert_eq!(misses[0].kind, MissKind::ArgMismatch { index: 1 });
    }

    #[test]
    fn malformed_configuration_is_reported_and_grants_nothing() {
        let (acl, warnings) = UserAcl::parse(&json(r#"[".*"]"#), Matching::Full);
        assert!(acl.users().is_empty());
        assert_eq!(warnings.len(), 1);
        let (acl, warnings) = UserAcl::parse(
            &json(r#"{"fred": ".*", "bob": null, "eve": ["test.*"]}"#),
            Matching::Full,
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert_eq!(warnings[0].location, "publisher_acl['fred']");
        assert!(!check(&acl, "fred", "test.ping", "*").allowed);
        assert!(acl.matches_user("bob"));
        assert!(check(&acl, "eve", "test.ping", "*").allowed);
        let v = Value::Map(vec![(Value::from(7), json(r#"[".*"]"#))]);
        let (acl, warnings) = UserAcl::parse(&v, Matching::Full);
        assert!(acl.users().is_empty());
        assert_eq!(warnings[0].location, "publisher_acl[7]");
        let (acl, warnings) = UserAcl::parse(&Value::Nil, Matching::Full);
        assert!(acl.users().is_empty() && warnings.is_empty());
    }

    #[test]
    fn users_lists_the_literal_keys_in_order() {
        let acl = users(DOC, Matching::Full);
        assert_eq!(
            acl.users(),
            ["thatch", "fred", "admin|manager_.*", "user_.*"]
        );
    }

    #[test]
    fn user_key_over_the_backtracking_limit_matches_nobody() {
        let acl = users(r#"{"(a|aa)+\\1c": [".*"]}"#, Matching::Full);
        let user = "a".repeat(64);
        assert!(!acl.matches_user(&user));
        assert!(matches!(
            check(&acl, &user, "test.ping", "*").reason,
            Reason::NoEntriesForUser { .. }
        ));
    }

    #[test]
    fn runner_access_comes_from_the_users_at_entries() {
        let acl = users(
            r#"{"fred": ["test.*", "@jobs"], "ops": ["@runner"], "eve": [{"@manage": ["up"]}]}"#,
            Matching::Full,
        );
        let none = Value::Map(vec![]);
        assert!(acl.check_runner("fred", "jobs.list_jobs", &none).allowed);
        assert!(!acl.check_runner("fred", "manage.up", &none).allowed);
        assert!(acl.check_runner("ops", "manage.up", &none).allowed);
        assert!(acl.check_runner("eve", "manage.up", &none).allowed);
        assert!(!acl.check_runner("eve", "manage.down", &none).allowed);
        assert_eq!(
            acl.check_runner("ops", "manage", &none).reason,
            Reason::BadSyntax
        );
        assert!(matches!(
            acl.check_runner("bob", "manage.up", &none).reason,
            Reason::NoEntriesForUser { .. }
        ));
    }

    #[test]
    fn differing_patterns_cover_user_keys_and_their_entries() {
        let full = users(DOC, Matching::Full);
        let notes = full.differing_patterns();
        assert_eq!(
            note_texts(&notes),
            [
                "publisher_acl['admin|manager_.*']=admin|manager_.*",
                "publisher_acl['user_.*'][0]['web*'][0]['my_mod.*'][0]['kwargs']['kwb']=kwb",
            ]
        );
        assert_eq!(
            notes[0].to_string(),
            "publisher_acl['admin|manager_.*']: 'admin|manager_.*' matches whole user names \
             (\\A(?:admin|manager_.*)\\Z); Salt's \\Aadmin|manager_.*\\Z does not group it, so \
             a branch of the alternation also matches user names that only start with it (set \
             acl_regex_match: prefix for Salt's behaviour)"
        );
        let prefix = users(DOC, Matching::Prefix);
        let note = prefix.differing_patterns()[0].to_string();
        assert!(note.contains("write '(?:admin|manager_.*)'"), "{note}");
    }
}
