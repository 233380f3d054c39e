//! Publishing jobs: the clear `publish` command of local clients (`ClearFuncs.publish`), and
//! [`Master::publish_job`], the one path every job takes — CLI publishes, peer publishes
//! from minions, and the jobs runners send.
//!
//! A job's life here: expected minions from the accepted keys and the grains cache
//! (`CkMinions.check_minions`), a jid, the `local_cache` load (before the reply: the stock
//! `salt` CLI reads it right after), `salt/job/<jid>/new`, the publish load built as
//! `ClearFuncs._prep_pub` builds it, `salt/job/<jid>/publish`, and the signed publish.
//!
//! When the job cache cannot take the job (its load cannot be written, or the job-cache
//! writer is failing), the job is refused before anything is fired or published, as Salt
//! refuses it when `prep_jid` cannot store a jid. Salt answers the `salt` CLI with its
//! generic "Some exception handling minion payload"; Halite answers `{"error": ...}` with
//! [`PREP_JID_FAILED`] and the path that failed, which the stock CLI prints the same way
//! (`PublishError`, exit code 0).

use crate::access::{Caller, Refusal};
use crate::credentials::Credentials;
use crate::dispatch::{ClearCall, ClearReply};
use crate::Master;
use halite_proto::value::{self, map, s};
use halite_proto::Value;

/// What Salt's `local_cache.prep_jid` logs when it cannot store a jid. The error of a job
/// refused because the job cache cannot take it starts with it, then names the path.
pub const PREP_JID_FAILED: &str = "prep_jid could not store a jid";

/// A clear load without the user's key and without the credentials in its `kwargs`: what
/// is saved with a job and fired on the bus.
fn without_secrets(load: &mut Value) {
    value::remove(load, "key");
    if let Some(mut kwargs) = value::remove(load, "kwargs") {
        Credentials::strip(&mut kwargs);
        value::set(load, "kwargs", kwargs);
    }
}

/// Who is waiting for a job's returns on the master (see [`crate::watch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFor<'a> {
    /// Nobody: the client follows the returns on the bus.
    Nobody,
    /// A runner on the master.
    Runner,
    /// The minion that published it (peer); the publish load carries its `id`.
    Peer(&'a str),
}

/// What [`Master::publish_job`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// The job id; `None` when no minion matched.
    pub jid: Option<String>,
    /// Minions expected to return.
    pub minions: Vec<String>,
    /// Listed ids with no accepted key.
    pub missing: Vec<String>,
}

impl Published {
    /// The clear `publish` reply.
    pub fn clear_reply(&self, tgt: &Value) -> Value {
        let names = |v: &[String]| Value::Array(v.iter().map(|m| s(m.clone())).collect());
        let load = match &self.jid {
            Some(jid) => map([
                ("jid", s(jid.clone())),
                ("minions", names(&self.minions)),
                ("missing", names(&self.missing)),
            ]),
            None => {
                let shown = value::str_of(tgt)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("{tgt}"));
                map([
                    ("jid", Value::Nil),
                    ("minions", Value::Array(vec![])),
                    (
                        "error",
                        s(format!(
                            "Master could not resolve minions for target {shown}"
                        )),
                    ),
                ])
            }
        };
        map([("enc", s("clear")), ("load", load)])
    }
}

impl Master {
    /// The clear `publish` command (`ClearFuncs.publish`): the blacklist on the named user
    /// (Salt's first check), then the caller: the owner of the presented key, or the
    /// `external_auth` login or token in `kwargs` (see [`crate::credentials`]), then the
    /// blacklist again and the caller's ACL.
    pub(crate) fn handle_publish(&self, call: ClearCall<'_>) -> ClearReply {
        let load = call.load;
        if let Err(refusal) = self.check_blacklist_first(load) {
            return ClearReply::Send(self.refuse_publish(load, &refusal));
        }
        let creds = value::get(load, "kwargs").map_or(Credentials::Key, Credentials::of);
        let owned = load.clone();
        self.with_caller(
            load,
            creds,
            call.reply_to,
            Box::new(move |m, caller| m.publish_as(owned, caller)),
        )
    }

    /// The rest of a clear `publish` once the caller is known.
    fn publish_as(&self, mut load: Value, caller: Result<Caller, Refusal>) -> Value {
        let caller = match caller {
            Ok(c) => c,
            Err(refusal) => return self.refuse_publish(&load, &refusal),
        };
        without_secrets(&mut load);
        let claimed = value::get_str(&load, "user").unwrap_or("root").to_owned();
        let tgt = value::get(&load, "tgt").cloned().unwrap_or(s(""));
        let (minions, missing) = self.job_targets(&load);
        if let Err(refusal) = self.authorize_publish(&caller, &claimed, &load, &minions) {
            return self.refuse_publish(&load, &refusal);
        }
        match self.publish_to(load, caller.name(), WatchFor::Nobody, minions, missing) {
            Ok(p) => p.clear_reply(&tgt),
            Err(e) => {
                tracing::error!("Publish failed: {e}");
                map([("error", s(e))])
            }
        }
    }

