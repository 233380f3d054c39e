//! Byte-for-byte comparison with text captured from stock Salt 3008.3.
//!
//! `tests/data/outputs.json` is produced by `tests/data/capture.py` (see its docstring):
//! each case holds the msgpack a minion would send and what `display_output` printed
//! for every outputter/option variant.

use halite_output::{render, OutputIndent, OutputOptions, Outputter};

use base64::Engine as _;

fn parse_indent(indent: &str) -> OutputIndent {
    match indent {
        "unset" => OutputIndent::Unset,
        "null" => OutputIndent::Null,
        "pretty" => OutputIndent::Pretty,
        n => OutputIndent::Spaces(n.parse().expect("indent is an integer")),
    }
}

#[test]
fn every_captured_salt_output_is_reproduced_exactly() {
    let captured: serde_json::Value =
        serde_json::from_str(include_str!("data/outputs.json")).expect("outputs.json parses");
    let cases = captured["cases"].as_array().expect("cases array");
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in cases {
        let name = case["name"].as_str().expect("case name");
        let packed = base64::engine::general_purpose::STANDARD
            .decode(case["msgpack"].as_str().expect("msgpack field"))
            .expect("msgpack base64");
        let data = rmpv::decode::read_value(&mut packed.as_slice()).expect("msgpack decodes");
        for variant in case["renders"].as_array().expect("renders array") {
            let out_name = variant["out"].as_str().expect("out");
            let opts = OutputOptions {
                color: variant["color"].as_bool().expect("color"),
                indent: parse_indent(variant["indent"].as_str().expect("indent")),
                retcode: variant["retcode"].as_i64().expect("retcode"),
                nested_indent: variant["nested_indent"].as_u64().map_or(0, |n| n as usize),
                strip_colors: variant["strip_colors"].as_bool().unwrap_or(true),
                ..OutputOptions::default()
            };
            let out = Outputter::from_name(out_name).expect("known outputter");
            let want = variant["text"].as_str().expect("text");
            let got = render(out, &data, &opts);
            checked += 1;
            if got != want {
                failures.push(format!(
                    "{name} / {out_name} {opts:?}\n--- salt\n{want:?}\n--- halite\n{got:?}"
                ));
            }
        }
    }
    assert!(checked > 500, "only {checked} renders checked");
    assert!(
        failures.is_empty(),
        "{} of {checked} renders differ:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
