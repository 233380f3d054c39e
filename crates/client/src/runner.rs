//! Runner calls: the clear `runner` command on the request port (`ClearFuncs.runner`), and
//! the run's `salt/run/<jid>/...` events on the master bus.
//!
//! The load is what Salt's `RunnerClient.cmd_async`/`cmd_sync` send through `master_call`
//! after `_reformat_low`: `{"fun", "kwarg": {"kwarg": {...}, "arg": [...]}, "user", "key",
//! "cmd": "runner"}`. The master runs `fun(*arg, **kwarg)` in the background and answers at
//! once with `{"tag": "salt/run/<jid>", "jid": ...}` (or `{"error": {"name", "message"}}`);
//! the run then fires `salt/run/<jid>/new`, any events of its own under the same tag, and
//! `salt/run/<jid>/ret` with the full return (`fun`, `jid`, `user`, `fun_args`, `return`,
//! `success`, and `retcode` when it raised).
//!
//! Deviation: `_reformat_low` drops keyword arguments the runner's signature does not take
//! (`ignore_invalid=True`); a client without the Python signature cannot, so every keyword
//! argument is sent and an unexpected one makes the runner report Python's `TypeError`.

use crate::auth::Credentials;
use crate::local::LocalClient;
use crate::Error;
use halite_bus::Listener;
use halite_proto::value::{self, s};
use halite_proto::Value;
use std::time::Duration;

/// Pause between attempts to reconnect to the master bus while following a run.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// A runner call.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerRequest {
    /// `module.function`.
    pub fun: String,
    /// Positional arguments.
    pub arg: Vec<Value>,
    /// Keyword arguments, in the order first given.
    pub kwarg: Vec<(Value, Value)>,
}

impl RunnerRequest {
    /// Splits arguments as `parse_input` gives them into positional and keyword ones, as
    /// `salt.minion.load_args_and_kwargs` does: every map whose `__kwarg__` is `True`
    /// contributes its other keys, a string of the form `name=value` (one YAML quoting
    /// left after `parse_input`) is a keyword argument with a YAML-typed value, and
    /// anything else is positional (a map without `__kwarg__: True` loses any `__kwarg__`
    /// key, which Salt's second `parse_input` pass pops). A later value for a name
    /// replaces an earlier one.
    pub fn bind(fun: &str, args: &[Value]) -> RunnerRequest {
        let mut req = RunnerRequest {
            fun: fun.to_owned(),
            arg: Vec::new(),
            kwarg: Vec::new(),
        };
        for arg in args {
            match arg {
                Value::Map(entries)
                    if entries.iter().any(|(k, v)| {
                        value::str_of(k) == Some("__kwarg__") && *v == Value::Boolean(true)
                    }) =>
                {
                    for (k, v) in entries {
                        if value::str_of(k) != Some("__kwarg__") {
                            req.set_kwarg(k.clone(), v.clone());
                        }
                    }
                }
                // `parse_input([arg])` pops `__kwarg__` from a map it keeps as positional.
                Value::Map(entries) => req.arg.push(Value::Map(
                    entries
                        .iter()
                        .filter(|(k, _)| value::str_of(k) != Some("__kwarg__"))
                        .cloned()
                        .collect(),
                )),
                Value::String(text) => {
                    match text.as_str().and_then(halite_config::args::parse_kwarg) {
                        Some((name, v)) => {
                            req.set_kwarg(s(name), halite_config::args::yamlify_arg(v));
                        }
                        None => req.arg.push(arg.clone()),
                    }
                }
                other => req.arg.push(other.clone()),
            }
        }
        req
    }

    /// Whether keyword argument `name` is given.
    pub fn has_kwarg(&self, name: &str) -> bool {
        self.kwarg
            .iter()
            .any(|(k, _)| value::str_of(k) == Some(name))
    }

