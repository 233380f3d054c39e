//! `salt/modules/cmdmod.py` (`cmd`): running commands, as `cmdmod._run` and
//! `salt.utils.timed_subprocess.TimedProc` do it on Linux.
//!
//! Checks, defaults and error texts follow Salt in Salt's order: the working directory
//! (the user's home, else `/`), the shell check, `cmd_blacklist_glob` /
//! `cmd_whitelist_glob` for published jobs, the environment (`env`, `clean_env`,
//! `prepend_path`, the `C` locale unless `reset_system_locale=False`), `umask`, the
//! `shlex` split when `python_shell` is off, `success_retcodes` / `success_stdout` /
//! `success_stderr`, the timeout. The exit code (negative for a signal) becomes the
//! job's retcode unless `ignore_retcode`; a timed-out command is killed and reported
//! with Salt's `<cmd> : Timed out after <n> seconds`.
//!
//! Deviations:
//! * `runas` switches user in the child (`setgroups`/`setgid`/`setuid`, root only)
//!   and sets `HOME`, `USER`, `LOGNAME` and `SHELL` from the user database; Salt runs
//!   `su - <user>` first to capture the user's whole login environment.
//! * `group` sets the child's group directly (root only) instead of going through
//!   `sudo`.
//! * Each command runs in its own process group, and a timeout or a cancelled job
//!   kills the whole group; Salt kills only the direct child.
//! * `template`, `use_vt`, `password` (Windows), `output_encoding` other than UTF-8
//!   and `log_callback` are not supported: a template is refused with Salt's
//!   "unavailable engine" error; the others are ignored (output is decoded as UTF-8
//!   with replacement characters).
//! * `bg=True` children get `/dev/null` for their output instead of the minion's.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rmpv::Value;

use crate::args::Kwargs;
use crate::error::ExecError;
use crate::job::{signal_group, JobHandle};
use crate::os::ChildSetup;
use crate::pyval::{py_repr, py_str, repr_str, text, truthy};
use crate::registry::{Export, Invocation};
use crate::Context;

pub(crate) const EXPORTS: &[Export] = &[
    ("cmd.has_exec", has_exec, None),
    ("cmd.retcode", retcode, None),
    ("cmd.run", run, None),
    ("cmd.run_all", run_all, None),
    ("cmd.run_stderr", run_stderr, None),
    ("cmd.run_stdout", run_stdout, None),
    ("cmd.shell", shell, None),
    ("cmd.which", which, None),
    ("cmd.which_bin", which_bin, None),
];

/// How often the runner looks at the child, the pipes, the clock and cancellation.
const POLL: Duration = Duration::from_millis(10);

fn which(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(super::which(&py_str(inv.arg("cmd"))).map_or(Value::Nil, Value::from))
}

fn has_exec(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(Value::Boolean(
        super::which(&py_str(inv.arg("cmd"))).is_some(),
    ))
}

fn which_bin(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let exes = match inv.arg("cmds") {
        Value::String(_) => vec![py_str(inv.arg("cmds"))],
        Value::Array(items) => items.iter().map(py_str).collect(),
        Value::Map(entries) => entries.iter().map(|(k, _)| py_str(k)).collect(),
        _ => return Ok(Value::Nil),
    };
    Ok(exes
        .iter()
        .find_map(|exe| super::which(exe))
        .map_or(Value::Nil, Value::from))
}

/// Where the child's standard error goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StderrMode {
    /// Its own pipe (`subprocess.PIPE`, -1).
    Pipe,
    /// Into standard output (`subprocess.STDOUT`, -2).
    Merge,
}

/// The result of `_run`.
#[derive(Debug, Clone, PartialEq)]
struct RunResult {
    pid: Value,
    retcode: Value,
    stdout: String,
    stderr: String,
    /// The command hit its timeout (Salt then orders the keys differently and leaves
    /// `__context__["retcode"]` alone).
    timed_out: bool,
}

