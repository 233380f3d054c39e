//! Who may publish: local-user keys, `publisher_acl`, `publisher_acl_blacklist` and
//! `sudo_acl` (salt-semantics.md §2.1–§2.5), decided with `halite-acl`.
//!
//! **Local-user keys.** At start the master writes `cachedir/.<user>_key` (0600, owned by
//! that user) for its own user, root, the user it runs as, and every local user a
//! `publisher_acl` key names or matches (`client_acl_verify`: users the user database does
//! not know get no key). A presented key authenticates exactly one user, its owner, compared
//! in constant time; the job's `user` is that owner. Only a key of root or the master's own
//! user may name another user in the load (`sudo salt` sends root's key and `sudo_<name>`).
//! Salt instead accepts any stored key when the load claims `root` or the master's user, so
//! any ACL user can publish as root by editing one field; Halite does not.
//!
//! **What is opened to ACL users.** When `publisher_acl` is set, `sock_dir` becomes
//! traversable (0755) and `master_event_pub.ipc` connectable by every local user (the
//! stream of master events, which is how `salt` and `halite` follow returns, and which
//! Salt's docs open with a manual `chmod`); `master_event_pull.ipc`, which fires events,
//! stays owner-only. `cachedir` is 0755 (its key and session files are 0600).

use crate::credentials::AuthType;
use crate::Master;
use halite_acl::{Acl, Blacklist, Decision, Matching, Request, UserAcl};
use halite_config::MasterConfig;
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use std::sync::Arc;

/// The parsed access-control options.
pub struct AccessControl {
    /// `acl_regex_match`.
    pub(crate) matching: Matching,
    acl: Option<UserAcl>,
    blacklist: Option<Blacklist>,
    sudo_acl: bool,
}

/// Who a publish authenticated as.
#[derive(Debug, Clone)]
pub enum Caller {
    /// Root, the master's user, or a user `sudo` made root: no ACL applies.
    Root(String),
    /// A `sudo_<name>` caller restricted to `<name>`'s `publisher_acl` entries (`sudo_acl`).
    Sudo(String),
    /// A local user whose key matched: only its `publisher_acl` entries.
    User(String),
    /// An `external_auth` user, logged in or through a token: the ACL of its login.
    External {
        /// The eauth user name (the job's `user`).
        name: String,
        /// How it authenticated.
        auth: AuthType,
        /// Its entries.
        acl: Arc<Acl>,
    },
}

impl Caller {
    /// The job's `user`.
    pub fn name(&self) -> &str {
        match self {
            Caller::Root(n) | Caller::Sudo(n) | Caller::User(n) => n,
            Caller::External { name, .. } => name,
        }
    }

    /// The auth type Salt's log lines name.
    fn auth_name(&self) -> &'static str {
        match self {
            Caller::External { auth, .. } => auth.name(),
            _ => "user",
        }
    }
}

/// Why a publish or runner call was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The key matched nobody, or the user has no ACL entries.
    Authentication,
    /// Blacklisted, or the ACL denies the call.
    Authorization(String),
}

impl Refusal {
    /// Salt's reply.
    pub fn reply(&self) -> Value {
        let (name, message) = match self {
            Refusal::Authentication => ("AuthenticationError", "Authentication error occurred."),
            Refusal::Authorization(_) => ("AuthorizationError", "Authorization error occurred."),
        };
        map([("error", map([("name", s(name)), ("message", s(message))]))])
    }
}

