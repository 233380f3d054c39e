//! The wheel on the master: the clear `wheel` command (`ClearFuncs.wheel`, what salt-api's
//! `wheel`/`wheel_async` clients and `/keys`, `WheelClient.master_call` and `salt-key
//! --eauth` send) and the host the wheel registry (`halite-wheel`) runs against — the key
//! store, the bus, the job store, the connected minions and the key index.
//!
//! The caller is known as for every clear command ([`crate::credentials`]). Then, as Salt
//! does: an eauth login or a token must be granted the function by its `@wheel`,
//! `@wheels` or `@<module>` entries (`CkMinions.wheel_check`, `halite-acl`'s
//! `check_spec`), and a `fun` that is not `module.function` is "A command invocation error
//! occurred: Check syntax."; a refusal is `{"error": {"name", "message"}}` with Salt's
//! `UserAuthenticationError`, `EauthAuthenticationError` or `TokenAuthenticationError`
//! texts. The run fires `salt/wheel/<jid>/new` and `/ret` and the answer is `{"tag":
//! "salt/wheel/<jid>", "data": {"fun", "jid", "tag", "user", "return", "success"}}`.
//!
//! Where it runs: on the request worker (a token or key caller) or the login thread (an
//! eauth login), except functions that generate RSA keys, which a key or token caller's
//! request hands to a thread of their own (a runner slot) and answers when done. An eauth
//! login's call runs where its login finished, off the request workers.
//!
//! After a call changed keys, the master re-reads its key index at once (an accepted
//! minion is a publish target right away) and, when an accepted key went away, drops its
//! session and rotates the AES key — what it does for `salt-key` changes, without firing
//! its own `salt/key` events: the wheel fired Salt's (`act: accepted`, ...).
//!
//! Deviations from Salt, each failing closed or fixing a documented bug:
//! - A local user's key that is not root's (a `publisher_acl` user) runs only what its
//!   `publisher_acl` `@wheel` entries grant; Salt checks no ACL for a key caller, so any
//!   user with entries (even `test.ping` on one minion) could accept or delete keys.
//! - A key caller's `user` is who it claims to be, not a keyword argument of the function
//!   (Salt passes it on, so every wheel call naming its user fails).
//! - A load's `__jid__` is used when it is a well-formed, unused jid (salt-api's
//!   `wheel_async` announces the jid before the call is made; Salt ignores it).
//! - A load without `fun` is refused with `SaltInvocationError` "Missing fun".

use crate::access::{Caller, Refusal};
use crate::boundary;
use crate::credentials::{AuthType, Credentials};
use crate::dispatch::{ClearCall, ClearReply, ClearReplyTo};
use crate::handlers::runner::MAX_RUNNERS;
use crate::keys::KeyChange;
use crate::Master;
use halite_acl::{SpecForm, UserAcl};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_wheel::{Registry, WheelArgs, WheelCall, WheelHost};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

/// The wheel functions (built once; the table is immutable).
fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::builtin)
}

/// `{"error": {"name", "message"}}`.
fn wheel_error(name: &str, message: &str) -> Value {
    map([("error", map([("name", s(name)), ("message", s(message))]))])
}

/// A wheel call that passed every check.
struct Approved {
    fun: String,
    args: WheelArgs,
    user: String,
    jid: String,
}

/// What to do with a request once the caller is known.
enum Next {
    /// Answer this (a refusal).
    Answer(Value),
    /// Run it.
    Run(Approved),
}

