//! The frames between the minion and its worker (`worker.py` has the same list), and the
//! job returns made from them.
//!
//! Salt data (a job's arguments, publish load and pillar; a return; a master request and
//! its reply) crosses as a Salt payload in a `bin` field, so Salt's own `payload.dumps` /
//! `loads` handle its types on the Python side; the frames themselves are small maps.

use std::time::Duration;

use halite_exec::{Context, ExecError, JobReturn, MasterChannel, SALT_REQ_TIMEOUT_ERROR};
use halite_proto::value::{self, bin, map, s};
use rmpv::Value;

/// Salt's return text for a function that raised, the start of every failure the
/// worker's side reports.
const EXCEPTION_TEXT: &str = "The minion function caused an exception";

/// A frame from the worker, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FromWorker {
    /// Warm: Salt's version and how long warming up took.
    Ready { salt: String, seconds: f64 },
    /// Warming up failed; the traceback.
    Fatal(String),
    /// A master request of job `job`, answered with a [`reply`] for `req`.
    Request {
        job: u64,
        req: u64,
        kind: RequestKind,
        load: Vec<u8>,
    },
    /// The return of job `job` (a Salt payload: `return`, `retcode`, `success`, `out`).
    Result { job: u64, ret: Vec<u8> },
    /// The function list asked for as job `job`.
    Functions { job: u64, names: Vec<String> },
    /// Job `job`'s process ended without a result; why.
    Crashed { job: u64, error: String },
}

/// What a master request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestKind {
    /// `ReqChannel.send`: one encrypted request, the decrypted reply.
    Send,
    /// `crypted_transfer_decode_dictentry(dictkey="pillar")`: the signed pillar.
    Pillar,
}

fn field<'a>(v: &'a Value, key: &str) -> Result<&'a Value, String> {
    value::get(v, key).ok_or_else(|| format!("no {key:?} field"))
}

fn uint(v: &Value, key: &str) -> Result<u64, String> {
    field(v, key)?
        .as_u64()
        .ok_or_else(|| format!("{key:?} is not a non-negative integer"))
}

fn text(v: &Value, key: &str) -> Result<String, String> {
    value::str_of(field(v, key)?)
        .map(str::to_owned)
        .ok_or_else(|| format!("{key:?} is not text"))
}

fn bytes(v: &Value, key: &str) -> Result<Vec<u8>, String> {
    match field(v, key)? {
        Value::Binary(b) => Ok(b.clone()),
        _ => Err(format!("{key:?} is not bytes")),
    }
}

/// Checks a frame from the worker; the error says what is wrong with it.
pub(crate) fn parse(frame: &Value) -> Result<FromWorker, String> {
    if !matches!(frame, Value::Map(_)) {
        return Err("the frame is not a map".to_owned());
    }
    let op = text(frame, "op")?;
    match op.as_str() {
        "ready" => Ok(FromWorker::Ready {
            salt: text(frame, "salt")?,
            seconds: field(frame, "seconds")?.as_f64().unwrap_or(0.0),
        }),
        "fatal" => Ok(FromWorker::Fatal(text(frame, "error")?)),
        "request" => {
            let kind = match text(frame, "kind")?.as_str() {
                "send" => RequestKind::Send,
                "pillar" => RequestKind::Pillar,
                other => return Err(format!("unknown request kind {other:?}")),
            };
            Ok(FromWorker::Request {
                job: uint(frame, "job")?,
                req: uint(frame, "req")?,
                kind,
                load: bytes(frame, "load")?,
            })
        }
        "result" => {
            let job = uint(frame, "job")?;
            if let Some(names) = value::get(frame, "functions") {
                let Value::Array(items) = names else {
                    return Err("\"functions\" is not a list".to_owned());
                };
                let names = items
                    .iter()
                    .map(|n| value::str_of(n).map(str::to_owned))
                    .collect::<Option<Vec<String>>>()
                    .ok_or("a function name is not text")?;
                return Ok(FromWorker::Functions { job, names });
            }
            Ok(FromWorker::Result {
                job,
                ret: bytes(frame, "ret")?,
            })
        }
        "crashed" => Ok(FromWorker::Crashed {
            job: uint(frame, "job")?,
            error: text(frame, "error")?,
        }),
        other => Err(format!("unknown op {other:?}")),
    }
}