impl AccessControl {
    /// Parses the options; a malformed `publisher_acl` or blacklist is a startup error
    /// naming the option.
    pub fn from_config(cfg: &MasterConfig) -> Result<AccessControl, crate::Error> {
        let matching =
            Matching::from_config_value(cfg.get("acl_regex_match").unwrap_or(&Value::Nil))
                .map_err(|e| crate::Error::Config(e.to_string()))?;
        let acl = match cfg.get("publisher_acl") {
            None | Some(Value::Nil) => None,
            Some(v @ Value::Map(m)) if !m.is_empty() => {
                let (acl, warnings) = UserAcl::parse(v, matching);
                for w in warnings {
                    tracing::warn!("publisher_acl: {w}");
                }
                log_mode_notes("publisher_acl", &acl.differing_patterns());
                Some(acl)
            }
            Some(Value::Map(_)) => None,
            Some(other) => {
                return Err(crate::Error::Config(format!(
                    "publisher_acl must be a map of users to ACL lists, not {other}"
                )))
            }
        };
        let blacklist = match cfg.get("publisher_acl_blacklist") {
            None | Some(Value::Nil) => None,
            Some(v @ Value::Map(_)) => {
                let (b, warnings) = Blacklist::parse(v, matching);
                for w in warnings {
                    tracing::warn!("publisher_acl_blacklist: {w}");
                }
                log_mode_notes("publisher_acl_blacklist", &b.differing_patterns());
                Some(b)
            }
            Some(other) => {
                return Err(crate::Error::Config(format!(
                    "publisher_acl_blacklist must be a map with users and modules, not {other}"
                )))
            }
        };
        let sudo_acl = cfg.get("sudo_acl").is_some_and(value::truthy);
        Ok(AccessControl {
            matching,
            acl,
            blacklist,
            sudo_acl,
        })
    }

    /// Whether ACL users exist to be served (keys, sockets).
    pub fn has_acl(&self) -> bool {
        self.acl.is_some()
    }

    /// The local users that get a key file besides root and the master's users: every
    /// existing user a `publisher_acl` key names or matches.
    pub fn key_users(&self) -> Vec<String> {
        let Some(acl) = &self.acl else {
            return Vec::new();
        };
        let mut users: Vec<String> = halite_config::all_user_names()
            .into_iter()
            .filter(|u| acl.matches_user(u))
            .collect();
        users.sort();
        users.dedup();
        users
    }
}

impl Master {
    /// Which user a presented key belongs to (constant-time comparisons against every
    /// key; `None` when it matches none).
    fn key_owner(&self, key: Option<&Value>) -> Option<&str> {
        let key = key.and_then(value::str_of)?;
        let mut owner = None;
        for (user, stored) in &self.client_keys {
            if stored.len() == key.len()
                && openssl::memcmp::eq(stored.as_bytes(), key.as_bytes())
                && owner.is_none()
            {
                owner = Some(user.as_str());
            }
        }
        owner
    }

    /// Whether `user` is root or one of the master's own users.
    fn is_root_user(&self, user: &str) -> bool {
        user == "root" || user == self.cfg.user || self.run_user.as_deref() == Some(user)
    }

    /// `LoadAuth.authenticate_key` + `check_authentication("user")`, with the key's owner
    /// as the caller.
    pub(crate) fn authenticate_caller(&self, load: &Value) -> Result<Caller, Refusal> {
        let claimed = value::get_str(load, "user");
        let Some(owner) = self.key_owner(value::get(load, "key")) else {
            tracing::warn!("Authentication failure of type \"user\" occurred.");
            self.metrics
                .count_client_auth_failure(halite_metrics::ClientAuth::User);
            return Err(Refusal::Authentication);
        };
        if self.is_root_user(owner) {
            return Ok(match claimed {
                Some(c) if c.starts_with("sudo_") => {
                    let name = &c["sudo_".len()..];
                    if self.access.sudo_acl && self.access.acl.is_some() {
                        Caller::Sudo(name.to_owned())
                    } else {
                        Caller::Root(c.to_owned())
                    }
                }
                Some(c) if self.is_root_user(c) => Caller::Root(c.to_owned()),
                _ => Caller::Root(owner.to_owned()),
            });
        }
        if let Some(c) = claimed.filter(|c| *c != owner) {
            tracing::warn!(
                "The key of user {owner} was presented for user {c}; the job runs as {owner}"
            );
        }
        Ok(Caller::User(owner.to_owned()))
    }

