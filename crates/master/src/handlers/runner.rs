//! Runners on the master: the clear `runner` command (`ClearFuncs.runner`, what
//! `halite-run` and salt-api send) and the host the runner registry (`halite-runner`) runs
//! against — publish as the master, wait for returns, the job store, the keys.
//!
//! Each runner job runs on its own thread (at most [`MAX_RUNNERS`] at once), so a
//! `manage.up` waiting for minions never holds a request worker. The clear command answers
//! at once with `{"tag": "salt/run/<jid>", "jid"}`; the result is the
//! `salt/run/<jid>/ret` event, as in Salt.

use crate::access::{Caller, Refusal};
use crate::boundary;
use crate::credentials::{AuthType, Credentials};
use crate::dispatch::{ClearCall, ClearReply};
use crate::handlers::publish::WatchFor;
use crate::Master;
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_runner::{PublishJob, RunCall, RunOutcome, RunnerHost};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Salt's answer to a refused runner call (`ClearFuncs.runner`): an eauth or token caller
/// gets `check_authentication`'s error (authentication) or "Authentication failure of type
/// ... occurred for user ..." (its ACL refused); a key's caller gets Halite's publish
/// errors (Salt checks no ACL for it).
fn runner_refusal(creds: &Credentials, caller: Option<&Caller>, refusal: &Refusal) -> Value {
    let auth = match creds {
        Credentials::Key => return refusal.reply(),
        Credentials::Eauth { .. } => AuthType::Eauth,
        Credentials::Token(_) => AuthType::Token,
    };
    let user = match (caller, creds) {
        (Some(c), _) => c.name().to_owned(),
        (None, Credentials::Eauth { username, .. }) => username.clone(),
        (None, _) => {
            return runner_error(
                auth.error_name(),
                &format!(
                    "Authentication failure of type \"{}\" occurred.",
                    auth.name()
                ),
            )
        }
    };
    runner_error(
        auth.error_name(),
        &format!(
            "Authentication failure of type \"{}\" occurred for user {user}.",
            auth.name()
        ),
    )
}

/// Most runner jobs running at once.
pub const MAX_RUNNERS: usize = 64;

impl Master {
    /// The clear `runner` command: `{fun, kwarg: {arg, kwarg} | {name: value...}, key,
    /// user}`, or with `eauth`/`username`/`password` or `token` instead of the key.
    pub(crate) fn handle_runner(&self, call: ClearCall<'_>) -> ClearReply {
        let load = call.load;
        let creds = Credentials::of(load);
        let (owned, c) = (load.clone(), creds.clone());
        self.with_caller(
            load,
            creds,
            call.reply_to,
            Box::new(move |m, caller| m.run_as(&owned, &c, caller)),
        )
    }

    /// The rest of a clear `runner` once the caller is known.
    fn run_as(&self, load: &Value, creds: &Credentials, caller: Result<Caller, Refusal>) -> Value {
        let caller = match caller {
            Ok(c) => c,
            Err(refusal) => return runner_refusal(creds, None, &refusal),
        };
        let Some(fun) = value::get_str(load, "fun") else {
            return runner_error("SaltInvocationError", "Missing fun");
        };
        let low = value::get(load, "kwarg")
            .cloned()
            .unwrap_or(Value::Map(vec![]));
        if let Err(refusal) = self.authorize_runner(&caller, fun, &low) {
            return runner_refusal(creds, Some(&caller), &refusal);
        }
        // A sudo caller runs as the master's user, as `ClearFuncs.runner` does.
        let user = match &caller {
            Caller::Root(u) if u.starts_with("sudo_") => self.cfg.user.clone(),
            other => other.name().to_owned(),
        };
        let (arg, kwarg) = split_low(&low);
        if !self.runners.contains(fun) {
            return runner_error("SaltInvocationError", &format!("'{fun}' is not available."));
        }
        match self.spawn_runner(fun.to_owned(), arg, kwarg, user, |_| {}) {
            Ok(jid) => map([("tag", s(format!("salt/run/{jid}"))), ("jid", s(jid))]),
            Err(e) => runner_error("SaltClientError", &e),
        }
    }