impl RunResult {
    /// `cmd.run_all`'s dict.
    fn to_map(&self) -> Value {
        let pairs = if self.timed_out {
            vec![
                ("stdout", Value::from(self.stdout.as_str())),
                ("stderr", Value::from(self.stderr.as_str())),
                ("retcode", self.retcode.clone()),
                ("pid", self.pid.clone()),
            ]
        } else {
            vec![
                ("pid", self.pid.clone()),
                ("retcode", self.retcode.clone()),
                ("stdout", Value::from(self.stdout.as_str())),
                ("stderr", Value::from(self.stderr.as_str())),
            ]
        };
        Value::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (Value::from(k), v))
                .collect(),
        )
    }

    fn failed(&self) -> bool {
        self.retcode != Value::from(0)
    }
}

/// `_python_shell_default`: on for published jobs (`__pub_jid` set) and with
/// `cmd_safe: False`, when not given.
fn python_shell_default(inv: &Invocation<'_>, given: &Value) -> bool {
    if *given != Value::Nil {
        return truthy(given);
    }
    if inv.call.kwarg("__pub_jid").is_some_and(truthy) {
        return true;
    }
    inv.ctx.opts.get("cmd_safe") == Some(&Value::Boolean(false))
}

/// A `cmdmod._run` parameter: the function's own parameter, else a keyword argument
/// that `**kwargs` forwarded to `_run`, else `_run`'s default.
fn run_param(inv: &Invocation<'_>, name: &str) -> Value {
    if inv.call.params().iter().any(|p| p.name == name) {
        return inv.arg(name).clone();
    }
    if let Some(v) = inv.call.kwarg(name) {
        return v.clone();
    }
    match name {
        "shell" => Value::from(crate::spec::default_shell()),
        "rstrip" | "reset_system_locale" => Value::Boolean(true),
        "clean_env" | "ignore_retcode" | "bg" => Value::Boolean(false),
        "output_loglevel" => Value::from("debug"),
        _ => Value::Nil,
    }
}

fn run(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let python_shell = python_shell_default(inv, &inv.arg("python_shell").clone());
    let mode = if truthy(inv.arg("redirect_stderr")) {
        StderrMode::Merge
    } else {
        StderrMode::Pipe
    };
    let ret = run_cmd(inv, python_shell, mode)?;
    let loud = !is_quiet(inv.arg("output_loglevel"));
    if loud && !truthy(inv.arg("ignore_retcode")) && ret.failed() && truthy(inv.arg("raise_err")) {
        let msg = if truthy(inv.arg("hide_output")) {
            String::new()
        } else {
            ret.stdout.clone()
        };
        return Err(ExecError::CommandExecution(msg));
    }
    Ok(hideable(inv, ret.stdout))
}

fn shell(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let python_shell = match inv.call.pop_kwarg("python_shell") {
        None | Some(Value::Nil) => true,
        Some(v) => truthy(&v),
    };
    let ret = run_cmd(inv, python_shell, StderrMode::Merge)?;
    Ok(hideable(inv, ret.stdout))
}

fn run_stdout(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let python_shell = python_shell_default(inv, &inv.arg("python_shell").clone());
    let ret = run_cmd(inv, python_shell, StderrMode::Pipe)?;
    Ok(hideable(inv, ret.stdout))
}

fn run_stderr(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let python_shell = python_shell_default(inv, &inv.arg("python_shell").clone());
    let ret = run_cmd(inv, python_shell, StderrMode::Pipe)?;
    Ok(hideable(inv, ret.stderr))
}

fn run_all(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let python_shell = python_shell_default(inv, &inv.arg("python_shell").clone());
    let mode = if truthy(inv.arg("redirect_stderr")) {
        StderrMode::Merge
    } else {
        StderrMode::Pipe
    };
    let mut ret = run_cmd(inv, python_shell, mode)?;
    if truthy(inv.arg("hide_output")) {
        ret.stdout.clear();
        ret.stderr.clear();
    }
    Ok(ret.to_map())
}

fn retcode(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let python_shell = python_shell_default(inv, &inv.arg("python_shell").clone());
    Ok(run_cmd(inv, python_shell, StderrMode::Merge)?.retcode)
}

fn hideable(inv: &Invocation<'_>, out: String) -> Value {
    if truthy(inv.arg("hide_output")) {
        Value::from("")
    } else {
        Value::from(out)
    }
}

fn is_quiet(level: &Value) -> bool {
    text(level).is_some_and(|l| l.to_lowercase() == "quiet")
}

