//! ZMTP 3 framing with the NULL security mechanism, free of I/O: the greeting, `READY`,
//! frames, subscriptions and heartbeats, as libzmq 4.3 speaks them (rfc.zeromq.org ZMTP
//! 3.0/3.1; salt-protocol.md §2). Both ends of Halite's own ZMTP engines use it: the
//! master's publish server ([`crate::pubserver`]) and the swarm's simulated minions.
//!
//! What it does not do: CURVE/PLAIN security (Salt encrypts inside the messages), ZMTP 1.0/2.0
//! peers (libzmq has spoken 3.x since 4.0), or any socket semantics: callers decide what a
//! frame means for their socket type.

use std::fmt;

/// Length of the ZMTP 3 greeting.
pub const GREETING_LEN: usize = 64;

const FLAG_MORE: u8 = 0x01;
const FLAG_LONG: u8 = 0x02;
const FLAG_COMMAND: u8 = 0x04;

/// The peer broke the protocol; the connection must be dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtocolError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(msg.into()))
}

/// The socket type an end announces in `READY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketType {
    /// A request socket, the minion's end of the master's ROUTER (`ret_port`).
    Req,
    /// A subscriber, the minion's end of the master's PUB (`publish_port`).
    Sub,
    /// A publisher, the master's `publish_port`.
    Pub,
}

impl SocketType {
    /// The `Socket-Type` property value.
    pub fn name(self) -> &'static str {
        match self {
            SocketType::Req => "REQ",
            SocketType::Sub => "SUB",
            SocketType::Pub => "PUB",
        }
    }

    /// Whether this socket may talk to a peer announcing `peer` (libzmq's
    /// `mechanism_t::check_socket_type`).
    pub fn accepts(self, peer: &str) -> bool {
        let ok: &[&str] = match self {
            SocketType::Req => &["ROUTER", "REP"],
            SocketType::Sub => &["PUB", "XPUB"],
            SocketType::Pub => &["SUB", "XSUB"],
        };
        ok.contains(&peer)
    }
}

