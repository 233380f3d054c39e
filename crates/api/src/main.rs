//! `halite-api`: parses flags, loads the master config and its `rest_cherrypy:` section,
//! sets up logging (`api_logfile`), writes the pidfile (`api_pidfile`), serves, and tells
//! systemd (`Type=notify`) when it listens and when it stops.

use clap::Parser;
use halite_daemon::{DaemonArgs, Notifier};
use std::process::ExitCode;

/// Exit status for a usage error (optparse's, as `salt-api`).
const EX_USAGE: u8 = 2;
/// Exit status for an unusable configuration (`EX_CONFIG`).
const EX_CONFIG: u8 = 78;

/// The Halite HTTP API: a drop-in for salt-api (rest_cherrypy).
#[derive(Parser)]
#[command(
    name = "halite-api",
    version,
    mut_arg("config_dir", |a| a.help("Directory holding the `master` config file and `master.d/`"))
)]
struct Args {
    #[command(flatten)]
    daemon: DaemonArgs,
}

/// Raises the soft limit of open files to the hard limit: every `/events` client holds a
/// connection.
fn raise_nofile_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read or write the struct passed, which lives on the stack.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn main() -> ExitCode {
    let notifier = Notifier::from_env();
    let args = match halite_daemon::parse_cli::<Args, _, _>(std::env::args_os(), EX_USAGE) {
        Ok(a) => a.daemon,
        Err(status) => return status,
    };
    let master = match halite_config::MasterConfig::load(&args.config_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("halite-api: {e}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    let cfg = match halite_api::ApiConfig::from_master(&master) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("halite-api: {e}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    args.init_logging(
        master.log_level.as_str(),
        master.log_level_logfile.map(|l| l.as_str()),
        &cfg.log_file,
    );
    raise_nofile_limit();
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
            eprintln!("halite-api: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let shutdown = halite_daemon::daemon_shutdown(&notifier);
        let ready = |addr| {
            tracing::info!("halite-api listening on {addr}");
            notifier.ready();
        };
        match halite_api::run(master, cfg, shutdown, ready).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!("halite-api could not start: {e}");
                eprintln!("halite-api: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
