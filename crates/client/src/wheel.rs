//! Wheel calls: the clear `wheel` command on the request port (`ClearFuncs.wheel`, what
//! `WheelClient.master_call` and salt-api's `wheel` client send).
//!
//! The master runs the function before it answers, so the reply is the result:
//! `{"tag": "salt/wheel/<jid>", "data": {"fun": "wheel.<f>", "jid", "tag", "user",
//! "return", "success"}}`, or `{"error": {"name", "message"}}`. The run also fires
//! `salt/wheel/<jid>/new` and `/ret` on the master bus.
//!
//! The load is `{"fun", "arg", "kwarg", <credentials>, "cmd": "wheel"}`: with both `arg`
//! and `kwarg` the master calls `fun(*arg, **kwarg)`, which works alike on a Halite and a
//! stock master. A key travels without `user`: a stock master would pass `user` to the
//! function as a keyword argument and fail the call.

use crate::auth::Credentials;
use crate::local::LocalClient;
use crate::runner::RunnerRequest;
use crate::Error;
use halite_proto::value::{self, s};
use halite_proto::Value;

/// A wheel call.
#[derive(Debug, Clone, PartialEq)]
pub struct WheelRequest {
    /// `module.function` (`key.list_all`).
    pub fun: String,
    /// Positional arguments.
    pub arg: Vec<Value>,
    /// Keyword arguments, in the order first given.
    pub kwarg: Vec<(Value, Value)>,
}

impl WheelRequest {
    /// A call of `fun` with arguments as `parse_input` gives them: `name=value` strings
    /// and `{"__kwarg__": True, ...}` maps are keyword arguments, anything else is
    /// positional (the splitting of [`RunnerRequest::bind`]).
    pub fn bind(fun: &str, args: &[Value]) -> WheelRequest {
        let RunnerRequest { fun, arg, kwarg } = RunnerRequest::bind(fun, args);
        WheelRequest { fun, arg, kwarg }
    }
}

/// The clear load of a wheel call: `fun`, `arg`, `kwarg`, the credentials (`key` alone
/// for a key; the eauth fields or `token`), then `cmd`.
pub fn wheel_load(req: &WheelRequest, credentials: &Credentials) -> Value {
    let mut load = vec![
        (s("fun"), s(req.fun.clone())),
        (s("arg"), Value::Array(req.arg.clone())),
        (s("kwarg"), Value::Map(req.kwarg.clone())),
    ];
    match credentials {
        Credentials::Key(key) => load.push((s("key"), s(key.clone()))),
        other => load.extend(other.publish_kwargs()),
    }
    load.push((s("cmd"), s("wheel")));
    Value::Map(load)
}

/// The master's answer to a wheel call.
#[derive(Debug, Clone, PartialEq)]
pub struct WheelReply {
    /// The call's jid.
    pub jid: String,
    /// `salt/wheel/<jid>`, the base of its event tags.
    pub tag: String,
    /// The reply's `data`: `fun`, `jid`, `tag`, `user`, `return`, `success`.
    pub data: Value,
}

impl WheelReply {
    /// What the function returned (`data.return`; `None` when the master sent none).
    pub fn ret(&self) -> Option<&Value> {
        value::get(&self.data, "return")
    }

    /// `data.success`: false when the function raised or its arguments did not fit.
    pub fn success(&self) -> bool {
        value::get(&self.data, "success") == Some(&Value::Boolean(true))
    }
}

/// Reads `{"tag", "data": {...}}` or `{"error": {"name", "message"}}`; an error is
/// [`Error::Master`] with the master's name and message (`EauthAuthenticationError`,
/// 'Authentication failure of type "eauth" occurred for user alice.'), which
/// [`Error::is_authentication`] classifies. Anything else, `{}` included (a master without
/// the command), is [`Error::BadReply`].
pub fn parse_wheel_reply(reply: &Value) -> Result<WheelReply, Error> {
    if let Some(err) = value::get(reply, "error") {
        return Err(Error::Master {
            name: value::get_str(err, "name").unwrap_or("").to_owned(),
            message: value::get_str(err, "message")
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{err}")),
        });
    }
    let data = value::get(reply, "data")
        .filter(|d| matches!(d, Value::Map(_)))
        .ok_or_else(|| Error::BadReply(format!("{reply}")))?;
    let jid = value::get_str(data, "jid")
        .filter(|j| !j.is_empty())
        .ok_or_else(|| Error::BadReply(format!("{reply}")))?;
    Ok(WheelReply {
        jid: jid.to_owned(),
        tag: value::get_str(reply, "tag")
            .map(str::to_owned)
            .unwrap_or_else(|| format!("salt/wheel/{jid}")),
        data: data.clone(),
    })
}

