//! Binding the replay socket with its mode set before anyone can reach it, with the scheme
//! every Halite daemon socket uses ([`halite_bus::bind_unix`]).

use crate::{Error, Result};
pub(crate) use halite_bus::SocketFile;
use halite_bus::UnixBindError;
use std::path::Path;
use tokio::net::UnixListener;

/// Binds a Unix socket at `path` with `mode`, replacing a stale socket file; anything else
/// at `path` is [`Error::NotASocket`]. Must run inside a tokio runtime.
pub(crate) fn bind(path: &Path, mode: u32) -> Result<(UnixListener, SocketFile)> {
    halite_bus::bind_unix(path, mode).map_err(|e| match e {
        UnixBindError::NotASocket => Error::NotASocket(path.to_owned()),
        UnixBindError::Io(source) => Error::Io {
            what: "cannot bind",
            path: path.to_owned(),
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[tokio::test]
    async fn bind_sets_the_mode_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.ipc");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let (listener, file) = bind(&path, 0o600).unwrap();
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        drop((listener, file));
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn bind_leaves_a_regular_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.ipc");
        std::fs::write(&path, b"keep").unwrap();
        assert!(matches!(bind(&path, 0o600), Err(Error::NotASocket(_))));
        assert_eq!(std::fs::read(&path).unwrap(), b"keep");
    }
}
