//! `LocalClient`: publish a job and follow its returns on the master bus.

use crate::auth::Credentials;
use crate::follow::{Step, Tracker};
use crate::Error;
use halite_bus::{BusAddr, BusClient, BusSockets, Event, Listener};
use halite_config::MasterConfig;
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a request (a publish, a runner call) may take before "Salt request timed out".
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(30);

/// A job to publish.
#[derive(Debug, Clone)]
pub struct PublishRequest {
    /// Target expression (a string, or a list for `list` targets).
    pub tgt: Value,
    /// `glob`, `pcre`, `list`, `grain`, `compound`, ...
    pub tgt_type: String,
    /// Function name, or a list of names for a multi-function job.
    pub fun: Value,
    /// Arguments (a list; a list of lists for multi-function jobs).
    pub arg: Value,
    /// Returner (`""` for none).
    pub ret: String,
    /// Extra options sent as `kwargs`, as `salt` sends them: `delimiter`, and the
    /// returners' `ret_config` and `ret_kwargs` (which the master copies into the job's
    /// publish load; they never go at the top level of the request).
    pub kwargs: Vec<(String, Value)>,
}

/// The master's answer to a publish.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishReply {
    /// The job id; `None` when no minion matched.
    pub jid: Option<String>,
    /// Minions the master expects to answer.
    pub minions: Vec<String>,
    /// Listed ids without an accepted key.
    pub missing: Vec<String>,
    /// The master's error text, if any.
    pub error: Option<String>,
}

/// One thing that happened to a job being followed.
#[derive(Debug, Clone)]
pub enum JobEvent {
    /// A minion returned: its id and the full return load.
    Return(String, Value),
    /// A minion did not return in time.
    NoReturn(String),
}

/// A client of one master, configured from its master config.
pub struct LocalClient {
    endpoint: String,
    /// The local user's key (`""` when unreadable): every publish load's own `key`.
    user_key: String,
    credentials: Credentials,
    user: String,
    bus: BusAddr,
    max_event_size: usize,
    ctx: zmq::Context,
    /// The master config's `nodegroups` (a map; `Nil` when unset).
    nodegroups: Value,
    /// The master config file, named when a nodegroup is unknown.
    conf_file: PathBuf,
}

/// `salt.utils.user.get_specific_user`: the OS user, or `sudo_<SUDO_USER>` when running as
/// root with `SUDO_USER` set. This is the `user` the master is told in every clear load.
pub fn specific_user() -> String {
    let me = halite_config::current_user().unwrap_or_else(|| "root".into());
    if me == "root" {
        if let Some(sudo) = std::env::var_os("SUDO_USER") {
            return format!("sudo_{}", sudo.to_string_lossy());
        }
    }
    me
}

impl LocalClient {
    /// A client for the master described by `cfg`, reading the user's key like
    /// `LocalClient.__read_master_key` (an unreadable key file gives an empty key) and
    /// authenticating with it ([`Credentials::Key`]) until told otherwise.
    pub fn new(cfg: &MasterConfig) -> Self {
        let user = specific_user();
        let key_user = if (user == "root" && cfg.user != "root") || user.starts_with("sudo_") {
            cfg.user.clone()
        } else {
            user.clone()
        };
        let keyfile: PathBuf = cfg.cachedir.join(format!(".{key_user}_key"));
        let key = std::fs::read_to_string(keyfile).unwrap_or_default();
        let host = match cfg.interface.as_str() {
            "0.0.0.0" => "127.0.0.1".to_owned(),
            "::" => "[::1]".to_owned(),
            h if h.contains(':') => format!("[{h}]"),
            h => h.to_owned(),
        };
        let bus = BusSockets::master(&cfg.sock_dir).pub_addr;
        Self {
            endpoint: format!("tcp://{host}:{}", cfg.ret_port),
            credentials: Credentials::Key(key.clone()),
            user_key: key,
            user,
            bus,
            max_event_size: cfg.max_event_size as usize,
            ctx: zmq::Context::new(),
            nodegroups: cfg.get("nodegroups").cloned().unwrap_or(Value::Nil),
            conf_file: cfg.conf_file.clone(),
        }
    }

