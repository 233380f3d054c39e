//! How a clear request proves who sent it (salt-semantics.md §2.1, §2.6, §2.7): a local
//! user's key, an `external_auth` login, or an eauth token — Salt's `_prep_auth_info` and
//! `LoadAuth.check_authentication` — and the `mk_token`/`get_token` commands.
//!
//! A login runs on the master's login pool ([`crate::logins`]), never
//! on a request worker: PAM blocks, and every failure is answered only after a padded
//! delay. The handler holds its reply ([`ClearReply::Held`]) and finishes on the pool. Keys
//! and tokens are checked in place (a token is one read of the embedded store).
//!
//! Differences from Salt, each failing closed or fixing a documented bug:
//! - `keep_acl_in_token` stores the entries the login's ACL was built from, for every
//!   backend; Salt stores `None` for file and PAM and then denies every token request.
//! - A token that is not hexadecimal is refused before the store is read (Salt's localfs
//!   store makes a file name of it).
//! - Credentials never reach the job cache or the bus: `password`, `token`, `username` and
//!   `eauth` are taken out of a publish's `kwargs` once it is authenticated (Salt saves the
//!   password in the job's load).

use crate::access::{Caller, Refusal};
use crate::dispatch::{ClearCall, ClearReply, ClearReplyTo};
use crate::logins::LoginError;
use crate::Master;
use halite_acl::Acl;
use halite_eauth::Identity;
use halite_metrics::ClientAuth;
use halite_proto::value::{self, s};
use halite_proto::Value;
use halite_token::Token;
use std::sync::Arc;

/// How a request authenticates (`_prep_auth_info`: `token` wins over `eauth`; neither is
/// the local-user key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Credentials {
    /// The load's `key`.
    Key,
    /// An eauth token.
    Token(String),
    /// An `external_auth` login.
    Eauth {
        eauth: String,
        username: String,
        password: String,
    },
}

/// The auth type Salt names in its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthType {
    /// `external_auth` credentials.
    Eauth,
    /// An eauth token.
    Token,
}

impl AuthType {
    /// `eauth` or `token`.
    pub fn name(self) -> &'static str {
        match self {
            AuthType::Eauth => "eauth",
            AuthType::Token => "token",
        }
    }

    /// Salt's error name for a runner refusal.
    pub fn error_name(self) -> &'static str {
        match self {
            AuthType::Eauth => "EauthAuthenticationError",
            AuthType::Token => "TokenAuthenticationError",
        }
    }
}

/// Fields that carry credentials, never saved with a job.
const SECRET_FIELDS: [&str; 4] = ["password", "token", "username", "eauth"];

impl Credentials {
    /// The credentials `fields` carry (a publish's `kwargs`, a runner's load).
    pub(crate) fn of(fields: &Value) -> Credentials {
        let text = |k| value::get(fields, k).map(|v| value::str_of(v).unwrap_or("").to_owned());
        if let Some(token) = text("token") {
            return Credentials::Token(token);
        }
        match text("eauth") {
            Some(eauth) => Credentials::Eauth {
                eauth,
                username: text("username").unwrap_or_else(|| "UNKNOWN".to_owned()),
                password: text("password").unwrap_or_default(),
            },
            None => Credentials::Key,
        }
    }

    /// Removes the credential fields from `fields`.
    pub(crate) fn strip(fields: &mut Value) {
        for f in SECRET_FIELDS {
            value::remove(fields, f);
        }
    }
}

/// What a caller hands on once the request is authenticated: the master, and the caller or
/// why there is none.
type Then = Box<dyn FnOnce(&Master, Result<Caller, Refusal>) -> Value + Send>;

