//! PyYAML's YAML 1.1 implicit resolvers (`yaml/resolver.py`), written out by hand.
//!
//! Only plain, untagged scalars are resolved; quoted and block scalars are strings. The
//! order is PyYAML's: bool, float, int, merge, null, (timestamp,) value. Timestamps are
//! not told apart because Salt's loader constructs them as plain strings anyway.

pub(crate) const STR_TAG: &str = "tag:yaml.org,2002:str";
pub(crate) const SEQ_TAG: &str = "tag:yaml.org,2002:seq";
pub(crate) const MAP_TAG: &str = "tag:yaml.org,2002:map";
pub(crate) const BOOL_TAG: &str = "tag:yaml.org,2002:bool";
pub(crate) const INT_TAG: &str = "tag:yaml.org,2002:int";
pub(crate) const FLOAT_TAG: &str = "tag:yaml.org,2002:float";
pub(crate) const NULL_TAG: &str = "tag:yaml.org,2002:null";
pub(crate) const MERGE_TAG: &str = "tag:yaml.org,2002:merge";
pub(crate) const VALUE_TAG: &str = "tag:yaml.org,2002:value";

/// The tag PyYAML gives a scalar without an explicit tag.
pub(crate) fn resolve_scalar(value: &str, plain_implicit: bool) -> &'static str {
    if !plain_implicit {
        STR_TAG
    } else if is_bool(value) {
        BOOL_TAG
    } else if is_float(value) {
        FLOAT_TAG
    } else if is_int(value) {
        INT_TAG
    } else if value == "<<" {
        MERGE_TAG
    } else if matches!(value, "" | "~" | "null" | "Null" | "NULL") {
        NULL_TAG
    } else if value == "=" {
        VALUE_TAG
    } else {
        STR_TAG
    }
}

/// `yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF`
pub(crate) fn bool_value(value: &str) -> Option<bool> {
    match value {
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Some(true),
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

fn is_bool(value: &str) -> bool {
    bool_value(value).is_some()
}

fn strip_sign(s: &[u8]) -> &[u8] {
    match s.first() {
        Some(b'-' | b'+') => &s[1..],
        _ => s,
    }
}

/// Length of the longest prefix whose bytes all satisfy `pred`.
fn span(s: &[u8], pred: impl Fn(u8) -> bool) -> usize {
    s.iter().take_while(|&&b| pred(b)).count()
}

fn digit_or_underscore(b: u8) -> bool {
    b.is_ascii_digit() || b == b'_'
}

/// `(?::[0-5]?[0-9])+` covering all of `s`.
fn sexagesimal_groups(s: &[u8]) -> bool {
    if s.first() != Some(&b':') {
        return false;
    }
    s[1..].split(|&b| b == b':').all(|group| match group {
        [d] => d.is_ascii_digit(),
        [h, d] => (b'0'..=b'5').contains(h) && d.is_ascii_digit(),
        _ => false,
    })
}

/// `[eE][-+][0-9]+` covering all of `s`, or `s` empty.
fn optional_exponent(s: &[u8]) -> bool {
    match s {
        [] => true,
        [b'e' | b'E', b'-' | b'+', digits @ ..] => {
            !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
        }
        _ => false,
    }
}

/// PyYAML's float regex.
fn is_float(value: &str) -> bool {
    let s = value.as_bytes();
    if matches!(value, ".nan" | ".NaN" | ".NAN") {
        return true;
    }
    let unsigned = strip_sign(s);
    if matches!(unsigned, b".inf" | b".Inf" | b".INF") {
        return true;
    }
    // `\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?` (no sign allowed)
    if let [b'.', first, rest @ ..] = s {
        if first.is_ascii_digit() {
            let n = span(rest, digit_or_underscore);
            if optional_exponent(&rest[n..]) {
                return true;
            }
        }
    }
    // Both remaining forms start with `[-+]?[0-9][0-9_]*`.
    if !unsigned.first().is_some_and(u8::is_ascii_digit) {
        return false;
    }
    let int_len = span(unsigned, digit_or_underscore);
    let after_int = &unsigned[int_len..];
    // `[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)?`
    if let [b'.', frac @ ..] = after_int {
        let n = span(frac, digit_or_underscore);
        if optional_exponent(&frac[n..]) {
            return true;
        }
    }
    // `[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*`
    if let Some(dot) = after_int.iter().position(|&b| b == b'.') {
        let (groups, frac) = after_int.split_at(dot);
        return sexagesimal_groups(groups) && frac[1..].iter().all(|&b| digit_or_underscore(b));
    }
    false
}

/// PyYAML's int regex.
fn is_int(value: &str) -> bool {
    let s = strip_sign(value.as_bytes());
    match s {
        [] => false,
        [b'0'] => true,
        [b'0', b'b', rest @ ..] => {
            !rest.is_empty() && rest.iter().all(|&b| matches!(b, b'0' | b'1' | b'_'))
        }
        [b'0', b'x', rest @ ..] => {
            !rest.is_empty() && rest.iter().all(|&b| b.is_ascii_hexdigit() || b == b'_')
        }
        [b'0', rest @ ..] => rest.iter().all(|&b| matches!(b, b'0'..=b'7' | b'_')),
        [b'1'..=b'9', rest @ ..] => {
            let n = span(rest, digit_or_underscore);
            n == rest.len() || sexagesimal_groups(&rest[n..])
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_scalars_resolve_like_pyyaml() {
        let cases = [
            ("yes", BOOL_TAG),
            ("Off", BOOL_TAG),
            ("TRUE", BOOL_TAG),
            ("yEs", STR_TAG),
            ("y", STR_TAG),
            ("1.5", FLOAT_TAG),
            ("3.", FLOAT_TAG),
            (".5", FLOAT_TAG),
            ("6.8523015e+5", FLOAT_TAG),
            ("685.230_15e+03", FLOAT_TAG),
            ("190:20:30.15", FLOAT_TAG),
            ("-.Inf", FLOAT_TAG),
            (".NaN", FLOAT_TAG),
            ("-.nan", STR_TAG),
            ("1e3", STR_TAG),
            ("1.0e3", STR_TAG),
            ("._", STR_TAG),
            ("0755", INT_TAG),
            ("0x1f", INT_TAG),
            ("0b101", INT_TAG),
            ("0b2", STR_TAG),
            ("1_000", INT_TAG),
            ("-0", INT_TAG),
            ("0_", INT_TAG),
            ("08", STR_TAG),
            ("1:30", INT_TAG),
            ("1:60", STR_TAG),
            ("0:30", STR_TAG),
            ("<<", MERGE_TAG),
            ("", NULL_TAG),
            ("~", NULL_TAG),
            ("Null", NULL_TAG),
            ("nULL", STR_TAG),
            ("=", VALUE_TAG),
            ("2001-12-14", STR_TAG),
            ("salt", STR_TAG),
        ];
        for (value, tag) in cases {
            assert_eq!(resolve_scalar(value, true), tag, "{value:?}");
        }
    }

    #[test]
    fn quoted_scalars_are_strings() {
        for value in ["yes", "0755", "~", "1.5"] {
            assert_eq!(resolve_scalar(value, false), STR_TAG);
        }
    }
}
