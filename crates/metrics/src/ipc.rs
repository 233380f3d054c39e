//! The metrics socket: `<sock_dir>/master_metrics.ipc`. A client connects; the server
//! writes one snapshot (4-byte big-endian length, then the msgpack body) and closes.
//!
//! The socket is bound the way the bus and the journal bind theirs (that code is private to
//! those crates): inside a fresh `0700` directory next to the target, mode set, renamed
//! into place, so it is never reachable with a looser mode; a stale socket is replaced,
//! anything else at the path is left alone and is an error.

use crate::snapshot::{Snapshot, MAX_SNAPSHOT_BYTES};
use crate::{Error, Result};
use halite_bus::{SocketFile, UnixBindError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The socket's file name in the master's `sock_dir`.
pub const SOCKET_NAME: &str = "master_metrics.ipc";

/// How long [`fetch`] callers usually wait for a snapshot.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(2);

/// Clients served at once; more are closed at once (the reader sees an error).
pub const MAX_CLIENTS: usize = 8;

/// The socket's mode: only the master's user may read its metrics.
const MODE: u32 = 0o600;

/// How long the server gives one client to take its snapshot.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// The metrics socket of the master whose `sock_dir` is `sock_dir`.
pub fn socket_path(sock_dir: &Path) -> PathBuf {
    sock_dir.join(SOCKET_NAME)
}

/// What a snapshot is taken with, on a blocking thread, once per client.
type Source = Arc<dyn Fn() -> Snapshot + Send + Sync>;

/// A bound metrics socket, ready to [`run`](MetricsServer::run).
pub struct MetricsServer {
    listener: UnixListener,
    file: SocketFile,
}

impl MetricsServer {
    /// Binds the socket at `path` (mode `0600`), replacing a stale socket there. Must run
    /// inside a tokio runtime.
    ///
    /// # Errors
    /// [`Error::NotASocket`] when something else is at `path`; [`Error::Bind`] when the
    /// socket cannot be made.
    pub fn bind(path: &Path) -> Result<MetricsServer> {
        let (listener, file) = bind(path)?;
        Ok(MetricsServer { listener, file })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Serves until `cancel`: each client gets `source()` (run on a blocking thread) and
    /// the connection is closed. Then waits for the clients being served (each bounded by a
    /// write timeout) and removes the socket file.
    pub async fn run<F>(self, source: F, cancel: CancellationToken)
    where
        F: Fn() -> Snapshot + Send + Sync + 'static,
    {
        let source: Source = Arc::new(source);
        let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
        let clients = TaskTracker::new();
        loop {
            let stream = tokio::select! {
                r = self.listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!("Metrics socket accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                () = cancel.cancelled() => break,
            };
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                tracing::debug!("Metrics socket busy: a client was closed unanswered");
                continue;
            };
            let source = source.clone();
            clients.spawn(async move {
                let _permit = permit;
                serve_one(stream, source).await;
            });
        }
        clients.close();
        clients.wait().await;
    }
}

/// Writes one snapshot to `stream` within [`WRITE_TIMEOUT`].
async fn serve_one(mut stream: UnixStream, source: Source) {
    let snapshot = match tokio::task::spawn_blocking(move || source().encode()).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => {
            tracing::warn!("Metrics snapshot not served: {e}");
            return;
        }
        Err(e) => {
            tracing::warn!("Metrics snapshot not taken: {e}");
            return;
        }
    };
    // `encode` keeps a snapshot within MAX_SNAPSHOT_BYTES, which fits in 4 bytes.
    let len = u32::try_from(snapshot.len()).unwrap_or(u32::MAX);
    let write = async {
        stream.write_all(&len.to_be_bytes()).await?;
        stream.write_all(&snapshot).await?;
        stream.shutdown().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!("Metrics client left early: {e}"),
        Err(_) => tracing::debug!("Metrics client did not read its snapshot in time"),
    }
}

/// Reads one snapshot from the metrics socket at `path` within `timeout`.
///
/// # Errors
/// [`Error::Io`] when there is no socket or no server behind it (no master, a stock
/// master) or the reply is cut short; [`Error::Timeout`]; [`Error::TooLarge`] when the
/// announced length is over [`MAX_SNAPSHOT_BYTES`] (nothing more is read);
/// [`Error::Malformed`] when the body is not a valid snapshot.
pub async fn fetch(path: &Path, timeout: Duration) -> Result<Snapshot> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let read = async {
        let mut stream = UnixStream::connect(path).await.map_err(io)?;
        let mut len = [0u8; 4];
        stream.read_exact(&mut len).await.map_err(io)?;
        let len = u32::from_be_bytes(len);
        let size = usize::try_from(len).unwrap_or(usize::MAX);
        if size > MAX_SNAPSHOT_BYTES {
            return Err(Error::TooLarge {
                size: u64::from(len),
                limit: MAX_SNAPSHOT_BYTES,
            });
        }
        let mut body = vec![0u8; size];
        stream.read_exact(&mut body).await.map_err(io)?;
        Snapshot::decode(&body)
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(r) => r,
        Err(_) => Err(Error::Timeout {
            path: path.to_owned(),
            timeout,
        }),
    }
}

