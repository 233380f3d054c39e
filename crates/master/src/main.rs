//! `halite-master`: parses flags, loads the config, sets up logging, runs the master.

use clap::Parser;
use halite_daemon::DaemonArgs;
use std::process::ExitCode;

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
    let args = Args::parse().daemon;
    let cfg = match halite_config::MasterConfig::load(&args.config_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("halite-master: {e}");
            return ExitCode::from(78);
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
