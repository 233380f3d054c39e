//! msgpack with Salt's rules, over [`rmpv::Value`].
//!
//! Salt encodes with `use_bin_type=False` (every string and every byte blob is a msgpack
//! `str`) and decodes with `raw=True`, so on input `str` and `bin` mean the same thing and
//! `str` may hold bytes that are not UTF-8. [`Value`]'s `String` variant keeps such bytes
//! intact; [`bytes_of`] reads either family. On output, text goes out as `str` and blobs as
//! `bin`; stock Salt decodes both to `bytes` first, so either is accepted.

use crate::{Error, Result};
use rmpv::{Utf8String, Value};

/// Nesting deeper than this is refused (protects the decoder's stack).
pub const MAX_DEPTH: usize = 128;

/// Decodes exactly one msgpack value; trailing bytes are an error.
pub fn decode(bytes: &[u8]) -> Result<Value> {
    let (v, used) = decode_prefix(bytes)?;
    if used != bytes.len() {
        return Err(Error::Msgpack(format!(
            "{} trailing bytes",
            bytes.len() - used
        )));
    }
    Ok(v)
}

/// Decodes one msgpack value from the front of `bytes`, returning it and the bytes used.
/// The reserved marker `0xc1` is refused, as Python's msgpack refuses it (rmpv alone would
/// read it as nil).
pub fn decode_prefix(bytes: &[u8]) -> Result<(Value, usize)> {
    let mut rd = bytes;
    let v = rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH)
        .map_err(|e| Error::Msgpack(e.to_string()))?;
    let used = bytes.len() - rd.len();
    if bytes[..used].contains(&0xc1) && has_reserved_marker(&bytes[..used]) {
        return Err(Error::Msgpack("reserved marker 0xc1".into()));
    }
    Ok((v, used))
}

/// Walks the markers of one already-decoded value looking for `0xc1` (a `0xc1` byte inside
/// a string or number is data, not a marker).
fn has_reserved_marker(mut b: &[u8]) -> bool {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (b.get(..n)?, b.get(n..)?);
        *b = rest;
        Some(head)
    }
    fn len(b: &mut &[u8], n: usize) -> Option<u64> {
        Some(
            take(b, n)?
                .iter()
                .fold(0u64, |acc, x| (acc << 8) | u64::from(*x)),
        )
    }
    let mut remaining: u64 = 1;
    while remaining > 0 {
        remaining -= 1;
        let Some(&[m]) = take(&mut b, 1) else {
            return false;
        };
        let skip = match m {
            0xc1 => return true,
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => 0,
            0x80..=0x8f => {
                remaining += 2 * u64::from(m & 0x0f);
                0
            }
            0x90..=0x9f => {
                remaining += u64::from(m & 0x0f);
                0
            }
            0xa0..=0xbf => u64::from(m & 0x1f),
            0xc4 | 0xd9 => len(&mut b, 1).unwrap_or(0),
            0xc5 | 0xda => len(&mut b, 2).unwrap_or(0),
            0xc6 | 0xdb => len(&mut b, 4).unwrap_or(0),
            0xc7 => len(&mut b, 1).unwrap_or(0) + 1,
            0xc8 => len(&mut b, 2).unwrap_or(0) + 1,
            0xc9 => len(&mut b, 4).unwrap_or(0) + 1,
            0xca | 0xce | 0xd2 => 4,
            0xcb | 0xcf | 0xd3 => 8,
            0xcc | 0xd0 => 1,
            0xcd | 0xd1 => 2,
            0xd4 => 2,
            0xd5 => 3,
            0xd6 => 5,
            0xd7 => 9,
            0xd8 => 17,
            0xdc => {
                remaining += len(&mut b, 2).unwrap_or(0);
                0
            }
            0xdd => {
                remaining += len(&mut b, 4).unwrap_or(0);
                0
            }
            0xde => {
                remaining += 2 * len(&mut b, 2).unwrap_or(0);
                0
            }
            0xdf => {
                remaining += 2 * len(&mut b, 4).unwrap_or(0);
                0
            }
        };
        if take(&mut b, usize::try_from(skip).unwrap_or(usize::MAX)).is_none() {
            return false;
        }
    }
    false
}

/// Encodes a value. Writing into a `Vec` cannot fail.
pub fn encode(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    rmpv::encode::write_value(&mut out, v).expect("writing msgpack into a Vec cannot fail");
    out
}

/// A msgpack `str` holding `s`.
pub fn s(s: impl Into<String>) -> Value {
    Value::String(Utf8String::from(s.into()))
}

/// A msgpack `bin` holding `b`.
pub fn bin(b: impl Into<Vec<u8>>) -> Value {
    Value::Binary(b.into())
}

/// Builds a map value from `(key, value)` pairs, keys as strings, keeping order.
pub fn map<K: Into<String>>(pairs: impl IntoIterator<Item = (K, Value)>) -> Value {
    Value::Map(pairs.into_iter().map(|(k, v)| (s(k), v)).collect())
}

/// The bytes of a `str` or `bin` value (any content, UTF-8 or not).
pub fn bytes_of(v: &Value) -> Option<&[u8]> {
    match v {
        Value::String(s) => Some(s.as_bytes()),
        Value::Binary(b) => Some(b),
        _ => None,
    }
}

/// The text of a `str` or `bin` value when it is valid UTF-8.
pub fn str_of(v: &Value) -> Option<&str> {
    bytes_of(v).and_then(|b| std::str::from_utf8(b).ok())
}