/// `salt.utils.args.split_input`: a list as it is, anything else split on commas.
fn split_input(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items.iter().map(py_str).collect(),
        other => py_str(other)
            .split(',')
            .map(|s| s.trim().to_owned())
            .collect(),
    }
}

/// What the child runs: argv, and the form Salt's messages show.
struct Program {
    argv: Vec<String>,
    /// `str(args)` as Popen got them: the command string with a shell, else the list.
    display: String,
}

/// `cmdmod._run` plus `TimedProc`, for the function being invoked.
fn run_cmd(
    inv: &mut Invocation<'_>,
    python_shell: bool,
    stderr_mode: StderrMode,
) -> Result<RunResult, ExecError> {
    let ctx = inv.ctx;
    let cmd = run_param(inv, "cmd");
    let runas = Some(run_param(inv, "runas"))
        .filter(truthy)
        .map(|v| py_str(&v));
    let group = Some(run_param(inv, "group"))
        .filter(truthy)
        .map(|v| py_str(&v));
    let shell = run_param(inv, "shell");
    let quiet = is_quiet(&run_param(inv, "output_loglevel"));
    let bg = truthy(&run_param(inv, "bg"));
    let ignore_retcode = bg || truthy(&run_param(inv, "ignore_retcode"));
    let rstrip = truthy(&run_param(inv, "rstrip"));

    // The working directory: the user's home unless given.
    let cwd = if truthy(&run_param(inv, "cwd")) {
        py_str(&run_param(inv, "cwd"))
    } else {
        let home = match &runas {
            Some(user) => {
                crate::os::user_by_name(user).map_or_else(|| format!("~{user}"), |u| u.home)
            }
            None => home_dir(),
        };
        if crate::os::readable(&home) && Path::new(&home).is_dir() {
            home
        } else {
            "/".to_owned()
        }
    };

    if truthy(&shell) {
        let sh = py_str(&shell);
        if !Path::new(&sh).is_file() || !crate::os::executable(&sh) {
            return Err(ExecError::CommandExecution(format!(
                "The shell {sh} is not available"
            )));
        }
    }
    if truthy(&run_param(inv, "template")) {
        return Err(ExecError::CommandExecution(format!(
            "Attempted to render file paths with unavailable engine {}",
            py_str(&run_param(inv, "template"))
        )));
    }
    if inv.call.kwarg("__pub_jid").is_some() && !command_allowed(ctx, &cmd) {
        return Err(ExecError::CommandExecution(format!(
            "The shell command \"{}\" is not permitted",
            py_str(&cmd)
        )));
    }

    let mut env = parse_env(&run_param(inv, "env"));
    let run_user = match &runas {
        Some(name) => Some(crate::os::user_by_name(name).ok_or_else(|| {
            ExecError::CommandExecution(format!("User '{name}' is not available"))
        })?),
        None => None,
    };
    let group_id = match &group {
        Some(name) => Some(crate::os::group_id(name).ok_or_else(|| {
            // Salt names `runas` here, not the group.
            ExecError::CommandExecution(format!(
                "Group '{}' is not available",
                runas.as_deref().unwrap_or("None")
            ))
        })?),
        None => None,
    };
    if let Some(user) = &run_user {
        for (key, value) in [
            ("HOME", user.home.clone()),
            ("USER", user.name.clone()),
            ("LOGNAME", user.name.clone()),
            ("SHELL", user.shell.clone()),
        ] {
            if !env.iter().any(|(k, _)| k == key) || key == "USER" || key == "HOME" {
                set_env(&mut env, key, value);
            }
        }
    }
    if run_param(inv, "reset_system_locale") == Value::Boolean(true) {
        for key in [
            "LC_CTYPE",
            "LC_NUMERIC",
            "LC_TIME",
            "LC_COLLATE",
            "LC_MONETARY",
            "LC_MESSAGES",
            "LC_PAPER",
            "LC_NAME",
            "LC_ADDRESS",
            "LC_TELEPHONE",
            "LC_MEASUREMENT",
            "LC_IDENTIFICATION",
            "LANGUAGE",
        ] {
            if !env.iter().any(|(k, _)| k == key) {
                env.push((key.to_owned(), "C".to_owned()));
            }
        }
    }
    let mut run_env: Vec<(String, String)> = if truthy(&run_param(inv, "clean_env")) {
        Vec::new()
    } else {
        std::env::vars_os()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .collect()
    };
    for (k, v) in &env {
        set_env(&mut run_env, k, v.clone());
    }
    if truthy(&run_param(inv, "prepend_path")) {
        let current = run_env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .ok_or_else(|| ExecError::exception("KeyError", "'PATH'"))?;
        set_env(
            &mut run_env,
            "PATH",
            format!("{}:{current}", py_str(&run_param(inv, "prepend_path"))),
        );
    }
    if !env.iter().any(|(k, _)| k == "NOTIFY_SOCKET") {
        run_env.retain(|(k, _)| k != "NOTIFY_SOCKET");
    }

    let umask = parse_umask(&run_param(inv, "umask"))?;
    let mut setup = ChildSetup { user: None, umask };
    if run_user.is_some() || group_id.is_some() {
        let current = crate::os::euid();
        let (uid, primary) = match &run_user {
            Some(u) => (u.uid, u.gid),
            None => (current, crate::os::gid()),
        };
        let gid = group_id.unwrap_or(primary);
        let switching = uid != current || gid != crate::os::gid();
        if switching && current != 0 {
            return Err(ExecError::CommandExecution(format!(
                "Unable to run the command as user '{}': the minion is not running as root",
                runas.as_deref().unwrap_or("None")
            )));
        }
        if switching {
            let mut groups = match &run_user {
                Some(u) => crate::os::group_list(&u.name, gid),
                None => vec![gid],
            };
            if !groups.contains(&gid) {
                groups.push(gid);
            }
            setup.user = Some((uid, gid, groups));
        }
    }
    let preexec = (runas.is_some() || group.is_some() || umask.is_some()).then(|| {
        format!(
            "functools.partial(<function chugid_and_umask>, {}, {}, {})",
            runas.as_deref().map_or("None".to_owned(), repr_str),
            umask.map_or("None".to_owned(), |m| m.to_string()),
            group.as_deref().map_or("None".to_owned(), repr_str),
        )
    });

    if !cwd.starts_with('/') || !Path::new(&cwd).is_dir() {
        return Err(ExecError::CommandExecution(format!(
            "Specified cwd '{cwd}' either not absolute or does not exist"
        )));
    }

    let shell_path = (shell != Value::Nil).then(|| py_str(&shell));
    let program = build_program(&cmd, python_shell, shell_path.as_deref())?;

    let success_retcodes: Vec<i64> = match &run_param(inv, "success_retcodes") {
        Value::Nil => vec![0],
        v => split_input(v)
            .iter()
            .map(|s| s.trim().parse::<i64>())
            .collect::<Result<_, _>>()
            .map_err(|_| {
                ExecError::SaltInvocation("success_retcodes must be a list of integers".to_owned())
            })?,
    };
    let success_stdout = match &run_param(inv, "success_stdout") {
        Value::Nil => Vec::new(),
        v => split_input(v),
    };
    let success_stderr = match &run_param(inv, "success_stderr") {
        Value::Nil => Vec::new(),
        v => split_input(v),
    };

    let timeout_value = run_param(inv, "timeout");
    let timeout = match &timeout_value {
        v if !truthy(v) => None,
        Value::Integer(i) => i.as_f64(),
        Value::F32(f) => Some(f64::from(*f)),
        Value::F64(f) => Some(*f),
        Value::Boolean(_) => Some(1.0),
        other => {
            return Err(ExecError::exception(
                "salt.exceptions.TimedProcTimeoutError",
                format!("Error: timeout {} must be a number", py_str(other)),
            ))
        }
    };

    let stdin = match &run_param(inv, "stdin") {
        Value::Nil => None,
        v => {
            let s = py_str(v);
            let raw = inv.call.kwarg("stdin_raw_newlines").is_some_and(truthy);
            Some(if raw { s } else { s.replace("\\n", "\n") }.into_bytes())
        }
    };

    let context_text = || {
        let mut parts = vec![
            format!("'cwd': {}", repr_str(&cwd)),
            format!("'shell': {}", if python_shell { "True" } else { "False" }),
            "'stdout': -1".to_owned(),
            format!(
                "'stderr': {}",
                if stderr_mode == StderrMode::Merge {
                    -2
                } else {
                    -1
                }
            ),
            "'with_communicate': True".to_owned(),
            format!("'timeout': {}", py_repr(&timeout_value)),
            format!("'bg': {}", if bg { "True" } else { "False" }),
        ];
        if let Some(raw) = inv.call.kwarg("stdin_raw_newlines") {
            parts.push(format!("'stdin_raw_newlines': {}", py_repr(raw)));
        }
        if let Some(p) = &preexec {
            parts.push(format!("'preexec_fn': {p}"));
        }
        if python_shell {
            if let Some(sh) = &shell_path {
                parts.push(format!("'executable': {}", repr_str(sh)));
            }
        }
        parts.push("'close_fds': True".to_owned());
        format!("{{{}}}", parts.join(", "))
    };

    let plan = Plan {
        argv: program.argv,
        env: run_env,
        cwd: cwd.clone(),
        stdin,
        stderr_mode,
        timeout,
        bg,
        setup,
    };
    let outcome = match execute(ctx, &plan) {
        Ok(outcome) => outcome,
        Err(SpawnError::Os(err)) => {
            let shown = if quiet {
                "REDACTED".to_owned()
            } else {
                program.display.clone()
            };
            return Err(ExecError::CommandExecution(format!(
                "Unable to run command '{shown}' with the context '{}', reason: {}",
                context_text(),
                os_error_text(&err, plan.argv.first().map_or("", String::as_str)),
            )));
        }
        Err(SpawnError::Cancelled(sig)) => return Err(ExecError::Cancelled(sig)),
    };

    let result = match outcome {
        Outcome::TimedOut { pid } => {
            let secs = match &timeout_value {
                Value::Boolean(true) => "True".to_owned(),
                v => py_str(v),
            };
            return Ok(RunResult {
                pid: Value::from(pid),
                retcode: Value::from(1),
                stdout: format!("{} : Timed out after {secs} seconds", program.display),
                stderr: String::new(),
                timed_out: true,
            });
        }
        Outcome::Background { pid } => RunResult {
            pid: Value::from(pid),
            retcode: Value::Nil,
            stdout: String::new(),
            stderr: String::new(),
            timed_out: false,
        },
        Outcome::Exited {
            pid,
            code,
            stdout,
            stderr,
        } => {
            let decode = |b: &[u8]| {
                let s = String::from_utf8_lossy(b);
                if rstrip {
                    s.trim_end().to_owned()
                } else {
                    s.into_owned()
                }
            };
            let stdout = decode(&stdout);
            let stderr = decode(&stderr);
            let mut code = if success_retcodes.contains(&code) {
                0
            } else {
                code
            };
            if success_stdout.iter().any(|s| stdout.contains(s.as_str()))
                || success_stderr.iter().any(|s| stderr.contains(s.as_str()))
            {
                code = 0;
            }
            RunResult {
                pid: Value::from(pid),
                retcode: Value::from(code),
                stdout,
                stderr,
                timed_out: false,
            }
        }
    };
    if ignore_retcode {
        inv.retcode.set(0);
    } else {
        inv.set_retcode(&result.retcode);
    }
    Ok(result)
}

