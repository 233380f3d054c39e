//! The `state.event` runner, run in-process as stock `salt-run` runs it:
//! `salt/runners/state.py` `event` calling `salt/modules/state.py` `event` on the master
//! bus, inside `RunnerClient.low`'s envelope (`new`/`ret` events, the proc file).

use crate::print::Printer;
use halite_config::MasterConfig;
use halite_journal::{state_event_line, MasterBus, Since, TagFilter};
use halite_proto::value::{self, s};
use halite_proto::Value;
use halite_target::fnmatch::fnmatch;
use halite_target::pyre::{Anchor, PyRegex};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// `halite-run state.event [args...]`: binds the arguments, then watches the master bus
/// in-process until `count` events matched or SIGINT/SIGTERM.
pub fn main(
    rt: &tokio::runtime::Runtime,
    cfg: &MasterConfig,
    printer: &Printer,
    words: &[String],
) -> ExitCode {
    let args = halite_config::args::parse_input(words, &[]);
    let (event_args, fun_args) = match bind(&args) {
        Ok(b) => b,
        Err(msg) => {
            printer.print(&s(format!("\nPassed invalid arguments: {msg}\n")), None);
            return ExitCode::SUCCESS;
        }
    };
    if event_args.node != "master" {
        eprintln!(
            "halite-run watches the master bus only; node={} is not supported",
            event_args.node
        );
        return ExitCode::from(1);
    }
    rt.block_on(run(printer, cfg, event_args, fun_args))
}

/// `RunnerClient.low` for `state.event`: `new` event and proc file, the function, `ret`
/// event, the return printed.
async fn run(
    printer: &Printer,
    cfg: &MasterConfig,
    args: EventArgs,
    fun_args: Vec<Value>,
) -> ExitCode {
    let master_bus = MasterBus::from_config(cfg);
    let jid = halite_proto::jid::JidGenerator::default().next(chrono::Utc::now());
    let tag = |what: &str| format!("salt/run/{jid}/{what}");
    // `_stamp` is reserved in place: Salt's fire_event adds it to the same dict the `ret`
    // event later reuses, so it comes before `return` and `success`.
    let mut data = vec![
        (s("fun"), s("runner.state.event")),
        (s("jid"), s(jid.clone())),
        (s("user"), s(halite_client::specific_user())),
        (s("fun_args"), Value::Array(fun_args)),
        (s("_stamp"), s("")),
    ];
    if let Err(e) = master_bus.fire(&tag("new"), Value::Map(data.clone())).await {
        tracing::warn!(error = %e, "Cannot fire the runner's new event");
    }
    let proc_file = write_proc_file(cfg, &jid, &data);

    let listen_bus = match &args.sock_dir {
        Some(dir) => MasterBus::new(
            dir,
            usize::try_from(cfg.max_event_size).unwrap_or(usize::MAX),
        ),
        None => master_bus.clone(),
    };
    let watched = tokio::select! {
        r = watch(&listen_bus, &args) => r,
        _ = crate::terminated() => Err(None),
    };
    if let Some(p) = &proc_file {
        let _ = std::fs::remove_file(p);
    }
    match watched {
        Ok(()) => {}
        Err(None) => return ExitCode::SUCCESS,
        Err(Some(e)) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    }
    data.push((s("return"), Value::Nil));
    data.push((s("success"), Value::from(true)));
    if let Err(e) = master_bus.fire(&tag("ret"), Value::Map(data)).await {
        tracing::warn!(error = %e, "Cannot fire the runner's ret event");
    }
    printer.print(&Value::Nil, None);
    ExitCode::SUCCESS
}

/// The body of `salt/modules/state.py` `event`.
async fn watch(bus: &MasterBus, args: &EventArgs) -> Result<(), Option<halite_journal::Error>> {
    let matcher = ExprMatch::new(&args.tagmatch);
    let mut events = bus
        .listen(TagFilter::All, Since::Live)
        .await
        .map_err(Some)?
        .reconnecting(true);
    let mut count = args.count;
    loop {
        let Some(ev) = events.recv().await.map_err(Some)? else {
            return Ok(());
        };
        if !matcher.matches(&ev.tag) {
            tracing::debug!("Skipping event tag: {}", ev.tag);
            continue;
        }
        if !args.quiet {
            let line = state_event_line(&ev.tag, &ev.data, args.pretty);
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                // Salt's print_cli ignores a closed pipe and keeps going.
                tracing::debug!("stdout closed");
            }
        }
        if count > 0 {
            count -= 1;
        }
        if count == 0 {
            return Ok(());
        }
    }
}

