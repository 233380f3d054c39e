//! The replay socket's protocol, without I/O.
//!
//! Every message, both ways, is `uint32_be(len) || msgpack(map)`.
//!
//! The client sends one request, then only reads:
//! - `{"since_id": N, "tag": P}`: events with id `N` and later;
//! - `{"since_time_us": T, "tag": P}`: events the journal stored at `T` (microseconds since
//!   the Unix epoch, journal clock) or later;
//! - `{"tag": P}`: events stored from now on.
//!
//! `tag` (optional, default `""`) keeps only events whose tag starts with `P`.
//! The server answers `{"hello": {"first_id": F, "next_id": N}}` (the ids the journal held
//! when the request was read), then one `{"id": I, "time_us": T, "body": bin}` per event in id
//! order, for as long as the connection stays open. A request it cannot read gets
//! `{"error": "..."}` and the connection is closed.

use crate::{Error, Result};
use halite_proto::value::{self, s};
use halite_proto::Value;

/// The largest request accepted.
pub const MAX_REQUEST: usize = 4096;

/// Where a replay starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At this id (ids start at 1, so 0 means "everything held").
    Id(u64),
    /// At the first event stored at or after this time (microseconds since the Unix epoch).
    Time(i64),
    /// With the next event stored.
    Now,
}

/// A replay request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Where to start.
    pub start: Start,
    /// Only events whose tag starts with this (`""`: all).
    pub tag_prefix: String,
}

/// One message from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The first message: the ids held when the request was read.
    Hello {
        /// The oldest id held (the next id when the journal is empty).
        first_id: u64,
        /// The id the next stored event gets.
        next_id: u64,
    },
    /// One event.
    Event {
        /// Its id.
        id: u64,
        /// When the journal stored it (microseconds since the Unix epoch).
        time_us: i64,
        /// The packed event, `tag\n\n msgpack(data)`.
        body: Vec<u8>,
    },
    /// The server refused the request.
    Error(String),
}

fn frame(body: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
}

impl Request {
    /// The framed request.
    pub fn encode(&self) -> Vec<u8> {
        let mut m = Vec::new();
        match self.start {
            Start::Id(id) => m.push((s("since_id"), Value::from(id))),
            Start::Time(t) => m.push((s("since_time_us"), Value::from(t))),
            Start::Now => {}
        }
        m.push((s("tag"), s(self.tag_prefix.clone())));
        let mut out = Vec::new();
        frame(&value::encode(&Value::Map(m)), &mut out);
        out
    }

    /// Parses a request body (the bytes after the length prefix).
    ///
    /// Errors: [`Error::Protocol`] saying what is wrong: not msgpack, not a map, an unknown
    /// key, a value of the wrong type, or both start keys.
    pub fn decode(body: &[u8]) -> Result<Request> {
        let v = value::decode(body).map_err(|e| Error::Protocol(format!("request: {e}")))?;
        let Value::Map(entries) = v else {
            return Err(Error::Protocol("request is not a map".into()));
        };
        let mut start = Start::Now;
        let mut starts = 0;
        let mut tag_prefix = String::new();
        for (k, v) in &entries {
            match value::str_of(k) {
                Some("since_id") => {
                    let id = v.as_u64().ok_or_else(|| {
                        Error::Protocol("since_id must be a non-negative integer".into())
                    })?;
                    start = Start::Id(id);
                    starts += 1;
                }
                Some("since_time_us") => {
                    let t = v.as_i64().ok_or_else(|| {
                        Error::Protocol("since_time_us must be an integer".into())
                    })?;
                    start = Start::Time(t);
                    starts += 1;
                }
                Some("tag") => {
                    tag_prefix = value::str_of(v)
                        .ok_or_else(|| Error::Protocol("tag must be a UTF-8 string".into()))?
                        .to_owned();
                }
                _ => {
                    return Err(Error::Protocol(format!(
                        "unknown request key {}",
                        value::bytes_of(k)
                            .map(|b| format!("{:?}", String::from_utf8_lossy(b)))
                            .unwrap_or_else(|| k.to_string())
                    )))
                }
            }
        }
        if starts > 1 {
            return Err(Error::Protocol(
                "request has both since_id and since_time_us".into(),
            ));
        }
        Ok(Request { start, tag_prefix })
    }
}

/// Appends the framed hello message to `out`.
pub fn write_hello(first_id: u64, next_id: u64, out: &mut Vec<u8>) {
    let m = value::map([(
        "hello",
        value::map([
            ("first_id", Value::from(first_id)),
            ("next_id", Value::from(next_id)),
        ]),
    )]);
    frame(&value::encode(&m), out);
}