    /// The blacklist and ACL checks of a publish by `caller` (§2.1 steps 1 and 5): logs
    /// Salt's lines and fires `halite/acl/deny` on a refusal.
    pub(crate) fn authorize_publish(
        &self,
        caller: &Caller,
        claimed_user: &str,
        load: &Value,
        minions: &[String],
    ) -> Result<(), Refusal> {
        let verdict = self.publish_verdict(caller, claimed_user, load, minions);
        let Err((refusal, reason)) = verdict else {
            return Ok(());
        };
        let fun = value::get(load, "fun").cloned().unwrap_or(Value::Nil);
        let tgt = value::get(load, "tgt").cloned().unwrap_or(s(""));
        let tgt_type = value::get_str(load, "tgt_type").unwrap_or("glob");
        let user = match (caller, &refusal) {
            (Caller::External { name, .. }, Refusal::Authorization(r))
                if !r.starts_with("blacklisted") =>
            {
                name.as_str()
            }
            _ => self.checked_user(caller, claimed_user),
        };
        match &refusal {
            Refusal::Authorization(_) if reason.starts_with("blacklisted") => tracing::error!(
                "{user} does not have permissions to run {}. Please contact your local administrator if you believe this is in error.",
                shown(&fun)
            ),
            _ => {
                tracing::warn!(
                    "Authentication failure of type \"{}\" occurred.",
                    caller.auth_name()
                );
                tracing::warn!(
                    "Publish of {} to {} ({tgt_type}) by user {user} denied: {reason}",
                    shown(&fun),
                    shown(&tgt)
                );
            }
        }
        self.fire_acl_deny(user, &fun, &tgt, tgt_type, &reason);
        Err(refusal)
    }

    /// Why `user` or `fun` is blacklisted, if either is.
    fn blacklist_hit(&self, user: &str, fun: &Value) -> Option<String> {
        let bl = self.access.blacklist.as_ref()?;
        bl.user_is_blacklisted(user)
            .or_else(|| bl.cmd_is_blacklisted(fun))
            .map(|why| format!("blacklisted: {why}"))
    }

    /// Salt's first check of a publish (§2.1 step 1), before any key is looked at: the
    /// user the load names and its function against `publisher_acl_blacklist`. (The key's
    /// owner is checked again once known.)
    pub(crate) fn check_blacklist_first(&self, load: &Value) -> Result<(), Refusal> {
        let user = value::get_str(load, "user").unwrap_or("root");
        let fun = value::get(load, "fun").cloned().unwrap_or(Value::Nil);
        let Some(reason) = self.blacklist_hit(user, &fun) else {
            return Ok(());
        };
        tracing::error!(
            "{user} does not have permissions to run {}. Please contact your local administrator if you believe this is in error.",
            shown(&fun)
        );
        let tgt = value::get(load, "tgt").cloned().unwrap_or(s(""));
        let tgt_type = value::get_str(load, "tgt_type").unwrap_or("glob");
        self.fire_acl_deny(user, &fun, &tgt, tgt_type, &reason);
        Err(Refusal::Authorization(reason))
    }

    /// The user the blacklist and the deny event name: a key owner, or whom root's key
    /// speaks for.
    fn checked_user<'a>(&self, caller: &'a Caller, claimed_user: &'a str) -> &'a str {
        match caller {
            Caller::User(u) => u,
            _ => claimed_user,
        }
    }

