//! The ZMTP 3 codec on a peer's bytes, as Halite's publish server and the swarm's
//! minions read them: the greeting check, then the frames after it (or from the start,
//! without a valid greeting), parsed one by one from the whole input
//! (`parse_frame`) and from reads of the size the input chooses (`FrameBuf`, as the
//! server's read loop fills it), and each frame's meaning (`READY` for every socket type,
//! `PING`→`PONG`, subscriptions).
//!
//! Checks: a frame uses at least one byte, no more than there is, and its body is within
//! the limit; splitting the bytes into reads changes nothing; and a frame Halite encodes
//! parses back to the same frame.
#![no_main]

#[allow(dead_code)]
#[path = "../../src/zmtp.rs"]
mod zmtp;

use libfuzzer_sys::fuzz_target;
use zmtp::{Frame, FrameBuf, SocketType};

type Owned = (bool, bool, Vec<u8>);

fn owned(f: &Frame<'_>) -> Owned {
    (f.more, f.command, f.body.to_vec())
}

/// What a reader does with one frame.
fn interpret(f: &Frame<'_>) {
    let _ = zmtp::subscription(f);
    if f.command {
        let _ = zmtp::pong_for(f.body);
        for ours in [SocketType::Req, SocketType::Sub, SocketType::Pub] {
            let _ = zmtp::check_ready(ours, f.body);
        }
        if let Ok((_, data)) = zmtp::split_command(f.body) {
            let _ = zmtp::ready_socket_type(data);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, mut bytes)) = data.split_first() else {
        return;
    };
    // A peer starts with its greeting; frames follow an accepted one.
    if let Some(g) = bytes.get(..zmtp::GREETING_LEN) {
        let mut greeting = [0u8; zmtp::GREETING_LEN];
        greeting.copy_from_slice(g);
        if zmtp::check_greeting(&greeting).is_ok() {
            bytes = &bytes[zmtp::GREETING_LEN..];
        }
    }
    let max = match ctl & 3 {
        0 => 0,
        1 => 255,
        2 => 1 << 16,
        _ => usize::MAX,
    };
    let read_size = usize::from(ctl >> 2) + 1;

    // Frame by frame from the whole input.
    let mut whole = Vec::new();
    let mut pos = 0;
    let whole_refused = loop {
        match zmtp::parse_frame(&bytes[pos..], max) {
            Ok(Some((f, used))) => {
                assert!(used > 0 && used <= bytes.len() - pos);
                assert!(f.body.len() <= max);
                interpret(&f);
                whole.push(owned(&f));
                pos += used;
            }
            Ok(None) => break false,
            Err(_) => break true,
        }
    };

    // The same bytes arriving `read_size` at a time.
    let mut buf = FrameBuf::new(max);
    let mut chunked = Vec::new();
    let mut chunked_refused = false;
    'reads: for piece in bytes.chunks(read_size) {
        buf.spare(read_size).extend_from_slice(piece);
        loop {
            match buf.next_frame() {
                Ok(Some(f)) => chunked.push(owned(&f)),
                Ok(None) => break,
                Err(_) => {
                    chunked_refused = true;
                    break 'reads;
                }
            }
        }
    }
    assert_eq!(whole, chunked);
    assert_eq!(whole_refused, chunked_refused);

    // Halite's own frames parse back.
    let (more, command) = (ctl & 1 != 0, ctl & 2 != 0);
    let mut out = Vec::new();
    zmtp::encode_frame(&mut out, bytes, more, command);
    let (f, used) = zmtp::parse_frame(&out, bytes.len())
        .expect("an encoded frame parses")
        .expect("an encoded frame is whole");
    assert_eq!(
        (owned(&f), used),
        ((more, command, bytes.to_vec()), out.len())
    );
});
