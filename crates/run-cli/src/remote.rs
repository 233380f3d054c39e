//! Runners run by the master: the clear `runner` command on the request port, then the
//! run's events on the master bus (`RunnerClient.cmd_sync` / `cmd_async`).
//!
//! With `-a` (`salt-run -a`, `Runner.run`'s eauth branch) the credentials are a saved
//! token, the root key, or eauth ([`LocalClient::cli_credentials`]) and the run is shown as
//! `cmd_sync` returns it: only the return (`{"data", "outputter"}` unwrapped), the exit
//! status from it alone, the master's refusal printed through the outputter with exit 0,
//! and `RunnerClient job '<jid>' timed out` after `rest_timeout` (300 s) without a return.

use crate::print::{eauth_shown, exit_status, Printer};
use halite_client::{
    unavailable_message, CliCredentials, CliKind, EauthArgs, LocalClient, RunEvent, RunnerJob,
    RunnerRequest, TerminalPrompter,
};
use halite_config::MasterConfig;
use halite_proto::value::{self, s};
use halite_proto::Value;
use halite_runner::Registry;
use std::time::Duration;

/// The exit status of a call `Runner.run` refuses (no function, a missing function,
/// invalid keyword arguments): the `retcode` Salt records for it in the run's `ret` event.
pub const REFUSED: u8 = 254;

/// What the command line asks of the master.
pub struct Call<'a> {
    /// The runner function.
    pub fun: &'a str,
    /// Arguments after `parse_input`.
    pub args: Vec<Value>,
    /// `-t`: the runner's `timeout` when it takes one.
    pub timeout: Option<i64>,
    /// `--async`: print the tag and do not wait.
    pub asynchronous: bool,
    /// Whether `-l` lets a warning through (the `--async` notice is one).
    pub warnings_shown: bool,
    /// Whether `-l` lets an error through.
    pub errors_shown: bool,
    /// `-a`, `-T`, `--username`, `--password`.
    pub auth: &'a EauthArgs,
}

/// Salt's default `rest_timeout`: how long `salt-run -a` waits for a run's return.
const DEFAULT_REST_TIMEOUT: u64 = 300;

/// Why a call is refused before anything is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No function, or a name that cannot be a runner function.
    NotAvailable(String),
    /// Keyword arguments the function does not take.
    InvalidKwargs(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotAvailable(m) | Refusal::InvalidKwargs(m) => f.write_str(m),
        }
    }
}

/// `verify_fun` and the keyword check of `load_args_and_kwargs`, as far as they can be
/// decided here: an empty name, a name without a module (`x` is never `module.function`),
/// and keyword arguments that a runner Halite knows does not take (one taking `**kwargs`
/// takes them all). A function Halite does not know is left to the master (a stock master
/// has more runners).
pub fn check(registry: &Registry, req: &RunnerRequest) -> Result<(), Refusal> {
    if req.fun.is_empty() {
        return Err(Refusal::NotAvailable(
            "Must specify a function to run!\nex: manage.up".to_owned(),
        ));
    }
    if !req.fun.contains('.') {
        return Err(Refusal::NotAvailable(not_available(&req.fun)));
    }
    let Some(params) = registry.params(&req.fun) else {
        return Ok(());
    };
    if registry.takes_kwargs(&req.fun) {
        return Ok(());
    }
    let invalid: Vec<String> = req
        .kwarg
        .iter()
        .filter(|(k, _)| !value::str_of(k).is_some_and(|k| params.contains(&k)))
        .map(|(k, v)| format!("{}={}", halite_output::py_str(k), halite_output::py_str(v)))
        .collect();
    if invalid.is_empty() {
        Ok(())
    } else {
        Err(Refusal::InvalidKwargs(format!(
            "The following keyword arguments are not valid: {}",
            invalid.join(", ")
        )))
    }
}

/// Salt's `missing_fun_string` for a function nobody offers.
pub fn not_available(fun: &str) -> String {
    format!("'{fun}' is not available.")
}

/// `-t T` as the runner's `timeout`: only for a runner Halite knows to take a `timeout`
/// parameter, when neither a keyword nor a positional argument already gives it.
pub fn apply_timeout(registry: &Registry, req: &mut RunnerRequest, timeout: Option<i64>) {
    let Some(t) = timeout else { return };
    let Some(params) = registry.params(&req.fun) else {
        return;
    };
    let Some(pos) = params.iter().position(|p| *p == "timeout") else {
        return;
    };
    if pos >= req.arg.len() && !req.has_kwarg("timeout") {
        req.set_kwarg(s("timeout"), Value::from(t));
    }
}