/// Our greeting: ZMTP 3.0, NULL mechanism, `as-server` 0 (NULL has no roles).
///
/// Version 3.0 rather than 3.1 makes libzmq peers send subscriptions as `0x01`-prefixed
/// messages, the form every libzmq 4.x understands; [`subscription`] reads the 3.1 command
/// form too.
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
pub fn check_greeting(g: &[u8; GREETING_LEN]) -> Result<(), ProtocolError> {
    if g[0] != 0xff || g[9] & 0x01 != 0x01 {
        return err("the peer's greeting has no ZMTP signature");
    }
    if g[10] < 3 {
        return err(format!(
            "the peer speaks ZMTP {}.{}, 3.0 or later is needed",
            g[10], g[11]
        ));
    }
    let mechanism = &g[12..32];
    let end = mechanism
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(mechanism.len());
    if &mechanism[..end] != b"NULL" {
        return err(format!(
            "the peer wants security mechanism {:?}, only NULL is supported",
            String::from_utf8_lossy(&mechanism[..end])
        ));
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

/// The body of a command frame: the name's length, the name, the data.
pub fn command_body(name: &str, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(1 + name.len() + data.len());
    b.push(name.len() as u8);
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(data);
    b
}

/// The body of a `READY` command announcing `kind` (and `identity` for REQ).
pub fn ready_body(kind: SocketType, identity: &[u8]) -> Vec<u8> {
    let mut props = Vec::with_capacity(32 + identity.len());
    let mut prop = |name: &str, value: &[u8]| {
        props.push(name.len() as u8);
        props.extend_from_slice(name.as_bytes());
        props.extend_from_slice(&(value.len() as u32).to_be_bytes());
        props.extend_from_slice(value);
    };
    prop("Socket-Type", kind.name().as_bytes());
    if kind == SocketType::Req {
        prop("Identity", identity);
    }
    command_body("READY", &props)
}

/// The body of an `ERROR` command with `reason` (at most 255 bytes are sent).
pub fn error_body(reason: &str) -> Vec<u8> {
    let reason = &reason.as_bytes()[..reason.len().min(255)];
    let mut data = Vec::with_capacity(1 + reason.len());
    data.push(reason.len() as u8);
    data.extend_from_slice(reason);
    command_body("ERROR", &data)
}

/// A command's name and data.
pub fn split_command(body: &[u8]) -> Result<(&[u8], &[u8]), ProtocolError> {
    let Some(&n) = body.first() else {
        return err("empty command frame");
    };
    let n = usize::from(n);
    if body.len() < 1 + n {
        return err("truncated command name");
    }
    Ok((&body[1..1 + n], &body[1 + n..]))
}

/// Reads the `Socket-Type` property of a `READY` command's data.
pub fn ready_socket_type(data: &[u8]) -> Result<String, ProtocolError> {
    let mut rest = data;
    while !rest.is_empty() {
        let n = usize::from(rest[0]);
        let Some(name) = rest.get(1..1 + n) else {
            return err("truncated READY property name");
        };
        let Some(len_bytes) = rest.get(1 + n..5 + n) else {
            return err("truncated READY property length");
        };
        let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| (5 + n).checked_add(len))
            .filter(|&end| end <= rest.len());
        let Some(end) = end else {
            return err("truncated READY property value");
        };
        if name.eq_ignore_ascii_case(b"Socket-Type") {
            return Ok(String::from_utf8_lossy(&rest[5 + n..end]).into_owned());
        }
        rest = &rest[end..];
    }
    err("READY without Socket-Type")
}

/// Checks the peer's first command: a `READY` whose socket type `ours` may talk to. An
/// `ERROR` or any other command is a protocol error carrying the reason.
pub fn check_ready(ours: SocketType, command: &[u8]) -> Result<(), ProtocolError> {
    let (name, data) = split_command(command)?;
    match name {
        b"READY" => {
            let peer = ready_socket_type(data)?;
            if ours.accepts(&peer) {
                Ok(())
            } else {
                err(format!(
                    "a {} socket cannot talk to a {peer} socket",
                    ours.name()
                ))
            }
        }
        b"ERROR" => err(format!(
            "the peer refused the handshake: {}",
            String::from_utf8_lossy(data.get(1..).unwrap_or_default())
        )),
        other => err(format!(
            "unexpected command {:?} during the handshake",
            String::from_utf8_lossy(other)
        )),
    }
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
/// frame and the bytes it took. A frame larger than `max` is an error (before its body
/// arrives), so a peer cannot make the reader buffer more than `max`.
pub fn parse_frame(buf: &[u8], max: usize) -> Result<Option<(Frame<'_>, usize)>, ProtocolError> {
    let Some(&flags) = buf.first() else {
        return Ok(None);
    };
    if flags & !(FLAG_MORE | FLAG_LONG | FLAG_COMMAND) != 0 {
        return err(format!("invalid frame flags {flags:#04x}"));
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
    let Some(size) = usize::try_from(size).ok().filter(|&s| s <= max) else {
        return err(format!("frame of {size} bytes exceeds {max}"));
    };
    // Only a limit near `usize::MAX` lets this overflow (found by fuzzing).
    let Some(end) = usize::checked_add(header, size) else {
        return err(format!("frame of {size} bytes is larger than any buffer"));
    };
    let Some(body) = buf.get(header..end) else {
        return Ok(None);
    };
    Ok(Some((
        Frame {
            more: flags & FLAG_MORE != 0,
            command: flags & FLAG_COMMAND != 0,
            body,
        },
        end,
    )))
}

/// Bytes read from a connection and not yet parsed into frames, for a reader that owns
/// the socket: it reads into [`FrameBuf::spare`] (tokio's `read_buf` is cancel-safe with
/// it) and takes whole frames with [`FrameBuf::next_frame`].
#[derive(Debug)]
pub struct FrameBuf {
    buf: Vec<u8>,
    start: usize,
    max_frame: usize,
}

impl FrameBuf {
    /// An empty buffer whose frames may be at most `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            max_frame,
        }
    }

    /// The vector to append newly read bytes to, with at least `reserve` bytes free.
    /// Parsed bytes are dropped first, and an emptied buffer larger than 16 × `reserve` is
    /// released, so an idle connection holds little after one big frame.
    pub fn spare(&mut self, reserve: usize) -> &mut Vec<u8> {
        self.buf.drain(..self.start);
        self.start = 0;
        if self.buf.is_empty() && self.buf.capacity() > 16 * reserve {
            self.buf = Vec::new();
        }
        self.buf.reserve(reserve);
        &mut self.buf
    }

    /// The next whole frame, if one is buffered.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, ProtocolError> {
        match parse_frame(&self.buf[self.start..], self.max_frame)? {
            Some((frame, used)) => {
                self.start += used;
                Ok(Some(frame))
            }
            None => Ok(None),
        }
    }
}

