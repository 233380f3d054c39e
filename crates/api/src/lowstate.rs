//! The one lowstate executor behind `POST /`, `/run`, `/minions`, `/jobs` and `/keys`:
//! `LowDataAdapter.exec_lowstate` and `salt.netapi.NetapiClient.run`, in their order.
//!
//! For each chunk, serially (the first failure fails the whole request and discards what
//! ran before, as in salt-api): the session token, if any, replaces the chunk's `token`; a
//! `token` must be hex (401 "Invalid token"); a forced client is set; a scalar `arg` is
//! wrapped in a list; a token logged out through this API is refused (401); then the master must look alive (503), the client must be one of
//! [`CLIENTS`] (400 "Invalid client specified") and enabled in `netapi_enable_clients`
//! (400 "Client disabled"), the chunk must carry `token` or `eauth` (401 "No
//! authentication credentials given"), and `raw_shell` needs `netapi_allow_raw_shell`.
//! The master does the real authentication and authorization when it gets the request.
//!
//! | client | what it sends | element(s) of `return` |
//! |---|---|---|
//! | `local` | clear `publish`, then the job's returns from the bus (`timeout`, find_job probes) | `{mid: ret}` (`full_return`: `{mid: {ret, retcode, jid, out}}`); silent minions get Salt's "Minion did not return" text |
//! | `local_async` | clear `publish` | `{jid, minions}`, `{}` when nothing matched |
//! | `local_subset` | `sys.list_functions` on the target, then `local` on up to `subset` (default 3) random minions that have `fun` | as `local` |
//! | `local_batch` | `salt --batch`'s ping and sub-batches (`batch`, default `10%`; `batch_wait`, `failhard`) | one `{mid: ret}` per return |
//! | `runner` | clear `runner`, then `salt/run/<jid>/ret` (waiting `timeout`, default `rest_timeout`; 504 after) | the return (`full_return`: the whole event) |
//! | `runner_async` | clear `runner` | `{tag, jid}` |
//! | `wheel` | clear `wheel` with the whole chunk | the master's answer `{tag, data}` |
//! | `wheel_async` | clear `wheel` with `__jid__`, in the background | `{tag, jid}` |
//!
//! A runner chunk's arguments are Salt's `RunnerClient._reformat_low`: `arg` (its
//! `name=value` strings become keyword arguments), a `kwarg` mapping and any other
//! top-level key (old style) are sent as the runner's arguments; the master binds them.
//!
//! Deviations: `ssh` and `destroy` are refused with 400 even when enabled (no salt-ssh;
//! `destroy` is not a client); a chunk that is not a mapping, or lacks `tgt`/`fun`, is 400
//! (salt-api: a Python error, 500); a `wheel` client the master does not answer (a master
//! without a wheel answers `{}`) is 400 "Client unavailable"; `local_batch`
//! ignores `raw`; a runner's keyword arguments the runner does not take are refused by the
//! master (Salt's client drops them first).

use crate::config::{ApiConfig, CLIENTS};
use crate::link::MasterLink;
use crate::render::Failure;
use crate::session::Sessions;
use axum::http::StatusCode;
use halite_client::batch::{BatchEvent, BatchOptions, BatchSize};
use halite_client::{Credentials, JobEvent, PublishRequest, RunEvent, RunnerRequest};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use std::sync::Arc;
use std::time::Duration;

/// What a minion that never answered gets in `local`'s result (before the jid).
const NO_RETURN: &str = "Minion did not return. [No response]\nThe minions may not have all \
    finished running and any remaining minions will return upon completion. To look up the \
    return data for this job later, run the following command:\n\nsalt-run jobs.lookup_jid ";

/// Keys that carry credentials: never passed on as arguments.
const CREDENTIAL_KEYS: [&str; 6] = ["token", "username", "password", "eauth", "user", "key"];

/// Runs lowstates against one master.
pub struct Executor {
    link: Arc<MasterLink>,
    cfg: Arc<ApiConfig>,
    sessions: Arc<Sessions>,
    timeout: Duration,
    gather_job_timeout: Duration,
}

