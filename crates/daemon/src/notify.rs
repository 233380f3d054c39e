//! systemd's readiness protocol (`sd_notify`), by hand: one datagram per state change to
//! the UNIX socket named by `$NOTIFY_SOCKET` (a path, or `@name` for the abstract
//! namespace). With `Type=notify`, `systemctl start` returns when the daemon sends
//! `READY=1`; `STOPPING=1` marks the start of a graceful shutdown.
//!
//! Salt sends `READY=1` before it binds anything (the master) or before it connects (the
//! minion); Halite's daemons send it once they serve (see their `main`).
//!
//! Without `$NOTIFY_SOCKET` (not started by systemd) every call does nothing. Failures to
//! send are logged at DEBUG and otherwise ignored, as libsystemd's callers do: readiness is
//! advisory, and a daemon that works must not stop because its supervisor went away.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The environment variable systemd passes the notification socket in.
pub const NOTIFY_SOCKET_ENV: &str = "NOTIFY_SOCKET";

/// Where readiness notifications go, taken from the environment once.
#[derive(Debug, Clone, Default)]
pub struct Notifier {
    socket: Option<SocketAddr>,
}

impl Notifier {
    /// Takes `$NOTIFY_SOCKET` and removes it from the environment, so that the daemon's
    /// children (jobs, `cmd.run`) do not inherit it. Call first thing in `main`, before
    /// any other thread starts (changing the environment races with threads reading it).
    pub fn from_env() -> Notifier {
        let Some(value) = std::env::var_os(NOTIFY_SOCKET_ENV) else {
            return Notifier::default();
        };
        std::env::remove_var(NOTIFY_SOCKET_ENV);
        let socket = parse_socket(value.as_encoded_bytes());
        if socket.is_none() {
            tracing::debug!("{NOTIFY_SOCKET_ENV}={value:?} is not a usable socket address");
        }
        Notifier { socket }
    }

    /// Whether a supervisor asked for notifications.
    pub fn enabled(&self) -> bool {
        self.socket.is_some()
    }

    /// Sends `READY=1`: the daemon serves.
    pub fn ready(&self) {
        self.send("READY=1");
    }

    /// Sends `STOPPING=1`: a graceful shutdown has begun.
    pub fn stopping(&self) {
        self.send("STOPPING=1");
    }

    fn send(&self, state: &str) {
        let Some(addr) = &self.socket else { return };
        let sent =
            UnixDatagram::unbound().and_then(|sock| sock.send_to_addr(state.as_bytes(), addr));
        if let Err(e) = sent {
            tracing::debug!("Cannot notify systemd of {state}: {e}");
        }
    }
}

/// `$NOTIFY_SOCKET`'s value as an address: an absolute path, or `@name` (abstract).
/// Anything else (relative paths, `vsock:` addresses) is not supported.
fn parse_socket(value: &[u8]) -> Option<SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    match value {
        [b'@', name @ ..] => SocketAddr::from_abstract_name(name).ok(),
        [b'/', ..] => {
            let path = std::path::Path::new(std::ffi::OsStr::from_bytes(value));
            SocketAddr::from_pathname(path).ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn receive(sock: &UnixDatagram) -> String {
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 64];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn ready_and_stopping_reach_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let sock = UnixDatagram::bind(&path).unwrap();
        let notifier = Notifier {
            socket: parse_socket(path.as_os_str().as_bytes()),
        };
        assert!(notifier.enabled());
        notifier.ready();
        notifier.stopping();
        assert_eq!(receive(&sock), "READY=1");
        assert_eq!(receive(&sock), "STOPPING=1");
    }

    #[test]
    fn ready_reaches_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("halite-notify-test-{}", std::process::id());
        let sock =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        let notifier = Notifier {
            socket: parse_socket(format!("@{name}").as_bytes()),
        };
        notifier.ready();
        assert_eq!(receive(&sock), "READY=1");
    }

    #[test]
    fn relative_and_empty_socket_values_are_refused() {
        assert!(parse_socket(b"").is_none());
        assert!(parse_socket(b"run/notify").is_none());
        assert!(parse_socket(b"vsock:2:1234").is_none());
    }

    #[test]
    fn without_a_socket_notifications_do_nothing() {
        let notifier = Notifier::default();
        assert!(!notifier.enabled());
        notifier.ready();
        notifier.stopping();
    }

    #[test]
    fn a_socket_nobody_listens_on_is_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let notifier = Notifier {
            socket: parse_socket(dir.path().join("gone").as_os_str().as_bytes()),
        };
        notifier.ready();
    }
}