    /// Authenticates every later request with `credentials`.
    pub fn set_credentials(&mut self, credentials: Credentials) {
        self.credentials = credentials;
    }

    /// The credentials requests are sent with.
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// Connects to the master bus, listening to every job event.
    pub async fn listen_jobs(&self) -> Result<Listener, Error> {
        self.listen_prefix("salt/job/").await
    }

    /// Sends a publish request and returns the master's reply. The load is
    /// [`publish_load`] with this client's credentials, nodegroups resolved first as
    /// `LocalClient._prep_pub` resolves them ([`halite_target::resolve_nodegroups`]): a
    /// `nodegroup` target, and `N@` words in a compound one, go out as the compound
    /// expression of their groups, so minions never need the master's nodegroups. An
    /// unknown group is Salt's `SaltInvocationError`, "Node group NAME unavailable in
    /// CONF_FILE", and nothing is sent.
    pub async fn publish(&self, req: &PublishRequest) -> Result<PublishReply, Error> {
        self.publish_load_of(req, None).await
    }

    /// [`LocalClient::publish`] with a job id chosen by the caller (as `LocalClient.run_job`
    /// with `jid=`): a batch publishes each of its sub-batches under one jid.
    pub async fn publish_with_jid(
        &self,
        req: &PublishRequest,
        jid: &str,
    ) -> Result<PublishReply, Error> {
        self.publish_load_of(req, Some(jid)).await
    }

    async fn publish_load_of(
        &self,
        req: &PublishRequest,
        jid: Option<&str>,
    ) -> Result<PublishReply, Error> {
        let resolved;
        let req = match halite_target::resolve_nodegroups(&req.tgt, &req.tgt_type, &self.nodegroups)
        {
            Ok(None) => req,
            Ok(Some(expr)) => {
                resolved = PublishRequest {
                    tgt: s(expr),
                    tgt_type: "compound".into(),
                    ..req.clone()
                };
                &resolved
            }
            Err(e) => {
                return Err(Error::Master {
                    name: "SaltInvocationError".into(),
                    message: format!("{e} in {}", self.conf_file.display()),
                })
            }
        };
        let mut load = publish_load(req, &self.user_key, &self.credentials, &self.user);
        if let Some(jid) = jid {
            value::set(&mut load, "jid", s(jid));
        }
        parse_publish_reply(&self.send_clear(load).await?)
    }

    /// Sends one clear load on the request port (`{"enc": "clear", "load": ..., "version": 3}`,
    /// as Salt's `ReqChannel` with `crypt="clear"`) and decodes the reply.
    pub(crate) async fn send_clear(&self, load: Value) -> Result<Value, Error> {
        let body = value::encode(&map([
            ("enc", s("clear")),
            ("load", load),
            ("version", Value::from(3)),
        ]));
        let (ctx, endpoint) = (self.ctx.clone(), self.endpoint.clone());
        let reply = tokio::task::spawn_blocking(move || {
            halite_transport::client::request(&ctx, &endpoint, &body, PUBLISH_TIMEOUT)
        })
        .await
        .map_err(|e| Error::BadReply(e.to_string()))?;
        let reply = match reply {
            Ok(r) => r,
            Err(halite_transport::Error::Timeout(_)) => return Err(Error::Timeout),
            Err(e) => return Err(e.into()),
        };
        value::decode(&reply).map_err(|e| Error::BadReply(e.to_string()))
    }

    /// The `user` sent with every load ([`specific_user`]).
    pub(crate) fn user(&self) -> &str {
        &self.user
    }

    /// Connects to the master bus, listening to events whose tag starts with `prefix`.
    pub(crate) async fn listen_prefix(&self, prefix: &str) -> Result<Listener, Error> {
        BusClient::new(self.max_event_size)
            .listen(&self.bus, prefix)
            .await
            .map_err(|_| Error::NoMaster)
    }