impl Executor {
    /// An executor for `link`'s master under `cfg`; tokens `sessions` logged out are
    /// refused.
    pub fn new(link: Arc<MasterLink>, cfg: Arc<ApiConfig>, sessions: Arc<Sessions>) -> Executor {
        let master = link.config();
        let timeout = Duration::from_secs(master.timeout);
        let gather_job_timeout = Duration::from_secs(master.gather_job_timeout);
        Executor {
            link,
            cfg,
            sessions,
            timeout,
            gather_job_timeout,
        }
    }

    /// `exec_lowstate`: runs every chunk of `lowstate` (which must be a list) with the
    /// session's `token` (if any) and the `client` forced by the endpoint (if any), and
    /// returns the elements of `return`.
    pub async fn run(
        &self,
        lowstate: Option<Value>,
        token: Option<&str>,
        client: Option<&str>,
    ) -> Result<Vec<Value>, Failure> {
        let Some(Value::Array(chunks)) = lowstate else {
            return Err(Failure::bad_request("Lowstates must be a list"));
        };
        let mut out = Vec::new();
        for chunk in chunks {
            let Value::Map(_) = chunk else {
                return Err(Failure::bad_request("Lowstates must be a list of mappings"));
            };
            let mut chunk = chunk;
            if let Some(t) = token {
                value::set(&mut chunk, "token", s(t));
            }
            if let Some(t) = value::get(&chunk, "token") {
                let Some(t) = value::str_of(t).filter(|t| halite_token::is_token_id(t)) else {
                    return Err(Failure::unauthorized("Invalid token"));
                };
                if self.sessions.is_revoked(t) {
                    return Err(Failure::unauthorized("Authentication error occurred."));
                }
            }
            if let Some(c) = client {
                value::set(&mut chunk, "client", s(c));
            }
            if let Some(arg) = value::get(&chunk, "arg") {
                if !matches!(arg, Value::Array(_)) {
                    let wrapped = Value::Array(vec![arg.clone()]);
                    value::set(&mut chunk, "arg", wrapped);
                }
            }
            self.run_chunk(chunk, &mut out).await?;
        }
        Ok(out)
    }

    /// `NetapiClient.run` for one chunk; its result(s) are appended to `out`.
    async fn run_chunk(&self, chunk: Value, out: &mut Vec<Value>) -> Result<(), Failure> {
        if !self.link.is_running() {
            return Err(Failure::master_down());
        }
        let client_value = value::get(&chunk, "client").cloned().unwrap_or(Value::Nil);
        let client = match value::str_of(&client_value) {
            Some(c) if CLIENTS.contains(&c) => c.to_owned(),
            _ => {
                return Err(Failure::bad_request(format!(
                    "Invalid client specified: '{}'",
                    halite_output::py_str(&client_value)
                )))
            }
        };
        if !self.cfg.client_enabled(&client) {
            return Err(Failure::bad_request(format!(
                "Client disabled: '{client}'. Add to 'netapi_enable_clients' master config \
                 option to enable."
            )));
        }
        let credentials = credentials(&chunk)
            .ok_or_else(|| Failure::unauthorized("No authentication credentials given"))?;
        if value::get(&chunk, "raw_shell").is_some_and(value::truthy) && !self.cfg.allow_raw_shell {
            return Err(Failure::unauthorized("Raw shell option not allowed."));
        }
        match client.as_str() {
            "local" => out.push(self.local(&chunk, credentials).await?),
            "local_async" => out.push(self.local_async(&chunk, credentials).await?),
            "local_subset" => out.push(self.local_subset(&chunk, credentials).await?),
            "local_batch" => out.extend(self.local_batch(&chunk, credentials).await?),
            "runner" => out.push(self.runner(&chunk, credentials).await?),
            "runner_async" => out.push(self.runner_async(&chunk, credentials).await?),
            "wheel" => out.push(self.wheel(chunk).await?),
            "wheel_async" => out.push(self.wheel_async(chunk).await?),
            other => {
                return Err(Failure::bad_request(format!(
                    "Client unavailable: '{other}'. halite-api does not provide it."
                )))
            }
        }
        Ok(())
    }

