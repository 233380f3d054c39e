//! Running a swarm: options, the file-descriptor limit, the minion tasks, and the control
//! lines read from stdin.
//!
//! Control lines (one per line on stdin; stdin at EOF is fine, the swarm keeps running):
//! - `events RATE`: every minion fires `RATE` events per second from now on (0 stops);
//! - `stats`: print a `stats` line now;
//! - `quit`: print a final `stats` line and stop (as SIGINT and SIGTERM do).

use crate::keys::MinionKey;
use crate::minion::{self, Shared, Timing};
use crate::pool::ReqPool;
use crate::stats::{emit, Stats};
use crate::Error;
use halite_target::RegexCache;
use serde_json::json;
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{watch, Notify, Semaphore};

/// Default request port of a master (`ret_port`).
pub const DEFAULT_RET_PORT: u16 = 4506;

/// File descriptors a swarm needs besides one per minion and one per request connection.
pub const FD_SLACK: u64 = 64;

/// How a swarm runs.
#[derive(Debug, Clone)]
pub struct SwarmOptions {
    /// Master host.
    pub master_host: String,
    /// Master request port.
    pub master_port: u16,
    /// Sign-ins in flight at most.
    pub auth_concurrency: usize,
    /// Request connections.
    pub connections: usize,
    /// Minions sharing one publish connection (1: one each, as stock minions).
    pub minions_per_subscription: usize,
    /// Events per second per minion at start.
    pub event_rate: f64,
    /// Timeouts and retries.
    pub timing: Timing,
    /// Answer `state.apply` with a stock minion's requests (`--simulate-states`).
    pub simulate_states: bool,
}

/// Splits `host:port`, `[v6]:port` or a bare host (port 4506).
pub fn split_master(master: &str) -> Result<(String, u16), Error> {
    let bad = || Error::Usage(format!("--master {master:?}: expected HOST:PORT"));
    if let Some(rest) = master.strip_prefix('[') {
        let (host, port) = rest.split_once(']').ok_or_else(bad)?;
        let port = match port.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad())?,
            None if port.is_empty() => DEFAULT_RET_PORT,
            None => return Err(bad()),
        };
        return Ok((format!("[{host}]"), port));
    }
    match master.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && !host.contains(':') => {
            Ok((host.to_owned(), port.parse().map_err(|_| bad())?))
        }
        None if !master.is_empty() => Ok((master.to_owned(), DEFAULT_RET_PORT)),
        _ => Err(bad()),
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (and both to `needed`, up to the
/// kernel's `fs.nr_open`, when the process may raise the hard limit: root) and checks that
/// `needed` descriptors fit. Returns the new soft limit.
pub fn raise_fd_limit(needed: u64) -> Result<u64, Error> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed in.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(Error::Io {
                what: "getrlimit(RLIMIT_NOFILE)".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        // Beyond the hard limit only with CAP_SYS_RESOURCE (root), up to the kernel's
        // `fs.nr_open`; otherwise the hard limit is what there is.
        let target = lim.rlim_max.max(needed.min(nr_open()));
        if lim.rlim_cur < target {
            let raised = libc::rlimit {
                rlim_cur: target,
                rlim_max: target,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            } else if lim.rlim_cur < lim.rlim_max {
                let soft = libc::rlimit {
                    rlim_cur: lim.rlim_max,
                    rlim_max: lim.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &soft) == 0 {
                    lim.rlim_cur = lim.rlim_max;
                }
            }
        }
    }
    let soft = lim.rlim_cur;
    if soft < needed {
        return Err(Error::Usage(format!(
            "this swarm needs about {needed} file descriptors but RLIMIT_NOFILE allows {soft} \
             (hard limit {}); run fewer minions per process",
            lim.rlim_max
        )));
    }
    Ok(soft)
}

/// The kernel's ceiling for RLIMIT_NOFILE (`/proc/sys/fs/nr_open`; 1,048,576 by default).
fn nr_open() -> u64 {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 20)
}

