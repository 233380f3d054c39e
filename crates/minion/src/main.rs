//! `halite-minion`: parses flags like `salt-minion`, loads the config, sets up logging,
//! runs the minion, and exits as Salt does (77 when the master rejects the key).

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Exit status for an unusable configuration (`EX_CONFIG`).
const EX_CONFIG: u8 = 78;

/// The Halite minion: a drop-in for salt-minion.
#[derive(Parser)]
#[command(name = "halite-minion", version)]
struct Args {
    /// Directory holding the `minion` config file and `minion.d/`.
    #[arg(short = 'c', long = "config-dir", default_value = "/etc/salt")]
    config_dir: PathBuf,
    /// Console log level (overrides `log_level`).
    #[arg(short = 'l', long = "log-level")]
    log_level: Option<String>,
    /// Log file level (overrides `log_level_logfile`).
    #[arg(long = "log-file-level")]
    log_file_level: Option<String>,
}

/// Maps Salt's level names to a tracing filter directive.
fn level(salt_level: &str) -> &'static str {
    match salt_level.to_ascii_lowercase().as_str() {
        "all" | "garbage" | "trace" => "trace",
        "debug" | "profile" => "debug",
        "info" => "info",
        "warning" | "warn" => "warn",
        "error" | "critical" => "error",
        "quiet" => "off",
        _ => "warn",
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg = match halite_config::MinionConfig::load(&args.config_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("halite-minion: {e}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    let console = level(args.log_level.as_deref().unwrap_or(cfg.log_level.as_str()));
    let file_level = level(
        args.log_file_level
            .as_deref()
            .or(cfg.log_level_logfile.map(|l| l.as_str()))
            .unwrap_or(cfg.log_level.as_str()),
    );
    let log_file = std::path::Path::new(&cfg.log_file);
    let file = log_file.parent().map(std::fs::create_dir_all);
    let file = file.and_then(|_| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_file)
            .ok()
    });
    let file_layer = file.map(|f| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::sync::Mutex::new(f))
            .with_ansi(false)
            .with_filter(EnvFilter::new(file_level))
    });
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(EnvFilter::new(console)),
        )
        .with(file_layer)
        .init();
    for unknown in cfg.unknown_options() {
        tracing::debug!("Unknown configuration option {unknown:?} ignored");
    }
    for warning in cfg.warnings() {
        tracing::warn!("{warning}");
    }

    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("halite-minion: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
            }
            stop.cancel();
        });
        match halite_minion::run(cfg, shutdown).await {
            Ok(halite_minion::Outcome::Stopped) => ExitCode::SUCCESS,
            Ok(halite_minion::Outcome::Rejected) => ExitCode::from(halite_minion::EX_NOPERM),
            Err(e @ halite_minion::Error::Config(_)) => {
                eprintln!("halite-minion: {e}");
                ExitCode::from(EX_CONFIG)
            }
            Err(e) => {
                tracing::error!("The Salt Minion could not start: {e}");
                eprintln!("halite-minion: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
