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
//! `int()` accepts non-ASCII digits where this accepts ASCII only. Recursion stops at
//! [`MAX_DEPTH`] levels (a hostile pattern against deeply nested data would otherwise make
//! Python recurse until its own limit).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

use rmpv::Value;

use crate::fnmatch;
use crate::pyre::{parse_python_int, RegexCache};
use crate::pyvalue::{self, Scalar};
use crate::Error;

/// Nesting depth at which matching gives up (returns no match).
pub const MAX_DEPTH: usize = 64;

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
}

impl<'a> SubdictMatcher<'a> {
    /// Prepares `expr` (for example `os:RedHat`) split on `delimiter`.
    pub fn new(expr: &'a str, delimiter: &'a str, mode: MatchMode, regexes: &'a RegexCache) -> Self {
        Self {
            expr,
            delimiter,
            mode,
            regexes,
            globs: RefCell::new(HashMap::new()),
        }
    }

    /// Whether `data` (a minion's grains or pillar) matches.
    pub fn matches(&self, data: &Value) -> bool {
        if self.delimiter.is_empty() {
            return false;
        }
        self.subdict(Node::Value(data), self.expr, self.delimiter, 0)
    }

    fn subdict(&self, data: Node<'_>, expr: &str, delimiter: &str, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        // Byte offsets of the delimiters, i.e. the boundaries of Python's `expr.split()`.
        let cuts: Vec<usize> = expr.match_indices(delimiter).map(|(i, _)| i).collect();
        for &cut in cuts.iter().rev() {
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
        if depth > MAX_DEPTH {
            return false;
        }
        let (wildcard, pattern) = match pattern.strip_prefix("*:") {
            Some(rest) => (true, rest),
            None => (false, pattern),
        };
        if pattern == "*" || pyvalue::dict_get(target, pattern).is_some() {
            return true;
        }
        if target.iter().any(|(key, _)| self.scalar_match(key, pattern)) {
            return true;
        }
        // Nested paths use the default delimiter, whatever the expression's was.
        if self.subdict(Node::Dict(target), pattern, crate::DEFAULT_DELIMITER, depth + 1) {
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
pub fn traverse_dict_and_list<'v>(data: &'v Value, key: &str, delimiter: &str) -> Option<&'v Value> {
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
    if yaml_regex(&YAML_INT, YAML_INT_RE).is_match(t).unwrap_or(false) {
        return yaml_int(t).map(|n| YamlKey::Scalar(Scalar::Int(n)));
    }
    if yaml_regex(&YAML_FLOAT, YAML_FLOAT_RE).is_match(t).unwrap_or(false) {
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

fn yaml_regex(
    cell: &'static OnceLock<Option<fancy_regex::Regex>>,
    pattern: &str,
) -> YamlMatcher {
    YamlMatcher(cell.get_or_init(|| fancy_regex::Regex::new(pattern).ok()).as_ref())
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
    if value != "0" && value.starts_with('0') && !value.starts_with("0b") && !value.starts_with("0x") {
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
