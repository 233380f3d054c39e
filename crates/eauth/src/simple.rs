//! The `sharedsecret` and `auto` backends.

use std::fmt;

use crate::crypt::ct_eq;
use crate::{Backend, Error, Identity};

/// `sharedsecret` (Salt's `salt/auth/sharedsecret.py`): any user name, with the master
/// option `sharedsecret` as the password. Meant for a trusted front end (salt-api behind a
/// Kerberos proxy) that vouches for the user name.
///
/// Deviation: an unset or empty secret accepts nobody (Salt compares with `==`, so an empty
/// `sharedsecret` accepts the empty password). The comparison is constant-time. No groups.
#[derive(Clone, PartialEq, Eq)]
pub struct SharedSecretBackend {
    secret: Option<String>,
}

impl fmt::Debug for SharedSecretBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.secret.is_some() {
            "set"
        } else {
            "unset"
        };
        f.debug_struct("SharedSecretBackend")
            .field("secret", &state)
            .finish()
    }
}

impl SharedSecretBackend {
    /// The backend for the master option `sharedsecret` (`None` or `""`: nobody logs in).
    pub fn new(secret: Option<&str>) -> SharedSecretBackend {
        SharedSecretBackend {
            secret: secret.filter(|s| !s.is_empty()).map(str::to_owned),
        }
    }

    /// Whether anyone can log in (a secret is set).
    pub fn is_usable(&self) -> bool {
        self.secret.is_some()
    }
}

impl Backend for SharedSecretBackend {
    fn authenticate(&self, username: &str, password: &str) -> Result<Option<Identity>, Error> {
        let Some(secret) = &self.secret else {
            return Ok(None);
        };
        Ok(
            ct_eq(secret.as_bytes(), password.as_bytes()).then(|| Identity {
                name: username.to_owned(),
                groups: None,
            }),
        )
    }
}

/// `auto` (Salt's `salt/auth/auto.py`): every user name with every password. Salt's
/// test backend; [`crate::ExternalAuth::from_config`] warns when it is enabled. No groups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AutoBackend;

impl Backend for AutoBackend {
    fn authenticate(&self, username: &str, _password: &str) -> Result<Option<Identity>, Error> {
        Ok(Some(Identity {
            name: username.to_owned(),
            groups: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(b: &dyn Backend, user: &str, password: &str) -> bool {
        b.authenticate(user, password).unwrap().is_some()
    }

    #[test]
    fn shared_secret_is_the_password_of_every_user() {
        let b = SharedSecretBackend::new(Some("OIUHF_CHANGE_THIS_12h88"));
        assert!(b.is_usable());
        assert!(ok(&b, "fred", "OIUHF_CHANGE_THIS_12h88"));
        assert!(ok(&b, "anyone", "OIUHF_CHANGE_THIS_12h88"));
        assert!(!ok(&b, "fred", "OIUHF_CHANGE_THIS_12h8"));
        assert!(!ok(&b, "fred", ""));
        let id = b.authenticate("fred", "OIUHF_CHANGE_THIS_12h88").unwrap();
        assert_eq!(
            id,
            Some(Identity {
                name: "fred".into(),
                groups: None
            })
        );
    }

    #[test]
    fn unset_or_empty_secret_accepts_nobody() {
        for b in [
            SharedSecretBackend::new(None),
            SharedSecretBackend::new(Some("")),
        ] {
            assert!(!b.is_usable());
            assert!(!ok(&b, "fred", ""));
            assert!(!ok(&b, "fred", "anything"));
        }
    }

    #[test]
    fn debug_does_not_show_the_secret() {
        let b = SharedSecretBackend::new(Some("hunter2"));
        let shown = format!("{b:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn auto_accepts_everyone() {
        assert!(ok(&AutoBackend, "fred", "whatever"));
        assert!(ok(&AutoBackend, "", ""));
    }
}
