//! `halite`: the `salt` command. Parses Salt's flags, publishes through the master's request
//! port, prints returns from the master bus as they arrive with Salt's outputters, and exits
//! with Salt's exit codes.
//!
//! Authentication is `salt`'s: the local user's key by default; a token saved in the
//! `token_file` while it is younger than `token_expire` (unless this user can read the
//! master's `.root_key`); `-a/--auth/--eauth/--external-auth <backend>` with
//! `--username`/`--password` (asked for when missing, the password without echo);
//! `-T/--make-token` to trade them for a token that is saved (0600) and used by later runs
//! ([`halite_client::LocalClient::cli_credentials`]). A backend the client does not offer
//! prints Salt's two lines, then `ERROR: Authentication failed` on stderr, exit 2; what
//! the master refuses prints `Authentication error occurred.` or `Authorization error
//! occurred.` through the outputter, exit 0, as `salt` does.
//!
//! Modes, as `salt.cli.salt.SaltCMD` runs them:
//! - returns printed as they arrive (with `--summary`, Salt's summary block after them);
//! - `-b/--batch` (and `--batch-wait`, `--failhard`): [`halite_client::batch`], with Salt's
//!   "Minion ... did not respond" and "Executing run on [...]" lines and each return
//!   printed with its `retcode` and `jid`, exit status the highest retcode;
//! - `-s/--static`: a quiet batch of 100%: one document of the minions that returned;
//! - `sys.doc`: the docs of every function once, without minion ids;
//! - `-p/--progress`: a bar of returns against the expected minions on stderr (drawn only
//!   when stderr is a terminal), then the summary instead of the returns.
//!
//! Targets: `-N/--nodegroup` and `N@` words in `-C` are resolved from the master config's
//! `nodegroups` before publishing, as Salt's client resolves them.
//!
//! Returners: `--return a,b` is the publish's `ret`; `--return_config NAME` and
//! `--return_kwargs YAML` (parsed as `salt` parses arguments) go in the publish request's
//! `kwargs` as `ret_config` and `ret_kwargs`, which the master copies into the job, as
//! with `salt` (a batch sends only `--return`, as Salt's does). Halite has no `--tag`
//! shorthand: `--return_kwargs '{"tag": "monitoring"}'` says the same and is a command
//! line stock `salt` accepts too.
//!
//! Deviations from Salt: `--progress` draws with indicatif instead of Python's
//! `progressbar` (which stock Salt 3008.3 does not install, so its `--progress` prints
//! nothing); an invalid `--batch` size is one line on stderr (Salt prints a traceback),
//! exit status 1 as Salt's; `--async` with `--batch` is refused (Salt hands such a batch to
//! a master-side batch manager, which a Halite master does not have). A job whose silent
//! minions all answer `saltutil.find_job` with "not running" ends at once instead of
//! after `gather_job_timeout` ([`halite_client::follow`]).

mod event;

use clap::Parser;
use halite_client::batch::{return_retcode, BatchEvent, BatchOptions, BatchSize};
use halite_client::local::JobEvent;
use halite_client::{
    unavailable_message, CliCredentials, CliKind, EauthArgs, LocalClient, PublishRequest,
    TerminalPrompter,
};
use halite_config::{args, MasterConfig};
use halite_output::{OutputArgs, OutputOptions, Outputter};
use halite_proto::value::{self, s};
use halite_proto::Value;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// A command line without a target and function, as `salt` reports it.
const EX_USAGE: u8 = 42;
/// An option `salt`'s parser does not know (optparse's error: `EX_USAGE` of sysexits).
const EX_BAD_OPTION: u8 = 64;
/// `salt`'s usage line, printed before a parser error.
const USAGE: &str = "Usage: halite [options] '<target>' <function> [arguments]";
/// The longest `--batch-wait` honoured (a year).
const MAX_BATCH_WAIT: f64 = 365.0 * 24.0 * 3600.0;

