//! `halite-bench`: Halite master vs stock salt-master under `halite-swarm`, side by side.
//!
//! Prints progress on stderr, writes every figure as JSON (`--out`), and prints the
//! Markdown table (with stock ÷ Halite ratios) on stdout. See `halite_swarm::bench`.
//! `halite-bench api ...` is the HTTP API load generator (`halite_swarm::api_bench`).

use clap::Parser;
use halite_swarm::bench::{run_one, scale_config, table, BenchOptions, MasterKind};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "halite-bench",
    about = "Benchmark a Halite master against a stock salt-master",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Minion counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    counts: Vec<usize>,
    /// Masters to measure, in order: halite, stock.
    #[arg(long, value_delimiter = ',', default_value = "halite,stock")]
    masters: Vec<String>,
    /// test.ping publishes per run.
    #[arg(long, default_value_t = 20)]
    publishes: usize,
    /// Events per second offered by the whole swarm in the events phase.
    #[arg(long, default_value_t = 1000.0)]
    events_per_sec: f64,
    /// Length of the events phase in seconds.
    #[arg(long, default_value_t = 10.0)]
    event_secs: f64,
    /// Time budget of each phase in seconds ("did not finish in T" beyond it).
    #[arg(long, default_value_t = 300.0)]
    budget: f64,
    /// Minion key cache [default: ~/.cache/halite-swarm/keys].
    #[arg(long)]
    keys_dir: Option<PathBuf>,
    /// RSA size of the swarm's minion keys (see `halite-swarm --key-bits`): 1024 keeps the
    /// swarm's own RSA work from crowding the master on a small machine.
    #[arg(long, default_value_t = halite_swarm::keys::KEY_BITS)]
    swarm_key_bits: u32,
    /// Sign-ins in flight at most.
    #[arg(long, default_value_t = 128)]
    auth_concurrency: usize,
    /// Request connections of the swarm.
    #[arg(long, default_value_t = 128)]
    connections: usize,
    /// Simulated minions sharing one publish connection (`halite-swarm
    /// --minions-per-subscription`); raise it when the minions outnumber the descriptors a
    /// process may hold.
    #[arg(long, default_value_t = 1)]
    minions_per_subscription: usize,
    /// Tokio worker threads of the swarm.
    #[arg(long, default_value_t = 2)]
    swarm_threads: usize,
    /// worker_threads of both masters.
    #[arg(long, default_value_t = 8)]
    worker_threads: u32,
    /// More master config for both masters, YAML lines (e.g. `job_cache: false`).
    #[arg(long, value_name = "YAML", default_value = "")]
    master_config: String,
    /// Where to write the JSON results.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the table of an earlier results file (as written by --out) and exit.
    #[arg(long, value_name = "RESULTS_JSON")]
    table: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Load an HTTP API (halite-api or salt-api): `POST /` local test.ping and `/events`.
    Api(Box<halite_swarm::api_bench::ApiArgs>),
    /// The floors of a sign-in and a return on this machine (RSA, Crypticle, msgpack, a
    /// loopback TCP write, file creation and fsync under DIR), as JSON.
    Floors {
        /// Where the file-system figures are taken (the masters' file system).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
        /// Seconds per measure.
        #[arg(long, default_value_t = 2.0)]
        secs: f64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter("warn")
        .init();
    let result = match cli.command {
        Some(Command::Api(args)) => halite_swarm::api_bench::main(*args),
        Some(Command::Floors { dir, secs }) => halite_swarm::floors::measure(&dir, secs)
            .map(|floors| println!("{floors:#}"))
            .map_err(|e| e.to_string()),
        None => run(cli),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("halite-bench: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    if let Some(path) = &cli.table {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let doc: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let results = doc["results"]
            .as_array()
            .ok_or_else(|| format!("{} has no results list", path.display()))?;
        println!("{}", table(results));
        return Ok(());
    }
    let masters = cli
        .masters
        .iter()
        .map(|m| MasterKind::parse(m).ok_or_else(|| format!("--masters: unknown master {m:?}")))
        .collect::<Result<Vec<_>, _>>()?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
    let swarm_bin = exe.with_file_name("halite-swarm");
    if !swarm_bin.is_file() {
        return Err(format!(
            "{} is missing: build halite-swarm first",
            swarm_bin.display()
        ));
    }
    let keys_dir = match cli.keys_dir {
        Some(d) => d,
        None => PathBuf::from(std::env::var_os("HOME").ok_or("HOME is not set; pass --keys-dir")?)
            .join(".cache/halite-swarm/keys"),
    };
    let budget =
        Duration::try_from_secs_f64(cli.budget).map_err(|_| "--budget: expected seconds")?;
    // Children (masters, swarm) inherit the raised limit: a master holds a connection per
    // publish subscription and per request connection, the swarm too.
    let most = cli.counts.iter().copied().max().unwrap_or(0);
    let subscriptions = most.div_ceil(cli.minions_per_subscription.max(1)) as u64;
    halite_swarm::swarm::raise_fd_limit(subscriptions + cli.connections as u64 + 4096)
        .map_err(|e| e.to_string())?;
    let opts = BenchOptions {
        counts: cli.counts,
        masters,
        publishes: cli.publishes,
        events_per_sec: cli.events_per_sec,
        event_secs: cli.event_secs,
        budget,
        swarm_bin,
        keys_dir,
        swarm_key_bits: cli.swarm_key_bits,
        auth_concurrency: cli.auth_concurrency,
        connections: cli.connections,
        minions_per_subscription: cli.minions_per_subscription,
        swarm_threads: cli.swarm_threads,
        master_yaml: format!(
            "{}{}\n",
            scale_config(cli.worker_threads),
            cli.master_config
        ),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let mut results = Vec::new();
    let mut spent = Vec::new();
    for &n in &opts.counts {
        for &kind in &opts.masters {
            eprintln!("== {} master, {n} minions", kind.name());
            let r = rt
                .block_on(run_one(&opts, kind, n, &mut spent))
                .unwrap_or_else(
                    |e| json!({"master": kind.name(), "minions": n, "error": e.to_string()}),
                );
            results.push(r);
            if let Some(out) = &cli.out {
                write_results(out, &opts, &results)?;
            }
        }
    }
    println!("{}", table(&results));
    drop(spent);
    // Flush the deletions' dirty inode tables: until they are written back, ext4 without a
    // journal treats the freed inodes as recently deleted for 300 s instead of 5 s, and
    // every file the next benchmark creates pays for scanning past them.
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    Ok(())
}

fn write_results(
    out: &PathBuf,
    opts: &BenchOptions,
    results: &[serde_json::Value],
) -> Result<(), String> {
    let doc = json!({
        "options": {
            "publishes": opts.publishes,
            "events_per_sec": opts.events_per_sec,
            "event_secs": opts.event_secs,
            "budget_secs": opts.budget.as_secs_f64(),
            "auth_concurrency": opts.auth_concurrency,
            "connections": opts.connections,
            "minions_per_subscription": opts.minions_per_subscription,
            "swarm_threads": opts.swarm_threads,
            "swarm_key_bits": opts.swarm_key_bits,
            "master_config": opts.master_yaml,
        },
        "results": results,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    std::fs::write(out, text).map_err(|e| format!("writing {}: {e}", out.display()))
}
