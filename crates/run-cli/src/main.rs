//! `halite-run`: the `salt-run` command for a Halite (or stock) master, with the one runner
//! Halite has so far, `state.event`.
//!
//! `halite-run [-c DIR] state.event [tagmatch] [count=N] [quiet=True] [pretty=True]
//! [sock_dir=DIR]` prints what stock `salt-run state.event` prints for the same events
//! (`tag<TAB>json` lines, then the runner's return through the outputter, `None`), and fires
//! the runner's own `salt/run/<jid>/new` and `salt/run/<jid>/ret` events and writes its
//! `cachedir/proc/<jid>` file as Salt's `RunnerClient.low` does.
//!
//! What it does not do: other runners (they get Salt's "'x.y' is not available." line),
//! `node=minion`, eauth, storing the runner job in the job cache, `--async`.
//! Deviations: a bad call prints Python's `TypeError` text without the runner's usage text;
//! SIGINT/SIGTERM end it quietly with exit code 0 (stock prints a traceback).

mod state_event;

use clap::Parser;
use halite_config::MasterConfig;
use halite_journal::{state_event_line, MasterBus, Since, TagFilter};
use halite_output::{OutputArgs, Outputter};
use halite_proto::value::s;
use halite_proto::Value;
use state_event::{bind, EventArgs, ExprMatch};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Usage errors, as `salt-run` reports them.
const EX_USAGE: u8 = 42;

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
    #[command(flatten)]
    output: OutputArgs,
    /// The runner function and its arguments (`key=value` for keyword arguments).
    #[arg(num_args = 0.., allow_hyphen_values = true)]
    rest: Vec<String>,
}

fn main() -> ExitCode {
    let cli: Cli = match halite_daemon::parse_cli(std::env::args_os(), EX_USAGE) {
        Ok(c) => c,
        Err(status) => return status,
    };
    halite_daemon::init_cli_logging(&cli.log_level);
    let cfg = match MasterConfig::load(&cli.config_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    let Some(fun) = cli.rest.first() else {
        eprintln!("Usage: halite-run [options] <function> [arguments]");
        return ExitCode::from(EX_USAGE);
    };
    if fun != "state.event" {
        println!("'{fun}' is not available.");
        return ExitCode::SUCCESS;
    }
    let args = halite_config::args::parse_input(&cli.rest[1..], &[]);
    let (event_args, fun_args) = match bind(&args) {
        Ok(b) => b,
        Err(msg) => {
            print_return(&cli, &s(format!("\nPassed invalid arguments: {msg}\n")));
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
    let Some(rt) = halite_daemon::cli_runtime() else {
        return ExitCode::from(2);
    };
    rt.block_on(run(&cli, &cfg, event_args, fun_args))
}

/// `RunnerClient.low` for `state.event`: `new` event and proc file, the function, `ret`
/// event, the return printed.
async fn run(cli: &Cli, cfg: &MasterConfig, args: EventArgs, fun_args: Vec<Value>) -> ExitCode {
    let master_bus = MasterBus::from_config(cfg);
    let jid = halite_proto::jid::JidGenerator::default().next(chrono::Utc::now());
    let tag = |what: &str| format!("salt/run/{jid}/{what}");
    // `_stamp` is reserved in place: Salt's fire_event adds it to the same dict the `ret`
    // event later reuses, so it comes before `return` and `success`.
    let mut data = vec![
        (s("fun"), s("runner.state.event")),
        (s("jid"), s(jid.clone())),
        (s("user"), s(specific_user())),
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
        _ = terminated() => Err(None),
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
    print_return(cli, &Value::Nil);
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

/// `salt.utils.user.get_specific_user`: the user name, or `sudo_<SUDO_USER>` for root.
fn specific_user() -> String {
    let user = halite_config::current_user().unwrap_or_else(|| "UNKNOWN".to_owned());
    if user == "root" {
        if let Some(sudo) = std::env::var_os("SUDO_USER") {
            return format!("sudo_{}", sudo.to_string_lossy());
        }
    }
    user
}

/// Prints the runner's return as `salt-run` does (`display_output`, nested by default).
fn print_return(cli: &Cli, ret: &Value) {
    let out = match cli.output.out.as_deref().map(Outputter::from_name) {
        None => Outputter::Nested,
        Some(Ok(o)) => o,
        Some(Err(e)) => {
            tracing::error!("{e}");
            Outputter::Nested
        }
    };
    if cli.output.quiet() {
        return;
    }
    let text = halite_output::render(out, ret, &cli.output.options());
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}
