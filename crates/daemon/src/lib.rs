//! What every Halite binary's `main` does the same way: the daemons' common flags
//! ([`DaemonArgs`]), Salt's usage-error handling ([`parse_cli`]), Salt's log levels mapped
//! onto `tracing` (with Salt's CRITICAL, which `tracing` lacks: an `error` event marked
//! `critical = true`), console + log-file logging in Salt's formats for daemons and stderr
//! logging for the CLIs, the CLIs' runtime, and a shutdown token cancelled by
//! SIGINT/SIGTERM. For the daemons under a service manager: the pidfile ([`PidFile`]) and
//! systemd's readiness notification ([`Notifier`]). For the package: shell completions and
//! man pages generated from each binary's clap definition ([`docs`]).
//!
//! What it does not do: read configuration or decide exit codes (each binary does).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::filter::{self, FilterExt};
use tracing_subscriber::layer::{Filter, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

mod format;
pub use format::{SaltFormat, CRITICAL_FIELD};
pub mod docs;
mod notify;
mod pidfile;
pub use notify::{Notifier, NOTIFY_SOCKET_ENV};
pub use pidfile::PidFile;

/// What can go wrong in the daemons' shared start-up steps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another live process holds the pidfile: the daemon is already running.
    #[error("An instance is already running (pidfile {}{}). Exiting", path.display(), pid.map(|p| format!(", pid {p}")).unwrap_or_default())]
    Running {
        /// The pidfile.
        path: PathBuf,
        /// The pid written in it, when it holds one.
        pid: Option<u32>,
    },
    /// The pidfile or its directory could not be created, locked or written.
    #[error("cannot write the pidfile {}: {source}", path.display())]
    PidFile {
        /// The pidfile.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The flags `halite-master` and `halite-minion` share, for their `#[command(flatten)]`.
/// Each daemon names its own config file in the `config_dir` help (`mut_arg`).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct DaemonArgs {
    /// Directory holding the config file and its `.d/` directory.
    #[arg(short = 'c', long = "config-dir", default_value = "/etc/salt")]
    pub config_dir: PathBuf,
    /// Console log level (overrides `log_level`).
    #[arg(short = 'l', long = "log-level")]
    pub log_level: Option<String>,
    /// Log file level (overrides `log_level_logfile`).
    #[arg(long = "log-file-level")]
    pub log_file_level: Option<String>,
    /// Where to write the pid (overrides `pidfile`).
    #[arg(long = "pid-file")]
    pub pid_file: Option<PathBuf>,
}

impl DaemonArgs {
    /// [`init_logging`] with these flags over the config's levels: the console at
    /// `--log-level`, else `log_level`; the file at `--log-file-level`, else
    /// `log_level_logfile`, else `log_level`.
    pub fn init_logging(&self, log_level: &str, log_level_logfile: Option<&str>, log_file: &Path) {
        let console = self.log_level.as_deref().unwrap_or(log_level);
        let file_level = self
            .log_file_level
            .as_deref()
            .or(log_level_logfile)
            .unwrap_or(log_level);
        init_logging(console, file_level, log_file);
    }

    /// The pidfile to write: `--pid-file`, else the config's `pidfile`.
    pub fn pidfile<'a>(&'a self, configured: &'a Path) -> &'a Path {
        self.pid_file.as_deref().unwrap_or(configured)
    }

    /// Writes the pidfile ([`DaemonArgs::pidfile`]) as Salt's daemons do: another live
    /// instance on it is an error (logged; the daemon exits with status 1), any other
    /// failure a warning (the daemon runs without one). The file is removed when the
    /// returned value is dropped.
    pub fn claim_pidfile(&self, configured: &Path) -> Result<Option<PidFile>, ExitCode> {
        match PidFile::create(self.pidfile(configured)) {
            Ok(p) => Ok(Some(p)),
            Err(e @ Error::Running { .. }) => {
                tracing::error!("{e}");
                Err(ExitCode::FAILURE)
            }
            Err(e) => {
                tracing::warn!("{e}");
                Ok(None)
            }
        }
    }
}

/// Maps a Salt log level name (`garbage`, `trace`, `debug`, `profile`, `info`, `warning`,
/// `error`, `critical`, `quiet`, `all`) to the `tracing` filter directive closest to it.
/// Unknown names get Salt's default, `warning`. `critical` maps to `error`, which also
/// admits Salt's ERROR lines: [`level_filter`] is the exact filter.
pub fn salt_level(name: &str) -> &'static str {
    match name.to_ascii_lowercase().as_str() {
        "all" | "garbage" | "trace" => "trace",
        "debug" | "profile" => "debug",
        "info" => "info",
        "warning" | "warn" => "warn",
        "error" | "critical" => "error",
        "quiet" => "off",
        _ => "warn",
    }
}

/// Whether an event is one of Salt's CRITICAL lines: an `error` event with the
/// [`CRITICAL_FIELD`] marker.
fn is_critical(meta: &tracing::Metadata<'_>) -> bool {
    *meta.level() == tracing::Level::ERROR && meta.fields().field(CRITICAL_FIELD).is_some()
}