/// halite [options] '<target>' <function> [arguments]
#[derive(Parser, Debug)]
#[command(
    name = "halite",
    version,
    about = "Run a function on minions (the `salt` command)"
)]
struct Cli {
    /// Directory holding the `master` config file.
    #[arg(short = 'c', long = "config-dir", default_value = "/etc/salt")]
    config_dir: PathBuf,
    /// Seconds to wait for returns (default: the `timeout` option, 5).
    #[arg(short = 't', long = "timeout")]
    timeout: Option<i64>,
    /// Target with a Perl-compatible regular expression.
    #[arg(short = 'E', long = "pcre")]
    pcre: bool,
    /// Target a comma- or space-separated list of minion ids.
    #[arg(short = 'L', long = "list")]
    list: bool,
    /// Target by grain (`key:glob`).
    #[arg(short = 'G', long = "grain")]
    grain: bool,
    /// Target by grain with a regular expression (`key:regex`).
    #[arg(short = 'P', long = "grain-pcre")]
    grain_pcre: bool,
    /// Target by pillar (`key:glob`).
    #[arg(short = 'I', long = "pillar")]
    pillar: bool,
    /// Target by pillar with a regular expression.
    #[arg(short = 'J', long = "pillar-pcre")]
    pillar_pcre: bool,
    /// Target by IP address or CIDR subnet.
    #[arg(short = 'S', long = "ipcidr")]
    ipcidr: bool,
    /// Target with a compound expression.
    #[arg(short = 'C', long = "compound")]
    compound: bool,
    /// Target a nodegroup of the master config.
    #[arg(short = 'N', long = "nodegroup")]
    nodegroup: bool,
    /// Delimiter for grain and pillar targets.
    #[arg(long = "delimiter", default_value = ":")]
    delimiter: String,
    /// Publish and print the job id without waiting.
    #[arg(long = "async")]
    async_: bool,
    /// Print the job id before the results.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
    /// Print the job id.
    #[arg(long = "show-jid")]
    show_jid: bool,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    auth: EauthArgs,
    /// Wait for all returns and print them as one document.
    #[arg(short = 's', long = "static")]
    static_: bool,
    /// Run on this many minions at a time: a number, or a percentage (`10%`).
    #[arg(short = 'b', long = "batch", visible_alias = "batch-size")]
    batch: Option<String>,
    /// Seconds a batch slot stays taken after its minion finished.
    #[arg(long = "batch-wait", default_value_t = 0.0, allow_hyphen_values = true)]
    batch_wait: f64,
    /// Stop a batch at the first return with a retcode above 0.
    #[arg(long = "failhard")]
    failhard: bool,
    /// Print a summary of the returns after them.
    #[arg(long = "summary")]
    summary: bool,
    /// Report only the states that changed something or failed (`state_output_diff`).
    #[arg(long = "output-diff")]
    output_diff: bool,
    /// Show a progress bar of returns on stderr, then the summary.
    #[arg(short = 'p', long = "progress")]
    progress: bool,
    /// Returner(s) for the job, comma-separated: the minions also hand the return to
    /// them (`master_bus`, `syslog`, `rawfile_json`).
    #[arg(long = "return", value_name = "RETURNER")]
    return_: Option<String>,
    /// Read the returners' options from `<RETURNER_CONF>.<returner>.<option>` first.
    #[arg(long = "return_config", value_name = "RETURNER_CONF")]
    return_config: Option<String>,
    /// Returner options overriding the configured ones, as YAML or JSON
    /// (`'{"tag": "monitoring"}'`).
    #[arg(long = "return_kwargs", value_name = "RETURNER_KWARGS")]
    return_kwargs: Option<String>,
    /// Separator between argument groups of a multi-function call.
    #[arg(long = "args-separator", default_value = ",")]
    args_separator: String,
    /// Argument names whose values are kept as strings.
    #[arg(long = "no-parse", value_delimiter = ',')]
    no_parse: Vec<String>,
    /// Console log level.
    #[arg(short = 'l', long = "log-level", default_value = "warning")]
    log_level: String,
    /// Target, function and arguments (options may come between them, as with `salt`).
    #[arg(num_args = 0..)]
    rest: Vec<String>,
}

