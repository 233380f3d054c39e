//! `token_expire` and `token_expire_user_override` (`LoadAuth._allow_custom_expire` and the
//! expiry part of `LoadAuth.mk_token`).

use halite_proto::value::{bytes_of, get};

use crate::Value;

/// Salt's default `token_expire`: 12 hours, in seconds.
pub const DEFAULT_TOKEN_EXPIRE: f64 = 43200.0;

/// Whether `username` of `eauth` may choose its token's lifetime, given the master's
/// `token_expire_user_override` (`override_cfg`; pass `Value::Nil` when unset — Salt's
/// default `False`):
///
/// - `True` (the boolean only; `1` is not `True` to Salt's `is True`): anyone may.
/// - A map `{eauth: users}`: the users of that eauth listed in `users` may. `users` is a
///   list (an element equal to `username`) or a map (a key equal to `username`), as
///   Python's `in` reads them; a string names one user and is compared whole (Salt's `in`
///   would test for a substring; see the crate docs). Other eauths' entries do not count.
/// - Anything else: nobody may.
pub fn allow_custom_expire(override_cfg: &Value, eauth: &str, username: &str) -> bool {
    match override_cfg {
        Value::Boolean(true) => true,
        Value::Map(_) => {
            let Some(whitelist) = get(override_cfg, eauth) else {
                return false;
            };
            let is_user = |v: &Value| bytes_of(v) == Some(username.as_bytes());
            match whitelist {
                Value::Array(users) => users.iter().any(is_user),
                Value::Map(users) => users.iter().any(|(k, _)| is_user(k)),
                Value::String(_) | Value::Binary(_) => is_user(whitelist),
                _ => false,
            }
        }
        _ => false,
    }
}

/// When a token minted at `now` expires: `now + requested` when the client asked for a
/// lifetime (`token_expire` in the `mk_token` load, `requested`) and
/// [`allow_custom_expire`] lets this user choose; otherwise `now + token_expire_default`
/// (the master's `token_expire`, [`DEFAULT_TOKEN_EXPIRE`] unless configured). A requested
/// lifetime that is not finite is ignored. A zero or negative one is honoured, as in Salt:
/// the token is born expired.
pub fn expire_for(
    now: f64,
    token_expire_default: f64,
    requested: Option<f64>,
    override_cfg: &Value,
    eauth: &str,
    username: &str,
) -> f64 {
    let lifetime = match requested {
        Some(r) if r.is_finite() && allow_custom_expire(override_cfg, eauth, username) => r,
        _ => token_expire_default,
    };
    now + lifetime
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::{map, s};

    const NOW: f64 = 1_700_000_000.5;

    fn expire(requested: Option<f64>, cfg: &Value, eauth: &str, user: &str) -> f64 {
        expire_for(NOW, DEFAULT_TOKEN_EXPIRE, requested, cfg, eauth, user)
    }

    fn users(names: &[&str]) -> Value {
        Value::Array(names.iter().map(|n| s(*n)).collect())
    }

    #[test]
    fn default_applies_without_override_config() {
        assert_eq!(
            expire(Some(60.0), &Value::Nil, "pam", "fred"),
            NOW + 43200.0
        );
        assert_eq!(
            expire(Some(60.0), &Value::Boolean(false), "pam", "fred"),
            NOW + 43200.0
        );
    }

    #[test]
    fn override_true_lets_anyone_choose() {
        let cfg = Value::Boolean(true);
        assert_eq!(expire(Some(60.0), &cfg, "pam", "fred"), NOW + 60.0);
        assert_eq!(expire(Some(60.0), &cfg, "ldap", "anyone"), NOW + 60.0);
    }

    #[test]
    fn override_true_without_a_request_uses_the_default() {
        assert_eq!(
            expire(None, &Value::Boolean(true), "pam", "fred"),
            NOW + 43200.0
        );
    }

    #[test]
    fn configured_default_is_used_when_no_override_applies() {
        assert_eq!(
            expire_for(NOW, 3600.0, Some(60.0), &Value::Nil, "pam", "fred"),
            NOW + 3600.0
        );
    }

    #[test]
    fn truthy_non_boolean_override_is_not_true() {
        for cfg in [Value::from(1), s("True"), users(&["fred"])] {
            assert_eq!(expire(Some(60.0), &cfg, "pam", "fred"), NOW + 43200.0);
        }
    }

    #[test]
    fn map_override_lets_listed_users_of_that_eauth_choose() {
        let cfg = map([("pam", users(&["fred", "dave"]))]);
        assert_eq!(expire(Some(60.0), &cfg, "pam", "fred"), NOW + 60.0);
        assert_eq!(expire(Some(60.0), &cfg, "pam", "dave"), NOW + 60.0);
    }

    #[test]
    fn map_override_refuses_unlisted_users() {
        let cfg = map([("pam", users(&["fred", "dave"]))]);
        assert_eq!(expire(Some(60.0), &cfg, "pam", "steve"), NOW + 43200.0);
        assert_eq!(expire(Some(60.0), &cfg, "pam", "fre"), NOW + 43200.0);
    }

    #[test]
    fn map_override_for_another_eauth_does_not_apply() {
        let cfg = map([("ldap", users(&["fred"]))]);
        assert_eq!(expire(Some(60.0), &cfg, "pam", "fred"), NOW + 43200.0);
        assert!(allow_custom_expire(&cfg, "ldap", "fred"));
    }

    #[test]
    fn map_override_with_a_map_of_users_matches_its_keys() {
        let cfg = map([("pam", map([("fred", Value::Nil)]))]);
        assert!(allow_custom_expire(&cfg, "pam", "fred"));
        assert!(!allow_custom_expire(&cfg, "pam", "dave"));
    }

    #[test]
    fn map_override_with_a_string_names_one_user_not_a_substring() {
        // Salt 3008.3 lets `fred` and `red` through for `{pam: fredx}` (substring `in`).
        let cfg = map([("pam", s("fredx"))]);
        assert!(!allow_custom_expire(&cfg, "pam", "fred"));
        assert!(!allow_custom_expire(&cfg, "pam", "red"));
        assert!(allow_custom_expire(&cfg, "pam", "fredx"));
    }

    #[test]
    fn map_override_with_a_non_iterable_value_allows_nobody() {
        for v in [Value::Nil, Value::Boolean(true), Value::from(1)] {
            let cfg = map([("pam", v)]);
            assert!(!allow_custom_expire(&cfg, "pam", "fred"));
        }
    }

    #[test]
    fn non_finite_requested_lifetime_is_ignored() {
        let cfg = Value::Boolean(true);
        for r in [f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
            assert_eq!(expire(Some(r), &cfg, "pam", "fred"), NOW + 43200.0);
        }
    }

    #[test]
    fn negative_requested_lifetime_is_honoured_as_in_salt() {
        assert_eq!(
            expire(Some(-1.0), &Value::Boolean(true), "pam", "fred"),
            NOW - 1.0
        );
    }
}