    /// A duration option of the chunk (seconds), else `default`.
    fn seconds(chunk: &Value, key: &str, default: Duration) -> Result<Duration, Failure> {
        match value::get(chunk, key) {
            None | Some(Value::Nil) => Ok(default),
            Some(v) => {
                let secs = match v {
                    Value::Integer(i) => i.as_f64(),
                    Value::F64(f) => Some(*f),
                    Value::F32(f) => Some(f64::from(*f)),
                    Value::String(t) => t.as_str().and_then(|t| t.trim().parse::<f64>().ok()),
                    _ => None,
                };
                secs.filter(|f| f.is_finite() && *f >= 0.0)
                    .map(|f| {
                        Duration::from_secs_f64(
                            f.min(halite_client::follow::MAX_WAIT.as_secs_f64()),
                        )
                    })
                    .ok_or_else(|| {
                        Failure::bad_request(format!("{key} must be a number of seconds"))
                    })
            }
        }
    }

    /// The publish of a `local*` chunk: `LocalClient.run_job`'s `tgt`, `fun`, `arg` (with
    /// `kwarg` appended as `__kwarg__` as `condition_input` does), `tgt_type`, `ret`, and
    /// every other key but the credentials in the load's `kwargs`.
    fn publish_request(chunk: &Value, named: &[&str]) -> Result<PublishRequest, Failure> {
        let tgt = value::get(chunk, "tgt")
            .cloned()
            .ok_or_else(|| Failure::bad_request("Missing required argument: tgt"))?;
        let fun = value::get(chunk, "fun")
            .cloned()
            .ok_or_else(|| Failure::bad_request("Missing required argument: fun"))?;
        let mut arg = match value::get(chunk, "arg") {
            Some(Value::Array(a)) => a.clone(),
            Some(Value::Nil) | None => vec![],
            Some(other) => vec![other.clone()],
        };
        if let Some(Value::Map(kw)) = value::get(chunk, "kwarg") {
            if !kw.is_empty() {
                let mut entries = vec![(s("__kwarg__"), Value::Boolean(true))];
                entries.extend(kw.iter().cloned());
                arg.push(Value::Map(entries));
            }
        }
        let text = |key: &str, default: &str| {
            value::get(chunk, key)
                .and_then(value::str_of)
                .unwrap_or(default)
                .to_owned()
        };
        let mut kwargs = Vec::new();
        if let Value::Map(entries) = chunk {
            for (k, v) in entries {
                let Some(key) = value::str_of(k) else {
                    continue;
                };
                if named.contains(&key) || CREDENTIAL_KEYS.contains(&key) {
                    continue;
                }
                kwargs.push((key.to_owned(), v.clone()));
            }
        }
        Ok(PublishRequest {
            tgt,
            tgt_type: text("tgt_type", "glob"),
            fun,
            arg: Value::Array(arg),
            ret: text("ret", ""),
            kwargs,
        })
    }

    /// `LocalClient.cmd`.
    async fn local(&self, chunk: &Value, credentials: Credentials) -> Result<Value, Failure> {
        const NAMED: [&str; 9] = [
            "tgt",
            "fun",
            "arg",
            "timeout",
            "tgt_type",
            "ret",
            "jid",
            "full_return",
            "kwarg",
        ];
        let req = Self::publish_request(chunk, &NAMED)?;
        let timeout = Self::seconds(chunk, "timeout", self.timeout)?;
        let gather = Self::seconds(chunk, "gather_job_timeout", self.gather_job_timeout)?;
        let full_return = value::get(chunk, "full_return").is_some_and(value::truthy);
        let jid = value::get(chunk, "jid")
            .and_then(value::str_of)
            .filter(|j| !j.is_empty());
        self.cmd(&req, jid, credentials, timeout, gather, full_return)
            .await
    }

