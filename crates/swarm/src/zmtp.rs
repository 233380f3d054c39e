//! A minimal ZMTP 3.0 client (NULL security mechanism) over a tokio TCP stream: enough to be
//! the REQ or SUB peer of libzmq's ROUTER and PUB sockets, which is all a Salt minion is to
//! its master (salt-protocol.md §2).
//!
//! Why not libzmq: a libzmq socket costs two file descriptors (the TCP connection and its
//! mailbox) and this machine's hard `RLIMIT_NOFILE` is 20,000, so 10,000 simulated minions
//! could not each hold a libzmq SUB socket. One tokio `TcpStream` per minion costs one.
//!
//! What it does, on the codec of `halite_transport::zmtp`: the 64-byte greeting, the
//! `READY` handshake with `Socket-Type` (and `Identity` for REQ), multipart messages with
//! short and long frames, ZMTP 3.0 subscriptions (a message starting with `0x01`), and
//! answering the heartbeat `PING` commands of libzmq or Halite's publish engine with `PONG`.
//! What it does not do: CURVE/PLAIN security, reconnection (callers reconnect), or REQ's
//! strict send/receive alternation (callers keep one request in flight per connection).

use crate::Error;
pub use halite_transport::zmtp::SocketType;
use halite_transport::zmtp::{self, ProtocolError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest frame accepted from the master; a bigger one ends the connection.
pub const MAX_FRAME: usize = 64 << 20;

impl From<ProtocolError> for Error {
    fn from(e: ProtocolError) -> Self {
        Error::Zmtp(e.0)
    }
}

/// A connected, handshaken ZMTP peer.
///
/// [`Conn::recv`] is not cancel-safe: a connection whose `recv` was cancelled (by a
/// timeout) must be dropped.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    frames: zmtp::FrameBuf,
    parts: Vec<Vec<u8>>,
}

impl Conn {
    /// Connects to `addr` (`host:port`) and performs the greeting and `READY` exchange,
    /// all within `timeout`.
    pub async fn connect(
        addr: &str,
        kind: SocketType,
        identity: &[u8],
        timeout: Duration,
    ) -> Result<Conn, Error> {
        tokio::time::timeout(timeout, Self::handshake(addr, kind, identity))
            .await
            .map_err(|_| Error::Timeout(timeout))?
    }

    async fn handshake(addr: &str, kind: SocketType, identity: &[u8]) -> Result<Conn, Error> {
        let stream = TcpStream::connect(addr).await.map_err(io(addr))?;
        stream.set_nodelay(true).map_err(io(addr))?;
        let mut conn = Conn {
            stream,
            frames: zmtp::FrameBuf::new(MAX_FRAME),
            parts: Vec::new(),
        };
        conn.stream
            .write_all(&zmtp::greeting())
            .await
            .map_err(io(addr))?;
        let mut theirs = [0u8; zmtp::GREETING_LEN];
        conn.stream
            .read_exact(&mut theirs)
            .await
            .map_err(io(addr))?;
        zmtp::check_greeting(&theirs)?;
        let mut out = Vec::new();
        zmtp::encode_frame(&mut out, &zmtp::ready_body(kind, identity), false, true);
        conn.stream.write_all(&out).await.map_err(io(addr))?;
        let command = conn.next_command().await?;
        zmtp::check_ready(kind, &command)?;
        Ok(conn)
    }

    async fn next_command(&mut self) -> Result<Vec<u8>, Error> {
        loop {
            if let Some(frame) = self.frames.next_frame()? {
                if !frame.command {
                    return Err(Error::Zmtp("message before READY".into()));
                }
                return Ok(frame.body.to_vec());
            }
            self.fill().await?;
        }
    }

    /// Reads more bytes into the frame buffer.
    async fn fill(&mut self) -> Result<(), Error> {
        let n = self
            .stream
            .read_buf(self.frames.spare(4096))
            .await
            .map_err(|e| Error::Io {
                what: "reading from the master".into(),
                source: e,
            })?;
        if n == 0 {
            return Err(Error::Zmtp("the master closed the connection".into()));
        }
        Ok(())
    }

    /// Sends one multipart message.
    pub async fn send(&mut self, frames: &[&[u8]]) -> Result<(), Error> {
        let mut out = Vec::with_capacity(frames.iter().map(|f| f.len() + 9).sum());
        for (i, f) in frames.iter().enumerate() {
            zmtp::encode_frame(&mut out, f, i + 1 < frames.len(), false);
        }
        self.stream.write_all(&out).await.map_err(|e| Error::Io {
            what: "writing to the master".into(),
            source: e,
        })
    }

    /// Subscribes to every publish (a ZMTP 3.0 subscription message with an empty topic).
    pub async fn subscribe_all(&mut self) -> Result<(), Error> {
        self.send(&[&[1u8]]).await
    }

    /// Receives the next multipart message, answering heartbeats on the way.
    pub async fn recv(&mut self) -> Result<Vec<Vec<u8>>, Error> {
        loop {
            while let Some(frame) = self.frames.next_frame()? {
                let (more, command) = (frame.more, frame.command);
                let body = frame.body.to_vec();
                if command {
                    if let Some(pong) = zmtp::pong_for(&body)? {
                        self.stream.write_all(&pong).await.map_err(|e| Error::Io {
                            what: "answering a heartbeat".into(),
                            source: e,
                        })?;
                    }
                    continue;
                }
                self.parts.push(body);
                if !more {
                    return Ok(std::mem::take(&mut self.parts));
                }
            }
            self.fill().await?;
        }
    }
}

fn io(addr: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        what: format!("connection to {addr}"),
        source,
    }
}
