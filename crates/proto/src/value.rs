//! msgpack with Salt's rules, over [`rmpv::Value`].
//!
//! Salt encodes with `use_bin_type=False` (every string and every byte blob is a msgpack
//! `str`) and decodes with `raw=True`, so on input `str` and `bin` mean the same thing and
//! `str` may hold bytes that are not UTF-8. [`Value`]'s `String` variant keeps such bytes
//! intact; [`bytes_of`] reads either family. On output, text goes out as `str` and blobs as
//! `bin`; stock Salt decodes both to `bytes` first, so either is accepted.
//!
//! # Bounded decoding
//!
//! Every decoder here is meant for untrusted bytes (the request port, the publish port,
//! the event bus) and costs memory in proportion to the bytes it is given, whatever they
//! declare:
//!
//! - [`decode`] builds at most [`Budget::for_input`] values: one per input byte plus
//!   [`ELEMENT_ALLOWANCE`] (map keys count). Every msgpack value takes at least one byte,
//!   so no valid message is refused, and as a [`Value`] is 40 bytes the tree costs at most
//!   40× the input plus 40 KiB (string and blob contents at most the input). This is the
//!   budget for what has been authenticated (a minion's decrypted load) or comes from a
//!   local socket: a job may well return a list of 10,000 small integers.
//! - Unauthenticated loads (clear requests: `_auth`, a CLI's `publish`) are decoded within
//!   [`Budget::for_clear`]: one value per [`BYTES_PER_ELEMENT`] input bytes plus
//!   [`ELEMENT_ALLOWANCE`], ~10× the input; a flat array of 1,000,000 nils is refused
//!   after 251,025 elements. Real Salt clear loads use far fewer (measured on stock
//!   3008.3: 5.5 bytes per element for a `publish` with arguments, 30–70 for `_auth`,
//!   thousands for `salt-cp` chunks). Their size is limited before any of this
//!   (`max_clear_request_size`), and an encrypted request's load is not decoded before it
//!   is authenticated ([`crate::envelope::Request::parse`]).
//! - A declared array, map, string, binary or ext length is checked against the bytes
//!   that are left and against the element budget before anything is allocated for it.
//! - Containers nest at most [`MAX_DEPTH`] deep (the decoder recurses once per level).
//! - [`skip`] and [`RawMap`] read the structure without building anything, so an envelope
//!   (`{"enc", "load", ...}`) can be checked before its load is decoded.
//!
//! Every refusal is an [`Error::Msgpack`] saying which limit was hit.
//!
//! Deviation: stock Salt (Python `msgpack.loads`) has no element budget; a decoded value
//! over the budget above is refused by Halite. Python's own limits (`max_*_len` default to
//! the input length) are the same "declared length against bytes left" rule.

use crate::{Error, Result};
use rmpv::{Utf8String, Value};

/// Containers nested deeper than this are refused (the decoder recurses once per level).
pub const MAX_DEPTH: usize = 128;

/// Input bytes per element of the unauthenticated budget ([`Budget::for_clear`]).
pub const BYTES_PER_ELEMENT: usize = 4;

/// Elements allowed beyond one per [`BYTES_PER_ELEMENT`] input bytes, so small messages
/// with many small values (a short list of small integers) always decode.
pub const ELEMENT_ALLOWANCE: usize = 1024;

/// What one decode may build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Values the decode may create; every value counts, map keys included.
    pub elements: usize,
    /// Containers nested deeper than this are refused.
    pub depth: usize,
}

impl Budget {
    /// The default budget for `len` input bytes: `len + ELEMENT_ALLOWANCE` elements (any
    /// valid message fits), [`MAX_DEPTH`] levels.
    pub const fn for_input(len: usize) -> Budget {
        Budget {
            elements: len.saturating_add(ELEMENT_ALLOWANCE),
            depth: MAX_DEPTH,
        }
    }

