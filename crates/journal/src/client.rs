//! The client end of the replay socket.

use crate::wire::{self, Reply, Request};
use crate::{Error, Result};
use halite_bus::frame_limit;
use std::path::{Path, PathBuf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Bytes asked of the kernel per read.
const READ_CHUNK: usize = 64 * 1024;

/// One replay connection: stored events from the requested start, then live ones.
pub struct ReplayStream {
    conn: UnixStream,
    path: PathBuf,
    limit: usize,
    buf: Vec<u8>,
    pos: usize,
    first_id: u64,
    next_id: u64,
}

impl ReplayStream {
    /// Connects to the replay socket at `path`, sends `request` and reads the server's hello.
    /// Frames larger than a master with `max_event_size` can send are refused.
    ///
    /// Errors: [`Error::Connect`] when nothing listens there, [`Error::Refused`] when the
    /// server refused the request, [`Error::Connection`] / [`Error::Protocol`] when the
    /// exchange breaks.
    pub async fn connect(
        path: &Path,
        request: &Request,
        max_event_size: usize,
    ) -> Result<ReplayStream> {
        let mut conn = UnixStream::connect(path)
            .await
            .map_err(|source| Error::Connect {
                path: path.to_owned(),
                source,
            })?;
        conn.write_all(&request.encode())
            .await
            .map_err(|e| Error::Connection {
                path: path.to_owned(),
                reason: e.to_string(),
            })?;
        let mut stream = ReplayStream {
            conn,
            path: path.to_owned(),
            limit: frame_limit(max_event_size).saturating_add(64),
            buf: Vec::new(),
            pos: 0,
            first_id: 0,
            next_id: 0,
        };
        match stream.next_reply().await? {
            Some(Reply::Hello { first_id, next_id }) => {
                stream.first_id = first_id;
                stream.next_id = next_id;
                Ok(stream)
            }
            Some(Reply::Error(msg)) => Err(Error::Refused(msg)),
            Some(Reply::Event { .. }) => Err(Error::Protocol("event before hello".into())),
            None => Err(stream.broken("closed before answering")),
        }
    }

    /// The oldest id the journal held when the request was served.
    pub fn first_id(&self) -> u64 {
        self.first_id
    }

    /// The id the next stored event was to get when the request was served.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// The next event: its id, the journal time (microseconds since the Unix epoch) and the
    /// packed body. `Ok(None)` when the server closed the connection (the master stopped).
    /// Cancel-safe: a cancelled call loses no bytes.
    pub async fn recv(&mut self) -> Result<Option<(u64, i64, Vec<u8>)>> {
        match self.next_reply().await? {
            Some(Reply::Event { id, time_us, body }) => Ok(Some((id, time_us, body))),
            Some(Reply::Error(msg)) => Err(Error::Refused(msg)),
            Some(Reply::Hello { .. }) => Err(Error::Protocol("second hello".into())),
            None => Ok(None),
        }
    }

    fn broken(&self, reason: &str) -> Error {
        Error::Connection {
            path: self.path.clone(),
            reason: reason.to_owned(),
        }
    }

    async fn next_reply(&mut self) -> Result<Option<Reply>> {
        loop {
            if let Some((range, used)) = wire::check_frame(&self.buf[self.pos..], self.limit)? {
                let start = self.pos;
                self.pos += used;
                let body = &self.buf[start + range.start..start + range.end];
                return Reply::decode(body).map(Some);
            }
            self.buf.drain(..self.pos);
            self.pos = 0;
            if self.buf.is_empty() && self.buf.capacity() > 4 * READ_CHUNK {
                self.buf = Vec::new();
            }
            self.buf.reserve(READ_CHUNK);
            let n = self
                .conn
                .read_buf(&mut self.buf)
                .await
                .map_err(|e| self.broken(&e.to_string()))?;
            if n == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(self.broken("closed in the middle of a message"))
                };
            }
        }
    }
}
