//! `peer` and `peer_run`: ACLs keyed by a regex on the requesting minion's id.

use std::sync::Arc;

use halite_target::pyvalue;
use rmpv::Value;

use crate::acl::{compile, repr_of, shorten, Acl, ParseWarning};
use crate::args::regex_miss;
use crate::check::{
    check_lists, Decision, EntryRef, Grant, GrantedBy, Miss, Reason, Request, Targets,
};
use crate::pattern::{note_if_differs, Matching, ModeNote, Pattern, PatternKind};

/// The `(key, value)` pairs of an id-keyed map, or why there are none.
fn id_map<'v>(
    value: &'v Value,
    option: &str,
    warnings: &mut Vec<ParseWarning>,
) -> Vec<(&'v Value, &'v Value)> {
    match value {
        Value::Nil => Vec::new(),
        Value::Map(entries) => pyvalue::dict_entries(entries).collect(),
        other => {
            warnings.push(ParseWarning {
                location: option.to_owned(),
                message: format!(
                    "not a map ({}); no minion is allowed anything",
                    shorten(&repr_of(other))
                ),
            });
            Vec::new()
        }
    }
}

/// The minion-id regex of a key, or `None` (with a warning) when the key is not a string.
fn id_key(
    key: &Value,
    option: &str,
    matching: Matching,
    warnings: &mut Vec<ParseWarning>,
) -> Option<(Pattern, String)> {
    let Some(text) = pyvalue::text(key) else {
        warnings.push(ParseWarning {
            location: format!("{option}[{}]", repr_of(key)),
            message: "the minion id regex is not a string; ignored".to_owned(),
        });
        return None;
    };
    let location = format!("{option}['{text}']");
    Some((compile(text, &location, matching, warnings), location))
}

/// Whether the id regex of a key matches `id`; a regex that gives no answer does not.
fn id_matches(pattern: &Pattern, id: &str) -> bool {
    pattern.is_match(id) == Ok(true)
}

/// The mode note of a minion id regex, if its meaning differs between the modes.
fn id_note(out: &mut Vec<ModeNote>, id: &Pattern, location: &str, matching: Matching) {
    note_if_differs(out, id, location, PatternKind::MinionId, matching);
}

/// One key of an id-keyed option whose value is a list.
struct IdList<'v> {
    /// The minion id regex.
    id: Pattern,
    /// Where the key is, for warnings (`peer['web.*']`).
    location: String,
    /// The list.
    items: &'v [Value],
}