fn main() -> ExitCode {
    // `halite event listen|fire ...` (Halite extension, crates/cli/src/event.rs).
    if let Some(code) = event::dispatch() {
        return code;
    }
    let cli: Cli = match halite_daemon::parse_cli(std::env::args_os(), EX_BAD_OPTION) {
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
    let job = match build_job(&cli) {
        Ok(j) => j,
        Err(Usage::Exit(msg)) => {
            eprint!("{msg}");
            return ExitCode::from(EX_USAGE);
        }
        Err(Usage::Error(msg)) => {
            eprintln!("{USAGE}\n\nhalite: error: {msg}");
            return ExitCode::from(EX_BAD_OPTION);
        }
    };
    let Some(rt) = halite_daemon::cli_runtime() else {
        return ExitCode::from(2);
    };
    ExitCode::from(rt.block_on(run(&cli, &cfg, job)))
}

/// A command line `salt`'s parser refuses.
enum Usage {
    /// `parser.exit(42, msg)`: the message alone on stderr, exit status 42.
    Exit(String),
    /// `parser.error(msg)`: the usage line and `halite: error: msg`, exit status 64.
    Error(String),
}

/// Target type from the exclusive target flags, named in Salt's order in its error.
fn tgt_type(cli: &Cli) -> Result<&'static str, Usage> {
    let flags = [
        (cli.pcre, "pcre", "--pcre"),
        (cli.list, "list", "--list"),
        (cli.grain, "grain", "--grain"),
        (cli.grain_pcre, "grain_pcre", "--grain-pcre"),
        (cli.nodegroup, "nodegroup", "--nodegroup"),
        (cli.compound, "compound", "--compound"),
        (cli.pillar, "pillar", "--pillar"),
        (cli.pillar_pcre, "pillar_pcre", "--pillar-pcre"),
        (cli.ipcidr, "ipcidr", "--ipcidr"),
    ];
    let chosen: Vec<_> = flags.iter().filter(|f| f.0).collect();
    match chosen.as_slice() {
        [] => Ok("glob"),
        [one] => Ok(one.1),
        many => Err(Usage::Error(format!(
            "The options {} are mutually exclusive. Please only choose one of them",
            many.iter().map(|f| f.2).collect::<Vec<_>>().join("/")
        ))),
    }
}

/// `SaltCMDOptionParser._mixin_after_parsed`: target, function(s) and argument groups.
fn build_job(cli: &Cli) -> Result<PublishRequest, Usage> {
    let tgt_type = tgt_type(cli)?;
    let Some(raw_tgt) = cli.rest.first() else {
        return Err(Usage::Exit(
            "\nCannot execute command without defining a target.\n\n".into(),
        ));
    };
    let Some(fun) = cli.rest.get(1) else {
        return Err(Usage::Exit("\nIncomplete options passed.\n\n".into()));
    };
    let tgt = if cli.list {
        let parts: Vec<String> = if raw_tgt.contains(',') {
            raw_tgt
                .replace(' ', "")
                .split(',')
                .map(str::to_owned)
                .collect()
        } else {
            raw_tgt.split_whitespace().map(str::to_owned).collect()
        };
        Value::Array(parts.into_iter().map(s).collect())
    } else {
        s(raw_tgt.clone())
    };
    let rest = &cli.rest[2..];
    let sep = cli.args_separator.as_str();
    let (fun, arg) = if fun.contains(',') {
        let funs: Vec<&str> = fun.split(',').collect();
        let mut groups: Vec<Vec<String>> = vec![vec![]];
        if rest.iter().filter(|a| *a == sep).count() == funs.len() - 1 {
            for a in rest {
                if a == sep {
                    groups.push(vec![]);
                } else if let Some(g) = groups.last_mut() {
                    g.push(a.clone());
                }
            }
        } else {
            for a in rest {
                if a.contains(sep) {
                    let parts: Vec<&str> = a.split(sep).collect();
                    for (i, p) in parts.iter().enumerate() {
                        if !p.is_empty() {
                            if let Some(g) = groups.last_mut() {
                                g.push((*p).to_owned());
                            }
                        }
                        if i != parts.len() - 1 {
                            groups.push(vec![]);
                        }
                    }
                } else if let Some(g) = groups.last_mut() {
                    g.push(a.clone());
                }
            }
            if funs.len() > groups.len() {
                return Err(Usage::Exit(
                    "Cannot execute compound command without defining all arguments.\n".into(),
                ));
            }
            if funs.len() < groups.len() {
                return Err(Usage::Exit(
                    "Cannot execute compound command with more arguments than commands.\n".into(),
                ));
            }
        }
        let args = groups
            .iter()
            .map(|g| Value::Array(args::parse_input(g, &cli.no_parse)))
            .collect();
        (
            Value::Array(funs.into_iter().map(s).collect()),
            Value::Array(args),
        )
    } else {
        (
            s(fun.clone()),
            Value::Array(args::parse_input(rest, &cli.no_parse)),
        )
    };
    let mut kwargs = vec![("delimiter".to_owned(), s(cli.delimiter.clone()))];
    kwargs.retain(|(_, v)| value::str_of(v) != Some(":"));
    // `SaltCMD.run`: each only when given non-empty, `--return_kwargs` through
    // `yamlify_arg`; the master copies both from `kwargs` into the publish.
    if let Some(conf) = cli.return_config.as_deref().filter(|c| !c.is_empty()) {
        kwargs.push(("ret_config".to_owned(), s(conf)));
    }
    if let Some(kw) = cli.return_kwargs.as_deref().filter(|k| !k.is_empty()) {
        kwargs.push(("ret_kwargs".to_owned(), args::yamlify_arg(kw)));
    }
    Ok(PublishRequest {
        tgt,
        tgt_type: tgt_type.to_owned(),
        fun,
        arg,
        ret: cli.return_.clone().unwrap_or_default(),
        kwargs,
    })
}

