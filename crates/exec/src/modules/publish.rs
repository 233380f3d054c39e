//! `salt/modules/publish.py`: a minion publishes a job to other minions
//! (`publish.publish`, `publish.full_data`) or runs a runner on the master
//! (`publish.runner`) through the master's peer interface (`peer`, `peer_run`).
//!
//! # What it does
//!
//! * `arg` is typed as Salt's `_parse_args` types it: a string goes through `yamlify_arg`
//!   (commas do not split: `'foo,1020,1020'` is one argument; `"['foo', 1020]"` is two),
//!   `None` becomes `[]`, anything that is not a list becomes a one-item list (`''` is
//!   `['']`). `k=v` strings pass through as strings; the master parses them.
//! * A publish sends `{cmd: "minion_pub", fun, arg, tgt, tgt_type, ret, tmo, form, id,
//!   no_parse}`; a falsy reply (denied, invalid) is `{}`, a reply with no minions is
//!   `None`. Otherwise it asks for the returns with `{cmd: "pub_ret", id, jid}` until
//!   every expected minion has returned or `timeout` seconds have passed, and returns
//!   `{minion: return}` (`publish`) or `{minion: {"ret": ..., "out": ...}}` (`full_data`);
//!   at the deadline the partial set, or `{}` when nothing came.
//! * `publish.runner` sends `{cmd: "minion_runner", fun, arg, tmo, id, no_parse}` and
//!   returns whatever the master answers.
//! * Salt's refusals and texts: publish calls are refused locally (`{}`, logged at
//!   INFO), no master (`halite-call --local`) gives `{}` or the runner's "No access to
//!   master" text, a request timeout gives `'<fun>' publish timed out` /
//!   `'<fun>' runner publish timed out`; replies of the wrong shape fail with the Python
//!   exception Salt's code would raise, never a panic.
//!
//! # Halite extension: held `pub_ret`
//!
//! Every `pub_ret` carries `wait`: the seconds left until the deadline (a float, at most
//! [`MAX_HOLD`]). A Halite master holds its reply until every expected minion has
//! returned or `wait` elapses, so the call returns as soon as the last minion returns; a
//! stock master ignores the field and answers at once. A reply that comes back incomplete
//! in under [`POLL_INTERVAL`] is followed by a pause to the end of the interval, which is
//! stock's polling cadence: against a stock master nothing changes.
//!
//! All three requests go through [`MasterChannel::request_apart`], on a connection of
//! their own: a held `pub_ret` or a long runner must not hold up the minion's other
//! requests, least of all the return of the job being waited for when the minion
//! targets itself. (Stock Salt's module opens a channel per call for the same reason.)
//!
//! # Deviations from Salt
//!
//! * `via_master`: Halite's minion has one master. Its request URI stands for Salt's
//!   `master_uri_list` (a list Salt only builds when `master` is a list, refusing
//!   `via_master` otherwise); the name must match as in Salt (`//<via_master>:` in the
//!   URI, which holds the resolved IP) or Salt's "Could not find match" error follows.
//! * The deadline is measured on the clock (the call ends at the first reply after
//!   `timeout` seconds); Salt counts 0.3 s polls, which ends at the same time when the
//!   master answers at once. A `timeout` of infinity or NaN never expires, as in Salt
//!   (the job can still be killed: the wait stops when the job is cancelled).
//! * Returns are merged across `pub_ret` replies (a minion seen once stays); Salt keeps
//!   the last reply, which with a master that answers from its job cache is the same.

use std::time::{Duration, Instant};

use halite_config::args::yamlify_arg;
use rmpv::Value;

use super::{check_cancel, interruptible_sleep};
use crate::error::ExecError;
use crate::pyval::{py_eq, py_repr, py_str, py_type_name, truthy};
use crate::registry::{Export, Invocation};
use crate::{Context, MasterChannel, SALT_REQ_TIMEOUT_ERROR};

pub(crate) const EXPORTS: &[Export] = &[
    ("publish.full_data", full_data, None),
    ("publish.publish", publish, None),
    ("publish.runner", runner, None),
];

/// Stock's `loop_interval`: the shortest time between two `pub_ret` requests.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(300);

/// The longest `wait` a `pub_ret` asks for (a longer or endless `timeout` polls again).
pub(crate) const MAX_HOLD: Duration = Duration::from_secs(60);

/// Which shape the returns come back in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `{minion: return}`.
    Clean,
    /// `{minion: {"ret": return, "out": outputter}}`.
    Full,
}

impl Form {
    fn name(self) -> &'static str {
        match self {
            Form::Clean => "clean",
            Form::Full => "full",
        }
    }
}

fn key(k: &str) -> Value {
    Value::from(k)
}