    /// The budget of an unauthenticated load of `len` bytes: `len / BYTES_PER_ELEMENT +
    /// ELEMENT_ALLOWANCE` elements, [`MAX_DEPTH`] levels.
    pub const fn for_clear(len: usize) -> Budget {
        Budget {
            elements: len / BYTES_PER_ELEMENT + ELEMENT_ALLOWANCE,
            depth: MAX_DEPTH,
        }
    }
}

/// Decodes exactly one msgpack value within the default budget for its length
/// ([`Budget::for_input`]); trailing bytes are an error.
pub fn decode(bytes: &[u8]) -> Result<Value> {
    decode_with(bytes, Budget::for_input(bytes.len()))
}

/// Decodes exactly one msgpack value within `budget`; trailing bytes are an error.
pub fn decode_with(bytes: &[u8], budget: Budget) -> Result<Value> {
    let (v, used) = Decoder::new(bytes, budget).run()?;
    if used != bytes.len() {
        return Err(Error::Msgpack(format!(
            "{} trailing bytes",
            bytes.len() - used
        )));
    }
    Ok(v)
}

/// Decodes one msgpack value from the front of `bytes` within the default budget for the
/// whole of `bytes`, returning it and the bytes used. The reserved marker `0xc1` is refused,
/// as Python's msgpack refuses it.
pub fn decode_prefix(bytes: &[u8]) -> Result<(Value, usize)> {
    Decoder::new(bytes, Budget::for_input(bytes.len())).run()
}

/// The length of the msgpack value at the front of `bytes`, found without building
/// anything (constant memory, time linear in the bytes read); `Ok(None)` when `bytes` ends
/// before the value does, so a stream reader can wait for more. An invalid marker is an
/// error. Nesting is not limited here (nothing recurses); [`decode`] limits it.
pub fn skip(bytes: &[u8]) -> Result<Option<usize>> {
    let mut pos = 0usize;
    let mut pending: u64 = 1;
    while pending > 0 {
        pending -= 1;
        let Some((head, n)) = read_head(bytes.get(pos..).unwrap_or_default())? else {
            return Ok(None);
        };
        pos += n;
        match head {
            Head::Str(len) | Head::Bin(len) | Head::Ext(_, len) => {
                if bytes.len() - pos < len {
                    return Ok(None);
                }
                pos += len;
            }
            Head::Array(len) => pending += len as u64,
            Head::Map(len) => pending += 2 * len as u64,
            _ => {}
        }
        // Every pending value needs at least one more byte.
        if pending > (bytes.len() - pos) as u64 {
            return Ok(None);
        }
    }
    Ok(Some(pos))
}

/// The entries of the msgpack map at the front of some bytes, as the raw bytes of each key
/// and value, read without decoding them (see [`skip`]). After the last entry,
/// [`end`](RawMap::end) is where the map ends.
///
/// Yields [`Error::Msgpack`] when the bytes end inside the map or hold an invalid marker.
#[derive(Debug, Clone)]
pub struct RawMap<'a> {
    bytes: &'a [u8],
    pos: usize,
    left: usize,
    flat: bool,
}

impl<'a> RawMap<'a> {
    /// Starts reading the map at the front of `bytes`: [`Error::Malformed`] when the value
    /// there is not a map (nothing else is read), [`Error::Msgpack`] when it is not msgpack.
    pub fn new(bytes: &'a [u8]) -> Result<RawMap<'a>> {
        match read_head(bytes)? {
            Some((Head::Map(left), pos)) => Ok(RawMap {
                bytes,
                pos,
                left,
                flat: false,
            }),
            Some(_) => Err(Error::Malformed("not a map".into())),
            None => Err(truncated()),
        }
    }

    /// For a map whose keys and values must all be scalars, strings or blobs: a key or value
    /// that is an array or a map is then an [`Error::Malformed`] as soon as it is reached,
    /// without walking it, so a large nested value costs nothing to refuse.
    pub fn flat(mut self) -> Self {
        self.flat = true;
        self
    }

    /// Where the map's bytes end (meaningful once every entry has been read).
    pub fn end(&self) -> usize {
        self.pos
    }

    fn raw(&mut self) -> Result<&'a [u8]> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        if self.flat && matches!(rest.first(), Some(0x80..=0x9f | 0xdc..=0xdf)) {
            return Err(Error::Malformed("a container in a flat map".into()));
        }
        let len = skip(rest)?.ok_or_else(truncated)?;
        self.pos += len;
        Ok(rest.get(..len).unwrap_or_default())
    }
}

