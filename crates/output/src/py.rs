//! The Python view of a return: what `salt.payload.loads` hands the outputters.
//!
//! Salt unpacks msgpack with `raw=True` and then runs `decode_embedded_strs`, so every
//! msgpack `str` or `bin` becomes a Python `str` when it is valid UTF-8 and stays `bytes`
//! otherwise. Maps become dicts, which means duplicate keys collapse the way Python's
//! dict assignment does (first key object, last value) and `1`, `1.0` and `True` are the
//! same key. Extension type 78 is Salt's datetime encoding; any other extension type
//! arrives as its raw payload and is decoded like a string.
//!
//! Deviations, because Python cannot represent them: a map key that is itself a list or a
//! map makes `msgpack` raise "unhashable type" and Salt drops the whole message; here the
//! key is replaced by its Python repr as a `str`. Extension type 79 (Salt's `_Constant`)
//! is treated like any other extension type.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::unicode_tables::NON_PRINTABLE;

/// Salt's msgpack extension code for `datetime.datetime` (salt/payload.py).
const EXT_DATETIME: i8 = 78;

/// A decoded value as the Python outputters see it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Py {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    DateTime(DateTime),
    List(Vec<Py>),
    /// Insertion-ordered items with Python-unique keys.
    Dict(Vec<(Py, Py)>),
}

/// A naive `datetime.datetime`, as produced by Salt's extension type 78.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct DateTime {
    year: u32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    microsecond: u32,
}

impl DateTime {
    /// Parses Salt's `%Y%m%dT%H:%M:%S.%f` wire form; `None` when it is not that shape.
    fn parse(data: &[u8]) -> Option<DateTime> {
        let text = std::str::from_utf8(data).ok()?;
        let (date, time) = text.split_once('T')?;
        let (hms, frac) = time.split_once('.')?;
        let mut hms = hms.split(':');
        let (h, m, s) = (hms.next()?, hms.next()?, hms.next()?);
        if hms.next().is_some()
            || date.len() != 8
            || !date.bytes().all(|b| b.is_ascii_digit())
            || !(1..=6).contains(&frac.len())
            || ![h, m, s].iter().all(|p| p.len() == 2)
        {
            return None;
        }
        let num = |s: &str| -> Option<u32> {
            s.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| s.parse().ok())
                .flatten()
        };
        let micro = num(frac)? * 10u32.pow(6 - frac.len() as u32);
        let dt = DateTime {
            year: num(&date[..4])?,
            month: num(&date[4..6])?,
            day: num(&date[6..])?,
            hour: num(h)?,
            minute: num(m)?,
            second: num(s)?,
            microsecond: micro,
        };
        let valid = (1..=12).contains(&dt.month)
            && dt.day >= 1
            && dt.day <= days_in_month(dt.year, dt.month)
            && dt.year >= 1
            && dt.hour < 24
            && dt.minute < 60
            && dt.second < 60;
        valid.then_some(dt)
    }

    /// `repr(datetime)`: trailing zero microsecond and second fields are dropped.
    pub(crate) fn repr(&self) -> String {
        let mut fields = vec![
            self.year,
            self.month,
            self.day,
            self.hour,
            self.minute,
            self.second,
            self.microsecond,
        ];
        for _ in 0..2 {
            if fields.last() == Some(&0) {
                fields.pop();
            }
        }
        let body: Vec<String> = fields.iter().map(u32::to_string).collect();
        format!("datetime.datetime({})", body.join(", "))
    }

    /// `str(datetime)`, i.e. `isoformat(' ')`.
    pub(crate) fn isoformat(&self) -> String {
        let mut out = format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        );
        if self.microsecond != 0 {
            out.push_str(&format!(".{:06}", self.microsecond));
        }
        out
    }
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Hashable identity of a dict key under Python's `==`.
#[derive(Hash, PartialEq, Eq)]
enum KeyId {
    None,
    Int(i128),
    /// Bits of a float that is not equal to any integer.
    Float(u64),
    Str(String),
    Bytes(Vec<u8>),
    DateTime(DateTime),
    /// A key equal to nothing else (NaN, or a stand-in for an unhashable key).
    Unique(usize),
}

