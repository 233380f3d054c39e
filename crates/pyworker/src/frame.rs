//! The frame format: a 4-byte big-endian body length, then one msgpack value.

use crate::Error;
use rmpv::Value;
use std::io::{ErrorKind, Read, Write};

/// The Python side of the framing, for a worker script to prepend (it defines
/// `read_frame(f)`, `write_frame(f, obj)` and `take_frame_streams()`; needs `msgpack`).
///
/// `take_frame_streams()` returns `(inp, out)`: binary streams on the original stdin and
/// stdout, after which file descriptor 1 and `sys.stdout` point at stderr, so whatever
/// else prints (a module, a C extension) lands in the log instead of corrupting frames.
pub const FRAMING_PY: &str = r#"
import os as _hf_os
import struct as _hf_struct
import sys as _hf_sys

import msgpack as _hf_msgpack


def read_frame(f):
    """One frame from the binary stream ``f``; None at a clean end of stream."""
    head = f.read(4)
    if not head:
        return None
    if len(head) != 4:
        raise EOFError("the stream ended inside a frame header")
    (size,) = _hf_struct.unpack(">I", head)
    body = f.read(size)
    if len(body) != size:
        raise EOFError("the stream ended inside a frame body")
    return _hf_msgpack.unpackb(
        body, raw=False, strict_map_key=False, unicode_errors="surrogateescape"
    )


def write_frame(f, obj):
    """Writes ``obj`` as one frame to the binary stream ``f`` and flushes it."""
    body = _hf_msgpack.packb(obj, use_bin_type=True, unicode_errors="surrogateescape")
    f.write(_hf_struct.pack(">I", len(body)) + body)
    f.flush()


def take_frame_streams():
    """(inp, out): the frame streams; fd 1 and sys.stdout then go to stderr."""
    _hf_sys.stdout.flush()
    inp = _hf_os.fdopen(_hf_os.dup(0), "rb")
    out = _hf_os.fdopen(_hf_os.dup(1), "wb")
    _hf_os.dup2(2, 1)
    _hf_sys.stdout = _hf_sys.stderr
    return inp, out
"#;

/// Writes `v` as one frame (4-byte big-endian length, then the msgpack body with Salt's
/// str/bin rules, [`halite_proto::value::encode`]) and flushes `w`. A body over 4 GiB is
/// an `InvalidInput` error.
pub fn write_frame(w: &mut impl Write, v: &Value) -> std::io::Result<()> {
    let body = halite_proto::value::encode(v);
    let len = u32::try_from(body.len())
        .map_err(|_| std::io::Error::new(ErrorKind::InvalidInput, "frame over 4 GiB"))?;
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&body);
    w.write_all(&out)?;
    w.flush()
}

/// Reads one frame. `Ok(None)` on a clean end of stream (before any byte of a frame); an
/// error on a stream that ends inside a frame ([`Error::Truncated`]), a declared body
/// larger than `max` ([`Error::FrameTooLarge`], checked before anything is allocated) or a
/// body that is not exactly one msgpack value ([`Error::BadFrame`], decoded within
/// [`halite_proto::value`]'s budget). An I/O error of kind `TimedOut` from `r` is
/// reported as is ([`Error::Io`]), for readers with deadlines.
pub fn read_frame(r: &mut impl Read, max: usize) -> Result<Option<Value>, Error> {
    let mut head = [0u8; 4];
    let got = read_full(r, &mut head)?;
    if got == 0 {
        return Ok(None);
    }
    if got < head.len() {
        return Err(Error::Truncated {
            part: "header",
            got,
            want: head.len(),
        });
    }
    let size = usize::try_from(u32::from_be_bytes(head)).unwrap_or(usize::MAX);
    if size > max {
        return Err(Error::FrameTooLarge { size, max });
    }
    let mut body = vec![0u8; size];
    let got = read_full(r, &mut body)?;
    if got < size {
        return Err(Error::Truncated {
            part: "body",
            got,
            want: size,
        });
    }
    halite_proto::value::decode(&body)
        .map(Some)
        .map_err(|e| Error::BadFrame(e.to_string()))
}