struct Printer {
    cli_out: Option<String>,
    opts: OutputOptions,
    fun: String,
    quiet: bool,
}

impl Printer {
    /// The master config's output options (`state_output`, `state_verbose`, `color`,
    /// ...) under the command line's, with `filter` mode's `exclude=`/`terse=` from the
    /// job's keyword arguments, as `salt` builds its `opts`.
    fn new(cli: &Cli, cfg: &MasterConfig, job: &PublishRequest) -> Self {
        let mut opts = cli.output.options_from_config(|name| cfg.get(name));
        opts.highstate = opts.highstate.with_job_args(&job.arg);
        if cli.output_diff {
            opts.highstate.state_output_diff = true;
        }
        Self {
            cli_out: cli.output.out.clone(),
            opts,
            fun: value::str_of(&job.fun).unwrap_or("").to_owned(),
            quiet: cli.output.quiet(),
        }
    }

    /// `display_output` for one document.
    fn print(&self, data: &Value, return_out: Option<&str>, retcode: i64, static_: bool) {
        if self.quiet {
            return;
        }
        let name =
            halite_output::outputter_name(self.cli_out.as_deref(), return_out, static_, &self.fun);
        let out = match Outputter::from_name(&name) {
            Ok(o) => o,
            Err(e) => {
                tracing::error!("{e}");
                Outputter::Nested
            }
        };
        let opts = OutputOptions {
            retcode,
            ..self.opts.clone()
        };
        let text = halite_output::render(out, data, &opts);
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(text.as_bytes());
        let _ = stdout.flush();
    }
}

const NO_RETURN: &str = "Minion did not return. [No response]\nThe minions may not have all finished running and any remaining minions will return upon completion. To look up the return data for this job later, run the following command:\n\nsalt-run jobs.lookup_jid ";

const NO_MATCH: &str = "No minions matched the target. No command was sent, no jid was assigned.";

/// `print_cli`: one line on stdout.
fn print_line(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}");
    let _ = stdout.flush();
}

/// `sys.exit(retcode)`: Python keeps the low 8 bits.
fn exit_status(retcode: i64) -> u8 {
    // rem_euclid(256) is in 0..=255.
    retcode.rem_euclid(256) as u8
}

