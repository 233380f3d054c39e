//! What every Halite binary's `main` does the same way: the daemons' common flags
//! ([`DaemonArgs`]), Salt's usage-error handling ([`parse_cli`]), Salt's log levels mapped
//! onto `tracing`, console + log-file logging for daemons and stderr logging for the CLIs,
//! the CLIs' runtime, and a shutdown token cancelled by SIGINT/SIGTERM.
//!
//! What it does not do: read configuration or decide exit codes (each binary does).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

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
}

/// Maps a Salt log level name (`garbage`, `trace`, `debug`, `profile`, `info`, `warning`,
/// `error`, `critical`, `quiet`, `all`) to a `tracing` filter directive. Unknown names get
/// Salt's default, `warning`.
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

/// Logs to stderr at `console` and, when `log_file` can be opened for appending (its parent
/// is created), to that file at `file_level`. Both levels are Salt level names.
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
            .with_ansi(false)
            .with_filter(EnvFilter::new(salt_level(file_level)))
    });
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(EnvFilter::new(salt_level(console))),
        )
        .with(file_layer)
        .init();
}

/// Logs to stderr only, at the Salt level `console`: what the command-line tools do.
pub fn init_cli_logging(console: &str) {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(salt_level(console))
        .init();
}

/// Parses a command line as Salt's optparse-based tools do: `--help` and `--version` print
/// to stdout and give exit status 0, a usage error prints to stderr and gives
/// `usage_status`.
pub fn parse_cli<P, I, T>(args: I, usage_status: u8) -> Result<P, ExitCode>
where
    P: clap::Parser,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
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
            }
        );
        assert_eq!(
            parse(&["-c", "/srv", "-l", "debug", "--log-file-level", "info"]),
            DaemonArgs {
                config_dir: PathBuf::from("/srv"),
                log_level: Some("debug".to_owned()),
                log_file_level: Some("info".to_owned()),
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
