//! `halite-call`: the `salt-call` command. Runs one execution function on this host and
//! prints `{"local": return}` with Salt's outputters; without `--local` it first signs in to
//! the master (fetching the pillar, as `salt-call` does) and afterwards sends the return to
//! the master as a minion-initiated job (`_return` with jid `req`).
//!
//! Deviation: `salt-call` prints argument and command errors (`Passed invalid arguments`,
//! `Error running ...`) to stderr instead of the return; `halite-call` prints the return
//! text the minion would send for them. Exit codes are Salt's: 1 for a non-zero retcode
//! (or the retcode itself with `--retcode-passthrough`), 2 for an unaccepted key, 255 for
//! a missing function.

use clap::Parser;
use halite_config::MinionConfig;
use halite_exec::{Context, JobHandle, JobReturn, NoJobs, Registry};
use halite_minion::auth::Auth;
use halite_minion::channel::Channel;
use halite_minion::keys::MinionKeys;
use halite_minion::settings::Settings;
use halite_minion::shutdown::Shutdown;
use halite_minion::transport::{resolve_master, ReqSocket};
use halite_output::{OutputArgs, OutputOptions, Outputter};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// `EX_CONFIG`, for a configuration that does not load.
const EX_CONFIG: u8 = 78;
/// optparse's exit status for usage errors, which `salt-call` uses.
const EX_USAGE: u8 = 2;

/// halite-call [options] <function> [arguments]
#[derive(Parser, Debug)]
#[command(
    name = "halite-call",
    version,
    about = "Run a function on this minion (the `salt-call` command)"
)]
struct Cli {
    /// Directory holding the `minion` config file and `minion.d/`.
    #[arg(short = 'c', long = "config-dir", default_value = "/etc/salt")]
    config_dir: PathBuf,
    /// Run without a master.
    #[arg(long = "local")]
    local: bool,
    /// The minion id to use (overrides `id`).
    #[arg(long = "id")]
    id: Option<String>,
    /// Print the grains and exit.
    #[arg(short = 'g', long = "grains")]
    grains: bool,
    #[command(flatten)]
    output: OutputArgs,
    /// Report only the states that changed something or failed (`state_output_diff`).
    #[arg(long = "output-diff")]
    output_diff: bool,
    /// Exit with the function's retcode instead of 0/1.
    #[arg(long = "retcode-passthrough")]
    retcode_passthrough: bool,
    /// Console log level (overrides `log_level`).
    #[arg(short = 'l', long = "log-level")]
    log_level: Option<String>,
    /// The function and its arguments (options may come between them, as with `salt-call`).
    #[arg(num_args = 0.., allow_negative_numbers = true)]
    rest: Vec<String>,
}

/// How the return is printed.
struct Printer {
    output: OutputArgs,
    opts: OutputOptions,
}

impl Printer {
    /// The minion config's output options (`state_output`, `state_verbose`, `color`,
    /// ...) under the command line's, as `salt-call` builds its `opts`.
    fn new(cli: &Cli, cfg: &MinionConfig) -> Printer {
        let mut opts = cli.output.options_from_config(|name| cfg.get(name));
        if cli.output_diff {
            opts.highstate.state_output_diff = true;
        }
        Printer {
            output: cli.output.clone(),
            opts,
        }
    }

    /// `salt.output.display_output({"local": data}, out, opts, _retcode=retcode)`.
    fn print(&self, data: Value, return_out: Option<&str>, retcode: i64, fun: &str) {
        if self.output.quiet() {
            return;
        }
        let name =
            halite_output::outputter_name(self.output.out.as_deref(), return_out, false, fun);
        let out = Outputter::from_name(&name).unwrap_or_else(|e| {
            tracing::error!("{e}");
            Outputter::Nested
        });
        let text = halite_output::render(
            out,
            &map([("local", data)]),
            &OutputOptions {
                retcode,
                ..self.opts.clone()
            },
        );
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(text.as_bytes());
        let _ = stdout.flush();
    }
}