/// The `--async` notice `Runner.run` logs at warning level.
pub fn async_notice(tag: &str) -> String {
    format!(
        "[WARNING ] Running in asynchronous mode. Results of this execution may be collected \
         by attaching to the master event bus or by examining the master job cache, if \
         configured. This execution is running under tag {tag}"
    )
}

/// Sends the call and, unless `--async`, follows the run to its `ret` event and prints it.
pub async fn run(cfg: &MasterConfig, registry: &Registry, printer: &Printer, call: Call<'_>) -> u8 {
    let mut req = RunnerRequest::bind(call.fun, &call.args);
    if let Err(refusal) = check(registry, &req) {
        printer.print(&s(refusal.to_string()), Some("nested"));
        return REFUSED;
    }
    apply_timeout(registry, &mut req, call.timeout);
    let mut client = LocalClient::new(cfg);
    let eauth = !call.auth.eauth.is_empty();
    match client
        .cli_credentials(cfg, call.auth, CliKind::SaltRun, &mut TerminalPrompter)
        .await
    {
        Ok(CliCredentials::Use(creds)) => client.set_credentials(creds),
        Ok(CliCredentials::Unavailable(name)) => {
            print!("{}", unavailable_message(&name));
            let _ = std::io::Write::flush(&mut std::io::stdout());
            if call.errors_shown {
                eprintln!("[ERROR   ] Authentication failed");
            }
            return 0;
        }
        Err(e) => return report(printer, &e, eauth),
    }
    if call.asynchronous {
        return match client.runner(&req).await {
            Ok(job) => {
                if call.warnings_shown {
                    eprintln!("{}", async_notice(&job.tag));
                }
                0
            }
            Err(e) => report(printer, &e, eauth),
        };
    }
    // Subscribe first, so the run's first events cannot be missed.
    let mut listener = match client.listen_runs().await {
        Ok(l) => l,
        Err(e) => return report(printer, &e, eauth),
    };
    let job: RunnerJob = match client.runner(&req).await {
        Ok(j) => j,
        Err(e) => return report(printer, &e, eauth),
    };
    tracing::debug!(jid = %job.jid, "Runner call accepted");
    // A runner Halite does not know may still be the master's; a master that has no such
    // function fires nothing (stock Salt's runner process dies before its `new` event),
    // so give it `gather_job_timeout` to start the run.
    let mut start_deadline = (!registry.contains(&req.fun))
        .then(|| tokio::time::Instant::now() + Duration::from_secs(cfg.gather_job_timeout));
    // `cmd_sync` gives up on the return after `rest_timeout`.
    let rest_deadline = eauth.then(|| {
        let secs = cfg
            .get("rest_timeout")
            .and_then(|v| match v {
                Value::Integer(i) => i.as_u64(),
                _ => None,
            })
            .unwrap_or(DEFAULT_REST_TIMEOUT);
        tokio::time::Instant::now() + Duration::from_secs(secs)
    });
    loop {
        let event = tokio::select! {
            ev = client.next_run_event(&mut listener, &job.jid) => ev,
            () = sleep_until(start_deadline) => {
                printer.print(&s(not_available(&req.fun)), Some("nested"));
                return REFUSED;
            }
            () = sleep_until(rest_deadline) => {
                let message = format!("RunnerClient job '{}' timed out", job.jid);
                printer.print(&s(message), Some("nested"));
                return 0;
            }
            () = crate::terminated() => return 0,
        };
        match event {
            RunEvent::New(_) => start_deadline = None,
            RunEvent::Other { suffix, data } => {
                start_deadline = None;
                if !eauth {
                    printer.print_event(&suffix, &data);
                }
            }
            RunEvent::Ret(data) => {
                let exit = if eauth {
                    let shown = eauth_shown(&data);
                    printer.print(&shown.data, shown.outputter.as_deref());
                    exit_status(&shown.data)
                } else {
                    printer.print_event("ret", &data);
                    exit_status(&data)
                };
                if let Some(m) = exit.message {
                    eprintln!("{m}");
                }
                return exit.code;
            }
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Reports a failed call. With `-a` (`eauth`), the master's refusal or error (or a
/// request timeout) prints its message through the outputter and exits 0, as
/// `salt-run -a` does. With the user's
/// key: a refused key or operation prints `Authentication error occurred.` or
/// `Authorization error occurred.` on stderr and exits 1, as `salt-run` reports a
/// `SaltClientError`; any other error of the master's prints as the run's return would
/// (on stdout, exit [`REFUSED`]). Anything else (no master, a timeout) is a
/// `SaltClientError`: the message on stderr, exit 1.
fn report(printer: &Printer, e: &halite_client::Error, eauth: bool) -> u8 {
    use halite_client::Error as E;
    match e {
        E::Master { message, .. } if eauth => {
            printer.print(&s(message.clone()), Some("nested"));
            0
        }
        E::Timeout if eauth => {
            printer.print(&s(e.to_string()), Some("nested"));
            0
        }
        e if e.is_authentication() => {
            eprintln!("{}", E::Authentication);
            1
        }
        e if e.is_authorization() => {
            eprintln!("{}", E::Authorization);
            1
        }
        E::Master { message, .. } => {
            printer.print(&s(message.clone()), Some("nested"));
            REFUSED
        }
        other => {
            eprintln!("{other}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::map;

    fn req(fun: &str, words: &[&str]) -> RunnerRequest {
        let words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
        RunnerRequest::bind(fun, &halite_config::args::parse_input(&words, &[]))
    }

    #[test]
    fn calls_without_a_module_function_name_are_refused_with_salts_text() {
        let reg = Registry::builtin();
        assert_eq!(
            check(&reg, &req("", &[])),
            Err(Refusal::NotAvailable(
                "Must specify a function to run!\nex: manage.up".into()
            ))
        );
        assert_eq!(
            check(&reg, &req("manage", &[])).unwrap_err().to_string(),
            "'manage' is not available."
        );
    }

    #[test]
    fn unknown_functions_are_left_to_the_master() {
        let reg = Registry::builtin();
        assert!(!reg.contains("fileserver.update"));
        assert_eq!(
            check(&reg, &req("fileserver.update", &["backend=git"])),
            Ok(())
        );
    }

    #[test]
    fn keywords_a_known_runner_does_not_take_are_refused_with_salts_text() {
        let reg = Registry::builtin();
        assert_eq!(
            check(&reg, &req("manage.up", &["tgt=web*", "timeout=3"])),
            Ok(())
        );
        assert_eq!(
            check(&reg, &req("manage.up", &["foo=bar", "tgt=x", "n=[1, 'a']"])),
            Err(Refusal::InvalidKwargs(
                "The following keyword arguments are not valid: foo=bar, n=[1, 'a']".into()
            ))
        );
    }

    #[test]
    fn a_runner_taking_kwargs_takes_every_keyword() {
        let reg = Registry::builtin();
        assert_eq!(
            check(&reg, &req("test.arg", &["1", "a=2", "__b=3"])),
            Ok(())
        );
    }

    #[test]
    fn timeout_flag_becomes_the_runners_timeout_only_where_it_fits() {
        let reg = Registry::builtin();
        let mut r = req("manage.up", &["tgt=web*"]);
        apply_timeout(&reg, &mut r, Some(30));
        assert_eq!(
            Value::Map(r.kwarg.clone()),
            map([("tgt", s("web*")), ("timeout", Value::from(30))])
        );
        // Given by the user: kept.
        let mut r = req("manage.up", &["timeout=3"]);
        apply_timeout(&reg, &mut r, Some(30));
        assert_eq!(Value::Map(r.kwarg), map([("timeout", Value::from(3))]));
        // No -t: nothing added.
        let mut r = req("manage.up", &[]);
        apply_timeout(&reg, &mut r, None);
        assert!(r.kwarg.is_empty());
        // A runner without a timeout parameter, and one Halite does not know.
        for fun in ["jobs.list_jobs", "fileserver.update"] {
            let mut r = req(fun, &[]);
            apply_timeout(&reg, &mut r, Some(30));
            assert!(r.kwarg.is_empty(), "{fun}");
        }
        // Given positionally: manage.status(output, tgt, tgt_type, timeout, ...).
        let params = reg.params("manage.status").unwrap();
        let pos = params.iter().position(|p| *p == "timeout").unwrap();
        let words: Vec<&str> = vec!["1"; pos + 1];
        let mut r = req("manage.status", &words);
        apply_timeout(&reg, &mut r, Some(30));
        assert!(r.kwarg.is_empty());
        let mut r = req("manage.status", &words[..pos]);
        apply_timeout(&reg, &mut r, Some(30));
        assert_eq!(Value::Map(r.kwarg), map([("timeout", Value::from(30))]));
    }

    #[test]
    fn async_notice_is_salts_warning_line() {
        assert_eq!(
            async_notice("salt/run/20240101120000123456"),
            "[WARNING ] Running in asynchronous mode. Results of this execution may be \
             collected by attaching to the master event bus or by examining the master job \
             cache, if configured. This execution is running under tag \
             salt/run/20240101120000123456"
        );
    }
}