/// The frame that starts `fun` as job `job` for the job of `ctx` with the publish `arg`.
pub(crate) fn job_frame(job: u64, ctx: &Context, fun: &str, arg: &Value) -> Value {
    let payload = |v: &Value| bin(value::encode(v));
    let master_uri = ctx
        .master
        .as_ref()
        .and_then(|m| m.master_uri())
        .map_or(Value::Nil, s);
    map([
        ("op", s("job")),
        ("job", Value::from(job)),
        ("fun", s(fun)),
        ("arg", payload(arg)),
        (
            "data",
            payload(ctx.pub_data.as_ref().unwrap_or(&Value::Nil)),
        ),
        ("pillar", payload(&ctx.pillar)),
        ("master_uri", master_uri),
        ("connected", Value::Boolean(ctx.master.is_some())),
    ])
}

/// The frame asking for the function list as job `job`.
pub(crate) fn list_frame(job: u64) -> Value {
    map([("op", s("list")), ("job", Value::from(job))])
}

/// The frame that sends `signal` to job `job`'s process group.
pub(crate) fn signal_frame(job: u64, signal: i32) -> Value {
    map([
        ("op", s("signal")),
        ("job", Value::from(job)),
        ("signal", Value::from(signal)),
    ])
}

/// The frame that tells the worker to leave.
pub(crate) fn exit_frame() -> Value {
    map([("op", s("exit"))])
}

/// Why a master request failed, as the worker raises it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    /// No reply came in time (`SaltReqTimeoutError`); else a `SaltClientError`.
    pub timeout: bool,
    pub message: String,
}

/// The answer to request `req`.
pub(crate) fn reply(req: u64, answer: Result<Vec<u8>, Refused>) -> Value {
    match answer {
        Ok(data) => map([
            ("op", s("reply")),
            ("req", Value::from(req)),
            ("ok", Value::Boolean(true)),
            ("data", bin(data)),
        ]),
        Err(refused) => map([
            ("op", s("reply")),
            ("req", Value::from(req)),
            ("ok", Value::Boolean(false)),
            (
                "kind",
                s(if refused.timeout { "timeout" } else { "client" }),
            ),
            ("message", s(refused.message)),
        ]),
    }
}

/// Sends one master request of a job on the minion's channel: `load` is its Salt
/// payload; the reply is encoded as one. `abort` gives a request up (the job was killed).
pub(crate) fn serve_request(
    master: Option<&dyn MasterChannel>,
    kind: RequestKind,
    load: &[u8],
    abort: &dyn Fn() -> bool,
) -> Result<Vec<u8>, Refused> {
    let refused = |message: String| Refused {
        timeout: false,
        message,
    };
    let Some(master) = master else {
        return Err(refused(
            "the job has no channel to a master (a local call)".to_owned(),
        ));
    };
    let load = value::decode(load)
        .map_err(|e| refused(format!("the request load is not a Salt payload: {e}")))?;
    if !matches!(load, Value::Map(_)) {
        return Err(refused("the request load is not a map".to_owned()));
    }
    let answer = match kind {
        RequestKind::Send => master.request_apart(load, Duration::ZERO, abort),
        RequestKind::Pillar => master.pillar(load),
    };
    answer.map(|v| value::encode(&v)).map_err(|e| match e {
        ExecError::Exception { kind, message } => Refused {
            timeout: kind == SALT_REQ_TIMEOUT_ERROR,
            message,
        },
        other => refused(other.to_string()),
    })
}

