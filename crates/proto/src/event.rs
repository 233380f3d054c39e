//! Salt's event-bus framing (`salt/utils/event.py`, `salt/transport/tcp.py`), without I/O.
//!
//! - An **event** is `tag || "\n\n" || msgpack(data)` ([`pack_event`], [`unpack_event`]).
//! - A sender writes to the pull socket `uint32_be(len) || msgpack({"head": {}, "body": bin(event)})`
//!   ([`frame_pull`], [`PullFrame::check`]).
//! - The publisher forwards the same map without the prefix to every subscriber
//!   ([`frame_pub`]); subscribers read a stream of such maps ([`decode_pub_stream`]).
//!
//! "Need more bytes" ([`Frame::Incomplete`]) is not an error; a frame over the size limit or
//! a body that is not an event is [`Error`], and the caller drops that connection.

use crate::{value, Error, Result, Value};
use chrono::{DateTime, Datelike, Timelike, Utc};
use std::fmt::Write as _;

/// Separator between tag and data (`TAGEND`).
pub const TAGEND: &[u8] = b"\n\n";

/// Tags a minion may not fire on the master bus: Salt 3008.3's
/// `salt/daemons/masterapi.py · MINION_EVENT_BLACKLIST` (whose repeats of `salt/run/*` and
/// `salt/cloud/*` are dropped here), fnmatch patterns against which the master's
/// `valid_minion_tag` checks each tag of a `_minion_event`. Every pattern starts with
/// `salt/`, so a tag without that prefix needs no matching.
pub const MINION_EVENT_BLACKLIST: &[&str] = &[
    "salt/job/*/publish",
    "salt/job/*/new",
    "salt/job/*/return",
    "salt/key",
    "salt/cloud/*",
    "salt/run/*",
    "salt/cluster/*",
    "salt/wheel/*/new",
    "salt/wheel/*/return",
];

/// Packs an event body.
pub fn pack_event(tag: &str, data: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(tag.len() + 2 + 64);
    out.extend_from_slice(tag.as_bytes());
    out.extend_from_slice(TAGEND);
    rmpv::encode::write_value(&mut out, data).expect("writing msgpack into a Vec cannot fail");
    out
}

/// Splits an event body at the first `\n\n` and decodes the data.
pub fn unpack_event(raw: &[u8]) -> Result<(String, Value)> {
    let pos = raw
        .windows(2)
        .position(|w| w == TAGEND)
        .ok_or_else(|| Error::Malformed("event without tag separator".into()))?;
    let tag = std::str::from_utf8(&raw[..pos])
        .map_err(|_| Error::Malformed("event tag is not UTF-8".into()))?;
    if tag.is_empty() {
        return Err(Error::Malformed("empty event tag".into()));
    }
    let data = value::decode(&raw[pos + 2..])?;
    Ok((tag.to_owned(), data))
}

/// The `_stamp` Salt's `fire_event` adds: ISO-8601 UTC with `+00:00`.
/// Like Python's `isoformat()`, the fraction is left out when the microseconds are 0.
pub fn stamp(now: DateTime<Utc>) -> String {
    // Written field by field: `format` parses its pattern on every call, which showed in
    // the request workers' profile (one stamp per return event).
    let mut out = String::with_capacity(32);
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        now.year(),
        now.month(),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    );
    // A leap second shows as second 59 with 1,000,000 µs or more; Python has no such time.
    let micros = now.timestamp_subsec_micros().min(999_999);
    if micros != 0 {
        let _ = write!(out, ".{micros:06}");
    }
    out.push_str("+00:00");
    out
}

/// `msgpack({"head": {}, "body": bin(event)})` appended to `out`, written directly: the
/// same bytes as encoding that map, without copying the body into a value first.
fn wrap_into(out: &mut Vec<u8>, event: &[u8]) {
    // fixmap of 2; fixstr "head"; empty fixmap; fixstr "body".
    out.extend_from_slice(b"\x82\xa4head\x80\xa4body");
    let len = u32::try_from(event.len()).expect("event bodies are limited far below 4 GiB");
    rmp::encode::write_bin_len(out, len).expect("writing msgpack into a Vec cannot fail");
    out.extend_from_slice(event);
}