impl<'a> Iterator for RawMap<'a> {
    type Item = Result<(&'a [u8], &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let entry = self.raw().and_then(|k| Ok((k, self.raw()?)));
        if entry.is_err() {
            self.left = 0;
        }
        Some(entry)
    }
}

/// The bytes of a raw msgpack `str` or `bin` (as [`skip`] or [`RawMap`] give them), without
/// copying; `None` for any other type or for bytes that are not exactly one such value.
pub fn raw_bytes(raw: &[u8]) -> Option<&[u8]> {
    match read_head(raw).ok()?? {
        (Head::Str(len) | Head::Bin(len), n) if raw.len() - n == len => raw.get(n..),
        _ => None,
    }
}

/// A raw msgpack integer (as [`skip`] or [`RawMap`] give it) that fits an `i64`.
pub fn raw_i64(raw: &[u8]) -> Option<i64> {
    match read_head(raw).ok()?? {
        (Head::Uint(u), n) if n == raw.len() => i64::try_from(u).ok(),
        (Head::Int(i), n) if n == raw.len() => Some(i),
        _ => None,
    }
}

/// One msgpack marker and what it declares.
#[derive(Debug, Clone, Copy)]
enum Head {
    Nil,
    Bool(bool),
    Uint(u64),
    Int(i64),
    F32(f32),
    F64(f64),
    /// A `str` of this many bytes.
    Str(usize),
    /// A `bin` of this many bytes.
    Bin(usize),
    /// An ext of this type and this many data bytes.
    Ext(i8, usize),
    /// An array of this many values.
    Array(usize),
    /// A map of this many pairs.
    Map(usize),
}

fn truncated() -> Error {
    Error::Msgpack("truncated input".into())
}

/// Reads the marker (and fixed-size payload or length) at the front of `b`: the head and
/// the bytes it took, `None` when `b` ends first.
fn read_head(b: &[u8]) -> Result<Option<(Head, usize)>> {
    fn be(b: &[u8], n: usize) -> Option<u64> {
        Some(
            b.get(1..1 + n)?
                .iter()
                .fold(0u64, |acc, x| (acc << 8) | u64::from(*x)),
        )
    }
    // Lengths on the wire are at most 32 bits: they fit a usize on every supported target.
    let len = |n: usize| be(b, n).map(|l| l as usize);
    let Some(&m) = b.first() else {
        return Ok(None);
    };
    let head = match m {
        0x00..=0x7f => Some((Head::Uint(u64::from(m)), 1)),
        0x80..=0x8f => Some((Head::Map(usize::from(m & 0x0f)), 1)),
        0x90..=0x9f => Some((Head::Array(usize::from(m & 0x0f)), 1)),
        0xa0..=0xbf => Some((Head::Str(usize::from(m & 0x1f)), 1)),
        0xc0 => Some((Head::Nil, 1)),
        0xc1 => return Err(Error::Msgpack("reserved marker 0xc1".into())),
        0xc2 => Some((Head::Bool(false), 1)),
        0xc3 => Some((Head::Bool(true), 1)),
        0xc4 => len(1).map(|l| (Head::Bin(l), 2)),
        0xc5 => len(2).map(|l| (Head::Bin(l), 3)),
        0xc6 => len(4).map(|l| (Head::Bin(l), 5)),
        0xc7 => len(1)
            .zip(b.get(2))
            .map(|(l, t)| (Head::Ext(*t as i8, l), 3)),
        0xc8 => len(2)
            .zip(b.get(3))
            .map(|(l, t)| (Head::Ext(*t as i8, l), 4)),
        0xc9 => len(4)
            .zip(b.get(5))
            .map(|(l, t)| (Head::Ext(*t as i8, l), 6)),
        0xca => be(b, 4).map(|x| (Head::F32(f32::from_bits(x as u32)), 5)),
        0xcb => be(b, 8).map(|x| (Head::F64(f64::from_bits(x)), 9)),
        0xcc => be(b, 1).map(|x| (Head::Uint(x), 2)),
        0xcd => be(b, 2).map(|x| (Head::Uint(x), 3)),
        0xce => be(b, 4).map(|x| (Head::Uint(x), 5)),
        0xcf => be(b, 8).map(|x| (Head::Uint(x), 9)),
        0xd0 => be(b, 1).map(|x| (Head::Int(i64::from(x as u8 as i8)), 2)),
        0xd1 => be(b, 2).map(|x| (Head::Int(i64::from(x as u16 as i16)), 3)),
        0xd2 => be(b, 4).map(|x| (Head::Int(i64::from(x as u32 as i32)), 5)),
        0xd3 => be(b, 8).map(|x| (Head::Int(x as i64), 9)),
        0xd4..=0xd8 => b.get(1).map(|t| (Head::Ext(*t as i8, 1 << (m - 0xd4)), 2)),
        0xd9 => len(1).map(|l| (Head::Str(l), 2)),
        0xda => len(2).map(|l| (Head::Str(l), 3)),
        0xdb => len(4).map(|l| (Head::Str(l), 5)),
        0xdc => len(2).map(|l| (Head::Array(l), 3)),
        0xdd => len(4).map(|l| (Head::Array(l), 5)),
        0xde => len(2).map(|l| (Head::Map(l), 3)),
        0xdf => len(4).map(|l| (Head::Map(l), 5)),
        0xe0..=0xff => Some((Head::Int(i64::from(m as i8)), 1)),
    };
    Ok(head)
}