    /// Salt's refusal reply, and `salt/job/<jid>/error` when the client chose the jid.
    fn refuse_publish(&self, load: &Value, refusal: &Refusal) -> Value {
        let reply = refusal.reply();
        if let Some(jid) = value::get_str(load, "jid").filter(|j| halite_proto::jid::is_jid(j)) {
            let mut data = load.clone();
            without_secrets(&mut data);
            if let Some(err) = value::get(&reply, "error") {
                value::set(&mut data, "error", err.clone());
            }
            self.events.fire(&format!("salt/job/{jid}/error"), data);
        }
        reply
    }

    /// The expected minions of a clear `publish` load, and listed ids with no key.
    fn job_targets(&self, load: &Value) -> (Vec<String>, Vec<String>) {
        let tgt = value::get(load, "tgt").cloned().unwrap_or(s(""));
        let tgt_type = value::get_str(load, "tgt_type").unwrap_or("glob");
        let delimiter = value::get(load, "kwargs")
            .and_then(|k| value::get_str(k, "delimiter"))
            .unwrap_or(":");
        self.expected_minions(&tgt, tgt_type, delimiter)
    }

    /// Publishes the job a clear `publish` load describes (`tgt`, `tgt_type`, `fun`, `arg`,
    /// `ret`, `jid`, `to`, `kwargs`), as `user`.
    pub fn publish_job(
        &self,
        load: Value,
        user: &str,
        watch: WatchFor<'_>,
    ) -> Result<Published, String> {
        let (minions, missing) = self.job_targets(&load);
        self.publish_to(load, user, watch, minions, missing)
    }