impl Master {
    /// The clear `wheel` command: `{fun, <the function's arguments> | arg and kwarg, key
    /// [, user]}`, or with `eauth`/`username`/`password` or `token` instead of the key.
    pub(crate) fn handle_wheel(&self, call: ClearCall<'_>) -> ClearReply {
        let load = call.load;
        let creds = Credentials::of(load);
        let caller = match &creds {
            Credentials::Key => self.authenticate_caller(load),
            Credentials::Token(token) => self.authenticate_token(token),
            Credentials::Eauth { .. } => {
                let (owned, c) = (load.clone(), creds.clone());
                return self.with_caller(
                    load,
                    creds,
                    call.reply_to,
                    Box::new(move |m, caller| match m.check_wheel(&owned, &c, caller) {
                        Next::Answer(v) => v,
                        Next::Run(approved) => m.run_wheel(&approved),
                    }),
                );
            }
        };
        match self.check_wheel(load, &creds, caller) {
            Next::Answer(v) => ClearReply::Send(v),
            Next::Run(approved) if registry().is_slow(&approved.fun) => {
                self.run_wheel_thread(approved, call.reply_to)
            }
            Next::Run(approved) => ClearReply::Send(self.run_wheel(&approved)),
        }
    }

    /// Everything `ClearFuncs.wheel` checks before it runs the function.
    fn check_wheel(
        &self,
        load: &Value,
        creds: &Credentials,
        caller: Result<Caller, Refusal>,
    ) -> Next {
        let caller = match caller {
            Ok(c) => c,
            Err(_) => return Next::Answer(authentication_failure(creds)),
        };
        let Some(fun) = value::get_str(load, "fun") else {
            return Next::Answer(wheel_error("SaltInvocationError", "Missing fun"));
        };
        if let Err(refusal) = self.authorize_wheel(&caller, fun, load) {
            return Next::Answer(refusal);
        }
        // A sudo caller runs as the master's user, as `ClearFuncs.wheel` does.
        let user = match &caller {
            Caller::Root(u) if u.starts_with("sudo_") => self.cfg.user.clone(),
            other => other.name().to_owned(),
        };
        let mut fields = load.clone();
        match creds {
            Credentials::Key => {
                value::remove(&mut fields, "key");
                value::remove(&mut fields, "user");
            }
            _ => Credentials::strip(&mut fields),
        }
        let fresh = self.next_jid();
        let jid = halite_wheel::requested_jid(&Host(self), load, &fresh).unwrap_or(fresh);
        Next::Run(Approved {
            fun: fun.to_owned(),
            args: WheelArgs::from_load(&fields),
            user,
            jid,
        })
    }

    /// `CkMinions.wheel_check` for eauth and token callers; the `publisher_acl` `@wheel`
    /// entries for a local user's key; nothing for root.
    fn authorize_wheel(&self, caller: &Caller, fun: &str, load: &Value) -> Result<(), Value> {
        let kwarg = value::get(load, "kwarg")
            .cloned()
            .unwrap_or(Value::Map(vec![]));
        let (decision, auth) = match caller {
            Caller::Root(_) => return Ok(()),
            Caller::Sudo(name) | Caller::User(name) => {
                let option = self.cfg.get("publisher_acl").unwrap_or(&Value::Nil);
                let (acl, _) = UserAcl::parse(option, self.access.matching);
                let acl = acl.for_user(name);
                if acl.is_empty() {
                    tracing::warn!("Authentication failure of type \"user\" occurred.");
                    return Err(wheel_error(
                        "UserAuthenticationError",
                        "Authentication failure of type \"user\" occurred",
                    ));
                }
                (acl.check_spec(fun, SpecForm::Wheel, &kwarg), "user")
            }
            Caller::External { acl, auth, .. } => {
                if !acl.is_empty() && fun.split('.').count() != 2 {
                    return Err(wheel_error(
                        "SaltInvocationError",
                        "A command invocation error occurred: Check syntax.",
                    ));
                }
                (acl.check_spec(fun, SpecForm::Wheel, &kwarg), auth.name())
            }
        };
        if decision.allowed {
            return Ok(());
        }
        let user = caller.name();
        tracing::warn!("Authentication failure of type \"{auth}\" occurred.");
        tracing::warn!("Wheel call of {fun} by user {user} denied: {decision}");
        self.events.fire(
            "halite/acl/deny",
            map([
                ("user", s(user)),
                ("fun", s(fun)),
                ("tgt", s("")),
                ("tgt_type", s("wheel")),
                ("reason", s(decision.to_string())),
            ]),
        );
        let name = match caller {
            Caller::External {
                auth: AuthType::Token,
                ..
            } => "TokenAuthenticationError",
            Caller::External { .. } => "EauthAuthenticationError",
            _ => "UserAuthenticationError",
        };
        Err(wheel_error(
            name,
            &format!("Authentication failure of type \"{auth}\" occurred for user {user}."),
        ))
    }