impl LocalClient {
    /// Sends a wheel call and returns the master's answer (the function has run).
    pub async fn wheel(&self, req: &WheelRequest) -> Result<WheelReply, Error> {
        let load = wheel_load(req, self.credentials());
        parse_wheel_reply(&self.send_clear(load).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::map;

    #[test]
    fn bind_splits_keyword_arguments_like_the_runner_call() {
        let args =
            halite_config::args::parse_input(&["web*".into(), "include_rejected=True".into()], &[]);
        let req = WheelRequest::bind("key.accept", &args);
        assert_eq!(req.fun, "key.accept");
        assert_eq!(req.arg, vec![s("web*")]);
        assert_eq!(
            req.kwarg,
            vec![(s("include_rejected"), Value::Boolean(true))]
        );
    }

    #[test]
    fn a_key_load_carries_the_key_without_user_and_eauth_or_token_loads_their_fields() {
        let req = WheelRequest::bind("key.list", &[s("acc")]);
        let head = [
            ("fun", s("key.list")),
            ("arg", Value::Array(vec![s("acc")])),
            ("kwarg", Value::Map(vec![])),
        ];
        let with = |extra: &[(&str, Value)]| {
            let mut all = head.to_vec();
            all.extend(extra.iter().cloned());
            all.push(("cmd", s("wheel")));
            map(all)
        };
        assert_eq!(
            wheel_load(&req, &Credentials::Key("K".into())),
            with(&[("key", s("K"))])
        );
        let eauth = Credentials::Eauth {
            eauth: "pam".into(),
            username: "bob".into(),
            password: "pw".into(),
        };
        assert_eq!(
            wheel_load(&req, &eauth),
            with(&[
                ("username", s("bob")),
                ("password", s("pw")),
                ("eauth", s("pam"))
            ])
        );
        assert_eq!(
            wheel_load(&req, &Credentials::Token("T".into())),
            with(&[("token", s("T"))])
        );
    }

    #[test]
    fn a_wheel_reply_gives_the_data_or_the_masters_error() {
        let data = map([
            ("fun", s("wheel.key.list_all")),
            ("jid", s("20240101120000123456")),
            ("tag", s("salt/wheel/20240101120000123456")),
            ("user", s("root")),
            ("return", map([("minions", Value::Array(vec![s("m1")]))])),
            ("success", Value::Boolean(true)),
        ]);
        let reply = map([
            ("tag", s("salt/wheel/20240101120000123456")),
            ("data", data.clone()),
        ]);
        let got = parse_wheel_reply(&reply).unwrap();
        assert_eq!(got.jid, "20240101120000123456");
        assert_eq!(got.tag, "salt/wheel/20240101120000123456");
        assert!(got.success());
        assert_eq!(
            got.ret(),
            Some(&map([("minions", Value::Array(vec![s("m1")]))]))
        );
        let e = parse_wheel_reply(&map([(
            "error",
            map([
                ("name", s("EauthAuthenticationError")),
                (
                    "message",
                    s("Authentication failure of type \"eauth\" occurred for user bob."),
                ),
            ]),
        )]))
        .unwrap_err();
        assert!(e.is_authentication());
        assert_eq!(
            e.to_string(),
            "Authentication failure of type \"eauth\" occurred for user bob."
        );
    }

    #[test]
    fn malformed_wheel_replies_are_errors_not_panics() {
        for reply in [
            Value::Nil,
            Value::Map(vec![]),
            s("bad load"),
            map([("data", s("x"))]),
            map([("data", map([("jid", s(""))]))]),
            map([("data", map([("jid", Value::from(5))]))]),
            map([("error", Value::Nil)]),
        ] {
            assert!(parse_wheel_reply(&reply).is_err(), "{reply}");
        }
    }
}
