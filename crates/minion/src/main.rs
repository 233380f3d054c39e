//! `halite-minion`: parses flags like `salt-minion`, loads the config, sets up logging,
//! writes the pidfile, runs the minion, tells systemd (`Type=notify`) when its loop runs
//! and when it stops, and exits as Salt does (77 when the master rejects the key).

use clap::Parser;
use halite_daemon::{DaemonArgs, Notifier};
use std::process::ExitCode;

/// Exit status for a usage error (optparse's, as `salt-minion`).
const EX_USAGE: u8 = 2;
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
    // Before any thread starts: it takes $NOTIFY_SOCKET out of the environment, so jobs
    // do not inherit it.
    let notifier = Notifier::from_env();
    let args = match halite_daemon::parse_cli::<Args, _, _>(std::env::args_os(), EX_USAGE) {
        Ok(a) => a.daemon,
        Err(status) => return status,
    };
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
        tracing::warn!("{unknown}");
    }
    for warning in cfg.warnings() {
        tracing::warn!("{warning}");
    }
    // Salt's minion refuses to run twice on one pidfile ("An instance is already running.
    // Exiting", status 1). The file is removed when `main` returns.
    let _pidfile = match args.claim_pidfile(&cfg.pidfile) {
        Ok(p) => p,
        Err(status) => return status,
    };

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
        let shutdown = halite_daemon::daemon_shutdown(&notifier);
        match halite_minion::run(cfg, shutdown, || notifier.ready()).await {
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