    /// Follows `jid` until every expected minion returned, or until minions stop answering
    /// `saltutil.find_job` probes — `LocalClient.get_iter_returns`, with the probe ending
    /// as soon as every minion asked has answered ([`crate::follow`]). Each return (and,
    /// at the end, each silent minion) is handed to `on_event` as it happens.
    pub async fn follow(
        &self,
        listener: &mut Listener,
        jid: &str,
        expected: &[String],
        timeout: Duration,
        gather_job_timeout: Duration,
        mut on_event: impl FnMut(JobEvent),
    ) -> Result<(), Error> {
        let mut watch = JobWatch::new(jid, timeout, gather_job_timeout);
        watch.expect(expected, Instant::now());
        while let Some(events) = watch.next(self, listener, None).await? {
            events.into_iter().for_each(&mut on_event);
        }
        Ok(())
    }
}

/// Events taken off the bus at most before the job's deadlines are looked at again.
const DRAIN_AT_ONCE: usize = 256;

/// One job being followed on the master bus: its returns, its `new` events, and the
/// find_job probes of its [`Tracker`]. A batch adds minions to it as it publishes to them.
pub(crate) struct JobWatch {
    jid: String,
    ret_prefix: String,
    new_tag: String,
    tracker: Tracker,
}

impl JobWatch {
    pub(crate) fn new(jid: &str, timeout: Duration, gather_job_timeout: Duration) -> Self {
        JobWatch {
            jid: jid.to_owned(),
            ret_prefix: format!("salt/job/{jid}/ret/"),
            new_tag: format!("salt/job/{jid}/new"),
            tracker: Tracker::new(timeout, gather_job_timeout),
        }
    }

    /// Waits for `ids` from `now` on.
    pub(crate) fn expect(&mut self, ids: &[String], now: Instant) {
        self.tracker.expect(ids, now);
    }

    /// The job's next events: returns that arrived, minions given up (after a find_job
    /// probe sent from here), or none when `until` passed first. `None` when nobody is
    /// left to wait for.
    pub(crate) async fn next(
        &mut self,
        client: &LocalClient,
        listener: &mut Listener,
        until: Option<Instant>,
    ) -> Result<Option<Vec<JobEvent>>, Error> {
        loop {
            // Everything already here first: a return that arrived before the last
            // "not running" answer must count before anyone is given up.
            // (Bounded, so a busy bus cannot hold the deadlines back.)
            let mut out = Vec::new();
            for _ in 0..DRAIN_AT_ONCE {
                let Ok(ev) = tokio::time::timeout(Duration::ZERO, listener.recv()).await else {
                    break;
                };
                self.handle(&received(ev)?, &mut out);
            }
            if !out.is_empty() {
                return Ok(Some(out));
            }
            let wake = match self.tracker.step(Instant::now()) {
                Step::Done => return Ok(None),
                Step::GiveUp(ids) => {
                    return Ok(Some(ids.into_iter().map(JobEvent::NoReturn).collect()))
                }
                Step::Probe(ids) => {
                    let req = PublishRequest {
                        tgt: Value::Array(ids.iter().map(|m| s(m.clone())).collect()),
                        tgt_type: "list".into(),
                        fun: s("saltutil.find_job"),
                        arg: Value::Array(vec![s(self.jid.clone())]),
                        ret: String::new(),
                        kwargs: vec![],
                    };
                    tracing::debug!("Checking whether jid {} is still running", self.jid);
                    let (jid, reached) = match client.publish(&req).await {
                        Ok(reply) => (reply.jid, reply.minions),
                        Err(_) => (None, Vec::new()),
                    };
                    self.tracker.probe_sent(jid, ids, &reached, Instant::now());
                    continue;
                }
                Step::Wait(at) => at,
            };
            let wake = until.map_or(wake, |u| u.min(wake));
            match tokio::time::timeout_at(wake.into(), listener.recv()).await {
                Ok(ev) => {
                    self.handle(&received(ev)?, &mut out);
                    if !out.is_empty() {
                        return Ok(Some(out));
                    }
                }
                Err(_) if until.is_some_and(|u| u <= Instant::now()) => return Ok(Some(out)),
                Err(_) => {}
            }
        }
    }

