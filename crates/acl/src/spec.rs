//! Runner and wheel access: Salt's `CkMinions.spec_check` (`@runner`, `@wheel`,
//! `@<module>` entries) for `external_auth` and tokens.

use std::fmt;

use halite_target::pyvalue;
use rmpv::Value;

use crate::acl::{Acl, EntryKind};
use crate::args::Args;
use crate::check::{conditions_allow, Decision, EntryRef, Grant, GrantedBy, Miss, Reason};

/// The kind of function a spec check is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpecForm {
    /// A runner (`salt-run`, `runner` client).
    Runner,
    /// A wheel function.
    Wheel,
    /// A cloud function (the whole name is both module and function).
    Cloud,
}

impl SpecForm {
    /// The name Salt uses (`runner`, `wheel`, `cloud`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Runner => "runner",
            Self::Wheel => "wheel",
            Self::Cloud => "cloud",
        }
    }

    /// `@runners`, `@wheels`, `@clouds`: the plural spelling Salt also accepts.
    fn plural_entry(self) -> &'static str {
        match self {
            Self::Runner => "@runners",
            Self::Wheel => "@wheels",
            Self::Cloud => "@clouds",
        }
    }
}

impl fmt::Display for SpecForm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Acl {
    /// Salt's `spec_check(auth_list, fun, kwarg, form)`: may this ACL run the runner/wheel
    /// function `fun` (`module.function`)?
    ///
    /// - A string entry `@<module>`, `@runner`/`@wheel` (the form) or `@runners`/`@wheels`
    ///   grants it. Plain function regexes never do.
    /// - A map entry `{'@<module>': conditions}` checks the conditions against the
    ///   function name only (`up` for `manage.up`); `{'@runner': conditions}` against the
    ///   full `module.function`.
    /// - `args`/`kwargs` rules read `kwarg["arg"]` and `kwarg["kwarg"]` of the request's
    ///   `kwarg` map, as Salt does (no `__kwarg__` split).
    ///
    /// An empty ACL denies; otherwise a `fun` that is not exactly `module.function`
    /// (runner, wheel) gives [`Reason::BadSyntax`], which Salt reports as
    /// `SaltInvocationError` "A command invocation error occurred: Check syntax.".
    pub fn check_spec(&self, fun: &str, form: SpecForm, kwarg: &Value) -> Decision {
        let deny = |reason| Decision {
            allowed: false,
            reason,
        };
        let not_authorised = |misses| {
            deny(Reason::NotAuthorised {
                fun: fun.to_owned(),
                position: 0,
                misses,
            })
        };
        if self.entries.is_empty() {
            return not_authorised(Vec::new());
        }
        let (module, name) = match form {
            SpecForm::Cloud => (fun, fun),
            SpecForm::Runner | SpecForm::Wheel => {
                let mut parts = fun.split('.');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(module), Some(name), None) => (module, name),
                    _ => return deny(Reason::BadSyntax),
                }
            }
        };
        let map = match kwarg {
            Value::Map(entries) => Some(entries.as_slice()),
            _ => None,
        };
        let args = Args::spec(
            map.and_then(|m| pyvalue::dict_get(m, "arg")),
            map.and_then(|m| pyvalue::dict_get(m, "kwarg")),
        );
        let is_form = |key: &str| key == form.as_str();
        let mut misses = Vec::new();
        for (index, entry) in self.entries.iter().enumerate() {
            let granted = match &entry.kind {
                EntryKind::Spec(text) => {
                    let key = text.get(1..).unwrap_or_default();
                    key == module || is_form(key) || text == form.plural_entry()
                }
                EntryKind::Target {
                    target, conditions, ..
                } => {
                    let Some(key) = target.strip_prefix('@') else {
                        continue;
                    };
                    let subjects = [
                        (key == module).then_some(name),
                        (is_form(key) || target == form.plural_entry()).then_some(fun),
                    ];
                    let mut granted = false;
                    for subject in subjects.into_iter().flatten() {
                        match conditions_allow(conditions, subject, args) {
                            Ok(()) => granted = true,
                            Err(Some(kind)) => misses.push(Miss {
                                entry: EntryRef::of(index, entry),
                                kind,
                            }),
                            Err(None) => {}
                        }
                        if granted {
                            break;
                        }
                    }
                    granted
                }
                EntryKind::Function(_) | EntryKind::Malformed => false,
            };
            if granted {
                return Decision {
                    allowed: true,
                    reason: Reason::Granted(vec![Grant {
                        fun: fun.to_owned(),
                        by: GrantedBy::Entry(EntryRef::of(index, entry)),
                    }]),
                };
            }
        }
        not_authorised(misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::json;
    use crate::Matching;

    fn spec(acl: &str, fun: &str, form: SpecForm, kwarg: &str) -> Decision {
        Acl::parse(&json(acl), Matching::Full, "acl")
            .0
            .check_spec(fun, form, &json(kwarg))
    }

    #[test]
    fn module_form_and_plural_string_entries_grant() {
        for acl in [r#"["@manage"]"#, r#"["@runner"]"#, r#"["@runners"]"#] {
            assert!(
                spec(acl, "manage.up", SpecForm::Runner, "{}").allowed,
                "{acl}"
            );
        }
        assert!(spec(r#"["@wheel"]"#, "key.list_all", SpecForm::Wheel, "{}").allowed);
        assert!(!spec(r#"["@wheel"]"#, "manage.up", SpecForm::Runner, "{}").allowed);
        assert!(!spec(r#"["@jobs"]"#, "manage.up", SpecForm::Runner, "{}").allowed);
    }

    #[test]
    fn plain_function_regexes_never_grant_runners() {
        let d = spec(
            r#"[".*", {"*": [".*"]}]"#,
            "manage.up",
            SpecForm::Runner,
            "{}",
        );
        assert!(!d.allowed);
    }

    #[test]
    fn module_map_entry_matches_the_function_name_only() {
        let acl = r#"[{"@manage": ["up", "down"]}]"#;
        assert!(spec(acl, "manage.up", SpecForm::Runner, "{}").allowed);
        assert!(!spec(acl, "manage.status", SpecForm::Runner, "{}").allowed);
        let full = r#"[{"@manage": ["manage.up"]}]"#;
        assert!(!spec(full, "manage.up", SpecForm::Runner, "{}").allowed);
    }

    #[test]
    fn form_map_entry_matches_the_full_name() {
        let acl = r#"[{"@runner": ["manage.*"]}]"#;
        assert!(spec(acl, "manage.up", SpecForm::Runner, "{}").allowed);
        assert!(!spec(acl, "jobs.list_jobs", SpecForm::Runner, "{}").allowed);
    }

    #[test]
    fn spec_arg_rules_read_arg_and_kwarg_of_the_kwarg_map() {
        let acl = r#"[{"@runner": [{"jobs.lookup_jid": {"args": ["\\d+"], "kwargs": {"ext_source": null}}}]}]"#;
        let ok = r#"{"arg": ["2024"], "kwarg": {"ext_source": "x"}}"#;
        assert!(spec(acl, "jobs.lookup_jid", SpecForm::Runner, ok).allowed);
        let d = spec(
            acl,
            "jobs.lookup_jid",
            SpecForm::Runner,
            r#"{"arg": ["x"]}"#,
        );
        assert!(!d.allowed);
        assert!(d.to_string().contains("argument 0 does not match"), "{d}");
        let d = spec(acl, "jobs.lookup_jid", SpecForm::Runner, "[]");
        assert!(!d.allowed);
    }

    #[test]
    fn bad_syntax_is_reported_unless_the_acl_is_empty() {
        let d = spec(r#"["@runner"]"#, "manage", SpecForm::Runner, "{}");
        assert_eq!(d.reason, Reason::BadSyntax);
        let d = spec(r#"["@runner"]"#, "a.b.c", SpecForm::Runner, "{}");
        assert_eq!(d.reason, Reason::BadSyntax);
        let d = spec("[]", "manage", SpecForm::Runner, "{}");
        assert!(matches!(d.reason, Reason::NotAuthorised { .. }));
    }

    #[test]
    fn cloud_form_uses_the_whole_name() {
        assert!(spec(r#"["@cloud"]"#, "profile", SpecForm::Cloud, "{}").allowed);
        assert!(spec(r#"["@profile"]"#, "profile", SpecForm::Cloud, "{}").allowed);
    }
}
