//! Peer communication: minions publishing to minions (`minion_pub`, `minion_publish`,
//! `pub_ret`) and running runners (`minion_runner`), under the master's `peer` and
//! `peer_run` ACLs (`AESFuncs.minion_pub` → `RemoteFuncs`, salt-semantics.md §1).
//!
//! Off by default, as in Salt: with no `peer` (or `peer_run`) every request is refused with
//! `{}`. The requesting minion's id is the one its session and token proved.
//!
//! Beyond Salt:
//! - **Whole-name matching** by default (`acl_regex_match: full`): Salt's `re.match` lets
//!   `.*example.com` admit `web.example.com.evil.org`; `acl_regex_match: prefix` restores it.
//! - **Every denial is logged** at INFO with the minion, function and target, and fired as
//!   `halite/peer/deny` (Salt says nothing).
//! - **Results as soon as they exist**: the job is watched from the moment it is published
//!   ([`crate::watch`]); a `pub_ret` carrying `wait` (Halite's minion sends it) is held until
//!   the last expected minion returned or `wait` ran out, and a stock minion's first
//!   `pub_ret` is held up to one of its 0.3 s poll intervals. `minion_publish` and
//!   `minion_runner` answer when done without holding a worker.
//! - **Multi-function** `fun` (`a,b`): Salt splits it, then fails in its own verifier and
//!   returns `{}`; Halite publishes it when *every* function is allowed.
//! - **Nodegroups** are expanded for the expected-minion list too (Salt evaluates the
//!   nodegroup *name* as a compound target there and usually expects nobody).
//! - `pub_ret` ownership is kept with the watched job (and in the saved job load), not in
//!   `cachedir/publish_auth` files; a `pub_ret` for another minion's jid gets `{}`.

use crate::dispatch::{AesCall, AesReply, ReplyTo};
use crate::handlers::publish::WatchFor;
use crate::watch::Snapshot;
use crate::Master;
use halite_acl::{Decision, Matching, PeerAcl, Request, RunnerAcl};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use std::time::{Duration, Instant};

/// Longest a `pub_ret` with `wait` is held (below the minion's 60 s request timeout).
pub const MAX_HOLD: Duration = Duration::from_secs(30);
/// How long the first `pub_ret` without `wait` (a stock minion polling) is held at most: one
/// of its poll intervals. Later polls are answered at once, so when minions are missing the
/// stock loop keeps Salt's timing (each hold would lengthen it, as it counts polls).
pub const STOCK_POLL_HOLD: Duration = Duration::from_millis(300);
/// Most arguments a peer request may carry.
pub const MAX_ARGS: usize = 1024;

/// What a checked peer publish will send.
struct PeerJob {
    /// Function name, or names for a multi-function job.
    fun: Value,
    /// Arguments after `parse_input` (a list of lists for multi-function jobs).
    arg: Value,
    tgt: Value,
    tgt_type: String,
    ret: Value,
}

