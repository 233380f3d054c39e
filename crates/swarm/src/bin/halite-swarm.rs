//! `halite-swarm`: N simulated Salt 3008 minions in one process.
//!
//! Reports progress as JSON lines on stdout (see `halite_swarm::stats`), logs on stderr,
//! reads control lines on stdin (see `halite_swarm::swarm`).

use clap::Parser;
use halite_swarm::keys::{cache_dir, load_or_generate, minion_ids, KEY_BITS};
use halite_swarm::minion::Timing;
use halite_swarm::stats::emit;
use halite_swarm::swarm::{self, raise_fd_limit, split_master, SwarmOptions, FD_SLACK};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "halite-swarm",
    about = "Simulate many Salt minions against one master"
)]
struct Cli {
    /// Number of minions.
    #[arg(long, default_value_t = 100)]
    count: usize,
    /// Minion ids are PREFIX0, PREFIX1, ...
    #[arg(long, default_value = "swarm-")]
    id_prefix: String,
    /// The master's request port, HOST:PORT (the publish port comes from the master).
    #[arg(long, default_value = "127.0.0.1:4506")]
    master: String,
    /// Sign-ins in flight at most.
    #[arg(long, default_value_t = 128)]
    auth_concurrency: usize,
    /// Events per second fired by each minion (0: none; `events RATE` on stdin changes it).
    #[arg(long, default_value_t = 0.0)]
    event_rate: f64,
    /// Answer `state.apply`/`state.highstate` the way a stock minion's warm run loads the
    /// master: its fileserver and pillar requests, then a highstate return (bench/states.sh).
    #[arg(long)]
    simulate_states: bool,
    /// Where minion keys are cached (`<id>.pem`, `<id>.tok`) [default: ~/.cache/halite-swarm/keys].
    #[arg(long)]
    keys_dir: Option<PathBuf>,
    /// RSA size of the simulated minions' keys. Smaller keys cut the swarm's own share of
    /// the CPU (it decrypts two RSA-OAEP blobs per sign-in); the master's private-key work
    /// does not depend on it (it uses its own key). Sizes other than 2048 are cached in
    /// KEYS_DIR/rsa<bits>.
    #[arg(long, default_value_t = KEY_BITS)]
    key_bits: u32,
    /// Request connections shared by all minions (one request in flight each).
    #[arg(long, default_value_t = 128)]
    connections: usize,
    /// Minions sharing one publish connection. Above 1 the master sends each publish to
    /// fewer connections than there are minions (everything else stays per minion): for
    /// swarms larger than the file descriptors one process may hold (RLIMIT_NOFILE).
    #[arg(long, default_value_t = 1)]
    minions_per_subscription: usize,
    /// Tokio worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Seconds one `_auth` attempt may take (Salt's auth_timeout).
    #[arg(long, default_value_t = 5.0)]
    auth_timeout: f64,
    /// Seconds any other request may take.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Seconds to wait after a pending sign-in (Salt's acceptance_wait_time).
    #[arg(long, default_value_t = 10.0)]
    acceptance_wait: f64,
    /// Log level on stderr (error, warn, info, debug, trace).
    #[arg(long, default_value = "warn")]
    log_level: String,
}

fn secs(name: &str, v: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(v).map_err(|_| format!("--{name} {v}: expected seconds >= 0"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(cli.log_level.as_str())
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("halite-swarm: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    let (master_host, master_port) = split_master(&cli.master).map_err(|e| e.to_string())?;
    if !(cli.event_rate.is_finite() && cli.event_rate >= 0.0) {
        return Err(format!(
            "--event-rate {}: expected events per second >= 0",
            cli.event_rate
        ));
    }
    let timing = Timing {
        auth_timeout: secs("auth-timeout", cli.auth_timeout)?,
        request_timeout: secs("timeout", cli.timeout)?,
        acceptance_wait: secs("acceptance-wait", cli.acceptance_wait)?,
        return_tries: 3,
    };
    let subscriptions = cli.count.div_ceil(cli.minions_per_subscription.max(1));
    raise_fd_limit(subscriptions as u64 + cli.connections as u64 + FD_SLACK)
        .map_err(|e| e.to_string())?;
    let keys_dir = match cli.keys_dir {
        Some(d) => d,
        None => {
            let home = std::env::var_os("HOME").ok_or("HOME is not set; pass --keys-dir")?;
            PathBuf::from(home).join(".cache/halite-swarm/keys")
        }
    };
    let ids = minion_ids(&cli.id_prefix, cli.count).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    if !(1024..=4096).contains(&cli.key_bits) {
        return Err("--key-bits: expected 1024 to 4096".into());
    }
    let keys_dir = cache_dir(&keys_dir, cli.key_bits);
    let (keys, counts) =
        load_or_generate(&keys_dir, &ids, cli.key_bits, threads).map_err(|e| e.to_string())?;
    emit(
        "keys",
        json!({
            "dir": keys_dir.display().to_string(),
            "loaded": counts.loaded,
            "generated": counts.generated,
            "secs": t.elapsed().as_secs_f64(),
        }),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads.max(1))
        .thread_name("swarm")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let opts = SwarmOptions {
        master_host,
        master_port,
        auth_concurrency: cli.auth_concurrency,
        connections: cli.connections,
        minions_per_subscription: cli.minions_per_subscription,
        event_rate: cli.event_rate,
        timing,
        simulate_states: cli.simulate_states,
    };
    let result = rt.block_on(swarm::run(opts, keys));
    // The stdin reader may sit in a blocking read: do not wait for it.
    rt.shutdown_timeout(Duration::from_millis(200));
    result.map(|_| ()).map_err(|e| e.to_string())
}