    /// Sets keyword argument `key`, keeping its position if it is already given.
    pub fn set_kwarg(&mut self, key: Value, val: Value) {
        match self.kwarg.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = val,
            None => self.kwarg.push((key, val)),
        }
    }
}

/// The clear load of a runner call: `fun`, `kwarg`, the credentials'
/// [`Credentials::runner_fields`] (`user` and `key` for a key; the eauth fields or
/// `token`, without `user`, as `RunnerClient.master_call` sends them), then `cmd`.
pub fn runner_load(req: &RunnerRequest, credentials: &Credentials, user: &str) -> Value {
    let mut load = vec![
        (s("fun"), s(req.fun.clone())),
        (
            s("kwarg"),
            Value::Map(vec![
                (s("kwarg"), Value::Map(req.kwarg.clone())),
                (s("arg"), Value::Array(req.arg.clone())),
            ]),
        ),
    ];
    load.extend(credentials.runner_fields(user));
    load.push((s("cmd"), s("runner")));
    Value::Map(load)
}

/// The master's answer to a runner call: where the run's events will be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerJob {
    /// The run's jid.
    pub jid: String,
    /// The base of its event tags, `salt/run/<jid>`.
    pub tag: String,
}

/// Reads `{"tag", "jid"}` or `{"error": {"name", "message"}}`; an error is
/// [`Error::Master`] with the master's name and message (`EauthAuthenticationError`,
/// 'Authentication failure of type "eauth" occurred for user alice.'), whatever the
/// name: [`Error::is_authentication`] and [`Error::is_authorization`] classify it.
pub fn parse_runner_reply(reply: &Value) -> Result<RunnerJob, Error> {
    if let Some(err) = value::get(reply, "error") {
        return Err(Error::Master {
            name: value::get_str(err, "name").unwrap_or("").to_owned(),
            message: value::get_str(err, "message")
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{err}")),
        });
    }
    let jid = value::get_str(reply, "jid")
        .filter(|j| !j.is_empty())
        .ok_or_else(|| Error::BadReply(format!("{reply}")))?;
    Ok(RunnerJob {
        jid: jid.to_owned(),
        tag: value::get_str(reply, "tag")
            .map(str::to_owned)
            .unwrap_or_else(|| format!("salt/run/{jid}")),
    })
}

/// One event of a run being followed.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    /// `salt/run/<jid>/new`: the master started the runner.
    New(Value),
    /// Any other `salt/run/<jid>/<suffix>` event the runner fired (progress and the like).
    Other {
        /// The tag after `salt/run/<jid>/`.
        suffix: String,
        /// The event data.
        data: Value,
    },
    /// `salt/run/<jid>/ret`: the runner finished; the full return.
    Ret(Value),
}

/// Classifies a bus event for the run `jid`; `None` when it belongs to something else.
pub fn run_event(jid: &str, tag: &str, data: Value) -> Option<RunEvent> {
    let suffix = tag
        .strip_prefix("salt/run/")?
        .strip_prefix(jid)?
        .strip_prefix('/')?;
    Some(match suffix {
        "new" => RunEvent::New(data),
        "ret" => RunEvent::Ret(data),
        other => RunEvent::Other {
            suffix: other.to_owned(),
            data,
        },
    })
}

impl LocalClient {
    /// Connects to the master bus, listening to runner events (`salt/run/`). Connect
    /// before sending the call, or an early event may be missed.
    pub async fn listen_runs(&self) -> Result<Listener, Error> {
        self.listen_prefix("salt/run/").await
    }

    /// Sends a runner call and returns where its events will be.
    pub async fn runner(&self, req: &RunnerRequest) -> Result<RunnerJob, Error> {
        let load = runner_load(req, self.credentials(), self.user());
        parse_runner_reply(&self.send_clear(load).await?)
    }