/// Most bytes the wrapper adds to an event body (map, keys and an empty map: 12; bin header:
/// up to 5).
const WRAP_OVERHEAD: usize = 12 + 5;

/// The bytes a sender writes to a pull socket for one event body.
pub fn frame_pull(event: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + WRAP_OVERHEAD + event.len());
    out.extend_from_slice(&[0; 4]);
    wrap_into(&mut out, event);
    let len = u32::try_from(out.len() - 4).expect("event bodies are limited far below 4 GiB");
    out[..4].copy_from_slice(&len.to_be_bytes());
    out
}

/// The bytes the publisher writes to each subscriber for one event body.
pub fn frame_pub(event: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(WRAP_OVERHEAD + event.len());
    wrap_into(&mut out, event);
    out
}

/// The outcome of looking at a buffer for one frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// Not enough bytes yet.
    Incomplete,
    /// A whole frame: its event body and the bytes it used in the buffer.
    Complete {
        /// The event body (`tag\n\n msgpack`).
        event: Vec<u8>,
        /// How many bytes of the buffer the frame took.
        consumed: usize,
    },
}

/// Parsing of the length-prefixed pull stream.
pub struct PullFrame;

impl PullFrame {
    /// Looks for one frame at the start of `buf`. Frames whose declared length exceeds
    /// `max_len` are refused before anything is allocated.
    pub fn check(buf: &[u8], max_len: usize) -> Result<Frame> {
        let Some(len) = buf.get(..4) else {
            return Ok(Frame::Incomplete);
        };
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if len > max_len {
            return Err(Error::TooLarge {
                size: len,
                limit: max_len,
            });
        }
        let Some(body) = buf.get(4..4 + len) else {
            return Ok(Frame::Incomplete);
        };
        if value::skip(body)? != Some(body.len()) {
            return Err(Error::Msgpack("pull frame is not one msgpack value".into()));
        }
        let event = event_of_wrapper(body)?;
        Ok(Frame::Complete {
            event,
            consumed: 4 + len,
        })
    }
}

/// The `body` of a `{"head", "body"}` wrapper, read without decoding the wrapper (the
/// first `body` key counts, as in [`value::get`]).
fn event_of_wrapper(wrapper: &[u8]) -> Result<Vec<u8>> {
    for entry in value::RawMap::new(wrapper)? {
        let (key, val) = entry?;
        if value::raw_bytes(key) == Some(b"body") {
            if let Some(body) = value::raw_bytes(val) {
                return Ok(body.to_vec());
            }
            break;
        }
    }
    Err(Error::Malformed("frame without a body".into()))
}

