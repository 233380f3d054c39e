//! What every Halite binary's `main` does the same way: Salt's log levels mapped onto
//! `tracing`, console + log-file logging for daemons and stderr logging for the CLIs, and a
//! shutdown token cancelled by SIGINT/SIGTERM.
//!
//! What it does not do: read configuration or decide exit codes (each binary does).

use std::path::Path;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

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
}