/// How msgpack `str` and `bin` become Python objects.
#[derive(Clone, Copy)]
enum Strings {
    /// `raw=True` and then `decode_embedded_strs`, as for the returns the CLIs print: both
    /// become `str` when they are UTF-8 and `bytes` otherwise.
    Embedded,
    /// `raw=False`, as for a minion's job arguments: `str` is `str` (decoded lossily where
    /// Python would raise) and `bin` is `bytes`.
    Typed,
}

impl Py {
    /// Converts a msgpack value the way `salt.payload.loads` does.
    pub(crate) fn from_msgpack(value: &rmpv::Value) -> Py {
        Py::decode(value, Strings::Embedded)
    }

    fn decode(value: &rmpv::Value, strings: Strings) -> Py {
        use rmpv::Value as V;
        let decode = |v: &V| Py::decode(v, strings);
        match value {
            V::Nil => Py::None,
            V::Boolean(b) => Py::Bool(*b),
            V::Integer(i) => match (i.as_i64(), i.as_u64()) {
                (Some(v), _) => Py::Int(i128::from(v)),
                (None, Some(v)) => Py::Int(i128::from(v)),
                (None, None) => Py::None,
            },
            V::F32(f) => Py::Float(f64::from(*f)),
            V::F64(f) => Py::Float(*f),
            V::String(s) => match strings {
                Strings::Embedded => Py::from_bytes(s.as_bytes()),
                Strings::Typed => Py::Str(String::from_utf8_lossy(s.as_bytes()).into_owned()),
            },
            V::Binary(b) => match strings {
                Strings::Embedded => Py::from_bytes(b),
                Strings::Typed => Py::Bytes(b.clone()),
            },
            V::Ext(code, data) => {
                match (*code == EXT_DATETIME)
                    .then(|| DateTime::parse(data))
                    .flatten()
                {
                    Some(dt) => Py::DateTime(dt),
                    None => Py::from_bytes(data),
                }
            }
            V::Array(items) => Py::List(items.iter().map(decode).collect()),
            V::Map(pairs) => Py::dict_from_pairs(pairs.iter().map(|(k, v)| {
                let key = match k {
                    V::Array(_) | V::Map(_) => Py::Str(decode(k).repr()),
                    _ => decode(k),
                };
                (key, decode(v))
            })),
        }
    }

    fn from_bytes(bytes: &[u8]) -> Py {
        match std::str::from_utf8(bytes) {
            Ok(s) => Py::Str(s.to_owned()),
            Err(_) => Py::Bytes(bytes.to_vec()),
        }
    }

    /// Builds a dict with Python's assignment semantics: a repeated key keeps its first
    /// position and key object and takes the last value.
    pub(crate) fn dict_from_pairs(pairs: impl IntoIterator<Item = (Py, Py)>) -> Py {
        let mut items: Vec<(Py, Py)> = Vec::new();
        let mut index: HashMap<KeyId, usize> = HashMap::new();
        for (key, value) in pairs {
            let id = key.key_id(items.len());
            match index.get(&id) {
                Some(&at) => items[at].1 = value,
                None => {
                    index.insert(id, items.len());
                    items.push((key, value));
                }
            }
        }
        Py::Dict(items)
    }

    fn key_id(&self, position: usize) -> KeyId {
        match self {
            Py::None => KeyId::None,
            Py::Bool(b) => KeyId::Int(i128::from(*b)),
            Py::Int(i) => KeyId::Int(*i),
            Py::Float(f) if f.is_nan() => KeyId::Unique(position),
            Py::Float(f) => match float_as_int(*f) {
                Some(i) => KeyId::Int(i),
                None => KeyId::Float(f.to_bits()),
            },
            Py::Str(s) => KeyId::Str(s.clone()),
            Py::Bytes(b) => KeyId::Bytes(b.clone()),
            Py::DateTime(d) => KeyId::DateTime(*d),
            Py::List(_) | Py::Dict(_) => KeyId::Unique(position),
        }
    }

    /// Python's `repr()`.
    pub(crate) fn repr(&self) -> String {
        let mut out = String::new();
        self.write_repr(&mut out, false);
        out
    }