/// The load `ZeroMQCaller.return_pub` sends: `{cmd, id, jid: "req", return, retcode,
/// [out], fun, fun_args}` with `fun_args` the command-line words.
fn return_load(id: &str, fun: &str, words: &[String], ret: &JobReturn) -> Value {
    let mut load = vec![
        (s("cmd"), s("_return")),
        (s("id"), s(id)),
        (s("jid"), s("req")),
        (s("return"), ret.ret.clone()),
        (s("retcode"), Value::from(ret.retcode)),
    ];
    if let Some(o) = &ret.out {
        load.push((s("out"), s(o.as_str())));
    }
    load.push((s("fun"), s(fun)));
    load.push((
        s("fun_args"),
        Value::Array(words.iter().map(|w| s(w.as_str())).collect()),
    ));
    Value::Map(load)
}

/// A signed-in channel to the master, with the pillar it sent.
struct Remote {
    channel: Arc<Channel>,
    pillar: Value,
}

/// `SMinion`'s connection: sign in (giving up on a pending key) and fetch the pillar.
fn connect(cfg: &MinionConfig, grains: &Value) -> Result<Remote, halite_minion::Error> {
    let settings = Arc::new(Settings::from_config(cfg)?);
    halite_minion::prepare_dirs(cfg)?;
    let keys = Arc::new(MinionKeys::load_or_create(&cfg.pki_dir, cfg.keysize)?);
    let stop = Arc::new(Shutdown::new());
    let master = resolve_master(&settings, &stop).ok_or(halite_minion::Error::Stopped)?;
    let ctx = zmq::Context::new();
    let uri = master.uri(master.ret_port);
    let auth = Arc::new(Auth::new(
        settings.clone(),
        keys,
        &ctx,
        uri.clone(),
        grains,
        true,
        stop,
    ));
    let channel = Channel::new(auth, ReqSocket::new(&ctx, uri, &settings));
    let load = map([
        ("id", s(settings.id.as_str())),
        ("grains", grains.clone()),
        ("saltenv", settings.saltenv.clone()),
        ("pillarenv", settings.pillarenv.clone()),
        ("pillar_override", Value::Map(Vec::new())),
        ("extra_minion_data", Value::Map(Vec::new())),
        ("ver", s("2")),
        ("cmd", s("_pillar")),
    ]);
    let pillar = channel.pillar(&load, settings.request_timeout, settings.request_tries)?;
    Ok(Remote {
        channel: Arc::new(channel),
        pillar,
    })
}

