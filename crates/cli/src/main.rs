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

mod event;

use clap::Parser;
use halite_client::local::JobEvent;
use halite_client::{
    unavailable_message, CliCredentials, CliKind, EauthArgs, LocalClient, PublishRequest,
    TerminalPrompter,
};
use halite_config::{args, MasterConfig};
use halite_output::{OutputArgs, OutputOptions, Outputter};
use halite_proto::value::{self, s};
use halite_proto::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// A command line without a target and function, as `salt` reports it.
const EX_USAGE: u8 = 42;
/// An option `salt`'s parser does not know (optparse's error: `EX_USAGE` of sysexits).
const EX_BAD_OPTION: u8 = 64;

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
    /// Returner(s) for the job, comma-separated.
    #[arg(long = "return")]
    return_: Option<String>,
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
        Err(msg) => {
            eprint!("{msg}");
            return ExitCode::from(EX_USAGE);
        }
    };
    let Some(rt) = halite_daemon::cli_runtime() else {
        return ExitCode::from(2);
    };
    ExitCode::from(rt.block_on(run(&cli, &cfg, job)))
}

/// Target type from the exclusive target flags.
fn tgt_type(cli: &Cli) -> Result<&'static str, String> {
    let flags = [
        (cli.pcre, "pcre", "-E/--pcre"),
        (cli.list, "list", "-L/--list"),
        (cli.grain, "grain", "-G/--grain"),
        (cli.grain_pcre, "grain_pcre", "-P/--grain-pcre"),
        (cli.pillar, "pillar", "-I/--pillar"),
        (cli.pillar_pcre, "pillar_pcre", "-J/--pillar-pcre"),
        (cli.ipcidr, "ipcidr", "-S/--ipcidr"),
        (cli.compound, "compound", "-C/--compound"),
    ];
    let chosen: Vec<_> = flags.iter().filter(|f| f.0).collect();
    match chosen.as_slice() {
        [] => Ok("glob"),
        [one] => Ok(one.1),
        many => Err(format!(
            "The options {} are mutually exclusive. Please only choose one of them\n",
            many.iter().map(|f| f.2).collect::<Vec<_>>().join("/")
        )),
    }
}

/// `SaltCMDOptionParser._mixin_after_parsed`: target, function(s) and argument groups.
fn build_job(cli: &Cli) -> Result<PublishRequest, String> {
    let tgt_type = tgt_type(cli)?;
    let Some(raw_tgt) = cli.rest.first() else {
        return Err("\nCannot execute command without defining a target.\n\n".into());
    };
    let Some(fun) = cli.rest.get(1) else {
        return Err("\nIncomplete options passed.\n\n".into());
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
                return Err(
                    "Cannot execute compound command without defining all arguments.\n".into(),
                );
            }
            if funs.len() < groups.len() {
                return Err(
                    "Cannot execute compound command with more arguments than commands.\n".into(),
                );
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
    fn new(cli: &Cli, fun: &Value) -> Self {
        Self {
            cli_out: cli.output.out.clone(),
            opts: cli.output.options(),
            fun: value::str_of(fun).unwrap_or("").to_owned(),
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

/// `_get_retcode` for one minion's return load.
fn retcode_of(ret: &Value) -> i64 {
    match value::get(ret, "retcode") {
        Some(Value::Integer(i)) => i.as_i64().unwrap_or(1),
        Some(Value::Map(m)) => m.iter().filter_map(|(_, v)| v.as_i64()).max().unwrap_or(0),
        _ => 0,
    }
}

const NO_RETURN: &str = "Minion did not return. [No response]\nThe minions may not have all finished running and any remaining minions will return upon completion. To look up the return data for this job later, run the following command:\n\nsalt-run jobs.lookup_jid ";

async fn run(cli: &Cli, cfg: &MasterConfig, job: PublishRequest) -> u8 {
    let mut client = LocalClient::new(cfg);
    let printer = Printer::new(cli, &job.fun);
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
    if cli.async_ {
        return match client.publish(&job).await {
            Ok(r) => {
                if r.jid.is_none() {
                    println!(
                        "No minions matched the target. No command was sent, no jid was assigned."
                    );
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
    let Some(jid) = reply.jid.clone() else {
        println!("No minions matched the target. No command was sent, no jid was assigned.");
        eprintln!("ERROR: No return received");
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
    let mut retcodes = Vec::new();
    let mut collected: Vec<(Value, Value)> = Vec::new();
    let mut any = false;
    let follow = client.follow(
        &mut listener,
        &jid,
        &expected,
        Duration::from_secs(timeout),
        Duration::from_secs(cfg.gather_job_timeout),
        |ev| {
            let (id, ret, out, retcode) = match ev {
                JobEvent::Return(id, load) => {
                    let ret = value::get(&load, "return").cloned().unwrap_or(Value::Nil);
                    let out = value::get_str(&load, "out").map(str::to_owned);
                    (id, ret, out, retcode_of(&load))
                }
                JobEvent::NoReturn(id) => (
                    id,
                    s(format!("{NO_RETURN}{jid}")),
                    Some("no_return".to_owned()),
                    1,
                ),
            };
            any = true;
            retcodes.push(retcode);
            if cli.static_ {
                collected.push((s(id), ret));
            } else {
                printer.print(
                    &Value::Map(vec![(s(id), ret)]),
                    out.as_deref(),
                    retcode,
                    false,
                );
            }
        },
    );
    if let Err(e) = follow.await {
        return report_client_error(&printer, &e);
    }
    if cli.static_ {
        let max = retcodes.iter().copied().max().unwrap_or(0);
        printer.print(&Value::Map(collected), None, max, true);
    }
    if !any {
        eprintln!("ERROR: No return received");
        return 2;
    }
    if !cli.static_ && retcodes.iter().any(|r| *r != 0) {
        eprintln!("ERROR: Minions returned with non-zero exit code");
        return 1;
    }
    0
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
