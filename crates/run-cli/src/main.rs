//! `halite-run`: the `salt-run` command for a Halite or a stock master.
//!
//! `halite-run [-c DIR] [-t T] [--async] [--out X] <fun> [args...] [key=value...]` sends
//! the clear `runner` command on the master's request port, authenticated with the local
//! user's key (`cachedir/.<user>_key`, `user` as Salt's `get_specific_user`), exactly as
//! Salt's `RunnerClient.cmd_sync` does, after subscribing to the master bus. The master
//! runs the runner; `halite-run` prints each event of the run as `print_async_event` does
//! (`salt/run/<jid>/ret`'s `return` through the outputter, `nested` by default; a return
//! `{"outputter": X, "data": D}` prints `D` with `X`) and exits as `salt-run` does: with
//! the run's `retcode`, the return's `retcode` or its `data`'s, else 0 (`success: false`
//! alone exits 0, as in Salt 3008.3). Arguments go through Salt's `parse_input`.
//! `-t T` becomes the runner's `timeout` when the runner takes that parameter and it is
//! not given; `--async` prints Salt's notice with the run's tag and does not wait;
//! `-d [prefix]` prints runner docs as `salt-run -d` does, from Halite's runner table.
//!
//! `state.event` runs in-process, as stock `salt-run` runs every runner:
//! `halite-run state.event [tagmatch] [count=N] [quiet=True] [pretty=True] [sock_dir=DIR]`
//! prints what stock prints for the same events and fires the runner's own `salt/run/<jid>/new`
//! and `salt/run/<jid>/ret` events and writes its `cachedir/proc/<jid>` file.
//!
//! External authentication is `salt-run -a`'s: `-a/--auth/--eauth/--external-auth
//! <backend>` with `--username`/`--password` (asked for when missing), `-T/--make-token`,
//! and with `-a` a token saved by an earlier `-T` (unless this user can read the master's
//! `.root_key`, which is then sent instead); the load carries the credentials as
//! `RunnerClient.master_call` does, and the run prints as `salt-run -a` prints it (see
//! `remote`): the return only, the master's refusal (`Authentication failure of type
//! "eauth" occurred for user alice.`) through the outputter, exit 0. A backend the client
//! does not offer prints Salt's two lines and `[ERROR   ] Authentication failed`, exit 0.
//!
//! What it does not do: `--jid`, `--show-jid`, `--out-file`, `--args-stdin`,
//! `--skip-grains`, `state.event node=minion`; docs of runners Halite does not implement.
//!
//! Deviations from stock `salt-run` (which runs every runner in its own process):
//! * A call `Runner.run` refuses prints Salt's message (`'x.y' is not available.`, `The
//!   following keyword arguments are not valid: ...`, `Must specify a function to
//!   run!...`) and exits 254, the `retcode` Salt records for it; stock prints the docs of
//!   `<fun>*` instead when there are any, and exits 0. A name without a module, or keyword
//!   arguments a runner Halite implements does not take, are refused before anything is
//!   sent, so the text is the same against any master; a function Halite does not know is
//!   sent (a stock master has more runners), and when the master starts no run for it
//!   within `gather_job_timeout` (a stock master fires nothing for a function it does not
//!   have) it is reported as not available.
//! * Keyword arguments of a runner Halite does not know are all sent; one the runner does
//!   not take gives Python's `TypeError` text instead of Salt's refusal.
//! * With `--async` nothing waits for the run, so a function Halite does not know is sent
//!   as is: a stock master answers with a jid whether or not it has the function.
//! * `-t` reaches only runners that take a `timeout` parameter and that Halite knows;
//!   runners reading `__opts__["timeout"]` directly use the master's `timeout`.
//! * What a runner prints itself rather than returns (`manage.status` with no minion
//!   matched prints "No minions matched the target...") goes to the master's output, as
//!   with `salt-run -a`.
//! * Without `-a`: errors talking to the master (unreachable, timed out, authentication
//!   refused) print Salt's text on stderr and exit 1, as `salt-run` does for a
//!   `SaltClientError`; an error the master answers prints its message and exits 254.
//! * SIGINT/SIGTERM end it quietly with exit status 0 (stock prints a traceback); without
//!   `-a`, a run whose `ret` never arrives waits until then. The run goes on in the master.
//! * `state.event`: a bad call prints Python's `TypeError` text without the usage text.
//!
//! Invariant: replies and events are untrusted input; nothing in them makes it panic.