/// The budgeted recursive decoder behind [`decode_with`] and [`decode_prefix`].
struct Decoder<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Elements the budget still allows.
    left: usize,
    budget: Budget,
}

impl<'a> Decoder<'a> {
    fn new(bytes: &'a [u8], budget: Budget) -> Self {
        Decoder {
            bytes,
            pos: 0,
            left: budget.elements,
            budget,
        }
    }

    fn run(mut self) -> Result<(Value, usize)> {
        let v = self.value(0)?;
        Ok((v, self.pos))
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn over_budget(&self) -> Error {
        Error::Msgpack(format!(
            "more than {} elements (the decode budget for {} bytes)",
            self.budget.elements,
            self.bytes.len()
        ))
    }

    fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8]> {
        if len > self.remaining() {
            return Err(Error::Msgpack(format!(
                "{what} of {len} bytes declared with {} bytes left",
                self.remaining()
            )));
        }
        let data = self.bytes.get(self.pos..self.pos + len).unwrap_or_default();
        self.pos += len;
        Ok(data)
    }

    /// Checks a container of `count` values at `depth` before anything is allocated for it.
    fn open(&self, count: usize, depth: usize, what: &str) -> Result<()> {
        if depth >= self.budget.depth {
            return Err(Error::Msgpack(format!(
                "nesting deeper than {} levels",
                self.budget.depth
            )));
        }
        // Every value takes at least one byte.
        if count > self.remaining() {
            return Err(Error::Msgpack(format!(
                "{what} of {count} values declared with {} bytes left",
                self.remaining()
            )));
        }
        if count > self.left {
            return Err(self.over_budget());
        }
        Ok(())
    }

