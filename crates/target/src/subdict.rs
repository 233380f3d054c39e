//! Salt's `subdict_match` and `traverse_dict_and_list` (grain and pillar targeting).
//!
//! The rules, from `salt/utils/data.py` in 3008.3:
//! - The expression is split on the delimiter; with no delimiter it never matches. Key
//!   paths are tried **deepest first**: `a:b:c` tries key `a:b` with value `c`, then key
//!   `a` with value `b:c`, so values may contain the delimiter.
//! - A key path of exactly `*` means "the whole data", with the whole expression as the
//!   pattern (`*:web` matches any top-level value or list member `web`).
//! - The value found decides how the pattern applies: a scalar is compared; each list
//!   member is compared (a dict member is also searched as a dict); a dict matches when the
//!   pattern is `*`, names a key exactly, matches a key name, matches a nested path (with
//!   the default `:` delimiter), or — with a `*:` prefix — matches any value one level down.
//!   An empty dict, like a missing key, is skipped.
//! - Both sides are compared as `str(x).lower()`: case-insensitive, booleans as
//!   `true`/`false`, `None` as `none`, numbers as Python prints them. The lower-casing also
//!   applies to **regex patterns**, so `\S` becomes `\s` and `\D` becomes `\d`.
//! - [`MatchMode::Glob`] uses `fnmatch`, [`MatchMode::Regex`] `re.match` (anchored at the
//!   start only), [`MatchMode::Exact`] string equality. An invalid regex logs
//!   "Invalid regex '…' in match" and does not match.
//! - Path traversal indexes lists by integer (negative counts from the end), looks keys up
//!   in dicts inside lists, and, when a dict lacks a key, retries with the key loaded as
//!   YAML (so `80` finds an integer key `80`, `true` a boolean key).
//!
//! Known differences: the YAML retry understands plain and simply-quoted scalars (null,
//! booleans, integers, floats, strings) but not tags, anchors or block scalars, and Python's
//! `int()` accepts non-ASCII digits where this accepts ASCII only. A hostile expression
//! against deeply nested data makes Salt's recursion explode (`*:*:*:…` doubles the work at
//! every level); here one match gives up, as "no match", after [`MAX_DEPTH`] levels of
//! nesting or [`MAX_STEPS`] visited values.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::OnceLock;

use rmpv::Value;

use crate::fnmatch;
use crate::pyre::{parse_python_int, RegexCache};
use crate::pyvalue::{self, Scalar};
use crate::Error;

/// Nesting depth at which matching gives up (returns no match).
pub const MAX_DEPTH: usize = 64;

/// Values visited by one match before it gives up (returns no match).
pub const MAX_STEPS: usize = 100_000;

/// How the value part of a grain/pillar expression is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchMode {
    /// `fnmatch` glob (grain, pillar).
    Glob,
    /// Python `re.match` (grain_pcre, pillar_pcre).
    Regex,
    /// Lower-cased string equality (pillar_exact).
    Exact,
}

/// Python `salt.utils.data.subdict_match(data, expr, delimiter, regex_match, exact_match)`.
///
/// An empty `delimiter` never matches (Python raises `ValueError: empty separator`).
pub fn subdict_match(
    data: &Value,
    expr: &str,
    delimiter: &str,
    mode: MatchMode,
    regexes: &RegexCache,
) -> bool {
    SubdictMatcher::new(expr, delimiter, mode, regexes).matches(data)
}

/// One grain/pillar expression prepared for matching against many minions' data.
///
/// It remembers the globs it compiled (regexes go through the caller's [`RegexCache`]), so
/// the master pays for pattern preparation once per publish, not once per minion.
#[derive(Debug)]
pub struct SubdictMatcher<'a> {
    expr: &'a str,
    delimiter: &'a str,
    mode: MatchMode,
    regexes: &'a RegexCache,
    globs: RefCell<HashMap<String, fnmatch::Pattern>>,
    /// Steps left in the current [`SubdictMatcher::matches`] call.
    steps: Cell<usize>,
}

impl<'a> SubdictMatcher<'a> {
    /// Prepares `expr` (for example `os:RedHat`) split on `delimiter`.
    pub fn new(
        expr: &'a str,
        delimiter: &'a str,
        mode: MatchMode,
        regexes: &'a RegexCache,
    ) -> Self {
        Self {
            expr,
            delimiter,
            mode,
            regexes,
            globs: RefCell::new(HashMap::new()),
            steps: Cell::new(MAX_STEPS),
        }
    }

    /// Whether `data` (a minion's grains or pillar) matches.
    pub fn matches(&self, data: &Value) -> bool {
        if self.delimiter.is_empty() {
            return false;
        }
        self.steps.set(MAX_STEPS);
        let matched = self.subdict(Node::Value(data), self.expr, self.delimiter, 0);
        if self.steps.get() == 0 {
            tracing::warn!(
                "Gave up matching '{}' after {} steps; treating it as no match",
                self.expr,
                MAX_STEPS
            );
            return false;
        }
        matched
    }

    /// Spends one step; false once the budget is gone or the nesting is too deep.
    fn step(&self, depth: usize) -> bool {
        depth <= MAX_DEPTH && self.spend(1)
    }

    /// Spends `n` steps; false (and an empty budget) when fewer are left.
    fn spend(&self, n: usize) -> bool {
        match self.steps.get().checked_sub(n) {
            Some(left) if self.steps.get() > 0 => {
                self.steps.set(left);
                true
            }
            _ => {
                self.steps.set(0);
                false
            }
        }
    }

