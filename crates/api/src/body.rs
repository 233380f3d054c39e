//! What comes in: request bodies by `Content-Type`, as salt-api's `hypermedia_in` and its
//! processors parse them, and `lowdata_fmt`, which makes a lowstate of the result.
//!
//! | Content-Type (parameters ignored) | parsing |
//! |---|---|
//! | `application/json` | JSON; invalid: 400 "Invalid JSON document" |
//! | `application/x-yaml`, `text/yaml` | YAML with Salt's typing; invalid: 400 "Invalid YAML document" |
//! | `text/plain` | JSON if it parses, else the text itself |
//! | `application/x-www-form-urlencoded` | `parse_qsl`; a repeated key is a list; `arg` and `kwarg` through `yamlify_arg` |
//! | anything else, or none | 406 "Content type not supported" |
//!
//! An empty body is not parsed: its data is `None`.
//!
//! Deviations: a YAML syntax error is 400 (salt-api lets PyYAML's exception escape as a
//! 500 page); a body sent chunked, without `Content-Length`, is parsed (salt-api ignores
//! it and answers "Lowstates must be a list"); JSON must be valid UTF-8 without `NaN` or
//! `Infinity` (Python accepts those).

use crate::render::Failure;
use axum::http::StatusCode;
use halite_proto::value::s;
use halite_proto::Value;

/// A parsed request body.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    /// The data (`unserialized_data`); `None` for an empty body.
    pub data: Option<Value>,
    /// The body as text (`raw_body`; invalid UTF-8 replaced), what `/hook` fires.
    pub raw: String,
}

