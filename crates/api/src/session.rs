//! Sessions. In salt-api a `/login` token is a CherryPy session id mapped, in the API
//! process's memory, to the Salt eauth token; a restart of salt-api loses every session
//! (salt#49993) and a session lives 10 hours whatever `token_expire` says (salt#42622).
//! Here the session token **is** the master's eauth token: it is checked with the
//! master's `get_token` (valid while the master has it and `expire` is in the future), so
//! sessions survive restarts of `halite-api` (and of a Halite master, which keeps tokens in
//! `cachedir/tokens.redb`) and end exactly when the token does.
//!
//! The token is read from `X-Auth-Token` (which wins) or the `session_id` cookie. Answers
//! of `get_token` are cached for [`CHECK_TTL`], so a busy client costs one master round
//! trip per few seconds; a logout through this API removes the token from the cache and
//! refuses it at once ([`Sessions::revoke`]).
//!
//! Deviation (safer): the session cookie is `HttpOnly; SameSite=Lax`, and `Secure` over
//! HTTPS, and lives as long as the token (stock: no flags, 10 hours). `SameSite=Lax` keeps
//! other sites from riding the cookie with cross-site `POST`s.

use crate::link::MasterLink;
use crate::render::Failure;
use axum::http::{header, HeaderMap};
use halite_proto::value;
use halite_proto::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long an answer of `get_token` is trusted before the master is asked again.
pub const CHECK_TTL: Duration = Duration::from_secs(5);

/// Most tokens whose check is cached; when full, stale entries go, then all.
const MAX_CACHED: usize = 10_000;

/// A valid session: the eauth token and what the master says of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// The token (also the session id).
    pub token: String,
    /// The master's token data (`name`, `eauth`, `start`, `expire`, maybe `groups`).
    pub data: Value,
}

impl Session {
    /// When the token expires (seconds since the epoch).
    pub fn expire(&self) -> f64 {
        number(value::get(&self.data, "expire")).unwrap_or(0.0)
    }
}

/// A number in token data.
pub fn number(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Integer(i) => i.as_f64(),
        Value::F64(f) => Some(*f),
        Value::F32(f) => Some(f64::from(*f)),
        _ => None,
    }
}

/// Seconds since the epoch.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The token a request presents: a non-empty `X-Auth-Token`, else the `session_id`
/// cookie (`salt_token_tool`).
pub fn presented_token(headers: &HeaderMap) -> Option<String> {
    if let Some(t) = headers
        .get("x-auth-token")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        return Some(t.to_owned());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == "session_id")
        .map(|(_, v)| v.trim().trim_matches('"').to_owned())
        .filter(|v| !v.is_empty())
}

struct Cached {
    data: Value,
    checked: Instant,
}

/// The sessions of one API process.
pub struct Sessions {
    link: Arc<MasterLink>,
    cache: Mutex<HashMap<String, Cached>>,
    /// Tokens logged out through this API, with their expiry.
    revoked: Mutex<HashMap<String, f64>>,
    /// Counts logouts, so long-lived streams look at `revoked` only when it changed.
    revocations: AtomicU64,
}

impl Sessions {
    /// Sessions checked against `link`'s master.
    pub fn new(link: Arc<MasterLink>) -> Sessions {
        Sessions {
            link,
            cache: Mutex::new(HashMap::new()),
            revoked: Mutex::new(HashMap::new()),
            revocations: AtomicU64::new(0),
        }
    }