fn empty_dict() -> Value {
    Value::Map(Vec::new())
}

/// `_parse_args`: `yamlify_arg(arg)`, then `None` → `[]`, a non-list → `[value]`.
fn parse_args(arg: &Value) -> Vec<Value> {
    let typed = match arg {
        Value::String(s) => match s.as_str() {
            Some(text) => yamlify_arg(text),
            None => arg.clone(),
        },
        other => other.clone(),
    };
    match typed {
        Value::Nil => Vec::new(),
        Value::Array(items) => items,
        other => vec![other],
    }
}

/// `__opts__.get("no_parse", [])`.
fn no_parse(ctx: &Context) -> Value {
    ctx.opts
        .get("no_parse")
        .cloned()
        .unwrap_or(Value::Array(Vec::new()))
}

/// `value[name]` with Python's errors for a missing key or a value that is not a dict.
fn subscript<'v>(value: &'v Value, name: &str) -> Result<&'v Value, ExecError> {
    match value {
        Value::Map(entries) => entries
            .iter()
            .find(|(k, _)| py_eq(k, &key(name)))
            .map(|(_, v)| v)
            .ok_or_else(|| ExecError::exception("KeyError", py_repr(&key(name)))),
        Value::String(_) => Err(ExecError::TypeError(
            "string indices must be integers, not 'str'".to_owned(),
        )),
        Value::Array(_) => Err(ExecError::TypeError(
            "list indices must be integers or slices, not str".to_owned(),
        )),
        other => Err(ExecError::TypeError(format!(
            "'{}' object is not subscriptable",
            py_type_name(other)
        ))),
    }
}

/// `set(value)`: the members Python would iterate over.
fn members(value: &Value) -> Result<Vec<Value>, ExecError> {
    match value {
        Value::Array(items) => Ok(items.clone()),
        Value::Map(entries) => Ok(entries.iter().map(|(k, _)| k.clone()).collect()),
        Value::String(_) => Ok(py_str(value)
            .chars()
            .map(|c| Value::from(c.to_string()))
            .collect()),
        other => Err(ExecError::TypeError(format!(
            "'{}' object is not iterable",
            py_type_name(other)
        ))),
    }
}

/// Whether a failed request failed because the master did not answer in time.
fn timed_out(err: &ExecError) -> bool {
    matches!(err, ExecError::Exception { kind, .. } if *kind == SALT_REQ_TIMEOUT_ERROR)
}

/// The `timeout` as a number of seconds, as Python compares it with a float; `None` when
/// the comparison would raise.
fn timeout_secs(timeout: &Value) -> Option<f64> {
    match timeout {
        Value::Boolean(b) => Some(f64::from(u8::from(*b))),
        Value::Integer(i) => i.as_f64(),
        Value::F32(f) => Some(f64::from(*f)),
        Value::F64(f) => Some(*f),
        _ => None,
    }
}

/// `publish.publish(tgt, fun, arg=None, tgt_type="glob", returner="", timeout=5,
/// via_master=None)`.
fn publish(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    publish_job(inv, Form::Clean, inv.arg("via_master"))
}

/// `publish.full_data(tgt, fun, arg=None, tgt_type="glob", returner="", timeout=5)`.
fn full_data(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    publish_job(inv, Form::Full, &Value::Nil)
}

/// Salt's `__opts__["master_uri_list"]` as Halite has it: the one master's URI.
fn master_uri_list(master: &dyn MasterChannel) -> Result<Vec<String>, ExecError> {
    master.master_uri().map(|uri| vec![uri]).ok_or_else(|| {
        ExecError::SaltInvocation(
            "Could not find list of masters in minion configuration but `via_master` was \
             specified."
                .to_owned(),
        )
    })
}

/// The `via_master` check of `_publish`: the master URI the name matches.
fn via_master_uri(master: &dyn MasterChannel, via_master: &Value) -> Result<String, ExecError> {
    let uris = master_uri_list(master)?;
    let needle = format!("//{}:", py_str(via_master));
    match uris.iter().rev().find(|uri| uri.contains(&needle)) {
        Some(uri) => Ok(uri.clone()),
        None => Err(ExecError::SaltInvocation(format!(
            "Could not find match for {} in list of configured masters {} when using \
             `via_master` option",
            py_str(via_master),
            py_repr(&Value::Array(
                uris.iter().map(|u| Value::from(u.as_str())).collect()
            ))
        ))),
    }
}

