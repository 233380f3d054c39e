//! A minimal ZMTP 3.0 client (NULL security mechanism) over a tokio TCP stream: enough to be
//! the REQ or SUB peer of libzmq's ROUTER and PUB sockets, which is all a Salt minion is to
//! its master (salt-protocol.md §2).
//!
//! Why not libzmq: a libzmq socket costs two file descriptors (the TCP connection and its
//! mailbox) and this machine's hard `RLIMIT_NOFILE` is 20,000, so 10,000 simulated minions
//! could not each hold a libzmq SUB socket. One tokio `TcpStream` per minion costs one.
//!
//! What it does: the 64-byte greeting, the `READY` handshake with `Socket-Type` (and
//! `Identity` for REQ), multipart messages with short and long frames, ZMTP 3.0
//! subscriptions (a message starting with `0x01`), and answering the heartbeat `PING`
//! commands libzmq sends when `ZMQ_HEARTBEAT_IVL` is set (Salt and Halite set it) with `PONG`.
//! What it does not do: CURVE/PLAIN security, reconnection (callers reconnect), or REQ's
//! strict send/receive alternation (callers keep one request in flight per connection).

use crate::Error;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest frame accepted from the master; a bigger one ends the connection.
pub const MAX_FRAME: usize = 64 << 20;

/// Length of the ZMTP 3 greeting.
pub const GREETING_LEN: usize = 64;

const FLAG_MORE: u8 = 0x01;
const FLAG_LONG: u8 = 0x02;
const FLAG_COMMAND: u8 = 0x04;

/// The socket type this end announces in `READY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketType {
    /// A request socket, for the master's ROUTER (`ret_port`).
    Req,
    /// A subscriber, for the master's PUB (`publish_port`).
    Sub,
}

impl SocketType {
    /// The `Socket-Type` property value.
    pub fn name(self) -> &'static str {
        match self {
            SocketType::Req => "REQ",
            SocketType::Sub => "SUB",
        }
    }

    /// The peer socket type this one may talk to.
    fn peer(self) -> &'static str {
        match self {
            SocketType::Req => "ROUTER",
            SocketType::Sub => "PUB",
        }
    }
}

/// Our greeting: ZMTP 3.0, NULL mechanism, as client.
pub fn greeting() -> [u8; GREETING_LEN] {
    let mut g = [0u8; GREETING_LEN];
    g[0] = 0xff;
    g[9] = 0x7f;
    g[10] = 3;
    g[11] = 0;
    g[12..16].copy_from_slice(b"NULL");
    g
}

/// Checks the peer's greeting: the signature, major version 3 or later, NULL mechanism.
pub fn check_greeting(g: &[u8; GREETING_LEN]) -> Result<(), Error> {
    if g[0] != 0xff || g[9] & 0x01 != 0x01 {
        return Err(Error::Zmtp(
            "the peer's greeting has no ZMTP signature".into(),
        ));
    }
    if g[10] < 3 {
        return Err(Error::Zmtp(format!(
            "the peer speaks ZMTP {}.{}, 3.0 or later is needed",
            g[10], g[11]
        )));
    }
    let mechanism = &g[12..32];
    let end = mechanism
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(mechanism.len());
    if &mechanism[..end] != b"NULL" {
        return Err(Error::Zmtp(format!(
            "the peer wants security mechanism {:?}, only NULL is supported",
            String::from_utf8_lossy(&mechanism[..end])
        )));
    }
    Ok(())
}

/// Appends one frame (header and body) to `out`.
pub fn encode_frame(out: &mut Vec<u8>, body: &[u8], more: bool, command: bool) {
    let mut flags = 0;
    if more {
        flags |= FLAG_MORE;
    }
    if command {
        flags |= FLAG_COMMAND;
    }
    if body.len() > 255 {
        out.push(flags | FLAG_LONG);
        out.extend_from_slice(&(body.len() as u64).to_be_bytes());
    } else {
        out.push(flags);
        out.push(body.len() as u8);
    }
    out.extend_from_slice(body);
}

/// The body of a `READY` command announcing `kind` (and `identity` for REQ).
pub fn ready_body(kind: SocketType, identity: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(64 + identity.len());
    b.push(5);
    b.extend_from_slice(b"READY");
    let mut prop = |name: &str, value: &[u8]| {
        b.push(name.len() as u8);
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(&(value.len() as u32).to_be_bytes());
        b.extend_from_slice(value);
    };
    prop("Socket-Type", kind.name().as_bytes());
    if kind == SocketType::Req {
        prop("Identity", identity);
    }
    b
}