/// `cachedir/proc/<jid>`: the runner's load and pid, which `salt-run jobs.active` reads.
fn write_proc_file(cfg: &MasterConfig, jid: &str, data: &[(Value, Value)]) -> Option<PathBuf> {
    let path = cfg.cachedir.join("proc").join(jid);
    let mut load = data.to_vec();
    load.push((s("pid"), Value::from(std::process::id())));
    match std::fs::write(&path, halite_proto::value::encode(&Value::Map(load))) {
        Ok(()) => Some(path),
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "Cannot write the runner's proc file");
            None
        }
    }
}

/// The runner's parameters, in signature order.
const PARAMS: [&str; 6] = ["tagmatch", "count", "quiet", "sock_dir", "pretty", "node"];

/// `state.event` arguments after Salt's binding to
/// `event(tagmatch="*", count=-1, quiet=False, sock_dir=None, pretty=False, node="master")`.
#[derive(Debug, Clone, PartialEq)]
pub struct EventArgs {
    /// What tags to print: a glob, else a regular expression (`expr_match`).
    pub tagmatch: Value,
    /// Stop after this many matching events; negative listens forever, and 0 stops after
    /// one (Salt checks `count == 0` after each match).
    pub count: i64,
    /// Print nothing; only block.
    pub quiet: bool,
    /// Another master `sock_dir` to listen on.
    pub sock_dir: Option<PathBuf>,
    /// Indented JSON with sorted keys.
    pub pretty: bool,
    /// `master` (the only bus `halite-run` watches) or `minion`.
    pub node: String,
}

/// Binds parsed command-line arguments (positional values, then an optional trailing
/// `{"__kwarg__": true, ...}` map, as `parse_input` gives them) to the parameters.
/// Returns the arguments and the `fun_args` Salt reports in the runner's events.
///
/// Errors: the `TypeError` text Python raises for a bad call, or a message for a value
/// whose type `state.event` cannot use.
pub fn bind(args: &[Value]) -> Result<(EventArgs, Vec<Value>), String> {
    let (positional, kwargs) = match args.last() {
        Some(Value::Map(m))
            if m.iter()
                .any(|(k, v)| value::str_of(k) == Some("__kwarg__") && value::truthy(v)) =>
        {
            let kw: Vec<(Value, Value)> = m
                .iter()
                .filter(|(k, _)| value::str_of(k) != Some("__kwarg__"))
                .cloned()
                .collect();
            (&args[..args.len() - 1], kw)
        }
        _ => (args, Vec::new()),
    };
    if positional.len() > PARAMS.len() {
        return Err(format!(
            "event() takes from 0 to {} positional arguments but {} were given",
            PARAMS.len(),
            positional.len()
        ));
    }
    let mut slots: [Option<Value>; 6] = Default::default();
    for (slot, v) in slots.iter_mut().zip(positional) {
        *slot = Some(v.clone());
    }
    for (k, v) in &kwargs {
        let name = value::str_of(k).unwrap_or("");
        let Some(i) = PARAMS.iter().position(|p| *p == name) else {
            return Err(format!(
                "event() got an unexpected keyword argument '{name}'"
            ));
        };
        if slots[i].is_some() {
            return Err(format!("event() got multiple values for argument '{name}'"));
        }
        slots[i] = Some(v.clone());
    }
    let [tagmatch, count, quiet, sock_dir, pretty, node] = slots;
    let count = match count {
        None => -1,
        Some(Value::Integer(i)) => i.as_i64().ok_or("count is out of range")?,
        Some(Value::Boolean(b)) => i64::from(b),
        Some(other) => return Err(format!("count must be an integer, not {other}")),
    };
    let text = |v: Option<Value>, what: &str| -> Result<Option<String>, String> {
        match v {
            None | Some(Value::Nil) => Ok(None),
            Some(v) => value::str_of(&v)
                .map(|t| Some(t.to_owned()))
                .ok_or_else(|| format!("{what} must be a string, not {v}")),
        }
    };
    let parsed = EventArgs {
        tagmatch: tagmatch.unwrap_or_else(|| s("*")),
        count,
        quiet: quiet.as_ref().is_some_and(value::truthy),
        sock_dir: text(sock_dir, "sock_dir")?.map(PathBuf::from),
        pretty: pretty.as_ref().is_some_and(value::truthy),
        node: text(node, "node")?.unwrap_or_else(|| "master".to_owned()),
    };
    let mut fun_args: Vec<Value> = positional.to_vec();
    if !kwargs.is_empty() {
        fun_args.push(Value::Map(kwargs));
    }
    Ok((parsed, fun_args))
}