    /// The next event of run `jid`. When the bus connection breaks it reconnects, once a
    /// second until it succeeds, as Salt's `get_event(auto_reconnect=True)` does (events
    /// fired while it was away are lost); so it only ends with an event.
    pub async fn next_run_event(&self, listener: &mut Listener, jid: &str) -> RunEvent {
        loop {
            match listener.recv().await {
                Ok(Some(ev)) => {
                    let (tag, data) = ev.into_parts();
                    if let Some(run) = run_event(jid, &tag, data) {
                        return run;
                    }
                }
                Ok(None) | Err(_) => {
                    tracing::warn!("Lost the master event bus; reconnecting");
                    loop {
                        tokio::time::sleep(RECONNECT_PAUSE).await;
                        if let Ok(l) = self.listen_runs().await {
                            *listener = l;
                            break;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::map;

    fn kw(pairs: &[(&str, Value)]) -> Value {
        let mut m = vec![(s("__kwarg__"), Value::Boolean(true))];
        m.extend(pairs.iter().map(|(k, v)| (s(*k), v.clone())));
        Value::Map(m)
    }

    #[test]
    fn bind_splits_positional_and_keyword_arguments_like_load_args_and_kwargs() {
        let args = halite_config::args::parse_input(
            &[
                "20240101120000123456".into(),
                "7".into(),
                "missing=True".into(),
                "tgt=web*".into(),
            ],
            &[],
        );
        let req = RunnerRequest::bind("jobs.lookup_jid", &args);
        assert_eq!(req.fun, "jobs.lookup_jid");
        assert_eq!(req.arg, vec![s("20240101120000123456"), Value::from(7)]);
        assert_eq!(
            req.kwarg,
            vec![(s("missing"), Value::Boolean(true)), (s("tgt"), s("web*"))]
        );
    }

    #[test]
    fn bind_merges_every_kwarg_map_and_quoted_name_value_strings() {
        let req = RunnerRequest::bind(
            "test.arg",
            &[
                kw(&[("a", Value::from(1))]),
                s("b=[1, 2]"),
                // `__kwarg__` must be exactly True; anything else makes a positional map.
                map([("__kwarg__", Value::from(1)), ("c", Value::from(3))]),
                kw(&[("a", Value::from(2))]),
                s("plain"),
            ],
        );
        assert_eq!(req.arg, vec![map([("c", Value::from(3))]), s("plain")]);
        assert_eq!(
            req.kwarg,
            vec![
                (s("a"), Value::from(2)),
                (s("b"), Value::Array(vec![Value::from(1), Value::from(2)]))
            ]
        );
        assert!(req.has_kwarg("b"));
        assert!(!req.has_kwarg("timeout"));
        let empty = RunnerRequest::bind("manage.up", &[]);
        assert!(empty.arg.is_empty() && empty.kwarg.is_empty());
    }

    #[test]
    fn set_kwarg_replaces_in_place_or_appends() {
        let mut req = RunnerRequest::bind("manage.up", &[kw(&[("tgt", s("a"))])]);
        req.set_kwarg(s("timeout"), Value::from(9));
        req.set_kwarg(s("tgt"), s("b"));
        assert_eq!(
            req.kwarg,
            vec![(s("tgt"), s("b")), (s("timeout"), Value::from(9))]
        );
    }

    #[test]
    fn runner_load_has_the_shape_of_salts_master_call() {
        let req = RunnerRequest::bind("manage.up", &[s("x"), kw(&[("tgt", s("w*"))])]);
        let load = runner_load(&req, &Credentials::Key("KEY".into()), "sudo_alice");
        assert_eq!(
            load,
            map([
                ("fun", s("manage.up")),
                (
                    "kwarg",
                    map([
                        ("kwarg", map([("tgt", s("w*"))])),
                        ("arg", Value::Array(vec![s("x")]))
                    ])
                ),
                ("user", s("sudo_alice")),
                ("key", s("KEY")),
                ("cmd", s("runner")),
            ])
        );
    }

    #[test]
    fn eauth_and_token_runner_loads_carry_the_credentials_at_the_top_without_user() {
        let req = RunnerRequest::bind("manage.up", &[]);
        let kwarg = map([("kwarg", Value::Map(vec![])), ("arg", Value::Array(vec![]))]);
        let creds = Credentials::Eauth {
            eauth: "pam".into(),
            username: "bob".into(),
            password: "pw".into(),
        };
        assert_eq!(
            runner_load(&req, &creds, "root"),
            map([
                ("fun", s("manage.up")),
                ("kwarg", kwarg.clone()),
                ("username", s("bob")),
                ("password", s("pw")),
                ("eauth", s("pam")),
                ("cmd", s("runner")),
            ])
        );
        assert_eq!(
            runner_load(&req, &Credentials::Token("T".into()), "root"),
            map([
                ("fun", s("manage.up")),
                ("kwarg", kwarg),
                ("token", s("T")),
                ("cmd", s("runner")),
            ])
        );
    }

    #[test]
    fn runner_reply_gives_the_jid_or_the_masters_error() {
        let ok = map([
            ("tag", s("salt/run/20240101120000123456")),
            ("jid", s("20240101120000123456")),
        ]);
        assert_eq!(
            parse_runner_reply(&ok).unwrap(),
            RunnerJob {
                jid: "20240101120000123456".into(),
                tag: "salt/run/20240101120000123456".into()
            }
        );
        let no_tag = map([("jid", s("1"))]);
        assert_eq!(parse_runner_reply(&no_tag).unwrap().tag, "salt/run/1");
        let err = |name: &str, message: &str| {
            map([("error", map([("name", s(name)), ("message", s(message))]))])
        };
        for name in [
            "UserAuthenticationError",
            "EauthAuthenticationError",
            "TokenAuthenticationError",
        ] {
            let message = "Authentication failure of type \"eauth\" occurred for user alice.";
            let e = parse_runner_reply(&err(name, message)).unwrap_err();
            assert!(e.is_authentication() && !e.is_authorization(), "{name}");
            assert_eq!(e.to_string(), message);
        }
        let e = parse_runner_reply(&err("AuthorizationError", "no")).unwrap_err();
        assert!(e.is_authorization() && !e.is_authentication());
        let e =
            parse_runner_reply(&err("SaltInvocationError", "'x.y' is not available.")).unwrap_err();
        assert_eq!(e.to_string(), "'x.y' is not available.");
        assert!(matches!(e, Error::Master { ref name, .. } if name == "SaltInvocationError"));
    }

    #[test]
    fn malformed_runner_replies_are_errors_not_panics() {
        for reply in [
            Value::Nil,
            s("bad load"),
            Value::Array(vec![]),
            map([("jid", s(""))]),
            map([("jid", Value::from(5))]),
            map([("error", s("text"))]),
            map([("error", Value::Nil)]),
        ] {
            assert!(parse_runner_reply(&reply).is_err(), "{reply}");
        }
        let e = parse_runner_reply(&map([("error", map([("name", Value::from(1))]))])).unwrap_err();
        assert!(matches!(e, Error::Master { .. }));
    }

    #[test]
    fn run_events_are_classified_by_suffix_for_this_jid_only() {
        let d = map([("x", Value::from(1))]);
        assert_eq!(
            run_event("42", "salt/run/42/new", d.clone()),
            Some(RunEvent::New(d.clone()))
        );
        assert_eq!(
            run_event("42", "salt/run/42/ret", d.clone()),
            Some(RunEvent::Ret(d.clone()))
        );
        assert_eq!(
            run_event("42", "salt/run/42/progress/x", d.clone()),
            Some(RunEvent::Other {
                suffix: "progress/x".into(),
                data: d.clone()
            })
        );
        for other in [
            "salt/run/421/ret",
            "salt/run/4/ret",
            "salt/run/42",
            "salt/job/42/ret/m",
            "salt/run/42ret",
        ] {
            assert_eq!(run_event("42", other, d.clone()), None, "{other}");
        }
    }
}