/// `os.path.expanduser("~")`: `$HOME`, else the user database.
fn home_dir() -> String {
    std::env::var("HOME")
        .ok()
        .or_else(|| crate::os::user_by_uid(crate::os::uid()).map(|u| u.home))
        .unwrap_or_else(|| "~".to_owned())
}

fn set_env(env: &mut Vec<(String, String)>, key: &str, value: String) {
    match env.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => env.push((key.to_owned(), value)),
    }
}

/// `_parse_env` + `_ensure_env_str`: a mapping (or a list of one-key mappings) of
/// strings; `None` values become empty strings.
fn parse_env(env: &Value) -> Vec<(String, String)> {
    let pairs: Kwargs = match env {
        Value::Map(entries) => entries.clone(),
        Value::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                match item {
                    Value::String(_) | Value::Integer(_) | Value::F64(_) | Value::F32(_) => {
                        out.push((item.clone(), Value::Nil));
                    }
                    Value::Map(entries) if entries.len() == 1 => out.push(entries[0].clone()),
                    _ => return Vec::new(),
                }
            }
            out
        }
        _ => Vec::new(),
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in pairs {
        let value = if v == Value::Nil {
            String::new()
        } else {
            py_str(&v)
        };
        set_env(&mut out, &py_str(&k), value);
    }
    out
}