    fn subdict(&self, data: Node<'_>, expr: &str, delimiter: &str, depth: usize) -> bool {
        if !self.step(depth) {
            return false;
        }
        // Byte offsets of the delimiters, i.e. the boundaries of Python's `expr.split()`.
        let cuts: Vec<usize> = expr.match_indices(delimiter).map(|(i, _)| i).collect();
        for (n, &cut) in cuts.iter().enumerate().rev() {
            // Traversing the key visits one value per path component.
            if !self.spend(n + 1) {
                return false;
            }
            let key = &expr[..cut];
            let (matchstr, found) = if key == "*" {
                (expr, Some(data))
            } else {
                (
                    &expr[cut + delimiter.len()..],
                    traverse(data, key, delimiter),
                )
            };
            let Some(found) = found else { continue };
            let matched = match found.dict() {
                // An empty dict is skipped like a missing key (`match == {}`).
                Ok(entries) => !entries.is_empty() && self.dict_match(entries, matchstr, depth + 1),
                Err(Value::Array(members)) => members.iter().any(|member| {
                    let dict_hit = match member {
                        Value::Map(entries) => self.dict_match(entries, matchstr, depth + 1),
                        _ => false,
                    };
                    dict_hit || self.scalar_match(member, matchstr)
                }),
                Err(other) => self.scalar_match(other, matchstr),
            };
            if matched {
                return true;
            }
        }
        false
    }

    /// `_dict_match`.
    fn dict_match(&self, target: &[(Value, Value)], pattern: &str, depth: usize) -> bool {
        if !self.step(depth) {
            return false;
        }
        let (wildcard, pattern) = match pattern.strip_prefix("*:") {
            Some(rest) => (true, rest),
            None => (false, pattern),
        };
        if pattern == "*" || pyvalue::dict_get(target, pattern).is_some() {
            return true;
        }
        if target
            .iter()
            .any(|(key, _)| self.scalar_match(key, pattern))
        {
            return true;
        }
        // Nested paths use the default delimiter, whatever the expression's was.
        if self.subdict(
            Node::Dict(target),
            pattern,
            crate::DEFAULT_DELIMITER,
            depth + 1,
        ) {
            return true;
        }
        if wildcard {
            for (_, value) in pyvalue::dict_entries(target) {
                match value {
                    Value::Map(entries) => {
                        if self.dict_match(entries, pattern, depth + 1) {
                            return true;
                        }
                    }
                    Value::Array(items) => {
                        if items.iter().any(|item| self.scalar_match(item, pattern)) {
                            return true;
                        }
                    }
                    other => {
                        if self.scalar_match(other, pattern) {
                            return true;
                        }
                    }
                }
            }
        }
        false
    }

    /// `_match`: compare `str(target).lower()` with `pattern.lower()`.
    fn scalar_match(&self, target: &Value, pattern: &str) -> bool {
        if !self.step(0) {
            return false;
        }
        let target = pyvalue::to_str(target).to_lowercase();
        let pattern = pattern.to_lowercase();
        match self.mode {
            MatchMode::Exact => target == pattern,
            MatchMode::Glob => {
                let mut globs = self.globs.borrow_mut();
                let glob = globs
                    .entry(pattern)
                    .or_insert_with_key(|p| fnmatch::Pattern::new(p));
                glob.matches(&target)
            }
            MatchMode::Regex => match self.regexes.re_match(&pattern, &target) {
                Ok(matched) => matched,
                Err(err) => {
                    log_regex_error(&pattern, &err);
                    false
                }
            },
        }
    }
}

/// Logs a regex failure the way `subdict_match` does (`Invalid regex '…' in match`), or,
/// for Halite's own runtime limit, says so.
fn log_regex_error(pattern: &str, err: &Error) {
    match err {
        Error::BacktrackLimit { .. } | Error::RegexRuntime { .. } => {
            tracing::error!("Regex '{}' in match failed: {}", pattern, err);
        }
        _ => tracing::error!("Invalid regex '{}' in match", pattern),
    }
}

/// Python `salt.utils.data.traverse_dict_and_list(data, key, {}, delimiter)`; `None` is the
/// default (nothing found).
pub fn traverse_dict_and_list<'v>(
    data: &'v Value,
    key: &str,
    delimiter: &str,
) -> Option<&'v Value> {
    match traverse(Node::Value(data), key, delimiter)? {
        Node::Value(v) => Some(v),
        Node::Dict(_) => Some(data),
    }
}

/// Either a value or the entries of a dict borrowed out of one.
#[derive(Clone, Copy)]
enum Node<'v> {
    Value(&'v Value),
    Dict(&'v [(Value, Value)]),
}

impl<'v> Node<'v> {
    /// The dict entries, or the non-dict value.
    fn dict(self) -> Result<&'v [(Value, Value)], &'v Value> {
        match self {
            Node::Dict(entries) => Ok(entries),
            Node::Value(Value::Map(entries)) => Ok(entries),
            Node::Value(v) => Err(v),
        }
    }
}

fn traverse<'v>(data: Node<'v>, key: &str, delimiter: &str) -> Option<Node<'v>> {
    if delimiter.is_empty() {
        return None;
    }
    let mut ptr = data;
    for each in key.split(delimiter) {
        let next = match ptr.dict() {
            Ok(entries) => lookup_dict(entries, each)?,
            Err(Value::Array(items)) => lookup_list(items, each)?,
            // Python: `str[...]`, `None[...]` and friends raise TypeError.
            Err(_) => return None,
        };
        ptr = Node::Value(next);
    }
    Some(ptr)
}