    /// Publishes `req` and gathers its returns as `LocalClient.cmd` does.
    async fn cmd(
        &self,
        req: &PublishRequest,
        jid: Option<&str>,
        credentials: Credentials,
        timeout: Duration,
        gather: Duration,
        full_return: bool,
    ) -> Result<Value, Failure> {
        let client = self.link.client(credentials);
        let mut listener = client.listen_jobs().await?;
        let reply = match jid {
            Some(j) => client.publish_with_jid(req, j).await?,
            None => client.publish(req).await?,
        };
        let Some(jid) = reply.jid else {
            return Ok(Value::Map(vec![]));
        };
        let mut ret: Vec<(Value, Value)> = Vec::new();
        let no_return = format!("{NO_RETURN}{jid}");
        client
            .follow(&mut listener, &jid, &reply.minions, timeout, gather, |ev| {
                let (id, data) = match ev {
                    JobEvent::Return(id, load) => {
                        let mut full = vec![(
                            s("ret"),
                            value::get(&load, "return").cloned().unwrap_or(Value::Nil),
                        )];
                        for key in ["out", "retcode", "jid"] {
                            if let Some(v) = value::get(&load, key) {
                                full.push((s(key), v.clone()));
                            }
                        }
                        (id, Value::Map(full))
                    }
                    JobEvent::NoReturn(id) => (
                        id,
                        map([
                            ("out", s("no_return")),
                            ("ret", s(no_return.clone())),
                            ("retcode", Value::from(1)),
                        ]),
                    ),
                };
                let entry = if full_return {
                    data
                } else {
                    value::get(&data, "ret").cloned().unwrap_or(Value::Nil)
                };
                let key = s(id);
                match ret.iter_mut().find(|(k, _)| *k == key) {
                    Some(slot) => slot.1 = entry,
                    None => ret.push((key, entry)),
                }
            })
            .await?;
        for m in &reply.minions {
            let key = s(m.clone());
            if !ret.iter().any(|(k, _)| *k == key) {
                ret.push((key, Value::Boolean(false)));
            }
        }
        Ok(Value::Map(ret))
    }

    /// `LocalClient.run_job`: `{jid, minions}`, or `{}` when nothing matched.
    async fn local_async(&self, chunk: &Value, credentials: Credentials) -> Result<Value, Failure> {
        const NAMED: [&str; 8] = [
            "tgt", "fun", "arg", "tgt_type", "ret", "timeout", "jid", "kwarg",
        ];
        let req = Self::publish_request(chunk, &NAMED)?;
        let client = self.link.client(credentials);
        let jid = value::get(chunk, "jid")
            .and_then(value::str_of)
            .filter(|j| !j.is_empty());
        let reply = match jid {
            Some(j) => client.publish_with_jid(&req, j).await?,
            None => client.publish(&req).await?,
        };
        Ok(match reply.jid {
            Some(jid) => map([
                ("jid", s(jid)),
                (
                    "minions",
                    Value::Array(reply.minions.into_iter().map(Value::from).collect()),
                ),
            ]),
            None => Value::Map(vec![]),
        })
    }

    /// `LocalClient.cmd_subset`.
    async fn local_subset(
        &self,
        chunk: &Value,
        credentials: Credentials,
    ) -> Result<Value, Failure> {
        const NAMED: [&str; 11] = [
            "tgt",
            "fun",
            "arg",
            "tgt_type",
            "ret",
            "kwarg",
            "subset",
            "sub",
            "cli",
            "progress",
            "full_return",
        ];
        let req = Self::publish_request(chunk, &NAMED)?;
        let subset = match value::get(chunk, "sub").or_else(|| value::get(chunk, "subset")) {
            None => 3,
            Some(v) => v
                .as_u64()
                .or_else(|| value::str_of(v).and_then(|t| t.trim().parse().ok()))
                .ok_or_else(|| Failure::bad_request("subset must be a number"))?,
        };
        let full_return = value::get(chunk, "full_return").is_some_and(value::truthy);
        let fun = value::str_of(&req.fun).unwrap_or("").to_owned();
        let probe = PublishRequest {
            fun: s("sys.list_functions"),
            arg: Value::Array(vec![]),
            ret: String::new(),
            ..req.clone()
        };
        let listed = self
            .cmd(
                &probe,
                None,
                credentials.clone(),
                self.timeout,
                self.gather_job_timeout,
                false,
            )
            .await?;
        let mut minions: Vec<String> = match &listed {
            Value::Map(entries) => entries
                .iter()
                .filter(|(_, funs)| match funs {
                    Value::Array(list) => list.iter().any(|f| value::str_of(f) == Some(&fun)),
                    Value::Map(m) => m.iter().any(|(f, _)| value::str_of(f) == Some(&fun)),
                    _ => false,
                })
                .filter_map(|(id, _)| value::str_of(id).map(str::to_owned))
                .collect(),
            _ => vec![],
        };
        shuffle(&mut minions);
        minions.truncate(usize::try_from(subset).unwrap_or(usize::MAX));
        let run = PublishRequest {
            tgt: Value::Array(minions.into_iter().map(Value::from).collect()),
            tgt_type: "list".into(),
            ..req
        };
        self.cmd(
            &run,
            None,
            credentials,
            self.timeout,
            self.gather_job_timeout,
            full_return,
        )
        .await
    }