async fn run(cli: &Cli, cfg: &MasterConfig, job: PublishRequest) -> u8 {
    let mut client = LocalClient::new(cfg);
    let printer = Printer::new(cli, cfg, &job);
    let batch = match &cli.batch {
        Some(spec) => match BatchSize::parse(spec) {
            Some(size) => Some(size),
            None => {
                eprintln!(
                    "Invalid batch specification {}: must be an integer or percentage string like '10' or '25%'.",
                    halite_output::str_repr(spec)
                );
                return 1;
            }
        },
        None => None,
    };
    if batch.is_some() && cli.async_ {
        eprintln!(
            "ERROR: --async with --batch needs a master-side batch manager, which Halite does not have"
        );
        return EX_USAGE;
    }
    match client
        .cli_credentials(cfg, &cli.auth, CliKind::Salt, &mut TerminalPrompter)
        .await
    {
        Ok(CliCredentials::Use(creds)) => client.set_credentials(creds),
        Ok(CliCredentials::Unavailable(eauth)) => {
            print!("{}", unavailable_message(&eauth));
            let _ = std::io::stdout().flush();
            eprintln!("ERROR: Authentication failed");
            return 2;
        }
        Err(e) => return report_client_error(&printer, &e),
    }
    let timeout = match cli.timeout {
        Some(t) if t > 0 => t as u64,
        _ => cfg.timeout,
    };
    if batch.is_some() || cli.static_ {
        let opts = BatchOptions {
            // `--static` alone is a batch of everyone.
            size: batch.unwrap_or(BatchSize::Percent(100.0)),
            wait: if cli.batch_wait > 0.0 {
                Duration::from_secs_f64(cli.batch_wait.min(MAX_BATCH_WAIT))
            } else {
                Duration::ZERO
            },
            failhard: cli.failhard,
            timeout: Duration::from_secs(timeout),
            gather_job_timeout: Duration::from_secs(cfg.gather_job_timeout),
        };
        return run_batch(cli, &client, &printer, &job, &opts).await;
    }
    if cli.async_ {
        return match client.publish(&job).await {
            Ok(r) => {
                if r.jid.is_none() {
                    print_line(NO_MATCH);
                }
                println!(
                    "Executed command with job ID: {}",
                    r.jid.unwrap_or_else(|| "0".into())
                );
                0
            }
            Err(e) => report_client_error(&printer, &e),
        };
    }
    // Listen before publishing, so no early return is missed.
    let mut listener = match client.listen_jobs().await {
        Ok(l) => l,
        Err(e) => return report_client_error(&printer, &e),
    };
    let reply = match client.publish(&job).await {
        Ok(r) => r,
        Err(e) => return report_client_error(&printer, &e),
    };
    let sys_doc = printer.fun == "sys.doc";
    let Some(jid) = reply.jid.clone() else {
        print_line(NO_MATCH);
        if sys_doc {
            eprintln!("No minions found to gather docs from");
        } else {
            eprintln!("ERROR: No return received");
        }
        return 2;
    };
    if cli.verbose {
        let msg = format!("Executing job with jid {jid}");
        println!("{msg}\n{}\n", "-".repeat(msg.len()));
    } else if cli.show_jid {
        println!("jid: {jid}");
    }
    let mut expected = reply.minions.clone();
    expected.extend(reply.missing.iter().cloned());
    let mut bar = cli.progress.then(|| progress_bar(expected.len()));
    // What each minion gave, in the order they came: id, return, retcode, and whether it
    // returned at all.
    let mut results: Vec<(String, Value, i64, bool)> = Vec::new();
    let follow = client.follow(
        &mut listener,
        &jid,
        &expected,
        Duration::from_secs(timeout),
        Duration::from_secs(cfg.gather_job_timeout),
        |ev| {
            let (id, ret, out, retcode, returned) = match ev {
                JobEvent::Return(id, load) => {
                    let ret = value::get(&load, "return").cloned().unwrap_or(Value::Nil);
                    let out = value::get_str(&load, "out").map(str::to_owned);
                    (id, ret, out, return_retcode(&load), true)
                }
                JobEvent::NoReturn(id) => (
                    id,
                    s(format!("{NO_RETURN}{jid}")),
                    Some("no_return".to_owned()),
                    1,
                    false,
                ),
            };
            if let Some(bar) = bar.as_mut() {
                if returned {
                    bar.returned();
                }
            } else if !sys_doc {
                printer.print(
                    &Value::Map(vec![(s(id.clone()), ret.clone())]),
                    out.as_deref(),
                    retcode,
                    false,
                );
            }
            results.push((id, ret, retcode, returned));
        },
    );
    if let Err(e) = follow.await {
        return report_client_error(&printer, &e);
    }
    if let Some(bar) = bar {
        // `--progress`: the bar stands for the returns; the summary follows it, and the
        // exit status does not look at retcodes (as in Salt).
        bar.finish();
        print_summary(&results, cli.verbose);
        return 0;
    }
    if sys_doc {
        let docs: Vec<(String, Value)> = results
            .into_iter()
            .filter(|(_, _, _, returned)| *returned)
            .map(|(id, ret, _, _)| (id, ret))
            .collect();
        return print_docs(&printer, &docs);
    }
    if cli.summary && cli.output.out.is_none() {
        print_summary(&results, cli.verbose);
    }
    if results.is_empty() {
        eprintln!("ERROR: No return received");
        return 2;
    }
    if results.iter().any(|(_, _, retcode, _)| *retcode != 0) {
        eprintln!("ERROR: Minions returned with non-zero exit code");
        return 1;
    }
    0
}

