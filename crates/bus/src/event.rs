//! One event as the bus carries it, and the preparation `fire_event` does before sending
//! (`SaltEvent.fire_event`, `SaltEvent.pack`, `salt/utils/dicttrim.py`).

use crate::{Error, Result};
use chrono::{DateTime, Utc};
use halite_proto::event::{frame_pub, pack_event, stamp, TAGEND};
use halite_proto::{value, Value};

/// Salt's default `max_event_size` (master and minion): 1 MiB.
pub const DEFAULT_MAX_EVENT_SIZE: usize = 1_048_576;

/// Room allowed beyond `max_event_size` for the tag and the `{"head", "body"}` wrapper
/// around data that `fire_event` trimmed to `max_event_size`.
pub const FRAME_SLACK: usize = 64 * 1024;

/// The largest pull or pub frame the bus accepts for a given `max_event_size`.
///
/// Deviation: stock Salt reads pull frames of any declared length; Halite refuses frames
/// over this limit (and drops that sender) before allocating for them.
pub fn frame_limit(max_event_size: usize) -> usize {
    max_event_size.saturating_add(FRAME_SLACK)
}

/// One event: its tag, its data, and the exact bytes subscribers are sent.
#[derive(Debug, Clone)]
pub struct Event {
    tag: String,
    data: Value,
    frame: Vec<u8>,
    body_start: usize,
}

/// Events are equal when their tag, data and bytes are.
impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.tag == other.tag && self.data == other.data && self.frame == other.frame
    }
}

impl Event {
    /// Builds the event for an already packed body (`tag\n\n msgpack(data)`).
    pub(crate) fn from_body(tag: String, data: Value, body: &[u8]) -> Self {
        let frame = frame_pub(body);
        let body_start = frame.len() - body.len();
        Event {
            tag,
            data,
            frame,
            body_start,
        }
    }

    /// The tag.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The data (a map for every event fired through Salt's API; `_stamp` included).
    pub fn data(&self) -> &Value {
        &self.data
    }

    /// The bytes written to pub-socket subscribers: `msgpack({"head": {}, "body": body})`.
    pub fn frame(&self) -> &[u8] {
        &self.frame
    }

    /// The packed event, `tag || "\n\n" || msgpack(data)`.
    pub fn body(&self) -> &[u8] {
        &self.frame[self.body_start..]
    }

    /// Tag and data, dropping the bytes.
    pub fn into_parts(self) -> (String, Value) {
        (self.tag, self.data)
    }
}

/// What `fire_event` does to an event before sending it: checks the tag and that data is a
/// map, sets `_stamp` from `now`, trims data to `max_event_size`, and packs the body.
pub(crate) fn prepare(
    tag: &str,
    mut data: Value,
    now: DateTime<Utc>,
    max_event_size: usize,
) -> Result<Event> {
    if tag.is_empty() || tag.as_bytes().windows(TAGEND.len()).any(|w| w == TAGEND) {
        return Err(Error::BadTag(tag.to_owned()));
    }
    if !matches!(data, Value::Map(_)) {
        return Err(Error::DataNotAMap);
    }
    value::set(&mut data, "_stamp", value::s(stamp(now)));
    // Packed once; packed again only in the rare case that trimming changed the data.
    let mut body = pack_event(tag, &data);
    if too_big(body.len() - tag.len() - TAGEND.len(), max_event_size) {
        trim(&mut data, max_event_size);
        body = pack_event(tag, &data);
    }
    Ok(Event::from_body(tag.to_owned(), data, &body))
}

/// What replaces a trimmed value.
const TRIMMED: &str = "VALUE_TRIMMED";

/// `sys.getsizeof(bytes)` is the length plus this header; Salt compares that to the limit.
const PY_BYTES_OVERHEAD: usize = 33;

/// Whether data packing to `packed_len` bytes is over `max_event_size` and gets trimmed.
fn too_big(packed_len: usize, max: usize) -> bool {
    packed_len + PY_BYTES_OVERHEAD > max
}

/// `dicttrim.trim_dict(..., percent=50, stepper_size=10)`: while the packed data is too big,
/// replace every value (descending into nested maps, not lists) larger than 50%, then 40%,
/// ... 10% of the limit with `"VALUE_TRIMMED"`. Like Salt, it stops after the 10% pass even
/// if the data is still too big.
///
/// Deviation: Salt sizes each value with CPython's `sys.getsizeof` (so a long list counts
/// only its pointer array); Halite uses the value's msgpack length, which trims at least
/// as much.
fn trim(data: &mut Value, max: usize) {
    if !too_big(packed_len(data), max) {
        return;
    }
    for percent in [50, 40, 30, 20, 10] {
        trim_values(data, max * percent / 100);
        if packed_len(data) + PY_BYTES_OVERHEAD < max {
            return;
        }
    }
}