    /// `repr()` with dict items sorted the way `pprint` sorts them (`_safe_repr`).
    pub(crate) fn sorted_repr(&self) -> String {
        let mut out = String::new();
        self.write_repr(&mut out, true);
        out
    }

    fn write_repr(&self, out: &mut String, sort_dicts: bool) {
        match self {
            Py::None => out.push_str("None"),
            Py::Bool(true) => out.push_str("True"),
            Py::Bool(false) => out.push_str("False"),
            Py::Int(i) => out.push_str(&i.to_string()),
            Py::Float(f) => out.push_str(&float_repr(*f)),
            Py::Str(s) => out.push_str(&str_repr(s)),
            Py::Bytes(b) => out.push_str(&bytes_repr(b)),
            Py::DateTime(d) => out.push_str(&d.repr()),
            Py::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write_repr(out, sort_dicts);
                }
                out.push(']');
            }
            Py::Dict(items) => {
                out.push('{');
                let ordered: Vec<&(Py, Py)> = if sort_dicts {
                    pprint_sorted(items)
                } else {
                    items.iter().collect()
                };
                for (i, (k, v)) in ordered.into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    k.write_repr(out, sort_dicts);
                    out.push_str(": ");
                    v.write_repr(out, sort_dicts);
                }
                out.push('}');
            }
        }
    }

    /// Python's `str()`: the text itself for `str`, `isoformat(' ')` for datetimes, and
    /// `repr()` for everything else.
    pub(crate) fn to_str(&self) -> String {
        match self {
            Py::Str(s) => s.clone(),
            Py::DateTime(d) => d.isoformat(),
            other => other.repr(),
        }
    }

    fn order_class(&self) -> OrderClass {
        match self {
            Py::Bool(_) | Py::Int(_) | Py::Float(_) => OrderClass::Number,
            Py::Str(_) => OrderClass::Str,
            Py::Bytes(_) => OrderClass::Bytes,
            Py::DateTime(_) => OrderClass::DateTime,
            Py::None => OrderClass::None,
            Py::List(_) => OrderClass::List,
            Py::Dict(_) => OrderClass::Dict,
        }
    }

    /// `str(type(x))`, which `pprint` uses to order values of unorderable types.
    fn type_name(&self) -> &'static str {
        match self {
            Py::None => "<class 'NoneType'>",
            Py::Bool(_) => "<class 'bool'>",
            Py::Int(_) => "<class 'int'>",
            Py::Float(_) => "<class 'float'>",
            Py::Str(_) => "<class 'str'>",
            Py::Bytes(_) => "<class 'bytes'>",
            Py::DateTime(_) => "<class 'datetime.datetime'>",
            Py::List(_) => "<class 'list'>",
            Py::Dict(_) => "<class 'dict'>",
        }
    }

    /// Python's `a < b` for two dict keys, as an ordering; `None` when Python raises
    /// `TypeError`. NaN compares equal to everything here (Python's sort order with NaN
    /// keys depends on the algorithm's comparison sequence and is not reproduced).
    fn py_cmp(&self, other: &Py) -> Option<Ordering> {
        match (self, other) {
            (Py::Str(a), Py::Str(b)) => Some(a.cmp(b)),
            (Py::Bytes(a), Py::Bytes(b)) => Some(a.cmp(b)),
            (Py::DateTime(a), Py::DateTime(b)) => Some(a.cmp(b)),
            (a, b) => match (a.as_number(), b.as_number()) {
                (Some(x), Some(y)) => Some(x.cmp(y)),
                _ => None,
            },
        }
    }

    /// Python truthiness (`bool(x)`).
    pub(crate) fn truthy(&self) -> bool {
        match self {
            Py::None => false,
            Py::Bool(b) => *b,
            Py::Int(i) => *i != 0,
            Py::Float(f) => *f != 0.0,
            Py::Str(s) => !s.is_empty(),
            Py::Bytes(b) => !b.is_empty(),
            Py::DateTime(_) => true,
            Py::List(items) => !items.is_empty(),
            Py::Dict(items) => !items.is_empty(),
        }
    }

    /// Whether two dict keys are the same key (hash and `==`; NaN is never the same).
    pub(crate) fn same_key(&self, other: &Py) -> bool {
        self.key_id(0) == other.key_id(1)
    }

    /// Python's `a == b`.
    pub(crate) fn py_eq(&self, other: &Py) -> bool {
        match (self, other) {
            (Py::None, Py::None) => true,
            (Py::Str(a), Py::Str(b)) => a == b,
            (Py::Bytes(a), Py::Bytes(b)) => a == b,
            (Py::DateTime(a), Py::DateTime(b)) => a == b,
            (Py::List(a), Py::List(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.py_eq(y))
            }
            (Py::Dict(a), Py::Dict(b)) => {
                a.len() == b.len()
                    && a.iter().all(|(k, v)| {
                        b.iter()
                            .find(|(k2, _)| k.same_key(k2))
                            .is_some_and(|(_, v2)| v.py_eq(v2))
                    })
            }
            (a, b) => match (a.as_number(), b.as_number()) {
                (Some(x), Some(y)) => x.equals(y),
                _ => false,
            },
        }
    }

    /// Python's `a < b`; `None` where Python raises `TypeError`.
    pub(crate) fn py_lt(&self, other: &Py) -> Option<bool> {
        match (self, other) {
            (Py::Str(a), Py::Str(b)) => Some(a < b),
            (Py::Bytes(a), Py::Bytes(b)) => Some(a < b),
            (Py::DateTime(a), Py::DateTime(b)) => Some(a < b),
            (Py::List(a), Py::List(b)) => {
                for (x, y) in a.iter().zip(b) {
                    if !x.py_eq(y) {
                        return x.py_lt(y);
                    }
                }
                Some(a.len() < b.len())
            }
            (a, b) => match (a.as_number(), b.as_number()) {
                (Some(x), Some(y)) => {
                    Some(x.cmp(y) == Ordering::Less && !x.is_nan() && !y.is_nan())
                }
                _ => None,
            },
        }
    }

    fn as_number(&self) -> Option<Number> {
        match self {
            Py::Bool(b) => Some(Number::Int(i128::from(*b))),
            Py::Int(i) => Some(Number::Int(*i)),
            Py::Float(f) => Some(Number::Float(*f)),
            _ => None,
        }
    }
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum OrderClass {
    Number,
    Str,
    Bytes,
    DateTime,
    None,
    List,
    Dict,
}