    /// Runs an approved call here and answers Salt's reply.
    fn run_wheel(&self, approved: &Approved) -> Value {
        let call = WheelCall {
            fun: &approved.fun,
            args: approved.args.clone(),
            user: &approved.user,
            jid: &approved.jid,
        };
        let outcome = registry().run(&Host(self), &call);
        halite_wheel::reply(&call, &outcome)
    }

    /// Runs an approved call on a thread of its own (a runner slot) and answers through
    /// `reply_to` when it is done.
    fn run_wheel_thread(&self, approved: Approved, reply_to: ClearReplyTo) -> ClearReply {
        let Some(me) = self.me.upgrade() else {
            return ClearReply::Send(wheel_error(
                "SaltClientError",
                "the master is shutting down",
            ));
        };
        if self.running_runners.fetch_add(1, Ordering::SeqCst) >= MAX_RUNNERS {
            self.running_runners.fetch_sub(1, Ordering::SeqCst);
            return ClearReply::Send(wheel_error(
                "SaltClientError",
                &format!("{MAX_RUNNERS} runner and wheel jobs are running already"),
            ));
        }
        let fun = approved.fun.clone();
        let spawned = std::thread::Builder::new()
            .name("wheel".into())
            .spawn(move || {
                // A wheel call that panics fails; its slot and its caller's reply are not
                // lost (see `crate::boundary`).
                let reply = boundary::isolate(&me.stats, format_args!("the wheel {fun}"), || {
                    me.run_wheel(&approved)
                })
                .unwrap_or_else(|| {
                    wheel_error(
                        "SaltClientError",
                        &format!("Exception occurred in wheel {fun}: it panicked"),
                    )
                });
                me.running_runners.fetch_sub(1, Ordering::SeqCst);
                reply_to.send(&reply);
            });
        match spawned {
            Ok(_) => ClearReply::Held,
            Err(e) => {
                self.running_runners.fetch_sub(1, Ordering::SeqCst);
                ClearReply::Send(wheel_error(
                    "SaltClientError",
                    &format!("cannot start a wheel thread: {e}"),
                ))
            }
        }
    }

    /// After a wheel call changed keys: the key index is re-read now, and a minion whose
    /// accepted key went away loses its session and the AES key rotates (as for
    /// `salt-key` changes). The wheel fired the `salt/key` events itself.
    fn wheel_keys_changed(&self) {
        let mut rotate = false;
        for change in self.keys.refresh() {
            if let KeyChange::Removed(id) = change {
                tracing::info!("Key for minion {id} is no longer accepted");
                self.sessions.remove(&id);
                rotate = true;
            }
        }
        if rotate {
            tracing::info!("Rotating AES key");
            self.publisher.rotate();
            self.events
                .fire("key", map([("rotate_aes_key", Value::from(true))]));
        }
    }
}

/// `check_authentication`'s error for credentials that did not authenticate.
fn authentication_failure(creds: &Credentials) -> Value {
    match creds {
        Credentials::Key => wheel_error(
            "UserAuthenticationError",
            "Authentication failure of type \"user\" occurred",
        ),
        Credentials::Token(_) => wheel_error(
            "TokenAuthenticationError",
            "Authentication failure of type \"token\" occurred.",
        ),
        Credentials::Eauth { username, .. } => wheel_error(
            "EauthAuthenticationError",
            &format!("Authentication failure of type \"eauth\" occurred for user {username}."),
        ),
    }
}

/// What a wheel function sees of the master.
struct Host<'a>(&'a Master);