    fn value(&mut self, depth: usize) -> Result<Value> {
        if self.left == 0 {
            return Err(self.over_budget());
        }
        self.left -= 1;
        let start = self.pos;
        let rest = self.bytes.get(start..).unwrap_or_default();
        let (head, n) = read_head(rest)?.ok_or_else(truncated)?;
        self.pos += n;
        Ok(match head {
            Head::Nil => Value::Nil,
            Head::Bool(b) => Value::Boolean(b),
            Head::Uint(u) => Value::from(u),
            Head::Int(i) => Value::from(i),
            Head::F32(f) => Value::F32(f),
            Head::F64(f) => Value::F64(f),
            Head::Str(len) => {
                let data = self.take(len, "str")?;
                match std::str::from_utf8(data) {
                    Ok(text) => Value::String(Utf8String::from(text)),
                    // rmpv alone can build a `Utf8String` holding bytes that are not UTF-8:
                    // hand it this one string (already checked complete).
                    Err(_) => rmpv::decode::read_value(
                        &mut self.bytes.get(start..self.pos).unwrap_or_default(),
                    )
                    .map_err(|e| Error::Msgpack(e.to_string()))?,
                }
            }
            Head::Bin(len) => Value::Binary(self.take(len, "bin")?.to_vec()),
            Head::Ext(ty, len) => Value::Ext(ty, self.take(len, "ext")?.to_vec()),
            Head::Array(count) => {
                self.open(count, depth, "array")?;
                let mut items = Vec::with_capacity(count);
                for _ in 0..count {
                    items.push(self.value(depth + 1)?);
                }
                Value::Array(items)
            }
            Head::Map(count) => {
                self.open(count.saturating_mul(2), depth, "map")?;
                let mut pairs = Vec::with_capacity(count);
                for _ in 0..count {
                    let k = self.value(depth + 1)?;
                    pairs.push((k, self.value(depth + 1)?));
                }
                Value::Map(pairs)
            }
        })
    }
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

    fn msg(r: Result<Value>) -> String {
        match r {
            Err(Error::Msgpack(m)) => m,
            other => panic!("expected a msgpack error, got {other:?}"),
        }
    }

    #[test]
    fn authenticated_loads_of_many_small_values_decode() {
        // A minion's return of 0..10,000 (1 to 3 bytes per integer) inside its load: the
        // default budget refuses no valid message.
        let ret = Value::Array((0..10_000).map(Value::from).collect());
        let load = Value::Map(vec![(s("return"), ret.clone()), (s("id"), s("m1"))]);
        let decoded = decode(&encode(&load)).unwrap();
        assert_eq!(get(&decoded, "return"), Some(&ret));
    }

    #[test]
    fn a_flat_array_of_zeros_is_refused_when_the_element_budget_runs_out() {
        // The attack, scaled down: one byte per element decodes to 40 bytes each.
        let n: usize = 1_000_000;
        let mut wire = vec![0xdd];
        wire.extend_from_slice(&u32::try_from(n).unwrap().to_be_bytes());
        wire.resize(5 + n, 0);
        let budget = Budget::for_clear(wire.len());
        assert_eq!(budget.elements, (5 + n) / 4 + 1024);
        let err = msg(decode_with(&wire, budget));
        assert!(err.contains("more than 251025 elements"), "{err}");
        // The default budget takes any valid message: every value is at least one byte.
        assert!(matches!(decode(&wire), Ok(Value::Array(a)) if a.len() == n));
        // The same array within an explicit larger budget decodes.
        let big = Budget {
            elements: n + 1,
            depth: MAX_DEPTH,
        };
        assert!(matches!(decode_with(&wire, big), Ok(Value::Array(a)) if a.len() == n));
    }

    #[test]
    fn the_budget_counts_map_keys_and_nested_values() {
        // {"a": [nil; 3]} is 1 + 1 + 1 + 3 = 6 elements.
        let wire = [0x81, 0xa1, b'a', 0x93, 0xc0, 0xc0, 0xc0];
        let exact = Budget {
            elements: 6,
            depth: MAX_DEPTH,
        };
        assert!(decode_with(&wire, exact).is_ok());
        let short = Budget {
            elements: 5,
            depth: MAX_DEPTH,
        };
        assert!(msg(decode_with(&wire, short)).contains("more than 5 elements"));
    }

    #[test]
    fn small_messages_with_many_small_values_fit_the_allowance() {
        let v = Value::Array((0..1000).map(Value::from).collect());
        let wire = encode(&v);
        assert!(wire.len() < 4 * 1000);
        assert_eq!(decode(&wire).unwrap(), v);
    }