/// The `PONG` frame answering a command, if the command is a `PING` (`TTL` then context).
pub fn pong_for(command: &[u8]) -> Result<Option<Vec<u8>>, ProtocolError> {
    let (name, data) = split_command(command)?;
    if name != b"PING" {
        return Ok(None);
    }
    let context = data.get(2..).unwrap_or_default();
    let mut out = Vec::with_capacity(7 + context.len());
    encode_frame(
        &mut out,
        &command_body("PONG", &context[..context.len().min(16)]),
        false,
        true,
    );
    Ok(Some(out))
}

/// A `PING` frame with a TTL of `ttl_deciseconds` (0: none) and no context.
pub fn ping_frame(ttl_deciseconds: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    encode_frame(
        &mut out,
        &command_body("PING", &ttl_deciseconds.to_be_bytes()),
        false,
        true,
    );
    out
}

/// A subscriber's request to a publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription<'a> {
    /// Deliver messages starting with this prefix (empty: every message).
    Subscribe(&'a [u8]),
    /// Stop delivering messages for this prefix (one earlier `Subscribe` of it).
    Cancel(&'a [u8]),
}

/// The subscription a single-frame message or command from a subscriber carries: ZMTP 3.0
/// messages `0x01 topic` / `0x00 topic`, ZMTP 3.1 commands `SUBSCRIBE` / `CANCEL`. Anything
/// else (other messages, other commands) is `None`: libzmq's PUB ignores it too.
pub fn subscription<'a>(frame: &Frame<'a>) -> Option<Subscription<'a>> {
    if frame.command {
        let (name, data) = split_command(frame.body).ok()?;
        return match name {
            b"SUBSCRIBE" => Some(Subscription::Subscribe(data)),
            b"CANCEL" => Some(Subscription::Cancel(data)),
            _ => None,
        };
    }
    match frame.body.split_first() {
        Some((1, topic)) => Some(Subscription::Subscribe(topic)),
        Some((0, topic)) => Some(Subscription::Cancel(topic)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1 << 20;

    #[test]
    fn greeting_is_zmtp_3_0_null() {
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
        let (f1, n1) = parse_frame(&out, MAX).unwrap().unwrap();
        assert_eq!(
            f1,
            Frame {
                more: true,
                command: false,
                body: b""
            }
        );
        let (f2, n2) = parse_frame(&out[n1..], MAX).unwrap().unwrap();
        assert_eq!((f2.more, f2.body.len()), (false, 300));
        assert_eq!(out[n1], FLAG_LONG);
        let (f3, n3) = parse_frame(&out[n1 + n2..], MAX).unwrap().unwrap();
        assert!(f3.command);
        assert_eq!(n1 + n2 + n3, out.len());
    }

    #[test]
    fn partial_frames_ask_for_more_bytes() {
        let mut out = Vec::new();
        encode_frame(&mut out, &[1u8; 300], false, false);
        for cut in [0, 1, 5, 9, 100, out.len() - 1] {
            assert_eq!(parse_frame(&out[..cut], MAX).unwrap(), None, "cut at {cut}");
        }
    }

    #[test]
    fn oversized_or_invalid_frames_are_errors_before_the_body_arrives() {
        let mut huge = vec![FLAG_LONG];
        huge.extend_from_slice(&u64::MAX.to_be_bytes());
        assert!(parse_frame(&huge, MAX).is_err());
        assert!(parse_frame(&[0x80, 0], MAX).is_err());
        assert!(parse_frame(&[0, 200], 100).is_err());
        // Without a limit, a size whose end overflows is refused, not a panic.
        assert!(parse_frame(&huge, usize::MAX).is_err());
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
    fn ready_property_lengths_past_the_end_are_errors() {
        let mut data = vec![11];
        data.extend_from_slice(b"Socket-Type");
        data.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(ready_socket_type(&data).is_err());
    }

    #[test]
    fn publisher_accepts_only_subscribers() {
        check_ready(SocketType::Pub, &ready_body(SocketType::Sub, b"")).unwrap();
        let e = check_ready(SocketType::Pub, &ready_body(SocketType::Req, b"x")).unwrap_err();
        assert!(e.0.contains("cannot talk to a REQ"), "{e}");
        let e = check_ready(SocketType::Pub, &error_body("go away")).unwrap_err();
        assert!(e.0.contains("go away"), "{e}");
        assert!(check_ready(SocketType::Pub, &command_body("PING", b"")).is_err());
        assert!(check_ready(SocketType::Sub, &ready_body(SocketType::Pub, b"")).is_ok());
    }

    #[test]
    fn frame_buf_yields_whole_frames_and_releases_big_buffers() {
        let mut fb = FrameBuf::new(MAX);
        let mut wire = Vec::new();
        encode_frame(&mut wire, &[5u8; 5000], false, false);
        encode_frame(&mut wire, b"x", false, true);
        fb.spare(256).extend_from_slice(&wire[..100]);
        assert_eq!(fb.next_frame().unwrap(), None);
        fb.spare(256).extend_from_slice(&wire[100..]);
        assert_eq!(fb.next_frame().unwrap().map(|f| f.body.len()), Some(5000));
        assert_eq!(
            fb.next_frame().unwrap().map(|f| f.body.to_vec()),
            Some(b"x".to_vec())
        );
        assert_eq!(fb.next_frame().unwrap(), None);
        assert!(fb.spare(256).capacity() <= 16 * 256);
        let mut small = FrameBuf::new(10);
        small.spare(16).extend_from_slice(&[0, 11]);
        assert!(small.next_frame().is_err());
    }

    #[test]
    fn ping_is_answered_with_pong_and_its_context() {
        let ping = command_body("PING", b"\0\x64ctx");
        let pong = pong_for(&ping).unwrap().unwrap();
        assert_eq!(pong, b"\x04\x08\x04PONGctx");
        assert_eq!(pong_for(&command_body("PONG", b"")).unwrap(), None);
        assert!(pong_for(&[9, b'x']).is_err());
        let ours = ping_frame(300);
        let (frame, _) = parse_frame(&ours, MAX).unwrap().unwrap();
        assert!(frame.command);
        assert_eq!(frame.body, b"\x04PING\x01\x2c");
    }

    #[test]
    fn subscriptions_are_read_in_both_zmtp_forms() {
        let msg = |body: &'static [u8]| Frame {
            more: false,
            command: false,
            body,
        };
        assert_eq!(
            subscription(&msg(b"\x01")),
            Some(Subscription::Subscribe(b""))
        );
        assert_eq!(
            subscription(&msg(b"\x00abc")),
            Some(Subscription::Cancel(b"abc"))
        );
        assert_eq!(subscription(&msg(b"\x02abc")), None);
        assert_eq!(subscription(&msg(b"")), None);
        let sub = command_body("SUBSCRIBE", b"t");
        let cancel = command_body("CANCEL", b"t");
        let cmd = |body| Frame {
            more: false,
            command: true,
            body,
        };
        assert_eq!(
            subscription(&cmd(&sub)),
            Some(Subscription::Subscribe(b"t"))
        );
        assert_eq!(
            subscription(&cmd(&cancel)),
            Some(Subscription::Cancel(b"t"))
        );
        assert_eq!(subscription(&cmd(b"\x04PING\0\0")), None);
    }
}
