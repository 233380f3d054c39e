//! How Salt's Python code sees an `rmpv::Value`: `str()`, `repr()`, equality and dict
//! lookups.
//!
//! Salt decodes msgpack with `raw=True` and then `decode_embedded_strs`, so a msgpack `str`
//! or `bin` whose bytes are valid UTF-8 is a Python `str`, and one that is not stays
//! `bytes`. Maps become dicts, where a later duplicate key wins. Integers, floats (`float32`
//! widened to `float`), `None` and booleans are themselves.
//!
//! Known differences: `repr()` of non-ASCII characters decides "printable" from a built-in
//! table of the non-printable Unicode categories that matter in practice (controls, format
//! characters, separators, private use, noncharacters) rather than the full Unicode
//! database, and `ext` values other than Salt's are rendered as the `bytes` msgpack-python
//! hands back (Salt's datetime and constant ext types, 78 and 79, are rendered the same way).

use std::borrow::Cow;
use std::fmt::Write as _;

use rmpv::Value;

/// The Python `str` a value is, if it is one.
pub fn text(v: &Value) -> Option<&str> {
    match v {
        Value::String(s) => std::str::from_utf8(s.as_bytes()).ok(),
        Value::Binary(b) => std::str::from_utf8(b).ok(),
        _ => None,
    }
}

/// Python `str(v)`.
pub fn to_str(v: &Value) -> Cow<'_, str> {
    if let Some(s) = text(v) {
        return Cow::Borrowed(s);
    }
    let mut out = String::new();
    repr(v, &mut out);
    Cow::Owned(out)
}

/// Python `repr(v)`, appended to `out`.
pub fn repr(v: &Value, out: &mut String) {
    match v {
        Value::Nil => out.push_str("None"),
        Value::Boolean(true) => out.push_str("True"),
        Value::Boolean(false) => out.push_str("False"),
        Value::Integer(i) => {
            let _ = write!(out, "{i}");
        }
        Value::F32(f) => out.push_str(&float_repr(f64::from(*f))),
        Value::F64(f) => out.push_str(&float_repr(*f)),
        Value::String(s) => match std::str::from_utf8(s.as_bytes()) {
            Ok(s) => str_repr(s, out),
            Err(_) => bytes_repr(s.as_bytes(), out),
        },
        Value::Binary(b) => match std::str::from_utf8(b) {
            Ok(s) => str_repr(s, out),
            Err(_) => bytes_repr(b, out),
        },
        Value::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push_str(", ");
                }
                repr(item, out);
            }
            out.push(']');
        }
        Value::Map(entries) => {
            out.push('{');
            for (n, (k, v)) in dict_entries(entries).enumerate() {
                if n > 0 {
                    out.push_str(", ");
                }
                repr(k, out);
                out.push_str(": ");
                repr(v, out);
            }
            out.push('}');
        }
        Value::Ext(_, data) => bytes_repr(data, out),
    }
}

/// The entries of a msgpack map as the Python dict holds them: in first-insertion order,
/// with the value of the last duplicate.
pub fn dict_entries(entries: &[(Value, Value)]) -> impl Iterator<Item = (&Value, &Value)> {
    entries.iter().enumerate().filter_map(move |(n, (k, _))| {
        if entries[..n].iter().any(|(earlier, _)| key_eq(earlier, k)) {
            return None;
        }
        let value = entries
            .iter()
            .rev()
            .find(|(later, _)| key_eq(later, k))
            .map_or(&entries[n].1, |(_, v)| v);
        Some((k, value))
    })
}

/// Python `key in dict` / `dict[key]` with a `str` key.
pub fn dict_get<'v>(entries: &'v [(Value, Value)], key: &str) -> Option<&'v Value> {
    entries
        .iter()
        .rev()
        .find(|(k, _)| text(k) == Some(key))
        .map(|(_, v)| v)
}

/// A scalar Python key produced by `int()` or YAML loading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
}

/// Python `dict[key]` with a scalar (non-`str`) key: numbers compare by value across
/// `bool`, `int` and `float`, as Python's hashing makes them.
pub(crate) fn dict_get_scalar(entries: &[(Value, Value)], key: Scalar) -> Option<&Value> {
    entries
        .iter()
        .rev()
        .find(|(k, _)| scalar_eq(k, key))
        .map(|(_, v)| v)
}

fn number(v: &Value) -> Option<Scalar> {
    match v {
        Value::Boolean(b) => Some(Scalar::Int(i128::from(*b))),
        Value::Integer(i) => i
            .as_i64()
            .map(i128::from)
            .or_else(|| i.as_u64().map(i128::from))
            .map(Scalar::Int),
        Value::F32(f) => Some(Scalar::Float(f64::from(*f))),
        Value::F64(f) => Some(Scalar::Float(*f)),
        _ => None,
    }
}