    /// `LocalClient.cmd_batch`: one `{mid: ret}` per return.
    async fn local_batch(
        &self,
        chunk: &Value,
        credentials: Credentials,
    ) -> Result<Vec<Value>, Failure> {
        const NAMED: [&str; 12] = [
            "tgt",
            "fun",
            "arg",
            "tgt_type",
            "ret",
            "kwarg",
            "batch",
            "batch_wait",
            "failhard",
            "raw",
            "timeout",
            "gather_job_timeout",
        ];
        let req = Self::publish_request(chunk, &NAMED)?;
        let spec = match value::get(chunk, "batch") {
            None | Some(Value::Nil) => "10%".to_owned(),
            Some(v) => halite_output::py_str(v),
        };
        let size = BatchSize::parse(&spec)
            .ok_or_else(|| Failure::bad_request(format!("Invalid batch specification: {spec}")))?;
        let opts = BatchOptions {
            size,
            wait: Self::seconds(chunk, "batch_wait", Duration::ZERO)?,
            failhard: value::get(chunk, "failhard").is_some_and(value::truthy),
            timeout: Self::seconds(chunk, "timeout", self.timeout)?,
            gather_job_timeout: Self::seconds(
                chunk,
                "gather_job_timeout",
                self.gather_job_timeout,
            )?,
        };
        let client = self.link.client(credentials);
        let mut out = Vec::new();
        client
            .run_batch(&req, &opts, |ev| {
                if let BatchEvent::Return(id, load, _) = ev {
                    let ret = value::get(&load, "return").cloned().unwrap_or(Value::Nil);
                    out.push(Value::Map(vec![(s(id), ret)]));
                }
            })
            .await?;
        Ok(out)
    }

    /// `RunnerClient._reformat_low`: the runner call a chunk describes.
    fn runner_request(chunk: &Value) -> Result<RunnerRequest, Failure> {
        let fun = value::get(chunk, "fun")
            .and_then(value::str_of)
            .ok_or_else(|| Failure::bad_request("Missing required argument: fun"))?;
        let args = match value::get(chunk, "arg") {
            Some(Value::Array(a)) => halite_config::args::parse_input_values(a, &[]),
            _ => vec![],
        };
        let mut req = RunnerRequest::bind(fun, &args);
        if let Some(Value::Map(kw)) = value::get(chunk, "kwarg") {
            for (k, v) in kw {
                req.set_kwarg(k.clone(), v.clone());
            }
        }
        if let Value::Map(entries) = chunk {
            for (k, v) in entries {
                let Some(key) = value::str_of(k) else {
                    continue;
                };
                if matches!(
                    key,
                    "fun" | "arg" | "kwarg" | "client" | "timeout" | "full_return"
                ) || CREDENTIAL_KEYS.contains(&key)
                {
                    continue;
                }
                req.set_kwarg(k.clone(), v.clone());
            }
        }
        Ok(req)
    }

    /// `RunnerClient.cmd_sync`: waits `timeout` (default `rest_timeout`) for the run's
    /// `ret` event; 504 after.
    async fn runner(&self, chunk: &Value, credentials: Credentials) -> Result<Value, Failure> {
        let req = Self::runner_request(chunk)?;
        let timeout = Self::seconds(chunk, "timeout", self.cfg.rest_timeout)?;
        let full_return = value::get(chunk, "full_return").is_some_and(value::truthy);
        let client = self.link.client(credentials);
        let mut listener = client.listen_runs().await?;
        let job = client.runner(&req).await?;
        let wait = async {
            loop {
                if let RunEvent::Ret(data) = client.next_run_event(&mut listener, &job.jid).await {
                    return data;
                }
            }
        };
        let data = tokio::time::timeout(timeout, wait).await.map_err(|_| {
            Failure::http(
                StatusCode::GATEWAY_TIMEOUT,
                format!("RunnerClient job '{}' timed out", job.jid),
            )
        })?;
        Ok(if full_return {
            map([("tag", s(format!("{}/ret", job.tag))), ("data", data)])
        } else {
            value::get(&data, "return").cloned().unwrap_or(Value::Nil)
        })
    }