    #[test]
    fn huge_declared_lengths_with_short_input_are_refused_before_allocating() {
        for (wire, what) in [
            (
                &[0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0][..],
                "array of 4294967295 values declared with 1 bytes left",
            ),
            (
                &[0xdf, 0xff, 0xff, 0xff, 0xff][..],
                "map of 8589934590 values declared with 0 bytes left",
            ),
            (
                &[0xdb, 0xff, 0xff, 0xff, 0xff, b'x'][..],
                "str of 4294967295 bytes declared with 1 bytes left",
            ),
            (
                &[0xc6, 0xff, 0xff, 0xff, 0xff][..],
                "bin of 4294967295 bytes declared with 0 bytes left",
            ),
            (
                &[0xc9, 0xff, 0xff, 0xff, 0xff, 0x01][..],
                "ext of 4294967295 bytes declared with 0 bytes left",
            ),
            (
                &[0x91, 0xdc, 0xff, 0xff][..],
                "array of 65535 values declared with 0 bytes left",
            ),
        ] {
            assert_eq!(msg(decode(wire)), what);
        }
        // A count within the bytes left but beyond the budget is a budget error.
        let mut wire = vec![0xdc, 0x27, 0x10];
        wire.resize(3 + 10_000, 0xc0);
        assert!(msg(decode_with(&wire, Budget::for_clear(wire.len()))).contains("elements"));
    }

    #[test]
    fn nesting_deeper_than_the_limit_is_a_clear_error_and_the_limit_itself_decodes() {
        let mut ok = vec![0x91; MAX_DEPTH];
        ok.push(0xc0);
        assert!(decode(&ok).is_ok());
        let mut deep = vec![0x91; MAX_DEPTH + 1];
        deep.push(0xc0);
        assert_eq!(msg(decode(&deep)), "nesting deeper than 128 levels");
        // Deep nesting of maps (as values) as well, far beyond the limit: no stack overflow.
        let mut maps = Vec::new();
        for _ in 0..100_000 {
            maps.extend_from_slice(&[0x81, 0xa1, b'k']);
        }
        maps.push(0xc0);
        assert_eq!(msg(decode(&maps)), "nesting deeper than 128 levels");
    }

    #[test]
    fn decoding_matches_rmpv_for_every_kind_of_value() {
        let v = Value::Array(vec![
            Value::Nil,
            Value::from(true),
            Value::from(false),
            Value::from(0),
            Value::from(127),
            Value::from(128),
            Value::from(65_536),
            Value::from(u64::MAX),
            Value::from(-1),
            Value::from(-33),
            Value::from(-129),
            Value::from(-40_000),
            Value::from(i64::MIN),
            Value::F32(1.5),
            Value::F64(-2.25),
            s(""),
            s("x".repeat(31)),
            s("y".repeat(300)),
            s("z".repeat(70_000)),
            bin(vec![]),
            bin(vec![7; 300]),
            bin(vec![8; 70_000]),
            Value::Ext(78, vec![1]),
            Value::Ext(-1, vec![2; 4]),
            Value::Ext(5, vec![3; 16]),
            Value::Ext(6, vec![4; 3]),
            Value::Ext(7, vec![5; 300]),
            map((0..20).map(|i| (format!("k{i}"), Value::from(i)))),
            Value::Array((0..20).map(Value::from).collect()),
            Value::Map(vec![(Value::from(1), Value::Nil)]),
        ]);
        let wire = encode(&v);
        let ours = decode(&wire).unwrap();
        let theirs = rmpv::decode::read_value(&mut wire.as_slice()).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(ours, v);
        // Non-UTF-8 inside a container, and the wide forms Python never emits.
        let wire = [0x93, 0xa2, 0xff, 0xfe, 0xd9, 0x01, b'a', 0xd0, 0x05];
        let ours = decode(&wire).unwrap();
        assert_eq!(ours, rmpv::decode::read_value(&mut &wire[..]).unwrap());
    }