#[derive(Clone, Copy)]
enum Number {
    Int(i128),
    Float(f64),
}

impl Number {
    fn is_nan(self) -> bool {
        matches!(self, Number::Float(f) if f.is_nan())
    }

    /// Python's `==` between numbers (NaN equals nothing).
    fn equals(self, other: Number) -> bool {
        !self.is_nan() && !other.is_nan() && self.cmp(other) == Ordering::Equal
    }

    fn cmp(self, other: Number) -> Ordering {
        match (self, other) {
            (Number::Int(a), Number::Int(b)) => a.cmp(&b),
            (Number::Float(a), Number::Float(b)) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
            (Number::Int(a), Number::Float(b)) => int_float_cmp(a, b),
            (Number::Float(a), Number::Int(b)) => int_float_cmp(b, a).reverse(),
        }
    }
}

/// Exact comparison of an integer with a float, as Python does it.
fn int_float_cmp(i: i128, f: f64) -> Ordering {
    if f.is_nan() {
        return Ordering::Equal;
    }
    // 2^127 is exactly representable; beyond it every i128 is smaller in magnitude.
    const LIMIT: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;
    if f >= LIMIT {
        return Ordering::Less;
    }
    if f < -LIMIT {
        return Ordering::Greater;
    }
    let whole = f.trunc();
    // `whole` is integral and inside the i128 range, so the cast is exact.
    match i.cmp(&(whole as i128)) {
        Ordering::Equal => 0.0f64.partial_cmp(&(f - whole)).unwrap_or(Ordering::Equal),
        unequal => unequal,
    }
}