    /// `RunnerClient.cmd_async`: `{tag, jid}`.
    async fn runner_async(
        &self,
        chunk: &Value,
        credentials: Credentials,
    ) -> Result<Value, Failure> {
        let req = Self::runner_request(chunk)?;
        let job = self.link.client(credentials).runner(&req).await?;
        Ok(map([("tag", s(job.tag)), ("jid", s(job.jid))]))
    }

    /// The clear `wheel` load of a chunk: the chunk itself with `cmd: wheel`, less any
    /// `key` or `user` (a caller authenticates with its token or login only).
    fn wheel_load(mut chunk: Value) -> Result<Value, Failure> {
        if value::get(&chunk, "fun").and_then(value::str_of).is_none() {
            return Err(Failure::bad_request("Missing required argument: fun"));
        }
        value::remove(&mut chunk, "key");
        value::remove(&mut chunk, "user");
        value::set(&mut chunk, "cmd", s("wheel"));
        Ok(chunk)
    }

    /// `WheelClient.master_call`: the chunk as a clear `wheel` command; the master's answer.
    async fn wheel(&self, chunk: Value) -> Result<Value, Failure> {
        let chunk = Self::wheel_load(chunk)?;
        let reply = self.link.clear(chunk).await?;
        wheel_reply(reply)
    }

    /// `WheelClient.cmd_async`: the call goes out in the background under a jid chosen
    /// here; `{tag, jid}`.
    async fn wheel_async(&self, chunk: Value) -> Result<Value, Failure> {
        let mut chunk = Self::wheel_load(chunk)?;
        let jid = halite_proto::jid::format_jid(chrono::Utc::now());
        let tag = format!("salt/wheel/{jid}");
        value::set(&mut chunk, "__jid__", s(jid.clone()));
        value::set(&mut chunk, "__tag__", s(tag.clone()));
        value::set(&mut chunk, "__user__", s("UNKNOWN"));
        let reply = map([("tag", s(tag)), ("jid", s(jid.clone()))]);
        let link = self.link.clone();
        tokio::spawn(async move {
            if let Err(e) = link
                .clear(chunk)
                .await
                .map_err(Failure::from)
                .and_then(wheel_reply)
            {
                tracing::warn!("wheel_async job {jid} failed: {e:?}");
            }
        });
        Ok(reply)
    }
}

/// A `wheel` answer: the master's `{"error": ...}` raised as Salt raises it, `{}` (a
/// master without the command) as an unavailable client.
fn wheel_reply(reply: Value) -> Result<Value, Failure> {
    if let Some(err) = value::get(&reply, "error") {
        let e = halite_client::Error::Master {
            name: value::get_str(err, "name").unwrap_or("").to_owned(),
            message: value::get_str(err, "message")
                .map(str::to_owned)
                .unwrap_or_else(|| halite_output::py_str(err)),
        };
        return Err(e.into());
    }
    if matches!(&reply, Value::Map(m) if m.is_empty()) {
        return Err(Failure::bad_request(
            "Client unavailable: 'wheel'. The master does not answer wheel requests.",
        ));
    }
    Ok(reply)
}

/// The credentials a chunk carries: its `token`, else its eauth fields.
pub fn credentials(chunk: &Value) -> Option<Credentials> {
    let text = |k: &str| {
        value::get(chunk, k)
            .map(|v| value::str_of(v).map_or_else(|| halite_output::py_str(v), str::to_owned))
    };
    if let Some(token) = text("token") {
        return Some(Credentials::Token(token));
    }
    let eauth = text("eauth")?;
    Some(Credentials::Eauth {
        eauth,
        username: text("username").unwrap_or_default(),
        password: text("password").unwrap_or_default(),
    })
}

