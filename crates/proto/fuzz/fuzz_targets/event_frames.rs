//! The event-bus readers: `PullFrame::check` on the length-prefixed pull stream,
//! `decode_pub_stream` on the subscriber stream, and `unpack_event` on a body.
#![no_main]

use halite_proto::event::{self, Frame, PullFrame};
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    if let Ok(Frame::Complete { event, consumed }) = PullFrame::check(data, LIMIT) {
        assert!(consumed <= data.len() && consumed <= LIMIT + 4);
        let _ = event::unpack_event(&event);
    }
    if let Ok(Frame::Complete { consumed, .. }) = event::decode_pub_stream(data, LIMIT) {
        assert!(consumed <= data.len() && consumed <= LIMIT);
    }
    let _ = event::unpack_event(data);
});
