//! Printing an event the way `salt-run state.event` does.

use base64::Engine;
use halite_output::{OutputIndent, OutputOptions, Outputter};
use halite_proto::Value;

/// Salt's datetime extension type, which `salt.payload.loads` decodes to a `datetime`.
const EXT_DATETIME: i8 = 78;

/// One line of `state.event` output, without the newline: `tag`, a tab, and
/// `json.dumps(decode(data, keep=True), sort_keys=pretty, indent=4 if pretty else None,
/// default=_json_safe)` (`salt/modules/state.py` `event`): Python's separators and float
/// formatting, non-ASCII kept, strings that are not UTF-8 as base64.
///
/// Deviation: where Python's `json.dumps` raises (a dict key that is undecodable bytes or a
/// datetime, or keys of mixed types with `pretty`), Salt's runner dies with a traceback;
/// Halite prints the data as `{}` and keeps listening.
pub fn state_event_line(tag: &str, data: &Value, pretty: bool) -> String {
    let data = json_safe(data);
    let opts = OutputOptions {
        indent: if pretty {
            OutputIndent::Pretty
        } else {
            OutputIndent::Null
        },
        ..OutputOptions::default()
    };
    let json = halite_output::render(Outputter::Json, &data, &opts);
    format!("{tag}\t{}", json.trim_end_matches('\n'))
}

/// `_json_safe`: byte strings that do not decode as UTF-8 become their base64 text.
/// Map keys are left alone (`json.dumps` never passes keys to `default`).
fn json_safe(v: &Value) -> Value {
    let b64 = |b: &[u8]| Value::from(base64::engine::general_purpose::STANDARD.encode(b));
    match v {
        Value::String(s) if s.as_str().is_none() => b64(s.as_bytes()),
        Value::Binary(b) if std::str::from_utf8(b).is_err() => b64(b),
        Value::Ext(code, b) if *code != EXT_DATETIME && std::str::from_utf8(b).is_err() => b64(b),
        Value::Array(items) => Value::Array(items.iter().map(json_safe).collect()),
        Value::Map(pairs) => Value::Map(
            pairs
                .iter()
                .map(|(k, v)| (k.clone(), json_safe(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::{bin, map, s};

    fn data() -> Value {
        map([
            ("a", Value::from(1)),
            ("b", s("héllo")),
            (
                "c",
                Value::Array(vec![Value::F64(1.5), Value::Nil, Value::from(true)]),
            ),
            (
                "z",
                map([("y", Value::from(2)), ("x", bin(vec![0xff, 0x00]))]),
            ),
            ("_stamp", s("2026-11-22T09:37:30.645860+00:00")),
        ])
    }

    // Both lines were printed by stock `salt-run state.event` for the same event.
    #[test]
    fn compact_line_matches_salt_run() {
        assert_eq!(
            state_event_line("test/one", &data(), false),
            "test/one\t{\"a\": 1, \"b\": \"héllo\", \"c\": [1.5, null, true], \"z\": {\"y\": 2, \"x\": \"/wA=\"}, \"_stamp\": \"2026-11-22T09:37:30.645860+00:00\"}"
        );
    }

    #[test]
    fn pretty_output_sorts_and_indents_like_salt_run() {
        let d = map([
            ("b", Value::from(2)),
            ("a", s("x")),
            ("_stamp", s("2026-11-22T09:47:46.721870+00:00")),
        ]);
        assert_eq!(
            state_event_line("test/two", &d, true),
            "test/two\t{\n    \"_stamp\": \"2026-11-22T09:47:46.721870+00:00\",\n    \"a\": \"x\",\n    \"b\": 2\n}"
        );
    }

    #[test]
    fn utf8_bytes_print_as_text_and_others_as_base64() {
        let d = map([
            ("t", bin(b"text".to_vec())),
            (
                "raw",
                halite_proto::value::decode(&[0xa2, 0xc3, 0x28]).unwrap(),
            ),
        ]);
        assert_eq!(
            state_event_line("t", &d, false),
            "t\t{\"t\": \"text\", \"raw\": \"wyg=\"}"
        );
    }
}