/// The integer equal to `f`, if any (Python hashes such floats like that integer).
fn float_as_int(f: f64) -> Option<i128> {
    const LIMIT: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;
    (f.is_finite() && f.trunc() == f && f.abs() < LIMIT).then_some(f as i128)
}

/// `sorted(keys)` for dict items: `None` when Python raises `TypeError`.
///
/// A comparison sort must compare every pair of neighbours in its result, so it raises
/// exactly when two keys of mutually unorderable types are present (or two `None`s,
/// which a dict cannot hold).
pub(crate) fn python_sorted(items: &[(Py, Py)]) -> Option<Vec<&(Py, Py)>> {
    let first = items.first().map(|(k, _)| k.order_class());
    let uniform = items.iter().all(|(k, _)| Some(k.order_class()) == first);
    let orderable = matches!(
        first,
        None | Some(
            OrderClass::Number | OrderClass::Str | OrderClass::Bytes | OrderClass::DateTime
        )
    ) || items.len() < 2;
    if !uniform || !orderable {
        return None;
    }
    let mut sorted: Vec<&(Py, Py)> = items.iter().collect();
    sorted.sort_by(|a, b| a.0.py_cmp(&b.0).unwrap_or(Ordering::Equal));
    Some(sorted)
}

/// `sorted(d.items(), key=pprint._safe_tuple)`: unorderable pairs fall back to
/// comparing `str(type(key))`.
pub(crate) fn pprint_sorted(items: &[(Py, Py)]) -> Vec<&(Py, Py)> {
    let mut sorted: Vec<&(Py, Py)> = items.iter().collect();
    sorted.sort_by(|a, b| {
        a.0.py_cmp(&b.0)
            .unwrap_or_else(|| a.0.type_name().cmp(b.0.type_name()))
    });
    sorted
}

/// Python's `repr(v)` of a msgpack value as `salt.payload.loads(raw=False)` hands it to a
/// minion's functions: `str` is `str` (decoded lossily where it is not UTF-8), `bin` is
/// `bytes`, equal dict keys collapse, extension type 78 is a `datetime`.
pub fn py_repr(v: &rmpv::Value) -> String {
    Py::decode(v, Strings::Typed).repr()
}

/// Python's `str(v)` of a msgpack value seen as [`py_repr`] sees it: the text of a `str`,
/// `isoformat(' ')` of a `datetime`, and `repr()` of anything else.
pub fn py_str(v: &rmpv::Value) -> String {
    match v {
        rmpv::Value::String(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => Py::decode(other, Strings::Typed).to_str(),
    }
}

/// Python's `type(v).__name__` for a msgpack value (`ExtType` for an extension type).
pub fn py_type_name(v: &rmpv::Value) -> &'static str {
    use rmpv::Value as V;
    match v {
        V::Nil => "NoneType",
        V::Boolean(_) => "bool",
        V::Integer(_) => "int",
        V::F32(_) | V::F64(_) => "float",
        V::String(_) => "str",
        V::Binary(_) => "bytes",
        V::Array(_) => "list",
        V::Map(_) => "dict",
        V::Ext(..) => "ExtType",
    }
}

/// `repr(float)`: shortest round-trip digits, exponent form outside 1e-4 <= |x| < 1e16.
pub(crate) fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    // `{:e}` yields the shortest round-trip digits as `d.ddde<exp>`.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if f.is_sign_negative() { "-" } else { "" };
    let decpt = exp + 1;
    let body = if (-3..=16).contains(&decpt) {
        let n = digits.len() as i32;
        if decpt <= 0 {
            format!("0.{}{}", "0".repeat((-decpt) as usize), digits)
        } else if decpt >= n {
            format!("{}{}.0", digits, "0".repeat((decpt - n) as usize))
        } else {
            format!(
                "{}.{}",
                &digits[..decpt as usize],
                &digits[decpt as usize..]
            )
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{first}{frac}e{esign}{:02}", exp.abs())
    };
    format!("{sign}{body}")
}