fn scalar_eq(v: &Value, key: Scalar) -> bool {
    let key = match key {
        Scalar::None => return matches!(v, Value::Nil),
        Scalar::Bool(b) => Scalar::Int(i128::from(b)),
        other => other,
    };
    match (number(v), key) {
        (Some(Scalar::Int(a)), Scalar::Int(b)) => a == b,
        (Some(Scalar::Float(a)), Scalar::Float(b)) => a == b,
        // Exact comparison of an integer with a float, as Python does it.
        (Some(Scalar::Int(i)), Scalar::Float(f)) | (Some(Scalar::Float(f)), Scalar::Int(i)) => {
            f.fract() == 0.0 && f.is_finite() && f.abs() < 1.8e38 && f as i128 == i
        }
        _ => false,
    }
}

/// Python `==` between two dict keys, for merging duplicates.
fn key_eq(a: &Value, b: &Value) -> bool {
    if let (Some(x), Some(y)) = (text(a), text(b)) {
        return x == y;
    }
    match (a, b) {
        (Value::Nil, Value::Nil) => true,
        _ => match number(b) {
            Some(n) => scalar_eq(a, n),
            None => a == b,
        },
    }
}

/// Python `repr(float)`: the shortest round-tripping digits, positional for decimal
/// exponents in [-4, 16), scientific with a sign and at least two exponent digits otherwise.
pub(crate) fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-5", "1e20".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::from(sign);
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = usize::try_from(exp).unwrap_or(0) + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            let zeros = usize::try_from(-exp - 1).unwrap_or(0);
            out.extend(std::iter::repeat_n('0', zeros));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    out
}

fn str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_ascii() || is_printable(c) => out.push(c),
            c => {
                let n = c as u32;
                let _ = if n <= 0xff {
                    write!(out, "\\x{n:02x}")
                } else if n <= 0xffff {
                    write!(out, "\\u{n:04x}")
                } else {
                    write!(out, "\\U{n:08x}")
                };
            }
        }
    }
    out.push(quote);
}

