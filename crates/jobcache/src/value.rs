//! msgpack helpers over [`rmpv::Value`], shared by both backends.

use crate::{Error, Result};
use rmpv::Value;

/// Nesting deeper than this is refused when decoding (protects the decoder's stack).
const MAX_DEPTH: usize = 256;

/// Encodes `v` as msgpack: text as `str`, blobs as `bin` (Salt's `use_bin_type=True`).
pub(crate) fn encode(v: &Value) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, v)?;
    Ok(out)
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
        assert!(matches!(decode(&trailing, &what), Err(Error::Corrupt { .. })));
        // A fixarray announcing two elements with only one present.
        assert!(matches!(decode(&[0x92, 0x01], &what), Err(Error::Corrupt { .. })));
        assert!(matches!(decode(&[], &what), Err(Error::Corrupt { .. })));
    }

    #[test]
    fn decode_refuses_deep_nesting_without_overflowing() {
        let deep = vec![0x91u8; 100_000];
        assert!(matches!(decode(&deep, &|| "deep".into()), Err(Error::Corrupt { .. })));
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