impl Master {
    /// Parses and authorises a `minion_pub`/`minion_publish` load; `None` (logged) means
    /// answer `{}`.
    fn verify_minion_publish(&self, id: &str, load: &Value) -> Option<PeerJob> {
        let Some(peer) = self.acl.peer.as_ref() else {
            tracing::debug!(minion = id, "Peer publish refused: peer is not configured");
            return None;
        };
        let (Some(fun), Some(arg), Some(tgt), Some(ret)) = (
            value::get_str(load, "fun"),
            value::get(load, "arg"),
            value::get(load, "tgt"),
            value::get(load, "ret"),
        ) else {
            tracing::info!(
                minion = id,
                "Peer publish refused: the request lacks fun, arg, tgt or ret"
            );
            return None;
        };
        let Value::Array(args) = arg else {
            tracing::info!(minion = id, "Peer publish refused: arg is not a list");
            return None;
        };
        if args.len() > MAX_ARGS {
            tracing::info!(
                minion = id,
                count = args.len(),
                limit = MAX_ARGS,
                "Peer publish refused: too many arguments"
            );
            return None;
        }
        let tgt_type = value::get_str(load, "tgt_type")
            .unwrap_or("glob")
            .to_owned();
        // The recursion guard (`RemoteFuncs`: `re.match("publish.*", fun)`).
        if fun.starts_with("publish") {
            tracing::info!(
                "Peer publish of {fun} from {id} refused: publish calls cannot be published"
            );
            return None;
        }
        let no_parse = no_parse_of(load);
        // Arguments are checked as the job will carry them (after `parse_input`), so
        // `kwargs:` rules can match and `args:` rules see what the minions run; Salt checks
        // the raw strings, where no `kwargs:` rule can ever pass.
        let (fun, arg) = if fun.contains(',') {
            let names = Value::Array(fun.split(',').map(s).collect());
            let split = args
                .iter()
                .map(|a| {
                    let words: Vec<Value> = match value::str_of(a) {
                        Some(text) => text.split_whitespace().map(s).collect(),
                        None => vec![a.clone()],
                    };
                    Value::Array(halite_config::args::parse_input_values(&words, &no_parse))
                })
                .collect();
            (names, Value::Array(split))
        } else {
            (
                s(fun),
                Value::Array(halite_config::args::parse_input_values(args, &no_parse)),
            )
        };
        let tgt_shown = value::str_of(tgt)
            .map(str::to_owned)
            .unwrap_or_else(|| tgt.to_string());
        let decision = peer.check(
            id,
            &Request::new(&fun, &arg, tgt, &tgt_type),
            &AclTargets(self),
        );
        if !decision.allowed {
            self.deny_peer(id, &fun, &tgt_shown, &tgt_type, &decision);
            return None;
        }
        tracing::debug!(minion = id, fun = %fun, "Peer publish allowed: {decision}");
        Some(PeerJob {
            fun,
            arg,
            tgt: tgt.clone(),
            tgt_type,
            ret: ret.clone(),
        })
    }

    fn deny_peer(&self, id: &str, fun: &Value, tgt: &str, tgt_type: &str, decision: &Decision) {
        let fun_shown = value::str_of(fun)
            .map(str::to_owned)
            .unwrap_or_else(|| fun.to_string());
        tracing::info!(
            "Peer publish of {fun_shown} to {tgt} ({tgt_type}) from minion {id} denied: {}",
            decision.reason
        );
        self.events.fire(
            "halite/peer/deny",
            map([
                ("id", s(id)),
                ("cmd", s("minion_pub")),
                ("fun", fun.clone()),
                ("tgt", s(tgt)),
                ("tgt_type", s(tgt_type)),
                ("reason", s(decision.reason.to_string())),
            ]),
        );
    }

    /// Publishes a verified peer job for `id`: the clear load `ClearFuncs.publish` would get
    /// from `RemoteFuncs.minion_pub`, nodegroups expanded to their compound expression.
    fn publish_peer(
        &self,
        id: &str,
        job: PeerJob,
    ) -> Result<crate::handlers::publish::Published, String> {
        let (tgt, tgt_type) = if job.tgt_type.starts_with("node") {
            let name = value::str_of(&job.tgt).unwrap_or("");
            match self
                .cfg
                .get("nodegroups")
                .and_then(|groups| value::get(groups, name))
            {
                Some(expr) => (expr.clone(), "compound".to_owned()),
                None => return Err(format!("unknown nodegroup {name:?}")),
            }
        } else {
            (job.tgt, job.tgt_type)
        };
        let load = map([
            ("fun", job.fun),
            ("arg", job.arg),
            ("tgt", tgt),
            ("tgt_type", s(tgt_type)),
            ("ret", job.ret),
        ]);
        let user = self.cfg.user.clone();
        self.publish_job(load, &user, WatchFor::Peer(id))
    }

    pub(crate) fn handle_minion_pub(&self, call: AesCall<'_>) -> AesReply {
        let Some(job) = self.verify_minion_publish(call.id, &call.load) else {
            return AesReply::Send(Value::Map(vec![]));
        };
        match self.publish_peer(call.id, job) {
            Ok(p) => AesReply::Send(map([
                ("jid", p.jid.map(s).unwrap_or(Value::from(0))),
                (
                    "minions",
                    Value::Array(p.minions.into_iter().map(s).collect()),
                ),
            ])),
            Err(e) => {
                tracing::info!(minion = call.id, "Peer publish not sent: {e}");
                AesReply::Send(Value::Map(vec![]))
            }
        }
    }