fn bytes_repr(b: &[u8], out: &mut String) {
    let quote = if b.contains(&b'\'') && !b.contains(&b'"') {
        b'"'
    } else {
        b'\''
    };
    out.push('b');
    out.push(char::from(quote));
    for &byte in b {
        match byte {
            b'\\' => out.push_str("\\\\"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            q if q == quote => {
                out.push('\\');
                out.push(char::from(q));
            }
            0x20..=0x7e => out.push(char::from(byte)),
            _ => {
                let _ = write!(out, "\\x{byte:02x}");
            }
        }
    }
    out.push(char::from(quote));
}

/// Python's `str.isprintable()` for one non-ASCII character (see the module notes).
fn is_printable(c: char) -> bool {
    let n = c as u32;
    let non_printable: &[(u32, u32)] = &[
        (0x80, 0xa0),
        (0xad, 0xad),
        (0x600, 0x605),
        (0x61c, 0x61c),
        (0x6dd, 0x6dd),
        (0x70f, 0x70f),
        (0x1680, 0x1680),
        (0x180e, 0x180e),
        (0x2000, 0x200f),
        (0x2028, 0x202f),
        (0x205f, 0x2064),
        (0x2066, 0x206f),
        (0x3000, 0x3000),
        (0xd800, 0xf8ff),
        (0xfdd0, 0xfdef),
        (0xfeff, 0xfeff),
        (0xfff9, 0xfffb),
        (0x110bd, 0x110bd),
        (0x1d173, 0x1d17a),
        (0xe0001, 0xe0001),
        (0xe0020, 0xe007f),
        (0xf0000, 0x10ffff),
    ];
    if n & 0xfffe == 0xfffe {
        return false;
    }
    !non_printable.iter().any(|&(lo, hi)| lo <= n && n <= hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    // `repr()` results captured from CPython 3.11.7.
    const FLOATS: &[(f64, &str)] = &[
        (0.0_f64, "0.0"),
        (-0.0_f64, "-0.0"),
        (1.0_f64, "1.0"),
        (1.5_f64, "1.5"),
        (0.1_f64, "0.1"),
        (1e+16_f64, "1e+16"),
        (1000000000000000.0_f64, "1000000000000000.0"),
        (123456789012345.6_f64, "123456789012345.6"),
        (0.0001_f64, "0.0001"),
        (1e-05_f64, "1e-05"),
        (2.5e-07_f64, "2.5e-07"),
        (1e+20_f64, "1e+20"),
        (-1e+22_f64, "-1e+22"),
        (1.7976931348623157e+308_f64, "1.7976931348623157e+308"),
        (5e-324_f64, "5e-324"),
        (1.23456_f64, "1.23456"),
        (100.0_f64, "100.0"),
        (0.30000000000000004_f64, "0.30000000000000004"),
        (1234567890123456.0_f64, "1234567890123456.0"),
        (1.2345678901234568e+16_f64, "1.2345678901234568e+16"),
    ];
    const F32S: &[(f32, &str)] = &[
        (0.1_f32, "0.10000000149011612"),
        (1.5_f32, "1.5"),
        (3.4e+38_f32, "3.3999999521443642e+38"),
        (1e-07_f32, "1.0000000116860974e-07"),
    ];
    const STR_REPRS: &[(&str, &str)] = &[
        ("plain", "'plain'"),
        ("it's", "\"it's\""),
        ("say \"hi\"", "'say \"hi\"'"),
        ("both ' and \"", "'both \\' and \"'"),
        ("tab\t", "'tab\\t'"),
        ("nl\n", "'nl\\n'"),
        ("\u{0}\u{7f}", "'\\x00\\x7f'"),
        ("\u{e9}", "'\u{e9}'"),
        ("\u{85}", "'\\x85'"),
        ("\u{a0}", "'\\xa0'"),
        ("\u{200b}", "'\\u200b'"),
        ("\u{2028}", "'\\u2028'"),
        ("\u{e000}", "'\\ue000'"),
        ("\u{1f600}", "'\u{1f600}'"),
        ("\\", "'\\\\'"),
        ("\u{e0001}", "'\\U000e0001'"),
        ("\u{feff}", "'\\ufeff'"),
    ];
    const BYTES_REPRS: &[(&[u8], &str)] = &[
        (&[255], "b'\\xff'"),
        (&[255, 97, 39, 98], "b\"\\xffa'b\""),
        (&[255, 0, 10, 92], "b'\\xff\\x00\\n\\\\'"),
        (&[128, 34, 39], "b'\\x80\"\\''"),
    ];

    #[test]
    fn float_repr_matches_python() {
        for &(f, want) in FLOATS {
            assert_eq!(float_repr(f), want, "{f:e}");
        }
    }

    #[test]
    fn float32_is_widened_like_msgpack_python() {
        for &(f, want) in F32S {
            assert_eq!(to_str(&Value::F32(f)), want);
        }
    }

    #[test]
    fn str_repr_matches_python() {
        for &(s, want) in STR_REPRS {
            let mut out = String::new();
            repr(&Value::from(s), &mut out);
            assert_eq!(out, want, "{s:?}");
        }
    }

    #[test]
    fn non_utf8_strings_are_python_bytes() {
        for &(b, want) in BYTES_REPRS {
            assert_eq!(to_str(&Value::Binary(b.to_vec())), want);
            // A msgpack `str` container holding the same bytes.
            let len = u8::try_from(b.len()).unwrap();
            let mut packed = vec![0xa0 | len];
            packed.extend_from_slice(b);
            let decoded = rmpv::decode::read_value(&mut packed.as_slice()).unwrap();
            assert!(matches!(decoded, Value::String(_)));
            assert_eq!(to_str(&decoded), want);
        }
    }

    #[test]
    fn containers_print_like_python() {
        let v = Value::Map(vec![
            (
                Value::from("a"),
                Value::Array(vec![Value::from(1), Value::Nil, Value::Boolean(true)]),
            ),
            (Value::from(2), Value::F64(0.5)),
            (Value::from("a"), Value::from("last")),
        ]);
        assert_eq!(to_str(&v), "{'a': 'last', 2: 0.5}");
        assert_eq!(to_str(&Value::Array(vec![])), "[]");
        assert_eq!(to_str(&Value::Map(vec![])), "{}");
    }

    #[test]
    fn utf8_binary_is_a_python_str() {
        assert_eq!(text(&Value::Binary(b"web1".to_vec())), Some("web1"));
    }

    #[test]
    fn numeric_keys_compare_across_bool_int_and_float() {
        let map = vec![
            (Value::Boolean(true), Value::from("bool")),
            (Value::F64(2.0), Value::from("float")),
            (Value::Nil, Value::from("none")),
        ];
        assert_eq!(
            dict_get_scalar(&map, Scalar::Int(1)),
            Some(&Value::from("bool"))
        );
        assert_eq!(
            dict_get_scalar(&map, Scalar::Int(2)),
            Some(&Value::from("float"))
        );
        assert_eq!(
            dict_get_scalar(&map, Scalar::None),
            Some(&Value::from("none"))
        );
        assert_eq!(dict_get_scalar(&map, Scalar::Float(1.5)), None);
    }
}