    /// Runs `fun` on a runner thread and hands `done` the outcome; answers the jid.
    pub(crate) fn spawn_runner(
        &self,
        fun: String,
        arg: Vec<Value>,
        kwarg: Vec<(String, Value)>,
        user: String,
        done: impl FnOnce(RunOutcome) + Send + 'static,
    ) -> Result<String, String> {
        let me = self
            .me
            .upgrade()
            .ok_or_else(|| "the master is shutting down".to_owned())?;
        if self.running_runners.fetch_add(1, Ordering::SeqCst) >= MAX_RUNNERS {
            self.running_runners.fetch_sub(1, Ordering::SeqCst);
            return Err(format!("{MAX_RUNNERS} runner jobs are running already"));
        }
        let jid = self.next_jid();
        let j = jid.clone();
        let spawned = std::thread::Builder::new()
            .name("runner".into())
            .spawn(move || {
                let host = Host(&me);
                let call = RunCall {
                    fun: &fun,
                    arg,
                    kwarg,
                    user: &user,
                    jid: &j,
                };
                // A runner that panics fails its call; its slot and its caller's reply
                // are not lost (see `crate::boundary`).
                let outcome =
                    boundary::isolate(&me.stats, format_args!("the runner {fun}"), || {
                        me.runners.run(&host, &call)
                    })
                    .unwrap_or_else(|| RunOutcome {
                        ret: s(format!("Exception occurred in runner {fun}: it panicked")),
                        success: false,
                        retcode: Some(1),
                        outputter: None,
                    });
                me.running_runners.fetch_sub(1, Ordering::SeqCst);
                boundary::isolate(
                    &me.stats,
                    format_args!("the reply of the runner {fun}"),
                    || done(outcome),
                );
            });
        if let Err(e) = spawned {
            self.running_runners.fetch_sub(1, Ordering::SeqCst);
            return Err(format!("cannot start a runner thread: {e}"));
        }
        Ok(jid)
    }
}

/// The runner's `low` as `SyncClientMixin.low` reads it: `{arg, kwarg}` when both are
/// there, else every entry is a keyword argument.
fn split_low(low: &Value) -> (Vec<Value>, Vec<(String, Value)>) {
    let pairs = |v: &Value| -> Vec<(String, Value)> {
        v.as_map()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((value::str_of(k)?.to_owned(), v.clone())))
                    .collect()
            })
            .unwrap_or_default()
    };
    match (value::get(low, "arg"), value::get(low, "kwarg")) {
        (Some(arg), Some(kwarg)) => {
            let arg = match arg {
                Value::Array(a) => a.clone(),
                other => vec![other.clone()],
            };
            (arg, pairs(kwarg))
        }
        _ => (Vec::new(), pairs(low)),
    }
}

fn runner_error(name: &str, message: &str) -> Value {
    map([("error", map([("name", s(name)), ("message", s(message))]))])
}

/// What a runner sees of the master.
struct Host<'a>(&'a Arc<Master>);

impl RunnerHost for Host<'_> {
    fn publish(&self, job: &PublishJob) -> Result<halite_runner::Published, String> {
        let load = map([
            ("tgt", job.tgt.clone()),
            ("tgt_type", s(job.tgt_type.clone())),
            ("fun", s(job.fun.clone())),
            ("arg", Value::Array(job.arg.clone())),
            ("ret", s("")),
        ]);
        let user = self.0.cfg.user.clone();
        let p = self.0.publish_job(load, &user, WatchFor::Runner)?;
        Ok(halite_runner::Published {
            jid: p.jid.unwrap_or_default(),
            minions: p.minions,
        })
    }

    fn wait_returns(
        &self,
        jid: &str,
        minions: &[String],
        deadline: Instant,
    ) -> Vec<(String, Value)> {
        // A find_job round re-targets a job: make sure those minions are expected.
        self.0.watch.register(jid, minions, None);
        self.0
            .watch
            .wait(jid, deadline)
            .map(|snap| snap.returns)
            .unwrap_or_default()
    }

    fn jobs(&self) -> &dyn halite_jobcache::JobStore {
        self.0.job_store.as_ref()
    }

    fn accepted_ids(&self) -> Vec<String> {
        self.0.keys.accepted_ids().iter().cloned().collect()
    }

    fn connected(&self) -> Vec<(String, Option<String>)> {
        self.0.connected_minions()
    }

    fn delete_key(&self, id: &str) -> Result<(), String> {
        self.0
            .keys
            .store()
            .delete(id)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn fire(&self, tag: &str, data: Value) {
        self.0.events.fire(tag, data);
    }

    fn opts(&self) -> &halite_config::MasterConfig {
        &self.0.cfg
    }

    fn acl_check(
        &self,
        user: &str,
        tgt: &Value,
        tgt_type: &str,
        fun: &Value,
        arg: &Value,
    ) -> Value {
        self.0.explain_publish(user, tgt, tgt_type, fun, arg)
    }
}

