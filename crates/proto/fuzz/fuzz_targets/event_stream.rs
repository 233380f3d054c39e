//! The event bus's IPC streams as `halite-bus` reads them off its sockets: the
//! length-prefixed pull stream (`PullFrame::check`, in the bus's `serve_sender` loop) and
//! the subscriber stream (`decode_pub_stream`, in `Listener::recv`), fed in reads of the
//! sizes the input chooses, with the bus's loop: take every whole frame from the buffer,
//! then drop what was used and read more.
//!
//! Checks what those loops rely on: a whole frame uses at least one byte (else the loop
//! spins) and no more than is buffered (else a slice panics); the outcome does not depend
//! on how the bytes were split into reads; a body the bus frames (`frame_pull`,
//! `frame_pub`) reads back as the same body; and an event packed again reads back.
#![no_main]

use halite_proto::event::{self, Frame, PullFrame, TAGEND};
use halite_proto::value::{self, Budget};
use halite_proto::Result;
use libfuzzer_sys::fuzz_target;

type Check = fn(&[u8], usize) -> Result<Frame>;

/// How a stream ended: cleanly between frames, mid-frame with bytes left, or refused.
#[derive(Debug, PartialEq, Eq)]
enum End {
    Clean,
    MidFrame(usize),
    Refused,
}

/// The bus's read loop over `stream`, read `sizes` bytes at a time (cycling; empty: all
/// at once): the event bodies in order and how the stream ended.
fn read_loop(stream: &[u8], sizes: &[usize], limit: usize, check: Check) -> (Vec<Vec<u8>>, End) {
    let mut buf: Vec<u8> = Vec::new();
    let mut events = Vec::new();
    let mut rest = stream;
    let mut sizes = sizes.iter().cycle();
    loop {
        let mut pos = 0;
        loop {
            match check(&buf[pos..], limit) {
                Ok(Frame::Incomplete) => break,
                Ok(Frame::Complete { event, consumed }) => {
                    assert!(consumed > 0, "a whole frame of no bytes");
                    assert!(consumed <= buf.len() - pos, "used more than was buffered");
                    pos += consumed;
                    let _ = event::unpack_event(&event);
                    events.push(event);
                }
                Err(_) => return (events, End::Refused),
            }
        }
        buf.drain(..pos);
        if rest.is_empty() {
            let end = if buf.is_empty() {
                End::Clean
            } else {
                End::MidFrame(buf.len())
            };
            return (events, end);
        }
        let n = sizes.next().map_or(rest.len(), |&n| n.clamp(1, rest.len()));
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
}

fuzz_target!(|data: &[u8]| {
    // Two control bytes: the frame limit, and the read sizes (1 to 16, then 1 to 256 bytes,
    // alternating; 1 and 1 is byte by byte).
    let [limit_byte, sizes_byte, stream @ ..] = data else {
        return;
    };
    let limit = match limit_byte & 3 {
        0 => usize::from(*limit_byte),
        1 => 1 << 10,
        2 => 1 << 16,
        _ => usize::MAX,
    };
    let sizes = [
        usize::from(sizes_byte & 0x0f) + 1,
        usize::from(sizes_byte >> 4) * 17 + 1,
    ];
    for check in [PullFrame::check as Check, event::decode_pub_stream as Check] {
        let whole = read_loop(stream, &[], limit, check);
        let chunked = read_loop(stream, &sizes, limit, check);
        assert_eq!(whole, chunked);
    }

    // Any bytes as an event body: framed by the bus, read back unchanged.
    let pull = event::frame_pull(stream);
    assert_eq!(
        PullFrame::check(&pull, usize::MAX).ok(),
        Some(Frame::Complete {
            event: stream.to_vec(),
            consumed: pull.len()
        })
    );
    let publ = event::frame_pub(stream);
    assert_eq!(
        event::decode_pub_stream(&publ, usize::MAX).ok(),
        Some(Frame::Complete {
            event: stream.to_vec(),
            consumed: publ.len()
        })
    );
    // An event read off the bus and fired again (packed minimally) reads back the same.
    // Its data is decoded within the budget of the bytes it arrived in: `value::decode`
    // allows elements in proportion to the input's length, so data that arrived in longer
    // encodings than needed can be over the budget of its own minimal form (found by this
    // target: 1,624 elements in 2,453 bytes, 2,399 once repacked).
    if let Ok((tag, data)) = event::unpack_event(stream) {
        let repacked = event::pack_event(&tag, &data);
        let (head, body) = repacked.split_at(tag.len() + TAGEND.len());
        assert_eq!(head, [tag.as_bytes(), TAGEND].concat());
        let arrived = stream.len() - head.len();
        let again = value::decode_with(body, Budget::for_input(arrived))
            .expect("a repacked event decodes within its budget");
        assert_eq!(event::pack_event(&tag, &again), repacked);
    }
});