/// Reads one `{"head", "body"}` map from the front of a subscriber stream. Nothing is
/// decoded or allocated before the whole map is there and within `max_len`.
pub fn decode_pub_stream(buf: &[u8], max_len: usize) -> Result<Frame> {
    match value::skip(buf)? {
        Some(consumed) if consumed > max_len => Err(Error::TooLarge {
            size: consumed,
            limit: max_len,
        }),
        Some(consumed) => Ok(Frame::Complete {
            event: event_of_wrapper(buf.get(..consumed).unwrap_or_default())?,
            consumed,
        }),
        None if buf.len() > max_len => Err(Error::TooLarge {
            size: buf.len(),
            limit: max_len,
        }),
        None => Ok(Frame::Incomplete),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // salt-protocol.md Appendix B.5, produced by stock Salt.
    const B5_EVENT: &[u8] = b"salt/job/123/ret/m1\n\n\x82\xa1a\xc4\x01x\xa1s\xa1y";

    #[test]
    fn pull_frame_matches_salt_bytes() {
        let mut expect = vec![0x00, 0x00, 0x00, 0x2d, 0x82, 0xa4];
        expect.extend_from_slice(b"head");
        expect.extend_from_slice(&[0x80, 0xa4]);
        expect.extend_from_slice(b"body");
        expect.extend_from_slice(&[0xc4, 0x1f]);
        expect.extend_from_slice(B5_EVENT);
        assert_eq!(frame_pull(B5_EVENT), expect);
        assert_eq!(frame_pub(B5_EVENT), expect[4..]);
    }

    #[test]
    fn event_round_trips() {
        let (tag, data) = unpack_event(B5_EVENT).unwrap();
        assert_eq!(tag, "salt/job/123/ret/m1");
        assert_eq!(value::get_bytes(&data, "a"), Some(&b"x"[..]));
        assert_eq!(pack_event(&tag, &data), B5_EVENT);
    }

    #[test]
    fn incomplete_is_not_an_error() {
        let f = frame_pull(B5_EVENT);
        for cut in 0..f.len() {
            assert_eq!(
                PullFrame::check(&f[..cut], 1 << 20).unwrap(),
                Frame::Incomplete
            );
        }
        assert!(
            matches!(PullFrame::check(&f, 1 << 20).unwrap(), Frame::Complete { consumed, .. } if consumed == f.len())
        );
        let p = frame_pub(B5_EVENT);
        for cut in 0..p.len() {
            assert_eq!(
                decode_pub_stream(&p[..cut], 1 << 20).unwrap(),
                Frame::Incomplete
            );
        }
    }

    #[test]
    fn oversized_and_garbage_frames_are_errors() {
        assert!(matches!(
            PullFrame::check(&[0xff, 0xff, 0xff, 0xff], 1 << 20),
            Err(Error::TooLarge { .. })
        ));
        assert!(PullFrame::check(&[0, 0, 0, 1, 0xc1], 1 << 20).is_err());
        assert!(PullFrame::check(&[0, 0, 0, 1, 0x01], 1 << 20).is_err());
        assert!(unpack_event(b"no separator").is_err());
        // A pub-stream frame declaring more than the limit is refused once the buffer
        // holds more than the limit, without waiting for the rest.
        let mut big = b"\x82\xa4head\x80\xa4body\xc6\x7f\xff\xff\xff".to_vec();
        assert_eq!(decode_pub_stream(&big, 64).unwrap(), Frame::Incomplete);
        big.resize(65, 0);
        assert!(matches!(
            decode_pub_stream(&big, 64),
            Err(Error::TooLarge {
                size: 65,
                limit: 64
            })
        ));
        assert!(unpack_event(b"\n\n\x80").is_err());
    }

    #[test]
    fn frames_written_directly_equal_the_encoded_wrapper_map() {
        // Body lengths on each side of msgpack's bin8 / bin16 / bin32 headers.
        for len in [0, 1, 255, 256, 65_535, 65_536, 70_000] {
            let event: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let wrapper = value::encode(&value::map([
                ("head", Value::Map(vec![])),
                ("body", value::bin(event.clone())),
            ]));
            assert_eq!(frame_pub(&event), wrapper, "len {len}");
            let pull = frame_pull(&event);
            assert_eq!(pull[..4], (wrapper.len() as u32).to_be_bytes(), "len {len}");
            assert_eq!(pull[4..], wrapper, "len {len}");
            assert!(wrapper.len() <= len + WRAP_OVERHEAD);
        }
    }

    #[test]
    fn stamp_leaves_out_a_zero_fraction_and_pads_every_field() {
        use chrono::TimeZone;
        let t = Utc.with_ymd_and_hms(987, 1, 2, 3, 4, 5).unwrap();
        assert_eq!(stamp(t), "0987-01-02T03:04:05+00:00");
        let t = t + chrono::Duration::microseconds(7);
        assert_eq!(stamp(t), "0987-01-02T03:04:05.000007+00:00");
    }

    #[test]
    fn stamp_has_utc_offset() {
        use chrono::TimeZone;
        let t = Utc.with_ymd_and_hms(2026, 11, 22, 7, 23, 15).unwrap()
            + chrono::Duration::microseconds(104997);
        assert_eq!(stamp(t), "2026-11-22T07:23:15.104997+00:00");
    }
}