/// `salt.utils.stringutils.expr_match(tag, expr)` compiled once: `fnmatch`, else
/// `re.match(rf"\A{expr}\Z", tag)`; a pattern that is not a string matches nothing (Python
/// raises `TypeError`, which `expr_match` logs and treats as no match).
pub struct ExprMatch {
    glob: Option<String>,
    regex: Option<PyRegex>,
}

impl ExprMatch {
    /// Compiles `expr`; an invalid regular expression leaves only the glob.
    pub fn new(expr: &Value) -> ExprMatch {
        let Some(text) = value::str_of(expr) else {
            return ExprMatch {
                glob: None,
                regex: None,
            };
        };
        ExprMatch {
            glob: Some(text.to_owned()),
            regex: PyRegex::new(&format!(r"\A{text}\Z"), Anchor::Search).ok(),
        }
    }

    /// Whether `tag` matches.
    pub fn matches(&self, tag: &str) -> bool {
        let Some(glob) = &self.glob else {
            return false;
        };
        fnmatch(tag, glob)
            || self
                .regex
                .as_ref()
                .is_some_and(|r| r.is_match(tag).unwrap_or(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::map;

    fn kw(pairs: &[(&str, Value)]) -> Value {
        let mut m = vec![(s("__kwarg__"), Value::from(true))];
        m.extend(pairs.iter().map(|(k, v)| (s(*k), v.clone())));
        Value::Map(m)
    }

    #[test]
    fn arguments_bind_like_python() {
        let (a, fun_args) = bind(&[]).unwrap();
        assert_eq!(
            a,
            EventArgs {
                tagmatch: s("*"),
                count: -1,
                quiet: false,
                sock_dir: None,
                pretty: false,
                node: "master".into(),
            }
        );
        assert!(fun_args.is_empty());
        let (a, fun_args) = bind(&[
            s("salt/job/*"),
            kw(&[("count", Value::from(2)), ("pretty", Value::from(true))]),
        ])
        .unwrap();
        assert_eq!((a.count, a.pretty, a.quiet), (2, true, false));
        assert_eq!(
            fun_args,
            vec![
                s("salt/job/*"),
                map([("count", Value::from(2)), ("pretty", Value::from(true))])
            ]
        );
        let (a, _) = bind(&[s("t"), Value::from(3), Value::from(true), s("/run/s")]).unwrap();
        assert_eq!((a.count, a.quiet), (3, true));
        assert_eq!(a.sock_dir, Some(PathBuf::from("/run/s")));
    }

    #[test]
    fn bad_calls_give_pythons_messages() {
        let seven: Vec<Value> = (0..7).map(Value::from).collect();
        let cases = [
            (
                seven,
                "event() takes from 0 to 6 positional arguments but 7 were given",
            ),
            (
                vec![kw(&[("foo", Value::from(1))])],
                "event() got an unexpected keyword argument 'foo'",
            ),
            (
                vec![s("t"), kw(&[("tagmatch", s("u"))])],
                "event() got multiple values for argument 'tagmatch'",
            ),
            (
                vec![kw(&[("count", s("many"))])],
                "count must be an integer",
            ),
        ];
        for (args, want) in cases {
            let err = bind(&args).unwrap_err();
            assert!(err.starts_with(want), "{err}");
        }
    }

    #[test]
    fn tagmatch_is_a_glob_or_an_anchored_regex() {
        let cases = [
            ("*", "anything/at/all", true),
            ("salt/job/*/ret/*", "salt/job/1/ret/m", true),
            ("salt/job/*/ret/*", "salt/job/1/new", false),
            ("salt/auth", "salt/auth", true),
            ("salt/auth", "salt/auth/x", false),
            (r"salt/job/\d+/new", "salt/job/2026/new", true),
            (r"salt/job/\d+/new", "salt/job/x/new", false),
            // `\A{expr}\Z` binds an alternation loosely, as in Python.
            ("salt/auth|key", "salt/auth/anything", true),
            ("salt/auth|key", "the/key", true),
            ("(unbalanced", "(unbalanced", true),
            ("(unbalanced", "other", false),
        ];
        for (expr, tag, want) in cases {
            assert_eq!(ExprMatch::new(&s(expr)).matches(tag), want, "{expr} {tag}");
        }
        assert!(!ExprMatch::new(&Value::from(5)).matches("5"));
    }
}