/// `str.isprintable()` for one character.
pub(crate) fn is_printable(c: char) -> bool {
    let cp = u32::from(c);
    NON_PRINTABLE
        .binary_search_by(|&(lo, hi)| {
            if hi < cp {
                Ordering::Less
            } else if lo > cp {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        })
        .is_err()
}

/// `str.isspace()` for one character: Unicode White_Space plus the ASCII separators
/// U+001C..U+001F, which Python also counts.
pub(crate) fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `str.rstrip()`.
pub(crate) fn rstrip(s: &str) -> &str {
    s.trim_end_matches(is_space)
}

/// Picks the quote `repr()` uses: `'` unless the text has a `'` and no `"`.
fn quote_for(has_single: bool, has_double: bool) -> char {
    if has_single && !has_double {
        '"'
    } else {
        '\''
    }
}

/// Python's `repr(s)` for a `str`: `'` quotes unless the text has a `'` and no `"`, and
/// the escapes of `str.isprintable()`.
pub fn str_repr(s: &str) -> String {
    let quote = quote_for(s.contains('\''), s.contains('"'));
    let mut out = String::with_capacity(s.len() + 2);
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
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if (c as u32) < 0x7f || is_printable(c) => out.push(c),
            c if (c as u32) <= 0xff => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push(quote);
    out
}

/// `repr(bytes)`.
pub(crate) fn bytes_repr(b: &[u8]) -> String {
    let quote = quote_for(b.contains(&b'\''), b.contains(&b'"')) as u8;
    let mut out = String::with_capacity(b.len() + 3);
    out.push('b');
    out.push(quote as char);
    for &byte in b {
        match byte {
            b'\\' => out.push_str("\\\\"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c as char);
            }
            c if !(0x20..0x7f).contains(&c) => out.push_str(&format!("\\x{c:02x}")),
            c => out.push(c as char),
        }
    }
    out.push(quote as char);
    out
}

/// `str.splitlines(keepends)`.
pub(crate) fn splitlines(s: &str, keepends: bool) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let is_break = matches!(
            c,
            '\n' | '\r'
                | '\u{0b}'
                | '\u{0c}'
                | '\u{1c}'
                | '\u{1d}'
                | '\u{1e}'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        );
        if !is_break {
            continue;
        }
        let mut end = i + c.len_utf8();
        if c == '\r' && chars.peek().map(|&(_, n)| n) == Some('\n') {
            chars.next();
            end += 1;
        }
        lines.push(if keepends {
            &s[start..end]
        } else {
            &s[start..i]
        });
        start = end;
    }
    if start < s.len() {
        lines.push(&s[start..]);
    }
    lines
}

/// `bytes.splitlines()`: only `\n`, `\r` and `\r\n` end lines.
pub(crate) fn bytes_splitlines(b: &[u8]) -> Vec<&[u8]> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\n' => {
                lines.push(&b[start..i]);
                start = i + 1;
            }
            b'\r' => {
                lines.push(&b[start..i]);
                if b.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if start < b.len() {
        lines.push(&b[start..]);
    }
    lines
}