/// `umask`: `str(umask).lstrip("0")` read as octal.
fn parse_umask(umask: &Value) -> Result<Option<u32>, ExecError> {
    if *umask == Value::Nil {
        return Ok(None);
    }
    let text = py_str(umask);
    let digits = text.trim_start_matches('0');
    if digits.is_empty() {
        return Err(ExecError::CommandExecution(
            "Zero umask is not allowed.".to_owned(),
        ));
    }
    u32::from_str_radix(digits.trim(), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .map(Some)
        .ok_or_else(|| ExecError::CommandExecution(format!("Invalid umask: '{text}'")))
}

/// `_check_avail`: `cmd_blacklist_glob` / `cmd_whitelist_glob` from the options,
/// grains or pillar (`config.get`).
fn command_allowed(ctx: &Context, cmd: &Value) -> bool {
    let line = match cmd {
        Value::Array(items) => items.iter().map(py_str).collect::<Vec<_>>().join(" "),
        other => py_str(other),
    };
    let globs = |name: &str| -> Vec<String> {
        let found = ctx
            .opts
            .get(name)
            .filter(|v| truthy(v))
            .or_else(|| halite_proto::value::get(&ctx.grains, name).filter(|v| truthy(v)))
            .or_else(|| halite_proto::value::get(&ctx.pillar, name).filter(|v| truthy(v)));
        match found {
            Some(Value::Array(items)) => items.iter().map(py_str).collect(),
            Some(other) => vec![py_str(other)],
            None => Vec::new(),
        }
    };
    let fnmatch = halite_target::fnmatch::fnmatch;
    let blacklisted = globs("cmd_blacklist_glob")
        .iter()
        .any(|g| fnmatch(&line, g));
    let whitelist = globs("cmd_whitelist_glob");
    let whitelisted = whitelist.is_empty() || whitelist.iter().any(|g| fnmatch(&line, g));
    !blacklisted && whitelisted
}

/// The argv Popen would run, and its display form.
fn build_program(
    cmd: &Value,
    python_shell: bool,
    shell: Option<&str>,
) -> Result<Program, ExecError> {
    let list_repr = |items: &[String]| {
        py_repr(&Value::Array(
            items.iter().map(|s| Value::from(s.as_str())).collect(),
        ))
    };
    if python_shell {
        let sh = shell.map_or_else(|| "/bin/sh".to_owned(), str::to_owned);
        return Ok(match cmd {
            Value::Array(items) => {
                let words: Vec<String> = items.iter().map(py_str).collect();
                let mut argv = vec![sh, "-c".to_owned()];
                argv.extend(words.iter().cloned());
                Program {
                    display: list_repr(&words),
                    argv,
                }
            }
            other => {
                let line = py_str(other);
                Program {
                    argv: vec![sh, "-c".to_owned(), line.clone()],
                    display: line,
                }
            }
        });
    }
    let words = match cmd {
        Value::Array(items) => items.iter().map(py_str).collect(),
        Value::String(_) if shell.is_none() => vec![py_str(cmd)],
        other => shlex_split(&py_str(other))?,
    };
    if words.is_empty() {
        return Err(ExecError::exception(
            "IndexError",
            "list index out of range",
        ));
    }
    Ok(Program {
        display: list_repr(&words),
        argv: words,
    })
}

/// Python's `shlex.split(s)` (POSIX mode, no comments).
pub(crate) fn shlex_split(s: &str) -> Result<Vec<String>, ExecError> {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Space,
        Word,
        Quote(char),
        Escape(Option<char>),
    }
    let mut out = Vec::new();
    let mut token = String::new();
    let mut quoted = false;
    let mut state = State::Space;
    for c in s.chars() {
        match state {
            State::Space | State::Word => match c {
                ' ' | '\t' | '\r' | '\n' => {
                    if state == State::Word {
                        out.push(std::mem::take(&mut token));
                        quoted = false;
                    }
                    state = State::Space;
                }
                '\\' => state = State::Escape(None),
                '\'' | '"' => {
                    quoted = true;
                    state = State::Quote(c);
                }
                _ => {
                    token.push(c);
                    state = State::Word;
                }
            },
            State::Quote(q) => {
                if c == q {
                    state = State::Word;
                } else if c == '\\' && q == '"' {
                    state = State::Escape(Some(q));
                } else {
                    token.push(c);
                }
            }
            State::Escape(inside) => {
                if let Some(q) = inside {
                    if c != q && c != '\\' {
                        token.push('\\');
                    }
                }
                token.push(c);
                state = inside.map_or(State::Word, State::Quote);
            }
        }
    }
    match state {
        State::Quote(_) => Err(ExecError::exception("ValueError", "No closing quotation")),
        State::Escape(_) => Err(ExecError::exception("ValueError", "No escaped character")),
        State::Word => {
            out.push(token);
            Ok(out)
        }
        State::Space => {
            if quoted {
                out.push(token);
            }
            Ok(out)
        }
    }
}