impl Master {
    /// Authenticates `creds` and runs `then` with the outcome: in place for keys and
    /// tokens, on the login pool for an eauth login (the reply is then held).
    pub(crate) fn with_caller(
        &self,
        load: &Value,
        creds: Credentials,
        reply_to: ClearReplyTo,
        then: Then,
    ) -> ClearReply {
        match creds {
            Credentials::Key => ClearReply::Send(then(self, self.authenticate_caller(load))),
            Credentials::Token(token) => {
                ClearReply::Send(then(self, self.authenticate_token(&token)))
            }
            Credentials::Eauth {
                eauth,
                username,
                password,
            } => {
                let Some(me) = self.me.upgrade() else {
                    return ClearReply::Send(then(self, Err(Refusal::Authentication)));
                };
                let e = eauth.clone();
                self.logins.login(
                    &eauth,
                    &username,
                    &password,
                    Box::new(move |outcome| {
                        let caller = match outcome {
                            Ok(id) => Ok(me.external_caller(&e, id, AuthType::Eauth)),
                            Err(err) => Err(me.login_refused(&e, err)),
                        };
                        reply_to.send(&then(&me, caller));
                    }),
                );
                ClearReply::Held
            }
        }
    }

    /// Salt's log lines for a failed login.
    fn login_refused(&self, eauth: &str, err: LoginError) -> Refusal {
        if err == LoginError::NotEnabled {
            tracing::warn!("The eauth system \"{eauth}\" is not enabled");
        }
        tracing::warn!("Authentication failure of type \"eauth\" occurred.");
        self.metrics.count_client_auth_failure(ClientAuth::Eauth);
        if err == LoginError::Busy {
            tracing::warn!("Too many eauth logins are waiting; one was refused");
        }
        Refusal::Authentication
    }

    /// The caller an identity from backend `eauth` is, with its ACL.
    fn external_caller(&self, eauth: &str, id: Identity, auth: AuthType) -> Caller {
        let acl = self.eauth_acl(eauth, &id.name, id.groups.as_deref());
        Caller::External {
            name: id.name,
            auth,
            acl: Arc::new(acl),
        }
    }

    /// `LoadAuth.authenticate_token`: a stored, unexpired token of a backend that is still
    /// enabled. Its ACL is the one kept in it (`keep_acl_in_token`), else the backend's
    /// entries for its name and groups now.
    pub(crate) fn authenticate_token(&self, token: &str) -> Result<Caller, Refusal> {
        let refused = || {
            tracing::warn!("Authentication failure of type \"token\" occurred.");
            self.metrics.count_client_auth_failure(ClientAuth::Token);
            Refusal::Authentication
        };
        if !halite_token::is_token_id(token) {
            tracing::info!("Invalid token: not hexadecimal; refused without a lookup");
            return Err(refused());
        }
        // A store error was logged by the store.
        let found = self.tokens.get(token, unix_now()).unwrap_or_default();
        let Some(t) = found.filter(|t| self.eauth.is_enabled(&t.eauth)) else {
            return Err(refused());
        };
        let acl = match (&t.auth_list, self.keep_acl_in_token) {
            (Some(list @ Value::Array(_)), true) => {
                let (acl, warnings) = Acl::parse(list, self.access.matching, "token auth_list");
                for w in warnings {
                    tracing::warn!("{w}");
                }
                acl
            }
            _ => self.eauth_acl(&t.eauth, &t.name, t.groups.as_deref()),
        };
        Ok(Caller::External {
            name: t.name,
            auth: AuthType::Token,
            acl: Arc::new(acl),
        })
    }

    /// The clear `mk_token` command: an eauth login that answers a new token (Salt's dict),
    /// or `""` when the login fails.
    pub(crate) fn handle_mk_token(&self, call: ClearCall<'_>) -> ClearReply {
        let load = call.load;
        let eauth = value::get_str(load, "eauth").unwrap_or("").to_owned();
        let username = value::get(load, "username")
            .and_then(value::str_of)
            .unwrap_or("")
            .to_owned();
        let password = value::get(load, "password")
            .and_then(value::str_of)
            .unwrap_or("")
            .to_owned();
        let requested = value::get(load, "token_expire").and_then(number);
        let Some(me) = self.me.upgrade() else {
            return ClearReply::Send(s(""));
        };
        let e = eauth.clone();
        self.logins.login(
            &eauth,
            &username,
            &password,
            Box::new(move |outcome| {
                let reply = match outcome {
                    Ok(id) => me.mint_token(&e, id, requested),
                    Err(err) => {
                        me.login_refused(&e, err);
                        s("")
                    }
                };
                call.reply_to.send(&reply);
            }),
        );
        ClearReply::Held
    }