/// Length of a Python `str` (code points).
pub(crate) fn py_len(s: &str) -> usize {
    s.chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (2.5, "2.5"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e100, "1e+100"),
            (f64::from(0.1f32), "0.10000000149011612"),
            (f64::NAN, "nan"),
            (f64::NEG_INFINITY, "-inf"),
            (-123.456, "-123.456"),
        ];
        for (f, want) in cases {
            assert_eq!(float_repr(*f), *want, "{f:?}");
        }
    }

    #[test]
    fn str_repr_picks_quotes_and_escapes_like_python() {
        let cases = [
            ("abc", "'abc'"),
            ("it's", "\"it's\""),
            ("say \"hi\"", "'say \"hi\"'"),
            ("both ' and \"", "'both \\' and \"'"),
            ("tab\tnl\ncr\r\\", "'tab\\tnl\\ncr\\r\\\\'"),
            ("\u{1b}[0m\u{7f}", "'\\x1b[0m\\x7f'"),
            ("caf\u{e9} \u{2603}", "'caf\u{e9} \u{2603}'"),
            (
                "\u{a0}\u{ad}\u{200b}\u{1f600}\u{e0001}",
                "'\\xa0\\xad\\u200b\u{1f600}\\U000e0001'",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(str_repr(input), want, "{input:?}");
        }
    }

    #[test]
    fn job_argument_reprs_keep_str_and_bytes_apart() {
        use rmpv::Value as V;
        let v = V::Array(vec![
            V::from("it's"),
            V::Binary(b"a'\x00".to_vec()),
            rmpv::decode::read_value(&mut &[0xa1, 0xff][..]).unwrap(),
            V::Map(vec![(V::from(1), V::Nil), (V::F64(1.0), V::Boolean(true))]),
        ]);
        assert_eq!(
            py_repr(&v),
            "[\"it's\", b\"a'\\x00\", '\u{fffd}', {1: True}]"
        );
        assert_eq!(py_str(&V::from("plain")), "plain");
        assert_eq!(py_str(&V::F64(2.0)), "2.0");
        assert_eq!(py_str(&V::Nil), "None");
    }

    #[test]
    fn bytes_repr_escapes_non_ascii() {
        assert_eq!(bytes_repr(b"\xff\x00a'"), "b\"\\xff\\x00a'\"");
        assert_eq!(bytes_repr(b"\x80\"'\\"), "b'\\x80\"\\'\\\\'");
    }

    #[test]
    fn splitlines_uses_python_line_boundaries() {
        assert_eq!(
            splitlines("a\r\nb\rc\x0bd\u{2028}e\n", false),
            ["a", "b", "c", "d", "e"]
        );
        assert_eq!(splitlines("a\r\n\nb", true), ["a\r\n", "\n", "b"]);
        assert!(splitlines("", false).is_empty());
        assert_eq!(
            bytes_splitlines(b"a\r\nb\x0bc\n"),
            [&b"a"[..], &b"b\x0bc"[..]]
        );
    }

    #[test]
    fn rstrip_strips_python_whitespace() {
        assert_eq!(rstrip("a \t\n\u{1f}\u{a0}\u{3000}"), "a");
        assert_eq!(rstrip("a\u{200b}"), "a\u{200b}");
    }

    #[test]
    fn equal_numeric_keys_collapse_like_python_dicts() {
        let d = Py::dict_from_pairs([
            (Py::Int(1), Py::Str("a".into())),
            (Py::Bool(true), Py::Str("b".into())),
            (Py::Float(1.0), Py::Str("c".into())),
            (Py::Str("1".into()), Py::Str("d".into())),
        ]);
        assert_eq!(
            d,
            Py::Dict(vec![
                (Py::Int(1), Py::Str("c".into())),
                (Py::Str("1".into()), Py::Str("d".into())),
            ])
        );
    }

    #[test]
    fn mixed_key_types_are_unsortable() {
        let ok = [
            (Py::Int(2), Py::None),
            (Py::Float(1.5), Py::None),
            (Py::Bool(false), Py::None),
        ];
        let order: Vec<&Py> = python_sorted(&ok)
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(order, [&Py::Bool(false), &Py::Float(1.5), &Py::Int(2)]);
        assert!(
            python_sorted(&[(Py::Int(1), Py::None), (Py::Str("a".into()), Py::None)]).is_none()
        );
        assert!(python_sorted(&[(Py::None, Py::None)]).is_some());
    }

    #[test]
    fn datetime_extension_parses_salt_wire_form() {
        let dt = DateTime::parse(b"20240102T03:04:05.600000").map(|d| (d.repr(), d.isoformat()));
        assert_eq!(
            dt,
            Some((
                "datetime.datetime(2024, 1, 2, 3, 4, 5, 600000)".to_owned(),
                "2024-01-02 03:04:05.600000".to_owned()
            ))
        );
        let midnight = DateTime::parse(b"20240102T00:00:00.000000").map(|d| d.repr());
        assert_eq!(
            midnight.as_deref(),
            Some("datetime.datetime(2024, 1, 2, 0, 0)")
        );
        assert_eq!(DateTime::parse(b"20240230T00:00:00.0"), None);
        assert_eq!(DateTime::parse(b"garbage"), None);
        assert_eq!(
            DateTime::parse("a\u{e9}\u{e9}\u{e9}xT00:00:00.0".as_bytes()),
            None
        );
    }
}