/// A command: its name and data.
fn split_command(body: &[u8]) -> Result<(&[u8], &[u8]), Error> {
    let n = *body
        .first()
        .ok_or_else(|| Error::Zmtp("empty command frame".into()))? as usize;
    if body.len() < 1 + n {
        return Err(Error::Zmtp("truncated command name".into()));
    }
    Ok((&body[1..1 + n], &body[1 + n..]))
}

/// Reads the `Socket-Type` property of a `READY` command's data.
pub fn ready_socket_type(data: &[u8]) -> Result<String, Error> {
    let mut rest = data;
    while !rest.is_empty() {
        let n = rest[0] as usize;
        let name = rest
            .get(1..1 + n)
            .ok_or_else(|| Error::Zmtp("truncated READY property name".into()))?;
        let len_bytes: [u8; 4] = rest
            .get(1 + n..5 + n)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| Error::Zmtp("truncated READY property length".into()))?;
        let len = u32::from_be_bytes(len_bytes) as usize;
        let value = rest
            .get(5 + n..5 + n + len)
            .ok_or_else(|| Error::Zmtp("truncated READY property value".into()))?;
        if name.eq_ignore_ascii_case(b"Socket-Type") {
            return Ok(String::from_utf8_lossy(value).into_owned());
        }
        rest = &rest[5 + n + len..];
    }
    Err(Error::Zmtp("READY without Socket-Type".into()))
}

/// One frame parsed from the front of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// More frames of the same message follow.
    pub more: bool,
    /// A command frame, not a message frame.
    pub command: bool,
    /// The frame body.
    pub body: &'a [u8],
}

/// Parses one frame from the front of `buf`: `None` when more bytes are needed, else the
/// frame and the bytes it took.
pub fn parse_frame(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, Error> {
    let Some(&flags) = buf.first() else {
        return Ok(None);
    };
    if flags & !(FLAG_MORE | FLAG_LONG | FLAG_COMMAND) != 0 {
        return Err(Error::Zmtp(format!("invalid frame flags {flags:#04x}")));
    }
    let (size, header) = if flags & FLAG_LONG != 0 {
        let Some(raw) = buf.get(1..9) else {
            return Ok(None);
        };
        let mut b = [0u8; 8];
        b.copy_from_slice(raw);
        (u64::from_be_bytes(b), 9)
    } else {
        let Some(&n) = buf.get(1) else {
            return Ok(None);
        };
        (u64::from(n), 2)
    };
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| s <= MAX_FRAME)
        .ok_or_else(|| Error::Zmtp(format!("frame of {size} bytes exceeds {MAX_FRAME}")))?;
    let Some(body) = buf.get(header..header + size) else {
        return Ok(None);
    };
    Ok(Some((
        Frame {
            more: flags & FLAG_MORE != 0,
            command: flags & FLAG_COMMAND != 0,
            body,
        },
        header + size,
    )))
}

/// The `PONG` command answering a `PING` command's data (`TTL` then context), if it is one.
pub fn pong_for(command: &[u8]) -> Result<Option<Vec<u8>>, Error> {
    let (name, data) = split_command(command)?;
    if name != b"PING" {
        return Ok(None);
    }
    let context = data.get(2..).unwrap_or_default();
    let mut body = Vec::with_capacity(5 + context.len());
    body.push(4);
    body.extend_from_slice(b"PONG");
    body.extend_from_slice(&context[..context.len().min(16)]);
    let mut out = Vec::with_capacity(body.len() + 2);
    encode_frame(&mut out, &body, false, true);
    Ok(Some(out))
}