    /// The decision behind [`Master::authorize_publish`], without logging: the refusal and
    /// its reason.
    fn publish_verdict(
        &self,
        caller: &Caller,
        claimed_user: &str,
        load: &Value,
        minions: &[String],
    ) -> Result<String, (Refusal, String)> {
        let fun = value::get(load, "fun").cloned().unwrap_or(Value::Nil);
        let tgt = value::get(load, "tgt").cloned().unwrap_or(s(""));
        let tgt_type = value::get_str(load, "tgt_type").unwrap_or("glob");
        if let Some(reason) = self.blacklist_hit(self.checked_user(caller, claimed_user), &fun) {
            return Err((Refusal::Authorization(reason.clone()), reason));
        }
        let arg = value::get(load, "arg")
            .cloned()
            .unwrap_or(Value::Array(vec![]));
        let mut req = Request::new(&fun, &arg, &tgt, tgt_type);
        req.minions = Some(minions);
        let targets = crate::handlers::peer::AclTargets(self);
        let whitelist = ["saltutil.find_job"];
        let decision = match caller {
            Caller::Root(n) => return Ok(format!("{n} has root's rights: no ACL applies")),
            Caller::Sudo(name) | Caller::User(name) => {
                let Some(acl) = &self.access.acl else {
                    let reason = format!("no publisher_acl entries for user '{name}'");
                    return Err((Refusal::Authentication, reason));
                };
                acl.check(name, &req, &targets, &whitelist)
            }
            // Salt: an eauth user with no entries is not authorised (not unauthenticated).
            Caller::External { name, acl, .. } if acl.is_empty() => {
                tracing::debug!("Auth configuration for eauth user \"{name}\" is empty");
                let reason = format!("no external_auth entries for user '{name}'");
                return Err((Refusal::Authorization(reason.clone()), reason));
            }
            Caller::External { acl, .. } => acl.check(&req, &targets, &whitelist),
        };
        let reason = decision.to_string();
        match decision.reason {
            _ if decision.allowed => Ok(reason),
            // Salt: an empty auth list is an authentication failure.
            halite_acl::Reason::NoEntriesForUser { .. } => Err((Refusal::Authentication, reason)),
            _ => Err((Refusal::Authorization(reason.clone()), reason)),
        }
    }

    /// `acl.check`: what the access control would decide for `user` running `fun` with
    /// `arg` on `tgt`, and why — without publishing, logging or firing anything.
    pub(crate) fn explain_publish(
        &self,
        user: &str,
        tgt: &Value,
        tgt_type: &str,
        fun: &Value,
        arg: &Value,
    ) -> Value {
        let caller = if self.is_root_user(user) {
            Caller::Root(user.to_owned())
        } else if let Some(name) = user.strip_prefix("sudo_") {
            if self.access.sudo_acl && self.access.acl.is_some() {
                Caller::Sudo(name.to_owned())
            } else {
                Caller::Root(user.to_owned())
            }
        } else {
            Caller::User(user.to_owned())
        };
        let load = map([
            ("tgt", tgt.clone()),
            ("tgt_type", s(tgt_type)),
            ("fun", fun.clone()),
            ("arg", arg.clone()),
        ]);
        let (minions, _) = self.expected_minions(tgt, tgt_type, halite_target::DEFAULT_DELIMITER);
        let (allowed, error, reason) = match self.publish_verdict(&caller, user, &load, &minions) {
            Ok(reason) => (true, Value::Nil, reason),
            Err((refusal, reason)) => {
                let name = value::get(&refusal.reply(), "error")
                    .and_then(|e| value::get(e, "name"))
                    .cloned()
                    .unwrap_or(Value::Nil);
                (false, name, reason)
            }
        };
        map([
            ("user", s(user)),
            ("fun", fun.clone()),
            ("tgt", tgt.clone()),
            ("tgt_type", s(tgt_type)),
            (
                "minions",
                Value::Array(minions.into_iter().map(s).collect()),
            ),
            ("allowed", Value::from(allowed)),
            ("error", error),
            ("reason", s(reason)),
        ])
    }