/// Appends one framed event to `out`.
pub fn write_event(id: u64, time_us: i64, body: &[u8], out: &mut Vec<u8>) {
    // Encoded by hand: this runs once per replayed event, and `body` is copied only once.
    // Writing into a Vec cannot fail, so the results carry nothing.
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    let _ = rmp::encode::write_map_len(out, 3);
    let _ = rmp::encode::write_str(out, "id");
    let _ = rmp::encode::write_uint(out, id);
    let _ = rmp::encode::write_str(out, "time_us");
    let _ = rmp::encode::write_sint(out, time_us);
    let _ = rmp::encode::write_str(out, "body");
    let _ = rmp::encode::write_bin(out, body);
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// Appends a framed error message to `out`.
pub fn write_error(message: &str, out: &mut Vec<u8>) {
    frame(&value::encode(&value::map([("error", s(message))])), out);
}

/// Looks for one whole frame at the front of `buf`: `Ok(None)` when more bytes are needed,
/// else the body's range and the bytes the frame uses.
///
/// Errors: [`Error::Protocol`] when the declared length is over `limit` (checked before any
/// body byte is needed, so a peer cannot make the reader buffer more than that).
pub fn check_frame(buf: &[u8], limit: usize) -> Result<Option<(std::ops::Range<usize>, usize)>> {
    let Some(len) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if len > limit {
        return Err(Error::Protocol(format!(
            "frame of {len} bytes exceeds the limit of {limit}"
        )));
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    Ok(Some((4..4 + len, 4 + len)))
}

impl Reply {
    /// Parses a reply body.
    ///
    /// Errors: [`Error::Protocol`] for anything but the three documented messages.
    pub fn decode(body: &[u8]) -> Result<Reply> {
        let v = value::decode(body).map_err(|e| Error::Protocol(format!("reply: {e}")))?;
        if let Some(h) = value::get(&v, "hello") {
            let id = |k| {
                value::get(h, k)
                    .and_then(Value::as_u64)
                    .ok_or_else(|| Error::Protocol(format!("hello without {k}")))
            };
            return Ok(Reply::Hello {
                first_id: id("first_id")?,
                next_id: id("next_id")?,
            });
        }
        if let Some(e) = value::get(&v, "error") {
            let msg = value::bytes_of(e)
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            return Ok(Reply::Error(msg.into_owned()));
        }
        let id = value::get(&v, "id").and_then(Value::as_u64);
        let time_us = value::get(&v, "time_us").and_then(Value::as_i64);
        let body = value::get_bytes(&v, "body");
        match (id, time_us, body) {
            (Some(id), Some(time_us), Some(body)) => Ok(Reply::Event {
                id,
                time_us,
                body: body.to_vec(),
            }),
            _ => Err(Error::Protocol(
                "reply is not a hello, event or error".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(framed: &[u8]) -> &[u8] {
        let (range, used) = check_frame(framed, usize::MAX).unwrap().unwrap();
        assert_eq!(used, framed.len());
        &framed[range]
    }

    #[test]
    fn requests_round_trip() {
        for start in [
            Start::Id(0),
            Start::Id(u64::MAX),
            Start::Time(-5),
            Start::Now,
        ] {
            let req = Request {
                start,
                tag_prefix: "salt/job/".into(),
            };
            assert_eq!(Request::decode(body_of(&req.encode())).unwrap(), req);
        }
    }

    #[test]
    fn bad_requests_are_refused_with_a_reason() {
        let enc = |v: Value| value::encode(&v);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"\xff\xfe garbage".to_vec(), "request:"),
            (enc(Value::from(5)), "not a map"),
            (enc(value::map([("since_id", Value::from(-1))])), "since_id"),
            (enc(value::map([("since_id", s("7"))])), "since_id"),
            (
                enc(value::map([("since_time_us", Value::F64(1.5))])),
                "since_time_us",
            ),
            (enc(value::map([("tag", Value::from(1))])), "tag must be"),
            (
                enc(value::map([("follow", Value::from(true))])),
                "unknown request key \"follow\"",
            ),
            (
                enc(value::map([
                    ("since_id", Value::from(1)),
                    ("since_time_us", Value::from(1)),
                ])),
                "both",
            ),
        ];
        for (bytes, want) in cases {
            let err = Request::decode(&bytes).unwrap_err().to_string();
            assert!(err.contains(want), "{want:?} not in {err:?}");
        }
    }

    #[test]
    fn replies_round_trip() {
        let mut out = Vec::new();
        write_hello(3, 10, &mut out);
        write_event(7, -1, b"t\n\n\x80", &mut out);
        write_error("no", &mut out);
        let mut got = Vec::new();
        let mut rest = out.as_slice();
        while let Some((range, used)) = check_frame(rest, 1 << 20).unwrap() {
            got.push(Reply::decode(&rest[range]).unwrap());
            rest = &rest[used..];
        }
        assert!(rest.is_empty());
        assert_eq!(
            got,
            vec![
                Reply::Hello {
                    first_id: 3,
                    next_id: 10
                },
                Reply::Event {
                    id: 7,
                    time_us: -1,
                    body: b"t\n\n\x80".to_vec()
                },
                Reply::Error("no".into()),
            ]
        );
    }

    #[test]
    fn frames_wait_for_bytes_and_refuse_oversized_lengths() {
        assert_eq!(check_frame(b"\0\0", 10).unwrap(), None);
        assert_eq!(check_frame(b"\0\0\0\x03ab", 10).unwrap(), None);
        assert_eq!(check_frame(b"\0\0\0\x02abX", 10).unwrap(), Some((4..6, 6)));
        assert!(check_frame(b"\xff\xff\xff\xff", 10).is_err());
    }

    #[test]
    fn a_reply_of_unknown_shape_is_an_error() {
        let bytes = value::encode(&value::map([("id", Value::from(1))]));
        assert!(Reply::decode(&bytes).is_err());
    }
}