    /// A new token for `id`, stored; Salt's token dict, or `""` when it cannot be stored.
    fn mint_token(&self, eauth: &str, id: Identity, requested: Option<f64>) -> Value {
        let now = unix_now();
        let expire = halite_token::expire_for(
            now,
            self.token_expire,
            requested,
            self.cfg
                .get("token_expire_user_override")
                .unwrap_or(&Value::Nil),
            eauth,
            &id.name,
        );
        let groups = id.groups.clone().filter(|g| !g.is_empty());
        let auth_list = self.keep_acl_in_token.then(|| {
            self.eauth.acl(eauth).map_or(Value::Array(vec![]), |a| {
                a.entries_for(&id.name, id.groups.as_deref().unwrap_or(&[]))
            })
        });
        let token = match halite_token::new_token_id(&self.cfg.hash_type) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!("Cannot mk_token: {e}");
                return s("");
            }
        };
        let token = Token {
            token,
            name: id.name,
            eauth: eauth.to_owned(),
            start: now,
            expire,
            groups,
            auth_list,
        };
        match self.tokens.put(&token) {
            Ok(()) => token.to_value(),
            Err(e) => {
                tracing::error!("Cannot mk_token from tokens store: {e}");
                s("")
            }
        }
    }

    /// The clear `get_token` command: the token's dict, `{}` when it is unknown, expired or
    /// not hexadecimal, `False` without a `token`.
    pub(crate) fn handle_get_token(&self, call: ClearCall<'_>) -> ClearReply {
        let Some(token) = value::get(call.load, "token") else {
            return ClearReply::Send(Value::Boolean(false));
        };
        let token = value::str_of(token).unwrap_or("");
        let found = if halite_token::is_token_id(token) {
            self.tokens.get(token, unix_now()).ok().flatten()
        } else {
            tracing::info!("Invalid token: not hexadecimal; refused without a lookup");
            None
        };
        ClearReply::Send(found.map_or(Value::Map(vec![]), |t| t.to_value()))
    }

    /// The clear `rm_token` command (what Salt's `Resolver.rm_token` sends): removes the
    /// token, so a logout through the HTTP API revokes it for every client, across
    /// restarts. Knowing a token is what it takes to use it, so it is also what it takes to
    /// revoke it. Answers whether a token was removed. A Halite extension: a stock master
    /// has no such command (stock salt-api deletes the token file on the master's disk).
    pub(crate) fn handle_rm_token(&self, call: ClearCall<'_>) -> ClearReply {
        let token = value::get(call.load, "token")
            .and_then(value::str_of)
            .unwrap_or("");
        if !halite_token::is_token_id(token) {
            return ClearReply::Send(Value::Boolean(false));
        }
        match self.tokens.remove(token) {
            Ok(removed) => ClearReply::Send(Value::Boolean(removed)),
            Err(e) => {
                tracing::warn!("Cannot remove an eauth token: {e}");
                ClearReply::Send(Value::Boolean(false))
            }
        }
    }

    /// The ACL backend `eauth` gives `name` in `groups` (empty when it is not enabled).
    fn eauth_acl(&self, eauth: &str, name: &str, groups: Option<&[String]>) -> Acl {
        match self.eauth.acl(eauth) {
            Some(a) => a.for_identity(name, groups.unwrap_or(&[])),
            None => Acl::parse(&Value::Array(vec![]), self.access.matching, "").0,
        }
    }

    /// Removes expired tokens (every `loop_interval`, as Salt's maintenance process).
    pub(crate) fn clean_expired_tokens(&self) {
        match self.tokens.clean_expired(unix_now()) {
            Ok(0) => {}
            Ok(n) => tracing::debug!("Removed {n} expired eauth tokens"),
            Err(e) => tracing::warn!("Cannot clean expired eauth tokens: {e}"),
        }
    }
}