    /// A runner call by a non-root caller must be allowed by its `@runner` entries.
    pub(crate) fn authorize_runner(
        &self,
        caller: &Caller,
        fun: &str,
        kwarg: &Value,
    ) -> Result<(), Refusal> {
        let decision = match caller {
            Caller::Root(_) => return Ok(()),
            Caller::Sudo(name) | Caller::User(name) => {
                let Some(acl) = &self.access.acl else {
                    return Err(Refusal::Authentication);
                };
                acl.check_runner(name, fun, kwarg)
            }
            Caller::External { acl, .. } => {
                acl.check_spec(fun, halite_acl::SpecForm::Runner, kwarg)
            }
        };
        if decision.allowed {
            return Ok(());
        }
        self.deny(caller, &s(fun), &s(""), "runner", &decision)
    }

    fn deny(
        &self,
        caller: &Caller,
        fun: &Value,
        tgt: &Value,
        tgt_type: &str,
        decision: &Decision,
    ) -> Result<(), Refusal> {
        let user = caller.name();
        tracing::warn!(
            "Authentication failure of type \"{}\" occurred.",
            caller.auth_name()
        );
        if matches!(decision.reason, halite_acl::Reason::NoEntriesForUser { .. }) {
            // Salt: an empty auth list is an authentication failure.
            return Err(Refusal::Authentication);
        }
        tracing::warn!(
            "Publish of {} to {} ({tgt_type}) by user {user} denied: {decision}",
            shown(fun),
            shown(tgt)
        );
        let reason = decision.to_string();
        self.fire_acl_deny(user, fun, tgt, tgt_type, &reason);
        Err(Refusal::Authorization(reason))
    }

    fn fire_acl_deny(&self, user: &str, fun: &Value, tgt: &Value, tgt_type: &str, reason: &str) {
        self.events.fire(
            "halite/acl/deny",
            map([
                ("user", s(user)),
                ("fun", fun.clone()),
                ("tgt", tgt.clone()),
                ("tgt_type", s(tgt_type)),
                ("reason", s(reason)),
            ]),
        );
    }
}

/// Logs the patterns of `option` whose meaning differs from Salt's under the chosen
/// `acl_regex_match`: one WARNING with the count and the first, each at DEBUG (a 50-entry
/// ACL gave 91 lines at every start otherwise).
pub(crate) fn log_mode_notes<N: std::fmt::Display>(option: &str, notes: &[N]) {
    let Some(first) = notes.first() else {
        return;
    };
    match notes.len() {
        1 => tracing::warn!("{first}"),
        n => tracing::warn!(
            "{option}: {n} patterns match differently from Salt under acl_regex_match (the \
             first: {first}); the master's debug log lists them all"
        ),
    }
    for note in notes {
        tracing::debug!("{note}");
    }
}

fn shown(v: &Value) -> String {
    value::str_of(v)
        .map(str::to_owned)
        .unwrap_or_else(|| v.to_string())
}

#[cfg(test)]
mod tests {
    use crate::testing::TestMaster;
    use halite_proto::value::{self, map, s};
    use halite_proto::Value;

    // `daemon` and `nobody` exist on every Debian system; the master writes their keys.
    const ACL: &str = "publisher_acl:\n  daemon:\n    - 'web*':\n      - 'test.*'\n    \
        - '@jobs'\n  nobody:\n    - 'test.version'\n  bin: []\n";

    fn publish(tm: &TestMaster, key: &str, user: &str, tgt: &str, fun: &str) -> Value {
        tm.clear(map([
            ("cmd", s("publish")),
            ("tgt", s(tgt)),
            ("tgt_type", s("glob")),
            ("fun", s(fun)),
            ("arg", Value::Array(vec![])),
            ("ret", s("")),
            ("key", s(key)),
            ("user", s(user)),
        ]))
    }

    fn error_name(reply: &Value) -> Option<&str> {
        value::get(reply, "error").and_then(|e| value::get_str(e, "name"))
    }

