//! `halite-minion`: parses flags like `salt-minion`, loads the config, sets up logging,
//! runs the minion, and exits as Salt does (77 when the master rejects the key).

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

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

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg = match halite_config::MinionConfig::load(&args.config_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("halite-minion: {e}");
            return ExitCode::from(EX_CONFIG);
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
        let shutdown = halite_daemon::shutdown_on_signals();
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