fn main() -> ExitCode {
    let cli: Cli = match halite_daemon::parse_cli(std::env::args_os(), EX_USAGE) {
        Ok(c) => c,
        Err(status) => return status,
    };
    let mut cfg = match MinionConfig::load(&cli.config_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("halite-call: {e}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    halite_daemon::init_cli_logging(cli.log_level.as_deref().unwrap_or(cfg.log_level.as_str()));
    if let Some(id) = &cli.id {
        cfg.id = id.clone();
        value::set(&mut cfg.raw, "id", s(id.as_str()));
    }
    // What `salt-call` puts in `__opts__`: functions look at them (`event.fire_master`
    // asks the master directly from salt-call, and not at all with --local).
    value::set(&mut cfg.raw, "__cli", s("salt-call"));
    if cli.local {
        value::set(&mut cfg.raw, "local", Value::Boolean(true));
    }
    let printer = Printer::new(&cli, &cfg);
    let grains = halite_exec::core_grains(&cfg);
    if cli.grains {
        printer.print(grains, Some("nested"), 0, "grains.items");
        return ExitCode::SUCCESS;
    }
    let Some((fun, words)) = cli.rest.split_first() else {
        eprintln!("halite-call: error: Requires function, --grains or --doc");
        return ExitCode::from(EX_USAGE);
    };

    let remote = if cli.local {
        None
    } else {
        match connect(&cfg, &grains) {
            Ok(r) => Some(r),
            Err(halite_minion::Error::Pending) => {
                println!("Minion failed to authenticate with the master, has the minion key been accepted?");
                return ExitCode::from(2);
            }
            // The CRITICAL line is logged by the sign-in; salt-call exits 42 as the minion.
            Err(halite_minion::Error::MasterFinger) => {
                return ExitCode::from(halite_minion::EX_MASTER_FINGER);
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    };
    // Functions Halite lacks run in Salt's own loader on this host (`halite-fallback`),
    // asking the master through this call's channel; with --local there is no channel,
    // so only native functions run.
    let registry = match (&remote, halite_fallback::Options::from_config(&cfg)) {
        (Some(_), Ok(fallback)) if fallback.enabled => Registry::builtin().with_fallback(
            std::sync::Arc::new(halite_fallback::Executor::new(fallback)),
        ),
        (_, Err(e)) => {
            eprintln!("halite-call: {e}");
            return ExitCode::from(EX_CONFIG);
        }
        _ => Registry::builtin(),
    };
    let jid = halite_proto::jid::format_jid(chrono::Utc::now());
    let pillar = remote
        .as_ref()
        .map(|r| r.pillar.clone())
        .unwrap_or(Value::Map(Vec::new()));
    let ctx = Context {
        id: cfg.id.clone(),
        grains: Arc::new(grains),
        pillar: Arc::new(pillar),
        jid: Some(jid.clone()),
        pub_data: Some(map([
            ("fun", s(fun.as_str())),
            ("pid", Value::from(std::process::id())),
            ("jid", s(jid.as_str())),
            ("tgt", s("salt-call")),
        ])),
        jobs: Arc::new(NoJobs),
        job: JobHandle::new(),
        master: remote
            .as_ref()
            .map(|r| r.channel.clone() as Arc<dyn halite_exec::MasterChannel>),
        opts: Arc::new(cfg),
    };

    // With the fallback, Salt's loader decides what exists (and answers as Salt does).
    if !registry.has(fun) && !registry.has_fallback() {
        let missing = format!("'{fun}' is not available.");
        let docs = registry.execute(
            &ctx,
            &s("sys.doc"),
            &Value::Array(vec![s(format!("{fun}*"))]),
        );
        if let Value::Map(mut entries) = docs.ret {
            if !entries.is_empty() {
                entries.push((s(fun.as_str()), s(missing)));
                printer.print(Value::Map(entries), Some("nested"), 0, fun);
                return ExitCode::SUCCESS;
            }
        }
        eprintln!("{missing}");
        return ExitCode::from(255);
    }

    let args = Value::Array(halite_config::args::parse_input(words, &[]));
    let ret = registry.execute(&ctx, &s(fun.as_str()), &args);
    if let Some(remote) = &remote {
        let load = return_load(&ctx.id, fun, words, &ret);
        let settings = remote.channel.auth().settings();
        if let Err(e) = remote
            .channel
            .send(&load, settings.request_timeout, settings.request_tries)
        {
            tracing::debug!("Cannot return the job to the master: {e}");
        }
    }
    printer.print(
        ret.ret.clone(),
        Some(ret.out.as_deref().unwrap_or("nested")),
        ret.retcode,
        fun,
    );
    if cli.retcode_passthrough {
        ExitCode::from(u8::try_from(ret.retcode.rem_euclid(256)).unwrap_or(1))
    } else if ret.retcode != 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_load_is_a_minion_initiated_job_with_the_command_line_words() {
        let ret = JobReturn {
            ret: Value::Boolean(true),
            retcode: 0,
            success: true,
            out: None,
            multi: None,
        };
        let load = return_load("m1", "test.arg", &["1".into(), "k=v".into()], &ret);
        let keys: Vec<_> = load
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| value::str_of(k).unwrap())
            .collect();
        assert_eq!(
            keys,
            ["cmd", "id", "jid", "return", "retcode", "fun", "fun_args"]
        );
        assert_eq!(value::get_str(&load, "jid"), Some("req"));
        assert_eq!(
            value::get(&load, "fun_args"),
            Some(&Value::Array(vec![s("1"), s("k=v")]))
        );
    }

    #[test]
    fn options_may_follow_the_function_as_with_salt_call() {
        let cli = Cli::try_parse_from([
            "halite-call",
            "test.arg",
            "-1",
            "k=v",
            "--local",
            "--out",
            "json",
        ])
        .unwrap();
        assert!(cli.local);
        assert_eq!(cli.output.out.as_deref(), Some("json"));
        assert_eq!(cli.rest, ["test.arg", "-1", "k=v"]);
        assert!(Cli::try_parse_from(["halite-call", "test.arg", "-x"]).is_err());
    }
}
