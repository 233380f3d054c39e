//! The replay socket: one session per connection, journal first, then live batches.
//!
//! Hand-over without gap or duplicate: a session subscribes to committed batches before it
//! reads anything from the journal, and keeps `next`, the id it will send next. Every batch
//! committed after the subscription reaches the session live; every batch committed before it
//! is already readable from the journal. So the session reads the journal from `next` until
//! it has caught up, then for each live batch skips ids below `next`, fills a hole above
//! `next` from the journal (the session lagged behind the live channel), and sends the rest.

use crate::socket::{self, SocketFile};
use crate::store::Journal;
use crate::wire::{self, Request, Start};
use crate::writer::Committed;
use crate::{Error, Result};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

/// Replay connections served at once; beyond that, new connections are closed at once with a
/// warning.
pub const MAX_SESSIONS: usize = 256;

/// A client must send its whole request within this time after connecting.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Events read from the journal per read transaction while catching up.
const CATCH_UP_EVENTS: usize = 4096;

/// Body bytes read from the journal per read transaction while catching up.
const CATCH_UP_BYTES: usize = 8 * 1024 * 1024;

/// Time allowed to write the error message to a client whose request was refused.
const ERROR_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Pause after a failed `accept` (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

pub(crate) struct ReplayServer {
    listener: UnixListener,
    _file: SocketFile,
    shared: Arc<Shared>,
}

struct Shared {
    journal: Arc<Journal>,
    live: broadcast::Sender<Arc<Committed>>,
    socket: std::path::PathBuf,
}

impl ReplayServer {
    /// Binds the replay socket (mode `0600`: only the master's user may read the journal).
    pub(crate) fn bind(
        path: &std::path::Path,
        journal: Arc<Journal>,
        live: broadcast::Sender<Arc<Committed>>,
    ) -> Result<ReplayServer> {
        let (listener, file) = socket::bind(path, 0o600)?;
        Ok(ReplayServer {
            listener,
            _file: file,
            shared: Arc::new(Shared {
                journal,
                live,
                socket: path.to_owned(),
            }),
        })
    }

    /// Serves until `stop` is cancelled, then closes every session and removes the socket.
    pub(crate) async fn run(self, stop: CancellationToken) {
        info!(socket = %self.shared.socket.display(), "Event journal replay socket listening");
        let tracker = TaskTracker::new();
        let slots = Arc::new(Semaphore::new(MAX_SESSIONS));
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => break,
                r = self.listener.accept() => r,
            };
            let conn = match accepted {
                Ok((conn, _)) => conn,
                Err(e) => {
                    warn!(error = %e, "Event journal socket accept failed");
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    }
                }
            };
            let peer = match conn.peer_cred() {
                Ok(c) => match c.pid() {
                    Some(pid) => format!("pid {pid} uid {}", c.uid()),
                    None => format!("uid {}", c.uid()),
                },
                Err(_) => "unknown peer".to_owned(),
            };
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                warn!(%peer, limit = MAX_SESSIONS, "Event journal connection limit reached; closing new connection");
                continue;
            };
            debug!(%peer, "Event journal replay client connected");
            tracker.spawn(session(
                conn,
                peer,
                self.shared.clone(),
                stop.clone(),
                permit,
            ));
        }
        tracker.close();
        tracker.wait().await;
        debug!(socket = %self.shared.socket.display(), "Event journal replay socket closed");
    }
}