/// `SaltCMD._run_batch`: a batch with Salt's lines and each return printed with its
/// `retcode` and `jid`, exit status the highest retcode; or, with `--static`, a quiet batch
/// printed as one document of the minions that returned, exit status 0.
async fn run_batch(
    cli: &Cli,
    client: &LocalClient,
    printer: &Printer,
    job: &PublishRequest,
    opts: &BatchOptions,
) -> u8 {
    let quiet = cli.static_;
    let mut collected: Vec<(Value, Value)> = Vec::new();
    let mut highest = 0i64;
    let ran = client
        .run_batch(job, opts, |event| match event {
            BatchEvent::NoMatch => {
                print_line(NO_MATCH);
                if !quiet {
                    print_line("No minions matched the target.");
                }
            }
            BatchEvent::Down(id) if !quiet => {
                print_line(&format!(
                    "Minion {id} did not respond. No job will be sent."
                ));
            }
            BatchEvent::Start(ids) if !quiet => {
                let ids = Value::Array(ids.into_iter().map(s).collect());
                print_line(&format!(
                    "\nExecuting run on {}\n",
                    halite_output::py_repr(&ids)
                ));
            }
            BatchEvent::Return(id, load, retcode) => {
                highest = highest.max(retcode);
                let ret = value::get(&load, "return").cloned().unwrap_or(Value::Nil);
                if quiet {
                    collected.push((s(id), ret));
                    return;
                }
                // `CLIOutput.on_minion_return`: the return's `retcode` and `jid` beside
                // it, under the minion's id.
                let mut doc: Vec<(Value, Value)> = ["retcode", "jid"]
                    .into_iter()
                    .filter_map(|k| value::get(&load, k).map(|v| (s(k), v.clone())))
                    .collect();
                doc.push((s(id), ret));
                printer.print(&Value::Map(doc), value::get_str(&load, "out"), 0, false);
            }
            BatchEvent::Timeout(id) if quiet => collected.push((s(id), Value::Map(vec![]))),
            BatchEvent::Halted => tracing::error!("Batch run stopped due to failhard"),
            BatchEvent::Down(_) | BatchEvent::Start(_) | BatchEvent::Timeout(_) => {}
        })
        .await;
    let ran = match ran {
        Ok(n) => n,
        Err(e) => return report_client_error(printer, &e),
    };
    if quiet {
        if printer.fun == "sys.doc" {
            return print_docs(printer, &collected_docs(collected));
        }
        printer.print(&Value::Map(collected.clone()), None, 0, true);
        if collected.is_empty() {
            eprintln!("ERROR: No return received");
            return 2;
        }
        return 0;
    }
    if ran == 0 {
        eprintln!("ERROR: No return received");
        return 2;
    }
    exit_status(highest)
}

fn collected_docs(collected: Vec<(Value, Value)>) -> Vec<(String, Value)> {
    collected
        .into_iter()
        .filter_map(|(id, ret)| value::str_of(&id).map(|id| (id.to_owned(), ret)))
        .collect()
}