/// Shuffles `items` in place (Fisher–Yates) with the process's random hash keys: the
/// random choice of `cmd_subset` without a random-number dependency.
fn shuffle(items: &mut [String]) {
    use std::hash::{BuildHasher, Hasher};
    let state = std::collections::hash_map::RandomState::new();
    for i in (1..items.len()).rev() {
        let mut h = state.build_hasher();
        h.write_usize(i);
        let j = usize::try_from(h.finish() % (i as u64 + 1)).unwrap_or(0);
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_carry_a_token_before_an_eauth_login() {
        let both = map([
            ("token", s("ab")),
            ("eauth", s("pam")),
            ("username", s("u")),
            ("password", s("p")),
        ]);
        assert_eq!(credentials(&both), Some(Credentials::Token("ab".into())));
        let login = map([
            ("eauth", s("pam")),
            ("username", s("u")),
            ("password", Value::from(12)),
        ]);
        assert_eq!(
            credentials(&login),
            Some(Credentials::Eauth {
                eauth: "pam".into(),
                username: "u".into(),
                password: "12".into()
            })
        );
        assert_eq!(credentials(&map([("username", s("u"))])), None);
    }

    #[test]
    fn a_local_chunk_becomes_run_jobs_publish() {
        let chunk = map([
            ("client", s("local")),
            ("tgt", s("web*")),
            ("fun", s("test.arg")),
            ("arg", Value::Array(vec![s("a")])),
            ("kwarg", map([("x", Value::from(1))])),
            ("token", s("ab")),
            ("expr_form", s("glob")),
            ("timeout", Value::from(3)),
        ]);
        let req =
            Executor::publish_request(&chunk, &["tgt", "fun", "arg", "kwarg", "timeout"]).unwrap();
        assert_eq!(req.tgt, s("web*"));
        assert_eq!(req.tgt_type, "glob");
        assert_eq!(
            req.arg,
            Value::Array(vec![
                s("a"),
                map([("__kwarg__", Value::Boolean(true)), ("x", Value::from(1))])
            ])
        );
        assert_eq!(
            req.kwargs,
            vec![
                ("client".to_owned(), s("local")),
                ("expr_form".to_owned(), s("glob"))
            ],
            "extra keys ride along in kwargs; credentials never do"
        );
        let missing = Executor::publish_request(&map([("fun", s("x"))]), &[]);
        assert_eq!(missing.unwrap_err().status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn runner_chunks_accept_salts_three_argument_styles() {
        let chunk = map([
            ("client", s("runner")),
            ("fun", s("jobs.lookup_jid")),
            ("arg", Value::Array(vec![s("pos"), s("missing=True")])),
            ("kwarg", map([("ext_source", s("x"))])),
            ("jid", s("20240101")),
            ("token", s("ab")),
            ("full_return", Value::Boolean(true)),
        ]);
        let req = Executor::runner_request(&chunk).unwrap();
        assert_eq!(req.fun, "jobs.lookup_jid");
        assert_eq!(req.arg, vec![s("pos")]);
        assert_eq!(
            req.kwarg,
            vec![
                (s("missing"), Value::Boolean(true)),
                (s("ext_source"), s("x")),
                (s("jid"), s("20240101")),
            ]
        );
    }

    #[test]
    fn wheel_loads_never_carry_a_key_or_user_from_the_caller() {
        let chunk = map([
            ("client", s("wheel")),
            ("fun", s("key.list_all")),
            ("token", s("ab")),
            ("key", s("stolen")),
            ("user", s("root")),
        ]);
        let load = Executor::wheel_load(chunk).unwrap();
        assert_eq!(
            load,
            map([
                ("client", s("wheel")),
                ("fun", s("key.list_all")),
                ("token", s("ab")),
                ("cmd", s("wheel")),
            ])
        );
        let e = Executor::wheel_load(map([("client", s("wheel"))])).unwrap_err();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn wheel_answers_are_errors_or_the_reply() {
        let denied = map([(
            "error",
            map([
                ("name", s("EauthAuthenticationError")),
                (
                    "message",
                    s("Authentication failure of type \"eauth\" occurred for user bob."),
                ),
            ]),
        )]);
        assert_eq!(
            wheel_reply(denied).unwrap_err().status(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            wheel_reply(Value::Map(vec![])).unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );
        let ok = map([
            ("tag", s("salt/wheel/1")),
            ("data", map([("return", s("x"))])),
        ]);
        assert_eq!(wheel_reply(ok.clone()).unwrap(), ok);
    }

    #[test]
    fn shuffle_keeps_every_item() {
        let mut v: Vec<String> = (0..50).map(|i| i.to_string()).collect();
        shuffle(&mut v);
        let mut sorted = v.clone();
        sorted.sort_by_key(|x| x.parse::<u32>().unwrap());
        assert_eq!(sorted, (0..50).map(|i| i.to_string()).collect::<Vec<_>>());
    }
}