/// Parses `body` sent with `content_type` (the header's value, if any).
pub fn parse(content_type: Option<&str>, body: &[u8]) -> Result<Parsed, Failure> {
    if body.is_empty() {
        return Ok(Parsed::default());
    }
    let raw = String::from_utf8_lossy(body).into_owned();
    let media = content_type
        .and_then(|ct| ct.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let data = match media.as_str() {
        "application/json" => {
            json(body).ok_or_else(|| Failure::bad_request("Invalid JSON document"))?
        }
        "application/x-yaml" | "text/yaml" => {
            let text = std::str::from_utf8(body)
                .map_err(|_| Failure::bad_request("Invalid YAML document"))?;
            halite_config::yaml::load(text)
                .map_err(|_| Failure::bad_request("Invalid YAML document"))?
        }
        "text/plain" => json(body).unwrap_or_else(|| s(raw.clone())),
        "application/x-www-form-urlencoded" => form(body),
        _ => {
            return Err(Failure::http(
                StatusCode::NOT_ACCEPTABLE,
                "Content type not supported",
            ))
        }
    };
    Ok(Parsed {
        data: Some(data),
        raw,
    })
}

/// A JSON document as a value; `None` when it is not one.
pub fn json(body: &[u8]) -> Option<Value> {
    let doc: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some(from_json(doc))
}

/// A JSON value as the msgpack value Salt would send for the Python object `json.loads`
/// makes of it (keys in document order).
pub fn from_json(doc: serde_json::Value) -> Value {
    match doc {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Boolean(b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::F64(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(t) => Value::from(t),
        serde_json::Value::Array(items) => Value::Array(items.into_iter().map(from_json).collect()),
        serde_json::Value::Object(entries) => Value::Map(
            entries
                .into_iter()
                .map(|(k, v)| (Value::from(k), from_json(v)))
                .collect(),
        ),
    }
}

/// `urlencoded_processor`: `parse_qsl` pairs (blank values dropped), a key given more than
/// once becomes a list, and `kwarg` and every `arg` go through `yamlify_arg` (a single
/// `arg` becomes a list of one).
fn form(body: &[u8]) -> Value {
    let mut entries: Vec<(String, Vec<String>)> = Vec::new();
    for (k, v) in form_urlencoded::parse(body) {
        if v.is_empty() {
            continue;
        }
        match entries.iter_mut().find(|(key, _)| *key == k) {
            Some((_, vals)) => vals.push(v.into_owned()),
            None => entries.push((k.into_owned(), vec![v.into_owned()])),
        }
    }
    let yamlify = |t: &str| halite_config::args::yamlify_arg(t);
    Value::Map(
        entries
            .into_iter()
            .map(|(k, mut vals)| {
                let v = match (k.as_str(), vals.len()) {
                    ("arg", _) => Value::Array(vals.iter().map(|t| yamlify(t)).collect()),
                    ("kwarg", 1) => vals.first().map_or(Value::Nil, |t| yamlify(t)),
                    ("kwarg", _) => Value::Array(vals.into_iter().map(Value::from).collect()),
                    (_, 1) => vals.pop().map_or(Value::Nil, Value::from),
                    _ => Value::Array(vals.into_iter().map(Value::from).collect()),
                };
                (Value::from(k), v)
            })
            .collect(),
    )
}

/// `lowdata_fmt`: a non-empty mapping becomes a lowstate of one chunk (its `arg` made a
/// list); anything else is the lowstate as it is.
pub fn lowstate(data: Option<Value>) -> Option<Value> {
    match data {
        Some(Value::Map(mut entries)) if !entries.is_empty() => {
            for (k, v) in entries.iter_mut() {
                if k.as_str() == Some("arg") && !matches!(v, Value::Array(_)) {
                    *v = Value::Array(vec![std::mem::replace(v, Value::Nil)]);
                }
            }
            Some(Value::Array(vec![Value::Map(entries)]))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::map;

    fn data(ct: Option<&str>, body: &str) -> Result<Option<Value>, StatusCode> {
        parse(ct, body.as_bytes())
            .map(|p| p.data)
            .map_err(|f| f.status())
    }

    #[test]
    fn content_types_are_parsed_as_salt_api_parses_them() {
        let chunk = map([("client", s("local")), ("tgt", s("*"))]);
        let want = Ok(Some(Value::Array(vec![chunk.clone()])));
        let json = r#"[{"client": "local", "tgt": "*"}]"#;
        assert_eq!(data(Some("application/json"), json), want);
        assert_eq!(data(Some("application/json; charset=utf-8"), json), want);
        assert_eq!(data(Some("text/plain;charset=UTF-8"), json), want);
        assert_eq!(
            data(Some("application/x-yaml"), "- client: local\n  tgt: '*'\n"),
            want
        );
        assert_eq!(
            data(Some("text/yaml"), "- {client: local, tgt: '*'}\n"),
            want
        );
        assert_eq!(
            data(Some("text/plain"), "not json"),
            Ok(Some(s("not json")))
        );
    }

    #[test]
    fn bad_documents_and_unknown_types_get_salt_apis_codes() {
        assert_eq!(
            data(Some("application/json"), "[{"),
            Err(StatusCode::BAD_REQUEST)
        );
        assert_eq!(
            data(Some("application/x-yaml"), "- a: [1\n  b"),
            Err(StatusCode::BAD_REQUEST)
        );
        assert_eq!(
            data(Some("text/csv"), "a,b"),
            Err(StatusCode::NOT_ACCEPTABLE)
        );
        assert_eq!(data(None, "x"), Err(StatusCode::NOT_ACCEPTABLE));
        assert_eq!(data(None, ""), Ok(None), "an empty body is not parsed");
        assert_eq!(data(Some("application/json"), ""), Ok(None));
    }

    #[test]
    fn forms_yamlify_arg_and_kwarg_and_repeat_keys_into_lists() {
        let got = data(
            Some("application/x-www-form-urlencoded"),
            "client=local&tgt=*&fun=test.arg&arg=1&arg=a%3D%7Bb%3A+1%7D&kwarg=%7Bx%3A+2%7D&empty=",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            got,
            map([
                ("client", s("local")),
                ("tgt", s("*")),
                ("fun", s("test.arg")),
                ("arg", Value::Array(vec![Value::from(1), s("a={b: 1}")])),
                ("kwarg", map([("x", Value::from(2))])),
            ])
        );
        let one = data(Some("application/x-www-form-urlencoded"), "arg=one&t=a&t=b")
            .unwrap()
            .unwrap();
        assert_eq!(
            one,
            map([
                ("arg", Value::Array(vec![s("one")])),
                ("t", Value::Array(vec![s("a"), s("b")]))
            ])
        );
    }

    #[test]
    fn lowdata_fmt_wraps_a_mapping_and_its_scalar_arg() {
        let chunk = map([("fun", s("test.echo")), ("arg", s("x"))]);
        assert_eq!(
            lowstate(Some(chunk)),
            Some(Value::Array(vec![map([
                ("fun", s("test.echo")),
                ("arg", Value::Array(vec![s("x")]))
            ])]))
        );
        assert_eq!(lowstate(None), None);
        assert_eq!(lowstate(Some(map::<&str>([]))), Some(map::<&str>([])));
        assert_eq!(lowstate(Some(s("x"))), Some(s("x")));
    }

    #[test]
    fn json_numbers_keep_their_kind() {
        assert_eq!(
            json(br#"[1, -2, 18446744073709551615, 1.5]"#),
            Some(Value::Array(vec![
                Value::from(1),
                Value::from(-2),
                Value::from(u64::MAX),
                Value::F64(1.5)
            ]))
        );
        assert_eq!(json(b"NaN"), None);
        let deep = "[".repeat(100_000);
        assert_eq!(
            json(deep.as_bytes()),
            None,
            "deep nesting is refused, not a crash"
        );
    }
}
