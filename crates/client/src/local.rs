//! `LocalClient`: publish a job and follow its returns on the master bus.

use crate::auth::Credentials;
use crate::Error;
use halite_bus::{BusAddr, BusClient, BusSockets, Listener};
use halite_config::MasterConfig;
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::Instant;

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
    /// Extra options sent as `kwargs` (e.g. `delimiter`).
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
    /// [`publish_load`] with this client's credentials.
    pub async fn publish(&self, req: &PublishRequest) -> Result<PublishReply, Error> {
        let load = publish_load(req, &self.user_key, &self.credentials, &self.user);
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
    /// `saltutil.find_job` probes — `LocalClient.get_iter_returns`. Each return (and, at
    /// the end, each silent minion) is handed to `on_event` as it happens.
    pub async fn follow(
        &self,
        listener: &mut Listener,
        jid: &str,
        expected: &[String],
        timeout: Duration,
        gather_job_timeout: Duration,
        mut on_event: impl FnMut(JobEvent),
    ) -> Result<(), Error> {
        let ret_prefix = format!("salt/job/{jid}/ret/");
        let mut pending: BTreeSet<String> = expected.iter().cloned().collect();
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut deadline = Instant::now() + timeout;
        // A find_job probe in flight: its jid, when it ends, and who said "still running".
        let mut probe: Option<(String, Instant, BTreeSet<String>)> = None;
        let mut probe_results: HashMap<String, bool> = HashMap::new();
        loop {
            if pending.is_empty() {
                return Ok(());
            }
            let wake = match &probe {
                Some((_, end, _)) => *end,
                None => deadline,
            };
            let ev = tokio::time::timeout_at(wake, listener.recv()).await;
            match ev {
                Ok(Ok(Some(ev))) => {
                    let tag = ev.tag().to_owned();
                    if let Some(id) = tag.strip_prefix(&ret_prefix) {
                        if seen.insert(id.to_owned()) {
                            pending.remove(id);
                            on_event(JobEvent::Return(id.to_owned(), ev.data().clone()));
                        }
                    } else if let Some((pjid, _, running)) = probe.as_mut() {
                        if let Some(id) = tag.strip_prefix(&format!("salt/job/{pjid}/ret/")) {
                            let busy = value::get(ev.data(), "return").is_some_and(value::truthy);
                            probe_results.insert(id.to_owned(), busy);
                            if busy {
                                running.insert(id.to_owned());
                            }
                        }
                    } else if tag == format!("salt/job/{jid}/new") {
                        if let Some(Value::Array(more)) = value::get(ev.data(), "minions") {
                            for m in more.iter().filter_map(value::str_of) {
                                if !seen.contains(m) {
                                    pending.insert(m.to_owned());
                                }
                            }
                        }
                    }
                }
                Ok(Ok(None)) | Ok(Err(_)) => return Err(Error::NoMaster),
                Err(_) => match probe.take() {
                    // The probe window ended: minions still running get more time.
                    Some((_, _, running)) => {
                        let still: Vec<String> = pending
                            .iter()
                            .filter(|m| running.contains(*m))
                            .cloned()
                            .collect();
                        probe_results.clear();
                        if still.is_empty() {
                            for m in std::mem::take(&mut pending) {
                                on_event(JobEvent::NoReturn(m));
                            }
                            return Ok(());
                        }
                        deadline = Instant::now() + timeout;
                    }
                    // The timeout passed: ask the silent minions whether they still run it.
                    None => {
                        let tgt = Value::Array(pending.iter().map(|m| s(m.clone())).collect());
                        let req = PublishRequest {
                            tgt,
                            tgt_type: "list".into(),
                            fun: s("saltutil.find_job"),
                            arg: Value::Array(vec![s(jid)]),
                            ret: String::new(),
                            kwargs: vec![],
                        };
                        match self.publish(&req).await {
                            Ok(PublishReply {
                                jid: Some(pjid), ..
                            }) => {
                                probe = Some((
                                    pjid,
                                    Instant::now() + gather_job_timeout,
                                    BTreeSet::new(),
                                ));
                            }
                            _ => {
                                for m in std::mem::take(&mut pending) {
                                    on_event(JobEvent::NoReturn(m));
                                }
                                return Ok(());
                            }
                        }
                    }
                },
            }
        }
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

/// Reads `{"enc": "clear", "load": {"jid", "minions", "missing"}}` or an error reply.
pub fn parse_publish_reply(reply: &Value) -> Result<PublishReply, Error> {
    if let Some(err) = value::get(reply, "error") {
        return Err(match value::get_str(err, "name") {
            Some("AuthenticationError") => Error::Authentication,
            Some("AuthorizationError") => Error::Authorization,
            _ => Error::BadReply(format!("{err}")),
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
}