/// `SaltCMD._print_docs`: each function's doc once, from the first minion that has it,
/// sorted by function; `fun:`, the doc and an empty line, or one document per function
/// with `--out`.
fn print_docs(printer: &Printer, returns: &[(String, Value)]) -> u8 {
    if returns.is_empty() {
        eprintln!("No minions found to gather docs from");
        return 2;
    }
    let mut docs: std::collections::BTreeMap<String, Value> = std::collections::BTreeMap::new();
    for (_, ret) in returns {
        let Value::Map(entries) = ret else {
            continue;
        };
        for (fun, doc) in entries {
            let fun = halite_output::py_str(fun);
            if !docs.contains_key(&fun) && value::truthy(doc) {
                docs.insert(fun, doc.clone());
            }
        }
    }
    for (fun, doc) in docs {
        if printer.cli_out.is_some() {
            printer.print(&Value::Map(vec![(s(fun), doc)]), Some("nested"), 0, false);
        } else {
            print_line(&format!("{fun}:"));
            print_line(&halite_output::py_str(&doc));
            print_line("");
        }
    }
    0
}

/// `SaltCMD._print_returns_summary`.
fn print_summary(results: &[(String, Value, i64, bool)], verbose: bool) {
    for line in summary_lines(results, verbose) {
        print_line(&line);
    }
}

/// The lines of the summary of `results` (id, return, retcode, returned at all).
fn summary_lines(results: &[(String, Value, i64, bool)], verbose: bool) -> Vec<String> {
    let returned: Vec<&(String, Value, i64, bool)> = results.iter().filter(|r| r.3).collect();
    let silent: Vec<&str> = results
        .iter()
        .filter(|r| !r.3)
        .map(|r| r.0.as_str())
        .collect();
    let failed: Vec<&str> = returned
        .iter()
        .filter(|r| r.2 != 0)
        .map(|r| r.0.as_str())
        .collect();
    let rule = "-".repeat(43);
    let mut lines = vec![
        "\n".to_owned(),
        rule.clone(),
        "Summary".to_owned(),
        rule.clone(),
        format!("# of minions targeted: {}", results.len()),
        format!("# of minions returned: {}", returned.len()),
        format!("# of minions that did not return: {}", silent.len()),
        format!("# of minions with errors: {}", failed.len()),
    ];
    if verbose {
        if !silent.is_empty() {
            lines.push(format!("Minions not responding: {}", silent.join(" ")));
        }
        if !failed.is_empty() {
            lines.push(format!("Minions with failures: {}", failed.join(" ")));
        }
    }
    lines.push(rule);
    lines
}

/// `--progress`: returns against expected minions, drawn on stderr when it is a
/// terminal (the `progress` outputter's widgets: percentage, bar, elapsed time, count).
struct Progress {
    bar: indicatif::ProgressBar,
    drawn: bool,
}

fn progress_bar(expected: usize) -> Progress {
    let drawn = std::io::stderr().is_terminal();
    let target = if drawn {
        indicatif::ProgressDrawTarget::stderr()
    } else {
        indicatif::ProgressDrawTarget::hidden()
    };
    let bar = indicatif::ProgressBar::with_draw_target(Some(expected as u64), target);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{percent:>3}% [{wide_bar}] Elapsed Time: {elapsed_precise} Returns: [{pos}/{len}]",
    ) {
        bar.set_style(style.progress_chars("## "));
    }
    bar.tick();
    Progress { bar, drawn }
}

impl Progress {
    fn returned(&mut self) {
        // More returns than expected (a syndic's minions): the bar grows, as Salt's does.
        if self.bar.position() + 1 > self.bar.length().unwrap_or(0) {
            self.bar.set_length(self.bar.position() + 1);
        }
        self.bar.inc(1);
    }

    /// Leaves the full bar on its own line.
    fn finish(self) {
        self.bar.finish();
        if self.drawn {
            eprintln!();
        }
    }
}