    #[test]
    fn decoding_agrees_with_rmpv_on_random_bytes() {
        // A fixed linear congruential sequence: the same inputs on every run.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut byte = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 56) as u8
        };
        for _ in 0..50_000 {
            let len = usize::from(byte() % 48);
            let wire: Vec<u8> = (0..len).map(|_| byte()).collect();
            let ours = decode_prefix(&wire);
            let mut rd = wire.as_slice();
            let theirs = rmpv::decode::read_value(&mut rd).map(|v| (v, wire.len() - rd.len()));
            match (ours, theirs) {
                (Ok((a, n)), Ok((b, m))) => {
                    assert_eq!((encode(&a), n), (encode(&b), m), "{wire:02x?}")
                }
                (Ok(_), Err(e)) => panic!("only Halite decodes {wire:02x?}: rmpv says {e}"),
                (Err(Error::Msgpack(e)), Ok(_)) => assert!(
                    e.contains("0xc1") || e.contains("nesting") || e.contains("elements"),
                    "only rmpv decodes {wire:02x?}: {e}"
                ),
                (Err(_), _) => {}
            }
        }
    }

    #[test]
    fn skip_measures_without_building_and_says_when_more_is_needed() {
        let v = map([
            ("a", Value::Array(vec![s("b"), bin(vec![1, 2])])),
            ("c", Value::Nil),
        ]);
        let wire = encode(&v);
        assert_eq!(skip(&wire).unwrap(), Some(wire.len()));
        let mut longer = wire.clone();
        longer.extend_from_slice(&[0xc0, 0xc0]);
        assert_eq!(skip(&longer).unwrap(), Some(wire.len()));
        for cut in 0..wire.len() {
            assert_eq!(skip(&wire[..cut]).unwrap(), None, "cut at {cut}");
        }
        assert!(skip(&[0x92, 0xc1, 0xc0]).is_err());
        // A declared count larger than the bytes left needs more bytes: no allocation, no error.
        assert_eq!(skip(&[0xdd, 0xff, 0xff, 0xff, 0xff]).unwrap(), None);
        // A deep value is linear, not recursive.
        let mut deep = vec![0x91; 1_000_000];
        deep.push(0xc0);
        assert_eq!(skip(&deep).unwrap(), Some(deep.len()));
    }

    #[test]
    fn raw_map_reads_entries_as_bytes() {
        let v = map([
            ("enc", s("aes")),
            ("load", bin(vec![9; 40])),
            ("version", Value::from(3)),
        ]);
        let wire = encode(&v);
        let mut entries = RawMap::new(&wire).unwrap();
        let got: Vec<_> = entries.by_ref().map(Result::unwrap).collect();
        assert_eq!(entries.end(), wire.len());
        assert_eq!(raw_bytes(got[0].0), Some(&b"enc"[..]));
        assert_eq!(raw_bytes(got[0].1), Some(&b"aes"[..]));
        assert_eq!(raw_bytes(got[1].1), Some(&[9; 40][..]));
        assert_eq!(raw_i64(got[2].1), Some(3));
        assert_eq!(raw_i64(got[1].1), None);
        assert_eq!(raw_bytes(got[2].1), None);
        assert!(matches!(
            RawMap::new(&[0x92, 0, 0]),
            Err(Error::Malformed(_))
        ));
        assert!(matches!(RawMap::new(&[0xc1]), Err(Error::Msgpack(_))));
        assert!(matches!(RawMap::new(&[]), Err(Error::Msgpack(_))));
        let cut = &wire[..wire.len() - 1];
        assert!(RawMap::new(cut).unwrap().any(|e| e.is_err()));
        // A flat map refuses a nested value where it starts: here one declaring far more
        // elements than there are bytes, which a walk would report as truncated.
        let nested = [
            0x82, 0xa1, b'a', 0x01, 0xa1, b'b', 0xdd, 0xff, 0xff, 0xff, 0xff,
        ];
        let mut flat = RawMap::new(&nested).unwrap().flat();
        assert!(flat.next().unwrap().is_ok());
        assert!(matches!(flat.next(), Some(Err(Error::Malformed(_)))));
        assert!(flat.next().is_none());
        assert!(matches!(
            RawMap::new(&nested).unwrap().nth(1),
            Some(Err(Error::Msgpack(_)))
        ));
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