/// A number in a load (`token_expire`), integer or float.
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => i.as_f64(),
        Value::F32(f) => Some(f64::from(*f)),
        Value::F64(f) => Some(*f),
        _ => None,
    }
}

/// Seconds since the Unix epoch, as Salt stores token times.
pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use crate::testing::TestMaster;
    use halite_jobcache::JobStore;
    use halite_proto::value::{self, map, s};
    use halite_proto::Value;
    use std::time::{Duration, Instant};

    /// A master whose `file` backend knows alice (`test.*` on `web*`, `@jobs`) and bob
    /// (nothing), with `extra` config, and minions web1 and db1.
    fn eauth_master(extra: &str) -> (TestMaster, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("passwords");
        std::fs::write(&file, "alice:wonderland\nbob:builder\n").unwrap();
        let tm = TestMaster::new(&format!(
            "external_auth:\n  file:\n    ^filename: {}\n    alice:\n      - 'web*':\n        \
             - test.*\n      - '@jobs'\n    bob: []\n{extra}",
            file.display()
        ));
        tm.minion("web1");
        tm.minion("db1");
        (tm, dir)
    }

    fn publish(tm: &TestMaster, tgt: &str, fun: &str, kwargs: Value) -> Value {
        tm.clear(map([
            ("cmd", s("publish")),
            ("tgt", s(tgt)),
            ("tgt_type", s("glob")),
            ("fun", s(fun)),
            ("arg", Value::Array(vec![])),
            ("ret", s("")),
            ("jid", s("")),
            ("key", s("")),
            ("user", s("root")),
            ("kwargs", kwargs),
        ]))
    }

    fn login(user: &str, password: &str) -> Value {
        map([
            ("eauth", s("file")),
            ("username", s(user)),
            ("password", s(password)),
        ])
    }

    fn error_name(reply: &Value) -> Option<&str> {
        value::get(reply, "error").and_then(|e| value::get_str(e, "name"))
    }

    fn jid_of(reply: &Value) -> String {
        value::get(reply, "load")
            .and_then(|l| value::get_str(l, "jid"))
            .unwrap_or_else(|| panic!("not published: {reply}"))
            .to_owned()
    }

    fn mk_token(tm: &TestMaster, user: &str, password: &str) -> Value {
        let mut load = login(user, password);
        value::set(&mut load, "cmd", s("mk_token"));
        tm.clear(load)
    }

    #[test]
    fn an_eauth_login_publishes_as_the_eauth_user_and_no_credential_is_saved() {
        let (tm, _dir) = eauth_master("");
        let reply = publish(&tm, "web*", "test.ping", login("alice", "wonderland"));
        let jid = jid_of(&reply);
        let new = tm.events.data(&format!("salt/job/{jid}/new")).unwrap();
        assert_eq!(value::get_str(&new, "user"), Some("alice"));
        let saved = tm.store.get_load(&jid).unwrap().unwrap();
        let text = format!("{:?}", saved);
        assert!(!text.contains("wonderland"), "password saved: {text}");
        assert!(!text.contains("username"), "credentials saved: {text}");
    }

    #[test]
    fn an_eauth_user_is_held_to_its_entries() {
        let (tm, _dir) = eauth_master("");
        let outside = publish(&tm, "db1", "test.ping", login("alice", "wonderland"));
        assert_eq!(
            error_name(&outside),
            Some("AuthorizationError"),
            "{outside}"
        );
        let other_fun = publish(&tm, "web1", "cmd.run", login("alice", "wonderland"));
        assert_eq!(error_name(&other_fun), Some("AuthorizationError"));
        // Salt: a user with no entries is not authorised (rather than unauthenticated).
        let empty = publish(&tm, "web1", "test.ping", login("bob", "builder"));
        assert_eq!(error_name(&empty), Some("AuthorizationError"));
        let deny = tm.events.data("halite/acl/deny").unwrap();
        assert_eq!(value::get_str(&deny, "user"), Some("alice"));
    }

    #[test]
    fn a_wrong_password_is_refused_after_the_failure_delay() {
        let (tm, _dir) = eauth_master("");
        let started = Instant::now();
        let reply = publish(&tm, "web1", "test.ping", login("alice", "wrong"));
        assert_eq!(error_name(&reply), Some("AuthenticationError"), "{reply}");
        // Salt's initial max_fail is 1 s, padded to 0.75–1.25 of it.
        assert!(started.elapsed() >= Duration::from_millis(700));
        let unknown = publish(&tm, "web1", "test.ping", login("mallory", "x"));
        assert_eq!(error_name(&unknown), Some("AuthenticationError"));
    }

    #[test]
    fn a_backend_that_is_not_enabled_is_refused_at_once() {
        let (tm, _dir) = eauth_master("");
        let mut creds = login("alice", "wonderland");
        value::set(&mut creds, "eauth", s("pam"));
        let started = Instant::now();
        let reply = publish(&tm, "web1", "test.ping", creds);
        assert_eq!(error_name(&reply), Some("AuthenticationError"));
        assert!(started.elapsed() < Duration::from_millis(500));
    }

    #[test]
    fn failed_logins_hold_no_request_worker_while_they_wait() {
        let (tm, _dir) = eauth_master("");
        let started = Instant::now();
        // Eight workers' worth of failures in flight, then a key-less ping answers at once.
        let body = |load: Value| {
            value::encode(&map([
                ("enc", s("clear")),
                ("load", load),
                ("version", Value::from(3)),
            ]))
        };
        for n in 0..64u8 {
            let mut load = login("alice", "wrong");
            value::set(&mut load, "cmd", s("mk_token"));
            let peer = halite_transport::PeerId(vec![n]);
            assert!(tm.master.handle_request(&body(load), &peer).is_none());
        }
        let ping = tm.master.handle_request(
            &body(map([("cmd", s("ping"))])),
            &halite_transport::PeerId(vec![]),
        );
        assert!(ping.is_some());
        assert!(started.elapsed() < Duration::from_millis(500));
        for n in 0..64u8 {
            let peer = halite_transport::PeerId(vec![n]);
            let reply = tm.wire.held_reply(&peer, Duration::from_secs(10)).unwrap();
            assert_eq!(value::decode(&reply).unwrap(), s(""));
        }
    }

    #[test]
    fn a_token_authenticates_publishes_and_runners_until_it_expires() {
        let (tm, _dir) = eauth_master("token_expire: 3600\n");
        let token = mk_token(&tm, "alice", "wonderland");
        let id = value::get_str(&token, "token").unwrap().to_owned();
        assert!(halite_token::is_token_id(&id) && id.len() == 64, "{token}");
        assert_eq!(value::get_str(&token, "name"), Some("alice"));
        assert_eq!(value::get_str(&token, "eauth"), Some("file"));
        let got = tm.clear(map([("cmd", s("get_token")), ("token", s(id.clone()))]));
        assert_eq!(got, token);

        let by_token = map([("token", s(id.clone()))]);
        let jid = jid_of(&publish(&tm, "web1", "test.ping", by_token.clone()));
        let new = tm.events.data(&format!("salt/job/{jid}/new")).unwrap();
        assert_eq!(value::get_str(&new, "user"), Some("alice"));
        let denied = publish(&tm, "db1", "test.ping", by_token);
        assert_eq!(error_name(&denied), Some("AuthorizationError"));

        let runner = |fun: &str| {
            tm.clear(map([
                ("cmd", s("runner")),
                ("fun", s(fun)),
                ("kwarg", Value::Map(vec![])),
                ("token", s(id.clone())),
            ]))
        };
        assert!(value::get_str(&runner("jobs.list_jobs"), "jid").is_some());
        let refused = runner("manage.up");
        assert_eq!(
            value::get(&refused, "error"),
            Some(&map([
                ("name", s("TokenAuthenticationError")),
                (
                    "message",
                    s("Authentication failure of type \"token\" occurred for user alice.")
                ),
            ]))
        );

        // Expired: refused, and gone from the store.
        let mut stale = halite_token::Token::from_value(&token).unwrap();
        stale.expire = super::unix_now() - 1.0;
        tm.master.tokens.put(&stale).unwrap();
        let expired = publish(&tm, "web1", "test.ping", map([("token", s(id.clone()))]));
        assert_eq!(error_name(&expired), Some("AuthenticationError"));
        assert_eq!(tm.master.tokens.len().unwrap(), 0);
    }

    #[test]
    fn rm_token_revokes_a_token_for_every_later_request() {
        let (tm, _dir) = eauth_master("token_expire: 3600\n");
        let token = mk_token(&tm, "alice", "wonderland");
        let id = value::get_str(&token, "token").unwrap().to_owned();
        let other = mk_token(&tm, "alice", "wonderland");
        let rm = |t: Value| tm.clear(map([("cmd", s("rm_token")), ("token", t)]));
        // Only a well-formed token is looked for; nothing else is touched.
        for bad in [s("../../etc/passwd"), s(""), Value::from(7)] {
            assert_eq!(rm(bad), Value::Boolean(false));
        }
        assert_eq!(tm.master.tokens.len().unwrap(), 2);
        assert_eq!(rm(s(id.clone())), Value::Boolean(true));
        assert_eq!(rm(s(id.clone())), Value::Boolean(false), "already gone");
        let got = tm.clear(map([("cmd", s("get_token")), ("token", s(id.clone()))]));
        assert_eq!(got, Value::Map(vec![]));
        let refused = publish(&tm, "web1", "test.ping", map([("token", s(id))]));
        assert_eq!(error_name(&refused), Some("AuthenticationError"));
        // The other session is untouched.
        let other_id = value::get_str(&other, "token").unwrap().to_owned();
        let jid = jid_of(&publish(
            &tm,
            "web1",
            "test.ping",
            map([("token", s(other_id))]),
        ));
        assert!(!jid.is_empty());
    }

    #[test]
    fn tokens_that_are_not_hex_or_unknown_are_refused() {
        let (tm, _dir) = eauth_master("");
        for bad in ["../../etc/passwd", "", "ABCDEF", &"a".repeat(129)] {
            let reply = publish(&tm, "web1", "test.ping", map([("token", s(bad))]));
            assert_eq!(error_name(&reply), Some("AuthenticationError"), "{bad}");
            let got = tm.clear(map([("cmd", s("get_token")), ("token", s(bad))]));
            assert_eq!(got, Value::Map(vec![]), "{bad}");
        }
        let unknown = publish(&tm, "web1", "test.ping", map([("token", s("ab12"))]));
        assert_eq!(error_name(&unknown), Some("AuthenticationError"));
        let none = tm.clear(map([("cmd", s("get_token"))]));
        assert_eq!(none, Value::Boolean(false));
    }

    #[test]
    fn keep_acl_in_token_stores_the_entries_and_the_token_uses_them() {
        let (tm, _dir) = eauth_master("keep_acl_in_token: True\n");
        let token = mk_token(&tm, "alice", "wonderland");
        let list = value::get(&token, "auth_list").unwrap();
        assert_eq!(
            list,
            &Value::Array(vec![
                map([("web*", Value::Array(vec![s("test.*")]))]),
                s("@jobs"),
            ])
        );
        let id = value::get_str(&token, "token").unwrap();
        let reply = publish(&tm, "web1", "test.ping", map([("token", s(id))]));
        jid_of(&reply);
    }

    #[test]
    fn runner_logins_get_salts_eauth_errors() {
        let (tm, _dir) = eauth_master("");
        let runner = |fun: &str, password: &str| {
            let mut load = login("alice", password);
            value::set(&mut load, "cmd", s("runner"));
            value::set(&mut load, "fun", s(fun));
            tm.clear(load)
        };
        assert!(value::get_str(&runner("jobs.list_jobs", "wonderland"), "jid").is_some());
        let expected = Some(map([
            ("name", s("EauthAuthenticationError")),
            (
                "message",
                s("Authentication failure of type \"eauth\" occurred for user alice."),
            ),
        ]));
        assert_eq!(
            value::get(&runner("manage.up", "wonderland"), "error").cloned(),
            expected
        );
        assert_eq!(
            value::get(&runner("jobs.list_jobs", "nope"), "error").cloned(),
            expected
        );
    }
}