/// The filter for a Salt log level name: [`salt_level`]'s directive, except that
/// `critical` admits only CRITICAL lines (`tracing` has no level above `error`, so Salt's
/// CRITICAL is an `error` event carrying [`CRITICAL_FIELD`]).
pub fn level_filter<S>(name: &str) -> Box<dyn Filter<S> + Send + Sync + 'static>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    if name.eq_ignore_ascii_case("critical") {
        FilterExt::boxed(filter::filter_fn(|meta| {
            meta.is_event() && is_critical(meta)
        }))
    } else {
        FilterExt::boxed(EnvFilter::new(salt_level(name)))
    }
}

/// Logs to stderr at `console` and, when `log_file` can be opened for appending (its parent
/// is created), to that file at `file_level`. Both levels are Salt level names; both
/// outputs are in Salt's formats ([`SaltFormat`]).
pub fn init_logging(console: &str, file_level: &str, log_file: &Path) {
    let file = log_file
        .parent()
        .map(std::fs::create_dir_all)
        .and_then(|_| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log_file)
                .ok()
        });
    let file_layer = file.map(|f| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::sync::Mutex::new(f))
            .event_format(SaltFormat::LogFile)
            .with_filter(level_filter(file_level))
    });
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .event_format(SaltFormat::Console)
                .with_filter(level_filter(console)),
        )
        .with(file_layer)
        .init();
}

/// Logs to stderr only, at the Salt level `console`, in Salt's console form: what the
/// command-line tools do.
pub fn init_cli_logging(console: &str) {
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .event_format(SaltFormat::Console)
                .with_filter(level_filter(console)),
        )
        .init();
}

/// Parses a command line as Salt's optparse-based tools do: `--help` and `--version` print
/// to stdout and give exit status 0, a usage error prints to stderr and gives
/// `usage_status`. When [`docs::GENERATE_ENV`] is set, prints that document for `P`
/// instead and returns its status as the error (see [`docs::document_from_env`]).
pub fn parse_cli<P, I, T>(args: I, usage_status: u8) -> Result<P, ExitCode>
where
    P: clap::Parser,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    if let Some(status) = docs::document_from_env(P::command) {
        return Err(status);
    }
    P::try_parse_from(args).map_err(|e| {
        let status = if e.use_stderr() { usage_status } else { 0 };
        let _ = e.print();
        ExitCode::from(status)
    })
}

/// The single-threaded tokio runtime a CLI runs its network part on; `None` once the
/// reason it cannot start is printed to stderr.
pub fn cli_runtime() -> Option<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| eprintln!("{e}"))
        .ok()
}

/// A token cancelled on the first SIGINT or SIGTERM. Call inside a tokio runtime.
pub fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let stop = token.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminated => {}
        }
        stop.cancel();
    });
    token
}

/// A daemon's [`shutdown_on_signals`] token, which also tells systemd (`STOPPING=1`
/// through `notifier`) once it is cancelled. Call inside a tokio runtime.
pub fn daemon_shutdown(notifier: &Notifier) -> CancellationToken {
    let shutdown = shutdown_on_signals();
    let (stopping, stop) = (notifier.clone(), shutdown.clone());
    tokio::spawn(async move {
        stop.cancelled().await;
        stopping.stopping();
    });
    shutdown
}

/// Lowers the calling thread's CPU priority to `nice` (0 to 19; higher yields more), for
/// background threads whose work must not delay the request path when the cores are busy.
/// On Linux a thread's nice value is its own, so the rest of the process keeps its priority.
pub fn lower_thread_priority(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority reads its three integer arguments only; `tid` is this thread's id.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salt_levels_map_to_tracing_directives() {
        for (salt, directive) in [
            ("garbage", "trace"),
            ("profile", "debug"),
            ("WARNING", "warn"),
            ("critical", "error"),
            ("quiet", "off"),
            ("bogus", "warn"),
        ] {
            assert_eq!(salt_level(salt), directive, "{salt}");
        }
    }

    #[test]
    fn daemon_flags_parse() {
        use clap::Parser;
        #[derive(Parser)]
        struct Daemon {
            #[command(flatten)]
            args: DaemonArgs,
        }
        let parse = |words: &[&str]| {
            Daemon::try_parse_from(std::iter::once("d").chain(words.iter().copied()))
                .map(|d| d.args)
                .unwrap()
        };
        assert_eq!(
            parse(&[]),
            DaemonArgs {
                config_dir: PathBuf::from("/etc/salt"),
                log_level: None,
                log_file_level: None,
                pid_file: None,
            }
        );
        assert_eq!(
            parse(&[
                "-c",
                "/srv",
                "-l",
                "debug",
                "--log-file-level",
                "info",
                "--pid-file",
                "/run/m.pid",
            ]),
            DaemonArgs {
                config_dir: PathBuf::from("/srv"),
                log_level: Some("debug".to_owned()),
                log_file_level: Some("info".to_owned()),
                pid_file: Some(PathBuf::from("/run/m.pid")),
            }
        );
    }

    fn thread_nice() -> i32 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        // Field 19 (nice), counted after the parenthesised command name.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after.split(' ').nth(16).unwrap().parse().unwrap()
    }

    #[test]
    fn lowering_priority_changes_only_the_calling_thread() {
        let before = thread_nice();
        let want = (before + 5).min(19);
        let lowered = std::thread::spawn(move || {
            lower_thread_priority(want).unwrap();
            thread_nice()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, want);
        assert_eq!(thread_nice(), before);
    }
}