impl WheelHost for Host<'_> {
    fn keys(&self) -> &halite_keystore::KeyStore {
        self.0.keys.store()
    }

    fn fire(&self, tag: &str, data: Value) {
        self.0.events.fire(tag, data);
    }

    fn connected(&self) -> Vec<String> {
        self.0
            .connected_minions()
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    fn opts(&self) -> &halite_config::MasterConfig {
        &self.0.cfg
    }

    fn jobs(&self) -> &dyn halite_jobcache::JobStore {
        self.0.job_store.as_ref()
    }

    fn keys_changed(&self) {
        self.0.wheel_keys_changed();
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::TestMaster;
    use halite_proto::auth::KeyState;
    use halite_proto::rsa::PrivateKey;
    use halite_proto::value::{self, map, s};
    use halite_proto::Value;
    use std::time::SystemTime;

    // `daemon` and `nobody` exist on every Debian system; the master writes their keys.
    const CONFIG: &str = "publisher_acl:\n  daemon:\n    - '@key'\n  nobody:\n    - test.ping\n";

    fn wheel(tm: &TestMaster, fun: &str, fields: &[(&str, Value)]) -> Value {
        let mut load = vec![(s("cmd"), s("wheel")), (s("fun"), s(fun))];
        load.extend(fields.iter().map(|(k, v)| (s(*k), v.clone())));
        tm.clear(Value::Map(load))
    }

    fn as_root(tm: &TestMaster) -> [(&'static str, Value); 2] {
        [("key", s(tm.client_key("root"))), ("user", s("root"))]
    }

    fn login(user: &str, password: &str) -> [(&'static str, Value); 3] {
        [
            ("eauth", s("file")),
            ("username", s(user)),
            ("password", s(password)),
        ]
    }

    fn data(reply: &Value) -> &Value {
        value::get(reply, "data").unwrap_or_else(|| panic!("no data in {reply}"))
    }

    fn error(reply: &Value) -> (String, String) {
        let e = value::get(reply, "error").unwrap_or_else(|| panic!("no error in {reply}"));
        (
            value::get_str(e, "name").unwrap_or("").to_owned(),
            value::get_str(e, "message").unwrap_or("").to_owned(),
        )
    }

    /// A master whose `file` backend knows alice (`@key`), bob (`test.*` only) and carol
    /// (`@wheels`).
    fn eauth_master() -> (TestMaster, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("passwords");
        std::fs::write(&file, "alice:a\nbob:b\ncarol:c\n").unwrap();
        let tm = TestMaster::new(&format!(
            "external_auth:\n  file:\n    ^filename: {}\n    alice:\n      - '@key'\n    \
             bob:\n      - test.*\n    carol:\n      - '@wheels'\n",
            file.display()
        ));
        (tm, dir)
    }

    fn pending(tm: &TestMaster, id: &str) {
        let pem = PrivateKey::generate(2048)
            .and_then(|k| k.public_key())
            .and_then(|p| p.to_pem())
            .unwrap();
        tm.master
            .keys
            .store()
            .put(id, KeyState::Pending, &pem)
            .unwrap();
    }

    #[test]
    fn a_root_key_lists_keys_with_salts_reply_and_events() {
        let tm = TestMaster::new("");
        tm.minion("web1");
        pending(&tm, "new1");
        let reply = wheel(&tm, "key.list_all", &as_root(&tm));
        let d = data(&reply);
        let jid = value::get_str(d, "jid").expect("jid").to_owned();
        assert_eq!(
            value::get_str(&reply, "tag"),
            Some(format!("salt/wheel/{jid}").as_str())
        );
        assert_eq!(
            value::get_str(d, "tag"),
            Some(format!("salt/wheel/{jid}").as_str())
        );
        assert_eq!(value::get_str(d, "fun"), Some("wheel.key.list_all"));
        assert_eq!(value::get_str(d, "user"), Some("root"));
        assert_eq!(value::get(d, "success"), Some(&Value::Boolean(true)));
        let ret = value::get(d, "return").expect("return");
        assert_eq!(
            value::get(ret, "minions"),
            Some(&Value::Array(vec![s("web1")]))
        );
        assert_eq!(
            value::get(ret, "minions_pre"),
            Some(&Value::Array(vec![s("new1")]))
        );
        assert!(tm.events.data(&format!("salt/wheel/{jid}/new")).is_some());
        let fired = tm.events.data(&format!("salt/wheel/{jid}/ret")).unwrap();
        assert_eq!(value::get(&fired, "return"), Some(ret));
    }

    #[test]
    fn bad_credentials_get_salts_authentication_errors() {
        let (tm, _dir) = eauth_master();
        let key = wheel(
            &tm,
            "key.list_all",
            &[("key", s("nope")), ("user", s("root"))],
        );
        assert_eq!(
            error(&key),
            (
                "UserAuthenticationError".into(),
                "Authentication failure of type \"user\" occurred".into()
            )
        );
        let token = wheel(&tm, "key.list_all", &[("token", s("abcdef0123"))]);
        assert_eq!(
            error(&token),
            (
                "TokenAuthenticationError".into(),
                "Authentication failure of type \"token\" occurred.".into()
            )
        );
        let eauth = wheel(&tm, "key.list_all", &login("alice", "wrong"));
        assert_eq!(
            error(&eauth),
            (
                "EauthAuthenticationError".into(),
                "Authentication failure of type \"eauth\" occurred for user alice.".into()
            )
        );
        let no_fun = tm.clear(map([
            ("cmd", s("wheel")),
            ("key", s(tm.client_key("root"))),
        ]));
        assert_eq!(error(&no_fun).0, "SaltInvocationError");
    }

    #[test]
    fn eauth_callers_need_a_wheel_or_module_entry() {
        let (tm, _dir) = eauth_master();
        let ok = wheel(&tm, "key.list_all", &login("alice", "a"));
        assert_eq!(value::get_str(data(&ok), "user"), Some("alice"));
        let other_module = wheel(&tm, "config.values", &login("alice", "a"));
        assert_eq!(
            error(&other_module),
            (
                "EauthAuthenticationError".into(),
                "Authentication failure of type \"eauth\" occurred for user alice.".into()
            )
        );
        let deny = tm.events.data("halite/acl/deny").expect("a deny event");
        assert_eq!(value::get_str(&deny, "fun"), Some("config.values"));
        let plain = wheel(&tm, "key.list_all", &login("bob", "b"));
        assert_eq!(
            error(&plain).0,
            "EauthAuthenticationError",
            "test.* grants no wheel"
        );
        let syntax = wheel(&tm, "list_all", &login("alice", "a"));
        assert_eq!(
            error(&syntax),
            (
                "SaltInvocationError".into(),
                "A command invocation error occurred: Check syntax.".into()
            )
        );
        let any = wheel(&tm, "config.values", &login("carol", "c"));
        assert_eq!(
            value::get(data(&any), "success"),
            Some(&Value::Boolean(true))
        );
    }

    #[test]
    fn a_token_caller_runs_under_its_name_and_a_requested_jid_is_kept() {
        let (tm, _dir) = eauth_master();
        let mut load = Value::Map(
            login("alice", "a")
                .iter()
                .map(|(k, v)| (s(*k), v.clone()))
                .collect(),
        );
        value::set(&mut load, "cmd", s("mk_token"));
        let token = value::get_str(&tm.clear(load), "token")
            .expect("a token")
            .to_owned();
        let jid = "20240101120000123456";
        let reply = wheel(
            &tm,
            "key.list",
            &[
                ("token", s(token)),
                ("match", s("acc")),
                ("__jid__", s(jid)),
                ("__user__", s("UNKNOWN")),
            ],
        );
        let d = data(&reply);
        assert_eq!(value::get_str(d, "user"), Some("alice"));
        assert_eq!(value::get_str(d, "jid"), Some(jid));
        assert_eq!(
            value::get(d, "return"),
            Some(&map([("minions", Value::Array(vec![]))]))
        );
    }

    #[test]
    fn a_local_users_key_runs_only_what_its_publisher_acl_wheel_entries_grant() {
        let tm = TestMaster::new(CONFIG);
        pending(&tm, "p1");
        let daemon = [("key", s(tm.client_key("daemon"))), ("user", s("root"))];
        let ok = wheel(
            &tm,
            "key.list",
            &[daemon[0].clone(), daemon[1].clone(), ("match", s("pre"))],
        );
        let d = data(&ok);
        assert_eq!(value::get_str(d, "user"), Some("daemon"), "the key's owner");
        assert_eq!(
            value::get(d, "return"),
            Some(&map([("minions_pre", Value::Array(vec![s("p1")]))]))
        );
        let denied = wheel(&tm, "config.values", &daemon);
        assert_eq!(
            error(&denied),
            (
                "UserAuthenticationError".into(),
                "Authentication failure of type \"user\" occurred for user daemon.".into()
            )
        );
        let nobody = wheel(&tm, "key.list_all", &[("key", s(tm.client_key("nobody")))]);
        assert_eq!(
            error(&nobody).0,
            "UserAuthenticationError",
            "test.ping grants no wheel"
        );
    }

    #[test]
    fn an_accepted_key_is_a_target_at_once_and_a_deleted_one_rotates_the_aes_key() {
        let tm = TestMaster::new("");
        tm.minion("web1");
        pending(&tm, "m2");
        let reply = wheel(
            &tm,
            "key.accept",
            &[as_root(&tm)[0].clone(), ("match", s("m2"))],
        );
        assert_eq!(
            value::get(data(&reply), "return"),
            Some(&map([("minions", Value::Array(vec![s("m2")]))]))
        );
        assert!(tm.master.keys.accepted_ids().contains("m2"));
        let key_events: Vec<Value> = tm
            .events
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t == "salt/key")
            .map(|(_, d)| d.clone())
            .collect();
        assert_eq!(key_events.len(), 1, "{key_events:?}");
        assert_eq!(value::get_str(&key_events[0], "act"), Some("accepted"));
        assert!(tm.events.data("key").is_none(), "no rotation for an accept");

        assert!(tm.master.sessions.get("web1", SystemTime::now()).is_some());
        wheel(
            &tm,
            "key.delete",
            &[as_root(&tm)[0].clone(), ("match", s("web1"))],
        );
        assert!(!tm.master.keys.accepted_ids().contains("web1"));
        assert!(tm.master.sessions.get("web1", SystemTime::now()).is_none());
        let rotated = tm.events.data("key").expect("the AES key rotated");
        assert_eq!(
            value::get(&rotated, "rotate_aes_key"),
            Some(&Value::Boolean(true))
        );
    }

    #[test]
    fn gen_accept_answers_the_caller_from_its_thread_and_keeps_the_private_key_off_the_bus() {
        let tm = TestMaster::new("");
        let body = value::encode(&map([
            ("enc", s("clear")),
            (
                "load",
                map([
                    ("cmd", s("wheel")),
                    ("fun", s("key.gen_accept")),
                    ("id_", s("made")),
                    ("key", s(tm.client_key("root"))),
                ]),
            ),
            ("version", Value::from(3)),
        ]));
        let peer = halite_transport::PeerId(b"api".to_vec());
        assert!(
            tm.master.handle_request(&body, &peer).is_none(),
            "key generation is not done on the request worker"
        );
        let held = tm
            .wire
            .held_reply(&peer, std::time::Duration::from_secs(60))
            .expect("the answer from the wheel thread");
        let reply = value::decode(&held).unwrap();
        let d = data(&reply);
        let ret = value::get(d, "return").unwrap();
        assert!(value::get_str(ret, "priv").is_some_and(|p| p.contains("PRIVATE KEY")));
        assert!(tm.master.keys.accepted_ids().contains("made"));
        let jid = value::get_str(d, "jid").unwrap();
        let fired = tm.events.data(&format!("salt/wheel/{jid}/ret")).unwrap();
        assert_eq!(
            value::get(&fired, "return").and_then(|r| value::get_str(r, "priv")),
            Some(halite_wheel::REDACTED)
        );
        let again = wheel(
            &tm,
            "key.gen_accept",
            &[as_root(&tm)[0].clone(), ("id_", s("made"))],
        );
        assert_eq!(
            value::get(data(&again), "return"),
            Some(&Value::Map(vec![]))
        );
    }
}