/// Python's `str(OSError)`: `[Errno N] <strerror>: '<file>'`.
fn os_error_text(err: &std::io::Error, file: &str) -> String {
    match err.raw_os_error() {
        Some(code) => {
            let text = std::io::Error::from_raw_os_error(code).to_string();
            let strerror = text
                .strip_suffix(&format!(" (os error {code})"))
                .unwrap_or(&text)
                .to_owned();
            format!("[Errno {code}] {strerror}: {}", repr_str(file))
        }
        None => err.to_string(),
    }
}

/// A command ready to spawn.
struct Plan {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: String,
    stdin: Option<Vec<u8>>,
    stderr_mode: StderrMode,
    timeout: Option<f64>,
    bg: bool,
    setup: ChildSetup,
}

/// How a spawned command ended.
enum Outcome {
    Exited {
        pid: u32,
        code: i64,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    },
    TimedOut {
        pid: u32,
    },
    Background {
        pid: u32,
    },
}

enum SpawnError {
    Os(std::io::Error),
    Cancelled(i32),
}

fn exit_code(status: ExitStatus) -> i64 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => i64::from(code),
        (None, Some(sig)) => -i64::from(sig),
        (None, None) => -1,
    }
}

/// Reaps the child if it has exited, unregistering it under the same lock.
fn try_reap(job: &JobHandle, child: &mut Child) -> Option<ExitStatus> {
    let mut children = job.children();
    let status = child.try_wait().ok().flatten();
    if status.is_some() {
        children.retain(|p| *p != child.id());
    }
    status
}

