//! The `external_auth` option, and the master options it depends on.

use std::fmt;

use halite_acl::{EauthAcl, Matching, ModeNote};
use halite_target::pyvalue;
use rmpv::Value;

use crate::pam::DEFAULT_SERVICE;
use crate::{AutoBackend, Backend, Error, FileBackend, Identity, PamBackend, SharedSecretBackend};

/// The master options `external_auth` depends on.
#[derive(Clone, PartialEq, Eq)]
pub struct Settings {
    /// `acl_regex_match` (see [`Matching`]).
    pub matching: Matching,
    /// `permissive_acl` (false): the catch-all `'*'` applies to everyone.
    pub permissive_acl: bool,
    /// `sharedsecret`: the password of the `sharedsecret` backend.
    pub sharedsecret: Option<String>,
    /// `auth.pam.service` (`login`).
    pub pam_service: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            matching: Matching::default(),
            permissive_acl: false,
            sharedsecret: None,
            pam_service: DEFAULT_SERVICE.to_owned(),
        }
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secret = if self.sharedsecret.is_some() {
            "set"
        } else {
            "unset"
        };
        f.debug_struct("Settings")
            .field("matching", &self.matching)
            .field("permissive_acl", &self.permissive_acl)
            .field("sharedsecret", &secret)
            .field("pam_service", &self.pam_service)
            .finish()
    }
}

impl Settings {
    /// Reads `acl_regex_match`, `permissive_acl`, `sharedsecret` and `auth.pam.service` from
    /// the master's options (a map, as `MasterConfig::raw`); absent options take their
    /// defaults.
    ///
    /// Errors ([`Error::Config`]): an `acl_regex_match` other than `full`/`prefix`, a
    /// `permissive_acl` that is not a boolean, a `sharedsecret` that is not a string (Salt
    /// compares the password with it, so a YAML number never matches; the message does not
    /// show the value), an `auth.pam.service` that is not a non-empty string.
    pub fn from_master_options(opts: &Value) -> Result<Settings, Error> {
        let get = |key: &str| match opts {
            Value::Map(entries) => pyvalue::dict_get(entries, key).filter(|v| !v.is_nil()),
            _ => None,
        };
        let matching = Matching::from_config_value(get("acl_regex_match").unwrap_or(&Value::Nil))
            .map_err(|e| Error::Config(e.to_string()))?;
        let permissive_acl = match get("permissive_acl") {
            None => false,
            Some(Value::Boolean(b)) => *b,
            Some(other) => {
                return Err(Error::Config(format!(
                    "permissive_acl must be True or False, not {}",
                    repr(other)
                )))
            }
        };
        let sharedsecret = match get("sharedsecret") {
            None => None,
            Some(v) => Some(pyvalue::text(v).map(str::to_owned).ok_or_else(|| {
                Error::Config("sharedsecret must be a string (quote it in the YAML)".to_owned())
            })?),
        };
        let pam_service = match get("auth.pam.service") {
            None => DEFAULT_SERVICE.to_owned(),
            Some(v) => match pyvalue::text(v) {
                Some(s) if !s.is_empty() => s.to_owned(),
                _ => {
                    return Err(Error::Config(format!(
                        "auth.pam.service must be the name of a PAM service, not {}",
                        repr(v)
                    )))
                }
            },
        };
        Ok(Settings {
            matching,
            permissive_acl,
            sharedsecret,
            pam_service,
        })
    }
}

/// The enabled eauth backends and their ACLs: the master option `external_auth`.
#[derive(Debug, Default)]
pub struct ExternalAuth {
    systems: Vec<System>,
    warnings: Vec<String>,
}

#[derive(Debug)]
struct System {
    name: String,
    backend: Box<dyn Backend>,
    acl: EauthAcl,
}

