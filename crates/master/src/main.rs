//! `halite-master`: parses flags, loads the config, sets up logging, writes the pidfile,
//! runs the master, and tells systemd (`Type=notify`) when it serves and when it stops.

use clap::Parser;
use halite_daemon::{DaemonArgs, Notifier};
use std::process::ExitCode;

/// Exit status for a usage error (optparse's, as `salt-master`).
const EX_USAGE: u8 = 2;
/// Exit status for an unusable configuration (`EX_CONFIG`).
const EX_CONFIG: u8 = 78;

/// The Halite master: a drop-in for salt-master.
#[derive(Parser)]
#[command(
    name = "halite-master",
    version,
    mut_arg("config_dir", |a| a.help("Directory holding the `master` config file and `master.d/`"))
)]
struct Args {
    #[command(flatten)]
    daemon: DaemonArgs,
}

fn main() -> ExitCode {
    // Before any thread starts: it takes $NOTIFY_SOCKET out of the environment.
    let notifier = Notifier::from_env();
    let args = match halite_daemon::parse_cli::<Args, _, _>(std::env::args_os(), EX_USAGE) {
        Ok(a) => a.daemon,
        Err(status) => return status,
    };
    let cfg = match halite_config::MasterConfig::load(&args.config_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("halite-master: {e}");
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
    // Removed when `main` returns.
    let _pidfile = match args.claim_pidfile(&cfg.pidfile) {
        Ok(p) => p,
        Err(status) => return status,
    };

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
        let shutdown = halite_daemon::daemon_shutdown(&notifier);
        match halite_master::run(cfg, shutdown, || notifier.ready()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!("The Salt Master could not start: {e}");
                eprintln!("halite-master: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