/// `_publish(..., wait=True)`.
fn publish_job(inv: &Invocation<'_>, form: Form, via_master: &Value) -> Result<Value, ExecError> {
    let ctx = inv.ctx;
    let Some(master) = ctx.master.as_deref() else {
        tracing::error!(
            "Cannot run publish commands without a connection to a salt master. No command \
             sent."
        );
        return Ok(empty_dict());
    };
    let fun = inv.arg("fun");
    if !matches!(fun, Value::String(_)) {
        return Err(ExecError::exception(
            "AttributeError",
            format!(
                "'{}' object has no attribute 'startswith'",
                py_type_name(fun)
            ),
        ));
    }
    let fun_name = py_str(fun);
    if fun_name.starts_with("publish.") {
        tracing::info!("Cannot publish publish calls. Returning {{}}");
        return Ok(empty_dict());
    }
    let arg = parse_args(inv.arg("arg"));
    let master_uri = if truthy(via_master) {
        Some(via_master_uri(master, via_master)?)
    } else {
        master.master_uri()
    };
    tracing::info!(
        "Publishing '{fun_name}' to {}",
        master_uri.as_deref().unwrap_or("the master")
    );
    let timeout = inv.arg("timeout");
    let load = Value::Map(vec![
        (key("cmd"), key("minion_pub")),
        (key("fun"), fun.clone()),
        (key("arg"), Value::Array(arg)),
        (key("tgt"), inv.arg("tgt").clone()),
        (key("tgt_type"), inv.arg("tgt_type").clone()),
        (key("ret"), inv.arg("returner").clone()),
        (key("tmo"), timeout.clone()),
        (key("form"), key(form.name())),
        (key("id"), Value::from(ctx.id.as_str())),
        (key("no_parse"), no_parse(ctx)),
    ]);
    let peer_data = match send(ctx, master, load, Duration::ZERO) {
        Ok(reply) => reply,
        Err(e) if timed_out(&e) => {
            return Ok(Value::from(format!("'{fun_name}' publish timed out")))
        }
        Err(e) => return Err(e),
    };
    if !truthy(&peer_data) {
        return Ok(empty_dict());
    }
    let matched = members(subscript(&peer_data, "minions")?)?;
    if matched.is_empty() {
        // Salt's loop never runs and the function falls off its end.
        return Ok(Value::Nil);
    }
    let jid = subscript(&peer_data, "jid")?.clone();
    let returns = wait_for_returns(ctx, master, &jid, &matched, timeout)?;
    shape(returns, form)
}

/// Sends one request apart from the minion's other requests; a cancelled job ends here.
fn send(
    ctx: &Context,
    master: &dyn MasterChannel,
    load: Value,
    hold: Duration,
) -> Result<Value, ExecError> {
    let abort = || ctx.job.is_cancelled();
    let reply = master.request_apart(load, hold, &abort);
    check_cancel(ctx)?;
    reply
}

/// The `pub_ret` loop: the returns once every minion of `matched` has returned, or what
/// there is at the deadline (empty when nothing came).
fn wait_for_returns(
    ctx: &Context,
    master: &dyn MasterChannel,
    jid: &Value,
    matched: &[Value],
    timeout: &Value,
) -> Result<Vec<(Value, Value)>, ExecError> {
    let limit = timeout_secs(timeout);
    let start = Instant::now();
    let mut returns: Vec<(Value, Value)> = Vec::new();
    loop {
        let sent = Instant::now();
        let mut load = vec![
            (key("cmd"), key("pub_ret")),
            (key("id"), Value::from(ctx.id.as_str())),
            (key("jid"), jid.clone()),
        ];
        let hold = limit.map(|limit| {
            let left = limit - start.elapsed().as_secs_f64();
            if left.is_nan() || left >= MAX_HOLD.as_secs_f64() {
                MAX_HOLD
            } else {
                Duration::try_from_secs_f64(left.max(0.0)).unwrap_or(Duration::ZERO)
            }
        });
        if let Some(hold) = hold {
            load.push((key("wait"), Value::F64(hold.as_secs_f64())));
        }
        let reply = send(
            ctx,
            master,
            Value::Map(load),
            hold.unwrap_or(Duration::ZERO),
        )?;
        merge(&mut returns, reply)?;
        if matched
            .iter()
            .all(|m| returns.iter().any(|(k, _)| py_eq(k, m)))
        {
            return Ok(returns);
        }
        let Some(limit) = limit else {
            return Err(ExecError::TypeError(format!(
                "'>' not supported between instances of 'float' and '{}'",
                py_type_name(timeout)
            )));
        };
        // NaN never compares greater, as in Python: such a wait ends only when complete.
        if start.elapsed().as_secs_f64() >= limit {
            return Ok(returns);
        }
        if let Some(rest) = POLL_INTERVAL.checked_sub(sent.elapsed()) {
            interruptible_sleep(ctx, rest)?;
        }
    }
}

