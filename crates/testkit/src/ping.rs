//! ICMP echo ("ping") over a raw socket, so a lab needs no `ping` program.
//!
//! The socket is opened by the calling thread, in that thread's network namespace (see
//! [`crate::Host::ping`]); a raw ICMP socket needs root (`CAP_NET_RAW`). Replies are matched
//! on source address and identifier; anything else arriving on the socket
//! (other ICMP traffic of the namespace, our own requests when pinging ourselves) is skipped.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// ICMP type of an echo request.
const ECHO_REQUEST: u8 = 8;
/// ICMP type of an echo reply.
const ECHO_REPLY: u8 = 0;
/// Time between two requests while no reply has come.
const RESEND: Duration = Duration::from_millis(200);
/// Payload carried by every request.
const PAYLOAD: &[u8] = b"halite-testkit";

/// Sends echo requests to `to` (one every [`RESEND`]) until a matching reply arrives
/// (→ `Ok(true)`) or `timeout` passes (→ `Ok(false)`).
///
/// # Errors
/// When the raw socket cannot be opened or used (not root, no IPv4).
pub(crate) fn echo(to: Ipv4Addr, timeout: Duration) -> std::io::Result<bool> {
    static NEXT_ID: AtomicU16 = AtomicU16::new(0);
    let socket = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))?;
    // Identifiers differ between threads of one process and, mostly, between processes.
    let id = (std::process::id() as u16) ^ NEXT_ID.fetch_add(0x9e37, Ordering::Relaxed);
    let dest = SockAddr::from(SocketAddrV4::new(to, 0));
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 1500];
    let mut seq = 0u16;
    loop {
        socket.send_to(&echo_request(id, seq), &dest)?;
        let resend_at = (Instant::now() + RESEND).min(deadline);
        loop {
            let now = Instant::now();
            if now >= resend_at {
                break;
            }
            socket.set_read_timeout(Some(resend_at - now))?;
            match (&socket).read(&mut buf) {
                Ok(n) => {
                    if buf.get(..n).is_some_and(|packet| is_reply(packet, to, id)) {
                        return Ok(true);
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        seq = seq.wrapping_add(1);
    }
}

/// An ICMP echo request: type, code, checksum, identifier, sequence number, payload.
fn echo_request(id: u16, seq: u16) -> Vec<u8> {
    let mut packet = vec![ECHO_REQUEST, 0, 0, 0];
    packet.extend_from_slice(&id.to_be_bytes());
    packet.extend_from_slice(&seq.to_be_bytes());
    packet.extend_from_slice(PAYLOAD);
    let sum = checksum(&packet);
    packet[2..4].copy_from_slice(&sum.to_be_bytes());
    packet
}

/// Whether `packet` (an IPv4 datagram as a raw socket delivers it) is an echo reply from
/// `from` to one of our requests (identifier `id`; a late answer to an earlier sequence
/// number proves reachability as well). Never panics, whatever the bytes.
fn is_reply(packet: &[u8], from: Ipv4Addr, id: u16) -> bool {
    let Some(&first) = packet.first() else {
        return false;
    };
    let header_len = usize::from(first & 0x0f) * 4;
    let source = packet
        .get(12..16)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(Ipv4Addr::from);
    let Some(icmp) = packet.get(header_len..) else {
        return false;
    };
    let field = |at: usize| {
        icmp.get(at..at + 2)
            .and_then(|b| <[u8; 2]>::try_from(b).ok())
            .map(u16::from_be_bytes)
    };
    first >> 4 == 4
        && source == Some(from)
        && icmp.first() == Some(&ECHO_REPLY)
        && field(4) == Some(id)
}

/// The Internet checksum (RFC 1071) of `data`.
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|pair| match pair {
            [hi, lo] => u32::from(u16::from_be_bytes([*hi, *lo])),
            [hi] => u32::from(*hi) << 8,
            _ => 0,
        })
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 header (20 bytes, no options) from `from` followed by `icmp`.
    fn datagram(from: Ipv4Addr, icmp: &[u8]) -> Vec<u8> {
        let mut packet = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0];
        packet.extend_from_slice(&from.octets());
        packet.extend_from_slice(&[10, 77, 0, 1]);
        packet.extend_from_slice(icmp);
        packet
    }

    #[test]
    fn checksum_of_a_request_verifies_to_zero() {
        let request = echo_request(0x1234, 7);
        assert_eq!(checksum(&request), 0);
        // RFC 1071's example words sum to 0xddf2 (carries folded in), inverted here.
        assert_eq!(
            checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
        assert_eq!(checksum(&[0xff]), !0xff00);
    }

    #[test]
    fn only_the_matching_reply_from_the_target_counts() {
        let target = Ipv4Addr::new(10, 77, 0, 2);
        let mut reply = echo_request(0x1234, 7);
        reply[0] = ECHO_REPLY;
        assert!(is_reply(&datagram(target, &reply), target, 0x1234));
        assert!(!is_reply(&datagram(target, &reply), target, 0x4321));
        let other = Ipv4Addr::new(10, 77, 0, 3);
        assert!(!is_reply(&datagram(other, &reply), target, 0x1234));
        let request = echo_request(0x1234, 7);
        assert!(!is_reply(&datagram(target, &request), target, 0x1234));
    }

    #[test]
    fn truncated_or_garbage_packets_are_not_replies() {
        let target = Ipv4Addr::new(10, 77, 0, 2);
        let mut reply = echo_request(1, 1);
        reply[0] = ECHO_REPLY;
        let full = datagram(target, &reply);
        // 20 bytes of IP header, then type, code, checksum and the identifier end at 26.
        for len in 0..26 {
            assert!(!is_reply(&full[..len], target, 1), "{len} bytes");
        }
        assert!(is_reply(&full[..26], target, 1));
        // A header length pointing past the end, and an IPv6 version nibble.
        let mut long_header = full.clone();
        long_header[0] = 0x4f;
        assert!(!is_reply(&long_header, target, 1));
        let mut v6 = full;
        v6[0] = 0x65;
        assert!(!is_reply(&v6, target, 1));
    }
}
