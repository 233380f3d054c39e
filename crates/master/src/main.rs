//! `halite-master`: parses flags, loads the config, sets up logging, runs the master.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

/// The Halite master: a drop-in for salt-master.
#[derive(Parser)]
#[command(name = "halite-master", version)]
struct Args {
    /// Directory holding the `master` config file and `master.d/`.
    #[arg(short = 'c', long = "config-dir", default_value = "/etc/salt")]
    config_dir: PathBuf,
    /// Console log level (overrides `log_level`).
    #[arg(short = 'l', long = "log-level")]
    log_level: Option<String>,
    /// Log file level (overrides `log_level_logfile`).
    #[arg(long = "log-file-level")]
    log_file_level: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg = match halite_config::MasterConfig::load(&args.config_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("halite-master: {e}");
            return ExitCode::from(78);
        }
    };
    let console = args.log_level.as_deref().unwrap_or(cfg.log_level.as_str());
    let file_level = args
        .log_file_level
        .as_deref()
        .or(cfg.log_level_logfile.map(|l| l.as_str()))
        .unwrap_or(cfg.log_level.as_str());
    halite_daemon::init_logging(console, file_level, std::path::Path::new(&cfg.log_file));
    for unknown in cfg.unknown_options() {
        tracing::debug!("Unknown configuration option {unknown:?} ignored");
    }

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("halite-master: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let shutdown = halite_daemon::shutdown_on_signals();
        match halite_master::run(cfg, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!("The Salt Master could not start: {e}");
                eprintln!("halite-master: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