    /// One bus event: a return of the job (a [`JobEvent::Return`] when it is news), an
    /// answer to the probe in flight, or the job's `new` event naming more minions.
    fn handle(&mut self, ev: &Event, out: &mut Vec<JobEvent>) {
        let tag = ev.tag();
        if let Some(id) = tag.strip_prefix(&self.ret_prefix) {
            if self.tracker.returned(id) {
                out.push(JobEvent::Return(id.to_owned(), ev.data().clone()));
            }
        } else if let Some(pjid) = self.tracker.probe_jid() {
            let probe_prefix = format!("salt/job/{pjid}/ret/");
            if let Some(id) = tag.strip_prefix(&probe_prefix) {
                let pjid = pjid.to_owned();
                let running = still_running(value::get(ev.data(), "return"));
                self.tracker.probe_answer(&pjid, id, running);
                return;
            }
        }
        if tag == self.new_tag {
            let more = names(value::get(ev.data(), "minions"));
            self.tracker.expect(&more, Instant::now());
        }
    }
}

/// An event read off the bus, or the end of the bus.
fn received(ev: Result<Option<Event>, halite_bus::Error>) -> Result<Event, Error> {
    match ev {
        Ok(Some(ev)) => Ok(ev),
        Ok(None) | Err(_) => Err(Error::NoMaster),
    }
}

/// Whether a `saltutil.find_job` return says the job still runs: a non-empty dict, as
/// `get_iter_returns` reads it (`{}` is "not running"; a string is an error, logged and
/// not counted).
fn still_running(ret: Option<&Value>) -> bool {
    match ret {
        Some(r @ Value::Map(entries)) if !entries.is_empty() => {
            !matches!(value::get(r, "return"), Some(Value::Map(m)) if m.is_empty())
        }
        Some(Value::String(text)) => {
            tracing::error!("unexpected return from minion: {text}");
            false
        }
        _ => false,
    }
}

/// The clear `publish` load of `LocalClient._prep_pub`: `cmd`, `tgt`, `fun`, `arg`, the
/// user's `key`, `tgt_type`, `ret`, `jid`, then `kwargs` (the request's options followed
/// by the credentials' entries, [`Credentials::publish_kwargs`]; left out when empty) and
/// `user`. A [`Credentials::Key`] is the load's `key`; with other credentials the `key`
/// is still the user's, as Salt sends it.
pub fn publish_load(
    req: &PublishRequest,
    user_key: &str,
    credentials: &Credentials,
    user: &str,
) -> Value {
    let key = match credentials {
        Credentials::Key(k) => k.as_str(),
        _ => user_key,
    };
    let mut load = vec![
        (s("cmd"), s("publish")),
        (s("tgt"), req.tgt.clone()),
        (s("fun"), req.fun.clone()),
        (s("arg"), req.arg.clone()),
        (s("key"), s(key)),
        (s("tgt_type"), s(req.tgt_type.clone())),
        (s("ret"), s(req.ret.clone())),
        (s("jid"), s("")),
    ];
    let mut kwargs: Vec<(Value, Value)> = req
        .kwargs
        .iter()
        .map(|(k, v)| (s(k.clone()), v.clone()))
        .collect();
    kwargs.extend(credentials.publish_kwargs());
    if !kwargs.is_empty() {
        load.push((s("kwargs"), Value::Map(kwargs)));
    }
    load.push((s("user"), s(user)));
    Value::Map(load)
}

fn names(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(value::str_of)
            .map(str::to_owned)
            .collect(),
        _ => vec![],
    }
}