impl ExternalAuth {
    /// Reads `external_auth` (`Nil`: none) with the master options in `settings`.
    ///
    /// Backends: `file` ([`FileBackend::from_options`]), `pam` ([`PamBackend`] on
    /// `settings.pam_service`), `sharedsecret` ([`SharedSecretBackend`] on
    /// `settings.sharedsecret`; a warning when that is unset) and `auto` ([`AutoBackend`],
    /// with a warning). Any other name (`ldap`, `rest`, a typo) is not enabled, with the
    /// warning "eauth backend 'ldap' is not supported by Halite; its users cannot log in".
    /// Each backend's map is its ACL ([`EauthAcl`], `^` options skipped); what the ACL
    /// parser cannot use is a warning too. The master logs the warnings at startup.
    ///
    /// Errors ([`Error::Config`], naming the key): `external_auth` is not a map, a backend
    /// name is not a string, a backend's value is not a map (`null` is a backend without
    /// users, with a warning), or the file backend's options are malformed.
    pub fn from_config(external_auth: &Value, settings: &Settings) -> Result<ExternalAuth, Error> {
        let entries: Vec<(&Value, &Value)> = match external_auth {
            Value::Nil => Vec::new(),
            Value::Map(entries) => pyvalue::dict_entries(entries).collect(),
            other => {
                return Err(Error::Config(format!(
                    "external_auth must be a map of eauth backends to their users, not {}",
                    repr(other)
                )))
            }
        };
        let mut auth = ExternalAuth::default();
        for (key, value) in entries {
            let Some(name) = pyvalue::text(key) else {
                return Err(Error::Config(format!(
                    "external_auth keys must be eauth backend names, not {}",
                    repr(key)
                )));
            };
            let options: &[(Value, Value)] = match value {
                Value::Map(entries) => entries,
                Value::Nil => {
                    auth.warnings.push(format!(
                        "external_auth:{name} lists no users: they may log in but are allowed \
                         nothing"
                    ));
                    &[]
                }
                other => {
                    return Err(Error::Config(format!(
                        "external_auth:{name} must be a map of users to ACL lists, not {}",
                        repr(other)
                    )))
                }
            };
            let backend: Box<dyn Backend> = match name {
                "file" => {
                    let (backend, warnings) = FileBackend::from_options(options)?;
                    auth.warnings.extend(warnings);
                    Box::new(backend)
                }
                "pam" => Box::new(PamBackend::new(&settings.pam_service)),
                "sharedsecret" => {
                    let backend = SharedSecretBackend::new(settings.sharedsecret.as_deref());
                    if !backend.is_usable() {
                        auth.warnings.push(
                            "external_auth:sharedsecret is enabled but the master option \
                             sharedsecret is unset or empty: nobody can log in with it"
                                .to_owned(),
                        );
                    }
                    Box::new(backend)
                }
                "auto" => {
                    auth.warnings.push(
                        "external_auth:auto accepts every user name with any password (Salt's \
                         test backend): do not enable it on a master others can reach"
                            .to_owned(),
                    );
                    Box::new(AutoBackend)
                }
                other => {
                    auth.warnings.push(format!(
                        "eauth backend '{other}' is not supported by Halite; its users cannot \
                         log in"
                    ));
                    continue;
                }
            };
            if name != "file" {
                for (key, _) in pyvalue::dict_entries(options) {
                    if let Some(option) = pyvalue::text(key).filter(|k| k.starts_with('^')) {
                        auth.warnings.push(format!(
                            "external_auth:{name}:{option} is not an option of the {name} \
                             backend; ignored"
                        ));
                    }
                }
            }
            let label = format!("external_auth['{name}']");
            let (acl, warnings) = EauthAcl::parse(value, settings.matching, &label);
            auth.warnings
                .extend(warnings.iter().map(ToString::to_string));
            auth.systems.push(System {
                name: name.to_owned(),
                backend,
                acl: acl.permissive(settings.permissive_acl),
            });
        }
        Ok(auth)
    }

    /// What the master should log at startup (WARNING): unsupported backends, risky or
    /// unusable ones, ignored options and ACL entries that are ignored or never match.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The enabled backends, in configuration order.
    pub fn enabled(&self) -> Vec<&str> {
        self.systems.iter().map(|s| s.name.as_str()).collect()
    }

    /// Whether `eauth` is an enabled backend (Salt's `eauth in opts["external_auth"]`, for
    /// supported backends).
    pub fn is_enabled(&self, eauth: &str) -> bool {
        self.system(eauth).is_some()
    }

    /// Authenticates `username` with `password` through the backend `eauth` (see
    /// [`Backend::authenticate`]); [`Error::NotEnabled`] when there is no such backend. Blocks
    /// (PAM, bcrypt): call it off the async runtime, time it, and pad failures with
    /// [`crate::FailureDelay`].
    pub fn authenticate(
        &self,
        eauth: &str,
        username: &str,
        password: &str,
    ) -> Result<Option<Identity>, Error> {
        let system = self
            .system(eauth)
            .ok_or_else(|| Error::NotEnabled(eauth.to_owned()))?;
        system.backend.authenticate(username, password)
    }

    /// The ACL map of the backend `eauth`, if it is enabled: [`EauthAcl::for_identity`] gives
    /// an identity's [`halite_acl::Acl`], [`EauthAcl::entries_for`] what `keep_acl_in_token`
    /// stores.
    pub fn acl(&self, eauth: &str) -> Option<&EauthAcl> {
        self.system(eauth).map(|s| &s.acl)
    }