/// Reads until `buf` is full or the stream ends; answers the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<usize, Error> {
    let mut got = 0;
    while got < buf.len() {
        let Some(rest) = buf.get_mut(got..) else {
            break;
        };
        match r.read(rest) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("reading a frame")(e)),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::{bin, map, s};

    fn framed(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        write_frame(&mut out, v).expect("writing to a Vec");
        out
    }

    #[test]
    fn a_frame_round_trips_with_str_and_bin_kept_apart() {
        let v = map([
            ("text", s("héllo")),
            ("blob", bin(vec![0u8, 159, 146, 150])),
            ("n", Value::from(-7)),
            ("list", Value::Array(vec![Value::Nil, Value::from(true)])),
        ]);
        let bytes = framed(&v);
        let body_len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        assert_eq!(body_len as usize, bytes.len() - 4);
        let mut r = &bytes[..];
        let back = read_frame(&mut r, 1024).unwrap().unwrap();
        assert_eq!(back, v);
        assert!(
            read_frame(&mut r, 1024).unwrap().is_none(),
            "then a clean EOF"
        );
    }

    #[test]
    fn two_frames_in_a_row_read_one_at_a_time() {
        let mut bytes = framed(&s("one"));
        bytes.extend(framed(&s("two")));
        let mut r = &bytes[..];
        assert_eq!(read_frame(&mut r, 64).unwrap(), Some(s("one")));
        assert_eq!(read_frame(&mut r, 64).unwrap(), Some(s("two")));
        assert_eq!(read_frame(&mut r, 64).unwrap(), None);
    }

    #[test]
    fn an_empty_stream_is_a_clean_eof() {
        let mut r: &[u8] = &[];
        assert!(read_frame(&mut r, 64).unwrap().is_none());
    }

    #[test]
    fn a_stream_ending_inside_the_header_is_truncated() {
        let mut r: &[u8] = &[0, 0];
        let err = read_frame(&mut r, 64).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Truncated {
                    part: "header",
                    got: 2,
                    want: 4
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_stream_ending_inside_the_body_is_truncated() {
        let bytes = framed(&s("a longer string"));
        let mut r = &bytes[..bytes.len() - 3];
        let err = read_frame(&mut r, 64).unwrap_err();
        assert!(
            matches!(err, Error::Truncated { part: "body", .. }),
            "{err}"
        );
    }

    #[test]
    fn an_oversized_frame_is_refused_before_its_body_is_read() {
        // Declares 4 GiB - 1 and carries nothing: refused from the header alone.
        let mut r: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        let err = read_frame(&mut r, 1 << 20).unwrap_err();
        assert!(
            matches!(err, Error::FrameTooLarge { size: 0xffff_ffff, max } if max == 1 << 20),
            "{err}"
        );
        let bytes = framed(&s("0123456789"));
        let err = read_frame(&mut &bytes[..], 5).unwrap_err();
        assert!(matches!(err, Error::FrameTooLarge { max: 5, .. }), "{err}");
    }

    #[test]
    fn a_body_that_is_not_one_msgpack_value_is_a_bad_frame() {
        // 0xc1 is never valid msgpack.
        let mut r: &[u8] = &[0, 0, 0, 1, 0xc1];
        assert!(matches!(
            read_frame(&mut r, 64).unwrap_err(),
            Error::BadFrame(_)
        ));
        // Two values in one body: trailing bytes.
        let mut r: &[u8] = &[0, 0, 0, 2, 0x01, 0x02];
        assert!(matches!(
            read_frame(&mut r, 64).unwrap_err(),
            Error::BadFrame(_)
        ));
        // A declared array longer than the body.
        let mut r: &[u8] = &[0, 0, 0, 5, 0xdd, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            read_frame(&mut r, 64).unwrap_err(),
            Error::BadFrame(_)
        ));
    }

    #[test]
    fn a_reader_error_is_reported_with_its_kind() {
        struct TimesOut;
        impl Read for TimesOut {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::new(ErrorKind::TimedOut, "deadline"))
            }
        }
        let err = read_frame(&mut TimesOut, 64).unwrap_err();
        assert!(
            matches!(&err, Error::Io { source, .. } if source.kind() == ErrorKind::TimedOut),
            "{err}"
        );
    }
}