fn trim_values(v: &mut Value, max_val: usize) {
    if let Value::Map(entries) = v {
        for (_, val) in entries {
            if matches!(val, Value::Map(_)) {
                trim_values(val, max_val);
            } else if packed_len(val) > max_val {
                *val = value::s(TRIMMED);
            }
        }
    }
}

/// The msgpack length of a value, without building the bytes.
fn packed_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Writing to a counter cannot fail.
    let _ = rmpv::encode::write_value(&mut c, v);
    c.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use halite_proto::event::unpack_event;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 22, 7, 23, 15).unwrap()
            + chrono::Duration::microseconds(104997)
    }

    #[test]
    fn prepare_stamps_and_packs_like_fire_event() {
        let data = value::map([("a", value::bin(b"x".to_vec())), ("s", value::s("y"))]);
        let ev = prepare("salt/job/123/ret/m1", data, now(), DEFAULT_MAX_EVENT_SIZE).unwrap();
        let (tag, back) = unpack_event(ev.body()).unwrap();
        assert_eq!(tag, "salt/job/123/ret/m1");
        assert_eq!(back, *ev.data());
        assert_eq!(
            value::get_str(ev.data(), "_stamp"),
            Some("2026-11-22T07:23:15.104997+00:00")
        );
        assert_eq!(ev.frame(), frame_pub(ev.body()));
    }

    #[test]
    fn prepare_replaces_an_existing_stamp_in_place() {
        let data = value::map([("_stamp", value::s("old")), ("k", Value::from(1))]);
        let ev = prepare("t", data, now(), DEFAULT_MAX_EVENT_SIZE).unwrap();
        let Value::Map(entries) = ev.data() else {
            panic!("not a map")
        };
        assert_eq!(entries.len(), 2);
        assert_eq!(
            value::str_of(&entries[0].1),
            Some("2026-11-22T07:23:15.104997+00:00")
        );
    }

    #[test]
    fn prepare_refuses_what_salt_refuses() {
        let map = || value::map([("k", Value::from(1))]);
        assert!(matches!(
            prepare("", map(), now(), 1024),
            Err(Error::BadTag(_))
        ));
        assert!(matches!(
            prepare("a\n\nb", map(), now(), 1024),
            Err(Error::BadTag(_))
        ));
        assert!(matches!(
            prepare("t", Value::from(1), now(), 1024),
            Err(Error::DataNotAMap)
        ));
        assert!(matches!(
            prepare("t", Value::Array(vec![]), now(), 1024),
            Err(Error::DataNotAMap)
        ));
    }

    #[test]
    fn small_data_is_not_trimmed() {
        let mut d = value::map([("k", value::s("v".repeat(100)))]);
        let before = d.clone();
        trim(&mut d, 1024);
        assert_eq!(d, before);
    }

    #[test]
    fn large_values_are_trimmed_largest_first() {
        let mut d = value::map([
            ("big", value::s("x".repeat(5000))),
            ("mid", value::s("y".repeat(300))),
            ("small", value::s("z")),
            (
                "nested",
                value::map([
                    ("huge", value::bin(vec![0u8; 4000])),
                    ("ok", Value::from(1)),
                ]),
            ),
        ]);
        trim(&mut d, 1024);
        assert_eq!(value::get_str(&d, "big"), Some(TRIMMED));
        assert_eq!(value::get_str(&d, "mid"), Some(&*"y".repeat(300)));
        assert_eq!(value::get_str(&d, "small"), Some("z"));
        let nested = value::get(&d, "nested").unwrap();
        assert_eq!(value::get_str(nested, "huge"), Some(TRIMMED));
        assert_eq!(value::get_i64(nested, "ok"), Some(1));
        assert!(packed_len(&d) < 1024);
    }

    #[test]
    fn trimming_gives_up_after_the_ten_percent_pass() {
        // 200 values of ~60 bytes: each is under 10% of 1024, so nothing can be trimmed.
        let mut d = Value::Map(
            (0..200)
                .map(|i| (Value::from(i), value::s("v".repeat(60))))
                .collect(),
        );
        let before = d.clone();
        trim(&mut d, 1024);
        assert_eq!(d, before);
    }

    #[test]
    fn packed_len_matches_encoding() {
        let v = value::map([(
            "a",
            Value::Array(vec![Value::from(1), value::bin(vec![1; 300])]),
        )]);
        assert_eq!(packed_len(&v), value::encode(&v).len());
    }

    #[test]
    fn frame_limit_saturates() {
        assert_eq!(frame_limit(10), 10 + FRAME_SLACK);
        assert_eq!(frame_limit(usize::MAX), usize::MAX);
    }
}
