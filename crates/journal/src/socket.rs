//! Binding the replay socket with its mode set before anyone can reach it.
//!
//! The same scheme as `halite-bus` uses for the bus sockets (that code is private to the
//! bus crate): bind inside a fresh `0700` directory next to the target, set the mode, rename
//! into place. A process-wide umask is not an option in a multi-threaded daemon.

use crate::{Error, Result};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::net::UnixListener;

/// A socket file this process bound. Dropping it removes the file, unless another process
/// has since bound a new socket at the same path.
pub(crate) struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if m.dev() == self.dev && m.ino() == self.ino {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Binds a Unix socket at `path` with `mode`, replacing a stale socket file; anything else
/// at `path` is [`Error::NotASocket`]. Must run inside a tokio runtime.
pub(crate) fn bind(path: &Path, mode: u32) -> Result<(UnixListener, SocketFile)> {
    let io = |source| Error::Io {
        what: "cannot bind",
        path: path.to_owned(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {}
        Ok(_) => return Err(Error::NotASocket(path.to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let private = tempfile::Builder::new()
        .prefix(".hj")
        .tempdir_in(dir)
        .map_err(io)?;
    let tmp = private.path().join("s");
    let listener = UnixListener::bind(&tmp).map_err(io)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).map_err(io)?;
    let meta = std::fs::symlink_metadata(&tmp).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    Ok((
        listener,
        SocketFile {
            path: path.to_owned(),
            dev: meta.dev(),
            ino: meta.ino(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