    /// The session `token` opens: `Ok(None)` when it is not a valid token (not hex, unknown
    /// to the master, expired or logged out); an error when the master cannot be asked.
    pub async fn check(&self, token: &str) -> Result<Option<Session>, Failure> {
        if !halite_token::is_token_id(token) || self.is_revoked(token) {
            return Ok(None);
        }
        let now = unix_now();
        let cached = self.cache.lock().ok().and_then(|c| {
            c.get(token)
                .filter(|e| e.checked.elapsed() < CHECK_TTL)
                .map(|e| e.data.clone())
        });
        let data = match cached {
            Some(d) => Some(d),
            None => {
                if !self.link.is_running() {
                    return Err(Failure::master_down());
                }
                let data = self.link.get_token(token).await.map_err(Failure::from)?;
                if let (Some(d), Ok(mut cache)) = (&data, self.cache.lock()) {
                    if cache.len() >= MAX_CACHED {
                        cache.retain(|_, e| e.checked.elapsed() < CHECK_TTL);
                        if cache.len() >= MAX_CACHED {
                            cache.clear();
                        }
                    }
                    cache.insert(
                        token.to_owned(),
                        Cached {
                            data: d.clone(),
                            checked: Instant::now(),
                        },
                    );
                }
                data
            }
        };
        Ok(data
            .map(|data| Session {
                token: token.to_owned(),
                data,
            })
            .filter(|s| s.expire() > now))
    }

    /// The session of a request, or salt-api's 401 "No permission" when it has none.
    pub async fn require(&self, headers: &HeaderMap) -> Result<Session, Failure> {
        let token = presented_token(headers).ok_or_else(Failure::no_session)?;
        self.check(&token).await?.ok_or_else(Failure::no_session)
    }

    /// Refuses `token` from now on in this process (a logout), until `expire` passes.
    pub fn revoke(&self, token: &str, expire: f64) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.remove(token);
        }
        if let Ok(mut revoked) = self.revoked.lock() {
            let now = unix_now();
            revoked.retain(|_, exp| *exp > now);
            revoked.insert(token.to_owned(), expire);
        }
        self.revocations.fetch_add(1, Ordering::Relaxed);
    }

    /// How many logouts this process has seen (changes when [`Sessions::revoke`] runs).
    pub fn revocations(&self) -> u64 {
        self.revocations.load(Ordering::Relaxed)
    }

    /// Whether `token` was logged out through this API.
    pub fn is_revoked(&self, token: &str) -> bool {
        self.revoked
            .lock()
            .map(|r| r.contains_key(token))
            .unwrap_or(false)
    }

    /// Drops the cached check of `token`, so the next check asks the master.
    pub fn forget(&self, token: &str) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.remove(token);
        }
    }
}