    /// `minion_publish`: publish and answer the results when every expected minion has
    /// returned or `tmo`/`timeout` (default 5 s) passed.
    pub(crate) fn handle_minion_publish(&self, call: AesCall<'_>) -> AesReply {
        let mut timeout = Duration::from_secs(self.cfg.timeout);
        for field in ["tmo", "timeout"] {
            if let Some(v) = value::get(&call.load, field) {
                match seconds(v) {
                    Some(t) => timeout = t.min(MAX_HOLD),
                    None => {
                        tracing::warn!("Failed to parse timeout value: {v}");
                        return AesReply::Send(Value::Map(vec![]));
                    }
                }
            }
        }
        let full = value::get_str(&call.load, "form") == Some("full");
        let Some(job) = self.verify_minion_publish(call.id, &call.load) else {
            return AesReply::Send(Value::Map(vec![]));
        };
        let jid = match self.publish_peer(call.id, job) {
            Ok(crate::handlers::publish::Published { jid: Some(jid), .. }) => jid,
            Ok(_) => return AesReply::Send(Value::Map(vec![])),
            Err(e) => {
                tracing::info!(minion = call.id, "Peer publish not sent: {e}");
                return AesReply::Send(Value::Map(vec![]));
            }
        };
        let reply_to = call.reply_to;
        let j = jid.clone();
        self.watch
            .notify(&jid, Instant::now() + timeout, move |snap| {
                let snap = snap.unwrap_or_default();
                let mut out: Vec<(Value, Value)> = snap
                    .returns
                    .iter()
                    .map(|(m, load)| {
                        let v = if full {
                            let mut data = load.clone();
                            let ret = value::remove(&mut data, "return").unwrap_or(Value::Nil);
                            value::set(&mut data, "ret", ret);
                            data
                        } else {
                            value::get(load, "return").cloned().unwrap_or(Value::Nil)
                        };
                        (s(m.clone()), v)
                    })
                    .collect();
                if full {
                    out.push((s("__jid__"), s(j)));
                }
                reply_to.send(&Value::Map(out));
            });
        AesReply::Held
    }

    /// `pub_ret`: the returns of a peer job so far, `{minion: {"ret", "out"?}}`, to the
    /// minion that published it only.
    pub(crate) fn handle_pub_ret(&self, call: AesCall<'_>) -> AesReply {
        let Some(jid) = value::get(&call.load, "jid").and_then(|j| match j {
            Value::String(_) => value::str_of(j).map(str::to_owned),
            Value::Integer(i) => Some(i.to_string()),
            _ => None,
        }) else {
            tracing::info!(minion = call.id, "pub_ret without a jid refused");
            return AesReply::Send(Value::Map(vec![]));
        };
        let id = call.id.to_owned();
        match self.watch.snapshot(&jid) {
            Some(snap) => {
                if snap.owner.as_deref() != Some(id.as_str()) {
                    tracing::info!(
                        "pub_ret for job {jid} from minion {id}, which did not publish it, refused"
                    );
                    return AesReply::Send(Value::Map(vec![]));
                }
                let first = self.watch.poll(&jid) == Some(0);
                let hold = match value::get(&call.load, "wait") {
                    Some(w) => seconds(w).unwrap_or_default().min(MAX_HOLD),
                    None if first => STOCK_POLL_HOLD,
                    None => Duration::ZERO,
                };
                if snap.complete() || hold.is_zero() {
                    return AesReply::Send(cache_returns(&snap));
                }
                let reply_to: ReplyTo = call.reply_to;
                self.watch.notify(&jid, Instant::now() + hold, move |snap| {
                    reply_to.send(&cache_returns(&snap.unwrap_or_default()));
                });
                AesReply::Held
            }
            None => AesReply::Send(self.stored_returns(&jid, &id)),
        }
    }

