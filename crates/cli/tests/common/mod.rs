//! What the `halite` and stock `salt` comparisons share: running either against a root,
//! masking job ids, reading batch output, waiting for minions.

#![allow(dead_code)]

use halite_testkit::{json_returns, run_halite, run_stock_salt, wait_until, TempRoot};
use serde_json::Value as Json;
use std::collections::BTreeSet;
use std::process::Output;
use std::time::{Duration, Instant};

/// How long minions (a stock one among them) may take to start and answer.
pub const JOIN: Duration = Duration::from_secs(120);

/// One finished command: its output as text, exit status, and how long it took.
#[derive(Debug, Clone)]
pub struct Run {
    pub out: String,
    pub err: String,
    pub code: Option<i32>,
    pub took: Duration,
}

impl Run {
    fn of(output: Output, took: Duration) -> Run {
        Run {
            out: String::from_utf8_lossy(&output.stdout).into_owned(),
            err: String::from_utf8_lossy(&output.stderr).into_owned(),
            code: output.status.code(),
            took,
        }
    }

    /// `{minion: return}` of `--out json` output (one document per minion or one in all).
    pub fn returns(&self) -> serde_json::Map<String, Json> {
        json_returns(self.out.as_bytes())
    }
}

/// `halite -c ROOT <args>`.
pub fn halite(root: &TempRoot, args: &[&str]) -> Run {
    let start = Instant::now();
    let out = run_halite(root, args);
    Run::of(out, start.elapsed())
}

/// Stock `salt -c ROOT <args>`.
pub fn stock(root: &TempRoot, args: &[&str]) -> Run {
    let start = Instant::now();
    let out = run_stock_salt(root, args);
    Run::of(out, start.elapsed())
}

/// Both, Halite first, with the measured times printed.
pub fn both(root: &TempRoot, args: &[&str]) -> (Run, Run) {
    let h = halite(root, args);
    let s = stock(root, args);
    println!(
        "MEASURED {args:?}: halite {:.3} s, salt {:.3} s",
        h.took.as_secs_f64(),
        s.took.as_secs_f64()
    );
    (h, s)
}

/// `text` with every run of exactly 20 digits (a jid) replaced by `<jid>`.
pub fn mask_jids(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let run = chars[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if run == 20 && (i == 0 || !chars[i - 1].is_ascii_digit()) {
            out.push_str("<jid>");
            i += run;
        } else if run > 0 {
            out.extend(&chars[i..i + run]);
            i += run;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// What a `--batch ... --out json` run printed, order aside where Salt's order is not
/// defined: the minions of each "Executing run on [...]" line, the "did not respond"
/// lines, and the returns (with jids masked), sorted.
#[derive(Debug, PartialEq)]
pub struct BatchShape {
    pub batches: Vec<Vec<String>>,
    pub down: Vec<String>,
    pub returns: Vec<String>,
}

impl BatchShape {
    /// The sizes of the sub-batches, in order.
    pub fn sizes(&self) -> Vec<usize> {
        self.batches.iter().map(Vec::len).collect()
    }

    /// Every minion a sub-batch ran on.
    pub fn ran_on(&self) -> BTreeSet<String> {
        self.batches.iter().flatten().cloned().collect()
    }
}

/// Reads batch output printed with `--out json` (see [`BatchShape`]).
///
/// # Panics
/// On a line that is none of those.
pub fn batch_shape(out: &str) -> BatchShape {
    let mut shape = BatchShape {
        batches: vec![],
        down: vec![],
        returns: vec![],
    };
    let mut doc: Option<String> = None;
    for line in out.lines() {
        if let Some(text) = doc.as_mut() {
            text.push_str(line);
            text.push('\n');
            if line == "}" {
                let json: Json = serde_json::from_str(text).expect("a JSON return");
                shape.returns.push(mask_jids(&json.to_string()));
                doc = None;
            }
        } else if line == "{" {
            doc = Some("{\n".to_owned());
        } else if let Some(list) = line.strip_prefix("Executing run on [") {
            let list = list.strip_suffix(']').expect("a Python list");
            shape.batches.push(
                list.split(", ")
                    .map(|id| id.trim_matches('\'').to_owned())
                    .collect(),
            );
        } else if line.starts_with("Minion ")
            && line.ends_with(" did not respond. No job will be sent.")
        {
            shape.down.push(line.to_owned());
        } else {
            assert!(
                line.is_empty(),
                "unexpected batch output line {line:?} in:\n{out}"
            );
        }
    }
    shape.returns.sort();
    shape
}

/// The same sub-batch sizes, minions, "did not respond" lines and returns (who runs in
/// which sub-batch is a Python set's order in Salt).
pub fn same_batch(what: &str, h: &Run, s: &Run) {
    let (hs, ss) = (batch_shape(&h.out), batch_shape(&s.out));
    assert_eq!(
        hs.sizes(),
        ss.sizes(),
        "{what}: sizes\n{}\n{}",
        h.out,
        s.out
    );
    assert_eq!(hs.ran_on(), ss.ran_on(), "{what}: minions");
    assert_eq!(hs.down, ss.down, "{what}: minions down");
    assert_eq!(hs.returns, ss.returns, "{what}: returns");
}

/// The lines of `text`, sorted (output whose order depends on who answers first).
pub fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = mask_jids(text).lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// Waits until `halite <tgt> test.ping` gets `true` from every one of `ids`.
pub fn wait_for_pings(root: &TempRoot, tgt_args: &[&str], ids: &[&str]) {
    let mut last = serde_json::Map::new();
    let mut args: Vec<&str> = tgt_args.to_vec();
    args.extend(["test.ping", "-t", "5", "--out", "json"]);
    let ok = wait_until(JOIN, || {
        let run = halite(root, &args);
        last = serde_json::Deserializer::from_str(&run.out)
            .into_iter::<Json>()
            .filter_map(Result::ok)
            .filter_map(|d| match d {
                Json::Object(m) => Some(m),
                _ => None,
            })
            .flatten()
            .collect();
        ids.iter()
            .all(|id| last.get(*id) == Some(&Json::Bool(true)))
    });
    assert!(
        ok,
        "minions {ids:?} did not all answer; last answer: {last:?}"
    );
}

#[test]
fn jids_are_masked_and_nothing_else() {
    assert_eq!(
        mask_jids("jid: 20261124122628423379 x 123 202611241226284233790"),
        "jid: <jid> x 123 202611241226284233790"
    );
}

#[test]
fn batch_output_is_read_into_its_shape() {
    let out = "Minion m9 did not respond. No job will be sent.\n\nExecuting run on ['a', 'b']\n\n{\n    \"retcode\": 0,\n    \"jid\": \"20261124122628423379\",\n    \"a\": true\n}\n";
    let shape = batch_shape(out);
    assert_eq!(shape.sizes(), [2]);
    assert_eq!(shape.down.len(), 1);
    assert_eq!(shape.returns, [r#"{"retcode":0,"jid":"<jid>","a":true}"#]);
}