/// `SaltCMD._run`'s handling of a client error: the message goes through the outputter
/// (`_output_ret(str(exc), "")`), exit code 0.
fn report_client_error(printer: &Printer, e: &halite_client::Error) -> u8 {
    use halite_client::Error as E;
    match e {
        E::NoMaster => {
            tracing::error!("Unable to connect to the salt master publisher");
            printer.print(&s(e.to_string()), None, 0, false);
            0
        }
        E::Timeout | E::Authentication | E::Authorization => {
            printer.print(&s(e.to_string()), None, 0, false);
            0
        }
        // `SaltCMD._run` prints a `SaltInvocationError` or `EauthAuthenticationError` the
        // same way.
        E::Master { message, .. } => {
            printer.print(&s(message.clone()), None, 0, false);
            0
        }
        other => {
            eprintln!("{other}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_keeps_the_low_eight_bits_as_python_sys_exit() {
        assert_eq!(exit_status(3), 3);
        assert_eq!(exit_status(256), 0);
        assert_eq!(exit_status(-1), 255);
        assert_eq!(exit_status(i64::MAX), 255);
    }

    #[test]
    fn exclusive_target_flags_are_named_in_salts_order() {
        let cli = Cli::try_parse_from(["halite", "-S", "-E", "-N", "-C", "x", "test.ping"])
            .expect("parses");
        let Err(Usage::Error(msg)) = tgt_type(&cli) else {
            panic!("accepted");
        };
        assert_eq!(
            msg,
            "The options --pcre/--nodegroup/--compound/--ipcidr are mutually exclusive. Please only choose one of them"
        );
        let cli = Cli::try_parse_from(["halite", "-N", "g", "test.ping"]).expect("parses");
        assert!(matches!(tgt_type(&cli), Ok("nodegroup")));
    }

    #[test]
    fn returner_flags_become_ret_and_the_ret_config_and_ret_kwargs_kwargs() {
        let cli = Cli::try_parse_from([
            "halite",
            "*",
            "--return",
            "master_bus,syslog",
            "--return_config",
            "alternative",
            "--return_kwargs",
            "{\"tag\": \"monitoring\", \"n\": 1}",
            "cmd.run_all",
            "echo ok; exit 2",
        ])
        .expect("parses");
        let job = build_job(&cli).ok().expect("a job");
        assert_eq!(job.ret, "master_bus,syslog");
        assert_eq!(
            job.kwargs,
            vec![
                ("ret_config".to_owned(), s("alternative")),
                (
                    "ret_kwargs".to_owned(),
                    halite_proto::value::map([("tag", s("monitoring")), ("n", Value::from(1))])
                ),
            ]
        );
        // Empty values are not sent, as `salt` does not send them; a non-dict is kept.
        let cli = Cli::try_parse_from([
            "halite",
            "--return_config=",
            "--return_kwargs",
            "",
            "*",
            "test.ping",
        ])
        .expect("parses");
        let job = build_job(&cli).ok().expect("a job");
        assert!(job.kwargs.is_empty() && job.ret.is_empty());
        let cli = Cli::try_parse_from(["halite", "*", "test.ping", "--return_kwargs", "tag"])
            .expect("parses");
        let job = build_job(&cli).ok().expect("a job");
        assert_eq!(job.kwargs, vec![("ret_kwargs".to_owned(), s("tag"))]);
    }

    #[test]
    fn the_summary_counts_returns_silences_and_failures() {
        let results = vec![
            ("a".to_owned(), Value::Boolean(true), 0, true),
            ("b".to_owned(), s("boom"), 2, true),
            ("c".to_owned(), s(NO_RETURN), 1, false),
            ("d".to_owned(), Value::Boolean(false), -1, true),
        ];
        let rule = "-".repeat(43);
        let counts = [
            "# of minions targeted: 4",
            "# of minions returned: 3",
            "# of minions that did not return: 1",
            "# of minions with errors: 2",
        ];
        let mut want: Vec<String> = vec!["\n".into(), rule.clone(), "Summary".into(), rule.clone()];
        want.extend(counts.iter().map(|l| (*l).to_owned()));
        want.push(rule.clone());
        assert_eq!(summary_lines(&results, false), want);
        want.pop();
        want.push("Minions not responding: c".into());
        want.push("Minions with failures: b d".into());
        want.push(rule);
        assert_eq!(summary_lines(&results, true), want);
    }
}