    /// `pub_ret` for a job no longer watched (evicted, or published before a restart):
    /// from the job store, if `id` published it.
    fn stored_returns(&self, jid: &str, id: &str) -> Value {
        let owner = match self.job_store.get_load(jid) {
            Ok(Some(job)) => value::get_str(&job.load, "id").map(str::to_owned),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(%jid, "Could not read the job cache for pub_ret: {e}");
                None
            }
        };
        if owner.as_deref() != Some(id) {
            tracing::info!(
                "pub_ret for job {jid} from minion {id}, which did not publish it, refused"
            );
            return Value::Map(vec![]);
        }
        match self.job_store.get_returns(jid) {
            Ok(returns) => cache_returns(&Snapshot {
                returns: returns.into_iter().map(|r| (r.minion_id, r.load)).collect(),
                ..Snapshot::default()
            }),
            Err(e) => {
                tracing::warn!(%jid, "Could not read the job cache for pub_ret: {e}");
                Value::Map(vec![])
            }
        }
    }

    /// `minion_runner`: a runner allowed by `peer_run`, run on its own thread; the reply is
    /// the runner's return.
    pub(crate) fn handle_minion_runner(&self, call: AesCall<'_>) -> AesReply {
        let id = call.id;
        let (Some(fun), Some(arg)) = (
            value::get_str(&call.load, "fun"),
            value::get(&call.load, "arg"),
        ) else {
            tracing::info!(
                minion = id,
                "Peer runner refused: the request lacks fun or arg"
            );
            return AesReply::Send(Value::Map(vec![]));
        };
        let decision = match self.acl.peer_run.as_ref() {
            Some(acl) => acl.allows(id, fun),
            None => {
                tracing::debug!(
                    minion = id,
                    "Peer runner refused: peer_run is not configured"
                );
                return AesReply::Send(Value::Map(vec![]));
            }
        };
        if !decision.allowed {
            tracing::warn!("Minion id {id} is not who it says it is!");
            tracing::info!(
                "Peer runner {fun} from minion {id} denied: {}",
                decision.reason
            );
            self.events.fire(
                "halite/peer/deny",
                map([
                    ("id", s(id)),
                    ("cmd", s("minion_runner")),
                    ("fun", s(fun)),
                    ("reason", s(decision.reason.to_string())),
                ]),
            );
            return AesReply::Send(Value::Map(vec![]));
        }
        let args = match arg {
            Value::Array(a) if a.len() <= MAX_ARGS => a.clone(),
            Value::Array(_) => {
                tracing::info!(minion = id, "Peer runner refused: too many arguments");
                return AesReply::Send(Value::Map(vec![]));
            }
            other => vec![other.clone()],
        };
        let no_parse = no_parse_of(&call.load);
        let arg = halite_config::args::parse_input_values(&args, &no_parse);
        let reply_to = call.reply_to;
        let fun = fun.to_owned();
        let user = id.to_owned();
        match self.spawn_runner(fun, arg, Vec::new(), user, move |outcome| {
            reply_to.send(&outcome.ret)
        }) {
            Ok(_) => AesReply::Held,
            Err(e) => {
                tracing::error!(minion = id, "Peer runner not started: {e}");
                AesReply::Send(Value::Map(vec![]))
            }
        }
    }
}

/// The parsed `peer` and `peer_run` ACLs (absent: that kind of request is refused).
pub struct PeerAcls {
    peer: Option<PeerAcl>,
    peer_run: Option<RunnerAcl>,
}

impl PeerAcls {
    /// Parses `peer`, `peer_run` and `acl_regex_match` from the master config; logs every
    /// unusable entry and every pattern whose meaning differs from Salt's under the chosen
    /// anchoring.
    pub fn from_config(cfg: &halite_config::MasterConfig) -> Result<PeerAcls, crate::Error> {
        let matching =
            Matching::from_config_value(cfg.get("acl_regex_match").unwrap_or(&Value::Nil))
                .map_err(|e| crate::Error::Config(e.to_string()))?;
        let peer = parse_logged(
            cfg,
            "peer",
            |v| PeerAcl::parse(v, matching),
            |acl| acl.differing_patterns(),
        );
        let peer_run = parse_logged(
            cfg,
            "peer_run",
            |v| RunnerAcl::parse(v, matching),
            |acl| acl.differing_patterns(),
        );
        Ok(PeerAcls { peer, peer_run })
    }
}