/// `ptr[each]` on a list: an integer index (negative from the end), or a key of the first
/// embedded dict that has it.
fn lookup_list<'v>(items: &'v [Value], each: &str) -> Option<&'v Value> {
    let Some(idx) = parse_python_int(each) else {
        return items.iter().find_map(|item| match item {
            Value::Map(entries) => pyvalue::dict_get(entries, each),
            _ => None,
        });
    };
    let embedded = items.iter().find_map(|item| match item {
        Value::Map(entries) => pyvalue::dict_get_scalar(entries, Scalar::Int(idx)),
        _ => None,
    });
    if embedded.is_some() {
        return embedded;
    }
    let len = i128::try_from(items.len()).ok()?;
    let pos = if idx < 0 { idx + len } else { idx };
    items.get(usize::try_from(pos).ok()?)
}

/// `ptr[each]` on a dict, with the YAML retry.
fn lookup_dict<'v>(entries: &'v [(Value, Value)], each: &str) -> Option<&'v Value> {
    match pyvalue::dict_get(entries, each) {
        Some(v) => Some(v),
        None => match yamlify_key(each)? {
            YamlKey::Str(s) => pyvalue::dict_get(entries, &s),
            YamlKey::Scalar(k) => pyvalue::dict_get_scalar(entries, k),
        },
    }
}

/// What `salt.utils.args.yamlify_arg` turns a missing dict key into, when that differs
/// from the key itself and can be a dict key.
enum YamlKey {
    Str(String),
    Scalar(Scalar),
}

fn yamlify_key(arg: &str) -> Option<YamlKey> {
    let stripped = arg.trim();
    if matches!(stripped, "" | "---" | "...") {
        return None;
    }
    if arg.contains('_') && stripped.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return None;
    }
    if arg.contains(['\t', '\r', '\n']) {
        return None;
    }
    if arg.contains('#') {
        // Only a non-string, non-null result replaces the argument.
        return match yaml_scalar(strip_yaml_comment(arg))? {
            YamlKey::Scalar(Scalar::None) | YamlKey::Str(_) => None,
            scalar => Some(scalar),
        };
    }
    if arg == "None" {
        return Some(YamlKey::Scalar(Scalar::None));
    }
    match yaml_scalar(arg)? {
        // `yamlify_arg` keeps "|" and "!" (which YAML loads as "") and "!" as None.
        YamlKey::Str(s) if s.is_empty() && matches!(arg, "|" | "!") => None,
        YamlKey::Str(s) if s == arg => None,
        other => Some(other),
    }
}

fn strip_yaml_comment(s: &str) -> &str {
    if s.trim_start().starts_with('#') {
        return "";
    }
    match s.find(" #").or_else(|| s.find("\t#")) {
        Some(i) => &s[..i],
        None => s,
    }
}

/// Loads one flow-free YAML scalar the way Salt's loader does; `None` when the text is not
/// a plain or simply-quoted scalar (collections, tags, anchors, block scalars).
fn yaml_scalar(s: &str) -> Option<YamlKey> {
    let t = s.trim_matches(|c| c == ' ' || c == '\t');
    if let Some(inner) = t.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
        if inner.replace("''", "").contains('\'') {
            return None;
        }
        return Some(YamlKey::Str(inner.replace("''", "'")));
    }
    if let Some(inner) = t.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        if inner.contains(['\\', '"']) {
            return None;
        }
        return Some(YamlKey::Str(inner.to_owned()));
    }
    if t.starts_with(['[', '{', '&', '*', '!', '|', '>', '%', '@', '`', '"', '\''])
        || t.starts_with("- ")
        || t.starts_with("? ")
        || t == "-"
        || t == "?"
        || t.contains(": ")
        || t.ends_with(':')
    {
        return None;
    }
    if matches!(t, "" | "~" | "null" | "Null" | "NULL") {
        return Some(YamlKey::Scalar(Scalar::None));
    }
    match t {
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Some(YamlKey::Scalar(Scalar::Bool(true)))
        }
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Some(YamlKey::Scalar(Scalar::Bool(false)))
        }
        _ => {}
    }
    if yaml_regex(&YAML_INT, YAML_INT_RE)
        .is_match(t)
        .unwrap_or(false)
    {
        return yaml_int(t).map(|n| YamlKey::Scalar(Scalar::Int(n)));
    }
    if yaml_regex(&YAML_FLOAT, YAML_FLOAT_RE)
        .is_match(t)
        .unwrap_or(false)
    {
        return yaml_float(t).map(|f| YamlKey::Scalar(Scalar::Float(f)));
    }
    Some(YamlKey::Str(t.to_owned()))
}

/// PyYAML's implicit resolver for `tag:yaml.org,2002:int` (YAML 1.1).
const YAML_INT_RE: &str = r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$";
/// PyYAML's implicit resolver for `tag:yaml.org,2002:float` (YAML 1.1).
const YAML_FLOAT_RE: &str = r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$";

// Constant patterns compiled once; they hold no mutable state.
static YAML_INT: OnceLock<Option<fancy_regex::Regex>> = OnceLock::new();
static YAML_FLOAT: OnceLock<Option<fancy_regex::Regex>> = OnceLock::new();

fn yaml_regex(cell: &'static OnceLock<Option<fancy_regex::Regex>>, pattern: &str) -> YamlMatcher {
    YamlMatcher(
        cell.get_or_init(|| fancy_regex::Regex::new(pattern).ok())
            .as_ref(),
    )
}