/// Binds a Unix socket at `path` with [`MODE`], replacing a stale socket file
/// ([`halite_bus::bind_unix`], the scheme of every Halite daemon socket).
fn bind(path: &Path) -> Result<(UnixListener, SocketFile)> {
    halite_bus::bind_unix(path, MODE).map_err(|e| match e {
        UnixBindError::NotASocket => Error::NotASocket(path.to_owned()),
        UnixBindError::Io(source) => Error::Bind {
            path: path.to_owned(),
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::{MasterMetrics, Sampled};
    use std::os::unix::fs::PermissionsExt;

    fn source() -> impl Fn() -> Snapshot + Send + Sync + 'static {
        let m = MasterMetrics::new(["publish"]);
        m.count_publish();
        move || m.snapshot(&Sampled::default())
    }

    /// Serves `reply` (raw bytes) to one client at `path`.
    async fn raw_server(path: &Path, reply: Vec<u8>) -> tokio::task::JoinHandle<()> {
        let listener = UnixListener::bind(path).unwrap();
        tokio::spawn(async move {
            if let Ok((mut s, _)) = listener.accept().await {
                let _ = s.write_all(&reply).await;
                let _ = s.shutdown().await;
            }
        })
    }

    #[tokio::test]
    async fn a_client_gets_the_snapshot_and_the_socket_goes_with_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(dir.path());
        let server = MetricsServer::bind(&path).unwrap();
        assert_eq!(server.path(), path);
        let mode = std::fs::symlink_metadata(&path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o600);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(server.run(source(), cancel.clone()));
        for _ in 0..3 {
            let s = fetch(&path, FETCH_TIMEOUT).await.unwrap();
            let publishes = s.family("halite_master_publishes").unwrap();
            assert_eq!(publishes.samples[0].value, crate::SampleValue::Counter(1));
        }
        cancel.cancel();
        task.await.unwrap();
        assert!(!path.exists(), "the socket file is removed at the end");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "no private directory is left behind"
        );
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_regular_file_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SOCKET_NAME);
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        drop(MetricsServer::bind(&path).unwrap());
        std::fs::write(&path, b"keep").unwrap();
        assert!(matches!(
            MetricsServer::bind(&path),
            Err(Error::NotASocket(_))
        ));
        assert_eq!(std::fs::read(&path).unwrap(), b"keep");
    }

    #[tokio::test]
    async fn no_socket_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = fetch(&socket_path(dir.path()), FETCH_TIMEOUT)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err}");
    }

    #[tokio::test]
    async fn an_oversized_length_is_refused_without_reading_the_body() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.ipc");
        let _server = raw_server(&path, u32::MAX.to_be_bytes().to_vec()).await;
        let err = fetch(&path, FETCH_TIMEOUT).await.unwrap_err();
        assert!(
            matches!(err, Error::TooLarge { size, .. } if size == u64::from(u32::MAX)),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_short_or_garbled_reply_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short.ipc");
        let mut reply = 100u32.to_be_bytes().to_vec();
        reply.extend_from_slice(b"only a few bytes");
        let _a = raw_server(&short, reply).await;
        assert!(matches!(
            fetch(&short, FETCH_TIMEOUT).await,
            Err(Error::Io { .. })
        ));
        let garbled = dir.path().join("garbled.ipc");
        let mut reply = 3u32.to_be_bytes().to_vec();
        reply.extend_from_slice(b"\x93\xc1\xc1");
        let _b = raw_server(&garbled, reply).await;
        assert!(matches!(
            fetch(&garbled, FETCH_TIMEOUT).await,
            Err(Error::Malformed(_))
        ));
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("silent.ipc");
        let _listener = UnixListener::bind(&path).unwrap();
        let err = fetch(&path, Duration::from_millis(100)).await.unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
    }
}