/// Parses the map option `name` (absent or not a map: `None`), logging what cannot be used
/// and every pattern whose meaning differs from Salt's.
fn parse_logged<A, W: std::fmt::Display, N: std::fmt::Display>(
    cfg: &halite_config::MasterConfig,
    name: &str,
    parse: impl FnOnce(&Value) -> (A, Vec<W>),
    notes: impl FnOnce(&A) -> Vec<N>,
) -> Option<A> {
    let v = cfg.get(name).filter(|v| matches!(v, Value::Map(_)))?;
    let (acl, warnings) = parse(v);
    for w in warnings {
        tracing::warn!("{name}: {w}");
    }
    for note in notes(&acl) {
        tracing::warn!("{note}");
    }
    Some(acl)
}

/// Target expansion for the ACL evaluator: the master's expected minions.
pub(crate) struct AclTargets<'a>(pub(crate) &'a Master);

impl halite_acl::Targets for AclTargets<'_> {
    fn expand(&self, tgt: &Value, tgt_type: &str) -> Vec<String> {
        self.0
            .expected_minions(tgt, tgt_type, halite_target::DEFAULT_DELIMITER)
            .0
    }

    /// The target evaluated over `candidates` only (the request's expected minions), with
    /// the accepted set and grains `expected_minions` reads.
    fn first_outside<'c>(
        &self,
        tgt: &Value,
        tgt_type: &str,
        candidates: &'c [String],
    ) -> Option<&'c str> {
        let m = self.0;
        let ids = m.keys.accepted_ids();
        m.with_data_cache(|cache| {
            let ck = halite_target::CkMinions {
                accepted: &ids,
                cache,
                regexes: &m.regex,
                minion_data_cache: m.cfg.minion_data_cache,
                nodegroups: m.cfg.get("nodegroups"),
            };
            halite_acl::Targets::first_outside(&ck, tgt, tgt_type, candidates)
        })
    }
}

