//! Binding, accepting and connecting on bus sockets, Unix or loopback TCP.

use crate::{BusAddr, Error, Result};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tracing::debug;

/// A bound, listening bus socket.
pub(crate) enum Bound {
    /// A Unix socket; the file is removed when this is dropped.
    Unix {
        listener: UnixListener,
        _file: SocketFile,
    },
    /// A loopback TCP port.
    Tcp(TcpListener),
}

impl Bound {
    /// Binds `addr`, giving a Unix socket file `mode`. Returns the socket and its actual
    /// address (the real port when `addr` is `Tcp(0)`).
    pub(crate) async fn bind(addr: &BusAddr, mode: u32) -> Result<(Bound, BusAddr)> {
        let err = |source| Error::Bind {
            addr: addr.clone(),
            source,
        };
        match addr {
            BusAddr::Unix(path) => {
                let (listener, file) = bind_unix(path, mode).map_err(|e| match e {
                    UnixBindError::NotASocket => Error::NotASocket(path.clone()),
                    UnixBindError::Io(e) => err(e),
                })?;
                Ok((
                    Bound::Unix {
                        listener,
                        _file: file,
                    },
                    addr.clone(),
                ))
            }
            BusAddr::Tcp(port) => {
                let listener = TcpListener::bind(("127.0.0.1", *port)).await.map_err(err)?;
                let port = listener.local_addr().map_err(err)?.port();
                Ok((Bound::Tcp(listener), BusAddr::Tcp(port)))
            }
        }
    }

    /// Accepts one connection and describes the peer for logs.
    pub(crate) async fn accept(&self) -> io::Result<(Conn, String)> {
        match self {
            Bound::Unix { listener, .. } => {
                let (s, _) = listener.accept().await?;
                let peer = unix_peer(&s);
                Ok((Conn::Unix(s), peer))
            }
            Bound::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                Ok((Conn::Tcp(s), peer.to_string()))
            }
        }
    }
}

/// Describes a Unix peer for logs by its credentials.
fn unix_peer(s: &UnixStream) -> String {
    match s.peer_cred() {
        Ok(c) => match c.pid() {
            Some(pid) => format!("pid {pid} uid {}", c.uid()),
            None => format!("uid {}", c.uid()),
        },
        Err(_) => "unknown peer".to_owned(),
    }
}

impl Bound {
    /// This socket as a [`SyncListener`], out of the runtime's hands.
    pub(crate) fn into_sync(self) -> io::Result<SyncListener> {
        let (inner, file) = match self {
            Bound::Unix { listener, _file } => (SyncInner::Unix(listener.into_std()?), Some(_file)),
            Bound::Tcp(l) => (SyncInner::Tcp(l.into_std()?), None),
        };
        match &inner {
            SyncInner::Unix(l) => l.set_nonblocking(true)?,
            SyncInner::Tcp(l) => l.set_nonblocking(true)?,
        }
        Ok(SyncListener { inner, _file: file })
    }
}

/// A listening socket whose queued connections any thread can take in at once, without
/// the runtime: the pub socket, so that publishing first takes in every subscriber whose
/// `connect` has returned (see `server.rs`).
pub(crate) struct SyncListener {
    inner: SyncInner,
    _file: Option<SocketFile>,
}

enum SyncInner {
    Unix(std::os::unix::net::UnixListener),
    Tcp(std::net::TcpListener),
}

impl SyncListener {
    /// One queued connection, without waiting: `WouldBlock` when none is queued.
    pub(crate) fn accept_now(&self) -> io::Result<SyncConn> {
        match &self.inner {
            SyncInner::Unix(l) => l.accept().map(|(s, _)| SyncConn::Unix(s)),
            SyncInner::Tcp(l) => l.accept().map(|(s, peer)| SyncConn::Tcp(s, peer)),
        }
    }

    /// A second descriptor of the socket, to wait on for queued connections.
    pub(crate) fn watcher(&self) -> io::Result<std::os::fd::OwnedFd> {
        match &self.inner {
            SyncInner::Unix(l) => l.try_clone().map(Into::into),
            SyncInner::Tcp(l) => l.try_clone().map(Into::into),
        }
    }
}

/// A connection taken in by a [`SyncListener`], not yet handed to the runtime.
pub(crate) enum SyncConn {
    Unix(std::os::unix::net::UnixStream),
    Tcp(std::net::TcpStream, std::net::SocketAddr),
}