/// Kills the child's process group, reaps it and unregisters it.
fn kill_and_reap(job: &JobHandle, child: &mut Child) {
    let mut children = job.children();
    signal_group(child.id(), libc::SIGKILL);
    let _ = child.wait();
    children.retain(|p| *p != child.id());
}

fn spawn_reader(
    mut pipe: impl Read + Send + 'static,
    which: usize,
    tx: mpsc::Sender<(usize, Vec<u8>)>,
) {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        let _ = tx.send((which, buf));
    });
}

/// Spawns the plan and waits for it, its output, the timeout or cancellation.
fn execute(ctx: &Context, plan: &Plan) -> Result<Outcome, SpawnError> {
    if let Some(sig) = ctx.job.cancel_signal() {
        return Err(SpawnError::Cancelled(sig));
    }
    let Some((program, args)) = plan.argv.split_first() else {
        return Err(SpawnError::Os(std::io::Error::from_raw_os_error(
            libc::ENOENT,
        )));
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(&plan.cwd);
    crate::os::prepare_child(&mut command, plan.setup.clone());

    if plan.bg {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = command.spawn().map_err(SpawnError::Os)?;
        let pid = child.id();
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        return Ok(Outcome::Background { pid });
    }

    let (out_reader, out_writer) = std::io::pipe().map_err(SpawnError::Os)?;
    let err_pipe = match plan.stderr_mode {
        StderrMode::Merge => {
            command.stderr(out_writer.try_clone().map_err(SpawnError::Os)?);
            None
        }
        StderrMode::Pipe => {
            let (reader, writer) = std::io::pipe().map_err(SpawnError::Os)?;
            command.stderr(writer);
            Some(reader)
        }
    };
    command.stdout(out_writer);
    command.stdin(if plan.stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::inherit()
    });
    let spawned = command.spawn();
    // Drop the parent's copies of the write ends so the readers see EOF.
    drop(command);
    let mut child = spawned.map_err(SpawnError::Os)?;
    let pid = child.id();
    ctx.job.register_child(pid);

    if let (Some(data), Some(mut stdin)) = (plan.stdin.clone(), child.stdin.take()) {
        std::thread::spawn(move || {
            let _ = stdin.write_all(&data);
        });
    }
    let (tx, rx) = mpsc::channel();
    spawn_reader(out_reader, 0, tx.clone());
    let mut pending = 1;
    if let Some(reader) = err_pipe {
        spawn_reader(reader, 1, tx.clone());
        pending += 1;
    }
    drop(tx);

    let start = Instant::now();
    let deadline = plan.timeout.map(|t| {
        let secs = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1e9) };
        start + Duration::from_secs_f64(secs)
    });
    let mut outputs: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    let mut status = None;
    loop {
        if status.is_none() {
            status = try_reap(&ctx.job, &mut child);
        }
        if status.is_some() && pending == 0 {
            break;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            if status.is_none() {
                kill_and_reap(&ctx.job, &mut child);
            } else {
                signal_group(pid, libc::SIGKILL);
            }
            return Ok(Outcome::TimedOut { pid });
        }
        match rx.recv_timeout(POLL) {
            Ok((which, data)) => {
                outputs[which] = data;
                pending -= 1;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => pending = 0,
        }
    }
    let [stdout, stderr] = outputs;
    Ok(Outcome::Exited {
        pid,
        code: status.map_or(-1, exit_code),
        stdout,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shlex_split_matches_python() {
        let cases: &[(&str, &[&str])] = &[
            ("echo hi", &["echo", "hi"]),
            ("  a   b  ", &["a", "b"]),
            ("a'b c'd", &["ab cd"]),
            ("'' x", &["", "x"]),
            ("\"a\\\"b\\c\"", &["a\"b\\c"]),
            ("a\\ b", &["a b"]),
            ("'a\\b'", &["a\\b"]),
            ("sed -e s/=/:/g", &["sed", "-e", "s/=/:/g"]),
            ("", &[]),
        ];
        for (input, want) in cases {
            let got = shlex_split(input).expect("splits");
            assert_eq!(
                got,
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{input:?}"
            );
        }
        assert_eq!(
            shlex_split("echo \"x")
                .err()
                .map(|e| e.to_string())
                .as_deref(),
            Some("ValueError: No closing quotation")
        );
        assert_eq!(
            shlex_split("x\\").err().map(|e| e.to_string()).as_deref(),
            Some("ValueError: No escaped character")
        );
    }

    #[test]
    fn umask_parsing_follows_salt() {
        assert_eq!(parse_umask(&Value::Nil), Ok(None));
        assert_eq!(parse_umask(&Value::from(22)), Ok(Some(0o22)));
        assert_eq!(parse_umask(&Value::from("077")), Ok(Some(0o77)));
        assert_eq!(
            parse_umask(&Value::from(0)),
            Err(ExecError::CommandExecution(
                "Zero umask is not allowed.".to_owned()
            ))
        );
        assert_eq!(
            parse_umask(&Value::from("abc")),
            Err(ExecError::CommandExecution(
                "Invalid umask: 'abc'".to_owned()
            ))
        );
    }

    #[test]
    fn env_accepts_maps_and_dict_lists() {
        let env = halite_config::yaml::load("[{A: 1}, B, {C: null}]").expect("yaml");
        assert_eq!(
            parse_env(&env),
            vec![
                ("A".to_owned(), "1".to_owned()),
                ("B".to_owned(), String::new()),
                ("C".to_owned(), String::new())
            ]
        );
        assert!(parse_env(&Value::from("x")).is_empty());
        let bad = halite_config::yaml::load("[{A: 1, B: 2}]").expect("yaml");
        assert!(parse_env(&bad).is_empty());
    }

    #[test]
    fn os_errors_read_like_python() {
        let err = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(
            os_error_text(&err, "nope"),
            "[Errno 2] No such file or directory: 'nope'"
        );
    }
}
