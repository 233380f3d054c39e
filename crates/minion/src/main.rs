//! `halite-minion`: parses flags like `salt-minion`, loads the config, sets up logging,
//! runs the minion, and exits as Salt does (77 when the master rejects the key).

use clap::Parser;
use halite_daemon::DaemonArgs;
use std::process::ExitCode;

/// Exit status for an unusable configuration (`EX_CONFIG`).
const EX_CONFIG: u8 = 78;

/// The Halite minion: a drop-in for salt-minion.
#[derive(Parser)]
#[command(
    name = "halite-minion",
    version,
    mut_arg("config_dir", |a| a.help("Directory holding the `minion` config file and `minion.d/`"))
)]
struct Args {
    #[command(flatten)]
    daemon: DaemonArgs,
}

fn main() -> ExitCode {
    let args = Args::parse().daemon;
    let cfg = match halite_config::MinionConfig::load(&args.config_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("halite-minion: {e}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    args.init_logging(
        cfg.log_level.as_str(),
        cfg.log_level_logfile.map(|l| l.as_str()),
        std::path::Path::new(&cfg.log_file),
    );
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
            Ok(halite_minion::Outcome::MasterFinger) => {
                ExitCode::from(halite_minion::EX_MASTER_FINGER)
            }
            Ok(halite_minion::Outcome::BadMaster(status)) => ExitCode::from(status),
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