    fn published_user(tm: &TestMaster, reply: &Value) -> String {
        let jid = value::get(reply, "load")
            .and_then(|l| value::get_str(l, "jid"))
            .unwrap_or_else(|| panic!("not published: {reply}"));
        let new = tm.events.data(&format!("salt/job/{jid}/new")).unwrap();
        value::get_str(&new, "user").unwrap().to_owned()
    }

    fn fleet(extra: &str) -> TestMaster {
        let tm = TestMaster::new(&format!("{ACL}{extra}"));
        for id in ["web1", "web2", "db1"] {
            tm.minion(id);
        }
        tm
    }

    #[test]
    fn a_users_key_publishes_as_that_user_within_its_acl_only() {
        let tm = fleet("");
        let key = tm.client_key("daemon");
        let ok = publish(&tm, &key, "daemon", "web*", "test.ping");
        assert_eq!(published_user(&tm, &ok), "daemon");
        // Claiming root with daemon's key changes nothing: the key's owner is the user.
        let claimed = publish(&tm, &key, "root", "web*", "test.ping");
        assert_eq!(published_user(&tm, &claimed), "daemon");
        for (tgt, fun) in [
            ("*", "test.ping"),
            ("web*", "cmd.run"),
            ("db1", "test.ping"),
        ] {
            let denied = publish(&tm, &key, "root", tgt, fun);
            assert_eq!(
                error_name(&denied),
                Some("AuthorizationError"),
                "{tgt} {fun}"
            );
        }
        let deny = tm.events.data("halite/acl/deny").expect("a deny event");
        assert_eq!(value::get_str(&deny, "user"), Some("daemon"));
        assert_eq!(value::get_str(&deny, "fun"), Some("test.ping"));
        assert_eq!(value::get_str(&deny, "tgt"), Some("*"));
        let nobody = tm.client_key("nobody");
        published_user(&tm, &publish(&tm, &nobody, "nobody", "*", "test.version"));
        let denied = publish(&tm, &nobody, "nobody", "*", "test.versions");
        assert_eq!(error_name(&denied), Some("AuthorizationError"));
    }

    #[test]
    fn an_unknown_key_is_an_authentication_error_and_root_is_not_acl_checked() {
        let tm = fleet("");
        let bad = publish(&tm, "not-a-key", "root", "*", "test.ping");
        assert_eq!(error_name(&bad), Some("AuthenticationError"));
        // A user whose entries are empty fails authentication, as in Salt.
        let empty = publish(&tm, &tm.client_key("bin"), "bin", "*", "test.ping");
        assert_eq!(error_name(&empty), Some("AuthenticationError"));
        let root = tm.client_key("root");
        assert_eq!(
            published_user(&tm, &publish(&tm, &root, "root", "*", "cmd.run")),
            "root"
        );
    }

    #[test]
    fn the_blacklist_refuses_users_and_modules_with_an_authorization_error() {
        let tm = fleet(
            "publisher_acl_blacklist:\n  users:\n    - root\n    - '^(?!sudo_).*$'\n  \
             modules:\n    - 'cmd.*'\n",
        );
        let root = tm.client_key("root");
        let refused = publish(&tm, &root, "root", "*", "test.ping");
        assert_eq!(error_name(&refused), Some("AuthorizationError"));
        let daemon = tm.client_key("daemon");
        let refused = publish(&tm, &daemon, "daemon", "web*", "test.ping");
        assert_eq!(error_name(&refused), Some("AuthorizationError"));
        // sudo_daemon is not blacklisted by the users pattern, cmd.* is for everyone.
        published_user(&tm, &publish(&tm, &root, "sudo_daemon", "*", "test.ping"));
        let refused = publish(&tm, &root, "sudo_daemon", "*", "cmd.run");
        assert_eq!(error_name(&refused), Some("AuthorizationError"));
    }

