//! The execution modules, one file per Salt module.

pub(crate) mod cmd;
pub(crate) mod event;
pub(crate) mod grains;
pub(crate) mod publish;
pub(crate) mod saltutil;
pub(crate) mod status;
pub(crate) mod sys;
pub(crate) mod test;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::ExecError;
use crate::registry::Export;
use crate::Context;

/// Every function of every module.
pub(crate) fn exports() -> impl Iterator<Item = &'static Export> {
    [
        cmd::EXPORTS,
        event::EXPORTS,
        grains::EXPORTS,
        publish::EXPORTS,
        saltutil::EXPORTS,
        status::EXPORTS,
        sys::EXPORTS,
        test::EXPORTS,
    ]
    .into_iter()
    .flatten()
}

/// How often long functions look at the cancellation flag.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// Fails with [`ExecError::Cancelled`] once the job has been cancelled.
pub(crate) fn check_cancel(ctx: &Context) -> Result<(), ExecError> {
    match ctx.job.cancel_signal() {
        Some(sig) => Err(ExecError::Cancelled(sig)),
        None => Ok(()),
    }
}

/// `time.sleep(duration)`, cut short when the job is cancelled.
pub(crate) fn interruptible_sleep(ctx: &Context, duration: Duration) -> Result<(), ExecError> {
    // A duration past the clock's range sleeps until cancelled.
    let deadline = Instant::now().checked_add(duration);
    loop {
        check_cancel(ctx)?;
        let step = match deadline {
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(());
                }
                CANCEL_POLL.min(deadline - now)
            }
            None => CANCEL_POLL,
        };
        std::thread::sleep(step);
    }
}

/// `salt.utils.path.which`: `exe` itself if it is an executable file, else the first
/// executable `dir/exe` along `$PATH` plus the usual system directories.
pub(crate) fn which(exe: &str) -> Option<String> {
    if exe.is_empty() {
        return None;
    }
    let is_exec = |p: &str| Path::new(p).is_file() && crate::os::executable(p);
    if is_exec(exe) {
        return Some(exe.to_owned());
    }
    let path = std::env::var("PATH").unwrap_or_default();
    let mut dirs: Vec<String> = path.split(':').map(str::to_owned).collect();
    for extra in [
        "/sbin",
        "/bin",
        "/usr/sbin",
        "/usr/bin",
        "/usr/local/sbin",
        "/usr/local/bin",
    ] {
        if !dirs.iter().any(|d| d == extra) {
            dirs.push(extra.to_owned());
        }
    }
    dirs.iter()
        .map(|dir| join_path(dir, exe))
        .find(|candidate| is_exec(candidate))
}

/// `os.path.join(a, b)` for a relative `b` (an absolute `b` replaces `a`).
fn join_path(dir: &str, exe: &str) -> String {
    if exe.starts_with('/') || dir.is_empty() {
        exe.to_owned()
    } else if dir.ends_with('/') {
        format!("{dir}{exe}")
    } else {
        format!("{dir}/{exe}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_finds_sh_and_not_nonsense() {
        assert!(which("sh").is_some_and(|p| p.ends_with("/sh")));
        assert_eq!(which("/bin/sh").as_deref(), Some("/bin/sh"));
        assert!(which("definitely-not-a-command-xyz").is_none());
        assert!(which("").is_none());
    }
}