struct YamlMatcher(Option<&'static fancy_regex::Regex>);

impl YamlMatcher {
    fn is_match(&self, text: &str) -> Result<bool, ()> {
        match self.0 {
            Some(re) => re.is_match(text).map_err(|_| ()),
            None => Err(()),
        }
    }
}

/// PyYAML `construct_yaml_int` with Salt's twist: unsigned leading zeros mean decimal.
fn yaml_int(t: &str) -> Option<i128> {
    let mut value = t.replace('_', "");
    if value != "0"
        && value.starts_with('0')
        && !value.starts_with("0b")
        && !value.starts_with("0x")
    {
        value = value.trim_start_matches('0').to_owned();
        if value.is_empty() {
            value = "0".to_owned();
        }
    }
    let (sign, digits) = match value.as_bytes().first() {
        Some(b'-') => (-1, &value[1..]),
        Some(b'+') => (1, &value[1..]),
        _ => (1, value.as_str()),
    };
    let magnitude = if digits == "0" {
        0
    } else if let Some(bin) = digits.strip_prefix("0b") {
        i128::from_str_radix(bin, 2).ok()?
    } else if let Some(hex) = digits.strip_prefix("0x") {
        i128::from_str_radix(hex, 16).ok()?
    } else if digits.starts_with('0') {
        i128::from_str_radix(digits, 8).ok()?
    } else if digits.contains(':') {
        sexagesimal(digits)?.round() as i128
    } else {
        digits.parse::<i128>().ok()?
    };
    Some(sign * magnitude)
}

/// PyYAML `construct_yaml_float`.
fn yaml_float(t: &str) -> Option<f64> {
    let value = t.replace('_', "").to_lowercase();
    let (sign, digits) = match value.as_bytes().first() {
        Some(b'-') => (-1.0, &value[1..]),
        Some(b'+') => (1.0, &value[1..]),
        _ => (1.0, value.as_str()),
    };
    let magnitude = match digits {
        ".inf" => f64::INFINITY,
        ".nan" => return Some(f64::NAN),
        d if d.contains(':') => sexagesimal(d)?,
        d => d.parse::<f64>().ok()?,
    };
    Some(sign * magnitude)
}

fn sexagesimal(digits: &str) -> Option<f64> {
    let mut value = 0.0;
    for part in digits.split(':') {
        value = value * 60.0 + part.parse::<f64>().ok()?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::json;

    /// `(data as JSON, expr, mode, subdict_match(...))`, sampled from randomised runs of
    /// Salt 3008.3's `salt.utils.data.subdict_match` with the default `:` delimiter.
    const SUBDICT_CASES: &[(&str, &str, MatchMode, bool)] = &[
        ("{\"none\": \"5\", \"*\": -3, \"80\": [], \"k\": [{\"true\": 1.5, \"0\": \"1.0\"}, \"prod*\", {\"none\": \"\"}]}", "*:80", MatchMode::Glob, true),
        ("{\"x:y\": {\"a\": \"it's\", \"x:y\": {\"os\": \"x:y\"}}, \"a\": \"q\\\"uote\", \"Web\": [\"x:y\", [\"tab\\tx\", \"a:b\"], {\"true\": false, \"1\": 5}]}", "Web:x:y", MatchMode::Glob, true),
        ("{\"Web\": 0, \"true\": \"x:y\"}", "*:true", MatchMode::Glob, true),
        ("{\"a\": [[\"RedHat\", 5], [], 2.5e-07], \"0\": {\"true\": \"\", \"80\": {\"x:y\": \"tab\\tx\", \"0\": \"a:b\", \"none\": \"1.0\"}}, \"1\": {\"true\": {\"k\": \"\", \"80\": 1.5, \"0\": \"it's\"}}}", "0:true:*", MatchMode::Regex, true),
        ("{\"1\": {\"os\": {\"none\": 1.5, \"x:y\": \"a:b\"}, \"k\": [\"\u{dc}n\u{ef}\", \"web\"], \"1\": true}}", "*:1:1:True", MatchMode::Regex, true),
        ("{\"true\": -3, \"80\": {\"1\": [null, \"q\\\"uote\", \"it's\"], \"b\": [5, \"q\\\"uote\", \"WEB1\"], \"A\": {\"*\": \"WEB1\", \"x:y\": \"web\", \"a\": \"WEB1\"}}, \"1\": \"it's\"}", "1:IT'S", MatchMode::Exact, true),
        ("{\"1\": \"1.0\", \"A\": \"web\"}", "A:w?b", MatchMode::Glob, true),
        ("{\"80\": 2.5e-07, \"k\": \"a:b\", \"*\": \"tab\\tx\"}", "*:k:a:*", MatchMode::Glob, true),
        ("{\"80\": \"\", \"A\": {\"true\": \"\"}, \"none\": 0}", "80:0*", MatchMode::Regex, true),
        ("{\"none\": {}, \"true\": {\"os\": {\"x:y\": 1.5}, \"1\": -3}, \"os\": \"it's\"}", "*:it's", MatchMode::Regex, true),
        ("{\"true\": \"5\", \"a\": 2.5e-07}", "*:true:5", MatchMode::Regex, true),
        ("{\"k\": {\"x:y\": false, \"true\": {}}, \"0\": [{\"k\": null, \"1\": 1e+20}, {\"k\": 0, \"0\": \"\", \"Web\": \"\"}]}", "0:1:0:*", MatchMode::Regex, true),
        ("{\"b\": \"prod*\", \"os\": [\"x:y\"], \"none\": [{}, [false, null], true]}", "b:prod*", MatchMode::Exact, true),
        ("{\"os\": \"RedHat\", \"A\": {\"k\": [\"a:b\", \"x:y\"]}}", "*:A:k:0:a:*", MatchMode::Regex, true),
        ("{\"0\": {\"Web\": \"a:b\", \"*\": {}}, \"80\": {\"A\": {\"k\": 5, \"A\": 2.5e-07}, \"0\": \"it's\"}, \"a\": {\"k\": [\"q\\\"uote\", 2.5e-07]}, \"none\": []}", "80:A:A:2.*", MatchMode::Regex, true),
        ("{\"a\": 2.5e-07, \"Web\": null}", "Web:None", MatchMode::Glob, true),
        ("{\"0\": {\"none\": {\"true\": \"5\", \"a\": false, \"none\": \"\"}}, \"Web\": \"tab\\tx\", \"A\": \"\", \"b\": {\"0\": {\"A\": \"web\", \"os\": \"\u{dc}n\u{ef}\"}, \"os\": \"RedHat\"}}", "Web:TAB\tX", MatchMode::Exact, true),
        ("{\"os\": {}, \"none\": [{}, true, [\"q\\\"uote\", 1.5]]}", "none:Tr*", MatchMode::Regex, true),
        ("{\"k\": 5, \"a\": {}, \"1\": {\"0\": {\"1\": true}}}", "1:0:1:True", MatchMode::Exact, true),
        ("{\"1\": \"5\"}", "*:1:5", MatchMode::Glob, true),
        ("{\"80\": \"it's\", \"A\": null, \"none\": {\"b\": [null], \"0\": null, \"none\": 2.5e-07}}", "none:b:0:none", MatchMode::Regex, true),
        ("{\"80\": {\"true\": [0], \"80\": {\"os\": \"\u{dc}n\u{ef}\"}, \"1\": {\"k\": \"1.0\", \"os\": \"prod*\"}}, \"x:y\": {\"*\": \"q\\\"uote\"}, \"1\": []}", "*:80", MatchMode::Regex, true),
        ("{\"A\": {\"none\": \"q\\\"uote\", \"true\": \"it's\", \"b\": [0, \"5\"]}, \"Web\": {\"A\": [], \"none\": true, \"x:y\": [false, \"\"]}, \"*\": {}}", "A:none:Q\"UOTE", MatchMode::Regex, true),
        ("{\"*\": \"WEB1\"}", "*:web1", MatchMode::Regex, true),
        ("{\"k\": {\"os\": \"WEB1\", \"80\": [], \"none\": \"1.0\"}, \"1\": true}", "k:os:web1", MatchMode::Exact, true),
        ("{\"b\": \"x:y\", \"true\": {\"k\": {\"none\": \"prod*\", \"a\": 5}}, \"0\": {\"k\": 0, \"1\": {\"Web\": \"tab\\tx\"}}, \"A\": {\"k\": \"tab\\tx\", \"1\": 1.5}}", "true:k:a:5", MatchMode::Exact, true),
        ("{\"80\": \"1.0\", \"k\": [{\"a\": \"\u{dc}n\u{ef}\", \"b\": \"prod*\"}, [], null]}", "*:80:*0", MatchMode::Glob, true),
        ("[\"x:y\", 0]", "1:0*", MatchMode::Glob, true),
        ("{\"Web\": \"5\", \"0\": {}, \"none\": {\"*\": \"prod*\", \"a\": \"prod*\"}, \"a\": 1.5}", "Web:5*", MatchMode::Glob, true),
        ("{\"true\": \"RedHat\", \"k\": \"5\"}", "k:5*", MatchMode::Regex, true),
        ("{\"80\": {\"*\": [\"tab\\tx\"], \"k\": \"\"}, \"true\": {\"80\": \"q\\\"uote\", \"Web\": []}}", "true:80:q\"uote", MatchMode::Regex, true),
        ("{\"*\": 5, \"os\": -3}", "*:os", MatchMode::Exact, true),
        ("{\"os\": {\"a\": 1.5, \"k\": \"it's\"}, \"80\": {}}", "os:k:IT'S", MatchMode::Regex, true),
        ("{\"80\": \"it's\"}", "*:80:it's", MatchMode::Glob, true),
        ("{\"Web\": \"\u{dc}n\u{ef}\", \"none\": [{\"80\": 1e+20}, \"RedHat\"], \"k\": false}", "none:0:80", MatchMode::Exact, true),
        ("{\"0\": \"tab\\tx\", \"true\": {\"1\": [5, \"RedHat\", 1e+20], \"none\": \"a:b\", \"os\": \"q\\\"uote\"}}", "true:os:Q\"UOTE", MatchMode::Glob, true),
        ("{\"Web\": [{\"1\": \"tab\\tx\"}, [5, false], [\"it's\", 5, false]], \"0\": [\"it's\", {\"true\": \"WEB1\", \"1\": 0}], \"true\": \"RedHat\", \"k\": null}", "Web:0:1:tab\tx", MatchMode::Exact, true),
        ("{\"0\": \"\u{dc}n\u{ef}\"}", "0:\u{dc}n\u{ef}", MatchMode::Exact, true),
        ("{\"A\": [{}, {\"x:y\": \"WEB1\"}], \"1\": \"\", \"0\": false, \"Web\": \"\"}", "Web:", MatchMode::Regex, true),
        ("{\"0\": {\"none\": []}, \"a\": {}, \"A\": []}", "0:none:*", MatchMode::Regex, true),
        ("{\"os\": {\"none\": {}, \"os\": [\"x:y\", null]}, \"80\": \"5\", \"none\": [[\"1.0\", \"it's\"], 1.5, [true, \"\", \"web\"]], \"a\": {\"*\": {\"a\": \"x:y\", \"Web\": \"\u{dc}n\u{ef}\", \"true\": 0}}}", "*:80:5*", MatchMode::Glob, true),
        ("{\"A\": \"prod*\"}", "A:**", MatchMode::Glob, true),
        ("{\"*\": [{\"0\": \"RedHat\", \"x:y\": \"\", \"a\": \"prod*\"}, {\"80\": \"q\\\"uote\", \"1\": 2.5e-07}], \"x:y\": [\"tab\\tx\", [\"5\"], 1.5], \"80\": [{\"os\": 1.5, \"80\": 1.5}]}", "*:1", MatchMode::Regex, true),
        ("{\"1\": {\"none\": {}}, \"*\": 1e+20, \"none\": \"RedHat\", \"Web\": \"tab\\tx\"}", "*:*:1E+20", MatchMode::Glob, true),
        ("{\"A\": \"WEB1\"}", "*:A:WEB1", MatchMode::Exact, true),
        ("{\"true\": {\"k\": [\"q\\\"uote\", \"tab\\tx\"]}, \"Web\": {}, \"k\": [{\"true\": 5, \"1\": null, \"80\": \"q\\\"uote\"}, [true, 5, null], [\"RedHat\", 2.5e-07]]}", "Web:(", MatchMode::Glob, false),
        ("[1e+20]", "*:*", MatchMode::Glob, false),
        ("{\"true\": \"1.0\"}", "-1:\u{fc}n\u{ef}", MatchMode::Glob, false),
        ("{\"none\": 1e+20, \"true\": 1.5}", "true:1.*", MatchMode::Exact, false),
        ("{\"b\": \"tab\\tx\"}", "x", MatchMode::Regex, false),
        ("{\"true\": [{}, -3, {}], \"1\": \"WEB1\"}", "*:true:(", MatchMode::Regex, false),
        ("{\"1\": \"tab\\tx\", \"true\": {\"80\": 2.5e-07, \"b\": [0, 1e+20], \"a\": []}}", "\\D+:none:1.5:a", MatchMode::Glob, false),
        ("{\"x:y\": {\"true\": [\"web\", null], \"b\": -3}, \"A\": [\"q\\\"uote\"], \"b\": 1.5}", "os:1.5", MatchMode::Exact, false),
        ("{\"80\": {}}", "80:none", MatchMode::Glob, false),
        ("{\"a\": [{\"os\": \"q\\\"uote\", \"none\": \"WEB1\"}]}", "(:re.*", MatchMode::Exact, false),
        ("\"x:y\"", "A", MatchMode::Regex, false),
        ("{\"1\": {\"A\": {\"none\": \"it's\", \"x:y\": null, \"k\": \"prod*\"}, \"x:y\": {}, \"Web\": null}, \"A\": \"1.0\", \"a\": [[true, 1.5, \"WEB1\"], [\"\", \"a:b\", 2.5e-07]]}", "1:x:y:web", MatchMode::Regex, false),
        ("{\"k\": {\"b\": \"it's\", \"A\": {\"Web\": \"a:b\", \"0\": \"5\", \"*\": true}}}", "k:A:0:x", MatchMode::Regex, false),
        ("{\"A\": \"a:b\", \"80\": {\"A\": \"a:b\"}, \"0\": 1e+20, \"os\": {}}", "y:0:Web", MatchMode::Glob, false),
        ("false", "1.5:WEB*:1e+20:1", MatchMode::Glob, false),
        ("{\"Web\": {\"Web\": {\"os\": \"5\"}, \"A\": {}, \"0\": {\"none\": 5, \"1\": true, \"k\": 2.5e-07}}, \"0\": {}, \"80\": [[\"5\", 2.5e-07, 0]]}", "\\S+::1.5", MatchMode::Glob, false),
        ("[]", "2.5e-07", MatchMode::Exact, false),
        ("{\"*\": {\"80\": {\"none\": \"RedHat\", \"b\": \"\"}, \"k\": {\"os\": \"q\\\"uote\"}}, \"x:y\": {\"os\": []}}", "*:k:b:c", MatchMode::Exact, false),
        ("{\"true\": \"web\", \"a\": {\"0\": {\"k\": \"WEB1\"}, \"a\": [\"\u{dc}n\u{ef}\"]}, \"80\": \"it's\"}", "5:none:b:c:5", MatchMode::Regex, false),
        ("{\"0\": [{\"none\": \"web\"}, [-3], {\"80\": 0}], \"b\": {\"Web\": {\"Web\": false, \"none\": 0, \"A\": \"a:b\"}, \"k\": {\"0\": -3, \"x:y\": \"1.0\"}, \"0\": null}, \"a\": {}}", "WEB*:A:0", MatchMode::Regex, false),
        ("{\"x:y\": {\"x:y\": {}, \"1\": {\"k\": null}}, \"true\": -3}", "*:x:y:x:y:5", MatchMode::Exact, false),
        ("{\"none\": {\"1\": [\"web\", \"WEB1\"], \"b\": 5, \"none\": {}}, \"a\": [[\"5\", 2.5e-07], {\"b\": \"it's\"}], \"Web\": \"web\"}", "a:1:2.5e-07", MatchMode::Regex, false),
        ("{\"1\": [{\"*\": 0, \"1\": \"a:b\", \"x:y\": \"web\"}]}", "1e+20", MatchMode::Regex, false),
        ("{\"k\": \"prod*\", \"x:y\": {\"k\": {\"b\": false, \"x:y\": 1.5}, \"1\": [1e+20, \"a:b\", \"prod*\"]}, \"Web\": -3}", "80", MatchMode::Glob, false),
        ("false", "*e", MatchMode::Regex, false),
        ("\"prod*\"", "1", MatchMode::Exact, false),
        ("\"5\"", "5", MatchMode::Glob, false),
        ("1e+20", "*:1e+20", MatchMode::Glob, false),
        ("\"\"", "-1", MatchMode::Regex, false),
        ("{\"true\": [\"\u{dc}n\u{ef}\", true, {\"80\": null}], \"*\": \"5\", \"os\": [-3, {\"x:y\": \"q\\\"uote\", \"80\": \"RedHat\", \"true\": \"\"}]}", "2.5e-07", MatchMode::Exact, false),
        ("[2.5e-07, {}]", "2.5e-07", MatchMode::Glob, false),
        ("{\"0\": [[-3]], \"1\": [{\"none\": \"WEB1\", \"k\": \"RedHat\"}]}", "*:0:-3", MatchMode::Regex, false),
        ("{\"x:y\": [\"tab\\tx\"], \"1\": \"1.0\", \"*\": {\"A\": \"\u{dc}n\u{ef}\", \"0\": []}}", "*:a:0:v", MatchMode::Glob, false),
        ("{\"b\": \"q\\\"uote\", \"1\": 1.5}", "w?b:os:Web:b", MatchMode::Exact, false),
        ("{\"0\": []}", "A:2.5e-07:1.5:(", MatchMode::Exact, false),
        ("{\"a\": \"tab\\tx\", \"k\": {}, \"0\": {\"A\": \"prod*\"}}", "*:k:\\D+", MatchMode::Glob, false),
        ("{\"Web\": {\"80\": [2.5e-07, \"q\\\"uote\"], \"A\": {\"A\": 0, \"80\": -3}, \"true\": {\"Web\": \"prod*\"}}, \"*\": \"x:y\"}", "2.5e-07:*", MatchMode::Glob, false),
        ("{\"*\": {\"b\": {\"os\": 1e+20, \"1\": \"\u{dc}n\u{ef}\", \"Web\": true}, \"x:y\": \"q\\\"uote\", \"os\": [\"prod*\"]}, \"80\": -3, \"os\": {\"A\": [\"a:b\"]}}", "5", MatchMode::Glob, false),
        ("{\"*\": {\"b\": []}, \"0\": [{}, {\"a\": \"\"}, 5], \"b\": {}, \"x:y\": \"prod*\"}", "*:*:b:1", MatchMode::Exact, false),
        ("{\"Web\": {\"k\": \"5\", \"1\": {\"none\": false}, \"a\": 2.5e-07}, \"0\": [{\"*\": null, \"80\": 5}], \"true\": {}}", "0:b:c", MatchMode::Glob, false),
        ("{\"os\": {}, \"k\": [], \"1\": {}}", "(", MatchMode::Glob, false),
        ("[{\"x:y\": \"web\"}, false]", "\\D+:[rw]*", MatchMode::Regex, false),
        ("{\"Web\": \"q\\\"uote\", \"x:y\": [{\"true\": \"it's\"}]}", "b:q\"*", MatchMode::Regex, false),
        ("{\"1\": {\"Web\": {\"80\": -3, \"k\": true}}, \"b\": {}}", "os", MatchMode::Exact, false),
        ("{\"Web\": {\"*\": {}, \"x:y\": true, \"80\": {\"k\": true}}, \"none\": \"prod*\"}", "\\D+", MatchMode::Glob, false),
    ];

    #[test]
    fn agrees_with_salt_on_sampled_cases() {
        let regexes = RegexCache::default();
        let failures: Vec<String> = SUBDICT_CASES
            .iter()
            .filter(|&&(data, expr, mode, want)| {
                subdict_match(&json(data), expr, ":", mode, &regexes) != want
            })
            .map(|(data, expr, mode, want)| {
                format!("{expr:?} {mode:?} on {data}: Salt says {want}")
            })
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    macro_rules! subdict {
        ($name:ident, $data:expr, $expr:expr, $mode:ident, $want:expr) => {
            #[test]
            fn $name() {
                let regexes = RegexCache::default();
                assert_eq!(
                    subdict_match(&json($data), $expr, ":", MatchMode::$mode, &regexes),
                    $want
                );
            }
        };
    }

    subdict!(
        value_may_contain_the_delimiter,
        r#"{"colon": "x:y"}"#,
        "colon:x:y",
        Glob,
        true
    );
    subdict!(
        deepest_key_is_tried_first,
        r#"{"a": {"b": "c"}}"#,
        "a:b:c",
        Glob,
        true
    );
    subdict!(
        shallower_key_is_tried_next,
        r#"{"a": "b:c"}"#,
        "a:b:c",
        Glob,
        true
    );
    subdict!(
        star_key_means_any_top_level_value,
        r#"{"role": ["db", "web"]}"#,
        "*:web",
        Glob,
        true
    );
    subdict!(
        list_member_matches,
        r#"{"role": ["web", "frontend"]}"#,
        "role:web",
        Glob,
        true
    );
    subdict!(
        dict_member_of_list_is_searched,
        r#"{"lst": [{"k": "v"}]}"#,
        "lst:k",
        Glob,
        true
    );
    subdict!(
        nested_key_existence_matches,
        r#"{"nested": {"a": {"b": 1}}}"#,
        "nested:a:b",
        Glob,
        true
    );
    subdict!(
        empty_dict_is_skipped,
        r#"{"nested": {}}"#,
        "nested:*",
        Glob,
        false
    );
    subdict!(
        glob_is_case_insensitive,
        r#"{"os": "RedHat"}"#,
        "os:redhat",
        Glob,
        true
    );
    subdict!(
        pattern_is_lowercased_too,
        r#"{"os": "redhat"}"#,
        "os:Red*",
        Glob,
        true
    );
    subdict!(
        booleans_compare_as_python_prints_them,
        r#"{"flag": false}"#,
        "flag:False",
        Glob,
        true
    );
    subdict!(
        none_compares_as_none,
        r#"{"none": null}"#,
        "none:none",
        Glob,
        true
    );
    subdict!(
        integers_compare_as_text,
        r#"{"num": 5}"#,
        "num:5",
        Glob,
        true
    );
    subdict!(
        floats_compare_as_python_repr,
        r#"{"ver": 1e20}"#,
        "ver:1e+20",
        Glob,
        true
    );
    subdict!(
        regex_is_start_anchored,
        r#"{"os": "RedHat"}"#,
        "os:hat",
        Regex,
        false
    );
    subdict!(
        lowercased_regex_turns_big_s_into_whitespace,
        r#"{"os": "RedHat"}"#,
        r"os:\S+",
        Regex,
        false
    );
    subdict!(
        lowercased_regex_turns_big_d_into_digit,
        r#"{"os": "Debian"}"#,
        r"os:\D+",
        Regex,
        false
    );
    subdict!(
        regex_alternation_matches,
        r#"{"os": "CentOS"}"#,
        "os:(RedHat|CentOS)",
        Regex,
        true
    );
    subdict!(
        invalid_regex_does_not_match,
        r#"{"os": "("}"#,
        "os:(",
        Regex,
        false
    );
    subdict!(
        exact_mode_takes_glob_characters_literally,
        r#"{"env": "production"}"#,
        "env:prod*",
        Exact,
        false
    );
    subdict!(
        exact_mode_matches_the_literal_star,
        r#"{"env": "prod*"}"#,
        "env:prod*",
        Exact,
        true
    );
    subdict!(
        exact_mode_is_case_insensitive,
        r#"{"env": "prod"}"#,
        "env:PROD",
        Exact,
        true
    );
    subdict!(
        no_delimiter_never_matches,
        r#"{"os": "RedHat"}"#,
        "os",
        Glob,
        false
    );
    subdict!(
        list_index_selects_a_member,
        r#"{"lst": ["a", "b"]}"#,
        "lst:1:b",
        Glob,
        true
    );
    subdict!(
        negative_list_index_counts_from_the_end,
        r#"{"lst": ["a", "b"]}"#,
        "lst:-1:b",
        Glob,
        true
    );
    subdict!(
        wildcard_prefix_reaches_keys_one_level_down,
        r#"{"app": {"tier": "front"}}"#,
        "*:tier",
        Glob,
        true
    );
    subdict!(
        wildcard_prefix_does_not_reach_values_two_levels_down,
        r#"{"app": {"tier": "front"}}"#,
        "*:front",
        Glob,
        false
    );

    #[test]
    fn numeric_key_is_found_through_yaml() {
        let regexes = RegexCache::default();
        let data = Value::Map(vec![(
            Value::from("ports"),
            Value::Map(vec![(Value::from(80), Value::from("http"))]),
        )]);
        assert!(subdict_match(
            &data,
            "ports:80:http",
            ":",
            MatchMode::Glob,
            &regexes
        ));
        assert!(!subdict_match(
            &data,
            "ports:81:http",
            ":",
            MatchMode::Glob,
            &regexes
        ));
    }

    #[test]
    fn boolean_and_null_keys_are_found_through_yaml() {
        let data = Value::Map(vec![
            (Value::Boolean(true), Value::from("yes")),
            (Value::Nil, Value::from("nothing")),
        ]);
        assert_eq!(
            traverse_dict_and_list(&data, "on", ":"),
            Some(&Value::from("yes"))
        );
        assert_eq!(
            traverse_dict_and_list(&data, "1", ":"),
            Some(&Value::from("yes"))
        );
        assert_eq!(
            traverse_dict_and_list(&data, "~", ":"),
            Some(&Value::from("nothing"))
        );
        assert_eq!(
            traverse_dict_and_list(&data, "None", ":"),
            Some(&Value::from("nothing"))
        );
        assert_eq!(traverse_dict_and_list(&data, "nope", ":"), None);
    }

    #[test]
    fn custom_delimiter_splits_the_path() {
        let regexes = RegexCache::default();
        let data = json(r#"{"a": {"b": "c:d"}}"#);
        assert!(subdict_match(
            &data,
            "a|b|c:d",
            "|",
            MatchMode::Glob,
            &regexes
        ));
        assert!(!subdict_match(
            &data,
            "a:b:c:d",
            "|",
            MatchMode::Glob,
            &regexes
        ));
    }

    #[test]
    fn empty_delimiter_never_matches() {
        let regexes = RegexCache::default();
        assert!(!subdict_match(
            &json(r#"{"a": "b"}"#),
            "a:b",
            "",
            MatchMode::Glob,
            &regexes
        ));
    }

    #[test]
    fn deeply_nested_data_stops_at_the_depth_limit() {
        let regexes = RegexCache::default();
        let mut data = Value::from("x");
        for _ in 0..200 {
            data = Value::Map(vec![(Value::from("a"), data)]);
        }
        let expr = format!("*:{}", "*:".repeat(300));
        assert!(!subdict_match(&data, &expr, ":", MatchMode::Glob, &regexes));
    }
}