    /// Every pattern of every backend's ACL whose meaning depends on `acl_regex_match`.
    pub fn differing_patterns(&self) -> Vec<ModeNote> {
        self.systems
            .iter()
            .flat_map(|s| s.acl.differing_patterns())
            .collect()
    }

    fn system(&self, eauth: &str) -> Option<&System> {
        self.systems.iter().find(|s| s.name == eauth)
    }
}

fn repr(value: &Value) -> String {
    let mut out = String::new();
    pyvalue::repr(value, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_target::testutil::json;

    const NONE: &[&str] = &[];

    fn load(text: &str, settings: &Settings) -> ExternalAuth {
        ExternalAuth::from_config(&json(text), settings).unwrap()
    }

    fn config_error(text: &str) -> String {
        match ExternalAuth::from_config(&json(text), &Settings::default()) {
            Err(Error::Config(message)) => message,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn supported_backends_are_enabled_in_order() {
        let settings = Settings {
            sharedsecret: Some("s3cret".into()),
            ..Settings::default()
        };
        let auth = load(
            r#"{"pam": {"fred": ["test.*"]}, "sharedsecret": {"fred": [".*"]},
                "file": {"^filename": "/nonexistent", "fred": [".*"]}}"#,
            &settings,
        );
        assert_eq!(auth.enabled(), ["pam", "sharedsecret", "file"]);
        assert!(auth.warnings().is_empty(), "{:?}", auth.warnings());
        assert!(auth.is_enabled("pam") && !auth.is_enabled("ldap"));
        let id = auth.authenticate("sharedsecret", "fred", "s3cret").unwrap();
        assert_eq!(id.map(|i| i.name), Some("fred".to_owned()));
        assert_eq!(
            auth.authenticate("sharedsecret", "fred", "nope").unwrap(),
            None
        );
        assert!(matches!(
            auth.authenticate("file", "fred", "x"),
            Err(Error::Read { .. })
        ));
    }

    #[test]
    fn unsupported_backends_are_warned_about_and_not_enabled() {
        let auth = load(
            r#"{"ldap": {"fred": [".*"]}, "rest": {"^url": "https://x"}, "mysql": {}}"#,
            &Settings::default(),
        );
        assert!(auth.enabled().is_empty());
        assert_eq!(
            auth.warnings(),
            [
                "eauth backend 'ldap' is not supported by Halite; its users cannot log in",
                "eauth backend 'rest' is not supported by Halite; its users cannot log in",
                "eauth backend 'mysql' is not supported by Halite; its users cannot log in",
            ]
        );
        let err = auth.authenticate("ldap", "fred", "pw").unwrap_err();
        assert_eq!(err.to_string(), r#"The eauth system "ldap" is not enabled"#);
        assert!(auth.acl("ldap").is_none());
    }

    #[test]
    fn auto_and_secretless_sharedsecret_are_enabled_with_warnings() {
        let auth = load(
            r#"{"auto": {"*": ["test.ping"]}, "sharedsecret": {"fred": [".*"]}}"#,
            &Settings::default(),
        );
        assert_eq!(auth.enabled(), ["auto", "sharedsecret"]);
        assert_eq!(auth.warnings().len(), 2, "{:?}", auth.warnings());
        assert!(auth.warnings()[0].contains("accepts every user name"));
        assert!(auth.warnings()[1].contains("nobody can log in"));
        assert!(auth.authenticate("auto", "eve", "").unwrap().is_some());
        assert_eq!(auth.authenticate("sharedsecret", "fred", "").unwrap(), None);
    }

    #[test]
    fn options_of_other_backends_and_acl_troubles_are_warnings() {
        let auth = load(
            r#"{"pam": {"^service": "sshd", "fred": "test.*", "bob": ["(unclosed"]}}"#,
            &Settings::default(),
        );
        let w = auth.warnings();
        assert_eq!(w.len(), 3, "{w:?}");
        assert_eq!(
            w[0],
            "external_auth:pam:^service is not an option of the pam backend; ignored"
        );
        assert!(
            w[1].starts_with("external_auth['pam']['fred']: "),
            "{}",
            w[1]
        );
        assert!(
            w[2].starts_with("external_auth['pam']['bob'][0]: "),
            "{}",
            w[2]
        );
    }

    #[test]
    fn malformed_external_auth_is_an_error_naming_the_key() {
        assert_eq!(
            config_error("[1]"),
            "external_auth must be a map of eauth backends to their users, not [1]"
        );
        assert_eq!(
            config_error(r#"{"pam": 3}"#),
            "external_auth:pam must be a map of users to ACL lists, not 3"
        );
        assert_eq!(
            config_error(r#"{"pam": ["fred"]}"#),
            "external_auth:pam must be a map of users to ACL lists, not ['fred']"
        );
        assert_eq!(
            config_error(r#"{"file": {"^filename": 3}}"#),
            "external_auth:file:^filename must be a string, not 3"
        );
        assert_eq!(
            config_error(r#"{"file": {"fred": [".*"]}}"#),
            "salt.auth.file: An authentication file must be specified via \
             external_auth:file:^filename"
        );
        let v = Value::Map(vec![(Value::from(1), json("{}"))]);
        match ExternalAuth::from_config(&v, &Settings::default()) {
            Err(Error::Config(m)) => {
                assert_eq!(m, "external_auth keys must be eauth backend names, not 1")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_backend_without_users_is_enabled_and_allows_nothing() {
        let auth = load(r#"{"pam": null}"#, &Settings::default());
        assert_eq!(auth.enabled(), ["pam"]);
        assert_eq!(auth.warnings().len(), 1);
        assert!(auth
            .acl("pam")
            .unwrap()
            .for_identity("fred", NONE)
            .is_empty());
        assert!(load("null", &Settings::default()).enabled().is_empty());
        assert!(load("{}", &Settings::default()).enabled().is_empty());
    }

    #[test]
    fn acl_follows_permissive_acl_and_skips_options() {
        let text = r#"{"file": {"^filename": "/x", "*": ["test.ping"], "fr*": ["cmd.*"]}}"#;
        let strict = load(text, &Settings::default());
        let acl = strict.acl("file").unwrap();
        assert_eq!(acl.for_identity("fred", NONE).len(), 1);
        assert_eq!(acl.entries_for("fred", NONE), json(r#"["cmd.*"]"#));
        assert_eq!(acl.entries_for("bob", NONE), json(r#"["test.ping"]"#));
        let permissive = Settings {
            permissive_acl: true,
            ..Settings::default()
        };
        let loose = load(text, &permissive);
        let acl = loose.acl("file").unwrap();
        assert_eq!(
            acl.entries_for("fred", NONE),
            json(r#"["test.ping", "cmd.*"]"#)
        );
    }

    #[test]
    fn differing_patterns_cover_every_backend() {
        let auth = load(
            r#"{"pam": {"admin|ops": ["test.*"]}, "auto": {"x": ["cmd.run|test.*"]}}"#,
            &Settings::default(),
        );
        let notes: Vec<String> = auth
            .differing_patterns()
            .iter()
            .map(|n| n.location.clone())
            .collect();
        assert_eq!(
            notes,
            [
                "external_auth['pam']['admin|ops']",
                "external_auth['auto']['x'][0]"
            ]
        );
    }

    #[test]
    fn settings_come_from_the_master_options() {
        let s = Settings::from_master_options(&json(
            r#"{"acl_regex_match": "prefix", "permissive_acl": true, "sharedsecret": "abc",
                "auth.pam.service": "salt", "other": 1}"#,
        ))
        .unwrap();
        assert_eq!(s.matching, Matching::Prefix);
        assert!(s.permissive_acl);
        assert_eq!(s.sharedsecret.as_deref(), Some("abc"));
        assert_eq!(s.pam_service, "salt");
        let d = Settings::from_master_options(&json(r#"{"permissive_acl": null}"#)).unwrap();
        assert_eq!(d, Settings::default());
        assert_eq!(d.pam_service, "login");
        assert!(!format!("{s:?}").contains("abc"), "Debug hides the secret");
    }

    #[test]
    fn malformed_settings_are_errors() {
        let cases = [
            (
                r#"{"acl_regex_match": "regex"}"#,
                "acl_regex_match must be 'full' or 'prefix', not 'regex'",
            ),
            (
                r#"{"permissive_acl": "yes"}"#,
                "permissive_acl must be True or False, not 'yes'",
            ),
            (
                r#"{"sharedsecret": 12345}"#,
                "sharedsecret must be a string (quote it in the YAML)",
            ),
            (
                r#"{"auth.pam.service": ""}"#,
                "auth.pam.service must be the name of a PAM service, not ''",
            ),
        ];
        for (opts, message) in cases {
            match Settings::from_master_options(&json(opts)) {
                Err(Error::Config(got)) => assert_eq!(got, message),
                other => panic!("{opts}: {other:?}"),
            }
        }
    }
}