/// The [`JobReturn`] of the return dict Salt's `_thread_return` built (a Salt payload).
pub(crate) fn job_return(fun: &str, payload: &[u8]) -> JobReturn {
    let ret = match value::decode(payload) {
        Ok(ret @ Value::Map(_)) => ret,
        Ok(_) => return exception_return(fun, "the worker's return is not a map"),
        Err(e) => {
            return exception_return(fun, &format!("the worker's return is not msgpack: {e}"))
        }
    };
    let retcode = match value::get(&ret, "retcode") {
        None | Some(Value::Nil) => None,
        Some(Value::Integer(i)) => Some(i.as_i64().unwrap_or(1)),
        Some(Value::Boolean(b)) => Some(i64::from(*b)),
        // Any other retcode Salt would send as it is; the return load carries integers.
        Some(_) => Some(1),
    };
    let success = value::get(&ret, "success").map(value::truthy);
    let (retcode, success) = match (retcode, success) {
        (Some(code), Some(ok)) => (code, ok),
        (Some(code), None) => (code, code == 0),
        (None, Some(ok)) => (i64::from(!ok), ok),
        (None, None) => (0, true),
    };
    JobReturn {
        ret: value::get(&ret, "return").cloned().unwrap_or(Value::Nil),
        retcode,
        success,
        out: value::get_str(&ret, "out").map(str::to_owned),
        multi: None,
    }
}

/// Salt's return for a job whose function raised, for a job the worker could not run
/// to its end (`why`).
pub(crate) fn exception_return(fun: &str, why: &str) -> JobReturn {
    failed(format!(
        "{EXCEPTION_TEXT}: Traceback (most recent call last):\n  File \"halite-fallback\", in {fun}\nhalite.FallbackWorkerError: {why}\n"
    ))
}

/// The return for a function neither Halite nor a Salt install can run: one line.
pub(crate) fn unavailable_return(fun: &str, why: &str) -> JobReturn {
    failed(format!(
        "'{fun}' is not available: it is not a native Halite function, and the fallback executor has no Salt to run it in ({}).",
        why.trim_end_matches('.').replace('\n', " ")
    ))
}