/// The request's `no_parse` list: names whose `name=value` words are not typed as YAML.
fn no_parse_of(load: &Value) -> Vec<String> {
    match value::get(load, "no_parse") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(value::str_of)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// `LocalClient.get_cache_returns`: `{minion: {"ret": return[, "out": outputter]}}`.
fn cache_returns(snap: &Snapshot) -> Value {
    Value::Map(
        snap.returns
            .iter()
            .map(|(m, load)| {
                let mut data = vec![(
                    s("ret"),
                    value::get(load, "return").cloned().unwrap_or(Value::Nil),
                )];
                if let Some(out) = value::get(load, "out") {
                    data.push((s("out"), out.clone()));
                }
                (s(m.clone()), Value::Map(data))
            })
            .collect(),
    )
}

/// A timeout as Salt's `int(...)`/`float(...)` reads it: a number or a numeric string.
fn seconds(v: &Value) -> Option<Duration> {
    let secs = match v {
        Value::Integer(i) => i.as_f64()?,
        Value::F32(f) => f64::from(*f),
        Value::F64(f) => *f,
        Value::String(_) => value::str_of(v)?.trim().parse().ok()?,
        _ => return None,
    };
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

#[cfg(test)]
mod tests {
    use crate::testing::{TestMaster, TestMinion};
    use halite_proto::value::{self, map, s};
    use halite_proto::Value;
    use std::time::{Duration, Instant};

    const PEER: &str = "peer:\n  '.*':\n    - 'test.*'\n  'web.*':\n    - 'cmd.run'\n\
        peer_run:\n  'web.*':\n    - 'manage.*'\n";

    fn minion_pub(fun: &str, tgt: &str, args: Vec<Value>) -> Value {
        map([
            ("cmd", s("minion_pub")),
            ("fun", s(fun)),
            ("arg", Value::Array(args)),
            ("tgt", s(tgt)),
            ("tgt_type", s("glob")),
            ("ret", s("")),
            ("tmo", Value::from(5)),
            ("form", s("clean")),
            ("no_parse", Value::Array(vec![])),
        ])
    }

    fn pub_ret(jid: &str, wait: Option<f64>) -> Value {
        let mut load = map([("cmd", s("pub_ret")), ("jid", s(jid))]);
        if let Some(w) = wait {
            value::set(&mut load, "wait", Value::F64(w));
        }
        load
    }

    fn jid_of(reply: &Value) -> String {
        value::get_str(reply, "jid")
            .unwrap_or_else(|| panic!("no jid in {reply}"))
            .to_owned()
    }

    fn setup(extra: &str) -> (TestMaster, TestMinion, TestMinion) {
        let tm = TestMaster::new(extra);
        let web = tm.minion("web1");
        let db = tm.minion("db1");
        (tm, web, db)
    }

    #[test]
    fn an_allowed_peer_publish_goes_out_and_answers_jid_and_expected_minions() {
        let (tm, web, _db) = setup(PEER);
        let reply = web.call(&tm, minion_pub("test.ping", "*", vec![]));
        let jid = jid_of(&reply);
        assert_eq!(
            value::get(&reply, "minions"),
            Some(&Value::Array(vec![s("db1"), s("web1")]))
        );
        assert_eq!(tm.wire.publishes.lock().unwrap().len(), 1);
        let published = tm.events.data(&format!("salt/job/{jid}/publish")).unwrap();
        assert_eq!(value::get_str(&published, "id"), Some("web1"));
        assert_eq!(value::get_str(&published, "fun"), Some("test.ping"));
    }

    #[test]
    fn k_equals_v_arguments_become_kwargs_in_the_published_job() {
        let (tm, web, _db) = setup(PEER);
        let reply = web.call(&tm, minion_pub("test.arg", "*", vec![s("1"), s("a=b")]));
        let jid = jid_of(&reply);
        let published = tm.events.data(&format!("salt/job/{jid}/publish")).unwrap();
        assert_eq!(
            value::get(&published, "arg"),
            Some(&Value::Array(vec![
                Value::from(1),
                map([("__kwarg__", Value::from(true)), ("a", s("b"))]),
            ]))
        );
    }

    #[test]
    fn a_denied_peer_publish_answers_empty_and_fires_a_deny_event() {
        let (tm, _web, db) = setup(PEER);
        let reply = db.call(&tm, minion_pub("cmd.run", "*", vec![s("id")]));
        assert_eq!(reply, Value::Map(vec![]));
        assert!(tm.wire.publishes.lock().unwrap().is_empty());
        let deny = tm.events.data("halite/peer/deny").expect("a deny event");
        assert_eq!(value::get_str(&deny, "id"), Some("db1"));
        assert_eq!(value::get_str(&deny, "fun"), Some("cmd.run"));
        assert_eq!(value::get_str(&deny, "tgt"), Some("*"));
    }

    #[test]
    fn function_names_match_whole_by_default_and_by_prefix_when_asked() {
        let (tm, web, _db) = setup(PEER);
        assert_eq!(
            web.call(&tm, minion_pub("cmd.run_all", "*", vec![s("id")])),
            Value::Map(vec![])
        );
        let (tm, web, _db) = setup(&format!("{PEER}acl_regex_match: prefix\n"));
        let reply = web.call(&tm, minion_pub("cmd.run_all", "*", vec![s("id")]));
        jid_of(&reply);
    }

    #[test]
    fn peer_is_off_without_config_and_publish_calls_are_never_published() {
        let (tm, web, _db) = setup("");
        assert_eq!(
            web.call(&tm, minion_pub("test.ping", "*", vec![])),
            Value::Map(vec![])
        );
        let (tm, web, _db) = setup("peer:\n  '.*':\n    - '.*'\n");
        assert_eq!(
            web.call(&tm, minion_pub("publish.publish", "*", vec![])),
            Value::Map(vec![])
        );
        assert!(tm.wire.publishes.lock().unwrap().is_empty());
    }

    #[test]
    fn bad_peer_requests_get_empty_answers_and_the_master_keeps_serving() {
        let (tm, web, _db) = setup(PEER);
        let mut no_tgt = minion_pub("test.ping", "*", vec![]);
        value::remove(&mut no_tgt, "tgt");
        let mut bad_arg = minion_pub("test.ping", "*", vec![]);
        value::set(&mut bad_arg, "arg", s("not a list"));
        let mut bad_compound = minion_pub("test.ping", "web* and (", vec![]);
        value::set(&mut bad_compound, "tgt_type", s("compound"));
        let many = minion_pub(
            "test.arg",
            "*",
            (0..10_000).map(|n| s(n.to_string())).collect(),
        );
        for load in [no_tgt, bad_arg, many] {
            assert_eq!(web.call(&tm, load.clone()), Value::Map(vec![]), "{load}");
        }
        // A malformed compound target expands to nobody: nothing to wait for.
        let reply = web.call(&tm, bad_compound);
        assert_ne!(value::get(&reply, "jid"), None);
        // Still serving.
        jid_of(&web.call(&tm, minion_pub("test.ping", "*", vec![])));
    }

    #[test]
    fn an_invalid_regex_in_peer_denies_instead_of_failing() {
        let (tm, web, _db) = setup("peer:\n  '.*':\n    - 'test.(*'\n");
        assert_eq!(
            web.call(&tm, minion_pub("test.ping", "*", vec![])),
            Value::Map(vec![])
        );
    }

    #[test]
    fn pub_ret_with_wait_is_held_until_the_last_minion_returns() {
        let (tm, web, db) = setup(PEER);
        let jid = jid_of(&web.call(&tm, minion_pub("test.ping", "*", vec![])));
        web.return_job(&tm, &jid, "test.ping", Value::from(true));
        let nonce = web.call_held(&tm, pub_ret(&jid, Some(20.0)));
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            tm.wire.replies.lock().unwrap().is_empty(),
            "one minion is missing"
        );
        db.return_job(&tm, &jid, "test.ping", Value::from(true));
        // Held for up to 20 s: an answer within 5 s came from db1's return.
        let reply = tm
            .wire
            .held_reply(&web.peer(), Duration::from_secs(5))
            .expect("answered when db1 returned");
        let got = web.open(&reply, &nonce);
        assert_eq!(
            got,
            map([
                ("web1", map([("ret", Value::from(true))])),
                ("db1", map([("ret", Value::from(true))])),
            ])
        );
    }

    #[test]
    fn pub_ret_answers_at_once_when_complete_and_partial_at_its_wait() {
        let (tm, web, db) = setup(PEER);
        let jid = jid_of(&web.call(&tm, minion_pub("test.ping", "*", vec![])));
        db.return_job(&tm, &jid, "test.ping", Value::from(true));
        let started = Instant::now();
        let partial = web.call(&tm, pub_ret(&jid, Some(0.2)));
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(partial, map([("db1", map([("ret", Value::from(true))]))]));
        web.return_job(&tm, &jid, "test.ping", Value::from(true));
        let (body, _) = (pub_ret(&jid, Some(20.0)), ());
        let done = web.call(&tm, body);
        assert_eq!(done.as_map().map(Vec::len), Some(2));
    }

    #[test]
    fn a_stock_minions_first_poll_is_held_up_to_one_interval_and_later_polls_are_not() {
        let (tm, web, db) = setup(PEER);
        let jid = jid_of(&web.call(&tm, minion_pub("test.ping", "*", vec![])));
        web.return_job(&tm, &jid, "test.ping", Value::from(true));
        let nonce = web.call_held(&tm, pub_ret(&jid, None));
        db.return_job(&tm, &jid, "test.ping", Value::from(true));
        let reply = tm
            .wire
            .held_reply(&web.peer(), Duration::from_secs(5))
            .expect("answered when db1 returned");
        assert_eq!(web.open(&reply, &nonce).as_map().map(Vec::len), Some(2));

        // Nobody returns: the first poll is held and answered empty at its deadline, the
        // next is answered at once.
        let jid = jid_of(&web.call(&tm, minion_pub("test.ping", "*", vec![])));
        let nonce = web.call_held(&tm, pub_ret(&jid, None));
        let reply = tm
            .wire
            .held_reply(&web.peer(), Duration::from_secs(5))
            .expect("answered at the hold's deadline");
        assert_eq!(web.open(&reply, &nonce), Value::Map(vec![]));
        assert_eq!(web.call_now(&tm, pub_ret(&jid, None)), Value::Map(vec![]));
    }

    #[test]
    fn pub_ret_for_another_minions_job_is_refused() {
        let (tm, web, db) = setup(PEER);
        let jid = jid_of(&web.call(&tm, minion_pub("test.ping", "*", vec![])));
        web.return_job(&tm, &jid, "test.ping", Value::from(true));
        assert_eq!(db.call(&tm, pub_ret(&jid, Some(1.0))), Value::Map(vec![]));
        assert_eq!(
            db.call(&tm, pub_ret("20240101000000000000", None)),
            Value::Map(vec![])
        );
        assert_eq!(
            db.call(&tm, map([("cmd", s("pub_ret"))])),
            Value::Map(vec![])
        );
    }

    #[test]
    fn pub_ret_for_a_job_no_longer_watched_reads_the_job_store_for_its_publisher_only() {
        use halite_jobcache::{JobStore, NewReturn};
        let (tm, web, db) = setup(PEER);
        let jid = "20240101000000000001";
        let load = map([("fun", s("test.ping")), ("id", s("web1"))]);
        tm.store.save_load(jid, &load, &["db1".into()], 1).unwrap();
        let ret = map([("return", Value::from(true)), ("id", s("db1"))]);
        let _ = tm
            .store
            .add_returns(
                &[NewReturn {
                    jid,
                    minion_id: "db1",
                    load: &ret,
                    owed: false,
                }],
                1,
            )
            .unwrap();
        assert_eq!(
            web.call(&tm, pub_ret(jid, Some(1.0))),
            map([("db1", map([("ret", Value::from(true))]))])
        );
        assert_eq!(db.call(&tm, pub_ret(jid, Some(1.0))), Value::Map(vec![]));
    }

    #[test]
    fn minion_publish_answers_the_results_when_the_job_completes() {
        let (tm, web, db) = setup(PEER);
        let mut load = minion_pub("test.ping", "db1", vec![]);
        value::set(&mut load, "cmd", s("minion_publish"));
        value::set(&mut load, "form", s("full"));
        let nonce = web.call_held(&tm, load);
        let jid = tm.events.tags("salt/job/")[0]
            .split('/')
            .nth(2)
            .unwrap()
            .to_owned();
        db.return_job(&tm, &jid, "test.ping", Value::from(true));
        let reply = tm
            .wire
            .held_reply(&web.peer(), Duration::from_secs(5))
            .unwrap();
        let got = web.open(&reply, &nonce);
        let db1 = value::get(&got, "db1").unwrap();
        assert_eq!(value::get(db1, "ret"), Some(&Value::from(true)));
        assert_eq!(value::get_str(&got, "__jid__"), Some(jid.as_str()));
    }

    #[test]
    fn a_runner_allowed_by_peer_run_answers_its_return() {
        let (tm, web, db) = setup(PEER);
        let load = map([
            ("cmd", s("minion_runner")),
            ("fun", s("manage.present")),
            ("arg", Value::Array(vec![])),
            ("tmo", Value::from(5)),
            ("no_parse", Value::Array(vec![])),
        ]);
        // No grains reached the master, so nobody counts as connected.
        assert_eq!(web.call(&tm, load.clone()), Value::Array(vec![]));
        assert_eq!(
            db.call(&tm, load),
            Value::Map(vec![]),
            "db1 is not in peer_run"
        );
        let denied = map([
            ("cmd", s("minion_runner")),
            ("fun", s("jobs.list_jobs")),
            ("arg", Value::Array(vec![])),
        ]);
        assert_eq!(web.call(&tm, denied), Value::Map(vec![]));
        assert_eq!(tm.events.tags("halite/peer/deny").len(), 2);
    }
}