    /// [`Master::publish_job`] with the expected minions already computed.
    fn publish_to(
        &self,
        load: Value,
        user: &str,
        watch: WatchFor<'_>,
        minions: Vec<String>,
        missing: Vec<String>,
    ) -> Result<Published, String> {
        let tgt = value::get(&load, "tgt").cloned().unwrap_or(s(""));
        let tgt_type = value::get_str(&load, "tgt_type")
            .unwrap_or("glob")
            .to_owned();
        let fun = value::get(&load, "fun")
            .cloned()
            .ok_or("publish without fun")?;
        let arg = value::get(&load, "arg")
            .cloned()
            .unwrap_or(Value::Array(vec![]));
        let kwargs = value::get(&load, "kwargs")
            .cloned()
            .unwrap_or(Value::Map(vec![]));
        let delimiter = value::get_str(&kwargs, "delimiter")
            .unwrap_or(":")
            .to_owned();
        let ret = value::get(&load, "ret").cloned().unwrap_or(s(""));
        let to = value::get(&load, "to").cloned();
        if minions.is_empty() {
            return Ok(Published {
                jid: None,
                minions,
                missing,
            });
        }
        let jid = match value::get_str(&load, "jid") {
            Some(j) if halite_proto::jid::is_jid(j) => j.to_owned(),
            _ => self.next_jid(),
        };
        let mut saved = load;
        value::set(&mut saved, "jid", s(jid.clone()));
        // The job's user is the caller's, never the `user` the client wrote in its load.
        value::set(&mut saved, "user", s(user));
        if let WatchFor::Peer(id) = watch {
            value::set(&mut saved, "id", s(id));
        }
        // Salt's `prep_jid`: the job cache takes the job before anything about it goes
        // out; when it cannot, the job is refused and nothing is fired or published.
        if let Err(e) = self.jobs.save_load(&jid, saved, minions.clone()) {
            let refusal = format!("{PREP_JID_FAILED}: {e}");
            tracing::error!("{refusal}; job {jid} refused");
            return Err(refusal);
        }
        let names = |v: &[String]| Value::Array(v.iter().map(|m| s(m.clone())).collect());
        self.events.fire(
            &format!("salt/job/{jid}/new"),
            map([
                ("jid", s(jid.clone())),
                ("tgt_type", s(tgt_type.clone())),
                ("tgt", tgt.clone()),
                ("user", s(user)),
                ("fun", fun.clone()),
                ("arg", arg.clone()),
                ("minions", names(&minions)),
                ("missing", names(&missing)),
            ]),
        );

        // Minions do not know the master's nodegroups: a target a client left unresolved
        // (Salt's clients resolve them) goes out resolved, as `LocalClient._prep_pub`
        // would have sent it.
        let nodegroups = self.cfg.get("nodegroups").unwrap_or(&Value::Nil);
        let (tgt, tgt_type) = match halite_target::resolve_nodegroups(&tgt, &tgt_type, nodegroups) {
            Ok(Some(expr)) => (s(expr), "compound".to_owned()),
            _ => (tgt, tgt_type),
        };
        // The publish load, built as `ClearFuncs._prep_pub` builds it.
        let mut pub_load = vec![
            (s("fun"), fun.clone()),
            (s("arg"), arg.clone()),
            (s("tgt"), tgt.clone()),
            (s("jid"), s(jid.clone())),
            (s("ret"), ret),
        ];
        if delimiter != ":" {
            pub_load.push((s("delimiter"), s(delimiter)));
        }
        pub_load.push((s("tgt_type"), s(tgt_type)));
        if let Some(to) = to {
            pub_load.push((s("to"), to));
        }
        for field in [
            "ret_config",
            "metadata",
            "module_executors",
            "executor_opts",
            "ret_kwargs",
        ] {
            if let Some(v) = value::get(&kwargs, field) {
                pub_load.push((s(field), v.clone()));
            }
        }
        pub_load.push((s("user"), s(user)));
        match watch {
            WatchFor::Nobody => {}
            WatchFor::Runner => self.watch.register(&jid, &minions, None),
            WatchFor::Peer(id) => {
                self.watch.register(&jid, &minions, Some(id));
                pub_load.push((s("id"), s(id)));
            }
        }
        let pub_load = Value::Map(pub_load);
        tracing::info!(
            "User {user} Published command {} with jid {jid}",
            value::str_of(&fun).unwrap_or("?")
        );
        self.events
            .fire(&format!("salt/job/{jid}/publish"), pub_load.clone());
        self.publisher.publish(pub_load)?;
        self.metrics.count_publish();
        Ok(Published {
            jid: Some(jid),
            minions,
            missing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::PREP_JID_FAILED;
    use crate::jobs::JobSink;
    use crate::testing::TestMaster;
    use halite_proto::value::{self, map, s};
    use halite_proto::Value;
    use std::sync::Arc;

    /// A job cache that cannot take jobs.
    struct Unwritable;

    const CAUSE: &str = "/srv/cache/jobs/ab/cd: Read-only file system (os error 30)";

    impl JobSink for Unwritable {
        fn save_load(&self, _: &str, _: Value, _: Vec<String>) -> Result<(), String> {
            Err(CAUSE.to_owned())
        }

        fn add_return(&self, _: String, _: String, _: Vec<u8>, _: crate::jobs::Ack) {}
    }

    #[test]
    fn a_job_the_job_cache_cannot_take_is_refused_before_anything_goes_out() {
        let tm = TestMaster::with_jobs("", |_| Arc::new(Unwritable));
        tm.minion("m1");
        let key = tm.client_key("root");
        let reply = tm.clear(map([
            ("cmd", s("publish")),
            ("tgt", s("*")),
            ("tgt_type", s("glob")),
            ("fun", s("test.ping")),
            ("arg", Value::Array(vec![])),
            ("ret", s("")),
            ("jid", s("")),
            ("key", s(key)),
            ("user", s("root")),
        ]));
        assert_eq!(
            reply,
            map([("error", s(format!("{PREP_JID_FAILED}: {CAUSE}")))])
        );
        assert!(tm.events.tags("salt/job/").is_empty(), "no job event fired");
        assert!(
            tm.wire.publishes.lock().unwrap().is_empty(),
            "nothing published"
        );
        assert!(value::get(&reply, "load").is_none());
    }

    #[test]
    fn nodegroups_a_client_left_unresolved_are_published_resolved() {
        let tm = TestMaster::new("nodegroups:\n  webs: L@m1,m2\n");
        tm.minion("m1");
        tm.minion("m2");
        let key = tm.client_key("root");
        for (tgt, tgt_type, sent) in [
            ("webs", "nodegroup", "L@m1,m2"),
            ("N@webs or m3", "compound", "L@m1,m2 or m3"),
        ] {
            let reply = tm.clear(map([
                ("cmd", s("publish")),
                ("tgt", s(tgt)),
                ("tgt_type", s(tgt_type)),
                ("fun", s("test.ping")),
                ("arg", Value::Array(vec![])),
                ("ret", s("")),
                ("jid", s("")),
                ("key", s(key.clone())),
                ("user", s("root")),
            ]));
            let load = value::get(&reply, "load").expect("published");
            let jid = value::get_str(load, "jid").expect("a jid");
            let published = tm
                .events
                .data(&format!("salt/job/{jid}/publish"))
                .expect("the publish event");
            assert_eq!(value::get_str(&published, "tgt"), Some(sent), "{tgt}");
            assert_eq!(value::get_str(&published, "tgt_type"), Some("compound"));
        }
    }
}