/// Reads one framed request.
async fn read_request<R: AsyncRead + Unpin>(rd: &mut R) -> Result<Request> {
    let mut buf = Vec::new();
    loop {
        if let Some((range, _)) = wire::check_frame(&buf, wire::MAX_REQUEST)? {
            return Request::decode(&buf[range]);
        }
        let mut chunk = [0u8; 1024];
        let n = rd
            .read(&mut chunk)
            .await
            .map_err(|e| Error::Protocol(format!("reading the request: {e}")))?;
        if n == 0 {
            return Err(Error::Protocol(if buf.is_empty() {
                "connection closed before a request".into()
            } else {
                format!("connection closed after {} bytes of a request", buf.len())
            }));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn session(
    conn: tokio::net::UnixStream,
    peer: String,
    shared: Arc<Shared>,
    stop: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    let (mut rd, mut wr) = conn.into_split();
    let request = match tokio::time::timeout(REQUEST_TIMEOUT, read_request(&mut rd)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return refuse(&mut wr, &peer, &e.to_string()).await,
        Err(_) => {
            return refuse(
                &mut wr,
                &peer,
                &format!("no request within {}s", REQUEST_TIMEOUT.as_secs()),
            )
            .await
        }
    };
    debug!(%peer, ?request, "Event journal replay requested");
    // Subscribe before the first journal read: see the module doc.
    let live = shared.live.subscribe();
    let replay = async {
        let journal = shared.journal.clone();
        let start = request.start;
        let (first_id, next_id, from) = blocking(move || {
            let next_id = journal.next_id()?;
            let from = match start {
                Start::Id(id) => id,
                Start::Time(t) => journal.id_at_time(t)?,
                Start::Now => next_id,
            };
            Ok((journal.first_id()?, next_id, from))
        })
        .await?;
        let mut out = Vec::new();
        wire::write_hello(first_id, next_id, &mut out);
        write(&mut wr, &out).await?;
        let mut s = Session {
            journal: shared.journal.clone(),
            prefix: request.tag_prefix,
            next: from,
            wr: &mut wr,
        };
        s.follow(live).await
    };
    // The client only ever sends its request; a read returning means it went away.
    let gone = async {
        let mut scratch = [0u8; 256];
        loop {
            match rd.read(&mut scratch).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::select! {
        _ = stop.cancelled() => {}
        r = replay => if let Err(e) = r {
            debug!(%peer, error = %e, "Event journal replay ended");
        },
        _ = gone => debug!(%peer, "Event journal replay client disconnected"),
    }
}

/// Logs a refused request, tells the client why, and drops the connection.
async fn refuse<W: AsyncWrite + Unpin>(wr: &mut W, peer: &str, reason: &str) {
    warn!(%peer, reason, "Dropping event journal connection: bad request");
    let mut out = Vec::new();
    wire::write_error(reason, &mut out);
    let _ = tokio::time::timeout(ERROR_WRITE_TIMEOUT, wr.write_all(&out)).await;
}

async fn write<W: AsyncWrite + Unpin>(wr: &mut W, bytes: &[u8]) -> Result<()> {
    wr.write_all(bytes)
        .await
        .map_err(|e| Error::Protocol(format!("writing to the client: {e}")))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Corrupt(format!("journal read panicked: {e}")))?
}

/// Whether a packed event's tag starts with `prefix`.
fn tag_matches(body: &[u8], prefix: &str) -> bool {
    if prefix.is_empty() {
        return true;
    }
    let tag_end = body
        .windows(2)
        .position(|w| w == b"\n\n")
        .unwrap_or(body.len());
    body[..tag_end].starts_with(prefix.as_bytes())
}

struct Session<'a, W> {
    journal: Arc<Journal>,
    prefix: String,
    /// The id to send next: every id below it was sent or skipped.
    next: u64,
    wr: &'a mut W,
}

impl<W: AsyncWrite + Unpin> Session<'_, W> {
    async fn follow(&mut self, mut live: broadcast::Receiver<Arc<Committed>>) -> Result<()> {
        self.catch_up(u64::MAX).await?;
        loop {
            match live.recv().await {
                Ok(batch) => {
                    if batch.end_id() <= self.next {
                        continue;
                    }
                    if batch.first_id > self.next {
                        self.catch_up(batch.first_id).await?;
                        // Whatever is still missing was pruned before it could be read.
                        self.next = self.next.max(batch.first_id);
                    }
                    let mut out = Vec::new();
                    let skip = (self.next - batch.first_id) as usize;
                    for (event, id) in batch.events.iter().zip(batch.first_id..).skip(skip) {
                        if event.tag().starts_with(&self.prefix) {
                            wire::write_event(id, batch.time_us, event.body(), &mut out);
                        }
                    }
                    self.next = batch.end_id();
                    write(self.wr, &out).await?;
                }
                Err(RecvError::Lagged(n)) => {
                    debug!(
                        batches = n,
                        from = self.next,
                        "Event journal replay fell behind the live batches; reading the journal"
                    );
                    self.catch_up(u64::MAX).await?
                }
                Err(RecvError::Closed) => return Ok(()),
            }
        }
    }

    /// Sends stored events from `next` up to (not including) `to`.
    async fn catch_up(&mut self, to: u64) -> Result<()> {
        loop {
            let (journal, from) = (self.journal.clone(), self.next);
            let records =
                blocking(move || journal.read(from, to, CATCH_UP_EVENTS, CATCH_UP_BYTES)).await?;
            let Some(last) = records.last() else {
                return Ok(());
            };
            self.next = last.id + 1;
            let mut out = Vec::new();
            for r in &records {
                if tag_matches(&r.body, &self.prefix) {
                    wire::write_event(r.id, r.time_us, &r.body, &mut out);
                }
            }
            write(self.wr, &out).await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_prefix_is_matched_on_the_tag_only() {
        let cases = [
            (&b"salt/job/1\n\n\x80"[..], "salt/job/", true),
            (b"salt/job/1\n\n\x80", "", true),
            (b"salt/auth\n\n\x80", "salt/job/", false),
            (b"ab\n\n\x80", "ab\n", false),
            (b"ab\n\n\x80", "abc", false),
        ];
        for (body, prefix, want) in cases {
            assert_eq!(tag_matches(body, prefix), want, "{body:?} {prefix:?}");
        }
    }

    #[tokio::test]
    async fn a_truncated_request_is_refused() {
        let mut input: &[u8] = b"\0\0\0\x10abc";
        let err = read_request(&mut input).await.unwrap_err().to_string();
        assert!(err.contains("after 7 bytes"), "{err}");
        let mut empty: &[u8] = b"";
        let err = read_request(&mut empty).await.unwrap_err().to_string();
        assert!(err.contains("before a request"), "{err}");
        let mut huge: &[u8] = b"\x7f\0\0\0";
        let err = read_request(&mut huge).await.unwrap_err().to_string();
        assert!(err.contains("exceeds the limit"), "{err}");
    }
}