/// Looks up `key` in a map value whose keys are strings (or bytes).
pub fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Map(entries) => entries
            .iter()
            .find(|(k, _)| bytes_of(k) == Some(key.as_bytes()))
            .map(|(_, v)| v),
        _ => None,
    }
}

/// Like [`get`] but returns the text of a string field.
pub fn get_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    get(v, key).and_then(str_of)
}

/// Like [`get`] but returns the bytes of a string/binary field.
pub fn get_bytes<'a>(v: &'a Value, key: &str) -> Option<&'a [u8]> {
    get(v, key).and_then(bytes_of)
}

/// An integer field, accepting the decimal-string form Python sometimes sends.
pub fn get_i64(v: &Value, key: &str) -> Option<i64> {
    match get(v, key)? {
        Value::Integer(i) => i.as_i64(),
        other => str_of(other).and_then(|s| s.trim().parse().ok()),
    }
}

/// A required string field, or [`Error::Malformed`] naming it.
pub fn require_str<'a>(v: &'a Value, key: &str) -> Result<&'a str> {
    get_str(v, key).ok_or_else(|| Error::Malformed(format!("missing or non-string field {key:?}")))
}

/// A required bytes field, or [`Error::Malformed`] naming it.
pub fn require_bytes<'a>(v: &'a Value, key: &str) -> Result<&'a [u8]> {
    get_bytes(v, key).ok_or_else(|| Error::Malformed(format!("missing or non-bytes field {key:?}")))
}

/// Inserts or replaces `key` in a map value (no-op on non-maps), keeping position on replace.
pub fn set(v: &mut Value, key: &str, val: Value) {
    if let Value::Map(entries) = v {
        if let Some(slot) = entries
            .iter_mut()
            .find(|(k, _)| bytes_of(k) == Some(key.as_bytes()))
        {
            slot.1 = val;
        } else {
            entries.push((s(key), val));
        }
    }
}

/// Removes `key` from a map value and returns its value.
pub fn remove(v: &mut Value, key: &str) -> Option<Value> {
    if let Value::Map(entries) = v {
        let pos = entries
            .iter()
            .position(|(k, _)| bytes_of(k) == Some(key.as_bytes()))?;
        return Some(entries.remove(pos).1);
    }
    None
}

/// Python's truthiness for a decoded value (`None`, `False`, `0`, empty → false).
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Nil => false,
        Value::Boolean(b) => *b,
        Value::Integer(i) => i.as_i64() != Some(0) && i.as_u64() != Some(0),
        Value::F32(f) => *f != 0.0,
        Value::F64(f) => *f != 0.0,
        Value::String(s) => !s.as_bytes().is_empty(),
        Value::Binary(b) => !b.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Map(m) => !m.is_empty(),
        Value::Ext(_, _) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn str_with_invalid_utf8_keeps_its_bytes() {
        // fixstr of length 3 holding bytes that are not UTF-8, as Python's packer emits.
        let wire = [0xa3, 0xff, 0x00, 0xfe];
        let v = decode(&wire).unwrap();
        assert_eq!(bytes_of(&v), Some(&[0xff, 0x00, 0xfe][..]));
        assert_eq!(str_of(&v), None);
        // Re-encoded as bin: Python's raw decoder reads str and bin alike.
        assert_eq!(encode(&v), [0xc4, 0x03, 0xff, 0x00, 0xfe]);
    }

    #[test]
    fn bin_and_str_read_the_same() {
        let a = decode(&[0xc4, 0x01, b'x']).unwrap();
        let b = decode(&[0xa1, b'x']).unwrap();
        assert_eq!(bytes_of(&a), bytes_of(&b));
    }

    #[test]
    fn trailing_bytes_are_rejected() {
        assert!(decode(&[0xc0, 0xc0]).is_err());
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        for wire in [
            &[0xda, 0x00][..],
            &[0xdb, 0xff, 0xff, 0xff, 0xff],
            &[0xdd, 0, 0, 0, 9],
            &[0x92, 0x01],
        ] {
            assert!(decode(wire).is_err());
        }
    }

    #[test]
    fn reserved_marker_is_refused_but_the_byte_as_data_is_fine() {
        assert!(decode(&[0xc1]).is_err());
        assert!(decode(&[0x92, 0x01, 0xc1]).is_err());
        assert_eq!(bytes_of(&decode(&[0xa1, 0xc1]).unwrap()), Some(&[0xc1][..]));
        assert!(decode(&[0xcc, 0xc1]).is_ok());
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut wire = vec![0x91; MAX_DEPTH + 10];
        wire.push(0xc0);
        assert!(decode(&wire).is_err());
    }

    #[test]
    fn map_helpers_find_keys_encoded_as_bin() {
        let mut v = Value::Map(vec![(bin(b"cmd".to_vec()), s("_auth"))]);
        assert_eq!(get_str(&v, "cmd"), Some("_auth"));
        set(&mut v, "id", s("m1"));
        assert_eq!(
            remove(&mut v, "cmd").and_then(|v| str_of(&v).map(String::from)),
            Some("_auth".into())
        );
        assert_eq!(get_str(&v, "id"), Some("m1"));
    }

    #[test]
    fn python_truthiness() {
        assert!(!truthy(&Value::Nil));
        assert!(!truthy(&Value::from(0)));
        assert!(!truthy(&s("")));
        assert!(truthy(&Value::from(true)));
        assert!(truthy(&map([("a", Value::Nil)])));
    }
}