impl SyncConn {
    /// The connection as a runtime stream (call inside the runtime), and its peer for logs.
    pub(crate) fn into_conn(self) -> io::Result<(Conn, String)> {
        match self {
            SyncConn::Unix(s) => {
                s.set_nonblocking(true)?;
                let s = UnixStream::from_std(s)?;
                let peer = unix_peer(&s);
                Ok((Conn::Unix(s), peer))
            }
            SyncConn::Tcp(s, peer) => {
                s.set_nonblocking(true)?;
                Ok((Conn::Tcp(TcpStream::from_std(s)?), peer.to_string()))
            }
        }
    }
}

/// Why [`bind_unix`] failed.
#[derive(Debug)]
pub enum UnixBindError {
    /// Something that is not a socket is at the path; it is left alone.
    NotASocket,
    /// Creating, binding, setting the mode or renaming failed.
    Io(io::Error),
}

impl From<io::Error> for UnixBindError {
    fn from(e: io::Error) -> Self {
        UnixBindError::Io(e)
    }
}

/// Binds a Unix socket at `path` with `mode`, replacing a stale socket file there.
///
/// Salt sets the process umask to `0177` around `bind` + `chmod`; a umask is process-wide,
/// which is unsafe in a multi-threaded daemon. Halite binds inside a fresh private (`0700`)
/// directory next to `path`, sets the mode, then renames the socket into place, so the
/// socket is never reachable with a looser mode. The rename also replaces a stale socket
/// atomically; anything at `path` that is not a socket is left alone and is an error.
///
/// Every Unix socket a Halite daemon listens on is bound this way (the bus, the event
/// journal's replay socket, the master's metrics socket). Must run inside a tokio runtime.
pub fn bind_unix(
    path: &Path,
    mode: u32,
) -> std::result::Result<(UnixListener, SocketFile), UnixBindError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            debug!(path = %path.display(), "Replacing stale socket")
        }
        Ok(_) => return Err(UnixBindError::NotASocket),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let private = tempfile::Builder::new().prefix(".hb").tempdir_in(dir)?;
    let tmp = private.path().join("s");
    let listener = UnixListener::bind(&tmp)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
    let meta = std::fs::symlink_metadata(&tmp)?;
    std::fs::rename(&tmp, path)?;
    Ok((
        listener,
        SocketFile {
            path: path.to_owned(),
            dev: meta.dev(),
            ino: meta.ino(),
        },
    ))
}

/// A socket file this process bound. Dropping it removes the file, unless another process
/// has since bound a new socket at the same path.
pub struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if m.dev() == self.dev && m.ino() == self.ino {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    debug!(path = %self.path.display(), error = %e, "Cannot remove event bus socket");
                }
            }
        }
    }
}

/// A connected bus stream.
pub(crate) enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    /// Connects to a bus socket.
    pub(crate) async fn connect(addr: &BusAddr) -> Result<Conn> {
        let err = |source| Error::Connect {
            addr: addr.clone(),
            source,
        };
        match addr {
            BusAddr::Unix(path) => UnixStream::connect(path).await.map(Conn::Unix).map_err(err),
            BusAddr::Tcp(port) => TcpStream::connect(("127.0.0.1", *port))
                .await
                .map(Conn::Tcp)
                .map_err(err),
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tcp(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tcp(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Unix(s) => Pin::new(s).poll_flush(cx),
            Conn::Tcp(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bind_sets_mode_and_replaces_stale_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ipc");
        let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(stale);
        let (bound, _) = Bound::bind(&BusAddr::Unix(path.clone()), 0o660)
            .await
            .unwrap();
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert!(m.file_type().is_socket());
        assert_eq!(m.permissions().mode() & 0o7777, 0o660);
        // Only the socket is left in the directory: the private bind directory is gone.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        UnixStream::connect(&path).await.unwrap();
        drop(bound);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn bind_refuses_to_replace_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ipc");
        std::fs::write(&path, b"keep me").unwrap();
        let r = Bound::bind(&BusAddr::Unix(path.clone()), 0o600).await;
        assert!(matches!(r, Err(Error::NotASocket(p)) if p == path));
        assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
    }

    #[tokio::test]
    async fn dropping_keeps_a_socket_another_process_rebound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ipc");
        let (first, _) = Bound::bind(&BusAddr::Unix(path.clone()), 0o600)
            .await
            .unwrap();
        let (second, _) = Bound::bind(&BusAddr::Unix(path.clone()), 0o600)
            .await
            .unwrap();
        drop(first);
        assert!(path.exists());
        drop(second);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn tcp_port_zero_reports_the_real_port() {
        let (_bound, addr) = Bound::bind(&BusAddr::Tcp(0), 0o600).await.unwrap();
        assert!(matches!(addr, BusAddr::Tcp(p) if p != 0));
    }
}