/// The `Set-Cookie` value of a session that ends at `expire` (epoch seconds).
pub fn session_cookie(token: &str, expire: f64, secure: bool) -> String {
    let now = unix_now();
    let max_age = (expire - now).max(0.0).floor();
    let when = chrono::DateTime::from_timestamp(expire.max(0.0) as i64, 0).unwrap_or_default();
    format!(
        "session_id={token}; expires={}; Max-Age={max_age:.0}; Path=/; HttpOnly; SameSite=Lax{}",
        when.format("%a, %d %b %Y %H:%M:%S GMT"),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn expired_cookie(secure: bool) -> String {
    format!(
        "session_id=; expires=Thu, 01 Jan 1970 00:00:00 GMT; Max-Age=0; Path=/; HttpOnly; \
         SameSite=Lax{}",
        if secure { "; Secure" } else { "" }
    )
}

/// `/login`'s `perms`: `salt.netapi.sum_permissions` then `sorted_permissions` over the
/// master config's `external_auth[<eauth>]` — the user's entry, the `'*'` entry and the
/// `<group>%` entries of the token's groups — strings first (sorted, without duplicates),
/// then the other entries (without duplicates) in the order of their Python `repr`. With
/// `rest` and a token `auth_list`, or `django` with `^model`, the token's `auth_list`.
pub fn perms(external_auth: Option<&Value>, token: &Value) -> Value {
    let eauth_name = value::get_str(token, "eauth").unwrap_or("");
    let backend = external_auth
        .and_then(|ea| value::get(ea, eauth_name))
        .cloned()
        .unwrap_or(Value::Nil);
    let auth_list = value::get(token, "auth_list");
    if (eauth_name == "rest" && auth_list.is_some())
        || (eauth_name == "django" && value::get(&backend, "^model").is_some())
    {
        return auth_list.cloned().unwrap_or(Value::Array(vec![]));
    }
    let mut entries: Vec<Value> = Vec::new();
    let mut add = |key: &str| {
        if let Some(Value::Array(list)) = value::get(&backend, key) {
            entries.extend(list.iter().cloned());
        }
    };
    add(value::get_str(token, "name").unwrap_or(""));
    add("*");
    if let (Some(Value::Array(groups)), Value::Map(keys)) = (value::get(token, "groups"), &backend)
    {
        for (k, _) in keys {
            let Some(group) = value::str_of(k).and_then(|k| k.strip_suffix('%')) else {
                continue;
            };
            if groups.iter().any(|g| value::str_of(g) == Some(group)) {
                add(&format!("{group}%"));
            }
        }
    }
    let mut strings: Vec<String> = Vec::new();
    let mut others: Vec<Value> = Vec::new();
    for e in entries {
        match value::str_of(&e) {
            Some(text) => {
                if !strings.iter().any(|s| s == text) {
                    strings.push(text.to_owned());
                }
            }
            None => {
                if !others.contains(&e) {
                    others.push(e);
                }
            }
        }
    }
    strings.sort();
    others.sort_by_cached_key(halite_output::py_repr);
    if strings.is_empty() && others.is_empty() {
        // No entry at all: salt-api answers `perms or {}`.
        return Value::Map(vec![]);
    }
    Value::Array(strings.into_iter().map(Value::from).chain(others).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use halite_proto::value::{map, s};

    #[test]
    fn the_header_wins_over_the_cookie() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; session_id=abc"),
        );
        assert_eq!(presented_token(&h).as_deref(), Some("abc"));
        h.insert("x-auth-token", HeaderValue::from_static("def"));
        assert_eq!(presented_token(&h).as_deref(), Some("def"));
        h.insert("x-auth-token", HeaderValue::from_static(""));
        assert_eq!(
            presented_token(&h).as_deref(),
            Some("abc"),
            "an empty header is none"
        );
        assert_eq!(presented_token(&HeaderMap::new()), None);
    }

    #[test]
    fn perms_sum_the_users_the_wildcard_and_group_entries() {
        let ea = halite_config::yaml::load(
            "pam:\n  alice: [test.*, '@runner', {'web*': [test.ping]}]\n  '*': [grains.items, test.*]\n  \
             admins%: ['@wheel']\n  others%: [x.y]\n",
        )
        .unwrap();
        let token = map([
            ("name", s("alice")),
            ("eauth", s("pam")),
            ("groups", Value::Array(vec![s("admins")])),
        ]);
        assert_eq!(
            perms(Some(&ea), &token),
            Value::Array(vec![
                s("@runner"),
                s("@wheel"),
                s("grains.items"),
                s("test.*"),
                map([("web*", Value::Array(vec![s("test.ping")]))]),
            ])
        );
        let nobody = map([("name", s("bob")), ("eauth", s("file"))]);
        assert_eq!(perms(Some(&ea), &nobody), Value::Map(vec![]));
        let rest = map([
            ("name", s("bob")),
            ("eauth", s("rest")),
            ("auth_list", Value::Array(vec![s("a.*")])),
        ]);
        assert_eq!(perms(None, &rest), Value::Array(vec![s("a.*")]));
    }

    #[test]
    fn cookies_carry_the_token_and_its_lifetime() {
        let c = session_cookie("ab12", unix_now() + 100.0, false);
        assert!(c.starts_with("session_id=ab12; expires="), "{c}");
        assert!(c.contains("Max-Age=99") || c.contains("Max-Age=100"), "{c}");
        assert!(c.contains("Path=/; HttpOnly; SameSite=Lax") && !c.contains("Secure"));
        assert!(session_cookie("x", 0.0, true).ends_with("; Secure"));
        assert!(expired_cookie(false).contains("Max-Age=0"));
    }
}