/// Reads `{"enc": "clear", "load": {"jid", "minions", "missing"}}` or an error reply:
/// `{"error": ...}`, or a bare string (what Salt's master answers when publishing raised,
/// e.g. `prep_jid` could not store a jid), which `LocalClient.pub` raises as a
/// `PublishError` carrying the text.
pub fn parse_publish_reply(reply: &Value) -> Result<PublishReply, Error> {
    let error = match reply {
        Value::String(_) => Some(reply),
        _ => value::get(reply, "error"),
    };
    if let Some(err) = error {
        return Err(match value::get_str(err, "name") {
            Some("AuthenticationError") => Error::Authentication,
            Some("AuthorizationError") => Error::Authorization,
            _ => Error::Master {
                name: "PublishError".into(),
                message: value::str_of(err)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("{err}")),
            },
        });
    }
    let load = value::get(reply, "load").ok_or_else(|| Error::BadReply(format!("{reply}")))?;
    if let Some(err) = value::get(load, "error") {
        if value::get_str(err, "name") == Some("AuthenticationError") {
            return Err(Error::Authentication);
        }
        if value::get_str(err, "name") == Some("AuthorizationError") {
            return Err(Error::Authorization);
        }
    }
    Ok(PublishReply {
        jid: value::get_str(load, "jid")
            .filter(|j| !j.is_empty())
            .map(str::to_owned),
        minions: names(value::get(load, "minions")),
        missing: names(value::get(load, "missing")),
        error: value::get_str(load, "error").map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::map;

    fn ping() -> PublishRequest {
        PublishRequest {
            tgt: s("*"),
            tgt_type: "glob".into(),
            fun: s("test.ping"),
            arg: Value::Array(vec![]),
            ret: String::new(),
            kwargs: vec![],
        }
    }

    #[test]
    fn publish_load_with_the_users_key_has_no_kwargs() {
        let load = publish_load(&ping(), "UK", &Credentials::Key("UK".into()), "fred");
        assert_eq!(
            load,
            map([
                ("cmd", s("publish")),
                ("tgt", s("*")),
                ("fun", s("test.ping")),
                ("arg", Value::Array(vec![])),
                ("key", s("UK")),
                ("tgt_type", s("glob")),
                ("ret", s("")),
                ("jid", s("")),
                ("user", s("fred")),
            ])
        );
    }

    #[test]
    fn publish_load_carries_eauth_and_tokens_in_kwargs_beside_the_users_key() {
        let mut req = ping();
        req.kwargs = vec![("delimiter".into(), s("|"))];
        let creds = Credentials::Eauth {
            eauth: "file".into(),
            username: "alice".into(),
            password: "pw".into(),
        };
        let load = publish_load(&req, "UK", &creds, "fred");
        assert_eq!(value::get_str(&load, "key"), Some("UK"));
        assert_eq!(value::get_str(&load, "user"), Some("fred"));
        assert_eq!(
            value::get(&load, "kwargs"),
            Some(&map([
                ("delimiter", s("|")),
                ("username", s("alice")),
                ("password", s("pw")),
                ("eauth", s("file")),
            ]))
        );
        let load = publish_load(&ping(), "", &Credentials::Token("T".into()), "eve");
        assert_eq!(value::get_str(&load, "key"), Some(""));
        assert_eq!(value::get(&load, "kwargs"), Some(&map([("token", s("T"))])));
    }

    #[test]
    fn returner_options_travel_in_kwargs_and_the_returners_in_ret() {
        let mut req = ping();
        req.ret = "master_bus".into();
        req.kwargs = vec![
            ("ret_config".into(), s("alternative")),
            ("ret_kwargs".into(), map([("tag", s("monitoring"))])),
        ];
        let load = publish_load(&req, "UK", &Credentials::Key("UK".into()), "root");
        assert_eq!(value::get_str(&load, "ret"), Some("master_bus"));
        assert_eq!(value::get(&load, "ret_kwargs"), None);
        assert_eq!(
            value::get(&load, "kwargs"),
            Some(&map([
                ("ret_config", s("alternative")),
                ("ret_kwargs", map([("tag", s("monitoring"))])),
            ]))
        );
    }

    #[test]
    fn a_refused_publish_is_a_publish_error_carrying_the_masters_text() {
        for reply in [
            map([(
                "error",
                s("prep_jid could not store a jid: /c/jobs: denied"),
            )]),
            s("prep_jid could not store a jid: /c/jobs: denied"),
        ] {
            let Err(Error::Master { name, message }) = parse_publish_reply(&reply) else {
                panic!("{reply} is not a publish error");
            };
            assert_eq!(name, "PublishError");
            assert_eq!(message, "prep_jid could not store a jid: /c/jobs: denied");
        }
        let denied = map([(
            "error",
            map([("name", s("AuthorizationError")), ("message", s("x"))]),
        )]);
        assert!(matches!(
            parse_publish_reply(&denied),
            Err(Error::Authorization)
        ));
    }
}