#[cfg(test)]
mod tests {
    use super::split_low;
    use crate::testing::TestMaster;
    use halite_proto::value::{self, map, s};
    use halite_proto::Value;
    use std::time::{Duration, Instant};

    fn client_key(tm: &TestMaster) -> String {
        tm.master.client_keys[0].1.clone()
    }

    fn wait_event(tm: &TestMaster, tag: &str, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(d) = tm.events.data(tag) {
                return Some(d);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    #[test]
    fn the_runner_command_answers_its_tag_and_manage_up_returns_when_all_answered() {
        // A 120 s timeout: an answer within 30 s means manage.up did not wait it out.
        let tm = TestMaster::new("timeout: 120\n");
        let web = tm.minion("web1");
        let db = tm.minion("db1");
        let started = Instant::now();
        let reply = tm.clear(map([
            ("cmd", s("runner")),
            ("fun", s("manage.up")),
            (
                "kwarg",
                map([("arg", Value::Array(vec![])), ("kwarg", Value::Map(vec![]))]),
            ),
            ("key", s(client_key(&tm))),
            ("user", s("root")),
        ]));
        let jid = value::get_str(&reply, "jid").expect("a jid").to_owned();
        assert_eq!(
            value::get_str(&reply, "tag"),
            Some(format!("salt/run/{jid}").as_str())
        );
        // The runner published test.ping; both minions answer it.
        let ping = loop {
            let news = tm.events.tags("salt/job/");
            if let Some(t) = news.iter().find(|t| t.ends_with("/new")) {
                break t.split('/').nth(2).unwrap().to_owned();
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "no test.ping job"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        web.return_job(&tm, &ping, "test.ping", Value::from(true));
        db.return_job(&tm, &ping, "test.ping", Value::from(true));
        let ret = wait_event(&tm, &format!("salt/run/{jid}/ret"), Duration::from_secs(30))
            .expect("manage.up finished when both minions had answered");
        assert_eq!(
            value::get(&ret, "return"),
            Some(&Value::Array(vec![s("db1"), s("web1")]))
        );
        assert!(tm.events.data(&format!("salt/run/{jid}/new")).is_some());
    }

    #[test]
    fn the_runner_command_refuses_bad_keys_and_unknown_runners() {
        let tm = TestMaster::new("");
        let bad = tm.clear(map([
            ("cmd", s("runner")),
            ("fun", s("manage.up")),
            ("key", s("nope")),
        ]));
        let err = value::get(&bad, "error").expect("an error");
        assert_eq!(value::get_str(err, "name"), Some("AuthenticationError"));
        let unknown = tm.clear(map([
            ("cmd", s("runner")),
            ("fun", s("nope.nothing")),
            ("key", s(client_key(&tm))),
        ]));
        let err = value::get(&unknown, "error").expect("an error");
        assert_eq!(
            value::get_str(err, "message"),
            Some("'nope.nothing' is not available.")
        );
    }

    #[test]
    fn a_low_without_arg_and_kwarg_is_all_keyword_arguments() {
        let (arg, kwarg) = split_low(&map([("jid", s("1")), ("missing", Value::from(true))]));
        assert!(arg.is_empty());
        assert_eq!(kwarg.len(), 2);
        let (arg, kwarg) = split_low(&map([
            ("arg", Value::Array(vec![s("x")])),
            ("kwarg", map([("tgt", s("web*"))])),
        ]));
        assert_eq!(arg, vec![s("x")]);
        assert_eq!(kwarg, vec![("tgt".to_owned(), s("web*"))]);
    }
}