mod print;
mod remote;
mod state_event;

use clap::Parser;
use halite_client::EauthArgs;
use halite_config::MasterConfig;
use halite_output::OutputArgs;
use halite_proto::value::s;
use halite_runner::Registry;
use print::Printer;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Usage errors, as `salt-run` reports them (`EX_USAGE`).
const EX_USAGE: u8 = 64;

/// halite-run [options] <function> [arguments]
#[derive(Parser, Debug)]
#[command(
    name = "halite-run",
    version,
    about = "Run a master-side runner (the `salt-run` command)",
    mut_arg("out", |a| a.help("Outputter for the runner's return")),
    mut_arg("out_indent", |a| a.help(
        "Indentation for json and yaml returns; negative means compact"
    ))
)]
struct Cli {
    /// Directory holding the `master` config file.
    #[arg(short = 'c', long = "config-dir", default_value = "/etc/salt")]
    config_dir: PathBuf,
    /// Console log level.
    #[arg(short = 'l', long = "log-level", default_value = "warning")]
    log_level: String,
    /// Seconds the runner waits for minions, for runners that take a `timeout`.
    #[arg(short = 't', long = "timeout", allow_hyphen_values = true)]
    timeout: Option<i64>,
    /// Start the runner and return at once, without waiting for its return.
    #[arg(long = "async")]
    async_: bool,
    /// Print the documentation of all runners, or of one module or function.
    #[arg(short = 'd', long = "doc", visible_alias = "documentation")]
    doc: bool,
    /// Do not display the results of the run.
    #[arg(long = "quiet")]
    quiet: bool,
    /// Argument names whose `key=value` values are kept as strings.
    #[arg(long = "no-parse", value_delimiter = ',')]
    no_parse: Vec<String>,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    auth: EauthArgs,
    /// The runner function and its arguments (`key=value` for keyword arguments); options
    /// may come between them, as with `salt-run`.
    #[arg(num_args = 0..)]
    rest: Vec<String>,
}

fn main() -> ExitCode {
    let cli: Cli = match halite_daemon::parse_cli(std::env::args_os(), EX_USAGE) {
        Ok(c) => c,
        Err(status) => return status,
    };
    halite_daemon::init_cli_logging(&cli.log_level);
    let printer = Printer::new(&cli.output, cli.quiet);
    let fun = cli.rest.first().map(String::as_str).unwrap_or("");
    if cli.doc {
        if cli.rest.len() > 1 {
            eprintln!(
                "Usage: halite-run [options] <function> [arguments]\n\n\
                 halite-run: error: You can only get documentation for one method at one time"
            );
            return ExitCode::from(EX_USAGE);
        }
        // `print_docs` uses `display_output` directly: `--quiet` does not apply.
        print_docs(&Printer::new(&cli.output, false), &Registry::builtin(), fun);
        return ExitCode::SUCCESS;
    }
    let cfg = match MasterConfig::load(&cli.config_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    let args = cli.rest.get(1..).unwrap_or_default();
    let Some(rt) = halite_daemon::cli_runtime() else {
        return ExitCode::from(2);
    };
    if fun == "state.event" {
        return state_event::main(&rt, &cfg, &printer, args);
    }
    let registry = Registry::builtin();
    let call = remote::Call {
        fun,
        args: halite_config::args::parse_input(args, &cli.no_parse),
        timeout: cli.timeout,
        asynchronous: cli.async_,
        warnings_shown: matches!(
            halite_daemon::salt_level(&cli.log_level),
            "trace" | "debug" | "info" | "warn"
        ),
        errors_shown: !matches!(
            cli.log_level.to_ascii_lowercase().as_str(),
            "critical" | "quiet"
        ),
        auth: &cli.auth,
    };
    ExitCode::from(rt.block_on(remote::run(&cfg, &registry, &printer, call)))
}

/// `Runner.print_docs`: for each runner matching `prefix` (all when empty), its name and a
/// colon through the `text` outputter, then its docstring as is.
fn print_docs(printer: &Printer, registry: &Registry, prefix: &str) {
    for (fun, doc) in registry.doc(Some(prefix)) {
        printer.print(&s(format!("{fun}:")), Some("text"));
        if !printer.is_quiet() {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{doc}").and_then(|()| out.flush());
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn terminated() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}