fn failed(ret: String) -> JobReturn {
    JobReturn {
        ret: Value::from(ret),
        retcode: 1,
        success: false,
        out: Some("nested".to_owned()),
        multi: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(pairs: Vec<(&str, Value)>) -> Value {
        map(pairs)
    }

    #[test]
    fn worker_frames_parse_and_bad_ones_say_what_is_wrong() {
        assert_eq!(
            parse(&frame(vec![
                ("op", s("request")),
                ("job", Value::from(3)),
                ("req", Value::from(9)),
                ("kind", s("pillar")),
                ("load", bin(vec![0x80])),
            ])),
            Ok(FromWorker::Request {
                job: 3,
                req: 9,
                kind: RequestKind::Pillar,
                load: vec![0x80]
            })
        );
        assert_eq!(
            parse(&frame(vec![
                ("op", s("result")),
                ("job", Value::from(1)),
                ("functions", Value::Array(vec![s("a.b"), s("c.d")])),
            ])),
            Ok(FromWorker::Functions {
                job: 1,
                names: vec!["a.b".to_owned(), "c.d".to_owned()]
            })
        );
        for (bad, why) in [
            (Value::from(7), "the frame is not a map"),
            (frame(vec![("op", s("dance"))]), "unknown op \"dance\""),
            (frame(vec![("op", s("result"))]), "no \"job\" field"),
            (
                frame(vec![("op", s("result")), ("job", Value::from(-1))]),
                "\"job\" is not a non-negative integer",
            ),
            (
                frame(vec![
                    ("op", s("result")),
                    ("job", Value::from(1)),
                    ("ret", s("text, not bytes")),
                ]),
                "\"ret\" is not bytes",
            ),
            (
                frame(vec![
                    ("op", s("request")),
                    ("job", Value::from(1)),
                    ("req", Value::from(1)),
                    ("kind", s("publish")),
                ]),
                "unknown request kind \"publish\"",
            ),
            (
                frame(vec![
                    ("op", s("result")),
                    ("job", Value::from(1)),
                    ("functions", Value::Array(vec![Value::from(1)])),
                ]),
                "a function name is not text",
            ),
        ] {
            assert_eq!(parse(&bad), Err(why.to_owned()), "{bad}");
        }
    }

    #[test]
    fn a_salt_return_dict_becomes_the_job_return_as_stock_sends_it() {
        let ret = map([
            ("success", Value::Boolean(false)),
            ("return", map([("x", Value::from(1))])),
            ("retcode", Value::from(2)),
            ("out", s("highstate")),
        ]);
        assert_eq!(
            job_return("state.apply", &value::encode(&ret)),
            JobReturn {
                ret: map([("x", Value::from(1))]),
                retcode: 2,
                success: false,
                out: Some("highstate".to_owned()),
                multi: None,
            }
        );
        let bare = map([("return", Value::Boolean(true))]);
        let r = job_return("test.ping", &value::encode(&bare));
        assert_eq!((r.retcode, r.success, r.out), (0, true, None));
        let odd = map([("retcode", s("3")), ("success", Value::Boolean(false))]);
        assert_eq!(job_return("x.y", &value::encode(&odd)).retcode, 1);
    }

    #[test]
    fn a_return_that_is_not_a_salt_payload_is_an_exception_return() {
        for (payload, why) in [
            (vec![0xc1], "not msgpack"),
            (value::encode(&s("a string")), "not a map"),
        ] {
            let r = job_return("pkg.version", &payload);
            let text = value::str_of(&r.ret).unwrap().to_owned();
            assert!(
                text.starts_with("The minion function caused an exception: Traceback (most recent call last):\n  File \"halite-fallback\", in pkg.version\n"),
                "{text}"
            );
            assert!(text.contains(why), "{text}");
            assert_eq!((r.retcode, r.success), (1, false));
            assert_eq!(r.out.as_deref(), Some("nested"));
        }
    }

    #[test]
    fn the_unavailable_text_is_one_line_naming_the_function_and_the_reason() {
        let r = unavailable_return(
            "pkg.list_pkgs",
            "no Salt Python found: salt-call is not on PATH (/bin)\nsecond line.",
        );
        let text = value::str_of(&r.ret).unwrap();
        assert!(!text.contains('\n'), "{text}");
        assert!(
            text.starts_with("'pkg.list_pkgs' is not available: "),
            "{text}"
        );
        assert!(
            text.contains("salt-call is not on PATH (/bin) second line"),
            "{text}"
        );
        assert_eq!((r.retcode, r.success), (1, false));
    }

    #[test]
    fn requests_without_a_master_or_with_a_bad_load_are_refused_not_sent() {
        let never = || false;
        let r = serve_request(
            None,
            RequestKind::Send,
            &value::encode(&map([("cmd", s("_file_list"))])),
            &never,
        );
        assert!(r.is_err_and(|e| !e.timeout && e.message.contains("no channel to a master")));

        struct Unreachable;
        impl MasterChannel for Unreachable {
            fn request(&self, _: Value) -> Result<Value, String> {
                panic!("a bad load was sent")
            }
        }
        for load in [vec![0xc1], value::encode(&s("not a map"))] {
            let r = serve_request(Some(&Unreachable), RequestKind::Send, &load, &never);
            assert!(r.is_err_and(|e| !e.timeout), "{load:?}");
        }
    }

    #[test]
    fn a_master_timeout_reaches_the_worker_as_a_timeout() {
        struct Slow;
        impl MasterChannel for Slow {
            fn request(&self, _: Value) -> Result<Value, String> {
                unreachable!()
            }
            fn request_apart(
                &self,
                _: Value,
                _: Duration,
                _: &dyn Fn() -> bool,
            ) -> Result<Value, ExecError> {
                Err(ExecError::Exception {
                    kind: SALT_REQ_TIMEOUT_ERROR,
                    message: "Message timed out".to_owned(),
                })
            }
        }
        let load = value::encode(&map([("cmd", s("_file_list"))]));
        let r = serve_request(Some(&Slow), RequestKind::Send, &load, &|| false);
        assert_eq!(
            r,
            Err(Refused {
                timeout: true,
                message: "Message timed out".to_owned()
            })
        );
        // The default channel has no pillar: a client error, not a panic.
        let r = serve_request(Some(&Slow), RequestKind::Pillar, &load, &|| false);
        assert!(r.is_err_and(|e| !e.timeout && e.message.contains("cannot fetch the pillar")));
        let sent = reply(
            4,
            Err(Refused {
                timeout: true,
                message: "m".into(),
            }),
        );
        assert_eq!(value::get_str(&sent, "kind"), Some("timeout"));
    }
}