/// Parses an id-keyed option (`peer`, `peer_run`): `key` makes the key of each entry
/// whose value is a list, in order. Keys that are not strings and values that are not
/// lists are reported and skipped, as Salt ignores them.
fn parse_id_lists<K>(
    value: &Value,
    option: &str,
    matching: Matching,
    key: fn(IdList<'_>, Matching, &mut Vec<ParseWarning>) -> K,
) -> (Vec<K>, Vec<ParseWarning>) {
    let mut warnings = Vec::new();
    let mut keys = Vec::new();
    for (id_value, list) in id_map(value, option, &mut warnings) {
        let Some((id, location)) = id_key(id_value, option, matching, &mut warnings) else {
            continue;
        };
        let Value::Array(items) = list else {
            warnings.push(ParseWarning {
                location,
                message: "the value is not a list; ignored".to_owned(),
            });
            continue;
        };
        let list = IdList {
            id,
            location,
            items,
        };
        keys.push(key(list, matching, &mut warnings));
    }
    (keys, warnings)
}

/// The key of a `peer` entry: its list is an ACL.
fn peer_key(list: IdList<'_>, matching: Matching, warnings: &mut Vec<ParseWarning>) -> PeerKey {
    let IdList {
        id,
        location,
        items,
    } = list;
    let mut acl = Acl::empty(matching);
    let origin: Arc<str> = Arc::from(id.source());
    acl.extend_from(items, &location, Some(&origin), warnings);
    PeerKey {
        id: Arc::new(id),
        location,
        acl,
    }
}

/// The key of a `peer_run` entry: its list holds runner function regexes.
fn runner_key(list: IdList<'_>, matching: Matching, warnings: &mut Vec<ParseWarning>) -> RunnerKey {
    let location = list.location;
    let funs = list
        .items
        .iter()
        .enumerate()
        .map(|(n, item)| {
            let at = format!("{location}[{n}]");
            let pattern = match pyvalue::text(item) {
                Some(s) => Some(compile(s, &at, matching, warnings)),
                None => {
                    warnings.push(ParseWarning {
                        location: at.clone(),
                        message: "not a runner function regex; ignored".to_owned(),
                    });
                    None
                }
            };
            RunnerFun {
                pattern,
                text: Arc::from(shorten(&repr_of(item))),
                location: at,
            }
        })
        .collect();
    RunnerKey {
        origin: Arc::from(list.id.source()),
        id: list.id,
        location,
        funs,
    }
}

/// The `peer` option: `{minion_id_regex: [acl entries]}`.
#[derive(Debug, Clone, Default)]
pub struct PeerAcl {
    keys: Vec<PeerKey>,
    matching: Matching,
}

#[derive(Debug, Clone)]
struct PeerKey {
    id: Arc<Pattern>,
    location: String,
    acl: Acl,
}

impl PeerAcl {
    /// Parses the `peer` option. Absent (`Nil`) or not a map: no minion may publish. A key
    /// whose value is not a list is ignored (as Salt does), as is a key that is not a
    /// string or not a valid regex (Salt raises on every peer request then); each is
    /// reported.
    pub fn parse(value: &Value, matching: Matching) -> (PeerAcl, Vec<ParseWarning>) {
        let (keys, warnings) = parse_id_lists(value, "peer", matching, peer_key);
        (PeerAcl { keys, matching }, warnings)
    }

    /// Whether no minion may publish anything.
    pub fn is_empty(&self) -> bool {
        self.keys.iter().all(|k| k.acl.is_empty())
    }

    /// The ACL of minion `id`: the entries of **every** key whose regex matches `id`,
    /// concatenated in configuration order (Salt's `perms.extend`). Entry indices in
    /// decisions refer to this merged list; each entry remembers its key.
    pub fn for_minion(&self, id: &str) -> Acl {
        let mut acl = Acl::empty(self.matching);
        for key in &self.keys {
            if id_matches(&key.id, id) {
                acl.entries.extend(key.acl.entries.iter().cloned());
            }
        }
        acl
    }

    /// The peer check of Salt's `__verify_minion_publish` once the load is well formed:
    /// [`PeerAcl::for_minion`]`(id)` checks `req` with `publish_validate` on (whatever
    /// `req` says) and no whitelist, without building that merged list.
    pub fn check(&self, id: &str, req: &Request<'_>, targets: &dyn Targets) -> Decision {
        let req = Request {
            publish_validate: true,
            ..*req
        };
        let lists: Vec<&Acl> = self
            .keys
            .iter()
            .filter(|k| id_matches(&k.id, id))
            .map(|k| &k.acl)
            .collect();
        check_lists(&lists, &req, targets, &[])
    }

    /// Every valid pattern (id keys, function, argument and keyword regexes) whose
    /// meaning differs between [`Matching::Full`] and [`Matching::Prefix`].
    pub fn differing_patterns(&self) -> Vec<ModeNote> {
        let mut out = Vec::new();
        for key in &self.keys {
            id_note(&mut out, &key.id, &key.location, self.matching);
            out.extend(key.acl.differing_patterns());
        }
        out
    }
}

/// The `peer_run` option: `{minion_id_regex: [runner_function_regex]}`.
#[derive(Debug, Default)]
pub struct RunnerAcl {
    keys: Vec<RunnerKey>,
    matching: Matching,
}

#[derive(Debug)]
struct RunnerKey {
    id: Pattern,
    location: String,
    origin: Arc<str>,
    funs: Vec<RunnerFun>,
}

#[derive(Debug)]
struct RunnerFun {
    /// `None` for an entry that is not a string (never matches).
    pattern: Option<Pattern>,
    text: Arc<str>,
    location: String,
}

impl RunnerAcl {
    /// Parses the `peer_run` option. Absent or not a map: no minion may run anything. A
    /// key whose value is not a list is ignored (as Salt does); keys and entries that are
    /// not strings, and invalid regexes, never match (Salt raises on every request then).
    pub fn parse(value: &Value, matching: Matching) -> (RunnerAcl, Vec<ParseWarning>) {
        let (keys, warnings) = parse_id_lists(value, "peer_run", matching, runner_key);
        (RunnerAcl { keys, matching }, warnings)
    }

    /// Salt's `minion_runner` check: may minion `id` run runner function `fun`? The
    /// entries of every key matching `id` are tried in configuration order; the grant's
    /// index counts entries across those keys.
    pub fn allows(&self, id: &str, fun: &str) -> Decision {
        let mut misses = Vec::new();
        let mut index = 0;
        for key in self.keys.iter().filter(|k| id_matches(&k.id, id)) {
            for entry in &key.funs {
                let here = EntryRef {
                    index,
                    text: Arc::clone(&entry.text),
                    origin: Some(Arc::clone(&key.origin)),
                };
                index += 1;
                let Some(pattern) = &entry.pattern else {
                    continue;
                };
                match pattern.is_match(fun) {
                    Ok(true) => {
                        return Decision {
                            allowed: true,
                            reason: Reason::Granted(vec![Grant {
                                fun: fun.to_owned(),
                                by: GrantedBy::Entry(here),
                            }]),
                        }
                    }
                    Ok(false) => {}
                    Err(trouble) => misses.push(Miss {
                        entry: here,
                        kind: regex_miss(pattern, trouble),
                    }),
                }
            }
        }
        Decision {
            allowed: false,
            reason: Reason::NotAuthorised {
                fun: fun.to_owned(),
                position: 0,
                misses,
            },
        }
    }

    /// Whether no minion may run anything.
    pub fn is_empty(&self) -> bool {
        self.keys.iter().all(|k| k.funs.is_empty())
    }

    /// Every valid pattern (id keys and runner function regexes) whose meaning differs
    /// between [`Matching::Full`] and [`Matching::Prefix`].
    pub fn differing_patterns(&self) -> Vec<ModeNote> {
        let mut out = Vec::new();
        for key in &self.keys {
            id_note(&mut out, &key.id, &key.location, self.matching);
            for entry in &key.funs {
                if let Some(p) = &entry.pattern {
                    note_if_differs(
                        &mut out,
                        p,
                        &entry.location,
                        PatternKind::Function,
                        self.matching,
                    );
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{json, note_texts, FakeTargets};

    const SEED_000: &str =
        r#"{".*example.com": ["test.*", "ps.*", "pkg.*"], ".*foo.org": ["test.*"]}"#;

    fn peer(text: &str, m: Matching) -> PeerAcl {
        let (acl, warnings) = PeerAcl::parse(&json(text), m);
        assert!(warnings.is_empty(), "{warnings:?}");
        acl
    }

    fn allowed(acl: &Acl, fun: &str) -> bool {
        let (fun, arg, tgt) = (Value::from(fun), json("[]"), json(r#""*""#));
        let mut req = Request::new(&fun, &arg, &tgt, "glob");
        req.publish_validate = true;
        acl.check(&req, &FakeTargets::standard(), &[]).allowed
    }

    #[test]
    fn seed_000_suffix_key_admits_its_domain_in_full_mode() {
        let p = peer(SEED_000, Matching::Full);
        assert!(allowed(&p.for_minion("web.example.com"), "test.ping"));
        assert!(allowed(&p.for_minion("a.foo.org"), "test.ping"));
        assert!(!allowed(&p.for_minion("web.example.com"), "cmd.run"));
    }

    #[test]
    fn seed_000_suffix_key_refuses_longer_ids_in_full_mode_only() {
        let full = peer(SEED_000, Matching::Full);
        assert!(full.for_minion("web.example.com.evil.org").is_empty());
        let prefix = peer(SEED_000, Matching::Prefix);
        assert!(allowed(
            &prefix.for_minion("web.example.com.evil.org"),
            "test.ping"
        ));
    }

    #[test]
    fn peer_check_always_applies_publish_validate() {
        let p = peer(r#"{".*": [".*"]}"#, Matching::Full);
        let (fun, arg) = (json(r#""test.ping""#), json("[]"));
        let tgt = json(r#""env:prod*""#);
        let req = Request::new(&fun, &arg, &tgt, "pillar");
        assert!(!req.publish_validate);
        let d = p.check("web1", &req, &FakeTargets::standard());
        assert!(matches!(d.reason, Reason::PublishValidate { .. }), "{d}");
        let tgt = json(r#""web1""#);
        let req = Request::new(&fun, &arg, &tgt, "glob");
        assert!(p.check("web1", &req, &FakeTargets::standard()).allowed);
    }

    #[test]
    fn every_matching_key_contributes_in_config_order() {
        let p = peer(
            r#"{"web.*": ["test.*"], "db1": ["cmd.*"], ".*": ["grains.items"]}"#,
            Matching::Full,
        );
        let acl = p.for_minion("web1");
        assert_eq!(acl.len(), 2);
        assert_eq!(acl.entry_text(0), Some("'test.*'"));
        assert_eq!(acl.entry_text(1), Some("'grains.items'"));
        let (fun, arg, tgt) = (json(r#""grains.items""#), json("[]"), json(r#""*""#));
        let d = acl.check(
            &Request::new(&fun, &arg, &tgt, "glob"),
            &FakeTargets::standard(),
            &[],
        );
        assert_eq!(
            d.to_string(),
            "allowed: 'grains.items' by entry 1 'grains.items' (under '.*')"
        );
    }

    #[test]
    fn non_map_peer_and_bad_keys_are_reported_and_grant_nothing() {
        let (p, warnings) = PeerAcl::parse(&json(r#"[".*"]"#), Matching::Full);
        assert!(p.is_empty());
        assert_eq!(warnings.len(), 1);
        let (p, warnings) = PeerAcl::parse(
            &json(r#"{"web(": [".*"], "db.*": "test.*", "ok": [".*"]}"#),
            Matching::Full,
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(p.for_minion("web(").is_empty());
        assert!(p.for_minion("db1").is_empty());
        assert_eq!(p.for_minion("ok").len(), 1);
        let (p, warnings) = PeerAcl::parse(&Value::Nil, Matching::Full);
        assert!(p.is_empty() && warnings.is_empty());
    }

    #[test]
    fn non_string_peer_key_is_ignored() {
        let v = Value::Map(vec![(Value::from(1), json(r#"[".*"]"#))]);
        let (p, warnings) = PeerAcl::parse(&v, Matching::Full);
        assert!(p.is_empty());
        assert_eq!(warnings[0].location, "peer[1]");
    }

    #[test]
    fn peer_differing_patterns_cover_keys_and_functions() {
        let p = peer(SEED_000, Matching::Full);
        let notes: Vec<String> = p
            .differing_patterns()
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert_eq!(
            notes[0],
            "peer['.*example.com']: '.*example.com' matches ids by full match; Salt matches \
             any id starting with it (set acl_regex_match: prefix for Salt's behaviour)"
        );
        assert!(notes[1].starts_with("peer['.*foo.org']: '.*foo.org'"));
    }

    #[test]
    fn peer_run_allows_by_any_matching_key() {
        let (r, warnings) = RunnerAcl::parse(
            &json(r#"{".*example.com": ["manage.*", "jobs.*"], "db.*": ["cache.grains"]}"#),
            Matching::Full,
        );
        assert!(warnings.is_empty());
        let d = r.allows("web.example.com", "jobs.list_jobs");
        assert!(d.allowed);
        assert_eq!(
            d.to_string(),
            "allowed: 'jobs.list_jobs' by entry 1 'jobs.*' (under '.*example.com')"
        );
        assert!(!r.allows("web.example.com", "cache.grains").allowed);
        assert!(!r.allows("web.example.com.evil.org", "manage.up").allowed);
        let prefix = RunnerAcl::parse(
            &json(r#"{".*example.com": ["manage.up"]}"#),
            Matching::Prefix,
        )
        .0;
        assert!(
            prefix
                .allows("web.example.com.evil.org", "manage.up_all")
                .allowed
        );
    }

    #[test]
    fn peer_run_bad_entries_never_match_and_are_reported() {
        let (r, warnings) = RunnerAcl::parse(
            &json(r#"{".*": ["manage.(", 5, "jobs.*"], "x": "manage.up"}"#),
            Matching::Full,
        );
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        let d = r.allows("m1", "manage.(");
        assert!(!d.allowed);
        assert!(
            d.to_string()
                .contains("Invalid regular expression: manage.("),
            "{d}"
        );
        assert!(r.allows("m1", "jobs.active").allowed);
        assert!(RunnerAcl::parse(&Value::Nil, Matching::Full).0.is_empty());
    }

    #[test]
    fn peer_run_differing_patterns_cover_keys_and_functions() {
        let r = RunnerAcl::parse(
            &json(r#"{"web1": ["manage.up$", "jobs.list"]}"#),
            Matching::Full,
        )
        .0;
        let notes = note_texts(&r.differing_patterns());
        assert_eq!(
            notes,
            ["peer_run['web1']=web1", "peer_run['web1'][1]=jobs.list"]
        );
    }
}