    #[test]
    fn sudo_callers_have_root_rights_unless_sudo_acl_restricts_them() {
        let tm = fleet("");
        let root = tm.client_key("root");
        assert_eq!(
            published_user(&tm, &publish(&tm, &root, "sudo_daemon", "*", "cmd.run")),
            "sudo_daemon"
        );
        let tm = fleet("sudo_acl: True\n");
        let root = tm.client_key("root");
        let refused = publish(&tm, &root, "sudo_daemon", "*", "cmd.run");
        assert_eq!(error_name(&refused), Some("AuthorizationError"));
        published_user(
            &tm,
            &publish(&tm, &root, "sudo_daemon", "web*", "test.ping"),
        );
    }

    #[test]
    fn runner_calls_of_acl_users_need_runner_entries() {
        let tm = fleet("");
        let runner = |key: &str, fun: &str| {
            tm.clear(map([
                ("cmd", s("runner")),
                ("fun", s(fun)),
                ("kwarg", Value::Map(vec![])),
                ("key", s(key)),
                ("user", s("x")),
            ]))
        };
        let daemon = tm.client_key("daemon");
        assert!(value::get_str(&runner(&daemon, "jobs.list_jobs"), "jid").is_some());
        let refused = runner(&daemon, "manage.up");
        assert_eq!(error_name(&refused), Some("AuthorizationError"));
        let refused = runner(&tm.client_key("nobody"), "jobs.list_jobs");
        assert_eq!(error_name(&refused), Some("AuthorizationError"));
    }

    #[test]
    fn acl_check_explains_which_entry_allows_or_why_it_denies_without_publishing() {
        let tm = fleet("publisher_acl_blacklist:\n  modules: ['cmd.*']\n");
        let ask = |user: &str, tgt: &str, fun: &str| {
            tm.master
                .explain_publish(user, &s(tgt), "glob", &s(fun), &Value::Array(vec![]))
        };
        let ok = ask("daemon", "web*", "test.ping");
        assert_eq!(value::get(&ok, "allowed"), Some(&Value::from(true)));
        assert!(
            value::get_str(&ok, "reason").unwrap().contains("test.*"),
            "{ok}"
        );
        assert_eq!(
            value::get(&ok, "minions"),
            Some(&Value::Array(vec![s("web1"), s("web2")]))
        );
        let no = ask("daemon", "*", "test.ping");
        assert_eq!(value::get(&no, "allowed"), Some(&Value::from(false)));
        assert_eq!(value::get_str(&no, "error"), Some("AuthorizationError"));
        let black = ask("root", "*", "cmd.run");
        assert!(value::get_str(&black, "reason")
            .unwrap()
            .starts_with("blacklisted"));
        let stranger = ask("mail", "*", "test.ping");
        assert_eq!(
            value::get_str(&stranger, "error"),
            Some("AuthenticationError")
        );
        assert!(tm.wire.publishes.lock().unwrap().is_empty());
        assert!(tm.events.tags("halite/acl/deny").is_empty());
    }

    #[test]
    fn key_files_belong_to_their_users_and_are_private() {
        use std::os::unix::fs::MetadataExt;
        let tm = fleet("");
        let path = tm.master.cfg.cachedir.join(".daemon_key");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        if halite_config::current_user().as_deref() == Some("root") {
            assert_eq!(
                Some(meta.uid()),
                halite_config::user_ids("daemon").map(|i| i.0)
            );
        }
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            tm.client_key("daemon")
        );
    }

    #[test]
    fn a_malformed_publisher_acl_is_a_startup_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!(
            "root_dir: {}\npublisher_acl: [fred]\n",
            dir.path().display()
        );
        let cfg =
            halite_config::MasterConfig::from_yaml_str(&yaml, &dir.path().join("master")).unwrap();
        let err = super::AccessControl::from_config(&cfg)
            .err()
            .expect("an error");
        assert!(err.to_string().contains("publisher_acl"), "{err}");
    }
}
