//! The token dict (`tdata` in `LoadAuth.mk_token`).

use std::cmp::Ordering;

use halite_proto::value::{get, s, str_of};

use crate::{Error, Result, Value};

/// One eauth token, as Salt's `LoadAuth.mk_token` builds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// The token id ([`crate::new_token_id`]).
    pub token: String,
    /// Who authenticated (Salt's `load_name`: the eauth module's first `auth` argument,
    /// normally the username).
    pub name: String,
    /// The eauth module that authenticated them (`pam`, `ldap`, …).
    pub eauth: String,
    /// When the token was minted (Unix seconds).
    pub start: f64,
    /// When it expires (Unix seconds); expired when `expire < now`.
    pub expire: f64,
    /// The user's groups as the eauth backend reported them. Salt adds `groups` only when
    /// that list is non-empty (`if groups:`), so [`Token::to_value`] leaves out an empty list.
    pub groups: Option<Vec<String>>,
    /// The ACL kept in the token (`keep_acl_in_token`). `Some(Value::Nil)` is Salt's stored
    /// `None` — what every backend without an `acl()` function yields, and what makes every
    /// later use of the token fail authorisation in Salt; `None` means the key is absent.
    pub auth_list: Option<Value>,
}

impl Token {
    /// Salt's token dict, keys in Salt's order: `start`, `expire`, `name`, `eauth`, then
    /// `auth_list` (when present) and `groups` (when present and non-empty), then `token`.
    pub fn to_value(&self) -> Value {
        let mut entries = vec![
            (s("start"), Value::F64(self.start)),
            (s("expire"), Value::F64(self.expire)),
            (s("name"), s(self.name.as_str())),
            (s("eauth"), s(self.eauth.as_str())),
        ];
        if let Some(acl) = &self.auth_list {
            entries.push((s("auth_list"), acl.clone()));
        }
        if let Some(groups) = self.groups.as_ref().filter(|g| !g.is_empty()) {
            let groups = groups.iter().map(|g| s(g.as_str())).collect();
            entries.push((s("groups"), Value::Array(groups)));
        }
        entries.push((s("token"), s(self.token.as_str())));
        Value::Map(entries)
    }

