//! msgpack helpers over [`rmpv::Value`], shared by both backends.

use crate::{Error, Result};
use rmpv::Value;

/// The decoder's depth budget. rmpv spends about two units per container level plus a few
/// for the leaf, so this reads back anything [`MAX_NESTING`] allows, with room for the
/// store's record wrapper, and still protects the decoder's stack.
const MAX_DEPTH: usize = 256;

/// Container nesting [`encode`] accepts. Salt's wire decoder (and Halite's) allows far
/// less, so real loads never get near it.
pub(crate) const MAX_NESTING: usize = 100;

/// Encodes `v` as msgpack: text as `str`, blobs as `bin` (Salt's `use_bin_type=True`).
///
/// Unlike `rmpv::encode::write_value`, which turns a `str` holding non-UTF-8 bytes into a
/// `bin`, this keeps such a value a `str` (Salt puts binary in `str` containers), so what
/// is written decodes back to the same [`Value`].
pub(crate) fn encode(v: &Value) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    write(&mut out, v, 0)?;
    Ok(out)
}

fn write(out: &mut Vec<u8>, v: &Value, nesting: usize) -> Result<()> {
    let len32 = |n: usize| {
        u32::try_from(n)
            .map_err(|_| Error::Unstorable(format!("{n} items or bytes exceed msgpack's limit")))
    };
    match v {
        Value::String(s) => {
            let bytes = s.as_bytes();
            rmp::encode::write_str_len(out, len32(bytes.len())?)?;
            out.extend_from_slice(bytes);
        }
        Value::Array(_) | Value::Map(_) if nesting >= MAX_NESTING => {
            return Err(Error::Unstorable(format!(
                "nested deeper than {MAX_NESTING} levels"
            )));
        }
        Value::Array(items) => {
            rmp::encode::write_array_len(out, len32(items.len())?)?;
            for item in items {
                write(out, item, nesting + 1)?;
            }
        }
        Value::Map(entries) => {
            rmp::encode::write_map_len(out, len32(entries.len())?)?;
            for (key, value) in entries {
                write(out, key, nesting + 1)?;
                write(out, value, nesting + 1)?;
            }
        }
        Value::Binary(b) => {
            len32(b.len())?;
            rmpv::encode::write_value(out, v)?;
        }
        Value::Ext(_, data) => {
            len32(data.len())?;
            rmpv::encode::write_value(out, v)?;
        }
        Value::Nil | Value::Boolean(_) | Value::Integer(_) | Value::F32(_) | Value::F64(_) => {
            rmpv::encode::write_value(out, v)?;
        }
    }
    Ok(())
}

/// Decodes exactly one msgpack value; `what` names the entry in the error.
pub(crate) fn decode(bytes: &[u8], what: &dyn Fn() -> String) -> Result<Value> {
    let mut rd = bytes;
    let v = rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH).map_err(|e| {
        Error::Corrupt {
            what: what(),
            reason: e.to_string(),
        }
    })?;
    if !rd.is_empty() {
        return Err(Error::Corrupt {
            what: what(),
            reason: format!("{} trailing bytes", rd.len()),
        });
    }
    Ok(v)
}

/// The bytes of a `str` or `bin` value (Salt may send text in either container).
pub(crate) fn bytes_of(v: &Value) -> Option<&[u8]> {
    match v {
        Value::String(s) => Some(s.as_bytes()),
        Value::Binary(b) => Some(b),
        _ => None,
    }
}

/// Looks up `key` in a map whose keys are `str` or `bin`.
pub(crate) fn get<'a>(map: &'a Value, key: &str) -> Option<&'a Value> {
    match map {
        Value::Map(entries) => entries
            .iter()
            .find(|(k, _)| bytes_of(k) == Some(key.as_bytes()))
            .map(|(_, v)| v),
        _ => None,
    }
}

/// A msgpack `str` value.
pub(crate) fn text(s: &str) -> Value {
    Value::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rejects_trailing_bytes_and_truncation() {
        let what = || "test".to_string();
        let good = encode(&Value::from(7)).unwrap();
        assert_eq!(decode(&good, &what).unwrap(), Value::from(7));
        let mut trailing = good.clone();
        trailing.push(0xc0);
        assert!(matches!(
            decode(&trailing, &what),
            Err(Error::Corrupt { .. })
        ));
        // A fixarray announcing two elements with only one present.
        assert!(matches!(
            decode(&[0x92, 0x01], &what),
            Err(Error::Corrupt { .. })
        ));
        assert!(matches!(decode(&[], &what), Err(Error::Corrupt { .. })));
    }

    #[test]
    fn decode_refuses_deep_nesting_without_overflowing() {
        let deep = vec![0x91u8; 100_000];
        assert!(matches!(
            decode(&deep, &|| "deep".into()),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn encode_keeps_non_utf8_str_a_str() {
        let raw = [0xa3, 0xff, 0xfe, b'x'];
        let v = decode(&raw, &|| "raw".into()).unwrap();
        assert!(v.as_str().is_none());
        assert_eq!(encode(&v).unwrap(), raw);
        let nested = Value::Map(vec![(Value::from("k"), Value::Array(vec![v.clone()]))]);
        assert_eq!(
            decode(&encode(&nested).unwrap(), &|| "n".into()).unwrap(),
            nested
        );
    }

    #[test]
    fn encode_refuses_what_decode_could_not_read_back() {
        let mut v = Value::from("leaf");
        for _ in 0..MAX_NESTING {
            v = Value::Array(vec![v]);
        }
        // The deepest accepted value decodes back, even inside one more array.
        let bytes = encode(&v).unwrap();
        assert_eq!(decode(&bytes, &|| "deep".into()).unwrap(), v);
        let wrapped = [&[0x92, 0x01][..], &bytes].concat();
        assert!(decode(&wrapped, &|| "wrapped".into()).is_ok());
        // One level more is refused at write time.
        assert!(matches!(
            encode(&Value::Array(vec![v])),
            Err(Error::Unstorable(_))
        ));
    }

    #[test]
    fn get_matches_str_and_bin_keys() {
        let m = Value::Map(vec![
            (Value::from("a"), Value::from(1)),
            (Value::Binary(b"b".to_vec()), Value::from(2)),
        ]);
        assert_eq!(get(&m, "a"), Some(&Value::from(1)));
        assert_eq!(get(&m, "b"), Some(&Value::from(2)));
        assert_eq!(get(&m, "c"), None);
        assert_eq!(get(&Value::Nil, "a"), None);
    }
}