/// Adds the entries of a `pub_ret` reply (`{minion: {"ret": ..., "out": ...}}`).
fn merge(returns: &mut Vec<(Value, Value)>, reply: Value) -> Result<(), ExecError> {
    let Value::Map(entries) = reply else {
        return Err(ExecError::exception(
            "AttributeError",
            format!("'{}' object has no attribute 'keys'", py_type_name(&reply)),
        ));
    };
    for (minion, ret) in entries {
        match returns.iter_mut().find(|(k, _)| py_eq(k, &minion)) {
            Some(slot) => slot.1 = ret,
            None => returns.push((minion, ret)),
        }
    }
    Ok(())
}

/// The returns in the shape `form` asks for.
fn shape(returns: Vec<(Value, Value)>, form: Form) -> Result<Value, ExecError> {
    match form {
        Form::Full => Ok(Value::Map(returns)),
        Form::Clean => returns
            .into_iter()
            .map(|(minion, data)| Ok((minion, subscript(&data, "ret")?.clone())))
            .collect::<Result<Vec<_>, ExecError>>()
            .map(Value::Map),
    }
}

/// `publish.runner(fun, arg=None, timeout=5)`.
fn runner(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let ctx = inv.ctx;
    let arg = parse_args(inv.arg("arg"));
    let Some(master) = ctx.master.as_deref() else {
        return Ok(Value::from(
            "No access to master. If using salt-call with --local, please remove.",
        ));
    };
    let fun = inv.arg("fun");
    tracing::info!(
        "Publishing runner '{}' to {}",
        py_str(fun),
        master.master_uri().as_deref().unwrap_or("the master")
    );
    let load = Value::Map(vec![
        (key("cmd"), key("minion_runner")),
        (key("fun"), fun.clone()),
        (key("arg"), Value::Array(arg)),
        (key("tmo"), inv.arg("timeout").clone()),
        (key("id"), Value::from(ctx.id.as_str())),
        (key("no_parse"), no_parse(ctx)),
    ]);
    match send(ctx, master, load, Duration::ZERO) {
        Err(e) if timed_out(&e) => Ok(Value::from(format!(
            "'{}' runner publish timed out",
            py_str(fun)
        ))),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JobHandle, NoJobs, Registry};
    use halite_config::MinionConfig;
    use std::sync::{Arc, Mutex};

    type Answer = Box<dyn Fn(&Value, &[Value]) -> Result<Value, ExecError> + Send + Sync>;

    /// A master that answers each request with `answer(load, earlier loads)` and records
    /// what it was sent, when, and with which hold.
    struct FakeMaster {
        sent: Mutex<Vec<(Value, Duration, Instant)>>,
        answer: Answer,
        uri: Option<String>,
    }

    impl FakeMaster {
        fn new(
            answer: impl Fn(&Value, &[Value]) -> Result<Value, ExecError> + Send + Sync + 'static,
        ) -> Arc<FakeMaster> {
            Arc::new(FakeMaster {
                sent: Mutex::new(Vec::new()),
                answer: Box::new(answer),
                uri: Some("tcp://10.0.0.1:4506".to_owned()),
            })
        }

        fn loads(&self) -> Vec<Value> {
            self.sent
                .lock()
                .unwrap()
                .iter()
                .map(|(l, _, _)| l.clone())
                .collect()
        }

        fn pub_rets(&self) -> Vec<(Value, Duration, Instant)> {
            self.sent
                .lock()
                .unwrap()
                .iter()
                .filter(|(l, _, _)| cmd(l) == "pub_ret")
                .cloned()
                .collect()
        }
    }

    impl MasterChannel for FakeMaster {
        fn request(&self, _load: Value) -> Result<Value, String> {
            Err("publish must not use the shared connection".to_owned())
        }

        fn request_apart(
            &self,
            load: Value,
            hold: Duration,
            _abort: &dyn Fn() -> bool,
        ) -> Result<Value, ExecError> {
            let earlier = self.loads();
            self.sent
                .lock()
                .unwrap()
                .push((load.clone(), hold, Instant::now()));
            (self.answer)(&load, &earlier)
        }

        fn master_uri(&self) -> Option<String> {
            self.uri.clone()
        }
    }

    fn cmd(load: &Value) -> String {
        halite_proto::value::get_str(load, "cmd")
            .unwrap_or_default()
            .to_owned()
    }

    fn yaml(text: &str) -> Value {
        halite_config::yaml::load(text).expect("test YAML parses")
    }

    fn ctx(master: Option<Arc<FakeMaster>>) -> (tempfile::TempDir, Context) {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("id: peer1\nroot_dir: {}\n", dir.path().display());
        let opts = MinionConfig::from_yaml_str(&text, &dir.path().join("minion")).unwrap();
        let ctx = Context {
            id: "peer1".into(),
            opts: Arc::new(opts),
            grains: Arc::new(Value::Map(Vec::new())),
            pillar: Arc::new(Value::Map(Vec::new())),
            jid: Some("20240101000000000001".into()),
            pub_data: None,
            jobs: Arc::new(NoJobs),
            job: JobHandle::new(),
            master: master.map(|m| m as Arc<dyn MasterChannel>),
        };
        (dir, ctx)
    }

    /// Runs `fun` with the publish `arg` list written in YAML.
    fn call(ctx: &Context, fun: &str, args: &str) -> Value {
        Registry::builtin()
            .execute(ctx, &Value::from(fun), &yaml(args))
            .ret
    }

    /// `minion_pub` answers `{jid: j1, minions: <minions>}`; `pub_ret` answers `pub_ret(n)`
    /// for the n-th `pub_ret` (0-based).
    fn peer(
        minions: &'static str,
        pub_ret: impl Fn(usize) -> Value + Send + Sync + 'static,
    ) -> Arc<FakeMaster> {
        FakeMaster::new(move |load, earlier| match cmd(load).as_str() {
            "minion_pub" => Ok(yaml(&format!("{{jid: j1, minions: {minions}}}"))),
            "pub_ret" => Ok(pub_ret(
                earlier.iter().filter(|l| cmd(l) == "pub_ret").count(),
            )),
            other => panic!("unexpected {other}"),
        })
    }

    fn denied() -> Arc<FakeMaster> {
        FakeMaster::new(|_, _| Ok(Value::Map(Vec::new())))
    }

    #[test]
    fn arg_is_typed_as_yaml_and_commas_do_not_split() {
        for (args, want) in [
            ("['*', test.arg, 'foo,1020,1020']", "['foo,1020,1020']"),
            ("['*', test.arg, \"['foo', 1020]\"]", "[foo, 1020]"),
            ("['*', test.arg, '']", "['']"),
            ("['*', test.arg, null]", "[]"),
            ("['*', test.arg]", "[]"),
            ("['*', test.arg, 'None']", "[]"),
            ("['*', test.arg, '1020']", "[1020]"),
            ("['*', test.arg, 7]", "[7]"),
            ("['*', test.arg, [a, [1]]]", "[a, [1]]"),
            ("['*', test.arg, '{a: 1}']", "[{a: 1}]"),
            ("['*', test.arg, 'arg=k=v']", "['k=v']"),
            (
                "['*', test.arg, \"arg=['cheese=spam', 'spam=cheese']\"]",
                "['cheese=spam', 'spam=cheese']",
            ),
            ("['*', test.arg, {__kwarg__: true, arg: 'a=1'}]", "['a=1']"),
        ] {
            let master = denied();
            let (_dir, c) = ctx(Some(master.clone()));
            assert_eq!(call(&c, "publish.publish", args), empty_dict(), "{args}");
            let loads = master.loads();
            assert_eq!(loads.len(), 1, "{args}");
            assert_eq!(
                halite_proto::value::get(&loads[0], "arg"),
                Some(&yaml(want)),
                "{args}"
            );
        }
    }

    #[test]
    fn loads_carry_salts_fields_in_salts_order() {
        let master = denied();
        let (_dir, c) = ctx(Some(master.clone()));
        call(&c, "publish.publish", "['web*', test.ping]");
        call(
            &c,
            "publish.full_data",
            "['L@a,b', test.echo, hi, list, {__kwarg__: true, returner: syslog, timeout: 9}]",
        );
        call(&c, "publish.runner", "[manage.up, 'timeout=3']");
        assert_eq!(
            master.loads(),
            [
                yaml(
                    "{cmd: minion_pub, fun: test.ping, arg: [], tgt: 'web*', tgt_type: glob, \
                     ret: '', tmo: 5, form: clean, id: peer1, no_parse: []}"
                ),
                yaml(
                    "{cmd: minion_pub, fun: test.echo, arg: [hi], tgt: 'L@a,b', tgt_type: list, \
                     ret: syslog, tmo: 9, form: full, id: peer1, no_parse: []}"
                ),
                yaml(
                    "{cmd: minion_runner, fun: manage.up, arg: [], tmo: 3, id: peer1, \
                     no_parse: []}"
                ),
            ]
        );
        let sent = master.sent.lock().unwrap();
        assert!(sent.iter().all(|(_, hold, _)| hold.is_zero()));
    }

    #[test]
    fn publish_returns_clean_values_and_full_data_the_whole_returns() {
        let rets = || yaml("{a: {ret: true}, b: {ret: [x], out: nested}}");
        let (_dir, c) = ctx(Some(peer("[a, b]", move |_| rets())));
        assert_eq!(
            call(&c, "publish.publish", "['*', test.ping]"),
            yaml("{a: true, b: [x]}")
        );
        assert_eq!(call(&c, "publish.full_data", "['*', test.ping]"), rets());
    }

    #[test]
    fn a_falsy_minion_pub_reply_is_an_empty_dict_and_no_minions_is_none() {
        for reply in ["{}", "''", "false", "null"] {
            let master = FakeMaster::new(move |_, _| Ok(yaml(reply)));
            let (_dir, c) = ctx(Some(master.clone()));
            assert_eq!(
                call(&c, "publish.publish", "['*', test.ping]"),
                empty_dict(),
                "{reply}"
            );
            assert_eq!(master.loads().len(), 1);
        }
        let master = peer("[]", |_| panic!("no pub_ret without minions"));
        let (_dir, c) = ctx(Some(master.clone()));
        assert_eq!(
            call(&c, "publish.publish", "['nobody', test.ping]"),
            Value::Nil
        );
        assert_eq!(
            call(&c, "publish.full_data", "['nobody', test.ping]"),
            Value::Nil
        );
        assert!(master.pub_rets().is_empty());
    }

    #[test]
    fn a_complete_first_reply_ends_the_call_after_one_pub_ret() {
        // A Halite master holds the reply until the last minion returned.
        let master = peer("[a, b]", |_| {
            std::thread::sleep(Duration::from_millis(50));
            yaml("{a: {ret: 1}, b: {ret: 2}}")
        });
        let (_dir, c) = ctx(Some(master.clone()));
        let start = Instant::now();
        assert_eq!(
            call(&c, "publish.publish", "['*', test.ping]"),
            yaml("{a: 1, b: 2}")
        );
        assert!(start.elapsed() < POLL_INTERVAL, "{:?}", start.elapsed());
        let pub_rets = master.pub_rets();
        assert_eq!(pub_rets.len(), 1);
        let (load, hold, _) = &pub_rets[0];
        let wait = match halite_proto::value::get(load, "wait") {
            Some(Value::F64(w)) => *w,
            other => panic!("wait: {other:?}"),
        };
        assert!(wait > 4.5 && wait <= 5.0, "{wait}");
        assert_eq!(hold.as_secs_f64(), wait);
        let mut fields = load.clone();
        halite_proto::value::remove(&mut fields, "wait");
        assert_eq!(fields, yaml("{cmd: pub_ret, id: peer1, jid: j1}"));
    }

    #[test]
    fn a_master_answering_at_once_is_polled_every_0_3_s_until_the_deadline() {
        // A stock master ignores `wait`: partial returns come back at once.
        let master = peer("[a, b]", |_| yaml("{a: {ret: true}}"));
        let (_dir, c) = ctx(Some(master.clone()));
        let start = Instant::now();
        let ret = call(&c, "publish.publish", "['*', test.ping, timeout=1]");
        let took = start.elapsed();
        assert_eq!(ret, yaml("{a: true}"));
        let at: Vec<Instant> = master.pub_rets().iter().map(|(_, _, t)| *t).collect();
        // Polls at 0, 0.3, 0.6, 0.9 and 1.2 s: the last one is the first past the deadline
        // (fewer when the machine is slow, never more, never closer than 0.3 s).
        assert!((3..=5).contains(&at.len()), "{at:?}");
        // The fake sees each poll a little after the module timed it: allow for that.
        let slack = Duration::from_millis(10);
        for pair in at.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(
                gap + slack >= POLL_INTERVAL && gap < Duration::from_secs(1),
                "{gap:?}"
            );
        }
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_secs(3),
            "{took:?}"
        );
        // Each poll asks for what is left of the timeout.
        let waits: Vec<f64> = master
            .pub_rets()
            .iter()
            .map(|(l, _, _)| match halite_proto::value::get(l, "wait") {
                Some(Value::F64(w)) => *w,
                other => panic!("wait: {other:?}"),
            })
            .collect();
        assert!(waits.windows(2).all(|w| w[1] < w[0]), "{waits:?}");
        assert!(waits.last().is_some_and(|w| *w < 0.3), "{waits:?}");
    }

    #[test]
    fn returns_that_arrive_late_complete_the_set_and_partial_sets_come_back_at_the_deadline() {
        let master = peer("[a, b]", |n| match n {
            0 => yaml("{}"),
            1 => yaml("{a: {ret: x}}"),
            _ => yaml("{b: {ret: y}}"),
        });
        let (_dir, c) = ctx(Some(master.clone()));
        assert_eq!(
            call(&c, "publish.publish", "['*', test.ping]"),
            yaml("{a: x, b: y}")
        );
        assert_eq!(master.pub_rets().len(), 3);

        let (_dir, c) = ctx(Some(peer("[a, b]", |_| yaml("{}"))));
        assert_eq!(
            call(&c, "publish.full_data", "['*', test.ping, timeout=0.5]"),
            empty_dict()
        );
        let (_dir, c) = ctx(Some(peer("[a, b]", |_| yaml("{b: {ret: 1, out: txt}}"))));
        assert_eq!(
            call(&c, "publish.full_data", "['*', test.ping, timeout=-1]"),
            yaml("{b: {ret: 1, out: txt}}")
        );
    }

    #[test]
    fn request_timeouts_become_salts_texts_and_other_failures_exceptions() {
        let timeout = || {
            Err(ExecError::exception(
                SALT_REQ_TIMEOUT_ERROR,
                "Message timed out",
            ))
        };
        let (_dir, c) = ctx(Some(FakeMaster::new(move |_, _| timeout())));
        assert_eq!(
            call(&c, "publish.publish", "['*', test.ping]"),
            Value::from("'test.ping' publish timed out")
        );
        assert_eq!(
            call(&c, "publish.full_data", "['*', cmd.run, ls]"),
            Value::from("'cmd.run' publish timed out")
        );
        assert_eq!(
            call(&c, "publish.runner", "[manage.down]"),
            Value::from("'manage.down' runner publish timed out")
        );
        // A pub_ret that times out is not caught in Salt either.
        let master = FakeMaster::new(move |load, _| match cmd(load).as_str() {
            "minion_pub" => Ok(yaml("{jid: j1, minions: [a]}")),
            _ => timeout(),
        });
        let (_dir, c) = ctx(Some(master));
        let ret = py_str(&call(&c, "publish.publish", "['*', test.ping]"));
        assert!(
            ret.starts_with("The minion function caused an exception: "),
            "{ret}"
        );
        assert!(
            ret.ends_with("salt.exceptions.SaltReqTimeoutError: Message timed out\n"),
            "{ret}"
        );
        let (_dir, c) = ctx(Some(FakeMaster::new(|_, _| {
            Err(ExecError::exception(
                "salt.exceptions.SaltClientError",
                "no route",
            ))
        })));
        let ret = py_str(&call(&c, "publish.runner", "[manage.up]"));
        assert!(
            ret.ends_with("salt.exceptions.SaltClientError: no route\n"),
            "{ret}"
        );
    }

    #[test]
    fn publish_calls_are_refused_without_asking_the_master() {
        let master = denied();
        let (_dir, c) = ctx(Some(master.clone()));
        for fun in ["publish.publish", "publish.full_data"] {
            for target in ["publish.publish", "publish.runner", "publish."] {
                assert_eq!(
                    call(&c, fun, &format!("['*', '{target}', 'test.ping']")),
                    empty_dict()
                );
            }
        }
        assert!(master.loads().is_empty());
        // Only the `publish.` prefix is refused here; the master refuses the rest.
        call(&c, "publish.publish", "['*', publisher.x]");
        assert_eq!(master.loads().len(), 1);
    }

    #[test]
    fn without_a_master_publish_is_empty_and_runner_says_so() {
        let (_dir, c) = ctx(None);
        assert_eq!(
            call(&c, "publish.publish", "['*', test.ping]"),
            empty_dict()
        );
        assert_eq!(
            call(&c, "publish.full_data", "['*', test.ping]"),
            empty_dict()
        );
        assert_eq!(
            call(&c, "publish.runner", "[manage.up]"),
            Value::from("No access to master. If using salt-call with --local, please remove.")
        );
    }

    #[test]
    fn ten_thousand_arguments_go_out_as_one_list() {
        let master = denied();
        let (_dir, c) = ctx(Some(master.clone()));
        let many = Value::Array((0..10_000).map(Value::from).collect());
        let args = Value::Array(vec![
            Value::from("*"),
            Value::from("test.arg"),
            many.clone(),
        ]);
        let ret = Registry::builtin().execute(&c, &Value::from("publish.publish"), &args);
        assert_eq!(ret.ret, empty_dict());
        assert_eq!(
            halite_proto::value::get(&master.loads()[0], "arg"),
            Some(&many)
        );
    }

    #[test]
    fn via_master_must_name_the_connected_master() {
        let master = denied();
        let (_dir, c) = ctx(Some(master.clone()));
        assert_eq!(
            call(
                &c,
                "publish.publish",
                "['*', test.ping, via_master=10.0.0.1]"
            ),
            empty_dict()
        );
        assert_eq!(master.loads().len(), 1);
        assert_eq!(
            call(&c, "publish.publish", "['*', test.ping, via_master=salt]"),
            Value::from(
                "ERROR executing 'publish.publish': Could not find match for salt in list of \
                 configured masters ['tcp://10.0.0.1:4506'] when using `via_master` option"
            )
        );
        // A prefix of the address is no match: the name must end at the port.
        let ret = call(&c, "publish.publish", "['*', test.ping, via_master=10.0.0]");
        assert!(
            py_str(&ret).contains("Could not find match for 10.0.0 "),
            "{ret}"
        );
        assert_eq!(master.loads().len(), 1);
        // full_data has no via_master.
        let ret = call(&c, "publish.full_data", "['*', test.ping, via_master=x]");
        assert!(
            py_str(&ret).contains("The following keyword arguments are not valid: via_master=x"),
            "{ret}"
        );

        let unknown = Arc::new(FakeMaster {
            sent: Mutex::new(Vec::new()),
            answer: Box::new(|_, _| Ok(empty_dict())),
            uri: None,
        });
        let (_dir, c) = ctx(Some(unknown));
        assert_eq!(
            call(&c, "publish.publish", "['*', test.ping, via_master=salt]"),
            Value::from(
                "ERROR executing 'publish.publish': Could not find list of masters in minion \
                 configuration but `via_master` was specified."
            )
        );
    }

    #[test]
    fn replies_of_the_wrong_shape_fail_as_python_would() {
        let cases: [(&str, &str, &str); 6] = [
            (
                "'no way'",
                "{}",
                "Passed invalid arguments to publish.publish: string indices must be \
                 integers, not 'str'",
            ),
            (
                "7",
                "{}",
                "Passed invalid arguments to publish.publish: 'int' object is not subscriptable",
            ),
            ("{jid: j1}", "{}", "KeyError: 'minions'\n"),
            ("{minions: [a]}", "{}", "KeyError: 'jid'\n"),
            (
                "{jid: j1, minions: [a]}",
                "''",
                "AttributeError: 'str' object has no attribute 'keys'\n",
            ),
            (
                "{jid: j1, minions: [a]}",
                "{a: 1}",
                "'int' object is not subscriptable",
            ),
        ];
        for (minion_pub, pub_ret, want) in cases {
            let master = FakeMaster::new(move |load, _| match cmd(load).as_str() {
                "minion_pub" => Ok(yaml(minion_pub)),
                _ => Ok(yaml(pub_ret)),
            });
            let (_dir, c) = ctx(Some(master));
            let ret = py_str(&call(&c, "publish.publish", "['*', test.ping]"));
            assert!(ret.contains(want), "{minion_pub} {pub_ret}: {ret}");
        }
        let (_dir, c) = ctx(Some(peer("[a, b]", |_| yaml("{a: {ret: 1}}"))));
        let ret = py_str(&call(
            &c,
            "publish.publish",
            "['*', test.ping, timeout=soon]",
        ));
        assert!(
            ret.starts_with(
                "Passed invalid arguments to publish.publish: '>' not supported between \
                 instances of 'float' and 'str'"
            ),
            "{ret}"
        );
        let (_dir, c) = ctx(Some(FakeMaster::new(|_, _| Ok(Value::Nil))));
        let ret = py_str(&call(&c, "publish.publish", "['*', 5]"));
        assert!(
            ret.ends_with("AttributeError: 'int' object has no attribute 'startswith'\n"),
            "{ret}"
        );
    }

    #[test]
    fn a_cancelled_job_stops_waiting() {
        let master = peer("[a, b]", |_| yaml("{a: {ret: true}}"));
        let (_dir, c) = ctx(Some(master));
        let job = c.job.clone();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            job.cancel(15);
        });
        let start = Instant::now();
        let ret = Registry::builtin().execute(
            &c,
            &Value::from("publish.publish"),
            &yaml("['*', test.ping, timeout=60]"),
        );
        killer.join().unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(ret.ret, Value::from("The job was cancelled by signal 15"));
    }

    #[test]
    fn an_endless_timeout_asks_for_the_longest_hold() {
        let master = peer("[a]", |_| yaml("{a: {ret: true}}"));
        let (_dir, c) = ctx(Some(master.clone()));
        for timeout in [".inf", ".nan", "1.0e+300"] {
            call(
                &c,
                "publish.publish",
                &format!("['*', test.ping, 'timeout={timeout}']"),
            );
        }
        let holds: Vec<Duration> = master.pub_rets().iter().map(|(_, h, _)| *h).collect();
        assert_eq!(holds, [MAX_HOLD; 3]);
    }
}