    /// Reads a token dict (as [`Token::to_value`] writes it, or as stock Salt stores it).
    /// Keys may be msgpack `str` or `bin`; `start` and `expire` may be integers or floats;
    /// other keys are ignored. [`Error::Malformed`] names the first field that is missing or
    /// of the wrong type.
    pub fn from_value(v: &Value) -> Result<Token> {
        if !matches!(v, Value::Map(_)) {
            return Err(Error::Malformed("not a map".into()));
        }
        let text = |key: &str| {
            get(v, key)
                .and_then(str_of)
                .map(str::to_owned)
                .ok_or_else(|| Error::Malformed(format!("missing or non-string field {key:?}")))
        };
        let number = |key: &str| {
            get(v, key)
                .and_then(as_f64)
                .ok_or_else(|| Error::Malformed(format!("missing or non-numeric field {key:?}")))
        };
        let groups = match get(v, "groups") {
            None => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|g| str_of(g).map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| Error::Malformed("non-string entry in \"groups\"".into()))?,
            ),
            Some(_) => return Err(Error::Malformed("\"groups\" is not a list".into())),
        };
        Ok(Token {
            token: text("token")?,
            name: text("name")?,
            eauth: text("eauth")?,
            start: number("start")?,
            expire: number("expire")?,
            groups,
            auth_list: get(v, "auth_list").cloned(),
        })
    }

    /// Whether the token has expired at `now` (Salt: `expire < now`). When `expire` or
    /// `now` is not a number the token counts as expired.
    pub fn is_expired(&self, now: f64) -> bool {
        !matches!(
            self.expire.partial_cmp(&now),
            Some(Ordering::Greater | Ordering::Equal)
        )
    }
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::F64(f) => Some(*f),
        Value::F32(f) => Some(f64::from(*f)),
        Value::Integer(i) => i.as_f64(),
        // Strings are not numbers to Salt's `expire < time.time()` either.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::{decode, encode, map};

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// `salt.payload.dumps` of the dict stock Salt 3008.3's `mk_token` builds with
    /// `start=1700000000.25, expire=start+43200, name=fred, eauth=pam`, no groups, no
    /// `keep_acl_in_token` (key order taken from a real `LoadAuth.mk_token` run).
    const SALT_PLAIN: &str = "85a57374617274cb41d954fc40100000a6657870697265cb41d9552670100000a46e616d65a466726564a56561757468a370616da5746f6b656eda004030313233343536373839616263646566303132333435363738396162636465663031323334353637383961626364656630313233343536373839616263646566";

    /// The same with `auth_list=['.*', {'web*': ['test.*']}]` and `groups=['wheel', 'adm']`.
    const SALT_FULL: &str = "87a57374617274cb41d954fc40100000a6657870697265cb41d9552670100000a46e616d65a466726564a56561757468a370616da9617574685f6c69737492a22e2a81a47765622a91a6746573742e2aa667726f75707392a5776865656ca361646da5746f6b656eda004030313233343536373839616263646566303132333435363738396162636465663031323334353637383961626364656630313233343536373839616263646566";

    /// The same with `keep_acl_in_token` and a backend without `acl()`: `auth_list=None`.
    const SALT_NONE_ACL: &str = "86a57374617274cb41d954fc40100000a6657870697265cb41d9552670100000a46e616d65a466726564a56561757468a370616da9617574685f6c697374c0a5746f6b656eda004030313233343536373839616263646566303132333435363738396162636465663031323334353637383961626364656630313233343536373839616263646566";

    fn salt(hex_bytes: &str) -> Value {
        decode(&hex::decode(hex_bytes).unwrap()).unwrap()
    }

    fn plain() -> Token {
        Token {
            token: ID.into(),
            name: "fred".into(),
            eauth: "pam".into(),
            start: 1_700_000_000.25,
            expire: 1_700_043_200.25,
            groups: None,
            auth_list: None,
        }
    }

    fn keys(v: &Value) -> Vec<&str> {
        match v {
            Value::Map(m) => m.iter().filter_map(|(k, _)| str_of(k)).collect(),
            _ => vec![],
        }
    }

    #[test]
    fn to_value_is_the_dict_stock_salt_builds() {
        assert_eq!(plain().to_value(), salt(SALT_PLAIN));
        assert_eq!(
            keys(&plain().to_value()),
            ["start", "expire", "name", "eauth", "token"]
        );
    }

    #[test]
    fn to_value_puts_auth_list_then_groups_before_token_as_salt_does() {
        let t = Token {
            groups: Some(vec!["wheel".into(), "adm".into()]),
            auth_list: Some(Value::Array(vec![
                s(".*"),
                map([("web*", Value::Array(vec![s("test.*")]))]),
            ])),
            ..plain()
        };
        assert_eq!(t.to_value(), salt(SALT_FULL));
        assert_eq!(
            keys(&t.to_value()),
            [
                "start",
                "expire",
                "name",
                "eauth",
                "auth_list",
                "groups",
                "token"
            ]
        );
    }

    #[test]
    fn to_value_keeps_a_none_auth_list_as_nil() {
        let t = Token {
            auth_list: Some(Value::Nil),
            ..plain()
        };
        assert_eq!(t.to_value(), salt(SALT_NONE_ACL));
    }

    #[test]
    fn to_value_leaves_out_empty_groups() {
        let t = Token {
            groups: Some(vec![]),
            ..plain()
        };
        assert_eq!(t.to_value(), salt(SALT_PLAIN));
    }

    #[test]
    fn from_value_reads_what_stock_salt_stores() {
        assert_eq!(Token::from_value(&salt(SALT_PLAIN)).unwrap(), plain());
        let full = Token::from_value(&salt(SALT_FULL)).unwrap();
        assert_eq!(full.groups, Some(vec!["wheel".into(), "adm".into()]));
        assert_eq!(full.to_value(), salt(SALT_FULL));
        let none_acl = Token::from_value(&salt(SALT_NONE_ACL)).unwrap();
        assert_eq!(none_acl.auth_list, Some(Value::Nil));
    }

    #[test]
    fn from_value_round_trips_through_msgpack() {
        let t = Token {
            groups: Some(vec!["wheel".into()]),
            auth_list: Some(Value::Array(vec![s("test.*")])),
            ..plain()
        };
        assert_eq!(
            Token::from_value(&decode(&encode(&t.to_value())).unwrap()).unwrap(),
            t
        );
    }

    #[test]
    fn from_value_accepts_integer_times_and_bin_keys() {
        let v = Value::Map(vec![
            (Value::Binary(b"start".to_vec()), Value::from(10)),
            (Value::Binary(b"expire".to_vec()), Value::from(20)),
            (
                Value::Binary(b"name".to_vec()),
                Value::Binary(b"fred".to_vec()),
            ),
            (Value::Binary(b"eauth".to_vec()), s("pam")),
            (Value::Binary(b"token".to_vec()), s("ab")),
        ]);
        let t = Token::from_value(&v).unwrap();
        assert_eq!((t.start, t.expire, t.name.as_str()), (10.0, 20.0, "fred"));
    }

    #[test]
    fn from_value_refuses_missing_or_mistyped_fields() {
        let good = plain().to_value();
        for key in ["start", "expire", "name", "eauth", "token"] {
            let mut v = good.clone();
            halite_proto::value::remove(&mut v, key);
            assert!(
                matches!(Token::from_value(&v), Err(Error::Malformed(_))),
                "{key}"
            );
            let mut v = good.clone();
            halite_proto::value::set(&mut v, key, Value::Array(vec![]));
            assert!(
                matches!(Token::from_value(&v), Err(Error::Malformed(_))),
                "{key}"
            );
        }
        for groups in [s("wheel"), Value::Array(vec![Value::from(1)])] {
            let mut v = good.clone();
            halite_proto::value::set(&mut v, "groups", groups);
            assert!(matches!(Token::from_value(&v), Err(Error::Malformed(_))));
        }
        for v in [Value::Nil, s("x"), Value::Array(vec![])] {
            assert!(matches!(Token::from_value(&v), Err(Error::Malformed(_))));
        }
    }

    #[test]
    fn token_expires_strictly_after_its_expire_time() {
        let t = plain();
        assert!(!t.is_expired(t.expire - 1.0));
        assert!(!t.is_expired(t.expire));
        assert!(t.is_expired(t.expire + 0.001));
    }

    #[test]
    fn token_with_nan_expire_or_nan_now_counts_as_expired() {
        let t = Token {
            expire: f64::NAN,
            ..plain()
        };
        assert!(t.is_expired(0.0));
        assert!(plain().is_expired(f64::NAN));
    }
}