/// Runs the swarm until `quit`, SIGINT or SIGTERM; returns the final counters.
///
/// Must run inside a multi-threaded tokio runtime.
pub async fn run(opts: SwarmOptions, keys: Vec<MinionKey>) -> Result<serde_json::Value, Error> {
    let (rate_tx, rate_rx) = watch::channel(opts.event_rate);
    let pool = ReqPool::start(
        format!("{}:{}", opts.master_host, opts.master_port),
        opts.connections,
    );
    let shared = Arc::new(Shared {
        master_host: opts.master_host.clone(),
        timing: opts.timing.clone(),
        simulate_states: opts.simulate_states,
        pool,
        stats: Stats::default(),
        auth_permits: Semaphore::new(opts.auth_concurrency.max(1)),
        regexes: RegexCache::default(),
        event_rate: rate_rx,
        count: keys.len() as u64,
        started: Instant::now(),
        ready_after: OnceLock::new(),
        ready: Notify::new(),
        subscriptions: minion::Subscriptions::new(opts.minions_per_subscription),
    });
    emit(
        "started",
        json!({"count": keys.len(), "master": format!("{}:{}", opts.master_host, opts.master_port)}),
    );
    for (i, key) in keys.into_iter().enumerate() {
        tokio::spawn(minion::run(shared.clone(), Arc::new(key), i));
    }
    tokio::spawn(minion::reporter(shared.clone()));

    let io = |what: &str| {
        let what = what.to_owned();
        move |source| Error::Io { what, source }
    };
    let mut term = signal(SignalKind::terminate()).map_err(io("SIGTERM handler"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(io("SIGINT handler"))?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut stdin_open = true;
    loop {
        tokio::select! {
            line = lines.next_line(), if stdin_open => match line {
                Ok(Some(line)) => match control(&line) {
                    Some(Control::Events(rate)) => {
                        let _ = rate_tx.send(rate);
                        emit("events", json!({"rate": rate}));
                    }
                    Some(Control::Stats) => emit("stats", shared.stats.snapshot()),
                    Some(Control::Quit) => break,
                    None => tracing::warn!("Unknown control line {line:?} (events RATE | stats | quit)"),
                },
                Ok(None) | Err(_) => stdin_open = false,
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    let last = shared.stats.snapshot();
    emit("stats", last.clone());
    Ok(last)
}

/// A control line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Control {
    /// `events RATE`.
    Events(f64),
    /// `stats`.
    Stats,
    /// `quit`.
    Quit,
}

/// Parses a control line; `None` for anything else.
pub fn control(line: &str) -> Option<Control> {
    let mut words = line.split_whitespace();
    let c = match (words.next()?, words.next()) {
        ("events", Some(rate)) => {
            let r: f64 = rate.parse().ok()?;
            if !(r.is_finite() && r >= 0.0) {
                return None;
            }
            Control::Events(r)
        }
        ("stats", None) => Control::Stats,
        ("quit", None) => Control::Quit,
        _ => return None,
    };
    words.next().is_none().then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_addresses_split_like_salt_master_settings() {
        let ok = [
            ("127.0.0.1:4506", ("127.0.0.1", 4506)),
            ("localhost", ("localhost", 4506)),
            ("[::1]:5000", ("[::1]", 5000)),
            ("[::1]", ("[::1]", 4506)),
        ];
        for (input, (host, port)) in ok {
            assert_eq!(
                split_master(input).unwrap(),
                (host.to_owned(), port),
                "{input}"
            );
        }
        for bad in ["", ":4506", "h:x", "::1", "[::1", "[::1]x"] {
            assert!(split_master(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn control_lines_parse_strictly() {
        assert_eq!(control("events 2.5"), Some(Control::Events(2.5)));
        assert_eq!(control(" events 0 "), Some(Control::Events(0.0)));
        assert_eq!(control("stats"), Some(Control::Stats));
        assert_eq!(control("quit"), Some(Control::Quit));
        for bad in [
            "",
            "events",
            "events -1",
            "events nan",
            "events 1 2",
            "stats now",
            "go",
        ] {
            assert_eq!(control(bad), None, "{bad}");
        }
    }

    #[test]
    fn fd_limit_is_raised_and_checked() {
        let soft = raise_fd_limit(10).unwrap();
        assert!(soft >= 10);
        assert!(matches!(raise_fd_limit(u64::MAX), Err(Error::Usage(_))));
    }
}