/// A connected, handshaken ZMTP peer.
///
/// [`Conn::recv`] is not cancel-safe: a connection whose `recv` was cancelled (by a
/// timeout) must be dropped.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
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
            buf: Vec::new(),
            start: 0,
            parts: Vec::new(),
        };
        conn.stream.write_all(&greeting()).await.map_err(io(addr))?;
        let mut theirs = [0u8; GREETING_LEN];
        conn.stream
            .read_exact(&mut theirs)
            .await
            .map_err(io(addr))?;
        check_greeting(&theirs)?;
        let mut out = Vec::new();
        encode_frame(&mut out, &ready_body(kind, identity), false, true);
        conn.stream.write_all(&out).await.map_err(io(addr))?;
        let command = conn.next_command().await?;
        let (name, data) = split_command(&command)?;
        match name {
            b"READY" => {
                let peer = ready_socket_type(data)?;
                if peer != kind.peer() {
                    return Err(Error::Zmtp(format!(
                        "a {} socket cannot talk to a {peer} socket",
                        kind.name()
                    )));
                }
                Ok(conn)
            }
            b"ERROR" => Err(Error::Zmtp(format!(
                "the peer refused the handshake: {}",
                String::from_utf8_lossy(data.get(1..).unwrap_or_default())
            ))),
            other => Err(Error::Zmtp(format!(
                "unexpected command {:?} during the handshake",
                String::from_utf8_lossy(other)
            ))),
        }
    }

    async fn next_command(&mut self) -> Result<Vec<u8>, Error> {
        loop {
            if let Some((frame, used)) = parse_frame(&self.buf[self.start..])? {
                if !frame.command {
                    return Err(Error::Zmtp("message before READY".into()));
                }
                let body = frame.body.to_vec();
                self.start += used;
                return Ok(body);
            }
            self.fill().await?;
        }
    }

    /// Reads more bytes into the buffer, compacting it first.
    async fn fill(&mut self) -> Result<(), Error> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if self.buf.is_empty() && self.buf.capacity() > 64 * 1024 {
            self.buf = Vec::new();
        }
        self.buf.reserve(4096);
        let n = self
            .stream
            .read_buf(&mut self.buf)
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
            encode_frame(&mut out, f, i + 1 < frames.len(), false);
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
            while let Some((frame, used)) = parse_frame(&self.buf[self.start..])? {
                let (more, command) = (frame.more, frame.command);
                let body = frame.body.to_vec();
                self.start += used;
                if command {
                    if let Some(pong) = pong_for(&body)? {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greeting_is_zmtp_3_0_null_client() {
        let g = greeting();
        assert_eq!((g[0], g[9], g[10], g[11]), (0xff, 0x7f, 3, 0));
        assert_eq!(&g[12..16], b"NULL");
        assert!(g[16..].iter().all(|&b| b == 0));
        check_greeting(&g).unwrap();
    }

    #[test]
    fn greetings_of_other_protocols_or_mechanisms_are_refused() {
        let mut old = greeting();
        old[10] = 2;
        let mut curve = greeting();
        curve[12..17].copy_from_slice(b"CURVE");
        let mut http = [0u8; GREETING_LEN];
        http[..4].copy_from_slice(b"HTTP");
        for g in [old, curve, http] {
            assert!(check_greeting(&g).is_err());
        }
    }

    #[test]
    fn frames_round_trip_short_and_long() {
        let long = vec![7u8; 300];
        let mut out = Vec::new();
        encode_frame(&mut out, b"", true, false);
        encode_frame(&mut out, &long, false, false);
        encode_frame(&mut out, b"cmd", false, true);
        let (f1, n1) = parse_frame(&out).unwrap().unwrap();
        assert_eq!(
            f1,
            Frame {
                more: true,
                command: false,
                body: b""
            }
        );
        let (f2, n2) = parse_frame(&out[n1..]).unwrap().unwrap();
        assert_eq!((f2.more, f2.body.len()), (false, 300));
        assert_eq!(out[n1], FLAG_LONG);
        let (f3, n3) = parse_frame(&out[n1 + n2..]).unwrap().unwrap();
        assert!(f3.command);
        assert_eq!(n1 + n2 + n3, out.len());
    }

    #[test]
    fn partial_frames_ask_for_more_bytes() {
        let mut out = Vec::new();
        encode_frame(&mut out, &[1u8; 300], false, false);
        for cut in [0, 1, 5, 9, 100, out.len() - 1] {
            assert_eq!(parse_frame(&out[..cut]).unwrap(), None, "cut at {cut}");
        }
    }

    #[test]
    fn oversized_or_invalid_frames_are_errors() {
        let mut huge = vec![FLAG_LONG];
        huge.extend_from_slice(&u64::MAX.to_be_bytes());
        assert!(parse_frame(&huge).is_err());
        assert!(parse_frame(&[0x80, 0]).is_err());
    }

    #[test]
    fn ready_announces_socket_type_and_req_identity() {
        let req = ready_body(SocketType::Req, b"me");
        let (name, data) = split_command(&req).unwrap();
        assert_eq!(name, b"READY");
        assert_eq!(ready_socket_type(data).unwrap(), "REQ");
        assert!(req.ends_with(b"Identity\0\0\0\x02me"));
        let sub = ready_body(SocketType::Sub, b"ignored");
        assert!(!sub.windows(8).any(|w| w == b"Identity"));
        assert!(ready_socket_type(&data[..5]).is_err());
    }

    #[test]
    fn ping_is_answered_with_pong_and_its_context() {
        let mut ping = vec![4];
        ping.extend_from_slice(b"PING");
        ping.extend_from_slice(&[0, 100]);
        ping.extend_from_slice(b"ctx");
        let pong = pong_for(&ping).unwrap().unwrap();
        assert_eq!(pong, b"\x04\x08\x04PONGctx");
        let mut other = vec![4];
        other.extend_from_slice(b"PONG");
        assert_eq!(pong_for(&other).unwrap(), None);
        assert!(pong_for(&[9, b'x']).is_err());
    }
}
