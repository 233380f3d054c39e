//! `salt/output/json_out.py`: `json.dumps(data, default=repr, ensure_ascii=False, ...)`
//! with Python's formatting, and the [`to_json`](crate::to_json) conversion.

use crate::py::{bytes_repr, float_repr, python_sorted, Py};

/// Python raised `TypeError` (a `bytes`/datetime dict key, or unorderable keys under
/// `sort_keys`); json_out then prints `{}`.
struct TypeError;

/// `json.dumps(data, default=repr, indent=indent, sort_keys=sort_keys)`, or `{}` when
/// Python would raise `TypeError`.
pub(crate) fn dumps(data: &Py, indent: Option<usize>, sort_keys: bool) -> String {
    let encoder = Encoder { indent, sort_keys };
    let mut out = String::new();
    match encoder.encode(data, 0, &mut out) {
        Ok(()) => out,
        Err(TypeError) => "{}".to_owned(),
    }
}

struct Encoder {
    indent: Option<usize>,
    sort_keys: bool,
}

impl Encoder {
    /// Writes the separator before an item: `", "` inline, or `",\n"` plus indentation.
    fn newline(&self, level: usize, out: &mut String) {
        if let Some(width) = self.indent {
            out.push('\n');
            out.push_str(&" ".repeat(width * level));
        }
    }

    fn item_separator(&self) -> &'static str {
        if self.indent.is_some() {
            ","
        } else {
            ", "
        }
    }

    fn encode(&self, value: &Py, level: usize, out: &mut String) -> Result<(), TypeError> {
        match value {
            Py::None => out.push_str("null"),
            Py::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Py::Int(i) => out.push_str(&i.to_string()),
            Py::Float(f) => out.push_str(&float_str(*f)),
            Py::Str(s) => push_json_str(s, out),
            // `default=repr` turns anything JSON cannot hold into its repr.
            Py::Bytes(b) => push_json_str(&bytes_repr(b), out),
            Py::DateTime(d) => push_json_str(&d.repr(), out),
            Py::List(items) => {
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_separator());
                    }
                    self.newline(level + 1, out);
                    self.encode(item, level + 1, out)?;
                }
                self.newline(level, out);
                out.push(']');
            }
            Py::Dict(items) => {
                if items.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                let ordered: Vec<&(Py, Py)> = if self.sort_keys {
                    python_sorted(items).ok_or(TypeError)?
                } else {
                    items.iter().collect()
                };
                out.push('{');
                for (i, (key, item)) in ordered.into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_separator());
                    }
                    self.newline(level + 1, out);
                    push_json_str(&json_key(key).ok_or(TypeError)?, out);
                    out.push_str(": ");
                    self.encode(item, level + 1, out)?;
                }
                self.newline(level, out);
                out.push('}');
            }
        }
        Ok(())
    }
}

/// How `json` turns a dict key into a string; `None` for keys it rejects.
pub(crate) fn json_key(key: &Py) -> Option<String> {
    match key {
        Py::Str(s) => Some(s.clone()),
        Py::Float(f) => Some(float_str(*f)),
        Py::Bool(b) => Some(if *b { "true" } else { "false" }.to_owned()),
        Py::None => Some("null".to_owned()),
        Py::Int(i) => Some(i.to_string()),
        Py::Bytes(_) | Py::DateTime(_) | Py::List(_) | Py::Dict(_) => None,
    }
}

/// `json.encoder`'s float formatting (`allow_nan=True`).
fn float_str(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_owned()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else {
        float_repr(f)
    }
}

/// `json.encoder.encode_basestring` (ensure_ascii=False): only `"`, `\` and control
/// characters are escaped.
fn push_json_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The JSON value json_out would print for `value`, as a `serde_json::Value`.
pub(crate) fn to_value(value: &Py) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        Py::None => J::Null,
        Py::Bool(b) => J::Bool(*b),
        Py::Int(i) => match (i64::try_from(*i), u64::try_from(*i)) {
            (Ok(v), _) => J::from(v),
            (_, Ok(v)) => J::from(v),
            // Msgpack integers always fit in i64 or u64.
            _ => J::String(i.to_string()),
        },
        Py::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        Py::Str(s) => J::String(s.clone()),
        Py::Bytes(b) => J::String(bytes_repr(b)),
        Py::DateTime(d) => J::String(d.repr()),
        Py::List(items) => J::Array(items.iter().map(to_value).collect()),
        Py::Dict(items) => J::Object(
            items
                .iter()
                .map(|(k, v)| (json_key(k).unwrap_or_else(|| k.repr()), to_value(v)))
                .collect(),
        ),
    }
}
